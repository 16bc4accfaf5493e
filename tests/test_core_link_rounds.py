"""The data-path rounds of a replication link, told as stories between two
clusters held in memory: A leads the namespace orders- on link ab, B follows it.

Each story runs the same functions the daemon and the simulator call
(`linkd.core.link_rounds`); the test only plays the transport and the disk.
"""

from __future__ import annotations

import dataclasses

import pytest

from linkd.core import histories, recovery
from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch, ClusterState, Effect, ResetLog, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.journal import decode
from linkd.core.links import LinkLimits, Mapping

NOW = 1_000
LIMITS = LinkLimits(session_timeout_ms=5_000, replica_lag_time_max_ms=2_000)
BUDGET = 1 << 20


class Disk:
    """The bytes each cluster wrote, as a shell would keep them."""

    def __init__(self) -> None:
        self.batches: dict[tuple[str, int], list[tuple[int, int, bytes]]] = {}

    def carry_out(self, state: ClusterState, effects: list[Effect]) -> bool:
        """Stores the effects and makes them durable; whether a HW moved."""
        touched: dict[tuple[str, int], int] = {}
        for e in effects:
            if isinstance(e, AppendBatch):
                key = (e.topic_id, e.partition)
                self.batches.setdefault(key, []).append(
                    (e.header.base_offset, e.header.next_offset, e.batch)
                )
                touched[key] = e.header.next_offset
            elif isinstance(e, TruncateLog | ResetLog):
                key = (e.topic_id, e.partition)
                self.batches[key] = [b for b in self.batches.get(key, []) if b[1] <= e.offset]
        names = {t.topic_id: n for n, t in state.topics.items()}
        moved = False
        for (topic_id, p), offset in sorted(touched.items()):
            moved |= state.mark_durable(names[topic_id], p, offset)
        return moved

    def read(
        self, topic_id: str, partition: int, start: int, end: int, max_bytes: int
    ) -> tuple[bytes, int]:
        out = b""
        for base, nxt, data in self.batches.get((topic_id, partition), []):
            if nxt <= start or base >= end:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return out, len(out)


def two_clusters(faults: Faults = NO_FAULTS) -> tuple[ClusterState, ClusterState, Disk, Disk]:
    a, b = ClusterState("A", faults=faults), ClusterState("B", faults=faults)
    a.links.limits = LIMITS
    b.links.limits = LIMITS
    a.namespaces.create(1, "orders-", False)
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    a.links.store(config, NOW)
    mapping = Mapping("topic", "orders-", "orders-", "local", True, (0, 0, ""))
    admin.put_mapping(a, "ab", admin.versioned(a, mapping, NOW), NOW)
    b.links.accept_mirror(a.links.get("ab"), NOW)
    admin.reconcile_attachments(b, "ab", NOW)
    disk_a, disk_b = Disk(), Disk()
    _topic, effects = a.create_topic("orders-1", 1, {}, "src-1")
    disk_a.carry_out(a, effects)
    return a, b, disk_a, disk_b


def produce(
    a: ClusterState, disk: Disk, n: int, topic: str = "orders-1", value: bytes = b"x"
) -> int:
    data = rb.build_batch([rb.RecordSpec(None, value, NOW)] * n)
    result = a.produce(topic, 0, data, "", NOW)
    disk.carry_out(a, list(result.effects))
    return a.partition(topic, 0).log_end_offset


def discover(a: ClusterState, b: ClusterState, disk_b: Disk) -> rounds.TopicsPlan:
    ids = iter(f"fol-{i}" for i in range(100))
    namespaces = [
        rounds.source_topics(a, a.links.get("ab"), m.remote_prefix)
        for m in rep.follower_mappings(b.links.get("ab"), "topic")
    ]
    plan = rounds.plan_topics(b, b.links.get("ab"), namespaces, lambda: next(ids))
    disk_b.carry_out(b, plan.effects)
    return plan


