"""Simulator speed and sweep fan-out: engine events per second, a 200-run sweep
serially and on Spark local[1] / local[2], and the catch-up storm's wall time.

    python bench/sim.py [--scenario dr-multi-zone] [--engine-seeds 5]
                        [--sweep sim/sweeps/bench-200.toml] [--masters local[1],local[2]]
                        [--storm-scenario catch-up-storm] [--storm-timeout-s 1800]
                        [--skip-engine] [--skip-sweep] [--skip-storm] [--json FILE]

What is measured:
- engine: `sim.runner.run_summary(SCENARIO, seed)` for seeds 1..N in one
  process (after one untimed warm-up run); events per wall-second (the run's
  `events` metric) and simulated seconds per wall-second (`virtual_ms`).
- sweep: the sweep file run three ways, each in a fresh Python process: a
  plain serial loop (`--serial`), then Spark on each master. "run s" is the
  time to execute the runs (what `SweepResult.wall_s` measures: for Spark,
  from submitting the job until the rows are on the driver); "total s" adds
  the Spark session's start and the Parquet writing. Speedups are ratios of
  run times. The three sweep digests must be equal (same runs, same traces).
- storm: one run of the catch-up storm scenario (seed 1) in a fresh process,
  bounded by --storm-timeout-s; wall time, events and its produce latency
  during catch-up.

Targets reported against: local[2] >= 1.6x local[1]; catch-up storm < 10 min.
Nothing is asserted; the machine's other load shows in the wall times (the
CPU-second columns do not), so run it on an otherwise idle machine. Every
child process is bounded by a timeout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SWEEP_TIMEOUT_S = 3600.0
SPEEDUP_TARGET = 1.6
STORM_TARGET_S = 600.0


def _child(args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run this script in a fresh process in a `--child-*` mode; parse its last line."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"bench child {args} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
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
    from sim.runner import run_summary

    run_summary(scenario, 0)  # warm-up: imports, scenario parsing
    events = virtual_ms = 0
    have_events = True
    t0, c0 = time.perf_counter(), time.process_time()
    for seed in range(1, seeds + 1):
        metrics = run_summary(scenario, seed)["metrics"]
        have_events = have_events and "events" in metrics
        events += int(metrics.get("events", 0))
        virtual_ms += int(metrics.get("virtual_ms", 0))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="dr-multi-zone", help="engine-speed scenario")
    p.add_argument("--engine-seeds", type=int, default=5)
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
    args = p.parse_args()

    if args.child_sweep:
        print(json.dumps(child_sweep(*args.child_sweep)))
        return 0
    if args.child_run:
        print(json.dumps(child_run(args.child_run[0], int(args.child_run[1]))))
        return 0

    figures: dict[str, Any] = {}
    if not args.skip_engine:
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
            figures["storm"] = {"wall_s": s["wall_s"], "cpu_s": s["cpu_s"], "metrics": m}
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
            print(f"target < {STORM_TARGET_S / 60:.0f} min: {verdict}")

    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
