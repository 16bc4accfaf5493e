"""The simulator twin of a chaos run: the same schedule, run by the simulator.

A chaos run (chaos/runner.py) drives real daemons; its twin replays the same
story in `sim/` (deterministic, virtual time) and compares where both end:

- the scenario (`to_scenario`): the schedule's clusters as a `hub` topology
  (A leads to every other cluster, the schedule's mode), one topic of the
  run's partition count, the run's short link timeouts, `reset_on_heal` (a
  lifted cut resets the connections it tainted, as the chaos proxy does),
  and every nemesis step at the time the runner really applied it, mapped to
  a simulator fault or operator action (`STEP_MAPPING`);
- the workload: one `script` workload per real client process, sending the
  same records to the same cluster, topic and partition at the same times
  (relative to the start of the workloads), transactions as transactions
  (committed, or aborted when the real one was);
- the comparison (`compare`): per link and cluster that is not lost, whether
  the link exists and its state and mode (exact); per (cluster, topic,
  partition) the final log end offset and high watermark, which may differ by
  at most the records *in doubt* for that partition (`in_doubt`).

The simulator names the star's links `A-B` and its topic namespace `A-`
(topic `A-t0`); the twin maps them to the real `ab`, `orders-`, `orders-x`.
A disagreement is reported beside the run's anomalies, never as one: the
twin checks that the simulator predicts the real system, not an invariant.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from chaos.schedule import (
    LINK_LAG_MAX_MS,
    REPLICA_LAG_TIME_MAX_MS,
    RETENTION_CHECK_INTERVAL_MS,
    SEGMENT_MS,
    SESSION_TIMEOUT_MS,
    SOURCE,
    TOPIC_PREFIX,
    Schedule,
    Step,
)
from linkd.core import replication as rep
from sim import scenario as sc
from sim.history import Op, Send
from sim.workloads import ScriptSend, ScriptSpec
from sim.world import Simulation

# The simulator's names for the star's namespace and topic (hub topology).
SIM_PREFIX = f"{SOURCE}-"
SIM_TOPIC = f"{SIM_PREFIX}t0"
REAL_TOPIC = f"{TOPIC_PREFIX}x"
# The simulated clock starts this long before the real workloads did, so the
# simulated links are FOLLOWING (IN_SYNC for SYNC) when the first record comes,
# as the real run waits for them before starting its workloads.
LEAD_MS = 2_000
# After the simulated run converges, it runs this much longer before its state
# is read, as the real run reads its state after its convergence checks.
SETTLE_MS = 3_000
# In-doubt windows (see `in_doubt`). Steps and sends are timed by one clock
# (the runner's recorder), so a send that completed before a step began was
# processed before it, and one invoked after it ended after it: the margin
# covers only the clock's millisecond truncation and the simulated client's
# 1 ms latency. Replication timing differs between the shells, hence the
# wider window before a replication cut.
WINDOW_MS = 5
REPLICATION_WINDOW_MS = 1_000

# How each nemesis step becomes a simulator fault or action (docs/chaos.md).
STEP_MAPPING: dict[str, str] = {
    "cut": "partition (both) or one_way between the link's two clusters, until its heal",
    "flaky": "loss with the step's probability, both directions, until its heal",
    "slow": "clog with the step's delay, both directions, until its heal",
    "heal": "ends the link's faults (their duration)",
    "pause": "pause (down, every state kept)",
    "resume": "resume",
    "kill": "crash",
    "restart": "restart, when the real daemon was ready again",
    "lose": "crash, permanent",
    "attach": "attach on the source, leader local",
    "detach": "detach on the source",
    "failover": "failover, force",
    "relink": "detach the old link's namespace + create_link (no mapping) + recover",
    "unclean": "unclean_election of each partition of the topic, the step's records",
    "resume-partitions": "alter_link gap_policy continue, then resume_partition for each "
    "partition of the topic, on the follower",
}


@dataclass(frozen=True, slots=True)
class AppliedStep:
    """A step as the runner applied it, in the recorder's milliseconds."""

    step: Step
    begin_ms: int
    end_ms: int


