"""The judges of what clusters report (chaos/judges.py), on fabricated data.

Each judge gets a planted anomaly that it must name and a clean twin of the
same data that it must pass. Pure and fast: no daemons.
"""

from __future__ import annotations

from chaos.judges import (
    ClusterSnap,
    LinkSnap,
    MoveRecord,
    PartSnap,
    Round,
    Row,
    check_admin_effects,
    check_config,
    check_hanging_transactions,
    check_silent_loss,
    check_status_rounds,
    failover_rows,
    in_family,
    row_of,
)
from sim.checkers import FinalLogs, Violation
from sim.history import Op, Send
from sim.operator_moves import Move, MoveKind

T = "orders-x"
FOLLOW: tuple[str, str, str, str] = ("topic", "orders-", "orders-", "remote")
LEAD: tuple[str, str, str, str] = ("topic", "orders-", "orders-", "local")


def rnd(i: int, clusters: dict[str, ClusterSnap], wall0: int = 1_000_000) -> Round:
    start = i * 300
    return Round(i, start, start + 100, wall0 + start, wall0 + start + 100, clusters)


def source(hw: int, state: str = "FOLLOWING", lso: int | None = None) -> ClusterSnap:
    link = LinkSnap("ab", "A", "B", state, "ASYNC", (LEAD,))
    return ClusterSnap(
        links={"ab": link},
        partitions={(T, 0): PartSnap(hw, hw, hw if lso is None else lso)},
        topic_ids={T: "t-a"},
    )


def follower(leo: int, lag: int = 0, state: str = "FOLLOWING", src_hw: int | None = None,
             known_at: int = 0, lag_known: bool = True) -> ClusterSnap:  # fmt: skip
    row = Row(T, 0, "follower", lag, leo, leo if src_hw is None else src_hw, lag_known, known_at)
    link = LinkSnap("ab", "B", "A", state, "ASYNC", (FOLLOW,), rows=(row,))
    return ClusterSnap(
        links={"ab": link}, partitions={(T, 0): PartSnap(leo, leo, leo)}, topic_ids={T: "t-b"}
    )


# -- (a) status_lied ----------------------------------------------------------------------------


def test_status_lied__lag_zero_while_behind_the_source_hw_of_the_round_before() -> None:
    rounds = [
        rnd(0, {"A": source(10), "B": follower(10)}),
        rnd(1, {"A": source(25), "B": follower(10)}),
        rnd(2, {"A": source(40), "B": follower(10)}),  # says lag 0; A had 25 one round earlier
    ]
    found, judged = check_status_rounds(rounds)
    assert judged == 2  # round 0 has no round before it
    assert [v.invariant for v in found] == ["status_lied"]
    assert "B:orders-x-0" in found[0].detail and "25" in found[0].detail


def test_status_lied__clean_when_the_follower_keeps_up_or_admits_it_does_not_know() -> None:
    rounds = [
        rnd(0, {"A": source(10), "B": follower(10)}),
        rnd(1, {"A": source(25), "B": follower(24)}),  # within one round: fine
        rnd(2, {"A": source(40), "B": follower(25)}),
        # Cut off: the state says so, and the row does not claim lag 0.
        rnd(3, {"A": source(60), "B": follower(25, -1, "DISCONNECTED", lag_known=False)}),
        # FOLLOWING again but the lag is unknown: not a claim.
        rnd(4, {"A": source(70), "B": follower(25, -1, lag_known=False)}),
        rnd(5, {"A": source(80), "B": follower(70, lag=10, src_hw=80)}),
    ]
    found, _judged = check_status_rounds(rounds)
    assert found == []


def test_status_lied__a_row_that_contradicts_itself() -> None:
    rounds = [rnd(0, {"A": source(10), "B": follower(5, lag=0, src_hw=10)})]
    found, _ = check_status_rounds(rounds)
    assert len(found) == 1 and "its own source high watermark" in found[0].detail


def test_status_lied__a_claim_with_its_knowledge_time_is_judged_against_that_time() -> None:
    wall0 = 1_000_000
    rounds = [
        rnd(0, {"A": source(10), "B": follower(10)}),
        rnd(1, {"A": source(25), "B": follower(10)}),
        # Learned the source HW before round 1 ended: only round 0 is owed.
        rnd(2, {"A": source(40), "B": follower(10, known_at=wall0 + 150)}),
    ]
    found, _ = check_status_rounds(rounds)
    assert found == []
    # Learned after round 1 ended: the 25 seen then is owed.
    rounds[2] = rnd(2, {"A": source(40), "B": follower(10, known_at=wall0 + 450)})
    found, _ = check_status_rounds(rounds)
    assert len(found) == 1 and "25" in found[0].detail


