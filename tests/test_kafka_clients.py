"""Unmodified Kafka clients (confluent-kafka / librdkafka) against linkd's Kafka
listener: produce, consume, groups, transactions, and the same log over gRPC.

One real daemon serves the whole module (each test uses its own topics and
groups). Waits are bounded polls; data is derived from indexes, never random.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from ccr.v1 import cluster_pb2, cluster_pb2_grpc
from linkd.core import records as rb
from tests.harness import Daemon, free_port

BASE_TS = 1_700_000_000_000
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


class KafkaCluster:
    def __init__(self, daemon: Daemon, kafka_port: int) -> None:
        self.daemon = daemon
        self.bootstrap = f"127.0.0.1:{kafka_port}"
        self._admin: AdminClient | None = None

    def admin(self) -> AdminClient:
        # One client for the module: futures fail if their client is collected.
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def producer(self, **conf: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **conf})

    def consumer(self, group: str, **conf: Any) -> Consumer:
        config = {"bootstrap.servers": self.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf}
        return Consumer(config)

    def create_topic(self, name: str, partitions: int = 1, **configs: str) -> None:
        # Fixed timestamps lie in the past: time retention would delete them.
        configs = {"retention.ms": "-1", **configs}
        futures = self.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)])
        futures[name].result(20)

    def grpc_stub(self) -> tuple[grpc.Channel, cluster_pb2_grpc.ClusterStub]:
        channel = grpc.insecure_channel(self.daemon.bootstrap)
        return channel, cluster_pb2_grpc.ClusterStub(channel)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("kafka-clients")) / "data"
    daemon = Daemon("K", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"])
    with daemon:
        yield KafkaCluster(daemon, port)


# -- helpers --------------------------------------------------------------------------


def produce_all(producer: Producer, topic: str, records: list[dict[str, Any]]) -> list[Message]:
    """Produces every record and waits for every delivery report (all must succeed)."""
    reports: list[tuple[KafkaError | None, Message]] = []
    for rec in records:
        producer.produce(topic, on_delivery=lambda e, m: reports.append((e, m)), **rec)
    assert producer.flush(30) == 0
    assert [e for e, _ in reports if e is not None] == []
    assert len(reports) == len(records)
    return [m for _, m in reports]


def drain(consumer: Consumer, want: int, timeout_s: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            err = msg.error()
            assert err is not None and err.code() == KafkaError._PARTITION_EOF, err
            continue
        got.append(msg)
    assert len(got) == want, f"got {len(got)} of {want} records"
    return got


def quiet(consumer: Consumer, seconds: float) -> list[Message]:
    """Everything (but EOF events) that arrives within `seconds`."""
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got


def wait_until(cond: Callable[[], bool], timeout_s: float, *pollers: Consumer) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in pollers:
            msg = c.poll(0.05)
            assert msg is None or msg.error() is None, msg.error()
        if not pollers:
            time.sleep(0.05)


def record(i: int, partition: int | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "key": f"key-{i}".encode(),
        "value": f"value-{i}-".encode() * (1 + i % 7),
        "headers": [("idx", str(i).encode()), ("empty", b""), ("none", None)],
        "timestamp": BASE_TS + i,
    }
    if partition is not None:
        rec["partition"] = partition
    return rec


def value(m: Message) -> bytes:
    """A record's value (every record here has one)."""
    v = m.value()
    assert isinstance(v, bytes)
    return v


def offset(m: Message) -> int:
    o = m.offset()
    assert o is not None
    return o


def as_tuple(m: Message) -> tuple[Any, ...]:
    return (m.partition(), m.offset(), m.key(), m.value(), m.headers(), m.timestamp())


# -- produce and consume ----------------------------------------------------------------


