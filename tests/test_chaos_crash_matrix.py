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


def test_what_an_answer_gives_up__ranges_of_offsets_not_counts() -> None:
    # A failover's abandoned rows give up the source's offsets from what the
    # follower can read to the source's high watermark, or upwards when the
    # lag is not known (what was acknowledged since it was not); a confirmed
    # recovery gives up its own cut.
    failover = {
        "abandoned": [
            {"partition": 0, "lag_known": True, "high_watermark": 10, "source_high_watermark": 13},
            {"partition": 1, "lag_known": False, "high_watermark": 7, "unknown_since_ms": 5_000},
            {"partition": 2, "lag_known": False, "high_watermark": 0, "unknown_since_ms": -1},
        ]
    }
    named = crash_matrix.named_by(failover, "B", "A")
    at = crash_matrix.Placement
    assert [named[0].covers(at("A", 0, o)) for o in (9, 10, 12, 13)] == [False, True, True, False]
    # Unknown since 5,000 ms: only what was acknowledged from then on.
    assert named[1].covers(at("A", 1, 7, 5_000)) and named[1].covers(at("A", 1, 10_000, 6_000))
    assert not named[1].covers(at("A", 1, 8, 4_999))
    assert named[2].covers(at("A", 2, 0, 1))  # never learned: anything
    assert not any(r.covers(at("B", 0, 11)) for r in named)  # B's own records: not A's range

    recover = {
        "confirmed": True,
        "partitions": [
            {
                "partition": 0,
                "truncate_to": 20,
                "local_log_end_offset": 23,
                "local_records_lost": 3,
            },
            {"partition": 1, "truncate_to": 5, "local_log_end_offset": 5, "local_records_lost": 0},
        ],
    }
    cut = crash_matrix.named_by(recover, "A", "B")
    assert [r.text for r in cut] == ["A orders-x-0 [20, 23) by recover"]
    assert crash_matrix.named_by({**recover, "confirmed": False}, "A", "B") == []
    assert crash_matrix.named_by(None, "A", "B") == []
