"""Gaps a link cannot fill, told between two clusters held in memory: A leads
orders- on link ab, B follows. B copies, stops fetching (the link is cut),
A's retention or DeleteRecords moves its log start past B's position, and B
fetches again. The stories run the rounds both shells run
(`linkd.core.link_rounds`); the test plays the transport and the disk.
"""

from __future__ import annotations

import pytest
from test_core_link_rounds import NOW, Disk, discover, fetch_round, produce, two_clusters

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import GapPolicy
from linkd.core.provenance import Gap, ProvenanceItem, ProvenanceKind


def cut_link_and_delete(a: ClusterState, disk_a: Disk, cause: str) -> None:
    """While B is away: 3 batches of 5 more on A, then A's log start moves
    past 20 (of 25) by `cause`: retention drops whole segments (one batch a
    segment from 10 on: start 20); deleting records below 23 cuts inside the
    batch [20, 25)."""
    if cause == "retention":
        one_batch_a_segment = {"internal.segment.bytes": "1"}
        disk_a.carry_out(a, a.alter_configs("orders-1", one_batch_a_segment, [])[1])
    for _ in range(3):
        produce(a, disk_a, 5)
    if cause == "retention":
        # retention.bytes of one segment: every segment but the newest goes,
        # at the next retention check.
        log = a.partition("orders-1", 0)
        keep_one = {"internal.segment.bytes": "1",
                    "retention.bytes": str(log.segments[-1].size_bytes)}
        disk_a.carry_out(a, a.alter_configs("orders-1", keep_one, [])[1])
        a.retention_check_interval_ms = 1_000
        disk_a.carry_out(a, a.tick(NOW))
        disk_a.carry_out(a, a.tick(NOW + 1_000))
    else:
        _low, effects = a.delete_records("orders-1", 0, 23)
        disk_a.carry_out(a, effects)


def story(
    cause: str = "retention", policy: GapPolicy = GapPolicy.CONTINUE
) -> tuple[ClusterState, ClusterState, Disk, Disk]:
    a, b, disk_a, disk_b = two_clusters()
    if policy is GapPolicy.STOP:
        a.links.set_field("ab", "gap_policy", policy.value, NOW)
        b.links.accept_mirror(a.links.get("ab"), NOW)
    discover(a, b, disk_b)
    produce(a, disk_a, 5)
    produce(a, disk_a, 5)
    fetch_round(a, b, disk_a, disk_b, NOW)
    assert b.partition("orders-1", 0).log_end_offset == 10
    cut_link_and_delete(a, disk_a, cause)
    assert a.partition("orders-1", 0).log_start_offset == (20 if cause == "retention" else 23)
    return a, b, disk_a, disk_b


@pytest.mark.parametrize("cause", ["retention", "deleted records"])
def test_continue__the_gap_is_recorded_with_its_cause__and_the_log_starts_again_past_it(
    cause: str,
) -> None:
    a, b, disk_a, disk_b = story(cause)
    later = NOW + 20_000
    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, later)

    # Either way the gap ends where the first batch A still holds starts:
    # that batch comes whole (B holds 20-22, which A deleted after the cut).
    end = 20
    why = f"source log start moved past the follower's position: {cause}"
    assert applied.gaps == [Gap("orders-1", 0, 10, end, later, why)]
    log = b.partition("orders-1", 0)
    assert log.log_start_offset == end and log.log_end_offset == 25
    # No offset of the gap is held or reused: B's batches are A's, from the gap's end.
    assert [h.base_offset for h in log.batches] == [
        h.base_offset for h in a.partition("orders-1", 0).batches if h.base_offset >= end
    ]
    entries = b.topics["orders-1"].provenance[0]
    gap = [e for e in entries if e.kind is ProvenanceKind.GAP]
    assert gap == [ProvenanceItem.gap(10, end, b.links.get("ab").link_id, why, later)]
    assert ProvenanceItem.from_entry(gap[0].to_entry()) == gap[0]
    assert rep.gaps_of(b, b.links.get("ab").link_id) == applied.gaps
    # Read from the topics whose provenance records one: kept over a restart.
    again_b = ClusterState("B")
    again_b.restore(b.snapshot())
    assert rep.gaps_of(again_b, b.links.get("ab").link_id) == applied.gaps
    # Nothing more is missing: the next round finds no gap, and the link follows.
    _answer, again, _moved = fetch_round(a, b, disk_a, disk_b, later + 1)
    assert again.gaps == [] and again.stopped == []
    assert admin.link_summary(b, "ab", later + 1).state == "FOLLOWING"


