"""Replication links: configuration, convergence and the link state machine.

Rules (spec sections 3-4):
- A link joins this cluster to one remote cluster. Both sides hold the same
  configuration, each from its own point of view: the remote's copy swaps
  local and remote (cluster ids, prefixes, which side leads).
- Every changeable field carries a version from a hybrid logical clock (HLC):
  (physical ms, logical counter, cluster id). When the two sides exchange
  configurations, each field keeps the newer version, so after a network
  partition both converge field by field whatever order the exchanges take.
  Namespace mappings are versioned entries too: attach and detach are the
  same entry with an `attached` flag, so a detach on one side and a re-attach
  on the other resolve by version, not by arrival order.
- States of an ASYNC link: DISCONNECTED (no contact within
  link.session.timeout.ms), CATCHING_UP (connected, some follower partition
  lags its source HW beyond link.lag.max.records or link.lag.max.ms),
  FOLLOWING (connected, every follower partition within bounds). The state is
  recomputed from contact and progress on every call, and each change is
  recorded with the time it was entered.
- SYNC mode (`set_mode`, allowed only from FOLLOWING; back to ASYNC always,
  at once). Each side judges the partitions it leads on the link from its
  followers' fetches, as Kafka judges its ISR: a fetch at offset o
  acknowledges everything below o; a follower partition is caught up when it
  has fetched everything the previous response offered, and in sync while it
  was caught up within link.replica.lag.time.max.ms. SYNCING (requested, not
  yet every partition caught up since) -> IN_SYNC (every partition caught up
  and in sync); IN_SYNC -> OUT_OF_SYNC (some partition not caught up within
  the lag time, or the connection lost); OUT_OF_SYNC -> IN_SYNC (every
  partition caught up again). While the leading side is IN_SYNC, a partition's
  high watermark waits for the follower's acknowledgement (`sync_floor`). The
  leading side sends its verdict with every fetch response; the following side
  adopts it, and shows OUT_OF_SYNC, never ASYNC or DISCONNECTED, when the
  connection is lost. A link that leads and follows shows the worse of both.

Pure code: time arrives as `now_ms`; link ids arrive from the shell.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Mapping as AbcMapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from linkd.core import journal as jr
from linkd.core import link_lag as lag
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.link_auth import Revoked
from linkd.core.link_lag import LedLogs
from linkd.core.link_lag import Role as Role  # (re-exported: it is a link's role)
from linkd.core.provenance import Gap

# A mapping's identity: (resource type, local prefix, remote prefix).
MappingKey = tuple[str, str, str]

# A version: (physical ms, logical counter, cluster id). Tuples compare
# field by field, so the cluster id breaks exact ties deterministically.
Version = tuple[int, int, str]
ZERO_VERSION: Version = (0, 0, "")

DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_LAG_MAX_RECORDS = 0
DEFAULT_LAG_MAX_MS = 30_000
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
DEFAULT_FETCH_SILENCE_MS = 2_000
# How long a healthy source takes at most to answer a fetch: its 500 ms long
# poll plus 500 ms for the way there and back (`link_rounds.fetch_answer_due_ms`).
DEFAULT_FETCH_ANSWER_DUE_MS = 1_000
STATE_HISTORY_MAX = 32
MAX_TOMBSTONES = 1_000
LinkRecord = jr.LinkConfigRecord | jr.LinkDelete | jr.LinkRemovalTold
# One hop up a namespace's lineage (`linkd.core.lineage`): the cluster a copy
# is followed from, and the version of the attach that made it so.
LineageHop = tuple[str, Version]


class MappingType(enum.StrEnum):
    """What a mapping maps. A StrEnum: equal to (and journalled as) its value."""

    TOPIC = "topic"
    GROUP = "group"
    PRINCIPAL = "principal"


class Leader(enum.StrEnum):
    """Which side of a link leads a mapping."""

    LOCAL = "local"
    REMOTE = "remote"


class LinkMode(enum.StrEnum):
    ASYNC = "ASYNC"
    SYNC = "SYNC"


_LINK_MODES: dict[str, LinkMode] = {m.value: m for m in LinkMode}

_Policy = TypeVar("_Policy", bound=enum.StrEnum)


def _parse_policy(policy: type[_Policy], key: str, name: str, value: str) -> _Policy:
    """`value` as a value of link policy `key` (create-link --config, alter-link);
    INVALID_LINK_CONFIG names the values it takes."""
    try:
        return policy(value)
    except ValueError:
        names = [repr(member.value) for member in policy]
        choices = f"{', '.join(names[:-1])} or {names[-1]}"
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {name!r}",
            f"link {name!r}: {key} is {choices}, not {value!r}",
        ) from None


class GapPolicy(enum.StrEnum):
    """gap.policy: what a follower partition does when the records it must
    copy next are gone from its source (the source's log start passed it).
    CONTINUE: go on from the source's log start, the gap recorded; STOP: stop
    that partition until the operator resumes it (resume-partition)."""

    CONTINUE = "continue"
    STOP = "stop"


def parse_gap_policy(name: str, value: str) -> GapPolicy:
    return _parse_policy(GapPolicy, "gap.policy", name, value)


class FetchBound(enum.StrEnum):
    """fetch.bound: how far an ASYNC follower copies its source's log.
    HIGH_WATERMARK (this project's default, KIP-986): everything the source
    acknowledged, transactions still open included (a failover aborts what is
    left open and reports it). LAST_STABLE_OFFSET (KIP-1279's mirror fetcher,
    a read_committed consumer): only below the source's last stable offset, so
    records of a transaction still open stay on the source until it ends: the
    follower lags by them meanwhile. A SYNC follower copies to the log end
    whatever the bound (it acknowledges what it holds)."""

    HIGH_WATERMARK = "high-watermark"
    LAST_STABLE_OFFSET = "last-stable-offset"


_FETCH_BOUNDS: dict[str, FetchBound] = {b.value: b for b in FetchBound}


def parse_fetch_bound(name: str, value: str) -> FetchBound:
    return _parse_policy(FetchBound, "fetch.bound", name, value)


class FailoverTruncation(enum.StrEnum):
    """failover.truncation: what a failover does with the records a follower
    partition holds above its last stable offset (those of replicated
    transactions still open, and every record after the first of them).
    ABORT (this project's default, KIP-986): every record is kept; this
    cluster writes an abort marker for each open transaction and the answer
    names it. LAST_STABLE_OFFSET (KIP-1279's mirror, as a reviewer proposed
    it beside fetch.bound high-watermark): the partition is cut at its last
    stable offset; the answer names each cut and the records it removed,
    which a read_uncommitted reader of this cluster may have read already."""

    ABORT = "abort"
    LAST_STABLE_OFFSET = "last-stable-offset"


def parse_failover_truncation(name: str, value: str) -> FailoverTruncation:
    return _parse_policy(FailoverTruncation, "failover.truncation", name, value)


class FailbackReconciliation(enum.StrEnum):
    """failback.reconciliation: where `recover` cuts this cluster's copy of
    a partition when it is to follow the remote again (a failback: the
    remote copied from this cluster, failed over, and leads now). HISTORY
    (this project's default): where the two histories part, by provenance
    and leader epochs (`histories.compare`). LAST_MIRRORED_OFFSET
    (KIP-1279): at the last mirrored offset, where the remote's copy of the
    partition stopped being copied from this cluster; nothing below it is
    compared. LAST_MIRRORED_LEADER_EPOCH (KIP-1279's later proposal): at the
    end of the leader epoch of the last record the remote mirrored from this
    cluster, as this cluster's own epoch history has it, and never past the
    last mirrored offset. Both KIP-1279 rules can keep records that differ
    from the remote's (after an unclean election here); a partition the
    remote never copied from this cluster has no last mirrored offset and is
    cut by the history rule, its row says so."""

    HISTORY = "history"
    LAST_MIRRORED_OFFSET = "last-mirrored-offset"
    LAST_MIRRORED_LEADER_EPOCH = "last-mirrored-leader-epoch"


def parse_failback_reconciliation(name: str, value: str) -> FailbackReconciliation:
    return _parse_policy(FailbackReconciliation, "failback.reconciliation", name, value)


# A link's shared policies by the name an operator gives them (create-link
# --config NAME=VALUE): the stored field each sets and how its value is checked.
POLICIES: dict[str, tuple[str, Callable[[str, str], object]]] = {
    "gap.policy": ("gap_policy", parse_gap_policy),
    "fetch.bound": ("fetch_bound", parse_fetch_bound),
    "failover.truncation": ("failover_truncation", parse_failover_truncation),
    "failback.reconciliation": ("failback_reconciliation", parse_failback_reconciliation),
}


def parse_policies(name: str, configs: dict[str, str]) -> dict[str, str]:
    """A new link's policies (`POLICIES` names -> values) as stored fields.
    Raises INVALID_LINK_CONFIG naming an unknown policy or a bad value."""
    fields: dict[str, str] = {}
    for key, value in sorted(configs.items()):
        known = POLICIES.get(key)
        if known is None:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {name!r}",
                f"link {name!r}: unknown link config {key!r} (known: "
                f"{', '.join(sorted(POLICIES))})",
            )
        field_name, parse = known
        parse(name, value)
        fields[field_name] = value
    return fields


class LinkState(enum.Enum):
    DISCONNECTED = "DISCONNECTED"
    CATCHING_UP = "CATCHING_UP"
    FOLLOWING = "FOLLOWING"
    SYNCING = "SYNCING"
    IN_SYNC = "IN_SYNC"
    OUT_OF_SYNC = "OUT_OF_SYNC"


SYNC_STATES = (LinkState.SYNCING, LinkState.IN_SYNC, LinkState.OUT_OF_SYNC)
MODES = ("ASYNC", "SYNC")


def in_prefix(name: str, prefix: str) -> bool:
    """The namespace rule: "" holds every name not starting with "_"."""
    if prefix == "":
        return not name.startswith("_")
    return name.startswith(prefix)


class Hlc:
    """Hybrid logical clock: monotonic versions close to physical time."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.physical = 0
        self.logical = 0

    def now(self, now_ms: int) -> Version:
        if now_ms > self.physical:
            self.physical, self.logical = now_ms, 0
        else:
            self.logical += 1
        return (self.physical, self.logical, self.node)

    def observe(self, version: Version) -> None:
        """Moves the clock past a version seen from elsewhere."""
        physical, logical, _ = version
        if (physical, logical) > (self.physical, self.logical):
            self.physical, self.logical = physical, logical


@dataclass(frozen=True, slots=True)
class Mapping:
    """A namespace mapping, from this cluster's point of view."""

    resource_type: MappingType
    local_prefix: str
    remote_prefix: str
    leader: Leader
    attached: bool
    version: Version
    # Why a side detached it by itself (it could not honour the mapping: see
    # `link_admin.refuse_unattachable`); "" otherwise. Travels with the mapping.
    note: str = ""

    def __post_init__(self) -> None:
        # Strings from the journal, the wire or a caller become the enums
        # (an unknown value fails here, naming it). A member already is its
        # own enum value: kept as it is, without the Enum call.
        if type(self.resource_type) is not MappingType:
            object.__setattr__(self, "resource_type", MappingType(self.resource_type))
        if type(self.leader) is not Leader:
            object.__setattr__(self, "leader", Leader(self.leader))

    @property
    def key(self) -> MappingKey:
        """Its identity on this side: (type, local prefix, remote prefix).
        Both prefixes: the other side keys it by its own (local) prefix,
        which is this side's remote prefix, so the key must hold both for the
        two sides' entries to pair up one to one."""
        return (self.resource_type, self.local_prefix, self.remote_prefix)

    @property
    def mirrored_key(self) -> MappingKey:
        """The same mapping's key on the other side."""
        return (self.resource_type, self.remote_prefix, self.local_prefix)

    @property
    def local_role(self) -> Role:
        return Role.LEADER if self.leader is Leader.LOCAL else Role.FOLLOWER

    def swapped(self) -> Mapping:
        # As `replace(self, local_prefix=..., remote_prefix=..., leader=...)`,
        # without its walk of the fields (every tick compares mirrored configs).
        return Mapping(
            self.resource_type,
            self.remote_prefix,
            self.local_prefix,
            Leader.REMOTE if self.leader is Leader.LOCAL else Leader.LOCAL,
            self.attached,
            self.version,
            self.note,
        )

    def to_record(self) -> dict[str, object]:
        record: dict[str, object] = {
            "type": self.resource_type.value,
            "local": self.local_prefix,
            "remote": self.remote_prefix,
            "leader": self.leader.value,
            "attached": self.attached,
            "version": list(self.version),
        }
        if self.note:
            record["note"] = self.note
        return record

    @classmethod
    def from_record(cls, r: dict[str, object]) -> Mapping:
        v = jr.json_list(r["version"])
        return cls(
            MappingType(str(r["type"])),
            str(r["local"]),
            str(r["remote"]),
            Leader(str(r["leader"])),
            bool(r["attached"]),
            (jr.json_int(v[0]), jr.json_int(v[1]), str(v[2])),
            str(r.get("note", "")),
        )


# Fields only this side's operator sets; a remote's values are never merged
# (`merge_configs`). A new link's mirror takes the address to dial from the
# creator's `local_bootstrap`, once.
LOCAL_FIELDS = frozenset({"remote_bootstrap", "local_bootstrap", "credentials", "link_key"})
# Secrets, held sealed (encrypted by the shell) and never sent: this side's
# credentials for the remote and the key both sides of the link hold.
SECRET_FIELDS = frozenset({"credentials", "link_key"})


@dataclass(frozen=True, slots=True)
class Field:
    value: str
    version: Version


@dataclass(slots=True)
class LinkConfig:
    """The durable configuration of a link, from this cluster's point of view."""

    name: str
    link_id: str
    local_cluster_id: str
    remote_cluster_id: str
    connection_direction: str  # "local_dials" | "remote_dials"
    # mode (shared, newest wins); remote_bootstrap, local_bootstrap, credentials,
    # link_key (LOCAL_FIELDS: this side's alone)
    fields: dict[str, Field]
    mappings: dict[MappingKey, Mapping] = field(default_factory=dict)
    link_epoch: int = 0
    # Only in a view that crosses to the remote (`lineage.outgoing`), never
    # stored: for each mapping the sender leads, where its copy comes from.
    lineage: dict[MappingKey, tuple[LineageHop, ...]] = field(default_factory=dict)

    def value(self, name: str) -> str:
        f = self.fields.get(name)
        return f.value if f is not None else ""

    @property
    def gap_policy(self) -> GapPolicy:
        """gap.policy (shared, newest wins): what a follower partition does
        when its source's log start passed its position. Unset: CONTINUE."""
        return GapPolicy(self.value("gap_policy") or GapPolicy.CONTINUE.value)

    @property
    def fetch_bound(self) -> FetchBound:
        """fetch.bound (shared, newest wins): how far an ASYNC follower copies
        (`FetchBound`). Unset: HIGH_WATERMARK."""
        value = self.value("fetch_bound")
        if not value:
            return FetchBound.HIGH_WATERMARK
        return _FETCH_BOUNDS.get(value) or FetchBound(value)  # as `mode`

    @property
    def failover_truncation(self) -> FailoverTruncation:
        """failover.truncation (shared, newest wins): what a failover does
        with a follower partition's records above its last stable offset
        (`FailoverTruncation`). Unset: ABORT."""
        return FailoverTruncation(
            self.value("failover_truncation") or FailoverTruncation.ABORT.value
        )

    @property
    def failback_reconciliation(self) -> FailbackReconciliation:
        """failback.reconciliation (shared, newest wins): where `recover`
        cuts this side to follow the remote (`FailbackReconciliation`).
        Unset: HISTORY."""
        return FailbackReconciliation(
            self.value("failback_reconciliation") or FailbackReconciliation.HISTORY.value
        )

    @property
    def mode(self) -> LinkMode:
        value = self.value("mode")
        if not value:
            return LinkMode.ASYNC
        # A dict lookup, not an Enum call (asked of every link, every round);
        # a value that is no mode raises as the Enum call does.
        return _LINK_MODES.get(value) or LinkMode(value)

    def attached_mappings(self) -> list[Mapping]:
        return [m for m in self.mappings.values() if m.attached]

    def attached_at(self, resource_type: str, local_prefix: str) -> Mapping | None:
        """The attached mapping of this exact local prefix, if any (the rules
        allow at most one)."""
        return next(
            (
                m
                for _k, m in sorted(self.mappings.items())
                if m.attached and m.resource_type == resource_type
                and m.local_prefix == local_prefix
            ),
            None,
        )

    def mapping_for(self, topic: str, role: str, resource_type: str = "topic") -> Mapping | None:
        """The attached mapping (longest prefix) under which this cluster has
        `role` ("leader" | "follower") for the named topic or group."""
        if role == Role.LEADER:
            leader = Leader.LOCAL  # `local_role`, without a property call per mapping
        elif role == Role.FOLLOWER:
            leader = Leader.REMOTE
        else:
            return None
        best: Mapping | None = None
        for m in self.mappings.values():
            if (
                m.attached
                and m.leader is leader
                and m.resource_type == resource_type
                and in_prefix(topic, m.local_prefix)
                and (best is None or len(m.local_prefix) > len(best.local_prefix))
            ):
                best = m
        return best

    def _record(self, skip: frozenset[str]) -> dict[str, object]:
        """The record of everything but the lineage and the fields in `skip`."""
        return {
            "name": self.name,
            "link_id": self.link_id,
            "local": self.local_cluster_id,
            "remote": self.remote_cluster_id,
            "direction": self.connection_direction,
            "fields": {
                k: [f.value, list(f.version)]
                for k, f in sorted(self.fields.items())
                if k not in skip
            },
            "mappings": [m.to_record() for _, m in sorted(self.mappings.items())],
            "epoch": self.link_epoch,
        }

    def to_record(self) -> dict[str, object]:
        record = self._record(frozenset())
        if self.lineage:  # a view in flight only; stored configurations have none
            record["lineage"] = [
                [list(k), [[c, list(v)] for c, v in hops]]
                for k, hops in sorted(self.lineage.items())
            ]
        return record

    @classmethod
    def from_record(cls, r: dict[str, object]) -> LinkConfig:
        fields = {}
        for k, stored in jr.json_object(r["fields"]).items():
            value, version = jr.json_list(stored)
            v = jr.json_list(version)
            fields[k] = Field(str(value), (jr.json_int(v[0]), jr.json_int(v[1]), str(v[2])))
        mappings = {}
        for m in jr.json_list(r["mappings"]):
            mapping = Mapping.from_record(jr.json_object(m))
            mappings[mapping.key] = mapping
        lineage: dict[MappingKey, tuple[LineageHop, ...]] = {}
        for stored_key, hops in map(jr.json_list, jr.json_list(r.get("lineage", []))):
            key = jr.json_list(stored_key)
            read: list[LineageHop] = []
            for hop in jr.json_list(hops):
                cluster, hop_version = jr.json_list(hop)
                hv = jr.json_list(hop_version)
                read.append((str(cluster), (jr.json_int(hv[0]), jr.json_int(hv[1]), str(hv[2]))))
            lineage[(str(key[0]), str(key[1]), str(key[2]))] = tuple(read)
        return cls(
            str(r["name"]),
            str(r["link_id"]),
            str(r["local"]),
            str(r["remote"]),
            str(r["direction"]),
            fields,
            mappings,
            jr.json_int(r.get("epoch", 0)),
            lineage,
        )

    def shared(self) -> LinkConfig:
        """What may cross to the remote: everything but this side's secrets
        (its credentials for the remote, the link key) and the address it
        dials, which only this side's operator sets (LOCAL_FIELDS). Its own
        address (`local_bootstrap`) goes along: a remote that is creating its
        half learns where to reach this side from it."""
        fields = {k: f for k, f in self.fields.items() if k not in SECRET_FIELDS}
        fields.pop("remote_bootstrap", None)
        return LinkConfig(
            self.name,
            self.link_id,
            self.local_cluster_id,
            self.remote_cluster_id,
            self.connection_direction,
            fields,
            dict(self.mappings),
            self.link_epoch,
            dict(self.lineage),
        )

    def agreed_record(self) -> dict[str, object]:
        """The record of what both sides converge on (every field but
        LOCAL_FIELDS, and the mappings): equal on both sides, one of them
        mirrored, once they agree."""
        return self._record(LOCAL_FIELDS)

    def mirrored(self) -> LinkConfig:
        """The same link seen from the remote side."""
        swapped = {}
        for m in self.mappings.values():
            s = m.swapped()
            swapped[s.key] = s
        fields = dict(self.fields)
        local_bootstrap = fields.pop("local_bootstrap", None)
        remote_bootstrap = fields.pop("remote_bootstrap", None)
        if local_bootstrap is not None:
            fields["remote_bootstrap"] = local_bootstrap
        if remote_bootstrap is not None:
            fields["local_bootstrap"] = remote_bootstrap
        direction = "remote_dials" if self.connection_direction == "local_dials" else "local_dials"
        return LinkConfig(
            self.name,
            self.link_id,
            self.remote_cluster_id,
            self.local_cluster_id,
            direction,
            fields,
            swapped,
            self.link_epoch,
            {(t, remote, local): hops for (t, local, remote), hops in self.lineage.items()},
        )


def merge_configs(mine: LinkConfig, theirs_mirrored: LinkConfig) -> tuple[LinkConfig, bool]:
    """Field-by-field, newest version wins (the other side's config already
    mirrored to this side's point of view). Returns (merged, changed)."""
    if mine.link_id != theirs_mirrored.link_id:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {mine.name!r}",
            f"link {mine.name!r}: remote has link id {theirs_mirrored.link_id}, "
            f"this cluster has {mine.link_id}",
        )
    changed = False
    fields = dict(mine.fields)
    for name, theirs in theirs_mirrored.fields.items():
        if name in LOCAL_FIELDS:
            continue  # only this side's operator sets them
        current = fields.get(name)
        if current is None or theirs.version > current.version:
            fields[name] = theirs
            changed = True
    mappings = dict(mine.mappings)
    for key, theirs_m in theirs_mirrored.mappings.items():
        current_m = mappings.get(key)
        if current_m is None or theirs_m.version > current_m.version:
            mappings[key] = theirs_m
            changed = True
    if theirs_mirrored.link_epoch > mine.link_epoch:
        changed = True
    merged = LinkConfig(
        mine.name,
        mine.link_id,
        mine.local_cluster_id,
        mine.remote_cluster_id,
        mine.connection_direction,
        fields,
        mappings,
        max(mine.link_epoch, theirs_mirrored.link_epoch),
    )
    return merged, changed


@dataclass(slots=True)
class PartitionProgress:
    """Replication progress of one partition on this link."""

    topic: str  # local topic name
    partition: int
    role: str  # "leader" | "follower"
    # The follower's position: a follower's readable HW (what a consumer of
    # it can read), a leader's follower's last fetch offset.
    log_end_offset: int = 0
    source_high_watermark: int = 0
    caught_up_at_ms: int = 0  # last time the follower was at the source HW
    # Follower role: when `source_high_watermark` was learned (the end of the
    # fetch round that brought it). Its age is what a forced failover reports.
    known_at_ms: int = 0
    # Leader role, SYNC judgement: the source LEO offered by the previous
    # fetch response, and when that fetch was served.
    leo_at_last_fetch: int = 0
    last_fetch_ms: int = 0
    # When a fetch last showed it caught up (-1: never). Registration starts
    # the lag clock (caught_up_at_ms) but proves nothing: joining IN_SYNC
    # needs a fetch.
    fetched_caught_up_ms: int = -1
    # Leader role, ASYNC judgement: the HW when the previous fetch was served,
    # and whether the last fetch reached it (Kafka's caught-up rule, on the
    # HW since an ASYNC follower copies up to the HW).
    hw_at_last_fetch: int = 0
    caught_up_at_fetch: bool = False
    hw_caught_up_ms: int = 0
    fetches: int = 0  # fetches served for it since it was registered
    # Leader role: why this side refused the follower's last fetch of it
    # (None: it did not).
    refused: ClusterError | None = None

    def lag_records(self) -> int:
        return max(0, self.source_high_watermark - self.log_end_offset)

    def lag_ms(self, now_ms: int) -> int:
        return 0 if self.lag_records() == 0 else max(0, now_ms - self.caught_up_at_ms)


def _leader_fetched(
    rows: dict[tuple[str, int, str], PartitionProgress],
    topic: str,
    partition: int,
    fetch_offset: int,
    log_end_offset: int,
    high_watermark: int,
    now_ms: int,
) -> None:
    """`LinkTable.on_leader_fetch`'s row: the follower fetched at
    `fetch_offset` a log that ends at `log_end_offset` with `high_watermark`.
    A fetch beyond the log end is no position in this log (the follower
    waits, ahead of it, while this side still copies the partition from its
    own source): nothing is recorded, so records written here later at
    offsets it claims are not taken as copied (a SYNC acknowledgement waits
    for them, and its row's lag grows until it really fetches)."""
    if fetch_offset > log_end_offset:
        return
    key = (topic, partition, "leader")
    progress = rows.get(key)
    if progress is None:
        progress = PartitionProgress(topic, partition, "leader", caught_up_at_ms=now_ms)
        progress.leo_at_last_fetch = log_end_offset
        progress.last_fetch_ms = now_ms
        rows[key] = progress
    if fetch_offset >= log_end_offset:
        progress.fetched_caught_up_ms = now_ms
    elif progress.fetches > 0 and fetch_offset >= progress.leo_at_last_fetch:
        progress.fetched_caught_up_ms = max(progress.fetched_caught_up_ms, progress.last_fetch_ms)
    progress.caught_up_at_ms = max(progress.caught_up_at_ms, progress.fetched_caught_up_ms)
    # ASYNC: caught up when the fetch reaches the HW now, or the HW the
    # previous fetch saw (the follower copied all it was offered).
    offered = progress.hw_at_last_fetch if progress.fetches else high_watermark
    progress.caught_up_at_fetch = fetch_offset >= min(high_watermark, offered)
    if fetch_offset >= high_watermark:
        progress.hw_caught_up_ms = now_ms
    elif progress.caught_up_at_fetch:
        progress.hw_caught_up_ms = max(progress.hw_caught_up_ms, progress.last_fetch_ms)
    progress.hw_at_last_fetch = high_watermark
    progress.refused = None
    progress.fetches += 1
    progress.leo_at_last_fetch = log_end_offset
    progress.last_fetch_ms = now_ms
    progress.log_end_offset = fetch_offset
    progress.source_high_watermark = high_watermark


# (topic, partition) of a (topic, partition, fetch offset).
_TOPIC_OF = operator.itemgetter(0)
_PARTITION_OF = operator.itemgetter(1)


class _Settled(AbcMapping[tuple[str, int, str], PartitionProgress]):
    """A link's rows, each of the fold settled as it is read (`LagVerdict`
    reads a few by key)."""

    def __init__(self, runtime: LinkRuntime) -> None:
        self._runtime = runtime

    def __getitem__(self, key: tuple[str, int, str]) -> PartitionProgress:
        self._runtime.fold.settle(key)
        return self._runtime.rows[key]

    def __iter__(self) -> Iterator[tuple[str, int, str]]:
        return iter(self._runtime.rows)

    def __len__(self) -> int:
        return len(self._runtime.rows)


def _settled_rows(runtime: LinkRuntime) -> list[PartitionProgress]:
    """Every row of the link as it stands now, without changing one: a row
    of the fold that missed rounds is read from a settled copy (the check of
    `check_lag_verdicts` leaves the fold as it found it)."""
    fold = runtime.fold
    if not fold.rows:
        return list(runtime.rows.values())
    out = []
    for key, row in runtime.rows.items():
        entry = fold.missed(key)
        if entry is not None:
            row = dataclasses.replace(row)
            _fetched_again_n(row, fold.count - entry[1], fold.last_ms, entry[2])
        out.append(row)
    return out


# What of a led row a repeated fetch leaves as it is (`_fetched_again`).
_SETTLED = operator.attrgetter(
    "leo_at_last_fetch",
    "hw_at_last_fetch",
    "log_end_offset",
    "source_high_watermark",
    "refused",
    "caught_up_at_fetch",
)
_FETCHES = operator.attrgetter("fetches")
# Stands for a missing row in `_fetched_again` (never written).
_NO_ROW = PartitionProgress("", -1, "leader")
_LOG_END = operator.attrgetter("log_end_offset")
_LOG_HW = operator.attrgetter("high_watermark")
_CAUGHT_UP_AT = operator.attrgetter("caught_up_at_ms")
_FETCHED_CAUGHT_UP = operator.attrgetter("fetched_caught_up_ms")


def _reach(offset: int, end: int, hw: int) -> Reach:
    """Where a fetch at `offset` stands in a log ending at `end` with `hw`."""
    if offset >= end:
        return Reach.LOG_END
    return Reach.HIGH_WATERMARK if offset >= hw else Reach.BELOW


def _as_fetched(
    rows: dict[tuple[str, int, str], PartitionProgress],
    topic: str,
    run: list[tuple[str, int, int]],
    logs: Sequence[FetchedLog],
) -> tuple[list[PartitionProgress], list[Reach], list[bool]] | None:
    """For a run of one topic's (topic, partition, fetch offset): each led
    row, where its fetch stands (`Reach`), and whether a fetch at that
    offset of its log as it is now finds the row as a fetch there left it
    (checked a column at a time, at C speed): then a repeat moves only its
    fetch count and times (`_fetched_again_n`). None: a log is not there."""
    indices = list(map(operator.itemgetter(1), run))
    if not indices or min(indices) < 0 or max(indices) >= len(logs):
        return None
    keys = zip(itertools.repeat(topic), indices, itertools.repeat("leader"))
    found = list(map(rows.get, keys, itertools.repeat(_NO_ROW)))
    got = list(map(logs.__getitem__, indices))
    ends = list(map(_LOG_END, got))
    hws = list(map(_LOG_HW, got))
    offsets = list(map(operator.itemgetter(2), run))
    settled = zip(ends, hws, offsets, hws, itertools.repeat(None), map(operator.ge, offsets, hws))
    same = map(operator.eq, map(_SETTLED, found), settled)
    # (`_NO_ROW` has no fetch: a missing row is never taken as fetched again)
    ordered = map(operator.ge, map(_CAUGHT_UP_AT, found), map(_FETCHED_CAUGHT_UP, found))
    again = list(map(all, zip(same, map(_FETCHES, found), ordered, strict=True)))
    return found, list(map(_reach, offsets, ends, hws)), again


def _fetched_again(
    rows: dict[tuple[str, int, str], PartitionProgress],
    topic: str,
    run: list[tuple[str, int, int]],
    logs: Sequence[FetchedLog],
    now_ms: int,
    dirty: set[tuple[str, int, str]] | None = None,
) -> bool:
    """`_leader_fetched` for a run of one topic's (topic, partition, fetch
    offset) whose logs are all there. A row last fetched at that offset of
    a log with the end and HW its log has now (checked a column at a time,
    at C speed) moves only `fetches`, `last_fetch_ms` and the caught-up
    times, as `_leader_fetched` would move them (forward in time only: a
    lag verdict stands); the others go through `_leader_fetched`, in order,
    each marked in `dirty` (`link_lag`). False: a log is not there (nothing
    done)."""
    seen = _as_fetched(rows, topic, run, logs)
    if seen is None:
        return False
    found, reaches, again = seen
    for row, reach in itertools.compress(zip(found, reaches, strict=True), again):
        _fetched_again_n(row, 1, now_ms, reach)
    for _, partition, fetch_offset in itertools.compress(run, map(operator.not_, again)):
        log = logs[partition]
        if dirty is not None:
            dirty.add((topic, partition, "leader"))
        _leader_fetched(
            rows, topic, partition, fetch_offset, log.log_end_offset, log.high_watermark, now_ms
        )
    return True


# Refusals meaning the source has no such partition: its topic was deleted,
# or has fewer partitions. The partition is orphaned: nothing will ever be
# copied into it again from that topic.
ORPHANED = frozenset({ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_PARTITION})
# Refusals with nothing there to copy (orphaned, or not in a namespace the
# source leads on the link yet: the two sides' mappings disagree for now), so
# they do not hold the link back from FOLLOWING; describe-link shows each on
# the partition's row.
NOTHING_TO_COPY = ORPHANED | {ErrorCode.NOT_LED_ON_LINK}


def holds_back(refusal: ClusterError) -> bool:
    """Whether a partition refused so keeps its link from FOLLOWING."""
    return refusal.code not in NOTHING_TO_COPY


def orphans(refusal: ClusterError) -> bool:
    """Whether a partition refused so has lost its source for good (its
    topic, or that partition, is gone there): the transactions replicated
    into it will never learn their outcome. A source that merely does not
    lead the topic on the link (yet) is not gone: its roles are changing,
    and the procedures that change them settle those transactions."""
    return refusal.code in ORPHANED


@dataclass(frozen=True, slots=True)
class UncreatedTopic:
    """A follower topic the source lists and this cluster could not create:
    its storage refused to open its logs (`LinkRuntime.uncreated`)."""

    source: str  # its name on the source
    partitions: int  # the source's partition count
    refusal: ClusterError  # STORAGE_REFUSED, naming the topic and why
    since_ms: int  # when the first creation was refused


@dataclass(slots=True)
class LinkCounters:
    """What this side's follower has done on a link since its runtime began
    (daemon start or link creation), counted once the work is durable: the
    daemon's metrics read them (docs/metrics.md). Never decreasing while the
    runtime lives."""

    records: int = 0  # records appended by replication (every batch's record count)
    bytes: int = 0  # bytes of those batches
    truncations: int = 0  # follower partitions cut where their log parted from the source's
    cuts: int = 0  # unacknowledged tails cut because their source partition is gone


@dataclass(frozen=True, slots=True)
class LinkError:
    """A call of the link that failed on the side that dials it: its error
    code's name, its message, and when (describe-link's last error)."""

    code: str
    message: str
    at_ms: int


@dataclass(slots=True)
class FetchedAgain:
    """The partitions a fetch session's source fetched again this round
    without answering them (`LinkTable.on_fetched_again`): their keys,
    (topic, partition) (`keys`, built when first asked for, or a membership
    test of one, `contains`), and, for any of those keys, their fetches as
    (topic, partition, fetch offset) in the order the round fetched them
    (`fetches`). A round of a fetch session also says which round of which
    session it is (`round_of`) and which partitions may be in or out
    where they were not in the session's round before (`changed`; None:
    any may)."""

    build_keys: Callable[[], AbstractSet[tuple[str, int]]]
    fetches: Callable[[AbstractSet[tuple[str, int]]], list[tuple[str, int, int]]]
    contains: Callable[[tuple[str, int]], bool] | None = None
    round_of: tuple[object, int] | None = None
    changed: AbstractSet[tuple[str, int]] | None = None
    _keys: AbstractSet[tuple[str, int]] | None = None

    @property
    def keys(self) -> AbstractSet[tuple[str, int]]:
        if self._keys is None:
            self._keys = self.build_keys()
        return self._keys

    @staticmethod
    def listed(again: Sequence[tuple[str, int, int]]) -> FetchedAgain:
        """Of fetches listed in the order they were made."""
        keys = {(f[0], f[1]) for f in again}

        def fetches(of: AbstractSet[tuple[str, int]]) -> list[tuple[str, int, int]]:
            return [f for f in again if (f[0], f[1]) in of]

        return FetchedAgain(lambda: keys, fetches)


@dataclass(slots=True)
class QuietFold:
    """Led rows of a fetch session's partitions fetched again and not
    answered (`on_fetched_again`), round after round at the same position of
    a log as it was: such a fetch only moves a row's fetch count and some of
    its times (last fetch; caught up, where the position reaches the log
    end or the HW: to the fetch's time). Instead of each row, round after
    round, the fold counts the rounds (`count`) and keeps the last one's
    time (`last_ms`); a row takes in what it missed (`_fetched_again_n`)
    when it is read or changed (`settle`, `release`, and every read through
    `LinkRuntime.partitions`, which `flush`es), or leaves the fold (its
    partition was answered, or not fetched). Each row, by (topic,
    partition) (all are led rows), keeps the count it last took in (what it
    misses is the rounds since) and where its position stands (`Reach`)."""

    rows: dict[tuple[str, int], tuple[PartitionProgress, int, Reach]] = field(default_factory=dict)
    count: int = 0
    last_ms: int = 0
    # The fetch session's round it last took (`FetchedAgain.round_of`), the
    # partitions of that round that did not join (`outside`), and those that
    # left since (`left`): the next round of the session is taken from what
    # changed since (`LinkTable.on_fetched_again`).
    took: tuple[object, int] | None = None
    outside: set[tuple[str, int]] = field(default_factory=set)
    left: set[tuple[str, int]] = field(default_factory=set)

    def settle(self, key: tuple[str, int, str]) -> None:
        """The row of `key` (if in the fold) takes in the rounds it missed."""
        if key[2] != Role.LEADER:
            return
        at = (key[0], key[1])
        entry = self.rows.get(at)
        if entry is not None and entry[1] != self.count:
            _fetched_again_n(entry[0], self.count - entry[1], self.last_ms, entry[2])
            self.rows[at] = (entry[0], self.count, entry[2])

    def release(self, key: tuple[str, int, str]) -> None:
        """The row of `key` takes in what it missed and leaves the fold."""
        if key[2] == Role.LEADER:
            self.leave((key[0], key[1]))

    def leave(self, at: tuple[str, int]) -> None:
        """The row at (topic, partition) takes in what it missed and leaves."""
        entry = self.rows.pop(at, None)
        if entry is not None:
            self.left.add(at)
            if entry[1] != self.count:
                _fetched_again_n(entry[0], self.count - entry[1], self.last_ms, entry[2])

    def settle_all(self) -> None:
        """Every row takes in what it missed, and stays in the fold (for a
        reader of every row that changes none)."""
        count, at_ms = self.count, self.last_ms
        rows = self.rows
        for at, (row, seen, reach) in rows.items():
            if seen != count:
                _fetched_again_n(row, count - seen, at_ms, reach)
                rows[at] = (row, count, reach)

    def missed(self, key: tuple[str, int, str]) -> tuple[PartitionProgress, int, Reach] | None:
        """The fold's entry of `key`'s row if it missed rounds, else None."""
        if key[2] != Role.LEADER:
            return None
        entry = self.rows.get((key[0], key[1]))
        return entry if entry is not None and entry[1] != self.count else None

    def flush(self) -> None:
        """Every row takes in what it missed, and the fold is empty."""
        count, at_ms = self.count, self.last_ms
        for row, seen, reach in self.rows.values():
            if seen != count:
                _fetched_again_n(row, count - seen, at_ms, reach)
        self.rows.clear()
        self.took = None


class Reach(enum.IntEnum):
    """Where a row's fetch position stands in its log (`QuietFold`)."""

    LOG_END = 2  # at the log end (so at the HW too): caught up at each fetch
    HIGH_WATERMARK = 1  # at or past the HW, below the log end
    BELOW = 0  # below the HW


def _fetched_again_n(row: PartitionProgress, rounds: int, at_ms: int, reach: Reach) -> None:
    """`rounds` repeated fetches of a led row at the same position of the
    same log, the last at `at_ms` (`_fetched_again` on each: what it moves
    goes to the fetch's time)."""
    row.fetches += rounds
    row.last_fetch_ms = at_ms
    if reach is Reach.LOG_END:
        row.fetched_caught_up_ms = at_ms
        if at_ms > row.caught_up_at_ms:
            row.caught_up_at_ms = at_ms
    if reach is not Reach.BELOW:
        row.hw_caught_up_ms = at_ms


@dataclass(slots=True)
class QuietTrack:
    """A follower's fetch-session quiet partitions as its last round found
    them (`quiet_rounds.still_quiet`): which answer of which session that
    round took (`session`, `seq`), the link's mappings, the layout of logs
    and the log feed's sequence number then; the partitions found quiet
    (`found`, by source (topic, partition): the row's key and the row;
    `local`: the source key of each found local (topic, partition);
    `caught`: those of them caught up), the quiet ones it reached otherwise
    (`failed`, source keys), every follower row it reached (`reached`), and
    the follower rows written or forgotten since (`written`, by
    `LinkTable`)."""

    session: object
    seq: int
    mappings: tuple[object, ...]
    layout: int
    feed_seq: int = -1
    found: dict[tuple[str, int], tuple[tuple[str, int, str], PartitionProgress]] = field(
        default_factory=dict
    )
    local: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    caught: dict[tuple[str, int], PartitionProgress] = field(default_factory=dict)
    failed: set[tuple[str, int]] = field(default_factory=set)
    reached: list[tuple[str, int, str]] = field(default_factory=list)
    written: set[tuple[str, int]] = field(default_factory=set)


@dataclass(slots=True)
class LinkRuntime:
    """What is known of a link right now (not durable: rebuilt after restart)."""

    state: LinkState = LinkState.DISCONNECTED
    entered_at_ms: int = 0
    history: list[tuple[str, int]] = field(default_factory=list)
    last_contact_ms: int | None = None
    # Every row of the link, as last written: read them through `partitions`
    # (or settle a row of `fold` first), since the rows in `fold` lag behind.
    rows: dict[tuple[str, int, str], PartitionProgress] = field(default_factory=dict)
    fold: QuietFold = field(default_factory=QuietFold)
    # A follower knows its lag only after a fetch round since (re)connecting:
    # until then it is CATCHING_UP, never FOLLOWING on no evidence.
    round_done: bool = False
    round_done_ms: int | None = None  # when the last fetch round finished
    # As of when that round's source high watermarks are news (its request
    # left, or the source read them for a push): a round finished much later
    # than that (the follower paused, its answer held up) brings old news.
    round_known_at_ms: int | None = None
    # When a call of the link last failed (refused, reset, past its deadline):
    # what the last round learned may be old news from then on, until a
    # round finishes after it (`LinkTable.lag_known`).
    contact_lost_ms: int | None = None
    # SYNC mode: this side's verdict on the partitions it leads (None: it
    # leads none, or the link is ASYNC), when that verdict was reached, and the
    # remote's verdict on the partitions it leads (from its fetch responses).
    local_sync: LinkState | None = None
    local_sync_entered_ms: int = 0
    remote_sync: LinkState | None = None
    # Partitions this side leads on the link, registered so that one the
    # follower never fetched still counts (it is not caught up).
    led_partitions: AbstractSet[tuple[str, int]] = frozenset()
    # When this side's last fetch request left (follower side).
    fetch_sent_ms: int | None = None
    # Since when the pull lane's storage refused a round (None: its last
    # round stored what it fetched): it waits instead of polling, so the
    # source's acknowledgements since are unseen until a round stores again,
    # and the lag is not known (`lag_known`).
    storage_wait_ms: int | None = None
    # The request the last push that answered one answered: when it left
    # (follower side; read-ahead pushes continue from it).
    push_request_sent_ms: int | None = None
    # The source's topics as listed no earlier than this (follower side).
    topics_known_at_ms: int | None = None
    # Follower partitions the source refused, and why, until a round reaches
    # them again: each keeps the link from FOLLOWING (its lag is not known),
    # unless the source has no such partition (`holds_back`).
    refused: dict[tuple[str, int], ClusterError] = field(default_factory=dict)
    # Follower topics the source lists that this cluster's storage refused to
    # create (their logs could not be opened: a full disk, no descriptors),
    # by local name, until a discovery creates them or the source no longer
    # lists them: each keeps the link from FOLLOWING, its partitions shown as
    # refused rows (`link_rounds.carry_out_topics`).
    uncreated: dict[str, UncreatedTopic] = field(default_factory=dict)
    # Follower partitions whose last batch the source did not hold: the next
    # fetch sends every mark of them (`link_rounds.check_marks`).
    marks_wanted: set[tuple[str, int]] = field(default_factory=set)
    # Of those, the ones the source asked about a range of (`MarksWanted.span`).
    marks_spans: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # Follower partitions stopped at a gap (gap.policy stop) until the
    # operator resumes them: left out of fetches, shown by describe-link.
    # Not durable: after a restart the next round finds the gap again.
    gap_stopped: dict[tuple[str, int], Gap] = field(default_factory=dict)
    # Follower partitions the source said to cut where the cut would remove
    # acknowledged records this cluster's own clients wrote: not cut, fetched
    # as held (the source copies nothing) while their log ends where it ended
    # then (the value), refused until `recover` cuts them
    # (`link_rounds.own_writes_refusal`).
    own_writes_held: dict[tuple[str, int], int] = field(default_factory=dict)
    # What is wrong with the link credentials its sessions run on ("" when
    # nothing): as the side that requires them, sessions of the remote ended
    # because their credential was withdrawn (`link_auth.Revoked`); as the
    # caller, the remote refusing this side's sessions. Until a session opens.
    credential_problem: str = ""
    counters: LinkCounters = field(default_factory=LinkCounters)
    # Source side: the link's fetch session (a `fetch_sessions.SourceFetchSession`,
    # which imports this module, so it is held as an object and checked where
    # read; None: none open), and the last session id given out.
    source_fetch_session: object | None = None
    fetch_session_ids: int = 0
    # Calls of the link that failed here (the side that dials), by error code
    # name, and the last one; kept once the link is connected again.
    errors: dict[str, int] = field(default_factory=dict)
    last_error: LinkError | None = None
    # The partition last found keeping the link from FOLLOWING, judged first
    # next time (`LinkTable._runtime_lagging`): a link's state is judged on
    # every contact, and while it catches up this one usually still lags.
    lag_hint: tuple[str, int, str] | None = None
    # The last scan that found no partition lagging, kept up since
    # (`link_lag.LagVerdict`); None: the next judgement scans.
    lag_verdict: lag.LagVerdict | None = None
    # Follower side: what the last fetch round found of its session's quiet
    # partitions, for the next round to take by difference
    # (`quiet_rounds.still_quiet`); None: none kept.
    quiet_track: QuietTrack | None = None
    # Follower side: the last committed offset of each replicated group's
    # partition heard from the source, under local names, and when it was
    # heard: (group, topic, partition) -> (offset, heard at ms). The group
    # here may stand behind it (the data has not reached it yet); a failover
    # reports both. Not durable: after a restart, what is heard again.
    heard_offsets: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)
    # The remote's lineage of each namespace it leads on the link (keys this
    # side's), as its last configuration view said (`linkd.core.lineage`).
    # Not durable: the next handshake brings it again.
    upstream: dict[MappingKey, tuple[LineageHop, ...]] = field(default_factory=dict)

    @property
    def partitions(self) -> dict[tuple[str, int, str], PartitionProgress]:
        """Every row of the link as it stands now: the fold's rows take in
        what they missed and leave it (the reader may change them)."""
        if self.fold.rows:
            self.fold.flush()
        return self.rows

    def settled(self) -> AbcMapping[tuple[str, int, str], PartitionProgress]:
        """Every row of the link as it stands now, for a reader that changes
        none: the fold's rows take in what they missed and stay in it (the
        next round does not join them again)."""
        if self.fold.rows:
            self.fold.settle_all()
        return self.rows


@dataclass(frozen=True, slots=True)
class LinkSecrets:
    """A link's secrets as stored here (sealed) and whom they are shared with."""

    link_id: str
    name: str
    remote_cluster_id: str
    link_key: str
    credentials: str


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A link deleted here. Until the remote confirms it deleted its half
    (`told`), its handshakes are answered LINK_DELETED and this side retries
    telling it at `address` ("" when this side never dialed the remote)."""

    link_id: str
    name: str
    remote_cluster_id: str
    address: str
    told: bool
    # Sealed, as the link held them: telling the remote needs a session.
    link_key: str = ""
    credentials: str = ""


@dataclass(frozen=True, slots=True)
class LinkLimits:
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    lag_max_records: int = DEFAULT_LAG_MAX_RECORDS
    lag_max_ms: int = DEFAULT_LAG_MAX_MS
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    # Leading side: a follower that has records to copy and has not fetched
    # for this long is behind, whatever it said at its last fetch (a healthy
    # follower long-polls, so it fetches at least every FETCH_MAX_WAIT_MS).
    # Following side: a follower that has not finished a fetch round for this
    # long does not know its lag (CATCHING_UP, not FOLLOWING on old news).
    fetch_silence_ms: int = DEFAULT_FETCH_SILENCE_MS
    # Following side: a fetch out longer than this with no answer is one a
    # healthy source would have answered (its long poll plus the way there
    # and back): the source died or is cut off, and the lag is not known.
    fetch_answer_due_ms: int = DEFAULT_FETCH_ANSWER_DUE_MS


class FetchedLog(Protocol):
    """What the table reads of a led partition's log as its follower fetches."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...


# The partitions this cluster leads under a link's configuration.
LedPartitions = Callable[["LinkConfig"], AbstractSet[tuple[str, int]]]


class LinkTable:
    """Every link of this cluster: durable configs plus runtime state."""

    # Tests: every judgement a lag verdict answers is checked against a
    # scan of every partition (`_runtime_lagging`).
    check_lag_verdicts = False

    def __init__(self, cluster_id: str, limits: LinkLimits | None = None) -> None:
        self.cluster_id = cluster_id
        self.limits = limits or LinkLimits()
        self.hlc = Hlc(cluster_id)
        self.configs: dict[str, LinkConfig] = {}
        self.runtime: dict[str, LinkRuntime] = {}
        # Inside `deferred()`: links whose state must be recomputed at the end.
        self._deferred: dict[str, int] | None = None
        # Set by the cluster: where the partitions this cluster leads stand now.
        self.led_logs: LedLogs | None = None
        self.led_partitions: LedPartitions | None = None
        # Set by the cluster: its fault configuration (test only).
        self.faults: Faults = NO_FAULTS
        # Deleted links, by link id, oldest first (at most MAX_TOMBSTONES).
        self.tombstones: dict[str, Tombstone] = {}

    def deferred(self) -> _Deferral:
        """Progress reports inside the block recompute each link's state once,
        at the end, with the latest time reported (a fetch round over P
        partitions costs O(P), not O(P^2)). Nested blocks join the outer one."""
        return _Deferral(self)

    def _end_deferral(self) -> None:
        pending, self._deferred = self._deferred, None
        for name, now_ms in sorted((pending or {}).items()):
            if name in self.runtime:
                self._recompute(name, now_ms)

    # -- lookup ------------------------------------------------------------------

    def get(self, name: str) -> LinkConfig:
        config = self.configs.get(name)
        if config is None:
            raise ClusterError(
                ErrorCode.UNKNOWN_LINK,
                f"link {name!r}",
                f"link {name!r} does not exist on cluster {self.cluster_id!r}",
            )
        return config

    def by_id(self, link_id: str) -> LinkConfig:
        for config in self.configs.values():
            if config.link_id == link_id:
                return config
        raise ClusterError(
            ErrorCode.UNKNOWN_LINK,
            f"link id {link_id}",
            f"no link with id {link_id} on cluster {self.cluster_id!r}",
        )

    def connected(self, name: str, now_ms: int) -> bool:
        """Contact with the remote within link.session.timeout.ms."""
        runtime = self.runtime.get(name)
        contact = runtime.last_contact_ms if runtime is not None else None
        return contact is not None and now_ms - contact <= self.limits.session_timeout_ms

    def lagging_partitions(self, name: str, now_ms: int) -> list[str]:
        """The partitions that keep the link from FOLLOWING, one line each."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return []
        out = [
            f"{topic}-{partition} (following) "
            + ("is not cut" if (topic, partition) in runtime.own_writes_held else
               "is refused by the source")
            + f": {why.message}"
            for (topic, partition), why in sorted(runtime.refused.items())
            if holds_back(why)
        ]
        out += [
            f"{topic} (following, {u.partitions} partitions) is not created: {u.refusal.message}"
            for topic, u in sorted(runtime.uncreated.items())
        ]
        out += [
            f"{topic}-{partition} (following) parted from its source's log; finding the cut"
            for topic, partition in sorted(runtime.marks_wanted)
        ]
        config = self.configs.get(name)
        follows = config is not None and any(
            m.local_role == Role.FOLLOWER and m.resource_type == MappingType.TOPIC
            for m in config.attached_mappings()
        )
        if follows and not self.rounds_fresh(name, now_ms):
            last = runtime.round_done_ms if runtime.round_done else None
            since = f"{now_ms - last} ms ago" if last is not None else "never"
            out.append(
                f"no fetch round finished within {self.limits.fetch_silence_ms} ms (last: "
                f"{since}): the lag of what it follows is not known"
            )
        for (topic, partition, role), p in sorted(runtime.partitions.items()):
            if role == Role.FOLLOWER:
                if p.lag_records() > self.limits.lag_max_records or (
                    p.lag_ms(now_ms) > self.limits.lag_max_ms
                ):
                    out.append(f"{topic}-{partition} (following) lags {p.lag_records()} records")
            elif self._leader_lagging(p, now_ms):
                why = f"; refused: {p.refused.message}" if p.refused is not None else ""
                out.append(
                    f"{topic}-{partition} (leading): its follower lacks {self.leader_lag(p)} "
                    f"records (last fetch {now_ms - p.last_fetch_ms} ms ago){why}"
                )
        return out

    def state_name(self, name: str) -> str:
        runtime = self.runtime.get(name)
        return runtime.state.value if runtime is not None else "UNKNOWN"

    def state_of(self, name: str) -> LinkState | None:
        """The link's state (None: no such link running here)."""
        runtime = self.runtime.get(name)
        return runtime.state if runtime is not None else None

    def names(self) -> list[str]:
        return sorted(self.configs)

    # -- configuration -------------------------------------------------------------

    def new_config(
        self,
        name: str,
        link_id: str,
        remote_cluster_id: str,
        remote_bootstrap: str,
        credentials: str,
        direction: str,
        local_bootstrap: str,
        now_ms: int,
        link_key: str = "",
    ) -> LinkConfig:
        """Validates and builds (does not store) a new link's configuration.
        `credentials` and `link_key` arrive sealed by the shell."""
        if not name or len(name) > 249 or any(c.isspace() for c in name):
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {name!r}",
                f"link name {name!r} is empty, too long or has whitespace",
            )
        if name in self.configs:
            raise ClusterError(
                ErrorCode.LINK_EXISTS,
                f"link {name!r}",
                f"link {name!r} already exists on cluster {self.cluster_id!r}",
            )
        if remote_cluster_id == self.cluster_id:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {name!r}",
                f"link {name!r}: the remote at {remote_bootstrap} is this "
                f"cluster ({self.cluster_id!r}) itself",
            )
        if direction not in ("local_dials", "remote_dials"):
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {name!r}",
                f"link {name!r}: unknown connection direction {direction!r}",
            )
        version = self.hlc.now(now_ms)
        fields = {
            "remote_bootstrap": Field(remote_bootstrap, version),
            "credentials": Field(credentials, version),
            "mode": Field("ASYNC", version),
            "local_bootstrap": Field(local_bootstrap, version),
            "link_key": Field(link_key, version),
        }
        return LinkConfig(name, link_id, self.cluster_id, remote_cluster_id, direction, fields)

    def store(self, config: LinkConfig, now_ms: int) -> list[LinkRecord]:
        previous = self.configs.get(config.name)
        self.configs[config.name] = config
        runtime = self.runtime.get(config.name)
        if runtime is None:
            self.runtime[config.name] = LinkRuntime(
                entered_at_ms=now_ms, history=[("DISCONNECTED", now_ms)]
            )
        if self.led_partitions is not None:
            # What the link leads is judged from the moment it leads it.
            self.register_led_partitions(config.name, self.led_partitions(config), now_ms)
        if previous is not None and runtime is not None:
            # A role changed (a reversal, a detach): rows of partitions no
            # longer led or followed under the link go. A namespace newly
            # followed changes nothing yet: the link stays FOLLOWING until a
            # round shows one of its partitions lagging (KIP-986: attaching an
            # empty namespace keeps the link Following).
            gone = [k for k in runtime.partitions if config.mapping_for(k[0], k[2]) is None]
            self._forget(runtime, gone)
            unfollowed = [
                k for k in runtime.refused if config.mapping_for(k[0], "follower") is None
            ]
            for tp in unfollowed:
                del runtime.refused[tp]
            uncreated = [t for t in runtime.uncreated if config.mapping_for(t, "follower") is None]
            for topic in uncreated:
                del runtime.uncreated[topic]
            for tp in [k for k in runtime.own_writes_held if k not in runtime.refused]:
                del runtime.own_writes_held[tp]
            undiverged = {
                k for k in runtime.marks_wanted if config.mapping_for(k[0], "follower") is None
            }
            runtime.marks_wanted -= undiverged
            for tp in undiverged:
                runtime.marks_spans.pop(tp, None)
            if gone or unfollowed or undiverged or uncreated:
                self._recompute(config.name, now_ms)
        return [jr.LinkConfigRecord(config.to_record())]

    def accept_mirror(
        self, remote_view: LinkConfig, now_ms: int, link_key: str = ""
    ) -> list[LinkRecord]:
        """The remote created (or re-sent) a link: store or merge its mirror.
        `link_key` (sealed): the key the creating remote's session brought,
        kept when the link is new here."""
        mine = remote_view.shared().mirrored()
        received, mine.lineage = mine.lineage, {}
        if mine.local_cluster_id != self.cluster_id:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {remote_view.name!r}",
                f"link {remote_view.name!r} names cluster {mine.local_cluster_id!r} as its "
                f"remote, but this cluster is {self.cluster_id!r}",
            )
        for v in [f.version for f in mine.fields.values()] + [
            m.version for m in mine.mappings.values()
        ]:
            self.hlc.observe(v)
        existing = self.configs.get(mine.name)
        if existing is None:
            mine.fields["link_key"] = Field(link_key, self.hlc.now(now_ms))
            records = self.store(mine, now_ms)
        else:
            merged, changed = merge_configs(existing, mine)
            records = self.store(merged, now_ms) if changed else []
        runtime = self.runtime.get(mine.name)
        if runtime is not None:
            runtime.upstream = received
        return records

    def set_fields(self, name: str, values: dict[str, str], now_ms: int) -> list[LinkRecord]:
        """Several fields at one version (an operator's alter-link)."""
        config = self.get(name)
        version = self.hlc.now(now_ms)
        for key, value in values.items():
            config.fields[key] = Field(value, version)
        return self.store(config, now_ms)

    def set_field(self, name: str, key: str, value: str, now_ms: int) -> list[LinkRecord]:
        config = self.get(name)
        config.fields[key] = Field(value, self.hlc.now(now_ms))
        return self.store(config, now_ms)

    def set_mode(self, name: str, mode: str, now_ms: int) -> list[LinkRecord]:
        """ASYNC or SYNC (spec section 4): SYNC only from FOLLOWING; ASYNC always,
        taking effect at once. Setting the mode this side already has records
        it anew all the same: the remote may have changed it meanwhile without
        this side hearing of it yet, and the newest request must win (the
        operator was told it succeeded)."""
        config = self.get(name)
        if mode.upper() not in MODES:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {name!r}",
                f"link {name!r}: unknown mode {mode!r} (use ASYNC or SYNC)",
            )
        mode = mode.upper()
        if config.mode == mode:
            records = self.set_field(name, "mode", mode, now_ms)
            self._recompute(name, now_ms)
            return records
        # Judged as of now: the state may not have been recomputed since its
        # last fetch round went stale (fetch_silence_ms).
        self._recompute(name, now_ms)
        state = self.state_name(name)
        following = self.state_of(name) is LinkState.FOLLOWING
        if mode == LinkMode.SYNC and not following and not self.faults.undid(6):
            behind = self.lagging_partitions(name, now_ms)
            detail = f"; behind: {', '.join(behind[:5])}" if behind else ""
            raise ClusterError(
                ErrorCode.LINK_NOT_FOLLOWING,
                f"link {name!r}",
                f"link {name!r} is {state}: switching to SYNC needs it FOLLOWING (every "
                f"partition it carries caught up, on both sides){detail}",
            )
        records = self.set_field(name, "mode", mode, now_ms)
        self._recompute(name, now_ms)
        return records

    def put_mapping(self, name: str, mapping: Mapping, now_ms: int) -> list[LinkRecord]:
        config = self.get(name)
        versioned = replace(mapping, version=self.hlc.now(now_ms))
        config.mappings[versioned.key] = versioned
        config.link_epoch += 1
        return self.store(config, now_ms)

    def delete(self, name: str, told: bool = False) -> list[LinkRecord]:
        """Forgets the link and keeps its tombstone: until the remote is
        `told`, this side answers its handshakes LINK_DELETED (so it deletes
        its half too) and retries telling it (`pending_removals`)."""
        config = self.get(name)
        record = jr.LinkDelete(
            name,
            config.link_id,
            config.remote_cluster_id,
            config.value("remote_bootstrap"),
            told,
            config.value("link_key"),
            config.value("credentials"),
        )
        self.apply_record(record)
        return [record]

    def removal_told(self, link_id: str) -> list[LinkRecord]:
        """The remote confirmed it deleted its half of a deleted link."""
        tomb = self.tombstones.get(link_id)
        if tomb is None or tomb.told:
            return []
        record = jr.LinkRemovalTold(link_id)
        self.apply_record(record)
        return [record]

    def secrets(self, link_id: str) -> LinkSecrets | None:
        """What a session of this link needs (sealed), from the link or, once
        deleted here, its tombstone; None for a link never known here."""
        for config in self.configs.values():
            if config.link_id == link_id:
                return LinkSecrets(
                    link_id,
                    config.name,
                    config.remote_cluster_id,
                    config.value("link_key"),
                    config.value("credentials"),
                )
        tomb = self.tombstones.get(link_id)
        if tomb is None:
            return None
        return LinkSecrets(
            link_id, tomb.name, tomb.remote_cluster_id, tomb.link_key, tomb.credentials
        )

    def pending_removals(self) -> list[Tombstone]:
        """Deleted links whose remote has not confirmed, that this side can dial."""
        return [t for _i, t in sorted(self.tombstones.items()) if not t.told and t.address]

    def check_not_deleted(self, link_id: str, name: str) -> None:
        """A remote's call about a link this side deleted: LINK_DELETED."""
        tomb = self.tombstones.get(link_id)
        if tomb is not None:
            raise ClusterError(
                ErrorCode.LINK_DELETED,
                f"link {name!r}",
                f"link {name!r} (id {link_id}) was deleted on cluster {self.cluster_id!r}; "
                "the other side deletes its half too",
            )

    # -- runtime: contact, progress, state ---------------------------------------------

    def on_contact(self, name: str, now_ms: int) -> None:
        runtime = self.runtime.get(name)
        if runtime is not None:
            runtime.last_contact_ms = now_ms
            self._recompute(name, now_ms)

    def credential_revoked(self, revoked: dict[str, Revoked]) -> list[Revoked]:
        """Callee side: the links whose sessions a withdrawn credential ended
        (`link_auth.LinkSessions.revoked`, by link id) say so in describe-link
        (`credential_problem`) until a session opens again; returns those
        newly told (for the log)."""
        told = []
        for link_id, ended in sorted(revoked.items()):
            config = next((c for c in self.configs.values() if c.link_id == link_id), None)
            runtime = self.runtime.get(config.name) if config is not None else None
            if runtime is not None and runtime.credential_problem != ended.describe():
                runtime.credential_problem = ended.describe()
                told.append(ended)
        return told

    def session_opened(self, link_id: str) -> None:
        """Callee side: a session of the link opened on an accepted
        credential: a revocation it reported is over."""
        config = next((c for c in self.configs.values() if c.link_id == link_id), None)
        runtime = self.runtime.get(config.name) if config is not None else None
        if runtime is not None and runtime.credential_problem.startswith("revoked:"):
            runtime.credential_problem = ""

    def set_uncreated(self, name: str, uncreated: dict[str, UncreatedTopic], now_ms: int) -> None:
        """Follower side: the follower topics the source lists that this
        cluster could not create now (`link_rounds.carry_out_topics`)."""
        runtime = self.runtime.get(name)
        if runtime is not None:
            runtime.uncreated = dict(uncreated)
            self._recompute(name, now_ms)

    def on_fetch_round(self, name: str, now_ms: int, known_at_ms: int | None = None) -> None:
        """A follower finished a fetch round: every follower partition's lag is
        now known (recorded with on_progress before this call), as of
        `known_at_ms` (when its request left or the source read its high
        watermarks; default now)."""
        runtime = self.runtime.get(name)
        if runtime is not None:
            runtime.round_done = True
            runtime.round_done_ms = now_ms
            runtime.round_known_at_ms = now_ms if known_at_ms is None else known_at_ms
            runtime.last_contact_ms = now_ms
            self._recompute(name, now_ms)

    def rounds_fresh(self, name: str, now_ms: int) -> bool:
        """Follower side: a fetch round finished since (re)connecting, and
        within `fetch_silence_ms`: the lag it measured is the lag now."""
        runtime = self.runtime.get(name)
        if runtime is None or not runtime.round_done or runtime.round_done_ms is None:
            return False
        return now_ms - runtime.round_done_ms <= self.limits.fetch_silence_ms

    def lag_known(self, name: str, now_ms: int) -> bool:
        """Follower side: whether the lag the last fetch round measured is the
        lag now. Known only while all of these hold: the link is connected
        (contact within the session timeout), a fetch round finished within
        `fetch_silence_ms` (`rounds_fresh`), the fetch sent since (if any) is
        not overdue (out no longer than `fetch_answer_due_ms`), that round's
        own answer was not overdue either when it was applied (a follower
        that was paused, or an answer held up on the way, finishes a round on
        news older than a healthy source's answer: the source may have
        acknowledged records since that it does not count), and no call
        of the link failed since that round finished. A source that is alive answers the
        follower's long poll as soon as it acknowledges more, so while its
        calls succeed the last answer is the news; once a call fails (the
        source died, its connection was reset, a call passed its deadline)
        anything it acknowledged after its last answer may be missing here,
        and the lag is unknown since that answer (`unknown_since`)."""
        if not (self.connected(name, now_ms) and self.rounds_fresh(name, now_ms)):
            return False
        runtime = self.runtime[name]
        config = self.configs.get(name)
        if self.faults.undid(9) or (
            config is not None
            and config.mode == LinkMode.SYNC
            and runtime.state is LinkState.IN_SYNC
        ):
            # Undone: a failed call changes nothing until the silence bound.
            # IN_SYNC: the source acknowledges a record only once this side's
            # next fetch shows it holds it, and drops this side from sync only
            # after replica.lag.time.max.ms without a fetch (longer than the
            # silence bound): nothing it acknowledged can be missing here.
            return True
        sent = runtime.fetch_sent_ms
        if (
            sent is not None
            and runtime.round_done_ms is not None
            and sent >= runtime.round_done_ms
            and now_ms - sent > self.limits.fetch_answer_due_ms
        ):
            return False  # a fetch a healthy source would have answered by now
        news = runtime.round_known_at_ms
        if (
            not self.faults.undid(33)
            and news is not None
            and runtime.round_done_ms is not None
            and runtime.round_done_ms - news > self.limits.fetch_answer_due_ms
        ):
            return False  # the last round's answer came late: old news when applied
        if runtime.storage_wait_ms is not None and not self.faults.undid(43):
            # No long poll is out: a source that acknowledges more has no
            # one to tell, so the last round is not the news any longer.
            return False
        lost = runtime.contact_lost_ms
        return lost is None or runtime.round_done_ms is None or lost < runtime.round_done_ms

    def storage_wait(self, name: str, since_ms: int | None) -> None:
        """Follower side: the pull lane stops polling to wait out its
        storage's refusal (`since_ms`), or polls again (None)."""
        runtime = self.runtime.get(name)
        if runtime is not None:
            runtime.storage_wait_ms = since_ms

    def start(self, now_ms: int) -> None:
        """The shell starts: links restored from the journal begin DISCONNECTED now
        (the journal holds configurations, not runtime history)."""
        for runtime in self.runtime.values():
            if runtime.last_contact_ms is None:
                runtime.entered_at_ms = now_ms
                runtime.history = [(LinkState.DISCONNECTED.value, now_ms)]

    def on_contact_lost(
        self, name: str, now_ms: int, error: ClusterError | None = None
    ) -> None:
        """A dial or call failed (`error`: why, counted and kept as the link's
        last error): the lag learned before it is no longer known
        (`lag_known`); the session timeout decides when the link counts as
        DISCONNECTED."""
        runtime = self.runtime.get(name)
        if runtime is not None:
            runtime.contact_lost_ms = now_ms
        if runtime is not None and error is not None:
            code = error.code.name
            runtime.errors[code] = runtime.errors.get(code, 0) + 1
            runtime.last_error = LinkError(code, error.message, now_ms)
        self._recompute(name, now_ms)

    def on_progress(
        self,
        name: str,
        topic: str,
        partition: int,
        role: str,
        log_end_offset: int,
        source_high_watermark: int,
        now_ms: int,
        known_at_ms: int | None = None,
    ) -> None:
        """A round told this partition's position and its source's HW, known
        from `known_at_ms` (default now) on."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        key = (topic, partition, role)
        dirty = self._lag_news(runtime, now_ms)
        if dirty is not None:
            dirty.add(key)
        runtime.fold.release(key)
        track = runtime.quiet_track
        if track is not None and role == Role.FOLLOWER:
            track.written.add((topic, partition))
        progress = runtime.rows.get(key)
        if progress is None:
            progress = PartitionProgress(topic, partition, role, caught_up_at_ms=now_ms)
            runtime.rows[key] = progress
        progress.log_end_offset = log_end_offset
        progress.source_high_watermark = source_high_watermark
        progress.known_at_ms = now_ms if known_at_ms is None else known_at_ms
        if progress.lag_records() == 0:
            progress.caught_up_at_ms = now_ms
        self._recompute(name, now_ms)

    def on_leader_fetch(
        self,
        name: str,
        topic: str,
        partition: int,
        fetch_offset: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> None:
        """The follower fetched `topic`/`partition` at `fetch_offset` (so it holds,
        durably, everything below it); this side's log ends at `log_end_offset`.
        Kafka's rule for a follower's last caught-up time: caught up now if it
        reached the log end, else as of the previous fetch if it reached what
        that fetch's response offered."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        dirty = self._lag_news(runtime, now_ms)
        if dirty is not None:
            dirty.add((topic, partition, "leader"))
        runtime.fold.release((topic, partition, "leader"))
        _leader_fetched(
            runtime.rows, topic, partition, fetch_offset, log_end_offset, high_watermark, now_ms
        )
        self._recompute(name, now_ms)

    def on_leader_fetches(
        self,
        name: str,
        fetches: Iterable[tuple[str, int, int]],
        logs: Callable[[str], Sequence[FetchedLog]],
        now_ms: int,
    ) -> None:
        """`on_leader_fetch` for each (topic, partition, fetch offset) of
        `fetches`, with its log's end and HW from its topic's `logs`, judged
        once. A run of one topic's partitions each fetched again as its
        last fetch was is recorded at once (`_fetched_again`)."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        dirty = self._lag_news(runtime, now_ms)
        self._fetched(runtime, fetches, logs, now_ms, dirty)
        self._recompute(name, now_ms)

    def _fetched(
        self,
        runtime: LinkRuntime,
        fetches: Iterable[tuple[str, int, int]],
        logs: Callable[[str], Sequence[FetchedLog]],
        now_ms: int,
        dirty: set[lag.Key] | None,
    ) -> None:
        """`on_leader_fetches`' rows, not judged."""
        rows = runtime.rows
        fold = runtime.fold
        for topic, run in itertools.groupby(fetches, operator.itemgetter(0)):
            topic_logs = logs(topic)
            again = list(run)
            if fold.rows:
                for _, partition, _ in again:
                    fold.release((topic, partition, "leader"))
            if _fetched_again(rows, topic, again, topic_logs, now_ms, dirty):
                continue
            for _, partition, fetch_offset in again:
                log = topic_logs[partition]
                if dirty is not None:
                    dirty.add((topic, partition, "leader"))
                _leader_fetched(
                    rows, topic, partition, fetch_offset, log.log_end_offset, log.high_watermark,
                    now_ms,
                )  # fmt: skip

    def on_fetched_again(
        self,
        name: str,
        again: FetchedAgain,
        logs: Callable[[str], Sequence[FetchedLog]],
        now_ms: int,
    ) -> None:
        """`on_leader_fetches` for a fetch session's partitions fetched again
        and not answered (each its fetch as the last, its log as the last
        answer found it): the same rows, but a row fetched so the round
        before too is counted in the fold (`QuietFold`) instead of written.
        A row of the fold not among them takes in what it missed and leaves
        it; one new among them is recorded as `on_leader_fetches` records
        it, and joins the fold once its row is as the fetch leaves it
        (`_fetched_again` would take it). The round's partitions are
        compared with the fold's as sets, at C speed: no row is visited
        unless it joins or leaves."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        dirty = self._lag_news(runtime, now_ms)
        fold = runtime.fold
        if fold.rows and now_ms < fold.last_ms:
            fold.flush()  # the clock went back: a later round is not the latest
        inside = fold.rows
        took, round_of = fold.took, again.round_of
        if (
            took is not None
            and round_of is not None
            and again.changed is not None
            and again.contains is not None
            and took[0] is round_of[0]
            and took[1] == round_of[1] - 1
        ):
            joining_keys = self._fold_changes(fold, again, again.contains)
        else:
            keys = again.keys
            if len(inside) == len(keys) and inside.keys() == keys:
                joining_keys = set()
            else:
                for at in inside.keys() - keys:
                    fold.leave(at)  # (each row its own: the order is not news)
                joining_keys = set(keys - inside.keys()) if inside else set(keys)
        joining = again.fetches(joining_keys) if joining_keys else []
        if inside:
            fold.count += 1
        fold.last_ms = now_ms
        if joining:
            self._fetched(runtime, joining, logs, now_ms, dirty)
            self._join(runtime, joining, logs, now_ms)
        fold.outside = {k for k in joining_keys if k not in inside}
        fold.took, fold.left = round_of, set()
        self._recompute(name, now_ms)

    def _fold_changes(
        self,
        fold: QuietFold,
        again: FetchedAgain,
        contains: Callable[[tuple[str, int]], bool],
    ) -> set[tuple[str, int]]:
        """`on_fetched_again` for the session round after the one the fold
        took: only the partitions that changed since (`again.changed`), left
        the fold, or did not join it can join or leave now; returns those to
        join (the rows of the others leave now)."""
        assert again.changed is not None
        inside = fold.rows
        if self.check_lag_verdicts:
            keys = again.keys
            expected = (set(inside.keys() - keys), set(keys - inside.keys()))
        leaving: set[tuple[str, int]] = set()
        joining: set[tuple[str, int]] = set()
        for at in itertools.chain(again.changed, fold.left, fold.outside):
            if contains(at):
                if at not in inside:
                    joining.add(at)
            elif at in inside:
                leaving.add(at)
        if self.check_lag_verdicts:
            assert (leaving, joining) == expected, (
                f"the quiet fold's changes taken by difference {(leaving, joining)} are not "
                f"what a comparison of every partition finds {expected}"
            )
        for at in leaving:
            fold.leave(at)  # (each row its own: the order is not news)
        return joining

    @staticmethod
    def _join(
        runtime: LinkRuntime,
        joining: list[tuple[str, int, int]],
        logs: Callable[[str], Sequence[FetchedLog]],
        now_ms: int,
    ) -> None:
        """Of the rows just recorded fetched at `now_ms`, those a repeat of
        that fetch would find as it left them (`_as_fetched`, the test
        `_fetched_again` makes) join the fold."""
        fold = runtime.fold
        for topic, group in itertools.groupby(joining, operator.itemgetter(0)):
            run = list(group)
            seen = _as_fetched(runtime.rows, topic, run, logs(topic))
            if seen is None:
                continue
            found, reaches, again = seen
            for (_, partition, _), row, reach in itertools.compress(
                zip(run, found, reaches, strict=True), again
            ):
                if row.last_fetch_ms == now_ms:
                    fold.rows[(topic, partition)] = (row, fold.count, reach)

    def on_leader_refused(
        self, name: str, topic: str, partition: int, refusal: ClusterError, now_ms: int
    ) -> None:
        """This side refused the follower's fetch of a partition it leads."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        key = (topic, partition, "leader")
        dirty = self._lag_news(runtime, now_ms)
        if dirty is not None:
            dirty.add(key)
        runtime.fold.release(key)
        progress = runtime.rows.get(key)
        if progress is None:
            progress = PartitionProgress(topic, partition, "leader", caught_up_at_ms=now_ms)
            progress.last_fetch_ms = now_ms
            runtime.rows[key] = progress
        progress.refused = refusal
        self._recompute(name, now_ms)

    def explained(self, name: str, now_ms: int) -> bool:
        """Whether every partition that keeps the link from FOLLOWING (from
        IN_SYNC, on a SYNC link) was refused, with a reason the link reports
        (on either side)."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return False
        lagging = False
        for p in self._lagging_ones(runtime.settled().values(), now_ms):
            if p.role != Role.LEADER or p.refused is None:
                return False  # lagging with no reason given
            lagging = True
        config = self.configs.get(name)
        verdict = runtime.local_sync
        if (
            config is not None
            and config.mode == LinkMode.SYNC
            and verdict in (LinkState.SYNCING, LinkState.OUT_OF_SYNC)
            and self.connected(name, now_ms)
        ):
            # The leading side's verdict: a led partition its follower does
            # not fetch (it refused to cut its own clients' records there,
            # `recover` decides) holds it back for good; its row says why.
            since = runtime.local_sync_entered_ms
            for p in self._sync_unready(self._led_progress(runtime), since, now_ms):
                if p.refused is None:
                    return False  # not in sync with no reason given
                lagging = True
        return (
            lagging
            or any(holds_back(e) for e in runtime.refused.values())
            or bool(runtime.uncreated)
        )

    def register_led_partitions(
        self, name: str, partitions: AbstractSet[tuple[str, int]], now_ms: int
    ) -> None:
        """The partitions this side leads on the link now. A new one counts as
        caught up at registration (its lag time starts then); one that left is
        forgotten. (The very set registered last changes nothing: the
        cluster keeps its answer until the link or its logs change.)"""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        dirty = self._lag_news(runtime, now_ms)
        if partitions is not runtime.led_partitions:
            for topic, partition in sorted(partitions - runtime.led_partitions):
                key = (topic, partition, "leader")
                if dirty is not None:
                    dirty.add(key)
                if key not in runtime.rows:
                    progress = PartitionProgress(
                        topic, partition, "leader", caught_up_at_ms=now_ms
                    )
                    progress.last_fetch_ms = now_ms
                    progress.hw_caught_up_ms = now_ms
                    runtime.rows[key] = progress
            for topic, partition in runtime.led_partitions - partitions:
                runtime.fold.release((topic, partition, "leader"))
                runtime.rows.pop((topic, partition, "leader"), None)
            runtime.led_partitions = frozenset(partitions)
        self._recompute(name, now_ms)

    def on_remote_sync_state(self, name: str, state: str, now_ms: int) -> None:
        """The leading side's verdict on the partitions this side follows."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return
        try:
            runtime.remote_sync = LinkState(state) if state else None
        except ValueError:
            runtime.remote_sync = None
        if runtime.remote_sync not in SYNC_STATES:
            runtime.remote_sync = None
        self._recompute(name, now_ms)

    def local_sync_state(self, name: str) -> str:
        """This side's verdict on the partitions it leads ("" when ASYNC)."""
        runtime = self.runtime.get(name)
        if runtime is None or runtime.local_sync is None:
            return ""
        return runtime.local_sync.value

    def sync_floors(self) -> bool:
        """Whether `sync_floor` may be other than None for some partition:
        some link's verdict on what this side leads is IN_SYNC."""
        return any(r.local_sync is LinkState.IN_SYNC for r in self.runtime.values())

    def sync_floor(self, topic: str, partition: int) -> int | None:
        """How far the HW of a partition this cluster leads may move: below the
        acknowledged position of every follower of an IN_SYNC link that covers it
        (None: no such link, always so while `sync_floors` is False). A follower
        that never fetched acknowledges nothing."""
        floor: int | None = None
        for name, config in self.configs.items():
            runtime = self.runtime.get(name)
            if (
                runtime is None
                or runtime.local_sync is not LinkState.IN_SYNC
                or config.mapping_for(topic, "leader") is None
            ):
                continue
            # (A row of the fold lags only in its times: its position stands.)
            progress = runtime.rows.get((topic, partition, "leader"))
            acked = progress.log_end_offset if progress is not None else 0
            floor = acked if floor is None else min(floor, acked)
        return floor

    def sync_links_leading(self, topic: str) -> list[tuple[str, LinkState]]:
        """(link, this side's verdict) for every SYNC link on which this cluster
        leads the topic, sorted by link name."""
        out = []
        for name in sorted(self.configs):
            config = self.configs[name]
            runtime = self.runtime.get(name)
            if (
                config.mode == LinkMode.SYNC
                and runtime is not None
                and config.mapping_for(topic, "leader") is not None
            ):
                out.append((name, runtime.local_sync or LinkState.SYNCING))
        return out

    def syncing_follower_link(self, name: str, resource_type: str = "topic") -> str | None:
        """The SYNC link, if any, that this cluster follows `name` on and that is
        SYNCING (follower reads are refused then: spec section 6)."""
        for link in sorted(self.configs):
            config = self.configs[link]
            runtime = self.runtime.get(link)
            if (
                config.mode == LinkMode.SYNC
                and runtime is not None
                and runtime.state is LinkState.SYNCING
                and config.mapping_for(name, "follower", resource_type) is not None
            ):
                return link
        return None

    def forget_partitions(self, name: str, keep: set[tuple[str, int, str]]) -> None:
        runtime = self.runtime.get(name)
        if runtime is not None:
            self._forget(runtime, [*itertools.filterfalse(keep.__contains__, runtime.rows)])

    def forget_rows(self, name: str, keys: Iterable[tuple[str, int, str]]) -> None:
        """Forgets the rows of `keys` (those there)."""
        runtime = self.runtime.get(name)
        if runtime is not None:
            self._forget(runtime, [k for k in keys if k in runtime.rows])

    @staticmethod
    def _forget(runtime: LinkRuntime, keys: list[tuple[str, int, str]]) -> None:
        track = runtime.quiet_track
        for key in keys:
            runtime.fold.release(key)
            if track is not None and key[2] == Role.FOLLOWER:
                track.written.add((key[0], key[1]))
            del runtime.rows[key]

    def tick(self, now_ms: int) -> None:
        for name in list(self.runtime):
            self._recompute(name, now_ms)

    def reset_runtime(self, now_ms: int) -> None:
        """As after a restart from the journal (which holds configurations, not
        runtime): contact, progress and SYNC verdicts are forgotten, and every
        link begins DISCONNECTED now."""
        for name in sorted(self.runtime):
            self.runtime[name] = LinkRuntime(
                entered_at_ms=now_ms, history=[(LinkState.DISCONNECTED.value, now_ms)]
            )

    def _recompute(self, name: str, now_ms: int) -> None:
        if self._deferred is not None:
            self._deferred[name] = max(now_ms, self._deferred.get(name, now_ms))
            return
        runtime = self.runtime[name]
        config = self.configs.get(name)
        contact = runtime.last_contact_ms
        connected = contact is not None and now_ms - contact <= self.limits.session_timeout_ms
        if not connected:
            runtime.round_done = False
        if config is not None and config.mode == LinkMode.SYNC:
            new = self._sync_state(config, runtime, connected, now_ms)
        elif not connected:
            runtime.local_sync = None
            runtime.remote_sync = None
            new = LinkState.DISCONNECTED
        else:
            runtime.local_sync = None
            runtime.remote_sync = None
            # A partition whose log parted from the source's is not caught
            # up, whatever its offsets say, until the cut is found and made.
            diverged = bool(runtime.marks_wanted)
            follows = config is not None and any(
                m.attached
                and m.local_role == Role.FOLLOWER
                and m.resource_type == MappingType.TOPIC
                for m in config.mappings.values()
            )
            # The cheap reasons first: the scan of every partition last.
            lagging = (
                diverged
                or (follows and not self.rounds_fresh(name, now_ms))
                or any(holds_back(e) for e in runtime.refused.values())
                or bool(runtime.uncreated)
                or self._runtime_lagging(runtime, now_ms)
            )
            new = LinkState.CATCHING_UP if lagging else LinkState.FOLLOWING
        # Paired with the reports: FOLLOWING only in contact, with no
        # partition being cut or not created; IN_SYNC only in contact.
        assert new is not LinkState.FOLLOWING or (
            connected and not runtime.uncreated and not runtime.marks_wanted
        ), (name, new, contact, now_ms)
        assert new is not LinkState.IN_SYNC or connected, (name, new, contact, now_ms)
        if new != runtime.state:
            runtime.state = new
            runtime.entered_at_ms = now_ms
            runtime.history.append((new.value, now_ms))
            del runtime.history[:-STATE_HISTORY_MAX]

    def _any_lagging(self, partitions: Iterable[PartitionProgress], now_ms: int) -> bool:
        """Whether any of `partitions` keeps the link from FOLLOWING
        (`_lagging_ones`), stopping at the first."""
        return next(self._lagging_ones(partitions, now_ms), None) is not None

    def _runtime_lagging(self, runtime: LinkRuntime, now_ms: int) -> bool:
        """`_any_lagging` over the link's partitions: from the verdict of the
        last scan that found none lagging while it holds (`link_lag`), else
        by a scan that judges first the partition found last time."""
        verdict = runtime.lag_verdict
        if verdict is not None:
            # (It reads only rows that changed, and watched ones: a row the
            # fold holds is settled as it is read.)
            said = verdict.lagging(_Settled(runtime), now_ms, self.limits, self.led_logs)
            if said is not None:
                if self.check_lag_verdicts:
                    scanned = self._any_lagging(_settled_rows(runtime), now_ms)
                    assert said == scanned, (said, scanned, now_ms, verdict)
                return said
            runtime.lag_verdict = None
        if runtime.lag_hint:
            runtime.fold.settle(runtime.lag_hint)
        hint = runtime.rows.get(runtime.lag_hint) if runtime.lag_hint else None
        if hint is not None and self._any_lagging((hint,), now_ms):
            return True
        found, runtime.lag_verdict = lag.scan(
            runtime.settled(), now_ms, self.limits, self.led_logs
        )
        runtime.lag_hint = None if found is None else (found.topic, found.partition, found.role)
        return found is not None

    def _lag_news(self, runtime: LinkRuntime, now_ms: int) -> set[lag.Key] | None:
        """Before rows of `runtime` change at `now_ms`: where to mark those
        that change other than forward in time (None: no verdict to keep up).
        A change made earlier than the verdict's latest time (the clock went
        back) drops it."""
        verdict = runtime.lag_verdict
        if verdict is None:
            return None
        if now_ms < verdict.latest_ms:
            runtime.lag_verdict = None
            return None
        verdict.latest_ms = now_ms
        return verdict.dirty

    def _lagging_ones(
        self, partitions: Iterable[PartitionProgress], now_ms: int
    ) -> Iterator[PartitionProgress]:
        """Those of `partitions` that keep the link from FOLLOWING: a follower
        partition more than `lag_max_records` or `lag_max_ms` behind, or a led
        one whose follower is behind (`_leader_lagging`): `link_lag.judged`."""
        for p, said in lag.judged(partitions, now_ms, self.limits, self.led_logs):
            if said == lag.LAGGING:
                yield p

    def leader_lag(self, p: PartitionProgress) -> int:
        """Records below the HW of a partition this side leads that its
        follower has not fetched past (0 when the partition is gone)."""
        logs = self.led_logs(p.topic) if self.led_logs else None
        if logs is None or p.partition >= len(logs):
            return 0
        log = logs[p.partition]
        return max(0, log.high_watermark - max(p.log_end_offset, log.log_start_offset))

    def _leader_lagging(self, p: PartitionProgress, now_ms: int) -> bool:
        """The leading side's judgement of one follower (ASYNC), as Kafka judges
        a replica: behind when it has records to copy and its last fetch did
        not reach what the previous one was offered, or it went silent
        (`fetch_silence_ms`), or it has not been caught up for `lag_max_ms`.
        A partition never fetched is behind once it has been silent that long."""
        if self.leader_lag(p) <= self.limits.lag_max_records:
            return False
        return self._leader_behind(p, now_ms)

    def _leader_behind(self, p: PartitionProgress, now_ms: int) -> bool:
        """`_leader_lagging` once the follower has more than `lag_max_records`
        to copy: silent, or not caught up at its last fetch, or not for long."""
        return lag.leader_behind(p, now_ms, self.limits)

    @staticmethod
    def _led_progress(runtime: LinkRuntime) -> list[PartitionProgress]:
        """The progress of the partitions this side leads on the link now."""
        return [
            p
            for key, p in sorted(runtime.partitions.items())
            if key[2] == Role.LEADER and (key[0], key[1]) in runtime.led_partitions
        ]

    def _sync_unready(
        self, progress: list[PartitionProgress], since_ms: int, now_ms: int
    ) -> list[PartitionProgress]:
        """Of `progress` (partitions this side leads on a SYNC link), those
        that keep its verdict from reaching IN_SYNC: not caught up within
        `replica_lag_time_max_ms`, or not fetched up to its log end since
        `since_ms` (when the verdict last changed)."""
        lag_ms_max = self.limits.replica_lag_time_max_ms
        return [
            p
            for p in progress
            if now_ms - p.caught_up_at_ms > lag_ms_max or p.fetched_caught_up_ms < since_ms
        ]

    def _sync_state(
        self, config: LinkConfig, runtime: LinkRuntime, connected: bool, now_ms: int
    ) -> LinkState:
        """The SYNC state machine (module docstring): this side's verdict on what
        it leads, combined with the remote's verdict on what this side follows."""
        lag_ms_max = self.limits.replica_lag_time_max_ms
        # Whether this side leads, and whether it follows, an attached topic
        # mapping: one pass (`leader` LOCAL is `local_role` LEADER).
        leads = follows = False
        for m in config.mappings.values():
            if m.attached and m.resource_type == MappingType.TOPIC:
                if m.leader is Leader.LOCAL:
                    leads = True
                else:
                    follows = True
        local: LinkState | None = None
        if leads:
            previous = runtime.local_sync or LinkState.SYNCING
            progress = self._led_progress(runtime)
            fresh = all(now_ms - p.caught_up_at_ms <= lag_ms_max for p in progress)
            if not connected:
                local = LinkState.OUT_OF_SYNC
            elif previous is LinkState.IN_SYNC and not fresh:
                local = LinkState.OUT_OF_SYNC
            elif previous is LinkState.IN_SYNC:
                # A partition newly led (a namespace attached, a topic
                # created) whose follower lacks records is caught up only by
                # a fetch: until then the link is SYNCING, not IN_SYNC.
                behind = [
                    p for p in progress if p.fetched_caught_up_ms < 0 and self.leader_lag(p) > 0
                ]
                local = LinkState.SYNCING if behind else LinkState.IN_SYNC
            else:
                since = runtime.local_sync_entered_ms if runtime.local_sync is not None else now_ms
                caught_up = not self._sync_unready(progress, since, now_ms)
                local = LinkState.IN_SYNC if caught_up and runtime.local_sync else previous
            if local is not runtime.local_sync:
                runtime.local_sync = local
                runtime.local_sync_entered_ms = now_ms
        else:
            runtime.local_sync = None
        remote: LinkState | None = None
        if follows:
            remote = runtime.remote_sync if connected else LinkState.OUT_OF_SYNC
            empty = (
                not runtime.refused
                and not runtime.uncreated
                and not runtime.marks_wanted
                and not any(p.role == Role.FOLLOWER for p in runtime.partitions.values())
            )
            if connected and empty and self.rounds_fresh(config.name, now_ms):
                # Nothing to follow (an empty namespace, or what it followed
                # was detached): no answer brings the source's verdict, an
                # older one is stale, and nothing is behind.
                remote = LinkState.IN_SYNC
            remote = remote or LinkState.SYNCING
            if remote is LinkState.IN_SYNC and (runtime.marks_wanted or runtime.uncreated):
                # Its log parted from the source's (not in sync until cut), or
                # a topic the source lists could not be created here.
                remote = LinkState.SYNCING
            if (
                remote is LinkState.IN_SYNC
                and not self.faults.undid(31)
                and any(holds_back(e) for e in runtime.refused.values())
            ):
                # A partition held back (its fetched records this cluster's
                # storage refused, say) is not caught up, whatever the
                # source's last verdict: the source drops it from sync once
                # its lag time runs out, counted from before the refusal, and
                # acknowledges without it from then on, which nothing here
                # would hear of before its next answer. As in ASYNC mode
                # (not FOLLOWING), the link is not IN_SYNC.
                remote = LinkState.SYNCING
        verdicts = [v for v in (local, remote) if v is not None]
        for worst in (LinkState.OUT_OF_SYNC, LinkState.SYNCING):
            if worst in verdicts:
                return worst
        if verdicts:
            return LinkState.IN_SYNC
        return LinkState.IN_SYNC if connected else LinkState.OUT_OF_SYNC

    # -- durability ----------------------------------------------------------------------

    def apply_record(self, record: LinkRecord, now_ms: int = 0) -> None:
        if isinstance(record, jr.LinkConfigRecord):
            config = LinkConfig.from_record(record.config)
            for v in [f.version for f in config.fields.values()] + [
                m.version for m in config.mappings.values()
            ]:
                self.hlc.observe(v)
            self.store(config, now_ms)
        elif isinstance(record, jr.LinkDelete):
            self.configs.pop(record.name, None)
            self.runtime.pop(record.name, None)
            if record.link_id is not None:  # records written before tombstones have none
                self.tombstones[record.link_id] = Tombstone(
                    record.link_id,
                    record.name,
                    str(record.remote),
                    str(record.address),
                    record.told,
                    record.link_key,
                    record.credentials,
                )
                while len(self.tombstones) > MAX_TOMBSTONES:
                    del self.tombstones[next(iter(self.tombstones))]
        else:
            tomb = self.tombstones.get(record.link_id)
            if tomb is not None:
                self.tombstones[tomb.link_id] = replace(tomb, told=True)

    def snapshot(self) -> dict[str, object]:
        return {
            "links": [c.to_record() for _, c in sorted(self.configs.items())],
            "tombstones": [
                {
                    "link_id": t.link_id,
                    "name": t.name,
                    "remote": t.remote_cluster_id,
                    "address": t.address,
                    "told": t.told,
                    "link_key": t.link_key,
                    "credentials": t.credentials,
                }
                for t in self.tombstones.values()
            ],
        }

    def restore(self, snapshot: dict[str, object]) -> None:
        for r in jr.json_list(snapshot.get("links", [])):
            self.apply_record(jr.LinkConfigRecord(jr.json_object(r)))
        # Snapshots written before tombstones have none.
        for t in map(jr.json_object, jr.json_list(snapshot.get("tombstones", []))):
            self.tombstones[str(t["link_id"])] = Tombstone(
                str(t["link_id"]), str(t["name"]), str(t["remote"]), str(t["address"]),
                bool(t["told"]), str(t.get("link_key", "")), str(t.get("credentials", "")),
            )


class _Deferral:
    """`LinkTable.deferred()`'s block (a class, not a generator context
    manager: it is entered on every fetch round). Only the outermost block
    recomputes, at its end, whether or not the block raised."""

    __slots__ = ("_links", "_outer")

    def __init__(self, links: LinkTable) -> None:
        self._links = links
        self._outer = False

    def __enter__(self) -> None:
        if self._links._deferred is None:
            self._links._deferred = {}
            self._outer = True

    def __exit__(self, *exc: object) -> None:
        if self._outer:
            self._links._end_deferral()
