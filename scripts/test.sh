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
# The gRPC API from other languages (docs/grpc.md): Node.js with the packages
# examples/grpc-node/package.json pins (@grpc/grpc-js, @grpc/proto-loader and
# buf, the protos' linter) for tests/test_grpc_node_client.py and
# tests/test_proto_tools.py; protoc and the Go and Java generators (Debian's)
# for tests/test_proto_tools.py. A tool that cannot be installed skips its
# tests, saying so.
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  wanted=()
  command -v npm >/dev/null 2>&1 || wanted+=(nodejs npm)
  for tool in protoc:protobuf-compiler protoc-gen-go:protoc-gen-go \
              protoc-gen-go-grpc:protoc-gen-go-grpc grpc_java_plugin:protobuf-compiler-grpc-java-plugin; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || wanted+=("${tool#*:}")
  done
  [ -f /usr/share/java/protobuf.jar ] || wanted+=(libprotobuf-java)
  if [ "${#wanted[@]}" -gt 0 ]; then
    echo "== installing ${wanted[*]} (the gRPC API's tests in other languages)"
    apt-get install -y --no-install-recommends "${wanted[@]}" >/dev/null 2>&1 \
      || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${wanted[@]}" >/dev/null; } \
      || echo "== ${wanted[*]} could not be installed: their tests will be skipped, saying so"
  fi
fi
if command -v npm >/dev/null 2>&1; then
  echo "== npm packages of examples/grpc-node"
  npm install --prefix examples/grpc-node --no-package-lock --no-audit --no-fund --loglevel=error \
    >/dev/null || echo "== npm install failed: the Node.js and buf tests will be skipped, saying so"
fi
echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
# Compiled modules are written once and read by every process the suite
# starts (daemons, CLIs, workers), also where the environment says not to
# write them: without them each daemon compiles the project again at start
# (tests/conftest.py says the same for a bare `pytest`).
unset PYTHONDONTWRITEBYTECODE
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
