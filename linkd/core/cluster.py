"""The model of one cluster: topics, partition logs, producers, transactions
and consumer groups, driven by calls that carry the time and return effects.

Rules:
- A call either refuses (raises ClusterError, nothing changed) or changes the
  state and returns the effects the shell must carry out, in order:
  `AppendBatch` (write bytes to a partition log), `Journal` (persist metadata
  records; every AppendBatch before it must be durable first: write-ahead),
  `CreateLogs` / `DeleteTopicData` / `DeleteBelow` (files).
- Metadata (topics, configs, log start offsets, producer ids, transactions,
  committed offsets) lives in journal records. `apply_record` replays them at
  start-up, then `recover_partition` replays each log's batches, then
  `recovery_completions` names transactions whose markers must be rewritten.
- Identifiers that need entropy (topic ids) arrive as arguments.

Pure code: no I/O, clocks, threads or randomness.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import assert_never

from linkd.core import journal as jr
from linkd.core import records as rb
from linkd.core.acls import AclBinding, AclFilter, AclStore
from linkd.core.broker_config import (
    CLUSTER_DEFAULT,
    BrokerConfigs,
    validate_broker_configs,
    validate_group_configs,
)

# Effects are re-exported (see __all__): shells and tests name them here too.
from linkd.core.effects import (
    AppendBatch,
    CreateLogs,
    DeleteBelow,
    DeleteTopicData,
    Effect,
    Journal,
    ResetLog,
    TruncateLog,
    Wake,
)
from linkd.core.effects import journal as _journal
from linkd.core.errors import ClusterError, ErrorCode, RecordError
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.groups import GroupConfig, GroupCoordinator
from linkd.core.links import (
    LinkConfig,
    LinkMode,
    LinkState,
    LinkTable,
    MappingType,
    Role,
    in_prefix,
)
from linkd.core.log_feed import LogFeed
from linkd.core.mirror_links import MirrorLinkTable
from linkd.core.namespaces import NamespaceTable, ResourceType
from linkd.core.partition import AbortedTxn, FetchPlan, PartitionLog, SegmentRule
from linkd.core.plans import PlanTable
from linkd.core.provenance import ProvenanceItem, ProvenanceKind
from linkd.core.topic_config import (
    TopicConfig,
    check_creatable_topic_name,
    effective_configs,
    validate_configs,
    validate_partition_count,
)
from linkd.core.transactions import (
    MAX_EPOCH,
    TransactionCoordinator,
    TxnCompletion,
    TxnState,
    producer_id_base,
)
from linkd.core.users import Deletion, ScramMechanism, Upsertion, UserError, UserStore

# An acks=all produce or a transaction commit waits at most this long for its
# high watermark (a SYNC link's followers); the link drops OUT_OF_SYNC well
# before by default. Both shells wait on it.
HW_WAIT_MAX_MS = 60_000
# What a produce that names no acks waits for: all (Kafka's producer default).
ACKS_ALL = -1
# Kafka's log.retention.check.interval.ms default: five minutes.
RETENTION_CHECK_INTERVAL_MS = 300_000
# The id of a cluster's one broker (its Kafka listener's node id): the name
# of its BROKER config resource.
BROKER_ID = 0


def produce_wait_ms(timeout_ms: int) -> int:
    """How long an acks=all produce waits for its high watermark: the
    producer's timeout (Kafka's produce timeout_ms) within the cluster's
    bound; 0 or less names none, and the bound applies."""
    return min(timeout_ms, HW_WAIT_MAX_MS) if timeout_ms > 0 else HW_WAIT_MAX_MS


@dataclass(frozen=True, slots=True)
class WaitMark:
    """What a write waiting on a high watermark wrote (`ClusterState.wait_marks`)."""

    topic_id: str
    base_offset: int  # of its last batch below the target (-1: none)
    crc: int


# -- topics ---------------------------------------------------------------------


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: str
    overrides: dict[str, str]
    partitions: list[PartitionLog] = field(default_factory=list)
    config: TopicConfig = field(default_factory=lambda: TopicConfig.from_overrides({}))
    # Leader epoch changes journalled by unclean-election faults, per partition:
    # recovery re-applies them after replaying the batches.
    epoch_bumps: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    # Provenance history per follower partition (spec section 8).
    provenance: dict[int, list[ProvenanceItem]] = field(default_factory=dict)
    # The cluster's topic defaults (broker configs) its configs fall back on.
    defaults: Mapping[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("_")

    def configs(self) -> dict[str, str]:
        return effective_configs(self.overrides, self.defaults)


@dataclass(frozen=True, slots=True)
class DanglingTxn:
    """An open transaction in a partition that nothing will finish."""

    topic: str
    partition: int
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class ProduceResult:
    base_offset: int
    duplicate: bool
    log_start_offset: int
    log_append_time_ms: int
    effects: tuple[Effect, ...]


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """A ListOffsets answer, or the batch the shell must decode to finish it."""

    offset: int
    timestamp: int
    leader_epoch: int
    refine_batch_offset: int | None = None  # decode this batch with pick_offset_in_batch


class ClusterState:
    def __init__(
        self,
        cluster_id: str,
        group_config: GroupConfig | None = None,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.cluster_id = cluster_id
        # Test only: the fixes undone and bugs planted in this cluster
        # (linkd/core/faults.py); fixed for its life, none outside a test.
        self._faults = faults
        self.topics: dict[str, Topic] = {}
        # {topic id: name} of `topics`, built when first asked after a topic
        # came or went (`topic_names_by_id`); None until then.
        self._names_by_id: dict[str, str] | None = None
        # Which logs moved, for readers that look at many (a fetch session's
        # source); every change of which logs there are is a new layout.
        self.log_feed = LogFeed()
        # `led_under`'s last answer per link: (its mappings, the feed's
        # layout, the partitions). Only a change of either changes it.
        self._led: dict[str, tuple[tuple[object, ...], int, frozenset[tuple[str, int]]]] = {}
        # The topics whose provenance records a gap (`replication.gaps_of`).
        self.topics_with_gaps: set[str] = set()
        # Fix 45 undone: every cluster counts producer ids from the same
        # start, as a Kafka cluster's counter does.
        first_pid = 1000 if faults.undid(45) else producer_id_base(cluster_id)
        self.txn = TransactionCoordinator(first_pid)
        self.groups = GroupCoordinator(group_config or GroupConfig())
        self.acls = AclStore()
        self.users = UserStore()
        self._links = LinkTable(cluster_id)
        self._links.led_logs = self.led_logs
        self._links.led_partitions = self.led_under
        self._links.faults = faults
        self.mirror_links = MirrorLinkTable()
        self.namespaces = NamespaceTable()
        # Multi-step procedures in progress (linkd/core/plans.py).
        self.plans = PlanTable()
        # Committed transactions whose markers span partitions and are not all
        # below their HWs yet: {(topic, partition): marker offset}. A marker
        # passes its HW only when every marker of its transaction can (spec
        # invariant 5: read_committed readers never see part of a transaction,
        # here or, through the source HWs a follower copies, on a follower).
        # A SYNC follower holds the caps of one answer the same way, each at
        # its cap's last offset (`replication.cap_at_source_high_watermarks`).
        self.marker_groups: list[dict[tuple[str, int], int]] = []
        # Why each partition's log start last moved, while this cluster runs
        # ("retention" or "deleted records"): a follower that finds the start
        # past its position records the gap with the cause (not durable: after
        # a restart the cause of an older move is not known).
        self.log_start_causes: dict[tuple[str, int], str] = {}
        # Kafka's log.retention.check.interval.ms: retention runs this often
        # (a static setting of the shell: the daemon's option, a scenario's).
        self.retention_check_interval_ms = RETENTION_CHECK_INTERVAL_MS
        self.next_retention_check_ms: int | None = None
        # Dynamic broker configs (both levels) and the groups' configs (KIP-848).
        self.broker_configs = BrokerConfigs()
        self.group_configs: dict[str, dict[str, str]] = {}

    # -- lookup ---------------------------------------------------------------

    @property
    def faults(self) -> Faults:
        return self._faults

    @property
    def links(self) -> LinkTable:
        return self._links

    @links.setter
    def links(self, table: LinkTable) -> None:
        """A shell may bring its own table (limits): it judges this cluster's logs."""
        table.led_logs = self.led_logs
        table.led_partitions = self.led_under
        table.faults = self._faults
        self._links = table

    def topic_names_by_id(self) -> Mapping[str, str]:
        """{topic id: name} of every topic. Kept until a topic is created or
        deleted, then built anew (never changed in place: a caller may hold on
        to one as what the names were when it asked)."""
        names = self._names_by_id
        if names is None:
            names = self._names_by_id = {t.topic_id: t.name for t in self.topics.values()}
        return names

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise ClusterError(
                ErrorCode.UNKNOWN_TOPIC, f"topic {name!r}", f"topic {name!r} does not exist"
            )
        return topic

    def partition(self, topic_name: str, partition: int) -> PartitionLog:
        found = self.topics.get(topic_name)
        if found is not None and 0 <= partition < len(found.partitions):
            return found.partitions[partition]  # every round asks this of every partition
        topic = self.topic(topic_name)
        if partition < 0 or partition >= len(topic.partitions):
            raise ClusterError(
                ErrorCode.UNKNOWN_PARTITION,
                f"{topic_name}-{partition}",
                f"topic {topic_name!r} has {len(topic.partitions)} partitions; "
                f"partition {partition} does not exist",
            )
        return topic.partitions[partition]

    @staticmethod
    def segment_rule(topic: Topic) -> SegmentRule:
        """What rolls the topic's segments (its segment.bytes, segment.ms,
        segment.jitter.ms, and max.compaction.lag.ms when compacted)."""
        config = topic.config
        return SegmentRule(
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
            jitter_ms=config.segment_jitter_ms,
            max_compaction_lag_ms=config.max_compaction_lag_ms if config.compact else None,
        )

    def append(
        self,
        topic: Topic,
        partition: int,
        batch: bytes,
        header: rb.BatchHeader,
        now_ms: int,
        *,
        control_type: int | None = None,
        allow_gap: bool = False,
    ) -> AppendBatch:
        """Applies a batch to the partition's model, in a new segment when the
        topic's segment rule says so, and returns the effect that writes it
        (every batch any call writes goes through here)."""
        log = topic.partitions[partition]
        roll = log.append(
            header, control_type, now_ms, self.segment_rule(topic), allow_gap=allow_gap
        )
        return AppendBatch(topic.topic_id, partition, batch, header, roll=roll)

    # -- topics ---------------------------------------------------------------

    def check_create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str]
    ) -> dict[str, str]:
        """Every check of `create_topic`, changing nothing (Kafka's validate_only);
        returns the checked overrides."""
        check_creatable_topic_name(name)
        self.check_client_write(ResourceType.TOPIC, name, "create")
        validate_partition_count(name, partitions)
        overrides = validate_configs(name, configs, self.topic_defaults())
        if name in self.topics:
            raise ClusterError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r}", f"topic {name!r} already exists"
            )
        return overrides

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], topic_id: str
    ) -> tuple[Topic, list[Effect]]:
        overrides = self.check_create_topic(name, partitions, configs)
        record = jr.TopicCreate(name, topic_id, partitions, overrides)
        topic = self._apply_topic_create(record)
        effects: list[Effect] = [
            CreateLogs(topic_id, tuple(range(partitions)), topic.config.segment_bytes),
            Journal((record,)),
        ]
        return topic, effects

    def topic_defaults(self) -> dict[str, str]:
        """Every topic's defaults as the broker configs set them."""
        return self.broker_configs.topic_defaults(str(BROKER_ID))

    def _apply_topic_create(self, record: jr.TopicCreate) -> Topic:
        name = record.name
        defaults = self.topic_defaults()
        topic = Topic(name, record.topic_id, dict(record.configs), defaults=defaults)
        topic.config = TopicConfig.from_overrides(topic.overrides, defaults)
        topic.partitions = [PartitionLog(name, p) for p in range(record.partitions)]
        self.topics[name] = topic
        self.logs_replaced()
        return topic

    def forget_unstored(self, topic_name: str, partition: int, stored_end: int) -> bool:
        """The shell could not store the batches at and above `stored_end` (its
        disk refused the write): the partition's log goes back to what is
        stored, so the model is never ahead of the disk. Returns whether
        anything was cut."""
        log = self.partition(topic_name, partition)
        assert stored_end <= log.log_end_offset, (log.name, stored_end, log.log_end_offset)
        if stored_end == log.log_end_offset:
            return False
        log.truncate_to(stored_end)
        assert log.log_end_offset == stored_end
        return True

    def discard_unjournalled_topic(self, topic_id: str) -> str:
        """Undoes a topic creation whose logs the shell could not open (its
        CreateLogs effect failed, so its journal record, after it, was never
        written). Returns the topic's name."""
        name = next(n for n, t in self.topics.items() if t.topic_id == topic_id)
        assert all(p.log_end_offset == 0 for p in self.topics[name].partitions), name
        del self.topics[name]
        self.logs_replaced()
        return name

    def delete_topic(self, name: str) -> list[Effect]:
        topic = self.topic(name)
        self.check_client_write(ResourceType.TOPIC, name, "delete")
        record = jr.TopicDelete(name)
        del self.topics[name]
        self.logs_replaced()
        forgotten = self.groups.forget_topic(name)
        return [Journal((record, *forgotten)), DeleteTopicData(topic.topic_id)]

    def check_alter_configs(
        self, name: str, set_: Mapping[str, str], delete: Iterable[str] = ()
    ) -> dict[str, str]:
        """Every check of `alter_configs`, changing nothing; returns the
        topic's overrides as they would be (each checked, and their
        combination with the cluster's defaults)."""
        topic = self.topic(name)
        self.check_client_write(ResourceType.TOPIC, name, "alter the configs of")
        gone = set(delete)
        overrides = {k: v for k, v in topic.overrides.items() if k not in gone}
        overrides.update(validate_configs(name, set_, self.topic_defaults()))
        return validate_configs(name, overrides, self.topic_defaults())

    def alter_configs(
        self, name: str, set_: Mapping[str, str], delete: list[str]
    ) -> tuple[Topic, list[Effect]]:
        topic = self.topic(name)
        overrides = self.check_alter_configs(name, set_, delete)
        record = jr.TopicConfig(name, overrides)
        self._apply_topic_config(record)
        return topic, [Journal((record,))]

    def _apply_topic_config(self, record: jr.TopicConfig) -> None:
        topic = self.topics[record.name]
        topic.overrides = dict(record.configs)
        topic.config = TopicConfig.from_overrides(topic.overrides, topic.defaults)

    # -- broker and group configs ------------------------------------------------

    def alter_broker_configs(
        self, level: str, set_: Mapping[str, str], delete: Iterable[str], *, replace: bool = False
    ) -> list[Effect]:
        """A BROKER resource's dynamic configs ("": the cluster default; the
        broker's id: its own): set these, delete those (`replace`: the level
        becomes exactly `set_`, Kafka's AlterConfigs). Every topic that does
        not set a topic config takes the new default at once (a refusal, if a
        topic's settings no longer combine with it, changes nothing)."""
        configs = self.check_broker_configs(level, set_, delete, replace=replace)
        record = jr.BrokerConfig(level, configs)
        self._apply_broker_config(record)
        return [Journal((record,))]

    def check_broker_configs(
        self, level: str, set_: Mapping[str, str], delete: Iterable[str], *, replace: bool = False
    ) -> dict[str, str]:
        """Every check of `alter_broker_configs`; returns the level's configs
        as they would be."""
        if level not in (CLUSTER_DEFAULT, str(BROKER_ID)):
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                f"broker {level!r}",
                f"broker {level!r} does not exist; the cluster's only broker is {BROKER_ID} "
                "(or '' for the cluster-wide default)",
            )
        gone = set(delete)
        configs = {} if replace else self.broker_configs.level(level)
        configs = {k: v for k, v in configs.items() if k not in gone}
        configs.update(validate_broker_configs(level, set_))
        trial = BrokerConfigs()
        trial.static = dict(self.broker_configs.static)
        trial.levels = {**self.broker_configs.levels, level: configs}
        defaults = trial.topic_defaults(str(BROKER_ID))
        for topic in self.topics.values():
            validate_configs(topic.name, topic.overrides, defaults)
        return configs

    def _apply_broker_config(self, record: jr.BrokerConfig) -> None:
        self.broker_configs.set_level(record.broker, record.configs)
        defaults = self.topic_defaults()
        for topic in self.topics.values():
            topic.defaults = defaults
            topic.config = TopicConfig.from_overrides(topic.overrides, defaults)

    def alter_group_configs(
        self, group: str, set_: Mapping[str, str], delete: Iterable[str], *, replace: bool = False
    ) -> list[Effect]:
        """A GROUP resource's configs (KIP-848's: stored and described)."""
        configs = self.check_group_configs(group, set_, delete, replace=replace)
        record = jr.GroupConfig(group, configs)
        self._apply_group_config(record)
        return [Journal((record,))]

    def check_group_configs(
        self, group: str, set_: Mapping[str, str], delete: Iterable[str], *, replace: bool = False
    ) -> dict[str, str]:
        if not group:
            raise ClusterError(
                ErrorCode.INVALID_GROUP_ID, "group ''", "a group config needs a group id"
            )
        self.check_group_writable(group, "alter the configs of")
        gone = set(delete)
        configs = {} if replace else dict(self.group_configs.get(group, {}))
        configs = {k: v for k, v in configs.items() if k not in gone}
        configs.update(set_)
        return validate_group_configs(group, configs)

    def _apply_group_config(self, record: jr.GroupConfig) -> None:
        if record.configs:
            self.group_configs[record.group] = dict(record.configs)
        else:
            self.group_configs.pop(record.group, None)

    def check_create_partitions(self, name: str, total: int) -> int:
        """Every check of `create_partitions`, changing nothing; returns the
        current partition count."""
        topic = self.topic(name)
        self.check_client_write(ResourceType.TOPIC, name, "add partitions to")
        validate_partition_count(name, total)
        current = len(topic.partitions)
        if total <= current:
            raise ClusterError(
                ErrorCode.INVALID_PARTITIONS,
                f"topic {name!r}",
                f"topic {name!r} has {current} partitions; the new count {total} must be larger",
            )
        return current

    def create_partitions(self, name: str, total: int) -> tuple[Topic, list[Effect]]:
        topic = self.topic(name)
        current = self.check_create_partitions(name, total)
        record = jr.TopicPartitions(name, total)
        self._apply_topic_partitions(record)
        return topic, [
            CreateLogs(topic.topic_id, tuple(range(current, total)), topic.config.segment_bytes),
            Journal((record,)),
        ]

    def _apply_topic_partitions(self, record: jr.TopicPartitions) -> None:
        topic = self.topics[record.name]
        for p in range(len(topic.partitions), record.partitions):
            topic.partitions.append(PartitionLog(topic.name, p))
        self.logs_replaced()

    def logs_replaced(self) -> None:
        """Topics came or went, a topic grew, or a partition's log was
        replaced: what was kept of them by topic id or by log is stale."""
        self._names_by_id = None
        self.log_feed.relayout()
        self.topics_with_gaps &= self.topics.keys()

    # -- produce --------------------------------------------------------------

    def produce(
        self, topic_name: str, partition: int, batch: bytes, transactional_id: str, now_ms: int
    ) -> ProduceResult:
        log = self.partition(topic_name, partition)
        topic = self.topics[topic_name]
        self.check_client_write(ResourceType.TOPIC, topic_name, "produce to")
        try:
            header = rb.check_single_batch(batch)
        except rb.CorruptBatchError as exc:
            raise ClusterError(
                ErrorCode.CORRUPT_MESSAGE, log.name, f"partition {log.name}: {exc}"
            ) from exc
        if header.is_transactional:
            if not transactional_id:
                raise ClusterError(
                    ErrorCode.INVALID_TXN_STATE,
                    log.name,
                    f"partition {log.name}: transactional batch without a transactional id",
                )
            self.txn.check_produce(
                transactional_id, header.producer_id, header.producer_epoch, (topic_name, partition)
            )
        plan = log.check_append(header, max_message_bytes=topic.config.max_message_bytes)
        try:
            rb.check_records(
                batch,
                max_decompressed=topic.config.max_message_bytes,
                produced=True,
                require_keys=topic.config.compact,
                timestamp_range=timestamp_range(topic.config, now_ms),
            )
        except rb.CorruptBatchError as exc:
            raise refused_batch(exc, log.name, f"partition {log.name}") from exc
        if plan.duplicate:
            return ProduceResult(plan.base_offset, True, log.log_start_offset, -1, ())
        codec = topic.config.compression
        if codec is not None and header.compression != codec and not header.is_control:
            batch = rb.recompressed(batch, codec)  # compression.type, as Kafka applies it
            if len(batch) > topic.config.max_message_bytes:
                raise ClusterError(
                    ErrorCode.RECORD_TOO_LARGE,
                    log.name,
                    f"partition {log.name}: the batch takes {len(batch)} bytes recompressed "
                    f"for compression.type, above max.message.bytes="
                    f"{topic.config.max_message_bytes}",
                )
        append_time = -1
        if topic.config.log_append_time:
            batch = rb.with_log_append_time(batch, now_ms)
            append_time = now_ms
        stamped = rb.with_offset_and_epoch(batch, plan.base_offset, log.leader_epoch)
        stamped_header = rb.parse_header(stamped)
        effects: tuple[Effect, ...] = (
            self.append(topic, partition, stamped, stamped_header, now_ms),
        )
        return ProduceResult(plan.base_offset, False, log.log_start_offset, append_time, effects)

    def made_durable(self, marks: list[tuple[str, int, int]]) -> Wake | None:
        """The shell made these (topic, partition) durable up to these
        offsets: high watermarks move as far as their limits allow. Returns
        who must be woken: the partitions whose HW moved, and those whose
        durable records a SYNC follower holds back (it must fetch them to
        acknowledge them); None when nobody."""
        anywhere = bool(self.marker_groups)
        moved: list[tuple[str, int]] = []
        for name, partition, offset in marks:
            topic = self.topics.get(name)
            if topic is None or partition >= len(topic.partitions):
                continue
            if self.mark_durable(name, partition, offset) or topic.partitions[partition].held_back:
                moved.append((name, partition))
        if not moved:
            return None
        return Wake(None if anywhere else tuple(moved))

    def mark_durable(self, topic_name: str, partition: int, offset: int) -> bool:
        topic = self.topics.get(topic_name)
        if topic is None or partition >= len(topic.partitions):
            return False
        log = topic.partitions[partition]
        log.raise_durable(offset)
        moved = log.advance_high_watermark(self._hw_limit(topic_name, partition))
        if self.marker_groups:
            moved |= self._release_marker_groups((topic_name, partition))
        return moved

    def _hw_candidate(self, topic_name: str, partition: int) -> int:
        """How far the partition's HW could go, marker groups aside."""
        log = self.topics[topic_name].partitions[partition]
        candidate = log.durable_offset
        if log.hw_cap is not None:
            candidate = min(candidate, log.hw_cap)
        floor = self.links.sync_floor(topic_name, partition)
        return candidate if floor is None else min(candidate, floor)

    def _live_members(self, group: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Members still pending: the partition exists and still holds the
        marker (a truncation or deletion drops a member, never blocks others)."""
        live = {}
        for (t, p), marker in group.items():
            topic = self.topics.get(t)
            if topic is None or p >= len(topic.partitions):
                continue
            log = topic.partitions[p]
            if marker < log.log_end_offset and log.high_watermark <= marker:
                live[(t, p)] = marker
        return live

    def _hw_limit(self, topic_name: str, partition: int) -> int | None:
        limit = self.links.sync_floor(topic_name, partition)
        for group in self.marker_groups:
            marker = group.get((topic_name, partition))
            if marker is None:
                continue
            live = self._live_members(group)
            if (topic_name, partition) in live and not all(
                self._hw_candidate(t, p) > m for (t, p), m in live.items()
            ):
                limit = marker if limit is None else min(limit, marker)
        return limit

    def _release_marker_groups(self, touched: tuple[str, int] | None = None) -> bool:
        """Moves the HWs of every member of each marker group that can now pass
        as a whole; forgets groups with no member pending."""
        moved = False
        kept = []
        for group in self.marker_groups:
            if touched is not None and touched not in group:
                kept.append(group)
                continue
            live = self._live_members(group)
            if live and all(self._hw_candidate(t, p) > m for (t, p), m in live.items()):
                for t, p in sorted(live):
                    log = self.topics[t].partitions[p]
                    moved |= log.advance_high_watermark(self._hw_limit(t, p))
                live = self._live_members(group)
            if live:
                kept.append(group)
        self.marker_groups = kept
        return moved

    def refresh_high_watermarks(self) -> bool:
        """Moves every held-back HW as far as its limits now allow: a SYNC
        follower acknowledged, a link left IN_SYNC or went ASYNC, or a follower
        topic stopped following (failover, detach: its source cap is lifted).
        Returns whether any HW moved."""
        moved = False
        for name in sorted(self.topics):
            topic = self.topics[name]
            following: bool | None = None
            for p, log in enumerate(topic.partitions):
                if not log.held_back:
                    continue
                if log.hw_cap is not None:
                    if following is None:
                        following = self.is_follower_topic(name)
                    if not following:
                        log.hw_cap = None
                moved |= log.advance_high_watermark(self._hw_limit(name, p))
        if self.marker_groups:
            moved |= self._release_marker_groups()
        return moved

    def is_follower_topic(self, name: str) -> bool:
        return any(
            config.mapping_for(name, "follower") is not None
            for config in self.links.configs.values()
        )

    def refresh_led_partitions(self, now_ms: int) -> None:
        """Registers, for every link, the partitions this cluster leads on it, so
        that one its follower never fetched still counts (as not caught up: a
        SYNC link is not IN_SYNC, an ASYNC link not FOLLOWING once it is silent)."""
        for gone in self._led.keys() - self.links.configs.keys():
            del self._led[gone]
        for name in sorted(self.links.configs):
            config = self.links.configs[name]
            led: AbstractSet[tuple[str, int]] = frozenset()
            runtime = self.links.runtime.get(name)
            leads = any(
                m.attached and m.local_role == Role.LEADER and m.resource_type == MappingType.TOPIC
                for m in config.mappings.values()
            )
            if not leads and (runtime is None or not runtime.led_partitions):
                continue
            if leads:
                led = self.led_under(config)
            self.links.register_led_partitions(name, led, now_ms)

    def led_under(self, config: LinkConfig) -> frozenset[tuple[str, int]]:
        """The partitions this cluster leads under a link's configuration
        (kept until its mappings or the cluster's layout of logs change)."""
        mappings = tuple(config.mappings.items())
        layout = self.log_feed.layout
        kept = self._led.get(config.name)
        if kept is not None and kept[1] == layout and kept[0] == mappings:
            return kept[2]
        led: set[tuple[str, int]] = set()
        for topic_name in sorted(self.topics):
            if config.mapping_for(topic_name, "leader") is not None:
                topic = self.topics[topic_name]
                led.update(zip(itertools.repeat(topic_name), range(len(topic.partitions))))
        self._led[config.name] = (mappings, layout, frozenset(led))
        return self._led[config.name][2]

    def wait_marks(self, targets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], WaitMark]:
        """What a write waiting on these high watermarks wrote, as it begins
        to wait: the topic's id and the last batch below each target (for
        `unmet_high_watermarks`)."""
        out: dict[tuple[str, int], WaitMark] = {}
        for (t, p), target in targets.items():
            topic = self.topics.get(t)
            if topic is None or p >= len(topic.partitions):
                continue
            batch = topic.partitions[p].batch_containing(target - 1)
            out[(t, p)] = WaitMark(
                topic.topic_id,
                batch.base_offset if batch is not None else -1,
                batch.crc if batch is not None else 0,
            )
        return out

    def write_marks(
        self, effects: Iterable[Effect]
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], WaitMark]]:
        """For a write that waits on its high watermarks (an acks=all produce,
        a commit's markers): from its appends, the target of each partition
        (the end of its last batch) and what it wrote there."""
        names = self.topic_names_by_id()
        targets: dict[tuple[str, int], int] = {}
        marks: dict[tuple[str, int], WaitMark] = {}
        for e in effects:
            if isinstance(e, AppendBatch) and e.topic_id in names:
                key = (names[e.topic_id], e.partition)
                targets[key] = e.header.next_offset
                marks[key] = WaitMark(e.topic_id, e.header.base_offset, e.header.crc)
        return targets, marks

    def unmet_high_watermarks(
        self,
        targets: Mapping[tuple[str, int], int],
        marks: Mapping[tuple[str, int], WaitMark],
        what: str,
    ) -> list[tuple[str, int, int]]:
        """The partitions whose HW has not reached its target yet, for a write
        waiting on them (an acks=all produce, a commit's markers). Raises when
        what it wrote is gone meanwhile, so it is never acknowledged:
        UNKNOWN_TOPIC when its topic was deleted (perhaps created again: the
        id differs from `marks`), DIVERGED_LOG when its batch was cut (the
        partition diverged from a source it now follows)."""
        pending = []
        for (t, p), target in sorted(targets.items()):
            topic = self.topics.get(t)
            mark = marks.get((t, p))
            if topic is None or mark is None or topic.topic_id != mark.topic_id:
                raise ClusterError(
                    ErrorCode.UNKNOWN_TOPIC,
                    f"{t}-{p}",
                    f"{what}: topic {t!r} was deleted while the write waited for its high "
                    "watermark; its records went with it",
                )
            log = topic.partitions[p]
            if mark.base_offset >= 0:
                batch = log.batch_at(mark.base_offset)
                if batch is None or batch.crc != mark.crc:
                    raise ClusterError(
                        ErrorCode.DIVERGED_LOG,
                        f"{t}-{p}",
                        f"{what}: the records at {t}-{p} offset {mark.base_offset} were cut "
                        "while the write waited for its high watermark (the partition "
                        "diverged from a source it follows now); they are not stored",
                    )
            if log.high_watermark < target:
                pending.append((t, p, target))
        return pending

    def led_position(self, topic_name: str, partition: int) -> tuple[int, int] | None:
        """(log start offset, high watermark) of a partition, None when gone."""
        logs = self.led_logs(topic_name)
        if logs is None or partition >= len(logs):
            return None
        return logs[partition].log_start_offset, logs[partition].high_watermark

    def led_logs(self, topic_name: str) -> list[PartitionLog] | None:
        """A topic's partition logs, None when the topic is gone (the link
        table judges the followers of what this cluster leads by them)."""
        topic = self.topics.get(topic_name)
        return None if topic is None else topic.partitions

    def check_sync_commit(self, transactional_id: str) -> None:
        """Spec section 6: a transaction touching a topic or group namespace that
        this cluster leads on a SYNC link commits only while that link is IN_SYNC
        (refused while SYNCING, fails while OUT_OF_SYNC), retriably."""
        meta = self.txn.describe(transactional_id)
        if meta is None:
            return
        for topic_name in sorted({t for t, _ in meta.partitions}):
            for link, verdict in self.links.sync_links_leading(topic_name):
                if verdict is not LinkState.IN_SYNC:
                    raise ClusterError(
                        ErrorCode.LINK_NOT_IN_SYNC,
                        f"topic {topic_name!r}",
                        f"cannot commit transaction {transactional_id!r}: topic "
                        f"{topic_name!r} is led on SYNC link {link!r}, which is {verdict.value}; "
                        "commits wait until it is IN_SYNC (the transaction stays open: retry "
                        "the commit or abort)",
                    )
        for group_id in sorted(meta.groups):
            for link in sorted(self.links.configs):
                config = self.links.configs[link]
                runtime = self.links.runtime.get(link)
                if (
                    config.mode == LinkMode.SYNC
                    and runtime is not None
                    and config.mapping_for(group_id, "leader", "group") is not None
                    and runtime.local_sync is not LinkState.IN_SYNC
                ):
                    state = runtime.local_sync.value if runtime.local_sync else "SYNCING"
                    raise ClusterError(
                        ErrorCode.LINK_NOT_IN_SYNC,
                        f"group {group_id!r}",
                        f"cannot commit transaction {transactional_id!r}: the offsets of group "
                        f"{group_id!r} are led on SYNC link {link!r}, which is {state}; "
                        "commits wait until it is IN_SYNC",
                    )

    def check_client_read(self, topic_name: str, group_id: str = "") -> None:
        """Spec section 6: while a SYNC link is SYNCING, reads of its follower
        topics are refused (retriably) except for the link's replicated groups."""
        link = self.links.syncing_follower_link(topic_name)
        if link is None:
            return
        config = self.links.configs[link]
        if group_id and config.mapping_for(group_id, "follower", "group") is not None:
            return
        who = f"group {group_id!r}" if group_id else "a reader outside the link's groups"
        raise ClusterError(
            ErrorCode.FOLLOWER_SYNCING,
            f"topic {topic_name!r}",
            f"cannot read topic {topic_name!r} as {who}: it follows SYNC link {link!r}, "
            "which is SYNCING; reads resume once it is IN_SYNC",
        )

    # -- read -----------------------------------------------------------------

    def plan_fetch(
        self,
        topic_name: str,
        partition: int,
        offset: int,
        read_committed: bool,
        group_id: str = "",
    ) -> FetchPlan:
        log = self.partition(topic_name, partition)
        self.check_client_read(topic_name, group_id)
        return log.plan_fetch(offset, read_committed)

    def list_offsets(
        self, topic_name: str, partition: int, spec: str, timestamp: int, read_committed: bool
    ) -> OffsetLookup:
        log = self.partition(topic_name, partition)
        upper = log.last_stable_offset if read_committed else log.high_watermark
        if spec == "earliest":
            return OffsetLookup(log.log_start_offset, -1, log.epoch_at(log.log_start_offset))
        if spec == "latest":
            return OffsetLookup(upper, -1, log.leader_epoch)
        if spec == "timestamp":
            entry = log.find_timestamp_batch(timestamp, upper)
            if entry is None:
                return OffsetLookup(-1, -1, -1)
            return OffsetLookup(
                entry.base_offset,
                entry.max_timestamp,
                log.epoch_at(entry.base_offset),
                entry.base_offset,
            )
        if spec == "max_timestamp":
            entry = log.max_timestamp_batch(upper)
            if entry is None:
                return OffsetLookup(-1, -1, -1)
            return OffsetLookup(
                entry.base_offset,
                entry.max_timestamp,
                log.epoch_at(entry.base_offset),
                entry.base_offset,
            )
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            log.name,
            f"partition {log.name}: unknown offset spec {spec!r}",
        )

    def delete_records(
        self, topic_name: str, partition: int, offset: int
    ) -> tuple[int, list[Effect]]:
        """Kafka's DeleteRecords: moves the log start offset (-1: to the HW)."""
        log = self.partition(topic_name, partition)
        self.check_client_write(ResourceType.TOPIC, topic_name, "delete records of")
        target = log.high_watermark if offset == -1 else offset
        if target < 0:
            raise ClusterError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                log.name,
                f"partition {log.name}: cannot delete records before {offset}",
            )
        before = log.log_start_offset
        log.advance_log_start(target)
        if log.log_start_offset > before:
            self.log_start_causes[(topic_name, partition)] = "deleted records"
        return log.log_start_offset, self._log_start_effects(topic_name, log)

    def _log_start_effects(
        self, topic_name: str, log: PartitionLog, *, roll: bool = False
    ) -> list[Effect]:
        topic = self.topics[topic_name]
        record = jr.LogStart(topic_name, log.partition, log.log_start_offset)
        return [
            Journal((record,)),
            DeleteBelow(topic.topic_id, log.partition, log.log_start_offset, roll=roll),
        ]

    # -- idempotent and transactional producers ---------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int, list[Effect]]:
        pid, epoch, pending, records = self.txn.init_producer_id(
            transactional_id, timeout_ms, now_ms, expected
        )
        effects = _journal(records)
        if pending is not None:
            effects += self._complete(pending, now_ms)
        return pid, epoch, effects

    def add_partitions_to_txn(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        now_ms: int,
    ) -> list[Effect]:
        for topic_name, p in partitions:
            self.partition(topic_name, p)
            self.check_client_write(ResourceType.TOPIC, topic_name, "add to a transaction")
        return _journal(
            self.txn.add_partitions(transactional_id, producer_id, epoch, partitions, now_ms)
        )

    def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str, now_ms: int
    ) -> list[Effect]:
        if not group_id:
            raise ClusterError(ErrorCode.INVALID_GROUP_ID, "group ''", "group id is empty")
        self.check_group_writable(group_id)
        return _journal(
            self.txn.add_offsets(transactional_id, producer_id, epoch, group_id, now_ms)
        )

    def txn_offset_commit(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        epoch: int,
        offsets: dict[tuple[str, int], tuple[int, str, int]],
        now_ms: int,
    ) -> list[Effect]:
        self.txn.check_offsets_in_txn(transactional_id, producer_id, epoch, group_id)
        self.check_group_writable(group_id)
        for topic_name, p in offsets:
            self.partition(topic_name, p)
        return _journal(self.groups.stage_txn_offsets(producer_id, group_id, offsets, now_ms))

    def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool, now_ms: int
    ) -> list[Effect]:
        if commit:
            self.check_sync_commit(transactional_id)
        completion, records = self.txn.end_txn(transactional_id, producer_id, epoch, commit)
        effects = _journal(records)
        if completion is not None:
            effects += self._complete(completion, now_ms)
        return effects

    def _complete(self, completion: TxnCompletion, now_ms: int) -> list[Effect]:
        """Markers on every partition where the producer has an open transaction,
        then the group offsets, then the coordinator's completion record."""
        effects: list[Effect] = []
        markers: dict[tuple[str, int], int] = {}
        marker = rb.CONTROL_COMMIT if completion.commit else rb.CONTROL_ABORT
        for topic_name, p in completion.partitions:
            topic = self.topics.get(topic_name)
            if topic is None or p >= len(topic.partitions):
                continue  # deleted meanwhile: nothing to mark
            log = topic.partitions[p]
            if not log.has_open_txn(completion.producer_id):
                continue
            batch = rb.build_control_batch(
                marker=marker,
                producer_id=completion.producer_id,
                producer_epoch=completion.producer_epoch,
                timestamp=now_ms,
                base_offset=log.log_end_offset,
                partition_leader_epoch=log.leader_epoch,
            )
            header = rb.parse_header(batch)
            effects.append(self.append(topic, p, batch, header, now_ms, control_type=marker))
            markers[(topic_name, p)] = header.base_offset
        if completion.commit and len(markers) > 1:
            self.marker_groups.append(markers)
        records: list[jr.JournalRecord] = [
            *self.groups.end_txn_offsets(
                completion.producer_id, list(completion.groups), completion.commit, now_ms
            ),
            *self.txn.complete(completion),
        ]
        effects += _journal(records)
        return effects

    def recovery_completions(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for completion in self.txn.pending_completions():
            effects += self._complete(completion, now_ms)
        return effects

    # -- namespaces (spec sections 2 and 6) ------------------------------------

    def link_state(self, link_name: str) -> str:
        """The link's state name ("UNKNOWN" when there is no such link)."""
        return self.links.state_name(link_name)

    def check_client_write(self, resource_type: ResourceType, name: str, action: str) -> None:
        """Refuses a client's create, write, delete or commit into a reserved
        namespace (`action` reads "cannot {action} topic 'x'"). A name in a
        namespace that follows a link: FOLLOWER_TOPIC_NOT_WRITABLE (topics) or
        REPLICATED_GROUP_READ_ONLY (groups), naming the link and its state;
        otherwise RESERVED_NAMESPACE. Replication's own writes do not come here."""
        reserved = [ns for ns in self.namespaces.matching(resource_type, name) if ns.reserved]
        if not reserved:
            return
        ns = next((n for n in reserved if n.follower_link is not None), reserved[0])
        what = f"{resource_type.label} {name!r}"
        link = ns.follower_link
        if link is not None and resource_type is ResourceType.TOPIC:
            raise ClusterError(
                ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE,
                ns.name,
                f"cannot {action} {what}: it is a follower topic of link {link!r} "
                f"(state {self.link_state(link)}) in the reserved {ns.name}; only the link "
                "writes to it",
            )
        if link is not None and resource_type is ResourceType.GROUP:
            raise ClusterError(
                ErrorCode.REPLICATED_GROUP_READ_ONLY,
                ns.name,
                f"cannot {action} {what}: link {link!r} (state {self.link_state(link)}) "
                f"replicates its offsets into the reserved {ns.name}; they are read-only until "
                "the link is deleted or the namespace is detached and un-reserved",
            )
        following = f" (it follows link {link!r}, state {self.link_state(link)})" if link else ""
        raise ClusterError(
            ErrorCode.RESERVED_NAMESPACE,
            ns.name,
            f"cannot {action} {what}: {ns.name} is reserved{following}; only replication "
            "may write into it",
        )

    def check_group_writable(self, group_id: str, action: str = "commit offsets of") -> None:
        """`check_client_write` for a consumer group (commits, offset and group deletes)."""
        self.check_client_write(ResourceType.GROUP, group_id, action)

    def commit_group_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, str, int]],
        now_ms: int,
    ) -> list[Effect]:
        """A client's offset commit ((offset, metadata, leader epoch) per
        partition): refused into a replicated or reserved group namespace and
        for a partition that does not exist; else applied, with the journal
        records that make it durable (carry them out before answering)."""
        self.check_group_writable(group_id)
        for topic, partition in offsets:
            self.partition(topic, partition)
        records = self.groups.commit_offsets(group_id, generation_id, member_id, offsets, now_ms)
        return _journal(records)

    def delete_group(self, group_id: str) -> list[Effect]:
        """A client's DeleteGroups: refused in a replicated or reserved group
        namespace, or while the group has members."""
        self.check_group_writable(group_id, "delete")
        return _journal(self.groups.delete_group(group_id))

    def delete_group_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[Effect]:
        """A client's OffsetDelete (refused as `delete_group` is, and while the
        group has members)."""
        self.check_group_writable(group_id, "delete offsets of")
        return _journal(self.groups.delete_offsets(group_id, partitions))

    def create_namespace(
        self, resource_type: ResourceType | int, prefix: str, reserved: bool = False
    ) -> list[Effect]:
        """An operator's create-namespace (spec section 2)."""
        return _journal(self.namespaces.create(resource_type, prefix, reserved))

    def delete_namespace(self, resource_type: ResourceType | int, prefix: str) -> list[Effect]:
        """An operator's delete-namespace: refused while it is attached to a link."""
        return _journal(self.namespaces.delete(resource_type, prefix))

    def namespace_resources(self, resource_type: ResourceType | int, prefix: str) -> list[str]:
        """The topic names or group ids (groups the coordinator knows: members or
        committed offsets) in the namespace now, sorted. Principals are not
        tracked: none."""
        ns = self.namespaces.get(resource_type, prefix)
        if ns.type is ResourceType.TOPIC:
            return sorted(name for name in self.topics if ns.contains(name))
        if ns.type is ResourceType.GROUP:
            return sorted(g for g, _state, _ptype in self.groups.list_groups() if ns.contains(g))
        return []

    # -- ACLs -----------------------------------------------------------------

    def create_acls(
        self, bindings: list[AclBinding]
    ) -> tuple[list[ClusterError | None], list[Effect]]:
        """Per binding: None (created, or already there) or its refusal."""
        results, records = self.acls.create(bindings)
        return results, _journal(records)

    def delete_acls(
        self, filters: list[AclFilter]
    ) -> tuple[list[list[AclBinding] | ClusterError], list[Effect]]:
        """Per filter: the bindings it removed, or its refusal."""
        results, records = self.acls.delete(filters)
        return results, _journal(records)

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return self.acls.describe(acl_filter)

    # -- SCRAM users ------------------------------------------------------------

    def alter_scram_credentials(
        self, deletions: list[Deletion], upsertions: list[Upsertion]
    ) -> tuple[dict[str, UserError | None], list[Effect]]:
        """Per user named: None (applied) or its refusal (nothing of it applied)."""
        results, records = self.users.alter(deletions, upsertions)
        return results, _journal(records)

    def set_user_password(
        self, name: str, password: str, salts: dict[ScramMechanism, bytes], iterations: int
    ) -> list[Effect]:
        """--sasl-users: nothing when the stored credentials already verify it."""
        return _journal(self.users.set_password(name, password, salts, iterations))

    # -- time -----------------------------------------------------------------

    def tick(self, now_ms: int) -> list[Effect]:
        """Transaction timeouts, and retention when its check is due.
        (Group timers: groups.tick.)"""
        completions, records = self.txn.expired(now_ms)
        effects = _journal(records)
        for completion in completions:
            effects += self._complete(completion, now_ms)
        if self.next_retention_check_ms is None:
            self.next_retention_check_ms = now_ms + self.retention_check_interval_ms
        if now_ms >= self.next_retention_check_ms:
            self.next_retention_check_ms = now_ms + self.retention_check_interval_ms
            effects += self.enforce_retention(now_ms)
        return effects

    def enforce_retention(self, now_ms: int) -> list[Effect]:
        """One retention check (Kafka's LogManager.cleanupLogs): every topic
        whose cleanup.policy holds delete loses the whole segments retention
        asks for (`PartitionLog.retention_cut`); the active segment goes too
        once every record in it is due, after an empty one is started."""
        effects: list[Effect] = []
        for topic in list(self.topics.values()):
            if not topic.config.delete:
                continue  # cleanup.policy=compact: the log cleaner alone removes records
            rule = self.segment_rule(topic)
            for log in topic.partitions:
                cut = log.retention_cut(
                    now_ms, topic.config.retention_ms, topic.config.retention_bytes
                )
                if cut is None:
                    continue
                target, every_segment = cut
                if every_segment:
                    log.roll_empty(now_ms, rule)
                log.advance_log_start(target)
                self.log_start_causes[(topic.name, log.partition)] = "retention"
                effects += self._log_start_effects(topic.name, log, roll=every_segment)
        return effects

    def next_txn_deadline_ms(self) -> int | None:
        return self.txn.next_deadline_ms()

    def next_deadline_ms(self) -> int | None:
        """When a timer of this cluster is next due (None: none is armed): a
        group's join, sync or session deadline, a transaction's timeout, the
        next retention check. A shell calls `tick` and `groups.tick` at that
        time (not on a cadence), so a deadline a client computes to the
        millisecond is met."""
        found = [
            self.groups.next_deadline_ms(),
            self.txn.next_deadline_ms(),
            self.next_retention_check_ms,
        ]
        return min((d for d in found if d is not None), default=None)

    # -- durability -------------------------------------------------------------

    def apply_record(self, record: jr.JournalRecord) -> None:
        """Applies one journal record: replayed after a restart (what it
        records happened: no rule is checked), or applied where it is made."""
        match record:
            case jr.TopicCreate():
                self._apply_topic_create(record)
            case jr.TopicDelete():
                self.topics.pop(record.name, None)
                self.logs_replaced()
            case jr.TopicConfig():
                self._apply_topic_config(record)
            case jr.TopicPartitions():
                self._apply_topic_partitions(record)
            case jr.Provenance():
                topic = self.topics.get(record.name)
                if topic is not None:
                    entry = ProvenanceItem.from_entry(record.entry)
                    topic.provenance.setdefault(record.partition, []).append(entry)
                    if entry.kind is ProvenanceKind.GAP:
                        self.topics_with_gaps.add(topic.name)
            case jr.LeaderEpoch():
                topic = self.topics.get(record.name)
                if topic is not None:
                    bump = (record.epoch, record.start)
                    topic.epoch_bumps.setdefault(record.partition, []).append(bump)
                    log = topic.partitions[record.partition]
                    if log.log_end_offset >= bump[1]:
                        log.bump_epoch(*bump)
            case jr.EpochsCut():
                topic = self.topics.get(record.name)
                if topic is not None and record.partition in topic.epoch_bumps:
                    topic.epoch_bumps[record.partition] = [
                        b for b in topic.epoch_bumps[record.partition] if b[1] < record.offset
                    ]
            case jr.LogStart():
                topic = self.topics.get(record.name)
                if topic is not None:
                    log = topic.partitions[record.partition]
                    log.set_log_start(max(log.log_start_offset, record.offset))
            case jr.PidBlock() | jr.Txn():
                self.txn.apply_record(record)
            case jr.AclCreate() | jr.AclDelete():
                self.acls.apply_record(record)
            case jr.ScramUpsert() | jr.ScramDelete():
                self.users.apply_record(record)
            case jr.BrokerConfig():
                self._apply_broker_config(record)
            case jr.GroupConfig():
                self._apply_group_config(record)
            case jr.LinkConfigRecord() | jr.LinkDelete() | jr.LinkRemovalTold():
                self.links.apply_record(record)
            case jr.MirrorLinkCreate() | jr.MirrorLinkDelete():
                self.mirror_links.apply_record(record)
            case jr.ProcedurePlan():
                self.plans.apply_record(record)
            case jr.NsCreate() | jr.NsReserved() | jr.NsDelete() | jr.NsAttach() | jr.NsDetach():
                self.namespaces.apply_record(record)
            case (
                jr.OffsetCommit()
                | jr.OffsetDelete()
                | jr.GroupDelete()
                | jr.TxnOffsetStage()
                | jr.TxnOffsetEnd()
            ):
                self.groups.apply_record(record)
            case _:
                assert_never(record)

    def snapshot(self) -> dict[str, object]:
        return {
            "cluster_id": self.cluster_id,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partitions": len(t.partitions),
                    "configs": t.overrides,
                    "log_start": [log.log_start_offset for log in t.partitions],
                    "epoch_bumps": {
                        str(p): [list(b) for b in bumps]
                        for p, bumps in sorted(t.epoch_bumps.items())
                    },
                    "provenance": {
                        str(p): [e.to_entry() for e in entries]
                        for p, entries in sorted(t.provenance.items())
                    },
                }
                for t in self.topics.values()
            ],
            "txn": self.txn.snapshot(),
            "groups": self.groups.snapshot(),
            "acls": self.acls.snapshot(),
            "users": self.users.snapshot(),
            "links": self.links.snapshot(),
            "mirror_links": self.mirror_links.snapshot(),
            "namespaces": self.namespaces.snapshot(),
            "plans": self.plans.snapshot(),
            "broker_configs": {
                level: dict(c) for level, c in sorted(self.broker_configs.levels.items())
            },
            "group_configs": {g: dict(c) for g, c in sorted(self.group_configs.items())},
        }

    def restore(self, snapshot: dict[str, object]) -> None:
        # Broker configs first: the topics take their defaults from them.
        for level, configs in jr.json_object(snapshot.get("broker_configs", {})).items():
            self.broker_configs.set_level(
                level, {str(k): str(v) for k, v in jr.json_object(configs).items()}
            )
        for group, configs in jr.json_object(snapshot.get("group_configs", {})).items():
            self.group_configs[group] = {str(k): str(v) for k, v in jr.json_object(configs).items()}
        for t in map(jr.json_object, jr.json_list(snapshot["topics"])):
            configs = {str(k): str(v) for k, v in jr.json_object(t["configs"]).items()}
            topic = self._apply_topic_create(
                jr.TopicCreate(
                    str(t["name"]), str(t["topic_id"]), jr.json_int(t["partitions"]), configs
                )
            )
            for log, start in zip(topic.partitions, jr.json_list(t["log_start"]), strict=True):
                log.set_log_start(jr.json_int(start))
            for p, entries in jr.json_object(t.get("provenance", {})).items():
                topic.provenance[int(p)] = [
                    ProvenanceItem.from_entry(jr.json_object(e)) for e in jr.json_list(entries)
                ]
                if any(e.kind is ProvenanceKind.GAP for e in topic.provenance[int(p)]):
                    self.topics_with_gaps.add(topic.name)
            for p, bumps in jr.json_object(t.get("epoch_bumps", {})).items():
                topic.epoch_bumps[int(p)] = [
                    (jr.json_int(e), jr.json_int(st))
                    for e, st in map(jr.json_list, jr.json_list(bumps))
                ]
        self.txn = TransactionCoordinator.restore(jr.json_object(snapshot["txn"]))
        self.groups = GroupCoordinator.restore(
            self.groups_config, jr.json_object(snapshot["groups"])
        )
        if "acls" in snapshot:  # snapshots written before ACLs existed have none
            self.acls = AclStore.restore(jr.json_object(snapshot["acls"]))
        if "users" in snapshot:  # snapshots written before SCRAM users have none
            self.users = UserStore.restore(jr.json_object(snapshot["users"]))
        if "links" in snapshot:
            self.links.restore(jr.json_object(snapshot["links"]))
        if "mirror_links" in snapshot:  # snapshots written before mirror links have none
            self.mirror_links.restore(jr.json_list(snapshot["mirror_links"]))
        if "namespaces" in snapshot:  # snapshots written before namespaces have none
            self.namespaces.restore(jr.json_object(snapshot["namespaces"]))
        if "plans" in snapshot:  # snapshots written before durable plans have none
            self.plans.restore(jr.json_object(snapshot["plans"]))

    @property
    def groups_config(self) -> GroupConfig:
        return self.groups.config

    def recover_partition(
        self,
        topic_name: str,
        partition: int,
        batches: list[tuple[rb.BatchHeader, int | None]],
        segment_bases: Sequence[int] = (),
        now_ms: int = 0,
    ) -> None:
        """Rebuilds a partition from the batches found on disk (with the marker
        type of control batches) and the segments they lie in (`segment_bases`:
        where the shell's segments start; none: one segment). Everything on
        disk is durable: HW = LEO."""
        topic = self.topics[topic_name]
        log_start = topic.partitions[partition].log_start_offset
        first = batches[0][0].base_offset if batches else log_start
        fresh = PartitionLog(topic_name, partition, log_start_offset=first)
        for header, marker in batches:
            fresh.apply_batch(header, marker, allow_gap=True)
        fresh.resegment(segment_bases or (first,), now_ms, self.segment_rule(topic))
        fresh.high_watermark = fresh.log_end_offset
        fresh.durable_offset = fresh.log_end_offset
        fresh.completing = []
        if log_start > fresh.log_start_offset:
            fresh.advance_log_start(min(log_start, fresh.log_end_offset))
        for epoch, start in topic.epoch_bumps.get(partition, []):
            if start <= fresh.log_end_offset:
                fresh.bump_epoch(epoch, start)
        topic.partitions[partition] = fresh
        self.logs_replaced()

    # -- faults (emulated, for tests and operators' rehearsals) --------------------------

    def unclean_election(
        self, topic_name: str, partition: int, truncate_to: int
    ) -> tuple[int, int, list[Effect]]:
        """Emulates an unclean leader election: the new leader lacked the tail
        of the log. Truncates to the batch boundary at or below `truncate_to`
        and bumps the leader epoch from there, so followers of the partition
        detect the divergence and truncate too (spec section 1). Returns
        (records removed, new leader epoch, effects)."""
        topic = self.topic(topic_name)
        log = self.partition(topic_name, partition)
        if truncate_to < log.log_start_offset or truncate_to > log.log_end_offset:
            raise ClusterError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                log.name,
                f"partition {log.name}: cannot truncate to {truncate_to}, outside the log "
                f"[{log.log_start_offset}, {log.log_end_offset}]",
            )
        boundary = log.log_start_offset
        for entry in log.batches:
            if entry.next_offset <= truncate_to:
                boundary = entry.next_offset
        boundary = max(boundary, log.log_start_offset)
        removed = log.log_end_offset - boundary
        effects: list[Effect] = []
        records: list[jr.JournalRecord] = []
        if boundary < log.log_end_offset:
            log.truncate_to(boundary)
            effects.append(TruncateLog(topic.topic_id, partition, boundary))
            records.append(self.cut_epochs(topic_name, partition, boundary))
        epoch = log.leader_epoch + 1
        records.append(jr.LeaderEpoch(topic_name, partition, epoch, boundary))
        topic.epoch_bumps.setdefault(partition, []).append((epoch, boundary))
        log.bump_epoch(epoch, boundary)
        effects.append(Journal(tuple(records)))
        return removed, epoch, effects

    def cut_epochs(self, topic_name: str, partition: int, offset: int) -> jr.EpochsCut:
        """A partition's log was cut at `offset`: the leader-epoch bumps
        recorded at or after it go (applied here; journal the record)."""
        record = jr.EpochsCut(topic_name, partition, offset)
        self.apply_record(record)
        return record

    # -- reservation hand-over (spec section 8: reversal and recovery) --------------------

    def abort_transactions_in(
        self, topic_prefixes: list[str], now_ms: int, group_prefixes: list[str] | None = None
    ) -> tuple[list[str], list[Effect]]:
        """Aborts every open transaction that touches a topic of these topic
        namespaces (or stages offsets of a group in these group namespaces), as
        a transaction timeout does: the producer's epoch is bumped (so it is
        fenced) and abort markers are written. Returns (the transactional ids
        aborted, effects)."""
        aborted: list[str] = []
        effects: list[Effect] = []
        groups = group_prefixes or []
        for transactional_id, meta in sorted(self.txn.txns.items()):
            if meta.state != TxnState.ONGOING:
                continue
            touched = [topic for topic, _p in meta.partitions]
            if not any(
                in_prefix(t, prefix) for t in touched for prefix in topic_prefixes
            ) and not any(in_prefix(g, prefix) for g in meta.groups for prefix in groups):
                continue
            records: list[jr.JournalRecord] = []
            if meta.producer_epoch < MAX_EPOCH - 1:
                meta.producer_epoch += 1
            completion = self.txn._prepare(meta, False, records)
            effects += _journal(records)
            effects += self._complete(completion, now_ms)
            aborted.append(transactional_id)
        return aborted, effects

    def dangling_transactions(
        self,
        topic_prefixes: list[str],
        only: set[tuple[str, int]] | None = None,
        from_offsets: dict[tuple[str, int], int] | None = None,
    ) -> list[DanglingTxn]:
        """Transactions open in a partition of these topic namespaces that no
        coordinator of this cluster owns: replicated from a source that will
        not send their outcome once the partition stops following it.
        `from_offsets`: only those that began at or above the partition's
        offset there."""
        owned = {
            (meta.producer_id, t, p)
            for meta in self.txn.txns.values()
            if meta.state
            in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
            for t, p in meta.partitions
        }
        out: list[DanglingTxn] = []
        for name in sorted(self.topics):
            if not any(in_prefix(name, prefix) for prefix in topic_prefixes):
                continue
            for p, log in enumerate(self.topics[name].partitions):
                if not log.ongoing_txns or (only is not None and (name, p) not in only):
                    continue
                low = from_offsets.get((name, p), 0) if from_offsets is not None else 0
                for pid, first in sorted(log.ongoing_txns.items()):
                    if (pid, name, p) not in owned and first >= low:
                        out.append(DanglingTxn(name, p, pid, first))
        return out

    def abort_dangling_transactions(
        self,
        topic_prefixes: list[str],
        now_ms: int,
        only: set[tuple[str, int]] | None = None,
        from_offsets: dict[tuple[str, int], int] | None = None,
    ) -> tuple[list[DanglingTxn], list[Effect]]:
        """Writes an abort marker for every dangling transaction of these topic
        namespaces (`dangling_transactions`), so read_committed readers move
        past it (spec invariant 11). Callers start a new leader epoch first, so
        the markers are told apart from the source's history."""
        dangling = self.dangling_transactions(topic_prefixes, only, from_offsets)
        effects: list[Effect] = []
        for d in dangling:
            topic = self.topics[d.topic]
            log = topic.partitions[d.partition]
            producer = log.producers.get(d.producer_id)
            batch = rb.build_control_batch(
                marker=rb.CONTROL_ABORT,
                producer_id=d.producer_id,
                producer_epoch=producer.producer_epoch if producer is not None else 0,
                timestamp=now_ms,
                base_offset=log.log_end_offset,
                partition_leader_epoch=log.leader_epoch,
            )
            header = rb.parse_header(batch)
            abort = rb.CONTROL_ABORT
            effects.append(
                self.append(topic, d.partition, batch, header, now_ms, control_type=abort)
            )
        return dangling, effects



