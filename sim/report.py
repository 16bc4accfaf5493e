"""`ccr-sim report`: one self-contained HTML file from a sweep's output directory.

    ccr-sim report SWEEP_OUT_DIR -o report.html [--timeline RUN_ID ...]

Rules:
- The runs are read only through `load_runs` (`sim.sweep_store.read_runs`:
  the Hive-partitioned table with its types restored, in run order).
- One file, nothing fetched: figures are PNGs (matplotlib, Agg backend) embedded
  as base64 data URIs; the style sheet is inline; there is no script.
- A cell is one scenario with one parameter combination; its runs differ only
  by seed. Per cell and metric: n, mean with a 95% confidence interval (a
  percentile bootstrap over the seeds, 2,000 resamples, fixed seed
  `BOOTSTRAP_SEED`, so the report is deterministic), min, median, max. A count
  of bad events (`glossary.Entry.zero_bound`) that is 0 in each of n seeds, and
  the runs with violations when none has one, are stated with the bound n
  clean seeds give: below 1 - 0.05^(1/n) per seed at 95% confidence, about
  3/n (the rule of three) from 30 seeds on.
- Timelines (link states per link, faults as shaded bars, operator actions,
  client operations and their outcomes, over virtual time) come from running
  the run again in this process (`sim.timeline.record`); the replay's trace
  digest is compared with the sweep's and the report says whether they match.
  Default runs: those with violations (at most `MAX_TIMELINES`), else the
  first seed of each cell.
- Every figure names its seeds, the sweep file, the git commit the sweep ran
  on (sweep.json) and the command that reproduces one run.

Theory of operation: `build` loads the manifest and the runs, groups the runs
into `Cell`s, computes `MetricStats` per cell and metric, draws the figures
and renders the HTML; `write_report` writes it atomically.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim import glossary, sweep_store
from sim.glossary import Group
from sim.sweep_runs import replay_command

if TYPE_CHECKING:
    import pandas as pd

    from sim.timeline import Timeline

BOOTSTRAP_SEED = 20_240_917
BOOTSTRAP_RESAMPLES = 2_000
MAX_TIMELINES = 8
FIXED_COLUMNS = frozenset({
    "run_index", "run_id", "scenario", "seed", "params_json", "topology", "mode",
    "trace_digest", "violation_count", "violations_json", "error", "wall_ms",
})
# The metric groups drawn as distributions, in order, and their panels'
# titles; the others are in the cell's table only.
DRAWN: tuple[tuple[Group, str], ...] = (
    (Group.RPO, "RPO at failover"),
    (Group.CONSUMERS, "consumers across failover"),
    (Group.AVAILABILITY, "availability per client class"),
    (Group.LATENCY, "produce latency"),
)
STATE_COLOURS = {
    "DISCONNECTED": "#d62728",
    "CATCHING_UP": "#ff7f0e",
    "FOLLOWING": "#2ca02c",
    "SYNCING": "#bcbd22",
    "IN_SYNC": "#1f77b4",
    "OUT_OF_SYNC": "#9467bd",
}
OUTCOME_STYLE = {"ok": ("#2ca02c", "o"), "fail": ("#d62728", "x"), "info": ("#ff7f0e", "^")}


class ReportError(ValueError):
    """The output directory cannot be reported on; the message says why."""


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class Manifest:
    name: str
    description: str
    sweep_file: str
    git_commit: str
    executor: str
    sweep_digest: str


def load_manifest(out_dir: str | os.PathLike[str]) -> Manifest:
    path = Path(out_dir) / "sweep.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(
            f"{path}: missing (is {out_dir} a `ccr-sim sweep --out` directory?)"
        ) from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON: {e}") from None
    return Manifest(
        name=str(data.get("sweep", "")),
        description=str(data.get("description", "")),
        sweep_file=str(data.get("sweep_file") or "(none)"),
        git_commit=str(data.get("git_commit") or "unknown"),
        executor=str(data.get("executor", "")),
        sweep_digest=str(data.get("sweep_digest", "")),
    )


def load_runs(out_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The per-run table of a sweep, in run order, with the types the sweep wrote
    (`sim.sweep_store.read_runs`)."""
    try:
        return sweep_store.read_runs(out_dir)
    except sweep_store.StoreError as exc:
        raise ReportError(str(exc)) from exc


