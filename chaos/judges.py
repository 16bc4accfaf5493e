"""Judges of what clusters *report*, for runs with the operator nemesis (and
the answers of a schedule's failover steps, in every run).

Spec section 10, invariants 9-12 (and 7 extended), judged from plain data a
chaos run collects: status rounds (every link described on every cluster,
every partition's HW / LEO / LSO, every namespace), the operator's moves with
their outcomes and reports, the final logs and the final configurations.
Pure functions: no I/O, no clocks; the runner feeds them and the tests plant
anomalies in fabricated data. (They would belong in `sim/checkers.py`, which
is shared with the simulator; they live here until they are moved there.)

Anomalies:
- `status_lied` (9): a follower partition row of a link reported FOLLOWING
  or IN_SYNC with `lag_records == 0` (and `lag_known`, when the field exists)
  whose readable position (`high_watermark`; `log_end_offset` from daemons
  that do not report it) is below the source's high watermark observed
  one status round earlier (or, when the row says when it learned the source
  HW, `source_hw_known_at_ms`, below the HW observed in the last round that
  ended before then); or a row that contradicts itself (lag 0 while its
  position is below its own `source_high_watermark`).
- `silent_loss` (10): a record acknowledged in a namespace that led to a
  follower (attached in the status rounds before and after the send) is not
  in that follower's final log, and no report names it (see
  `check_silent_loss`); and, at a schedule's `failover` steps (not the
  operator's moves), a record the failed-over link's source acknowledged
  before the answer that the promoted cluster's final log lacks, and that
  the answer does not name by the simulator's rule (see
  `check_failover_loss`).
- `hanging_transaction` (11): at the end a partition's last stable offset is
  below its high watermark on a live cluster, later than any transaction a
  producer may legitimately still hold open (its timeout plus a bound); or,
  during the run, a partition's LSO stayed put below its HW for longer than
  that.
- `config_diverged` (7, extended): the two sides of a link disagree, once
  healed, on its existence, mode, mappings or refused mappings (swapped).
- `admin_effect_missing` (12): an admin call that answered success (attach,
  detach, set-mode, create-link, delete-link) does not show on both sides at
  the end, and no later move could have changed it.
- `refusal_missing` (spec section 4): `set-mode SYNC`, or `failover` without
  `--force`, answered success while the link was far from FOLLOWING in the
  two status rounds before the call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.checkers import Deleted, FinalLogs, Violation, was_deleted
from sim.history import Op, Send
from sim.operator_moves import Move, MoveKind
from sim.status_checks import FailoverRow

if TYPE_CHECKING:
    from admin.admin_client import FailoverResult

DETAIL_MAX = 5
GOOD_STATES = ("FOLLOWING", "IN_SYNC")
SWAP = {"local": "remote", "remote": "local"}

# (type, local_prefix, remote_prefix, leader) as one side describes a mapping.
MappingKey = tuple[str, str, str, str]
# (cluster, topic, partition) -> offset ranges [from, to) a reported truncation removed.
Cuts = dict[tuple[str, str, int], list[tuple[int, int]]]


def capped(name: str, details: Sequence[str]) -> list[Violation]:
    out = [Violation(name, d) for d in details[:DETAIL_MAX]]
    if len(details) > DETAIL_MAX:
        out.append(Violation(name, f"... and {len(details) - DETAIL_MAX} more"))
    return out


# -- what a status round holds --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One partition row of `describe_link` on one side."""

    topic: str
    partition: int
    role: str  # "leader" | "follower"
    lag_records: int
    log_end_offset: int
    source_high_watermark: int
    # Absent on older daemons: then a row is a claim when its lag is not negative.
    lag_known: bool = True
    source_hw_known_at_ms: int = 0  # wall clock; 0: never (or not reported)
    # What a consumer there can read (-1: not reported, older daemons).
    high_watermark: int = -1
    # Held uncut for this cluster's own acknowledged writes: not copied until
    # `recover`, and the row (its problem) is the report.
    own_writes_held: bool = False

    @property
    def position(self) -> int:
        """What the row says a consumer there can read: its readable high
        watermark, else (older daemons) its log end."""
        return self.high_watermark if self.high_watermark >= 0 else self.log_end_offset


@dataclass(frozen=True, slots=True)
class LinkSnap:
    """A link as one cluster describes it."""

    name: str
    local: str
    remote: str
    state: str
    mode: str
    mappings: tuple[MappingKey, ...] = ()
    refused: tuple[MappingKey, ...] = ()
    rows: tuple[Row, ...] = ()

    def follower_source(self, topic: str) -> str | None:
        """The remote topic this side's follower `topic` copies (longest
        matching follower mapping), or None."""
        best: MappingKey | None = None
        for m in self.mappings:
            if m[0] == "topic" and m[3] == "remote" and topic.startswith(m[1]):
                if best is None or len(m[1]) > len(best[1]):
                    best = m
        return None if best is None else best[2] + topic[len(best[1]) :]

    def leading(self, topic: str) -> tuple[MappingKey, ...]:
        """Every leader mapping of this side that covers `topic` (each one
        replicates it, under its own follower name)."""
        return tuple(
            m for m in self.mappings
            if m[0] == "topic" and m[3] == "local" and topic.startswith(m[1])
        )  # fmt: skip

    def leads(self, topic: str) -> MappingKey | None:
        """The leader mapping of this side that covers `topic` (longest), or None."""
        best: MappingKey | None = None
        for m in self.mappings:
            if m[0] == "topic" and m[3] == "local" and topic.startswith(m[1]):
                if best is None or len(m[1]) > len(best[1]):
                    best = m
        return best


@dataclass(frozen=True, slots=True)
class PartSnap:
    high_watermark: int
    log_end_offset: int
    last_stable_offset: int


@dataclass
class ClusterSnap:
    links: dict[str, LinkSnap] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartSnap] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    # (type, prefix) -> (reserved, attachments "link:role")
    namespaces: dict[tuple[str, str], tuple[bool, tuple[str, ...]]] = field(default_factory=dict)


@dataclass
class Round:
    """One status round: every reachable cluster described once."""

    index: int
    start_ms: int  # the run's clock (ms since the run started)
    end_ms: int
    wall_start_ms: int  # wall clock (ms since the epoch), to compare with daemons' reports
    wall_end_ms: int
    clusters: dict[str, ClusterSnap] = field(default_factory=dict)


@dataclass
class MoveRecord:
    """One operator move as carried out: outcome "ok", "refused" (a definite
    refusal: `code`, `message`), "info" (indefinite: unreachable, timed out)
    or "error" (an unexpected exception type: a bug somewhere)."""

    move: Move
    begin_ms: int
    end_ms: int
    outcome: str
    code: str = ""
    message: str = ""
    steps: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    wall_begin_ms: int = 0
    wall_end_ms: int = 0

    @property
    def maybe_happened(self) -> bool:
        """ok or indefinite; a manual reversal that stopped half-way changed
        something too."""
        return self.outcome in ("ok", "info", "error") or (
            self.move.kind in (MoveKind.MANUAL_REVERSE, MoveKind.RELEASE_REATTACH)
            and len(self.steps) > 1
        )

    def to_json(self) -> dict[str, Any]:
        m = self.move
        out: dict[str, Any] = {
            "kind": m.kind.value,
            "cluster": m.cluster,
            "describe": m.describe(),
            "begin_ms": self.begin_ms,
            "end_ms": self.end_ms,
            "outcome": self.outcome,
        }
        if self.code:
            out["error"] = {"code": self.code, "message": self.message}
        if self.steps:
            out["steps"] = list(self.steps)
        if self.report:
            out["report"] = self.report
        return out


