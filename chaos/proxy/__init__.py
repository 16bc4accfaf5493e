"""A fault-injecting TCP proxy between two daemons: cut, delay, jitter, flaky, throttle, heal.

    with FaultProxy("127.0.0.1", target_port, seed=7) as proxy:   # own thread and loop
        dial(proxy.address)          # instead of the target's address
        proxy.cut("both")            # a partition: bytes vanish, nothing closes
        proxy.heal()                 # faults gone; connections that saw the cut are reset

`python -m chaos.proxy --listen 127.0.0.1:P --target 127.0.0.1:Q --control 127.0.0.1:C`
runs one in its own process, commanded over a line-based JSON protocol
(`chaos/proxy_control.py`, which also holds the `ProxyControl` client).

Rules
-----
- Traffic stays on loopback: the listen, target and control hosts must be loopback
  addresses (`127.0.0.0/8`, `::1` or `localhost`); anything else is refused at
  construction.
- "a->b" is client to target (the dialling side to the dialled side), "b->a" the
  way back. Every fault is set per direction ("both" sets the two), takes effect
  at once on existing and new connections, and can be cleared at any time.
- A fault is plain data with its unit last in the name (`DirectionFaults`).
- Every random choice comes from a seeded `random.Random`, one per connection
  and direction (seeded with `f"{seed}:{connection_id}:{direction}"`), so the
  draws of one connection do not depend on how other connections interleave.
  The same seed and the same sequence of chunks give the same draws. (How the
  kernel splits a byte stream into chunks is not under our control.)
- Every wait on time is bounded (connect, stop, thread hand-over); waits on
  sockets last at most as long as the proxy, whose `close()` ends them all.
  The number of connections and the bytes buffered per connection are bounded.

Theory of operation
-------------------
Each accepted connection dials the target and runs two pumps, one per
direction. A pump is a reader task and a writer task joined by a bounded queue
(the queue is the proxy's "window": when it is full the reader stops reading
and TCP back-pressure reaches the sender).

- The reader takes a chunk from the source socket and consults the faults of
  its direction *now*. Under a cut the chunk is dropped (counted in
  `bytes_dropped`). Under flaky it draws; a hit resets the connection. Otherwise
  it stamps the chunk with a release time, `now + delay_ms + uniform(0,
  jitter_ms)`, never earlier than the previous chunk's, so order within a
  connection is preserved, and queues it.
- The writer waits until the release time, then, if the direction is
  throttled, takes tokens from the direction's bucket (shared by all
  connections, as a link's bandwidth is), re-checks for a cut (a chunk delayed
  into a partition is dropped, too) and writes.

Cuts are blackholes, not closes: a cut direction swallows bytes *and* a FIN or a
reset from its source, so the peers see silence, exactly as in a network
partition, and only their own timeouts and keepalives tell them. A connection
accepted while both directions are cut is *held*: accepted, never dialled
through, its bytes dropped (a partitioned peer's SYN would go unanswered; we
accept so the client's connect call returns and its own request timeouts, not
the kernel's SYN retries, decide how long it waits).

A cut taints every connection open while it is in force. Lifting the cut (by
`uncut` or `heal`) resets the tainted connections: the bytes they lost cannot be
replayed (the proxy acknowledged them at the TCP level), so their streams are
broken, like TCP sessions that died in a long partition. Clients see a reset and
reconnect cleanly. Connections that were not open during a cut survive a heal
(delays, jitter and throttles never lose bytes).

Loss inside a TCP stream cannot be modelled by dropping bytes (the stream would
be corrupt, not lossy), so flaky is modelled as connection resets: with
probability `reset_probability` per chunk the connection is reset, both sides,
with an RST (SO_LINGER 0), and the chunk is not forwarded.

Throttle is a token bucket of depth zero per direction: every byte waits for its
token (tokens accrue at `bytes_per_s`; a writer that takes more than are there
runs into debt and sleeps it off), so N bytes take at least N / rate seconds
after the throttle is set. Chunks are cut into slices of about 1/20 s worth of
bytes so the stream flows smoothly rather than in bursts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import functools
import ipaddress
import logging
import math
import random
import socket
import struct
import threading
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field, replace
from types import TracebackType
from typing import Any, Final, TypeVar

log = logging.getLogger("chaos.proxy")

T = TypeVar("T")

CHUNK_BYTES: Final = 64 * 1024
"""Largest read from a socket in one go."""
QUEUE_CHUNKS_MAX: Final = 256
"""Chunks in flight per connection and direction (at most 16 MiB); then back-pressure."""
CONNECTIONS_MAX: Final = 1024
"""Connections beyond this are reset at once (counted in `connections_refused`)."""
CONNECT_TIMEOUT_S: Final = 5.0
CLOSE_TIMEOUT_S: Final = 5.0
THREAD_TIMEOUT_S: Final = 10.0
"""Bound on a start, stop, or a fault change handed to the proxy's thread."""
DELAY_MS_MAX: Final = 600_000.0
"""Ten minutes: longer than any test, short enough that a typo cannot wedge a run."""
THROTTLE_BYTES_PER_S_MIN: Final = 1.0
THROTTLE_BYTES_PER_S_MAX: Final = 1e12
THROTTLE_SLICE_S: Final = 0.05


