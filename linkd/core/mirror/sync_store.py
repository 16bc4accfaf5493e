"""The offset sync store: a bounded memory of offset syncs, and offset translation.

Rules (Kafka 3.7+ OffsetSyncStore, ported with its arithmetic):
- Per source partition the store keeps an array of SYNCS_PER_PARTITION (64)
  syncs, which satisfies after every update:
  A. syncs[0] is the latest sync read from the offset-syncs topic;
  B. for i < j with syncs[i] is not syncs[j]:
     syncs[i].upstream <= syncs[j].upstream + 2^j - 2^i   (old entries are not too old);
  C. for i < j with syncs[i] is not syncs[j]:
     syncs[i].upstream >= syncs[j].upstream + 2^(i-2)     (entries are spread out);
  D. syncs[63] is the earliest sync still usable for translation.
  So the syncs kept are spaced roughly exponentially back from the newest one:
  translation is exact near the live end and coarser further back.
- The first sync of a partition fills all 64 slots. So does any sync while the
  store has not yet read the topic to its end (only the last sync read before
  then survives, which keeps translation monotonic across restarts), and any
  sync whose upstream offset is below syncs[0]'s (an upstream rewind invalidates
  everything older). Kafka 3.8 (KAFKA-15905) keeps the history read during the
  initial load when the checkpoints were reloaded; `must_read_to_end=False`
  selects that behaviour.
- Otherwise syncs[0] takes the new sync and later slots are repaired from low to
  high index, preferring to keep an older distinct sync where it satisfies B and C
  (the loop of Kafka's updateSyncArray, including its replacement cursor).
- Translation of upstream offset u for a partition: nothing before the first read
  to the end of the topic, nothing for a partition without syncs. Else take the
  newest kept sync s with s.upstream <= u (or syncs[63] if none): if
  s.upstream > u the answer is -1 ("too old to translate", no checkpoint is
  emitted); otherwise s.downstream, plus 1 unless s.upstream == u exactly. The +1
  never overshoots: the next record at or after u lands at or after
  s.downstream + 1, so a consumer starting there skips nothing (it may re-read).
- For a fixed store, translation is monotonic in u.

Sync identity: Kafka compares array entries by reference; this port does the
same (`is`), so the store is a sequence of distinct objects even when two syncs
carry equal numbers.

Arithmetic: Kafka computes the bounds in 64-bit two's complement (`1L << 63` is
negative); `_long` reproduces that so huge offsets behave as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from linkd.core.mirror.model import OffsetSync, TopicPartition

__all__ = [
    "SYNCS_PER_PARTITION",
    "OffsetSyncStore",
    "lookup_latest_sync",
    "translate_with_syncs",
    "update_sync_array",
]

SYNCS_PER_PARTITION = 64
_MASK = (1 << 64) - 1
_SIGN = 1 << 63


def _long(value: int) -> int:
    """Wrap to a Java long."""
    value &= _MASK
    return value - (1 << 64) if value & _SIGN else value


def _shift(bits: int) -> int:
    return _long(1 << bits)


def _invariant_b(i_sync: OffsetSync, j_sync: OffsetSync, i: int, j: int) -> bool:
    bound = _long(j_sync.upstream_offset + _shift(j) - _shift(i))
    return i_sync is j_sync or bound < 0 or i_sync.upstream_offset <= bound


def _invariant_c(i_sync: OffsetSync, j_sync: OffsetSync, i: int) -> bool:
    bound = _long(j_sync.upstream_offset + _shift(max(i - 2, 0)))
    return i_sync is j_sync or (bound >= 0 and i_sync.upstream_offset >= bound)


def update_sync_array(
    original: tuple[OffsetSync, ...] | None,
    sync: OffsetSync,
    *,
    read_to_end: bool,
    must_read_to_end: bool = True,
) -> tuple[OffsetSync, ...]:
    """The partition's sync array after reading `sync` (createInitialSyncs/updateSyncArray)."""
    if original is None:
        return (sync,) * SYNCS_PER_PARTITION
    if len(original) != SYNCS_PER_PARTITION:
        raise ValueError(f"a sync array holds {SYNCS_PER_PARTITION} syncs, got {len(original)}")
    only_last = not read_to_end and must_read_to_end
    if only_last or original[0].upstream_offset > sync.upstream_offset:
        return (sync,) * SYNCS_PER_PARTITION
    syncs = list(original)
    replacement = sync
    replacement_index = 0  # cursor into `original`: the next old sync to consider keeping
    syncs[0] = replacement  # invariant A
    for current in range(1, SYNCS_PER_PARTITION):
        previous = current - 1
        # Promote an old sync to be the replacement if it fits here; skip old syncs that
        # can never fit. The cursor only moves forward and stays below `current`.
        while True:
            old = original[replacement_index]
            is_recent = _invariant_b(syncs[previous], old, previous, current)
            separated_from_previous = _invariant_c(syncs[previous], old, previous)
            nxt = current + 1
            separated_from_next = nxt >= SYNCS_PER_PARTITION or _invariant_c(
                old, syncs[nxt], current
            )
            nxt_replacement = replacement_index + 1
            duplicate = nxt_replacement < SYNCS_PER_PARTITION and old is original[nxt_replacement]
            promote = is_recent and separated_from_previous and separated_from_next
            if promote:
                replacement = old
            skip = duplicate or not separated_from_previous
            if promote or skip:
                replacement_index += 1
            if not (replacement_index < current and skip):
                break
        if _invariant_b(syncs[previous], syncs[current], previous, current):
            break  # B holds here, so it holds for every later index too
        syncs[current] = replacement  # repair B
    return tuple(syncs)


