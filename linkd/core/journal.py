"""The metadata journal's records, typed: one frozen dataclass per kind.

Every change to a cluster's metadata (topics, groups' offsets, transactions,
ACLs, namespaces, links, mirror links, partition histories) is a journal
record. The core builds these records, applies them to its state, and hands
them to its shell in a `Journal` effect; the shell stores them and, after a
restart, the core replays them (`linkd/core/restart.py`).

The stored form is stable: `encode` writes the JSON object the journal has
always held (`{"type": "<kind>", <field>: <value>, ...}`), and `decode`
reads it back, also as written by earlier versions (fields added since are
optional). A record of an unknown kind, or one missing a field or holding a
value of the wrong type, is refused with an error that names the kind and
the field: a journal is never half-understood.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

# Values kept as the JSON they are stored as: nested structures whose own
# types own their encoding (a link's configuration, a transaction's state
# name, a provenance entry, an ACL binding).
Json = Any


@dataclass(frozen=True, slots=True)
class TopicCreate:
    TYPE: ClassVar[str] = "topic_create"
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class TopicDelete:
    TYPE: ClassVar[str] = "topic_delete"
    name: str


@dataclass(frozen=True, slots=True)
class TopicConfig:
    TYPE: ClassVar[str] = "topic_config"
    name: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every dynamic config of one broker level ("": the cluster-wide
    default; a broker id: that broker), as altered last."""

    TYPE: ClassVar[str] = "broker_config"
    broker: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Every config of one group (KIP-848), as altered last (empty: none)."""

    TYPE: ClassVar[str] = "group_config"
    group: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    TYPE: ClassVar[str] = "topic_partitions"
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class Provenance:
    """One entry of a partition's provenance history (`ProvenanceItem`'s
    journal form in `entry`)."""

    TYPE: ClassVar[str] = "provenance"
    name: str
    partition: int
    entry: dict[str, Json]


@dataclass(frozen=True, slots=True)
class LeaderEpoch:
    TYPE: ClassVar[str] = "leader_epoch"
    name: str
    partition: int
    epoch: int
    start: int


@dataclass(frozen=True, slots=True)
class EpochsCut:
    """The partition's log was cut at `offset` (a divergence, a recovery, an
    unclean election, a reset): leader-epoch bumps recorded at or after it are
    void, so a restart does not bring back an epoch the cut removed."""

    TYPE: ClassVar[str] = "epochs_cut"
    name: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class LogStart:
    TYPE: ClassVar[str] = "log_start"
    name: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PidBlock:
    """Producer ids below `next` are taken (allocated in blocks)."""

    TYPE: ClassVar[str] = "pid_block"
    next: int


@dataclass(frozen=True, slots=True)
class Txn:
    """A transaction's coordinator state (`TxnMetadata`)."""

    TYPE: ClassVar[str] = "txn"
    id: str
    pid: int
    epoch: int
    timeout_ms: int
    state: str
    partitions: list[list[Json]]
    groups: list[str]
    started_ms: int = 0
    # The epoch before the last bump (KIP-360: a retried InitProducerId of the
    # producer that bumped it gets the current epoch back, not a fence).
    last_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    TYPE: ClassVar[str] = "offset_commit"
    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int
    ts: int


@dataclass(frozen=True, slots=True)
class OffsetDelete:
    TYPE: ClassVar[str] = "offset_delete"
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupDelete:
    TYPE: ClassVar[str] = "group_delete"
    group: str


@dataclass(frozen=True, slots=True)
class TxnOffsetStage:
    """An offset sent in a transaction, visible once it commits."""

    TYPE: ClassVar[str] = "txn_offset_stage"
    group: str
    producer_id: int
    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int
    ts: int


@dataclass(frozen=True, slots=True)
class TxnOffsetEnd:
    TYPE: ClassVar[str] = "txn_offset_end"
    group: str
    producer_id: int
    commit: bool
    ts: int


@dataclass(frozen=True, slots=True)
class AclCreate:
    TYPE: ClassVar[str] = "acl_create"
    binding: list[Json]


@dataclass(frozen=True, slots=True)
class AclDelete:
    TYPE: ClassVar[str] = "acl_delete"
    binding: list[Json]


@dataclass(frozen=True, slots=True)
class NsCreate:
    TYPE: ClassVar[str] = "ns_create"
    resource_type: str
    prefix: str
    reserved: bool


