"""Remote control of a `FaultProxy`: a line-based JSON protocol, its server, client and command.

    python -m chaos.proxy --listen 127.0.0.1:P --target 127.0.0.1:Q --control 127.0.0.1:C [--seed N]

    ctl = ProxyControl("127.0.0.1", C)
    ctl.cut("both"); ctl.delay("a->b", 20); ctl.heal(); ctl.stats()

Rules
-----
- One command per line, a JSON object with an "op"; one answer per line,
  `{"ok": true, ...}` or `{"ok": false, "error": "..."}`. A connection may carry
  any number of commands, one at a time.
- A bad command (not UTF-8, not JSON, not an object, unknown op, unknown or
  missing field, wrong type, out of range) is answered with an error that names
  what was wrong; it never changes anything and never stops the proxy.
- Lines are at most `LINE_BYTES_MAX` long; a longer line is answered with an
  error and the connection is closed (the rest of the line cannot be framed).
- An idle control connection is closed after `IDLE_TIMEOUT_S`; the client's every
  call is bounded by its `timeout_s`.
- The process stops cleanly on SIGTERM, SIGINT or `{"op": "shutdown"}` (exit 0);
  bad arguments exit 2, a port that cannot be bound exits 3.

Operations (`direction` is "both", "a->b" or "b->a" and defaults to "both";
"a->b" is from the proxy's clients to its target)
----------------------------------------------------------------------------
    {"op": "cut", "direction": D}                  blackhole D
    {"op": "uncut", "direction": D}                lift the cut; tainted connections reset
    {"op": "delay", "direction": D, "ms": 20}      fixed delay per chunk (0 clears)
    {"op": "jitter", "direction": D, "ms": 5}      seeded extra delay in [0, ms) (0 clears)
    {"op": "flaky", "direction": D, "probability": 0.01}   reset per chunk (0 clears)
    {"op": "throttle", "direction": D, "bytes_per_s": 100000}   (null lifts it)
    {"op": "heal"}                                 clear every fault
    {"op": "faults"}    -> {"ok": true, "faults": {"a->b": {...}, "b->a": {...}}}
    {"op": "stats"}     -> {"ok": true, "stats": {...}}
    {"op": "ping"}      -> {"ok": true}
    {"op": "shutdown"}  -> {"ok": true}, then the process stops

Every fault-changing op answers with the faults now in force.

When ready, the command prints one JSON line on stdout:
`{"event": "ready", "listen": "127.0.0.1:P", "control": "127.0.0.1:C", "target": ..., "seed": N}`
(with the bound ports, so port 0 may be asked for).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from chaos.proxy import (
    BOTH,
    CLOSE_TIMEOUT_S,
    DELAY_MS_MAX,
    THROTTLE_BYTES_PER_S_MAX,
    THROTTLE_BYTES_PER_S_MIN,
    FaultProxy,
    ProxyError,
    check_loopback,
    check_number,
    check_port,
    directions_of,
)

log = logging.getLogger("chaos.proxy_control")

LINE_BYTES_MAX: Final = 64 * 1024
IDLE_TIMEOUT_S: Final = 300.0
CONTROL_CONNECTIONS_MAX: Final = 64
CLIENT_TIMEOUT_S: Final = 5.0

EXIT_OK: Final = 0
EXIT_USAGE: Final = 2
EXIT_STARTUP: Final = 3

Json = dict[str, Any]


class CommandError(ValueError):
    """A control command was refused; the message says why."""


class ProxyControlError(RuntimeError):
    """The proxy answered `{"ok": false}`; the message is its error."""


# ----------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class _Op:
    fields: frozenset[str]
    required: frozenset[str]
    run: Callable[[FaultProxy, Json], Json]


def _direction(command: Json) -> str:
    spec = command.get("direction", BOTH)
    directions_of(spec)  # raises naming the field
    return str(spec)


def _faults_json(proxy: FaultProxy) -> Json:
    return {"faults": {d.value: f.to_json() for d, f in proxy.faults().items()}}


def _cut(proxy: FaultProxy, command: Json) -> Json:
    proxy.cut(_direction(command))
    return _faults_json(proxy)


def _uncut(proxy: FaultProxy, command: Json) -> Json:
    proxy.uncut(_direction(command))
    return _faults_json(proxy)


def _delay(proxy: FaultProxy, command: Json) -> Json:
    direction = _direction(command)
    proxy.delay(direction, check_number(command["ms"], "ms", 0.0, DELAY_MS_MAX))
    return _faults_json(proxy)


def _jitter(proxy: FaultProxy, command: Json) -> Json:
    direction = _direction(command)
    proxy.jitter(direction, check_number(command["ms"], "ms", 0.0, DELAY_MS_MAX))
    return _faults_json(proxy)


def _flaky(proxy: FaultProxy, command: Json) -> Json:
    direction = _direction(command)
    proxy.flaky(direction, check_number(command["probability"], "probability", 0.0, 1.0))
    return _faults_json(proxy)


def _throttle(proxy: FaultProxy, command: Json) -> Json:
    direction = _direction(command)
    raw = command["bytes_per_s"]
    rate = (
        None
        if raw is None
        else check_number(raw, "bytes_per_s", THROTTLE_BYTES_PER_S_MIN, THROTTLE_BYTES_PER_S_MAX)
    )
    proxy.throttle(direction, rate)
    return _faults_json(proxy)


def _heal(proxy: FaultProxy, command: Json) -> Json:
    proxy.heal()
    return _faults_json(proxy)


def _faults(proxy: FaultProxy, command: Json) -> Json:
    return _faults_json(proxy)


def _stats(proxy: FaultProxy, command: Json) -> Json:
    return {"stats": proxy.stats().to_json()}


def _nothing(proxy: FaultProxy, command: Json) -> Json:
    return {}


def _op(run: Callable[[FaultProxy, Json], Json], *fields: str, required: Sequence[str] = ()) -> _Op:
    return _Op(frozenset(fields), frozenset(required), run)


OPS: Final[dict[str, _Op]] = {
    "cut": _op(_cut, "direction"),
    "uncut": _op(_uncut, "direction"),
    "delay": _op(_delay, "direction", "ms", required=("ms",)),
    "jitter": _op(_jitter, "direction", "ms", required=("ms",)),
    "flaky": _op(_flaky, "direction", "probability", required=("probability",)),
    "throttle": _op(_throttle, "direction", "bytes_per_s", required=("bytes_per_s",)),
    "heal": _op(_heal),
    "faults": _op(_faults),
    "stats": _op(_stats),
    "ping": _op(_nothing),
    "shutdown": _op(_nothing),
}


def parse_command(line: bytes) -> Json:
    """The command object in one line, or a CommandError saying what is wrong with it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"a command must be UTF-8: {exc}") from None
    try:
        command = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"a command must be JSON: {exc}") from None
    if not isinstance(command, dict):
        raise CommandError(f"a command must be a JSON object; got {type(command).__name__}")
    op = command.get("op")
    if op is None:
        raise CommandError("missing field 'op'")
    if not isinstance(op, str) or op not in OPS:
        raise CommandError(f"unknown op {op!r}; expected one of: {', '.join(OPS)}")
    spec = OPS[op]
    extra = sorted(set(command) - spec.fields - {"op"})
    if extra:
        allowed = ", ".join(sorted(spec.fields)) or "none"
        raise CommandError(f"unexpected field {extra[0]!r} for op {op!r}; allowed: {allowed}")
    missing = sorted(spec.required - set(command))
    if missing:
        raise CommandError(f"missing field {missing[0]!r} for op {op!r}")
    return command


