"""One simulation run: clusters, links, network, clients, nemesis, checkers.

Theory of operation (TigerBeetle's VOPR, Kafka's RaftEventSimulationTest):
1. Setup at t=0: build the topology graph, create every cluster (a
   `ClusterState` inside a `SimCluster`), the origins' topics, and one link per
   edge through the same operator action a scenario can call later.
2. Safety phase (0 .. duration_ms): workloads run; faults and operator actions
   fire at their times; every tick runs the core's timers (`SimCluster.tick`:
   `timers.tick`); invariant 6 is checked after every follower apply
   and invariants 1-2 before every failover; every acknowledgement records
   its SYNC witnesses (invariant 4).
3. Liveness phase (up to liveness_ms more): clients stop, every grudge and
   clog heals, crashed clusters restart (unless lost for good), and every link
   must reach FOLLOWING (a SYNC link: IN_SYNC) with no lag; if it does not,
   the run fails with "liveness".
4. Final checks: invariants 1, 2, 3, 4, 5, 7 and the anomalies over the
   history and the final logs; then metrics.

Operator actions are the core's procedures (`linkd.core.procedures`):
create_link (create + attach), delete_link, failover, set_mode, attach,
detach, recover (always confirmed) and reverse, step by step. They are
instantaneous (admin calls are not on the data path; reverse's wait for the
remote runs on virtual time) and need the remote reachable where a procedure
calls it (creating a link, describing the remote's partitions, promoting its
namespaces); otherwise the remote learns through handshakes. An edge (or
topology) with mode SYNC is created ASYNC and switched by set_mode on its
follower as soon as the link is FOLLOWING (the core refuses SYNC before), as
an operator would.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from linkd.core import cluster as core
from linkd.core import journal as jr
from linkd.core import lineage, link_admin, plans, procedures, recovery
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import replication as rep
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.link_driver import HANDSHAKE_INTERVAL_MS, DriverSettings
from linkd.core.links import (
    FailoverTruncation,
    LinkConfig,
    LinkLimits,
    LinkMode,
    LinkState,
    MappingType,
    orphans,
)
from linkd.core.namespaces import ResourceType
from linkd.core.provenance import ProvenanceKind
from linkd.core.recovery import GroupCut, PartitionRow, RecoveryPlan
from sim import checkers, judge, seeds, status_checks, topology
from sim import operator_moves as moves
from sim.checkers import Violation
from sim.cluster_node import SimCluster
from sim.connect_driver import WORKER_FAULTS, ConnectMirror
from sim.events import EventQueue
from sim.follower_metrics import LagSampler
from sim.history import History, Op, Send
from sim.metrics import Metrics, recovery_point
from sim.mirror_driver import MirrorDriver, MirrorOptions, build_flow
from sim.nemesis import Nemesis
from sim.network import Network, PathParams
from sim.operators import Operators, SimLinkSecurity
from sim.scenario import ActionKind, ActionSpec, FaultSpec, Scenario
from sim.store import StoredBatch
from sim.workloads import Consumer, Producer, ScriptProducer

PROBE_INTERVAL_MS = 500
# A kill "under load" waits at most this long for the source to acknowledge a write.
KILL_WAIT_MS = 1_000
# A durable procedure's first checkpoint: its plan is journalled, naming the
# namespaces it moves (watched by "one writer at rest").
FIRST_CHECKPOINTS = frozenset({
    f"{plans.REVERSE}:{procedures.REVERSE_STEPS[0]}",
    f"{plans.FAILOVER}:{procedures.FAILOVER_STEPS[0]}",
    f"{plans.RECOVER}:{procedures.RECOVER_STEPS[0]}",
})


class Simulation:
    def __init__(self, scenario: Scenario, seed: int, keep_trace: bool = False) -> None:
        self.scenario = scenario
        self.seed = seed
        run = scenario.run
        # Test only (linkd/core/faults.py): the fix this run undoes, in every
        # cluster of this run and nowhere else.
        self.faults = Faults.undoing(run.undo_fix)
        self.queue = EventQueue(run.max_events, keep_trace)
        self.history = History()
        self.client_latency_ms = run.client_latency_ms
        self.request_timeout_ms = run.request_timeout_ms
        self.record_bytes = run.record_bytes
        n = scenario.network
        self.network = Network(
            seeds.stream(seed, "network"),
            PathParams(n.latency_ms, n.jitter_ms, n.loss, n.bandwidth_bytes_per_ms),
        )
        self.graph = topology.build_graph(
            scenario.topology.kind, list(scenario.topology.clusters), scenario.topology.file
        )
        self.cluster_ids = sorted(str(x) for x in self.graph.nodes)
        c = scenario.cluster
        limits = LinkLimits(
            c.session_timeout_ms, c.lag_max_records, c.lag_max_ms, c.replica_lag_time_max_ms,
            rounds.fetch_silence_ms(scenario.run.fetch_max_wait_ms),
            rounds.fetch_answer_due_ms(scenario.run.fetch_max_wait_ms),
        )
        self.clusters: dict[str, SimCluster] = {}
        for cid in self.cluster_ids:
            node = SimCluster(
                cid,
                self.queue,
                c.disk_bytes_per_ms,
                c.replication_limit_bytes_per_s,
                limits,
                seeds.IdFactory(seed, cid),
                c.retention_check_interval_ms,
                self.faults,
            )
            node.on_truncate = self._make_truncate_hook(cid)
            node.on_delete_below = self._make_delete_hook(cid)
            node.disk.fractional = c.disk_fractional_ms
            self.clusters[cid] = node
        self.link_ids = seeds.IdFactory(seed, "links")
        self.link_security = SimLinkSecurity(
            c.link_sessions, c.link_credentials, seeds.IdFactory(seed, "link keys")
        )
        for node in self.clusters.values():
            node.link_credentials = (c.link_credentials,)
        self.sizes = DriverSettings(
            run.fetch_max_wait_ms, run.fetch_max_bytes, run.partition_max_bytes,
            run.fetch_sessions,
        )  # fmt: skip
        self.ops = Operators(self, self, self.link_ids)
        # Crashes armed at a procedure's checkpoint: (point, target, duration,
        # the cluster and link of the procedure they were armed for, "": any).
        self.crash_points: list[tuple[str, str, int, str, str]] = []
        # Namespaces reversals set out to move ("one writer at rest").
        self.moved: dict[tuple[str, tuple[tuple[str, str], ...]], checkers.MovedNamespace] = {}
        # Of those, the ones a reversal began on while the two halves of its
        # link disagreed on the mapping (a change not yet converged).
        self._found_in_flux: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        # Plans the liveness phase re-ran (again only once another plan finished
        # since: `_finish_plans`), and how many are in flight.
        self._plans_rerun: set[tuple[str, str]] = set()
        # How many plans were journalled when the last re-runs were started.
        self._plans_pending_at_rerun = -1
        # Whether a failover's source was live when its namespaces became
        # writable, until its answer is judged (invariant 10).
        self._failover_live: dict[tuple[str, str], bool] = {}
        self._plans_running = 0
        self.nemesis = Nemesis(
            self.queue, self.network, self.clusters, self.ops, self.logical_bytes,
            scenario.network.reset_on_heal,
        )
        self.move_rng = seeds.stream(seed, "operators")
        self.fault_rng = seeds.stream(seed, "drawn faults")
        # Failovers that answered: (cluster, link id, time, what they reported).
        self.failovers: list[tuple[str, str, int, link_admin.Failover]] = []
        # Per failover (same order): whether its source was up and reachable
        # from the follower then, or lost so recently that the follower could
        # not tell yet (`source_news_current`): a record in flight from such a
        # source is the race a known lag allows; from one lost before, not.
        self.failover_source_live: list[bool] = []
        # (cluster, incarnation, link name) -> when the follower last finished
        # a round of that link (a fetch answer or a push applied).
        self.round_applied_ms: dict[tuple[str, int, str], int] = {}
        # Edges of type mirror: "<target>/<name>" -> the MirrorMaker 2 flow.
        # With [connect] workers: a ConnectMirror (a Connect group running the flow).
        self.mirrors: dict[str, MirrorDriver | ConnectMirror] = {}
        self.offset_watch = checkers.OffsetWatch()
        # (cluster, incarnation, link id) -> what the follower heard of its
        # source's group commits (`offsets_heard`).
        self.heard_offsets: dict[tuple[str, int, str], dict[tuple[str, str, int], int]] = {}
        self.status_watch = status_checks.StatusWatch(c.session_timeout_ms)
        self._status_probed_ms = 0
        self.violations: list[Violation] = []
        self.metrics = Metrics()
        self.truncations: checkers.Truncations = {}
        # Offsets of transactions a confirmed recovery reported it reopened
        # (`transactions_reopened`), per (cluster, topic, partition).
        self.reopened: dict[tuple[str, str, int], set[int]] = {}
        # Where confirmed recoveries reported cutting each partition.
        self.recovery_cuts: dict[tuple[str, str, int], list[int]] = {}
        # Every cut, when and by whom (the link's data path, or not).
        self.cut_events: checkers.CutEvents = {}
        # Offset ranges each cluster deleted itself (retention): not lost.
        self.deleted: checkers.Deleted = {}
        self.producers: list[Producer] = []
        self.consumers: list[Consumer] = []
        self.lost_for_good = self.nemesis.lost_for_good
        # Links settled but for partitions refused with a reported reason.
        # Links the latest convergence check counted as settled while held
        # back only by refusals the link reports (`unsettled_links`): at the
        # end of the run, those of its last check.
        self.held_links: frozenset[str] = frozenset()
        self.paused = self.nemesis.paused
        self.scripts: list[ScriptProducer] = []
        self._removals_ms = 0
        self._state_sampled_ms = 0
        # Called with the time at every link-state sample (each tick and the
        # end); they only read the world (sim/timeline.py records a timeline).
        self.samplers: list[Callable[[int], None]] = []
        self.lag_sampler: LagSampler | None = None
        if scenario.run.lag_sample_ms > 0:
            self.lag_sampler = LagSampler(self, scenario.run.lag_sample_ms)
            self.samplers.append(self.lag_sampler)

    # -- hooks the workloads and drivers call ---------------------------------------------

    def logical_bytes(self, effect: core.AppendBatch) -> int:
        if effect.header.is_control:
            return 64
        return effect.header.record_count * self.record_bytes

    def follower_applied(self, cluster: SimCluster, link_name: str) -> None:
        self.round_applied_ms[(cluster.cluster_id, cluster.incarnation, link_name)] = (
            self.queue.now_ms
        )
        self.offset_watch.observe(cluster.cluster_id, cluster.state, link_name, self.queue.now_ms)

    def offsets_heard(
        self, cluster: SimCluster, link_name: str, offsets: Sequence[msync.GroupOffset]
    ) -> None:
        """A follower heard its source's group commits over a link (a push
        applied, a discovery's answer arrived): the last of each, under the
        follower's names, by process incarnation and link id. A failover's
        groups answer is judged against it (`status_checks.check_failover_groups`)."""
        config = cluster.state.links.configs.get(link_name)
        if config is None:
            return
        groups = rep.follower_mappings(config, "group")
        topics = rep.follower_mappings(config, "topic")
        key = (cluster.cluster_id, cluster.incarnation, config.link_id)
        heard = self.heard_offsets.setdefault(key, {})
        for o in offsets:
            group, topic = msync.map_through(o.group, groups), msync.map_through(o.topic, topics)
            if group is None or topic is None or topic not in cluster.state.topics:
                continue
            if o.partition < len(cluster.state.topics[topic].partitions) and o.offset >= 0:
                heard[(group, topic, o.partition)] = o.offset

    def client_class(self, cluster: SimCluster, kind: str, topic: str, group: str) -> str:
        """The spec section 6 row a client belongs to."""
        ns = cluster.state.namespaces
        follower_topic = any(n.follower_link for n in ns.matching(ResourceType.TOPIC, topic))
        if kind.startswith("producer"):
            side = "target" if follower_topic else "source"
            return f"{side}_{'txn_producer' if kind == 'producer_txn' else 'producer'}"
        if not follower_topic:
            base = "source_consumer"
        elif group and any(n.follower_link for n in ns.matching(ResourceType.GROUP, group)):
            base = "target_consumer_replicated_group"
        else:
            base = "target_consumer"
        return base + ("_commit" if kind == "consumer_commit" else "")

    def _watch_moved(self, cluster: str, link: str) -> None:
        plan = self.clusters[cluster].state.plans.get(link)
        if plan is None:
            return
        peer = self.clusters.get(plan.remote_cluster_id)
        # A plan the peer journalled for this link and has not finished (a
        # reversal from the other side, cut short): the namespaces it names
        # are owed to it, and its re-run in the liveness phase changes who
        # writes them whatever this plan does; they are judged by its own
        # watch (or not at all, if an operator's verb excused them since).
        owed = peer.state.plans.get(link) if peer is not None else None
        owed_names = (
            {(o.resource_type, o.local_prefix) for o in owed.namespaces}
            if owed is not None and owed.remote_cluster_id == cluster else set()
        )
        for n in plan.namespaces:
            if n.reserved_before and plan.procedure != plans.REVERSE:
                # Nobody wrote it here before the plan began: a failover or a
                # recovery cut short leaves it so, which is not its doing.
                continue
            if (n.resource_type, n.remote_prefix) in owed_names:
                continue
            # Who could write it as the plan began: a rolled-back reversal
            # must leave it so ("one writer at rest").
            found = int(checkers.writable(self.clusters[cluster].state, n.resource_type,
                                          n.local_prefix))
            if peer is not None:
                found += checkers.writable(peer.state, n.resource_type, n.remote_prefix)
            moved = checkers.MovedNamespace(
                link, cluster, plan.remote_cluster_id, n.resource_type, n.local_prefix,
                n.remote_prefix, plan.procedure, found,
            )
            pair = tuple(sorted(((cluster, n.local_prefix), (moved.peer, n.remote_prefix))))
            # The namespace is judged by the last procedure that set out to
            # move it: an earlier one's watch of either side (a failover of
            # another link, say) ends here, since this one changes who writes
            # it (a recovery makes it follow, a reversal reserves it).
            self._end_watches({(n.resource_type, c, p) for c, p in pair})
            if plan.procedure == plans.REVERSE and self._mapping_in_flux(
                cluster, link, n.resource_type, n.local_prefix, n.remote_prefix
            ):
                self._found_in_flux.add((n.resource_type, pair))
            self.moved[(n.resource_type, pair)] = moved

    def _mapping_in_flux(
        self, cluster: str, link: str, kind: str, local_prefix: str, remote_prefix: str
    ) -> bool:
        """Whether the two halves of the link disagree on this mapping: a
        change an operator made on one side (an attach, a detach) that the
        link's handshakes have not brought to the other yet. Until they do,
        who can write the namespace on the other side is a passing state."""
        config = self.clusters[cluster].state.links.configs.get(link)
        peer = self.clusters.get(config.remote_cluster_id) if config is not None else None
        if config is None or peer is None:
            return False
        theirs = next(
            (c for c in peer.state.links.configs.values() if c.link_id == config.link_id), None
        )
        if theirs is None:
            return False
        mine = config.mappings.get((MappingType(kind), local_prefix, remote_prefix))
        other = theirs.mappings.get((MappingType(kind), remote_prefix, local_prefix))
        return (mine.version if mine else None) != (other.version if other else None)

    def reversal_rolled_back(self, cluster: str, link: str) -> None:
        """A reversal on `cluster`'s `link` answered rolled back: it undid
        only its own reservations, so "one writer at rest" expects its
        namespaces writable on as many clusters as it found them."""
        for key, m in list(self.moved.items()):
            if (m.cluster, m.link) != (cluster, link):
                continue
            if key in self._found_in_flux or self._mapping_in_flux(
                cluster, link, m.kind, m.prefix, m.peer_prefix
            ):
                # An operator's change of this mapping (an attach, a detach)
                # had not reached the other side when the reversal began or
                # when it rolled back: what it found was a passing state, and
                # that change, converging later, decides who writes it, not
                # the reversal, which undid only its own reservations.
                del self.moved[key]
                continue
            self.moved[key] = dataclasses.replace(m, rolled_back=True)

    def touched(self, cluster: str, link: str = "", prefix: str = "") -> None:
        """An operator verb other than reverse may change who writes: the
        namespaces it may touch are no longer judged by "one writer at rest"
        (an operator may leave a namespace reserved on purpose). `link`: those
        of that link on `cluster`; `prefix`: that namespace on `cluster`;
        neither: every namespace of `cluster`."""
        for key, m in list(self.moved.items()):
            sides = ((m.cluster, m.prefix), (m.peer, m.peer_prefix))
            if prefix:
                hit = (cluster, prefix) in sides
            elif link:
                hit = m.link == link and cluster in (m.cluster, m.peer)
            else:
                hit = cluster in (m.cluster, m.peer)
            if hit:
                del self.moved[key]
        if prefix:
            self._excuse_plans(cluster, {prefix})
        elif link:
            config = self.clusters[cluster].state.links.configs.get(link)
            if config is not None:
                self._excuse_plans(cluster, {m.local_prefix for m in config.mappings.values()})

    def _excuse_plans(self, cluster: str, prefixes: set[str]) -> None:
        """An operator's verb on `cluster` touched names overlapping a
        namespace that a plan still journalled (on `cluster`, or on its peer
        for `cluster`'s side) holds: that plan's re-run may now be refused for
        what the verb did (the overlapping name follows another link; clients
        wrote where the plan would follow), a refusal that names its remedy.
        Every namespace of that plan then leaves "one writer at rest", not
        only the one touched: a plan finishes all its namespaces or none."""
        def overlaps(name: str) -> bool:
            return any(name.startswith(p) or p.startswith(name) for p in prefixes)

        for cid in self.cluster_ids:
            for link, plan in self.clusters[cid].state.plans.plans.items():
                if cid == cluster:
                    hit = any(overlaps(n.local_prefix) for n in plan.namespaces)
                else:
                    hit = plan.remote_cluster_id == cluster and any(
                        overlaps(n.remote_prefix) for n in plan.namespaces
                    )
                if not hit:
                    continue
                for key, m in list(self.moved.items()):
                    if (m.cluster, m.link) == (cid, link):
                        del self.moved[key]

    def _finish_plans(self) -> None:
        """Liveness: a procedure a crash cut short is finished by its
        documented finishing command, run once more on the cluster that
        holds its plan: reverse; failover (forced if the first run was);
        recover, confirmed. One plan may wait for another (a recover whose
        namespaces an unfinished reverse of another link moves is refused
        until that reverse is finished), as an operator finds out: a plan
        left after its re-run is run again once another plan was finished
        since, and not otherwise."""
        pending = {
            (cid, link)
            for cid in self.cluster_ids
            if self.clusters[cid].up
            for link in self.clusters[cid].state.plans.plans
        }
        if pending and not self._plans_running and pending <= self._plans_rerun:
            if len(pending) < self._plans_pending_at_rerun:
                self._plans_rerun -= pending  # another plan finished since: again
        if pending - self._plans_rerun:
            self._plans_pending_at_rerun = len(pending)
        for cid in self.cluster_ids:
            node = self.clusters[cid]
            if not node.up:
                continue
            for link in sorted(node.state.plans.plans):
                if (cid, link) in self._plans_rerun:
                    continue
                self._plans_rerun.add((cid, link))
                self._plans_running += 1
                self.queue.note(f"liveness: {cid} finishes the plan of link {link}")
                self._superseded_by(cid, link)
                self.metrics.add("plans_finished_at_rest", 1)

                def rerun(_report: Any, _error: ClusterError | None) -> None:
                    self._plans_running -= 1

                plan = node.state.plans.plans[link]
                if plan.procedure == plans.FAILOVER:
                    force = bool((plan.detail or {}).get("force", False))
                    self.ops.failover(cid, link, force, self._failover_rerun(cid, link, rerun))
                elif plan.procedure == plans.RECOVER:
                    self.ops.recover(cid, link, [], True, rerun)
                else:
                    self.ops.reverse(cid, link, 0, rerun)

    def _superseded_by(self, cluster: str, link: str) -> None:
        """The plan of `cluster`'s `link`, re-run at rest, sets out again to
        move its namespaces: a watch of another procedure (another link's,
        begun and perhaps rolled back since this plan was cut short) on a
        side it shares ends, as `_watch_moved` ends it when a procedure
        begins. The plan's own watch, if it still has one, stays: what it
        found is as of the plan's first step."""
        plan = self.clusters[cluster].state.plans.get(link)
        if plan is None:
            return
        sides = {(n.resource_type, cluster, n.local_prefix) for n in plan.namespaces}
        sides |= {(n.resource_type, plan.remote_cluster_id, n.remote_prefix)
                  for n in plan.namespaces}  # fmt: skip
        self._end_watches(sides, spare=(cluster, link))

    def _end_watches(
        self, sides: set[tuple[str, str, str]], spare: tuple[str, str] | None = None
    ) -> None:
        """Ends every watch of "one writer at rest" on one of `sides` (each
        (kind, cluster, prefix)), but that of `spare`'s (cluster, link)."""
        for key, m in list(self.moved.items()):
            if (m.cluster, m.link) == spare:
                continue
            if {(m.kind, m.cluster, m.prefix), (m.kind, m.peer, m.peer_prefix)} & sides:
                del self.moved[key]

    def _failover_rerun(self, cid: str, link: str, then: Any) -> Any:
        """A failover re-run answers what the run a crash cut short did: that
        answer is the failover's report (invariant 10)."""
        link_id = self.clusters[cid].state.links.get(link).link_id

        def done(result: Any, error: ClusterError | None) -> None:
            if error is None and isinstance(result, link_admin.Failover) and result.namespaces:
                self.failovers.append((cid, link_id, self.queue.now_ms, result))
                self.failover_source_live.append(self._source_live_at_change(cid, link))
            then(result, error)

        return done

    def _source_live(self, cluster: str, link: str) -> bool:
        """What the follower knows of the source of its link is current now
        (`source_news_current`): the source is up and reachable, or lost so
        recently that the follower cannot have seen it yet."""
        config = self.clusters[cluster].state.links.configs.get(link)
        source = config.remote_cluster_id if config is not None else ""
        return self.source_news_current(cluster, link, source)

    def _source_live_at_change(self, cluster: str, link: str) -> bool:
        """Whether the source was live when the failover made its namespaces
        writable (its checkpoint `failover:make-writable`): a crash there may
        kill the source before the answer."""
        live = self._failover_live.pop((cluster, link), None)
        return self._source_live(cluster, link) if live is None else live

    def arm_crash(
        self, point: str, target: str, duration_ms: int, runner: str = "", link: str = ""
    ) -> None:
        """The next procedure (on `runner`'s `link`; "": any) that reaches
        checkpoint `point` (a `requests.Checkpoint`, e.g.
        "reverse:detach-mappings#1") crashes `target` there ("": the cluster
        running it) for `duration_ms`."""
        self.crash_points.append((point, target, duration_ms, runner, link))

    def disarm_crash(self, runner: str, link: str) -> None:
        """The procedure a crash was armed for ended without reaching it."""
        self.crash_points = [c for c in self.crash_points if (c[3], c[4]) != (runner, link)]

    def checkpoint_reached(self, cluster: str, link: str, point: str) -> None:
        """A procedure on `cluster` reached `point`, its outcome journalled:
        a reversal's plan names the namespaces it moves (watched by the check
        "one writer at rest"), and an armed crash lands here, mid-procedure
        (sim.operators)."""
        if point in FIRST_CHECKPOINTS:
            self._watch_moved(cluster, link)
        if point == f"{plans.FAILOVER}:{procedures.FAILOVER_STEPS[1]}":
            self._failover_live[(cluster, link)] = self._source_live(cluster, link)
        if point == f"{plans.RECOVER}:{procedures.RECOVER_STEPS[1]}":
            # The cut is made and journalled, and this cluster's log named
            # the committed offsets it moved: reported even if the call's
            # answer is lost (a crash from here on).
            plan = self.clusters[cluster].state.plans.get(link)
            if plan is not None and plan.detail is not None and "cut" in plan.detail:
                cut = RecoveryPlan.from_dict(jr.json_object(plan.detail["cut"]))
                self.offsets_moved(cluster, recovery.noted_offsets(cut))
                self.recovery_reported(cluster, cut.partitions)
                self._judge_recovered(cluster, link, cut)
        for i, (armed, target, duration_ms, runner, on_link) in enumerate(self.crash_points):
            if armed != point or (runner and (runner, on_link) != (cluster, link)):
                continue
            del self.crash_points[i]
            who = target or cluster
            if not self.clusters[who].up:
                return
            self.queue.note(f"crash {who} at {cluster}'s checkpoint {point}")
            self.metrics.add("mid_procedure_crashes", 1)
            self.nemesis.crash_for(who, duration_ms)
            return

    def _judge_recovered(self, cluster: str, link: str, cut: RecoveryPlan) -> None:
        """The logs a confirmed recovery just cut hold below their cut what
        the remote holds there ("diverged after failback"), below any cut the
        remote's own log took in the run (it may hold other records there
        since it was described)."""
        remote = self.clusters.get(cut.remote_cluster_id)
        node = self.clusters[cluster]
        if remote is None:
            return
        for row in cut.partitions:
            theirs = remote.state.topics.get(row.remote_topic)
            mine = node.state.topics.get(row.topic)
            if theirs is None or mine is None or row.partition >= len(theirs.partitions):
                continue
            key = (cut.remote_cluster_id, row.remote_topic, row.partition)
            end = min([row.truncate_to, *self.truncations.get(key, [])])
            self.violations += checkers.check_recovered_log(
                cluster,
                row.topic,
                row.partition,
                node.store(row.topic, row.partition),
                end,
                cut.remote_cluster_id,
                row.remote_topic,
                remote.store(row.remote_topic, row.partition),
                f"recover on link {link!r} ({row.reason})",
                mine.config.compact,
            )

    def contract_broken(self, invariant: str, detail: str) -> None:
        """An operator call answered against the contract (sim.operators)."""
        self.violations.append(Violation(invariant, detail))

    def offsets_moved(self, cluster: str, cuts: Sequence[GroupCut]) -> None:
        """A confirmed recovery reported moving these committed offsets."""
        for cut in cuts:
            self.offset_watch.excuse(cluster, cut.group, cut.topic, cut.partition, cut.new_offset)

    def recovery_reported(self, cluster: str, rows: Sequence[PartitionRow]) -> None:
        """A confirmed recovery reported its cuts (the groups past them move
        back, so a consumer reads on from there: `recovery_cuts`) and the
        transactions they reopen: a read_committed reader that passed their
        records while they were aborted here missed them by a reported
        change, not a skip (`reopened`)."""
        for row in rows:
            if row.diverged:
                cuts = self.recovery_cuts.setdefault((cluster, row.topic, row.partition), [])
                cuts.append(row.truncate_to)
            if not row.reopened:
                continue
            log = self.clusters[cluster].state.partition(row.topic, row.partition)
            excused = self.reopened.setdefault((cluster, row.topic, row.partition), set())
            for t in row.reopened:
                for b in log.batches:
                    if (
                        b.producer_id == t.producer_id
                        and not b.is_control
                        and (t.first_offset <= b.base_offset < t.marker_offset)
                    ):
                        excused.update(range(b.base_offset, b.next_offset))

    def topic_deleted(self, cluster: str, topic: str, partitions: int) -> None:
        """An operator deleted a topic: its records are gone by that call, a
        reported loss (as a cut at offset 0 of every partition)."""
        for p in range(partitions):
            self.truncations.setdefault((cluster, topic, p), []).append(0)
            self.cut_events.setdefault((cluster, topic, p), []).append(
                checkers.CutEvent(self.queue.now_ms, 0, False)
            )
        self.offset_watch.forget_topic(cluster, topic)
        self.queue.note(f"topic {topic} deleted on {cluster}")

    def _make_delete_hook(self, cid: str) -> Any:
        def hook(topic: str, partition: int, start: int, end: int) -> None:
            self.deleted.setdefault((cid, topic, partition), []).append((start, end))

        return hook

    def _make_truncate_hook(self, cid: str) -> Any:
        def hook(
            topic: str, partition: int, removed: int, cut: list[StoredBatch], traffic_class: str
        ) -> None:
            node = self.clusters[cid]
            store = node.store(topic, partition)
            # The link's own data path cuts as it replicates (a warning in the
            # log, nobody's answer); every other cut is a command's or a fault's.
            by_link = traffic_class == "replica_write"
            self.cut_events.setdefault((cid, topic, partition), []).append(
                checkers.CutEvent(self.queue.now_ms, store.log_end_offset, by_link)
            )
            follower = any(
                n.follower_link or n.reserved
                for n in node.state.namespaces.matching(ResourceType.TOPIC, topic)
            )
            t = node.state.topics.get(topic)
            entries = t.provenance.get(partition, []) if t is not None else []
            if entries and (entries[-1].kind, entries[-1].reason, entries[-1].offset) == (
                ProvenanceKind.TRUNCATED, "diverged", store.log_end_offset
            ):
                # A cut the data path made for a divergence (not an
                # operator's recover, nor a source gone for good).
                self._judge_divergence(cid, topic, partition, cut)
            self.truncations.setdefault((cid, topic, partition), []).append(store.log_end_offset)
            self.status_watch.cut((cid, topic, partition), self.queue.now_ms, store.log_end_offset)
            name = "records_truncated_by_recovery" if follower else "records_truncated_unclean"
            self.metrics.add(name, removed)
            self.queue.note(f"truncate {cid}:{topic}-{partition} removed {removed}")

        return hook

    def _judge_divergence(
        self, cid: str, topic: str, partition: int, cut: list[StoredBatch]
    ) -> None:
        """`false_divergence` for a follower partition its data path cut."""
        state = self.clusters[cid].state
        link_id = state.topics[topic].provenance[partition][-1].link_id
        configs = [c for c in state.links.configs.values() if c.link_id == link_id]
        mapping = configs[0].mapping_for(topic, "follower") if configs else None
        if mapping is None or configs[0].remote_cluster_id not in self.clusters:
            return
        source = configs[0].remote_cluster_id
        source_topic = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
        node = self.clusters[source]
        t = node.state.topics.get(source_topic)
        if t is None or partition >= len(t.partitions):
            return
        self.violations += checkers.check_false_divergence(
            cid, topic, partition, cut, source, node.store(source_topic, partition),
            t.config.compact, self.history, self.truncations, self.queue.now_ms,
        )  # fmt: skip

    # -- setup -------------------------------------------------------------------------------

    def setup(self) -> None:
        s = self.scenario
        for edge in s.edges:
            p = self.network.params(edge.source, edge.target)
            override = {
                k: getattr(edge, k)
                for k in ("latency_ms", "jitter_ms", "loss", "bandwidth_bytes_per_ms")
                if getattr(edge, k) is not None
            }
            params = dataclasses.replace(p, **override)
            self.network.set_path(edge.source, edge.target, params)
            self.network.set_path(edge.target, edge.source, params)
        for origin in topology.origins(self.graph):
            node = self.clusters[origin]
            for i in range(s.namespace.topics):
                name = f"{topology.prefix_of(origin)}t{i}"
                _t, effects = node.state.create_topic(
                    name, s.namespace.partitions, s.namespace.topic_configs(), node.topic_ids()
                )
                node.execute(effects, "metadata", self.logical_bytes)
        for (u, v), mappings in sorted(
            topology.edge_mappings(self.graph, s.namespace.groups).items()
        ):
            if self.edge_type(u, v) == "mirror":
                self.create_mirror(u, v, f"{u}-{v}")
                continue
            prefixes = tuple(sorted({(m.local_prefix, m.remote_prefix) for m in mappings}))
            self.ops.counting = False  # the topology, not an operator's action
            self.create_link(u, v, f"{u}-{v}", prefixes, with_groups=s.namespace.groups)
            self.ops.counting = True
            if self.edge_mode(u, v) == LinkMode.SYNC:
                self._switch_to_sync_when_following(v, f"{u}-{v}")
        for i, spec in enumerate(s.producers):
            producer = Producer(
                spec,
                self,
                seeds.stream(self.seed, "workload", str(i), spec.name),
                s.run.duration_ms,
            )
            self.producers.append(producer)
            producer.start()
        for cspec in s.consumers:
            consumer = Consumer(cspec, self, s.run.duration_ms)
            self.consumers.append(consumer)
            consumer.start()
        for sspec in s.scripts:
            script = ScriptProducer(sspec, self, self.paused.__contains__)
            self.scripts.append(script)
            script.start()
        for fault in s.faults:
            if fault.kind in WORKER_FAULTS:
                self.queue.at(
                    fault.at_ms, f"fault {fault.kind}", functools.partial(self.worker_fault, fault)
                )
                continue
            self.queue.at(
                fault.at_ms, f"fault {fault.kind}", functools.partial(self.nemesis.fault, fault)
            )
        for action in s.actions:
            self.queue.at(
                action.at_ms, f"action {action.kind}", functools.partial(self.action, action)
            )
        ops = s.operators
        if ops.interval_ms:
            self.queue.at(ops.start_ms, "operator move", self._draw_move)
        if ops.fault_interval_ms:
            self.nemesis.draw_from(ops, self.fault_rng, self.metrics, self._operators_stop_ms)
        self.queue.at(0, "tick", self.tick)

    # -- drawn operator moves and faults (the [operators] table) ---------------------------

    def _operators_stop_ms(self) -> int:
        ops = self.scenario.operators
        return ops.stop_ms if ops.stop_ms >= 0 else self.scenario.run.duration_ms - 2_000

    def operator_view(self) -> moves.View:
        """What an operator sees: every cluster's links (each once, from the
        cluster that created it), topics and namespaces."""
        links: dict[str, moves.LinkView] = {}
        topics: dict[str, tuple[tuple[str, int], ...]] = {}
        namespaces: dict[str, tuple[tuple[str, str, bool], ...]] = {}
        for cid in self.cluster_ids:
            state = self.clusters[cid].state
            topics[cid] = tuple(
                (n, len(t.partitions)) for n, t in sorted(state.topics.items())
                if not n.startswith("_")
            )
            namespaces[cid] = tuple(
                (ns.type.label, ns.prefix, ns.reserved) for ns in state.namespaces.list()
            )
            for name in state.links.names():
                config = state.links.get(name)
                if config.link_id in links and config.connection_direction != "local_dials":
                    continue
                links[config.link_id] = moves.LinkView(
                    name,
                    cid,
                    config.remote_cluster_id,
                    tuple(
                        moves.MappingView(
                            m.resource_type, m.local_prefix, m.remote_prefix, m.leader
                        )
                        for m in config.attached_mappings()
                        if m.resource_type in (MappingType.TOPIC, MappingType.GROUP)
                    ),
                )
        return moves.View(
            tuple(self.cluster_ids),
            frozenset(c for c in self.cluster_ids if self.clusters[c].up),
            tuple(links[k] for k in sorted(links)),
            topics,
            namespaces,
            tuple(
                sorted(
                    {topology.prefix_of(o) for o in topology.origins(self.graph)}
                    | {p.spec.topic for p in self.producers if p.spec.roam}
                )
            ),
            credentials=bool(self.link_security.credentials),
        )

    def _draw_move(self) -> None:
        ops = self.scenario.operators
        if self.queue.now_ms >= self._operators_stop_ms():
            return
        move = moves.draw_move(self.move_rng, self.operator_view())
        if move is not None:
            self.queue.note(f"move {move.describe()}")
            self.metrics.add(f"moves_{move.kind.value}", 1)
            self.do_move(move)
        gap = max(1, round(self.move_rng.expovariate(1 / ops.interval_ms)))
        self.queue.after(gap, "operator move", self._draw_move)

    def do_move(self, m: moves.Move) -> None:
        """An operator's move, carried out with the core's procedures."""
        o, k = self.ops, moves.MoveKind
        if m.kind in (k.ATTACH, k.DETACH, k.SET_RESERVED, k.RELEASE_REATTACH):
            # A release-reattach is a detach, a set-reserved off and an attach.
            self.touched(m.cluster, prefix=m.local_prefix)
            config = self.clusters[m.cluster].state.links.configs.get(m.link)
            if m.kind in (k.ATTACH, k.DETACH) and config is not None:
                # The mapping converges to the remote's half of the link: the
                # remote's namespace starts or stops following (or leading).
                current = config.attached_at(m.resource_type, m.local_prefix)
                remote = m.remote_prefix or (current.remote_prefix if current else "")
                if remote:
                    self.touched(config.remote_cluster_id, prefix=remote)
        elif m.kind is k.MANUAL_REVERSE:
            self.touched(m.cluster, prefix=m.local_prefix)
            config = self.clusters[m.cluster].state.links.configs.get(m.link)
            if config is not None:
                self.touched(config.remote_cluster_id, prefix=m.remote_prefix)
        elif m.kind in (k.FAILOVER, k.RECOVER, k.DELETE_LINK):
            self.touched(m.cluster, link=m.link)
        if m.crash_point:
            peer = self.clusters[m.cluster].state.links.configs.get(m.link)
            target = peer.remote_cluster_id if peer is not None and m.crash_peer else ""
            down_ms = 1_000 + self.move_rng.randrange(4_000)
            self.arm_crash(m.crash_point, target, down_ms, m.cluster, m.link)
        if m.kind is k.CREATE_LINK:
            o.create_link(m.cluster, m.link, m.peer, remote_dials=m.remote_dials)
        elif m.kind is k.DELETE_LINK:
            self.delete_link(m.cluster, m.link)
        elif m.kind is k.ATTACH:
            o.attach(m.cluster, m.link, m.local_prefix, m.remote_prefix, m.leader,
                     m.resource_type)
        elif m.kind is k.DETACH:
            o.detach(m.cluster, m.link, m.local_prefix, m.resource_type)
        elif m.kind is k.SET_RESERVED:
            o.set_reserved(m.cluster, m.resource_type, m.local_prefix, m.reserved)
        elif m.kind is k.MANUAL_REVERSE:
            if m.link in self.clusters[m.cluster].links.configs:
                o.manual_reverse(m.cluster, m.link, m.resource_type, m.local_prefix,
                                 m.remote_prefix, m.wait, self._touched_again(m))
        elif m.kind is k.REVERSE:
            o.reverse(m.cluster, m.link, 0, lambda _r, _e: self.disarm_crash(m.cluster, m.link))
        elif m.kind is k.SET_MODE:
            o.set_mode(m.cluster, m.link, m.mode)
        elif m.kind is k.FAILOVER and m.kill_source:
            self.metrics.add("moves_failover_after_kill", 1)
            self._kill_then_failover(m, 1_000 + self.move_rng.randrange(4_000))
        elif m.kind is k.FAILOVER:
            self.failover(
                m.cluster, m.link, m.force, False, lambda: self.disarm_crash(m.cluster, m.link)
            )
        elif m.kind is k.RECOVER:
            requested: list[tuple[str, str, str | None]] = (
                [("topic", m.local_prefix, None)] if m.local_prefix else []
            )
            o.recover(
                m.cluster, m.link, requested, m.confirm,
                lambda _r, _e: self.disarm_crash(m.cluster, m.link),
            )
        elif m.kind is k.CREATE_TOPIC:
            o.create_topic(m.cluster, m.topic, m.partitions)
        elif m.kind is k.DELETE_TOPIC:
            o.delete_topic(m.cluster, m.topic)
        elif m.kind is k.ADD_PARTITIONS:
            o.add_partitions(m.cluster, m.topic, m.partitions)
        elif m.kind is k.RESTART:
            self.nemesis.crash_for(m.cluster, 1_000 + self.move_rng.randrange(4_000))
        elif m.kind is k.RELEASE_REATTACH:
            if m.link in self.clusters[m.cluster].links.configs:
                o.release_reattach(m.cluster, m.link, m.local_prefix, m.remote_prefix, m.hold_ms,
                                   self._touched_again(m))
        elif m.kind is k.ROTATE_CREDENTIAL:
            o.rotate_credential(m.cluster, m.hold_ms)
        elif m.kind is k.STORAGE_REFUSAL:
            self.clusters[m.cluster].refuse_storage(self.queue.now_ms + m.hold_ms)

    def _touched_again(self, m: moves.Move) -> Any:
        """A move of several verbs (a release-reattach, a manual reversal)
        changes who writes its namespace until its last verb: a reversal
        whose plan began meanwhile counted a passing state as what it found
        ("one writer at rest" after a rollback), so the namespace leaves the
        check again when the move ends, whatever its outcome."""
        config = self.clusters[m.cluster].state.links.configs.get(m.link)
        peer = config.remote_cluster_id if config is not None else ""

        def done(_result: Any, _error: ClusterError | None) -> None:
            self.touched(m.cluster, prefix=m.local_prefix)
            if m.kind is moves.MoveKind.MANUAL_REVERSE and peer:
                self.touched(peer, prefix=m.remote_prefix)

        return done

    def _kill_then_failover(self, m: moves.Move, down_ms: int) -> None:
        """kill -9 of the source under load: right after it acknowledges its
        next write (or after KILL_WAIT_MS, if none comes), then the failover
        `m.delay_ms` later."""
        done: list[bool] = []

        def kill() -> None:
            if done:
                return
            done.append(True)
            self.nemesis.crash_for(m.peer, down_ms)
            self.queue.after(
                m.delay_ms,
                "failover after the kill",
                lambda: self.failover(m.cluster, m.link, m.force, False),
            )

        def acked_there(op: Op) -> bool:
            return op.type == "ok" and op.cluster == m.peer and isinstance(op.value, Send)

        def soon() -> None:
            self.queue.after(0, "kill after an ack", kill)

        self.history.watch(acked_there, soon)
        self.queue.after(KILL_WAIT_MS, "kill (no write acknowledged)", kill)

    # -- operator actions (the core's procedures: sim.operators) ------------------------------

    def action(self, a: ActionSpec) -> None:
        """A scenario's operator action: the verb of `sim.operators`, whose
        outcome (done or refused) is counted and noted when it ends."""
        ops = self.ops
        by_link = (
            ActionKind.FAILOVER, ActionKind.DELETE_LINK, ActionKind.RECOVER,
            ActionKind.MANUAL_REVERSE,
        )
        if a.kind in by_link:
            self.touched(a.cluster, link=a.link)
        elif a.kind in (ActionKind.ATTACH, ActionKind.DETACH, ActionKind.SET_RESERVED):
            for local, _remote in a.prefixes:
                self.touched(a.cluster, prefix=local)
        elif a.kind == ActionKind.RELINK:
            self.touched(a.cluster)
        if a.kind == ActionKind.CRASH_AT:
            self.arm_crash(a.point, a.cluster, a.down_ms)
        elif a.kind == ActionKind.FAILOVER:
            self.failover(a.cluster, a.link, a.force, a.bump_leader_epoch)
        elif a.kind == ActionKind.DELETE_LINK:
            self.delete_link(a.cluster, a.link)
        elif a.kind == ActionKind.CREATE_LINK:
            self.create_link(
                a.source, a.target, a.link or f"{a.source}-{a.target}", a.prefixes,
                self.scenario.namespace.groups,
            )
        elif a.kind == ActionKind.SET_MODE:
            ops.set_mode(a.cluster, a.link, a.mode)
        elif a.kind == ActionKind.CREATE_TOPIC:
            ops.create_topic(a.cluster, a.topic, a.partitions)
        elif a.kind == ActionKind.DELETE_TOPIC:
            ops.delete_topic(a.cluster, a.topic)
        elif a.kind == ActionKind.ATTACH:
            for local, remote in a.prefixes:
                ops.attach(a.cluster, a.link, local, remote, a.leader)
        elif a.kind == ActionKind.DETACH:
            for local, _remote in a.prefixes:
                ops.detach(a.cluster, a.link, local)
        elif a.kind == ActionKind.RECOVER:
            requested: list[tuple[str, str, str | None]] = [
                ("topic", local, remote or None) for local, remote in a.prefixes
            ]

            def recovered(plan: Any, error: ClusterError | None) -> None:
                if error is None:
                    self.metrics.add("recoveries", 1)

            ops.recover(a.cluster, a.link, requested, True, recovered)
        elif a.kind == ActionKind.RELINK:
            self.relink(a.cluster, a.link, a.source, a.prefixes)
        elif a.kind == ActionKind.REVERSE:
            ops.reverse(a.cluster, a.link, a.timeout_ms)
        elif a.kind == ActionKind.SET_RESERVED:
            for local, _remote in a.prefixes:
                ops.set_reserved(a.cluster, "topic", local, a.reserved)
        elif a.kind == ActionKind.MANUAL_REVERSE:
            for local, remote in a.prefixes:
                ops.manual_reverse(a.cluster, a.link, "topic", local, remote or local, True)
        elif a.kind == ActionKind.ALTER_LINK:
            changes = {
                "gap_policy": a.gap_policy,
                "fetch_bound": a.fetch_bound,
                "failover_truncation": a.failover_truncation,
                "failback_reconciliation": a.failback_reconciliation,
            }
            ops.alter_link(a.cluster, a.link, {k: v for k, v in changes.items() if v})
        elif a.kind == ActionKind.RESUME_PARTITION:
            ops.resume_partition(a.cluster, a.link, a.topic, a.partition)

    def relink(
        self, cluster: str, old: str, source: str, prefixes: tuple[tuple[str, str], ...]
    ) -> None:
        """Re-point a follower to another source after a failover (KIP-986; the
        operator's sequence of ccr-chaos's relink step): on `cluster`, detach
        each local prefix (topics, and groups when the namespace replicates
        them) from the old link, create a link named `<source>-<cluster>` with
        no mapping, then `recover` it with confirm, which cuts what `source`
        never had, moves committed offsets past the cut back, and attaches the
        mappings with `source` leading. Each step is a core procedure; a
        refusal stops the sequence (counted in actions_failed)."""
        ops = self.ops
        kinds = ("topic", "group") if self.scenario.namespace.groups else ("topic",)
        new = f"{source}-{cluster}"
        steps: list[Callable[[Callable[[Any, ClusterError | None], None]], None]] = []
        for local, _remote in prefixes:
            for kind in kinds:
                steps.append(functools.partial(ops.detach, cluster, old, local, kind))
        steps.append(lambda done: ops.create_link(cluster, new, source, done=done))
        requested: list[tuple[str, str, str | None]] = [
            (kind, local, remote or None) for local, remote in prefixes for kind in kinds
        ]
        steps.append(lambda done: ops.recover(cluster, new, requested, True, done))

        def run(index: int) -> None:
            def after(result: Any, error: ClusterError | None) -> None:
                if error is not None:
                    self.queue.note(f"relink {cluster} to {source} stopped at step {index + 1}")
                elif index + 1 < len(steps):
                    run(index + 1)
                else:
                    self._relinked(cluster, source, result)

            steps[index](after)

        run(0)

    def _relinked(self, cluster: str, source: str, plan: Any) -> None:
        """What the confirmed recovery of a relink reported: the records cut
        (also counted by the truncation hook) and the committed offsets moved."""
        assert isinstance(plan, RecoveryPlan)
        self.metrics.add("recoveries", 1)
        moved = [g for g in plan.groups if g.new_offset >= 0]
        self.metrics.add("recovery_offsets_moved", len(plan.groups))
        self.metrics.add("recovery_groups_moved", len({g.group for g in plan.groups}))
        self.metrics.add(
            "recovery_offsets_moved_records",
            sum(max(0, g.committed_offset - g.new_offset) for g in moved),
        )
        self.queue.note(
            f"relink {cluster} to {source}: cut {plan.local_records_lost} records in "
            f"{plan.diverged_partitions} partitions, moved {len(plan.groups)} committed offsets"
        )

    def edge_mode(self, source: str, target: str) -> str:
        for edge in self.scenario.edges:
            if (edge.source, edge.target) == (source, target) and edge.mode:
                return edge.mode
        return self.scenario.topology.mode

    def edge_type(self, source: str, target: str) -> str:
        for edge in self.scenario.edges:
            if (edge.source, edge.target) == (source, target) and edge.type:
                return edge.type
        return self.scenario.topology.link_type

    def create_mirror(self, source: str, target: str, name: str) -> None:
        """An edge of type mirror: a MirrorMaker 2 flow (sim.mirror_driver) in
        place of a link. It is a client of both clusters: nothing is configured
        on either; it creates what it needs as it runs."""
        edge = next(
            (e for e in self.scenario.edges if (e.source, e.target) == (source, target)), None
        )
        options = MirrorOptions.of(edge) if edge is not None else MirrorOptions()
        if self.scenario.connect.workers:
            group = ConnectMirror(
                name,
                self.clusters[source],
                self.clusters[target],
                build_flow(source, target, options),
                self.queue,
                self.network,
                self.sizes,
                self,
                self.scenario.connect,
            )
            self.mirrors[f"{target}/{name}"] = group
            group.start()
            self.queue.note(f"mirror {name} created {source}->{target} on Connect")
            return
        driver = MirrorDriver(
            name,
            self.clusters[source],
            self.clusters[target],
            build_flow(source, target, options),
            self.queue,
            self.network,
            self.sizes,
            self,
        )
        self.mirrors[f"{target}/{name}"] = driver
        driver.start()
        self.queue.note(f"mirror {name} created {source}->{target}")

    def worker_fault(self, f: FaultSpec) -> None:
        """A fault of a Connect worker, on every mirror edge's group (none on links)."""
        self.queue.note(f"fault {f.kind} {f.worker}")
        for key in sorted(self.mirrors):
            group = self.mirrors[key]
            if isinstance(group, ConnectMirror):
                group.fault(f.kind, f.worker, f.duration_ms, f.permanent)

    def _mirror_failover(self, cluster: str, mirror: MirrorDriver | ConnectMirror) -> None:
        """A failover through a MirrorMaker 2 flow. MM2 has none of its own: the
        operator stops the flow and moves the applications to the target's
        remote topics. Consumers resume at their group's offsets there (written
        by KIP-545 group sync), else at the group's translated checkpoints
        (RemoteClusterUtils.translateOffsets), else at the log start. RPO is
        measured by value: offsets differ across a mirror."""
        mirror.stop()
        lost, rpo_ms = mirror.measure_rpo(self.history)
        self.metrics.add("rpo_records", lost)
        self.metrics.maximum("rpo_ms", rpo_ms)
        source = mirror.source.cluster_id
        for producer in self.producers:
            if producer.spec.failover_to == cluster:
                moved = producer.cluster == source
                remote = mirror.remote_topic(producer.spec.topic) if moved else None
                producer.move_to(cluster, remote or "")
        for consumer in self.consumers:
            if consumer.spec.failover_to == cluster:
                moved = consumer.cluster == source
                remote = mirror.remote_topic(consumer.spec.topic) if moved else None
                start = mirror.checkpointed_offsets(consumer.spec.group, remote) if remote else {}
                consumer.move_to(cluster, remote or "", start)
        self.queue.note(f"failover {cluster} mirror {mirror.name} stopped")

    def _switch_to_sync_when_following(self, cluster: str, name: str) -> None:
        """set_mode SYNC on the follower once the link is FOLLOWING; tried every
        tick until the safety phase ends (then the link stays ASYNC, noted)."""

        def attempt() -> None:
            node = self.clusters[cluster]
            if name not in node.links.configs:
                return
            if node.up and node.links.state_of(name) is LinkState.FOLLOWING:
                self.ops.counting = False  # the topology's mode, not an operator's action
                self.ops.set_mode(cluster, name, "SYNC", retry)
                self.ops.counting = True
                return
            retry(None, None)

        def retry(_result: Any, error: ClusterError | None) -> None:
            node = self.clusters[cluster]
            config = node.links.configs.get(name)
            if config is not None and config.mode == LinkMode.SYNC:
                return
            if self.queue.now_ms + self.scenario.run.tick_interval_ms >= (
                self.scenario.run.duration_ms
            ):
                self.queue.note(f"link {name} never FOLLOWING: stays ASYNC")
                return
            self.queue.after(self.scenario.run.tick_interval_ms, f"sync {name}", attempt)

        self.queue.after(self.scenario.run.tick_interval_ms, f"sync {name}", attempt)

    def sync_witnesses(
        self, cluster: SimCluster, topic: str, partition: int
    ) -> tuple[tuple[str, str, int], ...]:
        """For invariant 4: at an acknowledgement, each follower of a SYNC link
        that is IN_SYNC on the topic, with how far it durably holds the
        partition then."""
        out: list[tuple[str, str, int]] = []
        for link, verdict in cluster.links.sync_links_leading(topic):
            if verdict is not LinkState.IN_SYNC:
                continue
            config = cluster.links.configs[link]
            mapping = config.mapping_for(topic, "leader")
            follower = self.clusters.get(config.remote_cluster_id)
            if mapping is None or follower is None:
                continue
            local = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
            end = 0
            if local in follower.state.topics:
                end = follower.state.partition(local, partition).durable_offset
            out.append((follower.cluster_id, local, end))
        return tuple(out)

    def followers_of(
        self, cluster: SimCluster, topic: str
    ) -> tuple[tuple[str, str, str], ...]:
        """For invariant 10: at an acknowledgement, (follower, follower topic,
        link id) of every link that leads the topic from here and that its
        follower follows too, by the configuration it holds (durably, so also
        while it is down)."""
        out: list[tuple[str, str, str]] = []
        for name in sorted(cluster.links.configs):
            config = cluster.links.configs[name]
            mapping = config.mapping_for(topic, "leader")
            follower = self.clusters.get(config.remote_cluster_id)
            if mapping is None or follower is None:
                continue
            local = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
            theirs = follower.links.configs.get(name)  # durable, even while it is down
            if (
                theirs is None
                or theirs.link_id != config.link_id
                or theirs.mapping_for(local, "follower") is None
            ):
                continue
            out.append((follower.cluster_id, local, config.link_id))
        return tuple(out)

    def reachable(self, a: str, b: str) -> bool:
        """Both directions between two clusters are open."""
        return self.network.reachable(a, b) and self.network.reachable(b, a)

    def create_link(
        self,
        source: str,
        target: str,
        name: str,
        prefixes: tuple[tuple[str, str], ...],
        with_groups: bool,
        then: Callable[[], None] | None = None,
    ) -> None:
        """create-link on the target (the follower dials; the source dials and
        pushes under [topology] push), then attach each prefix pair (topics,
        and groups when replicated) with the source leading."""
        kinds = ("topic", "group") if with_groups else ("topic",)

        def created(_result: Any, error: ClusterError | None) -> None:
            if error is None:
                self.queue.note(f"link {name} created {source}->{target} {list(prefixes)}")
                if then is not None:
                    then()

        push = self.scenario.topology.push
        topology = self.scenario.topology
        chosen = {
            "fetch.bound": topology.fetch_bound,
            "failover.truncation": topology.failover_truncation,
            "gap.policy": topology.gap_policy,
            "failback.reconciliation": topology.failback_reconciliation,
        }
        policies = {k: v for k, v in chosen.items() if v} or None
        self.ops.create_link(
            target, name, source, prefixes, kinds, "remote", push, created, policies
        )

    def _cut_by_link_since(self, cluster: str, since_ms: int) -> frozenset[tuple[str, int]]:
        """Partitions of `cluster` the link's data path cut at or after `since_ms`."""
        return frozenset(
            (topic, p)
            for (cid, topic, p), events in self.cut_events.items()
            if cid == cluster and any(e.by_link and e.at_ms >= since_ms for e in events)
        )

    def delete_link(self, cluster: str, name: str) -> None:
        """delete-link (a mirror edge: its flow stops)."""
        mirror = self.mirrors.pop(f"{cluster}/{name}", None)
        if mirror is not None:  # a mirror edge: stop the flow
            mirror.stop()
            self.queue.note(f"mirror {name} deleted on {cluster}")
            return
        self.ops.delete_link(cluster, name)

    def failover(
        self,
        cluster: str,
        name: str,
        force: bool,
        bump_leader_epoch: bool,
        ended: Callable[[], None] | None = None,
    ) -> None:
        """failover, then (optionally) one more leader epoch on every promoted
        partition, as a Kafka leader change would give it; the clients whose
        failover target is this cluster move here once it answered.
        `ended`: called once it answered or was refused."""
        mirror = self.mirrors.get(f"{cluster}/{name}")
        if mirror is not None:
            self._mirror_failover(cluster, mirror)
            if ended is not None:
                ended()
            return
        node = self.clusters[cluster]
        config = node.links.configs.get(name)
        if config is None:
            self.ops.failover(  # refused: UNKNOWN_LINK
                cluster, name, force, None if ended is None else lambda _r, _e: ended()
            )
            return
        promoted = [m.local_prefix for m in rep.follower_mappings(config, "topic")]
        self._check_followers(cluster, final=False)
        # Measured as the failover starts, counted only if it is accepted
        # (a refused one loses nothing).
        rpo = self._measure_rpo(node, config.remote_cluster_id, promoted)
        ends_before = status_checks.log_ends(node.state, promoted)
        began = self.queue.now_ms
        # A call taking up a journalled plan may answer its first run's rows.
        as_of = status_checks.failover_answered_as_of(
            node.state.plans.get(name), force, self.queue.now_ms
        )

        def failed_over(result: Any, error: ClusterError | None) -> None:
            if ended is not None:
                ended()
            if error is not None:
                return
            assert isinstance(result, link_admin.Failover)
            self.violations += status_checks.check_failover_aborts(
                cluster, name, result, node.state, ends_before, self.queue.now_ms
            )
            self.violations += status_checks.check_failover_cuts(
                cluster, name, result, node.state, ends_before, self.queue.now_ms,
                self._cut_by_link_since(cluster, began),
                config.failover_truncation is FailoverTruncation.LAST_STABLE_OFFSET,
            )  # fmt: skip
            self.metrics.add("rpo_records", rpo[0])
            self.metrics.maximum("rpo_ms", rpo[1])
            if as_of is not None:
                self.violations += status_checks.check_unforced_failover(
                    cluster, name, result, self.queue.now_ms,
                    node.links.limits.fetch_silence_ms, as_of,
                )
            heard = self.heard_offsets.get((cluster, node.incarnation, config.link_id), {})
            self.violations += status_checks.check_failover_groups(
                cluster, name, result, heard, node.state, self.queue.now_ms
            )
            self.metrics.add("failover_abandoned_partitions", len(result.abandoned))
            self.metrics.add("failover_groups_behind", sum(g.behind for g in result.groups))
            self.failovers.append((cluster, config.link_id, self.queue.now_ms, result))
            self.failover_source_live.append(self._source_live_at_change(cluster, name))
            if bump_leader_epoch:
                for topic in sorted(node.state.topics):
                    if not any(rep.in_prefix(topic, p) for p in promoted):
                        continue
                    for p, log in enumerate(node.state.topics[topic].partitions):
                        _removed, _epoch, effects = node.state.unclean_election(
                            topic, p, log.log_end_offset
                        )
                        node.execute(effects, "metadata", self.logical_bytes)
            for producer in self.producers:
                if producer.spec.failover_to == cluster:
                    producer.move_to(cluster)
            for consumer in self.consumers:
                if consumer.spec.failover_to == cluster:
                    consumer.move_to(cluster)
            self.queue.note(f"failover {cluster} link {name} promoted {promoted}")

        self.ops.failover(cluster, name, force, failed_over)

    def _measure_rpo(
        self, node: SimCluster, source: str, prefixes: list[str]
    ) -> tuple[int, int]:
        """Acknowledged writes on the source that the promoted follower's log
        lacks at the failover: (records, ms of acknowledgements they span)."""
        acked: list[tuple[tuple[str, int], int, int, bool]] = []
        for op in self.history.sends():
            v = op.value
            if op.type != "ok" or op.cluster != source or not isinstance(v, Send):
                continue
            if (
                not any(rep.in_prefix(v.topic, p) for p in prefixes)
                or v.topic not in node.state.topics
            ):
                continue
            logs = node.state.topics[v.topic].partitions
            # A partition the follower has not created yet holds nothing. What
            # its log holds above its high watermark (copied, the source's
            # newer high watermark not yet learned) stays: failover lifts the
            # source's cap and the high watermark moves to the log's end.
            held = v.partition < len(logs) and v.offset < logs[v.partition].log_end_offset
            acked.append(((v.topic, v.partition), op.complete_ms, v.records, held))
        return recovery_point(acked)

    # -- timers and probes ------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.queue.now_ms
        for cid in self.cluster_ids:
            node = self.clusters[cid]
            if node.up:
                node.tick(now, self.logical_bytes)
        probe_ms = self.scenario.run.status_probe_ms
        if probe_ms and now - self._status_probed_ms >= probe_ms:
            self._status_probed_ms = now
            self._probe_status(now)
        if now - self._removals_ms >= HANDSHAKE_INTERVAL_MS:
            self._removals_ms = now
            self.ops.tell_removals()
        self._sample_link_states(now)
        healed_ms = self.nemesis.heal_at_ms
        # Caught up: converged with nothing held back (a partition stopped at
        # a gap, or refused with a reason, has not caught up, however settled).
        if healed_ms is not None and self.converged() and not self.held_links:
            self.metrics.maximum("catchup_ms", now - healed_ms)
            self.metrics.add("catchups", 1)
            self.metrics.window("catchup", healed_ms, now)
            self.nemesis.heal_at_ms = None
        self.queue.after(self.scenario.run.tick_interval_ms, "tick", self.tick)

    def _probe_status(self, now: int) -> None:
        """Invariant 9: what every live cluster's links report, against the
        logs (sim.status_checks.StatusWatch)."""
        up = {cid: self.clusters[cid].up for cid in self.cluster_ids}
        for cid in self.cluster_ids:
            if up[cid]:
                self.status_watch.record_hws(cid, self.clusters[cid].state, now)
        states = {cid: self.clusters[cid].state for cid in self.cluster_ids}
        self.status_watch.probe(states, up, now)

    def source_news_current(self, cluster: str, name: str, source: str) -> bool:
        """`status_checks.source_news_current` for a follower failing over
        link `name` now: what the run knows of its source and of the
        follower's last round."""
        node = self.clusters[cluster]
        config = node.links.configs.get(name)
        if config is None or source not in self.clusters:
            return False
        return status_checks.source_news_current(
            # A paused source (SIGSTOP) resets none of its connections: it is
            # found out as a silent cut is, once a call is overdue.
            self.clusters[source].up or source in self.paused,
            self.reachable(source, cluster),
            config.connection_direction != "remote_dials",
            self.round_applied_ms.get((cluster, node.incarnation, name)),
            self.queue.now_ms,
            node.links.limits.fetch_answer_due_ms,
        )

    def failover_reports(self) -> list[status_checks.FailoverReport]:
        """What each failover answered, for invariant 10."""
        return [
            self.failover_report(f, live)
            for f, live in zip(self.failovers, self.failover_source_live, strict=True)
        ]

    def failover_report(
        self, failover: tuple[str, str, int, link_admin.Failover], source_live: bool = True
    ) -> status_checks.FailoverReport:
        cluster, link_id, at_ms, result = failover
        return status_checks.FailoverReport(
            cluster,
            link_id,
            at_ms,
            {
                (r.topic, r.partition): status_checks.FailoverRow(
                    r.log_end_offset,
                    r.source_high_watermark,
                    r.source_hw_known_at_ms,
                    r.lag_known,
                    r.unknown_since_ms,
                )
                # Every partition made writable, and those the answer names as
                # abandoned without making them writable (a follower topic its
                # storage refused to create: no log here, so no partition).
                for r in [*result.abandoned, *result.partitions]
            },
            result.topics_known_at_ms,
            tuple(prefix for kind, prefix in result.namespaces if kind == MappingType.TOPIC),
            source_live,
        )

    def _sample_link_states(self, now: int) -> None:
        elapsed = now - self._state_sampled_ms
        self._state_sampled_ms = now
        for (_cid, name), driver in sorted(self.ops.drivers.items()):
            if not driver.stopped:
                state = driver.dialer.links.state_name(name)
                self.metrics.add(f"link_state_ms_{state}", elapsed)
        for sampler in self.samplers:
            sampler(now)

    def live_links(self) -> Iterator[tuple[str, SimCluster, str, LinkConfig, SimCluster]]:
        """(cluster id, its node, link name, its config, the remote's node) of
        every link, seen from each side, whose two clusters are both up (and
        not lost for good): what the liveness checks and the twin compare."""
        for cid in self.cluster_ids:
            node = self.clusters[cid]
            if not node.up:
                continue
            for name in node.links.names():
                config = node.links.get(name)
                remote = self.clusters.get(config.remote_cluster_id)
                if remote is None or not remote.up or remote.cluster_id in self.lost_for_good:
                    continue
                yield cid, node, name, config, remote

    def unsettled_links(self) -> list[str]:
        """Links between live clusters, on either side, that are not FOLLOWING
        (IN_SYNC for a SYNC link), whose follower partitions lag, or whose two
        configurations differ (invariant 7)."""
        now = self.queue.now_ms
        out = []
        held: set[str] = set()
        for cid, node, name, config, remote in self.live_links():
            settled = LinkState.IN_SYNC if config.mode == LinkMode.SYNC else LinkState.FOLLOWING
            state = node.links.state_of(name)
            if state is not settled or link_admin.follower_lag(node.state, name, now):
                unsettled = (LinkState.CATCHING_UP, LinkState.SYNCING, LinkState.OUT_OF_SYNC)
                if (
                    state in unsettled
                    and node.links.explained(name, now)
                    and not self._storage_back(node, name)
                ):
                    # Held back only by partitions refused with a reason
                    # the link reports (two topics of one name: an
                    # operator must choose): settled, and counted.
                    held.add(f"{cid}/{name}")
                else:
                    out.append(f"{cid}/{name}:{node.links.state_name(name)}")
                    continue
            theirs = remote.links.configs.get(name)
            if theirs is None or theirs.mirrored().agreed_record() != config.agreed_record():
                out.append(f"{cid}/{name}:configurations differ")
                continue
            behind = self._copies_behind(node, remote, name)
            if behind:
                out.append(f"{cid}/{name}:{behind} ends where its source does not")
        self.held_links = frozenset(held)
        return out

    def _storage_back(self, node: SimCluster, name: str) -> bool:
        """Whether a partition of the link was refused by this cluster's
        storage, which takes writes again: the link copies on by itself
        (docs/operations.md), so that partition is behind, not settled."""
        runtime = node.state.links.runtime.get(name)
        if runtime is None or self.queue.now_ms < node.storage_refused_until_ms:
            return False
        refused = runtime.refused.values()
        return any(e.code is ErrorCode.STORAGE_REFUSED for e in refused) or bool(
            runtime.uncreated
        )

    def lineage_unheard(self) -> list[str]:
        """Links between live clusters where the lineage one side last heard
        is not what its remote would send now (`linkd.core.lineage`). A ring
        of follow relations closed while apart is found only once the lineage
        went around it, a handshake per hop, so the liveness phase waits for
        this too before invariant 13 judges rings at rest."""
        out = []
        for cid, node, name, _config, remote in self.live_links():
            theirs = remote.links.configs.get(name)
            if theirs is None:
                continue
            heard = node.state.links.runtime[name].upstream
            if heard != lineage.outgoing(remote.state, theirs).mirrored().lineage:
                out.append(f"{cid}/{name}:lineage not yet heard")
        return out

    def _copies_behind(self, node: SimCluster, remote: SimCluster, name: str) -> str:
        """A follower partition of the link that does not end where its
        source's log and high watermark end (the states may say FOLLOWING on
        a round that ended before the source cut its log, or before a
        transaction's markers were acknowledged there), or a follower topic
        with fewer partitions than its source (no row lags for a partition
        the follower has not learned of)."""
        state = node.state
        config = state.links.get(name)
        runtime = state.links.runtime[name]
        for topic in sorted(state.topics):
            mapping = config.mapping_for(topic, "follower")
            if mapping is None:
                continue
            source = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
            theirs = remote.state.topics.get(source)
            if theirs is None:
                continue
            mine = state.topics[topic].partitions
            if len(mine) < len(theirs.partitions):
                # Partitions the source added that the follower has not
                # learned of yet: its next discovery grows the topic.
                return f"{topic} ({len(mine)} of the source's {len(theirs.partitions)} partitions)"
            storage_back = self.queue.now_ms >= node.storage_refused_until_ms
            for p, log in enumerate(mine):
                refusal = runtime.refused.get((topic, p))
                if refusal is not None and storage_back and (
                    refusal.code is ErrorCode.STORAGE_REFUSED
                ):
                    refusal = None  # the disk takes writes again: it copies on by itself
                if p >= len(theirs.partitions) or refusal is not None:
                    continue
                source_log = theirs.partitions[p]
                if self._orphaned(remote, source, p) or self._held(remote, source, p):
                    # Its own source is gone, or its own link holds it uncut
                    # until a recover (the link says so): what it holds above
                    # its HW is not acknowledged and stays invisible for now;
                    # copies end at its HW.
                    if log.log_end_offset != source_log.high_watermark:
                        return f"{topic}-{p}"
                    continue
                # Quiet: the source's records all acknowledged, and copied.
                if not log.log_end_offset == source_log.high_watermark == source_log.log_end_offset:
                    return f"{topic}-{p}"
        return ""

    @staticmethod
    def _orphaned(node: SimCluster, topic: str, partition: int) -> bool:
        """A follower partition whose source no longer has it (its link says so)."""
        return any(
            (topic, partition) in rt.refused and orphans(rt.refused[(topic, partition)])
            for rt in node.state.links.runtime.values()
        )

    @staticmethod
    def _held(node: SimCluster, topic: str, partition: int) -> bool:
        """A follower partition its own link holds uncut for its clients'
        writes, refused until a recover (its link says so)."""
        return any(
            (topic, partition) in rt.own_writes_held and (topic, partition) in rt.refused
            for rt in node.state.links.runtime.values()
        )

    def converged(self) -> bool:
        """Every link between live clusters settled, every mirror caught up."""
        if self.unsettled_links():
            return False
        return all(self.mirrors[key].caught_up() for key in sorted(self.mirrors))

    # -- the run ----------------------------------------------------------------------

    def run(self) -> None:
        s = self.scenario
        self.setup()
        self.queue.run_until(s.run.duration_ms)
        # Liveness phase: heal everything and demand convergence within a bound.
        self.queue.note("liveness phase: heal all")
        self.crash_points.clear()
        self.nemesis.heal_all()
        for key in sorted(self.mirrors):
            group = self.mirrors[key]
            if isinstance(group, ConnectMirror):
                group.heal_all()
        deadline = s.run.duration_ms + s.run.liveness_ms
        converged_at: list[int] = []

        def probe() -> None:
            self._finish_plans()
            if not self._plans_running and self.converged() and not self.lineage_unheard():
                converged_at.append(self.queue.now_ms)
            else:
                self.queue.after(PROBE_INTERVAL_MS, "liveness probe", probe)

        self.queue.after(PROBE_INTERVAL_MS, "liveness probe", probe)
        self.queue.run_until(deadline, stop=lambda: bool(converged_at))
        self._sample_link_states(self.queue.now_ms)
        if not converged_at:
            lagging = self.unsettled_links() + self.lineage_unheard()
            lagging += [f"mirror {k}" for k, m in sorted(self.mirrors.items()) if not m.caught_up()]
            self.violations.append(
                Violation(
                    "liveness",
                    f"links did not converge within liveness_ms={s.run.liveness_ms} after "
                    f"healing: {', '.join(lagging)}",
                )
            )
        self.final_checks()

    # -- the judge (sim/judge.py) --------------------------------------------------------

    def _check_followers(self, only: str | None = None, final: bool = True) -> None:
        judge.check_followers(self, only, final)

    def final_logs(self) -> checkers.FinalLogs:
        return judge.final_logs(self)

    def final_checks(self) -> None:
        judge.final_checks(self)
