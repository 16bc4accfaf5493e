"""A cluster's fault configuration: test-only switches that plant known bugs,
so that a checker can be shown to catch each (FoundationDB's BUGGIFY is the
model). It is one frozen value, `Faults`, handed to the core with the state
it runs on (`ClusterState(..., faults=...)`, `LinkSessions(..., faults)`):
the code that reads a switch reads the one of the cluster it runs for, and
a test or a sweep names what it plants. There is no module-wide switch, so
two simulations in one process never see each other's. With none set
(`NO_FAULTS`, the default everywhere outside a test) the core behaves as
documented.

Two kinds:

- `undone`: fixes undone, by number, so the simulator's operator search can
  show how soon it finds each (docs/simulator.md: `ccr-sim sweep
  sim/sweeps/undo-fixes.toml`). A simulation sets them through its parameter
  `undo_fix` (sim.runner); a daemon never does.
- `planted`: bugs a daemon runs with under `--plant-bug` (chaos tests), so a
  chaos run can be shown to catch them (`PlantedBug`).

The fixes that can be undone, of the operator-stories issue:

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

and of the hanging-transactions sweep class:

29. deleting a link (here or by its remote) while a procedure's plan of it
    is journalled settles the transactions left open in the plan's topic
    namespaces that follow nothing (undone: only the namespaces the link
    was copying into are settled, so a transaction whose marker a
    recovery's cut removed stays open for ever once the recovery can no
    longer follow the remote)

30. a follower partition held uncut over its own writes aborts the
    transactions replicated into it above where its source said to cut
    (the source no longer holds them; undone: they stay open until an
    operator's recover cuts them, and read_committed readers stall there
    and on every copy of it)

and of the every-loss-judged issue:

31. a SYNC link's follower with a partition held back (its storage refused
    the records a round fetched) is not IN_SYNC, so its lag is known only
    under the rules of any other state (undone: it keeps the source's last
    IN_SYNC verdict, and a failover takes its lag as known and zero while
    the source, which dropped it from sync meanwhile, acknowledges what it
    does not hold)

and of the sweep failures of SYNC liveness and stale lag:

33. a fetch round whose answer was applied later than a healthy source
    answers (`fetch_answer_due_ms` after its request left: the follower was
    paused, or the answer was held up) does not make the lag known
    (undone: the round counts as fresh from when it was applied, so a
    failover right after a pause answers with seconds-old news as the lag now)

and of the one-writer-at-rest findings after a failover or a reverse:

37. a failover re-run that takes up its journalled plan also makes writable
    each namespace the plan named that no longer follows the link (the
    remote's detach or reversal by hand converged meanwhile) but stays
    reserved and follows no link (undone: only what follows the link now
    is promoted, and such a namespace stays reserved, writable nowhere)

38. a reversal checks, before its first mapping change, that the swapped
    mapping would not be refused for a diverged log (the remote holding as
    many records while its own clients wrote), and is rolled back if it
    would (undone: it detaches, the swapped attach is refused, and its plan
    can never be finished: the namespace stays writable nowhere)

and of the sweep's "one writer at rest" after a recover:

35. a proposed attach that swaps the direction of a mapping the link
    already holds is judged for rings without the mapping it replaces
    (undone: the replaced follower still counts as a source, so a cluster
    that has not heard of its leader's detach refuses to lead the
    namespace back to it: FOLLOW_CYCLE after a recovery's cut)

36. a confirmed recovery judges the link as both sides hold it now: a
    handshake merges the remote's view before the checks that precede the
    cut, and follow-remote judges each mapping when its turn comes (whether
    it follows already, whether to detach it first), and names any that a
    later merge swapped (undone: judged by this side's view as it stood, in
    which a remote attach or detach not heard of yet refuses a mapping
    after the cut, or swaps one judged as following: left reserved,
    following nothing)

39. a recovery refuses (RESERVED_NAMESPACE, nothing changed) to follow a
    remote namespace that is reserved there, follows no other link and that
    no plan there will make writable (undone: it cuts and follows it, and
    no cluster writes the namespace: the recovering side follows a
    reserved copy, a follower whose leader detached it)

40. a failover re-run after a crash answers, besides what it finds now,
    every partition its first check saw that it does not name otherwise, as
    abandoned, its lag not known since that check (undone: a namespace
    detached while the plan waited is made writable with no rows, and what
    its source acknowledged after the check is named nowhere)

41. a failover resumes a replicated group no further than where the
    follower's log stops holding its source's records (undone: up to its
    high watermark, past its own clients' writes since a detach, which the
    group never read)

42. an attach, a link and a recovery hold a transaction the follower
    decided for its source (a detach's abort) like its own clients' records
    (undone: the link cuts its marker silently, and the source's outcome
    turns it committed behind read_committed readers that passed it)

43. a follower's lag is not known while its pull lane waits out its
    storage's refusal instead of polling (undone: the lag of its last round
    stays "known", and a failover names nothing its source acknowledged
    since)

44. a recovery's cut lifts the hold it resolves, and a follower drops the
    answer to a fetch it sent as held when the hold is gone (undone: the
    partition stays refused as held until a later round, and a link at rest
    reports it held while the transactions the cut reopened stay open)

and of the chain question (mirroring a mirror, idempotent producers after
failover):

45. each cluster hands out producer ids from a range of its own
    (`transactions.producer_id_base`), so an id a promoted cluster gives a
    producer is never one the batches it copied carry (undone: every
    cluster counts from 1000, as a Kafka cluster's counter starts anew;
    the new producer's sends meet the copied producer state of its id and
    are refused out of sequence, or, when a batch repeats one of the last
    five the copied producer wrote there, answered with that batch's
    offset and not stored)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The numbers missing belong to no fix.
FIXES = (
    *range(1, 11), 12, 13, 15, 16, 17, *range(18, 23), 24, 25, 26, 29, 30, 31, 33,
    *range(35, 46),
)  # fmt: skip


class PlantedBug(enum.StrEnum):
    """A bug a daemon can be started with (`linkd --plant-bug`, chaos only)."""

    # Acknowledgements stop waiting for a SYNC link's followers.
    ACK_BEFORE_REPLICATE = "ack-before-replicate"


@dataclass(frozen=True, slots=True)
class Faults:
    """What one cluster runs with: the fixes undone (numbers of FIXES) and
    the bugs planted. Refuses a number that names no fix."""

    undone: frozenset[int] = frozenset()
    planted: frozenset[PlantedBug] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.undone) - set(FIXES))
        if unknown:
            raise ValueError(
                f"undo_fix: no fix {unknown[0]} (known: {', '.join(map(str, FIXES))})"
            )

    @classmethod
    def undoing(cls, *fixes: int) -> Faults:
        """The fixes `fixes` undone (0 alone: none, as `undo_fix` says it)."""
        return cls(undone=frozenset(f for f in fixes if f != 0))

    @classmethod
    def planting(cls, *bugs: str) -> Faults:
        """The bugs named (by their flag value; "" alone: none) planted."""
        return cls(planted=frozenset(PlantedBug(b) for b in bugs if b))

    def undid(self, fix: int) -> bool:
        """Whether fix `fix` (a number of FIXES) is undone."""
        assert fix in FIXES, f"undid({fix}): no such fix"
        return fix in self.undone

    def plants(self, bug: PlantedBug) -> bool:
        return bug in self.planted


NO_FAULTS = Faults()
