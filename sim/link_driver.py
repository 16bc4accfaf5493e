"""The dialing side of one replication link, in virtual time.

Mirrors `LinkRunner.step` / `pull` (linkd/replication.py) and the source-side
servicers it calls (`LinkManager.on_handshake`, `ListSourceTopics`,
`FetchGroupOffsets`, `serve_fetch`) and the follower-side appliers
(`apply_topics`, `apply_fetched`, `apply_group_offsets`). Every decision is the
core's: `accept_remote_config` (HLC merge), `create_replica_topic`,
`follow_topic_shape`, `plan_replica_fetch` (divergence), `append_replica`,
`truncate_replica`, `apply_replicated_offsets`, the LinkTable state machine.

Rules (the daemon's, with the same constants):
- One call at a time per link: handshake every HANDSHAKE_INTERVAL_MS, topic and
  group-offset discovery every DISCOVERY_INTERVAL_MS, otherwise a replica fetch
  for every follower partition.
- A call whose answer does not arrive within CALL_TIMEOUT_MS failed: the core
  hears `on_contact_lost`, and the driver retries after a back-off doubling
  from BACKOFF_MIN_MS to BACKOFF_MAX_MS.
- The source answers a fetch at once when it has data, otherwise parks it until
  a high watermark moves or FETCH_MAX_WAIT_MS passes (long poll).
- The source reads fetched batches from its I/O device (shared with producers)
  and within its replication rate limit; the answer leaves when the read is
  done.
- The follower's next call starts only once its appends are durable (as
  `apply_fetched` awaits `_execute`).

Only the follower dials here ("pull"; connection direction local_dials on
the follower). Push (the leader dials) and SYNC links plug in as other
`Call` kinds: `step` picks the call, the source handler answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from linkd.core import cluster as core
from linkd.core import replication as rep
from linkd.core.errors import ClusterError
from linkd.core.links import LinkConfig
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.network import Network

HANDSHAKE_INTERVAL_MS = 2_000
DISCOVERY_INTERVAL_MS = 500
FETCH_MAX_WAIT_MS = 500
CALL_TIMEOUT_MS = 10_000
BACKOFF_MIN_MS = 100
BACKOFF_MAX_MS = 2_000
IDLE_POLL_MS = 200
CONTROL_MESSAGE_BYTES = 1_024
PER_PARTITION_BYTES = 64


@dataclass(frozen=True, slots=True)
class FetchSizes:
    fetch_max_bytes: int = 8 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    max_wait_ms: int = FETCH_MAX_WAIT_MS


class Observer(Protocol):
    def logical_bytes(self, effect: core.AppendBatch) -> int: ...
    def follower_applied(self, cluster: SimCluster, link_name: str) -> None: ...


def wire(config: LinkConfig) -> LinkConfig:
    """A configuration as it crosses the network: a copy, never shared."""
    return LinkConfig.from_record(config.to_record())


@dataclass(slots=True)
class PartitionFetch:
    source_topic: str
    partition: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(slots=True)
class FetchedPartition:
    source_topic: str
    partition: int
    high_watermark: int = 0
    log_start_offset: int = 0
    diverging_end_offset: int = -1
    data: bytes = b""
    logical: dict[int, int] = field(default_factory=dict)  # base offset -> logical bytes
    error: str = ""


class LinkDriver:
    def __init__(
        self,
        name: str,
        follower: SimCluster,
        source: SimCluster,
        queue: EventQueue,
        network: Network,
        sizes: FetchSizes,
        observer: Observer,
    ) -> None:
        self.name = name
        self.follower = follower
        self.source = source
        self.queue = queue
        self.network = network
        self.sizes = sizes
        self.observer = observer
        self.stopped = False
        self.backoff_ms = BACKOFF_MIN_MS
        self.last_handshake_ms: int | None = None
        self.last_discovery_ms: int | None = None
        self.held_offsets: list[rep.GroupOffset] = []
        self._call_id = 0
        self._timeout: Timer | None = None
        self.fetch_rounds = 0

    # -- scheduling ----------------------------------------------------------------

    def start(self) -> None:
        self.queue.after(0, f"link {self.name} step", self.step)

    def stop(self) -> None:
        self.stopped = True
        self._call_id += 1
        if self._timeout is not None:
            self._timeout.cancel()

    def wake(self) -> None:
        """Mappings changed: handshake and discover on the next step (runner.wake)."""
        self.last_handshake_ms = None
        self.last_discovery_ms = None

    def _config(self) -> LinkConfig | None:
        return self.follower.links.configs.get(self.name)

    def step(self) -> None:
        if self.stopped:
            return
        if not self.follower.up:
            self.queue.after(BACKOFF_MAX_MS, f"link {self.name} step", self.step)
            return
        config = self._config()
        if config is None:
            self.stopped = True
            return
        now = self.queue.now_ms
        if self.last_handshake_ms is None or now - self.last_handshake_ms >= HANDSHAKE_INTERVAL_MS:
            self._call("handshake", CONTROL_MESSAGE_BYTES, self._serve_handshake(config))
        elif rep.follower_mappings(config, "topic"):
            due = self.last_discovery_ms is None
            if due or now - (self.last_discovery_ms or 0) >= DISCOVERY_INTERVAL_MS:
                self._call("discover", CONTROL_MESSAGE_BYTES, self._serve_discovery(config))
            else:
                request = self._follower_request(config)
                if not request:
                    # As LinkRunner.pull: discovered, and nothing to follow yet,
                    # so nothing lags.
                    self.follower.state.links.on_fetch_round(self.name, now)
                    self.queue.after(IDLE_POLL_MS, f"link {self.name} idle", self.step)
                    return
                self._call(
                    "fetch",
                    CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(request),
                    self._serve_fetch(config, request),
                )
        else:
            # Nothing to follow: keep the session alive with handshakes.
            self.queue.after(HANDSHAKE_INTERVAL_MS, f"link {self.name} idle", self.step)

    # -- one call: request over the network, served by the source, answer back --------

    def _call(
        self,
        kind: str,
        size_bytes: int,
        serve: Callable[[Callable[[Callable[[], None], int], None]], None],
    ) -> None:
        """`serve(reply)` runs on the source; it calls reply(apply, size) once
        (maybe later: long poll) with the follower-side continuation."""
        self._call_id += 1
        call_id = self._call_id
        f, s = self.follower.cluster_id, self.source.cluster_id
        self._timeout = self.queue.after(
            CALL_TIMEOUT_MS, f"link {self.name} {kind} timeout", lambda: self._failed(call_id)
        )
        arrive = self.network.deliver_at(f, s, size_bytes, self.queue.now_ms)
        if arrive is None:
            return

        def reply(apply: Callable[[], None], answer_bytes: int) -> None:
            if call_id != self._call_id or not self.source.up:
                return
            back = self.network.deliver_at(s, f, answer_bytes, self.queue.now_ms)
            if back is None:
                return

            def receive() -> None:
                if call_id != self._call_id or not self.follower.up or self.stopped:
                    return
                if self._timeout is not None:
                    self._timeout.cancel()
                self.backoff_ms = BACKOFF_MIN_MS
                try:
                    apply()
                except ClusterError as exc:
                    self.queue.note(f"link {self.name} {kind} refused: {exc.code.name}")
                    self._failed(call_id)

            self.queue.at(back, f"link {self.name} {kind} answer", receive)

        def at_source() -> None:
            if call_id != self._call_id or not self.source.up:
                return
            try:
                serve(reply)
            except ClusterError as exc:
                self.queue.note(f"link {self.name} {kind} refused by source: {exc.code.name}")

        self.queue.at(arrive, f"link {self.name} {kind} request", at_source)

    def _failed(self, call_id: int) -> None:
        if call_id != self._call_id or self.stopped:
            return
        self._call_id += 1
        if self.follower.up:
            self.follower.links.on_contact_lost(self.name, self.queue.now_ms)
        delay = self.backoff_ms
        self.backoff_ms = min(BACKOFF_MAX_MS, self.backoff_ms * 2)
        self.queue.after(delay, f"link {self.name} retry", self.step)

    def _next(self) -> None:
        self.queue.after(0, f"link {self.name} step", self.step)

    # -- handshake (LinkRunner.step, LinkManager.on_handshake) ---------------------------

    def _serve_handshake(
        self, config: LinkConfig
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        sent = wire(config)

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            now = self.queue.now_ms
            records = rep.accept_remote_config(self.source.state, sent, now)
            self.source.links.on_contact(sent.name, now)
            self.source.journal_records += len(records)
            answer = wire(self.source.links.get(sent.name))

            def apply() -> None:
                now2 = self.queue.now_ms
                got = rep.accept_remote_config(self.follower.state, answer, now2)
                self.follower.journal_records += len(got)
                self.follower.links.on_contact(self.name, now2)
                self.last_handshake_ms = now2
                self._next()

            reply(apply, CONTROL_MESSAGE_BYTES)

        return serve

    # -- discovery (LinkRunner.pull, ListSourceTopics, FetchGroupOffsets) -----------------

    def _serve_discovery(
        self, config: LinkConfig
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        topic_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "topic")]
        group_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "group")]
        link_id = config.link_id

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            state = self.source.state
            source_config = state.links.by_id(link_id)
            now = self.queue.now_ms
            self.source.links.on_contact(source_config.name, now)
            namespaces: list[tuple[str, list[tuple[str, int, dict[str, str]]], list[Any]]] = []
            for prefix in topic_prefixes:
                topics = [
                    (name, len(t.partitions), dict(t.overrides))
                    for name, t in sorted(state.topics.items())
                    if rep.in_prefix(name, prefix)
                    and rep.leader_mapping_for(source_config, name) is not None
                ]
                namespaces.append((prefix, topics, rep.source_read_acls(state, prefix)))
            offsets: list[rep.GroupOffset] = []
            for prefix in group_prefixes:
                offsets += source_group_offsets(self.source, prefix)
            size = CONTROL_MESSAGE_BYTES + 128 * sum(len(t) for _, t, _ in namespaces)

            def apply() -> None:
                self._apply_topics(namespaces)
                self._apply_group_offsets(offsets + self.held_offsets)
                self.last_discovery_ms = self.queue.now_ms
                self._next()

            reply(apply, size)

        return serve

    def _apply_topics(
        self, namespaces: list[tuple[str, list[tuple[str, int, dict[str, str]]], list[Any]]]
    ) -> None:
        """linkd/replication.py apply_topics."""
        config = self._config()
        if config is None:
            return
        state = self.follower.state
        followed = {m.remote_prefix: m for m in rep.follower_mappings(config, "topic")}
        effects: list[core.Effect] = []
        records: list[dict[str, Any]] = []
        for prefix, topics, acls in namespaces:
            mapping = followed.get(prefix)
            if mapping is None:
                continue
            for source_name, partitions, configs in topics:
                local = rep.map_name(source_name, mapping.remote_prefix, mapping.local_prefix)
                if local not in state.topics:
                    effects += rep.create_replica_topic(
                        state, local, partitions, configs, self.follower.topic_ids()
                    )
                else:
                    effects += rep.follow_topic_shape(state, local, partitions, configs)
            records += rep.apply_read_acls(state, self.name, prefix, acls)
        if records:
            effects.append(core.Journal(tuple(records)))
        self.follower.execute(effects, "metadata", self.observer.logical_bytes)

    def _apply_group_offsets(self, offsets: list[rep.GroupOffset]) -> None:
        """linkd/replication.py apply_group_offsets."""
        if not offsets:
            self.held_offsets = []
            return
        records, effects, held = rep.apply_replicated_offsets(
            self.follower.state, self.name, offsets, self.queue.now_ms, self.follower.topic_ids()
        )
        self.held_offsets = held
        if records:
            self.follower.execute(
                [*effects, core.Journal(tuple(records))], "offsets", self.observer.logical_bytes
            )
        self.observer.follower_applied(self.follower, self.name)

    # -- replica fetch (follower_request, serve_fetch, apply_fetched) ---------------------

    def _follower_request(self, config: LinkConfig) -> list[tuple[PartitionFetch, str]]:
        """linkd/replication.py follower_request: (position, local topic) pairs."""
        state = self.follower.state
        followed = rep.follower_mappings(config, "topic")
        out: list[tuple[PartitionFetch, str]] = []
        for topic in sorted(state.topics):
            mapping = max(
                (m for m in followed if rep.in_prefix(topic, m.local_prefix)),
                key=lambda m: len(m.local_prefix),
                default=None,
            )
            if mapping is None:
                continue
            source = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
            for p in range(len(state.topics[topic].partitions)):
                offset, epoch = rep.follower_position(state, topic, p)
                out.append((PartitionFetch(source, p, offset, epoch), topic))
        return out

    def _serve_fetch(
        self, config: LinkConfig, request: list[tuple[PartitionFetch, str]]
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        link_id = config.link_id
        deadline_ms = self.queue.now_ms + self.sizes.max_wait_ms  # reset at arrival below
        parts = [p for p, _ in request]
        local_of = {(p.source_topic, p.partition): local for p, local in request}

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            nonlocal deadline_ms
            deadline_ms = self.queue.now_ms + self.sizes.max_wait_ms
            attempt(reply)

        def attempt(reply: Callable[[Callable[[], None], int], None]) -> None:
            if not self.source.up:
                return
            now = self.queue.now_ms
            state = self.source.state
            source_name = state.links.by_id(link_id).name
            limiter = self.source.replication_limit
            budget_total = min(self.sizes.fetch_max_bytes, limiter.available(now))
            out: list[FetchedPartition] = []
            total = 0
            with self.source.links.deferred():
                self.source.links.on_contact(source_name, now)
                for part in parts:
                    entry = FetchedPartition(part.source_topic, part.partition)
                    out.append(entry)
                    try:
                        plan = rep.plan_replica_fetch(
                            state,
                            link_id,
                            part.source_topic,
                            part.partition,
                            part.fetch_offset,
                            part.last_fetched_epoch,
                        )
                    except ClusterError as exc:
                        entry.error = exc.code.name
                        continue
                    log = state.partition(part.source_topic, part.partition)
                    entry.log_start_offset = log.log_start_offset
                    entry.high_watermark = log.high_watermark
                    if isinstance(plan, rep.Diverged):
                        entry.diverging_end_offset = plan.end_offset
                        continue
                    self.source.links.on_progress(
                        source_name,
                        part.source_topic,
                        part.partition,
                        "leader",
                        part.fetch_offset,
                        plan.high_watermark,
                        now,
                    )
                    if plan.upper_offset > plan.offset and total < budget_total:
                        budget = max(1, min(self.sizes.partition_max_bytes, budget_total - total))
                        batches, size = self.source.store(part.source_topic, part.partition).read(
                            plan.offset, plan.upper_offset, budget
                        )
                        entry.data = b"".join(b.data for b in batches)
                        entry.logical = {b.base_offset: b.logical_bytes for b in batches}
                        total += size
            diverged = any(e.diverging_end_offset >= 0 for e in out)
            if total == 0 and not diverged and now < deadline_ms:
                # Long poll: wait for data (or for the rate limit's tokens).
                wait = limiter.wait_ms(1, now) if budget_total <= 0 else 0
                if wait > 0:
                    self.queue.at(
                        min(deadline_ms, now + wait),
                        f"link {self.name} throttled",
                        lambda: attempt(reply),
                    )
                else:
                    parked = [True]

                    def wake() -> None:
                        if parked[0]:
                            parked[0] = False
                            self.queue.after(
                                0, f"link {self.name} fetch wake", lambda: attempt(reply)
                            )

                    def expire() -> None:
                        if parked[0]:
                            parked[0] = False
                            attempt(reply)

                    self.source.wait_for_data(wake)
                    self.queue.at(deadline_ms, f"link {self.name} fetch max wait", expire)
                return
            limiter.take(total, now)
            done = self.source.disk.reserve(total, now, "replica_read") if total else now
            answer_bytes = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(out) + total

            sync_state = self.source.links.local_sync_state(source_name)

            def apply() -> None:
                self._apply_fetched(out, local_of, sync_state)

            self.queue.at(done, f"link {self.name} fetch read", lambda: reply(apply, answer_bytes))

        return serve

    def _apply_fetched(
        self,
        fetched: list[FetchedPartition],
        local_of: dict[tuple[str, int], str],
        sync_state: str = "",
    ) -> None:
        """linkd/replication.py apply_fetched: truncate, append, then progress."""
        state = self.follower.state
        now = self.queue.now_ms
        self.follower.links.on_contact(self.name, now)
        effects: list[core.Effect] = []
        progress: list[tuple[str, int, int]] = []
        logical: dict[tuple[str, int, int], int] = {}
        config = self._config()
        for entry in fetched:
            local = local_of.get((entry.source_topic, entry.partition))
            if local is None or local not in state.topics or entry.error:
                continue
            if entry.diverging_end_offset >= 0:
                effects += rep.truncate_replica(
                    state, local, entry.partition, entry.diverging_end_offset
                )
                self.queue.note(
                    f"link {self.name} {local}-{entry.partition} diverged, truncate to "
                    f"{entry.diverging_end_offset}"
                )
                continue
            if entry.data or entry.log_start_offset > 0:
                effects += rep.append_replica(
                    state, local, entry.partition, entry.data, entry.log_start_offset, config
                )
                topic_id = state.topic(local).topic_id
                for base, size in entry.logical.items():
                    logical[(topic_id, entry.partition, base)] = size
            progress.append((local, entry.partition, entry.high_watermark))

        def sized(effect: core.AppendBatch) -> int:
            key = (effect.topic_id, effect.partition, effect.header.base_offset)
            return logical.get(key, self.observer.logical_bytes(effect))

        def after_durable() -> None:
            now2 = self.queue.now_ms
            links = self.follower.links
            if self.name not in links.runtime:
                self._next()
                return
            keep: set[tuple[str, int, str]] = set()
            links.on_remote_sync_state(self.name, sync_state, now2)
            caps = [(t, p, hw) for t, p, hw in progress if t in state.topics]
            if rep.follow_source_high_watermarks(state, self.name, caps):
                self.follower.notify_data()
            with links.deferred():
                for local, p, source_hw in progress:
                    if local not in state.topics:
                        continue
                    leo = state.partition(local, p).log_end_offset
                    links.on_progress(self.name, local, p, "follower", leo, source_hw, now2)
                    keep.add((local, p, "follower"))
                links.on_fetch_round(self.name, now2)
                runtime = links.runtime.get(self.name)
                if runtime is not None:
                    links.forget_partitions(
                        self.name, keep | {k for k in runtime.partitions if k[2] == "leader"}
                    )
            self.fetch_rounds += 1
            self.observer.follower_applied(self.follower, self.name)
            self._next()

        self.follower.execute(effects, "replica_write", sized, after_durable)


def source_group_offsets(cluster: SimCluster, prefix: str) -> list[rep.GroupOffset]:
    """linkd/replication.py group_offsets: committed offsets of a namespace's groups."""
    state = cluster.state
    out: list[rep.GroupOffset] = []
    for group_id, _state, _type in sorted(state.groups.list_groups()):
        if not rep.in_prefix(group_id, prefix):
            continue
        for (topic, partition), c in sorted(state.groups.committed(group_id, None).items()):
            out.append((group_id, topic, partition, c.offset, c.metadata, c.leader_epoch))
    return out
