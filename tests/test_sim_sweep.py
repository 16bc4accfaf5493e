"""`ccr-sim sweep`: sweep-file validation and expansion, the serial path, and a
small sweep on a local[2] Spark session (one session for the module).

Most tests inject `fake_run`, a tiny deterministic stand-in for
`sim.runner.run_summary`; `test_real_small_sweep_on_spark` runs the shipped
small sweep with the real runner.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim import sweep, sweep_store
from sim.sweep import SweepError, expand, load_sweep, parse_sweep, run_sweep

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = ROOT / "sim" / "sweeps"


def fake_run(scenario: str, seed: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Deterministic summary shaped like sim.runner.run_summary's."""
    params = params or {}
    key = json.dumps([scenario, seed, params], sort_keys=True)
    rng = random.Random(key)
    if scenario == "boom":
        raise RuntimeError(f"boom at seed {seed}")
    violations = []
    if scenario == "lossy" and seed % 4 == 0:
        violations.append({"invariant": "no-acked-loss", "detail": f"lost {seed} records"})
    return {
        "seed": seed,
        "scenario": scenario,
        "trace_digest": hashlib.sha256(key.encode()).hexdigest(),
        "violations": violations,
        "metrics": {
            "rpo_records": rng.randint(0, 50),
            "rpo_ms": rng.random() * 100 + float(params.get("link_latency_ms", 0)),
            "duplicates": rng.randint(0, 3),
            "skips": 0,
            "produce_latency_p99_ms": rng.random() * 10,
            "availability_produce": rng.random(),
        },
        "topology": "three-zone" if scenario == "alpha" else "two-cluster",
        "mode": str(params.get("mode", "ASYNC")),
    }


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


GRID = """
scenarios = ["alpha", "beta"]
seeds = { start = 3, count = 4 }
[params]
mode = ["ASYNC", "SYNC"]
link_latency_ms = [1, 20, 50]
"""

# ---------------------------------------------------------------- expansion


def test_expand_order_count_and_ids(tmp_path: Path) -> None:
    spec = load_sweep(write(tmp_path, GRID, "grid.toml"))
    assert spec.name == "grid"
    assert [name for name, _ in spec.params] == ["link_latency_ms", "mode"]
    runs = expand(spec)
    assert len(runs) == spec.run_count == 2 * 3 * 2 * 4
    assert [r.run_index for r in runs] == list(range(len(runs)))
    assert (runs[0].scenario, runs[0].params, runs[0].seed) == (
        "alpha", {"link_latency_ms": 1, "mode": "ASYNC"}, 3
    )
    assert [r.seed for r in runs[:5]] == [3, 4, 5, 6, 3]
    assert runs[4].params == {"link_latency_ms": 1, "mode": "SYNC"}
    assert runs[8].params == {"link_latency_ms": 20, "mode": "ASYNC"}
    assert runs[24].scenario == "beta"
    assert len({r.run_id for r in runs}) == len(runs)
    # Stable: same expansion again, and a run keeps its id when the grid grows.
    assert expand(load_sweep(tmp_path / "grid.toml")) == runs
    bigger = expand(parse_sweep({
        "scenarios": ["zeta", "alpha"],
        "seeds": [6, 3],
        "params": {"mode": ["ASYNC"], "link_latency_ms": [1]},
    }))
    assert [(r.scenario, r.seed) for r in bigger] == [
        ("zeta", 6), ("zeta", 3), ("alpha", 6), ("alpha", 3)
    ]
    assert bigger[3].run_id == runs[0].run_id


def test_bare_scalar_param_and_no_params() -> None:
    spec = parse_sweep({"scenarios": ["a"], "seeds": [1], "params": {"mode": "ASYNC"}})
    assert spec.params == (("mode", ("ASYNC",)),)
    runs = expand(parse_sweep({"scenarios": ["a"], "seeds": [2, 1]}))
    assert [(r.seed, r.params) for r in runs] == [(2, {}), (1, {})]


