"""The simulator twin of a chaos run (chaos/twin.py).

Pure and fast: translating a schedule into a simulator scenario, building the
replay scripts from a history, counting records in doubt, comparing final
states (agreement, a planted difference beyond the allowance, differences
within it), and a whole twin against a planted "real" state. The twins of
real-daemon runs (an ASYNC run through the CLI, a SYNC transactional one)
are checked in tests/test_chaos_runs.py.
"""

from __future__ import annotations

import dataclasses

from chaos import twin
from chaos.cli import table, twin_cell
from chaos.runner import Run
from chaos.schedule import (
    REPLICA_LAG_TIME_MAX_MS,
    SESSION_TIMEOUT_MS,
    Schedule,
    Step,
    make_schedule,
    star,
)
from sim.history import Op, Send
from sim.world import Simulation

PHASE_S = 10.0
LEAD = twin.LEAD_MS


def ms(at_s: float) -> int:
    return LEAD + round(at_s * 1000)


def send(
    process: str,
    cluster: str,
    type_: str,
    invoke: int,
    complete: int,
    partition: int,
    value: str,
    client_class: str = "source_producer",
    error: str = "",
) -> Op:
    return Op(
        process,
        client_class,
        cluster,
        type_,  # type: ignore[arg-type]
        invoke,
        complete,
        Send("orders-x", partition, value, -1),
        error,
    )


def steady_ops(cluster: str, start: int, end: int, every_ms: int = 40) -> list[Op]:
    """One producer's sends, all acknowledged quickly, alternating partitions."""
    return [
        send("grpc-producer", cluster, "ok", t, t + 3, n % 2, f"grpc-producer-{n}")
        for n, t in enumerate(range(start, end, every_ms))
    ]


# -- translation (pure) -------------------------------------------------------------------


def test_translation__random_schedule__every_step_at_its_time() -> None:
    schedule = Schedule(
        "random",
        11,
        ("A", "B", "C"),
        "SYNC",
        star(("A", "B", "C")),
        (
            Step(1.0, "cut", ("ab", "both")),
            Step(1.0, "slow", ("ac", "150")),
            Step(2.5, "heal", ("ab",)),
            Step(2.5, "heal", ("ac",)),
            Step(3.0, "cut", ("ac", "a->b")),
            Step(4.0, "heal", ("ac",)),
            Step(4.5, "flaky", ("ab", "0.05")),
            Step(5.0, "pause", ("B",)),
            Step(6.0, "heal", ("ab",)),
            Step(6.0, "resume", ("B",)),
            Step(7.0, "kill", ("A",)),
            Step(8.0, "restart", ("A",)),
        ),
        PHASE_S,
    )
    scenario = twin.to_scenario(twin.nominal_run(schedule))
    assert scenario.topology.kind == "hub"
    assert scenario.topology.clusters == ("A", "B", "C")
    assert scenario.topology.mode == "SYNC"
    assert scenario.namespace.partitions == 2 and not scenario.namespace.groups
    assert scenario.cluster.session_timeout_ms == SESSION_TIMEOUT_MS
    assert scenario.cluster.replica_lag_time_max_ms == REPLICA_LAG_TIME_MAX_MS
    got = {(f.at_ms, f.kind, f.side_a, f.side_b, f.node, f.duration_ms) for f in scenario.faults}
    assert (ms(1.0), "split", ("A",), ("B",), "", 1500) in got
    # slow: a clog each way until the heal.
    clogs = [f for f in scenario.faults if f.kind == "clog"]
    assert {(f.side_a, f.side_b, f.latency_ms, f.duration_ms) for f in clogs} == {
        (("A",), ("C",), 150, 1500),
        (("C",), ("A",), 150, 1500),
    }
    # The proxy's "a->b" is follower -> source.
    assert (ms(3.0), "one_way", ("C",), ("A",), "", 1000) in got
    losses = [f for f in scenario.faults if f.kind == "loss"]
    assert {(f.loss, f.duration_ms) for f in losses} == {(0.05, 1500)}
    assert (ms(5.0), "pause", (), (), "B", 0) in got
    assert (ms(6.0), "resume", (), (), "B", 0) in got
    assert (ms(7.0), "crash", (), (), "A", 0) in got
    assert (ms(8.0), "restart", (), (), "A", 0) in got
    # The final heal, then every cluster restarted (or resumed).
    assert (ms(PHASE_S), "heal", (), (), "", 0) in got
    assert {f.node for f in scenario.faults if f.at_ms == ms(PHASE_S) and f.node} == {"A", "B", "C"}
    assert scenario.actions == ()
    assert scenario.run.duration_ms > ms(PHASE_S)