def fetch_round(
    a: ClusterState, b: ClusterState, disk_a: Disk, disk_b: Disk, now: int, budget: int = BUDGET
) -> tuple[rounds.FetchAnswer, rounds.AppliedFetch, bool]:
    """One round, as both shells run it: request, serve, apply, durable, finish."""
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    answer = rounds.serve_replica_fetch(
        a, request.link_id, request.partitions, now, disk_a.read, budget, 1 << 20
    )
    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, now)
    durable_moved = disk_b.carry_out(b, applied.effects)
    finished = rounds.finish_fetch_round(
        b, "ab", applied.progress, answer.sync_state, now, refused=applied.refused
    )
    return answer, applied, durable_moved or finished is not None


def test_discovery__creates_the_follower_topic_with_the_source_shape__once() -> None:
    a, b, _disk_a, disk_b = two_clusters()
    a.create_topic("orders-2", 3, {"retention.ms": "60000"}, "src-2")
    a.create_topic("other", 1, {}, "src-3")  # outside the namespace: not offered

    plan = discover(a, b, disk_b)

    assert plan.created == [("orders-1", "orders-1"), ("orders-2", "orders-2")]
    assert len(b.topics["orders-2"].partitions) == 3
    assert b.topics["orders-2"].overrides == {"retention.ms": "60000"}
    assert "other" not in b.topics
    assert discover(a, b, disk_b).created == []  # already there: reshaped, not recreated


def test_a_fetch_round__copies_the_records_byte_for_byte__and_the_link_is_following() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    end = produce(a, disk_a, 3)
    assert b.link_state("ab") != "FOLLOWING"  # no round yet: lag unknown

    answer, applied, moved = fetch_round(a, b, disk_a, disk_b, NOW + 10)

    assert answer.ready and answer.total_bytes > 0 and answer.sync_state == ""
    assert [p.source_high_watermark for p in applied.progress] == [end]
    assert moved and b.partition("orders-1", 0).high_watermark == end
    assert disk_b.batches[(b.topic("orders-1").topic_id, 0)] == disk_a.batches[("src-1", 0)]
    assert b.link_state("ab") == "FOLLOWING"


def test_nothing_new__the_answer_is_not_ready__so_the_shell_holds_it() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)

    answer, applied, moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)

    assert not answer.ready and answer.total_bytes == 0
    assert applied.effects == [] and not moved


def test_a_follower_behind_an_unclean_election__sends_its_marks__and_is_told_where_to_cut() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    produce(a, disk_a, 2)  # the tail a new leader will lack
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    _removed, _epoch, effects = a.unclean_election("orders-1", 0, 3)
    disk_a.carry_out(a, effects)

    # Its last batch is gone from the source: it is asked for every mark.
    asked, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20)
    assert asked.ready and asked.partitions[0].marks_wanted
    assert applied.truncations == [] and b.links.runtime["ab"].marks_wanted == {("orders-1", 0)}
    request = rounds.follower_fetch_request(b, b.links.get("ab"))
    assert request.partitions[0].all_marks and len(request.partitions[0].marks) == 2

    answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 30)

    assert answer.ready and answer.partitions[0].diverging_end_offset == 3
    assert applied.truncations == [rounds.Truncation("orders-1", 0, 3)]
    assert b.partition("orders-1", 0).log_end_offset == 3
    assert b.links.runtime["ab"].marks_wanted == set()