def test_row_of__reads_old_and_new_rows() -> None:
    old = row_of({"topic": T, "partition": 0, "role": "follower", "lag_records": -1,
                  "log_end_offset": 3, "source_high_watermark": 9})  # fmt: skip
    assert old.lag_known is False
    new = row_of({"topic": T, "partition": 0, "role": "follower", "lag_records": 0,
                  "log_end_offset": 3, "source_high_watermark": 3, "lag_known": True,
                  "source_hw_known_at_ms": 123})  # fmt: skip
    assert new.lag_known and new.source_hw_known_at_ms == 123


# -- (b) silent_loss ----------------------------------------------------------------------------


def send(value: str, offset: int, at: int, cluster: str = "A") -> Op:
    return Op("grpc-producer", "source_producer", cluster, "ok", at, at + 5,
              Send(T, 0, value, offset))  # fmt: skip


def _loss_rounds() -> list[Round]:
    return [rnd(i, {"A": source(10 * i), "B": follower(10 * i)}) for i in range(10)]


def failover_at(ms: int, report: dict[str, object], outcome: str = "ok") -> MoveRecord:
    return MoveRecord(Move(MoveKind.FAILOVER, "B", link="ab", force=True), ms, ms + 20, outcome,
                      report=report)  # fmt: skip


def test_silent_loss__a_record_missing_on_the_promoted_follower_that_the_report_does_not_name(
) -> None:
    history = [send("v1", 5, 400), send("v2", 6, 700)]
    final = {("A", T, 0): {5: "v1", 6: "v2"}, ("B", T, 0): {5: "v1"}}
    # The failover reports the partition as caught up to 6: v2 is missing silently.
    report = {"abandoned": [], "partitions": [
        {"topic": T, "partition": 0, "log_end_offset": 6, "source_high_watermark": 6,
         "source_hw_known_at_ms": 1_000_000 + 2000}]}  # fmt: skip
    found, counts = check_silent_loss(
        history, _loss_rounds(), [failover_at(2500, report)], final, ["A", "B"], {}, 1_000_000
    )
    assert [v.invariant for v in found] == ["silent_loss"]
    assert "'v2'" in found[0].detail and "failover" in found[0].detail
    assert counts["reached"] == 1


def test_silent_loss__clean_when_the_report_names_it_or_a_cut_removed_it() -> None:
    history = [send("v1", 5, 400), send("v2", 6, 700), send("v3", 7, 1300)]
    final = {("A", T, 0): {5: "v1", 6: "v2", 7: "v3"}, ("B", T, 0): {5: "v1"}}
    # Abandoned: the source HW was 7 (v2 below it: named); v3 was acked after
    # the HW was learned (t0 + 1000 ms).
    report = {"abandoned": [{"topic": T, "partition": 0, "log_end_offset": 6,
                             "source_high_watermark": 7,
                             "source_hw_known_at_ms": 1_000_000 + 1000}]}  # fmt: skip
    found, counts = check_silent_loss(
        history, _loss_rounds(), [failover_at(2500, report)], final, ["A", "B"], {}, 1_000_000
    )
    assert found == [] and counts["excused"] == 2
    # Without a failover, a reported truncation on the follower excuses v2 and v3.
    found, _ = check_silent_loss(
        history, _loss_rounds(), [], final, ["A", "B"], {("B", T, 0): [(6, 8)]}, 1_000_000
    )
    assert found == []
    # ...but a truncation that removed other offsets does not.
    found, _ = check_silent_loss(
        history, _loss_rounds(), [], final, ["A", "B"], {("B", T, 0): [(2, 4)]}, 1_000_000
    )
    assert len(found) == 2


def test_silent_loss__in_sync_acks_are_not_excused_by_a_failover_report() -> None:
    rounds = [rnd(i, {"A": source(10 * i, "IN_SYNC"), "B": follower(10 * i, state="IN_SYNC")})
              for i in range(10)]  # fmt: skip
    history = [send("v2", 6, 700)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {}}
    report = {"abandoned": [{"topic": T, "partition": 0, "source_high_watermark": 7}]}
    found, _ = check_silent_loss(
        history, rounds, [failover_at(2500, report)], final, ["A", "B"], {}, 1_000_000
    )
    assert len(found) == 1 and "IN_SYNC" in found[0].detail


