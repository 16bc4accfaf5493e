"""The simulator's pump of a link's driver, on virtual time.

When a link acts is decided by the core (`linkd.core.link_driver`: the
lanes, back-off, the push window, cadences, sessions); this module only
answers the lanes' requests on the event queue. A call crosses the
simulated network (`sim.network`) and is served on the remote
(`sim.link_service`), or fails: at its deadline, at once when its
connection is reset, after CONNECTION_REFUSED_MS when the remote's process
is dead (a paused one keeps the connection open and says nothing). An idle
lane waits for its time or a wake. A paused dialer's lanes go on once it
resumes; a crashed one's never do (its restart starts a new driver,
`sim.operators`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from linkd.core import cluster as core
from linkd.core import link_driver as core_driver
from linkd.core import link_rounds as rounds
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_auth import Opening
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    FetchGroupOffsets,
    Forget,
    Idle,
    LaneRequest,
    LinkCall,
    ListSourceTopics,
    OpenSession,
    Receive,
    ReplicaFetch,
    ReplicaPush,
    Send,
    ServeFetch,
    SessionOpened,
    Ticket,
    WakeLanes,
    unanswered,
)
from linkd.core.link_driver import Lane
from linkd.core.links import LinkConfig
from linkd.core.requests import Handshake, Sleep
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.link_service import (
    CONNECTION_REFUSED_MS,
    CONTROL_MESSAGE_BYTES,
    LinkService,
    Observer,
    Peers,
    Reply,
    SimSession,
    Sizes,
    accept_session,
    answer_bytes,
    open_session,
    request_bytes,
)
from sim.network import Network
from sim.operator_shell import LATER, LEAVE, Pump

KIND = {
    Handshake: "handshake", OpenSession: "open-session", ListSourceTopics: "list-topics",
    FetchGroupOffsets: "group-offsets", ReplicaFetch: "fetch", ReplicaPush: "push",
}  # fmt: skip
Resume = Callable[[object], None]
Serve = Callable[[Reply], None]
Arrived = Callable[[Answered, Sizes], None]


@dataclass(slots=True)
class _Call:
    number: int
    call: LinkCall
    timer: Timer | None = None
    answered: Answered | None = None
    resume: Resume | None = None  # the lane waiting for it, if any
    sizes: Sizes = field(default_factory=dict)  # a push's records' logical sizes


@dataclass(slots=True)
class _Lane:
    wake: bool = False
    idle: Timer | None = None
    resume: Resume | None = None  # while idle
    # The fetch answer it applies: the follower's names, the batches' sizes.
    local_of: dict[tuple[str, int], str] = field(default_factory=dict)
    sizes: Sizes = field(default_factory=dict)


class LinkDriver:
    """Pumps the three lanes of one link the `dialer` dials."""

    def __init__(
        self, name: str, dialer: SimCluster, peers: Peers, queue: EventQueue, network: Network,
        settings: core_driver.DriverSettings, observer: Observer, secure: bool = False,
    ) -> None:  # fmt: skip
        self.name, self.dialer, self.peers, self.queue = name, dialer, peers, queue
        self.network, self.observer, self.secure = network, observer, secure
        self.driver = core_driver.LinkDriver(dialer.state, name, dialer.topic_ids, settings)
        self.service = LinkService(name, queue, peers, observer, settings)
        self.session: SimSession | None = None  # runs with [cluster] link_sessions
        self.stopped = False
        self.lanes = {lane: _Lane() for lane in Lane}
        self._calls: dict[int, _Call] = {}
        self._numbers = 0
        self._read: dict[int, Sizes] = {}  # sizes of own reads not yet pushed, by answer

    @property
    def fetch_rounds(self) -> int:
        return self.service.fetch_rounds

    def start(self) -> None:
        host = self.peers.host(self.dialer)
        for lane in Lane:
            sized = {"replica": self._sized(lane)}
            host.drive(self.driver.lane(lane), lambda _r, _e: None, sized, self._answerer(lane))

    def stop(self) -> None:
        self.stopped = True
        for call in self._calls.values():
            if call.timer is not None:
                call.timer.cancel()
        for state in self.lanes.values():
            if state.idle is not None:
                state.idle.cancel()

    def wake(self) -> None:
        """The link changed: handshake and discover now; idle lanes go on."""
        self.driver.wake()
        for lane in Lane:
            self._wake(lane)

    def reset(self) -> None:
        """The connection was reset: every call in flight fails at once."""
        for call in sorted(self._calls.values(), key=lambda c: c.number):
            self._failed(call, "connection reset")

    def resumed(self, cluster_id: str) -> None:
        self.service.resumed(cluster_id)

    # -- the lanes' requests ------------------------------------------------------------------

    def _answerer(self, lane: Lane) -> Pump:
        state = self.lanes[lane]

        def answer(request: LaneRequest, resume: Resume) -> object:
            if self.stopped:
                return LATER  # the driver stopped: the lane ends here
            go = self._go(resume)
            if isinstance(request, Dial | Send):
                call = self._start(request.call, request.timeout_ms)
                return Ticket(call.number) if isinstance(request, Send) else self._wait(call, go)
            if isinstance(request, Receive):
                return self._wait(self._calls[request.ticket.number], go)
            if isinstance(request, Drop):
                for ticket in request.tickets:
                    self._drop(ticket.number)
                return None
            if isinstance(request, Idle):
                if state.wake:
                    state.wake = False
                    return self.queue.now_ms
                state.resume = go
                state.idle = self.queue.after(request.ms, f"link {self.name} {lane} idle",
                                              lambda: self._idle_over(lane))  # fmt: skip
                return LATER
            if isinstance(request, Sleep):
                self.queue.after(request.ms, f"link {self.name} {lane} retry",
                                 lambda: go(self.queue.now_ms))  # fmt: skip
                return LATER
            if isinstance(request, WakeLanes):
                for other in Lane:
                    if other is not lane:
                        self._wake(other)
                return None
            if isinstance(request, ServeFetch):
                self._serve_here(request, go)
                return LATER
            if isinstance(request, Applied):
                if request.records and self.name in self.dialer.links.runtime:
                    self.service.fetch_rounds += 1
                self.observer.follower_applied(self.dialer, self.name)
                return None
            if isinstance(request, Forget):
                self.peers.forget(self.dialer, self.name)
                return None
            return LEAVE

        return answer

    def _go(self, resume: Resume) -> Resume:
        """Resumes the lane unless the driver stopped (a paused dialer's lane
        goes on once it resumes)."""

        def go(answer: object) -> None:
            if not self.stopped:
                self.service.on(self.dialer, lambda _now: resume(answer))

        return go

    def _wake(self, lane: Lane) -> None:
        state = self.lanes[lane]
        if state.idle is None:
            state.wake = True
            return
        state.idle.cancel()
        state.idle = self.queue.after(0, f"link {self.name} {lane} wake",
                                      lambda: self._idle_over(lane))  # fmt: skip

    def _idle_over(self, lane: Lane) -> None:
        state = self.lanes[lane]
        go, state.resume, state.idle = state.resume, None, None
        if go is not None:
            go(self.queue.now_ms)

    def _sized(self, lane: Lane) -> Callable[[core.AppendBatch], int]:
        state = self.lanes[lane]

        def size_of(effect: core.AppendBatch) -> int:
            return self.service.sized(self.dialer, state.local_of, state.sizes)(effect)

        return size_of

    def _serve_here(self, request: ServeFetch, go: Resume) -> None:
        """The follower's request, served on this side (a pushing leader)."""

        def answered(answer: rounds.FetchAnswer, sizes: Sizes) -> None:
            self._read[id(answer)] = sizes
            go(Answered(answer))

        self.service.hold(
            self.dialer, request.link_id, request.parts, request.max_wait_ms, request.max_bytes,
            False, request.acknowledges, answered, lambda exc: go(Answered(None, exc)),
        )  # fmt: skip

    # -- calls ---------------------------------------------------------------------------------

    def _wait(self, call: _Call, go: Resume) -> object:
        if call.answered is not None:
            self._calls.pop(call.number, None)
            return call.answered
        call.resume = go
        return LATER

    def _drop(self, number: int) -> None:
        call = self._calls.pop(number, None)
        if call is not None and call.timer is not None:
            call.timer.cancel()

    def _finish(self, call: _Call, answered: Answered) -> None:
        """The call's answer arrived, or it failed: once."""
        if call.answered is not None or self.stopped:
            return
        call.answered = answered
        if call.timer is not None:
            call.timer.cancel()
        if call.resume is not None:
            self._calls.pop(call.number, None)
            call.resume(answered)

    def _failed(self, call: _Call, why: str) -> None:
        self._finish(call, Answered(None, unanswered(self.name, call.call, why)))

    def _start(self, link_call: LinkCall, timeout_ms: int) -> _Call:
        self._numbers += 1
        call = _Call(self._numbers, link_call)
        self._calls[call.number] = call
        kind = KIND[type(link_call)]
        if isinstance(link_call, ReplicaPush) and link_call.push.data is not None:
            call.sizes = self._read.pop(id(link_call.push.data), {})
        if len(self._read) > core_driver.PUSH_WINDOW:
            self._read.clear()  # reads never pushed (their lane failed)
        config = self.dialer.links.configs.get(self.name)
        remote = self.peers.cluster_at(config.value("remote_bootstrap")) if config else None
        if isinstance(link_call, OpenSession) and not self.secure:
            call.answered = Answered(SessionOpened())  # a run without link sessions
        elif config is None or remote is None:
            call.answered = Answered(None, unanswered(self.name, link_call, "no such cluster"))
        else:
            call.timer = self.queue.after(timeout_ms, f"link {self.name} {kind} timeout",
                                          lambda: self._failed(call, "no answer by its deadline"))
            if remote.crashed:  # a dead process refuses the connection at once
                self.queue.after(CONNECTION_REFUSED_MS, f"link {self.name} {kind} refused",
                                 lambda: self._failed(call, "connection refused"))  # fmt: skip
            elif isinstance(link_call, OpenSession):
                self._open(call, remote, config)
            else:
                self._call(call, remote, config, kind)
        return call

    def _trip(self, call: _Call, remote: SimCluster, size: int, leg: str, serve: Serve,
              arrived: Arrived) -> None:  # fmt: skip
        """One round trip: the request to `remote`, `serve(reply)` there, the
        answer back. A process that dies ends its connections: what the call
        carried on either side is dropped (it fails at its deadline)."""
        d, r = self.dialer.cluster_id, remote.cluster_id
        arrive = self.network.deliver_at(d, r, size, self.queue.now_ms)
        lives = (self.dialer.incarnation, remote.incarnation)

        def alive() -> bool:
            return (self.dialer.incarnation, remote.incarnation) == lives and call.answered is None

        def reply(answered: Answered, answer_size: int, sizes: Sizes) -> None:
            if not alive() or not remote.up:
                return
            back = self.network.deliver_at(r, d, answer_size, self.queue.now_ms)

            def receive() -> None:
                if alive():
                    arrived(answered, sizes)

            if back is not None:
                self.queue.at(back, f"link {self.name} {leg} answer", receive)

        def at_remote() -> None:
            if alive() and remote.up:
                serve(reply)

        if arrive is not None:
            self.queue.at(arrive, f"link {self.name} {leg} request", at_remote)

    def _call(self, call: _Call, remote: SimCluster, config: LinkConfig, kind: str) -> None:
        """A call of the data path, in the link's session on secure runs."""
        link_call = call.call
        data = link_call.push.data if isinstance(link_call, ReplicaPush) else None
        wire_call = None
        if self.secure:
            session = self.session
            if session is None or session.remote != remote.cluster_id:
                refusal = ClusterError(ErrorCode.LINK_AUTHENTICATION_FAILED, f"link {self.name!r}",
                                       f"no session with {remote.cluster_id!r}")  # fmt: skip
                call.answered = Answered(None, refusal)
                return
            wire_call = session.sign(config.link_id, kind)

        def serve(reply: Reply) -> None:
            if wire_call is not None and self.session is not None:
                try:
                    remote.link_sessions.verify(*wire_call, self.queue.now_ms)
                except ClusterError as exc:
                    self.service.refused(reply, exc)
                    return
                self.session.last = wire_call
            self.service.serve(remote, link_call, call.sizes, reply)

        def arrived(answered: Answered, sizes: Sizes) -> None:
            if isinstance(link_call, ReplicaFetch):
                pull = self.lanes[Lane.PULL]
                pull.local_of, pull.sizes = link_call.request.local_of, sizes
            self._finish(call, answered)

        size = request_bytes(link_call, answer_bytes(data) if data is not None else 0)
        self._trip(call, remote, size, kind, serve, arrived)

    def _open(self, call: _Call, remote: SimCluster, config: LinkConfig) -> None:
        """A session: the remote's challenge, then OpenSession, a round trip
        each; the remote's proof is checked when it arrives."""
        openings: list[Opening] = []
        sessions: list[SimSession] = []

        def challenge(reply: Reply) -> None:
            openings.append(open_session(remote, config, self.dialer, self.queue.now_ms))
            reply(Answered(SessionOpened()), CONTROL_MESSAGE_BYTES, {})

        def accept(reply: Reply) -> None:
            try:
                sessions.append(accept_session(remote, openings[0], self.queue.now_ms))
            except ClusterError as exc:
                self.service.refused(reply, exc)
                return
            reply(Answered(SessionOpened()), CONTROL_MESSAGE_BYTES, {})

        def opened(answered: Answered, _sizes: Sizes) -> None:
            if answered.error is None:
                self.session = sessions[0]
            self._finish(call, answered)

        def challenged(answered: Answered, _sizes: Sizes) -> None:
            if answered.error is not None:
                self._finish(call, answered)
            else:
                self._trip(call, remote, CONTROL_MESSAGE_BYTES, "open-session", accept, opened)

        self._trip(call, remote, CONTROL_MESSAGE_BYTES, "challenge", challenge, challenged)


__all__ = ["LinkDriver"]
