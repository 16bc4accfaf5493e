"""Runs every flow of an `mm2.properties` file: engines, heartbeat tasks, metric reports.

Rules:
- One FlowEngine per enabled flow; one HeartbeatTask per pair with heartbeats
  enabled, whether or not the pair replicates (as MM2's clusterPairs).
- Start: the heartbeat tasks start beside the flows' set-up (internal topics,
  clients), each in a thread of its own; a `heartbeats` topic one creates on a
  flow's source is added to that flow once the task has started, so it is
  mirrored in the same run, from its first record. Continuous mode copies as
  soon as the flows are set up and takes the heartbeat tasks in at the first
  turn of its loop after they have started; once mode waits for them first.
- Continuous mode: one loop steps every task until the stop event is set or the
  deadline passes; every `metrics_interval_s` the metrics are reported. A task's
  failing call is reported and retried on its next interval.
- Once mode: one heartbeat per pair first (so that heartbeats are there to be
  mirrored), then each flow in the file's order copies what its source holds,
  flushes offset syncs, emits checkpoints and syncs group offsets.
- Everything started is closed, also on errors.
- A cluster that does not compact MM2's internal topics is said once per run
  (mirror/internal_topics.py), however many flows use it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from linkd.core.mirror.config import MirrorMakerConfig, parse_mm2_properties
from linkd.core.mirror.metrics import CheckpointMetricKey, SourceMetricKey
from mirror.engine import Clock, FlowEngine, HeartbeatTask, Reporter, wall_clock_ms
from mirror.internal_topics import CompactionNotices

__all__ = ["MirrorRunner", "RunResult", "load_config"]

# A continuous run ends at the latest after this long, even without --duration-s.
MAX_RUN_S = 10 * 365 * 24 * 3600.0


def load_config(path: str) -> MirrorMakerConfig:
    with open(path, encoding="utf-8") as f:
        return parse_mm2_properties(f.read())


@dataclass
class RunResult:
    caught_up: bool
    stats: dict[str, dict[str, int]]


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class MirrorRunner:
    def __init__(
        self,
        config: MirrorMakerConfig,
        *,
        clock: Clock = wall_clock_ms,
        report: Reporter = print,
        poll_timeout_s: float = 0.05,
        client_logger: Any = None,
    ) -> None:
        """`client_logger`: where the clients' librdkafka messages go
        (confluent-kafka's `logger` option; None: librdkafka's stderr)."""
        self.config = config
        self.clock = clock
        self.report = report
        notices = CompactionNotices(report)
        self.engines = [
            FlowEngine(
                config,
                f,
                clock=clock,
                report=report,
                poll_timeout_s=poll_timeout_s,
                notices=notices,
                client_logger=client_logger,
            )
            for f in config.enabled_flows()
        ]
        self.heartbeats = [
            HeartbeatTask(config, f, clock=clock, report=report, notices=notices,
                          client_logger=client_logger)
            for f in config.flows
            if f.emit_heartbeats_enabled
        ]
        self._started: list[FlowEngine | HeartbeatTask] = []
        # Heartbeat tasks still starting (each in its thread), and those that have.
        self._hb_threads: list[tuple[HeartbeatTask, threading.Thread, list[BaseException]]] = []
        self._beating: list[HeartbeatTask] = []

    def start(self) -> None:
        """Heartbeat tasks start in threads of their own beside the flows' set-up:
        their set-up is round trips to the targets. The flows are set up when this
        returns; the heartbeat tasks are taken in by `heartbeats_started` (once mode
        and close wait for them, continuous mode asks at each turn)."""
        for hb in self.heartbeats:
            failed: list[BaseException] = []

            def start_one(hb: HeartbeatTask = hb, failed: list[BaseException] = failed) -> None:
                try:
                    hb.start()
                except BaseException as exc:  # raised in the runner's thread
                    failed.append(exc)

            thread = threading.Thread(
                target=start_one, name=f"heartbeats-start {hb.flow.name}", daemon=True
            )
            thread.start()
            self._hb_threads.append((hb, thread, failed))
        try:
            for engine in self.engines:
                engine.start()
                self._started.append(engine)
        except BaseException:
            self.heartbeats_started(wait=True, raise_failure=False, add_topics=False)
            raise

    def heartbeats_started(
        self, *, wait: bool, raise_failure: bool = True, add_topics: bool = True
    ) -> bool:
        """Takes in the heartbeat tasks whose start has ended (`wait`: all of them):
        a started task beats from now on and is closed last; a `heartbeats` topic it
        created on a flow's source is added to that flow (`add_topics`). A task whose
        start failed raises its error here (`raise_failure`). True when no task is
        still starting."""
        pending = []
        first_failure: BaseException | None = None
        for hb, thread, failed in self._hb_threads:
            if wait:
                thread.join()
            elif thread.is_alive():
                pending.append((hb, thread, failed))
                continue
            if failed:
                first_failure = first_failure or failed[0]
                continue
            self._beating.append(hb)
            self._started.insert(0, hb)  # closed last, as when they started first
            if hb.created and add_topics:
                for engine in self._started:
                    if isinstance(engine, FlowEngine) and engine.flow.source == hb.flow.target:
                        engine.source_topics_created({hb.flow.heartbeats_topic(): 1})
        self._hb_threads = pending
        if first_failure is not None and raise_failure:
            raise first_failure
        return not pending

    def close(self) -> None:
        try:
            self.heartbeats_started(wait=True, raise_failure=False, add_topics=False)
        except Exception as exc:  # closing must reach every task
            self.report(f"starting heartbeats: {exc}")
        while self._started:
            task = self._started.pop()
            try:
                task.close()
            except Exception as exc:  # closing must reach every task
                self.report(f"closing {task.flow.name}: {exc}")

    def stats(self) -> dict[str, dict[str, int]]:
        out = {e.name: e.stats.as_dict() for e in self.engines}
        for hb in self.heartbeats:
            out.setdefault(hb.flow.name, {})["heartbeats"] = hb.beats
        return out

    def metrics(self) -> list[dict[str, Any]]:
        """MM2's metrics, one row per (flow, key), with MM2's names and tags."""
        rows: list[dict[str, Any]] = []
        now = self.clock()
        for engine in self.engines:
            for key, values in engine.metrics.snapshot(now).items():
                row: dict[str, Any] = {"flow": engine.name}
                if isinstance(key, SourceMetricKey):
                    row["group"] = "MirrorSourceConnector"
                    row.update(target=key.target, topic=key.topic, partition=key.partition)
                elif isinstance(key, CheckpointMetricKey):
                    row["group"] = "MirrorCheckpointConnector"
                    row.update(
                        source=key.source,
                        target=key.target,
                        consumer_group=key.group,
                        topic=key.topic,
                        partition=key.partition,
                    )
                row["metrics"] = {name: _finite(v) for name, v in sorted(values.items())}
                rows.append(row)
        return rows

    def run_once(self, timeout_s: float) -> RunResult:
        self.heartbeats_started(wait=True)  # heartbeats are there before the copy
        for hb in self._beating:
            hb.beat(force=True)
        for hb in self._beating:
            hb.close()
            self._started.remove(hb)
        self._beating = []
        caught_up = True
        for engine in self.engines:
            caught_up = engine.run_once(timeout_s) and caught_up
        return RunResult(caught_up, self.stats())

    def run(
        self,
        stop: threading.Event,
        *,
        duration_s: float | None,
        metrics_interval_s: float,
        on_metrics: Callable[[list[dict[str, Any]]], None],
    ) -> RunResult:
        limit = MAX_RUN_S if duration_s is None else min(duration_s, MAX_RUN_S)
        deadline = time.monotonic() + limit
        next_metrics = time.monotonic() + metrics_interval_s
        while not stop.is_set() and time.monotonic() < deadline:
            if self._hb_threads:
                self.heartbeats_started(wait=False)
            for hb in self._beating:
                hb.beat()
            copied = 0
            for engine in self.engines:
                copied += engine.step()
            if time.monotonic() >= next_metrics:
                next_metrics = time.monotonic() + metrics_interval_s
                on_metrics(self.metrics())
            if not copied and not self.engines:
                stop.wait(0.05)  # heartbeats only: nothing else paces the loop
        on_metrics(self.metrics())
        return RunResult(all(e.caught_up() for e in self.engines), self.stats())
