"""Replicated groups during a catch-up and at a failover (issue 35, N5), on
two clusters held in memory: A leads orders- and the groups app- on link
ab, B follows both and catches up one batch a round while a group commits
on A at the end of what it read.

Before the fix a commit beyond B's high watermark was held back whole: the
group did not exist on B for the whole catch-up, a failover said nothing
of it, and a consumer on B restarted at 0, re-reading what it had
processed."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

from test_core_link_rounds import LIMITS, NOW, Disk, fetch_round, produce

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import procedures
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import Leader, Mapping, MappingType
from linkd.core.requests import (
    Checkpoint,
    Execute,
    LinkChanged,
    Note,
    Now,
    Request,
    Tell,
    WakeWaiters,
)

BATCH = 5  # records a batch; one batch a round (the budget below)


def drive(procedure: Generator[Request, Any, Any], state: ClusterState, disk: Disk) -> Any:
    """Answers a procedure as a shell does when the remote is gone."""
    reply: Any = None
    try:
        while True:
            request = procedure.send(reply)
            if isinstance(request, Now):
                reply = NOW
            elif isinstance(request, Execute):
                disk.carry_out(state, list(request.effects))
                reply = NOW
            elif isinstance(request, Note | WakeWaiters | Tell | LinkChanged | Checkpoint):
                reply = None
            else:
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration as done:
        return done.value


def setup(faults: Faults = NO_FAULTS) -> tuple[ClusterState, ClusterState, Disk, Disk]:
    a, b = ClusterState("A", faults=faults), ClusterState("B", faults=faults)
    a.links.limits = LIMITS
    b.links.limits = LIMITS
    a.namespaces.create(1, "orders-", False)
    a.namespaces.create(2, "app-", False)
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    a.links.store(config, NOW)
    for kind, prefix in ((MappingType.TOPIC, "orders-"), (MappingType.GROUP, "app-")):
        mapping = Mapping(kind, prefix, prefix, Leader.LOCAL, True, (0, 0, ""))
        admin.put_mapping(a, "ab", admin.versioned(a, mapping, NOW), NOW)
    b.links.accept_mirror(a.links.get("ab"), NOW)
    admin.reconcile_attachments(b, "ab", NOW)
    disk_a, disk_b = Disk(), Disk()
    _topic, effects = a.create_topic("orders-1", 1, {}, "src-1")
    disk_a.carry_out(a, effects)
    ids = iter(f"fol-{i}" for i in range(100))
    namespaces = [
        rounds.source_topics(a, a.links.get("ab"), m.remote_prefix)
        for m in rep.follower_mappings(b.links.get("ab"), "topic")
    ]
    plan = rounds.plan_topics(b, b.links.get("ab"), namespaces, lambda: next(ids))
    disk_b.carry_out(b, plan.effects)
    return a, b, disk_a, disk_b


def commit(a: ClusterState, disk_a: Disk, offset: int) -> None:
    disk_a.carry_out(
        a, a.commit_group_offsets("app-1", -1, "", {("orders-1", 0): (offset, "", -1)}, NOW)
    )


def hear(a: ClusterState, b: ClusterState, disk_b: Disk, ids: Iterator[str]) -> None:
    """The group offsets reach B (a discovery, or a push of the pipeline)."""
    offsets = rounds.source_group_offsets(a, "app-")
    effects, _held = msync.apply_replicated_offsets(b, "ab", offsets, NOW, next(ids))
    disk_b.carry_out(b, effects)


def committed_on_b(b: ClusterState) -> int | None:
    c = b.groups.committed("app-1", [("orders-1", 0)]).get(("orders-1", 0))
    return None if c is None else c.offset


def catch_up_with_a_group(undone: bool) -> tuple[ClusterState, Disk, int]:
    """A holds 40 records in 8 batches; B copies 2 batches while the group
    reads A to its end and commits 40; returns B, its disk and its HW."""
    a, b, disk_a, disk_b = setup(Faults.undoing(21) if undone else NO_FAULTS)
    for _ in range(8):
        produce(a, disk_a, BATCH)
    ids = iter(f"off-{i}" for i in range(100))
    budget = len(disk_a.read("src-1", 0, 0, BATCH, 1 << 20)[0])
    for i in range(3):
        fetch_round(a, b, disk_a, disk_b, NOW + i, budget)
        commit(a, disk_a, (i + 1) * 10)
        hear(a, b, disk_b, ids)
    return b, disk_b, b.partition("orders-1", 0).high_watermark


def test_during_a_catch_up_the_group_on_the_follower_stands_at_its_high_watermark() -> None:
    b, _disk_b, hw = catch_up_with_a_group(undone=False)
    assert 0 < hw < 30
    assert committed_on_b(b) == hw  # never past the data, never absent
    runtime = b.links.runtime["ab"]
    assert runtime.heard_offsets[("app-1", "orders-1", 0)] == (30, NOW)


def test_a_forced_failover_reports_each_group_where_it_resumes_and_the_last_commit_heard_of(
) -> None:  # fmt: skip
    b, disk_b, _hw = catch_up_with_a_group(undone=False)
    end = b.partition("orders-1", 0).log_end_offset
    result = drive(procedures.failover(b, "ab", True, NOW), b, disk_b)
    (row,) = result.groups
    assert (row.group, row.topic, row.partition) == ("app-1", "orders-1", 0)
    # The group resumes at the last commit heard of, or at the end of B's
    # data if nearer; the answer says how far behind that is.
    assert row.resume_offset == min(30, end) == committed_on_b(b)
    assert row.heard_offset == 30 and row.heard_at_ms == NOW
    assert row.behind == 30 - row.resume_offset


def test_undone__the_group_is_absent_on_the_follower_and_the_failover_says_nothing() -> None:
    b, disk_b, _hw = catch_up_with_a_group(undone=True)
    assert committed_on_b(b) is None
    result = drive(procedures.failover(b, "ab", True, NOW), b, disk_b)
    assert result.groups == [] and committed_on_b(b) is None
