"""Same seed, same run: the trace digest is the proof."""

from __future__ import annotations

import functools
from typing import Any

from sim.runner import run_summary


@functools.cache
def first_run(scenario: str, seed: int) -> dict[str, Any]:
    """A run's summary, computed once for the module (a second, fresh run is
    what the determinism tests compare it with)."""
    return run_summary(scenario, seed)


def test_same_seed_twice__same_digest_and_metrics() -> None:
    a = first_run("partition-heal", 11)
    b = run_summary("partition-heal", 11)
    assert a["trace_digest"] == b["trace_digest"]
    assert a == b


def test_different_seeds__different_digests() -> None:
    assert (
        first_run("partition-heal", 11)["trace_digest"]
        != run_summary("partition-heal", 12)["trace_digest"]
    )


def test_params_change_the_run_and_are_reported() -> None:
    s = run_summary("failover-writable", 1, {"link_latency_ms": 40})
    assert s["params"] == {"link_latency_ms": 40}
    assert s["trace_digest"] != run_summary("failover-writable", 1)["trace_digest"]


def test_sync_links__same_seed_twice__same_digest() -> None:
    a = run_summary("sync-follower-stall", 5)
    b = run_summary("sync-follower-stall", 5)
    assert a["trace_digest"] == b["trace_digest"] and a == b
    assert a["mode"] == "SYNC"


def test_link_network_parameters_override_the_edges_own_values() -> None:
    """dr-multi-zone's edges set their own latency (150 ms and 2 ms); the
    `link_latency_ms` parameter sets every link's, so sweeping it varies them."""
    from sim.scenario import apply_params, load

    base = load("dr-multi-zone")
    assert sorted(e.latency_ms or 0 for e in base.edges) == [2, 150]
    swept = apply_params(base, {"link_latency_ms": 40, "link_loss": 0.0})
    assert [(e.latency_ms, e.loss) for e in swept.edges] == [(None, None)] * len(base.edges)
    assert swept.network.latency_ms == 40
    near = run_summary("dr-multi-zone", 1, {"link_latency_ms": 2})
    far = run_summary("dr-multi-zone", 1, {"link_latency_ms": 400})
    assert near["metrics"]["rpo_records"] < far["metrics"]["rpo_records"]
