"""The simulator's scenario library, told as stories: each test runs a shipped
scenario through the real core and asserts on what the summary reports."""

from __future__ import annotations

from typing import Any

import pytest

from sim.runner import run_summary


def names(summary: dict[str, Any]) -> list[str]:
    return [v["invariant"] for v in summary["violations"]]


def test_dr__a_lost__b_promoted__c_told_what_to_truncate() -> None:
    s = run_summary("dr-multi-zone", 1)
    m = s["metrics"]
    assert names(s) == []
    # C was closer to A than B was: once re-pointed to B it cut what B never had,
    # and what it kept is byte for byte B's (invariants 1 and 2 hold).
    assert m["records_truncated_by_recovery"] > 0
    assert m["rpo_records"] > 0
    assert m["actions_ok"] == 3


def test_dr__core_failover_starts_a_new_epoch__c_truncates_without_help() -> None:
    """The core's failover now starts a new leader epoch on promoted partitions,
    so the simulator's optional extra bump is not needed for C to see the
    divergence (with it off, offset identity still holds)."""
    import dataclasses

    from sim import scenario as scenarios
    from sim.world import Simulation

    spec = scenarios.load("dr-multi-zone")
    spec = dataclasses.replace(
        spec,
        actions=tuple(
            dataclasses.replace(a, bump_leader_epoch=False) if a.kind == "failover" else a
            for a in spec.actions
        ),
    )
    sim = Simulation(spec, 1)
    sim.run()
    assert sim.violations == []
    assert sim.metrics.values["records_truncated_by_recovery"] > 0


def test_failover__follower_refuses_writes_until_promoted__then_accepts() -> None:
    s = run_summary("failover-writable", 3)
    m = s["metrics"]
    assert names(s) == []
    assert m["availability_target_producer"] == 0.0  # refused while reserved
    assert m["availability_source_producer"] > 0.9  # B's producers after failover, and A's


def test_unclean_election_on_source__follower_truncates_to_the_matching_point() -> None:
    s = run_summary("unclean-election", 2)
    m = s["metrics"]
    assert names(s) == []
    assert m["records_truncated_unclean"] > 0
    assert 0 < m["records_truncated_by_recovery"] <= m["records_truncated_unclean"]


def test_existing_topic__late_follower_copies_from_offset_zero() -> None:
    s = run_summary("add-existing-topic", 1)
    assert names(s) == []
    assert s["metrics"]["catchup_ms"] > 0


def test_empty_namespace__the_link_is_following__and_later_topics_follow() -> None:
    """An attached namespace with no topic yet lags nothing: the link is
    FOLLOWING (the daemon once left it CATCHING_UP for ever; the simulator
    found it)."""
    s = run_summary("add-empty-namespace", 1)
    assert names(s) == [], s["violations"]


def test_ring_under_partitions__configs_converge_and_logs_agree() -> None:
    s = run_summary("partition-heal", 4)
    assert names(s) == []
    assert s["topology"] == "ring"
    assert s["metrics"]["link_state_ms_DISCONNECTED"] > 0


@pytest.mark.parametrize("kind", ["chain", "hub", "mesh", "ring", "diamond"])
def test_every_topology__replicates_and_converges(kind: str) -> None:
    s = run_summary("partition-heal", 5, {"topology": kind, "clusters": 4, "duration_ms": 8000})
    assert s["topology"] == kind
    assert names(s) == [], s["violations"]


def run_world(name: str, seed: int, params: dict[str, Any] | None = None) -> Any:
    from sim import scenario as scenarios
    from sim.world import Simulation

    sim = Simulation(scenarios.apply_params(scenarios.load(name), params), seed)
    sim.run()
    return sim


def test_sync_link__follower_clogged__out_of_sync__commits_fail__then_in_sync() -> None:
    sim = run_world("sync-follower-stall", 1)
    assert sim.violations == []
    source_states = [s for s, _at in sim.clusters["A"].links.runtime["A-B"].history]
    # A judged the clogged follower: IN_SYNC, then OUT_OF_SYNC, then IN_SYNC again.
    assert source_states[-3:] == ["IN_SYNC", "OUT_OF_SYNC", "IN_SYNC"]
    out_at = [at for s, at in sim.clusters["A"].links.runtime["A-B"].history][-2]
    back_at = [at for s, at in sim.clusters["A"].links.runtime["A-B"].history][-1]
    # Out of sync once the lag time passed with no fetch (clog from 10 s, lag 2 s).
    assert 12_000 <= out_at <= 13_000 and back_at > 16_000
    ops = sim.history.sends()
    plain_ok_while_out = [
        o
        for o in ops
        if o.process == "plain" and o.type == "ok" and out_at < o.complete_ms < back_at
    ]
    refused = [o for o in ops if o.process == "txn" and o.error == "LINK_NOT_IN_SYNC"]
    committed_after = [
        o for o in ops if o.process == "txn" and o.type == "ok" and o.invoke_ms > back_at
    ]
    assert plain_ok_while_out and all(not o.value.sync_witnesses for o in plain_ok_while_out)
    assert refused and all(out_at <= o.invoke_ms <= back_at + 1_000 for o in refused)
    assert committed_after and all(o.value.sync_witnesses for o in committed_after)


def test_sync_link__source_lost_while_in_sync__failover_loses_nothing_acknowledged() -> None:
    sim = run_world("sync-failover", 1)
    assert sim.violations == []  # invariants 4 and 5 included
    assert sim.metrics.values["actions_ok"] == 1  # the failover
    witnessed = [o for o in sim.history.sends() if o.type == "ok" and o.value.sync_witnesses]
    assert len(witnessed) > 100
    assert sim.metrics.values["rpo_records"] == 0
    promoted = [o for o in sim.history.sends() if o.type == "ok" and o.cluster == "B"]
    assert promoted  # the application writes on B after the failover


def test_sync_link__a_cluster_acking_before_replication__is_caught_by_invariant_4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The checks can fail: plant "ack before replicate" (acks=all no longer
    waits for the high watermark) and invariant 4 names it. The link takes
    30 ms each way, so when the source dies its follower has not yet copied
    the writes of the last round trip, which were acknowledged: lost."""
    from sim.cluster_node import SimCluster

    def ack_at_once(
        self: SimCluster, targets: Any, what: str, then: Any, marks: Any = None
    ) -> None:
        then(None)

    monkeypatch.setattr(SimCluster, "wait_high_watermarks", ack_at_once)
    sim = run_world("sync-failover", 1, {"link_latency_ms": 30})
    assert {"sync_ack_not_replicated", "sync_ack_lost"} <= {v.invariant for v in sim.violations}


def test_sync_link__one_partition_per_fetch__transactions_stay_atomic_on_the_follower() -> None:
    """Found by the simulator: the source's HWs moved partition by partition,
    so a follower fetching one partition per round showed half a committed
    transaction. A transaction's commit markers now pass their HWs together."""
    import dataclasses

    from sim import scenario as scenarios
    from sim.world import Simulation

    spec = scenarios.load("sync-failover")
    spec = dataclasses.replace(spec, run=dataclasses.replace(spec.run, fetch_max_bytes=1500))
    sim = Simulation(spec, 1)
    sim.run()
    assert "partial_transaction" not in {v.invariant for v in sim.violations}
