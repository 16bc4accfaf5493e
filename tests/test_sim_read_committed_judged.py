"""Invariant 5 in the simulator on what read_committed readers read and on
the final logs: the judges the chaos runner applies to real daemons
(`check_aborted_reads`, `check_committed_logs_atomic`), fed from the
simulated clusters' own state (`judge.read_committed_finals`)."""

from __future__ import annotations

from sim import follower_metrics, judge
from sim import scenario as sc
from sim.history import Op, Poll
from sim.world import Simulation


def _run_without_judging() -> Simulation:
    """fetch-bound-failover, seed 1: B's forced failover aborts transactions
    whose COMMIT had not arrived from A, so B's final log holds records a
    read_committed reader must never have read."""
    sim = Simulation(sc.load("fetch-bound-failover"), 1, False)
    sim.final_checks = lambda: None  # type: ignore[method-assign]
    sim.run()
    return sim


def test_a_read_committed_poll_of_a_record_the_cluster_never_committed_is_a_violation() -> None:
    sim = _run_without_judging()
    final = judge.final_logs(sim)
    committed, stable, _reopened = judge.read_committed_finals(sim, final)
    hidden = follower_metrics.aborted_offsets(sim, final)
    assert hidden, "the run left no aborted transaction on B to read"
    (cluster, topic, partition), offsets = sorted(hidden.items())[0]
    offset = min(offsets)
    value = final[(cluster, topic, partition)][offset]
    assert offset < stable[(cluster, topic, partition)]
    assert offset not in committed[(cluster, topic, partition)]
    # The run as it happened is clean.
    judge.final_checks(sim)
    assert not [v for v in sim.violations if v.invariant == "5 txn atomic"], sim.violations
    # A read_committed poll that returned that record is not.
    sim.violations.clear()
    sim.history.add(
        Op("liar", "target_consumer", cluster, "ok", 30_000, 30_001,
           Poll(topic, ((partition, offset, value),), 99, True))
    )  # fmt: skip
    judge.final_checks(sim)
    found = [v.detail for v in sim.violations if v.invariant == "5 txn atomic"]
    assert len(found) == 1 and "never committed" in found[0] and value in found[0], found
