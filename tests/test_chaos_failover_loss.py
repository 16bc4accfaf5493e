"""The failover judge (chaos/judges.py `check_failover_loss`), on hand-made
inputs: every record the source of a failed-over link acknowledged before
the answer that the promoted cluster's final log lacks must be named by the
answer (the simulator's `FailoverRow.names`, a reported cut, a partition
created after what it knew), else it is a `silent_loss` anomaly. Pure and
fast: no daemons.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast

from admin.admin_client import FailoverResult, LinkInfo, NamespaceInfo
from chaos.daemons import Daemon
from chaos.judges import (
    Cuts,
    FailoverAnswer,
    FailoverCut,
    check_failover_loss,
    failover_answer,
    source_live_at,
)
from chaos.proxy import FaultProxy
from chaos.runner import LinkRun, Run
from chaos.schedule import Step, make_schedule
from chaos.twin import AppliedStep
from sim.checkers import FinalLogs, Violation
from sim.history import History, Op, Send
from sim.status_checks import FailoverRow

T = "orders-x"
T0_WALL = 1_000_000  # the run's t=0 on the wall clock
ANSWERED = 6_000  # run clock


def sent(value: str, offset: int, done_ms: int, partition: int = 0, cluster: str = "A") -> Op:
    return Op("grpc-producer", "source_producer", cluster, "ok", done_ms - 5, done_ms,
              Send(T, partition, value, offset))  # fmt: skip


def answer(
    rows: Mapping[tuple[str, int], FailoverRow],
    truncated: tuple[FailoverCut, ...] = (),
    source_live: bool = True,
    topics_known_at_ms: int = T0_WALL + 1_000,
) -> FailoverAnswer:
    return FailoverAnswer(
        promoted="B",
        source="A",
        link="ab",
        begun_ms=ANSWERED - 200,
        answered_ms=ANSWERED,
        rows=rows,
        truncated=truncated,
        topics_known_at_ms=topics_known_at_ms,
        prefixes=("orders-",),
        source_live=source_live,
    )


def held(upto: int, partition: int = 0) -> FinalLogs:
    """B's final log: A's records below `upto`, then B's own from there."""
    log = {o: f"a{o}" for o in range(upto)}
    log.update({o: f"b{o}" for o in range(upto, upto + 30)})
    return {("B", T, partition): log}


def judge(
    history: list[Op],
    answers: list[FailoverAnswer],
    final: FinalLogs,
    live: tuple[str, ...] = ("B",),
    cuts: Cuts | None = None,
    created: Mapping[tuple[str, str], int] | None = None,
    unreadable: tuple[tuple[str, str, int], ...] = (),
) -> tuple[list[Violation], dict[str, int]]:
    return check_failover_loss(
        history, answers, final, live, cuts or {}, T0_WALL, unreadable, created
    )


# Known at wall T0+3000 (t=3000 ms): B held 10, A's high watermark was 20.
LAGGING = FailoverRow(10, 20, T0_WALL + 3_000, True, T0_WALL + 3_000)
# Lag known and 0 at t=3000 ms.
CAUGHT_UP = FailoverRow(20, 20, T0_WALL + 3_000, True, T0_WALL + 3_000)


def test_a_lost_record_named_by_its_rows_range_is_fine() -> None:
    found, counts = judge([sent("a15", 15, 2_000)], [answer({(T, 0): LAGGING})], held(10))
    assert found == []
    assert counts["failover_records_judged"] == 1
    assert counts["failover_records_named"] == 1


def test_a_record_above_the_reported_source_hw_is_an_anomaly_naming_it() -> None:
    # Acknowledged at t=2000, before the round of t=3000 whose HW (20) it is above.
    history = [sent("a15", 15, 2_000), sent("a25", 25, 2_000)]
    found, counts = judge(history, [answer({(T, 0): LAGGING})], held(10))
    assert counts["failover_records_judged"] == 2
    assert counts["failover_records_named"] == 1
    assert [v.invariant for v in found] == ["silent_loss"], found
    detail = found[0].detail
    assert "'a25'" in detail and f"{T}-0@25" in detail and "t=2000 ms" in detail, detail
    assert "not on B" in detail and "link ab" in detail, detail
    assert "log end 10" in detail and "source high watermark 20" in detail, detail


def test_lag_known_and_0_while_a_record_is_missing_is_an_anomaly() -> None:
    # Acknowledged at t=1000: the round of t=3000 said lag 0, and it is not there.
    found, _ = judge([sent("a20", 20, 1_000)], [answer({(T, 0): CAUGHT_UP})], held(20))
    assert [v.invariant for v in found] == ["silent_loss"], found
    assert "lag known" in found[0].detail, found[0].detail
    # Acknowledged after that round (t=4000): in flight from a live source,
    # the race a known lag accepts; from a source the follower could tell
    # was down, old news: lost unnamed.
    late = [sent("a20", 20, 4_000)]
    assert judge(late, [answer({(T, 0): CAUGHT_UP})], held(20))[0] == []
    dead = judge(late, [answer({(T, 0): CAUGHT_UP}, source_live=False)], held(20))[0]
    assert [v.invariant for v in dead] == ["silent_loss"], dead
    assert "was down" in dead[0].detail, dead[0].detail


