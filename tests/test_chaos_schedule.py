"""Chaos schedules: drawn from a seed, deterministically (no daemons here)."""

from __future__ import annotations

import json

import pytest

from chaos.cli import _parser, main, replay_command
from chaos.schedule import (
    CLASSICS,
    NEMESES,
    PROCEDURE_CRASH_SLOTS,
    TXN_FAILOVER_OPEN_MS,
    classic_schedule,
    make_schedule,
    parse_link_configs,
    procedure_crashes,
    random_schedule,
)


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 1234])
def test_same_seed__same_schedule(seed: int) -> None:
    assert random_schedule(seed).dumps() == random_schedule(seed).dumps()
    assert make_schedule(seed, mode="sync", clusters=3).dumps() == (
        make_schedule(seed, mode="sync", clusters=3).dumps()
    )


def test_seeds__pick_topology_mode_and_nemeses() -> None:
    schedules = [random_schedule(seed) for seed in range(40)]
    assert len({s.dumps() for s in schedules}) == 40
    assert {len(s.clusters) for s in schedules} >= {2, 3, 4}
    assert {s.mode for s in schedules} == {"ASYNC", "SYNC"}
    assert set().union(*(s.nemeses for s in schedules)) == set(NEMESES)


def test_random_schedule__steps_inside_the_phase__every_fault_is_undone() -> None:
    for seed in range(40):
        s = random_schedule(seed, phase_s=15)
        assert all(0 < step.at_s <= s.phase_s for step in s.steps), s.dumps()
        assert [x.at_s for x in s.steps] == sorted(x.at_s for x in s.steps)
        links = {name for name, _, _ in s.links}
        faulted = {x.args[0] for x in s.steps if x.op in ("cut", "flaky", "slow")}
        healed = {x.args[0] for x in s.steps if x.op == "heal"}
        assert faulted <= healed <= links
        for start, end in (("pause", "resume"), ("kill", "restart")):
            assert [x.args for x in s.steps if x.op == start] == [
                x.args for x in s.steps if x.op == end
            ]


def test_forced_mode_and_size() -> None:
    s = make_schedule(3, mode="async", clusters=4)
    assert s.mode == "ASYNC" and s.clusters == ("A", "B", "C", "D")
    assert [name for name, _, _ in s.links] == ["ab", "ac", "ad"]
    assert all(src == "A" for _, src, _ in s.links)


@pytest.mark.parametrize("name", CLASSICS)
def test_classics(name: str) -> None:
    s = classic_schedule(name, seed=1)
    assert s.name == name and s.steps
    assert s.dumps() == classic_schedule(name, seed=1).dumps()


def test_planted_bug__uses_the_schedule_that_makes_it_observable() -> None:
    s = make_schedule(9, plant_bug="ack-before-replicate")
    assert s.name == "sync-ack-failover" and s.mode == "SYNC"
    assert s.plant_bug == "ack-before-replicate"
    assert [x.op for x in s.steps] == ["cut", "lose", "failover"]
    with pytest.raises(ValueError):
        make_schedule(9, plant_bug="nope")


def test_replay_command__names_every_choice() -> None:
    args = _parser().parse_args(["run", "--seed", "5", "--mode", "sync", "--phase-s", "12"])
    assert replay_command(args) == "ccr-chaos run --seed 5 --mode sync --phase-s 12"
    args = _parser().parse_args(["run", "--seed", "5", "--schedule", "flapping"])
    assert replay_command(args) == "ccr-chaos run --seed 5 --schedule flapping"


def test_cli_schedule__prints_the_seeds_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", "--seed", "11"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == random_schedule(11).to_json()


def test_cli__the_issues_runs_form_parses() -> None:
    assert _parser().parse_args(["--runs", "100"]).runs == 100
    args = _parser().parse_args(["runs", "--count", "100"])
    assert args.command == "runs" and args.count == 100


def test_cli_schedule__procedure_moves_cut_short_by_a_crash__seeded_with_the_operators(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Seed 7 runs the operator nemesis; its second procedure move (reverse,
    # failover or recover) is cut short by a kill -9 of the link's other end.
    assert main(["schedule", "--seed", "7"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["operators"] is True
    assert printed["procedure_crashes"] == [{"nth": 2, "side": "remote", "delay_ms": 564}]
    # Without the operator nemesis there are no procedure moves to cut short.
    assert main(["schedule", "--seed", "7", "--no-operators"]) == 0
    assert json.loads(capsys.readouterr().out)["procedure_crashes"] == []
    # Over many seeds both sides are drawn, each crash within its bounds,
    # and the same seed always draws the same crashes.
    drawn = [c for seed in range(1, 101) for c in procedure_crashes(seed)]
    assert {c.side for c in drawn} == {"runner", "remote"}
    assert all(1 <= c.nth <= PROCEDURE_CRASH_SLOTS for c in drawn)
    assert all(0 <= c.delay_ms <= 800 for c in drawn)
    assert procedure_crashes(7) == procedure_crashes(7)
    assert make_schedule(7, "kip986-dr", operators=True).procedure_crashes == procedure_crashes(7)


def test_link_configs__checked__in_the_schedule__the_replay_and_every_link(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["schedule", "--schedule", "txn-failover",
            "--link-config", "failover.truncation=last-stable-offset",
            "--link-config", "fetch.bound=high-watermark"]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["link_configs"] == {
        "failover.truncation": "last-stable-offset",
        "fetch.bound": "high-watermark",
    }
    assert printed["txn_open_ms"] == TXN_FAILOVER_OPEN_MS and printed["transactional"]
    assert [s["op"] for s in printed["steps"]] == ["lose", "failover"]
    args = _parser().parse_args(["run", "--seed", "2", *argv[1:]])
    assert replay_command(args) == (
        "ccr-chaos run --seed 2 --schedule txn-failover "
        "--link-config failover.truncation=last-stable-offset "
        "--link-config fetch.bound=high-watermark"
    )
    # The swarm's form takes them too.
    swarm = _parser().parse_args(["--runs", "3", "--link-config", "gap.policy=stop"])
    assert swarm.link_config == [("gap.policy", "stop")]
    # Refused as create-link refuses them, before anything runs.
    for bad, said in (
        ("failover.truncation=sometimes", "failover.truncation is 'abort' or"),
        ("retention=1", "unknown link config 'retention'"),
        ("fetch.bound", "expected NAME=VALUE"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["run", "--link-config", bad])
        assert exit_.value.code == 2
        assert said in capsys.readouterr().err
    with pytest.raises(ValueError, match="given twice"):
        parse_link_configs([("gap.policy", "stop"), ("gap.policy", "continue")])
