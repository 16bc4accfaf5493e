"""Offset-preserving replication between clusters (spec section 5), both ends.

Rules:
- A follower partition holds, at every offset, the same record as its source
  partition: the follower appends the source's record batches byte for byte
  (control markers and the source's leader epoch stamps included), only at its
  own log end offset, and never accepts a batch that does not continue its log.
- A replica fetch carries the follower's position and the leader epoch of its
  last batch. The source answers "diverged" when that epoch ended earlier in
  its own history (Kafka's OffsetsForLeaderEpoch rule); the follower then
  truncates to the end offset the source names and fetches again. This is how
  a source-side unclean leader election reaches every follower.
- ASYNC followers copy up to the source high watermark.
- A follower whose log is empty and behind the source's log start (attaching a
  topic whose oldest records were deleted) restarts its log at that start.
- Topic names map through the namespace prefixes: local = local_prefix + rest,
  where remote = remote_prefix + rest.
- Only the replication machinery writes into follower topics; these functions
  deliberately bypass the reservation checks that refuse clients.

Pure code: functions of ClusterState returning effects, as cluster.py does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from linkd.core import records as rb
from linkd.core.acls import AclBinding, AclFilter, AclOperation, PatternType, PermissionType
from linkd.core.acls import ResourceType as AclResource
from linkd.core.cluster import ClusterState
from linkd.core.effects import AppendBatch, CreateLogs, Effect, Journal, ResetLog, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig, Mapping
from linkd.core.links import in_prefix as in_prefix
from linkd.core.namespaces import ResourceType, validate_prefix
from linkd.core.partition import PartitionLog
from linkd.core.topic_config import (
    CLUSTER_LOCAL_KEYS,
    validate_configs,
    validate_partition_count,
    validate_topic_name,
)


def map_name(name: str, from_prefix: str, to_prefix: str) -> str:
    return to_prefix + name[len(from_prefix) :]




@dataclass(frozen=True, slots=True)
class ReplicaFetchPlan:
    """What the source may send: batches overlapping [offset, upper_offset)."""

    offset: int
    upper_offset: int
    high_watermark: int
    log_start_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Diverged:
    """The follower's log differs from the source's from `end_offset` on."""

    end_offset: int
    epoch: int


def epoch_end_offset(log: PartitionLog, epoch: int) -> tuple[int, int]:
    """Kafka's OffsetsForLeaderEpoch: the largest epoch <= `epoch` in the
    source's history and the offset where it ended (the LEO for the current
    epoch). (-1, -1) when the history holds nothing that old."""
    history = log.epoch_history
    best = -1
    for i, (e, _start) in enumerate(history):
        if e <= epoch:
            best = i
    if best < 0:
        return -1, -1
    e = history[best][0]
    end = history[best + 1][1] if best + 1 < len(history) else log.log_end_offset
    return e, end


def leader_mapping_for(config: LinkConfig, topic: str) -> Mapping | None:
    """The attached mapping under which this cluster leads `topic`, if any."""
    return config.mapping_for(topic, "leader")


def plan_replica_fetch(
    state: ClusterState,
    link_id: str,
    topic: str,
    partition: int,
    fetch_offset: int,
    last_fetched_epoch: int,
) -> ReplicaFetchPlan | Diverged:
    """Source side: what a follower at `fetch_offset` may copy next."""
    config = state.links.by_id(link_id)
    if leader_mapping_for(config, topic) is None:
        raise ClusterError(
            ErrorCode.UNKNOWN_TOPIC,
            f"topic {topic!r}",
            f"link {config.name!r}: topic {topic!r} is not in a namespace this cluster leads "
            "on the link",
        )
    log = state.partition(topic, partition)
    if last_fetched_epoch >= 0 and fetch_offset > log.log_start_offset:
        epoch, end = epoch_end_offset(log, last_fetched_epoch)
        if epoch < 0 or end < fetch_offset:
            return Diverged(max(end, log.log_start_offset), epoch)
    if fetch_offset > log.log_end_offset:
        return Diverged(log.log_end_offset, log.leader_epoch)
    offset = max(fetch_offset, log.log_start_offset)
    # ASYNC followers copy what the source acknowledged; SYNC followers copy to
    # the log end, and their next fetch offset is the acknowledgement the
    # source high watermark waits for (spec section 5).
    upper = log.log_end_offset if config.mode == "SYNC" else log.high_watermark
    return ReplicaFetchPlan(
        offset,
        max(upper, offset),
        log.high_watermark,
        log.log_start_offset,
        log.leader_epoch,
    )


def follower_position(state: ClusterState, topic: str, partition: int) -> tuple[int, int]:
    """(log end offset, epoch of the last batch) the follower sends with a fetch."""
    log = state.partition(topic, partition)
    last_epoch = log.batches[-1].partition_leader_epoch if log.batches else -1
    return log.log_end_offset, last_epoch


def create_replica_topic(
    state: ClusterState, name: str, partitions: int, configs: dict[str, str], topic_id: str
) -> list[Effect]:
    """Creates a follower topic with the source's partition count and configs.
    Only the replication machinery calls this, so the client-facing checks
    (reservation) do not apply; names and configs are still validated."""

    if name in state.topics:
        return []
    validate_topic_name(name)
    validate_partition_count(name, partitions)
    overrides = validate_configs(
        name, {k: v for k, v in configs.items() if k not in CLUSTER_LOCAL_KEYS}
    )
    record = {
        "type": "topic_create",
        "name": name,
        "topic_id": topic_id,
        "partitions": partitions,
        "configs": overrides,
    }
    state.apply_record(record)
    topic = state.topic(name)
    return [
        CreateLogs(topic_id, tuple(range(partitions)), topic.config.segment_bytes),
        Journal((record,)),
    ]


def follow_topic_shape(
    state: ClusterState, name: str, partitions: int, configs: dict[str, str]
) -> list[Effect]:
    """Follows the source's later partition additions and config changes."""

    effects: list[Effect] = []
    topic = state.topic(name)
    current_count = len(topic.partitions)
    if partitions > current_count:
        record: dict[str, Any] = {
            "type": "topic_partitions",
            "name": name,
            "partitions": partitions,
        }
        state.apply_record(record)
        effects += [
            CreateLogs(
                topic.topic_id, tuple(range(current_count, partitions)), topic.config.segment_bytes
            ),
            Journal((record,)),
        ]
    wanted = validate_configs(
        name, {k: v for k, v in configs.items() if k not in CLUSTER_LOCAL_KEYS}
    )
    local = {k: v for k, v in topic.overrides.items() if k in CLUSTER_LOCAL_KEYS}
    if {**wanted, **local} != topic.overrides:
        record = {"type": "topic_config", "name": name, "configs": {**wanted, **local}}
        state.apply_record(record)
        effects.append(Journal((record,)))
    return effects


