"""Namespaces (spec section 2): prefix-defined sets of topics, groups or principals.

Rules:
- A namespace is (resource type, prefix, reserved, attachments). Type and
  prefix are fixed at creation and identify it; `reserved` can change.
- Prefixes: a TOPIC prefix may hold only Kafka's topic name characters
  [a-zA-Z0-9._-] and at most 249 of them; a GROUP or PRINCIPAL prefix any
  printable, non-whitespace characters, at most 255. The prefix "" is allowed.
  Anything else (or an unspecified type) is INVALID_NAMESPACE.
- A namespace contains every name of its type that starts with its prefix,
  except that the namespace "" excludes names starting with "_" (internal
  topics). Two namespaces of one type overlap when one prefix is a prefix of
  the other (the definition of the spec, even for "" and "_x").
- `matching` lists the namespaces containing a name, most specific (longest
  prefix) first; `reserved_by` is the most specific reserved one.
- Attachments are (link name, role) with role "leader" or "follower". A
  namespace may lead any number of links and follow at most one; it may not
  follow a link while it, or any namespace overlapping it, follows a link
  (ALREADY_FOLLOWING), nor take both roles on one link. Attaching as follower
  sets `reserved`; detaching changes nothing else (spec section 6: commits need
  the namespace detached *and* un-reserved). Attaching an existing
  (link, role) pair again, or detaching a link that is not attached, changes
  nothing.
- While a namespace follows a link, its reservation cannot be cleared, and a
  namespace attached to any link cannot be deleted (NAMESPACE_ATTACHED).
- Every refusal is a ClusterError whose resource and message name the
  namespace ("topic namespace 'orders-'"); nothing changed.
- Every change returns journal records (types `ns_create`, `ns_reserved`,
  `ns_delete`, `ns_attach`, `ns_detach`) and is applied by the same code that
  replays them (`apply_record`); `snapshot`/`restore` hold the same state.
  A call that changes nothing returns no records.

Limit: MAX_NAMESPACES namespaces per cluster (INVALID_REQUEST beyond).

Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from linkd.core import journal as jr
from linkd.core.errors import ClusterError, ErrorCode

MAX_NAMESPACES = 10_000
MAX_TOPIC_PREFIX_CHARS = 249
MAX_OTHER_PREFIX_CHARS = 255
LEADER = "leader"
FOLLOWER = "follower"
ROLES = (LEADER, FOLLOWER)

_TOPIC_PREFIX = re.compile(r"[a-zA-Z0-9._-]*")

NamespaceRecord = jr.NsCreate | jr.NsReserved | jr.NsDelete | jr.NsAttach | jr.NsDetach
Records = list[NamespaceRecord]
NamespaceList = list["Namespace"]


class ResourceType(enum.IntEnum):
    """The numbers are ccr.v1.ResourceType's, so shells pass them through."""

    UNSPECIFIED = 0
    TOPIC = 1
    GROUP = 2
    PRINCIPAL = 3

    @property
    def label(self) -> str:
        """ "topic", "group" or "principal" (the journal's and the CLI's spelling)."""
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int) -> ResourceType:
        """By label ("topic", any case) or number; INVALID_NAMESPACE otherwise."""
        try:
            if isinstance(value, str):
                kind = cls[value.strip().upper()]
            else:
                kind = cls(value)
        except (KeyError, ValueError):
            kind = cls.UNSPECIFIED
        if kind is cls.UNSPECIFIED:
            raise ClusterError(
                ErrorCode.INVALID_NAMESPACE,
                "namespace",
                f"namespace type {value!r} is not one of topic, group, principal",
            )
        return kind


def describe(resource_type: ResourceType, prefix: str) -> str:
    """How refusals name a namespace: "topic namespace 'orders-'"."""
    return f"{resource_type.label} namespace {prefix!r}"


@dataclass(slots=True)
class Namespace:
    type: ResourceType
    prefix: str
    reserved: bool = False
    attachments: list[tuple[str, str]] = field(default_factory=list)  # (link name, role)

    @property
    def key(self) -> tuple[ResourceType, str]:
        return (self.type, self.prefix)

    @property
    def name(self) -> str:
        return describe(self.type, self.prefix)

    @property
    def follower_link(self) -> str | None:
        """The link this namespace follows, if any."""
        return next((link for link, role in self.attachments if role == FOLLOWER), None)

    def contains(self, name: str) -> bool:
        return name.startswith(self.prefix) and (self.prefix != "" or not name.startswith("_"))

    def overlaps(self, other: Namespace) -> bool:
        return self.type == other.type and (
            self.prefix.startswith(other.prefix) or other.prefix.startswith(self.prefix)
        )

    def attachment_labels(self) -> list[str]:
        """Each attachment as "link:role", sorted."""
        return sorted(f"{link}:{role}" for link, role in self.attachments)

    def to_dict(self) -> dict[str, object]:
        return {
            "type": self.type.label,
            "prefix": self.prefix,
            "reserved": self.reserved,
            "attachments": [[link, role] for link, role in self.attachments],
        }


