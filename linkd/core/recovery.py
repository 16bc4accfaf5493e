"""Unclean link recovery and provenance reports (spec section 8).

Rules:
- Recovery runs on the side that will follow (it truncates); the link's
  remote will lead. It never runs by itself: an operator asks for a report,
  then confirms.
- Where the two sides' logs part is `histories.compare` (provenance and
  leader epochs), or, as the link's failback.reconciliation asks, KIP-1279's
  last mirrored offset or last mirrored leader epoch (`reconcile`). The
  follower is cut at its batch boundary at or below the last common offset;
  a follower left below the remote's log start is
  emptied (it restarts at the remote's log start on its first fetch); a
  partition the follower never copied a record of before the roles changed
  is cut to its start, reported.
- A topic none of whose partitions shares a record with the remote's, and
  whose provenance does not relate the two, looks like another topic of one
  name: recovery refuses to cut it (NO_SHARED_HISTORY), as it does a
  partition that begins after the remote's ends.
- Committed offsets of this side's groups beyond a cut are moved back to the
  cut; the report lists each (spec §10 invariant 6: only this admin call
  moves offsets backwards, and it reports it).

Pure code: functions of plain data and of ClusterState returning records and
effects, as cluster.py does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from linkd.core import journal as jr
from linkd.core import lineage, link_admin
from linkd.core.cluster import ClusterState, DanglingTxn
from linkd.core.effects import Effect, Journal, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.histories import (
    Comparison,
    PartitionSide,
    ReopenedTxn,
    compare,
    cut_offset,
    epoch_at,
    epoch_end,
    last_mirrored_offset,
    local_side,
    mark_ending_at,
    own_acknowledged,
    reopened_by_cut,
    with_marks_of,
)
from linkd.core.links import (
    FailbackReconciliation,
    Leader,
    LineageHop,
    LinkConfig,
    LinkState,
    Mapping,
    MappingType,
    Role,
)
from linkd.core.namespaces import ResourceType, validate_prefix
from linkd.core.partition import PartitionLog
from linkd.core.plans import PlanStep
from linkd.core.provenance import ProvenanceItem, check_history
from linkd.core.replication import in_prefix, map_name

# -- a report of one partition ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    remote_topic: str
    partition: int
    local_log_end_offset: int
    remote_log_end_offset: int
    common_offset: int
    truncate_to: int
    local_records_lost: int
    remote_records_lost: int
    reason: str
    related: bool = True
    # Transactions the cut reopens: their records stay, their marker goes.
    reopened: tuple[ReopenedTxn, ...] = ()

    @property
    def diverged(self) -> bool:
        return self.local_records_lost > 0

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "remote_topic": self.remote_topic,
            "partition": self.partition,
            "local_log_end_offset": self.local_log_end_offset,
            "remote_log_end_offset": self.remote_log_end_offset,
            "common_offset": self.common_offset,
            "truncate_to": self.truncate_to,
            "local_records_lost": self.local_records_lost,
            "remote_records_lost": self.remote_records_lost,
            "diverged": self.diverged,
            "reason": self.reason,
            "related": self.related,
            "reopened": [
                {
                    "producer_id": t.producer_id,
                    "first_offset": t.first_offset,
                    "marker_offset": t.marker_offset,
                    "committed": t.committed,
                    "own_marker": t.own_marker,
                    "replicated": t.replicated,
                }
                for t in self.reopened
            ],
        }


def plan_partition(
    topic: str,
    remote_topic: str,
    partition: int,
    local: PartitionSide,
    remote: PartitionSide,
    log: PartitionLog | None = None,
    rule: FailbackReconciliation = FailbackReconciliation.HISTORY,
) -> PartitionRow:
    """Compares one partition; refuses (NO_SHARED_HISTORY) when nothing
    relates them. Given the local `log`, the row names the transactions the
    cut reopens. `rule` (the link's failback.reconciliation) says where the
    common offset is (`reconcile`)."""
    result = reconcile(rule, local, remote, compare(local, remote))
    if not result.shared:
        raise ClusterError(
            ErrorCode.NO_SHARED_HISTORY,
            f"{topic}-{partition}",
            f"partition {topic}-{partition} on {local.cluster_id!r} (offsets "
            f"[{local.log_start_offset}, {local.log_end_offset})) begins after "
            f"{remote_topic}-{partition} on {remote.cluster_id!r} ends (offsets "
            f"[{remote.log_start_offset}, {remote.log_end_offset})): no offset of one can be "
            "compared with the other, so no last common offset is known and nothing was "
            "changed; recover in the other direction (on the remote, following this "
            "cluster), or leave this namespace out of the recovery",
        )
    cut = cut_offset(local, result.common_offset, remote.log_start_offset)
    # A cut never passes the log end, nor goes below its start.
    assert local.log_start_offset <= cut <= local.log_end_offset, (
        f"{topic}-{partition}: cut at {cut} outside [{local.log_start_offset}, "
        f"{local.log_end_offset}]"
    )
    return PartitionRow(
        topic,
        remote_topic,
        partition,
        local.log_end_offset,
        remote.log_end_offset,
        result.common_offset,
        cut,
        local.log_end_offset - cut,
        max(0, remote.log_end_offset - max(result.common_offset, remote.log_start_offset)),
        result.reason,
        result.related,
        reopened_by_cut(log, local, cut) if log is not None else (),
    )


def reconcile(
    rule: FailbackReconciliation,
    local: PartitionSide,
    remote: PartitionSide,
    history: Comparison,
) -> Comparison:
    """The common offset under `rule`, given the history rule's `history`
    (`compare`). HISTORY: `history` itself (its reason names what found
    it: provenance, leader-epoch, log-end, ...). LAST_MIRRORED_OFFSET: the
    remote's last mirrored offset from this cluster (`last_mirrored_offset`),
    at most this log's end; nothing below it is compared.
    LAST_MIRRORED_LEADER_EPOCH: the end, in this cluster's epoch history
    (`epoch_end`), of the leader epoch of the last record the remote mirrored
    from here (its batch mark's epoch, which a copy keeps; from the remote's
    epoch history when it marked no batch there, and the reason says so),
    at most the last mirrored offset. A partition the remote never copied
    from this cluster has no last mirrored offset: the history rule's cut,
    its reason saying why. Unrelated logs stay refused by the caller."""
    if rule is FailbackReconciliation.HISTORY or not history.shared:
        return history
    lmo = last_mirrored_offset(remote, local.cluster_id)
    if lmo is None:
        return replace(
            history,
            reason=f"history: {history.reason} (no last mirrored offset: "
            f"{remote.cluster_id} copied nothing of it from {local.cluster_id})",
        )
    if rule is FailbackReconciliation.LAST_MIRRORED_OFFSET:
        common = min(lmo, local.log_end_offset)
        return Comparison(common, f"last-mirrored-offset {lmo}", True, True)
    mark = mark_ending_at(remote, lmo)
    if lmo <= remote.log_start_offset:
        # No record below the last mirrored offset is left to name its epoch.
        common = min(lmo, local.log_end_offset)
        reason = (
            f"last-mirrored-leader-epoch unknown ({remote.cluster_id} holds no record below "
            f"the last mirrored offset {lmo})"
        )
        return Comparison(common, reason, True, True)
    if mark is not None:
        epoch, whence = mark.leader_epoch, ""
    else:
        epoch = epoch_at(remote.epoch_history, lmo - 1)
        whence = (
            f"; the epoch from {remote.cluster_id}'s epoch history: it marked no batch ending "
            "there"
        )
    end = epoch_end(local.epoch_history, local.log_end_offset, epoch)
    common = min(lmo, end, local.log_end_offset)
    reason = (
        f"last-mirrored-leader-epoch {epoch} ends at {end} (last mirrored offset {lmo}{whence})"
    )
    return Comparison(common, reason, True, True)


# -- an attach that would cut the follower's own writes ----------------------------------


@dataclass(frozen=True, slots=True)
class OwnWritesCut:
    """A follower partition that following its leader would cut below
    records its own clients wrote and were acknowledged (after a detach, a
    released reservation, or before it ever followed)."""

    topic: str  # the follower's name
    partition: int
    truncate_to: int
    log_end_offset: int
    own: tuple[tuple[int, int], ...]  # [from, to) of its own acknowledged records cut
    # Transactions the follower decided itself whose marker the cut removes.
    reopened: tuple[ReopenedTxn, ...] = ()

    @property
    def records(self) -> int:
        return sum(high - low for low, high in self.own)

    def describe(self) -> str:
        where = f"cut to {self.truncate_to} of log end {self.log_end_offset}"
        reopens = "".join(f", reopens {t.describe()}" for t in self.reopened)
        if not self.own:
            return f"{self.topic}-{self.partition}{reopens[1:]} ({where})"
        ranges = ", ".join(f"[{low}, {high})" for low, high in self.own)
        own = f"offsets {ranges} ({self.records} records; {where})"
        return f"{self.topic}-{self.partition} {own}{reopens}"


def own_writes_cut(
    topic: str,
    partition: int,
    follower: PartitionSide,
    leader: PartitionSide,
    log: PartitionLog | None = None,
) -> OwnWritesCut | None:
    """Where following `leader` would cut `follower` (as recovery would:
    `compare`, `cut_offset`), when the cut removes acknowledged records the
    follower's own clients wrote, or (given the follower's `log`) reopens a
    transaction the follower decided itself; None when it does neither (a
    follower simply behind, or whose cut tail was copied by a link)."""
    result = compare(follower, leader)
    if not result.shared:
        return None  # unrelated logs: the link refuses them (NO_SHARED_HISTORY)
    cut = cut_offset(follower, result.common_offset, leader.log_start_offset)
    if cut >= follower.log_end_offset:
        return None
    own = own_acknowledged(follower, cut)
    reopened = tuple(
        t
        for t in (reopened_by_cut(log, follower, cut) if log is not None else ())
        if t.decided_for_source
    )
    if not own and not reopened:
        return None
    return OwnWritesCut(topic, partition, cut, follower.log_end_offset, own, reopened)


def attach_cut_refusal(
    link_name: str,
    follower_id: str,
    leader_id: str,
    cuts: list[OwnWritesCut],
    committed: list[tuple[str, str, int, int]],
    namespace: str,
) -> ClusterError:
    """The refusal of an attach that would cut `cuts` on cluster
    `follower_id`: every partition and range, and the committed offsets
    (group, follower topic, partition, offset) past each cut."""
    at = {(c.topic, c.partition): c.truncate_to for c in cuts}
    past = [
        f"{group} {topic}-{p} at {offset} (cut to {at[(topic, p)]})"
        for group, topic, p, offset in sorted(committed)
        if (topic, p) in at and offset > at[(topic, p)]
    ]
    total = sum(c.records for c in cuts)
    reopened = sum(len(c.reopened) for c in cuts)
    undone: list[str] = []
    if total:
        undone.append(
            f"cut {total} acknowledged records that clients of {follower_id!r} wrote and "
            f"{leader_id!r} does not hold"
        )
    if reopened:
        undone.append(
            f"reopen {reopened} transaction(s) {follower_id!r} decided itself (their outcome "
            "may change, and a read_committed reader that passed them aborted would miss them)"
        )
    return ClusterError(
        ErrorCode.DIVERGED_LOG,
        f"link {link_name!r}",
        f"link {link_name!r}: attach refused, nothing changed: following {leader_id!r} would "
        + " and ".join(undone)
        + ": " + "; ".join(c.describe() for c in cuts) + "; "
        + (
            "committed offsets past the cut: " + "; ".join(past)
            if past
            else "no committed offset lies past the cut"
        )
        + f". To keep them, leave the namespace detached (or copy them elsewhere first); to "
        f"discard them, run on {follower_id!r} `ccr-admin recover --link {link_name} "
        f"--namespace {namespace}`, which reports this cut, then again with --confirm",
    )


def check_attach_cuts(
    state: ClusterState,
    config: LinkConfig,
    mapping: Mapping,
    remote_id: str,
    remote: RemotePartitions,
    remote_groups: RemoteGroupOffsets,
) -> ClusterError | None:
    """An operator's attach of a topic namespace, against the remote's
    partitions under its prefix (and, when the remote will follow, the
    committed offsets of all its groups): the refusal to give when following
    would cut acknowledged records the follower's own clients wrote
    (`own_writes_cut`), else None. Only partitions both sides hold count;
    a topic a longer attached mapping of the link owns is that mapping's."""
    longer = [
        x.local_prefix
        for x in config.attached_mappings()
        if x.resource_type == MappingType.TOPIC and len(x.local_prefix) > len(mapping.local_prefix)
    ]
    local_follows = mapping.leader == Leader.REMOTE
    cuts: list[OwnWritesCut] = []
    for (remote_topic, p), theirs in sorted(remote.items()):
        if not in_prefix(remote_topic, mapping.remote_prefix):
            continue
        topic = map_name(remote_topic, mapping.remote_prefix, mapping.local_prefix)
        if any(in_prefix(topic, x) for x in longer):
            continue
        if topic not in state.topics or p >= len(state.topics[topic].partitions):
            continue
        mine = with_marks_of(state, topic, p, local_side(state, topic, p), theirs)
        if local_follows:
            log = None if state.faults.undid(42) else state.partition(topic, p)
            cut = own_writes_cut(topic, p, mine, theirs, log)
        else:
            cut = own_writes_cut(remote_topic, p, theirs, mine)
        if cut is not None:
            cuts.append(cut)
    if not cuts:
        return None
    if local_follows:
        committed = committed_in(state, "")
        follower_id, leader_id = state.cluster_id, remote_id
        namespace = f"{mapping.local_prefix}:{mapping.remote_prefix}"
    else:
        committed = [(g, t, p, o) for (g, t, p), o in remote_groups.items()]
        follower_id, leader_id = remote_id, state.cluster_id
        namespace = f"{mapping.remote_prefix}:{mapping.local_prefix}"
    return attach_cut_refusal(config.name, follower_id, leader_id, cuts, committed, namespace)