def test_translation__kip986__failover_then_relink_as_detach_create_recover() -> None:
    schedule = make_schedule(5, name="kip986-dr", phase_s=PHASE_S)
    scenario = twin.to_scenario(twin.nominal_run(schedule))
    actions = [(a.at_ms, a.kind, a.cluster, a.link, a.prefixes, a.force) for a in scenario.actions]
    assert actions == [
        (ms(6.0), "failover", "B", "A-B", (), True),
        (ms(7.0), "detach", "C", "A-C", (("A-", ""),), False),
        (ms(7.0), "create_link", "", "cb", (), False),
        (ms(7.0), "recover", "C", "cb", (("A-", ""),), False),
    ]
    assert [(a.source, a.target) for a in scenario.actions if a.kind == "create_link"] == [
        ("B", "C")
    ]
    lose = [f for f in scenario.faults if f.kind == "crash"]
    assert [(f.at_ms, f.node, f.permanent) for f in lose] == [(ms(5.0), "A", True)]
    # The cut is never healed before the final heal; A is not restarted.
    cut = [f for f in scenario.faults if f.kind == "split"]
    assert [(f.at_ms, f.duration_ms) for f in cut] == [(ms(2.0), ms(PHASE_S) - ms(2.0))]
    assert "A" not in {f.node for f in scenario.faults if f.kind == "restart"}


def test_translation__attach_detach_on_the_source__extra_topic_created() -> None:
    schedule = make_schedule(1, name="one-way-config", phase_s=15.0)
    scenario = twin.to_scenario(twin.nominal_run(schedule))
    kinds = [(a.kind, a.cluster, a.link, a.prefixes, a.leader) for a in scenario.actions]
    assert kinds == [
        ("create_topic", "A", "", (), ""),
        ("attach", "A", "A-B", (("pay-", "pay-"),), "local"),
        ("detach", "A", "A-B", (("pay-", ""),), ""),
    ]


def test_scripts__one_per_process__transactions_grouped__aborted_ones_abort() -> None:
    schedule = make_schedule(3, mode="async", clusters=2, phase_s=PHASE_S, operators=False)
    run = twin.nominal_run(schedule)
    run.start_ms = 500
    txn = "source_transactional_producer"
    run.ops = [
        send("grpc-producer", "A", "ok", 600, 610, 0, "grpc-producer-0"),
        send("grpc-producer", "A", "info", 700, 8700, 1, "grpc-producer-1"),
        send("txn-producer", "A", "fail", 800, 900, 0, "txn-producer-0", txn),
        send("txn-producer", "A", "fail", 800, 900, 1, "txn-producer-1", txn),
        send("txn-producer", "A", "ok", 1000, 1100, 0, "txn-producer-2", txn),
        send("probe", "B", "fail", 650, 660, 0, "probe-B-0", "target_producer"),
    ]
    scripts = {s.name: s for s in twin.to_scenario(run).scripts}
    assert sorted(scripts) == ["grpc-producer", "probe", "txn-producer"]
    grpc = scripts["grpc-producer"].sends
    assert [(x.at_ms, x.cluster, x.topic, x.partition, x.value) for x in grpc] == [
        (LEAD + 100, "A", "A-t0", 0, "grpc-producer-0"),
        (LEAD + 200, "A", "A-t0", 1, "grpc-producer-1"),
    ]
    txns = [(x.txn, x.abort, x.value) for x in scripts["txn-producer"].sends]
    assert txns == [
        ("txn-producer-800", True, "txn-producer-0"),
        ("txn-producer-800", True, "txn-producer-1"),
        ("txn-producer-1000", False, "txn-producer-2"),
    ]
    assert scripts["probe"].sends[0].cluster == "B"


# -- records in doubt (pure) --------------------------------------------------------------


