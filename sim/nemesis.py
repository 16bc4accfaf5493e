"""The simulator's nemesis: network faults, pauses, crashes and restarts,
scheduled by a scenario's `[[faults]]` or drawn at random (`[operators]`).

It changes only the simulated world's network and processes: a crash ends a
cluster's process (`SimCluster.crash`) and a restart rebuilds it from its
stored journal (`SimCluster.restart`: the core's `restart.recover_into`); the
clusters' decisions stay the core's.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable

from linkd.core import cluster as core
from sim import network
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.metrics import Metrics
from sim.network import Network, PathParams
from sim.operators import Operators
from sim.scenario import FaultKind, FaultSpec, OperatorsSpec


class Nemesis:
    """Carries out faults on the world's network and clusters, and remembers
    what they left behind: paused clusters, clusters lost for good, paths
    made lossy, and when the last heal happened (for the catch-up metric)."""

    def __init__(
        self,
        queue: EventQueue,
        net: Network,
        clusters: dict[str, SimCluster],
        ops: Operators,
        logical_bytes: Callable[[core.AppendBatch], int],
        reset_on_heal: bool,
    ) -> None:
        self.queue = queue
        self.network = net
        self.clusters = clusters
        self.cluster_ids = sorted(clusters)
        self.ops = ops
        self.logical_bytes = logical_bytes
        self.reset_on_heal = reset_on_heal
        self.lost_for_good: set[str] = set()
        # Paused clusters (fault pause: SIGSTOP): down, but with all their state.
        self.paused: set[str] = set()
        self.lossy: dict[tuple[str, str], PathParams] = {}  # path -> its params before
        self.heal_at_ms: int | None = None
        self._drawing: _Drawing | None = None  # faults drawn at random (`draw_from`)

    def draw_from(
        self,
        operators: OperatorsSpec,
        rng: random.Random,
        metrics: Metrics,
        stop_ms: Callable[[], int],
    ) -> None:
        """Draws faults at random from `operators.start_ms` until `stop_ms()`."""
        self._drawing = _Drawing(operators, rng, metrics, stop_ms)
        self.queue.at(operators.start_ms, "drawn fault", self.draw_fault)

    def heal_all(self) -> None:
        """The liveness phase: every grudge, clog and loss heals, and every
        crashed cluster not lost for good restarts."""
        tainted = set(self.network.grudge)
        self.network.heal()
        self.reset_links(tainted)
        self.unloss(set(self.lossy))
        # Everything heals: messages are no longer lost either (one lost
        # answer costs a lane its call timeout, which the bound must not
        # have to absorb).
        for a in self.cluster_ids:
            for b in self.cluster_ids:
                if a != b and self.network.params(a, b).loss > 0:
                    self.network.set_path(
                        a, b, dataclasses.replace(self.network.params(a, b), loss=0.0)
                    )
        for cid in self.cluster_ids:
            if not self.clusters[cid].up and cid not in self.lost_for_good:
                self.restart(cid)
        self.healed()

    def fault(self, f: FaultSpec) -> None:
        net = self.network
        everyone = self.cluster_ids
        pairs: set[tuple[str, str]] = set()
        if f.kind == FaultKind.SPLIT:
            pairs = network.full(f.side_a, f.side_b)
        elif f.kind == FaultKind.ONE_WAY:
            pairs = network.one_way(f.side_a, f.side_b)
        elif f.kind == FaultKind.BRIDGE:
            pairs = network.bridge(f.side_a, f.side_b, f.bridge)
        elif f.kind == FaultKind.ISOLATE:
            pairs = network.isolate_one(f.node, everyone)
        elif f.kind == FaultKind.CLOG:
            for pair in network.one_way(f.side_a, f.side_b):
                net.clog_ms[pair] = f.latency_ms
            if f.duration_ms:
                clogged = network.one_way(f.side_a, f.side_b)
                self.queue.after(f.duration_ms, "fault unclog", lambda: self.unclog(clogged))
            return
        elif f.kind == FaultKind.LOSS:
            lossy = network.one_way(f.side_a, f.side_b)
            for pair in sorted(lossy):
                before = self.lossy.setdefault(pair, net.params(*pair))
                net.set_path(pair[0], pair[1], dataclasses.replace(before, loss=f.loss))
            if f.duration_ms:
                self.queue.after(f.duration_ms, "fault unloss", lambda: self.unloss(lossy))
            return
        elif f.kind == FaultKind.HEAL:
            tainted = set(net.grudge)
            net.heal()
            self.reset_links(tainted)
            self.unloss(set(self.lossy))
            self.healed()
            return
        elif f.kind == FaultKind.PAUSE:
            self.pause(f.node)
            if f.duration_ms:
                self.queue.after(f.duration_ms, "fault resume", lambda: self.resume(f.node))
            return
        elif f.kind == FaultKind.RESUME:
            self.resume(f.node)
            return
        elif f.kind == FaultKind.CRASH:
            self.paused.discard(f.node)
            self.clusters[f.node].crash()
            net.down.add(f.node)
            # Its connections die with it: calls to it or from it end at once.
            self.ops.connections_reset(f.node)
            if f.permanent:
                self.lost_for_good.add(f.node)
            elif f.duration_ms:
                self.queue.after(f.duration_ms, "fault restart", lambda: self.restart(f.node))
            return
        elif f.kind == FaultKind.RESTART:
            self.restart(f.node)
            return
        elif f.kind == FaultKind.FORGE:
            self.ops.forge_calls(f.node)
            return
        elif f.kind == FaultKind.STORAGE_REFUSAL:
            until = self.queue.now_ms + f.duration_ms
            self.clusters[f.node].refuse_storage(until)
            self.queue.note(f"storage of {f.node} refuses writes until t={until} ms")
            return
        elif f.kind == FaultKind.UNCLEAN_ELECTION:
            node = self.clusters[f.node]
            log = node.state.partition(f.topic, f.partition)
            target = max(log.log_start_offset, log.log_end_offset - f.records)
            _removed, epoch, effects = node.state.unclean_election(f.topic, f.partition, target)
            node.execute(effects, "metadata", self.logical_bytes)
            self.queue.note(f"unclean election {f.node}:{f.topic}-{f.partition} epoch {epoch}")
            return
        net.grudge |= pairs
        self.queue.note(f"grudge +{sorted(pairs)}")
        if f.duration_ms:
            self.queue.after(f.duration_ms, "fault heal grudge", lambda: self.heal_pairs(pairs))

    def heal_pairs(self, pairs: set[tuple[str, str]]) -> None:
        self.network.grudge -= pairs
        self.reset_links(pairs)
        if not self.network.grudge:
            self.healed()

    def reset_links(self, pairs: set[tuple[str, str]]) -> None:
        """With `[network] reset_on_heal`: every link whose two clusters the
        healed grudge cut gets a new connection (its calls in flight are
        dropped and its driver dials again at once, as a client reconnects
        after a reset), instead of waiting for the calls' deadline."""
        if not self.reset_on_heal:
            return
        for (cid, name), driver in sorted(self.ops.drivers.items()):
            config = driver.dialer.links.configs.get(name)
            if driver.stopped or config is None:
                continue
            d, r = cid, config.remote_cluster_id
            if (d, r) not in pairs and (r, d) not in pairs:
                continue
            driver.reset()
            self.queue.note(f"link {name} reset by the heal")

    def unclog(self, pairs: set[tuple[str, str]]) -> None:
        for pair in sorted(pairs):
            self.network.clog_ms.pop(pair, None)

    def unloss(self, pairs: set[tuple[str, str]]) -> None:
        for pair in sorted(pairs):
            before = self.lossy.pop(pair, None)
            if before is not None:
                self.network.set_path(pair[0], pair[1], before)

    def pause(self, cid: str) -> None:
        """SIGSTOP: the cluster stops processing and answering (down on the
        network, no tick, calls to it get no answer) but keeps every state,
        runtime link state and waiting request included."""
        node = self.clusters[cid]
        if cid in self.lost_for_good or not node.up:
            return
        self.paused.add(cid)
        node.up = False
        self.network.down.add(cid)
        self.queue.note(f"pause {cid}")

    def resume(self, cid: str) -> None:
        """SIGCONT: as it was, with time moved on (its timers see the gap)."""
        if cid not in self.paused:
            return
        self.paused.discard(cid)
        self.network.down.discard(cid)
        node = self.clusters[cid]
        node.up = True
        self.ops.cluster_resumed(cid)
        node.notify_data()
        self.healed()
        self.queue.note(f"resume {cid}")

    def restart(self, cid: str) -> None:
        if cid in self.paused:
            self.resume(cid)
            return
        if cid in self.lost_for_good or self.clusters[cid].up:
            return
        self.network.down.discard(cid)
        self.clusters[cid].restart(self.logical_bytes)
        self.ops.cluster_restarted(cid)
        self.healed()

    def healed(self) -> None:
        self.heal_at_ms = self.queue.now_ms

    def crash_for(self, cid: str, duration_ms: int) -> None:
        if not self.clusters[cid].up:
            return
        self.fault(FaultSpec(self.queue.now_ms, "crash", node=cid, duration_ms=duration_ms))

    def draw_fault(self) -> None:
        drawing = self._drawing
        assert drawing is not None, "draw_from sets what to draw"
        ops, rng = drawing.operators, drawing.rng
        if self.queue.now_ms >= drawing.stop_ms():
            return
        duration = max(100, round(rng.expovariate(1 / ops.fault_duration_ms)))
        kind = rng.choice(("split", "isolate", "pause", "crash", "one_way", "storage_refusal"))
        a = rng.choice(self.cluster_ids)
        others = [c for c in self.cluster_ids if c != a]
        b = rng.choice(others) if others else a
        now = self.queue.now_ms
        if kind == FaultKind.CRASH:
            self.crash_for(a, duration)
        elif kind in (FaultKind.SPLIT, FaultKind.ONE_WAY) and others:
            self.fault(FaultSpec(now, kind, side_a=(a,), side_b=(b,), duration_ms=duration))
        elif kind in (FaultKind.ISOLATE, FaultKind.PAUSE, FaultKind.STORAGE_REFUSAL):
            self.fault(FaultSpec(now, kind, node=a, duration_ms=duration))
        drawing.metrics.add("faults_drawn", 1)
        gap = max(1, round(rng.expovariate(1 / ops.fault_interval_ms)))
        self.queue.after(gap, "drawn fault", self.draw_fault)


@dataclasses.dataclass(frozen=True, slots=True)
class _Drawing:
    operators: OperatorsSpec
    rng: random.Random
    metrics: Metrics
    stop_ms: Callable[[], int]


__all__ = ["Nemesis"]
