"""Reading a topic to its end with an unmodified Kafka client (confluent-kafka),
as the end-to-end tests that compare offsets do."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError

Record = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


def consume_to_end(bootstrap: str, topic: str, wait_s: float = 30.0) -> list[Record]:
    """Every record of partition 0.. of `topic` from the earliest offset to the
    end of each partition, in a fresh group, as (offset, key, value)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{topic}-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    consumer.subscribe([topic])
    got: list[Record] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                return got
            offset = msg.offset()
            assert offset is not None
            got.append((offset, msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError(f"no end of {topic} within {wait_s} s; read {got}")
