"""Kafka behaviour clients rely on, checked with two independent client
libraries (confluent-kafka, on librdkafka, and kafka-python, pure Python) and
at the wire: negative committed offsets are kept as Kafka keeps them, and a
topic name no topic can have is an error at once, not a wait."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode as K

from admin import AdminClient
from linkd.core import records as rb
from tests.harness import Daemon, free_port
from tests.kafka_raw import RawClient


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("compat")) / "data"
    with Daemon("C", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
        _GRPC[f"127.0.0.1:{port}"] = daemon.bootstrap
        client = RawClient(port)
        created = client.call(19, 7, {"topics": [
            {"name": "compat", "num_partitions": 1, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none
        client.close()
        yield f"127.0.0.1:{port}"


def _raw(bootstrap: str) -> RawClient:
    return RawClient(int(bootstrap.rsplit(":", 1)[1]))


def _committed(bootstrap: str, group: str) -> int:
    client = _raw(bootstrap)
    try:
        resp = client.call(9, 8, {"groups": [{"group_id": group, "topics": [
            {"name": "compat", "partition_indexes": [0]}]}], "require_stable": False})
    finally:
        client.close()
    return int(resp.groups[0].topics[0].partitions[0].committed_offset)


@pytest.mark.parametrize("offset", [-1, -2])
def test_a_negative_commit_is_kept_as_given_and_readers_treat_it_as_none(
    kafka: str, offset: int
) -> None:
    group = f"negative{-offset}"
    # Produce two records, so a reader that resets to earliest reads from 0.
    producer = ck.Producer({"bootstrap.servers": kafka})
    for value in (b"a", b"b"):
        producer.produce("compat", value, partition=0)
    assert producer.flush(30) == 0

    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({KTopicPartition("compat", 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()
    assert _committed(kafka, group) == offset

    reader = ck.Consumer({"bootstrap.servers": kafka, "group.id": group,
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        reader.assign([ck.TopicPartition("compat", 0, ck.OFFSET_STORED)])
        first = None
        for _ in range(60):
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                first = message.offset()
                break
    finally:
        reader.close()
    assert first == 0


def test_metadata_for_an_invalid_topic_name_is_invalid_topic_at_once(kafka: str) -> None:
    client = _raw(kafka)
    try:
        md = client.call(3, 12, {"topics": [{"name": "bad name!", "topic_id": None},
                                            {"name": "no-such-topic", "topic_id": None}],
                                 "include_topic_authorized_operations": False})
    finally:
        client.close()
    assert [t.error_code for t in md.topics] == [
        K.invalid_topic_exception, K.unknown_topic_or_partition]

    # librdkafka fails the record with TOPIC_EXCEPTION instead of waiting out
    # message.timeout.ms for a topic that might appear.
    errors: list[ck.KafkaError] = []
    producer = ck.Producer({"bootstrap.servers": kafka, "message.timeout.ms": 60_000})
    producer.produce("bad name!", b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert [e.code() for e in errors] == [ck.KafkaError.TOPIC_EXCEPTION]


# -- KIP-360: a fenced producer cannot take its transactional id back -------------------


def _init(client: RawClient, version: int, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    resp = client.call(22, version, {"transactional_id": "kip360", "transaction_timeout": 60_000,
                                     "producer_id": pid, "producer_epoch": epoch})
    return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


def test_kip360_only_the_current_holder_bumps__a_fenced_one_stays_fenced(kafka: str) -> None:
    client = _raw(kafka)
    try:
        _err, pid, first = _init(client, 4)  # producer 1
        _err, pid2, second = _init(client, 4)  # producer 2 takes the id over
        assert (pid2, second) == (pid, first + 1)
        # Producer 2 opens a transaction.
        added = client.call(24, 3, {
            "v3_and_below_transactional_id": "kip360", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": second,
            "v3_and_below_topics": [{"name": "compat", "partitions": [0]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code \
            == K.none
        # Producer 1, fenced, asks again with its old id and epoch: still fenced,
        # and producer 2's transaction is untouched.
        assert _init(client, 4, pid, first) == (int(K.producer_fenced), -1, -1)
        assert _init(client, 3, pid, first) == (int(K.invalid_producer_epoch), -1, -1)
        committed = client.call(26, 3, {"transactional_id": "kip360", "producer_id": pid,
                                        "producer_epoch": second, "committed": True})
        assert committed.error_code == K.none
        # The current holder may bump; a retry of that bump (its answer lost)
        # gets the same epoch back instead of another bump.
        assert _init(client, 4, pid, second) == (0, pid, second + 1)
        assert _init(client, 4, pid, second) == (0, pid, second + 1)
        assert _init(client, 4, pid, second + 1) == (0, pid, second + 2)
        assert _init(client, 4, pid + 1000, second + 2) == (int(K.producer_fenced), -1, -1)
    finally:
        client.close()


def test_a_fenced_confluent_producer_does_not_disturb_the_one_that_fenced_it(
    kafka: str,
) -> None:
    conf = {"bootstrap.servers": kafka, "transactional.id": "fence-me"}
    old = ck.Producer(conf)
    old.init_transactions(30)
    new = ck.Producer(conf)
    new.init_transactions(30)  # fences `old`
    new.begin_transaction()
    new.produce("compat", b"from-new", partition=0)
    old.begin_transaction()
    old.produce("compat", b"from-old", partition=0)
    with pytest.raises(ck.KafkaException):
        old.commit_transaction(30)
    new.commit_transaction(30)
    values = _committed_until(kafka, "fence-check", b"from-new")
    assert b"from-new" in values and b"from-old" not in values


def _committed_until(kafka: str, group: str, wanted: bytes) -> list[bytes]:
    """What a read_committed reader of compat-0 sees, until `wanted` (bounded)."""
    reader = ck.Consumer({"bootstrap.servers": kafka, "group.id": group,
                          "isolation.level": "read_committed",
                          "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.assign([ck.TopicPartition("compat", 0, 0)])
    values: list[bytes] = []
    for _ in range(40):
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
        if wanted in values:
            break
    reader.close()
    return values


def test_a_fenced_kafka_python_producer_does_not_disturb_the_one_that_fenced_it(
    kafka: str,
) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    old = KafkaProducer(bootstrap_servers=kafka, transactional_id="kp-fence")
    old.init_transactions()
    new = KafkaProducer(bootstrap_servers=kafka, transactional_id="kp-fence")
    new.init_transactions()  # fences `old`
    new.begin_transaction()
    new.send("compat", b"kp-new", partition=0)
    new.flush()
    old.begin_transaction()
    with pytest.raises(KafkaError):
        old.send("compat", b"kp-old", partition=0).get(timeout=10)
    with pytest.raises(KafkaError):
        old.abort_transaction()  # fenced for good: it cannot take the id back
    new.commit_transaction()
    old.close(timeout=1)
    new.close(timeout=1)
    values = _committed_until(kafka, "kp-fence-check", b"kp-new")
    assert b"kp-new" in values and b"kp-old" not in values


# -- topics created on first use (auto.create.topics.enable) ----------------------------


def test_topics_are_created_on_first_use_when_enabled__never_in_a_reserved_namespace(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = ["--kafka-listen", f"127.0.0.1:{port}", "--auto-create-topics",
            "--num-partitions", "3"]
    with Daemon("AC", tmp_path / "data", extra_args=args) as daemon:
        kafka = f"127.0.0.1:{port}"
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_namespace("topic", "locked-", reserved=True)

        # A producer's first record creates its topic, with num.partitions.
        delivered: list[Any] = []
        producer = ck.Producer({"bootstrap.servers": kafka, "message.timeout.ms": 10_000})
        producer.produce("fresh", b"first", on_delivery=lambda e, m: delivered.append(e or m))
        producer.produce("locked-x", b"no", on_delivery=lambda e, m: delivered.append(e or m))
        producer.flush(30)
        by_topic = {getattr(d, "topic", lambda: "locked-x")(): d for d in delivered}
        assert isinstance(by_topic["fresh"], ck.Message)
        assert len(admin.describe_topic("fresh").partitions) == 3
        # Never inside a reserved namespace: the record fails, the topic is not made.
        assert isinstance(by_topic["locked-x"], ck.KafkaError)
        assert "locked-x" not in [t.name for t in admin.list_topics()]

        # kafka-python's consumer asks for it on subscribe (allow.auto.create.topics).
        consumer = KafkaConsumer("by-consumer", bootstrap_servers=kafka, group_id="ac",
                                 consumer_timeout_ms=1000)
        consumer.poll(timeout_ms=500)
        consumer.close()
        assert "by-consumer" in [t.name for t in admin.list_topics()]
        # num.partitions is also what CreateTopics gets when it asks for the default.
        client = _raw(kafka)
        try:
            created = client.call(19, 7, {"topics": [
                {"name": "by-default", "num_partitions": -1, "replication_factor": -1,
                 "assignments": [], "configs": []}]})
        finally:
            client.close()
        assert created.topics[0].error_code == K.none
        assert len(admin.describe_topic("by-default").partitions) == 3
        admin.close()
        assert "topic auto-created" in daemon.stderr_text()


def test_topics_are_not_created_on_first_use_by_default(kafka: str) -> None:
    errors: list[ck.KafkaError] = []
    producer = ck.Producer({"bootstrap.servers": kafka, "message.timeout.ms": 3000})
    producer.produce("never-made", b"x", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    client = _raw(kafka)
    try:
        md = client.call(3, 12, {"topics": [{"name": "never-made", "topic_id": None}],
                                 "include_topic_authorized_operations": False})
    finally:
        client.close()
    assert md.topics[0].error_code == K.unknown_topic_or_partition


# -- KIP-320: a reader of a log that was cut learns where it parts -----------------------


def _topic_with_a_cut(kafka: str, bootstrap_grpc: str, topic: str) -> None:
    """Offsets 0-5 in epoch 0 (three batches of two), then an unclean election
    cuts the log at the batch boundary below 3 (to 2), and two records follow
    in epoch 1 (offsets 2 and 3)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_grpc})
    admin.create_topic(topic, partitions=1)
    client = _raw(kafka)

    def produce(*values: str) -> None:
        now = int(time.time() * 1000)
        batch = rb.build_batch([rb.RecordSpec(None, v.encode(), now) for v in values])
        resp = client.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == K.none

    for i in range(3):
        produce(f"old-{2 * i}", f"old-{2 * i + 1}")
    result = admin.unclean_election(topic, 0, 3)
    assert result["leader_epoch"] == 1 and result["log_end_offset"] == 2
    produce("new-0")
    produce("new-1")
    client.close()
    admin.close()