def handle_line(proxy: FaultProxy, line: bytes) -> Json:
    """Parses and runs one command against `proxy`; returns the answer. Never raises."""
    try:
        command = parse_command(line)
        answer = OPS[command["op"]].run(proxy, command)
    except ValueError as exc:  # CommandError, and range errors from the proxy's checks
        return {"ok": False, "error": str(exc)}
    except Exception as exc:  # a bug: answer it, keep serving
        log.exception("control command failed: %r", line[:200])
        return {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"}
    return {"ok": True, **answer}


# ------------------------------------------------------------------- the server


class ControlServer:
    """Serves the control protocol for one proxy, in the proxy's loop."""

    def __init__(self, proxy: FaultProxy, host: str = "127.0.0.1", port: int = 0) -> None:
        self.proxy = proxy
        self.host = check_loopback(host, "control host")
        self._port = check_port(port, "control port")
        self.shutdown_requested = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise ProxyError("the control server is not started")
        return self._port

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._on_client, self.host, self._port, limit=LINE_BYTES_MAX
        )
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._clients):
            writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._clients) >= CONTROL_CONNECTIONS_MAX:
            await self._answer(writer, {"ok": False, "error": "too many control connections"})
            writer.close()
            return
        self._clients.add(writer)
        try:
            await self._serve(reader, writer)
        except OSError as exc:
            log.debug("control connection: %s", exc)
        finally:
            self._clients.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
            except TimeoutError:
                return
            except ValueError:  # over the stream's limit: the line cannot be framed
                await self._answer(
                    writer,
                    {"ok": False, "error": f"line longer than {LINE_BYTES_MAX} bytes"},
                )
                return
            if not line:
                return
            if not line.strip():
                continue
            answer = handle_line(self.proxy, line)
            await self._answer(writer, answer)
            if answer["ok"] and json.loads(line)["op"] == "shutdown":
                self.shutdown_requested.set()
                return

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, answer: Json) -> None:
        writer.write(json.dumps(answer).encode() + b"\n")
        await asyncio.wait_for(writer.drain(), CLIENT_TIMEOUT_S)


