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


def test_a_copy_under_another_name_is_judged_apart_from_the_topic_written() -> None:
    """Seed 22060 on 2 clusters: B copied A's `orders-1` as `r-orders-1` and
    aborted the transaction there (its link stopped before the COMMIT came),
    then A copied B's `r-orders-1` back. On A the transaction is committed
    in `orders-1` partition 0 and reopened by a reported cut in partition 1,
    and aborted in the copy: each topic alone is as reported, and no reader
    of one reads the other."""
    h = History()
    for p, value in ((0, "t-0"), (1, "t-1")):
        h.add(Op("p", "source_producer", "A", "ok", 0, 1, Send("orders-1", p, value, 1, txn="T1")))
    final: checkers.FinalLogs = {}
    committed: checkers.FinalLogs = {}
    stable: checkers.StableEnds = {}
    for p, value in ((0, "t-0"), (1, "t-1")):
        final[("A", "orders-1", p)], committed[("A", "orders-1", p)] = {1: value}, {1: value}
        final[("A", "r-orders-1", p)], committed[("A", "r-orders-1", p)] = {1: value}, {}
        stable[("A", "orders-1", p)] = stable[("A", "r-orders-1", p)] = 3
    committed[("A", "orders-1", 1)] = {}  # the cut at 2 removed its COMMIT there
    reopened = {("A", "orders-1", 1): [(1, 2)]}
    assert checkers.check_committed_logs_atomic(h, final, committed, stable, reopened) == []
    # Half of it hidden in the copy alone: partly visible there.
    committed[("A", "r-orders-1", 0)] = {1: "t-0"}
    found = checkers.check_committed_logs_atomic(h, final, committed, stable, reopened)
    assert len(found) == 1 and "partly visible to read_committed readers in 'r-orders-1'" in (
        found[0].detail
    )


def test_a_transaction_written_to_two_topics_is_judged_across_both() -> None:
    h = History()
    for topic, value in (("orders-1", "t-0"), ("orders-2", "t-1")):
        h.add(Op("p", "source_producer", "A", "ok", 0, 1, Send(topic, 0, value, 1, txn="T1")))
    final = {("A", "orders-1", 0): {1: "t-0"}, ("A", "orders-2", 0): {1: "t-1"}}
    committed = {("A", "orders-1", 0): {1: "t-0"}, ("A", "orders-2", 0): {}}
    stable = {("A", "orders-1", 0): 3, ("A", "orders-2", 0): 3}
    found = checkers.check_committed_logs_atomic(h, final, committed, stable)
    assert len(found) == 1 and "A: transaction T1 is partly visible" in found[0].detail