# -- helpers ---------------------------------------------------------------------------------


def row_is_claim(row: Row) -> bool:
    """A follower row that claims to hold everything: lag 0, lag known."""
    return row.role == "follower" and row.lag_known and row.lag_records == 0


def map_topic(topic: str, from_prefix: str, to_prefix: str) -> str:
    return to_prefix + topic[len(from_prefix) :]


def _covering(prefix: str, topic: str) -> bool:
    return topic.startswith(prefix)


# -- (a) status_lied -------------------------------------------------------------------------


def check_status_rounds(rounds: Sequence[Round]) -> tuple[list[Violation], int]:
    """Invariant 9. Returns (violations, claims judged). Consecutive false
    claims of one partition on one link are one episode, reported once with
    its first and last round."""
    lies: list[tuple[tuple[str, str, int, str], int, str]] = []  # (key, round index, text)
    judged = 0
    ordered = sorted(rounds, key=lambda r: r.start_ms)
    for i, rnd in enumerate(ordered):
        for cluster, snap in sorted(rnd.clusters.items()):
            for link in snap.links.values():
                if link.state not in GOOD_STATES:
                    continue
                for row in link.rows:
                    if not row_is_claim(row):
                        continue
                    key = (cluster, row.topic, row.partition, link.name)
                    where = f"{link.state}, lag 0, t={rnd.start_ms} ms"
                    if row.position < row.source_high_watermark:
                        lies.append((key, i, (
                            f"{where}: reports position {row.position} (log end "
                            f"{row.log_end_offset}) below its own source high watermark "
                            f"{row.source_high_watermark}"
                        )))  # fmt: skip
                        continue
                    source_topic = link.follower_source(row.topic)
                    if source_topic is None:
                        continue
                    earlier = _round_before(ordered, i, row.source_hw_known_at_ms)
                    if earlier is None:
                        continue
                    src = earlier.clusters.get(link.remote)
                    now_src = rnd.clusters.get(link.remote)
                    if src is None:
                        continue
                    seen = src.partitions.get((source_topic, row.partition))
                    if seen is None:
                        continue
                    if now_src is not None:
                        later = now_src.partitions.get((source_topic, row.partition))
                        if later is not None and later.high_watermark < seen.high_watermark:
                            continue  # the source was cut back in between: not comparable
                        if now_src.topic_ids.get(source_topic) != src.topic_ids.get(
                            source_topic
                        ):
                            continue  # deleted and re-created in between
                    judged += 1
                    if row.position < seen.high_watermark:
                        lies.append((key, i, (
                            f"{where}: lets consumers read up to {row.position}, but "
                            f"{link.remote}:{source_topic}-{row.partition} had high watermark "
                            f"{seen.high_watermark} at t={earlier.start_ms}-{earlier.end_ms} ms"
                        )))  # fmt: skip
    return capped("status_lied", _episodes(lies, ordered)), judged


def _episodes(
    lies: Sequence[tuple[tuple[str, str, int, str], int, str]], ordered: Sequence[Round]
) -> list[str]:
    """One line per run of consecutive rounds in which one partition's row lied."""
    by_key: dict[tuple[str, str, int, str], list[tuple[int, str]]] = {}
    for key, i, text in lies:
        by_key.setdefault(key, []).append((i, text))
    out: list[tuple[int, str]] = []
    for (cluster, topic, partition, link), found in by_key.items():
        found.sort()
        start = 0
        for j in range(1, len(found) + 1):
            if j < len(found) and found[j][0] == found[j - 1][0] + 1:
                continue
            first, last = found[start], found[j - 1]
            span = (
                f" (and in every round to t={ordered[last[0]].start_ms} ms: {j - start} rounds)"
                if j - start > 1 else ""
            )  # fmt: skip
            out.append((first[0], f"{cluster}:{topic}-{partition} on link {link}: {first[1]}"
                                  f"{span}"))  # fmt: skip
            start = j
    return [text for _i, text in sorted(out)]


def _round_before(ordered: Sequence[Round], i: int, known_at_wall_ms: int) -> Round | None:
    """The round a claim in round i is judged against: the one before it, or,
    when the row says when it learned the source HW, the last round that
    ended before then (the source HW it claims to hold is at least that)."""
    if i == 0:
        return None
    if known_at_wall_ms <= 0:
        return ordered[i - 1]
    for j in range(i - 1, -1, -1):
        if ordered[j].wall_end_ms <= known_at_wall_ms:
            return ordered[j]
    return None


# -- (b) silent_loss -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Obligation:
    """A record some follower must receive: acked by `cluster` at (topic,
    partition, offset); the follower's name for the topic; the link."""

    op: Op
    link: str
    follower: str
    follower_topic: str
    in_sync: bool


def _last_round_before(rounds: Sequence[Round], ms: int) -> Round | None:
    best = None
    for r in rounds:
        if r.end_ms <= ms and (best is None or r.end_ms > best.end_ms):
            best = r
    return best


def _first_round_after(rounds: Sequence[Round], ms: int) -> Round | None:
    best = None
    for r in rounds:
        if r.start_ms >= ms and (best is None or r.start_ms < best.start_ms):
            best = r
    return best


def obligations(history: Iterable[Op], rounds: Sequence[Round]) -> list[Obligation]:
    """Every acknowledged send, once per follower topic it is led to: the
    acknowledging cluster described the link with a leader mapping covering
    the topic in the last round before the send and the first one after
    (every such mapping: nested ones replicate it under their own names)."""
    ordered = sorted(rounds, key=lambda r: r.start_ms)
    out: list[Obligation] = []
    for o in history:
        v = o.value
        if o.type != "ok" or not isinstance(v, Send) or not v.value or v.offset < 0:
            continue
        if o.reserved:
            continue
        before = _last_round_before(ordered, o.invoke_ms)
        after = _first_round_after(ordered, o.complete_ms)
        if before is None or after is None:
            continue
        b, a = before.clusters.get(o.cluster), after.clusters.get(o.cluster)
        if b is None or a is None:
            continue
        for name, link in sorted(b.links.items()):
            later = a.links.get(name)
            if later is None or later.remote != link.remote:
                continue
            in_sync = link.state == "IN_SYNC" and later.state == "IN_SYNC"
            for m in sorted(set(link.leading(v.topic)) & set(later.leading(v.topic))):
                out.append(Obligation(o, name, link.remote, map_topic(v.topic, m[1], m[2]),
                                      in_sync))  # fmt: skip
    return out


# A failover's report of one partition: (source HW, when it was learned, wall ms).
FailoverRows = dict[tuple[str, int], tuple[int, int]]


def failover_rows(report: Mapping[str, Any]) -> FailoverRows:
    """(topic, partition) -> (source_high_watermark, source_hw_known_at_ms)
    from a failover's report: `partitions` (every promoted partition) when
    present, and `abandoned` (the lagging ones) in any case."""
    out: FailoverRows = {}
    for key in ("abandoned", "partitions"):
        for row in report.get(key) or ():
            t, p = str(row.get("topic", "")), int(row.get("partition", -1))
            hw = int(row.get("source_high_watermark", -1))
            known = int(row.get("source_hw_known_at_ms", 0) or 0)
            out[(t, p)] = (hw, known)
    return out


