"""A simulated cluster restarts as a daemon does: from its stored journal and
batches (`linkd.core.restart.recover_into`), not from what it held in memory.

So a state change that never reached the journal is gone after a restart,
in the simulator as on a daemon; and the work the dead process had under way
dies with it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch
from linkd.core.links import LinkLimits
from linkd.core.requests import Now, Request, Sleep
from sim import cluster_node
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.operator_shell import SimHost
from sim.seeds import IdFactory
from sim.store import PartitionStore


def _sized(effect: AppendBatch) -> int:
    return len(effect.batch)


def _cluster() -> tuple[SimCluster, EventQueue]:
    queue = EventQueue(100_000)
    node = SimCluster("A", queue, 1_000, 0, LinkLimits(), IdFactory(1, "A"))
    return node, queue


def _create_and_produce(node: SimCluster, queue: EventQueue, records: int) -> None:
    _topic, effects = node.state.create_topic("orders", 2, {"retention.ms": "60000"}, "t-1")
    node.execute(effects, "metadata", _sized)
    for i in range(records):
        batch = rb.build_batch([rb.RecordSpec(None, f"v{i}".encode(), queue.now_ms)])
        result = node.state.produce("orders", i % 2, batch, "", queue.now_ms)
        node.execute(list(result.effects), "produce", _sized)
    queue.run_until(queue.now_ms + 1_000)


def test_a_restart_rebuilds_topics_logs_and_commits_from_what_was_stored() -> None:
    node, queue = _cluster()
    _create_and_produce(node, queue, 6)
    node.execute(
        node.state.commit_group_offsets("g", -1, "", {("orders", 0): (2, "m", -1)}, 5),
        "offsets",
        _sized,
    )
    before = node.state
    node.crash()
    node.restart(_sized)

    assert node.state is not before
    topic = node.state.topics["orders"]
    assert (topic.topic_id, topic.overrides) == ("t-1", {"retention.ms": "60000"})
    assert [log.log_end_offset for log in topic.partitions] == [3, 3]
    assert [log.high_watermark for log in topic.partitions] == [3, 3]
    committed = node.state.groups.committed("g", None)
    assert committed[("orders", 0)].offset == 2


def test_a_change_that_never_reached_the_journal__is_gone_after_a_restart() -> None:
    """The replay is real: the simulator cannot hide a missing journal record
    (as it did for consumer commits before, seeds 14 and 27 of operator-mix)."""
    node, queue = _cluster()
    _create_and_produce(node, queue, 2)
    node.state.topics["orders"].overrides["cleanup.policy"] = "delete"  # not journalled
    node.state.groups.commit_offsets("g", -1, "", {("orders", 0): (1, "", -1)}, 5)

    node.crash()
    node.restart(_sized)

    assert "cleanup.policy" not in node.state.topics["orders"].overrides
    assert node.state.groups.committed("g", None) == {}


def test_a_restart_replays_a_snapshot_and_the_records_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster_node, "SNAPSHOT_EVERY_RECORDS", 3)
    node, queue = _cluster()
    _create_and_produce(node, queue, 2)
    for i in range(4):
        node.execute(
            node.state.commit_group_offsets(f"g{i}", -1, "", {("orders", 1): (i, "", -1)}, 5),
            "offsets",
            _sized,
        )
    assert node.snapshot_text is not None and node.journal_texts  # both forms in play

    node.crash()
    node.restart(_sized)

    for i in range(4):
        assert node.state.groups.committed(f"g{i}", None)[("orders", 1)].offset == i


def test_a_deleted_topic_s_data_is_removed_at_restart() -> None:
    node, queue = _cluster()
    _create_and_produce(node, queue, 2)
    node.execute(node.state.delete_topic("orders"), "metadata", _sized)
    # The process died before the topic's data was removed.
    node.stores[("t-1", 0)] = PartitionStore()

    node.crash()
    node.restart(_sized)

    assert "orders" not in node.state.topics
    assert not [key for key in node.stores if key[0] == "t-1"]


def test_a_procedure_under_way_when_its_process_died__is_dropped() -> None:
    node, queue = _cluster()
    steps: list[int] = []

    def procedure() -> Generator[Request, Any, str]:
        steps.append((yield Now()))
        yield Sleep(100)
        steps.append((yield Now()))
        return "done"

    outcome: list[object] = []

    class _Links:
        logical_bytes = staticmethod(_sized)

    host = SimHost(node, queue, _Links())  # type: ignore[arg-type]
    host.drive(procedure(), lambda value, error: outcome.append((value, error)))
    node.crash()
    node.restart(_sized)
    queue.run_until(1_000)

    assert steps == [0]  # the step after the sleep never ran
    assert outcome == []


def test_an_epoch_bump_a_cut_removed__does_not_come_back_after_a_restart() -> None:
    """Operator sweep, seed 1912 on 4 clusters: a partition bumped its epoch,
    was cut below the bump and grew again with other batches; the journal
    still held the bump, and after a restart the epoch history was wrong
    (there [(0, 0), (1, 154), (2, 48)]: the next append failed its assertion)."""
    node, queue = _cluster()
    state = node.state

    def append(n: int) -> None:
        for _ in range(n):
            batch = rb.build_batch([rb.RecordSpec(None, b"v", queue.now_ms)])
            node.execute(list(state.produce("orders", 0, batch, "", queue.now_ms).effects),
                         "produce", _sized)  # fmt: skip
        queue.run_until(queue.now_ms + 1_000)

    _topic, effects = state.create_topic("orders", 1, {}, "t-1")
    node.execute(effects, "metadata", _sized)
    append(5)
    for _ in range(2):  # epochs 1 and 2, both from offset 5
        node.execute(state.unclean_election("orders", 0, 5)[2], "metadata", _sized)
    append(3)  # epoch-2 batches at 5..8
    cut = rep.cut_replica(state, "orders", 0, 3, now_ms=0)
    node.execute(cut.effects, "replica", _sized)  # a cut at 3
    append(5)  # epoch-0 batches at 3..8
    node.execute(state.unclean_election("orders", 0, 8)[2], "metadata", _sized)  # epoch 1 at 8
    log = state.partition("orders", 0)
    assert log.epoch_history == [(0, 0), (1, 8)]
    assert state.topics["orders"].epoch_bumps[0] == [(1, 8)]

    node.crash()
    node.restart(_sized)

    assert node.state.partition("orders", 0).epoch_history == [(0, 0), (1, 8)]


def test_a_snapshot_is_the_fold_of_the_journal__not_the_live_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change applied but not journalled yet when a snapshot is written is
    not in it (else its record, written after, would be replayed twice)."""
    monkeypatch.setattr(cluster_node, "SNAPSHOT_EVERY_RECORDS", 2)
    node, queue = _cluster()
    _create_and_produce(node, queue, 2)
    bump = node.state.unclean_election("orders", 1, 1)[2]  # applied, its record not written yet
    node.execute(
        node.state.commit_group_offsets("g", -1, "", {("orders", 0): (1, "", -1)}, 5),
        "offsets",
        _sized,
    )  # the second record: a snapshot now
    assert node.snapshot_text is not None and '"epoch_bumps":{}' in node.snapshot_text.replace(
        " ", ""
    )
    node.execute(bump, "metadata", _sized)

    node.crash()
    node.restart(_sized)

    assert node.state.topics["orders"].epoch_bumps[1] == [(1, 1)]  # once, not twice