def test_produce_with_keys_headers_timestamps_then_assign_and_consume(
    kafka: KafkaCluster,
) -> None:
    kafka.create_topic("plain", partitions=3)
    producer = kafka.producer()
    sent = produce_all(producer, "plain", [record(i, partition=i % 3) for i in range(30)])
    for p in range(3):
        offsets = [m.offset() for m in sent if m.partition() == p]
        assert offsets == list(range(10)), "offsets are dense per partition, from 0"

    consumer = kafka.consumer("plain-reader")
    consumer.assign([TopicPartition("plain", p, OFFSET_BEGINNING) for p in range(3)])
    got = drain(consumer, 30)
    consumer.close()
    by_index = {int(dict(m.headers() or [])["idx"] or b""): m for m in got}
    assert sorted(by_index) == list(range(30))
    for i, m in by_index.items():
        expected = record(i)
        assert m.partition() == i % 3
        assert m.offset() == i // 3
        assert m.key() == expected["key"]
        assert m.value() == expected["value"]
        assert m.headers() == [("idx", str(i).encode()), ("empty", b""), ("none", None)]
        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, BASE_TS + i)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec_is_stored_as_sent_and_read_back(
    kafka: KafkaCluster, codec: str
) -> None:
    topic = f"codec-{codec}"
    kafka.create_topic(topic)
    producer = kafka.producer(**{"compression.type": codec, "linger.ms": 50})
    records = [{"key": f"k{i}".encode(), "value": (f"v{i}" * 20).encode()} for i in range(200)]
    produce_all(producer, topic, records)

    consumer = kafka.consumer(f"codec-{codec}")
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = drain(consumer, 200)
    consumer.close()
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, r["key"], r["value"]) for i, r in enumerate(records)
    ]

    # The stored batches carry the client's codec: nothing was recompressed.
    channel, stub = kafka.grpc_stub()
    with channel:
        fetched = stub.Fetch(cluster_pb2.FetchRequest(
            partitions=[cluster_pb2.FetchPartition(topic=topic, partition=0, offset=0,
                                                   max_bytes=1 << 22)],
            max_wait_ms=0), timeout=10)
    codecs = {header.compression for _pos, header in rb.iter_batches(
        fetched.partitions[0].records)}
    wanted = {"none": rb.COMPRESSION_NONE, "gzip": rb.COMPRESSION_GZIP,
              "snappy": rb.COMPRESSION_SNAPPY, "lz4": rb.COMPRESSION_LZ4,
              "zstd": rb.COMPRESSION_ZSTD}[codec]
    assert codecs == {wanted}


def test_idempotent_producer_pipelines_without_duplicates_or_gaps(kafka: KafkaCluster) -> None:
    kafka.create_topic("idem", partitions=2)
    producer = kafka.producer(**{"enable.idempotence": True, "linger.ms": 1,
                                 "batch.num.messages": 50,
                                 "max.in.flight.requests.per.connection": 5})
    records = [{"value": f"{i:06d}".encode(), "partition": i % 2} for i in range(4000)]
    produce_all(producer, "idem", records)
    consumer = kafka.consumer("idem-reader")
    consumer.assign([TopicPartition("idem", p, OFFSET_BEGINNING) for p in range(2)])
    got = drain(consumer, 4000)
    assert quiet(consumer, 0.5) == []
    consumer.close()
    for p in range(2):
        values = [int(value(m)) for m in got if m.partition() == p]
        assert values == list(range(p, 4000, 2)), "in order, each exactly once"
        assert [m.offset() for m in got if m.partition() == p] == list(range(2000))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_every_acks_setting_delivers(kafka: KafkaCluster, acks: int | str) -> None:
    topic = f"acks-{acks}"
    kafka.create_topic(topic)
    produce_all(kafka.producer(acks=acks), topic, [{"value": f"a{i}".encode()} for i in range(50)])
    consumer = kafka.consumer(f"acks-{acks}")
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = drain(consumer, 50)
    consumer.close()
    assert [m.value() for m in got] == [f"a{i}".encode() for i in range(50)]


# -- groups -----------------------------------------------------------------------------


