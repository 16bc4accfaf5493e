"""SYNC acknowledgements traced hop by hop (linkd/ack_trace.py).

    python bench/ack_trace.py [--delay-ms 5] [--followers 1] [--records 200]
                              [--fsync never] [--trace FILE]
    python bench/ack_trace.py --read FILE

Sets up what `bench/sync_latency.py` measures as "SYNC x1" (or x2): A leads
`bench-` to B (and C) over SYNC links each follower dials through a fault
proxy that holds what the source sends D ms. Every daemon runs with
`LINKD_ACK_TRACE` naming one file; N single records are produced one at a
time with acks=all, and the hops of each are lined up: for every hop, when
it happened after the produce reached A, and how long after the hop before.
Printed: the record whose produce took the median time on A (its hops, one
per row), and per hop the median and p99 over all records of the time since
the hop before. `--read` lines up a trace file already written.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from produce_fetch import stop  # noqa: E402
from sync_latency import PAYLOAD, TOPIC, quantile, setup  # noqa: E402

from admin import Producer  # noqa: E402
from linkd import ack_trace  # noqa: E402


def report(produces: list[list[ack_trace.Hop]]) -> str:
    """The median produce's hops, and each hop's median and p99 delta."""
    produces = [p for p in produces if p]
    if not produces:
        return "no produce traced"
    total = sorted(produces, key=lambda p: p[-1].t_ns - p[0].t_ns)
    median = total[len(total) // 2]
    t0 = median[0].t_ns
    lines = [
        f"{len(produces)} produces traced; the median one (its produce took "
        f"{(median[-1].t_ns - t0) / 1e6:.2f} ms on A):",
        "",
        "| hop | daemon | ms since the produce arrived | ms since the hop before |",
        "|---|---|---:|---:|",
    ]
    before = t0
    for h in median:
        since, delta = (h.t_ns - t0) / 1e6, (h.t_ns - before) / 1e6
        lines.append(f"| {h.name} | {h.cluster} | {since:.3f} | {delta:.3f} |")
        before = h.t_ns
    deltas: dict[tuple[str, str], list[float]] = {}
    order: list[tuple[str, str]] = []
    for p in produces:
        for prev, h in itertools.pairwise(p):
            key = (h.name, h.cluster)
            if key not in deltas:
                deltas[key] = []
                order.append(key)
            deltas[key].append((h.t_ns - prev.t_ns) / 1e6)
    totals = [(p[-1].t_ns - p[0].t_ns) / 1e6 for p in produces]
    lines += [
        "",
        "Per hop, over every produce: ms since the hop before it",
        "",
        "| hop | daemon | median | p99 | count |",
        "|---|---|---:|---:|---:|",
    ]
    for key in order:
        d = deltas[key]
        lines.append(
            f"| {key[0]} | {key[1]} | {statistics.median(d):.3f} | {quantile(d, 0.99):.3f} | "
            f"{len(d)} |"
        )
    lines.append(
        f"| (produce on A, arrived to acked) | | {statistics.median(totals):.3f} | "
        f"{quantile(totals, 0.99):.3f} | {len(totals)} |"
    )
    return "\n".join(lines)


def trace(args: argparse.Namespace, path: Path) -> list[tuple[int, int]]:
    os.environ[ack_trace.ENV] = str(path)
    with tempfile.TemporaryDirectory(prefix="ack-trace-") as tmp:
        procs, proxies, a = setup(
            Path(tmp), args.fsync, args.followers, "SYNC", args.delay_ms, False
        )
        try:
            path.write_text("")  # the set-up's own produces are none, but start clean
            producer = Producer({"bootstrap.servers": a, "acks": "all", "linger.ms": 0})
            client: list[tuple[int, int]] = []
            for _ in range(args.records):
                sent = time.time_ns()
                producer.produce(TOPIC, value=PAYLOAD)
                if producer.flush(60) != 0:
                    raise RuntimeError("a record was not acknowledged within 60 s")
                client.append((sent, time.time_ns()))
            producer.close()
        finally:
            for proxy in proxies:
                proxy.stop()
            for proc in reversed(procs):
                stop(proc)
    os.environ.pop(ack_trace.ENV, None)
    return client


def client_report(events: list[dict[str, object]], client: list[tuple[int, int]]) -> str:
    """The client's view beside A's: the topic is new, with one partition,
    and each record is sent after the last one's acknowledgement, so the
    i-th record sent is at offset i."""
    at = {
        (str(e["hop"]), int(str(e["from"]))): int(str(e["t"]))
        for e in events
        if e["hop"] in ("produce.received", "produce.acked") and e["topic"] == TOPIC
    }
    rows: dict[str, list[float]] = {"client: sent to acked": [], "client sent to A received": [],
                                    "A: received to acked": [], "A acked to client acked": []}
    for offset, (sent, acked) in enumerate(client):
        received, answered = at.get(("produce.received", offset)), at.get(("produce.acked", offset))
        if received is None or answered is None:
            continue
        rows["client: sent to acked"].append((acked - sent) / 1e6)
        rows["client sent to A received"].append((received - sent) / 1e6)
        rows["A: received to acked"].append((answered - received) / 1e6)
        rows["A acked to client acked"].append((acked - answered) / 1e6)
    lines = ["| span | median ms | p99 ms | max ms |", "|---|---:|---:|---:|"]
    for name, values in rows.items():
        if values:
            lines.append(f"| {name} | {statistics.median(values):.3f} | "
                         f"{quantile(values, 0.99):.3f} | {max(values):.3f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay-ms", type=int, default=5)
    parser.add_argument("--followers", type=int, choices=(1, 2), default=1)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--fsync", choices=("never", "always"), default="never")
    parser.add_argument("--trace", type=Path, help="where the trace is written (kept)")
    parser.add_argument("--read", type=Path, help="line up this trace file; run nothing")
    args = parser.parse_args()
    if args.read is not None:
        print(report(ack_trace.line_up(ack_trace.read(args.read))))
        return 0
    path = args.trace or Path(tempfile.mkdtemp(prefix="ack-trace-")) / "trace.jsonl"
    client = trace(args, path)
    print(f"delay {args.delay_ms} ms, {args.followers} follower(s), fsync={args.fsync}, "
          f"trace {path}")  # fmt: skip
    events = ack_trace.read(path)
    print(report(ack_trace.line_up(events, TOPIC)))
    print()
    print(client_report(events, client))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
