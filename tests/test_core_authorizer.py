"""The authorizer (linkd/core/authorizer.py): Kafka's StandardAuthorizer rules,
one table row per rule, and a Hypothesis property against a plain restatement
of the rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linkd.core.acls import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from linkd.core.authorizer import (
    Refusal,
    authorize,
    authorize_any,
    authorized_operations,
    parse_super_users,
)
from linkd.core.errors import ErrorCode

Op = AclOperation
T = ResourceType.TOPIC
ALICE = "User:alice"
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY


def _b(
    name: str = "orders",
    op: int = Op.READ,
    perm: int = ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: int = LIT,
    rtype: int = T,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def _store(*bindings: AclBinding) -> AclStore:
    store = AclStore()
    results, _ = store.create(list(bindings))
    assert all(r is None for r in results)
    return store


# (rule, bindings, principal, host, resource name, operation, expected)
CASES = [
    ("no ACL: denied", [], ALICE, "1.2.3.4", "orders", Op.READ, False),
    ("literal allow", [_b()], ALICE, "1.2.3.4", "orders", Op.READ, True),
    ("literal is exact", [_b()], ALICE, "1.2.3.4", "orders2", Op.READ, False),
    ("other operation", [_b()], ALICE, "1.2.3.4", "orders", Op.WRITE, False),
    ("wildcard resource", [_b("*")], ALICE, "1.2.3.4", "anything", Op.READ, True),
    ("prefixed", [_b("ord", pattern=PRE)], ALICE, "h", "orders", Op.READ, True),
    ("prefixed is a prefix", [_b("ord", pattern=PRE)], ALICE, "h", "or", Op.READ, False),
    ("other principal", [_b(principal="User:bob")], ALICE, "h", "orders", Op.READ, False),
    ("principal wildcard", [_b(principal="User:*")], ALICE, "h", "orders", Op.READ, True),
    ("host literal", [_b(host="10.0.0.1")], ALICE, "10.0.0.1", "orders", Op.READ, True),
    ("other host", [_b(host="10.0.0.1")], ALICE, "10.0.0.2", "orders", Op.READ, False),
    ("ALL grants all", [_b(op=Op.ALL)], ALICE, "h", "orders", Op.ALTER_CONFIGS, True),
    ("READ implies DESCRIBE", [_b(op=Op.READ)], ALICE, "h", "orders", Op.DESCRIBE, True),
    ("WRITE implies DESCRIBE", [_b(op=Op.WRITE)], ALICE, "h", "orders", Op.DESCRIBE, True),
    ("DELETE implies DESCRIBE", [_b(op=Op.DELETE)], ALICE, "h", "orders", Op.DESCRIBE, True),
    ("ALTER implies DESCRIBE", [_b(op=Op.ALTER)], ALICE, "h", "orders", Op.DESCRIBE, True),
    ("CREATE does not", [_b(op=Op.CREATE)], ALICE, "h", "orders", Op.DESCRIBE, False),
    (
        "ALTER_CONFIGS implies DESCRIBE_CONFIGS",
        [_b(op=Op.ALTER_CONFIGS)], ALICE, "h", "orders", Op.DESCRIBE_CONFIGS, True,
    ),
    ("DESCRIBE implies nothing", [_b(op=Op.DESCRIBE)], ALICE, "h", "orders", Op.READ, False),
    ("DENY wins", [_b(), _b(perm=DENY)], ALICE, "h", "orders", Op.READ, False),
    (
        "DENY prefixed beats ALLOW literal",
        [_b(), _b("ord", perm=DENY, pattern=PRE)], ALICE, "h", "orders", Op.READ, False,
    ),
    ("DENY ALL", [_b(), _b("*", op=Op.ALL, perm=DENY)], ALICE, "h", "orders", Op.READ, False),
    (
        "DENY READ does not deny DESCRIBE (implication is for ALLOW only)",
        [_b(op=Op.WRITE), _b(op=Op.READ, perm=DENY)], ALICE, "h", "orders", Op.DESCRIBE, True,
    ),
    (
        "DENY for everyone",
        [_b(), _b(principal="User:*", perm=DENY)], ALICE, "h", "orders", Op.READ, False,
    ),
    (
        "DENY for another host does not apply",
        [_b(), _b(host="10.9.9.9", perm=DENY)], ALICE, "10.0.0.1", "orders", Op.READ, True,
    ),
    (
        "another resource type does not apply",
        [_b(rtype=ResourceType.GROUP)], ALICE, "h", "orders", Op.READ, False,
    ),
]


@pytest.mark.parametrize(
    ("bindings", "principal", "host", "name", "op", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_rules(
    bindings: list[AclBinding], principal: str, host: str, name: str, op: int, expected: bool
) -> None:
    assert authorize(_store(*bindings), principal, host, T, name, op) is expected


def test_super_users_are_always_allowed() -> None:
    store = _store(_b("*", op=Op.ALL, perm=DENY, principal="User:*"))
    assert authorize(store, "User:admin", "h", T, "x", Op.DELETE, frozenset({"User:admin"}))
    assert not authorize(store, ALICE, "h", T, "x", Op.DELETE, frozenset({"User:admin"}))


def test_super_users_parse_as_kafka_writes_them() -> None:
    assert parse_super_users("User:admin;User:ops") == {"User:admin", "User:ops"}
    assert parse_super_users(" User:admin ; ") == {"User:admin"}
    assert parse_super_users("") == frozenset()
    for bad in ("admin", "User:", ":x", "User:a;ops"):
        with pytest.raises(ValueError, match="Type:name"):
            parse_super_users(bad)


def test_authorized_operations_are_every_allowed_operation() -> None:
    store = _store(_b(op=Op.WRITE), _b(op=Op.ALTER_CONFIGS))
    ops = authorized_operations(store, ALICE, "h", T, "orders")
    assert set(ops) == {Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert authorized_operations(store, ALICE, "h", T, "other") == ()
    everything = authorized_operations(store, "User:root", "h", T, "x", frozenset({"User:root"}))
    assert len(everything) == 8


def test_authorize_any_is_kafkas_authorize_by_resource_type() -> None:
    assert not authorize_any(_store(), ALICE, "h", T, Op.WRITE)
    assert authorize_any(_store(_b(op=Op.WRITE)), ALICE, "h", T, Op.WRITE)
    assert not authorize_any(
        _store(_b(op=Op.WRITE), _b(op=Op.WRITE, perm=DENY)), ALICE, "h", T, Op.WRITE
    )
    assert not authorize_any(
        _store(_b(op=Op.WRITE), _b("ord", op=Op.WRITE, perm=DENY, pattern=PRE)),
        ALICE, "h", T, Op.WRITE,
    )
    assert not authorize_any(
        _store(_b(op=Op.WRITE), _b("*", op=Op.ALL, perm=DENY)), ALICE, "h", T, Op.WRITE
    )
    assert authorize_any(
        _store(_b(op=Op.WRITE), _b("payments", op=Op.WRITE, perm=DENY)), ALICE, "h", T, Op.WRITE
    )


def test_refusals_name_kafkas_error_per_resource_type() -> None:
    cases = {
        ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
    for rtype, code in cases.items():
        err = Refusal(ALICE, "1.2.3.4", rtype, "x", Op.WRITE).error()
        assert err.code == code
        assert ALICE in err.message and "WRITE" in err.message


# -- the property: the rules restated plainly -------------------------------------------------

NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["h1", "h2", "*"]
OPS = [o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY)]

bindings_st = st.builds(
    lambda name, pattern, principal, host, op, perm, rtype: AclBinding(
        rtype, name, pattern, principal, host, op, perm
    ),
    st.sampled_from(NAMES),
    st.sampled_from([LIT, PRE]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from([T, ResourceType.GROUP]),
).filter(lambda b: not (b.pattern_type == PRE and b.resource_name == "*"))


def _model(bindings: list[AclBinding], principal: str, host: str, name: str, op: int) -> bool:
    implied = {
        Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
        Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
    }

    def applies(b: AclBinding) -> bool:
        name_ok = (
            b.resource_name in (name, "*")
            if b.pattern_type == LIT
            else name.startswith(b.resource_name)
        )
        return (
            b.resource_type == T
            and name_ok
            and b.principal in (principal, "User:*")
            and b.host in (host, "*")
        )

    denies = [b for b in bindings if applies(b) and b.permission_type == DENY]
    if any(b.operation in (op, Op.ALL) for b in denies):
        return False
    allows = [b for b in bindings if applies(b) and b.permission_type == ALLOW]
    return any(b.operation in ({op, Op.ALL} | implied.get(op, set())) for b in allows)


@given(
    st.lists(bindings_st, max_size=8),
    st.sampled_from(["User:alice", "User:bob"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from(["a", "ab", "abc", "b", "c"]),
    st.sampled_from(OPS),
)
def test_authorize_matches_the_rules(
    bindings: list[AclBinding], principal: str, host: str, name: str, op: int
) -> None:
    store = AclStore()
    store.create(bindings)
    assert authorize(store, principal, host, T, name, op) == _model(
        list(store), principal, host, name, op
    )
    assert authorize(store, principal, host, T, name, op, frozenset({principal}))


UNIVERSE = ["".join(p) for n in range(1, 5) for p in itertools.product("abcz", repeat=n)]


@given(st.lists(bindings_st, max_size=8), st.sampled_from(OPS))
def test_authorize_any_is_some_resource_allowed(bindings: list[AclBinding], op: int) -> None:
    """Kafka's authorizeByResourceType answers whether some topic may be
    operated on: against every name of a universe larger than the bindings'
    (names with "z" match no literal or prefix but "*")."""
    store = AclStore()
    store.create(bindings)
    some = any(authorize(store, ALICE, "h1", T, name, op) for name in UNIVERSE)
    assert authorize_any(store, ALICE, "h1", T, op) == some


def test_deleted_and_restored_bindings_are_what_the_authorizer_reads() -> None:
    store = _store(_b(), _b(rtype=ResourceType.GROUP))
    assert authorize(store, ALICE, "h", T, "orders", Op.READ)
    store.delete([AclFilter(resource_type=T)])
    assert not authorize(store, ALICE, "h", T, "orders", Op.READ)
    restored = AclStore.restore(store.snapshot())
    assert authorize(restored, ALICE, "h", ResourceType.GROUP, "orders", Op.READ)
    assert not authorize(restored, ALICE, "h", T, "orders", Op.READ)
