"""What a link reports must be true: stories found by the operator-mix
simulation, each held here as the smallest case of the rule it broke.

A leads the namespace orders- on link ab, B follows it (the fixtures of
test_core_link_rounds); the test plays the transport and the disk.
"""

from __future__ import annotations

import pytest

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkState, Mapping
from tests.test_core_link_rounds import NOW, discover, fetch_round, produce, two_clusters


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
