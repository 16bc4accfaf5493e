"""Two clusters with every protection on, as an operator would run them:
SASL_SSL on both listeners (SCRAM users from --sasl-users), --authorizer acl
with a super user, link credentials and a TLS link. ACLs created by the
super user through confluent-kafka's AdminClient grant exactly their
operation; the READ ACL follows the link and is enforced on the follower,
the WRITE ACL does not follow."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from harness import free_port, run_cli
from test_links_e2e import LINK_FLAGS, cli_json, wait_for

from tests.certs import Certs, make_certs

USERS = {"admin": "admin-secret-1", "alice": "alice-secret-2", "bob": "bob-secret-3"}
LINK_SECRET = "a-to-b-link-secret"


def kafka_conf(kafka: str, certs: Certs, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": kafka,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def secured_cluster(daemon_factory: Any, cluster_id: str, tmp: Path, certs: Certs) -> Any:
    users = tmp / "users.txt"
    users.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    link_secret = tmp / "link-credentials"
    link_secret.write_text(f"{LINK_SECRET}\n")
    client = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca),
              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "admin",
              "sasl.password": USERS["admin"]}
    kafka_port = free_port()
    d = daemon_factory(
        cluster_id,
        extra_args=[
            *LINK_FLAGS,
            "--kafka-listen", f"SASL_SSL://127.0.0.1:{kafka_port}",
            "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
            "--link-tls-ca", str(certs.ca),
            "--sasl-users", str(users),
            "--authorizer", "acl", "--super-users", "User:admin",
            "--link-credentials-file", str(link_secret),
        ],
        listen_protocol="SASL_SSL",
        client_config=client,
    )  # fmt: skip
    props = tmp / f"{cluster_id}-admin.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in client.items()))
    d.kafka = f"127.0.0.1:{kafka_port}"
    d.props = props
    return d


def admin_cli(d: Any, *args: str) -> Any:
    return cli_json(d.bootstrap, "--command-config", str(d.props), *args)


def binding(principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, "orders-x", ResourcePatternType.LITERAL, principal,
                      "*", op, AclPermissionType.ALLOW)


def reader_groups(kafka: str, certs: Certs) -> None:
    """READ on each reader's own consumer group (a consumer needs it; group
    ACLs do not follow a link, so each cluster's admin grants them)."""
    admin = AdminClient(kafka_conf(kafka, certs, "admin"))
    for future in admin.create_acls([
        AclBinding(ResourceType.GROUP, f"reader-{user}", ResourcePatternType.LITERAL,
                   f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)
        for user in ("alice", "bob")
    ]).values():
        future.result(30)


def read_as(kafka: str, certs: Certs, user: str, topic: str, count: int) -> list[bytes] | int:
    """The first `count` values of partition 0, or the Kafka error code."""
    consumer = Consumer({**kafka_conf(kafka, certs, user), "group.id": f"reader-{user}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return int(msg.error().code())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def produce_as(kafka: str, certs: Certs, user: str, topic: str, n: int) -> int:
    """0 when every record was acknowledged, else the first Kafka error code."""
    errors: list[int] = []
    producer = Producer({**kafka_conf(kafka, certs, user), "message.timeout.ms": 15000})
    for i in range(n):
        producer.produce(topic, value=f"{user}-{i}".encode(),
                         on_delivery=lambda err, _m: err and errors.append(err.code()))
    producer.flush(30)
    return errors[0] if errors else 0


def acls_on(kafka: str, certs: Certs) -> set[tuple[str, str, str]]:
    admin = AdminClient(kafka_conf(kafka, certs, "admin"))
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY,
    )
    return {(b.name, b.principal, b.operation.name)
            for b in admin.describe_acls(everything).result(30)}


def test_acls_grant_exactly_their_operation_and_read_follows_the_link(
    daemon_factory: Any, tmp_path: Path
) -> None:
    certs = make_certs(tmp_path / "certs")
    a = secured_cluster(daemon_factory, "A", tmp_path, certs)
    b = secured_cluster(daemon_factory, "B", tmp_path, certs)
    admin = AdminClient(kafka_conf(a.kafka, certs, "admin"))
    for d in (a, b):
        admin_cli(d, "create-namespace", "--type", "topic", "--prefix", "orders-")
    for future in admin.create_topics([NewTopic("orders-x", 1, 1)]).values():
        future.result(30)
    assert produce_as(a.kafka, certs, "admin", "orders-x", 5) == 0

    # Nobody but the super user may do anything yet.
    assert read_as(a.kafka, certs, "alice", "orders-x", 1) == (
        KafkaError.GROUP_AUTHORIZATION_FAILED)
    for d in (a, b):
        reader_groups(d.kafka, certs)
    assert read_as(a.kafka, certs, "alice", "orders-x", 1) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED)
    for future in admin.create_acls([binding("User:alice", AclOperation.READ),
                                     binding("User:alice", AclOperation.WRITE)]).values():
        future.result(30)
    # Exactly those operations: alice reads and writes, may not delete; bob may not read.
    assert produce_as(a.kafka, certs, "alice", "orders-x", 5) == 0
    assert len(read_as(a.kafka, certs, "alice", "orders-x", 10)) == 10  # type: ignore[arg-type]
    alice_admin = AdminClient(kafka_conf(a.kafka, certs, "alice"))
    with pytest.raises(KafkaException) as refused:
        alice_admin.delete_topics(["orders-x"])["orders-x"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert read_as(a.kafka, certs, "bob", "orders-x", 1) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED)

    # A link over TLS, with link credentials; a link without them is refused.
    no_credentials = run_cli(
        "--command-config", str(a.props), "create-link", "nope", "--remote",
        f"SASL_SSL://{b.bootstrap}", bootstrap=a.bootstrap,
    )
    assert no_credentials.returncode == 1, no_credentials.stderr
    assert "LINK_AUTHENTICATION_FAILED" in no_credentials.stderr
    admin_cli(a, "create-link", "ab", "--remote", f"SASL_SSL://{b.bootstrap}",
              "--remote-credentials-file", str(tmp_path / "link-credentials"))
    admin_cli(a, "attach-namespace", "--link", "ab", "--type", "topic", "--local-prefix",
              "orders-", "--remote-prefix", "orders-", "--leader", "local")
    wait_for("alice's READ on B", lambda: ("orders-x", "User:alice", "READ") in acls_on(
        b.kafka, certs))
    assert ("orders-x", "User:alice", "WRITE") not in acls_on(b.kafka, certs)
    wait_for("B following", lambda: admin_cli(b, "describe-link", "ab")["state"] == "FOLLOWING")

    # On the follower: the synced READ is enforced, WRITE is not granted, bob is refused.
    assert len(read_as(b.kafka, certs, "alice", "orders-x", 10)) == 10  # type: ignore[arg-type]
    assert produce_as(b.kafka, certs, "alice", "orders-x", 1) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert read_as(b.kafka, certs, "bob", "orders-x", 1) == (
        KafkaError.TOPIC_AUTHORIZATION_FAILED)
