"""One chaos run: real daemons, fault proxies, workloads, nemesis, judgement.

Phases:
1. setup: start one `linkd` per cluster (temporary directories, 127.0.0.1
   only, short link timeouts), create the namespaces and topics, and make
   each follower create its link to the source through its own FaultProxy;
   wait until every link is FOLLOWING (then IN_SYNC for SYNC schedules).
2. nemesis: the workloads run while the schedule's steps are applied at their
   times (cuts, one-way cuts, flaky, slow, SIGSTOP/SIGCONT, kill -9 and
   restart on the same data dir, failover, recovery, config changes).
3. heal: every proxy healed, every paused daemon continued, every killed one
   restarted; the producers stop.
4. liveness: within `converge_s`, on every live link the follower's high
   watermarks equal the source's, both sides are FOLLOWING or IN_SYNC and the
   two link configurations agree (swapped). Otherwise `converged` is false
   and a "liveness" anomaly says what did not converge.
5. judgement: the final logs are read with a Consumer from every live
   cluster (read_committed too when a transactional producer ran), and the
   simulator's checkers (`sim/checkers.py`) judge the history, the logs and
   the committed offsets sampled on the followers (see `judge`).
6. twin (optional): the final state (offsets, link states) is read, the
   daemons are stopped, and the simulator replays the same schedule and
   history (`chaos/twin.py`); its verdict is reported beside the anomalies.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from admin import AdminClient, Consumer, TopicPartition
from admin.admin_client import FailoverResult
from chaos import judges, security
from chaos.daemons import Daemon, DaemonError
from chaos.judges import Cuts, LinkSnap
from chaos.operators import (
    FAMILIES,
    OperatorNemesis,
    StatusSampler,
    family_topics,
    writable,
)
from chaos.proxy import FaultProxy
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
from chaos.security import client_config
from chaos.twin import AppliedStep, FinalState, RealRun, run_twin
from chaos.workloads import (
    GroupCommitter,
    GrpcProducer,
    KafkaProducer,
    Reader,
    Recorder,
    ReservedProbe,
    TxnProducer,
    Workload,
)
from sim import checkers, follower_metrics
from sim.checkers import (
    FinalLogs,
    OffsetMove,
    OffsetSample,
    StableEnds,
    Truncations,
    Violation,
)
from sim.history import Commit, History, Op, Poll, Send
from sim.store import PartitionStore, StoredBatch

TOPIC = f"{TOPIC_PREFIX}x"
# The run time of a reported cut whose time is not known: after every send.
UNTIMED = 2**62
# A daemon's cut time (its wall clock) in run time is known to within the
# two clocks' rounding: it is taken as this much later, so that a cut made
# just after a send began is never read as made before it.
CUT_CLOCK_SLACK_MS = 100
PARTITIONS = 2
# The group namespace every link replicates (the same prefix as the topic
# namespace), and the group the committer commits in on the leader.
GROUP_PREFIX = TOPIC_PREFIX
GROUP = f"{GROUP_PREFIX}chaos"
OFFSET_SAMPLE_S = 0.1
SETUP_TIMEOUT_S = 40.0
CONVERGE_S = 40.0
GOOD_STATES = ("FOLLOWING", "IN_SYNC")
# Runs with the operator nemesis: the transactional producer's timeout, and how
# long past it a transaction may stay open before it is a hanging one.
TXN_TIMEOUT_MS = 10_000
TXN_BOUND_MS = 5_000
# Records a producer sends to one (cluster, topic) before routing moves on.
ROUTE_RUN = 20


@dataclass
class RunResult:
    seed: int
    schedule: str
    mode: str
    clusters: list[str]
    operations: int
    counts: dict[str, int]
    anomalies: list[dict[str, str]]
    converged: bool
    replay: str
    duration_s: float
    events: list[str] = field(default_factory=list)
    workdir: str = ""
    twin: dict[str, Any] | None = None  # the simulator twin's verdict (chaos/twin.py)
    # What invariants 5 and 6 were judged on: read_committed polls, transactions,
    # offset samples and moves reported by recoveries (and, with the operator
    # nemesis, what invariants 9-12 were judged on).
    checked: dict[str, int] = field(default_factory=dict)
    # The operator nemesis: every move and its outcome, counts, refusal codes.
    operators: dict[str, Any] | None = None
    # The schedule's failovers (none: None): what their answers cut and
    # aborted, and what that cost (`failover_counts`).
    failovers: dict[str, int] | None = None
    # With retention (None: without): the gaps the followers recorded and
    # the partitions `resume-partitions` steps resumed (`retention_counts`).
    retention: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for optional in ("twin", "operators", "failovers", "retention"):
            if out[optional] is None:
                del out[optional]
        return out


def _acknowledged_missing(
    history: History, final: FinalLogs, promoted: str, source: str, answered_ms: int
) -> int:
    """Records `source` acknowledged before a failover of `promoted` answered
    (links keep offsets) that `promoted`'s final log does not hold."""
    missing = 0
    for o in history.sends():
        v = o.value
        if o.type != "ok" or o.cluster != source or not isinstance(v, Send) or v.offset < 0:
            continue
        if o.complete_ms > answered_ms or not v.value:
            continue
        if final.get((promoted, v.topic, v.partition), {}).get(v.offset) != v.value:
            missing += 1
    return missing


@dataclass
class LinkRun:
    name: str
    source: str
    follower: str
    proxy: FaultProxy
    live: bool = True


class ChaosError(RuntimeError):
    pass


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, step_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    event = threading.Event()
    while True:
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() >= deadline:
            raise ChaosError(f"timed out after {timeout_s} s waiting for {what}")
        event.wait(step_s)


def _admin(address: str, timeout_ms: int = 3000) -> AdminClient:
    return AdminClient({**client_config(address), "request.timeout.ms": timeout_ms})


