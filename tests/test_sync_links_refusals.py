"""Spec section 6 refusals of SYNC links on real daemons, through both client
APIs: gRPC (the client library's protocol) and the Kafka listener.

- SYNCING: the follower refuses reads of its follower topics to readers
  outside the link's replicated groups (FOLLOWER_SYNCING; over Kafka,
  LEADER_NOT_AVAILABLE, retriable), and serves them again once IN_SYNC. To hold
  the link in SYNCING, B dials A through a fault proxy whose A-to-B direction is
  cut just before B switches the link to SYNC: B never hears A's verdict (and
  its session timeout is long, so it does not give up on the connection).
- OUT_OF_SYNC: a Kafka client's transaction commit on the source fails with
  NOT_ENOUGH_REPLICAS (LINK_NOT_IN_SYNC), retriable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as KafkaProducer
from harness import free_port, run_cli
from kio.schema.errors import ErrorCode as K
from test_kafka_wire import RawClient, _fetch_body, _topic_id
from test_links_e2e import attach, cli_json, link_orders, produce, wait_for

from admin.errors import code_name
from ccr.v1 import cluster_pb2, cluster_pb2_grpc
from chaos.proxy import FaultProxy

LONG_SESSION = ["--link-session-timeout-ms", "60000", "--link-replica-lag-time-max-ms", "2000"]


def state(bootstrap: str) -> str:
    return str(cli_json(bootstrap, "describe-link", "ab")["state"])


def grpc_fetch_error(bootstrap: str, topic: str, group_id: str = "") -> str:
    with grpc.insecure_channel(bootstrap) as channel:
        reply = cluster_pb2_grpc.ClusterStub(channel).Fetch(
            cluster_pb2.FetchRequest(
                partitions=[cluster_pb2.FetchPartition(topic=topic, partition=0, offset=0)],
                max_wait_ms=0,
                group_id=group_id,
            ),
            timeout=30,
        )
    part = reply.partitions[0]
    if not part.HasField("error"):
        return "ok"
    assert part.error.retriable
    assert "'ab'" in part.error.message and "SYNCING" in part.error.message
    return code_name(part.error.code)


def kafka_fetch_error(port: int, topic: str) -> int:
    client = RawClient(port)
    try:
        reply = client.call(1, 13, _fetch_body(_topic_id(client, topic), 0, 0))
        return int(reply.responses[0].partitions[0].error_code)
    finally:
        client.close()


@pytest.fixture
def proxied(daemon_factory: Any) -> Iterator[tuple[Any, Any, FaultProxy, int]]:
    """B follows A's orders- (and app- groups) over link ab, which B dials
    through a fault proxy; B serves Kafka clients too."""
    kafka_port = free_port()
    a = daemon_factory("A", extra_args=LONG_SESSION)
    b = daemon_factory("B", extra_args=[*LONG_SESSION, "--kafka-listen", f"127.0.0.1:{kafka_port}"])
    host, port = a.bootstrap.split(":")
    proxy = FaultProxy(host, int(port), seed=7).start_in_thread()
    try:
        for d in (a, b):
            cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
            cli_json(d.bootstrap, "create-namespace", "--type", "group", "--prefix", "app-")
        run_cli("create-topic", "orders-x", "--partitions", "1", bootstrap=a.bootstrap)
        produce(a.bootstrap, "orders-x", 20)
        cli_json(b.bootstrap, "create-link", "ab", "--remote", proxy.address)
        for kind, prefix in (("topic", "orders-"), ("group", "app-")):
            attach(b, kind, prefix, prefix, "remote")
        wait_for("FOLLOWING on B", lambda: state(b.bootstrap) == "FOLLOWING")
        wait_for("records on B", lambda: grpc_fetch_error(b.bootstrap, "orders-x") == "ok")
        yield a, b, proxy, kafka_port
    finally:
        proxy.stop()


def test_syncing__follower_reads_refused_except_replicated_groups__served_again_in_sync(
    proxied: tuple[Any, Any, FaultProxy, int],
) -> None:
    a, b, proxy, kafka_port = proxied
    proxy.cut("b->a")  # A's answers no longer reach B
    # A cannot confirm the change while its answers are cut: pending (exit 3).
    link = cli_json(b.bootstrap, "set-mode", "--link", "ab", "sync", pending=True)
    assert link["pending"]["remote_cluster_id"] == "A"
    assert (link["mode"], link["state"]) == ("SYNC", "SYNCING")

    assert grpc_fetch_error(b.bootstrap, "orders-x") == "FOLLOWER_SYNCING"
    assert grpc_fetch_error(b.bootstrap, "orders-x", group_id="reporting") == "FOLLOWER_SYNCING"
    assert grpc_fetch_error(b.bootstrap, "orders-x", group_id="app-billing") == "ok"
    assert kafka_fetch_error(kafka_port, "orders-x") == K.leader_not_available.value
    # Source readers are never refused.
    assert grpc_fetch_error(a.bootstrap, "orders-x") == "ok"

    proxy.heal()
    wait_for("IN_SYNC on B", lambda: state(b.bootstrap) == "IN_SYNC")
    wait_for("IN_SYNC on A", lambda: state(a.bootstrap) == "IN_SYNC")
    assert grpc_fetch_error(b.bootstrap, "orders-x") == "ok"
    assert kafka_fetch_error(kafka_port, "orders-x") == K.none.value


def test_out_of_sync__a_kafka_transaction_commit_on_the_source_fails_retriably(
    daemon_factory: Any,
) -> None:
    kafka_port = free_port()
    a = daemon_factory(
        "A",
        extra_args=[
            "--link-session-timeout-ms",
            "5000",
            "--link-replica-lag-time-max-ms",
            "2000",
            "--kafka-listen",
            f"127.0.0.1:{kafka_port}",
        ],
    )
    b = daemon_factory("B", extra_args=["--link-session-timeout-ms", "5000"])
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    run_cli("create-topic", "orders-x", "--partitions", "1", bootstrap=a.bootstrap)
    link_orders(a, b)
    wait_for("FOLLOWING on A", lambda: state(a.bootstrap) == "FOLLOWING")
    wait_for("FOLLOWING on B", lambda: state(b.bootstrap) == "FOLLOWING")
    cli_json(a.bootstrap, "set-mode", "--link", "ab", "sync")
    wait_for("IN_SYNC on A", lambda: state(a.bootstrap) == "IN_SYNC")

    producer = KafkaProducer(
        {"bootstrap.servers": f"127.0.0.1:{kafka_port}", "transactional.id": "k-tx"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("orders-x", value=b"in-sync")
    producer.commit_transaction(30)

    b.pause()
    try:
        wait_for("OUT_OF_SYNC on A", lambda: state(a.bootstrap) == "OUT_OF_SYNC")
        producer.begin_transaction()
        producer.produce("orders-x", value=b"out-of-sync")
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(30)
        error: KafkaError = refused.value.args[0]
        assert error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
        assert error.retriable() or error.txn_requires_abort(), error
    finally:
        b.resume()
