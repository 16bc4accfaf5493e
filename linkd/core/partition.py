"""The model of one partition log: offsets, watermarks, producers, transactions.

Rules:
- Offsets are dense. A batch appended at the log end offset (LEO) takes
  offsets LEO .. LEO + last_offset_delta; control markers take one offset.
- The high watermark (HW) is what readers may see. It advances when the shell
  reports that bytes are durable (`mark_durable`), but never past a limit the
  cluster sets (`advance_high_watermark(limit)`): the in-sync followers of a
  SYNC link hold a source partition's HW back until they have the records,
  and a follower partition's HW never passes its source's HW (`hw_cap`). The
  HW never moves backwards, except by truncation.
- The last stable offset (LSO) is the first offset of the oldest open
  transaction, or the HW when none is open: `read_committed` readers stop there.
- Idempotent producers: per producer id, the epoch and the last five batches'
  sequence ranges. A batch repeating one of those is a duplicate (answered with
  its original offset, not written); a gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
  older epoch is INVALID_PRODUCER_EPOCH (fenced).
- Aborted transactions are indexed as (producer id, first offset, marker offset)
  so a fetch can tell `read_committed` readers which data batches to skip.
- Everything a batch changes is applied by `apply_batch`, the one rule shared by
  client appends, recovery from disk and (later) replication.
- Segments: the log is a run of segments, and where one starts is decided
  here (`rolls_before`, Kafka's LogSegment.shouldRoll): a batch starts a new
  segment when it would take the active one past segment.bytes, when its
  timestamp lies segment.ms (less the segment's jitter; at most
  max.compaction.lag.ms on a compacted topic) past the segment's first
  batch's, or when its offsets no longer fit the segment's 32-bit index. The
  shell's files follow (`AppendBatch.roll`); after a restart the segments
  are the files'. Retention deletes whole segments (`retention_cut`,
  Kafka's deleteOldSegments).

Theory of operation: the shell hands a parsed batch header to `check_append`,
which decides (duplicate, or the offsets the batch will take, or a refusal)
without changing state; the shell stamps the offsets into the bytes, writes
them, and calls `apply_batch`. Recovery calls `apply_batch` for every batch
found on disk. Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

import bisect
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.log_feed import LogFeed
from linkd.core.records import CONTROL_ABORT, NO_SEQUENCE, BatchHeader

# Kafka keeps the last five batches per producer for duplicate detection;
# producers have at most five batches in flight per partition.
PRODUCER_BATCH_MEMORY = 5
SEQUENCE_MODULUS = 1 << 31


# Not frozen: one is built for every batch a log takes, and a frozen
# dataclass's __init__ costs several times a plain one's. Nothing assigns to
# an entry's fields (a changed entry is a new one) or hashes one.
@dataclass(slots=True)
class BatchEntry:
    """What the model keeps of each stored batch (its header, condensed)."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size_bytes: int
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    base_sequence: int = NO_SEQUENCE
    last_sequence: int = NO_SEQUENCE
    control_type: int | None = None
    partition_leader_epoch: int = -1
    # The batch's CRC-32C (over its attributes and records: copies keep it).
    crc: int = 0

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @classmethod
    def from_header(cls, header: BatchHeader, control_type: int | None) -> BatchEntry:
        return cls(
            base_offset=header.base_offset,
            last_offset=header.last_offset,
            max_timestamp=header.max_timestamp,
            size_bytes=header.size_bytes,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            base_sequence=header.base_sequence,
            last_sequence=header.last_sequence,
            control_type=control_type if header.is_control else None,
            partition_leader_epoch=header.partition_leader_epoch,
            crc=header.crc,
        )


# Not frozen: one is built for every batch with sequences a log takes (a
# frozen dataclass's __init__ costs several times a plain one's); nothing
# assigns to or hashes one.
@dataclass(slots=True)
class SequenceRange:
    first_sequence: int
    last_sequence: int
    base_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: deque[SequenceRange] = field(
        default_factory=lambda: deque(maxlen=PRODUCER_BATCH_MEMORY)
    )

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


