"""The pure rules of unclean link recovery (linkd/core/recovery.py): the last
common offset of two partition histories, the cut, and the plan on a
ClusterState."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS
from linkd.core.histories import BatchMark, PartitionSide, compare, cut_offset, log_marks
from linkd.core.journal import decode
from linkd.core.links import Mapping
from linkd.core.provenance import ProvenanceItem
from linkd.core.recovery import (
    NOTED_OFFSETS_MAX,
    GroupCut,
    RecoveryMapping,
    RecoveryPlan,
    apply_recovery,
    check_can_follow,
    describe_offsets_moved,
    noted_offsets,
    plan_partition,
    plan_recovery,
    promote_namespaces,
    refuse_unrelated,
)


def copied(
    cluster: str,
    leo: int,
    *items: ProvenanceItem,
    epochs: tuple[tuple[int, int], ...] = ((0, 0),),
) -> PartitionSide:
    return PartitionSide(cluster, 0, leo, leo, tuple(epochs), tuple(items))


def start(offset: int, source: str) -> ProvenanceItem:
    return ProvenanceItem.attached(offset, source, "link", 1)


def detached(offset: int) -> ProvenanceItem:
    return ProvenanceItem.detached(offset, "link")


def test_both_copied_from_one_origin__common_prefix_is_the_shorter_copy() -> None:
    c = copied("C", 15, start(0, "A"), detached(15))
    b = copied("B", 13, start(0, "A"), detached(10), epochs=((0, 0), (1, 10)))
    result = compare(c, b)
    assert result.common_offset == 10 and result.shared


def test_provenance_alone_finds_the_divergence_when_epochs_collide() -> None:
    # B wrote its own records from 10 at the same epoch number as A's tail.
    c = copied("C", 15, start(0, "A"))
    b = copied("B", 13, start(0, "A"), detached(10))
    result = compare(c, b)
    assert (result.common_offset, result.reason) == (10, "provenance")


def test_epochs_alone_find_an_origin_that_rewrote_its_tail() -> None:
    # Both copied from A, but A cut at 6 and rewrote (epoch 1) after C copied.
    c = copied("C", 10, start(0, "A"))
    b = copied("B", 9, start(0, "A"), epochs=((0, 0), (1, 6)))
    result = compare(c, b)
    assert (result.common_offset, result.reason) == (6, "leader-epoch")


def test_copy_of_the_remote_is_the_remote__transitively() -> None:
    # A follows back from B: A's own writes are what B copied up to 8.
    a = copied("A", 12)
    b = copied("B", 10, start(0, "A"), detached(8), epochs=((0, 0), (1, 8)))
    assert compare(a, b).common_offset == 8
    # B copied from A, which copied from X: B's range is A's range.
    a2 = copied("A", 20, start(0, "X"))
    b2 = copied("B", 20, start(0, "A"))
    assert compare(b2, a2).common_offset == 20


def test_nothing_shared__the_log_start_is_common__unrelated_topics_are_refused() -> None:
    # A partition the follower never copied a record of: only the empty prefix
    # is common, and it is cut to its start (reported), if the topics relate.
    row = plan_partition("t", "t", 0, copied("A", 3), copied("B", 3))
    assert (row.common_offset, row.reason, row.truncate_to, row.local_records_lost) == (
        0,
        "log-start",
        0,
        3,
    )
    assert not row.related
    with pytest.raises(ClusterError) as info:
        refuse_unrelated([row], "A", "B", NO_FAULTS)  # two topics of one name: no guess
    assert info.value.code is ErrorCode.NO_SHARED_HISTORY
    assert "delete" not in info.value.message
    # B's topic was created by a link from A (its provenance names A): related.
    b = copied("B", 2, start(0, "A"), epochs=((0, 0), (1, 0)))  # B's own records, its epoch
    related = plan_partition("t", "t", 0, copied("A", 3), b)
    assert related.related and related.truncate_to == 0
    refuse_unrelated([related, row], "A", "B", NO_FAULTS)  # one related partition relates the topic
    # An empty follower loses nothing; an empty remote shares its empty history.
    row = plan_partition("t", "t", 0, copied("A", 0), copied("B", 3))
    assert (row.truncate_to, row.local_records_lost, row.remote_records_lost) == (0, 0, 3)
    row = plan_partition("t", "t", 0, copied("A", 5), copied("B", 0))
    assert (row.common_offset, row.reason, row.local_records_lost) == (0, "remote-empty", 5)


def test_a_log_that_begins_after_the_remote_ends__is_refused() -> None:
    local = PartitionSide("A", 10, 15, 15, ((0, 0),))
    remote = PartitionSide("B", 0, 4, 4, ((0, 0),))
    with pytest.raises(ClusterError) as info:
        plan_partition("t", "t", 0, local, remote)
    assert info.value.code is ErrorCode.NO_SHARED_HISTORY


def test_truncation_rewrites_history_from_its_offset() -> None:
    # C copied from A to 15, was cut to 10, then copied from B.
    c = copied(
        "C",
        13,
        start(0, "A"),
        detached(15),
        ProvenanceItem.truncated(10, "cb", 5),
        start(10, "B"),
        epochs=((0, 0), (1, 10)),
    )
    b = copied("B", 13, start(0, "A"), detached(10), epochs=((0, 0), (1, 10)))
    assert compare(c, b).common_offset == 13


def test_cut_is_the_batch_boundary_at_or_below_the_common_offset() -> None:
    side = PartitionSide("C", 0, 20, 20, ((0, 0),), (), (0, 5, 12, 17))
    assert cut_offset(side, 14, 0) == 12
    assert cut_offset(side, 12, 0) == 12
    assert cut_offset(side, 25, 0) == 20
    # Below the remote's log start: the follower empties (restarts there).
    assert cut_offset(side, 14, 15) == 0


segments = st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    copied_b=st.integers(min_value=1, max_value=50),
    copied_c=st.integers(min_value=1, max_value=50),
    own_b=st.integers(min_value=0, max_value=20),
    own_c=st.integers(min_value=0, max_value=20),
)
def test_property__two_copies_of_one_origin_agree_exactly_up_to_the_shorter_copy(
    copied_b: int, copied_c: int, own_b: int, own_c: int
) -> None:
    """A model: record at offset o is ("A", o) while copied, else (cluster, o).
    The common offset is exactly where the models first differ."""
    b = copied("B", copied_b + own_b, start(0, "A"), detached(copied_b))
    c = copied("C", copied_c + own_c, start(0, "A"), detached(copied_c))

    def model(cluster: str, copied_to: int, leo: int) -> list[tuple[str, int]]:
        return [("A" if o < copied_to else cluster, o) for o in range(leo)]

    mb, mc = model("B", copied_b, b.log_end_offset), model("C", copied_c, c.log_end_offset)
    first_diff = next(
        (o for o in range(min(len(mb), len(mc))) if mb[o] != mc[o]), min(len(mb), len(mc))
    )
    result = compare(c, b)
    assert result.common_offset == first_diff
    row = plan_partition("t", "t", 0, c, b)
    assert row.local_records_lost == c.log_end_offset - first_diff
    assert row.remote_records_lost == b.log_end_offset - first_diff
    # Symmetric: the other side finds the same point.
    assert compare(b, c).common_offset == first_diff


# -- on a ClusterState ------------------------------------------------------------------


def _append(state: ClusterState, topic: str, n: int, epoch: int = 0) -> None:
    log = state.partition(topic, 0)
    for _ in range(n):
        batch = rb.build_batch(
            [rb.RecordSpec(key=b"k", value=b"v", timestamp=1)],
            base_offset=log.log_end_offset,
            partition_leader_epoch=epoch,
        )
        log.apply_batch(rb.parse_header(batch))
    log.mark_durable(log.log_end_offset)


def _follower_state() -> ClusterState:
    """C: follows link cb to B; topic orders-t copied 15 records from A."""
    state = ClusterState("C")
    state.create_topic("orders-t", 1, {}, "tid-1")
    state.links.store(
        state.links.new_config("cb", "link-cb", "B", "b:1", "", "local_dials", "", 1000), 1000
    )
    state.apply_record(
        decode({
            "type": "provenance",
            "name": "orders-t",
            "partition": 0,
            "entry": {"start": 0, "source": "A", "link_id": "link-ac", "link_epoch": 1},
        })
    )
    _append(state, "orders-t", 15)
    state.groups.apply_record(
        decode({
            "type": "offset_commit",
            "group": "app-1",
            "topic": "orders-t",
            "partition": 0,
            "offset": 13,
            "metadata": "m",
            "leader_epoch": 0,
            "ts": 1,
        })
    )
    return state


def test_plan_and_apply__cut_moves_offsets_back_and_records_provenance() -> None:
    state = _follower_state()
    remote = {
        ("orders-t", 0): copied("B", 13, start(0, "A"), detached(10), epochs=((0, 0), (1, 10)))
    }
    mappings = [RecoveryMapping("topic", "orders-", "orders-")]
    plan = plan_recovery(state, "cb", mappings, "B", remote)
    assert plan.to_dict()["totals"] == {
        "partitions": 1,
        "diverged_partitions": 1,
        "local_records_lost": 5,
        "remote_records_lost": 3,
        "groups_affected": 1,
        "offsets_moved": 1,
    }
    assert state.partition("orders-t", 0).log_end_offset == 15  # planning changes nothing
    effects = apply_recovery(state, plan, "link-cb", 2000)
    assert TruncateLog("tid-1", 0, 10) in effects
    log = state.partition("orders-t", 0)
    assert (log.log_end_offset, log.high_watermark) == (10, 10)
    assert state.groups.committed("app-1", None)[("orders-t", 0)].offset == 10
    assert state.topic("orders-t").provenance[0][-1].to_entry() == {
        "truncated_to": 10,
        "link_id": "link-cb",
        "removed": 5,
        "at_ms": 2000,  # when the recovery cut
    }


def test_plan_and_apply__a_group_offset_the_new_leader_lacks_is_removed__and_reported() -> None:
    state = _follower_state()
    state.namespaces.create(2, "app-", False)
    remote = {("orders-t", 0): copied("B", 15, start(0, "A"))}
    mappings = [
        RecoveryMapping("topic", "orders-", "orders-"),
        RecoveryMapping("group", "app-", "app-"),
    ]
    # B holds every record, and no committed offset of app-1: once app-
    # follows B, app-1's offsets are B's, so A's own goes (reported).
    plan = plan_recovery(state, "cb", mappings, "B", remote, {})
    assert [(g.group, g.new_offset, g.reason) for g in plan.groups] == [("app-1", -1, "leader")]
    apply_recovery(state, plan, "link-cb", 2000)
    assert state.groups.committed("app-1", None) == {}
    # With B's offset known, A's moves back to it instead.
    state = _follower_state()
    state.namespaces.create(2, "app-", False)
    plan = plan_recovery(state, "cb", mappings, "B", remote, {("app-1", "orders-t", 0): 7})
    assert [(g.new_offset, g.reason) for g in plan.groups] == [(7, "leader")]


def test_the_log_line_names_each_committed_offset_moved__the_report_if_the_answer_is_lost() -> None:
    """A confirmed recovery whose answer is lost (a crash after its cut, a
    call that timed out) leaves its cuts in the provenance and the offsets
    it moved in this cluster's log line, named one by one up to a bound."""
    cuts = (
        GroupCut("app-1", "orders-t", 0, 54, 5),
        GroupCut("app-1", "orders-t", 1, 47, -1, "leader"),
    )
    plan = RecoveryPlan("cb", "A", "B", (), (), cuts)
    assert noted_offsets(plan) == cuts
    assert describe_offsets_moved(plan) == (
        "group 'app-1' orders-t-0 54 -> 5, group 'app-1' orders-t-1 47 -> removed"
    )
    many = tuple(GroupCut("app-1", "orders-t", p, 9, 3) for p in range(NOTED_OFFSETS_MAX + 2))
    plan = replace(plan, groups=many)
    assert noted_offsets(plan) == many[:NOTED_OFFSETS_MAX]
    assert describe_offsets_moved(plan).endswith(" and 2 more")
    assert describe_offsets_moved(replace(plan, groups=())) == ""


