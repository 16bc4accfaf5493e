"""Stories of the consumer group coordinator (linkd/core/groups.py)."""

from __future__ import annotations

import json
from itertools import count

import pytest

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.groups import (
    CommittedOffset,
    GroupConfig,
    GroupCoordinator,
    GroupReply,
    JoinRequest,
    JoinResult,
    SyncResult,
)
from linkd.core.journal import (
    GroupDelete,
    JournalRecord,
    OffsetCommit,
    OffsetDelete,
    TxnOffsetEnd,
    TxnOffsetStage,
    decode,
    encode,
)

PROTOS = (("range", b"meta-range"), ("roundrobin", b"meta-rr"))


def join_req(member_id: str = "", client_id: str = "c", group: str = "g1",
             session_ms: int = 10_000, rebalance_ms: int = 5_000,
             protocols: tuple[tuple[str, bytes], ...] = PROTOS,
             protocol_type: str = "consumer", instance: str = "") -> JoinRequest:
    return JoinRequest(group_id=group, member_id=member_id, client_id=client_id,
                       session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                       protocol_type=protocol_type, protocols=protocols,
                       group_instance_id=instance)


class Harness:
    """A coordinator plus request ids and reply bookkeeping."""

    def __init__(self, config: GroupConfig | None = None) -> None:
        self.gc = GroupCoordinator(config or GroupConfig())
        self.ids = count(1)
        self.replies: dict[int, JoinResult | SyncResult | ClusterError] = {}

    def take(self, replies: list[GroupReply]) -> None:
        for r in replies:
            assert r.request_id not in self.replies, "two replies for one request"
            self.replies[r.request_id] = r.result

    def join(self, req: JoinRequest, now: int) -> int:
        rid = next(self.ids)
        self.take(self.gc.join(rid, req, now))
        return rid

    def sync(self, member: str, gen: int, now: int, assignments: dict[str, bytes] | None = None,
             group: str = "g1") -> int:
        rid = next(self.ids)
        self.take(self.gc.sync(rid, group, gen, member, assignments, now))
        return rid

    def tick(self, now: int) -> None:
        self.take(self.gc.tick(now))

    def leave(self, member: str, now: int, group: str = "g1") -> None:
        self.take(self.gc.leave(group, member, now))

    def joined(self, rid: int) -> JoinResult:
        result = self.replies[rid]
        assert isinstance(result, JoinResult), result
        return result

    def synced(self, rid: int) -> SyncResult:
        result = self.replies[rid]
        assert isinstance(result, SyncResult), result
        return result

    def error(self, rid: int) -> ErrorCode:
        result = self.replies[rid]
        assert isinstance(result, ClusterError), result
        return result.code

    def stable_pair(self) -> tuple[str, str]:
        """Two members in generation 1, assignments given; returns (leader, follower)."""
        a = self.join(join_req(client_id="a"), 0)
        leader = self.joined(a).member_id
        b = self.join(join_req(client_id="b"), 1)
        assert b not in self.replies  # generation 1 of a alone is over: rebalancing
        a2 = self.join(join_req(member_id=leader), 2)
        follower = self.joined(b).member_id
        assert self.joined(a2).generation_id == 2
        self.sync(leader, 2, 3, {leader: b"A", follower: b"B"})
        self.sync(follower, 2, 3)
        assert self.gc.describe_group("g1").state == "Stable"
        return leader, follower


def raises(code: ErrorCode) -> pytest.RaisesExc[ClusterError]:
    return pytest.raises(ClusterError, check=lambda e: e.code == code)


# -- membership -----------------------------------------------------------------------


