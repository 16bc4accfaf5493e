"""`ccr-admin top`: a cluster's links and their lag, live in the terminal.

Each frame is one ListLinks call (what describe-link shows of every link)
and one ListTopics call, so it needs no metrics endpoint. Per link: its
state and for how long, and its largest follower lag in records and ms
(Cluster Linking's MaxLag, read as `linkd --metrics-listen` exports it:
known only when every follower partition's lag is known); then the follower
partitions, the most lagging first. Between two frames of a live view, REC/S is how fast the link's
follower partitions grew.

A third call, ListMirrorLinks, lists the MirrorMaker 2 links this daemon
hosts: running or not, restarts, records copied.

Rules:
- A lag that is not known is shown as "?" (text) or null (JSON), never as 0;
  a followed partition no fetch round has reached yet (describe-link has no
  row for it; this cluster's topic list has it) is one.
- PROBLEM says why, for a link, a partition or a mirror link: the reason
  describe-link carries (a refusal, a divergence, the link's last error), or
  what the frame shows (disconnected for how long; no fetch round for how
  long, so the lag is unknown; no round reached the partition yet). Empty
  when nothing is wrong.
- A link this side only leads shows no lag ("-"): its follower's cluster
  shows it.
- In a live view a failed call is shown in the frame and the view goes on;
  `--once` and `--json` fail as every ccr-admin command does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from admin.admin_client import AdminClient, LinkInfo, MirrorLinkInfo
from admin.errors import CcrError

__all__ = [
    "Frame",
    "LinkView",
    "MirrorView",
    "PartitionView",
    "frame_of",
    "link_view",
    "mirror_view",
    "read_frame",
    "render",
    "watch",
]

# ANSI: cursor home, clear the screen (a live view on a terminal).
CLEAR = "\x1b[H\x1b[2J"


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic: str
    partition: int
    lag_records: int | None  # None: not known now
    lag_ms: int | None
    log_end_offset: int
    source_high_watermark: int  # -1: never learned
    problem: str
    # What a consumer here can read (the lag counts from it); records held
    # above it are not caught up.
    high_watermark: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "lag_records": self.lag_records,
            "lag_ms": self.lag_ms,
            "log_end_offset": self.log_end_offset,
            "source_high_watermark": self.source_high_watermark,
            "problem": self.problem,
            "high_watermark": self.high_watermark,
        }


@dataclass(frozen=True, slots=True)
class LinkView:
    name: str
    remote_cluster_id: str
    mode: str
    state: str
    state_entered_at_ms: int
    follows: bool  # this side follows topics on the link
    # The largest follower lag, None when not known (or this side follows nothing).
    max_lag_records: int | None
    max_lag_ms: int | None
    partitions: tuple[PartitionView, ...]  # follower partitions, most lagging first
    problem: str = ""  # why the link is not replicating as it should ("" if it is)

    @property
    def follower_offsets(self) -> int:
        return sum(p.high_watermark for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "remote_cluster_id": self.remote_cluster_id,
            "mode": self.mode,
            "state": self.state,
            "state_entered_at_ms": self.state_entered_at_ms,
            "follows": self.follows,
            "max_lag_records": self.max_lag_records,
            "max_lag_ms": self.max_lag_ms,
            "problem": self.problem,
            "partitions": [p.to_dict() for p in self.partitions],
        }


@dataclass(frozen=True, slots=True)
class MirrorView:
    """A MirrorMaker 2 link hosted by this daemon (list-mirror-links)."""

    name: str
    alias: str
    flows: tuple[str, ...]
    running: bool
    restarts: int
    records_copied: int
    problem: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "alias": self.alias,
            "flows": list(self.flows),
            "running": self.running,
            "restarts": self.restarts,
            "records_copied": self.records_copied,
            "problem": self.problem,
        }


@dataclass(frozen=True, slots=True)
class Frame:
    at_ms: int
    bootstrap: str
    links: tuple[LinkView, ...]
    error: str = ""  # a live view's failed call
    mirror_links: tuple[MirrorView, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "at_ms": self.at_ms,
            "bootstrap": self.bootstrap,
            "links": [link.to_dict() for link in self.links],
            "mirror_links": [m.to_dict() for m in self.mirror_links],
        }


# States in which a follower that has finished its rounds stands: with no
# follower partition, its lag is 0 only then.
_SETTLED = frozenset({"FOLLOWING", "SYNCING", "IN_SYNC", "OUT_OF_SYNC"})


def _in_prefix(name: str, prefix: str) -> bool:
    """The namespace rule: "" holds every name not starting with "_"."""
    return not name.startswith("_") if prefix == "" else name.startswith(prefix)


def _seconds(ms: int) -> str:
    return f"{max(0, ms) / 1000:.1f} s"


def partition_problem(p: Mapping[str, Any], state: str, at_ms: int) -> str:
    """Why a follower partition is not copied, or why its lag is unknown:
    describe-link's reason first, else what its row shows."""
    if p.get("problem"):
        return str(p["problem"])
    if p["lag_known"]:
        return ""
    if state == "DISCONNECTED":
        return "link disconnected: lag unknown"
    known_at = int(p.get("source_hw_known_at_ms", 0))
    if known_at <= 0 or int(p["source_high_watermark"]) < 0:
        return "no fetch round reached it yet: lag unknown"
    return f"no fetch round for {_seconds(at_ms - known_at)}: lag unknown"


