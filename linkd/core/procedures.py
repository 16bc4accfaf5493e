"""Operator procedures that span both clusters of a link, written once.

Creating and deleting a link, attaching and detaching namespaces, setting a
link's mode, failing over, reserving a namespace, recovering a link and
reversing it are procedures: local decisions interleaved with calls to the
other cluster and with waits. Each is a generator here. It yields requests
(frozen dataclasses) and is sent each answer; the daemon (linkd/operations.py)
answers them with gRPC calls, files and asyncio time, the simulator
(sim/operator_shell.py) with direct calls into the other simulated cluster
and virtual time. So both shells run the same procedure, step for step, and a
remote refusal is an input to it in both.

Theory of operation:
- `Execute(effects)`: carry these out (journal, appends); answer: now (ms).
- `Call(address, request)`: send a request (`RemoteRequest`) to the cluster
  at `address`; answer: `Reply` (the answer, or the refusal, or
  LINK_UNREACHABLE when it cannot be reached). The other cluster serves it
  with `serve` below, the same function in both shells.
- `Tell(address, request)`: the same, best effort, in the background; no
  answer waited for.
- `Sleep(ms)`, `Now()`: answer: now (ms).
- `LinkChanged(link)` (start or wake the link's runner if this side dials),
  `LinkDeleted(link)` (stop it), `WakeWaiters()` (high watermarks moved),
  `Note(level, message)` (what an operator must see in the log): answer None.

The requests and what crosses to the other cluster are plain data
(linkd/core/requests.py). A procedure that refuses raises ClusterError; every
state change it made before is carried out first (so nothing changed in
memory is lost).

Pure code: no I/O, clocks or randomness; time arrives in the answers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import asdict, dataclass, field, replace

from linkd.core import histories, lineage, plans, recovery
from linkd.core import journal as jr
from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core.cluster import ClusterState, DanglingTxn
from linkd.core.effects import Effect, journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.links import (
    POLICIES,
    Field,
    Leader,
    LinkConfig,
    Mapping,
    MappingType,
    Role,
    in_prefix,
    parse_policies,
)
from linkd.core.namespaces import FOLLOWER, ResourceType
from linkd.core.requests import (
    Checkpoint,
    ClusterIdentity,
    DescribeCluster,
    DescribePartitions,
    Execute,
    Handshake,
    LinkChanged,
    LinkDeleted,
    NamespaceStanding,
    Note,
    PartitionsDescription,
    Promote,
    Promoted,
    RemoteAnswer,
    RemoteRequest,
    RemoveLink,
    Replied,
    Request,
    Sleep,
    Tell,
    WakeWaiters,
    call,
    clock,
)

# Reversal waits for the remote to copy everything at most this long by
# default, polling it this often.
REVERSE_TIMEOUT_MS_DEFAULT = 30_000
REVERSE_TIMEOUT_MS_MAX = 600_000
REVERSE_POLL_MS = 200


@dataclass(frozen=True, slots=True)
class Served:
    """What serving a request did on the receiving cluster: the answer, the
    effects to carry out before answering, the link whose runner may need to
    start or wake, and what an operator must see in the log."""

    answer: RemoteAnswer
    effects: list[Effect] = field(default_factory=list)
    link_changed: str = ""
    link_deleted: str = ""
    notes: list[str] = field(default_factory=list)


def serve(
    state: ClusterState, request: RemoteRequest, now_ms: int
) -> Served:
    """The receiving side of every request a procedure sends (both shells).
    Raises ClusterError (nothing changed) on refusal."""
    if isinstance(request, DescribeCluster):
        return Served(ClusterIdentity(state.cluster_id))
    if isinstance(request, Handshake):
        accepted = rounds.accept_handshake(
            state,
            request.config,
            request.create,
            now_ms,
            request.proposed,
            request.link_key,
        )
        name = request.config.name
        view = lineage.outgoing(state, state.links.get(name))
        return Served(view, accepted.effects, name, "", accepted.notes)
    if isinstance(request, RemoveLink):
        try:
            config = state.links.by_id(request.link_id)
        except ClusterError:
            return Served(None)  # deleted here already, or never known
        notes = [f"link {config.name!r} deleted: the remote deleted it"]
        effects, settled = admin.delete_link_settling(state, config.name, True, now_ms)
        if settled:
            notes.append(admin.settled_note(config.name, settled))
        return Served(None, effects, "", config.name, notes)
    if isinstance(request, DescribePartitions):
        return Served(describe_partitions(state, request, now_ms))
    config = state.links.by_id(request.link_id)
    promotion = recovery.promote_namespaces(state, config.name, list(request.namespaces), now_ms)
    notes = [
        f"link {config.name!r}: namespaces promoted, {promotion.bumped} partitions started a "
        f"new leader epoch, {len(promotion.dangling)} dangling transactions aborted"
    ]
    return Served(
        Promoted(promotion.bumped, len(promotion.dangling)), promotion.effects, "", "", notes
    )


def describe_partitions(
    state: ClusterState, request: DescribePartitions, now_ms: int
) -> PartitionsDescription:
    """The receiver's partition histories under a topic prefix, and the
    committed offsets of a group namespace (the link must exist here)."""
    config = state.links.by_id(request.link_id)
    state.links.on_contact(config.name, now_ms)
    partitions: recovery.RemotePartitions = {}
    if not request.groups_only:
        for name in sorted(state.topics):
            if in_prefix(name, request.prefix):
                for p in range(len(state.topics[name].partitions)):
                    side = histories.local_side(state, name, p)
                    if request.with_marks:
                        side = replace(side, marks=histories.log_marks(state, name, p)[0])
                    partitions[(name, p)] = side
    offsets: recovery.RemoteGroupOffsets = {}
    if request.group_prefix is not None:
        for group, topic, p, offset in recovery.committed_in(state, request.group_prefix):
            offsets[(group, topic, p)] = offset
    kind, prefix = MappingType.TOPIC.value, request.prefix
    if request.groups_only and request.group_prefix is not None:
        kind, prefix = MappingType.GROUP.value, request.group_prefix
    own = config.attached_at(kind, prefix)
    hops = lineage.upstream(
        state, kind, prefix, (config.name, own.key) if own is not None else None
    )
    return PartitionsDescription(
        state.cluster_id, partitions, offsets, hops, namespace_standing(state, config, kind, prefix)
    )


def namespace_standing(
    state: ClusterState, config: LinkConfig, kind: str, prefix: str
) -> NamespaceStanding:
    """Who may write the namespace `prefix` here, as told to the remote of
    `config` (its mapping on that link, which the remote's procedure would
    change, does not count as following)."""
    ns = state.namespaces.find(ResourceType.parse(kind), prefix)
    if ns is None:
        return NamespaceStanding()
    elsewhere = any(role == FOLLOWER and link != config.name for link, role in ns.attachments)
    planned = any(
        n.resource_type == kind and n.local_prefix == prefix
        for plan in state.plans.plans.values()
        for n in plan.namespaces
    )
    return NamespaceStanding(ns.reserved, elsewhere, planned)


Procedure = Generator[Request, object, object]


def derived_topic_id(text: str) -> str:
    """A topic id both shells derive alike from `text`: its UUID version 5 in
    the URL namespace (RFC 4122, as `uuid.uuid5`), computed here so the core
    needs no module that can also draw random ids."""
    url_namespace = bytes.fromhex("6ba7b8119dad11d180b400c04fd430c8")
    raw = bytearray(hashlib.sha1(url_namespace + text.encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# -- answers that wait for the remote ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending:
    """What an operator's change still waits for: it holds on this cluster,
    and the remote cluster has not confirmed it (unreachable, or no answer
    by the call's deadline). The link's handshakes (or, for a deletion,
    `tell_removals`) carry it there later, unless the link is deleted first.
    An answer with one is "pending", never "done"."""

    remote_cluster_id: str
    remains: str  # what the remote does not have yet, in words
    reason: str  # why it is not confirmed (the call's error)


@dataclass(frozen=True, slots=True)
class AdminResult:
    """An operator's link change: the link here after it (None: deleted), and
    what the remote has not confirmed (None: both sides have the change)."""

    config: LinkConfig | None
    pending: Pending | None = None
    # Replicated transactions the change aborted here: left open in
    # partitions that follow nothing now, no coordinator would end them
    # (a detach, a deletion; `link_admin.settled_note` words the warning).
    aborted: tuple[DanglingTxn, ...] = ()

    @property
    def done(self) -> bool:
        return self.pending is None


def _pending(
    faults: Faults, remote_cluster_id: str, remains: str, reason: str
) -> Pending | None:
    """The pending part of an answer (undone, fix 22: none; the old answer
    said done although the remote was not reached)."""
    if faults.undid(22):
        return None
    return Pending(remote_cluster_id, remains, reason)


# -- mappings: propose, ask the remote, commit -------------------------------------------------


def change_mapping(
    state: ClusterState,
    link_name: str,
    mapping: Mapping,
    now_ms: int,
    require_remote: bool = False,
) -> Generator[Request, object, AdminResult]:
    """An operator's attach or detach (already checked here): versioned now,
    proposed to the remote in a handshake (it may refuse: then nothing
    changes here either), then stored here with the remote's answer merged.
    An unreachable remote learns it later through the handshakes: the
    answer is then pending, naming what the remote lacks; unless
    `require_remote` (a step of a durable plan: its outcome must hold on both
    sides): then LINK_UNREACHABLE is raised and nothing changes here."""
    config = state.links.get(link_name)
    stamped = admin.versioned(state, mapping, now_ms)
    candidate = LinkConfig.from_record(config.to_record())
    candidate.mappings[stamped.key] = stamped
    candidate.link_epoch += 1
    reply = yield from call(
        config.value("remote_bootstrap"),
        Handshake(lineage.outgoing(state, candidate), proposed=(stamped.key,)),
        f"link {link_name!r}: handshake",
        LinkConfig,
    )
    if reply.error is not None and reply.error.code != ErrorCode.LINK_UNREACHABLE:
        raise reply.error  # the remote refused: nothing changed on either side
    if reply.error is not None and require_remote:
        raise reply.error  # nothing changed here; the step is run again later
    now = reply.now_ms
    effects, settled = admin.put_mapping_settling(state, link_name, stamped, now)
    notes: list[str] = []
    pending: Pending | None = None
    if reply.answer is not None:
        accepted = rounds.accept_handshake_answer(state, link_name, reply.answer, now)
        effects += accepted.effects
        notes += accepted.notes
    else:
        reason = reply.error.message if reply.error else "no answer"
        what = "attached" if stamped.attached else "detached"
        pending = _pending(
            state.faults,
            config.remote_cluster_id,
            f"{stamped.resource_type} namespace {stamped.local_prefix!r} {what} "
            f"(remote {stamped.remote_prefix!r}): {config.remote_cluster_id!r} has not "
            "confirmed it; the link's next handshakes carry it there",
            reason,
        )
        yield Note(
            "warning",
            f"link {link_name!r}: the remote did not confirm the change; pending ({reason})",
        )
    yield Execute(tuple(effects))
    if settled:
        yield Note("warning", admin.settled_note(link_name, settled))
    for note in notes:
        yield Note("info", note)
    if state.refresh_high_watermarks():
        yield WakeWaiters()
    yield LinkChanged(link_name)
    return AdminResult(state.links.get(link_name), pending, tuple(settled))


def attach(
    state: ClusterState,
    link_name: str,
    resource_type: str,
    local_prefix: str,
    remote_prefix: str,
    leader: str,
    now_ms: int,
    require_remote: bool = False,
) -> Generator[Request, object, AdminResult]:
    mapping = admin.check_attach(
        state, link_name, resource_type, local_prefix, remote_prefix, leader
    )
    if mapping.attached and mapping.version != (0, 0, ""):
        # Already attached just so; an earlier answer may have been pending,
        # so "done" only once the remote answered a handshake carrying it.
        return (yield from confirm_mapping(state, link_name, mapping, require_remote))
    if mapping.resource_type == MappingType.TOPIC and not state.faults.undid(15):
        yield from refuse_cutting_own_writes(state, link_name, mapping)
    result = yield from change_mapping(state, link_name, mapping, now_ms, require_remote)
    yield Note(
        "info",
        f"link {link_name!r}: {resource_type} namespace {local_prefix!r} attached "
        f"(remote {remote_prefix!r}, leader {leader})"
        + ("" if result.done else "; pending on the remote"),
    )
    return result


def confirm_mapping(
    state: ClusterState, link_name: str, mapping: Mapping, require_remote: bool = False
) -> Generator[Request, object, AdminResult]:
    """A change already made here, asked for again: this side holds it, but
    an earlier answer may have been pending. A handshake carries the link
    (the mapping as it is, no new version) to the remote: done if it
    answered, else pending naming what it may lack (LINK_UNREACHABLE raised
    if `require_remote`); a refusal is raised as `change_mapping` does."""
    config = state.links.get(link_name)
    reply = yield from _handshake(state, link_name)
    if reply.error is not None and (
        reply.error.code != ErrorCode.LINK_UNREACHABLE or require_remote
    ):
        raise reply.error
    if reply.answer is not None:
        yield from _merge_handshake(state, link_name, reply.answer, reply.now_ms)
        return AdminResult(state.links.get(link_name))
    reason = reply.error.message if reply.error is not None else "no answer"
    what = "attached" if mapping.attached else "detached"
    yield Note(
        "warning",
        f"link {link_name!r}: the remote did not confirm the change; pending ({reason})",
    )
    return AdminResult(
        state.links.get(link_name),
        _pending(
            state.faults,
            config.remote_cluster_id,
            f"{mapping.resource_type} namespace {mapping.local_prefix!r} {what} "
            f"(remote {mapping.remote_prefix!r}): {config.remote_cluster_id!r} has not "
            "confirmed it; the link's next handshakes carry it there",
            reason,
        ),
    )


def refuse_cutting_own_writes(
    state: ClusterState, link_name: str, mapping: Mapping
) -> Generator[Request, object, None]:
    """Before an attach of a topic namespace: asks the remote for its
    partitions under the mapping (and, when it will follow, its committed
    offsets), and refuses the attach (DIVERGED_LOG, nothing changed) when
    following would cut acknowledged records the follower's own clients
    wrote (`recovery.check_attach_cuts`): only `recover`, confirmed, may cut
    those. A remote that cannot be asked is warned of; the link itself then
    refuses to cut such records (`link_rounds.apply_replica_fetch`)."""
    config = state.links.get(link_name)
    remote_follows = mapping.leader == Leader.LOCAL
    reply = yield from call(
        config.value("remote_bootstrap"),
        DescribePartitions(
            config.link_id,
            mapping.remote_prefix,
            "" if remote_follows else None,
            with_marks=True,
        ),
        f"link {link_name!r}: describing partitions",
        PartitionsDescription,
    )
    description = reply.answer
    if description is None:
        why = reply.error.message if reply.error is not None else "no description"
        yield Note(
            "warning",
            f"link {link_name!r}: attaching topic namespace {mapping.local_prefix!r} without "
            f"comparing its partitions with the remote's ({why}); records the follower's "
            "clients wrote are not cut by the link (it refuses those partitions until a "
            "recover)",
        )
        return
    refusal = recovery.check_attach_cuts(
        state,
        config,
        mapping,
        description.cluster_id,
        description.partitions,
        description.group_offsets,
    )
    if refusal is not None:
        raise refusal


def detach(
    state: ClusterState,
    link_name: str,
    resource_type: str,
    local_prefix: str,
    now_ms: int,
    require_remote: bool = False,
) -> Generator[Request, object, AdminResult]:
    mapping = admin.check_detach(state, link_name, resource_type, local_prefix)
    result = yield from change_mapping(state, link_name, mapping, now_ms, require_remote)
    yield Note(
        "info",
        f"link {link_name!r}: {resource_type} namespace {local_prefix!r} detached"
        + ("" if result.done else "; pending on the remote"),
    )
    return result


# -- links -------------------------------------------------------------------------------------


def create_link(
    state: ClusterState,
    name: str,
    link_id: str,
    remote_bootstrap: str,
    credentials: str,
    direction: str,
    local_bootstrap: str,
    now_ms: int,
    link_key: str = "",
    policies: dict[str, str] | None = None,
) -> Generator[Request, object, LinkConfig]:
    """Creates the link here and, through a handshake, its mirror there.
    `credentials` (this side's for the remote) and `link_key` (the new link's
    key, which the creating session hands the remote: `link_auth`) arrive
    sealed by the shell. `policies`: shared link configs by name
    (`links.POLICIES`: gap.policy, fetch.bound, ...), checked before anything is
    dialed; the handshake carries them to the remote."""
    fields = parse_policies(name, policies or {})
    if name in state.links.configs:
        raise ClusterError(
            ErrorCode.LINK_EXISTS,
            f"link {name!r}",
            f"link {name!r} already exists on cluster {state.cluster_id!r}",
        )
    reply = yield from call(
        remote_bootstrap, DescribeCluster(), f"link {name!r}: dialing {remote_bootstrap}",
        ClusterIdentity,
    )
    identity = reply.value()
    config = state.links.new_config(
        name,
        link_id,
        identity.cluster_id,
        remote_bootstrap,
        credentials,
        direction,
        local_bootstrap,
        reply.now_ms,
        link_key,
    )
    for key, value in fields.items():
        config.fields[key] = Field(value, config.fields["mode"].version)
    shook = yield from call(
        remote_bootstrap,
        Handshake(config, create=True),
        f"link {name!r}: creating the mirror on {identity.cluster_id!r}",
        LinkConfig,
    )
    answer = shook.value()
    now = shook.now_ms
    effects = journal(state.links.store(config, now))
    accepted = rounds.accept_handshake_answer(state, name, answer, now)
    yield Execute(tuple(effects + accepted.effects))
    yield LinkChanged(name)
    yield Note("info", f"link {name!r} created to cluster {identity.cluster_id!r}")
    return state.links.get(name)


ALTERABLE = (
    "remote_bootstrap", "credentials", "local_bootstrap", *(f for f, _p in POLICIES.values())
)  # fmt: skip


def alter_link(
    state: ClusterState, name: str, changes: dict[str, str], now_ms: int
) -> Generator[Request, object, LinkConfig]:
    """An operator's change of this side's own settings of a link (the
    address it dials, its credentials for the remote (sealed), its own
    address), or of a policy (`POLICIES`: gap.policy, fetch.bound,
    failover.truncation, failback.reconciliation), shared by both sides: a
    handshake in a session opened with the new settings checks them first (a
    remote that refuses them, or nothing at the new address, changes
    nothing); then they are stored and the link's next call opens a session
    with them. The remote is not asked to change its own fields; a shared
    field travels in the handshake's configuration and the remote keeps it
    as the newest version (both sides converge on it)."""
    config = state.links.get(name)
    for field_name, parse in POLICIES.values():
        if field_name in changes:
            parse(name, changes[field_name])
    unknown = sorted(set(changes) - set(ALTERABLE))
    if unknown or not changes:
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {name!r}",
            f"link {name!r}: alter-link changes {', '.join(ALTERABLE)}"
            + (f", not {', '.join(unknown)}" if unknown else ": nothing was given"),
        )
    candidate = LinkConfig.from_record(config.to_record())
    for key, value in changes.items():
        candidate.fields[key] = Field(value, (now_ms, 0, state.cluster_id))
    reply = yield from call(
        candidate.value("remote_bootstrap"),
        Handshake(lineage.outgoing(state, candidate)),
        f"link {name!r}: checking the new settings",
        LinkConfig,
    )
    if reply.error is not None:
        raise ClusterError(
            reply.error.code,
            f"link {name!r}",
            f"link {name!r} is unchanged: {reply.error.message}",
        )
    answer = reply.value()
    now = reply.now_ms
    effects = journal(state.links.set_fields(name, changes, now))
    accepted = rounds.accept_handshake_answer(state, name, answer, now)
    yield Execute(tuple(effects + accepted.effects))
    for note in accepted.notes:
        yield Note("info", note)
    yield LinkChanged(name)
    yield Note("info", f"link {name!r}: {', '.join(sorted(changes))} changed by the operator")
    return state.links.get(name)


def resume_partition(
    state: ClusterState, name: str, topic: str, partition: int
) -> Generator[Request, object, LinkConfig]:
    """The operator lets a follower partition stopped at a gap (gap.policy
    stop) go on from its source's log start: the gap is recorded in its
    provenance (`link_rounds.resume_partition`), the partition is fetched
    again. Refused (nothing changed) unless it is stopped at a gap."""
    gap, effects = rounds.resume_partition(state, name, topic, partition)
    yield Execute(tuple(effects))
    yield Note(
        "warning",
        f"link {name!r}: {topic}-{partition} resumed by the operator: offsets "
        f"[{gap.from_offset}, {gap.to_offset}) ({gap.records} records) were never copied "
        f"({gap.reason}); the follower goes on from {gap.to_offset}",
    )
    yield LinkChanged(name)
    return state.links.get(name)


def delete_link(
    state: ClusterState, name: str, now_ms: int
) -> Generator[Request, object, AdminResult]:
    """Stops the runner, tells the remote, forgets the link (every namespace
    detached, followers stay reserved). A remote that cannot be told now is
    told later (`tell_removals`), or learns it at its next handshake
    (LINK_DELETED): the deletion converges like any change, and the answer
    is pending until then."""
    config = state.links.get(name)
    yield LinkDeleted(name)
    reply = yield from call(
        config.value("remote_bootstrap"), RemoveLink(config.link_id), f"link {name!r}: remove",
        type(None),
    )
    told = _removed_there(reply)
    pending: Pending | None = None
    if not told:
        reason = reply.error.message if reply.error is not None else "no answer"
        pending = _pending(
            state.faults,
            config.remote_cluster_id,
            f"link {name!r} deleted here; {config.remote_cluster_id!r} still holds its half "
            "until it is told (this cluster retries every handshake interval) or it calls",
            reason,
        )
        yield Note("warning", f"link {name!r}: the remote was not told of the deletion yet "
                   f"(it will be): {reason}")
    now = yield from clock()
    effects, settled = admin.delete_link_settling(state, name, told, now)
    yield Execute(tuple(effects))
    yield Note("info", f"link {name!r} deleted" + ("" if told else "; pending on the remote"))
    if settled:
        yield Note("warning", admin.settled_note(name, settled))
    return AdminResult(None, pending, tuple(settled))


def _removed_there(reply: Replied[None]) -> bool:
    """The remote deleted its half, or holds none."""
    return reply.error is None or reply.error.code in (
        ErrorCode.UNKNOWN_LINK,
        ErrorCode.LINK_DELETED,
    )


def tell_removals(state: ClusterState, now_ms: int) -> Generator[Request, object, int]:
    """Tells each remote that has not confirmed yet that a link was deleted
    here (shells run it every HANDSHAKE_INTERVAL_MS). Returns how many were
    told."""
    told = 0
    for tomb in state.links.pending_removals():
        reply = yield from call(
            tomb.address, RemoveLink(tomb.link_id), f"link {tomb.name!r}: remove",
            type(None),
        )
        if _removed_there(reply):
            yield Execute(tuple(journal(state.links.removal_told(tomb.link_id))))
            yield Note("info", f"link {tomb.name!r}: the remote was told of its deletion")
            told += 1
    return told


def forget_deleted(state: ClusterState, name: str, now_ms: int) -> Generator[Request, object, None]:
    """The dialing side heard LINK_DELETED: the remote deleted the link, so
    this side deletes its half (followers stay reserved)."""
    if name not in state.links.configs:
        return
    yield LinkDeleted(name)
    effects, settled = admin.delete_link_settling(state, name, True, now_ms)
    yield Execute(tuple(effects))
    yield Note("info", f"link {name!r} deleted: the remote deleted it")
    if settled:
        yield Note("warning", admin.settled_note(name, settled))


def set_mode(
    state: ClusterState, name: str, mode: str, now_ms: int
) -> Generator[Request, object, AdminResult]:
    """ASYNC or SYNC (spec section 4): decided here, then told to the remote
    (the mode is a versioned field and converges: pending until the remote
    answered)."""
    records, hw_moved = rounds.set_link_mode(state, name, mode, now_ms)
    if not records:
        return AdminResult(state.links.get(name))
    yield Execute(tuple(journal(records)))
    if hw_moved:
        yield WakeWaiters()
    config = state.links.get(name)
    reply = yield from _handshake(state, name)
    pending: Pending | None = None
    if reply.answer is not None:
        accepted = rounds.accept_handshake_answer(state, name, reply.answer, reply.now_ms)
        yield Execute(tuple(accepted.effects))
    else:
        reason = reply.error.message if reply.error is not None else "no answer"
        pending = _pending(
            state.faults,
            config.remote_cluster_id,
            f"mode {config.mode}: {config.remote_cluster_id!r} has not confirmed it; the "
            "link's next handshakes carry it there",
            reason,
        )
        yield Note("warning", f"link {name!r}: mode change not yet known to the remote: {reason}")
    yield LinkChanged(name)
    yield Note("info", f"link {name!r} mode set to {state.links.get(name).mode}")
    return AdminResult(state.links.get(name), pending)


# -- failing over ----------------------------------------------------------------------------

FAILOVER_STEPS = (
    "verify-link-state",
    "make-writable",
    "tell-remote",
)


def failover(
    state: ClusterState, name: str, force: bool, now_ms: int
) -> Generator[Request, object, admin.Failover]:
    """Makes this side's follower namespaces of the link writable
    (`link_admin.failover`), then tells the remote in the background: after a
    disaster it is usually gone, and the detach converges anyway.

    A durable plan (linkd/core/plans.py): once the checks pass, the plan (the
    namespaces it promotes) is journalled before the first change, and the
    step that makes them writable journals its answer (every partition, what
    may be lost, the groups) with its changes. Run again after a crash of
    this cluster, it continues the plan: a plan stopped before that step
    checks again (a refusal ends it, nothing changed); one stopped after it
    answers what the first run did, which no one may have seen."""
    config = state.links.get(name)
    plan = yield from _journalled(state, name, plans.FAILOVER)
    resumed_from = ""
    if plan is None:
        rows, abandoned = admin.check_failover(state, name, force, now_ms)
        promoted = [m for m in config.attached_mappings() if m.local_role == Role.FOLLOWER]
        verify = plans.PlanStep(
            FAILOVER_STEPS[0], True,
            f"link is {state.links.state_name(name)}: {len(rows)} follower partitions here, "
            f"{len(abandoned)} of them may lose records"
            + (" (forced)" if force else "") + f"; {config.remote_cluster_id!r} not asked",
            0,
        )  # fmt: skip
        plan = plans.Plan(
            plans.FAILOVER, name, config.link_id, config.remote_cluster_id,
            tuple(
                plans.PlanNamespace(m.resource_type, m.local_prefix, m.remote_prefix)
                for m in promoted
            ),
            0, now_ms, (verify,),
            # What the check found abandoned: a re-run after a crash answers
            # it too (the first answer was lost; what it gave up, not found
            # again, must still be named).
            detail={"force": force, "checked": [asdict(r) for r in rows]},
        )  # fmt: skip
        yield Execute(tuple(journal(state.plans.put(plan))))
        yield _checkpoint(name, verify.name, plans.FAILOVER)
    else:
        plan = replace(plan, restarts=plan.restarts + 1)
        yield Execute(tuple(journal(state.plans.put(plan))))
        resumed_from = plan.next_step(FAILOVER_STEPS) or ""
        yield Note("warning", f"link {name!r}: failover takes up its journalled plan (begun "
                   f"{plan.begun}) at step {resumed_from}")
    before = {s.name for s in plan.steps if s.ok} if resumed_from else set()
    if plan.done(FAILOVER_STEPS[1]):
        assert plan.detail is not None
        result = admin.Failover.from_json(jr.json_object(plan.detail["result"]))
    else:
        result = yield from _make_writable(state, name, force, plan)
        plan = state.plans.get(name) or plan
    # Tell the old leader: best effort, in the background (the link's next
    # handshakes carry the detach there anyway).
    config = state.links.get(name)
    yield Tell(
        config.value("remote_bootstrap"),
        Handshake(lineage.outgoing(state, config)),
        f"link {name!r}: handshake",
    )
    told = plans.PlanStep(
        FAILOVER_STEPS[2], True,
        f"sent {config.remote_cluster_id!r} this side's configuration in the background (the "
        f"detach reaches it by the link's next handshake if it is down); "
        f"{config.remote_cluster_id!r} keeps leading its side until it runs recover",
        0,
    )  # fmt: skip
    plan = plan.with_step(told)
    yield Execute(tuple(journal(state.plans.end(name))))
    yield _checkpoint(name, told.name, plans.FAILOVER)
    result.steps = _marked(plan.steps, before)
    result.resumed_from = resumed_from
    yield LinkChanged(name)
    return result


def _checked_before(
    state: ClusterState, plan: plans.Plan, result: admin.Failover
) -> list[admin.PartitionLag]:
    """The partitions the plan's first check saw that this answer names
    nowhere (a re-run after a crash: a namespace detached meanwhile is
    promoted without rows of its own), if the topic is still here: each
    abandoned with its lag not known since that check knew it (the records
    its source took after are in no log here), or since it was not known."""
    named = {(r.topic, r.partition) for r in [*result.partitions, *result.abandoned]}
    checked = [
        jr.json_fields(admin.PartitionLag, r)
        for r in jr.json_list((plan.detail or {}).get("checked", []))
    ]
    return [
        replace(
            r,
            lag_known=False,
            lag_records=-1,
            lag_ms=-1,
            unknown_since_ms=r.source_hw_known_at_ms if r.lag_known else r.unknown_since_ms,
        )
        for r in checked
        if (r.topic, r.partition) not in named and r.topic in state.topics
    ]


def _make_writable(
    state: ClusterState, name: str, force: bool, plan: plans.Plan
) -> Generator[Request, object, admin.Failover]:
    """Failover's change: detach the follower mappings, clear their
    reservations, settle the replicated groups, and journal the answer in
    the plan with them. A refusal (a re-run that checks again) ends the
    plan: nothing changed."""
    started = yield from clock()
    followed = {
        (m.resource_type.value, m.local_prefix)
        for m in state.links.get(name).attached_mappings()
        if m.local_role == Role.FOLLOWER
    }
    planned = [
        (n.resource_type, n.local_prefix)
        for n in plan.namespaces
        if (n.resource_type, n.local_prefix) not in followed
    ]
    try:
        result = admin.failover(state, name, force, started, planned)
    except ClusterError:
        yield Execute(tuple(journal(state.plans.end(name))))
        raise
    if not state.faults.undid(40):
        result.abandoned += _checked_before(state, plan, result)
    # The promoted topics' high watermarks no longer wait for their source.
    hw_moved = state.refresh_high_watermarks()
    # The replicated groups resume at the last commit heard of, or at the
    # end of this cluster's data if nearer; the answer says which, per group.
    group_prefixes = [p for kind, p in result.namespaces if kind == MappingType.GROUP]
    offsets_topic = derived_topic_id(f"ccr-offsets/{state.cluster_id}/{name}")
    group_effects, result.groups = msync.settle_failover_groups(
        state, name, group_prefixes, started, offsets_topic
    )
    lost = sum(r.lag_records for r in result.abandoned if r.lag_known)
    unknown = [r for r in result.abandoned if not r.lag_known]
    step = plans.PlanStep(
        FAILOVER_STEPS[1], True,
        f"made {len(result.namespaces)} namespaces writable here ("
        + ", ".join(f"{k} {p!r}" for k, p in result.namespaces)
        + f"); abandoned {lost} records known to lag on "
        f"{len(result.abandoned) - len(unknown)} partitions, {len(unknown)} partitions' lag "
        f"not known; aborted {len(result.dangling)} dangling transactions; "
        + (
            f"cut {len(result.truncated)} partitions at their last stable offset ("
            f"{sum(c.removed for c in result.truncated)} records); "
            if result.truncated
            else ""
        )
        + f"{len(result.groups)} replicated group partitions settled",
        0,
    )  # fmt: skip
    detail = dict(plan.detail or {})
    detail["result"] = result.to_json()
    plan = replace(plan.with_step(step), detail=detail)
    yield Execute((*result.effects, *journal(state.plans.put(plan))))
    if group_effects:
        yield Execute(tuple(group_effects), "offsets")
    if hw_moved:
        yield WakeWaiters()
    behind = [g for g in result.groups if g.behind > 0]
    if behind:
        yield Note(
            "warning",
            f"link {name!r}: {len(behind)} replicated group partitions resume behind the last "
            f"commit heard of, by {sum(g.behind for g in behind)} records in all",
        )
    aborted = ", ".join(
        f"{d.topic}-{d.partition} producer {d.producer_id} from offset {d.first_offset}"
        for d in result.dangling
    )
    cuts = ", ".join(
        f"{c.topic}-{c.partition} at {c.truncate_to} ({c.removed} records)"
        for c in result.truncated
    )
    yield Note(
        "warning" if result.abandoned or result.truncated else "info",
        f"link {name!r}: failover made {len(result.namespaces)} namespaces writable; "
        f"abandoned {lost} records known to lag on "
        f"{len(result.abandoned) - len(unknown)} partitions"
        + (
            f"; the lag of {len(unknown)} partitions not known: "
            f"{admin.describe_unknown(unknown, started)}"
            if unknown
            else ""
        )
        + (
            f"; aborted {len(result.dangling)} dangling transactions: {aborted}"
            if result.dangling
            else ""
        )
        + (
            f"; cut {len(result.truncated)} partitions at their last stable offset "
            f"(failover.truncation): {cuts}"
            if result.truncated
            else ""
        ),
    )
    yield _checkpoint(name, step.name, plans.FAILOVER)
    return result


def _marked(steps: tuple[plans.PlanStep, ...], before: set[str]) -> list[plans.PlanStep]:
    """A plan's steps for an answer: those a run before this one did are
    marked so."""
    return [
        replace(s, result=f"(before the re-run) {s.result}") if s.name in before else s
        for s in steps
    ]


def _journalled(
    state: ClusterState, link_name: str, procedure: str
) -> Generator[Request, object, plans.Plan | None]:
    """The plan of `procedure` journalled for the link (None: none). A plan
    of an earlier link of that name is dropped; while another procedure's
    plan is journalled, this one is refused (finish that one first)."""
    config = state.links.get(link_name)
    plan = state.plans.get(link_name)
    if plan is None:
        return None
    if plan.link_id != config.link_id:
        yield Execute(tuple(journal(state.plans.end(link_name))))
        yield Note("warning", f"link {link_name!r}: dropped the plan of a {plan.procedure} of "
                   "an earlier link of this name")
        return None
    if plan.procedure != procedure:
        steps = PLAN_STEPS.get(plan.procedure, ())
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"link {link_name!r}",
            f"link {link_name!r}: a {plan.procedure} begun {plan.begun} is in "
            f"progress on {state.cluster_id!r} (next step {plan.next_step(steps)}); run "
            f"{plan.procedure} again here to finish it first",
        )
    return plan


def set_reserved(
    state: ClusterState, resource_type: ResourceType | int, prefix: str, reserved: bool, now_ms: int
) -> Generator[Request, object, admin.Reservation]:
    """An operator's set-reserved (`link_admin.set_reserved`: setting it
    aborts open transactions; clearing it makes the namespace writable)."""
    result = admin.set_reserved(state, resource_type, prefix, reserved, now_ms)
    yield Execute(tuple(result.effects))
    if state.refresh_high_watermarks():
        yield WakeWaiters()
    kind = ResourceType.parse(int(resource_type))
    if result.aborted:
        yield Note("info", f"{kind.label} namespace {prefix!r} reserved: aborted "
                   f"{len(result.aborted)} open transactions: {', '.join(result.aborted)}")
    if result.dangling:
        yield Note("info", f"{kind.label} namespace {prefix!r} writable: aborted "
                   f"{len(result.dangling)} dangling replicated transactions")
    return result


# -- unclean link recovery ------------------------------------------------------------------------


RECOVER_STEPS = (
    "plan-recovery",
    "reserve-and-cut",
    "follow-remote",
)


def recover(
    state: ClusterState,
    link_name: str,
    requested: list[tuple[str, str, str | None]],
    confirm: bool,
    now_ms: int,
) -> Generator[Request, object, recovery.RecoveryPlan]:
    """Run on the side that will follow. Report only, or (confirm) reserve,
    abort open transactions, truncate, move committed offsets back, and attach
    the mappings with the remote leading (linkd/core/recovery.py).

    Confirmed, a durable plan (linkd/core/plans.py): the cut it will make is
    journalled before the first change, the reservations and the cut are
    journalled with the step's outcome, and the mappings follow the remote one
    by one. Run again (confirmed) after a crash of either side or a mapping
    that could not follow, it continues the plan: before the cut it plans
    again from the remote's description (nothing changed yet); after it, it
    answers the cut the first run made (records and offsets no one may have
    seen reported) and attaches the mappings that do not follow yet."""
    config = state.links.get(link_name)
    held = state.plans.get(link_name)
    if not confirm and held is not None and held.procedure != plans.RECOVER:
        plan = None  # a report changes nothing: another procedure's plan may wait
    else:
        plan = yield from _journalled(state, link_name, plans.RECOVER)
    resumed_from = ""
    if plan is not None:
        resumed_from = plan.next_step(RECOVER_STEPS) or ""
    if plan is not None and plan.done(RECOVER_STEPS[1]):
        assert plan.detail is not None
        cut = recovery.RecoveryPlan.from_dict(jr.json_object(plan.detail["cut"]))
        if not confirm:
            return replace(
                cut, steps=tuple(plan.steps), resumed_from=resumed_from,
                notes=(f"a recovery begun {plan.begun} is in progress (next step "
                       f"{resumed_from}); run recover --confirm again here to finish it",),
            )  # fmt: skip
        before = {s.name for s in plan.steps if s.ok}
        plan = replace(plan, restarts=plan.restarts + 1)
        yield Execute(tuple(journal(state.plans.put(plan))))
        yield Note("warning", f"link {link_name!r}: recover takes up its journalled plan (begun "
                   f"{plan.begun}) at step {resumed_from}")
        mappings = list(cut.mappings)
    else:
        before = {s.name for s in plan.steps if s.ok} if plan is not None else set()
        if plan is not None:
            requested = [(n.resource_type, n.local_prefix, n.remote_prefix)
                         for n in plan.namespaces]
        if confirm and not state.faults.undid(36):
            yield from _exchange_views(state, link_name)
        mappings = recovery.select_mappings(state, config, requested)
        cut, remote, remote_groups, lineages = yield from _plan_recovery(
            state, link_name, mappings
        )
        if not confirm:
            return cut
        try:
            recovery.check_can_follow(state, link_name, mappings)
            recovery.check_no_ring(
                state, link_name, mappings, cut.remote_cluster_id, lineages
            )
        except ClusterError:
            if plan is not None:  # nothing changed: the plan ends
                yield Execute(tuple(journal(state.plans.end(link_name))))
            raise
        now = yield from clock()
        planned = plans.PlanStep(
            RECOVER_STEPS[0], True,
            f"{cut.remote_cluster_id!r} described {len(cut.partitions)} partitions: "
            f"{cut.local_records_lost} records here to cut in {cut.diverged_partitions} "
            f"partitions, {len(cut.groups)} committed offsets to move",
            0,
        )  # fmt: skip
        plan = plans.Plan(
            plans.RECOVER, link_name, config.link_id, config.remote_cluster_id,
            tuple(plans.PlanNamespace(m.resource_type, m.local_prefix, m.remote_prefix)
                  for m in mappings),
            0, plan.started_ms if plan is not None else now, (planned,),
            plan.restarts + 1 if plan is not None else 0,
            {"cut": cut.to_dict()},
        )  # fmt: skip
        yield Execute(tuple(journal(state.plans.put(plan))))
        yield _checkpoint(link_name, planned.name, plans.RECOVER)
        aborted, effects = recovery.reserve_and_abort(state, mappings, now)
        try:
            # The aborts wrote markers here: the cut is planned again on them.
            cut = recovery.plan_recovery(
                state, link_name, mappings, cut.remote_cluster_id, remote, remote_groups
            )
            effects += recovery.apply_recovery(state, cut, config.link_id, now)
        except ClusterError:
            yield Execute(tuple(effects))  # the reservation and the aborts happened
            raise
        step = plans.PlanStep(
            RECOVER_STEPS[1], True,
            f"reserved {len(mappings)} namespaces here, aborted {len(aborted)} open "
            f"transactions, cut {cut.local_records_lost} records in "
            f"{cut.diverged_partitions} partitions, moved {len(cut.groups)} committed offsets",
            0,
        )  # fmt: skip
        plan = replace(plan.with_step(step), detail={"cut": cut.to_dict()})
        if state.faults.undid(26):
            # The old rule: nothing durable says the mappings have yet to follow.
            yield Execute((*effects, *journal(state.plans.end(link_name))))
        else:
            yield Execute((*effects, *journal(state.plans.put(plan))))
        yield Note(
            "warning",
            f"link {link_name!r}: unclean link recovery truncated {cut.local_records_lost} "
            f"records in {cut.diverged_partitions} partitions, moved {len(cut.groups)} "
            f"committed offsets back, aborted {len(aborted)} open transactions"
            + (f" (offsets moved: {recovery.describe_offsets_moved(cut)})" if cut.groups else ""),
        )
        yield _checkpoint(link_name, step.name, plans.RECOVER)
    notes, failed = yield from _follow_remote(state, link_name, mappings)
    leader = config.remote_cluster_id
    followed = plans.PlanStep(
        RECOVER_STEPS[2], not failed,
        f"{len(mappings) - failed} of {len(mappings)} namespaces attached with {leader!r} "
        f"leading, here and on {leader!r}" + ("; " + "; ".join(notes) if notes else ""),
        0,
    )  # fmt: skip
    plan = plan.with_step(followed)
    if state.plans.get(link_name) is not None:
        # A mapping that could not follow keeps the plan: a re-run attaches it.
        yield Execute(tuple(journal(
            state.plans.put(plan) if failed else state.plans.end(link_name)
        )))
    yield _checkpoint(link_name, followed.name, plans.RECOVER)
    return replace(
        recovery.confirmed(cut), notes=tuple(notes), steps=tuple(_marked(plan.steps, before)),
        resumed_from=resumed_from,
    )


def _exchange_views(state: ClusterState, link_name: str) -> Generator[Request, object, None]:
    """Before a confirmed recovery judges whether its mappings can follow:
    one handshake with the remote (this side's view sent, the remote's
    answer merged), so that the checks before the cut see the link as both
    sides hold it now. A remote attach or detach this side had not heard of
    (the link's own handshakes carry them only every so often) would else
    refuse a mapping at follow-remote, after the cut. Raises the call's
    error, nothing changed here."""
    reply = yield from _handshake(state, link_name)
    yield from _merge_handshake(state, link_name, reply.value(), reply.now_ms)


def _handshake(
    state: ClusterState, link_name: str
) -> Generator[Request, object, Replied[LinkConfig]]:
    """One handshake with the remote: this side's view of the link sent, the
    remote's merged view answered (or why not)."""
    config = state.links.get(link_name)
    return (
        yield from call(
            config.value("remote_bootstrap"),
            Handshake(lineage.outgoing(state, config)),
            f"link {link_name!r}: handshake",
            LinkConfig,
        )
    )


def _merge_handshake(
    state: ClusterState, link_name: str, answer: LinkConfig, now_ms: int
) -> Generator[Request, object, None]:
    """The remote's view of the link, answered to a handshake, merged here."""
    accepted = rounds.accept_handshake_answer(state, link_name, answer, now_ms)
    yield Execute(tuple(accepted.effects))
    for note in accepted.notes:
        yield Note("info", note)
    if state.refresh_high_watermarks():
        yield WakeWaiters()
    yield LinkChanged(link_name)


def _plan_recovery(
    state: ClusterState, link_name: str, mappings: list[recovery.RecoveryMapping]
) -> Generator[
    Request, object,
    tuple[
        recovery.RecoveryPlan, recovery.RemotePartitions, recovery.RemoteGroupOffsets,
        recovery.RemoteLineages,
    ],
]:
    """Describes the remote's partitions and groups and plans the cut;
    returns the plan and what the remote described (its lineage of each
    namespace too)."""
    config = state.links.get(link_name)
    address = config.value("remote_bootstrap")
    remote: recovery.RemotePartitions = {}
    remote_groups: recovery.RemoteGroupOffsets = {}
    lineages: recovery.RemoteLineages = {}
    standings: dict[tuple[str, str], NamespaceStanding] = {}
    remote_id = config.remote_cluster_id
    what = f"link {link_name!r}: describing partitions"
    topics = [m for m in mappings if m.resource_type == MappingType.TOPIC]
    for m in topics:
        request = DescribePartitions(config.link_id, m.remote_prefix, with_marks=True)
        reply = yield from call(address, request, what, PartitionsDescription)
        description = reply.value()
        remote.update(description.partitions)
        lineages[(m.resource_type, m.local_prefix)] = description.lineage
        standings[(m.resource_type, m.local_prefix)] = description.standing
        remote_id = description.cluster_id
    for m in (m for m in mappings if m.resource_type == MappingType.GROUP):
        reply = yield from call(
            address,
            DescribePartitions(config.link_id, m.remote_prefix, m.remote_prefix, True),
            what,
            PartitionsDescription,
        )
        description = reply.value()
        remote_groups.update(description.group_offsets)
        lineages[(m.resource_type, m.local_prefix)] = description.lineage
        standings[(m.resource_type, m.local_prefix)] = description.standing
        remote_id = description.cluster_id
    plan = recovery.plan_recovery(state, link_name, mappings, remote_id, remote, remote_groups)
    if not state.faults.undid(39):
        _check_remote_writes(link_name, mappings, remote_id, standings)
    return plan, remote, remote_groups, lineages


def _check_remote_writes(
    link_name: str,
    mappings: list[recovery.RecoveryMapping],
    remote_id: str,
    standings: dict[tuple[str, str], NamespaceStanding],
) -> None:
    """Recovery makes this side follow the remote: refused (nothing changed)
    when the remote's namespace is reserved there, follows no other link
    and no plan there will change that (a follower whose leader detached
    it, a namespace reserved by hand): this side would follow a namespace no
    client writes anywhere."""
    nowhere = [
        m
        for m in mappings
        if standings.get((m.resource_type, m.local_prefix), _WRITABLE).writes_nowhere
    ]
    if not nowhere:
        return
    names = ", ".join(f"{m.resource_type} {m.remote_prefix!r}" for m in nowhere)
    raise ClusterError(
        ErrorCode.RESERVED_NAMESPACE,
        f"link {link_name!r}",
        f"cannot recover from {remote_id!r}: its {names} is reserved there and follows no "
        f"other cluster (at most this one, over this link), so no client writes it: this "
        f"cluster would follow a namespace nobody writes; make it writable there first "
        f"(`failover` on {remote_id!r} if it followed this cluster, or `set-reserved "
        f"--reserved false` there), or reverse the link; nothing was changed",
    )


_WRITABLE = NamespaceStanding()


def _follow_remote(
    state: ClusterState, link_name: str, mappings: list[recovery.RecoveryMapping]
) -> Generator[Request, object, tuple[list[str], int]]:
    """Recovery's last step: each mapping attached with the remote leading
    (a checkpoint after each). Returns the notes for the answer (pending
    attaches, mappings that could not follow) and how many could not.

    Each mapping is judged when its turn comes (whether it follows the
    remote already, whether it must be detached first): an earlier
    mapping's handshake merges the remote's view, which may have attached
    this one the other way meanwhile (undone, fix 36: judged once, before
    the first attach)."""
    config = state.links.get(link_name)
    notes: list[str] = []
    failed = 0
    if state.faults.undid(36):
        todo = recovery.mappings_to_follow(state.links.get(link_name), mappings)
    else:
        todo = [(m, False) for m in mappings]
    i = 0
    for m, detach_first in todo:
        if not state.faults.undid(36):
            now_todo = recovery.mappings_to_follow(state.links.get(link_name), [m])
            if not now_todo:
                continue  # follows the remote already
            detach_first = now_todo[0][1]
        i += 1
        try:
            if detach_first:
                now = yield from clock()
                yield from detach(state, link_name, m.resource_type, m.local_prefix, now)
            now = yield from clock()
            attached = yield from attach(
                state, link_name, m.resource_type, m.local_prefix, m.remote_prefix, "remote", now
            )
            if attached.pending is not None:
                notes.append(f"pending: {attached.pending.remains} ({attached.pending.reason})")
        except ClusterError as exc:
            # The cut happened: the answer must say so, and what is left.
            failed += 1
            notes.append(
                f"{m.resource_type} namespace {m.local_prefix!r} does not follow "
                f"{config.remote_cluster_id!r} yet ({exc.code.name}: {exc.message}); it stays "
                "reserved; fix that and attach it, or run recover --confirm again"
            )
            yield Note("warning", f"link {link_name!r}: recovery: {notes[-1]}")
            if m.resource_type == MappingType.TOPIC:
                # It follows nothing now: what the cut left open never ends.
                now = yield from clock()
                aborts = admin.abort_unfollowed(state, [m.local_prefix], now)
                if aborts:
                    yield Execute(tuple(aborts))
        yield _checkpoint(link_name, f"{RECOVER_STEPS[2]}#{i}", plans.RECOVER)
    if not state.faults.undid(36):
        # A later mapping's handshake may have swapped one judged before: it
        # does not follow, and the plan stays for a re-run to attach it.
        for m, _ in recovery.mappings_to_follow(state.links.get(link_name), mappings):
            if any(f"namespace {m.local_prefix!r} does not follow" in n for n in notes):
                continue
            failed += 1
            notes.append(
                f"{m.resource_type} namespace {m.local_prefix!r} does not follow "
                f"{config.remote_cluster_id!r} yet (the remote's view attached it the other "
                "way while recovering); it stays reserved; run recover --confirm again"
            )
            yield Note("warning", f"link {link_name!r}: recovery: {notes[-1]}")
    return notes, failed


# -- reversing a link's direction ---------------------------------------------------------------

REVERSE_STEPS = (
    "verify-link-state",
    "reserve-leader-namespaces",
    "abort-open-transactions",
    "wait-for-remote",
    "detach-mappings",
    "attach-swapped-mappings",
    "promote-remote-namespaces",
)
# A step before this one that fails changed no mapping: the plan is rolled
# back (this side writable again). From it on, a stopped plan is finished by
# running reverse again on this cluster.
REVERSE_NO_RETURN = "detach-mappings"

# Every durable procedure's steps, by its plan's name.
PLAN_STEPS = {
    plans.REVERSE: REVERSE_STEPS,
    plans.FAILOVER: FAILOVER_STEPS,
    plans.RECOVER: RECOVER_STEPS,
}


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    ok: bool
    result: str
    duration_ms: int


@dataclass(slots=True)
class ReverseReport:
    link: str
    steps: list[Step] = field(default_factory=list)
    error: ClusterError | None = None
    # The step a re-run took a journalled plan up at ("": a new plan). The
    # steps done before it are reported first, as journalled.
    resumed_from: str = ""
    # The plan stopped past the point of no return and stays journalled:
    # running reverse again on this cluster finishes it.
    pending: bool = False
    # A step before any mapping changed failed: the reservations the plan
    # made were cleared, this side leads and takes writes again.
    rolled_back: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def _checkpoint(link_name: str, point: str, procedure: str = plans.REVERSE) -> Checkpoint:
    return Checkpoint(procedure, link_name, f"{procedure}:{point}")


def _new_reverse_plan(
    state: ClusterState, link_name: str, timeout_ms: int, now_ms: int
) -> tuple[plans.Plan, Step]:
    """A new plan for `reverse` (nothing changed yet), or the refusal."""
    config = state.links.get(link_name)
    if timeout_ms <= 0:
        timeout_ms = REVERSE_TIMEOUT_MS_DEFAULT
    timeout_ms = min(timeout_ms, REVERSE_TIMEOUT_MS_MAX)
    link_state, leaders = recovery.reverse_mappings(state, link_name)
    recovery.check_can_follow(state, link_name, leaders, "reverse")
    namespaces = []
    for m in leaders:
        ns = state.namespaces.find(ResourceType.parse(m.resource_type), m.local_prefix)
        namespaces.append(
            plans.PlanNamespace(
                m.resource_type, m.local_prefix, m.remote_prefix, ns is not None and ns.reserved
            )
        )
    verify = Step(REVERSE_STEPS[0], True, f"link is {link_state}", 0)
    plan = plans.Plan(
        plans.REVERSE,
        link_name,
        config.link_id,
        config.remote_cluster_id,
        tuple(namespaces),
        timeout_ms,
        now_ms,
        (plans.PlanStep(verify.name, verify.ok, verify.result, verify.duration_ms),),
    )
    return plan, verify


def reverse(
    state: ClusterState, link_name: str, timeout_ms: int, now_ms: int
) -> Generator[Request, object, ReverseReport]:
    """Run on the current leader (KIP-986 "Reverse the replication direction
    of a namespace with full-consistency"): verify the link state, reserve
    (which aborts open transactions), wait (bounded) until the remote holds
    every record and committed offset, detach, attach swapped, promote the
    remote's namespaces.

    A durable plan (linkd/core/plans.py): journalled before the first change,
    each step's outcome journalled before the next step begins. Run again on
    a cluster that holds a plan for the link (after a crash of either side,
    or a step that failed), it continues that plan from its first step not
    done; every step is safe to run again. A step before the detach that
    fails rolls the plan back (this side's reservations cleared: it leads
    and takes writes again); from the detach on, a stopped plan stays
    journalled until a re-run finishes it."""
    config = state.links.get(link_name)
    report = ReverseReport(link_name)
    undone = state.faults.undid(24)
    plan = None if undone else (yield from _journalled(state, link_name, plans.REVERSE))
    if plan is None:
        plan, verify = _new_reverse_plan(state, link_name, timeout_ms, now_ms)
        yield Execute(tuple(journal(state.plans.put(plan))))
        report.steps.append(verify)
        yield _checkpoint(link_name, verify.name)
    else:
        if timeout_ms > 0:
            plan = replace(plan, timeout_ms=min(timeout_ms, REVERSE_TIMEOUT_MS_MAX))
        plan = replace(plan, restarts=plan.restarts + 1)
        yield Execute(tuple(journal(state.plans.put(plan))))
        report.resumed_from = plan.next_step(REVERSE_STEPS) or ""
        report.steps += [
            Step(s.name, True, f"(before the re-run) {s.result}", s.duration_ms)
            for s in plan.steps if s.ok
        ]
        yield Note(
            "warning",
            f"link {link_name!r}: reverse takes up its journalled plan (begun "
            f"{plan.begun}) at step {report.resumed_from}",
        )
    remote_id = plan.remote_cluster_id
    timeout = plan.timeout_ms
    leaders = [
        recovery.RecoveryMapping(n.resource_type, n.local_prefix, n.remote_prefix)
        for n in plan.namespaces
    ]
    address = config.value("remote_bootstrap")
    aborted: list[str] = []

    def reserve() -> Generator[Request, object, str]:
        now = yield from clock()
        effects: list[Effect] = []
        for m in leaders:
            result = admin.set_reserved(
                state, ResourceType.parse(m.resource_type), m.local_prefix, True, now
            )
            effects += result.effects
            aborted.extend(result.aborted)
        yield Execute(tuple(effects))
        return "reserved " + ", ".join(f"{m.resource_type} {m.local_prefix!r}" for m in leaders)

    def abort() -> Generator[Request, object, str]:
        # Reserving aborted them; a namespace reserved before still may hold some.
        now = yield from clock()
        prefixes = [m.local_prefix for m in leaders if m.resource_type == MappingType.TOPIC]
        groups = [m.local_prefix for m in leaders if m.resource_type == MappingType.GROUP]
        more, effects = state.abort_transactions_in(prefixes, now, groups)
        yield Execute(tuple(effects))
        ids = aborted + more
        return f"aborted {len(ids)} open transactions" + (f": {', '.join(ids)}" if ids else "")

    def wait_remote() -> Generator[Request, object, str]:
        deadline = (yield from clock()) + timeout
        while True:
            copies: list[recovery.RemoteCopy] = []
            for m in leaders:
                request = (
                    DescribePartitions(config.link_id, m.remote_prefix)
                    if m.resource_type == MappingType.TOPIC
                    else DescribePartitions(config.link_id, m.remote_prefix, m.remote_prefix, True)
                )
                reply = yield from call(
                    address, request, f"link {link_name!r}: describing", PartitionsDescription
                )
                d = reply.value()
                copies.append(
                    recovery.RemoteCopy(
                        m,
                        partitions={
                            k: (side.log_end_offset, side.high_watermark)
                            for k, side in d.partitions.items()
                        },
                        group_offsets=dict(d.group_offsets),
                    )
                )
            total, missing = recovery.reverse_missing(state, copies)
            if not missing:
                if not state.faults.undid(38):
                    for m in leaders:
                        if m.resource_type == MappingType.TOPIC:
                            yield from _refuse_diverged_swap(state, link_name, m)
                return f"remote holds every record of {total} partitions"
            if reply.now_ms >= deadline:
                raise ClusterError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"link {link_name!r}",
                    f"link {link_name!r}: the remote did not catch up within {timeout} ms "
                    f"({len(missing)} behind, e.g. {'; '.join(missing[:3])})",
                )
            yield Sleep(REVERSE_POLL_MS)

    def detach_all() -> Generator[Request, object, str]:
        changed = 0
        for i, m in enumerate(leaders, 1):
            current = state.links.get(link_name).attached_at(m.resource_type, m.local_prefix)
            if current is not None and current.local_role is Role.LEADER:
                now = yield from clock()
                yield from detach(
                    state, link_name, m.resource_type, m.local_prefix, now, require_remote=True
                )
                changed += 1
            yield _checkpoint(link_name, f"{REVERSE_STEPS[4]}#{i}")
        return (
            f"detached {changed} mappings here and on {remote_id!r}"
            + (f" ({len(leaders) - changed} were detached before)" if changed < len(leaders)
               else "")
        )

    def attach_swapped() -> Generator[Request, object, str]:
        changed = 0
        for i, m in enumerate(leaders, 1):
            current = state.links.get(link_name).attached_at(m.resource_type, m.local_prefix)
            if current is None or current.local_role is not Role.FOLLOWER:
                now = yield from clock()
                yield from attach(
                    state, link_name, m.resource_type, m.local_prefix, m.remote_prefix, "remote",
                    now, require_remote=True,
                )
                changed += 1
            yield _checkpoint(link_name, f"{REVERSE_STEPS[5]}#{i}")
        return (
            f"attached {changed} mappings with {remote_id!r} leading, here and on {remote_id!r}"
            + (f" ({len(leaders) - changed} were attached before)" if changed < len(leaders)
               else "")
        )

    def promote_remote() -> Generator[Request, object, str]:
        # The remote must hold the swapped mappings before it clears its
        # reservations (it refuses a namespace that still follows): a
        # handshake brings it this side's configuration first.
        current = state.links.get(link_name)
        shake = yield from call(
            address, Handshake(current), f"link {link_name!r}: handshake",
            LinkConfig,
        )
        answer = shake.value()
        accepted = rounds.accept_handshake_answer(state, link_name, answer, shake.now_ms)
        if accepted.effects:
            yield Execute(tuple(accepted.effects))
        request = Promote(
            config.link_id, tuple((m.resource_type, m.remote_prefix) for m in leaders)
        )
        reply = yield from call(
            address, request, f"link {link_name!r}: promoting namespaces", Promoted
        )
        promoted = reply.value()
        return (
            f"{remote_id!r} cleared its reservations; {promoted.partitions} "
            f"partitions started a new leader epoch; {state.cluster_id!r} follows"
        )

    bodies = (reserve, abort, wait_remote, detach_all, attach_swapped, promote_remote)
    for name, body in zip(REVERSE_STEPS[1:], bodies, strict=True):
        if plan.done(name):
            continue
        started = yield from clock()
        try:
            result = yield from body()
        except ClusterError as exc:
            ended = yield from clock()
            report.error = exc
            failure = f"{exc.code.name}: {exc.message}"
            if REVERSE_STEPS.index(name) < REVERSE_STEPS.index(REVERSE_NO_RETURN):
                cleared = yield from _roll_back_reverse(state, plan)
                failure += f"; rolled back: {cleared}"
                report.rolled_back = True
                yield Note("warning", f"link {link_name!r}: reverse stopped at {name} and was "
                           f"rolled back ({cleared}): {exc.message}")
            else:
                plan = plan.with_step(plans.PlanStep(name, False, failure, ended - started))
                yield Execute(tuple(journal(state.plans.put(plan))))
                failure += (
                    f"; the plan stays journalled: run reverse again on {state.cluster_id!r} "
                    "to finish it"
                )
                report.pending = True
                yield Note("warning", f"link {link_name!r}: reverse stopped at {name}, its "
                           f"plan is kept (run reverse again to finish it): {exc.message}")
            report.steps.append(Step(name, False, failure, ended - started))
            break
        ended = yield from clock()
        report.steps.append(Step(name, True, result, ended - started))
        plan = plan.with_step(plans.PlanStep(name, True, result, ended - started))
        last = name == REVERSE_STEPS[-1]
        yield Execute(tuple(journal(
            state.plans.end(link_name) if last else state.plans.put(plan)
        )))
        yield _checkpoint(link_name, name)
    if report.ok:
        yield Note("info", f"link {link_name!r} reversed: {remote_id!r} leads")
    return report


