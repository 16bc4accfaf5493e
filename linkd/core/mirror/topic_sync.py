"""Which topics MM2 mirrors, how it creates them, and how it syncs their configs and ACLs.

Rules (Kafka's MirrorSourceConnector: shouldReplicateTopic, isCycle,
computeAndCreateTopicPartitions, targetConfig, incrementalAlterConfigs,
syncTopicAcls, shouldReplicateAcl, targetAclBinding, targetAccessControlEntry):
- A source topic is mirrored to target T when the topic filter accepts it or it is
  a heartbeats topic, it is not internal, and T is not on its upstream chain.
- Every `refresh.topics.interval.seconds` (default 600): a mirrored topic missing
  on the target is created under its remote name with the source's partition
  count, `replication.factor` (default 2; -1 = the broker default) and the
  synced configs; a remote topic with fewer partitions than its source is grown
  to the source's count. Nothing is ever deleted or shrunk. The synced configs
  (`remote_topic_configs`: what config sync would SET) are part of the create,
  so the remote topic holds no record under the target's defaults: a record
  copied into a topic still at the default `retention.ms` is deleted there if
  its timestamp is older than that, before a later config sync could keep it.
- Config sync (`sync.topic.configs.enabled`, every `sync.topic.configs.interval.seconds`):
  entries that are read-only, sensitive, STATIC_BROKER_CONFIG or excluded by the
  config property filter are dropped. A DEFAULT_CONFIG entry is DELETEd on the
  target (the target's own default applies) unless `use.defaults.from=source`,
  in which case it is SET like every other entry (incrementalAlterConfigs).
- ACL sync (`sync.topic.acls.enabled`, every `sync.topic.acls.interval.seconds`):
  only LITERAL TOPIC bindings of mirrored topics are considered; ALLOW WRITE is
  dropped (only MM2 may write a remote topic); operation ALL becomes READ (Kafka
  maps ALL whatever the permission, so DENY ALL becomes DENY READ); the binding
  is renamed to the remote topic. Sync is add-only: bindings are created,
  never deleted.

Theory of operation: the shell lists topics, configs and ACLs on both clusters;
these functions return what to create, grow, alter and add.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from linkd.core.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from linkd.core.mirror.filters import ConfigPropertyFilter, TopicFilter
from linkd.core.mirror.policy import ReplicationPolicy

__all__ = [
    "REPLICATION_FACTOR_DEFAULT",
    "ConfigEntry",
    "ConfigSource",
    "NewRemoteTopic",
    "TopicConfigSync",
    "TopicPlan",
    "plan_acl_sync",
    "plan_remote_topics",
    "remote_topic_configs",
    "should_replicate_acl",
    "should_replicate_topic",
    "target_acl_binding",
    "target_config_sync",
]

REPLICATION_FACTOR_DEFAULT = 2


def should_replicate_topic(
    topic: str, *, policy: ReplicationPolicy, topic_filter: TopicFilter, target_alias: str
) -> bool:
    """MirrorSourceConnector.shouldReplicateTopic."""
    return (
        (topic_filter.should_replicate_topic(topic) or policy.is_heartbeats_topic(topic))
        and not policy.is_internal_topic(topic)
        and not policy.is_cycle(topic, target_alias)
    )


@dataclass(frozen=True, slots=True)
class NewRemoteTopic:
    name: str
    source_topic: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class TopicPlan:
    create: tuple[NewRemoteTopic, ...]
    # (remote topic, new total partition count)
    grow: tuple[tuple[str, int], ...]
    # (remote topic, target count, source count): MM2 never shrinks; reported only.
    more_partitions_on_target: tuple[tuple[str, int, int], ...]


def plan_remote_topics(
    source_partitions: Mapping[str, int],
    target_partitions: Mapping[str, int],
    *,
    source_alias: str,
    target_alias: str,
    policy: ReplicationPolicy,
    topic_filter: TopicFilter,
    replication_factor: int = REPLICATION_FACTOR_DEFAULT,
) -> TopicPlan:
    """computeAndCreateTopicPartitions: topics to create and grow on the target."""
    create: list[NewRemoteTopic] = []
    grow: list[tuple[str, int]] = []
    shrunk: list[tuple[str, int, int]] = []
    for topic in sorted(source_partitions):
        if not should_replicate_topic(
            topic, policy=policy, topic_filter=topic_filter, target_alias=target_alias
        ):
            continue
        count = source_partitions[topic]
        remote = policy.format_remote_topic(source_alias, topic)
        existing = target_partitions.get(remote)
        if existing is None:
            create.append(NewRemoteTopic(remote, topic, count, replication_factor))
        elif existing < count:
            grow.append((remote, count))
        elif existing > count:
            shrunk.append((remote, existing, count))
    return TopicPlan(tuple(create), tuple(grow), tuple(shrunk))


class ConfigSource(enum.Enum):
    """Kafka's ConfigEntry.ConfigSource."""

    DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
    DYNAMIC_BROKER_LOGGER_CONFIG = "DYNAMIC_BROKER_LOGGER_CONFIG"
    DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
    DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    DYNAMIC_CLIENT_METRICS_CONFIG = "DYNAMIC_CLIENT_METRICS_CONFIG"
    STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
    DEFAULT_CONFIG = "DEFAULT_CONFIG"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.DYNAMIC_TOPIC_CONFIG
    read_only: bool = False
    sensitive: bool = False

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class TopicConfigSync:
    set: Mapping[str, str | None]
    delete: tuple[str, ...]

    def is_empty(self) -> bool:
        return not self.set and not self.delete


