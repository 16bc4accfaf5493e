"""Random conversations with the group coordinator, checked against a small model.

The model is what clients could know: the replies they received, the time, and
the offsets they committed successfully. It predicts whether a commit or a
delete should succeed from the group's description before the call, and checks
after every step:
- one leader per generation, and in CompletingRebalance/Stable it is a member;
- a group's generation never decreases (a deleted group starts over);
- in a Stable group every member holds (received) the group's generation;
- committed offsets equal the last successful commit per partition;
- every request gets at most one reply, and each one not cancelled gets it
  within a bound (2 x initial delay + the largest rebalance timeout) as long
  as the clock is ticked.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.groups import (
    GroupConfig,
    GroupCoordinator,
    GroupReply,
    JoinRequest,
    JoinResult,
    SyncResult,
)

GROUPS = ("g1", "g2")
PROTOCOL_SETS = (
    (("range", b"r"),),
    (("range", b"r"), ("rr", b"x")),
    (("rr", b"x"), ("range", b"r")),
    (("rr", b"x"), ("range", b"r")),
    (("range", b"r"), ("rr", b"x")),
    (("range", b"r"), ("rr", b"x")),
    (("range", b"r"), ("rr", b"x")),
    (("sticky", b"s"),),  # shares nothing with the others
)
SESSION_TIMEOUTS = (1_000, 5_000, 10_000)
REBALANCE_TIMEOUTS = (0, 500, 2_000, 3_000)  # 0: the session timeout
MAX_REBALANCE_MS = 10_000
TOPICS = ("t", "u")


@dataclass
class Pending:
    issued_ms: int
    kind: str  # "join" or "sync"
    group: str
    member: str  # "" for a new member's join
    generation: int = -1  # sync only
    assignments: dict[str, bytes] | None = None  # the leader's sync
    protocols: tuple[tuple[str, bytes], ...] = ()  # join only


class GroupMachine(RuleBasedStateMachine):
    @initialize(delay=st.sampled_from([0, 0, 300, 2_000]))
    def setup(self, delay: int) -> None:
        self.delay = delay
        self.gc = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=delay,
                                               max_group_size=5))
        self.now = 0
        self.next_rid = 1
        self.outstanding: dict[int, Pending] = {}
        self.cancelled: set[int] = set()
        self.members: dict[str, list[str]] = {g: [] for g in GROUPS}  # ids learned
        self.member_gen: dict[tuple[str, str], int] = {}
        self.last_join: dict[tuple[str, str], JoinResult] = {}
        self.protocols: dict[tuple[str, str], tuple[tuple[str, bytes], ...]] = {}
        self.incarnation: dict[str, int] = dict.fromkeys(GROUPS, 0)
        self.last_generation: dict[str, int] = dict.fromkeys(GROUPS, 0)
        self.leaders: dict[tuple[str, int, int], str] = {}
        self.assignments: dict[tuple[str, int, int], dict[str, bytes]] = {}
        self.offsets: dict[tuple[str, str, int], int] = {}

    # -- bookkeeping -------------------------------------------------------------------

    def rid(self) -> int:
        rid = self.next_rid
        self.next_rid += 1
        return rid

    def handle(self, replies: list[GroupReply]) -> None:
        ids = [r.request_id for r in replies]
        assert len(ids) == len(set(ids)), "two replies for one request in a batch"
        for r in replies:
            assert r.request_id not in self.cancelled, "reply to a cancelled request"
            assert r.request_id in self.outstanding, f"unexpected reply {r}"
        # Leaders' sync answers first, so followers' can be checked against them.
        ordered = sorted(replies, key=lambda r: self.outstanding[r.request_id].assignments
                         is None)
        for r in ordered:
            p = self.outstanding.pop(r.request_id)
            result = r.result
            if isinstance(result, JoinResult):
                assert p.kind == "join"
                self.on_join(p.group, result)
                self.protocols[(p.group, result.member_id)] = p.protocols
            elif isinstance(result, SyncResult):
                assert p.kind == "sync"
                key = (p.group, self.incarnation[p.group], p.generation)
                event(f"sync answered ({'leader' if p.assignments is not None else 'other'})")
                if p.assignments is not None:
                    self.assignments.setdefault(key, p.assignments)
                if key in self.assignments:
                    assert result.assignment == self.assignments[key].get(p.member, b"")
            else:
                assert isinstance(result, ClusterError)
                event(f"{p.kind} refused: {result.code.name}")

    def on_join(self, group: str, result: JoinResult) -> None:
        key = (group, self.incarnation[group], result.generation_id)
        assert self.leaders.setdefault(key, result.leader_id) == result.leader_id, \
            "two leaders in one generation"
        if result.member_id == result.leader_id:
            assert result.member_id in [m for m, _, _ in result.members]
        else:
            assert result.members == ()
        if result.member_id not in self.members[group]:
            self.members[group].append(result.member_id)
        self.member_gen[(group, result.member_id)] = result.generation_id
        self.last_join[(group, result.member_id)] = result

    def pick(self, group: str, index: int) -> str | None:
        known = self.members[group]
        return known[index % len(known)] if known else None

    def generation_of(self, group: str, member: str, stale: bool) -> int:
        gen = self.member_gen.get((group, member), 0)
        return gen - 1 if stale else gen

    # -- rules ---------------------------------------------------------------------------

    @rule(group=st.sampled_from(GROUPS), client=st.sampled_from(["a", "b", ""]),
          protocols=st.sampled_from(PROTOCOL_SETS), session=st.sampled_from(SESSION_TIMEOUTS),
          rebalance=st.sampled_from(REBALANCE_TIMEOUTS),
          protocol_type=st.sampled_from(["consumer"] * 7 + ["connect"]))
    def join_new(self, group: str, client: str, protocols: tuple[tuple[str, bytes], ...],
                 session: int, rebalance: int, protocol_type: str) -> None:
        rid = self.rid()
        self.outstanding[rid] = Pending(self.now, "join", group, "", protocols=protocols)
        req = JoinRequest(group, "", client, session, rebalance, protocol_type, protocols)
        self.handle(self.gc.join(rid, req, self.now))

    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 20),
          protocols=st.sampled_from(PROTOCOL_SETS), session=st.sampled_from(SESSION_TIMEOUTS),
          rebalance=st.sampled_from(REBALANCE_TIMEOUTS))
    def rejoin(self, group: str, index: int, protocols: tuple[tuple[str, bytes], ...],
               session: int, rebalance: int) -> None:
        member = self.pick(group, index)
        if member is None:
            return
        self.send_join(group, member, protocols, session, rebalance)

    def send_join(self, group: str, member: str, protocols: tuple[tuple[str, bytes], ...],
                  session: int, rebalance: int) -> None:
        rid = self.rid()
        self.outstanding[rid] = Pending(self.now, "join", group, member, protocols=protocols)
        req = JoinRequest(group, member, "x", session, rebalance, "consumer", protocols)
        self.handle(self.gc.join(rid, req, self.now))

    @rule(group=st.sampled_from(GROUPS))
    def everyone_rejoins(self, group: str) -> None:
        """Well-behaved clients: every member without a pending join rejoins as it was."""
        waiting = {p.member for p in self.outstanding.values()
                   if p.kind == "join" and p.group == group}
        for m in self.gc.describe_group(group).members:
            if m.member_id not in waiting and (group, m.member_id) in self.protocols:
                self.send_join(group, m.member_id, self.protocols[(group, m.member_id)],
                               10_000, 3_000)

    @rule(group=st.sampled_from(GROUPS))
    def a_polite_round(self, group: str) -> None:
        self.everyone_rejoins(group)
        self.everyone_syncs(group)

    @rule(group=st.sampled_from(GROUPS))
    def everyone_syncs(self, group: str) -> None:
        """Well-behaved clients: every member that knows the generation syncs; leader last."""
        d = self.gc.describe_group(group)
        ids = [m.member_id for m in d.members]
        leader = [m for m in ids if m == d.leader_id]
        for m in [m for m in ids if m != d.leader_id] + leader:
            if self.member_gen.get((group, m)) == d.generation_id:
                self.send_sync(group, m, d.generation_id, as_leader=True)

    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 20), stale=st.booleans(),
          as_leader=st.booleans())
    def sync(self, group: str, index: int, stale: bool, as_leader: bool) -> None:
        member = self.pick(group, index)
        if member is None:
            return
        self.send_sync(group, member, self.generation_of(group, member, stale and index % 4 == 0),
                       as_leader)

    def send_sync(self, group: str, member: str, gen: int, as_leader: bool) -> None:
        last = self.last_join.get((group, member))
        is_leader = last is not None and last.leader_id == member and last.generation_id == gen
        assignments: dict[str, bytes] | None = None
        if as_leader and last is not None and is_leader:
            assignments = {m: f"{m}@{gen}".encode() for m, _, _ in last.members}
        rid = self.rid()
        # The leader's first answered SyncGroup of a generation decides (None counts as {}).
        decides = (assignments or {}) if is_leader else None
        self.outstanding[rid] = Pending(self.now, "sync", group, member, gen, decides)
        self.handle(self.gc.sync(rid, group, gen, member, assignments, self.now))

    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 20), stale=st.booleans())
    def heartbeat(self, group: str, index: int, stale: bool) -> None:
        member = self.pick(group, index)
        if member is None:
            return
        gen = self.generation_of(group, member, stale and index % 4 == 0)
        try:
            self.gc.heartbeat(group, gen, member, self.now)
        except ClusterError as err:
            assert err.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                                ErrorCode.REBALANCE_IN_PROGRESS)

    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 20))
    def leave(self, group: str, index: int) -> None:
        member = self.pick(group, index)
        if member is None:
            return
        try:
            self.handle(self.gc.leave(group, member, self.now))
        except ClusterError as err:
            assert err.code == ErrorCode.UNKNOWN_MEMBER_ID

    @rule(dt=st.sampled_from([0, 1, 10, 100, 100, 500, 1_500, 4_000, 12_000]))
    def advance(self, dt: int) -> None:
        """Move the clock as the shell does: tick at every deadline on the way."""
        target = self.now + dt
        for _ in range(10_000):
            deadline = self.gc.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.now = max(self.now, deadline)
            self.handle(self.gc.tick(self.now))
            after = self.gc.next_deadline_ms()
            assert after is None or after > self.now, "tick left due work behind"
        else:
            raise AssertionError("timers never settle")
        self.now = target
        deadline = self.gc.next_deadline_ms()
        assert self.gc.tick(self.now) == []  # nothing was due: nothing happens
        assert self.gc.next_deadline_ms() == deadline

    @rule(index=st.integers(0, 50))
    def cancel(self, index: int) -> None:
        if not self.outstanding:
            return
        rid = sorted(self.outstanding)[index % len(self.outstanding)]
        p = self.outstanding.pop(rid)
        self.cancelled.add(rid)
        if p.member:  # its generation may change without it knowing
            self.member_gen.pop((p.group, p.member), None)
            self.last_join.pop((p.group, p.member), None)
        self.gc.cancel(rid)

    @rule(group=st.sampled_from(GROUPS), index=st.integers(0, 20),
          mode=st.sampled_from(["member", "member", "stale", "standalone"]),
          topic=st.sampled_from(TOPICS), partition=st.integers(0, 2),
          offset=st.integers(-1, 1_000))
    def commit(self, group: str, index: int, mode: str, topic: str, partition: int,
               offset: int) -> None:
        d = self.gc.describe_group(group)
        ids = [m.member_id for m in d.members]
        if mode == "standalone":
            member, gen = "", -1
            allowed = d.state in ("Empty", "Dead")
        else:
            picked = self.pick(group, index)
            if picked is None:
                return
            member = picked
            gen = self.generation_of(group, member, mode == "stale")
            allowed = (member in ids and gen == d.generation_id
                       and d.state != "CompletingRebalance")
            # Kafka: generation < 0 on an empty (or unknown) group is a standalone commit,
            # whatever the member id.
            allowed = allowed or (gen < 0 and d.state in ("Empty", "Dead"))
        # Any offset is kept as given (Kafka does not check it; -1 and -2 occur).
        try:
            self.gc.commit_offsets(group, gen, member, {(topic, partition): (offset, "m", 0)},
                                   self.now)
        except ClusterError:
            assert not allowed, "a commit the model allows was refused"
        else:
            assert allowed, "a commit the model refuses was accepted"
            event(f"commit accepted ({mode})")
            self.offsets[(group, topic, partition)] = offset

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group: str) -> None:
        d = self.gc.describe_group(group)
        try:
            self.gc.delete_group(group)
        except ClusterError as err:
            expected = (ErrorCode.GROUP_ID_NOT_FOUND if d.state == "Dead"
                        else ErrorCode.NON_EMPTY_GROUP)
            assert err.code == expected and d.state != "Empty"
        else:
            assert d.state == "Empty"
            self.incarnation[group] += 1
            self.last_generation[group] = 0
            for key in [k for k in self.offsets if k[0] == group]:
                del self.offsets[key]

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def leader_is_a_member(self) -> None:
        for group in GROUPS:
            d = self.gc.describe_group(group)
            ids = [m.member_id for m in d.members]
            assert len(ids) == len(set(ids))
            if d.state in ("CompletingRebalance", "Stable"):
                assert d.leader_id in ids
                key = (group, self.incarnation[group], d.generation_id)
                assert self.leaders.get(key, d.leader_id) == d.leader_id
            if d.state in ("Empty", "Dead"):
                assert ids == []

    @invariant()
    def generation_never_decreases(self) -> None:
        for group in GROUPS:
            gen = self.gc.describe_group(group).generation_id
            assert gen >= self.last_generation[group]
            self.last_generation[group] = gen

    @invariant()
    def stable_members_hold_the_generation(self) -> None:
        for group in GROUPS:
            d = self.gc.describe_group(group)
            if d.state != "Stable":
                continue
            event(f"stable group with {len(d.members)} members")
            for m in d.members:
                gen = self.member_gen.get((group, m.member_id))
                assert gen is None or gen == d.generation_id, (m.member_id, gen, d)

    @invariant()
    def committed_offsets_match_the_model(self) -> None:
        for group in GROUPS:
            got = {(t, p): c.offset for (t, p), c in self.gc.committed(group, None).items()}
            want = {(t, p): o for (g, t, p), o in self.offsets.items() if g == group}
            assert got == want

    @invariant()
    def pending_requests_are_answered_in_bounded_time(self) -> None:
        bound = 2 * self.delay + MAX_REBALANCE_MS
        for rid, p in self.outstanding.items():
            assert self.now - p.issued_ms < bound, (rid, p, self.now)
        pending = set(self.gc.pending_requests())
        assert set(self.outstanding) <= pending
        assert pending <= set(self.outstanding) | self.cancelled

    def teardown(self) -> None:
        # Enough time, with ticks, answers everything that is still pending.
        if not hasattr(self, "gc"):
            return
        for _ in range(4):
            self.advance(2 * self.delay + MAX_REBALANCE_MS)
        assert self.outstanding == {}
        snapshot = self.gc.snapshot()
        restored = GroupCoordinator.restore(self.gc.config, snapshot)
        for group in GROUPS:
            assert restored.committed(group, None) == self.gc.committed(group, None)


GroupMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = GroupMachine.TestCase