# -- the cluster's view -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionHistory:
    """One partition's offsets, leader epoch history and provenance history
    (each entry with the name of its link here, "" when it no longer exists)."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    leader_epoch: int
    epoch_history: tuple[tuple[int, int], ...]  # (epoch, start offset)
    provenance: tuple[tuple[ProvenanceItem, str], ...]


def partition_histories(state: ClusterState, topic: str) -> list[PartitionHistory]:
    """Every partition of `topic`: offsets, leader epoch history and
    provenance history (entries in order)."""
    t = state.topic(topic)
    return [
        PartitionHistory(
            p,
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
            log.leader_epoch,
            tuple((e, s) for e, s in log.epoch_history),
            tuple(
                (item, link_name_of(state, item.link_id)) for item in t.provenance.get(p, [])
            ),
        )
        for p, log in enumerate(t.partitions)
    ]


def link_name_of(state: ClusterState, link_id: str) -> str:
    for name, config in sorted(state.links.configs.items()):
        if config.link_id == link_id:
            return name
    return ""


def namespace_partitions(state: ClusterState, prefix: str) -> list[tuple[str, int]]:
    """(topic, partition) of every topic in a topic namespace, sorted."""
    return [
        (name, p)
        for name in sorted(state.topics)
        if in_prefix(name, prefix)
        for p in range(len(state.topics[name].partitions))
    ]


def committed_in(state: ClusterState, group_prefix: str) -> list[tuple[str, str, int, int]]:
    """(group, topic, partition, offset) of every group in a group namespace."""
    out: list[tuple[str, str, int, int]] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not in_prefix(group_id, group_prefix):
            continue
        for (topic, partition), c in sorted(state.groups.committed(group_id, None).items()):
            out.append((group_id, topic, partition, c.offset))
    return out


# -- which namespaces ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveryMapping:
    """A namespace mapping recovery works on; after confirm it is attached
    with the remote leading."""

    resource_type: str  # "topic" | "group"
    local_prefix: str
    remote_prefix: str

    def to_dict(self) -> dict[str, object]:
        return {
            "type": self.resource_type,
            "local_prefix": self.local_prefix,
            "remote_prefix": self.remote_prefix,
            "leader": "remote",
        }


def select_mappings(
    state: ClusterState,
    config: LinkConfig,
    requested: list[tuple[str, str, str | None]],
) -> list[RecoveryMapping]:
    """The mappings named (type, local prefix, remote prefix or None), or by
    default every topic and group mapping of the link, attached or not.
    Refuses unknown types, bad prefixes, and namespaces that follow another
    link (they could not follow this one)."""

    chosen: list[RecoveryMapping] = []
    if requested:
        for rtype, local, remote in requested:
            kind = ResourceType.parse(rtype)
            if kind not in (ResourceType.TOPIC, ResourceType.GROUP):
                raise ClusterError(
                    ErrorCode.INVALID_REQUEST,
                    f"link {config.name!r}",
                    f"link {config.name!r}: recovery covers topic and group namespaces, "
                    f"not {kind.label}",
                )
            validate_prefix(kind, local)
            existing = _current_by_local(config).get((kind.label, local))
            if remote is None:
                remote = existing.remote_prefix if existing is not None else local
            validate_prefix(kind, remote)
            chosen.append(RecoveryMapping(kind.label, local, remote))
    else:
        for (rtype, local), current in sorted(_current_by_local(config).items()):
            if rtype in (MappingType.TOPIC, MappingType.GROUP):
                chosen.append(RecoveryMapping(rtype, local, current.remote_prefix))
    if not chosen:
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"link {config.name!r}",
            f"link {config.name!r} has no topic or group namespace mappings to recover; name "
            "the namespaces (ccr-admin recover --namespace PREFIX)",
        )
    unique = list(dict.fromkeys(chosen))
    for m in unique:
        kind = ResourceType.parse(m.resource_type)
        ns = state.namespaces.find(kind, m.local_prefix)
        if ns is None:
            continue
        for candidate in [ns, *state.namespaces.overlapping(ns)]:
            following = candidate.follower_link
            if following is not None and following != config.name:
                raise ClusterError(
                    ErrorCode.ALREADY_FOLLOWING,
                    ns.name,
                    f"cannot recover {ns.name} from link {config.name!r}: "
                    f"{'it' if candidate is ns else 'the overlapping ' + candidate.name} "
                    f"follows link {following!r}; detach it from that link first",
                )
    return unique


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCut:
    group: str
    topic: str
    partition: int
    committed_offset: int
    new_offset: int  # -1: removed (the new leader has none)
    reason: str = "cut"  # "cut" | "leader" (see RemoteGroupOffsets)

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "committed_offset": self.committed_offset,
            "new_offset": self.new_offset,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    link: str
    local_cluster_id: str
    remote_cluster_id: str
    mappings: tuple[RecoveryMapping, ...]
    partitions: tuple[PartitionRow, ...]
    groups: tuple[GroupCut, ...]
    confirmed: bool = False
    notes: tuple[str, ...] = field(default=())
    # A confirmed recovery's durable plan steps (linkd/core/plans.py), each
    # with what it did here and on the remote; a re-run lists the steps done
    # before it first, and its partitions and groups are the cut those made.
    steps: tuple[PlanStep, ...] = ()
    # The step a re-run took the journalled plan up at ("": planned now).
    resumed_from: str = ""

    @property
    def local_records_lost(self) -> int:
        return sum(r.local_records_lost for r in self.partitions)

    @property
    def remote_records_lost(self) -> int:
        return sum(r.remote_records_lost for r in self.partitions)

    @property
    def diverged_partitions(self) -> int:
        return sum(1 for r in self.partitions if r.diverged)

    def to_dict(self) -> dict[str, object]:
        return {
            "link": self.link,
            "local_cluster_id": self.local_cluster_id,
            "remote_cluster_id": self.remote_cluster_id,
            "confirmed": self.confirmed,
            "mappings": [m.to_dict() for m in self.mappings],
            "partitions": [r.to_dict() for r in self.partitions],
            "groups": [g.to_dict() for g in self.groups],
            "notes": list(self.notes),
            "totals": {
                "partitions": len(self.partitions),
                "diverged_partitions": self.diverged_partitions,
                "local_records_lost": self.local_records_lost,
                "remote_records_lost": self.remote_records_lost,
                "groups_affected": len({g.group for g in self.groups}),
                "offsets_moved": len(self.groups),
            },
            "steps": [st.to_json() for st in self.steps],
            "resumed_from": self.resumed_from,
        }

    @staticmethod
    def from_dict(obj: dict[str, object]) -> RecoveryPlan:
        """The cut as `to_dict` gave it (a journalled plan's detail)."""
        rows = [
            {k: v for k, v in jr.json_object(r).items() if k not in ("diverged", "reopened")}
            for r in jr.json_list(obj["partitions"])
        ]
        reopened = [
            tuple(
                jr.json_fields(ReopenedTxn, t)
                for t in jr.json_list(jr.json_object(r).get("reopened", []))
            )
            for r in jr.json_list(obj["partitions"])
        ]
        return RecoveryPlan(
            str(obj["link"]),
            str(obj["local_cluster_id"]),
            str(obj["remote_cluster_id"]),
            tuple(
                RecoveryMapping(str(m["type"]), str(m["local_prefix"]), str(m["remote_prefix"]))
                for m in map(jr.json_object, jr.json_list(obj["mappings"]))
            ),
            tuple(
                replace(jr.json_fields(PartitionRow, r), reopened=txns)
                for r, txns in zip(rows, reopened, strict=True)
            ),
            tuple(jr.json_fields(GroupCut, g) for g in jr.json_list(obj["groups"])),
            bool(obj["confirmed"]),
            tuple(str(n) for n in jr.json_list(obj.get("notes", ()))),
        )


# Remote partitions: (remote topic, partition) -> what the remote said.
RemotePartitions = dict[tuple[str, int], PartitionSide]


# The remote's committed offsets of a group namespace: (remote group, remote
# topic, partition) -> offset.
RemoteGroupOffsets = dict[tuple[str, str, int], int]


def plan_recovery(
    state: ClusterState,
    link_name: str,
    mappings: list[RecoveryMapping],
    remote_cluster_id: str,
    remote: RemotePartitions,
    remote_groups: RemoteGroupOffsets | None = None,
) -> RecoveryPlan:
    """Compares every local partition of the mapped topic namespaces that the
    remote also has, and finds the committed offsets beyond each cut. Local
    partitions the remote lacks are left alone (the link never touches them).
    A group of a recovered group namespace whose committed offset here is
    above the new leader's (`remote_groups`) moves back to the leader's, and
    one the leader has none of is removed: once it follows, its offsets are
    the leader's, and replication never moves an offset back by itself
    (reason "leader"). Refuses a recovery that has nothing to do on a
    namespace that already follows the link."""
    config = state.links.get(link_name)
    if remote_cluster_id != config.remote_cluster_id:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {link_name!r}",
            f"link {link_name!r} names remote cluster {config.remote_cluster_id!r}, but "
            f"{config.value('remote_bootstrap')} is cluster {remote_cluster_id!r}",
        )
    rows: list[PartitionRow] = []
    rule = config.failback_reconciliation
    topic_maps = [m for m in mappings if m.resource_type == MappingType.TOPIC]
    for m in topic_maps:
        for topic, p in namespace_partitions(state, m.local_prefix):
            # The longest local prefix owns a topic, as the link's mappings do.
            owner = max(
                (x for x in topic_maps if in_prefix(topic, x.local_prefix)),
                key=lambda x: len(x.local_prefix),
            )
            if owner is not m:
                continue
            remote_topic = map_name(topic, m.local_prefix, m.remote_prefix)
            theirs = remote.get((remote_topic, p))
            if theirs is None:
                continue
            mine = with_marks_of(state, topic, p, local_side(state, topic, p), theirs)
            log = state.partition(topic, p)
            rows.append(plan_partition(topic, remote_topic, p, mine, theirs, log, rule))
    refuse_unrelated(rows, state.cluster_id, remote_cluster_id, state.faults)
    cuts = {(r.topic, r.partition): r.truncate_to for r in rows if r.diverged}
    leader_offsets = _leader_offsets(state, mappings, remote_groups or {})
    groups: list[GroupCut] = []
    for group_id, _s, _t in sorted(state.groups.list_groups()):
        for (topic, partition), c in sorted(state.groups.committed(group_id, None).items()):
            cut = cuts.get((topic, partition))
            key = (group_id, topic, partition)
            leader = leader_offsets.get(key, -1)
            if key in leader_offsets and leader < 0:
                groups.append(GroupCut(group_id, topic, partition, c.offset, -1, "leader"))
            elif cut is not None and c.offset > cut and (leader < 0 or cut <= leader):
                groups.append(GroupCut(group_id, topic, partition, c.offset, cut))
            elif leader >= 0 and c.offset > leader:
                # Never past this side's log (after the cut): the leader's
                # offset replicates later, once the records it points at do.
                end = _local_end(state, topic, partition, cut)
                moved = min(leader, end) if end >= 0 else -1
                groups.append(GroupCut(group_id, topic, partition, c.offset, moved, "leader"))
    if not any(r.diverged for r in rows) and _already_following(config, mappings):
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"link {link_name!r}",
            f"nothing to recover on link {link_name!r}: its namespaces already follow "
            f"{config.remote_cluster_id!r} and no partition diverged (the link truncates "
            "after an unclean election by itself)",
        )
    return RecoveryPlan(
        link_name,
        state.cluster_id,
        remote_cluster_id,
        tuple(mappings),
        tuple(rows),
        tuple(groups),
    )


