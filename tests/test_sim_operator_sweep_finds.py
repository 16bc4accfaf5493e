"""What the 10,002-run operator sweep (sim/sweeps/operators.toml) found, one
seed per cause, each clean now (docs/simulator.md, "The operator search").

Each seed replays one operator-mix run exactly (the simulator is
deterministic); a change to operator-mix's draws may move a case to another
seed, so the core rules behind them are also held by smaller tests
(tests/test_core_link_truth.py, tests/test_core_recovery.py).
"""

from __future__ import annotations

import pytest

from sim.runner import run_summary

FOUND = [
    # set-mode SYNC accepted while the last fetch round was stale (FOLLOWING
    # not yet recomputed): invariant 12.
    (1063, 2, "set-mode judged as of the call"),
    # The hang checker did not know a renamed follower topic by its source's
    # name, so a transaction still running at the source looked hung.
    (1993, 2, "renamed follower topics in the hang checker"),
    # A round's progress for partitions detached while its appends were
    # written kept stale rows; a stale SYNC verdict outlived what it judged.
    (1642, 3, "stale rows and verdicts after a detach"),
    # An orphaned source partition holds unacknowledged records above its HW
    # for good; its copies end at its HW.
    (778, 4, "liveness of copies of an orphaned partition"),
    # Recovery moved a committed offset to the leader's, past this side's log.
    (1719, 3, "recovery never moves an offset past the local log"),
    # A deleted topic's committed offsets are gone: a new topic of the name
    # starts afresh (the offset checker remembered the old ones).
    (1703, 4, "offsets of a deleted topic are forgotten"),
    # A divergence being resolved for a partition the link then stopped
    # following kept the link CATCHING_UP for good, naming nothing.
    (39, 4, "a stale divergence is forgotten with its partition"),
    # A checker bug: a cut made between the last probe of the source and the
    # round asked about did not bound what the source was owed.
    (1583, 3, "a cut after the last probe bounds the owed high watermark"),
    # The manual reversal's in-between state (the source no longer leads the
    # topic, the follower still follows it) was taken for a deleted source:
    # the follower's own abort markers later stood where the source holds
    # other records (found once those markers counted).
    (372, 2, "a source that does not lead the topic yet is not gone"),
    # Found once a restart replays the journal: the simulator's consumers
    # committed offsets without journalling them, so a restart moved the
    # group's offsets back.
    (27, 3, "a consumer's commit is journalled"),
    # The third full sweep's one failure: a cut left a voided epoch bump in
    # the journal, and a snapshot of the live state doubled a bump; after a
    # restart the epoch history went out of order.
    (1912, 4, "a cut voids the journalled epoch bumps after it"),
    # A 630-run sample of 2026-12-06: recovery of a copy of a copy (C from B
    # from A) from A took B's range for another origin and cut everything
    # (now the batches' marks settle it); its follower's cut then looked like
    # a false divergence.
    (86, 4, "recovery compares batch marks where provenance cannot see"),
    # A follower partition held uncut for its own acknowledged writes (and
    # reported) was judged as a copy of its source.
    (205, 4, "a held partition is not a copy until recover"),
    # Checker misjudgements of "one writer at rest" (the reversal's answers
    # were right). A reversal rolled back leaves its namespaces as it found
    # them: none writable (the operator had reserved this side, or a deleted
    # link left it reserved) or two (a failover the old leader had not heard
    # of); the check demanded one.
    (208, 2, "a rolled-back reversal found the namespace reserved"),
    (66, 3, "a rolled-back reversal found two writers after a failover"),
    (27, 4, "a rolled-back reversal found no writer (a deleted link)"),
    # (Also: a source partition its own link holds uncut must not make a
    # follower ahead of it wait for it to catch up; see seed 21148.)
    (198, 4, "a re-run at rest rolled back, the group reserved before"),
    # A release-reattach (detach, set-reserved off, attach) after a reversal
    # did not take the namespace out of the check; its refused attach left the
    # follower writable on purpose.
    (93, 4, "release-reattach is an operator's change of who writes"),
    # A checker bug (a sample of 630 runs, 9 seeds): a failover with "lag 0,
    # known" named nothing acknowledged after its round once the source was
    # dead or cut off, though the follower could not tell yet: a silent cut
    # (seeds 118 and 152 on 2 clusters, 189 on 4), or kill -9 of a source
    # that pushes (169 and 219 on 2, 9, 34, 46 and 168 on 3): no call of the
    # follower's fails, and its request is not overdue for a second.
    (118, 2, "a silent cut the follower cannot see yet leaves the race open"),
    (189, 4, "a silent cut: a failover without force 344 ms into it"),
    (219, 2, "a pushing source killed 2 ms before the failover"),
    (34, 3, "a pushing source killed, its last push applied slowly"),
    # Checker misjudgements of "one writer at rest" (a 600-run sample of
    # 2026-12-06; the core's answers were right). A reversal that began while
    # a release-reattach held the follower detached found two writers; the
    # move's attach then made one (370 on 2 clusters, 286 on 3).
    (370, 2, "a move under way when a reversal began changes what it found"),
    (286, 3, "a release-reattach's attach after a reversal rolled back"),
    # A reversal rolled back on one side while the other side still held its
    # own cut-short plan of the link, which the liveness phase finished.
    (328, 4, "a plan the peer still holds is judged by its own watch"),
    # An operator's verb on a name overlapping a journalled plan's namespace
    # (an attach to another link; a release letting clients write where the
    # plan would follow) made its re-run refuse, naming the remedy; the
    # plan's other namespaces stayed reserved.
    (304, 4, "an attach overlapping a journalled plan's namespace"),
    (349, 4, "clients wrote where a journalled plan would follow"),
    # A 600-run sample on the code of 2026-12-06 (commit 8550ff3). A
    # checker bug: a failover without force that took up a forced one's
    # journalled plan (a crash after its change) answers the first run's rows,
    # as of that run; they were judged as of the re-run, 14 s later.
    (264, 2, "a re-run answers the journalled failover's rows, as of that run"),
    # A checker bug: a follower whose control lane waited out unanswered
    # calls (a one-way cut) had not listed its source's topics since before
    # they were created; the missing topic counted from when it went missing,
    # not from a listing that could have found it.
    (311, 4, "a follower topic counts as missing once a listing could find it"),
    # A recovery crashed after its cut, answer lost: the committed offsets it
    # moved back were reported nowhere (its log line gave their number only).
    (414, 2, "a recovery's log line names the committed offsets it moved"),
    # A checker bug: a ring closed apart (A followed C while C was down; C
    # came back without the lineage it had heard) is found once
    # the lineage went around it, a handshake per hop; the liveness phase
    # ended before that and invariant 13 judged a ring not yet at rest.
    (256, 3, "rings are judged once the lineage went around"),
    # A product bug (the full sweep of 2026-12-06 on 5ebbed2): a reversal cut
    # short by a crash after its detach; A then attached its copy of the
    # reversed name to another link from B, which B accepted; the re-run could
    # not attach the swapped mapping beside it (records would flow back) and
    # the name stayed writable nowhere. Such an attach is now refused
    # (PROCEDURE_IN_PROGRESS), naming the plan and how to finish it.
    (31, 3, "an attach of a name an unfinished plan of another link moves"),
    # A product bug (the full sweep of 2026-12-06 on 5ebbed2): B's process
    # was paused 2.2 s while its fetch was out; the answer, applied on
    # resuming, finished a round "now", so a failover without force 1 s later
    # took lag 0 as of 3.2 s before as the lag now. A round whose answer was
    # applied later than a healthy source answers no longer makes the lag
    # known (fix 33).
    (2872, 3, "a round applied late after a pause is old news"),
    # A checker limit (the same sweep: 216 and 2564 on 2 clusters, 2814 on
    # 3): the leading side of a SYNC link whose follower will not cut its own
    # clients' records (until `recover`) stays OUT_OF_SYNC or SYNCING, each
    # led row naming the refusal; only the ASYNC judgement of a led partition
    # counted as explained, so the liveness phase waited for it in vain.
    (216, 2, "a SYNC verdict held by a follower's own writes is explained"),
    # "10 silent loss", five seeds of the sweep of 2026-12-06, three causes.
    # A product bug: a SYNC follower whose storage refused what its rounds
    # fetched kept the source's last IN_SYNC verdict; the source dropped it
    # from sync once its lag time ran out and acknowledged without it, and a
    # failover (its source killed) took "lag 0, known" as IN_SYNC allows.
    # Such a follower is SYNCING now (816 on 4 clusters).
    (816, 4, "a SYNC follower whose storage refuses is not IN_SYNC"),
    # A checker bug: a source paused (SIGSTOP) as the follower failed over
    # was judged as if killed; it resets nothing, so the records it
    # acknowledged after the follower's last round were in flight, as under
    # a silent cut (63 and 1700 on 2 clusters).
    (63, 2, "a paused source is found out as a silent cut is"),
    # A checker bug: a namespace detached before its follower held any copy
    # of a topic (not listed yet, or its storage refused to create it), the
    # same local prefix attached later from another remote prefix; the
    # checker took the new mapping for the old topic's (3039 on 3 clusters,
    # 1163 on 4).
    (3039, 3, "a topic that left the link is not owed under another mapping"),
    # A product bug (the fifth run): a failover cut short after its plan was
    # journalled; while its cluster was down the remote's detach (or its
    # reversal by hand) reached it, leaving a namespace the plan named
    # detached but reserved; the re-run promoted only what still followed
    # the link. It now also clears the reservation of what its plan named.
    (1088, 2, "a resumed failover promotes what its plan named"),
    # A product bug (the fifth run): a reversal's wait for the remote passed
    # on the offsets alone while the remote's log had diverged (its own
    # clients wrote while detached); the reversal detached, the swapped
    # attach was refused (DIVERGED_LOG) and its plan could never finish. The
    # wait now checks the swapped attach first and the reversal rolls back.
    (927, 4, "a reversal onto a diverged remote is rolled back before its detach"),
    # Checker bugs (the fifth run), "one writer at rest" blaming a procedure
    # for a state the contract allows: a failover made a namespace writable,
    # then a recovery of another link made it follow, and that link was
    # deleted (followers stay reserved); the failover's watch outlived the
    # procedure that took the namespace over (also seed 2343 on 4).
    (3097, 3, "a namespace is judged by the last procedure that moved it"),
    # The remote's attach (its side leading) and later detach left the
    # failed-over namespace a reserved follower: an attach or a detach
    # changes the mapping on both halves of the link.
    (1482, 4, "an attach or detach touches the remote's namespace too"),
    # A reversal rolled back while the operator's attach of its mapping had
    # not reached the remote; the attach, converging later, made the remote
    # follow: what the reversal found was a passing state.
    (1888, 2, "a reversal rolled back while its mapping was still converging"),
    # The sweep's "11 hanging transaction" class (13 seeds on 5ebbed2). A
    # product bug (9 seeds): a confirmed recovery crashed between its cut and
    # its last attach, then the link was deleted; the cut had removed the
    # marker of a transaction whose records stayed, and nothing would end it.
    (2173, 2, "a deleted link's recovery plan settles what its cut left open"),
    # A checker bug (2 seeds): a chain that keeps one name over two hops
    # (C's r-A-t1 from B's r-A-t1 from A's A-t1) was not walked to A, whose
    # coordinator still ran the transaction.
    (1112, 3, "the hang checker walks a chain by cluster, not by name"),
    # A product bug: a follower partition held uncut over its own writes kept
    # a transaction copied above the cut, which its source no longer held.
    (3058, 3, "a held partition aborts what lies above its source's cut"),
    # A simulator bug: the liveness phase took a partition its storage had
    # refused (the disk back 24 ms before) as an operator's hold; the commit
    # marker behind it had not been copied yet.
    (1431, 4, "a storage refusal that ended is not a hold at rest"),
    # "One writer at rest" after a recover (the 10,002-run sweep): a
    # recovery cut, then the remote refused or a merge undid its attach, and
    # the namespace stayed reserved, following nothing. The follower had not
    # heard its leader's detach and judged the swap a ring with the very
    # mapping it replaces (960/2); the remote's copy came from this cluster
    # (a real ring), known only there: it now says so before the cut (2556/3,
    # also 1746/3, 2139/3, 1052/4, 2249/4); the remote held an attach or
    # detach this side had not heard of: the views are merged before the
    # checks (1055/2, also 225/4, 2334/3, 2792/2).
    (960, 2, "a swap is no ring with the mapping it replaces"),
    (2556, 3, "recovery refuses a ring before its cut"),
    (1055, 2, "recovery judges the link as both sides hold it"),
    # The sixth run (2026-12-06, f2af72b): a forced failover crashed after
    # its check (its answer lost); the namespace was detached meanwhile, and
    # the re-run at rest promoted it with no rows: what it gave up was named
    # nowhere. A re-run now answers what its first check found abandoned
    # too, lag not known since that check (fix 40; 720, 1666 and 2013 on 3
    # clusters as well).
    (2830, 2, "a resumed failover names what its first check gave up"),
    # A product bug found once a moved consumer's unread records were judged
    # (`skip_across_failover`; the metric had counted 36): B detached its
    # topics (a release-reattach) and its clients wrote from offset 51; its
    # failover then resumed the replicated group at B's high watermark, 70,
    # past records the group never read. It resumes no further than where
    # B's log stops holding its source's records now (fix 41).
    (180, 4, "a failover resumes a group no further than its copy of the source"),
    # A product bug (a 600-run sample on seeds past the sweep's, 4001-4200):
    # B's storage refused the fetched records and its pull lane waited out
    # the refusal without polling; its lag stayed "known" as of its last
    # round, and a forced failover after A's kill named nothing A had
    # acknowledged since (`10 silent loss`, 4001 on 2 clusters too). The lag
    # is not known while the lane waits (fix 43).
    (4167, 3, "a lane waiting out its storage's refusal does not know its lag"),
    # The eighth run (534b4ca): D held two partitions over transactions it
    # had decided for its source (fix 42); a confirmed recovery cut short by
    # a crash was finished at rest, and its cut reopened them. The hold
    # outlived the cut (a held fetch's late answer set it again), so the
    # link at rest said "held" and never copied the source's commit markers:
    # `11 hanging transaction`. The cut lifts the hold, and a held answer
    # arriving after it is dropped (fix 44).
    (608, 4, "a recovery's cut lifts the hold it resolves"),
    # Runs of 2026-12-07 on new seeds, both in the harness's liveness phase:
    # it took a follower topic with fewer partitions than its source for
    # settled (no row lags for a partition not yet learned of), so the run
    # ended before discovery grew it and a record there looked lost...
    (20878, 2, "a follower topic short of its source's partitions is not settled"),
    # ...and it re-ran each journalled plan once, a recover before the
    # reverse it waited for: a plan left runs again once another finished.
    (20950, 3, "a plan waiting for another is run again once that one finished"),
    # A source whose partition was itself still copying from its own source
    # (its topic just created again there) told a follower ahead of it to cut
    # to its log end: 33 records a partition cut that came back at the same
    # offsets (`false_divergence`). The follower now waits until that source
    # has caught up, and is cut where the logs really part.
    (21148, 4, "a follower ahead of a source still catching up waits"),
    # With that wait alone, the waiting follower's fetch was recorded beyond
    # the source's log end, and that position acknowledged SYNC writes the
    # source made there later (`sync_ack_lost`): a recorded position is
    # capped at the log end.
    (20653, 4, "a follower's position beyond the log end acknowledges nothing"),
    # The harness's liveness phase: B held A-t1-1 uncut for its own writes
    # (until a recover), its HW capped below a record it appended before the
    # hold; C, copying it from B, ended at B's HW, which the run took for a
    # copy that does not end where its source does. A held source partition
    # is copied up to its HW, as an orphaned one is.
    (21495, 3, "a copy of a partition its source holds for its own writes ends at its HW"),
    # The judge's: A copied back B's copy of A-t1 (as r-A-t1), in which B had
    # aborted a transaction its link never brought the COMMIT of, while A's
    # own A-t1 kept it committed (half of it reopened by a reported cut).
    # Mixing the two topics called it partly visible; each is judged apart.
    (22060, 2, "a copy under another name is judged apart from the topic written"),
    # A discovery's answer arrived after the source's detach had reached B
    # (a new configuration, the namespace detached, no topic yet to mark
    # where the link's data ends): read under the configuration it began
    # with, it made a follower topic nothing filled and nothing said had
    # left the link (`silent loss`). It is read under the current one.
    (22466, 2, "a namespace detached while its topics were listed makes no topic"),
    # The judge's: A's reversal of A-B, cut short by a crash, was finished in
    # the liveness phase after B's reversal of B-C had begun and rolled back;
    # B-C's watch (writable on neither, as it found it) still judged B, which
    # A's finished reversal made the writer. A plan re-run at rest is the
    # last procedure that set out to move its namespaces: it takes the watch.
    (22714, 3, "a plan finished at rest takes the watch of the namespaces it moves"),
]


