"""Offset syncs: when the mirror records "upstream offset u is downstream offset d".

Rules (Kafka 3.7+ OffsetSyncWriter and its PartitionState, MirrorSourceTask.commitRecord
and commit):
- After each record is acknowledged by the target, the partition state decides
  whether the (upstream, downstream) pair must be synced at once. It must when
  1. no sync was emitted for the partition in this task lifetime,
  2. the translation would be too stale: downstream - (last synced downstream + 1)
     >= `offset.lag.max` (default 100; translation answers at most one past a
     sync, hence the +1),
  3. the upstream skipped a record (upstream != previous upstream + 1: compaction,
     transaction markers, a restart), or
  4. the downstream went backwards (the target topic was truncated or recreated).
- A pair that must be synced replaces the partition's delayed pair and becomes
  PENDING; any other pair becomes the partition's DELAYED pair (only the newest
  is kept). At every offset commit (Connect's `offset.flush.interval.ms` timer,
  default 60 000 ms) the delayed pairs are promoted to pending; that is the
  time-based flush that keeps idle partitions translatable (KAFKA-15906, 3.7).
- Pending syncs are sent in insertion order while fewer than
  MAX_OUTSTANDING_OFFSET_SYNCS (10) are in flight; each completion (success or
  failure, as Kafka's producer callback) frees a slot. Pending syncs that find no
  slot wait for the next record, commit or completion.
- A new task lifetime starts with empty partition states (rule 1 fires again).

Theory of operation: `update_partition_state` is the pure rule. `OffsetSyncWriter`
is the small state machine around it; each input returns the syncs the shell must
produce to the offset-syncs topic now (partition 0, in order). Time arrives as
`now_ms` in `tick`, which runs the periodic commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from linkd.core.mirror.model import OffsetSync, TopicPartition

__all__ = [
    "MAX_OUTSTANDING_OFFSET_SYNCS",
    "OFFSET_FLUSH_INTERVAL_MS_DEFAULT",
    "OFFSET_LAG_MAX_DEFAULT",
    "OffsetSyncWriter",
    "PartitionSyncState",
    "update_partition_state",
]

OFFSET_LAG_MAX_DEFAULT = 100
OFFSET_FLUSH_INTERVAL_MS_DEFAULT = 60_000
MAX_OUTSTANDING_OFFSET_SYNCS = 10
# A bound on the partitions one writer tracks; a task is assigned far fewer.
MAX_PARTITIONS = 1_000_000


@dataclass(frozen=True, slots=True)
class PartitionSyncState:
    previous_upstream_offset: int = -1
    previous_downstream_offset: int = -1
    last_sync_downstream_offset: int = -1
    should_sync_offsets: bool = False


def update_partition_state(
    state: PartitionSyncState, upstream_offset: int, downstream_offset: int, offset_lag_max: int
) -> PartitionSyncState:
    """PartitionState.update: the next state; `should_sync_offsets` is the decision."""
    no_previous_sync = state.last_sync_downstream_offset == -1
    too_stale = downstream_offset - (state.last_sync_downstream_offset + 1) >= offset_lag_max
    skipped_upstream = upstream_offset - state.previous_upstream_offset != 1
    truncated_downstream = downstream_offset < state.previous_downstream_offset
    last_sync = state.last_sync_downstream_offset
    should_sync = state.should_sync_offsets
    if no_previous_sync or too_stale or skipped_upstream or truncated_downstream:
        last_sync = downstream_offset
        should_sync = True
    return PartitionSyncState(
        previous_upstream_offset=upstream_offset,
        previous_downstream_offset=downstream_offset,
        last_sync_downstream_offset=last_sync,
        should_sync_offsets=should_sync,
    )


class OffsetSyncWriter:
    """The offset-sync side of one MirrorSourceTask lifetime."""

    def __init__(
        self,
        offset_lag_max: int = OFFSET_LAG_MAX_DEFAULT,
        offset_flush_interval_ms: int = OFFSET_FLUSH_INTERVAL_MS_DEFAULT,
        now_ms: int = 0,
        max_outstanding: int = MAX_OUTSTANDING_OFFSET_SYNCS,
    ) -> None:
        if offset_lag_max < 0:
            raise ValueError(f"offset.lag.max must be >= 0, got {offset_lag_max}")
        if offset_flush_interval_ms <= 0:
            raise ValueError(
                f"offset.flush.interval.ms must be > 0, got {offset_flush_interval_ms}"
            )
        if max_outstanding <= 0:
            raise ValueError(f"max_outstanding must be > 0, got {max_outstanding}")
        self.offset_lag_max = offset_lag_max
        self.offset_flush_interval_ms = offset_flush_interval_ms
        self.max_outstanding = max_outstanding
        self.partition_states: dict[TopicPartition, PartitionSyncState] = {}
        # dicts keep insertion order, as Kafka's LinkedHashMaps do.
        self.delayed: dict[TopicPartition, OffsetSync] = {}
        self.pending: dict[TopicPartition, OffsetSync] = {}
        self.outstanding = 0
        self.next_flush_ms = now_ms + offset_flush_interval_ms

    def _maybe_queue(
        self, tp: TopicPartition, upstream_offset: int, downstream_offset: int
    ) -> None:
        state = self.partition_states.get(tp)
        if state is None:
            if len(self.partition_states) >= MAX_PARTITIONS:
                raise ValueError(f"offset sync writer tracks more than {MAX_PARTITIONS} partitions")
            state = PartitionSyncState()
        state = update_partition_state(
            state, upstream_offset, downstream_offset, self.offset_lag_max
        )
        sync = OffsetSync(tp, upstream_offset, downstream_offset)
        if state.should_sync_offsets:
            self.delayed.pop(tp, None)
            # Like LinkedHashMap.put, replacing a pending sync keeps its place in line.
            self.pending[tp] = sync
            state = replace(state, should_sync_offsets=False)  # PartitionState.reset
        else:
            self.delayed[tp] = sync
        self.partition_states[tp] = state

    def _fire_pending(self) -> list[OffsetSync]:
        sent: list[OffsetSync] = []
        while self.pending and self.outstanding < self.max_outstanding:
            tp = next(iter(self.pending))
            sent.append(self.pending.pop(tp))
            self.outstanding += 1
        return sent

    def on_record_acknowledged(
        self, source_partition: TopicPartition, upstream_offset: int, downstream_offset: int
    ) -> list[OffsetSync]:
        """The target acknowledged a replicated record: the syncs to send now."""
        self._maybe_queue(source_partition, upstream_offset, downstream_offset)
        return self._fire_pending()

    def on_records_acknowledged(
        self,
        source_partition: TopicPartition,
        upstream_offsets: Sequence[int],
        downstream_offsets: Sequence[int],
    ) -> list[OffsetSync]:
        """A run of acknowledged records of one partition, in acknowledgement order:
        the same syncs, and the same state after, as `on_record_acknowledged` called
        for each record in turn (with no completion in between), without building a
        state per record."""
        if len(upstream_offsets) != len(downstream_offsets):
            raise ValueError("one downstream offset per upstream offset is needed")
        if not upstream_offsets:
            return []
        tp = source_partition
        state = self.partition_states.get(tp)
        if state is None:
            if len(self.partition_states) >= MAX_PARTITIONS:
                raise ValueError(f"offset sync writer tracks more than {MAX_PARTITIONS} partitions")
            state = PartitionSyncState()
        prev_up = state.previous_upstream_offset
        prev_down = state.previous_downstream_offset
        last_sync = state.last_sync_downstream_offset
        lag_max = self.offset_lag_max
        sent: list[OffsetSync] = []
        # The newest pair that did not have to be synced, not yet put into `delayed`:
        # dict order only changes when a partition is (re)inserted, so putting it
        # there before the next removal, or at the end, keeps the same order.
        delayed: tuple[int, int] | None = None
        for up, down in zip(upstream_offsets, downstream_offsets, strict=True):
            if (
                last_sync == -1
                or down - (last_sync + 1) >= lag_max
                or up - prev_up != 1
                or down < prev_down
            ):
                last_sync = down
                if delayed is not None:
                    delayed = None  # it would be inserted and then removed right away
                self.delayed.pop(tp, None)
                self.pending[tp] = OffsetSync(tp, up, down)
                sent += self._fire_pending()
            else:
                delayed = (up, down)
            prev_up, prev_down = up, down
        if delayed is not None:
            self.delayed[tp] = OffsetSync(tp, delayed[0], delayed[1])
        self.partition_states[tp] = PartitionSyncState(prev_up, prev_down, last_sync, False)
        return sent

    def on_commit(self) -> list[OffsetSync]:
        """Connect's periodic offset commit: promote delayed syncs and send what fits."""
        self.pending.update(self.delayed)  # putAll: existing entries keep their place
        self.delayed.clear()
        return self._fire_pending()

    def on_sync_completed(self) -> list[OffsetSync]:
        """A sync's produce finished (either way): free its slot, send what fits."""
        if self.outstanding <= 0:
            raise ValueError("offset sync completion without an outstanding sync")
        self.outstanding -= 1
        return self._fire_pending()

    def tick(self, now_ms: int) -> list[OffsetSync]:
        """Run the periodic commit when its time has come."""
        if now_ms < self.next_flush_ms:
            return []
        # One commit however late the tick: Connect's timer does not catch up.
        self.next_flush_ms = now_ms + self.offset_flush_interval_ms
        return self.on_commit()

    def next_deadline_ms(self) -> int:
        return self.next_flush_ms
