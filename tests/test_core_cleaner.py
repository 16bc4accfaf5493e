"""The log cleaner's decisions (linkd/core/cleaner.py), on logs built in memory."""

from __future__ import annotations

import pytest

from linkd.core import cleaner
from linkd.core import records as rb
from linkd.core.cluster import AppendBatch, ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.partition import PartitionLog
from linkd.core.topic_config import TopicConfig, validate_configs

COMPACT = TopicConfig.from_overrides({"cleanup.policy": "compact"})


def _append(
    log: PartitionLog, data: bytearray, pairs: list[tuple[bytes | None, bytes | None]], ts: int
) -> None:
    batch = rb.build_batch(
        [rb.RecordSpec(k, v, ts) for k, v in pairs], base_offset=log.log_end_offset
    )
    header = rb.parse_header(batch)
    log.apply_batch(header)
    log.mark_durable(log.log_end_offset)
    data += batch


def _clean(log: PartitionLog, data: bytes, config: TopicConfig, active: int, now: int) -> bytes:
    """One whole clean through the core's procedure, every batch as one segment."""
    plan = cleaner.plan_clean(log, config, active, now)
    assert plan is not None
    steps = cleaner.clean_procedure(log, plan, [(log.log_start_offset, log.log_end_offset)])
    out = data
    step = cleaner.next_step(steps, None)
    while not isinstance(step, cleaner.CleanDone):
        answer = None
        if isinstance(step, cleaner.MapSegment):
            step.add(data)
        else:
            answer = step.clean(data)
            out = answer.data
        step = cleaner.next_step(steps, answer)
    return out


def test_the_clean_procedure_maps_dirty_segments_then_rewrites_each_and_can_be_abandoned() -> None:
    log, data = _log_with([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"a", b"3"), (b"c", b"1")])
    first = _clean(log, bytes(data), COMPACT, active=4, now=2_000)  # cleaned up to 4
    after_first = [b.base_offset for b in log.batches]
    _append(log, data := bytearray(first), [(b"b", b"2")], ts=1_000)  # offset 5
    _append(log, data, [(b"z", b"1")], ts=1_000)  # offset 6: the active segment
    segments = [(1, 4), (4, 6)]  # two segment files below the active one
    plan = cleaner.plan_clean(log, COMPACT, 6, 3_000)
    assert plan is not None and (plan.first_dirty, plan.end) == (4, 6)
    steps = cleaner.clean_procedure(log, plan, segments)
    step = cleaner.next_step(steps, None)
    # Only the segment holding dirty batches feeds the map; then each is rewritten.
    assert isinstance(step, cleaner.MapSegment) and step.base == 4
    step = cleaner.next_step(steps, None)
    assert isinstance(step, cleaner.RewriteSegment) and (step.base, step.next_base) == (1, 4)
    # A shell that cannot swap stops here: the model is as it was.
    steps.close()
    assert [b.base_offset for b in log.batches] == [*after_first, 5, 6]
    assert log.cleaner.cleaned_up_to == 4 and log.cleaner.cleans == 1


def _read(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    got = []
    for position, header in rb.iter_batches(data):
        if header.is_control:
            continue
        _, records = rb.decode_records(data, position)
        got += [(r.offset, r.key, r.value) for r in records]
    return got


def _log_with(pairs: list[tuple[bytes | None, bytes | None]]) -> tuple[PartitionLog, bytearray]:
    log = PartitionLog("t", 0)
    data = bytearray()
    for pair in pairs:
        _append(log, data, [pair], ts=1_000)
    return log, data


def test_the_latest_record_of_each_key_stays_at_its_offset_below_the_active_segment() -> None:
    log, data = _log_with([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"a", b"3")])
    # The active segment starts at 4: the record at 4 is not cleanable.
    cleaned = _clean(log, bytes(data), COMPACT, active=4, now=2_000)
    assert _read(cleaned) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1"), (4, b"a", b"3")]
    assert [b.base_offset for b in log.batches] == [1, 2, 3, 4]
    assert log.log_end_offset == 5 and log.cleaner.cleaned_up_to == 4
    assert log.size_bytes == len(cleaned)


def test_tombstones_stay_for_delete_retention_after_their_first_clean_then_go() -> None:
    config = TopicConfig.from_overrides(
        {"cleanup.policy": "compact", "delete.retention.ms": "1000"}
    )
    log, data = _log_with([(b"a", b"1"), (b"a", None), (b"b", b"1"), (b"z", b"1")])
    first = _clean(log, bytes(data), config, active=3, now=5_000)
    assert _read(first) == [(1, b"a", None), (2, b"b", b"1"), (3, b"z", b"1")]
    assert cleaner.plan_clean(log, config, 3, 5_999) is None  # nothing dirty, horizon not yet
    second = _clean(log, first, config, active=3, now=6_000)
    assert _read(second) == [(2, b"b", b"1"), (3, b"z", b"1")]
    assert log.cleaner.horizons == []


