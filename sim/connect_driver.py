"""A MirrorMaker 2 flow deployed on a Kafka Connect cluster, in virtual time.

With `[connect] workers = N` a mirror edge is not one process but a group of
N Connect workers beside the target cluster. MirrorSourceConnector splits the
flow's source partitions into tasks (`tasks.max`, round-robin); the group's
leader assigns the connector and its tasks to the workers
(`linkd.core.mirror.connect.Assignor`, eager or incremental cooperative); each
task runs as a `sim.mirror_driver.MirrorDriver` restricted to its partitions.
This module only keeps time and carries out what the assignor decides.

Rules:
- The group's coordinator is on the target cluster. A rebalance (JoinGroup
  and SyncGroup) takes `rebalance_ms`; it waits while the target is down and
  while a member that stopped answering (crashed, paused, cut off) is still
  in the group, which it stays until `session_timeout_ms` after its last
  heartbeat.
- Eager: when a rebalance starts, every member stops all its tasks (each
  commits the positions the target acknowledged, as Connect's final offset
  commit) and the round deals them all again. Cooperative: members keep their
  tasks; only revoked ones stop (committing) and a follow-up round assigns
  them; a departed worker's tasks are held until the leader's delay ends.
- A worker crash ends its tasks at once: positions acknowledged but not yet
  committed are lost, and the task's next owner copies those records again
  (`connect_recopied_records`). A paused or cut-off worker's tasks make no
  progress; if it is back before its session expires it carries on, else it
  finds itself out of the group when it is back, stops its tasks without a
  commit (a zombie's commit is fenced) and rejoins empty.
- A task's pause is the time from the moment it stopped copying (crash,
  pause, cut-off, revocation) to the moment a worker runs it again.
- A replication pause is the flow's: from the moment a first task stopped
  copying to the moment every task runs again, one per such interval, with
  the rebalances it took (`replication_pauses`). Eager rebalancing stops
  every task, so each of its rebalances is one; a cooperative rebalance that
  holds a lost worker's tasks lasts until the delay ends.
- MirrorCheckpointConnector and MirrorHeartbeatConnector are not deployed on
  the group: the checkpoint task does not run in this mode.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from linkd.core.link_driver import DriverSettings
from linkd.core.mirror.config import MirrorFlow
from linkd.core.mirror.connect import (
    Assignor,
    ConnectProtocol,
    Round,
    Unit,
    split_round_robin,
)
from linkd.core.mirror.model import TopicPartition
from sim.checkers import MirrorCopy
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.history import History
from sim.metrics import percentile
from sim.mirror_driver import MirrorDriver, MirrorStats, Observer
from sim.network import Network

CONNECTOR = "mirror-source"
class WorkerFault(enum.StrEnum):
    """The faults a Connect worker takes (the scenario's `worker_*` fault
    kinds). A StrEnum: equal to its name in a scenario file."""

    CRASH = "worker_crash"
    RESTART = "worker_restart"
    PAUSE = "worker_pause"
    ISOLATE = "worker_isolate"


WORKER_FAULTS = tuple(WorkerFault)


@dataclass(frozen=True, slots=True)
class ConnectSettings:
    """The `[connect]` table: 0 workers means MM2 runs as one process."""

    workers: int = 0
    protocol: str = "sessioned"
    tasks_max: int = 4
    scheduled_rebalance_max_delay_ms: int = 300_000
    session_timeout_ms: int = 10_000
    rebalance_ms: int = 200


@dataclass
class Worker:
    name: str
    up: bool = True
    frozen: bool = False  # paused or cut off: neither heartbeats nor progress
    member: bool = False
    incarnation: int = 0  # bumped at each crash and each fall out of the group
    owned: frozenset[Unit] = frozenset()
    tasks: dict[Unit, MirrorDriver] = field(default_factory=dict)


class ConnectMirror:
    """One mirror edge run by a Connect group: the interface of `MirrorDriver`
    that the world and the judge use, over the tasks of all workers."""

    def __init__(
        self,
        name: str,
        source: SimCluster,
        target: SimCluster,
        flow: MirrorFlow,
        queue: EventQueue,
        network: Network,
        sizes: DriverSettings,
        observer: Observer,
        settings: ConnectSettings,
    ) -> None:
        self.name = name
        self.source = source
        self.target = target
        self.queue = queue
        self.settings = settings
        self._make: Callable[[str, frozenset[TopicPartition] | None], MirrorDriver] = (
            lambda n, parts: MirrorDriver(
                n, source, target, flow, queue, network, sizes, observer, parts, False
            )
        )
        # Never started: the flow's names, RPO and checkpoint reads, and every
        # partition the connector found (for the at-least-once checker).
        self.view = self._make(name, None)
        self.assignor = Assignor(
            ConnectProtocol.parse(settings.protocol), settings.scheduled_rebalance_max_delay_ms
        )
        self.workers = {f"w{i}": Worker(f"w{i}") for i in range(settings.workers)}
        self.task_partitions: dict[Unit, frozenset[TopicPartition]] = {}
        self.configured: frozenset[Unit] = frozenset()
        self.stopped = False
        self.retired = MirrorStats()
        self.rebalances = 0
        self.pauses_ms: list[int] = []
        # The flow's replication pauses: (duration, rebalance rounds in it).
        self.replication_pauses: list[tuple[int, int]] = []
        self._pause_began: tuple[int, int] | None = None  # (since, rounds then)
        self.recopied = 0
        self._down_since: dict[Unit, int] = {}  # tasks not running, since when
        self._acked: dict[TopicPartition, int] = {}  # highest position acknowledged
        self._round_due: Timer | None = None
        self._delayed: Timer | None = None

    # -- the MirrorDriver interface the world and judge use -------------------------------

    def remote_topic(self, topic: str) -> str | None:
        return self.view.remote_topic(topic)

    def remote_topics(self) -> list[str]:
        return self.view.remote_topics()

    def copies(self) -> list[MirrorCopy]:
        return self.view.copies()

    def measure_rpo(self, history: History) -> tuple[int, int]:
        return self.view.measure_rpo(history)

    def checkpointed_offsets(self, group: str, remote: str) -> dict[int, int]:
        return self.view.checkpointed_offsets(group, remote)

    @property
    def stats(self) -> MirrorStats:
        total = dataclasses.replace(self.retired)
        for w in sorted(self.workers):
            for driver in self.workers[w].tasks.values():
                _add_stats(total, driver.stats)
        return total

    def caught_up(self) -> bool:
        """Every task runs on a live worker and has copied to the source's high
        watermark (as a MirrorDriver, a down source or target is not judged)."""
        if self.stopped or not self.source.up or not self.target.up:
            return True
        if not self.configured:
            return False
        running = {u: w for w in self.workers.values() for u in w.tasks if _runs(w)}
        tasks = {u for u in self.configured if not u.is_connector}
        if set(running) != tasks:
            return False
        return all(self.workers[w.name].tasks[u].caught_up() for u, w in sorted(running.items()))

    def start(self) -> None:
        """The connector lists the source's partitions and splits them into
        tasks; every worker joins the group."""
        state = self.source.state
        parts = [
            TopicPartition(topic, p)
            for topic, t in sorted(state.topics.items())
            if self.view.remote_topic(topic) is not None
            for p in range(len(t.partitions))
        ]
        units = {Unit(CONNECTOR)}
        split = split_round_robin(parts, self.settings.tasks_max) if parts else []
        for i, group in enumerate(split):
            unit = Unit(CONNECTOR, i)
            units.add(unit)
            self.task_partitions[unit] = frozenset(group)
            self._down_since[unit] = self.queue.now_ms
            for tp in group:
                self.view.assigned[tp] = self.view.remote_topic(tp.topic) or ""
        self.configured = frozenset(units)
        for w in self.workers.values():
            w.member = True
        self.queue.note(
            f"connect {self.name}: {len(self.workers)} workers, {len(units) - 1} tasks, "
            f"{self.settings.protocol}"
        )
        self._request_round("workers joined")

    def stop(self) -> None:
        self.stopped = True
        for w in self.workers.values():
            for unit in sorted(w.tasks):
                self._stop_task(w, unit, graceful=False)

    # -- rebalances ---------------------------------------------------------------------------

    def _request_round(self, why: str) -> None:
        if self.stopped or self._round_due is not None:
            return
        self.queue.note(f"connect {self.name} rebalance: {why}")
        if not self.assignor.protocol.cooperative:
            # Eager: every member stops everything before it joins.
            for w in self.workers.values():
                if w.member and _runs(w):
                    for unit in sorted(w.tasks):
                        self._stop_task(w, unit, graceful=True)
                    w.owned = frozenset()
        self._round_due = self.queue.after(
            self.settings.rebalance_ms, f"connect {self.name} round", self._round
        )

    def _round(self) -> None:
        self._round_due = None
        if self.stopped:
            return
        waiting = [w.name for w in self.workers.values() if w.member and not _runs(w)]
        if not self.target.up or waiting:
            # The coordinator is down, or a member has not rejoined: wait for it
            # (or for its session to expire).
            self._round_due = self.queue.after(
                self.settings.rebalance_ms, f"connect {self.name} round wait", self._round
            )
            return
        members = {w.name: w.owned for w in self.workers.values() if w.member}
        if not members:
            return
        r = self.assignor.rebalance(members, self.configured, self.queue.now_ms)
        self.rebalances += 1
        self._apply(r)
        if r.follow_up:
            self._request_round("revoked tasks rejoin")
        elif r.delay_ms:
            if self._delayed is not None:
                self._delayed.cancel()
            self._delayed = self.queue.after(
                r.delay_ms, f"connect {self.name} delay ends", self._delay_ended
            )

    def _delay_ended(self) -> None:
        self._delayed = None
        self._request_round("scheduled rebalance delay ended")

    def _apply(self, r: Round) -> None:
        for name, answer in sorted(r.members.items()):
            w = self.workers[name]
            for unit in sorted(answer.revoked):
                if unit in w.tasks:
                    self._stop_task(w, unit, graceful=True)
            for unit in sorted(answer.assigned):
                if not unit.is_connector:
                    self._start_task(w, unit)
            w.owned = answer.apply(w.owned)
        held = ", ".join(str(u) for u in sorted(r.held))
        self.queue.note(
            f"connect {self.name} generation {r.generation}: "
            + "; ".join(
                f"{m} +{len(a.assigned)} -{len(a.revoked)}" for m, a in sorted(r.members.items())
            )
            + (f"; held {held} for {r.delay_ms} ms" if held else "")
        )

    # -- tasks --------------------------------------------------------------------------------

    def _start_task(self, w: Worker, unit: Unit) -> None:
        driver = self._make(f"{self.name}/{unit}", self.task_partitions[unit])
        driver.on_start_positions = self._count_recopies
        w.tasks[unit] = driver
        since = self._down_since.pop(unit, None)
        if since is not None and self.rebalances > 1:
            self.pauses_ms.append(self.queue.now_ms - since)
        self._pause_may_end()
        driver.start()

    def _stop_task(self, w: Worker, unit: Unit, graceful: bool) -> None:
        driver = w.tasks.pop(unit)
        if graceful:
            driver.stop_committing()
        else:
            driver.stop()
        for tp, position in sorted(driver.positions.items()):
            self._acked[tp] = max(self._acked.get(tp, 0), position)
        _add_stats(self.retired, driver.stats)
        self._task_down(unit)

    def _task_down(self, unit: Unit) -> None:
        self._down_since.setdefault(unit, self.queue.now_ms)
        if self._pause_began is None:
            self._pause_began = (self.queue.now_ms, self.rebalances)

    def _pause_may_end(self) -> None:
        """Every task runs again: the replication pause ends (one that ends
        at the group's first assignment is start-up, not a pause)."""
        if self._down_since or self._pause_began is None:
            return
        since, rounds_before = self._pause_began
        self._pause_began = None
        if self.rebalances > 1:
            rounds = self.rebalances - rounds_before
            self.replication_pauses.append((self.queue.now_ms - since, rounds))

    def _count_recopies(self, started: dict[TopicPartition, int]) -> None:
        for tp, position in sorted(started.items()):
            self.recopied += max(0, self._acked.get(tp, 0) - position)

    # -- faults -------------------------------------------------------------------------------

    def fault(self, kind: str, worker: str, duration_ms: int, permanent: bool) -> None:
        w = self.workers.get(worker)
        if w is None or self.stopped:
            return
        if kind == WorkerFault.CRASH:
            self._crash(w)
            if duration_ms and not permanent:
                self.queue.after(duration_ms, f"connect {worker} restart", lambda: self._restart(w))
        elif kind == WorkerFault.RESTART:
            self._restart(w)
        else:  # worker_pause, worker_isolate: no heartbeats, no progress
            self._freeze(w)
            if duration_ms:
                self.queue.after(duration_ms, f"connect {worker} back", lambda: self._thaw(w))

    def heal_all(self) -> None:
        """The liveness phase: crashed workers restart, paused ones run again."""
        for name in sorted(self.workers):
            w = self.workers[name]
            if not w.up:
                self._restart(w)
            elif w.frozen:
                self._thaw(w)

    def _crash(self, w: Worker) -> None:
        if not w.up:
            return
        self.queue.note(f"connect {self.name} {w.name} crashed")
        w.up = False
        w.frozen = False
        w.incarnation += 1
        for unit in sorted(w.tasks):
            self._stop_task(w, unit, graceful=False)
        w.owned = frozenset()
        self._expire_later(w)

    def _restart(self, w: Worker) -> None:
        """A restarted worker joins with a new member id at once (its old one,
        if its session has not expired yet, is replaced)."""
        if w.up:
            return
        self.queue.note(f"connect {self.name} {w.name} restarted")
        w.up = True
        w.member = True
        self._request_round(f"{w.name} joined")

    def _freeze(self, w: Worker) -> None:
        if not w.up or w.frozen:
            return
        self.queue.note(f"connect {self.name} {w.name} unresponsive")
        w.frozen = True
        for unit in sorted(w.tasks):
            w.tasks[unit].frozen = True
            self._task_down(unit)
        self._expire_later(w)

    def _thaw(self, w: Worker) -> None:
        if not w.up or not w.frozen:
            return
        w.frozen = False
        if w.member:  # back within its session: carries on
            self.queue.note(f"connect {self.name} {w.name} back in time")
            for unit in sorted(w.tasks):
                since = self._down_since.pop(unit, self.queue.now_ms)
                self.pauses_ms.append(self.queue.now_ms - since)
                w.tasks[unit].thaw()
            self._pause_may_end()
            return
        self.queue.note(f"connect {self.name} {w.name} back, out of the group: rejoins empty")
        for unit in sorted(w.tasks):
            driver = w.tasks.pop(unit)
            driver.stop()
            _add_stats(self.retired, driver.stats)
        w.owned = frozenset()
        w.member = True
        self._request_round(f"{w.name} rejoined")

    def _expire_later(self, w: Worker) -> None:
        incarnation = w.incarnation

        def expire() -> None:
            if w.member and not _runs(w) and w.incarnation == incarnation:
                self.queue.note(f"connect {self.name} {w.name} session expired")
                w.member = False
                w.incarnation += 1
                # Its tasks are lost to the group (the frozen drivers stay with it,
                # holding what they acknowledged and did not commit).
                for unit in sorted(w.tasks):
                    self._task_down(unit)
                    for tp, position in sorted(w.tasks[unit].positions.items()):
                        self._acked[tp] = max(self._acked.get(tp, 0), position)
                self._request_round(f"{w.name} left")

        self.queue.after(self.settings.session_timeout_ms, f"connect {w.name} session", expire)

    # -- metrics ------------------------------------------------------------------------------

    def pause_stats(self) -> tuple[int, int]:
        """(max, p50) of the task pauses, in virtual ms (0, 0: none)."""
        if not self.pauses_ms:
            return 0, 0
        return max(self.pauses_ms), percentile(self.pauses_ms, 50)


def _runs(w: Worker) -> bool:
    return w.up and not w.frozen


def _add_stats(total: MirrorStats, more: MirrorStats) -> None:
    for f in dataclasses.fields(MirrorStats):
        setattr(total, f.name, getattr(total, f.name) + getattr(more, f.name))