def _leader_offsets(
    state: ClusterState, mappings: list[RecoveryMapping], remote_groups: RemoteGroupOffsets
) -> dict[tuple[str, str, int], int]:
    """The new leader's committed offsets under this side's names, for the
    groups of the recovered group namespaces (on topics of the recovered topic
    namespaces); -1 where it has none."""
    topic_maps = [m for m in mappings if m.resource_type == MappingType.TOPIC]
    out: dict[tuple[str, str, int], int] = {}
    for m in (m for m in mappings if m.resource_type == MappingType.GROUP):
        for group, topic, p, _offset in committed_in(state, m.local_prefix):
            remote_topic = remote_topic_of(topic, topic_maps)
            if remote_topic is None:
                continue
            remote_group = map_name(group, m.local_prefix, m.remote_prefix)
            out[(group, topic, p)] = remote_groups.get((remote_group, remote_topic, p), -1)
    return out


def refuse_unrelated(
    rows: list[PartitionRow], local_id: str, remote_id: str, faults: Faults
) -> None:
    """A topic whose partitions share no record with the remote's and whose
    provenance does not relate them looks like another topic of the same name:
    cutting its records would be a guess (NO_SHARED_HISTORY, nothing changed)."""
    by_topic: dict[str, list[PartitionRow]] = {}
    for row in rows:
        by_topic.setdefault(row.topic, []).append(row)
    for topic, parts in sorted(by_topic.items()):
        if faults.undid(7) and any(r.common_offset == 0 and r.diverged for r in parts):
            pass  # the old rule: an empty shared prefix counted as no shared history
        elif any(r.related for r in parts) or not any(r.diverged for r in parts):
            continue
        lost = sum(r.local_records_lost for r in parts)
        raise ClusterError(
            ErrorCode.NO_SHARED_HISTORY,
            f"topic {topic!r}",
            f"topic {topic!r} on {local_id!r} shares no record with {parts[0].remote_topic!r} on "
            f"{remote_id!r}, and neither's provenance names the other: they look like two "
            f"topics of one name, so recovery will not cut the {lost} records held here; "
            "nothing was changed. Leave this namespace out of the recovery, or recover in "
            "the other direction",
        )


