"""A follower topic its storage refused to create, in the simulator: the
scenario `storage-refusal-create` (B's storage refuses writes while A creates
a topic in the namespace B follows) runs clean, B's link never says
FOLLOWING meanwhile and its failover is refused; with fix 17 undone the
checker of invariant 9 names the missing topic."""

from __future__ import annotations

from pathlib import Path

from sim.runner import run_summary, simulate

SCENARIOS = Path(__file__).resolve().parent.parent / "sim" / "scenarios"


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


FORCED_FAILOVER = """
[[actions]]
at_ms = 12000
kind = "failover"
cluster = "B"
link = "A-B"
force = true
"""


def test_a_forced_failover_names_the_topic_not_created__or_its_records_are_a_silent_loss(
    tmp_path: Path,
) -> None:
    # The same story, but B's operator forces the failover while A-late is
    # still missing on B: the answer names its partitions ("never learned"),
    # and with fix 17 undone it says nothing of them and invariant 10 judges
    # every record A acknowledged there before it.
    shipped = SCENARIOS / "storage-refusal-create.toml"
    variant = tmp_path / "storage-refusal-forced.toml"
    variant.write_text(shipped.read_text() + FORCED_FAILOVER)
    summary = run_summary(str(variant), 1)
    assert summary["violations"] == []
    assert summary["metrics"]["failover_abandoned_partitions"] == 3
    undone = run_summary(str(variant), 1, {"undo_fix": 17})
    lost = [v["detail"] for v in undone["violations"] if v["invariant"] == "10 silent loss"]
    assert lost and "never reached B:A-late" in lost[0], undone["violations"]