def test_shipped_sweeps_parse() -> None:
    assert load_sweep(SWEEPS / "bench-200.toml").run_count == 200
    assert load_sweep(SWEEPS / "bench-40.toml").run_count == 40
    small = load_sweep(SWEEPS / "small.toml")
    assert 1 <= small.run_count <= 40


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('scenarios = ["a"]\nseeds = [1]\nscenario = "x"\n', "unknown key 'scenario'"),
        ("seeds = [1]\n", "missing key 'scenarios'"),
        ("scenarios = []\nseeds = [1]\n", "'scenarios' must be a non-empty list"),
        ('scenarios = ["a", "a"]\nseeds = [1]\n', "'scenarios' lists a more than once"),
        ('scenarios = [1]\nseeds = [1]\n', "'scenarios[0]'"),
        ('scenarios = ["a"]\n', "missing key 'seeds'"),
        ('scenarios = ["a"]\nseeds = []\n', "'seeds' must not be an empty list"),
        ('scenarios = ["a"]\nseeds = [1, 1]\n', "'seeds' lists 1 more than once"),
        ('scenarios = ["a"]\nseeds = [-1]\n', "'seeds[0]'"),
        ('scenarios = ["a"]\nseeds = "1"\n', "'seeds' must be a table"),
        ('scenarios = ["a"]\nseeds = { start = 1 }\n', "missing key 'seeds.count'"),
        ('scenarios = ["a"]\nseeds = { start = 1, count = 0 }\n', "'seeds.count'"),
        ('scenarios = ["a"]\nseeds = { start = 1, count = "2" }\n', "'seeds.count' must be"),
        ('scenarios = ["a"]\nseeds = { start = 1, count = 2, step = 3 }\n', "'seeds.step'"),
        ('scenarios = ["a"]\nseeds = [1]\nparams = 3\n', "'params' must be a table"),
        ('scenarios = ["a"]\nseeds = [1]\n[params]\nmode = []\n', "'params.mode' must be"),
        ('scenarios = ["a"]\nseeds = [1]\n[params]\nx = [[1]]\n', "'params.x[0]'"),
        ('scenarios = ["a"]\nseeds = [1]\n[params]\nx = [1, 1]\n', "'params.x' lists 1"),
        ('scenarios = ["a"]\nseeds = [1]\n[params.x]\ny = 1\n', "'params.x' must be"),
        ('scenarios = ["a"]\nseeds = [1]\nname = 5\n', "'name' must be"),
        ('scenarios = ["a"\n', "not valid TOML"),
        (
            'scenarios = ["a"]\nseeds = { start = 0, count = 1000000 }\n[params]\nx = [1, 2]\n',
            "at most 1000000",
        ),
    ],
)
def test_validation_errors_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SweepError) as info:
        load_sweep(path)
    assert needle in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="no such sweep file"):
        load_sweep(tmp_path / "nope.toml")


# ---------------------------------------------------------------- serial path


def read_parquet(out: Path, table: str) -> pd.DataFrame:
    if table == "runs":
        return sweep_store.read_runs(out)
    return pd.read_parquet(out / table)


