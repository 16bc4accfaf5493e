"""Transactions no coordinator will finish are settled by the cluster that
holds them (spec invariant 11): a link deleted while a recovery of it is
journalled between its cut and its follow-remote step, and a follower
partition held uncut over its own writes.

A leads the namespace orders- on link ab, B follows it (the fixtures of
test_core_link_rounds); the test plays the disk.
"""

from __future__ import annotations

import pytest

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.plans import RECOVER, Plan, PlanNamespace, PlanStep
from linkd.core.procedures import RECOVER_STEPS
from tests.test_core_failover_truth import _open_transaction
from tests.test_core_link_rounds import NOW, Disk, discover, fetch_round, produce, two_clusters


def _cut_recovery(link_id: str) -> Plan:
    """A confirmed recovery of link ab that cut orders- and crashed before
    its topic mapping followed the remote."""
    return Plan(
        RECOVER, "ab", link_id, "B",
        (PlanNamespace("topic", "orders-", "orders-"), PlanNamespace("group", "app-", "app-")),
        0, NOW,
        (
            PlanStep(RECOVER_STEPS[0], True, "planned", 0),
            PlanStep(RECOVER_STEPS[1], True, "cut", 0),
        ),
    )  # fmt: skip


@pytest.mark.parametrize("undone", [False, True])
def test_deleting_a_link_whose_recovery_cut_a_marker__aborts_the_transaction_left_open(
    undone: bool,
) -> None:
    """The cut removed a transaction's marker (the remote was to supply the
    outcome once followed); with the link gone nothing will: the deletion
    writes the abort marker."""
    a, _b, disk_a, _disk_b = two_clusters(Faults.undoing(29) if undone else NO_FAULTS)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)  # producer 4242, owned by no coordinator of A
    a.plans.put(_cut_recovery(a.links.get("ab").link_id))
    log = a.partition("orders-1", 0)
    assert 4242 in log.ongoing_txns

    effects, settled = admin.delete_link_settling(a, "ab", True, NOW + 10)
    disk_a.carry_out(a, effects)

    assert a.plans.get("ab") is None
    if undone:
        assert log.ongoing_txns == {4242: 2}  # open for ever: invariant 11
        assert settled == []
    else:
        assert 4242 not in log.ongoing_txns
        assert log.log_end_offset == 6  # A's abort marker after the 3 records
        assert [(d.topic, d.partition, d.producer_id, d.first_offset) for d in settled] == [
            ("orders-1", 0, 4242, 2)
        ]
        assert "orders-1-0 producer 4242 from offset 2" in admin.settled_note("ab", settled)



# -- a follower partition held uncut over its own writes -----------------------------------------


def _two_open_transactions_copied() -> tuple[ClusterState, Disk]:
    """B follows A and copied two open transactions: producer 4242 from
    offset 2, producer 4343 from offset 5."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    _open_transaction(a, disk_a, producer_id=4343)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.partition("orders-1", 0).ongoing_txns == {4242: 2, 4343: 5}
    return b, disk_b


def test_a_held_partition__aborts_the_transactions_above_the_cut_its_source_asked_for() -> None:
    """The source said to cut at 5 and B holds its own writes there: the
    transaction from 5 on is in no log the source holds, so no outcome will
    come; B aborts it, lets its marker count, and stays held at its new log
    end. The one from 2 began where the logs agree: the source may still end
    it once a recover lets B follow, so it is left alone."""
    b, disk_b = _two_open_transactions_copied()
    log = b.partition("orders-1", 0)
    runtime = b.links.runtime["ab"]
    runtime.own_writes_held[("orders-1", 0)] = log.log_end_offset

    dangling, effects = rounds.settle_held(b, "ab", [("orders-1", 0, 5)], NOW + 20)
    disk_b.carry_out(b, effects)

    assert [(d.producer_id, d.first_offset) for d in dangling] == [(4343, 5)]
    assert log.ongoing_txns == {4242: 2}
    assert log.log_end_offset == 9  # B's abort marker after the 8 records
    assert runtime.own_writes_held[("orders-1", 0)] == 9
    assert log.high_watermark == 9  # its own marker counts once durable


def test_a_held_partition_with_nothing_open_above_the_cut__writes_nothing() -> None:
    b, _disk_b = _two_open_transactions_copied()
    dangling, effects = rounds.settle_held(b, "ab", [("orders-1", 0, 8)], NOW + 20)
    assert (dangling, effects) == ([], [])
    assert b.partition("orders-1", 0).ongoing_txns == {4242: 2, 4343: 5}