@pytest.fixture(scope="module")
def grpc_bootstrap(kafka: str) -> str:
    client = _raw(kafka)
    try:
        md = client.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
    finally:
        client.close()
    assert md.cluster_id == "C"
    return _GRPC[kafka]


_GRPC: dict[str, str] = {}


def test_offset_for_leader_epoch_and_the_fetch_s_diverging_epoch(
    kafka: str, grpc_bootstrap: str
) -> None:
    _topic_with_a_cut(kafka, grpc_bootstrap, "cut")
    client = _raw(kafka)
    try:
        def ask(epoch: int, current: int = -1) -> tuple[int, int, int]:
            resp = client.call(23, 4, {"replica_id": -1, "topics": [
                {"topic": "cut", "partitions": [
                    {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
            p = resp.topics[0].partitions[0]
            return int(p.error_code), int(p.leader_epoch), int(p.end_offset)

        assert ask(0) == (0, 0, 2)  # epoch 0 ends where the cut was
        assert ask(1) == (0, 1, 4)
        assert ask(7) == (0, -1, -1)
        assert ask(0, current=0)[0] == K.fenced_leader_epoch
        assert ask(0, current=4)[0] == K.unknown_leader_epoch
        assert ask(0, current=1) == (0, 0, 2)

        md = client.call(3, 12, {"topics": [{"name": "cut", "topic_id": None}],
                                 "include_topic_authorized_operations": False})
        topic_id = md.topics[0].topic_id

        def fetch(offset: int, last_epoch: int) -> Any:
            resp = client.call(1, 13, {
                "replica_id": -1, "max_wait": 5000, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "forgotten_topics_data": [], "rack_id": "",
                "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                     "last_fetched_epoch": last_epoch, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}]})
            return resp.responses[0].partitions[0]

        # A reader that read offsets 0-5 in epoch 0 asks for 6: told, at once,
        # that its epoch ended at 2 here.
        parted = fetch(6, 0)
        assert (parted.diverging_epoch.epoch, parted.diverging_epoch.end_offset) == (0, 2)
        assert parted.records in (b"", None)
        # A reader whose epoch still holds gets records.
        assert fetch(2, 0).records and fetch(3, 1).diverging_epoch.epoch == -1
    finally:
        client.close()


Reader = tuple[Callable[[int], list[tuple[int, bytes]]], Callable[[], None]]


def _confluent_reader(kafka: str, topic: str) -> Reader:
    consumer = ck.Consumer({"bootstrap.servers": kafka, "group.id": f"{topic}-reader",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False,
                            "topic.metadata.refresh.interval.ms": 500})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])

    def read(count: int) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
        return got

    return read, consumer.close


def _kafka_python_reader(kafka: str, topic: str) -> Reader:
    consumer = KafkaConsumer(bootstrap_servers=kafka, auto_offset_reset="earliest",
                             enable_auto_commit=False, metadata_max_age_ms=500)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)

    def read(count: int) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                got += [(r.offset, r.value) for r in records]
        return got

    return read, consumer.close


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_a_consumer_past_a_cut_resumes_where_the_logs_part(
    kafka: str, grpc_bootstrap: str, client: str
) -> None:
    """A consumer that read offsets 0-5 in epoch 0 is fenced after the cut,
    validates its position with OffsetForLeaderEpoch, and goes on at 2: it
    reads the two new records and none of the old ones again (without this,
    librdkafka fell back to auto.offset.reset and read offsets 0 and 1 twice)."""
    topic = f"cut-read-{client}"
    admin = AdminClient({"bootstrap.servers": grpc_bootstrap})
    admin.create_topic(topic, partitions=1)
    raw = _raw(kafka)

    def produce(*values: str) -> None:
        now = int(time.time() * 1000)
        batch = rb.build_batch([rb.RecordSpec(None, v.encode(), now) for v in values])
        resp = raw.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == K.none

    for i in range(3):
        produce(f"old-{2 * i}", f"old-{2 * i + 1}")
    read, close = (_confluent_reader if client == "confluent-kafka" else _kafka_python_reader)(
        kafka, topic)
    try:
        assert [o for o, _v in read(6)] == list(range(6))
        admin.unclean_election(topic, 0, 3)  # cut to 2, epoch 1
        produce("new-0")
        produce("new-1")
        assert read(2) == [(2, b"new-0"), (3, b"new-1")]
    finally:
        close()
        raw.close()
        admin.close()


# -- compression.type is honoured --------------------------------------------------------


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_a_topic_s_compression_type_recompresses_what_producers_send(
    kafka: str, codec: str
) -> None:
    topic = f"squeezed-{codec}"
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "compression.type", "value": codec}]}]})
        assert created.topics[0].error_code == K.none
        sent = "gzip" if codec == "uncompressed" else "none"
        producer = ck.Producer({"bootstrap.servers": kafka, "compression.type": sent,
                                "enable.idempotence": True, "linger.ms": 20})
        for i in range(50):
            producer.produce(topic, f"value-{i}".encode() * 20, partition=0)
        assert producer.flush(30) == 0
        md = client.call(3, 12, {"topics": [{"name": topic, "topic_id": None}],
                                 "include_topic_authorized_operations": False})
        fetched = client.call(1, 13, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": md.topics[0].topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20}]}]})
    finally:
        client.close()
    data = bytes(fetched.responses[0].partitions[0].records)
    codecs = {h.compression for _pos, h in rb.iter_batches(data)}
    want = {"uncompressed": rb.COMPRESSION_NONE, "gzip": rb.COMPRESSION_GZIP,
            "snappy": rb.COMPRESSION_SNAPPY, "lz4": rb.COMPRESSION_LZ4,
            "zstd": rb.COMPRESSION_ZSTD}[codec]
    assert codecs == {want}
    # The records read back unchanged, by librdkafka and by the codec here.
    assert [r.value for _p, h in rb.iter_batches(data)
            for r in rb.decode_records(data[_p:_p + h.size_bytes])[1]] == [
        f"value-{i}".encode() * 20 for i in range(50)]
    reader = ck.Consumer({"bootstrap.servers": kafka, "group.id": f"read-{topic}",
                          "enable.auto.commit": False})
    reader.assign([ck.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 50 and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    reader.close()
    assert values == [f"value-{i}".encode() * 20 for i in range(50)]


def test_an_unknown_compression_type_is_refused(kafka: str) -> None:
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "brotli", "num_partitions": 1, "replication_factor": 1, "assignments": [],
             "configs": [{"name": "compression.type", "value": "brotli"}]}]})
    finally:
        client.close()
    assert created.topics[0].error_code == K.invalid_config