def _already_following(config: LinkConfig, mappings: list[RecoveryMapping]) -> bool:
    return not mappings_to_follow(config, mappings)


def reserve_and_abort(
    state: ClusterState, mappings: list[RecoveryMapping], now_ms: int
) -> tuple[list[str], list[Effect]]:
    """Reserves this side's namespaces (creating them reserved when missing)
    and aborts the open transactions touching their topics (markers written,
    producers fenced). Returns (aborted transactional ids, effects)."""

    records: list[jr.JournalRecord] = []
    for m in mappings:
        kind = ResourceType.parse(m.resource_type)
        if state.namespaces.find(kind, m.local_prefix) is None:
            records += state.namespaces.create(kind, m.local_prefix, True)
        else:
            records += state.namespaces.set_reserved(kind, m.local_prefix, True)
    effects: list[Effect] = [Journal(tuple(records))] if records else []
    prefixes = [m.local_prefix for m in mappings if m.resource_type == MappingType.TOPIC]
    aborted, more = state.abort_transactions_in(prefixes, now_ms)
    return aborted, effects + more


def apply_recovery(
    state: ClusterState, plan: RecoveryPlan, link_id: str, now_ms: int
) -> list[Effect]:
    """Truncates every diverged partition to its cut (noting it in the
    provenance history) and moves the reported committed offsets back."""

    effects: list[Effect] = []
    records: list[jr.JournalRecord] = []
    runtime = state.links.runtime.get(link_name_of(state, link_id))
    if state.faults.undid(44):
        runtime = None
    for row in plan.partitions:
        if not row.diverged:
            continue
        key = (row.topic, row.partition)
        if runtime is not None and key in runtime.own_writes_held:
            # Held uncut until a recover cuts it: cut now, so no longer held
            # (its next round follows; its describe-link row stops saying so).
            del runtime.own_writes_held[key]
            runtime.refused.pop(key, None)
        topic = state.topic(row.topic)
        log = state.partition(row.topic, row.partition)
        removed = log.log_end_offset - row.truncate_to
        # The plan was made of this very log (a re-run re-plans): its cut
        # lies within it and removes what the answer reports.
        assert log.log_start_offset <= row.truncate_to <= log.log_end_offset, (row, log.name)
        assert removed == row.local_records_lost, (row, log.log_end_offset)
        log.truncate_to(row.truncate_to)
        effects.append(TruncateLog(topic.topic_id, row.partition, row.truncate_to))
        records.append(state.cut_epochs(row.topic, row.partition, row.truncate_to))
        cut_entry = ProvenanceItem.truncated(
            row.truncate_to, link_id, removed, at_ms=now_ms
        ).journal_record(row.topic, row.partition)
        state.apply_record(cut_entry)
        # The log ends where the plan cut it, and its history says so.
        check_history(topic.provenance[row.partition], row.topic, row.partition, log.log_end_offset)
        records.append(cut_entry)
    for cut in plan.groups:
        current = state.groups.committed(cut.group, [(cut.topic, cut.partition)])
        old = current.get((cut.topic, cut.partition))
        if cut.new_offset < 0:
            removal = jr.OffsetDelete(cut.group, cut.topic, cut.partition)
            state.apply_record(removal)
            records.append(removal)
            continue
        records.append(
            state.groups.set_committed(
                cut.group,
                cut.topic,
                cut.partition,
                cut.new_offset,
                old.metadata if old is not None else "",
                -1,
                now_ms,
            )
        )
    if records:
        effects.append(Journal(tuple(records)))
    return effects


