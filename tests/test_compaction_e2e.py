"""Compacted topics end to end: a real daemon's log cleaner, read by an
unmodified Kafka client (confluent-kafka) across the offset gaps it leaves,
and its state in `ccr-admin describe-topic --json`.

Small segments (so most of the log is below the active segment), a cleaner
that wakes every 50 ms with a budget of 2 KiB per pass (so a clean spans
several passes), and waits that poll describe-topic, never sleep.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.harness import Daemon, free_port, run_cli
from tests.kafka_reads import consume_to_end

KEYS = [b"k0", b"k1", b"k2", b"k3"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, str]]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("compaction")) / "data"
    args = [
        "--kafka-listen", f"127.0.0.1:{port}",
        "--log-cleaner-backoff-ms", "50",
        "--log-cleaner-io-bytes-per-pass", "2048",
    ]
    with Daemon("CP", data, extra_args=args) as daemon:
        yield daemon, f"127.0.0.1:{port}"


def _create(bootstrap: str, name: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    base = {
        "cleanup.policy": "compact",
        "internal.segment.bytes": "400",  # Kafka's key for segments below 1 MiB
        "min.cleanable.dirty.ratio": "0.01",
    }
    topic = NewTopic(name, num_partitions=1, replication_factor=1, config={**base, **configs})
    admin.create_topics([topic])[name].result(20)


def _history() -> list[tuple[bytes, bytes | None]]:
    """Keys overwritten many times, k1 deleted (a tombstone) and k3 written once."""
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(24):
        key = KEYS[i % 3]
        out.append((key, None if (key == b"k1" and i == 22) else f"v{i}".encode()))
    out.append((b"k3", b"only"))
    out += [(b"k0", b"last0"), (b"k2", b"last2")]
    return out


def _produce_one_batch_each(bootstrap: str, topic: str, history: list[Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[KafkaError] = []
    for key, value in history:
        producer.produce(
            topic, key=key, value=value, on_delivery=lambda e, _m: e and errors.append(e)
        )
        assert producer.flush(20) == 0
    assert errors == []


def _describe(daemon: Daemon, topic: str) -> dict[str, Any]:
    out = run_cli("describe-topic", topic, "--json", bootstrap=daemon.bootstrap)
    assert out.returncode == 0, out.stderr
    partition: dict[str, Any] = json.loads(out.stdout)["partitions"][0]
    return partition


def _wait_cleaner(daemon: Daemon, topic: str, done: Any, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        state = _describe(daemon, topic)
        if done(state["cleaner"]):
            return state
        assert time.monotonic() < deadline, f"{what}: the cleaner shows {state['cleaner']}"
        time.sleep(0.1)


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    return consume_to_end(bootstrap, topic)


def _read_between_cleans(
    daemon: Daemon, bootstrap: str, topic: str, done: Any, what: str
) -> tuple[dict[str, Any], list[tuple[int, bytes | None, bytes | None]]]:
    """Once the cleaner shows `done`: its state and the records read, taken
    while no pass ran (a pass cleans a few segments; the next may follow
    50 ms later, so a read may straddle it: then read again)."""
    for _ in range(50):
        state = _wait_cleaner(daemon, topic, done, what)
        got = _consume_all(bootstrap, topic)
        after = _describe(daemon, topic)["cleaner"]
        if (after["cleans"], after["cleaned_up_to"]) == (
            state["cleaner"]["cleans"], state["cleaner"]["cleaned_up_to"]
        ):
            return state, got
    raise AssertionError(f"{what}: the cleaner never stayed still for one read of {topic}")


def _expected(
    history: list[tuple[bytes, bytes | None]], end: int, *, tombstones: bool
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Kafka's answer: below `end`, the last record of each key (tombstones
    while kept); from `end` on, every record; offsets as produced."""
    last = {key: offset for offset, (key, _) in enumerate(history) if offset < end}
    out = []
    for offset, (key, value) in enumerate(history):
        if offset < end and (last[key] != offset or (value is None and not tombstones)):
            continue
        out.append((offset, key, value))
    return out


def test_a_compacted_topic_keeps_each_keys_last_value_at_its_offset(
    kafka: tuple[Daemon, str],
) -> None:
    daemon, bootstrap = kafka
    _create(bootstrap, "compacted-long", **{"delete.retention.ms": "3600000"})
    history = _history()
    _produce_one_batch_each(bootstrap, "compacted-long", history)
    state, got = _read_between_cleans(
        daemon, bootstrap, "compacted-long",
        lambda c: c["cleans"] >= 1 and c["removed_records"] > 0, "a first clean",
    )
    cleaner = state["cleaner"]
    end = cleaner["cleaned_up_to"]
    assert 0 < end < len(history) and cleaner["last_clean_ms"] > 0
    assert state["log_end_offset"] == len(history) and state["log_start_offset"] == 0
    assert got == _expected(history, end, tombstones=True)
    assert (22, b"k1", None) in got or end <= 22  # the tombstone is kept for delete.retention.ms
    # kill -9: the cleaned log (its gaps) is read back as it was.
    daemon.restart(kill=True)
    assert _consume_all(bootstrap, "compacted-long") == got