def test_commit_with_metadata_and_resume_from_committed(kafka: KafkaCluster) -> None:
    kafka.create_topic("resume", partitions=2)
    produce_all(kafka.producer(), "resume",
                [{"value": f"r{i}".encode(), "partition": i % 2} for i in range(40)])
    first = kafka.consumer("resumers")
    first.assign([TopicPartition("resume", p) for p in range(2)])
    got = drain(first, 40)
    assert len(got) == 40
    first.commit(offsets=[TopicPartition("resume", 0, 7, metadata="p0-meta"),
                          TopicPartition("resume", 1, 12, metadata="p1-meta")],
                 asynchronous=False)
    first.close()

    second = kafka.consumer("resumers")
    committed = second.committed([TopicPartition("resume", p) for p in range(2)], timeout=10)
    assert [(c.partition, c.offset, c.metadata) for c in committed] == [
        (0, 7, "p0-meta"), (1, 12, "p1-meta")]
    second.assign([TopicPartition("resume", p) for p in range(2)])
    resumed = drain(second, (20 - 7) + (20 - 12))
    second.close()
    assert sorted(offset(m) for m in resumed if m.partition() == 0) == list(range(7, 20))
    assert sorted(offset(m) for m in resumed if m.partition() == 1) == list(range(12, 20))


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_subscribe_two_members_split_partitions_then_one_takes_over(
    kafka: KafkaCluster, assignor: str
) -> None:
    topic = f"split-{assignor}"
    group = f"splitters-{assignor}"
    kafka.create_topic(topic, partitions=4)
    conf = {**FAST_GROUP, "partition.assignment.strategy": assignor}
    first = kafka.consumer(group, **conf)
    second = kafka.consumer(group, **conf)
    first.subscribe([topic])
    wait_until(lambda: len(first.assignment()) == 4, 30, first)
    second.subscribe([topic])

    def split() -> bool:
        a = {tp.partition for tp in first.assignment()}
        b = {tp.partition for tp in second.assignment()}
        return len(a) == 2 and len(b) == 2 and a | b == {0, 1, 2, 3}

    wait_until(split, 45, first, second)

    produce_all(kafka.producer(), topic,
                [{"value": f"s{i}".encode(), "partition": i % 4} for i in range(40)])
    seen: dict[int, list[Message]] = {0: [], 1: []}

    def all_seen() -> bool:
        for idx, c in enumerate((first, second)):
            msg = c.poll(0.05)
            if msg is not None and msg.error() is None:
                seen[idx].append(msg)
        return len(seen[0]) + len(seen[1]) == 40

    wait_until(all_seen, 30)
    assert {m.partition() for m in seen[0]}.isdisjoint({m.partition() for m in seen[1]})
    first.commit(asynchronous=False)
    second.commit(asynchronous=False)
    second.close()  # LeaveGroup: the survivor takes every partition over
    wait_until(lambda: len(first.assignment()) == 4, 45, first)
    produce_all(kafka.producer(), topic,
                [{"value": f"t{i}".encode(), "partition": i % 4} for i in range(8)])
    later = drain(first, 8)
    first.close()
    assert sorted(value(m) for m in later) == sorted(f"t{i}".encode() for i in range(8))


# -- transactions -------------------------------------------------------------------------


def test_transactions_commit_and_abort_and_read_committed_skips_aborted(
    kafka: KafkaCluster,
) -> None:
    kafka.create_topic("txn", partitions=2)
    producer = kafka.producer(**{"transactional.id": "txn-writer"})
    producer.init_transactions(20)
    for batch, outcome in enumerate(("commit", "abort", "commit", "abort", "commit")):
        producer.begin_transaction()
        for i in range(10):
            producer.produce("txn", value=f"{outcome}-{batch}-{i}".encode(), partition=i % 2)
        producer.flush(20)
        if outcome == "commit":
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)

    committed_reader = kafka.consumer("txn-rc", **{"isolation.level": "read_committed"})
    committed_reader.assign([TopicPartition("txn", p, OFFSET_BEGINNING) for p in range(2)])
    got = drain(committed_reader, 30)
    assert quiet(committed_reader, 1.0) == []
    committed_reader.close()
    assert all(value(m).startswith(b"commit-") for m in got)
    assert sorted(value(m) for m in got) == sorted(
        f"commit-{b}-{i}".encode() for b in (0, 2, 4) for i in range(10))

    raw_reader = kafka.consumer("txn-ru", **{"isolation.level": "read_uncommitted"})
    raw_reader.assign([TopicPartition("txn", p, OFFSET_BEGINNING) for p in range(2)])
    everything = drain(raw_reader, 50)
    raw_reader.close()
    assert sum(value(m).startswith(b"abort-") for m in everything) == 20


