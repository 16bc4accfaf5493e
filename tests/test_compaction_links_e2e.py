"""A link follows a compacted topic its source has already cleaned: the
follower copies the batches as they are, jumping over the offsets the
source's cleaner removed, so every record sits at the source's offset.
Real daemons, driven through ccr-admin; both sides are read with the client
library and with an unmodified Kafka client (confluent-kafka) over each
daemon's Kafka listener; waits poll, never sleep blindly."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from admin import AdminClient, Consumer, Producer, TopicPartition
from tests.harness import free_port, run_cli
from tests.kafka_reads import consume_to_end

WAIT_S = 60.0
FLAGS = ["--link-session-timeout-ms", "3000", "--log-cleaner-backoff-ms", "50"]


def _cli(bootstrap: str, *args: str) -> Any:
    result = run_cli(*args, "--json", bootstrap=bootstrap)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    return json.loads(result.stdout.splitlines()[0])


def _wait(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _read(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    part = admin.describe_topic(topic).partitions[0]
    admin.close()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    tp = TopicPartition(topic, 0, part.log_start_offset)
    consumer.assign([tp])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + WAIT_S
    while consumer.position([tp])[0].offset < part.high_watermark:
        assert time.monotonic() < deadline, f"reading {topic} stopped at {out[-1:]}"
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None:
                out.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return out


def test_a_follower_copies_a_cleaned_log_at_the_sources_offsets(daemon_factory: Any) -> None:
    listeners = {name: f"127.0.0.1:{free_port()}" for name in ("A", "B")}
    a = daemon_factory("A", extra_args=[*FLAGS, "--kafka-listen", listeners["A"]])
    b = daemon_factory("B", extra_args=[*FLAGS, "--kafka-listen", listeners["B"]])
    for d in (a, b):
        _cli(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    _cli(
        a.bootstrap, "create-topic", "orders-latest",
        "--config", "cleanup.policy=compact",
        "--config", "internal.segment.bytes=400",
        "--config", "min.cleanable.dirty.ratio=0.01",
    )
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 0})
    for i in range(30):
        producer.produce("orders-latest", key=f"k{i % 3}", value=f"v{i}", partition=0)
        assert producer.flush(WAIT_S) == 0  # one batch each: the cleaner removes whole ones
    producer.close()

    def cleaned() -> bool:
        part = _cli(a.bootstrap, "describe-topic", "orders-latest")["partitions"][0]
        return bool(part["cleaner"]["removed_records"] > 0)

    _wait("a clean on A", cleaned)
    source = _read(a.bootstrap, "orders-latest")
    assert len(source) < 30 and source[0][0] > 0  # offsets 0.. are gone from the source

    _cli(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    _cli(
        a.bootstrap, "attach-namespace", "--link", "ab", "--type", "topic",
        "--local-prefix", "orders-", "--remote-prefix", "orders-", "--leader", "local",
    )

    def caught_up() -> bool:
        if "orders-latest" not in {t["name"] for t in _cli(b.bootstrap, "list-topics")}:
            return False
        part = _cli(b.bootstrap, "describe-topic", "orders-latest")["partitions"][0]
        return bool(part["high_watermark"] == 30)

    _wait("B to follow A's log end", caught_up)
    # Both sides clean on their own schedules (A may clean again after the
    # read above, B cleans its copy): whatever each holds is the record
    # written at that offset, and each keeps every key's last value. Read
    # over gRPC and by a Kafka client on both sides.
    written = {i: (f"k{i % 3}".encode(), f"v{i}".encode()) for i in range(30)}
    last = {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}
    for held in (
        _read(b.bootstrap, "orders-latest"),
        consume_to_end(listeners["A"], "orders-latest", WAIT_S),
        consume_to_end(listeners["B"], "orders-latest", WAIT_S),
    ):
        assert all(written[o] == (k, v) for o, k, v in held), held
        assert {k: v for _o, k, v in held} == last, held
    described = _cli(b.bootstrap, "describe-topic", "orders-latest")
    assert described["configs"]["cleanup.policy"] == "compact"
    assert "cleaner" in described["partitions"][0]  # B cleans its copy on its own schedule


def test_a_clean_on_the_source_while_the_follower_is_frozen_is_no_divergence(
    daemon_factory: Any,
) -> None:
    """Issue 35, N4: A rewrites every key of a compacted topic and cleans
    while B is frozen, so the batches B holds are rewritten (another CRC) or
    gone from A. Once B runs again it goes on from its log end: nothing of
    its copy is cut (no truncation in its provenance), and both sides read
    the same records at the same offsets."""
    listeners = {name: f"127.0.0.1:{free_port()}" for name in ("A", "B")}
    a = daemon_factory("A", extra_args=[*FLAGS, "--kafka-listen", listeners["A"]])
    b = daemon_factory("B", extra_args=[*FLAGS, "--kafka-listen", listeners["B"]])
    for d in (a, b):
        _cli(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    _cli(
        a.bootstrap, "create-topic", "orders-keys",
        "--config", "cleanup.policy=compact",
        "--config", "internal.segment.bytes=400",
        "--config", "min.cleanable.dirty.ratio=0.01",
    )  # fmt: skip
    _cli(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    _cli(
        a.bootstrap, "attach-namespace", "--link", "ab", "--type", "topic",
        "--local-prefix", "orders-", "--remote-prefix", "orders-", "--leader", "local",
    )  # fmt: skip

    def produce(first: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 0})
        for i in range(first, first + count):
            # Two records a batch: a clean keeps one of them (a rewrite).
            producer.produce("orders-keys", key=f"k{i % 6}", value=f"v{i}", partition=0)
            producer.produce("orders-keys", key=f"solo{i}", value=f"s{i}", partition=0)
            assert producer.flush(WAIT_S) == 0
        producer.close()

    def hw(bootstrap: str) -> int:
        if "orders-keys" not in {t["name"] for t in _cli(bootstrap, "list-topics")}:
            return -1
        part = _cli(bootstrap, "describe-topic", "orders-keys")["partitions"][0]
        return int(part["high_watermark"])

    produce(0, 12)
    _wait("B to copy A", lambda: hw(b.bootstrap) == hw(a.bootstrap) == 24)
    removed_before = _cli(a.bootstrap, "describe-topic", "orders-keys")["partitions"][0][
        "cleaner"
    ]["removed_records"]

    b.pause()
    produce(12, 12)  # every k-key again: the batches B holds lose a record or go
    try:
        _wait(
            "a clean on A of what B holds",
            lambda: _cli(a.bootstrap, "describe-topic", "orders-keys")["partitions"][0][
                "cleaner"
            ]["removed_records"]
            > removed_before,
        )
    finally:
        b.resume()

    _wait("B to follow A's log end", lambda: hw(b.bootstrap) == 48)
    history = _cli(b.bootstrap, "provenance", "orders-keys")["partitions"][0]["provenance"]
    assert [e for e in history if e["kind"] == "truncated"] == [], history
    source = _read(a.bootstrap, "orders-keys")
    copy = {o: (k, v) for o, k, v in _read(b.bootstrap, "orders-keys")}
    # Every record A still holds is on B at its offset (B cleans on its own
    # schedule: it may hold fewer, never other ones).
    assert all(copy.get(o) == (k, v) for o, k, v in source if o in copy)
    assert consume_to_end(listeners["B"], "orders-keys", WAIT_S)[-1][0] == 47
