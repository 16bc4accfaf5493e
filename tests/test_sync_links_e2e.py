"""SYNC replication links between real daemons, driven through ccr-admin and
the client library.

Stories (spec sections 4-6, invariants 4 and 5): a link switches to SYNC only
from FOLLOWING and becomes IN_SYNC on both sides; while IN_SYNC an acknowledged
record is already on the follower; a stalled follower (SIGSTOP) makes the link
OUT_OF_SYNC after link.replica.lag.time.max.ms, plain producers keep going and
transactional commits fail with LINK_NOT_IN_SYNC, and after SIGCONT the link is
IN_SYNC again; failover after IN_SYNC loses nothing acknowledged; a
read_committed reader on the follower never sees part of a transaction.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import grpc
import pytest
from harness import run_cli
from test_links_e2e import cli_json, link_orders, read_all, wait_for

from admin import AdminClient, CcrError, Consumer, Producer, TopicPartition
from ccr.v1 import cluster_pb2, cluster_pb2_grpc
from linkd.core import records as rb

LAG_TIME_MS = 2000
SYNC_FLAGS = [
    "--link-session-timeout-ms",
    "3000",
    "--link-replica-lag-time-max-ms",
    str(LAG_TIME_MS),
]


def state(bootstrap: str) -> str:
    return str(cli_json(bootstrap, "describe-link", "ab")["state"])


def describe_partitions(bootstrap: str, topic: str) -> list[Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return list(admin.describe_topic(topic).partitions)
    finally:
        admin.close()


@pytest.fixture
def sync_linked(daemon_factory: Any) -> tuple[Any, Any]:
    """A leads orders- to B over link ab, switched to SYNC and IN_SYNC on both sides."""
    a = daemon_factory("A", extra_args=SYNC_FLAGS)
    b = daemon_factory("B", extra_args=SYNC_FLAGS)
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    run_cli("create-topic", "orders-x", "--partitions", "2", bootstrap=a.bootstrap)
    link_orders(a, b)
    wait_for(
        "topic on B",
        lambda: run_cli("describe-topic", "orders-x", bootstrap=b.bootstrap).returncode == 0,
    )
    wait_for("FOLLOWING on A", lambda: state(a.bootstrap) == "FOLLOWING")
    wait_for("FOLLOWING on B", lambda: state(b.bootstrap) == "FOLLOWING")
    link = cli_json(a.bootstrap, "set-mode", "--link", "ab", "sync")
    assert link["mode"] == "SYNC"
    assert link["state"] in ("SYNCING", "IN_SYNC")
    wait_for("IN_SYNC on A", lambda: state(a.bootstrap) == "IN_SYNC")
    wait_for("IN_SYNC on B", lambda: state(b.bootstrap) == "IN_SYNC")
    return a, b


def test_set_mode_sync__refused_unless_following(daemon_factory: Any) -> None:
    a = daemon_factory("A", extra_args=SYNC_FLAGS)
    b = daemon_factory("B", extra_args=SYNC_FLAGS)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    b.terminate()
    wait_for("DISCONNECTED", lambda: state(a.bootstrap) == "DISCONNECTED")
    result = run_cli("set-mode", "--link", "ab", "sync", bootstrap=a.bootstrap)
    assert result.returncode != 0
    assert "LINK_NOT_FOLLOWING" in result.stderr and "DISCONNECTED" in result.stderr
    # Back to ASYNC is always allowed (here: already ASYNC; the mode is recorded
    # anew so the newest request wins, and B, being down, cannot confirm it:
    # pending, exit 3).
    link = cli_json(a.bootstrap, "set-mode", "--link", "ab", "async", pending=True)
    assert link["mode"] == "ASYNC" and link["pending"]["remote_cluster_id"] == "B"


def test_sync_link__in_sync__every_acknowledged_record_is_already_on_the_follower(
    sync_linked: tuple[Any, Any],
) -> None:
    a, b = sync_linked
    producer = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0})
    acked: list[tuple[int, int]] = []
    for i in range(40):
        producer.produce(
            "orders-x",
            value=f"r{i}",
            partition=i % 2,
            on_delivery=lambda err, msg: (
                acked.append((msg.partition(), msg.offset())) if err is None else None
            ),
        )
        assert producer.flush(30) == 0
        # Invariant 4: at ack time the follower already holds the record.
        partition, offset = acked[-1]
        follower = describe_partitions(b.bootstrap, "orders-x")[partition]
        assert follower.log_end_offset > offset, (partition, offset, follower)
    producer.close()
    assert len(acked) == 40
    assert state(a.bootstrap) == "IN_SYNC"


def test_sync_link__follower_stalled__out_of_sync__plain_producers_go_on__commits_fail__then_back(
    sync_linked: tuple[Any, Any],
) -> None:
    a, b = sync_linked
    txn = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "tx-1"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("orders-x", value="in-sync-txn", partition=0)
    txn.commit_transaction(30)

    # The follower's last caught-up fetch must be fresh when it stops: A
    # times the lag from it, so an older one (a loaded machine between the
    # commit and the pause) would release the stalled acks early. A SYNC
    # acknowledgement needs exactly such a fetch.
    plain = Producer({"bootstrap.servers": a.bootstrap, "acks": "all"})
    plain.produce("orders-x", value="fresh-contact", partition=1)
    assert plain.flush(30) == 0
    b.pause()
    try:
        started = time.monotonic()
        # Over gRPC, a produce that leaves acks out waits as acks=all, bounded
        # by its timeout_ms; an explicit acks=0 answers at once.
        with grpc.insecure_channel(a.bootstrap) as channel:
            stub = cluster_pb2_grpc.ClusterStub(channel)
            batch = rb.build_batch([rb.RecordSpec(None, b"no-acks-said", int(time.time() * 1000))])
            with pytest.raises(grpc.RpcError) as timed_out:
                stub.Produce(cluster_pb2.ProduceRequest(
                    topic="orders-x", partition=1, batch=batch, timeout_ms=300), timeout=30)
            assert timed_out.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            assert "REQUEST_TIMED_OUT" in (timed_out.value.details() or "")
            assert "for 300 ms" in (timed_out.value.details() or "")
            assert time.monotonic() - started < LAG_TIME_MS / 1000
            stub.Produce(cluster_pb2.ProduceRequest(
                topic="orders-x", partition=1, batch=batch, acks=0), timeout=30)
        for i in range(10):
            plain.produce("orders-x", value=f"stalled-{i}", partition=1)
        # The first acks wait for the follower until the lag time passes; then
        # the link is OUT_OF_SYNC and acks stop waiting.
        assert plain.flush(60) == 0
        assert time.monotonic() - started >= LAG_TIME_MS / 1000 * 0.9
        wait_for("OUT_OF_SYNC on A", lambda: state(a.bootstrap) == "OUT_OF_SYNC")
        for i in range(10):
            plain.produce("orders-x", value=f"out-of-sync-{i}", partition=1)
        assert plain.flush(30) == 0
        plain.close()

        txn.begin_transaction()
        txn.produce("orders-x", value="refused-txn", partition=0)
        # Retriable: the client tries again until its timeout, then raises
        # the last refusal (a short one: nothing turns the link IN_SYNC here).
        with pytest.raises(CcrError) as refused:
            txn.commit_transaction(3)
        assert refused.value.code == "LINK_NOT_IN_SYNC" and refused.value.retriable
        assert "ab" in refused.value.message and "OUT_OF_SYNC" in refused.value.message
    finally:
        b.resume()
    wait_for("IN_SYNC on A again", lambda: state(a.bootstrap) == "IN_SYNC")
    wait_for("IN_SYNC on B again", lambda: state(b.bootstrap) == "IN_SYNC")
    # The refused commit stayed open: retried now, it commits.
    txn.commit_transaction(30)
    txn.close()
    history = [h["state"] for h in cli_json(a.bootstrap, "describe-link", "ab")["history"]]
    assert history[-3:] == ["IN_SYNC", "OUT_OF_SYNC", "IN_SYNC"]
    source = [p.high_watermark for p in describe_partitions(a.bootstrap, "orders-x")]
    wait_for(
        "follower caught up",
        lambda: [p.high_watermark for p in describe_partitions(b.bootstrap, "orders-x")] == source,
    )
    assert read_all(a.bootstrap, "orders-x") == read_all(b.bootstrap, "orders-x")


def test_sync_link__failover_after_in_sync__nothing_acknowledged_is_lost(
    sync_linked: tuple[Any, Any],
) -> None:
    a, b = sync_linked
    producer = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 1})
    acked: list[str] = []
    for i in range(200):
        producer.produce(
            "orders-x",
            value=f"v{i}",
            on_delivery=lambda err, msg: (
                acked.append(msg.value().decode()) if err is None else None
            ),
        )
    assert producer.flush(30) == 0
    producer.close()
    a.kill9()
    cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    seen = {value.decode() for _p, _o, _k, value, _t in read_all(b.bootstrap, "orders-x") if value}
    assert len(acked) == 200
    assert set(acked) <= seen, sorted(set(acked) - seen)[:5]


def test_sync_link__read_committed_follower_reader_never_sees_part_of_a_transaction(
    sync_linked: tuple[Any, Any],
) -> None:
    a, b = sync_linked
    transactions = 25
    stop = threading.Event()
    snapshots: list[list[Any]] = []

    def sample() -> None:
        # One DescribeTopic answers for every partition at one moment: the
        # follower's last stable offsets must cut no transaction in two.
        while not stop.is_set() and len(snapshots) < 400:
            snapshots.append(describe_partitions(b.bootstrap, "orders-x"))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    txn = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "tx-atomic"})
    txn.init_transactions(30)
    for t in range(transactions):
        txn.begin_transaction()
        for i in range(6):
            txn.produce("orders-x", value=f"t{t}-{i}", partition=i % 2)
        txn.commit_transaction(30)
    txn.close()
    stop.set()
    sampler.join(30)

    consumer = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": "checker",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    final = describe_partitions(b.bootstrap, "orders-x")
    wait_for(
        "follower complete",
        lambda: (
            [p.last_stable_offset for p in describe_partitions(b.bootstrap, "orders-x")]
            == [p.last_stable_offset for p in describe_partitions(a.bootstrap, "orders-x")]
        ),
    )
    final = describe_partitions(b.bootstrap, "orders-x")
    consumer.assign([TopicPartition("orders-x", p.partition, 0) for p in final])
    records: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 60
    want = transactions * 6
    while len(records) < want and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                records.append((msg.partition(), msg.offset(), msg.value().decode()))
    consumer.close()
    assert len(records) == want
    # For every sampled cut, each transaction is either wholly below it or
    # wholly above it.
    assert snapshots
    for snap in snapshots:
        lso = {p.partition: p.last_stable_offset for p in snap}
        visible: dict[str, int] = {}
        for partition, offset, value in records:
            if offset < lso[partition]:
                t = value.split("-")[0]
                visible[t] = visible.get(t, 0) + 1
        partial = {t: n for t, n in visible.items() if n != 6}
        assert not partial, (lso, partial)
