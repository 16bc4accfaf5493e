"""Checkpoints and consumer group offset sync (KIP-382 checkpoints, KIP-545).

Rules (Kafka's MirrorCheckpointTask, CheckpointStore, MirrorClient.remoteConsumerOffsets):
- Every `emit.checkpoints.interval.seconds` (default 60) the checkpoint task lists
  each replicated group's committed offsets on the source. For each partition
  whose topic passes the topic filter it translates the offset through the offset
  sync store; partitions without a translation, or with -1 ("too old"), get no
  checkpoint.
- The checkpoint's partition is renamed for the target: a topic that came from
  the target cluster goes back to its original name (`B.t` checkpointed from A to
  B is `t`), any other gets the remote name (`t` -> `A.t`).
- A checkpoint is emitted only if it is the first for its group and partition,
  the upstream offset went backwards (the group was rewound on the source), or
  the downstream offset advanced. So checkpoints never move a downstream offset
  back unless the source group itself rewound, and repeats are suppressed.
- KIP-545 (`sync.group.offsets.enabled`, every `sync.group.offsets.interval.seconds`,
  default 60): the newest checkpoint of each group is written as the group's
  committed offset on the target, but only for groups with no live member there
  (Kafka lists EMPTY groups; an active group's commit is refused by its broker
  with UNKNOWN_MEMBER_ID, so it is skipped here up front). For a group unknown to
  the target every partition is written; for an empty group a partition is
  written only if the target has no offset for it or a smaller one: a target
  offset never moves backwards.
- MirrorClient.remoteConsumerOffsets: reading `<source>.checkpoints.internal`
  from the start, the last checkpoint per partition of the group wins.

Theory of operation: `checkpoints_for_group` is the per-poll decision;
`CheckpointTracker` holds the newest emitted checkpoints (Kafka's CheckpointStore,
reloadable from the checkpoints topic after a restart); `plan_group_offset_sync`
decides the target writes from data the shell gathered.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from linkd.core.mirror.config import MirrorFlow
from linkd.core.mirror.filters import TopicFilter
from linkd.core.mirror.model import Checkpoint, OffsetAndMetadata, TopicPartition
from linkd.core.mirror.policy import ReplicationPolicy
from linkd.core.mirror.sync_store import OffsetSyncStore

__all__ = [
    "CheckpointCounts",
    "CheckpointTracker",
    "GroupOffsetSyncPlan",
    "TargetGroup",
    "TargetGroupState",
    "checkpoint_is_more_recent",
    "checkpoints_for_flow",
    "checkpoints_for_group",
    "plan_group_offset_sync",
    "remote_consumer_offsets",
    "rename_topic_partition",
]

EMIT_CHECKPOINTS_INTERVAL_SECONDS_DEFAULT = 60
SYNC_GROUP_OFFSETS_INTERVAL_SECONDS_DEFAULT = 60


def rename_topic_partition(
    upstream: TopicPartition, *, source_alias: str, target_alias: str, policy: ReplicationPolicy
) -> TopicPartition:
    """MirrorCheckpointTask.renameTopicPartition."""
    if policy.topic_source(upstream.topic) == target_alias:
        # The topic came from the target cluster: "B.t" goes home as "t".
        return TopicPartition(policy.original_topic(upstream.topic), upstream.partition)
    return TopicPartition(
        policy.format_remote_topic(source_alias, upstream.topic), upstream.partition
    )


def checkpoint_is_more_recent(
    checkpoint: Checkpoint, previous: Mapping[TopicPartition, Checkpoint] | None
) -> bool:
    """Emit only the first checkpoint, an upstream rewind or a downstream advance."""
    if previous is None:
        return True
    last = previous.get(checkpoint.topic_partition)
    if last is None:
        return True
    if checkpoint.upstream_offset < last.upstream_offset:
        return True
    return checkpoint.downstream_offset > last.downstream_offset


def checkpoints_for_group(
    group: str,
    upstream_offsets: Mapping[TopicPartition, OffsetAndMetadata],
    store: OffsetSyncStore,
    previous: Mapping[TopicPartition, Checkpoint] | None,
    *,
    source_alias: str,
    target_alias: str,
    policy: ReplicationPolicy,
    topic_filter: TopicFilter,
) -> dict[TopicPartition, Checkpoint]:
    """MirrorCheckpointTask.checkpointsForGroup: new checkpoints keyed by target partition."""
    result: dict[TopicPartition, Checkpoint] = {}
    for tp in sorted(upstream_offsets):
        if not topic_filter.should_replicate_topic(tp.topic):
            continue
        committed = upstream_offsets[tp]
        downstream = store.translate_downstream(tp, committed.offset)
        if downstream is None or downstream < 0:
            continue
        checkpoint = Checkpoint(
            consumer_group_id=group,
            topic_partition=rename_topic_partition(
                tp, source_alias=source_alias, target_alias=target_alias, policy=policy
            ),
            upstream_offset=committed.offset,
            downstream_offset=downstream,
            metadata=committed.metadata,
        )
        if checkpoint_is_more_recent(checkpoint, previous):
            result[checkpoint.topic_partition] = checkpoint
    return result



def checkpoints_for_flow(
    flow: MirrorFlow,
    groups: Iterable[str],
    offsets_of: Callable[[str], Mapping[TopicPartition, OffsetAndMetadata]],
    store: OffsetSyncStore,
    tracker: CheckpointTracker,
) -> dict[str, dict[TopicPartition, Checkpoint]]:
    """One round of a flow's checkpoint task: for each of `groups` the flow's
    group filter replicates (in name order), the checkpoints
    `checkpoints_for_group` finds for its source offsets (`offsets_of`, asked
    only for those groups) against the newest `tracker` holds. Groups with no
    new checkpoint are left out; the tracker is not changed (the shell
    updates it once the checkpoints are written)."""
    found: dict[str, dict[TopicPartition, Checkpoint]] = {}
    for group in sorted(set(groups)):
        if not flow.group_filter.should_replicate_group(group):
            continue
        new = checkpoints_for_group(
            group,
            offsets_of(group),
            store,
            tracker.get(group),
            source_alias=flow.source,
            target_alias=flow.target,
            policy=flow.policy,
            topic_filter=flow.topic_filter,
        )
        if new:
            found[group] = new
    return found

@dataclass
class CheckpointTracker:
    """The newest checkpoint per group and target partition (Kafka's CheckpointStore)."""

    checkpoints: dict[str, dict[TopicPartition, Checkpoint]] = field(default_factory=dict)

    def load(self, records: Iterable[Checkpoint], groups: Iterable[str] | None = None) -> None:
        """Replay the checkpoints topic (last record wins), keeping only `groups` if given."""
        wanted = None if groups is None else set(groups)
        for cp in records:
            if wanted is None or cp.consumer_group_id in wanted:
                self.checkpoints.setdefault(cp.consumer_group_id, {})[cp.topic_partition] = cp

    def get(self, group: str) -> Mapping[TopicPartition, Checkpoint] | None:
        return self.checkpoints.get(group)

    def update(self, group: str, new_checkpoints: Mapping[TopicPartition, Checkpoint]) -> None:
        self.checkpoints.setdefault(group, {}).update(new_checkpoints)

    def converted_upstream_offsets(self) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """computeConvertedUpstreamOffset: each group's checkpoints as target offsets."""
        return {
            group: {tp: cp.offset_and_metadata() for tp, cp in sorted(cps.items())}
            for group, cps in sorted(self.checkpoints.items())
        }


class TargetGroupState(enum.Enum):
    """A group as the target cluster describes it."""

    DEAD = "dead"  # unknown on the target
    EMPTY = "empty"  # known, no live member
    ACTIVE = "active"  # has live members (Stable, rebalancing)


@dataclass(frozen=True, slots=True)
class TargetGroup:
    state: TargetGroupState
    offsets: Mapping[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupOffsetSyncPlan:
    # group -> partition -> offset to write with AlterConsumerGroupOffsets.
    writes: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]]
    skipped_active_groups: tuple[str, ...]
    # (group, partition, target offset, translated offset): writes refused as rewinds.
    refused_rewinds: tuple[tuple[str, TopicPartition, int, int], ...]



