"""SYNC links in the core: the state machine (spec section 4), the high
watermark waiting for in-sync followers (section 5, invariant 4), and every
cell of the who-may-do-what table (section 6), one test per cell.

The two clusters are pure ClusterStates; time is data. Link states are reached
the way the shells reach them: contacts, follower fetches (`on_leader_fetch`),
the leading side's verdict sent to the follower (`on_remote_sync_state`), and
ticks past link.replica.lag.time.max.ms.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch, ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import LinkLimits, LinkTable, Mapping

NOW = 1_700_000_000_000
LAG_MS = 1_000
LIMITS = LinkLimits(
    session_timeout_ms=5_000, lag_max_records=0, lag_max_ms=60_000, replica_lag_time_max_ms=LAG_MS
)


def sync_table() -> LinkTable:
    """The leading side of link ab with one led partition t-0."""
    table = LinkTable("A", LIMITS)
    config = table.new_config("ab", "id", "B", "b:1", "", "local_dials", "", NOW)
    table.store(config, NOW)
    table.put_mapping("ab", Mapping("topic", "t", "t", "local", True, (0, 0, "")), NOW)
    table.on_contact("ab", NOW)
    return table


def test_sync_mode__only_from_following__then_syncing_in_sync_out_of_sync_and_back() -> None:
    table = sync_table()
    assert table.state_name("ab") == "FOLLOWING"
    table.set_mode("ab", "sync", NOW + 1)
    table.register_led_partitions("ab", {("t", 0)}, NOW + 1)
    assert table.state_name("ab") == "SYNCING"
    assert not table.sync_floors() and table.sync_floor("t", 0) is None
    # The follower fetches at the log end: caught up since SYNCING began.
    table.on_leader_fetch("ab", "t", 0, 10, 10, 10, NOW + 2)
    assert table.state_name("ab") == "IN_SYNC"
    assert table.sync_floor("t", 0) == 10 and table.sync_floors()
    # It keeps up with what each response offered: still in sync.
    table.on_leader_fetch("ab", "t", 0, 10, 15, 10, NOW + 500)
    table.on_leader_fetch("ab", "t", 0, 15, 20, 15, NOW + 900)
    assert table.state_name("ab") == "IN_SYNC" and table.sync_floor("t", 0) == 15
    # Then it stalls: after the lag time the link is OUT_OF_SYNC, the floor goes.
    table.tick(NOW + 900 + LAG_MS + 1)
    assert table.state_name("ab") == "OUT_OF_SYNC"
    assert table.sync_floor("t", 0) is None and not table.sync_floors()
    # It catches up again: IN_SYNC once every partition is caught up since.
    table.on_leader_fetch("ab", "t", 0, 20, 20, 20, NOW + 3_000)
    assert table.state_name("ab") == "IN_SYNC"
    # A lost connection makes a SYNC link OUT_OF_SYNC, never DISCONNECTED.
    table.tick(NOW + 3_000 + LIMITS.session_timeout_ms + 1)
    assert table.state_name("ab") == "OUT_OF_SYNC"
    # Back to ASYNC: at once, from any state.
    table.set_mode("ab", "async", NOW + 9_000)
    assert table.state_name("ab") == "DISCONNECTED"
    assert [s for s, _ in table.runtime["ab"].history] == [
        "DISCONNECTED",
        "FOLLOWING",
        "SYNCING",
        "IN_SYNC",
        "OUT_OF_SYNC",
        "IN_SYNC",
        "OUT_OF_SYNC",
        "DISCONNECTED",
    ]


def test_set_mode_sync_refused_unless_following__and_bad_modes_named() -> None:
    table = sync_table()
    table.tick(NOW + LIMITS.session_timeout_ms + 1)
    with pytest.raises(ClusterError) as info:
        table.set_mode("ab", "SYNC", NOW + 10_000)
    assert info.value.code == ErrorCode.LINK_NOT_FOLLOWING
    assert "DISCONNECTED" in info.value.message and "'ab'" in info.value.message
    with pytest.raises(ClusterError) as bad:
        table.set_mode("ab", "semi-sync", NOW + 10_000)
    assert bad.value.code == ErrorCode.INVALID_LINK_CONFIG and "semi-sync" in bad.value.message


def test_a_partition_never_fetched_holds_syncing__and_then_out_of_sync_after_the_lag_time() -> None:
    table = sync_table()
    table.set_mode("ab", "SYNC", NOW + 1)
    table.register_led_partitions("ab", {("t", 0), ("t", 1)}, NOW + 1)
    table.on_leader_fetch("ab", "t", 0, 5, 5, 5, NOW + 2)
    assert table.state_name("ab") == "SYNCING"  # t-1 was never fetched


def test_follower_side__adopts_the_leaders_verdict__out_of_sync_when_cut_off() -> None:
    source = sync_table()
    follower = LinkTable("B", LIMITS)
    follower.accept_mirror(source.get("ab"), NOW)
    follower.on_contact("ab", NOW)
    source.set_mode("ab", "SYNC", NOW + 1)
    follower.accept_mirror(source.get("ab"), NOW + 2)
    follower.on_contact("ab", NOW + 2)
    assert follower.state_name("ab") == "SYNCING"  # no verdict from the leader yet
    follower.on_remote_sync_state("ab", "IN_SYNC", NOW + 3)
    assert follower.state_name("ab") == "IN_SYNC"
    follower.tick(NOW + 3 + LIMITS.session_timeout_ms + 1)
    assert follower.state_name("ab") == "OUT_OF_SYNC"


# -- the high watermark (invariant 4) ------------------------------------------------


def linked() -> tuple[ClusterState, ClusterState]:
    """A leads topic namespace orders- and group namespace app- to B on link ab."""
    a, b = ClusterState("A"), ClusterState("B")
    a.links.limits = LIMITS
    b.links.limits = LIMITS
    a.namespaces.create(1, "orders-", False)
    a.namespaces.create(2, "app-", False)
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    a.links.store(config, NOW)
    for kind in ("topic", "group"):
        prefix = "orders-" if kind == "topic" else "app-"
        mapping = Mapping(kind, prefix, prefix, "local", True, (0, 0, ""))
        admin.put_mapping(a, "ab", admin.versioned(a, mapping, NOW), NOW)
    b.links.accept_mirror(a.links.get("ab"), NOW)
    admin.reconcile_attachments(b, "ab", NOW)
    a.create_topic("orders-1", 1, {}, "src-id")
    rep.create_replica_topic(b, "orders-1", 1, {}, "fol-id")
    for side in (a, b):
        side.links.on_contact("ab", NOW)
    return a, b


def append(state: ClusterState, n: int = 1, **kw: int | bool) -> int:
    data = rb.build_batch([rb.RecordSpec(None, b"x", NOW)] * n, **kw)  # type: ignore[arg-type]
    result = state.produce("orders-1", 0, data, "tx" if kw.get("transactional") else "", NOW)
    state.mark_durable("orders-1", 0, state.partition("orders-1", 0).log_end_offset)
    return max(e.header.next_offset for e in result.effects if isinstance(e, AppendBatch))


def go_sync(a: ClusterState, b: ClusterState, now: int) -> None:
    """set-mode sync on A; the follower fetches at A's log end: IN_SYNC."""
    a.links.set_mode("ab", "SYNC", now)
    a.refresh_led_partitions(now)
    leo = a.partition("orders-1", 0).log_end_offset
    a.links.on_leader_fetch("ab", "orders-1", 0, leo, leo, leo, now + 1)
    b.links.accept_mirror(a.links.get("ab"), now + 1)
    b.links.on_contact("ab", now + 1)
    b.links.on_remote_sync_state("ab", a.links.local_sync_state("ab"), now + 1)
    assert a.link_state("ab") == "IN_SYNC" and b.link_state("ab") == "IN_SYNC"


