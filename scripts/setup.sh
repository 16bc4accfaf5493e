#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project into it, with the extras
# named as arguments (e.g. `dev`, `bench`). Idempotent; needs only Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
extras=""
if [ "$#" -gt 0 ]; then
  extras="[$(IFS=,; echo "$*")]"
fi
.venv/bin/python -m pip install --quiet -e ".${extras}"
