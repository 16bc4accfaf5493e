"""`AdminClient`: topics, offsets, groups and cluster state of one cluster.

Shaped like confluent-kafka's AdminClient, but synchronous: every method
returns its result (or raises `CcrError`) instead of returning futures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from admin.assignors import ProtocolError, decode_assignment
from admin.client import (
    OFFSET_INVALID,
    Config,
    Connection,
    TopicPartition,
    bootstrap_of,
    normalize_config,
)
from admin.errors import CcrError
from admin.security import security_of
from ccr.v1 import admin_pb2, cluster_pb2


@dataclass(frozen=True)
class CleanerInfo:
    """The log cleaner's state of a compacted partition (see describe-topic)."""

    cleaned_up_to: int
    dirty_ratio: float
    last_clean_ms: int  # -1: no clean since the daemon started
    cleans: int
    removed_records: int
    cleanable_end: int


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    leader_epoch: int
    size_bytes: int
    # Set for partitions of compacted topics.
    cleaner: CleanerInfo | None = None


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str
    partition_count: int
    configs: dict[str, str]
    partitions: list[PartitionInfo]
    internal: bool = False


@dataclass(frozen=True)
class OffsetInfo:
    """The answer of ListOffsets: offset -1 when no record matches a timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    client_id: str
    group_instance_id: str
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader_id: str
    members: list[MemberInfo]
    # Committed offsets (offset, metadata) per partition.
    offsets: list[TopicPartition] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int  # -1 when nothing is committed
    high_watermark: int  # -1 when the topic or partition no longer exists
    lag: int  # -1 when unknown

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "committed": self.committed,
            "high_watermark": self.high_watermark,
            "lag": self.lag,
        }


@dataclass(frozen=True)
class HealthInfo:
    cluster_id: str
    status: str
    version: str
    uptime_ms: int


@dataclass(frozen=True)
class ClusterInfo:
    cluster_id: str
    version: str
    topic_count: int
    group_count: int
    data_dir: str
    fsync: str
    principal: str = ""  # the caller as the cluster sees it ("User:alice")


@dataclass(frozen=True)
class NamespaceInfo:
    """A namespace: type "topic", "group" or "principal"; attachments as
    "link:role" (role "leader" or "follower")."""

    type: str
    prefix: str
    reserved: bool
    attachments: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "prefix": self.prefix,
            "reserved": self.reserved,
            "attachments": list(self.attachments),
        }


@dataclass(frozen=True)
class PendingChange:
    """An operator's change that holds on the cluster called but that the
    remote cluster has not confirmed (it was unreachable, or did not answer
    by the call's deadline): the link carries it there later, unless the
    link is deleted first. A call that returns one answered "pending", not
    "done"; the CLI exits with EXIT_PENDING (3)."""

    remote_cluster_id: str
    remains: str  # what the remote does not have yet
    reason: str  # why it is not confirmed

    def to_dict(self) -> dict[str, Any]:
        return {
            "remote_cluster_id": self.remote_cluster_id,
            "remains": self.remains,
            "reason": self.reason,
        }


def pending_change(p: Any) -> PendingChange:
    return PendingChange(p.remote_cluster_id, p.remains, p.reason)


@dataclass(frozen=True)
class LinkInfo:
    """A replication link as one cluster sees it (describe-link)."""

    name: str
    link_id: str
    local_cluster_id: str
    remote_cluster_id: str
    remote_bootstrap: str
    mode: str
    connection_direction: str
    state: str
    state_entered_at_ms: int
    link_epoch: int
    mappings: list[dict[str, Any]]
    partitions: list[dict[str, Any]]
    history: list[dict[str, Any]]
    # Mappings a side detached because it could not honour them, with a note.
    refused_mappings: list[dict[str, Any]] = field(default_factory=list)
    # Gaps of this side's follower partitions (records never copied: the
    # source's log start had passed them): topic, partition, from_offset,
    # to_offset, at_ms, reason, stopped (waiting for resume-partition).
    gaps: list[dict[str, Any]] = field(default_factory=list)
    gap_policy: str = "continue"
    # fetch.bound: "high-watermark" or "last-stable-offset".
    fetch_bound: str = "high-watermark"
    # failover.truncation: "abort" or "last-stable-offset".
    failover_truncation: str = "abort"
    # failback.reconciliation: "history", "last-mirrored-offset" or
    # "last-mirrored-leader-epoch".
    failback_reconciliation: str = "history"
    # The last call of the link that failed on this side (the side that
    # dials): error code name, message, when ("" and 0: none).
    last_error_code: str = ""
    last_error: str = ""
    last_error_at_ms: int = 0
    # Only in the answer of attach, detach or set-mode: what the remote has
    # not confirmed (None: both sides have the change).
    pending: PendingChange | None = None
    # A procedure (reverse) in progress on the link, journalled on this
    # cluster (None: none): procedure, remote_cluster_id, namespaces, steps,
    # next_step, started_at_ms, restarts. Running it again here continues it.
    procedure: dict[str, Any] | None = None
    # What is wrong with the link credentials its sessions run on ("": nothing).
    credential_problem: str = ""
    # Only in the answer of attach or detach: the replicated transactions,
    # left open in partitions that follow nothing now, this cluster aborted
    # ({topic, partition, producer_id, first_offset}).
    aborted_dangling: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pending": self.pending.to_dict() if self.pending is not None else None,
            "aborted_dangling": list(self.aborted_dangling),
            "name": self.name,
            "link_id": self.link_id,
            "local_cluster_id": self.local_cluster_id,
            "remote_cluster_id": self.remote_cluster_id,
            "remote_bootstrap": self.remote_bootstrap,
            "mode": self.mode,
            "connection_direction": self.connection_direction,
            "state": self.state,
            "state_entered_at_ms": self.state_entered_at_ms,
            "link_epoch": self.link_epoch,
            "mappings": list(self.mappings),
            "partitions": list(self.partitions),
            "history": list(self.history),
            "refused_mappings": list(self.refused_mappings),
            "gap_policy": self.gap_policy,
            "fetch_bound": self.fetch_bound,
            "failover_truncation": self.failover_truncation,
            "failback_reconciliation": self.failback_reconciliation,
            "gaps": list(self.gaps),
            "last_error_code": self.last_error_code,
            "last_error": self.last_error,
            "last_error_at_ms": self.last_error_at_ms,
            "procedure": self.procedure,
            "credential_problem": self.credential_problem,
        }


def _lag_dict(p: Any) -> dict[str, Any]:
    return {
        "topic": p.topic,
        "partition": p.partition,
        "role": enum_word(admin_pb2.PartitionRole, p.partition_role),
        "lag_records": p.lag_records,
        "lag_ms": p.lag_ms,
        "log_end_offset": p.log_end_offset,
        "source_high_watermark": p.source_high_watermark,
        "provenance_entries": p.provenance_entries,
        "provenance_start_offset": p.provenance_start_offset,
        "provenance_source": p.provenance_source,
        "lag_known": p.lag_known,
        "source_hw_known_at_ms": p.source_hw_known_at_ms,
        "problem": p.problem,
        "high_watermark": p.high_watermark,
        "unknown_since_ms": p.unknown_since_ms,
        "own_writes_held": p.own_writes_held,
    }


def _mapping_dict(m: Any) -> dict[str, Any]:
    out = {
        "type": enum_word(admin_pb2.ResourceType, m.type),
        "local_prefix": m.local_prefix,
        "remote_prefix": m.remote_prefix,
        "leader": enum_word(admin_pb2.LeaderSide, m.leader_side),
    }
    if m.note:
        out["note"] = m.note
    return out


def _dangling_dict(d: Any) -> dict[str, Any]:
    return {
        "topic": d.topic,
        "partition": d.partition,
        "producer_id": d.producer_id,
        "first_offset": d.first_offset,
    }


def link_info(d: admin_pb2.LinkDescription) -> LinkInfo:
    return LinkInfo(
        name=d.name,
        link_id=d.link_id,
        local_cluster_id=d.local_cluster_id,
        remote_cluster_id=d.remote_cluster_id,
        remote_bootstrap=d.remote_bootstrap,
        mode=enum_word(admin_pb2.LinkMode, d.mode).upper(),
        connection_direction="local"
        if d.connection_direction == admin_pb2.CONNECTION_DIRECTION_LOCAL_DIALS
        else "remote",
        state=enum_word(admin_pb2.LinkState, d.link_state).upper(),
        state_entered_at_ms=d.state_entered_at_ms,
        link_epoch=d.link_epoch,
        mappings=[_mapping_dict(m) for m in d.mappings],
        partitions=[_lag_dict(p) for p in d.partitions],
        history=[
            {
                "state": enum_word(admin_pb2.LinkState, h.link_state).upper(),
                "entered_at_ms": h.entered_at_ms,
            }
            for h in d.history
        ],
        refused_mappings=[_mapping_dict(m) for m in d.refused_mappings],
        gaps=[
            {
                "topic": g.topic,
                "partition": g.partition,
                "from_offset": g.from_offset,
                "to_offset": g.to_offset,
                "records": g.to_offset - g.from_offset,
                "at_ms": g.at_ms,
                "reason": g.reason,
                "stopped": g.stopped,
            }
            for g in d.gaps
        ],
        gap_policy=d.gap_policy or "continue",
        fetch_bound=d.fetch_bound or "high-watermark",
        failover_truncation=d.failover_truncation or "abort",
        failback_reconciliation=d.failback_reconciliation or "history",
        last_error_code=d.last_error_code,
        last_error=d.last_error,
        last_error_at_ms=d.last_error_at_ms,
        pending=pending_change(d.pending) if d.HasField("pending") else None,
        procedure=_plan_dict(d.procedure) if d.HasField("procedure") else None,
        credential_problem=d.credential_problem,
        aborted_dangling=[_dangling_dict(x) for x in d.aborted_dangling],
    )


def _step_dict(s: Any) -> dict[str, Any]:
    return {"name": s.name, "ok": s.ok, "result": s.result, "duration_ms": s.duration_ms}


def _plan_dict(p: Any) -> dict[str, Any]:
    return {
        "procedure": p.procedure,
        "remote_cluster_id": p.remote_cluster_id,
        "namespaces": [
            {
                "type": enum_word(admin_pb2.ResourceType, n.type),
                "local_prefix": n.local_prefix,
                "remote_prefix": n.remote_prefix,
            }
            for n in p.namespaces
        ],
        "steps": [_step_dict(s) for s in p.steps],
        "next_step": p.next_step,
        "started_at_ms": p.started_at_ms,
        "restarts": p.restarts,
    }


@dataclass(frozen=True)
class MirrorLinkInfo:
    """A mirror link (MirrorMaker 2 flows hosted by the daemon of their target)."""

    name: str
    alias: str
    properties: str
    created_at_ms: int
    deleted_at_ms: int
    running: bool
    last_error: str
    last_error_at_ms: int
    restarts: int
    # One per pair of the file that targets this cluster: flow, replicates,
    # exactly_once, heartbeats, checkpoints, sync_group_offsets, stats.
    flows: list[dict[str, Any]]
    warnings: list[str]
    not_hosted: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": self.alias,
            "created_at_ms": self.created_at_ms,
            "deleted_at_ms": self.deleted_at_ms,
            "running": self.running,
            "last_error": self.last_error,
            "last_error_at_ms": self.last_error_at_ms,
            "restarts": self.restarts,
            "flows": list(self.flows),
            "warnings": list(self.warnings),
            "not_hosted": list(self.not_hosted),
            "properties": self.properties,
        }


def mirror_link_info(d: admin_pb2.MirrorLinkDescription) -> MirrorLinkInfo:
    return MirrorLinkInfo(
        name=d.name,
        alias=d.alias,
        properties=d.properties,
        created_at_ms=d.created_at_ms,
        deleted_at_ms=d.deleted_at_ms,
        running=d.running,
        last_error=d.last_error,
        last_error_at_ms=d.last_error_at_ms,
        restarts=d.restarts,
        flows=[
            {
                "flow": f.flow,
                "replicates": f.replicates,
                "exactly_once": f.exactly_once,
                "heartbeats": f.heartbeats,
                "checkpoints": f.checkpoints,
                "sync_group_offsets": f.sync_group_offsets,
                "stats": dict(sorted(f.stats.items())),
            }
            for f in d.flows
        ],
        warnings=list(d.warnings),
        not_hosted=list(d.not_hosted),
    )


@dataclass(frozen=True)
class GroupResumeInfo:
    """One partition of a replicated group after a failover: where its
    consumers resume on this cluster (`resume_offset`, -1: no commit here,
    auto.offset.reset decides), the last commit of it this cluster heard of
    from the source (`last_commit_heard`, -1: none since it started) and
    when, and how many records the group processed on the source that it
    does not resume past here (`behind`)."""

    group: str
    topic: str
    partition: int
    resume_offset: int
    last_commit_heard: int
    heard_at_ms: int
    behind: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "resume_offset": self.resume_offset,
            "last_commit_heard": self.last_commit_heard,
            "heard_at_ms": self.heard_at_ms,
            "behind": self.behind,
        }


@dataclass(frozen=True)
class FailoverResult:
    """What a failover made writable and what it may have lost: `partitions`
    (every partition made writable, with the last known source high
    watermark and when it was learned), `abandoned` (those with a lag, or a
    lag not known), and the replicated transactions it aborted."""

    link: LinkInfo
    abandoned: list[dict[str, Any]]
    namespaces: list[NamespaceInfo]
    partitions: list[dict[str, Any]] = field(default_factory=list)
    aborted_transactions: list[dict[str, Any]] = field(default_factory=list)
    # The source's topics and partitions as known from this time on (ms; 0:
    # never): partitions created later are in no row.
    topics_known_at_ms: int = 0
    # Every partition of a replicated group made writable.
    groups: list[GroupResumeInfo] = field(default_factory=list)
    # The failover's durable plan, step by step ({name, ok, result,
    # duration_ms}); a re-run lists the steps done before it first.
    steps: list[dict[str, Any]] = field(default_factory=list)
    # The step a re-run took the journalled plan up at ("": planned now).
    resumed_from: str = ""
    # failover.truncation last-stable-offset: each partition cut where its
    # first open transaction began ({topic, partition, truncate_to,
    # records_removed, open_transactions}).
    truncated: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "resumed_from": self.resumed_from,
            "truncated": list(self.truncated),
            "link": self.link.to_dict(),
            "abandoned": list(self.abandoned),
            "namespaces": [ns.to_dict() for ns in self.namespaces],
            "partitions": list(self.partitions),
            "aborted_transactions": list(self.aborted_transactions),
            "topics_known_at_ms": self.topics_known_at_ms,
            "groups": [g.to_dict() for g in self.groups],
        }


@dataclass(frozen=True)
class LinkDeletion:
    """A deleted link: what the remote has not confirmed (None: it deleted
    its half too), and the replicated transactions left open in partitions
    that follow nothing now, which this cluster aborted ({topic, partition,
    producer_id, first_offset})."""

    pending: PendingChange | None = None
    aborted_dangling: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pending": self.pending.to_dict() if self.pending is not None else None,
            "aborted_dangling": list(self.aborted_dangling),
        }


@dataclass(frozen=True)
class ReservationResult:
    """A namespace after set-reserved, and the transactions it aborted:
    reserving aborts the open ones touching it; clearing the reservation of
    a topic namespace aborts the replicated ones nothing will finish."""

    namespace: NamespaceInfo
    aborted_transactions: list[str] = field(default_factory=list)
    aborted_dangling: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.namespace.to_dict(),
            "aborted_transactions": list(self.aborted_transactions),
            "aborted_dangling": list(self.aborted_dangling),
        }


@dataclass(frozen=True)
class NamespaceDescription:
    """A namespace and the resources (topic names or group ids) in it now, sorted."""

    namespace: NamespaceInfo
    resources: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {**self.namespace.to_dict(), "resources": list(self.resources)}


NAMESPACE_TYPES = ("topic", "group", "principal")

_RESOURCE_TYPES = {
    "topic": admin_pb2.RESOURCE_TYPE_TOPIC,
    "group": admin_pb2.RESOURCE_TYPE_GROUP,
    "principal": admin_pb2.RESOURCE_TYPE_PRINCIPAL,
}


# Kafka's names of group states (the names AdminClient and kafka-consumer-groups show).
GROUP_STATES = {
    cluster_pb2.GROUP_STATE_UNSPECIFIED: "",
    cluster_pb2.GROUP_STATE_EMPTY: "Empty",
    cluster_pb2.GROUP_STATE_PREPARING_REBALANCE: "PreparingRebalance",
    cluster_pb2.GROUP_STATE_COMPLETING_REBALANCE: "CompletingRebalance",
    cluster_pb2.GROUP_STATE_STABLE: "Stable",
    cluster_pb2.GROUP_STATE_DEAD: "Dead",
}
_LEADER_SIDES = {"local": admin_pb2.LEADER_SIDE_LOCAL, "remote": admin_pb2.LEADER_SIDE_REMOTE}


def enum_word(enum: Any, number: int) -> str:
    """A proto enum value's name without its enum's prefix, lower case:
    ResourceType 1 -> "topic", LinkMode 2 -> "sync", 0 -> "unspecified"."""
    prefix = re.sub(r"(?<!^)(?=[A-Z])", "_", enum.DESCRIPTOR.name).upper() + "_"
    return str(enum.Name(number)).removeprefix(prefix).lower()


def resource_type_of(kind: str) -> admin_pb2.ResourceType.ValueType:
    """The proto enum of a namespace type: "topic", "group" or "principal" (any case)."""
    try:
        return _RESOURCE_TYPES[kind.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(
            f"namespace type must be one of {', '.join(NAMESPACE_TYPES)}, got {kind!r}"
        ) from None


def namespace_info(ns: admin_pb2.Namespace) -> NamespaceInfo:
    kind = enum_word(admin_pb2.ResourceType, ns.type)
    return NamespaceInfo(kind, ns.prefix, ns.reserved, list(ns.attachments))


_SPECS = {
    "earliest": cluster_pb2.OFFSET_SPEC_EARLIEST,
    "beginning": cluster_pb2.OFFSET_SPEC_EARLIEST,
    "latest": cluster_pb2.OFFSET_SPEC_LATEST,
    "end": cluster_pb2.OFFSET_SPEC_LATEST,
    "max_timestamp": cluster_pb2.OFFSET_SPEC_MAX_TIMESTAMP,
}


def isolation_of(level: str | int | None) -> cluster_pb2.IsolationLevel.ValueType:
    """read_uncommitted (default) or read_committed, by name or proto number."""
    if level is None:
        return cluster_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
    if isinstance(level, int):
        if level == cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED:
            return cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED
        if level == cluster_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED:
            return cluster_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
        raise ValueError(f"unknown isolation level {level}")
    text = level.strip().lower().replace("-", "_")
    if text == "read_committed":
        return cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED
    if text == "read_uncommitted":
        return cluster_pb2.ISOLATION_LEVEL_READ_UNCOMMITTED
    raise ValueError(f"isolation level must be read_committed or read_uncommitted, got {level!r}")


def partition_info(p: cluster_pb2.PartitionState) -> PartitionInfo:
    return PartitionInfo(
        partition=p.partition,
        log_start_offset=p.log_start_offset,
        high_watermark=p.high_watermark,
        last_stable_offset=p.last_stable_offset,
        log_end_offset=p.log_end_offset,
        leader_epoch=p.leader_epoch,
        size_bytes=p.size_bytes,
        cleaner=_cleaner_info(p.cleaner) if p.HasField("cleaner") else None,
    )


def _cleaner_info(c: cluster_pb2.LogCleanerState) -> CleanerInfo:
    return CleanerInfo(
        cleaned_up_to=c.cleaned_up_to,
        dirty_ratio=c.dirty_ratio,
        last_clean_ms=c.last_clean_ms,
        cleans=c.cleans,
        removed_records=c.removed_records,
        cleanable_end=c.cleanable_end,
    )


def topic_info(t: cluster_pb2.TopicDescription) -> TopicInfo:
    return TopicInfo(
        name=t.name,
        topic_id=t.topic_id,
        partition_count=t.partition_count,
        configs=dict(t.configs),
        partitions=sorted((partition_info(p) for p in t.partitions), key=lambda p: p.partition),
        internal=t.internal,
    )


def _offset_tp(o: cluster_pb2.OffsetAndMetadata) -> TopicPartition:
    offset = o.offset if o.offset >= 0 else OFFSET_INVALID
    return TopicPartition(
        o.topic,
        o.partition,
        offset,
        metadata=o.metadata or None,
        leader_epoch=o.leader_epoch if o.leader_epoch >= 0 else None,
    )


def decode_member_assignment(data: bytes) -> list[TopicPartition]:
    """A member's assignment as TopicPartitions ([] when not a consumer-protocol one)."""
    try:
        assignment = decode_assignment(data)
    except ProtocolError:
        return []
    return [TopicPartition(t, p) for t, p in assignment.topic_partitions()]


@dataclass(frozen=True)
class ReverseResult:
    """What `reverse_link` did: each step (name, ok, result, duration_ms), in
    order; `ok` False names the refusal of the step that stopped it."""

    link: str
    ok: bool
    steps: list[dict[str, Any]]
    error_code: str
    error_message: str
    mappings: list[dict[str, Any]]
    # The step a re-run took the journalled plan up at ("": planned now).
    resumed_from: str = ""
    # Stopped after a mapping changed: the plan stays journalled on the
    # cluster that ran it; running reverse there again finishes it.
    pending: bool = False
    # Stopped before any mapping changed: this side leads and takes writes again.
    rolled_back: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "link": self.link,
            "ok": self.ok,
            "steps": list(self.steps),
            "error": (
                {"code": self.error_code, "message": self.error_message}
                if self.error_code
                else None
            ),
            "mappings": list(self.mappings),
            "resumed_from": self.resumed_from,
            "pending": self.pending,
            "rolled_back": self.rolled_back,
        }


