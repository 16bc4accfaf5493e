"""`ccr-chaos`: chaos runs of real `linkd` daemons, judged by the simulator's checkers.

    ccr-chaos run --seed N [--schedule NAME] [--mode async|sync] [--clusters K]
                  [--phase-s S] [--plant-bug ack-before-replicate] [--json] [--keep]
                  [--no-twin] [--operators | --no-operators] [--secure]
    ccr-chaos runs --count N [--first-seed S] [--phase-s S] [--json] [--no-twin]
                  [--operators | --no-operators] [--secure]
    ccr-chaos --runs N            (the same as `runs --count N`)
    ccr-chaos schedule --seed N [...]   print the schedule only (JSON), run nothing
    ccr-chaos crash-matrix [--procedure P] [--point X] [--side local|remote] [--jobs N]
                  [--list] [--json]   kill -9 either side at every checkpoint of
                  reverse, failover and recover (chaos/crash_matrix.py)

Every run also runs its simulator twin (chaos/twin.py, a second or so; `--no-twin`
skips it): `run --json` then has a `twin` field, `runs` a twin column. The
operator nemesis (chaos/operators.py) is drawn per seed for random schedules
(about half of them); `--operators` / `--no-operators` force it on or off.
Runs with it have no twin (the simulator does not replay operator moves).
`--secure` runs with every protection on (SASL_SSL listeners, the authorizer,
link credentials, TLS links: chaos/security.py). A twin
disagreement is printed as `TWIN seed=N differs: ...`; it does not change the
exit code, which judges the real run only.

Exit codes: 0 clean (no anomaly, converged), 1 anomalies or no convergence,
2 bad arguments, 3 a run could not be set up. SIGINT and SIGTERM stop the run
and end the processes it started (by PID).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from chaos import crash_matrix
from chaos.runner import ChaosError, Run, RunResult
from chaos.schedule import CLASSICS, PLANTED_BUGS, Schedule, make_schedule, parse_link_configs

EXIT_ANOMALY = 1
EXIT_USAGE = 2
EXIT_SETUP = 3


class Interrupted(BaseException):
    """SIGINT or SIGTERM: a BaseException (as KeyboardInterrupt is), so the
    runner's handlers of a run's errors never swallow it and a swarm stops
    instead of going on to its next seed."""


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _schedule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="draws the schedule (default 0)")
    p.add_argument(
        "--schedule",
        default="random",
        choices=["random", *CLASSICS],
        help="random (from the seed, default) or a hand-written classic",
    )
    p.add_argument("--mode", choices=["async", "sync"], help="force the link mode (random only)")
    p.add_argument("--clusters", type=int, choices=[2, 3, 4, 5], help="force the cluster count")
    p.add_argument(
        "--phase-s", type=float, default=20.0, help="length of the nemesis phase (default 20)"
    )
    _operators_arg(p)
    _secure_arg(p)
    _link_config_arg(p)
    p.add_argument(
        "--plant-bug",
        choices=list(PLANTED_BUGS),
        default="",
        help="test only: start the source daemon with this planted bug (and use the "
        "schedule that makes it observable); the run must then report anomalies",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ccr-chaos",
        description="Chaos runs of real linkd daemons, judged by the simulator's checkers.",
    )
    p.add_argument("--runs", type=int, help="run this many seeds (as `runs --count N`)")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--json", action="store_true", help="print JSON")
    _save_failed_arg(p)
    _twin_arg(p)
    _operators_arg(p)
    _secure_arg(p)
    _link_config_arg(p)
    sub = p.add_subparsers(dest="command")
    run = sub.add_parser("run", help="one run")
    _schedule_args(run)
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.add_argument("--keep", action="store_true", help="keep the temporary directory")
    run.add_argument("--converge-s", type=float, default=40.0, help="liveness bound (s)")
    _twin_arg(run)
    runs = sub.add_parser("runs", help="many seeds, with a summary table")
    runs.add_argument("--count", type=int, default=10)
    runs.add_argument("--first-seed", type=int, default=1)
    runs.add_argument("--phase-s", type=float, default=20.0)
    runs.add_argument("--json", action="store_true")
    _save_failed_arg(runs)
    _twin_arg(runs)
    _operators_arg(runs)
    _secure_arg(runs)
    _link_config_arg(runs)
    sched = sub.add_parser("schedule", help="print a schedule as JSON, run nothing")
    _schedule_args(sched)
    matrix = sub.add_parser(
        "crash-matrix",
        help="kill -9 either side at every checkpoint of reverse, failover and recover",
    )
    matrix.add_argument("--procedure", choices=list(crash_matrix.PROCEDURES))
    matrix.add_argument("--point", help="one checkpoint (e.g. reverse:detach-mappings#1)")
    matrix.add_argument("--side", choices=list(crash_matrix.SIDES))
    matrix.add_argument(
        "--jobs", type=int, default=crash_matrix.DEFAULT_JOBS,
        help="cases at a time, each in a process of its own (1: one after another, "
        f"in this process; default {crash_matrix.DEFAULT_JOBS})",
    )  # fmt: skip
    matrix.add_argument(
        "--case-timeout-s", type=float, default=crash_matrix.CASE_TIMEOUT_S,
        help=f"a case still running after this is ended and fails "
        f"(default {crash_matrix.CASE_TIMEOUT_S:.0f})",
    )  # fmt: skip
    matrix.add_argument("--list", action="store_true", help="print the cases, run nothing")
    matrix.add_argument("--keep", action="store_true", help="keep the daemons' directories")
    matrix.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def cmd_crash_matrix(args: argparse.Namespace) -> int:
    selected = crash_matrix.select(args.procedure, args.point, args.side)
    if not selected:
        print("ccr-chaos crash-matrix: no case matches (see --list)", file=sys.stderr)
        return EXIT_USAGE
    if args.jobs < 1:
        print("ccr-chaos crash-matrix: --jobs must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    if args.list:
        for case in selected:
            print(json.dumps(case_json(case)) if args.json else case.name)
        return 0
    began = time.monotonic()

    def show(result: crash_matrix.CaseResult) -> None:
        if not args.json:
            print(crash_matrix.line(result), flush=True)

    if args.jobs == 1:
        results = []
        for case in selected:
            result = crash_matrix.run_here(case, keep=args.keep)
            show(result)
            results.append(result)
    else:
        results = crash_matrix.run_matrix(selected, args.jobs, show, args.case_timeout_s)
    passed = sum(r.ok for r in results)
    summary = {
        "cases": len(results), "passed": passed, "failed": len(results) - passed,
        "wall_s": round(time.monotonic() - began, 1), "jobs": args.jobs,
    }  # fmt: skip
    if args.json:
        print(json.dumps({"summary": summary, "cases": [r.to_json() for r in results]}))
    else:
        print(
            f"crash-matrix: {passed}/{len(results)} cases passed in {summary['wall_s']} s "
            f"({args.jobs} at a time)"
        )
        for r in results:
            if not r.ok:
                print(f"  FAILED {r.case.name}: reproduce with "
                      f"ccr-chaos crash-matrix {' '.join(r.case.args())} --jobs 1")  # fmt: skip
    return 0 if passed == len(results) else EXIT_ANOMALY


def case_json(case: crash_matrix.Case) -> dict[str, str]:
    return {"procedure": case.procedure, "point": case.point, "side": case.side}


def _save_failed_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--save-failed",
        metavar="DIR",
        help="write the full JSON summary (events, operator moves, anomalies) of every run "
        "with an anomaly to DIR/seed-N.json: a replay repeats the schedule, not the timing",
    )


def _operators_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--operators",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force the operator nemesis (KIP-986's operator moves drawn at random) on or "
        "off; default: random schedules draw it for about half the seeds, classics run "
        "without it",
    )


def link_config(text: str) -> tuple[str, str]:
    """One --link-config NAME=VALUE."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, not {text!r}")
    return (name.strip(), value.strip())