@dataclass(slots=True)
class FinalState:
    """Where a run ended, on every cluster that is not lost."""

    # (cluster, topic, partition) -> (log end offset, high watermark)
    partitions: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)
    # (link, cluster) -> (state, mode)
    links: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": {
                f"{c}:{t}-{p}": list(v) for (c, t, p), v in sorted(self.partitions.items())
            },
            "links": {f"{link}@{c}": list(v) for (link, c), v in sorted(self.links.items())},
        }


@dataclass(slots=True)
class RealRun:
    """What the twin needs of a finished chaos run."""

    schedule: Schedule
    ops: list[Op]
    applied: list[AppliedStep]
    start_ms: int  # when the workloads started
    heal_ms: tuple[int, int]  # the final heal (every proxy, pause and kill undone)
    final: FinalState
    partitions: int = 2
    lost: frozenset[str] = frozenset()


def nominal_run(schedule: Schedule, partitions: int = 2) -> RealRun:
    """A run with no history, its steps at their scheduled times (for translating
    a schedule alone)."""
    applied = [
        AppliedStep(s, round(s.at_s * 1000), round(s.at_s * 1000))
        for s in sorted(schedule.steps, key=lambda x: x.at_s)
    ]
    end = round(schedule.phase_s * 1000)
    lost = frozenset(s.args[0] for s in schedule.steps if s.op == "lose")
    return RealRun(schedule, [], applied, 0, (end, end), FinalState(), partitions, lost)


# -- names -------------------------------------------------------------------------------


def sim_link(schedule: Schedule, real: str) -> str:
    for name, source, follower in schedule.links:
        if name == real:
            return f"{source}-{follower}"
    return real


def real_link(schedule: Schedule, simulated: str) -> str:
    for name, source, follower in schedule.links:
        if simulated == f"{source}-{follower}":
            return name
    return simulated


def sim_name(name: str) -> str:
    """A real topic or prefix, in the simulator."""
    if name == REAL_TOPIC:
        return SIM_TOPIC
    if name == TOPIC_PREFIX:
        return SIM_PREFIX
    return name


def real_name(name: str) -> str:
    if name == SIM_TOPIC:
        return REAL_TOPIC
    if name == SIM_PREFIX:
        return TOPIC_PREFIX
    return name


# -- the scenario ------------------------------------------------------------------------


def _ends(schedule: Schedule, link: str) -> tuple[str, str]:
    for name, source, follower in schedule.links:
        if name == link:
            return source, follower
    raise KeyError(link)


