"""The simulator runs the daemon's log cleaner on its virtual clock
(sim/log_cleaner.py): a compacted topic's superseded records leave the store
and the model together, the newest batches (the stand-in for the active
segment) stay, and a restart reads the cleaned store back."""

from __future__ import annotations

from linkd.core import records as rb
from linkd.core.cluster import AppendBatch
from linkd.core.links import LinkLimits
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.log_cleaner import CLEANER_BACKOFF_MS, active_base
from sim.seeds import IdFactory


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
    configs = {"cleanup.policy": "compact", "segment.bytes": "300"}
    _topic, effects = node.state.create_topic("latest", 1, configs, "t-1")
    node.execute(effects, "metadata", _sized)
    for i in range(20):
        batch = rb.build_batch([rb.RecordSpec(f"k{i % 2}".encode(), f"v{i}".encode(), 0)])
        node.execute(list(node.state.produce("latest", 0, batch, "", 0).effects), "p", _sized)
    queue.run_until(1_000)
    node.tick(1_000, _sized)
    store = node.store("latest", 0)
    boundary = active_base(store, 300)
    assert 0 < boundary < 20
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
