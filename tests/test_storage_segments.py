"""PartitionLogStore: appends, reads, rolls, index, recovery from torn tails, truncation."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkd.core.records import BatchHeader, RecordSpec, build_batch, check_batch
from linkd.storage.segments import PartitionLogStore

Batch = tuple[bytes, BatchHeader]


def make_batch(base: int, records: int = 1, value_size: int = 10) -> Batch:
    specs = [
        RecordSpec(key=None, value=bytes([65 + (base + i) % 26]) * value_size, timestamp=1000 + i)
        for i in range(records)
    ]
    data = build_batch(specs, base_offset=base)
    return data, check_batch(data)


def append_batches(
    store: PartitionLogStore, count: int, records: int = 1, value_size: int = 10
) -> list[Batch]:
    out = []
    for _ in range(count):
        data, header = make_batch(store.log_end_offset, records, value_size)
        store.append(data, header)
        out.append((data, header))
    return out


def log_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


def open_store(
    directory: Path,
    segment_bytes: int = 64 * 1024 * 1024,
    index_interval_bytes: int = 4096,
    fsync: bool = True,
) -> PartitionLogStore:
    store, _report = PartitionLogStore.open(
        directory,
        segment_bytes=segment_bytes,
        index_interval_bytes=index_interval_bytes,
        fsync=fsync,
    )
    return store


# ---------------------------------------------------------------------------
# Appending and reading
# ---------------------------------------------------------------------------


def test_new_log_is_empty(tmp_path: Path) -> None:
    store, report = PartitionLogStore.open(tmp_path / "p")
    assert (store.log_end_offset, store.log_start_offset_on_disk, store.size_bytes) == (0, 0, 0)
    assert report.segments == 1 and report.batches == 0 and report.reason is None
    assert store.read(0, 100, 1 << 20) == b""
    assert log_files(tmp_path / "p") == ["00000000000000000000.log"]
    store.close()


def test_round_trip_across_segment_rolls(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=400)
    batches = append_batches(store, 20, records=3)
    everything = b"".join(b for b, _ in batches)
    assert store.log_end_offset == 60
    assert store.size_bytes == len(everything)
    assert store.read(0, 60, 1 << 20) == everything
    names = log_files(tmp_path)
    assert len(names) > 3
    # Segment names are the base offsets of their first batches.
    bases = {h.base_offset for _, h in batches}
    assert all(int(n[:20]) in bases for n in names)
    store.close()
    store, report = PartitionLogStore.open(tmp_path, segment_bytes=400)
    assert report.reason is None and report.batches == 20 and report.segments == len(names)
    assert store.recovered_headers() == [h for _, h in batches]
    assert store.read(0, 60, 1 << 20) == everything
    store.close()


def test_append_many_matches_single_appends(tmp_path: Path) -> None:
    store = open_store(tmp_path / "a", segment_bytes=500)
    batches = []
    for _ in range(15):
        data, header = make_batch(batches[-1][1].next_offset if batches else 0, records=2)
        batches.append((data, header))
    store.append_many(b"".join(b for b, _ in batches), [h for _, h in batches])
    single = open_store(tmp_path / "b", segment_bytes=500)
    for data, header in batches:
        single.append(data, header)
    assert log_files(tmp_path / "a") == log_files(tmp_path / "b")
    for name in os.listdir(tmp_path / "a"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert store.read(0, 100, 1 << 20) == single.read(0, 100, 1 << 20)
    store.close()
    single.close()


def test_append_refuses_wrong_offset_and_size(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    append_batches(store, 1, records=2)
    data, header = make_batch(5)
    with pytest.raises(ValueError, match="expected offset 2"):
        store.append(data, header)
    data, header = make_batch(2)
    with pytest.raises(ValueError, match="bytes"):
        store.append(data + b"x", header)
    assert store.log_end_offset == 2
    store.close()


def test_batch_larger_than_segment_goes_in_alone(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=200)
    small = append_batches(store, 1)
    big = append_batches(store, 1, value_size=1000)
    after = append_batches(store, 1)
    assert len(log_files(tmp_path)) == 3
    assert store.read(0, 10, 1 << 20) == b"".join(b for b, _ in small + big + after)
    store.close()


def test_read_starts_with_the_batch_containing_the_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    batches = append_batches(store, 4, records=5)  # offsets 0-4, 5-9, 10-14, 15-19
    assert store.read(12, 20, 1 << 20) == b"".join(b for b, _ in batches[2:])
    assert store.read(15, 20, 1 << 20) == b"".join(b for b, _ in batches[3:])
    assert store.read(20, 30, 1 << 20) == b""
    store.close()


def test_read_respects_end_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=300, index_interval_bytes=100)
    batches = append_batches(store, 12, records=2)  # batch k holds offsets 2k, 2k+1
    assert store.read(0, 7, 1 << 20) == b"".join(b for b, _ in batches[:4])
    assert store.read(0, 8, 1 << 20) == b"".join(b for b, _ in batches[:4])
    assert store.read(3, 4, 1 << 20) == batches[1][0]
    assert store.read(9, 9, 1 << 20) == b""
    store.close()


def test_read_max_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=250)
    batches = append_batches(store, 10)
    size = len(batches[0][0])
    # Smaller than one batch: still one whole batch, so a consumer is never stuck.
    assert store.read(0, 10, 1) == batches[0][0]
    assert store.read(0, 10, 0) == batches[0][0]
    # Two and a half batches: two, never a partial one; across segment boundaries too.
    assert store.read(0, 10, 2 * size + size // 2) == batches[0][0] + batches[1][0]
    assert store.read(3, 10, 5 * size) == b"".join(b for b, _ in batches[3:8])
    store.close()


def test_read_uses_the_index(tmp_path: Path) -> None:
    store = open_store(tmp_path, index_interval_bytes=256)
    batches = append_batches(store, 1000)
    index = (tmp_path / "00000000000000000000.index").read_bytes()
    assert len(index) > 0 and len(index) % 8 == 0
    # Damage the first batches after the fact: a read at a high offset starts from
    # an index entry near its batch, so it never parses them.
    with open(tmp_path / "00000000000000000000.log", "r+b") as f:
        f.write(b"\xff" * 2000)
    for offset in (997, 640, 333):
        assert store.read(offset, offset + 1, 1 << 20) == batches[offset][0]
    store.close()


def test_flush_does_not_leak_descriptors(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=200, fsync=True)
    append_batches(store, 3)
    store.flush()
    before = len(os.listdir("/proc/self/fd"))
    append_batches(store, 30)
    store.flush()
    assert len(os.listdir("/proc/self/fd")) == before
    store.close()


# ---------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------


def write_log(directory: Path, count: int, **kwargs: int) -> list[Batch]:
    store = open_store(directory, **kwargs)
    batches = append_batches(store, count, records=2)
    store.close()
    return batches


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path: Path) -> None:
    reference = write_log(tmp_path / "ref", 3)
    good = b"".join(b for b, _ in reference[:2])
    whole = good + reference[2][0]
    for cut in range(len(good), len(whole)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / "00000000000000000000.log").write_bytes(whole[:cut])
        store, report = PartitionLogStore.open(directory)
        assert store.log_end_offset == 4
        assert store.recovered_headers() == [h for _, h in reference[:2]]
        assert report.truncated_bytes == cut - len(good)
        assert (report.reason is None) == (cut == len(good))
        assert store.read(0, 10, 1 << 20) == good
        # Appends continue where the intact log ends.
        data, header = make_batch(4)
        store.append(data, header)
        assert store.read(0, 10, 1 << 20) == good + data
        store.close()
        assert (directory / "00000000000000000000.log").read_bytes() == good + data


@pytest.mark.parametrize(
    ("where", "why"),
    [(-1, "CRC32C"), (30, "CRC32C"), (7, "does not follow"), (16, "magic")],
)
def test_flipped_byte_in_last_batch(tmp_path: Path, where: int, why: str) -> None:
    batches = write_log(tmp_path, 3)
    path = tmp_path / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    last_start = len(data) - len(batches[2][0])
    data[last_start + where if where >= 0 else where] ^= 0x40
    path.write_bytes(bytes(data))
    store, report = PartitionLogStore.open(tmp_path)
    assert report.reason is not None and why in report.reason
    assert "00000000000000000000.log" in report.reason
    assert report.truncated_bytes == len(batches[2][0])
    assert store.log_end_offset == 4
    assert store.read(0, 10, 1 << 20) == batches[0][0] + batches[1][0]
    store.close()


@pytest.mark.parametrize(
    "garbage", [b"\x00" * 100, b"\x00" * 5, random.Random(70).randbytes(70), b"\xff" * 61]
)
def test_garbage_after_the_last_batch(tmp_path: Path, garbage: bytes) -> None:
    batches = write_log(tmp_path, 3)
    with open(tmp_path / "00000000000000000000.log", "ab") as f:
        f.write(garbage)
    store, report = PartitionLogStore.open(tmp_path)
    assert report.truncated_bytes == len(garbage) and report.reason is not None
    assert store.log_end_offset == 6
    assert store.read(0, 10, 1 << 20) == b"".join(b for b, _ in batches)
    store.close()


def test_corrupt_segment_drops_every_later_segment(tmp_path: Path) -> None:
    batches = write_log(tmp_path, 12, segment_bytes=300)
    names = log_files(tmp_path)
    assert len(names) >= 4
    second = int(names[1][:20])
    # Corrupt the second batch of the second segment.
    victim = next(i for i, (_, h) in enumerate(batches) if h.base_offset == second) + 1
    path = tmp_path / names[1]
    data = bytearray(path.read_bytes())
    data[len(batches[victim - 1][0]) + 40] ^= 1
    path.write_bytes(bytes(data))
    later_bytes = sum((tmp_path / n).stat().st_size for n in names[2:])
    store, report = PartitionLogStore.open(tmp_path, segment_bytes=300)
    assert report.reason is not None and names[1] in report.reason
    assert report.truncated_bytes == len(data) - len(batches[victim - 1][0]) + later_bytes
    assert log_files(tmp_path) == names[:2]
    assert sorted(p.name for p in tmp_path.glob("*.index")) == [
        n[:20] + ".index" for n in names[:2]
    ]
    assert store.log_end_offset == batches[victim][1].base_offset
    assert store.recovered_headers() == [h for _, h in batches[:victim]]
    more = append_batches(store, 2)
    assert store.read(0, 100, 1 << 20) == b"".join(b for b, _ in batches[:victim] + more)
    store.close()


def test_corrupt_first_batch_of_a_later_segment_drops_that_segment(tmp_path: Path) -> None:
    batches = write_log(tmp_path, 12, segment_bytes=300)
    names = log_files(tmp_path)
    path = tmp_path / names[1]
    data = bytearray(path.read_bytes())
    data[40] ^= 1  # inside the segment's first batch
    path.write_bytes(bytes(data))
    store, report = PartitionLogStore.open(tmp_path, segment_bytes=300)
    assert report.reason is not None and "CRC32C" in report.reason
    # No empty segment is left behind: the previous segment is the active one again.
    assert log_files(tmp_path) == names[:1]
    second = int(names[1][:20])
    assert store.log_end_offset == second
    more = append_batches(store, 1)
    kept = [b for b, h in batches if h.base_offset < second]
    assert store.read(0, 100, 1 << 20) == b"".join(kept) + more[0][0]
    store.close()


def test_missing_middle_segment_drops_the_rest(tmp_path: Path) -> None:
    batches = write_log(tmp_path, 12, segment_bytes=300)
    names = log_files(tmp_path)
    (tmp_path / names[1]).unlink()
    store, report = PartitionLogStore.open(tmp_path, segment_bytes=300)
    assert report.reason is not None and names[2] in report.reason
    assert log_files(tmp_path) == names[:1]
    assert store.log_end_offset == int(names[1][:20])
    kept = [b for b, h in batches if h.base_offset < int(names[1][:20])]
    assert store.read(0, 100, 1 << 20) == b"".join(kept)
    store.close()


def test_empty_later_segment_after_a_roll_survives(tmp_path: Path) -> None:
    batches = write_log(tmp_path, 3)
    (tmp_path / "00000000000000000006.log").touch()  # rolled, then crashed before the write
    store, report = PartitionLogStore.open(tmp_path)
    assert report.reason is None and report.segments == 2
    assert store.log_end_offset == 6
    more = append_batches(store, 1)
    assert store.read(0, 100, 1 << 20) == b"".join(b for b, _ in batches + more)
    store.close()


def test_index_is_rebuilt_when_missing_or_wrong(tmp_path: Path) -> None:
    write_log(tmp_path, 200, index_interval_bytes=100)
    index = tmp_path / "00000000000000000000.index"
    original = index.read_bytes()
    assert original
    index.unlink()
    open_store(tmp_path, index_interval_bytes=100).close()
    assert index.read_bytes() == original
    index.write_bytes(b"\x00\x00\x00\x07\x00\x00\x99\x99" * 3)
    store = open_store(tmp_path, index_interval_bytes=100)
    assert index.read_bytes() == original
    store.close()
    (tmp_path / "00000000000000000999.index").write_bytes(b"orphan")
    open_store(tmp_path, index_interval_bytes=100).close()
    assert not (tmp_path / "00000000000000000999.index").exists()


# ---------------------------------------------------------------------------
# Truncation and deletion
# ---------------------------------------------------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=300, index_interval_bytes=100)
    batches = append_batches(store, 12, records=2)
    names = log_files(tmp_path)
    with pytest.raises(ValueError, match="not a batch boundary"):
        store.truncate_to(5)
    with pytest.raises(ValueError, match="outside"):
        store.truncate_to(25)
    store.truncate_to(24)  # the log end: nothing to do
    second = int(names[1][:20])
    store.truncate_to(second)  # a segment base: that segment goes, the previous one is active
    assert store.log_end_offset == second
    assert log_files(tmp_path) == names[:1]
    store.truncate_to(2)  # inside the first segment
    assert store.log_end_offset == 2
    assert store.size_bytes == len(batches[0][0])
    more = append_batches(store, 2)
    store.close()
    store, report = PartitionLogStore.open(tmp_path, segment_bytes=300)
    assert report.reason is None
    assert store.read(0, 100, 1 << 20) == batches[0][0] + b"".join(b for b, _ in more)
    store.truncate_to(0)
    assert (store.log_end_offset, store.size_bytes) == (0, 0)
    store.close()
    store = open_store(tmp_path)
    assert store.log_end_offset == 0
    store.close()


def test_delete_segments_below(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=300)
    batches = append_batches(store, 12, records=2)
    names = log_files(tmp_path)
    bases = [int(n[:20]) for n in names]
    # Below the second segment's base: the first segment is entirely below it.
    assert store.delete_segments_below(bases[1] - 1) == 0
    freed = store.delete_segments_below(bases[2])
    assert freed == sum((h.size_bytes for _, h in batches if h.base_offset < bases[2]))
    assert log_files(tmp_path) == names[2:]
    assert store.log_start_offset_on_disk == bases[2]
    # The active segment is never deleted.
    store.delete_segments_below(10**9)
    assert log_files(tmp_path) == names[-1:]
    assert store.log_start_offset_on_disk == bases[-1]
    assert store.read(0, 100, 1 << 20) == b"".join(
        b for b, h in batches if h.base_offset >= bases[-1]
    )
    store.close()
    store, report = PartitionLogStore.open(tmp_path)
    assert report.reason is None
    assert store.log_start_offset_on_disk == bases[-1] and store.log_end_offset == 24
    # Truncating to the log start empties the log but keeps its offsets.
    store.truncate_to(bases[-1])
    assert store.log_end_offset == bases[-1]
    store.close()


def test_reset_starts_an_empty_log_at_an_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path, segment_bytes=300)
    append_batches(store, 12)
    store.reset(1000)
    assert (store.log_start_offset_on_disk, store.log_end_offset, store.size_bytes) == (
        1000,
        1000,
        0,
    )
    assert log_files(tmp_path) == ["00000000000000001000.log"]
    more = append_batches(store, 2)
    store.close()
    store = open_store(tmp_path)
    assert store.read(0, 2000, 1 << 20) == b"".join(b for b, _ in more)
    store.close()


# ---------------------------------------------------------------------------
# Property: random operations against a list model
# ---------------------------------------------------------------------------


def model_read(model: list[Batch], start: int, end: int, max_bytes: int, leo: int) -> bytes:
    if start >= min(end, leo):
        return b""
    out: list[bytes] = []
    total = 0
    for data, header in model:
        if header.last_offset < start:
            continue
        if header.base_offset >= end or (out and total + len(data) > max_bytes):
            break
        out.append(data)
        total += len(data)
        if total > max_bytes:
            break  # the one batch returned although it is over the limit
    return b"".join(out)


operation = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 120)),
    st.tuples(st.just("truncate"), st.integers(0, 1000), st.just(0)),
    st.tuples(st.just("delete_below"), st.integers(0, 1000), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    st.tuples(st.just("reset"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("read"), st.integers(0, 1000), st.integers(0, 600)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=40))
def test_random_operations_match_a_list_model(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        store = open_store(directory, segment_bytes=400, index_interval_bytes=150, fsync=False)
        model: list[Batch] = []
        start = 0  # the model's log start while it is empty
        for op, a, b in ops:
            leo = model[-1][1].next_offset if model else start
            if op == "append":
                data, header = make_batch(leo, records=a, value_size=b)
                store.append(data, header)
                model.append((data, header))
            elif op == "truncate":
                if not model:
                    continue
                boundaries = [h.base_offset for _, h in model] + [leo]
                offset = boundaries[a % len(boundaries)]
                store.truncate_to(offset)
                model = [(d, h) for d, h in model if h.base_offset < offset]
                start = offset if not model else start
            elif op == "delete_below":
                threshold = a % (leo + 1)
                before = store.size_bytes
                freed = store.delete_segments_below(threshold)
                kept = [(d, h) for d, h in model if h.base_offset >= store.log_start_offset_on_disk]
                dropped = model[: len(model) - len(kept)]
                assert all(h.last_offset < threshold for _, h in dropped)
                assert freed == sum(len(d) for d, _ in dropped) == before - store.size_bytes
                model = kept
            elif op == "reopen":
                store.close()
                store, report = PartitionLogStore.open(
                    directory, segment_bytes=400, index_interval_bytes=150, fsync=False
                )
                assert report.reason is None
                assert store.recovered_headers() == [h for _, h in model]
            elif op == "reset":
                offset = leo + a
                store.reset(offset)
                model, start = [], offset
            else:
                s, max_bytes = a % (leo + 2), b
                for end in (leo, s + 3):
                    assert store.read(s, end, max_bytes) == model_read(
                        model, s, end, max_bytes, leo
                    )
            leo = model[-1][1].next_offset if model else start
            assert store.log_end_offset == leo
            if model:
                assert store.log_start_offset_on_disk == model[0][1].base_offset
            assert store.size_bytes == sum(len(d) for d, _ in model)
            assert store.read(0, leo, 1 << 30) == b"".join(d for d, _ in model)
        store.close()


def test_logs_sharing_a_small_handle_cache_write_roll_read_truncate_and_recover(
    tmp_path: Path,
) -> None:
    """Five logs, room for the files of two: every operation opens what it
    needs again, and nothing written is lost or misplaced."""
    from linkd.storage.handles import HandleCache

    cache = HandleCache(2)
    stores = [
        PartitionLogStore.open(tmp_path / f"p{i}", segment_bytes=400, handles=cache)[0]
        for i in range(5)
    ]
    written: list[list[Batch]] = [[] for _ in stores]
    for round_ in range(6):
        for i, store in enumerate(stores):
            written[i] += append_batches(store, 2, value_size=30 + i)
            assert len(cache) <= 2
        for store in stores[round_ % 5 :]:
            store.flush()  # fsyncs through files opened again where the cache closed them
    stores[3].truncate_to(5)
    written[3] = [b for b in written[3] if b[1].base_offset < 5]
    open_fds = sum(1 for s in stores if s._fd >= 0)
    assert open_fds <= 2 and cache.evictions > 0
    for i, store in enumerate(stores):
        end = store.log_end_offset
        assert store.read(0, end, 1 << 20) == b"".join(d for d, _ in written[i])
        store.close()
    for i in range(5):
        again, report = PartitionLogStore.open(tmp_path / f"p{i}", segment_bytes=400)
        assert report.truncated_bytes == 0
        assert again.read(0, again.log_end_offset, 1 << 20) == b"".join(d for d, _ in written[i])
        again.close()
