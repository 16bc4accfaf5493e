"""Replication policies: how MM2 names remote topics, and which topics it never copies.

Rules (Kafka's ReplicationPolicy, DefaultReplicationPolicy, IdentityReplicationPolicy,
MirrorSourceConnector.isCycle / shouldReplicateTopic, MirrorClient.allSources /
countHopsForTopic):
- DEFAULT: a topic `t` of cluster `A` is called `A<sep>t` on the target
  (separator `replication.policy.separator`, default "."). The source of a topic
  is the text before the first separator, provided the split leaves at least two
  non-trailing parts (Java's `String.split` drops trailing empty strings, so
  "A." and "A.." are not remote topics, while ".t" has the empty source "").
  `upstream_topic` strips "<source><sep>"; `original_topic` strips every hop.
- IDENTITY: names are not changed, except for heartbeats topics, which keep the
  DEFAULT naming (so chains of heartbeats still reveal the topology). The
  source of a non-heartbeat topic is the configured `source_cluster_alias`
  (or None), its upstream topic is itself.
- MM2's own topics: `heartbeats` (configurable name), `<alias><isep>checkpoints
  <isep>internal`, `mm2-offset-syncs<isep><alias><isep>internal`, where the
  internal separator <isep> is the separator, or "." when
  `replication.policy.internal.topic.separator.enabled` is false.
- Internal topics are never replicated: names starting "__" or ".", ending
  ".internal" or "-internal", or ending with MM2's internal suffix.
- Cycle: a topic is a cycle for target T when T appears as a source anywhere in
  its upstream chain. Such a topic is never replicated to T; that is what makes
  active/active and arbitrary topologies loop-free under DEFAULT. IDENTITY cannot
  see chains (Kafka warns about it too): only heartbeats are protected.
- A topic is replicated to T when (topic filter accepts it or it is a heartbeats
  topic) and it is not internal and not a cycle.

Theory of operation: a `ReplicationPolicy` is a frozen value built from the
flow's configuration; every rule is a method without side effects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "DEFAULT_HEARTBEATS_TOPIC",
    "DEFAULT_POLICY_CLASS",
    "IDENTITY_POLICY_CLASS",
    "PolicyKind",
    "ReplicationPolicy",
]

DEFAULT_HEARTBEATS_TOPIC = "heartbeats"
DEFAULT_SEPARATOR = "."
DEFAULT_POLICY_CLASS = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY_CLASS = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# An upstream chain longer than this is treated as "no cycle found"; Kafka recurses
# without a bound, a topic name of 249 characters cannot hold more hops anyway.
MAX_HOPS = 256


class PolicyKind(enum.Enum):
    DEFAULT = "default"
    IDENTITY = "identity"


@dataclass(frozen=True, slots=True)
class ReplicationPolicy:
    kind: PolicyKind = PolicyKind.DEFAULT
    separator: str = DEFAULT_SEPARATOR
    internal_topic_separator_enabled: bool = True
    heartbeats_topic_name: str = DEFAULT_HEARTBEATS_TOPIC
    # IdentityReplicationPolicy's `source.cluster.alias` (MM2 sets it per flow).
    source_cluster_alias: str | None = None

    def __post_init__(self) -> None:
        if not self.separator:
            raise ValueError("replication.policy.separator must not be empty")
        if not self.heartbeats_topic_name:
            raise ValueError("the heartbeats topic name must not be empty")

    # -- naming (DefaultReplicationPolicy) ---------------------------------------------------

    def _default_topic_source(self, topic: str) -> str | None:
        parts = topic.split(self.separator)
        while parts and parts[-1] == "":  # Java's String.split drops trailing empties
            parts.pop()
        if len(parts) < 2:
            return None
        return parts[0]

    def _default_upstream_topic(self, topic: str) -> str | None:
        source = self._default_topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def _looks_like_heartbeat(self, topic: str) -> bool:
        # IdentityReplicationPolicy.looksLikeHeartbeat
        return topic.endswith(self.heartbeats_topic_name)

    def format_remote_topic(self, source_cluster_alias: str, topic: str) -> str:
        """The name of `topic` of cluster `source_cluster_alias` on the target."""
        if self.kind is PolicyKind.IDENTITY and not self._looks_like_heartbeat(topic):
            return topic
        return f"{source_cluster_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        """The alias of the cluster `topic` was replicated from, None for a local topic."""
        if self.kind is PolicyKind.IDENTITY and not self._looks_like_heartbeat(topic):
            return self.source_cluster_alias
        return self._default_topic_source(topic)

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream, None for a local topic."""
        if self.kind is PolicyKind.IDENTITY and not self._looks_like_heartbeat(topic):
            return topic
        return self._default_upstream_topic(topic)

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster where it was first produced."""
        current = topic
        for _ in range(MAX_HOPS):
            upstream = self.upstream_topic(current)
            # IDENTITY returns the topic itself: a fixed point ends the walk.
            if upstream is None or upstream == current:
                return current
            current = upstream
        return current

    # -- MM2's own topics ----------------------------------------------------------------------

    def _internal_separator(self) -> str:
        return self.separator if self.internal_topic_separator_enabled else "."

    def _internal_suffix(self) -> str:
        return f"{self._internal_separator()}internal"

    def _checkpoints_suffix(self) -> str:
        return f"{self._internal_separator()}checkpoints{self._internal_suffix()}"

    def heartbeats_topic(self) -> str:
        return self.heartbeats_topic_name

    def checkpoints_topic(self, cluster_alias: str) -> str:
        """`<source alias>.checkpoints.internal`, written on the target."""
        return f"{cluster_alias}{self._checkpoints_suffix()}"

    def offset_syncs_topic(self, cluster_alias: str) -> str:
        """`mm2-offset-syncs.<alias>.internal` (alias: see config.MirrorFlow.offset_syncs_topic)."""
        return (
            f"mm2-offset-syncs{self._internal_separator()}{cluster_alias}{self._internal_suffix()}"
        )

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self.heartbeats_topic_name

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._checkpoints_suffix())

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix())

    def is_internal_topic(self, topic: str) -> bool:
        """Kafka's, Connect's and MM2's internal topics: never replicated."""
        kafka_internal = topic.startswith("__") or topic.startswith(".")
        connect_internal = topic.endswith("-internal") or topic.endswith(".internal")
        return self.is_mm2_internal_topic(topic) or kafka_internal or connect_internal

    # -- topology ------------------------------------------------------------------------------

    def is_cycle(self, topic: str, target_cluster_alias: str) -> bool:
        """True when `target_cluster_alias` is a source anywhere upstream of `topic`."""
        current = topic
        for _ in range(MAX_HOPS):
            source = self.topic_source(current)
            if source is None:
                return False
            if source == target_cluster_alias:
                return True
            upstream = self.upstream_topic(current)
            # IdentityReplicationPolicy cannot see further upstream.
            if upstream is None or upstream == current:
                return False
            current = upstream
        return False

    def all_sources(self, topic: str) -> tuple[str, ...]:
        """Every cluster alias on the topic's upstream chain, nearest first (MirrorClient)."""
        sources: list[str] = []
        current: str | None = topic
        for _ in range(MAX_HOPS):
            if current is None:
                break
            source = self.topic_source(current)
            if source is None or source in sources:
                break
            sources.append(source)
            current = self.upstream_topic(current)
        return tuple(sources)

    def count_hops(self, topic: str, source_cluster_alias: str) -> int:
        """Hops from `source_cluster_alias` to here along `topic`'s chain; -1 if absent."""
        visited: set[str] = set()
        current: str | None = topic
        hops = 0
        while current is not None and hops < MAX_HOPS:
            hops += 1
            source = self.topic_source(current)
            if source is None:
                return -1
            if source == source_cluster_alias:
                return hops
            if source in visited:
                return -1
            visited.add(source)
            current = self.upstream_topic(current)
        return -1
