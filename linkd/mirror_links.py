"""The shell of mirror links: one MirrorMaker 2 engine thread per stored link.

The table, its records and the validation are pure (`linkd.core.mirror_links`);
this module carries them out:

- `MirrorLinkManager.create` validates through the core, journals the record
  (durable before the answer), then starts the link's worker.
  `delete` stops the worker (bounded by `STOP_TIMEOUT_S`), then journals the
  deletion. `start` (daemon start) starts a worker for every stored link;
  `stop` (daemon shutdown) stops them all, each bounded.
- `MirrorWorker` runs `mirror.runner.MirrorRunner` continuously in its own
  thread (the engine's Kafka clients block), restricted to the pairs of the
  file that target this cluster. A runner that fails to start or fails while
  running is closed and started again after a back-off (0.5 s doubling to
  `BACKOFF_MAX_S`); the failure is kept as the link's last error. Progress is
  the engine's own: its source group on the source cluster (at-least-once) or
  its offsets topic on the target (exactly-once), so a restarted daemon
  resumes where the engine committed.
- The engine's Kafka clients log through the daemon's logger, rate-limited
  (`linkd.client_log.ClientLog`, one per link): librdkafka's messages become
  JSON lines like the daemon's own, and a source that stops yields a few
  lines and a count of the rest, not hundreds.
- Threads are daemon threads: a worker stuck in a blocking client call past
  the bound never holds the daemon's exit up; its stop event is set, so it
  copies nothing after its current step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from linkd.client_log import ClientLog
from linkd.core.cluster import ClusterState, Journal
from linkd.core.mirror_links import HostedMirror, MirrorLink
from linkd.node import ClusterNode

log = logging.getLogger("linkd.mirror_links")

STOP_TIMEOUT_S = 10.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
# How often a worker publishes its engines' MM2 metrics (read by
# `linkd --metrics-listen` scrapes; computed on the worker's own thread).
METRICS_INTERVAL_S = 1.0
# How often the client log's window is checked for its end (`ClientLog.tick`).
CLIENT_LOG_TICK_S = 1.0


class MirrorWorker:
    """One mirror link's engine, in its own thread."""

    def __init__(self, link: MirrorLink, hosted: HostedMirror) -> None:
        self.link = link
        self.hosted = hosted
        self.stop_event = threading.Event()
        self.running = False
        self.restarts = 0
        self.last_error = ""
        self.last_error_ms = 0
        self._runner: Any = None  # mirror.runner.MirrorRunner while one exists
        self._lock = threading.Lock()
        # The engines' MM2 metric rows (`MirrorRunner.metrics`), as last published.
        self._metric_rows: list[dict[str, Any]] = []
        # The engine's clients' librdkafka messages, rate-limited.
        self.client_log = ClientLog(
            logging.getLogger("linkd.mirror_links.librdkafka"), {"mirror_link": link.name}
        )
        self.thread = threading.Thread(
            target=self._run, name=f"mirror-link-{link.name}", daemon=True
        )
        # Closes the client log's window on time, also while the engine
        # waits in a client call (a source that stopped answering holds a
        # metadata request up to its timeout, and the metrics with it).
        self.ticker = threading.Thread(
            target=self._tick, name=f"mirror-link-{link.name}-log", daemon=True
        )

    @property
    def name(self) -> str:
        return self.link.name

    def start(self) -> None:
        self.thread.start()
        self.ticker.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Blocking: sets the stop event and waits (bounded). True if it ended."""
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout_s)
        if self.ticker.is_alive():
            self.ticker.join(CLIENT_LOG_TICK_S * 2)
        return not self.thread.is_alive()

    def _tick(self) -> None:
        while not self.stop_event.wait(CLIENT_LOG_TICK_S):
            self.client_log.tick()

    def _failed(self, message: str) -> None:
        with self._lock:
            self.last_error = message
            self.last_error_ms = time.time_ns() // 1_000_000

    def _report(self, message: str) -> None:
        log.info("mirror link: %s", message, extra={"mirror_link": self.name})

    def _run(self) -> None:
        # Imported here: the engine needs confluent-kafka, the daemon otherwise does not.
        from mirror.runner import MirrorRunner

        backoff = BACKOFF_MIN_S
        while not self.stop_event.is_set():
            runner: MirrorRunner | None = None
            try:
                runner = MirrorRunner(
                    self.hosted.config, report=self._report, client_logger=self.client_log
                )
                with self._lock:
                    self._runner = runner
                runner.start()
                self.running = True
                backoff = BACKOFF_MIN_S
                log.info(
                    "mirror link running",
                    extra={
                        "mirror_link": self.name,
                        "flows": ",".join(f.name for f in self.hosted.flows),
                    },
                )
                runner.run(
                    self.stop_event,
                    duration_s=None,
                    metrics_interval_s=METRICS_INTERVAL_S,
                    on_metrics=self._publish_metrics,
                )
            except Exception as exc:  # the engine failed: report, back off, start again
                self._failed(f"{type(exc).__name__}: {exc}")
                log.warning(
                    "mirror link engine failed; starting it again",
                    extra={"mirror_link": self.name, "error": str(exc), "backoff_s": backoff},
                )
            finally:
                self.running = False
                if runner is not None:
                    try:
                        runner.close()
                    except Exception as exc:
                        log.warning(
                            "closing a mirror link engine failed",
                            extra={"mirror_link": self.name, "error": str(exc)},
                        )
                self.client_log.flush()
            if self.stop_event.wait(backoff):
                break
            self.restarts += 1
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        log.info("mirror link stopped", extra={"mirror_link": self.name})

    def _publish_metrics(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._metric_rows = rows

    def metric_rows(self) -> list[dict[str, Any]]:
        """The MM2 metric rows last published (any thread). A restarted
        engine starts its metrics again, as MM2's tasks do."""
        with self._lock:
            return list(self._metric_rows)

    def status(self) -> dict[str, Any]:
        """Running flag, last error, restarts and per-flow counters (any thread)."""
        with self._lock:
            runner = self._runner
            last_error, last_error_ms = self.last_error, self.last_error_ms
        stats: dict[str, dict[str, int]] = {}
        if runner is not None:
            try:
                stats = runner.stats()
                # The engine's own guarded failures (topic refresh, checkpoints, ...).
                for engine in runner.engines:
                    if engine.stats.errors and not last_error:
                        last_error = engine.stats.errors[-1]
            except RuntimeError:  # counters changing under the read: report none this time
                stats = {}
        return {
            "running": self.running and self.thread.is_alive(),
            "restarts": self.restarts,
            "last_error": last_error,
            "last_error_ms": last_error_ms,
            "stats": stats,
        }


