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
The ASYNC run, the retention classic and the planted bug go through the
CLI's fixed JSON form, as processes started together with the module's first
test, so that they run beside the others.
Every wait inside the runner is bounded and polls; each run ends the
processes it started.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
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


# The runs through the CLI, by the test that judges each. They start together
# when the module's first test begins (those of the tests selected), each a
# process of its own beside the runs the other tests make in this process:
# a run is mostly daemons and clients waiting on each other and on its
# schedule, so the module takes about as long as its longest runs, not their
# sum. Each run's daemons, ports and directories are its own.
CLI_RUNS: dict[str, tuple[str, ...]] = {
    "test_cli_json__async_run_from_a_seed__clean_and_converged": (
        "run", "--seed", "3", "--mode", "async", "--clusters", "2", "--phase-s", PHASE_S,
        "--no-operators", "--json",
    ),
    "test_cli_json__retention_outage_under_gap_policy_stop__stopped_resumed_counted_clean": (
        "run", "--seed", "1", "--schedule", "retention-outage",
        "--link-config", "gap.policy=stop", "--json",
    ),
    # The 9 s phase is the schedule's shortest (its cut, loss and failover at
    # 2, 5 and 6 s); the default 20 s only waited longer after the failover.
    "test_planted_bug__ack_before_replicate__is_caught_as_lost_writes_after_failover": (
        "run", "--seed", "1", "--plant-bug", "ack-before-replicate", "--phase-s", "9", "--json"
    ),
}  # fmt: skip


class CliRuns:
    """`python -m chaos.cli ARGS` per test name, started at once; `result`
    waits for one and reads its JSON summary."""

    def __init__(self, names: set[str], workdir: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
        for name in sorted(names):
            out, err = workdir / f"{name}.out", workdir / f"{name}.err"
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "chaos.cli", *CLI_RUNS[name]],
                    stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                    cwd=str(ROOT), env=env,
                )  # fmt: skip
            self.procs[name] = (proc, out, err)

    def result(self, name: str) -> tuple[int, dict[str, Any], str]:
        proc, out, err = self.procs[name]
        rc = proc.wait(timeout=RUN_TIMEOUT_S)
        stdout, stderr = out.read_text(), err.read_text(errors="replace")
        assert stdout.strip(), stderr[-3000:]
        return rc, json.loads(stdout), stderr

    def stop(self) -> None:
        """Ends a run whose test did not wait for it (a failure before)."""
        for proc, _out, _err in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


@pytest.fixture(scope="module")
def cli_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CliRuns]:
    selected = {item.originalname for item in request.session.items}
    runs = CliRuns(set(CLI_RUNS) & selected, tmp_path_factory.mktemp("chaos-cli"))
    try:
        yield runs
    finally:
        runs.stop()


@pytest.fixture(autouse=True)
def _start_cli_runs(cli_runs: CliRuns) -> None:
    """Every test of the module starts the CLI runs (the first one does)."""


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
    # ASYNC one is the CLI run below).
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
    # Each record A acknowledged that B's final log lacks was judged against
    # the failover's answer (and named by it: the run is clean).
    judged = result.checked["failover_records_judged"]
    assert judged > 0, result.checked
    assert result.checked["failover_records_named"] == judged, result.checked


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


# -- the CLI runs (started with the module's first test) ------------------------------


def test_cli_json__async_run_from_a_seed__clean_and_converged(cli_runs: CliRuns) -> None:
    rc, summary, stderr = cli_runs.result(
        "test_cli_json__async_run_from_a_seed__clean_and_converged"
    )
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
    # whose twin must agree (the SYNC one is the transactional run above).
    twin = summary["twin"]
    assert "error" not in twin, twin
    assert twin["agrees"], (twin["differences"], twin["real"], twin["simulated"])
    assert twin["partitions"] == 4 and twin["links"] == 2
    # --json keeps stdout for the summary; the progress still reaches stderr as it happens.
    for step in ("starting 2 daemons", "nemesis phase", "converged", "judging"):
        assert step in stderr, stderr[-3000:]


def test_cli_json__retention_outage_under_gap_policy_stop__stopped_resumed_counted_clean(
    cli_runs: CliRuns,
) -> None:
    """The classic `retention-outage` through the CLI under `--link-config
    gap.policy=stop` (the retention-gap study's headline on real daemons): B
    is down longer than A keeps records; its partitions stop at their gaps
    until the operator's answer (gap.policy continue, resume-partition); the
    records A's retention deleted are no loss to the checks; the summary
    counts the gaps and the resumed partitions, and the twin agrees."""
    rc, summary, stderr = cli_runs.result(
        "test_cli_json__retention_outage_under_gap_policy_stop__stopped_resumed_counted_clean"
    )
    replay = "ccr-chaos run --seed 1 --schedule retention-outage --link-config gap.policy=stop"
    assert summary["replay"] == replay
    assert summary["anomalies"] == [], stderr[-3000:]
    assert summary["converged"] is True, summary["events"]
    assert rc == 0
    retention = summary["retention"]
    assert retention["partitions_resumed"] >= 1 and retention["gap_records"] > 0, retention
    assert retention["gaps"] >= retention["partitions_resumed"], retention
    assert summary["twin"]["agrees"], summary["twin"]


def test_planted_bug__ack_before_replicate__is_caught_as_lost_writes_after_failover(
    cli_runs: CliRuns,
) -> None:
    rc, summary, stderr = cli_runs.result(
        "test_planted_bug__ack_before_replicate__is_caught_as_lost_writes_after_failover"
    )
    assert rc == 1
    assert summary["schedule"] == "sync-ack-failover"
    assert summary["anomalies"], summary["events"]
    kinds = {a["invariant"] for a in summary["anomalies"]}
    assert "4 sync acks / lost_write" in kinds, summary["anomalies"]
    # Every anomaly is printed with the seed and the command that replays it.
    assert "ANOMALY seed=1" in stderr
    assert "replay: ccr-chaos run --seed 1 --phase-s 9 --plant-bug ack-before-replicate" in stderr
