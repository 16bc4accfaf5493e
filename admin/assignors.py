"""Kafka's consumer protocol: subscription/assignment encoding and assignors.

Group members exchange opaque bytes through JoinGroup/SyncGroup. With the
protocol type "consumer" those bytes follow Kafka's ConsumerProtocol layout,
so a Kafka-protocol listener could later share groups with these clients:

    Subscription v0: int16 version | array<string> topics | bytes user_data
    Assignment   v0: int16 version | array<(string topic, array<int32>)> | bytes user_data

Arrays are an int32 count then the elements; strings an int16 length then
UTF-8; bytes an int32 length (-1 for null) then the bytes. Decoding accepts
later versions (v1+ append fields after these) and reads the v0 fields only.

The assignors run on the group leader, as in Kafka: "range" (Kafka's
RangeAssignor, the default) and "roundrobin" (RoundRobinAssignor).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CONSUMER_PROTOCOL_TYPE = "consumer"
CONSUMER_PROTOCOL_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ProtocolError(ValueError):
    """Member metadata or an assignment that does not parse."""


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None


@dataclass(frozen=True)
class Assignment:
    # topic -> partitions, in the order encoded.
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None = None

    def topic_partitions(self) -> list[tuple[str, int]]:
        return [(topic, p) for topic, parts in self.partitions for p in parts]


@dataclass(frozen=True)
class MemberSubscription:
    """What the leader knows of one member."""

    member_id: str
    subscription: Subscription
    group_instance_id: str = ""


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def _put_string(out: bytearray, text: str) -> None:
    data = text.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string too long for the consumer protocol: {len(data)} bytes")
    out += _I16.pack(len(data))
    out += data


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data))
        out += data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(
                f"consumer protocol data truncated at byte {self.pos} (needs {n} more)"
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise ProtocolError("null string in consumer protocol data")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string is not UTF-8: {exc}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        return self._take(n)

    def count(self) -> int:
        n = self.i32()
        if n < 0:
            return 0  # a null array reads as empty
        if n > len(self.data):
            raise ProtocolError(f"array count {n} exceeds the data size")
        return n

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


def encode_subscription(
    topics: Sequence[str], user_data: bytes | None = None, version: int = CONSUMER_PROTOCOL_VERSION
) -> bytes:
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(topics))
    for topic in topics:
        _put_string(out, topic)
    _put_bytes(out, user_data)
    return bytes(out)


def decode_subscription(data: bytes) -> Subscription:
    reader = _Reader(data)
    version = reader.i16()
    if version < 0:
        raise ProtocolError(f"subscription version {version} < 0")
    topics = tuple(reader.string() for _ in range(reader.count()))
    user_data = None if reader.at_end else reader.nullable_bytes()
    return Subscription(topics, user_data)


def encode_assignment(
    partitions: Mapping[str, Sequence[int]] | Sequence[tuple[str, int]],
    user_data: bytes | None = None,
    version: int = CONSUMER_PROTOCOL_VERSION,
) -> bytes:
    """Encodes {topic: [partitions]} (or a list of (topic, partition))."""
    by_topic: dict[str, list[int]] = {}
    if isinstance(partitions, Mapping):
        for topic, parts in partitions.items():
            by_topic.setdefault(topic, []).extend(parts)
    else:
        for topic, p in partitions:
            by_topic.setdefault(topic, []).append(p)
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(by_topic))
    for topic in sorted(by_topic):
        _put_string(out, topic)
        parts = sorted(by_topic[topic])
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    _put_bytes(out, user_data)
    return bytes(out)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(())  # Kafka sends empty bytes to members with nothing
    reader = _Reader(data)
    version = reader.i16()
    if version < 0:
        raise ProtocolError(f"assignment version {version} < 0")
    topics: list[tuple[str, tuple[int, ...]]] = []
    for _ in range(reader.count()):
        topic = reader.string()
        parts = tuple(reader.i32() for _ in range(reader.count()))
        topics.append((topic, parts))
    user_data = None if reader.at_end else reader.nullable_bytes()
    return Assignment(tuple(topics), user_data)


# ---------------------------------------------------------------------------
# Assignors
# ---------------------------------------------------------------------------


def _member_order(member: MemberSubscription) -> tuple[int, str, str]:
    # Kafka's MemberInfo ordering: members with a group instance id first,
    # ordered by it; the others by member id.
    if member.group_instance_id:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def range_assign(
    members: Sequence[MemberSubscription], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, contiguous ranges in member order.

    For each topic, the members subscribed to it are sorted; with P partitions
    and C members, member i gets P // C partitions plus one more when
    i < P % C, starting at i * (P // C) + min(i, P % C).
    Topics missing from `partition_counts` (unknown) are not assigned.
    """
    result: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    topics = sorted({t for m in members for t in m.subscription.topics})
    for topic in topics:
        count = partition_counts.get(topic)
        if not count or count <= 0:
            continue
        consumers = sorted(
            (m for m in members if topic in m.subscription.topics), key=_member_order
        )
        per, extra = divmod(count, len(consumers))
        for i, member in enumerate(consumers):
            start = i * per + min(i, extra)
            length = per + (1 if i < extra else 0)
            if length:
                result[member.member_id][topic] = list(range(start, start + length))
    return result


def roundrobin_assign(
    members: Sequence[MemberSubscription], partition_counts: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Kafka's RoundRobinAssignor: all partitions sorted, dealt to members in turn
    (a member is skipped for partitions of topics it does not subscribe to)."""
    result: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    ordered = sorted(members, key=_member_order)
    if not ordered:
        return result
    topics = sorted({t for m in members for t in m.subscription.topics})
    index = 0
    for topic in topics:
        count = partition_counts.get(topic) or 0
        for p in range(count):
            for _ in range(len(ordered)):
                member = ordered[index % len(ordered)]
                index += 1
                if topic in member.subscription.topics:
                    result[member.member_id].setdefault(topic, []).append(p)
                    break
    return result


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign}


def assign(
    strategy: str,
    members: Sequence[MemberSubscription],
    partition_counts: Mapping[str, int],
) -> dict[str, dict[str, list[int]]]:
    try:
        assignor = ASSIGNORS[strategy]
    except KeyError:
        raise ValueError(
            f"unknown partition assignment strategy {strategy!r} (known: {', '.join(ASSIGNORS)})"
        ) from None
    return assignor(members, partition_counts)