def to_scenario(run: RealRun) -> sc.Scenario:
    """The simulator scenario equivalent to a chaos run (pure)."""
    s = run.schedule

    def v(ms: int) -> int:
        return max(1, ms - run.start_ms + LEAD_MS)

    faults: list[sc.FaultSpec] = []
    actions: list[sc.ActionSpec] = [
        sc.ActionSpec(0, "create_topic", cluster=SOURCE, topic=f"{p}x", partitions=1)
        for p in s.extra_prefixes
    ]
    # Link faults last until their link's heal (or the final heal).
    open_faults: dict[str, list[tuple[int, sc.FaultSpec]]] = {}

    def close(link: str, at: int) -> None:
        for start, f in open_faults.pop(link, []):
            faults.append(_with_duration(f, max(1, at - start)))

    for a in sorted(run.applied, key=lambda x: x.begin_ms):
        op, args = a.step.op, a.step.args
        at = v(a.begin_ms)
        if op in ("cut", "flaky", "slow"):
            source, follower = _ends(s, args[0])
            pending = open_faults.setdefault(args[0], [])
            if op == "cut" and args[1] == "both":
                pending.append((at, sc.FaultSpec(at, "split", (source,), (follower,))))
            elif op == "cut":
                # The proxy's "a->b" is follower -> source.
                frm, to = (follower, source) if args[1] == "a->b" else (source, follower)
                pending.append((at, sc.FaultSpec(at, "one_way", (frm,), (to,))))
            else:
                for frm, to in ((source, follower), (follower, source)):
                    if op == "slow":
                        f = sc.FaultSpec(at, "clog", (frm,), (to,), latency_ms=int(float(args[1])))
                    else:
                        f = sc.FaultSpec(at, "loss", (frm,), (to,), loss=float(args[1]))
                    pending.append((at, f))
        elif op == "heal":
            close(args[0], at)
        elif op in ("pause", "resume"):
            faults.append(sc.FaultSpec(at, op, node=args[0]))
        elif op == "kill":
            faults.append(sc.FaultSpec(at, "crash", node=args[0]))
        elif op == "restart":
            faults.append(sc.FaultSpec(v(a.end_ms), "restart", node=args[0]))
        elif op == "lose":
            faults.append(sc.FaultSpec(at, "crash", node=args[0], permanent=True))
        elif op in ("attach", "detach"):
            source, _follower = _ends(s, args[0])
            pair = (sim_name(args[1]), sim_name(args[1]) if op == "attach" else "")
            leader = "local" if op == "attach" else ""
            actions.append(
                sc.ActionSpec(
                    at,
                    op,
                    cluster=source,
                    link=sim_link(s, args[0]),
                    prefixes=(pair,),
                    leader=leader,
                )
            )
        elif op == "failover":
            actions.append(
                sc.ActionSpec(
                    at, "failover", cluster=args[0], link=sim_link(s, args[1]), force=True
                )
            )
        elif op == "relink":
            cluster, old, new, source = args
            prefix = ((SIM_PREFIX, ""),)
            actions += [
                sc.ActionSpec(
                    at, "detach", cluster=cluster, link=sim_link(s, old), prefixes=prefix
                ),
                sc.ActionSpec(at, "create_link", source=source, target=cluster, link=new),
                sc.ActionSpec(at, "recover", cluster=cluster, link=new, prefixes=prefix),
            ]
        elif op == "unclean":
            faults += [
                sc.FaultSpec(
                    at,
                    "unclean_election",
                    node=args[0],
                    topic=SIM_TOPIC,
                    partition=p,
                    records=int(args[1]),
                )
                for p in range(run.partitions)
            ]
        elif op == "resume-partitions":
            follower = _ends(s, args[0])[1]
            actions.append(
                sc.ActionSpec(
                    at,
                    "alter_link",
                    cluster=follower,
                    link=sim_link(s, args[0]),
                    gap_policy="continue",
                )
            )
            actions += [
                sc.ActionSpec(
                    at,
                    "resume_partition",
                    cluster=follower,
                    link=sim_link(s, args[0]),
                    topic=SIM_TOPIC,
                    partition=p,
                )
                for p in range(run.partitions)
            ]
        else:
            raise ValueError(f"the twin cannot map nemesis step {op!r}")
    heal_begin, heal_end = v(run.heal_ms[0]), v(run.heal_ms[1])
    for link in sorted(open_faults):
        close(link, heal_begin)
    faults.append(sc.FaultSpec(heal_begin, "heal"))
    faults += [sc.FaultSpec(heal_end, "restart", node=c) for c in s.clusters if c not in run.lost]
    scripts = _scripts(run, v)
    last = max([heal_end, *(x.at_ms for script in scripts for x in script.sends)])
    last += s.txn_open_ms  # the last transaction's commit
    policies = dict(s.link_configs)
    retention_check_ms = (
        RETENTION_CHECK_INTERVAL_MS
        if s.retention_ms
        else sc.ClusterSpec().retention_check_interval_ms
    )
    return sc.Scenario(
        name=f"chaos-twin-{s.name}-{s.seed}",
        description=f"the simulator twin of ccr-chaos seed {s.seed} ({s.name}, {s.mode})",
        run=sc.RunSpec(
            duration_ms=last + 1_000,
            liveness_ms=60_000,
            request_timeout_ms=8_000,
            record_bytes=32,
            max_events=2_000_000,
        ),
        topology=sc.TopologySpec(
            "hub",
            tuple(s.clusters),
            s.mode,
            fetch_bound=policies.get("fetch.bound", ""),
            failover_truncation=policies.get("failover.truncation", ""),
            gap_policy=policies.get("gap.policy", ""),
            failback_reconciliation=policies.get("failback.reconciliation", ""),
        ),
        network=sc.NetworkSpec(latency_ms=1, jitter_ms=1, reset_on_heal=True),
        cluster=sc.ClusterSpec(
            session_timeout_ms=SESSION_TIMEOUT_MS,
            lag_max_ms=LINK_LAG_MAX_MS,
            replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
            retention_check_interval_ms=retention_check_ms,
        ),
        namespace=sc.NamespaceSpec(
            topics=1,
            partitions=run.partitions,
            groups=False,
            retention_ms=s.retention_ms,
            segment_ms=SEGMENT_MS if s.retention_ms else 0,
        ),
        faults=tuple(sorted(faults, key=lambda f: f.at_ms)),
        actions=tuple(sorted(actions, key=lambda x: x.at_ms)),
        scripts=tuple(scripts),
    )


