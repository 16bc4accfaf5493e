"""A debugging trace of acknowledgements: when each hop of an acks=all
produce happened, on every daemon it crosses (docs/operations.md,
"Tracing acknowledgements").

Off unless the environment variable `LINKD_ACK_TRACE` names a file when the
daemon starts (`start`). Then every daemon appends one JSON line per hop to
that file (several daemons may share it: each line is one `write` to a file
opened for appending):

    {"t": 1764999999123456789, "c": "A", "hop": "produce.received",
     "topic": "orders", "p": 0, "from": 41, "to": 42}

`t` is the wall clock in nanoseconds (`time.time_ns`), so that daemons on one
machine share its origin; `c` the cluster id; `topic` and `p` the partition
as its source names it. `from`/`to` are, for a hop that carries records,
the offsets it carries (`to` excluded); for a hop that acknowledges (a
follower's fetch), both are the fetch offset: it acknowledges every record
below it. `bench/ack_trace.py` produces through SYNC links with the trace
on and lines the hops of each produce up.

Off, a hop costs the test of one module attribute (`ON`) where it is
called; the hops are listed in `HOPS`, in the order one acknowledgement
crosses them on a SYNC link a follower pulls.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from linkd.core import records as rb

ENV = "LINKD_ACK_TRACE"

# The hops, in the order one acknowledgement on a pulled SYNC link crosses them.
HOPS = (
    "produce.received",  # source: the produce request reached the daemon
    # source: appended (durable as --fsync says), and waiting for the HW; the
    # fetch it woke may be served before the produce's task gets here
    "produce.written",
    "source.read",  # source: a follower's held fetch woke and read the records
    "source.answered",  # source: the fetch's answer encoded, handed to gRPC
    "follower.received",  # follower: the answer decoded
    "follower.written",  # follower: the records appended (durable as --fsync says)
    "follower.applied",  # follower: the round finished (HWs, lag)
    "follower.fetch_sent",  # follower: the next fetch encoded and signed, handed to gRPC
    "source.fetch_received",  # source: that fetch reached the daemon
    "source.fetch_verified",  # source: its session checked
    "source.hw_moved",  # source: the fetch acknowledged the records; the HW moved
    "produce.acked",  # source: the produce's wait is over; its answer goes back
)
# Where a pushing leader's link (the follower may sit behind NAT) differs:
# after "source.read" (the leader's own read of the follower's last request).
PUSH_HOPS = (
    "produce.received",
    "produce.written",
    "source.read",
    "source.push_sent",  # source: the push leaves (encoded and signed below it)
    "follower.push_received",  # follower: the push arrived, before its session is checked
    "follower.push_applied",  # follower: appended, the round finished; its next request goes back
    "source.push_answered",  # source: that request arrived; it acknowledges
    "source.hw_moved",
    "produce.acked",
)

ON = False
_fd = -1
_cluster = ""


def start(cluster_id: str, environ: dict[str, str] | None = None) -> bool:
    """Turns the trace on if `LINKD_ACK_TRACE` names a file; returns whether."""
    global ON, _fd, _cluster
    path = (os.environ if environ is None else environ).get(ENV, "")
    if not path:
        return False
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _cluster, ON = cluster_id, True
    return True


def stop() -> None:
    global ON, _fd
    if _fd >= 0:
        os.close(_fd)
    ON, _fd = False, -1


def hop(name: str, topic: str, partition: int, first: int, end: int, t_ns: int = 0) -> None:
    """One hop, now (or at `t_ns`, from `time.time_ns`). Call only when `ON`."""
    at = t_ns or time.time_ns()
    line = json.dumps(
        {"t": at, "c": _cluster, "hop": name, "topic": topic, "p": partition,
         "from": first, "to": end}
    )  # fmt: skip
    os.write(_fd, line.encode() + b"\n")


def records_hop(name: str, topic: str, partition: int, data: bytes) -> None:
    """A hop carrying `data` (whole batches): its offsets. Call only when `ON`."""
    if len(data) < rb.HEADER_SIZE:
        return
    first = rb.parse_header(data, 0).base_offset
    position, end = 0, first
    while position + rb.HEADER_SIZE <= len(data):
        header = rb.parse_header(data, position)
        end, position = header.next_offset, position + header.size_bytes
    hop(name, topic, partition, first, end)


# -- reading a trace ----------------------------------------------------------------------

# Hops that carry records (the produce's offsets lie in their span) and hops
# that acknowledge (their offset is at or past the produce's end).
RECORD_HOPS = frozenset({
    "source.read", "source.answered", "follower.received", "follower.written",
    "follower.applied", "source.push_sent", "follower.push_received", "follower.push_applied",
})  # fmt: skip
ACK_HOPS = frozenset({
    "follower.fetch_sent", "source.fetch_received", "source.fetch_verified", "source.hw_moved",
    "source.push_answered",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop of one produce: which, on which daemon, when."""

    name: str
    cluster: str
    t_ns: int


def read(path: Path) -> list[dict[str, object]]:
    """The events of a trace file."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def line_up(events: list[dict[str, object]], topic: str = "") -> list[list[Hop]]:
    """Per produce (in offset order), its hops: for each hop name and
    cluster, the first event at or after the produce arrived that concerns
    its records, in time order."""
    source = {
        (e["topic"], e["p"], e["from"]): e
        for e in events
        if e["hop"] == "produce.received" and (not topic or e["topic"] == topic)
    }
    acked = {
        (e["topic"], e["p"], e["from"]): e for e in events if e["hop"] == "produce.acked"
    }
    out: list[list[Hop]] = []
    by_time = sorted(events, key=lambda e: int(str(e["t"])))
    times = [int(str(e["t"])) for e in by_time]
    for key in sorted(source, key=lambda k: (str(k[0]), int(str(k[1])), int(str(k[2])))):
        start = source[key]
        if key not in acked:
            continue
        t0, end, first = int(str(start["t"])), int(str(start["to"])), int(str(start["from"]))
        t_end = int(str(acked[key]["t"]))
        hops: dict[tuple[str, str], int] = {}
        for e in by_time[bisect.bisect_left(times, t0):bisect.bisect_right(times, t_end)]:
            t = int(str(e["t"]))
            if e["topic"] != key[0] or e["p"] != key[1]:
                continue
            name, cluster = str(e["hop"]), str(e["c"])
            lo, hi = int(str(e["from"])), int(str(e["to"]))
            if name.startswith("produce."):
                ok = lo == first
            elif name in RECORD_HOPS:
                ok = lo <= first < hi
            elif name in ACK_HOPS:
                ok = lo >= end
            else:
                ok = False
            if ok and (name, cluster) not in hops:
                hops[(name, cluster)] = t
        out.append(sorted((Hop(n, c, t) for (n, c), t in hops.items()), key=lambda h: h.t_ns))
    return out


__all__ = [
    "ENV", "HOPS", "ON", "PUSH_HOPS", "Hop", "hop", "line_up", "read", "records_hop", "start",
    "stop",
]
