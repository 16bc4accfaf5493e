"""Checkers: the spec's section 10 invariants and Jepsen's named anomalies.

Each check returns `Violation`s naming the invariant or anomaly and saying
exactly what was wrong; a run with any violation fails (exit code 1).

Invariants (spec section 10), checked where they can fail:
- "1 offset identity" / "2 prefix": a follower partition, within its current
  provenance range, holds byte for byte the source's batches at the same
  offsets, and never more than the source has (`check_follower_log`; run at
  every failover, before the follower detaches, and at the end of the run).
- "3 reserved namespace": no client write was accepted into a reserved
  namespace (from the history).
- "6 replicated offsets": a replicated committed offset never exceeds the
  follower's high watermark and never moves backwards (`OffsetWatch`, after
  every follower apply).
- "4 sync acknowledged": a record acknowledged while a SYNC link covering it
  was IN_SYNC was durable on that link's follower at the acknowledgement
  (`check_sync_acks`, from the witnesses the cluster recorded then), and is
  still there at the end, whatever failed over (`check_sync_acks_kept`).
- "5 atomic transactions": no read_committed poll on a follower returns part
  of a committed transaction: when it returns one record of a transaction,
  the session has by then received every record of it
  (`check_transactions_atomic`).
- "7 config convergence": after every partition heals, both sides hold the
  same link configuration, swapped (`check_link_convergence`).
Anomalies (Jepsen's names), from the history and the final logs:
- lost_write: an acknowledged send is not at its offset on the cluster that
  acknowledged it, and no reported truncation (nor that cluster's own
  retention) explains it.
- unnamed_cut: an acknowledged record a cluster's own clients wrote was cut
  by a link's data path (it followed after an attach), not by a command whose
  answer names it (`check_unnamed_cuts`).
- duplicate: one value stored at two offsets of a partition.
- sequence_refused: an idempotent send refused for its sequence
  (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) although its producer
  numbered its batches in order, and no reported cut removed batches of the
  topic on that cluster first: the cluster judged it against producer state
  the producer never wrote, as a promoted cluster that hands out an id its
  copied batches carry would (`check_sequence_refusals`).
- skip: within one consumer session, a poll jumped over a stored record
  (for a read_committed consumer, one not of an aborted transaction).
- nonmonotonic: within one consumer session, offsets did not increase.
Compacted topics (`cleanup.policy=compact`): a record missing from a log
where a newer record of its key is stored was cleaned away (the log
cleaner's right), and none of the checks above counts it (`CompactedKeys`,
`superseded`); anything else missing still is a violation. (The workloads
write no tombstones, so none may be missing.)
- "one writer at rest": each namespace a reversal set out to move (its
  journalled plan) is writable on exactly one of its two clusters once the
  run is at rest, after the liveness phase ran the procedure of every plan
  still journalled once more (`check_one_writer`); one whose reversal
  answered rolled back, on as many as the reversal found it writable on; a
  failover's or a recovery's are never left reserved and following nothing
  on the side it ran on.
- "diverged after failback": a confirmed recovery (a failback: the cluster
  follows the remote again) keeps below its cut only what the remote holds
  at the same offsets, byte for byte (record by record on a compacted
  topic), as the remote's log stood when the cut was made, below any cut of
  the remote's own (`check_recovered_log`). Invariant 1 compares a
  follower's current provenance range only, which begins at the cut: a
  rule that cuts too high (KIP-1279's last mirrored offset after an
  unclean election here) leaves records below it that nothing else reads.
MirrorMaker 2 flows (edges of type mirror), where offsets are not preserved
and records are compared by value:
- mirror_at_least_once: every record below the position a mirror committed on
  its source is held by the target's remote partition (`check_mirror_copies`).
  Records a mirror stores twice are its documented cost, not a violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from linkd.core import plans
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.namespaces import ResourceType
from linkd.core.provenance import ProvenanceKind
from sim.history import History, Poll, Send
from sim.store import PartitionStore, StoredBatch

# (cluster, topic, partition) -> {offset: value} of the data records stored.
FinalLogs = dict[tuple[str, str, int], dict[int, str]]
# (cluster, topic, partition) -> offsets at which a reported truncation cut.
Truncations = dict[tuple[str, str, int], list[int]]
@dataclass(frozen=True, slots=True)
class CutEvent:
    """A cut of one partition's log: when, to which offset, and whether the
    link's data path made it as it replicated (reported by a log line only,
    in no command's answer) rather than a command (recover, a topic's
    deletion) or a fault (an unclean election)."""

    at_ms: int
    offset: int
    by_link: bool


# (cluster, topic, partition) -> its cuts, in order.
CutEvents = dict[tuple[str, str, int], list[CutEvent]]
# (cluster, topic, partition) -> [from, to) offset ranges the cluster deleted
# itself (retention, DeleteRecords): gone by its configuration, not lost.
Deleted = dict[tuple[str, str, int], list[tuple[int, int]]]


def was_deleted(deleted: Deleted | None, key: tuple[str, str, int], offset: int) -> bool:
    """Whether the cluster deleted the offset itself (retention)."""
    return deleted is not None and any(a <= offset < b for a, b in deleted.get(key, []))


# (cluster, topic, partition) of compacted topics -> {key: the newest offset
# holding it in the final log}.
CompactedKeys = dict[tuple[str, str, int], dict[str, int]]

DETAIL_MAX = 5  # violations of one kind reported in full per check


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"invariant": self.invariant, "detail": self.detail}


def _capped(name: str, details: list[str]) -> list[Violation]:
    out = [Violation(name, d) for d in details[:DETAIL_MAX]]
    if len(details) > DETAIL_MAX:
        out.append(Violation(name, f"... and {len(details) - DETAIL_MAX} more"))
    return out


def superseded(
    compacted: CompactedKeys | None, where: tuple[str, str, int], key: str, offset: int
) -> bool:
    """Whether the log cleaner may have removed the record of `key` at `offset`:
    the partition is compacted and holds a newer record of that key."""
    if not compacted or not key:
        return False
    newest = compacted.get(where, {}).get(key)
    return newest is not None and newest > offset


def _records_by_offset(batches: list[StoredBatch]) -> dict[int, tuple[bytes | None, bytes | None]]:
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    for batch in batches:
        header, records = rb.decode_records(batch.data)
        if not header.is_control:
            out.update((r.offset, (r.key, r.value)) for r in records)
    return out


def _compacted_differences(
    where: str, mine: list[StoredBatch], theirs: list[StoredBatch], start: int, end: int
) -> list[str]:
    """Invariant 1 on a compacted topic, record by record in [start, end): a
    record both logs hold is the same; a record one log lacks must be
    superseded there by a newer record of its key (both sides clean on their
    own schedules)."""
    a, b = _records_by_offset(mine), _records_by_offset(theirs)
    newest: list[dict[bytes | None, int]] = [{}, {}]
    for side, records in enumerate((a, b)):
        for at, (record_key, _value) in sorted(records.items()):
            newest[side][record_key] = at
    out = []
    for offset in sorted(set(a) | set(b)):
        if offset < start:
            continue
        if offset >= end:
            break
        if offset in a and offset in b:
            if a[offset] != b[offset]:
                out.append(f"{where}: the record at offset {offset} differs from the source's")
            continue
        key = (a.get(offset) or b[offset])[0]
        lacking = 1 if offset in a else 0
        if newest[lacking].get(key, -1) <= offset:
            who = "source" if lacking else "follower"
            out.append(
                f"{where}: the {who} lacks the record at offset {offset}, and holds no newer "
                f"record of its key"
            )
    return out


# -- invariants 1 and 2 ----------------------------------------------------------------


def current_source(
    follower: ClusterState, topic: str, partition: int
) -> tuple[str, str, int] | None:
    """(source cluster id, source topic, range start) when the follower
    partition's latest provenance entry is an attached range of a link that
    still maps it; None otherwise."""
    t = follower.topics.get(topic)
    if t is None:
        return None
    entries = t.provenance.get(partition, [])
    if not entries or entries[-1].kind is not ProvenanceKind.START:
        return None
    last = entries[-1]
    for config in follower.links.configs.values():
        if config.link_id != last.link_id:
            continue
        mapping = max(
            (
                m
                for m in rep.follower_mappings(config, "topic")
                if rep.in_prefix(topic, m.local_prefix)
            ),
            key=lambda m: len(m.local_prefix),
            default=None,
        )
        if mapping is None:
            return None
        return (
            config.remote_cluster_id,
            rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix),
            last.offset,
        )
    return None


def check_follower_log(
    follower_id: str,
    topic: str,
    partition: int,
    follower_store: PartitionStore,
    follower_hw: int,
    source_id: str,
    source_topic: str,
    source_store: PartitionStore,
    range_start: int,
    check_prefix: bool = True,
    range_end: int | None = None,
    compacted: bool = False,
) -> list[Violation]:
    """Invariants 1 and 2 for one follower partition's current range (below
    `range_end` when given: a source that cut its log there may have written
    other records since, which the follower learns at its next fetch). On a
    compacted topic (`compacted`) the logs are compared record by record."""
    where = f"{follower_id}:{topic}-{partition} (source {source_id}:{source_topic})"
    out: list[Violation] = []
    if check_prefix and follower_store.log_end_offset > max(
        source_store.log_end_offset, range_start
    ):
        out.append(
            Violation(
                "2 prefix",
                f"{where}: the follower log ends at {follower_store.log_end_offset}, beyond "
                f"the source log end {source_store.log_end_offset}",
            )
        )
    details: list[str] = []
    start_index = follower_store.index_at(range_start)
    if compacted:
        end = min(follower_hw, range_end if range_end is not None else follower_hw)
        end = min(end, source_store.log_end_offset)
        mine = [b for b in follower_store.batches[start_index:] if b.base_offset >= range_start]
        source_batches = source_store.batches[source_store.index_at(range_start) :]
        details = _compacted_differences(where, mine, source_batches, range_start, end)
        return out + _capped("1 offset identity", details)
    for i in range(start_index, len(follower_store.batches)):
        batch = follower_store.batches[i]
        if batch.base_offset < range_start:
            continue
        if batch.base_offset >= follower_hw or (
            range_end is not None and batch.next_offset > range_end
        ):
            break
        if batch.base_offset < source_store.log_start_offset:
            continue  # deleted on the source since (retention): nothing to compare with
        j = source_store.index_at(batch.base_offset)
        if j >= len(source_store.batches):
            continue  # beyond the source's log end: the prefix check's business
        theirs = source_store.batches[j]
        if theirs.base_offset != batch.base_offset or theirs.data != batch.data:
            details.append(
                f"{where}: the batch at offset {batch.base_offset} differs from the source's "
                f"(source batch at {theirs.base_offset})"
            )
    return out + _capped("1 offset identity", details)


def check_recovered_log(
    cluster: str,
    topic: str,
    partition: int,
    store: PartitionStore,
    cut: int,
    remote_id: str,
    remote_topic: str,
    remote_store: PartitionStore,
    how: str,
    compacted: bool = False,
) -> list[Violation]:
    """"diverged after failback": the batches a confirmed recovery left
    below its cut (`cut`: the cut, or where the remote's log was cut since,
    if lower) against the remote's at the same offsets, as invariant 1
    compares a follower's; `how` names the recovery (its link and reason)."""
    found = check_follower_log(
        cluster, topic, partition, store, cut, remote_id, remote_topic, remote_store,
        max(store.log_start_offset, remote_store.log_start_offset), check_prefix=False,
        range_end=cut, compacted=compacted,
    )  # fmt: skip
    return [
        Violation("diverged after failback", f"{how}, cut to {cut}: {v.detail}") for v in found
    ]


