"""The key figures of the shipped studies (docs/studies/), drawn from their sweeps.

    python scripts/study_figures.py STUDY SWEEP_OUT_DIR [-o docs/studies]

STUDY is one of the sweep files under sim/studies/ (catch-up-storm,
connect-rebalance, dr-third-cluster, failback-reconciliation, fetch-bound,
mirror-vs-link, retention-gap, sync-vs-async, txn-failover) and SWEEP_OUT_DIR
the directory
`ccr-sim sweep sim/studies/STUDY.toml --out` wrote. Writes `STUDY.png` (the
metric against the grid parameters the page discusses, mean over seeds) into
the output directory; for dr-third-cluster also
`dr-third-cluster-timeline.png`, the timeline of its first cell's first seed
drawn by `ccr-sim report`'s own figure function. The runs are read with
`sim.sweep_store.read_runs`, as the report reads them; every figure names the
sweep's commit and digest.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim import report, sweep_store  # noqa: E402


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(
    fig: Any, manifest: report.Manifest, out: Path, over_seeds: str = "mean over seeds"
) -> None:
    fig.text(
        0.01, 0.005,
        f"sweep {manifest.sweep_file} | commit {manifest.git_commit[:12]} | "
        f"digest {manifest.sweep_digest[:16]}; {over_seeds}",
        fontsize=7, color="#444444", ha="left", va="bottom",
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=100)
    _plt().close(fig)
    print(f"wrote {out}")


def sync_vs_async(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, colour in (("ASYNC", "#d62728"), ("SYNC", "#1f77b4")):
        rows = runs[runs["param_mode"] == mode].groupby("param_link_latency_ms").mean(
            numeric_only=True
        )
        rtt = [2 * int(v) for v in rows.index]
        left.plot(rtt, rows["rpo_records"], "o-", color=colour, label=f"{mode} records")
        right.plot(rtt, rows["produce_latency_p50_replicated_ms"], "o-", color=colour,
                   label=f"{mode} p50")
        right.plot(rtt, rows["produce_latency_p99_replicated_ms"], "s--", color=colour,
                   label=f"{mode} p99")
    left.set_title("RPO at failover (acknowledged records lost)", fontsize=10)
    left.set_xlabel("round trip A-B (ms)")
    left.set_ylabel("records")
    right.set_title("produce latency while replicated", fontsize=10)
    right.set_xlabel("round trip A-B (ms)")
    right.set_ylabel("ms")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _finish(fig, manifest, out)


def dr_third_cluster(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    keeps_up = runs[runs["param_consumer_lag_records"] == 0]
    for ac, marker in ((2, "o"), (50, "s")):
        rows = keeps_up[keeps_up["param_edge_A_C_latency_ms"] == ac].groupby(
            "param_edge_A_B_latency_ms"
        ).mean(numeric_only=True)
        left.plot(rows.index, rows["rpo_records"], marker + ":", color="#7f7f7f",
                  label=f"B lost at failover (A->C {ac} ms)")
        left.plot(rows.index, rows["records_truncated_by_recovery"].fillna(0), marker + "-",
                  color="#d62728", label=f"C cut at relink (A->C {ac} ms)")
    left.set_title("records B lost, and records C cut", fontsize=10)
    left.set_xlabel("latency A->B (ms)")
    left.set_ylabel("records")
    for lag, colour in ((0, "#1f77b4"), (100, "#ff7f0e")):
        rows = runs[runs["param_consumer_lag_records"] == lag].groupby(
            "param_relink_at_ms"
        ).mean(numeric_only=True)
        after_loss_s = [(t - 10_000) / 1000 for t in rows.index]
        right.plot(after_loss_s, rows["consumer_longest_gap_ms"] / 1000,
                   "o-", color=colour, label=f"C's consumer {lag} records behind")
    right.set_title("C's consumer: longest time without new records", fontsize=10)
    right.set_xlabel("relink, seconds after A was lost")
    right.set_ylabel("s")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _finish(fig, manifest, out)
    first = runs.iloc[0]
    params = {c.removeprefix("param_"): first[c] for c in runs.columns if c.startswith("param_")}
    params = {k: int(v) for k, v in params.items()}
    from sim import timeline

    t = timeline.record(str(first["scenario"]), int(first["seed"]), params)
    command = report.cells(runs.iloc[:1])[0].replay(int(first["seed"]))
    png = report.timeline_figure(t, manifest, command)
    path = out.with_name(out.stem + "-timeline.png")
    path.write_bytes(base64.b64decode(png))
    print(f"wrote {path} (digest {'matches' if t.digest == first['trace_digest'] else 'DIFFERS'})")


def mirror_vs_link(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    lags = sorted(int(v) for v in runs["param_consumer_lag_records"].unique())
    fig, axes = plt.subplots(1, len(lags), figsize=(5.5 * len(lags), 4), squeeze=False)
    colours = {10: "#1f77b4", 100: "#ff7f0e", 1000: "#2ca02c"}
    for ax, lag in zip(axes.flat, lags, strict=True):
        mine = runs[runs["param_consumer_lag_records"] == lag]
        for lag_max, colour in colours.items():
            rows = mine[(mine["param_link_type"] == "mirror")
                        & (mine["param_offset_lag_max"] == lag_max)].groupby(
                "param_emit_checkpoints_interval_ms").mean(numeric_only=True)
            ax.plot([i / 1000 for i in rows.index], rows["consumer_duplicates_across_failover"],
                    "o-", color=colour, label=f"MM2, offset.lag.max {lag_max}")
        link = mine[mine["param_link_type"] == "link"].groupby(
            "param_emit_checkpoints_interval_ms").mean(numeric_only=True)
        ax.plot([i / 1000 for i in link.index], link["consumer_duplicates_across_failover"],
                "k^-", label="offset-preserving link")
        ax.set_title(f"records re-read after failover (consumer {lag} records behind)",
                     fontsize=10)
        ax.set_xlabel("MM2 checkpoint interval (s)")
        ax.set_ylabel("records")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _finish(fig, manifest, out)


def catch_up_storm(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    scenarios = sorted(str(s) for s in runs["scenario"].unique())
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.5 * len(scenarios), 4), squeeze=False)
    for ax, name in zip(axes.flat, scenarios, strict=True):
        rows = runs[runs["scenario"] == name]
        # The limits in rising order, "unlimited" (0) last.
        limit = rows["param_replication_limit_bytes_per_s"].astype(int)
        rows = rows.assign(_order=limit.where(limit > 0, 1 << 62)).sort_values("_order")
        labels = [f"{int(v) // 1_000_000} MB/s" if int(v) else "unlimited"
                  for v in rows["param_replication_limit_bytes_per_s"]]
        x = range(len(labels))
        ax.bar([i - 0.2 for i in x], rows["catchup_ms"] / 1000, width=0.4, color="#1f77b4",
               label="catch-up time (s)")
        twin = ax.twinx()
        twin.plot(list(x), rows["produce_latency_p99_catchup_ms"], "o-", color="#d62728",
                  label="probe p99 during catch-up (ms)")
        twin.plot(list(x), rows["produce_latency_p99_steady_ms"], "s--", color="#7f7f7f",
                  label="probe p99 otherwise (ms)")
        twin.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2,
                    frameon=False)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels)
        ax.set_xlabel("replication rate limit")
        ax.set_ylabel("catch-up (s)", color="#1f77b4")
        twin.set_ylabel("p99 (ms)", color="#d62728")
        twin.set_ylim(bottom=0)
        ax.set_title(name, fontsize=10, pad=22)
        ax.grid(axis="y", alpha=0.3)
    _finish(fig, manifest, out)


def connect_rebalance(runs: Any, manifest: report.Manifest, out: Path) -> None:
    """Task pauses (p50, longest) and the longest catch-up after a heal, per
    deployment: MM2 on Connect under each protocol and delay, and the link."""
    plt = _plt()
    labels, p50, longest, catchup = [], [], [], []
    mirror = runs[runs["param_link_type"] == "mirror"]
    for (protocol, delay), rows in mirror.groupby(
        ["param_connect_protocol", "param_scheduled_rebalance_max_delay_ms"], sort=True
    ):
        labels.append(f"MM2 {protocol}\ndelay {int(delay) // 1000} s")
        p50.append(rows["connect_task_pause_ms_p50"].astype(float).mean() / 1000)
        longest.append(rows["connect_task_pause_ms_max"].astype(float).mean() / 1000)
        catchup.append(rows["catchup_ms"].astype(float).mean() / 1000)
    link = runs[runs["param_link_type"] == "link"]
    labels.append("offset-preserving\nlink")
    p50.append(float("nan"))
    longest.append(float("nan"))
    catchup.append(link["catchup_ms"].astype(float).mean() / 1000)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    xs = list(range(len(labels)))
    width = 0.27
    ax.bar([x - width for x in xs], p50, width, label="task pause, p50", color="#1f77b4")
    ax.bar(xs, longest, width, label="longest task pause", color="#d62728")
    ax.bar([x + width for x in xs], catchup, width, label="longest catch-up after a heal",
           color="#2ca02c")
    ax.set_yscale("log")
    ax.set_xticks(xs, labels, fontsize=9)
    ax.set_ylabel("seconds (virtual, log scale)")
    ax.set_title("MirrorMaker 2 on Kafka Connect: how long worker faults stop replication "
                 "(a link has no tasks: no pause bars)", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    _finish(fig, manifest, out)


def _label_txn_panels(
    axes: Any, panels: tuple[tuple[str, str, str], ...], legend: str, size: int
) -> None:
    """Titles, axes and legends of panels drawn against how long transactions stay open."""
    for ax, (_metric, title, unit) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("how long each transaction stays open (ms)")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=size, title=legend, title_fontsize=size)


def fetch_bound(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (
        ("follower_lag_records_mean", "follower lag while A lives (mean, records)", "records"),
        ("rpo_records", "RPO at failover (acknowledged records lost)", "records"),
        ("failover_aborted_transactions", "transactions the failover aborted", "per failover"),
    )
    for bound, colour in (("high-watermark", "#1f77b4"), ("last-stable-offset", "#d62728")):
        rows = runs[runs["param_fetch_bound"] == bound].groupby("param_txn_open_ms").mean(
            numeric_only=True
        )
        for ax, (metric, _title, _unit) in zip(axes, panels, strict=True):
            ax.plot([int(v) for v in rows.index], rows[metric], "o-", color=colour, label=bound)
    _label_txn_panels(axes, panels, "fetch.bound", 8)
    _finish(fig, manifest, out)


def txn_failover(runs: Any, manifest: report.Manifest, out: Path) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    # Acknowledged records lost: what B lacked as the failover began, and
    # the plain records the source acknowledged that its cut removed.
    runs = runs.assign(lost=runs["rpo_records"] + runs["failover_acknowledged_cut"])
    panels = (
        ("lost", "acknowledged records lost (RPO + cut)", "records"),
        ("consumer_reads_cut_by_failover", "records B's readers read, then cut", "records"),
        ("failover_aborted_transactions", "transactions the failover aborted", "per failover"),
    )
    styles = {
        ("abort", "high-watermark"): ("#1f77b4", "o-"),
        ("abort", "last-stable-offset"): ("#1f77b4", "s--"),
        ("last-stable-offset", "high-watermark"): ("#d62728", "o-"),
        ("last-stable-offset", "last-stable-offset"): ("#d62728", "s--"),
    }
    for (rule, bound), (colour, style) in styles.items():
        chosen = runs[
            (runs["param_failover_truncation"] == rule) & (runs["param_fetch_bound"] == bound)
        ]
        rows = chosen.groupby("param_txn_open_ms").mean(numeric_only=True)
        for ax, (metric, _title, _unit) in zip(axes, panels, strict=True):
            ax.plot(
                [int(v) for v in rows.index], rows[metric], style, color=colour,
                label=f"{rule} / fetch {bound}",
            )  # fmt: skip
    _label_txn_panels(axes, panels, "failover.truncation / fetch.bound", 7)
    _finish(fig, manifest, out)


def retention_gap(runs: Any, manifest: report.Manifest, out: Path) -> None:
    """Records lost, B's largest lag and the time its link was not following,
    against the outage's length, per gap.policy; A's retention marked."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (
        ("gap_records", "records never copied (gaps recorded)", "records"),
        ("follower_lag_records_max", "B's largest lag behind A", "records"),
        ("link_state_ms_CATCHING_UP", "time B's link was not following", "seconds (virtual)"),
    )
    for policy, colour in (("continue", "#1f77b4"), ("stop", "#d62728")):
        rows = runs[runs["param_gap_policy"] == policy].groupby("param_outage_ms").mean(
            numeric_only=True
        )
        outage_s = [int(v) / 1000 for v in rows.index]
        for ax, (metric, _title, unit) in zip(axes, panels, strict=True):
            values = rows[metric].astype(float).fillna(0)
            if unit.startswith("seconds"):
                values = values / 1000
            ax.plot(outage_s, values, "o-", color=colour, label=policy)
    for ax, (_metric, title, unit) in zip(axes, panels, strict=True):
        ax.axvline(3, color="#888888", linestyle=":", label="A's retention.ms (3 s)")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("B's outage (s); under stop the operator resumes at 16 s")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="gap.policy", title_fontsize=8)
    _finish(fig, manifest, out)