def test_records_written_on_the_follower__are_found_by_their_marks__where_epochs_agree() -> None:
    """Leader epochs are numbered per cluster: a follower that took writes
    (after a failover) in an epoch the source also used cannot be told apart
    by epochs; the CRC of its last batch tells it."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    produce(a, disk_a, 2)  # the source moves on ...
    ours = rb.build_batch(
        [rb.RecordSpec(None, b"written-on-b", NOW)],
        base_offset=3,
        partition_leader_epoch=b.partition("orders-1", 0).leader_epoch,
    )
    header = rb.parse_header(ours)
    b.partition("orders-1", 0).apply_batch(header, None)  # ... and b took a write of its own
    disk_b.carry_out(b, [AppendBatch(b.topic("orders-1").topic_id, 0, ours, header)])
    assert a.partition("orders-1", 0).leader_epoch == header.partition_leader_epoch

    fetch_round(a, b, disk_a, disk_b, NOW + 20)  # asked for marks
    answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 30)

    assert answer.partitions[0].diverging_end_offset == 3
    assert applied.truncations == [rounds.Truncation("orders-1", 0, 3)]


def test_a_long_shared_prefix__thinned_marks__the_cut_is_exactly_where_the_logs_part() -> None:
    """A follower that went on writing long after it copied the source sends
    thinned marks (recent batches, then doubling distances back): the newest
    one the source holds may lie far below where the logs part. The source
    asks for the marks between it and the first that differs, round by
    round, and cuts at the end of the last batch both hold, never earlier."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    for _ in range(12):
        produce(a, disk_a, 1)  # twelve one-record batches, copied
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.partition("orders-1", 0).log_end_offset == 12
    produce(a, disk_a, 2)  # the source moves on ...
    log = b.partition("orders-1", 0)
    topic_id = b.topic("orders-1").topic_id
    for i in range(200):  # ... and the follower wrote far more of its own
        ours = rb.build_batch(
            [rb.RecordSpec(None, b"written-on-b-%d" % i, NOW)],
            base_offset=log.log_end_offset,
            partition_leader_epoch=log.leader_epoch,
        )
        header = rb.parse_header(ours)
        log.apply_batch(header, None)
        disk_b.carry_out(b, [AppendBatch(topic_id, 0, ours, header)])
    # The marks the follower sends at first hold no batch between the
    # shared prefix's first one and its recent ones.
    marks, _complete = histories.log_marks(b, "orders-1", 0)
    assert 1 < len(marks) < 100 and not {m.base_offset for m in marks} & set(range(1, 12))

    truncations: list[rounds.Truncation] = []
    rounds_run = 0
    while not truncations:
        rounds_run += 1
        assert rounds_run <= 5, "the parting point is not found"
        _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20 + rounds_run)
        truncations = applied.truncations

    assert truncations == [rounds.Truncation("orders-1", 0, 12)]
    assert b.partition("orders-1", 0).log_end_offset == 12
    assert b.links.runtime["ab"].marks_wanted == set()
    assert b.links.runtime["ab"].marks_spans == {}
    fetch_round(a, b, disk_a, disk_b, NOW + 40)
    assert b.partition("orders-1", 0).log_end_offset == 14


