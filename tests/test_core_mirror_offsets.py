"""Offset syncs, the offset sync store, translation, checkpoints and KIP-545 group sync
(linkd/core/mirror/offset_sync.py, sync_store.py, checkpoint.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.mirror.checkpoint import (
    CheckpointTracker,
    TargetGroup,
    TargetGroupState,
    checkpoints_for_group,
    plan_group_offset_sync,
    remote_consumer_offsets,
    rename_topic_partition,
)
from linkd.core.mirror.filters import PatternList, TopicFilter
from linkd.core.mirror.model import Checkpoint, OffsetAndMetadata, OffsetSync, TopicPartition
from linkd.core.mirror.offset_sync import (
    OffsetSyncWriter,
    PartitionSyncState,
    update_partition_state,
)
from linkd.core.mirror.policy import ReplicationPolicy
from linkd.core.mirror.sync_store import (
    SYNCS_PER_PARTITION,
    OffsetSyncStore,
    translate_with_syncs,
    update_sync_array,
)

DET = settings(derandomize=True, max_examples=200, deadline=None)
TP = TopicPartition("clicks", 0)
POLICY = ReplicationPolicy()


# -- the emission rule ------------------------------------------------------------------------


def test_first_record_of_a_lifetime_is_synced() -> None:
    s = update_partition_state(PartitionSyncState(), 0, 0, 100)
    assert s.should_sync_offsets and s.last_sync_downstream_offset == 0


def test_consecutive_records_are_held_until_the_lag_reaches_offset_lag_max() -> None:
    w = OffsetSyncWriter(offset_lag_max=100)
    assert w.on_record_acknowledged(TP, 0, 0) == [OffsetSync(TP, 0, 0)]
    w.on_sync_completed()
    for u in range(1, 101):
        assert w.on_record_acknowledged(TP, u, u) == [], u
    # 101 - (0 + 1) >= 100: stale enough.
    assert w.on_record_acknowledged(TP, 101, 101) == [OffsetSync(TP, 101, 101)]
    assert w.delayed == {}


def test_an_upstream_gap_forces_a_sync() -> None:
    w = OffsetSyncWriter()
    w.on_record_acknowledged(TP, 0, 0)
    assert w.on_record_acknowledged(TP, 1, 1) == []
    assert w.on_record_acknowledged(TP, 5, 2) == [OffsetSync(TP, 5, 2)]  # 2..4 compacted away


def test_a_downstream_truncation_forces_a_sync() -> None:
    w = OffsetSyncWriter()
    w.on_record_acknowledged(TP, 0, 10)
    assert w.on_record_acknowledged(TP, 1, 11) == []
    assert w.on_record_acknowledged(TP, 2, 3) == [OffsetSync(TP, 2, 3)]


def test_delayed_syncs_flush_on_the_offset_flush_interval() -> None:
    w = OffsetSyncWriter(offset_flush_interval_ms=10_000, now_ms=0)
    w.on_record_acknowledged(TP, 0, 0)
    w.on_sync_completed()
    w.on_record_acknowledged(TP, 1, 1)
    w.on_record_acknowledged(TP, 2, 2)
    assert w.tick(9_999) == []
    assert w.next_deadline_ms() == 10_000
    assert w.tick(10_000) == [OffsetSync(TP, 2, 2)]  # only the newest delayed pair
    assert w.next_deadline_ms() == 20_000
    assert w.tick(15_000) == []


def test_in_flight_syncs_are_bounded_and_released_by_completions() -> None:
    w = OffsetSyncWriter(max_outstanding=2)
    sent = []
    for p in range(4):
        sent += w.on_record_acknowledged(TopicPartition("t", p), 0, 0)
    assert [s.topic_partition.partition for s in sent] == [0, 1]
    assert w.on_sync_completed() == [OffsetSync(TopicPartition("t", 2), 0, 0)]
    assert w.on_sync_completed() == [OffsetSync(TopicPartition("t", 3), 0, 0)]
    w.on_sync_completed()
    w.on_sync_completed()
    with pytest.raises(ValueError, match="without an outstanding"):
        w.on_sync_completed()


def test_a_new_lifetime_syncs_its_first_record_again() -> None:
    w = OffsetSyncWriter()
    w.on_record_acknowledged(TP, 0, 0)
    w.on_record_acknowledged(TP, 1, 1)
    restarted = OffsetSyncWriter()
    assert restarted.on_record_acknowledged(TP, 1, 2) == [OffsetSync(TP, 1, 2)]


@DET
@given(
    gaps=st.lists(st.integers(1, 3), min_size=1, max_size=300),
    lag_max=st.integers(0, 20),
    commit_every=st.integers(1, 50),
)
def test_writer_keeps_every_partition_within_offset_lag_max_and_flushes_the_newest_pair(
    gaps: list[int], lag_max: int, commit_every: int
) -> None:
    w = OffsetSyncWriter(offset_lag_max=lag_max, max_outstanding=3)
    sent: list[OffsetSync] = []
    upstream = -1
    for i, gap in enumerate(gaps):
        upstream += gap
        sent += w.on_record_acknowledged(TP, upstream, i)
        state = w.partition_states[TP]
        assert i - state.last_sync_downstream_offset <= lag_max
        while w.outstanding:
            sent += w.on_sync_completed()
        if i % commit_every == 0:
            sent += w.on_commit()
    sent += w.on_commit()
    while w.outstanding:
        sent += w.on_sync_completed()
    # Every sync is a true pair, in order; after a flush the newest pair was sent.
    truth = {}
    upstream = -1
    for i, gap in enumerate(gaps):
        upstream += gap
        truth[upstream] = i
    assert all(truth[s.upstream_offset] == s.downstream_offset for s in sent)
    assert [s.upstream_offset for s in sent] == sorted(s.upstream_offset for s in sent)
    assert sent[-1] == OffsetSync(TP, upstream, len(gaps) - 1)


TP2 = TopicPartition("clicks", 1)


@DET
@given(
    runs=st.lists(
        st.tuples(
            st.sampled_from([TP, TP2]),
            st.lists(st.tuples(st.integers(-1, 3), st.integers(-2, 3)), min_size=0, max_size=60),
            st.integers(0, 4),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    ),
    lag_max=st.integers(0, 12),
)
def test_a_run_of_acknowledgements_decides_as_the_records_one_by_one(
    runs: list[tuple[TopicPartition, list[tuple[int, int]], int, bool]], lag_max: int
) -> None:
    one = OffsetSyncWriter(offset_lag_max=lag_max, max_outstanding=3)
    many = OffsetSyncWriter(offset_lag_max=lag_max, max_outstanding=3)
    sent_one: list[OffsetSync] = []
    sent_many: list[OffsetSync] = []
    position = {TP: (-1, -1), TP2: (-1, -1)}
    for tp, steps, completions, commit in runs:
        ups: list[int] = []
        downs: list[int] = []
        up, down = position[tp]
        for up_step, down_step in steps:  # gaps, repeats, rewinds and truncations
            up, down = max(up + up_step, 0), max(down + down_step, 0)
            ups.append(up)
            downs.append(down)
        position[tp] = (up, down)
        for u, d in zip(ups, downs, strict=True):
            sent_one += one.on_record_acknowledged(tp, u, d)
        sent_many += many.on_records_acknowledged(tp, ups, downs)
        for _ in range(min(completions, one.outstanding)):
            sent_one += one.on_sync_completed()
            sent_many += many.on_sync_completed()
        if commit:
            sent_one += one.on_commit()
            sent_many += many.on_commit()
        assert sent_many == sent_one
        assert many.partition_states == one.partition_states
        assert list(many.delayed.items()) == list(one.delayed.items())
        assert list(many.pending.items()) == list(one.pending.items())
        assert many.outstanding == one.outstanding


def test_a_run_needs_a_downstream_offset_per_record() -> None:
    with pytest.raises(ValueError, match="one downstream offset per upstream offset"):
        OffsetSyncWriter().on_records_acknowledged(TP, [1, 2], [1])


# -- the store --------------------------------------------------------------------------------


def store_with(*pairs: tuple[int, int]) -> OffsetSyncStore:
    store = OffsetSyncStore()
    store.mark_read_to_end()
    for u, d in pairs:
        store.handle_sync(OffsetSync(TP, u, d))
    return store


def test_translation_is_refused_before_the_sync_topic_was_read_to_the_end() -> None:
    store = OffsetSyncStore()
    store.handle_sync(OffsetSync(TP, 100, 200))
    assert store.translate_downstream(TP, 150) is None
    store.mark_read_to_end()
    assert store.translate_downstream(TP, 150) == 201
    assert store.translate_downstream(TopicPartition("other", 0), 1) is None


def test_translation_uses_the_newest_sync_at_or_below_the_group_offset() -> None:
    store = store_with((100, 200), (200, 300))
    assert store.translate_downstream(TP, 99) == -1  # older than every sync kept
    assert store.translate_downstream(TP, 100) == 200  # exact
    assert store.translate_downstream(TP, 150) == 201  # one past the sync, never more
    assert store.translate_downstream(TP, 200) == 300
    assert store.translate_downstream(TP, 10_000) == 301


def test_an_upstream_rewind_clears_the_store() -> None:
    store = store_with((100, 200), (200, 300), (50, 400))
    syncs = store.syncs(TP)
    assert syncs is not None and {s.upstream_offset for s in syncs} == {50}
    assert store.translate_downstream(TP, 150) == 401


def test_the_initial_load_keeps_only_the_last_sync_unless_told_otherwise() -> None:
    strict = OffsetSyncStore()
    relaxed = OffsetSyncStore(must_read_to_end=False)
    for store in (strict, relaxed):
        store.handle_syncs(
            [OffsetSync(TP, 0, 0), OffsetSync(TP, 100, 100), OffsetSync(TP, 200, 200)]
        )
        store.mark_read_to_end()
    assert strict.translate_downstream(TP, 150) == -1
    assert relaxed.translate_downstream(TP, 150) == 101


def test_the_first_sync_fills_every_slot() -> None:
    first = OffsetSync(TP, 5, 7)
    assert update_sync_array(None, first, read_to_end=True) == (first,) * SYNCS_PER_PARTITION


def test_the_store_matches_kafkas_exponential_spacing() -> None:
    # Kafka's OffsetSyncStoreTest.testConsistentlySpacedSyncs, in spirit: after syncs every
    # 1..N, the kept upstream offsets are spaced by growing powers of two back from the newest.
    store = store_with(*[(u, u) for u in range(0, 1001)])
    syncs = store.syncs(TP)
    assert syncs is not None
    # Slot j lies at most 2^j - 1 behind the newest sync (invariant B with i = 0) ...
    for j, sync in enumerate(syncs[:63]):
        assert 1000 - sync.upstream_offset <= 2**j - 1, j
    # ... and distinct slots are spread out, so a handful of syncs covers the whole range.
    distinct = sorted({s.upstream_offset for s in syncs}, reverse=True)
    assert distinct[0] == 1000 and distinct[-1] == 0
    assert 10 <= len(distinct) <= 40


def check_invariants(syncs: tuple[OffsetSync, ...], latest: OffsetSync) -> None:
    assert syncs[0] is latest, "A: syncs[0] is the latest sync"
    for i in range(SYNCS_PER_PARTITION):
        for j in range(i + 1, SYNCS_PER_PARTITION):
            a, b = syncs[i], syncs[j]
            assert b.upstream_offset <= a.upstream_offset, "older slots hold older syncs"
            if a is b:
                continue
            if j < 63:
                assert a.upstream_offset <= b.upstream_offset + 2**j - 2**i, f"B at {i},{j}"
            assert a.upstream_offset >= b.upstream_offset + 2 ** max(i - 2, 0), f"C at {i},{j}"


@settings(derandomize=True, max_examples=60, deadline=None)
@given(steps=st.lists(st.integers(1, 200), min_size=1, max_size=80))
def test_store_invariants_hold_after_every_sync(steps: list[int]) -> None:
    syncs: tuple[OffsetSync, ...] | None = None
    upstream = 0
    for step in steps:
        upstream += step
        sync = OffsetSync(TP, upstream, upstream * 2)
        syncs = update_sync_array(syncs, sync, read_to_end=True)
        check_invariants(syncs, sync)


@DET
@given(
    data=st.data(),
    length=st.integers(1, 400),
    lag_max=st.integers(0, 30),
    restarts=st.lists(st.integers(0, 100), max_size=3),
)
def test_translation_never_skips_a_record_and_is_monotonic(
    data: st.DataObject, length: int, lag_max: int, restarts: list[int]
) -> None:
    """Mirror an upstream log with gaps through writer restarts; translate every group offset.

    No skip (Jepsen's "skip" anomaly): a consumer of the target starting at the translated
    offset must still find a copy of every upstream record at or after the group's offset.
    """
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=length, max_size=length))
    upstream_log = []
    u = data.draw(st.integers(0, 5))
    for g in gaps:
        upstream_log.append(u)
        u += g
    read_to_end_after = data.draw(st.integers(0, length))
    commit_every = data.draw(st.integers(1, 60))
    # Each lifetime replicates from a resume index to the end or to the next restart point.
    cuts = sorted({min(r, length - 1) for r in restarts})
    lifetimes: list[tuple[int, int]] = []
    start = 0
    for cut in cuts:
        stop = max(cut, start)
        lifetimes.append((start, stop))
        start = data.draw(st.integers(0, stop))  # resume at or before where it stopped
    lifetimes.append((start, length))
    pairs: list[tuple[int, int]] = []  # (upstream, downstream) in replication order
    store = OffsetSyncStore()
    syncs_read = 0
    for first, last in lifetimes:
        writer = OffsetSyncWriter(offset_lag_max=lag_max)
        for idx in range(first, last):
            pair = (upstream_log[idx], len(pairs))
            pairs.append(pair)
            emitted = writer.on_record_acknowledged(TP, *pair)
            if idx % commit_every == 0:
                emitted += writer.on_commit()
            for s in emitted:
                writer.on_sync_completed()
                store.handle_sync(s)
                syncs_read += 1
                if syncs_read == read_to_end_after:
                    store.mark_read_to_end()
        for s in writer.on_commit():
            store.handle_sync(s)
    store.mark_read_to_end()
    leo = len(pairs)
    last_copy: dict[int, int] = {}
    for up, down in pairs:
        last_copy[up] = down
    # bound[g] = min over upstream records u >= g of the downstream offset of u's last copy.
    top = upstream_log[-1] + 3
    bound_at = [leo] * (top + 1)
    for g in range(top - 1, -1, -1):
        bound_at[g] = min(bound_at[g + 1], last_copy.get(g, leo))
    previous = -1
    for group_offset in range(0, top):
        t = store.translate_downstream(TP, group_offset)
        assert t is not None
        if t < 0:
            continue
        bound = bound_at[group_offset]
        assert t <= bound, f"skip: group at {group_offset} translated to {t}, record at {bound}"
        assert t >= previous, "translation is monotonic for a fixed store"
        previous = t


@DET
@given(
    upstream=st.lists(st.integers(0, 10_000), min_size=1, max_size=60, unique=True),
    probes=st.lists(st.integers(0, 10_100), min_size=2, max_size=20),
)
def test_translation_of_a_fixed_store_is_monotonic(upstream: list[int], probes: list[int]) -> None:
    syncs: tuple[OffsetSync, ...] | None = None
    for i, u in enumerate(sorted(upstream)):
        syncs = update_sync_array(syncs, OffsetSync(TP, u, i), read_to_end=True)
    assert syncs is not None
    results = [translate_with_syncs(syncs, p) for p in sorted(probes)]
    valid = [r for r in results if r >= 0]
    assert valid == sorted(valid)


def test_huge_offsets_follow_javas_64_bit_arithmetic() -> None:
    big = 2**62
    syncs = None
    for k in range(5):
        syncs = update_sync_array(syncs, OffsetSync(TP, big + k * 1000, k), read_to_end=True)
    assert syncs is not None
    assert translate_with_syncs(syncs, big + 4000) == 4
    assert translate_with_syncs(syncs, big + 2500) == 3


# -- checkpoints ------------------------------------------------------------------------------


def test_checkpoint_partitions_are_renamed_for_the_target() -> None:
    assert rename_topic_partition(
        TP, source_alias="A", target_alias="B", policy=POLICY
    ) == TopicPartition("A.clicks", 0)
    # A topic that came from B goes home under its original name.
    assert rename_topic_partition(
        TopicPartition("B.clicks", 3), source_alias="A", target_alias="B", policy=POLICY
    ) == TopicPartition("clicks", 3)


def checkpoints(
    store: OffsetSyncStore,
    offsets: dict[TopicPartition, int],
    tracker: CheckpointTracker,
    group: str = "g",
) -> dict[TopicPartition, Checkpoint]:
    upstream = {tp: OffsetAndMetadata(o, "m") for tp, o in offsets.items()}
    new = checkpoints_for_group(
        group,
        upstream,
        store,
        tracker.get(group),
        source_alias="A",
        target_alias="B",
        policy=POLICY,
        topic_filter=TopicFilter(),
    )
    tracker.update(group, new)
    return new


def test_checkpoints_are_emitted_first_on_rewind_and_on_downstream_advance_only() -> None:
    store = store_with((0, 0), (100, 150))
    tracker = CheckpointTracker()
    remote = TopicPartition("A.clicks", 0)
    assert checkpoints(store, {TP: 120}, tracker) == {
        remote: Checkpoint("g", remote, 120, 151, "m")
    }
    assert checkpoints(store, {TP: 130}, tracker) == {}  # same downstream: repeat suppressed
    store.handle_sync(OffsetSync(TP, 130, 180))
    assert checkpoints(store, {TP: 130}, tracker)[remote].downstream_offset == 180
    # The group rewound on the source: emitted although the downstream goes back.
    assert checkpoints(store, {TP: 50}, tracker)[remote].downstream_offset == 1


def test_no_checkpoint_without_translation_or_for_filtered_topics() -> None:
    store = store_with((100, 150))
    tracker = CheckpointTracker()
    other = TopicPartition("unsynced", 0)
    internal = TopicPartition("x.internal", 0)
    assert checkpoints(store, {TP: 50, other: 3, internal: 1}, tracker) == {}  # 50 is too old


def test_remote_consumer_offsets_take_the_last_checkpoint() -> None:
    remote = TopicPartition("A.clicks", 0)
    records = [
        Checkpoint("g", remote, 10, 11),
        Checkpoint("h", remote, 5, 6),
        Checkpoint("g", remote, 20, 21),
    ]
    assert remote_consumer_offsets(records, "g") == {remote: OffsetAndMetadata(21)}


def test_tracker_reloads_checkpoints_after_a_restart() -> None:
    remote = TopicPartition("A.clicks", 0)
    tracker = CheckpointTracker()
    tracker.load(
        [
            Checkpoint("g", remote, 10, 11),
            Checkpoint("g", remote, 20, 21),
            Checkpoint("x", remote, 1, 1),
        ],
        groups=["g"],
    )
    assert tracker.converted_upstream_offsets() == {"g": {remote: OffsetAndMetadata(21)}}


# -- KIP-545 group offset sync ----------------------------------------------------------------

R0 = TopicPartition("A.clicks", 0)
R1 = TopicPartition("A.clicks", 1)


def test_group_sync_writes_new_groups_and_skips_active_ones() -> None:
    converted = {"new": {R0: OffsetAndMetadata(5)}, "busy": {R0: OffsetAndMetadata(9)}}
    plan = plan_group_offset_sync(converted, {"busy": TargetGroup(TargetGroupState.ACTIVE, {})})
    assert plan.writes == {"new": {R0: OffsetAndMetadata(5)}}
    assert plan.skipped_active_groups == ("busy",)


def test_group_sync_never_moves_a_target_offset_backwards() -> None:
    converted = {"g": {R0: OffsetAndMetadata(5), R1: OffsetAndMetadata(50)}}
    target = {
        "g": TargetGroup(
            TargetGroupState.EMPTY, {R0: OffsetAndMetadata(7), R1: OffsetAndMetadata(40)}
        )
    }
    plan = plan_group_offset_sync(converted, target)
    assert plan.writes == {"g": {R1: OffsetAndMetadata(50)}}
    assert plan.refused_rewinds == (("g", R0, 7, 5),)


@DET
@given(
    translated=st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=4),
    existing=st.dictionaries(st.integers(0, 3), st.integers(0, 100), max_size=4),
    state=st.sampled_from(list(TargetGroupState)),
)
def test_group_sync_only_moves_inactive_offsets_forward(
    translated: dict[int, int], existing: dict[int, int], state: TargetGroupState
) -> None:
    converted = {"g": {TopicPartition("t", p): OffsetAndMetadata(o) for p, o in translated.items()}}
    current = {TopicPartition("t", p): OffsetAndMetadata(o) for p, o in existing.items()}
    if state is TargetGroupState.DEAD:
        current = {}
    plan = plan_group_offset_sync(converted, {"g": TargetGroup(state, current)})
    writes = plan.writes.get("g", {})
    if state is TargetGroupState.ACTIVE:
        assert writes == {}
    for tp, om in writes.items():
        assert tp not in current or current[tp].offset < om.offset
    for tp, om in converted["g"].items():
        if state is not TargetGroupState.ACTIVE and (
            tp not in current or current[tp].offset < om.offset
        ):
            assert writes[tp] == om


def test_include_filter_limits_checkpoints() -> None:
    store = store_with((0, 0))
    only_orders = TopicFilter(PatternList.parse("orders"), PatternList.parse(""))
    new = checkpoints_for_group(
        "g",
        {TP: OffsetAndMetadata(0)},
        store,
        None,
        source_alias="A",
        target_alias="B",
        policy=POLICY,
        topic_filter=only_orders,
    )
    assert new == {}
