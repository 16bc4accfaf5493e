"""One MirrorMaker 2 flow (source -> target), in virtual time.

The simulator's shell around `linkd.core.mirror`, as `mirror/engine.py` is the
shell over Kafka clients and `sim/link_driver.py` the simulator's shell for
offset-preserving links. Every MM2 decision is the core's: which topics to
mirror and under which name (`plan_remote_topics`, `should_replicate_topic`,
the flow's `ReplicationPolicy`), when to write an offset sync
(`OffsetSyncWriter`), how to translate (`OffsetSyncStore`), which checkpoints
to emit (`checkpoints_for_group`, `CheckpointTracker`), which group offsets to
write on the target (`plan_group_offset_sync`), and the record layouts of the
internal topics (`linkd.core.mirror.wire`). The flow's settings are read by the
core's `mm2.properties` parser (`build_flow`). This module only schedules the
tasks, moves their messages over the simulated network, and carries out what
the core decides through the clusters' own produce, fetch and commit paths.

Rules:
- The mirror is a client process next to the target cluster: a call to the
  target takes `client_latency_ms` each way; a call to the source crosses the
  network (latency, jitter, loss, grudges). A call without an answer within
  CALL_TIMEOUT_MS failed; the source task retries after a back-off doubling
  from BACKOFF_MIN_MS to BACKOFF_MAX_MS. While the clusters cannot talk, or
  either is down, nothing progresses; it resumes afterwards. The process
  itself never crashes: its in-memory state (positions, writer, store,
  tracker) lives on, as a Connect worker that keeps running.
- Source task (MirrorSourceTask): every `refresh.topics.interval` it lists the
  source's topics and creates or grows the remote topics on the target; new
  partitions start at the mirror group's committed offset on the source
  (`connect-mirror-<source>-<target>`), else at the log start
  (auto.offset.reset=earliest). Then it long-polls the source (read
  uncommitted: up to the high watermark, control batches skipped, as Kafka's
  default consumer), produces each partition's records as one batch to the
  remote topic, same partition, same key, value, headers and timestamp, with
  an idempotent producer; offsets are not preserved. Once the target
  acknowledged (durable and under its high watermark) each record goes to the
  writer, whose offset syncs are produced to the offset-syncs topic, and the
  new positions are committed on the source with the next poll (at least
  once: a failed produce leaves the positions where they were, resets the
  producer and reads again, so records may be stored twice). Before each
  fetch a position is validated against the source's leader epochs, as a
  KIP-320 consumer does: after an unclean election cut the source below it,
  the mirror resumes at the cut (what it copied beyond stays on the target).
  A position below the log start is reset to it (auto.offset.reset=earliest).
- Offset syncs are produced as they come, each call one batch; a completion
  (answer or timeout) frees the writer's in-flight slots.
- Checkpoint task (MirrorCheckpointTask): every `emit.checkpoints.interval` it
  reads the offset-syncs topic from where it stopped up to its high watermark
  into the store (the first read reaches the end, so the store translates from
  then on), lists the source groups the group filter keeps with their
  committed offsets, and produces new checkpoints to
  `<source>.checkpoints.internal` on the target; the tracker learns them once
  acknowledged.
- KIP-545 (`sync.group.offsets.enabled`): every interval the tracker's offsets
  and the target's groups (unknown: DEAD; members: ACTIVE; else EMPTY) go to
  `plan_group_offset_sync`, and its writes are committed on the target.
- A remote topic is created with its source topic's configs, those config
  sync would set (`remote_topic_configs`, as the engine and MM2's
  `createNewTopics` do), described in the refresh's call to the source.
- Heartbeats, config sync after creation, ACL sync and exactly-once are not
  simulated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from linkd.core import cluster as core
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.broker_config import describe_topic_configs
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_driver import BACKOFF_MAX_MS, BACKOFF_MIN_MS, DriverSettings
from linkd.core.link_rounds import CALL_TIMEOUT_MS, fetch_deadline_ms, served_wait_ms
from linkd.core.mirror.checkpoint import CheckpointCounts, remote_consumer_offsets
from linkd.core.mirror.config import MirrorFlow, parse_mm2_properties
from linkd.core.mirror.model import OffsetSync, TopicPartition
from linkd.core.mirror.offset_sync import OffsetSyncWriter
from linkd.core.mirror.topic_sync import (
    ConfigEntry,
    ConfigSource,
    plan_remote_topics,
    remote_topic_configs,
    should_replicate_topic,
)
from linkd.core.mirror.wire import (
    MirrorWireError,
    decode_checkpoint,
    decode_offset_sync,
    encode_offset_sync,
)
from sim.checkers import MirrorCopy
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.history import History, Send
from sim.link_service import CONTROL_MESSAGE_BYTES, PER_PARTITION_BYTES
from sim.metrics import recovery_point
from sim.mirror_checkpoints import INTERNAL_RECORD_BYTES, CheckpointTask
from sim.network import Network

TXN_TIMEOUT_MS = 60_000
LINK_TYPES = ("link", "mirror")

T = TypeVar("T")


def source_config_entries(state: core.ClusterState, topic: str) -> tuple[ConfigEntry, ...]:
    """A source topic's configs as MM2's DescribeConfigs reads them (the
    entries `remote_topic_configs` takes)."""
    described = describe_topic_configs(
        state.topics[topic].overrides, state.broker_configs, str(core.BROKER_ID)
    )
    return tuple(
        ConfigEntry(d.name, d.value, ConfigSource[d.source.name], read_only=d.read_only)
        for d in described
    )


@dataclass(frozen=True, slots=True)
class MirrorOptions:
    """The MM2 settings a scenario edge may set (MM2's defaults)."""

    sync_group_offsets: bool = False
    sync_group_offsets_interval_ms: int = 60_000
    emit_checkpoints_interval_ms: int = 60_000
    offset_lag_max: int = 100
    offset_flush_interval_ms: int = 60_000
    refresh_topics_interval_ms: int = 600_000
    offset_syncs_topic_location: str = "source"

    @classmethod
    def of(cls, spec: object) -> MirrorOptions:
        """The options an object (a scenario edge) carries under the same names."""
        defaults = cls()
        values = {
            f.name: getattr(spec, f.name, getattr(defaults, f.name))
            for f in dataclasses.fields(cls)
        }
        return cls(**values)


def build_flow(source: str, target: str, options: MirrorOptions) -> MirrorFlow:
    """The flow source->target as `mm2.properties` would give it: the core's
    parser supplies every default and checks the values; the intervals are
    then set in milliseconds (virtual runs are short; MM2 counts seconds)."""
    flow_key = f"{source}->{target}"
    text = "\n".join(
        [
            f"clusters = {source}, {target}",
            f"{source}.bootstrap.servers = {source}:9092",
            f"{target}.bootstrap.servers = {target}:9092",
            f"{flow_key}.enabled = true",
            f"{flow_key}.sync.group.offsets.enabled = {str(options.sync_group_offsets).lower()}",
            f"{flow_key}.offset.lag.max = {options.offset_lag_max}",
            f"{flow_key}.offset-syncs.topic.location = {options.offset_syncs_topic_location}",
        ]
    )
    flow = parse_mm2_properties(text).flow(source, target)
    return dataclasses.replace(
        flow,
        emit_checkpoints_interval_ms=options.emit_checkpoints_interval_ms,
        sync_group_offsets_interval_ms=options.sync_group_offsets_interval_ms,
        offset_flush_interval_ms=options.offset_flush_interval_ms,
        refresh_topics_interval_ms=options.refresh_topics_interval_ms,
    )


class Observer(Protocol):
    client_latency_ms: int

    def logical_bytes(self, effect: core.AppendBatch) -> int: ...


class Polled(NamedTuple):
    """One record read from the source."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[rb.Header, ...]
    logical_bytes: int


@dataclass
class MirrorStats(CheckpointCounts):
    polls: int = 0
    records_copied: int = 0
    produce_failures: int = 0
    offset_syncs_written: int = 0
    offset_syncs_failed: int = 0
    topics_created: int = 0
    position_resets: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in dataclasses.fields(self)}


Reply = Callable[[Callable[[], None], int], None]
# Per partition: the records polled, the next position, the leader epoch of
# the last batch read (-1: none).
Fetched = dict[TopicPartition, tuple[list[Polled], int, int]]


class MirrorDriver:
    """MirrorSourceTask + MirrorCheckpointTask of one flow, on virtual time."""

    def __init__(
        self,
        name: str,
        source: SimCluster,
        target: SimCluster,
        flow: MirrorFlow,
        queue: EventQueue,
        network: Network,
        sizes: DriverSettings,
        observer: Observer,
        partitions: frozenset[TopicPartition] | None = None,
        checkpoints: bool = True,
    ) -> None:
        self.name = name
        # A Connect task copies only its partitions (sim.connect_driver); None: all.
        self.partitions = partitions
        self.run_checkpoints = checkpoints
        # A paused process: the next step waits for thaw() (sim.connect_driver).
        self.frozen = False
        self._parked = False
        # Called with the positions new partitions start at (sim.connect_driver
        # counts re-copies from them).
        self.on_start_positions: Callable[[dict[TopicPartition, int]], None] | None = None
        self.source = source
        self.target = target
        self.flow = flow
        self.queue = queue
        self.network = network
        self.sizes = sizes
        self.observer = observer
        self.group_id = f"connect-mirror-{flow.source}-{flow.target}"
        on_source = flow.offset_syncs_topic_location == "source"
        self.syncs_cluster = source if on_source else target
        self.syncs_topic = flow.offset_syncs_topic()
        self.checkpoints_topic = flow.checkpoints_topic()
        now = queue.now_ms
        self.writer = OffsetSyncWriter(flow.offset_lag_max, flow.offset_flush_interval_ms, now)
        self.stats = MirrorStats()
        # Source partition -> remote topic, and the next upstream offset to copy.
        self.assigned: dict[TopicPartition, str] = {}
        self.positions: dict[TopicPartition, int] = {}
        # Leader epoch of the last batch copied per partition (KIP-320 validation).
        self.epochs: dict[TopicPartition, int] = {}
        # Positions acknowledged by the target, not yet committed on the source.
        self.uncommitted: dict[TopicPartition, int] = {}
        self.refreshed = False
        self.stopped = False
        self.backoff_ms = BACKOFF_MIN_MS
        self._next_refresh_ms = now
        self._generation = 0  # bumped by stop(): every answer in flight is dropped
        self._producer_id = -1
        self._producer_epoch = -1
        self._sequences: dict[tuple[str, int], int] = {}
        self.checkpoints = CheckpointTask(self)

    # -- names ----------------------------------------------------------------------------

    def remote_topic(self, topic: str) -> str | None:
        """The name `topic` of the source has on the target, if this flow mirrors it."""
        flow = self.flow
        if not should_replicate_topic(
            topic, policy=flow.policy, topic_filter=flow.topic_filter, target_alias=flow.target
        ):
            return None
        return flow.policy.format_remote_topic(flow.source, topic)

    def remote_topics(self) -> list[str]:
        return sorted(set(self.assigned.values()))

    # -- scheduling -----------------------------------------------------------------------

    def start(self) -> None:
        self.queue.after(0, f"mirror {self.name} step", self.step)
        if not self.run_checkpoints:
            return
        if self.flow.emit_checkpoints_enabled:
            self.queue.after(
                self.flow.emit_checkpoints_interval_ms,
                f"mirror {self.name} checkpoints",
                self.checkpoints.checkpoint_tick,
            )
        if self.flow.sync_group_offsets_enabled:
            self.queue.after(
                self.flow.sync_group_offsets_interval_ms,
                f"mirror {self.name} group sync",
                self.checkpoints.group_sync_tick,
            )

    def stop(self) -> None:
        self.stopped = True
        self._generation += 1

    def stop_committing(self) -> None:
        """A graceful stop (a Connect task revoked): answers in flight are
        dropped, and the positions the target acknowledged are committed on
        the source one last time (lost if that call fails)."""
        self.stop()
        commit = dict(sorted(self.uncommitted.items()))
        if not commit:
            return

        def serve(reply: Reply) -> None:
            self._commit_on_source(commit)
            reply(lambda: None, CONTROL_MESSAGE_BYTES)

        size = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(commit)
        self.call(self.source, "final commit", size, serve, lambda: None)

    def _next(self) -> None:
        self.backoff_ms = BACKOFF_MIN_MS
        self.queue.after(0, f"mirror {self.name} step", self.step)

    def _failed(self) -> None:
        if self.stopped:
            return
        delay = self.backoff_ms
        self.backoff_ms = min(BACKOFF_MAX_MS, self.backoff_ms * 2)
        self.queue.after(delay, f"mirror {self.name} retry", self.step)

    def caught_up(self) -> bool:
        """For the liveness phase: every assigned partition copied to the source's
        high watermark (a stopped flow, or one whose clusters are down, is not judged)."""
        if self.stopped or not self.source.up or not self.target.up:
            return True
        if not self.refreshed:
            return False
        for tp, position in sorted(self.positions.items()):
            topic = self.source.state.topics.get(tp.topic)
            if topic is not None and position < topic.partitions[tp.partition].high_watermark:
                return False
        return True

    # -- one call: there and back ---------------------------------------------------------------

    def _deliver(self, src: str, dst: str, size_bytes: int) -> int | None:
        if src == dst:  # the mirror and the target share a site: client latency only
            if dst in self.network.down:
                return None
            return self.queue.now_ms + self.observer.client_latency_ms
        return self.network.deliver_at(src, dst, size_bytes, self.queue.now_ms)

    def call(
        self,
        remote: SimCluster,
        kind: str,
        size_bytes: int,
        serve: Callable[[Reply], None],
        failed: Callable[[], None],
        timeout_ms: int = CALL_TIMEOUT_MS,
    ) -> None:
        """`serve(reply)` runs on `remote` when the request arrives and calls
        reply(apply, answer_bytes) once (maybe later); `apply` runs back at the
        mirror. No answer within `timeout_ms`, or a refusal: `failed()`."""
        generation = self._generation
        site, there = self.target.cluster_id, remote.cluster_id
        label = f"mirror {self.name} {kind}"
        done = [False]

        def fail() -> None:
            if done[0] or generation != self._generation:
                return
            done[0] = True
            failed()

        timer = self.queue.after(timeout_ms, f"{label} timeout", fail)
        arrive = self._deliver(site, there, size_bytes)
        if arrive is None:
            return

        def reply(apply: Callable[[], None], answer_bytes: int) -> None:
            if done[0] or generation != self._generation or not remote.up:
                return
            back = self._deliver(there, site, answer_bytes)
            if back is None:
                return

            def receive() -> None:
                if done[0] or generation != self._generation:
                    return
                done[0] = True
                timer.cancel()
                apply()

            self.queue.at(back, f"{label} answer", receive)

        def at_remote() -> None:
            if done[0] or generation != self._generation or not remote.up:
                return
            try:
                serve(reply)
            except ClusterError as exc:
                self.queue.note(f"{label} refused by {there}: {exc.code.name}")
                reply(failed, CONTROL_MESSAGE_BYTES)  # the refusal travels back

        self.queue.at(arrive, f"{label} request", at_remote)

    # -- the source task ------------------------------------------------------------------------

    def thaw(self) -> None:
        """A paused process runs again: a step that waited runs now."""
        self.frozen = False
        if self._parked and not self.stopped:
            self._parked = False
            self.queue.after(0, f"mirror {self.name} step", self.step)

    def step(self) -> None:
        if self.stopped:
            return
        if self.frozen:
            self._parked = True
            return
        self._send_syncs(self.writer.tick(self.queue.now_ms))
        if self.flow.refresh_topics_enabled and (
            not self.refreshed or self.queue.now_ms >= self._next_refresh_ms
        ):
            self._refresh()
        elif not self.positions:
            # Nothing to mirror yet: look again at the next refresh.
            wait = max(self._next_refresh_ms - self.queue.now_ms, BACKOFF_MAX_MS)
            self.queue.after(wait, f"mirror {self.name} idle", self.step)
        else:
            self._poll()

    def _refresh(self) -> None:
        """MirrorSourceConnector's topic refresh: list, plan, create/grow, assign."""

        def serve(reply: Reply) -> None:
            state = self.source.state
            listing = {name: len(t.partitions) for name, t in sorted(state.topics.items())}
            starts = {
                TopicPartition(name, p): log.log_start_offset
                for name, t in sorted(state.topics.items())
                for p, log in enumerate(t.partitions)
            }
            committed = {
                TopicPartition(t, p): c.offset
                for (t, p), c in state.groups.committed(self.group_id, None).items()
            }
            # The configs of the topics the target lacks (MM2 describes them to
            # create their remote topics with them), in the same call.
            configs = {
                name: source_config_entries(state, name)
                for name in listing
                if (remote := self.remote_topic(name)) is not None
                and remote not in self.target.state.topics
            }
            size = CONTROL_MESSAGE_BYTES + 128 * len(listing) + 64 * sum(map(len, configs.values()))
            reply(lambda: self._apply_refresh(listing, starts, committed, configs), size)

        self.call(self.source, "refresh", CONTROL_MESSAGE_BYTES, serve, self._failed)

    def _apply_refresh(
        self,
        listing: dict[str, int],
        starts: dict[TopicPartition, int],
        committed: dict[TopicPartition, int],
        configs: dict[str, tuple[ConfigEntry, ...]],
    ) -> None:
        # Admin calls on the target: the mirror sits next to it.
        if not self.target.up:
            self._failed()
            return
        flow = self.flow
        target = self.target
        plan = plan_remote_topics(
            listing,
            {name: len(t.partitions) for name, t in sorted(target.state.topics.items())},
            source_alias=flow.source,
            target_alias=flow.target,
            policy=flow.policy,
            topic_filter=flow.topic_filter,
            replication_factor=flow.replication_factor,
        )
        for new in plan.create:
            # Created with the configs config sync would set, as the engine does.
            created_with = remote_topic_configs(
                configs.get(new.source_topic, ()),
                flow.config_property_filter,
                use_defaults_from_source=flow.use_defaults_from_source,
            )
            try:
                _t, effects = target.state.create_topic(
                    new.name, new.partitions, created_with, target.topic_ids()
                )
            except ClusterError as exc:
                self.queue.note(f"mirror {self.name} cannot create {new.name}: {exc.code.name}")
                continue
            target.execute(effects, "metadata", self.observer.logical_bytes)
            self.stats.topics_created += 1
            self.queue.note(f"mirror {self.name} created {new.name} ({new.partitions} partitions)")
        for remote, total in plan.grow:
            try:
                _t, effects = target.state.create_partitions(remote, total)
            except ClusterError as exc:
                self.queue.note(f"mirror {self.name} cannot grow {remote}: {exc.code.name}")
                continue
            target.execute(effects, "metadata", self.observer.logical_bytes)
        started: dict[TopicPartition, int] = {}
        for topic, count in sorted(listing.items()):
            remote_name = self.remote_topic(topic)
            if remote_name is None or remote_name not in target.state.topics:
                continue
            width = min(count, len(target.state.topics[remote_name].partitions))
            for p in range(width):
                tp = TopicPartition(topic, p)
                mine = self.partitions is None or tp in self.partitions
                if tp in self.assigned or not mine:
                    continue
                self.assigned[tp] = remote_name
                self.positions[tp] = started[tp] = committed.get(tp, starts.get(tp, 0))
        if started and self.on_start_positions is not None:
            self.on_start_positions(started)
        self.refreshed = True
        self._next_refresh_ms = self.queue.now_ms + flow.refresh_topics_interval_ms
        self._next()

    def _poll(self) -> None:
        request = dict(sorted(self.positions.items()))
        epochs = dict(sorted(self.epochs.items()))
        commit = dict(sorted(self.uncommitted.items()))
        generation = self._generation

        def serve(reply: Reply) -> None:
            deadline_ms = self.queue.now_ms + served_wait_ms(self.sizes.max_wait_ms)
            self._commit_on_source(commit)
            attempt(reply, deadline_ms)

        def attempt(reply: Reply, deadline_ms: int) -> None:
            if not self.source.up or generation != self._generation:
                return
            now = self.queue.now_ms
            fetched, resets, total = self._read_source(request, epochs)
            if not fetched and not resets and now < deadline_ms:
                parked = [True]

                def wake() -> None:
                    if parked[0]:
                        parked[0] = False
                        self.queue.after(
                            0, f"mirror {self.name} poll wake", lambda: attempt(reply, deadline_ms)
                        )

                def expire() -> None:
                    if parked[0]:
                        parked[0] = False
                        attempt(reply, deadline_ms)

                self.source.wait_for_data(wake)
                self.queue.at(deadline_ms, f"mirror {self.name} poll max wait", expire)
                return
            done = self.source.disk.reserve(total, now, "mirror_read") if total else now
            size = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(request) + total

            def answer() -> None:
                reply(lambda: self._apply_poll(fetched, resets, commit), size)

            self.queue.at(done, f"mirror {self.name} poll read", answer)

        self.stats.polls += 1
        size = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * (len(request) + len(commit))
        timeout_ms = fetch_deadline_ms(self.sizes.max_wait_ms)
        self.call(self.source, "poll", size, serve, self._failed, timeout_ms)

    def _commit_on_source(self, commit: dict[TopicPartition, int]) -> None:
        """Connect's source offset commit, in the mirror's group on the source."""
        if not commit:
            return
        state = self.source.state
        try:
            effects = state.commit_group_offsets(
                self.group_id,
                -1,
                "",
                {(tp.topic, tp.partition): (o, "", -1) for tp, o in sorted(commit.items())},
                self.queue.now_ms,
            )
        except ClusterError as exc:
            self.queue.note(f"mirror {self.name} source commit refused: {exc.code.name}")
            return
        self.source.execute(effects, "offsets", self.observer.logical_bytes)

    def _read_source(
        self, request: dict[TopicPartition, int], epochs: dict[TopicPartition, int]
    ) -> tuple[Fetched, dict[TopicPartition, int], int]:
        """The consumer's fetch (read uncommitted), through the core's read path.
        As a KIP-320 consumer it first validates its position against the
        source's leader epochs (`epoch_end_offset`, Kafka's OffsetsForLeaderEpoch):
        after the source truncated below it, it resumes at the truncation point."""
        state = self.source.state
        fetched: Fetched = {}
        resets: dict[TopicPartition, int] = {}
        total = 0
        for tp, position in sorted(request.items()):
            if total >= self.sizes.fetch_max_bytes:
                break
            try:
                log = state.partition(tp.topic, tp.partition)
            except ClusterError:
                continue
            if tp in epochs:
                epoch, end = rep.epoch_end_offset(log, epochs[tp])
                if epoch < 0 or end < position:
                    resets[tp] = log.log_start_offset if epoch < 0 else end
                    continue
            try:
                plan = state.plan_fetch(tp.topic, tp.partition, position, False, self.group_id)
            except ClusterError as exc:
                if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    resets[tp] = state.partition(tp.topic, tp.partition).log_start_offset
                continue
            budget = min(self.sizes.partition_max_bytes, self.sizes.fetch_max_bytes - total)
            batches, _size = self.source.store(tp.topic, tp.partition).read(
                plan.offset, plan.upper_offset, budget
            )
            records: list[Polled] = []
            next_position = position
            last_epoch = -1
            for b in batches:
                if b.next_offset > plan.upper_offset:
                    break
                header, decoded = rb.decode_records(b.data)
                next_position = b.next_offset
                last_epoch = header.partition_leader_epoch
                total += b.logical_bytes
                if header.is_control:
                    continue
                each = b.logical_bytes // max(1, header.record_count)
                for r in decoded:
                    if r.offset >= position:
                        records.append(
                            Polled(r.offset, r.key, r.value, r.timestamp, tuple(r.headers), each)
                        )
            if next_position != position:
                fetched[tp] = (records, next_position, last_epoch)
        return fetched, resets, total

    def _apply_poll(
        self,
        fetched: Fetched,
        resets: dict[TopicPartition, int],
        committed: dict[TopicPartition, int],
    ) -> None:
        for tp, offset in sorted(committed.items()):
            if self.uncommitted.get(tp) == offset:
                del self.uncommitted[tp]
        for tp, offset in sorted(resets.items()):
            self.queue.note(f"mirror {self.name} {tp} out of range: reset to {offset}")
            self.positions[tp] = offset
            self.uncommitted[tp] = offset
            self.epochs.pop(tp, None)
            self.stats.position_resets += 1
        if not fetched:
            self._next()
            return
        generation = self._generation
        self.queue.after(
            self.observer.client_latency_ms,
            f"mirror {self.name} produce",
            lambda: self._produce(fetched, generation),
        )

    def _reset_producer(self) -> None:
        # As a Kafka producer after a fatal error: a new id, sequences start over.
        self._producer_id = -1
        self._sequences = {}

    def _produce(self, fetched: Fetched, generation: int) -> None:
        if generation != self._generation:
            return
        target = self.target
        if not target.up:
            self.stats.produce_failures += 1
            self._failed()
            return
        state = target.state
        now = self.queue.now_ms
        effects: list[core.Effect] = []
        sent: list[tuple[TopicPartition, int]] = []
        sizes: dict[tuple[str, int, int], int] = {}
        try:
            if self._producer_id < 0:
                pid, epoch, init = state.init_producer_id("", TXN_TIMEOUT_MS, now)
                target.execute(init, "metadata", self.observer.logical_bytes)
                self._producer_id, self._producer_epoch = pid, epoch
            for tp in sorted(fetched):
                records, _next, _epoch = fetched[tp]
                if not records:
                    continue  # control batches only: the position moves on the ack
                remote = self.assigned[tp]
                key = (remote, tp.partition)
                batch = rb.build_batch(
                    [rb.RecordSpec(r.key, r.value, r.timestamp, r.headers) for r in records],
                    producer_id=self._producer_id,
                    producer_epoch=self._producer_epoch,
                    base_sequence=self._sequences.get(key, 0),
                )
                result = state.produce(remote, tp.partition, batch, "", now)
                self._sequences[key] = self._sequences.get(key, 0) + len(records)
                effects += result.effects
                sent.append((tp, result.base_offset))
                topic_id = state.topic(remote).topic_id
                sizes[(topic_id, tp.partition, result.base_offset)] = sum(
                    r.logical_bytes for r in records
                )
        except ClusterError as exc:
            # What the target accepted before the refusal is written all the same.
            target.execute(effects, "mirror_write", self._sized(sizes))
            self.queue.note(f"mirror {self.name} produce refused: {exc.code.name}")
            self._reset_producer()
            self.stats.produce_failures += 1
            self._failed()
            return
        targets = {
            (self.assigned[tp], tp.partition): state.partition(
                self.assigned[tp], tp.partition
            ).log_end_offset
            for tp, _base in sent
        }

        answered_once = [False]

        def answered(timed_out: ClusterError | None) -> None:
            if answered_once[0]:
                return
            answered_once[0] = True
            timer.cancel()
            self.queue.after(
                self.observer.client_latency_ms,
                f"mirror {self.name} produce ack",
                lambda: self._acknowledged(fetched, sent, timed_out, generation),
            )

        # A client gives up after its request timeout (a crashed target would
        # otherwise hold the acknowledgement for HW_WAIT_MAX_MS).
        timer = self.queue.after(
            CALL_TIMEOUT_MS,
            f"mirror {self.name} produce timeout",
            lambda: answered(
                ClusterError(ErrorCode.REQUEST_TIMED_OUT, self.name, "produce not acknowledged")
            ),
        )

        def durable() -> None:
            target.wait_high_watermarks(targets, f"mirror {self.name} produce", answered)

        target.execute(effects, "mirror_write", self._sized(sizes), durable)

    def _sized(self, sizes: dict[tuple[str, int, int], int]) -> Callable[[core.AppendBatch], int]:
        def sized(effect: core.AppendBatch) -> int:
            key = (effect.topic_id, effect.partition, effect.header.base_offset)
            return sizes.get(key, self.observer.logical_bytes(effect))

        return sized

    def _acknowledged(
        self,
        fetched: Fetched,
        sent: list[tuple[TopicPartition, int]],
        timed_out: ClusterError | None,
        generation: int,
    ) -> None:
        if generation != self._generation:
            return
        if timed_out is not None:
            self.queue.note(f"mirror {self.name} produce not acknowledged: {timed_out.code.name}")
            self._reset_producer()
            self.stats.produce_failures += 1
            self._failed()
            return
        syncs: list[OffsetSync] = []
        for tp, base in sent:
            records, _next, _epoch = fetched[tp]
            for i, r in enumerate(records):
                if self.flow.emit_offset_syncs_enabled:
                    syncs += self.writer.on_record_acknowledged(tp, r.offset, base + i)
            self.stats.records_copied += len(records)
        for tp, (_records, next_position, epoch) in sorted(fetched.items()):
            self.positions[tp] = next_position
            self.uncommitted[tp] = next_position
            if epoch >= 0:
                self.epochs[tp] = epoch
        self._send_syncs(syncs)
        self._next()

    # -- offset syncs ---------------------------------------------------------------------------

    def _send_syncs(self, syncs: list[OffsetSync]) -> None:
        """Produce syncs to the offset-syncs topic (partition 0), one batch per call."""
        if not syncs or self.stopped:
            return
        node = self.syncs_cluster
        count = len(syncs)

        def serve(reply: Reply) -> None:
            state = node.state
            now = self.queue.now_ms
            self.ensure_topic(node, self.syncs_topic)
            specs = [rb.RecordSpec(*encode_offset_sync(s), now) for s in syncs]
            result = state.produce(self.syncs_topic, 0, rb.build_batch(specs), "", now)
            targets = {(self.syncs_topic, 0): state.partition(self.syncs_topic, 0).log_end_offset}

            def answered(timed_out: ClusterError | None) -> None:
                reply(lambda: self._syncs_done(count, timed_out is None), CONTROL_MESSAGE_BYTES)

            node.execute(
                result.effects,
                "mirror_internal",
                self.internal_bytes,
                lambda: node.wait_high_watermarks(targets, "offset syncs", answered),
            )

        size = CONTROL_MESSAGE_BYTES + INTERNAL_RECORD_BYTES * count
        self.call(node, "offset syncs", size, serve, lambda: self._syncs_done(count, False))

    def _syncs_done(self, count: int, ok: bool) -> None:
        """The producer callback of each sync, either way: frees its slot."""
        if ok:
            self.stats.offset_syncs_written += count
        else:
            self.stats.offset_syncs_failed += count
        more: list[OffsetSync] = []
        for _ in range(count):
            more += self.writer.on_sync_completed()
        self._send_syncs(more)

    def internal_bytes(self, effect: core.AppendBatch) -> int:
        return effect.header.record_count * INTERNAL_RECORD_BYTES

    def ensure_topic(self, node: SimCluster, topic: str) -> None:
        """MM2 creates its internal topics (one partition) before using them."""
        if topic in node.state.topics:
            return
        _t, effects = node.state.create_topic(topic, 1, {}, node.topic_ids())
        node.execute(effects, "metadata", self.observer.logical_bytes)
        self.stats.topics_created += 1

    def read_syncs(self, node: SimCluster, start: int) -> tuple[list[OffsetSync], int]:
        """Records of the offset-syncs topic from `start` up to its high watermark."""
        return _read_internal(node, self.syncs_topic, start, decode_offset_sync, self.queue)

    # -- what the checkers and a failover need ---------------------------------------------------

    def copies(self) -> list[MirrorCopy]:
        """Each partition copied, with the position the flow committed on the source."""
        committed = self.source.state.groups.committed(self.group_id, None)
        out: list[MirrorCopy] = []
        for tp, remote in sorted(self.assigned.items()):
            c = committed.get((tp.topic, tp.partition))
            if c is not None:
                out.append(
                    MirrorCopy(
                        self.name,
                        self.source.cluster_id,
                        tp.topic,
                        tp.partition,
                        self.target.cluster_id,
                        remote,
                        c.offset,
                    )
                )
        return out

    def checkpointed_offsets(self, group: str, remote: str) -> dict[int, int]:
        """MirrorClient.remoteConsumerOffsets on the target (RemoteClusterUtils'
        translateOffsets): the group's newest checkpoints of `remote`, by partition."""
        if not self.target.up:
            return {}
        records, _end = _read_internal(
            self.target, self.checkpoints_topic, 0, decode_checkpoint, self.queue
        )
        offsets = remote_consumer_offsets(records, group)
        return {tp.partition: o.offset for tp, o in sorted(offsets.items()) if tp.topic == remote}

    def measure_rpo(self, history: History) -> tuple[int, int]:
        """(records, ms): records the source acknowledged that the target's remote
        topics do not hold below their high watermark, compared by value (offsets
        differ across a mirror); the span as `sim.metrics.recovery_point`. Bulk records carry
        no value: the first N of a partition count as held when the target holds
        N empty records there."""
        held: dict[tuple[str, int], set[str]] = {}
        bulk_held: dict[tuple[str, int], int] = {}
        source = self.source.cluster_id
        sends = [
            (op, op.value)
            for op in history.sends()
            if op.type == "ok" and op.cluster == source and isinstance(op.value, Send)
        ]
        sends.sort(key=lambda pair: (pair[1].topic, pair[1].partition, pair[1].offset))
        acked: list[tuple[tuple[str, int], int, int, bool]] = []
        for op, send in sends:
            remote = self.remote_topic(send.topic)
            if remote is None or remote not in self.target.state.topics:
                continue
            key = (send.topic, send.partition)
            if key not in held:
                held[key], bulk_held[key] = self._held_values(remote, send.partition)
            if send.value:
                kept = send.value in held[key]
            else:
                kept = bulk_held[key] >= send.records
                bulk_held[key] = max(0, bulk_held[key] - send.records)
            acked.append((key, op.complete_ms, send.records, kept))
        return recovery_point(acked)

    def _held_values(self, remote: str, partition: int) -> tuple[set[str], int]:
        state = self.target.state
        topic = state.topics[remote]
        if partition >= len(topic.partitions):
            return set(), 0
        hw = topic.partitions[partition].high_watermark
        values: set[str] = set()
        empty = 0
        for b in self.target.store(remote, partition).batches:
            if b.base_offset >= hw:
                break
            header, records = rb.decode_records(b.data)
            if header.is_control:
                continue
            for r in records:
                if r.offset >= hw:
                    break
                if r.value:
                    values.add(r.value.decode())
                else:
                    empty += 1
        return values, empty


def _read_internal(
    node: SimCluster,
    topic: str,
    start: int,
    decode: Callable[[bytes | None, bytes | None], T],
    queue: EventQueue,
) -> tuple[list[T], int]:
    """Decoded records of an MM2 internal topic (partition 0) from `start` up
    to its high watermark, and where the next read starts."""
    if topic not in node.state.topics:
        return [], 0
    log = node.state.partition(topic, 0)
    start = max(start, log.log_start_offset)
    hw = log.high_watermark
    out: list[T] = []
    end = start
    for b in node.store(topic, 0).batches[node.store(topic, 0).index_at(start) :]:
        if b.next_offset > hw:
            break
        end = b.next_offset
        header, records = rb.decode_records(b.data)
        if header.is_control:
            continue
        for r in records:
            if r.offset < start:
                continue
            try:
                out.append(decode(r.key, r.value))
            except MirrorWireError as exc:
                queue.note(f"skipping a record of {topic}: {exc}")
    return out, end