class Run:
    def __init__(
        self,
        schedule: Schedule,
        replay: str,
        workdir: Path | None = None,
        keep: bool = False,
        converge_s: float = CONVERGE_S,
        log: Callable[[str], None] | None = None,
        twin: bool = False,
    ) -> None:
        self.schedule = schedule
        self.operators_on = schedule.operators
        # The twin does not replay operator moves.
        self.twin = twin and not self.operators_on
        self.replay = replay
        self.keep = keep
        self.converge_s = converge_s
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="ccr-chaos-"))
        self.log_fn = log
        self.recorder = Recorder()
        self.stop_workloads = threading.Event()
        self.stop_readers = threading.Event()
        self.daemons: dict[str, Daemon] = {}
        self.links: dict[str, LinkRun] = {}
        self.workloads: list[Workload] = []
        self.readers: dict[str, Reader] = {}
        self.rc_readers: dict[str, Reader] = {}  # read_committed, on followers (invariant 5)
        self.leader = SOURCE
        self.followers: set[str] = set()
        self.unreserved_at: dict[str, int] = {}  # cluster -> ms a failover started there
        self.truncations: Truncations = {}
        self.sync_samples: list[tuple[int, int, str, str]] = []  # (start, end, link, state)
        self.offset_samples: list[OffsetSample] = []  # followers' committed offsets (inv. 6)
        self.offset_moves: list[OffsetMove] = []  # reported by `recover --confirm`
        self.committed_final: FinalLogs | None = None  # final logs read read_committed
        self.offset_sampler = threading.Thread(target=self._sample_offsets, daemon=True)
        self.stable_ends: StableEnds = {}
        self.events: list[str] = []
        self.prefixes = (TOPIC_PREFIX, *schedule.extra_prefixes)
        # For the twin: when each step was applied, when the workloads started,
        # the final heal, and the final state.
        self.applied: list[AppliedStep] = []
        self.workloads_started_ms = 0
        self.healed_ms = (0, 0)
        self.final_state: FinalState | None = None
        # The operator nemesis (chaos/operators.py) and what it needs.
        self.lifecycle = threading.RLock()  # daemon kill/start/pause from two threads
        self.extra_proxies: list[FaultProxy] = []  # links the operators created
        self.cuts: Cuts = {}  # reported truncations as offset ranges (silent_loss)
        # Each reported truncation with when it was made, or at the latest
        # learned (`checkers.cut_since`: only a cut made after a send began
        # excuses its record's loss); a cut whose time is not known counts as
        # made at the end (`UNTIMED`).
        self.cut_events: checkers.CutEvents = {}
        # Ranges a reported cut made uncommitted (it removed their COMMIT): invariant 5.
        self.reopened: checkers.Reopened = {}
        # The schedule's failover steps: their answers' cuts (with when each
        # answered) and counts (`failover_counts`).
        self.failover_cuts: follower_metrics.CutRanges = {}
        self.failover_answers: list[FailoverResult] = []
        # With retention: the followers' recorded gaps (`read_gaps`), the
        # partitions `resume-partitions` steps resumed, each partition's final log start.
        self.gaps: list[dict[str, Any]] = []
        self.partitions_resumed = 0
        self.log_starts: dict[tuple[str, str, int], int] = {}
        # Each one's answer as judged (`judges.check_failover_loss`): the
        # promoted cluster, its link's source, when it began and answered.
        self.failovers_done: list[judges.FailoverAnswer] = []
        # What the failover judge judged (`judge_failovers`), for `checked`.
        self.failover_checked: dict[str, int] = {}
        # (cluster, topic) -> wall ms its creation had answered (the topics
        # the run creates itself), against a failover's `topics_known_at_ms`.
        self.topics_created: dict[tuple[str, str], int] = {}
        self.status: StatusSampler | None = None
        self.operator: OperatorNemesis | None = None
        self.txn_producer: TxnProducer | None = None
        self.t0_wall_ms = int(time.time() * 1000) - self.recorder.now_ms()
        self.final_links: dict[str, dict[str, LinkSnap]] = {}
        self.final_namespaces: dict[str, dict[tuple[str, str], tuple[bool, tuple[str, ...]]]] = {}
        self.provenance: dict[tuple[str, str], dict[str, Any]] = {}
        self.end_offsets: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.end_checked_ms = 0
        self.operator_checked: dict[str, int] = {}
        # Partitions whose final log could not be read to the HW: (c, t, p) -> why.
        self.unreadable: dict[tuple[str, str, int], str] = {}

    # -- logging ------------------------------------------------------------------------

    def note(self, text: str) -> None:
        line = f"[{self.recorder.now_ms() / 1000:6.1f}s] {text}"
        self.events.append(line)
        if self.log_fn is not None:
            self.log_fn(line)

    # -- setup --------------------------------------------------------------------------

    def _flags(self, cluster: str) -> list[str]:
        flags = [
            "--link-session-timeout-ms", str(SESSION_TIMEOUT_MS),
            "--link-replica-lag-time-max-ms", str(REPLICA_LAG_TIME_MAX_MS),
            "--link-lag-max-ms", str(LINK_LAG_MAX_MS),
        ]  # fmt: skip
        if self.schedule.plant_bug and cluster == SOURCE:
            flags += ["--plant-bug", self.schedule.plant_bug]
        if self.schedule.retention_ms:
            flags += ["--log-retention-check-interval-ms", str(RETENTION_CHECK_INTERVAL_MS)]
        return [*flags, *security.current().daemon_args]

    def _topic_configs(self) -> dict[str, int]:
        """The judged topic's configs: retention, when the schedule has it."""
        if not self.schedule.retention_ms:
            return {}
        return {"retention.ms": self.schedule.retention_ms, "segment.ms": SEGMENT_MS}

    def link_credentials(self) -> str:
        """What a link is created with ("" unless the run is secure)."""
        return security.current().link_credentials

    @staticmethod
    def link_address(address: str) -> str:
        """A proxy's address as a link dials it (TLS in secure runs)."""
        return security.current().listener(address)

    def setup(self) -> None:
        s = self.schedule
        if s.secure:
            security.use(security.prepare(self.workdir, s.seed))
            self.note("security on: SASL_SSL listeners, --authorizer acl, link credentials, "
                      "TLS links")  # fmt: skip
        for c in s.clusters:
            self.daemons[c] = Daemon(c, self.workdir, self._flags(c))
        self.note(f"starting {len(self.daemons)} daemons")
        for d in self.daemons.values():
            d.start()
        for d in self.daemons.values():
            d.wait_ready_or_rebind()
        pids = [f"{c} (pid {d.proc.pid if d.proc else 0})" for c, d in self.daemons.items()]
        self.note(f"started {', '.join(pids)}")
        for c in s.clusters:
            with _admin(self.daemons[c].bootstrap, 10000) as admin:
                for prefix in self.prefixes:
                    admin.create_namespace("topic", prefix)
                admin.create_namespace("group", GROUP_PREFIX)
        with _admin(self.daemons[SOURCE].bootstrap, 10000) as admin:
            admin.create_topic(TOPIC, PARTITIONS, configs=self._topic_configs())
            self.topics_created[(SOURCE, TOPIC)] = int(time.time() * 1000)
            for prefix in s.extra_prefixes:
                admin.create_topic(f"{prefix}x", 1)
                self.topics_created[(SOURCE, f"{prefix}x")] = int(time.time() * 1000)
        for i, (name, source, follower) in enumerate(s.links):
            self._create_link(name, source, follower, i)
        for link in self.links.values():
            self._wait_link(link, ("FOLLOWING",), SETUP_TIMEOUT_S)
        if s.mode == "SYNC":
            for link in self.links.values():
                with _admin(self.daemons[link.follower].bootstrap, 10000) as admin:
                    admin.set_link_mode(link.name, "SYNC")
            for link in self.links.values():
                self._wait_link(link, ("IN_SYNC",), SETUP_TIMEOUT_S)
        self.note(f"topology ready: {s.mode} links {', '.join(self.links)}")
        if self.operators_on:
            # Status rounds until the readers stop (through the liveness phase).
            self.status = StatusSampler(self, self.stop_readers)
            self.status.start()
            self.operator = OperatorNemesis(self, s.seed, s.procedure_crashes)
            wait_for("a first status round", lambda: bool(self.status and self.status.rounds),
                     10.0, 0.1)  # fmt: skip

    def _create_link(
        self, name: str, source: str, follower: str, i: int, attach: bool = True
    ) -> LinkRun:
        seed = self.schedule.seed * 100 + i
        proxy = FaultProxy("127.0.0.1", self.daemons[source].port, seed=seed)
        proxy.start_in_thread()
        link = LinkRun(name, source, follower, proxy)
        self.links[name] = link
        with _admin(self.daemons[follower].bootstrap, 10000) as admin:
            admin.create_link(
                name,
                self.link_address(proxy.address),
                credentials=self.link_credentials(),
                configs=dict(self.schedule.link_configs) or None,
            )
            if attach:
                admin.attach_namespace(name, "topic", TOPIC_PREFIX, TOPIC_PREFIX, "remote")
                admin.attach_namespace(name, "group", GROUP_PREFIX, GROUP_PREFIX, "remote")
        self.followers.add(follower)
        return link

    def _link_states(self, link: LinkRun) -> tuple[str, str]:
        with _admin(self.daemons[link.source].bootstrap) as a:
            s1 = a.describe_link(link.name).state
        with _admin(self.daemons[link.follower].bootstrap) as b:
            s2 = b.describe_link(link.name).state
        return s1, s2

    def _wait_link(self, link: LinkRun, states: tuple[str, ...], timeout_s: float) -> None:
        def ok() -> bool:
            a, b = self._link_states(link)
            return a in states and b in states

        wait_for(f"link {link.name} {'/'.join(states)} on both sides", ok, timeout_s)

    # -- workloads ----------------------------------------------------------------------

    def _leader_grpc(self) -> tuple[str, str] | None:
        d = self.daemons.get(self.leader)
        if d is None or d.lost:
            return None
        return (self.leader, d.bootstrap)

    def _leader_kafka(self) -> tuple[str, str] | None:
        d = self.daemons.get(self.leader)
        if d is None or d.lost:
            return None
        return (self.leader, d.kafka_bootstrap)

    def _probe_targets(self) -> list[tuple[str, str]]:
        return [
            (c, self.daemons[c].bootstrap)
            for c in sorted(self.followers)
            if c not in self.unreserved_at and not self.daemons[c].lost
        ]

    # -- routing, for runs with the operator nemesis -----------------------------------------

    def _route(self, n: int, kafka: bool = False) -> tuple[str, str, str, int] | None:
        """The n-th record's (cluster, address, topic, partition): the family
        topics that the latest status round says take writes, ROUTE_RUN
        records to one before moving on."""
        targets = family_topics(self.status.latest() if self.status else None, True)
        targets = [t for t in targets if self._reachable(t[0])]
        if not targets:
            return None
        c, topic, partitions = targets[(n // ROUTE_RUN) % len(targets)]
        d = self.daemons[c]
        return (c, d.kafka_bootstrap if kafka else d.bootstrap, topic, n % partitions)

    def _route_kafka(self, n: int) -> tuple[str, str, str, int] | None:
        return self._route(n, kafka=True)

    def _route_txn(self, n: int) -> tuple[str, str, str, int] | None:
        """Transactions prefer the data topic where it takes writes."""
        targets = family_topics(self.status.latest() if self.status else None, True)
        targets = [t for t in targets if self._reachable(t[0])]
        mine = [t for t in targets if t[1] == TOPIC] or targets
        if not mine:
            return None
        c, topic, partitions = mine[(n // (3 * ROUTE_RUN)) % len(mine)]
        return (c, self.daemons[c].bootstrap, topic, n % partitions)

    def _reachable(self, cluster: str) -> bool:
        d = self.daemons[cluster]
        return not d.lost and d.running and not d.paused

    def _committer_target(self) -> tuple[str, str] | None:
        rnd = self.status.latest() if self.status else None
        if rnd is None:
            return None
        for c, snap in sorted(rnd.clusters.items()):
            if (TOPIC, 0) in snap.partitions and writable(snap, TOPIC) and self._reachable(c):
                return (c, self.daemons[c].bootstrap)
        return None

    def _reserved_targets(self) -> list[tuple[str, str, str]]:
        targets = family_topics(self.status.latest() if self.status else None, False)
        out = [(c, self.daemons[c].bootstrap, t) for c, t, _p in targets if self._reachable(c)]
        return out[:4]

    def start_workloads(self) -> None:
        r, stop = self.recorder, self.stop_workloads
        self.workloads_started_ms = r.now_ms()
        grpc = GrpcProducer("grpc-producer", r, stop, self._leader_grpc, TOPIC, PARTITIONS)
        kafka = KafkaProducer("kafka-producer", r, stop, self._leader_kafka, TOPIC, PARTITIONS)
        probe = ReservedProbe(r, stop, self._probe_targets, TOPIC)
        committer_target = self._committer_target if self.operators_on else self._leader_grpc
        self.workloads = [
            grpc,
            kafka,
            probe,
            GroupCommitter(r, stop, committer_target, GROUP, TOPIC, PARTITIONS),
        ]
        if self.operators_on:
            grpc.route = self._route
            kafka.route = self._route_kafka
            grpc.refusals_fail = kafka.refusals_fail = True
            probe.targets = self._reserved_targets
        if self.schedule.transactional:
            txn = TxnProducer("txn-producer", r, stop, self._leader_grpc, TOPIC, PARTITIONS)
            txn.open_s = self.schedule.txn_open_ms / 1000
            if self.operators_on:
                txn.route = self._route_txn
                txn.txn_timeout_ms = TXN_TIMEOUT_MS
            self.txn_producer = txn
            self.workloads.append(txn)
        for c, d in self.daemons.items():
            role = "source_consumer" if c == SOURCE else "target_consumer"
            reader = Reader(
                f"reader-{c}", r, self.stop_readers, c, d.bootstrap, TOPIC, PARTITIONS, role
            )
            self.readers[c] = reader
            if self.schedule.transactional and c != SOURCE:
                self.rc_readers[c] = Reader(
                    f"reader-{c}-rc", r, self.stop_readers, c, d.bootstrap, TOPIC, PARTITIONS,
                    "target_consumer", read_committed=True,
                )  # fmt: skip
        for reader in self.all_readers():
            reader.reset_earliest = bool(self.schedule.retention_ms)
        for w in [*self.workloads, *self.all_readers()]:
            w.start()
        sampler = threading.Thread(target=self._sample_sync_states, daemon=True)
        sampler.start()
        self.workloads.append(_Joinable(sampler))
        # Offsets are sampled until the readers stop, through the liveness phase.
        self.offset_sampler.start()

    def all_readers(self) -> list[Reader]:
        return [*self.readers.values(), *self.rc_readers.values()]

    def _sampled_followers(self) -> list[str]:
        """Clusters following a live link now, not failed over, up and running
        (with the operator nemesis: whose group namespace follows a link, by
        the latest status round)."""
        if self.operators_on:
            return sorted(c for c in self._group_links() if self._reachable(c))
        out = set()
        for link in list(self.links.values()):
            d = self.daemons[link.follower]
            if (
                link.live
                and link.follower not in self.unreserved_at
                and not d.lost
                and not d.paused
                and d.running
            ):
                out.add(link.follower)
        return sorted(out)

    def _group_links(self) -> dict[str, str]:
        """cluster -> the link its group namespace GROUP_PREFIX follows (latest round)."""
        rnd = self.status.latest() if self.status else None
        out: dict[str, str] = {}
        for c, snap in (rnd.clusters.items() if rnd else ()):
            entry = snap.namespaces.get(("group", GROUP_PREFIX))
            for attachment in entry[1] if entry else ():
                link, _sep, role = attachment.rpartition(":")
                if role == "follower":
                    out[c] = link
        return out

    def offset_group_key(self, cluster: str, group: str, link: str = "") -> str:
        """The group name samples and moves are judged under: with the operator
        nemesis, one series per link the group follows (a follower that
        starts following another source is not moving back)."""
        if not self.operators_on:
            return group
        return f"{group} via {link or self._group_links().get(cluster, '?')}"

    def _sample_offsets(self) -> None:
        """Invariant 6: every OFFSET_SAMPLE_S, each follower's committed offsets
        of GROUP, then (after them) its high watermarks of TOPIC; until the
        readers stop."""
        admins: dict[str, AdminClient] = {}
        try:
            while not self.stop_readers.is_set():
                for c in self._sampled_followers():
                    if c not in admins:
                        admins[c] = _admin(self.daemons[c].bootstrap, 500)
                    a = admins[c]
                    start = self.recorder.now_ms()
                    try:
                        committed = a.list_consumer_group_offsets(GROUP, timeout=0.5)
                        hws = {
                            p.partition: p.high_watermark
                            for p in a.describe_topic(TOPIC, timeout=0.5).partitions
                        }
                    except Exception:
                        continue
                    end = self.recorder.now_ms()
                    key = self.offset_group_key(c, GROUP)
                    for tp in committed:
                        if tp.topic != TOPIC or tp.offset < 0 or tp.partition not in hws:
                            continue
                        self.offset_samples.append(OffsetSample(
                            c, key, tp.topic, tp.partition, tp.offset, hws[tp.partition],
                            start, end,
                        ))  # fmt: skip
                self.stop_readers.wait(OFFSET_SAMPLE_S)
        finally:
            for admin in admins.values():
                admin.close()

    def _sample_sync_states(self) -> None:
        """Samples the SYNC links' states on their sources (for invariant 4)."""
        if self.schedule.mode != "SYNC":
            return
        admins: dict[str, AdminClient] = {}
        try:
            while not self.stop_workloads.is_set():
                for link in list(self.links.values()):
                    d = self.daemons[link.source]
                    if d.lost or not link.live:
                        continue
                    if link.source not in admins:
                        admins[link.source] = _admin(d.bootstrap, 500)
                    start = self.recorder.now_ms()
                    try:
                        state = admins[link.source].describe_link(link.name, timeout=0.5).state
                    except Exception:
                        state = "?"
                    self.sync_samples.append((start, self.recorder.now_ms(), link.name, state))
                self.stop_workloads.wait(0.05)
        finally:
            for a in admins.values():
                a.close()

    # -- nemesis ------------------------------------------------------------------------

    def apply(self, step: Step) -> None:
        begin = self.recorder.now_ms()
        try:
            self._apply(step)
        finally:
            self.applied.append(AppliedStep(step, begin, self.recorder.now_ms()))

    def _apply(self, step: Step) -> None:
        op, args = step.op, step.args
        self.note(f"nemesis: {op} {' '.join(args)}")
        try:
            if op == "cut":
                self.links[args[0]].proxy.cut(args[1])
            elif op == "flaky":
                self.links[args[0]].proxy.flaky("both", float(args[1]))
            elif op == "slow":
                self.links[args[0]].proxy.delay("both", float(args[1]))
            elif op == "heal":
                self.links[args[0]].proxy.heal()
            elif op == "pause":
                with self.lifecycle:
                    self.daemons[args[0]].pause()
            elif op == "resume":
                with self.lifecycle:
                    self.daemons[args[0]].resume()
            elif op == "kill":
                with self.lifecycle:
                    self.daemons[args[0]].kill9()
            elif op == "restart":
                self._restart(args[0])
            elif op == "lose":
                d = self.daemons[args[0]]
                with self.lifecycle:
                    d.kill9()
                    d.lost = True
                for link in self.links.values():
                    if args[0] in (link.source, link.follower):
                        link.live = False
                for reader in (self.readers.get(args[0]), self.rc_readers.get(args[0])):
                    if reader is not None:
                        reader.stop_event = threading.Event()
                        reader.stop_event.set()
            elif op == "attach":
                link = self.links[args[0]]
                with _admin(self.daemons[link.source].bootstrap, 10000) as a:
                    a.attach_namespace(link.name, "topic", args[1], args[1], "local")
            elif op == "detach":
                link = self.links[args[0]]
                with _admin(self.daemons[link.source].bootstrap, 10000) as a:
                    a.detach_namespace(link.name, "topic", args[1])
            elif op == "failover":
                self._failover(args[0], args[1])
            elif op == "resume-partitions":
                self._resume_stopped(args[0])
            elif op == "unclean":
                self._unclean(args[0], int(args[1]))
            elif op == "relink":
                self._relink(args[0], args[1], args[2], args[3])
            else:
                raise ChaosError(f"unknown nemesis step {op!r}")
        except ChaosError:
            raise
        except Exception as exc:
            self.note(f"nemesis: {op} failed: {type(exc).__name__}: {exc}")

    def _unclean(self, cluster: str, records: int) -> None:
        """An emulated unclean leader election on `cluster`: each partition of
        the judged topic loses its last `records` records (at a batch
        boundary) and starts a new leader epoch (ccr-admin fault
        unclean-election)."""
        with _admin(self.daemons[cluster].bootstrap, 10000) as a:
            partitions = next(t for t in a.list_topics() if t.name == TOPIC).partitions
            for p in partitions:
                target = max(p.log_start_offset, p.log_end_offset - records)
                done = a.unclean_election(TOPIC, p.partition, target)
                # A reported truncation: the records it removed are the
                # election's loss, said by the fault's answer, not a silent one.
                key = (cluster, TOPIC, p.partition)
                cut, removed = int(done["log_end_offset"]), int(done["removed_records"])
                if removed:
                    # Nothing removed, nothing to excuse (a cut of no record
                    # would excuse the next one written there).
                    self.truncations.setdefault(key, []).append(cut)
                    self.cuts.setdefault(key, []).append((cut, cut + removed))
                    self._cut_at(key, cut, self.recorder.now_ms(), by_link=False)
                self.note(
                    f"unclean election on {cluster}:{TOPIC}-{p.partition}: removed "
                    f"{done['removed_records']} record(s), epoch {done['leader_epoch']}"
                )

    def _resume_stopped(self, link_name: str) -> None:
        """The operator's answer to partitions stopped at a gap: gap.policy
        continue on the follower (else a partition the source's retention
        passed again while it waited stops again at once), then
        resume-partition for each partition of the link stopped at one."""
        link = self.links[link_name]
        with _admin(self.daemons[link.follower].bootstrap, 10000) as a:
            if a.describe_link(link_name).gap_policy != "continue":
                a.alter_link(link_name, gap_policy="continue")
            stopped = [g for g in a.describe_link(link_name).gaps if g["stopped"]]
            for g in stopped:
                a.resume_partition(link_name, str(g["topic"]), int(g["partition"]))
        self.partitions_resumed += len(stopped)
        self.note(f"resume on {link.follower}: {len(stopped)} partition(s) stopped at a gap")

    def read_gaps(self) -> None:
        """The gaps every live link's follower recorded (for the summary)."""
        for link in self.links.values():
            if not link.live or self.daemons[link.follower].lost:
                continue
            with _admin(self.daemons[link.follower].bootstrap, 10000) as a:
                self.gaps += [g for g in a.describe_link(link.name).gaps if not g["stopped"]]

    def retention_counts(self) -> dict[str, int] | None:
        """With retention: the gaps the followers recorded (what retention
        deleted before they copied it) and the partitions the schedule's
        `resume-partitions` steps found stopped at one."""
        if not self.schedule.retention_ms:
            return None
        return {
            "gaps": len(self.gaps),
            "gap_records": sum(int(g["records"]) for g in self.gaps),
            "partitions_resumed": self.partitions_resumed,
        }

    def _restart(self, cluster: str) -> None:
        with self.lifecycle:
            d = self.daemons[cluster]
            if d.lost or d.running:
                return
            d.start()
            d.wait_ready()

    def restart_daemon(self, cluster: str) -> None:
        """The operator's restart: kill -9, then start on the same data dir."""
        with self.lifecycle:
            d = self.daemons[cluster]
            if d.lost:
                raise ChaosError(f"{cluster} is lost")
            d.kill9()
            d.start()
            d.wait_ready()

    def kill_daemon(self, cluster: str) -> None:
        """kill -9 of a cluster's daemon (`start_daemon` starts it again)."""
        with self.lifecycle:
            d = self.daemons[cluster]
            if d.lost:
                raise ChaosError(f"{cluster} is lost")
            d.kill9()

    def start_daemon(self, cluster: str) -> bool:
        """Starts a killed daemon on its data dir, and waits until it serves.
        False when it was running already: the nemesis, which kills and
        restarts daemons on its own schedule, started it again meanwhile."""
        with self.lifecycle:
            d = self.daemons[cluster]
            started = not d.running
            if started:
                d.start()
            d.wait_ready()
            return started

    def _failover(self, cluster: str, link_name: str) -> None:
        begun = self.unreserved_at[cluster] = self.recorder.now_ms()
        link = self.links[link_name]
        link.live = False
        with _admin(self.daemons[cluster].bootstrap, 15000) as a:
            result = a.failover(link_name, force=True)
        self._record_failover(cluster, link, result, begun)
        self.followers.discard(cluster)
        self.leader = cluster
        since = self.recorder.now_ms()
        try:
            wait_for(
                f"a send acknowledged by {cluster}",
                lambda: self._some_ok_send(cluster, since),
                10.0,
            )
        except ChaosError:
            self.note(f"no send acknowledged by {cluster} within 10 s of its failover")

    def _record_failover(
        self, cluster: str, link: LinkRun, result: FailoverResult, begun: int
    ) -> None:
        """A failover's answer: each cut it names is a reported truncation
        (its records are not lost by the checks; they are counted), and the
        answer is kept for the failover judge, with whether the schedule had
        left its source live (`judges.source_live_at`)."""
        answered = self.recorder.now_ms()
        self.failover_answers.append(result)
        steps = [(a.step.op, a.step.args, a.begin_ms) for a in self.applied]
        live = judges.source_live_at(steps, link.source, link.name, begun)
        self.failovers_done.append(judges.failover_answer(
            result, cluster, link.source, link.name, begun, answered, live
        ))  # fmt: skip
        for row in result.truncated:
            key = (cluster, str(row["topic"]), int(row["partition"]))
            low, removed = int(row["truncate_to"]), int(row["records_removed"])
            self.truncations.setdefault(key, []).append(low)
            self.cuts.setdefault(key, []).append((low, low + max(removed, 1)))
            self.failover_cuts.setdefault(key, []).append((low, low + removed, answered))
            self._cut_at(key, low, answered, by_link=False)
        cut = sum(int(row["records_removed"]) for row in result.truncated)
        self.note(
            f"failover on {cluster}: abandoned {len(result.abandoned)} partition(s), "
            f"aborted {len(result.aborted_transactions)} transaction(s), "
            f"cut {cut} record(s) in {len(result.truncated)} partition(s)"
        )

    def failover_counts(self, final: FinalLogs) -> dict[str, int] | None:
        """What the schedule's failovers cost: the records the source had
        acknowledged before the answer that the promoted cluster's final log
        lacks (lost, by the lag or a cut), records their cuts removed, of
        them records the source had acknowledged without a transaction,
        records readers had read before the cut removed them, transactions
        aborted and partitions abandoned (the three counts of cuts are the
        simulator's metrics of the same names; the two of acknowledged and
        read records are computed by the simulator's own functions)."""
        if not self.failover_answers:
            return None
        history = History(list(self.history_for_checkers()))
        answers = self.failover_answers
        return {
            "failovers": len(answers),
            "failover_acknowledged_lost": sum(
                _acknowledged_missing(history, final, f.promoted, f.source, f.answered_ms)
                for f in self.failovers_done
            ),
            "failover_records_cut": sum(
                int(row["records_removed"]) for r in answers for row in r.truncated
            ),
            "failover_acknowledged_cut": follower_metrics.acknowledged_in_cuts(
                history, self.failover_cuts
            ),
            "consumer_reads_cut_by_failover": follower_metrics.reads_in_cuts(
                history, self.failover_cuts
            ),
            "failover_aborted_transactions": sum(len(r.aborted_transactions) for r in answers),
            "failover_abandoned_partitions": sum(len(r.abandoned) for r in answers),
        }

    def _relink(self, cluster: str, old: str, new: str, source: str) -> None:
        old_link = self.links[old]
        old_link.live = False
        with _admin(self.daemons[cluster].bootstrap, 15000) as a:
            attached = {(m["type"], m["local_prefix"]) for m in a.describe_link(old).mappings}
            for kind, prefix in (("topic", TOPIC_PREFIX), ("group", GROUP_PREFIX)):
                # A mapping the remote's failover already detached (its
                # handshake told this cluster) has nothing left to detach.
                if (kind, prefix) in attached:
                    a.detach_namespace(old, kind, prefix)
        # No attach: `recover --confirm` re-attaches with the remote leading.
        # A cluster that led (a failback) is probed as a follower only once
        # the recovery reserved its namespace.
        was_follower = cluster in self.followers
        link = self._create_link(new, source, cluster, len(self.links), attach=False)
        if not was_follower:
            self.followers.discard(cluster)
        begin = self.recorder.now_ms()
        try:
            with _admin(self.daemons[cluster].bootstrap, 30000) as a:
                report = a.recover_link(
                    new, namespaces=[TOPIC_PREFIX], group_namespaces=[GROUP_PREFIX], confirm=True
                )
        finally:
            recovered = self.recorder.now_ms()
        self.followers.add(cluster)
        for g in report["groups"]:
            self.offset_moves.append(OffsetMove(
                cluster, str(g["group"]), str(g["topic"]), int(g["partition"]),
                int(g["committed_offset"]), int(g["new_offset"]), begin, recovered,
            ))  # fmt: skip
        for p in report["partitions"]:
            if p["truncate_to"] < p["local_log_end_offset"]:
                key = (cluster, str(p["topic"]), int(p["partition"]))
                self.truncations.setdefault(key, []).append(int(p["truncate_to"]))
                self._cut_at(key, int(p["truncate_to"]), recovered, by_link=False)
        totals = report["totals"]
        self.note(
            f"recover --confirm on {cluster} via {new}: {totals['local_records_lost']} "
            f"record(s) cut in {totals['diverged_partitions']} partition(s), "
            f"{totals['offsets_moved']} committed offset(s) moved"
        )
        for reader in (self.readers.get(cluster), self.rc_readers.get(cluster)):
            if reader is not None:
                reader.new_session(from_start=True)
        link.live = True

    def nemesis_phase(self) -> None:
        start = time.monotonic()
        pause = threading.Event()
        operators: threading.Thread | None = None
        if self.operator is not None:
            # Moves until a second before the phase ends (a move in progress finishes).
            operators = threading.Thread(
                target=self.operator.loop,
                args=(self.stop_workloads, start + self.schedule.phase_s - 1.0),
                name="chaos-operators",
                daemon=True,
            )
            operators.start()
        for step in sorted(self.schedule.steps, key=lambda x: x.at_s):
            delay = start + step.at_s - time.monotonic()
            if delay > 0:
                pause.wait(delay)
            self.apply(step)
        rest = start + self.schedule.phase_s - time.monotonic()
        if rest > 0:
            pause.wait(rest)
        if operators is not None:
            operators.join(timeout=90)

    def heal_all(self) -> None:
        begin = self.recorder.now_ms()
        for link in self.links.values():
            link.proxy.heal()
        for proxy in self.extra_proxies:
            proxy.heal()
        for c, d in self.daemons.items():
            if d.lost:
                continue
            with self.lifecycle:
                d.resume()
            if not d.running:
                self._restart(c)
        self.healed_ms = (begin, self.recorder.now_ms())
        self.note("healed: proxies cleared, daemons continued and restarted")

    # -- liveness -----------------------------------------------------------------------

    def _replicated_topics(self, link: LinkRun) -> list[str]:
        with _admin(self.daemons[link.source].bootstrap) as a:
            info = a.describe_link(link.name)
            prefixes = [
                m["local_prefix"] for m in info.mappings
                if m["type"] == "topic" and m["leader"] == "local"
            ]  # fmt: skip
            return [t.name for t in a.list_topics() if any(t.name.startswith(p) for p in prefixes)]

    def _lsos(self, cluster: str) -> list[int]:
        """The data topic's last stable offsets (what read_committed reaches)."""
        with _admin(self.daemons[cluster].bootstrap) as a:
            return [
                a.list_offsets(TOPIC, p, "latest", "read_committed").offset
                for p in range(PARTITIONS)
            ]

    def _hws(self, cluster: str, topic: str) -> list[int]:
        with _admin(self.daemons[cluster].bootstrap) as a:
            return [p.high_watermark for p in a.describe_topic(topic).partitions]

    def convergence_problems(self) -> list[str]:
        problems: list[str] = []
        for link in self.links.values():
            if not link.live:
                continue
            with _admin(self.daemons[link.source].bootstrap) as a:
                mine = a.describe_link(link.name)
            with _admin(self.daemons[link.follower].bootstrap) as b:
                theirs = b.describe_link(link.name)
            for side, info in ((link.source, mine), (link.follower, theirs)):
                if info.state not in GOOD_STATES:
                    problems.append(f"link {link.name} is {info.state} on {side}")
            if mine.mode != theirs.mode:
                problems.append(f"link {link.name}: mode {mine.mode} on {link.source}, "
                                f"{theirs.mode} on {link.follower}")  # fmt: skip
            swap = {"local": "remote", "remote": "local"}
            a_maps = sorted(
                (m["type"], m["local_prefix"], m["remote_prefix"], m["leader"])
                for m in mine.mappings
            )
            b_maps = sorted(
                (m["type"], m["remote_prefix"], m["local_prefix"], swap.get(m["leader"], "?"))
                for m in theirs.mappings
            )
            if a_maps != b_maps:
                problems.append(
                    f"link {link.name}: mappings differ ({link.source}: {a_maps}; "
                    f"{link.follower}, swapped: {b_maps})"
                )
            for topic in self._replicated_topics(link):
                try:
                    follower_hws = self._hws(link.follower, topic)
                except Exception as exc:
                    problems.append(f"{topic} not readable on {link.follower}: {exc}")
                    continue
                source_hws = self._hws(link.source, topic)
                if follower_hws != source_hws:
                    problems.append(
                        f"{topic}: high watermarks {follower_hws} on {link.follower}, "
                        f"{source_hws} on {link.source}"
                    )
        return problems

    def wait_converged(self) -> list[str]:
        """Liveness problems left at the deadline (none: converged). With the
        operator nemesis, configuration differences left then are kept in
        `config_problems` (judged as `config_diverged`)."""
        deadline = time.monotonic() + self.converge_s
        pause = threading.Event()
        problems = ["not checked"]
        self.config_problems: list[str] = []
        while time.monotonic() < deadline:
            config: list[str] = []
            try:
                if self.operators_on:
                    problems, config = self.operator_convergence_problems()
                else:
                    problems = self.convergence_problems()
            except Exception as exc:
                problems = [f"{type(exc).__name__}: {exc}"]
            self.config_problems = config
            if not problems and not config:
                return []
            pause.wait(0.5)
        return problems

    def _live(self) -> list[str]:
        return sorted(c for c, d in self.daemons.items() if not d.lost)

    def read_config(self) -> None:
        """Every link and namespace of every live cluster, as described now."""
        links: dict[str, dict[str, LinkSnap]] = {}
        namespaces: dict[str, dict[tuple[str, str], tuple[bool, tuple[str, ...]]]] = {}
        for c in self._live():
            with _admin(self.daemons[c].bootstrap, 5000) as a:
                links[c] = {info.name: judges.link_snap(info) for info in a.list_links()}
                namespaces[c] = {
                    (ns.type, ns.prefix): (ns.reserved, tuple(ns.attachments))
                    for ns in a.list_namespaces()
                }
        self.final_links, self.final_namespaces = links, namespaces

    def operator_convergence_problems(self) -> tuple[list[str], list[str]]:
        """Invariant 7 and liveness over every link any live cluster holds:
        (liveness problems, configuration differences). Liveness: both sides
        FOLLOWING or IN_SYNC, and every follower topic of every follower
        mapping at its source topic's high watermarks."""
        self.read_config()
        live = self._live()
        hws: dict[str, dict[str, list[int]]] = {}
        for c in live:
            with _admin(self.daemons[c].bootstrap, 5000) as a:
                hws[c] = {
                    t.name: [p.high_watermark for p in t.partitions] for t in a.list_topics()
                }
        problems: list[str] = []
        self.not_converged: set[tuple[str, str]] = set()
        held = judges.held_partitions(self.final_links)
        # A partition its follower holds for its own writes keeps the link
        # from FOLLOWING on both sides by design until `recover`, and the
        # follower's row says so (the source's says its copy is not cut).
        holding = judges.holding_links(self.final_links)
        for c, links in sorted(self.final_links.items()):
            for name, snap in sorted(links.items()):
                if snap.remote not in live:
                    continue
                if snap.state not in GOOD_STATES and (c, name) not in holding:
                    problems.append(f"link {name} is {snap.state} on {c}")
                for rtype, local, remote, leader in snap.mappings:
                    if rtype != "topic" or leader != "remote":
                        continue
                    for topic, source_hws in sorted(hws[snap.remote].items()):
                        if not topic.startswith(remote):
                            continue
                        mine = judges.map_topic(topic, remote, local)
                        if snap.follower_source(mine) != topic:
                            continue  # another (longer) mapping covers it
                        here = hws[c].get(mine)
                        if here != source_hws or snap.state not in GOOD_STATES:
                            self.not_converged.add((c, mine))
                        if here is not None and len(here) == len(source_hws):
                            # Held partitions are not copies until `recover`.
                            pairs = enumerate(zip(here, source_hws, strict=True))
                            here = [s if (c, mine, p) in held else h for p, (h, s) in pairs]
                        if here != source_hws:
                            problems.append(
                                f"{mine} on {c} (link {name}): high watermarks {here}, "
                                f"{source_hws} on {snap.remote}:{topic}"
                            )
        return problems, judges.config_differences(self.final_links, live)

    # -- final logs and judgement ---------------------------------------------------------

    def read_final_logs(self) -> tuple[FinalLogs, list[Violation]]:
        logs: FinalLogs = {}
        problems: list[Violation] = []
        for c, d in self.daemons.items():
            if d.lost:
                continue
            try:
                logs.update(self._final_logs_of(c, d))
            except Exception as exc:
                problems.append(
                    Violation("liveness", f"the final log of {c} could not be read: {exc}")
                )
        if self.operators_on and self.unreadable:
            # A follower whose link is stuck (SYNCING refuses reads) cannot be
            # read to its end: its partitions are not judged, and that is said.
            # A topic with a partition held for this side's own writes stays
            # SYNCING by design until `recover` (its rows say so): not a
            # liveness problem.
            held_topics = {(c, t) for c, t, _p in judges.held_partitions(self.final_links)}
            for key in self.unreadable:
                logs.pop(key, None)
            problems += judges.capped("liveness", [
                f"the final log of {c}:{t}-{p} could not be read to its high watermark "
                f"({why})" for (c, t, p), why in sorted(self.unreadable.items())
                if (c, t) not in held_topics
            ])  # fmt: skip
        return logs, problems

    def _final_logs_of(self, c: str, d: Daemon) -> FinalLogs:
        logs: FinalLogs = {}
        with _admin(d.bootstrap, 10000) as a:
            topics = [t for t in a.list_topics() if self._judged_topic(t.name)]
        for t in topics:
            for p in t.partitions:
                logs[(c, t.name, p.partition)] = self._read_partition(
                    d.bootstrap, t.name, p.partition, p.log_start_offset, p.high_watermark,
                    key=(c, t.name, p.partition),
                )  # fmt: skip
        # Log starts after the reads: retention may have deleted records
        # between the listing and the read (below the later start, a record
        # missing from the read was deleted, not lost).
        with _admin(d.bootstrap, 10000) as a:
            for t in a.list_topics():
                for p in t.partitions:
                    self.log_starts[(c, t.name, p.partition)] = p.log_start_offset
        return logs

    def _judged_topic(self, name: str) -> bool:
        """The topics whose final logs are read: the schedule's prefixes, and,
        with the operator nemesis, every topic of the families (renamed too)."""
        if name.startswith(self.prefixes):
            return True
        return self.operators_on and judges.in_family(name, FAMILIES)

    def read_provenance(self, reopened_only: bool = False) -> None:
        """With the operator nemesis: every judged topic's provenance on every
        live cluster; its `truncated` entries are reported truncations.
        `reopened_only` (no operator nemesis, a transactional producer ran):
        only the transactions a cut made uncommitted (invariant 5)."""
        for c in self._live():
            with _admin(self.daemons[c].bootstrap, 10000) as a:
                names = [t.name for t in a.list_topics() if self._judged_topic(t.name)]
                for name in names:
                    try:
                        prov = a.get_provenance(name)
                    except Exception:
                        continue
                    if not reopened_only:
                        self.provenance[(c, name)] = prov
                    for p in prov["partitions"]:
                        key = (c, name, int(p["partition"]))
                        for e in p["provenance"]:
                            if e["kind"] != "truncated":
                                continue
                            start, removed = int(e["offset"]), int(e["removed_records"])
                            if not reopened_only:
                                self.truncations.setdefault(key, []).append(start)
                                cut = (start, start + max(removed, 1))
                                self.cuts.setdefault(key, []).append(cut)
                                at = int(e.get("at_ms", 0))
                                by_link = e.get("reason") == "diverged"
                                run_ms = at - self.t0_wall_ms + CUT_CLOCK_SLACK_MS
                                self._cut_at(key, start, run_ms if at else UNTIMED, by_link)
                            self.reopened.setdefault(key, []).extend(
                                (int(u["first_offset"]), start) for u in e.get("uncommitted", [])
                            )

    def _cut_at(self, key: tuple[str, str, int], offset: int, at_ms: int, by_link: bool) -> None:
        """A reported truncation of `key` at `offset`, made at `at_ms` (run
        time) or before."""
        self.cut_events.setdefault(key, []).append(checkers.CutEvent(at_ms, offset, by_link))

    def note_reopened(self) -> None:
        """Says which reported cuts removed a transaction's COMMIT (invariant 5
        does not hold their records against the cluster: the cut reported them)."""
        for (c, topic, p), ranges in sorted(self.reopened.items()):
            for first, cut in ranges:
                self.note(
                    f"{c}: the cut of {topic}-{p} at {cut} reported a transaction from "
                    f"offset {first} no longer committed"
                )

    def _end_offsets(self) -> dict[tuple[str, str, int], tuple[int, int]]:
        out: dict[tuple[str, str, int], tuple[int, int]] = {}
        for c in self._live():
            with _admin(self.daemons[c].bootstrap, 5000) as a:
                for t in a.list_topics():
                    for p in t.partitions:
                        out[(c, t.name, p.partition)] = (p.high_watermark, p.last_stable_offset)
        return out

    def read_end_offsets(self) -> None:
        """Invariant 11 at the end: every partition's (HW, LSO) on every live
        cluster, once every transaction begun has had its timeout plus the
        bound (bounded; earlier if every LSO already equals its HW)."""
        begun = self.txn_producer.last_begin_ms if self.txn_producer is not None else {}
        due = max(begun.values(), default=0) + TXN_TIMEOUT_MS + TXN_BOUND_MS + 500
        pause = threading.Event()
        while True:
            try:
                self.end_offsets = self._end_offsets()
            except Exception as exc:
                self.note(f"end offsets not readable: {type(exc).__name__}: {exc}")
            self.end_checked_ms = self.recorder.now_ms()
            settled = all(lso >= hw for hw, lso in self.end_offsets.values())
            if settled or self.end_checked_ms >= due:
                return
            pause.wait(0.5)

    def read_committed_logs(self) -> tuple[FinalLogs, StableEnds, list[Violation]]:
        """Invariant 5: the data topic's final logs as a read_committed reader
        sees them, from log start to the last stable offset, on every live
        cluster."""
        logs: FinalLogs = {}
        stable: StableEnds = {}
        problems: list[Violation] = []
        for c, d in self.daemons.items():
            if d.lost:
                continue
            try:
                with _admin(d.bootstrap, 10000) as a:
                    parts = a.describe_topic(TOPIC).partitions
                    ends = {
                        p.partition: a.list_offsets(
                            TOPIC, p.partition, "latest", "read_committed"
                        ).offset
                        for p in parts
                    }
                for p in parts:
                    key = (c, TOPIC, p.partition)
                    if self.operators_on and key in self.unreadable:
                        continue  # not judged (said in read_final_logs)
                    stable[key] = ends[p.partition]
                    log = self._read_partition(
                        d.bootstrap, TOPIC, p.partition, p.log_start_offset, ends[p.partition],
                        read_committed=True, key=("rc", f"{c}:{TOPIC}", p.partition),
                    )  # fmt: skip
                    if self.operators_on and ("rc", f"{c}:{TOPIC}", p.partition) in (
                        self.unreadable
                    ):
                        del stable[key]
                        continue
                    logs[key] = log
            except Exception as exc:
                if self.operators_on and "UNKNOWN_TOPIC" in str(exc):
                    continue  # an operator deleted it there
                problems.append(
                    Violation("liveness", f"the read_committed log of {c} could not be read: {exc}")
                )
        return logs, stable, problems

    def _read_partition(
        self,
        address: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        read_committed: bool = False,
        key: tuple[str, str, int] | None = None,
    ) -> dict[int, str]:
        """The partition's records from `start` to `end`, bounded: 30 s in
        all, 5 s without progress. A read that stops short is noted in
        `unreadable` under `key` (when given)."""
        out: dict[int, str] = {}
        if end <= start:
            return out
        isolation = "read_committed" if read_committed else "read_uncommitted"
        # A start that retention deleted meanwhile: from the log start (the
        # client's default, "latest", would read nothing at all).
        consumer = Consumer(
            {**client_config(address), "group.id": "chaos-final", "enable.auto.commit": False,
             "isolation.level": isolation, "auto.offset.reset": "earliest"}
        )  # fmt: skip
        here = start
        error = ""
        try:
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + 30
            progress_at = time.monotonic()
            last = start - 1
            while last < end - 1 and time.monotonic() < deadline:
                msgs = consumer.consume(1000, 0.5)
                before = here
                here = consumer.position([TopicPartition(topic, partition)])[0].offset
                if not msgs and here >= end:
                    break
                for m in msgs:
                    off, value = m.offset(), m.value()
                    if m.error() is not None or off is None:
                        error = str(m.error())
                        continue
                    last = max(last, off)
                    if off < end and value is not None:
                        out[off] = value.decode(errors="replace")
                if here > before or any(m.error() is None for m in msgs):
                    progress_at = time.monotonic()
                elif time.monotonic() - progress_at > 5.0:
                    break
        finally:
            consumer.close()
        if key is not None and last < end - 1 and here < end:
            self.unreadable[key] = (
                f"stopped at {max(last + 1, here)} of {end}" + (f": {error}" if error else "")
            )
        return out

    def provenance_start(self, cluster: str, topic: str) -> dict[int, tuple[str, int]]:
        """partition -> (source cluster, start offset) of the current provenance range."""
        out: dict[int, tuple[str, int]] = {}
        with _admin(self.daemons[cluster].bootstrap, 10000) as a:
            prov = a.get_provenance(topic)
        for p in prov["partitions"]:
            entries = p["provenance"]
            # A gap (retention outran the follower) ends nothing: the range
            # copies on from its source, from where the gap ends.
            gaps = 0
            while gaps < len(entries) and entries[-1 - gaps]["kind"] == "gap":
                gaps += 1
            if gaps == len(entries) or entries[-1 - gaps]["kind"] != "start":
                continue
            start = entries[-1 - gaps]
            begins = int(entries[-1]["to_offset"]) if gaps else int(start["offset"])
            out[int(p["partition"])] = (str(start["source_cluster_id"]), begins)
        return out

    def judge(
        self,
        final: FinalLogs,
        committed: FinalLogs | None = None,
        stable: StableEnds | None = None,
    ) -> list[Violation]:
        """Every check on the history and the final logs; `committed` and
        `stable` are the read_committed final logs and their last stable
        offsets (invariant 5; None when no transactional producer ran)."""
        history = History(list(self.history_for_checkers()))
        out: list[Violation] = []
        out += checkers.check_reserved_writes(history)
        kept = History([o for o in history.ops if not self._topic_replaced(o)])
        out += checkers.check_lost_writes(
            kept, final, self.truncations, self._deleted(), cut_events=self.cut_events
        )
        out += checkers.check_duplicates(final)
        # read_committed polls are judged against what read_committed reveals.
        uncommitted = History([o for o in history.ops if not _rc_poll(o)])
        out += checkers.check_consumers(uncommitted, self._without_cuts(final))
        if committed is not None:
            rc = History([o for o in history.ops if _rc_poll(o) or isinstance(o.value, Send)])
            # As for the other readers: an offset a reported cut replaced was
            # not skipped by a reader that had passed it before the cut.
            out += checkers.check_consumers(rc, self._without_cuts(committed))
            out += self.check_transactions(history, final, committed, stable or {})
        out += self.judge_failovers(kept, final)
        if self.operators_on:
            out += self.check_follower_logs_operator(final)
            out += checkers.check_offset_samples(self.offset_samples, self.offset_moves)
            out += self.judge_reports(kept, final)
            return out
        out += self.check_sync_acks(history, final)
        out += self.check_follower_logs(final)
        out += self.check_failed_back(final)
        out += checkers.check_offset_samples(self.offset_samples, self.offset_moves)
        return out

    def check_failed_back(self, final: FinalLogs) -> list[Violation]:
        """"diverged after failback", the simulator's check
        (`checkers.check_recovered_log`) on stores built from the final logs:
        a cluster a `relink` step made follow another holds, below where both
        final logs end, the record its new source holds at each offset: the
        recovery cut its log where their histories part, or it kept records
        of its own that the source holds others at."""
        out: list[Violation] = []
        for a in self.applied:
            if a.step.op != "relink":
                continue
            cluster, _old, new, source = a.step.args
            for (c, topic, p), log in sorted(final.items()):
                theirs = final.get((source, topic, p))
                if c != cluster or not log or not theirs:
                    continue
                both_end = min(max(log), max(theirs)) + 1
                out += checkers.check_recovered_log(
                    cluster, topic, p, _store(log), both_end, source, topic, _store(theirs),
                    f"{cluster}'s failback to {source} (link {new})",
                )  # fmt: skip
        return out

    def _log_start(self, cluster: str, topic: str, partition: int) -> int:
        return self.log_starts.get((cluster, topic, partition), 0)

    def _deleted(self) -> checkers.Deleted:
        """What each cluster deleted itself (retention): the offsets below
        each partition's final log start."""
        return {key: [(0, start)] for key, start in self.log_starts.items() if start > 0}

    def _without_cuts(self, final: FinalLogs) -> FinalLogs:
        """The final logs less the offsets a reported truncation (a failover's
        cut, or with the operator nemesis any) replaced: a reader that had passed such an offset
        (a control marker then) did not skip the record now there."""
        if not self.cuts:
            return final
        out: FinalLogs = {}
        for key, log in final.items():
            ranges = self.cuts.get(key, [])
            out[key] = {o: v for o, v in log.items() if not any(a <= o < b for a, b in ranges)}
        return out

    def _topic_replaced(self, o: Op) -> bool:
        """With the operator nemesis: was the topic of this send deleted after
        it (by a move, or re-created: its topic id changed)? Its final log then
        says nothing about the send."""
        v = o.value
        if not self.operators_on or not isinstance(v, Send):
            return False
        for rec in self.operator.records if self.operator else ():
            m = rec.move
            if (m.kind.value == "delete_topic" and rec.maybe_happened and m.cluster == o.cluster
                    and m.topic == v.topic and rec.end_ms >= o.invoke_ms):  # fmt: skip
                return True
        rounds = self.status.rounds if self.status else []
        after = next((r for r in rounds if r.start_ms >= o.complete_ms), None)
        last = rounds[-1] if rounds else None
        if after is None or last is None:
            return False
        a, z = after.clusters.get(o.cluster), last.clusters.get(o.cluster)
        if a is None or z is None:
            return False
        return a.topic_ids.get(v.topic) != z.topic_ids.get(v.topic)

    def judge_failovers(self, history: History, final: FinalLogs) -> list[Violation]:
        """Invariant 10 at the schedule's failover steps
        (`judges.check_failover_loss`): every record the source acknowledged
        before an answer that the promoted cluster's final log lacks is
        named by that answer, or by a reported cut."""
        if not self.failovers_done:
            return []
        found, counts = judges.check_failover_loss(
            history.ops, self.failovers_done, final, self._live(), self.cuts, self.t0_wall_ms,
            set(self.unreadable), self.topics_created, self._deleted(),
        )  # fmt: skip
        self.failover_checked = {
            "failover_records_judged": counts["failover_records_judged"],
            "failover_records_named": counts["failover_records_named"],
        }
        return found

    def judge_reports(self, history: History, final: FinalLogs) -> list[Violation]:
        """Invariants 9-12 (chaos/judges.py): what the clusters reported, the
        operator's moves, and the final state."""
        rounds = list(self.status.rounds) if self.status else []
        moves = list(self.operator.records) if self.operator else []
        live = self._live()
        out: list[Violation] = []
        lied, claims = judges.check_status_rounds(rounds)
        out += lied
        windows = judges.cut_windows(
            (a.step.op, a.step.args, a.begin_ms) for a in self.applied
        )
        lost, counts = judges.check_silent_loss(
            history.ops, rounds, moves, final, live, self.cuts, self.t0_wall_ms,
            set(self.unreadable), windows, judges.held_partitions(self.final_links),
        )  # fmt: skip
        out += lost
        begun = self.txn_producer.last_begin_ms if self.txn_producer is not None else {}
        out += judges.check_hanging_transactions(
            self.end_offsets, self.end_checked_ms, begun, TXN_TIMEOUT_MS, TXN_BOUND_MS, rounds,
            getattr(self, "not_converged", set()),
        )  # fmt: skip
        missing, effects = judges.check_admin_effects(
            moves, self.final_links, self.final_namespaces, live
        )
        out += missing
        out += judges.check_refusals(moves, rounds)
        errors = [
            f"{rec.move.describe()} at t={rec.begin_ms} ms: {rec.code}: {rec.message}"
            for rec in moves if rec.outcome == "error"
        ]  # fmt: skip
        out += judges.capped("operator_error", errors)
        self.operator_checked = {
            "status_rounds": len(rounds),
            "status_claims": claims,
            "loss_obligations": counts["obligations"],
            "loss_reached": counts["reached"],
            "loss_excused": counts["excused"],
            "end_partitions": len(self.end_offsets),
            "admin_effects": effects,
            "operator_moves": len(moves),
        }
        return out

    def check_follower_logs_operator(self, final: FinalLogs) -> list[Violation]:
        """Invariants 1 and 2 with the operator nemesis: every follower topic
        of every follower mapping in the final configuration, against its
        source topic (renamed or not), from the start of its current
        provenance range when that range names the link's remote."""
        out: list[Violation] = []
        live = set(self._live())
        for (cluster, topic, partition), log in sorted(final.items()):
            for link in self.final_links.get(cluster, {}).values():
                source_topic = link.follower_source(topic)
                if source_topic is None or link.remote not in live:
                    continue
                prov = self.provenance.get((cluster, topic))
                entries: list[dict[str, Any]] = next(
                    (p["provenance"] for p in prov["partitions"] if p["partition"] == partition),
                    [],
                ) if prov else []  # fmt: skip
                if not entries or entries[-1]["kind"] != "start":
                    continue
                if entries[-1]["source_cluster_id"] != link.remote:
                    continue
                start = int(entries[-1]["offset"])
                source_log = final.get((link.remote, source_topic, partition))
                if source_log is None:
                    continue
                follower_hw = max(log) + 1 if log else start
                out += checkers.check_follower_log(
                    cluster, topic, partition, _store(log), follower_hw, link.remote,
                    source_topic, _store(source_log, self._log_start(link.remote, source_topic,
                                                                     partition)), start,
                )  # fmt: skip
                break
        return out

    def check_transactions(
        self, history: History, final: FinalLogs, committed: FinalLogs, stable: StableEnds
    ) -> list[Violation]:
        """Invariant 5: no read_committed poll returned a record of an aborted
        transaction (`check_aborted_reads`); on every live cluster each
        transaction is visible to read_committed readers whole or not at all
        (`check_committed_logs_atomic`); and within one read_committed session
        and partition, once the session has read past a record of a
        transaction it delivered records of, it has delivered that record too
        (`check_transactions_atomic` on a derived history, below)."""
        out = checkers.check_aborted_reads(history, final, committed, stable, self.reopened)
        out += checkers.check_committed_logs_atomic(
            history, final, committed, stable, self.reopened
        )
        found = checkers.check_transactions_atomic(session_transactions(history, final))
        out += [Violation("5 txn atomic", v.detail) for v in found]
        return out

    def history_for_checkers(self) -> list[Op]:
        """The history as recorded, except that a probe write accepted after a
        failover started on its cluster is not counted as a reserved write."""
        ops: list[Op] = []
        if self.operators_on:
            rounds = list(self.status.rounds) if self.status else []
            moves = list(self.operator.records) if self.operator else []
            for o in self.recorder.ops():
                if o.reserved and not judges.reserved_throughout(o, rounds, moves):
                    o = dataclasses.replace(o, reserved=False)
                ops.append(o)
            return ops
        for o in self.recorder.ops():
            started = self.unreserved_at.get(o.cluster)
            if o.reserved and started is not None and o.complete_ms >= started:
                o = dataclasses.replace(o, reserved=False)
            ops.append(o)
        return ops

    def in_sync_at(self, link: str, invoke_ms: int, complete_ms: int) -> bool:
        """Was the link IN_SYNC on its source from before `invoke_ms` until after
        `complete_ms`, by every sample taken in between?"""
        samples = [s for s in self.sync_samples if s[2] == link]
        before = [s for s in samples if s[1] <= invoke_ms]
        after = [s for s in samples if s[0] >= complete_ms]
        if not before or not after:
            return False
        window = [s for s in samples if before[-1][0] <= s[0] <= after[0][0]]
        return all(s[3] == "IN_SYNC" for s in window)

    def check_sync_acks(self, history: History, final: FinalLogs) -> list[Violation]:
        """Invariant 4 through the lost_write checker: every send acknowledged by
        a SYNC link's source while the link was IN_SYNC must be on the follower
        at its offset, so it is checked again as if the follower had
        acknowledged it."""
        if self.schedule.mode != "SYNC":
            return []
        derived = History()
        for o in history.sends():
            if o.type != "ok" or not isinstance(o.value, Send) or o.reserved:
                continue
            for link in self.links.values():
                if link.source == o.cluster and self.in_sync_at(
                    link.name, o.invoke_ms, o.complete_ms
                ):
                    derived.add(dataclasses.replace(
                        o, cluster=link.follower,
                        process=f"{o.process} (acked by {o.cluster} while {link.name} IN_SYNC)",
                    ))  # fmt: skip
        found = checkers.check_lost_writes(
            derived, final, self.truncations, cut_events=self.cut_events
        )
        return [
            Violation(f"4 sync acks / {v.invariant}", v.detail)
            if v.invariant == "lost_write"
            else v
            for v in found
        ]

    def check_follower_logs(self, final: FinalLogs) -> list[Violation]:
        """Invariants 1 and 2 with `check_follower_log`, on stores built from the
        final logs: one single-record batch per data record, its value as data."""
        out: list[Violation] = []
        for link in self.links.values():
            if not link.live:
                continue
            for (cluster, topic, partition), log in sorted(final.items()):
                if cluster != link.follower:
                    continue
                try:
                    ranges = self.provenance_start(cluster, topic)
                except Exception:
                    continue
                src = ranges.get(partition)
                if src is None or src[0] != link.source:
                    continue
                source_log = final.get((link.source, topic, partition))
                if source_log is None:
                    continue
                follower_hw = max(log) + 1 if log else src[1]
                out += checkers.check_follower_log(
                    cluster, topic, partition, _store(log), follower_hw, link.source, topic,
                    _store(source_log, self._log_start(link.source, topic, partition)), src[1],
                )  # fmt: skip
        return out

    # -- the whole run ------------------------------------------------------------------

    def execute(self) -> RunResult:
        started = time.monotonic()
        anomalies: list[Violation] = []
        converged = False
        final_logs: FinalLogs = {}
        try:
            try:
                self.setup()
            except (DaemonError, OSError) as exc:
                raise ChaosError(f"setup: {exc}") from exc
            self.start_workloads()
            wait_for("the first acknowledged send", self._some_ok_send, 20.0)
            self.note("workloads running; nemesis phase")
            self.nemesis_phase()
            self.heal_all()
            self.stop_workloads.set()
            for w in self.workloads:
                w.join(timeout=15)
            problems = self.wait_converged()
            converged = not problems and not self.config_problems
            self.note("converged" if converged else
                      f"NOT converged: {problems + self.config_problems}")  # fmt: skip
            anomalies += [Violation("liveness", p) for p in problems[:5]]
            anomalies += judges.capped("config_diverged", self.config_problems)
            self.note("judging: readers catch up, then the final logs are read and checked")
            if self.operators_on:
                self.read_end_offsets()
            self._let_readers_catch_up()
            self.stop_readers.set()
            for reader in self.all_readers():
                reader.join(timeout=10)
            self.offset_sampler.join(timeout=10)
            if self.status is not None:
                self.status.join(timeout=10)
            final, unreadable = self.read_final_logs()
            final_logs = final
            anomalies += unreadable
            if self.schedule.transactional:
                committed, self.stable_ends, unreadable = self.read_committed_logs()
                self.committed_final = committed
                anomalies += unreadable
            if self.schedule.retention_ms:
                try:
                    self.read_gaps()
                except Exception as exc:
                    anomalies.append(Violation(
                        "liveness", f"the followers' gaps could not be read: "
                        f"{type(exc).__name__}: {exc}"))  # fmt: skip
            try:
                if self.operators_on:
                    self.read_provenance()
                    self.read_config()
                elif self.committed_final is not None:
                    self.read_provenance(reopened_only=True)
                self.note_reopened()
            except Exception as exc:
                anomalies.append(Violation(
                    "liveness", f"the final configuration or provenance could not be read: "
                    f"{type(exc).__name__}: {exc}"))  # fmt: skip
            anomalies += self.judge(final, self.committed_final, self.stable_ends)
            if self.twin:
                self.final_state = self.read_final_state()
        finally:
            self.close()
            security.reset()
        if self.twin:
            self.note("twin: the same schedule in the simulator")
        twin = self.run_twin() if self.twin else None
        ops = self.recorder.ops()
        counts = {t: sum(1 for o in ops if o.type == t) for t in ("ok", "fail", "info")}
        return RunResult(
            seed=self.schedule.seed,
            schedule=self.schedule.name,
            mode=self.schedule.mode,
            clusters=list(self.schedule.clusters),
            operations=len(ops),
            counts=counts,
            anomalies=[v.to_dict() for v in anomalies],
            converged=converged,
            replay=self.replay,
            duration_s=round(time.monotonic() - started, 1),
            events=self.events,
            workdir=str(self.workdir) if self.keep else "",
            twin=twin,
            checked=self.checked(),
            operators=self.operators_summary(),
            failovers=self.failover_counts(final_logs),
            retention=self.retention_counts(),
        )

    def checked(self) -> dict[str, int]:
        """What invariants 5 and 6 were judged on (and 9-12 with the operator nemesis)."""
        ops = self.recorder.ops()
        txns = {o.value.txn for o in ops if isinstance(o.value, Send) and o.value.txn}
        return {
            "read_committed_polls": sum(1 for o in ops if _rc_poll(o)),
            "transactions": len(txns),
            "commits": sum(1 for o in ops if isinstance(o.value, Commit) and o.type == "ok"),
            "offset_samples": len(self.offset_samples),
            "offset_moves": len(self.offset_moves),
            **self.operator_checked,
            **self.failover_checked,
        }

    def operators_summary(self) -> dict[str, Any] | None:
        """The operator nemesis's moves: each with its outcome, counts per kind
        and outcome, and the refusals by error code."""
        if self.operator is None:
            return None
        counts: dict[str, dict[str, int]] = {}
        refusals: dict[str, int] = {}
        for rec in self.operator.records:
            per = counts.setdefault(rec.move.kind.value, {})
            per[rec.outcome] = per.get(rec.outcome, 0) + 1
            if rec.code:
                refusals[rec.code] = refusals.get(rec.code, 0) + 1
        return {
            "moves": [rec.to_json() for rec in self.operator.records],
            "counts": counts,
            "refusals": dict(sorted(refusals.items())),
        }

    # -- the simulator twin ----------------------------------------------------------------

    def read_final_state(self) -> FinalState | None:
        """Log end offsets and high watermarks of the run's topics, and every
        link's state and mode, on every cluster that is not lost."""
        out = FinalState()
        try:
            for c, d in self.daemons.items():
                if d.lost:
                    continue
                with _admin(d.bootstrap, 10000) as a:
                    for t in a.list_topics():
                        if not t.name.startswith(self.prefixes):
                            continue
                        for p in t.partitions:
                            key = (c, t.name, p.partition)
                            out.partitions[key] = (p.log_end_offset, p.high_watermark)
                    for name in sorted(info.name for info in a.list_links()):
                        info = a.describe_link(name)
                        out.links[(name, c)] = (info.state, info.mode)
        except Exception as exc:
            self.note(f"twin: the final state could not be read: {type(exc).__name__}: {exc}")
            return None
        return out

    def run_twin(self) -> dict[str, Any]:
        if self.final_state is None:
            return {"agrees": False, "differences": [], "in_doubt": 0,
                    "error": "the real run's final state could not be read"}  # fmt: skip
        real = RealRun(
            self.schedule,
            self.recorder.ops(),
            list(self.applied),
            self.workloads_started_ms,
            self.healed_ms,
            self.final_state,
            PARTITIONS,
            frozenset(c for c, d in self.daemons.items() if d.lost),
        )
        report = run_twin(real)
        verdict = "agrees" if report["agrees"] else "DIFFERS"
        self.note(
            f"twin: {verdict} ({len(report['differences'])} differences, "
            f"{report['in_doubt']} records in doubt, {report.get('seconds', 0)} s)"
        )
        return report

    def _some_ok_send(self, cluster: str = "", since_ms: int = 0) -> bool:
        return any(
            o.type == "ok"
            and isinstance(o.value, Send)
            and o.invoke_ms >= since_ms
            and (not cluster or o.cluster == cluster)
            for o in self.recorder.ops()
        )

    def _let_readers_catch_up(self) -> None:
        """Bounded: until each live reader's positions reach its cluster's HWs."""

        def caught_up() -> bool:
            for reader in self.all_readers():
                c = reader.cluster
                if self.daemons[c].lost or not reader.is_alive():
                    continue
                slack = 1 if self.schedule.transactional else 0  # a trailing commit marker
                try:
                    hws = self._lsos(c) if reader.read_committed else self._hws(c, TOPIC)
                except Exception:
                    if self.operators_on:
                        continue  # the topic is gone there
                    raise
                if any(reader.positions.get(p, 0) < hw - slack for p, hw in enumerate(hws)):
                    return False
            return True

        try:
            wait_for("readers to catch up", caught_up, 15.0)
        except ChaosError:
            self.note("readers did not all catch up (not an anomaly: reads are checked as seen)")

    def close(self) -> None:
        """Stops what this run started: workloads, daemons (by their PIDs), proxies."""
        self.stop_workloads.set()
        self.stop_readers.set()
        for d in self.daemons.values():
            try:
                d.stop()
            except Exception:
                pass
        for link in self.links.values():
            try:
                link.proxy.stop()
            except Exception:
                pass
        for proxy in self.extra_proxies:
            try:
                proxy.stop()
            except Exception:
                pass
        if self._own_dir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


class _Joinable(Workload):
    """Wraps a plain thread so the runner joins it with the workloads."""

    def __init__(self, thread: threading.Thread) -> None:
        super().__init__("sampler", Recorder(), threading.Event())
        self.thread = thread

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)


def _rc_poll(o: Op) -> bool:
    return isinstance(o.value, Poll) and o.value.read_committed


def session_transactions(history: History, final: FinalLogs) -> History:
    """Invariant 5 within a partition, in the shape `check_transactions_atomic`
    judges: one derived poll per read_committed session, cluster and partition
    (every record the session delivered there), and as that poll's
    transactions, per transaction it delivered a record of, the transaction's
    records in that partition (offsets from the cluster's final log) below the
    furthest offset the session delivered there. A real consumer's polls cut
    fetches anywhere, so "by the end of the poll" becomes "before the
    session's position", which a reader may not pass without the rest of the
    transaction. Records of aborted transactions are `check_aborted_reads`'s."""
    txn_values: dict[str, list[str]] = {}
    for o in history.sends():
        v = o.value
        if isinstance(v, Send) and v.txn and v.value and o.type != "fail":
            txn_values.setdefault(v.txn, []).append(v.value)
    txn_of = {value: txn for txn, values in txn_values.items() for value in values}
    sessions: dict[tuple[str, int, str, str, int], list[tuple[Op, int, str]]] = {}
    for o in history.polls():
        v = o.value
        if o.type != "ok" or not isinstance(v, Poll) or not v.read_committed:
            continue
        for partition, offset, value in v.records:
            key = (o.process, v.session, o.cluster, v.topic, partition)
            sessions.setdefault(key, []).append((o, offset, value))
    derived = History()
    for (process, session, cluster, topic, partition), seen in sorted(
        sessions.items(), key=lambda kv: kv[0]
    ):
        reach = max(offset for _o, offset, _v in seen)
        where = {value: off for off, value in final.get((cluster, topic, partition), {}).items()}
        name = f"{topic}-{partition} on {cluster}, {process} session {session}"
        tag = len(derived.ops)  # values unique per derived poll: one transaction each
        first, last = seen[0][0], seen[-1][0]
        for txn in sorted({txn_of[value] for _o, _off, value in seen if value in txn_of}):
            for value in txn_values[txn]:
                off = where.get(value, -1)
                if 0 <= off < reach:
                    derived.add(Op(
                        "txn-producer", "source_transactional_producer", cluster, "ok",
                        first.invoke_ms, first.invoke_ms,
                        Send(topic, partition, f"{value} @{tag}", off, txn=f"{txn} ({name})"),
                    ))  # fmt: skip
        records = tuple((partition, off, f"{value} @{tag}") for _o, off, value in seen)
        derived.add(Op(process, first.client_class, cluster, "ok", first.invoke_ms,
                       last.complete_ms, Poll(topic, records, session, True)))  # fmt: skip
    return derived


def _store(log: dict[int, str], log_start: int = 0) -> PartitionStore:
    """A store of a final log; `log_start`: the partition's log start as its
    cluster reported it, for a log retention emptied."""
    store = PartitionStore(log_start_offset=min(log) if log else log_start)
    for offset in sorted(log):
        store.batches.append(StoredBatch(offset, offset + 1, log[offset].encode(), 1))
        store.bases.append(offset)
    return store
