"""MetadataJournal: durable appends, torn tails, snapshots and the seq rule."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import crc32c
import pytest

from linkd.storage.metadata import (
    JOURNAL_NAME,
    SNAPSHOT_NAME,
    CorruptMetadataError,
    MetadataJournal,
)


def frame(obj: Any) -> bytes:
    payload = json.dumps(obj).encode()
    return struct.pack(">II", len(payload), crc32c.crc32c(payload)) + payload


def reopen(
    directory: Path,
) -> tuple[MetadataJournal, dict[str, Any] | None, list[dict[str, Any]], Any]:
    return MetadataJournal.open(directory)


def test_new_journal_is_empty(tmp_path: Path) -> None:
    journal, state, records, report = MetadataJournal.open(tmp_path / "m")
    assert (state, records, journal.records_since_snapshot) == (None, [], 0)
    assert report.reason is None and not report.snapshot_loaded
    assert (tmp_path / "m" / JOURNAL_NAME).exists()
    journal.close()


def test_append_and_reopen(tmp_path: Path) -> None:
    journal, *_ = reopen(tmp_path)
    journal.append([{"type": "topic", "name": "a"}, {"type": "config", "k": "ü"}])
    journal.append([])
    journal.append([{"type": "offset", "n": 3}])
    assert journal.records_since_snapshot == 3
    journal.close()
    journal, state, records, report = reopen(tmp_path)
    assert state is None
    assert records == [
        {"type": "topic", "name": "a"},
        {"type": "config", "k": "ü"},
        {"type": "offset", "n": 3},
    ]
    assert report.records == 3 and report.reason is None
    assert journal.records_since_snapshot == 3 and journal.last_seq == 3
    journal.close()


def test_unserializable_record_writes_nothing(tmp_path: Path) -> None:
    journal, *_ = reopen(tmp_path)
    with pytest.raises(TypeError):
        journal.append([{"ok": 1}, {"bad": object()}])
    journal.append([{"ok": 2}])
    journal.close()
    _, _, records, _ = reopen(tmp_path)
    assert records == [{"ok": 2}]


def test_torn_tail_at_every_byte_of_the_last_frame(tmp_path: Path) -> None:
    source = tmp_path / "source"
    journal, *_ = reopen(source)
    journal.append([{"n": 1}, {"n": 2}])
    good = (source / JOURNAL_NAME).read_bytes()
    journal.append([{"n": 3, "text": "the last one"}])
    journal.close()
    whole = (source / JOURNAL_NAME).read_bytes()
    for cut in range(len(good), len(whole)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / JOURNAL_NAME).write_bytes(whole[:cut])
        journal, _, records, report = reopen(directory)
        assert records == [{"n": 1}, {"n": 2}]
        assert report.truncated_bytes == cut - len(good)
        assert (report.reason is None) == (cut == len(good))
        assert (directory / JOURNAL_NAME).read_bytes() == good
        # Appends continue after the intact frames, with the next seq.
        journal.append([{"n": 4}])
        journal.close()
        _, _, records, _ = reopen(directory)
        assert records == [{"n": 1}, {"n": 2}, {"n": 4}]


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b"\x00\x00\x00\x05\x00\x00\x00\x00hello", "CRC32C"),
        (frame({"seq": 3, "record": {}}).replace(b"3", b"4"), "CRC32C"),
        (frame(["not", "an", "object"]), "not a JSON object"),
        (frame({"seq": 9}), "not a journal record"),
        (frame({"seq": 1, "record": {}}), "seq 1"),
        (struct.pack(">II", 3, crc32c.crc32c(b"{{{")) + b"{{{", "bad JSON"),
        (struct.pack(">II", 2, crc32c.crc32c(b"\xff\xfe")) + b"\xff\xfe", "bad JSON"),
    ],
)
def test_bad_tail_frames_are_cut(tmp_path: Path, tail: bytes, why: str) -> None:
    journal, *_ = reopen(tmp_path)
    journal.append([{"n": 1}, {"n": 2}])
    journal.close()
    with open(tmp_path / JOURNAL_NAME, "ab") as f:
        f.write(tail)
    journal, _, records, report = reopen(tmp_path)
    assert records == [{"n": 1}, {"n": 2}]
    assert report.reason is not None and why in report.reason and JOURNAL_NAME in report.reason
    assert report.truncated_bytes == len(tail)
    journal.close()


def test_snapshot_replaces_the_journal(tmp_path: Path) -> None:
    journal, *_ = reopen(tmp_path)
    journal.append([{"n": 1}, {"n": 2}])
    journal.write_snapshot({"sum": 3})
    assert journal.records_since_snapshot == 0
    assert (tmp_path / JOURNAL_NAME).stat().st_size == 0
    journal.append([{"n": 3}])
    journal.close()
    journal, state, records, report = reopen(tmp_path)
    assert state == {"sum": 3} and records == [{"n": 3}]
    assert report.snapshot_loaded and report.skipped == 0
    assert journal.records_since_snapshot == 1
    journal.close()


def test_crash_between_snapshot_and_journal_truncation(tmp_path: Path) -> None:
    # The snapshot covers seq 1-2, but the crash left the journal not emptied.
    (tmp_path / SNAPSHOT_NAME).write_bytes(frame({"last_seq": 2, "state": {"sum": 3}}))
    (tmp_path / JOURNAL_NAME).write_bytes(
        frame({"seq": 1, "record": {"n": 1}}) + frame({"seq": 2, "record": {"n": 2}})
    )
    journal, state, records, report = reopen(tmp_path)
    assert state == {"sum": 3} and records == []
    assert report.skipped == 2 and report.reason is None
    assert journal.records_since_snapshot == 0
    # New records get seqs above the snapshot's, so they are not skipped next time.
    journal.append([{"n": 3}])
    assert journal.last_seq == 3
    journal.close()
    _, state, records, report = reopen(tmp_path)
    assert state == {"sum": 3} and records == [{"n": 3}] and report.skipped == 2


def test_seq_keeps_growing_across_snapshots(tmp_path: Path) -> None:
    journal, *_ = reopen(tmp_path)
    journal.append([{"n": 1}])
    journal.write_snapshot({"s": 1})
    journal.append([{"n": 2}, {"n": 3}])
    journal.close()
    journal, _, records, _ = reopen(tmp_path)
    assert records == [{"n": 2}, {"n": 3}] and journal.last_seq == 3
    journal.write_snapshot({"s": 6})
    journal.close()
    journal, state, records, _ = reopen(tmp_path)
    assert state == {"s": 6} and records == [] and journal.last_seq == 3
    journal.close()


def test_crash_while_writing_the_snapshot_keeps_the_old_one(tmp_path: Path) -> None:
    journal, *_ = reopen(tmp_path)
    journal.append([{"n": 1}])
    journal.write_snapshot({"s": 1})
    journal.append([{"n": 2}])
    journal.close()
    (tmp_path / (SNAPSHOT_NAME + ".tmp")).write_bytes(b"half a snaps")
    journal, state, records, _ = reopen(tmp_path)
    assert state == {"s": 1} and records == [{"n": 2}]
    assert not (tmp_path / (SNAPSHOT_NAME + ".tmp")).exists()
    journal.close()


@pytest.mark.parametrize(
    "content",
    [
        frame({"last_seq": 1, "state": {}})[:-2],
        frame({"last_seq": 1, "state": {}}) + b"x",
        frame({"state": {}}),
    ],
)
def test_corrupt_snapshot_is_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / SNAPSHOT_NAME).write_bytes(content)
    with pytest.raises(CorruptMetadataError, match=SNAPSHOT_NAME):
        reopen(tmp_path)