def test_a_parting_range_wider_than_the_marks__is_narrowed_round_by_round() -> None:
    """More batches between the two marks than one request carries: the
    follower sends them evenly spaced, and each round narrows the range."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    for _ in range(700):
        produce(a, disk_a, 1)
    while b.partition("orders-1", 0).log_end_offset < 700:
        fetch_round(a, b, disk_a, disk_b, NOW + 10)
    produce(a, disk_a, 2)
    log = b.partition("orders-1", 0)
    topic_id = b.topic("orders-1").topic_id
    for i in range(300):
        ours = rb.build_batch(
            [rb.RecordSpec(None, b"written-on-b-%d" % i, NOW)],
            base_offset=log.log_end_offset,
            partition_leader_epoch=log.leader_epoch,
        )
        header = rb.parse_header(ours)
        log.apply_batch(header, None)
        disk_b.carry_out(b, [AppendBatch(topic_id, 0, ours, header)])

    truncations: list[rounds.Truncation] = []
    rounds_run = 0
    while not truncations:
        rounds_run += 1
        assert rounds_run <= 8, "the parting point is not found"
        _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 20 + rounds_run)
        truncations = applied.truncations

    assert truncations == [rounds.Truncation("orders-1", 0, 700)]


def test_the_byte_budget__is_spent_partition_by_partition__the_rest_waits_a_round() -> None:
    a, b, disk_a, disk_b = two_clusters()
    a.create_topic("orders-2", 1, {}, "src-2")
    discover(a, b, disk_b)
    produce(a, disk_a, 50, "orders-1", b"x" * 100)
    produce(a, disk_a, 50, "orders-2", b"y" * 100)

    answer, _applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 10, budget=100)

    sent = {p.source_topic: len(p.records) for p in answer.partitions}
    assert sent["orders-1"] > 0 and sent["orders-2"] == 0
    assert b.link_state("ab") == "CATCHING_UP"
    fetch_round(a, b, disk_a, disk_b, NOW + 20)
    assert b.partition("orders-2", 0).high_watermark == 50


def test_a_partition_the_source_does_not_lead__is_refused_alone() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 1)
    bogus = rounds.PartitionFetch("other", 0, 0, -1)
    good = rounds.follower_fetch_request(b, b.links.get("ab")).partitions

    answer = rounds.serve_replica_fetch(a, "id-1", [*good, bogus], NOW, disk_a.read, BUDGET, 100)

    assert answer.partitions[0].error is None and answer.partitions[0].records
    error = answer.partitions[1].error
    # Not gone: not led on the link (a follower does not orphan it).
    assert error is not None and error.code == ErrorCode.NOT_LED_ON_LINK


def test_sync_link__the_fetch_offset_acknowledges__and_the_answer_carries_the_moved_hw() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    fetch_round(a, b, disk_a, disk_b, NOW + 15)  # the leader sees the follower caught up
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)  # caught up since SYNC: IN_SYNC
    assert a.link_state("ab") == "IN_SYNC" and b.link_state("ab") == "IN_SYNC"

    end = produce(a, disk_a, 2)
    assert a.partition("orders-1", 0).high_watermark == 3  # held for the follower
    answer, _applied, moved = fetch_round(a, b, disk_a, disk_b, NOW + 40)  # copies to the LEO
    assert answer.partitions[0].high_watermark == 3 and not moved
    answer, _applied, moved = fetch_round(a, b, disk_a, disk_b, NOW + 50)  # acknowledges

    assert answer.hw_moved and answer.partitions[0].high_watermark == end
    assert answer.sync_state == "IN_SYNC"
    assert moved and b.partition("orders-1", 0).high_watermark == end


def test_sync_link__a_follower_that_stops_fetching__is_out_of_sync_after_the_lag_time() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)
    produce(a, disk_a, 1)

    a.links.tick(NOW + 30 + LIMITS.replica_lag_time_max_ms + 1)
    assert a.link_state("ab") == "OUT_OF_SYNC"
    answer, _applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 3_000)
    assert answer.sync_state == "OUT_OF_SYNC"  # the follower fetched, not yet caught up
    fetch_round(a, b, disk_a, disk_b, NOW + 3_010)
    assert a.link_state("ab") == "IN_SYNC" and b.link_state("ab") == "IN_SYNC"


def test_a_round_finished_after_the_link_was_deleted__changes_nothing_on_the_link() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    request = rounds.follower_fetch_request(b, b.links.get("ab"))
    answer = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW, disk_a.read, BUDGET, 100
    )
    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, NOW)
    disk_b.carry_out(b, applied.effects)
    admin.delete_link(b, "ab")

    assert not rounds.finish_fetch_round(b, "ab", applied.progress, "", NOW + 1)
    # What it appended is durable and below the source's HW: readable.
    assert b.partition("orders-1", 0).high_watermark == 2


def _round_cut_short(a: ClusterState, b: ClusterState, disk_a: Disk, disk_b: Disk) -> int:
    """A round whose appends are durable but which never finishes (its
    caller went away, its source died): returns the source's HW."""
    end = produce(a, disk_a, 5)
    request = rounds.follower_fetch_request(b, b.links.get("ab"))
    answer = rounds.serve_replica_fetch(
        a, "id-1", request.partitions, NOW + 10, disk_a.read, BUDGET, 1 << 20
    )
    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, NOW + 10)
    disk_b.carry_out(b, applied.effects)
    return end


def test_a_round_cut_short__what_it_appended_is_readable_once_durable() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    fetch_round(a, b, disk_a, disk_b, NOW + 5)

    end = _round_cut_short(a, b, disk_a, disk_b)

    log = b.partition("orders-1", 0)
    assert end == 5 and log.log_end_offset == end
    assert log.high_watermark == end  # no finish_fetch_round, nothing hidden
    row = admin.follower_partitions(b, "ab", NOW + 11)[0]
    assert row.high_watermark == end and row.log_end_offset == end


