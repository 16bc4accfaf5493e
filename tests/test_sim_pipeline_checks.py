"""The checkers of issue 35's N3 and N4 (false_divergence,
position_misreported): each names its planted anomaly, stays quiet on a
clean history, and finds its fix undone in a shipped scenario."""

from __future__ import annotations

from linkd.core import records as rb
from sim import checkers
from sim.history import History, Op, Send
from sim.runner import run_summary
from sim.store import PartitionStore, StoredBatch


def _acked(value: str, offset: int, cluster: str) -> Op:
    return Op("p", "source_producer", cluster, "ok", 0, 1, Send("t", 0, value, offset))


def _cut(base: int, *values: str) -> list[StoredBatch]:
    data = rb.build_batch([rb.RecordSpec(None, v.encode(), 0) for v in values], base_offset=base)
    return [StoredBatch(base, base + len(values), data, len(data))]


def _source(*batches: list[StoredBatch]) -> PartitionStore:
    store = PartitionStore()
    for b in batches:
        store.append(b[0])
    return store


def test_false_divergence__a_cut_of_what_the_source_holds_there() -> None:
    history = History([_acked("x", 4, "A"), _acked("y", 5, "A")])
    source = _source(_cut(0, "a", "b", "c", "d"), _cut(4, "x", "y"))
    found = checkers.check_false_divergence(
        "B", "t", 0, _cut(4, "x", "y"), "A", source, False, history, {}, 100
    )
    assert [v.invariant for v in found] == ["false_divergence", "false_divergence"]
    assert "'x' at offset 4, which its source holds" in found[0].detail


def test_false_divergence__a_cut_of_what_a_compacted_source_cleaned_away() -> None:
    history = History([_acked("x", 4, "A"), _acked("y", 5, "A")])
    # The source's cleaner removed the batch at 4-5; it holds 6 on.
    source = _source(_cut(0, "a", "b", "c", "d"), _cut(6, "z"))
    cleaned = checkers.check_false_divergence(
        "B", "t", 0, _cut(4, "x", "y"), "A", source, True, history, {}, 100
    )
    assert [v.invariant for v in cleaned] == ["false_divergence", "false_divergence"]
    # Not compacted, or cut there by the source itself: a true parting.
    assert checkers.check_false_divergence(
        "B", "t", 0, _cut(4, "x", "y"), "A", source, False, history, {}, 100
    ) == []
    assert checkers.check_false_divergence(
        "B", "t", 0, _cut(4, "x", "y"), "A", source, True, history, {("A", "t", 0): [4]}, 100
    ) == []


def test_false_divergence__quiet_where_the_source_holds_other_records_or_never_had_them() -> None:
    history = History([_acked("x", 4, "A"), _acked("y", 5, "A")])
    rewritten = _source(_cut(0, "a", "b", "c", "d"), _cut(4, "other"))
    assert checkers.check_false_divergence(
        "B", "t", 0, _cut(4, "x"), "A", rewritten, True, history, {}, 1
    ) == []
    # A promoted cluster that never had them (the DR story): C cuts them.
    shorter = _source(_cut(0, "a", "b", "c", "d"))
    assert checkers.check_false_divergence(
        "C", "t", 0, _cut(4, "x", "y"), "B", shorter, False, history, {}, 1
    ) == []


def _kinds(scenario: str, params: dict[str, object]) -> set[str]:
    return {v["invariant"] for v in run_summary(scenario, 1, params)["violations"]}


def test_undo_20__compacted_freeze_finds_a_clean_taken_for_a_divergence() -> None:
    assert _kinds("compacted-freeze", {"duration_ms": 25_000}) == set()
    assert "false_divergence" in _kinds(
        "compacted-freeze", {"duration_ms": 25_000, "undo_fix": 20}
    )


def test_undo_19__sync_failover_finds_the_log_end_reported_as_the_position() -> None:
    assert "position_misreported" in _kinds("sync-failover", {"undo_fix": 19})
