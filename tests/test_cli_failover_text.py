"""What `ccr-admin failover` prints for an answer: a known lag is a count of
records, an unknown one says since when (or that it was never learned),
never "at least 0" or "-1"; every aborted transaction is named."""

from __future__ import annotations

from typing import Any

from admin.cli import failover_lines


def _row(partition: int, lag: int, known: bool, since: int, hw: int, leo: int) -> dict[str, Any]:
    return {
        "topic": "orders-1", "partition": partition, "lag_records": lag, "lag_ms": -1 if not known
        else 0, "lag_known": known, "unknown_since_ms": since, "source_high_watermark": hw,
        "log_end_offset": leo, "source_hw_known_at_ms": max(since, 0),
    }  # fmt: skip


def test_nothing_abandoned__says_so() -> None:
    assert failover_lines([], []) == [
        "abandoned nothing: the lag of every follower partition was known and zero"
    ]


def test_known__unknown_since__and_never_learned__each_read_as_what_it_is() -> None:
    rows = [
        _row(0, 4, True, 0, 14, 10),
        _row(1, -1, False, 1_765_000_000_120, 20, 18),
        _row(2, -1, False, -1, -1, 0),
    ]
    aborted = [{"topic": "orders-1", "partition": 0, "producer_id": 7, "first_offset": 3}]

    lines = failover_lines(rows, aborted)
    text = "\n".join(lines)

    assert lines[0] == (
        "abandoned 4 records on 1 partitions and 2 partitions whose lag is not known:"
    )
    assert "orders-1-0: 4 records (readable to 10, log end 10, source high watermark 14" in text
    assert "orders-1-1: lag unknown since" in text and "(at 2025-12-06T05:46:40.120Z)" in text
    assert (
        "the source's high watermark was 20 and this cluster could read to 18 "
        "(log end 18; 2 records behind)"
    ) in text
    assert "orders-1-2: lag never learned" in text
    assert "at least 0" not in text and ": -1" not in text and "as of never" not in text
    assert lines[-1] == (
        "aborted a replicated transaction left open in orders-1-0 (producer 7, from offset 3)"
    )