def _link_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--link-config",
        metavar="NAME=VALUE",
        type=link_config,
        action="append",
        default=None,
        help="create every link with this policy (as ccr-admin create-link --config; "
        "repeatable): gap.policy, fetch.bound, failover.truncation",
    )


def _twin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--twin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the simulator twin and compare final offsets and link states "
        "(default on; --no-twin skips it)",
    )


def replay_command(args: argparse.Namespace) -> str:
    parts = ["ccr-chaos", "run", "--seed", str(args.seed)]
    if args.schedule != "random" and not args.plant_bug:
        parts += ["--schedule", args.schedule]
    if args.mode:
        parts += ["--mode", args.mode]
    if args.clusters:
        parts += ["--clusters", str(args.clusters)]
    if args.phase_s != 20.0:
        parts += ["--phase-s", f"{args.phase_s:g}"]
    if args.plant_bug:
        parts += ["--plant-bug", args.plant_bug]
    operators = getattr(args, "operators", None)
    if operators is not None:
        parts.append("--operators" if operators else "--no-operators")
    if getattr(args, "secure", False):
        parts.append("--secure")
    for name, value in sorted(getattr(args, "link_config", None) or ()):
        parts += ["--link-config", f"{name}={value}"]
    return " ".join(parts)


def build_schedule(args: argparse.Namespace) -> Schedule:
    schedule = make_schedule(
        args.seed, args.schedule, args.phase_s, args.mode, args.clusters, args.plant_bug,
        getattr(args, "operators", None), tuple(getattr(args, "link_config", None) or ()),
    )  # fmt: skip
    if getattr(args, "secure", False):
        schedule = dataclasses.replace(schedule, secure=True)
    return schedule


