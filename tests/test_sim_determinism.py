"""Same seed, same run: the trace digest is the proof."""

from __future__ import annotations

from sim.runner import run_summary


def test_same_seed_twice__same_digest_and_metrics() -> None:
    a = run_summary("partition-heal", 11)
    b = run_summary("partition-heal", 11)
    assert a["trace_digest"] == b["trace_digest"]
    assert a == b


def test_different_seeds__different_digests() -> None:
    assert (
        run_summary("partition-heal", 11)["trace_digest"]
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