# -- static membership (KIP-345) -----------------------------------------------------------


def test_a_static_consumer_restarted_in_its_session_gets_its_partitions_back_without_rebalance(
    kafka: str,
) -> None:
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "static", "num_partitions": 4, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none
    finally:
        client.close()
    events: dict[str, list[str]] = {}

    def consumer(name: str, instance: str) -> ck.Consumer:
        events.setdefault(name, [])
        c = ck.Consumer({"bootstrap.servers": kafka, "group.id": "statics",
                         "group.instance.id": instance, "session.timeout.ms": 30_000,
                         "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest",
                         "partition.assignment.strategy": "range"})
        c.subscribe(["static"],
                    on_assign=lambda _c, ps: events[name].append(
                        "assign " + ",".join(str(p.partition) for p in ps)),
                    on_revoke=lambda _c, ps: events[name].append("revoke"))
        return c

    def poll_until(consumers: list[ck.Consumer], done: Any) -> None:
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, events
            for c in consumers:
                c.poll(0.1)

    first, second = consumer("first", "i-1"), consumer("second", "i-2")
    poll_until([first, second], lambda: any(e.startswith("assign") and e != "assign "
                                            for e in events["second"])
               and any(e.startswith("assign") and e != "assign " for e in events["first"]))
    # Settle: both hold two partitions each in the same generation.
    poll_until([first, second], lambda: len(
        {e for e in events["first"] + events["second"] if e.startswith("assign ")}) >= 2
               and events["first"][-1].count(",") == 1 and events["second"][-1].count(",") == 1)
    held = events["second"][-1]
    before = list(events["first"])
    second.close()  # a static member leaves no LeaveGroup behind
    back = consumer("back", "i-2")
    poll_until([first, back], lambda: bool(events["back"]))
    for _ in range(20):  # a while longer: nothing may reach the other member
        first.poll(0.1)
        back.poll(0.1)
    assert events["back"] == [held]
    assert events["first"] == before  # no revoke, no new assignment: no rebalance
    first.close()
    back.close()