# How many moved committed offsets the recovery's log line names one by one.
NOTED_OFFSETS_MAX = 20


def noted_offsets(plan: RecoveryPlan) -> tuple[GroupCut, ...]:
    """The committed offsets a confirmed recovery's log line names (the
    first `NOTED_OFFSETS_MAX` it moved): what reports them when its answer
    is lost (a crash, a call that timed out), as the provenance reports
    its cuts."""
    return plan.groups[:NOTED_OFFSETS_MAX]


def describe_offsets_moved(plan: RecoveryPlan) -> str:
    """The moved committed offsets for the log line: "group 'g' t-0 54 -> 5,
    group 'g' t-1 47 -> removed and 3 more" ("" when none moved)."""
    named = noted_offsets(plan)
    shown = ", ".join(
        f"group {g.group!r} {g.topic}-{g.partition} {g.committed_offset} -> "
        + ("removed" if g.new_offset < 0 else str(g.new_offset))
        for g in named
    )
    more = len(plan.groups) - len(named)
    return shown + (f" and {more} more" if more > 0 else "")


def _local_end(state: ClusterState, topic: str, partition: int, cut: int | None) -> int:
    """Where this side's partition ends once recovery has cut it (its HW,
    or the cut), or -1 when it has no such partition."""
    t = state.topics.get(topic)
    if t is None or partition >= len(t.partitions):
        return -1
    hw = t.partitions[partition].high_watermark
    return hw if cut is None else min(hw, cut)


