"""Stories of one cluster's core: topics, produce, idempotence, transactions,
retention and recovery, each asserting on what the core answers and returns."""

from __future__ import annotations

import pytest

from linkd.core import records as rb
from linkd.core.cluster import (
    AppendBatch,
    ClusterState,
    CreateLogs,
    DeleteBelow,
    Journal,
    pick_offset_in_batch,
)
from linkd.core.errors import ClusterError, ErrorCode

NOW = 1_700_000_000_000


def batch(
    n: int = 1,
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    ts: int = NOW,
    size: int = 1,
) -> bytes:
    return rb.build_batch(
        [rb.RecordSpec(None, b"x" * size, ts + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def durable(state: ClusterState, topic: str, partition: int) -> None:
    log = state.partition(topic, partition)
    state.mark_durable(topic, partition, log.log_end_offset)


def code_of(call: object) -> ErrorCode:
    with pytest.raises(ClusterError) as info:
        call()  # type: ignore[operator]
    return info.value.code


@pytest.fixture
def state() -> ClusterState:
    s = ClusterState("A")
    s.create_topic("orders", 2, {}, "id-orders")
    return s


def test_create_topic__returns_logs_then_journal__and_refuses_bad_names(
    state: ClusterState,
) -> None:
    topic, effects = state.create_topic("clicks", 3, {"retention.ms": "1000"}, "id-clicks")
    assert [type(e) for e in effects] == [CreateLogs, Journal]
    assert topic.configs()["retention.ms"] == "1000"
    assert code_of(lambda: state.create_topic("clicks", 1, {}, "x")) == (
        ErrorCode.TOPIC_ALREADY_EXISTS
    )
    assert code_of(lambda: state.create_topic("bad name", 1, {}, "x")) == (
        ErrorCode.INVALID_TOPIC_NAME
    )
    assert code_of(lambda: state.create_topic("ok", 0, {}, "x")) == ErrorCode.INVALID_PARTITIONS
    assert code_of(lambda: state.create_topic("ok", 1, {"nope": "1"}, "x")) == (
        ErrorCode.INVALID_CONFIG
    )
    assert code_of(lambda: state.create_topic("ok", 1, {"retention.ms": "soon"}, "x")) == (
        ErrorCode.INVALID_CONFIG
    )
    assert "ok" not in state.topics


def test_produce__assigns_dense_offsets__and_hw_waits_for_durability(state: ClusterState) -> None:
    first = state.produce("orders", 0, batch(3), "", NOW)
    second = state.produce("orders", 0, batch(2), "", NOW)
    assert (first.base_offset, second.base_offset) == (0, 3)
    log = state.partition("orders", 0)
    assert (log.log_end_offset, log.high_watermark) == (5, 0)
    stored = first.effects[0]
    assert isinstance(stored, AppendBatch)
    assert rb.parse_header(stored.batch).base_offset == 0
    durable(state, "orders", 0)
    assert log.high_watermark == 5
    plan = state.plan_fetch("orders", 0, 0, read_committed=False)
    assert plan.upper_offset == 5


def test_produce__refuses_unknown_partition_corrupt_and_oversized_batches(
    state: ClusterState,
) -> None:
    assert code_of(lambda: state.produce("nope", 0, batch(), "", NOW)) == ErrorCode.UNKNOWN_TOPIC
    assert code_of(lambda: state.produce("orders", 2, batch(), "", NOW)) == (
        ErrorCode.UNKNOWN_PARTITION
    )
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF
    assert code_of(lambda: state.produce("orders", 0, bytes(corrupt), "", NOW)) == (
        ErrorCode.CORRUPT_MESSAGE
    )
    state.alter_configs("orders", {"max.message.bytes": "200"}, [])
    assert code_of(lambda: state.produce("orders", 0, batch(size=500), "", NOW)) == (
        ErrorCode.RECORD_TOO_LARGE
    )
    assert state.partition("orders", 0).log_end_offset == 0


def test_idempotent_producer__retry_is_deduplicated__gap_and_old_epoch_refused(
    state: ClusterState,
) -> None:
    pid, epoch, _ = state.init_producer_id("", 0, NOW)
    a = state.produce("orders", 0, batch(2, pid=pid, epoch=epoch, seq=0), "", NOW)
    again = state.produce("orders", 0, batch(2, pid=pid, epoch=epoch, seq=0), "", NOW)
    assert again.duplicate and again.base_offset == a.base_offset and again.effects == ()
    assert code_of(
        lambda: state.produce("orders", 0, batch(1, pid=pid, epoch=epoch, seq=5), "", NOW)
    ) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    state.produce("orders", 0, batch(1, pid=pid, epoch=epoch + 1, seq=0), "", NOW)
    assert code_of(
        lambda: state.produce("orders", 0, batch(1, pid=pid, epoch=epoch, seq=2), "", NOW)
    ) == (ErrorCode.INVALID_PRODUCER_EPOCH)


def test_transaction__abort_hides_records_from_read_committed__commit_shows_them(
    state: ClusterState,
) -> None:
    pid, epoch, _ = state.init_producer_id("tx", 60_000, NOW)
    state.add_partitions_to_txn("tx", pid, epoch, [("orders", 0)], NOW)
    state.produce("orders", 0, batch(2, pid=pid, epoch=epoch, seq=0, txn=True), "tx", NOW)
    durable(state, "orders", 0)
    log = state.partition("orders", 0)
    assert log.last_stable_offset == 0  # the open transaction holds read_committed back
    effects = state.end_txn("tx", pid, epoch, False, NOW)
    markers = [e for e in effects if isinstance(e, AppendBatch)]
    assert len(markers) == 1 and markers[0].header.is_control
    assert log.log_end_offset == 3  # the marker occupies offset 2
    durable(state, "orders", 0)
    plan = state.plan_fetch("orders", 0, 0, read_committed=True)
    assert [(a.producer_id, a.first_offset) for a in plan.aborted] == [(pid, 0)]

    state.add_partitions_to_txn("tx", pid, epoch, [("orders", 0)], NOW)
    state.produce("orders", 0, batch(1, pid=pid, epoch=epoch, seq=2, txn=True), "tx", NOW)
    state.end_txn("tx", pid, epoch, True, NOW)
    durable(state, "orders", 0)
    plan = state.plan_fetch("orders", 0, 3, read_committed=True)
    assert plan.aborted == () and plan.upper_offset == 5


def test_transactional_write_to_a_partition_not_in_the_txn_is_refused(state: ClusterState) -> None:
    pid, epoch, _ = state.init_producer_id("tx", 60_000, NOW)
    state.add_partitions_to_txn("tx", pid, epoch, [("orders", 0)], NOW)
    assert (
        code_of(
            lambda: state.produce(
                "orders", 1, batch(1, pid=pid, epoch=epoch, seq=0, txn=True), "tx", NOW
            )
        )
        == ErrorCode.INVALID_TXN_STATE
    )


def test_new_producer_instance__fences_the_old_one_and_aborts_its_open_txn(
    state: ClusterState,
) -> None:
    pid, epoch, _ = state.init_producer_id("tx", 60_000, NOW)
    state.add_partitions_to_txn("tx", pid, epoch, [("orders", 0)], NOW)
    state.produce("orders", 0, batch(1, pid=pid, epoch=epoch, seq=0, txn=True), "tx", NOW)
    pid2, epoch2, effects = state.init_producer_id("tx", 60_000, NOW)
    assert pid2 == pid and epoch2 == epoch + 1
    assert any(isinstance(e, AppendBatch) and e.header.is_control for e in effects)
    assert state.partition("orders", 0).ongoing_txns == {}
    assert code_of(lambda: state.end_txn("tx", pid, epoch, True, NOW)) == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )


def test_transaction_timeout__aborts_and_bumps_the_epoch(state: ClusterState) -> None:
    pid, epoch, _ = state.init_producer_id("tx", 1_000, NOW)
    state.add_partitions_to_txn("tx", pid, epoch, [("orders", 1)], NOW)
    state.produce("orders", 1, batch(1, pid=pid, epoch=epoch, seq=0, txn=True), "tx", NOW)
    assert not any(isinstance(e, AppendBatch) for e in state.tick(NOW + 500))
    effects = state.tick(NOW + 1_001)
    assert any(isinstance(e, AppendBatch) and e.header.is_control for e in effects)
    assert state.txn.txns["tx"].producer_epoch == epoch + 1


def test_retention__deletes_whole_segments_on_its_check_interval(
    state: ClusterState,
) -> None:
    """Kafka's rule: retention runs every log.retention.check.interval.ms and
    deletes whole segments, oldest first, each wholly below the high
    watermark and with its newest record older than retention.ms."""
    state.retention_check_interval_ms = 5_000
    # Each batch in its own segment: 50 ms of record time rolls one.
    state.alter_configs("orders", {"retention.ms": "1000", "segment.ms": "50"}, [])
    for ts in (NOW, NOW + 100, NOW + 9_000):
        state.produce("orders", 0, batch(1, ts=ts), "", NOW)
    log = state.partition("orders", 0)
    assert [seg.base_offset for seg in log.segments] == [0, 1, 2]
    assert state.tick(NOW) == []  # arms the first check, one interval on
    assert state.next_deadline_ms() == NOW + 5_000
    assert state.tick(NOW + 5_000) == []  # nothing durable yet: nothing deletable
    durable(state, "orders", 0)
    assert state.tick(NOW + 9_999) == []  # the next check is not due
    effects = state.tick(NOW + 10_000)
    assert [e.offset for e in effects if isinstance(e, DeleteBelow)] == [2]
    assert log.log_start_offset == 2 and log.log_end_offset == 3
    assert [seg.base_offset for seg in log.segments] == [2]
    assert code_of(lambda: state.plan_fetch("orders", 0, 1, False)) == ErrorCode.OFFSET_OUT_OF_RANGE


def test_retention__keeps_an_old_record_until_its_whole_segment_expires(
    state: ClusterState,
) -> None:
    state.retention_check_interval_ms = 1_000
    state.alter_configs("orders", {"retention.ms": "1000"}, [])
    state.produce("orders", 0, batch(1, ts=NOW - 60_000), "", NOW)  # long expired
    state.produce("orders", 0, batch(1, ts=NOW), "", NOW)  # same segment, fresh
    durable(state, "orders", 0)
    state.tick(NOW)
    assert state.tick(NOW + 1_000) == []  # the segment's newest record is 1000 ms old
    log = state.partition("orders", 0)
    assert log.log_start_offset == 0
    effects = state.tick(NOW + 2_000)  # now all of it is due: the active segment goes too
    assert [(e.offset, e.roll) for e in effects if isinstance(e, DeleteBelow)] == [(2, True)]
    assert log.log_start_offset == 2 == log.log_end_offset
    assert [seg.base_offset for seg in log.segments] == [2]


def test_retention_bytes__deletes_the_oldest_segments_while_the_rest_is_large_enough(
    state: ClusterState,
) -> None:
    state.retention_check_interval_ms = 1_000
    state.alter_configs("orders", {"retention.bytes": "1", "internal.segment.bytes": "1"}, [])
    for _ in range(3):
        state.produce("orders", 0, batch(1), "", NOW)  # one batch a segment
    durable(state, "orders", 0)
    size = state.partition("orders", 0).segments[0].size_bytes
    two_segments = {"retention.bytes": str(2 * size), "internal.segment.bytes": "1"}
    state.alter_configs("orders", two_segments, [])
    state.tick(NOW)
    state.tick(NOW + 1_000)
    assert state.partition("orders", 0).log_start_offset == 1  # two segments' worth stay


def test_segments__roll_by_size_by_record_time_with_jitter_and_by_compaction_lag(
    state: ClusterState,
) -> None:
    one = len(batch(1))
    state.alter_configs("orders", {"internal.segment.bytes": str(2 * one)}, [])
    rolls = [
        next(e.roll for e in state.produce("orders", 0, batch(1), "", NOW).effects
             if isinstance(e, AppendBatch))
        for _ in range(5)
    ]
    assert rolls == [False, False, True, False, True]  # two batches a segment
    state.alter_configs("orders", {"segment.ms": "1000", "segment.jitter.ms": "1000"}, [])
    log = state.partition("orders", 1)

    def roll_at(ts: int) -> bool:
        effects = state.produce("orders", 1, batch(1, ts=ts), "", NOW).effects
        return next(e.roll for e in effects if isinstance(e, AppendBatch))

    assert not roll_at(NOW)  # the first batch of an empty segment never rolls
    jitter = log.segments[-1].jitter_ms
    assert 0 <= jitter < 1000
    assert not roll_at(NOW + 1000 - jitter)  # not past segment.ms less the jitter
    assert roll_at(NOW + 1001 - jitter)
    compacted = ClusterState("A")
    compacted.create_topic(
        "c", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "100"}, "id-c")
    keyed = rb.build_batch([rb.RecordSpec(b"k", b"v", NOW)])
    later = rb.build_batch([rb.RecordSpec(b"k", b"v", NOW + 101)])
    compacted.produce("c", 0, keyed, "", NOW)
    appended = compacted.produce("c", 0, later, "", NOW).effects
    assert [e.roll for e in appended if isinstance(e, AppendBatch)] == [True]


def test_list_offsets__earliest_latest_and_by_timestamp(state: ClusterState) -> None:
    state.produce("orders", 0, batch(3, ts=NOW), "", NOW)
    state.produce("orders", 0, batch(3, ts=NOW + 100), "", NOW)
    durable(state, "orders", 0)
    assert state.list_offsets("orders", 0, "earliest", 0, False).offset == 0
    assert state.list_offsets("orders", 0, "latest", 0, False).offset == 6
    lookup = state.list_offsets("orders", 0, "timestamp", NOW + 101, False)
    assert lookup.refine_batch_offset == 3
    records = [rb.Record(3 + i, NOW + 100 + i, None, b"") for i in range(3)]
    assert pick_offset_in_batch(records, NOW + 101) == (4, NOW + 101)
    assert state.list_offsets("orders", 0, "timestamp", NOW + 10_000, False).offset == -1


def test_journal_replay__rebuilds_topics_configs_producers_and_transactions() -> None:
    state = ClusterState("A")
    journal: list[dict[str, object]] = []
    logs: dict[tuple[str, int], list[rb.BatchHeader]] = {}

    def run(effects: list[object] | tuple[object, ...]) -> None:
        for e in effects:
            if isinstance(e, Journal):
                journal.extend(e.records)
            elif isinstance(e, AppendBatch):
                logs.setdefault((e.topic_id, e.partition), []).append(e.header)

    _, effects = state.create_topic("t", 1, {"retention.ms": "5000"}, "id-t")
    run(effects)
    pid, epoch, effects = state.init_producer_id("tx", 60_000, NOW)
    run(effects)
    run(state.add_partitions_to_txn("tx", pid, epoch, [("t", 0)], NOW))
    run(state.produce("t", 0, batch(2, pid=pid, epoch=epoch, seq=0, txn=True), "tx", NOW).effects)

    replayed = ClusterState("A")
    for record in journal:
        replayed.apply_record(record)  # type: ignore[arg-type]
    replayed.recover_partition("t", 0, [(h, None) for h in logs[("id-t", 0)]], (0,), NOW)
    log = replayed.partition("t", 0)
    assert replayed.topic("t").configs()["retention.ms"] == "5000"
    assert log.log_end_offset == 2 and log.ongoing_txns == {pid: 0}
    # The producer continues where it was: the next sequence is accepted.
    result = replayed.produce("t", 0, batch(1, pid=pid, epoch=epoch, seq=2, txn=True), "tx", NOW)
    assert result.base_offset == 2
    # And the next producer id is not reused.
    assert replayed.init_producer_id("", 0, NOW)[0] > pid
