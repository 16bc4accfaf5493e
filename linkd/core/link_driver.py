"""The driver of a replication link: when the dialing side of a link acts.

A cluster that dials a link (its connection direction is "local_dials")
runs one `LinkDriver` for it: three lanes beside each other, each a
generator of requests (`linkd.core.link_calls`) that a shell pumps. The
daemon pumps them with gRPC and asyncio (`linkd/replication.py`,
`LinkRunner`), the simulator on virtual time (`sim/link_driver.py`), the
transcripts by script (`tests/transcript.py`). Every number and every
choice of when is here, once; what a round does is `linkd.core.link_rounds`.

Theory of operation:
- control: a handshake every HANDSHAKE_INTERVAL_MS (the configurations
  merge); then, while this side follows anything on the link, discovery
  every DISCOVERY_INTERVAL_MS: the source's topics and principal ACLs
  (ListSourceTopics, each followed namespace), created or reshaped here, and
  its groups' committed offsets (FetchGroupOffsets), applied once the data
  reaches them (those held back go again with the next).
- pull (this side follows topics): a replica fetch for every follower
  partition, which the source holds up to `max_wait_ms` for data (long
  poll); its answer is applied (truncations and appends, durable, then the
  end of the round) before the next fetch leaves.
- push (this side leads topics or groups; the follower may sit behind NAT):
  serve the follower's last fetch request here, holding it as a source
  would, and push the answer; the follower answers with its next request.
  On an ASYNC link, while there is more to send at once, up to PUSH_WINDOW
  pushes are in flight: the next is read from where the last one sent ends
  (`rounds.continue_fetch`). Every push that leaves when the discovery
  interval has passed carries this side's namespaces and group offsets,
  the first of a pipeline or any later one (a pipeline can last a whole
  catch-up). Every push says when this side read the high watermarks it
  carries (`Push.source_hw_at_ms`): the follower knows them as of then.

Rules:
- Pull and push wait for the driver's first handshake: it may create the
  link on the remote, or refuse this side's credentials.
- Every call runs in a link session. A lane about to call opens one
  (OpenSession) when none is open for the link's address, remote cluster,
  key and credentials as they are now; the other lanes wait for it. A call
  refused LINK_AUTHENTICATION_FAILED drops the session (the next call opens
  another) and is said at warning level, once per distinct refusal; so does
  an answer this side refused (unsigned, or changed on the way:
  `link_auth.check_answer`), which is not a refusal of its credentials.
- A call that fails (refused, unreachable, or past its deadline: the call
  timeout, plus the long poll it asks for on a fetch) is lost contact, and
  its lane backs off: BACKOFF_MIN_MS, doubling up to BACKOFF_MAX_MS. The
  back-off is back at BACKOFF_MIN_MS only after a step succeeded, its answer
  applied: a remote that answers every call with a refusal is called every
  BACKOFF_MAX_MS, not every BACKOFF_MIN_MS.
- A call refused LINK_DELETED means the remote deleted the link: this side
  deletes its half (`Forget`) and the driver stops.
- A fetch answer whose SYNC verdict shows the source runs the other mode
  makes the next handshake due now, and wakes the control lane.
- A lane with nothing to do idles IDLE_POLL_MS, or until woken: a change of
  the link (`LinkDriver.wake`: a handshake and discoveries are due at once),
  the first handshake, a session opened, new follower topics, a mode to
  learn.
- A lane ends when the link is gone or the driver stopped.

`hold_fetch` is the source's side of a fetch, held for data: the same long
poll answers a remote's ReplicaFetch and a pushing leader's own reads.

Pure code: no I/O, clocks, threads or randomness.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from linkd.core import lineage
from linkd.core import link_auth as auth
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.fetch_sessions import (
    FollowerFetchSession,
    SessionRefused,
    source_session,
    still_open,
)
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    FetchGroupOffsets,
    Forget,
    GroupOffsets,
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
    WaitForData,
    WakeLanes,
    answer_of,
)
from linkd.core.links import LinkConfig, LinkMode, MappingType, Role
from linkd.core.requests import Execute, Handshake, Note, Now, Sleep, WakeWaiters, expect

# How often the dialing side exchanges configurations, and how often a
# follower lists its source's topics and group offsets (or a pushing leader
# sends them).
HANDSHAKE_INTERVAL_MS = 2_000
DISCOVERY_INTERVAL_MS = 500
# A lane with nothing to do looks again after this long (sooner when woken).
IDLE_POLL_MS = 200
# A failed call's lane waits this long, doubling each failure in a row.
BACKOFF_MIN_MS = 100
BACKOFF_MAX_MS = 2_000
# Pushes in flight at once while a pushing leader has more to send (ASYNC).
PUSH_WINDOW = 3

MiB = 1024 * 1024
A = TypeVar("A")


class Lane(enum.StrEnum):
    CONTROL = "control"
    PULL = "pull"
    PUSH = "push"


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """What a fetch asks for: how long the source may hold it for data, and
    how many bytes it may carry in all and per partition. The daemon runs
    with these defaults; a simulation's `[run]` may set others."""

    max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * MiB
    partition_max_bytes: int = 1 * MiB
    # Fetch in sessions (`fetch_sessions`): after a full round, a request
    # names only the partitions whose position changed. False: every request
    # is full (the protocol before sessions, kept to compare the two).
    fetch_sessions: bool = True


