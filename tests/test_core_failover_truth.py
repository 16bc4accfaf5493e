"""What a failover says must be true at the failover, not as of the last
round: the rule for a known lag, the refusal when it is not known, the
forced answer's rows (-1 and since when), and the transactions it aborted.

A leads the namespace orders- on link ab, B follows it (the fixtures of
test_core_link_rounds); the test plays the transport and the disk.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core.cluster import AppendBatch, ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import parse_policies
from linkd.core.requests import Execute, Note, Now, Request, WakeWaiters
from tests.test_core_link_rounds import NOW, Disk, discover, fetch_round, produce, two_clusters


def _following(
    records: int = 3, faults: Faults = NO_FAULTS
) -> tuple[ClusterState, ClusterState, Disk, Disk]:
    a, b, disk_a, disk_b = two_clusters(faults)
    discover(a, b, disk_b)
    produce(a, disk_a, records)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.links.state_name("ab") == "FOLLOWING"
    assert b.links.lag_known("ab", NOW + 10)
    return a, b, disk_a, disk_b


def test_a_failed_call_after_the_last_round__makes_the_lag_unknown_since_that_round() -> None:
    a, b, disk_a, _disk_b = _following()
    produce(a, disk_a, 5)  # acknowledged by A after its last answer
    b.links.on_contact_lost("ab", NOW + 20)  # the source died: its connection reset

    assert not b.links.lag_known("ab", NOW + 21)
    (row,) = admin.follower_partitions(b, "ab", NOW + 21)
    assert (row.lag_known, row.lag_records, row.lag_ms) == (False, -1, -1)
    assert row.unknown_since_ms == row.source_hw_known_at_ms == NOW + 10
    assert admin.known_part(row) == 0  # it held all it had heard of


@pytest.mark.parametrize("undone", [False, True])
def test_a_lane_waiting_out_its_storage_refusal__does_not_poll__its_lag_is_unknown(
    undone: bool,
) -> None:
    """Fix 43: no long poll is out while the pull lane waits out a refused
    write, so what the source acknowledges meanwhile reaches no one."""
    _a, b, _disk_a, _disk_b = _following(faults=Faults.undoing(43) if undone else NO_FAULTS)
    b.links.storage_wait("ab", NOW + 11)
    assert b.links.lag_known("ab", NOW + 12) is undone
    (row,) = admin.follower_partitions(b, "ab", NOW + 12)
    assert row.lag_known is undone
    if not undone:
        assert row.unknown_since_ms == NOW + 10  # the last round's news
    b.links.storage_wait("ab", None)  # a round stored what it fetched again
    assert b.links.lag_known("ab", NOW + 13)


def test_a_failover_right_after_the_source_died__is_refused__naming_the_partition_and_since_when(
) -> None:
    a, b, disk_a, _disk_b = _following()
    produce(a, disk_a, 5)
    b.links.on_contact_lost("ab", NOW + 20)

    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, NOW + 21)

    assert refused.value.code is ErrorCode.LAG_NOT_KNOWN
    assert "orders-1-0 unknown since 11 ms ago (at 1010)" in refused.value.message
    assert [m.local_prefix for m in b.links.get("ab").attached_mappings()] == ["orders-"]


def test_a_forced_failover__reports_each_unknown_lag_as_minus_one_and_since_when() -> None:
    a, b, disk_a, _disk_b = _following()
    produce(a, disk_a, 5)
    b.links.on_contact_lost("ab", NOW + 20)

    result = admin.failover(b, "ab", True, NOW + 21)

    (row,) = result.abandoned
    assert (row.topic, row.partition, row.lag_known) == ("orders-1", 0, False)
    assert (row.lag_records, row.lag_ms, row.unknown_since_ms) == (-1, -1, NOW + 10)
    assert result.partitions == result.abandoned


def test_a_round_finished_after_the_failure__makes_the_lag_known_again() -> None:
    a, b, disk_a, disk_b = _following()
    b.links.on_contact_lost("ab", NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)

    assert b.links.lag_known("ab", NOW + 31)
    result = admin.failover(b, "ab", False, NOW + 31)
    assert result.abandoned == []
    assert [(r.lag_known, r.lag_records, r.unknown_since_ms) for r in result.partitions] == [
        (True, 0, 0)
    ]


def test_a_round_older_than_the_silence_bound__is_no_knowledge__even_with_no_failed_call() -> None:
    _a, b, _disk_a, _disk_b = _following()
    later = NOW + 10 + b.links.limits.fetch_silence_ms + 1

    assert not b.links.lag_known("ab", later)
    result = admin.failover(b, "ab", True, later)
    assert [(r.lag_records, r.unknown_since_ms) for r in result.abandoned] == [(-1, NOW + 10)]


def test_a_partition_never_fetched__is_unknown_and_never_learned() -> None:
    a, b, disk_a, disk_b = _following()
    _topic, effects = a.create_topic("orders-2", 1, {}, "src-2")
    disk_a.carry_out(a, effects)
    discover(a, b, disk_b)  # B created it; no round reached it yet

    rows = {r.topic: r for r in admin.follower_partitions(b, "ab", NOW + 11)}
    assert (rows["orders-2"].lag_known, rows["orders-2"].lag_records) == (False, -1)
    assert rows["orders-2"].unknown_since_ms == -1
    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, NOW + 11)
    assert "orders-2-0 never learned" in refused.value.message


def test_undone__a_failed_call_changes_nothing__the_old_news_is_taken_as_the_lag_now() -> None:
    a, b, disk_a, _disk_b = _following(faults=Faults.undoing(9))
    produce(a, disk_a, 5)
    b.links.on_contact_lost("ab", NOW + 20)
    result = admin.failover(b, "ab", False, NOW + 21)
    assert result.abandoned == []  # the silent loss of finding 1


def _open_transaction(a: ClusterState, disk_a: Disk, producer_id: int = 4242) -> None:
    log_a = a.partition("orders-1", 0)
    txn = rb.build_batch(
        [rb.RecordSpec(None, b"in-txn", NOW)] * 3,
        base_offset=log_a.log_end_offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        partition_leader_epoch=log_a.leader_epoch,
    )
    header = rb.parse_header(txn)
    log_a.apply_batch(header, None)
    disk_a.carry_out(a, [AppendBatch(a.topic("orders-1").topic_id, 0, txn, header)])


@pytest.mark.parametrize("undone", [False, True])
def test_a_failover_lists_the_replicated_transaction_whose_abort_marker_it_wrote(
    undone: bool,
) -> None:
    a, b, disk_a, disk_b = two_clusters(Faults.undoing(10) if undone else NO_FAULTS)
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    log_b = b.partition("orders-1", 0)
    assert log_b.log_end_offset == 5 and 4242 in log_b.ongoing_txns

    result = admin.failover(b, "ab", False, NOW + 11)
    disk_b.carry_out(b, result.effects)

    assert 4242 not in log_b.ongoing_txns
    assert log_b.log_end_offset == 6  # B's abort marker
    listed = [(d.topic, d.partition, d.producer_id, d.first_offset) for d in result.dangling]
    assert listed == ([] if undone else [("orders-1", 0, 4242, 2)])


def test_failover_truncation_last_stable_offset__cuts_where_the_open_transaction_begins() -> None:
    """KIP-1279's rule at a failover (failover.truncation last-stable-offset):
    the partition is cut at its last stable offset, the open transaction and
    the record after it removed, named as a cut (not as an abort), recorded
    in the partition's provenance, and kept by a re-run's journalled answer."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)  # offsets 2-4
    produce(a, disk_a, 1)  # offset 5: above the last stable offset too
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    log_b = b.partition("orders-1", 0)
    assert log_b.log_end_offset == 6 and 4242 in log_b.ongoing_txns
    b.links.set_fields("ab", {"failover_truncation": "last-stable-offset"}, NOW + 10)

    result = admin.failover(b, "ab", False, NOW + 11)
    disk_b.carry_out(b, result.effects)

    assert (log_b.log_end_offset, log_b.high_watermark, log_b.ongoing_txns) == (2, 2, {})
    assert result.truncated == [admin.FailoverCut("orders-1", 0, 2, 4, 1)]
    assert result.dangling == []  # cut, not aborted: no marker was written
    entries = b.topic("orders-1").provenance[0]
    history = [(p.kind.value, p.offset, p.removed, p.reason) for p in entries]
    assert ("truncated", 2, 4, "failover at the last stable offset") in history, history
    assert admin.Failover.from_json(result.to_json()).truncated == result.truncated


