"""What the core asks a shell to do: the effects a core call returns.

A call into the core either refuses (raises ClusterError, nothing changed) or
changes the model and returns effects for the shell to carry out, in order:
- `AppendBatch`: write these bytes at the partition's log end;
- `Journal`: make these metadata records durable; every append earlier in
  the same list must be durable first (write-ahead);
- `CreateLogs`, `DeleteTopicData`, `DeleteBelow`, `ResetLog`, `TruncateLog`:
  files to create, remove, restart or cut.

Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from linkd.core import records as rb
from linkd.core.journal import JournalRecord


@dataclass(frozen=True, slots=True)
class AppendBatch:
    topic_id: str
    partition: int
    batch: bytes
    header: rb.BatchHeader
    # The batch starts a new segment (the core's roll decision: segment.bytes,
    # segment.ms, the index's offset span); the shell's files follow it.
    roll: bool = False


@dataclass(frozen=True, slots=True)
class Journal:
    """Metadata records to make durable (stored as `journal.encode` gives)."""

    records: tuple[JournalRecord, ...]


@dataclass(frozen=True, slots=True)
class CreateLogs:
    """Open a new topic's partition logs. A shell whose storage refuses to
    open any of them keeps nothing of the topic (its journal record comes
    after this effect, so it was never written) and the topic leaves the
    state (`ClusterState.discard_unjournalled_topic`)."""

    topic_id: str
    partitions: tuple[int, ...]
    segment_bytes: int


@dataclass(frozen=True, slots=True)
class DeleteTopicData:
    topic_id: str


@dataclass(frozen=True, slots=True)
class DeleteBelow:
    """Remove the segments wholly below `offset` (the new log start); with
    `roll`, start an empty segment at the log end first (retention is
    deleting every segment the partition had)."""

    topic_id: str
    partition: int
    offset: int
    roll: bool = False


@dataclass(frozen=True, slots=True)
class ResetLog:
    """Empty the partition's files and start its log at `offset` (a follower
    attaching to a source whose oldest records are gone)."""

    topic_id: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Remove every batch at or after `offset` (a follower cut at divergence).
    The segments that start at or after `offset` go and the one holding the
    cut becomes the active one; the first segment always stays."""

    topic_id: str
    partition: int
    offset: int


Effect = AppendBatch | Journal | CreateLogs | DeleteTopicData | DeleteBelow | ResetLog | TruncateLog


@dataclass(frozen=True, slots=True)
class Wake:
    """High watermarks moved (or durable records wait for a SYNC follower's
    fetch): wake the long polls watching these (topic, partition); None:
    every long poll (a transaction's markers pass their high watermarks
    together, so a move may reach beyond the partitions written)."""

    partitions: tuple[tuple[str, int], ...] | None


def journal(records: Sequence[JournalRecord]) -> list[Effect]:
    """One Journal effect for the records, or none when there are none."""
    return [Journal(tuple(records))] if records else []


__all__ = [
    "AppendBatch",
    "CreateLogs",
    "DeleteBelow",
    "DeleteTopicData",
    "Effect",
    "Journal",
    "ResetLog",
    "TruncateLog",
    "Wake",
    "journal",
]
