"""The mirror engine's handling of delivery reports and source offset commits
(mirror/engine.py), with fake clients: which records count as copied, where a failed
delivery rewinds, and that the source commit never passes an unacknowledged record."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from linkd.core.mirror.config import parse_mm2_properties
from linkd.core.mirror.model import OffsetSync, TopicPartition
from linkd.core.mirror.offset_sync import OffsetSyncWriter
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

    def flush(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def deliver(route: _Route, downstream: int, error: str | None = None) -> None:
    """The producer's report of the route's oldest record in flight."""
    err = None if error is None else FakeError(error)
    route.on_delivery(cast(Any, err), cast(Any, Delivered(downstream)))


def produced(route: _Route, offsets: Iterable[int]) -> None:
    """Records produced on the route, in order (as the engine's produce notes them)."""
    for offset in offsets:
        route.inflight.append(offset)
        route.inflight_ts.append(1_000)


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
    produced(route, [10, 11, 12, 13, 14])
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
    assert engine._handle_reports() == 0 and not route.busy()
    # After the rewind the records are produced again and count once acknowledged.
    produced(route, [12, 13, 14])
    for downstream in (4, 5, 6):
        deliver(route, downstream)
    assert engine._handle_reports() == 3
    assert route.acked_next == 15
    engine.commit_source_offsets(synchronous=True)
    assert consumer.commits[-1] == ([("t", 0, 15)], False)
    assert engine.metrics.snapshot(5_000)[route.key]["record-count"] == 5


def test_acknowledged_runs_feed_the_offset_sync_rule() -> None:
    engine, route, _, _ = engine_with_route()
    produced(route, range(100, 106))
    for downstream in range(6):
        deliver(route, downstream)
    engine._handle_reports()
    # offset.lag.max = 2: the first record, then every third downstream offset
    # (at most 10 syncs in flight; the fake never completes them).
    sent = engine.writer.outstanding
    assert sent == 2 and engine.stats.offset_syncs_sent == 2
    assert engine.writer.partition_states[TP].last_sync_downstream_offset == 3
    assert engine.writer.delayed == {TP: OffsetSync(TP, 105, 5)}


def test_reports_matched_by_position_give_the_syncs_of_record_by_record_handling() -> None:
    """Seeded: records produced in runs (with gaps in the upstream offsets), reports
    arriving in chunks, handled at random moments, one failure per seed: the engine's
    offset syncs, acknowledged positions and rewinds are those of the record-by-record
    rule applied to the records acknowledged before the failure."""
    failures = 0
    for seed in range(40):
        rng = random.Random(seed)
        engine, route, consumer, _ = engine_with_route()
        engine.writer.max_outstanding = 10**9  # every sync goes out at once
        reference = OffsetSyncWriter(2, 60_000, 0)
        reference.max_outstanding = 10**9
        upstream, downstream = 0, 0
        in_flight: list[int] = []
        fail_at = rng.randrange(300)  # past 200: no failure
        reported = 0
        expected: list[OffsetSync] = []
        acked_next = -1
        failed = False
        while reported < 200 and not failed:
            run = [upstream + i for i in range(rng.randrange(1, 20))]
            upstream = run[-1] + 1 + rng.choice((0, 0, 0, 3))
            produced(route, run)
            in_flight += run
            while in_flight and rng.random() < 0.7:
                up = in_flight.pop(0)
                if reported == fail_at:
                    deliver(route, -1, "broker down")
                    failed = True
                    for _ in in_flight:  # reports of records produced after it
                        deliver(route, downstream)
                    in_flight.clear()
                    break
                downstream += 1 + rng.choice((0, 0, 2))
                deliver(route, downstream)
                expected += reference.on_record_acknowledged(TP, up, downstream)
                acked_next = up + 1
                reported += 1
            if rng.random() < 0.5 or failed:
                engine._handle_reports()
        for up in in_flight:  # no failure: the rest is acknowledged
            downstream += 1
            deliver(route, downstream)
            expected += reference.on_record_acknowledged(TP, up, downstream)
            acked_next = up + 1
        engine._handle_reports()
        assert route.acked_next == acked_next, seed
        assert engine.writer.partition_states.get(TP) == reference.partition_states.get(TP), seed
        assert engine.stats.offset_syncs_sent == len(expected), seed
        assert bool(consumer.seeks) == failed, seed
        assert engine.writer.delayed == reference.delayed, seed
        assert not route.busy(), seed
        failures += failed
    assert 10 <= failures < 40  # seeds with a failure and seeds without
