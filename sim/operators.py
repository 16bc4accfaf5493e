"""The operator in a simulation: the core's procedures, on virtual time.

Every verb (create and delete a link, attach, detach, set-mode, failover,
set-reserved, recover, reverse) is a procedure of `linkd.core.procedures`,
driven here by `sim.operator_shell.SimHost`; the KIP's manual reversal is
the operator's sequence of those verbs. This module also keeps the links'
drivers: a cluster that dials a link (connection direction "local_dials" on
its side) runs one `LinkDriver` (the pump of `linkd.core.link_driver`),
started, woken and stopped as the procedures say (`LinkChanged`,
`LinkDeleted`); a crash ends the drivers of the cluster that died, and its
restart starts new ones.

Every verb ends in `done(ok, error)`: a refusal (ClusterError) is an
expected outcome, counted and noted, never a violation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from linkd.core import cluster as core
from linkd.core import histories, procedures
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_driver import DriverSettings
from linkd.core.links import LinkMode, LinkState
from linkd.core.namespaces import ResourceType
from linkd.core.recovery import GroupCut, PartitionRow, RecoveryPlan
from linkd.core.requests import Checkpoint, Execute, Request, Sleep, sleep
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.link_driver import LinkDriver
from sim.link_service import Observer
from sim.metrics import Metrics
from sim.network import Network
from sim.operator_shell import SimHost, address_of
from sim.status_checks import AdminChange

# A manual reversal waits this long at most for the remote to catch up
# before it detaches (the operator watching describe-link), polling this often.
MANUAL_WAIT_MS_MAX = 30_000
MANUAL_POLL_MS = 200

Done = Callable[[Any, ClusterError | None], None]
Step = Callable[[int], Generator[Request, object, object]]


@dataclass(frozen=True, slots=True)
class SimLinkSecurity:
    """Link sessions in a run ([cluster] link_sessions, link_credentials)."""

    sessions: bool = False
    credentials: str = ""
    keys: Callable[[], str] | None = None  # seeded: reproducible keys

    def new_key(self) -> str:
        """A new link's key, stored as hex (none when sessions are off)."""
        if not self.sessions or self.keys is None:
            return ""
        return hashlib.sha256(self.keys().encode()).hexdigest()


class World(Protocol):
    queue: EventQueue
    clusters: dict[str, SimCluster]
    network: Network
    sizes: DriverSettings
    metrics: Metrics
    link_security: SimLinkSecurity

    def reachable(self, a: str, b: str) -> bool: ...
    def logical_bytes(self, effect: core.AppendBatch) -> int: ...
    def topic_deleted(self, cluster: str, topic: str, partitions: int) -> None: ...
    def offsets_moved(self, cluster: str, cuts: Sequence[GroupCut]) -> None: ...
    def recovery_reported(self, cluster: str, rows: Sequence[PartitionRow]) -> None: ...
    def contract_broken(self, invariant: str, detail: str) -> None: ...
    def checkpoint_reached(self, cluster: str, link: str, point: str) -> None: ...
    def reversal_rolled_back(self, cluster: str, link: str) -> None: ...