@dataclass
class CheckpointCounts:
    """What a flow's checkpoint task did, as both MM2 shells count it."""

    checkpoints_emitted: int = 0
    group_offsets_written: int = 0
    refused_rewinds: int = 0
    skipped_active_groups: int = 0

    def group_sync_done(self, plan: GroupOffsetSyncPlan, written: int) -> None:
        """A KIP-545 round carried out `plan`, writing `written` offsets."""
        assert written >= 0
        self.group_offsets_written += written
        self.refused_rewinds += len(plan.refused_rewinds)
        self.skipped_active_groups += len(plan.skipped_active_groups)

def plan_group_offset_sync(
    converted: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]],
    target_groups: Mapping[str, TargetGroup],
) -> GroupOffsetSyncPlan:
    """MirrorCheckpointTask.syncGroupOffset (KIP-545) as a decision."""
    writes: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    skipped: list[str] = []
    refused: list[tuple[str, TopicPartition, int, int]] = []
    for group in sorted(converted):
        offsets = converted[group]
        target = target_groups.get(group, TargetGroup(TargetGroupState.DEAD))
        if target.state is TargetGroupState.ACTIVE:
            skipped.append(group)
            continue
        if target.state is TargetGroupState.DEAD:
            if offsets:
                writes[group] = dict(sorted(offsets.items()))
            continue
        to_write: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in sorted(offsets):
            translated = offsets[tp]
            current = target.offsets.get(tp)
            if current is not None and current.offset >= translated.offset:
                if current.offset > translated.offset:
                    refused.append((group, tp, current.offset, translated.offset))
                continue
            to_write[tp] = translated
        if to_write:
            writes[group] = to_write
    return GroupOffsetSyncPlan(writes, tuple(skipped), tuple(refused))


def remote_consumer_offsets(
    checkpoint_records: Iterable[Checkpoint], group: str
) -> dict[TopicPartition, OffsetAndMetadata]:
    """MirrorClient.remoteConsumerOffsets: the group's translated offsets on this cluster."""
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    for cp in checkpoint_records:
        if cp.consumer_group_id == group:
            offsets[cp.topic_partition] = cp.offset_and_metadata()
    return dict(sorted(offsets.items()))
