"""Credential rotation on a busy link, in the operator search: the move
`rotate_credential` is drawn only where clusters require link credentials
(the draws of other runs are unchanged), a rotation ends the remote's busy
sessions at their next call and the new credential restores them, and with
fix 16 undone (a busy session keeps working on a revoked credential) the
simulator reports `link_credentials_revoked`."""

from __future__ import annotations

import random

from sim import operator_moves as moves
from sim.runner import run_summary, simulate

CREDENTIALS = {"clusters": 3, "link_sessions": True, "link_credentials": "s3cret"}
# A seed whose run draws a rotation on a busy link (3, 5-8, 10 and 11 of 1-11
# do, since the search crashes failovers and recoveries mid-procedure too).
SEED = 3


def _view(credentials: bool) -> moves.View:
    return moves.View(
        clusters=("A", "B"),
        up=frozenset({"A", "B"}),
        links=(moves.LinkView("ab", "A", "B", (moves.MappingView("topic", "A-", "A-", "local"),)),),
        topics={"A": (("A-t0", 2),), "B": (("A-t0", 2),)},
        families=("A-",),
        credentials=credentials,
    )


def test_the_move_is_drawn_only_where_credentials_are_in_use() -> None:
    without = [moves.draw_move(random.Random(s), _view(False)) for s in range(300)]
    assert not any(m is not None and m.kind is moves.MoveKind.ROTATE_CREDENTIAL for m in without)
    drawn = [moves.draw_move(random.Random(s), _view(True)) for s in range(300)]
    rotations = [m for m in drawn if m is not None and m.kind is moves.MoveKind.ROTATE_CREDENTIAL]
    assert rotations, "never drawn"
    for m in rotations:
        assert m.link == "ab" and {m.cluster, m.peer} == {"A", "B"}
        assert 1_000 <= m.hold_ms < 6_000
        assert "revoking" in m.describe()
    # Without credentials, every draw is the one it was before the kind existed.
    weights = dict(moves.WEIGHTS)
    del moves.WEIGHTS[moves.MoveKind.ROTATE_CREDENTIAL]
    try:
        before = [moves.draw_move(random.Random(s), _view(False)) for s in range(300)]
    finally:
        moves.WEIGHTS.clear()
        moves.WEIGHTS.update(weights)
    assert before == without


def test_a_rotation_revokes_the_busy_session__and_the_new_credential_restores_it() -> None:
    summary, trace = simulate("operator-mix", SEED, CREDENTIALS, keep_trace=True)
    assert summary["violations"] == []
    assert any("link credential replaced" in line for line in trace)
    assert any("revoked: the sessions of cluster" in line for line in trace)
    assert any("credentials changed by the operator" in line for line in trace)


def test_the_revocation_undone__a_call_served_on_it_is_a_violation() -> None:
    summary = run_summary("operator-mix", SEED, {**CREDENTIALS, "undo_fix": 16})
    found = {v["invariant"] for v in summary["violations"]}
    assert "link_credentials_revoked" in found, summary["violations"]