def confirmed(plan: RecoveryPlan) -> RecoveryPlan:

    return replace(plan, confirmed=True)


def _current_by_local(config: LinkConfig) -> dict[tuple[str, str], Mapping]:
    """Per (type, local prefix): its attached mapping, else its newest entry."""
    out: dict[tuple[str, str], Mapping] = {}
    for m in sorted(config.mappings.values(), key=lambda x: (x.attached, x.version)):
        out[(m.resource_type, m.local_prefix)] = m
    return out


def mappings_to_follow(
    config: LinkConfig, mappings: list[RecoveryMapping]
) -> list[tuple[RecoveryMapping, bool]]:
    """Recovery's last step: every recovered mapping ends attached with the
    remote leading under its remote prefix. Returns the mappings not already
    so, each with whether its current attachment must be detached first."""
    out: list[tuple[RecoveryMapping, bool]] = []
    for m in mappings:
        current = config.attached_at(m.resource_type, m.local_prefix)
        attached = current is not None
        if (
            current is not None
            and attached
            and (current.leader, current.remote_prefix) == ("remote", m.remote_prefix)
        ):
            continue
        out.append((m, attached))
    return out


def check_can_follow(
    state: ClusterState, link_name: str, mappings: list[RecoveryMapping], verb: str = "recover"
) -> None:
    """Before recovery (or a reversal) changes anything: every mapping can
    then be attached to follow the remote (the overlap rules, `link_admin`),
    else ClusterError naming the conflict, with nothing changed."""
    config = state.links.get(link_name)
    kept = {m.key: m for m in config.attached_mappings()}
    planned = []
    for m, detach_first in mappings_to_follow(config, mappings):
        if detach_first:
            current = config.attached_at(m.resource_type, m.local_prefix)
            if current is not None:
                kept.pop(current.key, None)
        planned.append(
            Mapping(
                MappingType(m.resource_type),
                m.local_prefix,
                m.remote_prefix,
                Leader.REMOTE,
                True,
                (0, 0, ""),
            )
        )
    for i, candidate in enumerate(planned):
        others = [*kept.values(), *planned[:i]]
        conflict = link_admin.mapping_conflict(state, link_name, candidate, others)
        if conflict is not None:
            raise ClusterError(
                conflict.code,
                f"link {link_name!r}",
                f"cannot {verb}: afterwards {candidate.resource_type} namespace "
                f"{candidate.local_prefix!r} would follow the remote, but {conflict.message}; "
                "nothing was changed",
            )


