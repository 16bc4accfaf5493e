"""Sweeps: many simulator runs (scenarios x parameter grid x seeds), serially or on Spark.

    ccr-sim sweep SWEEP_FILE --master local[2] --out DIR
    ccr-sim sweep SWEEP_FILE --master spark://HOST:7077 --out DIR
    ccr-sim sweep SWEEP_FILE --serial --out DIR

Rules:
- A sweep file is TOML with exactly these top-level keys (anything else is an
  error naming the key):
    name        optional string (defaults to the file's stem)
    description optional string
    scenarios   non-empty list of distinct scenario names
    params      optional table: parameter name -> non-empty list of distinct
                scalars (string, integer, float, boolean); a bare scalar means a
                one-value list
    seeds       `{ start = S, count = N }` or a non-empty list of distinct integers
  For example:
    scenarios = ["dr-multi-zone", "failover"]
    seeds = { start = 1, count = 100 }
    [params]
    mode = ["ASYNC"]
    link_latency_ms = [1, 20]
- Expansion is deterministic: scenarios in file order, then the parameter grid
  (names sorted, each name's values in file order, last name varying fastest),
  then seeds in ascending `start..start+count-1` or list order. `run_index` is
  the position in that order; `run_id` is a hash of (scenario, params, seed),
  so one run keeps its id when the grid around it changes.
- A run is one call `run_fn(scenario, seed, params)`; the default `run_fn` is
  `sim.runner.run_summary`, which is pure and deterministic. An exception in a
  run is recorded in the run's `error` column (and fails the sweep's exit code)
  instead of failing the whole sweep, so one bad run cannot hide the others.
- Only `sim/spark_sweep.py` imports pyspark; `--serial` needs neither Spark nor
  Java. Both paths produce the same raw rows (`execute_run`) and go through the
  same driver-side code for the tables, so their outputs are comparable; the
  `sweep_digest` (sha256 over every run's id and trace digest, in run order)
  is equal for a serial and a Spark sweep of one file.
- Outputs under `--out DIR` (written by the driver, so DIR is a local path even
  when the runs execute on a remote cluster):
    DIR/runs/scenario=S/param_X=V/.../part-0.parquet
                                      one row per run (columns below), Hive-
                                      partitioned by scenario and grid parameter
                                      (sim/sweep_store.py; read it back whole or
                                      in parts with `sweep_store.read_runs`)
    DIR/aggregate/part-00000.parquet  one row per cell: a scenario with one set
                                      of grid parameters (its runs differ only
                                      by seed)
    DIR/sweep.json                    the sweep's manifest and digest, and the commit it ran
                                      on (`git rev-parse HEAD` before the first run, "-dirty"
                                      if tracked files differed, "unknown" without git; and
                                      `git_commit_at_end` when the checkout moved meanwhile)
  `runs/` and `aggregate/` are replaced as a whole; a directory there holding
  anything but files this module writes is refused, never deleted.
- With the default runner, scenario and parameter names are checked against
  `sim.scenario` (shipped scenarios, `PARAMS`) before any run starts.
- Exit code: 0 when no run had a violation or error, 1 otherwise (each failing
  run is printed with its replay command, `ccr-sim run SCENARIO --seed N
  [--param NAME=VALUE ...]`), 2 for a bad sweep file or option.

Per-run columns: run_index, run_id, scenario, seed, params_json, one
`param_<name>` column per grid parameter, topology, mode, trace_digest,
violation_count, violations_json, error, wall_ms (the only column that is not
deterministic), then one column per metric the runs reported (named as the
metric; `metric_<name>` if that would clash with a column above).

Aggregate columns: cell (its label: the scenario and every grid parameter,
`dr-multi-zone link_latency_ms=150 mode=ASYNC`), scenario, params_json,
mode, topology, runs, runs_with_violations, runs_with_errors, then for every
metric `<metric>_mean`, `_p50`, `_p99`, `_min` and `_max` over the runs of
that cell. Cells are in the order of their first run.

Theory of operation: `load_sweep` parses and validates the file into a
`SweepSpec`; `expand` turns it into a list of `Run`s; `run_sweep` executes them
(a plain loop for `serial`, else `sim.spark_sweep.execute_runs`, which spreads
them over a few partitions per core with `mapInPandas`), turns the raw rows
into the wide per-run table (`runs_table`) and the aggregate (`aggregate`),
writes Parquet and the manifest, and returns a `SweepResult`; the `sweep`
subcommand prints the aggregate and the failing runs.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sim import glossary, sweep_store
from sim import scenario as scenario_mod
from sim.sweep_runs import (
    RAW_FIELDS,
    Progress,
    Run,
    RunFn,
    Scalar,
    canonical_params,
    default_run_fn,
    execute_run,
    raw_frame,
    replay_command,
)

if TYPE_CHECKING:
    import pandas as pd

TOP_LEVEL_KEYS = ("name", "description", "scenarios", "params", "seeds")
SEED_KEYS = ("start", "count")
MAX_RUNS = 1_000_000
MAX_FAILURES_PRINTED = 20
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCENARIO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

AGG_LEAD = (
    "cell", "scenario", "params_json", "mode", "topology", "runs", "runs_with_violations",
    "runs_with_errors",
)
AGG_STATS = ("mean", "p50", "p99", "min", "max")


class SweepError(ValueError):
    """A sweep file or sweep option is invalid; the message names the bad key."""


@dataclass(frozen=True)
class SweepSpec:
    name: str
    description: str
    scenarios: tuple[str, ...]
    params: tuple[tuple[str, tuple[Scalar, ...]], ...]  # sorted by name
    seeds: tuple[int, ...]

    @property
    def run_count(self) -> int:
        grid = math.prod(len(values) for _, values in self.params)
        return len(self.scenarios) * grid * len(self.seeds)


@dataclass
class SweepResult:
    spec: SweepSpec
    out_dir: Path
    executor: str  # "serial" or the Spark master URL
    partitions: int
    wall_s: float  # executing the runs only (no session start-up, no writing)
    runs: pd.DataFrame
    aggregate: pd.DataFrame
    sweep_digest: str
    failures: list[dict[str, Any]]
    # The checkout the runs started from (`git_commit()` before the first run):
    # the code that ran, even if the checkout moves on while the sweep runs.
    git_commit: str = "unknown"

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0


# ---------------------------------------------------------------- parsing


def _type_name(value: object) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "string",
        list: "array",
        dict: "table",
    }.get(type(value), type(value).__name__)


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | int | float | bool)


def parse_sweep(data: Mapping[str, Any], default_name: str = "sweep") -> SweepSpec:
    """Validate a parsed sweep document; raise SweepError naming the bad key."""
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise SweepError(
                f"unknown key {key!r} (allowed top-level keys: {', '.join(TOP_LEVEL_KEYS)})"
            )

    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise SweepError(f"'name' must be a non-empty string, not {_type_name(name)}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise SweepError(f"'description' must be a string, not {_type_name(description)}")

    if "scenarios" not in data:
        raise SweepError("missing key 'scenarios' (a non-empty list of scenario names)")
    scenarios = data["scenarios"]
    if not isinstance(scenarios, list) or not scenarios:
        raise SweepError("'scenarios' must be a non-empty list of scenario names")
    for i, scenario in enumerate(scenarios):
        if not isinstance(scenario, str) or not _SCENARIO_RE.match(scenario):
            raise SweepError(f"'scenarios[{i}]' is not a scenario name: {scenario!r}")
    duplicates = sorted({s for s in scenarios if scenarios.count(s) > 1})
    if duplicates:
        raise SweepError(f"'scenarios' lists {', '.join(duplicates)} more than once")

    params_raw = data.get("params", {})
    if not isinstance(params_raw, dict):
        raise SweepError(f"'params' must be a table, not {_type_name(params_raw)}")
    params: list[tuple[str, tuple[Scalar, ...]]] = []
    for pname in sorted(params_raw):
        values = params_raw[pname]
        key = f"params.{pname}"
        if not _NAME_RE.match(pname):
            raise SweepError(f"'{key}': parameter names are identifiers ([A-Za-z_][A-Za-z0-9_]*)")
        if _is_scalar(values):
            values = [values]
        if not isinstance(values, list) or not values:
            raise SweepError(f"'{key}' must be a non-empty list of values")
        for i, value in enumerate(values):
            if not _is_scalar(value):
                raise SweepError(
                    f"'{key}[{i}]' must be a string, integer, float or boolean, "
                    f"not {_type_name(value)}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise SweepError(f"'{key}[{i}]' must be finite, not {value}")
        canon = [json.dumps(v) for v in values]
        repeated = sorted({c for c in canon if canon.count(c) > 1})
        if repeated:
            raise SweepError(f"'{key}' lists {', '.join(repeated)} more than once")
        params.append((pname, tuple(values)))

    if "seeds" not in data:
        raise SweepError("missing key 'seeds' ({ start = S, count = N } or a list of integers)")
    seeds_raw = data["seeds"]
    seeds: tuple[int, ...]
    if isinstance(seeds_raw, dict):
        for key in seeds_raw:
            if key not in SEED_KEYS:
                raise SweepError(f"unknown key 'seeds.{key}' (allowed: start, count)")
        for key in SEED_KEYS:
            if key not in seeds_raw:
                raise SweepError(f"missing key 'seeds.{key}'")
            value = seeds_raw[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise SweepError(f"'seeds.{key}' must be an integer, not {_type_name(value)}")
        start, count = seeds_raw["start"], seeds_raw["count"]
        if start < 0:
            raise SweepError(f"'seeds.start' must be >= 0, not {start}")
        if not 1 <= count <= MAX_RUNS:
            raise SweepError(f"'seeds.count' must be between 1 and {MAX_RUNS}, not {count}")
        seeds = tuple(range(start, start + count))
    elif isinstance(seeds_raw, list):
        if not seeds_raw:
            raise SweepError("'seeds' must not be an empty list")
        for i, value in enumerate(seeds_raw):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SweepError(f"'seeds[{i}]' must be an integer >= 0, not {value!r}")
        repeated_seeds = sorted({s for s in seeds_raw if seeds_raw.count(s) > 1})
        if repeated_seeds:
            raise SweepError(
                f"'seeds' lists {', '.join(map(str, repeated_seeds))} more than once"
            )
        seeds = tuple(seeds_raw)
    else:
        raise SweepError(
            "'seeds' must be a table { start = S, count = N } or a list of integers, "
            f"not {_type_name(seeds_raw)}"
        )

    spec = SweepSpec(name, description, tuple(scenarios), tuple(params), seeds)
    if spec.run_count > MAX_RUNS:
        raise SweepError(f"the sweep expands to {spec.run_count} runs (at most {MAX_RUNS})")
    return spec


def load_sweep(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and validate a sweep file; SweepError says which file and key."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise SweepError(f"{p}: no such sweep file") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{p}: not valid TOML: {e}") from None
    try:
        return parse_sweep(data, default_name=p.stem)
    except SweepError as e:
        raise SweepError(f"{p}: {e}") from None


def run_id_for(scenario: str, params: Mapping[str, Scalar], seed: int) -> str:
    text = json.dumps([scenario, canonical_params(params), seed], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def expand(spec: SweepSpec) -> list[Run]:
    """Every run of the sweep, in the stable order described in the module doc."""
    names = [name for name, _ in spec.params]
    grids = list(itertools.product(*(values for _, values in spec.params)))
    runs: list[Run] = []
    for scenario in spec.scenarios:
        for combo in grids:
            params = dict(zip(names, combo, strict=True))
            for seed in spec.seeds:
                runs.append(
                    Run(len(runs), run_id_for(scenario, params, seed), scenario, seed, params)
                )
    return runs


# ---------------------------------------------------------------- running


def execute_serial(
    runs: Sequence[Run], run_fn: RunFn, progress: Progress | None = None
) -> pd.DataFrame:
    rows = []
    for i, run in enumerate(runs):
        rows.append(execute_run(run, run_fn))
        if progress is not None:
            progress.update(i + 1, "runs")
    return raw_frame(rows)


# ---------------------------------------------------------------- tables


def _column_for_metric(metric: str, taken: set[str]) -> str:
    return metric if metric not in taken else f"metric_{metric}"


def runs_table(raw: pd.DataFrame, spec: SweepSpec) -> pd.DataFrame:
    """The wide per-run table: raw columns, `param_*` columns, one column per metric."""
    import pandas as pd

    raw = raw.sort_values("run_index", kind="stable").reset_index(drop=True)
    out = raw.drop(columns=["metrics_json"])
    params = [json.loads(p) for p in raw["params_json"]]
    param_cols: dict[str, Any] = {}
    for pname, values in spec.params:
        column = [p.get(pname) for p in params]
        if all(isinstance(v, bool) for v in values):
            param_cols[f"param_{pname}"] = pd.array(column, dtype="boolean")
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            param_cols[f"param_{pname}"] = pd.array(column, dtype="Int64")
        elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            param_cols[f"param_{pname}"] = pd.array(column, dtype="Float64")
        else:
            param_cols[f"param_{pname}"] = pd.array(
                [None if v is None else str(v) for v in column], dtype="string"
            )
    metrics = [json.loads(m) for m in raw["metrics_json"]]
    names = sorted({k for m in metrics for k in m})
    taken = set(out.columns) | set(param_cols)
    metric_cols: dict[str, Any] = {}
    for metric in names:
        column = [m.get(metric) for m in metrics]
        present = [v for v in column if v is not None]
        dtype = "Int64" if all(isinstance(v, int) for v in present) else "Float64"
        metric_cols[_column_for_metric(metric, taken)] = pd.array(column, dtype=dtype)
    at = out.columns.get_loc("params_json") + 1
    head, tail = out.iloc[:, :at], out.iloc[:, at:]
    return pd.concat(
        [head, pd.DataFrame(param_cols), tail, pd.DataFrame(metric_cols)], axis=1
    )


def metric_columns(runs: pd.DataFrame) -> list[str]:
    fixed = {name for name, _ in RAW_FIELDS}
    return [c for c in runs.columns if c not in fixed and not c.startswith("param_")]


def cell_label(scenario: str, params: Mapping[str, Any]) -> str:
    """A cell's name: its scenario and every grid parameter, `name=value`, sorted."""
    return " ".join([scenario, *(f"{k}={v}" for k, v in sorted(params.items()))])