def test_in_sync__the_source_hw_waits_for_the_followers_acknowledgement() -> None:
    a, b = linked()
    append(a, 3)
    go_sync(a, b, NOW + 10)
    end = append(a, 2)
    log = a.partition("orders-1", 0)
    assert log.durable_offset == end and log.high_watermark == 3  # held for the follower
    a.links.on_leader_fetch("ab", "orders-1", 0, end, end, 3, NOW + 20)
    assert a.refresh_high_watermarks() and log.high_watermark == end
    # Dropping OUT_OF_SYNC lifts the hold: acks stop waiting.
    end2 = append(a, 1)
    assert log.high_watermark == end
    a.links.tick(NOW + 20 + LAG_MS + 1)
    assert a.link_state("ab") == "OUT_OF_SYNC"
    assert a.refresh_high_watermarks() and log.high_watermark == end2


def test_follower_hw_never_passes_the_source_hw__caps_apply_together_on_a_sync_link() -> None:
    a, b = linked()
    go_sync(a, b, NOW)
    end = append(a, 4)
    data = rb.build_batch([rb.RecordSpec(None, b"x", NOW)] * 4)
    stamped = rb.with_offset_and_epoch(data, 0, 0)
    rep.append_replica(b, "orders-1", 0, stamped, 0)
    b.mark_durable("orders-1", 0, 4)
    log = b.partition("orders-1", 0)
    assert log.log_end_offset == end
    # The source acknowledged nothing yet (its HW is 0): readers here see nothing.
    rep.follow_source_high_watermarks(b, "ab", [("orders-1", 0, 0)])
    assert log.high_watermark == 0
    # A cap beyond what this follower holds is not applied on a SYNC link.
    assert not rep.follow_source_high_watermarks(b, "ab", [("orders-1", 0, 9)])
    assert rep.follow_source_high_watermarks(b, "ab", [("orders-1", 0, 4)])
    assert log.high_watermark == 4


