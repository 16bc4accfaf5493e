"""The Spark side of `ccr-sim sweep`: a session, and the runs fanned out with mapInPandas.

Rules:
- This is the only module of the project that imports pyspark (lazily, inside
  functions, so importing it costs nothing until a session is made).
- Many runs per task: a Python task costs tens of milliseconds of overhead, so
  the runs are cut into contiguous partitions (`PARTITIONS_PER_CORE` x the
  default parallelism, at most one per run), not one task per run. Eight per
  core balance runs of uneven length: with three, the last partition of a
  sweep whose runs grow along the grid kept one core busy alone at the end
  while the other waited.
- Tasks are idempotent: a task computes its slice of runs with the pure,
  deterministic run function and returns rows; it writes no files and has no
  side effect, so Spark may retry or speculate it freely. The driver collects
  the rows (one small row per run) and writes the Parquet itself.
- The input is `spark.range(n)` cut into contiguous ranges (deterministic, no
  shuffle); each task looks its run indices up in a broadcast of the run list,
  so a task ships only the indices, not the specs.
- Sessions made here are quiet (log level WARN, Spark's console progress off,
  no web UI) and, for a local or loopback master, bound to 127.0.0.1. Python
  workers use this interpreter (`PYSPARK_PYTHON`, unless already set) and find
  the project on `PYTHONPATH` (`spark.executorEnv.PYTHONPATH`).
- Every wait is bounded: the progress poller stops when the job returns (it
  polls every `POLL_S` and joins with a timeout).

Theory of operation: `create_session` builds the session; `execute_runs` sets
a job group, starts `_ProgressPoller` (a daemon thread reading
`statusTracker()` for the group's tasks and updating the text bar), runs
`range(n).mapInPandas(task).toPandas()` and returns the raw rows
(`sim.sweep.RAW_COLUMNS`), checked to hold each run exactly once.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from sim.runner import CHECK_LAG_VERDICTS_ENV
from sim.sweep_runs import RAW_FIELDS, Progress, Run, RunFn, execute_run, raw_frame

if TYPE_CHECKING:
    import pandas as pd

PARTITIONS_PER_CORE = 8
POLL_S = 0.25
APP_NAME = "ccr-sim-sweep"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.shutdown.name = org.apache.spark.util.ShutdownHookManager
logger.shutdown.level = error
"""
_job_groups = itertools.count(1)


def raw_schema() -> str:
    """The Spark DDL schema of the raw rows (from sim.sweep.RAW_FIELDS)."""
    return ", ".join(f"{name} {ddl}" for name, ddl in RAW_FIELDS)


def is_loopback_master(master: str) -> bool:
    if master.startswith("local"):
        return True
    if master.startswith("spark://"):
        hosts = master[len("spark://") :].split(",")
        return all(urlparse(f"spark://{h}").hostname in LOOPBACK_HOSTS for h in hosts)
    return False


def _log4j_file() -> str:
    """A quiet log4j2 configuration for the driver JVM (a temp file, removed at exit)."""
    d = tempfile.mkdtemp(prefix="ccr-sim-spark-")
    atexit.register(shutil.rmtree, d, True)
    path = Path(d) / "log4j2.properties"
    path.write_text(_LOG4J2)
    return path.as_uri()


def session_conf(master: str, driver_host: str | None = None) -> dict[str, str]:
    """The Spark configuration `create_session` uses (exposed for tests and docs)."""
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    pythonpath = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    conf = {
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": python,
        "spark.executorEnv.PYSPARK_PYTHON": python,
        "spark.executorEnv.PYTHONPATH": pythonpath,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.unix.domain.socket.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
    }
    check = os.environ.get(CHECK_LAG_VERDICTS_ENV)  # (`runner.simulate`)
    if check is not None:
        conf[f"spark.executorEnv.{CHECK_LAG_VERDICTS_ENV}"] = check
    if driver_host is None and is_loopback_master(master):
        driver_host = "127.0.0.1"
    if driver_host is not None:
        conf["spark.driver.host"] = driver_host
        if driver_host in LOOPBACK_HOSTS:
            conf["spark.driver.bindAddress"] = driver_host
    return conf


def create_session(
    master: str,
    *,
    driver_host: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A quiet SparkSession on `master` (see the module doc); the caller stops it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if is_loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = session_conf(master, driver_host)
    settings["spark.driver.extraJavaOptions"] = (
        f"-Dlog4j2.configurationFile={_log4j_file()} "
        + settings.get("spark.driver.extraJavaOptions", "")
    ).strip()
    settings.update(conf or {})
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def master_of(spark: Any) -> str:
    return str(spark.sparkContext.master)


def default_partitions(spark: Any, run_count: int) -> int:
    parallelism = int(spark.sparkContext.defaultParallelism)
    return max(1, min(run_count, PARTITIONS_PER_CORE * parallelism))


def _task(
    runs_bc: Any, run_fn: RunFn
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The mapInPandas function: run indices in, raw rows out (pure, so retry-safe)."""

    def task(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        runs: Sequence[Run] = runs_bc.value
        for batch in batches:
            yield raw_frame([execute_run(runs[int(i)], run_fn) for i in batch["id"]])

    return task


class _ProgressPoller:
    """Reads the job group's task counts from the status tracker into a Progress."""

    def __init__(self, sc: Any, group: str, partitions: int, runs: int, bar: Progress) -> None:
        self._tracker = sc.statusTracker()
        self._group = group
        self._partitions = partitions
        self._runs = runs
        self._bar = bar
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweep-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _poll(self) -> None:
        done = active = 0
        for job_id in self._tracker.getJobIdsForGroup(self._group):
            job = self._tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = self._tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    active += stage.numActiveTasks
        done = min(done, self._partitions)
        runs_done = done * self._runs // self._partitions
        self._bar.update(runs_done, f"runs, tasks {done}/{self._partitions} ({active} running)")

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._poll()
            except Exception:  # the bar is cosmetic: a failed poll is skipped
                continue

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)


def execute_runs(
    spark: Any,
    runs: Sequence[Run],
    run_fn: RunFn,
    *,
    partitions: int | None = None,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, int]:
    """Run every run on Spark; return (raw rows sorted by run_index, partitions used)."""
    n = len(runs)
    if n == 0:
        return raw_frame([]), 0
    sc = spark.sparkContext
    parts = default_partitions(spark, n) if partitions is None else max(1, min(partitions, n))
    runs_bc = sc.broadcast(list(runs))
    group = f"{APP_NAME}-{os.getpid()}-{next(_job_groups)}"
    previous_group = sc.getLocalProperty("spark.jobGroup.id")
    sc.setJobGroup(group, f"ccr-sim sweep: {n} runs in {parts} partitions")
    poller = _ProgressPoller(sc, group, parts, n, progress) if progress is not None else None
    try:
        if poller is not None:
            poller.start()
        frame = (
            spark.range(0, n, 1, numPartitions=parts)
            .mapInPandas(_task(runs_bc, run_fn), raw_schema())
            .toPandas()
        )
    finally:
        if poller is not None:
            poller.stop()
        sc.setLocalProperty("spark.jobGroup.id", previous_group)
        runs_bc.unpersist()
    if progress is not None:
        progress.update(n, f"runs, tasks {parts}/{parts}")
    frame = frame.sort_values("run_index", kind="stable").reset_index(drop=True)
    if list(frame["run_index"]) != list(range(n)):
        raise RuntimeError(f"Spark returned {len(frame)} rows for {n} runs (expected each once)")
    return raw_frame(frame), parts