def provenance_entry(
    state: ClusterState, topic_name: str, partition: int, config: LinkConfig
) -> list[dict[str, Any]]:
    """Records where the follower partition's next offsets come from, when
    that changed (a new link, a new link epoch, or after a detach): spec §8."""
    topic = state.topic(topic_name)
    entries = topic.provenance.get(partition, [])
    last = entries[-1] if entries else None
    if (
        last is not None
        and "start" in last
        and last["link_id"] == config.link_id
        and last["link_epoch"] == config.link_epoch
    ):
        return []
    start = state.partition(topic_name, partition).log_end_offset
    record = {
        "type": "provenance",
        "name": topic_name,
        "partition": partition,
        "entry": {
            "start": start,
            "source": config.remote_cluster_id,
            "link_id": config.link_id,
            "link_epoch": config.link_epoch,
        },
    }
    state.apply_record(record)
    return [record]


def detach_provenance(
    state: ClusterState, config: LinkConfig, mapping: Mapping
) -> list[dict[str, Any]]:
    """A follower topic namespace leaves the link: every partition that has a
    provenance history records where the link's data ends."""
    records: list[dict[str, Any]] = []
    if mapping.resource_type != "topic" or mapping.local_role != "follower":
        return records
    for name in sorted(state.topics):
        if not in_prefix(name, mapping.local_prefix):
            continue
        topic = state.topics[name]
        for p, entries in sorted(topic.provenance.items()):
            if entries and "start" in entries[-1] and entries[-1]["link_id"] == config.link_id:
                record = {
                    "type": "provenance",
                    "name": name,
                    "partition": p,
                    "entry": {
                        "detached_at": topic.partitions[p].log_end_offset,
                        "link_id": config.link_id,
                    },
                }
                state.apply_record(record)
                records.append(record)
    return records


