"""One MirrorMaker 2 flow (source -> target) over Kafka clients: the imperative shell.

Rules (every decision is the core's, linkd/core/mirror; this module only does I/O):
- Topics: every `refresh.topics.interval.seconds` the source and target topic
  listings go to `plan_remote_topics`; the plan's topics are created (with
  `remote_topic_configs` of their source topic's configs, described first) or
  grown on the target, and every partition of a mirrored topic is assigned to
  the source consumer at its resume position. A remote topic never holds a
  record under the target's default configs: the first copy may come before
  the first config sync, and a default retention would delete records whose
  timestamps are older than it.
- Copy: records are produced to the remote topic, same partition, with key,
  value, headers and timestamp; offsets are not preserved. Batches are
  pipelined: a poll batch is produced without waiting for the previous one's
  acknowledgements. One delivery callback per partition (made once) only notes
  each report's downstream offset; the producer reports a partition's records
  in produce order, so reports are matched to the produced records by position,
  a run per partition at a time (by slicing). Acknowledged runs
  go to the metrics and to `OffsetSyncWriter`
  (`on_records_acknowledged`), whose syncs are produced to the offset-syncs
  topic (partition 0); its `tick` runs the `offset.flush.interval.ms` flush.
- At-least-once (default): the mirror's source group
  (`connect-mirror-<source>-<target>`, excluded from checkpoints by MM2's
  default group filter) commits on the SOURCE cluster, as Connect's offset
  commit does: every `offset.flush.interval.ms`, asynchronously, one past the
  newest ACKNOWLEDGED record of each partition (never ahead of what the target
  holds); synchronously when a once-run ends and when the flow stops. A failed
  delivery rewinds the partition to the failed record; reports of the records
  produced after it are ignored, and those records are copied again
  (duplicates possible, loss not).
- Exactly-once (`<target>.exactly.once.source.support=enabled`): a transaction
  on the target holds records and their source offsets (`transaction_offsets`:
  per partition the last upstream offset it holds), written to
  `mm2-offsets.<source>.internal` in Connect's format. It begins with the first
  record polled; after each poll `transaction_commit_due` says whether it
  commits (`transaction.boundary`: every poll, or several polls up to the
  interval or a poll that finds no backlog). Delivery reports are served at
  every step, as in at-least-once mode, but handled (records counted, offset
  syncs) only after the commit: the commit's flush then waits for the last
  records' acknowledgements only. Offset syncs are produced after the commit.
  A failed report aborts the transaction at the next poll. An aborted
  transaction (a failed commit or delivery, a begin or produce refused) rewinds
  every partition to the first record it held there, or was polled for it: a
  poll's records are taken from the consumer before they are produced. A
  partition none of whose records was polled since the last commit is still
  at its committed position. Stopping commits
  the open transaction. A restart reads that topic read_committed and resumes
  through `restart_from_committed`.
- Start-up waits for nothing but answers: each consumer fetches the metadata of
  the topics it is about to be assigned first (else it waits for its next
  metadata refresh before it resolves OFFSET_BEGINNING). The first topic
  refresh (remote topics, the source consumer's assignment) comes right after
  the clients are made (exactly-once: after the committed offsets are read), so
  the consumer fetches while the internal topics are set up; one listing per
  cluster serves both. Topics the heartbeat tasks create on the source meanwhile
  are added without listing the source again (`source_topics_created`). A new
  offset-syncs topic (nothing to load) is first read when checkpoints are. The
  first step copies before any admin work that is due (the refresh start did
  is an interval away).
- Checkpoints: the offset-syncs topic is read into `OffsetSyncStore` (marked
  read-to-end at the first end of partition) at start and, from where the last
  read ended, before each emission: its consumer is assigned only while it
  reads; every `emit.checkpoints.interval`
  each source group passing the group filter goes through
  `checkpoints_for_flow`; new checkpoints are written to
  `<source>.checkpoints.internal` on the target. The tracker is reloaded from
  that topic at start.
- KIP-545: every `sync.group.offsets.interval` the tracker's offsets and the
  target groups go through `plan_group_offset_sync`; only its writes happen.
- Config and ACL sync: `target_config_sync` and `plan_acl_sync` on their
  intervals. A cluster that cannot describe ACLs disables ACL sync for the flow,
  reported once.
- Every wait is bounded by a deadline; every loop by a count.

Ends of partitions are known from the consumer's end-of-partition events, never
from watermark queries (some brokers answer those wrongly).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

from linkd.core.mirror.checkpoint import (
    CheckpointCounts,
    CheckpointTracker,
    checkpoints_for_flow,
    plan_group_offset_sync,
)
from linkd.core.mirror.config import MirrorFlow, MirrorMakerConfig
from linkd.core.mirror.exactly_once import (
    CommittedMirrorState,
    offsets_topic,
    restart_from_committed,
    transaction_commit_due,
    transaction_offsets,
    transactional_id,
)
from linkd.core.mirror.heartbeat import HeartbeatSchedule
from linkd.core.mirror.metrics import CheckpointMetricKey, MirrorMetrics, SourceMetricKey
from linkd.core.mirror.model import Checkpoint, OffsetSync, TopicPartition
from linkd.core.mirror.offset_sync import OffsetSyncWriter
from linkd.core.mirror.sync_store import OffsetSyncStore
from linkd.core.mirror.topic_sync import (
    plan_acl_sync,
    plan_remote_topics,
    remote_topic_configs,
    should_replicate_topic,
    target_config_sync,
)
from linkd.core.mirror.wire import (
    SOURCE_CONNECTOR_NAME,
    MirrorWireError,
    decode_checkpoint,
    decode_offset_sync,
    decode_source_offset,
    encode_checkpoint,
    encode_heartbeat,
    encode_offset_sync,
    encode_source_offset,
)
from mirror.admin_ops import ClusterAdmin, MirrorClientError
from mirror.clients import ClientConfigs
from mirror.internal_topics import CompactionNotices, create_internal_topic

__all__ = ["FlowEngine", "FlowStats", "HeartbeatTask", "Reporter", "wall_clock_ms"]

Reporter = Callable[[str], None]
Clock = Callable[[], int]

FLUSH_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 30.0
# A drain reads at most this many records per call before giving up.
MAX_DRAIN_RECORDS = 10_000_000
# A drain's consume call returns after this long when fewer than its batch arrived:
# an end-of-partition event does not end the call, so this is its delay.
DRAIN_POLL_S = 0.01
# Bounded pumping of offset-sync completions per step.
MAX_SYNC_PUMP_ROUNDS = 1_000
# A route's list of records in flight is compacted once this many were handled.
COMPACT_AFTER = 65_536
# How long a produce waits for room when the producer's queue is full.
QUEUE_FULL_WAIT_S = 0.05


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _tp(msg: Message) -> TopicPartition:
    return TopicPartition(str(msg.topic()), int(msg.partition() or 0))


def _headers(raw: list[tuple[str, Any]]) -> list[tuple[str, str | bytes | None]] | None:
    """A consumed record's headers as they are produced: a null value is copied as
    empty (the mirror's records carry bytes); no headers as None."""
    out: list[tuple[str, str | bytes | None]] = []
    for name, value in raw:
        data = value.encode("utf-8") if isinstance(value, str) else (value or b"")
        out.append((str(name), bytes(data)))
    return out or None


class _Route:
    """One assigned source partition: where its records go, which of them are in
    flight and the delivery reports not yet handled.

    Records produced are kept by position: `inflight[head:]` are the upstream
    offsets (and `inflight_ts` the timestamps) of the records whose reports were
    not handled yet, in produce order. The producer reports a partition's records
    in produce order, so the i-th report not yet handled belongs to
    `inflight[head + i]`: a report only appends the downstream offset, and the
    matching is done a run at a time by slicing (`take_reports`)."""

    __slots__ = (
        "acked_next",
        "committed_next",
        "downs",
        "failures",
        "head",
        "inflight",
        "inflight_ts",
        "key",
        "on_delivery",
        "partition",
        "polled_bytes",
        "remote",
        "stale",
        "touched",
        "tp",
        "txn_first",
        "txn_last",
    )

    def __init__(
        self, tp: TopicPartition, remote: str, target_alias: str, touched: list[_Route]
    ) -> None:
        self.tp = tp
        self.partition = tp.partition
        self.remote = remote
        self.key = SourceMetricKey(target_alias, remote, tp.partition)
        self.touched = touched  # the engine's list of routes with reports to handle
        self.inflight: list[int] = []  # upstream offsets produced, from `head` on unhandled
        self.inflight_ts: list[int] = []  # their timestamps
        self.head = 0
        self.downs: list[int] = []  # reports not handled yet: downstream offsets (-1: failed)
        self.failures: list[tuple[int, str]] = []  # (index in `downs`, error) of failed ones
        self.stale = 0  # reports still due for records produced before a rewind
        self.polled_bytes = 0  # value bytes of the records polled in this batch
        self.acked_next = -1  # one past the newest acknowledged upstream offset
        self.committed_next = -1  # what was last committed on the source
        # Exactly-once: the first and last upstream offsets in the open transaction.
        self.txn_first = -1
        self.txn_last = -1
        # One bound method for every record of the partition, made once.
        self.on_delivery = self.delivered

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        """The producer's delivery report of this partition's next record."""
        downs = self.downs
        if not downs:
            self.touched.append(self)
        if err is None:
            downs.append(msg.offset())  # type: ignore[arg-type]  # set once acknowledged
        else:
            self.failures.append((len(downs), str(err)))
            downs.append(-1)

    def busy(self) -> bool:
        """Records produced whose reports were not handled yet."""
        return len(self.inflight) > self.head or self.stale > 0 or bool(self.downs)

    def unreported(self) -> int:
        """Records produced whose reports have not arrived."""
        return len(self.inflight) - self.head + self.stale - len(self.downs)

    def take_reports(self) -> tuple[list[int], list[int], list[int], int, str]:
        """The reports that arrived, matched to their records: the acknowledged run
        (upstream offsets, downstream offsets, timestamps) and, if a record failed,
        its upstream offset and error (else -1, ""). A failure ends the run: the
        records produced after it are forgotten, and their reports, arrived or not,
        are ignored (they are copied again after the rewind)."""
        downs, self.downs = self.downs, []
        failures = self.failures
        if failures:
            self.failures = []
        skip = 0
        if self.stale:
            skip = min(self.stale, len(downs))
            self.stale -= skip
        h = self.head
        # More reports than records: those of forgotten records (an aborted transaction).
        n = min(len(downs) - skip, len(self.inflight) - h)
        if n <= 0:
            return [], [], [], -1, ""
        failed = next(((i - skip, e) for i, e in failures if skip <= i < skip + n), None)
        acked = n if failed is None else failed[0]
        ups = self.inflight[h : h + acked]
        stamps = self.inflight_ts[h : h + acked]
        acked_downs = downs[skip : skip + acked] if skip or acked < len(downs) else downs
        if failed is None:
            self.head = h + n
            if self.head == len(self.inflight):
                self.inflight.clear()
                self.inflight_ts.clear()
                self.head = 0
            elif self.head >= COMPACT_AFTER:
                del self.inflight[: self.head]
                del self.inflight_ts[: self.head]
                self.head = 0
            return ups, acked_downs, stamps, -1, ""
        failed_at = self.inflight[h + acked]
        produced_after = len(self.inflight) - (h + acked + 1)
        reported_after = len(downs) - skip - acked - 1
        self.stale += max(0, produced_after - reported_after)
        self.inflight.clear()
        self.inflight_ts.clear()
        self.head = 0
        return ups, acked_downs, stamps, failed_at, failed[1]

    def reset(self) -> None:
        self.inflight.clear()
        self.inflight_ts.clear()
        self.head = 0
        self.stale = 0
        self.downs, self.failures = [], []
        self.txn_first = self.txn_last = -1


@dataclass
class FlowStats(CheckpointCounts):
    """Counts a run reports (MM2's metrics are in `FlowEngine.metrics`)."""

    records_copied: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    offset_syncs_sent: int = 0
    topics_created: int = 0
    configs_altered: int = 0
    acls_created: int = 0
    delivery_failures: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int)}


