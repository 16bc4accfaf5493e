"""Kafka behaviour clients rely on, checked with two independent client
libraries (confluent-kafka, on librdkafka, and kafka-python, pure Python) and
at the wire: negative committed offsets are kept as Kafka keeps them, and a
topic name no topic can have is an error at once, not a wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode as K

from tests.harness import Daemon, free_port
from tests.kafka_raw import RawClient


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("compat")) / "data"
    with Daemon("C", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"]):
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
