"""The record batch v2 codec: round trips, CRC rules, markers, refusals."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from linkd.core import records as rb

headers_st = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
).map(tuple)
record_st = st.builds(
    rb.RecordSpec,
    key=st.none() | st.binary(max_size=300),
    value=st.none() | st.binary(max_size=20_000),
    timestamp=st.integers(0, 2**45),
    headers=headers_st,
)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=20),
    base=st.integers(0, 2**40),
    gzip=st.booleans(),
)
def test_build_then_decode_gives_back_every_field(
    records: list[rb.RecordSpec], base: int, gzip: bool
) -> None:
    codec = rb.COMPRESSION_GZIP if gzip else rb.COMPRESSION_NONE
    batch = rb.with_base_offset(rb.build_batch(records, compression=codec), base)
    header, decoded = rb.decode_records(batch)
    assert header.record_count == len(records) and header.base_offset == base
    assert header.max_timestamp == max(r.timestamp for r in records)
    for i, (spec, rec) in enumerate(zip(records, decoded, strict=True)):
        assert rec.offset == base + i
        assert (rec.key, rec.value, rec.timestamp) == (spec.key, spec.value, spec.timestamp)
        assert rec.headers == spec.headers


def test_restamping_offset_and_epoch_keeps_the_crc() -> None:
    batch = rb.build_batch([rb.RecordSpec(b"k", b"v", 5)])
    restamped = rb.with_offset_and_epoch(batch, 1234, 7)
    header = rb.check_single_batch(restamped)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert header.crc == rb.parse_header(batch).crc


@pytest.mark.parametrize("position", [17, 21, 30, 60, 70])
def test_any_flipped_byte_in_the_crc_range_is_detected(position: int) -> None:
    batch = bytearray(rb.build_batch([rb.RecordSpec(b"k", b"value" * 4, 5)]))
    batch[position] ^= 0x01
    with pytest.raises(rb.CorruptBatchError):
        rb.check_single_batch(bytes(batch))


def test_truncated_wrong_magic_and_trailing_bytes_are_refused() -> None:
    batch = rb.build_batch([rb.RecordSpec(None, b"v", 5)])
    with pytest.raises(rb.CorruptBatchError, match="truncated"):
        rb.check_single_batch(batch[:-1])
    with pytest.raises(rb.CorruptBatchError, match="magic"):
        rb.check_single_batch(batch[:16] + b"\x01" + batch[17:])
    with pytest.raises(rb.CorruptBatchError, match="exactly one"):
        rb.check_single_batch(batch + batch)


def test_control_markers_say_commit_or_abort() -> None:
    for marker in (rb.CONTROL_COMMIT, rb.CONTROL_ABORT):
        batch = rb.build_control_batch(marker=marker, producer_id=9, producer_epoch=2, timestamp=1)
        header = rb.check_single_batch(batch)
        assert header.is_control and header.is_transactional and header.producer_id == 9
        assert rb.control_marker_type(batch) == marker


def test_log_append_time_restamps_every_record_timestamp() -> None:
    batch = rb.build_batch([rb.RecordSpec(None, b"a", 5), rb.RecordSpec(None, b"b", 9)])
    stamped = rb.with_log_append_time(batch, 777)
    header, decoded = rb.decode_records(stamped)
    assert header.log_append_time and [r.timestamp for r in decoded] == [777, 777]


def test_iter_batches_walks_concatenated_batches() -> None:
    a = rb.with_base_offset(rb.build_batch([rb.RecordSpec(None, b"a", 1)] * 3), 0)
    b = rb.with_base_offset(rb.build_batch([rb.RecordSpec(None, b"b", 1)]), 3)
    assert [h.base_offset for _, h in rb.iter_batches(a + b)] == [0, 3]


@settings(max_examples=300, deadline=None)
@given(
    offset_delta=st.sampled_from([-2, 0, 1, 63, 64, 16382, 16383, 70_000])
    | st.integers(0, 1 << 20),
    timestamp_delta=st.sampled_from([-2, -1, 0, 16382, 16383]) | st.integers(-(2**40), 2**40),
    key=st.none() | st.binary(max_size=40) | st.sampled_from([b"k" * 16382, b"k" * 16383]),
    value=st.none() | st.binary(max_size=200) | st.sampled_from([b"v" * 16300, b"v" * 16383]),
    headers=headers_st,
)
@example(offset_delta=-2, timestamp_delta=0, key=None, value=b"v", headers=())
@example(offset_delta=5, timestamp_delta=3, key=b"k", value=b"v" * 100, headers=())
def test_record_bytes_matches_encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[rb.Header, ...],
) -> None:
    out = bytearray()
    rb.encode_record(out, offset_delta, timestamp_delta, key, value, headers)
    assert rb.record_bytes(offset_delta, timestamp_delta, key, value, headers) == bytes(out)


def test_a_refused_batch_names_every_record_at_fault_once() -> None:
    """KIP-467: a rule one record breaks is checked on every record; each is
    named once by its index (the key before the timestamp, as Kafka)."""
    batch = rb.build_batch([
        rb.RecordSpec(b"k", b"ok", 1_000),
        rb.RecordSpec(None, b"no key", 1_000),
        rb.RecordSpec(b"k", b"late", 9_000),
        rb.RecordSpec(None, b"no key and late", 9_000),
        rb.RecordSpec(b"k", b"ok", -1),  # no timestamp: not checked
    ])
    with pytest.raises(rb.InvalidTimestampError) as info:
        rb.check_records(batch, max_decompressed=1 << 20, produced=True, require_keys=True,
                         timestamp_range=(0, 5_000))
    errors = info.value.record_errors
    assert [e.batch_index for e in errors] == [1, 2, 3]
    assert "without key" in errors[0].message and "without key" in errors[2].message
    assert errors[1].message.startswith("Timestamp 9000 of record 2 is out of range")
    assert "within [0, 5000]" in errors[1].message
    with pytest.raises(rb.InvalidRecordError) as keys_only:
        rb.check_records(batch, max_decompressed=1 << 20, produced=True, require_keys=True)
    assert not isinstance(keys_only.value, rb.InvalidTimestampError)
    assert [e.batch_index for e in keys_only.value.record_errors] == [1, 3]
    rb.check_records(batch, max_decompressed=1 << 20, produced=True)  # no rule: accepted