def aggregate(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (scenario, grid parameters), in the order of its first
    run; see the module doc for the columns."""
    import pandas as pd

    metrics = metric_columns(runs)
    rows: list[dict[str, Any]] = []
    groups = runs.groupby(["scenario", "params_json"], sort=False, dropna=False)
    for (scenario, params_json), group in sorted(
        groups, key=lambda item: int(item[1]["run_index"].min())
    ):
        row: dict[str, Any] = {
            "cell": cell_label(str(scenario), json.loads(str(params_json))),
            "scenario": str(scenario),
            "params_json": str(params_json),
            "mode": str(group["mode"].iloc[0]),
            "topology": str(group["topology"].iloc[0]),
            "runs": len(group),
            "runs_with_violations": int((group["violation_count"] > 0).sum()),
            "runs_with_errors": int(group["error"].notna().sum()),
        }
        for metric in metrics:
            values = group[metric].dropna().astype("float64")
            empty = values.empty
            row[f"{metric}_mean"] = math.nan if empty else float(values.mean())
            row[f"{metric}_p50"] = math.nan if empty else float(values.quantile(0.5))
            row[f"{metric}_p99"] = math.nan if empty else float(values.quantile(0.99))
            row[f"{metric}_min"] = math.nan if empty else float(values.min())
            row[f"{metric}_max"] = math.nan if empty else float(values.max())
        rows.append(row)
    columns = list(AGG_LEAD)
    columns += [f"{m}_{s}" for m in metrics for s in AGG_STATS]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({"runs": "int64", "runs_with_violations": "int64",
                         "runs_with_errors": "int64"})


def sweep_digest(runs: pd.DataFrame) -> str:
    h = hashlib.sha256()
    for run_id, digest, error in zip(
        runs["run_id"], runs["trace_digest"], runs["error"], strict=True
    ):
        h.update(f"{run_id}:{digest}:{'' if error is None else error}\n".encode())
    return h.hexdigest()


def failures(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """The runs with violations or errors, in run order, with replay commands."""
    bad = runs[(runs["violation_count"] > 0) | runs["error"].notna()]
    out: list[dict[str, Any]] = []
    for row in bad.itertuples(index=False):
        violations = json.loads(row.violations_json)
        out.append(
            {
                "run_index": int(row.run_index),
                "run_id": row.run_id,
                "scenario": row.scenario,
                "seed": int(row.seed),
                "params": json.loads(row.params_json),
                "invariants": sorted({v["invariant"] for v in violations}),
                "error": row.error,
                "replay": replay_command(row.scenario, int(row.seed), json.loads(row.params_json)),
            }
        )
    return out


def format_aggregate(agg: pd.DataFrame, max_width: int = 120, legend: bool = True) -> str:
    """The aggregate's headline columns as plain text: one row per cell (named by
    its scenario and grid parameters) when that fits in `max_width`, else one row
    per figure and one numbered column per cell, the cells named below;
    then (with `legend`) what each metric column shows and what its "-" means, from
    `sim.glossary`."""
    if agg.empty:
        return "(no runs)"
    lead = ["runs", "runs_with_violations", "runs_with_errors"]
    metrics = sorted({c.rsplit("_", 1)[0] for c in agg.columns[len(AGG_LEAD):]})
    wanted = ["rpo_records_max", "rpo_ms_p99", "rpo_ms_max"]
    wanted += [f"{m}_max" for m in metrics if "duplicates" in m or "skips" in m]
    wanted += ["produce_latency_p99_ms_p50", "produce_latency_p99_ms_max"]
    wanted += [f"{m}_mean" for m in metrics if m.startswith("availability")]
    figures = lead + [c for c in wanted if c in agg.columns]
    table = agg[["cell", *figures]].rename(
        columns={"runs_with_violations": "violations", "runs_with_errors": "errors"}
    )
    header = list(table.columns)
    rows = [[_cell(v) for v in row] for row in table.itertuples(index=False)]
    text = _grid([header, *rows])
    if max(len(line) for line in text.splitlines()) > max_width:
        # Cells as numbered columns, named below the table (their names are long).
        transposed = [["cell", *(f"#{n}" for n in range(1, len(rows) + 1))]]
        transposed += [[name, *(r[i] for r in rows)] for i, name in enumerate(header) if i >= 1]
        text = _grid(transposed) + "\n" + "\n".join(
            f"#{n}: {r[0]}" for n, r in enumerate(rows, start=1)
        )
    if not legend:
        return text
    dashed = [c for i, c in enumerate(header) if any(r[i] == "-" for r in rows)]
    lines = glossary.column_legend(figures, missing=dashed)
    lines.append("(every metric: `ccr-sim glossary`)")
    return text + "\n\n" + "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _grid(rows: list[list[str]]) -> str:
    """Left-aligned first column, right-aligned others, two spaces between."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        rest = [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        cells = [r[0].ljust(widths[0]), *rest]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# ---------------------------------------------------------------- output


