"""A link partner's channels: each dials on its own.

gRPC shares one connection per address within a process unless told not
to, and with it the connection's reconnect back-off. A daemon's link keeps
a channel to its remote that, while the remote is down, backs off; a
procedure's call (e.g. the re-run of `reverse` after the remote restarted)
must still reach the remote as soon as it listens again, not fail with the
link channel's last "connection refused".
"""

from __future__ import annotations

import asyncio
import socket

import grpc
from grpc import aio

from linkd.link_channels import NO_TLS, dial


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def _status(channel: aio.Channel) -> grpc.StatusCode:
    try:
        await channel.unary_unary("/ccr.test.None/Call", None, None)(b"", timeout=2)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def test_dial__a_new_channel_reaches_a_restarted_remote_while_another_backs_off() -> None:
    async def story() -> tuple[grpc.StatusCode, grpc.StatusCode]:
        address = _free_address()
        kept = dial(address, NO_TLS)  # the link's channel: it backs off while nobody listens
        for _ in range(8):
            assert await _status(kept) == grpc.StatusCode.UNAVAILABLE
            await asyncio.sleep(0.3)
        server = aio.server()
        server.add_insecure_port(address)
        await server.start()
        try:
            async with dial(address, NO_TLS) as fresh:
                reached = await _status(fresh)  # answered: no such method
            await kept.close(None)
            return reached, grpc.StatusCode.UNIMPLEMENTED
        finally:
            await server.stop(None)

    reached, expected = asyncio.run(story())
    assert reached == expected
