"""Records a follower holds are readable, whatever became of the round that
brought them (issue 35, N3), on real daemons through ccr-admin and an
unmodified Kafka client (confluent-kafka).

A backlog is pushed to B; A is killed (SIGKILL) while B is part way through
it. Every record B's log then holds lies below a source high watermark B
was told, and is durable: a consumer on B must read every one, B's high
watermark must reach its log end, and `failover --force` must report the
position a consumer can read, not the log end alone. Waits poll with
bounded deadlines, never bare sleeps."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from test_links_e2e import cli_json, wait_for
from test_operator_stories_e2e import create_topic, describe, link_ab, pair, topic_parts

from admin import AdminClient, Producer

BOUND_S = 60.0
TOPIC = "orders-n3"
PARTITIONS = 2
RECORDS = 3_000  # a partition; 64 KiB each: a backlog of many pushes


def _readable(kafka: str, topic: str, ends: dict[int, int]) -> dict[int, int]:
    """How many records a Kafka consumer on `kafka` reads of each partition,
    from offset 0 up to `ends` (or until nothing more comes for a while)."""
    consumer = KafkaConsumer({
        "bootstrap.servers": kafka, "group.id": f"n3-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    parts = [KafkaTopicPartition(topic, p, 0) for p in sorted(ends)]
    consumer.assign(parts)
    got = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + BOUND_S
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet_since < 5.0:
            if all(
                tp.offset >= ends[tp.partition]
                for tp in consumer.position(parts)
                if tp.offset >= 0
            ) and all(got[p] >= ends[p] for p in ends):
                break
            batch = consumer.consume(1000, 0.2)
            for msg in batch:
                part = msg.partition()
                if msg.error() is None and part is not None:
                    got[part] += 1
            if batch:
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got


def test_source_killed_mid_catch_up__the_follower_reads_all_it_holds(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    create_topic(a, TOPIC, PARTITIONS)
    link_ab(a, b, "orders-")
    wait_for("B to follow", lambda: TOPIC in {t["name"] for t in cli_json(b.bootstrap,
             "list-topics")}, BOUND_S)  # fmt: skip

    b.pause()  # a backlog builds up: B copies it push after push once resumed
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for i in range(RECORDS * PARTITIONS):
        producer.produce(TOPIC, value=f"{i:08d}" + "x" * 65_528, partition=i % PARTITIONS)
    assert producer.flush(120) == 0
    producer.close()
    b.resume()

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        ends = [p.log_end_offset for p in admin.describe_topic(TOPIC).partitions]
        if min(ends) > RECORDS // 10:
            break
        time.sleep(0.005)
    a.pause()
    a.kill9()
    admin.close()
    held = {p["partition"]: p["log_end_offset"] for p in topic_parts(b, TOPIC)}
    assert 0 < min(held.values()) and min(held.values()) < RECORDS, (
        f"A was not stopped mid catch-up: B holds {held}"
    )

    # Every record B holds came below a source HW it was told, and is
    # durable: B's high watermark reaches its log end, with no further round.
    def all_readable() -> bool:
        return all(p["high_watermark"] == p["log_end_offset"] for p in topic_parts(b, TOPIC))

    wait_for("B's high watermark to reach its log end", all_readable, BOUND_S)
    held = {p["partition"]: p["log_end_offset"] for p in topic_parts(b, TOPIC)}
    assert _readable(b.kafka, TOPIC, held) == held

    wait_for("DISCONNECTED on B", lambda: describe(b)["state"] == "DISCONNECTED", BOUND_S)
    rows = {
        p["partition"]: p for p in describe(b)["partitions"] if p["role"] == "follower"
    }
    for part, end in held.items():
        assert rows[part]["high_watermark"] == end, rows[part]
        assert rows[part]["log_end_offset"] == end, rows[part]

    forced = cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    for row in forced["partitions"]:
        if row["topic"] == TOPIC:
            # The position it reports is what a consumer can read: all it holds.
            assert row["high_watermark"] == held[row["partition"]], row
            if row["lag_known"]:
                assert row["lag_records"] == max(
                    0, row["source_high_watermark"] - held[row["partition"]]
                ), row
            else:
                # A is gone: the lag is unknown since the source last said its
                # high watermark, never 0 (docs/operations.md).
                assert row["lag_records"] == -1 and row["unknown_since_ms"] != 0, row
    assert _readable(b.kafka, TOPIC, held) == held