def test_in_doubt__indefinite_sends__writes_at_a_kill__transaction_markers() -> None:
    schedule = Schedule(
        "random",
        1,
        ("A", "B"),
        "ASYNC",
        star(("A", "B")),
        (Step(2.0, "kill", ("A",)), Step(4.0, "restart", ("A",)), Step(6.0, "pause", ("B",))),
        PHASE_S,
    )
    run = twin.nominal_run(schedule)
    run.applied = [
        twin.AppliedStep(Step(2.0, "kill", ("A",)), 2000, 2001),
        twin.AppliedStep(Step(4.0, "restart", ("A",)), 4000, 4900),  # ready at 4.9 s
        twin.AppliedStep(Step(6.0, "pause", ("B",)), 6000, 6000),
    ]
    txn = "source_transactional_producer"
    run.ops = [
        send("p", "A", "ok", 1000, 1005, 0, "far-before"),  # certain
        send("p", "A", "ok", 1900, 1950, 0, "done-before-kill"),  # certain
        send("p", "A", "ok", 1990, 2003, 0, "across-the-kill"),  # in doubt (window)
        send("p", "A", "info", 2500, 2600, 1, "during-outage"),  # in doubt (info)
        send("p", "A", "ok", 3900, 4950, 1, "blocked-until-ready"),  # in doubt (window)
        send("p", "A", "ok", 5500, 5510, 0, "after"),  # certain
        send("p", "A", "ok", 5990, 6010, 0, "at-the-follower-pause"),  # certain: B not written
        send("probe", "B", "fail", 3000, 3010, 0, "refused", "target_producer"),  # certain
        send("t", "A", "info", 7000, 7100, 0, "t-0", txn),
        send("t", "A", "info", 7000, 7100, 1, "t-1", txn),
        send("t", "A", "info", 7000, 7100, 0, "t-2", txn),
        # A commit refused as LINK_NOT_IN_SYNC, then aborted: certain.
        send("t", "A", "fail", 8000, 8100, 0, "t-3", txn, "CcrError: LINK_NOT_IN_SYNC: ..."),
        send("t", "A", "fail", 8000, 8100, 1, "t-4", txn, "CcrError: LINK_NOT_IN_SYNC: ..."),
        # Aborted after a failed produce: in doubt.
        send("t", "A", "fail", 9000, 9100, 1, "t-5", txn, "CcrError: TIMED_OUT: ..."),
    ]
    assert twin.in_doubt(run) == {("orders-x", 0): 1 + 2 + 1, ("orders-x", 1): 2 + 1 + 1 + 2}


def test_in_doubt__a_promoted_follower__sends_near_the_cut_of_its_link() -> None:
    schedule = make_schedule(5, name="sync-ack-failover", phase_s=PHASE_S)
    run = twin.nominal_run(schedule)
    run.ops = [
        send("p", "A", "ok", 500, 505, 0, "early"),  # certain
        send("p", "A", "ok", 1500, 1505, 0, "before-the-cut"),  # in doubt for B
        send("p", "A", "ok", 3000, 3005, 0, "after-the-cut"),  # certain (never reached B)
        send("p", "B", "ok", 7000, 7005, 1, "on-b"),  # certain
    ]
    assert twin.in_doubt(run) == {("orders-x", 0): 1}


# -- comparison (pure) ----------------------------------------------------------------------


def final(leo_a0: int = 100, state_b: str = "FOLLOWING") -> twin.FinalState:
    return twin.FinalState(
        partitions={
            ("A", "orders-x", 0): (leo_a0, leo_a0),
            ("A", "orders-x", 1): (90, 90),
            ("B", "orders-x", 0): (leo_a0, leo_a0),
            ("B", "orders-x", 1): (90, 90),
        },
        links={("ab", "A"): ("FOLLOWING", "ASYNC"), ("ab", "B"): (state_b, "ASYNC")},
    )


def test_compare__identical_states_agree() -> None:
    assert twin.compare(final(), final(), {}) == []


def test_compare__a_difference_beyond_the_records_in_doubt_is_reported() -> None:
    found = twin.compare(final(105), final(100), {("orders-x", 0): 2})
    assert found == [
        "orders-x-0 on A: log end offset 105 real, 100 simulated (differ by 5, 2 in doubt)",
        "orders-x-0 on A: high watermark 105 real, 100 simulated (differ by 5, 2 in doubt)",
        "orders-x-0 on B: log end offset 105 real, 100 simulated (differ by 5, 2 in doubt)",
        "orders-x-0 on B: high watermark 105 real, 100 simulated (differ by 5, 2 in doubt)",
    ]


def test_compare__differences_within_the_records_in_doubt_are_allowed() -> None:
    assert twin.compare(final(102), final(100), {("orders-x", 0): 2}) == []
    # ... but only on the partition they are in doubt for.
    assert twin.compare(final(102), final(100), {("orders-x", 1): 2}) != []


def test_compare__link_states_are_exact__missing_links_and_partitions_reported() -> None:
    assert twin.compare(final(), final(state_b="CATCHING_UP"), {}) == [
        "link ab on B: real FOLLOWING (ASYNC), simulated CATCHING_UP (ASYNC)"
    ]
    fewer = final()
    del fewer.links[("ab", "B")]
    del fewer.partitions[("B", "orders-x", 1)]
    assert twin.compare(final(), fewer, {("orders-x", 1): 50}) == [
        "link ab on B: real FOLLOWING (ASYNC), simulated absent",
        "orders-x-1 on B: only in the real run",
    ]


