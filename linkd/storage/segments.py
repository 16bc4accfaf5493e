"""One partition's log on disk: Kafka-style segment files of record batches.

Layout of a partition directory (the same names as Kafka's):
    00000000000000000000.log    concatenated record batches v2, exactly as received
    00000000000000000000.index  sparse offset index of that segment
    00000000000000001000.log    next segment; the name is the base offset of its first batch
    ...

Rules this module keeps:
- Offsets are dense: a batch is appended only at the log end offset, and the
  first batch of a segment starts at the segment's base offset; except in a
  log marked as having gaps (the file `offset-gaps`, written and fsynced
  before the first gap): the log cleaner of a compacted topic removes batches,
  and a follower copies a cleaned log as it is. There a batch may start past
  the previous one's end (never before), and a segment past the previous
  segment's end.
- The log cleaner rewrites a non-active segment crash-safely
  (`write_cleaned`, then `swap_cleaned`): the cleaned copy is written beside
  it as `<base>.log.cleaned`, fsynced, and renamed over the segment (one
  atomic rename); recovery deletes a `.cleaned` file a crash left behind. A
  swap is refused when the log changed shape meanwhile (truncated, reset,
  segments deleted: `generation`).
- Only the last (active) segment is written. Where a segment starts is the
  cluster model's decision (`linkd/core/partition.py`: segment.bytes,
  segment.ms, the index's offset span), handed to `append` as `roll`; a
  caller that gives none (tests, tools) gets the size rule alone: a segment
  rolls when the next batch would take it past `segment_bytes` (a larger
  batch still goes in, alone) or an offset would not fit the index's 32-bit
  relative offset.
- `append` never fsyncs; `flush` does, and it is the only method that may be
  called from another thread. Everything else belongs to one thread (the
  event loop). The caller acknowledges only what it has flushed, so a crash
  can only tear the unacknowledged tail of the log.
- Recovery at `open` CRC-checks every batch in order and cuts the log at the
  first torn, corrupt or non-contiguous batch: that segment is truncated there
  and every later segment is deleted.
- The index is a cache. Entry format (Kafka's): relative offset int32 |
  file position int32, both big-endian, for the batch starting at that
  position. A batch gets an entry when it starts at least
  `index_interval_bytes` after the previous entry (or the segment start), so
  the index is a pure function of the segment's contents; recovery rebuilds it
  and rewrites the file when it differs. It is never fsynced.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from linkd.core.records import (
    HEADER_SIZE,
    BatchHeader,
    CorruptBatchError,
    check_batch,
    parse_header,
)
from linkd.storage.files import fsync_dir, write_all, write_file
from linkd.storage.handles import HandleCache

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
CLEANED_SUFFIX = ".log.cleaned"
GAPS_MARKER = "offset-gaps"
_INDEX_ENTRY = struct.Struct(">ii")
_INT32_MAX = (1 << 31) - 1
# Recovery reads segments in windows of this size rather than whole files.
_SCAN_WINDOW = 1 << 20


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `PartitionLogStore.open` found and repaired."""

    segments: int  # segments kept
    batches: int  # batches kept
    truncated_bytes: int  # bytes dropped: the torn tail plus every later segment
    reason: str | None  # what was wrong at the cut, None when nothing was cut


