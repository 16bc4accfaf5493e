"""ACL bindings: Kafka's (resource pattern, access control entry) pairs, pure.

Rules (Kafka's AclAuthorizer/StandardAuthorizer storage, for one cluster):
- A binding is (resource type, resource name, pattern type, principal, host,
  operation, permission type). The enum values are Kafka's wire numbers, so
  both shells (gRPC and the Kafka listener) pass them through unchanged.
- A new binding must be specific: a concrete resource type (TOPIC, GROUP,
  CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER), pattern LITERAL or
  PREFIXED, a concrete operation and permission (ALLOW or DENY), a principal
  "Type:name" and a non-empty host ("*" for every host). The CLUSTER resource
  is named "kafka-cluster" (Kafka's rule). Anything else is INVALID_REQUEST,
  per binding: the other bindings of the same call still apply.
- Creating a binding that exists changes nothing and succeeds (Kafka).
- A filter matches a binding when each of its parts does: resource type,
  operation, permission ANY match every value; a missing (None) resource name,
  principal or host matches every value; pattern type ANY matches both
  patterns, MATCH matches what would apply to the named resource: LITERAL
  bindings of that name or of "*", and PREFIXED bindings whose name is a prefix
  of it. A filter with an UNKNOWN part is INVALID_REQUEST.
- Every change returns journal records; `apply_record` replays them and
  `snapshot`/`restore` hold the same state. Bindings are kept in creation
  order; queries return them sorted.
- ACLs are enforced only when the daemon runs with `--authorizer acl`; the
  decision is `linkd/core/authorizer.py`'s. Links replicate READ bindings
  (semantics §7).

Limit: MAX_BINDINGS bindings per cluster (INVALID_REQUEST beyond).

Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from linkd.core import journal as jr
from linkd.core.errors import ClusterError, ErrorCode

MAX_BINDINGS = 10_000
CLUSTER_RESOURCE_NAME = "kafka-cluster"
WILDCARD = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    def to_list(self) -> list[object]:
        return [
            self.resource_type,
            self.resource_name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission_type,
        ]

    @classmethod
    def from_list(cls, row: list[object]) -> AclBinding:
        return cls(
            jr.json_int(row[0]),
            str(row[1]),
            jr.json_int(row[2]),
            str(row[3]),
            str(row[4]),
            jr.json_int(row[5]),
            jr.json_int(row[6]),
        )

    def describe(self) -> str:
        return (
            f"{_name(ResourceType, self.resource_type)}:{self.resource_name} "
            f"({_name(PatternType, self.pattern_type)}) {self.principal}@{self.host} "
            f"{_name(PermissionType, self.permission_type)} "
            f"{_name(AclOperation, self.operation)}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = PermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.operation != AclOperation.ANY and b.operation != self.operation:
            return False
        if self.permission_type != PermissionType.ANY and b.permission_type != self.permission_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        return self._matches_pattern(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == PatternType.ANY:
            return name is None or b.resource_name == name
        if self.pattern_type == PatternType.MATCH:
            if name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name in (name, WILDCARD)
            return name.startswith(b.resource_name)
        return b.pattern_type == self.pattern_type and (name is None or b.resource_name == name)


def _name(kind: type[enum.IntEnum], value: int) -> str:
    try:
        return kind(value).name
    except ValueError:
        return str(value)


def _invalid(what: str, message: str) -> ClusterError:
    return ClusterError(ErrorCode.INVALID_REQUEST, what, message)


def validate_binding(b: AclBinding) -> None:
    what = f"acl {b.describe()}"
    concrete = {t.value for t in ResourceType} - {ResourceType.UNKNOWN, ResourceType.ANY}
    if b.resource_type not in concrete:
        raise _invalid(
            what,
            f"{what}: resource type must be one of "
            f"{', '.join(ResourceType(t).name for t in sorted(concrete))}",
        )
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _invalid(what, f"{what}: pattern type must be LITERAL or PREFIXED")
    if not b.resource_name:
        raise _invalid(what, f"{what}: resource name is empty")
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_RESOURCE_NAME:
        raise _invalid(what, f"{what}: the cluster resource is named {CLUSTER_RESOURCE_NAME!r}")
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == WILDCARD:
        raise _invalid(what, f"{what}: a PREFIXED pattern cannot be the wildcard '*'")
    concrete_ops = {o.value for o in AclOperation} - {AclOperation.UNKNOWN, AclOperation.ANY}
    if b.operation not in concrete_ops:
        raise _invalid(what, f"{what}: operation must be a concrete operation (not ANY/UNKNOWN)")
    if b.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        raise _invalid(what, f"{what}: permission type must be ALLOW or DENY")
    kind, sep, principal_name = b.principal.partition(":")
    if not sep or not kind or not principal_name:
        raise _invalid(
            what, f"{what}: principal {b.principal!r} is not 'Type:name' (for example User:alice)"
        )
    if not b.host:
        raise _invalid(what, f"{what}: host is empty (use '*' for every host)")


def validate_filter(f: AclFilter) -> None:
    what = "acl filter"
    if f.resource_type not in {t.value for t in ResourceType} - {ResourceType.UNKNOWN}:
        raise _invalid(what, f"acl filter: resource type {f.resource_type} is not valid")
    if f.pattern_type not in {p.value for p in PatternType} - {PatternType.UNKNOWN}:
        raise _invalid(what, f"acl filter: pattern type {f.pattern_type} is not valid")
    if f.operation not in {o.value for o in AclOperation} - {AclOperation.UNKNOWN}:
        raise _invalid(what, f"acl filter: operation {f.operation} is not valid")
    if f.permission_type not in {p.value for p in PermissionType} - {PermissionType.UNKNOWN}:
        raise _invalid(what, f"acl filter: permission type {f.permission_type} is not valid")


class AclStore:
    def __init__(self) -> None:
        self._bindings: dict[AclBinding, None] = {}  # insertion-ordered set
        # The same bindings by resource type: what the authorizer reads.
        self._by_type: dict[int, dict[AclBinding, None]] = {}

    def __len__(self) -> int:
        return len(self._bindings)

    def __iter__(self) -> Iterator[AclBinding]:
        """Every binding, in creation order (what the authorizer reads)."""
        return iter(self._bindings)

    def of_type(self, resource_type: int) -> Iterator[AclBinding]:
        """The bindings of one resource type, in creation order."""
        return iter(self._by_type.get(resource_type, {}))

    def _add(self, binding: AclBinding) -> None:
        self._bindings[binding] = None
        self._by_type.setdefault(binding.resource_type, {})[binding] = None

    def _remove(self, binding: AclBinding) -> None:
        self._bindings.pop(binding, None)
        self._by_type.get(binding.resource_type, {}).pop(binding, None)

    def create(
        self, bindings: list[AclBinding]
    ) -> tuple[list[ClusterError | None], list[jr.AclCreate | jr.AclDelete]]:
        """Per binding: None (created or already there) or the refusal."""
        results: list[ClusterError | None] = []
        records: list[jr.AclCreate | jr.AclDelete] = []
        for b in bindings:
            try:
                validate_binding(b)
            except ClusterError as exc:
                results.append(exc)
                continue
            if b in self._bindings:
                results.append(None)
                continue
            if len(self._bindings) >= MAX_BINDINGS:
                results.append(
                    _invalid(f"acl {b.describe()}", f"too many ACL bindings (limit {MAX_BINDINGS})")
                )
                continue
            record = jr.AclCreate(b.to_list())
            self.apply_record(record)
            records.append(record)
            results.append(None)
        return results, records

    def delete(
        self, filters: list[AclFilter]
    ) -> tuple[list[list[AclBinding] | ClusterError], list[jr.AclCreate | jr.AclDelete]]:
        """Per filter: the bindings it removed (sorted), or the refusal."""
        results: list[list[AclBinding] | ClusterError] = []
        records: list[jr.AclCreate | jr.AclDelete] = []
        for f in filters:
            try:
                validate_filter(f)
            except ClusterError as exc:
                results.append(exc)
                continue
            matched = sorted(b for b in self._bindings if f.matches(b))
            for b in matched:
                record = jr.AclDelete(b.to_list())
                self.apply_record(record)
                records.append(record)
            results.append(matched)
        return results, records

    def describe(self, f: AclFilter) -> list[AclBinding]:
        """Raises ClusterError for an invalid filter."""
        validate_filter(f)
        return sorted(b for b in self._bindings if f.matches(b))

    # -- durability ------------------------------------------------------------

    def apply_record(self, record: jr.AclCreate | jr.AclDelete) -> None:
        binding = AclBinding.from_list(record.binding)
        if isinstance(record, jr.AclCreate):
            self._add(binding)
        else:
            self._remove(binding)

    def snapshot(self) -> dict[str, object]:
        return {"version": 1, "bindings": [b.to_list() for b in self._bindings]}

    @classmethod
    def restore(cls, snapshot: dict[str, object]) -> AclStore:
        store = cls()
        for row in jr.json_list(snapshot["bindings"]):
            store._add(AclBinding.from_list(jr.json_list(row)))
        return store
