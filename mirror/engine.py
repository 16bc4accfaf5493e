"""One MirrorMaker 2 flow (source -> target) over Kafka clients: the imperative shell.

Rules (every decision is the core's, linkd/core/mirror; this module only does I/O):
- Topics: every `refresh.topics.interval.seconds` the source and target topic
  listings go to `plan_remote_topics`; the plan's topics are created or grown on
  the target, and every partition of a mirrored topic is assigned to the source
  consumer at its resume position.
- Copy: records are produced to the remote topic, same partition, with key,
  value, headers and timestamp; offsets are not preserved. Each acknowledged
  record goes to `OffsetSyncWriter`, whose syncs are produced to the offset-syncs
  topic (partition 0); its `tick` runs the `offset.flush.interval.ms` flush.
- At-least-once (default): after a batch is acknowledged the mirror's source
  group (`connect-mirror-<source>-<target>`, excluded from checkpoints by MM2's
  default group filter) commits the next offsets on the SOURCE cluster. A failed
  delivery rewinds the partition to the first failed record (duplicates
  possible, loss not).
- Exactly-once (`<target>.exactly.once.source.support=enabled`): each poll batch
  is one transaction on the target holding the records and the batch's source
  offsets (`transaction_for_batch`), written to `mm2-offsets.<source>.internal`
  in Connect's format. Offset syncs are produced after the commit. An aborted
  transaction rewinds the batch. A restart reads that topic read_committed and
  resumes through `restart_from_committed`.
- Checkpoints: the offset-syncs topic is read into `OffsetSyncStore` (marked
  read-to-end at the first end of partition); every `emit.checkpoints.interval`
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
    MirroredRecord,
    offsets_topic,
    restart_from_committed,
    transaction_for_batch,
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
# Bounded pumping of offset-sync completions per step.
MAX_SYNC_PUMP_ROUNDS = 1_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _tp(msg: Message) -> TopicPartition:
    return TopicPartition(str(msg.topic()), int(msg.partition() or 0))


def _headers(msg: Message) -> tuple[tuple[str, bytes], ...]:
    # A null header value is copied as empty: the core's records carry bytes.
    raw: Any = msg.headers() or ()
    out: list[tuple[str, bytes]] = []
    for name, value in raw:
        data = value.encode("utf-8") if isinstance(value, str) else (value or b"")
        out.append((str(name), bytes(data)))
    return tuple(out)


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
        for msg in consumer.consume(500, 0.1):
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
    ) -> None:
        self.flow = flow
        self.clock = clock
        self.report = report
        # Shared by the flows of one run: a cluster that does not compact is said once.
        self.notices = notices if notices is not None else CompactionNotices(report)
        self.poll_timeout_s = poll_timeout_s
        self.source = ClientConfigs(config.cluster(flow.source))
        self.target = ClientConfigs(config.cluster(flow.target))
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
        self._sync_completions = 0
        self._next_sync_offset = 0  # one past the newest offset sync this engine wrote
        self._acls_supported = True
        self._next_refresh_ms = now
        self._next_checkpoint_ms = now + flow.emit_checkpoints_interval_ms
        self._next_group_sync_ms = now + flow.sync_group_offsets_interval_ms
        self._next_config_sync_ms = now
        self._next_acl_sync_ms = now
        self._started = False
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
        self._ensure_internal_topic(
            self.syncs_on_source, self.syncs_topic, flow.offset_syncs_topic_replication_factor
        )
        self._ensure_internal_topic(
            False, flow.checkpoints_topic(), flow.checkpoints_topic_replication_factor
        )
        if self.exactly_once:
            self._ensure_internal_topic(
                False, self.offsets_topic, flow.offset_syncs_topic_replication_factor
            )
            self.committed_source_offsets = self._load_committed_source_offsets()
            txn_id = transactional_id(f"{flow.source}-mm2", SOURCE_CONNECTOR_NAME, 0)
            self._producer = Producer(self.target.producer(txn_id))
            self._producer.init_transactions(FLUSH_TIMEOUT_S)
        else:
            self._producer = Producer(self.target.producer())
        self._consumer = Consumer(self.source.consumer(self.group_id))
        self._sync_producer = Producer(syncs_clients.producer())
        self._checkpoint_producer = Producer(self.target.producer())
        self._load_checkpoints()
        self._sync_consumer = Consumer(syncs_clients.consumer(self.group_id + "-syncs"))
        self._sync_consumer.assign([KafkaTopicPartition(self.syncs_topic, 0, OFFSET_BEGINNING)])
        # The initial load: the store translates only once the topic was read to the end
        # it had when the task started (OffsetSyncStore.readToEnd).
        self.read_offset_syncs(to_end=True)
        self._started = True
        self.refresh_topics()

    def close(self) -> None:
        for producer in (self._producer, self._sync_producer, self._checkpoint_producer):
            if producer is not None:
                producer.flush(FLUSH_TIMEOUT_S)
        for consumer in (self._consumer, self._sync_consumer):
            if consumer is not None:
                consumer.close()
        self._consumer = self._sync_consumer = None
        self._producer = self._sync_producer = self._checkpoint_producer = None

    def _ensure_internal_topic(self, on_source: bool, name: str, replication_factor: int) -> None:
        admin = self._admin(on_source)
        if name in admin.topic_partitions():
            return
        if create_internal_topic(
            admin,
            name,
            replication_factor,
            notices=self.notices,
            report=lambda message: self.report(f"{self.name}: {message}"),
        ):
            self.stats.topics_created += 1

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

    def refresh_topics(self) -> None:
        flow = self.flow
        source_topics = self._admin(True).topic_partitions()
        target_admin = self._admin(False)
        plan = plan_remote_topics(
            source_topics,
            target_admin.topic_partitions(),
            source_alias=flow.source,
            target_alias=flow.target,
            policy=flow.policy,
            topic_filter=flow.topic_filter,
            replication_factor=flow.replication_factor,
        )
        for new in plan.create:
            try:
                created = target_admin.create_topic(
                    new.name, new.partitions, new.replication_factor, {}
                )
            except MirrorClientError as exc:
                self.report(f"{self.name}: {exc}; retrying with the broker's replication factor")
                created = target_admin.create_topic(new.name, new.partitions, -1, {})
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
        return set(self.assigned) <= self.at_end

    def copy_batch(self) -> int:
        """Poll one batch from the source and mirror it; the number of records copied."""
        consumer = self._require(self._consumer)
        msgs = consumer.consume(self.source.max_poll_records, self.poll_timeout_s)
        batch: list[Message] = []
        for msg in msgs:
            err = msg.error()
            tp = _tp(msg)
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.at_end.add(tp)
                else:
                    self.report(f"{self.name}: source consumer: {err}")
                continue
            self.at_end.discard(tp)
            batch.append(msg)
        if not batch:
            return 0
        now = self.clock()
        records: list[MirroredRecord] = []
        for msg in batch:
            tp = _tp(msg)
            ts_type, ts = msg.timestamp()
            ts_ms = int(ts) if ts_type != TIMESTAMP_NOT_AVAILABLE else now
            value = msg.value()
            headers = _headers(msg)
            records.append(
                MirroredRecord(
                    tp, int(msg.offset() or 0), self.assigned[tp], msg.key(), value, ts_ms, headers
                )
            )
            self.metrics.record_polled(
                SourceMetricKey(self.flow.target, self.assigned[tp], tp.partition),
                now,
                ts_ms,
                len(value or b""),
            )
        if self.exactly_once:
            return self._copy_transactional(records)
        return self._copy_at_least_once(records)

    def _produce_records(
        self, producer: Producer, records: list[MirroredRecord]
    ) -> dict[int, tuple[int, str | None]]:
        """Produce; returns index -> (downstream offset, error) once delivered."""
        acks: dict[int, tuple[int, str | None]] = {}
        for i, r in enumerate(records):

            def on_delivery(err: KafkaError | None, msg: Message, i: int = i) -> None:
                offset = msg.offset()
                acks[i] = (-1 if offset is None else int(offset), None if err is None else str(err))

            producer.produce(
                r.target_topic,
                value=r.value,
                key=r.key,
                partition=r.source_partition.partition,
                timestamp=r.timestamp_ms,
                headers=list(r.headers) or None,
                on_delivery=on_delivery,
            )
            producer.poll(0)
        return acks

    def _acknowledged(self, r: MirroredRecord, downstream: int) -> None:
        now = self.clock()
        self.stats.records_copied += 1
        self.metrics.record_acknowledged(
            SourceMetricKey(self.flow.target, r.target_topic, r.source_partition.partition),
            now,
            r.timestamp_ms,
        )
        if self.flow.emit_offset_syncs_enabled:
            syncs = self.writer.on_record_acknowledged(
                r.source_partition, r.upstream_offset, downstream
            )
            self._send_syncs(syncs)

    def _rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        consumer = self._require(self._consumer)
        for tp, off in sorted(offsets.items()):
            consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, off))
            self.at_end.discard(tp)

    def _copy_at_least_once(self, records: list[MirroredRecord]) -> int:
        producer = self._require(self._producer)
        acks = self._produce_records(producer, records)
        producer.flush(FLUSH_TIMEOUT_S)
        failed: dict[TopicPartition, int] = {}
        commit: dict[TopicPartition, int] = {}
        copied = 0
        for i, r in enumerate(records):
            tp = r.source_partition
            if tp in failed:
                continue
            downstream, err = acks.get(i, (-1, "not acknowledged in time"))
            if err is not None:
                failed[tp] = r.upstream_offset
                self.stats.delivery_failures += 1
                self.report(f"{self.name}: delivery to {r.target_topic} failed: {err}")
                continue
            self._acknowledged(r, downstream)
            commit[tp] = r.upstream_offset + 1
            copied += 1
        if failed:
            self._rewind(failed)
        if commit:
            consumer = self._require(self._consumer)
            consumer.commit(
                offsets=[
                    KafkaTopicPartition(tp.topic, tp.partition, off)
                    for tp, off in sorted(commit.items())
                ],
                asynchronous=False,
            )
        self._pump_syncs()
        return copied

    def _copy_transactional(self, records: list[MirroredRecord]) -> int:
        producer = self._require(self._producer)
        txn = transaction_for_batch(
            transactional_id(f"{self.flow.source}-mm2", SOURCE_CONNECTOR_NAME, 0),
            self.flow.source,
            records,
        )
        first: dict[TopicPartition, int] = {}
        for r in records:
            first.setdefault(r.source_partition, r.upstream_offset)
        try:
            producer.begin_transaction()
            acks = self._produce_records(producer, list(txn.records))
            for so in txn.source_offsets:
                key, value = encode_source_offset(so)
                producer.produce(self.offsets_topic, value=value, key=key, partition=0)
            producer.flush(FLUSH_TIMEOUT_S)
            if len(acks) != len(records) or any(err for _, err in acks.values()):
                raise MirrorClientError("a record of the transaction was not delivered")
            producer.commit_transaction(FLUSH_TIMEOUT_S)
        except (KafkaException, MirrorClientError) as exc:
            self.stats.transactions_aborted += 1
            self.report(f"{self.name}: transaction aborted, batch rewound: {exc}")
            fatal = isinstance(exc, KafkaException) and exc.args and exc.args[0].fatal()
            if fatal:
                raise
            try:
                producer.abort_transaction(FLUSH_TIMEOUT_S)
            except KafkaException as abort_exc:
                self.report(f"{self.name}: abort failed: {abort_exc}")
            self._rewind(first)
            return 0
        self.stats.transactions_committed += 1
        for so in txn.source_offsets:
            self.committed_source_offsets[so.source_partition] = so.offset
        # Offset syncs only name committed records: they go out after the commit.
        for i, r in enumerate(txn.records):
            self._acknowledged(r, acks[i][0])
        self._pump_syncs()
        return len(records)

    # -- offset syncs ------------------------------------------------------------------------

    def _send_syncs(self, syncs: list[OffsetSync]) -> None:
        producer = self._require(self._sync_producer)
        for sync in syncs:
            key, value = encode_offset_sync(sync)

            def done(err: KafkaError | None, msg: Message) -> None:
                self._sync_completions += 1
                if err is not None:
                    self.report(f"{self.name}: offset sync not written: {err}")
                else:
                    offset = int(msg.offset() or 0)
                    self._next_sync_offset = max(self._next_sync_offset, offset + 1)

            producer.produce(self.syncs_topic, value=value, key=key, partition=0, on_delivery=done)
            self.stats.offset_syncs_sent += 1

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

    def read_offset_syncs(self, *, to_end: bool = False) -> None:
        consumer = self._require(self._sync_consumer)
        tp0 = TopicPartition(self.syncs_topic, 0)

        def handle(msg: Message) -> None:
            try:
                self.store.handle_sync(decode_offset_sync(msg.key(), msg.value()))
            except MirrorWireError as exc:
                self.report(f"{self.name}: skipping a record of {self.syncs_topic}: {exc}")

        if to_end:
            need = {tp0: self._next_sync_offset}
            if drain(consumer, [tp0], handle, min_next_offsets=need):
                self.store.mark_read_to_end()
            else:
                self.report(f"{self.name}: {self.syncs_topic} not read to its end in time")
            return
        for msg in consumer.consume(500, 0):
            if msg.error() is None:
                handle(msg)

    # -- checkpoints and group offsets -------------------------------------------------------

    def emit_checkpoints(self) -> int:
        flow = self.flow
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
        """One bounded iteration of the continuous mode; the records copied."""
        flow = self.flow
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
        copied = self.copy_batch()
        if flow.emit_offset_syncs_enabled:
            self._send_syncs(self.writer.tick(self.clock()))
            self._pump_syncs()
        self.read_offset_syncs(to_end=not self.store.read_to_end)
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
        done = self.caught_up()
        if flow.emit_offset_syncs_enabled:
            self.flush_offset_syncs()
        self.read_offset_syncs(to_end=True)
        if flow.emit_checkpoints_enabled:
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
    ) -> None:
        self.flow = flow
        self.clock = clock
        self.report = report
        self.notices = notices if notices is not None else CompactionNotices(report)
        self.target = ClientConfigs(config.cluster(flow.target))
        self.schedule = HeartbeatSchedule(
            flow.source, flow.target, flow.emit_heartbeats_interval_ms, clock()
        )
        self.beats = 0
        self._producer: Producer | None = None

    def start(self) -> None:
        admin = ClusterAdmin(self.flow.target, self.target.admin(), self.flow.admin_timeout_ms)
        topic = self.flow.heartbeats_topic()
        if topic not in admin.topic_partitions():
            create_internal_topic(
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
