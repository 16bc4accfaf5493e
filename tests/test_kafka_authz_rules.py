"""Every served Kafka API has an authorization rule, docs/security.md lists the
same rules, and the daemon's gate logs each refusal once and counts it."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace
from typing import Any

import pytest

from linkd import authz as gate_mod
from linkd.authz import Caller, Gate, client_host
from linkd.core.acls import AclBinding, AclOperation, AclStore, PatternType, PermissionType
from linkd.core.acls import ResourceType as R
from linkd.core.authorizer import OPERATIONS, AuthorizerMode
from linkd.core.errors import ClusterError, ErrorCode
from linkd.kafka import codec
from linkd.kafka.authz import CLUSTER_OPERATION, PER_ITEM_REFUSAL, RULES, operations_field
from linkd.kafka.server import SUPPORTED
from tests.harness import ROOT

# Rules of APIs not served (yet): none.
PENDING: dict[int, str] = {}
_ROW = re.compile(r"^\| (\w+) \| (\d+) \| (.+) \|$")


def test_every_served_api_has_a_rule() -> None:
    assert set(SUPPORTED) <= set(RULES)
    assert set(RULES) - set(SUPPORTED) <= set(PENDING)
    assert set(CLUSTER_OPERATION) <= set(RULES)
    assert set(PER_ITEM_REFUSAL) <= set(CLUSTER_OPERATION)


def test_the_security_doc_lists_every_rule() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("### Kafka APIs", 1)[1].split("\n### ", 1)[0]
    rows = {int(m[2]): (m[1], m[3]) for m in map(_ROW.match, section.splitlines()) if m}
    names = {k: a.name for k, a in SUPPORTED.items()} | PENDING
    assert rows == {k: (names[k], rule) for k, rule in RULES.items()}


def _gate(*bindings: AclBinding) -> Gate:
    store = AclStore()
    store.create(list(bindings))
    return Gate(lambda: store, AuthorizerMode.ACL, frozenset({"User:root"}))


ALICE = Caller("User:alice", "10.0.0.1")


def test_the_gate_is_open_when_off() -> None:
    gate = Gate(AclStore)
    assert gate.allowed(ALICE, R.TOPIC, "t", AclOperation.DELETE)
    assert gate.operations(ALICE, R.GROUP, "g") == OPERATIONS[R.GROUP]
    assert gate.refusals == {}


def test_the_gate_refuses_logs_once_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    gate = _gate(AclBinding(R.TOPIC, "t", PatternType.LITERAL, "User:alice", "*",
                            AclOperation.READ, PermissionType.ALLOW))
    assert gate.allowed(ALICE, R.TOPIC, "t", AclOperation.READ)
    assert gate.allowed(Caller("User:root", "h"), R.TOPIC, "x", AclOperation.DELETE)
    with caplog.at_level(logging.INFO, logger="linkd.authz"):
        for _ in range(3):
            with pytest.raises(ClusterError) as info:
                gate.check(ALICE, R.TOPIC, "t", AclOperation.WRITE)
        assert not gate.allowed(ALICE, R.TOPIC, "other", AclOperation.READ, quiet=True)
    assert info.value.code is ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert "User:alice" in info.value.message and "WRITE" in info.value.message
    logged = [r for r in caplog.records if r.getMessage() == "authorization refused"]
    assert len(logged) == 1
    assert gate.refusals == {ErrorCode.TOPIC_AUTHORIZATION_FAILED: 3}
    cluster = gate.cluster_refusal(ALICE, AclOperation.ALTER)
    assert cluster is not None and cluster.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_the_logged_set_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_mod, "MAX_LOGGED_REFUSALS", 10)
    gate = _gate()
    for i in range(50):
        gate.allowed(ALICE, R.TOPIC, f"t{i}", AclOperation.READ)
    assert len(gate._logged) == 10
    assert gate.refusals[ErrorCode.TOPIC_AUTHORIZATION_FAILED] == 50


@pytest.mark.parametrize(("address", "host"), [
    ("/127.0.0.1", "127.0.0.1"),
    ("ipv4:10.1.2.3:5555", "10.1.2.3"),
    ("ipv6:[::1]:5555", "::1"),
    ("", ""),
])
def test_client_hosts_are_what_acl_host_fields_name(address: str, host: str) -> None:
    assert client_host(address) == host


PER_ITEM_BODIES: dict[int, tuple[int, dict[str, Any]]] = {
    30: (3, {"creations": [{"resource_type": 2, "resource_name": "t", "principal": "User:a",
                            "host": "*", "operation": 3, "permission_type": 3}]}),
    31: (3, {"filters": [{"resource_type_filter": 1, "operation": 1, "permission_type": 1}]}),
    34: (2, {"dirs": [{"path": "/d", "topics": [{"name": "t", "partitions": [0, 1]}]}]}),
    43: (0, {"topic_partitions": [{"topic": "t", "partitions": [0, 1]}]}),
    50: (0, {"users": [{"name": "alice"}, {"name": "bob"}]}),
    51: (0, {"deletions": [{"name": "alice", "mechanism": 1}],
             "upsertions": [{"name": "bob", "mechanism": 1, "iterations": 4096}]}),
}


@pytest.mark.parametrize("key", sorted(PER_ITEM_REFUSAL))
def test_per_item_refusals_fit_the_response_and_name_every_item(key: int) -> None:
    version, body = PER_ITEM_BODIES[key]
    request = codec.make(codec.request_class(key, version), body)
    refusal = ClusterError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "cluster", "no")
    answer = codec.make(codec.response_class(key, version), PER_ITEM_REFUSAL[key](request, refusal))
    items = [getattr(answer, f) for f in ("results", "filter_results") if hasattr(answer, f)]
    if key == 43:
        items = [answer.replica_election_results[0].partition_result]
    if key == 34:
        items = [answer.results[0].partitions]
    assert len(items[0]) == (2 if key in (34, 43, 50, 51) else 1)
    assert all(int(i.error_code) == 31 for i in items[0])


def test_describing_every_scram_user_refused_is_the_top_level_error_alone() -> None:
    """Kafka's answer to DescribeUserScramCredentials naming no user, when
    DESCRIBE on the cluster is refused: the top-level error, no results."""
    request = codec.make(codec.request_class(50, 0), {"users": None})
    refusal = ClusterError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "cluster", "no")
    answer = codec.make(codec.response_class(50, 0), PER_ITEM_REFUSAL[50](request, refusal))
    assert int(answer.error_code) == 31 and len(answer.results) == 0


def test_operations_are_reported_only_to_who_may_describe() -> None:
    """Kafka: a principal with CREATE on the cluster but not DESCRIBE is told
    no cluster operations (0); one with DESCRIBE is told all it has."""
    def field_for(*ops: int) -> int:
        gate = _gate(*(AclBinding(R.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:alice",
                                  "*", op, PermissionType.ALLOW) for op in ops))
        ctx: Any = SimpleNamespace(node=SimpleNamespace(authz=gate), principal="User:alice",
                                   client_host="/10.0.0.1")
        return operations_field(ctx, R.CLUSTER, "kafka-cluster", True)

    assert field_for(AclOperation.CREATE) == 0
    assert field_for(AclOperation.CREATE, AclOperation.DESCRIBE) == (
        1 << AclOperation.CREATE | 1 << AclOperation.DESCRIBE)