@pytest.mark.parametrize(("seed", "clusters", "cause"), FOUND)
def test_a_seed_the_sweep_found_is_clean(seed: int, clusters: int, cause: str) -> None:
    summary = run_summary("operator-mix", seed, {"clusters": clusters})
    assert summary["violations"] == [], cause


def test_fix_33_undone__seed_2872_finds_it() -> None:
    """Fix 33 undone (a round applied late counts as fresh news), the seed
    that found it fails again: the failover after the pause answers old news."""
    summary = run_summary("operator-mix", 2872, {"clusters": 3, "undo_fix": 33})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"9 status"}, summary["violations"]


def test_fix_39_undone__seed_960_leaves_the_namespace_writable_nowhere() -> None:
    """Fix 39 undone (a recovery follows a remote namespace reserved there
    and following nothing else), seed 960 on 2 clusters ends with A
    following B, where no client writes it either: the checker judges the
    peer of a recovery too."""
    summary = run_summary("operator-mix", 960, {"clusters": 2, "undo_fix": 39})
    details = [v["detail"] for v in summary["violations"]]
    assert details and all("A follows B, where it is reserved" in d for d in details), details


def test_fix_40_undone__seed_2830_finds_it() -> None:
    summary = run_summary("operator-mix", 2830, {"clusters": 2, "undo_fix": 40})
    assert {v["invariant"] for v in summary["violations"]} == {"10 silent loss"}