def test_silent_loss__a_detach_ends_the_obligation_and_unattached_sends_owe_nothing() -> None:
    history = [send("v2", 6, 700)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {}}
    detach = MoveRecord(Move(MoveKind.DETACH, "A", link="ab", local_prefix="orders-"),
                        900, 950, "ok")  # fmt: skip
    found, _ = check_silent_loss(history, _loss_rounds(), [detach], final, ["A", "B"], {})
    assert found == []
    refused = MoveRecord(detach.move, 900, 950, "refused", "UNKNOWN_NAMESPACE", "no")
    found, _ = check_silent_loss(history, _loss_rounds(), [refused], final, ["A", "B"], {})
    assert len(found) == 1
    # A namespace that led nowhere: nothing is owed.
    rounds = [rnd(i, {"A": ClusterSnap(), "B": follower(0)}) for i in range(10)]
    found, counts = check_silent_loss(history, rounds, [], final, ["A", "B"], {})
    assert found == [] and counts["obligations"] == 0


def _by_hand(cluster: str, steps: list[str], outcome: str = "refused") -> MoveRecord:
    move = Move(MoveKind.MANUAL_REVERSE, cluster, link="ab", resource_type="topic",
                local_prefix="orders-", remote_prefix="orders-")  # fmt: skip
    code = "DIVERGED_LOG" if outcome == "refused" else ""
    return MoveRecord(move, 900, 1500, outcome, code, "", steps)


def test_silent_loss__a_reversal_by_hand_past_its_detach_ends_the_obligation() -> None:
    """Seed 5802: A (here) led orders- to B and acknowledged v2 while the
    link was cut; a reversal by hand on A reserved, waited (bounded), and
    detached, and its attach the other way was refused DIVERGED_LOG,
    naming v2 among the records B lacks. The detach ended the mapping as a
    detach move does: nothing more is owed to B."""
    history = [send("v2", 6, 700)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {}}
    detached = _by_hand("A", [
        "reserve topic 'orders-' on A: ok",
        "wait for B: gave up after 8 s (orders-x-0: 7 > 6)",
        "detach on A: ok",
        "attach 'orders-' following B: DIVERGED_LOG",
    ])  # fmt: skip
    found, counts = check_silent_loss(history, _loss_rounds(), [detached], final, ["A", "B"], {})
    assert found == [] and counts["excused"] == 1
    # Indefinite at the detach step: it may have detached.
    timed_out = _by_hand("A", [
        "reserve topic 'orders-' on A: ok",
        "wait for B: the remote holds the log end",
        "detach on A: REQUEST_TIMED_OUT",
    ], "info")  # fmt: skip
    found, _ = check_silent_loss(history, _loss_rounds(), [timed_out], final, ["A", "B"], {})
    assert found == []
    # Refused at the detach step: still attached, still owed.
    kept = _by_hand("A", [
        "reserve topic 'orders-' on A: ok",
        "wait for B: the remote holds the log end",
        "detach on A: UNKNOWN_NAMESPACE",
    ])  # fmt: skip
    found, _ = check_silent_loss(history, _loss_rounds(), [kept], final, ["A", "B"], {})
    assert len(found) == 1
    # Run on the follower, a reversal by hand reverses the other direction
    # (it made B's source lead, as A's reversal of link ac made C lead in
    # the seed): the mapping A leads is not ended by it.
    other = _by_hand("B", [
        "reserve topic 'orders-' on B: ok",
        "wait for A: the remote holds the log end",
        "detach on B: ok",
        "attach 'orders-' following A: ok",
        "clear the reservation of 'orders-' on A: ok",
    ], "ok")  # fmt: skip
    found, _ = check_silent_loss(history, _loss_rounds(), [other], final, ["A", "B"], {})
    assert len(found) == 1 and "never ended by a move" in found[0].detail


def test_failover_rows__old_and_new_reports() -> None:
    rows = failover_rows({"abandoned": [{"topic": T, "partition": 1,
                                         "source_high_watermark": 9}]})  # fmt: skip
    assert rows == {(T, 1): (9, 0)}


# -- (c) hanging_transaction --------------------------------------------------------------------


def test_hanging_transaction__lso_below_hw_past_every_timeout() -> None:
    final = {("A", T, 0): (20, 20), ("B", T, 0): (20, 14)}
    found = check_hanging_transactions(final, 60_000, {"A": 20_000, "B": 20_000}, 10_000, 5_000)
    assert len(found) == 1 and "B:orders-x-0" in found[0].detail
    # Within the timeout of the last transaction begun there: legitimate.
    assert check_hanging_transactions(final, 30_000, {"B": 20_000}, 10_000, 5_000) == []
    assert check_hanging_transactions({("A", T, 0): (20, 20)}, 60_000, {}, 10_000, 5_000) == []