def provenance_dict(resp: admin_pb2.GetProvenanceResponse) -> dict[str, Any]:
    """The provenance report of a topic as plain data (the CLI's --json form)."""
    return {
        "topic": resp.topic,
        "topic_id": resp.topic_id,
        "partitions": [
            {
                "partition": p.partition,
                "log_start_offset": p.log_start_offset,
                "log_end_offset": p.log_end_offset,
                "high_watermark": p.high_watermark,
                "leader_epoch": p.leader_epoch,
                "epoch_history": [
                    {"epoch": e.epoch, "start_offset": e.start_offset} for e in p.epoch_history
                ],
                "provenance": [
                    {
                        "kind": e.kind,
                        "offset": e.offset,
                        "source_cluster_id": e.source_cluster_id,
                        "link_id": e.link_id,
                        "link_name": e.link_name,
                        "link_epoch": e.link_epoch,
                        "removed_records": e.removed_records,
                        "reason": e.reason,
                        "offsets_moved": [
                            {"group": m.group, "from_offset": m.from_offset}
                            for m in e.offsets_moved
                        ],
                        "to_offset": e.to_offset,
                        "at_ms": e.at_ms,
                        "uncommitted": [
                            {"producer_id": u.producer_id, "first_offset": u.first_offset}
                            for u in e.uncommitted
                        ],
                    }
                    for e in p.provenance
                ],
            }
            for p in resp.partitions
        ],
    }