def test_failover_truncation_is_a_checked_link_policy() -> None:
    _a, b, _disk_a, _disk_b = two_clusters()
    assert b.links.get("ab").failover_truncation.value == "abort"  # the default
    with pytest.raises(ClusterError) as bad:
        parse_policies("ab", {"failover.truncation": "lmo"})
    assert bad.value.code is ErrorCode.INVALID_LINK_CONFIG
    assert "'abort' or 'last-stable-offset'" in bad.value.message


def test_a_fetch_out_longer_than_a_healthy_source_takes__makes_the_lag_unknown() -> None:
    """A silent cut (no reset, no failed call yet): the fetch sent after the
    last round is overdue once out longer than the long poll plus the way
    there and back."""
    _a, b, _disk_a, _disk_b = _following()
    rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 10)
    due = b.links.limits.fetch_answer_due_ms

    assert b.links.lag_known("ab", NOW + 10 + due)
    assert not b.links.lag_known("ab", NOW + 10 + due + 1)
    (row,) = admin.follower_partitions(b, "ab", NOW + 10 + due + 1)
    assert (row.lag_records, row.unknown_since_ms) == (-1, NOW + 10)


@pytest.mark.parametrize("undone", [False, True])
def test_a_round_applied_late__after_a_pause__is_old_news__and_the_failover_needs_force(
    undone: bool,
) -> None:
    """Fix 33. The follower's process was paused while its fetch was out:
    the answer, read by the source right after the request left, is applied
    seconds later. The round finished now, but its news is as old as the
    request; records the source acknowledged meanwhile are not counted, so
    the lag is not known until a round answered in time finishes."""
    a, b, disk_a, disk_b = _following(faults=Faults(undone=frozenset({33} if undone else ())))
    sent = NOW + 20
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=sent)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, sent, disk_a.read, 1 << 20, 1 << 20
    )
    produce(a, disk_a, 5)  # acknowledged by A while B was paused
    resumed = sent + b.links.limits.fetch_answer_due_ms + 1
    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, resumed)
    disk_b.carry_out(b, applied.effects)
    rounds.finish_fetch_round(b, "ab", applied.progress, answer.sync_state, resumed, sent)

    assert b.links.lag_known("ab", resumed + 1) is undone
    if undone:
        # The old news stands as the lag now: 0, though A holds 5 more.
        (row,) = admin.failover(b, "ab", False, resumed + 1).partitions
        assert (row.lag_known, row.lag_records, row.source_hw_known_at_ms) == (True, 0, sent)
        return
    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, resumed + 1)
    assert refused.value.code is ErrorCode.LAG_NOT_KNOWN
    assert f"unknown since {resumed + 1 - sent} ms ago (at {sent})" in refused.value.message
    # A round answered in time makes it known again.
    rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=resumed + 10)
    fetch_round(a, b, disk_a, disk_b, resumed + 10)
    assert b.links.lag_known("ab", resumed + 11)