def test_one_answers_caps_pass_together__as_its_partitions_become_durable_one_by_one() -> None:
    """A shell makes one answer's appends durable a partition at a time (a
    journal record between them makes those before it durable first). On a
    SYNC link no follower HW passes its cap before every partition of the
    answer can: else a read_committed reader here could see a transaction in
    one partition and not yet in another."""
    a, b = linked()
    go_sync(a, b, NOW)
    rep.create_replica_topic(b, "orders-2", 2, {}, "fol-2")
    data = rb.with_offset_and_epoch(rb.build_batch([rb.RecordSpec(None, b"x", NOW)] * 4), 0, 0)
    for p in (0, 1):
        rep.append_replica(b, "orders-2", p, data, 0)
    assert rep.cap_at_source_high_watermarks(b, "ab", [("orders-2", 0, 4), ("orders-2", 1, 4)])
    first, second = b.partition("orders-2", 0), b.partition("orders-2", 1)
    b.made_durable([("orders-2", 0, 4)])
    assert first.durable_offset == 4 and first.high_watermark == 3  # not past the last offset
    b.made_durable([("orders-2", 1, 4)])
    assert first.high_watermark == second.high_watermark == 4
    assert not b.marker_groups  # released once every one passed
    # Caps applied again once every append is durable (the round's end) move
    # the HWs at once: no group is left behind.
    for p in (0, 1):
        rep.append_replica(b, "orders-2", p, rb.with_offset_and_epoch(data, 4, 0), 0)
        b.made_durable([("orders-2", p, 8)])
    assert rep.follow_source_high_watermarks(b, "ab", [("orders-2", 0, 8), ("orders-2", 1, 8)])
    assert first.high_watermark == second.high_watermark == 8 and not b.marker_groups
    # Caps over records durable already, and then one partition's next
    # append becomes durable first: its HW does not move alone (the other's
    # would wait for the round's end).
    for p in (0, 1):
        rep.append_replica(b, "orders-2", p, rb.with_offset_and_epoch(data, 8, 0), 0)
        b.made_durable([("orders-2", p, 12)])
    assert rep.cap_at_source_high_watermarks(b, "ab", [("orders-2", 0, 12), ("orders-2", 1, 12)])
    rep.append_replica(b, "orders-2", 0, rb.with_offset_and_epoch(data, 12, 0), 0)
    b.made_durable([("orders-2", 0, 16)])
    assert first.high_watermark == second.high_watermark == 12 and not b.marker_groups


