"""Consumer groups over the Kafka protocol: the classic group protocol and offsets.

Rules:
- JoinGroup, SyncGroup, Heartbeat and LeaveGroup go to the core's group
  coordinator unchanged. A JoinGroup without a member id is given one at once
  (the core names it), so clients never see MEMBER_ID_REQUIRED; assignment is
  the leader client's business, so every client-side assignor works (range,
  roundrobin, cooperative-sticky).
- OffsetCommit and TxnOffsetCommit answer per partition: a partition of an
  unknown topic gets UNKNOWN_TOPIC_OR_PARTITION and the others are committed,
  as Kafka does; a refusal of the commit itself (generation, member, rebalance)
  is every partition's answer. Metadata is kept as given.
- OffsetFetch answers -1 for partitions without a committed offset; with
  require_stable, a partition whose offset is staged by an open transaction
  answers UNSTABLE_OFFSET_COMMIT (retriable) until that transaction ends.
- OffsetDelete on a group with members answers GROUP_SUBSCRIBED_TO_TOPIC for
  each partition (Kafka's answer for a group that consumes the topic).
- Refusals use the group variant of the error table (NOT_READY ->
  COORDINATOR_LOAD_IN_PROGRESS, RESERVED_NAMESPACE -> GROUP_AUTHORIZATION_FAILED).
- Authorization (`--authorizer acl`, linkd/kafka/authz.py), Kafka's: the
  group calls need READ on the group; OffsetCommit also READ on each topic
  (else TOPIC_AUTHORIZATION_FAILED for its partitions, the others commit);
  TxnOffsetCommit WRITE on the transactional id first; OffsetFetch DESCRIBE
  on the group and on each topic (unlisted topics the principal may not
  DESCRIBE are left out); DescribeGroups DESCRIBE per group; ListGroups every
  group with DESCRIBE on the cluster, else those it may DESCRIBE;
  DeleteGroups DELETE per group; OffsetDelete DELETE on the group and READ on
  each topic.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.groups import GroupState, JoinRequest
from linkd.kafka import authz
from linkd.kafka.codec import field, ms
from linkd.kafka.context import Context
from linkd.kafka.errors import kafka_code, kafka_message

# OffsetCommit v2-v4 and JoinGroup v0 carry no rebalance timeout / use -1.
NO_TIMEOUT = -1


def _code(exc: ClusterError) -> int:
    return kafka_code(exc, coordinator=True, group=True)


async def join_group(ctx: Context, req: Any) -> dict[str, Any]:
    session_ms = ms(req.session_timeout)
    rebalance_ms = ms(field(req, "rebalance_timeout", NO_TIMEOUT))
    try:
        authz.check(ctx, R.GROUP, req.group_id, Op.READ)
        result = await ctx.node.join_group(
            JoinRequest(
                group_id=req.group_id,
                member_id=req.member_id,
                client_id=ctx.client_id,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=session_ms if rebalance_ms < 0 else rebalance_ms,
                protocol_type=req.protocol_type,
                protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
                group_instance_id=field(req, "group_instance_id") or "",
                client_host=ctx.client_host,
            )
        )
    except ClusterError as exc:
        unknown = exc.code == ErrorCode.UNKNOWN_MEMBER_ID
        return {
            "throttle_time": 0,
            "error_code": _code(exc),
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": "" if unknown else req.member_id,
            "members": [],
        }
    return {
        "throttle_time": 0,
        "error_code": 0,
        "generation_id": result.generation_id,
        "protocol_type": req.protocol_type,
        "protocol_name": result.protocol_name,
        "leader": result.leader_id,
        "skip_assignment": False,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": gi or None, "metadata": md}
            for m, md, gi in result.members
        ],
    }


async def sync_group(ctx: Context, req: Any) -> dict[str, Any]:
    assignments = (
        {a.member_id: bytes(a.assignment) for a in req.assignments} if req.assignments else None
    )
    try:
        authz.check(ctx, R.GROUP, req.group_id, Op.READ)
        result = await ctx.node.sync_group(
            req.group_id, req.generation_id, req.member_id, assignments
        )
    except ClusterError as exc:
        return {"throttle_time": 0, "error_code": _code(exc), "assignment": b""}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "protocol_type": field(req, "protocol_type"),
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def heartbeat(ctx: Context, req: Any) -> dict[str, Any]:
    try:
        authz.check(ctx, R.GROUP, req.group_id, Op.READ)
        ctx.node.heartbeat(req.group_id, req.generation_id, req.member_id)
    except ClusterError as exc:
        return {"throttle_time": 0, "error_code": _code(exc)}
    return {"throttle_time": 0, "error_code": 0}


async def leave_group(ctx: Context, req: Any) -> dict[str, Any]:
    members = field(req, "members")
    refused = authz.refusal(ctx, R.GROUP, req.group_id, Op.READ)
    if refused is not None:
        return {"throttle_time": 0, "error_code": _code(refused), "members": []}
    if members is None:  # v0-v2: one member
        try:
            ctx.node.leave_group(req.group_id, req.member_id)
        except ClusterError as exc:
            return {"throttle_time": 0, "error_code": _code(exc)}
        return {"throttle_time": 0, "error_code": 0}
    out = []
    for m in members:
        try:
            ctx.node.leave_group(req.group_id, m.member_id)
            code = 0
        except ClusterError as exc:
            code = _code(exc)
        out.append(
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": code}
        )
    return {"throttle_time": 0, "error_code": 0, "members": out}


def _split_known(
    ctx: Context, topics: Any
) -> tuple[dict[tuple[str, int], tuple[int, str, int]], dict[tuple[str, int], int]]:
    """The offsets of existing partitions of topics the principal may READ,
    and the error of each other one."""
    good: dict[tuple[str, int], tuple[int, str, int]] = {}
    bad: dict[tuple[str, int], int] = {}
    for t in topics:
        denied = authz.topic_code(ctx, t.name, Op.READ)
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if denied:
                bad[key] = denied
                continue
            try:
                ctx.node.state.partition(t.name, p.partition_index)
            except ClusterError as exc:
                bad[key] = _code(exc)
                continue
            good[key] = (
                int(p.committed_offset),
                p.committed_metadata or "",
                int(field(p, "committed_leader_epoch", -1)),
            )
    return good, bad


def _per_partition(topics: Any, bad: dict[tuple[str, int], int], code: int) -> list[Any]:
    return [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": bad.get((t.name, p.partition_index), code),
                }
                for p in t.partitions
            ],
        }
        for t in topics
    ]


async def offset_commit(ctx: Context, req: Any) -> dict[str, Any]:
    generation = int(field(req, "generation_id_or_member_epoch", field(req, "generation_id", -1)))
    refused = authz.refusal(ctx, R.GROUP, req.group_id, Op.READ)
    if refused is not None:
        return {"throttle_time": 0, "topics": _per_partition(req.topics, {}, _code(refused))}
    good, bad = _split_known(ctx, req.topics)
    code = 0
    try:
        if good or not bad:
            await ctx.node.commit_offsets(req.group_id, generation, req.member_id or "", good)
    except ClusterError as exc:
        code = _code(exc)
    return {"throttle_time": 0, "topics": _per_partition(req.topics, bad, code)}


async def txn_offset_commit(ctx: Context, req: Any) -> dict[str, Any]:
    refused = authz.refusal(
        ctx, R.TRANSACTIONAL_ID, req.transactional_id, Op.WRITE
    ) or authz.refusal(ctx, R.GROUP, req.group_id, Op.READ)
    if refused is not None:
        return {"throttle_time": 0, "topics": _per_partition(req.topics, {}, _code(refused))}
    good, bad = _split_known(ctx, req.topics)
    code = 0
    try:
        if good or not bad:
            await ctx.node.txn_offset_commit(
                req.transactional_id, req.group_id, req.producer_id, req.producer_epoch, good
            )
    except ClusterError as exc:
        code = _code(exc)
    return {"throttle_time": 0, "topics": _per_partition(req.topics, bad, code)}


def _fetch_group(
    ctx: Context,
    group_id: str,
    topics: Any,
    require_stable: bool,
) -> dict[str, Any]:
    groups = ctx.node.state.groups
    try:
        authz.check(ctx, R.GROUP, group_id, Op.DESCRIBE)
        ctx.node.check_ready()
        if topics is None:
            committed = groups.committed(group_id, None)
            wanted: dict[str, list[int]] = {}
            for t, p in committed:
                if authz.allowed(ctx, R.TOPIC, t, Op.DESCRIBE, quiet=True):
                    wanted.setdefault(t, []).append(p)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in topics}
            committed = groups.committed(group_id, [(t, p) for t, ps in wanted.items() for p in ps])
    except ClusterError as exc:
        return {
            "group_id": group_id,
            "topics": [],
            "error_code": _code(exc),
            "error_message": kafka_message(exc),
        }
    unstable = groups.pending_txn_partitions(group_id) if require_stable else set()
    out = []
    for name, partitions in wanted.items():
        rows = []
        denied = authz.topic_code(ctx, name, Op.DESCRIBE) if topics is not None else 0
        for p in partitions:
            c = committed.get((name, p))
            code = int(K.unstable_offset_commit) if (name, p) in unstable else denied
            if c is None or code:
                rows.append(
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": code,
                    }
                )
            else:
                rows.append(
                    {
                        "partition_index": p,
                        "committed_offset": c.offset,
                        "committed_leader_epoch": c.leader_epoch,
                        "metadata": c.metadata,
                        "error_code": 0,
                    }
                )
        out.append({"name": name, "partitions": rows})
    return {"group_id": group_id, "topics": out, "error_code": 0}


async def offset_fetch(ctx: Context, req: Any) -> dict[str, Any]:
    require_stable = bool(field(req, "require_stable", False))
    groups = field(req, "groups")
    if groups is not None and ctx.api_version >= 8:
        return {
            "throttle_time": 0,
            "groups": [_fetch_group(ctx, g.group_id, g.topics, require_stable) for g in groups],
        }
    one = _fetch_group(ctx, req.group_id, req.topics, require_stable)
    return {"throttle_time": 0, "topics": one["topics"], "error_code": one["error_code"]}


async def list_groups(ctx: Context, req: Any) -> dict[str, Any]:
    try:
        ctx.node.check_ready()
    except ClusterError as exc:
        return {"throttle_time": 0, "error_code": _code(exc), "groups": []}
    ctx.node.fire_due_group_timers()
    states = {s.lower() for s in field(req, "states_filter", ()) or ()}
    types = {t.lower() for t in field(req, "types_filter", ()) or ()}
    every = authz.cluster_allowed(ctx, Op.DESCRIBE, quiet=True)
    out = []
    for gid, state, protocol_type in ctx.node.state.groups.list_groups():
        if states and state.lower() not in states:
            continue
        if not every and not authz.allowed(ctx, R.GROUP, gid, Op.DESCRIBE, quiet=True):
            continue
        if types and "classic" not in types:
            continue
        out.append(
            {
                "group_id": gid,
                "protocol_type": protocol_type,
                "group_state": state,
                "group_type": "classic",
            }
        )
    return {"throttle_time": 0, "error_code": 0, "groups": out}


async def describe_groups(ctx: Context, req: Any) -> dict[str, Any]:
    include_ops = bool(field(req, "include_authorized_operations", False))
    if ctx.node.ready:
        ctx.node.fire_due_group_timers()
    out = []
    for gid in req.groups:
        try:
            authz.check(ctx, R.GROUP, gid, Op.DESCRIBE)
            ctx.node.check_ready()
            d = ctx.node.state.groups.describe_group(gid)
            if GroupState(d.state) is GroupState.DEAD and ctx.api_version >= 6:
                raise ClusterError(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"group {gid!r}", f"group {gid!r} does not exist"
                )
        except ClusterError as exc:
            out.append(
                {
                    "error_code": _code(exc),
                    "error_message": kafka_message(exc),
                    "group_id": gid,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
            )
            continue
        out.append(
            {
                "error_code": 0,
                "error_message": None,
                "group_id": gid,
                "group_state": d.state,
                "protocol_type": d.protocol_type,
                "protocol_data": d.protocol_name,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id or None,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in d.members
                ],
                "authorized_operations": authz.operations_field(ctx, R.GROUP, gid, include_ops),
            }
        )
    return {"throttle_time": 0, "groups": out}


async def delete_groups(ctx: Context, req: Any) -> dict[str, Any]:
    results = []
    for gid in req.groups_names:
        try:
            authz.check(ctx, R.GROUP, gid, Op.DELETE)
            await ctx.node.delete_group(gid)
            code = 0
        except ClusterError as exc:
            code = _code(exc)
        results.append({"group_id": gid, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def offset_delete(ctx: Context, req: Any) -> dict[str, Any]:
    refused = authz.refusal(ctx, R.GROUP, req.group_id, Op.DELETE)
    if refused is not None:
        return {"error_code": _code(refused), "throttle_time": 0, "topics": []}
    denied = {t.name: authz.topic_code(ctx, t.name, Op.READ) for t in req.topics}
    bad = {
        (t.name, p.partition_index): denied[t.name]
        for t in req.topics
        for p in t.partitions
        if denied[t.name]
    }
    partitions = [
        (t.name, p.partition_index) for t in req.topics for p in t.partitions
        if not denied[t.name]
    ]
    try:
        for tp in partitions:
            ctx.node.state.partition(*tp)
    except ClusterError as exc:
        return {"error_code": _code(exc), "throttle_time": 0, "topics": []}
    try:
        if partitions:
            await ctx.node.delete_offsets(req.group_id, partitions)
    except ClusterError as exc:
        if exc.code == ErrorCode.INVALID_REQUEST and ctx.node.state.groups.is_active(req.group_id):
            return {
                "error_code": 0,
                "throttle_time": 0,
                "topics": _per_partition(req.topics, bad, int(K.group_subscribed_to_topic)),
            }
        return {"error_code": _code(exc), "throttle_time": 0, "topics": []}
    return {"error_code": 0, "throttle_time": 0, "topics": _per_partition(req.topics, bad, 0)}
