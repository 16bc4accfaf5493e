"""The imperative shell of one cluster: storage, time and waiting around the core.

`ClusterNode` owns the data directory, the metadata journal, one
`PartitionLogStore` per partition and the pure `ClusterState`. Every request is
one synchronous core call (which decides and changes the model) followed by the
effects it returned, executed in order:

- `AppendBatch`: written at once (os.write), before any other request can run,
  so the files hold batches in the order the core assigned their offsets.
- `Journal`: metadata records; every partition written earlier in the same
  effect list is fsync'd first (write-ahead: a commit record never reaches disk
  before the markers it describes).
- Durability of appends is group-committed per partition (`_Flusher`): one
  fsync covers every batch written before it started. The high watermark moves
  only once bytes are durable, and only then do fetches see them, so nothing a
  reader saw can vanish on a crash.

Everything runs on one asyncio event loop; fsyncs run in worker threads. Time
comes from an injected clock so tests can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from linkd import ack_trace
from linkd.authz import Gate
from linkd.core import cleaner, restart, timers
from linkd.core import records as rb
from linkd.core.acls import AclBinding, AclFilter
from linkd.core.cluster import (
    BROKER_ID,
    HW_WAIT_MAX_MS,
    AppendBatch,
    ClusterState,
    CreateLogs,
    DeleteBelow,
    DeleteTopicData,
    Effect,
    Journal,
    OffsetLookup,
    ResetLog,
    Topic,
    TruncateLog,
    WaitMark,
    pick_offset_in_batch,
    produce_wait_ms,
)
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults, PlantedBug
from linkd.core.groups import GroupConfig, GroupReply, JoinRequest, JoinResult, SyncResult
from linkd.core.journal import encode as encode_record
from linkd.core.links import LinkState
from linkd.core.namespaces import Namespace, ResourceType
from linkd.core.partition import AbortedTxn
from linkd.core.requests import Execute, Request, WakeWaiters
from linkd.core.users import SCRAM_MECHANISMS, Deletion, ScramMechanism, Upsertion, UserError
from linkd.log_cleaner import CleanerSettings, LogCleaner
from linkd.long_polls import LongPolls
from linkd.metrics import DaemonMetrics
from linkd.storage.datadir import DataDir
from linkd.storage.handles import HandleCache, capacity_for_limit
from linkd.storage.metadata import MetadataJournal
from linkd.storage.segments import PartitionLogStore

log = logging.getLogger("linkd.node")

# The tick loop wakes at the core's next deadline (a group's join, sync or
# session deadline, a transaction's timeout, the next retention check), and
# at least this often, for the links' cadence.
TICK_INTERVAL_S = 0.05
SNAPSHOT_EVERY_RECORDS = 20_000
# A group call waits at most this long beyond its own rebalance timeout.
GROUP_CALL_MARGIN_MS = 5_000
MAX_FETCH_WAIT_MS = 30_000
MAX_FETCH_BYTES = 64 * 1024 * 1024


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FetchedData:
    topic: str
    partition: int
    error: ClusterError | None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted: tuple[AbortedTxn, ...] = ()


class _Flusher:
    """Group commit for one partition: one fsync at a time, covering every byte
    written before it started."""

    def __init__(self, store: PartitionLogStore, fsync: bool) -> None:
        self.store = store
        self.fsync = fsync
        self.durable_offset = store.log_end_offset
        self._inflight: asyncio.Future[int] | None = None

    async def flush_to(self, offset: int) -> int:
        # Bounded: each round's fsync covers everything written before it began,
        # so at most two rounds are needed for any offset already written.
        for _ in range(3):
            if self.durable_offset >= offset:
                return self.durable_offset
            if not self.fsync:
                self.durable_offset = self.store.log_end_offset
                continue
            if self._inflight is None:
                target = self.store.log_end_offset
                loop = asyncio.get_running_loop()
                self._inflight = loop.run_in_executor(None, self._sync, target)
            inflight = self._inflight
            try:
                await asyncio.shield(inflight)
            finally:
                if self._inflight is inflight and inflight.done():
                    self._inflight = None
        return self.durable_offset

    def durable_at_once(self, offset: int) -> int | None:
        """How far this partition is durable, if it covers `offset` without
        an fsync to wait for (none needed, or none configured); else None."""
        if self.durable_offset >= offset:
            return self.durable_offset
        if self.fsync:
            return None
        self.durable_offset = self.store.log_end_offset  # as `flush_to` without fsync
        return self.durable_offset

    def _sync(self, target: int) -> int:
        self.store.flush()
        self.durable_offset = max(self.durable_offset, target)
        return target


class ClusterNode:
    def __init__(
        self,
        data_dir: Path,
        cluster_id: str,
        *,
        fsync: bool = True,
        clock: Callable[[], int] = wall_clock_ms,
        topic_id_factory: Callable[[], str] = lambda: str(uuid.uuid4()),
        group_config: GroupConfig | None = None,
        faults: Faults = NO_FAULTS,
        cleaner_settings: CleanerSettings | None = None,
    ) -> None:
        self.data_dir_path = data_dir
        self.cluster_id = cluster_id
        self.fsync = fsync
        self.clock = clock
        self.topic_id_factory = topic_id_factory
        self.group_config = group_config or GroupConfig()
        # Test only (chaos tests, linkd/core/faults.py): a planted
        # ack-before-replicate makes acknowledgements stop waiting for SYNC
        # followers, so a chaos run must catch it.
        self.state = ClusterState(cluster_id, self.group_config, faults)
        self.datadir: DataDir | None = None
        self.journal: MetadataJournal | None = None
        self._journal_book = restart.JournalBook(
            cluster_id, SNAPSHOT_EVERY_RECORDS, faults=faults
        )
        self.stores: dict[tuple[str, int], PartitionLogStore] = {}
        # The partition logs' open files, bounded by the process's descriptor limit.
        self.handles = HandleCache(capacity_for_limit())
        self.flushers: dict[tuple[str, int], _Flusher] = {}
        self.ready = False
        self.started_ms = clock()
        # Long polls waiting for high watermarks to move, keyed by partition.
        self.long_polls = LongPolls()
        self._group_waiters: dict[int, asyncio.Future[JoinResult | SyncResult]] = {}
        self._next_request_id = 1
        self._ticker: asyncio.Task[None] | None = None
        # Set when a call may have moved the core's next deadline earlier.
        self._timers_changed = asyncio.Event()
        # The log cleaner of compacted topics (linkd/log_cleaner.py); its
        # backoff is the daemon's option unless log.cleaner.backoff.ms is set.
        self.cleaner = LogCleaner(self, cleaner_settings or CleanerSettings())
        self._cleaner_backoff_ms = self.cleaner.settings.backoff_ms
        self._cleaner_task: asyncio.Task[None] | None = None
        self._stopping = False
        # Who may do what (--authorizer): off unless the daemon turns it on.
        self.authz = Gate(lambda: self.state.acls)
        # Requests, fetch rounds and SYNC acknowledgements as they happen
        # (served by --metrics-listen; docs/metrics.md).
        self.metrics = DaemonMetrics()

    # -- life cycle -------------------------------------------------------------

    def open(self) -> None:
        """Opens the data directory and recovers the state (blocking, at start)."""
        self.datadir = DataDir.open(self.data_dir_path, self.cluster_id)
        journal, snapshot, records, report = MetadataJournal.open(
            self.datadir.metadata_dir(), fsync=self.fsync
        )
        self.journal = journal
        if report.truncated_bytes:
            log.warning("metadata journal: dropped a torn tail", extra={"report": str(report)})
        self._journal_book = restart.JournalBook(
            self.cluster_id, SNAPSHOT_EVERY_RECORDS, snapshot, list(records),
            faults=self.state.faults,
        )  # fmt: skip
        self.state.broker_configs.static["log.cleaner.backoff.ms"] = str(
            self._cleaner_backoff_ms
        )
        live = restart.recover_into(
            self.state, snapshot, records, self._recovered_batches, self.clock()
        )
        self.apply_broker_configs()
        self._remove_orphan_logs(live)
        log.info("recovered", extra={"topics": len(self.state.topics)})

    def _recovered_batches(self, topic: Topic, partition: int) -> restart.StoredLog:
        """Opens a partition's store; the batches it holds and where its
        segments start (`recover_into`)."""
        store = self._open_store(topic.topic_id, partition, topic.config.segment_bytes)
        batches: restart.Batches = []
        for header in store.recovered_headers():
            marker = None
            if header.is_control:
                data = store.read(header.base_offset, header.base_offset + 1, header.size_bytes)
                marker = rb.control_marker_type(data)
            batches.append((header, marker))
        self.flushers[(topic.topic_id, partition)].durable_offset = store.log_end_offset
        return restart.StoredLog(batches, store.segment_bases)

    def _remove_orphan_logs(self, live: set[str]) -> None:
        """Partition directories of topics deleted just before a crash."""
        assert self.datadir is not None
        topics_dir = self.datadir.root / "topics"
        if not topics_dir.exists():
            return
        for child in sorted(topics_dir.iterdir()):
            topic_id = child.name.rsplit("-", 1)[0]
            if child.is_dir() and topic_id not in live:
                shutil.rmtree(child, ignore_errors=True)

    def _open_store(self, topic_id: str, partition: int, segment_bytes: int) -> PartitionLogStore:
        assert self.datadir is not None
        store, report = PartitionLogStore.open(
            self.datadir.partition_dir(topic_id, partition),
            # Segments roll where the core says (AppendBatch.roll); the store's
            # own size rule is for callers that give no decision.
            segment_bytes=max(1, segment_bytes),
            fsync=self.fsync,
            handles=self.handles,
        )
        if report.truncated_bytes:
            log.warning(
                "partition log: dropped a torn tail",
                extra={"topic_id": topic_id, "partition": partition, "report": str(report)},
            )
        self.stores[(topic_id, partition)] = store
        self.flushers[(topic_id, partition)] = _Flusher(store, self.fsync)
        return store

    async def start(self) -> None:
        """Completes transactions prepared before a crash, starts the timers."""
        await self.execute(self.state.recovery_completions(self.clock()))
        self._ticker = asyncio.create_task(self._tick_loop(), name="linkd-tick")
        self._cleaner_task = asyncio.create_task(self.cleaner.run(), name="linkd-log-cleaner")
        self.ready = True

    async def stop(self) -> None:
        self._stopping = True
        self.ready = False
        if self._cleaner_task is not None:
            self._cleaner_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cleaner_task
        for task in (self._ticker,):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for fut in self._group_waiters.values():
            if not fut.done():
                fut.set_exception(
                    ClusterError(ErrorCode.NOT_READY, "cluster", "cluster is shutting down")
                )
        for flusher in self.flushers.values():
            await flusher.flush_to(flusher.store.log_end_offset)
        for store in self.stores.values():
            store.close()
        if self.journal is not None:
            self.journal.close()
        if self.datadir is not None:
            self.datadir.close()

    async def _tick_loop(self) -> None:
        """Every timer of the cluster, through the core's one tick
        (`timers.tick`): at the deadline the core names
        (`ClusterState.next_deadline_ms`: group join, sync and session
        deadlines, transaction timeouts, the retention check), so a deadline
        a client computes to the millisecond is met, and at least every
        TICK_INTERVAL_S for the links' cadence (led partitions, link states,
        high watermarks). A call that may move a deadline earlier wakes this
        loop (`_timers_moved`)."""
        while not self._stopping:
            self._timers_changed.clear()
            deadline: int | None = None
            try:
                await self._tick(timers.tick(self.state, self.clock()))
                deadline = self.state.next_deadline_ms()
            except Exception:  # a timer failure must not stop future timers
                log.exception("tick failed")
            wait_s = TICK_INTERVAL_S
            if deadline is not None:
                # At least a millisecond: a deadline the core left in the past
                # (it fires what is due) must not spin this loop.
                wait_s = min(max(0.001, (deadline - self.clock()) / 1000), TICK_INTERVAL_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timers_changed.wait(), wait_s)

    async def _tick(self, ticking: Generator[Request, object, list[GroupReply]]) -> None:
        """The cluster's timers, once (`timers.tick`); the group replies go
        to the members waiting."""
        answer: object = None
        while True:
            try:
                request = ticking.send(answer)
            except StopIteration as stop:
                self._deliver(stop.value)
                return
            answer = None
            if isinstance(request, Execute):
                await self.execute(request.effects)
            elif isinstance(request, WakeWaiters):
                self.notify(request.partitions)

    def _timers_moved(self) -> None:
        self._timers_changed.set()

    def fire_due_group_timers(self) -> None:
        """Group deadlines already past fire before a group request is
        served, so an answer never shows what a timer due before it would
        have changed (a session that expired a moment ago)."""
        self._deliver(self.state.groups.tick(self.clock()))

    # -- effects ----------------------------------------------------------------

    async def execute(
        self, effects: Iterable[Effect], wait_durable: bool = True, refusable: bool = False
    ) -> None:
        """Carries out effects the core already applied to the model, in
        order, whole: a caller cancelled meanwhile (a link call whose remote
        went away) stops waiting, but the effects still run to their end and
        their durability still reaches the model (`made_durable`), else the
        model would hold appends its files never got, or records durable on
        disk that no reader may see until a restart.

        An append the disk refuses fails the call with STORAGE_ERROR
        (`_appends_not_stored`); with `refusable` (a link's round,
        `Execute.refusable`) the effects after it are still carried out but
        for their appends (a truncation the model already made must reach the
        disk too), and then the call fails."""
        effects = list(effects)
        cancelled = False

        async def make_durable(touched: dict[tuple[str, int], int]) -> None:
            nonlocal cancelled
            if self._durable_at_once(touched):
                return  # nothing to wait for: no task, no turn of the event loop
            flush = asyncio.ensure_future(self._make_durable(touched))
            while True:
                try:
                    await asyncio.shield(flush)
                    return
                except asyncio.CancelledError:
                    if flush.cancelled():
                        raise
                    cancelled = True  # re-raised once every effect is carried out

        try:
            await self._execute(effects, wait_durable, refusable, make_durable)
        finally:
            if cancelled:
                raise asyncio.CancelledError

    async def _execute(
        self,
        effects: list[Effect],
        wait_durable: bool,
        refusable: bool,
        make_durable: Callable[[dict[tuple[str, int], int]], Awaitable[None]],
    ) -> None:
        touched: dict[tuple[str, int], int] = {}
        refused: OSError | None = None
        skipped: list[Effect] = []
        for i, effect in enumerate(effects):
            if isinstance(effect, AppendBatch) and refused is not None:
                skipped.append(effect)
                continue
            if isinstance(effect, AppendBatch):
                key = (effect.topic_id, effect.partition)
                try:
                    # The core placed the batch (a copy of a cleaned log may jump
                    # offsets) and decided whether it starts a segment.
                    self.stores[key].append(
                        effect.batch, effect.header, gaps=True, roll=effect.roll
                    )
                except OSError as exc:
                    if touched:
                        await make_durable(touched)
                        touched = {}
                    if not refusable:
                        self._appends_not_stored(effects[i:], exc)
                    refused = exc
                    skipped.append(effect)
                    continue
                touched[key] = effect.header.next_offset
            elif isinstance(effect, Journal):
                if touched:
                    await make_durable(touched)
                    touched = {}
                self._journal([encode_record(r) for r in effect.records])
            elif isinstance(effect, CreateLogs):
                self._create_logs(effect)
            elif isinstance(effect, DeleteTopicData):
                for key in [k for k in self.stores if k[0] == effect.topic_id]:
                    self.stores.pop(key).close()
                    self.flushers.pop(key, None)
                assert self.datadir is not None
                self.datadir.remove_partition_dirs(effect.topic_id)
            elif isinstance(effect, DeleteBelow):
                store = self.stores.get((effect.topic_id, effect.partition))
                if store is not None:
                    if effect.roll:
                        store.roll_empty()
                    store.delete_segments_below(effect.offset)
            elif isinstance(effect, ResetLog | TruncateLog):
                key = (effect.topic_id, effect.partition)
                if touched.pop(key, None) is not None:
                    await make_durable({key: self.stores[key].log_end_offset})
                store = self.stores[key]
                if isinstance(effect, ResetLog):
                    store.reset(effect.offset)
                else:
                    store.truncate_to(effect.offset)
                flusher = self.flushers[key]
                flusher.durable_offset = min(flusher.durable_offset, store.log_end_offset)
                if isinstance(effect, ResetLog):
                    flusher.durable_offset = store.log_end_offset
        if touched:
            if wait_durable:
                await make_durable(touched)
            elif not self._durable_at_once(touched):
                task = asyncio.create_task(self._make_durable(touched))
                task.add_done_callback(_log_task_failure)
        if refused is not None:
            self._appends_not_stored(skipped, refused)

    def _appends_not_stored(self, rest: list[Effect], exc: OSError) -> NoReturn:
        """The disk refused an append (full, or a file too large): the model
        must not stay ahead of what is stored. Every partition this append and
        the appends after it went to is cut back to its stored log end, and
        the write fails with STORAGE_ERROR (Kafka's KAFKA_STORAGE_ERROR, which
        clients retry); once the disk takes writes again, they succeed."""
        names = {t.topic_id: t.name for t in self.state.topics.values()}
        cut: list[str] = []
        for effect in rest:
            if not isinstance(effect, AppendBatch) or effect.topic_id not in names:
                continue
            name, partition = names[effect.topic_id], effect.partition
            stored = self.stores[(effect.topic_id, partition)].log_end_offset
            if self.state.forget_unstored(name, partition, stored):
                cut.append(f"{name}-{partition}")
        log.warning(
            "the disk refused a write; the partitions it was for are back at what is stored",
            extra={"error": str(exc), "partitions": ",".join(cut)},
        )
        raise ClusterError(
            ErrorCode.STORAGE_ERROR,
            ",".join(cut) or "storage",
            f"the write was not stored ({exc.strerror or exc}); it can be retried",
        ) from exc

    def _create_logs(self, effect: CreateLogs) -> None:
        """Opens a new topic's partition logs; if the disk refuses any (no
        space, no descriptors), nothing of the topic is kept: its logs are
        closed and removed and the topic, whose journal record comes after
        this effect and so was never written, leaves the state."""
        try:
            for p in effect.partitions:
                self._open_store(effect.topic_id, p, effect.segment_bytes)
        except OSError as exc:
            name = self.state.discard_unjournalled_topic(effect.topic_id)
            for key in [k for k in self.stores if k[0] == effect.topic_id]:
                self.flushers.pop(key, None)
                with contextlib.suppress(OSError):
                    self.stores.pop(key).close()
            assert self.datadir is not None
            try:
                self.datadir.remove_partition_dirs(effect.topic_id)
            except OSError as cleanup:
                # What the disk would not let go of now is an orphan of a topic
                # the journal never had: removed at the next start.
                log.warning(
                    "partition directories of a topic not created are left until restart",
                    extra={"topic": name, "error": str(cleanup)},
                )
            log.warning(
                "topic not created: its partition logs could not be opened",
                extra={"topic": name, "error": str(exc)},
            )
            raise ClusterError(
                ErrorCode.STORAGE_ERROR,
                f"topic {name!r}",
                f"topic {name!r} was not created: its partition logs could not be opened "
                f"({exc.strerror or exc})",
            ) from exc

    async def _make_durable(self, touched: dict[tuple[str, int], int]) -> None:
        names = {t.topic_id: t.name for t in self.state.topics.values()}
        # Each result paired with its own partition: one with no flusher (its
        # store gone meanwhile) is left out of both, never shifting the rest.
        keys = [key for key in touched if key in self.flushers]
        flushing = [self.flushers[key].flush_to(touched[key]) for key in keys]
        # One partition (a produce, most link rounds) is awaited in place:
        # gathering wraps it in a task, a turn of the event loop later.
        results = [await flushing[0]] if len(flushing) == 1 else await asyncio.gather(*flushing)
        self._made_durable(names, zip(keys, results, strict=True))

    def _durable_at_once(self, touched: dict[tuple[str, int], int]) -> bool:
        """`_make_durable` when no partition has an fsync to wait for (none
        configured, or what was written is durable already): done at once,
        with nothing to await. False (nothing done): an fsync is needed."""
        flushers = [(key, offset, self.flushers.get(key)) for key, offset in touched.items()]
        if any(f is not None and f.fsync and f.durable_offset < o for _, o, f in flushers):
            return False
        durable = [
            (key, f.durable_at_once(offset)) for key, offset, f in flushers if f is not None
        ]
        names = {t.topic_id: t.name for t in self.state.topics.values()}
        self._made_durable(names, ((key, d) for key, d in durable if d is not None))
        return True

    def _made_durable(
        self, names: dict[str, str], durable: Iterable[tuple[tuple[str, int], int]]
    ) -> None:
        marks = [
            (names[topic_id], partition, offset)
            for (topic_id, partition), offset in durable
            if topic_id in names
        ]
        wake = self.state.made_durable(marks)
        if wake is not None:
            self.notify(wake.partitions)

    def refresh_high_watermarks(self) -> None:
        """Re-applies HW limits (a follower acknowledged, a link changed state
        or mode, a follower topic became writable) and wakes waiters."""
        if self.state.refresh_high_watermarks():
            self.notify()

    async def wait_high_watermarks(
        self,
        targets: dict[tuple[str, int], int],
        what: str,
        marks: dict[tuple[str, int], WaitMark] | None = None,
        wait_ms: int = HW_WAIT_MAX_MS,
    ) -> None:
        """Waits until every partition's HW reaches its target offset: a SYNC
        link in IN_SYNC holds it until its followers have the records, or until
        it drops OUT_OF_SYNC (link.replica.lag.time.max.ms). Bounded by
        `wait_ms` (at most HW_WAIT_MAX_MS): then REQUEST_TIMED_OUT (indefinite:
        the records are written here and may yet replicate)."""
        if self.state.faults.plants(PlantedBug.ACK_BEFORE_REPLICATE):
            return  # the planted bug: acknowledge without waiting for followers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        if marks is None:
            marks = self.state.wait_marks(targets)
        while True:
            event = self.long_polls.park(targets)
            try:
                pending = self.state.unmet_high_watermarks(targets, marks, what)
                if not pending:
                    return
                remaining = deadline - loop.time()
                if remaining <= 0 or self._stopping:
                    t, p, target = pending[0]
                    raise ClusterError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{t}-{p}",
                        f"{what}: partition {t}-{p} is written up to {target} here, but its "
                        f"high watermark stayed at {self.state.partition(t, p).high_watermark} "
                        f"for {wait_ms} ms (a SYNC link's followers have not "
                        "acknowledged it)",
                    )
                await self.long_polls.wait(event, remaining)
            finally:
                self.long_polls.unpark(event)

    def _journal(self, records: list[dict[str, Any]]) -> None:
        assert self.journal is not None
        self.journal.append(records)
        snapshot = self._journal_book.stored(records)
        if snapshot is not None:
            self.journal.write_snapshot(snapshot)
            self._journal_book.snapshot_written(snapshot)

    def notify(self, moved: Iterable[tuple[str, int]] | None = None) -> None:
        """High watermarks moved on `moved` (None: anywhere): wake the long
        polls watching them."""
        self.long_polls.notify(moved)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def cleaner_view(self, topic: Topic, partition: int) -> cleaner.CleanerView | None:
        """The log cleaner's state of a compacted topic's partition (None: not compacted)."""
        store = self.stores.get((topic.topic_id, partition))
        if not topic.config.compact or store is None:
            return None
        log_ = topic.partitions[partition]
        return cleaner.view(log_, topic.config, store.active_base_offset, self.clock())

    def check_ready(self) -> None:
        if not self.ready:
            raise ClusterError(
                ErrorCode.NOT_READY,
                "cluster",
                f"cluster {self.cluster_id!r} is not serving (starting or stopping)",
            )

    # -- topics -------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.check_ready()
        _topic, effects = self.state.create_topic(
            name, partitions, configs, self.topic_id_factory()
        )
        await self.execute(effects)

    async def delete_topic(self, name: str) -> None:
        self.check_ready()
        partitions = len(self.state.topic(name).partitions)
        await self.execute(self.state.delete_topic(name))
        # Writes waiting on its high watermarks fail now (UNKNOWN_TOPIC).
        self.notify((name, p) for p in range(partitions))

    async def alter_topic_configs(self, name: str, set_: dict[str, str], delete: list[str]) -> None:
        self.check_ready()
        _topic, effects = self.state.alter_configs(name, set_, delete)
        await self.execute(effects)

    async def alter_broker_configs(
        self, level: str, set_: dict[str, str], delete: list[str], *, replace: bool = False
    ) -> None:
        """Dynamic broker configs, journalled; they take effect at once (the
        topics' defaults, the log cleaner's backoff)."""
        self.check_ready()
        await self.execute(self.state.alter_broker_configs(level, set_, delete, replace=replace))
        self.apply_broker_configs()

    def apply_broker_configs(self) -> None:
        """The shell's part of the broker configs: the log cleaner's backoff
        (log.cleaner.backoff.ms when set, else the daemon's option)."""
        backoff = self.state.broker_configs.cleaner_backoff_ms(str(BROKER_ID))
        wanted = backoff if backoff is not None else self._cleaner_backoff_ms
        if self.cleaner.settings.backoff_ms != wanted:
            self.cleaner.settings = dataclasses.replace(
                self.cleaner.settings, backoff_ms=max(1, wanted)
            )

    async def alter_group_configs(
        self, group: str, set_: dict[str, str], delete: list[str], *, replace: bool = False
    ) -> None:
        self.check_ready()
        await self.execute(self.state.alter_group_configs(group, set_, delete, replace=replace))

    async def create_partitions(self, name: str, total: int) -> None:
        self.check_ready()
        _topic, effects = self.state.create_partitions(name, total)
        await self.execute(effects)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        self.check_ready()
        low, effects = self.state.delete_records(topic, partition, offset)
        await self.execute(effects)
        return low

    async def unclean_election(
        self, topic: str, partition: int, truncate_to: int
    ) -> tuple[int, int, int]:
        """Emulated fault: (records removed, new leader epoch, log end offset)."""
        self.check_ready()
        removed, epoch, effects = self.state.unclean_election(topic, partition, truncate_to)
        await self.execute(effects)
        log.warning(
            "unclean leader election emulated",
            extra={"topic": topic, "partition": partition, "removed": removed, "epoch": epoch},
        )
        return removed, epoch, self.state.partition(topic, partition).log_end_offset

    # -- produce ------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        acks: int,
        transactional_id: str = "",
        timeout_ms: int = 0,
    ) -> tuple[int, bool, int, int]:
        """Returns (base offset, duplicate, log start offset, log append time).
        `timeout_ms` bounds an acks=all wait for followers (`produce_wait_ms`)."""
        self.check_ready()
        if acks not in (0, 1, -1):
            raise ClusterError(
                ErrorCode.INVALID_REQUIRED_ACKS,
                f"{topic}-{partition}",
                f"acks={acks} is invalid: use 0, 1 or -1 (all)",
            )
        received_ns = time.time_ns() if ack_trace.ON else 0
        result = self.state.produce(topic, partition, batch, transactional_id, self.clock())
        targets, marks = self.state.write_marks(result.effects)  # as written, before any wait
        await self.execute(result.effects, wait_durable=acks != 0)
        traced = ack_trace.ON and acks == -1 and bool(targets) and not result.duplicate
        if traced:
            end = targets.get((topic, partition), result.base_offset + 1)
            ack_trace.hop("produce.received", topic, partition, result.base_offset, end,
                          received_ns)  # fmt: skip
            ack_trace.hop("produce.written", topic, partition, result.base_offset, end)
        if acks == -1 and targets:
            in_sync = [
                name
                for name, verdict in self.state.links.sync_links_leading(topic)
                if verdict is LinkState.IN_SYNC
            ]
            durable = time.perf_counter()
            await self.wait_high_watermarks(
                targets, f"produce to {topic}", marks, produce_wait_ms(timeout_ms)
            )
            self.metrics.sync_acked(in_sync, time.perf_counter() - durable)
            if traced:
                ack_trace.hop("produce.acked", topic, partition, result.base_offset, end)
        if result.duplicate and acks != 0:
            # A repeat is acknowledged only once the original is durable too.
            key = (self.state.topic(topic).topic_id, partition)
            flusher = self.flushers.get(key)
            if flusher is not None:
                await self._make_durable({key: self.stores[key].log_end_offset})
        return (
            result.base_offset,
            result.duplicate,
            result.log_start_offset,
            result.log_append_time_ms,
        )

    # -- fetch --------------------------------------------------------------------

    def _read_once(
        self,
        parts: Sequence[tuple[str, int, int, int]],
        read_committed: bool,
        max_bytes: int,
        group_id: str = "",
    ) -> tuple[list[FetchedData], int, bool]:
        out: list[FetchedData] = []
        total = 0
        errors = False
        for topic, partition, offset, part_max in parts:
            try:
                plan = self.state.plan_fetch(topic, partition, offset, read_committed, group_id)
                topic_id = self.state.topic(topic).topic_id
                budget = max(0, min(part_max, max_bytes - total))
                data = b""
                if plan.upper_offset > plan.offset and (budget > 0 or total == 0):
                    data = self.stores[(topic_id, partition)].read(
                        plan.offset, plan.upper_offset, max(budget, 1)
                    )
                total += len(data)
                out.append(
                    FetchedData(
                        topic,
                        partition,
                        None,
                        plan.high_watermark,
                        plan.last_stable_offset,
                        plan.log_start_offset,
                        data,
                        plan.aborted,
                    )
                )
            except ClusterError as exc:
                errors = True
                out.append(FetchedData(topic, partition, exc))
        return out, total, errors

    async def fetch(
        self,
        parts: Sequence[tuple[str, int, int, int]],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        read_committed: bool,
        group_id: str = "",
    ) -> list[FetchedData]:
        """parts: (topic, partition, offset, max bytes). Waits up to max_wait_ms for
        min_bytes, as Kafka's fetch does."""
        self.check_ready()
        max_wait_ms = max(0, min(max_wait_ms, MAX_FETCH_WAIT_MS))
        max_bytes = MAX_FETCH_BYTES if max_bytes <= 0 else min(max_bytes, MAX_FETCH_BYTES)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_ms / 1000
        watch = [(topic, partition) for topic, partition, _, _ in parts]
        while True:
            event = self.long_polls.park(watch)
            try:
                out, total, errors = self._read_once(parts, read_committed, max_bytes, group_id)
                remaining = deadline - loop.time()
                if total >= max(min_bytes, 1) or errors or remaining <= 0 or self._stopping:
                    return out
                await self.long_polls.wait(event, remaining)
            finally:
                self.long_polls.unpark(event)

    async def list_offsets(
        self, topic: str, partition: int, spec: str, timestamp: int, read_committed: bool
    ) -> OffsetLookup:
        self.check_ready()
        lookup = self.state.list_offsets(topic, partition, spec, timestamp, read_committed)
        if lookup.refine_batch_offset is None:
            return lookup
        topic_id = self.state.topic(topic).topic_id
        data = self.stores[(topic_id, partition)].read(
            lookup.refine_batch_offset, lookup.refine_batch_offset + 1, 1
        )
        try:
            _header, records = rb.decode_records(data)
        except rb.CorruptBatchError as exc:  # stored before records were checked
            raise ClusterError(
                ErrorCode.CORRUPT_MESSAGE,
                f"{topic}-{partition}",
                f"partition {topic}-{partition}: the batch at {lookup.refine_batch_offset} "
                f"cannot be read: {exc}",
            ) from exc
        offset, ts = pick_offset_in_batch(records, timestamp if spec == "timestamp" else None)
        return OffsetLookup(offset, ts, lookup.leader_epoch)

    # -- producers and transactions -------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        self.check_ready()
        pid, epoch, effects = self.state.init_producer_id(
            transactional_id, timeout_ms, self.clock(), expected
        )
        await self.execute(effects)
        return pid, epoch

    async def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> None:
        self.check_ready()
        await self.execute(
            self.state.add_partitions_to_txn(
                transactional_id, producer_id, epoch, partitions, self.clock()
            )
        )
        self._timers_moved()  # a transaction may have begun: its timeout is armed

    async def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> None:
        self.check_ready()
        await self.execute(
            self.state.add_offsets_to_txn(
                transactional_id, producer_id, epoch, group_id, self.clock()
            )
        )
        self._timers_moved()

    async def txn_offset_commit(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        epoch: int,
        offsets: dict[tuple[str, int], tuple[int, str, int]],
    ) -> None:
        self.check_ready()
        await self.execute(
            self.state.txn_offset_commit(
                transactional_id, group_id, producer_id, epoch, offsets, self.clock()
            )
        )

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> None:
        self.check_ready()
        effects = self.state.end_txn(transactional_id, producer_id, epoch, commit, self.clock())
        markers, marks = self.state.write_marks(effects)  # as written, before any wait
        await self.execute(effects)
        if commit:
            await self.wait_high_watermarks(markers, f"commit of {transactional_id!r}", marks)

    # -- consumer groups ----------------------------------------------------------------

    def _deliver(self, replies: list[GroupReply]) -> None:
        for reply in replies:
            fut = self._group_waiters.pop(reply.request_id, None)
            if fut is None or fut.done():
                continue
            if isinstance(reply.result, ClusterError):
                fut.set_exception(reply.result)
            else:
                fut.set_result(reply.result)

    async def _wait_group(
        self, request_id: int, replies: list[GroupReply], timeout_ms: int
    ) -> JoinResult | SyncResult:
        fut: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        self._group_waiters[request_id] = fut
        self._deliver(replies)
        try:
            return await asyncio.wait_for(
                asyncio.shield(fut), timeout=(timeout_ms + GROUP_CALL_MARGIN_MS) / 1000
            )
        except TimeoutError as exc:
            raise ClusterError(
                ErrorCode.REQUEST_TIMED_OUT,
                "group call",
                "group call timed out waiting for the rebalance",
            ) from exc
        finally:
            if not fut.done():
                self._group_waiters.pop(request_id, None)
                self.state.groups.cancel(request_id)

    def _request_id(self) -> int:
        rid = self._next_request_id
        self._next_request_id += 1
        return rid

    async def join_group(self, request: JoinRequest) -> JoinResult:
        self.check_ready()
        self.fire_due_group_timers()
        rid = self._request_id()
        replies = self.state.groups.join(rid, request, self.clock())
        self._timers_moved()
        result = await self._wait_group(
            rid, replies, max(request.rebalance_timeout_ms, request.session_timeout_ms)
        )
        assert isinstance(result, JoinResult)
        return result

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes] | None,
    ) -> SyncResult:
        self.check_ready()
        self.fire_due_group_timers()
        rid = self._request_id()
        replies = self.state.groups.sync(
            rid, group_id, generation_id, member_id, assignments, self.clock()
        )
        self._timers_moved()
        result = await self._wait_group(rid, replies, 300_000)
        assert isinstance(result, SyncResult)
        return result

    def heartbeat(self, group_id: str, generation_id: int, member_id: str) -> None:
        self.check_ready()
        self.fire_due_group_timers()
        self.state.groups.heartbeat(group_id, generation_id, member_id, self.clock())

    def leave_group(self, group_id: str, member_id: str) -> None:
        self.check_ready()
        self.fire_due_group_timers()
        self._deliver(self.state.groups.leave(group_id, member_id, self.clock()))
        self._timers_moved()

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: dict[tuple[str, int], tuple[int, str, int]],
    ) -> None:
        self.check_ready()
        self.fire_due_group_timers()
        await self.execute(
            self.state.commit_group_offsets(
                group_id, generation_id, member_id, offsets, self.clock()
            )
        )

    async def delete_group(self, group_id: str) -> None:
        self.check_ready()
        self.fire_due_group_timers()
        await self.execute(self.state.delete_group(group_id))

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        self.check_ready()
        self.fire_due_group_timers()
        await self.execute(self.state.delete_group_offsets(group_id, partitions))

    # -- validation only (Kafka's validate_only requests) ---------------------------------

    def check_create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.check_ready()
        self.state.check_create_topic(name, partitions, configs)

    def check_alter_topic_configs(
        self, name: str, set_: dict[str, str], delete: list[str] | None = None
    ) -> None:
        self.check_ready()
        self.state.check_alter_configs(name, set_, delete or ())

    def check_broker_configs(
        self, level: str, set_: dict[str, str], delete: list[str], *, replace: bool = False
    ) -> None:
        self.check_ready()
        self.state.check_broker_configs(level, set_, delete, replace=replace)

    def check_group_configs(
        self, group: str, set_: dict[str, str], delete: list[str], *, replace: bool = False
    ) -> None:
        self.check_ready()
        self.state.check_group_configs(group, set_, delete, replace=replace)

    def check_create_partitions(self, name: str, total: int) -> None:
        self.check_ready()
        self.state.check_create_partitions(name, total)

    # -- namespaces ------------------------------------------------------------------------

    async def create_namespace(
        self, resource_type: ResourceType | int, prefix: str, reserved: bool
    ) -> Namespace:
        self.check_ready()
        await self.execute(self.state.create_namespace(resource_type, prefix, reserved))
        return self.state.namespaces.get(resource_type, prefix)

    async def delete_namespace(self, resource_type: ResourceType | int, prefix: str) -> None:
        self.check_ready()
        await self.execute(self.state.delete_namespace(resource_type, prefix))

    # -- ACLs ---------------------------------------------------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> list[ClusterError | None]:
        self.check_ready()
        results, effects = self.state.create_acls(bindings)
        await self.execute(effects)
        return results

    async def delete_acls(self, filters: list[AclFilter]) -> list[list[AclBinding] | ClusterError]:
        self.check_ready()
        results, effects = self.state.delete_acls(filters)
        await self.execute(effects)
        return results

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        self.check_ready()
        return self.state.describe_acls(acl_filter)

    # -- SCRAM users ------------------------------------------------------------------

    async def alter_scram_credentials(
        self, deletions: list[Deletion], upsertions: list[Upsertion]
    ) -> dict[str, UserError | None]:
        self.check_ready()
        results, effects = self.state.alter_scram_credentials(deletions, upsertions)
        await self.execute(effects)
        return results

    def describe_scram_credentials(
        self, names: list[str] | None
    ) -> list[tuple[str, UserError | None, list[tuple[ScramMechanism, int]]]]:
        self.check_ready()
        return self.state.users.describe(names)

    async def set_user_password(self, name: str, password: str, iterations: int) -> bool:
        """Gives `name` SCRAM-SHA-256 and -512 credentials for `password`
        (fresh random salts) unless its stored ones verify it; True if it
        changed anything. Called at start (--sasl-users), after `open`."""
        salts = {m: os.urandom(32) for m in SCRAM_MECHANISMS}
        effects = self.state.set_user_password(name, password, salts, iterations)
        await self.execute(effects)
        return bool(effects)


def _log_task_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background flush failed", exc_info=task.exception())