def test_two_members_join__both_get_generation_1__leader_assigns() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=100))
    ra = h.join(join_req(client_id="a"), 0)
    rb = h.join(join_req(client_id="b"), 10)
    assert h.replies == {}
    assert h.gc.describe_group("g1").state == "PreparingRebalance"
    h.tick(99)
    assert h.replies == {}
    h.tick(100)  # b arrived during the delay: Kafka extends it once more
    assert h.replies == {}
    assert h.gc.next_deadline_ms() == 200
    h.tick(200)
    a, b = h.joined(ra), h.joined(rb)
    assert (a.member_id, b.member_id) == ("a-1", "b-2")
    assert a.generation_id == b.generation_id == 1
    assert a.leader_id == b.leader_id == "a-1"
    assert a.protocol_name == b.protocol_name == "range"
    assert a.members == (("a-1", b"meta-range", ""), ("b-2", b"meta-range", ""))
    assert b.members == ()
    # The follower's SyncGroup waits for the leader's.
    sb = h.sync("b-2", 1, 210)
    assert sb not in h.replies
    sa = h.sync("a-1", 1, 220, {"a-1": b"p0", "b-2": b"p1"})
    assert h.synced(sa) == SyncResult(b"p0", "range")
    assert h.synced(sb) == SyncResult(b"p1", "range")
    d = h.gc.describe_group("g1")
    assert (d.state, d.generation_id, d.leader_id, d.protocol_name) == ("Stable", 1, "a-1",
                                                                        "range")
    assert [(m.member_id, m.client_id, m.assignment) for m in d.members] == [
        ("a-1", "a", b"p0"), ("b-2", "b", b"p1")]


def test_first_join_without_initial_delay_completes_at_once() -> None:
    h = Harness()
    r = h.join(join_req(client_id=""), 5)
    result = h.joined(r)
    assert result == JoinResult(1, "range", "member-1", "member-1",
                                (("member-1", b"meta-range", ""),))
    assert h.gc.describe_group("g1").state == "CompletingRebalance"
    s = h.sync("member-1", 1, 6, {"member-1": b"all"})
    assert h.synced(s).assignment == b"all"
    assert h.gc.list_groups() == [("g1", "Stable", "consumer")]


def test_one_leaves__the_other_rejoins_and_leads_generation_3() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    h.leave(leader, 100)
    assert h.gc.describe_group("g1").state == "PreparingRebalance"
    with raises(ErrorCode.REBALANCE_IN_PROGRESS):
        h.gc.heartbeat("g1", 2, follower, 101)
    r = h.join(join_req(member_id=follower, client_id="b"), 102)
    result = h.joined(r)  # every remaining member has rejoined: completes at once
    assert (result.generation_id, result.leader_id) == (3, follower)
    assert result.members == ((follower, b"meta-range", ""),)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.gc.heartbeat("g1", 2, leader, 103)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.leave(leader, 104)


def test_last_member_leaving_empties_the_group_and_bumps_the_generation() -> None:
    h = Harness()
    r = h.join(join_req(), 0)
    member = h.joined(r).member_id
    h.leave(member, 1)
    d = h.gc.describe_group("g1")
    assert (d.state, d.generation_id, d.members, d.leader_id) == ("Empty", 2, (), "")
    assert not h.gc.is_active("g1")
    assert h.gc.next_deadline_ms() is None


def test_session_expiry_removes_the_member_and_rebalances() -> None:
    h = Harness()
    leader, follower = h.stable_pair()  # session 10 s, last heartbeat at 3
    h.gc.heartbeat("g1", 2, leader, 5_000)
    assert h.gc.next_deadline_ms() == 10_003  # the follower's session
    h.tick(10_002)
    assert h.gc.describe_group("g1").state == "Stable"
    h.tick(10_003)
    d = h.gc.describe_group("g1")
    assert d.state == "PreparingRebalance"
    assert [m.member_id for m in d.members] == [leader]
    with raises(ErrorCode.REBALANCE_IN_PROGRESS):
        h.gc.heartbeat("g1", 2, leader, 10_004)
    r = h.join(join_req(member_id=leader), 10_005)
    assert h.joined(r).generation_id == 3
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.gc.heartbeat("g1", 2, follower, 10_006)


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    rc = h.join(join_req(client_id="c", rebalance_ms=1_000), 100)  # deadline 100 + 5000
    ra = h.join(join_req(member_id=leader), 200)
    with raises(ErrorCode.REBALANCE_IN_PROGRESS):  # alive, but not rejoining
        h.gc.heartbeat("g1", 2, follower, 3_000)
    assert h.gc.next_deadline_ms() == 5_100
    h.tick(5_099)
    assert ra not in h.replies and rc not in h.replies
    h.tick(5_100)
    a, c = h.joined(ra), h.joined(rc)
    assert a.generation_id == c.generation_id == 3
    assert a.leader_id == leader
    assert [m[0] for m in a.members] == [leader, c.member_id]
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.gc.heartbeat("g1", 3, follower, 5_101)


