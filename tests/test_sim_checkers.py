"""Checkers name planted anomalies, and say nothing about clean histories."""

from __future__ import annotations

from dataclasses import replace

import pytest

from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.namespaces import ResourceType
from sim import checkers, scenario
from sim.history import History, Op, Poll, Send
from sim.store import PartitionStore, StoredBatch


def send(value: str, offset: int, cluster: str = "A", reserved: bool = False) -> Op:
    return Op(
        "p", "source_producer", cluster, "ok", 0, 1, Send("t", 0, value, offset), "", reserved
    )


def poll(records: list[tuple[int, str]], session: int = 0) -> Op:
    return Op(
        "c",
        "source_consumer",
        "A",
        "ok",
        0,
        1,
        Poll("t", tuple((0, o, v) for o, v in records), session),
    )


def test_lost_write__acknowledged_value_missing() -> None:
    h = History([send("x", 0), send("y", 1)])
    final = {("A", "t", 0): {0: "x"}}
    found = checkers.check_lost_writes(h, final, {})
    assert [v.invariant for v in found] == ["lost_write"]
    assert "'y'" in found[0].detail


def test_lost_write__excused_by_a_reported_truncation() -> None:
    h = History([send("x", 0), send("y", 1)])
    assert checkers.check_lost_writes(h, {("A", "t", 0): {0: "x"}}, {("A", "t", 0): [1]}) == []


def test_lost_write__a_cut_made_before_the_send_excuses_nothing() -> None:
    """A partition cut at 1 (t=5), then 'y' acknowledged at offset 2
    (sent at t=10): a later loss of 'y' is not that cut's doing. Only a cut
    made after the send began can have removed it."""
    late = Op("p", "source_producer", "A", "ok", 10, 11, Send("t", 0, "y", 2))
    h = History([send("x", 0), late])
    final = {("A", "t", 0): {0: "x", 1: "z"}}
    key = ("A", "t", 0)
    earlier = {key: [checkers.CutEvent(5, 1, False)]}
    found = checkers.check_lost_writes(h, final, {key: [1]}, cut_events=earlier)
    assert [v.invariant for v in found] == ["lost_write"] and "'y'" in found[0].detail
    later = {key: [checkers.CutEvent(5, 1, False), checkers.CutEvent(20, 2, True)]}
    assert checkers.check_lost_writes(h, final, {key: [1, 2]}, cut_events=later) == []
    # Without times, any cut at or below the offset excuses (chaos's provenance cuts).
    assert checkers.check_lost_writes(h, final, {key: [1]}) == []


def test_duplicate__one_value_at_two_offsets() -> None:
    found = checkers.check_duplicates({("A", "t", 0): {0: "x", 1: "y", 2: "x"}})
    assert [v.invariant for v in found] == ["duplicate"]


def test_skip_and_nonmonotonic__within_a_session() -> None:
    final = {("A", "t", 0): {0: "a", 1: "b", 2: "c", 3: "d"}}
    skipped = History([poll([(0, "a")]), poll([(2, "c")])])
    assert [v.invariant for v in checkers.check_consumers(skipped, final)] == ["skip"]
    backwards = History([poll([(0, "a"), (1, "b")]), poll([(1, "b")])])
    assert [v.invariant for v in checkers.check_consumers(backwards, final)] == ["nonmonotonic"]
    new_session = History([poll([(0, "a"), (1, "b")]), poll([(0, "a")], session=1)])
    assert checkers.check_consumers(new_session, final) == []


def test_skip__a_read_committed_reader_passes_over_what_the_cluster_aborted() -> None:
    """B's failover aborted a replicated transaction its source had committed
    (the commit marker never arrived): a read_committed reader of B passes
    over those offsets, a read_uncommitted one must not."""
    final = {("A", "t", 0): {0: "a", 1: "b", 2: "c"}}
    hidden = {("A", "t", 0): {1}}

    def reader(committed: bool) -> History:
        return History([
            Op("c", "target_consumer", "A", "ok", 0, 1,
               Poll("t", ((0, 0, "a"),), 0, committed)),
            Op("c", "target_consumer", "A", "ok", 2, 3,
               Poll("t", ((0, 2, "c"),), 0, committed)),
        ])  # fmt: skip

    assert checkers.check_consumers(reader(True), final, None, hidden) == []
    assert [v.invariant for v in checkers.check_consumers(reader(False), final, None, hidden)] == [
        "skip"
    ]
    assert [v.invariant for v in checkers.check_consumers(reader(True), final)] == ["skip"]