def append_replica(
    state: ClusterState,
    topic_name: str,
    partition: int,
    data: bytes,
    source_log_start: int,
    config: LinkConfig | None = None,
) -> list[Effect]:
    """Follower side: appends fetched batches at the log end, byte for byte
    (and, given the link's config, notes the provenance of what it appends)."""

    topic = state.topic(topic_name)
    log = state.partition(topic_name, partition)
    effects: list[Effect] = []
    if config is not None and data:
        records = provenance_entry(state, topic_name, partition, config)
        if records:
            effects.append(Journal(tuple(records)))
    if not log.batches and source_log_start > log.log_end_offset:
        # Attaching a topic whose oldest records are gone: start where it starts.
        fresh = PartitionLog(topic_name, partition, log_start_offset=source_log_start)
        topic.partitions[partition] = fresh
        log = fresh
        effects.append(ResetLog(topic.topic_id, partition, source_log_start))
    if log.hw_cap is None:
        # Copied records become visible only as far as the source's HW says
        # (follow_source_high_watermarks), never merely because they are durable.
        log.hw_cap = log.high_watermark
    try:
        batches = list(rb.iter_batches(data))
    except rb.CorruptBatchError as exc:
        raise ClusterError(
            ErrorCode.CORRUPT_MESSAGE, log.name, f"replica fetch for {log.name}: {exc}"
        ) from exc
    for position, header in batches:
        if header.last_offset < log.log_end_offset:
            continue  # the fetch returns the whole batch containing the fetch offset
        if header.base_offset != log.log_end_offset:
            raise ClusterError(
                ErrorCode.DIVERGED_LOG,
                log.name,
                f"replica fetch for {log.name}: batch at {header.base_offset} does not continue "
                f"the follower log at {log.log_end_offset}",
            )
        batch = bytes(data[position : position + header.size_bytes])
        marker = rb.control_marker_type(batch) if header.is_control else None
        log.apply_batch(header, marker)
        effects.append(AppendBatch(topic.topic_id, partition, batch, header))
    return effects


def follow_source_high_watermarks(
    state: ClusterState, link_name: str, caps: list[tuple[str, int, int]]
) -> bool:
    """Follower side, after a fetch round: each follower partition's HW may
    reach its source's HW (never beyond: readers here see only what the source
    acknowledged). On a SYNC link the caps of one response apply together or
    not at all, only once every partition holds its source's HW, so a
    transaction whose markers span partitions becomes visible at once (spec
    invariant 5). Returns whether any HW moved."""
    config = state.links.configs.get(link_name)
    logs = [(state.partition(t, p), t, p, hw) for t, p, hw in caps]
    if config is not None and config.mode == "SYNC":
        if any(log.log_end_offset < hw for log, _t, _p, hw in logs):
            return False
    moved = False
    for log, t, p, hw in logs:
        log.hw_cap = hw
        moved |= log.advance_high_watermark(state.links.sync_floor(t, p))
    return moved


