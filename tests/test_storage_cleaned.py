"""The log cleaner's rewrites on disk (linkd/storage/segments.py): a cleaned
segment replaces its original in one rename, a crash before the rename leaves
the original, and a log with gaps is read back as it was written."""

from __future__ import annotations

from pathlib import Path

from linkd.core.records import BatchHeader, RecordSpec, build_batch, check_batch, iter_batches
from linkd.storage.segments import CLEANED_SUFFIX, GAPS_MARKER, PartitionLogStore


def _batch(base: int) -> tuple[bytes, BatchHeader]:
    data = build_batch([RecordSpec(b"k", b"v" * 40, 0)], base_offset=base)
    return data, check_batch(data)


def _filled(directory: Path, count: int) -> PartitionLogStore:
    store, _ = PartitionLogStore.open(directory, segment_bytes=300, fsync=False)
    for base in range(count):
        store.append(*_batch(base))
    return store


def _offsets(data: bytes) -> list[int]:
    return [h.base_offset for _, h in iter_batches(data)]


def test_a_swapped_segment_keeps_its_name_and_the_log_reads_across_the_gap(tmp_path: Path) -> None:
    store = _filled(tmp_path, 8)
    segments = store.cleanable_segments(store.active_base_offset)
    assert segments and segments[0][0] == 0
    base, _next = segments[0]
    original = store.read_segment(base)
    kept = [(p, h) for p, h in iter_batches(original) if h.base_offset != base]  # drop the first
    cleaned = b"".join(original[p : p + h.size_bytes] for p, h in kept)
    store.write_cleaned(base, cleaned)
    assert store.swap_cleaned(base, [h for _, h in kept], store.generation)
    assert (tmp_path / GAPS_MARKER).exists()
    assert _offsets(store.read(0, 100, 1 << 20)) == list(range(1, 8))
    assert _offsets(store.read(0, 1, 1 << 20)) == []
    assert _offsets(store.read(0, 2, 1 << 20)) == [1]
    store.close()
    again, report = PartitionLogStore.open(tmp_path, segment_bytes=300, fsync=False)
    assert report.reason is None
    assert [h.base_offset for h in again.recovered_headers()] == list(range(1, 8))
    # Appends may jump too (a follower copying a cleaned source).
    again.append(*_batch(20), gaps=True)
    assert _offsets(again.read(8, 100, 1 << 20)) == [20]
    again.close()


def test_a_crash_before_the_swap_leaves_the_original(tmp_path: Path) -> None:
    store = _filled(tmp_path, 8)
    base, _ = store.cleanable_segments(store.active_base_offset)[0]
    store.write_cleaned(base, b"")
    store.close()  # the process dies here: the copy is written, not renamed
    again, report = PartitionLogStore.open(tmp_path, segment_bytes=300, fsync=False)
    assert report.reason is None
    assert not list(tmp_path.glob("*" + CLEANED_SUFFIX))
    assert [h.base_offset for h in again.recovered_headers()] == list(range(8))
    again.close()


def test_a_swap_after_the_log_changed_shape_is_refused(tmp_path: Path) -> None:
    store = _filled(tmp_path, 8)
    generation = store.generation
    base, _ = store.cleanable_segments(store.active_base_offset)[0]
    store.write_cleaned(base, b"")
    store.truncate_to(2)
    assert not store.swap_cleaned(base, [], generation)
    assert not list(tmp_path.glob("*" + CLEANED_SUFFIX))
    assert _offsets(store.read(0, 100, 1 << 20)) == [0, 1]
    store.close()


def test_without_the_marker_a_jump_in_offsets_is_still_a_cut(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(_batch(0)[0] + _batch(5)[0])
    store, report = PartitionLogStore.open(tmp_path, fsync=False)
    assert report.reason is not None and "does not follow" in report.reason
    assert store.log_end_offset == 1
    store.close()