# -- invariant 3 -----------------------------------------------------------------------


def check_false_divergence(
    cluster: str,
    topic: str,
    partition: int,
    cut: list[StoredBatch],
    source: str,
    source_store: PartitionStore,
    source_compacted: bool,
    history: History,
    truncations: Truncations,
    now_ms: int,
) -> list[Violation]:
    """A follower partition was cut as diverged from its source (`source`,
    whose copy of the partition is `source_store`), removing records its
    source holds at the very same offsets, or that the source itself
    acknowledged there, never cut, and only its cleaner removed since (a
    compacted topic): the source's history never parted there, so the cut
    took the same history for a divergence (a clean's rewrite, say).
    Records the source does not hold there (it never had them, or it cut
    them) are a true parting and not judged here."""
    removed = _records_by_offset(cut)
    if not removed:
        return []
    held = _records_by_offset(source_store.batches)
    wanted = {v.decode() for _k, v in removed.values() if v is not None}
    acked: dict[str, tuple[str, str, int]] = {}
    for o in history.sends():
        v = o.value
        if o.type == "ok" and isinstance(v, Send) and v.value in wanted:
            acked[v.value] = (o.cluster, v.topic, v.offset)
    details = []
    for offset, (key, value) in sorted(removed.items()):
        if value is None:
            continue
        there = held.get(offset)
        if there is not None:
            if there != (key, value):
                continue  # the source holds another record there: they parted
            why = "which its source holds at that offset"
        else:
            origin = acked.get(value.decode())
            if (
                not source_compacted
                or origin is None
                or origin[0] != source
                or origin[2] != offset
                or not source_store.log_start_offset <= offset < source_store.log_end_offset
                or any(c <= offset for c in truncations.get((source, origin[1], partition), []))
            ):
                continue
            why = "which its source acknowledged at that offset, never cut, and cleaned since"
        details.append(
            f"{cluster}: {topic}-{partition} was cut at t={now_ms} ms as diverged from "
            f"{source}, removing {value.decode()!r} at offset {offset}, {why}"
        )
    return _capped("false_divergence", details)