def truncate_replica(
    state: ClusterState,
    topic_name: str,
    partition: int,
    offset: int,
    config: LinkConfig | None = None,
) -> list[Effect]:
    """Follower side: cuts the log at the source's divergence point. Given the
    link's config, the cut is recorded in the partition's provenance history
    (`ccr-admin provenance` shows it: spec section 8)."""

    topic = state.topic(topic_name)
    log = state.partition(topic_name, partition)
    target = max(min(offset, log.log_end_offset), log.log_start_offset)
    # Cut at the batch boundary at or below the target.
    boundary = log.log_start_offset
    for entry in log.batches:
        if entry.base_offset <= target:
            boundary = entry.base_offset if entry.next_offset > target else entry.next_offset
    boundary = max(boundary, log.log_start_offset)
    if boundary >= log.log_end_offset:
        return []
    removed = log.log_end_offset - boundary
    log.truncate_to(boundary)
    effects: list[Effect] = [TruncateLog(topic.topic_id, partition, boundary)]
    if config is not None:
        moved = clamp_replicated_offsets(state, topic_name, partition, boundary)
        record = {
            "type": "provenance",
            "name": topic_name,
            "partition": partition,
            "entry": {
                "truncated_to": boundary,
                "link_id": config.link_id,
                "removed": removed,
                "reason": "diverged",
                "offsets_moved": [[g, old_offset] for g, old_offset, _r in moved],
            },
        }
        state.apply_record(record)
        effects.append(Journal((record, *[r for _g, _o, r in moved])))
    return effects


def clamp_replicated_offsets(
    state: ClusterState, topic_name: str, partition: int, offset: int
) -> list[tuple[str, int, dict[str, Any]]]:
    """After a follower partition was cut at `offset`, the committed offsets of
    replicated groups (groups in a reserved namespace: only replication writes
    them) that point past the cut move back to it, so no replicated offset
    exceeds the follower's log (spec invariant 6); the cut's provenance entry
    reports each move. Returns (group, old offset, journal record)."""

    out: list[tuple[str, int, dict[str, Any]]] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not any(ns.reserved for ns in state.namespaces.matching(ResourceType.GROUP, group_id)):
            continue
        current = state.groups.committed(group_id, [(topic_name, partition)])
        committed = current.get((topic_name, partition))
        if committed is None or committed.offset <= offset:
            continue
        record = state.groups.set_committed(
            group_id,
            topic_name,
            partition,
            offset,
            committed.metadata,
            -1,
            committed.commit_timestamp_ms,
        )
        out.append((group_id, committed.offset, record))
    return out


def follower_mappings(config: LinkConfig, resource_type: str = "topic") -> list[Mapping]:
    return [
        m
        for m in config.attached_mappings()
        if m.resource_type == resource_type and m.local_role == "follower"
    ]


def leader_mappings(config: LinkConfig, resource_type: str = "topic") -> list[Mapping]:
    return [
        m
        for m in config.attached_mappings()
        if m.resource_type == resource_type and m.local_role == "leader"
    ]


def provenance_summary(state: ClusterState, topic: str, partition: int) -> dict[str, Any]:
    """How many provenance entries a partition has, and the latest one."""
    t = state.topics.get(topic)
    entries = t.provenance.get(partition, []) if t is not None else []
    last = entries[-1] if entries else {}
    return {
        "provenance_entries": len(entries),
        "provenance_start_offset": int(
            last.get("start", last.get("detached_at", last.get("truncated_to", -1)))
        ),
        "provenance_source": str(last.get("source", "")),
    }


def link_summary(state: ClusterState, name: str, now_ms: int) -> dict[str, Any]:
    """What describe-link shows (a plain dict the shells encode)."""
    config = state.links.get(name)
    runtime = state.links.runtime[name]
    partitions = []
    for (topic, partition, role), p in sorted(runtime.partitions.items()):
        source_hw = p.source_high_watermark
        if role == "leader" and topic in state.topics:
            # The source's own HW is known live, even while the follower is away.
            logs = state.topics[topic].partitions
            if partition < len(logs):
                source_hw = max(source_hw, logs[partition].high_watermark)
        lag = max(0, source_hw - p.log_end_offset)
        partitions.append(
            {
                "topic": topic,
                "partition": partition,
                "role": role,
                "lag_records": lag,
                "lag_ms": 0 if lag == 0 else max(0, now_ms - p.caught_up_at_ms),
                "log_end_offset": p.log_end_offset,
                "source_high_watermark": source_hw,
                **provenance_summary(state, topic, partition),
            }
        )
    return {
        "config": config,
        "state": runtime.state.value,
        "entered_at_ms": runtime.entered_at_ms,
        "history": list(runtime.history),
        "partitions": partitions,
    }


