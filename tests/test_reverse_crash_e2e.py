"""`reverse` survives a kill -9 at any of its steps, between real daemons.

The cluster that runs a reversal journals its plan and each step's outcome
(linkd/core/plans.py). The daemon's test-only hook LINKD_TEST_EXIT_AT
(linkd/procedure_shell.py) makes it exit, as kill -9 would, at a named
checkpoint: after each step, and after each namespace of the detach and
attach steps (the crash that used to orphan `orders-`). After a restart,
describe-link shows the plan in progress and one re-run of `reverse` on
the same cluster finishes it: every namespace is then writable on exactly
one cluster (B), and B holds every record A acknowledged.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness import run_cli
from test_links_e2e import LINK_FLAGS, cli_json, high_watermarks, produce, wait_for
from test_recovery_e2e import attach, namespaces

from linkd.procedure_shell import TEST_EXIT_AT_ENV

# Every checkpoint of reverse with two namespaces (orders-, app-), in order.
POINTS = [
    "reverse:verify-link-state",
    "reverse:reserve-leader-namespaces",
    "reverse:abort-open-transactions",
    "reverse:wait-for-remote",
    "reverse:detach-mappings#1",
    "reverse:detach-mappings#2",
    "reverse:detach-mappings",
    "reverse:attach-swapped-mappings#1",
    "reverse:attach-swapped-mappings#2",
    "reverse:attach-swapped-mappings",
    "reverse:promote-remote-namespaces",
]
RECORDS = 30


def _namespace(bootstrap: str, kind: str, prefix: str) -> dict[str, Any]:
    ns: dict[str, Any] = cli_json(
        bootstrap, "describe-namespace", "--type", kind, "--prefix", prefix
    )
    return ns


def _writable(bootstrap: str, kind: str, prefix: str) -> bool:
    """Whether the namespace takes client writes there: not reserved and
    following no link."""
    ns = _namespace(bootstrap, kind, prefix)
    following = any(a.endswith(":follower") for a in ns["attachments"])
    return not ns["reserved"] and not following


def _produce_one(bootstrap: str, topic: str) -> bool:
    done = run_cli("produce", topic, bootstrap=bootstrap, input="probe\n")
    return done.returncode == 0


@pytest.mark.parametrize("point", POINTS)
def test_reverse__kill_9_of_the_leader_at_each_step__one_rerun_leaves_one_writer(
    daemon_factory: Any, point: str
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS, start=False)
    a.env = {TEST_EXIT_AT_ENV: point}
    a.start()
    a.wait_ready()
    b = daemon_factory("B", extra_args=LINK_FLAGS)
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

    # Every namespace is writable on exactly one cluster: B.
    for kind, prefix in (("topic", "orders-"), ("group", "app-")):
        assert (_writable(a.bootstrap, kind, prefix), _writable(b.bootstrap, kind, prefix)) == (
            False,
            True,
        ), f"{kind} {prefix!r} after a crash at {point}"
    refused = run_cli("produce", "orders-x", bootstrap=a.bootstrap, input="x\n")
    assert refused.returncode == 1 and "NOT_WRITABLE" in refused.stderr, refused.stderr
    # Nothing A acknowledged is lost: B holds it all, then takes writes that
    # replicate back to A.
    on_b = high_watermarks(b.bootstrap, "orders-x")
    assert on_b is not None and on_b == acked
    assert _produce_one(b.bootstrap, "orders-x")
    wait_for(
        "A follows B",
        lambda: (
            high_watermarks(a.bootstrap, "orders-x") == high_watermarks(b.bootstrap, "orders-x")
        ),
    )
    assert sum(high_watermarks(a.bootstrap, "orders-x") or []) == RECORDS + 1
