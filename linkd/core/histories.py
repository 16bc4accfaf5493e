"""Partition histories and where two of them part (spec sections 5 and 8).

Rules:
- Each partition's provenance history says where ranges of its offsets came
  from: `{start, source, link_id, link_epoch}` (copied from `source` from
  `start` on), `{detached_at, link_id}` (the link's data ends there; later
  offsets were written here) and `{truncated_to, link_id, removed}` (the log
  was cut there; what followed is gone). Offsets before any entry were
  written by the cluster itself. A later entry at or below an earlier one
  rewrites history from its offset on.
- Two partitions hold the same record at offset o when the *root origin* of
  o is the same on both sides. The root origin is the origin the provenance
  names, resolved through the other side's history when it names the other
  side (a range copied from the remote is the remote's range, whatever the
  remote's own origin there). Ranges copied from one origin are prefixes of
  that origin's log, so two sides that copied from the same cluster agree up
  to the shorter copy.
- The leader-epoch histories refine this as Kafka's OffsetsForLeaderEpoch
  does: the logs agree only while the epoch at every offset agrees, which
  catches an origin that truncated and rewrote after one side copied.
- The last common offset is the first offset, from the higher of the two log
  start offsets, where either rule says the logs differ, at most the shorter
  log end. Where no record is common, the empty prefix at the log start is
  (reason "log-start"); a remote partition holding nothing shares its empty
  history with anything ("remote-empty"); a local log that ends below the
  remote's log start restarts there ("behind-log-start").

Unclean link recovery (`recovery`) compares two sides on an operator's
request; a follower's first fetch after its history changed (`link_rounds`)
is compared the same way by its source, so records written on the follower
are never taken for the source's (leader epochs are numbered per cluster and
cannot tell two clusters' writes apart).

Pure code: functions of plain data and of ClusterState.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Protocol

from linkd.core.cluster import ClusterState
from linkd.core.partition import BatchEntry, PartitionLog
from linkd.core.provenance import ProvenanceItem, ProvenanceKind
from linkd.core.records import CONTROL_COMMIT

# How deep the root-origin resolution follows the two histories into each
# other (local -> remote -> local); a cycle deeper than this is treated as
# the same origin, which can only happen for ranges both sides hold anyway.
MAX_RESOLVE_DEPTH = 4


@dataclass(frozen=True, slots=True)
class PartitionSide:
    """What recovery knows of one side's partition."""

    cluster_id: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    epoch_history: tuple[tuple[int, int], ...]
    provenance: tuple[ProvenanceItem, ...] = ()
    # Base offsets of the batches (this side only); empty: every offset is one.
    batch_offsets: tuple[int, ...] = ()
    # [from, to) ranges of offsets no read_committed client reads as a record:
    # transaction markers, records of aborted or still open transactions.
    unreadable: tuple[tuple[int, int], ...] = ()
    # Marks of some of its batches (a remote's: `log_marks`; this side's: its
    # batches at the offsets the remote marked, `marks_at`), newest first;
    # empty when not asked for. Where both sides mark one batch as the same
    # write, their histories agree up to its end (`marks_agree`).
    marks: tuple[BatchMark, ...] = ()
    # Its topic is compacted: a cleaned copy of a batch keeps its write's
    # fields, not its CRC (`BatchMark.same_write`).
    compacted: bool = False


def origin_points(side: PartitionSide) -> list[tuple[int, str]]:
    """(offset, origin cluster) breakpoints, oldest first: the origin of
    offset o is that of the last point at or below o."""
    points: list[tuple[int, str]] = [(0, side.cluster_id)]
    for item in side.provenance:
        if item.kind is ProvenanceKind.GAP:
            continue  # nothing is held there; the START after it names the origin
        started = item.kind is ProvenanceKind.START and item.source
        origin = item.source if started else side.cluster_id
        # An entry at or below earlier points rewrites history from there on.
        points = [p for p in points if p[0] < item.offset]
        points.append((item.offset, origin))
    return points