def _refuse_diverged_swap(
    state: ClusterState, link_name: str, m: recovery.RecoveryMapping
) -> Generator[Request, object, None]:
    """A reversal's last check before its first mapping change: the swapped
    mapping (this side following the remote) would be attached, not refused
    because following would cut records this side's own clients wrote
    (`recovery.check_attach_cuts`, the check of `attach-swapped-mappings`).
    The remote holding as many records is not enough: its log may have
    diverged (its own clients wrote while it was detached). Found here, the
    reversal is rolled back, nothing moved; found after the detach, its plan
    could never be finished and the namespace stayed writable nowhere."""
    config = state.links.get(link_name)
    reply = yield from call(
        config.value("remote_bootstrap"),
        DescribePartitions(config.link_id, m.remote_prefix, None, with_marks=True),
        f"link {link_name!r}: describing partitions",
        PartitionsDescription,
    )
    description = reply.value()
    swapped = Mapping(
        MappingType.TOPIC, m.local_prefix, m.remote_prefix, Leader.REMOTE, True, (0, 0, "")
    )
    refusal = recovery.check_attach_cuts(
        state, config, swapped, description.cluster_id, description.partitions,
        description.group_offsets,
    )
    if refusal is not None:
        raise ClusterError(
            refusal.code,
            f"link {link_name!r}",
            f"the remote holds as many records, but its log diverged from this side's, so the "
            f"swapped mapping could not be attached ({refusal.message})",
        )