def test_tombstones_go_once_delete_retention_has_passed(kafka: tuple[Daemon, str]) -> None:
    daemon, bootstrap = kafka
    _create(bootstrap, "compacted-short", **{"delete.retention.ms": "0"})
    history = _history()
    _produce_one_batch_each(bootstrap, "compacted-short", history)
    state, got = _read_between_cleans(
        daemon, bootstrap, "compacted-short",
        lambda c: c["cleans"] >= 2 and c["cleaned_up_to"] > 22,
        "a clean past the tombstone's horizon",
    )
    assert got == _expected(history, state["cleaner"]["cleaned_up_to"], tombstones=False)
    assert all(key != b"k1" for _offset, key, _value in got)  # k1's tombstone is gone too


def test_a_record_without_a_key_is_refused(kafka: tuple[Daemon, str]) -> None:
    _daemon, bootstrap = kafka
    _create(bootstrap, "compacted-keys")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    errors: list[KafkaError] = []
    producer.produce("compacted-keys", value=b"no key", on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(20) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]


def test_describe_topic_prints_the_cleaner_of_compacted_topics_only(
    kafka: tuple[Daemon, str],
) -> None:
    daemon, bootstrap = kafka
    _create(bootstrap, "compacted-view")
    out = run_cli("describe-topic", "compacted-view", bootstrap=daemon.bootstrap)
    assert out.returncode == 0, out.stderr
    assert "log cleaner:" in out.stdout and "CLEANED-UP-TO" in out.stdout
    run_cli("create-topic", "plain-view", bootstrap=daemon.bootstrap)
    assert "cleaner" not in _describe(daemon, "plain-view")


def test_aborted_records_go_and_committed_ones_are_compacted(kafka: tuple[Daemon, str]) -> None:
    daemon, bootstrap = kafka
    _create(bootstrap, "compacted-txn", **{"delete.retention.ms": "3600000"})
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": "compacted-txn", "linger.ms": 0,
    })
    producer.init_transactions(20)
    for round_ in range(8):
        producer.begin_transaction()
        for key in (b"k0", b"k1"):
            producer.produce("compacted-txn", key=key, value=f"{key.decode()}-{round_}".encode())
        assert producer.flush(20) == 0
        if round_ % 3 != 1:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)
    _wait_cleaner(
        daemon, "compacted-txn", lambda c: c["removed_records"] > 0, "a clean of transactions"
    )
    got = _consume_all(bootstrap, "compacted-txn")
    values = {key: value for _offset, key, value in got}
    # read_committed or not, an aborted value is never seen once cleaned; the
    # last committed round's values are each key's last.
    last_committed = max(r for r in range(8) if r % 3 != 1)
    assert values == {key: f"{key.decode()}-{last_committed}".encode() for key in (b"k0", b"k1")}
    offsets = [offset for offset, _key, _value in got]
    assert offsets == sorted(offsets) and len(got) < 16


def test_segment_bytes_altered_on_a_live_topic_rolls_its_log_at_once(
    kafka: tuple[Daemon, str],
) -> None:
    """A topic created with large segments, then altered to small ones through
    confluent-kafka's AdminClient: the next appends roll by the new size, so
    the cleaner gets segments to clean without a restart (the store used to
    keep the segment size it was opened with until the daemon restarted)."""
    daemon, bootstrap = kafka
    _create(bootstrap, "compacted-altered", **{"segment.bytes": "1048576"})
    history = _history()
    _produce_one_batch_each(bootstrap, "compacted-altered", history[:5])
    assert _describe(daemon, "compacted-altered")["cleaner"]["cleans"] == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # Below segment.bytes' 1 MiB floor: Kafka's internal key sets the size.
    entry = ConfigEntry("internal.segment.bytes", "400",
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", "compacted-altered", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(20)
    _produce_one_batch_each(bootstrap, "compacted-altered", history[5:])
    state, got = _read_between_cleans(
        daemon, bootstrap, "compacted-altered",
        lambda c: c["cleans"] >= 1 and c["removed_records"] > 0,
        "a clean after segment.bytes was altered",
    )
    end = state["cleaner"]["cleaned_up_to"]
    assert got == _expected(history, end, tombstones=True)