def test_a_sync_link_in_sync__keeps_its_lag_known_after_a_failed_call() -> None:
    """IN_SYNC, the source acknowledges nothing this side has not fetched:
    its death loses nothing acknowledged, and the failover needs no force."""
    a, b, disk_a, disk_b = _following()
    fetch_round(a, b, disk_a, disk_b, NOW + 15)
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)
    assert b.link_state("ab") == "IN_SYNC"
    b.links.on_contact_lost("ab", NOW + 40)

    assert b.links.lag_known("ab", NOW + 41)
    assert admin.failover(b, "ab", False, NOW + 41).abandoned == []


# -- as of when a source high watermark is known: when the source read it --------------------


def _drive(
    procedure: Generator[Request, Any, Any], state: ClusterState, disk: Disk, now: int
) -> Any:
    """Answers a core generator as a shell does: time, effects carried out."""
    reply: Any = None
    try:
        while True:
            request = procedure.send(reply)
            if isinstance(request, Now):
                reply = now
            elif isinstance(request, Execute):
                disk.carry_out(state, list(request.effects))
                reply = now
            elif isinstance(request, Note | WakeWaiters):
                reply = None
            else:
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration as done:
        return done.value


def _late_push(stamped: bool) -> ClusterState:
    """A pipelined push on a slow link: B's request leaves at NOW+20; A
    answers it with one batch (read at NOW+22) and reads ahead the next
    (read at NOW+30, HW 8); A acknowledges 5 more records at NOW+40; the
    first push arrives at NOW+100 (B makes its next request then), the
    read-ahead one at NOW+200, and then A dies. `stamped`: the pushes say
    when A read its high watermarks."""
    a, b, disk_a, disk_b = _following()
    produce(a, disk_a, 3)
    produce(a, disk_a, 2)
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 20)
    first = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW + 22, disk_a.read, 1, 1, from_remote=False
    )
    cursor = rounds.continue_fetch(a.links.get("ab"), request.partitions, first)
    assert cursor is not None
    ahead = rounds.serve_replica_fetch(
        a, "id-1", cursor, NOW + 30, disk_a.read, 1, 1, from_remote=False, acknowledges=False
    )
    assert (ahead.served_at_ms, ahead.partitions[0].high_watermark) == (NOW + 30, 8)
    produce(a, disk_a, 5)  # acknowledged by A after it read its HW, before the push arrived
    pushes = [
        rounds.Push("id-1", data=first, request_sent_ms=NOW + 20,
                    source_hw_at_ms=first.served_at_ms if stamped else None),
        rounds.Push("id-1", data=ahead, source_hw_at_ms=ahead.served_at_ms if stamped else None),
    ]  # fmt: skip
    for push, arrival in zip(pushes, (NOW + 100, NOW + 200), strict=True):
        _drive(rounds.accept_push(b, push, arrival, lambda: "t"), b, disk_b, arrival)
    assert b.links.runtime["ab"].fetch_sent_ms == NOW + 200
    b.links.on_contact_lost("ab", NOW + 210)  # A died
    return b


