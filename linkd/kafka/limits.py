"""What the Kafka listener holds for its clients, and the bounds on it.

Kafka's broker bounds what a client can make it hold: `socket.request.max.bytes`
(the largest request it reads), `connections.max.idle.ms` (a connection with no
traffic is closed) and `queued.max.request.bytes` (a memory pool for requests
read but not yet answered). The listener keeps the same three, and one more
that Kafka does not need because it answers one request per connection at a
time: the bytes of answers a connection has not taken yet.

- A frame is received into a buffer that grows with what arrived (doubling
  from FIRST_CHUNK_BYTES, never past the announced size), so a client that
  announces a large frame and sends little holds little.
- The bytes of every frame being received or waiting for its answer count
  against one budget (`queued_max_request_bytes`) for all connections. A frame
  that cannot grow within it stops being read (its connection is muted) until
  answered requests free room; a frame that fits in FIRST_CHUNK_BYTES is
  always read, so small requests keep being served while large ones wait.
- A connection stops being read while its answers not yet written exceed
  `response_bytes_held` (a client that does not read its answers stops
  sending more work), and is closed once it has had no traffic for
  `connections_max_idle_ms` with nothing in flight (a half-sent frame counts
  as no traffic).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

FIRST_CHUNK_BYTES = 64 * 1024
# Kafka's socket.request.max.bytes: a larger announced frame closes the connection.
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104_857_600
# Kafka's connections.max.idle.ms.
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000
# Kafka's queued.max.request.bytes (there -1, unbounded, by default).
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 512 * 1024 * 1024
# Answers ready but not written, per connection, before it stops being read.
DEFAULT_RESPONSE_BYTES_HELD = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    response_bytes_held: int = DEFAULT_RESPONSE_BYTES_HELD

    def __post_init__(self) -> None:
        if self.socket_request_max_bytes < FIRST_CHUNK_BYTES:
            raise ValueError(f"socket.request.max.bytes must be at least {FIRST_CHUNK_BYTES}")
        if self.queued_max_request_bytes < self.socket_request_max_bytes:
            raise ValueError(
                "queued.max.request.bytes must be at least socket.request.max.bytes "
                f"({self.socket_request_max_bytes}), or the largest request could never be read"
            )
        if self.connections_max_idle_ms < 1:
            raise ValueError("connections.max.idle.ms must be at least 1")
        if self.response_bytes_held < 1:
            raise ValueError("the response bytes held per connection must be at least 1")


class RequestMemory:
    """The listener-wide budget of request bytes held (received, or being
    received, and not yet answered). Reservations that do not fit wait in
    arrival order and are granted as room is freed."""

    def __init__(self, limit: int) -> None:
        assert limit > 0
        self.limit = limit
        self.used = 0
        self._waiting: deque[tuple[int, Callable[[], None]]] = deque()

    def try_reserve(self, n: int) -> bool:
        assert n >= 0
        if self._waiting or self.used + n > self.limit:
            return False
        self.used += n
        return True

    def force(self, n: int) -> None:
        """Holds `n` bytes whatever the budget says (a first chunk, always read)."""
        assert n >= 0
        self.used += n

    def wait(self, n: int, granted: Callable[[], None]) -> None:
        """Calls `granted` once `n` bytes are reserved for it."""
        self._waiting.append((n, granted))
        self._grant()

    def cancel(self, granted: Callable[[], None]) -> None:
        self._waiting = deque((n, g) for n, g in self._waiting if g is not granted)
        self._grant()

    def release(self, n: int) -> None:
        assert 0 <= n <= self.used, (n, self.used)
        self.used -= n
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self.used + self._waiting[0][0] <= self.limit:
            n, granted = self._waiting.popleft()
            self.used += n
            granted()


__all__ = [
    "DEFAULT_CONNECTIONS_MAX_IDLE_MS",
    "DEFAULT_QUEUED_MAX_REQUEST_BYTES",
    "DEFAULT_RESPONSE_BYTES_HELD",
    "DEFAULT_SOCKET_REQUEST_MAX_BYTES",
    "FIRST_CHUNK_BYTES",
    "ListenerLimits",
    "RequestMemory",
]
