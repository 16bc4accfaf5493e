"""gRPC servicers: decode the request, call the node, encode the answer.

No rule lives here: every decision is made by the core behind `ClusterNode`.
A `ClusterError` becomes a gRPC status carrying a `ccr.v1.ErrorDetail` in its
details (google.rpc.Status), with a status code chosen by `grpc_errors`.

Authorization (`--authorizer acl`; the caller is `grpc_auth.principal_of`):
before anything is read or changed, each call asks the node's gate
(linkd/authz.py) for the operation Kafka checks for the same client call
(Cluster service: CreateTopic CREATE on the cluster or topic, Produce WRITE,
Fetch READ per partition, groups READ, ...; docs/security.md has the table),
and for the Admin service, the cluster resource: ALTER for every verb that
changes something (namespaces, links, attach/detach, failover, set-mode,
recover, reverse, mirror links, faults), DESCRIBE for describe calls, while
list calls list nothing without it. A refusal is PERMISSION_DENIED with the
*_AUTHORIZATION_FAILED detail; nothing changes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import grpc
from grpc import aio

from ccr.v1 import admin_pb2, admin_pb2_grpc, cluster_pb2, cluster_pb2_grpc, errors_pb2
from linkd.authz import Caller
from linkd.core import link_admin, recovery
from linkd.core.acls import CLUSTER_RESOURCE_NAME
from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.cleaner import CleanerView
from linkd.core.cluster import ACKS_ALL, DanglingTxn
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.groups import GroupState, JoinRequest
from linkd.core.links import LinkMode, LinkState, Mapping
from linkd.core.namespaces import Namespace, ResourceType
from linkd.core.plans import Plan, PlanStep
from linkd.core.procedures import PLAN_STEPS, AdminResult, Pending, Step
from linkd.core.provenance import ProvenanceItem
from linkd.core.recovery import GroupCut, PartitionRow
from linkd.grpc_auth import principal_of
from linkd.grpc_errors import abort_with_error
from linkd.metrics import Listener
from linkd.mirror_links import MirrorLinkManager
from linkd.node import ClusterNode
from linkd.operations import Operations
from linkd.replication import LinkManager

log = logging.getLogger("linkd.grpc")

VERSION = "0.1.0"

Req = TypeVar("Req")
Resp = TypeVar("Resp")

_SPEC = {
    cluster_pb2.OFFSET_SPEC_EARLIEST: "earliest",
    cluster_pb2.OFFSET_SPEC_LATEST: "latest",
    cluster_pb2.OFFSET_SPEC_TIMESTAMP: "timestamp",
    cluster_pb2.OFFSET_SPEC_MAX_TIMESTAMP: "max_timestamp",
}


def needs_cluster(
    operation: Op,
) -> Callable[
    [Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]]],
    Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
]:
    """An Admin call that needs `operation` on the cluster resource (checked
    inside `refusals`, so a refusal is answered like any other)."""

    def decorate(
        method: Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
    ) -> Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
        @functools.wraps(method)
        async def wrapper(
            self: Any, request: Req, context: aio.ServicerContext[Req, Resp]
        ) -> Resp:
            self.node.authz.check_cluster(caller(context), operation)
            return await method(self, request, context)

        return wrapper

    return decorate


def caller(context: Any) -> Caller:
    """The principal and address of a gRPC call."""
    peer = context.peer() if hasattr(context, "peer") else ""
    return Caller.of(principal_of(context), str(peer or ""))


def refusals(
    method: Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]],
) -> Callable[[Any, Req, aio.ServicerContext[Req, Resp]], Awaitable[Resp]]:
    """Turns ClusterError into a gRPC status with details; anything else into
    INTERNAL with the exception logged (the daemon keeps serving)."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Req, context: aio.ServicerContext[Req, Resp]) -> Resp:
        try:
            return await method(self, request, context)
        except ClusterError as exc:
            await abort_with_error(context, exc)
        except aio.AbortError:
            raise
        except Exception as exc:
            log.exception("unexpected error in %s", method.__name__)
            await abort_with_error(
                context,
                ClusterError(
                    ErrorCode.INVALID_REQUEST,
                    method.__name__,
                    f"{method.__name__} failed: {type(exc).__name__}: {exc}",
                ),
                status=grpc.StatusCode.INTERNAL,
            )
        raise AssertionError("unreachable: abort raises")

    return wrapper


def _offsets(entries: Any) -> dict[tuple[str, int], tuple[int, str, int]]:
    out: dict[tuple[str, int], tuple[int, str, int]] = {}
    for o in entries:
        out[(o.topic, o.partition)] = (o.offset, o.metadata, o.leader_epoch)
    return out


def _error_detail(exc: ClusterError) -> errors_pb2.ErrorDetail:
    return errors_pb2.ErrorDetail(
        code=errors_pb2.ErrorCode.ValueType(int(exc.code)),
        resource=exc.resource,
        retriable=exc.retriable,
        message=exc.message,
    )


