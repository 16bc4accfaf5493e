#!/usr/bin/env bash
# The main job: set up, run the demo on the embedded defaults (three linked
# clusters, a sync link, disaster recovery), then a small simulator sweep on a
# local Spark session, ending with its aggregate table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python scripts/demo.py "$@"
out="$(mktemp -d "${TMPDIR:-/tmp}/ccr-sweep-XXXXXX")"
trap 'rm -rf "$out"' EXIT
echo
echo "=== the same questions in the simulator: a small sweep on Spark (local[2])"
echo "\$ ccr-sim sweep sim/sweeps/small.toml --master 'local[2]' --out $out"
.venv/bin/ccr-sim sweep sim/sweeps/small.toml --master 'local[2]' --out "$out"