def test_read_committed_consumer_waits_for_an_open_transaction(kafka: KafkaCluster) -> None:
    kafka.create_topic("txn-open")
    producer = kafka.producer(**{"transactional.id": "txn-open-writer"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("txn-open", value=b"pending")
    producer.flush(20)
    reader = kafka.consumer("txn-open-rc", **{"isolation.level": "read_committed"})
    reader.assign([TopicPartition("txn-open", 0, OFFSET_BEGINNING)])
    assert quiet(reader, 1.0) == [], "nothing is readable below an open transaction"
    producer.commit_transaction(20)
    assert [m.value() for m in drain(reader, 1)] == [b"pending"]
    reader.close()


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_consume_transform_produce_with_send_offsets_to_transaction(
    kafka: KafkaCluster, outcome: str
) -> None:
    source, sink, group = f"eos-in-{outcome}", f"eos-out-{outcome}", f"eos-{outcome}"
    kafka.create_topic(source)
    kafka.create_topic(sink)
    produce_all(kafka.producer(), source, [{"value": f"in{i}".encode()} for i in range(10)])

    consumer = kafka.consumer(group, **{"isolation.level": "read_committed", **FAST_GROUP})
    consumer.subscribe([source])
    inputs = drain(consumer, 10)
    producer = kafka.producer(**{"transactional.id": f"eos-{outcome}"})
    producer.init_transactions(20)
    producer.begin_transaction()
    for m in inputs:
        producer.produce(sink, value=value(m).replace(b"in", b"out"))
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 20)
    if outcome == "commit":
        producer.commit_transaction(20)
    else:
        producer.abort_transaction(20)
    committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
    consumer.close()
    assert committed[0].offset == (10 if outcome == "commit" else -1001)

    reader = kafka.consumer(f"{group}-check", **{"isolation.level": "read_committed"})
    reader.assign([TopicPartition(sink, 0, OFFSET_BEGINNING)])
    outputs = drain(reader, 10) if outcome == "commit" else quiet(reader, 1.0)
    reader.close()
    expected = [f"out{i}".encode() for i in range(10)] if outcome == "commit" else []
    assert [m.value() for m in outputs] == expected


def test_a_new_transactional_producer_fences_the_old_one(kafka: KafkaCluster) -> None:
    kafka.create_topic("fence")
    old = kafka.producer(**{"transactional.id": "fenced-id"})
    old.init_transactions(20)
    old.begin_transaction()
    old.produce("fence", value=b"old")
    old.flush(20)
    new = kafka.producer(**{"transactional.id": "fenced-id"})
    new.init_transactions(20)  # aborts the old transaction and bumps the epoch
    with pytest.raises(KafkaException) as info:
        old.commit_transaction(20)
    assert info.value.args[0].fatal() or info.value.args[0].txn_requires_abort()
    reader = kafka.consumer("fence-rc", **{"isolation.level": "read_committed"})
    reader.assign([TopicPartition("fence", 0, OFFSET_BEGINNING)])
    assert quiet(reader, 1.0) == []
    reader.close()


# -- offsets by time ----------------------------------------------------------------------


def test_an_old_record_is_kept_until_its_whole_segment_expires(kafka: KafkaCluster) -> None:
    """Retention as Kafka's: by whole segments, at each retention check
    (every 500 ms on the test daemons). A record ten minutes old, written
    beside a fresh one in the same segment, stays readable until the fresh
    one is past retention.ms too; then the segment goes, the active one
    included, and the log starts at its end."""
    kafka.create_topic("by-segment", **{"retention.ms": "3000"})
    now_ms = int(time.time() * 1000)
    produce_all(kafka.producer(), "by-segment", [
        {"value": b"old", "timestamp": now_ms - 600_000},
        {"value": b"fresh", "timestamp": now_ms},
    ])
    consumer = kafka.consumer("by-segment-reader")
    consumer.assign([TopicPartition("by-segment", 0, 0)])
    try:
        time.sleep(1.5)  # three retention checks: the old record's segment is not due
        assert [m.value() for m in drain(consumer, 2)] == [b"old", b"fresh"]
        wait_until(lambda: consumer.get_watermark_offsets(
            TopicPartition("by-segment", 0), timeout=5)[0] == 2, 30)
    finally:
        consumer.close()


def test_offsets_for_times_and_list_offsets(kafka: KafkaCluster) -> None:
    kafka.create_topic("times")
    records = [{"value": f"t{i}".encode(), "timestamp": BASE_TS + 10 * i} for i in range(20)]
    producer = kafka.producer(**{"linger.ms": 0})
    for rec in records:  # one batch per record, so lookups refine inside batches too
        produce_all(producer, "times", [rec])
    consumer = kafka.consumer("times-reader")
    found = consumer.offsets_for_times(
        [TopicPartition("times", 0, BASE_TS + 55)], timeout=10)
    assert found[0].offset == 6, "the first record at or after the time"
    exact = consumer.offsets_for_times([TopicPartition("times", 0, BASE_TS + 30)], timeout=10)
    assert exact[0].offset == 3
    after = consumer.offsets_for_times([TopicPartition("times", 0, BASE_TS + 10_000)], timeout=10)
    assert after[0].offset == -1, "no record that late: the end (-1)"
    assert consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 20)
    consumer.close()

    admin = kafka.admin()
    tp = TopicPartition("times", 0)
    specs = {"earliest": OffsetSpec.earliest(),  # type: ignore[no-untyped-call]
             "latest": OffsetSpec.latest(),  # type: ignore[no-untyped-call]
             "max": OffsetSpec.max_timestamp(),  # type: ignore[no-untyped-call]
             "at": OffsetSpec.for_timestamp(BASE_TS + 101)}
    answers = {name: admin.list_offsets({tp: spec})[tp].result(10)
               for name, spec in specs.items()}
    assert answers["earliest"].offset == 0
    assert answers["latest"].offset == 20
    assert (answers["max"].offset, answers["max"].timestamp) == (19, BASE_TS + 190)
    assert answers["at"].offset == 11


