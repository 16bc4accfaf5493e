"""Test harness: real `linkd` daemons as subprocesses, and the `ccr-admin` CLI
(its main in this process, or as a process: run_cli).

    with Daemon("A", tmp_path / "a" / "data") as d:     # started and ready
        AdminClient(d.bootstrap).create_topic("t")
        d.kill9(); d.restart()

Pytest fixtures (register this module as a plugin, e.g. in the root conftest:
`pytest_plugins = ["tests.harness"]`):
    daemon          one running daemon in tmp_path (cluster id "test")
    daemon_factory  make(cluster_id="A", extra_args=(), start=True) -> Daemon;
                    every daemon made is stopped at teardown
    module_daemon_factory, module_daemon
                    the same, made once for a module's tests (for tests that
                    need a running cluster, not a fresh one)

Waits are bounded and poll with short waits (proc.wait(timeout=...) doubles as
the pause, so a daemon that dies is noticed at once); no bare sleeps.
The daemon's stdout/stderr go to files next to its data dir (data dir's parent)
for debugging; a start-up failure raises with the tail of stderr.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import grpc
import pytest

from chaos.admin_cli import cli_in_process

ROOT = Path(__file__).resolve().parent.parent

# A deadline, polled: a daemon that is ready sooner is used at once (a
# loaded machine took over 30 s to import and start one).
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
CLI_TIMEOUT_S = 60.0
REBALANCE_DELAY_OPTION = "--initial-rebalance-delay-ms"
RETENTION_CHECK_OPTION = "--log-retention-check-interval-ms"


# Test modules import this module both as `tests.harness` and, from the
# tests' own folder, as `harness`: both names are this one module, so there is
# one record of the ports it gave out (two would give two daemons one port).
_OTHER_NAME = "harness" if __name__ == "tests.harness" else "tests.harness"
sys.modules.setdefault(_OTHER_NAME, sys.modules[__name__])

_PORTS_GIVEN: set[int] = set()
# Each test worker takes its listeners' ports from a range of its own, below
# the kernel's ephemeral range (32768 and up here): a port the kernel handed
# out for bind(0) and that was closed again could be handed to a second
# worker at once, and its daemon then answered calls meant for the first
# worker's (seen once: a link to a remote found "this cluster itself").
_PORT_BASE = 20_000
_PORTS_PER_WORKER = 750
_WORKERS_MAX = 16


def _worker_ports() -> range:
    """This process's range: the xdist worker's ("gw3" -> the fourth)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    start = _PORT_BASE + (index % _WORKERS_MAX) * _PORTS_PER_WORKER
    return range(start, start + _PORTS_PER_WORKER)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, from this worker's own range
    (`_worker_ports`), and never one this process was given before (two
    listeners of one daemon ask one after the other). Another run of the
    suite on the same machine may use the same ranges: each port is checked
    by binding it, starting from a place of this process's own."""
    ports = _worker_ports()
    first = os.getpid() % len(ports)
    for i in range(len(ports)):
        port = ports[(first + i) % len(ports)]
        if port in _PORTS_GIVEN:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (another run, or a listener still closing)
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {ports} that this process was not given")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output file)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


class DaemonError(RuntimeError):
    """The daemon did not start, or stopped unexpectedly."""


