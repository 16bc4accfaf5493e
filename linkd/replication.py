"""The shell of replication links: runners that dial, and the calls they serve.

Every decision (what a link's configuration is after a merge, what a link
does next, which state it is in, whether a follower diverged, what bytes a
follower appends) is made by the core (`linkd.core.link_rounds`,
`linkd.core.link_admin`, `linkd.core.procedures`); this module moves
messages between clusters, waits, and carries out the effects on the node.

- `LinkManager` owns one `LinkRunner` per link this cluster dials
  (connection direction "local_dials" on this side) and serves what the
  remote's procedures send (`procedures.serve`: handshakes, link removal,
  partition histories, promotion).
- A `LinkRunner` runs three loops beside each other, each bounded and with
  its own back-off: control (handshake every 2 s, discovery of the source's
  topics and group offsets every 0.5 s while this side follows), pull (one
  long-poll replica fetch for every follower partition, while this side
  follows topics) and push (serve the follower's last fetch request and push
  the answer, while this side leads topics or groups). One link may carry
  mappings both ways: then it pulls and pushes at once
  (`link_rounds.next_steps` says which).
- `ReplicationService` answers the remote's calls: Handshake, RemoveLink,
  ListSourceTopics, ReplicaFetch (long-poll on new data), ReplicaPush,
  FetchGroupOffsets, DescribePartitions, PromoteNamespaces.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError, Message
from grpc import aio

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd import link_codec as codec
from linkd import link_sessions as sessions
from linkd.core import link_auth as auth
from linkd.core import link_driver, procedures
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig, LinkMode
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
from linkd.link_channels import dial
from linkd.link_sessions import ClientSession, LinkSecurity
from linkd.node import ClusterNode
from linkd.procedure_shell import CALL_TIMEOUT_S, DaemonHost

log = logging.getLogger("linkd.replication")

FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0
REPLICATION_SERVICE = "ccr.v1.Replication"
# Pushes in flight per link while a pushing leader has more to send at once
# (ASYNC links; `rounds.continue_fetch`).
PUSH_WINDOW = 3


def _response_type(method: str) -> Any:
    """The message class a Replication method answers with."""
    service = replication_pb2.DESCRIPTOR.services_by_name["Replication"]
    return getattr(replication_pb2, service.methods_by_name[method].output_type.name)


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
            runner = LinkRunner(self, name)
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


class LinkRunner:
    """The dialing side of one link: control, pull and push loops."""

    def __init__(self, manager: LinkManager, name: str) -> None:
        self.manager = manager
        self.name = name
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._channel: aio.Channel | None = None
        self._address = ""
        # Milliseconds (node clock) of the last handshake and discoveries.
        self._last_handshake: int | None = None
        self._last_discovery: int | None = None
        self._last_push_discovery: int | None = None
        # The first handshake goes before any data: it may create the link on
        # the remote or refuse our credentials.
        self._handshaken = asyncio.Event()
        # Push: the follower's last fetch request (None before the first push).
        self._next_fetch: replication_pb2.ReplicaFetchRequest | None = None
        # Replicated offsets waiting for the follower's data to reach them.
        self._held_offsets: list[msync.GroupOffset] = []
        # Set when the link's mappings change, so idle loops start at once.
        self._wake = asyncio.Event()
        # The link session every call runs in (one at a time is opened).
        self._session: ClientSession | None = None
        self._session_for: tuple[str, ...] = ()
        self._opening = asyncio.Lock()
        self._last_refusal = ""  # the last session refusal logged (once each)
        # Calls on the current channel that send requests already encoded.
        self._raw_methods: dict[str, Any] = {}

    @property
    def node(self) -> ClusterNode:
        return self.manager.node

    def wake(self) -> None:
        """Mappings changed: handshake and discover now."""
        self._last_handshake = None
        self._last_discovery = None
        self._last_push_discovery = None
        self._wake.set()

    def start(self) -> None:
        for loop, what in ((self._control, "control"), (self._pull, "pull"), (self._push, "push")):
            self._tasks.append(
                asyncio.create_task(self._forever(loop, what), name=f"link-{self.name}-{what}")
            )

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self._channel is not None:
            await self._channel.close(None)

    def _stub(self, config: LinkConfig) -> replication_pb2_grpc.ReplicationAsyncStub:
        address = config.value("remote_bootstrap")
        if self._channel is None or address != self._address:
            old = self._channel
            self._address = address
            self._raw_methods = {}
            try:
                self._channel = dial(address, self.manager.security.tls)
            except ValueError as exc:
                raise ClusterError(
                    ErrorCode.LINK_UNREACHABLE,
                    f"link {self.name!r}",
                    f"link {self.name!r}: cannot dial {address!r}: {exc}",
                ) from exc
            if old is not None:
                task = asyncio.create_task(old.close(1.0))
                task.add_done_callback(lambda t: None)
        return replication_pb2_grpc.ReplicationStub(self._channel)

    async def _call(self, method: str, request: Message, timeout: float) -> Any:
        """One call to the remote, in this link's session (opened first when
        there is none, or when the address, the credentials or the key
        changed); a refused session is dropped, and the next call opens
        another."""
        config = self.node.state.links.get(self.name)
        stub = self._stub(config)
        session = await self._ensure_session(config, stub)
        # Encoded once: the bytes signed are the bytes sent.
        body = request.SerializeToString(deterministic=True)
        try:
            return await self._raw_method(method)(
                body, metadata=session.metadata_of_body(method, body), timeout=timeout
            )
        except grpc.RpcError as exc:
            if sessions.is_auth_failure(exc) and self._session is session:
                self._session = None
            raise

    def _raw_method(self, method: str) -> Any:
        """The channel's call of `method` taking its request already encoded."""
        assert self._channel is not None
        call = self._raw_methods.get(method)
        if call is None:
            call = self._channel.unary_unary(
                f"/{REPLICATION_SERVICE}/{method}",
                request_serializer=None,
                response_deserializer=_response_type(method).FromString,
            )
            self._raw_methods[method] = call
        return call

    async def _ensure_session(
        self, config: LinkConfig, stub: replication_pb2_grpc.ReplicationAsyncStub
    ) -> ClientSession:
        wanted = (
            config.value("remote_bootstrap"),
            config.remote_cluster_id,
            config.value("link_key"),
            config.value("credentials"),
        )
        async with self._opening:
            if self._session is None or self._session_for != wanted:
                identity = sessions.identity_of(self.manager.security.box, config)
                self._session = await sessions.open_session(
                    stub, identity, wanted[0], CALL_TIMEOUT_S
                )
                self._session_for = wanted
            return self._session

    def _steps(self, config: LinkConfig) -> link_driver.NextSteps:
        return link_driver.next_steps(
            config,
            self.node.clock(),
            self._last_handshake,
            self._last_discovery,
            self._last_push_discovery,
        )

    async def _forever(self, loop: Callable[[], Awaitable[None]], what: str) -> None:
        """One loop: repeat its step, backing off (bounded) after a failure."""
        backoff = BACKOFF_MIN_S
        while not self._stopping:
            if self.node.state.links.configs.get(self.name) is None:
                return
            try:
                await loop()
                backoff = BACKOFF_MIN_S
            except (ClusterError, grpc.RpcError) as exc:
                error = exc if isinstance(exc, ClusterError) else codec.rpc_error(exc, "link")
                self.node.state.links.on_contact_lost(self.name, self.node.clock())
                log.debug(
                    "link step failed",
                    extra={"link": self.name, "loop": what, "error": error.message},
                )
                self._refused_loudly(error)
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not kill the runner silently
                log.exception("link loop failed", extra={"link": self.name, "loop": what})
                await asyncio.sleep(BACKOFF_MAX_S)

    def _refused_loudly(self, error: ClusterError) -> None:
        """A refused link session leaves the link DISCONNECTED until an
        operator acts (credentials, address): said at warning level, once per
        distinct refusal, not at debug with the transport failures."""
        if error.code != ErrorCode.LINK_AUTHENTICATION_FAILED:
            return
        if error.message != self._last_refusal:
            self._last_refusal = error.message
            log.warning("link session refused", extra={"link": self.name,
                                                       "error": error.message})

    async def _idle(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            pass
        self._wake.clear()

    # -- control: handshakes and discovery ---------------------------------------------------

    async def _control(self) -> None:
        config = self.node.state.links.get(self.name)
        steps = self._steps(config)
        if steps.handshake:
            await self._handshake_once(config)
        config = self.node.state.links.get(self.name)
        if self._steps(config).discover:
            await self.discover(config)
        if not steps.handshake:
            await self._idle(link_driver.IDLE_POLL_MS / 1000)

    async def _handshake_once(self, config: LinkConfig) -> None:
        try:
            reply = await self._call(
                "Handshake", codec.handshake_pb(config, False, ()), CALL_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            error = codec.rpc_error(exc, f"link {self.name!r}: handshake")
            if error.code == ErrorCode.LINK_DELETED:
                self.manager.forget(self.name)
                self._stopping = True
                return
            raise error from exc
        accepted = rounds.accept_handshake_answer(
            self.node.state, self.name, codec.config_of(reply.config), self.node.clock()
        )
        if accepted.effects:
            await self.node.execute(accepted.effects)
        for note in accepted.notes:
            log.info(note)
        self._last_handshake = self.node.clock()
        self._handshaken.set()

    async def discover(self, config: LinkConfig) -> None:
        """This side follows and dials: the source's topics (created or
        reshaped here), READ ACLs and group offsets."""
        listed_at = self.node.clock()
        namespaces = []
        for mapping in rep.follower_mappings(config, "topic"):
            reply = await self._call(
                "ListSourceTopics",
                replication_pb2.ListSourceTopicsRequest(
                    link_id=config.link_id, prefix=mapping.remote_prefix
                ),
                CALL_TIMEOUT_S,
            )
            namespaces.append(
                codec.namespace_of(mapping.remote_prefix, reply.topics, reply.read_acls)
            )
        for mapping in rep.follower_mappings(config, "principal"):
            reply = await self._call(
                "ListSourceTopics",
                replication_pb2.ListSourceTopicsRequest(
                    link_id=config.link_id, prefix=mapping.remote_prefix,
                    resource_type="principal",
                ),
                CALL_TIMEOUT_S,
            )
            namespaces.append(
                codec.namespace_of(mapping.remote_prefix, (), (), "principal",
                                   reply.principal_acls)
            )
        await apply_topics(self.node, config, namespaces, listed_at)
        offsets: list[msync.GroupOffset] = []
        for group_mapping in rep.follower_mappings(config, "group"):
            reply_offsets = await self._call(
                "FetchGroupOffsets",
                replication_pb2.FetchGroupOffsetsRequest(
                    link_id=config.link_id, prefix=group_mapping.remote_prefix
                ),
                CALL_TIMEOUT_S,
            )
            offsets += codec.group_offsets_of(reply_offsets.offsets)
        self._held_offsets = await apply_group_offsets(
            self.node, config.name, offsets + self._held_offsets
        )
        self._last_discovery = self.node.clock()

    # -- pull: this side follows -----------------------------------------------------------------

    async def _pull(self) -> None:
        await self._handshaken.wait()
        config = self.node.state.links.get(self.name)
        if not self._steps(config).pull:
            await self._idle(link_driver.IDLE_POLL_MS / 1000)
            return
        request, sent = follower_request(self.node, config)
        if not request.partitions:
            if self._last_discovery is not None:
                # Discovered, and the followed namespaces hold no topics yet:
                # nothing lags (an empty namespace is FOLLOWING, not CATCHING_UP).
                self.node.state.links.on_fetch_round(self.name, self.node.clock())
            await self._idle(link_driver.IDLE_POLL_MS / 1000)
            return
        fetched = await self._call(
            "ReplicaFetch", request, rounds.fetch_deadline_ms(FETCH_MAX_WAIT_MS) / 1000
        )
        await self.manager.host.drive(
            rounds.apply_fetched(
                self.node.state,
                config.name,
                codec.fetch_answer_of(fetched),
                sent.local_of,
                sent.sent_ms,
            )
        )
        if sent.sent_ms is not None:
            self.node.metrics.fetch_round(self.name, (self.node.clock() - sent.sent_ms) / 1000)
        if bool(fetched.sync_state) != (config.mode == LinkMode.SYNC):
            # The source runs the other mode: learn the change now, not at the
            # next periodic handshake.
            self._last_handshake = None
            self._wake.set()

    # -- push: this side leads (the follower may sit behind NAT) ----------------------------------

    async def _push(self) -> None:
        await self._handshaken.wait()
        config = self.node.state.links.get(self.name)
        steps = self._steps(config)
        if not steps.push:
            self._next_fetch = None
            await self._idle(link_driver.IDLE_POLL_MS / 1000)
            return
        namespaces: tuple[rounds.SourceNamespace, ...] = ()
        offsets: tuple[msync.GroupOffset, ...] = ()
        if steps.push_discovery:
            namespaces, offsets = rounds.push_discovery(self.node.state, config)
            self._last_push_discovery = self.node.clock()
        request = self._next_fetch
        if request is None or not request.partitions:
            if request is not None and not namespaces and not offsets:
                await self._idle(link_driver.IDLE_POLL_MS / 1000)
            message = codec.push_pb(rounds.Push(config.link_id, namespaces, offsets))
            self._next_fetch = None
            self._next_fetch = await self._push_once(message)
            return
        parts = codec.partition_fetches_of(request)
        data = await serve_parts(
            self.node,
            request.link_id,
            parts,
            request.max_wait_ms,
            request.max_bytes,
            from_remote=False,
        )
        # The records go into the message once (built in place, encoded once).
        message = codec.push_pb(
            rounds.Push(config.link_id, namespaces, offsets, data, request.sent_ms or None)
        )
        # Until the follower answers, it has no request outstanding: a push
        # it refused is not repeated from a request its log may have left.
        self._next_fetch = None
        cursor = rounds.continue_fetch(config, parts, data)
        if cursor is None:
            self._next_fetch = await self._push_once(message)
            return
        self._next_fetch = await self._push_pipelined(message, cursor, request.max_bytes)

    async def _push_once(
        self, message: replication_pb2.ReplicaPushRequest
    ) -> replication_pb2.ReplicaFetchRequest:
        """One push; the follower's next request."""
        reply = await self._call("ReplicaPush", message, CALL_TIMEOUT_S)
        self.node.state.links.on_contact(self.name, self.node.clock())
        next_fetch: replication_pb2.ReplicaFetchRequest = reply.next
        return next_fetch

    async def _push_pipelined(
        self,
        first: replication_pb2.ReplicaPushRequest,
        cursor: tuple[rounds.PartitionFetch, ...] | None,
        max_bytes: int,
    ) -> replication_pb2.ReplicaFetchRequest:
        """Pushes `first`, and while the follower appends it reads and sends
        what follows (`rounds.continue_fetch`), up to PUSH_WINDOW pushes in
        flight, until there is nothing more to send at once; returns the
        follower's request after the last (its own position, which the next
        push answers)."""
        pending: deque[asyncio.Task[replication_pb2.ReplicaFetchRequest]] = deque()
        pending.append(asyncio.create_task(self._push_once(first)))
        next_fetch: replication_pb2.ReplicaFetchRequest | None = None
        try:
            while pending:
                while cursor is not None and len(pending) < PUSH_WINDOW:
                    config = self.node.state.links.get(self.name)
                    more = await serve_parts(
                        self.node,
                        config.link_id,
                        cursor,
                        0,
                        max_bytes,
                        from_remote=False,
                        acknowledges=False,
                    )
                    if more.total_bytes <= 0:
                        cursor = None
                        break
                    message = codec.push_pb(rounds.Push(config.link_id, data=more))
                    pending.append(asyncio.create_task(self._push_once(message)))
                    cursor = rounds.continue_fetch(config, cursor, more)
                next_fetch = await pending.popleft()
        finally:
            for task in pending:
                task.cancel()
        assert next_fetch is not None
        return next_fetch


# -- both ends of the data path, shared by pull and push -----------------------------
#
# Every decision is `linkd.core.link_rounds`'; these functions encode and
# decode the messages, wait (long poll), carry out effects and wake waiters.


def follower_request(
    node: ClusterNode, config: LinkConfig
) -> tuple[replication_pb2.ReplicaFetchRequest, rounds.FetchRequest]:
    """The follower's fetch request (`rounds.follower_fetch_request`), encoded;
    and the request itself (its map back to local names, its send time)."""
    request = rounds.follower_fetch_request(
        node.state, config, PARTITION_MAX_BYTES, sent_ms=node.clock()
    )
    return codec.fetch_request_pb(request, FETCH_MAX_WAIT_MS, FETCH_MAX_BYTES), request


async def apply_topics(
    node: ClusterNode,
    config: LinkConfig,
    namespaces: list[rounds.SourceNamespace],
    listed_at_ms: int,
) -> None:
    """Follower side: carries out `rounds.plan_topics`."""
    plan = rounds.plan_topics(
        node.state, config, namespaces, node.topic_id_factory, listed_at_ms
    )
    for local, source in plan.created:
        log.info(
            "follower topic created",
            extra={"link": config.name, "topic": local, "source": source},
        )
    if plan.effects:
        await node.execute(plan.effects)


async def apply_group_offsets(
    node: ClusterNode, link_name: str, offsets: list[msync.GroupOffset]
) -> list[msync.GroupOffset]:
    """Follower side: stores replicated committed offsets (journal records and
    the __consumer_offsets_<source> topic); returns those held back."""
    if not offsets:
        return []
    effects, held = msync.apply_replicated_offsets(
        node.state, link_name, offsets, node.clock(), node.topic_id_factory()
    )
    if effects:
        await node.execute(effects)
    return held


async def serve_fetch(
    node: ClusterNode, request: replication_pb2.ReplicaFetchRequest, *, from_remote: bool
) -> replication_pb2.ReplicaFetchResponse:
    """Source side: `serve_fetch_answer`, encoded."""
    return codec.fetch_answer_pb(await serve_fetch_answer(node, request, from_remote=from_remote))


async def serve_fetch_answer(
    node: ClusterNode, request: replication_pb2.ReplicaFetchRequest, *, from_remote: bool
) -> rounds.FetchAnswer:
    """Source side: answers a follower's fetch request (`serve_parts`)."""
    return await serve_parts(
        node,
        request.link_id,
        codec.partition_fetches_of(request),
        request.max_wait_ms,
        request.max_bytes,
        from_remote=from_remote,
    )


async def serve_parts(
    node: ClusterNode,
    link_id: str,
    parts: tuple[rounds.PartitionFetch, ...] | list[rounds.PartitionFetch],
    max_wait_ms: int,
    max_bytes: int,
    *,
    from_remote: bool,
    acknowledges: bool = True,
) -> rounds.FetchAnswer:
    """Source side: answers a fetch (`rounds.serve_replica_fetch`), waiting
    up to `max_wait_ms` for data (long poll). A fetch that arrived from the
    remote is contact, every time it is served; one this side serves itself
    to push the answer is not. `acknowledges=False`: a request this side made
    up (`rounds.continue_fetch`), not the follower's position."""
    state = node.state
    state.links.by_id(link_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + rounds.served_wait_ms(max_wait_ms) / 1000
    budget_bytes = max_bytes if max_bytes > 0 else FETCH_MAX_BYTES

    def read(
        topic_id: str, partition: int, start: int, end: int, max_bytes: int
    ) -> tuple[bytes, int]:
        data = node.stores[(topic_id, partition)].read(start, end, max_bytes)
        return data, len(data)

    # A parked fetch wakes only for the partitions it reads.
    watch = [(p.source_topic, p.partition) for p in parts]
    while True:
        event = node.long_polls.park(watch)
        try:
            answer = rounds.serve_replica_fetch(
                state,
                link_id,
                parts,
                node.clock(),
                read,
                budget_bytes,
                PARTITION_MAX_BYTES,
                from_remote=from_remote,
                acknowledges=acknowledges,
            )
            if answer.hw_moved:
                node.notify()
            if answer.ready or loop.time() >= deadline or node.stopping:
                return answer
            await node.long_polls.wait(event, deadline - loop.time())
        finally:
            node.long_polls.unpark(event)


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    """The remote's calls. Challenge and OpenSession open a link session;
    every other call is refused unless its session metadata proves it
    (`LinkSecurity`, `linkd.core.link_auth`) and names the session's link."""

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
        return self.security.sessions.verify(
            session_id,
            link_id,
            method,
            seq,
            digest if digest is not None else sessions.request_digest(request),
            mac,
            self.node.clock(),
        )

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
            state = self.node.state
            config = state.links.by_id(request.link_id)
            state.links.on_contact(config.name, self.node.clock())
            if request.resource_type == "principal":
                ns = codec.namespace_pb(rounds.source_principals(state, config, request.prefix))
            else:
                ns = codec.namespace_pb(rounds.source_topics(state, config, request.prefix))
            return replication_pb2.ListSourceTopicsResponse(
                topics=ns.topics, read_acls=ns.read_acls, principal_acls=ns.principal_acls
            )

        result: replication_pb2.ListSourceTopicsResponse = await self._guard(context, run())
        return result

    async def ReplicaFetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> replication_pb2.ReplicaFetchResponse:
        async def run() -> replication_pb2.ReplicaFetchResponse:
            self._verify(context, "ReplicaFetch", request, request.link_id)
            self.node.check_ready()
            return await serve_fetch(self.node, request, from_remote=True)

        result: replication_pb2.ReplicaFetchResponse = await self._guard(context, run())
        return result

    async def ReplicaPush(
        self, request: replication_pb2.ReplicaPushRequest, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        return await self._replica_push(request, sessions.request_digest(request), context)

    async def replica_push_encoded(
        self, body: bytes, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        """ReplicaPush as received (`add_replication_service`): the session's
        MAC is checked over the bytes that arrived, as the caller signed them,
        instead of over the request encoded again; a request encoded some
        other way than deterministically is checked as ReplicaPush is."""
        try:
            request = replication_pb2.ReplicaPushRequest.FromString(body)
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
            digest = sessions.request_digest(request)
        return await self._replica_push(request, digest, context)

    async def _replica_push(
        self, request: replication_pb2.ReplicaPushRequest, digest: bytes, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        async def run() -> replication_pb2.ReplicaPushResponse:
            self._verify(context, "ReplicaPush", request, request.link_id, digest)
            self.node.check_ready()
            node = self.node
            # A leader may have several pushes in flight: they are applied
            # one at a time, in the order they arrived.
            lock = self._push_locks.setdefault(request.link_id, asyncio.Lock())
            async with lock:
                nxt: rounds.FetchRequest = await self.manager.host.drive(
                    rounds.accept_push(
                        node.state, codec.push_of(request), node.clock(), node.topic_id_factory
                    )
                )
                previous = self._push_answered_ms.get(request.link_id)
                self._push_answered_ms[request.link_id] = node.clock()
            names = [c.name for c in node.state.links.configs.values()
                     if c.link_id == request.link_id]
            if request.HasField("data") and names:
                # A round of this side's: its request left at request_sent_ms.
                # A read-ahead push (several in flight) answers no request of
                # its own: it continues from this side's previous answer.
                sent_ms = request.request_sent_ms or previous
                node.metrics.fetch_round(
                    names[0], (node.clock() - sent_ms) / 1000 if sent_ms else None
                )
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
            self.node.state.links.by_id(request.link_id)
            offsets = rounds.source_group_offsets(self.node.state, request.prefix)
            return replication_pb2.FetchGroupOffsetsResponse(
                offsets=codec.group_offsets_pb(offsets)
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
            return replication_pb2.PromoteNamespacesResponse(
                partitions=served.answer.partitions,
                aborted_dangling=served.answer.aborted_dangling,
            )

        result: replication_pb2.PromoteNamespacesResponse = await self._guard(context, run())
        return result


def add_replication_service(server: aio.Server, service: ReplicationService) -> None:
    """Adds the Replication service to `server`, its ReplicaPush taking the
    request as received (`ReplicationService.replica_push_encoded`: the MAC is
    checked over those bytes; a push carries megabytes of records)."""

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
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(REPLICATION_SERVICE, handlers),)
    )
    # Not in the typing stubs; the generated code calls it too.
    cast(Any, server).add_registered_method_handlers(REPLICATION_SERVICE, handlers)