RemoteLineages = dict[tuple[str, str], tuple[LineageHop, ...]]
"""(type, local prefix) of a recovered mapping: the remote's lineage of its
namespace, as its description of it said (`PartitionsDescription.lineage`)."""


def check_no_ring(
    state: ClusterState,
    link_name: str,
    mappings: list[RecoveryMapping],
    remote_id: str,
    lineages: RemoteLineages,
) -> None:
    """Before recovery changes anything: following the remote must close no
    ring of follow relations (`lineage`), which the remote would refuse at
    the attach, after the cut, leaving this side reserved and following
    nothing. The remote's copy must not come, over any chain of links, from
    this cluster: else FOLLOW_CYCLE naming the ring, nothing changed (this
    side is then the origin: make the remote's source follow it, or detach
    the chain, before recovering)."""
    for m in mappings:
        hops = lineages.get((m.resource_type, m.local_prefix), ())
        candidate = Mapping(
            MappingType(m.resource_type), m.local_prefix, m.remote_prefix, Leader.REMOTE, True,
            (0, 0, ""),
        )  # fmt: skip
        found = lineage.ring_if_followed(state, remote_id, candidate, hops)
        if found is None:
            continue
        raise ClusterError(
            ErrorCode.FOLLOW_CYCLE,
            f"link {link_name!r}",
            f"cannot recover: {m.resource_type} namespace {m.local_prefix!r} would follow "
            f"{remote_id!r}, whose copy of {m.remote_prefix!r} comes from this cluster: a ring "
            f"of follow relations {lineage.render(found[0])} in which nobody could write it; "
            "nothing was changed",
        )


# -- reversal (spec section 8: make the follower the leader without loss) ---------------------


