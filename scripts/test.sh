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
# The run's JUnit report names the failed tests again as the log's last
# lines (scripts/failed_tests.py), after pytest's own long summary.
workers="${CCR_TEST_WORKERS:-3}"
results="$(mktemp -d)/results.xml"
parallel=(-n "$workers" --dist loadscope)
if [ "$workers" = 0 ]; then
  parallel=()
fi
status=0
pytest "${parallel[@]}" --junitxml="$results" "$@" || status=$?
if [ "$status" != 0 ]; then
  python scripts/failed_tests.py "$results" || true
fi
exit "$status"
