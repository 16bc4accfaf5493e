"""Principal namespaces follow a link (KIP-986's third namespace type), on
real daemons: ACLs created with confluent-kafka's AdminClient on the leader
appear on a follower that is pushed to and on one that pulls, renamed by the
mappings, READ and DESCRIBE only (a group's too, which topic READ ACL sync
never copies)."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from harness import free_port
from test_links_e2e import LINK_FLAGS, attach, cli_json, wait_for


def kafka_daemon(daemon_factory: Any, cluster_id: str) -> tuple[Any, str]:
    port = free_port()
    d = daemon_factory(cluster_id, extra_args=[*LINK_FLAGS, "--kafka-listen", f"127.0.0.1:{port}"])
    return d, f"127.0.0.1:{port}"


def acls_of(kafka: str) -> set[tuple[str, str, str, str, str]]:
    admin = AdminClient({"bootstrap.servers": kafka})
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
        AclOperation.ANY, AclPermissionType.ANY,
    )
    return {
        (b.restype.name, b.name, b.principal, b.operation.name, b.permission_type.name)
        for b in admin.describe_acls(everything).result(30)
    }


def test_acls_of_a_principal_namespace_follow_pushed_and_pulled_links(
    daemon_factory: Any,
) -> None:
    a, a_kafka = kafka_daemon(daemon_factory, "A")
    b, b_kafka = kafka_daemon(daemon_factory, "B")
    c, c_kafka = kafka_daemon(daemon_factory, "C")
    cli_json(a.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    cli_json(a.bootstrap, "create-namespace", "--type", "principal", "--prefix", "User:eu-")
    for d in (b, c):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "dr-orders-")
        cli_json(d.bootstrap, "create-namespace", "--type", "principal", "--prefix", "User:dr-")
    # A dials B and pushes (link ab); C dials A and pulls (link ca).
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "topic", "orders-", "dr-orders-", "local")
    attach(a, "principal", "User:eu-", "User:dr-", "local")
    cli_json(c.bootstrap, "create-link", "ca", "--remote", a.bootstrap)
    for kind, local, remote in (("topic", "dr-orders-", "orders-"),
                                ("principal", "User:dr-", "User:eu-")):
        cli_json(c.bootstrap, "attach-namespace", "--link", "ca", "--type", kind,
                 "--local-prefix", local, "--remote-prefix", remote, "--leader", "remote")

    admin = AdminClient({"bootstrap.servers": a_kafka})

    def binding(kind: ResourceType, name: str, principal: str, op: AclOperation,
                permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
        return AclBinding(kind, name, ResourcePatternType.LITERAL, principal, "*", op, permission)

    for future in admin.create_acls([
        binding(ResourceType.TOPIC, "orders-1", "User:eu-app", AclOperation.READ),
        binding(ResourceType.TOPIC, "orders-1", "User:eu-app", AclOperation.WRITE),
        binding(ResourceType.GROUP, "billing", "User:eu-app", AclOperation.READ),
        binding(ResourceType.TOPIC, "orders-1", "User:eu-bad", AclOperation.READ,
                AclPermissionType.DENY),
        binding(ResourceType.TOPIC, "orders-1", "User:us-app", AclOperation.READ),
    ]).values():
        future.result(30)

    expected = {
        ("TOPIC", "dr-orders-1", "User:dr-app", "READ", "ALLOW"),
        ("GROUP", "billing", "User:dr-app", "READ", "ALLOW"),
        ("TOPIC", "dr-orders-1", "User:dr-bad", "READ", "DENY"),
    }
    for follower in (b_kafka, c_kafka):
        wait_for(f"the principal namespace's ACLs on {follower}",
                 lambda f=follower: expected <= acls_of(f))
        got = acls_of(follower)
        assert not any(op == "WRITE" for _k, _n, _p, op, _perm in got), got
        # Renamed principals come from the principal namespace alone (topic
        # READ ACL sync copies READ of every principal, under its own name).
        assert {x for x in got if x[2].startswith("User:dr-")} == expected, got