def test_a_lag_unknown_since_before_the_acknowledgement_names_it() -> None:
    unknown = FailoverRow(20, 20, T0_WALL + 3_000, False, T0_WALL + 3_000)
    found, counts = judge(
        [sent("a20", 20, 4_000)], [answer({(T, 0): unknown}, source_live=False)], held(20)
    )
    assert found == [] and counts["failover_records_named"] == 1
    # Unknown only since after it was acknowledged: not named.
    found, _ = judge(
        [sent("a20", 20, 2_000)], [answer({(T, 0): unknown}, source_live=False)], held(20)
    )
    assert [v.invariant for v in found] == ["silent_loss"], found
    assert "lag unknown since t=3000 ms" in found[0].detail, found[0].detail


def test_a_record_in_a_cut_the_answer_reported_is_fine() -> None:
    # B held 20, cut to 12 (8 removed); its row now says log end 12, lag 0.
    row = FailoverRow(12, 12, T0_WALL + 3_000, True, T0_WALL + 3_000)
    history = [sent("a14", 14, 1_000)]
    cut = (FailoverCut(T, 0, 12, 8),)
    found, counts = judge(history, [answer({(T, 0): row}, cut, source_live=False)], held(12))
    assert found == [] and counts["failover_records_named"] == 1
    # The same answer without the cut does not name it.
    found, _ = judge(history, [answer({(T, 0): row}, source_live=False)], held(12))
    assert [v.invariant for v in found] == ["silent_loss"], found
    # Another reported truncation over its offset (an unclean election on the source) does.
    found, _ = judge(history, [answer({(T, 0): row}, source_live=False)], held(12),
                     cuts={("A", T, 0): [(13, 15)]})  # fmt: skip
    assert found == []


def test_a_partition_missing_from_the_rows_is_an_anomaly_unless_created_after() -> None:
    history = [sent("p1", 3, 2_000, partition=1)]
    final = {**held(10), **held(3, partition=1)}
    rows = {(T, 0): LAGGING}
    # The run created the topic at t=500 ms, before the follower's listing of t=1000 ms.
    created = {("A", T): T0_WALL + 500}
    found, counts = judge(history, [answer(rows)], final, created=created)
    assert counts["failover_records_judged"] == 1
    assert [v.invariant for v in found] == ["silent_loss"], found
    assert f"no row for {T}-1" in found[0].detail, found[0].detail
    assert "topics from t=1000 ms" in found[0].detail, found[0].detail
    # The topic was created after the follower last listed its source's topics.
    found, _ = judge(history, [answer(rows)], final, created={("A", T): T0_WALL + 1_500})
    assert found == []
    # A topic the run did not create: acknowledged after that listing began
    # (it may be in a partition created since) is named, as the simulator
    # judges it; acknowledged before, it is not.
    assert judge(history, [answer(rows)], final)[0] == []
    late = answer(rows, topics_known_at_ms=T0_WALL + 2_500)
    assert len(judge(history, [late], final)[0]) == 1


def test_what_is_not_owed_or_not_judged() -> None:
    rows = {(T, 0): CAUGHT_UP}
    final = held(20)
    # Held at its offset; acknowledged after the answer; by another cluster;
    # outside the answer's namespaces: not judged at all.
    history = [
        sent("a5", 5, 1_000),
        sent("a21", 21, ANSWERED + 1),
        sent("c22", 22, 1_000, cluster="C"),
        Op("p", "source_producer", "A", "ok", 995, 1_000, Send("pay-x", 0, "x", 40)),
    ]
    found, counts = judge(history, [answer(rows)], final)
    assert found == [] and counts["failover_records_judged"] == 0
    lost = [sent("a20", 20, 1_000)]
    # The promoted cluster not live at the end, or its final log not read whole.
    for found, counts in (
        judge(lost, [answer(rows)], final, live=()),
        judge(lost, [answer(rows)], final, unreadable=(("B", T, 0),)),
    ):
        assert found == [] and counts["failover_records_not_judged"] == 1


