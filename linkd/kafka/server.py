"""The Kafka protocol listener of a linkd: connections, framing, ordering, dispatch.

Rules:
- One asyncio server on the node's event loop. Each connection reads frames
  and starts one handler task per request at once, in arrival order; a
  connection may pipeline up to MAX_IN_FLIGHT requests (then reading pauses).
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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsV0
from kio.schema.errors import ErrorCode as K

from linkd.core.errors import ClusterError
from linkd.kafka import api_admin, api_cluster, api_data, api_groups, api_txn, codec
from linkd.kafka.context import Broker, Context, Handler
from linkd.kafka.errors import kafka_code, kafka_message
from linkd.node import ClusterNode

log = logging.getLogger("linkd.kafka")

MAX_IN_FLIGHT = 64
API_VERSIONS_KEY = 18

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
        18: Api("ApiVersions", 0, 4, None),
        19: Api("CreateTopics", 2, 7, api_admin.create_topics),
        20: Api("DeleteTopics", 1, 6, api_admin.delete_topics),
        21: Api("DeleteRecords", 0, 2, api_data.delete_records),
        22: Api("InitProducerId", 0, 5, api_txn.init_producer_id, coordinator=True),
        24: Api("AddPartitionsToTxn", 0, 3, api_txn.add_partitions_to_txn, coordinator=True),
        25: Api("AddOffsetsToTxn", 0, 4, api_txn.add_offsets_to_txn, coordinator=True),
        26: Api("EndTxn", 0, 4, api_txn.end_txn, coordinator=True),
        28: Api("TxnOffsetCommit", 0, 4, api_groups.txn_offset_commit, coordinator=True),
        29: Api("DescribeAcls", 1, 3, api_admin.describe_acls),
        30: Api("CreateAcls", 1, 3, api_admin.create_acls),
        31: Api("DeleteAcls", 1, 3, api_admin.delete_acls),
        32: Api("DescribeConfigs", 1, 4, api_admin.describe_configs),
        33: Api("AlterConfigs", 0, 2, api_admin.alter_configs),
        37: Api("CreatePartitions", 0, 3, api_admin.create_partitions),
        42: Api("DeleteGroups", 0, 2, api_groups.delete_groups, coordinator=True),
        44: Api("IncrementalAlterConfigs", 0, 1, api_admin.incremental_alter_configs),
        47: Api("OffsetDelete", 0, 0, api_groups.offset_delete, coordinator=True),
        60: Api("DescribeCluster", 0, 1, api_cluster.describe_cluster),
    }
)


def api_versions_list() -> list[dict[str, int]]:
    return [
        {"api_key": key, "min_version": api.min_version, "max_version": api.max_version}
        for key, api in sorted(SUPPORTED.items())
    ]


class _Unanswerable(Exception):
    """A request no response shape is known for (an unknown API key, or a
    version newer than any schema): Kafka closes such a connection, since
    any body sent back would be one the client cannot decode."""


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
    ) -> None:
        self.node = node
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.node_id = node_id
        self.broker = Broker(node_id, advertised_host or host, port)
        self._server: asyncio.Server | None = None
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
        self.broker = Broker(self.node_id, host, self.port)
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
        log.info(
            "kafka listener serving",
            extra={"listen": f"{self.host}:{self.port}", "advertised": f"{host}:{self.port}"},
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            await conn.wait_closed()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2.0)


_Entry = tuple[asyncio.Task[Any], bool]  # a request's answer task, cancellable on disconnect


class _Connection(asyncio.BufferedProtocol):
    """One client connection. Frames are received straight into a buffer of
    their own size (no intermediate copies of record batches); each complete
    frame starts its request task at once, in arrival order; one writer task
    sends the answers in that order."""

    def __init__(self, listener: KafkaListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.client_host = "/unknown"
        self._size_prefix = bytearray(4)
        self._frame: bytearray | None = None  # the frame being received
        self._received = 0
        self._answers: asyncio.Queue[_Entry | None] = asyncio.Queue()
        self.pending: set[_Entry] = set()
        self._in_flight = 0
        self._reading_paused = False
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._writer_task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()

    # -- protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else "/unknown"
        self.listener.connections.add(self)
        self._writer_task = asyncio.get_running_loop().create_task(self._write_loop())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._size_prefix)[self._received :]
        return memoryview(self._frame)[self._received :]

    def buffer_updated(self, nbytes: int) -> None:
        self._received += nbytes
        if self._frame is None:
            if self._received < 4:
                return
            size = codec.frame_size(bytes(self._size_prefix))
            if size < codec.FIXED_HEADER_BYTES or size > codec.MAX_FRAME_BYTES:
                log.warning(
                    "kafka: closing a connection with a bad frame size",
                    extra={"client": self.client_host, "size": size},
                )
                self.close()
                return
            self._frame, self._received = bytearray(size), 0
            return
        if self._received < len(self._frame):
            return
        frame, self._frame, self._received = self._frame, None, 0
        self._dispatch(frame)

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
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

    def _dispatch(self, frame: bytearray) -> None:
        fixed = codec.peek_header(frame)
        assert fixed is not None  # size >= 8
        api = SUPPORTED.get(fixed.api_key)
        task = asyncio.get_running_loop().create_task(self._answer(frame, fixed))
        entry = (task, api is not None and api.cancel_on_disconnect)
        self.pending.add(entry)
        task.add_done_callback(functools.partial(self._forget, entry))
        self._answers.put_nowait(entry)
        self._in_flight += 1
        if self._in_flight >= MAX_IN_FLIGHT and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()

    def _forget(self, entry: _Entry, _task: object) -> None:
        self.pending.discard(entry)

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
                    continue  # a long poll of a client that left
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
            transport = self.transport
            if transport is None or transport.is_closing():
                continue  # the client left: its answers are dropped
            if data:
                for chunk in data:
                    transport.write(chunk)
                await self._can_write.wait()
            if self._reading_paused and self._in_flight < MAX_IN_FLIGHT:
                self._reading_paused = False
                transport.resume_reading()

    def close(self) -> None:
        """Drops the connection now (unsent answers included)."""
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._done.wait(), timeout=5.0)

    # -- one request ------------------------------------------------------------------

    async def _answer(self, frame: bytes | bytearray, fixed: codec.FixedHeader) -> Chunks | None:
        key, version, correlation = fixed.api_key, fixed.api_version, fixed.correlation_id
        api = SUPPORTED.get(key)
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
            self.listener.node, self.listener.broker, version, request.client_id, self.client_host
        )
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
