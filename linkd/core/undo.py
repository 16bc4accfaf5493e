"""Test-only switches that undo, one at a time, the fixes of the
operator-stories issue, so the simulator's operator search can show how soon
it finds each (docs/simulator.md: `ccr-sim sweep sim/sweeps/undo-fixes.toml`).

A run sets them through its parameter `undo_fix` (sim.runner); nothing else
does, and a daemon never reads them. With no switch set (always, outside
such a run) every check below is False and the core behaves as documented.

1. one link carries namespaces both ways (pull and push both run)
2. a mapping a remote's merge cannot honour is detached with a note, not
   the whole handshake refused
3. setting a reservation aborts the namespace's open transactions
4. failover needs force unless FOLLOWING or IN_SYNC; a lost link's lag is unknown
5. overlapping mappings of one link are refused
6. set-mode SYNC needs the link FOLLOWING
7. recovery takes an empty shared prefix (offset 0) as shared history

and of the gaps issue:

8. a gap a follower skips (its source's log start passed it) is recorded in
   its provenance (undone: the follower jumps silently)

and of the issue of silent losses (findings 2 and 3):

12. follow relations that would close a ring of any length are refused
    (`lineage`; undone: only rings of two links are)
13. a follower partition whose storage refused fetched records keeps the
    link from FOLLOWING and says so (undone: the refusal is only logged)
"""

from __future__ import annotations

FIXES = range(1, 14)
_undone: frozenset[int] = frozenset()


def set_undone(fixes: frozenset[int]) -> None:
    """For a simulation run only (sim.runner): which fixes to undo."""
    global _undone
    unknown = sorted(set(fixes) - set(FIXES))
    if unknown:
        raise ValueError(
            f"undo_fix: no fix {unknown[0]} (known: {FIXES.start}-{FIXES.stop - 1})"
        )
    _undone = frozenset(fixes)


def undone(fix: int) -> bool:
    return fix in _undone