DIVERGED = "diverged after failback"
_MORE = re.compile(r"\.\.\. and (\d+) more$")


def diverged_batches(violations_json: str) -> int:
    """The batches a run's "diverged after failback" violations name: the
    judge lists the first five of a recovery and ends with "... and N more"."""
    count = 0
    for v in json.loads(violations_json):
        if v["invariant"] == DIVERGED:
            more = _MORE.search(v["detail"])
            count += int(more.group(1)) if more else 1
    return count


def failback_reconciliation(runs: Any, manifest: report.Manifest, out: Path) -> None:
    """Per failback.reconciliation rule, against the unclean election's
    depth: the runs the judge found diverged after the failback, the records
    A kept that differ from B's, what the recovery cut, and the runs in
    which A follows B again at the end (no "one writer at rest")."""
    plt = _plt()
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    runs = runs.assign(
        diverged_runs=runs["violations_json"].map(lambda j: int(diverged_batches(j) > 0)),
        diverged=runs["violations_json"].map(diverged_batches),
        cut=runs["records_truncated_by_recovery"].astype(float).fillna(0),
        follows=runs["violations_json"].map(
            lambda j: int(all(v["invariant"] != "one writer at rest" for v in json.loads(j)))
        ),
    )
    panels = (
        ("diverged_runs", "runs judged diverged after failback", "runs of 10", "sum"),
        ("diverged", "records A kept that differ from B's", "records", "mean"),
        ("cut", "records the recovery cut from A", "records", "mean"),
        ("follows", "runs in which A follows B at the end", "runs of 10", "sum"),
    )
    styles = {
        "history": ("#1f77b4", "o-", 9),
        "last-mirrored-offset": ("#d62728", "s-", 7),
        "last-mirrored-leader-epoch": ("#2ca02c", "^--", 6),
    }
    for rule, (colour, style, size) in styles.items():
        grouped = runs[runs["param_failback_reconciliation"] == rule].groupby(
            "param_unclean_records"
        )
        for ax, (metric, _title, _unit, how) in zip(axes, panels, strict=True):
            rows = grouped[metric].sum() if how == "sum" else grouped[metric].mean()
            depths = [int(v) for v in rows.index]
            ax.plot(depths, rows.astype(float), style, color=colour, markersize=size, label=rule)
    for ax, (_metric, title, unit, _how) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("records the unclean election took back")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="failback.reconciliation", title_fontsize=7)
    _finish(fig, manifest, out, "runs counted over the 10 seeds, records a mean over them")


STUDIES: dict[str, Callable[[Any, report.Manifest, Path], None]] = {
    "sync-vs-async": sync_vs_async,
    "dr-third-cluster": dr_third_cluster,
    "mirror-vs-link": mirror_vs_link,
    "catch-up-storm": catch_up_storm,
    "connect-rebalance": connect_rebalance,
    "fetch-bound": fetch_bound,
    "txn-failover": txn_failover,
    "retention-gap": retention_gap,
    "failback-reconciliation": failback_reconciliation,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", choices=sorted(STUDIES))
    parser.add_argument("sweep_out", type=Path, help="the sweep's --out directory")
    parser.add_argument("-o", "--out-dir", type=Path, default=ROOT / "docs" / "studies")
    args = parser.parse_args(argv)
    manifest = report.load_manifest(args.sweep_out)
    runs = sweep_store.read_runs(args.sweep_out)
    if len(runs) == 0:
        print(f"{args.sweep_out}: no runs", file=sys.stderr)
        return 1
    STUDIES[args.study](runs, manifest, args.out_dir / f"{args.study}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
