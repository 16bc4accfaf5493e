"""The shipped studies (sim/studies/*.toml, docs/studies/): every sweep file
is valid against the real runner, and each scenario or parameter path they
added runs, on its smallest cell, and measures what its page says."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from linkd.core import link_rounds as rounds
from linkd.core import replication as rep
from linkd.core.link_driver import BACKOFF_MAX_MS
from sim import scenario as scenarios
from sim import sweep
from sim.history import Poll, Send
from sim.resources import IoDevice
from sim.runner import run_summary
from sim.sweep import load_sweep
from sim.world import Simulation

STUDIES = Path(__file__).resolve().parent.parent / "sim" / "studies"
PAGES = Path(__file__).resolve().parent.parent / "docs" / "studies"


def study_files() -> list[Path]:
    return sorted(STUDIES.glob("*.toml"))


def test_there_are_studies_and_each_has_a_page() -> None:
    files = study_files()
    assert len(files) == 9
    for path in files:
        assert (PAGES / f"{path.stem}.md").is_file(), path.stem
    index = (PAGES / "README.md").read_text()
    for path in files:
        assert f"sim/studies/{path.name}" in index


@pytest.mark.parametrize("path", study_files(), ids=lambda p: p.stem)
def test_study_sweep_is_valid(path: Path) -> None:
    """Parses, names shipped scenarios and known parameters, and every value
    of every parameter applies to every scenario of the study."""
    spec = load_sweep(path)
    sweep._check_against_runner(spec)
    assert spec.name == path.stem
    assert "wall" in spec.description
    for name in spec.scenarios:
        base = scenarios.load(name)
        for param, values in spec.params:
            for value in values:
                scenarios.apply_params(base, {param: value})


# -- parameters ---------------------------------------------------------------------------


def test_edge_parameter_sets_one_edge_and_refuses_a_missing_one() -> None:
    base = scenarios.load("dr-third-cluster")
    s = scenarios.apply_params(base, {"edge_A_B_latency_ms": 300})
    latency = {(e.source, e.target): e.latency_ms for e in s.edges}
    assert latency == {("A", "B"): 300, ("A", "C"): 2}
    # A link_* parameter sets every edge; one edge's parameter wins for that edge.
    both = scenarios.apply_params(base, {"link_latency_ms": 40, "edge_A_B_latency_ms": 300})
    assert {(e.source, e.target): e.latency_ms for e in both.edges} == {
        ("A", "B"): 300, ("A", "C"): None
    }
    assert both.network.latency_ms == 40
    with pytest.raises(scenarios.ScenarioError, match="no \\[\\[edges\\]\\] entry B->C"):
        scenarios.apply_params(base, {"edge_B_C_latency_ms": 5})
    with pytest.raises(scenarios.ScenarioError, match="must be within"):
        scenarios.apply_params(base, {"edge_A_B_loss": 2})


def test_item_parameters_refuse_a_scenario_without_such_items() -> None:
    chain = scenarios.load("failover-writable")  # no [[edges]], no relink
    with pytest.raises(scenarios.ScenarioError, match="no \\[\\[edges\\]\\] entries"):
        scenarios.apply_params(chain, {"offset_lag_max": 10})
    with pytest.raises(scenarios.ScenarioError, match="no 'relink' actions"):
        scenarios.apply_params(chain, {"relink_at_ms": 5000})
    no_consumer = scenarios.load("unclean-election")
    with pytest.raises(scenarios.ScenarioError, match="no consumer workloads"):
        scenarios.apply_params(no_consumer, {"consumer_lag_records": 5})
    with pytest.raises(scenarios.ScenarioError, match="must be >= 1"):
        scenarios.apply_params(
            scenarios.load("mirror-vs-link-failover"), {"emit_checkpoints_interval_ms": 0}
        )


# -- C after a DR failover (dr-third-cluster) --------------------------------------------------


def test_relink_cuts_on_c_exactly_what_b_never_had() -> None:
    """A -> B (50 ms) and A -> C (2 ms): C is ahead of B when A is lost. The
    relink's recovery cuts from C exactly the records C held above where B's
    copy of A ended at the failover; C's consumer read those records, so they
    are reads no surviving cluster can repeat; its group's committed offsets
    move back by as much."""
    spec = scenarios.apply_params(scenarios.load("dr-third-cluster"), {"relink_at_ms": 11500})
    sim = Simulation(spec, 1)
    c_ends: dict[int, int] = {}

    def before_relink() -> None:
        for p, log in enumerate(sim.clusters["C"].state.topics["A-t0"].partitions):
            c_ends[p] = log.log_end_offset

    sim.queue.at(11_499, "test: C's log ends", before_relink)
    sim.run()
    assert sim.violations == []
    (_cluster, _link, _at, failover) = sim.failovers[0]
    b_ends = {r.partition: r.log_end_offset for r in failover.partitions if r.topic == "A-t0"}
    expected = sum(max(0, c_ends[p] - b_ends[p]) for p in c_ends)
    m = sim.metrics.values
    assert expected > 0
    assert m["records_truncated_by_recovery"] == expected
    assert m["recovery_offsets_moved_records"] == expected
    assert m["recovery_groups_moved"] == 1
    sim_final = sim.final_logs()
    read_on_c = {
        value
        for op in sim.history.polls()
        if op.type == "ok" and op.cluster == "C" and isinstance(op.value, Poll)
        for _p, _o, value in op.value.records
    }
    c_final = {v for (cid, _t, _p), log in sim_final.items() if cid == "C" for v in log.values()}
    assert len(read_on_c - c_final) == m["consumer_reads_truncated"] == expected
    # C's consumer had nothing new from A's loss (10 s) until the relink.
    assert m["consumer_longest_gap_ms"] >= 11_500 - 10_000


def test_relink_when_c_is_behind_b_cuts_nothing() -> None:
    s = run_summary(
        "dr-third-cluster", 1, {"edge_A_B_latency_ms": 2, "edge_A_C_latency_ms": 300}
    )
    assert s["violations"] == []
    m = s["metrics"]
    assert m["recoveries"] == 1
    assert m.get("records_truncated_by_recovery", 0) == 0
    assert m["consumer_reads_truncated"] == 0


# -- consumer lag and MM2 settings (mirror-vs-link-failover) ----------------------------


def test_consumer_lag_records_keeps_the_consumer_behind() -> None:
    """With consumer_lag_records = 30 no poll on A reads within 30 records of
    the end A reached; without it, the consumer reads up to the end."""

    def highest_read_below_end(lag: int) -> int:
        spec = scenarios.apply_params(
            scenarios.load("mirror-vs-link-failover"), {"consumer_lag_records": lag}
        )
        sim = Simulation(spec, 1)
        sim.run()
        gaps = []
        for p, log in enumerate(sim.clusters["A"].state.topics["A-t0"].partitions):
            read = [
                o
                for op in sim.history.polls()
                if op.type == "ok" and op.cluster == "A" and isinstance(op.value, Poll)
                for q, o, _v in op.value.records
                if q == p
            ]
            gaps.append(log.high_watermark - 1 - max(read))
        return min(gaps)

    assert highest_read_below_end(0) < 30
    assert highest_read_below_end(30) >= 30


def test_offset_lag_max_and_checkpoint_interval_reach_the_mirror() -> None:
    def mirror(**params: int) -> dict[str, float]:
        s = run_summary("mirror-vs-link-failover", 1, {"link_type": "mirror", **params})
        assert s["violations"] == []
        metrics: dict[str, float] = s["metrics"]
        return metrics

    dense, sparse = mirror(offset_lag_max=5), mirror(offset_lag_max=1000)
    assert dense["mirror_offset_syncs_written"] > sparse["mirror_offset_syncs_written"]
    often = mirror(emit_checkpoints_interval_ms=500)
    rarely = mirror(emit_checkpoints_interval_ms=8000)
    assert often["mirror_checkpoints_emitted"] > rarely["mirror_checkpoints_emitted"]


def test_relink_action_is_validated() -> None:
    base = scenarios.load("dr-third-cluster")
    relink = next(a for a in base.actions if a.kind == "relink")
    assert (relink.cluster, relink.link, relink.source) == ("C", "A-C", "B")
    bad = dataclasses.replace(base, actions=(dataclasses.replace(relink, prefixes=()),))
    with pytest.raises(scenarios.ScenarioError, match="relink needs prefixes"):
        scenarios._check_names(bad)


# -- SYNC vs ASYNC (sync-failover) --------------------------------------------------------


@pytest.mark.parametrize(("mode", "seed"), [("ASYNC", 1), ("ASYNC", 3), ("SYNC", 2)])
def test_rpo_is_what_the_promoted_log_never_got(mode: str, seed: int) -> None:
    """rpo_records counts exactly the values A acknowledged that B's final log
    of the topic lacks (a record B copied but had not yet seen covered by A's
    high watermark survives the failover); SYNC loses none, and pays for it
    in produce latency."""
    spec = scenarios.apply_params(
        scenarios.load("sync-failover"), {"mode": mode, "link_latency_ms": 20}
    )
    sim = Simulation(spec, seed)
    sim.run()
    assert sim.violations == []
    acked = {
        op.value.value
        for op in sim.history.sends()
        if op.type == "ok" and op.cluster == "A" and isinstance(op.value, Send) and op.value.value
    }
    held = {
        v for (cid, topic, _p), log in sim.final_logs().items()
        if cid == "B" and topic == "A-t0" for v in log.values()
    }
    lost = len(acked - held)
    assert sim.metrics.values["rpo_records"] == lost
    assert (lost == 0) if mode == "SYNC" else (lost > 0)
    # What replication cost A's producer: a SYNC acknowledgement waits at
    # least the round trip (2 x 20 ms); an ASYNC one does not.
    p50 = sim.metrics.values["produce_latency_p50_replicated_ms"]
    assert (p50 >= 40) if mode == "SYNC" else (p50 < 20)


# -- the catch-up storm and the link flap -------------------------------------------------


def test_fractional_device_charges_bytes_not_a_millisecond_per_io() -> None:
    whole, exact = IoDevice(1_000_000), IoDevice(1_000_000, fractional=True)
    for _ in range(1_000):  # a thousand partitions' 16 KiB batches at once
        done_whole = whole.reserve(16_384, 0, "produce")
        done_exact = exact.reserve(16_384, 0, "produce")
    assert done_whole == 1_000  # at least 1 ms each
    assert done_exact == 17  # 16.4 MB at 1 GB/s, rounded up once
    assert exact.bytes_by_class == whole.bytes_by_class == {"produce": 16_384_000}


def test_link_flap_smallest_cell_catches_up_and_disk_fractional_ms_reaches_the_device() -> None:
    """link-flap on 500 partitions (five topics of 100): after the 60 s flap the link catches up
    as soon as it fetches again: at the latest when the fetch the split
    swallowed reaches its deadline (its 5 s long poll plus the call timeout,
    `link_rounds.fetch_deadline_ms`) and the follower's back-off ends, plus a
    round. A bulk round (500 batches of 16 KiB, 8 MB) costs the device 8 ms
    with disk_fractional_ms and 500 ms without (1 ms each), as its producer's
    p99 shows."""
    wait_ms = scenarios.load("link-flap").run.fetch_max_wait_ms
    bound_ms = rounds.fetch_deadline_ms(wait_ms) + BACKOFF_MAX_MS + 2_000

    def flap(fractional: bool) -> dict[str, float]:
        s = run_summary("link-flap", 1, {"partitions": 100, "disk_fractional_ms": fractional})
        assert s["violations"] == []
        metrics: dict[str, float] = s["metrics"]
        assert metrics["catchups"] == 1
        assert 0 < metrics["catchup_ms"] <= bound_ms
        return metrics

    assert flap(True)["bulk_produce_latency_p99_ms"] <= 20
    assert flap(False)["bulk_produce_latency_p99_ms"] >= 400


def test_study_figures_draw_from_a_sweep(tmp_path: Path) -> None:
    """scripts/study_figures.py reads a sweep's output as the report does and
    writes the page's PNG (a two-run serial sweep of the SYNC vs ASYNC grid)."""
    import importlib.util

    spec = sweep.SweepSpec(
        "sync-vs-async", "a two-run slice of the study", ("sync-failover",),
        (("link_latency_ms", (5,)), ("mode", ("ASYNC", "SYNC"))), (1,),
    )
    out = tmp_path / "sweep"
    result = sweep.run_sweep(spec, None, out, serial=True, progress=False)
    assert result.exit_code == 0
    path = Path(__file__).resolve().parent.parent / "scripts" / "study_figures.py"
    module_spec = importlib.util.spec_from_file_location("study_figures", path)
    assert module_spec is not None and module_spec.loader is not None
    figures = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(figures)
    assert figures.main(["sync-vs-async", str(out), "-o", str(tmp_path)]) == 0
    png = (tmp_path / "sync-vs-async.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


# -- retention outrunning the mirror (retention-gap) --------------------------------------


def test_retention_gap_stop_loses_what_retention_deleted_while_it_waited() -> None:
    """retention-gap, B down 6 s against A's 3 s retention: under continue B
    skips each gap when it is back (10 s) and follows at once; under stop
    both partitions wait at their gaps until the operator's answer at 16 s,
    and the gaps then recorded start where continue's do but end further on:
    what A's retention deleted meanwhile is lost too. Every skipped range is
    recorded and counted in gap_records; no run breaks an invariant."""
    ranges: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}
    metrics: dict[str, dict[str, float]] = {}
    for policy in ("continue", "stop"):
        spec = scenarios.apply_params(
            scenarios.load("retention-gap"), {"gap_policy": policy, "outage_ms": 6000}
        )
        sim = Simulation(spec, 1)
        sim.run()
        assert sim.violations == []
        state = sim.clusters["B"].state
        gaps = rep.gaps_of(state, state.links.get("A-B").link_id)
        spans: dict[tuple[str, int], tuple[int, int]] = {}
        for g in gaps:
            low, high = spans.get((g.topic, g.partition), (g.from_offset, g.to_offset))
            spans[(g.topic, g.partition)] = (min(low, g.from_offset), max(high, g.to_offset))
        ranges[policy] = spans
        metrics[policy] = dict(sim.metrics.values)
        assert metrics[policy]["gap_records"] == sum(g.records for g in gaps) > 0
    assert set(ranges["stop"]) == set(ranges["continue"]) == {("A-t0", 0), ("A-t0", 1)}
    for key, (low, high) in ranges["continue"].items():
        stop_low, stop_high = ranges["stop"][key]
        assert stop_low == low and stop_high > high
    assert metrics["continue"]["link_state_ms_CATCHING_UP"] <= 200
    assert metrics["stop"]["link_state_ms_CATCHING_UP"] >= 16_000 - 10_000 - 100
    # 40 records/s over the two partitions, for the 6 s B waited.
    assert metrics["stop"]["gap_records"] - metrics["continue"]["gap_records"] >= 200