def test_compacted__the_fold_of_a_journal_equals_the_snapshot_of_the_state_that_wrote_it() -> None:
    """What the daemon and the simulator write as a snapshot (restart.compacted)."""
    from linkd.core.cluster import ClusterState, Journal
    from linkd.core.journal import encode
    from linkd.core.restart import compacted

    state = ClusterState("A")
    stored: list[dict[str, object]] = []

    def keep(effects: object) -> None:
        for e in effects:  # type: ignore[attr-defined]
            if isinstance(e, Journal):
                stored.extend(encode(r) for r in e.records)

    keep(state.create_topic("orders", 2, {"retention.ms": "5"}, "t-1")[1])
    keep(state.create_namespace(1, "orders-", True))
    keep(state.commit_group_offsets("g", -1, "", {("orders", 1): (0, "m", -1)}, 3))
    keep(state.unclean_election("orders", 0, 0)[2])
    keep(state.init_producer_id("tx", 60_000, 4)[2])
    half = len(stored) // 2
    base = compacted("A", None, stored[:half])  # a snapshot midway, then the rest

    assert compacted("A", base, stored[half:]) == state.snapshot()


def test_journal_book__a_snapshot_is_due_every_n_records_and_folds_what_came_before() -> None:
    """The bookkeeping both shells keep beside their stored journal."""
    from linkd.core.cluster import ClusterState, Journal
    from linkd.core.journal import encode
    from linkd.core.restart import JournalBook, compacted

    state = ClusterState("A")
    book = JournalBook("A", every=3)
    written: list[dict[str, Any]] = []

    def store(effects: Any) -> None:
        records = [encode(r) for e in effects if isinstance(e, Journal) for r in e.records]
        snapshot = book.stored(records)
        if snapshot is not None:
            written.append(snapshot)
            book.snapshot_written(snapshot)

    store(state.create_topic("orders", 1, {}, "t-1")[1])  # 1 record: none due
    assert (written, len(book.since)) == ([], 1)
    store(state.create_namespace(1, "orders-", True))
    store(state.commit_group_offsets("g", -1, "", {("orders", 0): (0, "", -1)}, 3))
    assert len(written) == 1 and book.since == [] and book.base is written[0]
    store(state.commit_group_offsets("g", -1, "", {("orders", 0): (1, "", -1)}, 4))
    assert len(book.since) == 1
    assert compacted("A", book.base, book.since) == state.snapshot()
    with pytest.raises(AssertionError):
        JournalBook("A", every=0)