def metric_names(runs: pd.DataFrame) -> list[str]:
    """The metric columns, in glossary order (group, then name)."""
    names = [
        c for c in runs.columns
        if c not in FIXED_COLUMNS and not c.startswith("param_") and runs[c].notna().any()
    ]
    order = {g: i for i, g in enumerate(Group)}
    return sorted(names, key=lambda m: (order[glossary.describe(_metric(m)).group], m))


def _metric(column: str) -> str:
    """A metric column's metric name (runs_table prefixes `metric_` on a clash)."""
    if glossary.lookup(column) is None and column.startswith("metric_"):
        return column.removeprefix("metric_")
    return column


# ---------------------------------------------------------------- statistics


@dataclass(frozen=True)
class MetricStats:
    metric: str
    values: tuple[tuple[int, float], ...]  # (seed, value) of the runs that reported it
    mean: float
    ci: tuple[float, float] | None  # None: fewer than 2 values
    minimum: float
    median: float
    maximum: float

    @property
    def n(self) -> int:
        return len(self.values)


def bootstrap_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean (deterministic: a fixed seed)."""
    import numpy as np

    if len(values) < 2:
        return None
    data = np.asarray(values, dtype="float64")
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, len(data), size=(BOOTSTRAP_RESAMPLES, len(data)))
    means = data[picks].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def rule_of_three(n: int) -> str:
    """The bound n clean seeds give on the per-seed chance of an event: 3/n (the
    rule of three) from 30 seeds on; below that, the exact bound 1 - 0.05^(1/n),
    of which 3/n is the large-n approximation (3/n is 1 or more for n <= 3)."""
    if n >= 30:
        return f"0 of {n}: below {3 / n:.2g} per seed at 95% (rule of three: 3/n)"
    exact = 1 - 0.05 ** (1 / n)
    return (
        f"0 of {n}: below {exact:.2g} per seed at 95% (exact: 1 - 0.05^(1/n); "
        f"too few seeds for the rule of three, 3/n)"
    )


def metric_stats(cell_runs: pd.DataFrame, metric: str) -> MetricStats | None:
    """The statistics of one metric over a cell's runs (None: no run reported it)."""
    import numpy as np
    import pandas as pd

    pairs = [
        (int(seed), float(v))
        for seed, v in zip(cell_runs["seed"], cell_runs[metric], strict=True)
        if not pd.isna(v)
    ]
    if not pairs:
        return None
    values = [v for _, v in pairs]
    return MetricStats(
        metric=metric,
        values=tuple(pairs),
        mean=float(np.mean(values)),
        ci=bootstrap_ci(values),
        minimum=min(values),
        median=float(np.median(values)),
        maximum=max(values),
    )


# ---------------------------------------------------------------- cells


@dataclass(frozen=True)
class Cell:
    scenario: str
    params: dict[str, Any]
    runs: pd.DataFrame  # this cell's rows, in run order

    @property
    def seeds(self) -> list[int]:
        return [int(s) for s in self.runs["seed"]]

    @property
    def title(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.scenario}" + (f" ({params})" if params else "")

    @property
    def anchor(self) -> str:
        return "cell-" + str(int(self.runs["run_index"].iloc[0]))

    def replay(self, seed: int) -> str:
        return replay_command(self.scenario, seed, self.params)


def cells(runs: pd.DataFrame) -> list[Cell]:
    """One cell per (scenario, parameters), in order of their first run."""
    out: list[Cell] = []
    for (scenario, params_json), group in runs.groupby(
        ["scenario", "params_json"], sort=False, dropna=False
    ):
        out.append(Cell(str(scenario), json.loads(str(params_json)), group))
    return sorted(out, key=lambda c: int(c.runs["run_index"].iloc[0]))


