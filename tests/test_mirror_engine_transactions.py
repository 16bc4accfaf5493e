"""The mirror engine's exactly-once transactions (mirror/engine.py), with fake clients:
a transaction may span polls (`transaction.boundary=interval`) and always commits the
source offsets of the records it holds; an aborted commit rewinds to the first record
of the transaction and copies it again; offset syncs name committed records only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from linkd.core.mirror.config import parse_mm2_properties
from linkd.core.mirror.exactly_once import (
    TransactionBoundary,
    transaction_commit_due,
)
from linkd.core.mirror.model import TopicPartition
from linkd.core.mirror.wire import decode_source_offset
from mirror.engine import FlowEngine, _Route
from tests.test_mirror_engine_reports import FakeSyncProducer

TP = TopicPartition("t", 0)
OFFSETS_TOPIC = "mm2-offsets.A.internal"


def config_text(*extra: str) -> str:
    return "\n".join([
        "clusters = A, B",
        "A.bootstrap.servers = 127.0.0.1:1",
        "B.bootstrap.servers = 127.0.0.1:2",
        "A->B.enabled = true",
        "B.exactly.once.source.support = enabled",
        "offset.lag.max = 2",
        *extra,
    ]) + "\n"


class Eof:
    def code(self) -> int:
        return KafkaError._PARTITION_EOF


@dataclass
class Msg:
    """A polled record of t-0 (or its end-of-partition event)."""

    off: int
    eof: bool = False

    def error(self) -> Eof | None:
        return Eof() if self.eof else None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.off

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000

    def value(self) -> bytes:
        return b"v%d" % self.off

    def key(self) -> None:
        return None

    def headers(self) -> None:
        return None


@dataclass
class Delivered:
    downstream: int

    def offset(self) -> int:
        return self.downstream

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_000


@dataclass
class FakeTxnProducer:
    """Records land in the open transaction; a commit delivers them (downstream
    offsets counting on, one per record and one per commit marker), an abort
    purges them."""

    open: list[tuple[str, dict[str, Any]]] | None = None
    committed: list[list[tuple[str, dict[str, Any]]]] = field(default_factory=list)
    aborted: int = 0
    fail_commits: int = 0
    next_downstream: int = 0

    def begin_transaction(self) -> None:
        assert self.open is None, "a transaction is already open"
        self.open = []

    def produce(self, topic: str, *args: Any, **kw: Any) -> None:
        """confluent-kafka's order: value, key, partition, callback, on_delivery,
        timestamp, headers (positional or by keyword)."""
        assert self.open is not None, "produced outside a transaction"
        names = ("value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")
        kw.update(zip(names, args, strict=False))
        kw["on_delivery"] = kw.get("on_delivery") or kw.pop("callback", None)
        self.open.append((topic, kw))

    def commit_transaction(self, timeout: float) -> None:
        assert self.open is not None
        if self.fail_commits:
            self.fail_commits -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out"))
        for topic, kw in self.open:
            if topic != OFFSETS_TOPIC:
                kw["on_delivery"](None, Delivered(self.next_downstream))
                self.next_downstream += 1
        self.next_downstream += 1  # the commit marker
        self.committed.append(self.open)
        self.open = None

    def abort_transaction(self, timeout: float) -> None:
        assert self.open is not None
        for topic, kw in self.open:
            if topic != OFFSETS_TOPIC:
                kw["on_delivery"](KafkaError(KafkaError._PURGE_QUEUE), Delivered(-1))
        self.aborted += 1
        self.open = None

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float) -> int:
        return 0


@dataclass
class FakeConsumer:
    batches: list[list[Msg]] = field(default_factory=list)
    seeks: list[tuple[str, int, int]] = field(default_factory=list)

    def poll(self, timeout: float) -> Msg | None:
        """The next batch's first message (the rest is for `consume`)."""
        while self.batches and not self.batches[0]:
            self.batches.pop(0)
        return self.batches[0].pop(0) if self.batches else None

    def consume(self, n: int, timeout: float) -> list[Msg]:
        return self.batches.pop(0) if self.batches else []

    def seek(self, ktp: Any) -> None:
        self.seeks.append((ktp.topic, ktp.partition, ktp.offset))


@dataclass
class Setup:
    engine: FlowEngine
    consumer: FakeConsumer
    producer: FakeTxnProducer
    syncs: FakeSyncProducer
    now: list[int]