def test_plan__a_leader_offset_past_this_sides_log__is_bounded_by_it_or_removed() -> None:
    """The new leader's committed offset replicates once the records it
    points at do; recovery never moves one past what this side holds."""
    mappings = [
        RecoveryMapping("topic", "orders-", "orders-"),
        RecoveryMapping("group", "app-", "app-"),
    ]
    state = _follower_state()
    state.namespaces.create(2, "app-", False)
    state.groups.apply_record(
        decode({"type": "offset_commit", "group": "app-1", "topic": "orders-gone", "partition": 0,
         "offset": 9, "metadata": "", "leader_epoch": 0, "ts": 1})
    )  # fmt: skip
    remote = {("orders-t", 0): copied("B", 15, start(0, "A"))}
    leader = {("app-1", "orders-t", 0): 7, ("app-1", "orders-gone", 0): 4}
    plan = plan_recovery(state, "cb", mappings, "B", remote, leader)
    got = {(g.topic, g.new_offset, g.reason) for g in plan.groups}
    # orders-gone does not exist here: its offset goes (it comes back with B's).
    assert got == {("orders-t", 7, "leader"), ("orders-gone", -1, "leader")}


def test_recovery_that_could_not_follow_the_remote__is_refused_before_it_cuts() -> None:
    state = _follower_state()
    state.namespaces.create(1, "orders-t", False)
    config = state.links.get("cb")
    narrow = Mapping("topic", "orders-t", "orders-t", "remote", True, (1, 0, "B"))
    config.mappings[narrow.key] = narrow
    state.links.store(config, 1000)

    with pytest.raises(ClusterError) as refused:
        check_can_follow(state, "cb", [RecoveryMapping("topic", "orders-", "orders-")])

    assert refused.value.code is ErrorCode.MAPPINGS_OVERLAP
    assert "nothing was changed" in refused.value.message
    assert state.partition("orders-t", 0).log_end_offset == 15


