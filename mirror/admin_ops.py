"""The admin calls the mirror makes on one cluster, translated to the core's values.

Rules:
- Every call has a timeout (`admin.timeout.ms` of the flow); a failed call raises
  `MirrorClientError` with the cluster alias and the call's name, except where
  the Kafka answer is itself data: a topic that already exists, a group the
  cluster does not know.
- Topics with a metadata error are left out of listings (they cannot be read).
- Target group state (KIP-545): a group with live members, or in a rebalance, is
  ACTIVE; otherwise it is EMPTY when it holds committed offsets, DEAD when it
  holds none. Treating every group with offsets as EMPTY, whatever state the
  broker names, keeps the never-rewind rule in force on brokers that report
  states loosely.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding as KafkaAclBinding,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import ConfigEntry as KafkaConfigEntry  # type: ignore[attr-defined]

from linkd.core.acls import AclBinding
from linkd.core.mirror.checkpoint import TargetGroup, TargetGroupState
from linkd.core.mirror.model import OffsetAndMetadata, TopicPartition
from linkd.core.mirror.topic_sync import ConfigEntry, ConfigSource, TopicConfigSync

__all__ = ["ClusterAdmin", "CompactionRefused", "MirrorClientError"]

_ACTIVE_STATES = (
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
)
_CONFIG_SOURCES = {
    1: ConfigSource.DYNAMIC_TOPIC_CONFIG,
    2: ConfigSource.DYNAMIC_BROKER_CONFIG,
    3: ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    4: ConfigSource.STATIC_BROKER_CONFIG,
    5: ConfigSource.DEFAULT_CONFIG,
}


class MirrorClientError(RuntimeError):
    """A Kafka client call of the mirror failed."""


class CompactionRefused(MirrorClientError):
    """A topic asked for with `cleanup.policy=compact` was refused for that policy:
    the cluster does not compact (linkd does; a Kafka-compatible broker such as
    tansu may not)."""


def _code(exc: BaseException) -> int | None:
    arg = exc.args[0] if exc.args else None
    return int(arg.code()) if isinstance(arg, KafkaError) else None


def _refuses_compaction(exc: BaseException, configs: Mapping[str, str]) -> bool:
    """An INVALID_CONFIG answer naming cleanup.policy to a request for compaction."""
    return (
        configs.get("cleanup.policy") == "compact"
        and _code(exc) == KafkaError.INVALID_CONFIG
        and "cleanup.policy" in str(exc)
    )


class ClusterAdmin:
    def __init__(self, alias: str, conf: Mapping[str, Any], timeout_ms: int) -> None:
        self.alias = alias
        self.timeout_s = max(timeout_ms, 1) / 1000.0
        self.client = AdminClient(dict(conf))

    def _fail(self, call: str, exc: BaseException) -> MirrorClientError:
        return MirrorClientError(f"cluster {self.alias}: {call} failed: {exc}")

    def _result(self, call: str, future: Any) -> Any:
        try:
            return future.result(self.timeout_s)
        except Exception as exc:
            raise self._fail(call, exc) from exc

    # -- topics ------------------------------------------------------------------------------

    def topic_partitions(self) -> dict[str, int]:
        try:
            md = self.client.list_topics(timeout=self.timeout_s)
        except Exception as exc:
            raise self._fail("list topics", exc) from exc
        return {
            name: len(t.partitions)
            for name, t in sorted(md.topics.items())
            if t.error is None and t.partitions
        }

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> bool:
        """True when created, False when it already existed."""
        topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=dict(configs),
        )
        futures = self.client.create_topics([topic], request_timeout=self.timeout_s)
        try:
            futures[name].result(self.timeout_s)
        except Exception as exc:
            if _code(exc) == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            if _refuses_compaction(exc, configs):
                raise CompactionRefused(
                    f"cluster {self.alias}: create topic {name}: compaction refused: {exc}"
                ) from exc
            raise self._fail(f"create topic {name}", exc) from exc
        return True

    def create_partitions(self, name: str, total: int) -> None:
        futures = self.client.create_partitions(
            [NewPartitions(name, total)], request_timeout=self.timeout_s
        )
        self._result(f"create partitions of {name}", futures[name])

    # -- groups ------------------------------------------------------------------------------

    def list_groups(self) -> tuple[str, ...]:
        result = self._result("list groups", self.client.list_consumer_groups())
        return tuple(sorted(g.group_id for g in result.valid))

    def group_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        futures = self.client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        result = self._result(f"list offsets of group {group}", futures[group])
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp in result.topic_partitions or ():
            if tp.error is None and tp.offset >= 0:
                offsets[TopicPartition(tp.topic, tp.partition)] = OffsetAndMetadata(
                    tp.offset, tp.metadata or ""
                )
        return dict(sorted(offsets.items()))

    def target_group(self, group: str) -> TargetGroup:
        futures = self.client.describe_consumer_groups([group])
        try:
            desc = futures[group].result(self.timeout_s)
        except Exception as exc:
            unknown = (KafkaError.GROUP_ID_NOT_FOUND, KafkaError.COORDINATOR_NOT_AVAILABLE)
            if _code(exc) not in unknown:
                raise self._fail(f"describe group {group}", exc) from exc
            desc = None
        if desc is not None and (desc.members or desc.state in _ACTIVE_STATES):
            return TargetGroup(TargetGroupState.ACTIVE)
        offsets = self.group_offsets(group)
        if offsets:
            return TargetGroup(TargetGroupState.EMPTY, offsets)
        return TargetGroup(TargetGroupState.DEAD)

    def alter_group_offsets(
        self, group: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        tps = [
            KafkaTopicPartition(tp.topic, tp.partition, om.offset, om.metadata)
            if om.metadata
            else KafkaTopicPartition(tp.topic, tp.partition, om.offset)
            for tp, om in sorted(offsets.items())
        ]
        futures = self.client.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)]
        )
        result = self._result(f"alter offsets of group {group}", futures[group])
        for tp in result.topic_partitions or ():
            if tp.error is not None:
                raise MirrorClientError(
                    f"cluster {self.alias}: alter offset of {group} {tp.topic}-{tp.partition}: "
                    f"{tp.error}"
                )

    # -- configs -----------------------------------------------------------------------------

    def topic_configs(self, topic: str) -> tuple[ConfigEntry, ...]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        futures = self.client.describe_configs([resource], request_timeout=self.timeout_s)
        entries = self._result(f"describe configs of {topic}", futures[resource])
        out: list[ConfigEntry] = []
        for name, e in sorted(entries.items()):
            code = int(getattr(e.source, "value", e.source))
            source = _CONFIG_SOURCES.get(code, ConfigSource.UNKNOWN)
            if e.is_default and source is ConfigSource.UNKNOWN:
                source = ConfigSource.DEFAULT_CONFIG
            out.append(
                ConfigEntry(
                    name,
                    e.value,
                    source,
                    read_only=bool(e.is_read_only),
                    sensitive=bool(e.is_sensitive),
                )
            )
        return tuple(out)

    def alter_topic_configs(self, topic: str, change: TopicConfigSync) -> None:
        entries = [
            KafkaConfigEntry(name, value or "", incremental_operation=AlterConfigOpType.SET)
            for name, value in sorted(change.set.items())
        ]
        entries += [
            KafkaConfigEntry(name, "", incremental_operation=AlterConfigOpType.DELETE)
            for name in change.delete
        ]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        futures = self.client.incremental_alter_configs(
            [resource], request_timeout=self.timeout_s
        )
        self._result(f"alter configs of {topic}", futures[resource])

    # -- ACLs --------------------------------------------------------------------------------

    def topic_acls(self) -> tuple[AclBinding, ...]:
        # None matches any name, principal and host (librdkafka's filter semantics).
        flt = AclBindingFilter(
            ResourceType.TOPIC,
            None,  # type: ignore[arg-type]
            ResourcePatternType.ANY,
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        found = self._result(
            "describe ACLs", self.client.describe_acls(flt, request_timeout=self.timeout_s)
        )
        return tuple(
            sorted(
                AclBinding(
                    int(b.restype.value),
                    b.name,
                    int(b.resource_pattern_type.value),
                    b.principal,
                    b.host,
                    int(b.operation.value),
                    int(b.permission_type.value),
                )
                for b in found
            )
        )

    def create_acls(self, bindings: Sequence[AclBinding]) -> None:
        if not bindings:
            return
        kbs = [
            KafkaAclBinding(
                ResourceType(b.resource_type),
                b.resource_name,
                ResourcePatternType(b.pattern_type),
                b.principal,
                b.host,
                AclOperation(b.operation),
                AclPermissionType(b.permission_type),
            )
            for b in bindings
        ]
        futures = self.client.create_acls(kbs, request_timeout=self.timeout_s)
        for kb in kbs:
            self._result("create ACL", futures[kb])