# -- spec section 6: one test per cell ------------------------------------------------

STATES = ["DISCONNECTED", "CATCHING_UP", "FOLLOWING", "SYNCING", "IN_SYNC", "OUT_OF_SYNC"]


def in_state(name: str) -> tuple[ClusterState, ClusterState]:
    """Both sides of link ab with the link in the named state on both."""
    a, b = linked()
    append(a, 2)
    now = NOW + 100
    if name == "DISCONNECTED":
        for side in (a, b):
            side.links.tick(now + LIMITS.session_timeout_ms + 1)
    elif name == "CATCHING_UP":
        b.links.on_progress("ab", "orders-1", 0, "follower", 0, 2, now)
    elif name == "FOLLOWING":
        b.links.on_progress("ab", "orders-1", 0, "follower", 2, 2, now)
        b.links.on_fetch_round("ab", now)
    else:
        b.links.on_progress("ab", "orders-1", 0, "follower", 2, 2, now)
        b.links.on_fetch_round("ab", now)
        a.links.set_mode("ab", "SYNC", now)
        a.refresh_led_partitions(now)
        b.links.accept_mirror(a.links.get("ab"), now)
        b.links.on_contact("ab", now)
        if name in ("IN_SYNC", "OUT_OF_SYNC"):
            a.links.on_leader_fetch("ab", "orders-1", 0, 2, 2, 2, now + 1)
        if name == "OUT_OF_SYNC":
            a.links.tick(now + 1 + LAG_MS + 1)
            b.links.on_contact("ab", now + 1 + LAG_MS + 1)
        b.links.on_remote_sync_state("ab", a.links.local_sync_state("ab"), now + LAG_MS + 2)
    assert a.link_state("ab") == name or name in ("CATCHING_UP", "FOLLOWING", "DISCONNECTED")
    assert b.link_state("ab") == name
    return a, b


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except ClusterError as exc:
        return exc.code.name
    return "ok"


def source_consumer(a: ClusterState, b: ClusterState) -> str:
    return outcome(lambda: a.plan_fetch("orders-1", 0, 0, read_committed=False))


def source_producer(a: ClusterState, b: ClusterState) -> str:
    def produce() -> str:
        end = append(a, 1)
        return "ok" if a.partition("orders-1", 0).high_watermark >= end else "ok, ack waits"

    try:
        return produce()
    except ClusterError as exc:
        return exc.code.name


