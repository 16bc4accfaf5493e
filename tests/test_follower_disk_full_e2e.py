"""A follower whose disk refuses writes, tried with ccr-admin on real daemons
and a Kafka producer (spec section 10, invariant 9 applied to what the
follower stored): B follows A; B's largest file may no longer grow (its
RLIMIT_FSIZE lowered to its segment's size, as a full disk refuses writes)
while A's producer writes on. B's link must not say FOLLOWING: the
partition's describe-link row says "disk refused writes", `ccr-admin top`
shows it, a failover without force is refused naming it, and once the disk
takes writes again B copies everything and FOLLOWS."""

from __future__ import annotations

import json
import resource
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as KafkaProducer
from harness import run_cli
from test_links_e2e import cli_json, high_watermarks, wait_for
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