def timestamp_range(config: TopicConfig, now_ms: int) -> tuple[int, int] | None:
    """The timestamps a produced record may carry: CreateTime records within
    message.timestamp.before.max.ms before and message.timestamp.after.max.ms
    after the broker's time (KIP-937); None for LogAppendTime, which stamps
    them."""
    if config.log_append_time:
        return None
    return now_ms - config.timestamp_before_max_ms, now_ms + config.timestamp_after_max_ms


def refused_batch(exc: rb.CorruptBatchError, resource: str, where: str) -> ClusterError:
    """The refusal of a batch that failed `rb.check_records` (on produce) or
    `rb.check_copied_batch` (on a follower):
    RECORD_TOO_LARGE for records too large decompressed, INVALID_TIMESTAMP
    for records whose timestamps are out of range, INVALID_RECORD for records
    that break another rule, CORRUPT_MESSAGE for bytes that do not parse. The
    records at fault travel as its record errors (KIP-467)."""
    record_errors: tuple[RecordError, ...] = ()
    if isinstance(exc, rb.DecompressedTooLargeError):
        code = ErrorCode.RECORD_TOO_LARGE
    elif isinstance(exc, rb.InvalidTimestampError):
        code, record_errors = ErrorCode.INVALID_TIMESTAMP, exc.record_errors
    elif isinstance(exc, rb.InvalidRecordError):
        code, record_errors = ErrorCode.INVALID_RECORD, exc.record_errors
    else:
        code = ErrorCode.CORRUPT_MESSAGE
    return ClusterError(code, resource, f"{where}: {exc}", record_errors=record_errors)

def pick_offset_in_batch(records: list[rb.Record], timestamp: int | None) -> tuple[int, int]:
    """Finishes a ListOffsets by timestamp (first record at or after `timestamp`)
    or by max timestamp (`timestamp` None): (offset, timestamp)."""
    if not records:
        return -1, -1
    if timestamp is None:
        best = max(records, key=lambda r: (r.timestamp, -r.offset))
        return best.offset, best.timestamp
    for record in records:
        if record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return -1, -1


__all__ = [
    "ACKS_ALL",
    "HW_WAIT_MAX_MS",
    "AbortedTxn",
    "AppendBatch",
    "ClusterState",
    "CreateLogs",
    "DanglingTxn",
    "DeleteBelow",
    "DeleteTopicData",
    "Effect",
    "FetchPlan",
    "Journal",
    "OffsetLookup",
    "ProduceResult",
    "ResetLog",
    "Topic",
    "TruncateLog",
    "Wake",
    "pick_offset_in_batch",
]
