"""The shell of replication links: the runners that dial, and the calls they serve.

Every decision (what a link's configuration is after a merge, when a link
acts, what it does next, which state it is in, whether a follower diverged,
what bytes a follower appends) is made by the core (`linkd.core.link_driver`,
`linkd.core.link_rounds`, `linkd.core.link_admin`, `linkd.core.procedures`);
this module moves messages between clusters, waits, and carries out the
effects on the node.

- `LinkManager` owns one `LinkRunner` (`linkd/link_runner.py`, the pump of
  the core's link driver) per link this cluster dials (connection direction
  "local_dials" on this side), and serves what the remote's procedures send
  (`procedures.serve`: handshakes, link removal, partition histories,
  promotion).
- `ReplicationService` answers the remote's calls: Handshake, RemoveLink,
  ListSourceTopics, ReplicaFetch (held for data: `link_runner.hold`),
  ReplicaPush (applied one at a time per link, in arrival order),
  FetchGroupOffsets, DescribePartitions, PromoteNamespaces, each as the core
  says (`link_driver.serve_list_topics`, `serve_group_offsets`,
  `hold_fetch`; `link_rounds.accept_push`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError, Message
from grpc import aio

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd import ack_trace, test_hooks
from linkd import link_codec as codec
from linkd import link_sessions as sessions
from linkd.core import link_auth as auth
from linkd.core import link_driver, procedures
from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import FetchGroupOffsets, ListSourceTopics
from linkd.core.links import LinkConfig, MappingType
from linkd.core.requests import (
    DescribePartitions,
    Handshake,
    PartitionsDescription,
    Promote,
    Promoted,
    RemoteRequest,
    RemoveLink,
)
from linkd.grpc_errors import abort_with_error
from linkd.link_runner import SETTINGS, LinkRunner, hold
from linkd.link_sessions import REPLICATION_SERVICE, LinkSecurity
from linkd.node import ClusterNode
from linkd.procedure_shell import DaemonHost

log = logging.getLogger("linkd.replication")

# What a follower's request asks (the daemon runs the driver's defaults).
FETCH_MAX_WAIT_MS = SETTINGS.max_wait_ms
FETCH_MAX_BYTES = SETTINGS.fetch_max_bytes


class LinkManager:
    """The runners of the links this side dials, and the remote's calls."""

    def __init__(self, node: ClusterNode, security: LinkSecurity) -> None:
        self.node = node
        # Every call between the clusters runs in a link session
        # (linkd/link_sessions.py): this side's box, required credentials and
        # served sessions.
        self.security = security
        self.runners: dict[str, LinkRunner] = {}
        self._stopping = False
        self.host = DaemonHost(node, self, self.identity_for, security.tls)
        self._removals: asyncio.Task[None] | None = None
        self._forgetting: set[asyncio.Task[None]] = set()

    @property
    def state(self) -> ClusterState:
        return self.node.state

    def start(self) -> None:
        self.state.links.start(self.node.clock())
        for name in self.state.links.names():
            if not self.state.links.get(name).value("link_key"):
                log.warning(
                    "link %r was created before link sessions and has no key of its own: both "
                    "sides derive one from its old shared credentials; re-create it for a key "
                    "(docs/security.md)",
                    name,
                )
            self.link_changed(name)
        self._removals = asyncio.create_task(self._tell_removals(), name="link-removals")

    async def stop(self) -> None:
        self._stopping = True
        refusals = self.security.sessions.refusals
        if refusals:
            log.info(
                "link calls refused",
                extra={"refusals": {r.value: n for r, n in sorted(refusals.items())}},
            )
        for task in [self._removals, *self._forgetting]:
            if task is not None:
                task.cancel()
        await self.host.stop()
        for runner in list(self.runners.values()):
            await runner.stop()
        self.runners.clear()

    # -- Runners (linkd.procedure_shell) ----------------------------------------------

    def link_changed(self, name: str) -> None:
        """Starts the link's runner if this side dials and it has none; wakes it."""
        config = self.state.links.configs.get(name)
        if config is None or self._stopping:
            return
        runner = self.runners.get(name)
        if runner is None and config.connection_direction == "local_dials":
            runner = LinkRunner(self.host, self.security, name, self.forget)
            self.runners[name] = runner
            runner.start()
        if runner is not None:
            runner.wake()

    async def link_deleted(self, name: str) -> None:
        self.node.metrics.forget_link(name)
        runner = self.runners.pop(name, None)
        if runner is not None:
            await runner.stop()

    async def _tell_removals(self) -> None:
        """Deleted links whose remote has not confirmed: told again every
        handshake interval (bounded: one call per pending link per round)."""
        while not self._stopping:
            await asyncio.sleep(link_driver.HANDSHAKE_INTERVAL_MS / 1000)
            if not self.state.links.pending_removals():
                continue
            try:
                await self.host.drive(procedures.tell_removals(self.state, self.node.clock()))
            except ClusterError as exc:
                log.warning("telling remotes of deleted links failed: %s", exc.message)

    def forget(self, name: str) -> None:
        """The remote deleted the link: delete this side's half (in a task of
        its own, since it stops the runner that heard it)."""

        async def run() -> None:
            await self.host.drive(procedures.forget_deleted(self.state, name, self.node.clock()))

        task = asyncio.create_task(run(), name=f"forget-{name}")
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    def identity_for(self, request: RemoteRequest) -> sessions.LinkIdentity | None:
        """What a call to the remote about this request opens its session
        with (None: DescribeCluster needs none). A create handshake's link is
        not stored yet: its configuration travels in the request."""
        box = self.security.box
        if isinstance(request, Handshake):
            return sessions.identity_of(box, request.config, creating=request.create)
        if isinstance(request, (RemoveLink, DescribePartitions, Promote)):
            found = self.security.identity(self.state.links, request.link_id)
            if found is None:
                raise ClusterError(
                    ErrorCode.UNKNOWN_LINK,
                    f"link id {request.link_id}",
                    f"no link with id {request.link_id} on cluster {self.state.cluster_id!r}",
                )
            return found
        return None

    # -- calls from the remote's procedures --------------------------------------------

    async def serve(self, request: RemoteRequest) -> procedures.Served:
        """Serves one request of the remote's procedures (the core decides),
        carries out its effects, and starts or stops runners."""
        self.node.check_ready()
        served = procedures.serve(self.state, request, self.node.clock())
        if served.link_deleted:
            await self.link_deleted(served.link_deleted)
        if served.effects:
            await self.node.execute(served.effects)
        for note in served.notes:
            log.info(note)
        if served.link_changed:
            self.link_changed(served.link_changed)
        return served


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    """The remote's calls. Challenge and OpenSession open a link session;
    every other call is refused unless its session metadata proves it
    (`LinkSecurity`, `linkd.core.link_auth`) and names the session's link,
    and its answer is signed with the session's key as it is sent
    (`add_replication_service`)."""

    def __init__(self, node: ClusterNode, manager: LinkManager) -> None:
        self.node = node
        self.manager = manager
        self.security = manager.security
        self._push_locks: dict[str, asyncio.Lock] = {}
        # When this side last answered a push, per link id: a read-ahead push
        # continues from that answer, so its round is measured from there.
        self._push_answered_ms: dict[str, int] = {}

    async def _guard(self, context: Any, coro: Awaitable[Any]) -> Any:
        try:
            return await coro
        except ClusterError as exc:
            if exc.code == ErrorCode.LINK_AUTHENTICATION_FAILED:
                self.security.refused(exc, str(context.peer()))
            await abort_with_error(context, exc)

    def _verify(
        self,
        context: Any,
        method: str,
        request: Message,
        link_id: str,
        digest: bytes | None = None,
    ) -> auth.Session:
        """Checks the call's session; `digest`: of the request as received,
        when the shell has it (else of the request encoded again)."""
        session_id, seq, mac = sessions.session_fields(context)
        try:
            # A credentials file being rewritten may read empty for a moment:
            # that refuses new sessions (OpenSession), not the open ones.
            accepted: tuple[str, ...] | None = self.security.accepted()
        except ClusterError:
            accepted = None
        try:
            return self.security.sessions.verify(
                session_id,
                link_id,
                method,
                seq,
                digest if digest is not None else sessions.request_digest(request),
                mac,
                self.node.clock(),
                accepted,
            )
        except ClusterError as exc:
            if auth.refusal_of(exc.resource) is auth.Refusal.REVOKED_CREDENTIAL:
                self._revoked()
            raise

    def _revoked(self) -> None:
        """Sessions ended by a withdrawn credential: each link says so in
        describe-link (and the log, at info) until a session opens again."""
        for revoked in self.node.state.links.credential_revoked(self.security.sessions.revoked):
            log.info("link sessions ended: credential revoked",
                     extra={"link": revoked.link_name, "peer": revoked.peer,
                            "sessions": revoked.sessions})  # fmt: skip

    async def Challenge(
        self, request: replication_pb2.ChallengeRequest, context: Any
    ) -> replication_pb2.ChallengeResponse:
        nonce = secrets.token_bytes(auth.NONCE_BYTES)
        self.security.sessions.challenge(nonce, self.node.clock())
        return replication_pb2.ChallengeResponse(
            nonce=nonce,
            cluster_id=self.node.cluster_id,
            credentials_required=self.security.required,
        )

    async def OpenSession(
        self, request: replication_pb2.OpenSessionRequest, context: Any
    ) -> replication_pb2.OpenSessionResponse:
        async def run() -> replication_pb2.OpenSessionResponse:
            self.node.check_ready()
            opened = self.security.sessions.open(
                auth.OpenRequest(
                    request.link_id,
                    request.link_name,
                    request.caller_cluster_id,
                    request.callee_cluster_id,
                    request.server_nonce,
                    request.client_nonce,
                    request.proof,
                    request.wrapped_link_key,
                ),
                self.security.known_link(self.node.state.links, request.link_id),
                self.security.accepted(),
                self.node.clock(),
                secrets.token_hex(16),
            )
            self.node.state.links.session_opened(request.link_id)
            return replication_pb2.OpenSessionResponse(
                session_id=opened.session.session_id, proof=opened.proof
            )

        result: replication_pb2.OpenSessionResponse = await self._guard(context, run())
        return result

    async def Handshake(
        self, request: replication_pb2.HandshakeRequest, context: Any
    ) -> replication_pb2.HandshakeResponse:
        async def run() -> replication_pb2.HandshakeResponse:
            session = self._verify(context, "Handshake", request, request.config.link_id)
            self.security.sessions.check_peer(
                session, request.config.local_cluster_id, "Handshake"
            )
            served = await self.manager.serve(
                Handshake(
                    codec.config_of(request.config),
                    request.create,
                    codec.proposed_of(request),
                    self.security.box.seal_bytes(session.new_link_key),
                )
            )
            assert isinstance(served.answer, LinkConfig)
            return replication_pb2.HandshakeResponse(config=codec.view_of(served.answer))

        result: replication_pb2.HandshakeResponse = await self._guard(context, run())
        return result

    async def RemoveLink(
        self, request: replication_pb2.RemoveLinkRequest, context: Any
    ) -> replication_pb2.RemoveLinkResponse:
        async def run() -> None:
            self._verify(context, "RemoveLink", request, request.link_id)
            await self.manager.serve(RemoveLink(request.link_id))
            self.security.sessions.drop_link(request.link_id)

        await self._guard(context, run())
        return replication_pb2.RemoveLinkResponse()

    async def ListSourceTopics(
        self, request: replication_pb2.ListSourceTopicsRequest, context: Any
    ) -> replication_pb2.ListSourceTopicsResponse:
        async def run() -> replication_pb2.ListSourceTopicsResponse:
            self._verify(context, "ListSourceTopics", request, request.link_id)
            self.node.check_ready()
            kind = MappingType.PRINCIPAL if request.resource_type == MappingType.PRINCIPAL else None
            call = ListSourceTopics(request.link_id, request.prefix, kind or MappingType.TOPIC)
            listed = link_driver.serve_list_topics(self.node.state, call, self.node.clock())
            ns = codec.namespace_pb(listed)
            return replication_pb2.ListSourceTopicsResponse(
                topics=ns.topics, read_acls=ns.read_acls, principal_acls=ns.principal_acls
            )

        result: replication_pb2.ListSourceTopicsResponse = await self._guard(context, run())
        return result

    async def ReplicaFetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> replication_pb2.ReplicaFetchResponse:
        answer = await self._replica_fetch(request, context)
        return codec.fetch_answer_pb(answer)

    async def replica_fetch_encoded(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> bytes:
        """ReplicaFetch as the data path answers it (`add_replication_service`):
        the records are copied once, into the bytes sent
        (`link_codec.fetch_answer_bytes`), never into a message."""
        return codec.fetch_answer_bytes(await self._replica_fetch(request, context))

    async def _replica_fetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> rounds.FetchAnswer:
        async def run() -> rounds.FetchAnswer:
            if ack_trace.ON:
                _trace_fetch("source.fetch_received", request)
            self._verify(context, "ReplicaFetch", request, request.link_id)
            if ack_trace.ON:
                _trace_fetch("source.fetch_verified", request)
            self.node.check_ready()
            answer: rounds.FetchAnswer = await hold(
                self.manager.host, request.link_id, codec.partition_fetches_of(request),
                request.max_wait_ms, request.max_bytes, from_remote=True,
                fetch_session=codec.fetch_session_of(request),
            )  # fmt: skip
            if ack_trace.ON:
                for p in answer.partitions:
                    ack_trace.records_hop("source.answered", p.source_topic, p.partition, p.records)
            return answer

        result: rounds.FetchAnswer = await self._guard(context, run())
        return result

    async def ReplicaPush(
        self, request: replication_pb2.ReplicaPushRequest, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        return await self._replica_push(
            request, codec.push_of(request), sessions.request_digest(request), context
        )

    async def replica_push_encoded(
        self, body: bytes, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        """ReplicaPush as received (`add_replication_service`): the session's
        MAC is checked over the bytes that arrived, as the caller signed them,
        instead of over the request encoded again (a request encoded some other
        way than deterministically is checked as ReplicaPush is), and the
        records are read from those bytes (`link_codec.push_of_bytes`), never
        out of a message."""
        try:
            request, push = codec.push_of_bytes(body)
        except DecodeError as exc:
            await abort_with_error(
                context,
                ClusterError(
                    ErrorCode.INVALID_REQUEST, "ReplicaPush", f"ReplicaPush does not decode: {exc}"
                ),
            )
        digest = auth.request_digest(body)
        session_id, seq, mac = sessions.session_fields(context)
        if not self.security.sessions.proves(session_id, "ReplicaPush", seq, digest, mac):
            digest = sessions.request_digest(replication_pb2.ReplicaPushRequest.FromString(body))
        return await self._replica_push(request, push, digest, context)

    async def _replica_push(
        self,
        request: replication_pb2.ReplicaPushRequest,
        push: rounds.Push,
        digest: bytes,
        context: Any,
    ) -> replication_pb2.ReplicaPushResponse:
        """`request`: the push's message (its data may be left out: `push` has it)."""

        async def run() -> replication_pb2.ReplicaPushResponse:
            if ack_trace.ON and push.data is not None:
                for p in push.data.partitions:
                    ack_trace.records_hop("follower.push_received", p.source_topic, p.partition,
                                          p.records)  # fmt: skip
            self._verify(context, "ReplicaPush", request, push.link_id, digest)
            self.node.check_ready()
            node = self.node
            # A leader may have several pushes in flight: they are applied
            # one at a time, in the order they arrived.
            lock = self._push_locks.setdefault(push.link_id, asyncio.Lock())

            async def apply() -> tuple[rounds.FetchRequest, int | None]:
                async with lock:
                    nxt: rounds.FetchRequest = await self.manager.host.drive(
                        rounds.accept_push(node.state, push, node.clock(), node.topic_id_factory)
                    )
                    previous = self._push_answered_ms.get(push.link_id)
                    self._push_answered_ms[push.link_id] = node.clock()
                    return nxt, previous

            # A push that arrived is applied whole, its round finished, even
            # if its caller goes away meanwhile (a source killed mid-push):
            # else its appends would stay unreadable, or the link's view of
            # the partition out of date, until some later round.
            applying = asyncio.ensure_future(apply())
            try:
                nxt, previous = await asyncio.shield(applying)
            except asyncio.CancelledError:
                applying.add_done_callback(_retrieved)
                raise
            names = [c.name for c in node.state.links.configs.values()
                     if c.link_id == push.link_id]
            if push.data is not None and names:
                # A round of this side's: its request left at request_sent_ms.
                # A read-ahead push (several in flight) answers no request of
                # its own: it continues from this side's previous answer.
                sent_ms = push.request_sent_ms or previous
                node.metrics.fetch_round(
                    names[0], (node.clock() - sent_ms) / 1000 if sent_ms else None
                )
            if ack_trace.ON and push.data is not None:
                for p in push.data.partitions:
                    ack_trace.records_hop("follower.push_applied", p.source_topic, p.partition,
                                          p.records)  # fmt: skip
            return replication_pb2.ReplicaPushResponse(
                next=codec.fetch_request_pb(nxt, FETCH_MAX_WAIT_MS, FETCH_MAX_BYTES)
            )

        result: replication_pb2.ReplicaPushResponse = await self._guard(context, run())
        return result

    async def FetchGroupOffsets(
        self, request: replication_pb2.FetchGroupOffsetsRequest, context: Any
    ) -> replication_pb2.FetchGroupOffsetsResponse:
        async def run() -> replication_pb2.FetchGroupOffsetsResponse:
            self._verify(context, "FetchGroupOffsets", request, request.link_id)
            self.node.check_ready()
            call = FetchGroupOffsets(request.link_id, request.prefix)
            offsets = link_driver.serve_group_offsets(self.node.state, call, self.node.clock())
            return replication_pb2.FetchGroupOffsetsResponse(
                offsets=codec.group_offsets_pb(list(offsets.offsets))
            )

        result: replication_pb2.FetchGroupOffsetsResponse = await self._guard(context, run())
        return result

    async def DescribePartitions(
        self, request: replication_pb2.DescribePartitionsRequest, context: Any
    ) -> replication_pb2.DescribePartitionsResponse:
        async def run() -> replication_pb2.DescribePartitionsResponse:
            self._verify(context, "DescribePartitions", request, request.link_id)
            served = await self.manager.serve(
                DescribePartitions(
                    request.link_id,
                    request.prefix,
                    request.group_prefix if request.HasField("group_prefix") else None,
                    request.groups_only,
                    request.with_marks,
                )
            )
            assert isinstance(served.answer, PartitionsDescription)
            return codec.description_pb(served.answer)

        result: replication_pb2.DescribePartitionsResponse = await self._guard(context, run())
        return result

    async def PromoteNamespaces(
        self, request: replication_pb2.PromoteNamespacesRequest, context: Any
    ) -> replication_pb2.PromoteNamespacesResponse:
        async def run() -> replication_pb2.PromoteNamespacesResponse:
            self._verify(context, "PromoteNamespaces", request, request.link_id)
            served = await self.manager.serve(
                Promote(
                    request.link_id,
                    tuple((n.resource_type, n.prefix) for n in request.namespaces),
                )
            )
            assert isinstance(served.answer, Promoted)
            test_hooks.reached(test_hooks.SERVE_PROMOTE)  # nothing unless a crash test set one
            return replication_pb2.PromoteNamespacesResponse(
                partitions=served.answer.partitions,
                aborted_dangling=served.answer.aborted_dangling,
            )

        result: replication_pb2.PromoteNamespacesResponse = await self._guard(context, run())
        return result


# Answers not signed with a session's key: Challenge comes before any session,
# and OpenSession's answer carries the callee's proof (`link_auth`).
UNSIGNED_METHODS = frozenset({"Challenge", "OpenSession"})


def add_replication_service(server: aio.Server, service: ReplicationService) -> None:
    """Adds the Replication service to `server`, its ReplicaPush taking the
    request as received (`ReplicationService.replica_push_encoded`: the MAC is
    checked over those bytes; a push carries megabytes of records) and its
    ReplicaFetch answering bytes written around the records
    (`ReplicationService.replica_fetch_encoded`). Every answer of a call made
    in a session is signed over the bytes sent (`_signed`)."""

    class _Collected:
        handlers: dict[str, Any] = {}

        def add_generic_rpc_handlers(self, _handlers: Any) -> None:
            pass

        def add_registered_method_handlers(
            self, _service: str, handlers: dict[str, Any]
        ) -> None:
            self.handlers = dict(handlers)

    collected = _Collected()
    replication_pb2_grpc.add_ReplicationServicer_to_server(service, cast(Any, collected))
    handlers = collected.handlers
    handlers["ReplicaPush"] = grpc.unary_unary_rpc_method_handler(
        service.replica_push_encoded,
        request_deserializer=None,
        response_serializer=replication_pb2.ReplicaPushResponse.SerializeToString,
    )
    handlers["ReplicaFetch"] = grpc.unary_unary_rpc_method_handler(
        service.replica_fetch_encoded,
        request_deserializer=replication_pb2.ReplicaFetchRequest.FromString,
        response_serializer=None,
    )
    for method, handler in list(handlers.items()):
        if method not in UNSIGNED_METHODS:
            handlers[method] = _signed(service, method, handler)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REPLICATION_SERVICE, handlers),)
    )
    # Not in the typing stubs; the generated code calls it too.
    cast(Any, server).add_registered_method_handlers(REPLICATION_SERVICE, handlers)


