"""One simulation run: clusters, links, network, clients, nemesis, checkers.

Theory of operation (TigerBeetle's VOPR, Kafka's RaftEventSimulationTest):
1. Setup at t=0: build the topology graph, create every cluster (a
   `ClusterState` inside a `SimCluster`), the origins' topics, and one link per
   edge through the same operator action a scenario can call later.
2. Safety phase (0 .. duration_ms): workloads run; faults and operator actions
   fire at their times; every tick runs the core's timers (`SimCluster.tick`,
   the daemon's tick loop); invariant 6 is checked after every follower apply
   and invariants 1-2 before every failover; every acknowledgement records
   its SYNC witnesses (invariant 4).
3. Liveness phase (up to liveness_ms more): clients stop, every grudge and
   clog heals, crashed clusters restart (unless lost for good), and every link
   must reach FOLLOWING (a SYNC link: IN_SYNC) with no lag; if it does not,
   the run fails with "liveness".
4. Final checks: invariants 1, 2, 3, 4, 5, 7 and the anomalies over the
   history and the final logs; then metrics.

Operator actions mirror `LinkManager` (linkd/replication.py): create_link
(create + attach), delete_link, failover, set_mode. They are instantaneous
(admin calls are not on the data path) and need the remote reachable where
the daemon needs it (creating a link); otherwise the remote learns through
handshakes. An edge (or topology) with mode SYNC is created ASYNC and
switched by set_mode on its follower as soon as the link is FOLLOWING (the
core refuses SYNC before), as an operator would.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from linkd.core import cluster as core
from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.errors import ClusterError
from linkd.core.links import LinkLimits, LinkState
from linkd.core.namespaces import ResourceType
from sim import checkers, network, seeds, topology
from sim.checkers import Violation
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.history import History, Send
from sim.link_driver import FetchSizes, LinkDriver, wire
from sim.metrics import Metrics
from sim.network import Network, PathParams
from sim.scenario import ActionSpec, FaultSpec, Scenario
from sim.workloads import Consumer, Producer

PROBE_INTERVAL_MS = 500


class Simulation:
    def __init__(self, scenario: Scenario, seed: int, keep_trace: bool = False) -> None:
        self.scenario = scenario
        self.seed = seed
        run = scenario.run
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
            c.session_timeout_ms, c.lag_max_records, c.lag_max_ms, c.replica_lag_time_max_ms
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
            )
            node.on_truncate = self._make_truncate_hook(cid)
            self.clusters[cid] = node
        self.link_ids = seeds.IdFactory(seed, "links")
        self.sizes = FetchSizes(run.fetch_max_bytes, run.partition_max_bytes, run.fetch_max_wait_ms)
        self.drivers: dict[str, LinkDriver] = {}
        self.offset_watch = checkers.OffsetWatch()
        self.violations: list[Violation] = []
        self.metrics = Metrics()
        self.truncations: checkers.Truncations = {}
        self.producers: list[Producer] = []
        self.consumers: list[Consumer] = []
        self.lost_for_good: set[str] = set()
        self._heal_at_ms: int | None = None
        self._state_sampled_ms = 0

    # -- hooks the workloads and drivers call ---------------------------------------------

    def logical_bytes(self, effect: core.AppendBatch) -> int:
        if effect.header.is_control:
            return 64
        return effect.header.record_count * self.record_bytes

    def follower_applied(self, cluster: SimCluster, link_name: str) -> None:
        self.offset_watch.observe(cluster.cluster_id, cluster.state, link_name, self.queue.now_ms)

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

    def _make_truncate_hook(self, cid: str) -> Any:
        def hook(topic: str, partition: int, removed: int) -> None:
            node = self.clusters[cid]
            store = node.store(topic, partition)
            self.truncations.setdefault((cid, topic, partition), []).append(store.log_end_offset)
            follower = any(
                n.follower_link or n.reserved
                for n in node.state.namespaces.matching(ResourceType.TOPIC, topic)
            )
            name = "records_truncated_by_recovery" if follower else "records_truncated_unclean"
            self.metrics.add(name, removed)
            self.queue.note(f"truncate {cid}:{topic}-{partition} removed {removed}")

        return hook

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
                    name, s.namespace.partitions, {}, node.topic_ids()
                )
                node.execute(effects, "metadata", self.logical_bytes)
        for (u, v), mappings in sorted(
            topology.edge_mappings(self.graph, s.namespace.groups).items()
        ):
            prefixes = tuple(sorted({(m.local_prefix, m.remote_prefix) for m in mappings}))
            self.create_link(u, v, f"{u}-{v}", prefixes, with_groups=s.namespace.groups)
            if self.edge_mode(u, v) == "SYNC":
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
        for fault in s.faults:
            self.queue.at(fault.at_ms, f"fault {fault.kind}", functools.partial(self.fault, fault))
        for action in s.actions:
            self.queue.at(
                action.at_ms, f"action {action.kind}", functools.partial(self.action, action)
            )
        self.queue.at(0, "tick", self.tick)

    # -- operator actions (LinkManager) ---------------------------------------------------------

    def action(self, a: ActionSpec) -> None:
        try:
            if a.kind == "failover":
                self.failover(a.cluster, a.link, a.force, a.bump_leader_epoch)
            elif a.kind == "delete_link":
                self.delete_link(a.cluster, a.link)
            elif a.kind == "create_link":
                self.create_link(
                    a.source,
                    a.target,
                    a.link or f"{a.source}-{a.target}",
                    a.prefixes,
                    self.scenario.namespace.groups,
                )
            elif a.kind == "set_mode":
                self.set_mode(a.cluster, a.link, a.mode)
            elif a.kind == "create_topic":
                node = self.clusters[a.cluster]
                _t, effects = node.state.create_topic(a.topic, a.partitions, {}, node.topic_ids())
                node.execute(effects, "metadata", self.logical_bytes)
            self.metrics.add("actions_ok", 1)
        except ClusterError as exc:
            self.metrics.add("actions_failed", 1)
            self.queue.note(f"action {a.kind} refused: {exc.code.name}: {exc.message}")

    def edge_mode(self, source: str, target: str) -> str:
        for edge in self.scenario.edges:
            if (edge.source, edge.target) == (source, target) and edge.mode:
                return edge.mode
        return self.scenario.topology.mode

    def _switch_to_sync_when_following(self, cluster: str, name: str) -> None:
        """set_mode SYNC on the follower once the link is FOLLOWING; tried every
        tick until the safety phase ends (then the link stays ASYNC, noted)."""

        def attempt() -> None:
            node = self.clusters[cluster]
            if name not in node.links.configs:
                return
            if node.up and node.links.state_name(name) == LinkState.FOLLOWING.value:
                try:
                    self.set_mode(cluster, name, "SYNC")
                    return
                except ClusterError as exc:
                    self.queue.note(f"set_mode {name} SYNC refused: {exc.code.name}")
            if self.queue.now_ms + self.scenario.run.tick_interval_ms >= (
                self.scenario.run.duration_ms
            ):
                self.queue.note(f"link {name} never FOLLOWING: stays ASYNC")
                return
            self.queue.after(self.scenario.run.tick_interval_ms, f"sync {name}", attempt)

        self.queue.after(self.scenario.run.tick_interval_ms, f"sync {name}", attempt)

    def set_mode(self, cluster: str, name: str, mode: str) -> None:
        """LinkManager.set_mode: decided here (the core refuses SYNC unless the
        link is FOLLOWING), then told to the remote if it is reachable (the mode
        is a versioned field: otherwise it converges through the handshakes)."""
        node = self.clusters[cluster]
        now = self.queue.now_ms
        records, hw_moved = rounds.set_link_mode(node.state, name, mode, now)
        if not records:
            return
        node.journal_records += len(records)
        if hw_moved:
            node.notify_data()
        config = node.links.get(name)
        remote = self.clusters.get(config.remote_cluster_id)
        if remote is not None and remote.up and self._reachable(cluster, remote.cluster_id):
            got = rounds.accept_handshake(remote.state, wire(config), False, now)
            remote.journal_records += len(got)
            answer = wire(remote.links.get(name))
            node.journal_records += len(
                rounds.accept_handshake_answer(node.state, name, answer, now)
            )
        for key in sorted(self.drivers):
            if self.drivers[key].name == name:
                self.drivers[key].wake()
        self.queue.note(f"link {name} mode {config.mode} on {cluster}")

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

    def _reachable(self, a: str, b: str) -> bool:
        return self.network.reachable(a, b) and self.network.reachable(b, a)

    def create_link(
        self,
        source: str,
        target: str,
        name: str,
        prefixes: tuple[tuple[str, str], ...],
        with_groups: bool,
    ) -> None:
        """LinkManager.create_link then attach, on the target (the follower dials)."""
        from linkd.core.errors import ErrorCode

        follower, leader = self.clusters[target], self.clusters[source]
        now = self.queue.now_ms
        if not self._reachable(target, source):
            raise ClusterError(
                ErrorCode.LINK_UNREACHABLE,
                f"link {name!r}",
                f"{source} is unreachable from {target}",
            )
        config = follower.links.new_config(
            name,
            self.link_ids(),
            source,
            f"{source}:9092",
            "",
            "local_dials",
            f"{target}:9092",
            now,
        )
        records = rep.accept_remote_config(leader.state, wire(config), now)  # on_handshake
        leader.links.on_contact(name, now)
        records += follower.links.store(config, now)
        records += rep.accept_remote_config(follower.state, wire(leader.links.get(name)), now)
        follower.links.on_contact(name, now)
        kinds = ["topic", "group"] if with_groups else ["topic"]
        for local, remote in prefixes:
            for kind in kinds:
                rtype = ResourceType.parse(kind)
                if follower.state.namespaces.find(rtype, local) is None:
                    # The operator's create-namespace step before attaching.
                    records += follower.state.namespaces.create(rtype, local)
                mapping = rep.check_attach(follower.state, name, kind, local, remote, "remote")
                records += rep.put_mapping(follower.state, name, mapping, now)
        records += rep.accept_remote_config(leader.state, wire(follower.links.get(name)), now)
        follower.journal_records += len(records)
        driver = LinkDriver(name, follower, leader, self.queue, self.network, self.sizes, self)
        self.drivers[f"{target}/{name}"] = driver
        driver.start()
        self.queue.note(f"link {name} created {source}->{target} {list(prefixes)}")

    def delete_link(self, cluster: str, name: str) -> None:
        """LinkManager.delete_link: stop the runner, tell the remote (best effort)."""
        node = self.clusters[cluster]
        config = node.links.get(name)
        driver = self.drivers.pop(f"{cluster}/{name}", None)
        if driver is not None:
            driver.stop()
        remote = self.clusters.get(config.remote_cluster_id)
        if remote is not None and remote.up and self._reachable(cluster, remote.cluster_id):
            if name in remote.links.configs:
                rep.delete_link(remote.state, name)  # on_remove
        rep.delete_link(node.state, name)
        self.queue.note(f"link {name} deleted on {cluster}")

    def failover(self, cluster: str, name: str, force: bool, bump_leader_epoch: bool) -> None:
        """LinkManager.failover, then (optionally) a new leader epoch on every
        promoted partition, as a Kafka leader change would give it."""
        node = self.clusters[cluster]
        config = node.links.get(name)
        now = self.queue.now_ms
        promoted = [m.local_prefix for m in rep.follower_mappings(config, "topic")]
        self._check_followers(cluster, final=False)
        self._measure_rpo(node, config.remote_cluster_id, promoted)
        records, abandoned = rep.failover(node.state, name, force, now)
        node.journal_records += len(records)
        # The promoted topics' high watermarks no longer wait for their source.
        node.refresh_high_watermarks()
        self.metrics.add("failover_abandoned_partitions", len(abandoned))
        remote = self.clusters.get(config.remote_cluster_id)
        if remote is not None and remote.up and self._reachable(cluster, remote.cluster_id):
            rep.accept_remote_config(remote.state, wire(node.links.get(name)), now)
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

    def _measure_rpo(self, node: SimCluster, source: str, prefixes: list[str]) -> None:
        """Acknowledged writes on the source that the promoted follower lacks."""
        lost = 0
        rpo_ms = 0
        newest_held: dict[tuple[str, int], int] = {}
        newest_acked: dict[tuple[str, int], int] = {}
        for op in self.history.sends():
            v = op.value
            if op.type != "ok" or op.cluster != source or not isinstance(v, Send):
                continue
            if (
                not any(rep.in_prefix(v.topic, p) for p in prefixes)
                or v.topic not in node.state.topics
            ):
                continue
            key = (v.topic, v.partition)
            newest_acked[key] = max(newest_acked.get(key, 0), op.complete_ms)
            if v.offset < node.state.partition(v.topic, v.partition).high_watermark:
                newest_held[key] = max(newest_held.get(key, 0), op.complete_ms)
            else:
                lost += v.records
        for key, acked_ms in sorted(newest_acked.items()):
            held = newest_held.get(key)
            if held is None or held < acked_ms:
                rpo_ms = max(rpo_ms, acked_ms - (held if held is not None else acked_ms))
        self.metrics.add("rpo_records", lost)
        self.metrics.maximum("rpo_ms", rpo_ms)

    # -- faults (the nemesis) -------------------------------------------------------------------

    def fault(self, f: FaultSpec) -> None:
        net = self.network
        everyone = self.cluster_ids
        pairs: set[tuple[str, str]] = set()
        if f.kind == "partition":
            pairs = network.full(f.side_a, f.side_b)
        elif f.kind == "one_way":
            pairs = network.one_way(f.side_a, f.side_b)
        elif f.kind == "bridge":
            pairs = network.bridge(f.side_a, f.side_b, f.bridge)
        elif f.kind == "isolate":
            pairs = network.isolate_one(f.node, everyone)
        elif f.kind == "clog":
            for pair in network.one_way(f.side_a, f.side_b):
                net.clog_ms[pair] = f.latency_ms
            if f.duration_ms:
                clogged = network.one_way(f.side_a, f.side_b)
                self.queue.after(f.duration_ms, "fault unclog", lambda: self._unclog(clogged))
            return
        elif f.kind == "heal":
            net.heal()
            self._healed()
            return
        elif f.kind == "crash":
            self.clusters[f.node].crash()
            net.down.add(f.node)
            if f.permanent:
                self.lost_for_good.add(f.node)
            elif f.duration_ms:
                self.queue.after(f.duration_ms, "fault restart", lambda: self._restart(f.node))
            return
        elif f.kind == "restart":
            self._restart(f.node)
            return
        elif f.kind == "unclean_election":
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
            self.queue.after(f.duration_ms, "fault heal grudge", lambda: self._heal_pairs(pairs))

    def _heal_pairs(self, pairs: set[tuple[str, str]]) -> None:
        self.network.grudge -= pairs
        if not self.network.grudge:
            self._healed()

    def _unclog(self, pairs: set[tuple[str, str]]) -> None:
        for pair in sorted(pairs):
            self.network.clog_ms.pop(pair, None)

    def _restart(self, cid: str) -> None:
        if cid in self.lost_for_good or self.clusters[cid].up:
            return
        self.network.down.discard(cid)
        self.clusters[cid].restart()
        self._healed()

    def _healed(self) -> None:
        self._heal_at_ms = self.queue.now_ms

    # -- timers and probes ------------------------------------------------------------------------

    def tick(self) -> None:
        now = self.queue.now_ms
        for cid in self.cluster_ids:
            node = self.clusters[cid]
            if node.up:
                node.tick(now, self.logical_bytes)
        self._sample_link_states(now)
        if self._heal_at_ms is not None and self.converged():
            self.metrics.maximum("catchup_ms", now - self._heal_at_ms)
            self.metrics.add("catchups", 1)
            self.metrics.window("catchup", self._heal_at_ms, now)
            self._heal_at_ms = None
        self.queue.after(self.scenario.run.tick_interval_ms, "tick", self.tick)

    def _sample_link_states(self, now: int) -> None:
        elapsed = now - self._state_sampled_ms
        self._state_sampled_ms = now
        for key in sorted(self.drivers):
            driver = self.drivers[key]
            state = driver.follower.links.state_name(driver.name)
            self.metrics.add(f"link_state_ms_{state}", elapsed)

    def converged(self) -> bool:
        """Every link between live clusters FOLLOWING, no follower lagging."""
        now = self.queue.now_ms
        for key in sorted(self.drivers):
            d = self.drivers[key]
            if d.stopped or not d.follower.up or not d.source.up:
                continue
            config = d.follower.links.configs.get(d.name)
            settled = "IN_SYNC" if config is not None and config.mode == "SYNC" else "FOLLOWING"
            if d.follower.links.state_name(d.name) != settled:
                return False
            if rep.follower_lag(d.follower.state, d.name, now):
                return False
        return True

    # -- the run ----------------------------------------------------------------------

    def run(self) -> None:
        s = self.scenario
        self.setup()
        self.queue.run_until(s.run.duration_ms)
        # Liveness phase: heal everything and demand convergence within a bound.
        self.queue.note("liveness phase: heal all")
        self.network.heal()
        for cid in self.cluster_ids:
            if not self.clusters[cid].up and cid not in self.lost_for_good:
                self._restart(cid)
        self._healed()
        deadline = s.run.duration_ms + s.run.liveness_ms
        converged_at: list[int] = []

        def probe() -> None:
            if self.converged():
                converged_at.append(self.queue.now_ms)
            else:
                self.queue.after(PROBE_INTERVAL_MS, "liveness probe", probe)

        self.queue.after(PROBE_INTERVAL_MS, "liveness probe", probe)
        self.queue.run_until(deadline, stop=lambda: bool(converged_at))
        self._sample_link_states(self.queue.now_ms)
        if not converged_at:
            lagging = [
                f"{d.follower.cluster_id}/{d.name}:{d.follower.links.state_name(d.name)}"
                for _, d in sorted(self.drivers.items())
                if not d.stopped and d.follower.up and d.source.up
            ]
            self.violations.append(
                Violation(
                    "liveness",
                    f"links did not converge within liveness_ms={s.run.liveness_ms} after "
                    f"healing: {', '.join(lagging)}",
                )
            )
        self.final_checks()

    def _check_followers(self, only: str | None = None, final: bool = True) -> None:
        for cid in self.cluster_ids:
            if only is not None and cid != only:
                continue
            node = self.clusters[cid]
            for topic in sorted(node.state.topics):
                for p, log in enumerate(node.state.topics[topic].partitions):
                    found = checkers.current_source(node.state, topic, p)
                    if found is None:
                        continue
                    source_id, source_topic, start = found
                    source = self.clusters.get(source_id)
                    if source is None or source_topic not in source.state.topics:
                        continue
                    self.violations += checkers.check_follower_log(
                        cid,
                        topic,
                        p,
                        node.store(topic, p),
                        log.high_watermark,
                        source_id,
                        source_topic,
                        source.store(source_topic, p),
                        start,
                        check_prefix=final,
                    )

    def final_logs(self) -> checkers.FinalLogs:
        """Decoded data records of every topic a record-level producer wrote."""
        topics = sorted({p.spec.topic for p in self.producers if not p.spec.bulk})
        out: checkers.FinalLogs = {}
        for cid in self.cluster_ids:
            node = self.clusters[cid]
            for topic in topics:
                if topic not in node.state.topics:
                    continue
                for p in range(len(node.state.topics[topic].partitions)):
                    values: dict[int, str] = {}
                    for b in node.store(topic, p).batches:
                        header, records = rb.decode_records(b.data)
                        if header.is_control:
                            continue
                        for r in records:
                            if r.value:
                                values[r.offset] = r.value.decode()
                    out[(cid, topic, p)] = values
        return out

    def final_checks(self) -> None:
        self._check_followers(final=True)
        self.violations += self.offset_watch.violations
        self.violations += checkers.check_reserved_writes(self.history)
        states = {cid: self.clusters[cid].state for cid in self.cluster_ids}
        up = {cid: self.clusters[cid].up for cid in self.cluster_ids}
        self.violations += checkers.check_link_convergence(states, up)
        final = self.final_logs()
        self.violations += checkers.check_lost_writes(self.history, final, self.truncations)
        self.violations += checkers.check_duplicates(final)
        self.violations += checkers.check_consumers(self.history, final)
        self.violations += checkers.check_sync_acks(self.history)
        self.violations += checkers.check_sync_acks_kept(self.history, final, self.truncations)
        self.violations += checkers.check_transactions_atomic(self.history)
        self.metrics.from_history(self.history, final)
        self.metrics.set("events", self.queue.processed)
        self.metrics.set("virtual_ms", self.queue.now_ms)
        self.metrics.set("network_dropped", self.network.dropped)
        for cid in self.cluster_ids:
            for cls, n in sorted(self.clusters[cid].disk.bytes_by_class.items()):
                self.metrics.add(f"io_bytes_{cls}", n)
        self.metrics.set(
            "fetch_rounds", sum(d.fetch_rounds for _, d in sorted(self.drivers.items()))
        )
