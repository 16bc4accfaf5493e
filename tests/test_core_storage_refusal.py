"""A follower whose storage refuses the records a round fetched: the core
learns it (the shell answers `NotStored`), and what the cluster reports comes
from what it stored, not from what the round heard: the partition's row says
"disk refused writes", the link is not FOLLOWING, a failover without force
names the reason, the metric counts it; a later round that stores clears it.
Two clusters in memory: A leads orders- on link ab, B follows."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from test_core_link_rounds import NOW, Disk, discover, produce, two_clusters

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import undo
from linkd.core.cluster import ClusterState
from linkd.core.effects import AppendBatch
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_metrics import link_samples
from linkd.core.requests import Execute, Note, NotStored, Now, Request, WakeWaiters

REFUSED = ClusterError(ErrorCode.STORAGE_ERROR, "orders-1-0", "the write was not stored (EFBIG)")


def drive(
    procedure: Generator[Request, Any, Any], state: ClusterState, disk: Disk, now: int,
    full: bool = False,
) -> tuple[Any, list[str]]:
    """Answers as a shell does; a `full` disk refuses every append of a
    refusable Execute, the model cut back to what is stored (as the daemon's
    `_appends_not_stored` does). Returns (the result, the notes)."""
    reply: Any = None
    notes: list[str] = []
    try:
        while True:
            request = procedure.send(reply)
            if isinstance(request, Now):
                reply = now
            elif isinstance(request, Execute) and full and request.refusable:
                names = {t.topic_id: n for n, t in state.topics.items()}
                for e in request.effects:
                    if isinstance(e, AppendBatch):
                        stored = max([b[1] for b in disk.batches.get((e.topic_id, e.partition), [])]
                                     or [0])  # fmt: skip
                        state.forget_unstored(names[e.topic_id], e.partition, stored)
                reply = NotStored(now, REFUSED)
            elif isinstance(request, Execute):
                disk.carry_out(state, list(request.effects))
                reply = now
            elif isinstance(request, Note):
                notes.append(request.message)
                reply = None
            elif isinstance(request, WakeWaiters):
                reply = None
            else:
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration as stop:
        return stop.value, notes


def round_(a: ClusterState, b: ClusterState, disk_a: Disk, disk_b: Disk, now: int,
           full: bool = False) -> tuple[Any, list[str]]:  # fmt: skip
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=now)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, now, disk_a.read, 1 << 20, 1 << 20
    )
    return drive(rounds.apply_fetched(b, "ab", answer, request.local_of, now), b, disk_b, now,
                 full)  # fmt: skip


def following_then_full() -> tuple[ClusterState, ClusterState, Disk, Disk, bool, list[str]]:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    b.links.on_contact("ab", NOW)
    produce(a, disk_a, 3)
    round_(a, b, disk_a, disk_b, NOW + 10)
    assert b.links.state_name("ab") == "FOLLOWING"
    produce(a, disk_a, 5)
    stored, notes = round_(a, b, disk_a, disk_b, NOW + 20, full=True)
    return a, b, disk_a, disk_b, stored, notes


def test_a_refused_round__holds_the_link_back__and_the_row_says_disk_refused_writes() -> None:
    _a, b, _da, _db, stored, notes = following_then_full()

    assert stored is False
    assert b.partition("orders-1", 0).log_end_offset == 3
    assert b.links.state_name("ab") == "CATCHING_UP"
    summary = admin.link_summary(b, "ab", NOW + 20)
    (row,) = [r for r in summary.partitions if r.role == "follower"]
    assert (row.log_end_offset, row.source_high_watermark, row.lag_records) == (3, 8, 5)
    assert "disk refused writes" in row.problem and "from offset 3" in row.problem
    assert any("disk refused writes" in n for n in notes)
    (sample,) = link_samples(b, NOW + 20)
    assert sample.storage_refused == 1


def test_a_failover_without_force__is_refused_naming_the_disk() -> None:
    _a, b, _da, _db, _stored, _notes = following_then_full()

    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, NOW + 20)

    assert refused.value.code is ErrorCode.LINK_NOT_FOLLOWING
    assert "disk refused writes of orders-1-0" in refused.value.message


def test_a_round_that_stores__clears_the_refusal__and_the_link_follows_again() -> None:
    a, b, disk_a, disk_b, _stored, _notes = following_then_full()

    stored, _ = round_(a, b, disk_a, disk_b, NOW + 30)

    assert stored is True
    assert b.partition("orders-1", 0).log_end_offset == 8
    assert b.links.state_name("ab") == "FOLLOWING"
    (sample,) = link_samples(b, NOW + 30)
    assert sample.storage_refused == 0


def test_with_the_fix_undone__the_round_reports_what_it_heard() -> None:
    undo.set_undone(frozenset({13}))
    try:
        _a, b, _da, _db, _stored, _notes = following_then_full()
    finally:
        undo.set_undone(frozenset())

    summary = admin.link_summary(b, "ab", NOW + 20)
    (row,) = [r for r in summary.partitions if r.role == "follower"]
    assert b.links.state_name("ab") == "FOLLOWING"
    # The row's log end is the log's own (a follower's position is what it
    # stored, since the readable-position change); the lag is what was heard.
    assert (row.log_end_offset, row.source_high_watermark, row.lag_records) == (3, 8, 0)
    assert row.problem == ""
    assert b.partition("orders-1", 0).log_end_offset == 3