def lookup_latest_sync(syncs: tuple[OffsetSync, ...], upstream_offset: int) -> OffsetSync:
    """The newest sync at or below `upstream_offset`, else the oldest sync kept."""
    for sync in syncs:
        if sync.upstream_offset <= upstream_offset:
            return sync
    return syncs[-1]


def translate_with_syncs(syncs: tuple[OffsetSync, ...], upstream_offset: int) -> int:
    """Translate against one partition's array: -1 when every sync is newer than u."""
    sync = lookup_latest_sync(syncs, upstream_offset)
    if sync.upstream_offset > upstream_offset:
        return -1
    step = 0 if sync.upstream_offset == upstream_offset else 1
    return sync.downstream_offset + step


class OffsetSyncStore:
    """The checkpoint task's view of the offset-syncs topic."""

    def __init__(self, must_read_to_end: bool = True) -> None:
        self.must_read_to_end = must_read_to_end
        self.read_to_end = False
        self._syncs: dict[TopicPartition, tuple[OffsetSync, ...]] = {}

    def handle_sync(self, sync: OffsetSync) -> None:
        """Apply one record read from the offset-syncs topic, in topic order."""
        tp = sync.topic_partition
        self._syncs[tp] = update_sync_array(
            self._syncs.get(tp),
            sync,
            read_to_end=self.read_to_end,
            must_read_to_end=self.must_read_to_end,
        )

    def handle_syncs(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            self.handle_sync(sync)

    def mark_read_to_end(self) -> None:
        """The initial read reached the end offset the topic had when the task started."""
        self.read_to_end = True

    def translate_downstream(
        self, source_partition: TopicPartition, upstream_offset: int
    ) -> int | None:
        """Kafka's translateDownstream: None = unavailable, -1 = too old, else the offset."""
        if not self.read_to_end:
            return None
        syncs = self._syncs.get(source_partition)
        if syncs is None:
            return None
        return translate_with_syncs(syncs, upstream_offset)

    def syncs(self, source_partition: TopicPartition) -> tuple[OffsetSync, ...] | None:
        return self._syncs.get(source_partition)

    def partitions(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self._syncs))

    def snapshot(self) -> Mapping[TopicPartition, tuple[OffsetSync, ...]]:
        return dict(self._syncs)
