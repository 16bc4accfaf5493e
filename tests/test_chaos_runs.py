"""Short chaos runs against real daemons, judged by the simulator's checkers.

One ASYNC and one SYNC run from a seed (the nemeses the seed picks, a short
phase; the ASYNC one through the CLI with its simulator twin, which must
agree; the SYNC one with a transactional producer and read_committed readers
on the follower, invariant 5, and its twin, which must agree too), the
classic `kip986-dr` (a failover and a `recover --confirm` that moves
replicated committed offsets back, invariant 6) with every protection on
(`--secure`), and the planted bug
`ack-before-replicate`, which the checkers must catch (invariant 4: records
acknowledged while IN_SYNC lost after failover).
Every run samples the followers' replicated committed offsets (invariant 6).
The ASYNC run and the planted bug go through the CLI's fixed JSON form.
Every wait inside the runner is bounded and polls; each run ends the
processes it started.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos.runner import Run
from chaos.schedule import make_schedule
from sim.checkers import check_offset_samples

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 420
PHASE_S = "10"

pytestmark = pytest.mark.slow


def ccr_chaos(*args: str) -> tuple[int, dict[str, Any], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "chaos.cli", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=str(ROOT),
        env=env,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_cli_json__async_run_from_a_seed__clean_and_converged() -> None:
    rc, summary, stderr = ccr_chaos(
        "run", "--seed", "3", "--mode", "async", "--clusters", "2", "--phase-s", PHASE_S,
        "--no-operators", "--json",
    )  # fmt: skip
    assert {"seed", "operations", "anomalies", "converged", "replay"} <= set(summary)
    assert summary["seed"] == 3 and summary["mode"] == "ASYNC"
    replay = f"ccr-chaos run --seed 3 --mode async --clusters 2 --phase-s {PHASE_S} --no-operators"
    assert summary["replay"] == replay
    assert summary["operations"] > 50
    assert summary["anomalies"] == [], stderr[-3000:]
    assert summary["converged"] is True, summary["events"]
    assert summary["checked"]["offset_samples"] > 0, summary["checked"]
    assert rc == 0
    # The CLI runs the simulator twin by default; this run is the ASYNC one
    # whose twin must agree (the real-daemon twin check that
    # tests/test_chaos_twin.py ran on the same schedule, seed 3).
    twin = summary["twin"]
    assert "error" not in twin, twin
    assert twin["agrees"], (twin["differences"], twin["real"], twin["simulated"])
    assert twin["partitions"] == 4 and twin["links"] == 2
    # --json keeps stdout for the summary; the progress still reaches stderr as it happens.
    for step in ("starting 2 daemons", "nemesis phase", "converged", "judging"):
        assert step in stderr, stderr[-3000:]


def test_sync_transactional_run_from_a_seed__clean_and_converged(tmp_path: Path) -> None:
    schedule = make_schedule(4, mode="sync", clusters=2, phase_s=float(PHASE_S), operators=False)
    schedule = dataclasses.replace(schedule, transactional=True)
    result = Run(
        schedule, "ccr-chaos run --seed 4 --mode sync", workdir=tmp_path, twin=True
    ).execute()
    assert result.mode == "SYNC"
    assert result.operations > 50
    assert result.counts["ok"] > 0
    assert result.anomalies == [], result.events
    assert result.converged, result.events
    # Invariants 5 and 6 were judged on something.
    assert result.checked["read_committed_polls"] > 0, result.checked
    assert result.checked["transactions"] > 0, result.checked
    assert result.checked["commits"] > 0 and result.checked["offset_samples"] > 0
    # Its simulator twin agrees (the SYNC twin check on real daemons; the
    # ASYNC one is the CLI run above).
    report = result.twin
    assert report is not None and "error" not in report, report
    assert report["agrees"], (report["differences"], report["real"], report["simulated"])
    assert report["partitions"] == 4 and report["links"] == 2


def test_txn_failover_cut_at_the_last_stable_offset__named_counted_judged_twin_agrees(
    tmp_path: Path,
) -> None:
    """The classic `txn-failover` under `--link-config failover.truncation=
    last-stable-offset` (the txn-failover study's headline on real daemons):
    A is lost while a transaction is held open, B fails over with force and
    its answer names the cut; the run stays clean (a named cut is no loss to
    the checks), and its summary counts what the cut cost: records another
    cluster had acknowledged and B's reader had read."""
    configs = (("failover.truncation", "last-stable-offset"),)
    schedule = make_schedule(1, name="txn-failover", phase_s=float(PHASE_S), link_configs=configs)
    replay = "ccr-chaos run --seed 1 --schedule txn-failover " + " ".join(
        f"--link-config {k}={v}" for k, v in configs
    )
    result = Run(schedule, replay, workdir=tmp_path, twin=True).execute()
    assert result.anomalies == [], result.events
    assert result.converged, result.events
    assert result.twin is not None and result.twin["agrees"], result.twin
    counts = result.failovers
    assert counts is not None and counts["failovers"] == 1, result.events
    if counts["failover_records_cut"] == 0:
        # Each transaction is open for 1.5 s of about 1.6; A's loss fell in
        # the gap between a commit and the next transaction this time.
        assert counts["failover_aborted_transactions"] == 0, counts
        pytest.skip(f"needs a transaction open on B at A's loss; none was this time: {counts}")
    assert any("cut" in e and "record(s) in" in e for e in result.events), result.events
    assert counts["failover_aborted_transactions"] == 0, counts
    assert 0 < counts["failover_acknowledged_cut"] <= counts["failover_acknowledged_lost"], counts
    assert counts["consumer_reads_cut_by_failover"] > 0, counts


def test_cli_json__retention_outage_under_gap_policy_stop__stopped_resumed_counted_clean() -> None:
    """The classic `retention-outage` through the CLI under `--link-config
    gap.policy=stop` (the retention-gap study's headline on real daemons): B
    is down longer than A keeps records; its partitions stop at their gaps
    until the operator's answer (gap.policy continue, resume-partition); the
    records A's retention deleted are no loss to the checks; the summary
    counts the gaps and the resumed partitions, and the twin agrees."""
    rc, summary, stderr = ccr_chaos(
        "run", "--seed", "1", "--schedule", "retention-outage",
        "--link-config", "gap.policy=stop", "--json",
    )  # fmt: skip
    replay = "ccr-chaos run --seed 1 --schedule retention-outage --link-config gap.policy=stop"
    assert summary["replay"] == replay
    assert summary["anomalies"] == [], stderr[-3000:]
    assert summary["converged"] is True, summary["events"]
    assert rc == 0
    retention = summary["retention"]
    assert retention["partitions_resumed"] >= 1 and retention["gap_records"] > 0, retention
    assert retention["gaps"] >= retention["partitions_resumed"], retention
    assert summary["twin"]["agrees"], summary["twin"]


def test_kip986_dr_with_security_on__offsets_moved_back_reported_clean_no_secret_logged(
    tmp_path: Path,
) -> None:
    """The classic `kip986-dr` (a failover and a `recover --confirm` that moves
    replicated committed offsets back, invariant 6), with every protection on
    (chaos/security.py: SASL_SSL listeners, the authorizer, link credentials,
    TLS links): every client
    authenticates, every replication call (and recovery's partition
    histories) runs in a link session, and the judgement is the same."""
    schedule = make_schedule(5, name="kip986-dr", phase_s=float(PHASE_S))
    schedule = dataclasses.replace(schedule, secure=True)
    run = Run(schedule, "ccr-chaos run --seed 5 --schedule kip986-dr --secure",
              workdir=tmp_path, keep=True)
    result = run.execute()
    assert result.anomalies == [], result.events
    assert result.converged, result.events
    assert result.checked["offset_moves"] > 0, result.events
    # The samples saw C's offsets move back; only the recovery's report excuses it.
    unexcused = check_offset_samples(run.offset_samples, [])
    assert any(v.detail.startswith("C:") and "moved back" in v.detail for v in unexcused), (
        result.checked
    )
    # Every protection was on, and no secret reached a log.
    secrets = [(tmp_path / "link-credentials").read_text().strip(),
               (tmp_path / "users.txt").read_text().strip().split(":", 1)[1]]
    assert all(secrets)
    assert any("security on" in e for e in result.events)
    logs = sorted(tmp_path.rglob("*.log"))
    assert logs
    for log in logs:
        text = log.read_text(errors="replace")
        assert not any(secret in text for secret in secrets), log


def test_planted_bug__ack_before_replicate__is_caught_as_lost_writes_after_failover() -> None:
    # The 9 s phase is the schedule's shortest (its cut, loss and failover at
    # 2, 5 and 6 s); the default 20 s only waited longer after the failover.
    rc, summary, stderr = ccr_chaos(
        "run", "--seed", "1", "--plant-bug", "ack-before-replicate", "--phase-s", "9", "--json"
    )
    assert rc == 1
    assert summary["schedule"] == "sync-ack-failover"
    assert summary["anomalies"], summary["events"]
    kinds = {a["invariant"] for a in summary["anomalies"]}
    assert "4 sync acks / lost_write" in kinds, summary["anomalies"]
    # Every anomaly is printed with the seed and the command that replays it.
    assert "ANOMALY seed=1" in stderr
    assert "replay: ccr-chaos run --seed 1 --phase-s 9 --plant-bug ack-before-replicate" in stderr