def test_hanging_transaction__an_lso_stuck_during_the_run() -> None:
    def at(i: int, hw: int, lso: int) -> Round:
        return Round(i, i * 1000, i * 1000 + 100, 0, 0, {"A": ClusterSnap(
            partitions={(T, 0): PartSnap(hw, hw, lso)})})  # fmt: skip

    stuck = [at(i, 10 + i, 8) for i in range(20)]
    found = check_hanging_transactions({}, 0, {}, 10_000, 5_000, stuck)
    assert len(found) == 1 and "stayed at 8" in found[0].detail
    moving = [at(i, 10 + i, 8 + i) for i in range(20)]
    assert check_hanging_transactions({}, 0, {}, 10_000, 5_000, moving) == []


# -- (d) config_diverged ------------------------------------------------------------------------


def test_config_diverged__mappings_mode_refusals_and_one_sided_links() -> None:
    a = LinkSnap("ab", "A", "B", "FOLLOWING", "ASYNC", (LEAD,))
    b = LinkSnap("ab", "B", "A", "FOLLOWING", "ASYNC", (FOLLOW,))
    assert check_config({"A": {"ab": a}, "B": {"ab": b}}, ["A", "B"]) == []
    refused = ("topic", "pay-", "pay-", "local")
    a2 = LinkSnap("ab", "A", "B", "FOLLOWING", "SYNC", (LEAD,), refused=(refused,))
    found = check_config({"A": {"ab": a2}, "B": {"ab": b}}, ["A", "B"])
    assert {v.invariant for v in found} == {"config_diverged"}
    assert any("mode" in v.detail for v in found)
    assert any("refused mappings" in v.detail for v in found)
    found = check_config({"A": {"ab": a}, "B": {}}, ["A", "B"])
    assert len(found) == 1 and "not on B" in found[0].detail
    # The other side is not live: not judged.
    assert check_config({"A": {"ab": a}, "B": {}}, ["A"]) == []


# -- (e) admin_effect_missing -------------------------------------------------------------------


def _attach(at: int, outcome: str = "ok") -> MoveRecord:
    move = Move(MoveKind.ATTACH, "A", link="ab", local_prefix="pay-", remote_prefix="pay-",
                leader="local")  # fmt: skip
    return MoveRecord(move, at, at + 10, outcome)


def test_admin_effect_missing__an_attach_that_answered_success_but_is_not_attached() -> None:
    pay_lead = ("topic", "pay-", "pay-", "local")
    pay_follow = ("topic", "pay-", "pay-", "remote")
    links = {
        "A": {"ab": LinkSnap("ab", "A", "B", "FOLLOWING", "ASYNC", (LEAD, pay_lead))},
        "B": {"ab": LinkSnap("ab", "B", "A", "FOLLOWING", "ASYNC", (FOLLOW, pay_follow))},
    }
    namespaces = {
        "A": {("topic", "pay-"): (False, ("ab:leader",))},
        "B": {("topic", "pay-"): (True, ())},  # the mapping is there, the attachment is not
    }
    found, judged = check_admin_effects([_attach(100)], links, namespaces, ["A", "B"])
    assert judged == 1 and len(found) == 1
    assert "B's topic namespace 'pay-' is not attached" in found[0].detail
    namespaces["B"] = {("topic", "pay-"): (True, ("ab:follower",))}
    found, _ = check_admin_effects([_attach(100)], links, namespaces, ["A", "B"])
    assert found == []


def test_admin_effect_missing__later_moves_and_refusals_excuse() -> None:
    a = LinkSnap("ab", "A", "B", "FOLLOWING", "ASYNC", (LEAD,))
    b = LinkSnap("ab", "B", "A", "FOLLOWING", "ASYNC", (FOLLOW,))
    links = {"A": {"ab": a}, "B": {"ab": b}}
    # The attach is gone, but a later detach took it away.
    detach = MoveRecord(Move(MoveKind.DETACH, "B", link="ab", local_prefix="pay-"), 200, 210, "ok")
    found, _ = check_admin_effects([_attach(100), detach], links, {}, ["A", "B"])
    assert found == []
    # A release-reattach on the follower that detached, then was refused at
    # its attach (DIVERGED_LOG), ended the mapping too; one refused before its
    # detach did not.
    release = Move(MoveKind.RELEASE_REATTACH, "B", link="ab", local_prefix="pay-",
                   remote_prefix="pay-", leader="remote")  # fmt: skip
    half = MoveRecord(release, 200, 210, "refused", "DIVERGED_LOG", "cut",
                      steps=["detach: ok", "clear: ok", "write", "attach: DIVERGED_LOG"])
    found, _ = check_admin_effects([_attach(100), half], links, {}, ["A", "B"])
    assert found == []
    early = MoveRecord(release, 200, 210, "refused", "NOT_FOUND", "no", steps=["detach: NO"])
    found, _ = check_admin_effects([_attach(100), early], links, {}, ["A", "B"])
    assert len(found) == 1 and "does not map it" in found[0].detail
    # A refused attach owes nothing.
    found, judged = check_admin_effects([_attach(100, "refused")], links, {}, ["A", "B"])
    assert found == [] and judged == 0
    # set-mode SYNC answered success, the link is still ASYNC on both sides.
    mode = MoveRecord(Move(MoveKind.SET_MODE, "A", link="ab", mode="SYNC"), 300, 310, "ok")
    found, _ = check_admin_effects([mode], links, {}, ["A", "B"])
    assert len(found) == 1 and "ASYNC on A" in found[0].detail
    # A detach that answered success while the mapping stays.
    gone = MoveRecord(Move(MoveKind.DETACH, "A", link="ab", local_prefix="orders-"), 1, 2, "ok")
    found, _ = check_admin_effects([gone], links, {}, ["A", "B"])
    assert len(found) == 1 and "still maps it" in found[0].detail