def _with_duration(f: sc.FaultSpec, duration_ms: int) -> sc.FaultSpec:
    import dataclasses

    return dataclasses.replace(f, duration_ms=duration_ms)


def _txn_key(o: Op) -> tuple[str, int, str] | None:
    """Records of one real transaction share process, invocation and cluster."""
    if o.client_class != "source_transactional_producer":
        return None
    return (o.process, o.invoke_ms, o.cluster)


def _scripts(run: RealRun, v: Any) -> list[ScriptSpec]:
    by_process: dict[str, list[ScriptSend]] = {}
    for o in sorted(run.ops, key=lambda x: x.invoke_ms):
        value = o.value
        if not isinstance(value, Send) or value.partition < 0 or not value.value:
            continue
        key = _txn_key(o)
        txn = f"{key[0]}-{key[1]}" if key is not None else ""
        by_process.setdefault(o.process, []).append(
            ScriptSend(
                v(o.invoke_ms),
                o.cluster,
                sim_name(value.topic),
                value.partition,
                value.value,
                txn,
                abort=key is not None and o.type == "fail",
                commit_after_ms=run.schedule.txn_open_ms if key is not None else 0,
            )
        )
    return [ScriptSpec(name, tuple(sends)) for name, sends in sorted(by_process.items())]


# -- records in doubt ----------------------------------------------------------------------

# Steps that change whether a client's write lands on its cluster.
_CLUSTER_STEPS = ("pause", "resume", "kill", "restart", "lose")


def _overlaps(o: Op, begin: int, end: int) -> bool:
    return o.invoke_ms <= end and o.complete_ms >= begin


def _link_touched(step: Step, source: str, follower: str, link: str) -> bool:
    """Does the step start or stop replication on this link?"""
    op, args = step.op, step.args
    if op in ("cut", "heal", "flaky", "slow"):
        return args[0] == link
    if op in _CLUSTER_STEPS:
        return args[0] in (source, follower)
    if op == "failover":
        return args[1] == link
    if op == "relink":
        return link in (args[1], args[2])
    return False


