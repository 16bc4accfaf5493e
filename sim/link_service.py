"""The far end of a link's calls in the simulator, and what they weigh.

A call a link's driver makes (`linkd.core.link_calls`) crosses the simulated
network as a message of a size, is served on the remote cluster by the
core's own functions (`procedures.serve` for a handshake,
`link_driver.serve_list_topics` and `serve_group_offsets`,
`link_driver.hold_fetch` for a fetch, `link_rounds.accept_push` for a
push), and its answer crosses back. What is modelled here is physical:
message sizes, the source's I/O device and replication rate limit, the
time a held fetch waits, pushes applied one at a time in the order they
arrive, and a paused process that does nothing until it resumes.

Rules:
- Sizes: a control message is CONTROL_MESSAGE_BYTES, plus PER_PARTITION_BYTES
  for each partition a fetch names, 128 bytes a topic listed and 64 a group
  offset; fetched records weigh their logical size (a simulated record
  stands for a larger one), and a follower's appends are charged the size
  its source's batch had.
- A fetch reads within the source's replication rate limit (Kafka's leader
  replication quota): within the quota it reads up to its max bytes (the
  bytes are taken, into debt if need be); over it, it reads nothing, and a
  held fetch tries again when the debt is paid. The answer leaves once the
  source's device has read the bytes.
- A held fetch, or any wait of a paused cluster's procedure, resumes when
  the cluster does; a dead process's never does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from linkd.core import cluster as core
from linkd.core import link_auth as auth
from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core.errors import ClusterError
from linkd.core.link_calls import (
    Answered,
    FetchGroupOffsets,
    GroupOffsets,
    LaneRequest,
    LinkAnswer,
    LinkCall,
    ListSourceTopics,
    ReplicaFetch,
    ReplicaPush,
    WaitForData,
)
from linkd.core.links import LinkConfig
from linkd.core.requests import Handshake
from sim.cluster_node import SimCluster
from sim.events import EventQueue
from sim.operator_shell import LATER, LEAVE, SimHost

CONNECTION_REFUSED_MS = 5
CONTROL_MESSAGE_BYTES = 1_024
PER_PARTITION_BYTES = 64

# Logical sizes of fetched batches: (source topic, partition, base offset) -> bytes.
Sizes = dict[tuple[str, int, int], int]
# How a served call answers: (what, its size on the wire, the batches' sizes).
Reply = Callable[[Answered, int, Sizes], None]


class Observer(Protocol):
    def logical_bytes(self, effect: core.AppendBatch) -> int: ...
    def follower_applied(self, cluster: SimCluster, link_name: str) -> None: ...
    def offsets_heard(
        self, cluster: SimCluster, link_name: str, offsets: Sequence[msync.GroupOffset]
    ) -> None: ...


class Peers(Protocol):
    def cluster_at(self, address: str) -> SimCluster | None: ...
    def host(self, cluster: SimCluster) -> SimHost: ...
    def forget(self, cluster: SimCluster, name: str) -> None: ...
    def contract_broken(self, invariant: str, detail: str) -> None: ...


def wire(config: LinkConfig) -> LinkConfig:
    """A configuration as it crosses the network: a copy of what may cross
    (`LinkConfig.shared`: no secrets, not the address the sender dials)."""
    return LinkConfig.from_record(config.shared().to_record())


def sim_link_key(stored_key: str, credentials: str) -> bytes:
    """A link's key as the simulator stores it (hex, unsealed: the simulator
    has no password encoder)."""
    return auth.link_key_or_legacy(bytes.fromhex(stored_key), credentials)


def request_bytes(call: LinkCall, data_bytes: int = 0) -> int:
    if isinstance(call, ReplicaFetch):
        return CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(call.request.partitions)
    if isinstance(call, ReplicaPush):
        push = call.push
        size = data_bytes if push.data is not None else CONTROL_MESSAGE_BYTES
        return size + 128 * sum(len(ns.topics) for ns in push.namespaces) + 64 * len(
            push.group_offsets
        )
    return CONTROL_MESSAGE_BYTES


def answer_bytes(answer: LinkAnswer | None) -> int:
    if isinstance(answer, rounds.FetchAnswer):
        parts = len(answer.partitions)
        return CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * parts + answer.total_bytes
    if isinstance(answer, rounds.FetchRequest):
        return CONTROL_MESSAGE_BYTES + PER_PARTITION_BYTES * len(answer.partitions)
    if isinstance(answer, rounds.SourceNamespace):
        return CONTROL_MESSAGE_BYTES + 128 * len(answer.topics)
    if isinstance(answer, GroupOffsets):
        return CONTROL_MESSAGE_BYTES + 64 * len(answer.offsets)
    return CONTROL_MESSAGE_BYTES


@dataclass(slots=True)
class _Inbox:
    """Pushes a follower applies one at a time, in arrival order."""

    incarnation: int = -1
    busy: bool = False
    waiting: deque[Callable[[], None]] = field(default_factory=deque)


class LinkService:
    """The remote's side of one link's calls, and the source's reads."""

    def __init__(
        self, name: str, queue: EventQueue, peers: Peers, observer: Observer,
        settings: driver.DriverSettings,
    ) -> None:  # fmt: skip
        self.name = name
        self.queue = queue
        self.peers = peers
        self.observer = observer
        self.settings = settings
        self.fetch_rounds = 0
        self._inbox = _Inbox()
        self._paused: list[tuple[SimCluster, Callable[[], None]]] = []

    def serve(self, remote: SimCluster, call: LinkCall, sizes: Sizes, reply: Reply) -> None:
        """Serves `call` on `remote` and answers through `reply`; a refusal is
        the answer too (as a gRPC status)."""
        now = self.queue.now_ms
        try:
            if isinstance(call, Handshake):
                answer = self.peers.host(remote).serve(Handshake(wire(call.config)))
                if not isinstance(answer, LinkConfig):
                    raise TypeError(f"a handshake answered {answer!r}")
                self._answer(reply, wire(answer))
            elif isinstance(call, ListSourceTopics):
                self._answer(reply, driver.serve_list_topics(remote.state, call, now))
            elif isinstance(call, FetchGroupOffsets):
                self._answer(reply, driver.serve_group_offsets(remote.state, call, now))
            elif isinstance(call, ReplicaFetch):
                self._fetch(remote, call, reply)
            elif isinstance(call, ReplicaPush):
                self._push(remote, call.push, sizes, reply)
            else:
                raise TypeError(f"{call!r} is not served here")
        except ClusterError as exc:
            self.refused(reply, exc)

    def refused(self, reply: Reply, exc: ClusterError) -> None:
        self.queue.note(f"link {self.name} refused by remote: {exc.code.name}")
        reply(Answered(None, exc), CONTROL_MESSAGE_BYTES, {})

    @staticmethod
    def _answer(reply: Reply, answer: LinkAnswer, sizes: Sizes | None = None) -> None:
        reply(Answered(answer), answer_bytes(answer), sizes or {})

    # -- fetches: the source holds them, reads within its limit ------------------------------

    def _fetch(self, remote: SimCluster, call: ReplicaFetch, reply: Reply) -> None:
        request = call.request

        def answered(answer: rounds.FetchAnswer, sizes: Sizes) -> None:
            self._answer(reply, answer, sizes)

        self.hold(remote, request.link_id, request.partitions, call.max_wait_ms, call.max_bytes,
                  True, True, answered, lambda exc: self.refused(reply, exc),
                  request.fetch_session)  # fmt: skip

    def hold(
        self,
        source: SimCluster,
        link_id: str,
        parts: tuple[rounds.PartitionFetch, ...],
        max_wait_ms: int,
        max_bytes: int,
        from_remote: bool,
        acknowledges: bool,
        answered: Callable[[rounds.FetchAnswer, Sizes], None],
        refused: Callable[[ClusterError], None],
        fetch_session: rounds.FetchSessionRef = rounds.NO_FETCH_SESSION,
    ) -> None:
        """Serves a fetch on `source` (`link_driver.hold_fetch`); `answered`
        gets the answer and its batches' sizes once the source has read
        them, `refused` the refusal."""
        logical: dict[tuple[str, int, int], int] = {}
        throttled = [False]
        limiter = source.replication_limit

        def read(topic_id: str, partition: int, start: int, end: int, budget: int
                 ) -> tuple[bytes, int]:  # fmt: skip
            if limiter.available(self.queue.now_ms) <= 0:
                throttled[0] = True  # over the quota: nothing until the debt is paid
                return b"", 0
            batches, size = source.stores[(topic_id, partition)].read(start, end, budget)
            for b in batches:
                logical[(topic_id, partition, b.base_offset)] = b.logical_bytes
            return b"".join(b.data for b in batches), size

        def wait(request: LaneRequest, resume: Callable[[object], None]) -> object:
            if not isinstance(request, WaitForData):
                return LEAVE
            self._wait(source, request, resume, throttled)
            return LATER

        def done(answer: object, error: ClusterError | None) -> None:
            if error is not None:
                refused(error)
                return
            if not isinstance(answer, rounds.FetchAnswer):
                raise TypeError(f"a fetch answered {answer!r}")
            now, total = self.queue.now_ms, answer.total_bytes
            limiter.take(total, now)
            read_ms = source.disk.reserve(total, now, "replica_read") if total else now
            names = {t.topic_id: n for n, t in source.state.topics.items()} if logical else {}
            sizes = {(names[tid], p, base): n for (tid, p, base), n in logical.items()}
            self.queue.at(read_ms, f"link {self.name} fetch read", lambda: answered(answer, sizes))

        holding = driver.hold_fetch(
            source.state, link_id, parts, max_wait_ms, max_bytes, read, self.settings,
            from_remote=from_remote, acknowledges=acknowledges, fetch_session=fetch_session,
        )  # fmt: skip
        self.peers.host(source).drive(holding, done, pump=wait)

    def _wait(
        self,
        source: SimCluster,
        request: WaitForData,
        resume: Callable[[object], None],
        throttled: list[bool],
    ) -> None:
        """A held fetch waits for data, its max wait, or its quota."""
        now = self.queue.now_ms
        if throttled[0]:
            throttled[0] = False
            until = min(request.until_ms, now + source.replication_limit.wait_ms(1, now))
            self.queue.at(until, f"link {self.name} throttled", lambda: self.on(source, resume))
            return
        parked = [True]

        def wake() -> None:
            if parked[0]:
                parked[0] = False
                timer.cancel()
                self.queue.after(0, f"link {self.name} fetch wake", lambda: self.on(source, resume))

        def expire() -> None:
            if parked[0]:
                parked[0] = False
                self.on(source, resume)

        timer = self.queue.at(request.until_ms, f"link {self.name} fetch max wait", expire)
        source.wait_for_data(wake, request.partitions)

    def on(self, cluster: SimCluster, resume: Callable[[object], None]) -> None:
        """Resumes a procedure of `cluster` now, or once it resumes if paused
        (never if its process died)."""
        if cluster.up:
            resume(self.queue.now_ms)
        elif not cluster.crashed:
            self._paused.append((cluster, lambda: resume(self.queue.now_ms)))

    def resumed(self, cluster_id: str) -> None:
        """A paused cluster runs again: what waited for it goes on."""
        due = [go for c, go in self._paused if c.cluster_id == cluster_id]
        self._paused = [(c, go) for c, go in self._paused if c.cluster_id != cluster_id]
        for go in due:
            go()

    # -- pushes: the follower applies them one at a time --------------------------------------

    def _push(self, remote: SimCluster, push: rounds.Push, sizes: Sizes, reply: Reply) -> None:
        inbox = self._inbox
        if inbox.incarnation != remote.incarnation:
            self._inbox = inbox = _Inbox(remote.incarnation)  # the follower restarted
        inbox.waiting.append(lambda: self._apply_push(remote, push, sizes, reply))
        if not inbox.busy:
            self._next_push(inbox)

    def _next_push(self, inbox: _Inbox) -> None:
        inbox.busy = bool(inbox.waiting)
        if inbox.waiting:
            inbox.waiting.popleft()()

    def _apply_push(
        self, remote: SimCluster, push: rounds.Push, sizes: Sizes, reply: Reply
    ) -> None:
        inbox = self._inbox
        try:
            config = remote.state.links.by_id(push.link_id)
        except ClusterError as exc:
            self.refused(reply, exc)
            self._next_push(inbox)
            return
        local_of = rounds.follower_fetch_request(remote.state, config).local_of

        def done(nxt: object, error: ClusterError | None) -> None:
            if error is not None:
                self.refused(reply, error)
            elif isinstance(nxt, rounds.FetchRequest):
                self.fetch_rounds += push.data is not None
                if push.group_offsets:
                    self.observer.offsets_heard(remote, config.name, push.group_offsets)
                self.observer.follower_applied(remote, config.name)
                # Its map back to the follower's names stays on the follower.
                answer = rounds.FetchRequest(nxt.link_id, nxt.partitions, {}, nxt.sent_ms)
                self._answer(reply, answer)
            self._next_push(inbox)

        accepting = rounds.accept_push(remote.state, push, self.queue.now_ms, remote.topic_ids)
        sized = {"replica": self.sized(remote, local_of, sizes)}
        self.peers.host(remote).drive(accepting, done, sized)

    def sized(
        self, follower: SimCluster, local_of: dict[tuple[str, int], str], sizes: Sizes
    ) -> Callable[[core.AppendBatch], int]:
        """A follower's appends, charged the sizes their source's batches had."""
        # Per answer, not per batch, and over the answer's batches only (not
        # every partition of the link): each size under the follower topic's
        # id, for the topics the follower holds when the answer is applied.
        topics = follower.state.topics
        by_id: dict[tuple[str, int, int], int] = {}
        for (source_topic, partition, base), size in sizes.items():
            local = local_of.get((source_topic, partition))
            if local is not None and local in topics:
                by_id[(topics[local].topic_id, partition, base)] = size

        def size_of(effect: core.AppendBatch) -> int:
            size = by_id.get((effect.topic_id, effect.partition, effect.header.base_offset))
            return self.observer.logical_bytes(effect) if size is None else size

        return size_of