def check_reserved_writes(history: History) -> list[Violation]:
    details = [
        f"{o.process} wrote {o.value.topic}-{o.value.partition} on {o.cluster} at "
        f"t={o.complete_ms} ms while its namespace was reserved"
        for o in history.sends()
        if o.type == "ok" and o.reserved and isinstance(o.value, Send)
    ]
    return _capped("3 reserved namespace", details)


# -- invariant 6 -----------------------------------------------------------------------


class OffsetWatch:
    """Remembers every replicated committed offset seen on followers."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str, str, int], int] = {}
        self.found: list[Violation] = []
        # Offsets moved back to these values by a recovery whose report named
        # them (cluster, group, topic, partition, new offset); a move back is
        # judged at the end, as the report arrives after the move.
        self.reported: set[tuple[str, str, str, int, int]] = set()
        self._moved_back: list[tuple[tuple[str, str, str, int, int], Violation]] = []

    def excuse(self, cluster_id: str, group: str, topic: str, partition: int, offset: int) -> None:
        """A recovery report named this committed offset's move back (to -1:
        removed); later values are judged from there."""
        self.reported.add((cluster_id, group, topic, partition, offset))
        if offset < 0:
            self.last.pop((cluster_id, group, topic, partition), None)
        else:
            self.last[(cluster_id, group, topic, partition)] = offset

    def forget_topic(self, cluster_id: str, topic: str) -> None:
        """The topic was deleted there (which removes its committed offsets):
        offsets for a topic of that name later start afresh."""
        for key in [k for k in self.last if k[0] == cluster_id and k[2] == topic]:
            del self.last[key]

    @property
    def violations(self) -> list[Violation]:
        return self.found + [v for key, v in self._moved_back if key not in self.reported]

    def observe(self, cluster_id: str, state: ClusterState, link_name: str, now_ms: int) -> None:
        config = state.links.configs.get(link_name)
        if config is None or len(self.found) + len(self._moved_back) > DETAIL_MAX:
            return
        prefixes = [m.local_prefix for m in rep.follower_mappings(config, "group")]
        if not prefixes:
            return
        seen: set[tuple[str, str, str, int]] = set()
        for group_id, _s, _t in sorted(state.groups.list_groups()):
            if not any(rep.in_prefix(group_id, p) for p in prefixes):
                continue
            for (topic, p), c in sorted(state.groups.committed(group_id, None).items()):
                key = (cluster_id, group_id, topic, p)
                seen.add(key)
                t = state.topics.get(topic)
                if t is not None and p < len(t.partitions):
                    hw = t.partitions[p].high_watermark
                    if c.offset > hw:
                        self.found.append(
                            Violation(
                                "6 replicated offsets",
                                f"{cluster_id}: group {group_id!r} committed offset {c.offset} "
                                f"for {topic}-{p} exceeds the follower high watermark {hw} "
                                f"(t={now_ms} ms)",
                            )
                        )
                previous = self.last.get(key)
                if previous is not None and c.offset < previous and not _reported_cut(
                    state, topic, p, c.offset
                ):
                    self._moved_back.append((
                        (cluster_id, group_id, topic, p, c.offset),
                        Violation(
                            "6 replicated offsets",
                            f"{cluster_id}: group {group_id!r} committed offset for {topic}-{p} "
                            f"moved back from {previous} to {c.offset} (t={now_ms} ms)",
                        ),
                    ))
                self.last[key] = c.offset
        # An offset removed (its topic deleted) starts afresh when it comes back.
        for key in [k for k in self.last if k[0] == cluster_id and k not in seen]:
            if any(rep.in_prefix(key[1], p) for p in prefixes):
                del self.last[key]


def _reported_cut(state: ClusterState, topic: str, partition: int, offset: int) -> bool:
    """A replicated offset may move back only to a cut the follower reported in
    the partition's provenance history (an automatic divergence cut or an
    admin recovery): invariant 6's exception."""
    t = state.topics.get(topic)
    entries = t.provenance.get(partition, []) if t is not None else []
    return any(e.kind is ProvenanceKind.TRUNCATED and e.offset == offset for e in entries)


# -- invariant 7 -----------------------------------------------------------------------


def check_link_convergence(
    states: Mapping[str, ClusterState], up: Mapping[str, bool]
) -> list[Violation]:
    details: list[str] = []
    for cid in sorted(states):
        state = states[cid]
        for name in state.links.names():
            config = state.links.get(name)
            other = states.get(config.remote_cluster_id)
            if other is None or not up.get(cid) or not up.get(config.remote_cluster_id):
                continue
            theirs = other.links.configs.get(name)
            if theirs is None or theirs.link_id != config.link_id:
                details.append(f"link {name!r} exists on {cid} but not on {other.cluster_id}")
                continue
            if cid > config.remote_cluster_id:
                continue  # each pair compared once
            if config.agreed_record() != theirs.mirrored().agreed_record():
                details.append(
                    f"link {name!r}: {cid} and {other.cluster_id} still disagree after healing "
                    f"({config.agreed_record()} vs mirrored {theirs.mirrored().agreed_record()})"
                )
    return _capped("7 config convergence", details)


