"""The link table's inlined lag judgement (`LinkTable._lagging_ones`, which
the state and `explained` use) against the per-partition rules it inlines:
`PartitionProgress.lag_records` / `lag_ms` for a follower partition,
`LinkTable._leader_lagging` for a led one. Same partitions, any values; the
inlined judgement reads the led logs a topic at a time."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.links import LinkLimits, LinkRuntime, LinkTable, PartitionProgress

offsets = st.integers(min_value=0, max_value=50)
times = st.integers(min_value=0, max_value=200)

progress = st.builds(
    PartitionProgress,
    topic=st.sampled_from(["t0", "t1"]),
    partition=st.integers(min_value=0, max_value=3),
    role=st.sampled_from(["follower", "leader"]),
    log_end_offset=offsets,
    source_high_watermark=offsets,
    caught_up_at_ms=times,
    last_fetch_ms=times,
    hw_caught_up_ms=times,
    fetches=st.integers(min_value=0, max_value=2),
    caught_up_at_fetch=st.booleans(),
)
# A topic's partitions 0..n-1 as (log start, high watermark); a topic not
# in the dictionary, or a partition past its list, is gone.
positions = st.dictionaries(
    st.sampled_from(["t0", "t1"]),
    st.lists(st.tuples(offsets, offsets), max_size=4),
)


@dataclass(frozen=True)
class Bounds:
    log_start_offset: int
    high_watermark: int


def reference(table: LinkTable, p: PartitionProgress, now_ms: int) -> bool:
    if p.role == "follower":
        return (
            p.lag_records() > table.limits.lag_max_records
            or p.lag_ms(now_ms) > table.limits.lag_max_ms
        )
    return table._leader_lagging(p, now_ms)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(progress, max_size=6),
    positions,
    st.booleans(),
    st.integers(min_value=-1, max_value=10),
    st.integers(min_value=-1, max_value=60),
    st.integers(min_value=0, max_value=60),
    times,
)
def test_inlined_lag_judgement_matches_the_per_partition_rules(
    parts: list[PartitionProgress],
    led: dict[str, list[tuple[int, int]]],
    has_led_logs: bool,
    lag_max_records: int,
    lag_max_ms: int,
    fetch_silence_ms: int,
    now_ms: int,
) -> None:
    table = LinkTable(
        "A",
        LinkLimits(
            lag_max_records=lag_max_records,
            lag_max_ms=lag_max_ms,
            fetch_silence_ms=fetch_silence_ms,
        ),
    )
    if has_led_logs:
        table.led_logs = lambda topic: (
            [Bounds(*b) for b in led[topic]] if topic in led else None
        )
    expected = [p for p in parts if reference(table, p, now_ms)]
    assert list(table._lagging_ones(parts, now_ms)) == expected
    assert table._any_lagging(parts, now_ms) == bool(expected)


def test_led_logs_read_a_topic_at_a_time() -> None:
    """A led partition 8 records behind, silent since it was registered,
    keeps the link from FOLLOWING; one of a topic that is gone does not."""
    table = LinkTable("A", LinkLimits(lag_max_records=0, fetch_silence_ms=5))
    logs = {"t0": [Bounds(0, 0), Bounds(2, 10)]}
    table.led_logs = lambda topic: logs.get(topic)
    behind = PartitionProgress("t0", 1, "leader", log_end_offset=0, last_fetch_ms=0)
    gone = PartitionProgress("t1", 0, "leader", log_end_offset=0, last_fetch_ms=0)
    level = PartitionProgress("t0", 0, "leader", log_end_offset=0, last_fetch_ms=0)
    assert list(table._lagging_ones([level, gone, behind], 100)) == [behind]
    assert table.leader_lag(behind) == 8
    assert table.leader_lag(gone) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(progress, max_size=5), min_size=1, max_size=4),
    st.integers(min_value=0, max_value=5),
    times,
)
def test_the_runtime_judgement_with_its_hint_is_the_plain_one(
    rounds: list[list[PartitionProgress]], lag_max_records: int, now_ms: int
) -> None:
    """`_runtime_lagging` judges the partition found last time first: over
    rounds whose partitions come and go and change, its answer is always
    `_any_lagging`'s over the same partitions."""
    table = LinkTable("A", LinkLimits(lag_max_records=lag_max_records, fetch_silence_ms=10))
    runtime = LinkRuntime()
    for parts in rounds:
        runtime.rows = {(p.topic, p.partition, p.role): p for p in parts}
        runtime.lag_verdict = None  # rows changed behind the table's back
        expected = table._any_lagging(runtime.partitions.values(), now_ms)
        assert table._runtime_lagging(runtime, now_ms) == expected