def test_the_warning_names_link_partition_and_range() -> None:
    a, b, disk_a, disk_b = story()
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, NOW, disk_a.read, 1 << 20, 1 << 20
    )
    steps = rounds.apply_fetched(b, "ab", answer, request.local_of)
    notes = []
    reply = None
    try:
        while True:
            step = steps.send(reply)
            reply = NOW
            if isinstance(step, rounds.Execute):
                disk_b.carry_out(b, list(step.effects))
            if isinstance(step, rounds.Note):
                notes.append((step.level, step.message))
    except StopIteration:
        pass
    assert (
        "warning",
        "link 'ab': orders-1-0 has a gap: offsets [10, 20) (10 records) were never copied: "
        "source log start moved past the follower's position: retention; the follower goes "
        "on from 20",
    ) in notes


def test_stop__the_partition_stops_and_says_why__until_resumed() -> None:
    a, b, disk_a, disk_b = story(policy=GapPolicy.STOP)
    assert b.links.get("ab").gap_policy is GapPolicy.STOP
    later = NOW + 20_000
    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, later)
    assert applied.gaps == [] and len(applied.stopped) == 1
    log = b.partition("orders-1", 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 10)  # untouched
    assert not [e for e in b.topics["orders-1"].provenance[0] if e.kind is ProvenanceKind.GAP]
    summary = admin.link_summary(b, "ab", later)
    assert summary.state == "CATCHING_UP"
    [row] = [r for r in summary.partitions if r.problem]
    assert "stopped at a gap (gap.policy stop): offsets [10, 20)" in row.problem
    assert "resume-partition ab orders-1 0" in row.problem
    # Stopped: later rounds leave it out (no busy loop re-reading the source).
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    assert request.partitions == ()
    fetch_round(a, b, disk_a, disk_b, later + 1)
    assert admin.link_summary(b, "ab", later + 1).state == "CATCHING_UP"

    gap, effects = rounds.resume_partition(b, "ab", "orders-1", 0)
    disk_b.carry_out(b, effects)
    assert (gap.from_offset, gap.to_offset) == (10, 20)
    assert b.partition("orders-1", 0).log_start_offset == 20
    fetch_round(a, b, disk_a, disk_b, later + 2)
    assert b.partition("orders-1", 0).log_end_offset == 25
    assert admin.link_summary(b, "ab", later + 2).state == "FOLLOWING"
    assert [g.to_offset for g in rep.gaps_of(b, b.links.get("ab").link_id)] == [20]


def test_resume__of_a_partition_not_stopped__is_refused_and_changes_nothing() -> None:
    _a, b, _disk_a, _disk_b = story()
    with pytest.raises(ClusterError) as refused:
        rounds.resume_partition(b, "ab", "orders-1", 0)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    assert "orders-1-0 is not stopped at a gap" in refused.value.message


def test_gap_policy__is_a_shared_field__that_converges_to_the_newest() -> None:
    a, b, _disk_a, _disk_b = two_clusters()
    assert a.links.get("ab").gap_policy is GapPolicy.CONTINUE
    b.links.set_field("ab", "gap_policy", "stop", NOW + 5)
    a.links.accept_mirror(b.links.get("ab"), NOW + 6)
    assert a.links.get("ab").gap_policy is GapPolicy.STOP


def test_a_log_that_never_held_an_offset__starts_at_the_source_log_start_without_a_gap() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    cut_link_and_delete(a, disk_a, "retention")
    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20_000)
    assert applied.gaps == [] and b.partition("orders-1", 0).log_start_offset == 10