# -- anomalies -------------------------------------------------------------------------


def cut_since(
    key: tuple[str, str, int],
    offset: int,
    since_ms: int,
    truncations: Truncations,
    cut_events: CutEvents | None,
) -> bool:
    """Whether a reported cut of the partition `key` at or below `offset`
    can have removed a record written there at or after `since_ms`: with
    `cut_events`, a cut made at or after that time (an earlier cut left the
    offset to be written again); without them, any such cut."""
    if cut_events is not None:
        return any(e.offset <= offset and e.at_ms >= since_ms for e in cut_events.get(key, ()))
    return any(cut <= offset for cut in truncations.get(key, ()))


def check_lost_writes(
    history: History,
    final: FinalLogs,
    truncations: Truncations,
    deleted: Deleted | None = None,
    compacted: CompactedKeys | None = None,
    cut_events: CutEvents | None = None,
) -> list[Violation]:
    """lost_write: an acknowledged record is not at its offset in the final
    log, and nothing accounts for it: a reported truncation at or below its
    offset, retention, compaction. With `cut_events` (when each cut was
    made) only a cut made after the send began can have removed the record;
    without them (times not known) any cut at or below its offset does."""
    details: list[str] = []
    for o in history.sends():
        v = o.value
        if o.type != "ok" or not isinstance(v, Send) or not v.value:
            continue
        key = (o.cluster, v.topic, v.partition)
        log = final.get(key)
        if log is None or log.get(v.offset) == v.value:
            continue
        if cut_since(key, v.offset, o.invoke_ms, truncations, cut_events):
            continue  # removed by a reported truncation: counted in metrics, not lost
        if was_deleted(deleted, key, v.offset):
            continue  # its retention deleted it: configured, not lost
        if superseded(compacted, key, v.key, v.offset):
            continue  # cleaned away: a newer record of its key is stored
        details.append(
            f"{o.process}: {v.value!r} acknowledged by {o.cluster} at {v.topic}-{v.partition} "
            f"offset {v.offset} (t={o.complete_ms} ms) is not there "
            f"(found {log.get(v.offset)!r})"
        )
    return _capped("lost_write", details)


def check_unnamed_cuts(history: History, final: FinalLogs, cuts: CutEvents) -> list[Violation]:
    """unnamed_cut: an acknowledged record a cluster's own clients wrote was
    removed by a cut of the link's data path (after an attach made that
    cluster follow), which no command's answer named: only a confirmed
    `recover` may cut such records, and its answer names them. The cut that
    removed a record is the first one after its acknowledgement at or below
    its offset. Records of transactions are left to the transaction checks
    (an aborted or open one is no acknowledged record)."""
    details: list[str] = []
    for o in history.sends():
        v = o.value
        if o.type != "ok" or not isinstance(v, Send) or not v.value or v.txn:
            continue
        key = (o.cluster, v.topic, v.partition)
        events = cuts.get(key)
        if not events or final.get(key, {}).get(v.offset) == v.value:
            continue
        first = next(
            (e for e in events if e.at_ms >= o.complete_ms and e.offset <= v.offset), None
        )
        if first is None or not first.by_link:
            continue
        details.append(
            f"{o.process}: {v.value!r} acknowledged by {o.cluster} at {v.topic}-{v.partition} "
            f"offset {v.offset} (t={o.complete_ms} ms) was cut by its link's data path at "
            f"t={first.at_ms} ms (to offset {first.offset}), and no command's answer named it"
        )
    return _capped("unnamed_cut", details)


def check_duplicates(final: FinalLogs) -> list[Violation]:
    details: list[str] = []
    for (cluster, topic, partition), log in sorted(final.items()):
        seen: dict[str, int] = {}
        for offset, value in sorted(log.items()):
            if value in seen:
                details.append(
                    f"{cluster}:{topic}-{partition}: {value!r} stored at offsets "
                    f"{seen[value]} and {offset}"
                )
            else:
                seen[value] = offset
    return _capped("duplicate", details)


SEQUENCE_REFUSALS = ("OUT_OF_ORDER_SEQUENCE_NUMBER", "UNKNOWN_PRODUCER_ID")


def check_sequence_refusals(history: History, cuts: CutEvents) -> list[Violation]:
    """sequence_refused: the simulator's idempotent producers number each
    partition's batches 0, 1, 2, ... under one producer id, never send one
    twice, and take a new id after any refusal, so a partition that refuses
    one of their sends for its sequence holds producer state of that id that
    the producer did not write there: batches of another producer with the
    same id, copied in by a link or written before a failover moved the
    producer (the chain question: an idempotent producer on a promoted
    cluster must not meet the producer state replicated into it).

    Two explanations are not a fault, each judged per process, cluster and
    topic (a refused send does not name its partition), from the producer's
    first send there on: a cut of the topic on that cluster (a confirmed
    recovery, an unclean election, a deleted topic, the data path) that
    removed the producer's own last batches, the cluster then rebuilding
    its producer state from what remains; and an earlier send of the same
    producer there whose outcome is unknown (`info`: the cluster crashed or
    the wait timed out), whose batch may be lost while the producer, which
    does not retry, numbers its next one after it. INVALID_PRODUCER_EPOCH is
    not judged: a transaction coordinator's fence answers it too."""
    first: dict[tuple[str, str, str], int] = {}
    unknown: dict[tuple[str, str, str], list[int]] = {}
    for o in history.sends():
        if not isinstance(o.value, Send):
            continue
        key = (o.process, o.cluster, o.value.topic)
        first[key] = min(first.get(key, o.invoke_ms), o.invoke_ms)
        if o.type == "info":
            unknown.setdefault(key, []).append(o.invoke_ms)
    details: list[str] = []
    for o in history.sends():
        v = o.value
        if o.type != "fail" or o.error not in SEQUENCE_REFUSALS or not isinstance(v, Send):
            continue
        key = (o.process, o.cluster, v.topic)
        since = first[key]
        cut = any(
            since <= e.at_ms <= o.complete_ms
            for (cluster, topic, _p), events in cuts.items()
            if (cluster, topic) == (o.cluster, v.topic)
            for e in events
        )
        if cut or any(t < o.invoke_ms for t in unknown.get(key, [])):
            continue
        details.append(
            f"{o.process}: send of {v.value!r} to {v.topic} on {o.cluster} refused {o.error} "
            f"(t={o.complete_ms} ms), though its producer numbered its batches in order, "
            f"none of its sends there was left unknown and no cut of {v.topic} on {o.cluster} "
            "came since its first: producer state of its id that it never wrote there"
        )
    return _capped("sequence_refused", details)


