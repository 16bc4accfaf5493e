"""`reverse` survives a kill -9 at any of its steps, between real daemons.

The cluster that runs a reversal journals its plan and each step's outcome
(linkd/core/plans.py). The daemon's test-only hook LINKD_TEST_EXIT_AT
(linkd/test_hooks.py) makes it exit, as kill -9 would, at a named
checkpoint: after each step, and after each namespace of the detach and
attach steps (the crash that used to orphan `orders-`). After a restart,
describe-link shows the plan in progress and one re-run of `reverse` on
the same cluster finishes it: every namespace is then writable on exactly
one cluster (B), and B holds every record A acknowledged.

Real daemons crash at a few representative checkpoints: a journalled step,
the cut inside a step between its two namespaces, the last step, and (for
the remote) a roll-back, a cut after a mapping changed, and the daemon-only
hook inside the promotion it serves. Every checkpoint, with one namespace
and with two, and a crash of either side, is a case of the simulator's
tests/test_sim_mid_procedure.py, which runs the same core plan and resume
(linkd/core/plans.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import run_cli
from test_links_e2e import LINK_FLAGS, cli_json, high_watermarks, produce, wait_for
from test_recovery_e2e import attach, namespaces

from chaos.crash_matrix import judge
from linkd.test_hooks import EXIT_AT_ENV, KILL_AT_ENV

# Checkpoints of reverse with two namespaces (orders-, app-), in order: a
# journalled step, the crash that used to orphan `orders-` (inside the detach,
# between the namespaces), and the last step. The others are simulator cases
# (tests/test_sim_mid_procedure.py, reverse_points(2)).
POINTS = [
    "reverse:wait-for-remote",
    "reverse:detach-mappings#1",
    "reverse:promote-remote-namespaces",
]
RECORDS = 30
NAMESPACES = (("topic", "orders-"), ("group", "app-"))


def _link_with_records(a: Any, b: Any) -> list[int]:
    """A leads orders- and app- to B on link ab; RECORDS acknowledged on A
    and copied. Returns A's high watermarks."""
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "local")
    attach(a, "ab", "group", "app-", "local")
    run_cli("create-topic", "orders-x", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-x", RECORDS, "a")
    acked = high_watermarks(a.bootstrap, "orders-x")
    assert acked is not None and sum(acked) == RECORDS
    wait_for(
        "FOLLOWING", lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    # Copied: B holds the topic and every record (the leader's FOLLOWING can
    # come before B's discovery has created a topic made a moment ago).
    wait_for("B holds A's records", lambda: high_watermarks(b.bootstrap, "orders-x") == acked)
    return acked


def _one_writer(writer: Any, other: Any, acked: list[int], where: str) -> None:
    """Every namespace is writable on `writer` alone; `writer` holds every
    record A acknowledged, and its writes replicate to `other` (the judge of
    `ccr-chaos crash-matrix`, which crashes every checkpoint)."""
    clusters = {writer.cluster_id: writer.bootstrap, other.cluster_id: other.bootstrap}
    # Nothing is given up by a reversal: every record must be on the writer.
    values: dict[str, Any] = {f"a-{i}": None for i in range(RECORDS)}
    failures, writers = judge(clusters, NAMESPACES, "orders-x", values)
    assert failures == [], f"{where}: {failures}"
    assert set(map(tuple, writers.values())) == {(writer.cluster_id,)}, f"{where}: {writers}"
    refused = run_cli("produce", "orders-x", bootstrap=other.bootstrap, input="x\n")
    assert refused.returncode == 1 and "NOT_WRITABLE" in refused.stderr, refused.stderr
    # The judge wrote one record on the writer: nothing else was added.
    held = high_watermarks(writer.bootstrap, "orders-x")
    assert held is not None and sum(held) == sum(acked) + 1, held


@pytest.mark.parametrize("point", POINTS)
def test_reverse__kill_9_of_the_leader_at_each_step__one_rerun_leaves_one_writer(
    daemon_factory: Any, point: str
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS, start=False)
    a.env = {EXIT_AT_ENV: point}
    a.start()
    a.wait_ready()
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    acked = _link_with_records(a, b)

    crashed = run_cli("reverse", "--link", "ab", "--json", bootstrap=a.bootstrap)
    assert crashed.returncode != 0, crashed.stdout
    assert a.proc is not None and a.proc.wait(timeout=60) == 137, "the hook did not fire"
    a.kill9()  # closes its files; the process is gone already
    a.env = {}
    a.start()
    a.wait_ready()

    plan = cli_json(a.bootstrap, "describe-link", "ab")["procedure"]
    if point == POINTS[-1]:
        # The last step's outcome ended the plan: nothing is left to finish.
        assert plan is None
    else:
        assert plan is not None and plan["procedure"] == "reverse"
        assert {n["local_prefix"] for n in plan["namespaces"]} == {"orders-", "app-"}
        done = [s["name"] for s in plan["steps"] if s["ok"]]
        step = point.split(":", 1)[1]
        if "#" in step:
            assert step.split("#")[0] not in done  # cut short inside the step
        else:
            assert step in done  # journalled before the crash
        rerun = cli_json(a.bootstrap, "reverse", "--link", "ab", "--timeout-ms", "30000")
        assert rerun["ok"] is True, rerun
        assert rerun["resumed_from"] == plan["next_step"]
        assert {(m["type"], m["leader"]) for m in rerun["mappings"]} == {
            ("topic", "remote"),
            ("group", "remote"),
        }
        assert cli_json(a.bootstrap, "describe-link", "ab")["procedure"] is None
    _one_writer(b, a, acked, f"after A crashed at {point}")


# Where B dies: killed by A's hook at A's checkpoints (before any mapping
# changed, so A rolls back; after, so a re-run finishes), or B exits itself
# while serving the promotion (its namespaces writable, no answer sent: a
# daemon-only hook). The simulator crashes B at every checkpoint of A's.
REMOTE_POINTS = [
    "reverse:reserve-leader-namespaces",
    "reverse:attach-swapped-mappings#1",
    "serve:promote",
]


@pytest.mark.parametrize("point", REMOTE_POINTS)
def test_reverse__kill_9_of_the_remote_at_each_step__rolled_back_or_one_rerun_finishes(
    daemon_factory: Any, point: str
) -> None:
    b = daemon_factory("B", extra_args=LINK_FLAGS, start=False)
    if point.startswith("serve:"):
        b.env = {EXIT_AT_ENV: point}
    b.start()
    b.wait_ready()
    a = daemon_factory("A", extra_args=LINK_FLAGS, start=False)
    if not point.startswith("serve:"):
        a.env = {KILL_AT_ENV: f"{point}={b.pid}"}
    a.start()
    a.wait_ready()
    acked = _link_with_records(a, b)

    stopped = run_cli(
        "reverse", "--link", "ab", "--json", "--timeout-ms", "5000", bootstrap=a.bootstrap
    )
    assert b.proc is not None and b.proc.wait(timeout=60) in (137, -9), "B did not die"
    assert stopped.returncode == 1, stopped.stdout
    report = json.loads(stopped.stdout)
    assert report["ok"] is False
    b.kill9()
    b.env = {}
    b.start()
    b.wait_ready()
    if report["rolled_back"]:
        # Stopped before any mapping changed: A leads and writes again.
        assert cli_json(a.bootstrap, "describe-link", "ab")["procedure"] is None
        wait_for(
            "FOLLOWING",
            lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING",
        )
        _one_writer(a, b, acked, f"after B crashed at {point} and A rolled back")
        return
    # Stopped after a mapping changed: the plan stays, one re-run finishes it.
    assert report["pending"] is True
    assert cli_json(a.bootstrap, "describe-link", "ab")["procedure"] is not None
    rerun = cli_json(a.bootstrap, "reverse", "--link", "ab", "--timeout-ms", "30000")
    assert rerun["ok"] is True, rerun
    assert rerun["resumed_from"] != ""
    _one_writer(b, a, acked, f"after B crashed at {point}")