# -- DescribeConfigs of the broker and of groups -------------------------------------------


def test_describe_configs_answers_for_the_broker_and_for_groups(kafka: str) -> None:
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import ConfigResource, ResourceType
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = CkAdmin({"bootstrap.servers": kafka})
    broker = ConfigResource(ResourceType.BROKER, "0")
    configs = admin.describe_configs([broker])[broker].result(30)
    assert configs["socket.request.max.bytes"].value == "104857600"
    assert configs["connections.max.idle.ms"].value == "600000"
    assert configs["auto.create.topics.enable"].value == "false"
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{kafka}"
    # Static settings are read-only; the topics' server defaults are dynamic.
    assert configs["socket.request.max.bytes"].is_read_only
    assert configs["log.retention.hours"].value == "168"
    assert not configs["log.retention.hours"].is_read_only
    assert configs["log.retention.ms"].value is None  # unset: Kafka's default is none
    group = ConfigResource(ResourceType.GROUP, "any-group")
    group_configs = admin.describe_configs([group])[group].result(30)
    assert group_configs["consumer.session.timeout.ms"].value == "45000"

    other = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        answer = other.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")],
                                        config_filter="all")
        # kafka-python alters broker and group configs too.
        altered = other.alter_configs([
            KConfigResource(ConfigResourceType.GROUP, "kp-group",
                            configs={"consumer.session.timeout.ms": "55000"}),
            KConfigResource(ConfigResourceType.BROKER, "0",
                            configs={"log.cleaner.min.cleanable.ratio": "0.6"}),
        ], raise_on_unknown=False)
        kp_group = other.describe_configs(
            [KConfigResource(ConfigResourceType.GROUP, "kp-group")], config_filter="all")
        # APPEND and SUBTRACT on a list config, as kafka-python sends them.
        from kafka.admin import NewTopic as KNewTopic

        other.create_topics([KNewTopic("kp-lists", 1, 1)])
        lists = KConfigResource(ConfigResourceType.TOPIC, "kp-lists")
        other.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-lists", configs={
            "cleanup.policy": ("APPEND", "compact")})])
        appended = other.describe_configs([lists])["topic"]["kp-lists"]["cleanup.policy"]
        other.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-lists", configs={
            "cleanup.policy": ("SUBTRACT", "delete")})])
        subtracted = other.describe_configs([lists])["topic"]["kp-lists"]["cleanup.policy"]
        other.alter_configs([KConfigResource(
            ConfigResourceType.BROKER, "0",
            configs={"log.cleaner.min.cleanable.ratio": ("DELETE", None)})],
            raise_on_unknown=False)
    finally:
        other.close()
    entries = answer["broker"]["0"]
    assert entries["num.partitions"]["value"] == "1"
    assert entries["message.max.bytes"]["value"] == "1048588"
    errors = [e for names in altered.values() for e in names.values()]
    assert all(getattr(e, "errno", 0) == 0 for e in errors), altered
    assert kp_group["group"]["kp-group"]["consumer.session.timeout.ms"]["value"] == "55000"
    assert (appended["value"], subtracted["value"]) == ("delete,compact", "compact")


