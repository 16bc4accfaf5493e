"""An attach that would cut the follower's own acknowledged writes is refused
(linkd/core/recovery.py `check_attach_cuts`, `own_writes_cut`;
linkd/core/histories.py `own_acknowledged`)."""

from __future__ import annotations

from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.errors import ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.histories import PartitionSide, local_side, own_acknowledged, unreadable_ranges
from linkd.core.journal import OffsetCommit, decode
from linkd.core.links import Leader, Mapping, MappingType
from linkd.core.provenance import ProvenanceItem
from linkd.core.recovery import check_attach_cuts, own_writes_cut


def side(cluster: str, leo: int, *items: ProvenanceItem, hw: int | None = None) -> PartitionSide:
    return PartitionSide(cluster, 0, leo, leo if hw is None else hw, ((0, 0),), tuple(items))


def start(offset: int, source: str) -> ProvenanceItem:
    return ProvenanceItem.attached(offset, source, "link-ab", 1)


def detached(offset: int) -> ProvenanceItem:
    return ProvenanceItem.detached(offset, "link-ab")


def test_own_acknowledged__only_offsets_no_entry_names_a_source_for__below_the_hw() -> None:
    b = side("B", 20, start(0, "A"), detached(10), hw=18)
    assert own_acknowledged(b, 0) == ((10, 18),)
    assert own_acknowledged(b, 12) == ((12, 18),)
    assert own_acknowledged(side("B", 10, start(0, "A")), 0) == ()
    # Written here before it ever followed, then copies, then its own again.
    mixed = side("B", 30, start(5, "A"), detached(20))
    assert own_acknowledged(mixed, 0) == ((0, 5), (20, 30))


def test_follower_behind__nothing_is_cut() -> None:
    b = side("B", 10, start(0, "A"), detached(10))
    a = side("A", 25)
    assert own_writes_cut("orders-t", 0, b, a) is None


def test_follower_wrote_after_the_detach__its_writes_would_be_cut() -> None:
    b = side("B", 15, start(0, "A"), detached(10))
    a = side("A", 12)  # A's own records from 10 on too
    cut = own_writes_cut("orders-t", 0, b, a)
    assert cut is not None
    assert (cut.truncate_to, cut.own, cut.records) == (10, ((10, 15),), 5)


def test_a_copied_tail_the_source_lost__is_cut_without_refusal() -> None:
    # B copied A's 0-15; A lost 12-15 in an unclean election and rewrote (new epoch).
    b = PartitionSide("B", 0, 15, 15, ((0, 0),), (start(0, "A"),))
    a = PartitionSide("A", 0, 14, 14, ((0, 0), (1, 12)), ())
    assert own_writes_cut("orders-t", 0, b, a) is None


def test_records_the_leader_copied_from_the_follower__are_shared() -> None:
    # A followed B's own writes 10-15 (a reverse), now B follows A again.
    b = side("B", 15, start(0, "A"), detached(10))
    a = side("A", 15, start(10, "B"))
    assert own_writes_cut("orders-t", 0, b, a) is None


def _state_b(faults: Faults = NO_FAULTS) -> ClusterState:
    """B: orders-t copied 10 records from A, detached, then 5 of its own, a
    group committed at 14."""
    state = ClusterState("B", faults=faults)
    state.create_topic("orders-t", 1, {}, "tid-1")
    state.links.store(
        state.links.new_config("ab", "link-ab", "A", "a:1", "", "local_dials", "", 1000), 1000
    )
    log = state.partition("orders-t", 0)
    for i in range(15):
        if i in (0, 10):
            entry = (
                {"start": 0, "source": "A", "link_id": "link-ab", "link_epoch": 1}
                if i == 0
                else {"detached_at": 10, "link_id": "link-ab"}
            )
            state.apply_record(
                decode({"type": "provenance", "name": "orders-t", "partition": 0, "entry": entry})
            )
        batch = rb.build_batch(
            [rb.RecordSpec(key=b"k", value=b"v%d" % i, timestamp=1)],
            base_offset=log.log_end_offset,
        )
        log.apply_batch(rb.parse_header(batch))
    log.mark_durable(log.log_end_offset)
    commit = decode({
        "type": "offset_commit", "group": "app", "topic": "orders-t", "partition": 0,
        "offset": 14, "metadata": "", "leader_epoch": 0, "ts": 1,
    })
    assert isinstance(commit, OffsetCommit)
    state.groups.apply_record(commit)
    return state


