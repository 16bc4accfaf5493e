"""The cluster metadata journal: JSON records, appended durably, compacted by snapshots.

Files in the metadata directory:
    metadata.journal   append-only frames, one per record
    metadata.snapshot  one frame: the whole state as of some record
    metadata.snapshot.tmp  a snapshot being written (deleted at open: never complete)

Frame: length uint32 | crc32c uint32 | utf-8 JSON (big-endian; the length and
CRC cover the JSON bytes only).
    journal frame:  {"seq": N, "record": {...}}
    snapshot frame: {"last_seq": N, "state": {...}}

Rules this module keeps:
- `append` is durable on return (one write, then fsync): a crash can only tear
  the last frame, so open cuts the journal at the first short, CRC-failing or
  unparsable frame and reports it.
- Every journal record carries a sequence number that only grows, across
  snapshots too. A snapshot holds the sequence number of the last record it
  includes; on replay, journal records at or below it are skipped. That makes
  `write_snapshot` crash-safe in every step: the snapshot is written to a
  temporary file, fsynced and renamed into place (so it is the old one or the
  new one), and only then is the journal emptied; if a crash comes between,
  the old journal records are skipped, not applied twice.
- A snapshot that fails its check is not a torn write (it is renamed into
  place whole) but lost data: open refuses it with CorruptMetadataError.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c as _crc32c

from linkd.storage.files import fsync_dir, write_all, write_file

JOURNAL_NAME = "metadata.journal"
SNAPSHOT_NAME = "metadata.snapshot"
_TMP_SUFFIX = ".tmp"
_FRAME = struct.Struct(">II")


class CorruptMetadataError(Exception):
    """The metadata snapshot is damaged; the state cannot be rebuilt safely."""


@dataclass(frozen=True, slots=True)
class JournalRecoveryReport:
    """What `MetadataJournal.open` found and repaired."""

    snapshot_loaded: bool
    records: int  # journal records returned (newer than the snapshot)
    skipped: int  # journal records already in the snapshot
    truncated_bytes: int  # torn tail bytes dropped
    reason: str | None  # what was wrong at the cut, None when nothing was cut


def _frame(obj: dict[str, Any]) -> bytes:
    payload = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    return _FRAME.pack(len(payload), _crc32c.crc32c(payload)) + payload


def _parse_frame(data: bytes, position: int) -> tuple[dict[str, Any], int]:
    """The JSON object of the frame at `position` and the position after it."""
    if len(data) - position < _FRAME.size:
        raise ValueError(f"short frame header at position {position}")
    length, crc = _FRAME.unpack_from(data, position)
    start = position + _FRAME.size
    payload = data[start : start + length]
    if len(payload) < length:
        raise ValueError(f"short frame at position {position}: {len(payload)} of {length} bytes")
    if _crc32c.crc32c(payload) != crc:
        raise ValueError(f"CRC32C mismatch in frame at position {position}")
    try:
        obj = json.loads(payload)
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"bad JSON in frame at position {position}: {exc}") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"frame at position {position} is not a JSON object")
    return obj, start + length






class MetadataJournal:
    """Durable journal of metadata records plus a compacting snapshot."""

    def __init__(self, directory: Path, fd: int, size: int, seq: int, pending: int, fsync: bool):
        self._dir = directory
        self._fd = fd
        self._size = size  # journal bytes, to undo a short write
        self._seq = seq  # sequence number of the last record written
        self._pending = pending  # records since the snapshot
        self._fsync = fsync

    @classmethod
    def open(
        cls, directory: Path, *, fsync: bool = True
    ) -> tuple[MetadataJournal, dict[str, Any] | None, list[dict[str, Any]], JournalRecoveryReport]:
        """Returns (journal, snapshot state or None, records after the snapshot, report)."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / (SNAPSHOT_NAME + _TMP_SUFFIX)).unlink(missing_ok=True)
        state, last_seq = cls._read_snapshot(directory / SNAPSHOT_NAME)
        path = directory / JOURNAL_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            records: list[dict[str, Any]] = []
            skipped = 0
            seq = last_seq
            position = 0
            reason: str | None = None
            prev = -1
            while position < len(data):
                try:
                    obj, after = _parse_frame(data, position)
                    frame_seq, record = obj.get("seq"), obj.get("record")
                    if not isinstance(frame_seq, int) or not isinstance(record, dict):
                        raise ValueError(f"frame at position {position} is not a journal record")
                    if frame_seq <= prev:
                        raise ValueError(f"seq {frame_seq} at position {position} after {prev}")
                except ValueError as exc:
                    reason = f"{exc} in {path}"
                    break
                prev = frame_seq
                if frame_seq <= last_seq:
                    skipped += 1  # already in the snapshot (a crash before the journal was emptied)
                else:
                    records.append(record)
                    seq = frame_seq
                position = after
            if reason is not None:
                os.ftruncate(fd, position)
                if fsync:
                    os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        if fsync:
            fsync_dir(directory)  # the journal file may be new
        journal = cls(directory, fd, position, seq, len(records), fsync)
        report = JournalRecoveryReport(
            snapshot_loaded=state is not None,
            records=len(records),
            skipped=skipped,
            truncated_bytes=len(data) - position,
            reason=reason,
        )
        return journal, state, records, report

    @staticmethod
    def _read_snapshot(path: Path) -> tuple[dict[str, Any] | None, int]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None, 0
        try:
            obj, end = _parse_frame(data, 0)
            if end != len(data):
                raise ValueError(f"{len(data) - end} bytes after the frame")
            state, last_seq = obj.get("state"), obj.get("last_seq")
            if not isinstance(state, dict) or not isinstance(last_seq, int):
                raise ValueError("the frame is not a snapshot")
        except ValueError as exc:
            raise CorruptMetadataError(f"metadata snapshot {path} is corrupt: {exc}") from exc
        return state, last_seq

    @property
    def records_since_snapshot(self) -> int:
        return self._pending

    @property
    def last_seq(self) -> int:
        """Sequence number of the last record written (0 before any)."""
        return self._seq

    def append(self, records: list[dict[str, Any]]) -> None:
        """Writes the records in one write and fsyncs: durable on return."""
        if not records:
            return
        # Encode everything first: a record that is not JSON must not leave a partial write.
        frames = b"".join(
            _frame({"seq": self._seq + i, "record": r}) for i, r in enumerate(records, 1)
        )
        try:
            write_all(self._fd, frames)
        except OSError:
            os.ftruncate(self._fd, self._size)  # no half frame left behind (disk full)
            raise
        if self._fsync:
            os.fsync(self._fd)
        self._size += len(frames)
        self._seq += len(records)
        self._pending += len(records)

    def write_snapshot(self, state: dict[str, Any]) -> None:
        """Replaces the snapshot with `state` (which includes every record appended) and
        empties the journal. Crash-safe at every step (see the module docstring)."""
        frame = _frame({"last_seq": self._seq, "state": state})
        tmp = self._dir / (SNAPSHOT_NAME + _TMP_SUFFIX)
        write_file(tmp, frame, fsync=self._fsync)
        os.replace(tmp, self._dir / SNAPSHOT_NAME)
        if self._fsync:
            fsync_dir(self._dir)
        # Only now may the journal go: the snapshot that replaces it is durable.
        os.ftruncate(self._fd, 0)
        if self._fsync:
            os.fsync(self._fd)
        self._size = 0
        self._pending = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
