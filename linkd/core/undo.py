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

and of the silent-loss issue (failover's truth):

9. a follower's lag is not known once a call of its link failed since the
   last fetch round (undone: the last round's lag stands until the silence
   bound, so a failover right after the source died takes it as the lag now)
10. a failover's answer lists every replicated transaction whose abort marker
   it wrote, whichever step wrote it (undone: only those its reservation
   step aborted, not those the detach aborted first)

and of the issue of silent losses (findings 2 and 3):

12. follow relations that would close a ring of any length are refused
    (`lineage`; undone: only rings of two links are)
13. a follower partition whose storage refused fetched records keeps the
    link from FOLLOWING and says so (undone: the refusal is only logged)

and of the every-loss-judged issue:

15. an attach that would cut acknowledged records the follower's own clients
    wrote is refused, and the link does not cut them either (undone: the
    attach answers success and the first round cuts them)

and of the leftovers of that issue:

16. a link credential removed from the callee's accepted credentials ends
    the sessions opened with it at their next call, however busy
    (`link_auth.LinkSessions.verify`; undone: a busy session keeps working
    on the revoked credential, and the callee says nothing of it)

17. a follower topic its storage refused to create keeps the link from
    FOLLOWING and is named by rows (undone: the refusal is only noted, and
    a namespace whose topics could not be created looks FOLLOWING, empty)

and of the pipeline issue (a follower's hidden records, compaction taken
for divergence):

18. a follower's HW cap follows its source's HW as soon as an answer's
    records are appended (undone: only when the round that brought them
    finishes, so records of a round cut short stay unreadable)
19. a follower partition's reported position (describe-link, failover,
    top, metrics) is its readable high watermark (undone: its log end)
20. logs are compared by their batches' offsets and leader epochs (undone:
    by CRC too, so a batch the source's cleaner rewrote reads as a
    divergence)

and of the groups-and-pending-answers issue:

21. a replicated group follows its follower's data during a catch-up (a
    commit beyond the high watermark moves the group to it) and a failover
    resumes each group at the last commit heard of and reports it (undone:
    the commit is held back whole, the group is absent on the follower
    until the data reaches it, and a failover says nothing of groups)
22. an admin call answers done only once the remote has the change, else
    pending with what remains (undone: "attached" although the remote was
    not reached)

and of the procedures-that-survive-a-crash issue (linkd/core/plans.py):

24. a re-run `reverse` continues its journalled plan (undone: it plans anew
    from what is left, as before plans were durable)
25. a reversal that fails before any mapping changed is rolled back (undone:
    this side stays reserved and nothing is writable anywhere)
26. a confirmed `recover` keeps its plan journalled until every recovered
    mapping follows the remote, so that a re-run (or the liveness phase)
    finishes it after a crash (undone: the plan ends with the cut, and a
    crash before the attaches leaves the namespaces reserved, cut and
    following nothing)
"""

from __future__ import annotations

# The numbers missing belong to no fix.
FIXES = (*range(1, 11), 12, 13, 15, 16, 17, *range(18, 23), 24, 25, 26)
_undone: frozenset[int] = frozenset()


def set_undone(fixes: frozenset[int]) -> None:
    """For a simulation run only (sim.runner): which fixes to undo."""
    global _undone
    unknown = sorted(set(fixes) - set(FIXES))
    if unknown:
        raise ValueError(
            f"undo_fix: no fix {unknown[0]} (known: {', '.join(map(str, FIXES))})"
        )
    _undone = frozenset(fixes)


def undone(fix: int) -> bool:
    return fix in _undone