# What a session was opened for: the address, the remote cluster, the link
# key and the credentials at the time.
SessionKey = tuple[str, str, str, str]

Lanes = Generator[LaneRequest, object, None]


def session_key(config: LinkConfig) -> SessionKey:
    return (
        config.value("remote_bootstrap"),
        config.remote_cluster_id,
        config.value("link_key"),
        config.value("credentials"),
    )


# Not frozen: one is built before every step of every lane, and a frozen
# dataclass's __init__ costs several times a plain one's. Its only reader
# (`LinkDriver`) reads fields; nothing assigns to or hashes one.
@dataclass(slots=True)
class NextSteps:
    """What the dialing side of a link should do now. Handshake and discovery
    run beside the data path; pulling (this side follows topics) and pushing
    (this side leads topics or groups) run beside each other: one link may
    carry mappings in both directions, and each direction replicates."""

    handshake: bool
    discover: bool  # list the source's topics and group offsets (this side follows)
    pull: bool
    push: bool
    push_discovery: bool  # the next push carries the namespaces and group offsets
    # When the control lane has something due next (handshake or discovery).
    control_due_ms: int


_REPLICATED = frozenset({MappingType.TOPIC, MappingType.GROUP, MappingType.PRINCIPAL})


def next_steps(
    config: LinkConfig,
    now_ms: int,
    last_handshake_ms: int | None,
    last_discovery_ms: int | None,
    last_push_discovery_ms: int | None,
    faults: Faults,
) -> NextSteps:
    """The one rule for a dialing side's next steps (None: never done)."""

    def due_at(last: int | None, interval: int) -> int:
        return now_ms if last is None else last + interval

    # One pass over the attached mappings (this runs before every step of
    # every lane): whether this side follows or leads a topic, group or
    # principal mapping, and whether it follows a topic one (it pulls).
    follows = leads = pull = False
    for m in config.mappings.values():
        if not m.attached or m.resource_type not in _REPLICATED:
            continue
        if m.local_role == Role.FOLLOWER:
            follows = True
            pull = pull or m.resource_type == MappingType.TOPIC
        else:
            leads = True
    if faults.undid(1) and pull:
        leads = False  # the old runner: pull or push, never both
    handshake_ms = due_at(last_handshake_ms, HANDSHAKE_INTERVAL_MS)
    discovery_ms = due_at(last_discovery_ms, DISCOVERY_INTERVAL_MS)
    return NextSteps(
        handshake=handshake_ms <= now_ms,
        discover=follows and discovery_ms <= now_ms,
        pull=pull,
        push=leads,
        push_discovery=leads and due_at(last_push_discovery_ms, DISCOVERY_INTERVAL_MS) <= now_ms,
        control_due_ms=min(handshake_ms, discovery_ms) if follows else handshake_ms,
    )