@dataclass(frozen=True, slots=True)
class NsReserved:
    TYPE: ClassVar[str] = "ns_reserved"
    resource_type: str
    prefix: str
    reserved: bool


@dataclass(frozen=True, slots=True)
class NsDelete:
    TYPE: ClassVar[str] = "ns_delete"
    resource_type: str
    prefix: str


@dataclass(frozen=True, slots=True)
class NsAttach:
    TYPE: ClassVar[str] = "ns_attach"
    resource_type: str
    prefix: str
    link: str
    role: str


@dataclass(frozen=True, slots=True)
class NsDetach:
    TYPE: ClassVar[str] = "ns_detach"
    resource_type: str
    prefix: str
    link: str


@dataclass(frozen=True, slots=True)
class LinkConfigRecord:
    """A link's whole configuration (`LinkConfig.to_record()` in `config`)."""

    TYPE: ClassVar[str] = "link_config"
    config: dict[str, Json]


@dataclass(frozen=True, slots=True)
class LinkDelete:
    """The link is gone; its tombstone answers the remote until it is told.
    Records written before tombstones existed hold only the name."""

    TYPE: ClassVar[str] = "link_delete"
    name: str
    link_id: str | None = None
    remote: str | None = None
    address: str | None = None
    told: bool = False
    # The link's secrets, sealed (records before link sessions have none).
    link_key: str = ""
    credentials: str = ""


@dataclass(frozen=True, slots=True)
class LinkRemovalTold:
    TYPE: ClassVar[str] = "link_removal_told"
    link_id: str


@dataclass(frozen=True, slots=True)
class ProcedurePlan:
    """A multi-step procedure's durable plan on one link (`Plan.to_json()`
    in `plan`, linkd/core/plans.py), rewritten after each step; None: it
    ended."""

    TYPE: ClassVar[str] = "procedure_plan"
    link: str
    plan: dict[str, Json] | None = None


@dataclass(frozen=True, slots=True)
class MirrorLinkCreate:
    TYPE: ClassVar[str] = "mirror_link_create"
    name: str
    alias: str
    properties: str
    created_ms: int
    deleted_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MirrorLinkDelete:
    TYPE: ClassVar[str] = "mirror_link_delete"
    name: str
    deleted_ms: int


@dataclass(frozen=True, slots=True)
class ScramUpsert:
    """A user's SCRAM credential for one mechanism (`linkd/core/users.py`):
    salt, stored key and server key in base64; never a password."""

    TYPE: ClassVar[str] = "scram_upsert"
    user: str
    mechanism: int
    salt: str
    iterations: int
    stored_key: str
    server_key: str


@dataclass(frozen=True, slots=True)
class ScramDelete:
    TYPE: ClassVar[str] = "scram_delete"
    user: str
    mechanism: int


JournalRecord = (
    TopicCreate
    | TopicDelete
    | TopicConfig
    | TopicPartitions
    | Provenance
    | LeaderEpoch
    | EpochsCut
    | LogStart
    | PidBlock
    | Txn
    | OffsetCommit
    | OffsetDelete
    | GroupDelete
    | TxnOffsetStage
    | TxnOffsetEnd
    | AclCreate
    | AclDelete
    | NsCreate
    | NsReserved
    | NsDelete
    | NsAttach
    | NsDetach
    | LinkConfigRecord
    | LinkDelete
    | LinkRemovalTold
    | ProcedurePlan
    | MirrorLinkCreate
    | MirrorLinkDelete
    | ScramUpsert
    | ScramDelete
    | BrokerConfig
    | GroupConfig
)

KINDS: dict[str, type[JournalRecord]] = {
    cls.TYPE: cls
    for cls in (
        TopicCreate,
        TopicDelete,
        TopicConfig,
        TopicPartitions,
        Provenance,
        LeaderEpoch,
        EpochsCut,
        LogStart,
        PidBlock,
        Txn,
        OffsetCommit,
        OffsetDelete,
        GroupDelete,
        TxnOffsetStage,
        TxnOffsetEnd,
        AclCreate,
        AclDelete,
        NsCreate,
        NsReserved,
        NsDelete,
        NsAttach,
        NsDetach,
        LinkConfigRecord,
        LinkDelete,
        LinkRemovalTold,
        ProcedurePlan,
        MirrorLinkCreate,
        MirrorLinkDelete,
        ScramUpsert,
        ScramDelete,
        BrokerConfig,
        GroupConfig,
    )
}


