"""Long polls and call deadlines: a replica fetch the source holds for data
must never outlive the call that carries it.

The catch-up storm scenario once asked its source to hold fetches 60 s while
every link call timed out after 10 s: each fetch was declared lost while the
source still held it, the follower heard only lost contact, its link never
followed, and the run was pinned that way. The rules now live in the core
(`link_rounds.fetch_deadline_ms`, `served_wait_ms`, `fetch_silence_ms`) and
both shells use them; a scenario asking for a longer wait than a source
holds is refused by name.
"""

from __future__ import annotations

import pytest

from linkd.core import link_rounds as rounds
from linkd.core.links import DEFAULT_FETCH_SILENCE_MS
from sim import scenario as scenarios
from sim.runner import simulate


def test_a_fetch_deadline_covers_the_wait_it_asks_for() -> None:
    for wait in (0, 500, 5_000, 30_000):
        assert rounds.fetch_deadline_ms(wait) == wait + rounds.CALL_TIMEOUT_MS
    # A source holds a fetch at most LONGEST_FETCH_WAIT_MS, whatever it asks.
    assert rounds.served_wait_ms(120_000) == rounds.LONGEST_FETCH_WAIT_MS
    assert rounds.served_wait_ms(-5) == 0
    assert rounds.fetch_deadline_ms(120_000) == (
        rounds.LONGEST_FETCH_WAIT_MS + rounds.CALL_TIMEOUT_MS
    )


def test_fetch_silence_outlasts_the_long_poll() -> None:
    # The daemon's 500 ms long polls keep the default bound.
    assert rounds.fetch_silence_ms(500) == DEFAULT_FETCH_SILENCE_MS
    for wait in (0, 500, 5_000, 30_000):
        assert rounds.fetch_silence_ms(wait) > rounds.served_wait_ms(wait)


def test_a_scenario_asking_for_a_longer_wait_than_a_source_holds_is_refused() -> None:
    spec = scenarios.load("catch-up-storm")
    with pytest.raises(scenarios.ScenarioError, match="fetch_max_wait_ms = 60000 must be at most"):
        scenarios.apply_params(spec, {"fetch_max_wait_ms": 60_000})
    data = {"name": "x", "run": {"fetch_max_wait_ms": 45_000}}
    with pytest.raises(scenarios.ScenarioError, match=r"\[run\]: fetch_max_wait_ms = 45000"):
        scenarios.parse(data)


@pytest.mark.parametrize("wait_ms", [20_000, 30_000])
def test_an_idle_link_with_long_polls_follows_and_never_times_out(wait_ms: int) -> None:
    """A small storm (20 partitions, a 10-minute outage) with long polls of
    20 and 30 s: no fetch call times out while the link is up, the link is
    FOLLOWING whenever it is not cut off, and catch-up is measured once."""
    params = {
        "partitions": 20,
        "outage_ms": 600_000,
        "duration_ms": 1_800_000,
        "fetch_max_wait_ms": wait_ms,
    }
    summary, trace = simulate("catch-up-storm", 1, params, keep_trace=True)
    assert summary["violations"] == []
    metrics = summary["metrics"]
    assert metrics["catchups"] == 1
    assert metrics["link_state_ms_CATCHING_UP"] == 0
    assert metrics["link_state_ms_FOLLOWING"] > 0
    # The split runs from 10 min to 20 min: outside it, no fetch times out.
    timeouts = [
        int(line.split()[0]) for line in trace if line.endswith("link A-B fetch timeout")
    ]
    assert all(600_000 <= t <= 1_200_000 + rounds.fetch_deadline_ms(wait_ms) for t in timeouts)