def _link_problem(info: LinkInfo, rows: Sequence[PartitionView], follows: bool,
                  at_ms: int) -> str:
    """The link's reason: its last error while disconnected, else its
    partitions' (the first one, and how many share a problem)."""
    last_error = " ".join(info.last_error.split())
    if info.state == "DISCONNECTED":
        since = _seconds(at_ms - info.state_entered_at_ms)
        why = f": {last_error}" if last_error else ""
        return f"disconnected for {since}{why}" + (": lag unknown" if follows else "")
    troubled = [p for p in rows if p.problem]
    if not troubled:
        return ""
    first = troubled[0].problem
    more = f" ({len(troubled)} partitions)" if len(troubled) > 1 else ""
    return f"{first}{more}"


def link_view(info: LinkInfo, topics: Mapping[str, int] | None = None, *,
              at_ms: int) -> LinkView:
    """`topics` (name -> partition count, this cluster's): a followed
    partition describe-link has no row for (no fetch round reached it yet)
    is shown with its lag unknown, as the daemon's metrics count it.
    `at_ms`: the frame's time (how long a reason has held)."""
    followed = [m["local_prefix"] for m in info.mappings
                if m["type"] == "topic" and m["leader"] == "remote"]
    follows = bool(followed)
    rows = [
        PartitionView(
            p["topic"],
            int(p["partition"]),
            int(p["lag_records"]) if p["lag_known"] and p["lag_records"] >= 0 else None,
            int(p["lag_ms"]) if p["lag_known"] and p["lag_ms"] >= 0 else None,
            int(p["log_end_offset"]),
            int(p["source_high_watermark"]),
            partition_problem(p, info.state, at_ms),
            int(p.get("high_watermark", p["log_end_offset"])),
        )
        for p in info.partitions
        if p["role"] == "follower"
    ]
    seen = {(p.topic, p.partition) for p in rows}
    for topic, count in sorted((topics or {}).items()):
        if any(_in_prefix(topic, prefix) for prefix in followed):
            rows += [PartitionView(topic, p, None, None, 0, -1,
                                   "no fetch round reached it yet: lag unknown")
                     for p in range(count) if (topic, p) not in seen]
    rows.sort(key=lambda p: (-(p.lag_records if p.lag_records is not None else 1 << 62),
                             p.topic, p.partition))
    known = all(p.lag_records is not None and p.lag_ms is not None for p in rows)
    max_records = max_ms = None
    if follows and known and (rows or info.state in _SETTLED):
        max_records = max((p.lag_records or 0 for p in rows), default=0)
        max_ms = max((p.lag_ms or 0 for p in rows), default=0)
    return LinkView(
        info.name,
        info.remote_cluster_id,
        info.mode,
        info.state,
        info.state_entered_at_ms,
        follows,
        max_records,
        max_ms,
        tuple(rows),
        _link_problem(info, rows, follows, at_ms),
    )


def mirror_view(info: MirrorLinkInfo, at_ms: int) -> MirrorView:
    """A mirror link's row: its engine's last error is its problem while the
    engine is not running, and for a minute after it failed."""
    copied = sum(int(f["stats"].get("records_copied", 0)) for f in info.flows)
    error = " ".join(info.last_error.split())
    if not info.running:
        problem = f"engine not running: {error}" if error else "engine starting"
    elif error and at_ms - info.last_error_at_ms < 60_000:
        problem = f"engine failed {_seconds(at_ms - info.last_error_at_ms)} ago: {error}"
    else:
        problem = ""
    return MirrorView(
        info.name,
        info.alias,
        tuple(str(f["flow"]) + ("" if f["replicates"] else " (heartbeats only)")
              for f in info.flows),
        info.running,
        info.restarts,
        copied,
        problem,
    )


def frame_of(
    links: list[LinkInfo], at_ms: int, bootstrap: str, topics: Mapping[str, int] | None = None,
    mirror_links: Sequence[MirrorLinkInfo] = (),
) -> Frame:
    return Frame(
        at_ms,
        bootstrap,
        tuple(link_view(x, topics, at_ms=at_ms) for x in sorted(links, key=lambda x: x.name)),
        mirror_links=tuple(
            mirror_view(m, at_ms) for m in sorted(mirror_links, key=lambda m: m.name)
        ),
    )


