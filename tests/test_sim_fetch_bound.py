"""fetch.bound in the simulator: a link bound at the last stable offset
(KIP-1279's mirror fetcher) copies nothing of a transaction still open on its
source, and what came after it waits too; the default (the high watermark)
copies it all. The daemon's own core decides (`replication.plan_replica_fetch`)."""

from __future__ import annotations

import tomllib

import pytest

from sim import follower_metrics as fm
from sim import judge
from sim import scenario as sc
from sim.world import Simulation

BASE = """
name = "fetch-bound"
[run]
duration_ms = 8000
liveness_ms = 30000
[topology]
kind = "chain"
clusters = ["A", "B"]
{bound}
[namespace]
topics = 1
partitions = 1
groups = false

[[workloads]]
kind = "script"
name = "before"
sends = [{before}]

[[workloads]]
kind = "producer"
name = "long"
cluster = "A"
topic = "A-t0"
rate_per_s = 10.0
transactional_fraction = 1.0
start_ms = 2000
stop_ms = 2050
txn_open_ms = {open_ms}

[[workloads]]
kind = "script"
name = "after"
sends = [{after}]
"""


def _sends(name: str, times: range) -> str:
    return ", ".join(
        f'{{ at_ms = {t}, cluster = "A", topic = "A-t0", partition = 0, value = "{name}-{t}" }}'
        for t in times
    )


Probe = tuple[int, int, int, int]  # A's LSO, A's HW, B's log end, B's LSO


def run(bound: str, open_ms: int = 4000, probe_at: int = 5500) -> tuple[Simulation, Probe]:
    """A's transaction opens at about 2000 ms and commits `open_ms` later;
    plain records come before it and after it. Probed at `probe_at`."""
    text = BASE.format(
        bound=f'fetch_bound = "{bound}"' if bound else "",
        before=_sends("b", range(500, 1900, 100)),
        after=_sends("a", range(2500, 5000, 100)),
        open_ms=open_ms,
    )
    sim = Simulation(sc.parse(tomllib.loads(text)), 1)
    seen: list[Probe] = []

    def probe() -> None:
        a = sim.clusters["A"].state.partition("A-t0", 0)
        b = sim.clusters["B"].state.partition("A-t0", 0)
        seen.append((a.last_stable_offset, a.high_watermark, b.log_end_offset,
                     b.last_stable_offset))  # fmt: skip

    sim.queue.at(probe_at, "probe", probe)
    sim.run()
    return sim, seen[0]


def converged(sim: Simulation) -> None:
    assert sim.violations == [], sim.violations
    a = sim.clusters["A"].state.partition("A-t0", 0)
    b = sim.clusters["B"].state.partition("A-t0", 0)
    assert b.log_end_offset == a.log_end_offset == a.last_stable_offset


def test_last_stable_offset__an_open_transaction_holds_back_itself_and_what_follows() -> None:
    sim, (a_lso, a_hw, b_end, _b_lso) = run("last-stable-offset")
    assert sim.clusters["B"].state.links.get("A-B").fetch_bound.value == "last-stable-offset"
    assert a_lso == 14 and a_hw > a_lso + 20, (a_lso, a_hw)  # 14 before, 25 after
    assert b_end == a_lso, "B copied past A's last stable offset while the transaction was open"
    converged(sim)  # once committed, all of it


def test_high_watermark__the_default__copies_the_open_transaction_and_what_follows() -> None:
    sim, (a_lso, a_hw, b_end, b_lso) = run("")
    assert sim.clusters["B"].state.links.get("A-B").fetch_bound.value == "high-watermark"
    assert a_lso == 14 and b_end == a_hw, (a_lso, a_hw, b_end)
    assert b_lso == a_lso  # B holds the open transaction's record: its own LSO stops there
    converged(sim)


def test_a_scenario_naming_an_unknown_bound_is_refused() -> None:
    text = BASE.format(bound='fetch_bound = "lso"', before="", after="", open_ms=0)
    with pytest.raises(sc.ScenarioError, match="fetch_bound = 'lso' is not one of"):
        sc.parse(tomllib.loads(text))


def study(bound: str, seed: int = 1) -> Simulation:
    """The fetch-bound study's scenario (sim/studies/fetch-bound.toml), 2 s transactions."""
    scenario = sc.apply_params(
        sc.load("fetch-bound-failover"), {"fetch_bound": bound, "txn_open_ms": 2000}
    )
    sim = Simulation(scenario, seed)
    sim.run()
    return sim


def test_the_study__the_bound_trades_aborted_transactions_for_lag_and_loss() -> None:
    """The study's headline on one seed: under high-watermark B holds the open
    transaction (the failover aborts it and names it); under
    last-stable-offset B never held it, and lags and loses more."""
    hw, lso = study("high-watermark"), study("last-stable-offset")
    for sim in (hw, lso):
        assert sim.violations == [], sim.violations
    m_hw, m_lso = hw.metrics.flat(), lso.metrics.flat()
    assert m_hw["failover_aborted_transactions"] > 0 == m_lso["failover_aborted_transactions"]
    assert m_lso["follower_lag_records_mean"] > 10 * m_hw["follower_lag_records_mean"]
    assert m_lso["rpo_records"] > m_hw["rpo_records"]
    # B's read_uncommitted reader read records the failover then aborted.
    assert m_hw["consumer_reads_aborted_uncommitted"] > 0 == m_lso[
        "consumer_reads_aborted_uncommitted"
    ]
    # What the failover aborted is hidden from B's read_committed readers.
    final = judge.final_logs(hw)
    visible = fm.visible_values(hw, "B", final, fm.aborted_offsets(hw, final))
    aborted = [(d.topic, d.partition, d.first_offset) for _c, _l, _at, r in hw.failovers
               for d in r.dangling]  # fmt: skip
    assert aborted
    for topic, partition, first in aborted:
        assert final[("B", topic, partition)][first] not in visible
    assert final[("B", "A-t0", 0)][0] in visible


def test_partial_transactions__some_of_its_values_visible_not_all() -> None:
    committed = {"t1": {"a", "b"}, "t2": {"c", "d"}, "t3": {"e"}}
    assert fm.partial_transactions(committed, {"a", "c", "d"}) == {"t1"}
    assert fm.partial_transactions(committed, set()) == set()
    assert fm.partial_transactions(committed, {"a", "b", "e"}) == set()
