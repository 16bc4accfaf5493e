"""The dialing side of one replication link, in virtual time.

The simulator's transport for the rounds of `linkd.core.link_rounds`, which
the daemon (linkd/replication.py, `LinkRunner`) carries over gRPC. What a
link does next is the core's `next_steps`; this module decides nothing about
replication: it only schedules calls, moves their messages over the
simulated network, holds long polls, charges the I/O devices and the rate
limit, and carries out effects.

Rules (the daemon's, with the core's constants):
- Three lanes run beside each other, each one call at a time: control
  (handshake every HANDSHAKE_INTERVAL_MS; discovery of the source's topics
  and group offsets every DISCOVERY_INTERVAL_MS while this side follows),
  pull (a replica fetch for every follower partition, while this side
  follows topics) and push (serve the follower's last fetch request here and
  push the answer, with this side's namespaces and group offsets each
  discovery interval, while this side leads). One link may carry mappings in
  both directions: it pulls and pushes at once. Pull and push wait for the
  first handshake.
- A call whose answer does not arrive within the core's CALL_TIMEOUT_MS (a
  replica fetch: `rounds.fetch_deadline_ms`, its long poll included) failed:
  the core hears `on_contact_lost`, and the lane retries after a back-off
  doubling from BACKOFF_MIN_MS to BACKOFF_MAX_MS.
- A fetch is answered at once when the answer is ready (bytes or a
  divergence: `FetchAnswer.ready`), otherwise parked until a high watermark of
  a partition it reads moves or the fetch's max wait passes (long poll); a
  pushing leader holds its own long poll the same way before it pushes.
- Fetched batches are read from the source's I/O device (shared with
  producers) within its replication rate limit; the answer leaves when the
  read is done. The follower's next fetch starts once its appends are
  durable.
- A fetch answer tells the follower the source's mode through its SYNC
  verdict; when it disagrees with the follower's config, the control lane
  handshakes at once.
- The remote is whatever cluster the link's `remote_bootstrap` names now
  (an operator may re-point it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from linkd.core import cluster as core
from linkd.core import link_auth as auth
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import replication as rep
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig, LinkMode
from linkd.core.requests import Handshake
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.network import Network
from sim.operator_shell import SimHost

CONNECTION_REFUSED_MS = 5
BACKOFF_MIN_MS = 100
BACKOFF_MAX_MS = 2_000
CONTROL_MESSAGE_BYTES = 1_024
PER_PARTITION_BYTES = 64

# Reply continuations: (what the dialer does with the answer, its size).
Apply = Callable[[], None]
Reply = Callable[[Apply, int], None]
Serve = Callable[[Reply], None]
# Logical sizes of fetched batches: (source topic, partition, base offset) -> bytes.
Sizes = dict[tuple[str, int, int], int]


@dataclass(frozen=True, slots=True)
class FetchSizes:
    fetch_max_bytes: int = 8 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    max_wait_ms: int = 500


class Observer(Protocol):
    def logical_bytes(self, effect: core.AppendBatch) -> int: ...
    def follower_applied(self, cluster: SimCluster, link_name: str) -> None: ...


class Peers(Protocol):
    def cluster_at(self, address: str) -> SimCluster | None: ...
    def host(self, cluster: SimCluster) -> SimHost: ...
    def forget(self, cluster: SimCluster, name: str) -> None: ...


def wire(config: LinkConfig) -> LinkConfig:
    """A configuration as it crosses the network: a copy of what may cross
    (`LinkConfig.shared`: no secrets, not the address the sender dials)."""
    return LinkConfig.from_record(config.shared().to_record())


@dataclass(slots=True)
class Lane:
    name: str
    call_id: int = 0
    timeout: Timer | None = None
    backoff_ms: int = BACKOFF_MIN_MS


def sim_link_key(stored_key: str, credentials: str) -> bytes:
    """A link's key as the simulator stores it (hex, unsealed: the simulator
    has no password encoder)."""
    return auth.link_key_or_legacy(bytes.fromhex(stored_key), credentials)


# A call as it crossed the wire: session id, link id, method, seq, digest, mac.
WireCall = tuple[str, str, str, int, bytes, bytes]


@dataclass(slots=True)
class SimSession:
    """The session a driver opened with `remote` (LinkRunner._session)."""

    signer: auth.CallSigner
    remote: str
    # The last call the remote served, as an eavesdropper saw it (the forge
    # fault replays it: a call in flight is not yet a replay).
    last: WireCall | None = None

    def sign(self, link_id: str, method: str) -> WireCall:
        digest = auth.request_digest(f"{link_id}|{method}|{self.signer.seq}".encode())
        seq, mac = self.signer.sign(method, digest)
        return (self.signer.session_id, link_id, method, seq, digest, mac)


@dataclass(slots=True)
class _Timers:
    handshake_ms: int | None = None
    discovery_ms: int | None = None
    push_discovery_ms: int | None = None
    handshaken: bool = False


class LinkDriver:
    def __init__(
        self,
        name: str,
        dialer: SimCluster,
        peers: Peers,
        queue: EventQueue,
        network: Network,
        sizes: FetchSizes,
        observer: Observer,
        secure: bool = False,
    ) -> None:
        self.name = name
        # Link sessions on every call (the scenario's [cluster] link_sessions).
        self.secure = secure
        self.session: SimSession | None = None
        self.opening: str | None = None  # the lane opening a session
        self.dialer = dialer
        self.peers = peers
        self.queue = queue
        self.network = network
        self.sizes = sizes
        self.observer = observer
        self.stopped = False
        self.timers = _Timers()
        self.held_offsets: list[msync.GroupOffset] = []
        self.next_fetch: rounds.FetchRequest | None = None
        self.fetch_rounds = 0
        self.lanes = {n: Lane(n) for n in ("control", "pull", "push")}
        self._steps: dict[str, Callable[[], None]] = {
            "control": self._control,
            "pull": self._pull,
            "push": self._push,
        }

    # -- scheduling ----------------------------------------------------------------

    def start(self) -> None:
        for lane in ("control", "pull", "push"):
            self._later(lane, 0)

    def stop(self) -> None:
        self.stopped = True
        for lane in self.lanes.values():
            lane.call_id += 1
            if lane.timeout is not None:
                lane.timeout.cancel()

    def reset(self) -> None:
        """A new connection (the old one was reset): calls in flight are
        dropped and every lane starts again at once."""
        for lane in self.lanes.values():
            lane.call_id += 1
            if lane.timeout is not None:
                lane.timeout.cancel()
            lane.backoff_ms = BACKOFF_MIN_MS
        self.next_fetch = None
        self.opening = None
        self.start()

    def wake(self) -> None:
        """Mappings changed: handshake and discover now (runner.wake)."""
        self.timers.handshake_ms = None
        self.timers.discovery_ms = None
        self.timers.push_discovery_ms = None

    def _config(self) -> LinkConfig | None:
        return self.dialer.links.configs.get(self.name)

    def _remote(self, config: LinkConfig) -> SimCluster | None:
        return self.peers.cluster_at(config.value("remote_bootstrap"))

    def _later(self, lane: str, delay_ms: int) -> None:
        step = self._steps[lane]
        self.queue.after(delay_ms, f"link {self.name} {lane}", step)

    def _ready(self, lane: str) -> tuple[LinkConfig, rounds.NextSteps] | None:
        """The lane may act now: the link exists and this cluster is up."""
        if self.stopped:
            return None
        if not self.dialer.up:
            self._later(lane, BACKOFF_MAX_MS)
            return None
        config = self._config()
        if config is None:
            self.stop()
            return None
        t = self.timers
        steps = rounds.next_steps(
            config, self.queue.now_ms, t.handshake_ms, t.discovery_ms, t.push_discovery_ms
        )
        return config, steps

    # -- one call: request over the network, served by the remote, answer back ----------------

    def _call(
        self,
        lane_name: str,
        remote: SimCluster,
        kind: str,
        size: int,
        serve: Serve,
        signed: bool = True,
        timeout_ms: int = rounds.CALL_TIMEOUT_MS,
    ) -> None:
        """`serve(reply)` runs on the remote; it calls reply(apply, size) once
        (maybe later: long poll) with the dialer-side continuation. In secure
        runs a `signed` call carries the session's proof, which the remote
        checks before serving it (ReplicationService._verify)."""
        lane = self.lanes[lane_name]
        lane.call_id += 1
        call_id = lane.call_id
        wire_call: WireCall | None = None
        session: SimSession | None = None
        if self.secure and signed:
            config = self._config()
            session = self.session
            if config is None or session is None or session.remote != remote.cluster_id:
                self._failed(lane_name, call_id)  # the session went meanwhile: open another
                return
            wire_call = session.sign(config.link_id, kind)
        d, r = self.dialer.cluster_id, remote.cluster_id
        lane.timeout = self.queue.after(
            timeout_ms,
            f"link {self.name} {kind} timeout",
            lambda: self._failed(lane_name, call_id),
        )
        if remote.crashed:
            # A dead process refuses the connection at once (a paused one
            # keeps it open: then the call waits for its deadline).
            self.queue.after(
                CONNECTION_REFUSED_MS,
                f"link {self.name} {kind} refused",
                lambda: self._failed(lane_name, call_id),
            )
            return
        arrive = self.network.deliver_at(d, r, size, self.queue.now_ms)
        if arrive is None:
            return
        # A process that dies ends its connections: what the call carried on
        # either side is dropped (the dialer's lane times out and retries).
        lives = (self.dialer.incarnation, remote.incarnation)

        def alive() -> bool:
            return (self.dialer.incarnation, remote.incarnation) == lives

        def reply(apply: Apply, answer_bytes: int) -> None:
            if call_id != lane.call_id or not remote.up or not alive():
                return
            back = self.network.deliver_at(r, d, answer_bytes, self.queue.now_ms)
            if back is None:
                return

            def receive() -> None:
                if call_id != lane.call_id or not self.dialer.up or self.stopped or not alive():
                    return
                if lane.timeout is not None:
                    lane.timeout.cancel()
                lane.backoff_ms = BACKOFF_MIN_MS
                try:
                    apply()
                except ClusterError as exc:
                    self.queue.note(f"link {self.name} {kind} refused: {exc.code.name}")
                    self._failed(lane_name, call_id)

            self.queue.at(back, f"link {self.name} {kind} answer", receive)

        def at_remote() -> None:
            if call_id != lane.call_id or not remote.up or not alive():
                return
            try:
                if wire_call is not None and session is not None:
                    remote.link_sessions.verify(*wire_call, self.queue.now_ms)
                    session.last = wire_call
                serve(reply)
            except ClusterError as exc:
                # The refusal travels back as the answer (a gRPC status).
                self.queue.note(f"link {self.name} {kind} refused by remote: {exc.code.name}")
                refusal = exc
                reply(lambda: self._refused(refusal), CONTROL_MESSAGE_BYTES)

        self.queue.at(arrive, f"link {self.name} {kind} request", at_remote)

    def _failed(self, lane_name: str, call_id: int) -> None:
        lane = self.lanes[lane_name]
        if call_id != lane.call_id or self.stopped:
            return
        if self.opening == lane_name:
            self.opening = None
        lane.call_id += 1
        if self.dialer.up:
            self.dialer.links.on_contact_lost(self.name, self.queue.now_ms)
        delay = lane.backoff_ms
        lane.backoff_ms = min(BACKOFF_MAX_MS, lane.backoff_ms * 2)
        self.queue.after(delay, f"link {self.name} {lane_name} retry", self._steps[lane_name])

    def _refused(self, exc: ClusterError) -> None:
        """The remote refused a call: the link's lane fails and backs off;
        LINK_DELETED means the remote deleted the link, so this side deletes
        its half (LinkRunner._handshake_once)."""
        if exc.code == ErrorCode.LINK_DELETED:
            self.peers.forget(self.dialer, self.name)
            return
        if exc.code == ErrorCode.LINK_AUTHENTICATION_FAILED:
            self.session = None  # the next call opens another
        raise exc

    # -- link sessions (LinkRunner._ensure_session, linkd/link_sessions.py) --------------------

    def _without_session(self, lane: str, remote: SimCluster) -> bool:
        """Secure runs: True when `lane` must wait for a session with
        `remote`. One lane opens it (Challenge, then OpenSession: a round trip
        each); the others look again shortly."""
        if not self.secure:
            return False
        if self.session is not None and self.session.remote == remote.cluster_id:
            return False
        if self.opening is None:
            self.opening = lane
            self._challenge(lane, remote)
        else:
            self._later(lane, BACKOFF_MIN_MS)
        return True

    def _challenge(self, lane: str, remote: SimCluster) -> None:
        def serve(reply: Reply) -> None:
            nonce = remote.nonce()
            remote.link_sessions.challenge(nonce, self.queue.now_ms)
            required = remote.link_credentials != ("",)
            reply(lambda: self._open(lane, remote, nonce, required), CONTROL_MESSAGE_BYTES)

        self._call(lane, remote, "challenge", CONTROL_MESSAGE_BYTES, serve, signed=False)

    def _open(self, lane: str, remote: SimCluster, nonce: bytes, required: bool) -> None:
        config = self._config()
        if config is None:
            return
        credentials = config.value("credentials")
        opening = auth.open_request(
            config.link_id, self.name, self.dialer.cluster_id, remote.cluster_id, nonce,
            self.dialer.nonce(), sim_link_key(config.value("link_key"), credentials),
            credentials if required else "", creating=False,
        )  # fmt: skip

        def serve(reply: Reply) -> None:
            found = remote.links.secrets(opening.request.link_id)
            known = None if found is None else auth.KnownLink(
                found.remote_cluster_id, sim_link_key(found.link_key, found.credentials)
            )
            session_id = remote.nonce().hex()[:32]
            opened = remote.link_sessions.open(
                opening.request, known, remote.link_credentials, self.queue.now_ms, session_id
            )
            proof = opened.proof
            reply(lambda: self._opened(lane, remote, opening, session_id, proof),
                  CONTROL_MESSAGE_BYTES)

        self._call(lane, remote, "open-session", CONTROL_MESSAGE_BYTES, serve, signed=False)

    def _opened(
        self, lane: str, remote: SimCluster, opening: auth.Opening, session_id: str, proof: bytes
    ) -> None:
        key = auth.opened_session_key(opening, session_id, proof)
        self.session = SimSession(auth.CallSigner(session_id, key), remote.cluster_id)
        self.opening = None
        self._later(lane, 0)

    def _unreachable(self, lane: str) -> None:
        """The link names no cluster that exists: a call that cannot start."""
        self.lanes[lane].call_id += 1
        self._failed(lane, self.lanes[lane].call_id)

    # -- control: handshake and discovery (LinkRunner._control) -----------------------------------

    def _control(self) -> None:
        ready = self._ready("control")
        if ready is None:
            return
        config, steps = ready
        remote = self._remote(config)
        if remote is None and (steps.handshake or steps.discover):
            self._unreachable("control")
            return
        if (steps.handshake or steps.discover) and remote is not None and (
            self._without_session("control", remote)
        ):
            return
        if steps.handshake and remote is not None:
            self._call("control", remote, "handshake", CONTROL_MESSAGE_BYTES,
                       self._serve_handshake(remote, config))
        elif steps.discover and remote is not None:
            self._call("control", remote, "discover", CONTROL_MESSAGE_BYTES,
                       self._serve_discovery(remote, config))
        else:
            self._later("control", rounds.IDLE_POLL_MS)

    def _serve_handshake(self, remote: SimCluster, config: LinkConfig) -> Serve:
        sent = wire(config)

        def serve(reply: Reply) -> None:
            answer = self.peers.host(remote).serve(Handshake(sent))
            assert isinstance(answer, LinkConfig)
            mine = wire(answer)

            def apply() -> None:
                now = self.queue.now_ms
                accepted = rounds.accept_handshake_answer(self.dialer.state, self.name, mine, now)
                self.dialer.execute(accepted.effects, "metadata", self.observer.logical_bytes)
                for note in accepted.notes:
                    self.queue.note(f"{self.dialer.cluster_id} info: {note}")
                self.timers.handshake_ms = now
                self.timers.handshaken = True
                self._later("control", 0)

            reply(apply, CONTROL_MESSAGE_BYTES)

        return serve

    def _serve_discovery(self, remote: SimCluster, config: LinkConfig) -> Serve:
        topic_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "topic")]
        group_prefixes = [m.remote_prefix for m in rep.follower_mappings(config, "group")]
        principal_prefixes = [
            m.remote_prefix for m in rep.follower_mappings(config, "principal")
        ]
        link_id = config.link_id
        sent_ms = self.queue.now_ms

        def serve(reply: Reply) -> None:
            state = remote.state
            source_config = state.links.by_id(link_id)
            remote.links.on_contact(source_config.name, self.queue.now_ms)
            namespaces = [rounds.source_topics(state, source_config, p) for p in topic_prefixes]
            namespaces += [
                rounds.source_principals(state, source_config, p) for p in principal_prefixes
            ]
            offsets: list[msync.GroupOffset] = []
            for prefix in group_prefixes:
                offsets += rounds.source_group_offsets(state, prefix)
            size = CONTROL_MESSAGE_BYTES + 128 * sum(len(ns.topics) for ns in namespaces)

            def apply() -> None:
                self._apply_topics(namespaces, sent_ms)
                self._apply_group_offsets(offsets + self.held_offsets)
                self.timers.discovery_ms = self.queue.now_ms
                self._later("control", 0)

            reply(apply, size)

        return serve

    def _apply_topics(self, namespaces: list[rounds.SourceNamespace], listed_at_ms: int) -> None:
        """Carries out `rounds.plan_topics` for a discovery answer."""
        config = self._config()
        if config is None:
            return
        plan = rounds.plan_topics(
            self.dialer.state, config, namespaces, self.dialer.topic_ids, listed_at_ms
        )
        self.dialer.execute(plan.effects, "metadata", self.observer.logical_bytes)

    def _apply_group_offsets(self, offsets: list[msync.GroupOffset]) -> None:
        """Carries out `msync.apply_replicated_offsets` for a discovery
        answer; what is held back is sent again with the next."""
        if not offsets:
            self.held_offsets = []
            return
        effects, held = msync.apply_replicated_offsets(
            self.dialer.state, self.name, offsets, self.queue.now_ms, self.dialer.topic_ids()
        )
        self.held_offsets = held
        if effects:
            self.dialer.execute(effects, "offsets", self.observer.logical_bytes)
        self.observer.follower_applied(self.dialer, self.name)

    # -- pull: this side follows (LinkRunner._pull) ----------------------------------------------

    def _pull(self) -> None:
        ready = self._ready("pull")
        if ready is None:
            return
        config, steps = ready
        if not self.timers.handshaken or not steps.pull:
            self._later("pull", rounds.IDLE_POLL_MS)
            return
        remote = self._remote(config)
        if remote is None:
            self._unreachable("pull")
            return
        if self._without_session("pull", remote):
            return
        request = rounds.follower_fetch_request(
            self.dialer.state, config, self.sizes.partition_max_bytes, self.queue.now_ms
        )
        if not request.partitions:
            if self.timers.discovery_ms is not None:
                # Discovered, and nothing to follow yet: nothing lags.
                self.dialer.links.on_fetch_round(self.name, self.queue.now_ms)
            self._later("pull", rounds.IDLE_POLL_MS)
            return
        size = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(request.partitions)

        def serve(reply: Reply) -> None:
            def answered(answer: rounds.FetchAnswer, sizes: Sizes, answer_bytes: int) -> None:
                reply(lambda: self._apply_pulled(answer, request, sizes), answer_bytes)

            def refused(exc: ClusterError) -> None:
                reply(lambda: self._refused(exc), CONTROL_MESSAGE_BYTES)

            self._long_poll(remote, request, True, answered, refused=refused)

        deadline_ms = rounds.fetch_deadline_ms(self.sizes.max_wait_ms)
        self._call("pull", remote, "fetch", size, serve, timeout_ms=deadline_ms)

    def _apply_pulled(
        self, answer: rounds.FetchAnswer, request: rounds.FetchRequest, sizes: Sizes
    ) -> None:
        config = self._config()
        if config is not None and bool(answer.sync_state) != (config.mode == LinkMode.SYNC):
            # The source runs the other mode: learn the change now, not at the
            # next periodic handshake (LinkRunner._pull).
            self.timers.handshake_ms = None
        self.apply_fetched(self.dialer, self.name, answer, request, sizes,
                           lambda: self._later("pull", 0))

    def apply_fetched(
        self,
        follower: SimCluster,
        link_name: str,
        answer: rounds.FetchAnswer,
        request: rounds.FetchRequest,
        sizes: Sizes,
        then: Callable[[], None],
    ) -> None:
        """The core's `apply_fetched` (truncate and append, then, once
        durable, finish the round), on this cluster's procedure host."""
        state = follower.state
        sized = {"replica": self._sized(follower, request.local_of, sizes)}

        def done(_result: object, error: ClusterError | None) -> None:
            if error is not None:
                self.queue.note(f"link {link_name} fetch apply refused: {error.code.name}")
            elif link_name in follower.links.runtime:
                self.fetch_rounds += 1
                self.observer.follower_applied(follower, link_name)
            then()

        self.peers.host(follower).drive(
            rounds.apply_fetched(state, link_name, answer, request.local_of, request.sent_ms),
            done,
            sized,
        )

    def _sized(
        self, follower: SimCluster, local_of: dict[tuple[str, int], str], sizes: Sizes
    ) -> Callable[[core.AppendBatch], int]:
        state = follower.state
        logical: dict[tuple[str, int, int], int] = {}
        for (source_topic, partition, base), size in sorted(sizes.items()):
            local = local_of.get((source_topic, partition))
            if local is not None and local in state.topics:
                logical[(state.topic(local).topic_id, partition, base)] = size

        def sized(effect: core.AppendBatch) -> int:
            key = (effect.topic_id, effect.partition, effect.header.base_offset)
            return logical.get(key, self.observer.logical_bytes(effect))

        return sized

    # -- the source's long poll (serve_fetch) -----------------------------------------------------

    def _long_poll(
        self,
        source: SimCluster,
        request: rounds.FetchRequest,
        from_remote: bool,
        answered: Callable[[rounds.FetchAnswer, Sizes, int], None],
        down: Callable[[], None] | None = None,
        refused: Callable[[ClusterError], None] | None = None,
    ) -> None:
        """Serves a fetch on `source` (`rounds.serve_replica_fetch`), holding it
        until it is ready or its max wait passes; reads charge the source's
        device and rate limit; `answered` gets the answer when the read is done.
        A source that goes down drops the fetch: `down` (if given) is told; a
        fetch the source refuses when it tries again (the link was deleted
        meanwhile) is answered with the refusal (`refused`, else `down`)."""
        deadline_ms = self.queue.now_ms + rounds.served_wait_ms(self.sizes.max_wait_ms)
        watched = [(p.source_topic, p.partition) for p in request.partitions]

        def attempt() -> None:
            if self.stopped:
                return
            if not source.up:
                if down is not None:
                    down()
                return
            now = self.queue.now_ms
            limiter = source.replication_limit
            # Kafka's replication quota: within the quota a fetch reads up to
            # its max bytes (the bytes are taken, into debt if need be); over
            # it, the throttled partitions are left out until the debt is paid.
            within_quota = limiter.available(now) > 0
            budget_bytes = self.sizes.fetch_max_bytes if within_quota else 0
            logical: dict[tuple[str, int, int], int] = {}

            def read(
                topic_id: str, partition: int, start: int, end: int, max_bytes: int
            ) -> tuple[bytes, int]:
                batches, size = source.stores[(topic_id, partition)].read(start, end, max_bytes)
                for b in batches:
                    logical[(topic_id, partition, b.base_offset)] = b.logical_bytes
                return b"".join(b.data for b in batches), size

            try:
                answer = rounds.serve_replica_fetch(
                    source.state,
                    request.link_id,
                    request.partitions,
                    now,
                    read,
                    budget_bytes,
                    self.sizes.partition_max_bytes,
                    from_remote=from_remote,
                )
            except ClusterError as exc:
                self.queue.note(f"link {self.name} fetch refused: {exc.code.name}")
                if refused is not None:
                    refused(exc)
                elif down is not None:
                    down()
                return
            if answer.hw_moved:
                source.notify_data()
            if not answer.ready and now < deadline_ms:
                wait = limiter.wait_ms(1, now) if budget_bytes <= 0 else 0
                if wait > 0:
                    self.queue.at(
                        min(deadline_ms, now + wait), f"link {self.name} throttled", attempt
                    )
                    return
                parked = [True]

                def wake() -> None:
                    if parked[0]:
                        parked[0] = False
                        self.queue.after(0, f"link {self.name} fetch wake", attempt)

                def expire() -> None:
                    if parked[0]:
                        parked[0] = False
                        attempt()

                source.wait_for_data(wake, watched)
                self.queue.at(deadline_ms, f"link {self.name} fetch max wait", expire)
                return
            total = answer.total_bytes
            limiter.take(total, now)
            done = source.disk.reserve(total, now, "replica_read") if total else now
            answer_bytes = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(answer.partitions)
            answer_bytes += total
            names = {t.topic_id: n for n, t in source.state.topics.items()} if logical else {}
            sizes = {(names[tid], p, base): n for (tid, p, base), n in logical.items()}
            self.queue.at(
                done,
                f"link {self.name} fetch read",
                lambda: answered(answer, sizes, answer_bytes),
            )

        attempt()

    # -- push: this side leads (LinkRunner._push) ------------------------------------------------

    def _push(self) -> None:
        ready = self._ready("push")
        if ready is None:
            return
        config, steps = ready
        if not self.timers.handshaken or not steps.push:
            self.next_fetch = None
            self._later("push", rounds.IDLE_POLL_MS)
            return
        remote = self._remote(config)
        if remote is None:
            self._unreachable("push")
            return
        if self._without_session("push", remote):
            return
        namespaces: tuple[rounds.SourceNamespace, ...] = ()
        offsets: tuple[msync.GroupOffset, ...] = ()
        if steps.push_discovery:
            namespaces, offsets = rounds.push_discovery(self.dialer.state, config)
            self.timers.push_discovery_ms = self.queue.now_ms
        nxt = self.next_fetch
        lane = self.lanes["push"]
        generation = lane.call_id
        if nxt is not None and nxt.partitions:

            def answered(answer: rounds.FetchAnswer, sizes: Sizes, answer_bytes: int) -> None:
                if generation != lane.call_id:
                    return  # the lane was reset meanwhile
                push = rounds.Push(config.link_id, namespaces, offsets, answer, nxt.sent_ms)
                self._send_push(remote, push, sizes, answer_bytes)

            def down() -> None:
                # This side went down under its own long poll: the lane
                # starts again once it is back (`_ready` waits for that).
                if generation == lane.call_id:
                    lane.call_id += 1
                    self._later("push", BACKOFF_MAX_MS)

            self._long_poll(self.dialer, nxt, False, answered, down)
            return
        push = rounds.Push(config.link_id, namespaces, offsets)
        if nxt is not None and not namespaces and not offsets:

            def idle() -> None:
                if generation == lane.call_id:
                    self._send_push(remote, push, {}, CONTROL_MESSAGE_BYTES)

            self.queue.after(rounds.IDLE_POLL_MS, f"link {self.name} push idle", idle)
            return
        self._send_push(remote, push, {}, CONTROL_MESSAGE_BYTES)

    def _send_push(self, remote: SimCluster, push: rounds.Push, sizes: Sizes, size: int) -> None:
        if self.stopped:
            return
        if not self.dialer.up:
            self._later("push", BACKOFF_MAX_MS)  # `_ready` waits for this side
            return
        size += 128 * sum(len(ns.topics) for ns in push.namespaces) + 64 * len(push.group_offsets)

        def serve(reply: Reply) -> None:
            state = remote.state
            config = state.links.by_id(push.link_id)
            local_of = rounds.follower_fetch_request(state, config).local_of
            host = self.peers.host(remote)
            sized = {"replica": self._sized(remote, local_of, sizes)}

            def done(nxt: object, error: ClusterError | None) -> None:
                if error is not None:
                    # The refusal travels back (a gRPC status); the next push
                    # asks the follower for a fresh request.
                    self.next_fetch = None
                    refusal = error
                    reply(lambda: self._refused(refusal), CONTROL_MESSAGE_BYTES)
                    return
                assert isinstance(nxt, rounds.FetchRequest)
                self.fetch_rounds += push.data is not None
                self.observer.follower_applied(remote, config.name)
                answer_bytes = CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(nxt.partitions)
                reply(lambda: self._pushed(nxt), answer_bytes)

            host.drive(
                rounds.accept_push(state, push, self.queue.now_ms, remote.topic_ids), done, sized
            )

        self._call("push", remote, "push", size, serve)

    def _pushed(self, nxt: rounds.FetchRequest) -> None:
        self.dialer.links.on_contact(self.name, self.queue.now_ms)
        self.next_fetch = nxt
        self._later("push", 0)


__all__ = ["FetchSizes", "LinkDriver", "Observer", "Peers", "SimSession", "sim_link_key", "wire"]
