"""bench/mirror.py runs end to end with tiny sizes.

Only that the rows exist and that every target got every record is checked;
the figures themselves are not (the machine's load decides them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.harness import ROOT, _env

RECORDS = 300
RUN_TIMEOUT_S = 170.0


def test_bench_mirror__every_row_runs_and_every_target_gets_every_record(
    tmp_path: Path,
) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "mirror.py"),
            "--records", str(RECORDS),
            "--sizes", "100",
            "--latency-records", "5",
            "--latency-rate", "50",
            "--timeout-s", "60",
            "--json", str(out),
        ],
        cwd=str(ROOT),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures: dict[str, Any] = json.loads(out.read_text())
    rows = {(r["system"], r["mode"]): r for r in figures["rows"]}
    assert set(rows) == {
        ("link linkd->linkd", "offsets kept"),
        ("loop linkd->linkd", "at-least-once"),
        ("MM2 linkd->linkd", "at-least-once"),
        ("MM2 linkd->linkd", "exactly-once"),
        ("MM2 tansu->tansu", "at-least-once"),
        ("MM2 tansu->tansu", "exactly-once"),
    }
    # Exactly-once is never run against tansu, and says why.
    assert "read_committed" in rows[("MM2 tansu->tansu", "exactly-once")]["skipped"]
    ran = [r for r in figures["rows"] if not r["skipped"]]
    # The tansu at-least-once row may only be skipped when tansu is not installed.
    tansu = rows[("MM2 tansu->tansu", "at-least-once")]
    assert not tansu["skipped"] or "not installed" in tansu["skipped"]
    assert len(ran) >= 4
    for r in ran:
        assert r["records"] == RECORDS
        assert r["received"] == RECORDS and r["complete"], r
        assert r["seconds"] is not None and r["seconds"] > 0, r
    # The link copies offsets, so it never duplicates.
    assert rows[("link linkd->linkd", "offsets kept")]["duplicates"] == 0
    # Exactly-once: no duplicates for a read_committed reader.
    assert rows[("MM2 linkd->linkd", "exactly-once")]["duplicates"] == 0
    ratios = {(x["system"], x["mode"]) for x in figures["ratios"]}
    assert {(r["system"], r["mode"]) for r in ran if r["system"] != "link linkd->linkd"} == ratios
    assert {lat["system"] for lat in figures["latency"]} >= {"link linkd->linkd"}
    assert "x link" in done.stdout