def test_reserved_write__named() -> None:
    found = checkers.check_reserved_writes(History([send("x", 0, reserved=True)]))
    assert [v.invariant for v in found] == ["3 reserved namespace"]


def _store(values: list[bytes]) -> PartitionStore:
    s = PartitionStore()
    for i, v in enumerate(values):
        batch = rb.build_batch([rb.RecordSpec(None, v, 0)], base_offset=i)
        s.append(StoredBatch(i, i + 1, batch, 1))
    return s


def test_offset_identity_and_prefix__planted_divergence() -> None:
    source = _store([b"a", b"b"])
    same = _store([b"a", b"b"])
    assert checkers.check_follower_log("B", "t", 0, same, 2, "A", "t", source, 0) == []
    differs = _store([b"a", b"X"])
    found = checkers.check_follower_log("B", "t", 0, differs, 2, "A", "t", source, 0)
    assert [v.invariant for v in found] == ["1 offset identity"]
    longer = _store([b"a", b"b", b"c"])
    found = checkers.check_follower_log("B", "t", 0, longer, 3, "A", "t", source, 0)
    assert [v.invariant for v in found] == ["2 prefix"]


def test_scenario_errors_name_the_key_and_value() -> None:
    with pytest.raises(scenario.ScenarioError, match="unknown key 'latency'"):
        scenario.parse({"name": "x", "network": {"latency": 3}})
    with pytest.raises(scenario.ScenarioError, match=r"latency_ms = 'fast' is not an integer"):
        scenario.parse({"name": "x", "network": {"latency_ms": "fast"}})
    with pytest.raises(scenario.ScenarioError, match="kind = 'ouch'"):
        scenario.parse({"name": "x", "faults": [{"at_ms": 1, "kind": "ouch"}]})
    # The network fault once called "partition" (a Kafka word) is "split".
    renamed = {"at_ms": 1, "kind": "partition", "side_a": ["A"], "side_b": ["B"]}
    with pytest.raises(scenario.ScenarioError, match="kind = 'partition' is now 'split'"):
        scenario.parse({"name": "x", "faults": [renamed]})
    with pytest.raises(scenario.ScenarioError, match="'Z' is not a cluster"):
        scenario.parse({"name": "x", "faults": [{"at_ms": 1, "kind": "isolate", "node": "Z"}]})
    with pytest.raises(ValueError, match="unknown parameter"):
        scenario.apply_params(scenario.load("failover-writable"), {"warp_speed": 9})


# -- invariants 4 and 5 (SYNC links) -------------------------------------------------------


def sync_send(value: str, offset: int, witness_end: int, txn: str = "", partition: int = 0) -> Op:
    return Op(
        "p",
        "source_producer",
        "A",
        "ok",
        0,
        1,
        Send("t", partition, value, offset, txn=txn, sync_witnesses=(("B", "t", witness_end),)),
    )


def test_sync_ack_not_replicated__acknowledged_in_sync_before_the_follower_held_it() -> None:
    h = History([sync_send("x", 0, witness_end=1), sync_send("y", 1, witness_end=1)])
    found = checkers.check_sync_acks(h)
    assert [v.invariant for v in found] == ["sync_ack_not_replicated"]
    assert "'y'" in found[0].detail and "follower B" in found[0].detail


def test_sync_ack_lost__after_failover_the_follower_lacks_an_in_sync_acknowledgement() -> None:
    h = History([sync_send("x", 0, witness_end=1), sync_send("y", 1, witness_end=2)])
    final = {("B", "t", 0): {0: "x", 1: "z"}}  # B promoted, then overwrote offset 1
    found = checkers.check_sync_acks_kept(h, final, {})
    assert [v.invariant for v in found] == ["sync_ack_lost"]
    assert "'y'" in found[0].detail
    assert checkers.check_sync_acks_kept(h, final, {("B", "t", 0): [1]}) == []  # reported cut


