"""What a follower's checks cost per copied batch: the replica's checks
(`append_replica` as it is: CRC, a header that agrees with itself, offsets
that continue the log) side by side with the same append preceded by the
producer's walk over every record (`records.check_records`, what the
follower did before issue 32), in one run.

    python bench/follower_append.py [--batches N] [--repeat R]

One row per (record size, codec): 100 records a batch, N batches appended
to a fresh follower partition per run, medians of R interleaved runs (one
of each way, then the next round, so both see the same background load).
Prints MB/s of record bytes for each way, the ratio, and the load average
before and after. Nothing is asserted; this is the core alone, no network,
no storage.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.replication import append_replica, create_replica_topic

RECORDS_PER_BATCH = 100
TS = 1_700_000_000_000
CODECS = {"none": rb.COMPRESSION_NONE, "lz4": rb.COMPRESSION_LZ4, "zstd": rb.COMPRESSION_ZSTD}


def batches(size: int, codec: int, count: int) -> list[bytes]:
    """`count` batches at consecutive offsets, each of RECORDS_PER_BATCH
    records of `size` bytes (a varied value, so compression has work)."""
    out: list[bytes] = []
    for b in range(count):
        specs = [
            rb.RecordSpec(f"k{i}".encode(), (f"{b}-{i}-".encode() * size)[:size], TS + i)
            for i in range(RECORDS_PER_BATCH)
        ]
        out.append(
            rb.with_base_offset(rb.build_batch(specs, compression=codec), b * RECORDS_PER_BATCH)
        )
    return out


def append_all(data: list[bytes], walk: bool) -> float:
    """Seconds to append every batch to a fresh follower partition, one
    fetch answer a batch; with `walk`, each answer's records are first
    walked as the producer's check walks them."""
    state = ClusterState("B")
    create_replica_topic(state, "t", 1, {}, "t-1")
    start = time.perf_counter()
    for batch in data:
        if walk:
            rb.check_records(batch, max_decompressed=rb.MAX_DECOMPRESSED_BYTES, produced=False)
        append_replica(state, "t", 0, batch, 0)
    return time.perf_counter() - start


def median_of(repeat: int, runs: list[Callable[[], float]]) -> list[float]:
    seconds: list[list[float]] = [[] for _ in runs]
    for _ in range(repeat):
        for i, run in enumerate(runs):
            seconds[i].append(run())
    return [statistics.median(s) for s in seconds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'size':>6} {'codec':>5} {'checks only MB/s':>17} {'with walk MB/s':>15} {'ratio':>6}")
    for size in (100, 1024):
        for name, codec in CODECS.items():
            data = batches(size, codec, args.batches)
            mb = size * RECORDS_PER_BATCH * len(data) / 1e6
            fast, slow = median_of(
                args.repeat,
                [lambda d=data: append_all(d, False), lambda d=data: append_all(d, True)],
            )
            print(f"{size:>6} {name:>5} {mb / fast:>17.1f} {mb / slow:>15.1f} {slow / fast:>6.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
