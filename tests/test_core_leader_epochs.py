"""Where a leader epoch ends on a log (`PartitionLog.end_offset_for_epoch`),
as Kafka's leader epoch cache answers OffsetsForLeaderEpoch."""

from __future__ import annotations

from linkd.core.partition import PartitionLog


def _log(history: list[tuple[int, int]], end: int) -> PartitionLog:
    log = PartitionLog("t", 0)
    log.epoch_history = list(history)
    log.leader_epoch = history[-1][0]
    log.log_end_offset = end
    return log


def test_end_offsets_of_epochs() -> None:
    log = _log([(0, 0), (2, 5), (4, 9)], end=12)
    assert log.end_offset_for_epoch(4) == (4, 12)  # the latest: the log end
    assert log.end_offset_for_epoch(2) == (2, 9)
    assert log.end_offset_for_epoch(3) == (2, 9)  # not on this log: the one below it
    assert log.end_offset_for_epoch(1) == (0, 5)
    assert log.end_offset_for_epoch(0) == (0, 5)
    assert log.end_offset_for_epoch(5) == (-1, -1)  # above every known epoch
    assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_an_epoch_below_the_first_known_ends_where_the_first_starts() -> None:
    log = _log([(3, 100), (5, 140)], end=150)
    assert log.end_offset_for_epoch(1) == (1, 100)
    assert log.end_offset_for_epoch(3) == (3, 140)


def test_a_reader_s_diverging_epoch() -> None:
    log = _log([(0, 0), (2, 5), (4, 9)], end=12)
    assert log.diverging_epoch(-1, 100) is None  # no epoch given: not checked
    assert log.diverging_epoch(4, 12) is None
    assert log.diverging_epoch(2, 9) is None  # read epoch 2 up to its end here
    assert log.diverging_epoch(2, 11) == (2, 9)  # read past where epoch 2 ends here
    assert log.diverging_epoch(3, 7) == (2, 9)  # an epoch this log never had
    assert log.diverging_epoch(6, 12) == (-1, -1)  # newer than anything here