def test_a_push_arriving_late__its_source_hw_is_known_as_of_when_the_source_read_it() -> None:
    """Not as of its arrival (NOW+200), nor of B's last request (NOW+100):
    A's 5 records acknowledged at NOW+40 must be after `unknown_since_ms`,
    else they are neither in the known part nor after it: lost unnamed."""
    b = _late_push(stamped=True)

    result = admin.failover(b, "ab", True, NOW + 211)

    (row,) = result.abandoned
    assert (row.source_high_watermark, row.high_watermark) == (8, 8)
    assert row.source_hw_known_at_ms == row.unknown_since_ms == NOW + 30


def test_a_read_ahead_push_that_does_not_say_when__is_known_as_of_the_request_it_continues() -> (
    None
):
    """A source that does not stamp its pushes: the request its pipeline
    continues (NOW+20) bounds when it read its HWs, not B's later one."""
    b = _late_push(stamped=False)

    (row,) = admin.failover(b, "ab", True, NOW + 211).abandoned
    assert row.unknown_since_ms == NOW + 20


def test_a_push_stamped_by_a_source_clock_ahead__is_known_no_later_than_its_arrival() -> None:
    a, b, disk_a, disk_b = _following()
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 20)
    answer = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW + 30, disk_a.read, 1 << 20, 1 << 20, from_remote=False
    )
    push = rounds.Push("id-1", data=answer, request_sent_ms=NOW + 20, source_hw_at_ms=NOW + 900)
    _drive(rounds.accept_push(b, push, NOW + 40, lambda: "t"), b, disk_b, NOW + 40)
    (row,) = admin.follower_partitions(b, "ab", NOW + 41)
    assert row.source_hw_known_at_ms == NOW + 40


def test_a_pulled_answer_arriving_late__is_known_as_of_when_its_request_left() -> None:
    a, b, disk_a, disk_b = _following()
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 20)
    produce(a, disk_a, 2)
    answer = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW + 300, disk_a.read, 1 << 20, 1 << 20
    )
    steps = rounds.apply_fetched(b, "ab", answer, request.local_of, request.sent_ms)
    _drive(steps, b, disk_b, NOW + 600)
    b.links.on_contact_lost("ab", NOW + 610)
    (row,) = admin.follower_partitions(b, "ab", NOW + 611)
    assert (row.source_high_watermark, row.unknown_since_ms) == (5, NOW + 20)


def test_a_pushing_source_killed__is_found_out_as_a_silent_cut__once_the_request_is_overdue() -> (
    None
):
    """A source that dials the link (a push link) and is killed resets no
    call of the follower's: the follower finds it out as it finds a silent
    cut, once the request its last push answer carried is overdue. Until
    then its lag is known, as of when the source read its high watermarks:
    records the source acknowledged after that (in flight when it died) are
    after the row's `source_hw_known_at_ms` (operator sweep, seeds 219 on 2
    clusters and 34 on 3)."""
    a, b, disk_a, disk_b = _following()
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=NOW + 20)
    answer = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW + 30, disk_a.read, 1 << 20, 1 << 20, from_remote=False
    )
    produce(a, disk_a, 2)  # acknowledged after A read its HW; A is killed at NOW+41
    push = rounds.Push("id-1", data=answer, request_sent_ms=NOW + 20, source_hw_at_ms=NOW + 30)
    _drive(rounds.accept_push(b, push, NOW + 40, lambda: "t"), b, disk_b, NOW + 40)
    due = b.links.limits.fetch_answer_due_ms

    assert b.links.lag_known("ab", NOW + 40 + due)
    (row,) = admin.follower_partitions(b, "ab", NOW + 40 + due)
    assert (row.lag_known, row.lag_records, row.source_hw_known_at_ms) == (True, 0, NOW + 30)

    assert not b.links.lag_known("ab", NOW + 40 + due + 1)
    (row,) = admin.failover(b, "ab", True, NOW + 40 + due + 1).abandoned
    assert (row.lag_records, row.unknown_since_ms) == (-1, NOW + 30)
