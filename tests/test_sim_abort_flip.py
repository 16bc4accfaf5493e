"""A follower that detaches while a replicated transaction is open aborts
it (its own abort marker, as a detach must: no marker would ever come).
Attached again, its log parts from its source's at that marker; the source
had committed the transaction meanwhile. Cutting the marker would turn the
transaction from aborted to committed on the follower, and a read_committed
reader of the follower that passed its records while they were aborted would
never read them. The chaos swarm's seed 25 (docs/chaos.md, the fifth swarm)
met it on real daemons, when the link cut the marker by itself.

The rule (linkd/core/histories.py `reopened_by_cut`): a transaction the
follower decided itself is held like its own clients' records. The link
does not cut it (the partition is held, the refusal names the transaction);
`recover` reports the transactions its cut reopens and, confirmed, makes
the cut, a reported change."""

from __future__ import annotations

import tomllib

from linkd.core.errors import ErrorCode
from sim import scenario as sc
from sim.world import Simulation

SCENARIO = """
name = "abort-flip"
[run]
duration_ms = 12000
liveness_ms = 20000
[topology]
kind = "chain"
clusters = ["A", "B"]
[namespace]
topics = 1
partitions = 1
groups = false
[[workloads]]
kind = "producer"
name = "app"
cluster = "A"
topic = "A-t0"
rate_per_s = 20
transactional_fraction = 1.0
txn_open_ms = 1500
start_ms = 1000
stop_ms = 6000
[[workloads]]
kind = "consumer"
name = "rc"
cluster = "B"
topic = "A-t0"
group = "local-g1"
read_committed = true
start_ms = 1000
[[actions]]
at_ms = 3000
kind = "detach"
cluster = "B"
link = "A-B"
prefixes = [["A-", "A-"]]
[[actions]]
at_ms = 4500
kind = "attach"
cluster = "B"
link = "A-B"
prefixes = [["A-", "A-"]]
leader = "remote"
"""


RECOVER = """
[[actions]]
at_ms = 8000
kind = "recover"
cluster = "B"
link = "A-B"
prefixes = [["A-", "A-"]]
"""


SPLIT = """
[[faults]]
at_ms = 4000
kind = "split"
side_a = ["A"]
side_b = ["B"]
duration_ms = 2000
"""


def _run(extra: str = "", keep_trace: bool = False, undo: int = 0) -> Simulation:
    spec = sc.parse(tomllib.loads(SCENARIO + extra))
    if undo:
        spec = sc.apply_params(spec, {"undo_fix": undo})
    sim = Simulation(spec, 1, keep_trace)
    sim.run()
    return sim


def test_the_attach_is_refused_naming_the_transaction() -> None:
    """The attach compares with the source first and refuses, nothing changed."""
    sim = _run(keep_trace=True)
    state = sim.clusters["B"].state
    assert [p.kind.value for p in state.topics["A-t0"].provenance[0]] == ["start", "detached"]
    aborted = [line for line in sim.queue.trace if "aborted 1 transactions left open" in line]
    assert len(aborted) == 1 and "A-t0-0 producer" in aborted[0], aborted  # the detach says so
    refused = [line for line in sim.queue.trace if "action attach refused" in line]
    assert len(refused) == 1, refused
    assert "would reopen 1 transaction(s) 'B' decided itself" in refused[0]
    assert "aborted by this cluster at 43" in refused[0]
    assert "ccr-admin recover --link A-B" in refused[0]
    assert sim.violations == [], sim.violations


def test_a_link_that_could_not_compare_holds_the_partition() -> None:
    """Attached while the source is out of reach, the link learns of the
    cut on its first fetch: it holds the partition uncut and says why."""
    sim = _run(SPLIT)
    state = sim.clusters["B"].state
    kinds = [p.kind.value for p in state.topics["A-t0"].provenance[0]]
    assert "truncated" not in kinds, kinds
    runtime = state.links.runtime["A-B"]
    assert ("A-t0", 0) in runtime.own_writes_held
    refusal = runtime.refused[("A-t0", 0)]
    assert refusal.code is ErrorCode.DIVERGED_LOG
    assert "reopen 1 transaction(s) 'B' decided itself" in refusal.message, refusal.message
    assert "aborted by this cluster" in refusal.message, refusal.message
    assert sim.violations == [], sim.violations


def test_recover_reports_the_reopened_transaction_and_cuts_it() -> None:
    sim = _run(SPLIT + RECOVER)
    state = sim.clusters["B"].state
    history = state.topics["A-t0"].provenance[0]
    assert [p.removed for p in history if p.kind.value == "truncated"] == [1]
    assert ("A-t0", 0) not in state.links.runtime["A-B"].own_writes_held
    # The reader that passed the aborted records missed them by the change
    # recovery reported, which the checkers hold against the report.
    assert sim.reopened[("B", "A-t0", 0)], sim.reopened
    assert sim.violations == [], sim.violations


def test_fix_42_undone__the_link_cuts_the_marker_and_the_reader_skips() -> None:
    """Fix 42 undone, the attach goes through and the link cuts B's own
    abort marker: A's commit turns the transaction committed behind B's
    read_committed reader, which the checkers call a skip."""
    sim = _run(undo=42)
    history = sim.clusters["B"].state.topics["A-t0"].provenance[0]
    assert ("truncated", 1) in [(p.kind.value, p.removed) for p in history]
    assert {v.invariant for v in sim.violations} == {"skip"}, sim.violations
