"""Provenance entries: where ranges of a partition's offsets came from (spec section 8).

Each partition keeps its history as a list of `ProvenanceItem`s, in order:
- START: from `offset` on, the records are copies of `source`'s, over the
  link `link_id` in its epoch `link_epoch`;
- DETACHED: the link's data ends at `offset` (later offsets were written here);
- TRUNCATED: the log was cut back to `offset`, `removed` records gone (by a
  recovery, or `reason` "diverged": a follower cut where its log parted from
  its source's, moving the committed offsets `offsets_moved` back; a cut
  that removed a transaction's COMMIT marker names that transaction in
  `uncommitted` as (producer id, first offset): its records below the cut,
  read as committed until then, are committed no more);
- GAP: the records [`offset`, `to_offset`) were never copied: the source's
  log start had moved past the follower's position (retention, deleted
  records) when the link reached it at `at_ms`; the follower's log went on
  from `to_offset`, and `reason` says why.

The journal stores each entry in the form it has always had (a JSON object
told apart by its keys: `start`, `detached_at`, `truncated_to` or
`gap_from`), so data
dirs written before entries were typed load unchanged, and `to_entry` writes
the same form back.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from linkd.core import journal as jr


@dataclass(frozen=True, slots=True)
class Gap:
    """Records [from_offset, to_offset) of a follower partition that its
    source no longer held when the link reached them, found at `at_ms`."""

    topic: str  # the follower's topic
    partition: int
    from_offset: int
    to_offset: int
    at_ms: int
    reason: str

    @property
    def records(self) -> int:
        return self.to_offset - self.from_offset


class ProvenanceKind(StrEnum):
    START = "start"
    DETACHED = "detached"
    TRUNCATED = "truncated"
    GAP = "gap"


@dataclass(frozen=True, slots=True)
class ProvenanceItem:
    kind: ProvenanceKind
    offset: int
    source: str = ""
    link_id: str = ""
    link_epoch: int = 0
    removed: int = 0
    reason: str = ""
    offsets_moved: tuple[tuple[str, int], ...] = ()
    to_offset: int = 0  # GAP: the first offset after the range never copied
    # GAP: when the follower found it; TRUNCATED: when the cut was made (0: not known).
    at_ms: int = 0
    # TRUNCATED: transactions whose COMMIT the cut removed, (producer id, first offset).
    uncommitted: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, ProvenanceKind):
            object.__setattr__(self, "kind", ProvenanceKind(self.kind))
        assert self.offset >= 0, f"provenance offset below 0: {self!r}"
        assert self.removed >= 0, f"provenance removed below 0: {self!r}"

    @classmethod
    def attached(cls, start: int, source: str, link_id: str, link_epoch: int) -> ProvenanceItem:
        return cls(ProvenanceKind.START, start, source, link_id, link_epoch)

    @classmethod
    def detached(cls, at: int, link_id: str) -> ProvenanceItem:
        return cls(ProvenanceKind.DETACHED, at, link_id=link_id)

    @classmethod
    def truncated(
        cls,
        to: int,
        link_id: str,
        removed: int,
        reason: str = "",
        offsets_moved: tuple[tuple[str, int], ...] = (),
        uncommitted: tuple[tuple[int, int], ...] = (),
        at_ms: int = 0,
    ) -> ProvenanceItem:
        assert all(first < to for _pid, first in uncommitted), (to, uncommitted)
        assert at_ms >= 0, at_ms
        return cls(
            ProvenanceKind.TRUNCATED,
            to,
            link_id=link_id,
            removed=removed,
            reason=reason,
            offsets_moved=offsets_moved,
            uncommitted=uncommitted,
            at_ms=at_ms,
        )

    @classmethod
    def gap(cls, start: int, end: int, link_id: str, reason: str, at_ms: int) -> ProvenanceItem:
        assert end > start, f"empty gap [{start}, {end})"
        return cls(
            ProvenanceKind.GAP, start, link_id=link_id, reason=reason, to_offset=end, at_ms=at_ms
        )

    @property
    def gap_records(self) -> int:
        """How many offsets a GAP entry says were never copied (0 otherwise)."""
        return self.to_offset - self.offset if self.kind is ProvenanceKind.GAP else 0

    @classmethod
    def from_entry(cls, entry: dict[str, object]) -> ProvenanceItem:
        """The journal's form (see the module docstring)."""
        if "start" in entry:
            return cls.attached(
                jr.json_int(entry["start"]),
                str(entry.get("source", "")),
                str(entry.get("link_id", "")),
                jr.json_int(entry.get("link_epoch", 0)),
            )
        if "detached_at" in entry:
            return cls.detached(jr.json_int(entry["detached_at"]), str(entry.get("link_id", "")))
        if "truncated_to" in entry:
            return cls.truncated(
                jr.json_int(entry["truncated_to"]),
                str(entry.get("link_id", "")),
                jr.json_int(entry.get("removed", 0)),
                str(entry.get("reason", "")),
                tuple(
                    (str(g), jr.json_int(o))
                    for g, o in map(jr.json_list, jr.json_list(entry.get("offsets_moved", [])))
                ),
                tuple(
                    (jr.json_int(pid), jr.json_int(first))
                    for pid, first in map(jr.json_list, jr.json_list(entry.get("uncommitted", [])))
                ),
                jr.json_int(entry.get("at_ms", 0)),
            )
        if "gap_from" in entry:
            return cls.gap(
                jr.json_int(entry["gap_from"]),
                jr.json_int(entry["gap_to"]),
                str(entry.get("link_id", "")),
                str(entry.get("reason", "")),
                jr.json_int(entry.get("at_ms", 0)),
            )
        raise ValueError(f"not a provenance entry: {entry!r}")

    def to_entry(self) -> dict[str, object]:
        """The journal's form; `from_entry(item.to_entry()) == item`."""
        if self.kind is ProvenanceKind.START:
            return {
                "start": self.offset,
                "source": self.source,
                "link_id": self.link_id,
                "link_epoch": self.link_epoch,
            }
        if self.kind is ProvenanceKind.DETACHED:
            return {"detached_at": self.offset, "link_id": self.link_id}
        if self.kind is ProvenanceKind.GAP:
            return {
                "gap_from": self.offset,
                "gap_to": self.to_offset,
                "link_id": self.link_id,
                "reason": self.reason,
                "at_ms": self.at_ms,
            }
        entry: dict[str, object] = {
            "truncated_to": self.offset,
            "link_id": self.link_id,
            "removed": self.removed,
        }
        if self.reason:
            entry["reason"] = self.reason
            entry["offsets_moved"] = [[g, o] for g, o in self.offsets_moved]
        if self.uncommitted:
            entry["uncommitted"] = [[pid, first] for pid, first in self.uncommitted]
        if self.at_ms:
            entry["at_ms"] = self.at_ms
        return entry

    def journal_record(self, topic: str, partition: int) -> jr.Provenance:
        return jr.Provenance(topic, partition, self.to_entry())


def check_history(entries: list[ProvenanceItem], topic: str, partition: int, log_end: int) -> None:
    """Asserts what a partition's history promises once an entry was added
    (`entries[-1]`, as the log stands after it: `log_end`): the history ends
    at the log's end (a START or DETACHED entry where the log ends, a GAP
    where the log starts again, a TRUNCATED one where the cut left it), and
    the new entry goes on from the one before (starts no earlier than where
    that one ends), unless it is a cut, which may go back."""
    new = entries[-1]
    end = new.to_offset if new.kind is ProvenanceKind.GAP else new.offset
    assert end == log_end, (
        f"provenance of {topic}-{partition}: the new {new.kind} entry ends at {end}, "
        f"the log at {log_end}"
    )
    if len(entries) > 1 and new.kind is not ProvenanceKind.TRUNCATED:
        last = entries[-2]
        last_end = last.to_offset if last.kind is ProvenanceKind.GAP else last.offset
        assert new.offset >= last_end, (
            f"provenance of {topic}-{partition}: a {new.kind} entry at {new.offset} after a "
            f"{last.kind} entry ending at {last_end} (and no cut between)"
        )