def test_sync_ack_kept__the_followers_own_retention_deleted_it__not_lost() -> None:
    """A follower whose retention deleted an acknowledged record did what it
    was configured to do (the compacted sweep's compact,delete SYNC runs were
    reported as sync_ack_lost before); its retention elsewhere excuses nothing."""
    h = History([sync_send("x", 0, witness_end=1), sync_send("y", 1, witness_end=2)])
    final: dict[tuple[str, str, int], dict[int, str]] = {("B", "t", 0): {}}
    assert len(checkers.check_sync_acks_kept(h, final, {})) == 2  # x and y
    kept = checkers.check_sync_acks_kept(h, final, {}, None, {("B", "t", 0): [(0, 2)]})
    assert kept == []
    elsewhere = {("A", "t", 0): [(0, 2)], ("B", "t", 0): [(0, 1)]}
    found = checkers.check_sync_acks_kept(h, final, {}, None, elsewhere)
    assert len(found) == 1 and "'y'" in found[0].detail


def target_poll(records: list[tuple[int, int, str]], session: int = 0) -> Op:
    return Op("c", "target_consumer", "B", "ok", 0, 1, Poll("t", tuple(records), session, True))


def test_partial_transaction__a_read_committed_poll_on_the_follower_returns_half() -> None:
    h = History(
        [
            sync_send("t1.0", 0, 1, txn="t1", partition=0),
            sync_send("t1.1", 0, 1, txn="t1", partition=1),
            target_poll([(0, 0, "t1.0")]),  # partition 1's half not visible yet
            target_poll([(1, 0, "t1.1")]),
        ]
    )
    found = checkers.check_transactions_atomic(h)
    assert [v.invariant for v in found] == ["partial_transaction"]
    assert "t1" in found[0].detail and "t1.1" in found[0].detail


def test_whole_transactions__and_read_uncommitted_readers__say_nothing() -> None:
    whole = History(
        [
            sync_send("t1.0", 0, 1, txn="t1", partition=0),
            sync_send("t1.1", 0, 1, txn="t1", partition=1),
            target_poll([(0, 0, "t1.0"), (1, 0, "t1.1")]),
        ]
    )
    assert checkers.check_transactions_atomic(whole) == []
    uncommitted = Op(
        "c", "target_consumer", "B", "ok", 0, 1, Poll("t", ((0, 0, "t1.0"),), 0, False)
    )
    half = History([*whole.ops[:2], uncommitted])
    assert checkers.check_transactions_atomic(half) == []


def test_recovery_point__lost_records_and_the_acknowledgement_time_they_span() -> None:
    from sim.metrics import recovery_point

    a, b = ("t", 0), ("t", 1)
    acked = [
        (a, 100, 1, True),
        (a, 150, 1, True),
        (a, 180, 2, False),
        (a, 230, 1, False),  # lost: 230 - 150 (newest held)
        (b, 400, 1, False),
        (b, 420, 1, False),  # b holds nothing: 420 - 400 (oldest lost)
    ]
    assert recovery_point(acked) == (5, 80)
    assert recovery_point([(a, 10, 1, True)]) == (0, 0)
    assert recovery_point([]) == (0, 0)


def test_status_watch_hw_at__a_cut_between_the_last_probe_and_the_time_asked_bounds_it() -> None:
    """Seed 1583 on 3 clusters: B was probed at HW 89, cut to 9 nine ms
    before the round asked about; the checker still owed 89 from then."""
    from sim.status_checks import StatusWatch

    watch = StatusWatch(session_timeout_ms=3000)
    key = ("B", "A-t0", 0)
    watch.hw_series[key] = [(27000, 89), (27500, 95)]
    watch.cut(key, 27277, 9)
    assert watch.hw_at(key, 27286) == 9
    assert watch.hw_at(key, 27100) == 9  # cut since: nothing above 9 is owed
    assert watch.hw_at(key, 27600) == 95  # probed after the cut
    assert watch.hw_at(key, 26000) == 0  # never probed by then


def _writer_states(a_writable: bool, b_writable: bool) -> dict[str, ClusterState]:
    states = {"A": ClusterState("A"), "B": ClusterState("B")}
    for state, writable in zip(states.values(), (a_writable, b_writable), strict=True):
        state.create_namespace(ResourceType.TOPIC, "orders-", reserved=not writable)
    return states


