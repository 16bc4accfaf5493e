"""Recompute tests/test_sim_pinned_digests.py's pinned (trace, summary) digests.

Run after a change that is meant to alter simulation runs:

    python scripts/repin.py            # rewrite the constants in place
    python scripts/repin.py --check    # list the runs that moved, change nothing

Prints every run whose digests moved with the metrics that differ from the
pinned summary's, so the commit can say why they moved. A run with an
invariant violation is reported and left unpinned (the test would fail).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "proto" / "gen"), str(ROOT / "tests")]

from test_sim_pinned_digests import PINNED, SIZED, SMALL  # noqa: E402

from sim.runner import run_summary  # noqa: E402

PIN_FILE = ROOT / "tests" / "test_sim_pinned_digests.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report only")
    args = parser.parse_args()
    text = PIN_FILE.read_text()
    moved = 0
    failed = 0
    for scenario, seed in sorted(PINNED):
        summary = run_summary(scenario, seed, dict(SIZED.get(scenario, SMALL)))
        digest = str(summary["trace_digest"])
        summary_sha = hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()
        old_digest, old_sha = PINNED[(scenario, seed)]
        if summary["violations"]:
            failed += 1
            print(f"VIOLATION {scenario} seed {seed}: {summary['violations']}")
            continue
        if (digest, summary_sha) == (old_digest, old_sha):
            continue
        moved += 1
        what = "trace" if digest != old_digest else "summary"
        print(f"moved ({what}) {scenario} seed {seed}: {summary['metrics']}")
        text = re.sub(old_digest, digest, text, count=1)
        text = re.sub(old_sha, summary_sha, text, count=1)
    if not args.check and moved:
        PIN_FILE.write_text(text)
    print(f"{moved} moved, {failed} with violations, {len(PINNED)} pinned")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
