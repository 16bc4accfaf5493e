"""Exactly-once mirroring (KIP-656's goal, as Kafka delivers it through KIP-618).

Rules (Kafka's ExactlyOnceWorkerSourceTask, Worker.taskTransactionalId,
MirrorSourceTask.initializeConsumer/loadOffsets, MirrorUtils.wrapPartition):
- With `<target>.exactly.once.source.support = enabled` the mirror task writes,
  in ONE transaction on the target cluster, the batch of records it polled and
  its own source offsets: per source partition ({cluster, topic, partition}) the
  last upstream offset in the batch. The offsets go to the worker's offsets topic
  on the target (`mm2-offsets.<source>.internal`), so records and progress commit
  or abort together. The transactional id is `<group.id>-<connector>-<task>`.
  The transaction boundary is the connector property `transaction.boundary`:
  `poll` (Connect's default) commits after every poll batch; `interval` keeps one
  transaction open over several polls and commits once
  `transaction.boundary.interval.ms` has passed since the last commit (or the
  task's start; default: the worker's `offset.flush.interval.ms`), as Connect's
  interval boundary does, and
  also as soon as a poll finds no backlog: it brought less than a tenth of
  max.poll.records (none at all included), or every partition is at its end
  after it. A flow that keeps up with its source then holds no record back.
  (Any short poll would be no such sign: a copy that outruns its fetches gets
  polls of a few hundred records under a backlog, and would commit each.)
  Either way the offsets committed are those of the records in the same
  transaction. `connector` is not offered: MirrorSourceConnector does not
  define boundaries (`transaction_commit_due`).
- Offset syncs are produced outside the transaction, after it committed (Connect
  calls commitRecord only then), so a sync never names an aborted record.
- Restart: for each assigned source partition, read the committed source offset
  (read_committed); resume at committed + 1, or, with none, at the earliest
  offset (the consumer's `auto.offset.reset=earliest`). Under exactly-once the
  records visible on the target end exactly at the committed offset, so nothing
  is replayed twice; at-least-once replays everything written after the last
  offset flush. If the source log start moved past the resume point (retention),
  those records are gone: reported as lost, never hidden.

Theory of operation: `transaction_for_batch` builds what must commit atomically;
`apply_transaction_outcome` is what the target holds afterwards;
`restart_from_committed` says where to resume and what the restart costs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from linkd.core.mirror.model import TopicPartition

__all__ = [
    "CommittedMirrorState",
    "ExactlyOnceRequirement",
    "ExactlyOnceSourceSupport",
    "MirrorTransaction",
    "MirroredRecord",
    "RestartPlan",
    "ResumePosition",
    "SourceOffset",
    "TransactionBoundary",
    "apply_transaction_outcome",
    "offsets_topic",
    "restart_from_committed",
    "transaction_commit_due",
    "transaction_for_batch",
    "transaction_offsets",
    "transactional_id",
]

# A transaction bigger than this is a shell bug (a poll returns at most max.poll.records;
# the interval boundary commits at half of this).
MAX_RECORDS_PER_TRANSACTION = 1_000_000


class ExactlyOnceSourceSupport(enum.Enum):
    """Worker property `exactly.once.source.support` (per target cluster in MM2)."""

    DISABLED = "disabled"
    PREPARING = "preparing"
    ENABLED = "enabled"


class ExactlyOnceRequirement(enum.Enum):
    """Connector property `exactly.once.support`."""

    REQUESTED = "requested"
    REQUIRED = "required"


class TransactionBoundary(enum.Enum):
    """Connector property `transaction.boundary` (KIP-618) as MM2 can use it."""

    POLL = "poll"
    INTERVAL = "interval"


def transaction_commit_due(
    boundary: TransactionBoundary,
    *,
    records: int,
    polled: int,
    poll_limit: int,
    drained: bool,
    last_commit_ms: int,
    now_ms: int,
    interval_ms: int,
) -> bool:
    """After a poll: whether the open transaction (`records` records so far) commits
    now. `polled`: records this poll brought, of at most `poll_limit`
    (max.poll.records); `drained`: every source partition is at its end after it;
    `last_commit_ms`: when the task last committed (or started).
    Nothing to commit, nothing due."""
    if records <= 0:
        return False
    if boundary is TransactionBoundary.POLL:
        return True
    return (
        polled * 10 < poll_limit
        or drained
        or now_ms - last_commit_ms >= interval_ms
        or records >= MAX_RECORDS_PER_TRANSACTION // 2
    )


def transactional_id(group_id: str, connector_name: str, task: int) -> str:
    """Worker.taskTransactionalId."""
    return f"{group_id}-{connector_name}-{task}"


def offsets_topic(source_alias: str) -> str:
    """MirrorMakerConfig's default worker offsets topic, on the target cluster."""
    return f"mm2-offsets.{source_alias}.internal"


@dataclass(frozen=True, slots=True)
class MirroredRecord:
    """One upstream record, as the mirror produces it to the target."""

    source_partition: TopicPartition
    upstream_offset: int
    target_topic: str
    key: bytes | None = None
    value: bytes | None = None
    timestamp_ms: int = 0
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def target_partition(self) -> TopicPartition:
        # MM2 keeps the partition number.
        return TopicPartition(self.target_topic, self.source_partition.partition)


