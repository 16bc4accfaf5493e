"""The client library against a real daemon: topics, produce/consume, groups,
commits, transactions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from admin import (
    OFFSET_BEGINNING,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    AdminClient,
    CcrError,
    Consumer,
    Message,
    Producer,
    TopicPartition,
    murmur2_partition,
)
from tests.harness import Daemon

FAST_GROUP = {"heartbeat.interval.ms": 200, "session.timeout.ms": 6000}


def _admin(d: Daemon) -> AdminClient:
    return AdminClient({"bootstrap.servers": d.bootstrap, "request.timeout.ms": 10000})


def _consumer(d: Daemon, **conf: Any) -> Consumer:
    config: dict[str, Any] = {"bootstrap.servers": d.bootstrap, "auto.offset.reset": "earliest"}
    config.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(config)


def _drain(consumer: Consumer, want: int, timeout_s: float = 20.0) -> list[Message]:
    """Polls until `want` records arrived (fails on error messages or timeout)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    assert len(got) == want, f"got {len(got)} of {want} records"
    return got


def _quiet(consumer: Consumer, seconds: float) -> list[Message]:
    """Whatever arrives within `seconds` (used to check nothing more comes)."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None:
            got.append(msg)
    return got


def _wait_until(cond: Callable[[], bool], timeout_s: float, *pollers: Consumer) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in pollers:
            msg = c.poll(0.05)
            assert msg is None or msg.error() is None, msg.error()


def _produce_all(producer: Producer, topic: str, records: list[dict[str, Any]]) -> list[Message]:
    reports: list[tuple[CcrError | None, Message]] = []
    for rec in records:
        producer.produce(topic, on_delivery=lambda e, m: reports.append((e, m)), **rec)
    assert producer.flush(30) == 0
    assert [e for e, _ in reports if e is not None] == []
    return [m for _, m in reports]


@pytest.fixture
def daemon(module_daemon: Daemon) -> Daemon:
    """The module's tests share one daemon: each names its own topics and
    groups. A test that needs a cluster of its own makes one (daemon_factory)."""
    return module_daemon


# ---------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------


def test_topic_lifecycle(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it lists every topic
    with _admin(daemon) as admin:
        created = admin.create_topic("orders", 3, {"retention.ms": 60000})
        assert created.name == "orders" and created.partition_count == 3
        assert created.configs["retention.ms"] == "60000"
        assert [p.partition for p in created.partitions] == [0, 1, 2]
        desc = admin.describe_topic("orders")
        assert desc.topic_id == created.topic_id
        for p in desc.partitions:
            assert (p.log_start_offset, p.high_watermark, p.last_stable_offset) == (0, 0, 0)
            assert p.log_end_offset == 0
        admin.create_topic("payments")
        assert [t.name for t in admin.list_topics()] == ["orders", "payments"]
        assert all(not t.internal for t in admin.list_topics(include_internal=True))

        altered = admin.alter_topic_configs("orders", {"retention.ms": "1000"}, ["cleanup.policy"])
        assert altered.configs["retention.ms"] == "1000"
        grown = admin.create_partitions("orders", 5)
        assert grown.partition_count == 5 and len(grown.partitions) == 5

        with pytest.raises(CcrError) as info:
            admin.create_topic("orders")
        assert info.value.code == "TOPIC_ALREADY_EXISTS"
        with pytest.raises(CcrError) as info:
            admin.alter_topic_configs("orders", {"no.such.config": "1"})
        assert info.value.code == "INVALID_CONFIG"

        admin.delete_topic("orders")
        assert [t.name for t in admin.list_topics()] == ["payments"]
        with pytest.raises(CcrError) as info:
            admin.describe_topic("orders")
        assert info.value.code == "UNKNOWN_TOPIC"
        assert "orders" in info.value.message
        with pytest.raises(CcrError) as info:
            admin.delete_topic("orders")
        assert info.value.code == "UNKNOWN_TOPIC"


def test_health_and_describe_cluster(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it counts the topics
    with _admin(daemon) as admin:
        health = admin.health()
        assert health.status == "SERVING" and health.cluster_id == "test"
        admin.create_topic("t")
        info = admin.describe_cluster()
        assert info.cluster_id == "test" and info.topic_count == 1


# ---------------------------------------------------------------------------
# Produce / consume
# ---------------------------------------------------------------------------


def test_produce_consume_keys_headers_offsets(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("events", 3)
    producer = Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 2})
    records = [
        {
            "key": f"user-{i % 7}",
            "value": f"event-{i}",
            "headers": [("seq", str(i).encode()), ("src", b"test")],
            "timestamp": 1_700_000_000_000 + i,
        }
        for i in range(60)
    ]
    delivered = _produce_all(producer, "events", records)
    producer.close()
    # Keys land where Kafka's default partitioner puts them.
    for msg in delivered:
        assert msg.partition() == murmur2_partition(msg.key() or b"", 3)
    # Offsets per partition are consecutive from 0, in produce order.
    by_part: dict[int, list[int]] = {}
    for msg in delivered:
        by_part.setdefault(msg.partition() or 0, []).append(msg.offset() or 0)
    for offsets in by_part.values():
        assert sorted(offsets) == list(range(len(offsets)))

    consumer = _consumer(daemon)
    consumer.assign([TopicPartition("events", p, OFFSET_BEGINNING) for p in range(3)])
    got = _drain(consumer, 60)
    assert _quiet(consumer, 0.3) == []
    consumer.close()

    def view(m: Message) -> tuple[Any, ...]:
        return (m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()))

    assert sorted(map(view, got)) == sorted(map(view, delivered))
    for msg in got:
        seq = int(dict(msg.headers() or [])["seq"] or b"0")
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + seq)
    # Within a partition, records come back in offset order.
    for p in range(3):
        offsets = [m.offset() or 0 for m in got if m.partition() == p]
        assert offsets == sorted(offsets)


def test_many_records_batched_in_order(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("bulk", 2)
    producer = Producer(
        {"bootstrap.servers": daemon.bootstrap, "linger.ms": 20, "batch.size": 16384}
    )
    n = 4000
    for i in range(n):
        while True:
            try:
                producer.produce("bulk", value=f"{i:06d}", partition=i % 2)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    assert len(producer) == 0
    producer.close()
    with _admin(daemon) as admin:
        desc = admin.describe_topic("bulk")
    assert [p.high_watermark for p in desc.partitions] == [n // 2, n // 2]
    consumer = _consumer(daemon)
    consumer.assign([TopicPartition("bulk", 0, 0), TopicPartition("bulk", 1, 0)])
    got = _drain(consumer, n, timeout_s=60)
    consumer.close()
    for p in (0, 1):
        values = [int(m.value() or b"") for m in got if m.partition() == p]
        assert values == list(range(p, n, 2))


def test_keyless_records_spread_over_partitions(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("spread", 4)
    producer = Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 0})
    parts = set()
    for i in range(40):
        delivered = _produce_all(producer, "spread", [{"value": f"v{i}"}])
        parts.add(delivered[0].partition())
    producer.close()
    assert len(parts) > 1


def test_list_offsets(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("ts", 1)
        producer = Producer({"bootstrap.servers": daemon.bootstrap})
        _produce_all(
            producer, "ts", [{"value": f"v{i}", "timestamp": 1000 * (i + 1)} for i in range(5)]
        )
        producer.close()
        assert admin.list_offsets("ts", 0, "earliest").offset == 0
        assert admin.list_offsets("ts", 0, "latest").offset == 5
        assert admin.list_offsets("ts", 0, 2500).offset == 2
        assert admin.list_offsets("ts", 0, 99999).offset == -1
        assert admin.list_offsets("ts", 0, "max_timestamp").offset == 4
        with pytest.raises(CcrError) as info:
            admin.list_offsets("ts", 7, "latest")
        assert info.value.code == "UNKNOWN_PARTITION"


def test_produce_errors(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("small", 1, {"max.message.bytes": 2000})
    producer = Producer({"bootstrap.servers": daemon.bootstrap, "delivery.timeout.ms": 10000})
    with pytest.raises(CcrError) as info:
        producer.produce("nope", b"x")
    assert info.value.code == "UNKNOWN_TOPIC"
    reports: list[tuple[CcrError | None, Message]] = []
    producer.produce("small", b"x", partition=9, on_delivery=lambda e, m: reports.append((e, m)))
    producer.produce("small", b"y" * 5000, on_delivery=lambda e, m: reports.append((e, m)))
    producer.produce("small", b"ok", on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(20) == 0
    producer.close()
    codes = sorted(e.code if e else "OK" for e, _ in reports)
    assert codes == ["OK", "RECORD_TOO_LARGE", "UNKNOWN_PARTITION"]
    # KIP-467: one batch to a compacted topic, its second record without a
    # key: that record is named, the others were refused for sharing the batch.
    with _admin(daemon) as admin:
        admin.create_topic("keyed-grpc", 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": daemon.bootstrap, "linger.ms": 300})
    told: dict[bytes, CcrError | None] = {}
    for key, value in ((b"k", b"a"), (None, b"b"), (b"k", b"c")):
        producer.produce("keyed-grpc", value, key=key, partition=0,
                         on_delivery=lambda e, m: told.__setitem__(m.value(), e))
    assert producer.flush(20) == 0
    producer.close()
    assert {v: e.code if e else "OK" for v, e in told.items()} == {
        b"a": "INVALID_DIFFERENT_RECORD", b"b": "INVALID_RECORD",
        b"c": "INVALID_DIFFERENT_RECORD"}
    refused = told[b"b"]
    assert refused is not None and "without key" in refused.message
    assert [i for i, _ in refused.record_errors] == [1]


def test_consumer_watermarks_positions_and_seek(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("seek", 1)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "seek", [{"value": f"v{i}"} for i in range(10)])
    producer.close()
    consumer = _consumer(daemon)
    tp = TopicPartition("seek", 0, 4)
    assert consumer.get_watermark_offsets(tp) == (0, 10)
    consumer.assign([tp])
    got = _drain(consumer, 6)
    assert [m.offset() for m in got] == list(range(4, 10))
    assert consumer.position([tp])[0].offset == 10
    consumer.seek(TopicPartition("seek", 0, 1))
    assert _drain(consumer, 1)[0].offset() == 1
    consumer.seek(TopicPartition("seek", 0, OFFSET_BEGINNING))
    assert _drain(consumer, 1)[0].offset() == 0
    assert consumer.assignment() == [TopicPartition("seek", 0)]
    consumer.close()
    with pytest.raises(RuntimeError):
        consumer.poll(0)


def test_latest_reset_sees_only_new_records(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("live", 1)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "live", [{"value": "old"}])
    consumer = _consumer(daemon, auto_offset_reset="latest")
    consumer.assign([TopicPartition("live", 0)])
    assert _quiet(consumer, 0.5) == []
    _produce_all(producer, "live", [{"value": "new"}])
    assert [m.value() for m in _drain(consumer, 1)] == [b"new"]
    consumer.close()
    producer.close()


# ---------------------------------------------------------------------------
# Consumer groups
# ---------------------------------------------------------------------------


def test_group_two_members_split_then_one_takes_over(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("work", 4)
    assigned: dict[str, list[TopicPartition]] = {"a": [], "b": []}
    revoked: dict[str, int] = {"a": 0, "b": 0}

    def member(name: str) -> Consumer:
        c = _consumer(daemon, group_id="workers", client_id=name, **FAST_GROUP)
        c.subscribe(
            ["work"],
            on_assign=lambda _c, parts: assigned.__setitem__(name, list(parts)),
            on_revoke=lambda _c, parts: revoked.__setitem__(name, revoked[name] + 1),
        )
        return c

    a = member("a")
    _wait_until(lambda: len(assigned["a"]) == 4, 20, a)
    assert a.assignment() == [TopicPartition("work", p) for p in range(4)]

    b = member("b")
    _wait_until(lambda: len(assigned["a"]) == 2 and len(assigned["b"]) == 2, 30, a, b)
    assert revoked["a"] >= 1
    split = sorted(tp.partition for tp in assigned["a"] + assigned["b"])
    assert split == [0, 1, 2, 3]
    # Range assignment: each member owns two contiguous partitions.
    for parts in (assigned["a"], assigned["b"]):
        ps = sorted(tp.partition for tp in parts)
        assert ps in ([0, 1], [2, 3])
    with _admin(daemon) as admin:
        desc = admin.describe_group("workers")
        assert desc.state == "Stable" and len(desc.members) == 2
        assert desc.protocol_type == "consumer" and desc.protocol_name == "range"
        owned = sorted(tp.partition for m in desc.members for tp in m.assignment)
        assert owned == [0, 1, 2, 3]

    # Records produced now reach both members.
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "work", [{"value": f"v{i}", "partition": i % 4} for i in range(8)])
    got: list[Message] = []
    deadline = time.monotonic() + 20
    while len(got) < 8 and time.monotonic() < deadline:
        for c in (a, b):
            msg = c.poll(0.05)
            if msg is not None:
                assert msg.error() is None
                got.append(msg)
    assert sorted(m.value() or b"" for m in got) == sorted(f"v{i}".encode() for i in range(8))

    b.close()
    _wait_until(lambda: len(assigned["a"]) == 4, 30, a)
    with _admin(daemon) as admin:
        desc = admin.describe_group("workers")
        assert len(desc.members) == 1
    _produce_all(producer, "work", [{"value": f"w{i}", "partition": i % 4} for i in range(4)])
    assert sorted(m.value() or b"" for m in _drain(a, 4)) == [b"w0", b"w1", b"w2", b"w3"]
    producer.close()
    a.close()
    with _admin(daemon) as admin:
        assert admin.describe_group("workers").state == "Empty"
        listing = {g.group_id: g for g in admin.list_groups()}
        assert listing["workers"].protocol_type == "consumer"


def test_commit_committed_and_resume(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("jobs", 2)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "jobs", [{"value": f"j{i}", "partition": i % 2} for i in range(10)])
    producer.close()

    c1 = _consumer(daemon, group_id="g", enable_auto_commit=False, **FAST_GROUP)
    c1.subscribe(["jobs"])
    first = _drain(c1, 4)
    last_by_part: dict[int, Message] = {}
    for m in first:
        last_by_part[m.partition() or 0] = m
    for m in last_by_part.values():
        committed = c1.commit(message=m)
        assert committed is not None and committed[0].offset == (m.offset() or 0) + 1
    tps = [TopicPartition("jobs", 0), TopicPartition("jobs", 1)]
    expected = {p: (last_by_part[p].offset() or 0) + 1 if p in last_by_part else -1 for p in (0, 1)}
    for tp in c1.committed(tps):
        assert tp.offset == (
            expected[tp.partition] if expected[tp.partition] >= 0 else OFFSET_INVALID
        )
    c1.close()

    # A new member resumes after the committed offsets: exactly the rest.
    c2 = _consumer(daemon, group_id="g", enable_auto_commit=False, **FAST_GROUP)
    c2.subscribe(["jobs"])
    seen_before = {(m.partition(), m.offset()) for m in first}
    committed_set = {(p, o) for p in (0, 1) for o in range(max(expected[p], 0)) if expected[p] >= 0}
    rest = _drain(c2, 10 - len(committed_set))
    assert {(m.partition(), m.offset()) for m in rest}.isdisjoint(committed_set)
    assert committed_set <= seen_before
    c2.commit()  # the current positions
    assert {tp.partition: tp.offset for tp in c2.committed(tps)} == {0: 5, 1: 5}
    c2.close()
    with _admin(daemon) as admin:
        lags = admin.group_lag("g")
        assert [(lag.partition, lag.committed, lag.lag) for lag in lags] == [(0, 5, 0), (1, 5, 0)]
        offsets = admin.list_consumer_group_offsets("g")
        assert [(tp.partition, tp.offset) for tp in offsets] == [(0, 5), (1, 5)]


def test_auto_commit_on_close_and_standalone_assign(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("auto", 1)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "auto", [{"value": f"a{i}"} for i in range(6)])
    producer.close()
    # assign() with a group: commits as a standalone consumer (generation -1).
    c = _consumer(daemon, group_id="solo")
    c.assign([TopicPartition("auto", 0)])
    _drain(c, 6)
    c.close()  # auto-commit on close
    c = _consumer(daemon, group_id="solo")
    assert c.committed([TopicPartition("auto", 0)])[0].offset == 6
    c.assign([TopicPartition("auto", 0)])
    assert _quiet(c, 0.5) == []
    assert c.position([TopicPartition("auto", 0)])[0].offset == 6
    c.close()


def test_commit_without_group_fails(daemon: Daemon) -> None:
    c = _consumer(daemon)
    with pytest.raises(CcrError) as info:
        c.commit(offsets=[TopicPartition("x", 0, 1)])
    assert info.value.code == "INVALID_GROUP_ID"
    c.close()


# ---------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------


def _txn_producer(d: Daemon, txid: str) -> Producer:
    p = Producer({"bootstrap.servers": d.bootstrap, "transactional.id": txid})
    p.init_transactions(20)
    return p


def test_transactions_commit_and_abort_read_committed(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("txn", 2)
    producer = _txn_producer(daemon, "tx-1")

    producer.begin_transaction()
    for i in range(6):
        producer.produce("txn", value=f"committed-1-{i}", partition=i % 2)
    producer.commit_transaction(20)

    producer.begin_transaction()
    for i in range(6):
        producer.produce("txn", value=f"aborted-{i}", partition=i % 2)
    assert producer.flush(20) == 0  # written, then aborted
    producer.abort_transaction(20)

    producer.begin_transaction()
    for i in range(4):
        producer.produce("txn", value=f"committed-2-{i}", partition=i % 2)
    producer.commit_transaction(20)

    # An open transaction keeps the LSO behind the high watermark.
    producer.begin_transaction()
    producer.produce("txn", value="pending", partition=0)
    assert producer.flush(20) == 0
    with _admin(daemon) as admin:
        p0 = admin.describe_topic("txn").partitions[0]
        assert p0.last_stable_offset < p0.high_watermark

    committed = _consumer(daemon, isolation_level="read_committed")
    committed.assign([TopicPartition("txn", p, OFFSET_BEGINNING) for p in range(2)])
    got = _drain(committed, 10)
    values = sorted((m.value() or b"").decode() for m in got)
    assert values == sorted(
        [f"committed-1-{i}" for i in range(6)] + [f"committed-2-{i}" for i in range(4)]
    )
    assert _quiet(committed, 0.5) == []  # nothing aborted, nothing pending

    producer.commit_transaction(20)
    assert [m.value() for m in _drain(committed, 1)] == [b"pending"]
    committed.close()

    uncommitted = _consumer(daemon, isolation_level="read_uncommitted")
    uncommitted.assign([TopicPartition("txn", p, OFFSET_BEGINNING) for p in range(2)])
    everything = _drain(uncommitted, 17)
    assert sum(1 for m in everything if (m.value() or b"").startswith(b"aborted")) == 6
    assert _quiet(uncommitted, 0.3) == []  # control records are never returned
    uncommitted.close()
    producer.close()
    with _admin(daemon) as admin:
        for p in admin.describe_topic("txn").partitions:
            assert p.last_stable_offset == p.high_watermark


def test_read_committed_group_consumer_skips_aborted(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("mixed", 1)
    producer = _txn_producer(daemon, "tx-mixed")
    plain = Producer({"bootstrap.servers": daemon.bootstrap})
    for round_ in range(3):
        producer.begin_transaction()
        producer.produce("mixed", value=f"t{round_}", partition=0)
        _produce_all(plain, "mixed", [{"value": f"p{round_}", "partition": 0}])
        if round_ == 1:
            producer.abort_transaction(20)
        else:
            producer.commit_transaction(20)
    plain.close()
    producer.close()
    c = _consumer(daemon, group_id="rc", isolation_level="read_committed", **FAST_GROUP)
    c.subscribe(["mixed"])
    values = sorted(m.value() or b"" for m in _drain(c, 5))
    assert values == [b"p0", b"p1", b"p2", b"t0", b"t2"]
    assert _quiet(c, 0.5) == []
    c.close()


def test_send_offsets_to_transaction(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("in", 1)
        admin.create_topic("out", 1)
    plain = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(plain, "in", [{"value": f"in-{i}"} for i in range(5)])
    plain.close()

    consumer = _consumer(
        daemon,
        group_id="etl",
        enable_auto_commit=False,
        isolation_level="read_committed",
        **FAST_GROUP,
    )
    consumer.subscribe(["in"])
    inputs = _drain(consumer, 5)
    producer = _txn_producer(daemon, "etl-tx")

    producer.begin_transaction()
    for m in inputs:
        producer.produce("out", value=(m.value() or b"").upper())
    positions = consumer.position([TopicPartition("in", 0)])
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 20)
    # Not committed until the transaction commits.
    assert consumer.committed([TopicPartition("in", 0)])[0].offset == OFFSET_INVALID
    producer.commit_transaction(20)
    assert consumer.committed([TopicPartition("in", 0)])[0].offset == 5

    # An aborted transaction's offsets are dropped.
    producer.begin_transaction()
    producer.produce("out", value=b"discarded")
    producer.send_offsets_to_transaction(
        [TopicPartition("in", 0, 3)], consumer.consumer_group_metadata(), 20
    )
    producer.abort_transaction(20)
    assert consumer.committed([TopicPartition("in", 0)])[0].offset == 5
    consumer.close()
    producer.close()

    reader = _consumer(daemon, isolation_level="read_committed")
    reader.assign([TopicPartition("out", 0, 0)])
    assert sorted(m.value() or b"" for m in _drain(reader, 5)) == [
        f"IN-{i}".encode() for i in range(5)
    ]
    assert _quiet(reader, 0.3) == []
    reader.close()


def test_newer_transactional_producer_fences_older(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("fence", 1)
    old = _txn_producer(daemon, "shared-id")
    old.begin_transaction()
    old.produce("fence", value=b"old", partition=0)
    assert old.flush(20) == 0
    new = _txn_producer(daemon, "shared-id")  # fences `old`, aborting its transaction
    with pytest.raises(CcrError) as info:
        old.commit_transaction(20)
    assert info.value.code == "INVALID_PRODUCER_EPOCH"
    assert info.value.fatal
    new.begin_transaction()
    new.produce("fence", value=b"new", partition=0)
    new.commit_transaction(20)
    new.close()
    old.close(timeout=0)
    reader = _consumer(daemon, isolation_level="read_committed")
    reader.assign([TopicPartition("fence", 0, 0)])
    assert [m.value() for m in _drain(reader, 1)] == [b"new"]
    assert _quiet(reader, 0.3) == []
    reader.close()


def test_idempotent_producer_survives_daemon_restart(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it restarts the daemon
    with _admin(daemon) as admin:
        admin.create_topic("durable", 1)
    producer = Producer(
        {
            "bootstrap.servers": daemon.bootstrap,
            "retry.backoff.ms": 50,
            "delivery.timeout.ms": 60000,
        }
    )
    _produce_all(producer, "durable", [{"value": f"before-{i}"} for i in range(5)])
    daemon.restart()
    _produce_all(producer, "durable", [{"value": f"after-{i}"} for i in range(5)])
    producer.close()
    with _admin(daemon) as admin:
        assert admin.describe_topic("durable").partitions[0].high_watermark == 10
    reader = _consumer(daemon)
    reader.assign([TopicPartition("durable", 0, 0)])
    values = [m.value() for m in _drain(reader, 10)]
    assert values == [f"before-{i}".encode() for i in range(5)] + [
        f"after-{i}".encode() for i in range(5)
    ]
    reader.close()


# ---------------------------------------------------------------------------
# More group and timestamp behaviour
# ---------------------------------------------------------------------------


def test_log_append_time_topic(daemon: Daemon) -> None:
    from admin import TIMESTAMP_LOG_APPEND_TIME

    with _admin(daemon) as admin:
        admin.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    before = int(time.time() * 1000)
    (report,) = _produce_all(producer, "appended", [{"value": "x", "timestamp": 1000}])
    producer.close()
    kind, ts = report.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before - 1000
    consumer = _consumer(daemon)
    consumer.assign([TopicPartition("appended", 0, 0)])
    (msg,) = _drain(consumer, 1)
    consumer.close()
    assert msg.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME and msg.timestamp()[1] >= before - 1000


def test_regex_subscription(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        for name in ("re-a", "re-b", "other"):
            admin.create_topic(name, 1)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    for name in ("re-a", "re-b", "other"):
        _produce_all(producer, name, [{"value": name}])
    producer.close()
    c = _consumer(daemon, group_id="re", **FAST_GROUP)
    c.subscribe(["^re-.*"])
    assert sorted(m.value() or b"" for m in _drain(c, 2)) == [b"re-a", b"re-b"]
    assert c.assignment() == [TopicPartition("re-a", 0), TopicPartition("re-b", 0)]
    assert _quiet(c, 0.3) == []
    c.close()


def test_member_that_stops_polling_loses_its_partitions(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("slow", 2)
    conf = {**FAST_GROUP, "max.poll.interval.ms": 1500}
    a = _consumer(daemon, group_id="slowpoke", client_id="a", **conf)
    b = _consumer(daemon, group_id="slowpoke", client_id="b", **conf)
    a.subscribe(["slow"])
    b.subscribe(["slow"])
    _wait_until(lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, 30, a, b)
    # `a` stops polling: it leaves after max.poll.interval.ms and `b` takes over.
    _wait_until(lambda: len(b.assignment()) == 2, 30, b)
    # `a` comes back on its next poll, which first reports what happened.
    errors = []
    deadline = time.monotonic() + 30
    while not (len(a.assignment()) == 1 and len(b.assignment()) == 1):
        assert time.monotonic() < deadline
        for c in (a, b):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
    assert [e.code for e in errors if e is not None] == ["MAX_POLL_EXCEEDED"]
    a.close()
    b.close()


def test_group_member_survives_daemon_restart(daemon_factory: Callable[..., Daemon]) -> None:
    daemon = daemon_factory("test")  # a cluster of its own: it restarts the daemon
    with _admin(daemon) as admin:
        admin.create_topic("resilient", 1)
    producer = Producer({"bootstrap.servers": daemon.bootstrap, "retry.backoff.ms": 50})
    _produce_all(producer, "resilient", [{"value": "one"}])
    c = _consumer(daemon, group_id="phoenix", **FAST_GROUP)
    c.subscribe(["resilient"])
    assert [m.value() for m in _drain(c, 1)] == [b"one"]
    c.commit()
    daemon.restart()
    _produce_all(producer, "resilient", [{"value": "two"}])
    producer.close()
    # After the restart the member is unknown: it rejoins. Records after the last
    # commit may come twice (at least once), never lost.
    got: list[bytes | None] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
        if got and c.position([TopicPartition("resilient", 0)])[0].offset == 2:
            with _admin(daemon) as admin:
                if admin.describe_group("phoenix").state == "Stable":
                    break  # rejoined: a commit now carries the new generation
    assert set(got) == {b"two"}
    c.close()
    with _admin(daemon) as admin:
        assert admin.list_consumer_group_offsets("phoenix")[0].offset == 2


def test_consume_batch_and_pause_resume(daemon: Daemon) -> None:
    with _admin(daemon) as admin:
        admin.create_topic("batchy", 2)
    producer = Producer({"bootstrap.servers": daemon.bootstrap})
    _produce_all(producer, "batchy", [{"value": f"v{i}", "partition": i % 2} for i in range(20)])
    producer.close()
    c = _consumer(daemon)
    c.assign([TopicPartition("batchy", 0, 0), TopicPartition("batchy", 1, 0)])
    c.pause([TopicPartition("batchy", 1)])
    msgs = c.consume(num_messages=50, timeout=1.0)
    assert {m.partition() for m in msgs} == {0} and len(msgs) == 10
    c.resume([TopicPartition("batchy", 1)])
    msgs = c.consume(num_messages=10, timeout=10.0)
    assert {m.partition() for m in msgs} == {1} and len(msgs) == 10
    c.close()