def _lag_flags(report: Mapping[str, Any]) -> dict[tuple[str, int], tuple[bool | None, int]]:
    """(topic, partition) -> (lag_known, unknown_since_ms) of a failover's
    rows, where the daemon reports them (lag_known None: not reported)."""
    out: dict[tuple[str, int], tuple[bool | None, int]] = {}
    for key in ("abandoned", "partitions"):
        for row in report.get(key) or ():
            t, p = str(row.get("topic", "")), int(row.get("partition", -1))
            known = row.get("lag_known")
            since = int(row.get("unknown_since_ms", 0) or 0)
            out[(t, p)] = (None if known is None else bool(known), since)
    return out


# Per link, the windows (begin, end ms) in which the nemesis blackholed it
# (a cut in either direction, until the next heal): calls hang, no reset
# reaches either side.
CutWindows = dict[str, list[tuple[int, int]]]

_NEVER_HEALED = 1 << 62


def held_partitions(links: Mapping[str, Mapping[str, LinkSnap]]) -> set[tuple[str, str, int]]:
    """(cluster, topic, partition) of every follower partition a cluster's
    describe-link rows say it holds uncut for its own writes."""
    return {
        (cluster, row.topic, row.partition)
        for cluster, snaps in links.items()
        for snap in snaps.values()
        for row in snap.rows
        if row.own_writes_held
    }


def holding_links(links: Mapping[str, Mapping[str, LinkSnap]]) -> set[tuple[str, str]]:
    """(cluster, link) of both sides of every link one side of which holds a
    follower partition uncut for its own writes: such a link is not
    FOLLOWING (nor IN_SYNC) on either side until `recover`, by design."""
    out: set[tuple[str, str]] = set()
    for cluster, snaps in links.items():
        for name, snap in snaps.items():
            if any(row.own_writes_held for row in snap.rows):
                out |= {(cluster, name), (snap.remote, name)}
    return out


def cut_windows(steps: Iterable[tuple[str, tuple[str, ...], int]]) -> CutWindows:
    """The windows of `steps` ((op, args, applied at ms), in order) in which
    each link was cut: from a `cut` to the next `heal` of that link."""
    out: CutWindows = {}
    open_at: dict[str, int] = {}
    for op, args, at_ms in steps:
        if not args:
            continue
        link = args[0]
        if op == "cut" and link not in open_at:
            open_at[link] = at_ms
        elif op == "heal" and link in open_at:
            out.setdefault(link, []).append((open_at.pop(link), at_ms))
    for link, begin in open_at.items():
        out.setdefault(link, []).append((begin, _NEVER_HEALED))
    return out


def _cut_at(windows: CutWindows, link: str, ms: int) -> bool:
    return any(begin <= ms < end for begin, end in windows.get(link, ()))


def check_silent_loss(
    history: Iterable[Op],
    rounds: Sequence[Round],
    moves: Sequence[MoveRecord],
    final: FinalLogs,
    live: Iterable[str],
    cuts: Cuts,
    t0_wall_ms: int = 0,
    unreadable: Iterable[tuple[str, str, int]] = (),
    silent_cuts: CutWindows | None = None,
    held: Iterable[tuple[str, str, int]] = (),
) -> tuple[list[Violation], dict[str, int]]:
    """Invariant 10: every obligation (see `obligations`) is met by the
    follower's final log (the value at its offset, or anywhere in the
    partition), or excused by a report:
    - a reported truncation removed its offset, on either side
      (`recover --confirm`'s cut, a provenance `truncated` entry: `cuts`);
    - the topic was deleted (a delete-topic move on either side) after the
      send;
    - the first move after the send that ended the mapping was a detach or a
      delete-link (no report is promised), a reversal by hand past its detach
      step on the side that acknowledged it (the same detach: its wait is
      bounded, and an attach the other way that would cut these records is
      refused naming them), or an indefinite failover;
    - it was a failover on the follower whose report names the partition:
      the offset is below the reported source high watermark, or the record
      was acknowledged after the source HW was learned
      (`source_hw_known_at_ms`), unless the link was IN_SYNC around the
      send (invariant 4: nothing acknowledged in IN_SYNC may be lost); or a
      failover whose report names no row for it because the topic was
      created, or the partition added, on the source after the follower
      last learned its topic list (`topics_known_at_ms`: a status round that
      began then still found no such topic, or no such partition, on the
      source, or the operator move that made it began then or later).
    A move ends the mapping before the send unless a move that may attach it
    again came between (an attach only when it is a topic mapping covering
    the topic).
    A failover right after the source was killed, answering "lag 0, known"
    as of a round before the kill, is old news when the follower dials the
    source (the kill reset its calls), unless the nemesis had the link cut
    then (`silent_cuts`: no reset reached the follower, which finds the
    death only once its request is overdue: the race stays open).
    A follower partition held uncut for its own clients' writes at the end
    (`held`: its describe-link row says so, naming the offsets, and points
    to `recover`) copies nothing, and that row is its report; so is the row
    of the side that acknowledged the send, when that side holds it (it
    follows now, and keeps its own records uncut).
    A follower that is not live at the end, or whose final log could not be
    read (`unreadable`: (cluster, topic, partition)), is not judged.
    Wall-clock times of sends are `t0_wall_ms + complete_ms`. Returns
    (violations, counts)."""
    live_set = set(live)
    not_read = set(unreadable)
    held_set = set(held)
    counts = {"obligations": 0, "reached": 0, "excused": 0, "not_judged": 0}
    details: list[str] = []
    for ob in obligations(history, rounds):
        o, v = ob.op, ob.op.value
        assert isinstance(v, Send)
        counts["obligations"] += 1
        if (
            ob.follower not in live_set
            or o.cluster not in live_set
            or (ob.follower, ob.follower_topic, v.partition) in not_read
        ):
            counts["not_judged"] += 1
            continue
        flog = final.get((ob.follower, ob.follower_topic, v.partition))
        if flog is not None and (flog.get(v.offset) == v.value or v.value in flog.values()):
            counts["reached"] += 1
            continue
        excuse = _loss_excuse(ob, moves, cuts, t0_wall_ms, rounds, silent_cuts or {})
        if not excuse and (
            (ob.follower, ob.follower_topic, v.partition) in held_set
            or (o.cluster, v.topic, v.partition) in held_set
        ):
            # Held on the follower: it copies nothing more. Held where it was
            # acknowledged (that side follows now, e.g. after a reversal that
            # did not wait): the row names these records as its own, uncut.
            excuse = "a partition held for its own writes, and said so"
        if excuse:
            counts["excused"] += 1
            continue
        found = "the partition is missing" if flog is None else f"found {flog.get(v.offset)!r}"
        details.append(
            f"{o.process}: {v.value!r} acknowledged by {o.cluster} at {v.topic}-{v.partition} "
            f"offset {v.offset} (t={o.complete_ms} ms) while {o.cluster} led it to "
            f"{ob.follower} on link {ob.link}{' (IN_SYNC)' if ob.in_sync else ''} is not on "
            f"{ob.follower}:{ob.follower_topic}-{v.partition} ({found}), and no report names "
            f"it{_ending_text(ob, moves)}"
        )
    return capped("silent_loss", details), counts


_REATTACHING = (MoveKind.ATTACH, MoveKind.RECOVER, MoveKind.MANUAL_REVERSE, MoveKind.REVERSE,
                MoveKind.CREATE_LINK, MoveKind.RELEASE_REATTACH)  # fmt: skip
# Moves of one namespace, whose resource type says what they may attach.
_BY_NAMESPACE = (MoveKind.ATTACH, MoveKind.MANUAL_REVERSE, MoveKind.RELEASE_REATTACH)