def test_every_kafka_topic_config_creates_and_alters_a_topic(kafka: str) -> None:
    """All of Kafka 4's topic configs, with values its own validators accept:
    a topic created with every one through kafka-python, each altered through
    confluent-kafka, and described back."""
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    from kafka.admin import KafkaAdminClient, NewTopic

    from linkd.core.topic_config import CONFIG_KEYS

    samples = {
        "cleanup.policy": "compact,delete", "compression.gzip.level": "6",
        "compression.lz4.level": "9", "compression.type": "producer",
        "compression.zstd.level": "3", "delete.retention.ms": "86400000",
        "file.delete.delay.ms": "60000", "flush.messages": "10000", "flush.ms": "1000",
        "follower.replication.throttled.replicas": "0:0", "index.interval.bytes": "4096",
        "internal.segment.bytes": "1048576", "leader.replication.throttled.replicas": "*",
        "local.retention.bytes": "-2", "local.retention.ms": "-2",
        "max.compaction.lag.ms": "86400000", "max.message.bytes": "1048588",
        "message.timestamp.after.max.ms": "3600000",
        "message.timestamp.before.max.ms": "3600000", "message.timestamp.type": "CreateTime",
        "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0",
        "min.insync.replicas": "1", "preallocate": "false", "remote.log.copy.disable": "false",
        "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
        "retention.bytes": "-1", "retention.ms": "604800000", "segment.bytes": "1073741824",
        "segment.index.bytes": "10485760", "segment.jitter.ms": "0",
        "segment.ms": "604800000", "unclean.leader.election.enable": "false",
    }
    assert set(samples) == set(CONFIG_KEYS)
    kp = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        kp.create_topics([NewTopic("every-config", 1, 1, topic_configs=samples)])
    finally:
        kp.close()
    admin = CkAdmin({"bootstrap.servers": kafka})
    resource = ConfigResource(ResourceType.TOPIC, "every-config")
    described = admin.describe_configs([resource])[resource].result(30)
    assert {name: described[name].value for name in samples} == samples
    changed = {"segment.ms": "3600000", "segment.jitter.ms": "1000", "flush.ms": "2000",
               "max.compaction.lag.ms": "3600000", "preallocate": "true"}
    alter = ConfigResource(ResourceType.TOPIC, "every-config", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in changed.items()])
    admin.incremental_alter_configs([alter])[alter].result(30)
    described = admin.describe_configs([resource])[resource].result(30)
    assert {name: described[name].value for name in changed} == changed
    # Those without an effect on one broker say so, where DescribeConfigs documents them.
    client = _raw(kafka)
    try:
        documented = client.call(32, 4, {"resources": [{
            "resource_type": 2, "resource_name": "every-config",
            "configuration_keys": ["flush.ms", "segment.ms"]}], "include_documentation": True})
    finally:
        client.close()
    docs = {c.name: c.documentation for c in documented.results[0].configs}
    assert "no effect here" in docs["flush.ms"] and "no effect here" not in docs["segment.ms"]


