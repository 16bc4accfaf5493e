"""What a link reports must be true: stories found by the operator-mix
simulation, each held here as the smallest case of the rule it broke.

A leads the namespace orders- on link ab, B follows it (the fixtures of
test_core_link_rounds); the test plays the transport and the disk.
"""

from __future__ import annotations

import pytest

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import procedures
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch, ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.journal import decode
from linkd.core.links import LinkState, Mapping, holds_back, orphans
from linkd.core.provenance import ProvenanceKind
from tests.test_core_link_rounds import (
    NOW,
    Disk,
    discover,
    fetch_round,
    produce,
    two_clusters,
)


def test_a_partition_the_source_refuses__holds_the_link_back__and_says_why() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.links.state_name("ab") == "FOLLOWING"
    # B's topic holds records A never had, and B's provenance does not name A
    # (another topic of the same name): A refuses it.
    b.topics["orders-1"].provenance.clear()
    a.delete_topic("orders-1")
    a.create_topic("orders-1", 1, {}, "src-again")
    produce(a, disk_a, 2, value=b"other")

    fetch_round(a, b, disk_a, disk_b, NOW + 20)  # asked for every mark
    answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 30)

    assert answer.partitions[0].error is not None
    assert answer.partitions[0].error.code is ErrorCode.NO_SHARED_HISTORY
    assert [(t, p) for t, p, _e in applied.refused] == [("orders-1", 0)]
    assert b.links.state_name("ab") == "CATCHING_UP"
    assert b.links.explained("ab", NOW + 30)
    (behind,) = b.links.lagging_partitions("ab", NOW + 30)
    assert "refused by the source" in behind and "shares no history" not in behind
    rows = admin.link_summary(b, "ab", NOW + 30).partitions
    refused = [r for r in rows if r.problem]
    assert [(r.topic, r.lag_known, r.lag_records) for r in refused] == [("orders-1", False, -1)]
    assert refused[0].problem.startswith("NO_SHARED_HISTORY")
    # The leading side says which partition it refused, and why.
    (led,) = a.links.lagging_partitions("ab", NOW + 30 + 10_000)
    assert "refused" in led


def test_a_partition_the_source_no_longer_has__is_shown__but_does_not_hold_the_link_back() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    a.delete_topic("orders-1")

    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)

    assert [e.code for _t, _p, e in applied.refused] == [ErrorCode.UNKNOWN_TOPIC]
    assert b.links.state_name("ab") == "FOLLOWING"
    rows = admin.link_summary(b, "ab", NOW + 20).partitions
    assert [r.problem.split(":")[0] for r in rows if r.problem] == ["UNKNOWN_TOPIC"]


def test_a_refusal_is_forgotten_when_the_namespace_is_detached() -> None:
    a, b, _disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    b.links.runtime["ab"].refused[("orders-1", 0)] = ClusterError(
        ErrorCode.NO_SHARED_HISTORY, "x", "another topic"
    )
    detached = admin.check_detach(b, "ab", "topic", "orders-")
    admin.put_mapping(b, "ab", admin.versioned(b, detached, NOW), NOW)

    assert b.links.runtime["ab"].refused == {}


def test_a_write_waiting_on_its_high_watermark__fails_when_its_topic_is_deleted() -> None:
    a, _b, disk_a, _disk_b = two_clusters()
    end = produce(a, disk_a, 2)
    targets = {("orders-1", 0): end + 1}
    marks = a.wait_marks(targets)
    assert a.unmet_high_watermarks(targets, marks, "produce") == [("orders-1", 0, end + 1)]

    a.delete_topic("orders-1")
    a.create_topic("orders-1", 1, {}, "a-new-one")  # the same name, another topic

    with pytest.raises(ClusterError) as refused:
        a.unmet_high_watermarks(targets, marks, "produce")
    assert refused.value.code is ErrorCode.UNKNOWN_TOPIC and "deleted" in refused.value.message


def test_a_write_waiting_on_its_high_watermark__fails_when_its_records_are_cut() -> None:
    a, _b, disk_a, _disk_b = two_clusters()
    produce(a, disk_a, 2)
    end = produce(a, disk_a, 3)
    targets = {("orders-1", 0): end}
    marks = a.wait_marks(targets)

    a.partition("orders-1", 0).truncate_to(2)  # its batch is cut (it follows now) ...
    produce(a, disk_a, 4)  # ... and other records take its offsets

    with pytest.raises(ClusterError) as refused:
        a.unmet_high_watermarks(targets, marks, "produce")
    assert refused.value.code is ErrorCode.DIVERGED_LOG and "were cut" in refused.value.message


