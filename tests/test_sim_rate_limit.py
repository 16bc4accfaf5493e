"""The replication rate limit throttles as Kafka's leader replication quota
does (KIP-73; `sim/resources.py`): within the quota a replica fetch reads up
to its max bytes, and the bytes are taken even into debt; over the quota it
reads nothing until the debt is paid.

It once waited for a single token and read only what had gathered, so a
throttled catch-up ran as hundreds of tiny rounds (418 in the run below),
each costing work for every partition of the link."""

from __future__ import annotations

from sim.resources import RateLimit
from sim.runner import run_summary

# 50 partitions, one hour cut off: about 246 MB behind, caught up at 10 MB/s.
PARAMS = {
    "partitions": 50,
    "outage_ms": 3_600_000,
    "duration_ms": 4_800_000,
    "replication_limit_bytes_per_s": 10_000_000,
    "disk_fractional_ms": True,
}


def test_a_throttled_catch_up_reads_in_rounds_of_the_fetch_max_bytes() -> None:
    summary = run_summary("catch-up-storm", 1, PARAMS)
    assert summary["violations"] == []
    metrics = summary["metrics"]
    assert metrics["catchups"] == 1
    backlog = metrics["io_bytes_replica_read"]
    assert backlog > 200_000_000
    # 100 MiB a round: three rounds of catch-up, the rest long polls of 30 s
    # between the bulk producer's batches (one every 10 minutes).
    assert metrics["fetch_rounds"] < 60


def test_the_bucket_goes_into_debt_and_is_paid_back_at_its_rate() -> None:
    bucket = RateLimit(1_000_000)  # 1 MB/s, one second of burst
    assert bucket.available(1_000) == 1_000_000
    bucket.take(5_000_000, 1_000)  # a whole fetch within the quota: 4 MB of debt
    assert bucket.available(1_000) < 0
    assert bucket.wait_ms(1, 1_000) == 4_001  # until the debt is paid, not a fetch's worth
    assert bucket.available(5_001) > 0
