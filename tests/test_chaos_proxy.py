"""The fault proxy (chaos/proxy.py) and its remote control (chaos/proxy_control.py).

Every test runs real sockets on 127.0.0.1 against a small echo server started
here. Timing assertions are lower bounds only (a fault must cost at least what
it says); the machine is shared, so nothing asserts an upper wall-clock limit.
Waits poll with a bound (`wait_until`); a test that expects silence first waits
for the proxy to count the bytes it dropped, then checks nothing came through.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from chaos.proxy import Direction, FaultProxy
from chaos.proxy_control import (
    LINE_BYTES_MAX,
    ProxyControl,
    ProxyControlError,
    handle_line,
)

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 10.0
"""Bound on every wait for something that should happen."""
PROCESS_TIMEOUT_S = 15.0


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.01)


class EchoServer:
    """Echoes every byte back; counts connections and bytes; optional greeting on accept."""

    def __init__(self, greeting: bytes = b"") -> None:
        self.greeting = greeting
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.connections = 0
        self.bytes_received = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.05)
            if not ready:
                continue
            conn, _ = self._listener.accept()
            with self._lock:
                self.connections += 1
                self._sockets.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            if self.greeting:
                conn.sendall(self.greeting)
            while not self._stopping.is_set():
                ready, _, _ = select.select([conn], [], [], 0.05)
                if not ready:
                    continue
                data = conn.recv(65536)
                if not data:
                    break
                with self._lock:
                    self.bytes_received += len(data)
                conn.sendall(data)
        except OSError:
            pass  # a reset from the proxy is part of the tests
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            for conn in self._sockets:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for thread in self._threads:
            thread.join(WAIT_S)
        self._listener.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo.port, seed=11) as running:
        yield running


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)


def recv_exactly(sock: socket.socket, count: int, timeout_s: float = WAIT_S) -> bytes:
    deadline = time.monotonic() + timeout_s
    received = bytearray()
    while len(received) < count:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            raise AssertionError(f"received {len(received)} of {count} bytes in {timeout_s:g} s")
        sock.settimeout(remaining_s)
        data = sock.recv(min(1 << 20, count - len(received)))
        if not data:
            raise AssertionError(f"connection closed after {len(received)} of {count} bytes")
        received += data
    return bytes(received)


def roundtrip(sock: socket.socket, payload: bytes) -> bytes:
    """Sends from a thread while receiving here, so a large payload cannot deadlock."""
    sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
    sender.start()
    try:
        return recv_exactly(sock, len(payload))
    finally:
        sender.join(WAIT_S)


def pending_bytes(sock: socket.socket) -> bytes | None:
    """Whatever is readable right now (b"" means closed), or None if nothing is."""
    sock.setblocking(False)
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return None
    finally:
        sock.settimeout(WAIT_S)


def expect_reset(sock: socket.socket) -> None:
    """The proxy reset the connection: recv fails with ECONNRESET (or sees the end)."""
    sock.settimeout(WAIT_S)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    assert data == b"", f"expected a reset, got {data!r}"


# ------------------------------------------------------------------ pass-through


def test_pass_through__large_random_payload__arrives_intact(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    payload = random.Random(20260).randbytes(8 * 1024 * 1024)
    with connect(proxy.port) as sock:
        assert roundtrip(sock, payload) == payload
    stats = proxy.stats()
    assert stats.bytes_forwarded == {"a->b": len(payload), "b->a": len(payload)}
    assert stats.bytes_dropped == {"a->b": 0, "b->a": 0}
    assert stats.connections_accepted == 1
    assert echo.bytes_received == len(payload)


def test_pass_through__inside_a_running_loop__start_and_close(echo: EchoServer) -> None:
    async def story() -> bytes:
        proxy = FaultProxy("127.0.0.1", echo.port)
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"in the loop")
            answer = await asyncio.wait_for(reader.readexactly(11), WAIT_S)
            writer.close()
            return answer
        finally:
            await asyncio.wait_for(proxy.close(), WAIT_S)

    assert asyncio.run(story()) == b"in the loop"


def test_half_close__fin_passes_both_ways__a_clean_close_not_a_reset(
    proxy: FaultProxy,
) -> None:
    with connect(proxy.port) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(16) == b""  # the echo server's FIN came back through
    wait_until(lambda: proxy.stats().connections_active == 0, "the connection to end")
    assert proxy.stats().connections_reset == 0


def test_target_down__client_is_reset__counted_as_failed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        closed_port = placeholder.getsockname()[1]
    with FaultProxy("127.0.0.1", closed_port) as proxy:
        try:
            with connect(proxy.port) as sock:
                expect_reset(sock)
        except ConnectionResetError:
            pass  # the reset may even beat the connect call's own return
        wait_until(lambda: proxy.stats().connections_failed == 1, "the failure to count")
        assert proxy.stats().connections_accepted == 1


# -------------------------------------------------------------------------- cuts


def test_cut_both__existing_goes_silent__new_is_held__heal_resets_them__new_works(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    before = connect(proxy.port)
    assert roundtrip(before, b"ping") == b"ping"

    proxy.cut("both")
    before.sendall(b"lost")
    wait_until(lambda: proxy.stats().bytes_dropped["a->b"] >= 4, "the cut to drop 4 bytes")
    during = connect(proxy.port)  # accepted, then held
    during.sendall(b"held")
    wait_until(lambda: proxy.stats().bytes_dropped["a->b"] >= 8, "the held bytes to drop")
    assert echo.bytes_received == 4  # only the ping: nothing crossed the cut
    assert echo.connections == 1  # the held connection was never dialled through
    assert pending_bytes(before) is None  # silence, not a close: a blackhole
    assert pending_bytes(during) is None
    assert proxy.stats().bytes_forwarded == {"a->b": 4, "b->a": 4}

    proxy.heal()
    expect_reset(before)
    expect_reset(during)
    before.close()
    during.close()
    with connect(proxy.port) as after:
        assert roundtrip(after, b"back") == b"back"
    stats = proxy.stats()
    assert stats.connections_reset == 2
    assert stats.connections_accepted == 3


def test_cut_a_to_b__only_target_to_client_passes() -> None:
    greeter = EchoServer(greeting=b"hello\n")
    try:
        with FaultProxy("127.0.0.1", greeter.port, seed=3) as one_way:
            one_way.cut("a->b")
            with connect(one_way.port) as sock:
                assert recv_exactly(sock, 6) == b"hello\n"  # b->a passes
                sock.sendall(b"data")
                wait_until(lambda: one_way.stats().bytes_dropped["a->b"] >= 4, "a->b drop")
                assert greeter.bytes_received == 0
                assert pending_bytes(sock) is None
                stats = one_way.stats()
                assert stats.bytes_forwarded == {"a->b": 0, "b->a": 6}
    finally:
        greeter.stop()


def test_cut_b_to_a__only_client_to_target_passes(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.cut("b->a")
    with connect(proxy.port) as sock:
        sock.sendall(b"ping")
        wait_until(lambda: echo.bytes_received >= 4, "a->b bytes to reach the target")
        wait_until(lambda: proxy.stats().bytes_dropped["b->a"] >= 4, "the echo to be dropped")
        assert pending_bytes(sock) is None
        assert proxy.stats().bytes_forwarded == {"a->b": 4, "b->a": 0}

        proxy.uncut("b->a")  # lifting the cut resets the connections it tainted
        expect_reset(sock)
    with connect(proxy.port) as sock:
        assert roundtrip(sock, b"whole") == b"whole"


# ------------------------------------------------------------------ delay, jitter


def test_delay__round_trip_costs_at_least_both_delays__heal_keeps_the_connection(
    proxy: FaultProxy,
) -> None:
    with connect(proxy.port) as sock:
        assert roundtrip(sock, b"warm") == b"warm"
        proxy.delay("a->b", 80)
        proxy.delay("b->a", 40)
        for i in range(3):
            started = time.monotonic()
            assert roundtrip(sock, b"%d" % i) == b"%d" % i
            assert time.monotonic() - started >= 0.120 - 0.002
        proxy.heal()  # no cut: the connection lost nothing and survives
        assert roundtrip(sock, b"still here") == b"still here"
    assert proxy.stats().connections_reset == 0


def test_jitter__many_small_writes__arrive_in_order(proxy: FaultProxy) -> None:
    proxy.delay("both", 2)
    proxy.jitter("both", 15)
    messages = [b"%05d;" % i for i in range(200)]
    with connect(proxy.port) as sock:

        def send_each() -> None:
            for message in messages:
                sock.sendall(message)

        sender = threading.Thread(target=send_each, daemon=True)
        sender.start()
        received = recv_exactly(sock, sum(len(m) for m in messages))
        sender.join(WAIT_S)
    assert received == b"".join(messages)


# ------------------------------------------------------------------------- flaky


def test_flaky_probability_one__first_chunk_resets__cleared_works(
    proxy: FaultProxy, echo: EchoServer
) -> None:
    proxy.flaky("a->b", 1.0)
    with connect(proxy.port) as sock:
        sock.sendall(b"doomed")
        expect_reset(sock)
    stats = proxy.stats()
    assert stats.connections_reset == 1
    assert stats.bytes_forwarded["a->b"] == 0
    assert echo.bytes_received == 0

    proxy.flaky("a->b", 0.0)
    with connect(proxy.port) as sock:
        assert roundtrip(sock, b"fine") == b"fine"


# ---------------------------------------------------------------------- throttle


def test_throttle__n_bytes_take_at_least_n_over_rate(proxy: FaultProxy) -> None:
    rate_bytes_per_s = 100_000
    payload = random.Random(5).randbytes(50_000)
    proxy.throttle("a->b", rate_bytes_per_s)
    with connect(proxy.port) as sock:
        started = time.monotonic()
        assert roundtrip(sock, payload) == payload
        elapsed_s = time.monotonic() - started
    assert elapsed_s >= len(payload) / rate_bytes_per_s - 0.002
    assert proxy.faults()[Direction.A_TO_B].throttle_bytes_per_s == rate_bytes_per_s


# ----------------------------------------------------------- argument checking


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda p: p.cut("sideways"), "direction must be one of both, a->b, b->a"),
        (lambda p: p.delay("a->b", -1), "delay_ms must be a number in [0, 600000]"),
        (lambda p: p.jitter("both", float("nan")), "jitter_ms must be a number"),
        (lambda p: p.flaky("both", 1.5), "reset_probability must be a number in [0, 1]"),
        (lambda p: p.throttle("b->a", 0), "bytes_per_s must be a number in [1, 1e+12]"),
    ],
)
def test_fault_methods__bad_arguments__refused_by_name(
    change: Callable[[FaultProxy], None], words: str
) -> None:
    with pytest.raises(ValueError) as info:
        change(FaultProxy("127.0.0.1", 9))
    assert words in str(info.value)


def test_non_loopback_hosts__refused() -> None:
    with pytest.raises(ValueError, match="target host must be a loopback"):
        FaultProxy("10.1.2.3", 80)
    with pytest.raises(ValueError, match="listen host must be a loopback"):
        FaultProxy("127.0.0.1", 80, listen_host="0.0.0.0")


# ----------------------------------------------------------- control protocol


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"\xff\xfe", "must be UTF-8"),
        (b"{not json", "must be JSON"),
        (b"[1, 2]", "must be a JSON object; got list"),
        (b'{"direction": "both"}', "missing field 'op'"),
        (b'{"op": "explode"}', "unknown op 'explode'; expected one of: cut, uncut"),
        (b'{"op": 7}', "unknown op 7"),
        (b'{"op": "cut", "direction": "up"}', "direction must be one of both, a->b, b->a"),
        (b'{"op": "cut", "direction": 1}', "direction must be one of"),
        (b'{"op": "cut", "dirction": "both"}', "unexpected field 'dirction' for op 'cut'"),
        (b'{"op": "delay", "direction": "a->b"}', "missing field 'ms' for op 'delay'"),
        (b'{"op": "delay", "ms": -5}', "ms must be a number in [0, 600000]; got -5"),
        (b'{"op": "delay", "ms": "20"}', "ms must be a number"),
        (b'{"op": "jitter", "ms": true}', "ms must be a number"),
        (b'{"op": "flaky", "probability": 2}', "probability must be a number in [0, 1]"),
        (b'{"op": "throttle", "bytes_per_s": 0}', "bytes_per_s must be a number in [1,"),
        (b'{"op": "heal", "now": true}', "unexpected field 'now' for op 'heal'; allowed: none"),
    ],
)
def test_control__bad_command__answered_with_an_error_naming_it(line: bytes, words: str) -> None:
    proxy = FaultProxy("127.0.0.1", 9)
    answer = handle_line(proxy, line)
    assert answer["ok"] is False
    assert words in answer["error"]
    assert all(not f.cut and f.delay_ms == 0 for f in proxy.faults().values())


def test_control__good_commands__change_the_faults() -> None:
    proxy = FaultProxy("127.0.0.1", 9)
    answer = handle_line(proxy, b'{"op": "delay", "direction": "a->b", "ms": 20}')
    assert answer["ok"] is True
    assert answer["faults"]["a->b"]["delay_ms"] == 20.0
    assert answer["faults"]["b->a"]["delay_ms"] == 0.0
    answer = handle_line(proxy, b'{"op": "throttle", "bytes_per_s": null}')
    assert answer["faults"]["a->b"]["throttle_bytes_per_s"] is None
    answer = handle_line(proxy, b'{"op": "cut"}')
    assert answer["faults"]["a->b"]["cut"] and answer["faults"]["b->a"]["cut"]
    answer = handle_line(proxy, b'{"op": "heal"}')
    assert answer["faults"]["a->b"] == {
        "cut": False,
        "delay_ms": 0.0,
        "jitter_ms": 0.0,
        "reset_probability": 0.0,
        "throttle_bytes_per_s": None,
    }


# ------------------------------------------------------- the proxy as a process


class ProxyProcess:
    """`python -m chaos.proxy` with ports chosen by the kernel (read from its ready line)."""

    def __init__(self, target_port: int, seed: int = 5) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "chaos.proxy",
                "--listen",
                "127.0.0.1:0",
                "--target",
                f"127.0.0.1:{target_port}",
                "--control",
                "127.0.0.1:0",
                "--seed",
                str(seed),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        ready = self._ready_line()
        self.listen_port = int(ready["listen"].rsplit(":", 1)[1])
        control_port = int(ready["control"].rsplit(":", 1)[1])
        self.control = ProxyControl("127.0.0.1", control_port)

    def _ready_line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], PROCESS_TIMEOUT_S)
        if not readable:
            self.kill()
            raise AssertionError("the proxy printed no ready line in time")
        line = self.proc.stdout.readline()
        if not line:
            _, stderr = self.proc.communicate(timeout=PROCESS_TIMEOUT_S)
            raise AssertionError(f"the proxy exited: {stderr.decode(errors='replace')}")
        ready: dict[str, Any] = json.loads(line)
        assert ready["event"] == "ready"
        return ready

    def wait(self) -> int:
        return self.proc.wait(timeout=PROCESS_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=PROCESS_TIMEOUT_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def proxy_process(echo: EchoServer) -> Iterator[ProxyProcess]:
    process = ProxyProcess(echo.port)
    yield process
    process.kill()


def test_remote_control__delay_cut_heal_stats_shutdown(
    proxy_process: ProxyProcess, echo: EchoServer
) -> None:
    ctl = proxy_process.control
    ctl.ping()
    with connect(proxy_process.listen_port) as sock:
        assert roundtrip(sock, b"plain") == b"plain"
        faults = ctl.delay("a->b", 60)["faults"]
        assert faults["a->b"]["delay_ms"] == 60.0
        started = time.monotonic()
        assert roundtrip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.060 - 0.002

        ctl.cut("both")
        sock.sendall(b"lost")
        wait_until(lambda: ctl.stats()["bytes_dropped"]["a->b"] >= 4, "the cut to drop bytes")
        assert echo.bytes_received == len(b"plainslow")
        ctl.heal()
        expect_reset(sock)
    assert ctl.faults()["b->a"]["cut"] is False
    with connect(proxy_process.listen_port) as sock:
        assert roundtrip(sock, b"again") == b"again"
    stats = ctl.stats()
    assert stats["connections_accepted"] == 2
    assert stats["connections_reset"] == 1
    assert stats["bytes_forwarded"]["a->b"] == len(b"plainslowagain")

    ctl.shutdown()
    assert proxy_process.wait() == 0


def test_remote_control__bad_commands__errors_and_the_proxy_keeps_serving(
    proxy_process: ProxyProcess,
) -> None:
    ctl = proxy_process.control
    answer = ctl.send_line(b'{"op": "delay", "direction": "sideways", "ms": 1}')
    assert answer == {
        "ok": False,
        "error": "direction must be one of both, a->b, b->a; got 'sideways'",
    }
    assert "must be JSON" in ctl.send_line(b"cut both")["error"]
    with pytest.raises(ProxyControlError, match="probability must be a number in"):
        ctl.flaky("a->b", 7)
    too_long = ctl.send_line(b'{"op": "ping", "pad": "' + b"x" * LINE_BYTES_MAX + b'"}')
    assert too_long["ok"] is False
    assert f"line longer than {LINE_BYTES_MAX} bytes" in too_long["error"]
    ctl.ping()
    with connect(proxy_process.listen_port) as sock:
        assert roundtrip(sock, b"alive") == b"alive"
    assert proxy_process.proc.poll() is None


def test_proxy_process__sigterm__stops_cleanly(echo: EchoServer) -> None:
    process = ProxyProcess(echo.port)
    try:
        with connect(process.listen_port) as sock:
            assert roundtrip(sock, b"hi") == b"hi"
            process.proc.send_signal(signal.SIGTERM)
            assert process.wait() == 0
    finally:
        process.kill()


def test_proxy_process__non_loopback_target__exits_2() -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "chaos.proxy", "--listen", "127.0.0.1:0"),
            *("--target", "192.0.2.1:80", "--control", "127.0.0.1:0"),
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=PROCESS_TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 2
    assert b"must be a loopback address" in result.stderr


# ---------------------------------------------------------------------- gRPC


def test_grpc_through_the_proxy__works__deadline_during_cut__works_after_heal() -> None:
    echo_handler = grpc.method_handlers_generic_handler(
        "chaos.test.Echo",
        {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)},
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((echo_handler,))
    server_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    options = [
        ("grpc.enable_http_proxy", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 500),
    ]
    try:
        with (
            FaultProxy("127.0.0.1", server_port, seed=9) as proxy,
            grpc.insecure_channel(proxy.address, options=options) as channel,
        ):
            call = channel.unary_unary(
                "/chaos.test.Echo/Echo", request_serializer=None, response_deserializer=None
            )
            assert call(b"before", timeout=WAIT_S, wait_for_ready=True) == b"before"

            proxy.cut("both")
            started = time.monotonic()
            with pytest.raises(grpc.RpcError) as info:
                call(b"during", timeout=0.5)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started < WAIT_S  # the deadline, not a hang

            proxy.heal()
            # The heal reset the channel's connection; an RPC that races the reset
            # fails UNAVAILABLE (a real client retries it). The next ones reconnect.
            answers: list[bytes] = []

            def answered() -> bool:
                try:
                    answers.append(call(b"after", timeout=WAIT_S, wait_for_ready=True))
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                return bool(answers)

            wait_until(answered, "an RPC to succeed after the heal")
            assert answers == [b"after"]
            assert proxy.stats().connections_reset >= 1
    finally:
        server.stop(grace=None).wait(WAIT_S)