def git_commit(root: Path | None = None) -> str:
    """The commit of the project checkout (`git rev-parse HEAD`), with "-dirty" when
    tracked files differ from it; "unknown" without git or outside a checkout."""
    where = root if root is not None else Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=30
        )
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


def write_outputs(result: SweepResult, sweep_file: str | None) -> None:
    out = result.out_dir
    out.mkdir(parents=True, exist_ok=True)
    partitions = sweep_store.partition_columns(result.runs)
    sweep_store.replace_dir(
        out / "runs", lambda d: sweep_store.write_runs(d, result.runs, partitions)
    )
    sweep_store.replace_dir(
        out / "aggregate",
        lambda d: result.aggregate.to_parquet(d / "part-00000.parquet", index=False),
    )
    manifest = {
        "sweep": result.spec.name,
        "description": result.spec.description,
        "sweep_file": sweep_file,
        "scenarios": list(result.spec.scenarios),
        "params": {name: list(values) for name, values in result.spec.params},
        "seeds": {"first": result.spec.seeds[0], "count": len(result.spec.seeds)},
        "runs": len(result.runs),
        "runs_failed": len(result.failures),
        "executor": result.executor,
        "partitions": result.partitions,
        "wall_s": round(result.wall_s, 3),
        "sweep_digest": result.sweep_digest,
        "runs_partitioning": sweep_store.manifest_entry(result.runs, partitions),
        "git_commit": result.git_commit,
    }
    now = git_commit()
    if now != result.git_commit:
        # The checkout changed while the runs went on: say so, never pass the
        # later commit off as the code that ran.
        manifest["git_commit_at_end"] = now
    tmp = out / f".sweep.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(out / "sweep.json")