def source_txn_commit(a: ClusterState, b: ClusterState) -> str:
    pid, epoch, _ = a.init_producer_id("tx", 60_000, NOW)
    a.add_partitions_to_txn("tx", pid, epoch, [("orders-1", 0)], NOW)
    append(a, 1, producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
    try:
        effects = a.end_txn("tx", pid, epoch, True, NOW)
    except ClusterError as exc:
        return exc.code.name
    marker_end = max(e.header.next_offset for e in effects if isinstance(e, AppendBatch))
    a.mark_durable("orders-1", 0, marker_end)
    held = a.partition("orders-1", 0).high_watermark < marker_end
    return "ok, commit waits" if held else "ok"


def target_reader(a: ClusterState, b: ClusterState) -> str:
    return outcome(lambda: b.plan_fetch("orders-1", 0, 0, read_committed=False))


def target_replicated_group_read(a: ClusterState, b: ClusterState) -> str:
    return outcome(lambda: b.plan_fetch("orders-1", 0, 0, False, group_id="app-billing"))


def target_replicated_group_commit(a: ClusterState, b: ClusterState) -> str:
    return outcome(lambda: b.check_group_writable("app-billing"))


def target_producer(a: ClusterState, b: ClusterState) -> str:
    data = rb.build_batch([rb.RecordSpec(None, b"x", NOW)])
    return outcome(lambda: b.produce("orders-1", 0, data, "", NOW))


REFUSED_TOPIC = "FOLLOWER_TOPIC_NOT_WRITABLE"
READ_ONLY = "REPLICATED_GROUP_READ_ONLY"
TABLE: dict[str, tuple[Callable[[ClusterState, ClusterState], str], list[str]]] = {
    "source consumers": (source_consumer, ["ok"] * 6),
    "source non-transactional producers": (
        source_producer,
        ["ok", "ok", "ok", "ok", "ok, ack waits", "ok"],
    ),
    "source transactional producers": (
        source_txn_commit,
        ["ok", "ok", "ok", "LINK_NOT_IN_SYNC", "ok, commit waits", "LINK_NOT_IN_SYNC"],
    ),
    "target consumers, non-replicated group": (
        target_reader,
        ["ok", "ok", "ok", "FOLLOWER_SYNCING", "ok", "ok"],
    ),
    "target consumers, replicated group (read)": (target_replicated_group_read, ["ok"] * 6),
    "target consumers, replicated group (commit)": (
        target_replicated_group_commit,
        [READ_ONLY] * 6,
    ),
    "target producers to follower topics": (target_producer, [REFUSED_TOPIC] * 6),
}
CELLS = [
    pytest.param(row, state, expected, id=f"{row} | {state}")
    for row, (_call, expected_row) in TABLE.items()
    for state, expected in zip(STATES, expected_row, strict=True)
]


@pytest.mark.parametrize(("row", "state", "expected"), CELLS)
def test_who_may_do_what(row: str, state: str, expected: str) -> None:
    a, b = in_state(state)
    call, _ = TABLE[row]
    assert call(a, b) == expected


def test_refusals_name_the_link_the_namespace_and_the_state() -> None:
    a, b = in_state("SYNCING")
    with pytest.raises(ClusterError) as read:
        b.plan_fetch("orders-1", 0, 0, read_committed=False)
    assert "'ab'" in read.value.message and "SYNCING" in read.value.message
    assert read.value.retriable
    a, b = in_state("OUT_OF_SYNC")
    pid, epoch, _ = a.init_producer_id("tx", 60_000, NOW)
    a.add_partitions_to_txn("tx", pid, epoch, [("orders-1", 0)], NOW)
    with pytest.raises(ClusterError) as commit:
        a.end_txn("tx", pid, epoch, True, NOW)
    message = commit.value.message
    assert "'ab'" in message and "OUT_OF_SYNC" in message and "'orders-1'" in message
    assert commit.value.retriable
    # Refused, the transaction stays open: it may still be aborted.
    assert a.end_txn("tx", pid, epoch, False, NOW) is not None


def committed_over_two_partitions() -> ClusterState:
    """A, IN_SYNC with its follower B, after a transaction over orders-1 and
    orders-2 (a record each, then its marker: both logs end at 2) committed
    and durable, which B acknowledged on neither partition yet."""
    a, b = linked()
    go_sync(a, b, NOW)
    a.create_topic("orders-2", 1, {}, "src-id-2")
    a.refresh_led_partitions(NOW + 2)
    for t in ("orders-1", "orders-2"):
        leo = a.partition(t, 0).log_end_offset
        a.links.on_leader_fetch("ab", t, 0, leo, leo, leo, NOW + 2)
    pid, epoch, _ = a.init_producer_id("tx", 60_000, NOW)
    a.add_partitions_to_txn("tx", pid, epoch, [("orders-1", 0), ("orders-2", 0)], NOW)
    for t in ("orders-1", "orders-2"):
        data = rb.build_batch(
            [rb.RecordSpec(None, b"x", NOW)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            transactional=True,
        )
        a.produce(t, 0, data, "tx", NOW)
    for e in a.end_txn("tx", pid, epoch, True, NOW):
        if isinstance(e, AppendBatch):
            name = "orders-1" if e.topic_id == "src-id" else "orders-2"
            a.mark_durable(name, 0, e.header.next_offset)
    return a


def test_the_markers_of_one_transaction_pass_their_high_watermarks_together() -> None:
    """Invariant 5 at the source: a transaction over two partitions, one of
    which its SYNC follower acknowledged and one not yet: neither partition's
    read_committed readers see the transaction until both can."""
    a = committed_over_two_partitions()
    one, two = a.partition("orders-1", 0), a.partition("orders-2", 0)
    assert (one.last_stable_offset, two.last_stable_offset) == (0, 0)
    # The follower acknowledges orders-1 up to its end: still nothing visible.
    a.links.on_leader_fetch("ab", "orders-1", 0, 2, 2, 0, NOW + 3)
    a.refresh_high_watermarks()
    assert one.high_watermark <= 1 and one.last_stable_offset == 0
    # Then orders-2: both transactions' markers pass at once.
    a.links.on_leader_fetch("ab", "orders-2", 0, 2, 2, 0, NOW + 4)
    assert a.refresh_high_watermarks()
    assert (one.high_watermark, two.high_watermark) == (2, 2)
    assert (one.last_stable_offset, two.last_stable_offset) == (2, 2)
    assert a.marker_groups == []


def test_a_quiet_partition_whose_hw_an_answer_moved_is_in_that_answer() -> None:
    """Invariant 5 on the follower, with fetch sessions: a transaction over
    two partitions whose follower fetched both past their markers, one of
    them (orders-2) in an earlier round, so that this round it is quiet (not
    named, not answered). This round's acknowledgement of orders-1 releases
    both markers at once; the answer must carry both new HWs, since the
    follower applies one answer's HWs together: with orders-2 left out, a
    read_committed reader of the follower saw the transaction on orders-1
    before orders-2 (a partial transaction, as a real-daemon test caught)."""
    a = committed_over_two_partitions()
    # The follower holds orders-2 whole (an earlier round): held by the group.
    a.links.on_leader_fetch("ab", "orders-2", 0, 2, 2, 0, NOW + 3)
    a.refresh_high_watermarks()
    two = a.partition("orders-2", 0)
    assert two.high_watermark <= 1 and two.last_stable_offset == 0

    answer = rounds.serve_replica_fetch(
        a,
        "id-1",
        [rounds.PartitionFetch("orders-1", 0, 2, 0)],
        NOW + 4,
        lambda *_: (b"", 0),
        1 << 20,
        1 << 20,
        rest=rounds.ListedRest(quiet=[rounds.PartitionFetch("orders-2", 0, 2, 0)]),
    )
    assert answer.hw_moved
    hws = {(p.source_topic, p.partition): p.high_watermark for p in answer.partitions}
    assert hws == {("orders-1", 0): 2, ("orders-2", 0): 2}


def test_a_fetch_beyond_the_log_end__is_no_position_and_acknowledges_nothing() -> None:
    """A follower ahead of this side's log (it waits while this side still
    copies the partition from a source of its own) holds none of what this
    side writes later at the offsets it claims: such a fetch is not recorded,
    so a SYNC floor never covers records it has not fetched, and the link
    goes OUT_OF_SYNC if it keeps waiting past the lag time."""
    table = sync_table()
    table.set_mode("ab", "sync", NOW + 1)
    table.register_led_partitions("ab", {("t", 0)}, NOW + 1)
    table.on_leader_fetch("ab", "t", 0, 10, 10, 10, NOW + 2)
    assert table.state_name("ab") == "IN_SYNC" and table.sync_floor("t", 0) == 10
    # It fetches at 40: 30 beyond the end. This side then writes 10..19.
    table.on_leader_fetch("ab", "t", 0, 40, 10, 10, NOW + 3)
    table.on_leader_fetch("ab", "t", 0, 40, 20, 10, NOW + 4)
    assert table.runtime["ab"].partitions[("t", 0, "leader")].log_end_offset == 10
    assert table.sync_floor("t", 0) == 10
    table.tick(NOW + 4 + LAG_MS + 1)
    assert table.state_name("ab") == "OUT_OF_SYNC"
    table.on_leader_fetch("ab", "t", 0, 20, 20, 20, NOW + 2_000)
    assert table.state_name("ab") == "IN_SYNC" and table.sync_floor("t", 0) == 20