# -- a whole twin against a planted "real" state (pure) ----------------------------------------


def simulated_state(run: twin.RealRun) -> twin.FinalState:
    sim = Simulation(twin.to_scenario(run), run.schedule.seed)
    sim.run()
    twin.settle(sim)
    return twin.sim_final_state(sim, run.schedule, ("orders-",))


def test_run_twin__agrees_with_its_own_prediction__reports_a_planted_extra_record() -> None:
    schedule = Schedule(
        "random",
        9,
        ("A", "B"),
        "ASYNC",
        star(("A", "B")),
        (
            Step(1.5, "pause", ("A",)),
            Step(3.0, "resume", ("A",)),
            Step(4.0, "cut", ("ab", "both")),
            Step(6.0, "heal", ("ab",)),
        ),
        PHASE_S,
    )
    run = twin.nominal_run(schedule)
    run.ops = steady_ops("A", 100, round(PHASE_S * 1000) - 100)
    run.final = simulated_state(run)
    assert run.final.partitions[("B", "orders-x", 0)][0] > 100
    report = twin.run_twin(run)
    assert report["agrees"], report["differences"]
    assert report["differences"] == []
    assert report["sim_violations"] == []
    # Deterministic: the same run twice gives the same simulated state.
    assert twin.run_twin(run)["simulated"] == report["simulated"]

    planted = dataclasses.replace(
        run, final=twin.FinalState(dict(run.final.partitions), dict(run.final.links))
    )
    leo, hw = planted.final.partitions[("A", "orders-x", 0)]
    extra = report["in_doubt_by_partition"].get("orders-x-0", 0) + 1
    planted.final.partitions[("A", "orders-x", 0)] = (leo + extra, hw + extra)
    planted.final.links[("ab", "B")] = ("CATCHING_UP", "ASYNC")
    found = twin.run_twin(planted)
    assert not found["agrees"]
    assert any(d.startswith("orders-x-0 on A: log end offset") for d in found["differences"])
    assert (
        "link ab on B: real CATCHING_UP (ASYNC), simulated FOLLOWING (ASYNC)"
        in (found["differences"])
    )


def test_cli_table__has_a_twin_column() -> None:
    row = {"seed": 1, "mode": "ASYNC", "clusters": 2, "nemeses": "pause", "operations": 10,
           "info": 0, "anomalies": 0, "converged": True, "seconds": 1.0}  # fmt: skip
    agreeing = {**row, "twin": twin_cell({"agrees": True, "differences": [], "in_doubt": 3})}
    differing = {**row, "seed": 2, "twin": twin_cell({"agrees": False, "differences": ["x"]})}
    text = table([agreeing, differing])
    assert "| twin |" in text
    assert "| agrees (3 in doubt) |" in text and "| DIFFERS (1) |" in text
    assert "1 of 2 twins agree" in text
    assert twin_cell(None) == "-"


# -- link policies and transactions held open (pure) ---------------------------------------


def _txn_failover_run(policy: str) -> twin.RealRun:
    """The txn-failover classic's twin with a transaction held open across A's
    loss (6 s): three records at 5.2 s, to commit 1.5 s later."""
    configs = (("failover.truncation", policy),) if policy else ()
    schedule = make_schedule(1, name="txn-failover", phase_s=PHASE_S, link_configs=configs)
    run = twin.nominal_run(schedule)
    txn = "source_transactional_producer"
    run.ops = [
        *steady_ops("A", 100, 5_900, every_ms=100),
        send("txn-producer", "A", "info", 5_200, 6_500, 0, "txn-producer-0", txn),
        send("txn-producer", "A", "info", 5_200, 6_500, 1, "txn-producer-1", txn),
        send("txn-producer", "A", "info", 5_200, 6_500, 0, "txn-producer-2", txn),
    ]
    return run