def reverse_mappings(state: ClusterState, link_name: str) -> tuple[str, list[RecoveryMapping]]:
    """Reversal's precondition, on the side that leads: the link must be
    FOLLOWING or IN_SYNC (else the remote cannot come to hold every record),
    and this side must lead a topic or group namespace on it. Returns (the
    link's state, the leader mappings to swap)."""
    config = state.links.get(link_name)
    link_state = state.links.state_name(link_name)
    if state.links.state_of(link_name) not in (LinkState.FOLLOWING, LinkState.IN_SYNC):
        raise ClusterError(
            ErrorCode.LINK_NOT_FOLLOWING,
            f"link {link_name!r}",
            f"cannot reverse link {link_name!r}: it is {link_state}; it must be FOLLOWING "
            "or IN_SYNC so that the remote can hold every record",
        )
    leaders = [
        RecoveryMapping(m.resource_type, m.local_prefix, m.remote_prefix)
        for m in config.attached_mappings()
        if m.local_role == Role.LEADER and m.resource_type in (MappingType.TOPIC, MappingType.GROUP)
    ]
    if not leaders:
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"link {link_name!r}",
            f"cannot reverse link {link_name!r}: cluster {state.cluster_id!r} leads no "
            "topic or group namespace on it (run reverse on the leader; a reversal that "
            f"{config.remote_cluster_id!r} started and a crash cut short is finished by "
            f"running reverse again on {config.remote_cluster_id!r}, where describe-link "
            "shows its plan)",
        )
    return link_state, leaders


@dataclass(frozen=True, slots=True)
class RemoteCopy:
    """What the remote holds of one namespace, as its describe answers."""

    mapping: RecoveryMapping
    # (remote topic, partition) -> (log end offset, high watermark)
    partitions: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # (remote group, remote topic, partition) -> committed offset
    group_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)


def reverse_missing(state: ClusterState, remote: list[RemoteCopy]) -> tuple[int, list[str]]:
    """Reversal waits until this is empty: every partition of the leader
    topic namespaces is held by the remote up to this side's log end, below
    its high watermark, and every committed offset of the leader group
    namespaces (on a mapped topic) is there too. Returns (partitions
    checked, what is still missing, one line each)."""
    topics = [r.mapping for r in remote if r.mapping.resource_type == MappingType.TOPIC]
    missing: list[str] = []
    total = 0
    for copy in remote:
        m = copy.mapping
        if m.resource_type == MappingType.TOPIC:
            for topic, p in namespace_partitions(state, m.local_prefix):
                leo = state.partition(topic, p).log_end_offset
                total += 1
                remote_topic = map_name(topic, m.local_prefix, m.remote_prefix)
                leo_there, hw_there = copy.partitions.get((remote_topic, p), (0, 0))
                have = min(leo_there, hw_there)
                if have < leo:
                    missing.append(f"{remote_topic}-{p} at {have} of {leo}")
        else:
            for group, topic, p, offset in committed_in(state, m.local_prefix):
                remote_group = map_name(group, m.local_prefix, m.remote_prefix)
                mapped = remote_topic_of(topic, topics)
                if mapped is None:
                    continue  # the link replicates offsets of mapped topics only
                got = copy.group_offsets.get((remote_group, mapped, p), -1)
                if got < offset:
                    missing.append(f"group {remote_group} {mapped}-{p} at {got}")
    return total, missing


def remote_topic_of(topic: str, topics: list[RecoveryMapping]) -> str | None:
    """`topic`'s name on the remote under the longest matching topic mapping."""
    best = max(
        (m for m in topics if in_prefix(topic, m.local_prefix)),
        key=lambda m: len(m.local_prefix),
        default=None,
    )
    return None if best is None else map_name(topic, best.local_prefix, best.remote_prefix)


# -- promotion (reversal's last step, and failover) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Promotion:
    bumped: int  # partitions that started a new leader epoch
    effects: list[Effect]
    dangling: list[DanglingTxn]  # replicated transactions aborted


def promote_namespaces(
    state: ClusterState, link_name: str, namespaces: list[tuple[str, str]], now_ms: int
) -> Promotion:
    """Clears the reservation of namespaces this side now leads on the link
    (`link_admin.make_writable`: a new leader epoch on every partition of their
    topics, so records written from now on are told apart from any other
    history, and the replicated transactions no coordinator will finish
    aborted). Refuses a namespace that still follows a link."""
    state.links.get(link_name)
    checked = []
    for rtype, prefix in namespaces:
        kind = ResourceType.parse(rtype)
        ns = state.namespaces.get(kind, prefix)
        if ns.follower_link is not None:
            raise ClusterError(
                ErrorCode.NAMESPACE_ATTACHED,
                ns.name,
                f"cannot make {ns.name} writable: it still follows link {ns.follower_link!r}",
            )
        if not ns.reserved:
            continue  # promoted already (a reversal's plan run again): no new epoch
        checked.append((kind, prefix))
    effects: list[Effect] = []
    dangling: list[DanglingTxn] = []
    bumped = 0
    for kind, prefix in checked:
        writable = link_admin.make_writable(state, kind, prefix, now_ms)
        bumped += writable.epochs_started
        effects += writable.effects
        dangling += writable.dangling
    return Promotion(bumped, effects, dangling)


__all__ = [
    "GroupCut",
    "PartitionRow",
    "RecoveryMapping",
    "RecoveryPlan",
    "RemoteCopy",
    "apply_recovery",
    "mappings_to_follow",
    "plan_partition",
    "plan_recovery",
    "refuse_unrelated",
    "remote_topic_of",
    "reverse_mappings",
    "reverse_missing",
    "select_mappings",
]
