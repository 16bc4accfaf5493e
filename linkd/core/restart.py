"""A cluster's state rebuilt after its process died: one procedure, two shells.

A cluster keeps its metadata as a journal of records (with, now and then, a
snapshot that replaces the records before it) and its partitions as record
batches. After a crash, `recover_into` rebuilds the state from exactly that:
the snapshot, the records since, and the batches each partition holds. The
daemon (`ClusterNode.open`) reads those from its data directory; the
simulator keeps them in memory, encoded as the daemon stores them (JSON), and
calls the same function when a simulated cluster restarts, so a record the
journal replays wrongly breaks a simulated run as it breaks a daemon.

After the state is rebuilt, `ClusterState.recovery_completions` finishes the
transactions that were prepared before the crash (the shells carry out its
effects before serving anyone).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from linkd.core import journal as jr
from linkd.core import records as rb
from linkd.core.cluster import ClusterState, Topic
from linkd.core.faults import NO_FAULTS, Faults

# The batches found on disk for one partition, oldest first, each with the
# marker type of a control batch (None for data).
Batches = list[tuple[rb.BatchHeader, int | None]]


@dataclass(frozen=True, slots=True)
class StoredLog:
    """What a shell finds of one partition: its batches and where its
    segments start (oldest first), which the core's segments then follow."""

    batches: Batches
    segment_bases: tuple[int, ...] = ()


def recover_into(
    state: ClusterState,
    snapshot: dict[str, Any] | None,
    records: Iterable[dict[str, Any]],
    batches_of: Callable[[Topic, int], StoredLog],
    now_ms: int = 0,
) -> set[str]:
    """Rebuilds `state` (fresh: no topics yet) from a snapshot, the journal
    records written after it in their stored form (`journal.decode` reads
    each; one it cannot read raises JournalRecordError naming it, so a
    cluster never starts half-understood), and each partition's batches
    (`batches_of` is asked once per partition of every topic that survives
    the replay, for its batches and segments; `now_ms`: the shell's time,
    when segments found are taken as written, as Kafka takes a segment it
    loads). Returns
    the ids of the topics that survive: data of any other topic is an orphan
    of a deletion the crash interrupted, to be removed."""
    assert not state.topics, "recover_into needs a fresh state"
    if snapshot is not None:
        state.restore(snapshot)
    for record in records:
        state.apply_record(jr.decode(record))
    live: set[str] = set()
    for topic in list(state.topics.values()):
        live.add(topic.topic_id)
        for p in range(len(topic.partitions)):
            stored = batches_of(topic, p)
            state.recover_partition(
                topic.name, p, stored.batches, stored.segment_bases, now_ms
            )
    return live


def compacted(
    cluster_id: str,
    snapshot: dict[str, Any] | None,
    records: Iterable[dict[str, Any]],
    faults: Faults = NO_FAULTS,
) -> dict[str, Any]:
    """The snapshot that replaces `snapshot` and the journal `records` after
    it: their fold, replayed into a fresh state, never the live state. The
    live state may already hold changes whose records are still on their way
    to the journal (a shell writes a Journal effect once the appends before it
    are durable); a snapshot of it would hold them too, and replaying those
    records after it would apply them twice. `faults`: the cluster's own
    (a fresh state starts from what they say, as the live one did)."""
    state = ClusterState(cluster_id, faults=faults)
    if snapshot is not None:
        state.restore(snapshot)
    for record in records:
        state.apply_record(jr.decode(record))
    return state.snapshot()


@dataclass
class JournalBook:
    """What a shell's next snapshot folds: the last snapshot written and the
    records stored since, and when the next one is due (every `every`
    records). Both shells keep one beside their stored journal; a shell
    rebuilds it from what it read at start (`ClusterNode.open`,
    `SimCluster.restart`)."""

    cluster_id: str
    every: int
    base: dict[str, Any] | None = None
    since: list[dict[str, Any]] = field(default_factory=list)
    faults: Faults = NO_FAULTS

    def __post_init__(self) -> None:
        assert self.every > 0, "a snapshot is due every N > 0 records"

    def stored(self, records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
        """`records` were appended to the stored journal. Returns the snapshot
        to write when one is due (`compacted`: the base and the records
        since); the shell writes it, then calls `snapshot_written`."""
        self.since += records
        if len(self.since) < self.every:
            return None
        return compacted(self.cluster_id, self.base, self.since, self.faults)

    def snapshot_written(self, snapshot: dict[str, Any]) -> None:
        """`snapshot` (from `stored`) replaced the records before it."""
        self.base, self.since = snapshot, []


def stored_form(obj: dict[str, Any]) -> str:
    """A journal record or a snapshot as the daemon's journal stores it
    (`linkd.storage.metadata`: compact JSON, no NaN). The simulator keeps
    this text, so what JSON cannot carry (a tuple read back as a list, a
    non-string key) differs after a restart there as on a daemon."""
    return _STORED_ENCODER.encode(obj)


# What `json.dumps(obj, separators=(",", ":"), allow_nan=False)` builds on
# every call, built once (a journal record is encoded on every metadata write).
_STORED_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def read_stored(text: str) -> dict[str, Any]:
    obj = json.loads(text)
    assert isinstance(obj, dict)
    return obj


__all__ = [
    "Batches",
    "JournalBook",
    "StoredLog",
    "compacted",
    "read_stored",
    "recover_into",
    "stored_form",
]
