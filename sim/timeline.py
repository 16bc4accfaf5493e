"""A run's timeline: link states, faults and client operations over virtual time.

Rules:
- A timeline is taken by running the run again in this process: a run is
  fully determined by (scenario, seed, params), so the replay is the run the
  sweep made. Its trace digest is kept beside the timeline so the caller can
  check it against the sweep's (`Timeline.digest`); recording reads the world
  only and schedules nothing, so it cannot change the digest.
- What is recorded is sampled at every tick (`Simulation.samplers`): each
  running link's state, which clusters are crashed or paused, and which
  directed paths are cut, clogged or lossy. Spans are runs of equal samples;
  a span runs from the sample that first saw a value to the one that saw it
  change, so edges are accurate to one tick.
- Client operations are the run's history itself (`sim.history.Op`).

Theory of operation: `record` builds the `Simulation`, adds a `_Sampler`,
runs it and folds the samples into `Span`s per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim import scenario as scenarios
from sim.checkers import Violation
from sim.history import Op
from sim.world import Simulation


@dataclass(frozen=True, slots=True)
class Span:
    row: str  # a link "B/A-B", or a fault "crash A", "cut A->B"
    value: str  # a link state; "on" for a fault
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Marker:
    at_ms: int
    label: str  # an operator action, e.g. "failover B A-B"


@dataclass(frozen=True)
class Timeline:
    scenario: str
    seed: int
    params: dict[str, Any]
    digest: str
    safety_end_ms: int  # the end of the safety phase (duration_ms): then all heals
    end_ms: int
    links: tuple[Span, ...]
    faults: tuple[Span, ...]
    actions: tuple[Marker, ...]
    ops: tuple[Op, ...]
    violations: tuple[Violation, ...]
    link_rows: tuple[str, ...] = field(default=())
    fault_rows: tuple[str, ...] = field(default=())


class _Sampler:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.samples: list[tuple[int, dict[str, str], set[str]]] = []

    def __call__(self, now: int) -> None:
        sim = self.sim
        links = {
            f"{cid}/{name}": driver.dialer.links.state_name(name)
            for (cid, name), driver in sorted(sim.ops.drivers.items())
            if not driver.stopped
        }
        faults: set[str] = set()
        for cid in sim.cluster_ids:
            if cid in sim.paused:
                faults.add(f"pause {cid}")
            elif not sim.clusters[cid].up:
                faults.add(f"crash {cid}")
        net = sim.network
        up = [(a, b) for a, b in net.grudge if a not in net.down and b not in net.down]
        faults |= {f"cut {a}->{b}" for a, b in up}
        faults |= {f"clog {a}->{b}" for a, b in net.clog_ms}
        faults |= {f"loss {a}->{b}" for a, b in sim.nemesis.lossy}
        self.samples.append((now, links, faults))


def _spans(samples: list[tuple[int, dict[str, str]]]) -> list[Span]:
    """Runs of equal values per row; a row's span ends at the sample that changed it."""
    open_: dict[str, tuple[str, int]] = {}
    out: list[Span] = []
    last = 0
    for now, values in samples:
        for row in sorted(set(open_) | set(values)):
            was = open_.get(row)
            value = values.get(row)
            if was is not None and was[0] != value:
                out.append(Span(row, was[0], was[1], now))
                del open_[row]
            if value is not None and row not in open_:
                open_[row] = (value, now)
        last = now
    out += [Span(row, value, start, last) for row, (value, start) in sorted(open_.items())]
    return sorted(out, key=lambda s: (s.row, s.start_ms))


def _action_label(a: scenarios.ActionSpec) -> str:
    where = a.cluster or a.target
    what = a.link or a.topic or (f"{a.source}->{a.target}" if a.source else "")
    return " ".join(p for p in (a.kind, where, what) if p)


def record(scenario: str, seed: int, params: dict[str, Any] | None = None) -> Timeline:
    """Run (scenario, seed, params) again and return its timeline."""
    spec = scenarios.apply_params(scenarios.load(scenario), params)
    sim = Simulation(spec, seed)
    sampler = _Sampler(sim)
    sim.samplers.append(sampler)
    sim.run()
    links = _spans([(t, ls) for t, ls, _ in sampler.samples])
    faults = _spans([(t, dict.fromkeys(fs, "on")) for t, _, fs in sampler.samples])
    return Timeline(
        scenario=scenario,
        seed=seed,
        params=dict(sorted((params or {}).items())),
        digest=sim.queue.digest,
        safety_end_ms=spec.run.duration_ms,
        end_ms=sim.queue.now_ms,
        links=tuple(links),
        faults=tuple(faults),
        actions=tuple(Marker(a.at_ms, _action_label(a)) for a in spec.actions),
        ops=tuple(sim.history.ops),
        violations=tuple(sim.violations),
        link_rows=tuple(sorted({s.row for s in links})),
        fault_rows=tuple(sorted({s.row for s in faults})),
    )
