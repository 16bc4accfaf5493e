"""A follower whose storage refuses the records a round fetched, or refuses to
create a follower topic a discovery found: the core learns it (the shell
answers `NotStored`), and what the cluster reports comes from what it
stored, not from what the round heard: the partition's row says "disk
refused writes", the link is not FOLLOWING, a failover without force names
the reason, the metric counts it; a later round (or discovery) that stores
clears it.
Two clusters in memory: A leads orders- on link ab, B follows."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
from test_core_link_rounds import NOW, Disk, discover, produce, two_clusters

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.effects import AppendBatch
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
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


def following_then_full(
    faults: Faults = NO_FAULTS,
) -> tuple[ClusterState, ClusterState, Disk, Disk, bool, list[str]]:
    a, b, disk_a, disk_b = two_clusters(faults)
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
    _a, b, _da, _db, _stored, _notes = following_then_full(Faults.undoing(13))

    summary = admin.link_summary(b, "ab", NOW + 20)
    (row,) = [r for r in summary.partitions if r.role == "follower"]
    assert b.links.state_name("ab") == "FOLLOWING"
    # The row's log end is the log's own (a follower's position is what it
    # stored, since the readable-position change); the lag is what was heard.
    assert (row.log_end_offset, row.source_high_watermark, row.lag_records) == (3, 8, 0)
    assert row.problem == ""
    assert b.partition("orders-1", 0).log_end_offset == 3


# -- a follower topic its storage refused to create ------------------------------------------


def discover_with(a: ClusterState, b: ClusterState, disk_b: Disk, now: int,
                  full: bool = False) -> tuple[Any, list[str]]:  # fmt: skip
    """One discovery as both shells run it: the source's topics listed, the
    plan carried out (`carry_out_topics`); a `full` disk refuses to open the
    logs of every topic it creates."""
    ids = iter(f"fol-{now}-{i}" for i in range(100))
    namespaces = [
        rounds.source_topics(a, a.links.get("ab"), m.remote_prefix)
        for m in rep.follower_mappings(b.links.get("ab"), "topic")
    ]
    plan = rounds.plan_topics(b, b.links.get("ab"), namespaces, lambda: next(ids), now)
    return drive(rounds.carry_out_topics(b, "ab", plan), b, disk_b, now, full)


def empty_round(b: ClusterState, now: int) -> None:
    """A pull lane's round with no partition to fetch (the daemon's and the
    simulator's `_pull`): nothing it follows exists here."""
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20, sent_ms=now)
    assert request.partitions == ()
    b.links.on_fetch_round("ab", now)


def uncreated() -> tuple[ClusterState, ClusterState, Disk, Disk, list[str]]:
    """B follows A's orders- while B's disk is full: orders-1 (2 partitions)
    cannot be created on B."""
    a, b, disk_a, disk_b = two_clusters()
    _t, effects = a.create_topic("orders-2", 2, {}, "src-2")
    disk_a.carry_out(a, effects)
    b.links.on_contact("ab", NOW)
    made, notes = discover_with(a, b, disk_b, NOW, full=True)
    assert made is False
    empty_round(b, NOW + 5)
    return a, b, disk_a, disk_b, notes


def test_a_topic_its_storage_refused_to_create__holds_the_link_back__and_rows_name_it() -> None:
    _a, b, _da, _db, notes = uncreated()

    assert "orders-1" not in b.topics and "orders-2" not in b.topics
    assert b.links.state_name("ab") == "CATCHING_UP"
    summary = admin.link_summary(b, "ab", NOW + 5)
    rows = sorted((r.topic, r.partition) for r in summary.partitions if r.role == "follower")
    assert rows == [("orders-1", 0), ("orders-2", 0), ("orders-2", 1)]
    for r in summary.partitions:
        assert "disk refused writes" in r.problem and "create" in r.problem, r
        assert (r.lag_known, r.lag_records, r.unknown_since_ms) == (False, -1, -1)
    assert sum("disk refused writes" in n for n in notes) == 2
    (sample,) = link_samples(b, NOW + 5)
    assert sample.storage_refused == 3
    assert dict(sample.partition_states)["refused"] == 3
    assert sample.max_lag is None
    assert any("orders-2 (following, 2 partitions) is not created" in line
               for line in b.links.lagging_partitions("ab", NOW + 5))  # fmt: skip