def _detached_by_hand(rec: MoveRecord) -> bool:
    """Did this reversal by hand (`chaos.operators._manual_reverse`) reach its
    detach step, and may that step have happened: it answered ok, or it was
    the step that ended the move without a definite refusal?"""
    for step in rec.steps:
        if step.startswith("detach on "):
            return step.endswith(": ok") or rec.outcome in ("info", "error")
    return False


def _ends_mapping(rec: MoveRecord, ob: Obligation) -> bool:
    """Did this move (if it happened) end the mapping of the obligation: a
    detach of it (either side's prefix), a delete of the link, a failover
    on the follower side of the link, or a reversal by hand run on the side
    that led it, once past its detach step (it detaches there, whatever its
    wait found and whether its attach the other way was then refused)?"""
    o, v, m = ob.op, ob.op.value, rec.move
    assert isinstance(v, Send)
    if m.link != ob.link or not rec.maybe_happened:
        return False
    if m.kind is MoveKind.DELETE_LINK:
        return True
    if m.kind is MoveKind.MANUAL_REVERSE:
        # Run on the follower, it reverses the other direction (it is what
        # made the follower's source lead): that ends nothing owed here.
        return (
            m.resource_type == "topic"
            and m.cluster == o.cluster
            and _covering(m.local_prefix, v.topic)
            and _detached_by_hand(rec)
        )
    if m.kind is MoveKind.RELEASE_REATTACH:
        # It detaches on the follower first.
        return m.cluster == ob.follower and _covering(m.local_prefix, ob.follower_topic)
    if m.kind is MoveKind.DETACH and m.resource_type == "topic":
        return (m.cluster == o.cluster and _covering(m.local_prefix, v.topic)) or (
            m.cluster == ob.follower and _covering(m.local_prefix, ob.follower_topic)
        )
    return m.kind is MoveKind.FAILOVER and m.cluster == ob.follower


def _ending(ob: Obligation, moves: Sequence[MoveRecord]) -> tuple[MoveRecord | None, bool]:
    """(the move that ended the mapping, whether it ended before the send
    was invoked). The last such move that ended before the send (the
    acknowledging side not having learned of it yet), unless a move that
    may have attached the mapping again came between; else the first one
    after the send. A move after the send does not end a mapping an earlier
    one ended already (a second failover of a follower that failed over
    finds nothing to promote, and its empty report is no answer for it)."""
    o = ob.op
    ordered = sorted(moves, key=lambda r: r.begin_ms)
    earlier: MoveRecord | None = None
    for rec in ordered:
        if rec.end_ms >= o.invoke_ms:
            break
        if _ends_mapping(rec, ob):
            earlier = rec
        elif earlier is not None and rec.move.link == ob.link and rec.maybe_happened and (
            _may_reattach(rec, ob)
        ):
            earlier = None
    if earlier is not None:
        return earlier, True
    for rec in ordered:
        if rec.end_ms >= o.invoke_ms and _ends_mapping(rec, ob):
            return rec, False
    return None, False


def _may_reattach(rec: MoveRecord, ob: Obligation) -> bool:
    """Could this move have attached the obligation's mapping again? An
    attach only when it is a topic mapping covering the topic on its side
    (a group mapping, or a prefix beside the topic, attaches nothing of it);
    a reversal by hand or a release-and-reattach of a group namespace
    attaches no topic either."""
    m, v = rec.move, ob.op.value
    assert isinstance(v, Send)
    if m.kind in _BY_NAMESPACE and m.resource_type != "topic":
        return False
    if m.kind is not MoveKind.ATTACH:
        return m.kind in _REATTACHING
    return (m.cluster == ob.op.cluster and _covering(m.local_prefix, v.topic)) or (
        m.cluster == ob.follower and _covering(m.local_prefix, ob.follower_topic)
    )


def _created_after(rounds: Sequence[Round], cluster: str, topic: str, wall_ms: int) -> bool:
    """Did `cluster` create `topic` after `wall_ms` (wall clock)? A status
    round that began then or later still found no such topic there."""
    return any(
        r.wall_start_ms >= wall_ms
        and cluster in r.clusters
        and r.clusters[cluster].partitions
        and not any(t == topic for t, _p in r.clusters[cluster].partitions)
        for r in rounds
    )


def _partition_added_after(
    rounds: Sequence[Round], cluster: str, topic: str, partition: int, wall_ms: int
) -> bool:
    """Did `cluster` add `partition` to `topic` after `wall_ms` (wall clock)?
    A status round that began then or later found the topic there without
    that partition."""
    return any(
        r.wall_start_ms >= wall_ms
        and cluster in r.clusters
        and any(t == topic for t, _p in r.clusters[cluster].partitions)
        and (topic, partition) not in r.clusters[cluster].partitions
        for r in rounds
    )


def _made_by_move_after(
    moves: Sequence[MoveRecord], cluster: str, topic: str, partition: int, wall_ms: int
) -> bool:
    """An operator made `topic` on `cluster` (`partition` -1), or grew it past
    `partition`, after `wall_ms`: the last such move that may have happened
    began then or later."""
    kind = MoveKind.CREATE_TOPIC if partition < 0 else MoveKind.ADD_PARTITIONS
    made = [
        rec
        for rec in moves
        if rec.move.kind is kind
        and rec.move.cluster == cluster
        and rec.move.topic == topic
        and rec.move.partitions > partition
        and rec.maybe_happened
    ]
    return bool(made) and max(rec.wall_begin_ms for rec in made) >= wall_ms > 0


def _ending_text(ob: Obligation, moves: Sequence[MoveRecord]) -> str:
    rec, _before = _ending(ob, moves)
    if rec is None:
        return " (the mapping was never ended by a move)"
    return f" ({rec.move.describe()} at t={rec.begin_ms} ms: {_report_text(rec, ob)})"


def _report_text(rec: MoveRecord, ob: Obligation) -> str:
    v = ob.op.value
    assert isinstance(v, Send)
    rows = failover_rows(rec.report)
    row = rows.get((ob.follower_topic, v.partition))
    if row is None:
        return "its report does not name the partition"
    hw, known = row
    return f"its report names the partition with source HW {hw}, learned at {known}"


