#!/usr/bin/env bash
# Set up with the test tools, then lint, type-check and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
export PATH="$PWD/.venv/bin:$PATH"
# The report test opens a sweep report in headless Chromium (Debian's package).
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing chromium (for tests/test_sim_report.py)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y chromium >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; } \
    || echo "== chromium could not be installed: the browser test will be skipped, saying so"
fi
echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
# Several workers (CCR_TEST_WORKERS, default 3; 0 runs in this process): most
# of the suite is real daemons and clients waiting on each other. --dist
# loadscope keeps a module's tests on one worker, so module fixtures start once.
workers="${CCR_TEST_WORKERS:-3}"
if [ "$workers" = 0 ]; then
  exec pytest "$@"
fi
exec pytest -n "$workers" --dist loadscope "$@"
