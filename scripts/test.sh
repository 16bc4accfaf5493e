#!/usr/bin/env bash
# Set up with the test tools, then lint, type-check and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
exec pytest "$@"
