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
