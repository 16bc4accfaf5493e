"""A push's records are sent as bytes beside its message (`link_codec.push_bytes`)
and the session's MAC covers them: on a plaintext link, a push whose records
were changed on the way is refused (`ReplicationService.replica_push_encoded`,
the receiving shell, with its session check and nothing else)."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import grpc
import pytest

from linkd import link_codec as codec
from linkd import link_sessions as sessions
from linkd.core import link_auth as auth
from linkd.core import link_rounds as rounds
from linkd.replication import ReplicationService

NOW = 1_000_000


class Verified(Exception):
    """The push passed its session check (the test stops there)."""


class Aborted(Exception):
    pass


class _Node:
    def clock(self) -> int:
        return NOW

    def check_ready(self) -> None:
        raise Verified


class _Security:
    def __init__(self) -> None:
        self.sessions = auth.LinkSessions("B")

    def accepted(self) -> tuple[str, ...]:
        return ("",)

    def refused(self, exc: Any, peer: str) -> None:
        pass


class _Context:
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


def _session(security: _Security) -> sessions.ClientSession:
    """A session A opened with B (the core's exchange, no transport)."""
    key = hashlib.sha256(b"the link key").digest()
    nonce = b"n" * auth.NONCE_BYTES
    security.sessions.challenge(nonce, NOW)
    opening = auth.open_request("L1", "ab", "A", "B", nonce, b"c" * 32, key, "", False)
    opened = security.sessions.open(opening.request, auth.KnownLink("A", key), ("",), NOW, "s1")
    session_key = auth.opened_session_key(opening, "s1", opened.proof)
    identity = sessions.LinkIdentity("L1", "ab", "A", "B", key, "")
    return sessions.ClientSession(auth.CallSigner("s1", session_key), "b:1", identity)


def _service(security: _Security) -> ReplicationService:
    service = ReplicationService.__new__(ReplicationService)
    service.node, service.security = _Node(), security  # type: ignore[assignment]
    return service


def _push() -> rounds.Push:
    records = bytes(range(256)) * 4096  # 1 MiB, opaque to the session check
    part = rounds.FetchedPartition("orders-x", 0, records=records, size_bytes=len(records))
    return rounds.Push("L1", data=rounds.FetchAnswer([part]))


def test_a_push_is_accepted_as_signed_and_refused_with_one_byte_of_its_records_changed() -> None:
    security = _Security()
    client = _session(security)
    service = _service(security)
    body = codec.push_bytes(_push())
    metadata = client.metadata_of_body("ReplicaPush", body)
    with pytest.raises(Verified):
        asyncio.run(service.replica_push_encoded(body, _Context(metadata)))
    for at in (len(body) // 2, len(body) - 1):  # inside the records; their last byte
        metadata = client.metadata_of_body("ReplicaPush", body)
        tampered = bytearray(body)
        tampered[at] ^= 0x01
        # Still a push that decodes, with other records: only the MAC tells.
        assert codec.push_of_bytes(bytes(tampered))[1] != codec.push_of_bytes(body)[1]
        with pytest.raises(Aborted) as refused:
            asyncio.run(service.replica_push_encoded(bytes(tampered), _Context(metadata)))
        status = refused.value.args[0]
        assert status.code == grpc.StatusCode.UNAUTHENTICATED
        assert "does not match" in status.details
    assert security.sessions.refusals[auth.Refusal.BAD_MAC] == 2