def copied_end(side: PartitionSide) -> int:
    """Where the part of `side`'s log a link copied ends: the start of the
    records its own clients wrote since it last followed (after a detach, a
    released reservation, a failover), else its high watermark. A commit
    heard from the source counts records of the source's history, which
    this log holds only below that point. A log no link ever copied into
    says nothing: its high watermark."""
    points = origin_points(side)
    end = side.high_watermark
    for at, origin in reversed(points):
        if origin != side.cluster_id:
            return min(end, side.high_watermark)
        end = at
    return side.high_watermark  # written here throughout: no copy to bound


def last_mirrored_offset(side: PartitionSide, source_id: str) -> int | None:
    """KIP-1279's last mirrored offset of `side` from `source_id`: where the
    last range of its log copied from `source_id` (its provenance names
    that cluster as the source) ends: where a later entry (a detach, a
    failover, a copy from elsewhere) takes over, else its log end. None when
    no range of it was copied from `source_id`."""
    points = origin_points(side)
    for i in range(len(points) - 1, -1, -1):
        if points[i][1] == source_id:
            end = points[i + 1][0] if i + 1 < len(points) else side.log_end_offset
            return min(end, side.log_end_offset)
    return None


def mark_ending_at(side: PartitionSide, offset: int) -> BatchMark | None:
    """`side`'s mark of its batch holding offset `offset - 1` (the last
    record below `offset`), None when it marked no such batch."""
    return next((m for m in side.marks if m.base_offset < offset <= m.last_offset + 1), None)


def epoch_end(history: tuple[tuple[int, int], ...], log_end: int, epoch: int) -> int:
    """Where leader epoch `epoch` ends in a log with this epoch history (the
    replication source's OffsetsForLeaderEpoch, `replication.epoch_end_offset`):
    where the first epoch above it starts, else the log end. An epoch below
    every one the history knows ends where the first known one starts."""
    for e, start in history:
        if e > epoch:
            return min(start, log_end)
    return log_end


def _at(points: list[tuple[int, str]], offset: int) -> str:
    origin = points[0][1]
    for start, who in points:
        if start <= offset:
            origin = who
        else:
            break
    return origin


def epoch_at(history: tuple[tuple[int, int], ...], offset: int) -> int:
    epoch = history[0][0] if history else -1
    for e, start in history:
        if start <= offset:
            epoch = e
    return epoch


def _root(
    offset: int,
    mine: list[tuple[int, str]],
    my_id: str,
    theirs: list[tuple[int, str]],
    their_id: str,
    depth: int = 0,
) -> str:
    origin = _at(mine, offset)
    if origin == their_id and depth < MAX_RESOLVE_DEPTH:
        return _root(offset, theirs, their_id, mine, my_id, depth + 1)
    return origin


@dataclass(frozen=True, slots=True)
class Comparison:
    """The last common offset of two partitions and why it is there."""

    common_offset: int
    # "provenance", "leader-epoch", "log-end" (the shorter log ends there),
    # "log-start" (only the empty prefix is common), "local-empty",
    # "remote-empty" or "behind-log-start" (this log ends below the remote's
    # log start).
    reason: str
    shared: bool  # a last common offset is known
    # Something beyond the empty prefix relates the two: a record both hold,
    # or one's provenance names the other (or both name one origin).
    related: bool = True


def compare(local: PartitionSide, remote: PartitionSide) -> Comparison:
    """The last common offset of `local` and `remote` (module rules): never
    past this side's log end (asserted: a cut never passes the log end)."""
    result = _compare(local, remote)
    assert result.common_offset <= local.log_end_offset, (local, result)
    assert not result.shared or result.common_offset >= min(
        local.log_start_offset, local.log_end_offset
    ), (local, result)
    return result


