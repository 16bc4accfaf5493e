"""What a link copies besides records (spec section 7): the committed offsets
of the groups a follower follows, and the READ ACLs of the topics it follows.

Pure: the follower side turns what the source sent into journal records and
effects; the source side picks what to send.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from linkd.core import journal as jr
from linkd.core import records as rb
from linkd.core.acls import AclBinding, AclFilter, AclOperation, PatternType, PermissionType
from linkd.core.acls import ResourceType as AclResource
from linkd.core.cluster import ClusterState
from linkd.core.effects import Effect, Journal
from linkd.core.histories import copied_end, local_side
from linkd.core.links import LinkConfig, Mapping
from linkd.core.replication import (
    create_replica_topic,
    follower_mappings,
    in_prefix,
    map_name,
)

# -- consumer offsets (spec section 7) ------------------------------------------------


class GroupOffset(NamedTuple):
    """A committed offset as a link carries it (group and topic under the
    source's names)."""

    group: str
    topic: str
    partition: int
    offset: int
    metadata: str
    leader_epoch: int


def offsets_topic_name(source_cluster_id: str) -> str:
    """Where a follower keeps the offsets a link replicated from one source."""
    return f"__consumer_offsets_{source_cluster_id}"


def map_through(name: str, mappings: list[Mapping]) -> str | None:
    best = max(
        (m for m in mappings if in_prefix(name, m.remote_prefix)),
        key=lambda m: len(m.remote_prefix),
        default=None,
    )
    return None if best is None else map_name(name, best.remote_prefix, best.local_prefix)


def apply_replicated_offsets(
    state: ClusterState,
    link_name: str,
    offsets: list[GroupOffset],
    now_ms: int,
    new_topic_id: str,
    retried: list[GroupOffset] | None = None,
) -> tuple[list[Effect], list[GroupOffset]]:
    """Follower side: the source's committed offsets of the groups this side
    follows, under local group and topic names (`retried`: offsets held back
    before, tried again unless `offsets` has a newer one of the same group
    partition; they are not news). Returns (the effects that
    append them to __consumer_offsets_<source> and then journal them, none
    when nothing changed; the offsets held back). A replicated offset never
    points past the follower's data and never moves a group's offset
    backwards (spec §10, invariant 6): an offset beyond the follower
    partition's high watermark moves the group here to that high watermark
    (the group processed every record this cluster holds: during a long
    catch-up the group keeps up with what arrives), and is held back whole,
    retried by the caller. Every offset heard is remembered in the link's
    runtime (`LinkRuntime.heard_offsets`): a failover reports how far the
    group here stands behind it."""

    config = state.links.get(link_name)
    groups = follower_mappings(config, "group")
    topics = follower_mappings(config, "topic")
    runtime = state.links.runtime.get(link_name)
    held: list[GroupOffset] = []
    wanted: list[tuple[str, str, int, int, str, int]] = []
    fresh = {(o.group, o.topic, o.partition) for o in offsets}
    again = [o for o in retried or [] if (o.group, o.topic, o.partition) not in fresh]
    for i, (group, topic, partition, offset, metadata, epoch) in enumerate([*offsets, *again]):
        local_group = map_through(group, groups)
        local_topic = map_through(topic, topics)
        if local_group is None or local_topic is None or local_topic not in state.topics:
            continue
        log = state.topics[local_topic].partitions
        if partition >= len(log) or offset < 0:
            continue
        if runtime is not None and i < len(offsets) and not state.faults.undid(21):
            runtime.heard_offsets[(local_group, local_topic, partition)] = (offset, now_ms)
        hw = log[partition].high_watermark
        if offset > hw:
            held.append(GroupOffset(group, topic, partition, offset, metadata, epoch))
            if state.faults.undid(21):
                continue  # the old rule: nothing until the data reaches it
            # The group stands at the follower's data; the commit's leader
            # epoch belongs to a record this cluster does not hold yet.
            offset, epoch = hw, -1
        wanted.append((local_group, local_topic, partition, offset, metadata, epoch))
    return commit_replicated(state, config, wanted, now_ms, new_topic_id), held


def commit_replicated(
    state: ClusterState,
    config: LinkConfig,
    wanted: list[tuple[str, str, int, int, str, int]],
    now_ms: int,
    new_topic_id: str,
) -> list[Effect]:
    """Stores replicated commits (local group, topic, partition, offset,
    metadata, leader epoch) that move a group forward, appended to
    __consumer_offsets_<source> and journaled; none for one that would not."""
    records: list[jr.JournalRecord] = []
    specs: list[rb.RecordSpec] = []
    for local_group, local_topic, partition, offset, metadata, epoch in wanted:
        current = state.groups.committed(local_group, [(local_topic, partition)]).get(
            (local_topic, partition)
        )
        if current is not None and current.offset >= offset:
            continue
        records.append(
            state.groups.set_committed(
                local_group, local_topic, partition, offset, metadata, epoch, now_ms
            )
        )
        specs.append(
            rb.RecordSpec(
                key=f"{local_group}\x00{local_topic}\x00{partition}".encode(),
                value=f'{{"offset": {offset}, "leader_epoch": {epoch}}}'.encode(),
                timestamp=now_ms,
            )
        )
    effects: list[Effect] = []
    if specs:
        internal = offsets_topic_name(config.remote_cluster_id)
        if internal not in state.topics:
            effects += create_replica_topic(state, internal, 1, {}, new_topic_id)
        log_ = state.partition(internal, 0)
        batch = rb.build_batch(
            specs, base_offset=log_.log_end_offset, partition_leader_epoch=log_.leader_epoch
        )
        header = rb.parse_header(batch)
        effects.append(state.append(state.topic(internal), 0, batch, header, now_ms))
        effects.append(Journal(tuple(records)))
    return effects


@dataclass(frozen=True, slots=True)
class GroupResume:
    """One partition of a replicated group after a failover: where the group
    resumes on this cluster, and the last commit this cluster heard of from
    the source (the group processed up to there on the old leader)."""

    group: str
    topic: str
    partition: int
    # The group's committed offset here after the failover (-1: none; a
    # consumer starts where its auto.offset.reset says).
    resume_offset: int
    # The last commit heard of (-1: none heard since this cluster started),
    # and when (0: never).
    heard_offset: int
    heard_at_ms: int

    @property
    def behind(self) -> int:
        """Records the group processed on the old leader that it does not
        resume past here (they lie beyond this cluster's data, or the
        commit was never heard): 0 when it resumes where it last committed."""
        if self.heard_offset < 0:
            return 0
        return self.heard_offset - max(self.resume_offset, 0)


def settle_failover_groups(
    state: ClusterState,
    link_name: str,
    group_prefixes: list[str],
    now_ms: int,
    new_topic_id: str,
) -> tuple[list[Effect], list[GroupResume]]:
    """After a failover made the follower namespaces writable (their high
    watermarks lifted to their log ends): each group of `group_prefixes`
    moves to the last commit heard of, or to the end of this cluster's copy
    of the source's data if that is nearer (a commit never points past the
    data, nor past where this log parted from the source's: `copied_end`);
    returns the
    effects and a row per group partition, every commit heard of or held."""
    config = state.links.get(link_name)
    runtime = state.links.runtime.get(link_name)
    heard = dict(runtime.heard_offsets) if runtime is not None else {}

    def ours(group: str) -> bool:
        return any(in_prefix(group, p) for p in group_prefixes)

    wanted: list[tuple[str, str, int, int, str, int]] = []
    for (group, topic, partition), (offset, _at) in sorted(heard.items()):
        if not ours(group) or topic not in state.topics:
            continue
        log = state.topics[topic].partitions
        if partition >= len(log):
            continue
        if state.faults.undid(21):
            continue
        # Past where this log stops holding the source's records (its own
        # clients' writes since a detach), the source's offsets name other
        # records: the group processed none of them.
        end = log[partition].high_watermark
        if not state.faults.undid(41):
            end = copied_end(local_side(state, topic, partition, with_batches=False))
        wanted.append((group, topic, partition, min(offset, end), "", -1))
    effects = commit_replicated(state, config, wanted, now_ms, new_topic_id)
    keys = {k for k in heard if ours(k[0])} if not state.faults.undid(21) else set()
    for group_id, _state, _type in state.groups.list_groups():
        if ours(group_id):
            keys |= {(group_id, t, p) for t, p in state.groups.committed(group_id, None)}
    if state.faults.undid(21):
        keys = set()  # the old answer says nothing of groups
    rows: list[GroupResume] = []
    for group, topic, partition in sorted(keys):
        c = state.groups.committed(group, [(topic, partition)]).get((topic, partition))
        offset, at = heard.get((group, topic, partition), (-1, 0))
        rows.append(
            GroupResume(group, topic, partition, -1 if c is None else c.offset, offset, at)
        )
    return effects, rows


# -- ACL sync (spec section 7) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadAcl:
    """A READ binding of a source topic pattern that follows the link: who
    may (or, `deny`, may not) read the follower topics of the same names."""

    resource_name: str
    prefixed: bool  # a PREFIXED pattern, else LITERAL
    principal: str
    host: str
    deny: bool = False


def source_read_acls(state: ClusterState, prefix: str) -> list[ReadAcl]:
    """Source side: the READ bindings of the namespace's topics, from ALLOW
    and DENY bindings for READ or ALL on literal topics inside it or on
    prefixed patterns that lie inside it. A DENY follows the link as an ALLOW
    does: otherwise a principal denied here could read the same records on a
    follower where a broader ALLOW (a wildcard, say) admits it."""
    out: list[ReadAcl] = []
    for b in state.acls.describe(AclFilter(resource_type=AclResource.TOPIC)):
        if b.operation not in (AclOperation.READ, AclOperation.ALL):
            continue
        if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            continue
        if not in_prefix(b.resource_name, prefix):
            continue
        out.append(
            ReadAcl(
                b.resource_name,
                b.pattern_type == PatternType.PREFIXED,
                b.principal,
                b.host,
                b.permission_type == PermissionType.DENY,
            )
        )
    return sorted(set(out), key=lambda a: (a.resource_name, a.principal, a.host, a.deny))


@dataclass(frozen=True, slots=True)
class PrincipalAcl:
    """A binding of a principal in a principal namespace the source leads,
    that follows the link (KIP-986's third namespace type): on a topic or a
    group, READ or DESCRIBE (ALL counts as READ, as in topic ACL sync), ALLOW
    or DENY."""

    resource_type: int  # acls.ResourceType: TOPIC or GROUP
    resource_name: str
    prefixed: bool
    principal: str
    host: str
    operation: int  # acls.AclOperation: READ or DESCRIBE
    deny: bool = False


# What a principal namespace's ACLs carry to the follower: reading and
# describing. Nothing that writes (WRITE, CREATE, DELETE, ALTER...) ever
# follows a link: only the link writes follower topics.
PRINCIPAL_SYNCED_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALL)


