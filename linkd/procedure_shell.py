"""The daemon's shell for the core's procedures (linkd/core/procedures.py).

A procedure is a generator of requests (linkd/core/requests.py); `drive`
answers each one against this node: effects are carried out on its files
and journal, calls go to the other cluster over gRPC (through
`linkd.link_codec`), sleeps are asyncio sleeps, link runners start, wake and
stop through the `Runners` the link manager provides, and notes go to the
log at their level. The simulator drives the same procedures on virtual time
(sim/operator_shell.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any, Protocol

import grpc

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd import link_codec as codec
from linkd.core import link_rounds as rounds
from linkd.core.errors import ClusterError
from linkd.core.requests import (
    Call,
    ClusterIdentity,
    DescribeCluster,
    DescribePartitions,
    Execute,
    Handshake,
    LinkChanged,
    LinkDeleted,
    Note,
    Now,
    Promote,
    Promoted,
    RemoteAnswer,
    RemoteRequest,
    RemoveLink,
    Reply,
    Request,
    Sleep,
    Tell,
    WakeWaiters,
    unreachable,
)
from linkd.link_channels import NO_TLS, LinkTls, dial
from linkd.link_sessions import LinkIdentity, open_session
from linkd.node import ClusterNode

log = logging.getLogger("linkd.procedures")

CALL_TIMEOUT_S = rounds.CALL_TIMEOUT_MS / 1000


class Runners(Protocol):
    """The link manager's side of a procedure: its runners."""

    def link_changed(self, name: str) -> None: ...
    async def link_deleted(self, name: str) -> None: ...


# The link session a request to the remote opens (None: it needs none).
Identities = Callable[[RemoteRequest], LinkIdentity | None]


async def call_remote(
    address: str,
    request: RemoteRequest,
    what: str,
    identity: LinkIdentity | None,
    tls: LinkTls = NO_TLS,
) -> RemoteAnswer:
    """Delivers one request to the cluster at `address` (TLS for an SSL://
    address: linkd/link_channels.py), in a link session of its own
    (`identity`), and decodes its answer; a refusal keeps its code, a
    transport failure is LINK_UNREACHABLE. DescribeCluster is answered by the
    remote's Challenge, which names it (the replication service needs no
    client credentials, whatever the listener)."""
    if not address:
        raise unreachable(
            what,
            address,
            "this cluster has no address for the remote (the remote dials it); run this on "
            "the cluster that created the link, or create it with --local-bootstrap",
        )
    try:
        channel = dial(address, tls)
    except ValueError as exc:
        raise unreachable(what, address, str(exc)) from exc
    async with channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        try:
            if isinstance(request, DescribeCluster):
                challenge = await stub.Challenge(
                    replication_pb2.ChallengeRequest(), timeout=CALL_TIMEOUT_S
                )
                return ClusterIdentity(challenge.cluster_id)
            assert identity is not None, what
            session = await open_session(stub, identity, address, CALL_TIMEOUT_S)
            if isinstance(request, Handshake):
                shake = codec.handshake_pb(request.config, request.create, request.proposed)
                reply = await stub.Handshake(
                    shake, metadata=session.metadata("Handshake", shake), timeout=CALL_TIMEOUT_S
                )
                return codec.config_of(reply.config)
            if isinstance(request, RemoveLink):
                remove = replication_pb2.RemoveLinkRequest(link_id=request.link_id)
                await stub.RemoveLink(
                    remove, metadata=session.metadata("RemoveLink", remove), timeout=CALL_TIMEOUT_S
                )
                return None
            if isinstance(request, DescribePartitions):
                message = replication_pb2.DescribePartitionsRequest(
                    link_id=request.link_id,
                    prefix=request.prefix,
                    groups_only=request.groups_only,
                )
                if request.group_prefix is not None:
                    message.group_prefix = request.group_prefix
                described_partitions = await stub.DescribePartitions(
                    message,
                    metadata=session.metadata("DescribePartitions", message),
                    timeout=CALL_TIMEOUT_S,
                )
                return codec.description_of(described_partitions)
            assert isinstance(request, Promote)
            promote = replication_pb2.PromoteNamespacesRequest(
                link_id=request.link_id,
                namespaces=[
                    replication_pb2.PromotedNamespace(resource_type=t, prefix=p)
                    for t, p in request.namespaces
                ],
            )
            promoted = await stub.PromoteNamespaces(
                promote,
                metadata=session.metadata("PromoteNamespaces", promote),
                timeout=CALL_TIMEOUT_S,
            )
            return Promoted(promoted.partitions, promoted.aborted_dangling)
        except grpc.RpcError as exc:
            raise codec.rpc_error(exc, f"{what} on {address}") from exc


class DaemonHost:
    """Answers a procedure's requests on one daemon."""

    def __init__(
        self,
        node: ClusterNode,
        runners: Runners | None = None,
        identities: Identities | None = None,
        tls: LinkTls = NO_TLS,
    ) -> None:
        self.node = node
        self.runners = runners
        self.identities = identities
        self.tls = tls
        self._background: set[asyncio.Task[None]] = set()

    async def drive(self, procedure: Generator[Request, Any, Any]) -> Any:
        """Runs the procedure to its end; returns its result, or raises its
        refusal."""
        answer: Any = None
        while True:
            try:
                request = procedure.send(answer)
            except StopIteration as stop:
                return stop.value
            answer = await self.answer(request)

    async def answer(self, request: Request) -> Any:
        node = self.node
        if isinstance(request, Execute):
            await node.execute(list(request.effects))
            return node.clock()
        if isinstance(request, Call):
            try:
                value = await call_remote(
                    request.address, request.request, request.what, self._identity(request),
                    self.tls,
                )
            except ClusterError as exc:
                return Reply(None, exc, node.clock())
            return Reply(value, None, node.clock())
        if isinstance(request, Tell):
            task = asyncio.create_task(self._tell(request), name=f"tell {request.what}")
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return None
        if isinstance(request, Sleep):
            await asyncio.sleep(request.ms / 1000)
            return node.clock()
        if isinstance(request, Now):
            return node.clock()
        if isinstance(request, LinkChanged):
            if self.runners is not None:
                self.runners.link_changed(request.link)
            return None
        if isinstance(request, LinkDeleted):
            if self.runners is not None:
                await self.runners.link_deleted(request.link)
            return None
        if isinstance(request, WakeWaiters):
            node.notify(request.partitions)
            return None
        assert isinstance(request, Note)
        (log.warning if request.level == "warning" else log.info)(request.message)
        return None

    def _identity(self, request: Call | Tell) -> LinkIdentity | None:
        if self.identities is None or not request.address:
            return None
        return self.identities(request.request)

    async def _tell(self, request: Tell) -> None:
        try:
            await call_remote(
                request.address, request.request, request.what, self._identity(request),
                self.tls,
            )
        except ClusterError as exc:
            log.warning("%s: the remote was not told: %s", request.what, exc.message)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