@dataclass(frozen=True, slots=True, order=True)
class SourceOffset:
    """A Connect source offset of MM2: partition {cluster, topic, partition}, offset {offset}."""

    cluster: str
    topic: str
    partition: int
    offset: int

    @property
    def source_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class MirrorTransaction:
    transactional_id: str
    records: tuple[MirroredRecord, ...]
    source_offsets: tuple[SourceOffset, ...]


def transaction_for_batch(
    txn_id: str, source_alias: str, batch: Sequence[MirroredRecord]
) -> MirrorTransaction:
    """Records plus, per source partition, the last upstream offset of the batch."""
    if len(batch) > MAX_RECORDS_PER_TRANSACTION:
        raise ValueError(f"a transaction holds at most {MAX_RECORDS_PER_TRANSACTION} records")
    by_partition: dict[TopicPartition, list[int]] = {}
    for r in batch:
        by_partition.setdefault(r.source_partition, []).append(r.upstream_offset)
    return MirrorTransaction(txn_id, tuple(batch), transaction_offsets(source_alias, by_partition))


def transaction_offsets(
    source_alias: str, upstream_offsets: Mapping[TopicPartition, Sequence[int]]
) -> tuple[SourceOffset, ...]:
    """The source offsets a transaction commits: per source partition, the last of
    the upstream offsets it copies (which must increase), in partition order."""
    if sum(len(offsets) for offsets in upstream_offsets.values()) > MAX_RECORDS_PER_TRANSACTION:
        raise ValueError(f"a transaction holds at most {MAX_RECORDS_PER_TRANSACTION} records")
    last: dict[TopicPartition, int] = {}
    for tp, offsets in upstream_offsets.items():
        previous = -1
        for i, offset in enumerate(offsets):
            if i and offset <= previous:
                raise ValueError(
                    f"upstream offsets of {tp} must increase within a batch: "
                    f"{offset} after {previous}"
                )
            previous = offset
        if offsets:
            last[tp] = previous
    return tuple(
        SourceOffset(source_alias, tp.topic, tp.partition, off) for tp, off in sorted(last.items())
    )


@dataclass(frozen=True, slots=True)
class CommittedMirrorState:
    """What a read_committed reader of the target sees of one mirror task."""

    # Source partition -> last upstream offset committed to the offsets topic.
    source_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    # Source partition -> upstream offsets of the records visible on the target, in order.
    visible_upstream_offsets: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)


def apply_transaction_outcome(
    state: CommittedMirrorState, txn: MirrorTransaction, committed: bool
) -> CommittedMirrorState:
    """A committed transaction makes records and offsets visible together; an abort, neither."""
    if not committed:
        return state
    offsets = dict(state.source_offsets)
    visible = {tp: list(v) for tp, v in state.visible_upstream_offsets.items()}
    for so in txn.source_offsets:
        offsets[so.source_partition] = so.offset
    for r in txn.records:
        visible.setdefault(r.source_partition, []).append(r.upstream_offset)
    return CommittedMirrorState(offsets, {tp: tuple(v) for tp, v in visible.items()})


@dataclass(frozen=True, slots=True)
class ResumePosition:
    source_partition: TopicPartition
    # The upstream offset to seek to; None = no committed offset: start at the earliest.
    next_upstream_offset: int | None
    # Upstream offsets already visible on the target that the restart will write again.
    duplicated_upstream_offsets: tuple[int, ...]
    # Upstream offsets [resume, log start) deleted before they were mirrored.
    lost_upstream_offsets: range


@dataclass(frozen=True, slots=True)
class RestartPlan:
    positions: Mapping[TopicPartition, ResumePosition]

    def duplicates(self) -> int:
        return sum(len(p.duplicated_upstream_offsets) for p in self.positions.values())

    def lost(self) -> int:
        return sum(len(p.lost_upstream_offsets) for p in self.positions.values())


def restart_from_committed(
    assigned: Iterable[TopicPartition],
    state: CommittedMirrorState,
    source_log_start_offsets: Mapping[TopicPartition, int] | None = None,
) -> RestartPlan:
    """Where a restarted mirror task resumes, and what that costs (loss, duplicates)."""
    log_starts = source_log_start_offsets or {}
    positions: dict[TopicPartition, ResumePosition] = {}
    for tp in sorted(set(assigned)):
        committed = state.source_offsets.get(tp)
        log_start = log_starts.get(tp, 0)
        visible = state.visible_upstream_offsets.get(tp, ())
        if committed is None or committed < 0:
            nxt: int | None = None
            effective = log_start
        else:
            nxt = committed + 1
            effective = max(nxt, log_start)
        lost = range(nxt, log_start) if nxt is not None and log_start > nxt else range(0)
        duplicated = tuple(u for u in visible if u >= effective)
        positions[tp] = ResumePosition(tp, nxt, duplicated, lost)
    return RestartPlan(positions)
