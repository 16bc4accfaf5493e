"""The daemon's shell for the core's procedures (linkd/core/procedures.py).

A procedure is a generator of requests (linkd/core/requests.py); `drive`
answers each one against this node: effects are carried out on its files
and journal, calls go to the other cluster over gRPC (through
`linkd.link_codec`), sleeps are asyncio sleeps, link runners start, wake and
stop through the `Runners` the link manager provides, a held fetch parks on
the node's long polls (`WaitForData`), and notes go to the log at their
level. A link's lanes (linkd/link_runner.py) answer their own calls and
waits and leave the rest to this host. The simulator drives the same
procedures on virtual time (sim/operator_shell.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator
from typing import Protocol, TypeVar

import grpc
from google.protobuf.message import Message
from grpc import aio

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd import link_codec as codec
from linkd import test_hooks
from linkd.core import link_rounds as rounds
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import LaneRequest, WaitForData
from linkd.core.requests import (
    Call,
    Checkpoint,
    ClusterIdentity,
    DescribeCluster,
    DescribePartitions,
    Execute,
    Handshake,
    LinkChanged,
    LinkDeleted,
    Note,
    NotStored,
    Now,
    Promote,
    Promoted,
    RemoteAnswer,
    RemoteRequest,
    RemoveLink,
    Reply,
    Sleep,
    Tell,
    WakeWaiters,
    unreachable,
)
from linkd.link_channels import NO_TLS, LinkTls, dial
from linkd.link_sessions import (
    ClientSession,
    LinkIdentity,
    call_signed,
    open_session,
    raw_method,
)
from linkd.node import ClusterNode

log = logging.getLogger("linkd.procedures")

CALL_TIMEOUT_S = rounds.CALL_TIMEOUT_MS / 1000



class Runners(Protocol):
    """The link manager's side of a procedure: its runners."""

    def link_changed(self, name: str) -> None: ...
    async def link_deleted(self, name: str) -> None: ...


# The link session a request to the remote opens (None: it needs none).
Identities = Callable[[RemoteRequest], LinkIdentity | None]
# Answers a procedure's requests (a link's lanes answer some themselves).
Answerer = Callable[[LaneRequest], Awaitable[object]]
R = TypeVar("R")


async def call_remote(
    address: str,
    request: RemoteRequest,
    what: str,
    identity: LinkIdentity | None,
    tls: LinkTls = NO_TLS,
) -> RemoteAnswer:
    """Delivers one request to the cluster at `address` (TLS for an SSL://
    address: linkd/link_channels.py), in a link session of its own
    (`identity`), and decodes its answer once its mac proves it (an answer
    unsigned or changed on the way is refused LINK_AUTHENTICATION_FAILED); a
    refusal keeps its code, a transport failure is LINK_UNREACHABLE.
    DescribeCluster is answered by the remote's Challenge, which names it
    (the replication service needs no client credentials, whatever the
    listener)."""
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
                shaken = await _signed(channel, session, "Handshake", shake, what, address)
                assert isinstance(shaken, replication_pb2.HandshakeResponse)
                return codec.config_of(shaken.config)
            if isinstance(request, RemoveLink):
                remove = replication_pb2.RemoveLinkRequest(link_id=request.link_id)
                await _signed(channel, session, "RemoveLink", remove, what, address)
                return None
            if isinstance(request, DescribePartitions):
                message = replication_pb2.DescribePartitionsRequest(
                    link_id=request.link_id,
                    prefix=request.prefix,
                    groups_only=request.groups_only,
                    with_marks=request.with_marks,
                )
                if request.group_prefix is not None:
                    message.group_prefix = request.group_prefix
                described = await _signed(
                    channel, session, "DescribePartitions", message, what, address
                )
                assert isinstance(described, replication_pb2.DescribePartitionsResponse)
                return codec.description_of(described)
            assert isinstance(request, Promote)
            promote = replication_pb2.PromoteNamespacesRequest(
                link_id=request.link_id,
                namespaces=[
                    replication_pb2.PromotedNamespace(resource_type=t, prefix=p)
                    for t, p in request.namespaces
                ],
            )
            promoted = await _signed(channel, session, "PromoteNamespaces", promote, what, address)
            assert isinstance(promoted, replication_pb2.PromoteNamespacesResponse)
            return Promoted(promoted.partitions, promoted.aborted_dangling)
        except grpc.RpcError as exc:
            raise codec.rpc_error(exc, f"{what} on {address}") from exc


async def _signed(
    channel: aio.Channel,
    session: ClientSession,
    method: str,
    request: Message,
    what: str,
    address: str,
) -> Message:
    """One call of `method` in `session`, its request encoded once and signed,
    its answer's mac checked over the bytes received, then decoded
    (`link_sessions.call_signed`)."""
    body = request.SerializeToString(deterministic=True)
    answer = await call_signed(session, raw_method(channel, method), method, body, CALL_TIMEOUT_S)
    decoded = codec.decoded_answer(method, answer, f"{what} on {address}")
    assert isinstance(decoded, Message)
    return decoded


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

    async def drive(
        self, procedure: Generator[LaneRequest, object, R], answer: Answerer | None = None
    ) -> R:
        """Runs the procedure to its end; returns its result, or raises its
        refusal. `answer`: who answers its requests (a link's lanes have
        their own, `linkd.link_runner`), else this host."""
        reply: object = None
        while True:
            try:
                request = procedure.send(reply)
            except StopIteration as stop:
                result: R = stop.value
                return result
            reply = await (answer or self.answer)(request)

    async def answer(self, request: LaneRequest) -> object:
        node = self.node
        if isinstance(request, Execute):
            try:
                await node.execute(list(request.effects), refusable=request.refusable)
            except ClusterError as exc:
                if not (request.refusable and exc.code is ErrorCode.STORAGE_ERROR):
                    raise
                return NotStored(node.clock(), exc)  # the model is back at what is stored
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
        if isinstance(request, WaitForData):
            return await self._wait_for_data(request)
        if isinstance(request, Checkpoint):
            test_hooks.reached(request.point)  # nothing unless a crash test set one
            return None
        if not isinstance(request, Note):
            raise TypeError(f"no answer for {request!r} here")
        levels = {"warning": logging.WARNING, "info": logging.INFO}
        log.log(levels.get(request.level, logging.DEBUG), request.message)
        return None

    async def _wait_for_data(self, request: WaitForData) -> int:
        """A long poll parks on the node's high watermarks (its own
        partitions only) until one moves or its time comes; a node shutting
        down answers none."""
        node = self.node
        if node.stopping:
            raise ClusterError(ErrorCode.NOT_READY, "cluster", "cluster is shutting down")
        event = node.long_polls.park(request.partitions)
        try:
            await node.long_polls.wait(event, (request.until_ms - node.clock()) / 1000)
        finally:
            node.long_polls.unpark(event)
        return node.clock()

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
