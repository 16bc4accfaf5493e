"""Topic creation, config and ACL sync, exactly-once restarts and metrics
(linkd/core/mirror/topic_sync.py, exactly_once.py, metrics.py)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.acls import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from linkd.core.mirror.exactly_once import (
    CommittedMirrorState,
    MirroredRecord,
    apply_transaction_outcome,
    restart_from_committed,
    transaction_for_batch,
    transaction_offsets,
    transactional_id,
)
from linkd.core.mirror.filters import ConfigPropertyFilter, TopicFilter
from linkd.core.mirror.metrics import CheckpointMetricKey, MirrorMetrics, SourceMetricKey, Stat
from linkd.core.mirror.model import TopicPartition
from linkd.core.mirror.policy import ReplicationPolicy
from linkd.core.mirror.topic_sync import (
    ConfigEntry,
    ConfigSource,
    NewRemoteTopic,
    plan_acl_sync,
    plan_remote_topics,
    remote_topic_configs,
    target_config_sync,
)

DET = settings(derandomize=True, max_examples=200, deadline=None)
POLICY = ReplicationPolicy()
TP = TopicPartition("orders", 0)


# -- topics -----------------------------------------------------------------------------------


def test_remote_topics_are_created_and_grown_never_shrunk() -> None:
    plan = plan_remote_topics(
        {
            "orders": 3,
            "clicks": 2,
            "audit": 1,
            "__consumer_offsets": 50,
            "B.orders": 3,
            "heartbeats": 1,
        },
        {"A.clicks": 1, "A.audit": 4},
        source_alias="A",
        target_alias="B",
        policy=POLICY,
        topic_filter=TopicFilter(),
        replication_factor=3,
    )
    assert plan.create == (
        NewRemoteTopic("A.heartbeats", "heartbeats", 1, 3),
        NewRemoteTopic("A.orders", "orders", 3, 3),
    )
    assert plan.grow == (("A.clicks", 2),)
    assert plan.more_partitions_on_target == (("A.audit", 4, 1),)


# -- configs ----------------------------------------------------------------------------------


def test_config_sync_drops_local_readonly_sensitive_and_static_entries() -> None:
    entries = [
        ConfigEntry("retention.ms", "1000"),
        ConfigEntry("cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
        ConfigEntry("min.insync.replicas", "2"),
        ConfigEntry("segment.bytes", "1", read_only=True),
        ConfigEntry("sasl.jaas.config", "x", sensitive=True),
        ConfigEntry("max.message.bytes", "5", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigEntry("compression.type", "lz4", ConfigSource.DYNAMIC_BROKER_CONFIG),
    ]
    plan = target_config_sync(entries, ConfigPropertyFilter())
    assert dict(plan.set) == {"compression.type": "lz4", "retention.ms": "1000"}
    assert plan.delete == ("cleanup.policy",)
    from_source = target_config_sync(entries, ConfigPropertyFilter(), use_defaults_from_source=True)
    assert dict(from_source.set)["cleanup.policy"] == "delete"
    assert from_source.delete == ()


def test_a_remote_topic_is_created_with_what_config_sync_would_set() -> None:
    entries = [
        ConfigEntry("retention.ms", "-1"),
        ConfigEntry("cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
        ConfigEntry("min.insync.replicas", "2"),
        ConfigEntry("segment.bytes", "1", read_only=True),
        ConfigEntry("max.message.bytes", "5", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigEntry("compression.type", "lz4", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ConfigEntry("message.downconversion.enable", None),
    ]
    # A source default is left to the target's own default, unless use.defaults.from=source.
    assert remote_topic_configs(entries, ConfigPropertyFilter()) == {
        "compression.type": "lz4", "retention.ms": "-1"}
    assert remote_topic_configs(
        entries, ConfigPropertyFilter(), use_defaults_from_source=True
    ) == {"cleanup.policy": "delete", "compression.type": "lz4", "retention.ms": "-1"}


# -- ACLs -------------------------------------------------------------------------------------


def acl(
    name: str,
    op: AclOperation,
    perm: PermissionType = PermissionType.ALLOW,
    pattern: PatternType = PatternType.LITERAL,
    rtype: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(int(rtype), name, int(pattern), "User:alice", "*", int(op), int(perm))


def test_acl_sync_copies_literal_topic_reads_and_narrows_all() -> None:
    source = [
        acl("orders", AclOperation.READ),
        acl("orders", AclOperation.WRITE),  # dropped: only MM2 writes remote topics
        acl("orders", AclOperation.ALL),  # becomes READ
        acl("orders", AclOperation.WRITE, PermissionType.DENY),  # kept
        acl("ord", AclOperation.READ, pattern=PatternType.PREFIXED),  # literal only
        acl("g", AclOperation.READ, rtype=ResourceType.GROUP),  # topics only
        acl("x.internal", AclOperation.READ),  # not a mirrored topic
        acl("B.orders", AclOperation.READ),  # a cycle back to B
    ]
    existing = [acl("A.orders", AclOperation.DESCRIBE)]
    created = plan_acl_sync(
        source,
        existing,
        source_alias="A",
        target_alias="B",
        policy=POLICY,
        topic_filter=TopicFilter(),
    )
    assert created == tuple(
        sorted(
            [
                acl("A.orders", AclOperation.READ),
                acl("A.orders", AclOperation.WRITE, PermissionType.DENY),
            ]
        )
    )


@DET
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(list(AclOperation)[2:]),
            st.sampled_from([PermissionType.ALLOW, PermissionType.DENY]),
        ),
        max_size=10,
    )
)
def test_acl_sync_never_grants_write_and_is_add_only(
    ops: list[tuple[AclOperation, PermissionType]],
) -> None:
    source = [acl("orders", op, perm) for op, perm in ops]
    first = plan_acl_sync(
        source, [], source_alias="A", target_alias="B", policy=POLICY, topic_filter=TopicFilter()
    )
    for b in first:
        assert b.resource_name == "A.orders"
        assert not (
            b.permission_type == PermissionType.ALLOW
            and b.operation in (AclOperation.WRITE, AclOperation.ALL)
        )
    again = plan_acl_sync(
        source, first, source_alias="A", target_alias="B", policy=POLICY, topic_filter=TopicFilter()
    )
    assert again == ()


# -- exactly-once -----------------------------------------------------------------------------


def rec(u: int, tp: TopicPartition = TP) -> MirroredRecord:
    return MirroredRecord(tp, u, f"A.{tp.topic}", b"k", b"v", 0)


def test_a_transaction_carries_records_and_the_last_upstream_offsets() -> None:
    other = TopicPartition("orders", 1)
    txn = transaction_for_batch(
        transactional_id("A-mm2", "MirrorSourceConnector", 0), "A", [rec(5), rec(3, other), rec(6)]
    )
    assert txn.transactional_id == "A-mm2-MirrorSourceConnector-0"
    assert [(o.cluster, o.topic, o.partition, o.offset) for o in txn.source_offsets] == [
        ("A", "orders", 0, 6),
        ("A", "orders", 1, 3),
    ]
    assert rec(5).target_partition == TopicPartition("A.orders", 0)


def test_transaction_offsets_take_the_last_offset_of_each_partition_and_refuse_disorder() -> None:
    other = TopicPartition("orders", 1)
    offsets = transaction_offsets("A", {other: [3], TP: [5, 6], TopicPartition("x", 0): []})
    txn = transaction_for_batch("t", "A", [rec(5), rec(3, other), rec(6)])
    assert offsets == txn.source_offsets
    with pytest.raises(ValueError, match="must increase within a batch: 5 after 6"):
        transaction_offsets("A", {TP: [6, 5]})
    with pytest.raises(ValueError, match="must increase within a batch: 5 after 6"):
        transaction_for_batch("t", "A", [rec(6), rec(5)])


def test_an_aborted_transaction_leaves_no_trace_and_restart_resumes_after_the_commit() -> None:
    state = CommittedMirrorState()
    state = apply_transaction_outcome(
        state, transaction_for_batch("t", "A", [rec(0), rec(1)]), committed=True
    )
    state = apply_transaction_outcome(
        state, transaction_for_batch("t", "A", [rec(2), rec(3)]), committed=False
    )
    plan = restart_from_committed([TP], state)
    assert plan.positions[TP].next_upstream_offset == 2
    assert plan.duplicates() == 0 and plan.lost() == 0


def test_restart_without_committed_offsets_starts_at_the_earliest() -> None:
    plan = restart_from_committed([TP], CommittedMirrorState(), {TP: 40})
    assert plan.positions[TP].next_upstream_offset is None
    assert plan.lost() == 0


def test_at_least_once_restart_counts_duplicates_and_retention_loss() -> None:
    # Records 0..9 visible, offsets flushed only up to 4: 5..9 will be written again.
    state = CommittedMirrorState({TP: 4}, {TP: tuple(range(10))})
    plan = restart_from_committed([TP], state)
    assert plan.positions[TP].duplicated_upstream_offsets == (5, 6, 7, 8, 9)
    # Retention deleted 5..6 on the source before the restart: reported as lost.
    lossy = restart_from_committed(
        [TP], CommittedMirrorState({TP: 4}, {TP: (0, 1, 2, 3, 4)}), {TP: 7}
    )
    assert list(lossy.positions[TP].lost_upstream_offsets) == [5, 6]


@DET
@given(batches=st.lists(st.tuples(st.integers(1, 5), st.booleans()), max_size=20))
def test_exactly_once_restart_neither_loses_nor_duplicates(batches: list[tuple[int, bool]]) -> None:
    """Mirror batches that commit or abort, restarting after each; the target ends as the source."""
    state = CommittedMirrorState()
    for size, commit in batches:
        plan = restart_from_committed([TP], state)
        pos = plan.positions[TP]
        assert plan.duplicates() == 0 and plan.lost() == 0
        start = 0 if pos.next_upstream_offset is None else pos.next_upstream_offset
        txn = transaction_for_batch("t", "A", [rec(u) for u in range(start, start + size)])
        state = apply_transaction_outcome(state, txn, commit)
    visible = state.visible_upstream_offsets.get(TP, ())
    assert visible == tuple(range(len(visible)))  # no gap, no duplicate


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_use_mm2_names_and_values() -> None:
    m = MirrorMetrics()
    key = SourceMetricKey("B", "A.orders", 0)
    m.record_polled(key, now_ms=1_000, record_timestamp_ms=900, value_bytes=100)
    m.record_polled(key, now_ms=2_000, record_timestamp_ms=1_700, value_bytes=300)
    m.record_acknowledged(key, now_ms=1_050, record_timestamp_ms=900)
    m.record_acknowledged(key, now_ms=2_250, record_timestamp_ms=1_700)
    ck = CheckpointMetricKey("A", "B", "g", "A.orders", 0)
    m.checkpoint_acknowledged(ck, now_ms=10, checkpoint_timestamp_ms=4)
    snap = m.snapshot(now_ms=3_000)
    s = snap[key]
    assert s["record-count"] == 2 and s["byte-count"] == 400
    assert s["byte-rate"] == 200.0  # 400 bytes over 2 s
    assert s["record-rate"] == 2 / 1.95  # 2 records acknowledged since 1.05 s
    assert (
        s["record-age-ms"],
        s["record-age-ms-min"],
        s["record-age-ms-max"],
        s["record-age-ms-avg"],
    ) == (300, 100, 300, 200)
    assert (
        s["replication-latency-ms-min"],
        s["replication-latency-ms-max"],
        s["replication-latency-ms-avg"],
    ) == (150, 550, 350)
    assert snap[ck] == {
        "checkpoint-latency-ms": 6,
        "checkpoint-latency-ms-min": 6,
        "checkpoint-latency-ms-max": 6,
        "checkpoint-latency-ms-avg": 6,
    }


def test_metrics_of_a_partition_without_acknowledgements_are_nan() -> None:
    m = MirrorMetrics()
    key = SourceMetricKey("B", "A.orders", 0)
    m.record_polled(key, now_ms=5, record_timestamp_ms=5, value_bytes=0)
    assert math.isnan(m.snapshot(5)[key]["replication-latency-ms-avg"])


def test_metrics_of_a_batch_equal_the_records_one_by_one() -> None:
    rng = random.Random(18)
    one, many = MirrorMetrics(), MirrorMetrics()
    key = SourceMetricKey("B", "A.orders", 1)
    now = 1_000
    for _ in range(50):
        now += rng.randrange(0, 40)
        stamps = [now - rng.randrange(-5, 500) for _ in range(rng.randrange(0, 30))]
        sizes = [rng.randrange(0, 2_000) for _ in stamps]
        for ts, size in zip(stamps, sizes, strict=True):
            one.record_polled(key, now, ts, size)
        many.records_polled(key, now, stamps, sum(sizes))
        for ts in stamps:
            one.record_acknowledged(key, now + 7, ts)
        many.records_acknowledged(key, now + 7, stamps)
        assert str(many.snapshot(now + 9)) == str(one.snapshot(now + 9))


def test_ages_from_timestamps_equal_value_by_value() -> None:
    """Stat.record_ages (sum/min/max) gives the Stat of record_many, bit for bit: epoch
    milliseconds, large runs, a float total before, and totals past 2**53 (where the
    value-by-value sum rounds, and record_ages takes that path)."""
    rng = random.Random(32)
    for case in range(60):
        now = 1_796_000_000_000 + rng.randrange(10**6)
        before = Stat()
        if case % 3 == 1:
            before = Stat().record_many([0.5, 12.25])
        if case % 10 == 9:
            before = Stat().record_many([2**53 - 7])
        stamps = [now - rng.randrange(-50, 5_000) for _ in range(rng.randrange(0, 20_000))]
        fast = before.record_ages(now, stamps)
        slow = before.record_many(now - ts for ts in stamps)
        assert repr(fast) == repr(slow), case