def source_principal_acls(state: ClusterState, prefix: str) -> list[PrincipalAcl]:
    """Source side: the bindings of every principal under `prefix` (a
    principal namespace, e.g. "User:app-") on topics and groups that follow
    the link (PRINCIPAL_SYNCED_OPERATIONS)."""
    out: list[PrincipalAcl] = []
    for b in state.acls.describe(AclFilter()):
        if not in_prefix(b.principal, prefix) or b.operation not in PRINCIPAL_SYNCED_OPERATIONS:
            continue
        if b.resource_type not in (AclResource.TOPIC, AclResource.GROUP):
            continue
        if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            continue
        operation = AclOperation.READ if b.operation == AclOperation.ALL else b.operation
        out.append(
            PrincipalAcl(
                int(b.resource_type),
                b.resource_name,
                b.pattern_type == PatternType.PREFIXED,
                b.principal,
                b.host,
                int(operation),
                b.permission_type == PermissionType.DENY,
            )
        )
    return sorted(set(out), key=lambda a: (a.principal, a.resource_type, a.resource_name,
                                           a.operation, a.host, a.deny))


def apply_principal_acls(
    state: ClusterState, link_name: str, source_prefix: str, acls: list[PrincipalAcl]
) -> list[jr.JournalRecord]:
    """Follower side: the bindings of a principal namespace this side follows,
    with the principal renamed by the mapping (the source's prefix to this
    side's) and topic and group names renamed by the link's follower
    mappings that hold them (a name in no followed namespace keeps its name).
    Add-only, as READ ACL sync: the link never revokes a binding."""
    config = state.links.get(link_name)
    mapping = next(
        (m for m in follower_mappings(config, "principal") if m.remote_prefix == source_prefix),
        None,
    )
    if mapping is None:
        return []
    bindings = []
    for a in acls:
        if not in_prefix(a.principal, source_prefix):
            continue  # not this namespace's: never trusted from the remote
        kind = AclResource(a.resource_type)
        bindings.append(
            AclBinding(
                kind,
                _followed_name(config, kind, a.resource_name),
                PatternType.PREFIXED if a.prefixed else PatternType.LITERAL,
                map_name(a.principal, mapping.remote_prefix, mapping.local_prefix),
                a.host,
                AclOperation(a.operation),
                PermissionType.DENY if a.deny else PermissionType.ALLOW,
            )
        )
    _results, records = state.acls.create(bindings)
    return list(records)


