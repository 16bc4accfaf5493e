"""Client library pieces that need no daemon: partitioner, consumer protocol,
assignors, read_committed filtering, error decoding, value types."""

from __future__ import annotations

import struct
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import status_pb2

from admin import CcrError, Message, Producer, TopicPartition, murmur2, murmur2_partition
from admin.assignors import (
    MemberSubscription,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    roundrobin_assign,
)
from admin.client import bootstrap_of, to_headers
from admin.consumer import decode_fetched
from admin.errors import error_from_rpc
from ccr.v1 import errors_pb2
from linkd.core.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    RecordSpec,
    build_batch,
    build_control_batch,
)

# ---------------------------------------------------------------------------
# murmur2 partitioner
# ---------------------------------------------------------------------------

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.testMurmur2,
# plus values of Kafka's Utils.murmur2 quoted by Akka's Murmur2Spec.
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"1", -1993445489),
    (b"12", 126087238),
    (b"123", -267702483),
    (b"1234", -1614185708),
    (b"12345", -1188365604),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_partition_is_positive_hash_mod() -> None:
    for data, expected in KAFKA_MURMUR2:
        for n in (1, 3, 7, 12, 100):
            assert murmur2_partition(data, n) == (expected & 0x7FFFFFFF) % n


def test_murmur2_handles_high_bytes_and_empty() -> None:
    # Every tail length, bytes >= 0x80 (Java bytes are signed; the & 0xff matters).
    for data in (b"", b"\xff", b"\xff\xfe", b"\xff\xfe\xfd", b"\xff\xfe\xfd\xfc\xfb"):
        h = murmur2(data)
        assert -(2**31) <= h < 2**31


def test_murmur2_partition_matches_librdkafka() -> None:
    """librdkafka's murmur2_random partitioner (Java-compatible) against a mock
    cluster: every key must land where ours puts it."""
    ck = pytest.importorskip(
        "confluent_kafka", reason="needs confluent-kafka (librdkafka) for its partitioner"
    )
    producer = ck.Producer(
        {"test.mock.num.brokers": 1, "partitioner": "murmur2_random", "log_level": 0}
    )
    placed: dict[bytes, int] = {}
    keys = [f"key-{i}".encode() for i in range(100)] + [b"", b"21", b"\xff\x00\x80"]

    def report(err: Any, msg: Any) -> None:
        assert err is None
        placed[msg.key()] = msg.partition()

    for key in keys:
        producer.produce("murmur", key=key, value=b"x", on_delivery=report)
    assert producer.flush(20) == 0
    count = len(producer.list_topics("murmur", timeout=10).topics["murmur"].partitions)
    assert count > 1
    assert {k: murmur2_partition(k, count) for k in keys} == placed


# ---------------------------------------------------------------------------
# Consumer protocol
# ---------------------------------------------------------------------------


def test_subscription_layout_is_kafka_v0() -> None:
    data = encode_subscription(["ab", "c"])
    assert data == (
        struct.pack(">h", 0)
        + struct.pack(">i", 2)
        + struct.pack(">h", 2)
        + b"ab"
        + struct.pack(">h", 1)
        + b"c"
        + struct.pack(">i", -1)
    )
    assert decode_subscription(data) == Subscription(("ab", "c"), None)


def test_assignment_layout_is_kafka_v0() -> None:
    data = encode_assignment({"t": [2, 0]}, user_data=b"u")
    assert data == (
        struct.pack(">h", 0)
        + struct.pack(">i", 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">i", 2)
        + struct.pack(">ii", 0, 2)
        + struct.pack(">i", 1)
        + b"u"
    )
    decoded = decode_assignment(data)
    assert decoded.topic_partitions() == [("t", 0), ("t", 2)]
    assert decoded.user_data == b"u"


def test_consumer_protocol_round_trip() -> None:
    sub = encode_subscription(["orders", "payments", "ünïcode"], user_data=b"\x00\x01")
    assert decode_subscription(sub) == Subscription(("orders", "payments", "ünïcode"), b"\x00\x01")
    asg = encode_assignment([("orders", 3), ("orders", 1), ("payments", 0)])
    assert decode_assignment(asg).partitions == (("orders", (1, 3)), ("payments", (0,)))
    assert decode_assignment(b"").partitions == ()


def test_consumer_protocol_reads_later_versions() -> None:
    # v1 appends owned partitions (and v3 more); a v0 reader ignores the tail.
    v1 = encode_subscription(["t"], version=1) + struct.pack(">i", 0)
    assert decode_subscription(v1).topics == ("t",)
    v1a = encode_assignment({"t": [0]}, version=1) + b"\x00\x00"
    assert decode_assignment(v1a).topic_partitions() == [("t", 0)]


