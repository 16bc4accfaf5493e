"""One simulated cluster: the core's ClusterState plus an effects executor.

This mirrors the daemon's `ClusterNode._execute` and `_make_durable`
(linkd/node.py) with virtual time: appends go to in-memory stores and queue
on the cluster's I/O device; when the device has written them, the core is
told (`mark_durable`), the high watermark moves, parked replica fetches wake
and the caller's continuation runs (a produce acknowledgement, the next fetch).

Rules:
- Every decision is the core's: this module only carries out effects.
- A crashed cluster (`up` False) keeps its durable state (an acknowledged
  record survives `kill -9`, spec section 1) but answers nothing until it
  restarts; a restart begins every link DISCONNECTED (`LinkTable.start`).
- Journal records are kept in memory and counted; the simulator does not
  model a crash between an append and its fsync (every append it accepted
  becomes durable once the device has written it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from linkd.core import cluster as core
from linkd.core.links import LinkLimits
from sim.events import EventQueue
from sim.link_table import DeferringLinkTable
from sim.resources import IoDevice, RateLimit
from sim.seeds import IdFactory
from sim.store import PartitionStore, StoredBatch


class SimCluster:
    def __init__(
        self,
        cluster_id: str,
        queue: EventQueue,
        disk_bytes_per_ms: int,
        replication_limit_bytes_per_s: int,
        limits: LinkLimits,
        ids: IdFactory,
    ) -> None:
        self.cluster_id = cluster_id
        self.queue = queue
        self.state = core.ClusterState(cluster_id)
        self.links = DeferringLinkTable(cluster_id, limits)
        self.state.links = self.links
        self.stores: dict[tuple[str, int], PartitionStore] = {}
        self.disk = IoDevice(disk_bytes_per_ms)
        self.replication_limit = RateLimit(replication_limit_bytes_per_s)
        self.topic_ids = ids
        self.up = True
        self.journal_records = 0
        # Parked long-poll fetches: called when a high watermark moves.
        self._data_waiters: list[Callable[[], None]] = []
        # Called with (topic, partition, records removed) on each truncation.
        self.on_truncate: Callable[[str, int, int], None] | None = None

    def store(self, topic: str, partition: int) -> PartitionStore:
        return self.stores[(self.state.topic(topic).topic_id, partition)]

    def wait_for_data(self, waiter: Callable[[], None]) -> None:
        self._data_waiters.append(waiter)

    def notify_data(self) -> None:
        waiters, self._data_waiters = self._data_waiters, []
        for waiter in waiters:
            waiter()

    def execute(
        self,
        effects: Iterable[core.Effect],
        traffic_class: str,
        logical_bytes: Callable[[core.AppendBatch], int],
        then: Callable[[], None] | None = None,
    ) -> None:
        """Carries out effects in order (node._execute); `then` runs once every
        append is durable and the high watermarks have moved."""
        names = {t.topic_id: t.name for t in self.state.topics.values()}
        touched: dict[tuple[str, int], tuple[int, int]] = {}
        done_ms = self.queue.now_ms
        for effect in effects:
            if isinstance(effect, core.AppendBatch):
                key = (effect.topic_id, effect.partition)
                size = logical_bytes(effect)
                store = self.stores[key]
                store.append(
                    StoredBatch(
                        effect.header.base_offset, effect.header.next_offset, effect.batch, size
                    )
                )
                done_ms = max(done_ms, self.disk.reserve(size, self.queue.now_ms, traffic_class))
                touched[key] = (effect.header.next_offset, store.generation)
            elif isinstance(effect, core.Journal):
                self.journal_records += len(effect.records)
            elif isinstance(effect, core.CreateLogs):
                for p in effect.partitions:
                    self.stores.setdefault((effect.topic_id, p), PartitionStore())
            elif isinstance(effect, core.DeleteTopicData):
                for key in [k for k in sorted(self.stores) if k[0] == effect.topic_id]:
                    del self.stores[key]
            elif isinstance(effect, core.DeleteBelow):
                found = self.stores.get((effect.topic_id, effect.partition))
                if found is not None:
                    found.delete_below(effect.offset)
            elif isinstance(effect, core.ResetLog | core.TruncateLog):
                key = (effect.topic_id, effect.partition)
                target = self.stores[key]
                before = target.log_end_offset
                if isinstance(effect, core.ResetLog):
                    target.reset(effect.offset)
                else:
                    target.truncate_to(effect.offset)
                touched.pop(key, None)
                removed = max(0, before - target.log_end_offset)
                name = names.get(effect.topic_id)
                if removed and name is not None and self.on_truncate is not None:
                    self.on_truncate(name, effect.partition, removed)
        if not touched:
            if then is not None:
                then()
            return

        def durable() -> None:
            moved = False
            for (topic_id, partition), (offset, generation) in sorted(touched.items()):
                name = names.get(topic_id)
                store = self.stores.get((topic_id, partition))
                if name is None or store is None or store.generation != generation:
                    continue  # truncated or deleted since: not this append's durability
                moved |= self.state.mark_durable(name, partition, offset)
            if moved:
                self.notify_data()
            if then is not None:
                then()

        self.queue.at(done_ms, f"durable {self.cluster_id} {len(touched)}p", durable)

    # -- crash and restart ---------------------------------------------------------

    def crash(self) -> None:
        self.up = False
        self._data_waiters = []

    def restart(self) -> None:
        """As after a restart from the data directory: runtime link state is
        rebuilt (LinkManager.start calls LinkTable.start)."""
        self.up = True
        for runtime in self.links.runtime.values():
            runtime.last_contact_ms = None
            runtime.partitions.clear()
        self.links.start(self.queue.now_ms)
        self.links.tick(self.queue.now_ms)
