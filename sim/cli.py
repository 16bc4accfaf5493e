"""`ccr-sim`: run, replay and list simulation scenarios.

  ccr-sim run SCENARIO --seed N [--json] [--out FILE.parquet|FILE.json] [--param k=v]
  ccr-sim replay SCENARIO --seed N [--param k=v]   (the run, with its full event trace)
  ccr-sim list-scenarios
  ccr-sim sweep ...                                (when sim.sweep is installed)

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

from sim import scenario as scenarios
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


def cmd_list(_args: argparse.Namespace) -> int:
    for name in scenarios.shipped():
        s = scenarios.load(name)
        print(f"{name:<28} {s.description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ccr-sim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_ in (
        ("run", cmd_run, "run a scenario once and print its summary"),
        ("replay", cmd_replay, "run a scenario once and print its full event trace"),
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
        if name == "run":
            p.add_argument("--json", action="store_true", help="print the summary as JSON")
            p.add_argument("--out", default="", help="also write the summary (.json or .parquet)")
        p.set_defaults(func=func)
    p = sub.add_parser("list-scenarios", help="name the shipped scenarios")
    p.set_defaults(func=cmd_list)
    try:
        from sim import sweep  # built separately; optional until it lands
    except ImportError:
        pass
    else:
        sweep.add_parser(sub)
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
