#!/usr/bin/env bash
# The main job: set up, run the demo on the embedded defaults (three linked
# clusters, a sync link, disaster recovery), then a small simulator sweep on a
# local Spark session, ending with its aggregate table, an HTML report kept in
# ./sweep-out/, and what the sweep showed in plain words.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/demo.py "$@"
out="$PWD/sweep-out"
echo
echo "=== the same questions in the simulator: a small sweep on Spark (local[2])"
echo "\$ ccr-sim sweep sim/sweeps/small.toml --master 'local[2]' --out $out --report"
.venv/bin/ccr-sim sweep sim/sweeps/small.toml --master 'local[2]' --out "$out" --report
echo
echo "=== what the sweep showed (numbers read from $out/aggregate)"
.venv/bin/python - "$out" <<'PY'
import sys

import pandas as pd

agg = pd.read_parquet(f"{sys.argv[1]}/aggregate")


def value(row: pd.Series, column: str) -> str:
    v = row.get(column)
    return "-" if v is None or pd.isna(v) else f"{v:g}"


runs, bad = int(agg["runs"].sum()), int(agg["runs_with_violations"].sum())
print(f"{runs} runs, {bad} with a broken invariant" + (
    " (each listed above with its replay command)." if bad else
    ": every run passed every checker (no acknowledged write lost beyond what a failover "
    "reported, no record read twice within one consumer session)."))
print("Per cell (a scenario with the sweep's parameters; its runs differ only by seed):")
for _, row in agg.iterrows():
    print(f"- {row['cell']} ({row['runs']} runs): at failover the promoted cluster lacked up "
          f"to {value(row, 'rpo_records_max')} acknowledged records, spanning up to "
          f"{value(row, 'rpo_ms_max')} ms of acknowledgements (rpo_records, rpo_ms); its "
          f"consumer read up to {value(row, 'consumer_duplicates_across_failover_max')} "
          f"records a second time after moving (consumer_duplicates_across_failover) and "
          f"skipped {value(row, 'consumer_skips_across_failover_max')}.")
rereads = agg.get("consumer_duplicates_across_failover_max", pd.Series(dtype=float)).max()
if pd.notna(rereads) and rereads > 0:
    print(
        "Why re-reads here and \"duplicates: 0\" in the demo above: a link copies a group's\n"
        "committed offsets in its discovery round (every 500 ms, plus its round trips to the\n"
        "source). The simulator's consumer polls and commits every 500 ms right up to the\n"
        "disaster, so on the new cluster it resumes at the last commit the link had copied\n"
        "before the source was lost and is delivered again what it read after that\n"
        "(at-least-once redelivery; no record is stored twice). The farther the link, the\n"
        "older that commit: compare the cells that differ only in link_latency_ms. The demo's\n"
        "consumer committed and the demo waited until B held the same committed offsets\n"
        "before the disaster, so it resumed exactly where it had stopped. The study\n"
        "docs/studies/mirror-vs-link.md measures the same effect on a near link (20 ms):\n"
        "14-32 records re-read per failover."
    )
else:
    print(
        "No simulated consumer read a record twice after moving, as in the demo above."
    )
print(
    "availability_target_producer is a producer writing to a follower topic before the\n"
    "failover: the contract refuses such writes, so 0 is the expected value; \"-\" means no\n"
    "run of that group had such a client (the legend under the table says why for each)."
)
PY
echo
echo "report: $out/report.html (one file; open it in a browser, no network needed)"