def _loss_excuse(
    ob: Obligation,
    moves: Sequence[MoveRecord],
    cuts: Cuts,
    t0_wall_ms: int,
    rounds: Sequence[Round] = (),
    silent_cuts: CutWindows | None = None,
) -> str:
    o, v = ob.op, ob.op.value
    assert isinstance(v, Send)
    for key in (
        (o.cluster, v.topic, v.partition),
        (ob.follower, ob.follower_topic, v.partition),
    ):
        if any(lo <= v.offset < hi for lo, hi in cuts.get(key, [])):
            return "truncation reported"
    for rec in moves:
        m = rec.move
        if m.kind is not MoveKind.DELETE_TOPIC or rec.end_ms < o.invoke_ms:
            continue
        if not rec.maybe_happened:
            continue
        if (m.cluster, m.topic) in ((o.cluster, v.topic), (ob.follower, ob.follower_topic)):
            return "topic deleted"
    ending, before_send = _ending(ob, moves)
    if ending is None:
        return ""
    if before_send:
        return f"ended by {ending.move.kind.value} before the send"
    if ending.move.kind is not MoveKind.FAILOVER:
        return f"ended by {ending.move.kind.value}"
    if ending.outcome != "ok":
        return "failover without an answer"
    if ob.in_sync:
        return ""
    row = failover_rows(ending.report).get((ob.follower_topic, v.partition))
    if row is None:
        # The report says from when the follower knew the source's topics:
        # a topic created after that is in no row, and the report says so.
        known = int(ending.report.get("topics_known_at_ms") or 0)
        if known > 0 and (
            _created_after(rounds, o.cluster, v.topic, known)
            or _made_by_move_after(moves, o.cluster, v.topic, -1, known)
        ):
            return "its topic was created after the follower last learned the topic list"
        if known > 0 and (
            _partition_added_after(rounds, o.cluster, v.topic, v.partition, known)
            or _made_by_move_after(moves, o.cluster, v.topic, v.partition, known)
        ):
            return "its partition was added after the follower last learned the topic list"
        return ""
    hw, known = row
    if v.offset < hw:
        return "below the reported source high watermark"
    lag_known, since = _lag_flags(ending.report).get((ob.follower_topic, v.partition), (None, 0))
    if lag_known is False and since < 0:
        return "its lag was never learned, the failover said"
    if lag_known is False and since > 0:
        known = since
    if (
        ending.move.kill_source
        and o.cluster == ending.move.peer
        and o.complete_ms > ending.end_ms
        and f"started {ending.move.peer} again" in ending.steps
    ):
        # The killed source, started again once the failover had answered,
        # acknowledged it: the follower had left the link by then, and the
        # old leader keeps leading its side until it learns of the detach or
        # runs recover (docs/operations.md, "Failover"). Its log holds it.
        return "acknowledged by the killed source, started again after the failover"
    if (
        lag_known is True
        and ending.move.kill_source
        and not _source_dials(ending, moves)
        and not _cut_at(silent_cuts or {}, ending.move.link, ending.begin_ms)
    ):
        # "Known" right after the source was killed is old news: nothing
        # acknowledged after the last round is named. Not so when the source
        # dials the link (it pushes), nor when the nemesis had the link cut
        # at the kill: the death resets no call the follower waits on, and
        # the follower finds it out as a silent cut, once its request is
        # overdue (docs/operations.md, "When a follower partition's lag is
        # known"): until then the race stays open.
        known = 0
    if known > 0 and t0_wall_ms + o.complete_ms >= known:
        return "acknowledged after the source HW was learned"
    return ""


def _source_dials(failover: MoveRecord, moves: Sequence[MoveRecord]) -> bool:
    """Whether the source of a failover's link dials it (a pushed link), as
    the last create-link move of that link between the two clusters made it
    before the failover (links the run creates itself: the follower dials)."""
    m = failover.move
    creates = [
        rec
        for rec in moves
        if rec.move.kind is MoveKind.CREATE_LINK
        and rec.move.link == m.link
        and {rec.move.cluster, rec.move.peer} == {m.cluster, m.peer}
        and rec.maybe_happened
        and rec.begin_ms <= failover.begin_ms
    ]
    if not creates:
        return False
    made = max(creates, key=lambda rec: rec.begin_ms).move
    return (made.cluster == m.peer) != made.remote_dials


# -- (b') silent_loss at the schedule's failovers -------------------------------------------


@dataclass(frozen=True, slots=True)
class FailoverCut:
    """A cut a failover's answer reported (its `truncated` rows): the
    partition now ends at `truncate_to`, `removed` records above it gone."""

    topic: str
    partition: int
    truncate_to: int
    removed: int

    def covers(self, offset: int) -> bool:
        return self.truncate_to <= offset < self.truncate_to + self.removed


@dataclass(frozen=True, slots=True)
class FailoverAnswer:
    """One failover step of a schedule (`failover --force` on `promoted`,
    the follower of `link` to `source`) and what its answer said, for
    `check_failover_loss`. Times: `begun_ms` and `answered_ms` are the run's
    clock; the rows' times and `topics_known_at_ms` are the daemon's wall
    clock (ms since the epoch)."""

    promoted: str
    source: str
    link: str
    begun_ms: int
    answered_ms: int
    # (topic, partition) -> the answer's row: every partition it made
    # writable (`partitions`), and those it names as abandoned (`abandoned`).
    rows: Mapping[tuple[str, int], FailoverRow]
    truncated: tuple[FailoverCut, ...] = ()
    # The source's topics as known from this time on (wall ms; 0: never):
    # a partition created later is in no row.
    topics_known_at_ms: int = 0
    # The follower's topic namespaces it made writable (links of chaos runs
    # keep topic names: "orders-" follows "orders-").
    prefixes: tuple[str, ...] = ()
    # `FailoverRow.names`' `source_live`: see `source_live_at`.
    source_live: bool = True


def failover_row(d: Mapping[str, Any]) -> FailoverRow:
    """A `FailoverRow` from one row of a failover's answer (the admin
    client's dict: `_lag_dict`); an older daemon without `lag_known` says a
    lag is known when it is not negative. Times stay wall-clock ms."""
    known = d.get("lag_known")
    return FailoverRow(
        log_end_offset=int(d.get("log_end_offset", -1)),
        source_high_watermark=int(d.get("source_high_watermark", -1)),
        known_at_ms=int(d.get("source_hw_known_at_ms", 0) or 0),
        lag_known=bool(known) if known is not None else int(d.get("lag_records", -1)) >= 0,
        unknown_since_ms=int(d.get("unknown_since_ms", 0) or 0),
    )


def failover_answer(
    result: FailoverResult,
    promoted: str,
    source: str,
    link: str,
    begun_ms: int,
    answered_ms: int,
    source_live: bool,
) -> FailoverAnswer:
    """What the admin client's `FailoverResult` says, typed for the judge.
    As the simulator reads an answer (`sim.world.failover_report`), a row of
    `partitions` wins over one of `abandoned` for the same partition."""
    rows: dict[tuple[str, int], FailoverRow] = {}
    for d in [*result.abandoned, *result.partitions]:
        rows[(str(d.get("topic", "")), int(d.get("partition", -1)))] = failover_row(d)
    return FailoverAnswer(
        promoted=promoted,
        source=source,
        link=link,
        begun_ms=begun_ms,
        answered_ms=answered_ms,
        rows=rows,
        truncated=tuple(
            FailoverCut(
                str(c["topic"]),
                int(c["partition"]),
                int(c["truncate_to"]),
                int(c["records_removed"]),
            )
            for c in result.truncated
        ),
        topics_known_at_ms=int(result.topics_known_at_ms or 0),
        prefixes=tuple(ns.prefix for ns in result.namespaces if ns.type == "topic"),
        source_live=source_live,
    )


def source_live_at(
    steps: Iterable[tuple[str, tuple[str, ...], int]], source: str, link: str, at_ms: int
) -> bool:
    """`FailoverRow.names`' `source_live` for a schedule's failover of `link`
    begun at `at_ms` (run clock), from the schedule's steps as applied ((op,
    args, applied at ms), in order): False only when the source had been
    killed (`kill` or `lose`, and no `restart` since) and the link was not
    cut then. The links a schedule makes are dialed by the follower, through
    the link's proxy: a kill resets the follower's calls at once, so "lag
    known" from before it is old news, and records acknowledged after the
    round it dates from are lost unnamed. Through a cut (the proxy drops the
    traffic, resets nothing) the follower finds the death only once its
    request is overdue, and a paused source (SIGSTOP) resets nothing either:
    the race stays open, as with a live source (the simulator's
    `source_news_current`, with the cut's own window for its answer bound)."""
    ordered = [s for s in steps if s[2] <= at_ms]
    down = False
    for op, args, _at in ordered:
        if args and args[0] == source:
            if op in ("kill", "lose"):
                down = True
            elif op == "restart" and down:
                down = False
    if not down:
        return True
    return _cut_at(cut_windows(ordered), link, at_ms)