@dataclass(slots=True)
class CleanerState:
    """What the log cleaner has done to a compacted partition
    (`linkd/core/cleaner.py`); held in memory, started anew after a restart."""

    cleaned_up_to: int = 0  # the first offset not cleaned yet (Kafka's cleaner checkpoint)
    last_clean_ms: int | None = None
    # (below offset, horizon ms): tombstones below the offset were first covered
    # by a clean and may be removed once the horizon passes; ascending.
    horizons: list[tuple[int, int]] = field(default_factory=list)
    cleans: int = 0
    removed_records: int = 0


# A segment's index holds offsets relative to its base as 32-bit numbers.
SEGMENT_OFFSET_SPAN_MAX = 2**31 - 1


# Not frozen: one is built for every append (`ClusterState.segment_rule`),
# and a frozen dataclass's __init__ costs several times a plain one's;
# nothing assigns to or hashes one (it is passed down and read).
@dataclass(slots=True)
class SegmentRule:
    """What rolls a partition's segments, from its topic's configs."""

    segment_bytes: int
    segment_ms: int
    jitter_ms: int = 0  # segment.jitter.ms: the most taken off segment_ms
    max_compaction_lag_ms: int | None = None  # compacted topics only

    @property
    def roll_ms(self) -> int:
        """Kafka's maxSegmentMs: a compacted topic's segments roll by
        max.compaction.lag.ms too, so the cleaner can reach every record."""
        if self.max_compaction_lag_ms is not None and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms


@dataclass(slots=True)
class Segment:
    """One segment of the log: where it starts and what segment.ms and
    retention read of it (Kafka's LogSegment). Sizes and timestamps are its
    batches' still held (a clean makes it smaller)."""

    base_offset: int
    created_ms: int  # the shell's time when it was started (or found at a restart)
    jitter_ms: int = 0  # drawn once, when it starts (`segment_jitter`)
    size_bytes: int = 0
    # The largest timestamp of its first batch: segment.ms counts from it
    # (Kafka's rollingBasedTimestamp); -1 while it has no batch with one.
    rolling_timestamp: int = -1
    largest_timestamp: int = -1  # over its batches; -1: none has a timestamp
    last_append_ms: int = -1  # the shell's time of its last append (a file's mtime)

    def expiry_timestamp(self) -> int:
        """What retention.ms compares with the clock: its largest timestamp,
        or, without one, when it was last written (Kafka's largestTimestamp)."""
        if self.largest_timestamp >= 0:
            return self.largest_timestamp
        return self.last_append_ms if self.last_append_ms >= 0 else self.created_ms


def segment_jitter(rule: SegmentRule, name: str, base_offset: int) -> int:
    """The jitter taken off segment.ms for the segment of partition `name`
    starting at `base_offset`: below min(segment.jitter.ms, segment.ms), as
    Kafka draws it, but from the segment's identity rather than a random
    number, so both shells (and a restart) agree on it."""
    bound = min(rule.jitter_ms, rule.roll_ms)
    if bound <= 0:
        return 0
    return zlib.crc32(f"{name}@{base_offset}".encode()) % bound


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """The decision for a produced batch: where it goes, or that it is a repeat."""

    base_offset: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """What a fetch may return: batches overlapping [offset, upper_offset)."""

    offset: int
    upper_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[AbortedTxn, ...]


