"""The chaos runner's judgement, on planted histories (no daemons): each
anomaly the simulator's checkers know is reported from the inputs the runner
builds (final logs, derived invariant-4 history, reserved probes)."""

from __future__ import annotations

from pathlib import Path

from chaos.proxy import FaultProxy
from chaos.runner import LinkRun, Run
from chaos.schedule import make_schedule
from sim.history import Op, Poll, Send


def run_of(tmp_path: Path, mode: str = "async") -> Run:
    return Run(make_schedule(1, mode=mode, clusters=2), "ccr-chaos run --seed 1", workdir=tmp_path)


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
