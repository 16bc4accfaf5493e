"""The authorizer: may a principal, from a host, do an operation on a resource?

Kafka's StandardAuthorizer (and AclAuthorizer before it) semantics, over the
bindings of `linkd/core/acls.py`:
- A super user (`super.users`) may do everything.
- A binding applies to a request when its resource type is the resource's,
  its pattern matches the resource name (LITERAL: the same name, or the
  wildcard "*"; PREFIXED: a prefix of the name), its principal is the
  request's or the wildcard "User:*", and its host is the request's or "*".
- DENY wins: an applying DENY binding of the operation, or of ALL, refuses.
- Otherwise an applying ALLOW binding of the operation, of ALL, or of an
  operation that implies it, grants. Implied operations (Kafka's rule, for
  ALLOW bindings only): DESCRIBE is implied by READ, WRITE, DELETE and ALTER;
  DESCRIBE_CONFIGS by ALTER_CONFIGS.
- No applying ALLOW binding: refused (allow.everyone.if.no.acl.found=false).
- `authorize_any` is Kafka's `authorizeByResourceType`: is the operation
  allowed on at least one resource of the type (an ALLOW binding not covered
  by a DENY binding of the same principal and host)? Kafka asks it for an
  idempotent producer without IDEMPOTENT_WRITE on the cluster (KIP-679).

`Refusal` names the resource and operation of a refused request, and
`refusal_error` is the ClusterError each shell maps (TOPIC_, GROUP_,
CLUSTER_ and TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Kafka's codes).

Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from linkd.core.acls import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD,
    AclBinding,
    AclOperation,
    AclStore,
    PatternType,
    PermissionType,
    ResourceType,
)
from linkd.core.errors import ClusterError, ErrorCode

WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"

# Operation -> the operations whose ALLOW binding also grants it.
IMPLIED_BY: dict[int, frozenset[int]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

# The operations each resource type knows (Kafka's ResourceType / AclOperation
# table): what authorized-operations fields report.
OPERATIONS: dict[int, tuple[int, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CREATE_TOKENS,
        AclOperation.DESCRIBE_TOKENS,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

_REFUSAL_CODE: dict[int, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


class AuthorizerMode(enum.Enum):
    """`--authorizer`: NONE allows everything (Kafka without an authorizer)."""

    NONE = "none"
    ACL = "acl"


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's `super.users`: "User:admin;User:ops". Raises ValueError naming
    the first entry that is not "Type:name"."""
    users: set[str] = set()
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        kind, sep, name = entry.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"super user {entry!r} is not 'Type:name' (for example User:admin)")
        users.add(entry)
    return frozenset(users)


def _name_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name in (name, WILDCARD)
    if b.pattern_type == PatternType.PREFIXED:
        return name.startswith(b.resource_name)
    return False


def _who_matches(b: AclBinding, principal: str, host: str) -> bool:
    return b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD_HOST)


def _grants(b: AclBinding, operation: int) -> bool:
    if b.operation in (operation, AclOperation.ALL):
        return True
    if b.permission_type != PermissionType.ALLOW:
        return False
    return b.operation in IMPLIED_BY.get(operation, frozenset())


def _of_type(acls: AclStore | Iterable[AclBinding], resource_type: int) -> Iterable[AclBinding]:
    """The bindings of one resource type (an AclStore keeps them apart)."""
    if isinstance(acls, AclStore):
        return acls.of_type(resource_type)
    return (b for b in acls if b.resource_type == resource_type)


def _applying(
    acls: AclStore | Iterable[AclBinding],
    principal: str,
    host: str,
    resource_type: int,
    resource_name: str,
    operation: int,
) -> Iterable[AclBinding]:
    for b in _of_type(acls, resource_type):
        if (
            _name_matches(b, resource_name)
            and _who_matches(b, principal, host)
            and _grants(b, operation)
        ):
            yield b


def authorize(
    acls: AclStore | Iterable[AclBinding],
    principal: str,
    host: str,
    resource_type: int,
    resource_name: str,
    operation: int,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    """True when `principal` at `host` may do `operation` on the resource."""
    if principal in super_users:
        return True
    allowed = False
    for b in _applying(acls, principal, host, resource_type, resource_name, operation):
        if b.permission_type == PermissionType.DENY:
            return False
        if b.permission_type == PermissionType.ALLOW:
            allowed = True
    return allowed


def authorized_operations(
    acls: AclStore | Iterable[AclBinding],
    principal: str,
    host: str,
    resource_type: int,
    resource_name: str,
    super_users: frozenset[str] = frozenset(),
) -> tuple[int, ...]:
    """The operations of the resource's type the principal may do on it."""
    bindings = list(_of_type(acls, resource_type))
    return tuple(
        op
        for op in OPERATIONS.get(resource_type, ())
        if authorize(bindings, principal, host, resource_type, resource_name, op, super_users)
    )


def authorize_any(
    acls: AclStore | Iterable[AclBinding],
    principal: str,
    host: str,
    resource_type: int,
    operation: int,
    super_users: frozenset[str] = frozenset(),
) -> bool:
    """Kafka's authorizeByResourceType: some resource of the type may be
    operated on (an ALLOW binding that no DENY binding covers)."""
    if principal in super_users:
        return True
    denied_literal: set[str] = set()
    denied_prefixes: list[str] = []
    allows: list[AclBinding] = []
    for b in _of_type(acls, resource_type):
        if not _who_matches(b, principal, host):
            continue
        if not _grants(b, operation):
            continue
        if b.permission_type == PermissionType.DENY:
            if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                return False
            if b.pattern_type == PatternType.PREFIXED:
                denied_prefixes.append(b.resource_name)
            else:
                denied_literal.add(b.resource_name)
        elif b.permission_type == PermissionType.ALLOW:
            allows.append(b)
    for b in allows:
        if any(b.resource_name.startswith(p) for p in denied_prefixes):
            continue
        if b.pattern_type == PatternType.LITERAL and b.resource_name in denied_literal:
            continue
        return True
    return False


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused (principal, host, resource, operation)."""

    principal: str
    host: str
    resource_type: int
    resource_name: str
    operation: int

    @property
    def code(self) -> ErrorCode:
        return _REFUSAL_CODE.get(self.resource_type, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    def resource(self) -> str:
        kind = ResourceType(self.resource_type).name.lower().replace("_", "-")
        if self.resource_type == ResourceType.CLUSTER:
            return f"cluster {CLUSTER_RESOURCE_NAME!r}"
        return f"{kind} {self.resource_name!r}"

    def error(self) -> ClusterError:
        op = AclOperation(self.operation).name
        return ClusterError(
            self.code,
            self.resource(),
            f"{self.principal} (host {self.host}) is not authorized to {op} "
            f"{self.resource()}",
        )
