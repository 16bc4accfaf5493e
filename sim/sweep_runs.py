"""One run of a sweep (sim/sweep.py), wherever it runs: the driver's loop or
a Spark worker (sim/spark_sweep.py). A `Run` names a scenario, a seed and
the grid parameters; `execute_run` runs it through `sim.runner` and returns
its raw row (`RAW_FIELDS`); `raw_frame` makes those rows a table of fixed
types; `Progress` draws the driver's progress bar. Both the sweep and the
Spark layer import this module; it imports neither."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from sim import runner

if TYPE_CHECKING:
    import pandas as pd

RunFn = Callable[[str, int, "dict[str, Any] | None"], "dict[str, Any]"]
Scalar = str | int | float | bool

# The raw row of one run, as produced by `execute_run` on whichever process ran
# it, with its Spark SQL type (sim/spark_sweep.py builds its schema from this).
RAW_FIELDS: tuple[tuple[str, str], ...] = (
    ("run_index", "bigint"),
    ("run_id", "string"),
    ("scenario", "string"),
    ("seed", "bigint"),
    ("params_json", "string"),
    ("topology", "string"),
    ("mode", "string"),
    ("trace_digest", "string"),
    ("violation_count", "int"),
    ("violations_json", "string"),
    ("metrics_json", "string"),
    ("error", "string"),
    ("wall_ms", "double"),
)
RAW_COLUMNS = tuple(name for name, _ in RAW_FIELDS)


@dataclass(frozen=True)
class Run:
    run_index: int
    run_id: str
    scenario: str
    seed: int
    params: dict[str, Scalar] = field(hash=False, compare=True)


def canonical_params(params: Mapping[str, Scalar]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


def replay_command(scenario: str, seed: int, params: Mapping[str, Scalar]) -> str:
    """`ccr-sim run SCENARIO --seed N [--param NAME=VALUE ...]` for one run."""
    command: str = runner.replay_command(scenario, seed, params, verb="run")
    return command


def default_run_fn() -> RunFn:
    """`sim.runner.run_summary`: one simulated run."""
    fn: RunFn = runner.run_summary
    return fn


def execute_run(run: Run, run_fn: RunFn) -> dict[str, Any]:
    """Run one simulation and return its raw row (RAW_COLUMNS); never raises."""
    t0 = time.perf_counter()
    row: dict[str, Any] = {
        "run_index": run.run_index,
        "run_id": run.run_id,
        "scenario": run.scenario,
        "seed": run.seed,
        "params_json": canonical_params(run.params),
        "topology": "",
        "mode": "",
        "trace_digest": "",
        "violation_count": 0,
        "violations_json": "[]",
        "metrics_json": "{}",
        "error": None,
        "wall_ms": 0.0,
    }
    try:
        summary = run_fn(run.scenario, run.seed, dict(run.params))
        violations = [
            {"invariant": str(v.get("invariant", "")), "detail": str(v.get("detail", ""))}
            for v in summary.get("violations", [])
        ]
        metrics = {
            str(k): v
            for k, v in summary.get("metrics", {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        row.update(
            topology=str(summary.get("topology", "")),
            mode=str(summary.get("mode", "")),
            trace_digest=str(summary.get("trace_digest", "")),
            violation_count=len(violations),
            violations_json=json.dumps(violations, sort_keys=True),
            metrics_json=json.dumps(metrics, sort_keys=True),
        )
    except Exception as e:  # recorded per run; see the module doc
        row["error"] = f"{type(e).__name__}: {e}"
    row["wall_ms"] = (time.perf_counter() - t0) * 1000.0
    return row


def raw_frame(rows: Sequence[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Raw rows (dicts, or a DataFrame of them) with RAW_COLUMNS in order and fixed
    dtypes; a missing error is None, never NaN."""
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        frame = rows.reindex(columns=list(RAW_COLUMNS))
    else:
        frame = pd.DataFrame(list(rows), columns=list(RAW_COLUMNS))
    frame = frame.astype(
        {
            "run_index": "int64",
            "seed": "int64",
            "violation_count": "int32",
            "wall_ms": "float64",
        }
    )
    frame["error"] = [None if pd.isna(e) else str(e) for e in frame["error"]]
    return frame.astype({"error": "object"})


class Progress:
    """A text progress bar on a stream: redrawn in place on a terminal, else
    one line per 10% step (so CI logs stay short)."""

    def __init__(self, total: int, label: str, stream: IO[str] | None = None) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self._last: tuple[int, int] = (-1, -1)

    def update(self, done: int, detail: str = "") -> None:
        done = min(max(done, 0), self.total)
        step = done * 10 // self.total
        key = (done, 0) if self.tty else (step, 0)
        if key == self._last:
            return
        self._last = key
        width = 30
        filled = done * width // self.total
        bar = "#" * filled + "." * (width - filled)
        pct = 100 * done // self.total
        line = (
            f"{self.label} [{bar}] {pct:3d}% {done}/{self.total}"
            f"{' ' + detail if detail else ''} {time.monotonic() - self.t0:6.1f}s"
        )
        if self.tty:
            self.stream.write("\r" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._last != (-1, -1):
            self.stream.write("\n")
            self.stream.flush()