def test_deleting_a_topic__drops_every_groups_committed_offsets_for_it() -> None:
    a = ClusterState("A")
    a.create_topic("t", 1, {}, "id-1")
    a.groups.set_committed("g", "t", 0, 5, "", -1, NOW)
    a.groups.set_committed("g", "u", 0, 7, "", -1, NOW)

    a.delete_topic("t")

    assert a.groups.committed("g", None).keys() == {("u", 0)}


def test_a_group_namespace_that_starts_following__keeps_no_offset_past_the_follower_log() -> None:
    a, b, _disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    b.namespaces.create(2, "g-", False)
    b.groups.set_committed("g-1", "orders-1", 0, 40, "", -1, NOW)  # before it followed
    config = b.links.get("ab")
    mapping = Mapping("group", "g-", "g-", "remote", True, (0, 0, ""))
    config.mappings[mapping.key] = admin.versioned(b, mapping, NOW)
    b.links.store(config, NOW)

    admin.reconcile_attachments(b, "ab", NOW)

    assert b.groups.committed("g-1", None)[("orders-1", 0)].offset == 0


def test_following_a_name_from_a_cluster__and_leading_it_to_the_same_cluster__is_refused() -> None:
    _a, b, _disk_a, _disk_b = two_clusters()
    config = b.links.new_config("ba", "id-2", "A", "a:1", "", "local_dials", "", NOW)
    b.links.store(config, NOW)
    b.namespaces.create(1, "payments-", False)

    with pytest.raises(ClusterError) as refused:
        admin.check_attach(b, "ba", "topic", "orders-", "orders-", "local")

    assert refused.value.code is ErrorCode.MAPPINGS_OVERLAP
    assert "flow back" in refused.value.message and "'ab'" in refused.value.message
    # Leading another name to A over the second link is fine.
    admin.check_attach(b, "ba", "topic", "payments-", "payments-", "local")


def test_a_namespace_newly_led_with_records_its_follower_lacks__keeps_a_sync_link_syncing() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    fetch_round(a, b, disk_a, disk_b, NOW + 20)
    a.links.set_mode("ab", "SYNC", NOW + 30)
    fetch_round(a, b, disk_a, disk_b, NOW + 40)
    fetch_round(a, b, disk_a, disk_b, NOW + 50)
    assert a.links.state_name("ab") == LinkState.IN_SYNC.value
    # A topic no link carried yet, its records acknowledged.
    a.namespaces.create(1, "pay-", False)
    a.create_topic("pay-1", 1, {}, "src-pay")
    produce(a, disk_a, 4, topic="pay-1")
    assert a.partition("pay-1", 0).high_watermark == 4

    mapping = Mapping("topic", "pay-", "pay-", "local", True, (0, 0, ""))
    admin.put_mapping(a, "ab", admin.versioned(a, mapping, NOW + 60), NOW + 60)

    # Led from the moment it is attached: its follower holds none of it.
    assert ("pay-1", 0) in a.links.runtime["ab"].led_partitions
    assert a.links.state_name("ab") == LinkState.SYNCING.value


def test_set_mode_sync__judged_as_of_the_call__a_stale_round_refuses_it() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 1)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.links.state_name("ab") == "FOLLOWING"
    # No tick since: the state still says FOLLOWING, but the last round is
    # older than fetch_silence_ms, so the lag is not known now.
    late = NOW + 10 + b.links.limits.fetch_silence_ms + 1
    with pytest.raises(ClusterError) as refused:
        b.links.set_mode("ab", "SYNC", late)
    assert refused.value.code is ErrorCode.LINK_NOT_FOLLOWING
    assert "no fetch round finished" in refused.value.message