def read_frame(admin: AdminClient, at_ms: Callable[[], int], bootstrap: str) -> Frame:
    """One frame from the cluster: its links, its topics' partition counts,
    then the mirror links it hosts."""
    links = admin.list_links()
    topics = {t.name: t.partition_count for t in admin.list_topics()}
    mirrors = admin.list_mirror_links()
    return frame_of(links, at_ms(), bootstrap, topics, mirrors)


def _duration(ms: int) -> str:
    s = max(0, ms) // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m"


def _lag(value: int | None, follows: bool) -> str:
    if not follows:
        return "-"
    return "?" if value is None else str(value)


def _table(rows: Sequence[tuple[str, ...]], headers: tuple[str, ...]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in [headers, *rows]]


def render(
    frame: Frame, previous: Frame | None = None, interval_s: float | None = None,
    max_partitions: int = 10,
) -> str:
    """One frame as text: a header, a row per link, the most lagging
    follower partitions of every link."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(frame.at_ms / 1000))
    every = f"  every {interval_s:g}s (Ctrl-C to quit)" if interval_s is not None else ""
    lines = [f"ccr-admin top  {frame.bootstrap}  {stamp}{every}", ""]
    if frame.error:
        lines += [f"error: {frame.error}", ""]
    before = {x.name: x for x in previous.links} if previous is not None else {}
    elapsed_s = (frame.at_ms - previous.at_ms) / 1000 if previous is not None else 0.0
    rows = []
    for link in frame.links:
        rate = "-"
        old = before.get(link.name)
        if old is not None and link.follows and elapsed_s > 0:
            rate = f"{max(0, link.follower_offsets - old.follower_offsets) / elapsed_s:.0f}"
        rows.append((
            link.name, link.remote_cluster_id, link.mode, link.state,
            _duration(frame.at_ms - link.state_entered_at_ms),
            _lag(link.max_lag_records, link.follows), _lag(link.max_lag_ms, link.follows),
            rate, link.problem,
        ))
    if not frame.links and not frame.mirror_links:
        lines.append("no links")
        return "\n".join(lines) + "\n"
    if frame.links:
        lines += _table(rows, ("LINK", "REMOTE", "MODE", "STATE", "FOR", "MAX_LAG_RECORDS",
                               "MAX_LAG_MS", "REC/S", "PROBLEM"))
    else:
        lines.append("no links")
    parts = []
    for link in frame.links:
        for p in link.partitions[:max_partitions]:
            parts.append((
                link.name, p.topic, str(p.partition), _lag(p.lag_records, True),
                _lag(p.lag_ms, True), str(p.high_watermark),
                str(p.source_high_watermark) if p.source_high_watermark >= 0 else "?",
                p.problem,
            ))
        hidden = len(link.partitions) - max_partitions
        if hidden > 0:
            parts.append((link.name, f"(+{hidden} partitions)", "", "", "", "", "", ""))
    if parts:
        lines.append("")
        lines += _table(parts, ("LINK", "TOPIC", "PARTITION", "LAG_RECORDS", "LAG_MS",
                                "READABLE", "SOURCE_HW", "PROBLEM"))
    if frame.mirror_links:
        mirrors = [
            (m.name, m.alias, ", ".join(m.flows) or "-",
             "running" if m.running else "not running", str(m.restarts),
             str(m.records_copied), m.problem)
            for m in frame.mirror_links
        ]
        lines.append("")
        lines += _table(mirrors, ("MIRROR_LINK", "ALIAS", "FLOWS", "ENGINE", "RESTARTS",
                                  "RECORDS_COPIED", "PROBLEM"))
    return "\n".join(lines) + "\n"


def watch(
    fetch: Callable[[], Frame],
    bootstrap: str,
    out: TextIO,
    *,
    interval_s: float,
    max_partitions: int,
    clear: bool,
    clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    wait: Callable[[float], object] = time.sleep,
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """The live view: a frame every `interval_s` until `stopped()` (the
    command's Ctrl-C handler sets it, and `wait` returns early then). A failed
    call is shown in the frame, with the last links known."""
    previous: Frame | None = None
    while not stopped():
        try:
            frame = fetch()
        except CcrError as exc:
            links = previous.links if previous is not None else ()
            frame = Frame(clock(), bootstrap, links, f"{exc.code}: {exc.message}")
        text = render(frame, previous if not frame.error else None, interval_s, max_partitions)
        out.write((CLEAR if clear else "") + text + ("" if clear else "\n"))
        out.flush()
        if not frame.error:
            previous = frame
        wait(interval_s)