@pytest.mark.parametrize(
    ("found", "rolled_back", "at_rest", "judged"),
    [
        # A finished reversal promises one writer, whatever it found.
        (0, False, (False, False), "neither cluster"),
        (1, False, (True, True), "both clusters"),
        (0, False, (False, True), ""),
        # A rolled-back one undoes only its own reservations: the pair is
        # left as it was found (none, after the operator's reservation; two,
        # after a failover the old leader had not heard of).
        (0, True, (False, False), ""),
        (2, True, (True, True), ""),
        (1, True, (True, False), ""),
        # ... and a roll-back that left a writer it found missing is named.
        (1, True, (False, False), "rolled back, which found it writable on one cluster"),
        (0, True, (True, False), "rolled back, which found it writable on neither cluster"),
    ],
)
def test_one_writer_at_rest__a_rolled_back_reversal_leaves_what_it_found(
    found: int, rolled_back: bool, at_rest: tuple[bool, bool], judged: str
) -> None:
    moved = checkers.MovedNamespace(
        "A-B", "A", "B", "topic", "orders-", "orders-", found=found, rolled_back=rolled_back
    )
    states = _writer_states(*at_rest)
    found_violations = checkers.check_one_writer([moved], states, {"A": True, "B": True})
    if not judged:
        assert found_violations == []
    else:
        assert len(found_violations) == 1
        assert found_violations[0].invariant == "one writer at rest"
        assert judged in found_violations[0].detail


def test_source_news_current__a_loss_the_follower_cannot_see_yet_keeps_the_race_open() -> None:
    """Operator sweep, seeds 118/152/169/219 (2 clusters), 9/34/46/168 (3) and
    189 (4): a known row names what its source acknowledged after its round
    while the follower could not yet tell the source was lost: a silent cut,
    or a killed source that dials the link (a push link), both found only once
    the request sent after the last round is overdue. A killed source that
    the follower dials resets its calls: old news at once."""
    from sim.status_checks import FailoverRow, source_news_current

    due = 1_000
    # Up and reachable: always current.
    assert source_news_current(True, True, True, None, 5_000, due)
    # A silent cut 48 ms before the failover, the last round 48 ms old (seed 118).
    assert source_news_current(True, False, True, 1_002, 1_050, due)
    # ... but a round older than the bound: the follower should have seen it.
    assert not source_news_current(True, False, True, 1_002, 1_002 + due + 1, due)
    # kill -9 of a source that pushes (seed 34: the last push applied 783 ms before).
    assert source_news_current(False, False, False, 17_926, 18_709, due)
    assert not source_news_current(False, False, False, 17_926, 17_926 + due + 1, due)
    # kill -9 of a source the follower dials: its calls are reset, no race left.
    assert not source_news_current(False, False, True, 18_700, 18_709, due)
    assert not source_news_current(False, True, True, 18_700, 18_709, due)

    row = FailoverRow(78, 78, 17_512, True)  # lag 0, known as of 17512
    assert row.names(78, 17_535, source_live=True) is not None
    assert row.names(78, 17_535, source_live=False) is None
    assert row.names(78, 17_500, source_live=True) is None  # before its round: held or lost


def test_a_paused_source__is_found_out_as_a_silent_cut_is__the_race_stays_open() -> None:
    """Operator sweep, seeds 63 and 1700 (2 clusters): A paused (SIGSTOP) as
    B failed over without force. A paused source resets no connection, so
    B's last round is news until its next request is overdue: the records A
    acknowledged after that round were in flight (its answer is "lag 0,
    known", as of the round), as under a silent cut; they were judged as if
    A had been killed, whose reset calls tell the follower at once."""
    from test_sim_operator_regressions import action, fault, run, scenario, sends

    text = scenario(
        sends("a", "A", "A-t0", range(500, 1000, 3))
        + fault(1000, "pause", node="A", duration_ms=3000)
        + action(1001, "failover", cluster="B", link="A-B", force=False)
    )
    sim = run(text)

    assert sim.violations == [], sim.violations
    assert sim.metrics.values["rpo_records"] > 0  # the failover left acknowledged records behind
    ((_cluster, _link, _at, answer),) = sim.failovers
    assert answer.abandoned == [] and all(r.lag_known for r in answer.partitions)


