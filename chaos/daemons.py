"""Real `linkd` daemons as subprocesses, for chaos runs.

Every daemon listens on 127.0.0.1 only (gRPC and the Kafka protocol). The
runner ends only the processes it started, by PID: `kill9` and `stop` act on
the `subprocess.Popen` it holds, and a paused daemon is continued first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from admin import AdminClient
from chaos import security
from chaos.security import client_config

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
ROOT = Path(__file__).resolve().parent.parent


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, never one this process gave
    out before: the kernel may hand a port just closed out again, so a
    daemon's two listeners (asked one after the other) could get the same one."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise DaemonError("no free port on 127.0.0.1 that this process did not give out already")


class DaemonError(RuntimeError):
    pass


class Daemon:
    """One `python -m linkd` subprocess with a fixed data dir and ports."""

    def __init__(self, cluster_id: str, workdir: Path, extra_args: Sequence[str] = ()) -> None:
        self.cluster_id = cluster_id
        self.data_dir = workdir / cluster_id / "data"
        self.log_path = workdir / cluster_id / "linkd.log"
        self.port = free_port()
        self.kafka_port = free_port()
        self.extra_args = list(extra_args)
        # Added to the environment of the next start (the crash tests' hooks,
        # linkd/test_hooks.py); cleared by the caller before a restart.
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.lost = False  # killed for good
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise DaemonError(f"{self.cluster_id} was never started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "linkd",
            "--cluster-id", self.cluster_id,
            "--listen", security.current().listener(self.bootstrap),
            "--kafka-listen", security.current().listener(self.kafka_bootstrap),
            "--data-dir", str(self.data_dir),
            "--log-level", "warning",
            # As the simulator's twin of the run (no delay), not Kafka's 3 s default.
            "--initial-rebalance-delay-ms", "0",
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> None:
        if self.running:
            raise DaemonError(f"{self.cluster_id} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is not None:
            self._log.close()
        self._log = self.log_path.open("ab")
        env = dict(os.environ)
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
        env.update(self.env)
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            cwd=str(ROOT),
            env=env,
        )
        self.paused = False

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        admin = AdminClient({**client_config(self.bootstrap), "request.timeout.ms": 1000})
        try:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    raise DaemonError(
                        f"{self.cluster_id} exited at start ({self.log_path}){self._log_tail()}"
                    )
                try:
                    if admin.health(timeout=1.0).status == "SERVING":
                        return
                except Exception:
                    pass
                # Doubles as the pause between polls; notices an exit at once.
                try:
                    self.proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            admin.close()
        raise DaemonError(f"{self.cluster_id} not ready after {timeout_s} s ({self.log_path})")

    def _log_tail(self, lines: int = 5) -> str:
        """The last lines of the daemon's log, for an error that must say why."""
        if self._log is not None:
            self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return "".join(f"\n    {line}" for line in tail)

    def wait_ready_or_rebind(self, attempts: int = 3, timeout_s: float = READY_TIMEOUT_S) -> None:
        """At setup only (nothing points at its ports yet): a daemon that
        exited because another process took one of its free ports in the
        meantime starts again on new ones, at most `attempts` times."""
        for attempt in range(attempts):
            try:
                self.wait_ready(timeout_s)
                return
            except DaemonError:
                if attempt + 1 == attempts or self.running or not self._port_taken():
                    raise
            self.port, self.kafka_port = free_port(), free_port()
            self.start()

    def _port_taken(self) -> bool:
        if self._log is not None:
            self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return False
        lowered = text.lower()
        return "already in use" in lowered or "failed to bind" in lowered

    def pause(self) -> None:
        if self.running and self.proc is not None and not self.paused:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.proc is not None and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()  # SIGKILL to this PID
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.paused = False

    def stop(self) -> None:
        """SIGTERM (after SIGCONT if paused), then SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                os.kill(self.proc.pid, signal.SIGCONT)
                self.paused = False
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self._log is not None:
            self._log.close()
            self._log = None