def test_new_leader_is_the_first_member_to_rejoin() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    rc = h.join(join_req(client_id="c"), 10)
    rb = h.join(join_req(member_id=follower), 11)
    h.leave(leader, 12)  # the old leader is gone; c joined first, then b
    assert h.joined(rc).leader_id == h.joined(rc).member_id
    assert h.joined(rb).leader_id == h.joined(rc).member_id


def test_heartbeat_errors() -> None:
    h = Harness()
    leader, _ = h.stable_pair()
    with raises(ErrorCode.INVALID_GROUP_ID):
        h.gc.heartbeat("", 2, leader, 10)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.gc.heartbeat("nope", 2, leader, 10)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        h.gc.heartbeat("g1", 2, "ghost-9", 10)
    with pytest.raises(ClusterError) as info:
        h.gc.heartbeat("g1", 1, leader, 10)
    assert info.value.code == ErrorCode.ILLEGAL_GENERATION
    assert info.value.resource == "group 'g1'"
    assert info.value.message == f"group 'g1': member '{leader}' is not in generation 1 " \
                                 "(current 2)"
    h.gc.heartbeat("g1", 2, leader, 10)  # fine


def test_heartbeat_during_completing_rebalance_is_fine() -> None:
    h = Harness()
    r = h.join(join_req(), 0)
    h.gc.heartbeat("g1", 1, h.joined(r).member_id, 1)


