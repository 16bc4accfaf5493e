"""Link administration: which mappings a link may carry, and what attaching,
detaching, deleting, failing over and reserving do to one cluster.

Rules (spec sections 2-4 and 8):
- Mappings of one link, of one resource type, never overlap: neither their
  local prefixes nor their remote prefixes (so no name is both led and
  followed on one link, no source name maps to two follower names, and no two
  source names map to one follower name). Across links, a namespace follows
  at most one link: no two follower attachments of a cluster overlap
  (ALREADY_FOLLOWING), and no name is followed from a cluster over one link
  and led to the same cluster over another (the two copies would copy each
  other, and nobody could write the topic). An operator's attach that would
  break this is refused with an error naming both namespaces
  (MAPPINGS_OVERLAP), nothing changed.
- A mapping the remote proposes in an operator's call (`strict` keys) is
  refused the same way. A mapping that arrives by convergence (the two sides
  changed things apart, during a partition) and cannot be honoured here is
  not left half attached: this side detaches it with a newer version and a
  note saying why (`refuse_unattachable`), so both sides converge on the
  refusal and both show it. Of two mappings that conflict, the one attached
  earlier (older version) stays.
- Setting a namespace's reservation (by an operator, or by attaching it as a
  follower) aborts the open transactions touching it. Clearing it, on a topic
  namespace that follows no link, starts a new leader epoch on its partitions
  and aborts the transactions replicated into them that no coordinator will
  finish (they would hold read_committed readers back for ever).
- Failover needs `force` unless the link is FOLLOWING or IN_SYNC and no
  follower partition lags. Its answer lists every partition made writable with
  the last known source high watermark and when it was learned; the
  partitions that may lose records are `abandoned`. A lag is known only while
  the link is connected and has finished a fetch round since: a DISCONNECTED
  link's lag is unknown, never 0.

Every function returns effects (journal records and the markers of aborted
transactions) for the shell to carry out; a refusal raises ClusterError with
nothing changed. Pure code: time arrives as `now_ms`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace

from linkd.core import journal as jr
from linkd.core import lineage
from linkd.core import metadata_sync as msync
from linkd.core.cluster import ClusterState, DanglingTxn
from linkd.core.effects import Effect, journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.links import (
    FailoverTruncation,
    Leader,
    LineageHop,
    LinkConfig,
    LinkError,
    LinkState,
    Mapping,
    MappingKey,
    MappingType,
    Role,
    in_prefix,
)
from linkd.core.namespaces import ResourceType, validate_prefix
from linkd.core.partition import PartitionLog
from linkd.core.plans import PlanStep
from linkd.core.provenance import Gap
from linkd.core.replication import (
    cut_replica,
    detach_provenance,
    follower_mappings,
    gaps_of,
    provenance_summary,
    start_new_epochs,
)

ROLES = ("leader", "follower")


# -- the overlap rules -----------------------------------------------------------------------


def overlaps(a: str, b: str) -> bool:
    """Spec section 2: one prefix is a prefix of the other ("" overlaps all)."""
    return a.startswith(b) or b.startswith(a)


def _name(m: Mapping) -> str:
    return f"{m.resource_type} namespace {m.local_prefix!r} ({m.local_role})"


@dataclass(frozen=True, slots=True)
class Conflict:
    code: ErrorCode
    message: str  # names both namespaces
    # With a mapping of another link: one attached before stays attached.
    cross_link: bool = False


def mapping_conflict(
    state: ClusterState, link_name: str, candidate: Mapping, others: Iterable[Mapping]
) -> Conflict | None:
    """Why `candidate` cannot be attached to the link beside the attached
    mappings `others` of the same link (module rules), or None."""
    for o in others:
        if o.key == candidate.key or o.resource_type != candidate.resource_type:
            continue
        if state.faults.undid(5):
            break  # the old rules: overlaps on one link went unchecked
        if overlaps(candidate.local_prefix, o.local_prefix):
            if candidate.local_role == o.local_role == Role.FOLLOWER:
                why = "two source names could map to one follower name"
            elif candidate.local_role == o.local_role:
                why = "a name would be led twice over the link"
            else:
                why = "one link may not lead and follow overlapping names"
            return Conflict(
                ErrorCode.MAPPINGS_OVERLAP,
                f"{_name(candidate)} overlaps {_name(o)} on link {link_name!r}: {why}",
            )
        if overlaps(candidate.remote_prefix, o.remote_prefix):
            return Conflict(
                ErrorCode.MAPPINGS_OVERLAP,
                f"{_name(candidate)} maps to remote prefix {candidate.remote_prefix!r}, which "
                f"overlaps remote prefix {o.remote_prefix!r} of {_name(o)} on link "
                f"{link_name!r}: one name on the remote would belong to both mappings",
            )
    if candidate.local_role == Role.FOLLOWER:
        kind = ResourceType.parse(candidate.resource_type)
        for ns in state.namespaces.list(kind):
            following = ns.follower_link
            if (
                following is not None
                and following != link_name
                and overlaps(ns.prefix, candidate.local_prefix)
            ):
                via = "it" if ns.prefix == candidate.local_prefix else f"the overlapping {ns.name}"
                return Conflict(
                    ErrorCode.ALREADY_FOLLOWING,
                    f"{candidate.resource_type} namespace {candidate.local_prefix!r} cannot "
                    f"follow link {link_name!r}: {via} already follows link {following!r}",
                    cross_link=True,
                )
    return _loop_conflict(state, link_name, candidate) or _plan_conflict(
        state, link_name, candidate
    )


def _plan_conflict(state: ClusterState, link_name: str, candidate: Mapping) -> Conflict | None:
    """A namespace that an unfinished procedure of another link of this
    cluster moves (linkd/core/plans.py: a reversal, failover or recovery cut
    short): attached elsewhere meanwhile, it could stop the procedure from
    finishing (a reversal's swapped mapping would overlap it) and leave the
    namespace writable nowhere."""
    for plan in sorted(state.plans.plans.values(), key=lambda p: p.link):
        if plan.link == link_name:
            continue
        for ns in plan.namespaces:
            if ns.resource_type == candidate.resource_type and overlaps(
                ns.local_prefix, candidate.local_prefix
            ):
                return Conflict(
                    ErrorCode.PROCEDURE_IN_PROGRESS,
                    f"{_name(candidate)} on link {link_name!r} overlaps {ns.resource_type} "
                    f"namespace {ns.local_prefix!r}, which the unfinished {plan.procedure} of "
                    f"link {plan.link!r} (begun {plan.begun}) moves: run "
                    f"{plan.procedure} on link {plan.link!r} again to finish it first",
                    cross_link=True,
                )
    return None


def _loop_conflict(state: ClusterState, link_name: str, candidate: Mapping) -> Conflict | None:
    """A name this cluster follows from a cluster over one link and leads to
    the same cluster over another: each side would copy the other's copy, and
    nobody could write the topic (module rules)."""
    remote = state.links.get(link_name).remote_cluster_id
    for name in sorted(state.links.configs):
        other = state.links.configs[name]
        if name == link_name or other.remote_cluster_id != remote:
            continue
        for o in other.attached_mappings():
            if (
                o.resource_type == candidate.resource_type
                and o.local_role != candidate.local_role
                and overlaps(o.local_prefix, candidate.local_prefix)
            ):
                return Conflict(
                    ErrorCode.MAPPINGS_OVERLAP,
                    f"{_name(candidate)} on link {link_name!r} overlaps {_name(o)} on link "
                    f"{name!r}, both with cluster {remote!r}: records would flow back to the "
                    "cluster they came from",
                    cross_link=True,
                )
    return None


def check_attach(
    state: ClusterState,
    link_name: str,
    resource_type: str,
    local_prefix: str,
    remote_prefix: str,
    leader: str,
) -> Mapping:
    """Every local check of an operator's attach, changing nothing; returns
    the mapping (unversioned)."""
    config = state.links.get(link_name)
    if leader not in (Leader.LOCAL, Leader.REMOTE):
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {link_name!r}",
            f"link {link_name!r}: leader must be 'local' or 'remote', not {leader!r}",
        )
    kind = ResourceType.parse(resource_type)
    validate_prefix(kind, remote_prefix)
    ns = state.namespaces.get(kind, local_prefix)
    current = config.attached_at(kind.label, local_prefix)
    if current is not None:
        if (current.remote_prefix, current.leader) == (remote_prefix, leader):
            return current
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {link_name!r}",
            f"link {link_name!r}: {ns.name} is already attached (to remote "
            f"prefix {current.remote_prefix!r}, leader {current.leader}); "
            "detach it first",
        )
    mapping = Mapping(
        MappingType(kind.label), local_prefix, remote_prefix, Leader(leader), True, (0, 0, "")
    )
    conflict = mapping_conflict(state, link_name, mapping, config.attached_mappings())
    if conflict is None:
        conflict = ring_conflict(state, link_name, mapping, received=None)
    if conflict is not None:
        raise ClusterError(conflict.code, ns.name, f"cannot attach: {conflict.message}")
    return mapping


def ring_conflict(
    state: ClusterState,
    link_name: str,
    candidate: Mapping,
    received: tuple[LineageHop, ...] | None,
) -> Conflict | None:
    """An operator's attach (here, or proposed by the remote) that would
    close a ring of follow relations (`lineage`): this side would lead the
    namespace to a cluster it comes from, or follow a source whose lineage
    names this cluster (`received`: the lineage the proposing remote sent for
    it; None: as the remote's last view said)."""
    remote = state.links.get(link_name).remote_cluster_id
    if candidate.local_role is Role.LEADER:
        ring = lineage.ring_if_led(state, remote, candidate, link_name)
    else:
        hops = received if received is not None else lineage.received(
            state, link_name, candidate.key
        )
        found = lineage.ring_if_followed(state, remote, candidate, hops)
        ring = found[0] if found is not None else None
    if ring is None:
        return None
    return Conflict(
        ErrorCode.FOLLOW_CYCLE,
        f"{_name(candidate)} on link {link_name!r} would close a ring of follow relations "
        f"{lineage.render(ring)}: every copy would follow a copy of itself and nobody "
        "could write it",
        cross_link=True,
    )


def _ring_closed(state: ClusterState, link_name: str, m: Mapping) -> Conflict | None:
    """An attached mapping that closes a ring (attaches made apart): as a
    follower, its source's lineage names this cluster; as a leader, it leads
    to a cluster in the namespace's lineage here. Refused here only if its
    attach is the ring's newest (`lineage` module rules)."""
    remote = state.links.get(link_name).remote_cluster_id
    if m.local_role is Role.LEADER:
        found = lineage.led_ring(state, remote, m, link_name)
    else:
        found = lineage.ring_if_followed(
            state, remote, m, lineage.received(state, link_name, m.key)
        )
    if found is None or not found[1]:
        return None
    return Conflict(
        ErrorCode.FOLLOW_CYCLE,
        f"{_name(m)} on link {link_name!r} closed a ring of follow relations "
        f"{lineage.render(found[0])} (the newest attach of the ring is refused)",
    )


def check_detach(
    state: ClusterState, link_name: str, resource_type: str, local_prefix: str
) -> Mapping:
    """The detached version of an attached mapping (unversioned), or a refusal."""
    config = state.links.get(link_name)
    kind = ResourceType.parse(resource_type)
    current = config.attached_at(kind.label, local_prefix)
    if current is None:
        raise ClusterError(
            ErrorCode.UNKNOWN_NAMESPACE,
            f"link {link_name!r}",
            f"link {link_name!r}: {kind.label} namespace {local_prefix!r} is not attached to it",
        )
    return replace(current, attached=False, note="")


# -- storing mappings ----------------------------------------------------------------------


def versioned(state: ClusterState, mapping: Mapping, now_ms: int) -> Mapping:
    """The mapping with a new version from this cluster's clock."""
    return replace(mapping, version=state.links.hlc.now(now_ms))


def put_mapping_settling(
    state: ClusterState, link_name: str, mapping: Mapping, now_ms: int
) -> tuple[list[Effect], list[DanglingTxn]]:
    """`put_mapping`, and the replicated transactions it aborted (a
    namespace that stops following: `abort_unfollowed`), for the warning
    that names them."""
    open_before = state.dangling_transactions([""])
    effects = put_mapping(state, link_name, mapping, now_ms)
    return effects, [d for d in open_before if not _still_open(state, d)]


def put_mapping(
    state: ClusterState, link_name: str, mapping: Mapping, now_ms: int
) -> list[Effect]:
    """Stores an attach or detach that already carries its version (see
    `versioned`) and brings the namespace attachments in line with it. A
    namespace this makes a follower is reserved, and its open transactions
    are aborted."""
    config = state.links.get(link_name)
    previous = config.mappings.get(mapping.key)
    records: list[jr.JournalRecord] = []
    if previous is not None and previous.attached and not mapping.attached:
        records += detach_provenance(state, config, previous)
    config.mappings[mapping.key] = mapping
    config.link_epoch += 1
    records += state.links.store(config, now_ms)
    return journal(records) + reconcile_attachments(state, link_name, now_ms)


def reconcile_attachments(state: ClusterState, link_name: str, now_ms: int) -> list[Effect]:
    """Makes the namespace table's attachments match the link's mappings. A
    mapping whose local namespace is missing creates it (a follower namespace
    must exist to be reserved). Every mapping left attached here can be
    honoured (`refuse_unattachable` ran first, or the attach was checked)."""
    config = state.links.configs.get(link_name)
    records: list[jr.JournalRecord] = []
    wanted: dict[tuple[str, str], str] = {}
    if config is not None:
        wanted = {
            (m.resource_type, m.local_prefix): m.local_role for m in config.attached_mappings()
        }
    stopped: list[str] = []  # topic namespaces that no longer follow this link
    for ns in state.namespaces.list():
        for link, role in list(ns.attachments):
            if link == link_name and (ns.type.label, ns.prefix) not in wanted:
                records += state.namespaces.detach(ns.type, ns.prefix, link_name)
                if role == Role.FOLLOWER and ns.type is ResourceType.TOPIC:
                    stopped.append(ns.prefix)
    newly_reserved: list[tuple[ResourceType, str]] = []
    newly_following: list[tuple[ResourceType, str]] = []
    for (rtype, prefix), role in sorted(wanted.items()):
        kind = ResourceType.parse(rtype)
        if state.namespaces.find(kind, prefix) is None:
            records += state.namespaces.create(kind, prefix, role == Role.FOLLOWER)
            if role == Role.FOLLOWER:
                newly_reserved.append((kind, prefix))
        ns = state.namespaces.get(kind, prefix)
        if (link_name, role) in ns.attachments:
            continue
        for link, other in list(ns.attachments):
            if link == link_name and other != role:
                records += state.namespaces.detach(kind, prefix, link_name)
                if other == Role.FOLLOWER and kind is ResourceType.TOPIC:
                    stopped.append(prefix)
        was_reserved = ns.reserved
        records += state.namespaces.attach(kind, prefix, link_name, role)
        if role == Role.FOLLOWER and not was_reserved:
            newly_reserved.append((kind, prefix))
        if role == Role.FOLLOWER:
            newly_following.append((kind, prefix))
    effects = journal(records)
    effects += abort_unfollowed(state, stopped, now_ms)
    for kind, prefix in newly_reserved:
        effects += _abort_reserved(state, kind, prefix, now_ms)[1]
    for kind, prefix in newly_following:
        if kind is ResourceType.GROUP:
            effects += journal(clamp_group_offsets(state, prefix))
    # Paired with the link's mappings: the namespaces attached to the link
    # are exactly those it maps, each in its role, a follower reserved.
    held = {
        (ns.type.label, ns.prefix): (role, ns.reserved)
        for ns in state.namespaces.list()
        for link, role in ns.attachments
        if link == link_name
    }
    assert held.keys() == wanted.keys() and all(
        role == wanted[key] and (reserved or role != Role.FOLLOWER)
        for key, (role, reserved) in held.items()
    ), f"link {link_name!r}: namespaces attached {held}, mappings {wanted}"
    return effects


def abort_unfollowed(state: ClusterState, prefixes: list[str], now_ms: int) -> list[Effect]:
    """Topic namespaces that stopped following a link (detached, the link
    deleted) and follow no other: the transactions replicated into them that
    no coordinator here owns will never learn their outcome, so they are
    aborted now, or read_committed readers would stall at them for ever
    (spec invariant 11). Should the namespace follow its source again, the
    markers are where the logs part (a reported cut)."""
    free = [
        p
        for p in dict.fromkeys(prefixes)
        if (ns := state.namespaces.find(ResourceType.TOPIC, p)) is not None
        and ns.follower_link is None
    ]
    effects: list[Effect] = []
    for p in free:
        only = _partitions_except(state, p, following_elsewhere(state, p))
        effects += state.abort_dangling_transactions([p], now_ms, only)[1]
    return effects


def clamp_group_offsets(state: ClusterState, group_prefix: str) -> list[jr.JournalRecord]:
    """A group namespace starts following a link: its groups' committed
    offsets become replicated offsets, which never point past the follower's
    data (spec invariant 6). One left above its partition's high watermark
    (committed here before the partition was cut) moves back to it."""
    records: list[jr.JournalRecord] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not in_prefix(group_id, group_prefix):
            continue
        for (topic, p), c in sorted(state.groups.committed(group_id, None).items()):
            t = state.topics.get(topic)
            if t is None or p >= len(t.partitions):
                continue
            hw = t.partitions[p].high_watermark
            if c.offset > hw:
                records.append(
                    state.groups.set_committed(
                        group_id, topic, p, hw, c.metadata, -1, c.commit_timestamp_ms
                    )
                )
    return records


def _abort_reserved(
    state: ClusterState, kind: ResourceType, prefix: str, now_ms: int
) -> tuple[list[str], list[Effect]]:
    """A namespace just became reserved: abort the open transactions touching it."""
    if state.faults.undid(3):
        return [], []  # the old rule: only `reverse` aborted them
    if kind is ResourceType.TOPIC:
        return state.abort_transactions_in([prefix], now_ms)
    if kind is ResourceType.GROUP:
        return state.abort_transactions_in([], now_ms, group_prefixes=[prefix])
    return [], []


@dataclass(slots=True)
class Accepted:
    """What merging the remote's view of a link did here: effects to carry
    out, and what an operator must see (info-level lines for the log)."""

    effects: list[Effect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def accept_remote_config(
    state: ClusterState,
    remote_view: LinkConfig,
    now_ms: int,
    strict: Iterable[MappingKey] = (),
    link_key: str = "",
) -> Accepted:
    """Merges the remote's view of a link (newest version of each field and
    mapping wins), records provenance for follower namespaces the merge
    detached, refuses what cannot be honoured (module rules) and reconciles
    the attachments. `strict`: keys (this side's) of mappings an operator is
    changing now; one of them that cannot be honoured refuses the whole call
    with ClusterError, nothing changed."""
    existing = state.links.configs.get(remote_view.name)
    before = {m.key: m for m in existing.attached_mappings()} if existing is not None else {}
    open_before = state.dangling_transactions([""])
    strict_keys = set(strict)
    if strict_keys:
        _check_strict(state, remote_view, strict_keys)
    records: list[jr.JournalRecord] = [
        *state.links.accept_mirror(remote_view, now_ms, link_key)
    ]
    config = state.links.get(remote_view.name)
    out = Accepted()
    still = {m.key: m for m in config.attached_mappings()}
    for key, mapping in before.items():
        now_mapping = still.get(key)
        if now_mapping is None or now_mapping.local_role != mapping.local_role:
            # Detached, or its direction swapped: the link's data ends here.
            records += detach_provenance(state, config, mapping)
            current = config.mappings.get(key)
            if current is not None and current.note:
                out.notes.append(f"link {config.name!r}: {_name(mapping)} detached: {current.note}")
    out.effects += journal(records)
    refused, effects = refuse_unattachable(
        state, config.name, now_ms, {(k, m.local_role) for k, m in before.items()}
    )
    out.effects += effects
    out.notes += [f"link {config.name!r}: {m.note}" for m in refused]
    out.effects += reconcile_attachments(state, config.name, now_ms)
    settled = [d for d in open_before if not _still_open(state, d)]
    if settled:
        out.notes.append(settled_note(config.name, settled))
    return out


def _check_strict(state: ClusterState, remote_view: LinkConfig, keys: set[MappingKey]) -> None:
    mine = remote_view.mirrored()
    existing = state.links.configs.get(remote_view.name)
    current = dict(existing.mappings) if existing is not None else {}
    for key in sorted(keys):
        proposed = mine.mappings.get(key)
        if proposed is None or not proposed.attached:
            continue
        old = current.get(key)
        if old is not None and old.version >= proposed.version:
            continue  # not newer: the merge keeps what is here
        others = [
            m
            for k, m in sorted(current.items())
            if k != key and m.attached and not _newer_detach(mine, k, m)
        ]
        conflict = mapping_conflict(state, remote_view.name, proposed, others)
        if conflict is None and state.links.configs.get(remote_view.name) is not None:
            conflict = ring_conflict(
                state, remote_view.name, proposed, mine.lineage.get(key, ())
            )
        if conflict is not None:
            raise ClusterError(
                conflict.code,
                f"{proposed.resource_type} namespace {proposed.local_prefix!r}",
                f"on cluster {state.cluster_id!r}: {conflict.message}",
            )


def _newer_detach(mine: LinkConfig, key: MappingKey, m: Mapping) -> bool:
    theirs = mine.mappings.get(key)
    return theirs is not None and not theirs.attached and theirs.version > m.version


def refuse_unattachable(
    state: ClusterState,
    link_name: str,
    now_ms: int,
    attached_before: set[tuple[MappingKey, str]],
) -> tuple[list[Mapping], list[Effect]]:
    """Detaches, with a newer version and a note, every attached mapping of
    the link that breaks the rules, the newer of two conflicting mappings
    first (oldest attach wins). A mapping attached here before in the same
    role (`attached_before`: key and role) conflicts with nothing already attached, so only
    mappings new from a merge are refused for a conflict with another link.
    Returns (the refused mappings as stored, effects)."""
    config = state.links.get(link_name)
    kept: list[Mapping] = []
    refused: list[Mapping] = []
    records: list[jr.JournalRecord] = []
    for m in sorted(config.attached_mappings(), key=lambda x: (x.version, x.key)):
        conflict = mapping_conflict(state, link_name, m, kept)
        if conflict is None:
            conflict = _ring_closed(state, link_name, m)
        before = (m.key, m.local_role) in attached_before
        if conflict is None or (before and conflict.cross_link):
            kept.append(m)
            continue
        if state.faults.undid(2):
            # The old merge: the follow check refused the whole handshake.
            raise ClusterError(conflict.code, f"link {link_name!r}", conflict.message)
        note = f"refused by cluster {state.cluster_id!r}: {conflict.message}"
        stored = replace(m, attached=False, note=note, version=state.links.hlc.now(now_ms))
        config.mappings[m.key] = stored
        refused.append(stored)
    if refused:
        config.link_epoch += 1
        records += state.links.store(config, now_ms)
    return refused, journal(records)


# -- deleting a link -------------------------------------------------------------------------


def delete_link(
    state: ClusterState, link_name: str, told: bool = False, now_ms: int = 0
) -> list[Effect]:
    """Detaches every namespace (followers stay reserved), then forgets the
    link, keeping its tombstone until the remote is `told` (spec section 3:
    both sides' configurations converge, deletion included)."""
    config = state.links.get(link_name)
    records: list[jr.JournalRecord] = []
    for mapping in config.attached_mappings():
        records += detach_provenance(state, config, mapping)
    stopped = []
    for ns in state.namespaces.list():
        if any(link == link_name for link, _ in ns.attachments):
            if (link_name, "follower") in ns.attachments and ns.type is ResourceType.TOPIC:
                stopped.append(ns.prefix)
            records += state.namespaces.detach(ns.type, ns.prefix, link_name)
    records += state.links.delete(link_name, told)
    # A procedure of the link cut short (a reversal, a recovery between its
    # cut and its follow-remote step) can no longer be finished: its plan
    # ends; what it reserved stays reserved (set-reserved clears it). Its
    # topic namespaces that follow nothing now will never hear how the
    # transactions its cut left open end (the markers were above the cut):
    # they are settled with the ones the link stopped copying.
    plan = state.plans.get(link_name)
    if plan is not None and not state.faults.undid(29):
        stopped += [n.local_prefix for n in plan.namespaces if n.resource_type == MappingType.TOPIC]
    records += state.plans.end(link_name)
    return journal(records) + abort_unfollowed(state, stopped, now_ms)


def delete_link_settling(
    state: ClusterState, link_name: str, told: bool, now_ms: int
) -> tuple[list[Effect], list[DanglingTxn]]:
    """`delete_link`, and the replicated transactions it aborted (those open
    before it and not after), for the log line that reports them."""
    open_before = state.dangling_transactions([""])
    effects = delete_link(state, link_name, told, now_ms)
    return effects, [d for d in open_before if not _still_open(state, d)]


def settled_note(link_name: str, dangling: list[DanglingTxn]) -> str:
    """The warning naming transactions a deletion aborted (its markers
    written here: no coordinator would ever end them)."""
    return (
        f"link {link_name!r}: aborted {len(dangling)} transactions left open in partitions "
        "that follow nothing now (no coordinator will end them): "
        + ", ".join(
            f"{d.topic}-{d.partition} producer {d.producer_id} from offset {d.first_offset}"
            for d in dangling
        )
    )


# -- reservations ------------------------------------------------------------------------------


@dataclass(slots=True)
class Reservation:
    effects: list[Effect]
    aborted: list[str]  # transactional ids aborted (reservation set)
    dangling: list[DanglingTxn]  # replicated transactions aborted (reservation cleared)
    epochs_started: int = 0


def set_reserved(
    state: ClusterState, resource_type: ResourceType | int, prefix: str, reserved: bool, now_ms: int
) -> Reservation:
    """An operator reserves a namespace or clears its reservation (module
    rules: setting it aborts open transactions; clearing it makes the
    namespace writable, `make_writable`)."""
    kind = ResourceType.parse(int(resource_type))
    ns = state.namespaces.get(kind, prefix)
    if not reserved:
        if not ns.reserved:
            return Reservation([], [], [])
        return make_writable(state, kind, prefix, now_ms)
    was = ns.reserved
    out = Reservation(journal(state.namespaces.set_reserved(kind, prefix, True)), [], [])
    if not was:
        out.aborted, more = _abort_reserved(state, kind, prefix, now_ms)
        out.effects += more
    return out


def make_writable(
    state: ClusterState, kind: ResourceType, prefix: str, now_ms: int
) -> Reservation:
    """Clears the namespace's reservation (refused while it follows a link);
    for a topic namespace, starts a new leader epoch on every partition (so
    what is written here from now on is told apart from the source's history)
    and aborts the dangling replicated transactions in it."""
    out = Reservation(journal(state.namespaces.set_reserved(kind, prefix, False)), [], [])
    if kind is ResourceType.TOPIC:
        # A topic of a nested namespace that follows a link is that link's.
        skip = following_elsewhere(state, prefix)
        epochs = start_new_epochs(state, prefix, skip)
        out.epochs_started = len(epochs)
        out.effects += journal(epochs)
        out.dangling, more = state.abort_dangling_transactions(
            [prefix], now_ms, _partitions_except(state, prefix, skip)
        )
        out.effects += more
    return out


def following_elsewhere(state: ClusterState, prefix: str) -> frozenset[str]:
    """Topics in a topic namespace that belong to a longer (nested) namespace
    following a link: the link writes them, not this namespace's changes."""
    nested = [
        ns.prefix
        for ns in state.namespaces.list(ResourceType.TOPIC)
        if ns.prefix != prefix and ns.prefix.startswith(prefix) and ns.follower_link is not None
    ]
    return frozenset(
        t for t in state.topics if in_prefix(t, prefix) and any(in_prefix(t, n) for n in nested)
    )


def _partitions_except(
    state: ClusterState, prefix: str, skip: frozenset[str]
) -> set[tuple[str, int]]:
    return {
        (t, p)
        for t, topic in state.topics.items()
        if in_prefix(t, prefix) and t not in skip
        for p in range(len(topic.partitions))
    }


# -- what describe-link shows ------------------------------------------------------------------


@dataclass(slots=True)
class PartitionLag:
    """One partition of a link, as describe-link and failover report it (the
    fields of ccr.v1.PartitionLag). Not frozen: a describe of a link builds
    one per partition, and a frozen dataclass costs about six times as much
    to build; nothing changes a row once it is made."""

    topic: str
    partition: int
    role: str
    lag_records: int  # -1: unknown
    lag_ms: int  # -1: unknown
    log_end_offset: int
    source_high_watermark: int  # -1: never learned
    provenance_entries: int
    provenance_start_offset: int
    provenance_source: str
    lag_known: bool
    source_hw_known_at_ms: int
    problem: str = ""  # why it is not copied (the source refused it)
    # Follower rows: what a consumer here can read (the partition's high
    # watermark); the lag counts from it. -1 on leader rows.
    high_watermark: int = -1
    # Follower rows whose lag is not known: since when (the time the source's
    # high watermark was last learned: what the source acknowledged after it
    # may be missing here); -1: never learned. 0 when the lag is known.
    unknown_since_ms: int = 0
    # A follower partition held uncut: its source asked for a cut that would
    # remove acknowledged records this cluster's own clients wrote, so it is
    # neither cut nor copied until `recover` (the problem says which).
    own_writes_held: bool = False


@dataclass(frozen=True, slots=True)
class GapRow:
    """A gap of a follower partition on the link: recorded in its provenance,
    or where it stopped (gap.policy stop) until resumed."""

    gap: Gap
    stopped: bool


@dataclass(frozen=True, slots=True)
class LinkSummary:
    config: LinkConfig
    state: str
    entered_at_ms: int
    history: tuple[tuple[str, int], ...]
    partitions: tuple[PartitionLag, ...]
    refused: tuple[Mapping, ...]  # detached with a note
    gaps: tuple[GapRow, ...] = ()
    last_error: LinkError | None = None  # the last failed call here (the side that dials)
    credential_problem: str = ""  # `LinkRuntime.credential_problem`


def link_gaps(state: ClusterState, name: str) -> list[GapRow]:
    """The link's gaps on this side: recorded ones (provenance), oldest first
    per partition, then the partitions stopped at one."""
    config = state.links.get(name)
    runtime = state.links.runtime[name]
    rows = [GapRow(g, False) for g in gaps_of(state, config.link_id)]
    rows += [GapRow(g, True) for _k, g in sorted(runtime.gap_stopped.items())]
    return rows


def lag_known(state: ClusterState, link_name: str, now_ms: int) -> bool:
    """A follower's lag is known only while the link is connected, has
    finished a fetch round lately, and no call of it failed since
    (`LinkTable.lag_known`, docs/operations.md "Failover")."""
    return state.links.lag_known(link_name, now_ms)


def unknown_since(known_at_ms: int, learned: bool) -> int:
    """A follower row's `unknown_since_ms` when its lag is not known: when
    its source's high watermark was last learned, -1 if never."""
    return known_at_ms if learned else -1


def link_summary(
    state: ClusterState, name: str, now_ms: int, *, leader_rows: bool = True
) -> LinkSummary:
    """What describe-link shows (`leader_rows=False`: without the rows of
    the partitions this side leads, for a reader that judges only the
    follower's)."""
    config = state.links.get(name)
    runtime = state.links.runtime[name]
    known = lag_known(state, name, now_ms)
    rows = []
    topics = state.topics
    readable_is_end = state.faults.undid(19)  # `readable_position`
    # (Without led rows, the fold, which holds only led rows, is left as it is.)
    every = runtime.partitions if leader_rows else runtime.rows
    items = [kv for kv in every.items() if leader_rows or kv[0][2] != Role.LEADER]
    # Follower partitions whose fetched records this cluster's storage
    # refused: the refusal is shown on the row.
    stored = {
        k: why for k, why in runtime.refused.items() if why.code is ErrorCode.STORAGE_REFUSED
    }
    for (topic, partition, role), p in sorted(items):
        # `replication.provenance_summary`, without a summary per row.
        t = topics.get(topic)
        entries = t.provenance.get(partition, ()) if t is not None else ()
        last = entries[-1] if entries else None
        prov_offset, prov_source = (-1, "") if last is None else (last.offset, last.source)
        if role == Role.LEADER:
            position = state.led_position(topic, partition)
            source_hw = p.source_high_watermark if position is None else position[1]
            lag = state.links.leader_lag(p)
            rows.append(
                PartitionLag(
                    topic,
                    partition,
                    role,
                    lag,
                    0 if lag == 0 else max(0, now_ms - p.hw_caught_up_ms),
                    p.log_end_offset,
                    source_hw,
                    len(entries),
                    prov_offset,
                    prov_source,
                    True,
                    now_ms,
                    _problem(p.refused),
                )
            )
            continue
        lag = p.lag_records()
        log = t.partitions[partition] if t is not None and partition < len(t.partitions) else None
        if log is None and t is not None:
            log = state.partition(topic, partition)  # raises: no such partition
        readable = (
            p.log_end_offset
            if log is None
            else log.log_end_offset if readable_is_end else log.high_watermark
        )
        rows.append(
            PartitionLag(
                topic,
                partition,
                role,
                lag if known else -1,
                (0 if lag == 0 else max(0, now_ms - p.caught_up_at_ms)) if known else -1,
                log.log_end_offset if log is not None else p.log_end_offset,
                p.source_high_watermark,
                len(entries),
                prov_offset,
                prov_source,
                known,
                p.known_at_ms,
                _problem(stored.get((topic, partition)) if stored else None),
                readable,
                0 if known else unknown_since(p.known_at_ms, True),
            )
        )
    rows += refused_rows(state, name)
    refused = tuple(
        m for _k, m in sorted(config.mappings.items()) if not m.attached and m.note
    )
    return LinkSummary(
        config,
        runtime.state.value,
        runtime.entered_at_ms,
        tuple(runtime.history),
        tuple(rows),
        refused,
        tuple(link_gaps(state, name)),
        runtime.last_error,
        runtime.credential_problem,
    )


DIVERGED_PROBLEM = (
    "DIVERGED: its log parted from the source's; finding where to cut (the source asked "
    "for the marks of its batches)"
)


def refused_rows(state: ClusterState, name: str) -> list[PartitionLag]:
    """Follower partitions the source refused, or whose log parted from the
    source's and is not cut yet: not copied, lag unknown."""
    rows = []
    runtime = state.links.runtime[name]
    problems = {
        key: _problem(why)
        for key, why in runtime.refused.items()
        if why.code is not ErrorCode.STORAGE_REFUSED or (*key, "follower") not in runtime.partitions
    }
    for key in runtime.marks_wanted:
        problems.setdefault(key, DIVERGED_PROBLEM)
    for (topic, partition), problem in sorted(problems.items()):
        t = state.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            continue
        prov = provenance_summary(state, topic, partition)
        rows.append(
            PartitionLag(
                topic,
                partition,
                "follower",
                -1,
                -1,
                t.partitions[partition].log_end_offset,
                -1,
                prov.entries,
                prov.start_offset,
                prov.source,
                False,
                0,
                problem,
                readable_position(t.partitions[partition], state.faults),
                -1,
                own_writes_held=(topic, partition) in runtime.own_writes_held,
            )
        )
    return rows + uncreated_rows(state, name)


def uncreated_rows(state: ClusterState, name: str) -> list[PartitionLag]:
    """The partitions of follower topics the source lists that this cluster's
    storage refused to create (`LinkRuntime.uncreated`): nothing held here,
    lag unknown, never learned; the problem names the refusal."""
    runtime = state.links.runtime[name]
    rows = []
    for topic, u in sorted(runtime.uncreated.items()):
        for p in range(u.partitions):
            row = PartitionLag(
                topic, p, "follower", -1, -1, 0, -1, 0, -1, "", False, 0,
                _problem(u.refusal), 0, -1,
            )  # fmt: skip
            rows.append(row)
    return rows


def follower_partitions(state: ClusterState, link_name: str, now_ms: int) -> list[PartitionLag]:
    """Every partition of every topic this cluster follows on the link, with
    what is known of its lag: the last source HW learned and when, and
    whether that is the lag now (`lag_known`). A row whose lag is known
    carries it (records below the source HW not held here); one whose lag
    is not known carries -1 in `lag_records` and `lag_ms`, and since when it
    is unknown (`unknown_since_ms`, -1: never learned). `source_high_watermark`
    and `log_end_offset` still say what was last learned: the source held at
    least their difference more than this cluster."""
    config = state.links.get(link_name)
    runtime = state.links.runtime[link_name]
    known = lag_known(state, link_name, now_ms)
    followed = follower_mappings(config, "topic")
    rows = []
    for topic in sorted(state.topics):
        owner = max(
            (m for m in followed if in_prefix(topic, m.local_prefix)),
            key=lambda m: len(m.local_prefix),
            default=None,
        )
        if owner is None:
            continue
        for p, log in enumerate(state.topics[topic].partitions):
            progress = runtime.partitions.get((topic, p, "follower"))
            prov = provenance_summary(state, topic, p)
            source_hw = progress.source_high_watermark if progress is not None else -1
            lag = max(0, source_hw - readable_position(log, state.faults))
            since = progress.caught_up_at_ms if progress is not None else now_ms
            known_at = progress.known_at_ms if progress is not None else 0
            row_known = known and progress is not None
            rows.append(
                PartitionLag(
                    topic,
                    p,
                    "follower",
                    lag if row_known else -1,
                    (0 if lag == 0 else max(0, now_ms - since)) if row_known else -1,
                    log.log_end_offset,
                    source_hw,
                    prov.entries,
                    prov.start_offset,
                    prov.source,
                    row_known,
                    known_at,
                    _problem(runtime.refused.get((topic, p))),
                    readable_position(log, state.faults),
                    0 if row_known else unknown_since(known_at, progress is not None),
                )
            )
    return rows


def readable_position(log: PartitionLog, faults: Faults) -> int:
    """A follower partition's position as every report gives it: what a
    consumer here can read (its high watermark), not what its log holds.
    Records held above it are not caught up: nobody can read them yet."""
    if faults.undid(19):
        return log.log_end_offset
    return log.high_watermark


def known_part(row: PartitionLag) -> int:
    """Records a follower row is known to lack at least: its lag when known,
    else what the last learned source HW held above what a consumer here can
    read (0 if never learned)."""
    if row.lag_known:
        return max(0, row.lag_records)
    position = row.high_watermark if row.high_watermark >= 0 else row.log_end_offset
    return max(0, row.source_high_watermark - position)


def _problem(refusal: ClusterError | None) -> str:
    return "" if refusal is None else f"{refusal.code.name}: {refusal.message}"


def follower_lag(state: ClusterState, link_name: str, now_ms: int) -> list[PartitionLag]:
    """The follower partitions with a known lag (records below the last
    known source HW not held here)."""
    return [r for r in follower_partitions(state, link_name, now_ms) if known_part(r) > 0]


# -- failover ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailoverCut:
    """A follower partition a failover cut at its last stable offset
    (failover.truncation last-stable-offset): the records of
    [truncate_to, truncate_to + removed) are gone here, those of the
    `transactions` replicated transactions still open among them."""

    topic: str
    partition: int
    truncate_to: int
    removed: int
    transactions: int


@dataclass(slots=True)
class Failover:
    effects: list[Effect]
    partitions: list[PartitionLag]  # every partition made writable
    abandoned: list[PartitionLag]  # those that may lose records
    dangling: list[DanglingTxn]  # replicated transactions aborted
    namespaces: list[tuple[str, str]]  # (type, prefix) made writable
    # The source's topics and partitions as known from this time on (0:
    # never listed since this cluster started): partitions created later are
    # in no row, and may hold records this cluster never saw.
    topics_known_at_ms: int = 0
    # Every partition of a replicated group made writable: where it resumes
    # here and the last commit heard of (`metadata_sync.settle_failover_groups`).
    groups: list[msync.GroupResume] = field(default_factory=list)
    # Its durable plan's steps (linkd/core/plans.py), each with what it did
    # here and on the remote; a re-run lists the steps done before it first.
    steps: list[PlanStep] = field(default_factory=list)
    # The step a re-run took the journalled plan up at ("": planned now).
    resumed_from: str = ""
    # Partitions cut at their last stable offset (failover.truncation).
    truncated: list[FailoverCut] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """What the answer reports (not the effects), for the plan's record."""
        return {
            "partitions": [asdict(r) for r in self.partitions],
            "abandoned": [asdict(r) for r in self.abandoned],
            "dangling": [asdict(d) for d in self.dangling],
            "namespaces": [list(n) for n in self.namespaces],
            "topics_known_at_ms": self.topics_known_at_ms,
            "groups": [asdict(g) for g in self.groups],
            "truncated": [asdict(c) for c in self.truncated],
        }

    @staticmethod
    def from_json(obj: dict[str, object]) -> Failover:
        return Failover(
            [],
            [jr.json_fields(PartitionLag, r) for r in jr.json_list(obj["partitions"])],
            [jr.json_fields(PartitionLag, r) for r in jr.json_list(obj["abandoned"])],
            [jr.json_fields(DanglingTxn, d) for d in jr.json_list(obj["dangling"])],
            [(str(t), str(p)) for t, p in map(jr.json_list, jr.json_list(obj["namespaces"]))],
            jr.json_int(obj["topics_known_at_ms"]),
            [jr.json_fields(msync.GroupResume, g) for g in jr.json_list(obj["groups"])],
            truncated=[
                jr.json_fields(FailoverCut, c) for c in jr.json_list(obj.get("truncated", []))
            ],
        )


def storage_reason(state: ClusterState, link_name: str) -> str:
    """", because ..." when this cluster's storage refused the records of some
    of the link's follower partitions (`link_rounds.storage_refusals`), else ""."""
    runtime = state.links.runtime.get(link_name)
    refused = sorted(
        f"{t}-{p}"
        for (t, p), e in (runtime.refused.items() if runtime is not None else ())
        if e.code is ErrorCode.STORAGE_REFUSED
    )
    refused += sorted(
        f"{t} (not created)" for t in (runtime.uncreated if runtime is not None else ())
    )
    if not refused:
        return ""
    shown = ", ".join(refused[:5]) + (f" and {len(refused) - 5} more" if len(refused) > 5 else "")
    return f", because this cluster's disk refused writes of {shown}"


def failover(
    state: ClusterState,
    link_name: str,
    force: bool,
    now_ms: int,
    planned: Sequence[tuple[str, str]] = (),
) -> Failover:
    """Makes this cluster's follower namespaces of the link writable: detach
    them, clear their reservation (a new leader epoch on every partition, the
    dangling transactions aborted). Refused unless the link is FOLLOWING or
    IN_SYNC and every follower partition's lag is known and zero, or `force`
    (module rules). The answer lists every partition made writable, those
    that may lose records (a lag above zero, or not known: -1 and since
    when), and every replicated transaction whose abort marker it wrote.

    `planned`: the (type, prefix) its journalled plan named, when a re-run
    takes the plan up after a crash. One of them that no longer follows the
    link (the remote's detach, or its reversal by hand, converged here
    meanwhile) but is still reserved and follows no other link is made
    writable too (`left_reserved`): the failover promised it, and nothing
    else would ever clear that reservation."""
    config = state.links.get(link_name)
    rows, abandoned = check_failover(state, link_name, force, now_ms)
    # Undo 37: the old rule, only the mappings that follow the link now.
    left = [] if state.faults.undid(37) else left_reserved(state, planned)
    return _failover_effects(state, config, link_name, rows, abandoned, now_ms, left)


def left_reserved(
    state: ClusterState, planned: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    """Of the namespaces a failover's plan named, those it must still make
    writable although they no longer follow the link: reserved here and
    following no link (a follower detached by the remote's change stays
    reserved). One that follows a link (this one: the failover promotes it
    anyway; another: an operator's later verb) or that is not reserved any
    more is not."""
    out = []
    for kind, prefix in planned:
        ns = state.namespaces.find(ResourceType.parse(kind), prefix)
        if ns is None or not ns.reserved or ns.follower_link is not None:
            continue
        out.append((kind, prefix))
    return out


def check_failover(
    state: ClusterState, link_name: str, force: bool, now_ms: int
) -> tuple[list[PartitionLag], list[PartitionLag]]:
    """Failover's refusals, nothing changed: returns (every follower
    partition, those that may lose records), or raises the refusal."""
    link_state = state.links.state_name(link_name)
    rows = follower_partitions(state, link_name, now_ms)
    if state.faults.undid(4):
        # The old rule: the last known lag taken as the lag now, any state.
        rows = [
            replace(r, lag_known=True, lag_records=known_part(r), unknown_since_ms=0) for r in rows
        ]
    abandoned = [r for r in rows if not r.lag_known or r.lag_records > 0]
    # Topics the source lists that this cluster could not create: it holds
    # none of their records.
    abandoned += uncreated_rows(state, link_name)
    if not force:
        if not state.faults.undid(4) and state.links.state_of(link_name) not in (
            LinkState.FOLLOWING,
            LinkState.IN_SYNC,
        ):
            oldest = min((r.source_hw_known_at_ms for r in rows), default=0)
            age = f"{now_ms - oldest} ms ago" if oldest > 0 else "never"
            raise ClusterError(
                ErrorCode.LINK_NOT_FOLLOWING,
                f"link {link_name!r}",
                f"link {link_name!r} is {link_state}{storage_reason(state, link_name)}: what "
                "its follower partitions lack is "
                f"not known (their source high watermarks were last learned {age}); wait "
                "until it is FOLLOWING, or fail over with force to abandon whatever the "
                "source acknowledged that this cluster does not hold",
            )
        unknown = [r for r in abandoned if not r.lag_known]
        if unknown:
            raise ClusterError(
                ErrorCode.LAG_NOT_KNOWN,
                f"link {link_name!r}",
                f"link {link_name!r} ({link_state}): the lag of {len(unknown)} follower "
                f"partitions is not known: {describe_unknown(unknown, now_ms)}; what the "
                "source acknowledged since then may be missing here. Wait until a fetch "
                "round answers (the link FOLLOWING again), or fail over with force to "
                "abandon it",
            )
        if abandoned:
            total = sum(r.lag_records for r in abandoned)
            raise ClusterError(
                ErrorCode.LAG_NOT_ZERO,
                f"link {link_name!r}",
                f"link {link_name!r} ({link_state}): {len(abandoned)} follower partitions "
                f"still lag by {total} records; wait, or fail over with force to abandon them",
            )
    return rows, abandoned


def _failover_effects(
    state: ClusterState,
    config: LinkConfig,
    link_name: str,
    rows: list[PartitionLag],
    abandoned: list[PartitionLag],
    now_ms: int,
    left: Sequence[tuple[str, str]] = (),
) -> Failover:
    effects: list[Effect] = []
    listed = state.links.runtime[link_name].topics_known_at_ms
    out = Failover(effects, rows, abandoned, [], [], listed or 0)
    prefixes = [
        m.local_prefix
        for m in config.attached_mappings()
        if m.local_role == Role.FOLLOWER and m.resource_type == MappingType.TOPIC
    ] + [prefix for kind, prefix in left if kind == MappingType.TOPIC]
    # Detaching a namespace aborts its dangling transactions already
    # (`abort_unfollowed`); whichever step writes a marker, the answer lists
    # every transaction open before the failover and not open after it.
    open_before = state.dangling_transactions(prefixes)
    if config.failover_truncation is FailoverTruncation.LAST_STABLE_OFFSET:
        out.truncated, cut_effects = cut_to_stable(state, config, open_before, now_ms)
        effects += cut_effects
    cut = {(c.topic, c.partition) for c in out.truncated}
    for mapping in list(config.attached_mappings()):
        if mapping.local_role != Role.FOLLOWER:
            continue
        detached = versioned(state, replace(mapping, attached=False, note=""), now_ms)
        effects += put_mapping(state, link_name, detached, now_ms)
        reservation = make_writable(
            state, ResourceType.parse(mapping.resource_type), mapping.local_prefix, now_ms
        )
        effects += reservation.effects
        out.dangling += reservation.dangling
        out.namespaces.append((mapping.resource_type, mapping.local_prefix))
    for kind, prefix in left:
        reservation = make_writable(state, ResourceType.parse(kind), prefix, now_ms)
        effects += reservation.effects
        out.dangling += reservation.dangling
        out.namespaces.append((kind, prefix))
    if not state.faults.undid(10):
        # Those a cut removed were not aborted: `truncated` names them.
        out.dangling = [
            d
            for d in open_before
            if not _still_open(state, d) and (d.topic, d.partition) not in cut
        ]
    # Nothing of the link is followed here any more, and every namespace it
    # followed is writable.
    after = state.links.get(link_name).attached_mappings()
    assert not any(m.local_role == Role.FOLLOWER for m in after), (
        f"link {link_name!r}: a follower mapping stays attached after the failover"
    )
    assert not any(
        state.namespaces.get(ResourceType.parse(kind), prefix).reserved
        for kind, prefix in out.namespaces
    ), f"link {link_name!r}: a namespace stays reserved after the failover: {out.namespaces}"
    return out


def cut_to_stable(
    state: ClusterState, config: LinkConfig, open_txns: Sequence[DanglingTxn], now_ms: int
) -> tuple[list[FailoverCut], list[Effect]]:
    """failover.truncation last-stable-offset: each follower partition with
    a replicated transaction still open is cut where the first of them
    begins (its last stable offset), every record from there removed and
    recorded in its provenance; nothing is left for an abort marker."""
    firsts: dict[tuple[str, int], list[int]] = {}
    for d in open_txns:
        firsts.setdefault((d.topic, d.partition), []).append(d.first_offset)
    cuts: list[FailoverCut] = []
    effects: list[Effect] = []
    for (topic, partition), offsets in sorted(firsts.items()):
        log = state.partition(topic, partition)
        end, stable = log.log_end_offset, min(offsets)
        effects += cut_replica(
            state, topic, partition, stable, config, "failover at the last stable offset",
            now_ms=now_ms,
        ).effects
        assert log.log_end_offset == stable and not log.ongoing_txns, (
            f"{log.name}: cut at {stable} by the failover, log end {log.log_end_offset}, "
            f"open {log.ongoing_txns}"
        )
        cuts.append(FailoverCut(topic, partition, stable, end - stable, len(offsets)))
    return cuts, effects


def _still_open(state: ClusterState, d: DanglingTxn) -> bool:
    topic = state.topics.get(d.topic)
    if topic is None or d.partition >= len(topic.partitions):
        return False
    return topic.partitions[d.partition].ongoing_txns.get(d.producer_id) == d.first_offset


def describe_unknown(rows: list[PartitionLag], now_ms: int, limit: int = 5) -> str:
    """Partitions whose lag is not known, and since when, for an error or a
    note: "orders-0 since 1200 ms ago (at 1700000001200), orders-1 never"."""

    def one(r: PartitionLag) -> str:
        if r.unknown_since_ms < 0:
            return f"{r.topic}-{r.partition} never learned"
        age = max(0, now_ms - r.unknown_since_ms)
        return f"{r.topic}-{r.partition} unknown since {age} ms ago (at {r.unknown_since_ms})"

    shown = ", ".join(one(r) for r in rows[:limit])
    more = len(rows) - limit
    return shown + (f" and {more} more" if more > 0 else "")


__all__ = [
    "Accepted",
    "Conflict",
    "Failover",
    "LinkSummary",
    "PartitionLag",
    "Reservation",
    "accept_remote_config",
    "check_attach",
    "check_detach",
    "check_failover",
    "delete_link",
    "describe_unknown",
    "failover",
    "follower_lag",
    "follower_partitions",
    "known_part",
    "link_summary",
    "make_writable",
    "mapping_conflict",
    "put_mapping",
    "reconcile_attachments",
    "refuse_unattachable",
    "set_reserved",
    "uncreated_rows",
    "versioned",
]
