"""One simulated cluster: the core's ClusterState plus an effects executor.

This carries out the core's effects (`linkd.core.effects`) on virtual time:
appends go to in-memory stores and queue on the cluster's I/O device; when
the device has written them, the core is told (`made_durable`), the high
watermark moves, parked fetches wake and the caller's continuation runs (a
produce acknowledgement, the next fetch).

Rules:
- Every decision is the core's: this module only carries out effects.
- A crashed cluster (`up` False) keeps its durable state (an acknowledged
  record survives `kill -9`, spec section 1) but answers nothing until it
  restarts; a restart begins every link DISCONNECTED (`LinkTable.start`).
- Journal records are kept in memory in their stored form
  (`journal.encode`, JSON text), with a snapshot that replaces them when
  `restart.JournalBook` says one is due; a restart rebuilds the cluster's
  state from them and from its stored batches with the core's restart
  (`linkd.core.restart.recover_into`), so a record that replays wrongly
  shows here. The simulator does not model a crash between an append and
  its fsync (every append it accepted becomes durable once the device has
  written it).
- A crash ends the process's `incarnation`: work it had under way (a
  durability completion, a procedure, a link call) is dropped with it.
- Who is woken once appends are durable is the core's answer
  (`ClusterState.made_durable`).
- An acks=all acknowledgement waits, on virtual time, until the high
  watermarks cover the write (`ClusterState.unmet_high_watermarks`), at most
  HW_WAIT_MAX_MS (`cluster.HW_WAIT_MAX_MS`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

from linkd.core import cluster as core
from linkd.core import records as rb
from linkd.core import restart as recovery
from linkd.core import timers
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.journal import JournalRecord
from linkd.core.journal import encode as encode_record
from linkd.core.link_auth import LinkSessions
from linkd.core.links import LinkLimits, LinkTable
from linkd.core.requests import Execute, WakeWaiters
from sim.events import EventQueue
from sim.log_cleaner import CLEANER_BACKOFF_MS, clean_partition
from sim.resources import IoDevice, RateLimit
from sim.seeds import IdFactory
from sim.store import PartitionStore, StoredBatch

PartitionKey = tuple[str, int]  # (topic name, partition)

HW_WAIT_MAX_MS = core.HW_WAIT_MAX_MS
# Small, so that restarts in short runs replay both forms: a snapshot and
# the records after it.
SNAPSHOT_EVERY_RECORDS = 200


class SimCluster:
    def __init__(
        self,
        cluster_id: str,
        queue: EventQueue,
        disk_bytes_per_ms: int,
        replication_limit_bytes_per_s: int,
        limits: LinkLimits,
        ids: IdFactory,
        retention_check_interval_ms: int = core.RETENTION_CHECK_INTERVAL_MS,
        faults: Faults = NO_FAULTS,
    ) -> None:
        self.cluster_id = cluster_id
        self.faults = faults  # test only: what its run plants (linkd/core/faults.py)
        self.queue = queue
        self.limits = limits
        self.retention_check_interval_ms = retention_check_interval_ms
        self.state = core.ClusterState(cluster_id, faults=faults)
        self.state.retention_check_interval_ms = retention_check_interval_ms
        self.links = LinkTable(cluster_id, limits)
        self.state.links = self.links
        # The metadata journal as stored: the last snapshot and the records since.
        self.snapshot_text: str | None = None
        self.journal_texts: list[str] = []
        self.journal_book = recovery.JournalBook(
            cluster_id, SNAPSHOT_EVERY_RECORDS, faults=faults
        )
        # Bumped by each crash: what the dead process had under way is dropped.
        self.incarnation = 0
        # Link sessions this cluster serves (kept in memory: a crash ends
        # them) and the link credentials it requires ("" alone: none).
        self.link_sessions = LinkSessions(cluster_id, faults)
        self.link_credentials: tuple[str, ...] = ("",)
        self._nonces = 0
        self.stores: dict[tuple[str, int], PartitionStore] = {}
        self.disk = IoDevice(disk_bytes_per_ms)
        self.replication_limit = RateLimit(replication_limit_bytes_per_s)
        self.topic_ids = ids
        self.up = True
        # Down because its process died (a paused one is down but alive: its
        # connections stay open, where a dead one's are refused at once).
        self.crashed = False
        self.journal_records = 0
        # Until when its storage refuses replica appends (a full disk, a
        # file-size limit, a read-only data directory: `refuse_storage`).
        self.storage_refused_until_ms = -1
        self.storage_refusals = 0  # refused appends of fetched records
        # Parked long polls (fetches, acks=all produces, commits): each is
        # called once when a high watermark it watches moves (None: any).
        self._data_waiters: list[tuple[Callable[[], None], frozenset[PartitionKey] | None]] = []
        # The log cleaner's next pass (virtual ms; sim/log_cleaner.py).
        self.next_clean_ms = 0
        # Called with (topic, partition, records removed) on each truncation.
        # (topic, partition, records removed, the batches cut off, traffic class
        # of the cut)
        self.on_truncate: Callable[[str, int, int, list[StoredBatch], str], None] | None = None
        # (topic, partition, from, to): records this cluster deleted itself
        # (retention, DeleteRecords), which no checker counts as lost.
        self.on_delete_below: Callable[[str, int, int, int], None] | None = None

    def store(self, topic: str, partition: int) -> PartitionStore:
        return self.stores[(self.state.topic(topic).topic_id, partition)]

    def wait_for_data(
        self, waiter: Callable[[], None], watch: Iterable[PartitionKey] | None = None
    ) -> None:
        """Parks `waiter` until a high watermark of a partition in `watch`
        (topic name, partition) moves; any partition when `watch` is None.
        Kafka's delayed-fetch purgatory is keyed by partition the same way: a
        write to one partition does not wake fetches that do not read it."""
        self._data_waiters.append((waiter, None if watch is None else frozenset(watch)))

    def notify_data(self, moved: Iterable[PartitionKey] | None = None) -> None:
        """High watermarks moved: on the partitions in `moved`, or on any
        (None). Wakes, once, every waiter watching one of them."""
        if moved is None:
            woken = [waiter for waiter, _ in self._data_waiters]
            self._data_waiters = []
        else:
            keys = set(moved)
            woken = []
            kept: list[tuple[Callable[[], None], frozenset[PartitionKey] | None]] = []
            for waiter, watch in self._data_waiters:
                if watch is None or not watch.isdisjoint(keys):
                    woken.append(waiter)
                else:
                    kept.append((waiter, watch))
            self._data_waiters = kept
        for waiter in woken:
            waiter()

    def refuse_storage(self, until_ms: int) -> None:
        """From now until `until_ms`, the storage refuses the appends of
        fetched records (a full disk, a file-size limit, a read-only data
        directory)."""
        self.storage_refused_until_ms = max(self.storage_refused_until_ms, until_ms)

    def execute_refusable(
        self,
        effects: list[core.Effect],
        traffic_class: str,
        logical_bytes: Callable[[core.AppendBatch], int],
        then: Callable[[], None],
    ) -> ClusterError | None:
        """`execute`, or, while the storage refuses writes and the effects
        append, what `Execute.refusable` asks of a shell (linkd/core/requests.py):
        every effect but the appends is carried out, the partitions the
        appends were for go back to what is stored, and the refusal is
        returned (`then` is not called). Effects that create a topic's logs
        are refused whole then (`CreateLogs`)."""
        refusing = self.queue.now_ms < self.storage_refused_until_ms
        creates = [e for e in effects if isinstance(e, core.CreateLogs)]
        if creates and refusing:
            # The disk refuses to open a new topic's logs (`CreateLogs`):
            # nothing of the effects is carried out (the topic's journal
            # record comes after its logs); the core drops the topic from
            # the model.
            self.storage_refusals += 1
            return ClusterError(
                ErrorCode.STORAGE_ERROR,
                "storage",
                "the topic's partition logs could not be opened (the disk refused them)",
            )
        appends = [e for e in effects if isinstance(e, core.AppendBatch)]
        if not appends or not refusing:
            self.execute(effects, traffic_class, logical_bytes, then)
            return None
        self.execute(
            [e for e in effects if not isinstance(e, core.AppendBatch)],
            traffic_class,
            logical_bytes,
        )
        names = self.state.topic_names_by_id()
        cut: list[str] = []
        for effect in appends:
            if not isinstance(effect, core.AppendBatch) or effect.topic_id not in names:
                continue
            name = names[effect.topic_id]
            stored = self.stores[(effect.topic_id, effect.partition)].log_end_offset
            if self.state.forget_unstored(name, effect.partition, stored):
                cut.append(f"{name}-{effect.partition}")
        self.storage_refusals += 1
        return ClusterError(
            ErrorCode.STORAGE_ERROR,
            ",".join(cut) or "storage",
            "the write was not stored (the disk refused it); it can be retried",
        )

    def execute(
        self,
        effects: Iterable[core.Effect],
        traffic_class: str,
        logical_bytes: Callable[[core.AppendBatch], int],
        then: Callable[[], None] | None = None,
    ) -> None:
        """Carries out effects in order (`Execute`); `then` runs once every
        append is durable and the high watermarks have moved."""
        names = self.state.topic_names_by_id()
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
                    ),
                    roll=effect.roll,
                )
                done_ms = max(done_ms, self.disk.reserve(size, self.queue.now_ms, traffic_class))
                touched[key] = (effect.header.next_offset, store.generation)
            elif isinstance(effect, core.Journal):
                self._journal(effect.records)
            elif isinstance(effect, core.CreateLogs):
                for p in effect.partitions:
                    self.stores.setdefault((effect.topic_id, p), PartitionStore())
            elif isinstance(effect, core.DeleteTopicData):
                for key in [k for k in sorted(self.stores) if k[0] == effect.topic_id]:
                    del self.stores[key]
            elif isinstance(effect, core.DeleteBelow):
                found = self.stores.get((effect.topic_id, effect.partition))
                if found is not None:
                    start = found.log_start_offset
                    if effect.roll:
                        found.roll_empty()
                    found.delete_below(effect.offset)
                    name = names.get(effect.topic_id)
                    moved = found.log_start_offset > start
                    if moved and name is not None and self.on_delete_below is not None:
                        self.on_delete_below(
                            name, effect.partition, start, found.log_start_offset
                        )
            elif isinstance(effect, core.ResetLog | core.TruncateLog):
                key = (effect.topic_id, effect.partition)
                target = self.stores[key]
                before = target.log_end_offset
                start = target.log_start_offset
                name = names.get(effect.topic_id)
                if isinstance(effect, core.ResetLog):
                    target.reset(effect.offset)
                    if start < before and name is not None and self.on_delete_below is not None:
                        # A follower starting again past a gap: what it held
                        # goes with its old log start, as retention would take it.
                        self.on_delete_below(name, effect.partition, start, before)
                    cut: list[StoredBatch] = []
                else:
                    cut = target.batches[target.index_at(effect.offset) :]
                    target.truncate_to(effect.offset)
                touched.pop(key, None)
                removed = max(0, before - target.log_end_offset)
                if removed and name is not None and self.on_truncate is not None:
                    self.on_truncate(name, effect.partition, removed, cut, traffic_class)
        if not touched:
            if then is not None:
                then()
            return
        incarnation = self.incarnation

        def durable() -> None:
            if incarnation != self.incarnation:
                return  # the process died: a restart recovered what was written
            marks = []
            for (topic_id, partition), (offset, generation) in sorted(touched.items()):
                name = names.get(topic_id)
                store = self.stores.get((topic_id, partition))
                if name is None or store is None or store.generation != generation:
                    continue  # truncated or deleted since: not this append's durability
                marks.append((name, partition, offset))
            wake = self.state.made_durable(marks)
            if wake is not None:
                self.notify_data(wake.partitions)
            if then is not None:
                then()

        self.queue.at(done_ms, f"durable {self.cluster_id} {len(touched)}p", durable)

    def refresh_high_watermarks(self) -> None:
        """node.refresh_high_watermarks: re-applies the HW limits, wakes waiters."""
        if self.state.refresh_high_watermarks():
            self.notify_data()

    def tick(self, now_ms: int, logical_bytes: Callable[[core.AppendBatch], int]) -> None:
        """The cluster's timers, once (`timers.tick`), and a pass of the log
        cleaner when one is due."""
        ticking = timers.tick(self.state, now_ms)
        incarnation = self.incarnation

        def step(answer: object) -> None:
            while incarnation == self.incarnation:
                try:
                    request = ticking.send(answer)
                except StopIteration as stop:
                    for reply in stop.value:  # no member waits here: said, not lost
                        self.queue.note(f"{self.cluster_id} group reply {reply.request_id}")
                    return
                answer = None
                if isinstance(request, Execute):
                    done = lambda: step(self.queue.now_ms)  # noqa: E731
                    self.execute(request.effects, "retention", logical_bytes, done)
                    return
                if isinstance(request, WakeWaiters):
                    self.notify_data(request.partitions)

        step(None)
        if now_ms >= self.next_clean_ms:
            self.next_clean_ms = now_ms + CLEANER_BACKOFF_MS
            self.clean(now_ms)

    def clean(self, now_ms: int) -> int:
        """One pass of the log cleaner over every compacted partition
        (`sim/log_cleaner.py`); returns the records removed."""
        removed = 0
        for topic in list(self.state.topics.values()):
            if not topic.config.compact:
                continue
            for partition in range(len(topic.partitions)):
                store = self.stores.get((topic.topic_id, partition))
                if store is not None:
                    removed += clean_partition(topic, partition, store, self.disk, now_ms)
        return removed

    def wait_high_watermarks(
        self,
        targets: dict[tuple[str, int], int],
        what: str,
        then: Callable[[ClusterError | None], None],
        marks: dict[tuple[str, int], core.WaitMark] | None = None,
    ) -> None:
        """Calls `then(None)` once every partition's HW reaches its target, or
        `then(REQUEST_TIMED_OUT)` after HW_WAIT_MAX_MS (indefinite: the records
        are written here and may yet replicate). A crash ends the wait with the
        timeout too (its waiters are dropped)."""
        done = [False]
        if marks is None:
            marks = self.state.wait_marks(targets)  # what is there now

        def pending() -> list[tuple[str, int, int]]:
            return self.state.unmet_high_watermarks(targets, marks, what)

        def check() -> None:
            if done[0] or not self.up:
                return
            try:
                left = pending()
            except ClusterError as exc:
                done[0] = True
                then(exc)
                return
            if not left:
                done[0] = True
                then(None)
                return
            self.wait_for_data(check, targets)

        def expire() -> None:
            if done[0]:
                return
            done[0] = True
            try:
                left = pending()
            except ClusterError as exc:
                then(exc)
                return
            t, p, target = left[0] if left else ("", 0, 0)
            then(
                ClusterError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{t}-{p}",
                    f"{what}: partition {t}-{p} is written up to {target} here, but its high "
                    f"watermark did not reach it within {HW_WAIT_MAX_MS} ms",
                )
            )

        self.queue.after(HW_WAIT_MAX_MS, f"hw wait {self.cluster_id} max", expire)
        check()

    # -- crash and restart ---------------------------------------------------------

    def crash(self) -> None:
        self.up = False
        self.crashed = True
        self.incarnation += 1
        self._data_waiters = []
        self.link_sessions = LinkSessions(self.cluster_id, self.faults)

    def nonce(self) -> bytes:
        """A fresh nonce: unique, and reproducible (no attacker here
        guesses one)."""
        self._nonces += 1
        return hashlib.sha256(
            f"{self.cluster_id}/{self.incarnation}/{self._nonces}".encode()
        ).digest()

    def restart(self, logical_bytes: Callable[[core.AppendBatch], int]) -> None:
        """A process starts on what the cluster stored: the state is
        rebuilt from the stored journal and batches (`restart.recover_into`),
        data of topics it no longer has is removed, every link starts
        DISCONNECTED (`LinkTable.reset_runtime`), and transactions prepared
        before the crash are completed."""
        state = core.ClusterState(self.cluster_id, faults=self.faults)
        state.retention_check_interval_ms = self.retention_check_interval_ms
        state.links = LinkTable(self.cluster_id, self.limits)
        snapshot = recovery.read_stored(self.snapshot_text) if self.snapshot_text else None
        records = [recovery.read_stored(text) for text in self.journal_texts]
        self.journal_book = recovery.JournalBook(
            self.cluster_id, SNAPSHOT_EVERY_RECORDS, snapshot, list(records), self.faults
        )
        live = recovery.recover_into(
            state, snapshot, records, self._stored_batches, self.queue.now_ms
        )
        for key in [k for k in sorted(self.stores) if k[0] not in live]:
            del self.stores[key]
        self.state, self.links = state, state.links
        self.up = True
        self.crashed = False
        self.links.reset_runtime(self.queue.now_ms)
        self.execute(state.recovery_completions(self.queue.now_ms), "metadata", logical_bytes)

    def _journal(self, records: Iterable[JournalRecord]) -> None:
        """Stores journal records as text, and the snapshot the journal book
        says is due (`restart.JournalBook`: the fold of the stored journal)."""
        texts = [recovery.stored_form(encode_record(record)) for record in records]
        self.journal_texts += texts
        self.journal_records += len(texts)
        snapshot = self.journal_book.stored([recovery.read_stored(t) for t in texts])
        if snapshot is not None:
            self.snapshot_text = recovery.stored_form(snapshot)
            self.journal_texts = []
            self.journal_book.snapshot_written(recovery.read_stored(self.snapshot_text))

    def _stored_batches(self, topic: core.Topic, partition: int) -> recovery.StoredLog:
        store = self.stores.setdefault((topic.topic_id, partition), PartitionStore())
        batches: recovery.Batches = []
        for stored in store.batches:
            header = rb.parse_header(stored.data)
            marker = rb.control_marker_type(stored.data) if header.is_control else None
            batches.append((header, marker))
        return recovery.StoredLog(batches, tuple(store.segment_bases))
