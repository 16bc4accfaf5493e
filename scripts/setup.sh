#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project into it, editable, with
# the extras named as arguments (e.g. `dev`, `bench`). Needs only Python 3.11.
#
# Idempotent and quick when nothing changed: .venv/setup-stamp records what the
# last install was made from (pyproject.toml's hash, this checkout's path, the
# interpreter) and which extras it holds. The package is installed again only
# when one of those changed, the venv is missing, or an extra not yet installed
# is asked for. Every extra installed so far is kept. Code changes need
# no reinstall: the install is editable.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
stamp=.venv/setup-stamp

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c '' 2>/dev/null; then
  rm -rf .venv
  "$PY" -m venv .venv
fi

# What the install depends on, besides the extras: one line, compared as text.
source_id="$(.venv/bin/python - <<'EOF'
import hashlib, os, sys
digest = hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest()
print(f"pyproject={digest} checkout={os.getcwd()} python={sys.version.split()[0]}")
EOF
)"

installed_extras=""
if [ -f "$stamp" ]; then
  installed_extras="$(sed -n 2p "$stamp")"
fi

# The extras wanted: those asked for plus those already installed, sorted, unique.
wanted="$(printf '%s\n' "$@" ${installed_extras//,/ } | sed '/^$/d' | sort -u | paste -sd, -)"

if [ -f "$stamp" ] && [ "$(sed -n 1p "$stamp")" = "$source_id" ] \
   && [ "$(sed -n 2p "$stamp")" = "$wanted" ]; then
  exit 0
fi

echo "setup: installing the project into .venv${wanted:+ with extras [$wanted]} (a minute or two)" >&2
rm -f "$stamp"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".${wanted:+[$wanted]}"
printf '%s\n%s\n' "$source_id" "$wanted" > "$stamp"