def test_twin__link_policies_and_transactions_held_open__the_failover_cuts_or_aborts() -> None:
    run = _txn_failover_run("last-stable-offset")
    scenario = twin.to_scenario(run)
    assert scenario.topology.failover_truncation == "last-stable-offset"
    assert scenario.topology.fetch_bound == "" and scenario.topology.gap_policy == ""
    sends = [s for script in scenario.scripts for s in script.sends if s.txn]
    assert {s.commit_after_ms for s in sends} == {schedule_open_ms(run)}
    outcomes = {}
    for policy in ("last-stable-offset", ""):
        sim = Simulation(twin.to_scenario(_txn_failover_run(policy)), 1)
        sim.run()
        (_cluster, _link, _at, result), = sim.failovers
        outcomes[policy] = (
            sum(c.removed for c in result.truncated),
            len(result.dangling),
        )
    # Held open, the transaction is on B without its commit when A is lost:
    # the cut removes it and every record after its first (the plain
    # producer's too); the default aborts it (a row per partition it wrote)
    # and keeps every record.
    cut, aborted = outcomes["last-stable-offset"]
    assert cut >= 3 and aborted == 0, outcomes
    assert outcomes[""] == (0, 2), outcomes


def schedule_open_ms(run: twin.RealRun) -> int:
    return run.schedule.txn_open_ms


def test_twin__retention_outage__the_same_retention_and_the_operator_s_answer() -> None:
    """The retention-outage classic's twin: the topic's retention and its
    segments, the daemons' retention check, and the `resume-partitions`
    step as the operator's two actions (gap.policy continue, then a resume
    of each partition)."""
    configs = (("gap.policy", "stop"),)
    schedule = make_schedule(1, name="retention-outage", phase_s=PHASE_S, link_configs=configs)
    run = twin.nominal_run(schedule)
    run.ops = steady_ops("A", 100, 12_000, every_ms=20)
    scenario = twin.to_scenario(run)
    assert scenario.topology.gap_policy == "stop"
    assert (scenario.namespace.retention_ms, scenario.namespace.segment_ms) == (3000, 1000)
    assert scenario.cluster.retention_check_interval_ms == 1000
    answer = [(a.kind, a.cluster, a.link, a.gap_policy, a.partition) for a in scenario.actions]
    assert answer == [
        ("alter_link", "B", "A-B", "continue", 0),
        ("resume_partition", "B", "A-B", "", 0),
        ("resume_partition", "B", "A-B", "", 1),
    ]
    faults = [(f.kind, f.node) for f in scenario.faults if f.kind in ("crash", "restart")]
    assert ("crash", "B") in faults
    # Simulated, B stops at its gaps and the answer lets it go on: every
    # record A still holds reaches B, the skipped ranges recorded as gaps.
    sim = Simulation(scenario, 1)
    sim.run()
    assert sim.violations == []
    assert sim.metrics.values["gap_records"] > 0


def test_failback_unclean__the_election_in_the_twin__the_failback_judged_on_final_logs() -> None:
    """The failback-unclean classic: its `unclean` step is the simulator's
    unclean_election of each partition; and the judge's "diverged after
    failback" names a relinked cluster's records that differ from its new
    source's at the same offsets (and nothing when they agree)."""
    from types import SimpleNamespace

    configs = (("failback.reconciliation", "last-mirrored-offset"),)
    schedule = make_schedule(1, name="failback-unclean", phase_s=PHASE_S, link_configs=configs)
    assert [s.op for s in schedule.steps] == [
        "kill", "unclean", "kill", "restart", "failover", "restart", "relink",
    ]
    scenario = twin.to_scenario(twin.nominal_run(schedule))
    assert scenario.topology.failback_reconciliation == "last-mirrored-offset"
    elections = [(f.node, f.partition, f.records) for f in scenario.faults
                 if f.kind == "unclean_election"]  # fmt: skip
    assert elections == [("A", 0, 200), ("A", 1, 200)]
    relink = Step(10.0, "relink", ("A", "ab", "ba", "B"))
    fake = SimpleNamespace(applied=[twin.AppliedStep(relink, 10_000, 10_100)])
    same = {("B", "orders-x", 0): {0: "a0", 1: "a1", 2: "b2"},
            ("A", "orders-x", 0): {0: "a0", 1: "a1", 2: "b2"}}  # fmt: skip
    assert Run.check_failed_back(fake, same) == []  # type: ignore[arg-type]
    kept = {**same, ("A", "orders-x", 0): {0: "a0", 1: "x1", 2: "x2", 3: "x3"}}
    found = Run.check_failed_back(fake, kept)  # type: ignore[arg-type]
    # The simulator's check, one violation per differing record below where
    # both logs end (offset 3 is A's alone: not compared).
    assert [v.invariant for v in found] == ["diverged after failback"] * 2
    assert [v.detail.split(": ", 1)[0] for v in found] == [
        "A's failback to B (link ba), cut to 3"
    ] * 2
    assert "offset 1 differs" in found[0].detail and "offset 2 differs" in found[1].detail