# -- link administration (pure; the shell adds the remote calls) ----------------------


def _role_for(mapping: Mapping) -> str:
    return mapping.local_role


def check_attach(
    state: ClusterState,
    link_name: str,
    resource_type: str,
    local_prefix: str,
    remote_prefix: str,
    leader: str,
) -> Mapping:
    """Every local check of an attach, changing nothing; returns the mapping."""

    config = state.links.get(link_name)
    if leader not in ("local", "remote"):
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {link_name!r}",
            f"link {link_name!r}: leader must be 'local' or 'remote', not {leader!r}",
        )
    kind = ResourceType.parse(resource_type)
    validate_prefix(kind, remote_prefix)
    ns = state.namespaces.get(kind, local_prefix)
    current = config.mappings.get((kind.label, local_prefix))
    if current is not None and current.attached:
        if (current.remote_prefix, current.leader) == (remote_prefix, leader):
            return current
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            f"link {link_name!r}",
            f"link {link_name!r}: {ns.name} is already attached (to remote "
            f"prefix {current.remote_prefix!r}, leader {current.leader}); "
            "detach it first",
        )
    if leader == "remote":
        for candidate in [ns, *state.namespaces.overlapping(ns)]:
            following = candidate.follower_link
            if following is not None and following != link_name:
                raise ClusterError(
                    ErrorCode.ALREADY_FOLLOWING,
                    ns.name,
                    f"cannot make {ns.name} follow link {link_name!r}: "
                    f"{'it' if candidate is ns else 'the overlapping ' + candidate.name} "
                    f"already follows link {following!r}",
                )
    return Mapping(kind.label, local_prefix, remote_prefix, leader, True, (0, 0, ""))


def put_mapping(
    state: ClusterState, link_name: str, mapping: Mapping, now_ms: int
) -> list[dict[str, Any]]:
    """Stores an attach or detach (versioned) and brings the namespace
    attachments in line with it."""
    config = state.links.get(link_name)
    previous = config.mappings.get(mapping.key)
    records: list[dict[str, Any]] = []
    if previous is not None and previous.attached and not mapping.attached:
        records += detach_provenance(state, config, previous)
    records += state.links.put_mapping(link_name, mapping, now_ms)
    return records + reconcile_attachments(state, link_name)


def reconcile_attachments(state: ClusterState, link_name: str) -> list[dict[str, Any]]:
    """Makes the namespace table's attachments match the link's mappings.
    A mapping whose local namespace is missing creates it (a follower
    namespace must exist to be reserved); a follower mapping refused by the
    one-link-per-follower rule stays unattached and is reported by describe."""

    config = state.links.configs.get(link_name)
    records: list[dict[str, Any]] = []
    wanted: dict[tuple[str, str], str] = {}
    if config is not None:
        wanted = {m.key: _role_for(m) for m in config.attached_mappings()}
    for ns in state.namespaces.list():
        for link, _role in list(ns.attachments):
            if link == link_name and (ns.type.label, ns.prefix) not in wanted:
                records += state.namespaces.detach(ns.type, ns.prefix, link_name)
    for (rtype, prefix), role in sorted(wanted.items()):
        kind = ResourceType.parse(rtype)
        if state.namespaces.find(kind, prefix) is None:
            records += state.namespaces.create(kind, prefix, role == "follower")
        ns = state.namespaces.get(kind, prefix)
        if (link_name, role) in ns.attachments:
            continue
        for link, other in list(ns.attachments):
            if link == link_name and other != role:
                records += state.namespaces.detach(kind, prefix, link_name)
        try:
            records += state.namespaces.attach(kind, prefix, link_name, role)
        except ClusterError:
            continue
    return records