def target_config_sync(
    source_entries: Iterable[ConfigEntry],
    config_filter: ConfigPropertyFilter,
    *,
    use_defaults_from_source: bool = False,
) -> TopicConfigSync:
    """The incremental alter-configs of one remote topic, from its source topic's configs."""
    to_set: dict[str, str | None] = {}
    to_delete: list[str] = []
    for entry in sorted(source_entries, key=lambda e: e.name):
        if entry.read_only or entry.sensitive:
            continue
        if entry.source is ConfigSource.STATIC_BROKER_CONFIG:
            continue
        if not config_filter.should_replicate_config_property(entry.name):
            continue
        if entry.is_default and not use_defaults_from_source:
            to_delete.append(entry.name)
        else:
            to_set[entry.name] = entry.value
    return TopicConfigSync(to_set, tuple(to_delete))


def remote_topic_configs(
    source_entries: Iterable[ConfigEntry],
    config_filter: ConfigPropertyFilter,
    *,
    use_defaults_from_source: bool = False,
) -> dict[str, str]:
    """The configs a remote topic is created with (MirrorSourceConnector.createNewTopics,
    `targetConfig(sourceConfig, false)`): the entries config sync would SET; a source
    default only with `use.defaults.from=source` (else the target's default applies)."""
    change = target_config_sync(
        source_entries, config_filter, use_defaults_from_source=use_defaults_from_source
    )
    return {name: value for name, value in change.set.items() if value is not None}


def should_replicate_acl(binding: AclBinding) -> bool:
    """ALLOW WRITE stays on the source: only the mirror writes a remote topic."""
    return not (
        binding.permission_type == PermissionType.ALLOW and binding.operation == AclOperation.WRITE
    )


def target_acl_binding(
    binding: AclBinding, *, source_alias: str, policy: ReplicationPolicy
) -> AclBinding:
    """The binding renamed to the remote topic, ALL narrowed to READ."""
    operation = AclOperation.READ if binding.operation == AclOperation.ALL else binding.operation
    return AclBinding(
        resource_type=ResourceType.TOPIC,
        resource_name=policy.format_remote_topic(source_alias, binding.resource_name),
        pattern_type=PatternType.LITERAL,
        principal=binding.principal,
        host=binding.host,
        operation=int(operation),
        permission_type=binding.permission_type,
    )


def plan_acl_sync(
    source_bindings: Iterable[AclBinding],
    existing_target_bindings: Iterable[AclBinding],
    *,
    source_alias: str,
    target_alias: str,
    policy: ReplicationPolicy,
    topic_filter: TopicFilter,
) -> tuple[AclBinding, ...]:
    """The bindings to create on the target (add-only), sorted."""
    existing = set(existing_target_bindings)
    wanted: set[AclBinding] = set()
    for b in source_bindings:
        if b.resource_type != ResourceType.TOPIC or b.pattern_type != PatternType.LITERAL:
            continue
        if not should_replicate_acl(b):
            continue
        if not should_replicate_topic(
            b.resource_name, policy=policy, topic_filter=topic_filter, target_alias=target_alias
        ):
            continue
        wanted.add(target_acl_binding(b, source_alias=source_alias, policy=policy))
    return tuple(sorted(wanted - existing))
