"""The simulator's pump of a link's driver, on virtual time.

When a link acts is decided by the core (`linkd.core.link_driver`: the
lanes, back-off, the push window, cadences, sessions); this module answers
the lanes' requests on the event queue and decides nothing. A call goes
over the link's wire (`sim.link_wire`) and is served on the remote
(`sim.link_service`); an idle lane waits for its time or a wake; a
pushing leader's own reads go through the same held fetch a remote's does.
A paused dialer's lanes go on once it resumes; a crashed one's never do
(its restart starts a new driver, `sim.operators`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from linkd.core import cluster as core
from linkd.core import link_driver as core_driver
from linkd.core import link_rounds as rounds
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    Forget,
    Idle,
    LaneRequest,
    Receive,
    ReplicaFetch,
    ReplicaPush,
    Send,
    ServeFetch,
    Ticket,
    WakeLanes,
)
from linkd.core.link_driver import Lane
from linkd.core.requests import Sleep
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.link_service import LinkService, Observer, Peers, SimSession, Sizes
from sim.link_wire import Call, LinkWire, Resume
from sim.network import Network
from sim.operator_shell import LATER, LEAVE, Pump


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
        self.observer = observer
        self.driver = core_driver.LinkDriver(dialer.state, name, dialer.topic_ids, settings)
        self.service = LinkService(name, queue, peers, observer, settings)
        self.wire = LinkWire(name, dialer, peers, queue, network, self.service, secure,
                             self._fetched)  # fmt: skip
        self.stopped = False
        self.lanes = {lane: _Lane() for lane in Lane}
        self._read: dict[int, Sizes] = {}  # sizes of own reads not yet pushed, by answer

    @property
    def fetch_rounds(self) -> int:
        return self.service.fetch_rounds

    @property
    def session(self) -> SimSession | None:
        return self.wire.session

    def start(self) -> None:
        host = self.peers.host(self.dialer)
        for lane in Lane:
            sized = {"replica": self._sized(lane)}
            host.drive(self.driver.lane(lane), lambda _r, _e: None, sized, self._answerer(lane))

    def stop(self) -> None:
        self.stopped = True
        self.wire.stop()
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
        self.wire.reset()

    def resumed(self, cluster_id: str) -> None:
        self.service.resumed(cluster_id)

    def _answerer(self, lane: Lane) -> Pump:
        state = self.lanes[lane]

        def answer(request: LaneRequest, resume: Resume) -> object:
            if self.stopped:
                return LATER  # the driver stopped: the lane ends here
            # `go` (`_go(resume)`) is built only by the requests that resume
            # the lane later: most requests (Now, Execute) go on to the host.
            if isinstance(request, (Dial, Send)):
                sizes = {}
                if isinstance(request.call, ReplicaPush) and request.call.push.data is not None:
                    sizes = self._read.pop(id(request.call.push.data), {})
                call = self.wire.start(request.call, request.timeout_ms, sizes)
                if isinstance(request, Send):
                    return Ticket(call.number)
                return self._wait(call, self._go(resume))
            if isinstance(request, Receive):
                return self._wait(self.wire.calls[request.ticket.number], self._go(resume))
            if isinstance(request, Drop):
                for ticket in request.tickets:
                    self.wire.drop(ticket.number)
                return None
            if isinstance(request, Idle):
                if state.wake:
                    state.wake = False
                    return self.queue.now_ms
                state.resume = self._go(resume)
                state.idle = self.queue.after(request.ms, f"link {self.name} {lane} idle",
                                              lambda: self._idle_over(lane))  # fmt: skip
                return LATER
            if isinstance(request, Sleep):
                go = self._go(resume)
                self.queue.after(request.ms, f"link {self.name} {lane} retry",
                                 lambda: go(self.queue.now_ms))  # fmt: skip
                return LATER
            if isinstance(request, WakeLanes):
                for other in Lane:
                    if other is not lane:
                        self._wake(other)
                return None
            if isinstance(request, ServeFetch):
                self._serve_here(request, self._go(resume))
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

    def _wait(self, call: Call, go: Resume) -> object:
        """A call's answer now, or LATER (the lane goes on when it comes)."""
        if call.answered is not None:
            self.wire.calls.pop(call.number, None)
            return call.answered
        call.resume = go
        return LATER

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

    def _fetched(self, call: ReplicaFetch, sizes: Sizes) -> None:
        """A fetch answer arrived: the pull lane applies it next."""
        pull = self.lanes[Lane.PULL]
        pull.local_of, pull.sizes = call.request.local_of, sizes

    def _sized(self, lane: Lane) -> Callable[[core.AppendBatch], int]:
        state = self.lanes[lane]
        # Built once per answer (its map and sizes), not once per batch.
        made: list[tuple[object, object, Callable[[core.AppendBatch], int]]] = []

        def size_of(effect: core.AppendBatch) -> int:
            if not made or made[0][0] is not state.local_of or made[0][1] is not state.sizes:
                made[:] = [
                    (state.local_of, state.sizes,
                     self.service.sized(self.dialer, state.local_of, state.sizes))
                ]  # fmt: skip
            return made[0][2](effect)

        return size_of

    def _serve_here(self, request: ServeFetch, go: Resume) -> None:
        """The follower's request, served on this side (a pushing leader)."""

        def answered(answer: rounds.FetchAnswer, sizes: Sizes) -> None:
            if len(self._read) >= core_driver.PUSH_WINDOW:
                self._read.clear()  # reads never pushed (their lane failed)
            self._read[id(answer)] = sizes
            go(Answered(answer))

        self.service.hold(
            self.dialer, request.link_id, request.parts, request.max_wait_ms, request.max_bytes,
            False, request.acknowledges, answered, lambda exc: go(Answered(None, exc)),
        )  # fmt: skip


__all__ = ["LinkDriver"]
