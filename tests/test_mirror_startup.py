"""The mirror's start-up order (mirror/runner.py, mirror/engine.py), with fake clients:
continuous mode copies while the heartbeat tasks are still starting and takes them
in once they have; once mode waits for them; the first step copies before the admin
work that is due and does not list the clusters again."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition

import mirror.engine as engine_module
import mirror.runner as runner_module
from linkd.core.mirror.config import MirrorFlow, MirrorMakerConfig, parse_mm2_properties
from linkd.core.mirror.metrics import MirrorMetrics
from linkd.core.mirror.model import OffsetSync, TopicPartition
from linkd.core.mirror.topic_sync import ConfigEntry, ConfigSource
from linkd.core.mirror.wire import encode_offset_sync
from mirror.engine import FlowEngine
from mirror.runner import MirrorRunner

CONFIG = "\n".join([
    "clusters = A, B",
    "A.bootstrap.servers = 127.0.0.1:1",
    "B.bootstrap.servers = 127.0.0.1:2",
    "A->B.enabled = true",
    "sync.topic.acls.enabled = false",
]) + "\n"
WAIT_S = 30.0  # a bound on every wait below; none is reached when the code is right


class FakeEngine:
    def __init__(self, config: MirrorMakerConfig, flow: MirrorFlow, **_: Any) -> None:
        self.flow = flow
        self.name = flow.name
        self.log: list[str] = []
        self.created: list[dict[str, int]] = []
        self.stop: threading.Event | None = None
        self.heartbeats: list[FakeHeartbeat] = []

    def start(self) -> None:
        self.log.append("start")

    def step(self) -> int:
        beating = all(hb.beats for hb in self.heartbeats)  # taken in by the runner
        self.log.append("step, heartbeats beating" if beating else "step")
        if beating and self.stop is not None:
            self.stop.set()
        return 0

    def run_once(self, timeout_s: float) -> bool:
        self.log.append(f"run_once, beats {[hb.beats for hb in self.heartbeats]}")
        return True

    def source_topics_created(self, topics: dict[str, int]) -> None:
        self.log.append(f"created {sorted(topics)}")
        self.created.append(dict(topics))

    def caught_up(self) -> bool:
        return True

    def close(self) -> None:
        self.log.append("close")

    @property
    def stats(self) -> Any:
        return engine_module.FlowStats()

    @property
    def metrics(self) -> Any:
        return MirrorMetrics()


class FakeHeartbeat:
    release = threading.Event()

    def __init__(self, config: MirrorMakerConfig, flow: MirrorFlow, **_: Any) -> None:
        self.flow = flow
        self.started = False
        self.created = False
        self.beats = 0

    def start(self) -> None:
        assert FakeHeartbeat.release.wait(WAIT_S)
        self.started = True
        self.created = True  # its flow's target has a new `heartbeats` topic

    def beat(self, force: bool = False) -> bool:
        assert self.started
        self.beats += 1
        return True

    def close(self) -> None:
        pass


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch) -> type[FakeHeartbeat]:
    monkeypatch.setattr(runner_module, "FlowEngine", FakeEngine)
    monkeypatch.setattr(runner_module, "HeartbeatTask", FakeHeartbeat)
    FakeHeartbeat.release = threading.Event()
    return FakeHeartbeat


def make_runner() -> tuple[MirrorRunner, FakeEngine]:
    runner = MirrorRunner(parse_mm2_properties(CONFIG), report=lambda _: None)
    engine: Any = runner.engines[0]
    engine.heartbeats = list(runner.heartbeats)
    return runner, engine


def test_continuous_mode_copies_while_the_heartbeat_tasks_start(
    fakes: type[FakeHeartbeat],
) -> None:
    runner, engine = make_runner()
    assert [hb.flow.name for hb in runner.heartbeats] == ["A->B", "B->A"]
    runner.start()  # returns with the heartbeat tasks still starting
    assert engine.log == ["start"]
    stop = threading.Event()
    engine.stop = stop
    steps = 0

    def step() -> int:
        nonlocal steps
        steps += 1
        if steps == 3:
            fakes.release.set()  # the heartbeat tasks finish starting now
        return FakeEngine.step(engine)

    engine.step = step  # type: ignore[method-assign]
    runner.run(stop, duration_s=WAIT_S, metrics_interval_s=WAIT_S, on_metrics=lambda _: None)
    runner.close()
    assert stop.is_set()
    # Copying began before the heartbeat tasks had started; the `heartbeats` topic
    # the B->A task created on A (this flow's source) was added to the flow after.
    assert engine.log[1:4] == ["step", "step", "step"]
    assert engine.created == [{"heartbeats": 1}]
    assert "created ['heartbeats']" in engine.log
    assert engine.log[-2:] == ["step, heartbeats beating", "close"]
    assert all(hb.beats >= 1 for hb in runner.heartbeats)


def test_once_mode_waits_for_the_heartbeat_tasks_before_copying(
    fakes: type[FakeHeartbeat],
) -> None:
    runner, engine = make_runner()
    runner.start()
    assert engine.log == ["start"]
    fakes.release.set()
    result = runner.run_once(WAIT_S)
    runner.close()
    assert result.caught_up
    # Each pair beat once before the copy, and the new topic was part of it.
    assert engine.log == ["start", "created ['heartbeats']", "run_once, beats [1, 1]", "close"]


def test_a_heartbeat_task_that_fails_to_start_fails_the_run(
    fakes: type[FakeHeartbeat], monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_start(self: FakeHeartbeat) -> None:
        raise RuntimeError(f"no target for {self.flow.name}")

    monkeypatch.setattr(FakeHeartbeat, "start", failing_start)
    runner, engine = make_runner()
    runner.start()
    with pytest.raises(RuntimeError, match="no target"):
        runner.run(threading.Event(), duration_s=WAIT_S, metrics_interval_s=WAIT_S,
                   on_metrics=lambda _: None)
    runner.close()
    assert engine.log[0] == "start" and engine.log[-1] == "close"


# -- the first step ----------------------------------------------------------------------------


class Calls:
    def __init__(self) -> None:
        self.log: list[str] = []


class FakeAdmin:
    def __init__(self, calls: Calls, alias: str) -> None:
        self.calls, self.alias = calls, alias
        self.topics = {"t": 1} if alias == "A" else {}
        self.configs: dict[str, tuple[ConfigEntry, ...]] = {}  # topic -> its described configs
        self.created_with: dict[str, dict[str, str]] = {}  # topic -> the configs it was made with

    def topic_partitions(self) -> dict[str, int]:
        self.calls.log.append(f"list {self.alias}")
        return dict(self.topics)

    def create_topic(self, name: str, partitions: int, factor: int, configs: Any) -> bool:
        self.calls.log.append(f"create {self.alias} {name}")
        self.topics[name] = partitions
        self.created_with[name] = dict(configs)
        return True

    def topic_configs(self, topic: str) -> tuple[Any, ...]:
        self.calls.log.append(f"configs {self.alias} {topic}")
        return self.configs.get(topic, ())


class FakeKafkaConsumer:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        return [KafkaTopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def list_topics(self, *args: Any, **kw: Any) -> None:
        pass

    def incremental_assign(self, tps: list[Any]) -> None:
        self.calls.log.append("assign " + ",".join(f"{tp.topic}-{tp.partition}" for tp in tps))

    def assign(self, tps: list[Any]) -> None:
        self.calls.log.append("assign " + ",".join(f"{tp.topic}-{tp.partition}" for tp in tps))

    def unassign(self) -> None:
        self.calls.log.append("unassign")

    def consume(self, n: int, timeout: float) -> list[Any]:
        return []

    def poll(self, timeout: float) -> None:
        self.calls.log.append("poll")

    def close(self) -> None:
        pass


class FakeKafkaProducer:
    def produce(self, *args: Any, **kw: Any) -> None:
        raise AssertionError("nothing to produce")

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return 0


def test_the_first_step_copies_before_the_admin_work_due_and_lists_nothing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    monkeypatch.setattr(engine_module, "ClusterAdmin",
                        lambda alias, conf, timeout: FakeAdmin(calls, alias))
    monkeypatch.setattr(engine_module, "Consumer", lambda conf: FakeKafkaConsumer(calls))
    monkeypatch.setattr(engine_module, "Producer", lambda conf: FakeKafkaProducer())
    config = parse_mm2_properties(CONFIG)
    flow = config.enabled_flows()[0]
    engine = FlowEngine(config, flow, clock=lambda: 1_000, report=lambda _: None)
    engine.start()
    # One listing per cluster; the remote topic (with its source's configs, described
    # first) and the internal topics are created.
    assert calls.log == [
        "list A", "list B", "configs A t", "create B A.t", "assign t-0",
        "create A mm2-offset-syncs.B.internal", "create B A.checkpoints.internal",
    ]
    calls.log.clear()
    engine.step()
    # The copy first (a poll), then the config sync due at the first step; the
    # clusters are not listed again (start's refresh was the first), and the
    # offset syncs are not read (checkpoints are not due).
    assert calls.log == ["poll", "configs A t"]


def test_a_remote_topic_is_created_with_its_sources_configs_before_the_first_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first step copies before its config sync: a remote topic made with the
    target's defaults would take the first records under them (a default retention
    of 7 days deleted the first transaction's records, older than that, on the
    target before the config sync set the source's retention.ms=-1)."""
    calls = Calls()
    admins: dict[str, FakeAdmin] = {}

    def admin(alias: str, conf: Any, timeout: int) -> FakeAdmin:
        made = admins[alias] = FakeAdmin(calls, alias)
        if alias == "A":
            made.configs["t"] = (
                ConfigEntry("retention.ms", "-1"),  # set on the topic
                ConfigEntry("cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
                ConfigEntry("min.insync.replicas", "2"),  # MM2's filter excludes it
                ConfigEntry("segment.bytes", "1024", read_only=True),
            )
        return made

    monkeypatch.setattr(engine_module, "ClusterAdmin", admin)
    monkeypatch.setattr(engine_module, "Consumer", lambda conf: FakeKafkaConsumer(calls))
    monkeypatch.setattr(engine_module, "Producer", lambda conf: FakeKafkaProducer())
    config = parse_mm2_properties(CONFIG)
    engine = FlowEngine(config, config.enabled_flows()[0], clock=lambda: 1_000,
                        report=lambda _: None)
    engine.start()
    # Before the source consumer is assigned (so before any copy), with what config
    # sync would set: no default, nothing read-only, nothing the filter excludes.
    assert calls.log.index("create B A.t") < calls.log.index("assign t-0")
    assert admins["B"].created_with["A.t"] == {"retention.ms": "-1"}

    # use.defaults.from=source: the source's defaults come along.
    calls.log.clear()
    config = parse_mm2_properties(CONFIG + "use.defaults.from = source\n")
    engine = FlowEngine(config, config.enabled_flows()[0], clock=lambda: 1_000,
                        report=lambda _: None)
    engine.start()
    assert admins["B"].created_with["A.t"] == {"cleanup.policy": "delete", "retention.ms": "-1"}


# -- reading the offset syncs ------------------------------------------------------------------


class SyncsTopic:
    """The offset-syncs topic as a fake consumer reads it: records, then an end of
    partition event, from the offset it is assigned at."""

    def __init__(self, calls: Calls, syncs: list[OffsetSync]) -> None:
        self.calls = calls
        self.records = [encode_offset_sync(sync) for sync in syncs]
        self.position: int | None = None

    def list_topics(self, *args: Any, **kw: Any) -> None:
        pass

    def assign(self, tps: list[Any]) -> None:
        (tp,) = tps
        self.calls.log.append(f"syncs assign {tp.offset}")
        self.position = 0 if tp.offset == OFFSET_BEGINNING else tp.offset

    def unassign(self) -> None:
        self.calls.log.append("syncs unassign")
        self.position = None

    def consume(self, n: int, timeout: float) -> list[Any]:
        assert self.position is not None, "read while not assigned"
        out: list[Any] = []
        while self.position < len(self.records) and len(out) < n:
            key, value = self.records[self.position]
            out.append(FakeMessage(self.position, key, value))
            self.position += 1
        if len(out) < n:
            out.append(FakeMessage(self.position, None, None, eof=True))
        return out

    def close(self) -> None:
        pass


class FakeMessage:
    def __init__(self, offset: int, key: bytes | None, value: bytes | None, *,
                 eof: bool = False) -> None:
        self._offset, self._key, self._value, self._eof = offset, key, value, eof

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None

    def topic(self) -> str:
        return "mm2-offset-syncs.B.internal"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class FakeCheckpointAdmin(FakeAdmin):
    def list_groups(self) -> tuple[str, ...]:
        return ()

    def group_offsets(self, group: str) -> dict[Any, Any]:
        return {}


def test_offset_syncs_are_read_at_start_and_before_checkpoints_from_where_reading_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = Calls()
    tp = TopicPartition("t", 0)
    syncs = SyncsTopic(calls, [OffsetSync(tp, 0, 0), OffsetSync(tp, 100, 100)])

    def admin(alias: str, conf: Any, timeout: int) -> FakeAdmin:
        made = FakeCheckpointAdmin(calls, alias)
        if alias == "A":  # the offset-syncs topic is there from an earlier run
            made.topics["mm2-offset-syncs.B.internal"] = 1
        return made

    monkeypatch.setattr(engine_module, "ClusterAdmin", admin)
    monkeypatch.setattr(engine_module, "Consumer", lambda conf: (
        syncs if conf["group.id"].endswith("-syncs") else FakeKafkaConsumer(calls)))
    monkeypatch.setattr(engine_module, "Producer", lambda conf: FakeKafkaProducer())
    config = parse_mm2_properties(CONFIG + "emit.checkpoints.interval.seconds = 1\n")
    now = [1_000]
    engine = FlowEngine(config, config.enabled_flows()[0], clock=lambda: now[0],
                        report=lambda _: None)
    engine.start()
    # The initial load reads the topic to its end, then lets it go.
    assert [line for line in calls.log if line.startswith("syncs")] == [
        "syncs assign -2", "syncs unassign"]
    assert engine.store.read_to_end and engine.store.syncs(tp) is not None
    calls.log.clear()
    engine.step()  # no checkpoint due: the offset syncs are not read
    assert not [line for line in calls.log if line.startswith("syncs")]
    syncs.records.append(encode_offset_sync(OffsetSync(tp, 200, 200)))
    now[0] += 1_000
    engine.step()  # checkpoints due: read first, from one past the last sync read
    assert [line for line in calls.log if line.startswith("syncs")] == [
        "syncs assign 2", "syncs unassign"]
    assert engine.store.translate_downstream(tp, 201) == 201  # with (200, 200); 101 without
