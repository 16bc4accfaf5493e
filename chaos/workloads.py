"""Client workloads against real daemons, recording a `sim.history.History`.

Each workload is a thread that records every client operation as the client
saw it, with the simulator's types, so `sim/checkers.py` judges it:
- `ok`: the cluster acknowledged it (a send's offset, a poll's records);
- `fail`: the cluster definitely refused it (a probe write into a reserved
  namespace, a transaction aborted before its commit was attempted);
- `info`: indefinite (a timeout, an error while the cluster was faulted or
  killed): it may or may not have happened, and checkers do not rely on it.

Workloads:
- `GrpcProducer` (admin.Producer, acks=all, idempotent): one record at a time
  to the current leader of the topic namespace; values "<process>-<n>".
- `KafkaProducer` (confluent-kafka over a daemon's Kafka listener): the same.
- `TxnProducer` (admin.Producer, transactional): three records per
  transaction; its sends are ok only once the commit is acknowledged.
- `Reader` (admin.Consumer, assigned, auto.offset.reset=error): one per
  cluster; a poll's records are one Poll op; an error starts a new session
  that resumes where the last one stopped. With `read_committed` (one per
  follower when a transactional producer runs) its polls say so (invariant 5).
- `GroupCommitter` (admin.Consumer in a group of the replicated group
  namespace): reads the current leader and commits its positions there, so
  followers receive replicated committed offsets (invariant 6).
- `ReservedProbe`: tries to write to each follower's replicated topic; a
  follower must refuse (invariant 3), so an accepted write is recorded as an
  ok send with `reserved=True`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from admin import Consumer, Producer, TopicPartition
from admin.client import OFFSET_STORED
from chaos.security import client_config
from sim.history import Commit, History, Op, OpType, Poll, Send

SEND_TIMEOUT_S = 8.0


class Recorder:
    """The shared history and clock (ms since the run started)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.history = History()
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    def add(self, op: Op) -> None:
        with self._lock:
            self.history.add(op)

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self.history.ops)


# The cluster a workload talks to right now: (cluster id, address). The runner
# changes it at a failover.
Target = Callable[[], tuple[str, str] | None]
# Where the n-th record goes, for runs whose topology changes under the
# workloads (the operator nemesis): (cluster id, address, topic, partition).
Route = Callable[[int], tuple[str, str, str, int] | None]

# A produce refused with one of these wrote nothing: the send is `fail`.
REFUSALS = (
    "RESERVED_NAMESPACE", "FOLLOWER_TOPIC_NOT_WRITABLE", "TOPIC_AUTHORIZATION_FAILED",
    "UNKNOWN_TOPIC", "UNKNOWN_PARTITION", "Unknown topic", "Unknown partition",
)  # fmt: skip


def refused(error: str) -> bool:
    """Is this produce error a cluster's definite refusal?"""
    return any(code in error for code in REFUSALS)


class Workload(threading.Thread):
    def __init__(self, name: str, recorder: Recorder, stop: threading.Event) -> None:
        super().__init__(name=f"chaos-{name}", daemon=True)
        self.process = name
        self.recorder = recorder
        self.stop_event = stop
        self.errors = 0

    def pause(self, seconds: float) -> None:
        self.stop_event.wait(seconds)


