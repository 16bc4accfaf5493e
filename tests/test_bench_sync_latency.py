"""bench/sync_latency.py runs end to end with tiny sizes, its fault proxies in
processes of their own (the default).

Only that every setup gives a row and that the table compares each with the
ASYNC row of its delay is checked; the figures themselves are not (the
machine's load decides them).
"""

from __future__ import annotations

import subprocess
import sys

from tests.harness import ROOT, _env

RUN_TIMEOUT_S = 240.0


def test_bench_sync_latency__every_setup_gives_a_row() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "sync_latency.py"),
            "--records", "20",
            "--burst", "50",
            "--delays-ms", "5",
        ],
        cwd=str(ROOT),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "proxies in processes of their own" in out
    rows = [line for line in out.splitlines() if line.startswith("| 5 |")]
    assert [r.split("|")[2].strip() for r in rows] == ["ASYNC x1", "SYNC x1", "SYNC x2"]
    for row in rows:
        rtt = float(row.split("|")[8])  # budget: the ASYNC row's rtt through the proxy + 2
        assert rtt >= 5 + 2, f"the proxy's 5 ms delay is not in the round trip: {row}"