@dataclass(slots=True)
class LinkDriver:
    """The three lanes of one link on the side that dials it, and what they
    share. A shell makes one per link when its process starts or the link
    appears, pumps `lane(...)` for each Lane, calls `wake()` when the link
    changes, and drops the driver when the process or the link ends."""

    state: ClusterState
    name: str
    new_topic_id: Callable[[], str]
    settings: DriverSettings = field(default_factory=DriverSettings)
    # When the last handshake, discovery and push discovery were done (None:
    # due now).
    last_handshake_ms: int | None = None
    last_discovery_ms: int | None = None
    last_push_discovery_ms: int | None = None
    handshaken: bool = False
    # Replicated offsets waiting for the follower's data to reach them.
    held_offsets: list[msync.GroupOffset] = field(default_factory=list)
    # Push: the follower's last fetch request (None before the first push).
    next_fetch: rounds.FetchRequest | None = None
    session_for: SessionKey | None = None
    opening: Lane | None = None  # the lane opening a session
    last_refusal: str = ""  # the last session refusal said (once each)
    stopped: bool = False
    # The pull lane's wait after this cluster's storage refused a round.
    storage_backoff_ms: int = BACKOFF_MIN_MS
    # The pull lane's fetch session with the source, and each partition's
    # fetch as last built (used again while its log is as it was).
    fetch_session: FollowerFetchSession = field(default_factory=FollowerFetchSession)
    fetches_built: rounds.BuiltFetches = field(default_factory=rounds.BuiltFetches)

    def wake(self) -> None:
        """The link changed (a mapping, the mode, the address): handshake and
        discover now. The shell also wakes the idle lanes."""
        self.last_handshake_ms = None
        self.last_discovery_ms = None
        self.last_push_discovery_ms = None

    def lane(self, lane: Lane) -> Lanes:
        """One lane, run until the link is gone: its step, over and over,
        backing off after each failure."""
        step = {Lane.CONTROL: self._control, Lane.PULL: self._pull, Lane.PUSH: self._push}[lane]
        backoff_ms = BACKOFF_MIN_MS
        while not self.stopped and self.name in self.state.links.configs:
            try:
                yield from step(lane)
            except ClusterError as error:
                if error.code is ErrorCode.LINK_DELETED:
                    self.stopped = True
                    yield Forget(self.name)
                    return
                yield from self._failed(lane, error)
                yield Sleep(backoff_ms)
                backoff_ms = min(BACKOFF_MAX_MS, backoff_ms * 2)
            else:
                backoff_ms = BACKOFF_MIN_MS

    # -- calls -------------------------------------------------------------------------------

    def _config(self) -> LinkConfig:
        return self.state.links.get(self.name)

    def _failed(self, lane: Lane, error: ClusterError) -> Lanes:
        now = yield from _now()
        self.state.links.on_contact_lost(self.name, now, error)
        if error.code is not ErrorCode.LINK_AUTHENTICATION_FAILED:
            yield Note("debug", f"link {self.name!r} {lane}: {error.message}")
            return
        # A refused session leaves the link DISCONNECTED until an operator
        # acts (credentials, address): said loudly, once per refusal.
        self.session_for = None
        if auth.refusal_of(error.resource) in auth.ANSWER_REFUSALS:
            # This side refused the remote's answer (unsigned, or changed on
            # the way): not a refusal of its credentials. The next call runs
            # in a new session.
            said = "link answer refused"
        else:
            said = "link session refused"
            runtime = self.state.links.runtime.get(self.name)
            if runtime is not None:
                runtime.credential_problem = (
                    f"the remote refuses this side's link sessions: {error.message}"
                )
        if error.message != self.last_refusal:
            self.last_refusal = error.message
            yield Note("warning", f"link {self.name!r}: {said}: {error.message}")

    def _session(self, lane: Lane) -> Lanes:
        """Returns once a session is open for the link as it is now."""
        while self.session_for != (key := session_key(self._config())):
            if self.opening is not None:
                yield Idle(BACKOFF_MIN_MS)  # another lane is opening it
                continue
            self.opening = lane
            try:
                answered = yield Dial(OpenSession(), rounds.CALL_TIMEOUT_MS)
                answer_of(answered, SessionOpened, f"link {self.name!r}: session")
            finally:
                self.opening = None
            self.session_for = key
            runtime = self.state.links.runtime.get(self.name)
            if runtime is not None:
                runtime.credential_problem = ""
            yield WakeLanes()

    def _ask(
        self, lane: Lane, call: LinkCall, kind: type[A], timeout_ms: int = rounds.CALL_TIMEOUT_MS
    ) -> Generator[LaneRequest, object, A]:
        """One call, its answer awaited; its refusal raised."""
        yield from self._session(lane)
        answered = yield Dial(call, timeout_ms)
        return answer_of(answered, kind, f"link {self.name!r}: {type(call).__name__}")

    def _send(self, lane: Lane, call: LinkCall) -> Generator[LaneRequest, object, Ticket]:
        yield from self._session(lane)
        return expect((yield Send(call, rounds.CALL_TIMEOUT_MS)), Ticket, "Send")

    # -- control: handshakes and discovery ----------------------------------------------------

    def _control(self, lane: Lane) -> Lanes:
        now = yield from _now()
        config = self._config()
        steps = self._steps(config, now)
        if steps.handshake:
            yield from self._handshake(lane)
        elif steps.discover:
            yield from self._discover(lane, config)
        else:
            # Until the next handshake or discovery is due, looking again at
            # least every IDLE_POLL_MS.
            yield Idle(max(1, min(IDLE_POLL_MS, steps.control_due_ms - now)))

    def _steps(self, config: LinkConfig, now: int) -> NextSteps:
        return next_steps(config, now, *self._timers(), self.state.faults)

    def _timers(self) -> tuple[int | None, int | None, int | None]:
        return self.last_handshake_ms, self.last_discovery_ms, self.last_push_discovery_ms

    def _handshake(self, lane: Lane) -> Lanes:
        view = lineage.outgoing(self.state, self._config())
        answer = yield from self._ask(lane, Handshake(view), LinkConfig)
        now = yield from _now()
        accepted = rounds.accept_handshake_answer(self.state, self.name, answer, now)
        if accepted.effects:
            yield Execute(tuple(accepted.effects))
        for note in accepted.notes:
            yield Note("info", note)
        self.last_handshake_ms = now
        if not self.handshaken:
            self.handshaken = True
            yield WakeLanes()  # pull and push waited for it

    def _discover(self, lane: Lane, config: LinkConfig) -> Lanes:
        """This side follows: the source's topics (created or reshaped here),
        READ ACLs, principal ACLs and group offsets."""
        listed_at = yield from _now()
        namespaces: list[rounds.SourceNamespace] = []
        for kind in (MappingType.TOPIC, MappingType.PRINCIPAL):
            for mapping in rep.follower_mappings(config, kind):
                call = ListSourceTopics(config.link_id, mapping.remote_prefix, kind)
                namespaces.append((yield from self._ask(lane, call, rounds.SourceNamespace)))
        # The configuration as it is now: a namespace detached while the calls
        # were answered (the remote's detach, told meanwhile) makes no topic,
        # and a group namespace detached meanwhile is not asked for.
        created = yield from apply_topics(
            self.state, self._config(), namespaces, self.new_topic_id, listed_at
        )
        # Each namespace's offsets are applied as they arrive: what was heard
        # is kept even when the next call fails.
        for mapping in rep.follower_mappings(self._config(), MappingType.GROUP):
            call_offsets = FetchGroupOffsets(config.link_id, mapping.remote_prefix)
            offsets = list((yield from self._ask(lane, call_offsets, GroupOffsets)).offsets)
            self.held_offsets = yield from self._apply_offsets(offsets, self.held_offsets)
        if self.held_offsets and not rep.follower_mappings(self._config(), MappingType.GROUP):
            self.held_offsets = []  # no group namespace follows any more
        first = self.last_discovery_ms is None
        self.last_discovery_ms = yield from _now()
        if created or first:
            # The pull lane has new partitions to fetch, or learns that the
            # namespaces it follows hold none yet (nothing lags).
            yield WakeLanes()

    def _apply_offsets(
        self, offsets: list[msync.GroupOffset], retried: list[msync.GroupOffset]
    ) -> Generator[LaneRequest, object, list[msync.GroupOffset]]:
        """Stores replicated committed offsets (those just heard, and those
        held back before); returns those held back now."""
        if not offsets and not retried:
            return []
        now = yield from _now()
        effects, held = msync.apply_replicated_offsets(
            self.state, self.name, offsets, now, self.new_topic_id(), retried
        )
        if effects:
            yield Execute(tuple(effects), "offsets")
        yield Applied(False)
        return held

    # -- pull: this side follows topics -------------------------------------------------------

    def _pull(self, lane: Lane) -> Lanes:
        now = yield from _now()
        config = self._config()
        if not self.handshaken or not self._steps(config, now).pull:
            yield Idle(IDLE_POLL_MS)
            return
        s = self.settings
        full = rounds.follower_fetch_request(
            self.state, config, s.partition_max_bytes, now, self.fetches_built
        )
        if not full.partitions:
            if self.last_discovery_ms is not None:
                # Discovered, and the followed namespaces hold no topics yet:
                # nothing lags (an empty namespace is FOLLOWING).
                self.state.links.on_fetch_round(self.name, now)
            yield Idle(IDLE_POLL_MS)
            return
        request = self.fetch_session.request(full) if s.fetch_sessions else full
        call = ReplicaFetch(request, s.max_wait_ms, s.fetch_max_bytes)
        deadline_ms = rounds.fetch_deadline_ms(s.max_wait_ms)
        answer = yield from self._ask(lane, call, rounds.FetchAnswer, deadline_ms)
        whole = self.fetch_session.answered(request, answer)
        if whole is None:
            # The source no longer knows the session: contact, and at once a
            # full request (it learned nothing of the partitions).
            yield Note("info", f"link {self.name!r}: {answer.fetch_session_refused}")
            yield from _contact(self.state, self.name)
            return
        stored = yield from rounds.apply_fetched(
            self.state, self.name, whole, request.local_of, request.sent_ms
        )
        yield Applied(stored, request.sent_ms)
        if not stored:
            # This cluster's storage refused the records: the source is not
            # at fault and contact is not lost; the lane waits, doubling up
            # to BACKOFF_MAX_MS while the refusals go on. While it waits it
            # does not poll, so its lag is not known.
            self.state.links.storage_wait(self.name, (yield from _now()))
            yield Sleep(self.storage_backoff_ms)
            self.storage_backoff_ms = min(BACKOFF_MAX_MS, self.storage_backoff_ms * 2)
            return
        # A round stored what it fetched: its news is the lag again (a poll
        # sent after a wait reported what was acknowledged before it only
        # once its answer came).
        self.state.links.storage_wait(self.name, None)
        self.storage_backoff_ms = BACKOFF_MIN_MS
        config_now = self.state.links.configs.get(self.name)
        if config_now is not None and bool(answer.sync_state) != (config_now.mode == LinkMode.SYNC):
            # The source runs the other mode: learn the change now, not at
            # the next periodic handshake.
            self.last_handshake_ms = None
            yield WakeLanes()

    # -- push: this side leads ----------------------------------------------------------------

    def _push(self, lane: Lane) -> Lanes:
        now = yield from _now()
        config = self._config()
        if not self.handshaken or not self._steps(config, now).push:
            self.next_fetch = None
            yield Idle(IDLE_POLL_MS)
            return
        namespaces, offsets = self._push_discovery(config, now)
        request = self.next_fetch
        if request is None or not request.partitions:
            if request is not None and not namespaces and not offsets:
                yield Idle(IDLE_POLL_MS)  # the follower follows nothing yet
            bare = rounds.Push(config.link_id, namespaces, offsets)
            self.next_fetch = None
            self.next_fetch = yield from self._ask(
                lane, ReplicaPush(bare), rounds.FetchRequest
            )
            yield from _contact(self.state, self.name)
            return
        data = yield from self._serve(config.link_id, request.partitions, True)
        push = rounds.Push(
            config.link_id, namespaces, offsets, data, request.sent_ms, data.served_at_ms
        )
        # Until the follower answers it has no request outstanding: a push it
        # refused is not repeated from a request its log may have left.
        self.next_fetch = None
        cursor = rounds.continue_fetch(config, request.partitions, data)
        if cursor is None:
            self.next_fetch = yield from self._ask(lane, ReplicaPush(push), rounds.FetchRequest)
            yield from _contact(self.state, self.name)
            return
        self.next_fetch = yield from self._pipeline(lane, push, cursor)

    def _push_discovery(
        self, config: LinkConfig, now: int
    ) -> tuple[tuple[rounds.SourceNamespace, ...], tuple[msync.GroupOffset, ...]]:
        """What the push leaving now carries besides records: this side's
        namespaces and group offsets, each discovery interval."""
        if not self._steps(config, now).push_discovery:
            return (), ()
        self.last_push_discovery_ms = now
        return rounds.push_discovery(self.state, config)

    def _serve(
        self, link_id: str, parts: tuple[rounds.PartitionFetch, ...], acknowledges: bool
    ) -> Generator[LaneRequest, object, rounds.FetchAnswer]:
        """The follower's request served here (a long poll, unless read ahead)."""
        s = self.settings
        wait_ms = s.max_wait_ms if acknowledges else 0
        answered = yield ServeFetch(link_id, parts, wait_ms, s.fetch_max_bytes, acknowledges)
        return answer_of(answered, rounds.FetchAnswer, f"link {self.name!r}: serve")

    def _pipeline(
        self, lane: Lane, first: rounds.Push, cursor: tuple[rounds.PartitionFetch, ...] | None
    ) -> Generator[LaneRequest, object, rounds.FetchRequest]:
        """Pushes `first`, and while the follower appends it reads and sends
        what follows, up to PUSH_WINDOW pushes in flight, until there is
        nothing more to send at once; returns the follower's request after
        the last (its own position, which the next push answers)."""
        pending: deque[Ticket] = deque([(yield from self._send(lane, ReplicaPush(first)))])
        nxt: rounds.FetchRequest | None = None
        try:
            while pending:
                while cursor is not None and len(pending) < PUSH_WINDOW:
                    config = self._config()
                    more = yield from self._serve(config.link_id, cursor, False)
                    if more.total_bytes <= 0:
                        cursor = None
                        break
                    now = yield from _now()
                    namespaces, offsets = self._push_discovery(config, now)
                    push = rounds.Push(
                        config.link_id, namespaces, offsets, more, None, more.served_at_ms
                    )
                    pending.append((yield from self._send(lane, ReplicaPush(push))))
                    cursor = rounds.continue_fetch(config, cursor, more)
                ticket = pending.popleft()
                answered = yield Receive(ticket)
                nxt = answer_of(answered, rounds.FetchRequest, f"link {self.name!r}: push")
                yield from _contact(self.state, self.name)
        except ClusterError:
            if pending:
                yield Drop(tuple(pending))
            raise
        assert nxt is not None  # the loop ran at least once
        return nxt


