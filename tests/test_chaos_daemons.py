"""chaos/daemons.py: a daemon whose free port was taken before it bound it
starts again on new ports at setup (a real linkd process)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from chaos.daemons import Daemon


def test_a_daemon_whose_port_was_taken_meanwhile_starts_on_new_ports(tmp_path: Path) -> None:
    d = Daemon("A", tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        d.port = taken.getsockname()[1]  # another process got there first
        d.start()
        d.wait_ready_or_rebind()
        assert d.running and d.port != taken.getsockname()[1]
        assert "already in use" in d.log_path.read_text().lower()
    finally:
        d.stop()
        taken.close()


def test_sigterm_stops_a_swarm__not_only_its_current_run(tmp_path: Path) -> None:
    """ccr-chaos runs: SIGTERM during the first run ends the whole swarm (exit
    130, the daemons it started ended), never going on to the next seed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(root))
    args = ["runs", "--count", "3", "--phase-s", "4", "--no-twin", "--no-operators"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.cli", *args],
        cwd=str(root),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    daemons: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not daemons:
        out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        daemons = [int(p) for p in out.stdout.split()]
        time.sleep(0.2)
    assert daemons, "the first run never started its daemons"
    # Into the run: wait (bounded) until the producers' records are on disk,
    # so the workloads and the nemesis are under way when the signal comes.
    data_dirs = [
        Path(arg)
        for pid in daemons
        for arg in Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        if arg.endswith("/data")
    ]
    while time.monotonic() < deadline and not any(
        seg.stat().st_size > 4096 for d in data_dirs for seg in d.glob("topics/*/*.log")
    ):
        time.sleep(0.2)
    # Then past the nemesis phase (the run's own --phase-s): the old handler
    # swallowed the signal in the liveness and judging steps that follow.
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    try:
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "stopped by SIGTERM" in err and "seed 2:" not in err
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
            f"/proc/{pid}/status"
        ).read_text().lower(), f"daemon {pid} still runs"


def test_runs_save_failed__writes_each_anomalous_runs_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace
    from typing import Any

    from chaos import cli

    def fake_run(args: Any, quiet: bool = False) -> Any:
        bad = args.seed == 2
        return SimpleNamespace(
            seed=args.seed,
            operations=10,
            counts={"info": 0},
            anomalies=[{"invariant": "silent_loss", "detail": "x"}] if bad else [],
            converged=True,
            duration_s=1.0,
            twin=None,
        )

    monkeypatch.setattr(cli, "run_one", fake_run)
    monkeypatch.setattr(cli, "print_anomalies", lambda result: None)
    monkeypatch.setattr(cli, "_summary", lambda result: {"seed": result.seed, "events": ["e"]})
    code = cli.cmd_runs(3, 1, 20.0, False, False, False, str(tmp_path / "failed"))
    assert code == cli.EXIT_ANOMALY
    assert sorted(p.name for p in (tmp_path / "failed").iterdir()) == ["seed-2.json"]
