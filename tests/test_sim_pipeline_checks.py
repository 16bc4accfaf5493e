"""The checkers of issue 35's N3 and N4 (false_divergence,
position_misreported): each names its planted anomaly, stays quiet on a
clean history, and finds its fix undone in a shipped scenario."""

from __future__ import annotations

from linkd.core import records as rb
from sim import checkers
from sim.history import History, Op, Send
from sim.runner import run_summary
from sim.store import StoredBatch


def _acked(value: str, offset: int, cluster: str) -> Op:
    return Op("p", "source_producer", cluster, "ok", 0, 1, Send("t", 0, value, offset))


def _cut(base: int, *values: str) -> list[StoredBatch]:
    data = rb.build_batch([rb.RecordSpec(None, v.encode(), 0) for v in values], base_offset=base)
    return [StoredBatch(base, base + len(values), data, len(data))]


def test_false_divergence__a_cut_of_what_the_source_acknowledged_there() -> None:
    history = History([_acked("x", 4, "A"), _acked("y", 5, "A")])
    found = checkers.check_false_divergence("B", "t", 0, _cut(4, "x", "y"), history, {}, 100)
    assert [v.invariant for v in found] == ["false_divergence", "false_divergence"]
    assert "'x' at offset 4, which A acknowledged" in found[0].detail


def test_false_divergence__quiet_where_a_history_parted_or_the_records_are_its_own() -> None:
    history = History([_acked("x", 4, "A"), _acked("y", 5, "B"), _acked("z", 9, "A")])
    # A cut its own partition at 4 (an unclean election): B's cut follows it.
    parted = {("A", "t", 0): [4]}
    assert checkers.check_false_divergence("B", "t", 0, _cut(4, "x"), history, parted, 1) == []
    # B's own write, and a record A acknowledged at another offset.
    assert checkers.check_false_divergence("B", "t", 0, _cut(5, "y", "z"), history, {}, 1) == []


def _kinds(scenario: str, params: dict[str, object]) -> set[str]:
    return {v["invariant"] for v in run_summary(scenario, 1, params)["violations"]}


def test_undo_20__compacted_freeze_finds_a_clean_taken_for_a_divergence() -> None:
    assert _kinds("compacted-freeze", {"duration_ms": 25_000}) == set()
    assert "false_divergence" in _kinds(
        "compacted-freeze", {"duration_ms": 25_000, "undo_fix": 20}
    )


def test_undo_19__sync_failover_finds_the_log_end_reported_as_the_position() -> None:
    assert "position_misreported" in _kinds("sync-failover", {"undo_fix": 19})