def _compare(local: PartitionSide, remote: PartitionSide) -> Comparison:
    if local.log_end_offset <= local.log_start_offset:
        return Comparison(local.log_end_offset, "local-empty", True)
    low = max(local.log_start_offset, remote.log_start_offset)
    high = min(local.log_end_offset, remote.log_end_offset)
    if high <= low:
        return _no_common_range(local, remote)
    lp, rp = origin_points(local), origin_points(remote)
    lid, rid = local.cluster_id, remote.cluster_id
    breaks = {low}
    breaks.update(o for o, _ in lp + rp if low < o < high)
    breaks.update(s for _, s in local.epoch_history + remote.epoch_history if low < s < high)
    common_prov = high
    common_epoch = high
    for start in sorted(breaks):
        if common_prov == high and _root(start, lp, lid, rp, rid) != _root(start, rp, rid, lp, lid):
            common_prov = start
        if common_epoch == high and epoch_at(local.epoch_history, start) != epoch_at(
            remote.epoch_history, start
        ):
            common_epoch = start
    common = min(common_prov, common_epoch)
    agreed = min(marks_agree(local, remote), high)
    if agreed > common:
        # Both hold one write at one offset: their histories agree below its
        # end, whatever the provenance says (a copy of a copy names the
        # cluster it copied from, which may be neither of these two).
        reason = "log-end" if agreed == high else "batch-marks"
        return Comparison(agreed, reason, True)
    if common == low < high:
        # Nothing but the empty prefix at the log start is common: a partition
        # the follower never copied a record of before the roles changed.
        return Comparison(common, "log-start", True, provenance_related(local, remote))
    if common_prov < common_epoch:
        return Comparison(common, "provenance", True)
    if common_epoch < high:
        return Comparison(common, "leader-epoch", True)
    return Comparison(high, "log-end", True)


def marks_agree(local: PartitionSide, remote: PartitionSide) -> int:
    """The end (next offset) of the newest batch both sides mark as one write
    (`BatchMark.same_mark`); -1 when none. A log only grows at its end and a
    write exists once, so two logs holding one batch at one offset copied
    it, with everything before it, from one origin."""
    mine = {m.base_offset: m for m in local.marks}
    cleaned = local.compacted or remote.compacted
    agreed = -1
    for theirs in remote.marks:
        m = mine.get(theirs.base_offset)
        if m is not None and m.last_offset + 1 > agreed and m.same_mark(theirs, cleaned):
            agreed = m.last_offset + 1
    return agreed


def _no_common_range(local: PartitionSide, remote: PartitionSide) -> Comparison:
    """No offset is held by both logs. A remote holding nothing shares its
    (empty) history with anything; a local log wholly below the remote's log
    start is emptied (the remote deleted those offsets: it restarts at the
    remote's log start). A remote that ends where this log has not begun yet
    relates to nothing here."""
    if remote.log_end_offset <= remote.log_start_offset:
        if remote.log_start_offset <= local.log_start_offset:
            common = max(local.log_start_offset, min(remote.log_end_offset, local.log_end_offset))
        else:
            common = local.log_start_offset
        return Comparison(common, "remote-empty", True, provenance_related(local, remote))
    if local.log_end_offset <= remote.log_start_offset:
        related = provenance_related(local, remote)
        return Comparison(local.log_start_offset, "behind-log-start", True, related)
    return Comparison(local.log_start_offset, "log-end", False, False)


def own_acknowledged(side: PartitionSide, start: int) -> tuple[tuple[int, int], ...]:
    """The ranges [from, to) of `side`'s log from `start` on that its own
    clients wrote (their origin is `side.cluster_id`: no provenance entry
    names a source there) and that were acknowledged (below its high
    watermark) and are read as records (`unreadable` left out: markers, and
    transactions aborted or still open). Records a link copied here are not
    among them."""
    end = min(side.log_end_offset, side.high_watermark)
    start = max(start, side.log_start_offset)
    if end <= start:
        return ()
    points = origin_points(side)
    own: list[tuple[int, int]] = []
    for i, (at, origin) in enumerate(points):
        upto = points[i + 1][0] if i + 1 < len(points) else end
        low, high = max(at, start), min(upto, end)
        if origin == side.cluster_id and low < high:
            own.append((low, high))
    out: list[tuple[int, int]] = []
    for low, high in own:
        for piece in _without(low, high, side.unreadable):
            if out and out[-1][1] == piece[0]:
                out[-1] = (out[-1][0], piece[1])
            else:
                out.append(piece)
    # Ranges in order, apart, and within what was asked and acknowledged.
    assert all(start <= low < high <= end for low, high in out), (side.cluster_id, start, end, out)
    assert all(a[1] < b[0] for a, b in pairwise(out)), (side.cluster_id, out)
    return tuple(out)