# -- where a failback cuts the old source (failback-reconciliation) ----------------------


def test_failback_reconciliation_deep_election_last_mirrored_offset_keeps_a_different_log() -> (
    None
):
    """failback-unclean with an election 600 records deep: A's log, after its
    clients wrote on, ends below the last mirrored offset, so that rule cuts
    nothing and A keeps every record its clients wrote after the election at
    offsets where B holds A's older ones. The judge's "diverged after
    failback" names exactly those (the figure's count, from the details),
    and A follows nothing at the end. Under history the recovery cuts them,
    the run is clean and A's log is B's."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "scripts" / "study_figures.py"
    module_spec = importlib.util.spec_from_file_location("study_figures", path)
    assert module_spec is not None and module_spec.loader is not None
    figures = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(figures)

    def run(rule: str) -> Simulation:
        spec = scenarios.apply_params(
            scenarios.load("failback-unclean"),
            {"failback_reconciliation": rule, "unclean_records": 600},
        )
        sim = Simulation(spec, 1)
        sim.run()
        return sim

    lmo = run("last-mirrored-offset")
    logs = lmo.final_logs()
    a, b = logs[("A", "A-t0", 0)], logs[("B", "A-t0", 0)]
    differ = sum(1 for o, v in a.items() if o in b and b[o] != v)
    violations = json.dumps([v.to_dict() for v in lmo.violations])
    assert differ == figures.diverged_batches(violations) == 207
    assert {v.invariant for v in lmo.violations} == {
        "diverged after failback", "one writer at rest"
    }
    assert "records_truncated_by_recovery" not in lmo.metrics.values
    history = run("history")
    assert history.violations == []
    assert history.metrics.values["records_truncated_by_recovery"] == 207
    logs = history.final_logs()
    assert logs[("A", "A-t0", 0)] == logs[("B", "A-t0", 0)]