def _check_against_runner(spec: SweepSpec) -> None:
    """With the default runner, refuse scenario and parameter names it does not know
    (`sim.scenario.shipped()` and `sim.scenario.known_param`), before starting any run."""
    shipped = sorted(scenario_mod.shipped())
    unknown = [s for s in spec.scenarios if s not in shipped]
    if unknown:
        raise SweepError(
            f"'scenarios': unknown scenario {', '.join(map(repr, unknown))} "
            f"(shipped: {', '.join(shipped)}; see `ccr-sim list-scenarios`)"
        )
    known_params = sorted(scenario_mod.PARAMS)
    for name, _ in spec.params:
        if not scenario_mod.known_param(name):
            raise SweepError(
                f"'params.{name}': not a scenario parameter (known: {', '.join(known_params)}, "
                "and edge_<SOURCE>_<TARGET>_<key>)"
            )


def run_sweep(
    sweep_file: str | os.PathLike[str] | SweepSpec,
    master: str | None,
    out_dir: str | os.PathLike[str] | None,
    *,
    serial: bool = False,
    run_fn: RunFn | None = None,
    partitions: int | None = None,
    spark: Any = None,
    progress: bool = True,
    progress_stream: IO[str] | None = None,
    driver_host: str | None = None,
) -> SweepResult:
    """Execute every run of a sweep and (when `out_dir` is given) write the tables.

    `serial` runs a plain loop in this process; otherwise the runs go to Spark:
    to `spark` (an existing SparkSession, left running) if given, else to a new
    session on `master` that is stopped at the end. `run_fn` defaults to
    `sim.runner.run_summary`.
    """
    if isinstance(sweep_file, SweepSpec):
        spec, file_name = sweep_file, None
    else:
        spec, file_name = load_sweep(sweep_file), str(sweep_file)
    if run_fn is None:
        try:
            _check_against_runner(spec)
        except SweepError as e:
            raise SweepError(f"{file_name}: {e}" if file_name else str(e)) from None
        run_fn = default_run_fn()
    if partitions is not None and partitions < 1:
        raise SweepError(f"--partitions must be >= 1, not {partitions}")
    runs = expand(spec)
    started_at_commit = git_commit()
    bar = Progress(len(runs), f"sweep {spec.name}", progress_stream) if progress else None

    if serial:
        t0 = time.perf_counter()
        try:
            raw = execute_serial(runs, run_fn, bar)
        finally:
            if bar is not None:
                bar.close()
        wall, executor, used_partitions = time.perf_counter() - t0, "serial", 1
    else:
        import sim.spark_sweep as spark_sweep

        own = spark is None
        if own and bar is not None:
            bar.stream.write(f"sweep {spec.name}: starting Spark on {master or 'local[*]'}\n")
            bar.stream.flush()
        session = (
            spark_sweep.create_session(master or "local[*]", driver_host=driver_host)
            if own
            else spark
        )
        try:
            t0 = time.perf_counter()
            raw, used_partitions = spark_sweep.execute_runs(
                session, runs, run_fn, partitions=partitions, progress=bar
            )
            wall = time.perf_counter() - t0
            executor = spark_sweep.master_of(session)
        finally:
            if bar is not None:
                bar.close()
            if own:
                session.stop()

    table = runs_table(raw, spec)
    result = SweepResult(
        spec=spec,
        out_dir=Path(out_dir) if out_dir is not None else Path(),
        executor=executor,
        partitions=used_partitions,
        wall_s=wall,
        runs=table,
        aggregate=aggregate(table),
        sweep_digest=sweep_digest(table),
        failures=failures(table),
        git_commit=started_at_commit,
    )
    if out_dir is not None:
        write_outputs(result, file_name)
    return result