def test_check_attach_cuts__local_follower__names_partition_range_and_offsets() -> None:
    state = _state_b()
    config = state.links.get("ab")
    mapping = Mapping(MappingType.TOPIC, "orders-", "orders-", Leader.REMOTE, True, (0, 0, ""))
    remote = {("orders-t", 0): side("A", 12)}
    refusal = check_attach_cuts(state, config, mapping, "A", remote, {})
    assert refusal is not None and refusal.code is ErrorCode.DIVERGED_LOG
    assert "orders-t-0 offsets [10, 15) (5 records" in refusal.message
    assert "app orders-t-0 at 14 (cut to 10)" in refusal.message
    assert "recover --link ab --namespace orders-:orders-" in refusal.message
    # Behind only: A holds what B holds and more.
    behind = {("orders-t", 0): side("A", 20, start(10, "B"))}
    assert check_attach_cuts(state, config, mapping, "A", behind, {}) is None


def test_check_attach_cuts__remote_follower__judged_on_its_description() -> None:
    # Seen from A (leading): B's side and B's committed offsets came in a description.
    state = ClusterState("A")
    state.create_topic("orders-t", 1, {}, "tid-a")
    state.links.store(
        state.links.new_config("ab", "link-ab", "B", "b:1", "", "local_dials", "", 1000), 1000
    )
    log = state.partition("orders-t", 0)
    for _ in range(12):
        batch = rb.build_batch(
            [rb.RecordSpec(key=b"k", value=b"v", timestamp=1)], base_offset=log.log_end_offset
        )
        log.apply_batch(rb.parse_header(batch))
    log.mark_durable(log.log_end_offset)
    config = state.links.get("ab")
    mapping = Mapping(MappingType.TOPIC, "orders-", "orders-", Leader.LOCAL, True, (0, 0, ""))
    b = side("B", 15, start(0, "A"), detached(10))
    refusal = check_attach_cuts(
        state, config, mapping, "B", {("orders-t", 0): b}, {("app", "orders-t", 0): 14}
    )
    assert refusal is not None
    assert "clients of 'B' wrote" in refusal.message
    assert "app orders-t-0 at 14" in refusal.message
    assert local_side(state, "orders-t", 0).log_end_offset == 12


def test_own_acknowledged__leaves_out_markers_and_aborted_or_open_transactions() -> None:
    b = PartitionSide(
        "B", 0, 20, 20, ((0, 0),), (start(0, "A"), detached(10)), (), ((12, 14), (18, 20))
    )
    assert own_acknowledged(b, 10) == ((10, 12), (14, 18))
    only_txn = PartitionSide("B", 0, 12, 12, ((0, 0),), (detached(10),), (), ((10, 12),))
    assert own_acknowledged(only_txn, 10) == ()


def test_unreadable_ranges__of_a_log_with_an_open_and_an_aborted_transaction() -> None:
    state = ClusterState("B")
    state.create_topic("t", 1, {}, "tid")
    log = state.partition("t", 0)

    def append(pid: int, txn: bool, control: int | None = None) -> None:
        if control is not None:
            batch = rb.build_control_batch(
                marker=control,
                producer_id=pid,
                producer_epoch=0,
                timestamp=1,
                base_offset=log.log_end_offset,
            )
            log.apply_batch(rb.parse_header(batch), control)
            return
        batch = rb.build_batch(
            [rb.RecordSpec(key=b"k", value=b"v", timestamp=1)],
            base_offset=log.log_end_offset,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0 if pid >= 0 else -1,
            transactional=txn,
        )
        log.apply_batch(rb.parse_header(batch))

    append(-1, False)  # 0: plain
    append(7, True)  # 1: aborted below
    append(-1, False)  # 2: plain
    append(7, False, control=rb.CONTROL_ABORT)  # 3: abort marker
    append(9, True)  # 4: still open
    assert unreadable_ranges(log) == ((1, 2), (3, 5))