def test_consumer_protocol_rejects_truncated() -> None:
    from admin.assignors import ProtocolError

    with pytest.raises(ProtocolError):
        decode_subscription(encode_subscription(["orders"])[:5])
    with pytest.raises(ProtocolError):
        decode_assignment(encode_assignment({"t": [0, 1]})[:-6])


# ---------------------------------------------------------------------------
# Assignors
# ---------------------------------------------------------------------------


def _members(*specs: tuple[str, tuple[str, ...]]) -> list[MemberSubscription]:
    return [MemberSubscription(mid, Subscription(topics)) for mid, topics in specs]


def test_range_assignor_like_kafka() -> None:
    # Kafka RangeAssignorTest: two consumers, two topics of 3 partitions.
    members = _members(("c0", ("t1", "t2")), ("c1", ("t1", "t2")))
    plan = range_assign(members, {"t1": 3, "t2": 3})
    assert plan == {"c0": {"t1": [0, 1], "t2": [0, 1]}, "c1": {"t1": [2], "t2": [2]}}


def test_range_assignor_splits_four_partitions() -> None:
    members = _members(("b", ("t",)), ("a", ("t",)))
    assert range_assign(members, {"t": 4}) == {"a": {"t": [0, 1]}, "b": {"t": [2, 3]}}


def test_range_assignor_more_members_than_partitions_and_unknown_topics() -> None:
    members = _members(("m1", ("t", "missing")), ("m2", ("t",)), ("m3", ("t",)))
    plan = range_assign(members, {"t": 2})
    assert plan == {"m1": {"t": [0]}, "m2": {"t": [1]}, "m3": {}}


def test_range_assignor_only_subscribers_get_a_topic() -> None:
    members = _members(("m1", ("a",)), ("m2", ("a", "b")))
    plan = range_assign(members, {"a": 2, "b": 3})
    assert plan == {"m1": {"a": [0]}, "m2": {"a": [1], "b": [0, 1, 2]}}


def test_range_assignor_orders_static_members_first() -> None:
    members = [
        MemberSubscription("z-dynamic", Subscription(("t",))),
        MemberSubscription("y", Subscription(("t",)), group_instance_id="instance-1"),
    ]
    assert range_assign(members, {"t": 2}) == {"y": {"t": [0]}, "z-dynamic": {"t": [1]}}


def test_roundrobin_assignor() -> None:
    members = _members(("c0", ("t1", "t2")), ("c1", ("t1", "t2")))
    plan = roundrobin_assign(members, {"t1": 3, "t2": 3})
    assert plan == {"c0": {"t1": [0, 2], "t2": [1]}, "c1": {"t1": [1], "t2": [0, 2]}}


def test_every_partition_assigned_once() -> None:
    members = _members(*[(f"m{i}", ("a", "b", "c")) for i in range(5)])
    counts = {"a": 7, "b": 1, "c": 12}
    for assignor in (range_assign, roundrobin_assign):
        plan = assignor(members, counts)
        seen = [(t, p) for parts in plan.values() for t, ps in parts.items() for p in ps]
        assert sorted(seen) == sorted((t, p) for t, n in counts.items() for p in range(n))


# ---------------------------------------------------------------------------
# read_committed filtering
# ---------------------------------------------------------------------------


def _data(base: int, values: list[str], pid: int = -1, txn: bool = False, seq: int = -1) -> bytes:
    return build_batch(
        [RecordSpec(None, v.encode(), 1000 + i) for i, v in enumerate(values)],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn,
    )


def _marker(base: int, pid: int, marker: int) -> bytes:
    return build_control_batch(
        marker=marker, producer_id=pid, producer_epoch=0, timestamp=2000, base_offset=base
    )


def _log() -> bytes:
    return b"".join(
        [
            _data(0, ["plain"]),  # 0
            _data(1, ["a1", "a2"], pid=10, txn=True, seq=0),  # 1-2 aborted
            _data(3, ["c1"], pid=11, txn=True, seq=0),  # 3 committed
            _marker(4, 10, CONTROL_ABORT),  # 4
            _marker(5, 11, CONTROL_COMMIT),  # 5
            _data(6, ["n1", "n2"], pid=10, txn=True, seq=2),  # 6-7 committed (new txn)
            _marker(8, 10, CONTROL_COMMIT),  # 8
        ]
    )


def _values(msgs: list[Message]) -> list[tuple[int | None, bytes | None]]:
    return [(m.offset(), m.value()) for m in msgs]


def test_read_committed_skips_aborted_batches_and_markers() -> None:
    msgs, next_offset = decode_fetched("t", 0, _log(), 0, [(10, 1)], read_committed=True)
    assert _values(msgs) == [(0, b"plain"), (3, b"c1"), (6, b"n1"), (7, b"n2")]
    assert next_offset == 9


