"""Heartbeats and reachability: which clusters feed this one, over how many hops.

Rules (Kafka's MirrorHeartbeatTask, MirrorMakerConfig.clusterPairs, MirrorClient):
- For every ordered cluster pair (S, T) with heartbeats enabled (default, also
  when `S->T.enabled` is false), a heartbeat task writes
  Heartbeat(source=S, target=T, timestamp) to the topic `heartbeats` on T every
  `emit.heartbeats.interval.seconds` (default 1).
- `heartbeats` topics are always replicated (whatever the topic filter says,
  unless it would be a cycle), so a flow A->B creates `A.heartbeats` on B, and a
  further flow B->C creates `B.A.heartbeats` on C.
- Reachability (MirrorClient): the upstream clusters of a cluster are all sources
  on the chains of its heartbeats topics; the replication hops to cluster X are
  the fewest hops among the heartbeats topics whose chain reaches X (-1: none).
- Remote topics are those that are not internal and have a source; checkpoint
  topics end with MM2's checkpoints suffix.

Theory of operation: `HeartbeatSchedule` says when the next heartbeat is due
(time as data); the reachability functions read a cluster's topic names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from linkd.core.mirror.model import Heartbeat
from linkd.core.mirror.policy import ReplicationPolicy

__all__ = [
    "EMIT_HEARTBEATS_INTERVAL_SECONDS_DEFAULT",
    "HeartbeatSchedule",
    "checkpoint_topics",
    "heartbeat_topics",
    "remote_topics",
    "replication_hops",
    "upstream_clusters",
]

EMIT_HEARTBEATS_INTERVAL_SECONDS_DEFAULT = 1


@dataclass(frozen=True, slots=True)
class HeartbeatSchedule:
    """The heartbeat task of one (source, target) pair."""

    source_alias: str
    target_alias: str
    interval_ms: int = EMIT_HEARTBEATS_INTERVAL_SECONDS_DEFAULT * 1000
    next_due_ms: int = 0

    def __post_init__(self) -> None:
        if self.interval_ms <= 0:
            raise ValueError(f"heartbeat interval must be > 0 ms, got {self.interval_ms}")

    def poll(self, now_ms: int) -> tuple[HeartbeatSchedule, Heartbeat | None]:
        """The schedule after `now_ms`, and the heartbeat to write now, if one is due.

        Like MirrorHeartbeatTask (which sleeps an interval between heartbeats), a
        late poll emits one heartbeat, not a burst.
        """
        if now_ms < self.next_due_ms:
            return self, None
        beat = Heartbeat(self.source_alias, self.target_alias, now_ms)
        nxt = HeartbeatSchedule(
            self.source_alias, self.target_alias, self.interval_ms, now_ms + self.interval_ms
        )
        return nxt, beat


def heartbeat_topics(topics: Iterable[str], policy: ReplicationPolicy) -> tuple[str, ...]:
    return tuple(sorted(t for t in set(topics) if policy.is_heartbeats_topic(t)))


def checkpoint_topics(topics: Iterable[str], policy: ReplicationPolicy) -> tuple[str, ...]:
    return tuple(sorted(t for t in set(topics) if policy.is_checkpoints_topic(t)))


def remote_topics(
    topics: Iterable[str], policy: ReplicationPolicy, source: str | None = None
) -> tuple[str, ...]:
    """Replicated topics on a cluster; with `source`, only those whose direct source it is."""
    found = []
    for t in set(topics):
        if policy.is_internal_topic(t):
            continue
        topic_source = policy.topic_source(t)
        if topic_source is None:
            continue
        if source is None or topic_source == source:
            found.append(t)
    return tuple(sorted(found))


def upstream_clusters(topics: Iterable[str], policy: ReplicationPolicy) -> tuple[str, ...]:
    """Every cluster that reaches this one through replicated heartbeats, sorted."""
    clusters: set[str] = set()
    for t in heartbeat_topics(topics, policy):
        clusters.update(policy.all_sources(t))
    return tuple(sorted(clusters))


def replication_hops(topics: Iterable[str], policy: ReplicationPolicy, upstream_alias: str) -> int:
    """The fewest hops from `upstream_alias` to this cluster, -1 if unreachable."""
    hops = [policy.count_hops(t, upstream_alias) for t in heartbeat_topics(topics, policy)]
    reachable = [h for h in hops if h != -1]
    return min(reachable) if reachable else -1