def test_in_family() -> None:
    assert in_family("orders-x", ["orders-"]) and in_family("r-r-orders-n0", ["orders-"])
    assert not in_family("pay-x", ["orders-"])


# -- refusal_missing ----------------------------------------------------------------------------


def test_refusal_missing__sync_while_far_behind_and_failover_without_force_disconnected() -> None:
    from chaos.judges import check_refusals

    behind = [rnd(i, {"B": follower(10, lag=500, state="CATCHING_UP", src_hw=510)})
              for i in range(4)]  # fmt: skip
    sync = MoveRecord(Move(MoveKind.SET_MODE, "B", link="ab", mode="SYNC"), 1000, 1010, "ok")
    found = check_refusals([sync], behind)
    assert len(found) == 1 and found[0].invariant == "refusal_missing"
    assert "500 records behind" in found[0].detail
    # Refused as it should be, or the link was close: nothing to say.
    refused = MoveRecord(sync.move, 1000, 1010, "refused", "LINK_NOT_FOLLOWING", "no")
    assert check_refusals([refused], behind) == []
    close = [rnd(i, {"B": follower(10, lag=3, state="CATCHING_UP", src_hw=13)}) for i in range(4)]
    assert check_refusals([sync], close) == []
    cut = [rnd(i, {"B": follower(10, -1, "DISCONNECTED", lag_known=False)}) for i in range(4)]
    failover = MoveRecord(Move(MoveKind.FAILOVER, "B", link="ab"), 1000, 1010, "ok")
    assert len(check_refusals([failover], cut)) == 1
    forced = MoveRecord(Move(MoveKind.FAILOVER, "B", link="ab", force=True), 1000, 1010, "ok")
    assert check_refusals([forced], cut) == []


def test_silent_loss__a_follower_that_failed_over_before_the_send_owes_nothing() -> None:
    # The acking side still describes the mapping (it has not heard of the
    # failover): the send is not owed to the promoted follower...
    history = [send("v2", 6, 1500)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {6: "b-own"}}
    failover = failover_at(900, {"abandoned": []})
    found, counts = check_silent_loss(history, _loss_rounds(), [failover], final, ["A", "B"], {})
    assert found == [] and counts["excused"] == 1
    # ...unless it attached again in between.
    attach = Move(MoveKind.ATTACH, "B", link="ab", local_prefix="orders-",
                  remote_prefix="orders-", leader="remote")  # fmt: skip
    again = MoveRecord(attach, 1100, 1200, "ok")
    found, _ = check_silent_loss(history, _loss_rounds(), [failover, again], final, ["A", "B"], {})
    assert len(found) == 1


def test_silent_loss__every_leader_mapping_that_covers_the_topic_is_owed() -> None:
    nested = ("topic", "orders-x", "r-orders-x", "local")

    def a(i: int) -> ClusterSnap:
        snap = source(10 * i)
        link = snap.links["ab"]
        snap.links["ab"] = LinkSnap("ab", "A", "B", link.state, "ASYNC", (LEAD, nested))
        return snap

    rounds = [rnd(i, {"A": a(i), "B": follower(10 * i)}) for i in range(10)]
    history = [send("v2", 6, 700)]
    # The renamed copy has it, the plain one does not.
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {}, ("B", "r-orders-x", 0): {6: "v2"}}
    found, counts = check_silent_loss(history, rounds, [], final, ["A", "B"], {})
    assert counts["obligations"] == 2 and counts["reached"] == 1
    assert len(found) == 1 and "B:orders-x-0" in found[0].detail