def _said(answer: FailoverAnswer, topic: str, partition: int, t0_wall_ms: int) -> str:
    """What a failover's answer said of one partition, for a detail."""

    def run_ms(wall: int) -> str:
        return "never" if wall <= 0 else f"t={wall - t0_wall_ms} ms"

    row = answer.rows.get((topic, partition))
    reach = "reachable" if answer.source_live else "down, and the follower could tell"
    if row is None:
        said = (
            f"has no row for {topic}-{partition} (it knew the source's topics from "
            f"{run_ms(answer.topics_known_at_ms)})"
        )
    else:
        lag = (
            f"lag known (learned at {run_ms(row.known_at_ms)})"
            if row.lag_known
            else f"lag unknown since {run_ms(row.unknown_since_ms)}"
        )
        said = (
            f"says log end {row.log_end_offset}, source high watermark "
            f"{row.source_high_watermark}, {lag}"
        )
    cuts = [c for c in answer.truncated if (c.topic, c.partition) == (topic, partition)]
    if cuts:
        said += "; cut " + ", ".join(f"to {c.truncate_to} removing {c.removed}" for c in cuts)
    return f"{said}; its source {answer.source} was {reach}"


def check_failover_loss(
    history: Iterable[Op],
    answers: Sequence[FailoverAnswer],
    final: FinalLogs,
    live: Iterable[str],
    cuts: Cuts,
    t0_wall_ms: int = 0,
    unreadable: Iterable[tuple[str, str, int]] = (),
    created_ms: Mapping[tuple[str, str], int] | None = None,
    deleted: Deleted | None = None,
) -> tuple[list[Violation], dict[str, int]]:
    """Invariant 10 at a schedule's failovers: every record the source of
    a failed-over link acknowledged before the answer came (run clock:
    `complete_ms <= answered_ms`) that the promoted cluster's final log
    lacks at its offset (links keep offsets, and names) must be named by
    that answer, as the simulator judges it (`sim.status_checks`):
    - by its partition's row (`FailoverRow.names`: at or above the row's
      log end and below the source high watermark it reported, or in a lag
      unknown since before the acknowledgement, or, from a source still
      live, in flight after the round a known lag dates from:
      `FailoverAnswer.source_live`); the acknowledgement's wall-clock time
      is `t0_wall_ms + complete_ms`, the rows' are the daemon's;
    - by a cut the answer reported (its `truncated` rows);
    - or, with no row for its partition, by the partition having been
      created after what the answer says it knew (`topics_known_at_ms`):
      `created_ms` ((source, topic) -> wall ms its creation had answered)
      for topics the run created; for others, the acknowledgement at or
      after that time (the simulator's rule).
    Excused as chaos excuses any record: a reported truncation over its
    offset on either side (`cuts`: a failover's, an unclean election's, a
    recovery's), or the promoted cluster's own retention (`deleted`).
    Present at another offset is not this judge's (invariants 1, 2).
    Records in a topic outside the answer's namespaces are not owed by it;
    a promoted cluster that is not live at the end, or a final log not read
    whole (`unreadable`), is not judged.
    Returns (violations, counts): `failover_records_judged` (records
    lacking, judged against an answer), `failover_records_named` (of them,
    named or excused), `failover_records_not_judged`."""
    live_set = set(live)
    not_read = set(unreadable)
    created = created_ms or {}
    counts = {
        "failover_records_judged": 0,
        "failover_records_named": 0,
        "failover_records_not_judged": 0,
    }
    details: list[str] = []
    sends = [
        o for o in history
        if o.type == "ok" and isinstance(o.value, Send) and o.value.value and o.value.offset >= 0
    ]  # fmt: skip
    for answer in answers:
        for o in sends:
            v = o.value
            assert isinstance(v, Send)
            if o.cluster != answer.source or o.complete_ms > answer.answered_ms:
                continue
            if not any(v.topic.startswith(p) for p in answer.prefixes):
                continue
            key = (answer.promoted, v.topic, v.partition)
            held = final.get(key, {})
            if held.get(v.offset) == v.value or v.value in held.values():
                continue
            if answer.promoted not in live_set or key in not_read:
                counts["failover_records_not_judged"] += 1
                continue
            counts["failover_records_judged"] += 1
            acked_wall = t0_wall_ms + o.complete_ms
            if _failover_names(answer, v, acked_wall, created) or _cut_excuse(
                answer, v, cuts, deleted
            ):
                counts["failover_records_named"] += 1
                continue
            details.append(
                f"{v.value!r} acknowledged by {answer.source} at {v.topic}-{v.partition}@"
                f"{v.offset} (t={o.complete_ms} ms) is not on {answer.promoted} "
                f"(found {held.get(v.offset)!r}), which failed over link {answer.link} at "
                f"t={answer.begun_ms} ms (answered t={answer.answered_ms} ms), and its answer "
                f"does not name it: it {_said(answer, v.topic, v.partition, t0_wall_ms)}"
            )
    return capped("silent_loss", details), counts


def _failover_names(
    answer: FailoverAnswer, v: Send, acked_wall_ms: int, created: Mapping[tuple[str, str], int]
) -> str:
    """How the answer names a record its promoted cluster lacks ("": it does not)."""
    if any(c.topic == v.topic and c.partition == v.partition and c.covers(v.offset)
           for c in answer.truncated):  # fmt: skip
        return "a cut the failover reported"
    row = answer.rows.get((v.topic, v.partition))
    if row is None:
        known = answer.topics_known_at_ms
        made = created.get((answer.source, v.topic))
        if (made if made is not None else acked_wall_ms) >= known:
            return "in a partition created after what the failover said it knew"
        return ""
    return row.names(v.offset, acked_wall_ms, answer.source_live) or ""


def _cut_excuse(answer: FailoverAnswer, v: Send, cuts: Cuts, deleted: Deleted | None) -> str:
    for key in ((answer.source, v.topic, v.partition), (answer.promoted, v.topic, v.partition)):
        if any(lo <= v.offset < hi for lo, hi in cuts.get(key, [])):
            return "truncation reported"
    if was_deleted(deleted, (answer.promoted, v.topic, v.partition), v.offset):
        return "deleted by the promoted cluster's own retention"
    return ""


def namespace_reserved(snap: ClusterSnap, topic: str) -> bool:
    """Is the topic namespace that covers `topic` on this cluster (the longest
    prefix) reserved? No namespace covers it: no."""
    best: tuple[int, bool] | None = None
    for (rtype, prefix), (reserved, _att) in snap.namespaces.items():
        if rtype == "topic" and topic.startswith(prefix):
            if best is None or len(prefix) > best[0]:
                best = (len(prefix), reserved)
    return best is not None and best[1]


def reserved_throughout(op: Op, rounds: Sequence[Round], moves: Sequence[MoveRecord]) -> bool:
    """Invariant 3 with the topology changing under the run: was the namespace
    of an accepted write reserved in the status round before the write and
    in the one after it, with no operator move in between (only moves change
    a reservation)?"""
    v = op.value
    if not isinstance(v, Send):
        return False
    ordered = sorted(rounds, key=lambda r: r.start_ms)
    before = _last_round_before(ordered, op.invoke_ms)
    after = _first_round_after(ordered, op.complete_ms)
    if before is None or after is None:
        return False
    for r in (before, after):
        snap = r.clusters.get(op.cluster)
        if snap is None or not namespace_reserved(snap, v.topic):
            return False
    return not any(
        m.maybe_happened and m.begin_ms <= after.end_ms and m.end_ms >= before.start_ms
        for m in moves
    )