class ClusterService(cluster_pb2_grpc.ClusterServicer):
    def __init__(self, node: ClusterNode) -> None:
        self.node = node

    def _check(self, context: Any, resource_type: int, name: str, op: Op) -> None:
        self.node.authz.check(caller(context), resource_type, name, op)

    def _allowed(self, context: Any, resource_type: int, name: str, op: Op) -> bool:
        """For filtering: not logged, not counted."""
        return self.node.authz.allowed(caller(context), resource_type, name, op, quiet=True)

    def _check_create(self, context: Any, topic: str) -> None:
        """CREATE on the cluster or on the topic (Kafka's CreateTopics rule)."""
        if not self._allowed(context, R.CLUSTER, CLUSTER_RESOURCE_NAME, Op.CREATE):
            self._check(context, R.TOPIC, topic, Op.CREATE)

    def _check_txn(self, context: Any, transactional_id: str) -> None:
        self._check(context, R.TRANSACTIONAL_ID, transactional_id, Op.WRITE)

    def _check_topics(self, context: Any, topics: Iterable[str], op: Op) -> None:
        for topic in sorted(set(topics)):
            self._check(context, R.TOPIC, topic, op)

    def _describe(self, name: str) -> cluster_pb2.TopicDescription:
        topic = self.node.state.topic(name)
        return cluster_pb2.TopicDescription(
            name=topic.name,
            topic_id=topic.topic_id,
            partition_count=len(topic.partitions),
            configs=topic.configs(),
            internal=topic.internal,
            partitions=[
                cluster_pb2.PartitionState(
                    partition=p.partition,
                    log_start_offset=p.log_start_offset,
                    high_watermark=p.high_watermark,
                    last_stable_offset=p.last_stable_offset,
                    log_end_offset=p.log_end_offset,
                    leader_epoch=p.leader_epoch,
                    size_bytes=p.size_bytes,
                    cleaner=_cleaner_pb(self.node.cleaner_view(topic, p.partition)),
                )
                for p in topic.partitions
            ],
        )

    # -- topics --------------------------------------------------------------

    @refusals
    async def CreateTopic(
        self, request: cluster_pb2.CreateTopicRequest, context: Any
    ) -> cluster_pb2.TopicDescription:
        self._check_create(context, request.name)
        await self.node.create_topic(request.name, request.partitions, dict(request.configs))
        return self._describe(request.name)

    @refusals
    async def DeleteTopic(
        self, request: cluster_pb2.DeleteTopicRequest, context: Any
    ) -> cluster_pb2.DeleteTopicResponse:
        self._check(context, R.TOPIC, request.name, Op.DELETE)
        await self.node.delete_topic(request.name)
        return cluster_pb2.DeleteTopicResponse()

    @refusals
    async def DescribeTopic(
        self, request: cluster_pb2.DescribeTopicRequest, context: Any
    ) -> cluster_pb2.TopicDescription:
        self._check(context, R.TOPIC, request.name, Op.DESCRIBE)
        self.node.check_ready()
        return self._describe(request.name)

    @refusals
    async def ListTopics(
        self, request: cluster_pb2.ListTopicsRequest, context: Any
    ) -> cluster_pb2.ListTopicsResponse:
        self.node.check_ready()
        names = sorted(
            n
            for n in self.node.state.topics
            if (request.include_internal or not n.startswith("_"))
            and self._allowed(context, R.TOPIC, n, Op.DESCRIBE)
        )
        return cluster_pb2.ListTopicsResponse(topics=[self._describe(n) for n in names])

    @refusals
    async def AlterTopicConfigs(
        self, request: cluster_pb2.AlterTopicConfigsRequest, context: Any
    ) -> cluster_pb2.TopicDescription:
        self._check(context, R.TOPIC, request.name, Op.ALTER_CONFIGS)
        await self.node.alter_topic_configs(request.name, dict(request.set), list(request.delete))
        return self._describe(request.name)

    @refusals
    async def CreatePartitions(
        self, request: cluster_pb2.CreatePartitionsRequest, context: Any
    ) -> cluster_pb2.TopicDescription:
        self._check(context, R.TOPIC, request.name, Op.ALTER)
        await self.node.create_partitions(request.name, request.total_count)
        return self._describe(request.name)

    # -- data ----------------------------------------------------------------

    @refusals
    async def Produce(
        self, request: cluster_pb2.ProduceRequest, context: Any
    ) -> cluster_pb2.ProduceResponse:
        with self.node.metrics.produce_request(Listener.GRPC):
            return await self._produce(request, context)

    async def _produce(
        self, request: cluster_pb2.ProduceRequest, context: Any
    ) -> cluster_pb2.ProduceResponse:
        if request.transactional_id:
            self._check_txn(context, request.transactional_id)
        self._check(context, R.TOPIC, request.topic, Op.WRITE)
        base, duplicate, log_start, append_time = await self.node.produce(
            request.topic,
            request.partition,
            request.batch,
            request.acks if request.HasField("acks") else ACKS_ALL,
            request.transactional_id,
            request.timeout_ms,
        )
        if not duplicate:
            self.node.metrics.produced(Listener.GRPC, request.batch)
        return cluster_pb2.ProduceResponse(
            base_offset=base,
            duplicate=duplicate,
            log_start_offset=log_start,
            log_append_time_ms=append_time,
        )

    @refusals
    async def Fetch(
        self, request: cluster_pb2.FetchRequest, context: Any
    ) -> cluster_pb2.FetchResponse:
        with self.node.metrics.fetch_request(Listener.GRPC):
            return await self._fetch(request, context)

    async def _fetch(
        self, request: cluster_pb2.FetchRequest, context: Any
    ) -> cluster_pb2.FetchResponse:
        if not request.partitions:
            raise ClusterError(ErrorCode.INVALID_REQUEST, "fetch", "fetch names no partitions")
        readable = {
            t: self.node.authz.refusal(caller(context), R.TOPIC, t, Op.READ)
            for t in {p.topic for p in request.partitions}
        }
        parts = [
            (p.topic, p.partition, p.offset, p.max_bytes if p.max_bytes > 0 else 1 << 20)
            for p in request.partitions
            if readable[p.topic] is None
        ]
        fetched = (
            await self.node.fetch(
                parts,
                max_wait_ms=request.max_wait_ms,
                min_bytes=request.min_bytes,
                max_bytes=request.max_bytes,
                read_committed=(
                    request.isolation_level == cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED
                ),
                group_id=request.group_id,
            )
            if parts
            else []
        )
        self.node.metrics.fetched(Listener.GRPC, (f.records for f in fetched if f.error is None))
        out = cluster_pb2.FetchResponse()
        for p in request.partitions:
            refused = readable[p.topic]
            if refused is not None:
                entry = out.partitions.add(topic=p.topic, partition=p.partition)
                entry.error.CopyFrom(_error_detail(refused))
        for f in fetched:
            entry = out.partitions.add(topic=f.topic, partition=f.partition)
            if f.error is not None:
                entry.error.CopyFrom(_error_detail(f.error))
                continue
            entry.high_watermark = f.high_watermark
            entry.last_stable_offset = f.last_stable_offset
            entry.log_start_offset = f.log_start_offset
            entry.records = f.records
            for a in f.aborted:
                entry.aborted_transactions.add(
                    producer_id=a.producer_id, first_offset=a.first_offset
                )
        return out

    @refusals
    async def ListOffsets(
        self, request: cluster_pb2.ListOffsetsRequest, context: Any
    ) -> cluster_pb2.ListOffsetsResponse:
        spec = _SPEC.get(request.spec)
        if spec is None:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                f"{request.topic}-{request.partition}",
                f"unknown offset spec {request.spec}",
            )
        self._check(context, R.TOPIC, request.topic, Op.DESCRIBE)
        lookup = await self.node.list_offsets(
            request.topic,
            request.partition,
            spec,
            request.timestamp,
            request.isolation_level == cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED,
        )
        return cluster_pb2.ListOffsetsResponse(
            offset=lookup.offset, timestamp=lookup.timestamp, leader_epoch=lookup.leader_epoch
        )

    # -- groups --------------------------------------------------------------

    @refusals
    async def JoinGroup(
        self, request: cluster_pb2.JoinGroupRequest, context: Any
    ) -> cluster_pb2.JoinGroupResponse:
        self._check(context, R.GROUP, request.group_id, Op.READ)
        result = await self.node.join_group(
            JoinRequest(
                group_id=request.group_id,
                member_id=request.member_id,
                client_id=request.client_id,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms or request.session_timeout_ms,
                protocol_type=request.protocol_type,
                protocols=tuple((p.name, p.metadata) for p in request.protocols),
                group_instance_id=request.group_instance_id,
            )
        )
        return cluster_pb2.JoinGroupResponse(
            generation_id=result.generation_id,
            protocol_name=result.protocol_name,
            leader_id=result.leader_id,
            member_id=result.member_id,
            members=[
                cluster_pb2.JoinGroupMember(member_id=m, metadata=md, group_instance_id=gi)
                for m, md, gi in result.members
            ],
        )

    @refusals
    async def SyncGroup(
        self, request: cluster_pb2.SyncGroupRequest, context: Any
    ) -> cluster_pb2.SyncGroupResponse:
        assignments = (
            {a.member_id: a.assignment for a in request.assignments}
            if len(request.assignments)
            else None
        )
        self._check(context, R.GROUP, request.group_id, Op.READ)
        result = await self.node.sync_group(
            request.group_id, request.generation_id, request.member_id, assignments
        )
        return cluster_pb2.SyncGroupResponse(
            assignment=result.assignment, protocol_name=result.protocol_name
        )

    @refusals
    async def Heartbeat(
        self, request: cluster_pb2.HeartbeatRequest, context: Any
    ) -> cluster_pb2.HeartbeatResponse:
        self._check(context, R.GROUP, request.group_id, Op.READ)
        self.node.heartbeat(request.group_id, request.generation_id, request.member_id)
        return cluster_pb2.HeartbeatResponse()

    @refusals
    async def LeaveGroup(
        self, request: cluster_pb2.LeaveGroupRequest, context: Any
    ) -> cluster_pb2.LeaveGroupResponse:
        self._check(context, R.GROUP, request.group_id, Op.READ)
        self.node.leave_group(request.group_id, request.member_id)
        return cluster_pb2.LeaveGroupResponse()

    @refusals
    async def CommitOffsets(
        self, request: cluster_pb2.CommitOffsetsRequest, context: Any
    ) -> cluster_pb2.CommitOffsetsResponse:
        self._check(context, R.GROUP, request.group_id, Op.READ)
        self._check_topics(context, (o.topic for o in request.offsets), Op.READ)
        await self.node.commit_offsets(
            request.group_id, request.generation_id, request.member_id, _offsets(request.offsets)
        )
        return cluster_pb2.CommitOffsetsResponse()

    @refusals
    async def FetchCommittedOffsets(
        self, request: cluster_pb2.FetchCommittedOffsetsRequest, context: Any
    ) -> cluster_pb2.FetchCommittedOffsetsResponse:
        self._check(context, R.GROUP, request.group_id, Op.DESCRIBE)
        self._check_topics(context, (p.topic for p in request.partitions), Op.DESCRIBE)
        self.node.check_ready()
        wanted = (
            [(p.topic, p.partition) for p in request.partitions]
            if len(request.partitions)
            else None
        )
        committed = self.node.state.groups.committed(request.group_id, wanted)
        out = cluster_pb2.FetchCommittedOffsetsResponse()
        keys = wanted
        if keys is None:
            keys = [
                k for k in sorted(committed) if self._allowed(context, R.TOPIC, k[0], Op.DESCRIBE)
            ]
        for topic, partition in keys:
            c = committed.get((topic, partition))
            if c is None:
                out.offsets.add(topic=topic, partition=partition, offset=-1, leader_epoch=-1)
            else:
                out.offsets.add(
                    topic=topic,
                    partition=partition,
                    offset=c.offset,
                    metadata=c.metadata,
                    leader_epoch=c.leader_epoch,
                )
        return out

    @refusals
    async def ListGroups(
        self, request: cluster_pb2.ListGroupsRequest, context: Any
    ) -> cluster_pb2.ListGroupsResponse:
        self.node.check_ready()
        self.node.fire_due_group_timers()
        every = self._allowed(context, R.CLUSTER, CLUSTER_RESOURCE_NAME, Op.DESCRIBE)
        return cluster_pb2.ListGroupsResponse(
            groups=[
                cluster_pb2.GroupListing(
                    group_id=g, state=s, protocol_type=t, group_state=_group_state_pb(s)
                )
                for g, s, t in self.node.state.groups.list_groups()
                if every or self._allowed(context, R.GROUP, g, Op.DESCRIBE)
            ]
        )

    @refusals
    async def DescribeGroup(
        self, request: cluster_pb2.DescribeGroupRequest, context: Any
    ) -> cluster_pb2.DescribeGroupResponse:
        self._check(context, R.GROUP, request.group_id, Op.DESCRIBE)
        self.node.check_ready()
        self.node.fire_due_group_timers()
        d = self.node.state.groups.describe_group(request.group_id)
        committed = self.node.state.groups.committed(request.group_id, None)
        return cluster_pb2.DescribeGroupResponse(
            group_id=d.group_id,
            state=d.state,
            group_state=_group_state_pb(d.state),
            protocol_type=d.protocol_type,
            protocol_name=d.protocol_name,
            generation_id=d.generation_id,
            leader_id=d.leader_id,
            members=[
                cluster_pb2.GroupMemberDescription(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    assignment=m.assignment,
                    group_instance_id=m.group_instance_id,
                )
                for m in d.members
            ],
            offsets=[
                cluster_pb2.OffsetAndMetadata(
                    topic=t,
                    partition=p,
                    offset=c.offset,
                    metadata=c.metadata,
                    leader_epoch=c.leader_epoch,
                )
                for (t, p), c in sorted(committed.items())
            ],
        )

    # -- producers -------------------------------------------------------------

    @refusals
    async def InitProducerId(
        self, request: cluster_pb2.InitProducerIdRequest, context: Any
    ) -> cluster_pb2.InitProducerIdResponse:
        self._check_init(context, request.transactional_id)
        pid, epoch = await self.node.init_producer_id(
            request.transactional_id,
            request.transaction_timeout_ms or 60_000,
            (request.producer_id, request.producer_epoch),
        )
        return cluster_pb2.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    @refusals
    async def AddPartitionsToTxn(
        self, request: cluster_pb2.AddPartitionsToTxnRequest, context: Any
    ) -> cluster_pb2.AddPartitionsToTxnResponse:
        self._check_txn(context, request.transactional_id)
        self._check_topics(context, (p.topic for p in request.partitions), Op.WRITE)
        await self.node.add_partitions_to_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [(p.topic, p.partition) for p in request.partitions],
        )
        return cluster_pb2.AddPartitionsToTxnResponse()

    @refusals
    async def AddOffsetsToTxn(
        self, request: cluster_pb2.AddOffsetsToTxnRequest, context: Any
    ) -> cluster_pb2.AddOffsetsToTxnResponse:
        self._check_txn(context, request.transactional_id)
        self._check(context, R.GROUP, request.group_id, Op.READ)
        await self.node.add_offsets_to_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        return cluster_pb2.AddOffsetsToTxnResponse()

    @refusals
    async def TxnOffsetCommit(
        self, request: cluster_pb2.TxnOffsetCommitRequest, context: Any
    ) -> cluster_pb2.TxnOffsetCommitResponse:
        self._check_txn(context, request.transactional_id)
        self._check(context, R.GROUP, request.group_id, Op.READ)
        self._check_topics(context, (o.topic for o in request.offsets), Op.READ)
        await self.node.txn_offset_commit(
            request.transactional_id,
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            _offsets(request.offsets),
        )
        return cluster_pb2.TxnOffsetCommitResponse()

    @refusals
    async def EndTxn(
        self, request: cluster_pb2.EndTxnRequest, context: Any
    ) -> cluster_pb2.EndTxnResponse:
        self._check_txn(context, request.transactional_id)
        await self.node.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.commit
        )
        return cluster_pb2.EndTxnResponse()

    def _check_init(self, context: Any, transactional_id: str) -> None:
        """WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the
        cluster or WRITE on some topic (KIP-679)."""
        if transactional_id:
            self._check_txn(context, transactional_id)
            return
        gate, who = self.node.authz, caller(context)
        if self._allowed(context, R.CLUSTER, CLUSTER_RESOURCE_NAME, Op.IDEMPOTENT_WRITE):
            return
        if not gate.allowed_any(who, R.TOPIC, Op.WRITE):
            gate.check_cluster(who, Op.IDEMPOTENT_WRITE)

    # -- operations --------------------------------------------------------------

    async def Health(
        self, request: cluster_pb2.HealthRequest, context: Any
    ) -> cluster_pb2.HealthResponse:
        return cluster_pb2.HealthResponse(
            cluster_id=self.node.cluster_id,
            status="SERVING" if self.node.ready else "NOT_SERVING",
            version=VERSION,
            uptime_ms=self.node.clock() - self.node.started_ms,
        )


