"""A gRPC relay on 127.0.0.1 between a link's caller and its callee: the
attacker on a plaintext link's path, at the level of its calls.

Every call is relayed as bytes both ways with the link session's metadata
(the caller's `ccr-link-*` keys, the callee's trailing metadata); tests turn
on what it does to the answers:
- `forge`: a ReplicaFetch answer holding records whose values contain
  GENUINE gets them replaced by FORGED (the same length), each batch's
  CRC32C computed again, so that the follower's own checks of a copied
  batch (size, CRC, header) pass: only the answer's mac tells;
- `strip`: the callee's answer macs are left out, as a daemon older than
  them answers.
Counted: `forged` answers, `stripped` ones. Stops with `close`.
"""

from __future__ import annotations

import threading
from concurrent import futures
from types import TracebackType
from typing import Any

import crc32c
import grpc

from ccr.v1 import replication_pb2

GENUINE, FORGED = b"genuine", b"forged!"
ANSWER_MAC_KEY = "ccr-link-answer-mac"
FETCH = "/ccr.v1.Replication/ReplicaFetch"
# Record batch v2: baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1,
# crc 4, then what the CRC covers (attributes to the end); records from 61.
_CRC_AT, _ATTRIBUTES_AT, _RECORDS_AT = 17, 21, 61


def forged_batches(records: bytes) -> bytes:
    """`records` with GENUINE replaced by FORGED in each uncompressed batch,
    its CRC computed again (the bytes a follower's checks accept)."""
    out = bytearray()
    at = 0
    while at + 12 <= len(records):
        size = 12 + int.from_bytes(records[at + 8 : at + 12], "big")
        batch = bytearray(records[at : at + size])
        compressed = int.from_bytes(batch[_ATTRIBUTES_AT : _ATTRIBUTES_AT + 2], "big") & 7
        if not compressed and GENUINE in batch[_RECORDS_AT:]:
            batch[_RECORDS_AT:] = batch[_RECORDS_AT:].replace(GENUINE, FORGED)
            crc = crc32c.crc32c(bytes(batch[_ATTRIBUTES_AT:]))
            batch[_CRC_AT:_ATTRIBUTES_AT] = crc.to_bytes(4, "big")
        out += batch
        at += size
    return bytes(out + records[at:])


class AnswerRelay:
    def __init__(self, upstream: str) -> None:
        self.forge = False
        self.strip = False
        self.forged = 0
        self.stripped = 0
        self._lock = threading.Lock()
        self._channel = grpc.insecure_channel(
            upstream, options=[("grpc.max_receive_message_length", 128 * 1024 * 1024)]
        )
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32),
            options=[("grpc.max_receive_message_length", 128 * 1024 * 1024)],
        )
        self._server.add_generic_rpc_handlers((_Handler(self),))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    def relay(self, method: str, body: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = [(k, v) for k, v in context.invocation_metadata() if k.startswith("ccr-")]
        remaining = context.time_remaining()
        timeout = min(remaining, 60.0) if remaining is not None else 60.0
        call = self._channel.unary_unary(method)
        try:
            answer, rpc = call.with_call(body, metadata=metadata, timeout=timeout)
        except grpc.RpcError as exc:
            context.set_trailing_metadata(tuple(exc.trailing_metadata() or ()))
            context.abort(exc.code(), exc.details() or "")
        trailing = tuple(rpc.trailing_metadata() or ())
        if self.strip and any(k == ANSWER_MAC_KEY for k, _ in trailing):
            trailing = tuple((k, v) for k, v in trailing if k != ANSWER_MAC_KEY)
            with self._lock:
                self.stripped += 1
        if self.forge and method == FETCH and GENUINE in answer:
            answer = self._forged(answer)
        context.set_trailing_metadata(trailing)
        assert isinstance(answer, bytes)
        return answer

    def _forged(self, answer: bytes) -> bytes:
        message = replication_pb2.ReplicaFetchResponse.FromString(answer)
        for p in message.partitions:
            p.records = forged_batches(p.records)
        with self._lock:
            self.forged += 1
        return message.SerializeToString()

    def close(self) -> None:
        self._server.stop(0)
        self._channel.close()

    def __enter__(self) -> AnswerRelay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, relay: AnswerRelay) -> None:
        self.relay = relay

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method = details.method

        def handle(body: bytes, context: grpc.ServicerContext) -> bytes:
            return self.relay.relay(method, body, context)

        return grpc.unary_unary_rpc_method_handler(handle)