def test_read_uncommitted_returns_all_data_but_no_markers() -> None:
    msgs, next_offset = decode_fetched("t", 0, _log(), 0, [], read_committed=False)
    assert [o for o, _ in _values(msgs)] == [0, 1, 2, 3, 6, 7]
    assert next_offset == 9


def test_aborted_txn_only_applies_from_its_first_offset() -> None:
    # Producer 7 commits a transaction (0-1, marker 2), then aborts one (3, marker 4).
    log = b"".join(
        [
            _data(0, ["ok1", "ok2"], pid=7, txn=True, seq=0),
            _marker(2, 7, CONTROL_COMMIT),
            _data(3, ["bad"], pid=7, txn=True, seq=2),
            _marker(4, 7, CONTROL_ABORT),
            _data(5, ["after"], pid=7, txn=True, seq=3),
        ]
    )
    msgs, next_offset = decode_fetched("t", 0, log, 0, [(7, 3)], read_committed=True)
    assert _values(msgs) == [(0, b"ok1"), (1, b"ok2"), (5, b"after")]
    assert next_offset == 6


def test_fetch_offset_inside_first_batch_and_partial_tail() -> None:
    log = _data(10, ["x", "y", "z"]) + _data(13, ["w"])
    msgs, next_offset = decode_fetched("t", 1, log + _data(14, ["cut"])[:30], 11)
    assert _values(msgs) == [(11, b"y"), (12, b"z"), (13, b"w")]
    assert next_offset == 14
    assert msgs[0].topic() == "t" and msgs[0].partition() == 1


def test_only_markers_still_advance_the_position() -> None:
    log = _marker(20, 5, CONTROL_COMMIT) + _marker(21, 6, CONTROL_ABORT)
    msgs, next_offset = decode_fetched("t", 0, log, 20, [], read_committed=True)
    assert msgs == [] and next_offset == 22


def test_non_transactional_batches_of_aborted_pid_are_kept() -> None:
    # Kafka's rule skips only transactional batches.
    log = _data(0, ["idem"], pid=3, seq=0) + _marker(1, 3, CONTROL_ABORT)
    msgs, _ = decode_fetched("t", 0, log, 0, [(3, 0)], read_committed=True)
    assert _values(msgs) == [(0, b"idem")]


def test_corrupt_batch_raises() -> None:
    from linkd.core.records import CorruptBatchError

    data = bytearray(_data(0, ["x"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        decode_fetched("t", 0, bytes(data), 0)


def test_fetched_messages_carry_headers_and_timestamps() -> None:
    batch = build_batch([RecordSpec(b"k", b"v", 1234, (("h1", b"x"), ("h1", None)))], base_offset=5)
    (msg,), _ = decode_fetched("t", 0, batch, 0)
    assert msg.key() == b"k" and msg.value() == b"v"
    assert msg.headers() == [("h1", b"x"), ("h1", None)]
    assert msg.timestamp() == (1, 1234)
    assert msg.error() is None and len(msg) == 1


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers: Any = None) -> None:
        super().__init__()
        self._code = code
        self._details = details
        self._trailers = trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailers


def _status_trailer(code: int, message: str, resource: str, retriable: bool) -> Any:
    detail = errors_pb2.ErrorDetail(
        code=code,  # type: ignore[arg-type]
        resource=resource,
        retriable=retriable,
        message=message,
    )
    packed = any_pb2.Any()
    packed.Pack(detail)
    status = status_pb2.Status(code=5, message=f"X: {message}", details=[packed])
    return (("grpc-status-details-bin", status.SerializeToString()),)


def test_error_from_status_details() -> None:
    exc = _FakeRpcError(
        grpc.StatusCode.NOT_FOUND,
        "UNKNOWN_TOPIC: topic 'nope' does not exist",
        _status_trailer(3, "topic 'nope' does not exist", "topic 'nope'", False),
    )
    err = error_from_rpc(exc, "127.0.0.1:1")
    assert err.code == "UNKNOWN_TOPIC"
    assert err.resource == "topic 'nope'"
    assert err.message == "topic 'nope' does not exist"
    assert err.retriable is False
    assert str(err) == "UNKNOWN_TOPIC: topic 'nope' does not exist"


def test_error_retriable_flag_comes_from_detail() -> None:
    exc = _FakeRpcError(
        grpc.StatusCode.ABORTED, "busy", _status_trailer(25, "busy", "transactional id t", True)
    )
    err = error_from_rpc(exc)
    assert err.code == "CONCURRENT_TRANSACTIONS" and err.retriable


def test_error_without_details_keeps_grpc_code() -> None:
    err = error_from_rpc(_FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!"))
    assert err.code == "UNIMPLEMENTED" and err.message == "Method not found!"
    down = error_from_rpc(
        _FakeRpcError(grpc.StatusCode.UNAVAILABLE, "failed to connect"), "127.0.0.1:9"
    )
    assert down.code == "UNAVAILABLE" and down.retriable
    assert down.message.startswith("cannot reach cluster at 127.0.0.1:9: failed to connect")


def test_unreachable_cluster_gives_clear_error() -> None:
    from admin import AdminClient

    with AdminClient({"bootstrap.servers": "127.0.0.1:1", "request.timeout.ms": 5000}) as admin:
        with pytest.raises(CcrError) as info:
            admin.health()
    assert info.value.code == "UNAVAILABLE"
    assert "cannot reach cluster at 127.0.0.1:1" in info.value.message


# ---------------------------------------------------------------------------
# Value types and config
# ---------------------------------------------------------------------------


def test_topic_partition_like_confluent() -> None:
    a = TopicPartition("t", 1, 5)
    b = TopicPartition("t", 1, 9)
    assert a == b and hash(a) == hash(b)
    assert TopicPartition("t").partition == -1 and TopicPartition("t").offset == -1001
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)]) == [
        TopicPartition("a", 1),
        TopicPartition("a", 2),
        TopicPartition("b", 0),
    ]


