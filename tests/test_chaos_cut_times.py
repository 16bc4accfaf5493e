"""The chaos runner's lost-write judges excuse a missing acknowledged record
only by a reported cut made after its send began (`checkers.cut_since`), as
the simulator's do: a cut at or below an offset made before a record was
written there left that offset to be written again."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from admin.admin_client import FailoverResult, LinkInfo, NamespaceInfo
from chaos.proxy import FaultProxy
from chaos.runner import UNTIMED, LinkRun, Run
from chaos.schedule import make_schedule
from sim.checkers import FinalLogs
from sim.history import Op, Send

T = "orders-x"


def _run(tmp_path: Path) -> Run:
    run = Run(make_schedule(1, name="txn-failover", phase_s=10.0), "replay", workdir=tmp_path)
    run.daemons = {}
    return run


def _failover_cut(run: Run, at: int) -> None:
    """B's failover answered at run time `at`, naming a cut of B's T-0 at 10."""
    info = LinkInfo("ab", "id", "B", "A", "x:1", "ASYNC", "local_dials", "DISCONNECTED", 0,
                    1, [], [], [])  # fmt: skip
    result = FailoverResult(
        link=info, abandoned=[], namespaces=[NamespaceInfo("topic", "orders-", False)],
        partitions=[], topics_known_at_ms=run.t0_wall_ms,
        truncated=[{"topic": T, "partition": 0, "truncate_to": 10, "records_removed": 5}],
    )  # fmt: skip
    run._record_failover("B", LinkRun("ab", "A", "B", cast(FaultProxy, None)), result, at - 100)
    assert run.cut_events[("B", T, 0)][-1].at_ms >= at - 100


def _lost(run: Run, invoke_ms: int) -> list[str]:
    """Judges B's acknowledged record at offset 12, missing from B's final log."""
    run.recorder.add(Op("p", "target_producer", "B", "ok", invoke_ms, invoke_ms + 1,
                        Send(T, 0, "v12", 12)))  # fmt: skip
    final: FinalLogs = {("B", T, 0): {o: f"v{o}" for o in range(10)}}
    return [v.invariant for v in run.judge(final) if v.invariant == "lost_write"]


def test_a_cut_after_the_send_began_excuses_it(tmp_path: Path) -> None:
    run = _run(tmp_path)
    begun = run.recorder.now_ms()
    _failover_cut(run, run.recorder.now_ms() + 1)
    assert _lost(run, begun) == []


def test_a_cut_made_before_the_send_excuses_nothing(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _failover_cut(run, run.recorder.now_ms())
    later = run.recorder.now_ms() + 60_000  # written long after the cut
    assert _lost(run, later) == ["lost_write"]


def test_a_cut_whose_time_is_not_known_excuses_as_before(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run._cut_at(("B", T, 0), 10, UNTIMED, by_link=True)
    run.truncations[("B", T, 0)] = [10]
    assert _lost(run, run.recorder.now_ms() + 60_000) == []