class TopicProducer(Workload):
    """A producer thread writing one topic on whichever cluster `target` names."""

    def __init__(
        self,
        name: str,
        recorder: Recorder,
        stop: threading.Event,
        target: Target,
        topic: str,
        partitions: int,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.target = target
        self.topic = topic
        self.partitions = partitions
        self.route: Route | None = None  # set: overrides target, topic and partition
        # Record a produce refused with one of REFUSALS as `fail` (else `info`).
        self.refusals_fail = False

    def outcome(self, error: str) -> OpType:
        if not error:
            return "ok"
        return "fail" if self.refusals_fail and refused(error) else "info"

    def where(self, n: int) -> tuple[str, str, str, int] | None:
        """(cluster, address, topic, partition) of the n-th record, or None."""
        if self.route is not None:
            return self.route(n)
        target = self.target()
        if target is None:
            return None
        return (target[0], target[1], self.topic, n % self.partitions)


class GrpcProducer(TopicProducer):
    def __init__(
        self,
        name: str,
        recorder: Recorder,
        stop: threading.Event,
        target: Target,
        topic: str,
        partitions: int,
        client_class: str = "source_producer",
    ) -> None:
        super().__init__(name, recorder, stop, target, topic, partitions)
        self.client_class = client_class

    def _producer(self, address: str) -> Producer:
        return Producer(
            {
                **client_config(address),
                "acks": "all",
                "linger.ms": 0,
                "delivery.timeout.ms": int(SEND_TIMEOUT_S * 1000),
                "request.timeout.ms": 4000,
            }
        )

    def run(self) -> None:
        n = 0
        current: tuple[str, str] | None = None
        producer: Producer | None = None
        while not self.stop_event.is_set():
            found = self.where(n)
            if found is None:
                self.pause(0.2)
                continue
            cluster, address, topic, partition = found
            if (cluster, address) != current or producer is None:
                if producer is not None:
                    _close_quietly(producer)
                current = (cluster, address)
                producer = self._producer(address)
            value = f"{self.process}-{n}"
            n += 1
            invoke = self.recorder.now_ms()
            error, offset = send_one(producer, topic, value, partition, SEND_TIMEOUT_S + 2)
            complete = self.recorder.now_ms()
            op_type: OpType = self.outcome(error)
            if op_type == "info":
                self.errors += 1
                _close_quietly(producer)
                producer = None
            self.recorder.add(
                Op(self.process, self.client_class, cluster, op_type, invoke, complete,
                   Send(topic, partition, value, offset), error=error)
            )  # fmt: skip
            self.pause(0.02)
        if producer is not None:
            _close_quietly(producer)


def send_one(
    producer: Any, topic: str, value: str | bytes, partition: int, wait_s: float
) -> tuple[str, int]:
    """Produces one record and waits (bounded) for its delivery report:
    ("", offset) when acknowledged, else (error, -1); no report within the
    wait is "no delivery report" (indefinite)."""
    result: list[tuple[str, int]] = []

    def done(err: Any, msg: Any) -> None:
        result.append(("" if err is None else str(err), -1 if err else int(msg.offset())))

    try:
        producer.produce(topic, value=value, partition=partition, on_delivery=done)
        producer.flush(wait_s)
    except Exception as exc:
        result.append((f"{type(exc).__name__}: {exc}", -1))
    return result[0] if result else ("no delivery report", -1)


def _close_quietly(producer: Any) -> None:
    try:
        producer.close(0.5) if isinstance(producer, Producer) else producer.flush(0.5)
    except Exception:
        pass


class KafkaProducer(TopicProducer):
    """confluent-kafka over a daemon's Kafka listener."""

    def run(self) -> None:
        from confluent_kafka import Producer as KProducer

        n = 0
        current: tuple[str, str] | None = None
        producer: Any = None
        while not self.stop_event.is_set():
            found = self.where(n)
            if found is None:
                self.pause(0.2)
                continue
            cluster, address, topic, partition = found
            if (cluster, address) != current or producer is None:
                current = (cluster, address)
                producer = KProducer(
                    {
                        **client_config(address),
                        "acks": "all",
                        "enable.idempotence": True,
                        "linger.ms": 0,
                        "message.timeout.ms": int(SEND_TIMEOUT_S * 1000),
                        "socket.timeout.ms": 4000,
                        "reconnect.backoff.max.ms": 500,
                        "log_level": 0,
                    }
                )
            value = f"{self.process}-{n}"
            n += 1
            invoke = self.recorder.now_ms()
            error, offset = send_one(producer, topic, value.encode(), partition, SEND_TIMEOUT_S + 2)
            complete = self.recorder.now_ms()
            op_type: OpType = self.outcome(error)
            if op_type != "ok":
                self.errors += 1
                producer = None  # a fresh producer (and producer id) after any doubt
            self.recorder.add(
                Op(self.process, "source_producer", cluster, op_type, invoke, complete,
                   Send(topic, partition, value, offset), error=error)
            )  # fmt: skip
            self.pause(0.02)


class TxnProducer(TopicProducer):
    """Transactions of three records; ok only once the commit is acknowledged.
    With a `route`, each transaction goes to the cluster and topic its first
    record is routed to."""

    txn_timeout_ms: int | None = None  # transaction.timeout.ms (the client's default: 60 s)
    open_s: float = 0.0  # how long each transaction stays open before its commit
    last_begin_ms: dict[str, int]  # cluster -> when the last transaction there began

    def run(self) -> None:
        n = 0
        producer: Producer | None = None
        current: tuple[str, str] | None = None
        self.last_begin_ms = {}
        while not self.stop_event.is_set():
            first = self.where(n)
            if first is None:
                self.pause(0.2)
                continue
            where = (first[0], first[1])
            topic = first[2]
            try:
                if where != current or producer is None:
                    if producer is not None:
                        _close_quietly(producer)
                    current = where
                    config: dict[str, Any] = {
                        **client_config(where[1]),
                        "transactional.id": f"{self.process}-txn",
                        "linger.ms": 0,
                        "request.timeout.ms": 4000,
                        "delivery.timeout.ms": int(SEND_TIMEOUT_S * 1000),
                    }
                    if self.txn_timeout_ms is not None:
                        config["transaction.timeout.ms"] = self.txn_timeout_ms
                    producer = Producer(config)
                    producer.init_transactions(SEND_TIMEOUT_S)
            except Exception:
                self.errors += 1
                producer = None
                self.pause(0.5)
                continue
            invoke = self.recorder.now_ms()
            offsets: dict[str, int] = {}
            sends: list[Send] = []
            txn = f"{self.process}-t{n // 3}"

            def done(err: Any, msg: Any, out: dict[str, int] = offsets) -> None:
                if err is None:
                    out[msg.value().decode()] = int(msg.offset())

            outcome: OpType = "info"
            error = ""
            try:
                self.last_begin_ms[where[0]] = self.recorder.now_ms()
                producer.begin_transaction()
                for _ in range(3):
                    value = f"{self.process}-{n}"
                    routed = self.where(n) if self.route is not None else None
                    partition = n % self.partitions if self.route is None else first[3]
                    if routed is not None and routed[:3] == first[:3]:
                        partition = routed[3]
                    n += 1
                    sends.append(Send(topic, partition, value, txn=txn))
                    producer.produce(topic, value=value, partition=partition,
                                     on_delivery=done)  # fmt: skip
                if self.open_s > 0:
                    producer.flush(SEND_TIMEOUT_S)  # the records stored, the transaction open
                    self.pause(self.open_s)
                producer.commit_transaction(SEND_TIMEOUT_S)
                producer.flush(1.0)
                outcome = "ok"
            except Exception as exc:
                self.errors += 1
                error = f"{type(exc).__name__}: {exc}"
                try:
                    producer.abort_transaction(SEND_TIMEOUT_S)
                    outcome = "fail"  # aborted: definitely not committed
                except Exception:
                    outcome = "info"
                    _close_quietly(producer)
                    producer = None
            complete = self.recorder.now_ms()
            for s in sends:
                t: OpType = outcome
                off = offsets.get(s.value, -1)
                if t == "ok" and off < 0:
                    t = "info"  # committed, but no offset reported: cannot be checked
                self.recorder.add(
                    Op(self.process, "source_transactional_producer", where[0], t, invoke,
                       complete, Send(s.topic, s.partition, s.value, off, txn=s.txn),
                       error=error)
                )  # fmt: skip
            self.pause(0.05)
        if producer is not None:
            _close_quietly(producer)


class Reader(Workload):
    """Reads every partition of a topic on one cluster, from the start."""

    def __init__(
        self,
        name: str,
        recorder: Recorder,
        stop: threading.Event,
        cluster: str,
        address: str,
        topic: str,
        partitions: int,
        client_class: str,
        read_committed: bool = False,
    ) -> None:
        super().__init__(name, recorder, stop)
        self.read_committed = read_committed
        self.cluster = cluster
        self.address = address
        self.topic = topic
        self.partitions = partitions
        self.client_class = client_class
        self.session = 0
        self.positions: dict[int, int] = dict.fromkeys(range(partitions), 0)
        self._restart = threading.Event()

    # With retention (records deleted below a reader's position): go on from
    # the log start, as a consumer with auto.offset.reset earliest does,
    # instead of stopping at OFFSET_OUT_OF_RANGE.
    reset_earliest = False

    def new_session(self, from_start: bool = True) -> None:
        """Asks for a new session (after a truncation the old positions mean nothing)."""
        if from_start:
            self._reset_positions = True
        self._restart.set()

    _reset_positions = False

    def _consumer(self) -> Consumer:
        c = Consumer(
            {
                **client_config(self.address),
                "group.id": f"{self.process}-reader",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest" if self.reset_earliest else "error",
                "request.timeout.ms": 3000,
                "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
            }
        )
        c.assign([TopicPartition(self.topic, p, off) for p, off in self.positions.items()])
        return c

    def run(self) -> None:
        consumer: Consumer | None = None
        while not self.stop_event.is_set():
            if self._restart.is_set():
                self._restart.clear()
                if consumer is not None:
                    _close_consumer(consumer)
                    consumer = None
                if self._reset_positions:
                    self._reset_positions = False
                    self.positions = dict.fromkeys(range(self.partitions), 0)
            try:
                if consumer is None:
                    self.session += 1
                    consumer = self._consumer()
                invoke = self.recorder.now_ms()
                msgs = consumer.consume(200, 0.5)
                records: list[tuple[int, int, str]] = []
                for m in msgs:
                    if m.error() is not None:
                        raise RuntimeError(str(m.error()))
                    value = m.value()
                    part = m.partition()
                    off = m.offset()
                    if value is None or part is None or off is None:
                        continue
                    records.append((part, off, value.decode(errors="replace")))
                    self.positions[part] = off + 1
                if records:
                    self.recorder.add(
                        Op(self.process, self.client_class, self.cluster, "ok", invoke,
                           self.recorder.now_ms(),
                           Poll(self.topic, tuple(records), self.session, self.read_committed))
                    )  # fmt: skip
            except Exception:
                self.errors += 1
                if consumer is not None:
                    _close_consumer(consumer)
                    consumer = None
                self.pause(0.3)
        if consumer is not None:
            _close_consumer(consumer)


class GroupCommitter(Workload):
    """A consumer in group `group` on the current leader: reads every partition
    from the group's committed offsets (the earliest offset when none) and
    commits its positions every `every_s` seconds. After a failover it moves
    to the new leader and resumes from the offsets committed there. Each
    commit is one Commit op (ok, or info when it failed)."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        target: Target,
        group: str,
        topic: str,
        partitions: int,
        every_s: float = 0.3,
    ) -> None:
        super().__init__("committer", recorder, stop)
        self.target = target
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self.every_s = every_s

    def _consumer(self, address: str) -> Consumer:
        c = Consumer(
            {
                **client_config(address),
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "request.timeout.ms": 3000,
            }
        )
        c.assign([TopicPartition(self.topic, p, OFFSET_STORED) for p in range(self.partitions)])
        return c

    def run(self) -> None:
        consumer: Consumer | None = None
        current: tuple[str, str] | None = None
        positions: dict[int, int] = {}
        last_commit = 0.0
        while not self.stop_event.is_set():
            where = self.target()
            if where is None:
                self.pause(0.2)
                continue
            try:
                if consumer is None or where != current:
                    if consumer is not None:
                        _close_consumer(consumer)
                    consumer = None
                    current, positions = where, {}
                    consumer = self._consumer(where[1])
                for m in consumer.consume(500, 0.1):
                    part, off = m.partition(), m.offset()
                    if m.error() is None and part is not None and off is not None:
                        positions[part] = off + 1
            except Exception:
                self.errors += 1
                if consumer is not None:
                    _close_consumer(consumer)
                consumer = None
                self.pause(0.3)
                continue
            if positions and time.monotonic() - last_commit >= self.every_s:
                last_commit = time.monotonic()
                offsets = tuple(sorted(positions.items()))
                invoke = self.recorder.now_ms()
                op_type: OpType = "ok"
                error = ""
                try:
                    consumer.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets])
                except Exception as exc:
                    op_type, error = "info", f"{type(exc).__name__}: {exc}"
                    self.errors += 1
                self.recorder.add(
                    Op(self.process, "source_consumer", where[0], op_type, invoke,
                       self.recorder.now_ms(), Commit(self.topic, offsets), error=error)
                )  # fmt: skip
        if consumer is not None:
            _close_consumer(consumer)


def _close_consumer(consumer: Consumer) -> None:
    try:
        consumer.close()
    except Exception:
        pass


class ReservedProbe(Workload):
    """Tries to write into each follower's replicated topic; it must be refused."""

    def __init__(
        self,
        recorder: Recorder,
        stop: threading.Event,
        followers: Callable[[], list[tuple[str, str]]],
        topic: str,
    ) -> None:
        super().__init__("probe", recorder, stop)
        self.followers = followers
        self.topic = topic
        self.attempts = 0
        # Set: (cluster, address, topic) to probe, instead of `followers` and `topic`.
        self.targets: Callable[[], list[tuple[str, str, str]]] | None = None

    def _targets(self) -> list[tuple[str, str, str]]:
        if self.targets is not None:
            return self.targets()
        return [(c, address, self.topic) for c, address in self.followers()]

    def run(self) -> None:
        while not self.stop_event.is_set():
            for cluster, address, topic in self._targets():
                value = f"probe-{cluster}-{self.attempts}"
                self.attempts += 1
                producer = Producer(
                    {
                        **client_config(address),
                        "acks": "all",
                        "linger.ms": 0,
                        "delivery.timeout.ms": 3000,
                        "request.timeout.ms": 2000,
                    }
                )
                invoke = self.recorder.now_ms()
                error, offset = send_one(producer, topic, value, 0, 4.0)
                _close_quietly(producer)
                refusal = "RESERVED" in error.upper() or "FOLLOWER" in error.upper()
                op_type: OpType = "ok" if not error else ("fail" if refusal else "info")
                self.recorder.add(
                    Op(self.process, "target_producer", cluster, op_type, invoke,
                       self.recorder.now_ms(), Send(topic, 0, value, offset),
                       error=error, reserved=op_type == "ok")
                )  # fmt: skip
            self.pause(1.5)