# -- (c) hanging_transaction -----------------------------------------------------------------


def _following_badly(snap: ClusterSnap, topic: str) -> bool:
    """Does the cluster follow `topic` over a link that is not FOLLOWING or
    IN_SYNC (its LSO then waits for markers it cannot fetch yet)?"""
    return any(
        link.state not in GOOD_STATES and link.follower_source(topic) is not None
        for link in snap.links.values()
    )


def check_hanging_transactions(
    final_offsets: Mapping[tuple[str, str, int], tuple[int, int]],
    checked_ms: int,
    open_until_ms: Mapping[str, int],
    timeout_ms: int,
    bound_ms: int,
    rounds: Sequence[Round] = (),
    not_converged: Iterable[tuple[str, str]] = (),
) -> list[Violation]:
    """Invariant 11. `final_offsets`: (cluster, topic, partition) -> (HW, LSO)
    read at `checked_ms` on every live cluster; `open_until_ms`: per cluster,
    the last time a producer may have begun a transaction there (its
    transactions may legitimately stay open `timeout_ms` after that). At the
    end, LSO < HW is a violation when `checked_ms` is past every such
    transaction's timeout plus `bound_ms`. During the run (`rounds`), an LSO
    that stays at one value below the HW for longer than `timeout_ms +
    bound_ms` is one too, except on a follower whose link is not FOLLOWING
    or IN_SYNC then. Follower topics whose link did not converge
    (`not_converged`: (cluster, topic)) are not judged at the end (the
    liveness judgement names them)."""
    details: list[str] = []
    skip = set(not_converged)
    for (cluster, topic, partition), (hw, lso) in sorted(final_offsets.items()):
        if lso >= hw or (cluster, topic) in skip:
            continue
        allowed = open_until_ms.get(cluster, -(10**12)) + timeout_ms + bound_ms
        if checked_ms <= allowed:
            continue
        details.append(
            f"{cluster}:{topic}-{partition}: last stable offset {lso} below the high "
            f"watermark {hw} at the end (t={checked_ms} ms), past every transaction's "
            f"timeout ({timeout_ms} ms) plus {bound_ms} ms"
        )
    stuck: dict[tuple[str, str, int], tuple[int, int]] = {}  # -> (lso, since)
    reported: set[tuple[str, str, int]] = set()
    for rnd in sorted(rounds, key=lambda r: r.start_ms):
        for cluster, snap in rnd.clusters.items():
            for (topic, partition), ps in snap.partitions.items():
                key = (cluster, topic, partition)
                if ps.last_stable_offset >= ps.high_watermark or _following_badly(snap, topic):
                    stuck.pop(key, None)
                    continue
                lso, since = stuck.get(key, (-1, rnd.start_ms))
                if lso != ps.last_stable_offset:
                    stuck[key] = (ps.last_stable_offset, rnd.start_ms)
                    continue
                if rnd.end_ms - since > timeout_ms + bound_ms and key not in reported:
                    reported.add(key)
                    details.append(
                        f"{cluster}:{topic}-{partition}: last stable offset stayed at {lso} "
                        f"below the high watermark ({ps.high_watermark}) from t={since} ms to "
                        f"t={rnd.end_ms} ms, longer than the transaction timeout "
                        f"({timeout_ms} ms) plus {bound_ms} ms"
                    )
    return capped("hanging_transaction", details)


# -- (d) config_diverged -----------------------------------------------------------------------


def swapped(m: MappingKey) -> MappingKey:
    return (m[0], m[2], m[1], SWAP.get(m[3], "?"))


def config_differences(
    links: Mapping[str, Mapping[str, LinkSnap]], live: Iterable[str]
) -> list[str]:
    """Invariant 7 on every link: `links` is cluster -> link name -> its
    description there. Each link that a live cluster holds must exist on its
    remote too (when live), with the same mode, the same mappings and the
    same refused mappings once swapped."""
    live_set = set(live)
    out: list[str] = []
    seen: set[frozenset[str]] = set()
    for cluster in sorted(links):
        for name, mine in sorted(links[cluster].items()):
            other = mine.remote
            pair = frozenset((f"{cluster}/{name}", f"{other}/{name}"))
            if pair in seen or other not in live_set or cluster not in live_set:
                continue
            seen.add(pair)
            theirs = links.get(other, {}).get(name)
            if theirs is None:
                out.append(f"link {name} exists on {cluster} but not on {other}")
                continue
            if mine.mode != theirs.mode:
                out.append(f"link {name}: mode {mine.mode} on {cluster}, {theirs.mode} on {other}")
            for what, a, b in (
                ("mappings", mine.mappings, theirs.mappings),
                ("refused mappings", mine.refused, theirs.refused),
            ):
                left, right = sorted(a), sorted(swapped(m) for m in b)
                if left != right:
                    out.append(
                        f"link {name}: {what} differ ({cluster}: {left}; {other}, swapped: "
                        f"{right})"
                    )
    return out


def check_config(
    links: Mapping[str, Mapping[str, LinkSnap]], live: Iterable[str]
) -> list[Violation]:
    return capped("config_diverged", config_differences(links, live))


# -- (e) admin_effect_missing ------------------------------------------------------------------

# Moves after which an earlier move's effect on a link may legitimately be gone.
# A release-reattach detaches first: refused at its attach, it has ended the
# mapping (`MoveRecord.maybe_happened` says whether it got that far).
_CHANGES_MAPPINGS = (
    MoveKind.ATTACH, MoveKind.DETACH, MoveKind.MANUAL_REVERSE, MoveKind.REVERSE,
    MoveKind.FAILOVER, MoveKind.RECOVER, MoveKind.DELETE_LINK, MoveKind.CREATE_LINK,
    MoveKind.RELEASE_REATTACH,
)  # fmt: skip
_CHANGES_MODE = (MoveKind.SET_MODE, MoveKind.FAILOVER, MoveKind.DELETE_LINK,
                 MoveKind.CREATE_LINK, MoveKind.REVERSE, MoveKind.RECOVER)  # fmt: skip
_CHANGES_EXISTENCE = (MoveKind.CREATE_LINK, MoveKind.DELETE_LINK)


def _attachment_ok(
    namespaces: Mapping[tuple[str, str], tuple[bool, tuple[str, ...]]],
    rtype: str,
    prefix: str,
    link: str,
    role: str,
) -> bool:
    entry = namespaces.get((rtype, prefix))
    return entry is not None and f"{link}:{role}" in entry[1]