def _secure_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--secure",
        action="store_true",
        default=None,
        help="run with every protection on (chaos/security.py): SASL_SSL listeners with a "
        "SCRAM super user, --authorizer acl, link credentials and TLS links; every client "
        "authenticates and every link call runs in a link session",
    )


def run_one(args: argparse.Namespace, quiet: bool = False) -> RunResult:
    schedule = build_schedule(args)
    replay = replay_command(args)

    def log(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    if not quiet:
        log(f"ccr-chaos: seed {args.seed}, schedule {schedule.name}, {schedule.mode}, "
            f"clusters {','.join(schedule.clusters)}; replay: {replay}")  # fmt: skip
        for step in schedule.steps:
            log(f"  {step.describe()}")
    run = Run(schedule, replay, keep=getattr(args, "keep", False),
              converge_s=getattr(args, "converge_s", 40.0), log=log,
              twin=getattr(args, "twin", True))  # fmt: skip
    return run.execute()


def print_anomalies(result: RunResult) -> None:
    for a in result.anomalies:
        print(
            f"ANOMALY seed={result.seed} [{a['invariant']}] {a['detail']}\n"
            f"  replay: {result.replay}",
            file=sys.stderr,
        )
    twin = result.twin
    if twin is not None and not twin.get("agrees"):
        what = twin.get("error") or "; ".join(twin.get("differences", [])[:10])
        print(f"TWIN seed={result.seed} differs: {what}\n  replay: {result.replay}",
              file=sys.stderr)  # fmt: skip


def twin_cell(twin: dict[str, Any] | None) -> str:
    """The twin column: agrees, or how many differences (or the error)."""
    if twin is None:
        return "-"
    if twin.get("error"):
        return "error"
    doubt = twin.get("in_doubt", 0)
    if twin.get("agrees"):
        return f"agrees ({doubt} in doubt)"
    return f"DIFFERS ({len(twin.get('differences', []))})"


def _summary(result: RunResult) -> dict[str, Any]:
    out = result.to_json()
    out["ok"] = not result.anomalies and result.converged
    return out


def cmd_run(args: argparse.Namespace) -> int:
    try:
        # Progress goes to stderr also with --json: stdout holds only the summary.
        result = run_one(args)
    except ChaosError as exc:
        print(f"ccr-chaos: seed {args.seed}: setup failed: {exc}\n  replay: "
              f"{replay_command(args)}", file=sys.stderr)  # fmt: skip
        return EXIT_SETUP
    print_anomalies(result)
    if args.json:
        print(json.dumps(_summary(result), indent=2))
    else:
        print(
            f"seed {result.seed} ({result.schedule}, {result.mode}, "
            f"{len(result.clusters)} clusters): {result.operations} operations "
            f"{result.counts}, {len(result.anomalies)} anomalies, "
            f"converged={result.converged}, twin {twin_cell(result.twin)}, {result.duration_s} s"
        )
        if result.failovers is not None:
            print("failovers: " + ", ".join(f"{k} {v}" for k, v in result.failovers.items()))
        if result.retention is not None:
            print("retention: " + ", ".join(f"{k} {v}" for k, v in result.retention.items()))
    return 0 if not result.anomalies and result.converged else EXIT_ANOMALY


def cmd_runs(
    count: int,
    first_seed: int,
    phase_s: float,
    as_json: bool,
    twin: bool = True,
    operators: bool | None = None,
    save_failed: str | None = None,
    secure: bool = False,
    link_configs: tuple[tuple[str, str], ...] = (),
) -> int:
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    print(f"ccr-chaos: {count} runs, seeds {first_seed}..{first_seed + count - 1}, about "
          f"{phase_s + 20:.0f} s each; one line per run as it ends", file=sys.stderr,
          flush=True)  # fmt: skip
    for seed in range(first_seed, first_seed + count):
        args = argparse.Namespace(
            seed=seed, schedule="random", mode=None, clusters=None, phase_s=phase_s,
            plant_bug="", keep=False, converge_s=40.0, twin=twin, operators=operators,
            secure=secure, link_config=list(link_configs),
        )  # fmt: skip
        schedule = build_schedule(args)
        row: dict[str, Any] = {
            "seed": seed,
            "mode": schedule.mode,
            "clusters": len(schedule.clusters),
            "nemeses": ",".join(schedule.nemeses) + (",operators" if schedule.operators else ""),
            "replay": replay_command(args),
        }
        try:
            result = run_one(args, quiet=True)
            row.update(
                operations=result.operations,
                info=result.counts.get("info", 0),
                anomalies=len(result.anomalies),
                kinds=",".join(sorted({a["invariant"] for a in result.anomalies})),
                converged=result.converged,
                seconds=result.duration_s,
                twin=twin_cell(result.twin),
                twin_differences=(result.twin or {}).get("differences", []),
            )
            print_anomalies(result)
            if save_failed and (result.anomalies or not result.converged):
                saved = Path(save_failed) / f"seed-{seed}.json"
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(json.dumps(_summary(result), indent=2))
                print(f"  saved: {saved}", file=sys.stderr)
        except (ChaosError, OSError, RuntimeError) as exc:
            row.update(operations=0, info=0, anomalies=-1, kinds=f"error: {exc}",
                       converged=False, seconds=0.0, twin="-")  # fmt: skip
        rows.append(row)
        print(
            f"[{len(rows)}/{count}, {time.monotonic() - started:.0f} s] "
            f"seed {seed}: {row['mode']} {row['clusters']} clusters [{row['nemeses']}] "
            f"ops={row['operations']} anomalies={row['anomalies']} "
            f"converged={row['converged']} twin={row['twin']}",
            file=sys.stderr,
            flush=True,
        )
    if as_json:
        print(json.dumps({"runs": rows, "seconds": round(time.monotonic() - started)}, indent=2))
    else:
        print(table(rows))
    bad = [r for r in rows if r["anomalies"] or not r["converged"]]
    return EXIT_ANOMALY if bad else 0


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| seed | mode | clusters | nemeses | operations | info | anomalies | converged | "
        "twin | s |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        anomalies = str(r["anomalies"]) + (f" ({r['kinds']})" if r.get("kinds") else "")
        lines.append(
            f"| {r['seed']} | {r['mode']} | {r['clusters']} | {r['nemeses']} | "
            f"{r['operations']} | {r['info']} | {anomalies} | {r['converged']} | "
            f"{r.get('twin', '-')} | {r['seconds']} |"
        )
    clean = sum(1 for r in rows if not r["anomalies"] and r["converged"])
    lines.append("")
    lines.append(f"{clean} of {len(rows)} runs clean (no anomaly, converged).")
    twins = [r for r in rows if r.get("twin", "-") != "-"]
    if twins:
        agree = sum(1 for r in twins if str(r["twin"]).startswith("agrees"))
        lines.append(f"{agree} of {len(twins)} twins agree (final offsets and link states).")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        parse_link_configs(args.link_config or ())
    except ValueError as exc:
        parser.error(f"--link-config: {exc}")
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, _on_signal)
    try:
        if args.runs is not None:
            if args.runs < 1:
                parser.error("--runs must be at least 1")
            return cmd_runs(
                args.runs,
                args.first_seed,
                20.0,
                args.json,
                args.twin,
                args.operators,
                args.save_failed,
                bool(args.secure),
                tuple(args.link_config or ()),
            )
        if args.command == "run":
            return cmd_run(args)
        if args.command == "runs":
            return cmd_runs(
                args.count,
                args.first_seed,
                args.phase_s,
                args.json,
                args.twin,
                args.operators,
                args.save_failed,
                bool(args.secure),
                tuple(args.link_config or ()),
            )
        if args.command == "crash-matrix":
            return cmd_crash_matrix(args)

        if args.command == "schedule":
            print(json.dumps(build_schedule(args).to_json(), indent=2))
            return 0
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    except Interrupted as exc:
        print(f"ccr-chaos: stopped by {exc}; the processes it started are ended",
              file=sys.stderr)  # fmt: skip
        return 130
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


if __name__ == "__main__":
    raise SystemExit(main())
