"""The one error mapping table: every project ErrorCode has a Kafka code, and
docs/kafka-errors.md says the same as linkd/kafka/errors.py. Also the core's
ACL store, which the ACL calls of the listener stand on."""

from __future__ import annotations

import re

import pytest

from linkd.core.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.kafka.errors import KAFKA_CODE, kafka_code, kafka_message
from tests.harness import ROOT

_ROW = re.compile(r"^\| `([A-Z_]+)` \| `([A-Z_]+)` \((-?\d+)\) \|")


def _doc_rows() -> dict[str, tuple[str, int]]:
    text = (ROOT / "docs" / "kafka-errors.md").read_text()
    section = text.split("## Project ErrorCode", 1)[1].split("\n## ", 1)[0]
    section = section.split("### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = _ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), int(m.group(3)))
    return rows


def test_every_project_error_code_has_a_kafka_code() -> None:
    missing = [c.name for c in ErrorCode if c not in KAFKA_CODE]
    assert missing == [], f"map these in linkd/kafka/errors.py: {missing}"


def test_the_documented_table_matches_the_code() -> None:
    rows = _doc_rows()
    assert sorted(rows) == sorted(c.name for c in ErrorCode)
    for code, kafka in KAFKA_CODE.items():
        assert rows[code.name] == (kafka.name.upper(), int(kafka)), code.name


def test_api_dependent_codes() -> None:
    not_ready = ClusterError(ErrorCode.NOT_READY, "cluster", "starting")
    assert kafka_code(not_ready) == 5
    assert kafka_code(not_ready, coordinator=True) == 14
    unknown = ClusterError(ErrorCode.UNKNOWN_TOPIC, "topic 't'", "topic 't' does not exist")
    assert kafka_code(unknown) == 3
    assert kafka_code(unknown, by_id=True) == 100
    assert kafka_message(unknown) == "UNKNOWN_TOPIC: topic 't' does not exist"
    reserved = ClusterError(ErrorCode.RESERVED_NAMESPACE, "namespace", "reserved")
    assert kafka_code(reserved) == 29  # TOPIC_AUTHORIZATION_FAILED
    assert kafka_code(reserved, group=True) == 30  # GROUP_AUTHORIZATION_FAILED
    assert kafka_code(not_ready, group=True) == 14


# -- the ACL store (linkd/core/acls.py) ------------------------------------------------------


def _b(name: str, principal: str = "User:a", pattern: int = PatternType.LITERAL,
       op: int = AclOperation.READ, rtype: int = ResourceType.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, PermissionType.ALLOW)


def test_acl_create_is_idempotent_and_validates_each_binding() -> None:
    store = AclStore()
    good = _b("orders")
    results, records = store.create([good, _b("orders", principal="alice"), good])
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], ClusterError)
    assert results[1].code == ErrorCode.INVALID_REQUEST
    assert len(records) == 1, "the repeat changes nothing"
    assert len(store) == 1


@pytest.mark.parametrize("bad", [
    _b("x", rtype=ResourceType.ANY),
    _b("x", pattern=PatternType.MATCH),
    _b("x", op=AclOperation.ANY),
    _b("*", pattern=PatternType.PREFIXED),
    _b("other", rtype=ResourceType.CLUSTER),
    _b(""),
    AclBinding(ResourceType.TOPIC, "x", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
               PermissionType.ANY),
    AclBinding(ResourceType.TOPIC, "x", PatternType.LITERAL, "User:a", "", AclOperation.READ,
               PermissionType.ALLOW),
])
def test_acl_bindings_that_are_not_specific_are_refused(bad: AclBinding) -> None:
    results, records = AclStore().create([bad])
    assert isinstance(results[0], ClusterError) and records == []


def test_acl_filters_match_as_kafka_does() -> None:
    store = AclStore()
    store.create([_b("orders"), _b("ord", pattern=PatternType.PREFIXED), _b("*"),
                  _b("payments"), _b("orders", rtype=ResourceType.GROUP)])
    match = AclFilter(ResourceType.TOPIC, "orders", PatternType.MATCH)
    assert [(b.resource_name, b.pattern_type) for b in store.describe(match)] == [
        ("*", PatternType.LITERAL), ("ord", PatternType.PREFIXED),
        ("orders", PatternType.LITERAL)]
    literal = AclFilter(ResourceType.ANY, "orders", PatternType.LITERAL)
    assert len(store.describe(literal)) == 2
    assert len(store.describe(AclFilter())) == 5
    with pytest.raises(ClusterError):
        store.describe(AclFilter(resource_type=ResourceType.UNKNOWN))


def test_acls_replay_from_journal_and_snapshot() -> None:
    state = ClusterState("A")
    _, effects = state.create_acls([_b("orders"), _b("payments")])
    _, more = state.delete_acls([AclFilter(ResourceType.TOPIC, "payments")])
    journal = [r for e in effects + more for r in getattr(e, "records", ())]
    replayed = ClusterState("A")
    for record in journal:
        replayed.apply_record(record)
    assert replayed.describe_acls(AclFilter()) == [_b("orders")]
    restored = ClusterState("A")
    restored.restore(state.snapshot())
    assert restored.describe_acls(AclFilter()) == [_b("orders")]