def _without(
    low: int, high: int, holes: tuple[tuple[int, int], ...]
) -> list[tuple[int, int]]:
    """[low, high) less the ranges `holes` (sorted, disjoint)."""
    out: list[tuple[int, int]] = []
    at = low
    for h_low, h_high in holes:
        if h_high <= at or h_low >= high:
            continue
        if h_low > at:
            out.append((at, h_low))
        at = max(at, h_high)
    if at < high:
        out.append((at, high))
    return out


@dataclass(frozen=True, slots=True)
class ReopenedTxn:
    """A transaction a cut reopens: its first record stays below the cut,
    its marker goes. Until the new leader's copy decides it again, its
    records are unstable; a reader that passed them under the old outcome
    (aborted: a read_committed reader skipped them) never reads them again."""

    producer_id: int
    first_offset: int
    marker_offset: int
    committed: bool  # the outcome the cut marker gave it
    own_marker: bool  # this cluster wrote the marker (e.g. a detach's abort)
    replicated: bool  # its records came from another cluster (whose outcome may differ)

    @property
    def decided_for_source(self) -> bool:
        """This cluster decided a transaction another cluster's coordinator
        owns: following again hands the outcome back, and it may differ."""
        return self.own_marker and self.replicated

    def describe(self) -> str:
        outcome = "committed" if self.committed else "aborted"
        by = " by this cluster" if self.own_marker else ""
        return (
            f"producer {self.producer_id}'s transaction from offset {self.first_offset}, "
            f"{outcome}{by} at {self.marker_offset}"
        )


def transactions_cut(log: PartitionLog, cut: int) -> list[tuple[int, int, BatchEntry]]:
    """(producer id, first offset, marker batch) of each transaction of `log`
    that a cut at `cut` reopens: its first record below the cut, its marker
    at or above it. Read before the cut is made."""
    if cut >= log.log_end_offset:
        return []
    ongoing: dict[int, int] = {}
    out: list[tuple[int, int, BatchEntry]] = []
    for b in log.batches:
        if b.producer_id < 0:
            continue
        if b.is_control:
            first = ongoing.pop(b.producer_id, None)
            if first is not None and first < cut <= b.base_offset:
                out.append((b.producer_id, first, b))
        elif b.is_transactional and b.producer_id not in ongoing:
            ongoing[b.producer_id] = b.base_offset
    return out


def reopened_by_cut(log: PartitionLog, side: PartitionSide, cut: int) -> tuple[ReopenedTxn, ...]:
    """The transactions of `log` (whose side is `side`) a cut at `cut`
    reopens (`transactions_cut`), with who wrote their records and marker."""
    points = origin_points(side)
    return tuple(
        ReopenedTxn(
            pid,
            first,
            marker.base_offset,
            marker.control_type == CONTROL_COMMIT,
            _at(points, marker.base_offset) == side.cluster_id,
            _at(points, first) != side.cluster_id,
        )
        for pid, first, marker in transactions_cut(log, cut)
    )


def unreadable_ranges(log: PartitionLog) -> tuple[tuple[int, int], ...]:
    """The [from, to) ranges of `log` no read_committed client reads as a
    record (`PartitionSide.unreadable`), merged, oldest first."""
    aborted: dict[int, list[tuple[int, int]]] = {}
    for a in log.aborted:
        aborted.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
    out: list[tuple[int, int]] = []
    for b in log.batches:
        if b.is_control:
            hidden = True
        elif not b.is_transactional:
            hidden = False
        else:
            opened = log.ongoing_txns.get(b.producer_id)
            hidden = (opened is not None and b.base_offset >= opened) or any(
                first <= b.base_offset <= last for first, last in aborted.get(b.producer_id, ())
            )
        if hidden:
            if out and out[-1][1] == b.base_offset:
                out[-1] = (out[-1][0], b.next_offset)
            else:
                out.append((b.base_offset, b.next_offset))
    return tuple(out)