def detach_mapping(
    state: ClusterState, link_name: str, resource_type: str, local_prefix: str, now_ms: int
) -> list[dict[str, Any]]:

    config = state.links.get(link_name)
    kind = ResourceType.parse(resource_type)
    current = config.mappings.get((kind.label, local_prefix))
    if current is None or not current.attached:
        raise ClusterError(
            ErrorCode.UNKNOWN_NAMESPACE,
            f"link {link_name!r}",
            f"link {link_name!r}: {kind.label} namespace {local_prefix!r} is not attached to it",
        )
    return put_mapping(state, link_name, replace_mapping(current, attached=False), now_ms)


def replace_mapping(mapping: Mapping, *, attached: bool) -> Mapping:
    return replace(mapping, attached=attached)


def delete_link(state: ClusterState, link_name: str) -> list[dict[str, Any]]:
    """Detaches every namespace (followers stay reserved), then forgets the link."""
    config = state.links.get(link_name)
    records: list[dict[str, Any]] = []
    for mapping in config.attached_mappings():
        records += detach_provenance(state, config, mapping)
    for ns in state.namespaces.list():
        if any(link == link_name for link, _ in ns.attachments):
            records += state.namespaces.detach(ns.type, ns.prefix, link_name)
    return records + state.links.delete(link_name)


def follower_lag(state: ClusterState, link_name: str, now_ms: int) -> list[dict[str, Any]]:
    return [
        p
        for p in link_summary(state, link_name, now_ms)["partitions"]
        if p["role"] == "follower" and p["lag_records"] > 0
    ]


