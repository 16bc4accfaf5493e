"""Simulator speed and sweep fan-out: engine events per second, a 200-run sweep
serially and on Spark local[1] / local[2], and the catch-up storm's wall time.

    python bench/sim.py [--scenario dr-multi-zone] [--engine-seeds 5]
                        [--baseline-rev db1c0a3] [--engine-rounds 3] [--no-baseline]
                        [--sweep sim/sweeps/bench-200.toml] [--masters local[1],local[2]]
                        [--storm-scenario catch-up-storm] [--storm-timeout-s 1800]
                        [--skip-engine] [--skip-sweep] [--skip-storm] [--json FILE]

What is measured:
- engine: `sim.runner.run_summary(SCENARIO, seed)` for seeds 1..N in one
  process (after one untimed warm-up run); events per wall-second (the run's
  `events` metric) and simulated seconds per wall-second (`virtual_ms`).
  Side by side with an older commit (`--baseline-rev`, by default the one
  before the engine's speed-ups): that commit is checked out into a temporary
  `git worktree`, and each round runs the same measurement once in each tree,
  each in a fresh process, alternating which goes first, so both see the same
  machine load. Printed: each tree's events/s over all rounds, the ratio
  (wall and CPU), and whether both trees gave the same trace digests (a
  speed-up must not change a run). The worktree is removed afterwards.
- sweep: the sweep file run three ways, each in a fresh Python process: a
  plain serial loop (`--serial`), then Spark on each master. "run s" is the
  time to execute the runs (what `SweepResult.wall_s` measures: for Spark,
  from submitting the job until the rows are on the driver); "total s" adds
  the Spark session's start and the Parquet writing. Speedups are ratios of
  run times. The three sweep digests must be equal (same runs, same traces).
- storm: one run of the catch-up storm scenario (seed 1) in a fresh process,
  bounded by --storm-timeout-s; wall time, events and its produce latency
  during catch-up.

Targets reported against: engine >= 3x the baseline commit's events/s;
local[2] >= 1.7x local[1]; catch-up storm < 60 s.
Nothing is asserted; the machine's other load shows in the wall times (the
CPU-second columns do not), so run it on an otherwise idle machine. Every
child process is bounded by a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SWEEP_TIMEOUT_S = 3600.0
ENGINE_TIMEOUT_S = 1800.0
SPEEDUP_TARGET = 1.7
ENGINE_TARGET = 3.0
STORM_TARGET_S = 60.0
BASELINE_REV = "db1c0a3"  # the engine before the issue 18 speed-ups


def _child(args: list[str], timeout_s: float, tree: Path = ROOT) -> dict[str, Any]:
    """Run this script in a fresh process in a `--child-*` mode; parse its last line.
    `tree`: the checkout whose code the child imports (this one by default)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree), str(tree / "proto" / "gen"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args, "--tree", str(tree)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=tree,
        env=env,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"bench child {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def child_sweep(sweep_file: str, master: str) -> dict[str, Any]:
    from sim.sweep import run_sweep

    t0 = time.perf_counter()
    session_s = 0.0
    with tempfile.TemporaryDirectory(prefix="ccr-sim-bench-") as out:
        if master == "serial":
            result = run_sweep(sweep_file, None, out, serial=True, progress=False)
            partitions = 1
        else:
            from sim import spark_sweep

            spark = spark_sweep.create_session(master)
            try:
                session_s = time.perf_counter() - t0
                result = run_sweep(sweep_file, None, out, spark=spark, progress=False)
                partitions = result.partitions
            finally:
                spark.stop()
    total = time.perf_counter() - t0
    return {
        "master": master,
        "runs": len(result.runs),
        "failed": len(result.failures),
        "run_s": result.wall_s,
        "total_s": total,
        "session_s": session_s,
        "partitions": partitions,
        "digest": result.sweep_digest,
    }


def child_run(scenario: str, seed: int) -> dict[str, Any]:
    from sim.runner import run_summary

    t0, c0 = time.perf_counter(), time.process_time()
    summary = run_summary(scenario, seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"wall_s": wall, "cpu_s": cpu, "summary": summary}


def bench_engine(scenario: str, seeds: int) -> dict[str, Any]:
    import sim
    from sim.runner import run_summary

    run_summary(scenario, 0)  # warm-up: imports, scenario parsing
    events = virtual_ms = 0
    have_events = True
    digests = []
    t0, c0 = time.perf_counter(), time.process_time()
    for seed in range(1, seeds + 1):
        summary = run_summary(scenario, seed)
        metrics = summary["metrics"]
        digests.append(summary["trace_digest"])
        have_events = have_events and "events" in metrics
        events += int(metrics.get("events", 0))
        virtual_ms += int(metrics.get("virtual_ms", 0))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "code": str(Path(sim.__file__).resolve().parent.parent),
        "digests": digests,
        "scenario": scenario,
        "cpu_s": cpu,
        "runs": seeds,
        "wall_s": wall,
        "events": events if have_events else None,
        "events_per_s": events / wall if have_events else None,
        "sim_s_per_wall_s": virtual_ms / 1000.0 / wall,
        "wall_s_per_run": wall / seeds,
    }


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


@contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """`rev` checked out into a temporary git worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="ccr-sim-baseline-") as parent:
        path = Path(parent) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                check=False,
                capture_output=True,
                timeout=300,
            )
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "prune"],
                check=False,
                capture_output=True,
                timeout=300,
            )


def _engine_totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    wall = sum(r["wall_s"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    events = sum(r["events"] or 0 for r in rows)
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "events": events,
        "events_per_s": events / wall,
        "events_per_cpu_s": events / cpu,
    }


def bench_engine_side_by_side(scenario: str, seeds: int, rev: str, rounds: int) -> dict[str, Any]:
    """The engine benchmark in this tree and in `rev`, alternating, fresh processes."""
    args = ["--child-engine", scenario, str(seeds)]
    rows: dict[str, list[dict[str, Any]]] = {"baseline": [], "current": []}
    with baseline_tree(rev) as base:
        trees = {"baseline": base, "current": ROOT}
        for i in range(rounds):
            order = ["baseline", "current"] if i % 2 == 0 else ["current", "baseline"]
            for which in order:
                rows[which].append(_child(args, ENGINE_TIMEOUT_S, trees[which]))
                r = rows[which][-1]
                print(
                    f"   (round {i + 1}, {which}: {r['events_per_s']:,.0f} events/s, "
                    f"{r['cpu_s']:.1f} CPU s)",
                    file=sys.stderr,
                    flush=True,
                )
        for which, tree in trees.items():
            for r in rows[which]:
                if Path(r["code"]) != tree.resolve():
                    raise RuntimeError(f"{which} child ran the code in {r['code']}, not {tree}")
    base_t, cur_t = _engine_totals(rows["baseline"]), _engine_totals(rows["current"])
    same = {tuple(r["digests"]) for r in rows["baseline"] + rows["current"]}
    return {
        "scenario": scenario,
        "baseline_rev": rev,
        "rounds": rounds,
        "runs_per_round": seeds,
        "baseline": base_t,
        "current": cur_t,
        "baseline_rounds": rows["baseline"],
        "current_rounds": rows["current"],
        "ratio_wall": cur_t["events_per_s"] / base_t["events_per_s"],
        "ratio_cpu": cur_t["events_per_cpu_s"] / base_t["events_per_cpu_s"],
        "digests_equal": len(same) == 1,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="dr-multi-zone", help="engine-speed scenario")
    p.add_argument("--engine-seeds", type=int, default=5)
    p.add_argument(
        "--baseline-rev",
        default=BASELINE_REV,
        help="commit whose engine is measured beside this tree's (a temporary git worktree)",
    )
    p.add_argument("--engine-rounds", type=int, default=3, help="alternations per tree")
    p.add_argument(
        "--no-baseline", action="store_true", help="measure this tree's engine only, in-process"
    )
    p.add_argument("--sweep", default=str(ROOT / "sim" / "sweeps" / "bench-200.toml"))
    p.add_argument("--masters", default="local[1],local[2]", help="Spark masters, comma-separated")
    p.add_argument("--storm-scenario", default="catch-up-storm")
    p.add_argument("--storm-timeout-s", type=float, default=1800.0)
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-storm", action="store_true")
    p.add_argument("--json", default="", help="also write the figures to this JSON file")
    p.add_argument("--child-sweep", nargs=2, metavar=("SWEEP", "MASTER"), help=argparse.SUPPRESS)
    p.add_argument("--child-run", nargs=2, metavar=("SCENARIO", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--child-engine", nargs=2, metavar=("SCENARIO", "SEEDS"), help=argparse.SUPPRESS)
    p.add_argument("--tree", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine_rounds < 1:
        p.error(f"--engine-rounds must be >= 1, not {args.engine_rounds}")
    if args.tree:
        # A child: import the project from the tree it was started for.
        sys.path.insert(0, str(Path(args.tree) / "proto" / "gen"))
        sys.path.insert(0, args.tree)

    if args.child_sweep:
        print(json.dumps(child_sweep(*args.child_sweep)))
        return 0
    if args.child_run:
        print(json.dumps(child_run(args.child_run[0], int(args.child_run[1]))))
        return 0
    if args.child_engine:
        print(json.dumps(bench_engine(args.child_engine[0], int(args.child_engine[1]))))
        return 0

    figures: dict[str, Any] = {}
    if not args.skip_engine and not args.no_baseline:
        e = bench_engine_side_by_side(
            args.scenario, args.engine_seeds, args.baseline_rev, args.engine_rounds
        )
        figures["engine"] = e
        print(
            f"== engine: {e['scenario']}, {e['runs_per_round']} runs per process, "
            f"{e['rounds']} rounds per tree, alternating"
        )
        print(
            f"{'tree':<22} {'events':>10} {'wall s':>8} {'CPU s':>8} {'events/s':>10} "
            f"{'events/CPU s':>13}"
        )
        for which, label in (
            ("baseline", f"baseline {e['baseline_rev']}"),
            ("current", "this tree"),
        ):
            t = e[which]
            print(
                f"{label:<22} {t['events']:>10,} {t['wall_s']:>8.1f} {t['cpu_s']:>8.1f} "
                f"{t['events_per_s']:>10,.0f} {t['events_per_cpu_s']:>13,.0f}"
            )
        verdict = "met" if e["ratio_wall"] >= ENGINE_TARGET else "NOT met"
        print(
            f"this tree vs baseline: {e['ratio_wall']:.2f}x events/s (wall), "
            f"{e['ratio_cpu']:.2f}x (CPU) (target >= {ENGINE_TARGET}x: {verdict})"
        )
        print(
            f"trace digests equal in both trees: {'yes' if e['digests_equal'] else 'NO'}",
            flush=True,
        )
    elif not args.skip_engine:
        e = bench_engine(args.scenario, args.engine_seeds)
        figures["engine"] = e
        print(f"== engine: {e['scenario']}, {e['runs']} runs in one process")
        print(f"{'wall s/run':>12} {'cpu s/run':>10} {'events/s':>12} {'sim s/wall s':>14}")
        print(
            f"{e['wall_s_per_run']:>12.3f} {e['cpu_s'] / e['runs']:>10.3f} "
            f"{_fmt(e['events_per_s'], ',.0f'):>12} {e['sim_s_per_wall_s']:>14.2f}",
            flush=True,
        )

    if not args.skip_sweep:
        rows = []
        for master in ["serial", *[m for m in args.masters.split(",") if m]]:
            rows.append(_child(["--child-sweep", args.sweep, master], SWEEP_TIMEOUT_S))
            r = rows[-1]
            print(f"   ({master}: {r['run_s']:.1f} s)", file=sys.stderr, flush=True)
        figures["sweep"] = rows
        base = rows[0]["run_s"]
        by_master = {r["master"]: r for r in rows}
        print(f"\n== sweep: {Path(args.sweep).name}, {rows[0]['runs']} runs")
        print(
            f"{'executor':<10} {'partitions':>10} {'session s':>10} {'run s':>8} "
            f"{'total s':>8} {'runs/s':>7} {'vs serial':>10} {'failed':>7}"
        )
        for r in rows:
            print(
                f"{r['master']:<10} {r['partitions']:>10} {r['session_s']:>10.1f} "
                f"{r['run_s']:>8.1f} {r['total_s']:>8.1f} {r['runs'] / r['run_s']:>7.2f} "
                f"{base / r['run_s']:>9.2f}x {r['failed']:>7}"
            )
        digests = {r["digest"] for r in rows}
        print(f"sweep digests equal across executors: {'yes' if len(digests) == 1 else 'NO'}")
        one, two = by_master.get("local[1]"), by_master.get("local[2]")
        if one and two:
            ratio = one["run_s"] / two["run_s"]
            verdict = "met" if ratio >= SPEEDUP_TARGET else "NOT met"
            print(f"local[2] vs local[1]: {ratio:.2f}x (target >= {SPEEDUP_TARGET}x: {verdict})")
            figures["local2_vs_local1"] = ratio

    if not args.skip_storm:
        try:
            s = _child(["--child-run", args.storm_scenario, "1"], args.storm_timeout_s)
        except subprocess.TimeoutExpired:
            print(f"\n== storm: {args.storm_scenario} did not finish in {args.storm_timeout_s} s")
            figures["storm"] = {"timeout_s": args.storm_timeout_s}
        else:
            m = s["summary"]["metrics"]
            figures["storm"] = {
                "wall_s": s["wall_s"],
                "cpu_s": s["cpu_s"],
                "metrics": m,
                "trace_digest": s["summary"]["trace_digest"],
            }
            verdict = "met" if s["wall_s"] < STORM_TARGET_S else "NOT met"
            print(f"\n== storm: {args.storm_scenario}, seed 1")
            print(
                f"{'wall s':>8} {'cpu s':>8} {'events':>12} {'sim s':>8} {'catch-up p99 ms':>16} "
                f"{'steady p99 ms':>14} {'violations':>10}"
            )
            print(
                f"{s['wall_s']:>8.1f} {s['cpu_s']:>8.1f} {m.get('events', 0):>12,} "
                f"{m.get('virtual_ms', 0) / 1000:>8.0f} "
                f"{m.get('produce_latency_p99_catchup_ms', 'n/a'):>16} "
                f"{m.get('produce_latency_p99_steady_ms', 'n/a'):>14} "
                f"{len(s['summary']['violations']):>10}"
            )
            print(f"trace digest {s['summary']['trace_digest']}")
            print(f"target < {STORM_TARGET_S:.0f} s: {verdict}")

    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