def test_serial_sweep_writes_tables(tmp_path: Path) -> None:
    sweep_file = write(
        tmp_path,
        'scenarios = ["alpha", "lossy", "boom"]\nseeds = { start = 1, count = 8 }\n'
        "[params]\nmode = [\"ASYNC\", \"SYNC\"]\nlink_latency_ms = [5]\n",
    )
    out = tmp_path / "out"
    err = io.StringIO()
    result = run_sweep(
        sweep_file, None, out, serial=True, run_fn=fake_run, progress_stream=err
    )
    assert "100% 48/48" in err.getvalue()
    runs = read_parquet(out, "runs")
    assert len(runs) == 48
    for column in (
        "run_index", "run_id", "scenario", "seed", "params_json", "param_mode",
        "param_link_latency_ms", "topology", "mode", "trace_digest", "violation_count",
        "violations_json", "error", "wall_ms", "rpo_records", "rpo_ms", "duplicates",
        "availability_produce",
    ):
        assert column in runs.columns, column
    assert list(runs["run_index"]) == list(range(48))
    assert runs["rpo_records"].dtype == "Int64"
    # 'boom' raises: recorded per run, not fatal. 'lossy' violates for seeds 4 and 8.
    boom = runs[runs["scenario"] == "boom"]
    assert boom["error"].str.startswith("RuntimeError: boom").all()
    assert len(result.failures) == 16 + 4
    assert result.exit_code == 1
    lossy = [f for f in result.failures if f["invariants"]]
    assert [(f["seed"], f["replay"]) for f in lossy[:2]] == [
        (4, "ccr-sim run lossy --seed 4 --param link_latency_ms=5 --param mode=ASYNC"),
        (8, "ccr-sim run lossy --seed 8 --param link_latency_ms=5 --param mode=ASYNC"),
    ]
    agg = read_parquet(out, "aggregate")
    # One row per cell: a scenario with one set of grid parameters, named by
    # both, in the order of its first run.
    assert list(agg["cell"]) == [
        f"{scenario} link_latency_ms=5 mode={mode}"
        for scenario in ("alpha", "lossy", "boom") for mode in ("ASYNC", "SYNC")
    ]
    assert list(agg[["mode", "topology"]].itertuples(index=False, name=None)) == [
        ("ASYNC", "three-zone"), ("SYNC", "three-zone"), ("ASYNC", "two-cluster"),
        ("SYNC", "two-cluster"), ("", ""), ("", ""),
    ]
    assert list(agg["runs"]) == [8] * 6
    assert list(agg["runs_with_violations"]) == [0, 0, 2, 2, 0, 0]
    assert agg["runs"].sum() == 48
    assert agg["runs_with_violations"].sum() == 4
    assert agg["runs_with_errors"].sum() == 16
    assert {"rpo_ms_p99", "duplicates_max", "availability_produce_mean"} <= set(agg.columns)
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["runs"] == 48 and manifest["sweep_digest"] == result.sweep_digest
    # A second sweep into the same directory replaces the tables.
    again = run_sweep(sweep_file, None, out, serial=True, run_fn=fake_run, progress=False)
    assert again.sweep_digest == result.sweep_digest
    assert len(read_parquet(out, "runs")) == 48


def test_format_aggregate_narrow_and_transposed() -> None:
    runs = sweep.runs_table(
        sweep.raw_frame([
            sweep.execute_run(r, fake_run)
            for r in expand(parse_sweep({"scenarios": ["alpha", "beta"], "seeds": [1, 2]}))
        ]),
        parse_sweep({"scenarios": ["alpha", "beta"], "seeds": [1, 2]}),
    )
    agg = sweep.aggregate(runs)
    wide = sweep.format_aggregate(agg, max_width=1000, legend=False).splitlines()
    assert wide[0].split()[:4] == ["cell", "runs", "violations", "errors"]
    assert [line.split()[0] for line in wide[1:]] == ["alpha", "beta"]
    assert len(wide) == 3
    # With the legend (the default), each metric column shown is explained
    # from the glossary after the table.
    legend = sweep.format_aggregate(agg, max_width=1000).splitlines()[4:]
    assert legend[0].startswith("columns")
    assert any(
        line.split()[:3] == ["availability_produce_mean", "mean", "of"] for line in legend
    )
    tall = sweep.format_aggregate(agg, max_width=60).splitlines()
    assert tall[0].split() == ["cell", "#1", "#2"]
    assert "#1: alpha" in tall and "#2: beta" in tall
    assert tall[1].split() == ["runs", "2", "2"]
    assert any(line.startswith("availability_produce_mean") for line in tall)


def test_replay_command_quotes_params() -> None:
    assert sweep.replay_command("a", 3, {"x": True, "y": 0.5, "z": "two words"}) == (
        "ccr-sim run a --seed 3 --param x=true --param y=0.5 --param 'z=two words'"
    )


def test_default_runner_checks_names(tmp_path: Path) -> None:
    bad_scenario = write(tmp_path, 'scenarios = ["no-such-scenario"]\nseeds = [1]\n', "a.toml")
    with pytest.raises(SweepError, match=r"a\.toml: 'scenarios': unknown scenario"):
        run_sweep(bad_scenario, None, None, serial=True, progress=False)
    bad_param = write(
        tmp_path,
        'scenarios = ["dr-multi-zone"]\nseeds = [1]\n[params]\nlink_latncy_ms = [1]\n',
        "b.toml",
    )
    with pytest.raises(SweepError, match=r"'params\.link_latncy_ms': not a scenario parameter"):
        run_sweep(bad_param, None, None, serial=True, progress=False)