def test_a_round_cut_short__undo_18__hides_what_it_appended() -> None:
    a, b, disk_a, disk_b = two_clusters(Faults.undoing(18))
    discover(a, b, disk_b)
    fetch_round(a, b, disk_a, disk_b, NOW + 5)
    end = _round_cut_short(a, b, disk_a, disk_b)

    log = b.partition("orders-1", 0)
    assert log.log_end_offset == end and log.high_watermark == 0


def _sync_follower_holding_records(faults: Faults) -> tuple[ClusterState, int]:
    """B follows A over a SYNC link and holds 2 records above its readable
    high watermark; returns B and its log end."""
    a, b, disk_a, disk_b = two_clusters(faults)
    discover(a, b, disk_b)
    fetch_round(a, b, disk_a, disk_b, NOW + 5)
    fetch_round(a, b, disk_a, disk_b, NOW + 15)  # the leader sees the follower caught up
    a.links.set_mode("ab", "SYNC", NOW + 20)
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    a.refresh_led_partitions(NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)
    end = produce(a, disk_a, 2)
    fetch_round(a, b, disk_a, disk_b, NOW + 40)  # a SYNC follower copies to the LEO,
    # readable only as far as its source's HW (held until it acknowledges)
    return b, end


def test_reports_give_the_readable_position__not_the_log_end() -> None:
    b, end = _sync_follower_holding_records(NO_FAULTS)
    row = admin.follower_partitions(b, "ab", NOW + 41)[0]
    assert (row.log_end_offset, row.high_watermark, row.source_high_watermark) == (end, 0, 0)
    summary = admin.link_summary(b, "ab", NOW + 41)
    [lag] = [r for r in summary.partitions if r.role == "follower"]
    assert (lag.log_end_offset, lag.high_watermark) == (end, 0)


def test_undo_19__reports_give_the_log_end() -> None:
    b, end = _sync_follower_holding_records(Faults.undoing(19))
    row = admin.follower_partitions(b, "ab", NOW + 41)[0]
    assert row.high_watermark == end  # undone: the log end, which nobody can read


def test_source_group_offsets__every_group_of_the_namespace__in_order() -> None:
    a, _b, _disk_a, _disk_b = two_clusters()
    for group, offset in (("app-2", 7), ("app-1", 5), ("other", 9)):
        a.groups.apply_record(
            decode({
                "type": "offset_commit",
                "group": group,
                "topic": "orders-1",
                "partition": 0,
                "offset": offset,
                "metadata": "",
                "leader_epoch": 0,
                "ts": NOW,
            })
        )

    offsets = rounds.source_group_offsets(a, "app-")

    assert [(g, o) for g, _t, _p, o, _m, _e in offsets] == [("app-1", 5), ("app-2", 7)]


def test_handshake__another_link_id__is_refused_and_changes_nothing() -> None:
    """(Credentials are the session's: tests/test_core_link_auth.py.)"""
    a, _b, _disk_a, _disk_b = two_clusters()
    impostor = ClusterState("B").links.new_config(
        "ab", "id-2", "A", "a:1", "", "local_dials", "", NOW
    )
    with pytest.raises(ClusterError) as exists:
        rounds.accept_handshake(a, impostor, True, NOW)
    assert exists.value.code == ErrorCode.LINK_EXISTS
    assert a.links.get("ab").link_id == "id-1"


def test_handshake__both_sides_converge__and_count_it_as_contact() -> None:
    a, b, _disk_a, _disk_b = two_clusters()
    b.links.set_field("ab", "mode", "SYNC", NOW + 5)
    b.links.set_field("ab", "credentials", "b's own", NOW + 5)

    rounds.accept_handshake(a, b.links.get("ab"), False, NOW + 10)
    rounds.accept_handshake_answer(b, "ab", a.links.get("ab"), NOW + 11)

    assert a.links.get("ab").value("mode") == "SYNC"
    assert a.links.get("ab").value("credentials") != "b's own"  # never crosses
    assert a.links.runtime["ab"].last_contact_ms == NOW + 10
    assert b.links.runtime["ab"].last_contact_ms == NOW + 11