def check_consumers(
    history: History,
    final: FinalLogs,
    truncations: Truncations | None = None,
    hidden: dict[tuple[str, str, int], set[int]] | None = None,
) -> list[Violation]:
    """skip and nonmonotonic, per consumer, session and partition. An offset
    at or above a reported cut of that partition is not a skip: the reader
    may have read the record there before the log was cut and rewritten (a
    consumer without Kafka's truncation detection reads on). Nor, for a
    read_committed reader, is a record its client saw aborted, or one the
    cluster's log holds in an aborted transaction (`hidden`: offsets per
    partition, `follower_metrics.aborted_offsets`; a failover aborts
    replicated transactions left open, whatever their source later did: its
    answer names them)."""
    cuts = truncations or {}
    hidden_at = hidden or {}
    aborted = {
        o.value.value
        for o in history.sends()
        if o.type == "fail" and isinstance(o.value, Send) and o.value.txn
    }
    skips: list[str] = []
    backwards: list[str] = []
    last: dict[tuple[str, int, str, int], int] = {}
    for o in history.polls():
        v = o.value
        if o.type != "ok" or not isinstance(v, Poll):
            continue
        for partition, offset, _value in v.records:
            key = (o.process, v.session, v.topic, partition)
            previous = last.get(key)
            last[key] = offset
            if previous is None:
                continue
            if offset <= previous:
                backwards.append(
                    f"{o.process} (session {v.session}) read {v.topic}-{partition} offset "
                    f"{offset} after {previous} on {o.cluster} (t={o.complete_ms} ms)"
                )
                continue
            log = final.get((o.cluster, v.topic, partition), {})
            cut = min(cuts.get((o.cluster, v.topic, partition), []), default=None)
            gone = hidden_at.get((o.cluster, v.topic, partition), set())
            missed = [
                x
                for x in range(previous + 1, offset)
                if x in log
                and not (v.read_committed and (log[x] in aborted or x in gone))
                and (cut is None or x < cut)
            ]
            if missed:
                skips.append(
                    f"{o.process} (session {v.session}) jumped from offset {previous} to "
                    f"{offset} of {v.topic}-{partition} on {o.cluster}, skipping {missed[:5]}"
                )
    return _capped("skip", skips) + _capped("nonmonotonic", backwards)


# -- consumers that moved: what they never read -----------------------------------------


@dataclass(frozen=True, slots=True)
class Unread:
    """Offsets of one partition a consumer process's last session stands
    past (on the cluster it moved to) whose records it never read, in any
    session."""

    process: str
    cluster: str
    topic: str
    partition: int
    read_committed: bool
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UnreadAcrossSessions:
    skipped: tuple[Unread, ...]
    duplicates: int  # values read again in a later session


def unread_across_sessions(history: History, final: FinalLogs) -> UnreadAcrossSessions:
    """For each consumer whose last session is not its first (it moved:
    a failover, a relink), the records of the final log of its last
    cluster below its position there that it never read."""
    seen: dict[str, dict[str, int]] = {}  # process -> value -> first session
    last: dict[str, tuple[str, str, int, bool]] = {}
    top: dict[tuple[str, int], int] = {}  # (process, partition) -> max offset, last session
    duplicates = 0
    for op in history.polls():
        v = op.value
        if op.type != "ok" or not isinstance(v, Poll):
            continue
        mine = seen.setdefault(op.process, {})
        if last.get(op.process, ("", "", -1, False))[2] != v.session:
            for key in [k for k in top if k[0] == op.process]:
                del top[key]
        last[op.process] = (op.cluster, v.topic, v.session, v.read_committed)
        for partition, offset, value in v.records:
            first = mine.setdefault(value, v.session)
            if first < v.session:
                duplicates += 1
            key = (op.process, partition)
            top[key] = max(top.get(key, -1), offset)
    skipped: list[Unread] = []
    for process, (cluster, topic, session, committed) in sorted(last.items()):
        if session == 0:
            continue
        mine = seen.get(process, {})
        for (proc, partition), high in sorted(top.items()):
            if proc != process:
                continue
            log = final.get((cluster, topic, partition), {})
            missed = tuple(o for o, val in sorted(log.items()) if o <= high and val not in mine)
            if missed:
                skipped.append(Unread(process, cluster, topic, partition, committed, missed))
    return UnreadAcrossSessions(tuple(skipped), duplicates)


def check_skips_across_sessions(
    history: History,
    final: FinalLogs,
    cuts: CutEvents,
    recovery_cuts: Mapping[tuple[str, str, int], list[int]],
    hidden: Mapping[tuple[str, str, int], set[int]],
) -> list[Violation]:
    """skip_across_failover: a consumer that moved to another cluster stands
    past records there it never read, in any session. Not a skip: a record
    a read_committed reader cannot read (`hidden`), or one at or above a
    cut of that partition that no recovery made (the link's data path, a
    topic's deletion, an unclean election: the reader may have passed that
    offset before the cut, as a Kafka consumer passes an unclean leader's
    truncation; the cut is reported). A confirmed recovery's cut moves the
    groups past it back and reports it, so the group reads what follows."""
    details: list[str] = []
    for u in unread_across_sessions(history, final).skipped:
        key = (u.cluster, u.topic, u.partition)
        recovered = set(recovery_cuts.get(key, []))
        other = [c.offset for c in cuts.get(key, []) if c.by_link or c.offset not in recovered]
        gone = hidden.get(key, set()) if u.read_committed else set()
        missed = [o for o in u.offsets if o not in gone and not any(c <= o for c in other)]
        if missed:
            details.append(
                f"{u.process} moved to {u.cluster} and stands past {len(missed)} records of "
                f"{u.topic}-{u.partition} it never read (offsets {missed[:5]}"
                + (" ..." if len(missed) > 5 else "")
                + ")"
            )
    return _capped("skip_across_failover", details)


