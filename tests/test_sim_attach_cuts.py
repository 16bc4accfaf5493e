"""An attach that would cut the follower's own acknowledged writes, in the
simulator: the scenario `reattach-own-writes` (detach, release, B's clients
write, re-attach refused, recover confirmed), the checker that judges an
unnamed cut (`checkers.check_unnamed_cuts`), and the operator move
`release_reattach` that lets the operator search find it."""

from __future__ import annotations

import random

from sim import checkers
from sim import operator_moves as moves
from sim.history import History, Op, Send
from sim.runner import run_summary, simulate


def test_reattach_over_own_writes__refused__recover_cuts_them__no_violation() -> None:
    summary, trace = simulate("reattach-own-writes", 1, keep_trace=True)
    assert summary["violations"] == []
    metrics = summary["metrics"]
    assert (metrics["actions_failed"], metrics["recoveries"]) == (1, 1)
    assert metrics["records_truncated_by_recovery"] == 5
    [refusal] = [line for line in trace if "action attach refused" in line]
    assert "DIVERGED_LOG" in refusal and "would cut 5 acknowledged records" in refusal
    assert "clients of 'B' wrote" in refusal and "recover --link A-B" in refusal


def test_the_refusal_undone__the_links_cut_is_an_unnamed_cut() -> None:
    summary = run_summary("reattach-own-writes", 1, {"undo_fix": 15})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"unnamed_cut"}
    assert summary["metrics"].get("recoveries", 0) == 0  # nothing left to recover


def _send(value: str, offset: int, complete_ms: int = 10) -> Op:
    return Op("p", "source_producer", "B", "ok", 0, complete_ms, Send("t", 0, value, offset),
              "", False)  # fmt: skip


def test_check_unnamed_cuts__only_the_links_own_cut_after_the_ack_counts() -> None:
    h = History([_send("x", 0), _send("y", 1), _send("z", 2)])
    final = {("B", "t", 0): {0: "x"}}
    by_link = {("B", "t", 0): [checkers.CutEvent(20, 1, True)]}
    found = checkers.check_unnamed_cuts(h, final, by_link)
    assert [v.invariant for v in found] == ["unnamed_cut"] * 2  # y and z
    assert "'y' acknowledged by B" in found[0].detail
    # A command's cut (recover, named by its answer) first: not unnamed.
    named_first = {("B", "t", 0): [checkers.CutEvent(15, 1, False), checkers.CutEvent(20, 1, True)]}
    assert checkers.check_unnamed_cuts(h, final, named_first) == []
    # A cut before the acknowledgement removed something else.
    before = {("B", "t", 0): [checkers.CutEvent(5, 1, True)]}
    assert checkers.check_unnamed_cuts(h, final, before) == []


def test_the_move_is_drawn_on_the_followers_side() -> None:
    view = moves.View(
        clusters=("A", "B"),
        up=frozenset({"A", "B"}),
        links=(
            moves.LinkView("ab", "A", "B", (moves.MappingView("topic", "A-", "r-A-", "local"),)),
        ),
        families=("A-",),
    )
    rng = random.Random(3)
    kind = moves.MoveKind.RELEASE_REATTACH
    drawn = [m for m in moves.draw_moves(rng, view, 300) if m.kind is kind]
    assert drawn
    for m in drawn:
        assert (m.cluster, m.link, m.local_prefix, m.remote_prefix, m.leader) == (
            "B", "ab", "r-A-", "A-", "remote"
        )
        assert 800 <= m.hold_ms < 3_000
        assert "release_reattach on B link ab topic 'r-A-' -> 'A-' after" in m.describe()
