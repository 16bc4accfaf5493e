#!/usr/bin/env bash
# The main job: set up, then run the demo on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
