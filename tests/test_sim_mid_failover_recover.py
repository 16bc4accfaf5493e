"""A failover or a confirmed recovery cut short by a crash of either side,
in the simulator (issue 35: procedures that survive a crash).

Both journal a durable plan (linkd/core/plans.py) and name a checkpoint
after each step (`failover:verify-link-state`, `failover:make-writable`,
`failover:tell-remote`; `recover:plan-recovery`, `recover:reserve-and-cut`,
`recover:follow-remote#<i>` after each mapping, `recover:follow-remote`).
The scenario action `crash_at` crashes either cluster there; the liveness
phase runs the procedure once more wherever a plan is still journalled
(failover as forced as the first run, recover confirmed); then the check
"one writer at rest" demands: a failover's namespaces writable somewhere,
a recovery's never left reserved and following nothing. Undoing the
recovery's plan past its cut (undo fix 26) must make that check fail."""

from __future__ import annotations

import tomllib

import pytest

from linkd.core import link_admin
from sim import checkers
from sim import scenario as sc
from sim.operator_moves import failover_points, recover_points
from sim.world import Simulation

HEAD = """
name = "story"
[run]
duration_ms = 14000
liveness_ms = 30000
undo_fix = {undo}
[topology]
kind = "hub"
clusters = ["A", "B"]
[namespace]
topics = 2
partitions = 2
groups = false
"""

FAILOVER = HEAD + """
[[actions]]
at_ms = 4900
kind = "crash_at"
cluster = "{target}"
point = "{point}"
down_ms = 1500

[[actions]]
at_ms = 5000
kind = "failover"
cluster = "B"
link = "A-B"
force = true
"""

# B fails over while A lives (two writers, the documented split), then A
# recovers: it follows B again.
RECOVER = HEAD + """
[[actions]]
at_ms = 3000
kind = "failover"
cluster = "B"
link = "A-B"
force = true

[[actions]]
at_ms = 4900
kind = "crash_at"
cluster = "{target}"
point = "{point}"
down_ms = 1500

[[actions]]
at_ms = 5000
kind = "recover"
cluster = "A"
link = "A-B"
"""


def run(story: str, point: str, target: str, undo: int = 0) -> Simulation:
    text = story.format(point=point, target=target, undo=undo)
    sim = Simulation(sc.parse(tomllib.loads(text)), 1, keep_trace=True)
    sim.run()
    return sim


def one_writer(sim: Simulation) -> list[checkers.Violation]:
    return [v for v in sim.violations if v.invariant == "one writer at rest"]


@pytest.mark.parametrize("target", ["", "A"])
@pytest.mark.parametrize("point", failover_points())
def test_failover__crash_of_either_side_at_each_checkpoint__writable_on_b(
    point: str, target: str
) -> None:
    sim = run(FAILOVER, point, target)
    assert sim.metrics.values.get("mid_procedure_crashes", 0) == 1, sim.queue.trace[-20:]
    assert sim.violations == [], sim.violations
    moved = list(sim.moved.values())
    assert moved and all(m.procedure == "failover" for m in moved)
    a, b = sim.clusters["A"].state, sim.clusters["B"].state
    assert not a.plans.plans and not b.plans.plans
    for m in moved:
        assert checkers.writable(b, m.kind, m.prefix)
    if target == "" and point != "failover:tell-remote":
        # B crashed with its plan journalled: the liveness phase re-ran it.
        assert any("failover takes up its journalled plan" in t for t in sim.queue.trace)


def test_failover__a_rerun_after_the_change_answers_what_the_first_run_did() -> None:
    sim = run(FAILOVER, "failover:make-writable", "")
    reruns = [r for c, _id, at, r in sim.failovers if c == "B" and at >= 14_000]
    assert len(reruns) == 1, sim.failovers
    result = reruns[0]
    assert isinstance(result, link_admin.Failover)
    assert result.resumed_from == "tell-remote"
    assert result.namespaces == [("topic", "A-")]
    assert len(result.partitions) == 4  # the rows the first run made writable
    names = [s.name for s in result.steps]
    assert names == ["verify-link-state", "make-writable", "tell-remote"]
    assert result.steps[1].result.startswith("(before the re-run) made 1 namespaces writable")
    assert not result.steps[2].result.startswith("(before the re-run)")


@pytest.mark.parametrize("target", ["", "B"])
@pytest.mark.parametrize("point", recover_points(1))
def test_recover__crash_of_either_side_at_each_checkpoint__a_follows_b(
    point: str, target: str
) -> None:
    sim = run(RECOVER, point, target)
    assert sim.metrics.values.get("mid_procedure_crashes", 0) == 1, sim.queue.trace[-20:]
    assert sim.violations == [], sim.violations
    moved = list(sim.moved.values())
    assert moved and all(m.procedure == "recover" for m in moved)
    a, b = sim.clusters["A"].state, sim.clusters["B"].state
    assert not a.plans.plans and not b.plans.plans
    for m in moved:
        assert not checkers.writable(a, m.kind, m.prefix)
        assert checkers.writable(b, m.kind, m.peer_prefix)


def test_recover__without_its_plan_past_the_cut__a_crash_leaves_a_namespace_following_nothing(
) -> None:
    point = "recover:reserve-and-cut"
    assert one_writer(run(RECOVER, point, "")) == []
    found = one_writer(run(RECOVER, point, "", undo=26))
    assert found and "reserved on A and following no link" in found[0].detail, found
