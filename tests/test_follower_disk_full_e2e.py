"""A follower whose disk refuses writes, tried with ccr-admin on real daemons
and a Kafka producer (spec section 10, invariant 9 applied to what the
follower stored): B follows A; B's largest file may no longer grow (its
RLIMIT_FSIZE lowered to its segment's size, as a full disk refuses writes)
while A's producer writes on. B's link must not say FOLLOWING: the
partition's describe-link row says "disk refused writes", `ccr-admin top`
shows it, a failover without force is refused naming it, and once the disk
takes writes again B copies everything and FOLLOWS.

The second case: B's storage cannot create the follower topic of a topic A
creates (where B's partition directories go is a file for a while, as a
full disk or a read-only data directory refuses new logs): B's link must
not say FOLLOWING then either; describe-link has a row per partition of
the topic naming the refusal, the metric counts them, a failover without
force names the topic, and once B may open files again it creates the topic
and copies it."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as KafkaProducer
from harness import free_port, run_cli
from test_links_e2e import LINK_FLAGS, cli_json, high_watermarks, wait_for
from test_metrics_e2e import scrape
from test_operator_stories_e2e import attach, make_cluster, namespaces

RECORD = bytes(16_000)


def _produce(d: Any, topic: str, n: int, label: str) -> None:
    producer = KafkaProducer({"bootstrap.servers": d.kafka, "acks": "all", "linger.ms": 0})
    failed: list[Any] = []
    for i in range(n):
        producer.produce(
            topic, value=f"{label}-{i}-".encode() + RECORD,
            on_delivery=lambda e, m: failed.append(e) if e is not None else None,
        )  # fmt: skip
    assert producer.flush(60) == 0 and not failed, failed


def _segment(d: Any) -> Path:
    logs = sorted((d.data_dir / "topics").glob("orders-x-0/*.log")) or sorted(
        (d.data_dir / "topics").glob("*-0/*.log")
    )
    assert len(logs) == 1, logs
    return Path(logs[0])


def _row(d: Any) -> dict[str, Any] | None:
    rows = [p for p in cli_json(d.bootstrap, "describe-link", "ab")["partitions"]
            if p["role"] == "follower" and p["topic"] == "orders-x"]  # fmt: skip
    return rows[0] if rows else None


def test_a_follower_whose_disk_refuses_writes__says_so__and_catches_up_after(
    daemon_factory: Any,
) -> None:
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", on=(a,))
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    cli_json(a.bootstrap, "create-topic", "orders-x")
    _produce(a, "orders-x", 40, "before")
    wait_for("B holds the first 40", lambda: high_watermarks(b.bootstrap, "orders-x") == [40])
    wait_for("B follows", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "FOLLOWING")  # fmt: skip

    # B's disk fills: no file of B's may grow past its segment's size now.
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    assert b.pid is not None
    resource.prlimit(b.pid, resource.RLIMIT_FSIZE, (_segment(b).stat().st_size, hard))
    try:
        _produce(a, "orders-x", 20, "during")

        def refused() -> bool:
            row = _row(b)
            return row is not None and "disk refused writes" in row.get("problem", "")

        wait_for("B's row says its disk refused writes", refused, 60)
        info = cli_json(b.bootstrap, "describe-link", "ab")
        assert info["state"] != "FOLLOWING", info
        row = _row(b)
        assert row is not None and row["log_end_offset"] == 40, row
        assert high_watermarks(b.bootstrap, "orders-x") == [40]

        top = run_cli("top", "--once", bootstrap=b.bootstrap)
        assert top.returncode == 0, top.stderr
        assert "disk refused writes" in top.stdout, top.stdout

        failover = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
        assert failover.returncode == 1, (failover.stdout, failover.stderr)
        assert "disk refused writes of orders-x-0" in failover.stderr, failover.stderr
    finally:
        resource.prlimit(b.pid, resource.RLIMIT_FSIZE, (hard, hard))

    wait_for("B holds all 60", lambda: high_watermarks(b.bootstrap, "orders-x") == [60], 60)
    wait_for("B follows again", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "FOLLOWING", 60)  # fmt: skip
    row = _row(b)
    assert row is not None and not row.get("problem"), json.dumps(row)



def test_a_follower_topic_its_storage_cannot_create__is_named__and_created_after(
    daemon_factory: Any,
) -> None:
    metrics = f"127.0.0.1:{free_port()}"
    a = make_cluster(daemon_factory, "A")
    b = make_cluster(daemon_factory, "B", [*LINK_FLAGS, "--metrics-listen", metrics])
    namespaces("topic", "orders-", on=(a,))
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    wait_for("B follows the empty namespace", lambda: cli_json(
        b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING")  # fmt: skip

    # B's storage refuses new logs: where its partition directories go is a
    # file now, as a full disk or a read-only data directory refuses them.
    topics = Path(b.data_dir) / "topics"
    topics.mkdir(exist_ok=True)
    assert not any(topics.iterdir()), list(topics.iterdir())
    topics.rmdir()
    topics.write_bytes(b"")
    try:
        cli_json(a.bootstrap, "create-topic", "orders-big", "--partitions", "4")
        _produce(a, "orders-big", 5, "big")

        def rows() -> list[dict[str, Any]]:
            return [p for p in cli_json(b.bootstrap, "describe-link", "ab")["partitions"]
                    if p["role"] == "follower" and p["topic"] == "orders-big"]  # fmt: skip

        wait_for("B's rows name the topic it could not create", lambda: len(rows()) == 4, 60)
        info = cli_json(b.bootstrap, "describe-link", "ab")
        assert info["state"] != "FOLLOWING", info
        for row in rows():
            assert "disk refused writes" in row["problem"], row
            assert "create" in row["problem"] and not row.get("lag_known"), row
        samples = scrape(metrics)["ccr_link_storage_refused_partitions"]
        assert [v for labels, v in samples if labels.get("link") == "ab"] == [4.0], samples

        failover = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
        assert failover.returncode == 1, (failover.stdout, failover.stderr)
        assert "orders-big (not created)" in failover.stderr, failover.stderr
    finally:
        topics.unlink()
        topics.mkdir()

    wait_for("B holds orders-big", lambda: sum(high_watermarks(b.bootstrap, "orders-big") or [0])
             == 5, 60)  # fmt: skip
    wait_for("B follows again", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "FOLLOWING", 60)  # fmt: skip
    assert not any(p.get("problem") for p in cli_json(b.bootstrap, "describe-link", "ab")
                   ["partitions"]), "a row still names a refusal"  # fmt: skip


def test_a_sync_follower_whose_disk_refuses_writes__is_not_in_sync__and_failover_names_it(
    daemon_factory: Any,
) -> None:
    """SYNC: the source stops waiting for a follower that does not catch up
    once its lag time runs out, and acknowledges without it; so a follower
    whose disk refuses what it fetched never says IN_SYNC (it would let a
    failover take its lag as known and zero). Checked while A still waits
    for B (a lag time of 20 s): A's records are not acknowledged yet."""
    flags = [*LINK_FLAGS, "--link-replica-lag-time-max-ms", "20000"]
    a, b = make_cluster(daemon_factory, "A", flags), make_cluster(daemon_factory, "B", flags)
    namespaces("topic", "orders-", on=(a,))
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    cli_json(a.bootstrap, "create-topic", "orders-x")
    _produce(a, "orders-x", 40, "before")
    wait_for("B holds the first 40", lambda: high_watermarks(b.bootstrap, "orders-x") == [40])
    wait_for("B follows", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "FOLLOWING")  # fmt: skip
    assert cli_json(a.bootstrap, "set-mode", "--link", "ab", "sync")["mode"] == "SYNC"
    wait_for("B in sync", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "IN_SYNC")  # fmt: skip

    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    assert b.pid is not None
    resource.prlimit(b.pid, resource.RLIMIT_FSIZE, (_segment(b).stat().st_size, hard))
    producer = KafkaProducer({"bootstrap.servers": a.kafka, "acks": "all", "linger.ms": 0})
    failed: list[Any] = []
    try:
        for i in range(5):  # A holds their acknowledgement for B
            producer.produce(
                "orders-x", value=f"during-{i}-".encode() + RECORD,
                on_delivery=lambda e, m: failed.append(e) if e is not None else None,
            )  # fmt: skip
        producer.poll(0)

        def refused() -> bool:
            row = _row(b)
            return row is not None and "disk refused writes" in row.get("problem", "")

        wait_for("B's row says its disk refused writes", refused, 15)
        info = cli_json(b.bootstrap, "describe-link", "ab")
        assert info["state"] == "SYNCING", info
        failover = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
        assert failover.returncode == 1, (failover.stdout, failover.stderr)
        assert "LINK_NOT_FOLLOWING" in failover.stderr, failover.stderr
        assert "SYNCING, because this cluster's disk refused writes of orders-x-0" in (
            failover.stderr
        ), failover.stderr
    finally:
        resource.prlimit(b.pid, resource.RLIMIT_FSIZE, (hard, hard))

    assert producer.flush(60) == 0 and not failed, failed
    wait_for("B holds all 45", lambda: high_watermarks(b.bootstrap, "orders-x") == [45], 60)
    wait_for("B in sync again", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"]
             == "IN_SYNC", 60)  # fmt: skip
