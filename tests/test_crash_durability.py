"""kill -9 while a producer writes with acks: every acknowledged record survives.

For each seed, a producer (the client library, acks=all, idempotent) writes
keyed records to a 3-partition topic; after a seeded number of acknowledgements
the daemon is killed with SIGKILL while more batches are in flight. After a
restart on the same data dir, every acknowledged record must be readable at its
acknowledged partition and offset, with its key and value, and offsets must be
dense (no holes) up to the log end.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from admin import AdminClient, Consumer, Producer, TopicPartition

TOPIC = "crash"
PARTITIONS = 3
ACK_WAIT_S = 60.0
READ_WAIT_S = 60.0


def _produce_until_killed(daemon: Any, seed: int) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    rng = random.Random(seed)
    kill_after = rng.randint(20, 400)
    acked: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        else:
            errors.append(err)

    producer = Producer(
        {
            "bootstrap.servers": daemon.bootstrap,
            "acks": "all",
            "linger.ms": rng.choice([0, 1, 5]),
            "batch.size": rng.choice([512, 4096, 65536]),
            "delivery.timeout.ms": 3000,
            "enable.idempotence": True,
        }
    )
    deadline = time.monotonic() + ACK_WAIT_S
    i = 0
    try:
        while len(acked) < kill_after:
            assert time.monotonic() < deadline, f"only {len(acked)} acks in {ACK_WAIT_S}s"
            for _ in range(rng.randint(1, 20)):
                key = f"key-{rng.randint(0, 50)}".encode()
                producer.produce(
                    TOPIC, value=f"value-{seed}-{i}".encode(), key=key, on_delivery=on_delivery
                )
                i += 1
            producer.poll(0.001)
        # Keep batches in flight while the process dies.
        for _ in range(200):
            producer.produce(
                TOPIC, value=f"value-{seed}-{i}".encode(), key=b"late", on_delivery=on_delivery
            )
            i += 1
        daemon.kill9()
        # What was acknowledged before the kill is already reported or in the
        # client's queue; the rest can never be: purged, not waited out until
        # delivery.timeout.ms.
        producer.poll(0)
        producer.purge()
        producer.flush(10.0)
    finally:
        producer.purge()
        producer.close(1.0)
    assert len(acked) >= kill_after
    return acked


def _read_all(bootstrap: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends = {p.partition: p.high_watermark for p in admin.describe_topic(TOPIC).partitions}
    starts = {p.partition: p.log_start_offset for p in admin.describe_topic(TOPIC).partitions}
    admin.close()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "crash-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, starts[p]) for p in range(PARTITIONS)])
    found: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + READ_WAIT_S
    total = sum(ends[p] - starts[p] for p in range(PARTITIONS))
    while len(found) < total and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        found[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    consumer.close()
    for p in range(PARTITIONS):
        offsets = sorted(o for (q, o) in found if q == p)
        assert offsets == list(range(starts[p], ends[p])), f"partition {p} has holes"
    return found


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_kill9_while_producing__every_acked_record_survives(daemon_factory: Any, seed: int) -> None:
    daemon = daemon_factory("A")
    admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
    admin.create_topic(TOPIC, PARTITIONS)
    admin.close()

    acked = _produce_until_killed(daemon, seed)

    daemon.start()
    daemon.wait_ready()
    found = _read_all(daemon.bootstrap)
    missing = {k: v for k, v in acked.items() if found.get(k) != v}
    assert not missing, f"seed {seed}: {len(missing)} acknowledged records lost or changed"