def test_silent_loss__only_an_attach_covering_the_topic_attaches_it_again() -> None:
    history = [send("v2", 6, 1500)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {6: "b-own"}}
    failover = failover_at(900, {"abandoned": []})
    for beside in (
        Move(
            MoveKind.ATTACH,
            "B",
            link="ab",
            local_prefix="orders-t",
            remote_prefix="orders-t",
            leader="remote",
        ),
        Move(
            MoveKind.ATTACH,
            "B",
            link="ab",
            resource_type="group",
            local_prefix="orders-",
            remote_prefix="orders-",
            leader="remote",
        ),
        # The swarm's seed 28: a reversal by hand of the group namespace
        # (on the old source, after the follower's failover) moves no topic.
        Move(
            MoveKind.MANUAL_REVERSE,
            "A",
            link="ab",
            resource_type="group",
            local_prefix="orders-",
            remote_prefix="orders-",
        ),
    ):
        moves = [failover, MoveRecord(beside, 1100, 1200, "ok")]
        found, counts = check_silent_loss(history, _loss_rounds(), moves, final, ["A", "B"], {})
        assert found == [] and counts["excused"] == 1, beside


WALL0 = 1_000_000


def _known_since(
    history: list[Op], rounds: list[Round], final: FinalLogs, known_ms: int,
    moves: tuple[MoveRecord, ...] = (),
) -> tuple[list[Violation], dict[str, int]]:
    """B's forced failover at 2500, whose answer knew A's topics from
    `known_ms` (run time) on, judged with the operator's other `moves`."""
    knew = failover_at(2500, {"abandoned": [], "topics_known_at_ms": WALL0 + known_ms})
    return check_silent_loss(history, rounds, [*moves, knew], final, ["A", "B"], {}, WALL0)


def test_silent_loss__a_topic_created_after_the_follower_knew_the_topic_list() -> None:
    # The send was invoked before the failover ended, on a topic the source
    # created after the follower last learned its topics: no row names it.
    history = [send("v0", 0, 2400)]
    final = {("A", T, 0): {0: "v0"}}
    rounds = [rnd(i, {"A": source(0) if i >= 6 else ClusterSnap(
        partitions={("other", 0): PartSnap(1, 1, 1)})}) for i in range(10)]  # fmt: skip
    for r in rounds:
        r.clusters["B"] = follower(0)
    found, counts = _known_since(history, rounds, final, 900)
    assert found == [] and counts["excused"] == 1
    # Known since after the topic appeared: the report should have named it.
    found, _ = _known_since(history, rounds, final, 1900)
    assert len(found) == 1 and "does not name the partition" in found[0].detail


def test_silent_loss__an_operator_created_the_topic_after_the_follower_knew_the_list() -> None:
    # No status round tells (the topic appeared within one round of the
    # knowledge time), but the create-topic move began after it.
    history = [send("v0", 0, 2400)]
    final = {("A", T, 0): {0: "v0"}}
    rounds = [rnd(i, {"A": source(0), "B": follower(0)}) for i in range(10)]
    create = MoveRecord(Move(MoveKind.CREATE_TOPIC, "A", topic=T, partitions=1), 1000, 1010,
                        "ok", wall_begin_ms=WALL0 + 1000)  # fmt: skip
    found, counts = _known_since(history, rounds, final, 900, (create,))
    assert found == [] and counts["excused"] == 1
    found, _ = _known_since(history, rounds, final, 1100, (create,))
    assert len(found) == 1


def test_silent_loss__a_partition_added_after_the_follower_knew_the_topic_list() -> None:
    # The chaos swarm's seed 5504: the operator grew orders-x on A while the
    # link was cut, and B's forced failover names no row for the new
    # partition: its report says from when it knew the source's topics.
    history = [Op("grpc-producer", "source_producer", "A", "ok", 2400, 2405,
                  Send(T, 1, "v0", 0))]  # fmt: skip
    final = {("A", T, 1): {0: "v0"}}

    def grown(i: int) -> ClusterSnap:
        snap = source(0)
        if i >= 6:
            snap.partitions[(T, 1)] = PartSnap(1, 1, 1)
        return snap

    rounds = [rnd(i, {"A": grown(i), "B": follower(0)}) for i in range(10)]
    found, counts = _known_since(history, rounds, final, 900)
    assert found == [] and counts["excused"] == 1
    # Known since after the partition appeared: the report should have named it.
    found, _ = _known_since(history, rounds, final, 1900)
    assert len(found) == 1 and "does not name the partition" in found[0].detail
    # No round tells, but the operator's add-partitions began after the knowledge time.
    flat = [rnd(i, {"A": grown(9), "B": follower(0)}) for i in range(10)]
    grow = MoveRecord(Move(MoveKind.ADD_PARTITIONS, "A", topic=T, partitions=2), 1000, 1010,
                      "ok", wall_begin_ms=WALL0 + 1000)  # fmt: skip
    assert _known_since(history, flat, final, 900, (grow,))[0] == []
    assert len(_known_since(history, flat, final, 900)[0]) == 1


