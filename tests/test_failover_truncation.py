"""failover.truncation: KIP-1279's rule at a failover beside this project's.

`abort` (the default) keeps every record a follower partition holds and
aborts the replicated transactions left open; `last-stable-offset` cuts the
partition where its first open transaction began. The core makes the cut
(tests/test_core_failover_truth.py); here the simulator judges its answer
(a cut the answer does not name is `10 unreported cut`), a shipped scenario
runs under each rule, and the operator sets the rule and reads the cut
through ccr-admin on real daemons."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from typing import Any

from harness import run_cli
from test_core_failover_truth import _open_transaction
from test_core_link_rounds import NOW, discover, fetch_round, produce, two_clusters
from test_fetch_bound_e2e import open_transaction, partition0, plain
from test_links_e2e import cli_json, wait_for
from test_operator_stories_e2e import attach, create_topic, make_cluster, namespaces

from linkd.core import link_admin as admin
from sim import follower_metrics, status_checks
from sim import scenario as scenarios
from sim.world import Simulation

TOPIC = "orders-f"
BOUND_S = 60.0


def _cut_by_failover() -> tuple[Any, admin.Failover, dict[tuple[str, int], int]]:
    a, b, disk_a, disk_b = two_clusters()
    discover(a, b, disk_b)
    produce(a, disk_a, 2)
    _open_transaction(a, disk_a)
    produce(a, disk_a, 1)
    fetch_round(a, b, disk_a, disk_b, NOW + 10)
    b.links.set_fields("ab", {"failover_truncation": "last-stable-offset"}, NOW + 10)
    ends_before = status_checks.log_ends(b, ["orders-"])
    result = admin.failover(b, "ab", False, NOW + 11)
    disk_b.carry_out(b, result.effects)
    return b, result, ends_before


def test_the_judge_holds_a_failover_to_the_cuts_it_names() -> None:
    b, result, before = _cut_by_failover()
    assert status_checks.check_failover_cuts("B", "ab", result, b, before, NOW) == []
    unnamed = replace(result, truncated=[])
    [found] = status_checks.check_failover_cuts("B", "ab", unnamed, b, before, NOW)
    assert found.invariant == "10 unreported cut"
    assert "cut orders-1-0 from 6 to 2, but its answer does not name the cut" in found.detail
    wrong = replace(result, truncated=[replace(result.truncated[0], removed=3)])
    [found] = status_checks.check_failover_cuts("B", "ab", wrong, b, before, NOW)
    assert "says it cut to 2, removing 3" in found.detail


def test_a_shipped_failover_under_each_rule() -> None:
    """failover-after-kill (transactions open as A dies): `abort` writes
    markers and cuts nothing; `last-stable-offset` cuts and aborts nothing;
    both clean."""
    for rule in ("abort", "last-stable-offset"):
        spec = scenarios.apply_params(
            scenarios.load("failover-after-kill"), {"failover_truncation": rule}
        )
        sim = Simulation(spec, 1, False)
        sim.run()
        assert sim.violations == [], (rule, sim.violations)
        results = [r for _c, _l, _at, r in sim.failovers]
        cuts = [c for r in results for c in r.truncated]
        aborted = [d for r in results for d in r.dangling]
        if rule == "abort":
            assert cuts == [] and aborted, rule
        else:
            assert cuts and aborted == [], rule
            assert all(c.removed >= 1 and c.transactions >= 1 for c in cuts), cuts


# Long transactions on A, a read_uncommitted reader of B's copy, A lost, and
# B's forced failover while transactions are open.
READER_OF_THE_COPY = """
name = "phantom-reads"
[run]
duration_ms = 9000
liveness_ms = 20000
[topology]
kind = "chain"
clusters = ["A", "B"]
failover_truncation = "RULE"
[namespace]
topics = 1
partitions = 1
groups = false
[[workloads]]
kind = "producer"
name = "app"
cluster = "A"
topic = "A-t0"
rate_per_s = 200
transactional_fraction = 0.5
txn_open_ms = 1500
start_ms = 1000
stop_ms = 5000
[[workloads]]
kind = "consumer"
name = "ru"
cluster = "B"
topic = "A-t0"
group = "local-g1"
start_ms = 1000
[[faults]]
at_ms = 4000
kind = "crash"
node = "A"
duration_ms = 30000
[[actions]]
at_ms = 4300
kind = "failover"
cluster = "B"
link = "A-B"
force = true
"""


def test_a_reader_of_the_copy_read_what_the_cut_removed() -> None:
    """The cost the rule trades for no marker of its own: under
    `last-stable-offset` every record the cut removed had been read by the
    read_uncommitted reader of B (phantom reads, counted by
    consumer_reads_cut_by_failover); under `abort` nothing is cut. Clean
    either way: the answer names what it did."""
    for rule in ("abort", "last-stable-offset"):
        spec = scenarios.parse(tomllib.loads(READER_OF_THE_COPY.replace("RULE", rule)))
        sim = Simulation(spec, 1, False)
        sim.run()
        assert sim.violations == [], (rule, sim.violations)
        cut = follower_metrics.failover_cut(sim)
        read = follower_metrics.reads_cut_by_failover(sim)
        acknowledged = follower_metrics.acknowledged_cut(sim)
        if rule == "abort":
            assert (cut, read, acknowledged) == (0, 0, 0)
        else:
            # Plain records A acknowledged after the open transaction began
            # went with it: a loss the cut names, beyond rpo_records.
            assert cut > 100 and read == cut and 0 < acknowledged < cut, (cut, read, acknowledged)


def test_an_operator_sets_the_rule_and_reads_the_cut(daemon_factory: Any) -> None:
    """Through ccr-admin: create-link --config, describe-link, alter-link,
    and a failover that names its cut (the open transaction and the record
    after it gone, the records before it kept)."""
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", on=(a, b))
    bad = run_cli("create-link", "ab", "--remote", a.bootstrap,
                  "--config", "failover.truncation=lmo", bootstrap=b.bootstrap)  # fmt: skip
    assert bad.returncode != 0 and "'abort' or 'last-stable-offset'" in bad.stderr, bad.stderr
    cli_json(b.bootstrap, "create-link", "ab", "--remote", a.bootstrap,
             "--config", "failover.truncation=last-stable-offset")  # fmt: skip
    shown = run_cli("describe-link", "ab", bootstrap=b.bootstrap).stdout
    assert "failover.truncation last-stable-offset" in shown, shown
    attach(b, "ab", "topic", "orders-", "orders-", "remote")
    create_topic(a, TOPIC, 1)
    plain(a, 3, "before")
    txn = open_transaction(a, "tx-cut", 2)
    plain(a, 1, "after")
    wait_for("B copies the open transaction and the record after it",
             lambda: partition0(b).get("log_end_offset") == 6, BOUND_S)  # fmt: skip
    assert cli_json(a.bootstrap, "describe-link", "ab")["failover_truncation"] == (
        "last-stable-offset"
    )  # shared: A took it from the handshake

    done = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
    assert done.returncode == 0, done.stderr
    assert "cut orders-f-0 at its last stable offset 3: 3 records removed" in done.stdout, (
        done.stdout
    )
    assert partition0(b)["log_end_offset"] == 3
    # The daemon's log names the cut too, for whoever reads the log, not the answer.
    assert "cut 1 partitions at their last stable offset" in b.stderr_text()
    assert "orders-f-0 at 3 (3 records)" in b.stderr_text()
    provenance = run_cli("provenance", TOPIC, bootstrap=b.bootstrap)
    assert "failover at the last stable offset" in provenance.stdout, provenance.stdout
    txn.abort_transaction(30)

    back = cli_json(b.bootstrap, "alter-link", "ab", "--failover-truncation", "abort")
    assert back["failover_truncation"] == "abort"