class Operators:
    def __init__(self, world: World, observer: Observer, link_ids: Callable[[], str]) -> None:
        self.world = world
        self.observer = observer
        self.link_ids = link_ids
        self.drivers: dict[tuple[str, str], LinkDriver] = {}
        self.retired_fetch_rounds = 0
        self._hosts: dict[str, SimHost] = {}
        # Whether verbs started now count in actions_ok / actions_failed (the
        # world's own setup steps do not).
        self.counting = True
        # Every attach and detach that answered success (invariant 12).
        self.admin_changes: list[AdminChange] = []
        self._rotations = 0  # link credentials replaced (`rotate_credential`)

    # -- what the shell asks of the world (sim.operator_shell.Links) ------------------------

    def cluster_at(self, address: str) -> SimCluster | None:
        return self.world.clusters.get(address.split(":", 1)[0]) if address else None

    def can_talk(self, a: str, b: str) -> bool:
        return self.world.reachable(a, b)

    def logical_bytes(self, effect: core.AppendBatch) -> int:
        return self.world.logical_bytes(effect)

    def host(self, cluster: SimCluster) -> SimHost:
        host = self._hosts.get(cluster.cluster_id)
        if host is None:
            host = SimHost(cluster, self.world.queue, self)
            self._hosts[cluster.cluster_id] = host
        return host

    def checkpoint(self, cluster: SimCluster, request: Checkpoint) -> None:
        """A durable procedure's step ended: the world may crash a cluster
        here (`World.checkpoint_reached`)."""
        self.world.checkpoint_reached(cluster.cluster_id, request.link, request.point)

    def link_changed(self, cluster: SimCluster, name: str) -> None:
        """A link changed: start its driver if this cluster dials it and has
        none, and wake it."""
        config = cluster.links.configs.get(name)
        if config is None:
            return
        key = (cluster.cluster_id, name)
        driver = self.drivers.get(key)
        if driver is None or driver.stopped:
            if config.connection_direction != "local_dials":
                return
            w = self.world
            driver = LinkDriver(
                name, cluster, self, w.queue, w.network, w.sizes, self.observer,
                secure=w.link_security.sessions,
            )
            self.drivers[key] = driver
            driver.start()
        driver.wake()

    def link_deleted(self, cluster: SimCluster, name: str) -> None:
        self._retire(cluster.cluster_id, name)

    def _retire(self, cid: str, name: str) -> None:
        driver = self.drivers.pop((cid, name), None)
        if driver is not None:
            driver.stop()
            self.retired_fetch_rounds += driver.fetch_rounds

    def fetch_rounds(self) -> int:
        """Fetch rounds every driver finished, those gone included."""
        live = sum(d.fetch_rounds for _k, d in sorted(self.drivers.items()))
        return self.retired_fetch_rounds + live

    def connections_reset(self, cid: str) -> None:
        """A cluster's process died: its links' drivers die with it, and
        every call to it fails at once (its connections are reset)."""
        for (dialer, name), driver in sorted(self.drivers.items()):
            config = driver.dialer.links.configs.get(name)
            remote = config.remote_cluster_id if config is not None else ""
            if dialer == cid:
                self._retire(dialer, name)
            elif not driver.stopped and remote == cid:
                driver.reset()

    def cluster_restarted(self, cid: str) -> None:
        """A process started on the cluster's stored state: a new driver for
        every link it dials."""
        cluster = self.world.clusters[cid]
        for name in cluster.links.names():
            self.link_changed(cluster, name)

    def cluster_resumed(self, cid: str) -> None:
        """A paused cluster runs again: what its procedures waited for goes on."""
        for _key, driver in sorted(self.drivers.items()):
            driver.resumed(cid)

    def credential_for(self, peer: str) -> str:
        """The link credential `peer` requires now (the run's, until a
        rotation replaced it; "" when the run has none)."""
        if not self.world.link_security.credentials:
            return self.world.link_security.credentials
        return self.world.clusters[peer].link_credentials[0]

    def rotate_credential(self, cid: str, hold_ms: int) -> None:
        """The operator of `cid` replaces the link credential it requires
        (its credentials file now holds only the new one): sessions opened
        with the old one end at their next call, however busy. `hold_ms`
        later the operators of the other clusters set the new one on their
        links to `cid` (`procedures.alter_link`, as alter-link
        --remote-credentials-file does), and sessions open again."""
        node = self.world.clusters[cid]
        self._rotations += 1
        new = f"{self.world.link_security.credentials}-{cid}-{self._rotations}"
        node.link_credentials = (new,)
        self.world.queue.note(f"{cid}: link credential replaced (rotation {self._rotations})")

        def hand_out() -> None:
            for other in sorted(self.world.clusters):
                state = self.world.clusters[other].state
                for name, config in sorted(state.links.configs.items()):
                    if other != cid and config.remote_cluster_id == cid:
                        self.set_credential(other, name, cid, new)

        self.world.queue.after(hold_ms, f"{cid}: new link credential handed out", hand_out)

    def set_credential(self, cluster: str, name: str, peer: str, credential: str) -> None:
        """The operator of `cluster` sets `peer`'s link credential on its link
        `name` (alter-link), and tries again a second later until it is
        taken, while the link exists and `peer` still requires it. Each try
        acts on the cluster as it is then (a restart gives it a new state)."""

        def again(_result: Any, error: ClusterError | None) -> None:
            if error is not None:
                self.world.queue.after(
                    1_000, f"{cluster}: alter_link {name} again", lambda: attempt()
                )

        def attempt() -> None:
            state = self.world.clusters[cluster].state
            config = state.links.configs.get(name)
            wanted = self.world.clusters[peer].link_credentials == (credential,)
            if config is None or config.remote_cluster_id != peer or not wanted:
                return
            self.run(cluster, f"alter_link {name} credentials", [
                lambda now: procedures.alter_link(state, name, {"credentials": credential}, now)
            ], again)  # fmt: skip

        attempt()

    def contract_broken(self, invariant: str, detail: str) -> None:
        self.world.contract_broken(invariant, detail)

    def forge_calls(self, cid: str) -> None:
        """The forge fault: an attacker replays, to `cid`, the last call each
        link made to it (as seen on the wire), and sends one without a
        session. Each must be refused; one served breaks the contract."""
        target = self.world.clusters[cid]
        now = self.world.queue.now_ms
        for (dialer, name), driver in sorted(self.drivers.items()):
            session = driver.session
            if driver.stopped or session is None or session.remote != cid:
                continue
            config = driver.dialer.links.configs.get(name)
            link_id = config.link_id if config is not None else ""
            attempts = [("anonymous", ("", link_id, "push", 0, b"", b""))]
            if session.last is not None:
                attempts.append(("replayed", session.last))
            for what, wire_call in attempts:
                try:
                    target.link_sessions.verify(*wire_call, now)
                except ClusterError as exc:
                    self.world.queue.note(f"forge {what} {dialer}->{cid} {name}: {exc.resource}")
                    continue
                self.world.contract_broken(
                    "link_calls_unforgeable",
                    f"{cid} served a {what} call of link {name!r} from {dialer}",
                )

    def forget(self, cluster: SimCluster, name: str) -> None:
        """The remote deleted the link (LINK_DELETED): delete this half."""
        counting, self.counting = self.counting, False
        self.run(cluster.cluster_id, f"forget_deleted {name}", [
            lambda now: procedures.forget_deleted(cluster.state, name, now)
        ])
        self.counting = counting

    def tell_removals(self) -> None:
        """Every cluster with deleted links whose remote has not confirmed
        tells it again (`procedures.tell_removals`, each handshake interval)."""
        counting, self.counting = self.counting, False
        for cid in sorted(self.world.clusters):
            node = self.world.clusters[cid]
            if node.up and node.links.pending_removals():
                self.run(cid, "tell_removals", [self._tell_step(node)])
        self.counting = counting

    @staticmethod
    def _tell_step(node: SimCluster) -> Step:
        return lambda now: procedures.tell_removals(node.state, now)

    # -- running procedures ------------------------------------------------------------------

    def run(self, cluster: str, label: str, steps: list[Step], done: Done | None = None) -> None:
        """Runs procedures one after the other on `cluster` (an operator
        typing commands); the first refusal stops the sequence."""
        node = self.world.clusters[cluster]
        queue = self.world.queue
        results: list[Any] = []
        counting = self.counting

        def finish(result: Any, error: ClusterError | None) -> None:
            if error is not None:
                if counting:
                    self.world.metrics.add("actions_failed", 1)
                kind = label.split()[0]
                queue.note(f"action {kind} refused: {error.code.name}: {error.message} "
                           f"({label} on {cluster})")
            elif counting:
                self.world.metrics.add("actions_ok", 1)
            if done is not None:
                done(result if error is None else None, error)

        def next_step(index: int) -> None:
            if index == len(steps):
                finish(results[-1] if results else None, None)
                return
            if not node.up:
                finish(None, ClusterError(ErrorCode.NOT_READY, "cluster",
                                          f"cluster {cluster!r} is not serving"))
                return

            def after(result: Any, error: ClusterError | None) -> None:
                if error is not None:
                    finish(None, error)
                    return
                results.append(result)
                next_step(index + 1)

            try:
                procedure = steps[index](queue.now_ms)
            except ClusterError as exc:
                finish(None, exc)
                return
            self.host(node).drive(procedure, after)

        next_step(0)

    # -- the verbs -----------------------------------------------------------------------------

    def create_link(
        self,
        cluster: str,
        name: str,
        peer: str,
        prefixes: tuple[tuple[str, str], ...] = (),
        kinds: tuple[str, ...] = ("topic",),
        leader: str = "remote",
        remote_dials: bool = False,
        done: Done | None = None,
        policies: dict[str, str] | None = None,
    ) -> None:
        """create-link on `cluster` to `peer` (`policies`: create-link
        --config), then attach each [local, remote] prefix of each kind with
        `leader` leading (creating the local namespace first when missing, as
        an operator must)."""
        node = self.world.clusters[cluster]
        direction = "remote_dials" if remote_dials else "local_dials"
        link_id = self.link_ids()
        steps: list[Step] = [
            lambda now: procedures.create_link(
                node.state, name, link_id, address_of(peer),
                self.credential_for(peer), direction, address_of(cluster), now,
                self.world.link_security.new_key(), policies,
            )
        ]
        for local, remote in prefixes:
            for kind in kinds:
                steps.append(self._attach_step(node, name, kind, local, remote, leader))
        if remote_dials and self.world.link_security.credentials:
            # The peer dials: its credential for this cluster comes from its
            # operator (a link's credentials never cross), as ccr-chaos does.
            def created(result: Any, error: ClusterError | None) -> None:
                if peer in self.world.clusters and name in self.world.clusters[peer].links.configs:
                    self.set_credential(peer, name, cluster, self.credential_for(cluster))
                if done is not None:
                    done(result, error)

            self.run(cluster, f"create_link {name}", steps, created)
            return
        self.run(cluster, f"create_link {name}", steps, done)

    def _attach_step(
        self, node: SimCluster, link: str, kind: str, local: str, remote: str, leader: str
    ) -> Step:
        def step(now: int) -> Generator[Request, object, object]:
            rtype = ResourceType.parse(kind)
            if node.state.namespaces.find(rtype, local) is None:
                # The operator's create-namespace first (attaching needs it).
                yield Execute(tuple(node.state.create_namespace(rtype, local)))
            result = yield from procedures.attach(
                node.state, link, kind, local, remote, leader, now
            )
            self._changed(node, link, kind, local, result)
            return result

        return step

    def _changed(
        self, node: SimCluster, link: str, kind: str, local: str, result: procedures.AdminResult
    ) -> None:
        """An attach or detach answered: done (both sides have the change:
        judged now, and again once the link converges) or pending (the
        remote had not confirmed it: no promise made)."""
        config = node.links.configs.get(link)
        mapping = None
        if config is not None:
            # The entry of that local prefix just changed: the newest one.
            entries = [m for m in config.mappings.values()
                       if (m.resource_type, m.local_prefix) == (kind, local)]
            mapping = max(entries, key=lambda m: m.version, default=None)
        if config is None or mapping is None or not result.done:
            return
        self.admin_changes.append(
            AdminChange(
                node.cluster_id, config.link_id, mapping.key, mapping.version, mapping.attached,
            )
        )
        remote = self.world.clusters.get(config.remote_cluster_id)
        theirs_config = remote.state.links.configs.get(link) if remote is not None else None
        if theirs_config is None or theirs_config.link_id != config.link_id:
            theirs = None
        else:
            theirs = theirs_config.mappings.get(mapping.mirrored_key)
        if theirs is None or theirs.version < mapping.version:
            what = "attached" if mapping.attached else "detached"
            self.world.contract_broken(
                "12 admin effects",
                f"{node.cluster_id}: {kind} namespace {local!r} on link {link!r} answered "
                f"{what} (done) at t={self.world.queue.now_ms} ms, but "
                f"{config.remote_cluster_id} does not hold the change: "
                + (str(theirs.to_record()) if theirs is not None else "no such mapping there"),
            )

    def _detach_step(self, node: SimCluster, link: str, kind: str, local: str) -> Step:
        def step(now: int) -> Generator[Request, object, object]:
            result = yield from procedures.detach(node.state, link, kind, local, now)
            self._changed(node, link, kind, local, result)
            return result

        return step

    def attach(
        self,
        cluster: str,
        link: str,
        local: str,
        remote: str,
        leader: str,
        kind: str = "topic",
        done: Done | None = None,
    ) -> None:
        node = self.world.clusters[cluster]
        self.run(cluster, f"attach {link} {local}", [
            self._attach_step(node, link, kind, local, remote, leader)
        ], done)

    def detach(
        self, cluster: str, link: str, local: str, kind: str = "topic", done: Done | None = None
    ) -> None:
        node = self.world.clusters[cluster]
        self.run(cluster, f"detach {link} {local}", [
            self._detach_step(node, link, kind, local)
        ], done)

    def delete_link(self, cluster: str, link: str, done: Done | None = None) -> None:
        state = self.world.clusters[cluster].state
        self.run(cluster, f"delete_link {link}", [
            lambda now: procedures.delete_link(state, link, now)
        ], done)

    def set_mode(self, cluster: str, link: str, mode: str, done: Done | None = None) -> None:
        state = self.world.clusters[cluster].state
        now = self.world.queue.now_ms
        config = state.links.configs.get(link)
        switching = (
            config is not None and config.mode != LinkMode.SYNC and mode.upper() == LinkMode.SYNC
        )
        before = state.links.state_name(link) if config is not None else ""
        following = config is not None and state.links.state_of(link) is LinkState.FOLLOWING
        behind = state.links.lagging_partitions(link, now) if config is not None else []

        def finish(result: Any, error: ClusterError | None) -> None:
            # Spec section 4: SYNC only from FOLLOWING, every partition caught up.
            if error is None and switching and (not following or behind):
                self.world.contract_broken(
                    "12 admin effects",
                    f"{cluster}: set-mode SYNC on link {link!r} answered success at t={now} ms "
                    f"while the link was {before}" + (f", behind: {behind[0]}" if behind else ""),
                )
            if done is not None:
                done(result, error)

        self.run(cluster, f"set_mode {link} {mode}", [
            lambda now: procedures.set_mode(state, link, mode, now)
        ], finish)

    def failover(self, cluster: str, link: str, force: bool, done: Done | None = None) -> None:
        state = self.world.clusters[cluster].state
        self.run(cluster, f"failover {link}", [
            lambda now: procedures.failover(state, link, force, now)
        ], done)

    def alter_link(
        self, cluster: str, link: str, changes: dict[str, str], done: Done | None = None
    ) -> None:
        """ccr-admin alter-link (`procedures.alter_link`): here, gap.policy."""
        state = self.world.clusters[cluster].state
        label = " ".join(f"{k}={v}" for k, v in sorted(changes.items()))
        self.run(cluster, f"alter_link {link} {label}", [
            lambda now: procedures.alter_link(state, link, dict(changes), now)
        ], done)

    def resume_partition(
        self, cluster: str, link: str, topic: str, partition: int, done: Done | None = None
    ) -> None:
        """ccr-admin resume-partition (`procedures.resume_partition`)."""
        state = self.world.clusters[cluster].state
        self.run(cluster, f"resume_partition {link} {topic}-{partition}", [
            lambda _now: procedures.resume_partition(state, link, topic, partition)
        ], done)

    def set_reserved(
        self, cluster: str, kind: str, prefix: str, reserved: bool, done: Done | None = None
    ) -> None:
        state = self.world.clusters[cluster].state
        rtype = ResourceType.parse(kind)
        self.run(cluster, f"set_reserved {prefix} {reserved}", [
            lambda now: procedures.set_reserved(state, rtype, prefix, reserved, now)
        ], done)

    def recover(
        self,
        cluster: str,
        link: str,
        requested: list[tuple[str, str, str | None]],
        confirm: bool,
        done: Done | None = None,
    ) -> None:
        state = self.world.clusters[cluster].state

        def finish(plan: Any, error: ClusterError | None) -> None:
            if isinstance(plan, RecoveryPlan) and plan.confirmed:
                self.world.offsets_moved(cluster, plan.groups)
                self.world.recovery_reported(cluster, plan.partitions)
            if error is not None and error.code is ErrorCode.NO_SHARED_HISTORY:
                self._judge_unrelated(cluster, link, error)
            if done is not None:
                done(plan, error)

        self.run(cluster, f"recover {link}", [
            lambda now: procedures.recover(state, link, requested, confirm, now)
        ], finish)

    def _judge_unrelated(self, cluster: str, link: str, error: ClusterError) -> None:
        """Recovery refused a topic as unrelated to the remote's: true only
        if no partition of it shares a record or a named origin with the
        remote's (spec section 8: an empty shared prefix is shared history)."""
        topic = error.resource.removeprefix("topic ").strip("'")
        node = self.world.clusters[cluster]
        config = node.state.links.configs.get(link)
        remote = self.world.clusters.get(config.remote_cluster_id) if config else None
        if remote is None or topic not in node.state.topics or topic not in remote.state.topics:
            return
        mine, theirs = node.state.topics[topic], remote.state.topics[topic]
        for p in range(min(len(mine.partitions), len(theirs.partitions))):
            local = histories.local_side(node.state, topic, p)
            other = histories.local_side(remote.state, topic, p)
            found = histories.compare(local, other)
            if histories.provenance_related(local, other) or (
                found.shared and found.common_offset > max(local.log_start_offset, 0)
            ):
                self.world.contract_broken(
                    "12 admin effects",
                    f"{cluster}: recover on link {link!r} refused {topic!r} as unrelated "
                    f"(NO_SHARED_HISTORY), but {topic}-{p} shares history with "
                    f"{remote.cluster_id}'s",
                )
                return

    def reverse(self, cluster: str, link: str, timeout_ms: int, done: Done | None = None) -> None:
        state = self.world.clusters[cluster].state

        def finish(report: Any, error: ClusterError | None) -> None:
            if isinstance(report, procedures.ReverseReport) and not report.ok:
                self.world.metrics.add("reverse_failed", 1)
                error = report.error
                if report.rolled_back:
                    self.world.reversal_rolled_back(cluster, link)
            elif report is not None:
                self.world.metrics.add("reversals", 1)
            if done is not None:
                done(report, error)

        self.run(cluster, f"reverse {link}", [
            lambda now: procedures.reverse(state, link, timeout_ms, now)
        ], finish)

    def manual_reverse(
        self,
        cluster: str,
        link: str,
        kind: str,
        local: str,
        remote: str,
        wait: bool,
        done: Done | None = None,
    ) -> None:
        """KIP-986's reversal by hand, run on the leader: reserve the leader
        namespace, watch (bounded) until the remote holds its log end (if
        `wait`), detach, attach the other way, then clear the reservation on
        the new leader. Each step is the verb an operator types."""
        node = self.world.clusters[cluster]
        config = node.links.get(link)
        peer = config.remote_cluster_id
        rtype = ResourceType.parse(kind)
        steps: list[Step] = [
            lambda now: procedures.set_reserved(node.state, rtype, local, True, now),
        ]
        if wait:
            steps.append(lambda now: self._watch_caught_up(node, link, now))
        steps += [
            self._detach_step(node, link, kind, local),
            self._attach_step(node, link, kind, local, remote, "remote"),
        ]

        def swapped(result: Any, error: ClusterError | None) -> None:
            if error is not None:
                if done is not None:
                    done(None, error)
                return
            other = self.world.clusters[peer]
            self.run(peer, f"set_reserved {remote} off", [
                lambda now: procedures.set_reserved(other.state, rtype, remote, False, now)
            ], done)

        self.run(cluster, f"manual_reverse {link} {local}", steps, swapped)

    def release_reattach(
        self,
        cluster: str,
        link: str,
        local: str,
        remote: str,
        hold_ms: int,
        done: Done | None = None,
    ) -> None:
        """On a follower: detach the followed topic namespace, clear its
        reservation, let clients write there for `hold_ms` (the roaming
        producers find it writable), then attach it again following the
        remote. Each step is the verb an operator types; the attach is
        refused when following would cut what those clients wrote."""
        node = self.world.clusters[cluster]
        rtype = ResourceType.TOPIC

        def hold(now: int) -> Generator[Request, object, None]:
            yield Sleep(hold_ms)

        self.run(cluster, f"release_reattach {link} {local}", [
            self._detach_step(node, link, "topic", local),
            lambda now: procedures.set_reserved(node.state, rtype, local, False, now),
            hold,
            self._attach_step(node, link, "topic", local, remote, "remote"),
        ], done)

    def _watch_caught_up(
        self, node: SimCluster, link: str, now: int
    ) -> Generator[Request, object, None]:
        """The operator watches describe-link until no partition lags (the
        KIP: wait for metadata to propagate), at most MANUAL_WAIT_MS_MAX."""
        deadline = now + MANUAL_WAIT_MS_MAX
        while now < deadline:
            state = node.links.state_of(link)
            behind = node.links.lagging_partitions(link, now)
            if state in (LinkState.FOLLOWING, LinkState.IN_SYNC) and not behind:
                return
            now = yield from sleep(MANUAL_POLL_MS)

    def create_topic(self, cluster: str, topic: str, partitions: int) -> None:
        node = self.world.clusters[cluster]
        try:
            _t, effects = node.state.create_topic(topic, partitions, {}, node.topic_ids())
        except ClusterError as exc:
            self._refused(f"create_topic {topic}", cluster, exc)
            return
        node.execute(effects, "metadata", self.world.logical_bytes)
        self.world.metrics.add("actions_ok", 1)

    def delete_topic(self, cluster: str, topic: str) -> None:
        node = self.world.clusters[cluster]
        partitions = len(node.state.topics[topic].partitions) if topic in node.state.topics else 0
        try:
            effects = node.state.delete_topic(topic)
        except ClusterError as exc:
            self._refused(f"delete_topic {topic}", cluster, exc)
            return
        node.execute(effects, "metadata", self.world.logical_bytes)
        node.notify_data((topic, p) for p in range(partitions))  # waiting writes fail
        self.world.topic_deleted(cluster, topic, partitions)
        self.world.metrics.add("actions_ok", 1)

    def add_partitions(self, cluster: str, topic: str, total: int) -> None:
        node = self.world.clusters[cluster]
        try:
            _t, effects = node.state.create_partitions(topic, total)
        except ClusterError as exc:
            self._refused(f"add_partitions {topic}", cluster, exc)
            return
        node.execute(effects, "metadata", self.world.logical_bytes)
        self.world.metrics.add("actions_ok", 1)

    def _refused(self, label: str, cluster: str, exc: ClusterError) -> None:
        self.world.metrics.add("actions_failed", 1)
        self.world.queue.note(f"action {label.split()[0]} refused: {exc.code.name}: "
                              f"{exc.message} ({label} on {cluster})")