# -- invariants 4 and 5 (SYNC links) ----------------------------------------------------


def check_sync_acks(history: History) -> list[Violation]:
    """Invariant 4 at the acknowledgement: every witness holds the record."""
    details: list[str] = []
    for o in history.sends():
        v = o.value
        if o.type != "ok" or not isinstance(v, Send):
            continue
        for follower, topic, end in v.sync_witnesses:
            if end < v.offset + v.records:
                details.append(
                    f"{o.process}: {v.value!r} acknowledged by {o.cluster} at {v.topic}-"
                    f"{v.partition} offset {v.offset} (t={o.complete_ms} ms) while its SYNC link "
                    f"was IN_SYNC, but follower {follower} held {topic}-{v.partition} only up to "
                    f"{end}"
                )
    return _capped("sync_ack_not_replicated", details)


def check_sync_acks_kept(
    history: History,
    final: FinalLogs,
    truncations: Truncations,
    compacted: CompactedKeys | None = None,
    deleted: Deleted | None = None,
    cut_events: CutEvents | None = None,
) -> list[Violation]:
    """Invariant 4 at the end (after any failover): a record acknowledged in
    IN_SYNC is still at its offset on every follower that witnessed it,
    unless a reported truncation (an unclean election) removed it, the
    follower's own retention deleted it, or its cleaner removed it for a
    newer record of its key."""
    details: list[str] = []
    for o in history.sends():
        v = o.value
        if o.type != "ok" or not isinstance(v, Send) or not v.value:
            continue
        for follower, topic, _end in v.sync_witnesses:
            key = (follower, topic, v.partition)
            log = final.get(key)
            if log is None or log.get(v.offset) == v.value:
                continue
            if cut_since(key, v.offset, o.invoke_ms, truncations, cut_events):
                continue
            if superseded(compacted, key, v.key, v.offset):
                continue
            if was_deleted(deleted, key, v.offset):
                continue  # the follower's retention deleted it: configured, not lost
            details.append(
                f"{o.process}: {v.value!r} acknowledged by {o.cluster} in IN_SYNC at "
                f"{v.topic}-{v.partition} offset {v.offset} is not on {follower} "
                f"{topic}-{v.partition} at the end (found {log.get(v.offset)!r})"
            )
    return _capped("sync_ack_lost", details)


def check_transactions_atomic(history: History) -> list[Violation]:
    """Invariant 5: per read_committed consumer session on a follower, a poll
    returning a record of a committed transaction has, by its end, delivered
    every record of that transaction in the partitions the consumer reads."""
    members: dict[str, set[str]] = {}
    txn_of: dict[str, str] = {}
    for o in history.sends():
        v = o.value
        if o.type == "ok" and isinstance(v, Send) and v.txn and v.value:
            members.setdefault(v.txn, set()).add(v.value)
            txn_of[v.value] = v.txn
    details: list[str] = []
    seen: dict[tuple[str, int], set[str]] = {}
    for o in history.polls():
        v = o.value
        if o.type != "ok" or not isinstance(v, Poll) or not v.read_committed:
            continue
        if not o.client_class.startswith("target_"):
            continue
        got = seen.setdefault((o.process, v.session), set())
        got.update(value for _p, _offset, value in v.records)
        for txn in sorted({txn_of[x] for _p, _o, x in v.records if x in txn_of}):
            missing = sorted(members[txn] - got)
            if missing:
                details.append(
                    f"{o.process} (session {v.session}) read part of transaction {txn} on "
                    f"{o.cluster} (t={o.complete_ms} ms): missing {missing[:5]}"
                )
    return _capped("partial_transaction", details)


# -- MirrorMaker 2 flows -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MirrorCopy:
    """One partition a mirror copies, and the position it committed on the source."""

    mirror: str
    source: str
    topic: str
    partition: int
    target: str
    remote_topic: str
    committed: int


def check_mirror_copies(
    copies: list[MirrorCopy], final: FinalLogs, truncations: Truncations
) -> list[Violation]:
    """At least once: a mirror commits a source position only once the target
    acknowledged every record below it, so each value stored below it on the
    source is in the remote partition (by value: offsets differ). Offsets at or
    past a reported truncation of the source partition are not judged (they
    hold records written after the cut), nor is a target partition that was
    itself truncated."""
    details: list[str] = []
    for c in copies:
        source_key = (c.source, c.topic, c.partition)
        target_key = (c.target, c.remote_topic, c.partition)
        if source_key not in final or truncations.get(target_key):
            continue
        cut = min(truncations.get(source_key, []), default=c.committed)
        held = set(final.get(target_key, {}).values())
        missing = [
            (offset, value)
            for offset, value in sorted(final[source_key].items())
            if offset < min(c.committed, cut) and value not in held
        ]
        if missing:
            details.append(
                f"mirror {c.mirror}: committed {c.topic}-{c.partition} at {c.committed} on "
                f"{c.source}, but {c.target}:{c.remote_topic}-{c.partition} lacks "
                f"{len(missing)} record(s) below it, first {missing[:3]}"
            )
    return _capped("mirror_at_least_once", details)


# -- invariants 5 and 6 from a real run's observations (chaos/runner.py) ---------------
#
# A real daemon does not expose the core's `ClusterState`, so the chaos runner
# judges invariants 5 and 6 from what clients observed: read_committed polls
# and final logs read both ways (5), and committed offsets sampled with the
# follower's high watermark (6). Pure functions of plain data.

# (cluster, topic, partition) -> the last stable offset the read_committed
# final log was read up to (records at or past it are undecided).
StableEnds = dict[tuple[str, str, int], int]