def test_reset_runtime__as_after_a_restart__every_link_is_disconnected_and_knows_nothing() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 1)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    assert b.link_state("ab") == "FOLLOWING"

    b.links.reset_runtime(NOW + 20)

    runtime = b.links.runtime["ab"]
    assert b.link_state("ab") == "DISCONNECTED"
    assert runtime.partitions == {} and runtime.last_contact_ms is None
    assert runtime.history == [("DISCONNECTED", NOW + 20)]
    fetch_round(a, b, disk_a, disk_b, NOW + 30)
    assert b.link_state("ab") == "FOLLOWING"


def test_set_link_mode__sync_only_once_following__async_lifts_the_hold_at_once() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    with pytest.raises(ClusterError) as refused:
        rounds.set_link_mode(b, "ab", "SYNC", NOW)  # no fetch round yet: not FOLLOWING
    assert refused.value.code == ErrorCode.LINK_NOT_FOLLOWING
    produce(a, disk_a, 1)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    with pytest.raises(ClusterError) as behind:
        # The leader has not yet seen the follower fetch past what it copied.
        rounds.set_link_mode(a, "ab", "SYNC", NOW + 11)
    assert behind.value.code == ErrorCode.LINK_NOT_FOLLOWING
    fetch_round(a, b, disk_a, disk_b, NOW + 15)
    records, _moved = rounds.set_link_mode(a, "ab", "SYNC", NOW + 20)
    # Re-stated, it is recorded anew (a newer version, the same mode).
    again, _moved = rounds.set_link_mode(a, "ab", "SYNC", NOW + 21)
    assert records and again and a.links.get("ab").mode == "SYNC"
    b.links.accept_mirror(a.links.get("ab"), NOW + 20)
    fetch_round(a, b, disk_a, disk_b, NOW + 30)
    end = produce(a, disk_a, 2)
    assert a.partition("orders-1", 0).high_watermark < end  # held for the follower

    records, moved = rounds.set_link_mode(a, "ab", "ASYNC", NOW + 40)

    assert records and moved and a.partition("orders-1", 0).high_watermark == end


