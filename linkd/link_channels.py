"""The channels a daemon dials its link partners on: plain or TLS.

A link's remote address is written as a listener is: `HOST:PORT` (or
`PLAINTEXT://` / `SASL_PLAINTEXT://HOST:PORT`) dials in clear, `SSL://` or
`SASL_SSL://HOST:PORT` dials TLS. The remote's certificate is checked
against `--link-tls-ca` (else the system's roots), and the daemon presents
its own `--tls-cert`/`--tls-key` as a client certificate when it has them,
as a Kafka broker uses its keystore between brokers (an SSL listener with
`--tls-client-ca` requires one). The SASL part of a name changes nothing
here: the replication service is authenticated by link sessions
(linkd/link_sessions.py), not by call credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpc import aio, ssl_channel_credentials

from linkd.grpc_auth import parse_listener

# Each channel keeps its own connections: gRPC otherwise shares one per
# address in the process, with its reconnect back-off, so a procedure's call
# to a remote that has just restarted failed at once with the refusal the
# link's own channel met while the remote was down (back-off up to minutes).
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 128 * 1024 * 1024),
    ("grpc.max_send_message_length", 128 * 1024 * 1024),
    ("grpc.use_local_subchannel_pool", 1),
]


@dataclass(frozen=True, slots=True)
class LinkTls:
    """What a TLS link channel trusts and presents (PEM bytes; None: none)."""

    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    @classmethod
    def from_files(cls, ca: Path | None, cert: Path | None, key: Path | None) -> LinkTls:
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return cls(read(ca), read(cert), read(key))


# Plain links, and TLS ones that trust the system's roots and present nothing.
NO_TLS = LinkTls()


def dial(address: str, tls: LinkTls) -> aio.Channel:
    """A channel to a link partner at `address` (ValueError: not an address)."""
    listener = parse_listener(address)
    if not listener.tls:
        return aio.insecure_channel(listener.address, options=GRPC_OPTIONS)
    credentials = ssl_channel_credentials(
        root_certificates=tls.ca,
        private_key=tls.key if tls.cert is not None else None,
        certificate_chain=tls.cert if tls.key is not None else None,
    )
    return aio.secure_channel(listener.address, credentials, options=GRPC_OPTIONS)
