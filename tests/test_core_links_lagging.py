"""The link table's inlined lag judgement (`LinkTable._lagging_ones`, which
the state and `explained` use) against the per-partition rules it inlines:
`PartitionProgress.lag_records` / `lag_ms` for a follower partition,
`LinkTable._leader_lagging` for a led one. Same partitions, any values."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.links import LinkLimits, LinkTable, PartitionProgress

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
positions = st.dictionaries(
    st.tuples(st.sampled_from(["t0", "t1"]), st.integers(min_value=0, max_value=3)),
    st.tuples(offsets, offsets),
)


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
    led: dict[tuple[str, int], tuple[int, int]],
    has_led_position: bool,
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
    if has_led_position:
        table.led_position = lambda topic, partition: led.get((topic, partition))
    expected = [p for p in parts if reference(table, p, now_ms)]
    assert list(table._lagging_ones(parts, now_ms)) == expected
    assert table._any_lagging(parts, now_ms) == bool(expected)
