"""The operator search's `close_ring` moves (sim/operator_moves.py): along a
chain of follow relations, the attach that would close it into a ring, the
link it needs first, or the next link of the chain."""

from __future__ import annotations

import random

from sim.operator_moves import LinkView, MappingView, MoveKind, View, _close_ring
from sim.runner import run_summary

CHAIN = (
    LinkView("A-B", "A", "B", (MappingView("topic", "A-", "A-", "local"),)),
    LinkView("B-C", "B", "C", (MappingView("topic", "A-", "A-", "local"),)),
)
UP = ("A", "B", "C")


def test_a_chain_of_two_with_a_link_back__draws_the_attach_that_closes_the_ring() -> None:
    view = View(UP, frozenset(UP), (*CHAIN, LinkView("ca", "C", "A")))
    moves = {(m.cluster, m.local_prefix, m.remote_prefix, m.leader)
             for m in (_close_ring(random.Random(s), view, UP) for s in range(20))
             if m is not None}  # fmt: skip
    # C leads its copy to A, or A follows it from C: either end of link ca.
    assert moves == {("C", "A-", "A-", "local"), ("A", "A-", "A-", "remote")}


def test_without_the_link_back__the_link_is_created_first() -> None:
    view = View(UP, frozenset(UP), CHAIN)
    move = _close_ring(random.Random(1), view, UP)
    assert move is not None and move.kind is MoveKind.CREATE_LINK
    assert (move.cluster, move.peer) == ("C", "A")


def test_a_chain_of_one__grows_to_a_cluster_not_in_it() -> None:
    view = View(UP, frozenset(UP), (CHAIN[0], LinkView("bc", "B", "C")))
    move = _close_ring(random.Random(3), view, UP)
    assert move is not None and move.kind is MoveKind.ATTACH and move.link == "bc"
    assert (move.cluster, move.leader) in {("B", "local"), ("C", "remote")}


def test_follow_ring_scenario__clean__and_fix_12_undone_closes_the_ring() -> None:
    # The scenario docs/simulator.md names for fix 12: C leads A's copy back
    # to A. It once passed with the fix undone because the attach was refused
    # for cutting A's own writes instead; A now writes before and after it.
    assert run_summary("follow-ring", 1)["violations"] == []
    undone = run_summary("follow-ring", 1, {"undo_fix": 12})
    assert {v["invariant"] for v in undone["violations"]} == {"13 follow cycle"}
