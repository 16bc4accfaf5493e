"""Records of MirrorMaker 2 mode: the values that cross the core's boundary.

Rules:
- A `TopicPartition` names one partition; an `OffsetAndMetadata` is a committed
  consumer offset (Kafka's classes of the same names).
- An `OffsetSync` pairs an upstream offset with the downstream offset the same
  record got on the target (Kafka's OffsetSync, topic `mm2-offset-syncs.*`).
- A `Checkpoint` is a consumer group's offset translated to the target
  (Kafka's Checkpoint, topic `<source>.checkpoints.internal`).
- A `Heartbeat` proves a flow is alive (Kafka's Heartbeat, topic `heartbeats`).

Every record is a frozen dataclass; `key()` returns the record key MM2 uses,
so that a shell writing these to a compacted topic keys them as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Checkpoint", "Heartbeat", "OffsetAndMetadata", "OffsetSync", "TopicPartition"]


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""


@dataclass(frozen=True, slots=True, eq=True)
class OffsetSync:
    """One (upstream, downstream) offset pair of a replicated record.

    Compared by value; the offset sync store (sync_store.py) compares entries by
    identity where Kafka does, so two syncs with equal numbers stay distinct.
    """

    topic_partition: TopicPartition
    upstream_offset: int
    downstream_offset: int

    def key(self) -> tuple[str, int]:
        return (self.topic_partition.topic, self.topic_partition.partition)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A group's upstream offset and its translation on the target.

    `topic_partition` is already renamed for the target cluster (see
    checkpoint.rename_topic_partition).
    """

    consumer_group_id: str
    topic_partition: TopicPartition
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> tuple[str, str, int]:
        return (self.consumer_group_id, self.topic_partition.topic, self.topic_partition.partition)

    def offset_and_metadata(self) -> OffsetAndMetadata:
        return OffsetAndMetadata(self.downstream_offset, self.metadata)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    source_cluster_alias: str
    target_cluster_alias: str
    timestamp_ms: int

    def key(self) -> tuple[str, str]:
        return (self.source_cluster_alias, self.target_cluster_alias)
