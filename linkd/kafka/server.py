"""The Kafka protocol listener of a linkd: connections, framing, ordering, dispatch.

Rules:
- One asyncio server on the node's event loop. Each connection reads frames
  and starts one handler task per request at once, in arrival order; a
  connection may pipeline up to MAX_IN_FLIGHT requests (then reading pauses;
  linkd/kafka/limits.py has the other bounds on what a connection holds).
  Responses are written strictly in request order, whatever order the
  handlers finish in (a Produce with acks=0 has no response and is skipped).
- A handler decodes nothing itself: the request body arrives decoded by kio
  (linkd/kafka/codec.py), the handler calls the node, and returns plain data
  that `codec.make` fits onto the response class of the request's version.
  Handlers do their first core call before their first suspension (or in tasks
  they create before it), so the core sees a connection's requests in order.
- Every request gets an answer the client can decode: an API key or version
  outside `SUPPORTED` answers UNSUPPORTED_VERSION in that API's response
  shape (ApiVersions: a v0 body with the supported list, as Kafka does); a
  body that does not decode answers INVALID_REQUEST; a handler failure
  answers UNKNOWN_SERVER_ERROR and is logged. A connection is closed, after
  the answers before it, only where no decodable answer exists: broken
  framing (a size below 8 or above MAX_FRAME_BYTES), or an API key or
  version no schema is known for (Kafka closes those too).
- When the client goes away, pending Fetch/JoinGroup/SyncGroup waits are
  cancelled (they change nothing); other requests finish and their answers are
  dropped. `stop` closes the server and every connection.
- `start` binds first (a taken port fails at once), prepares the schemas of
  every served version, then accepts clients.
- Authentication (linkd/kafka/security.py, docs/security.md): on an SSL or
  SASL_SSL listener a connection first completes its TLS handshake
  (`loop.start_tls`, so a refused certificate is seen, counted and logged;
  the principal of a client certificate is its subject DN). On a SASL
  listener every request passes `_authenticating` until a SaslAuthenticate
  succeeds: ApiVersions and SaslHandshake are answered, anything else closes
  the connection as Kafka does; the state changes in the request's task
  before its first suspension, so pipelined requests see them in order.
  After a SaslHandshake v0 the tokens are bare frames. A refused client gets
  its last answer, then the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.errors import ErrorCode as K

from linkd.core.errors import ClusterError
from linkd.kafka import (
    api_admin,
    api_broker,
    api_cluster,
    api_data,
    api_groups,
    api_security,
    api_txn,
    authz,
    codec,
)
from linkd.kafka.context import ANONYMOUS, Broker, Context, Handler
from linkd.kafka.errors import kafka_code, kafka_message
from linkd.kafka.fetch_sessions import FetchSessionCache
from linkd.kafka.limits import FIRST_CHUNK_BYTES, ListenerLimits, RequestMemory
from linkd.kafka.sasl import MAX_RECEIVE_BEFORE_AUTH, AuthFailed, Exchange, Reason, make_exchange
from linkd.kafka.security import (
    TLS_HANDSHAKE_TIMEOUT_S,
    AuthFailures,
    ListenerSecurity,
    certificate_principal,
    tls_failure_reason,
)
from linkd.node import ClusterNode

log = logging.getLogger("linkd.kafka")

MAX_IN_FLIGHT = 64
API_VERSIONS_KEY = 18
FETCH_KEY = 1
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
CLOSE_AFTER_S = 5.0  # a refused client's last answer is flushed within this

Chunks = list[bytes | bytearray]  # one framed response, written in order


@dataclass(frozen=True, slots=True)
class Api:
    name: str
    min_version: int
    max_version: int
    handler: Handler | None  # None: answered by the listener itself (ApiVersions)
    coordinator: bool = False
    cancel_on_disconnect: bool = False


# The versions served. Lower bounds are kio's (Kafka 4's baseline); upper
# bounds stop before versions whose meaning this cluster does not implement:
# Produce v12+ and TxnOffsetCommit v5+/EndTxn v5+/AddPartitionsToTxn v4+ belong
# to transactions v2 (KIP-890), InitProducerId v6 to two-phase commit (KIP-939),
# Produce v13 and OffsetCommit/OffsetFetch v10 to topic ids in those calls.
SUPPORTED: Mapping[int, Api] = MappingProxyType(
    {
        0: Api("Produce", 3, 11, api_data.produce),
        1: Api("Fetch", 4, 17, api_data.fetch, cancel_on_disconnect=True),
        2: Api("ListOffsets", 1, 10, api_data.list_offsets),
        3: Api("Metadata", 0, 12, api_cluster.metadata),
        8: Api("OffsetCommit", 2, 9, api_groups.offset_commit, coordinator=True),
        9: Api("OffsetFetch", 1, 9, api_groups.offset_fetch, coordinator=True),
        10: Api("FindCoordinator", 0, 5, api_cluster.find_coordinator),
        11: Api(
            "JoinGroup", 0, 9, api_groups.join_group, coordinator=True, cancel_on_disconnect=True
        ),
        12: Api("Heartbeat", 0, 4, api_groups.heartbeat, coordinator=True),
        13: Api("LeaveGroup", 0, 5, api_groups.leave_group, coordinator=True),
        14: Api(
            "SyncGroup", 0, 5, api_groups.sync_group, coordinator=True, cancel_on_disconnect=True
        ),
        15: Api("DescribeGroups", 0, 5, api_groups.describe_groups, coordinator=True),
        16: Api("ListGroups", 0, 5, api_groups.list_groups, coordinator=True),
        17: Api("SaslHandshake", 0, 1, api_security.sasl_handshake),
        18: Api("ApiVersions", 0, 4, None),
        19: Api("CreateTopics", 2, 7, api_admin.create_topics),
        20: Api("DeleteTopics", 1, 6, api_admin.delete_topics),
        21: Api("DeleteRecords", 0, 2, api_data.delete_records),
        22: Api("InitProducerId", 0, 5, api_txn.init_producer_id, coordinator=True),
        23: Api("OffsetForLeaderEpoch", 2, 4, api_data.offset_for_leader_epoch),
        24: Api("AddPartitionsToTxn", 0, 3, api_txn.add_partitions_to_txn, coordinator=True),
        25: Api("AddOffsetsToTxn", 0, 4, api_txn.add_offsets_to_txn, coordinator=True),
        26: Api("EndTxn", 0, 4, api_txn.end_txn, coordinator=True),
        28: Api("TxnOffsetCommit", 0, 4, api_groups.txn_offset_commit, coordinator=True),
        29: Api("DescribeAcls", 1, 3, api_admin.describe_acls),
        30: Api("CreateAcls", 1, 3, api_admin.create_acls),
        31: Api("DeleteAcls", 1, 3, api_admin.delete_acls),
        32: Api("DescribeConfigs", 1, 4, api_admin.describe_configs),
        33: Api("AlterConfigs", 0, 2, api_admin.alter_configs),
        34: Api("AlterReplicaLogDirs", 1, 2, api_broker.alter_replica_log_dirs),
        35: Api("DescribeLogDirs", 1, 4, api_broker.describe_log_dirs),
        36: Api("SaslAuthenticate", 0, 2, api_security.sasl_authenticate),
        37: Api("CreatePartitions", 0, 3, api_admin.create_partitions),
        42: Api("DeleteGroups", 0, 2, api_groups.delete_groups, coordinator=True),
        43: Api("ElectLeaders", 0, 2, api_broker.elect_leaders),
        44: Api("IncrementalAlterConfigs", 0, 1, api_admin.incremental_alter_configs),
        45: Api("AlterPartitionReassignments", 0, 0, api_broker.alter_partition_reassignments),
        46: Api("ListPartitionReassignments", 0, 0, api_broker.list_partition_reassignments),
        47: Api("OffsetDelete", 0, 0, api_groups.offset_delete, coordinator=True),
        50: Api("DescribeUserScramCredentials", 0, 0, api_security.describe_user_scram_credentials),
        51: Api("AlterUserScramCredentials", 0, 0, api_security.alter_user_scram_credentials),
        55: Api("DescribeQuorum", 0, 2, api_broker.describe_quorum),
        60: Api("DescribeCluster", 0, 1, api_cluster.describe_cluster),
        75: Api("DescribeTopicPartitions", 0, 0, api_broker.describe_topic_partitions),
    }
)


def api_versions_list() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
        for key, api in sorted(SUPPORTED.items())
    ]


def _size(answer: Chunks | None) -> int:
    return sum(len(chunk) for chunk in answer) if answer else 0


class _Unanswerable(Exception):
    """A request no response shape is known for (an unknown API key, or a
    version newer than any schema): Kafka closes such a connection, since
    any body sent back would be one the client cannot decode."""


class _CloseAfter(Exception):
    """Write this answer (if any), then close the connection: a client
    refused during authentication, as Kafka closes it."""

    def __init__(self, answer: Chunks | None) -> None:
        super().__init__("closing after authentication failed")
        self.answer = answer


class KafkaListener:
    """Serves the Kafka protocol for one node. `start` binds (OSError if the
    address is taken), `stop` closes everything."""

    def __init__(
        self,
        node: ClusterNode,
        host: str,
        port: int,
        *,
        advertised_host: str | None = None,
        node_id: int = 0,
        limits: ListenerLimits | None = None,
        auto_create_topics: bool = False,
        num_partitions: int = 1,
        security: ListenerSecurity | None = None,
    ) -> None:
        assert num_partitions >= 1
        self.security = security or ListenerSecurity()
        # Refused clients, counted per reason (`auth_failures.counts`).
        self.auth_failures = AuthFailures()
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self.node = node
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.node_id = node_id
        self.limits = limits or ListenerLimits()
        self.fetch_sessions = FetchSessionCache()
        self.memory = RequestMemory(self.limits.queued_max_request_bytes)
        self.broker = Broker(node_id, advertised_host or host, port)
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self.connections: set[_Connection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self),
            self.host,
            self.port,
            reuse_address=True,
            start_serving=False,
        )
        if self.port == 0:
            sockets = self._server.sockets
            self.port = int(sockets[0].getsockname()[1])
        host = self.advertised_host or self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        self.broker = Broker(self.node_id, host, self.port, self._broker_configs(host))
        # The schemas of every served version are imported and prepared before
        # the first client is accepted (about a second, once), not by the first
        # request of each kind (a fresh client's requests would pay for it).
        versions = [
            (key, v)
            for key, api in SUPPORTED.items()
            for v in range(api.min_version, api.max_version + 1)
        ]
        await loop.run_in_executor(None, codec.warm_up, versions)
        await self._server.start_serving()
        self._idle_task = loop.create_task(self._close_idle_connections())
        protocol = self.security.protocol.value
        self.auth_failures.listener = f"{protocol}://{self.host}:{self.port}"
        log.info(
            "kafka listener serving",
            extra={
                "listen": f"{self.host}:{self.port}",
                "advertised": f"{host}:{self.port}",
                "security_protocol": protocol,
                "client_auth": self.security.client_auth,
            },
        )

    def _broker_configs(self, advertised_host: str) -> tuple[tuple[str, str, int], ...]:
        """The settings this broker runs with, by Kafka's broker config names:
        read-only, as Kafka's static configs (the dynamic ones, the topics'
        server defaults among them, are the core's: linkd/core/broker_config.py)."""
        int_, long_, bool_, str_, list_ = 3, 5, 1, 2, 7  # Kafka's ConfigType numbers
        limits, groups = self.limits, self.node.group_config
        protocol = self.security.protocol.value
        listener = f"{protocol}://{self.host}:{self.port}"
        advertised = f"{protocol}://{advertised_host}:{self.port}"
        return (
            ("broker.id", str(self.node_id), int_),
            ("node.id", str(self.node_id), int_),
            ("process.roles", "broker,controller", list_),
            ("listeners", listener, list_),
            ("advertised.listeners", advertised, list_),
            ("log.dirs", str(self.node.data_dir_path.resolve()), list_),
            ("auto.create.topics.enable", str(self.auto_create_topics).lower(), bool_),
            ("num.partitions", str(self.num_partitions), int_),
            ("socket.request.max.bytes", str(limits.socket_request_max_bytes), int_),
            ("connections.max.idle.ms", str(limits.connections_max_idle_ms), long_),
            ("queued.max.request.bytes", str(limits.queued_max_request_bytes), long_),
            ("group.initial.rebalance.delay.ms", str(groups.initial_rebalance_delay_ms), int_),
            ("group.min.session.timeout.ms", str(groups.min_session_timeout_ms), int_),
            ("group.max.session.timeout.ms", str(groups.max_session_timeout_ms), int_),
            ("group.max.size", str(groups.max_group_size), int_),
            ("offset.metadata.max.bytes", str(groups.max_metadata_bytes), int_),
            (
                "log.retention.check.interval.ms",
                str(self.node.state.retention_check_interval_ms),
                long_,
            ),
            ("sasl.enabled.mechanisms", ",".join(self.security.mechanisms), list_),
            ("super.users", ";".join(sorted(self.node.authz.super_users)), str_),
        )

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms: a connection with nothing in flight and
        no traffic for that long is closed (a half-sent frame is no traffic)."""
        idle_s = self.limits.connections_max_idle_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, idle_s / 2))
            now = loop.time()
            for conn in list(self.connections):
                if conn.idle_since(now) > idle_s:
                    log.info(
                        "kafka: closing an idle connection",
                        extra={"client": conn.client_host, "idle_ms": round(idle_s * 1000)},
                    )
                    conn.close()

    async def stop(self) -> None:
        if self.auth_failures.counts:
            log.info(
                "kafka listener: clients refused",
                extra={"listener": self.auth_failures.listener, **self.auth_failures.counts},
            )
        if self._idle_task is not None:
            self._idle_task.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            await conn.wait_closed()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)


# A SASL connection's stages (a PLAINTEXT or SSL one starts DONE).
# After a SaslHandshake v0, the SASL tokens travel as bare size-prefixed
# frames (RAW), both ways, until the exchange completes.
_SASL_HANDSHAKE, _SASL_AUTHENTICATE, _SASL_DONE = "handshake", "authenticate", "done"
_SASL_RAW = "raw"

_Entry = tuple[asyncio.Task[Any], bool]  # a request's answer task, cancellable on disconnect


class _Connection(asyncio.BufferedProtocol):
    """One client connection. Frames are received straight into a buffer
    that grows with what arrived (no intermediate copies of record batches;
    linkd/kafka/limits.py says what is bounded); each complete frame starts
    its request task at once, in arrival order; one writer task sends the
    answers in that order."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None  # after TLS, the TLS transport
        self._tcp: asyncio.Transport | None = None
        self.client_host = "/unknown"
        # The authenticated principal of this connection ("Type:name").
        self.principal = ANONYMOUS
        # SASL listeners: HANDSHAKE, then AUTHENTICATE (with an exchange), then DONE.
        self.sasl_state = _SASL_HANDSHAKE if listener.security.protocol.sasl else _SASL_DONE
        self._exchange: Exchange | None = None
        self._closing = False  # refused: frames still arriving are dropped
        self._tls_task: asyncio.Task[None] | None = None
        self._size_prefix = bytearray(4)
        self._frame: bytearray | None = None  # the frame being received
        self._frame_size = 0  # as announced
        self._frame_held = 0  # bytes of the request budget it holds
        self._received = 0
        self._answers: asyncio.Queue[_Entry | None] = asyncio.Queue()
        self.pending: set[_Entry] = set()
        self._in_flight = 0
        self._ready_bytes = 0  # answers finished and not yet written
        # A Fetch whose answer is not written yet; frames after a second
        # Fetch wait here, in order, until it is (see `_dispatch`).
        self._fetch_unwritten: asyncio.Task[Any] | None = None
        self._held_frames: deque[tuple[bytearray, int]] = deque()
        self._waiting_memory = False
        self._reading_paused = False
        self._last_traffic = asyncio.get_running_loop().time()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._writer_task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    # -- protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._tcp = transport
        peer = transport.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/unknown"
        self.listener.connections.add(self)
        loop = asyncio.get_running_loop()
        self._writer_task = loop.create_task(self._write_loop())
        if self.listener.security.ssl_context is None:
            self.transport = transport
            return
        transport.pause_reading()
        self._tls_task = loop.create_task(self._start_tls(transport))

    async def _start_tls(self, tcp: asyncio.Transport) -> None:
        """The TLS handshake; a refused or broken one is counted and logged
        (asyncio's own server would drop it silently)."""
        context = self.listener.security.ssl_context
        assert context is not None
        try:
            tls = await asyncio.get_running_loop().start_tls(
                tcp, self, context, server_side=True, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S
            )
        except Exception as exc:  # SSLError, a reset, a timeout: the client is refused
            self._refuse(tls_failure_reason(exc), None, f"TLS handshake: {exc}"[:300])
            tcp.abort()
            return
        if tls is None or tls.is_closing():
            tcp.abort()
            return
        self.transport = tls
        if self.listener.security.client_auth:
            ssl_object = tls.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            self.principal = certificate_principal(der) if der else ANONYMOUS
            log.debug(
                "kafka: authenticated",
                extra={"client": self.client_host, "principal": self.principal, "mechanism": "SSL"},
            )

    def _refuse(self, reason: Reason, user: str | None, detail: str) -> None:
        self.listener.auth_failures.record(self.client_host, user, reason, detail)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._size_prefix)[self._received :]
        return memoryview(self._frame)[self._received :]

    def buffer_updated(self, nbytes: int) -> None:
        self._received += nbytes
        self._last_traffic = asyncio.get_running_loop().time()
        if self._frame is None:
            if self._received < 4:
                return
            size = codec.frame_size(bytes(self._size_prefix))
            limit = min(codec.MAX_FRAME_BYTES, self.listener.limits.socket_request_max_bytes)
            if self.sasl_state != _SASL_DONE:  # Kafka's sasl.server.max.receive.size
                limit = min(limit, MAX_RECEIVE_BEFORE_AUTH)
            smallest = 1 if self.sasl_state == _SASL_RAW else codec.FIXED_HEADER_BYTES
            if size < smallest or size > limit:
                log.warning(
                    "kafka: closing a connection with a bad frame size (socket.request.max.bytes)",
                    extra={"client": self.client_host, "size": size, "limit": limit},
                )
                self.close()
                return
            first = min(size, FIRST_CHUNK_BYTES)
            self.listener.memory.force(first)
            self._frame, self._frame_size, self._frame_held = bytearray(first), size, first
            self._received = 0
            return
        if self._received < len(self._frame):
            return
        if self._received < self._frame_size:
            self._grow_frame()
            return
        frame, held = self._frame, self._frame_held
        self._frame, self._frame_held, self._received = None, 0, 0
        self._dispatch(frame, held)

    def _grow_frame(self) -> None:
        """The frame's buffer is full and more is announced: double it (a new
        buffer: the old one may still be lent to the transport), within the
        request budget, or stop reading until the budget has room."""
        assert self._frame is not None
        more = min(self._frame_size, 2 * len(self._frame)) - len(self._frame)
        if self.listener.memory.try_reserve(more):
            self._frame_grown(more)
            return
        memory = self.listener.memory
        log.info(
            "kafka: request memory is taken (queued.max.request.bytes); a connection "
            "sending a large request waits",
            extra={"client": self.client_host, "used": memory.used, "limit": memory.limit},
        )
        self._waiting_memory = True
        self._update_reading()
        memory.wait(more, functools.partial(self._frame_grown, more))

    def _frame_grown(self, more: int) -> None:
        if self._frame is None or self.transport is None or self.transport.is_closing():
            self.listener.memory.release(more)  # the connection went meanwhile
            return
        grown = bytearray(len(self._frame) + more)
        grown[: self._received] = self._frame
        self._frame, self._frame_held = grown, self._frame_held + more
        if self._waiting_memory:
            self._waiting_memory = False
            self._update_reading()

    def idle_since(self, now: float) -> float:
        """Seconds without traffic, or 0 while requests are in flight."""
        return 0.0 if self._in_flight else now - self._last_traffic

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self._frame_held:
            self.listener.memory.release(self._frame_held)
            self._frame, self._frame_held = None, 0
        while self._held_frames:
            self.listener.memory.release(self._held_frames.popleft()[1])
        for task, cancellable in list(self.pending):
            if cancellable:
                task.cancel()
        self._answers.put_nowait(None)  # the writer stops after earlier answers
        self._can_write.set()
        self.listener.connections.discard(self)
        if self._writer_task is not None:
            self._writer_task.add_done_callback(lambda _t: self._done.set())
        else:
            self._done.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- requests in, answers out -------------------------------------------------------

    def _dispatch(self, frame: bytearray, held: int) -> None:
        """Starts the frame's request, or holds it (with every frame after
        it, so the order stays) while a Fetch of this connection has an
        answer not yet written and this is another Fetch: Fetch answers are
        the large ones, and a client that pipelines fetches without reading
        the answers would otherwise have the daemon build them all at once
        (Kafka serves one request per connection at a time)."""
        if self._closing:
            self.listener.memory.release(held)
            return
        if self.sasl_state == _SASL_RAW:
            self._dispatch_raw_token(frame, held)
            return
        fixed = codec.peek_header(frame)
        assert fixed is not None  # size >= 8
        if self._held_frames or (fixed.api_key == FETCH_KEY and self._fetch_unwritten):
            self._held_frames.append((frame, held))
            self._update_reading()
            return
        api = SUPPORTED.get(fixed.api_key)
        task = asyncio.get_running_loop().create_task(self._answer(frame, fixed))
        if fixed.api_key == FETCH_KEY:
            self._fetch_unwritten = task
        entry = (task, api is not None and api.cancel_on_disconnect)
        self.pending.add(entry)
        task.add_done_callback(functools.partial(self._forget, entry, held))
        self._answers.put_nowait(entry)
        self._in_flight += 1
        self._update_reading()

    def _answer_written(self, task: asyncio.Task[Any]) -> None:
        """An answer went out: if it was the Fetch frames wait behind, start
        them, in order, up to the next Fetch."""
        if task is not self._fetch_unwritten:
            return
        self._fetch_unwritten = None
        while self._held_frames and self._fetch_unwritten is None:
            frame, held = self._held_frames.popleft()
            self._dispatch(frame, held)

    def _forget(self, entry: _Entry, held: int, task: asyncio.Task[Any]) -> None:
        """The request is answered (or cancelled): its frame's bytes go back
        to the budget, and its answer waits for the writer."""
        self.pending.discard(entry)
        self.listener.memory.release(held)
        if not task.cancelled() and task.exception() is None:
            self._ready_bytes += _size(task.result())
            self._update_reading()

    def _update_reading(self) -> None:
        """Reads while fewer than MAX_IN_FLIGHT requests are in flight, the
        answers not yet taken are within response_bytes_held, and no frame
        waits for request memory."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        pause = (
            self._in_flight + len(self._held_frames) >= MAX_IN_FLIGHT
            or self._ready_bytes > self.listener.limits.response_bytes_held
            or self._waiting_memory
        )
        if pause and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not pause and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()

    async def _write_loop(self) -> None:
        while True:
            entry = await self._answers.get()
            if entry is None:
                return
            task, _ = entry
            try:
                # Shielded: if this loop is cancelled, the request itself must
                # still run to its end (a produce with acks=0 is applied even
                # though nobody waits for its answer).
                data = await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    self._in_flight -= 1
                    self._answer_written(task)
                    continue  # a long poll of a client that left
                return
            except _CloseAfter as exc:
                self._write_then_close(exc.answer)
                return
            except _Unanswerable as exc:
                log.info(
                    "kafka: closing a connection after a request with no known response "
                    "shape (as Kafka does)",
                    extra={"client": self.client_host, "request": str(exc)},
                )
                self.close()
                return
            except Exception:
                # `_answer` answers every failure itself; if even that failed,
                # answers could no longer be kept in order: close the connection.
                log.exception("kafka: no answer could be encoded; closing the connection")
                self.close()
                return
            self._in_flight -= 1
            self._ready_bytes -= _size(data)
            transport = self.transport
            if transport is None or transport.is_closing():
                continue  # the client left: its answers are dropped
            if data:
                for chunk in data:
                    transport.write(chunk)
                await self._can_write.wait()
                self._last_traffic = asyncio.get_running_loop().time()
            self._answer_written(task)
            self._update_reading()

    def close(self) -> None:
        """Drops the connection now (unsent answers included)."""
        transport = self.transport or self._tcp
        if transport is not None:
            transport.abort()

    def _write_then_close(self, answer: Chunks | None) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            self.close()
            return
        for chunk in answer or ():
            transport.write(chunk)
        transport.close()  # after what is buffered is sent
        # A client that does not read its last answer does not keep the socket.
        asyncio.get_running_loop().call_later(CLOSE_AFTER_S, transport.abort)

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._done.wait(), timeout=5.0)

    # -- one request ------------------------------------------------------------------

    async def _answer(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks | None:
        key, version, correlation = fixed.api_key, fixed.api_version, fixed.correlation_id
        api = SUPPORTED.get(key)
        if self.sasl_state != _SASL_DONE:
            answer = self._authenticating(frame, fixed)
            if answer is not None:
                return answer
        if key == API_VERSIONS_KEY:
            return self._api_versions(frame, fixed)
        resp_cls = codec.response_class(key, version)
        if api is None or not api.min_version <= version <= api.max_version:
            name = api.name if api is not None else f"api key {key}"
            message = (
                f"{name} v{version} is not supported"
                if api is None
                else f"{name} v{version} is not supported "
                f"(supported: v{api.min_version}-v{api.max_version})"
            )
            log.info(
                "kafka: unsupported request",
                extra={"api_key": key, "version": version, "client": self.client_host},
            )
            if resp_cls is None:
                raise _Unanswerable(message)
            return codec.encode_response_chunks(
                correlation, codec.error_body(resp_cls, int(K.unsupported_version), message)
            )
        assert resp_cls is not None and api.handler is not None
        try:
            request = codec.parse_request(frame, fixed)
        except codec.DecodeError as exc:
            log.warning(
                "kafka: undecodable request", extra={"error": str(exc), "client": self.client_host}
            )
            return codec.encode_response_chunks(
                correlation, codec.error_body(resp_cls, int(K.invalid_request), str(exc))
            )
        ctx = Context(
            self.listener.node,
            self.listener.broker,
            version,
            request.client_id,
            self.client_host,
            self.listener.auto_create_topics,
            self.listener.num_partitions,
            self.listener.fetch_sessions,
            self.principal,
        )
        refused = authz.cluster_refusal(ctx, key)
        if refused is not None:
            return self._refused(key, correlation, resp_cls, request.body, refused)
        try:
            data = await api.handler(ctx, request.body)
            if data is None:
                return None
            return codec.encode_response_chunks(correlation, codec.make(resp_cls, data))
        except ClusterError as exc:
            body = codec.error_body(
                resp_cls, kafka_code(exc, coordinator=api.coordinator), kafka_message(exc)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: answer it, log it, keep serving
            log.exception("kafka: %s v%d failed", api.name, version)
            body = codec.error_body(
                resp_cls,
                int(K.unknown_server_error),
                f"{api.name} failed: {type(exc).__name__}: {exc}",
            )
        return codec.encode_response_chunks(correlation, body)

    @staticmethod
    def _refused(
        key: int, correlation: int, resp_cls: type[Any], body: Any, exc: ClusterError
    ) -> Chunks:
        """The answer to a request its principal may not make on the cluster."""
        per_item = authz.PER_ITEM_REFUSAL.get(key)
        if per_item is not None:
            data = codec.make(resp_cls, per_item(body, exc))
        else:
            data = codec.error_body(resp_cls, kafka_code(exc), kafka_message(exc))
        return codec.encode_response_chunks(correlation, data)

    def _api_versions(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks:
        api = SUPPORTED[API_VERSIONS_KEY]
        keys = api_versions_list()
        if not api.min_version <= fixed.api_version <= api.max_version:
            body = codec.make(
                ApiVersionsV0, {"error_code": int(K.unsupported_version), "api_keys": keys}
            )
            return codec.encode_response_chunks(fixed.correlation_id, body, header_v0=True)
        resp_cls = codec.response_class(API_VERSIONS_KEY, fixed.api_version)
        assert resp_cls is not None
        try:
            codec.parse_request(frame, fixed)
        except codec.DecodeError:
            body = codec.make(resp_cls, {"error_code": int(K.invalid_request), "api_keys": keys})
            return codec.encode_response_chunks(fixed.correlation_id, body, header_v0=True)
        body = codec.make(resp_cls, {"error_code": 0, "api_keys": keys, "throttle_time": 0})
        return codec.encode_response_chunks(fixed.correlation_id, body, header_v0=True)

    # -- SASL ---------------------------------------------------------------------------

    def _authenticating(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks | None:
        """A request on a SASL connection not yet authenticated: the answer
        to a SaslHandshake or SaslAuthenticate; None for ApiVersions (answered
        as usual); anything else closes the connection (raises), as Kafka
        does, after an ILLEGAL_SASL_STATE answer once a handshake chose a
        mechanism."""
        key, version = fixed.api_key, fixed.api_version
        api = SUPPORTED.get(key)
        in_range = api is not None and api.min_version <= version <= api.max_version
        if self.sasl_state == _SASL_HANDSHAKE:
            if key == API_VERSIONS_KEY or (key == SASL_HANDSHAKE_KEY and not in_range):
                return None
            if key == SASL_HANDSHAKE_KEY:
                return self._sasl_handshake(frame, fixed)
        elif key == SASL_AUTHENTICATE_KEY:
            if not in_range:
                return None
            return self._sasl_authenticate(frame, fixed)
        name = api.name if api is not None else f"api key {key}"
        stage = "handshake" if self.sasl_state == _SASL_HANDSHAKE else "authentication"
        message = f"Unexpected Kafka request of type {name} during SASL {stage}."
        self._refuse(Reason.ILLEGAL_STATE, None, message)
        self._closing = True
        resp_cls = codec.response_class(key, version) if in_range else None
        if self.sasl_state == _SASL_HANDSHAKE or resp_cls is None:
            raise _CloseAfter(None)
        body = codec.error_body(resp_cls, int(K.illegal_sasl_state), message)
        raise _CloseAfter(
            codec.encode_response_chunks(
                fixed.correlation_id, body, header_v0=key == API_VERSIONS_KEY
            )
        )

    def _parse_or_close(
        self, frame: bytes | bytearray, fixed: codec.FixedHeader
    ) -> tuple[Any, type[Any]]:
        resp_cls = codec.response_class(fixed.api_key, fixed.api_version)
        assert resp_cls is not None
        try:
            return codec.parse_request(frame, fixed).body, resp_cls
        except codec.DecodeError as exc:
            self._refuse(Reason.MALFORMED, None, "undecodable SaslHandshake/SaslAuthenticate")
            self._closing = True
            body = codec.error_body(resp_cls, int(K.invalid_request), str(exc))
            raise _CloseAfter(codec.encode_response_chunks(fixed.correlation_id, body)) from None

    def _sasl_handshake(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks:
        body, resp_cls = self._parse_or_close(frame, fixed)
        enabled = list(self.listener.security.mechanisms)
        mechanism = str(body.mechanism)
        if mechanism not in enabled:
            self._refuse(Reason.UNSUPPORTED_MECHANISM, None, f"mechanism {mechanism[:64]!r}")
            self._closing = True
            data = {"error_code": int(K.unsupported_sasl_mechanism), "mechanisms": enabled}
            raise _CloseAfter(
                codec.encode_response_chunks(fixed.correlation_id, codec.make(resp_cls, data))
            )
        nonce = secrets.token_urlsafe(24)
        self._exchange = make_exchange(mechanism, self.listener.node.state.users, nonce)
        self.sasl_state = _SASL_AUTHENTICATE if fixed.api_version >= 1 else _SASL_RAW
        data = {"error_code": 0, "mechanisms": enabled}
        return codec.encode_response_chunks(fixed.correlation_id, codec.make(resp_cls, data))

    def _sasl_authenticate(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks:
        body, resp_cls = self._parse_or_close(frame, fixed)
        assert self._exchange is not None
        try:
            step = self._exchange.step(bytes(body.auth_bytes))
        except AuthFailed as exc:
            detail = f"{self._exchange.mechanism}: {exc.reason.value}"
            self._refuse(exc.reason, exc.user, detail)
            self._closing = True
            self._exchange = None
            data = {
                "error_code": int(K.sasl_authentication_failed),
                "error_message": exc.message,
                "auth_bytes": b"",
                "session_lifetime": 0,
            }
            raise _CloseAfter(
                codec.encode_response_chunks(fixed.correlation_id, codec.make(resp_cls, data))
            ) from None
        if step.user is not None:
            self._authenticated(step.user)
        data = {
            "error_code": 0,
            "error_message": None,
            "auth_bytes": step.challenge,
            "session_lifetime": 0,
        }
        return codec.encode_response_chunks(fixed.correlation_id, codec.make(resp_cls, data))

    def _authenticated(self, user: str) -> None:
        assert self._exchange is not None
        self.principal = f"User:{user}"
        self.sasl_state = _SASL_DONE
        log.debug(
            "kafka: authenticated",
            extra={
                "client": self.client_host,
                "principal": self.principal,
                "mechanism": self._exchange.mechanism,
            },
        )
        self._exchange = None

    def _dispatch_raw_token(self, frame: bytearray, held: int) -> None:
        """A bare SASL token (after a SaslHandshake v0): its answer is the
        bare challenge; a failure closes the connection (a bare token has no
        room for an error, as with Kafka)."""
        task = asyncio.get_running_loop().create_task(self._raw_token(bytes(frame)))
        entry = (task, False)
        self.pending.add(entry)
        task.add_done_callback(functools.partial(self._forget, entry, held))
        self._answers.put_nowait(entry)
        self._in_flight += 1
        self._update_reading()

    async def _raw_token(self, token: bytes) -> Chunks:
        assert self._exchange is not None
        try:
            step = self._exchange.step(token)
        except AuthFailed as exc:
            self._refuse(exc.reason, exc.user, f"{self._exchange.mechanism}: {exc.reason.value}")
            self._closing = True
            self._exchange = None
            raise _CloseAfter(None) from None
        if step.user is not None:
            self._authenticated(step.user)
        return [len(step.challenge).to_bytes(4, "big"), step.challenge]