class AdminService(admin_pb2_grpc.AdminServicer):
    """The administrative plane: the cluster, namespaces (spec section 2) and,
    with the links work, replication links."""

    def __init__(
        self, node: ClusterNode, links: LinkManager, mirror_links: MirrorLinkManager | None = None
    ) -> None:
        self.node = node
        self.links = links
        self.ops = Operations(node, links)
        self.mirror_links = mirror_links or MirrorLinkManager(node)

    def _may_list(self, context: Any) -> bool:
        """List calls list nothing without DESCRIBE on the cluster (not logged)."""
        return self.node.authz.allowed(
            caller(context), R.CLUSTER, CLUSTER_RESOURCE_NAME, Op.DESCRIBE, quiet=True
        )

    @refusals
    async def DescribeCluster(
        self, request: admin_pb2.DescribeClusterRequest, context: Any
    ) -> admin_pb2.DescribeClusterResponse:
        return admin_pb2.DescribeClusterResponse(
            cluster_id=self.node.cluster_id,
            version=VERSION,
            topic_count=len(self.node.state.topics),
            group_count=len(self.node.state.groups.list_groups()),
            data_dir=str(self.node.data_dir_path),
            fsync="always" if self.node.fsync else "never",
            principal=principal_of(context),
        )

    # -- namespaces ----------------------------------------------------------------

    @refusals
    @needs_cluster(Op.ALTER)
    async def CreateNamespace(
        self, request: admin_pb2.CreateNamespaceRequest, context: Any
    ) -> admin_pb2.Namespace:
        ns = await self.node.create_namespace(request.type, request.prefix, request.reserved)
        return _namespace_pb(ns)

    @refusals
    async def ListNamespaces(
        self, request: admin_pb2.ListNamespacesRequest, context: Any
    ) -> admin_pb2.ListNamespacesResponse:
        self.node.check_ready()
        if not self._may_list(context):
            return admin_pb2.ListNamespacesResponse()
        return admin_pb2.ListNamespacesResponse(
            namespaces=[_namespace_pb(ns) for ns in self.node.state.namespaces.list(request.type)]
        )

    @refusals
    @needs_cluster(Op.DESCRIBE)
    async def DescribeNamespace(
        self, request: admin_pb2.DescribeNamespaceRequest, context: Any
    ) -> admin_pb2.DescribeNamespaceResponse:
        self.node.check_ready()
        ns = self.node.state.namespaces.get(request.type, request.prefix)
        return admin_pb2.DescribeNamespaceResponse(
            namespace=_namespace_pb(ns),
            resources=self.node.state.namespace_resources(ns.type, ns.prefix),
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def SetReserved(
        self, request: admin_pb2.SetReservedRequest, context: Any
    ) -> admin_pb2.SetReservedResponse:
        result = await self.ops.set_reserved(request.type, request.prefix, request.reserved)
        ns = self.node.state.namespaces.get(request.type, request.prefix)
        return admin_pb2.SetReservedResponse(
            namespace=_namespace_pb(ns),
            aborted_transactions=result.aborted,
            aborted_dangling=[_dangling_pb(d) for d in result.dangling],
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def DeleteNamespace(
        self, request: admin_pb2.DeleteNamespaceRequest, context: Any
    ) -> admin_pb2.DeleteNamespaceResponse:
        await self.node.delete_namespace(request.type, request.prefix)
        return admin_pb2.DeleteNamespaceResponse()

    # -- links -----------------------------------------------------------------

    def _changed_link_pb(self, name: str, result: AdminResult) -> admin_pb2.LinkDescription:
        """The link after an operator's change, with what the remote has not
        confirmed (`pending`)."""
        described = self._link_pb(name)
        pending = _pending_pb(result.pending)
        if pending is not None:
            described.pending.CopyFrom(pending)
        described.aborted_dangling.extend(_dangling_pb(d) for d in result.aborted)
        return described

    def _link_pb(self, name: str) -> admin_pb2.LinkDescription:
        summary = link_admin.link_summary(self.node.state, name, self.node.clock())
        config = summary.config
        sync = config.mode == LinkMode.SYNC
        mode = admin_pb2.LINK_MODE_SYNC if sync else admin_pb2.LINK_MODE_ASYNC
        direction = (
            admin_pb2.CONNECTION_DIRECTION_LOCAL_DIALS
            if config.connection_direction == "local_dials"
            else admin_pb2.CONNECTION_DIRECTION_REMOTE_DIALS
        )
        return admin_pb2.LinkDescription(
            name=config.name,
            link_id=config.link_id,
            local_cluster_id=config.local_cluster_id,
            remote_cluster_id=config.remote_cluster_id,
            remote_bootstrap=config.value("remote_bootstrap"),
            mode=mode,
            connection_direction=direction,
            state=summary.state,
            link_state=_link_state_pb(summary.state),
            state_entered_at_ms=summary.entered_at_ms,
            link_epoch=config.link_epoch,
            mappings=[_mapping_pb(m) for m in config.attached_mappings()],
            partitions=[_lag_pb(p) for p in summary.partitions],
            history=[
                admin_pb2.LinkStateChange(
                    state=st, entered_at_ms=at, link_state=_link_state_pb(st)
                )
                for st, at in summary.history
            ],
            refused_mappings=[_mapping_pb(m) for m in summary.refused],
            last_error_code=summary.last_error.code if summary.last_error else "",
            last_error=summary.last_error.message if summary.last_error else "",
            last_error_at_ms=summary.last_error.at_ms if summary.last_error else 0,
            credential_problem=summary.credential_problem,
            gaps=[
                admin_pb2.LinkGap(
                    topic=row.gap.topic,
                    partition=row.gap.partition,
                    from_offset=row.gap.from_offset,
                    to_offset=row.gap.to_offset,
                    at_ms=row.gap.at_ms,
                    reason=row.gap.reason,
                    stopped=row.stopped,
                )
                for row in summary.gaps
            ],
            gap_policy=config.gap_policy.value,
            fetch_bound=config.fetch_bound.value,
            failover_truncation=config.failover_truncation.value,
            failback_reconciliation=config.failback_reconciliation.value,
            procedure=_plan_pb(self.node.state.plans.get(name)),
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def CreateLink(
        self, request: admin_pb2.CreateLinkRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        direction = _DIRECTIONS.get(request.connection_direction)
        if direction is None:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {request.name!r}",
                f"link {request.name!r}: connection_direction is required: "
                "CONNECTION_DIRECTION_LOCAL_DIALS (this cluster dials the remote) or "
                f"CONNECTION_DIRECTION_REMOTE_DIALS, not {request.connection_direction}",
            )
        config = await self.ops.create_link(
            request.name,
            request.remote_bootstrap,
            request.remote_credentials,
            direction,
            request.local_bootstrap,
            dict(request.configs),
        )
        return self._link_pb(config.name)

    @refusals
    @needs_cluster(Op.ALTER)
    async def AlterLink(
        self, request: admin_pb2.AlterLinkRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        r = request
        config = await self.ops.alter_link(
            r.name,
            r.remote_bootstrap if r.HasField("remote_bootstrap") else None,
            r.remote_credentials if r.HasField("remote_credentials") else None,
            r.local_bootstrap if r.HasField("local_bootstrap") else None,
            {
                field: getattr(r, field)
                for field in (
                    "gap_policy", "fetch_bound", "failover_truncation", "failback_reconciliation"
                )
                if r.HasField(field)
            },
        )
        return self._link_pb(config.name)

    @refusals
    @needs_cluster(Op.ALTER)
    async def ResumePartition(
        self, request: admin_pb2.ResumePartitionRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        config = await self.ops.resume_partition(request.link, request.topic, request.partition)
        return self._link_pb(config.name)

    @refusals
    async def ListLinks(
        self, request: admin_pb2.ListLinksRequest, context: Any
    ) -> admin_pb2.ListLinksResponse:
        self.node.check_ready()
        if not self._may_list(context):
            return admin_pb2.ListLinksResponse()
        return admin_pb2.ListLinksResponse(
            links=[self._link_pb(n) for n in self.node.state.links.names()]
        )

    @refusals
    @needs_cluster(Op.DESCRIBE)
    async def DescribeLink(
        self, request: admin_pb2.DescribeLinkRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        self.node.check_ready()
        self.node.state.links.get(request.name)
        return self._link_pb(request.name)

    @refusals
    @needs_cluster(Op.ALTER)
    async def DeleteLink(
        self, request: admin_pb2.DeleteLinkRequest, context: Any
    ) -> admin_pb2.DeleteLinkResponse:
        result = await self.ops.delete_link(request.name)
        return admin_pb2.DeleteLinkResponse(
            pending=_pending_pb(result.pending),
            aborted_dangling=[_dangling_pb(d) for d in result.aborted],
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def AttachNamespace(
        self, request: admin_pb2.AttachNamespaceRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        result = await self.ops.attach(
            request.link,
            ResourceType.parse(request.type).label,
            request.local_prefix,
            request.remote_prefix,
            _leader_of(request),
        )
        return self._changed_link_pb(request.link, result)

    @refusals
    @needs_cluster(Op.ALTER)
    async def DetachNamespace(
        self, request: admin_pb2.DetachNamespaceRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        result = await self.ops.detach(
            request.link, ResourceType.parse(request.type).label, request.local_prefix
        )
        return self._changed_link_pb(request.link, result)

    @refusals
    @needs_cluster(Op.ALTER)
    async def Failover(
        self, request: admin_pb2.FailoverRequest, context: Any
    ) -> admin_pb2.FailoverResponse:
        result = await self.ops.failover(request.link, request.force)
        namespaces = [
            self.node.state.namespaces.get(ResourceType.parse(t), prefix)
            for t, prefix in result.namespaces
        ]
        return admin_pb2.FailoverResponse(
            link=self._link_pb(request.link),
            abandoned=[_lag_pb(p) for p in result.abandoned],
            namespaces=[_namespace_pb(ns) for ns in namespaces],
            partitions=[_lag_pb(p) for p in result.partitions],
            aborted_transactions=[_dangling_pb(d) for d in result.dangling],
            topics_known_at_ms=result.topics_known_at_ms,
            groups=[
                admin_pb2.GroupResume(
                    group=g.group,
                    topic=g.topic,
                    partition=g.partition,
                    resume_offset=g.resume_offset,
                    last_commit_heard=g.heard_offset,
                    heard_at_ms=g.heard_at_ms,
                    behind=g.behind,
                )
                for g in result.groups
            ],
            steps=_steps_pb(result.steps),
            resumed_from=result.resumed_from,
            truncated=[
                admin_pb2.FailoverCut(
                    topic=c.topic,
                    partition=c.partition,
                    truncate_to=c.truncate_to,
                    records_removed=c.removed,
                    open_transactions=c.transactions,
                )
                for c in result.truncated
            ],
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def SetLinkMode(
        self, request: admin_pb2.SetLinkModeRequest, context: Any
    ) -> admin_pb2.LinkDescription:
        if request.mode not in (admin_pb2.LINK_MODE_ASYNC, admin_pb2.LINK_MODE_SYNC):
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {request.link!r}",
                f"link {request.link!r}: set-mode needs ASYNC or SYNC, got mode {request.mode}",
            )
        mode = "SYNC" if request.mode == admin_pb2.LINK_MODE_SYNC else "ASYNC"
        result = await self.ops.set_mode(request.link, mode)
        return self._changed_link_pb(request.link, result)

    @refusals
    @needs_cluster(Op.ALTER)
    async def UncleanElection(
        self, request: admin_pb2.UncleanElectionRequest, context: Any
    ) -> admin_pb2.UncleanElectionResponse:
        removed, epoch, end = await self.node.unclean_election(
            request.topic, request.partition, request.truncate_to
        )
        return admin_pb2.UncleanElectionResponse(
            removed_records=removed, leader_epoch=epoch, log_end_offset=end
        )


    # -- provenance and recovery (spec section 8) ---------------------------------------

    @refusals
    async def GetProvenance(
        self, request: admin_pb2.GetProvenanceRequest, context: Any
    ) -> admin_pb2.GetProvenanceResponse:
        self.node.authz.check(caller(context), R.TOPIC, request.topic, Op.DESCRIBE)
        self.node.check_ready()
        topic = self.node.state.topic(request.topic)
        return admin_pb2.GetProvenanceResponse(
            topic=topic.name,
            topic_id=topic.topic_id,
            partitions=[
                admin_pb2.PartitionProvenance(
                    partition=h.partition,
                    log_start_offset=h.log_start_offset,
                    log_end_offset=h.log_end_offset,
                    high_watermark=h.high_watermark,
                    leader_epoch=h.leader_epoch,
                    epoch_history=[
                        admin_pb2.LeaderEpochStart(epoch=e, start_offset=s)
                        for e, s in h.epoch_history
                    ],
                    provenance=[_provenance_pb(item, name) for item, name in h.provenance],
                )
                for h in recovery.partition_histories(self.node.state, topic.name)
            ],
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def RecoverLink(
        self, request: admin_pb2.RecoverLinkRequest, context: Any
    ) -> admin_pb2.RecoverLinkResponse:
        requested = [
            (
                ResourceType.parse(n.type).label,
                n.local_prefix,
                n.remote_prefix if n.HasField("remote_prefix") else None,
            )
            for n in request.namespaces
        ]
        plan = await self.ops.recover(request.link, requested, request.confirm)
        return admin_pb2.RecoverLinkResponse(
            link=plan.link,
            local_cluster_id=plan.local_cluster_id,
            remote_cluster_id=plan.remote_cluster_id,
            confirmed=plan.confirmed,
            partitions=[_recovery_partition_pb(r) for r in plan.partitions],
            groups=[_group_cut_pb(g) for g in plan.groups],
            local_records_lost=plan.local_records_lost,
            remote_records_lost=plan.remote_records_lost,
            diverged_partitions=plan.diverged_partitions,
            notes=list(plan.notes),
            mappings=[
                _prefix_mapping_pb(m.resource_type, m.local_prefix, m.remote_prefix, "remote")
                for m in plan.mappings
            ],
            steps=_steps_pb(plan.steps),
            resumed_from=plan.resumed_from,
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def ReverseLink(
        self, request: admin_pb2.ReverseLinkRequest, context: Any
    ) -> admin_pb2.ReverseLinkResponse:
        report = await self.ops.reverse(request.link, request.timeout_ms)
        return admin_pb2.ReverseLinkResponse(
            link=report.link,
            ok=report.ok,
            steps=_steps_pb(report.steps),
            error_code=report.error.code.name if report.error is not None else "",
            error_message=report.error.message if report.error is not None else "",
            mappings=self._link_pb(request.link).mappings,
            resumed_from=report.resumed_from,
            pending=report.pending,
            rolled_back=report.rolled_back,
        )

    # -- mirror links ------------------------------------------------------------------

    def _mirror_link_pb(
        self, name: str, include_deleted: bool = False
    ) -> admin_pb2.MirrorLinkDescription:
        table = self.node.state.mirror_links
        link = table.links[name] if include_deleted else table.get(name)
        out = admin_pb2.MirrorLinkDescription(
            name=link.name,
            alias=link.alias,
            properties=link.properties,
            created_at_ms=link.created_ms,
            deleted_at_ms=link.deleted_ms or 0,
        )
        if not link.live:
            return out
        hosted = table.hosted(name)
        status = self.mirror_links.status(name)
        out.running = bool(status["running"])
        out.last_error = str(status["last_error"])
        out.last_error_at_ms = int(status["last_error_ms"])
        out.restarts = int(status["restarts"])
        out.warnings.extend(hosted.warnings)
        out.not_hosted.extend(hosted.not_hosted)
        stats: dict[str, dict[str, int]] = status["stats"]
        for f in hosted.flows:
            out.flows.append(
                admin_pb2.MirrorFlowDescription(
                    flow=f.name,
                    replicates=f.enabled,
                    exactly_once=f.exactly_once,
                    heartbeats=f.emit_heartbeats_enabled,
                    checkpoints=f.emit_checkpoints_enabled,
                    sync_group_offsets=f.sync_group_offsets_enabled,
                    stats={k: int(v) for k, v in stats.get(f.name, {}).items()},
                )
            )
        return out

    @refusals
    @needs_cluster(Op.ALTER)
    async def CreateMirrorLink(
        self, request: admin_pb2.CreateMirrorLinkRequest, context: Any
    ) -> admin_pb2.MirrorLinkDescription:
        link, _hosted = await self.mirror_links.create(
            request.name, request.alias, request.properties
        )
        return self._mirror_link_pb(link.name)

    @refusals
    async def ListMirrorLinks(
        self, request: admin_pb2.ListMirrorLinksRequest, context: Any
    ) -> admin_pb2.ListMirrorLinksResponse:
        self.node.check_ready()
        if not self._may_list(context):
            return admin_pb2.ListMirrorLinksResponse()
        table = self.node.state.mirror_links
        links = table.all() if request.include_deleted else table.live()
        return admin_pb2.ListMirrorLinksResponse(
            links=[self._mirror_link_pb(x.name, include_deleted=True) for x in links]
        )

    @refusals
    @needs_cluster(Op.ALTER)
    async def DeleteMirrorLink(
        self, request: admin_pb2.DeleteMirrorLinkRequest, context: Any
    ) -> admin_pb2.DeleteMirrorLinkResponse:
        deleted_ms, stopped = await self.mirror_links.delete(request.name)
        return admin_pb2.DeleteMirrorLinkResponse(deleted_at_ms=deleted_ms, stopped=stopped)


def _mapping_pb(m: Mapping) -> admin_pb2.NamespaceMapping:
    return _prefix_mapping_pb(m.resource_type, m.local_prefix, m.remote_prefix, m.leader, m.note)


def _prefix_mapping_pb(
    resource_type: str, local_prefix: str, remote_prefix: str, leader: str, note: str = ""
) -> admin_pb2.NamespaceMapping:
    """A mapping as the admin API shows it (describe-link, and the namespaces
    a recovery or a reversal plan names)."""
    return admin_pb2.NamespaceMapping(
        type=admin_pb2.ResourceType.ValueType(int(ResourceType.parse(resource_type))),
        local_prefix=local_prefix,
        remote_prefix=remote_prefix,
        leader=leader,
        note=note,
        leader_side=_LEADER_SIDES[leader],
    )


def _pending_pb(p: Pending | None) -> admin_pb2.PendingChange | None:
    if p is None:
        return None
    return admin_pb2.PendingChange(
        remote_cluster_id=p.remote_cluster_id, remains=p.remains, reason=p.reason
    )


def _steps_pb(steps: Iterable[PlanStep | Step]) -> list[admin_pb2.ReverseStep]:
    """A durable procedure's steps, each with what it did on both sides."""
    return [
        admin_pb2.ReverseStep(name=s.name, ok=s.ok, result=s.result, duration_ms=s.duration_ms)
        for s in steps
    ]


def _provenance_pb(item: ProvenanceItem, link_name: str) -> admin_pb2.ProvenanceEntry:
    """One provenance entry as GetProvenance answers it."""
    return admin_pb2.ProvenanceEntry(
        kind=item.kind.value,
        offset=item.offset,
        source_cluster_id=item.source,
        link_id=item.link_id,
        link_name=link_name,
        link_epoch=item.link_epoch,
        removed_records=item.removed,
        reason=item.reason,
        offsets_moved=[
            admin_pb2.MovedOffset(group=g, from_offset=o) for g, o in item.offsets_moved
        ],
        to_offset=item.to_offset,
        at_ms=item.at_ms,
        uncommitted=[
            admin_pb2.UncommittedTransaction(producer_id=pid, first_offset=first)
            for pid, first in item.uncommitted
        ],
    )


def _recovery_partition_pb(r: PartitionRow) -> admin_pb2.RecoveryPartition:
    return admin_pb2.RecoveryPartition(
        topic=r.topic,
        remote_topic=r.remote_topic,
        partition=r.partition,
        local_log_end_offset=r.local_log_end_offset,
        remote_log_end_offset=r.remote_log_end_offset,
        common_offset=r.common_offset,
        truncate_to=r.truncate_to,
        local_records_lost=r.local_records_lost,
        remote_records_lost=r.remote_records_lost,
        diverged=r.diverged,
        reason=r.reason,
        related=r.related,
        reopened_transactions=[
            admin_pb2.ReopenedTransaction(
                producer_id=t.producer_id,
                first_offset=t.first_offset,
                marker_offset=t.marker_offset,
                committed=t.committed,
                own_marker=t.own_marker,
                replicated=t.replicated,
            )
            for t in r.reopened
        ],
    )


def _group_cut_pb(g: GroupCut) -> admin_pb2.RecoveryGroupOffset:
    return admin_pb2.RecoveryGroupOffset(
        group=g.group,
        topic=g.topic,
        partition=g.partition,
        committed_offset=g.committed_offset,
        new_offset=g.new_offset,
        reason=g.reason,
    )


def _plan_pb(plan: Plan | None) -> admin_pb2.ProcedurePlan | None:
    """A durable procedure's plan (linkd/core/plans.py), None when none."""
    if plan is None:
        return None
    return admin_pb2.ProcedurePlan(
        procedure=plan.procedure,
        remote_cluster_id=plan.remote_cluster_id,
        namespaces=[
            _prefix_mapping_pb(n.resource_type, n.local_prefix, n.remote_prefix, "local")
            for n in plan.namespaces
        ],
        steps=_steps_pb(plan.steps),
        next_step=plan.next_step(PLAN_STEPS.get(plan.procedure, ())) or "",
        started_at_ms=plan.started_ms,
        restarts=plan.restarts,
    )


def _lag_pb(p: link_admin.PartitionLag) -> admin_pb2.PartitionLag:
    return admin_pb2.PartitionLag(**dataclasses.asdict(p), partition_role=_ROLES[p.role])


# The enums of the protos beside the strings they replace (which stay on the
# wire, deprecated, for clients built before them).
_DIRECTIONS = {
    admin_pb2.CONNECTION_DIRECTION_LOCAL_DIALS: "local_dials",
    admin_pb2.CONNECTION_DIRECTION_REMOTE_DIALS: "remote_dials",
}
_LEADER_SIDES = {"local": admin_pb2.LEADER_SIDE_LOCAL, "remote": admin_pb2.LEADER_SIDE_REMOTE}
_ROLES = {"leader": admin_pb2.PARTITION_ROLE_LEADER, "follower": admin_pb2.PARTITION_ROLE_FOLLOWER}


def _link_state_pb(state: str) -> admin_pb2.LinkState.ValueType:
    """The enum of a link state ("FOLLOWING" -> LINK_STATE_FOLLOWING)."""
    return admin_pb2.LinkState.Value(f"LINK_STATE_{LinkState(state).name}")


def _group_state_pb(state: str) -> cluster_pb2.GroupState.ValueType:
    """The enum of a group state ("Stable" -> GROUP_STATE_STABLE)."""
    return cluster_pb2.GroupState.Value(f"GROUP_STATE_{GroupState(state).name}")


def _leader_of(request: admin_pb2.AttachNamespaceRequest) -> str:
    """Which side leads, "local" or "remote": leader_side, else the deprecated string;
    INVALID_LINK_CONFIG when neither says, or when the two disagree."""
    sides = {v: k for k, v in _LEADER_SIDES.items()}
    where = f"link {request.link!r}"
    if request.leader_side == admin_pb2.LEADER_SIDE_UNSPECIFIED:
        if not request.leader:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                where,
                f"{where}: attach-namespace needs leader_side: LEADER_SIDE_LOCAL (this "
                "cluster's namespace leads) or LEADER_SIDE_REMOTE",
            )
        return request.leader  # checked by the core: "local" or "remote"
    side = sides.get(request.leader_side)
    if side is None or (request.leader and request.leader != side):
        raise ClusterError(
            ErrorCode.INVALID_LINK_CONFIG,
            where,
            f"{where}: leader_side {request.leader_side} and leader {request.leader!r} "
            "do not name one side",
        )
    return side


def _dangling_pb(d: DanglingTxn) -> admin_pb2.DanglingTransaction:
    return admin_pb2.DanglingTransaction(
        topic=d.topic, partition=d.partition, producer_id=d.producer_id, first_offset=d.first_offset
    )


def _namespace_pb(ns: Namespace) -> admin_pb2.Namespace:
    return admin_pb2.Namespace(
        type=admin_pb2.ResourceType.ValueType(int(ns.type)),
        prefix=ns.prefix,
        reserved=ns.reserved,
        attachments=ns.attachment_labels(),
    )


def add_services(
    server: aio.Server,
    node: ClusterNode,
    links: LinkManager,
    mirror_links: MirrorLinkManager | None = None,
) -> None:
    cluster_pb2_grpc.add_ClusterServicer_to_server(ClusterService(node), server)
    admin_pb2_grpc.add_AdminServicer_to_server(
        AdminService(node, links, mirror_links), server
    )


def _cleaner_pb(view: CleanerView | None) -> cluster_pb2.LogCleanerState | None:
    if view is None:
        return None
    return cluster_pb2.LogCleanerState(
        cleaned_up_to=view.cleaned_up_to,
        dirty_ratio=view.dirty_ratio,
        last_clean_ms=-1 if view.last_clean_ms is None else view.last_clean_ms,
        cleans=view.cleans,
        removed_records=view.removed_records,
        cleanable_end=view.cleanable_end,
    )