def _kill_race() -> tuple[list[Op], FinalLogs, MoveRecord]:
    """v2 and v3 acknowledged by A (v3 at t0+1300), B holding v2; A killed at
    1400 and B's forced failover answering "lag 0, known" as of t0+1000."""
    history = [send("v2", 6, 700), send("v3", 7, 1300)]
    final = {("A", T, 0): {6: "v2", 7: "v3"}, ("B", T, 0): {6: "v2"}}
    report = {"abandoned": [], "partitions": [
        {"topic": T, "partition": 0, "log_end_offset": 7, "source_high_watermark": 7,
         "lag_known": True, "source_hw_known_at_ms": 1_000_000 + 1000}]}  # fmt: skip
    killed = MoveRecord(Move(MoveKind.FAILOVER, "B", link="ab", force=True, peer="A",
                             kill_source=True, delay_ms=200), 1400, 1700, "ok",
                        report=report)  # fmt: skip
    return history, final, killed


def test_silent_loss__a_known_row_after_kill_9__names_the_race_only_when_the_source_pushes() -> (
    None
):
    """kill -9 of the source, the failover 200 ms later, the row "lag 0,
    known" as of t0+1000: v3 (acknowledged at t0+1300) is old news when the
    follower dials the source (its calls were reset), but in flight when
    the source dials the link itself (a pushed link: the follower finds the
    death only once its request is overdue)."""
    history, final, killed = _kill_race()

    def judged(created: list[MoveRecord]) -> list[str]:
        found, _ = check_silent_loss(
            history, _loss_rounds(), [*created, killed], final, ["A", "B"], {}, 1_000_000
        )
        return [v.detail for v in found]

    assert len(judged([])) == 1  # the run's own link: B dials A
    pushed_from_a = MoveRecord(Move(MoveKind.CREATE_LINK, "A", link="ab", peer="B"), 100, 120, "ok")
    pulled_by_b = MoveRecord(Move(MoveKind.CREATE_LINK, "B", link="ab", peer="A"), 100, 120, "ok")
    b_behind_nat = MoveRecord(Move(MoveKind.CREATE_LINK, "B", link="ab", peer="A",
                                   remote_dials=True), 100, 120, "ok")  # fmt: skip
    assert judged([pushed_from_a]) == []
    assert judged([b_behind_nat]) == []
    assert len(judged([pulled_by_b])) == 1


def test_silent_loss__a_second_failover_of_a_failed_over_follower_does_not_take_over_the_first(
) -> None:
    """The swarm's seed 21: B fails over (ending the mapping), A, still
    describing it, acknowledges v2, and a later forced failover on B finds
    nothing to promote (an empty report). The first failover ended the
    obligation; the second is no answer the send was owed."""
    history = [send("v2", 6, 1500)]
    final = {("A", T, 0): {6: "v2"}, ("B", T, 0): {6: "b-own"}}
    first = failover_at(900, {"abandoned": []})
    again = failover_at(3000, {"abandoned": [], "partitions": []})
    found, counts = check_silent_loss(
        history, _loss_rounds(), [first, again], final, ["A", "B"], {}
    )
    assert found == [] and counts["excused"] == 1