def test_source_live_at__killed_unless_cut_or_restarted() -> None:
    kill = [("kill", ("A",), 1_000)]
    assert source_live_at([], "A", "ab", 5_000)
    assert not source_live_at(kill, "A", "ab", 5_000)
    assert not source_live_at([("lose", ("A",), 1_000)], "A", "ab", 5_000)
    # Killed after the failover began: live then.
    assert source_live_at(kill, "A", "ab", 500)
    assert source_live_at([*kill, ("restart", ("A",), 2_000)], "A", "ab", 5_000)
    # Through a cut the follower cannot tell (no reset reaches it).
    cut = [("cut", ("ab", "both"), 500), *kill]
    assert source_live_at(cut, "A", "ab", 5_000)
    assert not source_live_at([*cut, ("heal", ("ab",), 2_000)], "A", "ab", 5_000)
    assert not source_live_at([("cut", ("ac", "both"), 500), *kill], "A", "ab", 5_000)
    # Paused: it resets nothing. Another cluster killed: not the source.
    assert source_live_at([("pause", ("A",), 1_000)], "A", "ab", 5_000)
    assert source_live_at([("kill", ("C",), 1_000)], "A", "ab", 5_000)


def test_failover_answer__reads_the_admin_clients_answer() -> None:
    link = LinkInfo("ab", "id", "B", "A", "x:1", "ASYNC", "local_dials", "DISCONNECTED", 0, 1,
                    [], [], [])  # fmt: skip

    def row(p: int, leo: int, hw: int, known: bool, since: int) -> dict[str, object]:
        return {"topic": T, "partition": p, "log_end_offset": leo, "source_high_watermark": hw,
                "source_hw_known_at_ms": T0_WALL + 3_000, "lag_known": known,
                "unknown_since_ms": since, "lag_records": hw - leo if known else -1}  # fmt: skip

    cut: dict[str, object] = {
        "topic": T, "partition": 0, "truncate_to": 10, "records_removed": 4,
        "open_transactions": 1,
    }  # fmt: skip
    result = FailoverResult(
        link=link,
        abandoned=[row(0, 10, 20, False, T0_WALL + 3_000), row(1, -1, 0, False, -1)],
        namespaces=[NamespaceInfo("topic", "orders-", False), NamespaceInfo("group", "g-", False)],
        partitions=[row(0, 10, 20, True, T0_WALL + 3_000)],
        topics_known_at_ms=T0_WALL + 1_000,
        truncated=[cut],
    )
    got = failover_answer(result, "B", "A", "ab", 5_800, ANSWERED, False)
    assert got.rows == {
        (T, 0): FailoverRow(10, 20, T0_WALL + 3_000, True, T0_WALL + 3_000),
        (T, 1): FailoverRow(-1, 0, T0_WALL + 3_000, False, -1),
    }
    assert got.truncated == (FailoverCut(T, 0, 10, 4),)
    assert got.prefixes == ("orders-",) and got.topics_known_at_ms == T0_WALL + 1_000
    assert (got.promoted, got.source, got.link, got.source_live) == ("B", "A", "ab", False)


def test_the_runner_gathers_the_answer_and_judges_it(tmp_path: Path) -> None:
    """The runner's glue: a schedule failover's answer kept by
    `_record_failover` (whether the source counted as live from the steps
    applied before it), judged at the end with the run's wall clock, and
    counted in `checked`."""

    def judged(steps: list[AppliedStep]) -> tuple[list[Violation], dict[str, int]]:
        schedule = make_schedule(1, name="txn-failover", phase_s=10.0)
        run = Run(schedule, "replay", workdir=tmp_path)
        run.applied = steps
        run.daemons = {"B": Daemon("B", tmp_path)}  # never started: live, not lost
        link = LinkRun("ab", "A", "B", cast(FaultProxy, None))
        # B's last round (lag 0, known) just before the run's t=0; A then
        # acknowledged offset 20, which B's final log lacks.
        row = {"topic": T, "partition": 0, "log_end_offset": 20, "source_high_watermark": 20,
               "source_hw_known_at_ms": run.t0_wall_ms - 5, "lag_known": True,
               "unknown_since_ms": run.t0_wall_ms - 5, "lag_records": 0}  # fmt: skip
        info = LinkInfo("ab", "id", "B", "A", "x:1", "ASYNC", "local_dials", "DISCONNECTED", 0,
                        1, [], [], [])  # fmt: skip
        result = FailoverResult(
            link=info, abandoned=[], namespaces=[NamespaceInfo("topic", "orders-", False)],
            partitions=[row], topics_known_at_ms=run.t0_wall_ms - 100,
        )  # fmt: skip
        run._record_failover("B", link, result, run.recorder.now_ms())
        found = run.judge_failovers(History([sent("a20", 20, 0)]), held(20))
        return found, run.checked()

    lost = AppliedStep(Step(6.0, "lose", ("A",)), 0, 0)
    found, checked = judged([lost])
    assert [v.invariant for v in found] == ["silent_loss"], found
    assert checked["failover_records_judged"] == 1 and checked["failover_records_named"] == 0
    # The link was cut when A was lost: the follower could not tell.
    cut = AppliedStep(Step(2.0, "cut", ("ab", "both")), 0, 0)
    found, checked = judged([cut, lost])
    assert found == [] and checked["failover_records_named"] == 1, checked