def recovery_dict(resp: admin_pb2.RecoverLinkResponse) -> dict[str, Any]:
    """The recovery report as plain data (the CLI's --json form)."""
    groups = [
        {
            "group": g.group,
            "topic": g.topic,
            "partition": g.partition,
            "committed_offset": g.committed_offset,
            "new_offset": g.new_offset,
            "reason": g.reason,
        }
        for g in resp.groups
    ]
    return {
        "link": resp.link,
        "local_cluster_id": resp.local_cluster_id,
        "remote_cluster_id": resp.remote_cluster_id,
        "confirmed": resp.confirmed,
        "mappings": [_mapping_dict(m) for m in resp.mappings],
        "partitions": [
            {
                "topic": r.topic,
                "remote_topic": r.remote_topic,
                "partition": r.partition,
                "local_log_end_offset": r.local_log_end_offset,
                "remote_log_end_offset": r.remote_log_end_offset,
                "common_offset": r.common_offset,
                "truncate_to": r.truncate_to,
                "local_records_lost": r.local_records_lost,
                "remote_records_lost": r.remote_records_lost,
                "diverged": r.diverged,
                "reason": r.reason,
                "related": r.related,
                "reopened_transactions": [
                    {
                        "producer_id": t.producer_id,
                        "first_offset": t.first_offset,
                        "marker_offset": t.marker_offset,
                        "committed": t.committed,
                        "own_marker": t.own_marker,
                        "replicated": t.replicated,
                    }
                    for t in r.reopened_transactions
                ],
            }
            for r in resp.partitions
        ],
        "groups": groups,
        "notes": list(resp.notes),
        "steps": [_step_dict(st) for st in resp.steps],
        "resumed_from": resp.resumed_from,
        "totals": {
            "partitions": len(resp.partitions),
            "diverged_partitions": resp.diverged_partitions,
            "local_records_lost": resp.local_records_lost,
            "remote_records_lost": resp.remote_records_lost,
            "groups_affected": len({g["group"] for g in groups}),
            "offsets_moved": len(groups),
        },
    }


