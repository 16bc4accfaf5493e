"""The simulator finds each fix of the groups-and-pending issue undone
(linkd/core/faults.py 21, 22), and the same runs are clean with the fixes."""

from __future__ import annotations

from sim.runner import run_summary


def test_groups_catch_up__clean__the_failover_reports_the_group_behind() -> None:
    summary = run_summary("groups-catch-up", 1, {})
    assert summary["violations"] == []
    assert summary["metrics"]["failover_groups_behind"] > 0


def test_groups_catch_up__fix_21_undone__the_unreported_re_read_is_a_violation() -> None:
    summary = run_summary("groups-catch-up", 1, {"undo_fix": 21})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"10 groups"}
    assert all("says nothing of it" in v["detail"] for v in summary["violations"])


def test_operator_mix__fix_22_undone__a_done_answer_the_remote_lacks_is_a_violation() -> None:
    # Seed 2: the operator search's draws moved when it began crashing
    # failovers and recoveries mid-procedure; seed 1 no longer attaches
    # while the remote is away (seeds 2, 4, 5 and 8 of 1-8 find it now).
    params = {"clusters": 2}
    assert run_summary("operator-mix", 2, params)["violations"] == []
    summary = run_summary("operator-mix", 2, {**params, "undo_fix": 22})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"12 admin effects"}