def validate_prefix(resource_type: ResourceType, prefix: str) -> None:
    if resource_type is ResourceType.TOPIC:
        if len(prefix) > MAX_TOPIC_PREFIX_CHARS:
            raise _invalid(
                resource_type,
                prefix,
                f"has {len(prefix)} characters; a topic prefix may have at most "
                f"{MAX_TOPIC_PREFIX_CHARS}",
            )
        if not _TOPIC_PREFIX.fullmatch(prefix):
            bad = sorted({c for c in prefix if not _TOPIC_PREFIX.fullmatch(c)})
            raise _invalid(
                resource_type,
                prefix,
                f"has characters {''.join(bad)!r}; a topic prefix may hold only "
                "ASCII letters, digits, '.', '_' and '-'",
            )
        return
    if len(prefix) > MAX_OTHER_PREFIX_CHARS:
        raise _invalid(
            resource_type,
            prefix,
            f"has {len(prefix)} characters; a {resource_type.label} prefix may have at most "
            f"{MAX_OTHER_PREFIX_CHARS}",
        )
    if not all(c.isprintable() and not c.isspace() for c in prefix):
        raise _invalid(
            resource_type,
            prefix,
            f"has whitespace or unprintable characters; a {resource_type.label} prefix "
            "may hold only printable, non-whitespace characters",
        )


def _invalid(resource_type: ResourceType, prefix: str, why: str) -> ClusterError:
    name = describe(resource_type, prefix)
    return ClusterError(ErrorCode.INVALID_NAMESPACE, name, f"{name} {why}")


def _check_type(resource_type: ResourceType | int) -> ResourceType:
    return ResourceType.parse(int(resource_type))