@dataclass(slots=True)
class _Segment:
    base_offset: int
    size: int = 0
    next_offset: int = -1  # offset after the last batch; base_offset while empty
    # Sparse index, in memory: absolute base offsets and file positions of indexed batches.
    index_offsets: list[int] = field(default_factory=list)
    index_positions: list[int] = field(default_factory=list)
    # The last batch appended to it in this process, and where: a reader at
    # the log end (a caught-up follower's fetch) finds it without scanning
    # from the index entry before it. Good only while that batch still ends
    # the segment (`tail`).
    last_appended: tuple[int, BatchHeader] | None = None

    def tail(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The last batch appended, if it holds `offset` and still ends the segment."""
        last = self.last_appended
        if last is None:
            return None
        position, header = last
        if position + header.size_bytes != self.size or header.next_offset != self.next_offset:
            return None
        return last if header.base_offset <= offset <= header.last_offset else None

    def __post_init__(self) -> None:
        if self.next_offset < 0:
            self.next_offset = self.base_offset

    @property
    def name(self) -> str:
        return f"{self.base_offset:020d}"

    def floor_position(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before `offset`."""
        i = bisect.bisect_right(self.index_offsets, offset)
        return self.index_positions[i - 1] if i else 0

    def ceiling_position(self, offset: int) -> int:
        """File position of the first indexed batch starting at or after `offset` (or the end)."""
        i = bisect.bisect_left(self.index_offsets, offset)
        return self.index_positions[i] if i < len(self.index_positions) else self.size

    def wants_index_entry(self, position: int, interval: int) -> bool:
        last = self.index_positions[-1] if self.index_positions else 0
        return position - last >= interval

    def index_bytes(self) -> bytes:
        return b"".join(
            _INDEX_ENTRY.pack(o - self.base_offset, p)
            for o, p in zip(self.index_offsets, self.index_positions, strict=True)
        )

    def drop_index_from(self, position: int) -> None:
        """Forgets index entries of batches at or after `position`."""
        i = bisect.bisect_left(self.index_positions, position)
        del self.index_offsets[i:]
        del self.index_positions[i:]






def _open_append(path: Path, *, truncate: bool = False) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    return os.open(path, flags | (os.O_TRUNC if truncate else 0), 0o644)


class PartitionLogStore:
    """The segment files of one partition (see the module docstring for the rules)."""

    def __init__(
        self,
        directory: Path,
        segments: list[_Segment],
        headers: list[BatchHeader],
        *,
        segment_bytes: int,
        index_interval_bytes: int,
        fsync: bool,
        handles: HandleCache | None = None,
    ) -> None:
        self._dir = directory
        self._segments = segments
        self._recovered = headers
        self._segment_bytes = segment_bytes
        self._index_interval = index_interval_bytes
        self._fsync = fsync
        self._size = sum(s.size for s in segments)
        # Guards the fd bookkeeping that flush() reads from another thread.
        self._lock = threading.Lock()
        # The active segment's files, opened when needed (-1: closed); with a
        # handle cache, closed again when other logs need the descriptors.
        self._handles = handles
        self._fd = self._index_fd = -1
        self._unsynced_fds: list[int] = []  # rolled-out segments not fsynced yet (owned here)
        self._dirty = False
        self._dir_dirty = False
        self._closed = False
        self._gaps_allowed = (directory / GAPS_MARKER).exists()
        # Bumped whenever segments are cut, deleted or replaced wholesale: a
        # clean planned before refuses to swap (`swap_cleaned`).
        self.generation = 0

    # -- opening and recovery ------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        segment_bytes: int = 64 * 1024 * 1024,
        index_interval_bytes: int = 4096,
        fsync: bool = True,
        handles: HandleCache | None = None,
    ) -> tuple[PartitionLogStore, RecoveryReport]:
        if not 0 < segment_bytes <= _INT32_MAX:
            raise ValueError(f"segment_bytes must be in 1..{_INT32_MAX}, got {segment_bytes}")
        if index_interval_bytes <= 0:
            raise ValueError(f"index_interval_bytes must be positive, got {index_interval_bytes}")
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            if fsync:
                fsync_dir(directory.parent)  # the new directory's entry must survive a crash
        segments, headers, report = _recover(
            directory, index_interval_bytes, fsync, (directory / GAPS_MARKER).exists()
        )
        store = cls(
            directory,
            segments,
            headers,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            fsync=fsync,
            handles=handles,
        )
        store._active()  # creates the first segment's files of a new log
        if fsync:
            fsync_dir(directory)  # a first segment created or segments deleted by recovery
        return store, report

    def recovered_headers(self) -> list[BatchHeader]:
        """Headers of every batch found at open, in order (not updated afterwards)."""
        return self._recovered

    # -- state ----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def log_start_offset_on_disk(self) -> int:
        # The first segment's first batch starts at its base offset; an empty log's end is it too.
        return self._segments[0].base_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def directory(self) -> Path:
        return self._dir

    # -- writing -----------------------------------------------------------------

    def append(
        self, batch: bytes, header: BatchHeader, *, gaps: bool = False, roll: bool | None = None
    ) -> None:
        """Appends one batch at the log end offset (past it, with `gaps`), in a
        new segment when `roll` (None: by the size rule). Does not fsync."""
        self.append_many(batch, [header], gaps=gaps, roll=roll)

    def roll_empty(self) -> None:
        """Starts an empty active segment at the log end (retention is about to
        delete every older one)."""
        self._check_open()
        if self._segments[-1].size:
            self._roll_at(self.log_end_offset)

    @property
    def segment_bases(self) -> tuple[int, ...]:
        """Where each segment starts, oldest first."""
        return tuple(seg.base_offset for seg in self._segments)

    def append_many(
        self,
        batches: bytes,
        headers: list[BatchHeader],
        *,
        gaps: bool = False,
        roll: bool | None = None,
    ) -> None:
        """Appends concatenated batches (dense offsets; with `gaps`, a batch may
        start past the previous one's end: the log is then marked as one with
        gaps), one write per segment touched. `roll` given: the caller's
        decision (a new segment at the first batch, or none), else the size rule."""
        self._check_open()
        expected = self.log_end_offset
        gap = False
        for h in headers:
            if h.base_offset < expected or (h.base_offset > expected and not gaps):
                raise ValueError(
                    f"batch base offset {h.base_offset} is not the expected offset {expected} "
                    f"in {self._dir}"
                )
            gap = gap or h.base_offset > expected
            expected = h.next_offset
        if gap:
            self.allow_gaps()
        total = sum(h.size_bytes for h in headers)
        if total != len(batches):
            raise ValueError(f"headers describe {total} bytes but {len(batches)} were given")
        view = memoryview(batches)
        if roll is not None:
            # The caller decided where segments start: a new one at the first
            # batch when `roll`, and every batch in the active one.
            if roll and self._segments[-1].size:
                self._roll_at(headers[0].base_offset)
            self._write_run(view, headers)
            return
        start = 0
        while start < len(headers):
            active = self._segments[-1]
            if active.size and self._must_roll(active, headers[start]):
                self._roll()
                active = self._segments[-1]
            # The run of batches that fits in the active segment; its first always goes in.
            end = start + 1
            run_bytes = headers[start].size_bytes
            while end < len(headers) and not self._must_roll(active, headers[end], run_bytes):
                run_bytes += headers[end].size_bytes
                end += 1
            self._write_run(view[:run_bytes], headers[start:end])
            view = view[run_bytes:]
            start = end

    def allow_gaps(self) -> None:
        """Marks the log as one that may have offset gaps (durably, before any gap is written)."""
        if self._gaps_allowed:
            return
        marker = self._dir / GAPS_MARKER
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if self._fsync:
            fsync_dir(self._dir)
        self._gaps_allowed = True

    # -- the log cleaner's rewrites -------------------------------------------------

    @property
    def active_base_offset(self) -> int:
        """Where the active segment starts: the log cleaner stops there."""
        return self._segments[-1].base_offset

    def cleanable_segments(self, end_offset: int) -> list[tuple[int, int]]:
        """(base offset, next segment's base offset) of every non-active
        segment that starts below `end_offset`, oldest first."""
        return [
            (seg.base_offset, nxt.base_offset)
            for seg, nxt in zip(self._segments, self._segments[1:], strict=False)
            if seg.base_offset < end_offset
        ]

    def read_segment(self, base_offset: int) -> bytes:
        """The whole of a non-active segment (safe from another thread: its file never changes
        but by a swap, which renames a new file over it)."""
        path = self._dir / f"{base_offset:020d}{LOG_SUFFIX}"
        return path.read_bytes()

    def write_cleaned(self, base_offset: int, data: bytes) -> Path:
        """Writes the cleaned copy of a segment beside it and fsyncs it (any thread)."""
        path = self._dir / f"{base_offset:020d}{CLEANED_SUFFIX}"
        write_file(path, data, fsync=self._fsync)
        return path

    def swap_cleaned(
        self, base_offset: int, headers: list[BatchHeader], generation: int
    ) -> bool:
        """Renames the cleaned copy over its segment, if the log kept its shape
        since `generation` and the segment is still a non-active one; else
        removes the copy. Returns whether it swapped."""
        self._check_open()
        path = self._dir / f"{base_offset:020d}{CLEANED_SUFFIX}"
        k = next(
            (i for i, s in enumerate(self._segments[:-1]) if s.base_offset == base_offset), None
        )
        if generation != self.generation or k is None:
            path.unlink(missing_ok=True)
            return False
        seg = self._segments[k]
        if headers and (
            headers[0].base_offset < seg.base_offset
            or headers[-1].next_offset > self._segments[k + 1].base_offset
        ):
            path.unlink(missing_ok=True)
            raise ValueError(f"cleaned batches of segment {seg.name} lie outside it in {self._dir}")
        self.allow_gaps()
        os.rename(path, self._dir / (seg.name + LOG_SUFFIX))
        if self._fsync:
            fsync_dir(self._dir)
        fresh = _Segment(base_offset)
        position = 0
        for h in headers:
            if fresh.wants_index_entry(position, self._index_interval):
                fresh.index_offsets.append(h.base_offset)
                fresh.index_positions.append(position)
            position += h.size_bytes
            fresh.next_offset = h.next_offset
        fresh.size = position
        self._size += fresh.size - seg.size
        self._segments[k] = fresh
        (self._dir / (seg.name + INDEX_SUFFIX)).write_bytes(fresh.index_bytes())
        return True

    @property
    def segment_bytes(self) -> int:
        return self._segment_bytes

    @segment_bytes.setter
    def segment_bytes(self, value: int) -> None:
        """A new `segment.bytes` (the topic's config was altered): the next
        append rolls by it, as Kafka's log does after a config change."""
        if not 0 < value <= _INT32_MAX:
            raise ValueError(f"segment_bytes must be in 1..{_INT32_MAX}, got {value}")
        self._segment_bytes = value

    def _must_roll(self, seg: _Segment, header: BatchHeader, pending: int = 0) -> bool:
        if seg.size + pending + header.size_bytes > self._segment_bytes:
            return True
        # The index stores offsets relative to the segment base as int32.
        return header.last_offset - seg.base_offset > _INT32_MAX

    def _write_run(self, data: memoryview, headers: list[BatchHeader]) -> None:
        seg = self._segments[-1]
        entries = bytearray()
        position = seg.size
        new_offsets: list[int] = []
        new_positions: list[int] = []
        last = seg.index_positions[-1] if seg.index_positions else 0
        last_appended = (position + len(data) - headers[-1].size_bytes, headers[-1])
        for h in headers:
            # The same rule as _Segment.wants_index_entry (recovery must rebuild the same index).
            if position - last >= self._index_interval:
                new_offsets.append(h.base_offset)
                new_positions.append(position)
                entries += _INDEX_ENTRY.pack(h.base_offset - seg.base_offset, position)
                last = position
            position += h.size_bytes
        fd, index_fd = self._active()
        with self._lock:
            try:
                write_all(fd, data)
            except OSError:
                # A short write (disk full) must not leave half a batch behind.
                os.ftruncate(fd, seg.size)
                raise
            self._dirty = True
        seg.size += len(data)
        seg.next_offset = headers[-1].next_offset
        seg.last_appended = last_appended
        self._size += len(data)
        if entries:
            seg.index_offsets += new_offsets
            seg.index_positions += new_positions
            try:
                write_all(index_fd, entries)
            except OSError:
                # The batch is stored; the index file is only a cache of the
                # in-memory index, rewritten at recovery when it differs.
                pass

    def _roll(self) -> None:
        self._roll_at(self.log_end_offset)

    def _roll_at(self, base_offset: int) -> None:
        """A new active segment starting at `base_offset` (the log end, or the
        first offset of a batch that lies past it in a log with gaps)."""
        self._active()  # the outgoing segment's fd: flush() fsyncs it through it
        seg = _Segment(base_offset)
        self._segments.append(seg)
        fd, index_fd = self._open_active(create=True)
        with self._lock:
            old_fd, self._fd = self._fd, fd
            if self._fsync:
                self._unsynced_fds.append(old_fd)  # flush() fsyncs what it still holds
            else:
                os.close(old_fd)
            self._dir_dirty = True  # the new files' directory entries
            old_index_fd, self._index_fd = self._index_fd, index_fd
        os.close(old_index_fd)

    def _active(self) -> tuple[int, int]:
        """The active segment's files, opened again if they were closed."""
        if self._fd < 0:
            fd, index_fd = self._open_active()
            with self._lock:
                self._fd, self._index_fd = fd, index_fd
        if self._handles is not None:
            self._handles.touch(self)
        return self._fd, self._index_fd

    def release_handles(self) -> None:
        """Closes the active segment's files (the handle cache needs the room;
        `_active` opens them again). Unsynced data stays owed: flush() fsyncs
        it through a file opened for that."""
        with self._lock:
            fd, index_fd = self._fd, self._index_fd
            self._fd = self._index_fd = -1
        for closing in (fd, index_fd):
            if closing >= 0:
                os.close(closing)

    def _open_active(self, *, create: bool = False) -> tuple[int, int]:
        seg = self._segments[-1]
        fd = _open_append(self._dir / (seg.name + LOG_SUFFIX), truncate=create)
        index_fd = _open_append(self._dir / (seg.name + INDEX_SUFFIX), truncate=create)
        return fd, index_fd

    def flush(self) -> None:
        """Makes every append made before this call durable. Safe from another thread."""
        if not self._fsync:
            return
        with self._lock:
            if self._closed:
                return
            pending, self._unsynced_fds = self._unsynced_fds, []
            # A duplicate keeps the file open even if the owner thread closes its fd meanwhile;
            # an active segment whose fd the handle cache closed is opened for the fsync.
            active = -1
            if self._dirty:
                active = (
                    os.dup(self._fd)
                    if self._fd >= 0
                    else os.open(
                        self._dir / (self._segments[-1].name + LOG_SUFFIX),
                        os.O_RDONLY | os.O_CLOEXEC,
                    )
                )
            self._dirty = False
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for fd in pending:
                os.fsync(fd)
            if active >= 0:
                os.fsync(active)
            if dir_dirty:
                fsync_dir(self._dir)
        finally:
            for fd in pending:
                os.close(fd)
            if active >= 0:
                os.close(active)

    # -- reading ---------------------------------------------------------------

    def read(self, start_offset: int, end_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one containing `start_offset`, with base < `end_offset`.

        Stops before exceeding `max_bytes` but returns at least one batch when one
        qualifies. A `start_offset` below the log start reads from the first batch.
        """
        self._check_open()
        end_offset = min(end_offset, self.log_end_offset)
        if start_offset >= end_offset:
            return b""
        i = max(0, bisect.bisect_right([s.base_offset for s in self._segments], start_offset) - 1)
        # The pieces read, each as os.pread returned it (or a slice): a read
        # within one segment, the usual case, is handed on without a copy.
        out: list[bytes] = []
        seg = self._segments[i]
        with self._segment_fd(seg) as fd:
            found = self._find_batch(fd, seg, start_offset)
        position = found[0] if found else seg.size
        while True:
            with self._segment_fd(seg) as fd:
                position, more = self._collect(fd, seg, position, end_offset, max_bytes, out)
            i += 1
            if not more or i == len(self._segments):
                return out[0] if len(out) == 1 else b"".join(out)
            seg, position = self._segments[i], 0

    def _collect(
        self, fd: int, seg: _Segment, position: int, end_offset: int, max_bytes: int,
        out: list[bytes],
    ) -> tuple[int, bool]:
        """Appends the qualifying batches of `seg` from `position` to `out`.

        Returns the position reached and whether the next segment may still qualify.
        """
        taken = sum(len(b) for b in out)
        # No batch at or after the ceiling entry of end_offset qualifies: read no further.
        limit = seg.ceiling_position(end_offset) if end_offset < seg.next_offset else seg.size
        data = os.pread(fd, max(0, min(limit - position, max_bytes - taken)), position)
        offset = 0
        reached_end = False
        while offset + HEADER_SIZE <= len(data):
            h = parse_header(data, offset)
            if h.base_offset >= end_offset:
                reached_end = True
                break
            if offset + h.size_bytes > len(data):
                break
            offset += h.size_bytes
        if offset:
            out.append(data if offset == len(data) else data[:offset])
            taken += offset
        position += offset
        if reached_end or (limit < seg.size and position >= limit):
            return position, False  # the end offset reached
        if position == seg.size:
            return position, taken < max_bytes
        if taken:
            return position, False  # the budget is spent
        # Nothing fits the budget: Kafka still returns the first batch, whole.
        h = parse_header(os.pread(fd, HEADER_SIZE, position))
        if h.base_offset < end_offset:
            out.append(os.pread(fd, h.size_bytes, position))
        return position + h.size_bytes, False

    def _find_batch(self, fd: int, seg: _Segment, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch in `seg` whose last offset >= `offset`."""
        tail = seg.tail(offset)
        if tail is not None:
            return tail
        position = seg.floor_position(offset)
        window, window_start = b"", position
        while position < seg.size:
            if position + HEADER_SIZE > window_start + len(window):
                window = os.pread(fd, max(self._index_interval, HEADER_SIZE), position)
                window_start = position
            h = parse_header(window, position - window_start)
            if h.last_offset >= offset:
                return position, h
            position += h.size_bytes
        return None

    @contextmanager
    def _segment_fd(self, seg: _Segment) -> Iterator[int]:
        # The active segment's fd stays open; others are opened per read, so a
        # partition with many segments does not hold many descriptors.
        if seg is self._segments[-1]:
            yield self._active()[0]
            return
        fd = os.open(self._dir / (seg.name + LOG_SUFFIX), os.O_RDONLY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    # -- removing ------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Removes every batch with base offset >= `offset` (a batch boundary or the log end)."""
        self._check_open()
        if offset == self.log_end_offset:
            return
        if not self.log_start_offset_on_disk <= offset < self.log_end_offset:
            raise ValueError(
                f"cannot truncate {self._dir} to {offset}: outside "
                f"[{self.log_start_offset_on_disk}, {self.log_end_offset}]"
            )
        k = bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1
        seg = self._segments[k]
        if seg.base_offset == offset and k > 0:
            k, seg, position = k - 1, self._segments[k - 1], self._segments[k - 1].size
        else:
            with self._segment_fd(seg) as fd:
                found = self._find_batch(fd, seg, offset)
            if found is None or found[1].base_offset != offset:
                raise ValueError(f"cannot truncate {self._dir} to {offset}: not a batch boundary")
            position = found[0]
        # Validated: now mutate. Segment k becomes (or stays) the active one.
        self.generation += 1
        for dead in self._segments[k + 1 :]:
            self._unlink(dead)
        del self._segments[k + 1 :]
        self._size -= seg.size - position
        seg.size = position
        seg.next_offset = offset
        seg.drop_index_from(position)
        fd, index_fd = self._open_active()
        os.ftruncate(fd, position)
        os.ftruncate(index_fd, len(seg.index_positions) * _INDEX_ENTRY.size)
        if self._fsync:
            os.fsync(fd)
            fsync_dir(self._dir)
        self._replace_active(fd, index_fd)

    def delete_segments_below(self, log_start_offset: int) -> int:
        """Deletes whole non-active segments whose every batch is below `log_start_offset`."""
        self._check_open()
        freed = 0
        # A segment's last offset is below the next segment's base offset.
        while len(self._segments) > 1 and self._segments[1].base_offset <= log_start_offset:
            dead = self._segments.pop(0)
            self._unlink(dead)
            freed += dead.size
            self.generation += 1
        if freed:
            with self._lock:
                self._dir_dirty = True  # not needed for safety; the next flush makes it stick
        return freed

    def reset(self, offset: int) -> None:
        """Deletes everything and starts an empty log at `offset` (a follower starting over).

        Not atomic: a crash midway can leave a part of the old log (never a mix of
        old and new offsets). A caller that needs atomicity records the reset in
        its metadata first and repeats it after a restart.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self.generation += 1
        for dead in self._segments:
            self._unlink(dead)
        self._segments = [_Segment(offset)]
        fd, index_fd = self._open_active(create=True)
        if self._fsync:
            fsync_dir(self._dir)
        self._replace_active(fd, index_fd)

    def _replace_active(self, fd: int, index_fd: int) -> None:
        # The old fd is swapped out only once the new one is ready, so a concurrent
        # flush() always finds a valid fd (fsyncing a deleted file is harmless).
        with self._lock:
            old_fd, self._fd = self._fd, fd
            old_index_fd, self._index_fd = self._index_fd, index_fd
        for closing in (old_fd, old_index_fd):
            if closing >= 0:
                os.close(closing)
        if self._handles is not None:
            self._handles.touch(self)

    def _unlink(self, seg: _Segment) -> None:
        self._size -= seg.size
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX):
            (self._dir / (seg.name + suffix)).unlink(missing_ok=True)

    # -- closing -------------------------------------------------------------------

    def close(self) -> None:
        """Flushes (when fsync is on) and releases the files. Idempotent."""
        if self._closed:
            return
        self.flush()
        self.generation += 1
        with self._lock:
            self._closed = True
            for fd in [self._fd, self._index_fd, *self._unsynced_fds]:
                if fd >= 0:
                    os.close(fd)
            self._unsynced_fds = []
            self._fd = self._index_fd = -1
        if self._handles is not None:
            self._handles.forget(self)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"partition log {self._dir} is closed")


# ---------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------


def _segment_files(directory: Path) -> list[int]:
    bases = []
    for path in directory.iterdir():
        if path.suffix == LOG_SUFFIX and len(path.stem) == 20 and path.stem.isdigit():
            bases.append(int(path.stem))
    return sorted(bases)


def _scan(
    fd: int, seg: _Segment, interval: int, headers: list[BatchHeader], gaps: bool = False
) -> tuple[int, str | None]:
    """CRC-checks the batches of a segment file, filling `seg` and `headers`.

    Returns the position of the first bad byte (the file size when all is well) and why.
    """
    size = os.fstat(fd).st_size
    window, window_start = b"", 0
    position = 0
    while position < size:
        try:
            if position + HEADER_SIZE > window_start + len(window):
                window, window_start = os.pread(fd, _SCAN_WINDOW, position), position
            h = parse_header(window, position - window_start)
            if position + h.size_bytes > window_start + len(window):
                window = os.pread(fd, max(_SCAN_WINDOW, h.size_bytes), position)
                window_start = position
            check_batch(window, position - window_start)
        except CorruptBatchError as exc:
            return position, f"{exc} at offset {seg.next_offset} (position {position})"
        if h.base_offset < seg.next_offset or (h.base_offset > seg.next_offset and not gaps):
            return position, (
                f"batch base offset {h.base_offset} at position {position} "
                f"does not follow offset {seg.next_offset - 1}"
            )
        if h.last_offset - seg.base_offset > _INT32_MAX:
            return position, f"batch offset {h.last_offset} is out of the segment's range"
        if seg.wants_index_entry(position, interval):
            seg.index_offsets.append(h.base_offset)
            seg.index_positions.append(position)
        headers.append(h)
        position += h.size_bytes
        seg.size = position
        seg.next_offset = h.next_offset
    return size, None


def _recover(
    directory: Path, interval: int, fsync: bool, gaps: bool = False
) -> tuple[list[_Segment], list[BatchHeader], RecoveryReport]:
    for leftover in directory.glob("*" + CLEANED_SUFFIX):
        leftover.unlink()  # a clean a crash interrupted before its swap: the segment is intact
    bases = _segment_files(directory)
    segments: list[_Segment] = []
    headers: list[BatchHeader] = []
    truncated = 0
    reason: str | None = None
    keep = len(bases)  # segment files bases[keep:] are deleted
    for n, base in enumerate(bases):
        path = directory / f"{base:020d}{LOG_SUFFIX}"
        previous_end = segments[-1].next_offset if segments else base
        if base < previous_end or (base > previous_end and not gaps):
            reason = f"segment {path.name} does not follow offset {segments[-1].next_offset - 1}"
            keep = n
            break
        seg = _Segment(base)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            cut, why = _scan(fd, seg, interval, headers, gaps)
            if why is not None:
                reason = f"{why} in segment {path.name}"
                if cut == 0 and segments:
                    # Nothing valid in a later segment: drop it, the previous one stays active.
                    keep = n
                    break
                truncated += os.fstat(fd).st_size - cut
                os.ftruncate(fd, cut)
                if fsync:
                    os.fsync(fd)
                keep = n + 1
        finally:
            os.close(fd)
        segments.append(seg)
        if why is not None:
            break
    for base in bases[keep:]:
        path = directory / f"{base:020d}{LOG_SUFFIX}"
        truncated += path.stat().st_size
        path.unlink()
    if not segments:
        segments.append(_Segment(0))  # a new log; the active-segment open creates the file
    _sync_indexes(directory, segments)
    return segments, headers, RecoveryReport(len(segments), len(headers), truncated, reason)


def _sync_indexes(directory: Path, segments: list[_Segment]) -> None:
    """Rewrites index files that differ from the rebuilt index; removes orphans."""
    live = {s.name for s in segments}
    for path in directory.glob("*" + INDEX_SUFFIX):
        if path.stem not in live:
            path.unlink()
    for seg in segments:
        path = directory / (seg.name + INDEX_SUFFIX)
        wanted = seg.index_bytes()
        try:
            if path.read_bytes() == wanted:
                continue
        except FileNotFoundError:
            pass
        path.write_bytes(wanted)
