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

from linkd.core import plans
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


def _plan(remote: str, *prefixes: tuple[str, str, str]) -> plans.Plan:
    return plans.Plan(
        plans.REVERSE, "A-B", "id", remote,
        tuple(plans.PlanNamespace(kind, local, other) for kind, local, other in prefixes),
        0, 0,
    )


def _watch(cluster: str, peer: str, kind: str) -> checkers.MovedNamespace:
    return checkers.MovedNamespace("A-B", cluster, peer, kind, "A-", "A-")


def test_release_reattach_under_way__a_reversal_begun_meanwhile_leaves_the_check() -> None:
    # Operator sweep seeds 370 (2 clusters) and 286 (3): a reversal began while
    # a release-reattach held the follower detached, so it found two writers;
    # the move's attach ended that. The move takes the namespace out of the
    # check when it ends too, not only when it starts.
    sim = run("reverse:promote-remote-namespaces", "")
    sim.moved.clear()
    sim.do_move(moves.Move(moves.MoveKind.RELEASE_REATTACH, "A", "A-B", local_prefix="A-",
                           remote_prefix="A-", hold_ms=1000))
    # A reversal's watch taken during the hold (what `_watch_moved` records).
    sim.moved[("topic", (("A", "A-"), ("B", "A-")))] = checkers.MovedNamespace(
        "A-B", "B", "A", "topic", "A-", "A-", found=2, rolled_back=True
    )
    sim.queue.run_until(sim.queue.now_ms + 5_000)
    assert not sim.moved, sim.moved


def test_a_plan_the_peer_still_holds__a_reversal_from_this_side_does_not_watch_it() -> None:
    # Seed 328 (4 clusters): A's reversal was cut short (its plan kept, A
    # following B); B's reversal of the same link then rolled back, having
    # found nobody writing; the liveness phase finished A's plan: one writer.
    sim = run("reverse:promote-remote-namespaces", "")
    sim.moved.clear()
    sim.clusters["A"].state.plans.put(_plan("B", ("topic", "A-", "A-")))
    sim.clusters["B"].state.plans.put(_plan("A", ("topic", "A-", "A-"), ("group", "A-", "A-")))
    sim._watch_moved("B", "A-B")
    assert {m.kind for m in sim.moved.values()} == {"group"}, sim.moved


@pytest.mark.parametrize(
    ("touched", "judged"), [("A-t1n0", False), ("A", False), ("B-t", True)]
)
def test_a_verb_overlapping_a_journalled_plan__every_namespace_of_it_leaves_the_check(
    touched: str, judged: bool
) -> None:
    # Seeds 304 and 349 (4 clusters): after a reversal was cut short, the
    # operator attached an overlapping namespace to another link (or let
    # clients write where the plan would follow); the re-run is refused for
    # that, naming the remedy, and the plan's other namespaces stay put.
    sim = run("reverse:promote-remote-namespaces", "")
    sim.moved.clear()
    sim.clusters["A"].state.plans.put(_plan("B", ("topic", "A-", "A-"), ("group", "A-", "A-")))
    for kind in ("topic", "group"):
        sim.moved[(kind, (("A", "A-"), ("B", "A-")))] = _watch("A", "B", kind)
    sim.touched("A", prefix=touched)
    assert bool(sim.moved) is judged, sim.moved
    # The peer's side of the plan counts as well.
    sim.touched("B", prefix="A-x")
    assert not sim.moved, sim.moved