def test_plan__refuses_a_remote_that_is_another_cluster() -> None:
    state = _follower_state()
    with pytest.raises(ClusterError) as info:
        plan_recovery(state, "cb", [RecoveryMapping("topic", "orders-", "orders-")], "Z", {})
    assert info.value.code is ErrorCode.INVALID_LINK_CONFIG


def test_abort_transactions_in__writes_markers_and_fences() -> None:
    state = ClusterState("A")
    state.create_topic("orders-t", 1, {}, "tid")
    pid, epoch, _c, _r = state.txn.init_producer_id("t1", 60_000, 0)
    state.txn.add_partitions("t1", pid, epoch, [("orders-t", 0)], 0)
    batch = rb.build_batch(
        [rb.RecordSpec(key=b"k", value=b"v", timestamp=1)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=True,
    )
    state.produce("orders-t", 0, batch, "t1", 1)
    aborted, effects = state.abort_transactions_in(["orders-"], 5)
    assert aborted == ["t1"]
    log = state.partition("orders-t", 0)
    assert not log.ongoing_txns and log.log_end_offset == 2
    assert state.txn.describe("t1") is not None
    assert state.txn.describe("t1").producer_epoch == epoch + 1  # type: ignore[union-attr]
    assert state.abort_transactions_in(["orders-"], 6)[0] == []
    assert effects


def test_failover_and_promotion_start_a_new_leader_epoch_at_the_log_end() -> None:
    state = ClusterState("B")
    state.create_topic("orders-t", 1, {}, "tid")
    _append(state, "orders-t", 4)
    records = rep.start_new_epochs(state, "orders-")
    assert [r.TYPE for r in records] == ["leader_epoch"]
    assert state.partition("orders-t", 0).epoch_history == [(0, 0), (1, 4)]
    with pytest.raises(ClusterError):
        promote_namespaces(state, "missing-link", [("topic", "orders-")], 7)


def test_reverse_waits_until_the_remote_holds_every_record_and_committed_offset() -> None:
    from linkd.core.recovery import RemoteCopy, reverse_missing

    state = _follower_state()  # 15 records in orders-t, app-1 committed 13
    topics = RecoveryMapping("topic", "orders-", "dr-orders-")
    groups = RecoveryMapping("group", "app-", "app-")
    behind = [
        RemoteCopy(topics, partitions={("dr-orders-t", 0): (15, 14)}),  # HW short by one
        RemoteCopy(groups, group_offsets={("app-1", "dr-orders-t", 0): 12}),
    ]
    total, missing = reverse_missing(state, behind)
    assert total == 1
    assert missing == ["dr-orders-t-0 at 14 of 15", "group app-1 dr-orders-t-0 at 12"]
    caught_up = [
        RemoteCopy(topics, partitions={("dr-orders-t", 0): (15, 15)}),
        RemoteCopy(groups, group_offsets={("app-1", "dr-orders-t", 0): 13}),
    ]
    assert reverse_missing(state, caught_up) == (1, [])
    assert reverse_missing(state, [RemoteCopy(topics)])[1] == ["dr-orders-t-0 at 0 of 15"]


def test_reverse_is_refused_unless_the_link_follows() -> None:
    from linkd.core.recovery import reverse_mappings

    state = _follower_state()
    with pytest.raises(ClusterError) as info:
        reverse_mappings(state, "cb")
    assert info.value.code is ErrorCode.LINK_NOT_FOLLOWING


def mark(base: int, crc: int, epoch: int = 0, producer: int = 7) -> BatchMark:
    return BatchMark(base, base, crc, epoch, producer, 0, base, 1000 + base)


def test_batch_marks__a_copy_of_a_copy_shares_the_history_provenance_cannot_see() -> None:
    # C copied from B, which copied from A: C's provenance names B, not A, and
    # A cannot know what B holds. The batches say both hold A's writes.
    c = copied("C", 12, start(0, "B"))
    a = copied("A", 12)
    assert (compare(c, a).common_offset, compare(c, a).reason) == (0, "log-start")
    writes = tuple(mark(o, 100 + o) for o in reversed(range(12)))
    c, a = replace(c, marks=writes), replace(a, marks=writes)
    assert (compare(c, a).common_offset, compare(c, a).reason) == (12, "log-end")
    # Where the batches part (C's own writes from 10 on), the cut is there.
    parted = tuple(mark(o, 900 + o) if o >= 10 else mark(o, 100 + o) for o in reversed(range(12)))
    assert (compare(replace(c, marks=parted), a).common_offset) == 10
    assert compare(replace(c, marks=parted), a).reason == "batch-marks"


def test_batch_marks__a_clean_keeps_the_write_not_the_crc__and_epochs_must_agree() -> None:
    c = replace(copied("C", 4, start(0, "B")), marks=(mark(3, 1), mark(2, 2)))
    a = replace(copied("A", 4), marks=(mark(3, 9), mark(2, 2)))
    assert compare(c, a).common_offset == 3  # batch 3 differs in its bytes
    assert compare(replace(c, compacted=True), a).common_offset == 4  # a clean rewrote it
    # Another leader epoch is another write, whatever the bytes.
    other = replace(a, marks=(mark(3, 1, epoch=1), mark(2, 2, epoch=1)))
    assert compare(c, other).common_offset == 0


def test_plan__a_remote_holding_the_same_batches_cuts_nothing_whatever_its_provenance() -> None:
    state = _follower_state()  # copied from A; the remote B names X as its origin
    marks, _ = log_marks(state, "orders-t", 0)
    remote = {("orders-t", 0): replace(copied("B", 15, start(0, "X")), marks=marks)}
    mappings = [RecoveryMapping("topic", "orders-", "orders-")]
    plan = plan_recovery(state, "cb", mappings, "B", remote)
    assert [(r.truncate_to, r.reason) for r in plan.partitions] == [(15, "log-end")]
    # Without the marks the two look like two topics of one name.
    remote = {("orders-t", 0): copied("B", 15, start(0, "X"))}
    with pytest.raises(ClusterError) as info:
        plan_recovery(state, "cb", mappings, "B", remote)
    assert info.value.code is ErrorCode.NO_SHARED_HISTORY