def _now() -> Generator[LaneRequest, object, int]:
    return expect((yield Now()), int, "Now")


def _contact(state: ClusterState, name: str) -> Generator[LaneRequest, object, None]:
    """The remote answered: contact."""
    state.links.on_contact(name, (yield from _now()))


def apply_topics(
    state: ClusterState,
    config: LinkConfig,
    namespaces: list[rounds.SourceNamespace],
    new_topic_id: Callable[[], str],
    listed_at_ms: int,
) -> Generator[LaneRequest, object, bool]:
    """Follower side: carries out `rounds.plan_topics` for a discovery;
    returns whether it created follower topics."""
    plan = rounds.plan_topics(state, config, namespaces, new_topic_id, listed_at_ms)
    return (yield from rounds.carry_out_topics(state, config.name, plan))


# -- the source's side of the calls ----------------------------------------------------------


def link_of(state: ClusterState, link_id: str) -> LinkConfig:
    """The link a remote's call names. Raises LINK_DELETED when this side
    deleted it (the caller deletes its half at once, mid-round or not),
    UNKNOWN_LINK when it never knew it."""
    tomb = state.links.tombstones.get(link_id)
    if tomb is not None:
        state.links.check_not_deleted(link_id, tomb.name)
    return state.links.by_id(link_id)


