"""The simulator runs the daemon's log cleaner on its virtual clock
(sim/log_cleaner.py): a compacted topic's superseded records leave the store
and the model together, the active segment (the core rolls segments for both
shells) stays, and a restart reads the cleaned store and its segments back."""

from __future__ import annotations

import pytest

from linkd.core import records as rb
from linkd.core.cluster import AppendBatch
from linkd.core.links import LinkLimits
from sim import checkers
from sim import scenario as scenarios
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.history import History, Op, Send
from sim.log_cleaner import CLEANER_BACKOFF_MS
from sim.runner import run_summary
from sim.seeds import IdFactory
from sim.store import PartitionStore, StoredBatch


def _sized(effect: AppendBatch) -> int:
    return len(effect.batch)


def _values(node: SimCluster) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for stored in node.store("latest", 0).batches:
        _, records = rb.decode_records(stored.data)
        out += [(r.offset, r.key, r.value) for r in records]
    return out


def test_the_cleaner_runs_on_the_virtual_clock_and_survives_a_restart() -> None:
    queue = EventQueue(100_000)
    node = SimCluster("A", queue, 1_000, 0, LinkLimits(), IdFactory(1, "A"))
    configs = {"cleanup.policy": "compact", "internal.segment.bytes": "300"}
    _topic, effects = node.state.create_topic("latest", 1, configs, "t-1")
    node.execute(effects, "metadata", _sized)
    for i in range(20):
        batch = rb.build_batch([rb.RecordSpec(f"k{i % 2}".encode(), f"v{i}".encode(), 0)])
        node.execute(list(node.state.produce("latest", 0, batch, "", 0).effects), "p", _sized)
    queue.run_until(1_000)
    node.tick(1_000, _sized)
    store = node.store("latest", 0)
    boundary = store.segment_bases[-1]
    assert 0 < boundary < 20
    model = node.state.partition("latest", 0)
    assert store.segment_bases == [s.base_offset for s in model.segments]
    kept = _values(node)
    # Below the active part only each key's last record stays, at its offset.
    below = [(o, k) for o, k, _v in kept if o < boundary]
    assert below == [(boundary - 2, b"k0"), (boundary - 1, b"k1")]
    assert [o for o, _k, _v in kept if o >= boundary] == list(range(boundary, 20))
    log = node.state.partition("latest", 0)
    assert [b.base_offset for b in log.batches] == [b.base_offset for b in store.batches]
    assert log.cleaner.removed_records == boundary - 2
    assert node.clean(1_000 + CLEANER_BACKOFF_MS) == 0  # nothing dirty is left
    node.crash()
    node.restart(_sized)
    assert _values(node) == kept and node.state.partition("latest", 0).log_end_offset == 20
    restarted = node.state.partition("latest", 0)
    assert [s.base_offset for s in restarted.segments] == store.segment_bases


def _stored(base: int, pairs: list[tuple[bytes, bytes]]) -> StoredBatch:
    data = rb.build_batch([rb.RecordSpec(k, v, 0) for k, v in pairs], base_offset=base)
    return StoredBatch(base, base + len(pairs), data, len(data))


def _store(*batches: StoredBatch) -> PartitionStore:
    store = PartitionStore()
    for b in batches:
        store.append(b)
    return store


def test_the_follower_check_accepts_records_cleaned_on_either_side_and_nothing_else() -> None:
    source = _store(_stored(1, [(b"a", b"2")]), _stored(2, [(b"b", b"1")]))
    follower = _store(_stored(0, [(b"a", b"1")]), _stored(1, [(b"a", b"2")]),
                      _stored(2, [(b"b", b"1")]))
    args = ("B", "t", 0)
    assert checkers.check_follower_log(*args, follower, 3, "A", "t", source, 0,
                                       compacted=True) == []
    # Byte for byte, the same logs differ.
    assert checkers.check_follower_log(*args, follower, 3, "A", "t", source, 0) != []
    # A record missing with no newer record of its key is still a violation.
    lost = _store(_stored(1, [(b"a", b"2")]), _stored(3, [(b"c", b"1")]))
    found = checkers.check_follower_log(*args, follower, 3, "A", "t", lost, 0, compacted=True,
                                        check_prefix=False)
    assert [v.invariant for v in found] == ["1 offset identity"]
    assert "lacks the record at offset 2" in found[0].detail


def test_a_lost_write_is_excused_only_when_a_newer_record_of_its_key_is_stored() -> None:
    history = History()
    for offset in (0, 1):
        send = Send("t", 0, f"v{offset}", offset, key=f"k{offset}")
        history.add(Op("p", "source_producer", "A", "ok", 0, 1, send))
    final = {("A", "t", 0): {2: "v2"}}
    compacted = {("A", "t", 0): {"k0": 2}}
    found = checkers.check_lost_writes(history, final, {}, compacted=compacted)
    assert [v.detail.split(":")[1].split()[0] for v in found] == ["'v1'"]
    assert len(checkers.check_lost_writes(history, final, {})) == 2


def test_the_compacted_scenario_runs_clean_and_its_cleaners_work() -> None:
    summary = run_summary("compacted-follower", 1)
    assert summary["violations"] == []
    assert summary["metrics"]["io_bytes_cleaner"] > 0
    # A's cleans are not taken for a divergence: B never cuts its copy, and
    # its consumer never reads a record that is cut later.
    assert summary["metrics"].get("records_truncated_by_recovery", 0) == 0
    assert summary["metrics"]["consumer_reads_truncated"] == 0


def test_a_namespace_cleanup_policy_is_checked_as_a_topic_config() -> None:
    spec = scenarios.load("compacted-follower")
    assert spec.namespace.topic_configs()["cleanup.policy"] == "compact"
    both = scenarios.apply_params(spec, {"cleanup_policy": "compact,delete"})
    assert both.namespace.cleanup_policy == "compact,delete"
    refused = r"Invalid value compaction for configuration cleanup\.policy"
    with pytest.raises(scenarios.ScenarioError, match=refused):
        scenarios.apply_params(spec, {"cleanup_policy": "compaction"})