def test_refuses_to_replace_foreign_directory(tmp_path: Path) -> None:
    sweep_file = write(tmp_path, 'scenarios = ["alpha"]\nseeds = [1]\n')
    mine = tmp_path / "out" / "runs" / "scenario=alpha" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    with pytest.raises(sweep_store.StoreError, match=r"did not write \(scenario=alpha/notes"):
        run_sweep(sweep_file, None, tmp_path / "out", serial=True, run_fn=fake_run,
                  progress=False)
    assert mine.exists()


def test_runs_are_partitioned_by_scenario_and_parameters(tmp_path: Path) -> None:
    """One directory per scenario and grid cell; read back whole or in parts, with
    the types the sweep wrote; a plain Parquet reader can read it too."""
    sweep_file = write(
        tmp_path,
        'scenarios = ["alpha", "lossy"]\nseeds = { start = 1, count = 3 }\n'
        '[params]\nmode = ["ASYNC", "SYNC"]\nlink_latency_ms = [5, 50]\n',
    )
    out = tmp_path / "out"
    result = run_sweep(sweep_file, None, out, serial=True, run_fn=fake_run, progress=False)
    cells = sorted(
        str(p.parent.relative_to(out / "runs")) for p in (out / "runs").rglob("*.parquet")
    )
    assert len(cells) == 8
    assert cells[0] == "scenario=alpha/param_link_latency_ms=5/param_mode=ASYNC"
    pd.testing.assert_frame_equal(sweep_store.read_runs(out), result.runs)
    part = sweep_store.read_runs(out, scenario="lossy", params={"link_latency_ms": 50})
    assert len(part) == 6
    assert set(part["param_mode"]) == {"ASYNC", "SYNC"}
    assert part["param_link_latency_ms"].dtype == "Int64"
    assert list(part["run_index"]) == sorted(part["run_index"])
    plain = pd.read_parquet(out / "runs" / "scenario=lossy")
    assert len(plain) == 12 and "rpo_records" in plain.columns
    with pytest.raises(sweep_store.StoreError, match="'param_nope' is not a partition"):
        sweep_store.read_runs(out, params={"nope": 1})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccr-sim")
    sweep.add_parser(p.add_subparsers(dest="command", required=True))
    return p


def test_cli_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sweep, "default_run_fn", lambda: fake_run)
    monkeypatch.setattr(sweep, "_check_against_runner", lambda spec: None)
    clean = write(tmp_path, 'scenarios = ["alpha"]\nseeds = { start = 1, count = 3 }\n', "c.toml")
    args = parser().parse_args(["sweep", str(clean), "--serial", "--out", str(tmp_path / "o1")])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "3 runs on serial" in text and "#1: alpha" in text  # the cell, by name

    bad = write(tmp_path, 'scenarios = ["lossy"]\nseeds = [1, 4]\n', "b.toml")
    args = parser().parse_args(
        ["sweep", str(bad), "--serial", "--no-progress", "--out", str(tmp_path / "o2")]
    )
    assert args.func(args) == 1
    text = capsys.readouterr().out
    assert "ccr-sim run lossy --seed 4" in text and "no-acked-loss" in text
    assert "--seed 1" not in text

    invalid = write(tmp_path, 'scenarios = ["a"]\nseed = [1]\n', "i.toml")
    args = parser().parse_args(["sweep", str(invalid), "--serial", "--out", str(tmp_path)])
    assert args.func(args) == 2
    assert "unknown key 'seed'" in capsys.readouterr().err


# ---------------------------------------------------------------- Spark, local[2]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason="needs PySpark (dev extra) and Java 17")
    from pyspark import cloudpickle

    from sim import spark_sweep

    # Executors import the project, not this test module: ship fake_run by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session = spark_sweep.create_session("local[2]")
    try:
        yield session
    finally:
        session.stop()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_spark_sweep_matches_serial(spark: Any, tmp_path: Path) -> None:
    sweep_file = write(tmp_path, GRID.replace('"beta"', '"lossy"'))
    out = tmp_path / "spark"
    err = io.StringIO()
    result = run_sweep(sweep_file, None, out, spark=spark, run_fn=fake_run,
                       progress_stream=err)
    assert result.executor == "local[2]"
    assert result.partitions == 16  # 8 per core
    assert "48/48" in err.getvalue()
    runs = read_parquet(out, "runs")
    assert len(runs) == 48
    assert list(runs["run_index"]) == list(range(48))
    assert {"run_id", "seed", "trace_digest", "rpo_ms", "param_mode"} <= set(runs.columns)
    agg = read_parquet(out, "aggregate")
    assert len(agg) == 12 and agg["runs"].sum() == 48  # 2 scenarios x 6 grid points
    assert agg["runs_with_violations"].sum() == 6  # lossy, seeds 4 (x6 grid points)
    assert result.exit_code == 1

    serial = run_sweep(sweep_file, None, tmp_path / "serial", serial=True, run_fn=fake_run,
                       progress=False)
    assert serial.sweep_digest == result.sweep_digest
    columns = [c for c in serial.runs.columns if c != "wall_ms"]
    pd.testing.assert_frame_equal(serial.runs[columns], result.runs[columns])
    pd.testing.assert_frame_equal(serial.aggregate, result.aggregate)