def test_a_round_whose_appends_outlived_a_detach__reports_nothing_for_it() -> None:
    """The appends of a round take time; a namespace detached meanwhile is no
    longer the link's to report: no row, no source cap on its HW."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, NOW + 10, disk_a.read, 1 << 20, 1 << 20
    )
    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, NOW + 10)
    disk_b.carry_out(b, applied.effects)
    detached = admin.check_detach(b, "ab", "topic", "orders-")
    admin.put_mapping(b, "ab", admin.versioned(b, detached, NOW + 20), NOW + 20)

    rounds.finish_fetch_round(b, "ab", applied.progress, answer.sync_state, NOW + 30)

    assert b.links.runtime["ab"].partitions == {}
    assert admin.link_summary(b, "ab", NOW + 30).partitions == ()


def test_a_mode_restated_here__wins_over_a_change_the_remote_made_unheard() -> None:
    """A sets SYNC; before B hears of it, an operator on B sets ASYNC, which
    B already shows: the call succeeds, so the link must end ASYNC."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 1)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    fetch_round(a, b, disk_a, disk_b, NOW + 15)
    assert a.links.set_mode("ab", "SYNC", NOW + 20)
    assert b.links.get("ab").mode == "ASYNC"  # not heard yet
    assert b.links.set_mode("ab", "ASYNC", NOW + 30)  # recorded, not a no-op
    b.links.accept_mirror(a.links.get("ab"), NOW + 40)
    a.links.accept_mirror(b.links.get("ab"), NOW + 40)
    assert a.links.get("ab").mode == b.links.get("ab").mode == "ASYNC"


def _open_transaction(a: ClusterState, disk_a: Disk, producer_id: int = 4242) -> None:
    log_a = a.partition("orders-1", 0)
    txn = rb.build_batch(
        [rb.RecordSpec(None, b"in-txn", NOW)],
        base_offset=log_a.log_end_offset,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        partition_leader_epoch=log_a.leader_epoch,
    )
    header = rb.parse_header(txn)
    log_a.apply_batch(header, None)
    disk_a.carry_out(a, [AppendBatch(a.topic("orders-1").topic_id, 0, txn, header)])


def _refusals(applied: rounds.AppliedFetch) -> set[tuple[str, int]]:
    return {(t, p) for t, p, e in applied.refused if orphans(e)}


def test_a_source_that_deleted_the_topic__orphans_it__the_follower_aborts_and_its_markers_count(
) -> None:
    """The source deleted the topic with a transaction open in it: the
    follower aborts it with its own marker, which its HW covers once durable,
    or read_committed readers here, and clusters copying from here, stall."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    log_b = b.partition("orders-1", 0)
    assert log_b.high_watermark == 3 and log_b.last_stable_offset == 2
    a.delete_topic("orders-1")

    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)
    orphaned = _refusals(applied)
    assert orphaned == {("orders-1", 0)}
    settled = rounds.settle_orphans(b, b.links.get("ab"), orphaned, NOW + 30)
    disk_b.carry_out(b, settled.effects)

    assert [d.producer_id for d in settled.dangling] == [4242]
    assert settled.cuts == []  # an ASYNC follower holds nothing above its source's HW
    assert log_b.high_watermark == log_b.log_end_offset == 4
    assert log_b.last_stable_offset == 4
    # Again next round: nothing more to do.
    assert rounds.settle_orphans(b, b.links.get("ab"), orphaned, NOW + 40).effects == []


def test_an_orphan_s_tail_above_what_its_source_acknowledged__is_cut_and_recorded() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    log_b = b.partition("orders-1", 0)
    # Records above the source's HW (as a SYNC follower copies them), never
    # acknowledged there.
    tail = rb.build_batch([rb.RecordSpec(None, b"unacked", NOW)] * 3, base_offset=2)
    rep.append_replica(b, "orders-1", 0, tail, 0, b.links.get("ab"))
    disk_b.carry_out(b, [])
    assert log_b.log_end_offset == 5 and log_b.hw_cap == 2

    settled = rounds.settle_orphans(b, b.links.get("ab"), {("orders-1", 0)}, NOW + 20)
    disk_b.carry_out(b, settled.effects)

    assert [(c.topic, c.partition, c.offset) for c in settled.cuts] == [("orders-1", 0, 2)]
    assert log_b.log_end_offset == 2
    last = b.topics["orders-1"].provenance[0][-1]
    assert (last.kind, last.offset, last.removed, last.reason) == (
        ProvenanceKind.TRUNCATED,
        2,
        3,
        "source gone",
    )


def test_a_source_that_no_longer_leads_the_topic__is_not_an_orphan() -> None:
    """The roles are changing (a manual reversal between its steps): the
    source still has the topic. The follower must not write markers of its
    own into it (the sweep's seeds 372 and 3011 on 2 clusters: its own abort
    marker later stood where the source holds other records)."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    # A detached its side; B has not heard of it yet.
    detached = Mapping("topic", "orders-", "orders-", "local", False, (0, 0, ""))
    admin.put_mapping(a, "ab", admin.versioned(a, detached, NOW + 15), NOW + 15)

    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)

    codes = {e.code for _t, _p, e in applied.refused}
    assert codes == {ErrorCode.NOT_LED_ON_LINK}
    assert _refusals(applied) == set()
    assert not holds_back(applied.refused[0][2])