def test_failover_answered_as_of__a_re_run_past_the_change_answers_the_first_runs_rows() -> None:
    """Operator sweep, seed 264 (2 clusters): a failover without force that
    takes up a journalled plan past make-writable answers the first run's
    rows: judged as of that run, and not at all when that run was forced."""
    from linkd.core import plans, procedures
    from sim.status_checks import failover_answered_as_of

    changed = plans.PlanStep(procedures.FAILOVER_STEPS[1], True, "made writable", 0)
    verified = plans.PlanStep(procedures.FAILOVER_STEPS[0], True, "checked", 0)

    def plan(force: bool, *steps: plans.PlanStep) -> plans.Plan:
        return plans.Plan(
            plans.FAILOVER, "A-B", "id", "A", (), 0, 1_000, steps, detail={"force": force}
        )

    # Planned now: judged now; a forced one promises nothing of the lag.
    assert failover_answered_as_of(None, False, 15_143) == 15_143
    assert failover_answered_as_of(None, True, 15_143) is None
    # A plan stopped before its change: the re-run checks and answers afresh.
    assert failover_answered_as_of(plan(True, verified), False, 15_143) == 15_143
    # Past its change: the first run's rows, as of its start, or no promise.
    assert failover_answered_as_of(plan(True, verified, changed), False, 15_143) is None
    assert failover_answered_as_of(plan(False, verified, changed), False, 15_143) == 1_000
    assert failover_answered_as_of(plan(False, verified, changed), True, 15_143) == 1_000
    # Another procedure's plan: this call's own rows.
    other = replace(plan(False, verified, changed), procedure=plans.REVERSE)
    assert failover_answered_as_of(other, False, 15_143) == 15_143


def _follower_of(local: str, remote: str) -> tuple[ClusterState, str]:
    """B, whose link ab now follows B's topic namespace `local` from A's
    `remote` (A leads it), and the link's id."""
    from linkd.core import link_admin as admin
    from linkd.core.links import Leader, Mapping, MappingType

    a, b = ClusterState("A"), ClusterState("B")
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", 0)
    a.links.store(config, 0)
    mapping = Mapping(MappingType.TOPIC, remote, local, Leader.LOCAL, True, (0, 0, ""))
    admin.put_mapping(a, "ab", admin.versioned(a, mapping, 0), 0)
    b.links.accept_mirror(a.links.get("ab"), 0)
    admin.reconcile_attachments(b, "ab", 0)
    return b, "id-1"


@pytest.mark.parametrize(
    ("remote", "judged"),
    [("B-n0", "none: the link carries another source topic into the name"),
     ("A-", "lost: the link still carries A-n0 into it, and it never came")],
)  # fmt: skip
def test_silent_loss__a_topic_that_left_the_link__is_not_owed_under_another_mapping(
    remote: str, judged: str
) -> None:
    """Operator sweep, seeds 3039 (3 clusters) and 1163 (4): the follower
    detached the namespace before it held any copy of a topic (it had not
    listed it yet, or its storage refused to create it), and later attached
    the same local prefix from another remote prefix. That mapping carries
    another source topic into the name: the record's topic left the link
    all the same, and nothing that clients here could read was removed."""
    from sim.status_checks import check_silent_loss

    b, link_id = _follower_of("A-", remote)
    history = History()
    history.add(Op("p", "source_producer", "A", "ok", 0, 1,
                   Send("A-n0", 0, "v-1", 0, followers=(("B", "A-n0", link_id),))))  # fmt: skip
    found = check_silent_loss(
        history, {}, {"A": ClusterState("A"), "B": b}, {"A": True, "B": True}, set(), [], {}
    )
    assert (found == []) == judged.startswith("none"), found


def test_silent_loss__only_a_cut_made_after_the_send_began_excuses_it() -> None:
    """A cut of the source partition at offset 0 made before the record was
    sent (t=5 against t=10) left the offset to be written again: it does not
    explain why the follower lacks the record written there after it. A cut
    made after the send began does; without times, any cut at or below it."""
    from sim.status_checks import check_silent_loss

    b, link_id = _follower_of("A-", "A-")
    history = History()
    history.add(Op("p", "source_producer", "A", "ok", 10, 11,
                   Send("A-n0", 0, "v-1", 0, followers=(("B", "A-n0", link_id),))))  # fmt: skip
    states = {"A": ClusterState("A"), "B": b}
    up = {"A": True, "B": True}
    key = ("A", "A-n0", 0)

    def judged(events: checkers.CutEvents | None) -> list[checkers.Violation]:
        return check_silent_loss(
            history, {}, states, up, set(), [], {key: [0]}, cut_events=events
        )

    assert [v.invariant for v in judged({key: [checkers.CutEvent(5, 0, False)]})] == [
        "10 silent loss"
    ]
    assert judged({key: [checkers.CutEvent(20, 0, False)]}) == []
    assert judged(None) == []
