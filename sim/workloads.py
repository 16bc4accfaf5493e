"""Client workloads: producers, bulk producers and consumers.

Rules:
- A workload is a client process with its own seeded stream; it talks to one
  cluster at a time (`cluster`) and moves to `failover_to` when the operator
  fails over to that cluster, as applications do in the seed's stories.
- Clients sit next to their cluster: a request takes `client_latency_ms` each
  way. A request to a crashed cluster ends `info` after `request_timeout_ms`
  (indefinite); a refusal by the core ends `fail` (definite); a write is
  `ok` once its bytes are durable and the high watermark covers it (acks=all:
  on a SYNC link in IN_SYNC that is once the follower holds it), and `info`
  (REQUEST_TIMED_OUT) if the high watermark does not get there in time.
- Producers are idempotent (a producer id per cluster from
  `init_producer_id`, sequences per partition); a fraction of sends run as a
  transaction writing one record to each of `txn_partitions` partitions (add
  partitions, produce, commit). A refused commit (LINK_NOT_IN_SYNC while a
  SYNC link is not IN_SYNC) aborts the transaction and ends `fail`. After any
  refusal the producer takes a new producer id, as a Kafka client does after
  a fatal error, so its sequences start over.
- Bulk producers model traffic at the batch level: every `batch_interval_ms`
  one batch of `records_per_batch` records per partition, each record standing
  for `record_bytes` logical bytes. The batch is built once and reused (its
  offsets are stamped by the core), so thousands of partitions stay cheap.
- Consumers poll every partition of their topic from their positions,
  decode the records, then commit the new positions for their group (a
  standalone commit: generation -1). A consumer with `lag_records` reads no
  further than that many records below each partition's readable end. A
  failover starts a new session that resumes from the group's committed
  offsets on the new cluster.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from linkd.core import cluster as core
from linkd.core import records as rb
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.namespaces import ResourceType
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.history import Commit, History, Op, Poll, Send

TXN_TIMEOUT_MS = 60_000
CONSUMER_MAX_BYTES = 1024 * 1024


class World(Protocol):
    queue: EventQueue
    history: History
    clusters: dict[str, SimCluster]
    client_latency_ms: int
    request_timeout_ms: int
    record_bytes: int

    def client_class(self, cluster: SimCluster, kind: str, topic: str, group: str) -> str: ...

    def logical_bytes(self, effect: core.AppendBatch) -> int: ...

    def sync_witnesses(
        self, cluster: SimCluster, topic: str, partition: int
    ) -> tuple[tuple[str, str, int], ...]: ...

    def followers_of(self, cluster: SimCluster, topic: str) -> tuple[tuple[str, str, str], ...]: ...


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    name: str
    cluster: str
    topic: str
    rate_per_s: float = 10.0
    keys: int = 16
    transactional_fraction: float = 0.0
    txn_partitions: int = 1  # partitions one transaction writes (one record each)
    start_ms: int = 0
    stop_ms: int = -1  # -1: until the safety phase ends
    failover_to: str = ""
    bulk: bool = False
    batch_interval_ms: int = 60_000
    records_per_batch: int = 10
    record_bytes: int = 0  # 0: the run's record_bytes
    # `topic` names a prefix: each send goes to a topic of that prefix on a
    # cluster where it can be written now (an application writing to
    # whichever cluster leads, as operators move namespaces around).
    roam: bool = False
    # A transaction's commit comes this long after its records (0: at once):
    # it is open meanwhile, for an operator's move to meet.
    txn_open_ms: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    name: str
    cluster: str
    topic: str
    group: str
    poll_interval_ms: int = 500
    start_ms: int = 0
    stop_ms: int = -1
    failover_to: str = ""
    read_committed: bool = False
    # Stay this many records behind each partition's readable end (a
    # consumer that lags): read at most up to that end minus lag_records.
    lag_records: int = 0


@dataclass(slots=True)
class _ProducerIds:
    producer_id: int = -1
    epoch: int = -1
    sequences: dict[int, int] = field(default_factory=dict)


class Producer:
    def __init__(self, spec: ProducerSpec, world: World, rng: random.Random, stop_ms: int) -> None:
        self.spec = spec
        self.world = world
        self.rng = rng
        self.cluster = spec.cluster
        self.stop_ms = spec.stop_ms if spec.stop_ms >= 0 else stop_ms
        self.sent = 0
        self.ids: dict[bool, _ProducerIds] = {}
        self._txn_open = False  # a transaction waits for its commit (txn_open_ms)
        self._template: bytes | None = None
        self.record_bytes = spec.record_bytes or world.record_bytes
        self.prefix = spec.topic  # a roaming producer's topic prefix

    def start(self) -> None:
        self.world.queue.at(self.spec.start_ms, f"{self.spec.name} start", self._next)

    def move_to(self, cluster: str, topic: str = "") -> None:
        """Failover; `topic`: the name it writes there (a mirror's remote topic)."""
        self.cluster = cluster
        self.ids = {}
        if topic:
            self.spec = replace(self.spec, topic=topic)

    def _next(self) -> None:
        q = self.world.queue
        if q.now_ms >= self.stop_ms:
            return
        if self.spec.bulk:
            self._send_bulk()
            q.after(self.spec.batch_interval_ms, f"{self.spec.name} bulk", self._next)
            return
        self._send_one()
        gap_ms = max(1, round(self.rng.expovariate(self.spec.rate_per_s) * 1000))
        q.after(gap_ms, f"{self.spec.name} send", self._next)

    # -- one record -------------------------------------------------------------------

    def _roam(self) -> bool:
        """A roaming producer picks where this send goes: a topic of its
        prefix on a live cluster whose namespace takes client writes."""
        candidates = []
        for cid in sorted(self.world.clusters):
            node = self.world.clusters[cid]
            if not node.up:
                continue
            for name in sorted(node.state.topics):
                if (
                    name.startswith(self.prefix)
                    and node.state.namespaces.reserved_by(ResourceType.TOPIC, name) is None
                ):
                    candidates.append((cid, name))
        if not candidates:
            return False
        cid, topic = candidates[self.rng.randrange(len(candidates))]
        if (cid, topic) != (self.cluster, self.spec.topic):
            self.ids = {}  # a new producer there: sequences are per partition
        self.cluster = cid
        if topic != self.spec.topic:  # the same topic again: the same spec
            self.spec = replace(self.spec, topic=topic)
        return True

    def _send_one(self) -> None:
        w = self.world
        if self.spec.roam and not self._roam():
            return
        n = self.sent
        self.sent += 1
        key_index = self.rng.randrange(self.spec.keys)
        transactional = self.rng.random() < self.spec.transactional_fraction
        if self._txn_open:
            transactional = False  # one transaction at a time, as a producer runs them
        elif transactional and self.spec.txn_open_ms > 0:
            self._txn_open = True  # until its commit ends (or it fails to start)
        value = f"{self.spec.name}-{n}"
        txn = f"{self.spec.name}-txn-{n}" if transactional else ""
        invoke = w.queue.now_ms
        cluster_id = self.cluster

        def arrive() -> None:
            node = w.clusters[cluster_id]
            if not node.up:
                if transactional:
                    self._txn_open = False
                self._finish(
                    cluster_id, "info", invoke, Send(self.spec.topic, -1, value), "timeout"
                )
                return
            try:
                partitions = len(node.state.topic(self.spec.topic).partitions)
                width = min(self.spec.txn_partitions, partitions) if transactional else 1
                if width == 1:
                    parts = [(key_index % partitions, value)]
                else:
                    parts = [((key_index + i) % partitions, f"{value}.{i}") for i in range(width)]
                self._produce(node, parts, key_index, txn, invoke)
            except ClusterError as exc:
                self.ids.pop(transactional, None)
                if transactional:
                    self._txn_open = False
                self._finish(
                    cluster_id, "fail", invoke, Send(self.spec.topic, -1, value), exc.code.name
                )

        w.queue.after(w.client_latency_ms, f"{self.spec.name} produce", arrive)

    def _producer_ids(self, node: SimCluster, transactional: bool) -> _ProducerIds:
        ids = self.ids.get(transactional)
        if ids is None:
            txn_id = f"{self.spec.name}-txn" if transactional else ""
            pid, epoch, effects = node.state.init_producer_id(
                txn_id, TXN_TIMEOUT_MS, self.world.queue.now_ms
            )
            node.execute(effects, "metadata", self._sized)
            ids = _ProducerIds(pid, epoch)
            self.ids[transactional] = ids
        return ids

    def _sized(self, effect: core.AppendBatch) -> int:
        return effect.header.record_count * self.record_bytes

    def _produce(
        self,
        node: SimCluster,
        parts: list[tuple[int, str]],
        key_index: int,
        txn: str,
        invoke: int,
    ) -> None:
        w = self.world
        now = w.queue.now_ms
        topic = self.spec.topic
        state = node.state
        transactional = bool(txn)
        ids = self._producer_ids(node, transactional)
        txn_id = f"{self.spec.name}-txn" if transactional else ""
        effects: list[core.Effect] = []
        sends: list[Send] = []
        try:
            if transactional:
                effects += state.add_partitions_to_txn(
                    txn_id, ids.producer_id, ids.epoch, [(topic, p) for p, _ in parts], now
                )
            for partition, value in parts:
                batch = rb.build_batch(
                    [rb.RecordSpec(f"k{key_index}".encode(), value.encode(), now)],
                    producer_id=ids.producer_id,
                    producer_epoch=ids.epoch,
                    base_sequence=ids.sequences.get(partition, 0),
                    transactional=transactional,
                )
                result = state.produce(topic, partition, batch, txn_id, now)
                ids.sequences[partition] = ids.sequences.get(partition, 0) + 1
                effects += result.effects
                sends.append(
                    Send(topic, partition, value, result.base_offset, txn=txn, key=f"k{key_index}")
                )
        except ClusterError:
            # What the core accepted before the refusal is written all the same.
            node.execute(effects, "produce", self._sized)
            raise
        reserved = any(ns.reserved for ns in state.namespaces.matching(ResourceType.TOPIC, topic))
        if transactional and self.spec.txn_open_ms > 0:
            # The records now, the commit later: the transaction stays open
            # meanwhile (an operator's move may abort it: the commit fails).
            node.execute(effects, "produce", self._sized)
            w.queue.after(
                self.spec.txn_open_ms,
                f"{self.spec.name} commit",
                lambda: self._commit_txn(
                    node, topic, parts, sends, ids, txn_id, invoke, [], reserved
                ),
            )
            return
        self._commit_txn(node, topic, parts, sends, ids, txn_id, invoke, effects, reserved)

    def _commit_txn(
        self,
        node: SimCluster,
        topic: str,
        parts: list[tuple[int, str]],
        sends: list[Send],
        ids: _ProducerIds,
        txn_id: str,
        invoke: int,
        effects: list[core.Effect],
        reserved: bool,
    ) -> None:
        """Ends a write: a transaction's commit (after its records, now or
        `txn_open_ms` later), then the wait for the high watermarks.
        `reserved`: whether the namespace was reserved when it wrote."""
        w = self.world
        now = w.queue.now_ms
        state = node.state
        transactional = bool(txn_id)
        if transactional:
            self._txn_open = False
        if not node.up:
            for send in sends:
                self._finish(node.cluster_id, "info", invoke, send, "timeout")
            return
        if transactional:
            # A commit makes the records effective: one into a namespace
            # reserved since they were written is a write to it (spec section
            # 8: the reservation aborts the transaction, so the commit fails).
            reserved = reserved or any(
                ns.reserved for ns in state.namespaces.matching(ResourceType.TOPIC, topic)
            )
        refused: ClusterError | None = None
        if transactional:
            try:
                effects += state.end_txn(txn_id, ids.producer_id, ids.epoch, True, now)
            except ClusterError as exc:
                # The commit is refused (the transaction stays open): the
                # client aborts it and reports the failure.
                refused = exc
                self.ids.pop(transactional, None)
                try:
                    effects += state.end_txn(txn_id, ids.producer_id, ids.epoch, False, now)
                except ClusterError:
                    pass  # fenced or already ended: the coordinator times it out
        if any(
            topic not in state.topics or p >= len(state.topics[topic].partitions) for p, _ in parts
        ):
            refused = refused or ClusterError(
                ErrorCode.UNKNOWN_TOPIC, topic, f"topic {topic!r} was deleted meanwhile"
            )
            targets: dict[tuple[str, int], int] = {}
        else:
            targets = {(topic, p): state.partition(topic, p).log_end_offset for p, _ in parts}
        marks = state.wait_marks(targets)  # what this write left there, before any wait

        def finish(type_: str, error: str, done: list[Send]) -> None:
            def deliver() -> None:
                for send in done:
                    self._finish(node.cluster_id, type_, invoke, send, error, reserved)

            w.queue.after(w.client_latency_ms, f"{self.spec.name} ack", deliver)

        def answered(timed_out: ClusterError | None) -> None:
            if timed_out is not None:
                finish("info", timed_out.code.name, sends)
                return
            witnessed = [
                replace(
                    s,
                    sync_witnesses=w.sync_witnesses(node, s.topic, s.partition),
                    followers=w.followers_of(node, s.topic),
                )
                for s in sends
            ]
            finish("ok", "", witnessed)

        def durable() -> None:
            if refused is not None:
                finish("fail", refused.code.name, sends)
                return
            node.wait_high_watermarks(targets, f"{self.spec.name} produce", answered, marks)

        node.execute(effects, "produce", self._sized, durable)

    def _finish(
        self,
        cluster_id: str,
        type_: str,
        invoke: int,
        send: Send,
        error: str,
        reserved: bool = False,
    ) -> None:
        w = self.world
        node = w.clusters[cluster_id]
        complete = w.queue.now_ms
        if type_ == "info":
            complete = invoke + w.request_timeout_ms
        kind = "producer_txn" if send.value and self.spec.transactional_fraction else "producer"
        w.history.add(
            Op(
                self.spec.name,
                w.client_class(node, kind, send.topic, ""),
                cluster_id,
                "ok" if type_ == "ok" else ("fail" if type_ == "fail" else "info"),
                invoke,
                complete,
                send,
                error,
                reserved,
            )
        )

    # -- bulk batches ---------------------------------------------------------------------

    def _send_bulk(self) -> None:
        w = self.world
        invoke = w.queue.now_ms
        cluster_id = self.cluster

        def arrive() -> None:
            node = w.clusters[cluster_id]
            if not node.up:
                self._finish(cluster_id, "info", invoke, Send(self.spec.topic, -1, ""), "timeout")
                return
            if self._template is None:
                n = self.spec.records_per_batch
                self._template = rb.build_batch(
                    [rb.RecordSpec(None, b"", invoke) for _ in range(n)]
                )
            now = w.queue.now_ms
            try:
                partitions = len(node.state.topic(self.spec.topic).partitions)
            except ClusterError as exc:
                self._finish(
                    cluster_id, "fail", invoke, Send(self.spec.topic, -1, ""), exc.code.name
                )
                return
            for p in range(partitions):
                try:
                    result = node.state.produce(self.spec.topic, p, self._template, "", now)
                except ClusterError as exc:
                    self._finish(
                        cluster_id, "fail", invoke, Send(self.spec.topic, p, ""), exc.code.name
                    )
                    continue
                send = Send(self.spec.topic, p, "", result.base_offset, self.spec.records_per_batch)

                written = node.state.write_marks(result.effects)[1]

                def acked(send: Send = send, written: dict[Any, core.WaitMark] = written) -> None:
                    def answered(timed_out: ClusterError | None) -> None:
                        if timed_out is None:
                            self._finish(cluster_id, "ok", invoke, send, "")
                        else:
                            self._finish(cluster_id, "info", invoke, send, timed_out.code.name)

                    targets = {(send.topic, send.partition): send.offset + send.records}
                    node.wait_high_watermarks(
                        targets, f"{self.spec.name} produce", answered, written
                    )

                node.execute(result.effects, "produce", self._sized, acked)

        w.queue.after(w.client_latency_ms, f"{self.spec.name} bulk produce", arrive)


class Consumer:
    def __init__(self, spec: ConsumerSpec, world: World, stop_ms: int) -> None:
        self.spec = spec
        self.world = world
        self.cluster = spec.cluster
        self.stop_ms = spec.stop_ms if spec.stop_ms >= 0 else stop_ms
        self.session = 0
        self.positions: dict[int, int] | None = None  # None: load from the group
        # Where to start a partition the group has no committed offset for
        # (after a mirror failover: the translated checkpoints); else the log start.
        self.start_offsets: dict[int, int] = {}

    def start(self) -> None:
        self.world.queue.at(self.spec.start_ms, f"{self.spec.name} start", self._poll)

    def move_to(
        self, cluster: str, topic: str = "", start_offsets: dict[int, int] | None = None
    ) -> None:
        """Failover: a new session on `cluster`, reading `topic` there if given (a
        mirror's remote topic), from the group's committed offsets, else from
        `start_offsets`, else from the log start."""
        self.cluster = cluster
        self.session += 1
        self.positions = None
        if topic:
            self.spec = replace(self.spec, topic=topic)
        self.start_offsets = dict(start_offsets or {})

    def _load_positions(self, node: SimCluster) -> dict[int, int]:
        state = node.state
        topic = state.topic(self.spec.topic)
        committed = state.groups.committed(self.spec.group, None)
        out: dict[int, int] = {}
        for p, log in enumerate(topic.partitions):
            c = committed.get((self.spec.topic, p))
            start = self.start_offsets.get(p, log.log_start_offset)
            start = max(log.log_start_offset, min(start, log.log_end_offset))
            out[p] = c.offset if c is not None else start
        return out

    def _poll(self) -> None:
        w = self.world
        if w.queue.now_ms >= self.stop_ms:
            return
        invoke = w.queue.now_ms
        cluster_id = self.cluster
        session = self.session

        def arrive() -> None:
            node = w.clusters[cluster_id]
            if session != self.session:
                return
            if not node.up:
                self._record(
                    node,
                    "info",
                    invoke,
                    invoke + w.request_timeout_ms,
                    Poll(self.spec.topic, (), session),
                    "timeout",
                )
                return
            try:
                self._read(node, invoke, session)
            except ClusterError as exc:
                if exc.code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    # The log was cut below the position: start over from the
                    # committed offsets, as a new session (auto.offset.reset).
                    self.positions = None
                    self.session += 1
                self._record(
                    node,
                    "fail",
                    invoke,
                    w.queue.now_ms,
                    Poll(self.spec.topic, (), session),
                    exc.code.name,
                )

        w.queue.after(w.client_latency_ms, f"{self.spec.name} poll", arrive)
        w.queue.after(self.spec.poll_interval_ms, f"{self.spec.name} next poll", self._poll)

    def _read(self, node: SimCluster, invoke: int, session: int) -> None:
        w = self.world
        state = node.state
        if self.positions is None:
            self.positions = self._load_positions(node)
        positions = self.positions
        got: list[tuple[int, int, str]] = []
        logical = 0
        for p in sorted(positions):
            plan = state.plan_fetch(self.spec.topic, p, positions[p], self.spec.read_committed)
            aborted = {(a.producer_id, a.first_offset, a.last_offset) for a in plan.aborted}
            upper = plan.upper_offset
            if self.spec.lag_records:
                upper = max(plan.offset, upper - self.spec.lag_records)
            batches, size = node.store(self.spec.topic, p).read(
                plan.offset, upper, CONSUMER_MAX_BYTES
            )
            logical += size
            for b in batches:
                if b.next_offset > upper:
                    break
                header, records = rb.decode_records(b.data)
                positions[p] = b.next_offset
                if header.is_control:
                    continue
                if any(
                    pid == header.producer_id and first <= b.base_offset <= last
                    for pid, first, last in aborted
                ):
                    continue
                for r in records:
                    if r.offset >= plan.offset and r.value:
                        got.append((p, r.offset, r.value.decode()))
        done = node.disk.reserve(logical, w.queue.now_ms, "fetch") if logical else w.queue.now_ms
        poll = Poll(self.spec.topic, tuple(got), session, self.spec.read_committed)
        offsets = tuple(sorted(positions.items()))

        def answer() -> None:
            self._record(node, "ok", invoke, w.queue.now_ms, poll, "")
            self._commit(node, offsets, session)

        w.queue.at(done + w.client_latency_ms, f"{self.spec.name} poll answer", answer)

    def _commit(self, node: SimCluster, offsets: tuple[tuple[int, int], ...], session: int) -> None:
        w = self.world
        invoke = w.queue.now_ms
        value = Commit(self.spec.topic, offsets)
        if not node.up or session != self.session:
            return
        try:
            effects = node.state.commit_group_offsets(
                self.spec.group,
                -1,
                "",
                {(self.spec.topic, p): (o, "", -1) for p, o in offsets},
                invoke,
            )
            node.execute(effects, "offsets", w.logical_bytes)
            self._record(node, "ok", invoke, invoke + 2 * w.client_latency_ms, value, "")
        except ClusterError as exc:
            self._record(
                node, "fail", invoke, invoke + 2 * w.client_latency_ms, value, exc.code.name
            )

    def _record(
        self,
        node: SimCluster,
        type_: str,
        invoke: int,
        complete: int,
        value: Poll | Commit,
        error: str,
    ) -> None:
        w = self.world
        kind = "consumer_commit" if isinstance(value, Commit) else "consumer"
        w.history.add(
            Op(
                self.spec.name,
                w.client_class(node, kind, self.spec.topic, self.spec.group),
                node.cluster_id,
                "ok" if type_ == "ok" else ("fail" if type_ == "fail" else "info"),
                invoke,
                complete,
                value,
                error,
            )
        )


# -- scripted producers (replays) ------------------------------------------------------------

# How often a request held by a paused cluster checks whether it resumed.
PAUSE_POLL_MS = 10


@dataclass(frozen=True, slots=True)
class ScriptSend:
    """One record of a script, sent at `at_ms` to `cluster`'s `topic`-`partition`.
    Records naming the same `txn` form one transaction, sent together at the
    first one's time to its cluster and topic, then committed (or aborted when
    any of them says `abort`, or left open when any says `open`: its own
    producer never ends it, so only a coordinator or a reservation does)."""

    at_ms: int
    cluster: str
    topic: str
    partition: int
    value: str
    txn: str = ""
    abort: bool = False
    open: bool = False
    # A transaction's commit (or abort) comes this long after its records (0: at once).
    commit_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    name: str
    sends: tuple[ScriptSend, ...] = ()


@dataclass(frozen=True, slots=True)
class ScriptRequest:
    at_ms: int
    cluster: str
    topic: str
    parts: tuple[tuple[int, str], ...]  # (partition, value)
    txn: str = ""
    abort: bool = False
    open: bool = False
    commit_after_ms: int = 0


def script_requests(spec: ScriptSpec) -> list[ScriptRequest]:
    """The script's requests, in order: one per plain record, one per transaction."""
    out: list[ScriptRequest] = []
    txns: dict[str, int] = {}
    for s in spec.sends:
        if s.txn and s.txn in txns:
            i = txns[s.txn]
            r = out[i]
            out[i] = replace(
                r,
                parts=(*r.parts, (s.partition, s.value)),
                abort=r.abort or s.abort,
                open=r.open or s.open,
            )
            continue
        if s.txn:
            txns[s.txn] = len(out)
        out.append(
            ScriptRequest(
                s.at_ms,
                s.cluster,
                s.topic,
                ((s.partition, s.value),),
                s.txn,
                s.abort,
                s.open,
                s.commit_after_ms if s.txn else 0,
            )
        )
    return out


class ScriptProducer:
    """Replays a script (workload kind `script`): the same records to the same
    partitions at the same times. One idempotent producer id per cluster (a
    transactional one for transactions), sequences per partition. A request to
    a paused cluster waits until it resumes (its connection holds it, as TCP
    does for a stopped process); one to a crashed cluster ends `info` after
    request_timeout_ms; a refusal ends `fail` and takes a new producer id; an
    acknowledgement waits for the high watermark, as a producer's does."""

    def __init__(self, spec: ScriptSpec, world: World, paused: Callable[[str], bool]) -> None:
        self.spec = spec
        self.world = world
        self.paused = paused
        self.ids: dict[tuple[str, bool, str], _ProducerIds] = {}

    def start(self) -> None:
        for i, r in enumerate(script_requests(self.spec)):
            self.world.queue.at(
                r.at_ms, f"{self.spec.name} script {i}", functools.partial(self._invoke, r)
            )

    def _sized(self, effect: core.AppendBatch) -> int:
        return (
            64 if effect.header.is_control else effect.header.record_count * self.world.record_bytes
        )

    def _invoke(self, r: ScriptRequest) -> None:
        w = self.world
        invoke = w.queue.now_ms

        def every(type_: str, complete: int, error: str, node: SimCluster) -> None:
            for p, value in r.parts:
                self._finish(
                    node, type_, invoke, complete, Send(r.topic, p, value, txn=r.txn), error
                )

        def arrive() -> None:
            if self.paused(r.cluster):
                w.queue.after(PAUSE_POLL_MS, f"{self.spec.name} held", arrive)
                return
            node = w.clusters[r.cluster]
            if not node.up:
                every("info", invoke + w.request_timeout_ms, "timeout", node)
                return
            try:
                self._produce(node, r, invoke)
            except ClusterError as exc:
                self.ids.pop((r.cluster, bool(r.txn), ""), None)
                every("fail", w.queue.now_ms, exc.code.name, node)

        w.queue.after(w.client_latency_ms, f"{self.spec.name} produce", arrive)

    def _producer_ids(
        self, node: SimCluster, transactional: bool, txn_id: str = ""
    ) -> _ProducerIds:
        key = (node.cluster_id, transactional, txn_id)
        ids = self.ids.get(key)
        if ids is None:
            txn_id = txn_id or (f"{self.spec.name}-txn" if transactional else "")
            pid, epoch, effects = node.state.init_producer_id(
                txn_id, TXN_TIMEOUT_MS, self.world.queue.now_ms
            )
            node.execute(effects, "metadata", self._sized)
            ids = _ProducerIds(pid, epoch)
            self.ids[key] = ids
        return ids

    def _produce(self, node: SimCluster, r: ScriptRequest, invoke: int) -> None:
        w = self.world
        now = w.queue.now_ms
        state = node.state
        transactional = bool(r.txn)
        # An open transaction has a producer of its own (the script's next
        # transactions must not fence it).
        own = f"{self.spec.name}-open-{r.txn}" if r.open else ""
        ids = self._producer_ids(node, transactional, own)
        txn_id = own or (f"{self.spec.name}-txn" if transactional else "")
        effects: list[core.Effect] = []
        sends: list[Send] = []
        try:
            if transactional:
                effects += state.add_partitions_to_txn(
                    txn_id,
                    ids.producer_id,
                    ids.epoch,
                    sorted({(r.topic, p) for p, _ in r.parts}),
                    now,
                )
            for partition, value in r.parts:
                batch = rb.build_batch(
                    [rb.RecordSpec(None, value.encode(), now)],
                    producer_id=ids.producer_id,
                    producer_epoch=ids.epoch,
                    base_sequence=ids.sequences.get(partition, 0),
                    transactional=transactional,
                )
                result = state.produce(r.topic, partition, batch, txn_id, now)
                ids.sequences[partition] = ids.sequences.get(partition, 0) + 1
                effects += result.effects
                sends.append(Send(r.topic, partition, value, result.base_offset, txn=r.txn))
        except ClusterError:
            if transactional:
                # The client aborts what the core accepted before the refusal.
                try:
                    effects += state.end_txn(txn_id, ids.producer_id, ids.epoch, False, now)
                except ClusterError:
                    pass  # nothing open, or fenced: the coordinator times it out
            node.execute(effects, "produce", self._sized)
            raise
        if r.open:
            node.execute(effects, "produce", self._sized)
            for send in sends:  # never committed: the outcome is not known
                self._finish(node, "info", invoke, now, send, "OPEN", False)
            return
        if transactional and r.commit_after_ms > 0:
            node.execute(effects, "produce", self._sized)
            end = functools.partial(self._end_later, node, r, ids, txn_id, sends, invoke)
            w.queue.after(r.commit_after_ms, f"{self.spec.name} commit", end)
            return
        self._settle(node, r, ids, txn_id, effects, sends, invoke)

    def _end_later(
        self,
        node: SimCluster,
        r: ScriptRequest,
        ids: _ProducerIds,
        txn_id: str,
        sends: list[Send],
        invoke: int,
    ) -> None:
        """The commit of a transaction held open `commit_after_ms`: a paused
        cluster holds it, a crashed one leaves its outcome unknown."""
        w = self.world
        if self.paused(r.cluster):
            end = functools.partial(self._end_later, node, r, ids, txn_id, sends, invoke)
            w.queue.after(PAUSE_POLL_MS, f"{self.spec.name} commit held", end)
            return
        if not node.up or node is not w.clusters[r.cluster]:
            for send in sends:
                self._finish(node, "info", invoke, w.queue.now_ms, send, "timeout")
            return
        self._settle(node, r, ids, txn_id, [], sends, invoke)

    def _settle(
        self,
        node: SimCluster,
        r: ScriptRequest,
        ids: _ProducerIds,
        txn_id: str,
        effects: list[core.Effect],
        sends: list[Send],
        invoke: int,
    ) -> None:
        """Ends the request's transaction (if any), then acknowledges its
        records once the high watermark passes them."""
        w = self.world
        now = w.queue.now_ms
        state = node.state
        transactional = bool(r.txn)
        refused = ""
        if transactional:
            try:
                effects += state.end_txn(txn_id, ids.producer_id, ids.epoch, not r.abort, now)
                refused = "ABORTED" if r.abort else ""
            except ClusterError as exc:
                # The commit is refused (LINK_NOT_IN_SYNC): the client aborts.
                refused = exc.code.name
                self.ids.pop((node.cluster_id, True, ""), None)
                try:
                    effects += state.end_txn(txn_id, ids.producer_id, ids.epoch, False, now)
                except ClusterError:
                    pass
        reserved = any(ns.reserved for ns in state.namespaces.matching(ResourceType.TOPIC, r.topic))
        targets = {(r.topic, p): state.partition(r.topic, p).log_end_offset for p, _ in r.parts}
        marks = state.wait_marks(targets)  # what this write left there, before any wait

        def finish(type_: str, error: str, done: list[Send]) -> None:
            def deliver() -> None:
                for send in done:
                    self._finish(node, type_, invoke, w.queue.now_ms, send, error, reserved)

            w.queue.after(w.client_latency_ms, f"{self.spec.name} ack", deliver)

        def answered(timed_out: ClusterError | None) -> None:
            if timed_out is not None:
                finish("info", timed_out.code.name, sends)
                return
            witnessed = [
                replace(
                    s,
                    sync_witnesses=w.sync_witnesses(node, s.topic, s.partition),
                    followers=w.followers_of(node, s.topic),
                )
                for s in sends
            ]
            finish("ok", "", witnessed)

        def durable() -> None:
            if refused:
                finish("fail", refused, sends)
                return
            node.wait_high_watermarks(targets, f"{self.spec.name} produce", answered, marks)

        node.execute(effects, "produce", self._sized, durable)

    def _finish(
        self,
        node: SimCluster,
        type_: str,
        invoke: int,
        complete: int,
        send: Send,
        error: str,
        reserved: bool = False,
    ) -> None:
        w = self.world
        kind = "producer_txn" if send.txn else "producer"
        w.history.add(
            Op(
                self.spec.name,
                w.client_class(node, kind, send.topic, ""),
                node.cluster_id,
                "ok" if type_ == "ok" else ("fail" if type_ == "fail" else "info"),
                invoke,
                complete,
                send,
                error,
                reserved,
            )
        )