def test_fix_41_undone__seed_180_finds_the_group_skipping() -> None:
    """Fix 41 undone (a failover resumes a replicated group at its high
    watermark), seed 180 on 4 clusters: the reader that moved to A stands
    past records of B's own clients it never read."""
    summary = run_summary("operator-mix", 180, {"clusters": 4, "undo_fix": 41})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"skip_across_failover"}, summary["violations"]


def test_fix_43_undone__seed_4167_loses_records_silently() -> None:
    """Fix 43 undone (a lane waiting out a storage refusal keeps its lag
    known), seed 4167 on 3 clusters: the forced failover names nothing A
    acknowledged after B's last round."""
    summary = run_summary("operator-mix", 4167, {"clusters": 3, "undo_fix": 43})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"10 silent loss"}, summary["violations"]


def test_fix_44_undone__seed_608_leaves_reopened_transactions_open() -> None:
    """Fix 44 undone (the hold outlives the cut that resolves it), seed 608
    on 4 clusters: D's link at rest reports the partitions held, and the
    transactions the recovery reopened stay open."""
    summary = run_summary("operator-mix", 608, {"clusters": 4, "undo_fix": 44})
    found = {v["invariant"] for v in summary["violations"]}
    assert found == {"11 hanging transaction"}, summary["violations"]