class Daemon:
    """One `python -m linkd` subprocess."""

    def __init__(
        self,
        cluster_id: str,
        data_dir: Path | str,
        extra_args: Sequence[str] = (),
        port: int | None = None,
        rlimits: Mapping[int, tuple[int, int]] | None = None,
        listen_protocol: str = "PLAINTEXT",
        client_config: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        # The gRPC listener's security protocol (--listen PROTOCOL://...), and the
        # client settings (security.protocol, ssl.*, sasl.*) its readiness check uses.
        self.listen_protocol = listen_protocol
        self.client_config = dict(client_config or {})
        # resource.RLIMIT_* -> (soft, hard), set in the child before it runs linkd
        self.rlimits = dict(rlimits or {})
        self.data_dir = Path(data_dir)
        self.extra_args = list(extra_args)
        self.port = port if port is not None else free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_dir = self.data_dir.parent
        self.stdout_path = self.log_dir / f"linkd-{cluster_id}.stdout.log"
        self.stderr_path = self.log_dir / f"linkd-{cluster_id}.stderr.log"
        self._files: list[IO[bytes]] = []
        self.starts = 0
        # Extra environment of the daemon's next starts (a test-only hook).
        self.env: dict[str, str] = {}

    def _apply_rlimits(self) -> None:
        for which, limits in self.rlimits.items():
            resource.setrlimit(which, limits)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def listen(self) -> str:
        """The --listen value: bootstrap, with the protocol prefix unless PLAINTEXT."""
        if self.listen_protocol == "PLAINTEXT":
            return self.bootstrap
        return f"{self.listen_protocol}://{self.bootstrap}"

    def client(self, **extra: Any) -> dict[str, Any]:
        """A client config for this daemon: bootstrap.servers and its security settings."""
        return {"bootstrap.servers": self.bootstrap, **self.client_config, **extra}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        # Groups rebalance at once unless a test asks for Kafka's delay (the
        # daemon's default, 3 s): the suite's consumers would each wait it.
        delay = [] if REBALANCE_DELAY_OPTION in self.extra_args else [REBALANCE_DELAY_OPTION, "0"]
        # Retention checks every half second (Kafka's default is five minutes),
        # so a story that waits for retention waits a moment.
        if RETENTION_CHECK_OPTION not in self.extra_args:
            delay += [RETENTION_CHECK_OPTION, "500"]
        return [
            sys.executable,
            "-m",
            "linkd",
            "--cluster-id",
            self.cluster_id,
            "--listen",
            self.listen,
            "--data-dir",
            str(self.data_dir),
            *delay,
            *self.extra_args,
        ]

    def start(self) -> Daemon:
        if self.running:
            raise DaemonError(f"daemon {self.cluster_id} is already running (pid {self.pid})")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._close_files()
        out = self.stdout_path.open("ab")
        err = self.stderr_path.open("ab")
        self._files = [out, err]
        self.proc = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=str(ROOT),
            env={**_env(), **self.env},
            preexec_fn=self._apply_rlimits if self.rlimits else None,
        )
        self.starts += 1
        return self

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health_status(self, timeout_s: float = 1.0) -> str | None:
        """The Health RPC's status, or None when the daemon does not answer."""
        from admin.security import open_channel, security_of
        from ccr.v1 import cluster_pb2, cluster_pb2_grpc

        with open_channel(self.bootstrap, security_of(self.client_config)) as channel:
            stub = cluster_pb2_grpc.ClusterStub(channel)
            try:
                resp = stub.Health(cluster_pb2.HealthRequest(), timeout=timeout_s)
            except grpc.RpcError:
                return None
            return str(resp.status)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> Daemon:
        """Polls Health until "SERVING"; raises DaemonError on exit or timeout."""
        if self.proc is None:
            raise DaemonError("daemon not started")
        deadline = time.monotonic() + timeout_s
        last: str | None = None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise DaemonError(
                    f"daemon {self.cluster_id} exited with code {code} before it was ready; "
                    f"stderr:\n{_tail(self.stderr_path)}"
                )
            last = self.health_status(timeout_s=1.0)
            if last == "SERVING":
                return self
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill9()  # never left running behind a failed start
                raise DaemonError(
                    f"daemon {self.cluster_id} not SERVING within {timeout_s}s "
                    f"(last status {last!r}); stderr:\n{_tail(self.stderr_path)}"
                )
            try:
                self.proc.wait(timeout=min(0.05, left))  # the pause; returns early on exit
            except subprocess.TimeoutExpired:
                pass

    def kill9(self) -> int | None:
        """SIGKILL by pid and wait for the process to be gone."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._close_files()
        return code

    def pause(self) -> None:
        """SIGSTOP: the process stalls (sockets stay open, nothing answers)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait (bounded), then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.resume()  # a paused process would not act on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._close_files()
        return self.proc.returncode

    stop = terminate

    def ask_to_stop(self) -> None:
        """SIGTERM without waiting (terminate() then waits, bounded)."""
        if self.proc is not None and self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)

    def restart(self, kill: bool = False, wait: bool = True) -> Daemon:
        """Stops (SIGTERM, or SIGKILL with kill=True) and starts again on the same
        port and data dir."""
        if kill:
            self.kill9()
        else:
            self.terminate()
        self.start()
        if wait:
            self.wait_ready()
        return self

    def _close_files(self) -> None:
        for f in self._files:
            try:
                f.close()
            except OSError:
                pass
        self._files = []

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> Daemon:
        if not self.running:
            self.start()
        self.wait_ready()
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()

    def __repr__(self) -> str:
        return f"Daemon({self.cluster_id!r}, {self.bootstrap}, pid={self.pid})"