def test_headers_and_bootstrap_parsing() -> None:
    assert to_headers({"a": "x", "b": None}) == [("a", b"x"), ("b", None)]
    assert to_headers([("a", b"1"), ("a", "2")]) == [("a", b"1"), ("a", b"2")]
    with pytest.raises(TypeError):
        to_headers([("a", 3)])
    assert bootstrap_of({"bootstrap.servers": "h1:1,h2:2"}) == "h1:1"
    with pytest.raises(ValueError):
        bootstrap_of({"bootstrap.servers": "nohost"})


def test_producer_config_validation() -> None:
    with pytest.raises(ValueError):
        Producer({"bootstrap.servers": "127.0.0.1:1", "acks": "2"})
    with pytest.raises(ValueError):
        Producer({"bootstrap.servers": "127.0.0.1:1", "acks": 1, "enable.idempotence": True})
    with pytest.raises(ValueError):
        Producer({"bootstrap.servers": "127.0.0.1:1", "partitioner": "nope"})
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "acks": 0})
    try:
        assert p._idempotent is False  # acks=0 turns idempotence off, as in Kafka
        with pytest.raises(CcrError) as info:
            p.begin_transaction()
        assert info.value.code == "INVALID_TXN_STATE"
    finally:
        p.close(timeout=0)


def test_producer_delivery_fails_when_cluster_unreachable() -> None:
    p = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "delivery.timeout.ms": 500,
            "request.timeout.ms": 200,
            "retry.backoff.ms": 20,
        }
    )
    reports: list[tuple[CcrError | None, Message]] = []
    try:
        p.produce("t", b"v", partition=0, on_delivery=lambda e, m: reports.append((e, m)))
        assert p.flush(10) == 0
    finally:
        p.close(timeout=0)
    assert len(reports) == 1
    err, msg = reports[0]
    assert err is not None and msg.value() == b"v" and msg.partition() == 0
    assert err.code in ("UNAVAILABLE", "TIMED_OUT")


def test_producer_buffer_is_bounded_by_bytes() -> None:
    """queue.buffering.max.kbytes caps the bytes of records not yet delivered:
    produce refuses beyond it, and accepts again once records leave."""
    p = Producer(
        {
            "bootstrap.servers": "127.0.0.1:1",
            "acks": 1,  # no producer id needed: records wait in the open batch
            "linger.ms": 600_000,
            "queue.buffering.max.kbytes": 4,
        }
    )
    reports: list[tuple[CcrError | None, Message]] = []

    def report(err: CcrError | None, msg: Message) -> None:
        reports.append((err, msg))

    try:
        for _ in range(4):  # about 1,021 bytes each
            p.produce("t", b"v" * 1000, partition=0, on_delivery=report)
        with pytest.raises(BufferError, match=r"queue\.buffering\.max\.kbytes is 4"):
            p.produce("t", b"v" * 1000, partition=0)
        assert len(p) == 4
        p.purge()
        assert p.poll(0) == 4
        p.produce("t", b"v" * 1000, partition=1)
    finally:
        p.close(timeout=0)
    assert [e.code if e else None for e, _ in reports] == ["PURGED"] * 4


def test_transactional_producer_requires_begin() -> None:
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t1"})
    try:
        with pytest.raises(CcrError) as info:
            p.produce("t", b"x", partition=0)
        assert info.value.code == "INVALID_TXN_STATE"
        with pytest.raises(CcrError):
            p.begin_transaction()
    finally:
        p.close(timeout=0)
