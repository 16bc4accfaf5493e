"""`ccr-sim sweep --master spark://...` on a real standalone Spark cluster.

The test starts a Spark master and one worker (2 cores, 3 GB) from the pyspark
wheel's own `bin/spark-class`, all on 127.0.0.1 with free ports and a scratch
work directory, runs a tiny sweep through the `sweep` subcommand's handler with
`--master spark://127.0.0.1:PORT`, checks the Parquet, and stops both JVMs by
process group (each is started in its own session). Every wait polls with a
deadline.

It starts two extra JVMs and takes 30-90 s; it runs in the suite (CI has
Java 17) and is skipped, saying so, only on a machine without `java`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("java") is None,
    reason="starts a standalone Spark master and worker: needs Java 17 (`java` on PATH)",
)

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    log_file: IO[bytes]

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}:\n{self.text()}")
            time.sleep(POLL_S)
        raise AssertionError(f"{self.name}: no {needle!r} within {timeout_s}s:\n{self.text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT_S)
        self.log_file.close()


def start(name: str, args: list[str], tmp: Path, env: dict[str, str]) -> Daemon:
    log = tmp / f"{name}.log"
    log_file = log.open("wb")
    proc = subprocess.Popen(
        args,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: stopped with its children
    )
    return Daemon(name, proc, log, log_file)


@dataclass
class Cluster:
    master_url: str
    work_dir: Path
    daemons: list[Daemon]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pyspark = pytest.importorskip("pyspark", reason="needs PySpark (dev extra) and Java 17")
    spark_home = Path(pyspark.__file__).resolve().parent
    spark_class = str(spark_home / "bin" / "spark-class")
    tmp = tmp_path_factory.mktemp("spark-standalone")
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_WORKER_DIR=str(tmp / "work"),
        SPARK_LOG_DIR=str(tmp / "logs"),
        PYSPARK_PYTHON=sys.executable,
    )
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons: list[Daemon] = []
    try:
        master = start(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(master_ui)],
            tmp, env,
        )
        daemons.append(master)
        master.wait_for("I have been elected leader")
        worker = start(
            "worker",
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "2", "--memory", "3g", "--webui-port", str(worker_ui),
             "--work-dir", str(tmp / "work"), url],
            tmp, env,
        )
        daemons.append(worker)
        worker.wait_for("Successfully registered with master")
        yield Cluster(url, tmp / "work", daemons)
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


def test_sweep_on_standalone_cluster(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim import sweep, sweep_store

    sweep_file = tmp_path / "tiny.toml"
    sweep_file.write_text(
        'name = "tiny"\nscenarios = ["failover-writable"]\nseeds = { start = 1, count = 3 }\n'
        '[params]\nlink_latency_ms = [2, 30]\n'
    )  # two cells of three seeds: the cluster's rows, in order, against a serial sweep
    out = tmp_path / "out"
    p = argparse.ArgumentParser(prog="ccr-sim")
    sweep.add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(
        ["sweep", str(sweep_file), "--master", cluster.master_url, "--out", str(out),
         "--no-progress"]
    )
    code: Any = args.func(args)
    text = capsys.readouterr().out
    runs = sweep_store.read_runs(out)
    assert f"6 runs on {cluster.master_url}" in text
    assert len(runs) == 6 and list(runs["run_index"]) == list(range(6))
    assert runs["error"].isna().all(), runs["error"].dropna().tolist()[:2]
    assert code == (1 if (runs["violation_count"] > 0).any() else 0), text
    agg = pd.read_parquet(out / "aggregate")
    assert agg["runs"].sum() == 6
    # The runs went to the cluster: the worker launched an executor for the app.
    assert any(d.name.startswith("app-") for d in cluster.work_dir.iterdir())
    # Same rows as a serial sweep of the file, in this process.
    serial = sweep.run_sweep(sweep_file, None, None, serial=True, progress=False)
    assert list(serial.runs["trace_digest"]) == list(runs["trace_digest"])