# ---------------------------------------------------------------- CLI


def report(result: SweepResult, out: IO[str]) -> None:
    """Print the aggregate, the failing runs with replay commands, and the totals."""
    spec = result.spec
    print(
        f"sweep {spec.name}: {len(result.runs)} runs on {result.executor} "
        f"({result.partitions} partitions) in {result.wall_s:.1f}s",
        file=out,
    )
    print(format_aggregate(result.aggregate), file=out)
    if result.failures:
        print(f"\n{len(result.failures)} run(s) failed; replay with:", file=out)
        for f in result.failures[:MAX_FAILURES_PRINTED]:
            why = f["error"] or "violated " + ", ".join(f"[{i}]" for i in f["invariants"])
            print(f"  {f['replay']}  # {why}", file=out)
        hidden = len(result.failures) - MAX_FAILURES_PRINTED
        if hidden > 0:
            print(
                f"  ... and {hidden} more (runs/ rows with violation_count > 0 or an error)",
                file=out,
            )
    print(f"sweep digest {result.sweep_digest}", file=out)
    if str(result.out_dir) not in ("", "."):
        print(f"wrote {result.out_dir}/runs, {result.out_dir}/aggregate", file=out)


def handle(args: argparse.Namespace) -> int:
    """The `sweep` subcommand: 0 all runs clean, 1 some run failed, 2 bad input."""
    try:
        result = run_sweep(
            args.sweep_file,
            args.master,
            args.out,
            serial=args.serial,
            partitions=args.partitions,
            progress=not args.no_progress,
            driver_host=args.driver_host,
        )
    except (SweepError, sweep_store.StoreError) as e:
        print(f"ccr-sim sweep: error: {e}", file=sys.stderr)
        return 2
    report(result, sys.stdout)
    if args.report:
        from sim.report import ReportError, write_report

        try:
            path = write_report(result.out_dir, result.out_dir / "report.html")
        except ReportError as e:
            print(f"ccr-sim sweep: error: --report: {e}", file=sys.stderr)
            return 2
        print(f"report {path}")
    return result.exit_code


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `ccr-sim sweep` on a subparsers object."""
    p = subparsers.add_parser(
        "sweep",
        help="run a sweep (scenarios x parameters x seeds) on Spark or serially",
        description=(
            "Expand SWEEP_FILE into runs and execute them on Spark (--master) or in a "
            "plain loop (--serial); write per-run and aggregate Parquet under --out. "
            "Exit code 1 if any run had a violation."
        ),
    )
    p.add_argument(
        "sweep_file", metavar="SWEEP_FILE", help="sweep TOML, e.g. sim/sweeps/small.toml"
    )
    p.add_argument(
        "--master",
        default="local[*]",
        help="Spark master URL: local[N] or spark://HOST:7077 (default: local[*])",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (Parquet)")
    p.add_argument("--serial", action="store_true", help="run in a plain Python loop, no Spark")
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="Spark partitions (default: 8x the default parallelism, at most one per run)",
    )
    p.add_argument(
        "--driver-host",
        default=None,
        help="address executors use to reach this driver (default: 127.0.0.1 for a "
        "local or loopback master, else Spark's choice)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument(
        "--report",
        action="store_true",
        help="also write DIR/report.html (as `ccr-sim report DIR -o DIR/report.html`)",
    )
    p.set_defaults(func=handle)