def _recover_namespace(kind: str, spec: str) -> admin_pb2.RecoverNamespace:
    """A namespace spec: "LOCAL", or "LOCAL:REMOTE" for another prefix on the remote."""
    local, sep, remote = spec.partition(":")
    ns = admin_pb2.RecoverNamespace(type=resource_type_of(kind), local_prefix=local)
    if sep:
        ns.remote_prefix = remote
    return ns


class AdminClient:
    """Administrative calls against one cluster.

    `AdminClient({"bootstrap.servers": "127.0.0.1:9701"})` or
    `AdminClient("127.0.0.1:9701")`. Config keys: `bootstrap.servers`,
    `request.timeout.ms` (default 30000, the deadline of every call), and for a
    secured cluster `security.protocol`, `ssl.*.location` and `sasl.*`
    (`admin/security.py`).
    """

    def __init__(self, config: Config | str | None = None) -> None:
        conf = normalize_config(config, "AdminClient")
        self._timeout_s = float(conf.get("request.timeout.ms", 30000)) / 1000.0
        self._conn = Connection(bootstrap_of(conf), self._timeout_s, security_of(conf))

    @property
    def bootstrap(self) -> str:
        return self._conn.target

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    def _t(self, timeout: float | None) -> float:
        return self._timeout_s if timeout is None else timeout

    # --- Topics ---------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> TopicInfo:
        req = cluster_pb2.CreateTopicRequest(
            name=name,
            partitions=partitions,
            configs={str(k): str(v) for k, v in (configs or {}).items()},
        )
        return topic_info(self._conn.call(self._conn.cluster.CreateTopic, req, self._t(timeout)))

    def delete_topic(self, name: str, timeout: float | None = None) -> None:
        self._conn.call(
            self._conn.cluster.DeleteTopic,
            cluster_pb2.DeleteTopicRequest(name=name),
            self._t(timeout),
        )

    def describe_topic(self, name: str, timeout: float | None = None) -> TopicInfo:
        return topic_info(
            self._conn.call(
                self._conn.cluster.DescribeTopic,
                cluster_pb2.DescribeTopicRequest(name=name),
                self._t(timeout),
            )
        )

    def list_topics(
        self, include_internal: bool = False, timeout: float | None = None
    ) -> list[TopicInfo]:
        resp = self._conn.call(
            self._conn.cluster.ListTopics,
            cluster_pb2.ListTopicsRequest(include_internal=include_internal),
            self._t(timeout),
        )
        return sorted((topic_info(t) for t in resp.topics), key=lambda t: t.name)

    def alter_topic_configs(
        self,
        name: str,
        set_configs: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        timeout: float | None = None,
    ) -> TopicInfo:
        req = cluster_pb2.AlterTopicConfigsRequest(
            name=name,
            set={str(k): str(v) for k, v in (set_configs or {}).items()},
            delete=list(delete),
        )
        return topic_info(
            self._conn.call(self._conn.cluster.AlterTopicConfigs, req, self._t(timeout))
        )

    def create_partitions(
        self, name: str, total_count: int, timeout: float | None = None
    ) -> TopicInfo:
        req = cluster_pb2.CreatePartitionsRequest(name=name, total_count=total_count)
        return topic_info(
            self._conn.call(self._conn.cluster.CreatePartitions, req, self._t(timeout))
        )

    # --- Offsets --------------------------------------------------------------------

    def list_offsets(
        self,
        topic: str,
        partition: int,
        spec: str | int = "latest",
        isolation_level: str | int | None = "read_uncommitted",
        timeout: float | None = None,
    ) -> OffsetInfo:
        """spec: "earliest", "latest", "max_timestamp", or a timestamp in ms
        (the first offset whose timestamp is at or after it; offset -1 if none)."""
        timestamp = 0
        if isinstance(spec, bool):
            raise TypeError("spec must be a name or a timestamp")
        if isinstance(spec, int):
            proto_spec = cluster_pb2.OFFSET_SPEC_TIMESTAMP
            timestamp = spec
        else:
            try:
                proto_spec = _SPECS[spec.strip().lower()]
            except KeyError:
                raise ValueError(
                    "offset spec must be earliest, latest, max_timestamp or a timestamp, "
                    f"got {spec!r}"
                ) from None
        req = cluster_pb2.ListOffsetsRequest(
            topic=topic,
            partition=partition,
            spec=proto_spec,
            timestamp=timestamp,
            isolation_level=isolation_of(isolation_level),
        )
        resp = self._conn.call(self._conn.cluster.ListOffsets, req, self._t(timeout))
        return OffsetInfo(resp.offset, resp.timestamp, resp.leader_epoch)

    # --- Groups ---------------------------------------------------------------------

    def list_groups(self, timeout: float | None = None) -> list[GroupListing]:
        resp = self._conn.call(
            self._conn.cluster.ListGroups, cluster_pb2.ListGroupsRequest(), self._t(timeout)
        )
        return sorted(
            (
                GroupListing(g.group_id, GROUP_STATES[g.group_state], g.protocol_type)
                for g in resp.groups
            ),
            key=lambda g: g.group_id,
        )

    def describe_group(self, group_id: str, timeout: float | None = None) -> GroupInfo:
        g = self._conn.call(
            self._conn.cluster.DescribeGroup,
            cluster_pb2.DescribeGroupRequest(group_id=group_id),
            self._t(timeout),
        )
        members = [
            MemberInfo(
                member_id=m.member_id,
                client_id=m.client_id,
                group_instance_id=m.group_instance_id,
                assignment=decode_member_assignment(m.assignment)
                if g.protocol_type in ("consumer", "")
                else [],
            )
            for m in g.members
        ]
        return GroupInfo(
            group_id=g.group_id,
            state=GROUP_STATES[g.group_state],
            protocol_type=g.protocol_type,
            protocol_name=g.protocol_name,
            generation_id=g.generation_id,
            leader_id=g.leader_id,
            members=members,
            offsets=sorted(_offset_tp(o) for o in g.offsets),
        )

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        timeout: float | None = None,
    ) -> list[TopicPartition]:
        """The committed offsets of a group (all of them when `partitions` is None);
        a partition without a committed offset has offset OFFSET_INVALID (-1001)."""
        req = cluster_pb2.FetchCommittedOffsetsRequest(
            group_id=group_id,
            partitions=[
                cluster_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                for tp in (partitions or [])
            ],
        )
        resp = self._conn.call(self._conn.cluster.FetchCommittedOffsets, req, self._t(timeout))
        return sorted(_offset_tp(o) for o in resp.offsets)

    committed_offsets = list_consumer_group_offsets

    def group_lag(
        self, group_id: str, timeout: float | None = None, group: GroupInfo | None = None
    ) -> list[PartitionLag]:
        """Committed offset, high watermark and lag of every partition the group
        has committed or is assigned."""
        info = group if group is not None else self.describe_group(group_id, timeout)
        committed: dict[tuple[str, int], int] = {}
        for tp in self.list_consumer_group_offsets(group_id, timeout=timeout):
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        for member in info.members:
            for tp in member.assignment:
                committed.setdefault((tp.topic, tp.partition), -1)
        hws: dict[tuple[str, int], int] = {}
        for topic in sorted({t for t, _ in committed}):
            try:
                desc = self.describe_topic(topic, timeout)
            except CcrError as exc:
                if exc.code in ("UNKNOWN_TOPIC", "INVALID_TOPIC_NAME"):
                    continue
                raise
            for p in desc.partitions:
                hws[(topic, p.partition)] = p.high_watermark
        out: list[PartitionLag] = []
        for (topic, partition), offset in sorted(committed.items()):
            hw = hws.get((topic, partition), -1)
            if hw < 0:
                lag = -1
            elif offset < 0:
                lag = hw  # nothing committed: the whole log is behind (Kafka shows '-')
            else:
                lag = max(0, hw - offset)
            out.append(PartitionLag(topic, partition, offset, hw, lag))
        return out

    # --- Namespaces (spec section 2) ------------------------------------------------

    # --- Replication links (spec sections 3-7) -----------------------------------------

    def create_link(
        self,
        name: str,
        remote: str,
        credentials: str = "",
        connection: str = "local",
        local_bootstrap: str = "",
        timeout: float | None = None,
        configs: dict[str, str] | None = None,
    ) -> LinkInfo:
        """Creates link `name` to the cluster at `remote` (HOST:PORT); this cluster
        dials it and writes the mirrored configuration there. `connection`:
        "local" (this cluster dials from now on) or "remote" (the remote does).
        `configs`: shared link policies by name ("gap.policy", "fetch.bound")."""
        if connection not in ("local", "remote"):
            raise ValueError("connection must be 'local' or 'remote'")
        req = admin_pb2.CreateLinkRequest(
            name=name,
            remote_bootstrap=remote,
            remote_credentials=credentials,
            connection_direction=admin_pb2.CONNECTION_DIRECTION_LOCAL_DIALS
            if connection == "local"
            else admin_pb2.CONNECTION_DIRECTION_REMOTE_DIALS,
            local_bootstrap=local_bootstrap,
            configs=configs or {},
        )
        return link_info(self._conn.call(self._conn.admin.CreateLink, req, self._t(timeout)))

    def alter_link(
        self,
        name: str,
        remote: str | None = None,
        credentials: str | None = None,
        local_bootstrap: str | None = None,
        timeout: float | None = None,
        gap_policy: str | None = None,
        fetch_bound: str | None = None,
        failover_truncation: str | None = None,
        failback_reconciliation: str | None = None,
    ) -> LinkInfo:
        """Changes this side's own settings of link `name`: the address it
        dials (`remote`), its credentials for the remote, its own address;
        and gap.policy ("continue" or "stop"), fetch.bound ("high-watermark"
        or "last-stable-offset"), failover.truncation ("abort" or
        "last-stable-offset") and failback.reconciliation ("history",
        "last-mirrored-offset" or "last-mirrored-leader-epoch": where recover
        cuts), which both sides share. The cluster checks
        them with a session first; a remote that refuses them changes
        nothing (LINK_AUTHENTICATION_FAILED, LINK_UNREACHABLE)."""
        req = admin_pb2.AlterLinkRequest(name=name)
        if gap_policy is not None:
            req.gap_policy = gap_policy
        if fetch_bound is not None:
            req.fetch_bound = fetch_bound
        if failover_truncation is not None:
            req.failover_truncation = failover_truncation
        if failback_reconciliation is not None:
            req.failback_reconciliation = failback_reconciliation
        if remote is not None:
            req.remote_bootstrap = remote
        if credentials is not None:
            req.remote_credentials = credentials
        if local_bootstrap is not None:
            req.local_bootstrap = local_bootstrap
        return link_info(self._conn.call(self._conn.admin.AlterLink, req, self._t(timeout)))

    def resume_partition(
        self, link: str, topic: str, partition: int, timeout: float | None = None
    ) -> LinkInfo:
        """Lets a follower partition stopped at a gap (gap.policy stop) go on
        from its source's log start, the gap recorded in its provenance."""
        req = admin_pb2.ResumePartitionRequest(link=link, topic=topic, partition=partition)
        return link_info(
            self._conn.call(self._conn.admin.ResumePartition, req, self._t(timeout))
        )

    def list_links(self, timeout: float | None = None) -> list[LinkInfo]:
        resp = self._conn.call(
            self._conn.admin.ListLinks, admin_pb2.ListLinksRequest(), self._t(timeout)
        )
        return [link_info(d) for d in resp.links]

    def describe_link(self, name: str, timeout: float | None = None) -> LinkInfo:
        req = admin_pb2.DescribeLinkRequest(name=name)
        return link_info(self._conn.call(self._conn.admin.DescribeLink, req, self._t(timeout)))

    def delete_link(self, name: str, timeout: float | None = None) -> LinkDeletion:
        """Deletes the link here; the answer says what the remote has not
        confirmed (`pending`, None: it deleted its half too) and which
        replicated transactions this cluster aborted (`aborted_dangling`)."""
        req = admin_pb2.DeleteLinkRequest(name=name)
        resp = self._conn.call(self._conn.admin.DeleteLink, req, self._t(timeout))
        return LinkDeletion(
            pending=pending_change(resp.pending) if resp.HasField("pending") else None,
            aborted_dangling=[_dangling_dict(x) for x in resp.aborted_dangling],
        )

    # --- Mirror links (MirrorMaker 2 flows hosted by the daemon) ------------------------

    def create_mirror_link(
        self, name: str, properties: str, alias: str = "", timeout: float | None = None
    ) -> MirrorLinkInfo:
        """Stores mirror link `name` on this cluster, from the text of an
        mm2.properties file, and starts its engine. `alias`: this cluster's alias
        in the file ("" means its cluster id); the daemon runs the file's pairs
        that target it, and refuses a file with no enabled flow into it."""
        req = admin_pb2.CreateMirrorLinkRequest(name=name, properties=properties, alias=alias)
        return mirror_link_info(
            self._conn.call(self._conn.admin.CreateMirrorLink, req, self._t(timeout))
        )

    def list_mirror_links(
        self, include_deleted: bool = False, timeout: float | None = None
    ) -> list[MirrorLinkInfo]:
        req = admin_pb2.ListMirrorLinksRequest(include_deleted=include_deleted)
        resp = self._conn.call(self._conn.admin.ListMirrorLinks, req, self._t(timeout))
        return [mirror_link_info(d) for d in resp.links]

    def delete_mirror_link(self, name: str, timeout: float | None = None) -> bool:
        """Stops the link's engine and deletes it; False if the engine did not
        stop within the daemon's bound (it ends after its current step)."""
        req = admin_pb2.DeleteMirrorLinkRequest(name=name)
        return bool(
            self._conn.call(self._conn.admin.DeleteMirrorLink, req, self._t(timeout)).stopped
        )

    def attach_namespace(
        self,
        link: str,
        type: str,
        local_prefix: str,
        remote_prefix: str,
        leader: str,
        timeout: float | None = None,
    ) -> LinkInfo:
        """Maps this cluster's namespace `local_prefix` to the remote's
        `remote_prefix` on the link; `leader` is "local" or "remote" (any case):
        which side's namespace leads."""
        side = _LEADER_SIDES.get(leader.strip().lower())
        if side is None:
            raise ValueError(f"leader must be 'local' or 'remote', not {leader!r}")
        req = admin_pb2.AttachNamespaceRequest(
            link=link,
            type=resource_type_of(type),
            local_prefix=local_prefix,
            remote_prefix=remote_prefix,
            leader_side=side,
        )
        return link_info(self._conn.call(self._conn.admin.AttachNamespace, req, self._t(timeout)))

    def detach_namespace(
        self, link: str, type: str, local_prefix: str, timeout: float | None = None
    ) -> LinkInfo:
        req = admin_pb2.DetachNamespaceRequest(
            link=link, type=resource_type_of(type), local_prefix=local_prefix
        )
        return link_info(self._conn.call(self._conn.admin.DetachNamespace, req, self._t(timeout)))

    def failover(
        self, link: str, force: bool = False, timeout: float | None = None
    ) -> FailoverResult:
        """Makes this cluster's follower namespaces of the link writable."""
        req = admin_pb2.FailoverRequest(link=link, force=force)
        resp = self._conn.call(self._conn.admin.Failover, req, self._t(timeout))
        return FailoverResult(
            link=link_info(resp.link),
            abandoned=[_lag_dict(p) for p in resp.abandoned],
            namespaces=[namespace_info(ns) for ns in resp.namespaces],
            partitions=[_lag_dict(p) for p in resp.partitions],
            aborted_transactions=[_dangling_dict(d) for d in resp.aborted_transactions],
            topics_known_at_ms=resp.topics_known_at_ms,
            groups=[
                GroupResumeInfo(
                    g.group, g.topic, g.partition, g.resume_offset, g.last_commit_heard,
                    g.heard_at_ms, g.behind,
                )
                for g in resp.groups
            ],
            steps=[_step_dict(st) for st in resp.steps],
            resumed_from=resp.resumed_from,
            truncated=[
                {
                    "topic": c.topic,
                    "partition": c.partition,
                    "truncate_to": c.truncate_to,
                    "records_removed": c.records_removed,
                    "open_transactions": c.open_transactions,
                }
                for c in resp.truncated
            ],
        )

    def set_link_mode(self, link: str, mode: str, timeout: float | None = None) -> LinkInfo:
        """Switches the link to "SYNC" (only from FOLLOWING: LINK_NOT_FOLLOWING
        otherwise) or back to "ASYNC" (always, at once)."""
        name = mode.upper()
        if name not in ("ASYNC", "SYNC"):
            raise ValueError(f"mode must be 'async' or 'sync', not {mode!r}")
        proto_mode = admin_pb2.LinkMode.Value(f"LINK_MODE_{name}")
        req = admin_pb2.SetLinkModeRequest(link=link, mode=proto_mode)
        return link_info(self._conn.call(self._conn.admin.SetLinkMode, req, self._t(timeout)))

    # --- Provenance and recovery (spec section 8) --------------------------------------

    def get_provenance(self, topic: str, timeout: float | None = None) -> dict[str, Any]:
        """Every partition of `topic`: its provenance history (entries in order),
        log start and end offsets, high watermark and leader epoch history."""
        req = admin_pb2.GetProvenanceRequest(topic=topic)
        return provenance_dict(
            self._conn.call(self._conn.admin.GetProvenance, req, self._t(timeout))
        )

    def recover_link(
        self,
        link: str,
        namespaces: Iterable[str] = (),
        group_namespaces: Iterable[str] = (),
        confirm: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Unclean link recovery, run on the cluster that will follow. Names
        topic (`namespaces`) and group namespaces as "LOCAL" or "LOCAL:REMOTE";
        none: every topic and group mapping of the link. Without `confirm` a
        report only; with it, truncates, moves offsets back and re-attaches
        with the remote leading."""
        req = admin_pb2.RecoverLinkRequest(
            link=link,
            namespaces=[_recover_namespace("topic", n) for n in namespaces]
            + [_recover_namespace("group", n) for n in group_namespaces],
            confirm=confirm,
        )
        return recovery_dict(self._conn.call(self._conn.admin.RecoverLink, req, self._t(timeout)))

    def reverse_link(
        self, link: str, timeout_ms: int = 30_000, timeout: float | None = None
    ) -> ReverseResult:
        """Reverses the direction of the link's namespaces with full
        consistency (run on the current leader); see ReverseResult."""
        req = admin_pb2.ReverseLinkRequest(link=link, timeout_ms=timeout_ms)
        call_timeout = max(self._t(timeout), timeout_ms / 1000 + 30)
        resp = self._conn.call(self._conn.admin.ReverseLink, req, call_timeout)
        return ReverseResult(
            link=resp.link,
            ok=resp.ok,
            steps=[
                {"name": s.name, "ok": s.ok, "result": s.result, "duration_ms": s.duration_ms}
                for s in resp.steps
            ],
            error_code=resp.error_code,
            error_message=resp.error_message,
            mappings=[_mapping_dict(m) for m in resp.mappings],
            resumed_from=resp.resumed_from,
            pending=resp.pending,
            rolled_back=resp.rolled_back,
        )

    # --- Faults (emulated) -------------------------------------------------------------

    def unclean_election(
        self, topic: str, partition: int, truncate_to: int, timeout: float | None = None
    ) -> dict[str, int]:
        """Emulates an unclean leader election: cuts the partition's log at the
        batch boundary at or below `truncate_to` and bumps its leader epoch."""
        req = admin_pb2.UncleanElectionRequest(
            topic=topic, partition=partition, truncate_to=truncate_to
        )
        resp = self._conn.call(self._conn.admin.UncleanElection, req, self._t(timeout))
        return {
            "removed_records": resp.removed_records,
            "leader_epoch": resp.leader_epoch,
            "log_end_offset": resp.log_end_offset,
        }

    def create_namespace(
        self, type: str, prefix: str, reserved: bool = False, timeout: float | None = None
    ) -> NamespaceInfo:
        """Creates the namespace of this type ("topic", "group", "principal") and prefix."""
        req = admin_pb2.CreateNamespaceRequest(
            type=resource_type_of(type), prefix=prefix, reserved=reserved
        )
        return namespace_info(
            self._conn.call(self._conn.admin.CreateNamespace, req, self._t(timeout))
        )

    def list_namespaces(
        self, type: str | None = None, timeout: float | None = None
    ) -> list[NamespaceInfo]:
        """Every namespace (of one type when `type` is given), sorted by type then prefix."""
        req = admin_pb2.ListNamespacesRequest(
            type=admin_pb2.RESOURCE_TYPE_UNSPECIFIED if type is None else resource_type_of(type)
        )
        resp = self._conn.call(self._conn.admin.ListNamespaces, req, self._t(timeout))
        return [namespace_info(ns) for ns in resp.namespaces]

    def describe_namespace(
        self, type: str, prefix: str, timeout: float | None = None
    ) -> NamespaceDescription:
        req = admin_pb2.DescribeNamespaceRequest(type=resource_type_of(type), prefix=prefix)
        resp = self._conn.call(self._conn.admin.DescribeNamespace, req, self._t(timeout))
        return NamespaceDescription(namespace_info(resp.namespace), list(resp.resources))

    def set_reserved(
        self, type: str, prefix: str, reserved: bool, timeout: float | None = None
    ) -> ReservationResult:
        """Reserves the namespace (only replication may write into it; its open
        transactions are aborted) or clears that (a topic namespace's dangling
        replicated transactions are aborted)."""
        req = admin_pb2.SetReservedRequest(
            type=resource_type_of(type), prefix=prefix, reserved=reserved
        )
        reply = self._conn.call(self._conn.admin.SetReserved, req, self._t(timeout))
        return ReservationResult(
            namespace_info(reply.namespace),
            list(reply.aborted_transactions),
            [_dangling_dict(d) for d in reply.aborted_dangling],
        )

    def delete_namespace(self, type: str, prefix: str, timeout: float | None = None) -> None:
        req = admin_pb2.DeleteNamespaceRequest(type=resource_type_of(type), prefix=prefix)
        self._conn.call(self._conn.admin.DeleteNamespace, req, self._t(timeout))

    # --- Cluster --------------------------------------------------------------------

    def health(self, timeout: float | None = None) -> HealthInfo:
        r = self._conn.call(
            self._conn.cluster.Health, cluster_pb2.HealthRequest(), self._t(timeout)
        )
        return HealthInfo(r.cluster_id, r.status, r.version, r.uptime_ms)

    def describe_cluster(self, timeout: float | None = None) -> ClusterInfo:
        r = self._conn.call(
            self._conn.admin.DescribeCluster, admin_pb2.DescribeClusterRequest(), self._t(timeout)
        )
        return ClusterInfo(
            r.cluster_id, r.version, r.topic_count, r.group_count, r.data_dir, r.fsync,
            r.principal,
        )

    def whoami(self, timeout: float | None = None) -> str:
        """The principal the cluster sees for this client (Kafka's form:
        "User:alice", "User:CN=alice,OU=ops", "User:ANONYMOUS")."""
        return self.describe_cluster(timeout).principal