class MirrorLinkManager:
    """Admin operations on mirror links, and one worker per stored link."""

    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.workers: dict[str, MirrorWorker] = {}
        self._stopping = False

    @property
    def state(self) -> ClusterState:
        return self.node.state

    def start(self) -> None:
        """Starts a worker for every stored mirror link (daemon start)."""
        for link in self.state.mirror_links.live():
            try:
                hosted = self.state.mirror_links.hosted(link.name)
            except Exception as exc:  # stored earlier under other rules: keep, do not run
                log.error(
                    "stored mirror link is no longer valid; not started",
                    extra={"mirror_link": link.name, "error": str(exc)},
                )
                continue
            self._start_worker(link, hosted)

    def _start_worker(self, link: MirrorLink, hosted: HostedMirror) -> None:
        if self._stopping or link.name in self.workers:
            return
        worker = MirrorWorker(link, hosted)
        self.workers[link.name] = worker
        worker.start()

    async def stop(self) -> None:
        """Stops every worker, each bounded, all at once (daemon shutdown)."""
        self._stopping = True
        workers = list(self.workers.values())
        self.workers.clear()
        results = await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))
        for worker, stopped in zip(workers, results, strict=True):
            if not stopped:
                log.warning(
                    "mirror link engine did not stop in time",
                    extra={"mirror_link": worker.name, "timeout_s": STOP_TIMEOUT_S},
                )

    async def create(
        self, name: str, alias: str, properties: str
    ) -> tuple[MirrorLink, HostedMirror]:
        self.node.check_ready()
        alias = alias or self.node.cluster_id
        hosted, records = self.state.mirror_links.create(
            self.node.cluster_id, name, alias, properties, self.node.clock()
        )
        await self.node.execute([Journal(tuple(records))])
        link = self.state.mirror_links.get(name)
        self._start_worker(link, hosted)
        log.info(
            "mirror link created",
            extra={
                "mirror_link": name,
                "alias": alias,
                "flows": ",".join(f.name for f in hosted.flows if f.enabled),
            },
        )
        return link, hosted

    async def delete(self, name: str) -> tuple[int, bool]:
        """(deleted at ms, whether the engine stopped within the bound)."""
        self.node.check_ready()
        self.state.mirror_links.get(name)
        worker = self.workers.pop(name, None)
        stopped = True
        if worker is not None:
            stopped = await asyncio.to_thread(worker.stop)
            if not stopped:
                log.warning(
                    "mirror link engine did not stop in time; it ends after its current step",
                    extra={"mirror_link": name, "timeout_s": STOP_TIMEOUT_S},
                )
        now = self.node.clock()
        records = self.state.mirror_links.delete(name, now)
        await self.node.execute([Journal(tuple(records))])
        log.info("mirror link deleted", extra={"mirror_link": name})
        return now, stopped

    def status(self, name: str) -> dict[str, Any]:
        worker = self.workers.get(name)
        if worker is None:
            return {"running": False, "restarts": 0, "last_error": "", "last_error_ms": 0,
                    "stats": {}}
        return worker.status()