class NamespaceTable:
    def __init__(self) -> None:
        self._by_type: dict[ResourceType, dict[str, Namespace]] = {
            t: {} for t in ResourceType if t is not ResourceType.UNSPECIFIED
        }
        # Distinct prefix lengths per type, longest first: `matching` looks up
        # name[:n] for each, so a produce costs one dict lookup per length.
        self._lengths: dict[ResourceType, list[int]] = {t: [] for t in self._by_type}

    def __len__(self) -> int:
        return sum(len(table) for table in self._by_type.values())

    # -- lookup ---------------------------------------------------------------------

    def find(self, resource_type: ResourceType, prefix: str) -> Namespace | None:
        table = self._by_type.get(resource_type)
        return None if table is None else table.get(prefix)

    def get(self, resource_type: ResourceType | int, prefix: str) -> Namespace:
        kind = _check_type(resource_type)
        ns = self.find(kind, prefix)
        if ns is None:
            name = describe(kind, prefix)
            raise ClusterError(ErrorCode.UNKNOWN_NAMESPACE, name, f"{name} does not exist")
        return ns

    def list(self, resource_type: ResourceType | int | None = None) -> NamespaceList:
        """Sorted by type, then prefix. None (or UNSPECIFIED): every type."""
        if resource_type is None or int(resource_type) == ResourceType.UNSPECIFIED:
            kinds = sorted(self._by_type)
        else:
            kinds = [_check_type(resource_type)]
        return [self._by_type[k][p] for k in kinds for p in sorted(self._by_type[k])]

    @staticmethod
    def contains(ns: Namespace, name: str) -> bool:
        return ns.contains(name)

    @staticmethod
    def overlaps(a: Namespace, b: Namespace) -> bool:
        return a.overlaps(b)

    def matching(self, resource_type: ResourceType, name: str) -> NamespaceList:
        """The namespaces of this type containing `name`, longest prefix first."""
        table = self._by_type.get(resource_type)
        if not table or not isinstance(name, str):  # a shell's missing (None) name
            return []
        out: NamespaceList = []
        for n in self._lengths[resource_type]:
            if n <= len(name):
                ns = table.get(name[:n])
                if ns is not None and ns.contains(name):
                    out.append(ns)
        return out

    def reserved_by(self, resource_type: ResourceType, name: str) -> Namespace | None:
        """The most specific reserved namespace containing `name`, if any."""
        return next((ns for ns in self.matching(resource_type, name) if ns.reserved), None)

    def overlapping(self, ns: Namespace) -> NamespaceList:
        """Namespaces of the same type overlapping `ns` (itself excluded), sorted."""
        return [
            other
            for prefix, other in sorted(self._by_type[ns.type].items())
            if prefix != ns.prefix and ns.overlaps(other)
        ]

    # -- changes ----------------------------------------------------------------------

    def create(
        self, resource_type: ResourceType | int, prefix: str, reserved: bool = False
    ) -> Records:
        kind = _check_type(resource_type)
        validate_prefix(kind, prefix)
        name = describe(kind, prefix)
        if self.find(kind, prefix) is not None:
            raise ClusterError(ErrorCode.NAMESPACE_EXISTS, name, f"{name} already exists")
        if len(self) >= MAX_NAMESPACES:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                name,
                f"cannot create {name}: the cluster has {MAX_NAMESPACES} namespaces (the limit)",
            )
        return self._commit(
            jr.NsCreate(kind.label, prefix, bool(reserved))
        )

    def set_reserved(
        self, resource_type: ResourceType | int, prefix: str, reserved: bool
    ) -> Records:
        ns = self.get(resource_type, prefix)
        if ns.reserved == bool(reserved):
            return []
        link = ns.follower_link
        if not reserved and link is not None:
            raise ClusterError(
                ErrorCode.NAMESPACE_ATTACHED,
                ns.name,
                f"{ns.name} follows link {link!r}, so it stays reserved; detach it from the "
                "link first",
            )
        return self._commit(
            jr.NsReserved(ns.type.label, ns.prefix, bool(reserved))
        )

    def delete(self, resource_type: ResourceType | int, prefix: str) -> Records:
        ns = self.get(resource_type, prefix)
        if ns.attachments:
            raise ClusterError(
                ErrorCode.NAMESPACE_ATTACHED,
                ns.name,
                f"{ns.name} is attached to {_attachment_text(ns)}; detach it first",
            )
        return self._commit(
            jr.NsDelete(ns.type.label, ns.prefix)
        )

    def attach(
        self, resource_type: ResourceType | int, prefix: str, link_name: str, role: str
    ) -> Records:
        """Attaches the namespace to a link as leader or follower (see the rules)."""
        ns = self.get(resource_type, prefix)
        if role not in ROLES:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                ns.name,
                f"cannot attach {ns.name} to link {link_name!r}: role {role!r} is not "
                "leader or follower",
            )
        if not link_name:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST, ns.name, f"cannot attach {ns.name}: empty link name"
            )
        if (link_name, role) in ns.attachments:
            return []
        other_role = next((r for link, r in ns.attachments if link == link_name), None)
        if other_role is not None:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                ns.name,
                f"cannot attach {ns.name} to link {link_name!r} as {role}: it is already "
                f"attached to that link as {other_role}",
            )
        if role == FOLLOWER:
            for candidate in [ns, *self.overlapping(ns)]:
                following = candidate.follower_link
                if following is None:
                    continue
                via = "it" if candidate is ns else f"the overlapping {candidate.name}"
                raise ClusterError(
                    ErrorCode.ALREADY_FOLLOWING,
                    ns.name,
                    f"cannot make {ns.name} follow link {link_name!r}: {via} already "
                    f"follows link {following!r}",
                )
        return self._commit(
            jr.NsAttach(ns.type.label, ns.prefix, link_name, role)
        )

    def detach(self, resource_type: ResourceType | int, prefix: str, link_name: str) -> Records:
        """Removes the namespace's attachment to the link (its reservation stays)."""
        ns = self.get(resource_type, prefix)
        if not any(link == link_name for link, _role in ns.attachments):
            return []
        return self._commit(
            jr.NsDetach(ns.type.label, ns.prefix, link_name)
        )

    def _commit(self, record: NamespaceRecord) -> Records:
        self.apply_record(record)
        return [record]

    # -- durability -----------------------------------------------------------------

    def apply_record(self, record: NamespaceRecord) -> None:
        """Replays a record returned earlier (no rule is checked: it happened)."""
        rtype = ResourceType.parse(record.resource_type)
        prefix = record.prefix
        table = self._by_type[rtype]
        if isinstance(record, jr.NsCreate):
            table[prefix] = Namespace(rtype, prefix, record.reserved)
            self._reindex(rtype)
            return
        if isinstance(record, jr.NsDelete):
            table.pop(prefix, None)
            self._reindex(rtype)
            return
        ns = table.get(prefix)
        if ns is None:
            return
        if isinstance(record, jr.NsReserved):
            ns.reserved = record.reserved
        elif isinstance(record, jr.NsAttach):
            pair = (record.link, record.role)
            if pair not in ns.attachments:
                ns.attachments.append(pair)
            if pair[1] == FOLLOWER:
                ns.reserved = True
        else:
            ns.attachments = [a for a in ns.attachments if a[0] != record.link]

    def _reindex(self, rtype: ResourceType) -> None:
        self._lengths[rtype] = sorted({len(p) for p in self._by_type[rtype]}, reverse=True)

    def snapshot(self) -> dict[str, object]:
        return {"version": 1, "namespaces": [ns.to_dict() for ns in self.list()]}

    def restore(self, snapshot: dict[str, object]) -> None:
        """Replaces the table's content with the snapshot's."""
        for table in self._by_type.values():
            table.clear()
        for entry in map(jr.json_object, jr.json_list(snapshot["namespaces"])):
            rtype = ResourceType.parse(str(entry["type"]))
            self._by_type[rtype][str(entry["prefix"])] = Namespace(
                rtype,
                str(entry["prefix"]),
                bool(entry["reserved"]),
                [
                    (str(link), str(role))
                    for link, role in map(jr.json_list, jr.json_list(entry["attachments"]))
                ],
            )
        for rtype in self._by_type:
            self._reindex(rtype)


def _attachment_text(ns: Namespace) -> str:
    parts = [f"link {link!r} as {role}" for link, role in ns.attachments]
    return ", ".join(parts)


__all__ = [
    "FOLLOWER",
    "LEADER",
    "MAX_NAMESPACES",
    "Namespace",
    "NamespaceTable",
    "ResourceType",
    "describe",
    "validate_prefix",
]
