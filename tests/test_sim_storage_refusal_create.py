"""A follower topic its storage refused to create, in the simulator: the
scenario `storage-refusal-create` (B's storage refuses writes while A creates
a topic in the namespace B follows) runs clean, B's link never says
FOLLOWING meanwhile and its failover is refused; with fix 17 undone the
checker of invariant 9 names the missing topic."""

from __future__ import annotations

from sim.runner import run_summary, simulate


def test_the_topic_not_created__holds_the_link_back__and_is_copied_after() -> None:
    summary, trace = simulate("storage-refusal-create", 1, keep_trace=True)
    assert summary["violations"] == []
    metrics = summary["metrics"]
    assert (metrics["actions_ok"], metrics["actions_failed"]) == (1, 1)
    assert metrics["link_state_ms_CATCHING_UP"] >= 15_000
    assert any("A-late: disk refused writes" in line and "create" in line for line in trace)
    [refusal] = [line for line in trace if "action failover refused" in line]
    assert "A-late (not created)" in refusal


def test_the_fix_undone__a_missing_topic_under_following_is_a_status_violation() -> None:
    summary = run_summary("storage-refusal-create", 1, {"undo_fix": 17})
    details = [v["detail"] for v in summary["violations"] if v["invariant"] == "9 status"]
    assert details and "follower topic 'A-late'" in details[0], summary["violations"]