# ------------------------------------------------------------------- the client


class ProxyControl:
    """A client of the control protocol. Each call is one short connection, bounded by
    `timeout_s`; an `{"ok": false}` answer raises ProxyControlError."""

    def __init__(self, host: str, port: int, *, timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.host = check_loopback(host, "control host")
        self.port = check_port(port, "control port")
        self.timeout_s = timeout_s

    def send_line(self, line: bytes) -> Json:
        """Sends one raw line (newline added) and returns the answer, `ok` or not."""
        with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as sock:
            sock.sendall(line.rstrip(b"\n") + b"\n")
            received = bytearray()
            while not received.endswith(b"\n"):
                if len(received) > LINE_BYTES_MAX * 16:
                    raise ProxyControlError("answer too long")
                data = sock.recv(65536)
                if not data:
                    raise ProxyControlError(
                        f"control connection closed before an answer (got {bytes(received)!r})"
                    )
                received += data
        answer = json.loads(received)
        if not isinstance(answer, dict):
            raise ProxyControlError(f"answer is not a JSON object: {answer!r}")
        return answer

    def request(self, command: Mapping[str, Any]) -> Json:
        answer = self.send_line(json.dumps(dict(command)).encode())
        if not answer.get("ok"):
            raise ProxyControlError(str(answer.get("error")))
        return answer

    def cut(self, direction: str = BOTH) -> Json:
        return self.request({"op": "cut", "direction": direction})

    def uncut(self, direction: str = BOTH) -> Json:
        return self.request({"op": "uncut", "direction": direction})

    def delay(self, direction: str, ms: float) -> Json:
        return self.request({"op": "delay", "direction": direction, "ms": ms})

    def jitter(self, direction: str, ms: float) -> Json:
        return self.request({"op": "jitter", "direction": direction, "ms": ms})

    def flaky(self, direction: str, probability: float) -> Json:
        return self.request({"op": "flaky", "direction": direction, "probability": probability})

    def throttle(self, direction: str, bytes_per_s: float | None) -> Json:
        return self.request({"op": "throttle", "direction": direction, "bytes_per_s": bytes_per_s})

    def heal(self) -> Json:
        return self.request({"op": "heal"})

    def faults(self) -> Json:
        faults: Json = self.request({"op": "faults"})["faults"]
        return faults

    def stats(self) -> Json:
        stats: Json = self.request({"op": "stats"})["stats"]
        return stats

    def ping(self) -> None:
        self.request({"op": "ping"})

    def shutdown(self) -> None:
        self.request({"op": "shutdown"})


# ------------------------------------------------------------------ the command


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        return check_loopback(host.strip("[]"), "host"), check_port(int(port), "port")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.proxy",
        description="A fault-injecting TCP proxy with a line-based JSON control port.",
    )
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT (port 0: any)")
    parser.add_argument("--target", type=_address, required=True, help="HOST:PORT to forward to")
    parser.add_argument("--control", type=_address, required=True, help="HOST:PORT (port 0: any)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser


async def _run(args: argparse.Namespace) -> int:
    (listen_host, listen_port), (target_host, target_port) = args.listen, args.target
    control_host, control_port = args.control
    proxy = FaultProxy(
        target_host, target_port, listen_host=listen_host, listen_port=listen_port, seed=args.seed
    )
    control = ControlServer(proxy, control_host, control_port)
    try:
        await proxy.start()
        await control.start()
    except OSError as exc:
        print(f"chaos.proxy: cannot bind: {exc}", file=sys.stderr)
        await control.close()
        await proxy.close()
        return EXIT_STARTUP
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, control.shutdown_requested.set)
    ready = {
        "event": "ready",
        "listen": f"{listen_host}:{proxy.port}",
        "control": f"{control_host}:{control.port}",
        "target": f"{target_host}:{target_port}",
        "seed": args.seed,
    }
    print(json.dumps(ready), flush=True)
    # Unbounded by design: the process lives until told to stop (signal or op).
    await control.shutdown_requested.wait()
    await control.close()
    await proxy.close()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    return asyncio.run(_run(args))
