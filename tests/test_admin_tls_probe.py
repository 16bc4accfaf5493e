"""What the client's TLS probe makes of a listener (`admin.security.probe_tls`),
which names a security mismatch after a call found the cluster unreachable.
A listener that takes the connection but answers no handshake in time (a
daemon still starting, a loaded machine) is not a plaintext one: a
`health --wait` must go on waiting, not stop on a wrong diagnosis."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from admin.errors import CcrError
from admin.security import Diagnosis, probe_tls, security_of

TLS = security_of({"security.protocol": "SSL"})


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that completes TCP connections (the kernel's backlog) and
    never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def plaintext() -> Iterator[str]:
    """A port that answers a ClientHello with bytes that are not TLS (as a
    plaintext HTTP/2 server's GOAWAY is), then closes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(10)

    def answer() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.recv(1024)
            conn.sendall(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + b"\x00" * 8)

    worker = threading.Thread(target=answer, daemon=True)
    worker.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()
    worker.join(10)


def test_a_listener_that_answers_no_handshake_is_not_called_plaintext(silent: str) -> None:
    assert probe_tls(silent, TLS) == "down"
    unreachable = CcrError("UNAVAILABLE", "failed to connect", retriable=True)
    assert Diagnosis(silent, TLS).explain(unreachable) is unreachable


def test_a_listener_that_answers_with_something_else_than_tls_is_plaintext(
    plaintext: str,
) -> None:
    assert probe_tls(plaintext, TLS) == "plain"