# (cluster, topic, partition) -> offset ranges [first, cut) a reported cut made
# uncommitted: it removed the COMMIT marker of a transaction begun at `first`
# (the cut's provenance entry names it), so its records there, once read as
# committed, are not any more. A reported loss, not a broken promise.
Reopened = dict[tuple[str, str, int], list[tuple[int, int]]]


def _reopened_at(reopened: Reopened, key: tuple[str, str, int], offset: int) -> bool:
    return any(first <= offset < cut for first, cut in reopened.get(key, ()))


def _sent_topics(history: History) -> dict[str, set[str]]:
    """The topics each transaction's records were sent to."""
    out: dict[str, set[str]] = {}
    for o in history.sends():
        v = o.value
        if isinstance(v, Send) and v.txn and v.value:
            out.setdefault(v.txn, set()).add(v.topic)
    return out


def _transactions(history: History) -> tuple[dict[str, set[str]], dict[str, str], set[str]]:
    """(transaction -> its values, value -> transaction, values of aborted ones)
    over every transactional send whatever its outcome."""
    members: dict[str, set[str]] = {}
    txn_of: dict[str, str] = {}
    aborted: set[str] = set()
    for o in history.sends():
        v = o.value
        if not isinstance(v, Send) or not v.txn or not v.value:
            continue
        members.setdefault(v.txn, set()).add(v.value)
        txn_of[v.value] = v.txn
        if o.type == "fail":
            aborted.add(v.value)
    return members, txn_of, aborted


def check_aborted_reads(
    history: History,
    final: FinalLogs,
    committed: FinalLogs,
    stable: StableEnds,
    reopened: Reopened | None = None,
) -> list[Violation]:
    """Invariant 5, what read_committed consumers saw: no poll returned a
    record of a transaction that was aborted (`fail` in the history), nor one
    that the cluster still holds at that offset in the end but hides from a
    read_committed reader below its last stable offset (it never committed),
    unless a reported cut made it uncommitted there (`reopened`)."""
    _members, txn_of, aborted = _transactions(history)
    details: list[str] = []
    for o in history.polls():
        v = o.value
        if o.type != "ok" or not isinstance(v, Poll) or not v.read_committed:
            continue
        for partition, offset, value in v.records:
            if value not in txn_of:
                continue
            key = (o.cluster, v.topic, partition)
            if value in aborted:
                why = "aborted"
            elif (
                final.get(key, {}).get(offset) == value
                and offset < stable.get(key, -1)
                and offset not in committed.get(key, {})
            ):
                if _reopened_at(reopened or {}, key, offset):
                    continue  # the cut that removed its COMMIT said so
                why = "never committed (hidden from read_committed in the final log)"
            else:
                continue
            details.append(
                f"{o.process} (session {v.session}, read_committed) read {value!r} of "
                f"transaction {txn_of[value]} at {v.topic}-{partition} offset {offset} on "
                f"{o.cluster} (t={o.complete_ms} ms), a transaction {why}"
            )
    return _capped("5 txn atomic", details)


def check_committed_logs_atomic(
    history: History,
    final: FinalLogs,
    committed: FinalLogs,
    stable: StableEnds,
    reopened: Reopened | None = None,
) -> list[Violation]:
    """Invariant 5 on the final logs of every cluster: of each transaction's
    records stored below the last stable offset, a read_committed reader sees
    all (in every partition) or none, and none of an aborted one. A record
    hidden where a reported cut made its transaction uncommitted (`reopened`)
    counts as lost there, not as stored.

    A transaction written to one topic is judged in each topic of a cluster
    that holds its records apart: a copy of it under another name (a
    namespace that copies the topic back from a cluster that copied it) has
    the outcome its own source gave it, and a reader of one topic never
    reads the other's. One written to several topics is judged across the
    topics it was written to, and each copy apart."""
    members, txn_of, aborted = _transactions(history)
    sent_to = _sent_topics(history)
    details: list[str] = []
    clusters = sorted({c for c, _t, _p in final})
    for cluster in clusters:
        stored: dict[tuple[str, str], set[str]] = {}
        visible: dict[tuple[str, str], set[str]] = {}
        for key, log in final.items():
            if key[0] != cluster:
                continue
            end = stable.get(key, -1)
            seen = committed.get(key, {})
            for offset, value in log.items():
                txn = txn_of.get(value)
                if txn is None or offset >= end:
                    continue
                topics = sent_to[txn]
                copy = "" if len(topics) > 1 and key[1] in topics else key[1]
                if seen.get(offset) == value:
                    visible.setdefault((txn, copy), set()).add(value)
                elif _reopened_at(reopened or {}, key, offset):
                    continue
                stored.setdefault((txn, copy), set()).add(value)
        for txn, copy in sorted(visible):
            shown = visible[(txn, copy)]
            hidden = sorted(stored[(txn, copy)] - shown)
            where = f" in {copy!r}" if copy else ""
            if shown & aborted:
                details.append(
                    f"{cluster}: aborted transaction {txn} is visible to read_committed "
                    f"readers{where} ({sorted(shown)[:5]})"
                )
            elif hidden:
                details.append(
                    f"{cluster}: transaction {txn} is partly visible to read_committed "
                    f"readers{where}: {sorted(shown)[:5]} visible, {hidden[:5]} stored but "
                    f"hidden (of {len(members[txn])} records)"
                )
    return _capped("5 txn atomic", details)


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One committed offset read on a follower, then (after it) the follower's
    high watermark of that partition; times are when the reads began and ended."""

    cluster: str
    group: str
    topic: str
    partition: int
    offset: int
    high_watermark: int
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class OffsetMove:
    """A committed offset an admin recovery call reported moving back, with
    the call's interval."""

    cluster: str
    group: str
    topic: str
    partition: int
    from_offset: int
    to_offset: int
    begin_ms: int
    end_ms: int


