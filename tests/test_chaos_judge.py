"""The chaos runner's judgement, on planted histories (no daemons): each
anomaly the simulator's checkers know is reported from the inputs the runner
builds (final logs, derived invariant-4 history, reserved probes), and
invariants 5 (read_committed polls and final logs) and 6 (sampled replicated
committed offsets)."""

from __future__ import annotations

from pathlib import Path

from chaos.proxy import FaultProxy
from chaos.runner import LinkRun, Run
from chaos.schedule import make_schedule
from sim.checkers import OffsetMove, OffsetSample, check_offset_samples
from sim.history import Op, OpType, Poll, Send


def run_of(tmp_path: Path, mode: str = "async") -> Run:
    schedule = make_schedule(1, mode=mode, clusters=2, operators=False)
    return Run(schedule, "ccr-chaos run --seed 1", workdir=tmp_path)


def send(cluster: str, value: str, offset: int, t: int = 100, reserved: bool = False) -> Op:
    return Op("p", "source_producer", cluster, "ok", t, t + 10,
              Send("orders-x", 0, value, offset), reserved=reserved)  # fmt: skip


def kinds(run: Run, final: dict[tuple[str, str, int], dict[int, str]]) -> set[str]:
    return {v.invariant for v in run.judge(final)}


def test_clean_history__no_anomaly(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.recorder.add(send("A", "v0", 0))
    run.recorder.add(
        Op("r", "source_consumer", "A", "ok", 200, 210, Poll("orders-x", ((0, 0, "v0"),), 1))
    )
    assert kinds(run, {("A", "orders-x", 0): {0: "v0"}, ("B", "orders-x", 0): {0: "v0"}}) == set()


def test_lost_write_duplicate_skip_nonmonotonic_reserved(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.recorder.add(send("A", "v0", 0))
    run.recorder.add(send("A", "v1", 1))  # not in the final log: lost
    run.recorder.add(send("B", "probe", 0, reserved=True))  # accepted by a follower
    polls = ((0, 0, "v0"), (0, 3, "v0"), (0, 2, "x"))  # skips 1-2, then goes back
    run.recorder.add(Op("r", "source_consumer", "A", "ok", 200, 210, Poll("orders-x", polls, 1)))
    final = {("A", "orders-x", 0): {0: "v0", 1: "other", 2: "x", 3: "v0"}}
    assert kinds(run, final) == {
        "lost_write", "duplicate", "skip", "nonmonotonic", "3 reserved namespace",
    }  # fmt: skip


def test_reserved_write_after_failover_started__not_counted(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.unreserved_at["B"] = 50
    run.recorder.add(send("B", "probe", 0, t=60, reserved=True))
    assert kinds(run, {("B", "orders-x", 0): {0: "probe"}}) == set()


def test_sync_ack__acknowledged_while_in_sync__must_be_on_the_follower(tmp_path: Path) -> None:
    run = run_of(tmp_path, mode="sync")
    run.links["ab"] = LinkRun("ab", "A", "B", FaultProxy("127.0.0.1", 9))  # never started
    run.sync_samples = [
        (0, 5, "ab", "IN_SYNC"),
        (300, 305, "ab", "IN_SYNC"),
        (600, 605, "ab", "OUT_OF_SYNC"),
        (900, 905, "ab", "OUT_OF_SYNC"),
    ]
    run.recorder.add(send("A", "in-sync", 0, t=100))  # acked between two IN_SYNC samples
    run.recorder.add(send("A", "later", 1, t=400))  # acked after the link left IN_SYNC
    final = {("A", "orders-x", 0): {0: "in-sync", 1: "later"}, ("B", "orders-x", 0): {}}
    found = [v for v in run.judge(final) if v.invariant.startswith("4 ")]
    assert len(found) == 1 and "'in-sync'" in found[0].detail
    assert run.in_sync_at("ab", 100, 110) and not run.in_sync_at("ab", 400, 410)


# -- invariants 5 and 6 ----------------------------------------------------------------


def txn_send(value: str, offset: int, txn: str, kind: OpType = "ok", partition: int = 0) -> Op:
    return Op("txn-producer", "source_transactional_producer", "A", kind, 100, 110,
              Send("orders-x", partition, value, offset, txn=txn))  # fmt: skip


def rc_poll(records: tuple[tuple[int, int, str], ...], session: int, t: int = 300) -> Op:
    return Op("reader-B-rc", "target_consumer", "B", "ok", t, t + 5,
              Poll("orders-x", records, session, read_committed=True))  # fmt: skip


def test_txn_atomic__aborted_read_partial_session_and_partial_final_log(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.recorder.add(txn_send("t1-0", 0, "t1"))
    run.recorder.add(txn_send("t1-1", 2, "t1"))
    run.recorder.add(txn_send("t2-0", 1, "t2", kind="fail"))
    # Session 1 reads t1-0 and then offset 3: it passed t1-1 (offset 2) without it.
    run.recorder.add(rc_poll(((0, 0, "t1-0"),), 1))
    run.recorder.add(rc_poll(((0, 3, "x"),), 1, t=400))
    # Session 2 reads the aborted t2-0.
    run.recorder.add(rc_poll(((0, 0, "t1-0"), (0, 1, "t2-0"), (0, 2, "t1-1")), 2, t=500))
    stored = {0: "t1-0", 1: "t2-0", 2: "t1-1", 3: "x"}
    final = {("A", "orders-x", 0): dict(stored), ("B", "orders-x", 0): dict(stored),
             ("C", "orders-x", 0): dict(stored)}  # fmt: skip
    committed = {
        ("A", "orders-x", 0): {0: "t1-0", 2: "t1-1", 3: "x"},
        ("B", "orders-x", 0): {0: "t1-0", 2: "t1-1", 3: "x"},
        ("C", "orders-x", 0): {0: "t1-0", 3: "x"},  # t1-1 stored but hidden: t1 split
    }
    stable = {key: 4 for key in final}
    found = [v for v in run.judge(final, committed, stable) if v.invariant == "5 txn atomic"]
    details = " | ".join(v.detail for v in found)
    assert len(found) == 3, details
    assert "'t2-0' of transaction t2" in details and "aborted" in details
    assert "read part of transaction t1 (orders-x-0 on B, reader-B-rc session 1)" in details
    assert "C: transaction t1 is partly visible" in details
    # The read_committed session also skipped a committed record (offset 2).
    assert any(v.invariant == "skip" for v in run.judge(final, committed, stable))


def test_txn_atomic__whole_transactions_across_polls__clean(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.recorder.add(txn_send("t1-0", 0, "t1"))
    run.recorder.add(txn_send("t1-1", 2, "t1"))
    run.recorder.add(txn_send("t2-0", 1, "t2", kind="info"))  # indefinite; it aborted
    # A poll boundary between t1's records is fine; so is skipping aborted t2.
    run.recorder.add(rc_poll(((0, 0, "t1-0"),), 1))
    run.recorder.add(rc_poll(((0, 2, "t1-1"), (0, 3, "x")), 1, t=400))
    stored = {0: "t1-0", 1: "t2-0", 2: "t1-1", 3: "x"}
    final = {("A", "orders-x", 0): dict(stored), ("B", "orders-x", 0): dict(stored)}
    committed = {key: {0: "t1-0", 2: "t1-1", 3: "x"} for key in final}
    stable = {key: 4 for key in final}
    assert run.judge(final, committed, stable) == []


def test_replicated_offsets__above_hw_and_unreported_backwards_move_are_named() -> None:
    def sample(offset: int, hw: int, t: int, cluster: str = "B") -> OffsetSample:
        return OffsetSample(cluster, "orders-chaos", "orders-x", 0, offset, hw, t, t + 5)

    samples = [
        sample(10, 12, 0),
        sample(15, 12, 100),  # above the high watermark read after it
        sample(8, 20, 200),  # back from 15, nothing reported
        sample(9, 20, 300),
        # C: moved back by a reported recovery (to 4), then forward again.
        sample(30, 40, 0, "C"),
        sample(6, 10, 150, "C"),
    ]
    moves = [OffsetMove("C", "orders-chaos", "orders-x", 0, 30, 4, 90, 120)]
    found = check_offset_samples(samples, moves)
    assert {v.invariant for v in found} == {"6 replicated offsets"}
    assert len(found) == 2, found
    assert "committed offset 15 for orders-x-0 exceeds the follower high watermark 12" in (
        found[0].detail
    )
    assert "moved back from 15" in found[1].detail and "to 8" in found[1].detail
    assert all(v.detail.startswith("B:") for v in found)
    # The same move without the report is named too.
    assert len(check_offset_samples(samples, [])) == 3


def test_replicated_offsets__sampled_by_the_runner_are_judged(tmp_path: Path) -> None:
    run = run_of(tmp_path)
    run.offset_samples = [
        OffsetSample("B", "orders-chaos", "orders-x", 1, 5, 4, 10, 12),
    ]
    found = [v for v in run.judge({}) if v.invariant == "6 replicated offsets"]
    assert len(found) == 1 and "exceeds the follower high watermark 4" in found[0].detail
