"""Reversing a link's direction with full consistency, between real daemons
(KIP-986 "Reverse the replication direction of a namespace with
full-consistency"; spec section 8)."""

from __future__ import annotations

import json
from typing import Any

from harness import run_cli
from test_links_e2e import LINK_FLAGS, cli_json, high_watermarks, produce, wait_for
from test_recovery_e2e import attach, namespaces

from admin import AdminClient, Consumer, Producer, TopicPartition


def read_n(bootstrap: str, topic: str, n: int) -> list[tuple[int, int, bytes | None]]:
    """The first n records (read_uncommitted) of every partition from the log
    start: (partition, offset, value). Control markers take offsets but are
    not records, so the caller says how many records to expect."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.describe_topic(topic).partitions
    admin.close()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p.partition, p.log_start_offset) for p in parts])
    out: list[tuple[int, int, bytes | None]] = []
    for _ in range(200):  # bounded: 200 polls of at most 0.2 s
        if len(out) >= n:
            break
        for msg in consumer.consume(1000, 0.2):
            if msg.error() is None:
                out.append((msg.partition() or 0, msg.offset() or 0, msg.value()))
    consumer.close()
    return sorted(out)


STEPS = [
    "verify-link-state",
    "reserve-leader-namespaces",
    "abort-open-transactions",
    "wait-for-remote",
    "detach-mappings",
    "attach-swapped-mappings",
    "promote-remote-namespaces",
]


def test_reverse__aborts_the_open_transaction__new_leader_writes_and_replicates_back(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "local")
    attach(a, "ab", "group", "app-", "local")
    run_cli("create-topic", "orders-r", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-r", 40, "a")
    # A transaction left open on A.
    txn = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "t-open"})
    txn.init_transactions()
    txn.begin_transaction()
    txn.produce("orders-r", value="in-doubt", partition=0)
    assert txn.flush(30) == 0
    wait_for(
        "FOLLOWING", lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )

    result = cli_json(a.bootstrap, "reverse", "--link", "ab", "--timeout-ms", "30000")
    assert result["ok"] is True and result["error"] is None
    assert [s["name"] for s in result["steps"]] == STEPS
    assert all(s["ok"] for s in result["steps"])
    aborted = next(s for s in result["steps"] if s["name"] == "abort-open-transactions")
    assert aborted["result"] == "aborted 1 open transactions: t-open"
    assert {(m["type"], m["leader"]) for m in result["mappings"]} == {
        ("topic", "remote"),
        ("group", "remote"),
    }
    txn.close()

    # Both sides hold the same log, the abort marker included; nothing is open.
    source = high_watermarks(a.bootstrap, "orders-r")
    assert high_watermarks(b.bootstrap, "orders-r") == source
    assert source is not None and sum(source) == 42  # 40 records, the open one, its marker

    # A is now the follower: its own producers are refused.
    refused = run_cli("produce", "orders-r", bootstrap=a.bootstrap, input="x\n")
    assert refused.returncode == 1 and "FOLLOWER_TOPIC_NOT_WRITABLE" in refused.stderr
    # B leads, with a new leader epoch, and its writes replicate back to A.
    described = cli_json(b.bootstrap, "provenance", "orders-r")
    assert all(p["leader_epoch"] == 1 for p in described["partitions"])
    produce(b.bootstrap, "orders-r", 10, "b")
    wait_for(
        "A follows B",
        lambda: (
            high_watermarks(a.bootstrap, "orders-r") == high_watermarks(b.bootstrap, "orders-r")
        ),
    )
    on_a, on_b = read_n(a.bootstrap, "orders-r", 51), read_n(b.bootstrap, "orders-r", 51)
    assert on_a == on_b and len(on_a) == 51  # 40 + the aborted record + 10
    assert [v for _p, _o, v in on_a if v == b"in-doubt"] == [b"in-doubt"]
    committed_only = run_cli(
        "consume",
        "orders-r",
        "--from-beginning",
        "--isolation",
        "read_committed",
        "--json",
        "--timeout-ms",
        "1500",
        bootstrap=a.bootstrap,
    )
    assert committed_only.returncode == 0 and "in-doubt" not in committed_only.stdout
    assert len(committed_only.stdout.splitlines()) == 50
    # The reversal's own calls to B, each in a session of its own, never
    # pushed the link's busy session out: no call of the link was refused.
    link = cli_json(a.bootstrap, "describe-link", "ab")
    assert link["last_error_code"] in ("", "NONE"), link["last_error"]


def test_reverse__refused_unless_following__and_stops_reporting_the_step_that_failed(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "local")
    run_cli("create-topic", "orders-s", "--partitions", "1", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-s", 5)
    wait_for(
        "FOLLOWING", lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    b.terminate()
    wait_for(
        "DISCONNECTED",
        lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "DISCONNECTED",
    )
    refused = run_cli("reverse", "--link", "ab", bootstrap=a.bootstrap)
    assert refused.returncode == 1 and "LINK_NOT_FOLLOWING" in refused.stderr

    # Following again, but the remote goes away right after: the wait fails,
    # the steps so far are reported, and the reversal is rolled back (no
    # mapping changed yet): A leads and takes writes again.
    b.start()
    b.wait_ready()
    wait_for(
        "FOLLOWING", lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    produce(a.bootstrap, "orders-s", 5)
    b.terminate()
    failed = run_cli(
        "reverse", "--link", "ab", "--json", "--timeout-ms", "2000", bootstrap=a.bootstrap
    )
    if failed.returncode == 1 and not failed.stdout.strip():
        # The link noticed the loss first: refused before any step ran.
        assert "LINK_NOT_FOLLOWING" in failed.stderr
        return
    assert failed.returncode == 1, failed.stdout
    report = json.loads(failed.stdout)
    assert report["ok"] is False
    names = [s["name"] for s in report["steps"]]
    assert names == STEPS[: len(names)] and names[-1] == "wait-for-remote"
    assert report["steps"][-1]["ok"] is False
    assert report["error"]["code"] in ("LINK_UNREACHABLE", "REQUEST_TIMED_OUT")
    assert report["rolled_back"] is True and report["pending"] is False
    assert "rolled back" in report["steps"][-1]["result"]
    ns = cli_json(a.bootstrap, "describe-namespace", "--type", "topic", "--prefix", "orders-")
    assert ns["reserved"] is False
    assert cli_json(a.bootstrap, "describe-link", "ab")["procedure"] is None
    produce(a.bootstrap, "orders-s", 1)
