"""Invariant 5 and a reported cut that removed a transaction's COMMIT marker
(seed 5024's story): B read the transaction's records as committed, then
followed a source whose log has that transaction aborted. The divergence cut
that removed the marker names the transaction in its provenance entry, so the
read and the now-hidden records are a reported loss; without that report
they stay violations."""

from __future__ import annotations

from sim import checkers
from sim.history import History, Op, Poll, Send

KEY = ("B", "orders-1", 0)


def _history() -> History:
    h = History()
    for offset, value in ((1, "t-0"), (2, "t-1")):
        send = Send("orders-1", 0, value, offset, txn="T1")
        h.add(Op("p", "source_producer", "A", "ok", 0, 1, send))
    h.add(Op(
        "c", "target_consumer", "B", "ok", 5, 6,
        Poll("orders-1", ((0, 1, "t-0"), (0, 2, "t-1")), read_committed=True),
    ))  # fmt: skip
    return h


def _final() -> tuple[checkers.FinalLogs, checkers.FinalLogs, checkers.StableEnds]:
    """B's final log: the transaction's records still at 1-2, then C's ABORT
    marker at 3 and a record at 4; read_committed shows only 0 and 4."""
    final = {KEY: {0: "x", 1: "t-0", 2: "t-1", 4: "y"}}
    committed = {KEY: {0: "x", 4: "y"}}
    return final, committed, {KEY: 5}


def test_without_a_report__the_read_is_a_violation() -> None:
    final, committed, stable = _final()
    found = checkers.check_aborted_reads(_history(), final, committed, stable)
    assert [("never committed" in v.detail, f"read {x!r}" in v.detail) for v, x in
            zip(found, ("t-0", "t-1"), strict=True)] == [(True, True)] * 2  # fmt: skip


def test_a_cut_that_names_the_transaction_excuses_the_read() -> None:
    final, committed, stable = _final()
    reopened = {KEY: [(1, 3)]}  # the cut at 3 removed the COMMIT of a txn begun at 1
    assert checkers.check_aborted_reads(_history(), final, committed, stable, reopened) == []


def test_a_report_for_another_range_or_cluster_excuses_nothing() -> None:
    final, committed, stable = _final()
    for reopened, left in (({KEY: [(2, 3)]}, 1), ({("C", "orders-1", 0): [(1, 3)]}, 2)):
        found = checkers.check_aborted_reads(_history(), final, committed, stable, reopened)
        assert len(found) == left and "read 't-0'" in found[0].detail, reopened


def test_a_transaction_half_hidden_by_a_reported_cut_is_not_judged_partly_visible() -> None:
    """The same transaction on a second partition stayed committed: a cut on
    partition 0 only reopened it there."""
    h = _history()
    h.add(Op("p", "source_producer", "A", "ok", 0, 1, Send("orders-1", 1, "t-2", 0, txn="T1")))
    final, committed, stable = _final()
    other = ("B", "orders-1", 1)
    final[other], committed[other], stable[other] = {0: "t-2"}, {0: "t-2"}, 2
    found = checkers.check_committed_logs_atomic(h, final, committed, stable)
    assert len(found) == 1 and "partly visible" in found[0].detail
    reopened = {KEY: [(1, 3)]}
    assert checkers.check_committed_logs_atomic(h, final, committed, stable, reopened) == []
