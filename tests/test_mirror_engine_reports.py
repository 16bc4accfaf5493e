"""The mirror engine's handling of delivery reports and source offset commits
(mirror/engine.py), with fake clients: which records count as copied, where a failed
delivery rewinds, and that the source commit never passes an unacknowledged record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from linkd.core.mirror.config import parse_mm2_properties
from linkd.core.mirror.model import OffsetSync, TopicPartition
from mirror.engine import FlowEngine, _Route

TP = TopicPartition("t", 0)
CONFIG = "\n".join([
    "clusters = A, B",
    "A.bootstrap.servers = 127.0.0.1:1",
    "B.bootstrap.servers = 127.0.0.1:2",
    "A->B.enabled = true",
    "offset.lag.max = 2",
]) + "\n"


@dataclass
class FakeError:
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Delivered:
    downstream: int
    ts: int = 1_000

    def offset(self) -> int:
        return self.downstream

    def timestamp(self) -> tuple[int, int]:
        return 1, self.ts


@dataclass
class FakeConsumer:
    seeks: list[tuple[str, int, int]] = field(default_factory=list)
    commits: list[tuple[list[tuple[str, int, int]], bool]] = field(default_factory=list)

    def seek(self, ktp: Any) -> None:
        self.seeks.append((ktp.topic, ktp.partition, ktp.offset))

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> None:
        self.commits.append(([(k.topic, k.partition, k.offset) for k in offsets], asynchronous))


@dataclass
class FakeSyncProducer:
    produced: list[bytes] = field(default_factory=list)

    def produce(self, topic: str, **kw: Any) -> None:
        self.produced.append(kw["value"])

    def poll(self, timeout: float) -> int:
        return 0


def deliver(route: _Route, downstream: int, error: str | None = None) -> None:
    """The producer's report of the route's oldest record in flight."""
    err = None if error is None else FakeError(error)
    route.on_delivery(cast(Any, err), cast(Any, Delivered(downstream)))


def engine_with_route() -> tuple[FlowEngine, _Route, FakeConsumer, list[str]]:
    config = parse_mm2_properties(CONFIG)
    reports: list[str] = []
    engine = FlowEngine(config, config.enabled_flows()[0], clock=lambda: 5_000,
                        report=reports.append)
    consumer = FakeConsumer()
    engine._consumer = consumer  # type: ignore[assignment]
    engine._sync_producer = FakeSyncProducer()  # type: ignore[assignment]
    route = _Route(TP, "A.t", "B", engine._touched)
    engine.assigned[TP] = "A.t"
    engine._routes[("t", 0)] = route
    return engine, route, consumer, reports


def test_a_failed_delivery_rewinds_to_it_and_ignores_the_reports_after_it() -> None:
    engine, route, consumer, reports = engine_with_route()
    route.inflight.extend([10, 11, 12, 13, 14])
    deliver(route, 0)
    deliver(route, 1)
    deliver(route, -1, "broker down")
    deliver(route, 2)  # 13: produced before the rewind, copied again
    assert engine._handle_reports() == 2
    assert consumer.seeks == [("t", 0, 12)]
    assert engine.stats.records_copied == 2 and engine.stats.delivery_failures == 1
    assert reports == ["A->B: delivery to A.t failed: broker down"]
    assert route.acked_next == 12  # one past 11: never past the failed record
    assert engine.commit_source_offsets() == 1
    assert consumer.commits == [([("t", 0, 12)], True)]
    assert engine.commit_source_offsets() == 0  # nothing moved since
    assert not engine.caught_up()  # 14 is still in flight
    deliver(route, 3)  # 14's report: stale as well
    assert engine._handle_reports() == 0 and not route.inflight
    # After the rewind the records are produced again and count once acknowledged.
    route.inflight.extend([12, 13, 14])
    for downstream in (4, 5, 6):
        deliver(route, downstream)
    assert engine._handle_reports() == 3
    assert route.acked_next == 15
    engine.commit_source_offsets(synchronous=True)
    assert consumer.commits[-1] == ([("t", 0, 15)], False)
    assert engine.metrics.snapshot(5_000)[route.key]["record-count"] == 5


def test_acknowledged_runs_feed_the_offset_sync_rule() -> None:
    engine, route, _, _ = engine_with_route()
    route.inflight.extend(range(100, 106))
    for downstream in range(6):
        deliver(route, downstream)
    engine._handle_reports()
    # offset.lag.max = 2: the first record, then every third downstream offset
    # (at most 10 syncs in flight; the fake never completes them).
    sent = engine.writer.outstanding
    assert sent == 2 and engine.stats.offset_syncs_sent == 2
    assert engine.writer.partition_states[TP].last_sync_downstream_offset == 3
    assert engine.writer.delayed == {TP: OffsetSync(TP, 105, 5)}