def test_a_leader_serving_its_followers_fetch_itself__is_no_contact() -> None:
    """Push: the leader answers the follower's last request itself; if that
    counted as contact, a dead follower would keep the link connected."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    request = rounds.follower_fetch_request(b, b.links.get("ab"))
    later = NOW + 10 + LIMITS.session_timeout_ms + 1

    rounds.serve_replica_fetch(
        a, "id-1", request.partitions, later, disk_a.read, BUDGET, 100, from_remote=False
    )
    assert a.link_state("ab") == "DISCONNECTED"
    rounds.serve_replica_fetch(a, "id-1", request.partitions, later, disk_a.read, BUDGET, 100)
    assert a.link_state("ab") == "FOLLOWING"  # a fetch from B is contact


def test_a_fetched_batch_whose_header_lies_is_not_stored_and_the_link_says_why() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 1)
    # What A holds on disk has a header that lies (stored before A checked
    # it), under a CRC that holds: three records in an offset range of one.
    # A follower checks headers, not records (records.check_copied_batch).
    body = bytearray()
    for i, value in enumerate((b"a", b"b", b"c")):
        rb.encode_record(body, i, 0, None, value)
    lying = rb.assemble_batch(
        bytes(body),
        attributes=0,
        record_count=3,
        last_offset_delta=0,
    )
    disk_a.batches[("src-1", 0)] = [(0, 1, lying)]

    _answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 10)

    assert [(t, p, e.code) for t, p, e in applied.refused] == [
        ("orders-1", 0, ErrorCode.INVALID_RECORD)
    ]
    assert b.partition("orders-1", 0).log_end_offset == 0
    assert b.link_state("ab") != "FOLLOWING"
    row = admin.link_summary(b, "ab", NOW + 10).partitions[0]
    assert not row.lag_known
    assert row.problem.startswith("INVALID_RECORD: replica fetch for orders-1-0")


def test_pipelined_push__continue_fetch_goes_on_where_the_answer_ends__acknowledging_nothing() -> (
    None
):
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    for _ in range(4):
        produce(a, disk_a, 10, value=b"x" * 100)
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    ab = a.links.get("ab")
    # A budget of one batch a round: the answer holds the first batch only.
    first = rounds.serve_replica_fetch(a, "id-1", request.partitions, NOW, disk_a.read, 1, 1)
    cursor = rounds.continue_fetch(ab, request.partitions, first)
    assert cursor is not None and cursor[0].fetch_offset == 10
    assert cursor[0].marks[0].base_offset == 0 and cursor[0].marks[0].last_offset == 9
    fetched_before = dict(a.links.runtime["ab"].partitions)

    second = rounds.serve_replica_fetch(
        a, "id-1", cursor, NOW, disk_a.read, 1, 1, acknowledges=False
    )

    assert second.partitions[0].diverging_end_offset < 0 and not second.partitions[0].marks_wanted
    assert rb.parse_header(second.partitions[0].records).base_offset == 10
    # The made-up request is not the follower's position: nothing recorded.
    assert dict(a.links.runtime["ab"].partitions) == fetched_before
    # Applied in order, both answers continue the follower's log.
    for answer in (first, second):
        applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, NOW)
        disk_b.carry_out(b, applied.effects)
    assert b.partition("orders-1", 0).log_end_offset == 20
    # Applied out of order, an answer that does not continue the log is dropped.
    third = rounds.serve_replica_fetch(
        a, "id-1", rounds.continue_fetch(ab, cursor, second) or (), NOW, disk_a.read, 1, 1,
        acknowledges=False,
    )
    fourth_from = rounds.continue_fetch(ab, rounds.continue_fetch(ab, cursor, second) or (), third)
    assert fourth_from is not None
    fourth = rounds.serve_replica_fetch(
        a, "id-1", fourth_from, NOW, disk_a.read, 1, 1, acknowledges=False
    )
    applied = rounds.apply_replica_fetch(b, "ab", fourth, request.local_of, NOW)
    assert not any(isinstance(e, AppendBatch) for e in applied.effects)
    assert b.partition("orders-1", 0).log_end_offset == 20


def test_pipelined_push__not_on_a_sync_link__nor_after_a_divergence_or_an_empty_answer() -> None:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    answer = rounds.serve_replica_fetch(a, "id-1", request.partitions, NOW, disk_a.read, BUDGET, 1)
    ab = a.links.get("ab")
    assert rounds.continue_fetch(ab, request.partitions, answer) is not None

    empty = rounds.FetchAnswer([rounds.FetchedPartition("orders-1", 0)])
    assert rounds.continue_fetch(ab, request.partitions, empty) is None
    diverged = rounds.FetchAnswer(
        [rounds.FetchedPartition("orders-1", 0, diverging_end_offset=0, records=b"x")],
        total_bytes=1,
    )
    assert rounds.continue_fetch(ab, request.partitions, diverged) is None
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    fetch_round(a, b, disk_a, disk_b, NOW + 15)
    a.links.set_mode("ab", "SYNC", NOW + 20)
    assert rounds.continue_fetch(a.links.get("ab"), request.partitions, answer) is None


def test_pipelined_push__a_read_ahead_refusal_or_divergence__is_dropped_unless_at_the_log_end() -> (
    None
):
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    request = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    # Read ahead for a follower at 5: past the source's log end, so diverged.
    ahead = [rounds.PartitionFetch("orders-1", 0, 5, -1)]
    answer = rounds.serve_replica_fetch(
        a, "id-1", ahead, NOW, disk_a.read, BUDGET, 1, acknowledges=False
    )
    assert answer.partitions[0].diverging_end_offset >= 0
    assert answer.partitions[0].continues_from == 5

    applied = rounds.apply_replica_fetch(b, "ab", answer, request.local_of, NOW)

    assert applied.effects == [] and applied.truncations == [] and applied.progress == []


def test_a_cut_over_the_followers_own_acknowledged_writes__is_not_made__until_recover() -> None:
    """Records B's own clients wrote after a detach (provenance: `detached`)
    and had acknowledged are never cut by the link: the partition is refused,
    left out of fetches, and shown, until a recover cuts it."""
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 3)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
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
    log.high_watermark = 5  # acknowledged to B's producer
    fetch_round(a, b, disk_a, disk_b, NOW + 20)  # asked for marks
    answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 30)

    assert answer.partitions[0].diverging_end_offset == 3
    assert applied.truncations == [] and log.log_end_offset == 5
    [(topic, partition, why)] = applied.refused
    assert (topic, partition, why.code) == ("orders-1", 0, ErrorCode.DIVERGED_LOG)
    assert "2 acknowledged records clients of 'B' wrote (offsets [3, 5))" in why.message
    assert b.links.runtime["ab"].own_writes_held == {("orders-1", 0): 5}
    [held] = rounds.follower_fetch_request(b, b.links.get("ab")).partitions
    assert held.held and held.marks == () and held.fetch_offset == 5
    [line] = b.links.lagging_partitions("ab", NOW + 30)
    assert line.startswith("orders-1-0 (following) is not cut: ") and "recover" in line
    # describe-link's row says so in a field a tool can read, not only in words.
    [row] = admin.link_summary(b, "ab", NOW + 30).partitions
    assert row.own_writes_held and not row.lag_known and "recover" in row.problem
    # The source is told: it copies nothing, and its own view says why.
    answer, applied, _moved = fetch_round(a, b, disk_a, disk_b, NOW + 35)
    assert not answer.ready and answer.partitions[0].error is not None
    assert log.log_end_offset == 5 and applied.refused[0][2] is why  # the follower's words
    assert a.links.explained("ab", NOW + 35) and b.links.explained("ab", NOW + 35)
    [source_line] = a.links.lagging_partitions("ab", NOW + 35)
    assert "does not cut its copy of orders-1-0" in source_line, source_line

    # recover cuts it (confirmed) while a fetch sent as held is out: the cut
    # lifts the hold (no stale row says "held"), and the held answer that
    # arrives after it is dropped, not taken for a refusal (fix 44).
    stale = rounds.follower_fetch_request(b, b.links.get("ab"), 1 << 20)
    late = rounds.serve_replica_fetch(
        a, stale.link_id, stale.partitions, NOW + 36, disk_a.read, BUDGET, 1 << 20
    )
    assert late.partitions[0].held and late.partitions[0].error is not None
    cut = recovery.PartitionRow("orders-1", "orders-1", 0, 5, 5, 3, 3, 2, 2, "diverged")
    plan = recovery.RecoveryPlan("ab", "B", "A", (), (cut,), ())
    disk_b.carry_out(b, recovery.apply_recovery(b, plan, b.links.get("ab").link_id, NOW + 37))
    assert b.links.runtime["ab"].own_writes_held == {} and b.links.runtime["ab"].refused == {}
    assert rounds.apply_replica_fetch(b, "ab", late, stale.local_of, NOW + 38).refused == []
    assert b.links.runtime["ab"].refused == {}
    # The log end moved, so it is fetched again.
    request = rounds.follower_fetch_request(b, b.links.get("ab"))
    assert [p.fetch_offset for p in request.partitions] == [3]
    fetch_round(a, b, disk_a, disk_b, NOW + 40)
    assert log.log_end_offset == 5 and b.links.runtime["ab"].refused == {}
    assert not any(r.own_writes_held for r in admin.link_summary(b, "ab", NOW + 40).partitions)


def test_the_partitions_led_under_a_link__are_kept_until_its_mappings_or_logs_change() -> None:
    a, _b, disk_a, _disk_b = two_clusters()
    config = a.links.get("ab")
    led = a.led_under(config)
    assert led == {("orders-1", 0)} and a.led_under(config) is led
    disk_a.carry_out(a, a.create_topic("orders-2", 2, {}, "src-2")[1])
    disk_a.carry_out(a, a.create_topic("other", 1, {}, "src-3")[1])  # under no mapping
    grown = a.led_under(config)
    assert grown == {("orders-1", 0), ("orders-2", 0), ("orders-2", 1)}
    a.refresh_led_partitions(NOW + 1)
    assert a.links.runtime["ab"].led_partitions is grown  # (registered again: no change)
    mapping = config.mappings[next(iter(config.mappings))]
    detached = dataclasses.replace(mapping, attached=False)
    admin.put_mapping(a, "ab", admin.versioned(a, detached, NOW + 2), NOW + 2)
    assert a.led_under(a.links.get("ab")) == set()
