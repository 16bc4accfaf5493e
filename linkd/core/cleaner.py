"""The log cleaner of compacted topics (`cleanup.policy=compact`): what a clean keeps.

Pure: the shell reads segment bytes, hands them here, and writes back what
comes out (`linkd/node.py` in the daemon). The rules are Kafka's LogCleaner's:

- A partition's *cleanable* records lie below its cleanable end: the first
  offset of its active segment (the shell knows where that starts), its last
  stable offset, and the first batch younger than `min.compaction.lag.ms`,
  whichever is lowest. The active segment is never cleaned.
- The *dirty* section runs from where the last clean ended (`cleaned_up_to`,
  Kafka's cleaner checkpoint) to the cleanable end. A clean starts when the
  dirty bytes are at least `min.cleanable.dirty.ratio` of the cleanable
  bytes, when the oldest dirty record is older than `max.compaction.lag.ms`
  (its segment is cleanable by then: a compacted topic's segments roll by
  that lag too), or when tombstones kept past their horizon may be removed.
- The *offset map* holds, for each key in the dirty section, its latest offset
  there. A clean rewrites every batch below the cleanable end: a record is
  removed when a later record of its key is in the map (superseded), when it
  has no key, or when it is a tombstone (null value) whose delete horizon has
  passed. Everything else is kept, at its offset: offsets are never
  renumbered, so a clean leaves gaps, as Kafka's does.
- A tombstone's delete horizon is the time of the first clean that covered it
  plus `delete.retention.ms`: readers have that long to see it. (The horizon
  is kept in memory: after a restart a tombstone's wait starts again, so it is
  kept longer, never shorter.)
- Transactions, as Kafka: the records of aborted transactions are removed;
  those of committed ones are compacted like any other. A transaction marker
  (control batch) stays until its transaction has no batch left and the
  marker's delete horizon (as a tombstone's) has passed.
- A batch whose every record is removed disappears, except the last batch of
  each producer id, which stays with no records and its offsets, so the
  producer's sequence state survives a restart (Kafka keeps it the same way).
  A batch that keeps some records keeps its base and last offset, producer
  fields and base timestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass

from linkd.core import records as rb
from linkd.core.partition import AbortedTxn, BatchEntry, CleanerState, PartitionLog
from linkd.core.topic_config import TopicConfig

# Bytes of dirty batches one clean's offset map may cover (the rest waits for
# the next clean), as Kafka's `log.cleaner.dedupe.buffer.size` bounds it.
DEFAULT_MAP_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """One clean of one partition: the map covers [first_dirty, end); every
    batch from the log start below `end` is rewritten."""

    first_dirty: int
    end: int
    now_ms: int
    # Tombstones first covered by this clean may be removed from this time on.
    delete_horizon_ms: int
    # Base offsets of batches kept (empty) even when every record goes.
    retain_empty: frozenset[int]
    # The aborted transactions below the end (their records go).
    aborted: tuple[AbortedTxn, ...] = ()
    # Base offsets of the markers this clean removes.
    removable_markers: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class CleanedBatches:
    """The rewritten bytes of a run of batches, with their headers."""

    data: bytes
    headers: tuple[rb.BatchHeader, ...]
    kept_records: int
    removed_records: int
    kept_tombstones: int  # tombstones and markers kept (they wait for a horizon)


def cleanable_end(log: PartitionLog, config: TopicConfig, active_base: int, now_ms: int) -> int:
    """Where cleaning stops (see the module docstring)."""
    end = min(active_base, log.last_stable_offset, log.log_end_offset)
    if config.min_compaction_lag_ms > 0:
        cutoff = now_ms - config.min_compaction_lag_ms
        for entry in log.batches[log.batch_index_at(log.log_start_offset) :]:
            if entry.base_offset >= end:
                break
            if entry.max_timestamp > cutoff:
                return entry.base_offset
    return max(end, log.log_start_offset)


def _bytes_between(log: PartitionLog, start: int, end: int) -> int:
    total = 0
    for entry in log.batches[log.batch_index_at(start) :]:
        if entry.base_offset >= end:
            break
        total += entry.size_bytes
    return total


def compaction_overdue(log: PartitionLog, config: TopicConfig, end: int, now_ms: int) -> bool:
    """max.compaction.lag.ms (Kafka's needCompactionNow): the oldest record
    not cleaned yet, below `end`, has waited longer than the lag allows, so
    the partition is cleaned whatever its dirty ratio. (Its segment is
    cleanable by then: segments of a compacted topic roll by that lag too.)"""
    start = first_dirty(log)
    if config.max_compaction_lag_ms <= 0 or end <= start:
        return False
    i = log.batch_index_at(start)
    if i >= len(log.batches) or log.batches[i].base_offset >= end:
        return False
    stamp = log.batches[i].max_timestamp
    return stamp >= 0 and now_ms - stamp > config.max_compaction_lag_ms


def first_dirty(log: PartitionLog) -> int:
    return max(log.cleaner.cleaned_up_to, log.log_start_offset)


def dirty_ratio(log: PartitionLog, end: int) -> float:
    """Dirty bytes over cleanable bytes, below `end` (0 for an empty range)."""
    dirty_from = first_dirty(log)
    clean = _bytes_between(log, log.log_start_offset, dirty_from)
    dirty = _bytes_between(log, dirty_from, end) if end > dirty_from else 0
    return dirty / (clean + dirty) if clean + dirty else 0.0


def plan_clean(
    log: PartitionLog,
    config: TopicConfig,
    active_base: int,
    now_ms: int,
    *,
    map_bytes: int = DEFAULT_MAP_BYTES,
) -> CleanPlan | None:
    """The clean this partition needs now, or None."""
    if not config.compact:
        return None
    end = cleanable_end(log, config, active_base, now_ms)
    start = first_dirty(log)
    due_tombstones = any(h <= now_ms for _below, h in log.cleaner.horizons)
    ratio = dirty_ratio(log, end)
    overdue = compaction_overdue(log, config, end, now_ms)
    if not due_tombstones and (
        end <= start or (ratio < config.min_cleanable_dirty_ratio and not overdue)
    ):
        return None
    if end > start:
        end = _map_end(log, start, end, map_bytes)
    else:
        end = max(end, start)
    return CleanPlan(
        first_dirty=start,
        end=end,
        now_ms=now_ms,
        delete_horizon_ms=now_ms + config.delete_retention_ms,
        retain_empty=_last_batch_per_producer(log),
        aborted=tuple(a for a in log.aborted if a.first_offset < end),
        removable_markers=_removable_markers(log, end, now_ms),
    )


def _map_end(log: PartitionLog, start: int, end: int, map_bytes: int) -> int:
    """The end of the dirty section one map can cover: at least one batch."""
    total = 0
    for entry in log.batches[log.batch_index_at(start) :]:
        if entry.base_offset >= end:
            break
        total += entry.size_bytes
        if total > map_bytes and entry.base_offset > start:
            return entry.base_offset
    return end


def _last_batch_per_producer(log: PartitionLog) -> frozenset[int]:
    last: dict[int, int] = {}
    for entry in log.batches:
        if entry.producer_id >= 0:
            last[entry.producer_id] = entry.base_offset
    return frozenset(last.values())


def _removable_markers(log: PartitionLog, end: int, now_ms: int) -> frozenset[int]:
    """Markers below `end` whose transaction has no batch left (since the
    producer's previous marker) and whose horizon has passed."""
    has_data: dict[int, bool] = {}
    out = []
    for entry in log.batches[log.batch_index_at(log.log_start_offset) :]:
        if entry.base_offset >= end:
            break
        if not entry.is_transactional:
            continue
        pid = entry.producer_id
        if not entry.is_control:
            has_data[pid] = True
            continue
        if not has_data.get(pid, False) and tombstone_expired(
            log.cleaner, entry.base_offset, now_ms
        ):
            out.append(entry.base_offset)
        has_data[pid] = False
    return frozenset(out)


def _aborted(plan: CleanPlan, header: rb.BatchHeader) -> bool:
    if not header.is_transactional or header.is_control:
        return False
    pid, offset = header.producer_id, header.base_offset
    return any(
        a.producer_id == pid and a.first_offset <= offset < a.last_offset for a in plan.aborted
    )


def _cleanable(header: rb.BatchHeader) -> bool:
    return not header.is_control


def add_to_offset_map(data: bytes, plan: CleanPlan, offset_map: dict[bytes, int]) -> None:
    """Adds the keys of the dirty records in `data` (whole batches) to the map."""
    for position, header in rb.iter_batches(data):
        if header.next_offset <= plan.first_dirty or header.base_offset >= plan.end:
            continue
        if not _cleanable(header) or _aborted(plan, header):
            continue
        _, records = rb.decode_records(data, position)
        for record in records:
            if record.key is not None and plan.first_dirty <= record.offset < plan.end:
                offset_map[record.key] = record.offset


def tombstone_expired(state: CleanerState, offset: int, now_ms: int) -> bool:
    """Whether the tombstone at `offset` was covered by a clean whose horizon passed."""
    for below, horizon in state.horizons:
        if offset < below:
            return horizon <= now_ms
    return False


def clean_batches(
    data: bytes, offset_map: dict[bytes, int], plan: CleanPlan, state: CleanerState
) -> CleanedBatches:
    """Rewrites whole batches (a segment's bytes) by the rules of the module docstring."""
    out = bytearray()
    headers: list[rb.BatchHeader] = []
    kept = removed = tombstones = 0
    for position, header in rb.iter_batches(data):
        raw = data[position : position + header.size_bytes]
        if header.base_offset >= plan.end or not _cleanable(header):
            base = header.base_offset
            if base in plan.removable_markers and base not in plan.retain_empty:
                removed += 1
                continue
            if header.is_control and header.base_offset < plan.end:
                tombstones += 1  # a marker waits for its horizon, as a tombstone
            out += raw
            headers.append(header)
            continue
        _, records = rb.decode_records(data, position)
        if _aborted(plan, header):
            keep = []
        else:
            keep = [r for r in records if _keeps(r, offset_map, plan, state)]
        kept += len(keep)
        removed += len(records) - len(keep)
        tombstones += sum(1 for r in keep if r.value is None)
        if len(keep) == len(records):
            batch = bytes(raw)
        elif keep or header.base_offset in plan.retain_empty:
            batch = _rebuilt(header, keep)
        else:
            continue
        out += batch
        headers.append(rb.parse_header(batch))
    return CleanedBatches(bytes(out), tuple(headers), kept, removed, tombstones)


def _keeps(
    record: rb.Record, offset_map: dict[bytes, int], plan: CleanPlan, state: CleanerState
) -> bool:
    if record.offset >= plan.end:
        return True
    if record.key is None:
        return False
    if offset_map.get(record.key, -1) > record.offset:
        return False
    return not (record.value is None and tombstone_expired(state, record.offset, plan.now_ms))


def _rebuilt(header: rb.BatchHeader, keep: list[rb.Record]) -> bytes:
    """The batch with only `keep`: same offsets, producer fields and base timestamp."""
    append_time = header.log_append_time
    out = bytearray()
    for r in keep:
        delta = 0 if append_time else r.timestamp - header.base_timestamp
        rb.encode_record(out, r.offset - header.base_offset, delta, r.key, r.value, r.headers)
    codec = header.compression if keep else rb.COMPRESSION_NONE
    max_ts = header.max_timestamp
    if keep and not append_time:
        max_ts = max(r.timestamp for r in keep)
    return rb.assemble_batch(
        rb.compress(codec, bytes(out)),
        attributes=(header.attributes & ~rb.COMPRESSION_MASK) | codec,
        record_count=len(keep),
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.base_timestamp,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )


def apply_cleaned(
    log: PartitionLog, first: int, next_offset: int, headers: Iterable[rb.BatchHeader]
) -> None:
    """The model takes a rewritten run: the batches based in [first,
    next_offset) are now `headers` (control batches keep their marker type)."""
    entries = []
    for header in headers:
        if header.last_offset < log.log_start_offset:
            continue  # retention moved the log start past it meanwhile
        old = log.batch_at(header.base_offset)
        control_type = old.control_type if old is not None else None
        entries.append(BatchEntry.from_header(header, control_type))
    log.replace_batches(first, next_offset, entries)


def finish_clean(log: PartitionLog, plan: CleanPlan, removed: int, kept_tombstones: int) -> None:
    """A clean's every batch below `plan.end` is rewritten: the state moves on."""
    state = log.cleaner
    state.horizons = [(b, h) for b, h in state.horizons if h > plan.now_ms]
    covered = state.horizons[-1][0] if state.horizons else log.log_start_offset
    if kept_tombstones and plan.end > covered:
        state.horizons.append((plan.end, plan.delete_horizon_ms))
    state.cleaned_up_to = max(state.cleaned_up_to, plan.end)
    state.last_clean_ms = plan.now_ms
    state.cleans += 1
    state.removed_records += removed


@dataclass(frozen=True, slots=True)
class MapSegment:
    """A step of a clean: the shell reads the segment based at `base` and
    runs `add` on its bytes (off its event loop if it has one); it sends
    nothing back."""

    base: int
    add: Callable[[bytes], None]


@dataclass(frozen=True, slots=True)
class RewriteSegment:
    """A step of a clean: the shell reads the segment of the batches based in
    [base, next_base), runs `clean` on its bytes, and stores what comes out in
    its place; it sends back the `CleanedBatches` once stored, and the model
    takes them. A shell that cannot store them (the log changed meanwhile)
    stops the procedure instead: the clean is abandoned, the model untouched,
    and the next plan starts anew."""

    base: int
    next_base: int
    clean: Callable[[bytes], CleanedBatches]


CleanStep = MapSegment | RewriteSegment


@dataclass(frozen=True, slots=True)
class CleanDone:
    """What a finished clean did."""

    end: int
    removed_records: int
    kept_tombstones: int


def clean_procedure(
    log: PartitionLog, plan: CleanPlan, segments: Sequence[tuple[int, int]]
) -> Generator[CleanStep, CleanedBatches | None, CleanDone]:
    """One clean, as the steps the shell performs: the offset map from every
    segment with dirty batches, then each segment rewritten and swapped in,
    then the cleaner's state moved on. `segments` are the (base, next base)
    of the segments below `plan.end`, oldest first; the daemon's are its
    segment files, the simulator's one run of every batch below the end."""
    offset_map: dict[bytes, int] = {}

    def add(data: bytes) -> None:
        add_to_offset_map(data, plan, offset_map)

    def clean(data: bytes) -> CleanedBatches:
        return clean_batches(data, offset_map, plan, log.cleaner)

    for base, next_base in segments:
        if next_base > plan.first_dirty:
            yield MapSegment(base, add)
    removed = tombstones = 0
    for base, next_base in segments:
        cleaned = yield RewriteSegment(base, next_base, clean)
        assert cleaned is not None, "a rewrite step is answered with what was stored"
        apply_cleaned(log, base, next_base, cleaned.headers)
        removed += cleaned.removed_records
        tombstones += cleaned.kept_tombstones
    finish_clean(log, plan, removed, tombstones)
    return CleanDone(plan.end, removed, tombstones)


def next_step(
    steps: Generator[CleanStep, CleanedBatches | None, CleanDone],
    answer: CleanedBatches | None,
) -> CleanStep | CleanDone:
    """Answers the procedure's last step (None for the first call and for a
    map step) and returns its next step, or what the finished clean did."""
    try:
        return steps.send(answer)
    except StopIteration as stop:
        done: CleanDone = stop.value
        return done


@dataclass(frozen=True, slots=True)
class CleanerView:
    """What describe-topic shows of a compacted partition's cleaner."""

    cleaned_up_to: int
    dirty_ratio: float
    last_clean_ms: int | None
    cleans: int
    removed_records: int
    cleanable_end: int


def view(log: PartitionLog, config: TopicConfig, active_base: int, now_ms: int) -> CleanerView:
    end = cleanable_end(log, config, active_base, now_ms)
    state = log.cleaner
    return CleanerView(
        cleaned_up_to=first_dirty(log),
        dirty_ratio=dirty_ratio(log, end),
        last_clean_ms=state.last_clean_ms,
        cleans=state.cleans,
        removed_records=state.removed_records,
        cleanable_end=end,
    )
