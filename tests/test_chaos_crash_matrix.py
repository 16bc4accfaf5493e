"""`ccr-chaos crash-matrix` (chaos/crash_matrix.py): its cases are every
checkpoint the core's procedures reach, and one case runs through the
command on real daemons.

The whole matrix (every checkpoint of reverse, failover and recover, either
side crashed) runs outside pytest, after the test suite in CI (.ci/run);
docs/chaos.md says how long it takes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from chaos import crash_matrix
from linkd import test_hooks
from sim import scenario as sc
from sim.world import Simulation

ROOT = Path(__file__).resolve().parent.parent

STORY = """
name = "story"
[run]
duration_ms = 14000
liveness_ms = 30000
[topology]
kind = "hub"
clusters = ["A", "B"]
[namespace]
topics = 2
partitions = 2
groups = true
"""
ACTIONS = {
    # Each procedure as the matrix runs it, on a topic and a group namespace.
    "reverse": [("A", "reverse", "")],
    "failover": [("B", "failover", "force = true")],
    "recover": [("B", "failover", "force = true"), ("A", "recover", "")],
}


def reached(procedure: str) -> list[str]:
    """The checkpoints the core's procedure reaches, in order, run in the
    simulator (the same core plans as the daemon)."""
    text = STORY
    for i, (cluster, kind, extra) in enumerate(ACTIONS[procedure]):
        text += (
            f'\n[[actions]]\nat_ms = {3000 + 2000 * i}\nkind = "{kind}"\n'
            f'cluster = "{cluster}"\nlink = "A-B"\n{extra}\n'
        )
    sim = Simulation(sc.parse(tomllib.loads(text)), 1)
    seen: list[str] = []
    original = sim.checkpoint_reached

    def record(cluster: str, link: str, point: str) -> None:
        seen.append(point)
        original(cluster, link, point)

    sim.checkpoint_reached = record  # type: ignore[method-assign]
    sim.run()
    assert sim.violations == [], sim.violations
    return [p for p in seen if p.startswith(f"{procedure}:")]


@pytest.mark.parametrize("procedure", crash_matrix.PROCEDURES)
def test_the_matrix_crashes_every_checkpoint_the_core_reaches_on_either_side(
    procedure: str,
) -> None:
    points = reached(procedure)
    assert points == crash_matrix.checkpoints(procedure)
    serve = list(test_hooks.SERVE_POINTS.get(procedure, ()))
    assert [(c.point, c.side) for c in crash_matrix.select(procedure, None, None)] == [
        *((p, side) for p in points for side in crash_matrix.SIDES),
        *((p, "remote") for p in serve),
    ]


def test_every_point_a_daemon_hook_fires_at_is_a_case() -> None:
    # The daemon reaches a procedure's checkpoints (procedure_shell) and the
    # points a remote serves (SERVE_POINTS); no other hook point exists.
    calls = []
    for path in (ROOT / "linkd").rglob("*.py"):
        calls += re.findall(r"test_hooks\.reached\(([^)]*)\)", path.read_text())
    assert sorted(calls) == ["request.point", "test_hooks.SERVE_PROMOTE"], calls
    served = {p for points in test_hooks.SERVE_POINTS.values() for p in points}
    assert served == {test_hooks.SERVE_PROMOTE}
    assert {c.point for c in crash_matrix.cases()} >= served


def test_one_case_through_the_command__a_remote_killed_mid_detach_ends_with_one_writer(
    tmp_path: Path,
) -> None:
    # B is killed by A's hook after A detached the first of two namespaces:
    # the step fails, the plan stays, B restarts, one re-run on A finishes.
    done = subprocess.run(
        [
            sys.executable, "-m", "chaos.cli", "crash-matrix", "--procedure", "reverse",
            "--point", "reverse:detach-mappings#1", "--side", "remote", "--jobs", "1", "--json",
        ],
        capture_output=True, text=True, cwd=str(ROOT), timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert out["summary"] == {**out["summary"], "cases": 1, "passed": 1, "failed": 0}
    case = out["cases"][0]
    assert case["writers"] == {"topic orders-": ["B"], "group app-": ["B"]}, case
    story = "\n".join(case["story"])
    assert "B exited with -9 at reverse:detach-mappings#1" in story, story
    assert "re-run reverse on A: exit 0 ok=True" in story, story


def test_a_case_judged_wrong_fails_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # The judge's verdict reaches the exit code and the summary line.
    failed = crash_matrix.CaseResult(
        crash_matrix.Case("reverse", "reverse:detach-mappings", "local"), False,
        ["topic 'orders-' writable on 0 clusters (none)"], 1.0,
    )  # fmt: skip
    monkeypatch.setattr(crash_matrix, "run_here", lambda case, keep=False: failed)
    from chaos import cli

    code = cli.main(["crash-matrix", "--point", "reverse:detach-mappings", "--side", "local",
                     "--jobs", "1"])  # fmt: skip
    assert code == 1


def test_what_an_answer_reports_lost__rows_with_a_known_lag_and_a_recovery_s_cut() -> None:
    # A failover's abandoned rows carry `lag_records` (-1 when the lag is not
    # known: no count is reported for it); a recovery's totals its cut.
    answer = {
        "abandoned": [{"lag_records": 3}, {"lag_records": -1}],
        "totals": {"local_records_lost": 2},
    }
    assert crash_matrix._lost(answer) == 5
    assert crash_matrix._lost(None) == 0
