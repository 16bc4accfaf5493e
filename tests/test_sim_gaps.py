"""Gaps in the simulator: the scenario `retention-outage` (a follower down
longer than its source keeps records, retention on the virtual clock), the
checkers' view of a gap (recorded: reported loss; silent: invariant 10), the
sweep that shows how long an outage each retention setting survives, and
`retention-outage-stop` (gap.policy stop, then resume-partition, through the
daemon's own alter-link and resume-partition procedures)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from linkd.core import replication as rep
from linkd.core.provenance import Gap
from sim import checkers
from sim import scenario as scenarios
from sim.history import History, Op, Send
from sim.runner import run_summary, simulate
from sim.sweep import load_sweep
from sim.world import Simulation

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


def _stopped_and_recorded(
    sim: Simulation,
) -> tuple[dict[tuple[str, int], tuple[int, int]], list[Gap]]:
    """On B: the partitions stopped at a gap (their ranges), and the gaps
    recorded in provenance for the link."""
    state = sim.clusters["B"].state
    runtime = state.links.runtime["A-B"]
    stopped = {k: (g.from_offset, g.to_offset) for k, g in sorted(runtime.gap_stopped.items())}
    link_id = state.links.get("A-B").link_id
    return stopped, rep.gaps_of(state, link_id)


def test_gap_policy_stop__stopped_until_resumed__then_recorded_exactly() -> None:
    """retention-outage-stop: with gap.policy stop (set by alter_link), B's
    partitions stop at their gaps when B is back (12 s), nothing is recorded
    or copied past them until the operator resumes each (15 s); the resume
    records exactly the range it stopped at."""
    spec = scenarios.load("retention-outage-stop")
    sim = Simulation(spec, 1, keep_trace=False)
    sim.setup()
    sim.queue.run_until(14_999)
    stopped, recorded = _stopped_and_recorded(sim)
    assert set(stopped) == {("A-t0", 0), ("A-t0", 1)}
    found_at = {g.at_ms for g in sim.clusters["B"].state.links.runtime["A-B"].gap_stopped.values()}
    assert len(found_at) == 1 and 12_000 < min(found_at) < 13_000  # when B, back, fetched
    assert recorded == []  # nothing recorded, nothing skipped while stopped
    b = sim.clusters["B"].state
    for (topic, p), (start, _end) in stopped.items():
        assert b.partition(topic, p).log_end_offset == start
    sim.queue.run_until(15_001)
    _again, recorded = _stopped_and_recorded(sim)
    assert {(g.topic, g.partition): (g.from_offset, g.to_offset) for g in recorded} == stopped
    # Recorded with the time it was found and its cause, as under continue.
    assert all(g.at_ms in found_at and "retention" in g.reason for g in recorded)


def test_gap_policy_stop__the_story_runs_clean_and_reports_every_gap() -> None:
    summary, trace = simulate("retention-outage-stop", 1, keep_trace=True)
    assert summary["violations"] == []
    # Every gap the follower announced, stopped or skipped, is counted once.
    ranges = set()
    for line in trace:
        if "has a gap: offsets [" in line:
            span = line.split("offsets [", 1)[1].split(")", 1)[0]
            start, end = (int(x) for x in span.split(", "))
            ranges.add((line.split("link 'A-B': ", 1)[1].split(" ", 1)[0], start, end))
    assert summary["metrics"]["gap_records"] == sum(end - start for _t, start, end in ranges)
    assert summary["metrics"]["actions_ok"] == 6


def test_gap_policy_stop__never_resumed__the_partitions_stay_stopped_and_reported() -> None:
    """Without resume-partition the follower's partitions stay where they
    stopped, nothing recorded or copied past the gap, and the link reports
    the refusal to the end (counted in held_links, not passed as
    following). Once the producer is done, A's retention deletes every
    segment, the active one too, as Kafka's does: there is nothing left to
    copy, so the link is judged by what it reports."""
    spec = scenarios.load("retention-outage-stop")
    spec = dataclasses.replace(
        spec, actions=tuple(a for a in spec.actions if a.kind != "resume_partition")
    )
    sim = Simulation(spec, 1, keep_trace=False)
    sim.run()
    assert sim.violations == []
    assert "B/A-B" in sim.held_links
    # Held to the end: counted as held, and no heal ever caught up.
    assert sim.metrics.values["links_held_by_refusals"] == 1
    assert "catchup_ms" not in sim.metrics.values
    stopped, recorded = _stopped_and_recorded(sim)
    assert set(stopped) == {("A-t0", 0), ("A-t0", 1)} and recorded == []
    a, b = sim.clusters["A"].state, sim.clusters["B"].state
    for (topic, p), (start, _end) in stopped.items():
        assert b.partition(topic, p).log_end_offset == start
        assert a.partition(topic, p).log_start_offset == a.partition(topic, p).log_end_offset


def test_gap_policy_parameter__every_link_is_created_with_it() -> None:
    """The gap_policy parameter ([topology] gap_policy) sets the link's
    gap.policy at create-link: retention-outage under stop, with no
    alter_link, stops both partitions at their gaps and records none;
    a value that is not a policy is refused."""
    spec = scenarios.apply_params(scenarios.load("retention-outage"), {"gap_policy": "stop"})
    assert spec.topology.gap_policy == "stop"
    sim = Simulation(spec, 1, keep_trace=False)
    sim.run()
    assert sim.violations == []
    stopped, recorded = _stopped_and_recorded(sim)
    assert set(stopped) == {("A-t0", 0), ("A-t0", 1)} and recorded == []
    assert sim.metrics.values["gap_records"] == 0
    with pytest.raises(scenarios.ScenarioError, match="gap_policy = 'skip' is not one of"):
        scenarios.apply_params(scenarios.load("retention-outage"), {"gap_policy": "skip"})


def test_stopped_partitions__no_catch_up_until_resumed__held_counted_at_the_end_only() -> None:
    """A partition stopped at its gap has not caught up, however settled the
    link counts it: the catch-up after B's restart (10 s) ends only once the
    operator's resume (16.1 s) has let it copy on; and a link held only for a
    while is not counted as held at the end (it follows again by then).
    Seed 3 once caught up 100 ms after the restart, both partitions stopped,
    and counted the link as held at the end."""
    spec = scenarios.apply_params(
        scenarios.load("retention-gap"), {"gap_policy": "stop", "outage_ms": 6000}
    )
    sim = Simulation(spec, 3, keep_trace=False)
    sim.run()
    assert sim.violations == []
    assert sim.metrics.values["gap_records"] > 0  # both partitions stopped, then skipped
    assert sim.metrics.values["catchup_ms"] >= 16_100 - 10_000
    assert sim.metrics.values["links_held_by_refusals"] == 0
    assert sim.held_links == frozenset()
