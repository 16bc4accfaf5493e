"""MM2's record formats: how offset syncs, checkpoints, heartbeats and source offsets are bytes.

Rules (Kafka's OffsetSync, Checkpoint and Heartbeat classes, which write
`org.apache.kafka.common.protocol.types.Struct`s, and Connect's JSON offsets):
- A STRING is an int16 byte length then UTF-8; INT16/INT32/INT64 are big-endian.
- Offset sync (topic `mm2-offset-syncs.<alias>.internal`): key {topic STRING,
  partition INT32}; value {upstreamOffset INT64, offset INT64}, no version.
- Checkpoint (topic `<source>.checkpoints.internal`): key {group STRING, topic
  STRING, partition INT32}; value = version INT16 (0) then {upstreamOffset
  INT64, offset INT64, metadata STRING}.
- Heartbeat (topic `heartbeats`): key {sourceClusterAlias STRING,
  targetClusterAlias STRING}; value = version INT16 (0) then {timestamp INT64}.
- Source offset of a mirror task (Connect's offsets topic, on the target under
  exactly-once: `mm2-offsets.<source>.internal`): key is the JSON array
  `[connector, {"cluster": A, "partition": p, "topic": t}]`, value the JSON
  object `{"offset": o}` (the last upstream offset written); a null value is a
  tombstone (no offset).
- Decoding checks every length and rejects trailing bytes or an unknown
  version with `MirrorWireError`: a shell reading a foreign topic must not
  invent offsets.

Theory of operation: `encode_*` returns (key, value) bytes to produce;
`decode_*` takes the bytes a consumer read and returns the model record.
"""

from __future__ import annotations

import json
import struct

from linkd.core.mirror.exactly_once import SourceOffset
from linkd.core.mirror.model import Checkpoint, Heartbeat, OffsetSync, TopicPartition

__all__ = [
    "SOURCE_CONNECTOR_NAME",
    "MirrorWireError",
    "decode_checkpoint",
    "decode_heartbeat",
    "decode_offset_sync",
    "decode_source_offset",
    "encode_checkpoint",
    "encode_heartbeat",
    "encode_offset_sync",
    "encode_source_offset",
]

SOURCE_CONNECTOR_NAME = "MirrorSourceConnector"
VERSION = 0
_INT16_MAX = (1 << 15) - 1


class MirrorWireError(ValueError):
    """Bytes that are not a record of the expected MM2 format."""


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > _INT16_MAX:
        raise MirrorWireError(f"string of {len(raw)} bytes does not fit an int16 length")
    return struct.pack(">h", len(raw)) + raw


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MirrorWireError(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def string(self) -> str:
        size = self.int16()
        if size < 0:
            raise MirrorWireError(f"{self.what}: null string at byte {self.pos - 2}")
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MirrorWireError(f"{self.what}: string is not UTF-8") from exc

    def version(self) -> None:
        v = self.int16()
        if v != VERSION:
            raise MirrorWireError(f"{self.what}: unknown version {v}")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise MirrorWireError(f"{self.what}: {len(self.data) - self.pos} trailing bytes")


def _present(data: bytes | None, what: str) -> bytes:
    if data is None:
        raise MirrorWireError(f"{what}: missing")
    return data


def encode_offset_sync(sync: OffsetSync) -> tuple[bytes, bytes]:
    tp = sync.topic_partition
    key = _string(tp.topic) + struct.pack(">i", tp.partition)
    value = struct.pack(">qq", sync.upstream_offset, sync.downstream_offset)
    return key, value


def decode_offset_sync(key: bytes | None, value: bytes | None) -> OffsetSync:
    k = _Reader(_present(key, "offset sync key"), "offset sync key")
    tp = TopicPartition(k.string(), k.int32())
    k.end()
    v = _Reader(_present(value, "offset sync value"), "offset sync value")
    upstream, downstream = v.int64(), v.int64()
    v.end()
    return OffsetSync(tp, upstream, downstream)


def encode_checkpoint(cp: Checkpoint) -> tuple[bytes, bytes]:
    tp = cp.topic_partition
    key = _string(cp.consumer_group_id) + _string(tp.topic) + struct.pack(">i", tp.partition)
    value = (
        struct.pack(">hqq", VERSION, cp.upstream_offset, cp.downstream_offset)
        + _string(cp.metadata)
    )
    return key, value


def decode_checkpoint(key: bytes | None, value: bytes | None) -> Checkpoint:
    k = _Reader(_present(key, "checkpoint key"), "checkpoint key")
    group, topic, partition = k.string(), k.string(), k.int32()
    k.end()
    v = _Reader(_present(value, "checkpoint value"), "checkpoint value")
    v.version()
    upstream, downstream, metadata = v.int64(), v.int64(), v.string()
    v.end()
    return Checkpoint(group, TopicPartition(topic, partition), upstream, downstream, metadata)


def encode_heartbeat(hb: Heartbeat) -> tuple[bytes, bytes]:
    key = _string(hb.source_cluster_alias) + _string(hb.target_cluster_alias)
    return key, struct.pack(">hq", VERSION, hb.timestamp_ms)


def decode_heartbeat(key: bytes | None, value: bytes | None) -> Heartbeat:
    k = _Reader(_present(key, "heartbeat key"), "heartbeat key")
    source, target = k.string(), k.string()
    k.end()
    v = _Reader(_present(value, "heartbeat value"), "heartbeat value")
    v.version()
    ts = v.int64()
    v.end()
    return Heartbeat(source, target, ts)


def encode_source_offset(
    offset: SourceOffset, connector: str = SOURCE_CONNECTOR_NAME
) -> tuple[bytes, bytes]:
    partition = {"cluster": offset.cluster, "partition": offset.partition, "topic": offset.topic}
    key = json.dumps([connector, partition], separators=(",", ":"), sort_keys=True)
    value = json.dumps({"offset": offset.offset}, separators=(",", ":"))
    return key.encode("utf-8"), value.encode("utf-8")


def decode_source_offset(
    key: bytes | None, value: bytes | None, connector: str = SOURCE_CONNECTOR_NAME
) -> SourceOffset | None:
    """The offset a record of the offsets topic stores; None for another connector or a
    tombstone."""
    try:
        k = json.loads(_present(key, "source offset key"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MirrorWireError("source offset key: not JSON") from exc
    if not (isinstance(k, list) and len(k) == 2 and isinstance(k[1], dict)):
        raise MirrorWireError("source offset key: not [connector, partition]")
    if k[0] != connector or value is None:
        return None
    part = k[1]
    try:
        v = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MirrorWireError("source offset value: not JSON") from exc
    cluster, topic, partition = part.get("cluster"), part.get("topic"), part.get("partition")
    off = v.get("offset") if isinstance(v, dict) else None
    if not (
        isinstance(cluster, str)
        and isinstance(topic, str)
        and isinstance(partition, int)
        and isinstance(off, int)
    ):
        raise MirrorWireError("source offset: missing or mistyped field")
    return SourceOffset(cluster, topic, partition, off)
