"""The shells of answer macs, without transport: the callee's handlers sign
the bytes they answer (`replication._signed`, as `add_replication_service`
installs them), and the caller checks them over the bytes it received
(`ClientSession.check_answer`, what `link_sessions.call_signed` does)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from test_link_push_mac import _Security, _session

from ccr.v1 import replication_pb2
from linkd import link_codec as codec
from linkd import link_sessions as sessions
from linkd.core import link_auth as auth
from linkd.core import link_rounds as rounds
from linkd.core.errors import ClusterError, ErrorCode
from linkd.replication import ReplicationService, _signed

NOW = 1_000_000


class _Context:
    def __init__(self, metadata: sessions.Metadata) -> None:
        self.metadata = metadata
        self.trailing: Any = None

    def invocation_metadata(self) -> sessions.Metadata:
        return self.metadata

    def set_trailing_metadata(self, trailing: Any) -> None:
        self.trailing = trailing


def _service(security: _Security) -> ReplicationService:
    service = ReplicationService.__new__(ReplicationService)
    service.security = security  # type: ignore[assignment]
    return service


def _answer() -> rounds.FetchAnswer:
    records = bytes(range(256)) * 1024
    part = rounds.FetchedPartition(
        "orders-x", 0, high_watermark=1000, records=records, size_bytes=len(records)
    )
    return rounds.FetchAnswer([part])


def _refusal(call: Any) -> ClusterError:
    with pytest.raises(ClusterError) as exc:
        call()
    assert exc.value.code == ErrorCode.LINK_AUTHENTICATION_FAILED
    return exc.value


def test_a_fetch_answer_is_signed_as_sent_and_refused_changed_or_unsigned() -> None:
    security = _Security()
    client = _session(security)
    body = codec.fetch_answer_bytes(_answer())

    async def fetch(request: Any, context: Any) -> bytes:
        return body  # the servicer answers ReplicaFetch as bytes

    handler = grpc.unary_unary_rpc_method_handler(fetch, response_serializer=None)
    signed = _signed(_service(security), "ReplicaFetch", handler)
    assert signed.response_serializer is None
    request = b"a fetch request"
    call = client.sign("ReplicaFetch", request)
    context = _Context(call.metadata)
    sent = asyncio.run(signed.unary_unary(request, context))
    assert sent == body
    client.check_answer(call, sent, context.trailing)  # accepted as sent
    for at in (len(body) // 2, 10):  # inside the records; in a partition's metadata
        changed = bytearray(body)
        changed[at] ^= 0x01
        refused = _refusal(
            lambda c=bytes(changed): client.check_answer(call, c, context.trailing)
        )
        assert refused.resource == auth.Refusal.BAD_ANSWER_MAC
        assert "link 'ab'" in refused.message and "ReplicaFetch" in refused.message
    # Bound to its call: it answers no other of the session's.
    later = client.sign("ReplicaFetch", request)
    refused = _refusal(lambda: client.check_answer(later, sent, context.trailing))
    assert refused.resource == auth.Refusal.BAD_ANSWER_MAC
    # The request's own mac as the answer's.
    request_mac = dict(call.metadata)[sessions.MAC_KEY]
    replayed = ((sessions.ANSWER_MAC_KEY, request_mac),)
    assert _refusal(lambda: client.check_answer(call, sent, replayed)).resource == (
        auth.Refusal.BAD_ANSWER_MAC
    )
    unreadable = ((sessions.ANSWER_MAC_KEY, "not hex"),)
    assert _refusal(lambda: client.check_answer(call, sent, unreadable)).resource == (
        auth.Refusal.BAD_ANSWER_MAC
    )
    for trailing in (None, (), (("other", "x"),)):  # an older daemon signs nothing
        unsigned = _refusal(lambda t=trailing: client.check_answer(call, sent, t))
        assert unsigned.resource == auth.Refusal.UNSIGNED_ANSWER
        assert "does not sign its answers" in unsigned.message


def test_a_message_answer_is_serialized_by_the_signing_handler__signed_over_those_bytes() -> None:
    security = _Security()
    client = _session(security)
    answer = replication_pb2.ListSourceTopicsResponse()
    answer.topics.add(name="orders-x", partitions=3, configs={"b": "2", "a": "1"})

    async def listing(request: Any, context: Any) -> replication_pb2.ListSourceTopicsResponse:
        return answer

    handler = grpc.unary_unary_rpc_method_handler(
        listing, response_serializer=replication_pb2.ListSourceTopicsResponse.SerializeToString
    )
    signed = _signed(_service(security), "ListSourceTopics", handler)
    call = client.sign("ListSourceTopics", b"")
    context = _Context(call.metadata)
    sent = asyncio.run(signed.unary_unary(b"", context))
    assert isinstance(sent, bytes)
    assert replication_pb2.ListSourceTopicsResponse.FromString(sent) == answer
    client.check_answer(call, sent, context.trailing)
    # Signed for its method only.
    as_fetch = sessions.SignedCall("ReplicaFetch", call.seq, call.metadata)
    assert _refusal(lambda: client.check_answer(as_fetch, sent, context.trailing)).resource == (
        auth.Refusal.BAD_ANSWER_MAC
    )