def provenance_related(local: PartitionSide, remote: PartitionSide) -> bool:
    """One side's provenance names the other as a source, or both name one
    origin: the two partitions belong to one replicated topic."""
    mine = {i.source for i in local.provenance if i.kind is ProvenanceKind.START and i.source}
    theirs = {i.source for i in remote.provenance if i.kind is ProvenanceKind.START and i.source}
    return remote.cluster_id in mine or local.cluster_id in theirs or bool(mine & theirs)


def cut_offset(local: PartitionSide, common: int, remote_log_start: int) -> int:
    """Where this side's log is cut: its batch boundary at or below `common`;
    its log start when that leaves it below the remote's log start. Always
    within the log, never above `common` unless that is past the log end."""
    if common >= local.log_end_offset:
        return local.log_end_offset
    if common < remote_log_start:
        return local.log_start_offset
    cut = local.log_start_offset
    for base in local.batch_offsets or (common,):
        if base <= common:
            cut = max(cut, base)
    cut = min(cut, local.log_end_offset)
    assert local.log_start_offset <= cut <= max(common, local.log_start_offset), (
        local, common, cut
    )
    return cut


# -- the cluster's view -----------------------------------------------------------------


def local_side(
    state: ClusterState, topic: str, partition: int, with_batches: bool = True
) -> PartitionSide:
    log = state.partition(topic, partition)
    entries = state.topic(topic).provenance.get(partition, [])
    return PartitionSide(
        state.cluster_id,
        log.log_start_offset,
        log.log_end_offset,
        log.high_watermark,
        tuple(log.epoch_history),
        tuple(entries),
        tuple(b.base_offset for b in log.batches) if with_batches else (),
        unreadable_ranges(log) if with_batches else (),
    )


# -- batch marks: where a follower's log parts from its source's -------------------------


