"""A source compares a follower's batch marks with its log (issue 35, N4):
a batch its cleaner rewrote (other bytes, another CRC) or removed whole is
the same history, not a divergence; a log that parted still is one."""

from __future__ import annotations

from linkd.core import histories
from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.partition import PartitionLog
from linkd.core.topic_config import TopicConfig
from tests.test_core_cleaner import _clean

COMPACT = TopicConfig.from_overrides({"cleanup.policy": "compact"})


def _append(
    log: PartitionLog, data: bytearray, pairs: list[tuple[bytes, bytes]], ts: int
) -> None:
    """A batch as the partition's leader writes it: stamped with its epoch."""
    batch = rb.build_batch(
        [rb.RecordSpec(k, v, ts) for k, v in pairs],
        base_offset=log.log_end_offset,
        partition_leader_epoch=log.leader_epoch,
    )
    log.apply_batch(rb.parse_header(batch))
    log.mark_durable(log.log_end_offset)
    data += batch


def _source(
    compacted: bool = True, faults: Faults = NO_FAULTS
) -> tuple[ClusterState, PartitionLog, bytearray]:
    state = ClusterState("A", faults=faults)
    configs = {"cleanup.policy": "compact"} if compacted else {}
    state.create_topic("c", 1, configs, topic_id="c-id")
    log = state.partition("c", 0)
    data = bytearray()
    _append(log, data, [(b"k1", b"v1"), (b"k2", b"v2")], 1_000)  # 0-1: keeps k2
    _append(log, data, [(b"k3", b"v3")], 1_001)  # 2: removed whole
    _append(log, data, [(b"k1", b"v1b")], 1_002)  # 3
    _append(log, data, [(b"k3", b"v3b")], 1_003)  # 4
    _append(log, data, [(b"k9", b"v9")], 1_004)  # 5: the active segment
    return state, log, data


def _marks(log: PartitionLog) -> tuple[histories.BatchMark, ...]:
    """A follower's copy, taken before the source cleaned: every batch."""
    return tuple(histories.BatchMark.of(b) for b in reversed(log.batches))


def _cleaned(state: ClusterState, log: PartitionLog, data: bytearray) -> None:
    _clean(log, bytes(data), COMPACT, active=5, now=10_000)
    kept = {b.base_offset for b in log.batches}
    assert 2 not in kept and 0 in kept, kept  # one batch rewritten, one gone


def test_a_batch_the_cleaner_rewrote_or_removed_is_not_a_parting() -> None:
    state, log, data = _source()
    marks = _marks(log)
    before = {b.base_offset: b.crc for b in log.batches}
    _cleaned(state, log, data)
    rewritten = log.batch_at(0)
    assert rewritten is not None and rewritten.crc != before[0]

    # Every mark, newest first, and only the oldest two (a rewritten batch,
    # then one removed whole above it): the logs agree to the follower's end.
    assert histories.common_by_marks(state, "c", 0, marks) == 6
    assert histories.common_by_marks(state, "c", 0, (marks[3], marks[4])) == 3


def test_undo_20__a_cleaned_batch_reads_as_a_parting() -> None:
    state, log, data = _source(faults=Faults.undoing(20))
    marks = _marks(log)
    _cleaned(state, log, data)
    assert histories.common_by_marks(state, "c", 0, (marks[3], marks[4])) is None


def test_a_log_that_parted_still_parts() -> None:
    state, log, data = _source()
    theirs = _marks(log)
    log.truncate_to(3)  # the source cut (an unclean election) and wrote again
    log.bump_epoch(1, 3)
    _append(log, data, [(b"k1", b"other")], 2_000)
    _append(log, data, [(b"k4", b"other")], 2_001)
    # The follower's batches at 3 and 4 are not the source's: the logs agree
    # below 3 only.
    assert histories.common_by_marks(state, "c", 0, theirs) == 3


def test_a_batch_with_other_bytes_on_a_topic_not_compacted_is_a_parting() -> None:
    state, log, _data = _source(compacted=False)
    marks = list(_marks(log))
    forged = marks[0].__class__(
        marks[0].base_offset, marks[0].last_offset, marks[0].crc ^ 1, *_fields(marks[0])
    )
    assert histories.common_by_marks(state, "c", 0, (forged, *marks[1:])) == 5


def _fields(mark: histories.BatchMark) -> tuple[int, int, int, int, int]:
    return (
        mark.leader_epoch,
        mark.producer_id,
        mark.producer_epoch,
        mark.base_sequence,
        mark.max_timestamp,
    )


def test_marks_carry_what_a_clean_keeps() -> None:
    batch = rb.build_batch([rb.RecordSpec(b"k", b"v", 7)], base_offset=4)
    header = rb.parse_header(batch)
    mark = histories.BatchMark.of(header)
    assert (mark.base_offset, mark.last_offset, mark.crc) == (4, 4, header.crc)
    assert mark.max_timestamp == 7 and mark.leader_epoch == header.partition_leader_epoch


def test_marks_all_of_batches_the_cleaner_removed__agree() -> None:
    state, log, data = _source()
    marks = _marks(log)
    _cleaned(state, log, data)
    assert histories.common_by_marks(state, "c", 0, (marks[3],)) == 3  # batch 2: removed whole
