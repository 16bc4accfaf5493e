"""A fault configuration (linkd/core/faults.py) belongs to the clusters it was
handed to: two simulations in one process, one with a fix undone and one
without, each see their own, whatever order they are made and run in."""

from __future__ import annotations

import pytest

from linkd.core.faults import FIXES, NO_FAULTS, Faults, PlantedBug
from sim import scenario as scenarios
from sim.runner import run_summary
from sim.world import Simulation


def _kinds(sim: Simulation) -> set[str]:
    return {v.invariant for v in sim.violations}


def test_two_simulations_in_one_process_do_not_see_each_others_faults() -> None:
    alone = run_summary("retention-outage", 1, {"undo_fix": 8})
    assert {v["invariant"] for v in alone["violations"]} == {"10 silent loss"}

    spec = scenarios.load("retention-outage")
    undone = Simulation(scenarios.apply_params(spec, {"undo_fix": 8}), 1)
    # Made after the first: a switch set module-wide would now be off for both.
    clean = Simulation(spec, 1)
    assert {n.state.faults for n in undone.clusters.values()} == {Faults.undoing(8)}
    assert {n.state.faults for n in clean.clusters.values()} == {NO_FAULTS}

    clean.run()
    undone.run()
    assert clean.violations == []
    assert _kinds(undone) == {"10 silent loss"}
    assert len(undone.violations) == len(alone["violations"])
    assert undone.queue.digest == alone["trace_digest"]


def test_a_fault_configuration_names_only_known_fixes_and_bugs() -> None:
    assert Faults.undoing(0) == NO_FAULTS and not NO_FAULTS.undid(FIXES[0])
    assert Faults.undoing(8).undid(8) and not Faults.undoing(8).undid(9)
    with pytest.raises(ValueError, match="undo_fix: no fix 11"):
        Faults.undoing(11)
    planted = Faults.planting("ack-before-replicate")
    assert planted.plants(PlantedBug.ACK_BEFORE_REPLICATE) and planted.undone == frozenset()
    with pytest.raises(ValueError):
        Faults.planting("nope")