def test_a_topic_of_the_same_name_created_after_the_orphaning__replaces_the_follower_s_copy(
) -> None:
    """The follower's own marker is not the new source's: the marks of the
    next fetch tell the logs apart, and the copy is cut, not spliced."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    a.delete_topic("orders-1")
    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)
    disk_b.carry_out(
        b, rounds.settle_orphans(b, b.links.get("ab"), _refusals(applied), NOW + 25).effects
    )
    _topic, effects = a.create_topic("orders-1", 1, {}, "src-again")
    disk_a.carry_out(a, effects)
    produce(a, disk_a, 6, value=b"new")

    for step in range(4):
        fetch_round(a, b, disk_a, disk_b, NOW + 30 + step)

    log_a, log_b = a.partition("orders-1", 0), b.partition("orders-1", 0)
    assert log_b.log_end_offset == log_a.log_end_offset == 6
    assert disk_b.read(b.topic("orders-1").topic_id, 0, 0, 6, 1 << 20) == disk_a.read(
        a.topic("orders-1").topic_id, 0, 0, 6, 1 << 20
    )


def test_a_sync_link_whose_follower_keeps_its_own_writes__is_out_of_sync__and_says_why() -> None:
    """The leading side of a SYNC link whose follower will not cut its own
    clients' acknowledged records (it fetches nothing there until `recover`)
    stays OUT_OF_SYNC for good: not caught up, though its follower lacks
    none of its records. That is a refusal the link reports (the led row's
    problem), not a link that failed to converge."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    fetch_round(a, b, disk_a, disk_b, NOW + 15)
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 25)
    assert a.link_state("ab") == "IN_SYNC"
    # B's clients wrote 2 records after a detach; A's log parted at 3.
    produce(a, disk_a, 2)
    b.apply_record(
        decode({
            "type": "provenance", "name": "orders-1", "partition": 0,
            "entry": {"detached_at": 3, "link_id": "id-1"},
        })
    )
    log = b.partition("orders-1", 0)
    ours = rb.build_batch([rb.RecordSpec(None, b"own", NOW)] * 2, base_offset=3)
    header = rb.parse_header(ours)
    log.apply_batch(header, None)
    disk_b.carry_out(b, [AppendBatch(b.topic("orders-1").topic_id, 0, ours, header)])
    log.high_watermark = 5
    fetch_round(a, b, disk_a, disk_b, NOW + 30)  # asked for marks
    fetch_round(a, b, disk_a, disk_b, NOW + 40)  # refused: not cut
    fetch_round(a, b, disk_a, disk_b, NOW + 50)  # held: A is told

    later = NOW + 50 + a.links.limits.replica_lag_time_max_ms + 1
    a.links.on_contact("ab", later)
    b.links.on_contact("ab", later)
    assert a.link_state("ab") == "OUT_OF_SYNC"
    assert a.links.explained("ab", later)
    (row,) = admin.link_summary(a, "ab", later).partitions
    assert row.problem.startswith("DIVERGED_LOG") and "recover" in row.problem
    # A led partition behind with no reason given is not explained.
    a.links.runtime["ab"].partitions[("orders-1", 0, "leader")].refused = None
    assert not a.links.explained("ab", later)


@pytest.mark.parametrize("change", ["detach", "delete-link"])
def test_a_change_that_aborts_replicated_transactions__names_them_in_its_answer(
    change: str,
) -> None:
    """B copied a transaction still open on A; the operator detaches the
    namespace (or deletes the link): nothing will ever end the copy, so B
    aborts it, and the answer (not only the log) names it."""
    from tests.test_core_pending_answers import drive

    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.partition("orders-1", 0).last_stable_offset == 2
    if change == "detach":
        procedure = procedures.detach(b, "ab", "topic", "orders-", NOW + 20)
    else:
        procedure = procedures.delete_link(b, "ab", NOW + 20)
    result, notes = drive(procedure, b, None)  # A unreachable: pending, done here
    assert [(d.topic, d.partition, d.producer_id, d.first_offset) for d in result.aborted] == [
        ("orders-1", 0, 4242, 2)
    ]
    assert any("aborted 1 transactions left open" in n for n in notes), notes
    # Nothing open is left: a second look finds nothing to abort.
    assert b.dangling_transactions([""]) == []