def test_spark_partitions_option(spark: Any, tmp_path: Path) -> None:
    sweep_file = write(tmp_path, 'scenarios = ["alpha"]\nseeds = { start = 1, count = 5 }\n')
    result = run_sweep(sweep_file, None, None, spark=spark, run_fn=fake_run, partitions=50,
                       progress=False)
    assert result.partitions == 5 and len(result.runs) == 5 and result.exit_code == 0


def test_shipped_sweeps_name_real_scenarios() -> None:
    for path in sorted(SWEEPS.glob("*.toml")):
        sweep._check_against_runner(load_sweep(path))


def test_real_small_sweep_on_spark(spark: Any, tmp_path: Path) -> None:
    """The real runner on local[2]: two shipped scenarios, 4 runs (the shipped
    small.toml is the same shape, larger; the README runs it)."""
    sweep_file = write(
        tmp_path,
        'name = "ci"\nscenarios = ["failover-writable", "dr-multi-zone"]\nseeds = [1, 2]\n'
        '[params]\nmode = ["ASYNC"]\nlink_latency_ms = [2]\n',
    )
    out = tmp_path / "small"
    result = run_sweep(sweep_file, None, out, spark=spark, progress=False)
    runs = read_parquet(out, "runs")
    assert len(runs) == 4
    assert list(runs["scenario"]) == ["failover-writable"] * 2 + ["dr-multi-zone"] * 2
    assert runs["error"].isna().all(), runs["error"].dropna().tolist()[:3]
    assert (runs["trace_digest"].str.len() == 64).all()
    assert "rpo_records" in runs.columns
    assert any("availability" in c for c in runs.columns)
    agg = read_parquet(out, "aggregate")
    assert set(zip(agg["mode"], agg["topology"], strict=True)) == {
        ("ASYNC", "chain"), ("ASYNC", "hub")
    }
    assert list(agg["cell"]) == [
        "failover-writable link_latency_ms=2 mode=ASYNC",
        "dr-multi-zone link_latency_ms=2 mode=ASYNC",
    ]
    assert agg["runs"].sum() == 4
    assert result.exit_code == (1 if result.failures else 0)
    # Deterministic: one run again in this process gives the same digest.
    from sim.runner import run_summary

    again = run_summary("dr-multi-zone", 2, {"mode": "ASYNC", "link_latency_ms": 2})
    assert again["trace_digest"] == runs["trace_digest"].iloc[3]


def test_the_manifest_names_the_commit_the_runs_started_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout that moves on while a long sweep runs: the manifest keeps the
    commit the runs started from and names the later one apart, instead of
    passing the later commit off as the code that ran."""
    sweep_file = write(tmp_path, 'scenarios = ["alpha"]\nseeds = { start = 1, count = 2 }\n')
    commits = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(sweep, "git_commit", lambda root=None: next(commits))
    out = tmp_path / "out"
    result = run_sweep(sweep_file, None, out, serial=True, run_fn=fake_run, progress=False)
    manifest = json.loads((out / "sweep.json").read_text())
    assert result.git_commit == manifest["git_commit"] == "aaaa"
    assert manifest["git_commit_at_end"] == "bbbb"
    monkeypatch.setattr(sweep, "git_commit", lambda root=None: "cccc")
    run_sweep(sweep_file, None, out, serial=True, run_fn=fake_run, progress=False)
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["git_commit"] == "cccc" and "git_commit_at_end" not in manifest
