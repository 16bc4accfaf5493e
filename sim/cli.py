"""`ccr-sim`: run, replay and list simulation scenarios.

  ccr-sim run SCENARIO --seed N [--json] [--out FILE.parquet|FILE.json] [--param k=v]
  ccr-sim replay SCENARIO --seed N [--param k=v]   (the run, with its full event trace)
  ccr-sim compare SCENARIO --seed N [--json] [--param k=v]
                   (the same run once per link type, link and mirror, side by side)
  ccr-sim list-scenarios
  ccr-sim glossary [--markdown] [METRIC ...]       (what each run metric means)
  ccr-sim sweep ...                                (when sim.sweep is installed)
  ccr-sim report SWEEP_OUT_DIR -o report.html      (one HTML file from a sweep's output)

Exit codes: 0 no violation, 1 a violation (each printed with the seed and the
command that replays it), 2 a usage or scenario error.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from sim import glossary, report, sweep
from sim import scenario as scenarios
from sim.mirror_driver import LINK_TYPES
from sim.runner import simulate


def _params(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise scenarios.ScenarioError(f"--param {pair!r}: expected name=value")
        try:
            out[name] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[name] = raw  # a bare word: a string
    return out


def _print_table(summary: dict[str, Any]) -> None:
    print(
        f"scenario   {summary['scenario']}  "
        f"(topology {summary['topology']}, mode {summary['mode']})"
    )
    print(f"seed       {summary['seed']}")
    print(f"digest     {summary['trace_digest']}")
    width = max((len(k) for k in summary["metrics"]), default=10)
    for name, value in summary["metrics"].items():
        print(f"  {name:<{width}}  {value:g}")
    _print_violations(summary)


def _print_violations(summary: dict[str, Any]) -> None:
    violations = summary["violations"]
    if not violations:
        print("violations none")
        return
    print(f"violations {len(violations)}")
    for v in violations:
        print(f"  [{v['invariant']}] {v['detail']}")
    print(f"seed {summary['seed']}; replay with: {summary['replay']}")


def _write_out(path: str, summary: dict[str, Any]) -> None:
    if path.endswith(".json"):
        Path(path).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return
    if path.endswith(".parquet"):
        import pandas as pd

        row: dict[str, Any] = {
            k: summary[k] for k in ("seed", "scenario", "topology", "mode", "trace_digest")
        }
        row["violations"] = len(summary["violations"])
        row["violation_names"] = ",".join(sorted({v["invariant"] for v in summary["violations"]}))
        row.update({f"metric_{k}": float(v) for k, v in summary["metrics"].items()})
        pd.DataFrame([row]).to_parquet(path, index=False)
        return
    raise scenarios.ScenarioError(f"--out {path!r}: use a .json or .parquet file")


def cmd_run(args: argparse.Namespace) -> int:
    summary, _ = simulate(args.scenario, args.seed, _params(args.param))
    if args.out:
        _write_out(args.out, summary)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        if summary["violations"]:
            print(f"seed {summary['seed']}; replay with: {summary['replay']}", file=sys.stderr)
    else:
        _print_table(summary)
    return 1 if summary["violations"] else 0


def cmd_replay(args: argparse.Namespace) -> int:
    summary, trace = simulate(args.scenario, args.seed, _params(args.param), keep_trace=True)
    for line in trace:
        print(line)
    _print_table(summary)
    return 1 if summary["violations"] else 0


# What `ccr-sim compare` puts side by side: (metric, what it counts).
COMPARE_ROWS: tuple[tuple[str, str], ...] = (
    ("rpo_records", "acknowledged records the failover target lacked"),
    ("rpo_ms", "acknowledgement time those records span"),
    ("consumer_duplicates_across_failover", "records consumers read again after moving"),
    ("consumer_skips_across_failover", "records below their position they never read"),
    ("mirror_duplicates_stored", "records a mirror wrote twice (at least once)"),
)


def compare(scenario: str, seed: int, params: dict[str, Any]) -> dict[str, Any]:
    """The scenario once per link type (parameter link_type), same seed."""
    if "link_type" in params:
        raise scenarios.ScenarioError("compare sets link_type itself; drop --param link_type")
    runs: dict[str, dict[str, Any]] = {}
    for link_type in LINK_TYPES:
        runs[link_type], _trace = simulate(scenario, seed, {**params, "link_type": link_type})
    rows = {
        metric: {t: runs[t]["metrics"].get(metric) for t in LINK_TYPES}
        for metric, _what in COMPARE_ROWS
    }
    first = runs[LINK_TYPES[0]]
    return {
        "scenario": first["scenario"],
        "seed": seed,
        "params": dict(sorted(params.items())),
        "columns": list(LINK_TYPES),
        "rows": rows,
        "runs": runs,
    }


def _print_comparison(result: dict[str, Any]) -> None:
    runs = result["runs"]
    columns: list[str] = result["columns"]
    table: list[tuple[str, list[str]]] = []
    for metric, values in result["rows"].items():
        table.append((metric, ["-" if values[t] is None else f"{values[t]:g}" for t in columns]))
    table.append(("violations", [str(len(runs[t]["violations"])) for t in columns]))
    table.append(("trace_digest", [runs[t]["trace_digest"][:12] for t in columns]))
    label = max(len(name) for name, _ in table)
    width = max(12, *(len(c) for row in table for c in row[1]))
    print(f"scenario   {result['scenario']}  (seed {result['seed']})")
    print(f"  {'':<{label}}" + "".join(f"  {t:>{width}}" for t in columns))
    for name, cells in table:
        print(f"  {name:<{label}}" + "".join(f"  {c:>{width}}" for c in cells))
    print()
    for metric, what in COMPARE_ROWS:
        print(f"  {metric}: {what}")
    for t in columns:
        if runs[t]["violations"]:
            print(f"{t}:")
            _print_violations(runs[t])


def cmd_compare(args: argparse.Namespace) -> int:
    result = compare(args.scenario, args.seed, _params(args.param))
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        _print_comparison(result)
    return 1 if any(r["violations"] for r in result["runs"].values()) else 0


def cmd_list(_args: argparse.Namespace) -> int:
    for name in scenarios.shipped():
        s = scenarios.load(name)
        print(f"{name:<28} {s.description}")
    return 0


def cmd_glossary(args: argparse.Namespace) -> int:
    entries = list(glossary.ENTRIES)
    if args.metric:
        missing = glossary.unknown(args.metric)
        if missing:
            raise scenarios.ScenarioError(
                f"no glossary entry for {', '.join(missing)} (see `ccr-sim glossary`)"
            )
        entries = list(dict.fromkeys(glossary.describe(m) for m in args.metric))
    print(glossary.markdown_table(entries) if args.markdown else glossary.plain_text(entries))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ccr-sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_ in (
        ("run", cmd_run, "run a scenario once and print its summary"),
        ("replay", cmd_replay, "run a scenario once and print its full event trace"),
        ("compare", cmd_compare, "run a scenario once per link type (link, mirror), side by side"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("scenario", help="a shipped scenario name or a TOML file")
        p.add_argument("--seed", type=int, required=True)
        p.add_argument(
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="override a scenario value (see sim.scenario.PARAMS)",
        )
        if name in ("run", "compare"):
            p.add_argument("--json", action="store_true", help="print the summary as JSON")
        if name == "run":
            p.add_argument("--out", default="", help="also write the summary (.json or .parquet)")
        p.set_defaults(func=func)
    p = sub.add_parser("list-scenarios", help="name the shipped scenarios")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("glossary", help="what each run metric means (unit, computation, '-')")
    p.add_argument("metric", nargs="*", help="only these metrics (names or patterns)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.set_defaults(func=cmd_glossary)
    sweep.add_parser(sub)
    report.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (scenarios.ScenarioError, ValueError) as exc:
        print(f"ccr-sim: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