def test_sync_errors() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    assert h.error(h.sync(leader, 1, 10)) == ErrorCode.ILLEGAL_GENERATION
    assert h.error(h.sync("ghost", 2, 10)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.error(h.sync(leader, 2, 10, group="other")) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.error(h.sync(leader, 2, 10, group="")) == ErrorCode.INVALID_GROUP_ID
    assert h.synced(h.sync(follower, 2, 10)).assignment == b"B"  # Stable: at once
    h.join(join_req(client_id="z"), 11)
    assert h.error(h.sync(follower, 2, 12)) == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_pending_when_a_rebalance_starts_gets_rebalance_in_progress() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    h.join(join_req(member_id=leader), 10)
    rb = h.join(join_req(member_id=follower), 11)
    assert h.joined(rb).generation_id == 3
    sb = h.sync(follower, 3, 12)
    assert sb not in h.replies
    h.join(join_req(client_id="late"), 13)  # a new member: rebalance again
    assert h.error(sb) == ErrorCode.REBALANCE_IN_PROGRESS


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    ra = h.join(join_req(member_id=leader), 100)
    h.join(join_req(member_id=follower), 100)
    assert h.joined(ra).generation_id == 3
    sb = h.sync(follower, 3, 200)
    assert h.gc.next_deadline_ms() == 5_100  # pending-sync deadline: completion + 5 s
    h.tick(5_100)
    assert h.error(sb) == ErrorCode.REBALANCE_IN_PROGRESS
    d = h.gc.describe_group("g1")
    assert d.state == "PreparingRebalance"
    assert [m.member_id for m in d.members] == [follower]


def test_follower_rejoin_with_same_metadata_in_stable_gets_the_current_generation() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    r = h.join(join_req(member_id=follower), 10)
    assert h.joined(r) == JoinResult(2, "range", leader, follower, ())
    assert h.gc.describe_group("g1").state == "Stable"
    # The leader rejoining forces a rebalance (Kafka: metadata may have changed).
    ra = h.join(join_req(member_id=leader), 11)
    assert ra not in h.replies
    assert h.gc.describe_group("g1").state == "PreparingRebalance"


def test_changed_protocols_force_a_rebalance() -> None:
    h = Harness()
    _, follower = h.stable_pair()
    r = h.join(join_req(member_id=follower, protocols=(("roundrobin", b"x"),)), 10)
    assert r not in h.replies
    assert h.gc.describe_group("g1").state == "PreparingRebalance"


def test_rejoin_in_completing_rebalance_with_same_metadata_repeats_the_answer() -> None:
    h = Harness()
    r1 = h.join(join_req(), 0)
    member = h.joined(r1).member_id
    r2 = h.join(join_req(member_id=member), 1)
    assert h.joined(r2) == h.joined(r1)


def test_protocol_is_chosen_by_votes_ties_by_member_order() -> None:
    h = Harness(GroupConfig(initial_rebalance_delay_ms=50))
    both_rr_first = (("roundrobin", b"r"), ("range", b"g"))
    both_range_first = (("range", b"g"), ("roundrobin", b"r"))
    ra = h.join(join_req(client_id="a", protocols=both_rr_first), 0)
    h.join(join_req(client_id="b", protocols=both_range_first), 0)
    h.join(join_req(client_id="c", protocols=both_range_first), 0)
    h.tick(100)
    h.tick(200)
    assert h.joined(ra).protocol_name == "range"  # 2 votes to 1
    h2 = Harness(GroupConfig(initial_rebalance_delay_ms=50))
    ra = h2.join(join_req(client_id="a", protocols=both_rr_first), 0)
    h2.join(join_req(client_id="b", protocols=both_range_first), 0)
    h2.tick(100)
    h2.tick(200)
    assert h2.joined(ra).protocol_name == "roundrobin"  # tie: a voted first


def test_join_validation() -> None:
    h = Harness()
    assert h.error(h.join(join_req(group=""), 0)) == ErrorCode.INVALID_GROUP_ID
    assert h.error(h.join(join_req(session_ms=999), 0)) == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.error(h.join(join_req(session_ms=1_800_001), 0)) == \
        ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.error(h.join(join_req(protocols=()), 0)) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.error(h.join(join_req(member_id="x-1"), 0)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.gc.list_groups() == []  # nothing was created
    h.join(join_req(), 0)
    assert h.error(h.join(join_req(protocol_type="connect"), 1)) == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.error(h.join(join_req(protocols=(("sticky", b""),)), 1)) == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.error(h.join(join_req(member_id="c-77"), 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert len(h.gc.describe_group("g1").members) == 1


def test_group_full() -> None:
    h = Harness(GroupConfig(max_group_size=2))
    h.join(join_req(), 0)
    h.join(join_req(), 0)
    r = h.join(join_req(), 0)
    assert h.error(r) == ErrorCode.INVALID_REQUEST
    assert "group full" in str(h.replies[r])


def test_too_many_groups_evicts_an_empty_group_without_offsets() -> None:
    h = Harness(GroupConfig(max_groups=2))
    h.gc.commit_offsets("keep", -1, "", {("t", 0): (1, "", -1)}, 0)
    member = h.joined(h.join(join_req(group="gone"), 0)).member_id
    h.leave(member, 1, group="gone")
    h.join(join_req(group="new"), 2)
    assert [g for g, _, _ in h.gc.list_groups()] == ["keep", "new"]
    with raises(ErrorCode.INVALID_REQUEST):
        h.gc.commit_offsets("third", -1, "", {("t", 0): (1, "", -1)}, 3)


def test_static_member_instance_id_is_recorded() -> None:
    h = Harness()
    r = h.join(join_req(instance="host-1"), 0)
    assert h.joined(r).members[0][2] == "host-1"
    assert h.gc.describe_group("g1").members[0].group_instance_id == "host-1"


def _static_pair(h: Harness) -> tuple[str, str]:
    """Two static members (instances i-a, i-b) Stable in generation 2."""
    a = h.join(join_req(client_id="a", instance="i-a"), 0)
    leader = h.joined(a).member_id
    b = h.join(join_req(client_id="b", instance="i-b"), 1)
    a2 = h.join(join_req(member_id=leader, instance="i-a"), 2)
    follower = h.joined(b).member_id
    assert h.joined(a2).generation_id == 2
    h.sync(leader, 2, 3, {leader: b"A", follower: b"B"})
    h.sync(follower, 2, 3)
    return leader, follower


def test_a_static_member_back_within_its_session_keeps_its_place_without_a_rebalance() -> None:
    h = Harness()
    _leader, follower = _static_pair(h)
    # The follower's process restarts: it joins again with its instance id and
    # no member id, and is answered at once, in the same generation.
    again = h.joined(h.join(join_req(client_id="b2", instance="i-b"), 4))
    assert again.generation_id == 2 and again.member_id != follower
    assert h.gc.describe_group("g1").state == "Stable"
    assert h.synced(h.sync(again.member_id, 2, 5)).assignment == b"B"
    # The old member id is fenced, wherever it shows up.
    with raises(ErrorCode.FENCED_INSTANCE_ID):
        h.gc.heartbeat("g1", 2, follower, 6)
    with raises(ErrorCode.FENCED_INSTANCE_ID):
        h.gc.commit_offsets("g1", 2, follower, {("t", 0): (1, "", -1)}, 6)
    assert h.error(h.join(join_req(member_id=follower, instance="i-b"), 6)) \
        == ErrorCode.FENCED_INSTANCE_ID
    # The leader restarting keeps the leadership, and the member list.
    back = h.joined(h.join(join_req(client_id="a2", instance="i-a"), 7))
    assert back.leader_id == back.member_id and len(back.members) == 2
    assert back.generation_id == 2


def test_a_static_member_with_other_protocols_or_during_a_rebalance_rebalances() -> None:
    h = Harness()
    _static_pair(h)
    changed = h.join(join_req(client_id="b2", instance="i-b", protocols=(("range", b"new"),)),
                     4)
    assert changed not in h.replies  # a rebalance: it waits for the join to complete
    assert h.gc.describe_group("g1").state == "PreparingRebalance"
    h.tick(4 + 5_000)
    assert h.joined(changed).generation_id == 3


def test_superseded_join_is_answered_and_cancelled_reply_is_dropped() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    r1 = h.join(join_req(member_id=leader), 10)
    r2 = h.join(join_req(member_id=leader), 11)
    assert h.error(r1) == ErrorCode.REBALANCE_IN_PROGRESS
    rb = h.join(join_req(member_id=follower), 12)
    assert rb in h.replies and r2 in h.replies
    # A cancelled request still counts for the group; only its reply is dropped.
    h.sync(leader, 3, 13, {})
    ra = h.join(join_req(member_id=leader), 20)
    h.gc.cancel(ra)
    assert h.gc.pending_requests() == [ra]
    rb = h.join(join_req(member_id=follower), 21)
    assert h.joined(rb).generation_id == 4
    assert ra not in h.replies
    assert h.gc.pending_requests() == []


def test_reusing_a_pending_request_id_is_a_caller_bug() -> None:
    gc = GroupCoordinator()
    gc.join(1, join_req(), 0)
    gc.join(2, join_req(), 0)  # pending: rebalance (member 1 must rejoin)
    with pytest.raises(ValueError):
        gc.join(2, join_req(), 0)


# -- offsets ---------------------------------------------------------------------------


def test_standalone_commit_creates_an_empty_group() -> None:
    gc = GroupCoordinator()
    records = gc.commit_offsets("simple", -1, "", {("t", 1): (42, "m", 3)}, 1_000)
    assert [encode(r) for r in records] == [
        {"type": "offset_commit", "group": "simple", "topic": "t", "partition": 1, "offset": 42,
         "metadata": "m", "leader_epoch": 3, "ts": 1_000}]
    assert gc.committed("simple", None) == {("t", 1): CommittedOffset(42, "m", 3, 1_000)}
    assert gc.committed("simple", [("t", 1), ("t", 2)]) == {
        ("t", 1): CommittedOffset(42, "m", 3, 1_000)}
    assert gc.committed("unknown", None) == {}
    assert gc.list_groups() == [("simple", "Empty", "")]
    assert gc.commit_offsets("simple", -1, "", {}, 1_001) == []


def test_commit_needs_current_member_and_generation() -> None:
    h = Harness()
    leader, follower = h.stable_pair()
    gc = h.gc
    with raises(ErrorCode.ILLEGAL_GENERATION):
        gc.commit_offsets("g1", 1, leader, {("t", 0): (5, "", -1)}, 10)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):
        gc.commit_offsets("g1", 2, "ghost", {("t", 0): (5, "", -1)}, 10)
    with raises(ErrorCode.UNKNOWN_MEMBER_ID):  # standalone while the group has members
        gc.commit_offsets("g1", -1, "", {("t", 0): (5, "", -1)}, 10)
    with raises(ErrorCode.ILLEGAL_GENERATION):  # unknown group, positive generation
        gc.commit_offsets("nope", 1, "x", {("t", 0): (5, "", -1)}, 10)
    assert gc.committed("g1", None) == {}
    gc.commit_offsets("g1", 2, follower, {("t", 0): (5, "", -1)}, 10)
    # During PreparingRebalance current-generation members may still commit.
    h.join(join_req(member_id=leader), 20)
    gc.commit_offsets("g1", 2, follower, {("t", 0): (6, "", -1)}, 21)
    # During CompletingRebalance: REBALANCE_IN_PROGRESS.
    h.join(join_req(member_id=follower), 22)
    with raises(ErrorCode.REBALANCE_IN_PROGRESS):
        gc.commit_offsets("g1", 3, follower, {("t", 0): (7, "", -1)}, 23)
    assert gc.committed("g1", None)[("t", 0)].offset == 6


def test_invalid_offsets_change_nothing() -> None:
    gc = GroupCoordinator(GroupConfig(max_metadata_bytes=4))
    gc.commit_offsets("g", -1, "", {("t", 0): (1, "", -1)}, 0)
    with pytest.raises(ClusterError) as info:
        gc.commit_offsets("g", -1, "", {("t", 0): (2, "", -1), ("t", -1): (5, "", -1)}, 1)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    assert "'t'/-1" in info.value.message
    with raises(ErrorCode.OFFSET_METADATA_TOO_LARGE):
        gc.commit_offsets("g", -1, "", {("t", 0): (2, "", -1), ("t", 2): (3, "12345", -1)}, 1)
    with raises(ErrorCode.OFFSET_METADATA_TOO_LARGE):  # bytes, not characters
        gc.commit_offsets("g", -1, "", {("t", 0): (2, "éé€", -1)}, 1)
    with raises(ErrorCode.INVALID_GROUP_ID):
        gc.commit_offsets("", -1, "", {("t", 0): (2, "", -1)}, 1)
    assert gc.committed("g", None) == {("t", 0): CommittedOffset(1, "", -1, 0)}


def test_negative_offsets_are_kept_as_given_as_kafka_keeps_them() -> None:
    gc = GroupCoordinator()
    gc.commit_offsets("g", -1, "", {("t", 0): (-1, "", -1), ("t", 1): (-2, "", -1)}, 0)
    assert {k: c.offset for k, c in gc.committed("g", None).items()} == {
        ("t", 0): -1, ("t", 1): -2}


def test_offsets_per_group_limit() -> None:
    gc = GroupCoordinator(GroupConfig(max_offsets_per_group=2))
    gc.commit_offsets("g", -1, "", {("t", 0): (1, "", -1), ("t", 1): (1, "", -1)}, 0)
    gc.commit_offsets("g", -1, "", {("t", 0): (2, "", -1)}, 0)  # known partition: fine
    with raises(ErrorCode.INVALID_REQUEST):
        gc.stage_txn_offsets(7, "g", {("t", 2): (1, "", -1)}, 0)


def test_txn_offsets_are_visible_only_after_commit() -> None:
    gc = GroupCoordinator()
    gc.commit_offsets("g", -1, "", {("t", 0): (1, "", -1)}, 0)
    records = gc.stage_txn_offsets(7, "g", {("t", 0): (10, "x", 2), ("t", 1): (11, "", -1)}, 5)
    assert [r.TYPE for r in records] == ["txn_offset_stage"] * 2
    assert gc.committed("g", None) == {("t", 0): CommittedOffset(1, "", -1, 0)}
    assert gc.has_pending_txn_offsets("g")
    end = gc.end_txn_offsets(7, ["g", "other"], True, 9)
    assert end == [TxnOffsetEnd("g", 7, True, 9)]
    assert gc.committed("g", None) == {("t", 0): CommittedOffset(10, "x", 2, 5),
                                       ("t", 1): CommittedOffset(11, "", -1, 5)}
    assert gc.end_txn_offsets(7, ["g"], True, 10) == []  # repeated at recovery: nothing


def test_txn_abort_drops_staged_offsets() -> None:
    gc = GroupCoordinator()
    gc.stage_txn_offsets(7, "g", {("t", 0): (10, "", -1)}, 5)
    gc.stage_txn_offsets(8, "g", {("t", 1): (20, "", -1)}, 5)
    gc.end_txn_offsets(7, ["g"], False, 6)
    assert gc.committed("g", None) == {}
    gc.end_txn_offsets(8, ["g"], True, 7)
    assert gc.committed("g", None) == {("t", 1): CommittedOffset(20, "", -1, 5)}
    assert not gc.has_pending_txn_offsets("g")


def test_delete_group_and_offsets() -> None:
    h = Harness()
    h.stable_pair()
    gc = h.gc
    with raises(ErrorCode.NON_EMPTY_GROUP):
        gc.delete_group("g1")
    with raises(ErrorCode.INVALID_REQUEST):
        gc.delete_offsets("g1", [("t", 0)])
    with raises(ErrorCode.GROUP_ID_NOT_FOUND):
        gc.delete_group("nope")
    with raises(ErrorCode.GROUP_ID_NOT_FOUND):
        gc.delete_offsets("nope", [("t", 0)])
    gc.commit_offsets("s", -1, "", {("t", 0): (1, "", -1), ("t", 1): (2, "", -1)}, 0)
    assert gc.delete_offsets("s", [("t", 0), ("t", 9), ("t", 0)]) == [OffsetDelete("s", "t", 0)]
    assert list(gc.committed("s", None)) == [("t", 1)]
    assert gc.delete_group("s") == [GroupDelete("s")]
    d = gc.describe_group("s")
    assert (d.state, d.members, d.generation_id) == ("Dead", (), 0)
    assert gc.committed("s", None) == {}


def test_snapshot_restore_and_replay_give_the_same_committed_offsets() -> None:
    gc = GroupCoordinator()
    journal: list[JournalRecord] = []
    journal += gc.commit_offsets("a", -1, "", {("t", 0): (1, "m", 0), ("u", 3): (9, "", 1)}, 1)
    journal += gc.commit_offsets("a", -1, "", {("t", 0): (2, "n", 0)}, 2)
    journal += gc.commit_offsets("b", -1, "", {("t", 0): (5, "", -1)}, 3)
    journal += gc.stage_txn_offsets(7, "a", {("t", 0): (30, "tx", 2)}, 4)
    journal += gc.stage_txn_offsets(8, "c", {("v", 0): (40, "", -1)}, 5)
    journal += gc.delete_offsets("a", [("u", 3)])
    journal += gc.commit_offsets("d", -1, "", {("t", 0): (5, "", -1)}, 6)
    journal += gc.delete_group("d")
    stored = json.loads(json.dumps([encode(r) for r in journal]))  # the shell stores JSON

    replayed = GroupCoordinator()
    for text in stored:
        record = decode(text)
        assert isinstance(
            record, OffsetCommit | OffsetDelete | GroupDelete | TxnOffsetStage | TxnOffsetEnd
        )
        replayed.apply_record(record)
    restored = GroupCoordinator.restore(GroupConfig(), json.loads(json.dumps(gc.snapshot())))
    for other in (replayed, restored):
        for group in ("a", "b", "c", "d"):
            assert other.committed(group, None) == gc.committed(group, None)
        assert other.snapshot() == gc.snapshot()
    # Staged offsets survived too: ending the transactions gives the same result.
    for coordinator in (gc, replayed, restored):
        coordinator.end_txn_offsets(7, ["a"], True, 10)
        coordinator.end_txn_offsets(8, ["c"], True, 10)
    assert replayed.committed("a", None) == restored.committed("a", None) == \
        gc.committed("a", None)
    assert gc.committed("a", None)[("t", 0)] == CommittedOffset(30, "tx", 2, 4)
    assert restored.committed("c", None) == {("v", 0): CommittedOffset(40, "", -1, 5)}
    with pytest.raises(ValueError, match="unknown type 'bogus'"):
        decode({"type": "bogus", "group": "a"})


def test_describe_unknown_group_is_dead_and_list_is_sorted() -> None:
    h = Harness()
    h.join(join_req(group="zeta"), 0)
    h.gc.commit_offsets("alpha", -1, "", {("t", 0): (1, "", -1)}, 0)
    assert h.gc.list_groups() == [("alpha", "Empty", ""),
                                  ("zeta", "CompletingRebalance", "consumer")]
    d = h.gc.describe_group("zeta")
    assert d.protocol_name == "" and d.members[0].assignment == b""  # not Stable yet
    assert h.gc.describe_group("nope").state == "Dead"
    assert h.gc.is_active("zeta") and not h.gc.is_active("alpha")


def test_module_is_pure() -> None:
    import linkd.core.groups as mod

    source = open(mod.__file__, encoding="utf-8").read()
    for name in ("time", "random", "uuid", "os", "asyncio", "threading", "socket", "grpc"):
        assert f"import {name}\n" not in source and f"from {name} " not in source