@dataclass(slots=True)
class SimSession:
    """The link session a driver opened with `remote` (its signer)."""

    signer: auth.CallSigner
    remote: str
    # The last call the remote served, as an eavesdropper saw it (the forge
    # fault replays it: a call in flight is not yet a replay).
    last: WireCall | None = None

    def sign(self, link_id: str, method: str) -> WireCall:
        digest = auth.request_digest(f"{link_id}|{method}|{self.signer.seq}".encode())
        seq, mac = self.signer.sign(method, digest)
        return (self.signer.session_id, link_id, method, seq, digest, mac)


# A call as it crossed the wire: session id, link id, method, seq, digest, mac.
WireCall = tuple[str, str, str, int, bytes, bytes]


def open_session(
    remote: SimCluster, config: LinkConfig, dialer: SimCluster, now_ms: int
) -> auth.Opening:
    """The remote's challenge, and the caller's proof for OpenSession."""
    nonce = remote.nonce()
    remote.link_sessions.challenge(nonce, now_ms)
    required = remote.link_credentials != ("",)
    credentials = config.value("credentials")
    opening = auth.open_request(
        config.link_id, config.name, dialer.cluster_id, remote.cluster_id, nonce,
        dialer.nonce(), sim_link_key(config.value("link_key"), credentials),
        credentials if required else "", creating=False,
    )  # fmt: skip
    return opening


def accept_session(remote: SimCluster, opening: auth.Opening, now_ms: int) -> SimSession:
    """The remote opens the session (OpenSession) and the caller checks the
    remote's proof; raises the refusal."""
    found = remote.links.secrets(opening.request.link_id)
    known = None if found is None else auth.KnownLink(
        found.remote_cluster_id, sim_link_key(found.link_key, found.credentials)
    )
    session_id = remote.nonce().hex()[:32]
    opened = remote.link_sessions.open(
        opening.request, known, remote.link_credentials, now_ms, session_id
    )
    remote.state.links.session_opened(opening.request.link_id)
    key = auth.opened_session_key(opening, session_id, opened.proof)
    return SimSession(auth.CallSigner(session_id, key), remote.cluster_id)


__all__ = [
    "CONNECTION_REFUSED_MS",
    "CONTROL_MESSAGE_BYTES",
    "PER_PARTITION_BYTES",
    "LinkService",
    "SimSession",
    "wire",
]