def check_offset_samples(samples: list[OffsetSample], moves: list[OffsetMove]) -> list[Violation]:
    """Invariant 6 from samples. Per (cluster, group, topic, partition):
    - a sampled committed offset above the high watermark read after it is a
      violation, unless a reported move of that offset overlaps the sample (a
      recovery may cut the log between the two reads; it moves the offset too);
    - a committed offset lower than the one sampled before it is a violation
      unless a reported move of that offset, to at most the lower value,
      overlaps the interval from the earlier sample to the later one."""
    by_key: dict[tuple[str, str, str, int], list[OffsetSample]] = {}
    for s in samples:
        by_key.setdefault((s.cluster, s.group, s.topic, s.partition), []).append(s)
    moved: dict[tuple[str, str, str, int], list[OffsetMove]] = {}
    for m in moves:
        moved.setdefault((m.cluster, m.group, m.topic, m.partition), []).append(m)
    above: list[str] = []
    back: list[str] = []
    for key in sorted(by_key):
        cluster, group, topic, partition = key
        mine = moved.get(key, [])
        previous: OffsetSample | None = None
        for s in sorted(by_key[key], key=lambda x: (x.start_ms, x.end_ms)):
            if s.offset > s.high_watermark and not any(
                m.begin_ms <= s.end_ms and m.end_ms >= s.start_ms for m in mine
            ):
                above.append(
                    f"{cluster}: group {group!r} committed offset {s.offset} for "
                    f"{topic}-{partition} exceeds the follower high watermark "
                    f"{s.high_watermark} (t={s.start_ms}-{s.end_ms} ms)"
                )
            if (
                previous is not None
                and s.offset < previous.offset
                and not any(
                    m.to_offset <= s.offset
                    and m.begin_ms <= s.end_ms
                    and m.end_ms >= previous.start_ms
                    for m in mine
                )
            ):
                back.append(
                    f"{cluster}: group {group!r} committed offset for {topic}-{partition} "
                    f"moved back from {previous.offset} (t={previous.start_ms} ms) to "
                    f"{s.offset} (t={s.start_ms} ms) with no recovery reporting it"
                )
            previous = s
    return _capped("6 replicated offsets", above + back)


# -- one writer at rest (procedures that survive a crash) -------------------------------------


@dataclass(frozen=True, slots=True)
class MovedNamespace:
    """A namespace a durable procedure run on `cluster` set out to move, as
    its journalled plan named it: a reversal from `cluster` to `peer`, a
    failover from `peer` to `cluster`, a recovery making `cluster` follow
    `peer` on `link`."""

    link: str
    cluster: str
    peer: str
    kind: str  # "topic" | "group"
    prefix: str  # on `cluster`
    peer_prefix: str  # on `peer`
    procedure: str = plans.REVERSE  # plans.REVERSE | FAILOVER | RECOVER
    # On how many of the two clusters clients could write it when the plan
    # began (before its first change).
    found: int = 1
    # The reversal's last run answered rolled back: it undid its own
    # reservations and ended, leaving the pair as it found it.
    rolled_back: bool = False


def writable(state: ClusterState, kind: str, prefix: str) -> bool:
    """Whether clients may write the namespace there: it exists, is not
    reserved and follows no link."""
    ns = state.namespaces.find(ResourceType.parse(kind), prefix)
    return ns is not None and not ns.reserved and ns.follower_link is None


def check_one_writer(
    moved: Iterable[MovedNamespace], states: dict[str, ClusterState], up: dict[str, bool]
) -> list[Violation]:
    """At rest (after the liveness phase finished every journalled plan with
    one re-run), each namespace a reversal moved is writable on exactly one
    of its two clusters: neither means no client can write it (a reversal
    cut short and never finished), both means two histories. A reversal
    that answered rolled back promised only to undo its own reservations
    (namespaces reserved before it began stay reserved, docs/operations.md):
    its namespaces must be writable on as many clusters as it found them,
    which is one unless the operator's earlier verbs made it none (a
    reservation, a deleted link) or two (a failover the old leader had not
    heard of).

    A failover or a recovery changes only the side it runs on (`cluster`):
    there, a namespace it named is writable (a failover), follows the link
    (a recovery), or is as it was (refused); never reserved and following no
    link, which no client writes and no record reaches (a procedure cut
    short between its detach or cut and its end). What a recovery made
    follow must not follow a namespace reserved on the peer and following
    no link there: then no client writes it on either. A failover with the old
    leader alive leaves two writers: the documented split, until a recovery."""
    details = []
    for m in moved:
        if not (up.get(m.cluster) and up.get(m.peer)):
            continue
        here = writable(states[m.cluster], m.kind, m.prefix)
        there = writable(states[m.peer], m.kind, m.peer_prefix)
        count = int(here) + int(there)
        if m.procedure == plans.RECOVER and _follows(states[m.cluster], m.kind, m.prefix, m.link):
            # A recovery that made `cluster` follow the peer: the peer must
            # be where clients write it (or follow on from where they do).
            if not _orphaned(states[m.peer], m.kind, m.peer_prefix):
                continue
            what = (
                f"writable on neither cluster: {m.cluster} follows {m.peer}, where it is "
                "reserved and follows no link"
            )
        elif m.procedure != plans.REVERSE:
            # A failover or a recovery changes only `cluster`'s side.
            if not _orphaned(states[m.cluster], m.kind, m.prefix):
                continue
            what = f"reserved on {m.cluster} and following no link"
        else:
            expected = m.found if m.rolled_back else 1
            if count == expected:
                continue
            what = f"writable on {_WRITERS[count]}"
        planned = [c for c in (m.cluster, m.peer) if m.link in states[c].plans.plans]
        details.append(
            f"{m.kind} namespace {m.prefix!r} on {m.cluster} / {m.peer_prefix!r} on {m.peer} "
            f"(link {m.link}) is {what} at rest after a {m.procedure}"
            + (f" rolled back, which found it writable on {_WRITERS[m.found]}"
               if m.rolled_back else "")
            + (f"; a plan is still journalled on {', '.join(planned)}" if planned else "")
        )
    return _capped("one writer at rest", details)


_WRITERS = {0: "neither cluster", 1: "one cluster", 2: "both clusters"}


def _follows(state: ClusterState, kind: str, prefix: str, link: str) -> bool:
    """Whether the namespace follows `link` there."""
    ns = state.namespaces.find(ResourceType.parse(kind), prefix)
    return ns is not None and ns.follower_link == link


def _orphaned(state: ClusterState, kind: str, prefix: str) -> bool:
    """Reserved, and following no link."""
    ns = state.namespaces.find(ResourceType.parse(kind), prefix)
    return ns is not None and ns.reserved and ns.follower_link is None
