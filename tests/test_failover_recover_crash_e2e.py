"""`failover` and a confirmed `recover` survive a kill -9 mid-procedure,
between real daemons, through ccr-admin.

Both journal a durable plan (linkd/core/plans.py) and each step's outcome;
the test-only hook LINKD_TEST_EXIT_AT (linkd/test_hooks.py) makes a daemon
exit, as kill -9 would, at a named checkpoint. A few representative points
(every checkpoint is crashed in the simulator,
tests/test_sim_mid_failover_recover.py):

- B fails over with A alive and dies right after it journalled its plan:
  after the restart describe-link shows the failover in progress, and one
  re-run makes the namespace writable on B.
- A dies, B fails over with force and dies right after making orders-
  writable (its answer never sent): the re-run answers what the first run
  did (the partitions it made writable, the lag it gave up), step by step.
  Then A, back with a tail of its own, recovers to follow B and dies right
  after the cut: the re-run reports the cut the first run made (nobody saw
  it), attaches, and every namespace is writable on B alone.
"""

from __future__ import annotations

from typing import Any

from harness import run_cli
from test_links_e2e import LINK_FLAGS, cli_json, high_watermarks, wait_for
from test_recovery_e2e import attach, namespaces, produce_batches, values

from chaos.crash_matrix import writable
from linkd.test_hooks import EXIT_AT_ENV

RECORDS = 8


def _crashed(d: Any, *args: str) -> None:
    """Runs the command on `d`, whose hook makes it exit mid-procedure, and
    restarts it without the hook."""
    done = run_cli(*args, "--json", bootstrap=d.bootstrap)
    assert done.returncode != 0, done.stdout
    assert d.proc is not None and d.proc.wait(timeout=60) == 137, "the hook did not fire"
    d.kill9()  # closes its files; the process is gone already
    d.env = {}
    d.start()
    d.wait_ready()


def _linked(a: Any, b: Any) -> None:
    """A leads orders- and app- to B on link ab; RECORDS copied to B."""
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "local")
    attach(a, "ab", "group", "app-", "local")
    run_cli("create-topic", "orders-e", "--partitions", "1", bootstrap=a.bootstrap)
    produce_batches(a.bootstrap, "orders-e", RECORDS, "a")
    wait_for("B has them", lambda: high_watermarks(b.bootstrap, "orders-e") == [RECORDS])
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )


def test_failover__b_dies_after_journalling_its_plan__one_rerun_makes_it_writable(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS, start=False)
    b.env = {EXIT_AT_ENV: "failover:verify-link-state"}
    b.start()
    b.wait_ready()
    _linked(a, b)

    _crashed(b, "failover", "--link", "ab")
    plan = cli_json(b.bootstrap, "describe-link", "ab")["procedure"]
    assert plan is not None and plan["procedure"] == "failover", plan
    assert plan["next_step"] == "make-writable"
    assert {n["local_prefix"] for n in plan["namespaces"]} == {"orders-", "app-"}
    text = run_cli("describe-link", "ab", bootstrap=b.bootstrap).stdout
    assert "procedure in progress: failover of topic 'orders-', group 'app-' from A" in text
    assert not writable(b.bootstrap, "topic", "orders-")  # nothing changed yet

    # The re-run checks again (the link must be FOLLOWING with lag 0).
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    rerun = cli_json(b.bootstrap, "failover", "--link", "ab")
    assert rerun["resumed_from"] == "make-writable", rerun
    assert [s["name"] for s in rerun["steps"]] == [
        "verify-link-state", "make-writable", "tell-remote",
    ]
    assert rerun["steps"][0]["result"].startswith("(before the re-run) link is FOLLOWING")
    assert rerun["abandoned"] == []
    assert cli_json(b.bootstrap, "describe-link", "ab")["procedure"] is None
    assert writable(b.bootstrap, "topic", "orders-")
    assert writable(b.bootstrap, "group", "app-")
    produce_batches(b.bootstrap, "orders-e", 1, "b")
    assert high_watermarks(b.bootstrap, "orders-e") == [RECORDS + 1]


def test_forced_failover_then_recover__each_cut_short_after_its_change__reruns_report_it(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS, start=False)
    b.env = {EXIT_AT_ENV: "failover:make-writable"}
    b.start()
    b.wait_ready()
    _linked(a, b)

    # A dies; B fails over with force and dies before it answers.
    a.kill9()
    _crashed(b, "failover", "--link", "ab", "--force")
    plan = cli_json(b.bootstrap, "describe-link", "ab")["procedure"]
    assert plan is not None and plan["next_step"] == "tell-remote", plan
    assert writable(b.bootstrap, "topic", "orders-")  # the change is durable
    rerun = cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    assert rerun["resumed_from"] == "tell-remote", rerun
    # The first run's answer: the partition it made writable, with what it
    # knew of the source then.
    assert [(p["topic"], p["log_end_offset"]) for p in rerun["partitions"]] == [
        ("orders-e", RECORDS)
    ]
    assert {n["prefix"] for n in rerun["namespaces"]} == {"orders-", "app-"}, rerun
    assert rerun["steps"][1]["result"].startswith(
        "(before the re-run) made 2 namespaces writable here"
    )
    assert cli_json(b.bootstrap, "describe-link", "ab")["procedure"] is None
    produce_batches(b.bootstrap, "orders-e", 2, "b-new")

    # A comes back with a tail of its own, then recovers to follow B; it
    # dies right after the cut.
    a.env = {EXIT_AT_ENV: "recover:reserve-and-cut"}
    a.start()
    a.wait_ready()
    produce_batches(a.bootstrap, "orders-e", 3, "a-tail")
    wait_for(
        "A to hear of the failover",
        lambda: not any(
            m["local_prefix"] == "orders-"
            for m in cli_json(a.bootstrap, "describe-link", "ab")["mappings"]
        ),
    )
    _crashed(a, "recover", "--link", "ab", "--namespace", "orders-", "--confirm")
    assert high_watermarks(a.bootstrap, "orders-e") == [RECORDS]  # cut, durably
    plan = cli_json(a.bootstrap, "describe-link", "ab")["procedure"]
    assert plan is not None and plan["procedure"] == "recover", plan
    assert plan["next_step"] == "follow-remote"
    # A report-only run shows the cut made and the plan left to finish (exit
    # 1: not completed).
    shown = run_cli("recover", "--link", "ab", "--namespace", "orders-", bootstrap=a.bootstrap)
    assert shown.returncode == 1, shown.stderr
    assert "not completed: a recovery begun 20" in shown.stdout, shown.stdout
    assert "run recover --confirm again here to finish it" in shown.stdout
    rerun = cli_json(
        a.bootstrap, "recover", "--link", "ab", "--namespace", "orders-", "--confirm"
    )
    assert rerun["resumed_from"] == "follow-remote", rerun
    assert rerun["confirmed"] is True and rerun["totals"]["local_records_lost"] == 3
    assert rerun["steps"][1]["result"].startswith("(before the re-run) reserved 1 namespaces")
    assert rerun["notes"] == [], rerun["notes"]
    assert cli_json(a.bootstrap, "describe-link", "ab")["procedure"] is None
    wait_for(
        "A follows B's history",
        lambda: values(a.bootstrap, "orders-e") == values(b.bootstrap, "orders-e"),
    )
    assert not writable(a.bootstrap, "topic", "orders-")
    assert writable(b.bootstrap, "topic", "orders-")
