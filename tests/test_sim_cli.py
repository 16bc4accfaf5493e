"""ccr-sim end to end, through a subprocess."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path


def ccr_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_list_scenarios__names_the_library() -> None:
    out = ccr_sim("list-scenarios")
    assert out.returncode == 0
    for name in ("dr-multi-zone", "catch-up-storm", "failover-writable", "unclean-election"):
        assert name in out.stdout


def test_run_json__summary_fields() -> None:
    out = ccr_sim("run", "failover-writable", "--seed", "7", "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert {"seed", "scenario", "trace_digest", "violations", "metrics", "topology", "mode"} <= set(
        s
    )
    assert s["seed"] == 7 and s["violations"] == [] and s["mode"] == "ASYNC"
    assert all(isinstance(v, int | float) for v in s["metrics"].values())


def test_run_with_violation__exit_1_and_replay_command(tmp_path: Path) -> None:
    never = tmp_path / "never-converges.toml"
    never.write_text(
        'name = "never-converges"\ndescription = "no link converges in 1 ms"\n'
        "[run]\nduration_ms = 1000\nliveness_ms = 1\n"
    )
    out = ccr_sim("run", str(never), "--seed", "1", "--out", str(tmp_path / "r.json"))
    assert out.returncode == 1
    assert f"replay with: ccr-sim replay {never} --seed 1" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["violations"]


def test_replay__prints_the_trace_and_the_same_digest() -> None:
    run = json.loads(ccr_sim("run", "unclean-election", "--seed", "3", "--json").stdout)
    replay = ccr_sim("replay", "unclean-election", "--seed", "3")
    assert "unclean election A:A-t0-0" in replay.stdout
    assert run["trace_digest"] in replay.stdout


def test_bad_scenario__exit_2_with_the_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[run]\nduration_ms = -5\n')
    out = ccr_sim("run", str(bad), "--seed", "1")
    assert out.returncode == 2
    assert "duration_ms = -5 must be >= 0" in out.stderr


def test_replay_command_reads_back_every_parameter_as_it_was() -> None:
    from sim.cli import _params
    from sim.runner import replay_command

    params = {"flag": True, "rate": 0.5, "mode": "ASYNC", "digits": "1", "words": "two words"}
    command = replay_command("s", 3, params)
    assert "--param flag=true" in command and "--param 'digits=\"1\"'" in command
    pairs = shlex.split(command)
    given = [pairs[i + 1] for i, p in enumerate(pairs) if p == "--param"]
    assert _params(given) == params


def test_every_run_parameter_is_in_the_docs_table() -> None:
    """docs/simulator.md's "Run parameters" table names every parameter that
    `--param` and a sweep's grid accept (sim.scenario.PARAMS)."""
    import re

    from sim.scenario import PARAMS

    text = (Path(__file__).resolve().parent.parent / "docs" / "simulator.md").read_text()
    section = text[text.index("\n## Run parameters") :]
    end = section.find("\n## ", 1)
    section = section[: end if end > 0 else None]
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert sorted(set(PARAMS) - named) == []