def setup(*extra: str) -> Setup:
    config = parse_mm2_properties(config_text(*extra))
    now = [5_000]
    engine = FlowEngine(config, config.enabled_flows()[0], clock=lambda: now[0],
                        report=lambda _: None)
    consumer, producer, syncs = FakeConsumer(), FakeTxnProducer(), FakeSyncProducer()
    engine._consumer = consumer  # type: ignore[assignment]
    engine._producer = producer  # type: ignore[assignment]
    engine._sync_producer = syncs  # type: ignore[assignment]
    engine.assigned[TP] = "A.t"
    engine._routes[("t", 0)] = _Route(TP, "A.t", "B", engine._touched)
    return Setup(engine, consumer, producer, syncs, now)


# Polls of at most 2 records, so that a transaction spans several.
INTERVAL = (
    "transaction.boundary = interval",
    "transaction.boundary.interval.ms = 1000",
    "A.consumer.max.poll.records = 2",
)


def committed_offsets(txn: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, int, int]]:
    out = []
    for topic, kw in txn:
        if topic == OFFSETS_TOPIC:
            so = decode_source_offset(kw["key"], kw["value"])
            assert so is not None
            out.append((so.topic, so.partition, so.offset))
    return out


def records(txn: list[tuple[str, dict[str, Any]]]) -> list[bytes]:
    return [kw["value"] for topic, kw in txn if topic != OFFSETS_TOPIC]


def test_the_commit_rule() -> None:
    due = transaction_commit_due
    kw = {"last_commit_ms": 0, "interval_ms": 100, "poll_limit": 50}
    poll, interval = TransactionBoundary.POLL, TransactionBoundary.INTERVAL
    assert not due(poll, records=0, polled=0, drained=True, now_ms=0, **kw)
    assert due(poll, records=5, polled=5, drained=False, now_ms=0, **kw)
    assert not due(interval, records=5, polled=5, drained=False, now_ms=99, **kw)
    assert due(interval, records=5, polled=5, drained=False, now_ms=100, **kw)
    assert due(interval, records=5, polled=0, drained=False, now_ms=0, **kw)
    assert due(interval, records=90, polled=4, drained=False, now_ms=0, **kw)  # no backlog
    assert not due(interval, records=90, polled=5, drained=False, now_ms=0, **kw)
    assert due(interval, records=5, polled=5, drained=True, now_ms=0, **kw)


def test_the_boundary_settings() -> None:
    flow = parse_mm2_properties(config_text()).enabled_flows()[0]
    assert flow.transaction_boundary is TransactionBoundary.POLL
    assert flow.transaction_boundary_interval_ms == 60_000  # offset.flush.interval.ms
    flow = parse_mm2_properties(config_text(
        "transaction.boundary = interval", "B.offset.flush.interval.ms = 5000"
    )).enabled_flows()[0]
    assert flow.transaction_boundary is TransactionBoundary.INTERVAL
    assert flow.transaction_boundary_interval_ms == 5_000
    flow = parse_mm2_properties(config_text(
        "A->B.transaction.boundary.interval.ms = 250"
    )).enabled_flows()[0]
    assert flow.transaction_boundary_interval_ms == 250


def test_poll_boundary__one_transaction_per_poll() -> None:
    s = setup()
    s.consumer.batches = [[Msg(0), Msg(1)], [Msg(2)]]
    assert s.engine.copy_batch() == 2
    assert s.engine.copy_batch() == 1
    assert [committed_offsets(t) for t in s.producer.committed] == [
        [("t", 0, 1)], [("t", 0, 2)]
    ]
    assert s.engine.stats.transactions_committed == 2


def test_interval_boundary__a_transaction_spans_polls_with_the_offsets_of_its_records() -> None:
    s = setup(*INTERVAL)
    s.consumer.batches = [[Msg(0), Msg(1)], [Msg(2), Msg(3)], [Msg(4), Msg(5, eof=True)]]
    assert s.engine.copy_batch() == 0  # open: the interval has not passed, more to read
    assert s.engine.copy_batch() == 0
    assert s.producer.committed == [] and s.syncs.produced == []  # nothing named yet
    assert not s.engine.caught_up()
    assert s.engine.copy_batch() == 5  # the source is drained: commit now
    (txn,) = s.producer.committed
    assert records(txn) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert committed_offsets(txn) == [("t", 0, 4)]
    assert s.engine.committed_source_offsets == {TP: 4}
    assert s.syncs.produced  # offset syncs after the commit
    assert s.engine.caught_up()


