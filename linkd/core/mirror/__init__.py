"""MirrorMaker 2 mode: the pure semantics of KIP-382, KIP-545 and KIP-656.

A link of `type=mirror` replicates as Apache Kafka's MirrorMaker 2 (3.7+) does: by
consuming on the source and producing on the target under a replication policy's
topic names, with offset syncs, checkpoints, offset translation, group offset
sync, heartbeats, config and ACL sync, optional exactly-once, MM2's metrics and
an `mm2.properties` configuration. Every rule lives here, free of I/O, clocks,
threads and randomness; shells (daemon, simulator, a real-Kafka engine) feed it
records, offsets, topic listings and `now_ms`, and carry out its decisions.

Modules (each opens with its rules and the Kafka class they come from):
- policy: remote topic naming, internal topics, cycle detection.
- filters: topic, group and config-property filters with MM2's defaults.
- offset_sync: when to emit an offset sync (offset.lag.max, flush interval).
- sync_store: the 64-slot offset sync store and offset translation.
- checkpoint: checkpoints, group offset sync (KIP-545), remote consumer offsets.
- heartbeat: heartbeat schedule, reachability and replication hops.
- topic_sync: topics to mirror, create and grow; config and ACL sync.
- exactly_once: atomic commits of records plus source offsets; restart.
- metrics: MM2's metric names as an accumulator.
- properties / config: Java properties syntax and mm2.properties flows.
- connect: how MM2 is deployed: Connect's worker group, eager and incremental
  cooperative (KIP-415) rebalances, MirrorSourceConnector's task split.

Theory of operation, for one flow A->B (the shell's loop):
1. `topic_sync.plan_remote_topics` says which topics to create/grow on B, and
   `remote_topic_configs` what configs a topic is created with.
2. For each record polled from A: produce it to `policy.format_remote_topic`;
   when B acknowledges it, `OffsetSyncWriter.on_record_acknowledged` returns
   offset syncs to produce to `flow.offset_syncs_topic()`; `tick(now_ms)`
   flushes delayed syncs every `offset.flush.interval.ms`.
3. The checkpoint task reads the sync topic into `OffsetSyncStore` (then
   `mark_read_to_end`), and every emit interval calls
   `checkpoint.checkpoints_for_group` per group; with KIP-545 enabled,
   `plan_group_offset_sync` says which target group offsets to write.
4. `HeartbeatSchedule.poll(now_ms)` says when to write a heartbeat.
"""

from linkd.core.mirror.checkpoint import (
    CheckpointTracker,
    GroupOffsetSyncPlan,
    TargetGroup,
    TargetGroupState,
    checkpoint_is_more_recent,
    checkpoints_for_group,
    plan_group_offset_sync,
    remote_consumer_offsets,
    rename_topic_partition,
)
from linkd.core.mirror.config import (
    ClusterConfig,
    ConfigWarning,
    MirrorConfigError,
    MirrorFlow,
    MirrorMakerConfig,
    parse_mm2_properties,
)
from linkd.core.mirror.exactly_once import (
    CommittedMirrorState,
    ExactlyOnceRequirement,
    ExactlyOnceSourceSupport,
    MirroredRecord,
    MirrorTransaction,
    RestartPlan,
    ResumePosition,
    SourceOffset,
    TransactionBoundary,
    apply_transaction_outcome,
    restart_from_committed,
    transaction_commit_due,
    transaction_for_batch,
    transactional_id,
)
from linkd.core.mirror.filters import ConfigPropertyFilter, GroupFilter, PatternList, TopicFilter
from linkd.core.mirror.heartbeat import (
    HeartbeatSchedule,
    checkpoint_topics,
    heartbeat_topics,
    remote_topics,
    replication_hops,
    upstream_clusters,
)
from linkd.core.mirror.metrics import CheckpointMetricKey, MirrorMetrics, SourceMetricKey
from linkd.core.mirror.model import (
    Checkpoint,
    Heartbeat,
    OffsetAndMetadata,
    OffsetSync,
    TopicPartition,
)
from linkd.core.mirror.offset_sync import (
    OffsetSyncWriter,
    PartitionSyncState,
    update_partition_state,
)
from linkd.core.mirror.policy import PolicyKind, ReplicationPolicy
from linkd.core.mirror.properties import PropertyLine, parse_properties
from linkd.core.mirror.sync_store import OffsetSyncStore, update_sync_array
from linkd.core.mirror.topic_sync import (
    ConfigEntry,
    ConfigSource,
    TopicConfigSync,
    TopicPlan,
    plan_acl_sync,
    plan_remote_topics,
    remote_topic_configs,
    should_replicate_topic,
    target_config_sync,
)

__all__ = [
    "Checkpoint",
    "CheckpointMetricKey",
    "CheckpointTracker",
    "ClusterConfig",
    "CommittedMirrorState",
    "ConfigEntry",
    "ConfigPropertyFilter",
    "ConfigSource",
    "ConfigWarning",
    "ExactlyOnceRequirement",
    "ExactlyOnceSourceSupport",
    "GroupFilter",
    "GroupOffsetSyncPlan",
    "Heartbeat",
    "HeartbeatSchedule",
    "MirrorConfigError",
    "MirrorFlow",
    "MirrorMakerConfig",
    "MirrorMetrics",
    "MirrorTransaction",
    "MirroredRecord",
    "OffsetAndMetadata",
    "OffsetSync",
    "OffsetSyncStore",
    "OffsetSyncWriter",
    "PartitionSyncState",
    "PatternList",
    "PolicyKind",
    "PropertyLine",
    "ReplicationPolicy",
    "RestartPlan",
    "ResumePosition",
    "SourceMetricKey",
    "SourceOffset",
    "TargetGroup",
    "TargetGroupState",
    "TopicConfigSync",
    "TopicFilter",
    "TopicPartition",
    "TopicPlan",
    "TransactionBoundary",
    "apply_transaction_outcome",
    "checkpoint_is_more_recent",
    "checkpoint_topics",
    "checkpoints_for_group",
    "heartbeat_topics",
    "parse_mm2_properties",
    "parse_properties",
    "plan_acl_sync",
    "plan_group_offset_sync",
    "plan_remote_topics",
    "remote_consumer_offsets",
    "remote_topic_configs",
    "remote_topics",
    "rename_topic_partition",
    "replication_hops",
    "restart_from_committed",
    "should_replicate_topic",
    "target_config_sync",
    "transaction_commit_due",
    "transaction_for_batch",
    "transactional_id",
    "update_partition_state",
    "update_sync_array",
    "upstream_clusters",
]