def failover(
    state: ClusterState, link_name: str, force: bool, now_ms: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Makes this cluster's follower namespaces of the link writable: detach
    them from the link and clear their reservation. Refused while follower
    partitions lag (LAG_NOT_ZERO) unless forced; returns (records, the lag
    abandoned)."""

    config = state.links.get(link_name)
    lagging = follower_lag(state, link_name, now_ms)
    if lagging and not force:
        total = sum(p["lag_records"] for p in lagging)
        raise ClusterError(
            ErrorCode.LAG_NOT_ZERO,
            f"link {link_name!r}",
            f"link {link_name!r} ({state.links.state_name(link_name)}): {len(lagging)} follower "
            f"partitions still lag by {total} records; wait, or fail over with force to "
            "abandon them",
        )
    records: list[dict[str, Any]] = []
    for mapping in list(config.attached_mappings()):
        if mapping.local_role != "follower":
            continue
        records += put_mapping(state, link_name, replace_mapping(mapping, attached=False), now_ms)
        kind = ResourceType.parse(mapping.resource_type)
        records += state.namespaces.set_reserved(kind, mapping.local_prefix, False)
        if mapping.resource_type == "topic":
            # A new leader epoch on every partition made writable, so records
            # written from now on are told apart from the old leader's tail.
            records += start_new_epochs(state, mapping.local_prefix)
    return records, lagging


# -- consumer offsets (spec section 7) ------------------------------------------------

# (group, topic, partition, offset, metadata, leader epoch)
GroupOffset = tuple[str, str, int, int, str, int]


def offsets_topic_name(source_cluster_id: str) -> str:
    """Where a follower keeps the offsets a link replicated from one source."""
    return f"__consumer_offsets_{source_cluster_id}"


def _map_through(name: str, mappings: list[Mapping]) -> str | None:
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
) -> tuple[list[dict[str, Any]], list[Effect], list[GroupOffset]]:
    """Follower side: the source's committed offsets of the groups this side
    follows, under local group and topic names. Returns (journal records,
    effects that append them to __consumer_offsets_<source>, offsets held
    back). An offset is applied only once the follower partition's high
    watermark has reached it (a replicated offset never points past the
    follower's data), and never moves a group's offset backwards (spec §10,
    invariant 6); held-back offsets are retried by the caller."""

    config = state.links.get(link_name)
    groups = follower_mappings(config, "group")
    topics = follower_mappings(config, "topic")
    records: list[dict[str, Any]] = []
    held: list[GroupOffset] = []
    specs: list[rb.RecordSpec] = []
    for group, topic, partition, offset, metadata, epoch in offsets:
        local_group = _map_through(group, groups)
        local_topic = _map_through(topic, topics)
        if local_group is None or local_topic is None or local_topic not in state.topics:
            continue
        log = state.topics[local_topic].partitions
        if partition >= len(log) or offset < 0:
            continue
        if offset > log[partition].high_watermark:
            held.append((group, topic, partition, offset, metadata, epoch))
            continue
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
        log_.apply_batch(header)
        effects.append(AppendBatch(state.topic(internal).topic_id, 0, batch, header))
    return records, effects, held


# -- ACL sync (spec section 7) ---------------------------------------------------------

# (resource name, prefixed pattern?, principal, host)
ReadAcl = tuple[str, bool, str, str]


def source_read_acls(state: ClusterState, prefix: str) -> list[ReadAcl]:
    """Source side: principals allowed to READ topics of the namespace, from
    ALLOW bindings for READ or ALL on literal topics inside it or on prefixed
    patterns that lie inside it."""

    out: list[ReadAcl] = []
    for b in state.acls.describe(AclFilter(resource_type=AclResource.TOPIC)):
        if b.permission_type != PermissionType.ALLOW:
            continue
        if b.operation not in (AclOperation.READ, AclOperation.ALL):
            continue
        if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            continue
        if not in_prefix(b.resource_name, prefix):
            continue
        out.append((b.resource_name, b.pattern_type == PatternType.PREFIXED, b.principal, b.host))
    return sorted(set(out))


def apply_read_acls(
    state: ClusterState, link_name: str, source_prefix: str, acls: list[ReadAcl]
) -> list[dict[str, Any]]:
    """Follower side: the same principals may READ the follower topics (mapped
    names). Add-only: a READ granted on the follower is never revoked by the
    link. WRITE is never synced: only the link writes follower topics."""

    config = state.links.get(link_name)
    mapping = next(
        (m for m in follower_mappings(config, "topic") if m.remote_prefix == source_prefix), None
    )
    if mapping is None:
        return []
    bindings = [
        AclBinding(
            AclResource.TOPIC,
            map_name(name, mapping.remote_prefix, mapping.local_prefix),
            PatternType.PREFIXED if prefixed else PatternType.LITERAL,
            principal,
            host,
            AclOperation.READ,
            PermissionType.ALLOW,
        )
        for name, prefixed, principal, host in acls
    ]
    _results, records = state.acls.create(bindings)
    return records


def accept_remote_config(
    state: ClusterState, remote_view: LinkConfig, now_ms: int
) -> list[dict[str, Any]]:
    """Merges the remote's view of a link, then records provenance for the
    follower namespaces the merge detached and reconciles attachments."""
    before: dict[tuple[str, str], Mapping] = {}
    existing = state.links.configs.get(remote_view.name)
    if existing is not None:
        before = {m.key: m for m in existing.attached_mappings()}
    records = state.links.accept_mirror(remote_view, now_ms)
    config = state.links.get(remote_view.name)
    still = {m.key for m in config.attached_mappings()}
    for key, mapping in before.items():
        if key not in still:
            records += detach_provenance(state, config, mapping)
    return records + reconcile_attachments(state, remote_view.name)


# -- leader epochs of a promoted namespace (failover, reversal) ------------------------


def start_new_epochs(state: ClusterState, prefix: str) -> list[dict[str, Any]]:
    """Starts a new leader epoch, at the log end, on every partition of every
    topic in a topic namespace that becomes writable here (journalled as an
    unclean election's bump is). Records written from then on carry it, so a
    cluster that kept the old leader's tail sees the divergence when it
    follows this one (OffsetsForLeaderEpoch)."""
    records: list[dict[str, Any]] = []
    for name in sorted(state.topics):
        if not in_prefix(name, prefix):
            continue
        for p, log in enumerate(state.topics[name].partitions):
            record = {
                "type": "leader_epoch",
                "name": name,
                "partition": p,
                "epoch": log.leader_epoch + 1,
                "start": log.log_end_offset,
            }
            state.apply_record(record)
            records.append(record)
    return records
