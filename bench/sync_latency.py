"""Produce latency and throughput over ASYNC and SYNC links, side by side.

    python bench/sync_latency.py [--records N] [--burst N] [--delays-ms 0,1,5,20]
                                 [--fsync never|always] [--proxy-in-process]

Three setups per added delay D:
- ASYNC, one follower: A leads `bench-` to B;
- SYNC, one follower: the same link switched to SYNC (IN_SYNC before measuring);
- SYNC, two followers: A leads `bench-` to B and to C over two SYNC links.

Every follower dials its source through a fault proxy (chaos/proxy.py) that
holds each chunk from the source to the follower D ms, so one replication
round trip (fetch request out, records back) grows by D. The ASYNC rows go
through the same proxies, so the only difference between rows is the mode.
Each proxy runs in a process of its own (`python -m chaos.proxy`), as a
network sits outside the hosts; `--proxy-in-process` runs it on a thread of
this process instead, beside the producing client library, where the two
share one interpreter lock: only the SYNC rows pay for that, because only
their acknowledgements cross the proxy.

Latency: N single 100 B records produced one at a time with acks=all through
the client library, each waiting for its acknowledgement before the next is
sent; latency = send until acknowledgement. Throughput: a burst of records
produced as fast as the client library sends them (linger 5 ms), acks=all,
clock until the last acknowledgement.

Target (issue): SYNC p99 overhead over ASYNC at most one replication round
trip plus 2 ms. The round trip reported (rtt) is the median time of a
DescribeCluster call through the follower's proxy: the base RPC round trip
plus D.

Nothing is asserted; the table and the ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import grpc  # noqa: E402
from produce_fetch import READY_TIMEOUT_S, free_port, stop  # noqa: E402

from admin import AdminClient, Producer  # noqa: E402
from ccr.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from chaos.proxy import FaultProxy  # noqa: E402
from chaos.proxy_control import ProxyControl  # noqa: E402

PREFIX = "bench-"
TOPIC = "bench-latency"
PAYLOAD = b"x" * 100
LINK_FLAGS = ["--link-session-timeout-ms", "10000", "--link-replica-lag-time-max-ms", "10000"]


@dataclass
class Row:
    setup: str
    delay_ms: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    rate: float
    rtt_ms: float


def start(cluster_id: str, tmp: Path, fsync: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    data = tmp / cluster_id
    data.mkdir(parents=True, exist_ok=True)
    # The log file stays open for the daemon's life (the OS closes it at exit).
    log = open(tmp / f"{cluster_id}.log", "ab")
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
            str(data / "data"),
            "--fsync",
            fsync,
            "--log-level",
            "warning",
            *LINK_FLAGS,
        ],
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(bootstrap) as channel:
                admin_pb2_grpc.AdminStub(channel).DescribeCluster(
                    admin_pb2.DescribeClusterRequest(), timeout=1
                )
            return proc, bootstrap
        except grpc.RpcError:
            if proc.poll() is not None:
                raise RuntimeError(f"linkd {cluster_id} exited; see {tmp}") from None
            time.sleep(0.1)
    raise RuntimeError(f"linkd {cluster_id} not ready in {READY_TIMEOUT_S}s")


class ProxyProcess:
    """A fault proxy in a child process (`python -m chaos.proxy`), driven over
    its control port: what `FaultProxy.start_in_thread` gives, out of process."""

    def __init__(self, host: str, port: int, seed: int) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "chaos.proxy", "--listen", "127.0.0.1:0",
                "--target", f"{host}:{port}", "--control", "127.0.0.1:0", "--seed", str(seed),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        # The first line says where it listens; a proxy that dies says nothing.
        readable, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
        line = self.proc.stdout.readline() if readable else b""
        if not line:
            stop(self.proc)
            raise RuntimeError(
                f"chaos.proxy not ready in {READY_TIMEOUT_S} s (exit {self.proc.returncode})"
            )
        ready = json.loads(line)
        self.address: str = ready["listen"]
        control_host, control_port = ready["control"].rsplit(":", 1)
        self.control = ProxyControl(control_host, int(control_port))

    def delay(self, direction: str, ms: float) -> None:
        self.control.delay(direction, ms)

    def stop(self) -> None:
        stop(self.proc)


Proxy = FaultProxy | ProxyProcess


def wait_until(what: str, check: object, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def link_state(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return admin.describe_link(name).state
    finally:
        admin.close()


def setup(
    tmp: Path, fsync: str, followers: int, mode: str, delay_ms: int, in_process: bool
) -> tuple[list[subprocess.Popen[bytes]], list[Proxy], str]:
    procs: list[subprocess.Popen[bytes]] = []
    proxies: list[Proxy] = []
    try:
        return build(tmp, fsync, followers, mode, delay_ms, in_process, procs, proxies)
    except BaseException:
        # Nothing started for a row that could not be set up outlives it.
        for proxy in proxies:
            proxy.stop()
        for proc in reversed(procs):
            stop(proc)
        raise


def build(
    tmp: Path,
    fsync: str,
    followers: int,
    mode: str,
    delay_ms: int,
    in_process: bool,
    procs: list[subprocess.Popen[bytes]],
    proxies: list[Proxy],
) -> tuple[list[subprocess.Popen[bytes]], list[Proxy], str]:
    a_proc, a = start("A", tmp, fsync)
    procs.append(a_proc)
    admin_a = AdminClient({"bootstrap.servers": a})
    admin_a.create_namespace("topic", PREFIX)
    admin_a.create_topic(TOPIC, partitions=1)
    host, port = a.split(":")
    for i in range(followers):
        cid = "BC"[i]
        proc, bootstrap = start(cid, tmp, fsync)
        procs.append(proc)
        proxy: Proxy = (
            FaultProxy(host, int(port), seed=i).start_in_thread()
            if in_process
            else ProxyProcess(host, int(port), seed=i)
        )
        proxy.delay("b->a", delay_ms)  # source -> follower
        proxies.append(proxy)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_namespace("topic", PREFIX)
        name = f"a{cid.lower()}"
        admin.create_link(name, proxy.address)
        admin.attach_namespace(name, "topic", PREFIX, PREFIX, "remote")
        wait_until(f"{name} FOLLOWING", lambda b=bootstrap, n=name: link_state(b, n) == "FOLLOWING")
        if mode == "SYNC":
            admin.set_link_mode(name, "sync")
            wait_until(f"{name} IN_SYNC", lambda b=bootstrap, n=name: link_state(b, n) == "IN_SYNC")
        admin.close()
    admin_a.close()
    return procs, proxies, a


def rtt_ms(proxy: Proxy) -> float:
    samples = []
    with grpc.insecure_channel(proxy.address) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        for _ in range(30):
            t = time.perf_counter()
            stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=5)
            samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples[5:])


def measure(a: str, records: int, burst: int) -> tuple[list[float], float]:
    producer = Producer({"bootstrap.servers": a, "acks": "all", "linger.ms": 0})
    latencies: list[float] = []
    for _ in range(records):
        t = time.perf_counter()
        producer.produce(TOPIC, value=PAYLOAD)
        if producer.flush(60) != 0:
            raise RuntimeError("a record was not acknowledged within 60 s")
        latencies.append((time.perf_counter() - t) * 1000)
    producer.close()
    producer = Producer({"bootstrap.servers": a, "acks": "all", "linger.ms": 5})
    t = time.perf_counter()
    for _ in range(burst):
        producer.produce(TOPIC, value=PAYLOAD)
    if producer.flush(120) != 0:
        raise RuntimeError("the burst was not acknowledged within 120 s")
    rate = burst / (time.perf_counter() - t)
    producer.close()
    return latencies, rate


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(setup_name: str, followers: int, mode: str, delay_ms: int, args: argparse.Namespace) -> Row:
    with tempfile.TemporaryDirectory(prefix="sync-latency-") as tmp:
        procs, proxies, a = setup(
            Path(tmp), args.fsync, followers, mode, delay_ms, args.proxy_in_process
        )
        try:
            rtt = rtt_ms(proxies[0])
            latencies, rate = measure(a, args.records, args.burst)
        finally:
            for proxy in proxies:
                proxy.stop()
            for proc in reversed(procs):
                stop(proc)
    return Row(
        setup_name,
        delay_ms,
        statistics.median(latencies),
        quantile(latencies, 0.99),
        quantile(latencies, 0.999),
        rate,
        rtt,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000, help="latency samples per row")
    parser.add_argument("--burst", type=int, default=5000, help="records in the throughput burst")
    parser.add_argument("--delays-ms", default="0,1,5,20")
    parser.add_argument("--fsync", choices=("never", "always"), default="never")
    parser.add_argument(
        "--proxy-in-process",
        action="store_true",
        help="run each fault proxy on a thread of this process (beside the client)",
    )
    args = parser.parse_args()
    delays = [int(x) for x in args.delays_ms.split(",") if x.strip()]
    setups = [("ASYNC x1", 1, "ASYNC"), ("SYNC x1", 1, "SYNC"), ("SYNC x2", 2, "SYNC")]
    rows: list[Row] = []
    for delay in delays:
        for name, followers, mode in setups:
            row = run(name, followers, mode, delay, args)
            rows.append(row)
            print(
                f"{row.setup:9} delay {delay:>3} ms: p50 {row.p50_ms:7.2f}  p99 {row.p99_ms:7.2f}"
                f"  p999 {row.p999_ms:7.2f} ms  {row.rate:9.0f} rec/s  (rtt {row.rtt_ms:.2f} ms)",
                flush=True,
            )
    print()
    where = "a thread of the bench" if args.proxy_in_process else "processes of their own"
    print(
        f"fsync={args.fsync}, {args.records} sequential acks=all records per row, "
        f"burst {args.burst}, proxies in {where}"
    )
    header = (
        "| delay ms | setup | p50 ms | p99 ms | p999 ms | rec/s | p99 - ASYNC p99 | "
        "budget (rtt + 2 ms) | within | rate / ASYNC |"
    )
    print(header)
    print("|" + "---|" * 10)
    for delay in delays:
        base = next(r for r in rows if r.delay_ms == delay and r.setup == "ASYNC x1")
        for row in (r for r in rows if r.delay_ms == delay):
            overhead = row.p99_ms - base.p99_ms
            budget = base.rtt_ms + 2.0
            within = "-" if row is base else ("yes" if overhead <= budget else "no")
            print(
                f"| {delay} | {row.setup} | {row.p50_ms:.2f} | {row.p99_ms:.2f} | "
                f"{row.p999_ms:.2f} | {row.rate:.0f} | {overhead:+.2f} | {budget:.2f} | "
                f"{within} | {row.rate / base.rate:.2f}x |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
