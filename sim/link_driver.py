"""The dialing side of one replication link, in virtual time.

The simulator's transport for the rounds of `linkd.core.link_rounds`, which
the daemon (linkd/replication.py) carries over gRPC: the handshake
(`accept_handshake`, `accept_handshake_answer`), discovery (`source_topics`,
`source_group_offsets`, `plan_topics`, then the core's
`apply_replicated_offsets`) and the replica fetch (`follower_fetch_request`,
`serve_replica_fetch`, `apply_replica_fetch`, `finish_fetch_round`). This
module decides nothing about replication: it only schedules calls, moves
their messages over the simulated network, holds long polls, charges the I/O
device and the rate limit, and carries out effects.

Rules (the daemon's, with the same constants):
- One call at a time per link: handshake every HANDSHAKE_INTERVAL_MS, topic and
  group-offset discovery every DISCOVERY_INTERVAL_MS, otherwise a replica fetch
  for every follower partition.
- A call whose answer does not arrive within CALL_TIMEOUT_MS failed: the core
  hears `on_contact_lost`, and the driver retries after a back-off doubling
  from BACKOFF_MIN_MS to BACKOFF_MAX_MS.
- The source answers a fetch at once when the answer is ready (bytes or a
  divergence: `FetchAnswer.ready`), otherwise parks it until a high watermark
  of a partition it reads moves or FETCH_MAX_WAIT_MS passes (long poll).
- The source reads fetched batches from its I/O device (shared with producers)
  and within its replication rate limit; the answer leaves when the read is
  done.
- The follower's next call starts only once its appends are durable (as
  `apply_fetched` awaits `_execute`).
- A fetch answer tells the follower the source's mode through its SYNC
  verdict; when it disagrees with the follower's config, the next step
  handshakes at once (as `LinkRunner.pull`).

Only the follower dials here ("pull"; connection direction local_dials on
the follower). Push (the leader dials) plugs in as another `Call` kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from linkd.core import cluster as core
from linkd.core import link_rounds as rounds
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
                request = rounds.follower_fetch_request(
                    self.follower.state, config, self.sizes.partition_max_bytes
                )
                if not request.partitions:
                    # As LinkRunner.pull: discovered, and nothing to follow yet,
                    # so nothing lags.
                    self.follower.state.links.on_fetch_round(self.name, now)
                    self.queue.after(IDLE_POLL_MS, f"link {self.name} idle", self.step)
                    return
                self._call(
                    "fetch",
                    CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(request.partitions),
                    self._serve_fetch(request),
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

    # -- handshake (LinkRunner._handshake_once, LinkManager.on_handshake) ---------------

    def _serve_handshake(
        self, config: LinkConfig
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        sent = wire(config)

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            now = self.queue.now_ms
            records = rounds.accept_handshake(self.source.state, sent, False, now)
            self.source.journal_records += len(records)
            answer = wire(self.source.links.get(sent.name))

            def apply() -> None:
                now2 = self.queue.now_ms
                got = rounds.accept_handshake_answer(self.follower.state, self.name, answer, now2)
                self.follower.journal_records += len(got)
                self.last_handshake_ms = now2
                self._next()

            reply(apply, CONTROL_MESSAGE_BYTES)

        return serve

    # -- discovery (LinkRunner.discover, ListSourceTopics, FetchGroupOffsets) -------------

    def _serve_discovery(
        self, config: LinkConfig
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        topic_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "topic")]
        group_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "group")]
        link_id = config.link_id

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            state = self.source.state
            source_config = state.links.by_id(link_id)
            self.source.links.on_contact(source_config.name, self.queue.now_ms)
            namespaces = [rounds.source_topics(state, source_config, p) for p in topic_prefixes]
            offsets: list[rep.GroupOffset] = []
            for prefix in group_prefixes:
                offsets += rounds.source_group_offsets(state, prefix)
            size = CONTROL_MESSAGE_BYTES + 128 * sum(len(ns.topics) for ns in namespaces)

            def apply() -> None:
                self._apply_topics(namespaces)
                self._apply_group_offsets(offsets + self.held_offsets)
                self.last_discovery_ms = self.queue.now_ms
                self._next()

            reply(apply, size)

        return serve

    def _apply_topics(self, namespaces: list[rounds.SourceNamespace]) -> None:
        """linkd/replication.py apply_topics."""
        config = self._config()
        if config is None:
            return
        plan = rounds.plan_topics(self.follower.state, config, namespaces, self.follower.topic_ids)
        self.follower.execute(plan.effects, "metadata", self.observer.logical_bytes)

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

    def _serve_fetch(
        self, request: rounds.FetchRequest
    ) -> Callable[[Callable[[Callable[[], None], int], None]], None]:
        deadline_ms = self.queue.now_ms + self.sizes.max_wait_ms  # reset at arrival below
        # A parked fetch wakes only for the partitions it reads.
        watched = [(p.source_topic, p.partition) for p in request.partitions]

        def serve(reply: Callable[[Callable[[], None], int], None]) -> None:
            nonlocal deadline_ms
            deadline_ms = self.queue.now_ms + self.sizes.max_wait_ms
            attempt(reply)

        def attempt(reply: Callable[[Callable[[], None], int], None]) -> None:
            if not self.source.up:
                return
            now = self.queue.now_ms
            limiter = self.source.replication_limit
            budget_bytes = min(self.sizes.fetch_max_bytes, limiter.available(now))
            # Logical sizes of the batches read, by (source topic id, partition,
            # base offset): the simulated records stand for larger ones.
            logical: dict[tuple[str, int, int], int] = {}

            def read(
                topic_id: str, partition: int, start: int, end: int, max_bytes: int
            ) -> tuple[bytes, int]:
                batches, size = self.source.stores[(topic_id, partition)].read(
                    start, end, max_bytes
                )
                for b in batches:
                    logical[(topic_id, partition, b.base_offset)] = b.logical_bytes
                return b"".join(b.data for b in batches), size

            answer = rounds.serve_replica_fetch(
                self.source.state,
                request.link_id,
                request.partitions,
                now,
                read,
                budget_bytes,
                self.sizes.partition_max_bytes,
            )
            if answer.hw_moved:
                self.source.notify_data()
            if not answer.ready and now < deadline_ms:
                # Long poll: wait for data (or for the rate limit's tokens).
                wait = limiter.wait_ms(1, now) if budget_bytes <= 0 else 0
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

                    self.source.wait_for_data(wake, watched)
                    self.queue.at(deadline_ms, f"link {self.name} fetch max wait", expire)
                return
            total = answer.total_bytes
            limiter.take(total, now)
            done = self.source.disk.reserve(total, now, "replica_read") if total else now
            answer_bytes = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(answer.partitions)
            answer_bytes += total
            # The logical sizes travel with the answer, under the source's names.
            names = {t.topic_id: n for n, t in self.source.state.topics.items()} if logical else {}
            sizes = {(names[tid], p, base): n for (tid, p, base), n in logical.items()}

            def apply() -> None:
                self._apply_fetched(answer, request.local_of, sizes)

            self.queue.at(done, f"link {self.name} fetch read", lambda: reply(apply, answer_bytes))

        return serve

    def _apply_fetched(
        self,
        answer: rounds.FetchAnswer,
        local_of: dict[tuple[str, int], str],
        sizes: dict[tuple[str, int, int], int],
    ) -> None:
        """linkd/replication.py apply_fetched: truncate and append, then, once
        durable, finish the round."""
        state = self.follower.state
        applied = rounds.apply_replica_fetch(state, self.name, answer, local_of, self.queue.now_ms)
        for cut in applied.truncations:
            self.queue.note(
                f"link {self.name} {cut.topic}-{cut.partition} diverged, truncate to {cut.offset}"
            )
        config = self._config()
        if config is not None and bool(answer.sync_state) != (config.mode == "SYNC"):
            # The source runs the other mode: learn the change now, not at the
            # next periodic handshake (LinkRunner.pull).
            self.last_handshake_ms = None
        logical: dict[tuple[str, int, int], int] = {}
        for (source_topic, partition, base), size in sorted(sizes.items()):
            local = local_of.get((source_topic, partition))
            if local is not None and local in state.topics:
                logical[(state.topic(local).topic_id, partition, base)] = size

        def sized(effect: core.AppendBatch) -> int:
            key = (effect.topic_id, effect.partition, effect.header.base_offset)
            return logical.get(key, self.observer.logical_bytes(effect))

        def after_durable() -> None:
            if self.name in self.follower.links.runtime:
                # Marker groups can move partitions beyond the round's.
                anywhere = bool(state.marker_groups)
                moved = rounds.finish_fetch_round(
                    state, self.name, applied.progress, answer.sync_state, self.queue.now_ms
                )
                if moved:
                    keys = [(p.topic, p.partition) for p in applied.progress]
                    self.follower.notify_data(None if anywhere else keys)
                self.fetch_rounds += 1
                self.observer.follower_applied(self.follower, self.name)
            self._next()

        self.follower.execute(applied.effects, "replica_write", sized, after_durable)