def test_interval_boundary__an_empty_poll_commits() -> None:
    s = setup(*INTERVAL)
    s.consumer.batches = [[Msg(0), Msg(1)], [Msg(2)]]
    assert s.engine.copy_batch() == 0
    assert s.engine.copy_batch() == 0  # a short poll: no sign that the source is drained
    assert s.engine.copy_batch() == 3  # nothing more: commit
    assert [committed_offsets(t) for t in s.producer.committed] == [[("t", 0, 2)]]


def test_interval_boundary__commits_when_the_interval_since_the_last_commit_passed() -> None:
    s = setup(*INTERVAL[:2], "A.consumer.max.poll.records = 1")
    s.consumer.batches = [[Msg(0)], [Msg(1)], [Msg(2)]]
    assert s.engine.copy_batch() == 0  # the flow started (the clock's 5 000) just now
    s.now[0] += 1_000
    assert s.engine.copy_batch() == 2
    assert s.engine.copy_batch() == 0  # a new transaction; the interval counts afresh
    assert [committed_offsets(t) for t in s.producer.committed] == [[("t", 0, 1)]]


def test_a_failed_commit_aborts_and_copies_the_whole_transaction_again() -> None:
    s = setup(*INTERVAL)
    s.producer.fail_commits = 1
    s.consumer.batches = [[Msg(10), Msg(11)], [Msg(12), Msg(13, eof=True)]]
    s.engine.copy_batch()
    assert s.engine.copy_batch() == 0  # the commit failed
    assert s.producer.aborted == 1 and s.producer.committed == []
    assert s.engine.stats.transactions_aborted == 1
    assert s.consumer.seeks == [("t", 0, 10)]  # the first record of the transaction
    assert s.engine.committed_source_offsets == {} and s.syncs.produced == []
    assert s.engine.stats.records_copied == 0
    # The consumer reads from 10 again: all of it commits, once.
    s.consumer.batches = [[Msg(10), Msg(11), Msg(12), Msg(13, eof=True)]]
    assert s.engine.copy_batch() == 3
    (txn,) = s.producer.committed
    assert records(txn) == [b"v10", b"v11", b"v12"]
    assert committed_offsets(txn) == [("t", 0, 12)]
    assert s.engine.stats.records_copied == 3


def test_close_commits_the_open_transaction() -> None:
    s = setup(*INTERVAL)
    s.consumer.batches = [[Msg(0), Msg(1)]]
    s.engine.copy_batch()
    assert s.producer.committed == []
    s.engine._consumer = None  # the fake has nothing to close
    s.engine.close()
    assert s.engine.stats.errors == []
    (txn,) = s.producer.committed
    assert committed_offsets(txn) == [("t", 0, 1)]


@dataclass
class ReportingTxnProducer(FakeTxnProducer):
    """As a real producer: a record's report is served at the first poll after the
    broker answered (here: the next poll), failed for the offsets in `fail`; a commit
    serves the rest first."""

    served: int = 0  # records of the open transaction whose reports were served
    fail: set[int] = field(default_factory=set)
    polls: int = 0

    def poll(self, timeout: float) -> int:
        self.polls += 1
        if self.open is None:
            return 0
        for topic, kw in self.open[self.served:]:
            if topic != OFFSETS_TOPIC:
                up = int(kw["value"][1:])
                err = KafkaError(KafkaError._MSG_TIMED_OUT) if up in self.fail else None
                kw["on_delivery"](err, Delivered(self.next_downstream))
                self.next_downstream += 1
        self.served = len(self.open)
        return 0

    def commit_transaction(self, timeout: float) -> None:
        assert self.open is not None
        served, self.open = self.open[: self.served], self.open[self.served:]
        super().commit_transaction(timeout)
        self.committed[-1][:0] = served
        self.served = 0

    def abort_transaction(self, timeout: float) -> None:
        assert self.open is not None
        self.open = self.open[self.served:]
        self.served = 0
        super().abort_transaction(timeout)


def test_reports_are_served_as_they_arrive_and_handled_at_the_commit() -> None:
    """The reports of a transaction's records are served at each step (so that the
    commit's flush has only the last ones to serve), but the records count as copied,
    and offset syncs name them, only once the transaction committed."""
    s = setup(*INTERVAL)
    producer = ReportingTxnProducer()
    s.engine._producer = producer  # type: ignore[assignment]
    s.consumer.batches = [[Msg(0), Msg(1)], [Msg(2), Msg(3)], [Msg(4), Msg(5, eof=True)]]
    assert s.engine.copy_batch() == 0
    assert s.engine.copy_batch() == 0  # the first poll's reports were served before it
    assert producer.served == 2 and producer.committed == []
    assert s.engine.stats.records_copied == 0 and s.syncs.produced == []
    assert s.engine.copy_batch() == 5  # drained: commit
    (txn,) = producer.committed
    assert records(txn) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert committed_offsets(txn) == [("t", 0, 4)]
    assert s.engine.stats.records_copied == 5 and s.syncs.produced


