"""In-memory partition logs: the simulator's stand-in for segment files.

Rules:
- A store holds the exact bytes the core told the shell to append
  (`AppendBatch`), in offset order, so a replica fetch serves the source's
  bytes as they are and the checkers can compare logs byte for byte.
- Each batch also carries a logical size in bytes. Bulk workloads let one
  record stand for many kilobytes (so a six-hour outage of thousands of
  partitions stays small in memory); the network and I/O models charge the
  logical size, never the in-memory size.
- `generation` counts truncations and resets, so a durability completion
  scheduled before a truncation cannot mark newer bytes durable.
- A batch may start past the log end (a copy of a log the source's cleaner
  left gaps in; the core decides where batches go), never before it; the
  log cleaner replaces a run of batches with their cleaned copies
  (`replace`, `sim/log_cleaner.py`).
- Segments: where each starts (`segment_bases`), as the core's effects
  define them: a new one where the core rolls (`AppendBatch.roll`) or
  retention starts an empty one (`DeleteBelow`), the ones wholly below a
  new log start deleted, a truncation back into an earlier one making it
  active again (`TruncateLog`). A restart hands them back to the core with
  the batches.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


# Not frozen: one is built for every batch stored, and a frozen dataclass's
# __init__ costs several times a plain one's; nothing assigns to or hashes
# one (a store's list is cut and appended to, its batches only read).
@dataclass(slots=True)
class StoredBatch:
    base_offset: int
    next_offset: int
    data: bytes
    logical_bytes: int


@dataclass(slots=True)
class PartitionStore:
    log_start_offset: int = 0
    batches: list[StoredBatch] = field(default_factory=list)
    bases: list[int] = field(default_factory=list)
    generation: int = 0
    segment_bases: list[int] = field(default_factory=lambda: [0])

    @property
    def log_end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.log_start_offset

    def _active_holds_batches(self) -> bool:
        return bool(self.batches) and self.batches[-1].base_offset >= self.segment_bases[-1]

    def append(self, batch: StoredBatch, roll: bool = False) -> None:
        if batch.base_offset < self.log_end_offset:
            raise ValueError(
                f"store: batch at {batch.base_offset} does not continue the log at "
                f"{self.log_end_offset}"
            )
        if roll and self._active_holds_batches():
            self.segment_bases.append(batch.base_offset)
        self.batches.append(batch)
        self.bases.append(batch.base_offset)

    def roll_empty(self) -> None:
        """An empty active segment at the log end (retention deletes the rest)."""
        if self._active_holds_batches():
            self.segment_bases.append(self.log_end_offset)

    def replace(self, first: int, last: int, batches: list[StoredBatch]) -> None:
        """The batches at indexes [first, last) become `batches` (the same
        offsets or fewer: the log cleaner's rewrite)."""
        self.batches[first:last] = batches
        self.bases[first:last] = [b.base_offset for b in batches]

    def index_at(self, offset: int) -> int:
        i = bisect.bisect_right(self.bases, offset) - 1
        if i >= 0 and self.batches[i].next_offset > offset:
            return i
        return i + 1

    def read(
        self, offset: int, upper_offset: int, budget_bytes: int
    ) -> tuple[list[StoredBatch], int]:
        """Whole batches overlapping [offset, upper_offset): at least one, then
        while the logical budget lasts. Returns (batches, logical bytes)."""
        out: list[StoredBatch] = []
        total = 0
        for i in range(self.index_at(offset), len(self.batches)):
            b = self.batches[i]
            if b.base_offset >= upper_offset:
                break
            if out and total + b.logical_bytes > budget_bytes:
                break
            out.append(b)
            total += b.logical_bytes
        return out, total

    def truncate_to(self, offset: int) -> None:
        keep = self.index_at(offset)
        del self.batches[keep:]
        del self.bases[keep:]
        # `TruncateLog`: segments from the cut on go; one always stays.
        self.segment_bases = [b for b in self.segment_bases if b < offset] or (
            self.segment_bases[:1]
        )
        self.generation += 1

    def reset(self, offset: int) -> None:
        self.batches.clear()
        self.bases.clear()
        self.log_start_offset = offset
        self.segment_bases = [offset]
        self.generation += 1

    def delete_below(self, offset: int) -> None:
        drop = 0
        while drop < len(self.batches) and self.batches[drop].next_offset <= offset:
            drop += 1
        del self.batches[:drop]
        del self.bases[:drop]
        self.log_start_offset = max(self.log_start_offset, offset)
        while len(self.segment_bases) > 1 and self.segment_bases[1] <= offset:
            del self.segment_bases[0]