def check_admin_effects(
    moves: Sequence[MoveRecord],
    links: Mapping[str, Mapping[str, LinkSnap]],
    namespaces: Mapping[str, Mapping[tuple[str, str], tuple[bool, tuple[str, ...]]]],
    live: Iterable[str],
) -> tuple[list[Violation], int]:
    """Invariant 12, on the final configurations (`links`: cluster -> name ->
    description; `namespaces`: cluster -> (type, prefix) -> (reserved,
    attachments)). For each move that answered success and that no later
    move on the same link could have undone:
    - attach: the mapping on both sides (swapped), and each side's namespace
      attached to the link in its role (unless the mapping is listed as
      refused, which is a report);
    - detach: the mapping on neither side;
    - set-mode: the mode on both sides;
    - create-link: the link on both sides; delete-link: on neither.
    Returns (violations, effects judged)."""
    live_set = set(live)
    details: list[str] = []
    judged = 0
    ordered = sorted(moves, key=lambda r: r.begin_ms)
    for i, rec in enumerate(ordered):
        m = rec.move
        if rec.outcome != "ok" or m.kind not in (
            MoveKind.ATTACH, MoveKind.DETACH, MoveKind.SET_MODE, MoveKind.CREATE_LINK,
            MoveKind.DELETE_LINK,
        ):  # fmt: skip
            continue
        later = [r for r in ordered[i + 1 :] if r.move.link == m.link and r.maybe_happened]
        changers: tuple[MoveKind, ...]
        if m.kind is MoveKind.SET_MODE:
            changers = _CHANGES_MODE
        elif m.kind in _CHANGES_EXISTENCE:
            changers = _CHANGES_EXISTENCE
        else:
            changers = _CHANGES_MAPPINGS
        if any(r.move.kind in changers for r in later):
            continue
        here = m.cluster
        mine = links.get(here, {}).get(m.link)
        peer = m.peer if m.kind is MoveKind.CREATE_LINK else (mine.remote if mine else "")
        if here not in live_set or (peer and peer not in live_set):
            continue
        theirs = links.get(peer, {}).get(m.link) if peer else None
        what = f"{m.describe()} answered success at t={rec.end_ms} ms"
        judged += 1
        if m.kind is MoveKind.DELETE_LINK:
            gone = [c for c in sorted(links) if m.link in links[c] and c in live_set]
            if gone:
                details.append(f"{what}, but the link still exists on {', '.join(gone)}")
            continue
        if mine is None or theirs is None:
            missing = [c for c, x in ((here, mine), (peer or "its remote", theirs)) if x is None]
            details.append(f"{what}, but the link is missing on {', '.join(missing)}")
            continue
        if m.kind is MoveKind.CREATE_LINK:
            continue
        if m.kind is MoveKind.SET_MODE:
            wrong = [(c, x.mode) for c, x in ((here, mine), (peer, theirs)) if x.mode != m.mode]
            if wrong:
                details.append(f"{what}, but the mode is " + ", ".join(
                    f"{mode} on {c}" for c, mode in wrong))  # fmt: skip
            continue
        rtype = m.resource_type
        if m.kind is MoveKind.DETACH:
            left = [x for x in mine.mappings if (x[0], x[1]) == (rtype, m.local_prefix)]
            if left:
                details.append(f"{what}, but {here} still maps it: {left}")
            continue
        key: MappingKey = (rtype, m.local_prefix, m.remote_prefix, m.leader)
        if key in mine.refused or swapped(key) in theirs.refused:
            continue  # reported as refused: not silent
        problems: list[str] = []
        if key not in mine.mappings:
            problems.append(f"{here} does not map it ({list(mine.mappings)})")
        if swapped(key) not in theirs.mappings:
            problems.append(f"{peer} does not map it swapped ({list(theirs.mappings)})")
        role = "leader" if m.leader == "local" else "follower"
        other_role = "follower" if role == "leader" else "leader"
        if not _attachment_ok(namespaces.get(here, {}), rtype, m.local_prefix, m.link, role):
            problems.append(f"{here}'s {rtype} namespace {m.local_prefix!r} is not attached "
                            f"to {m.link} as {role}")  # fmt: skip
        if not _attachment_ok(
            namespaces.get(peer, {}), rtype, m.remote_prefix, m.link, other_role
        ):
            problems.append(f"{peer}'s {rtype} namespace {m.remote_prefix!r} is not attached "
                            f"to {m.link} as {other_role}")  # fmt: skip
        if problems:
            details.append(f"{what}, but " + "; ".join(problems))
    return capped("admin_effect_missing", details), judged


# -- refusal_missing ---------------------------------------------------------------------------

FAR_BEHIND = 100  # records: a follower row this far behind is not "within the lag bound"


def _behind(snap: ClusterSnap, link: str) -> str:
    """Why the link on this cluster is far from FOLLOWING ("" when it is not)."""
    ls = snap.links.get(link)
    if ls is None:
        return ""
    if ls.state == "DISCONNECTED":
        return "DISCONNECTED"
    lag = max((r.lag_records for r in ls.rows if r.role == "follower"), default=0)
    return f"{ls.state}, {lag} records behind" if lag >= FAR_BEHIND else ""


def check_refusals(moves: Sequence[MoveRecord], rounds: Sequence[Round]) -> list[Violation]:
    """Calls the contract says must be refused but that answered success
    (spec section 4): `set-mode SYNC` unless the link is FOLLOWING, and
    `failover` without `--force` unless it is FOLLOWING / IN_SYNC with lag 0.
    Judged only when the two status rounds before the call both showed the
    calling cluster's side of the link far from it (DISCONNECTED, or a
    follower partition at least FAR_BEHIND records behind), so that a link
    that recovered in between is not named."""
    ordered = sorted(rounds, key=lambda r: r.start_ms)
    details: list[str] = []
    for rec in moves:
        m = rec.move
        if rec.outcome != "ok":
            continue
        if not (m.kind is MoveKind.SET_MODE and m.mode == "SYNC") and not (
            m.kind is MoveKind.FAILOVER and not m.force
        ):
            continue
        before = [r for r in ordered if r.end_ms <= rec.begin_ms][-2:]
        if len(before) < 2:
            continue
        why = [_behind(r.clusters.get(m.cluster, ClusterSnap()), m.link) for r in before]
        if all(why):
            details.append(
                f"{m.describe()} answered success at t={rec.end_ms} ms although the link was "
                f"{why[-1]} on {m.cluster} (t={before[0].start_ms}-{before[-1].end_ms} ms)"
            )
    return capped("refusal_missing", details)


# -- parsing what the admin client answers (fields may be missing on older daemons) ----------


def row_of(d: Mapping[str, Any]) -> Row:
    lag = int(d.get("lag_records", -1))
    known = d.get("lag_known")
    return Row(
        topic=str(d.get("topic", "")),
        partition=int(d.get("partition", -1)),
        role=str(d.get("role", "")),
        lag_records=lag,
        log_end_offset=int(d.get("log_end_offset", -1)),
        source_high_watermark=int(d.get("source_high_watermark", -1)),
        lag_known=bool(known) if known is not None else lag >= 0,
        source_hw_known_at_ms=int(d.get("source_hw_known_at_ms", 0) or 0),
        high_watermark=int(d.get("high_watermark", -1)),
        own_writes_held=bool(d.get("own_writes_held", False)),
    )


def mapping_key(d: Mapping[str, Any]) -> MappingKey:
    return (
        str(d.get("type", "")),
        str(d.get("local_prefix", "")),
        str(d.get("remote_prefix", "")),
        str(d.get("leader", "")),
    )


def link_snap(info: Any) -> LinkSnap:
    """A LinkSnap from an admin `LinkInfo` (or anything with the same
    attributes); `refused_mappings` is read when the daemon reports it."""
    refused = getattr(info, "refused_mappings", None) or ()
    return LinkSnap(
        name=str(info.name),
        local=str(info.local_cluster_id),
        remote=str(info.remote_cluster_id),
        state=str(info.state),
        mode=str(info.mode),
        mappings=tuple(sorted(mapping_key(m) for m in info.mappings)),
        refused=tuple(sorted(mapping_key(m) for m in refused)),
        rows=tuple(row_of(p) for p in info.partitions),
    )


FAMILY_RE = re.compile(r"^(r-)*")


def in_family(topic: str, families: Iterable[str]) -> bool:
    """Is the topic in one of the families, also under renamed prefixes
    ("r-orders-x" is in the family "orders-")?"""
    rest = topic[FAMILY_RE.match(topic).end() :]  # type: ignore[union-attr]
    return any(rest.startswith(f) for f in families)