def know_topics(consumer: Consumer, topics: Iterable[str]) -> None:
    """Fetch the metadata of `topics` into the consumer before it is assigned them.

    A consumer assigned a partition of a topic it has no metadata for waits for its
    next metadata refresh before it resolves a logical offset (OFFSET_BEGINNING)
    and fetches: about 0.5-1 s of start-up, where asking first takes one round trip.
    """
    names = sorted(set(topics))
    if len(names) == 1:
        consumer.list_topics(names[0], timeout=FLUSH_TIMEOUT_S)
    elif names:
        consumer.list_topics(timeout=FLUSH_TIMEOUT_S)


def drain(
    consumer: Consumer,
    partitions: Iterable[TopicPartition],
    handle: Callable[[Message], None],
    *,
    min_next_offsets: Mapping[TopicPartition, int] | None = None,
    timeout_s: float = DRAIN_TIMEOUT_S,
) -> bool:
    """Read `partitions` to their end (and at least up to `min_next_offsets`).

    True when every partition reached its end in time; records go to `handle`.
    """
    wanted = set(partitions)
    need = dict(min_next_offsets or {})
    at_end: set[TopicPartition] = set()
    deadline = time.monotonic() + timeout_s
    seen = 0
    while wanted - at_end and time.monotonic() < deadline and seen < MAX_DRAIN_RECORDS:
        for msg in consumer.consume(500, DRAIN_POLL_S):
            tp = _tp(msg)
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and int(msg.offset() or 0) >= need.get(
                    tp, 0
                ):
                    at_end.add(tp)
                continue
            seen += 1
            at_end.discard(tp)
            handle(msg)
    return not (wanted - at_end)