def _roll_back_reverse(state: ClusterState, plan: plans.Plan) -> Generator[Request, object, str]:
    """A reversal stopped before any mapping changed: the reservations it
    made are cleared (this side leads and takes writes again) and the plan
    ends. Returns what was done, for the report."""
    now = yield from clock()
    effects: list[Effect] = []
    cleared = []
    for n in plan.namespaces:
        if n.reserved_before:
            continue
        kind = ResourceType.parse(n.resource_type)
        if state.faults.undid(25):
            continue  # the old rule: this side stays reserved
        effects += admin.set_reserved(state, kind, n.local_prefix, False, now).effects
        cleared.append(f"{n.resource_type} {n.local_prefix!r}")
    effects += journal(state.plans.end(plan.link))
    yield Execute(tuple(effects))
    if state.refresh_high_watermarks():
        yield WakeWaiters()
    if not cleared:
        return "nothing was reserved by it"
    return "writable here again: " + ", ".join(cleared)


__all__ = [
    "FAILOVER_STEPS",
    "PLAN_STEPS",
    "RECOVER_STEPS",
    "REVERSE_STEPS",
    "AdminResult",
    "Pending",
    "Procedure",
    "ReverseReport",
    "Served",
    "Step",
    "attach",
    "change_mapping",
    "create_link",
    "delete_link",
    "describe_partitions",
    "detach",
    "failover",
    "forget_deleted",
    "recover",
    "reverse",
    "serve",
    "set_mode",
    "set_reserved",
    "tell_removals",
]