class _Batch(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def crc(self) -> int: ...
    @property
    def partition_leader_epoch(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


@dataclass(frozen=True, slots=True)
class BatchMark:
    """One batch of a log: its offsets and what names the write that made
    it (the leader epoch it was written in, its producer fields, its max
    timestamp), which a copy keeps and the log cleaner keeps too; and its
    CRC, which a copy keeps but a clean changes (it drops records)."""

    base_offset: int
    last_offset: int
    crc: int
    leader_epoch: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    max_timestamp: int = -1

    @classmethod
    def of(cls, batch: _Batch) -> BatchMark:
        return cls(
            batch.base_offset,
            batch.last_offset,
            batch.crc,
            batch.partition_leader_epoch,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.max_timestamp,
        )

    def same_mark(self, other: BatchMark, cleaned: bool) -> bool:
        """`same_write` of two marks."""
        return other.leader_epoch == self.leader_epoch and self.same_write(other, cleaned)

    @property
    def partition_leader_epoch(self) -> int:
        return self.leader_epoch

    def same_write(self, batch: _Batch, cleaned: bool) -> bool:
        """Whether `batch` is this mark's batch: the same offsets, and the
        same bytes, or, where a log cleaner may have rewritten either copy
        (`cleaned`: a compacted topic), the same write (leader epoch,
        producer fields, max timestamp: what a clean keeps). A batch the
        cleaner rewrote is not a history that parted."""
        if batch.base_offset != self.base_offset or batch.last_offset != self.last_offset:
            return False
        if batch.crc == self.crc:
            return True
        return (
            cleaned
            and (
                batch.partition_leader_epoch,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.max_timestamp,
            )
            == (
                self.leader_epoch,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self.max_timestamp,
            )
        )


# Marks a follower sends at most: its recent batches, the batches ending
# below each provenance entry and leader-epoch start, and batches further
# back at doubling distances.
MARKS_MAX = 160
MARKS_RECENT = 64


def log_marks(
    state: ClusterState,
    topic: str,
    partition: int,
    every: bool = True,
    span: tuple[int, int] | None = None,
) -> tuple[tuple[BatchMark, ...], tuple[int, int] | None]:
    """Follower side: marks of its log, newest first, for the source to find
    where the two logs part (`parting_by_marks`); only the last batch's unless
    `every`. Two logs holding one batch
    at one offset agree below it too: a log only grows at its end, and a
    batch (its producer, sequence, timestamps) exists once, so both copied
    it, with everything before it, from one origin.

    With `span` (a range of base offsets the source asked about, where it
    found the logs part between two marks), the marks of the batches in it
    (with the last batch's): every one when they fit, else evenly spaced,
    always the first and the last, so that each such round narrows the range.
    Also returns the range of base offsets whose every batch is marked (None:
    none claimed): the source cuts at a parting point only inside such a
    range, else it asks for a narrower one."""
    t = state.topics[topic]
    log = t.partitions[partition]
    if not every:
        return last_mark(log), None
    if not log.batches:
        return (), None
    if span is not None:
        return _span_marks(log, span)
    wanted = {log.log_end_offset - 1}
    # Every recent batch (where the logs of an unclean election or a failover
    # usually part, so the cut is exact), then doubling distances further back.
    recent = log.batches[-MARKS_RECENT:]
    for batch in recent:
        wanted.add(batch.base_offset)
    distance = 1
    while log.log_end_offset - 1 - distance >= log.log_start_offset:
        wanted.add(log.log_end_offset - 1 - distance)
        distance *= 2
    wanted.add(log.log_start_offset)
    for item in t.provenance.get(partition, []):
        wanted.update((item.offset - 1, item.offset))
    for _epoch, start in log.epoch_history:
        wanted.update((start - 1, start))
    marks: dict[int, BatchMark] = {}
    for offset in sorted(wanted, reverse=True):
        found = log.batch_containing(offset)
        if found is not None and found.base_offset not in marks:
            marks[found.base_offset] = BatchMark.of(found)
        if len(marks) >= MARKS_MAX:
            break
    # The recent batches come first (newest first) and number fewer than
    # MARKS_MAX: all of them are marked.
    complete = (recent[0].base_offset, log.log_end_offset)
    out = tuple(marks[b] for b in sorted(marks, reverse=True))
    # Marks of batches this log holds, newest first, none past its end.
    assert out[0].last_offset < log.log_end_offset, (log.name, out[0], log.log_end_offset)
    assert all(a.base_offset > b.last_offset for a, b in pairwise(out)), (
        log.name, [m.base_offset for m in out]
    )
    return out, complete


def _span_marks(
    log: PartitionLog, span: tuple[int, int]
) -> tuple[tuple[BatchMark, ...], tuple[int, int] | None]:
    low, high = span
    first = log.batch_index_at(low)
    batches = [b for b in log.batches[first:] if b.base_offset < high]
    marks = {log.batches[-1].base_offset: BatchMark.of(log.batches[-1])}
    complete: tuple[int, int] | None = (low, high)
    room = MARKS_MAX - 1
    if len(batches) > room:
        complete = None
        step = (len(batches) - 1) / (room - 1)
        batches = [batches[round(i * step)] for i in range(room)]
    for batch in batches:
        marks[batch.base_offset] = BatchMark.of(batch)
    return tuple(marks[b] for b in sorted(marks, reverse=True)), complete


def marks_at(log: PartitionLog, offsets: Iterable[int]) -> tuple[BatchMark, ...]:
    """Marks of this log's batches that begin at `offsets` (those a remote
    marked), newest first: what `marks_agree` compares them with."""
    out: dict[int, BatchMark] = {}
    for offset in offsets:
        found = log.batch_containing(offset)
        if found is not None and found.base_offset == offset:
            out[offset] = BatchMark.of(found)
    return tuple(out[o] for o in sorted(out, reverse=True))


def with_marks_of(
    state: ClusterState, topic: str, partition: int, side: PartitionSide, remote: PartitionSide
) -> PartitionSide:
    """This cluster's `side` of a partition with the marks of its batches at
    the offsets `remote` marked, and whether its topic is compacted."""
    log = state.partition(topic, partition)
    marks = marks_at(log, (m.base_offset for m in remote.marks))
    # Fix 20 undone (test only): compared as if not compacted, by CRC too.
    compacted = state.topic(topic).config.compact and not state.faults.undid(20)
    return replace(side, marks=marks, compacted=compacted)


def last_mark(log: PartitionLog) -> tuple[BatchMark, ...]:
    """`log_marks(..., every=False)` of a partition's log in hand: its last
    batch's mark, or none when it holds no batch."""
    batches = log.batches
    if not batches:
        return ()
    last = batches[-1]
    return (BatchMark.of(last),)


@dataclass(frozen=True, slots=True)
class Parting:
    """Where the follower's marks say the logs part: `common`, the end of
    the newest agreeing stretch (None: no mark agrees); `below`, the newest
    mark of that stretch, and `above`, the differing mark just newer than it
    (None: no mark differs above it). The logs part somewhere between the
    two: exactly at `common` when no batch lies between them."""

    common: int | None
    below: BatchMark | None = None
    above: BatchMark | None = None


def common_by_marks(
    state: ClusterState, topic: str, partition: int, marks: tuple[BatchMark, ...]
) -> int | None:
    """`parting_by_marks(...).common`."""
    return parting_by_marks(state, topic, partition, marks).common


def parting_by_marks(
    state: ClusterState, topic: str, partition: int, marks: tuple[BatchMark, ...]
) -> Parting:
    """Source side: the end of the newest of the follower's marked batches
    this log holds too (the logs agree below it), counting the batches above
    it that a compacted log's cleaner removed whole (`cleaned_away`); None
    when it holds none and a mark differs."""
    log = state.partition(topic, partition)
    cleaned = state.topic(topic).config.compact and not state.faults.undid(20)
    holes_top: int | None = None  # index of the newest mark of a cleaned run
    for i, mark in enumerate(marks):
        batch = log.batch_at(mark.base_offset)
        if batch is not None and mark.same_write(batch, cleaned):
            top = holes_top if holes_top is not None else i
            above = marks[top - 1] if top > 0 else None
            # Where the logs agree to is a batch end this log holds: never past its end.
            assert marks[top].last_offset < log.log_end_offset, (
                f"partition {log.name}: agreed to {marks[top].last_offset + 1}, past its log "
                f"end {log.log_end_offset}"
            )
            return Parting(marks[top].last_offset + 1, marks[top], above)
        if cleaned and cleaned_away(log, mark):
            # The cleaner removed the whole batch here: no sign of a parting.
            if holes_top is None:
                holes_top = i
            continue
        holes_top = None  # a batch that differs: the logs part below it
    # Only batches the cleaner removed, down to the oldest mark: in the
    # leader epochs the source's history has there (Kafka's own rule, which
    # compares nothing else), no sign of a parting.
    if holes_top is None:
        return Parting(None)
    above = marks[holes_top - 1] if holes_top > 0 else None
    return Parting(marks[holes_top].last_offset + 1, marks[holes_top], above)


def cleaned_away(log: PartitionLog, mark: BatchMark) -> bool:
    """Whether a compacted log holds no batch of `mark`'s offsets where it
    holds every offset around them, in the leader epoch the mark was
    written in: its cleaner removed that batch (every record of it had a
    newer one of its key), which a history that parted does not explain
    (a log only grows at its end: a source that cut and wrote again holds
    new batches there)."""
    if mark.base_offset < log.log_start_offset or mark.last_offset >= log.log_end_offset:
        return False
    i = log.batch_index_at(mark.base_offset)
    if i < len(log.batches) and log.batches[i].base_offset <= mark.last_offset:
        return False  # a batch overlaps the mark's offsets
    return bool(log.epoch_history) and log.epoch_at(mark.base_offset) == mark.leader_epoch
