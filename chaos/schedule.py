"""Chaos schedules: the topology and the timed nemesis steps of one run.

A schedule is plain data drawn from a seed (swarm style: the seed picks the
topology size, the link mode, which nemeses are enabled and their timing) or
one of the hand-written classics. The same seed and options always give the
same schedule (`Schedule.to_json` compares equal), so a run can be replayed
with the command it prints; what the real processes do with it is another
matter (real sockets and clocks are not replayable bit for bit).

Topology: cluster "A" leads the topic namespace `orders-` to every other
cluster (a star), one link per follower, named source+follower in lower case
("ab", "ac"). Each follower creates its link and dials the source through its
own fault proxy, so every link connection can be faulted; the proxy's "a->b"
is follower -> source, "b->a" the way back.

Steps (`Step.op`, `Step.args`):
    cut LINK DIRECTION          blackhole a link ("both", "a->b" or "b->a")
    flaky LINK PROBABILITY      reset link connections with this probability per chunk
    slow LINK MS                delay every chunk of the link (both ways)
    heal LINK                   clear every fault of the link's proxy
    pause CLUSTER / resume CLUSTER      SIGSTOP / SIGCONT the daemon
    kill CLUSTER / restart CLUSTER      kill -9, then start again on the same data dir
    lose CLUSTER                kill -9 for good (disaster recovery)
    attach LINK PREFIX / detach LINK PREFIX   a config change on the source's side
    unclean CLUSTER RECORDS     an emulated unclean leader election on CLUSTER: every
                                partition of the topic loses its last RECORDS records
                                (ccr-admin fault unclean-election) and a new epoch
    resume-partitions LINK      on the follower: gap.policy continue, then
                                resume-partition for every partition of the link
                                stopped at a gap (gap.policy stop)
    failover CLUSTER LINK       `failover --force` on the follower
    relink CLUSTER OLD NEW SOURCE   detach OLD on CLUSTER, create NEW to SOURCE, then
                                `recover --confirm` it (KIP-986 re-pointing)

The operator nemesis (`Schedule.operators`, chaos/operators.py) is not a list
of steps: it draws KIP-986's operator moves at run time from what the
clusters describe, from its own random stream (the seed and "operators").
Random schedules enable it for about half the seeds (drawn from a stream of
its own, so the rest of a seed's schedule does not change with it); a run
with it always has the transactional producer.

With the operator nemesis, the schedule also says which of its procedure
moves (`reverse`, `failover`, `recover`: the nth of them, in the order it
draws them) a crash cuts short (`Schedule.procedure_crashes`, drawn from a
stream of its own, "procedure-crashes"): `kill -9` of the cluster running the
call or of the link's other end, `delay_ms` after the call began; the
crashed daemon then starts again on its data, and the procedure runs once
more where a plan of it is still journalled (docs/operations.md).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from linkd.core import links
from linkd.core.errors import ClusterError
from linkd.core.faults import PlantedBug

CLUSTER_NAMES = "ABCDE"
NEMESES = ("halves", "isolate", "bridge", "one-way", "flaky", "slow", "pause", "kill")
CLASSICS = (
    "kip986-dr",
    "sync-txn-cut",
    "one-way-config",
    "flapping",
    "sync-ack-failover",
    "txn-failover",
    "retention-outage",
    "failback-unclean",
)
# txn-failover: how long each transaction stays open before its commit.
TXN_FAILOVER_OPEN_MS = 1500
# retention-outage: the topic keeps records 3 s, in one-second segments,
# checked every second (so a record goes 3 to 5 s after it was written); B
# is down 8 s.
RETENTION_OUTAGE_MS = 3000
SEGMENT_MS = 1000
RETENTION_CHECK_INTERVAL_MS = 1000
# failback-unclean: the records A's unclean election takes back from each
# partition (B misses about 2 s of A's writes, fewer than this).
FAILBACK_UNCLEAN_RECORDS = 200
PLANTED_BUGS = tuple(bug.value for bug in PlantedBug)  # linkd --plant-bug
SOURCE = "A"
TOPIC_PREFIX = "orders-"
EXTRA_PREFIX = "pay-"
# The link settings every run's daemons start with (and its twin simulates).
SESSION_TIMEOUT_MS = 2000
REPLICA_LAG_TIME_MAX_MS = 1500
LINK_LAG_MAX_MS = 3000


@dataclass(frozen=True, slots=True)
class Step:
    at_s: float
    op: str
    args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "op": self.op, "args": list(self.args)}

    def describe(self) -> str:
        return f"t={self.at_s:5.1f}s {self.op} {' '.join(self.args)}".rstrip()


# A procedure move of the operator nemesis cut short by a crash: which of
# them, from the first PROCEDURE_CRASH_SLOTS, each with this probability.
PROCEDURE_CRASH_SLOTS = 3
PROCEDURE_CRASH_SHARE = 0.5
PROCEDURE_CRASH_DELAY_MS = (0, 800)
PROCEDURE_CRASH_SIDES = ("runner", "remote")


@dataclass(frozen=True, slots=True)
class ProcedureCrash:
    """kill -9 of `side` ("runner": the cluster the call runs on; "remote":
    the link's other end) `delay_ms` after the operator nemesis's `nth`
    reverse, failover or recover move (1-based) began."""

    nth: int
    side: str
    delay_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"nth": self.nth, "side": self.side, "delay_ms": self.delay_ms}


def procedure_crashes(seed: int) -> tuple[ProcedureCrash, ...]:
    """The procedure moves a crash cuts short in a run of `seed` with the
    operator nemesis (a stream of its own: the rest of the schedule does not
    change with it)."""
    rng = random.Random(f"{seed}:procedure-crashes")
    out: list[ProcedureCrash] = []
    for nth in range(1, PROCEDURE_CRASH_SLOTS + 1):
        if rng.random() < PROCEDURE_CRASH_SHARE:
            side = rng.choice(PROCEDURE_CRASH_SIDES)
            out.append(ProcedureCrash(nth, side, rng.randint(*PROCEDURE_CRASH_DELAY_MS)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str  # "random" or a classic's name
    seed: int
    clusters: tuple[str, ...]
    mode: str  # "ASYNC" or "SYNC": the mode every link is switched to before the faults
    links: tuple[tuple[str, str, str], ...]  # (name, source, follower)
    steps: tuple[Step, ...]
    phase_s: float  # length of the nemesis phase
    nemeses: tuple[str, ...] = ()
    transactional: bool = False  # also run a transactional producer on the source
    plant_bug: str = ""
    extra_prefixes: tuple[str, ...] = field(default=())
    # The operator nemesis (chaos/operators.py) runs beside the steps.
    operators: bool = False
    # Security on: every daemon requires link credentials (a file), and every
    # link is created with them (docs/security.md).
    secure: bool = False
    # With the operator nemesis: the procedure moves a crash cuts short.
    procedure_crashes: tuple[ProcedureCrash, ...] = ()
    # Link policies every link is created with (create-link --config NAME=VALUE,
    # e.g. failover.truncation last-stable-offset), sorted by name.
    link_configs: tuple[tuple[str, str], ...] = ()
    # A transactional producer holds each transaction open this long between
    # its records and its commit (0: commits at once).
    txn_open_ms: int = 0
    # The topics' retention.ms (0: kept for ever); with it, whole segments of
    # SEGMENT_MS each, and every daemon checks retention every
    # RETENTION_CHECK_INTERVAL_MS.
    retention_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seed": self.seed,
            "clusters": list(self.clusters),
            "mode": self.mode,
            "links": [list(x) for x in self.links],
            "nemeses": list(self.nemeses),
            "phase_s": self.phase_s,
            "transactional": self.transactional,
            "plant_bug": self.plant_bug,
            "extra_prefixes": list(self.extra_prefixes),
            "operators": self.operators,
            "secure": self.secure,
            "procedure_crashes": [c.to_json() for c in self.procedure_crashes],
            "link_configs": dict(self.link_configs),
            "txn_open_ms": self.txn_open_ms,
            "retention_ms": self.retention_ms,
            "steps": [s.to_json() for s in self.steps],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def link_name(source: str, follower: str) -> str:
    return f"{source}{follower}".lower()


def star(clusters: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    return tuple((link_name(SOURCE, c), SOURCE, c) for c in clusters if c != SOURCE)


def _r(x: float) -> float:
    return round(x, 2)


def _links_between(links: tuple[tuple[str, str, str], ...], side: set[str]) -> list[str]:
    """Links with one end in `side` and the other outside it."""
    return [name for name, s, f in links if (s in side) != (f in side)]


def operators_drawn(seed: int) -> bool:
    """Does the swarm enable the operator nemesis for this seed? About half
    the seeds, from a stream of its own (the rest of the schedule is the
    same either way)."""
    return random.Random(f"{seed}:operators-enabled").random() < 0.5


def random_schedule(
    seed: int,
    phase_s: float = 20.0,
    mode: str | None = None,
    clusters: int | None = None,
    operators: bool | None = None,
) -> Schedule:
    """The swarm schedule of `seed` (mode, cluster count and the operator
    nemesis may be forced; None: drawn)."""
    rng = random.Random(seed)
    n = clusters if clusters is not None else rng.choice((2, 2, 3, 3, 4))
    names = tuple(CLUSTER_NAMES[:n])
    chosen_mode = mode.upper() if mode else rng.choice(("ASYNC", "SYNC"))
    links = star(names)
    enabled = tuple(sorted(rng.sample(NEMESES, rng.randint(2, 4))))
    steps: list[Step] = []
    t = _r(rng.uniform(1.0, 2.5))
    while t < phase_s - 2.0:
        kind = rng.choice(enabled)
        length = _r(min(rng.uniform(1.5, 4.0), phase_s - 1.0 - t))
        end = _r(t + length)
        target_links: list[str] = []
        if kind == "halves":
            shuffled = list(names)
            rng.shuffle(shuffled)
            half = set(shuffled[: max(1, n // 2)])
            target_links = _links_between(links, half)
            steps += [Step(t, "cut", (x, "both")) for x in target_links]
        elif kind == "isolate":
            one = rng.choice(names)
            target_links = _links_between(links, {one})
            steps += [Step(t, "cut", (x, "both")) for x in target_links]
        elif kind == "bridge":
            # Two halves and one cluster in both: cut the links across, except the bridge's.
            shuffled = list(names)
            rng.shuffle(shuffled)
            bridge = shuffled[0]
            rest = shuffled[1:]
            side = set(rest[: len(rest) // 2])
            target_links = [
                x for x in _links_between(links, side) if bridge not in _ends(links, x)
            ] or [rng.choice(links)[0]]
            steps += [Step(t, "cut", (x, "both")) for x in target_links]
        elif kind == "one-way":
            x = rng.choice(links)[0]
            target_links = [x]
            steps.append(Step(t, "cut", (x, rng.choice(("a->b", "b->a")))))
        elif kind == "flaky":
            x = rng.choice(links)[0]
            target_links = [x]
            steps.append(Step(t, "flaky", (x, str(rng.choice((0.02, 0.05, 0.1))))))
        elif kind == "slow":
            x = rng.choice(links)[0]
            target_links = [x]
            steps.append(Step(t, "slow", (x, str(rng.choice((50, 150, 400))))))
        elif kind == "pause":
            c = rng.choice(names)
            steps += [Step(t, "pause", (c,)), Step(end, "resume", (c,))]
        elif kind == "kill":
            c = rng.choice(names)
            steps += [Step(t, "kill", (c,)), Step(end, "restart", (c,))]
        steps += [Step(end, "heal", (x,)) for x in target_links]
        t = _r(end + rng.uniform(0.5, 2.0))
    transactional = rng.random() < 0.3
    with_operators = operators_drawn(seed) if operators is None else operators
    return Schedule(
        name="random",
        seed=seed,
        clusters=names,
        mode=chosen_mode,
        links=links,
        steps=tuple(steps),
        phase_s=phase_s,
        nemeses=enabled,
        transactional=transactional or with_operators,
        operators=with_operators,
        procedure_crashes=procedure_crashes(seed) if with_operators else (),
    )


def _ends(links: tuple[tuple[str, str, str], ...], name: str) -> tuple[str, str]:
    for n, s, f in links:
        if n == name:
            return (s, f)
    raise KeyError(name)


def _classic(
    name: str,
    seed: int,
    clusters: tuple[str, ...],
    mode: str,
    steps: tuple[Step, ...],
    phase_s: float,
    nemeses: tuple[str, ...],
    transactional: bool = False,
    extra_prefixes: tuple[str, ...] = (),
    txn_open_ms: int = 0,
    retention_ms: int = 0,
) -> Schedule:
    """A classic's schedule: its clusters as a star from A."""
    return Schedule(
        name,
        seed,
        clusters,
        mode,
        star(clusters),
        steps,
        phase_s,
        nemeses=nemeses,
        transactional=transactional,
        extra_prefixes=extra_prefixes,
        txn_open_ms=txn_open_ms,
        retention_ms=retention_ms,
    )


def classic_schedule(name: str, seed: int = 0, phase_s: float = 20.0) -> Schedule:
    """One of the hand-written classics (timings fixed; the seed only seeds the proxies)."""
    clusters: tuple[str, ...]
    steps: tuple[Step, ...]
    if name == "kip986-dr":
        # A leads to B and C; B is cut off and falls behind; A is lost; B is
        # promoted with failover --force; C is re-pointed to B with recover --confirm.
        clusters = ("A", "B", "C")
        steps = (
            Step(2.0, "cut", ("ab", "both")),
            Step(5.0, "lose", ("A",)),
            Step(6.0, "failover", ("B", "ab")),
            Step(7.0, "relink", ("C", "ac", "cb", "B")),
        )
        return _classic(name, seed, clusters, "ASYNC", steps, max(phase_s, 10.0),
                        nemeses=("cut", "lose", "failover", "recover"))
    if name == "sync-txn-cut":
        # A SYNC link whose follower is cut while transactions are in flight.
        clusters = ("A", "B")
        steps = (Step(3.0, "cut", ("ab", "both")), Step(8.0, "heal", ("ab",)))
        return _classic(name, seed, clusters, "SYNC", steps, max(phase_s, 10.0),
                        nemeses=("cut",), transactional=True)
    if name == "one-way-config":
        # An asymmetric partition while the source attaches, then detaches, a namespace.
        clusters = ("A", "B")
        steps = (
            Step(2.0, "cut", ("ab", "b->a")),
            Step(3.0, "attach", ("ab", EXTRA_PREFIX)),
            Step(6.0, "heal", ("ab",)),
            Step(9.0, "cut", ("ab", "a->b")),
            Step(10.0, "detach", ("ab", EXTRA_PREFIX)),
            Step(13.0, "heal", ("ab",)),
        )
        return _classic(name, seed, clusters, "ASYNC", steps, max(phase_s, 15.0),
                        nemeses=("one-way", "attach", "detach"), extra_prefixes=(EXTRA_PREFIX,))
    if name == "flapping":
        # The link goes down for a second every three seconds.
        clusters = ("A", "B")
        out: list[Step] = []
        t = 1.0
        while t + 1.0 < phase_s - 1.0:
            out += [Step(_r(t), "cut", ("ab", "both")), Step(_r(t + 1.0), "heal", ("ab",))]
            t += 3.0
        return _classic(name, seed, clusters, "SYNC", tuple(out), phase_s,
                        nemeses=("cut",))
    if name == "sync-ack-failover":
        # SYNC link IN_SYNC; the follower's link is cut; acks=all producers go on;
        # the source is killed for good; the follower is promoted. Invariant 4:
        # everything acknowledged while IN_SYNC must be on the follower.
        clusters = ("A", "B")
        steps = (
            Step(2.0, "cut", ("ab", "both")),
            Step(5.0, "lose", ("A",)),
            Step(6.0, "failover", ("B", "ab")),
        )
        return _classic(name, seed, clusters, "SYNC", steps, max(phase_s, 9.0),
                        nemeses=("cut", "lose", "failover"))
    if name == "txn-failover":
        # The transactions-at-failover study on real daemons: an ASYNC link
        # while a transactional producer holds each transaction open for
        # TXN_FAILOVER_OPEN_MS; A is lost for good; B fails over with force.
        # Run it under each failover.truncation (--link-config): abort keeps
        # every record and aborts the open transactions, last-stable-offset
        # cuts B at its last stable offset (counted in the run's summary).
        clusters = ("A", "B")
        steps = (Step(6.0, "lose", ("A",)), Step(6.5, "failover", ("B", "ab")))
        return _classic(
            name,
            seed,
            clusters,
            "ASYNC",
            steps,
            max(phase_s, 10.0),
            nemeses=("lose", "failover"),
            transactional=True,
            txn_open_ms=TXN_FAILOVER_OPEN_MS,
        )
    if name == "retention-outage":
        # The retention-gap study on real daemons: B is down longer than A
        # keeps records, so A deletes records B never copied. Under gap.policy
        # continue (the default) B records the gap and goes on; under stop
        # (--link-config gap.policy=stop) each partition waits at its gap
        # until the operator answers, 4 s after B is back, as in the study:
        # gap.policy continue, then resume-partition (`resume-partitions`).
        clusters = ("A", "B")
        steps = (
            Step(2.0, "kill", ("B",)),
            Step(10.0, "restart", ("B",)),
            Step(14.0, "resume-partitions", ("ab",)),
        )
        return _classic(name, seed, clusters, "ASYNC", steps, max(phase_s, 16.0),
                        nemeses=("kill", "resume-partitions"), retention_ms=RETENTION_OUTAGE_MS)
    if name == "failback-unclean":
        # The failback-reconciliation study on real daemons: B is cut off
        # (killed) after copying A; A's clients write on, an unclean election
        # on A takes back more than B missed (below what B copied) and A's
        # clients write on again; A is killed, B restarts and fails over with
        # force (the clients move to B); A returns and fails back: relinked to
        # follow B, cut by `recover --confirm` as failback.reconciliation says
        # (--link-config), then judged for records A kept that B holds others at.
        clusters = ("A", "B")
        steps = (
            Step(2.0, "kill", ("B",)),
            Step(4.0, "unclean", ("A", str(FAILBACK_UNCLEAN_RECORDS))),
            Step(6.0, "kill", ("A",)),
            Step(6.5, "restart", ("B",)),
            Step(7.5, "failover", ("B", "ab")),
            Step(9.0, "restart", ("A",)),
            Step(10.0, "relink", ("A", "ab", "ba", "B")),
        )
        return _classic(name, seed, clusters, "ASYNC", steps, max(phase_s, 13.0),
                        nemeses=("kill", "unclean", "failover", "recover"))
    raise ValueError(f"unknown schedule {name!r} (known: random, {', '.join(CLASSICS)})")


def make_schedule(
    seed: int,
    name: str = "random",
    phase_s: float = 20.0,
    mode: str | None = None,
    clusters: int | None = None,
    plant_bug: str = "",
    operators: bool | None = None,
    link_configs: tuple[tuple[str, str], ...] = (),
) -> Schedule:
    """The schedule a run uses. A planted bug forces the schedule that makes
    it observable (sync-ack-failover). `operators`: force the operator
    nemesis on or off (None: random schedules draw it, classics run without).
    `link_configs`: link policies every link is created with."""
    s = _base_schedule(seed, name, phase_s, mode, clusters, plant_bug, operators)
    if link_configs:
        s = dataclasses.replace(s, link_configs=parse_link_configs(link_configs))
    return s


def parse_link_configs(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """Link policies (NAME, VALUE) checked as create-link checks them, sorted
    by name; ValueError names an unknown policy, a bad value or a repeat."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"link config {key!r} given twice")
        out[key] = value
    try:
        links.parse_policies("", out)
    except ClusterError as exc:
        raise ValueError(str(exc).removeprefix("link '': ")) from None
    return tuple(sorted(out.items()))


def _base_schedule(
    seed: int,
    name: str,
    phase_s: float,
    mode: str | None,
    clusters: int | None,
    plant_bug: str,
    operators: bool | None,
) -> Schedule:
    if plant_bug:
        if plant_bug not in PLANTED_BUGS:
            raise ValueError(f"unknown planted bug {plant_bug!r} (known: {PLANTED_BUGS})")
        s = classic_schedule("sync-ack-failover", seed, phase_s)
        return Schedule(
            s.name,
            s.seed,
            s.clusters,
            s.mode,
            s.links,
            s.steps,
            s.phase_s,
            s.nemeses,
            s.transactional,
            plant_bug,
            s.extra_prefixes,
        )
    if name == "random":
        return random_schedule(seed, phase_s, mode, clusters, operators)
    s = classic_schedule(name, seed, phase_s)
    if operators:
        s = dataclasses.replace(
            s, operators=True, transactional=True, procedure_crashes=procedure_crashes(seed)
        )
    return s