# -- the same log over Kafka and gRPC --------------------------------------------------------


def test_records_produced_over_kafka_read_over_grpc_at_the_same_offsets(
    kafka: KafkaCluster,
) -> None:
    kafka.create_topic("k2g", partitions=2)
    sent = produce_all(kafka.producer(), "k2g", [record(i, partition=i % 2) for i in range(20)])
    channel, stub = kafka.grpc_stub()
    with channel:
        for p in range(2):
            fetched = stub.Fetch(cluster_pb2.FetchRequest(
                partitions=[cluster_pb2.FetchPartition(topic="k2g", partition=p, offset=0,
                                                       max_bytes=1 << 20)],
                max_wait_ms=0), timeout=10)
            data = fetched.partitions[0].records
            decoded = [r for pos, _ in rb.iter_batches(data)
                       for r in rb.decode_records(data, pos)[1]]
            expected = sorted((m for m in sent if m.partition() == p), key=offset)
            assert [(r.offset, r.key, r.value, r.timestamp) for r in decoded] == [
                (m.offset(), m.key(), m.value(), m.timestamp()[1]) for m in expected]
            assert [list(r.headers) for r in decoded] == [
                record(int((m.key() or b"")[4:]))["headers"] for m in expected]


def test_records_produced_over_grpc_read_over_kafka_at_the_same_offsets(
    kafka: KafkaCluster,
) -> None:
    kafka.create_topic("g2k")
    channel, stub = kafka.grpc_stub()
    bases = []
    with channel:
        for b in range(3):
            batch = rb.build_batch([
                rb.RecordSpec(key=f"g{b}-{i}".encode(), value=f"grpc-{b}-{i}".encode(),
                              timestamp=BASE_TS + 100 * b + i, headers=(("src", b"grpc"),))
                for i in range(5)
            ], compression=rb.COMPRESSION_GZIP if b == 1 else rb.COMPRESSION_NONE)
            resp = stub.Produce(cluster_pb2.ProduceRequest(topic="g2k", partition=0,
                                                           batch=batch, acks=-1), timeout=10)
            bases.append(resp.base_offset)
    assert bases == [0, 5, 10]
    consumer = kafka.consumer("g2k-reader")
    consumer.assign([TopicPartition("g2k", 0, OFFSET_BEGINNING)])
    got = drain(consumer, 15)
    consumer.close()
    assert [as_tuple(m) for m in got] == [
        (0, 5 * b + i, f"g{b}-{i}".encode(), f"grpc-{b}-{i}".encode(), [("src", b"grpc")],
         (TIMESTAMP_CREATE_TIME, BASE_TS + 100 * b + i))
        for b in range(3) for i in range(5)
    ]


def test_grpc_and_kafka_commits_are_one_set_of_group_offsets(kafka: KafkaCluster) -> None:
    kafka.create_topic("shared-offsets")
    produce_all(kafka.producer(), "shared-offsets", [{"value": b"x"} for _ in range(5)])
    consumer = kafka.consumer("shared-group")
    consumer.commit(offsets=[TopicPartition("shared-offsets", 0, 4, metadata="via kafka")],
                    asynchronous=False)
    consumer.close()
    channel, stub = kafka.grpc_stub()
    with channel:
        seen = stub.FetchCommittedOffsets(cluster_pb2.FetchCommittedOffsetsRequest(
            group_id="shared-group"), timeout=10)
    # confluent-kafka sends the metadata's C terminator too; it is kept as given,
    # as Kafka keeps it (and the client strips it again when reading).
    assert [(o.topic, o.partition, o.offset, o.metadata) for o in seen.offsets] == [
        ("shared-offsets", 0, 4, "via kafka\x00")]
