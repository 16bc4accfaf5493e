"""The simulator's log cleaner: the core's clean procedure
(`linkd/core/cleaner.py` decides) run on the virtual clock over the
in-memory stores.

Rules:
- A cluster cleans at most once per `CLEANER_BACKOFF_MS` of virtual time
  (15 s, Kafka's default log.cleaner.backoff.ms), from its tick.
- The active segment is where the store's last segment starts (the core
  rolls segments for both shells: segment.bytes, segment.ms,
  max.compaction.lag.ms), and it is never cleaned (`cleaner.plan_clean`).
- A clean rewrites every batch below that point in one step (the model and
  the store together, as one swap) and charges the bytes it
  reads and writes to the cluster's disk (traffic class "cleaner").
- A rewritten batch's logical size shrinks with the records it keeps.
"""

from __future__ import annotations

from linkd.core import cleaner
from linkd.core import cluster as core
from sim.resources import IoDevice
from sim.store import PartitionStore, StoredBatch

CLEANER_BACKOFF_MS = 15_000


def clean_partition(
    topic: core.Topic, partition: int, store: PartitionStore, disk: IoDevice, now_ms: int
) -> int:
    """Cleans one partition if the core asks for it (the core's clean
    procedure, every batch below the active segment as one segment); returns
    the records removed."""
    log = topic.partitions[partition]
    boundary = store.segment_bases[-1]
    plan = cleaner.plan_clean(log, topic.config, boundary, now_ms)
    if plan is None:
        return 0
    first = store.index_at(log.log_start_offset)
    last = store.index_at(boundary)
    old = store.batches[first:last]
    data = b"".join(b.data for b in old)
    segments = [(old[0].base_offset, boundary)] if old else []
    steps = cleaner.clean_procedure(log, plan, segments)
    fresh: list[StoredBatch] = []
    step = cleaner.next_step(steps, None)
    while not isinstance(step, cleaner.CleanDone):
        answer: cleaner.CleanedBatches | None = None
        if isinstance(step, cleaner.MapSegment):
            step.add(data)
        else:
            answer = step.clean(data)
            fresh = _stored(answer, old)
            store.replace(first, last, fresh)
        step = cleaner.next_step(steps, answer)
    if old:
        read = sum(b.logical_bytes for b in old)
        disk.reserve(read + sum(b.logical_bytes for b in fresh), now_ms, "cleaner")
    return step.removed_records


def _stored(cleaned: cleaner.CleanedBatches, old: list[StoredBatch]) -> list[StoredBatch]:
    """The store's batches for a rewritten run: a batch's logical size
    shrinks with the records it keeps."""
    sizes = {b.base_offset: b for b in old}
    fresh: list[StoredBatch] = []
    position = 0
    for header in cleaned.headers:
        was = sizes[header.base_offset]
        batch = cleaned.data[position : position + header.size_bytes]
        position += header.size_bytes
        logical = max(len(batch), was.logical_bytes * len(batch) // max(1, len(was.data)))
        fresh.append(StoredBatch(header.base_offset, header.next_offset, batch, logical))
    return fresh
