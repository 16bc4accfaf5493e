"""MirrorMaker 2 on a Kafka Connect group in the simulator (sim/connect_driver.py):
the mm2-connect-rebalance scenario runs clean under both protocols, and what
each costs (task pauses, re-copies, rebalances) is measured."""

from __future__ import annotations

from typing import Any

import pytest

from sim import scenario as scenarios
from sim.runner import run_summary

# The scenario's faults with a 20 s scheduled rebalance delay (5 minutes as shipped).
SHORT = {"scheduled_rebalance_max_delay_ms": 20_000}


def run(protocol: str) -> dict[str, Any]:
    return run_summary("mm2-connect-rebalance", 1, {**SHORT, "connect_protocol": protocol})


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return {p: run(p) for p in ("eager", "sessioned")}


def test_both_protocols_run_clean_and_measure_their_rebalances(
    runs: dict[str, dict[str, Any]],
) -> None:
    for protocol, summary in runs.items():
        assert summary["violations"] == [], protocol
        m = summary["metrics"]
        assert m["connect_rebalances"] >= 3, protocol
        assert m["connect_task_pauses"] >= 1, protocol
        assert m["connect_task_pause_ms_max"] >= m["connect_task_pause_ms_p50"] > 0, protocol
        # The flow's replication pauses: each as long as its longest task pause
        # at least, and no longer than the tasks' pauses end to end.
        assert m["connect_replication_pauses"] >= 1, protocol
        assert m["connect_replication_pause_ms_max"] >= m["connect_task_pause_ms_max"], protocol
        assert m["connect_rebalances_in_pauses"] <= m["connect_rebalances"], protocol
        # A crash loses acknowledged, uncommitted positions: copied twice.
        assert m["mirror_duplicates_stored"] >= 1, protocol


def test_eager_stops_every_task_cooperative_waits_for_the_lost_worker(
    runs: dict[str, dict[str, Any]],
) -> None:
    eager, coop = runs["eager"]["metrics"], runs["sessioned"]["metrics"]
    # Eager: every rebalance stops all 6 tasks; cooperative moves only lost ones.
    assert eager["connect_task_pauses"] > coop["connect_task_pauses"]
    # Cooperative holds a departed worker's tasks for the scheduled delay.
    assert coop["connect_task_pause_ms_max"] >= SHORT["scheduled_rebalance_max_delay_ms"]
    assert eager["connect_task_pause_ms_max"] < SHORT["scheduled_rebalance_max_delay_ms"]
    # Per rebalance: eager pauses all replication at every one; cooperative
    # runs its rebalances inside fewer, longer pauses.
    assert eager["connect_replication_pauses"] > coop["connect_replication_pauses"]
    assert (
        coop["connect_rebalances_in_pauses"] / coop["connect_replication_pauses"]
        > eager["connect_rebalances_in_pauses"] / eager["connect_replication_pauses"]
    )


def test_connect_settings_are_checked_by_name() -> None:
    base = scenarios.load("mm2-connect-rebalance")
    with pytest.raises(scenarios.ScenarioError, match=r"connect\.protocol = 'lazy'"):
        scenarios.apply_params(base, {"connect_protocol": "lazy"})
    with pytest.raises(scenarios.ScenarioError, match="tasks_max = 0"):
        scenarios.apply_params(base, {"tasks_max": 0})
    data = {
        "name": "x",
        "topology": {"link_type": "mirror"},
        "connect": {"workers": 2},
        "faults": [{"at_ms": 1, "kind": "worker_crash", "worker": "w2"}],
    }
    with pytest.raises(scenarios.ScenarioError, match="worker = 'w2' is not a worker"):
        scenarios.parse(data)