class Direction(enum.StrEnum):
    """Which way bytes flow: a is the dialling client, b the target."""

    A_TO_B = "a->b"
    B_TO_A = "b->a"


BOTH: Final = "both"
DIRECTION_SPECS: Final = (BOTH, Direction.A_TO_B.value, Direction.B_TO_A.value)


def _reverse(d: Direction) -> Direction:
    return Direction.B_TO_A if d is Direction.A_TO_B else Direction.A_TO_B


class ProxyError(RuntimeError):
    """The proxy could not start or stop within its bound."""


def directions_of(spec: str, name: str = "direction") -> tuple[Direction, ...]:
    """The directions a spec names: "both", "a->b" or "b->a"."""
    if spec == BOTH:
        return (Direction.A_TO_B, Direction.B_TO_A)
    if isinstance(spec, str):
        for d in Direction:
            if spec == d.value:
                return (d,)
    raise ValueError(f"{name} must be one of {', '.join(DIRECTION_SPECS)}; got {spec!r}")


def check_number(value: object, name: str, low: float, high: float) -> float:
    """`value` as a float in [low, high], or a ValueError naming `name`.

    The one range check behind the Python API and the control protocol, so both
    refuse the same values with the same words (only the field name differs).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}]; got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not low <= number <= high:
        raise ValueError(f"{name} must be a number in [{low:g}, {high:g}]; got {value!r}")
    return number


def check_loopback(host: str, name: str) -> str:
    """`host` if it is a loopback address, else a ValueError: traffic stays on loopback."""
    if host == "localhost":
        return host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{name} must be a loopback address (127.0.0.1, ::1); got {host!r}")
    return host


def check_port(port: object, name: str) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"{name} must be a port number in [0, 65535]; got {port!r}")
    return port


@dataclass(frozen=True)
class DirectionFaults:
    """The faults in force in one direction. The default is a healthy link."""

    cut: bool = False
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    reset_probability: float = 0.0
    throttle_bytes_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ProxyStats:
    """Counters since start. Bytes are keyed by direction ("a->b", "b->a")."""

    bytes_forwarded: dict[str, int]
    bytes_dropped: dict[str, int]
    connections_accepted: int
    connections_active: int
    connections_reset: int
    """Reset by the proxy: flaky, lifted cut, a peer's error passed on."""
    connections_failed: int
    """The target could not be dialled; the client was reset."""
    connections_refused: int
    """Over `CONNECTIONS_MAX`."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _TokenBucket:
    """Depth-zero token bucket: tokens accrue at `rate`, never above zero; debt is slept off."""

    def __init__(self, rate_bytes_per_s: float, now_s: float) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self.tokens = 0.0
        self.updated_s = now_s

    def take(self, count: int, now_s: float) -> float:
        """Takes `count` tokens; returns how long to wait before sending them."""
        self.tokens = min(0.0, self.tokens + (now_s - self.updated_s) * self.rate_bytes_per_s)
        self.updated_s = now_s
        self.tokens -= count
        return -self.tokens / self.rate_bytes_per_s

    def slice_bytes(self) -> int:
        return max(1, min(CHUNK_BYTES, int(self.rate_bytes_per_s * THROTTLE_SLICE_S)))


@dataclass(eq=False)
class _Connection:
    connection_id: int
    client: asyncio.StreamWriter
    rngs: dict[Direction, random.Random]
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    tainted: set[Direction] = field(default_factory=set)
    closed: bool = False


@dataclass(frozen=True)
class _Chunk:
    release_s: float
    data: bytes
    """Empty: the source sent FIN."""


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    """Closes at once with an RST (SO_LINGER 0) rather than a FIN: a reset, not a goodbye."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Listens on a loopback port, forwards each connection to the target, injects faults.

    Use it inside a running loop (`await start()`, `await close()`), or in a
    thread of its own (`start_in_thread()`, `stop()`, or as a context manager).
    The fault methods and `stats()` may be called from any thread.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        seed: int = 0,
    ) -> None:
        self.target_host = check_loopback(target_host, "target host")
        self.target_port = check_port(target_port, "target port")
        self.listen_host = check_loopback(listen_host, "listen host")
        self._listen_port = check_port(listen_port, "listen port")
        self.seed = seed
        self._faults: dict[Direction, DirectionFaults] = {d: DirectionFaults() for d in Direction}
        self._buckets: dict[Direction, _TokenBucket | None] = {d: None for d in Direction}
        self._connections: dict[int, _Connection] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self._next_connection_id = 0
        self._forwarded = dict.fromkeys(Direction, 0)
        self._dropped = dict.fromkeys(Direction, 0)
        self._accepted = 0
        self._reset = 0
        self._failed = 0
        self._refused = 0
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        """The bound port (known once started)."""
        if self._server is None:
            raise ProxyError("the proxy is not started")
        return self._listen_port

    @property
    def address(self) -> str:
        """`host:port` to dial instead of the target."""
        return f"{self.listen_host}:{self.port}"

    async def start(self) -> None:
        """Binds and starts accepting, in the running loop."""
        if self._server is not None:
            raise ProxyError("the proxy is already started")
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._server = await asyncio.start_server(
            self._on_client, self.listen_host, self._listen_port, limit=CHUNK_BYTES
        )
        self._listen_port = int(self._server.sockets[0].getsockname()[1])
        log.info(
            "proxy listening on %s:%d -> %s:%d (seed %d)",
            self.listen_host,
            self._listen_port,
            self.target_host,
            self.target_port,
            self.seed,
        )

    async def close(self) -> None:
        """Stops accepting and ends every connection (with a reset). Bounded."""
        server = self._server
        if server is None:
            return
        server.close()
        for connection in list(self._connections.values()):
            self._end(connection, count=False)
        handlers = [t for t in self._handlers if t is not asyncio.current_task()]
        if handlers:
            _, pending = await asyncio.wait(handlers, timeout=CLOSE_TIMEOUT_S)
            for task in pending:
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), CLOSE_TIMEOUT_S)

    def start_in_thread(self) -> FaultProxy:
        """Starts the proxy on a new event loop in a daemon thread; returns once it listens."""
        if self._thread is not None:
            raise ProxyError("the proxy is already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                try:
                    loop.run_until_complete(self.start())
                except BaseException as exc:  # handed to the starting thread
                    errors.append(exc)
                    return
                finally:
                    ready.set()
                try:
                    loop.run_forever()
                finally:
                    loop.run_until_complete(self.close())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="chaos-fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(THREAD_TIMEOUT_S):
            raise ProxyError(f"the proxy did not start within {THREAD_TIMEOUT_S:g} s")
        if errors:
            self._thread.join(THREAD_TIMEOUT_S)
            self._thread = None
            raise errors[0]
        return self

    def stop(self) -> None:
        """Stops a proxy started by `start_in_thread()`. Bounded."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(THREAD_TIMEOUT_S + CLOSE_TIMEOUT_S)
        if thread.is_alive():
            raise ProxyError("the proxy's thread did not stop in time")
        self._thread = None

    def __enter__(self) -> FaultProxy:
        return self.start_in_thread()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -------------------------------------------------------------------- faults

    def cut(self, direction: str = BOTH) -> None:
        """Blackholes `direction`: bytes (and FIN, RST) from its source vanish."""
        dirs = directions_of(direction)

        def apply() -> None:
            for d in dirs:
                self._faults[d] = replace(self._faults[d], cut=True)
                for connection in self._connections.values():
                    connection.tainted.add(d)

        self._call(apply)

    def uncut(self, direction: str = BOTH) -> None:
        """Lifts the cut of `direction`; connections it tainted are reset."""
        dirs = directions_of(direction)

        def apply() -> None:
            for d in dirs:
                self._faults[d] = replace(self._faults[d], cut=False)
            self._reset_tainted(set(dirs))

        self._call(apply)

    def delay(self, direction: str, delay_ms: float) -> None:
        """Holds every chunk `delay_ms` before forwarding it (0 clears)."""
        dirs = directions_of(direction)
        value = check_number(delay_ms, "delay_ms", 0.0, DELAY_MS_MAX)
        self._set(dirs, lambda f: replace(f, delay_ms=value))

    def jitter(self, direction: str, jitter_ms: float) -> None:
        """Adds a seeded uniform [0, jitter_ms) to each chunk's delay; order is kept (0 clears)."""
        dirs = directions_of(direction)
        value = check_number(jitter_ms, "jitter_ms", 0.0, DELAY_MS_MAX)
        self._set(dirs, lambda f: replace(f, jitter_ms=value))

    def flaky(self, direction: str, reset_probability: float) -> None:
        """Resets the connection with this probability per chunk (0 clears)."""
        dirs = directions_of(direction)
        value = check_number(reset_probability, "reset_probability", 0.0, 1.0)
        self._set(dirs, lambda f: replace(f, reset_probability=value))

    def throttle(self, direction: str, bytes_per_s: float | None) -> None:
        """Caps the bandwidth of `direction`, all connections together (None lifts it)."""
        dirs = directions_of(direction)
        value = (
            None
            if bytes_per_s is None
            else check_number(
                bytes_per_s, "bytes_per_s", THROTTLE_BYTES_PER_S_MIN, THROTTLE_BYTES_PER_S_MAX
            )
        )

        def apply() -> None:
            now_s = self._now_s()
            for d in dirs:
                self._faults[d] = replace(self._faults[d], throttle_bytes_per_s=value)
                self._buckets[d] = None if value is None else _TokenBucket(value, now_s)

        self._call(apply)

    def heal(self) -> None:
        """Clears every fault; connections tainted by a cut are reset."""

        def apply() -> None:
            self._faults = {d: DirectionFaults() for d in Direction}
            self._buckets = {d: None for d in Direction}
            self._reset_tainted(set(Direction))

        self._call(apply)

    def faults(self) -> dict[Direction, DirectionFaults]:
        return self._call(lambda: dict(self._faults))

    def stats(self) -> ProxyStats:
        def read() -> ProxyStats:
            return ProxyStats(
                bytes_forwarded={d.value: n for d, n in self._forwarded.items()},
                bytes_dropped={d.value: n for d, n in self._dropped.items()},
                connections_accepted=self._accepted,
                connections_active=len(self._connections),
                connections_reset=self._reset,
                connections_failed=self._failed,
                connections_refused=self._refused,
            )

        return self._call(read)

    # ------------------------------------------------------------------ internals

    def _call(self, fn: Callable[[], T]) -> T:
        """Runs `fn` on the proxy's loop (state is only touched there); bounded."""
        loop = self._loop
        if (
            loop is None
            or loop.is_closed()
            or not loop.is_running()
            or threading.get_ident() == self._loop_thread_id
        ):
            return fn()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(timeout=THREAD_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise ProxyError(
                f"the proxy's loop did not answer within {THREAD_TIMEOUT_S:g} s"
            ) from None

    def _set(
        self, dirs: tuple[Direction, ...], change: Callable[[DirectionFaults], DirectionFaults]
    ) -> None:
        def apply() -> None:
            for d in dirs:
                self._faults[d] = change(self._faults[d])

        self._call(apply)

    def _now_s(self) -> float:
        loop = self._loop
        return loop.time() if loop is not None and not loop.is_closed() else 0.0

    def _reset_tainted(self, lifted: set[Direction]) -> None:
        for connection in list(self._connections.values()):
            if connection.tainted & lifted:
                self._end(connection, count=True)

    def _end(self, connection: _Connection, *, count: bool) -> None:
        """Resets both sides of a connection and stops its pumps. Idempotent."""
        if connection.closed:
            return
        connection.closed = True
        if count:
            self._reset += 1
        _abort_with_rst(connection.client)
        if connection.upstream is not None:
            _abort_with_rst(connection.upstream)
        current = asyncio.current_task()
        for task in connection.tasks:
            if task is not current:
                task.cancel()
        log.debug("connection %d reset", connection.connection_id)

    def _rngs(self, connection_id: int) -> dict[Direction, random.Random]:
        return {d: random.Random(f"{self.seed}:{connection_id}:{d.value}") for d in Direction}

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # always, for a start_server callback
            self._handlers.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            if task is not None:
                self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= CONNECTIONS_MAX:
            self._refused += 1
            _abort_with_rst(writer)
            return
        connection_id = self._next_connection_id
        self._next_connection_id += 1
        connection = _Connection(connection_id, writer, self._rngs(connection_id))
        connection.tainted = {d for d in Direction if self._faults[d].cut}
        self._accepted += 1
        self._connections[connection_id] = connection
        try:
            if connection.tainted == set(Direction):
                # Held: a partitioned peer is never dialled through.
                held = asyncio.create_task(self._hold(connection, reader))
                connection.tasks.append(held)
                await asyncio.gather(held, return_exceptions=True)
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(self.target_host, self.target_port, limit=CHUNK_BYTES),
                    CONNECT_TIMEOUT_S,
                )
            except (OSError, TimeoutError) as exc:
                log.debug("connection %d: target unreachable: %s", connection_id, exc)
                self._failed += 1
                connection.closed = True
                _abort_with_rst(writer)
                return
            if connection.closed:  # reset (or proxy closed) while dialling
                _abort_with_rst(up_writer)
                return
            connection.upstream = up_writer
            for d, source, target in (
                (Direction.A_TO_B, reader, up_writer),
                (Direction.B_TO_A, up_reader, writer),
            ):
                queue: asyncio.Queue[_Chunk] = asyncio.Queue(QUEUE_CHUNKS_MAX)
                # A read error is news from the source, travelling in `d`; a write
                # error is news from the target, travelling the other way.
                # Factories, not coroutines: a task cancelled before its first step
                # would leave a created coroutine never awaited.
                pumps = (
                    (d, functools.partial(self._read, connection, d, source, queue)),
                    (_reverse(d), functools.partial(self._write, connection, d, target, queue)),
                )
                for news, pump in pumps:
                    connection.tasks.append(
                        asyncio.create_task(self._guard(connection, news, pump))
                    )
            await asyncio.gather(*connection.tasks, return_exceptions=True)
            if not connection.closed:  # both directions ended with FIN: a clean close
                connection.closed = True
                for w in (writer, up_writer):
                    w.close()
                for w in (writer, up_writer):
                    with contextlib.suppress(OSError, TimeoutError):
                        await asyncio.wait_for(w.wait_closed(), CLOSE_TIMEOUT_S)
        finally:
            del self._connections[connection_id]

    async def _guard(
        self,
        connection: _Connection,
        news: Direction,
        pump: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Runs one pump. A socket error resets the connection (the peer's reset is
        passed on), unless the direction the news would travel is cut: then silence."""
        try:
            await pump()
        except OSError as exc:
            if self._faults[news].cut:
                connection.tainted.add(news)
                return
            log.debug("connection %d %s: %s", connection.connection_id, news.value, exc)
            self._end(connection, count=True)

    async def _hold(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(CHUNK_BYTES):
                self._dropped[Direction.A_TO_B] += len(data)

    async def _read(
        self,
        connection: _Connection,
        d: Direction,
        source: asyncio.StreamReader,
        queue: asyncio.Queue[_Chunk],
    ) -> None:
        loop = asyncio.get_running_loop()
        rng = connection.rngs[d]
        last_release_s = 0.0
        while True:
            data = await source.read(CHUNK_BYTES)
            faults = self._faults[d]
            if faults.cut:
                connection.tainted.add(d)
                if not data:
                    return  # the FIN vanishes into the partition
                self._dropped[d] += len(data)
                continue
            if data and faults.reset_probability > 0.0:
                if rng.random() < faults.reset_probability:
                    log.debug("connection %d %s: flaky reset", connection.connection_id, d.value)
                    self._dropped[d] += len(data)
                    self._end(connection, count=True)
                    return
            extra_ms = rng.uniform(0.0, faults.jitter_ms) if faults.jitter_ms > 0.0 else 0.0
            release_s = max(loop.time() + (faults.delay_ms + extra_ms) / 1000.0, last_release_s)
            last_release_s = release_s
            await queue.put(_Chunk(release_s, data))
            if not data:
                return

    async def _write(
        self,
        connection: _Connection,
        d: Direction,
        target: asyncio.StreamWriter,
        queue: asyncio.Queue[_Chunk],
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            chunk = await queue.get()
            wait_s = chunk.release_s - loop.time()
            if wait_s > 0.0:
                await asyncio.sleep(wait_s)
            if not chunk.data:
                if self._faults[d].cut:
                    connection.tainted.add(d)
                    return
                if target.can_write_eof():
                    target.write_eof()
                return
            view = memoryview(chunk.data)
            while view:
                bucket = self._buckets[d]
                size = len(view) if bucket is None else bucket.slice_bytes()
                piece, view = view[:size], view[size:]
                if bucket is not None:
                    wait_s = bucket.take(len(piece), loop.time())
                    if wait_s > 0.0:
                        await asyncio.sleep(wait_s)
                if self._faults[d].cut:  # delayed or throttled into a partition
                    connection.tainted.add(d)
                    self._dropped[d] += len(piece) + len(view)
                    break
                target.write(piece)
                await target.drain()
                self._forwarded[d] += len(piece)