def test_the_dirty_ratio_gates_a_clean() -> None:
    config = TopicConfig.from_overrides(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.6"}
    )
    log, data = _log_with([(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"d", b"1")])
    data = bytearray(_clean(log, bytes(data), COMPACT, active=4, now=2_000))
    # 4 clean batches, then 5 dirty ones: 5/9 < 0.6.
    for _ in range(5):
        _append(log, data, [(b"a", b"x")], ts=1_000)
    assert cleaner.plan_clean(log, config, log.log_end_offset, 3_000) is None
    assert cleaner.dirty_ratio(log, log.log_end_offset) == pytest.approx(5 / 9)
    _append(log, data, [(b"a", b"y")], ts=1_000)
    assert cleaner.plan_clean(log, config, log.log_end_offset, 3_000) is not None


def test_records_younger_than_the_compaction_lag_are_not_cleaned() -> None:
    config = TopicConfig.from_overrides(
        {"cleanup.policy": "compact", "min.compaction.lag.ms": "500"}
    )
    log = PartitionLog("t", 0)
    data = bytearray()
    _append(log, data, [(b"a", b"1")], ts=1_000)
    _append(log, data, [(b"a", b"2")], ts=1_000)
    _append(log, data, [(b"a", b"3")], ts=1_800)  # younger than 2_000 - 500
    cleaned = _clean(log, bytes(data), config, active=10, now=2_000)
    assert _read(cleaned) == [(1, b"a", b"2"), (2, b"a", b"3")]


def test_a_batch_keeps_its_offsets_and_a_producers_last_batch_stays_empty() -> None:
    log = PartitionLog("t", 0)
    data = bytearray()
    for seq, pairs in enumerate([[(b"a", b"1"), (b"b", b"1")], [(b"a", b"2"), (b"b", b"2")]]):
        batch = rb.build_batch(
            [rb.RecordSpec(k, v, 1_000) for k, v in pairs],
            base_offset=log.log_end_offset,
            producer_id=7,
            producer_epoch=0,
            base_sequence=seq * 2,
        )
        log.apply_batch(rb.parse_header(batch))
        data += batch
    _append(log, data, [(b"a", b"3"), (b"b", b"3")], ts=1_000)
    log.mark_durable(log.log_end_offset)
    cleaned = _clean(log, bytes(data), COMPACT, active=6, now=2_000)
    headers = [h for _, h in rb.iter_batches(cleaned)]
    # The first batch goes; the producer's last batch stays with no records.
    assert [(h.base_offset, h.last_offset, h.record_count) for h in headers] == [
        (2, 3, 0),
        (4, 5, 2),
    ]
    assert headers[0].producer_id == 7 and headers[0].last_sequence == 3
    assert log.producers[7].last_sequence == 3


def test_partial_batches_keep_their_last_offset() -> None:
    log = PartitionLog("t", 0)
    data = bytearray()
    _append(log, data, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], ts=1_000)
    _append(log, data, [(b"c", b"2")], ts=1_000)
    _append(log, data, [(b"z", b"1")], ts=1_000)
    cleaned = _clean(log, bytes(data), COMPACT, active=4, now=2_000)
    headers = [h for _, h in rb.iter_batches(cleaned)]
    assert (headers[0].base_offset, headers[0].last_offset, headers[0].record_count) == (0, 2, 2)
    assert _read(cleaned) == [(0, b"a", b"1"), (1, b"b", b"1"), (3, b"c", b"2"), (4, b"z", b"1")]
    # A copy's check accepts the gap inside the batch (as a follower checks it).
    rb.check_records(cleaned, max_decompressed=1 << 20, produced=False)


def _txn(log: PartitionLog, data: bytearray, pairs: list[tuple[bytes, bytes]], seq: int) -> None:
    batch = rb.build_batch(
        [rb.RecordSpec(k, v, 1_000) for k, v in pairs],
        base_offset=log.log_end_offset,
        producer_id=3,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
    )
    log.apply_batch(rb.parse_header(batch))
    data += batch


def _marker(log: PartitionLog, data: bytearray, marker: int) -> None:
    batch = rb.build_control_batch(
        marker=marker, base_offset=log.log_end_offset, producer_id=3, producer_epoch=0,
        timestamp=1_000,
    )
    log.apply_batch(rb.parse_header(batch), marker)
    log.mark_durable(log.log_end_offset)
    data += batch


