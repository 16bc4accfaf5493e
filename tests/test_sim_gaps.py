"""Gaps in the simulator: the scenario `retention-outage` (a follower down
longer than its source keeps records, retention on the virtual clock), the
checkers' view of a gap (recorded: reported loss; silent: invariant 10), and
the sweep that shows how long an outage each retention setting survives."""

from __future__ import annotations

from pathlib import Path

from sim import checkers
from sim.history import History, Op, Send
from sim.runner import run_summary
from sim.sweep import load_sweep

ROOT = Path(__file__).resolve().parent.parent


def test_an_outage_outlasting_retention__the_gap_is_recorded__no_violation() -> None:
    summary = run_summary("retention-outage", 1)
    assert summary["violations"] == []
    assert summary["metrics"]["gap_records"] > 0


def test_an_outage_retention_outlasts__nothing_is_missing() -> None:
    summary = run_summary("retention-outage", 1, {"outage_ms": 1000})
    assert summary["violations"] == []
    assert summary["metrics"]["gap_records"] == 0


def test_a_silent_jump__the_gap_not_recorded__is_caught_as_silent_loss() -> None:
    summary = run_summary("retention-outage", 1, {"undo_fix": 8})
    assert summary["metrics"]["gap_records"] == 0
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"10 silent loss"}


def test_lost_write__excused_by_the_clusters_own_retention() -> None:
    h = History([
        Op("p", "source_producer", "A", "ok", 0, 1, Send("t", 0, value, offset), "", False)
        for offset, value in enumerate("xyz")
    ])
    final = {("A", "t", 0): {2: "z"}}
    assert len(checkers.check_lost_writes(h, final, {})) == 2  # x and y
    assert checkers.check_lost_writes(h, final, {}, {("A", "t", 0): [(0, 2)]}) == []
    assert len(checkers.check_lost_writes(h, final, {}, {("A", "t", 0): [(0, 1)]})) == 1


def test_the_sweep_crosses_retention_with_outage_length() -> None:
    spec = load_sweep(ROOT / "sim" / "sweeps" / "retention-outage.toml")
    assert spec.scenarios == ("retention-outage",)
    assert dict(spec.params).keys() == {"outage_ms", "retention_ms"}