class FlowEngine:
    """MirrorSourceTask + MirrorCheckpointTask of one flow, as one bounded loop."""

    def __init__(
        self,
        config: MirrorMakerConfig,
        flow: MirrorFlow,
        *,
        clock: Clock = wall_clock_ms,
        report: Reporter = print,
        poll_timeout_s: float = 0.05,
        notices: CompactionNotices | None = None,
        client_logger: Any = None,
    ) -> None:
        self.flow = flow
        self.clock = clock
        self.report = report
        # Shared by the flows of one run: a cluster that does not compact is said once.
        self.notices = notices if notices is not None else CompactionNotices(report)
        self.poll_timeout_s = poll_timeout_s
        self.source = ClientConfigs(config.cluster(flow.source), logger=client_logger)
        self.target = ClientConfigs(config.cluster(flow.target), logger=client_logger)
        self.exactly_once = flow.exactly_once
        self.metrics = MirrorMetrics()
        self.stats = FlowStats()
        self.store = OffsetSyncStore()
        self.tracker = CheckpointTracker()
        now = clock()
        self.writer = OffsetSyncWriter(flow.offset_lag_max, flow.offset_flush_interval_ms, now)
        self.group_id = f"connect-mirror-{flow.source}-{flow.target}"
        self.syncs_on_source = flow.offset_syncs_topic_location == "source"
        self.syncs_topic = flow.offset_syncs_topic()
        self.offsets_topic = offsets_topic(flow.source)
        # source partition -> remote topic name, for every assigned partition
        self.assigned: dict[TopicPartition, str] = {}
        self.at_end: set[TopicPartition] = set()
        self.committed_source_offsets: dict[TopicPartition, int] = {}
        # (source topic, partition) -> its route, for every assigned partition
        self._routes: dict[tuple[str, int], _Route] = {}
        self._touched: list[_Route] = []  # routes with delivery reports to handle
        self._next_commit_ms = now + flow.offset_flush_interval_ms
        self._sync_completions = 0
        self._next_sync_offset = 0  # one past the newest offset sync this engine wrote
        self._acls_supported = True
        self._next_refresh_ms = now
        self._next_checkpoint_ms = now + flow.emit_checkpoints_interval_ms
        self._next_group_sync_ms = now + flow.sync_group_offsets_interval_ms
        self._next_config_sync_ms = now
        self._next_acl_sync_ms = now
        self._started = False
        # The clusters' topics as the start-up listed them (True: the source).
        self._listings: dict[bool, dict[str, int]] = {}
        # Exactly-once: whether a transaction is open and its records.
        self._txn_open = False
        self._txn_records = 0
        self._last_commit_ms = now  # Connect's interval boundary counts from here
        # Where the next read of the offset-syncs topic starts: one past the last sync read.
        self._syncs_next = OFFSET_BEGINNING
        self._syncs_known = False  # whether the sync consumer has the topic's metadata
        self._source_admin: ClusterAdmin | None = None
        self._target_admin: ClusterAdmin | None = None
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._sync_producer: Producer | None = None
        self._checkpoint_producer: Producer | None = None
        self._sync_consumer: Consumer | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.flow.name

    def _admin(self, on_source: bool) -> ClusterAdmin:
        admin = self._source_admin if on_source else self._target_admin
        if admin is None:
            raise MirrorClientError(f"flow {self.name} is not started")
        return admin

    def start(self) -> None:
        flow = self.flow
        timeout = flow.admin_timeout_ms
        self._source_admin = ClusterAdmin(flow.source, self.source.admin(), timeout)
        self._target_admin = ClusterAdmin(flow.target, self.target.admin(), timeout)
        syncs_clients = self.source if self.syncs_on_source else self.target
        # The clients are made first: they connect while the topics are set up.
        self._consumer = Consumer(self.source.consumer(self.group_id))
        self._sync_producer = Producer(syncs_clients.producer())
        self._checkpoint_producer = Producer(self.target.producer())
        self._sync_consumer = Consumer(syncs_clients.consumer(self.group_id + "-syncs"))
        if self.exactly_once:
            txn_id = transactional_id(f"{flow.source}-mm2", SOURCE_CONNECTOR_NAME, 0)
            self._producer = Producer(self.target.producer(txn_id))
        else:
            self._producer = Producer(self.target.producer())
        # One listing per cluster, for the first topic refresh and the internal topics;
        # an internal topic created here is empty, so it is not read.
        listings = self._listings
        if self.exactly_once and not self._ensure_internal_topic(
            False, self.offsets_topic, flow.offset_syncs_topic_replication_factor, listings
        ):
            # Where to resume: read before the source consumer is assigned.
            self.committed_source_offsets = self._load_committed_source_offsets()
        # The remote topics and the assignment next: the source consumer fetches while
        # the rest is set up.
        for on_source in (True, False):
            if on_source not in listings:
                listings[on_source] = self._admin(on_source).topic_partitions()
        self.refresh_topics(listings[True], listings[False])
        # That was the first refresh: the next is an interval away.
        self._next_refresh_ms = self.clock() + flow.refresh_topics_interval_ms
        new_syncs = self._ensure_internal_topic(
            self.syncs_on_source,
            self.syncs_topic,
            flow.offset_syncs_topic_replication_factor,
            listings,
        )
        new_checkpoints = self._ensure_internal_topic(
            False, flow.checkpoints_topic(), flow.checkpoints_topic_replication_factor, listings
        )
        if self.exactly_once:
            self._producer.init_transactions(FLUSH_TIMEOUT_S)
            self._last_commit_ms = self.clock()
        if not new_checkpoints:
            self._load_checkpoints()
        # The initial load: the store translates only once the topic was read to the end
        # it had when the task started (OffsetSyncStore.readToEnd), before any sync of
        # this run; a new topic is at it, and its consumer is assigned at its first read
        # (the first step, after the first copy).
        if new_syncs:
            self.store.mark_read_to_end()
        else:
            self.read_offset_syncs()
        self._started = True

    def source_topics_created(self, topics: Mapping[str, int]) -> None:
        """Topics (name -> partitions) created on the source since the start-up listed
        it (the heartbeat tasks' `heartbeats`): refreshed now, so that they are mirrored
        from the first copy on, without listing the source again."""
        source = self._listings.setdefault(True, {})
        new = {name: n for name, n in topics.items() if name not in source}
        if not new:
            return
        source.update(new)
        self.refresh_topics(source)  # the target is listed again: it has remote topics now

    def close(self) -> None:
        if self._producer is not None and self._txn_open:
            # Connect commits the task's last transaction when it stops.
            txn_producer = self._producer
            self._guarded("final transaction", lambda: self._commit_transaction(txn_producer))
        if self._producer is not None and self._consumer is not None and not self.exactly_once:
            # What was acknowledged by now is committed before the flow stops.
            self._producer.flush(FLUSH_TIMEOUT_S)
            self._guarded("delivery reports", self._handle_reports)
            self._guarded(
                "source offset commit", lambda: self.commit_source_offsets(synchronous=True)
            )
        for producer in (self._producer, self._sync_producer, self._checkpoint_producer):
            if producer is not None:
                producer.flush(FLUSH_TIMEOUT_S)
        for consumer in (self._consumer, self._sync_consumer):
            if consumer is not None:
                consumer.close()
        self._consumer = self._sync_consumer = None
        self._producer = self._sync_producer = self._checkpoint_producer = None

    def _ensure_internal_topic(
        self,
        on_source: bool,
        name: str,
        replication_factor: int,
        listings: dict[bool, dict[str, int]],
    ) -> bool:
        """Create `name` unless the cluster's listing (fetched once into `listings`)
        holds it; True when this call created it (so it holds no record yet)."""
        admin = self._admin(on_source)
        if on_source not in listings:
            listings[on_source] = admin.topic_partitions()
        if name in listings[on_source]:
            return False
        created = create_internal_topic(
            admin,
            name,
            replication_factor,
            notices=self.notices,
            report=lambda message: self.report(f"{self.name}: {message}"),
        )
        listings[on_source][name] = 1
        if created:
            self.stats.topics_created += 1
        return created

    def _load_checkpoints(self) -> None:
        """CheckpointStore: the newest checkpoints from the target's checkpoints topic."""
        topic = self.flow.checkpoints_topic()
        consumer = Consumer(self.target.consumer(self.group_id + "-checkpoints"))
        records: list[Checkpoint] = []

        def handle(msg: Message) -> None:
            try:
                records.append(decode_checkpoint(msg.key(), msg.value()))
            except MirrorWireError as exc:
                self.report(f"{self.name}: skipping a record of {topic}: {exc}")

        try:
            know_topics(consumer, [topic])
            consumer.assign([KafkaTopicPartition(topic, 0, OFFSET_BEGINNING)])
            if not drain(consumer, [TopicPartition(topic, 0)], handle):
                raise MirrorClientError(f"{self.name}: could not read {topic} to its end")
        finally:
            consumer.close()
        self.tracker.load(records)

    def _load_committed_source_offsets(self) -> dict[TopicPartition, int]:
        """The offsets committed by earlier transactions (read_committed)."""
        consumer = Consumer(
            self.target.consumer(self.group_id + "-offsets", read_committed=True)
        )
        found: dict[TopicPartition, int] = {}

        def handle(msg: Message) -> None:
            try:
                so = decode_source_offset(msg.key(), msg.value())
            except MirrorWireError as exc:
                self.report(f"{self.name}: skipping a record of {self.offsets_topic}: {exc}")
                return
            if so is not None and so.cluster == self.flow.source:
                found[so.source_partition] = so.offset

        parts = self._admin(False).topic_partitions().get(self.offsets_topic, 1)
        try:
            know_topics(consumer, [self.offsets_topic])
            consumer.assign(
                [KafkaTopicPartition(self.offsets_topic, p, OFFSET_BEGINNING) for p in range(parts)]
            )
            tps = [TopicPartition(self.offsets_topic, p) for p in range(parts)]
            if not drain(consumer, tps, handle):
                raise MirrorClientError(f"{self.name}: could not read {self.offsets_topic}")
        finally:
            consumer.close()
        return found

    # -- topics ------------------------------------------------------------------------------

    def _replicates(self, topic: str) -> bool:
        return should_replicate_topic(
            topic,
            policy=self.flow.policy,
            topic_filter=self.flow.topic_filter,
            target_alias=self.flow.target,
        )

    def refresh_topics(
        self,
        source_listing: Mapping[str, int] | None = None,
        target_listing: Mapping[str, int] | None = None,
    ) -> None:
        """`*_listing`: a cluster's topics as just listed (the start-up's), else listed now."""
        flow = self.flow
        source_admin, target_admin = self._admin(True), self._admin(False)
        source_topics = dict(
            source_admin.topic_partitions() if source_listing is None else source_listing
        )
        target_topics = (
            target_admin.topic_partitions() if target_listing is None else target_listing
        )
        plan = plan_remote_topics(
            source_topics,
            dict(target_topics),
            source_alias=flow.source,
            target_alias=flow.target,
            policy=flow.policy,
            topic_filter=flow.topic_filter,
            replication_factor=flow.replication_factor,
        )
        for new in plan.create:
            # Created with its synced configs, as MM2 does: under the target's defaults
            # (retention.ms of 7 days) its first records could be deleted by retention
            # before the config sync, if their timestamps are older than that.
            configs = remote_topic_configs(
                source_admin.topic_configs(new.source_topic),
                flow.config_property_filter,
                use_defaults_from_source=flow.use_defaults_from_source,
            )
            try:
                created = target_admin.create_topic(
                    new.name, new.partitions, new.replication_factor, configs
                )
            except MirrorClientError as exc:
                self.report(f"{self.name}: {exc}; retrying with the broker's replication factor")
                created = target_admin.create_topic(new.name, new.partitions, -1, configs)
            if created:
                self.stats.topics_created += 1
                self.report(f"{self.name}: created {new.name} ({new.partitions} partitions)")
        for name, total in plan.grow:
            target_admin.create_partitions(name, total)
            self.report(f"{self.name}: grew {name} to {total} partitions")
        new_tps: list[TopicPartition] = []
        for topic, count in sorted(source_topics.items()):
            if not self._replicates(topic):
                continue
            remote = flow.policy.format_remote_topic(flow.source, topic)
            for p in range(count):
                tp = TopicPartition(topic, p)
                if tp not in self.assigned:
                    self.assigned[tp] = remote
                    self._routes[(topic, p)] = _Route(tp, remote, flow.target, self._touched)
                    new_tps.append(tp)
        if new_tps:
            self._assign(new_tps)

    def _assign(self, tps: list[TopicPartition]) -> None:
        consumer = self._require(self._consumer)
        positions: dict[TopicPartition, int] = {}
        if self.exactly_once:
            plan = restart_from_committed(
                tps, CommittedMirrorState(source_offsets=self.committed_source_offsets)
            )
            for tp, pos in plan.positions.items():
                nxt = pos.next_upstream_offset
                positions[tp] = OFFSET_BEGINNING if nxt is None else nxt
        else:
            committed = consumer.committed(
                [KafkaTopicPartition(tp.topic, tp.partition) for tp in tps],
                timeout=FLUSH_TIMEOUT_S,
            )
            for ktp in committed:
                off = int(ktp.offset)
                positions[TopicPartition(ktp.topic, ktp.partition)] = (
                    off if off >= 0 else OFFSET_BEGINNING
                )
        know_topics(consumer, {tp.topic for tp in tps})
        consumer.incremental_assign(
            [KafkaTopicPartition(tp.topic, tp.partition, positions[tp]) for tp in sorted(tps)]
        )
        for tp in tps:
            self.at_end.discard(tp)

    @staticmethod
    def _require(value: Any) -> Any:
        if value is None:
            raise MirrorClientError("the flow is not started")
        return value

    # -- copy --------------------------------------------------------------------------------

    def caught_up(self) -> bool:
        """Every assigned partition read to its end and every copied record reported."""
        return (
            set(self.assigned) <= self.at_end
            and not self._txn_open
            and not self._touched
            and not any(route.busy() for route in self._routes.values())
        )

    def _in_flight(self) -> int:
        return sum(route.unreported() for route in self._routes.values())

    def copy_batch(self) -> int:
        """Handle the delivery reports that arrived, poll one batch from the source and
        produce it (at-least-once: without waiting for its acknowledgements; exactly-once:
        as one transaction); the number of records acknowledged meanwhile."""
        consumer = self._require(self._consumer)
        producer = self._require(self._producer)
        producer.poll(0)
        if self.exactly_once:
            # The reports served as they arrive (handled once the commit is): else the
            # commit's flush runs a whole transaction's callbacks while nothing is produced.
            return self._copy_transactional(producer, self._poll(consumer))
        copied = self._handle_reports()
        # at_end only holds assigned partitions: equal sizes mean every one is at its end.
        if len(self.at_end) >= len(self.assigned) and self._in_flight():
            # Nothing left to read for now: wait for acknowledgements, not for records.
            producer.flush(self.poll_timeout_s)
            return copied + self._handle_reports()
        self._produce(producer, self._poll(consumer))
        return copied

    def _poll(self, consumer: Consumer) -> list[Message]:
        """One poll batch, as Kafka's consumer.poll: it waits (up to the poll timeout)
        for the first record only, then takes what is already fetched, up to
        max.poll.records. (consume(n, timeout) would wait for all n.)"""
        first = consumer.poll(self.poll_timeout_s)
        if first is None:
            return []
        more = self.source.max_poll_records - 1
        return [first, *consumer.consume(more, 0)] if more else [first]

    def _produce(
        self, producer: Producer, msgs: list[Message], *, in_transaction: bool = False
    ) -> int:
        """Produce the records of `msgs` to their remote topics (same partition, key,
        value, headers, timestamp); end-of-partition events update `at_end`. Each
        partition's upstream offsets are queued on its route, in produce order; in a
        transaction, its routes note the first and last upstream offset it holds."""
        routes = self._routes
        produce = producer.produce
        at_end = self.at_end
        now = self.clock()
        polled: dict[_Route, int] = {}  # route -> index of its first record of this poll
        last_key: Any = None  # (topic, partition) of the previous record
        route: _Route | None = None
        produced = 0
        offset: Any = -1
        nbytes = 0  # value bytes of the current run
        # The current run's route, as locals: they are used for every record.
        remote: Any = None
        partition = 0
        on_delivery: Any = None
        append_up: Any = None
        append_ts: Any = None
        for msg in msgs:
            err = msg.error()
            if err is not None:
                tp = _tp(msg)
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(tp)
                else:
                    self.report(f"{self.name}: source consumer: {err}")
                last_key = None  # a record after this event clears `at_end` again
                continue
            key: Any = (msg.topic(), msg.partition())
            if key != last_key:
                if route is not None:
                    route.polled_bytes += nbytes
                    nbytes = 0
                    if in_transaction and produced:
                        route.txn_last = offset  # the previous record's
                route = routes[key]
                last_key = key
                if in_transaction and route.txn_first < 0:
                    route.txn_first = int(msg.offset() or 0)
                at_end.discard(route.tp)
                if route not in polled:
                    polled[route] = len(route.inflight)
                remote, partition, on_delivery = route.remote, route.partition, route.on_delivery
                append_up, append_ts = route.inflight.append, route.inflight_ts.append
            ts_type, ts = msg.timestamp()
            if ts_type == TIMESTAMP_NOT_AVAILABLE:
                ts = now
            value = msg.value()
            raw: Any = msg.headers()
            # Positional: (topic, value, key, partition, callback, on_delivery, timestamp,
            # headers); keywords cost confluent-kafka more than the rest of the call.
            try:
                produce(remote, value, msg.key(), partition, on_delivery, None, ts,
                        None if raw is None else _headers(raw))
            except BufferError:
                # The producer's queue is full: serve reports until there is room.
                while True:
                    producer.poll(QUEUE_FULL_WAIT_S)
                    try:
                        produce(remote, value, msg.key(), partition, on_delivery, None, ts,
                                None if raw is None else _headers(raw))
                        break
                    except BufferError:
                        continue
            offset = msg.offset()
            append_up(offset)
            append_ts(ts)
            if value:
                nbytes += len(value)
            produced += 1
        if route is not None:
            route.polled_bytes += nbytes
            if in_transaction and produced:
                route.txn_last = offset
        for r, first in polled.items():
            self.metrics.records_polled(r.key, now, r.inflight_ts[first:], r.polled_bytes)
            r.polled_bytes = 0
        return produced

    def _handle_reports(self) -> int:
        """The delivery reports that arrived since the last call, one run per partition:
        acknowledged records go to the metrics and the offset-sync writer and become
        committable; a failed record rewinds its partition to it (the records after it
        that were already produced are copied again: at-least-once)."""
        touched = self._touched
        if not touched:
            return 0
        routes = list(touched)
        touched.clear()
        now = self.clock()
        copied = 0
        rewind: dict[TopicPartition, int] = {}
        syncs = self.flow.emit_offset_syncs_enabled
        for route in routes:
            ups, downs, stamps, failed_at, error = route.take_reports()
            if ups:
                self.metrics.records_acknowledged(route.key, now, stamps)
                if syncs:
                    self._send_syncs(self.writer.on_records_acknowledged(route.tp, ups, downs))
                route.acked_next = ups[-1] + 1
                copied += len(ups)
            if failed_at >= 0:
                self.stats.delivery_failures += 1
                self.report(f"{self.name}: delivery to {route.remote} failed: {error}")
                rewind[route.tp] = failed_at
        self.stats.records_copied += copied
        if rewind:
            self._rewind(rewind)
        self._pump_syncs()
        return copied

    def _rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        consumer = self._require(self._consumer)
        for tp, off in sorted(offsets.items()):
            consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, off))
            self.at_end.discard(tp)

    def commit_source_offsets(self, *, synchronous: bool = False) -> int:
        """At-least-once: commit, on the source, one past the newest acknowledged record
        of every partition whose acknowledged position moved (never further: what is
        produced but not acknowledged stays uncommitted). Asynchronous, as Connect's
        periodic offset commit; synchronous when the flow stops or a run ends."""
        if self.exactly_once:
            return 0
        moved = [r for r in self._routes.values() if r.acked_next > r.committed_next]
        if not moved:
            return 0
        consumer = self._require(self._consumer)
        consumer.commit(
            offsets=[
                KafkaTopicPartition(r.tp.topic, r.tp.partition, r.acked_next)
                for r in sorted(moved, key=lambda r: r.tp)
            ],
            asynchronous=not synchronous,
        )
        for r in moved:
            r.committed_next = r.acked_next
        return len(moved)

    def _copy_transactional(self, producer: Producer, msgs: list[Message]) -> int:
        """Exactly-once: the poll's records go into the open transaction (begun with the
        first of them); `transaction_commit_due` says whether it commits after this
        poll. The records acknowledged by a commit, or 0."""
        has_records = any(msg.error() is None for msg in msgs)
        if not has_records and not self._txn_open:
            self._produce(producer, msgs)  # end-of-partition events only: no transaction
            return 0
        try:
            if not self._txn_open:
                producer.begin_transaction()
                self._txn_open = True
                self._txn_records = 0
            polled = self._produce(producer, msgs, in_transaction=True)
            self._txn_records += polled
        except KafkaException as exc:
            # The poll's records were taken from the consumer, but the transaction did
            # not begin or a produce failed part-way: its partitions after that record
            # have no first record noted, and would not be rewound.
            self._note_polled(msgs)
            return self._abort(producer, exc)
        if any(route.failures for route in self._touched):
            return self._abort(
                producer, MirrorClientError("a record of the transaction was not delivered")
            )
        due = transaction_commit_due(
            self.flow.transaction_boundary,
            records=self._txn_records,
            polled=polled,
            poll_limit=self.source.max_poll_records,
            drained=len(self.at_end) >= len(self.assigned),
            last_commit_ms=self._last_commit_ms,
            now_ms=self.clock(),
            interval_ms=self.flow.transaction_boundary_interval_ms,
        )
        return self._commit_transaction(producer) if due else 0

    def _note_polled(self, msgs: list[Message]) -> None:
        """Each partition of `msgs` not in the open transaction yet starts it at its
        first record there: an abort rewinds it to that record."""
        routes = self._routes
        for msg in msgs:
            if msg.error() is None:
                tp = _tp(msg)
                route = routes[(tp.topic, tp.partition)]
                if route.txn_first < 0:
                    route.txn_first = int(msg.offset() or 0)

    def _commit_transaction(self, producer: Producer) -> int:
        """Commit the open transaction with the source offsets of its records (per
        partition the last upstream offset it holds); on any failure abort it and
        rewind every partition to the first record it held. The records
        acknowledged, or 0."""
        if not self._txn_open:
            return 0
        routes = [route for route in self._routes.values() if route.txn_last >= 0]
        try:
            source_offsets = transaction_offsets(
                self.flow.source, {route.tp: (route.txn_last,) for route in routes}
            )
            for so in source_offsets:
                key, value = encode_source_offset(so)
                producer.produce(self.offsets_topic, value=value, key=key, partition=0)
            producer.commit_transaction(FLUSH_TIMEOUT_S)
            if self._in_flight():  # reports not served by the commit's flush yet
                producer.flush(FLUSH_TIMEOUT_S)
            if self._in_flight() or any(route.failures for route in self._touched):
                raise MirrorClientError("a record of the transaction was not delivered")
        except (KafkaException, MirrorClientError) as exc:
            return self._abort(producer, exc)
        self._txn_open = False
        self._last_commit_ms = self.clock()
        self.stats.transactions_committed += 1
        for route in routes:
            route.txn_first = route.txn_last = -1
        for so in source_offsets:
            self.committed_source_offsets[so.source_partition] = so.offset
        # Offset syncs only name committed records: they go out after the commit.
        return self._handle_reports()

    def _abort(self, producer: Producer, exc: KafkaException | MirrorClientError) -> int:
        """Abort the open transaction and rewind each partition to the first record it
        held there: nothing of it is visible, all of it is copied again."""
        self.stats.transactions_aborted += 1
        self.report(f"{self.name}: transaction aborted, batch rewound: {exc}")
        fatal = isinstance(exc, KafkaException) and exc.args and exc.args[0].fatal()
        if fatal:
            raise exc
        first = {
            route.tp: route.txn_first for route in self._routes.values() if route.txn_first >= 0
        }
        try:
            producer.abort_transaction(FLUSH_TIMEOUT_S)
            producer.flush(FLUSH_TIMEOUT_S)  # the purged records' reports
        except KafkaException as abort_exc:
            self.report(f"{self.name}: abort failed: {abort_exc}")
        self._txn_open = False
        self._last_commit_ms = self.clock()
        self._forget_reports()
        self._rewind(first)
        return 0

    def _forget_reports(self) -> None:
        """After an abort: nothing of the batch is in flight or acknowledged."""
        self._touched.clear()
        for route in self._routes.values():
            route.reset()

    # -- offset syncs ------------------------------------------------------------------------

    def _send_syncs(self, syncs: list[OffsetSync]) -> None:
        producer = self._require(self._sync_producer)
        for sync in syncs:
            key, value = encode_offset_sync(sync)
            producer.produce(
                self.syncs_topic, value=value, key=key, partition=0, on_delivery=self._sync_done
            )
            self.stats.offset_syncs_sent += 1

    def _sync_done(self, err: KafkaError | None, msg: Message) -> None:
        self._sync_completions += 1
        if err is not None:
            self.report(f"{self.name}: offset sync not written: {err}")
        else:
            offset = int(msg.offset() or 0)
            self._next_sync_offset = max(self._next_sync_offset, offset + 1)

    def _pump_syncs(self) -> None:
        producer = self._require(self._sync_producer)
        for _ in range(MAX_SYNC_PUMP_ROUNDS):
            producer.poll(0)
            if not self._sync_completions:
                return
            done, self._sync_completions = self._sync_completions, 0
            for _ in range(done):
                self._send_syncs(self.writer.on_sync_completed())

    def flush_offset_syncs(self) -> None:
        """Connect's offset commit: promote delayed syncs and write them all."""
        self._send_syncs(self.writer.on_commit())
        producer = self._require(self._sync_producer)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while time.monotonic() < deadline:
            producer.flush(1.0)
            self._pump_syncs()
            if not self.writer.pending and len(producer) == 0:
                return

    def read_offset_syncs(self) -> None:
        """Read the offset-syncs topic into the store, from where the last read ended to
        its end (at least past every sync this engine had acknowledged); the first read
        that gets there marks the store read to the end. The consumer is assigned for
        the read only: between reads it fetches nothing (an assigned consumer
        long-polls the topic's broker without pause, woken by every sync written).
        Checkpoints are the store's only reader, so it is read before they are
        emitted, as fresh as reading all along would leave it."""
        consumer = self._require(self._sync_consumer)
        tp0 = TopicPartition(self.syncs_topic, 0)
        if not self._syncs_known:
            know_topics(consumer, [self.syncs_topic])
            self._syncs_known = True

        def handle(msg: Message) -> None:
            self._syncs_next = int(msg.offset() or 0) + 1
            try:
                self.store.handle_sync(decode_offset_sync(msg.key(), msg.value()))
            except MirrorWireError as exc:
                self.report(f"{self.name}: skipping a record of {self.syncs_topic}: {exc}")

        # A fresh assignment: its end of partition is reported again, unlike a resume.
        consumer.assign([KafkaTopicPartition(self.syncs_topic, 0, self._syncs_next)])
        try:
            need = {tp0: self._next_sync_offset}
            if drain(consumer, [tp0], handle, min_next_offsets=need):
                self.store.mark_read_to_end()
            else:
                self.report(f"{self.name}: {self.syncs_topic} not read to its end in time")
        finally:
            consumer.unassign()

    # -- checkpoints and group offsets -------------------------------------------------------

    def emit_checkpoints(self) -> int:
        flow = self.flow
        self.read_offset_syncs()
        if not self.store.read_to_end:
            return 0
        producer = self._require(self._checkpoint_producer)
        admin = self._admin(True)
        emitted: list[tuple[str, dict[TopicPartition, Checkpoint]]] = []
        now = self.clock()
        found = checkpoints_for_flow(
            flow, admin.list_groups(), admin.group_offsets, self.store, self.tracker
        )
        for group, new in found.items():
            for cp in new.values():
                key, value = encode_checkpoint(cp)

                def done(err: KafkaError | None, msg: Message, cp: Checkpoint = cp) -> None:
                    if err is None:
                        self.metrics.checkpoint_acknowledged(
                            CheckpointMetricKey(
                                flow.source,
                                flow.target,
                                cp.consumer_group_id,
                                cp.topic_partition.topic,
                                cp.topic_partition.partition,
                            ),
                            self.clock(),
                            now,
                        )

                producer.produce(
                    flow.checkpoints_topic(),
                    value=value,
                    key=key,
                    partition=0,
                    timestamp=now,
                    on_delivery=done,
                )
            emitted.append((group, new))
        if producer.flush(FLUSH_TIMEOUT_S) != 0:
            raise MirrorClientError(f"{self.name}: checkpoints not acknowledged in time")
        count = 0
        for group, new in emitted:
            self.tracker.update(group, new)
            count += len(new)
        self.stats.checkpoints_emitted += count
        return count

    def sync_group_offsets(self) -> int:
        admin = self._admin(False)
        converted = self.tracker.converted_upstream_offsets()
        plan = plan_group_offset_sync(
            converted, {group: admin.target_group(group) for group in converted}
        )
        written = 0
        for group, offsets in plan.writes.items():
            admin.alter_group_offsets(group, offsets)
            written += len(offsets)
        self.stats.group_sync_done(plan, written)
        for group, tp, current, translated in plan.refused_rewinds:
            self.report(
                f"{self.name}: group {group} {tp}: target offset {current} kept "
                f"(translated {translated} would rewind it)"
            )
        return written

    # -- config and ACL sync -----------------------------------------------------------------

    def sync_topic_configs(self) -> int:
        flow = self.flow
        source_admin, target_admin = self._admin(True), self._admin(False)
        altered = 0
        for topic in sorted({tp.topic for tp in self.assigned}):
            change = target_config_sync(
                source_admin.topic_configs(topic),
                flow.config_property_filter,
                use_defaults_from_source=flow.use_defaults_from_source,
            )
            if change.is_empty():
                continue
            target_admin.alter_topic_configs(self.assigned[TopicPartition(topic, 0)], change)
            altered += 1
        self.stats.configs_altered += altered
        return altered

    def sync_topic_acls(self) -> int:
        if not self._acls_supported:
            return 0
        flow = self.flow
        try:
            source_acls = self._admin(True).topic_acls()
            target_acls = self._admin(False).topic_acls()
        except MirrorClientError as exc:
            self._acls_supported = False
            self.report(f"{self.name}: ACL sync disabled: {exc}")
            return 0
        wanted = plan_acl_sync(
            source_acls,
            target_acls,
            source_alias=flow.source,
            target_alias=flow.target,
            policy=flow.policy,
            topic_filter=flow.topic_filter,
        )
        self._admin(False).create_acls(wanted)
        self.stats.acls_created += len(wanted)
        return len(wanted)

    # -- the loop ----------------------------------------------------------------------------

    def _guarded(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except (MirrorClientError, KafkaException) as exc:
            message = f"{self.name}: {what}: {exc}"
            self.stats.errors.append(message)
            del self.stats.errors[:-100]
            self.report(message)

    def step(self) -> int:
        """One bounded iteration of the continuous mode; the records copied. The copy
        comes first: the admin work due (topic refresh, config and ACL sync, at the
        first step all of it but the refresh, which start did) follows it, so the
        first records are not held behind it."""
        flow = self.flow
        copied = self.copy_batch()
        now = self.clock()
        if flow.refresh_topics_enabled and now >= self._next_refresh_ms:
            self._next_refresh_ms = now + flow.refresh_topics_interval_ms
            self._guarded("topic refresh", self.refresh_topics)
        if flow.sync_topic_configs_enabled and now >= self._next_config_sync_ms:
            self._next_config_sync_ms = now + flow.sync_topic_configs_interval_ms
            self._guarded("config sync", self.sync_topic_configs)
        if flow.sync_topic_acls_enabled and now >= self._next_acl_sync_ms:
            self._next_acl_sync_ms = now + flow.sync_topic_acls_interval_ms
            self._guarded("ACL sync", self.sync_topic_acls)
        now = self.clock()
        if now >= self._next_commit_ms:
            # Connect's offset commit timer (offset.flush.interval.ms): what was
            # acknowledged by now, asynchronously.
            self._next_commit_ms = now + flow.offset_flush_interval_ms
            self._guarded("source offset commit", self.commit_source_offsets)
        if flow.emit_offset_syncs_enabled:
            self._send_syncs(self.writer.tick(now))
            self._pump_syncs()
        now = self.clock()
        if flow.emit_checkpoints_enabled and now >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now + flow.emit_checkpoints_interval_ms
            self._guarded("checkpoints", self.emit_checkpoints)
        if flow.sync_group_offsets_enabled and now >= self._next_group_sync_ms:
            self._next_group_sync_ms = now + flow.sync_group_offsets_interval_ms
            self._guarded("group offset sync", self.sync_group_offsets)
        return copied

    def run_once(self, timeout_s: float) -> bool:
        """Copy what the source holds now, then sync, checkpoint and sync group offsets.

        True when every assigned partition was copied to its end within `timeout_s`.
        """
        flow = self.flow
        if flow.sync_topic_configs_enabled:
            self._guarded("config sync", self.sync_topic_configs)
        if flow.sync_topic_acls_enabled:
            self._guarded("ACL sync", self.sync_topic_acls)
        deadline = time.monotonic() + timeout_s
        while not self.caught_up() and time.monotonic() < deadline:
            self.copy_batch()
        if self._txn_open:  # the deadline passed with records in a transaction
            self._commit_transaction(self._require(self._producer))
        self._require(self._producer).flush(FLUSH_TIMEOUT_S)
        self._handle_reports()
        done = self.caught_up()
        self._guarded(
            "source offset commit", lambda: self.commit_source_offsets(synchronous=True)
        )
        if flow.emit_offset_syncs_enabled:
            self.flush_offset_syncs()
        if flow.emit_checkpoints_enabled:  # it reads the offset syncs first
            self._guarded("checkpoints", self.emit_checkpoints)
        if flow.sync_group_offsets_enabled:
            self._guarded("group offset sync", self.sync_group_offsets)
        return done


class HeartbeatTask:
    """MirrorHeartbeatTask of one (source, target) pair."""

    def __init__(
        self,
        config: MirrorMakerConfig,
        flow: MirrorFlow,
        *,
        clock: Clock = wall_clock_ms,
        report: Reporter = print,
        notices: CompactionNotices | None = None,
        client_logger: Any = None,
    ) -> None:
        self.flow = flow
        self.clock = clock
        self.report = report
        self.notices = notices if notices is not None else CompactionNotices(report)
        self.target = ClientConfigs(config.cluster(flow.target), logger=client_logger)
        self.schedule = HeartbeatSchedule(
            flow.source, flow.target, flow.emit_heartbeats_interval_ms, clock()
        )
        self.beats = 0
        self.created = False  # whether start() created the heartbeats topic
        self._producer: Producer | None = None

    def start(self) -> None:
        admin = ClusterAdmin(self.flow.target, self.target.admin(), self.flow.admin_timeout_ms)
        topic = self.flow.heartbeats_topic()
        if topic not in admin.topic_partitions():
            self.created = create_internal_topic(
                admin,
                topic,
                self.flow.heartbeats_topic_replication_factor,
                notices=self.notices,
                report=lambda message: self.report(f"heartbeats {self.flow.name}: {message}"),
            )
        self._producer = Producer(self.target.producer())

    def beat(self, force: bool = False) -> bool:
        producer = self._producer
        if producer is None:
            raise MirrorClientError("the heartbeat task is not started")
        now = self.clock()
        if force:
            self.schedule = HeartbeatSchedule(
                self.flow.source, self.flow.target, self.schedule.interval_ms, now
            )
        self.schedule, heartbeat = self.schedule.poll(now)
        producer.poll(0)
        if heartbeat is None:
            return False
        key, value = encode_heartbeat(heartbeat)
        producer.produce(
            self.flow.heartbeats_topic(), value=value, key=key, partition=0, timestamp=now
        )
        self.beats += 1
        return True

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(FLUSH_TIMEOUT_S)
            self._producer = None