def serve_list_topics(
    state: ClusterState, call: ListSourceTopics, now_ms: int
) -> rounds.SourceNamespace:
    """Source side of ListSourceTopics; the call is contact. Raises
    ClusterError when the link is unknown here (`link_of`)."""
    config = link_of(state, call.link_id)
    state.links.on_contact(config.name, now_ms)
    if call.kind == MappingType.PRINCIPAL:
        return rounds.source_principals(state, config, call.prefix)
    return rounds.source_topics(state, config, call.prefix)


def serve_group_offsets(state: ClusterState, call: FetchGroupOffsets, now_ms: int) -> GroupOffsets:
    """Source side of FetchGroupOffsets; the call is contact."""
    config = link_of(state, call.link_id)
    state.links.on_contact(config.name, now_ms)
    return GroupOffsets(tuple(rounds.source_group_offsets(state, call.prefix)))



def hold_fetch(
    state: ClusterState,
    link_id: str,
    parts: tuple[rounds.PartitionFetch, ...],
    max_wait_ms: int,
    max_bytes: int,
    read: rounds.ReplicaReader,
    settings: DriverSettings,
    *,
    from_remote: bool,
    acknowledges: bool = True,
    fetch_session: rounds.FetchSessionRef = rounds.NO_FETCH_SESSION,
) -> Generator[LaneRequest, object, rounds.FetchAnswer]:
    """Source side: answers a fetch (`rounds.serve_replica_fetch`) as soon as
    the answer is worth sending (`FetchAnswer.ready`), else holds it until a
    high watermark of a partition it reads moves or its wait ends
    (`rounds.served_wait_ms`: what it asked, within the longest a source
    holds), and answers what there is then. `max_bytes` 0: the settings'.
    Raises ClusterError when the link is unknown here (`link_of`), also
    when it is deleted while the fetch is held.

    A request of a fetch session (`fetch_session`) is served from the
    session (`fetch_sessions.source_session`): the partitions it names and
    those of the session with news; one the session refuses is answered at
    once with why (`FetchAnswer.fetch_session_refused`)."""
    start = yield from _now()
    until_ms = start + rounds.served_wait_ms(max_wait_ms)
    budget = max_bytes if max_bytes > 0 else settings.fetch_max_bytes
    link_of(state, link_id)
    session = source_session(state, link_id, fetch_session, parts)
    if isinstance(session, SessionRefused):
        return rounds.FetchAnswer([], served_at_ms=start, fetch_session_refused=session.reason)
    keys = session.parts if session is not None else [(p.source_topic, p.partition) for p in parts]
    watch = tuple(keys)
    while True:
        now = yield from _now()
        link_of(state, link_id)
        serve: Sequence[rounds.PartitionFetch] = parts
        rest: rounds.SessionRest | None = None
        if session is not None:
            if not still_open(state, link_id, session):
                why = f"fetch session {session.session_id} was closed while its fetch was held"
                return rounds.FetchAnswer([], served_at_ms=now, fetch_session_refused=why)
            rest = session.parts_to_serve(state, parts)
            serve = rest.serve
        answer = rounds.serve_replica_fetch(
            state, link_id, serve, now, read, budget, settings.partition_max_bytes,
            from_remote=from_remote, acknowledges=acknowledges, rest=rest,
        )  # fmt: skip
        done = answer.ready or now >= until_ms
        if done and session is not None:
            session.answered(state, answer)
            answer.fetch_session_id = session.session_id
        if answer.hw_moved:
            yield WakeWaiters()
        if done:
            return answer
        yield WaitForData(watch, until_ms)


__all__ = [
    "BACKOFF_MAX_MS",
    "BACKOFF_MIN_MS",
    "PUSH_WINDOW",
    "Answered",
    "DriverSettings",
    "Lane",
    "LinkDriver",
    "apply_topics",
    "hold_fetch",
]