def in_doubt(run: RealRun) -> dict[tuple[str, int], int]:
    """Records per (real topic, partition) whose place in the final logs the
    real run cannot pin down (docs/chaos.md, "The twin"):

    1. indefinite: a send that ended `info`, or a record of a transaction that
       ended `fail` or `info` (aborted or unknown: records that reached the
       log stay in it, marked aborted), unless its commit was refused as
       LINK_NOT_IN_SYNC (then every record was delivered and the abort's
       markers written: certain, like an acknowledged send);
    2. at a fault boundary: a send whose [invoke, complete] interval comes
       within WINDOW_MS of a step that changes whether its cluster takes
       writes (pause, resume, kill, restart, lose of that cluster; a failover
       or relink on it or on a link it leads; the final heal, when it
       continues or restarts that cluster);
    3. at a replication cut, only when the schedule fails over or re-points a
       follower (its final log then keeps what it had copied): a send to a
       link's source whose interval comes within REPLICATION_WINDOW_MS before
       (WINDOW_MS after) a step that starts or stops that link's replication.

    A transaction in doubt also counts its control markers (one per
    partition). Followers converge to their sources, so a partition's count
    applies to every cluster that holds it."""
    s = run.schedule
    doubtful: set[int] = set()
    sends = [(i, o) for i, o in enumerate(run.ops) if isinstance(o.value, Send)]
    heal = AppliedStep(Step(0.0, "heal-all"), run.heal_ms[0], run.heal_ms[1])
    promotes = any(a.step.op in ("failover", "relink") for a in run.applied)
    # Clusters the final heal continues or restarts (paused or killed until then).
    stopped: set[str] = set()
    for a in sorted(run.applied, key=lambda x: x.begin_ms):
        if a.step.op in ("pause", "kill"):
            stopped.add(a.step.args[0])
        elif a.step.op in ("resume", "restart", "lose"):
            stopped.discard(a.step.args[0])
    for i, o in sends:
        txn = _txn_key(o) is not None
        # A commit refused as LINK_NOT_IN_SYNC comes after every record was
        # delivered, and the abort that follows wrote its markers: certain.
        refused_commit = txn and o.type == "fail" and "LINK_NOT_IN_SYNC" in o.error
        if o.type == "info" or (txn and o.type == "fail" and not refused_commit):
            doubtful.add(i)
            continue
        if o.type != "ok" and not refused_commit:
            continue  # refused: definitely not written
        for a in [*run.applied, heal]:
            op, args = a.step.op, a.step.args
            hits = (
                (op in _CLUSTER_STEPS and args[0] == o.cluster)
                or (op == "failover" and (args[0] == o.cluster or _leads(s, args[1], o.cluster)))
                or (op == "relink" and o.cluster in (args[0], args[3]))
                or (op == "heal-all" and o.cluster in stopped)
            )
            if hits and _overlaps(o, a.begin_ms - WINDOW_MS, a.end_ms + WINDOW_MS):
                doubtful.add(i)
                break
            if not promotes or op == "heal-all":
                continue
            for link, source, follower in s.links:
                if (
                    source == o.cluster
                    and _link_touched(a.step, source, follower, link)
                    and _overlaps(o, a.begin_ms - REPLICATION_WINDOW_MS, a.end_ms + WINDOW_MS)
                ):
                    doubtful.add(i)
                    break
            if i in doubtful:
                break
    out: dict[tuple[str, int], int] = {}
    markers: set[tuple[tuple[str, int, str], str, int]] = set()
    for i, o in sends:
        if i not in doubtful:
            continue
        value = o.value
        assert isinstance(value, Send)
        key = (value.topic, value.partition)
        out[key] = out.get(key, 0) + 1
        txn_key = _txn_key(o)
        if txn_key is not None and (txn_key, *key) not in markers:
            markers.add((txn_key, *key))
            out[key] += 1
    return dict(sorted(out.items()))


def _leads(schedule: Schedule, link: str, cluster: str) -> bool:
    for name, source, _follower in schedule.links:
        if name == link:
            return source == cluster
    return False


# -- the comparison --------------------------------------------------------------------------


def _fmt(x: tuple[str, str] | None) -> str:
    return "absent" if x is None else f"{x[0]} ({x[1]})"


def compare(
    real: FinalState, simulated: FinalState, doubt: dict[tuple[str, int], int]
) -> list[str]:
    """Differences between two final states: link states exactly; offsets
    beyond the partition's records in doubt (pure)."""
    out: list[str] = []
    for link_key in sorted(set(real.links) | set(simulated.links)):
        r, s = real.links.get(link_key), simulated.links.get(link_key)
        if r != s:
            out.append(f"link {link_key[0]} on {link_key[1]}: real {_fmt(r)}, simulated {_fmt(s)}")
    for key in sorted(set(real.partitions) | set(simulated.partitions)):
        cluster, topic, partition = key
        rp, sp = real.partitions.get(key), simulated.partitions.get(key)
        if rp is None or sp is None:
            where = "simulated" if rp is None else "real"
            out.append(f"{topic}-{partition} on {cluster}: only in the {where} run")
            continue
        allowed = doubt.get((topic, partition), 0)
        for what, a, b in (("log end offset", rp[0], sp[0]), ("high watermark", rp[1], sp[1])):
            if abs(a - b) > allowed:
                out.append(
                    f"{topic}-{partition} on {cluster}: {what} {a} real, {b} simulated "
                    f"(differ by {abs(a - b)}, {allowed} in doubt)"
                )
    return out