def test_silent_loss__the_killed_source_started_again_after_the_failover_owes_nothing_new() -> (
    None
):
    """kill -9 of A, B's failover (answered at 1700 with "lag 0, known"), A
    started again once it answered: v3, sent while A was down and
    acknowledged by the restarted A at 1800, was never the follower's (it
    had left); v2, acknowledged before the kill after the row's time, is
    old news and still a violation. Restarted by the nemesis during the
    failover instead, A may have acknowledged v3 before B left: judged."""
    history = [send("v2", 6, 1100), send("v3", 7, 1400)]
    history[1] = Op("grpc-producer", "source_producer", "A", "ok", 1400, 1800,
                    Send(T, 0, "v3", 7))  # fmt: skip
    final = {("A", T, 0): {6: "v2", 7: "v3"}, ("B", T, 0): {}}
    report = {"abandoned": [], "partitions": [
        {"topic": T, "partition": 0, "log_end_offset": 6, "source_high_watermark": 6,
         "lag_known": True, "source_hw_known_at_ms": 1_000_000 + 1000}]}  # fmt: skip
    move = Move(MoveKind.FAILOVER, "B", link="ab", peer="A", kill_source=True, delay_ms=200)

    def judged(steps: list[str]) -> list[str]:
        killed = MoveRecord(move, 1400, 1700, "ok", report=report, steps=steps)
        found, _ = check_silent_loss(
            history, _loss_rounds(), [killed], final, ["A", "B"], {}, 1_000_000
        )
        return [v.detail for v in found]

    restarted_after = judged(["kill -9 A", "started A again"])
    assert len(restarted_after) == 1 and "'v2'" in restarted_after[0]
    by_the_nemesis = judged(["kill -9 A", "A was started again by the nemesis"])
    assert len(by_the_nemesis) == 2


def test_cut_windows__from_a_cut_to_the_next_heal_of_that_link() -> None:
    from chaos.judges import cut_windows

    steps = [("cut", ("ab", "both"), 100), ("slow", ("ab", "50"), 150), ("heal", ("ab",), 300),
             ("cut", ("ab", "a->b"), 400), ("cut", ("ac", "b->a"), 500),
             ("heal", ("ac",), 600)]  # fmt: skip
    windows = cut_windows(steps)
    assert windows["ab"][0] == (100, 300)
    assert windows["ab"][1][0] == 400 and windows["ab"][1][1] > 10**12  # never healed
    assert windows["ac"] == [(500, 600)]


def test_silent_loss__a_kill_during_a_nemesis_cut_leaves_the_race_open() -> None:
    """The swarm's seed 28: the nemesis cut link ab, A was killed 400 ms
    later under load, and B's forced failover answered "lag 0, known" as of
    its last round before the cut. No reset reached B through the cut, so B
    could not know of A's death: v3, acknowledged after that round, is
    covered by the row's time ("unknown since"), as for a pushed link."""
    history, final, killed = _kill_race()

    def judged(windows: dict[str, list[tuple[int, int]]]) -> int:
        found, _ = check_silent_loss(
            history, _loss_rounds(), [killed], final, ["A", "B"], {}, 1_000_000,
            silent_cuts=windows,
        )  # fmt: skip
        return len(found)

    assert judged({}) == 1
    assert judged({"ab": [(1000, 2000)]}) == 0
    assert judged({"ab": [(200, 900)]}) == 1  # healed before the kill
    assert judged({"ac": [(1000, 2000)]}) == 1  # another link


def test_silent_loss__a_partition_the_follower_holds_for_its_own_writes_is_reported_by_its_row(
) -> None:
    """The swarm's seeds 27 and 32: a follower whose own clients wrote
    (release-and-reattach) holds the partition uncut, copies nothing more
    into it and says so on describe-link's row (`own_writes_held`, the
    problem naming `recover`): what the leader acknowledges meanwhile is
    not silently lost."""
    from chaos.judges import held_partitions, holding_links, row_of

    row = row_of({"topic": T, "partition": 0, "role": "follower", "lag_records": -1,
                  "log_end_offset": 9, "source_high_watermark": -1, "lag_known": False,
                  "problem": "DIVERGED_LOG: ... recover", "own_writes_held": True})  # fmt: skip
    snap = LinkSnap("ab", "B", "A", "CATCHING_UP", "ASYNC", rows=(row,))
    assert held_partitions({"B": {"ab": snap}}) == {("B", T, 0)}
    # Both sides of the link are excused from FOLLOWING; another link is not.
    other = LinkSnap("ac", "A", "C", "CATCHING_UP", "ASYNC")
    assert holding_links({"B": {"ab": snap}, "A": {"ac": other}}) == {("B", "ab"), ("A", "ab")}
    history = [send("v1", 5, 400)]
    final = {("A", T, 0): {5: "v1"}, ("B", T, 0): {5: "b-own"}}
    found, _ = check_silent_loss(history, _loss_rounds(), [], final, ["A", "B"], {})
    assert len(found) == 1
    found, counts = check_silent_loss(
        history, _loss_rounds(), [], final, ["A", "B"], {}, held={("B", T, 0)}
    )
    assert found == [] and counts["excused"] == 1
    # The acknowledging side holds it (seed 53: a reversal without waiting,
    # A now follows B and keeps v1, its own, uncut): its row names it.
    found, _ = check_silent_loss(
        history, _loss_rounds(), [], final, ["A", "B"], {}, held={("A", T, 0)}
    )
    assert found == []