# Commands run_cli runs as a process, never in this one: the MM2 engine sets
# signal handlers and runs its flows (and their threads) until it stops.
PROCESS_COMMANDS = frozenset({"mirror"})
# The CLI's options that take a value before the command name.
_GLOBAL_VALUE_OPTIONS = frozenset({"--bootstrap", "--timeout", "--command-config"})


def _command_of(argv: Sequence[str]) -> str | None:
    """The command name in a ccr-admin argv (the first word that is not a
    global option or its value)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _GLOBAL_VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def run_cli(
    *args: str,
    input: str | bytes | None = None,
    bootstrap: str | None = None,
    timeout_s: float = CLI_TIMEOUT_S,
    env: dict[str, str] | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Runs `ccr-admin [--bootstrap B] ARGS...` with `input` on stdin (str or
    raw bytes); stdout/stderr come back decoded as UTF-8, with the exit code.

    The CLI's main runs in this process (cli_in_process), as the console
    script would run it, unless process=True, the command is one of
    PROCESS_COMMANDS, or the caller is not the main thread (the in-process run
    swaps sys.stdin/stdout/stderr and the environment, which are the
    process's); then it is `python -m admin.cli` (run_cli_process). A test of
    the console script itself (its start-up, a process's signals, its output
    file descriptors) asks for process=True. CCR_TEST_CLI_PROCESS=1 in the
    environment runs every call as a process (to compare the two)."""
    argv = (["--bootstrap", bootstrap] if bootstrap is not None else []) + list(args)
    if (
        process
        or os.environ.get("CCR_TEST_CLI_PROCESS") == "1"
        or _command_of(argv) in PROCESS_COMMANDS
        or threading.current_thread() is not threading.main_thread()
    ):
        return run_cli_process(
            *args, input=input, bootstrap=bootstrap, timeout_s=timeout_s, env=env
        )
    return cli_in_process(argv, input=input, env=env)


def run_cli_process(
    *args: str,
    input: str | bytes | None = None,
    bootstrap: str | None = None,
    timeout_s: float = CLI_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs `python -m admin.cli [--bootstrap B] ARGS...` as a process with
    `input` on stdin (str or raw bytes); stdout/stderr come back decoded as UTF-8."""
    cmd = [sys.executable, "-m", "admin.cli"]
    if bootstrap is not None:
        cmd += ["--bootstrap", bootstrap]
    cmd += list(args)
    full_env = _env()
    if env:
        full_env.update(env)
    raw = input.encode() if isinstance(input, str) else (input or b"")
    done = subprocess.run(
        cmd,
        input=raw,
        capture_output=True,
        timeout=timeout_s,
        cwd=str(ROOT),
        env=full_env,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", errors="replace"),
        done.stderr.decode("utf-8", errors="replace"),
    )


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """make(cluster_id="A", extra_args=(), start=True, data_dir=None) -> Daemon."""
    yield from _daemons(tmp_path)


@pytest.fixture(scope="module")
def module_daemon_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Daemon]]:
    """daemon_factory, once per module: its daemons serve every test of the
    module and stop after the last one."""
    yield from _daemons(tmp_path_factory.mktemp("daemons"))


@pytest.fixture(scope="module")
def module_daemon(module_daemon_factory: Callable[..., Daemon]) -> Daemon:
    """One running daemon (cluster id "test") shared by a module's tests."""
    return module_daemon_factory("test")


def _daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(
        cluster_id: str = "A",
        extra_args: Sequence[str] = (),
        start: bool = True,
        data_dir: Path | None = None,
        **kwargs: Any,
    ) -> Daemon:
        d = Daemon(
            cluster_id,
            data_dir if data_dir is not None else tmp_path / cluster_id / "data",
            extra_args=extra_args,
            **kwargs,
        )
        made.append(d)
        if start:
            d.start()
            d.wait_ready()
        return d

    yield make
    # SIGKILL: the test is over and nothing reads what a daemon does now. A
    # graceful stop (SIGTERM) takes a linked daemon its gRPC grace of up to
    # 2 s, a mirror link's engines several more, and its exit code was never
    # read here; the tests that stop daemons with SIGTERM check it
    # (tests/test_daemon_startup.py, tests/test_links_e2e.py with link calls
    # in flight, the security and wire tests).
    failed: list[str] = []
    for d in made:
        try:
            d.kill9()
        except Exception as exc:  # the others are still killed; then it is reported
            failed.append(f"{d!r}: {exc!r}")
    assert not failed, f"daemons not gone after SIGKILL: {failed}"


@pytest.fixture
def daemon(daemon_factory: Callable[..., Daemon]) -> Daemon:
    """One running daemon (cluster id "test") in tmp_path."""
    return daemon_factory("test")
