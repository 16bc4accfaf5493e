"""The shell of the operator procedures that span both clusters of a link:
unclean link recovery and reversing a link's direction (spec section 8).

Every decision (the last common offset, where to cut, which offsets move,
which transactions abort, which epochs start) is made by
`linkd.core.recovery` and the cluster core; this module asks the remote for
its side (`Replication.DescribePartitions`), carries out the effects on the
local node, and drives the link changes through `LinkManager`, so the remote
learns of them by the usual versioned handshake.

- `recover`: run on the side that will follow. Report only, or (confirm)
  reserve, abort open transactions, truncate, move committed offsets back,
  and attach the mappings with the remote leading.
- `reverse`: run on the current leader. Steps: verify the link state,
  reserve, abort open transactions, wait (bounded) for the remote to hold
  every record and committed offset, detach, attach swapped, promote the
  remote's namespaces. Stops at the first step that fails; this side stays
  reserved, so nothing is written on both sides.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc import aio

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd.core import recovery
from linkd.core import replication as rep
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig
from linkd.node import ClusterNode
from linkd.replication import CALL_TIMEOUT_S, GRPC_OPTIONS, LinkManager, _rpc_error

log = logging.getLogger("linkd.operations")

# Reversal waits for the remote to copy everything at most this long by
# default, polling it this often.
REVERSE_TIMEOUT_MS_DEFAULT = 30_000
REVERSE_TIMEOUT_MS_MAX = 600_000
REVERSE_POLL_S = 0.2


def side_of(cluster_id: str, p: replication_pb2.PartitionHistory) -> recovery.PartitionSide:
    return recovery.PartitionSide(
        cluster_id,
        p.log_start_offset,
        p.log_end_offset,
        p.high_watermark,
        tuple((e.epoch, e.start_offset) for e in p.epoch_history),
        tuple(
            recovery.ProvenanceItem(
                e.kind, e.offset, e.source_cluster_id, e.link_id, e.link_epoch, e.removed_records
            )
            for e in p.provenance
        ),
    )


def history_pb(topic: str, h: dict[str, Any]) -> replication_pb2.PartitionHistory:
    return replication_pb2.PartitionHistory(
        topic=topic,
        partition=h["partition"],
        log_start_offset=h["log_start_offset"],
        log_end_offset=h["log_end_offset"],
        high_watermark=h["high_watermark"],
        leader_epoch=h["leader_epoch"],
        epoch_history=[
            replication_pb2.EpochStart(epoch=e["epoch"], start_offset=e["start_offset"])
            for e in h["epoch_history"]
        ],
        provenance=[
            replication_pb2.ProvenanceRecord(
                kind=e["kind"],
                offset=e["offset"],
                source_cluster_id=e["source_cluster_id"],
                link_id=e["link_id"],
                link_epoch=e["link_epoch"],
                removed_records=e["removed_records"],
            )
            for e in h["provenance"]
        ],
    )


def describe_partitions(
    node: ClusterNode, request: replication_pb2.DescribePartitionsRequest
) -> replication_pb2.DescribePartitionsResponse:
    """Remote side of DescribePartitions (the link must exist here)."""
    state = node.state
    config = state.links.by_id(request.link_id)
    state.links.on_contact(config.name, node.clock())
    out = replication_pb2.DescribePartitionsResponse(cluster_id=state.cluster_id)
    for name in [] if request.groups_only else sorted(state.topics):
        if rep.in_prefix(name, request.prefix):
            for h in recovery.partition_histories(state, name):
                out.partitions.append(history_pb(name, h))
    if request.HasField("group_prefix"):
        for group, topic, partition, offset in recovery.committed_in(state, request.group_prefix):
            out.group_offsets.add(group_id=group, topic=topic, partition=partition, offset=offset)
    return out


async def promote(
    node: ClusterNode, request: replication_pb2.PromoteNamespacesRequest
) -> replication_pb2.PromoteNamespacesResponse:
    """Remote side of PromoteNamespaces."""
    config = node.state.links.by_id(request.link_id)
    bumped, records = recovery.promote_namespaces(
        node.state, config.name, [(n.resource_type, n.prefix) for n in request.namespaces]
    )
    if records:
        from linkd.core.cluster import Journal

        await node._execute([Journal(tuple(records))])
    log.info("namespaces promoted", extra={"link": config.name, "partitions": bumped})
    return replication_pb2.PromoteNamespacesResponse(partitions=bumped)


@dataclass
class Step:
    name: str
    ok: bool
    result: str
    duration_ms: int


@dataclass
class ReverseReport:
    link: str
    steps: list[Step] = field(default_factory=list)
    error: ClusterError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Operations:
    """recover and reverse, over one node and its LinkManager."""

    def __init__(self, node: ClusterNode, links: LinkManager) -> None:
        self.node = node
        self.links = links

    async def _remote(
        self,
        config: LinkConfig,
        call: Callable[[replication_pb2_grpc.ReplicationAsyncStub], Awaitable[Any]],
        what: str,
    ) -> Any:
        address = config.value("remote_bootstrap")
        if not address:
            raise ClusterError(
                ErrorCode.LINK_UNREACHABLE,
                f"link {config.name!r}",
                f"link {config.name!r}: {what}: this cluster has no address for "
                f"{config.remote_cluster_id!r} (the remote dials it); run this on the cluster "
                "that created the link, or create it with --local-bootstrap",
            )
        async with aio.insecure_channel(address, options=GRPC_OPTIONS) as channel:
            try:
                return await call(replication_pb2_grpc.ReplicationStub(channel))
            except grpc.RpcError as exc:
                raise _rpc_error(exc, f"link {config.name!r}: {what} on {address}") from exc

    async def describe_remote(
        self,
        config: LinkConfig,
        prefix: str,
        group_prefix: str | None = None,
        groups_only: bool = False,
    ) -> replication_pb2.DescribePartitionsResponse:
        request = replication_pb2.DescribePartitionsRequest(
            link_id=config.link_id, prefix=prefix, groups_only=groups_only
        )
        if group_prefix is not None:
            request.group_prefix = group_prefix
        reply: replication_pb2.DescribePartitionsResponse = await self._remote(
            config,
            lambda stub: stub.DescribePartitions(request, timeout=CALL_TIMEOUT_S),
            "describing partitions",
        )
        return reply

    # -- unclean link recovery ---------------------------------------------------------------

    async def recover(
        self, link_name: str, requested: list[tuple[str, str, str | None]], confirm: bool
    ) -> recovery.RecoveryPlan:
        self.node._check_ready()
        state = self.node.state
        config = state.links.get(link_name)
        mappings = recovery.select_mappings(state, config, requested)
        remote: recovery.RemotePartitions = {}
        remote_id = config.remote_cluster_id
        for m in mappings:
            if m.resource_type != "topic":
                continue
            reply = await self.describe_remote(config, m.remote_prefix)
            remote_id = reply.cluster_id
            for p in reply.partitions:
                remote[(p.topic, p.partition)] = side_of(reply.cluster_id, p)
        if not any(m.resource_type == "topic" for m in mappings):
            # Still prove the remote is there before changing anything.
            reply = await self.describe_remote(config, mappings[0].remote_prefix)
            remote_id = reply.cluster_id
        # From here to the effects nothing awaits: the plan is made and
        # carried out on one consistent local state.
        config = state.links.get(link_name)
        plan = recovery.plan_recovery(state, link_name, mappings, remote_id, remote)
        if not confirm:
            return plan
        now = self.node.clock()
        aborted, effects = recovery.reserve_and_abort(state, mappings, now)
        try:
            plan = recovery.plan_recovery(state, link_name, mappings, remote_id, remote)
            effects += recovery.apply_recovery(state, plan, config.link_id, now)
        finally:
            await self.node._execute(effects)
        log.warning(
            "unclean link recovery: truncated",
            extra={
                "link": link_name,
                "records": plan.local_records_lost,
                "partitions": plan.diverged_partitions,
                "offsets_moved": len(plan.groups),
                "aborted": aborted,
            },
        )
        for m, detach_first in recovery.mappings_to_follow(state.links.get(link_name), mappings):
            if detach_first:
                await self.links.detach(link_name, m.resource_type, m.local_prefix)
            await self.links.attach(
                link_name, m.resource_type, m.local_prefix, m.remote_prefix, "remote"
            )
        return recovery.confirmed(plan)

    # -- reversing a link's direction ------------------------------------------------------------

    async def reverse(self, link_name: str, timeout_ms: int) -> ReverseReport:
        self.node._check_ready()
        state = self.node.state
        config = state.links.get(link_name)
        if timeout_ms <= 0:
            timeout_ms = REVERSE_TIMEOUT_MS_DEFAULT
        timeout_ms = min(timeout_ms, REVERSE_TIMEOUT_MS_MAX)
        link_state, leaders = recovery.reverse_mappings(state, link_name)
        report = ReverseReport(link_name)
        report.steps.append(Step("verify-link-state", True, f"link is {link_state}", 0))

        async def run(name: str, action: Callable[[], Awaitable[str]]) -> bool:
            started = time.monotonic()
            try:
                result = await action()
            except ClusterError as exc:
                elapsed = int((time.monotonic() - started) * 1000)
                report.steps.append(Step(name, False, f"{exc.code.name}: {exc.message}", elapsed))
                report.error = exc
                log.warning("reverse stopped", extra={"link": link_name, "step": name})
                return False
            elapsed = int((time.monotonic() - started) * 1000)
            report.steps.append(Step(name, True, result, elapsed))
            return True

        async def reserve() -> str:
            records: list[dict[str, Any]] = []
            from linkd.core.namespaces import ResourceType

            for m in leaders:
                records += state.namespaces.set_reserved(
                    ResourceType.parse(m.resource_type), m.local_prefix, True
                )
            await self.links.journal(records)
            return "reserved " + ", ".join(f"{m.resource_type} {m.local_prefix!r}" for m in leaders)

        async def abort() -> str:
            prefixes = [m.local_prefix for m in leaders if m.resource_type == "topic"]
            aborted, effects = state.abort_transactions_in(prefixes, self.node.clock())
            await self.node._execute(effects)
            return f"aborted {len(aborted)} open transactions" + (
                f": {', '.join(aborted)}" if aborted else ""
            )

        async def wait_remote() -> str:
            return await self._wait_remote_caught_up(config, leaders, timeout_ms)

        async def detach() -> str:
            for m in leaders:
                await self.links.detach(link_name, m.resource_type, m.local_prefix)
            return f"detached {len(leaders)} mappings"

        async def attach_swapped() -> str:
            for m in leaders:
                await self.links.attach(
                    link_name, m.resource_type, m.local_prefix, m.remote_prefix, "remote"
                )
            return f"attached {len(leaders)} mappings with {config.remote_cluster_id!r} leading"

        async def promote_remote() -> str:
            request = replication_pb2.PromoteNamespacesRequest(
                link_id=config.link_id,
                namespaces=[
                    replication_pb2.PromotedNamespace(
                        resource_type=m.resource_type, prefix=m.remote_prefix
                    )
                    for m in leaders
                ],
            )
            reply: replication_pb2.PromoteNamespacesResponse = await self._remote(
                config,
                lambda stub: stub.PromoteNamespaces(request, timeout=CALL_TIMEOUT_S),
                "promoting namespaces",
            )
            return (
                f"{config.remote_cluster_id!r} cleared its reservations; {reply.partitions} "
                "partitions started a new leader epoch"
            )

        for name, action in (
            ("reserve-leader-namespaces", reserve),
            ("abort-open-transactions", abort),
            ("wait-for-remote", wait_remote),
            ("detach-mappings", detach),
            ("attach-swapped-mappings", attach_swapped),
            ("promote-remote-namespaces", promote_remote),
        ):
            if not await run(name, action):
                break
        return report

    async def _wait_remote_caught_up(
        self, config: LinkConfig, leaders: list[recovery.RecoveryMapping], timeout_ms: int
    ) -> str:
        """Until every follower partition on the remote holds this side's log
        end (high watermark included) and every committed offset of the
        mapped groups: bounded by `timeout_ms`."""
        state = self.node.state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        missing: list[str] = []
        while True:
            remote: list[recovery.RemoteCopy] = []
            for m in leaders:
                if m.resource_type == "topic":
                    reply = await self.describe_remote(config, m.remote_prefix)
                    parts = {
                        (p.topic, p.partition): (p.log_end_offset, p.high_watermark)
                        for p in reply.partitions
                    }
                    remote.append(recovery.RemoteCopy(m, partitions=parts))
                else:
                    reply = await self.describe_remote(
                        config, m.remote_prefix, group_prefix=m.remote_prefix, groups_only=True
                    )
                    offsets = {
                        (o.group_id, o.topic, o.partition): o.offset for o in reply.group_offsets
                    }
                    remote.append(recovery.RemoteCopy(m, group_offsets=offsets))
            total, missing = recovery.reverse_missing(state, remote)
            if not missing:
                return f"remote holds every record of {total} partitions"
            if loop.time() >= deadline:
                raise ClusterError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"link {config.name!r}",
                    f"link {config.name!r}: the remote did not catch up within {timeout_ms} ms "
                    f"({len(missing)} behind, e.g. {'; '.join(missing[:3])}); this side stays "
                    "reserved: retry reverse, or clear the reservation to write here again",
                )
            await asyncio.sleep(REVERSE_POLL_S)