def _signed(
    service: ReplicationService, method: str, handler: Any
) -> grpc.RpcMethodHandler[Any, bytes]:
    """`handler` answering bytes it signs: the answer is serialized here (the
    bytes sent are the bytes hashed, once) and its mac, with the key of the
    session the call names and bound to the call's sequence number, goes in
    the trailing metadata (`link_sessions.answer_metadata`). The key is read
    before the call is served (a RemoveLink or a revocation may end the
    session meanwhile); an answer exists only for a call its session
    verified, every method here refusing any other."""
    serve = handler.unary_unary
    serialize = handler.response_serializer

    async def signed(request: Any, context: Any) -> bytes:
        session_id, seq, _ = sessions.session_fields(context)
        key = service.security.sessions.answer_key(session_id)
        answer = await serve(request, context)
        body: bytes = answer if serialize is None else serialize(answer)
        if key is not None:
            context.set_trailing_metadata(sessions.answer_metadata(key, method, seq, body))
        return body

    return grpc.unary_unary_rpc_method_handler(
        signed, request_deserializer=handler.request_deserializer, response_serializer=None
    )


def _trace_fetch(hop: str, request: replication_pb2.ReplicaFetchRequest) -> None:
    """A follower's fetch reached `hop`: it acknowledges what lies below its offsets."""
    for p in request.partitions:
        ack_trace.hop(hop, p.topic, p.partition, p.fetch_offset, p.fetch_offset)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A push applied for a caller that went away: its failure is logged
    (nobody else will hear of it)."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("a push whose caller went away failed", exc_info=task.exception())