def test_alter_replica_log_dirs_answers_as_a_one_broker_kafka(kafka: str) -> None:
    from kafka import TopicPartitionReplica
    from kafka.admin import KafkaAdminClient
    from kafka.errors import LogDirNotFoundError, NoError

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        [described] = admin.describe_log_dirs()
        home = described["log_dirs"][0]["log_dir"] if "log_dirs" in described else (
            described["results"][0]["log_dir"])
        here = TopicPartitionReplica("compat", 0, 0)
        moved = admin.alter_replica_log_dirs({here: home})
        elsewhere = admin.alter_replica_log_dirs({here: "/nowhere/else"})
    finally:
        admin.close()
    assert moved[here] is NoError  # it is there already
    assert elsewhere[here] is LogDirNotFoundError


# -- the admin APIs a single-broker Kafka answers ------------------------------------------


def test_broker_replica_and_quorum_admin_apis_answer_as_a_single_broker(kafka: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import InvalidReplicationAssignmentError

    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        admin.create_topics([NewTopic("wide-a", 3, 1), NewTopic("wide-b", 2, 1)])
        # DescribeTopicPartitions (KIP-966), paginated by a partition limit.
        page = admin.describe_topic_partitions(["wide-a", "wide-b", "absent"],
                                               response_partition_limit=4)
        by_name = {t["name"]: t for t in page["topics"]}
        assert by_name["absent"]["error_code"] == K.unknown_topic_or_partition
        assert [p["partition_index"] for p in by_name["wide-a"]["partitions"]] == [0, 1, 2]
        assert [p["partition_index"] for p in by_name["wide-b"]["partitions"]] == [0]
        assert page["next_cursor"] == {"topic_name": "wide-b", "partition_index": 1}
        assert all(p["replica_nodes"] == [0] and p["isr_nodes"] == [0]
                   for p in by_name["wide-a"]["partitions"])
        # DescribeLogDirs: the data directory, with sizes.
        dirs = admin.describe_log_dirs()[0]["log_dirs"]
        assert len(dirs) == 1 and dirs[0]["error_code"] == 0 and dirs[0]["total_bytes"] > 0
        assert {t["name"] for t in dirs[0]["topics"]} >= {"wide-a", "wide-b"}
        # DescribeQuorum: a one-node quorum led by the broker.
        quorum = admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
        assert quorum["leader_id"] == 0 and [v["replica_id"] for v in quorum["current_voters"]] \
            == [0]
        assert quorum["high_watermark"] > 0
        # ElectLeaders: nothing to elect.
        elected = admin.elect_leaders(0, {"wide-a": [0], "absent": [0]}, raise_errors=False)
        codes = {r.topic: [p.error_code for p in r.partition_result]
                 for r in elected.replica_election_results}
        assert codes == {"wide-a": [K.election_not_needed],
                         "absent": [K.unknown_topic_or_partition]}
        # Reassignments: the broker's own replica is accepted, any other refused.
        ok = admin.alter_partition_reassignments({KTopicPartition("wide-a", 0): [0]})
        assert ok == {KTopicPartition("wide-a", 0): None}
        bad = admin.alter_partition_reassignments({KTopicPartition("wide-a", 0): [0, 1]})
        assert bad[KTopicPartition("wide-a", 0)] is InvalidReplicationAssignmentError
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()

    # librdkafka's elect_leaders, the same answer.
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient as CkAdmin

    ck_admin = CkAdmin({"bootstrap.servers": kafka})
    result = ck_admin.elect_leaders(ElectionType.PREFERRED,
                                    [ck.TopicPartition("wide-a", 1)]).result(30)
    assert result[ck.TopicPartition("wide-a", 1)].code() == ck.KafkaError.ELECTION_NOT_NEEDED


# -- incremental fetch sessions (KIP-227) --------------------------------------------------


def test_fetch_sessions_answer_only_what_changed(kafka: str) -> None:
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "sessions", "num_partitions": 3, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none

        def fetch(session_id: int, epoch: int, partitions: list[tuple[int, int]],
                  forget: list[int] | None = None) -> Any:
            return client.call(1, 12, {
                "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                "rack_id": "",
                "forgotten_topics_data": [{"topic": "sessions", "partitions": forget}]
                if forget else [],
                "topics": [{"topic": "sessions", "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "fetch_offset": o,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20} for p, o in partitions]}]
                if partitions else []})

        def answered(resp: Any) -> dict[int, tuple[int, bool]]:
            return {p.partition_index: (p.high_watermark, bool(p.records))
                    for t in resp.responses for p in t.partitions}

        full = fetch(0, 0, [(0, 0), (1, 0), (2, 0)])
        session = full.session_id
        assert session != 0 and answered(full) == {0: (0, False), 1: (0, False), 2: (0, False)}
        assert answered(fetch(session, 1, [])) == {}  # nothing changed: nothing answered
        now = int(time.time() * 1000)
        produced = client.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "sessions", "partition_data": [
                {"index": 1, "records": rb.build_batch([rb.RecordSpec(None, b"x", now)])}]}]})
        assert produced.responses[0].partition_responses[0].error_code == K.none
        assert answered(fetch(session, 2, [])) == {1: (1, True)}
        # The fetcher moves partition 1 on and forgets partition 2.
        assert answered(fetch(session, 3, [(1, 1)], forget=[2])) == {}
        assert fetch(session, 3, []).error_code == K.invalid_fetch_session_epoch
        assert fetch(987654, 1, []).error_code == K.fetch_session_id_not_found
        assert fetch(0, 2, []).error_code == K.invalid_fetch_session_epoch
        closed = fetch(session, -1, [(0, 0)])  # closes the session, a full answer
        assert closed.session_id == 0 and answered(closed) == {0: (0, False)}
        assert fetch(session, 4, []).error_code == K.fetch_session_id_not_found
    finally:
        client.close()


