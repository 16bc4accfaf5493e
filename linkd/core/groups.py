"""Consumer group coordinator: Kafka's classic group protocol, pure.

Rules (Kafka's GroupCoordinator, classic protocol, one coordinator for all groups):
- A group is Empty, PreparingRebalance, CompletingRebalance or Stable; a deleted
  or unknown group is Dead (it is simply absent from the table).
- JoinGroup with an empty member id adds a member named
  f"{client_id or 'member'}-{n}" (n: a per-coordinator counter) and starts a
  rebalance. A known member rejoining starts one when the group is Stable and it
  is the leader or its protocols changed, or when the group is
  CompletingRebalance and its protocols changed; otherwise it gets the current
  generation's answer at once.
- A rebalance (PreparingRebalance) completes when every member has a JoinGroup
  pending, or when its deadline passes: then members without a pending join are
  removed, the generation goes up by one and every remaining member gets its
  JoinResult (the leader with the member list). The deadline is the largest
  rebalance timeout of the members. When the group was Empty and
  `initial_rebalance_delay_ms` > 0, the rebalance instead waits that delay, and
  (generation 0 only, as Kafka) is extended while new members keep arriving, up
  to the rebalance timeout in all; a delay of 0 lets the first join complete at
  once.
- Leader: the previous leader if it rejoined, else the member whose join arrived
  first in this rebalance. Protocol: among the protocols every member supports,
  each member votes its first; most votes wins, a tie goes to the protocol voted
  by the earliest member (table order = order of first join).
- SyncGroup (CompletingRebalance): followers wait; the leader's SyncGroup carries
  the assignments (missing members get b"") and answers everyone waiting; the
  group becomes Stable. In Stable a SyncGroup answers at once. Members that have
  not sent SyncGroup a rebalance timeout after the join completed are removed
  and a new rebalance starts (Kafka's pending-sync timeout).
- Heartbeat: UNKNOWN_MEMBER_ID for an unknown member, ILLEGAL_GENERATION for a
  stale generation, REBALANCE_IN_PROGRESS during PreparingRebalance (the
  member's session is refreshed all the same, as Kafka does), else OK.
- A member whose session expires (no heartbeat, join, sync or commit within its
  session timeout, and no JoinGroup/SyncGroup pending) is removed; so is one that
  leaves. Removing a member rebalances a Stable/CompletingRebalance group and may
  complete a PreparingRebalance one. A pending request of a removed member is
  answered UNKNOWN_MEMBER_ID; waiting SyncGroups get REBALANCE_IN_PROGRESS when
  a rebalance starts.
- Offsets: a commit needs the current member and generation (REBALANCE_IN_PROGRESS
  during CompletingRebalance), or generation < 0 while the group is Empty or
  unknown (a standalone commit; creates the group). TxnOffsetCommit stages
  offsets per producer until the transaction ends (commit: they become
  committed; abort: dropped). Every offset change returns journal records
  (`linkd.core.journal`); `apply_record` replays them, `snapshot`/`restore`
  hold the same durable state (committed and staged offsets). The offsets
  themselves live apart from membership, as Kafka keeps them, in an
  `OffsetStore` (`linkd.core.group_offsets`): this module decides who may
  commit, the store holds what was committed. Membership, generations and
  the member-id counter are not durable: after a restart members rejoin.
- Static membership (KIP-345): a member joining with a group_instance_id that
  a current member holds, and no member id, takes that member's place: it gets
  a new member id, keeps the assignment and leadership, and, when the group is
  Stable and its protocols are unchanged, is answered at once with the current
  generation: no rebalance (in PreparingRebalance its join waits as any; in
  CompletingRebalance, or with other protocols, a rebalance starts). The old
  member id is fenced: its requests are answered FENCED_INSTANCE_ID, as is a
  join naming the instance id with a member id that is not its current one.
  A static member's session still expires as a dynamic member's does.

Theory of operation. Long-polling calls carry a request id. `join` and `sync`
never raise: they return the replies that complete now, which may include the
caller's own (a refusal is a reply holding a ClusterError) and other members'
pending ones; `tick(now_ms)` returns the replies completed by timers and
`next_deadline_ms()` says when it next has work. Every request id gets exactly
one reply, unless `cancel` dropped it: a cancelled request still counts for the
group (as in Kafka, where a disconnected client's callback still completes); only
its reply is suppressed. A JoinGroup or SyncGroup superseded by a newer one from
the same member is answered REBALANCE_IN_PROGRESS at once (Kafka drops it).
A pending JoinGroup is answered within the rebalance deadline, a pending
SyncGroup within the pending-sync deadline, so every reply is bounded in time.

State transitions (group level; "rebalance" = enter PreparingRebalance):

    state                event                                   next state
    Empty                new member joins                        PreparingRebalance
    PreparingRebalance   every member has a join pending, or
                         the deadline passes                     CompletingRebalance,
                                                                 or Empty if no member is left
    PreparingRebalance   member leaves / expires                 PreparingRebalance (may complete)
    CompletingRebalance  leader's SyncGroup                      Stable
    CompletingRebalance  new member, changed protocols, leave,
                         session expiry, pending-sync timeout    PreparingRebalance
    Stable               new member, leader rejoins, changed
                         protocols, leave, session expiry,
                         pending-sync timeout                    PreparingRebalance
    Empty (no members)   delete_group                            Dead (removed)

Limits (GroupConfig): members per group (max_group_size, "group full" ->
INVALID_REQUEST), groups (max_groups; an Empty group without members or offsets
is evicted to make room, else INVALID_REQUEST), distinct partitions with a
committed or staged offset per group (max_offsets_per_group), producers with
staged offsets per group (max_txn_producers_per_group), protocols per member
(MAX_PROTOCOLS), metadata bytes per offset (max_metadata_bytes).

Pure code: no I/O, clocks, threads or randomness; dicts are iterated in
insertion order or sorted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from linkd.core import journal as jr
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.group_offsets import CommittedOffset as CommittedOffset
from linkd.core.group_offsets import OffsetStore
from linkd.core.group_offsets import Partition as Partition

MAX_PROTOCOLS = 64
UNKNOWN_GENERATION = -1

OffsetSpec = tuple[int, str, int]  # (offset, metadata, leader_epoch)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_EMPTY = GroupState.EMPTY
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE


# -- public values -----------------------------------------------------------------


# Kafka's default group.initial.rebalance.delay.ms: the daemon's default, so
# that members joining one after the other share one rebalance as on Kafka.
# GroupConfig's own default stays 0: the simulator's scenarios pin runs made
# with it, and tests that start daemons ask for 0 to stay fast.
KAFKA_INITIAL_REBALANCE_DELAY_MS = 3000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 0
    min_session_timeout_ms: int = 1000  # Kafka: group.min.session.timeout.ms is 6000
    max_session_timeout_ms: int = 1_800_000
    max_metadata_bytes: int = 4096  # offset commit metadata (UTF-8 bytes)
    max_group_size: int = 1000
    max_groups: int = 10_000
    max_offsets_per_group: int = 100_000
    max_txn_producers_per_group: int = 1000

    def __post_init__(self) -> None:
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        for name in (
            "max_metadata_bytes",
            "max_group_size",
            "max_groups",
            "max_offsets_per_group",
            "max_txn_producers_per_group",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # 0: same as the session timeout (JoinGroup v0)
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    group_instance_id: str = ""
    client_host: str = ""  # reported by DescribeGroups only


@dataclass(frozen=True, slots=True)
class JoinResult:
    generation_id: int
    protocol_name: str
    leader_id: str
    member_id: str
    # (member_id, metadata for the chosen protocol, group_instance_id); leader only.
    members: tuple[tuple[str, bytes, str], ...]


@dataclass(frozen=True, slots=True)
class SyncResult:
    assignment: bytes
    protocol_name: str


@dataclass(frozen=True, slots=True)
class GroupReply:
    request_id: int
    result: JoinResult | SyncResult | ClusterError


class MemberDescription(NamedTuple):
    member_id: str
    client_id: str
    assignment: bytes  # b"" unless the group is Stable (as Kafka)
    group_instance_id: str
    client_host: str = ""
    metadata: bytes = b""  # for the group's protocol; b"" unless the group is Stable


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str  # "" unless the group is Stable (as Kafka)
    generation_id: int
    leader_id: str
    members: tuple[MemberDescription, ...]


# -- internal state ------------------------------------------------------------------


@dataclass(slots=True)
class _Member:
    member_id: str
    client_id: str
    group_instance_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    join_request: int | None = None  # pending JoinGroup (only in PreparingRebalance)
    join_seq: int = 0  # arrival order of that JoinGroup
    sync_request: int | None = None  # pending SyncGroup (only in CompletingRebalance)
    client_host: str = ""

    def kept_alive(self) -> bool:
        return self.join_request is not None or self.sync_request is not None

    def session_deadline_ms(self) -> int:
        return self.last_heartbeat_ms + self.session_timeout_ms

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(slots=True)
class _Group:
    group_id: str
    state: GroupState = _EMPTY
    protocol_type: str = ""
    protocol_name: str = ""
    generation_id: int = 0
    leader_id: str = ""
    members: dict[str, _Member] = field(default_factory=dict)
    # PreparingRebalance: when the join completes at the latest. With an initial
    # delay (Kafka's InitialDelayedJoin) the deadline may be extended instead.
    join_deadline_ms: int | None = None
    initial_delay_ms: int = 0  # > 0: the current rebalance is an initial delayed join
    initial_remaining_ms: int = 0
    new_member_added: bool = False
    # CompletingRebalance/Stable: members that have not sent SyncGroup yet.
    pending_sync: dict[str, None] = field(default_factory=dict)
    sync_deadline_ms: int | None = None
    # Member ids static members were replaced under: member id -> instance id
    # (the latest per instance only, so it stays as small as the group).
    fenced: dict[str, str] = field(default_factory=dict)

    def static_member(self, instance_id: str) -> _Member | None:
        if not instance_id:
            return None
        return next(
            (m for m in self.members.values() if m.group_instance_id == instance_id), None
        )

    def check_fenced(self, member_id: str) -> None:
        instance = self.fenced.get(member_id)
        if instance is not None:
            raise _err(
                ErrorCode.FENCED_INSTANCE_ID,
                self.group_id,
                f"member {member_id!r} was replaced by a newer member with group.instance.id "
                f"{instance!r}",
            )

    @property
    def resource(self) -> str:
        return f"group {self.group_id!r}"

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def check(self) -> None:
        """The group state machine's rules, asserted where a membership call
        or a timer ends (both shells run them): an Empty group has no
        members; a Stable or CompletingRebalance group has its leader among
        them; a JoinGroup waits only while the group prepares a rebalance, a
        SyncGroup only while it completes one; members still owing a
        SyncGroup are members."""
        where = f"group {self.group_id!r} ({self.state.value})"
        assert self.generation_id >= 0, f"{where}: generation {self.generation_id}"
        if self.state is _EMPTY:
            assert not self.members, f"{where}: has members {sorted(self.members)}"
        if self.state in (_STABLE, _COMPLETING):
            assert self.leader_id in self.members, f"{where}: leader {self.leader_id!r} gone"
        if self.state is _PREPARING:
            assert self.join_deadline_ms is not None, f"{where}: no join deadline"
        for m in self.members.values():
            assert m.join_request is None or self.state is _PREPARING, (
                f"{where}: member {m.member_id!r} waits on a JoinGroup"
            )
            assert m.sync_request is None or self.state is _COMPLETING, (
                f"{where}: member {m.member_id!r} waits on a SyncGroup"
            )
        strangers = sorted(set(self.pending_sync) - set(self.members))
        assert not strangers, f"{where}: owed SyncGroups of non-members {strangers}"

    def all_joined(self) -> bool:
        return all(m.join_request is not None for m in self.members.values())

    def idle(self) -> bool:
        """No members and no rebalance (forgotten when it holds no offsets either)."""
        return self.state is _EMPTY and not self.members

    def next_event(self) -> tuple[int, int, str] | None:
        """(deadline, kind, member id) of the earliest timer; kind 0 join, 1 sync, 2 session."""
        events: list[tuple[int, int, str]] = []
        if self.state is _PREPARING and self.join_deadline_ms is not None:
            events.append((self.join_deadline_ms, 0, ""))
        if (
            self.state in (_COMPLETING, _STABLE)
            and self.pending_sync
            and self.sync_deadline_ms is not None
        ):
            events.append((self.sync_deadline_ms, 1, ""))
        session = min(
            (
                (m.session_deadline_ms(), i)
                for i, m in enumerate(self.members.values())
                if not m.kept_alive()
            ),
            default=None,
        )
        if session is not None:
            events.append((session[0], 2, list(self.members)[session[1]]))
        return min(events, default=None)


def _err(code: ErrorCode, group_id: str, message: str) -> ClusterError:
    return ClusterError(code, f"group {group_id!r}", f"group {group_id!r}: {message}")


def _check_group_id(group_id: str) -> None:
    if not group_id:
        raise ClusterError(ErrorCode.INVALID_GROUP_ID, "group ''", "group id is empty")


# -- the coordinator -----------------------------------------------------------------------


def offset_commit_record(
    group_id: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str,
    leader_epoch: int,
    ts_ms: int,
) -> jr.OffsetCommit:
    """The journal record of one committed offset (a client's commit, or one
    written by replication or recovery)."""
    return jr.OffsetCommit(group_id, topic, partition, offset, metadata, leader_epoch, ts_ms)


# The journal records GroupCoordinator writes and replays.
GroupRecord = (
    jr.GroupDelete | jr.OffsetDelete | jr.TxnOffsetEnd | jr.OffsetCommit | jr.TxnOffsetStage
)


class GroupCoordinator:
    def __init__(self, config: GroupConfig = GroupConfig()) -> None:
        self.config = config
        self._groups: dict[str, _Group] = {}
        # Committed and staged offsets, apart from membership (as Kafka keeps them).
        self.offsets = OffsetStore()
        self._next_member_seq = 1
        self._next_join_seq = 1
        self._pending: dict[int, str] = {}  # request id -> group id
        self._cancelled: set[int] = set()  # membership tests only
        self._out: list[GroupReply] = []

    # -- replies -------------------------------------------------------------------

    def _reply(self, request_id: int, result: JoinResult | SyncResult | ClusterError) -> None:
        self._pending.pop(request_id, None)
        if request_id in self._cancelled:
            self._cancelled.discard(request_id)
            return
        self._out.append(GroupReply(request_id, result))

    def _flush(self) -> list[GroupReply]:
        out, self._out = self._out, []
        return out

    def _check_request_id(self, request_id: int) -> None:
        if request_id in self._pending:
            raise ValueError(f"request id {request_id} is already pending")

    def pending_requests(self) -> list[int]:
        """Request ids waiting for a reply (cancelled ones included), sorted."""
        return sorted(self._pending)

    def cancel(self, request_id: int) -> None:
        """The client went away: its reply is dropped (the group is not changed)."""
        if request_id in self._pending:
            self._cancelled.add(request_id)

    # -- group table ---------------------------------------------------------------------

    def _room_for(self, group_id: str) -> str | None:
        """Check a new group fits; returns the id of a group to evict first, if any."""
        if group_id in self._groups or len(self._groups) < self.config.max_groups:
            return None
        for gid, group in self._groups.items():
            if group.idle() and not self.offsets.holds(gid):
                return gid
        raise _err(
            ErrorCode.INVALID_REQUEST, group_id, f"too many groups (limit {self.config.max_groups})"
        )

    def _get_or_create(self, group_id: str, evict: str | None = None) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            if evict is not None:
                del self._groups[evict]
            group = self._groups[group_id] = _Group(group_id)
        return group

    # -- membership: join ------------------------------------------------------------------

    def join(self, request_id: int, request: JoinRequest, now_ms: int) -> list[GroupReply]:
        self._check_request_id(request_id)
        try:
            evict = self._validate_join(request)
        except ClusterError as err:
            self._reply(request_id, err)
            return self._flush()
        self._pending[request_id] = request.group_id
        group = self._get_or_create(request.group_id, evict)
        static = group.static_member(request.group_instance_id)
        if request.member_id:
            self._join_known(group, group.members[request.member_id], request_id, request, now_ms)
        elif static is not None:
            self._join_static_again(group, static, request_id, request, now_ms)
        else:
            self._join_new(group, request_id, request, now_ms)
        self._try_complete_join(group, now_ms)
        group.check()
        return self._flush()

    def _validate_join(self, request: JoinRequest) -> str | None:
        gid = request.group_id
        _check_group_id(gid)
        cfg = self.config
        if (
            not cfg.min_session_timeout_ms
            <= request.session_timeout_ms
            <= cfg.max_session_timeout_ms
        ):
            raise _err(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                gid,
                f"session timeout {request.session_timeout_ms} ms is outside "
                f"{cfg.min_session_timeout_ms}..{cfg.max_session_timeout_ms}",
            )
        if request.rebalance_timeout_ms < 0:
            raise _err(
                ErrorCode.INVALID_REQUEST,
                gid,
                f"rebalance timeout {request.rebalance_timeout_ms} ms is negative",
            )
        if not request.protocol_type or not request.protocols:
            raise _err(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                gid,
                "a member needs a protocol type and at least one protocol",
            )
        if len(request.protocols) > MAX_PROTOCOLS:
            raise _err(
                ErrorCode.INVALID_REQUEST,
                gid,
                f"{len(request.protocols)} protocols (limit {MAX_PROTOCOLS})",
            )
        group = self._groups.get(gid)
        static = group.static_member(request.group_instance_id) if group is not None else None
        if group is not None and request.member_id:
            group.check_fenced(request.member_id)
            if static is not None and static.member_id != request.member_id:
                raise _err(
                    ErrorCode.FENCED_INSTANCE_ID,
                    gid,
                    f"group.instance.id {request.group_instance_id!r} belongs to member "
                    f"{static.member_id!r}, not {request.member_id!r}",
                )
        if request.member_id and (group is None or request.member_id not in group.members):
            raise _err(
                ErrorCode.UNKNOWN_MEMBER_ID,
                gid,
                f"member {request.member_id!r} is not a member; rejoin without a member id",
            )
        if group is None:
            return self._room_for(gid)
        others = [m for m in group.members.values() if m.member_id != request.member_id]
        if others:
            if request.protocol_type != group.protocol_type:
                raise _err(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    gid,
                    f"protocol type {request.protocol_type!r} differs from the group's "
                    f"{group.protocol_type!r}",
                )
            common = {name for name, _ in others[0].protocols}
            for m in others[1:]:
                common &= {name for name, _ in m.protocols}
            if not any(name in common for name, _ in request.protocols):
                raise _err(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                    gid,
                    "none of the member's protocols "
                    f"{[name for name, _ in request.protocols]} is supported by every "
                    "member",
                )
        if (
            not request.member_id
            and static is None
            and len(group.members) >= self.config.max_group_size
        ):
            raise _err(
                ErrorCode.INVALID_REQUEST, gid, f"group full ({self.config.max_group_size} members)"
            )
        return None

    def _join_new(self, group: _Group, request_id: int, request: JoinRequest, now_ms: int) -> None:
        member_id = f"{request.client_id or 'member'}-{self._next_member_seq}"
        self._next_member_seq += 1
        member = _Member(
            member_id=member_id,
            client_id=request.client_id,
            group_instance_id=request.group_instance_id,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms or request.session_timeout_ms,
            protocols=tuple(request.protocols),
            last_heartbeat_ms=now_ms,
            client_host=request.client_host,
        )
        if group.state is _PREPARING and group.generation_id == 0:
            group.new_member_added = True  # extends an initial delayed join (Kafka)
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        self._set_join_request(group, member, request_id)
        self._maybe_prepare_rebalance(group, now_ms)

    def _join_known(
        self, group: _Group, member: _Member, request_id: int, request: JoinRequest, now_ms: int
    ) -> None:
        same = member.protocols == tuple(request.protocols)
        if group.state is _PREPARING:
            self._update_member_and_rebalance(group, member, request_id, request, now_ms)
        elif group.state is _COMPLETING:
            if same:  # it may have missed the JoinResult: answer it again
                self._reply(request_id, self._join_result(group, member))
            else:
                self._update_member_and_rebalance(group, member, request_id, request, now_ms)
        elif group.state is _STABLE:
            if member.member_id == group.leader_id or not same:
                self._update_member_and_rebalance(group, member, request_id, request, now_ms)
            else:
                self._reply(request_id, self._join_result(group, member, with_members=False))
        else:  # unreachable: an Empty group has no members
            self._reply(
                request_id,
                _err(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    group.group_id,
                    f"member {member.member_id!r} is not a member",
                ),
            )

    def _join_static_again(
        self, group: _Group, member: _Member, request_id: int, request: JoinRequest, now_ms: int
    ) -> None:
        """KIP-345: a static member back (a restarted consumer) takes its old
        place under a new member id; the old id is fenced."""
        old_id = member.member_id
        new_id = f"{request.group_instance_id}-{self._next_member_seq}"
        self._next_member_seq += 1
        group.members = {(new_id if k == old_id else k): m for k, m in group.members.items()}
        member.member_id = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync = {(new_id if k == old_id else k): None for k in group.pending_sync}
        group.fenced = {k: v for k, v in group.fenced.items() if v != request.group_instance_id}
        group.fenced[old_id] = request.group_instance_id
        fenced = _err(
            ErrorCode.FENCED_INSTANCE_ID,
            group.group_id,
            f"member {old_id!r} was replaced by a newer member with group.instance.id "
            f"{request.group_instance_id!r}",
        )
        for rid in (member.join_request, member.sync_request):
            if rid is not None:
                self._reply(rid, fenced)
        member.join_request = member.sync_request = None
        member.client_id, member.client_host = request.client_id, request.client_host
        member.last_heartbeat_ms = now_ms
        same = member.protocols == tuple(request.protocols)
        if group.state is _STABLE and same:
            member.session_timeout_ms = request.session_timeout_ms
            member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
            self._reply(request_id, self._join_result(group, member))
        else:
            self._update_member_and_rebalance(group, member, request_id, request, now_ms)

    def _update_member_and_rebalance(
        self, group: _Group, member: _Member, request_id: int, request: JoinRequest, now_ms: int
    ) -> None:
        member.protocols = tuple(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        self._set_join_request(group, member, request_id)
        self._maybe_prepare_rebalance(group, now_ms)

    def _set_join_request(self, group: _Group, member: _Member, request_id: int) -> None:
        if member.join_request is not None:
            self._reply(
                member.join_request,
                _err(
                    ErrorCode.REBALANCE_IN_PROGRESS,
                    group.group_id,
                    f"member {member.member_id!r}: superseded by a newer JoinGroup",
                ),
            )
        member.join_request = request_id
        member.join_seq = self._next_join_seq
        self._next_join_seq += 1

    def _join_result(
        self,
        group: _Group,
        member: _Member,
        with_members: bool = True,
    ) -> JoinResult:
        members: tuple[tuple[str, bytes, str], ...] = ()
        if with_members and member.member_id == group.leader_id:
            members = tuple(
                (m.member_id, m.metadata_for(group.protocol_name), m.group_instance_id)
                for m in group.members.values()
            )
        return JoinResult(
            group.generation_id, group.protocol_name, group.leader_id, member.member_id, members
        )

    # -- rebalance ---------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: _Group, now_ms: int) -> None:
        if group.state in (_EMPTY, _STABLE, _COMPLETING):
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: _Group, now_ms: int) -> None:
        if group.state is _COMPLETING:  # Kafka: resetAndPropagateAssignmentError
            for m in group.members.values():
                m.assignment = b""
                if m.sync_request is not None:
                    rid, m.sync_request = m.sync_request, None
                    self._reply(
                        rid,
                        _err(
                            ErrorCode.REBALANCE_IN_PROGRESS,
                            group.group_id,
                            "a new rebalance started; rejoin",
                        ),
                    )
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        timeout = group.rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if group.state is _EMPTY and delay > 0:
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(timeout - delay, 0)
            group.new_member_added = False
            group.join_deadline_ms = now_ms + delay
        else:
            group.initial_delay_ms = 0
            group.join_deadline_ms = now_ms + timeout
        group.state = _PREPARING
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: _Group, now_ms: int) -> None:
        if group.state is _PREPARING and group.initial_delay_ms == 0 and group.all_joined():
            self._complete_join(group, now_ms)

    def _join_deadline(self, group: _Group, now_ms: int) -> None:
        if group.initial_delay_ms > 0 and group.new_member_added and group.initial_remaining_ms > 0:
            # Kafka's InitialDelayedJoin.onComplete, quirks included.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline_ms = now_ms + delay
        else:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: _Group, now_ms: int) -> None:
        for member in [m for m in group.members.values() if m.join_request is None]:
            self._drop_member(group, member, "did not rejoin in time")
        group.join_deadline_ms = None
        group.initial_delay_ms = group.initial_remaining_ms = 0
        group.new_member_added = False
        group.generation_id += 1
        if not group.members:
            group.state = _EMPTY
            group.protocol_name = group.leader_id = ""
            return
        group.protocol_name = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = min(group.members.values(), key=lambda m: m.join_seq).member_id
        group.state = _COMPLETING
        for m in group.members.values():
            rid, m.join_request = m.join_request, None
            m.last_heartbeat_ms = now_ms
            assert rid is not None
            self._reply(rid, self._join_result(group, m))
        group.pending_sync = dict.fromkeys(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()

    @staticmethod
    def _select_protocol(group: _Group) -> str:
        members = list(group.members.values())
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        votes: dict[str, int] = {}  # insertion order = order of the first vote
        for m in members:
            vote = next(name for name, _ in m.protocols if name in common)
            votes[vote] = votes.get(vote, 0) + 1
        return max(votes.items(), key=lambda kv: kv[1])[0]  # first maximum wins a tie

    def _drop_member(self, group: _Group, member: _Member, why: str) -> None:
        """Remove a member, answering its pending requests; no rebalance logic."""
        error = _err(
            ErrorCode.UNKNOWN_MEMBER_ID,
            group.group_id,
            f"member {member.member_id!r} was removed: {why}",
        )
        for rid in (member.join_request, member.sync_request):
            if rid is not None:
                self._reply(rid, error)
        member.join_request = member.sync_request = None
        del group.members[member.member_id]
        group.pending_sync.pop(member.member_id, None)
        if group.leader_id == member.member_id:
            group.leader_id = ""

    def _remove_member_and_update(
        self, group: _Group, member: _Member, why: str, now_ms: int
    ) -> None:
        self._drop_member(group, member, why)
        if group.state in (_STABLE, _COMPLETING):
            self._prepare_rebalance(group, now_ms)
        elif group.state is _PREPARING:
            self._try_complete_join(group, now_ms)

    # -- membership: sync, heartbeat, leave --------------------------------------------------

    def sync(
        self,
        request_id: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes] | None,
        now_ms: int,
    ) -> list[GroupReply]:
        """`assignments` counts from the leader only (None: none given, like {})."""
        self._check_request_id(request_id)
        try:
            group, member = self._current_member(group_id, generation_id, member_id)
            if group.state is _PREPARING:
                raise _err(
                    ErrorCode.REBALANCE_IN_PROGRESS, group_id, "the group is rebalancing; rejoin"
                )
        except ClusterError as err:
            self._reply(request_id, err)
            return self._flush()
        self._pending[request_id] = group_id
        group.pending_sync.pop(member_id, None)
        if group.state is _STABLE:
            member.last_heartbeat_ms = now_ms
            self._reply(request_id, SyncResult(member.assignment, group.protocol_name))
        else:  # CompletingRebalance
            if member.sync_request is not None:
                self._reply(
                    member.sync_request,
                    _err(
                        ErrorCode.REBALANCE_IN_PROGRESS,
                        group_id,
                        f"member {member_id!r}: superseded by a newer SyncGroup",
                    ),
                )
            member.sync_request = request_id
            if member_id == group.leader_id:
                given = assignments or {}
                group.state = _STABLE
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                    if m.sync_request is not None:
                        rid, m.sync_request = m.sync_request, None
                        m.last_heartbeat_ms = now_ms
                        self._reply(rid, SyncResult(m.assignment, group.protocol_name))
        if not group.pending_sync:
            group.sync_deadline_ms = None
        group.check()
        return self._flush()

    def _current_member(
        self, group_id: str, generation_id: int, member_id: str
    ) -> tuple[_Group, _Member]:
        """The member, if it belongs to the group's current generation."""
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is not None:
            group.check_fenced(member_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise _err(
                ErrorCode.UNKNOWN_MEMBER_ID,
                group_id,
                f"member {member_id!r} is not a member; rejoin",
            )
        if generation_id != group.generation_id:
            raise _err(
                ErrorCode.ILLEGAL_GENERATION,
                group_id,
                f"member {member_id!r} is not in generation {generation_id} (current "
                f"{group.generation_id})",
            )
        return group, member

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, now_ms: int) -> None:
        """Raises ClusterError. REBALANCE_IN_PROGRESS still refreshes the session."""
        group, member = self._current_member(group_id, generation_id, member_id)
        member.last_heartbeat_ms = now_ms
        if group.state is _PREPARING:
            raise _err(
                ErrorCode.REBALANCE_IN_PROGRESS, group_id, "the group is rebalancing; rejoin"
            )

    def leave(self, group_id: str, member_id: str, now_ms: int) -> list[GroupReply]:
        """Raises ClusterError for an unknown member; returns replies completed by it."""
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is not None:
            group.check_fenced(member_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            raise _err(
                ErrorCode.UNKNOWN_MEMBER_ID, group_id, f"member {member_id!r} is not a member"
            )
        self._remove_member_and_update(group, member, "left the group", now_ms)
        group.check()
        return self._flush()

    # -- timers ------------------------------------------------------------------------

    def tick(self, now_ms: int) -> list[GroupReply]:
        for gid in sorted(self._groups):
            group = self._groups[gid]
            while (event := group.next_event()) is not None and event[0] <= now_ms:
                _, kind, member_id = event
                if kind == 0:
                    self._join_deadline(group, now_ms)
                elif kind == 1:
                    for mid in list(group.pending_sync):
                        self._drop_member(group, group.members[mid], "no SyncGroup in time")
                    self._prepare_rebalance(group, now_ms)
                else:
                    self._remove_member_and_update(
                        group, group.members[member_id], "session timed out", now_ms
                    )
                group.check()
        return self._flush()

    def next_deadline_ms(self) -> int | None:
        deadlines = [e[0] for g in self._groups.values() if (e := g.next_event()) is not None]
        return min(deadlines, default=None)

    # -- committed offsets -------------------------------------------------------------------

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: dict[Partition, OffsetSpec],
        now_ms: int,
    ) -> list[GroupRecord]:
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        member: _Member | None = None
        if group is None:
            if generation_id >= 0:
                raise _err(
                    ErrorCode.ILLEGAL_GENERATION,
                    group_id,
                    f"the group does not exist; generation {generation_id} is stale",
                )
        else:
            member = self._validate_commit_member(group, generation_id, member_id)
        self._validate_offsets(group_id, offsets)
        self._check_offset_room(group, group_id, offsets)
        if not offsets:
            return []
        evict = self._room_for(group_id)
        if member is not None:
            member.last_heartbeat_ms = now_ms
        records: list[GroupRecord] = [
            offset_commit_record(group_id, t, p, o, m, e, now_ms)
            for (t, p), (o, m, e) in sorted(offsets.items())
        ]
        self._get_or_create(group_id, evict)
        for record in records:
            self.apply_record(record)
        return records

    def _validate_commit_member(
        self, group: _Group, generation_id: int, member_id: str
    ) -> _Member | None:
        gid = group.group_id
        if generation_id < 0 and group.state is _EMPTY:
            return None  # standalone commit
        if generation_id < 0 and not member_id:
            raise _err(
                ErrorCode.UNKNOWN_MEMBER_ID,
                gid,
                f"standalone commits need an empty group; it is {group.state.value}",
            )
        _, member = self._current_member(gid, generation_id, member_id)
        if group.state is _COMPLETING:
            raise _err(
                ErrorCode.REBALANCE_IN_PROGRESS,
                gid,
                "the group is completing a rebalance; sync first",
            )
        return member

    def _validate_offsets(self, group_id: str, offsets: dict[Partition, OffsetSpec]) -> None:
        for (topic, p), (_offset, metadata, _epoch) in sorted(offsets.items()):
            if not topic or p < 0:
                raise _err(ErrorCode.INVALID_REQUEST, group_id, f"invalid partition {topic!r}/{p}")
            # Any offset is kept as given, as Kafka keeps it: clients commit -1
            # or -2 while they reset a position, and readers treat a negative
            # committed offset as none (auto.offset.reset applies).
            size = len(metadata.encode("utf-8"))
            if size > self.config.max_metadata_bytes:
                raise _err(
                    ErrorCode.OFFSET_METADATA_TOO_LARGE,
                    group_id,
                    f"metadata for partition {topic}-{p} has {size} bytes (limit "
                    f"{self.config.max_metadata_bytes})",
                )

    def _check_offset_room(
        self, group: _Group | None, group_id: str, offsets: dict[Partition, OffsetSpec]
    ) -> None:
        known: set[Partition] = set(offsets)
        if group is not None:
            known.update(self.offsets.known_partitions(group_id))
        if len(known) > self.config.max_offsets_per_group:
            raise _err(
                ErrorCode.INVALID_REQUEST,
                group_id,
                f"more than {self.config.max_offsets_per_group} partitions with offsets",
            )

    def committed(
        self,
        group_id: str,
        partitions: list[Partition] | None,
    ) -> dict[Partition, CommittedOffset]:
        """Committed offsets (sorted by partition); partitions without one are left out."""
        _check_group_id(group_id)
        if group_id not in self._groups:
            return {}
        return self.offsets.committed(group_id, partitions)

    def delete_group(self, group_id: str) -> list[GroupRecord]:
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise ClusterError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {group_id!r}",
                f"group {group_id!r} does not exist",
            )
        if group.members or group.state is not _EMPTY:
            raise _err(
                ErrorCode.NON_EMPTY_GROUP,
                group_id,
                f"the group has {len(group.members)} members ({group.state.value})",
            )
        record = jr.GroupDelete(group_id)
        self.apply_record(record)
        return [record]

    def delete_offsets(self, group_id: str, partitions: list[Partition]) -> list[GroupRecord]:
        """Kafka's OffsetDelete, refused (INVALID_REQUEST) while the group has members."""
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            raise ClusterError(
                ErrorCode.GROUP_ID_NOT_FOUND,
                f"group {group_id!r}",
                f"group {group_id!r} does not exist",
            )
        if group.members:
            raise _err(
                ErrorCode.INVALID_REQUEST,
                group_id,
                f"the group is active ({len(group.members)} members); offsets can be "
                "deleted from an empty group only",
            )
        held = self.offsets.committed(group_id, None)
        records: list[GroupRecord] = [
            jr.OffsetDelete(group_id, t, p) for t, p in dict.fromkeys(partitions) if (t, p) in held
        ]
        for record in records:
            self.apply_record(record)
        return records

    def forget_topic(self, topic: str) -> list[GroupRecord]:
        """A topic was deleted: every group forgets its committed offsets for
        it, as Kafka's coordinator does, so a topic created later under the
        same name starts with none (empty groups included)."""
        records: list[GroupRecord] = [
            jr.OffsetDelete(gid, t, p) for gid, t, p in self.offsets.committed_for_topic(topic)
        ]
        for record in records:
            self.apply_record(record)
        return records

    # -- transactional offsets -------------------------------------------------------------

    def stage_txn_offsets(
        self, producer_id: int, group_id: str, offsets: dict[Partition, OffsetSpec], now_ms: int
    ) -> list[GroupRecord]:
        """TxnOffsetCommit: invisible to `committed` until `end_txn_offsets` commits."""
        _check_group_id(group_id)
        if producer_id < 0:
            raise _err(ErrorCode.INVALID_REQUEST, group_id, f"invalid producer id {producer_id}")
        self._validate_offsets(group_id, offsets)
        group = self._groups.get(group_id)
        self._check_offset_room(group, group_id, offsets)
        producers = self.offsets.staging_producers(group_id)
        if (
            group is not None
            and producer_id not in producers
            and len(producers) >= self.config.max_txn_producers_per_group
        ):
            raise _err(
                ErrorCode.INVALID_REQUEST,
                group_id,
                f"more than {self.config.max_txn_producers_per_group} producers with "
                "staged offsets",
            )
        if not offsets:
            return []
        evict = self._room_for(group_id)
        records: list[GroupRecord] = [
            jr.TxnOffsetStage(group_id, producer_id, t, p, o, m, e, now_ms)
            for (t, p), (o, m, e) in sorted(offsets.items())
        ]
        self._get_or_create(group_id, evict)
        for record in records:
            self.apply_record(record)
        return records

    def end_txn_offsets(
        self, producer_id: int, group_ids: list[str], commit: bool, now_ms: int
    ) -> list[GroupRecord]:
        """Commit or drop the producer's staged offsets in these groups (idempotent)."""
        records: list[GroupRecord] = []
        for gid in dict.fromkeys(group_ids):
            if producer_id not in self.offsets.staging_producers(gid):
                continue
            record = jr.TxnOffsetEnd(gid, producer_id, commit, now_ms)
            self.apply_record(record)
            records.append(record)
        return records

    # -- durability --------------------------------------------------------------------

    def set_committed(
        self,
        group_id: str,
        topic: str,
        partition: int,
        offset: int,
        metadata: str,
        leader_epoch: int,
        ts_ms: int,
    ) -> jr.OffsetCommit:
        """Writes a committed offset outside the client protocol (replication
        and recovery); returns the record to journal."""
        record = offset_commit_record(
            group_id, topic, partition, offset, metadata, leader_epoch, ts_ms
        )
        self.apply_record(record)
        return record

    def apply_record(self, record: GroupRecord) -> None:
        """Replay a record returned earlier (no limits are checked: it happened)."""
        gid = record.group
        if isinstance(record, jr.GroupDelete):
            group = self._groups.get(gid)
            if group is not None and not group.members:
                del self._groups[gid]
        elif isinstance(record, jr.OffsetCommit | jr.TxnOffsetStage):
            self._get_or_create(gid)  # a group with offsets is known (Empty)
        self.offsets.apply(record)

    def snapshot(self) -> dict[str, object]:
        """The durable state (committed and staged offsets), JSON-serialisable."""
        return {"version": 1, "groups": self.offsets.snapshot()}

    @classmethod
    def restore(cls, config: GroupConfig, snapshot: dict[str, object]) -> GroupCoordinator:
        coordinator = cls(config)
        for g in jr.json_list(snapshot["groups"]):
            coordinator._get_or_create(coordinator.offsets.restore_group(jr.json_object(g)))
        return coordinator

    # -- queries ------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str, str]]:
        return [
            (gid, self._groups[gid].state.value, self._groups[gid].protocol_type)
            for gid in sorted(self._groups)
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        _check_group_id(group_id)
        group = self._groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, GroupState.DEAD.value, "", "", 0, "", ())
        stable = group.state is _STABLE
        return GroupDescription(
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name if stable else "",
            generation_id=group.generation_id,
            leader_id=group.leader_id,
            members=tuple(
                MemberDescription(
                    m.member_id,
                    m.client_id,
                    m.assignment if stable else b"",
                    m.group_instance_id,
                    m.client_host,
                    m.metadata_for(group.protocol_name) if stable else b"",
                )
                for m in group.members.values()
            ),
        )

    def is_active(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def has_pending_txn_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.staging_producers(group_id))

    def pending_txn_partitions(self, group_id: str) -> set[Partition]:
        """Partitions with offsets staged by an open transaction (an OffsetFetch
        that requires stable offsets answers those as unstable)."""
        return self.offsets.staged_partitions(group_id)
