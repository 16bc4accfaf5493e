"""What a link's driver asks of its shell: the calls of the data path, each
naming the answer it expects, and the waits between them.

The lanes of `linkd.core.link_driver` are generators, like the operator
procedures (`linkd.core.requests`), and yield the same requests (`Execute`,
`Now`, `Sleep`, `Note`, `WakeWaiters`) and these:

- `Dial(call, timeout_ms)`: send `call` to the link's remote, in the link's
  session, and wait for its answer; answer: `Answered` (the remote's typed
  answer, or why there is none: its refusal, or LINK_UNREACHABLE when it
  could not be delivered or `timeout_ms` passed first: `unanswered`).
- `Send(call, timeout_ms)`: the same, without waiting; answer: a `Ticket`.
  `Receive(ticket)` waits for that call's `Answered`; `Drop(tickets)` says
  their answers are no longer wanted (answer None). A lane keeps several
  pushes in flight this way.
- `Idle(ms)`: nothing to do; answer: now, once `ms` passed or the lane was
  woken. Each lane has a wake flag, raised by `WakeLanes()` from another lane
  of the link or by the shell when the link changed (`LinkDriver.wake`); an
  Idle that begins with the flag raised ends at once. Either way the flag is
  lowered.
- `ServeFetch(...)`: serve a follower's fetch request on this cluster, as a
  source serves a remote's (`link_driver.hold_fetch`, a long poll);
  answer: `Answered` (a `FetchAnswer`, or the refusal).
- `WaitForData(partitions, until_ms)`: a long poll found nothing to send;
  answer: now, once a high watermark of one of `partitions` moved or
  `until_ms` came.
- `Applied(records, sent_ms)`: the follower applied a round (records of a
  fetch, or group offsets); shells count it. `Forget(link)`: the remote
  deleted the link: delete this side's half (`procedures.forget_deleted`),
  which stops the driver. Answer: None.

The calls (`LinkCall`) are what crosses to the other cluster; the shell
encodes them (the daemon as protobuf over gRPC, the simulator as messages of
a size on its network). Pure data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkConfig, MappingType
from linkd.core.requests import Handshake, Request, expect

# -- what crosses to the remote, and what comes back ----------------------------------------


@dataclass(frozen=True, slots=True)
class OpenSession:
    """Open the session every later call of the link runs in (a challenge,
    then the proof of the link key: `linkd.core.link_auth`). Answer:
    `SessionOpened`."""


@dataclass(frozen=True, slots=True)
class SessionOpened:
    pass


@dataclass(frozen=True, slots=True)
class ListSourceTopics:
    """The source's topics and READ ACLs under `prefix`, or for a principal
    namespace the ACLs of its principals. Answer: `rounds.SourceNamespace`."""

    link_id: str
    prefix: str  # the source's prefix
    kind: MappingType = MappingType.TOPIC


@dataclass(frozen=True, slots=True)
class FetchGroupOffsets:
    """The committed offsets of the source's groups under `prefix`. Answer:
    `GroupOffsets`."""

    link_id: str
    prefix: str


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    offsets: tuple[msync.GroupOffset, ...]


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    """A follower's fetch, held by the source up to `max_wait_ms` for data.
    Answer: `rounds.FetchAnswer`."""

    request: rounds.FetchRequest
    max_wait_ms: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class ReplicaPush:
    """A pushing leader's message. Answer: the follower's next fetch request
    (`rounds.FetchRequest`, its local names unknown here)."""

    push: rounds.Push


LinkCall = (
    Handshake | OpenSession | ListSourceTopics | FetchGroupOffsets | ReplicaFetch | ReplicaPush
)
LinkAnswer = (
    LinkConfig
    | SessionOpened
    | rounds.SourceNamespace
    | GroupOffsets
    | rounds.FetchAnswer
    | rounds.FetchRequest
)


def call_name(call: LinkCall) -> str:
    """The call's name on the wire (the Replication service's method)."""
    return type(call).__name__


def unanswered(link: str, call: LinkCall, why: str) -> ClusterError:
    """What a shell answers a call with that got no answer: not delivered,
    the connection lost, or its deadline passed."""
    what = f"link {link!r}: {call_name(call)}"
    return ClusterError(ErrorCode.LINK_UNREACHABLE, what, f"{what}: {why}")


@dataclass(frozen=True, slots=True)
class Answered:
    """What became of a call: the remote's answer, or the error."""

    answer: LinkAnswer | None = None
    error: ClusterError | None = None


A = TypeVar("A")


def answer_of(answered: object, kind: type[A], what: str) -> A:
    """A call's answer of the type it names, or its error raised."""
    got = expect(answered, Answered, what)
    if got.error is not None:
        raise got.error
    return expect(got.answer, kind, what)


# -- what a lane asks of its shell ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dial:
    call: LinkCall
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Ticket:
    number: int


@dataclass(frozen=True, slots=True)
class Send:
    call: LinkCall
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class Receive:
    ticket: Ticket


@dataclass(frozen=True, slots=True)
class Drop:
    tickets: tuple[Ticket, ...]


@dataclass(frozen=True, slots=True)
class Idle:
    ms: int


@dataclass(frozen=True, slots=True)
class WakeLanes:
    pass


@dataclass(frozen=True, slots=True)
class ServeFetch:
    link_id: str
    parts: tuple[rounds.PartitionFetch, ...]
    max_wait_ms: int
    max_bytes: int
    # False: a request this side made up (`rounds.continue_fetch`), not the
    # follower's position.
    acknowledges: bool = True


@dataclass(frozen=True, slots=True)
class WaitForData:
    partitions: tuple[tuple[str, int], ...]  # (topic, partition) on this cluster
    until_ms: int


@dataclass(frozen=True, slots=True)
class Applied:
    records: bool  # False: group offsets
    sent_ms: int | None = None  # when the round's request left (records)


@dataclass(frozen=True, slots=True)
class Forget:
    link: str


LaneRequest = (
    Request | Dial | Send | Receive | Drop | Idle | WakeLanes | ServeFetch | WaitForData
    | Applied | Forget
)