def test_a_kafka_python_consumer_of_many_partitions_reads_everything_through_sessions(
    kafka: str,
) -> None:
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "many", "num_partitions": 6, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none
    finally:
        client.close()
    producer = ck.Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for i in range(120):
        producer.produce("many", f"v{i}".encode(), partition=i % 6)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer(bootstrap_servers=kafka, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    consumer.assign([KTopicPartition("many", p) for p in range(6)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 120 and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            seen.update(r.value for r in records)
    for i in range(120, 150):  # more records while the session lives
        producer.produce("many", f"v{i}".encode(), partition=i % 6)
    assert producer.flush(30) == 0
    while len(seen) < 150 and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            seen.update(r.value for r in records)
    consumer.close()
    assert seen == {f"v{i}".encode() for i in range(150)}


# -- record timestamps (KIP-937) -------------------------------------------------------------


def test_record_timestamps_outside_the_topic_s_bounds_are_refused(kafka: str) -> None:
    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "clocked", "num_partitions": 1, "replication_factor": 1,
             "assignments": [], "configs": [
                 {"name": "message.timestamp.after.max.ms", "value": "3600000"},
                 {"name": "message.timestamp.before.max.ms", "value": "86400000"}]}]})
        assert created.topics[0].error_code == K.none
        now = int(time.time() * 1000)

        def produce(*stamps: int) -> Any:
            batch = rb.build_batch([rb.RecordSpec(None, b"t", ts) for ts in stamps])
            resp = client.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
                {"name": "clocked", "partition_data": [{"index": 0, "records": batch}]}]})
            return resp.responses[0].partition_responses[0]

        assert produce(now, now - 1000).error_code == K.none
        ahead = produce(now, now + 2 * 3_600_000)  # a producer's clock two hours ahead
        assert ahead.error_code == K.invalid_timestamp
        assert "message.timestamp.after.max.ms" in ahead.error_message
        # KIP-467: the record at fault is named, by its index in the batch
        assert [e.batch_index for e in ahead.record_errors] == [1]
        assert f"Timestamp {now + 2 * 3_600_000} of record 1 is out of range" in \
            ahead.record_errors[0].batch_index_error_message
        assert produce(now - 2 * 86_400_000).error_code == K.invalid_timestamp
        end = client.call(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "clocked", "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert end.topics[0].partitions[0].offset == 2  # only the first batch was stored
    finally:
        client.close()
    # kafka-python: one batch of three, the middle one two hours ahead. The
    # bad record gets INVALID_TIMESTAMP, the others "refused only for sharing
    # the batch" (KIP-467's record errors).
    from kafka import KafkaProducer
    from kafka import errors as kerrors

    kp = KafkaProducer(bootstrap_servers=kafka, linger_ms=500, retries=0)
    futures = {v: kp.send("clocked", v, partition=0, timestamp_ms=stamp)
               for v, stamp in ((b"a", now), (b"late", now + 7_200_000), (b"c", now))}
    kp.flush(30)
    kp.close()
    with pytest.raises(kerrors.InvalidTimestampError, match="of record 1 is out of range"):
        futures[b"late"].get(10)
    for v in (b"a", b"c"):
        with pytest.raises(kerrors.KafkaError, match="part of a batch"):
            futures[v].get(10)


def test_confluent_kafka_tells_the_refused_records_from_their_batch_mates(kafka: str) -> None:
    """KIP-467 through librdkafka: two records without a key in one batch to
    a compacted topic get INVALID_RECORD, their batch mates
    _INVALID_DIFFERENT_RECORD (librdkafka reads the record errors of a
    refusal naming more than one record; one alone it reports as the
    partition's error for the whole batch)."""
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import NewTopic as CkNewTopic

    admin = CkAdmin({"bootstrap.servers": kafka})
    admin.create_topics([CkNewTopic(
        "keyed", 1, 1, config={"cleanup.policy": "compact"})])["keyed"].result(20)
    errors: dict[bytes, Any] = {}
    producer = ck.Producer({"bootstrap.servers": kafka, "linger.ms": 500})
    for key, value in ((b"k", b"a"), (None, b"b"), (b"k", b"c"), (None, b"d")):
        producer.produce("keyed", value, key=key, partition=0,
                         on_delivery=lambda err, m: errors.__setitem__(m.value(), err))
    assert producer.flush(30) == 0
    assert {v: e.code() for v, e in errors.items()} == {
        b"a": ck.KafkaError._INVALID_DIFFERENT_RECORD, b"b": ck.KafkaError.INVALID_RECORD,
        b"c": ck.KafkaError._INVALID_DIFFERENT_RECORD, b"d": ck.KafkaError.INVALID_RECORD}


def test_a_static_kafka_python_consumer_restarted_in_its_session_keeps_its_partitions(
    kafka: str,
) -> None:
    from kafka import ConsumerRebalanceListener

    client = _raw(kafka)
    try:
        created = client.call(19, 7, {"topics": [
            {"name": "static-kp", "num_partitions": 4, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none
    finally:
        client.close()
    events: dict[str, list[str]] = {}

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def __init__(self, name: str) -> None:
            self.name = name
            events[name] = []

        def on_partitions_revoked(self, revoked: Any) -> None:
            events[self.name].append("revoke")

        def on_partitions_assigned(self, assigned: Any) -> None:
            events[self.name].append(
                "assign " + ",".join(sorted(str(p.partition) for p in assigned)))

    def consumer(name: str, instance: str) -> KafkaConsumer:
        c = KafkaConsumer(bootstrap_servers=kafka, group_id="statics-kp",
                          group_instance_id=instance, session_timeout_ms=30_000,
                          heartbeat_interval_ms=200, auto_offset_reset="earliest")
        c.subscribe(["static-kp"], listener=Listener(name))
        return c

    def settled(*names: str) -> bool:
        return all(events[n] and events[n][-1].count(",") == 1 for n in names)

    # Polls of a second: with very short polls kafka-python 3.0 may leave a
    # finished join unprocessed (its own state machine), whatever the broker.
    first, second = consumer("first", "kp-1"), consumer("second", "kp-2")
    deadline = time.monotonic() + 60
    while not settled("first", "second"):
        assert time.monotonic() < deadline, events
        first.poll(1000)
        second.poll(1000)
    held, before = events["second"][-1], list(events["first"])
    second.close()
    back = consumer("back", "kp-2")
    while not events["back"] or events["back"][-1] == "revoke":
        assert time.monotonic() < deadline, events
        first.poll(1000)
        back.poll(1000)
    first.poll(1000)
    assert events["back"][-1] == held
    assert events["first"] == before  # no rebalance reached the other member
    first.close()
    back.close()
