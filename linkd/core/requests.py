"""What the core asks a shell to do in a procedure, and what crosses to the
other cluster of a link.

A procedure (linkd/core/procedures.py, and the push round of
linkd/core/link_rounds.py) is a generator: it yields a `Request` and is sent
its answer. Both shells answer the same requests, the daemon with files, gRPC
and asyncio time, the simulator with its in-memory stores, direct calls and
virtual time:

- `Execute(effects, traffic)`: carry out the effects in order (journal,
  appends; `traffic` names the I/O for shells that account for it); answer:
  now (ms), once appends are durable.
  (A link's driver yields these requests too, and those of
  `linkd.core.link_calls`: calls on the data path and the waits between.)
- `Call(address, request)`: deliver a `RemoteRequest` to the cluster at
  `address`; answer: a `Reply` (the remote's answer, its refusal, or
  LINK_UNREACHABLE when it cannot be reached).
- `Tell(address, request)`: the same, best effort, in the background;
  answer: None.
- `Sleep(ms)`, `Now()`: answer: now (ms).
- `LinkChanged(link)`: start the link's runner if this side dials, or wake
  it; `LinkDeleted(link)`: stop it; `WakeWaiters(partitions)`: high
  watermarks moved there (None: anywhere), wake the long polls watching
  them; `Note(level, message)`: what an operator must see in the log.
  Answer: None.

A procedure is sent each answer as an `object` and names the answer it
expects where it asks: `now = yield from clock()`, `reply = yield from
call(address, request, what, LinkConfig)` (a `Replied[LinkConfig]`: its
`value()` is the answer, or the refusal raised). An answer of another type
than the one named is a bug in the shell: `WrongAnswer`.

Pure data: no I/O.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Generic, TypeVar

from linkd.core.effects import Effect
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LineageHop, LinkConfig, MappingKey
from linkd.core.recovery import RemoteGroupOffsets, RemotePartitions

# -- what crosses to the other cluster ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeCluster:
    """Who is there (creating a link learns the remote's cluster id)."""


@dataclass(frozen=True, slots=True)
class Handshake:
    config: LinkConfig  # the sender's view
    create: bool = False
    # Keys (sender's view) of the mappings an operator is changing now: the
    # receiver refuses the call rather than converge on a refusal.
    proposed: tuple[MappingKey, ...] = ()
    # Receiver side only: the sealed link key the creating sender's session
    # brought (`link_auth`), stored with the new link; never sent.
    link_key: str = ""


@dataclass(frozen=True, slots=True)
class RemoveLink:
    link_id: str


@dataclass(frozen=True, slots=True)
class DescribePartitions:
    link_id: str
    prefix: str  # the receiver's topic namespace prefix
    group_prefix: str | None = None  # the receiver's group prefix, if offsets are wanted
    groups_only: bool = False
    # Each partition with the marks of its batches (`histories.log_marks`),
    # which recovery and an attach's check compare their own batches with.
    with_marks: bool = False


@dataclass(frozen=True, slots=True)
class Promote:
    link_id: str
    namespaces: tuple[tuple[str, str], ...]  # (type, the receiver's prefix)


RemoteRequest = DescribeCluster | Handshake | RemoveLink | DescribePartitions | Promote


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    cluster_id: str


@dataclass(frozen=True, slots=True)
class NamespaceStanding:
    """Who may write a namespace on the cluster that describes it: whether
    it is reserved there, follows a link other than the one asked over,
    and is named by a procedure's journalled plan there (whose re-run
    decides who writes it)."""

    reserved: bool = False
    follows_elsewhere: bool = False
    in_plan: bool = False

    @property
    def writes_nowhere(self) -> bool:
        """No client writes it there and nothing will make it writable: a
        cluster that followed it would follow a namespace nobody writes."""
        return self.reserved and not self.follows_elsewhere and not self.in_plan


@dataclass(frozen=True, slots=True)
class PartitionsDescription:
    cluster_id: str
    partitions: RemotePartitions
    group_offsets: RemoteGroupOffsets
    # The describer's lineage of the namespace asked about (the topic
    # namespace `prefix`; with groups_only, the group namespace
    # `group_prefix`), nearest first, not counting its own mapping of that
    # prefix on the asking link (one a recovery's attach replaces): a
    # recovery refuses before its cut to follow a copy of its own copy.
    lineage: tuple[LineageHop, ...] = ()
    # Who may write that namespace there (a recovery refuses to follow a
    # namespace reserved there that nothing will make writable).
    standing: NamespaceStanding = NamespaceStanding()


@dataclass(frozen=True, slots=True)
class Promoted:
    partitions: int  # that started a new leader epoch
    aborted_dangling: int


RemoteAnswer = ClusterIdentity | LinkConfig | PartitionsDescription | Promoted | None



# -- what a procedure asks of its shell ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Execute:
    effects: tuple[Effect, ...]
    traffic: str = "metadata"  # "metadata" | "replica" | "offsets" | "retention"
    # The asker handles its storage refusing the appends: a shell whose
    # storage refuses one (a full disk, a file-size limit, a read-only data
    # directory) still carries out every effect but the appends (a
    # truncation the model already made must reach the storage too), puts
    # the partitions the appends were for back at what is stored, and
    # answers `NotStored` instead of raising STORAGE_ERROR.
    refusable: bool = False


@dataclass(frozen=True, slots=True)
class NotStored:
    """The answer to a refusable Execute whose appends the storage refused:
    when, and the shell's STORAGE_ERROR. Appends before the refused one may
    be stored; the partitions' logs are back at what is."""

    now_ms: int
    error: ClusterError


@dataclass(frozen=True, slots=True)
class Call:
    address: str
    request: RemoteRequest
    what: str  # for errors: "link 'ab': handshake"


@dataclass(frozen=True, slots=True)
class Tell:
    address: str
    request: RemoteRequest
    what: str


@dataclass(frozen=True, slots=True)
class Sleep:
    ms: int


@dataclass(frozen=True, slots=True)
class Now:
    pass


@dataclass(frozen=True, slots=True)
class LinkChanged:
    link: str


@dataclass(frozen=True, slots=True)
class LinkDeleted:
    link: str


@dataclass(frozen=True, slots=True)
class WakeWaiters:
    # (topic, partition) whose high watermark moved; None: anywhere.
    partitions: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class Note:
    level: str  # "debug" | "info" | "warning"
    message: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A step of a durable procedure (linkd/core/plans.py) ended and its
    outcome is journalled: `point` names it ("reverse:detach-mappings", or
    "reverse:detach-mappings#1" after the first namespace of a step).
    Answer: None. Only test hooks act on it: they crash the cluster here, so
    that a test reaches every point between two steps."""

    procedure: str
    link: str
    point: str


Request = (
    Execute | Call | Tell | Sleep | Now | LinkChanged | LinkDeleted | WakeWaiters | Note
    | Checkpoint
)


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a `Call`: what the remote answered, or why not."""

    answer: RemoteAnswer = None
    error: ClusterError | None = None
    now_ms: int = 0

    def value(self) -> RemoteAnswer:
        """The answer, or the refusal raised."""
        if self.error is not None:
            raise self.error
        return self.answer


def unreachable(what: str, address: str, why: str) -> ClusterError:
    """What a shell answers a Call it could not deliver with."""
    return ClusterError(
        ErrorCode.LINK_UNREACHABLE, what, f"{what}: {address or 'no address'}: {why}"
    )


# -- the answers a procedure names -------------------------------------------------------------

A = TypeVar("A")


class WrongAnswer(TypeError):
    """A shell answered a request with something else than it names: a bug
    in that shell, never a refusal."""


def expect(value: object, kind: type[A], what: str) -> A:
    """`value` as the `kind` a request names for its answer."""
    if not isinstance(value, kind):
        raise WrongAnswer(f"{what}: the shell answered {type(value).__name__}, not {kind.__name__}")
    return value


@dataclass(frozen=True, slots=True)
class Replied(Generic[A]):
    """A `Call`'s reply as the procedure that made it sees it: the remote's
    answer, of the type the call named (`expects`; None when there is none:
    refused or unreachable, `error`), and when it came."""

    answer: A | None
    error: ClusterError | None
    now_ms: int
    expects: type[A]

    def value(self) -> A:
        """The answer, or the refusal raised."""
        if self.error is not None:
            raise self.error
        return expect(self.answer, self.expects, self.expects.__name__)


def call(
    address: str, request: RemoteRequest, what: str, expects: type[A]
) -> Generator[Request, object, Replied[A]]:
    """`Call(address, request, what)`: its reply, the answer an `expects`."""
    reply = expect((yield Call(address, request, what)), Reply, what)
    if reply.error is not None:
        return Replied(None, reply.error, reply.now_ms, expects)
    return Replied(expect(reply.answer, expects, what), None, reply.now_ms, expects)


def clock() -> Generator[Request, object, int]:
    """`Now()`: now (ms)."""
    return expect((yield Now()), int, "Now")


def sleep(ms: int) -> Generator[Request, object, int]:
    """`Sleep(ms)`: now (ms), once `ms` passed."""
    return expect((yield Sleep(ms)), int, "Sleep")


def execute_refusable(
    effects: tuple[Effect, ...], traffic: str = "metadata"
) -> Generator[Request, object, int | NotStored]:
    """A refusable `Execute`: now (ms), or `NotStored` when the storage
    refused its appends."""
    done = yield Execute(effects, traffic, refusable=True)
    if isinstance(done, NotStored):
        return done
    return expect(done, int, "Execute")