def test_a_failed_report_served_mid_transaction_aborts_it_before_the_commit() -> None:
    s = setup(*INTERVAL)
    producer = ReportingTxnProducer(fail={1})
    s.engine._producer = producer  # type: ignore[assignment]
    s.consumer.batches = [[Msg(0), Msg(1)], [Msg(2), Msg(3)]]
    assert s.engine.copy_batch() == 0
    assert s.engine.copy_batch() == 0  # 1's failure was served: abort, rewind to 0
    assert producer.aborted == 1 and producer.committed == []
    assert s.consumer.seeks == [("t", 0, 0)]
    assert s.engine.stats.transactions_aborted == 1 and s.engine.stats.records_copied == 0


@dataclass
class Msg1(Msg):
    """A polled record of t-1."""

    def partition(self) -> int:
        return 1


@dataclass
class FailingTxnProducer(FakeTxnProducer):
    """Its next `fail_begins` begin_transaction calls and `fail_produces` produce calls
    raise (a producer in an abortable state refuses them)."""

    fail_begins: int = 0
    fail_produces: int = 0

    def begin_transaction(self) -> None:
        if self.fail_begins:
            self.fail_begins -= 1
            raise KafkaException(KafkaError(KafkaError._STATE, "not valid in this state"))
        super().begin_transaction()

    def produce(self, topic: str, *args: Any, **kw: Any) -> None:
        if self.fail_produces and topic != OFFSETS_TOPIC:
            self.fail_produces -= 1
            raise KafkaException(KafkaError(KafkaError._STATE, "not valid in this state"))
        super().produce(topic, *args, **kw)

    def abort_transaction(self, timeout: float) -> None:
        if self.open is None:
            raise KafkaException(KafkaError(KafkaError._STATE, "no transaction to abort"))
        super().abort_transaction(timeout)


def test_a_transaction_that_cannot_begin_rewinds_the_records_polled_for_it() -> None:
    """The poll's records were taken from the consumer: if the transaction for them
    cannot begin, the consumer goes back to them, or the next transaction would
    commit source offsets past records no transaction holds."""
    s = setup()
    producer = FailingTxnProducer(fail_begins=1)
    s.engine._producer = producer  # type: ignore[assignment]
    s.consumer.batches = [[Msg(10), Msg(11)]]
    assert s.engine.copy_batch() == 0
    assert s.engine.stats.transactions_aborted == 1 and producer.committed == []
    assert s.consumer.seeks == [("t", 0, 10)]
    s.consumer.batches = [[Msg(10), Msg(11)]]  # read again from 10
    assert s.engine.copy_batch() == 2
    (txn,) = producer.committed
    assert records(txn) == [b"v10", b"v11"] and committed_offsets(txn) == [("t", 0, 11)]


def test_a_produce_that_fails_mid_poll_rewinds_every_partition_of_the_poll() -> None:
    """A produce refused at the poll's first record: the partitions whose records came
    after it in the poll are rewound as well, though none of theirs was produced."""
    s = setup()
    tp1 = TopicPartition("t", 1)
    s.engine.assigned[tp1] = "A.t"
    s.engine._routes[("t", 1)] = _Route(tp1, "A.t", "B", s.engine._touched)
    producer = FailingTxnProducer(fail_produces=1)
    s.engine._producer = producer  # type: ignore[assignment]
    s.consumer.batches = [[Msg(10), Msg1(20), Msg1(21)]]
    assert s.engine.copy_batch() == 0
    assert producer.aborted == 1 and producer.committed == []
    assert sorted(s.consumer.seeks) == [("t", 0, 10), ("t", 1, 20)]
    s.consumer.batches = [[Msg(10), Msg1(20), Msg1(21)]]  # read again from there
    assert s.engine.copy_batch() == 3
    (txn,) = producer.committed
    assert records(txn) == [b"v10", b"v20", b"v21"]
    assert committed_offsets(txn) == [("t", 0, 10), ("t", 1, 21)]