class JournalRecordError(ValueError):
    """A stored record this version cannot read; the message names its kind
    and what is wrong."""


D = TypeVar("D")


# -- reading stored JSON, typed ---------------------------------------------------------------
# The core's types read their stored forms (journal records' nested values,
# snapshots) through these: each value arrives as `object` and leaves as the
# type it is read as, converted as `int()`/`list()` would, or refused.


def json_object(value: object, what: str = "a stored value") -> dict[str, object]:
    """A stored JSON object."""
    if not isinstance(value, dict):
        raise JournalRecordError(f"{what}: {value!r} is not an object")
    return value


def json_list(value: object, what: str = "a stored value") -> list[object]:
    """A stored JSON array (a tuple too: a stored form not yet written)."""
    if not isinstance(value, list | tuple):
        raise JournalRecordError(f"{what}: {value!r} is not an array")
    return list(value)


def json_fields(
    make: Callable[..., D], value: object, what: str = "a stored value"
) -> D:
    """A dataclass stored as the JSON object of its fields (`asdict`): made
    from them, each plain field (int, str, bool) checked as `decode` checks a
    record's."""
    obj = json_object(value, what)
    if dataclasses.is_dataclass(make):
        for f in dataclasses.fields(make):
            wanted = _CHECKS.get(str(f.type))
            got = obj.get(f.name)
            if f.name in obj and wanted is not None and not isinstance(got, wanted):
                raise JournalRecordError(f"{what}: field {f.name!r} is {got!r}, not {f.type}")
    return make(**obj)


def json_int(value: object, what: str = "a stored value") -> int:
    """A stored number, as `int()` reads it."""
    if not isinstance(value, int | float | str):
        raise JournalRecordError(f"{what}: {value!r} is not a number")
    return int(value)


def encode(record: JournalRecord) -> dict[str, Any]:
    """The stored form: {"type": kind, field: value, ...}; an optional field
    (default None) is written only when set."""
    out: dict[str, Any] = {"type": record.TYPE}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if value is None and f.default is None:
            continue
        out[f.name] = value
    return out


# Field types checked on decode (the JSON kinds they are stored as); other
# annotations (nested JSON) are checked by the types that read them.
_CHECKS: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "str": (str,),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "int | None": (int, type(None)),
}


def decode(stored: dict[str, Any]) -> JournalRecord:
    """The record of a stored form; JournalRecordError if it cannot be read."""
    kind = stored.get("type")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise JournalRecordError(
            f"journal record of unknown type {kind!r} (known: {', '.join(sorted(KINDS))})"
        )
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in stored:
            if f.default is dataclasses.MISSING:
                raise JournalRecordError(f"journal record {kind!r} has no field {f.name!r}")
            continue
        value = stored[f.name]
        wanted = _CHECKS.get(str(f.type))
        if wanted is not None and (
            not isinstance(value, wanted) or (bool not in wanted and isinstance(value, bool))
        ):
            raise JournalRecordError(
                f"journal record {kind!r}: field {f.name!r} is {value!r}, not {f.type}"
            )
        values[f.name] = value
    return cls(**values)


__all__ = [
    "KINDS",
    "AclCreate",
    "AclDelete",
    "BrokerConfig",
    "EpochsCut",
    "GroupConfig",
    "GroupDelete",
    "JournalRecord",
    "JournalRecordError",
    "LeaderEpoch",
    "LinkConfigRecord",
    "LinkDelete",
    "LinkRemovalTold",
    "LogStart",
    "MirrorLinkCreate",
    "MirrorLinkDelete",
    "NsAttach",
    "NsCreate",
    "NsDelete",
    "NsDetach",
    "NsReserved",
    "OffsetCommit",
    "OffsetDelete",
    "PidBlock",
    "ProcedurePlan",
    "Provenance",
    "ScramDelete",
    "ScramUpsert",
    "TopicConfig",
    "TopicCreate",
    "TopicDelete",
    "TopicPartitions",
    "Txn",
    "TxnOffsetEnd",
    "TxnOffsetStage",
    "decode",
    "encode",
    "json_fields",
    "json_int",
    "json_list",
    "json_object",
]