def seeds_text(seeds: Sequence[int]) -> str:
    ordered = sorted(seeds)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"seeds {ordered[0]}-{ordered[-1]} ({len(ordered)})"
    return "seeds " + ", ".join(map(str, ordered))


# ---------------------------------------------------------------- figures


def _figure_png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _provenance(fig: Any, manifest: Manifest, seeds: str, command: str) -> None:
    fig.text(
        0.01, 0.005,
        f"{seeds} | sweep {manifest.sweep_file} | commit {manifest.git_commit[:12]} | "
        f"one run: {command}",
        fontsize=7, color="#444444", ha="left", va="bottom",
    )


def distribution_figure(
    cell: Cell, stats: dict[str, MetricStats], manifest: Manifest
) -> str | None:
    """Per drawn group present: each seed's value as a dot, the mean and its
    interval as a bar. None if the cell has none of the drawn groups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, list[str]]] = []
    for group, title in DRAWN:
        drawn = [m for m in stats if glossary.describe(_metric(m)).group is group
                 and not m.startswith("ops_")]
        units = {glossary.describe(_metric(m)).unit for m in drawn}
        if group is Group.RPO:  # the loss first, then what the failover reported
            order = list(RPO_TITLES)
            drawn.sort(key=lambda m: order.index(u) if (
                u := glossary.describe(_metric(m)).unit) in order else len(order))
        by_title: dict[str, list[str]] = {}
        for m in drawn:
            by_title.setdefault(panel_title(group, title, m, len(units) > 1), []).append(m)
        panels.extend(by_title.items())
    if not panels:
        return None
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(12.0, 0.6 + 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (title, metrics) in zip(axes.flat, panels, strict=False):
        for x, m in enumerate(metrics):
            s = stats[m]
            ys = [v for _, v in s.values]
            offsets = [((i % 7) - 3) * 0.05 for i in range(len(ys))]
            ax.scatter([x + o for o in offsets], ys, s=18, color="#1f77b4", alpha=0.7, zorder=3)
            if s.ci is not None:
                ax.errorbar([x + 0.28], [s.mean], yerr=[[s.mean - s.ci[0]], [s.ci[1] - s.mean]],
                            fmt="D", color="#d62728", markersize=5, capsize=4, zorder=4)
            else:
                ax.scatter([x + 0.28], [s.mean], marker="D", color="#d62728", zorder=4)
        ax.set_xticks(range(len(metrics)))
        ax.set_xticklabels([_short(m) for m in metrics], rotation=20, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(metrics) - 0.3)
        ax.margins(y=0.15)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(glossary.describe(_metric(metrics[0])).unit.value, fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{cell.title}: one dot per seed; red: mean, 95% bootstrap CI", fontsize=10)
    _provenance(fig, manifest, seeds_text(cell.seeds), cell.replay(cell.seeds[0]))
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    return _figure_png(fig)


# Panels named for what they count: a unit alone ("RPO at failover
# (partitions)") read as a loss counted in partitions.
RPO_TITLES = {
    glossary.Unit.RECORDS: "RPO: acknowledged records lost",
    glossary.Unit.MS: "RPO: time the lost records span",
    glossary.Unit.PARTITIONS: "partitions the failover reported at risk",
}


def panel_title(group: Group, title: str, metric: str, several_units: bool) -> str:
    """The panel a drawn metric goes to. RPO metrics each get a panel named
    for what they count; produce latency's maximum gets its own panel, apart
    from the percentiles (one slow request would flatten them on a shared
    scale); other groups share a panel per unit."""
    unit = glossary.describe(_metric(metric)).unit
    if group is Group.RPO and unit in RPO_TITLES:
        return RPO_TITLES[unit]
    if group is Group.LATENCY:
        slowest = "_max" in metric
        return f"{title}: {'the slowest request' if slowest else 'percentiles'} ({unit.value})"
    return f"{title} ({unit.value})" if several_units else title


def _short(metric: str) -> str:
    for prefix in ("availability_", "produce_latency_", "consumer_"):
        if metric.startswith(prefix) and metric != prefix:
            return metric.removeprefix(prefix)
    return metric


# The figures the report opens with, one panel each, when the runs report them.
COMPARED = (
    "rpo_records", "rpo_ms", "consumer_duplicates_across_failover",
    "consumer_skips_across_failover", "produce_latency_p99_ms", "failover_abandoned_partitions",
)


def cell_labels(all_cells: Sequence[Cell]) -> list[str]:
    """Each cell's short name: its scenario and the parameters that differ
    between cells (those the sweep varies), `name=value`."""
    keys = sorted({k for c in all_cells for k in c.params})
    varying = [k for k in keys if len({repr(c.params.get(k)) for c in all_cells}) > 1]
    return [" ".join([c.scenario, *(f"{k}={c.params[k]}" for k in varying if k in c.params)])
            for c in all_cells]


def comparison_figure(
    all_cells: Sequence[Cell], metrics: Sequence[str], manifest: Manifest
) -> str | None:
    """The cells side by side: per headline metric (`COMPARED`, those the runs
    report) one panel, a row per cell, each seed's value as a dot and the mean
    with its 95% interval. None if the runs report none of them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in COMPARED if m in metrics]
    if not shown:
        return None
    labels = cell_labels(all_cells)
    columns = min(3, len(shown))
    rows = math.ceil(len(shown) / columns)
    height = 0.9 + rows * (0.8 + 0.42 * len(all_cells))
    fig, axes = plt.subplots(rows, columns, figsize=(13.0, height), squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for i, (ax, m) in enumerate(zip(axes.flat, shown, strict=False)):
        for y, cell in enumerate(all_cells):
            s = metric_stats(cell.runs, m)
            if s is None:
                ax.text(0.0, y, " not reported", fontsize=7, va="center", color="#777777")
                continue
            xs = [v for _, v in s.values]
            ax.scatter(xs, [y + ((j % 5) - 2) * 0.06 for j in range(len(xs))], s=14,
                       color="#1f77b4", alpha=0.7, zorder=3)
            if s.ci is not None:
                ax.errorbar([s.mean], [y - 0.3], xerr=[[s.mean - s.ci[0]], [s.ci[1] - s.mean]],
                            fmt="D", color="#d62728", markersize=4, capsize=3, zorder=4)
        ax.set_yticks(range(len(all_cells)))
        ax.set_yticklabels(labels if i % columns == 0 else [""] * len(labels), fontsize=8)
        ax.set_ylim(len(all_cells) - 0.5, -0.8)
        entry = glossary.describe(_metric(m))
        ax.set_title(f"{m} ({entry.unit.value})", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.1)
    fig.suptitle("The cells compared: one dot per seed; red: mean and 95% bootstrap CI",
                 fontsize=10)
    seeds = sorted({s for c in all_cells for s in c.seeds})
    _provenance(fig, manifest, seeds_text(seeds), all_cells[0].replay(all_cells[0].seeds[0]))
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    return _figure_png(fig)


def timeline_figure(t: Timeline, manifest: Manifest, command: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    processes = sorted({op.process for op in t.ops})
    rows = [*t.link_rows, *t.fault_rows, *processes]
    height = 1.6 + 0.32 * max(len(rows), 3)
    fig, ax = plt.subplots(figsize=(12.0, height))
    y = {row: len(rows) - 1 - i for i, row in enumerate(rows)}
    for span in t.links:
        ax.broken_barh([(span.start_ms, max(span.end_ms - span.start_ms, 1))],
                       (y[span.row] - 0.35, 0.7),
                       facecolors=STATE_COLOURS.get(span.value, "#7f7f7f"))
    for span in t.faults:
        ax.broken_barh([(span.start_ms, max(span.end_ms - span.start_ms, 1))],
                       (y[span.row] - 0.35, 0.7), facecolors="#555555")
        ax.axvspan(span.start_ms, span.end_ms, color="#d62728", alpha=0.07, lw=0)
    by_outcome: dict[str, tuple[list[int], list[float]]] = {}
    for op in t.ops:
        xs, ys = by_outcome.setdefault(op.type, ([], []))
        xs.append(op.complete_ms)
        ys.append(y[op.process])
    for outcome in ("ok", "info", "fail"):  # the bad outcomes drawn on top
        if outcome not in by_outcome:
            continue
        xs, ys = by_outcome[outcome]
        colour, symbol = OUTCOME_STYLE.get(outcome, ("#7f7f7f", "."))
        ax.scatter(xs, ys, s=9, color=colour, marker=symbol, linewidths=0.8, alpha=0.6,
                   rasterized=True, label=f"op {outcome} ({len(xs)})")
    for i, action in enumerate(t.actions):
        ax.axvline(action.at_ms, color="#000000", ls="--", lw=0.8)
        ax.text(action.at_ms, len(rows) - 0.5 + 0.45 * (i % 3), " " + action.label,
                fontsize=7, ha="left", va="bottom")
    ax.axvline(t.safety_end_ms, color="#1f77b4", ls=":", lw=1.2)
    ax.text(t.safety_end_ms, -0.9, " liveness phase: everything heals", fontsize=7,
            color="#1f77b4", va="top")
    ax.set_yticks([y[r] for r in rows])
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_ylim(-1.2, len(rows) + (1.2 if t.actions else 0.4))
    ax.set_xlim(0, max(t.end_ms, 1))
    ax.set_xlabel("virtual time (ms)", fontsize=8)
    ax.tick_params(axis="x", labelsize=8)
    handles = [Patch(color=c, label=s) for s, c in STATE_COLOURS.items()
               if any(sp.value == s for sp in t.links)]
    handles.append(Patch(color="#555555", label="fault (shaded across)"))
    op_handles, _labels = ax.get_legend_handles_labels()
    ax.legend(handles=handles + op_handles, fontsize=7, loc="upper left",
              bbox_to_anchor=(1.005, 1.0), frameon=False)
    params = ", ".join(f"{k}={v}" for k, v in t.params.items())
    fig.suptitle(f"{t.scenario} seed {t.seed}" + (f" ({params})" if params else "")
                 + ": links, faults, client operations", fontsize=10)
    _provenance(fig, manifest, f"seed {t.seed}", command)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    return _figure_png(fig)


# ---------------------------------------------------------------- HTML

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.88em; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th { background: #f3f3f3; }
code, .cmd { font-family: ui-monospace, monospace; font-size: 0.9em; }
.cmd { background: #f6f6f6; padding: 2px 6px; display: inline-block; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; }
.bad { color: #b00020; font-weight: bold; } .good { color: #1b6e20; }
.muted { color: #666; font-size: 0.9em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _num(value: float) -> str:
    if math.isnan(value):
        return "-"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _stats_table(stats: dict[str, MetricStats], n_runs: int) -> str:
    rows = []
    for m, s in stats.items():
        e = glossary.describe(_metric(m))
        ci = "n/a (1 seed)" if s.ci is None else f"[{_num(s.ci[0])}, {_num(s.ci[1])}]"
        note = ""
        if e.zero_bound and s.maximum == 0:
            note = rule_of_three(s.n)
        elif s.n < n_runs:
            note = f"reported by {s.n} of {n_runs} runs; -: {e.missing}"
        rows.append(
            f"<tr><td><code>{_e(m)}</code></td><td>{_e(e.unit.value)}</td>"
            f"<td>{_e(glossary.explain(_metric(m)))}</td><td class=num>{s.n}</td>"
            f"<td class=num>{_num(s.mean)}</td><td class=num>{_e(ci)}</td>"
            f"<td class=num>{_num(s.minimum)}</td><td class=num>{_num(s.median)}</td>"
            f"<td class=num>{_num(s.maximum)}</td><td>{_e(note)}</td></tr>"
        )
    return (
        "<table><tr><th>metric</th><th>unit</th><th>meaning</th><th>n</th><th>mean</th>"
        "<th>95% CI of the mean</th><th>min</th><th>median</th><th>max</th><th>note</th></tr>"
        + "".join(rows) + "</table>"
    )


def _violations_html(cell: Cell) -> str:
    n = len(cell.runs)
    bad = cell.runs[cell.runs["violation_count"] > 0]
    errors = cell.runs[cell.runs["error"].notna()] if "error" in cell.runs else cell.runs[:0]
    parts = []
    if bad.empty:
        parts.append(f"<p class=good>Runs with violations: {_e(rule_of_three(n))}.</p>")
    else:
        items = []
        for row in bad.itertuples(index=False):
            names = sorted({v["invariant"] for v in json.loads(str(row.violations_json))})
            items.append(
                f"<li>seed {int(row.seed)}: {_e(', '.join(names))}; replay: "
                f"<span class=cmd>{_e(cell.replay(int(row.seed)))}</span></li>"
            )
        parts.append(f"<p class=bad>Runs with violations: {len(bad)} of {n}</p><ul>"
                     + "".join(items) + "</ul>")
    if not errors.empty:
        parts.append(f"<p class=bad>Runs that raised an error: {len(errors)} of {n}: "
                     + _e("; ".join(f"seed {int(r.seed)}: {r.error}"
                                    for r in errors.itertuples(index=False))) + "</p>")
    return "".join(parts)


def _figure_html(png: str, alt: str, caption: str) -> str:
    return (
        f'<figure><img src="data:image/png;base64,{png}" alt="{_e(alt)}">'
        f"<figcaption>{caption}</figcaption></figure>"
    )


@dataclass(frozen=True)
class TimelineRun:
    run_id: str
    cell: Cell
    seed: int
    digest: str  # the sweep's trace digest


def choose_timelines(
    runs: pd.DataFrame, all_cells: list[Cell], wanted: Sequence[str]
) -> list[TimelineRun]:
    by_id = {str(r): i for i, r in enumerate(runs["run_id"])}
    unknown = [w for w in wanted if w not in by_id]
    if unknown:
        raise ReportError(
            f"--timeline {', '.join(unknown)}: no such run_id in this sweep "
            "(see the run_id column of runs/)"
        )
    if wanted:
        picked = [by_id[w] for w in dict.fromkeys(wanted)]
    else:
        picked = [i for i, v in enumerate(runs["violation_count"]) if v > 0][:MAX_TIMELINES]
        if not picked:
            picked = [int(c.runs.index[0]) for c in all_cells][:MAX_TIMELINES]
    cell_of = {int(i): c for c in all_cells for i in c.runs.index}
    return [
        TimelineRun(str(runs["run_id"].iloc[i]), cell_of[i], int(runs["seed"].iloc[i]),
                    str(runs["trace_digest"].iloc[i]))
        for i in picked
    ]


def _timeline_html(choice: TimelineRun, manifest: Manifest) -> str:
    from sim.timeline import record

    t = record(choice.cell.scenario, choice.seed, choice.cell.params)
    command = choice.cell.replay(choice.seed)
    if t.digest == choice.digest:
        check = (f"<p class=good>Replayed in-process: trace digest {_e(t.digest[:16])} "
                 "equals the sweep's, so this is the run the sweep made.</p>")
    else:
        check = (f"<p class=bad>Replayed in-process, but its trace digest {_e(t.digest[:16])} "
                 f"differs from the sweep's {_e(choice.digest[:16])}: the code changed since "
                 f"the sweep (commit {_e(manifest.git_commit)}), so this timeline may not "
                 "show the run the sweep measured.</p>")
    violations = "".join(f"<li>[{_e(v.invariant)}] {_e(v.detail)}</li>" for v in t.violations)
    png = timeline_figure(t, manifest, command)
    caption = (
        f"{_e(choice.cell.title)}, seed {choice.seed} (run {_e(choice.run_id)}). Rows: each "
        "link's state as its follower reports it, faults (grey, also shaded across), each "
        "client's operations at completion (ok, fail = refused, info = timed out). Dashed: "
        "operator actions; dotted: the start of the liveness phase. Sweep "
        f"{_e(manifest.sweep_file)}, commit {_e(manifest.git_commit)}; reproduce: "
        f"<span class=cmd>{_e(command)}</span>"
    )
    return (
        f"<h3 id=run-{_e(choice.run_id)}>{_e(choice.cell.title)}, seed {choice.seed}</h3>"
        + check + (f"<ul class=bad>{violations}</ul>" if violations else "")
        + _figure_html(png, f"timeline of {choice.cell.title} seed {choice.seed}", caption)
    )


def _cell_html(cell: Cell, metrics: list[str], manifest: Manifest) -> str:
    stats = {m: s for m in metrics if (s := metric_stats(cell.runs, m)) is not None}
    seeds = seeds_text(cell.seeds)
    parts = [
        f"<h2 id={cell.anchor}>{_e(cell.title)}</h2>",
        f"<p>{len(cell.runs)} runs, {_e(seeds)}. One run: "
        f"<span class=cmd>{_e(cell.replay(cell.seeds[0]))}</span></p>",
        _violations_html(cell),
    ]
    png = distribution_figure(cell, stats, manifest)
    if png is not None:
        caption = (
            f"{_e(cell.title)}, {_e(seeds)}: the distribution over seeds of the RPO, the "
            "consumers' re-reads and skips across failover, availability per client class and "
            "produce latency percentiles (whichever the runs report); red: the mean with its "
            f"95% percentile-bootstrap interval. Sweep {_e(manifest.sweep_file)}, commit "
            f"{_e(manifest.git_commit)}; one run: "
            f"<span class=cmd>{_e(cell.replay(cell.seeds[0]))}</span>"
        )
        parts.append(_figure_html(png, f"distributions of {cell.title}", caption))
    parts.append(_stats_table(stats, len(cell.runs)))
    return "".join(parts)


def build(out_dir: str | os.PathLike[str], timelines: Sequence[str] = ()) -> str:
    """The report's HTML for a sweep's output directory."""
    manifest = load_manifest(out_dir)
    runs = load_runs(out_dir)
    all_cells = cells(runs)
    metrics = metric_names(runs)
    chosen = choose_timelines(runs, all_cells, timelines)
    failed = int((runs["violation_count"] > 0).sum())
    head = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>ccr-sim sweep {_e(manifest.name)}</title><style>{STYLE}</style></head><body>"
        f"<h1>Sweep <code>{_e(manifest.name)}</code></h1>"
        f"<p>{_e(manifest.description)}</p>"
        "<table>"
        f"<tr><th>sweep file</th><td><code>{_e(manifest.sweep_file)}</code></td></tr>"
        f"<tr><th>git commit</th><td><code>{_e(manifest.git_commit)}</code></td></tr>"
        f"<tr><th>runs</th><td>{len(runs)} in {len(all_cells)} cells on "
        f"{_e(manifest.executor)}; {failed} with violations</td></tr>"
        f"<tr><th>sweep digest</th><td><code>{_e(manifest.sweep_digest)}</code></td></tr>"
        "</table>"
        "<p class=muted>A cell is one scenario with one set of parameters; its runs differ "
        "only by seed. Means carry a 95% confidence interval from a percentile bootstrap over "
        f"the seeds ({BOOTSTRAP_RESAMPLES} resamples, fixed seed). A count of bad events that "
        "is 0 in all n seeds is stated with the bound that gives: at 95% confidence the "
        "chance of the event in a seed is below 1 - 0.05^(1/n), about 3/n (the rule of "
        "three) for 30 seeds or more. Times are virtual milliseconds.</p>"
    )
    overview = ""
    png = comparison_figure(all_cells, metrics, manifest)
    if png is not None:
        caption = (
            "Every cell of the sweep side by side, on one scale per metric: each dot is one "
            "seed's value, red the mean with its 95% percentile-bootstrap interval. Cells are "
            "named by their scenario and the parameters the sweep varies. "
            f"Sweep {_e(manifest.sweep_file)}, commit {_e(manifest.git_commit)}."
        )
        overview = ("<h2 id=overview>The cells compared</h2>"
                    + _figure_html(png, "the cells compared", caption) + _rpo_note())
    toc = "<h2>Cells</h2><table><tr><th>cell</th><th>seeds</th><th>violations</th></tr>"
    for c in all_cells:
        bad = int((c.runs["violation_count"] > 0).sum())
        toc += (f"<tr><td><a href='#{c.anchor}'>{_e(c.title)}</a></td>"
                f"<td>{_e(seeds_text(c.seeds))}</td>"
                f"<td class=num>{bad} of {len(c.runs)}</td></tr>")
    toc += "</table>"
    if chosen:
        toc += "<p>Timelines: " + ", ".join(
            f"<a href='#run-{_e(t.run_id)}'>{_e(t.cell.title)} seed {t.seed}</a>" for t in chosen
        ) + "</p>"
    body = "".join(_cell_html(c, metrics, manifest) for c in all_cells)
    why = ("chosen on the command line" if timelines else
           "the runs with violations" if failed else "the first seed of each cell")
    body += f"<h2 id=timelines>Timelines</h2><p>Runs shown: {why}.</p>"
    body += "".join(_timeline_html(t, manifest) for t in chosen)
    body += "<h2 id=glossary>Glossary of the metrics above</h2>" + _glossary_html(metrics)
    return head + overview + toc + body + "</body></html>\n"


def _rpo_note() -> str:
    return (
        "<p class=muted>Reading the RPO: <code>rpo_records</code> counts acknowledged "
        "records the promoted cluster did not hold, as the simulator (which sees both "
        "sides) finds them. <code>failover_abandoned_partitions</code> counts what the "
        "failover's answer could report: partitions whose lag it knew to be above 0, or "
        "did not know. It can be 0 while records were lost: the promoted side judges by "
        "the source's high watermark as of its last fetch round, and the records the source "
        "acknowledged after that round, before it was lost, are records it never heard of. "
        "A failover with 0 partitions at risk promises only that nothing it knew of was "
        "left behind.</p>"
    )


def _glossary_html(metrics: list[str]) -> str:
    entries = list(dict.fromkeys(glossary.describe(_metric(m)) for m in metrics))
    rows = "".join(
        f"<tr><td><code>{_e(e.name)}</code></td><td>{_e(e.unit.value)}</td>"
        f"<td>{_e(e.meaning)}</td><td>{_e(e.computed)}</td><td>{_e(e.missing)}</td></tr>"
        for e in entries
    )
    return ("<table><tr><th>metric</th><th>unit</th><th>meaning</th><th>how it is computed</th>"
            "<th>- (missing) means</th></tr>" + rows + "</table>")


def write_report(
    out_dir: str | os.PathLike[str], path: str | os.PathLike[str],
    timelines: Sequence[str] = (),
) -> Path:
    """Build the report and write it to `path` (atomically); returns the path."""
    text = build(out_dir, timelines)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    return target


# ---------------------------------------------------------------- CLI


def handle(args: argparse.Namespace) -> int:
    try:
        path = write_report(args.out_dir, args.output, args.timeline)
    except ReportError as e:
        print(f"ccr-sim report: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "report",
        help="one self-contained HTML report of a sweep's output directory",
        description="Read SWEEP_OUT_DIR (written by `ccr-sim sweep --out`) and write one HTML "
        "file: per scenario and parameters the metrics with their meaning, distributions over "
        "seeds with confidence intervals, and timelines of chosen runs (replayed in-process).",
    )
    p.add_argument("out_dir", metavar="SWEEP_OUT_DIR", help="a `ccr-sim sweep --out` directory")
    p.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the report file")
    p.add_argument(
        "--timeline", action="append", default=[], metavar="RUN_ID",
        help="draw this run's timeline (repeatable; default: the runs with violations, "
        f"at most {MAX_TIMELINES}, else the first seed of each cell)",
    )
    p.set_defaults(func=handle)