def sim_final_state(sim: Simulation, schedule: Schedule, prefixes: Iterable[str]) -> FinalState:
    """The simulated run's final state, under the real run's names."""
    wanted = tuple(sim_name(p) for p in prefixes)
    out = FinalState()
    for cid in sim.cluster_ids:
        if cid in sim.lost_for_good:
            continue
        node = sim.clusters[cid]
        for topic in sorted(node.state.topics):
            if not topic.startswith(wanted):
                continue
            for p, log in enumerate(node.state.topics[topic].partitions):
                out.partitions[(cid, real_name(topic), p)] = (
                    log.log_end_offset,
                    log.high_watermark,
                )
        for name in node.links.names():
            out.links[(real_link(schedule, name), cid)] = (
                node.links.state_name(name),
                node.links.get(name).mode,
            )
    return out


def _links_converged(sim: Simulation) -> bool:
    """The real runner's convergence, on the simulated clusters: on every link
    between live clusters both sides FOLLOWING or IN_SYNC and every follower
    partition at its source's high watermark."""
    if sim.unsettled_links():
        return False
    for _cid, follower, _name, config, source in sim.live_links():
        for m in rep.follower_mappings(config, "topic"):
            for topic in sorted(source.state.topics):
                if not rep.in_prefix(topic, m.remote_prefix):
                    continue
                local = rep.map_name(topic, m.remote_prefix, m.local_prefix)
                if local not in follower.state.topics:
                    return False
                theirs = source.state.topics[topic].partitions
                mine = follower.state.topics[local].partitions
                if [x.high_watermark for x in mine] != [x.high_watermark for x in theirs]:
                    return False
    return True


def settle(sim: Simulation, bound_ms: int = 60_000) -> None:
    """After `Simulation.run`: on until the links converge as the real runner
    demands (bounded), then SETTLE_MS more before the state is read."""
    deadline = sim.queue.now_ms + bound_ms
    while sim.queue.now_ms < deadline and not _links_converged(sim):
        sim.queue.run_until(sim.queue.now_ms + 500)
    sim.queue.run_until(sim.queue.now_ms + SETTLE_MS)


def run_twin(run: RealRun) -> dict[str, Any]:
    """Runs the twin (seeded by the schedule's seed) and compares; never raises
    for a simulator failure (it is reported as `error`)."""
    started = time.monotonic()
    s = run.schedule
    doubt = in_doubt(run)
    report: dict[str, Any] = {
        "agrees": False,
        "differences": [],
        "in_doubt": sum(doubt.values()),
        "in_doubt_by_partition": {f"{t}-{p}": n for (t, p), n in doubt.items()},
    }
    try:
        scenario = to_scenario(run)
        sim = Simulation(scenario, s.seed)
        sim.run()
        settle(sim)
        simulated = sim_final_state(sim, s, (TOPIC_PREFIX, *s.extra_prefixes))
    except Exception as exc:  # the twin must not turn a run into a crash
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["seconds"] = round(time.monotonic() - started, 1)
        return report
    differences = compare(run.final, simulated, doubt)
    report.update(
        agrees=not differences,
        differences=differences,
        partitions=len(run.final.partitions),
        links=len(run.final.links),
        real=run.final.to_json(),
        simulated=simulated.to_json(),
        sim_violations=[v.to_dict() for v in sim.violations],
        sim_trace_digest=sim.queue.digest,
        seconds=round(time.monotonic() - started, 1),
    )
    return report
