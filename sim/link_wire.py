"""A link's calls on the simulated network: the connection its driver uses.

A call (`linkd.core.link_calls`) travels as a message of its size
(`sim.link_service`) over the network's paths (`sim.network`: latency,
jitter, loss, grudges), is served on the remote, and its answer travels
back. It fails, with LINK_UNREACHABLE, at its deadline when no answer came,
at once when its connection is reset, after CONNECTION_REFUSED_MS when the
remote's process is dead (a paused one keeps the connection open and says
nothing). A process that dies ends its connections: what a call carried on
either side is dropped. On runs with link sessions, a call is signed with
the session the driver opened (a challenge, then OpenSession: a round trip
each) and checked by the remote before it is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from linkd.core import link_auth as auth
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_auth import Opening
from linkd.core.link_calls import (
    Answered,
    FetchGroupOffsets,
    GroupOffsets,
    LinkCall,
    ListSourceTopics,
    OpenSession,
    ReplicaFetch,
    ReplicaPush,
    SessionOpened,
    unanswered,
)
from linkd.core.links import LinkConfig
from linkd.core.requests import Handshake
from sim.cluster_node import SimCluster
from sim.events import EventQueue, Timer
from sim.link_service import (
    CONNECTION_REFUSED_MS,
    CONTROL_MESSAGE_BYTES,
    LinkService,
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

KIND = {
    Handshake: "handshake", OpenSession: "open-session", ListSourceTopics: "list-topics",
    FetchGroupOffsets: "group-offsets", ReplicaFetch: "fetch", ReplicaPush: "push",
}  # fmt: skip
Resume = Callable[[object], None]
Serve = Callable[[Reply], None]
Arrived = Callable[[Answered, Sizes], None]


@dataclass(slots=True)
class Call:
    number: int
    call: LinkCall
    timer: Timer | None = None
    answered: Answered | None = None
    resume: Resume | None = None  # the lane waiting for it, if any
    sizes: Sizes = field(default_factory=dict)  # its records' logical sizes


class LinkWire:
    """The calls in flight of one link's driver."""

    def __init__(
        self, name: str, dialer: SimCluster, peers: Peers, queue: EventQueue, network: Network,
        service: LinkService, secure: bool, fetched: Callable[[ReplicaFetch, Sizes], None],
    ) -> None:  # fmt: skip
        self.name, self.dialer, self.peers, self.queue = name, dialer, peers, queue
        # A call served on a revoked credential was reported (once per link).
        self.served_revoked = False
        self.network, self.service, self.secure = network, service, secure
        self.fetched = fetched  # a fetch answer arrived (before the lane hears it)
        self.session: SimSession | None = None  # runs with [cluster] link_sessions
        self.calls: dict[int, Call] = {}
        self.stopped = False
        self._numbers = 0

    def start(self, link_call: LinkCall, timeout_ms: int, sizes: Sizes) -> Call:
        """Sends `link_call`; `sizes`: its records' logical sizes (a push)."""
        self._numbers += 1
        call = Call(self._numbers, link_call, sizes=sizes)
        self.calls[call.number] = call
        kind = KIND[type(link_call)]
        config = self.dialer.links.configs.get(self.name)
        remote = self.peers.cluster_at(config.value("remote_bootstrap")) if config else None
        if isinstance(link_call, OpenSession) and not self.secure:
            call.answered = Answered(SessionOpened())  # a run without link sessions
        elif config is None or remote is None:
            call.answered = Answered(None, unanswered(self.name, link_call, "no such cluster"))
        else:
            call.timer = self.queue.after(timeout_ms, f"link {self.name} {kind} timeout",
                                          lambda: self.failed(call, "no answer by its deadline"))
            if remote.crashed:  # a dead process refuses the connection at once
                self.queue.after(CONNECTION_REFUSED_MS, f"link {self.name} {kind} refused",
                                 lambda: self.failed(call, "connection refused"))  # fmt: skip
            elif isinstance(link_call, OpenSession):
                self._open(call, remote, config)
            else:
                self._call(call, remote, config, kind)
        return call

    def drop(self, number: int) -> None:
        call = self.calls.pop(number, None)
        if call is not None and call.timer is not None:
            call.timer.cancel()

    def stop(self) -> None:
        self.stopped = True
        for number in sorted(self.calls):
            self.drop(number)

    def reset(self) -> None:
        """The connection was reset: every call in flight fails at once."""
        for call in sorted(self.calls.values(), key=lambda c: c.number):
            self.failed(call, "connection reset")

    def finish(self, call: Call, answered: Answered) -> None:
        """The call's answer arrived, or it failed: once."""
        if call.answered is not None or self.stopped:
            return
        call.answered = answered
        if call.timer is not None:
            call.timer.cancel()
        if isinstance(answered.answer, GroupOffsets) and answered.answer.offsets:
            # The follower heard its source's group commits (the lane applies them).
            self.service.observer.offsets_heard(self.dialer, self.name, answered.answer.offsets)
        if call.resume is not None:
            self.calls.pop(call.number, None)
            call.resume(answered)

    def failed(self, call: Call, why: str) -> None:
        self.finish(call, Answered(None, unanswered(self.name, call.call, why)))

    def _trip(self, call: Call, remote: SimCluster, size: int, leg: str, serve: Serve,
              arrived: Arrived) -> None:  # fmt: skip
        """One round trip: the request to `remote`, `serve(reply)` there, the
        answer back."""
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

    def _call(self, call: Call, remote: SimCluster, config: LinkConfig, kind: str) -> None:
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
                accepted = remote.link_credentials
                sessions = remote.link_sessions
                try:
                    served = sessions.verify(*wire_call, self.queue.now_ms, accepted)
                except ClusterError as exc:
                    if auth.refusal_of(exc.resource) is auth.Refusal.REVOKED_CREDENTIAL:
                        for ended in remote.state.links.credential_revoked(sessions.revoked):
                            self.queue.note(f"{remote.cluster_id}: {ended.describe()}")
                    self.service.refused(reply, exc)
                    return
                if sessions.served_on_revoked(served, accepted) and not self.served_revoked:
                    self.served_revoked = True  # told once per link
                    self.peers.contract_broken(
                        "link_credentials_revoked",
                        f"{remote.cluster_id} served a {kind} call of link {self.name!r} from "
                        f"{self.dialer.cluster_id} in a session opened with a link credential "
                        "it no longer accepts",
                    )
                self.session.last = wire_call
            self.service.serve(remote, link_call, call.sizes, reply)

        def arrived(answered: Answered, sizes: Sizes) -> None:
            if isinstance(link_call, ReplicaFetch):
                self.fetched(link_call, sizes)
            self.finish(call, answered)

        size = request_bytes(link_call, answer_bytes(data) if data is not None else 0)
        self._trip(call, remote, size, kind, serve, arrived)

    def _open(self, call: Call, remote: SimCluster, config: LinkConfig) -> None:
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
            self.finish(call, answered)

        def challenged(answered: Answered, _sizes: Sizes) -> None:
            if answered.error is not None:
                self.finish(call, answered)
            else:
                self._trip(call, remote, CONTROL_MESSAGE_BYTES, "open-session", accept, opened)

        self._trip(call, remote, CONTROL_MESSAGE_BYTES, "challenge", challenge, challenged)


__all__ = ["Call", "LinkWire"]