def test_committed_records_are_compacted_and_a_marker_waits_for_its_horizon() -> None:
    config = TopicConfig.from_overrides(
        {"cleanup.policy": "compact", "delete.retention.ms": "1000"}
    )
    log = PartitionLog("t", 0)
    data = bytearray()
    _txn(log, data, [(b"a", b"1")], seq=0)  # 0, aborted below
    _marker(log, data, rb.CONTROL_ABORT)  # 1
    _txn(log, data, [(b"b", b"1"), (b"z", b"1")], seq=1)  # 2-3, committed
    _marker(log, data, rb.CONTROL_COMMIT)  # 4
    _append(log, data, [(b"b", b"2")], ts=1_000)  # 5
    _append(log, data, [(b"y", b"1")], ts=1_000)  # 6: the active segment
    first = _clean(log, bytes(data), config, active=6, now=5_000)
    # The aborted record goes; the committed b is superseded by 5; markers stay.
    assert _read(first) == [(3, b"z", b"1"), (5, b"b", b"2"), (6, b"y", b"1")]
    assert [h.base_offset for _, h in rb.iter_batches(first)] == [1, 2, 4, 5, 6]
    second = _clean(log, first, config, active=6, now=6_000)
    # The abort marker's transaction has nothing left: it goes once its horizon
    # passed. The commit marker's transaction still has a record (z).
    assert [h.base_offset for _, h in rb.iter_batches(second)] == [2, 4, 5, 6]
    # Read back after a restart: no transaction is left open.
    fresh = PartitionLog("t", 0, log_start_offset=2)
    for position, header in rb.iter_batches(second):
        marker = rb.control_marker_type(second, position) if header.is_control else None
        fresh.apply_batch(header, marker, allow_gap=True)
    fresh.mark_durable(fresh.log_end_offset)
    assert not fresh.ongoing_txns and fresh.last_stable_offset == 7


def test_a_log_with_gaps_is_read_back_after_a_restart() -> None:
    log, data = _log_with([(b"a", b"1"), (b"a", b"2"), (b"b", b"1"), (b"z", b"1")])
    cleaned = _clean(log, bytes(data), COMPACT, active=3, now=2_000)
    fresh = PartitionLog("t", 0, log_start_offset=1)
    for _, header in rb.iter_batches(cleaned):
        fresh.apply_batch(header, allow_gap=True)
    assert fresh.log_end_offset == 4
    with pytest.raises(ValueError, match="does not start at the log end offset"):
        fresh.apply_batch(header)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("cleanup.policy", "compaction", r"each must be one of \['compact', 'delete'\]"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be between 0 and 1"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("delete.retention.ms", "-1", "Value must be at least 0"),
        ("min.compaction.lag.ms", "-5", "Value must be at least 0"),
    ],
)
def test_cleaner_configs_are_validated(key: str, value: str, why: str) -> None:
    with pytest.raises(ClusterError, match=why) as info:
        validate_configs("t", {key: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG and key in str(info.value)


def test_both_orders_of_compact_and_delete_are_one_policy() -> None:
    for text in ("compact,delete", "delete,compact"):
        validate_configs("t", {"cleanup.policy": text})
        config = TopicConfig.from_overrides({"cleanup.policy": text})
        assert config.compact and config.delete
    assert not COMPACT.delete


def test_a_compacted_topic_refuses_a_record_without_a_key() -> None:
    state = ClusterState("c1")
    state.create_topic("c", 1, {"cleanup.policy": "compact"}, topic_id="c-id")
    keyless = rb.build_batch([rb.RecordSpec(None, b"v", 0)])
    refusal = "Compacted topic cannot accept message without key"
    with pytest.raises(ClusterError, match=refusal) as e:
        state.produce("c", 0, keyless, "", now_ms=0)
    assert e.value.code == ErrorCode.INVALID_RECORD
    state.produce("c", 0, rb.build_batch([rb.RecordSpec(b"k", None, 0)]), "", now_ms=0)


def test_max_compaction_lag__cleans_a_partition_below_its_dirty_ratio_once_overdue() -> None:
    """Kafka's max.compaction.lag.ms: a record may stay uncompacted at most
    that long: its segment rolls by then, and the partition is cleaned
    whatever its dirty ratio."""
    state = ClusterState("c1")
    configs = {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000",
               "min.cleanable.dirty.ratio": "1.0"}
    state.create_topic("c", 1, configs, topic_id="c-id")
    for i, ts in enumerate((0, 10, 2_000)):  # the last rolls a segment (lag 1000)
        effects = state.produce("c", 0, rb.build_batch([rb.RecordSpec(b"k", b"v%d" % i, ts)]),
                                "", now_ms=ts).effects
    assert [e.roll for e in effects if isinstance(e, AppendBatch)] == [True]
    log = state.partition("c", 0)
    log.mark_durable(log.log_end_offset)
    config = state.topic("c").config
    active = log.segments[-1].base_offset
    assert active == 2
    log.cleaner.cleaned_up_to = 1  # as if a clean had passed offset 0: dirty ratio 0.5
    assert cleaner.plan_clean(log, config, active, now_ms=1_010) is None  # ratio 1.0 unmet
    plan = cleaner.plan_clean(log, config, active, now_ms=1_011)  # the record at 1 is overdue
    assert plan is not None and (plan.first_dirty, plan.end) == (1, 2)