def test_a_failover__is_refused_naming_the_topic__and_a_forced_one_abandons_it() -> None:
    _a, b, _da, _db, _notes = uncreated()

    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, NOW + 5)
    assert refused.value.code is ErrorCode.LINK_NOT_FOLLOWING
    assert "disk refused writes of orders-1 (not created), orders-2 (not created)" in (
        refused.value.message
    )

    forced = admin.failover(b, "ab", True, NOW + 5)
    abandoned = sorted((r.topic, r.partition) for r in forced.abandoned)
    assert abandoned == [("orders-1", 0), ("orders-2", 0), ("orders-2", 1)]


def test_a_later_discovery_that_creates_it__clears_it__and_the_link_follows() -> None:
    a, b, disk_a, disk_b, _notes = uncreated()
    produce(a, disk_a, 3)

    made, notes = discover_with(a, b, disk_b, NOW + 10)
    round_(a, b, disk_a, disk_b, NOW + 20)

    assert made is True and not any("disk refused" in n for n in notes)
    assert b.links.runtime["ab"].uncreated == {}
    assert b.partition("orders-1", 0).log_end_offset == 3
    assert b.links.state_name("ab") == "FOLLOWING"
    (sample,) = link_samples(b, NOW + 20)
    assert sample.storage_refused == 0


def test_a_refusal_told_again__is_noted_once__and_a_topic_the_source_deleted_is_forgotten() -> None:
    a, b, _da, disk_b, _notes = uncreated()
    _made, notes = discover_with(a, b, disk_b, NOW + 10, full=True)
    assert not any("disk refused" in n for n in notes)  # already told
    assert b.links.runtime["ab"].uncreated["orders-1"].since_ms == NOW

    a.delete_topic("orders-1")
    a.delete_topic("orders-2")
    discover_with(a, b, disk_b, NOW + 20, full=True)
    empty_round(b, NOW + 25)

    assert b.links.runtime["ab"].uncreated == {}
    assert b.links.state_name("ab") == "FOLLOWING"


# -- a SYNC link whose follower's storage refuses what a round fetched --------------------


def in_sync_then_full(
    faults: Faults = NO_FAULTS,
) -> tuple[ClusterState, ClusterState, Disk, Disk]:
    """A leads orders- on link ab in SYNC mode, both sides IN_SYNC; then A
    acknowledges 5 more records that B's next round fetches and its full
    disk refuses (B keeps the source's last verdict, IN_SYNC, in that
    answer)."""
    a, b, disk_a, disk_b = two_clusters(faults)
    discover(a, b, disk_b)
    b.links.on_contact("ab", NOW)
    produce(a, disk_a, 3)
    round_(a, b, disk_a, disk_b, NOW + 10)
    round_(a, b, disk_a, disk_b, NOW + 15)  # the leader sees the follower caught up
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    round_(a, b, disk_a, disk_b, NOW + 30)
    assert a.link_state("ab") == "IN_SYNC" and b.link_state("ab") == "IN_SYNC"
    produce(a, disk_a, 5)
    round_(a, b, disk_a, disk_b, NOW + 40)  # copies them, and they are acknowledged
    produce(a, disk_a, 5)
    stored, _notes = round_(a, b, disk_a, disk_b, NOW + 50, full=True)
    assert stored is False
    return a, b, disk_a, disk_b


def test_sync__a_refused_round__is_not_in_sync__and_a_failed_call_makes_the_lag_unknown() -> None:
    _a, b, _da, _db = in_sync_then_full()

    # Not caught up: the source drops it from sync once its lag time runs
    # out and acknowledges without it, which this side hears of only later.
    assert b.links.state_name("ab") == "SYNCING"
    b.links.on_contact_lost("ab", NOW + 60)  # the source died: its connection reset
    with pytest.raises(ClusterError) as refused:
        admin.failover(b, "ab", False, NOW + 70)
    assert refused.value.code is ErrorCode.LINK_NOT_FOLLOWING
    assert "SYNCING" in refused.value.message and "disk refused writes" in refused.value.message

    forced = admin.failover(b, "ab", True, NOW + 70)
    (row,) = forced.abandoned
    # Whatever the source acknowledged since its last answer is named.
    assert (row.topic, row.partition, row.lag_known) == ("orders-1", 0, False)
    assert row.unknown_since_ms == row.source_hw_known_at_ms > 0


def test_sync__with_the_fix_undone__the_refused_follower_stays_in_sync_and_lag_zero() -> None:
    _a, b, _da, _db = in_sync_then_full(Faults.undoing(31))

    assert b.links.state_name("ab") == "IN_SYNC"
    b.links.on_contact_lost("ab", NOW + 60)
    forced = admin.failover(b, "ab", True, NOW + 70)
    (row,) = forced.partitions
    assert row.lag_known and forced.abandoned == []