class PartitionLog:
    """State of one partition. See the module docstring for the rules."""

    def __init__(
        self, topic: str, partition: int, *, log_start_offset: int = 0, leader_epoch: int = 0
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_start_offset
        self.high_watermark = log_start_offset
        # Everything below this offset is durable (the HW's first bound).
        self.durable_offset = log_start_offset
        # A follower partition's HW stays at or below its source's HW (None:
        # no cap, e.g. a leader partition).
        self.hw_cap: int | None = None
        self.leader_epoch = leader_epoch
        # (epoch, start offset) pairs, oldest first, as Kafka's leader epoch cache.
        self.epoch_history: list[tuple[int, int]] = [(leader_epoch, log_start_offset)]
        self.batches: list[BatchEntry] = []
        self._base_offsets: list[int] = []
        self.size_bytes = 0
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset
        # (marker offset, first offset) of transactions whose marker is written
        # but not yet below the HW: read_committed readers must not see them
        # (Kafka's first unstable offset), or a reader could see the records
        # of a transaction before the outcome is visible.
        self.completing: list[tuple[int, int]] = []
        self.aborted: list[AbortedTxn] = []
        self.cleaner = CleanerState(cleaned_up_to=log_start_offset)
        # The segments, oldest first; the last is the active one. Never empty.
        self.segments: list[Segment] = [Segment(log_start_offset, created_ms=-1)]
        # How many times batches already in the log were replaced or removed
        # other than from its start (a truncation, a clean): what a source
        # compares to tell that a log is as it was (`fetch_sessions`).
        self.rewrites = 0
        # Where this log reports its moves, once a reader watches it
        # (`log_feed.LogFeed.watch`); None: nobody does.
        self.feed: LogFeed | None = None

    def _moved(self) -> None:
        """Its bounds or its batches changed: tell the feed, if watched."""
        feed = self.feed
        if feed is not None:
            feed.note((self.topic, self.partition))

    def set_log_start(self, offset: int) -> None:
        """The log start as stored (a journal record, a snapshot): no rule is
        checked, as for anything replayed."""
        self.log_start_offset = offset
        self._moved()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def last_stable_offset(self) -> int:
        lso = self.high_watermark
        if self.ongoing_txns:
            lso = min(lso, min(self.ongoing_txns.values()))
        for marker, first in self.completing:
            if marker >= self.high_watermark:
                lso = min(lso, first)
        return lso

    # -- produce -------------------------------------------------------------

    def check_append(
        self,
        header: BatchHeader,
        *,
        max_message_bytes: int,
        expect_transactional: bool | None = None,
    ) -> AppendPlan:
        """Decides what a produced batch does, without changing anything."""
        if header.size_bytes > max_message_bytes:
            raise ClusterError(
                ErrorCode.RECORD_TOO_LARGE,
                self.name,
                f"partition {self.name}: batch of {header.size_bytes} bytes exceeds "
                f"max.message.bytes={max_message_bytes}",
            )
        if header.is_control:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                self.name,
                f"partition {self.name}: clients may not write control batches",
            )
        if header.record_count != header.last_offset_delta + 1:
            raise ClusterError(
                ErrorCode.INVALID_RECORD,
                self.name,
                f"partition {self.name}: batch has {header.record_count} records but "
                f"last offset delta {header.last_offset_delta}",
            )
        if header.is_transactional and not header.has_producer_id:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                self.name,
                f"partition {self.name}: transactional batch without a producer id",
            )
        if not header.has_producer_id:
            return AppendPlan(self.log_end_offset, duplicate=False)
        if header.base_sequence == NO_SEQUENCE or header.base_sequence < 0:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                self.name,
                f"partition {self.name}: producer {header.producer_id} sent a batch without a "
                "sequence number",
            )
        entry = self.producers.get(header.producer_id)
        pid = header.producer_id
        if entry is None:
            if header.base_sequence != 0:
                raise ClusterError(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    self.name,
                    f"partition {self.name}: no state for producer {pid}, and its batch starts "
                    f"at sequence {header.base_sequence} instead of 0",
                )
            return AppendPlan(self.log_end_offset, duplicate=False)
        if header.producer_epoch < entry.producer_epoch:
            raise ClusterError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                self.name,
                f"partition {self.name}: producer {pid} epoch {header.producer_epoch} is fenced "
                f"by epoch {entry.producer_epoch}",
            )
        if header.producer_epoch > entry.producer_epoch:
            if header.base_sequence != 0:
                raise ClusterError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    self.name,
                    f"partition {self.name}: producer {pid} new epoch {header.producer_epoch} "
                    f"must start at sequence 0, not {header.base_sequence}",
                )
            return AppendPlan(self.log_end_offset, duplicate=False)
        for previous in entry.batches:
            if (
                previous.first_sequence == header.base_sequence
                and previous.last_sequence == header.last_sequence
            ):
                return AppendPlan(previous.base_offset, duplicate=True)
        expected = (entry.last_sequence + 1) % SEQUENCE_MODULUS
        if entry.batches and header.base_sequence != expected:
            raise ClusterError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                self.name,
                f"partition {self.name}: producer {pid} epoch {header.producer_epoch} sent "
                f"sequence {header.base_sequence}, expected {expected}",
            )
        if not entry.batches and header.base_sequence != 0:
            raise ClusterError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                self.name,
                f"partition {self.name}: producer {pid} sent sequence {header.base_sequence}, "
                "expected 0",
            )
        if expect_transactional is not None and header.is_transactional != expect_transactional:
            raise ClusterError(
                ErrorCode.INVALID_TXN_STATE,
                self.name,
                f"partition {self.name}: producer {pid} mixes transactional and "
                "non-transactional batches",
            )
        return AppendPlan(self.log_end_offset, duplicate=False)

    def check(self) -> None:
        """The offsets' order, asserted where they change (both shells run
        it): log start <= HW <= LEO, durable <= LEO, and leader epochs that
        grow along the log."""
        assert self.log_start_offset <= self.high_watermark <= self.log_end_offset, (
            f"{self.name}: start {self.log_start_offset}, HW {self.high_watermark}, "
            f"LEO {self.log_end_offset}"
        )
        assert self.durable_offset <= self.log_end_offset, (
            f"{self.name}: durable {self.durable_offset} past LEO {self.log_end_offset}"
        )
        history = self.epoch_history
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in pairwise(history)), (
            f"{self.name}: epoch history out of order: {history}"
        )

    def apply_batch(
        self,
        header: BatchHeader,
        control_type: int | None = None,
        *,
        allow_gap: bool = False,
        now_ms: int = -1,
    ) -> None:
        """Applies a batch stored at header.base_offset (== LEO), in the active
        segment. `control_type` is the marker (commit/abort) for control
        batches. With `allow_gap` (a log read back from disk, or copied from a
        source, after a compaction) the batch may start past the LEO: the
        offsets between were cleaned away. `now_ms`: the shell's time of the
        append (-1: unknown, a batch read back at a restart)."""
        if header.base_offset != self.log_end_offset and not (
            allow_gap and header.base_offset > self.log_end_offset
        ):
            raise ValueError(
                f"partition {self.name}: batch at {header.base_offset} does not start at the "
                f"log end offset {self.log_end_offset}"
            )
        entry = BatchEntry.from_header(header, control_type)
        self._apply_entry(entry)
        self._count_in_segment(self.segments[-1], entry, now_ms)
        self.check()

    # -- segments --------------------------------------------------------------

    @staticmethod
    def _count_in_segment(segment: Segment, entry: BatchEntry, now_ms: int) -> None:
        if segment.size_bytes == 0 and segment.rolling_timestamp < 0:
            segment.rolling_timestamp = entry.max_timestamp if entry.max_timestamp >= 0 else -1
            if segment.created_ms < 0:
                segment.created_ms = now_ms
        segment.size_bytes += entry.size_bytes
        segment.largest_timestamp = max(segment.largest_timestamp, entry.max_timestamp)
        if now_ms >= 0:
            segment.last_append_ms = now_ms

    def rolls_before(self, header: BatchHeader, now_ms: int, rule: SegmentRule) -> bool:
        """Whether `header`'s batch starts a new segment (Kafka's
        LogSegment.shouldRoll): the active segment holds a batch already, and
        the batch would take it past `rule.segment_bytes`, or its timestamp
        lies `rule.roll_ms` less the segment's jitter past the segment's
        first batch's (the clock's time when neither has one), or its last
        offset would not fit the segment's 32-bit index."""
        active = self.segments[-1]
        if active.size_bytes == 0:
            return False
        if active.size_bytes > rule.segment_bytes - header.size_bytes:
            return True
        if header.last_offset - active.base_offset > SEGMENT_OFFSET_SPAN_MAX:
            return True
        if active.rolling_timestamp >= 0:
            waited = header.max_timestamp - active.rolling_timestamp
        else:
            waited = now_ms - active.created_ms
        return waited > rule.roll_ms - active.jitter_ms

    def append(
        self,
        header: BatchHeader,
        control_type: int | None,
        now_ms: int,
        rule: SegmentRule,
        *,
        allow_gap: bool = False,
    ) -> bool:
        """A batch a shell writes now: rolls a new segment first when the rule
        says so (`rolls_before`), then applies it. Returns whether it rolled
        (the shell starts a new segment file there: `AppendBatch.roll`)."""
        roll = self.rolls_before(header, now_ms, rule)
        if roll:
            self.segments.append(
                Segment(
                    header.base_offset,
                    created_ms=now_ms,
                    jitter_ms=segment_jitter(rule, self.name, header.base_offset),
                )
            )
        self.apply_batch(header, control_type, allow_gap=allow_gap, now_ms=now_ms)
        return roll

    def roll_empty(self, now_ms: int, rule: SegmentRule) -> None:
        """Starts an empty active segment at the log end (retention is about to
        delete every segment; Kafka keeps one)."""
        if self.segments[-1].size_bytes == 0:
            return
        self.segments.append(
            Segment(
                self.log_end_offset,
                created_ms=now_ms,
                jitter_ms=segment_jitter(rule, self.name, self.log_end_offset),
            )
        )

    def resegment(
        self, bases: Sequence[int], now_ms: int, rule: SegmentRule | None = None
    ) -> None:
        """The segments start at `bases` (the shell's files, at a restart), or
        keep their starts (empty `bases`); sizes and timestamps are counted
        again from the batches held (after a clean, a truncation, a deletion
        or a restart). A segment found anew is taken as created and last
        written at `now_ms`, as Kafka takes a segment it loads."""
        known = {seg.base_offset: seg for seg in self.segments}
        starts = sorted(bases) if bases else [seg.base_offset for seg in self.segments]
        fresh: list[Segment] = []
        for base in starts:
            old = known.get(base)
            if old is not None and not bases:
                fresh.append(
                    Segment(base, old.created_ms, old.jitter_ms, last_append_ms=old.last_append_ms)
                )
            else:
                jitter = segment_jitter(rule, self.name, base) if rule is not None else 0
                fresh.append(Segment(base, now_ms, jitter, last_append_ms=now_ms))
        self.segments = fresh
        for entry in self.batches:
            k = max(0, bisect.bisect_right(starts, entry.base_offset) - 1)
            self._count_in_segment(fresh[k], entry, -1)

    def segment_bounds(self) -> list[tuple[int, int]]:
        """(base offset, next segment's base or the log end) of each segment."""
        bases = [seg.base_offset for seg in self.segments]
        return list(zip(bases, [*bases[1:], self.log_end_offset], strict=True))

    def retention_cut(
        self, now_ms: int, retention_ms: int, retention_bytes: int
    ) -> tuple[int, bool] | None:
        """Where retention moves the log start, by whole segments (Kafka's
        deleteRetentionMsBreachedSegments and deleteRetentionSizeBreachedSegments):
        oldest first, while a segment is wholly below the high watermark and
        its newest record is older than `retention_ms` (-1: never), or the
        partition stays at least `retention_bytes` large without it (negative:
        no limit). Returns (the new log start, whether every segment goes, so
        an empty one must be started first), or None."""
        size = sum(seg.size_bytes for seg in self.segments)
        over = size - retention_bytes if retention_bytes >= 0 and size >= retention_bytes else -1
        if retention_ms < 0 and over < 0:
            return None
        bounds = self.segment_bounds()
        cut = 0
        for seg, (_base, upper) in zip(self.segments, bounds, strict=True):
            last_and_empty = seg is self.segments[-1] and seg.size_bytes == 0
            if last_and_empty or upper > self.high_watermark:
                break
            expired = retention_ms >= 0 and now_ms - seg.expiry_timestamp() > retention_ms
            too_big = over >= 0 and over - seg.size_bytes >= 0
            if not (expired or too_big):
                break
            if too_big:
                over -= seg.size_bytes
            cut += 1
        if cut == 0:
            return None
        if cut == len(self.segments):
            return self.log_end_offset, True
        return self.segments[cut].base_offset, False

    def _apply_entry(self, entry: BatchEntry) -> None:
        self.batches.append(entry)
        self._base_offsets.append(entry.base_offset)
        self.size_bytes += entry.size_bytes
        self.log_end_offset = entry.next_offset
        self._moved()
        if entry.partition_leader_epoch > self.leader_epoch:
            self.bump_epoch(entry.partition_leader_epoch, entry.base_offset)
        if entry.producer_id < 0:
            return
        pid = entry.producer_id
        producer = self.producers.get(pid)
        if producer is None or entry.producer_epoch > producer.producer_epoch:
            producer = ProducerEntry(entry.producer_epoch)
            self.producers[pid] = producer
        if entry.is_control:
            first = self.ongoing_txns.pop(pid, None)
            if first is not None and entry.control_type == CONTROL_ABORT:
                self.aborted.append(AbortedTxn(pid, first, entry.base_offset))
            if first is not None and entry.base_offset >= self.high_watermark:
                # Ended, but its marker is not below the HW yet: still unstable.
                self.completing.append((entry.base_offset, first))
            return
        if entry.base_sequence >= 0:
            producer.batches.append(
                SequenceRange(entry.base_sequence, entry.last_sequence, entry.base_offset)
            )
        if entry.is_transactional and pid not in self.ongoing_txns:
            self.ongoing_txns[pid] = entry.base_offset

    def replace_batches(self, first: int, next_offset: int, entries: list[BatchEntry]) -> None:
        """The log cleaner rewrote the batches based in [first, next_offset):
        they are now `entries` (a subset of their offsets, in order)."""
        lo = bisect.bisect_left(self._base_offsets, first)
        hi = bisect.bisect_left(self._base_offsets, next_offset)
        for entry in entries:
            if not first <= entry.base_offset < next_offset:
                raise ValueError(
                    f"partition {self.name}: cleaned batch at {entry.base_offset} is outside "
                    f"[{first}, {next_offset})"
                )
        self.size_bytes += sum(e.size_bytes for e in entries) - sum(
            b.size_bytes for b in self.batches[lo:hi]
        )
        self.batches[lo:hi] = entries
        self._base_offsets[lo:hi] = [e.base_offset for e in entries]
        self.rewrites += 1
        self._moved()
        self.resegment((), -1)

    def has_open_txn(self, producer_id: int) -> bool:
        return producer_id in self.ongoing_txns

    def mark_durable(self, offset: int, limit: int | None = None) -> bool:
        """Everything below `offset` is durable: the HW may move there, but not
        past `limit` (see `advance_high_watermark`). Returns whether it moved."""
        self.raise_durable(offset)
        return self.advance_high_watermark(limit)

    def raise_durable(self, offset: int) -> None:
        """Everything below `offset` (at most the log end) is durable; the
        HW does not move here."""
        durable = min(offset, self.log_end_offset)
        if durable > self.durable_offset:
            self.durable_offset = durable
            self._moved()

    def advance_high_watermark(self, limit: int | None = None) -> bool:
        """Moves the HW to the durable offset, capped by `hw_cap` and `limit`
        (None: no limit). It never moves backwards. Returns whether it moved."""
        target = self.durable_offset
        if self.hw_cap is not None:
            target = min(target, self.hw_cap)
        if limit is not None:
            target = min(target, limit)
        if target > self.high_watermark:
            self.high_watermark = target
            self._moved()
            if self.completing:
                self.completing = [(m, f) for m, f in self.completing if m >= target]
            self.check()
            return True
        return False

    @property
    def held_back(self) -> bool:
        """Durable records the HW does not cover yet (a cap or a limit holds it)."""
        return self.durable_offset > self.high_watermark

    def batch_at(self, base_offset: int) -> BatchEntry | None:
        """The batch that starts at `base_offset`, if this log holds one."""
        i = bisect.bisect_left(self._base_offsets, base_offset)
        if i < len(self.batches) and self.batches[i].base_offset == base_offset:
            return self.batches[i]
        return None

    def batch_containing(self, offset: int) -> BatchEntry | None:
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        if i >= 0 and self.batches[i].last_offset >= offset:
            return self.batches[i]
        return None

    def bump_epoch(self, epoch: int, start_offset: int) -> None:
        if epoch <= self.leader_epoch:
            return
        self.leader_epoch = epoch
        self.epoch_history.append((epoch, start_offset))
        self._moved()

    # -- read ----------------------------------------------------------------

    def plan_fetch(self, offset: int, read_committed: bool) -> FetchPlan:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise ClusterError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                self.name,
                f"partition {self.name}: offset {offset} is outside the log "
                f"[{self.log_start_offset}, {self.log_end_offset}]",
            )
        lso = self.last_stable_offset
        upper = lso if read_committed else self.high_watermark
        aborted: tuple[AbortedTxn, ...] = ()
        if read_committed and offset < upper:
            aborted = tuple(
                a for a in self.aborted if a.last_offset >= offset and a.first_offset < upper
            )
        return FetchPlan(
            offset, max(upper, offset), self.high_watermark, lso, self.log_start_offset, aborted
        )

    def batch_index_at(self, offset: int) -> int:
        """Index of the batch containing `offset` (or the first after it)."""
        i = bisect.bisect_right(self._base_offsets, offset) - 1
        if i >= 0 and self.batches[i].last_offset >= offset:
            return i
        return i + 1

    def find_timestamp_batch(self, timestamp: int, upper_offset: int) -> BatchEntry | None:
        """The first readable batch holding a record at or after `timestamp`."""
        for entry in self.batches[self.batch_index_at(self.log_start_offset) :]:
            if entry.base_offset >= upper_offset:
                break
            if entry.max_timestamp >= timestamp and not entry.is_control:
                return entry
        return None

    def max_timestamp_batch(self, upper_offset: int) -> BatchEntry | None:
        best: BatchEntry | None = None
        for entry in self.batches[self.batch_index_at(self.log_start_offset) :]:
            if entry.base_offset >= upper_offset:
                break
            if not entry.is_control and (best is None or entry.max_timestamp > best.max_timestamp):
                best = entry
        return best

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """Kafka's answer to "where does my epoch end?" (OffsetsForLeaderEpoch,
        KIP-101 and KIP-320, and a fetch's diverging epoch): the largest epoch
        of this log not above `epoch` and the offset where it ends (where the
        next epoch starts; the log end for the latest). An epoch below every
        known one ends where the first known starts; one above the latest, or
        -1, is (-1, -1), as Kafka's leader epoch cache answers."""
        history = self.epoch_history
        if epoch < 0:
            return -1, -1
        if epoch == self.leader_epoch:
            return epoch, self.log_end_offset
        higher = next(((e, start) for e, start in history if e > epoch), None)
        if higher is None:
            return -1, -1
        floor = [e for e, _start in history if e <= epoch]
        return (max(floor) if floor else epoch), higher[1]

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """A reader whose last fetched record is in `last_fetched_epoch` and
        who reads on at `fetch_offset` (KIP-320): None when this log agrees
        with what it read; else (epoch, end offset) of where its epoch ends
        here, the place to truncate to. A reader that gives no epoch (-1)
        is not checked."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch == last_fetched_epoch and end >= fetch_offset:
            return None
        return epoch, end

    def epoch_at(self, offset: int) -> int:
        epoch = self.epoch_history[0][0]
        for e, start in self.epoch_history:
            if start <= offset:
                epoch = e
        return epoch

    # -- retention and deletion ------------------------------------------------

    def advance_log_start(self, offset: int) -> None:
        """Moves the log start offset forward (retention or DeleteRecords)."""
        if offset > self.high_watermark:
            raise ClusterError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                self.name,
                f"partition {self.name}: cannot delete records up to {offset}, beyond the high "
                f"watermark {self.high_watermark}",
            )
        if offset <= self.log_start_offset:
            return
        self.log_start_offset = offset
        self._moved()
        # Batches wholly below the start are forgotten; their bytes go with the segments.
        keep_from = bisect.bisect_right(self._base_offsets, offset) - 1
        if keep_from > 0:
            if self.batches[keep_from].last_offset < offset:
                keep_from += 1
            dropped = self.batches[:keep_from]
            self.size_bytes -= sum(b.size_bytes for b in dropped)
            del self.batches[:keep_from]
            del self._base_offsets[:keep_from]
        self.aborted = [a for a in self.aborted if a.last_offset >= offset]
        # Segments wholly below the start go (the shell's DeleteBelow); one stays.
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            del self.segments[0]
        self.resegment((), -1)
        self.check()

    def truncate_to(self, offset: int) -> None:
        """Drops every batch at or after `offset` (a batch boundary) and rebuilds
        producer and transaction state from what remains."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise ClusterError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                self.name,
                f"partition {self.name}: cannot truncate to {offset}, outside "
                f"[{self.log_start_offset}, {self.log_end_offset}]",
            )
        i = bisect.bisect_left(self._base_offsets, offset)
        if i < len(self.batches) and self.batches[i].base_offset != offset:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                self.name,
                f"partition {self.name}: {offset} is not a batch boundary",
            )
        if i > 0 and self.batches[i - 1].last_offset >= offset:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                self.name,
                f"partition {self.name}: {offset} is inside a batch",
            )
        kept = self.batches[:i]
        self.rewrites += 1
        self._moved()
        hw = min(self.high_watermark, offset)
        history = [(e, st) for e, st in self.epoch_history if st < offset] or self.epoch_history[:1]
        # Rebuild producer and transaction state by replaying what remains (the
        # same rule as appends); producer state of batches already removed by
        # retention is not kept, as after a Kafka restart without snapshots.
        self.batches = []
        self._base_offsets = []
        self.size_bytes = 0
        self.producers = {}
        self.ongoing_txns = {}
        self.completing = []
        self.aborted = []
        self.log_end_offset = kept[0].base_offset if kept else offset
        self.high_watermark = hw
        self.epoch_history = history
        self.leader_epoch = max(e for e, _ in history)
        for entry in kept:
            self._apply_entry(entry)
        self.log_end_offset = offset
        self.high_watermark = hw
        self.durable_offset = min(self.durable_offset, offset)
        self.cleaner.cleaned_up_to = min(self.cleaner.cleaned_up_to, offset)
        self.cleaner.horizons = [(min(b, offset), h) for b, h in self.cleaner.horizons]
        # Segments from the cut on go; the one holding it (or, at a segment's
        # start, the one before it) is active again, as the shell's files.
        kept_segments = [seg for seg in self.segments if seg.base_offset < offset]
        self.segments = kept_segments or self.segments[:1]
        self.resegment((), -1)
        self.check()