def _followed_name(config: LinkConfig, kind: AclResource, name: str) -> str:
    """A source topic or group name as this side names it: mapped by the
    longest follower mapping of its type that holds it, else unchanged."""
    label = "topic" if kind == AclResource.TOPIC else "group"
    holding = [m for m in follower_mappings(config, label) if in_prefix(name, m.remote_prefix)]
    if not holding:
        return name
    best = max(holding, key=lambda m: len(m.remote_prefix))
    return map_name(name, best.remote_prefix, best.local_prefix)


def apply_read_acls(
    state: ClusterState, link_name: str, source_prefix: str, acls: list[ReadAcl]
) -> list[jr.JournalRecord]:
    """Follower side: the same principals may (or, DENY, may not) READ the
    follower topics (mapped names). Add-only: a binding added on the follower
    is never revoked by the link. WRITE is never synced: only the link writes
    follower topics."""
    config = state.links.get(link_name)
    mapping = next(
        (m for m in follower_mappings(config, "topic") if m.remote_prefix == source_prefix), None
    )
    if mapping is None:
        return []
    bindings = [
        AclBinding(
            AclResource.TOPIC,
            map_name(a.resource_name, mapping.remote_prefix, mapping.local_prefix),
            PatternType.PREFIXED if a.prefixed else PatternType.LITERAL,
            a.principal,
            a.host,
            AclOperation.READ,
            PermissionType.DENY if a.deny else PermissionType.ALLOW,
        )
        for a in acls
    ]
    _results, records = state.acls.create(bindings)
    return list(records)
