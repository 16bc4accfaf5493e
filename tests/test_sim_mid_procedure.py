"""A reversal cut short by a crash of either side, in the simulator.

The scenario action `crash_at` arms a crash at a named checkpoint of a
procedure (linkd/core/requests.py `Checkpoint`: after each journalled step,
and after each namespace of the detach and attach steps). The liveness
phase runs `reverse` once more on every cluster that still holds a plan,
then the check "one writer at rest" (sim/checkers.py) demands each moved
namespace writable on exactly one cluster. Undoing the plan's resume
(undo fix 24) must make that check fail."""

from __future__ import annotations

import tomllib

import pytest

from sim import checkers
from sim import operator_moves as moves
from sim import scenario as sc
from sim.operator_moves import reverse_points
from sim.world import Simulation

STORY = """
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
groups = {groups}

[[actions]]
at_ms = 4900
kind = "crash_at"
cluster = "{target}"
point = "{point}"
down_ms = 1500

[[actions]]
at_ms = 5000
kind = "reverse"
cluster = "A"
link = "A-B"
"""


def run(point: str, target: str, undo: int = 0, groups: bool = False) -> Simulation:
    """One reversal of the topic namespace (and, with groups, of the group
    namespace too: two namespaces, so a crash can fall between them)."""
    text = STORY.format(point=point, target=target, undo=undo, groups=str(groups).lower())
    sim = Simulation(sc.parse(tomllib.loads(text)), 1)
    sim.run()
    return sim


def one_writer(sim: Simulation) -> list[checkers.Violation]:
    return [v for v in sim.violations if v.invariant == "one writer at rest"]


@pytest.mark.parametrize("target", ["", "B"])
@pytest.mark.parametrize("point", reverse_points(1))
def test_reverse__crash_of_either_side_at_each_checkpoint__finished_with_one_writer(
    point: str, target: str
) -> None:
    finished_with_one_writer(run(point, target), target)


@pytest.mark.parametrize("target", ["", "B"])
@pytest.mark.parametrize("point", reverse_points(2))
def test_reverse_of_two_namespaces__crash_of_either_side_at_each_checkpoint__one_writer(
    point: str, target: str
) -> None:
    # A topic and a group namespace: "#1" falls after the first namespace of
    # a step and before the second (the real-daemon cases of
    # tests/test_reverse_crash_e2e.py move the same two).
    sim = run(point, target, groups=True)
    assert {m.kind for m in sim.moved.values()} == {"topic", "group"}
    finished_with_one_writer(sim, target)


def finished_with_one_writer(sim: Simulation, target: str) -> None:
    assert sim.metrics.values.get("mid_procedure_crashes", 0) == 1, sim.queue.trace[-20:]
    assert sim.violations == [], sim.violations
    assert sim.moved, "the reversal's plan names what it moves"
    a, b = sim.clusters["A"].state, sim.clusters["B"].state
    assert not a.plans.plans and not b.plans.plans
    for m in sim.moved.values():
        # Finished, B writes; rolled back (B was down during the wait), A does.
        on_a = checkers.writable(a, m.kind, m.prefix)
        on_b = checkers.writable(b, m.kind, m.peer_prefix)
        assert on_a is not on_b
        if target == "":
            assert on_b  # the cluster that crashed resumes its plan and finishes it


def test_reverse__without_the_plan_resume__a_crash_mid_detach_leaves_no_writer() -> None:
    found = [
        point
        for point in reverse_points(1)
        if one_writer(run(point, "", undo=24))
    ]
    # Cut short after the detach, a re-run that plans anew finds nothing to
    # reverse (this side leads no namespace): nobody can write.
    assert "reverse:detach-mappings" in found, found


def test_reverse__without_the_roll_back__a_remote_lost_during_the_wait_leaves_no_writer() -> None:
    point, target = "reverse:reserve-leader-namespaces", "B"
    assert one_writer(run(point, target)) == []
    # Undone: A stays reserved after the wait failed, and B still follows.
    assert one_writer(run(point, target, undo=25))


RESERVED_FIRST = """
[[actions]]
at_ms = 4000
kind = "set_reserved"
cluster = "A"
prefixes = [["A-", "A-"]]
reserved = true
"""


def test_reverse__rolled_back__a_namespace_reserved_before_stays_reserved() -> None:
    # The operator reserved A's namespace, then B is lost during the wait:
    # the roll-back clears nothing (it reserved nothing), so nobody writes,
    # as before the reversal; the check expects what the reversal found.
    text = STORY.format(
        point="reverse:reserve-leader-namespaces", target="B", undo=0, groups="false"
    )
    sim = Simulation(sc.parse(tomllib.loads(text + RESERVED_FIRST)), 1)
    sim.run()
    assert sim.metrics.values.get("mid_procedure_crashes", 0) == 1, sim.queue.trace[-20:]
    assert sim.violations == [], sim.violations
    a, b = sim.clusters["A"].state, sim.clusters["B"].state
    assert not a.plans.plans
    moved = list(sim.moved.values())
    assert moved and all(m.rolled_back and m.found == 0 for m in moved), moved
    for m in moved:
        assert not checkers.writable(a, m.kind, m.prefix)
        assert not checkers.writable(b, m.kind, m.peer_prefix)


def test_release_reattach__the_namespace_is_no_longer_judged() -> None:
    # A release-reattach is a detach, a set-reserved off and an attach on the
    # follower: like each of them, it takes the namespace out of the check
    # (its attach may be refused, leaving the follower writable on purpose).
    sim = run("reverse:promote-remote-namespaces", "")
    assert any((m.cluster, m.prefix) == ("A", "A-") for m in sim.moved.values()), sim.moved
    sim.do_move(moves.Move(moves.MoveKind.RELEASE_REATTACH, "A", "A-B", local_prefix="A-",
                           remote_prefix="A-", hold_ms=1000))
    assert not any(m.kind == "topic" for m in sim.moved.values()), sim.moved
