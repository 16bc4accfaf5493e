"""A link's connection to its remote, for the calls of its driver.

The channel goes to the link's address as it is now (dialed again when an
operator re-points it, `linkd/link_channels.py`); the session is the one
the driver last opened (`OpenSession`: `linkd/link_sessions.py`); each call
is encoded once (`linkd.link_codec`), signed over those bytes and sent with
its deadline, and its answer's mac is checked over the bytes received before
they are decoded (`link_sessions.call_signed`). Whatever goes wrong comes
back as the call's answer (`Answered` with the error: a refusal keeps its
code, a transport failure is LINK_UNREACHABLE, an unauthenticated call, or
an answer unsigned or changed on the way, LINK_AUTHENTICATION_FAILED): what
the driver does about it is the core's.
"""

from __future__ import annotations

import asyncio

import grpc
from grpc import aio

from ccr.v1 import replication_pb2_grpc
from linkd import ack_trace
from linkd import link_codec as codec
from linkd import link_sessions as sessions
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import (
    Answered,
    LinkAnswer,
    LinkCall,
    OpenSession,
    ReplicaFetch,
    SessionOpened,
    call_name,
)
from linkd.core.links import LinkConfig
from linkd.link_channels import dial
from linkd.link_sessions import ClientSession, LinkSecurity
from linkd.node import ClusterNode


class LinkConnection:
    """The channel and session one link's driver calls its remote on."""

    def __init__(self, node: ClusterNode, security: LinkSecurity, name: str) -> None:
        self.node, self.security, self.name = node, security, name
        self._channel: aio.Channel | None = None
        self._address = ""
        self._session: ClientSession | None = None
        # Calls on the current channel that send requests already encoded.
        self._raw_methods: dict[str, sessions.RawCall] = {}

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(None)

    async def dial(self, call: LinkCall, timeout_ms: int) -> Answered:
        """One call, and what became of it."""
        what = f"link {self.name!r}: {call_name(call)}"
        try:
            return Answered(await self._call(call, timeout_ms / 1000))
        except ClusterError as exc:
            return Answered(None, exc)
        except grpc.RpcError as exc:
            error = codec.rpc_error(exc, what)
            if sessions.is_auth_failure(exc) and error.code != ErrorCode.LINK_AUTHENTICATION_FAILED:
                error = ClusterError(ErrorCode.LINK_AUTHENTICATION_FAILED, what, error.message)
            return Answered(None, error)

    async def _call(self, call: LinkCall, timeout_s: float) -> LinkAnswer:
        config = self.node.state.links.get(self.name)
        self._dial_now(config)
        if isinstance(call, OpenSession):
            identity = sessions.identity_of(self.security.box, config)
            address = config.value("remote_bootstrap")
            assert self._channel is not None
            stub = replication_pb2_grpc.ReplicationStub(self._channel)
            self._session = await sessions.open_session(stub, identity, address, timeout_s)
            return SessionOpened()
        session = self._session
        if session is None:
            raise ClusterError(ErrorCode.LINK_AUTHENTICATION_FAILED, f"link {self.name!r}",
                               f"link {self.name!r}: no session open")  # fmt: skip
        # Encoded once: the bytes signed are the bytes sent.
        method, body = codec.call_body(call)
        if ack_trace.ON and isinstance(call, ReplicaFetch):
            for part in call.request.partitions:
                ack_trace.hop("follower.fetch_sent", part.source_topic, part.partition,
                              part.fetch_offset, part.fetch_offset)  # fmt: skip
        # The answer's bytes, proved by its mac, before anything reads them.
        answer = await sessions.call_signed(
            session, self._raw_method(method), method, body, timeout_s
        )
        what = f"link {self.name!r}: {method} on {session.address}"
        return codec.call_answer_of(call, codec.decoded_answer(method, answer, what))

    def _dial_now(self, config: LinkConfig) -> None:
        """The channel to the link's address as it is now (a stub is made
        only to open a session: every other call goes through
        `_raw_method`, made once per channel and method)."""
        address = config.value("remote_bootstrap")
        if self._channel is None or address != self._address:
            old = self._channel
            self._address, self._raw_methods = address, {}
            try:
                self._channel = dial(address, self.security.tls)
            except ValueError as exc:
                raise ClusterError(ErrorCode.LINK_UNREACHABLE, f"link {self.name!r}",
                                   f"link {self.name!r}: cannot dial {address!r}: {exc}") from exc
            if old is not None:
                task = asyncio.create_task(old.close(1.0))
                task.add_done_callback(lambda t: None)

    def _raw_method(self, method: str) -> sessions.RawCall:
        """The channel's call of `method` taking its request already encoded
        and giving its answer's bytes as received (`sessions.raw_method`: they
        are checked, then decoded, a fetch answer's records read as bytes:
        `codec.answer_decoder`)."""
        assert self._channel is not None
        call = self._raw_methods.get(method)
        if call is None:
            call = sessions.raw_method(self._channel, method)
            self._raw_methods[method] = call
        return call
