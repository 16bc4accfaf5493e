"""A detach aborts a replicated transaction; re-attaching would reopen it.
On real daemons, through ccr-admin and confluent-kafka clients.

B follows A's namespace orders- over link ab (created on B). A transaction
opens on A and B copies it while open. The operator detaches orders- on B:
no marker would ever come, so B aborts the transaction itself (the detach's
answer and B's log name it), and a read_committed reader of B passes its
records. A then commits it. Attached again, B would have to cut its own
abort marker and let A's commit decide the transaction: the records turn
visible behind the reader. So the attach
is refused, naming the transaction; `recover` reports it as reopened, and
with --confirm cuts the marker and follows A, after which a new
read_committed reader of B reads the committed records.
"""

from __future__ import annotations

import json
from typing import Any

from harness import run_cli
from test_fetch_bound_e2e import open_transaction, partition0, plain
from test_links_e2e import cli_json, wait_for
from test_operator_stories_e2e import (
    attach,
    attach_cmd,
    create_topic,
    detach,
    make_cluster,
    namespaces,
    read_committed_to_hw,
)

TOPIC = "orders-f"
BOUND_S = 60.0


def test_reattach_over_a_detach_abort__refused_naming_it__recover_reports_and_cuts_it(
    daemon_factory: Any,
) -> None:
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", on=(a, b))
    cli_json(b.bootstrap, "create-link", "ab", "--remote", a.bootstrap)
    attach(b, "ab", "topic", "orders-", "orders-", "remote")
    create_topic(a, TOPIC, 1)
    plain(a, 3, "before")
    txn = open_transaction(a, "tx-flip", 3)
    opened = partition0(a)
    assert opened["last_stable_offset"] == 3 < opened["high_watermark"] == 6, opened
    wait_for("B copies the open transaction",
             lambda: partition0(b).get("log_end_offset") == 6, BOUND_S)  # fmt: skip

    # The detach aborts the copy on B (its own marker at 6); readers move on.
    # Its answer names the transaction it aborted.
    detached = detach(b, "ab", "topic", "orders-")
    aborted = detached["aborted_dangling"]
    assert [(d["topic"], d["partition"], d["first_offset"]) for d in aborted] == [
        (TOPIC, 0, 3)
    ], detached
    wait_for("B aborted the transaction it copied",
             lambda: partition0(b)["last_stable_offset"] == 7, BOUND_S)  # fmt: skip
    # B's log names what its detach aborted, for the operator.
    assert "aborted 1 transactions left open" in b.stderr_text()
    assert "orders-f-0 producer" in b.stderr_text()
    values, short = read_committed_to_hw(b, TOPIC, 20)
    assert short == "" and [v.decode() for v in values] == [f"before-{i}" for i in range(3)]
    txn.commit_transaction(30)
    assert partition0(a)["log_end_offset"] == 7  # A's commit marker at 6

    # Attaching again would reopen it: refused, nothing changed.
    refused = run_cli(*attach_cmd("ab", "topic", "orders-", "orders-", "remote"),
                      bootstrap=b.bootstrap)  # fmt: skip
    assert refused.returncode != 0, refused.stdout
    assert "reopen 1 transaction(s) 'B' decided itself" in refused.stderr, refused.stderr
    assert "aborted by this cluster at 6" in refused.stderr, refused.stderr
    assert partition0(b)["log_end_offset"] == 7

    # recover reports the transaction the cut reopens, then makes the cut.
    report = run_cli("recover", "--link", "ab", "--namespace", "orders-:orders-",
                     bootstrap=b.bootstrap)  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "reopens orders-f-0: producer" in report.stdout, report.stdout
    assert "aborted by this cluster at 6" in report.stdout, report.stdout
    as_json = run_cli("recover", "--link", "ab", "--namespace", "orders-:orders-", "--json",
                      bootstrap=b.bootstrap)  # fmt: skip
    rows = json.loads(as_json.stdout)["partitions"]
    reopened = rows[0]["reopened_transactions"]
    assert [(t["first_offset"], t["marker_offset"], t["committed"], t["own_marker"])
            for t in reopened] == [(3, 6, False, True)], rows  # fmt: skip
    assert reopened[0]["replicated"] is True
    confirmed = run_cli("recover", "--link", "ab", "--namespace", "orders-:orders-",
                        "--confirm", bootstrap=b.bootstrap)  # fmt: skip
    assert confirmed.returncode == 0, confirmed.stderr
    wait_for("B follows A again, A's commit included",
             lambda: partition0(b)["last_stable_offset"] == 7, BOUND_S)  # fmt: skip
    values, short = read_committed_to_hw(b, TOPIC, 20)
    assert short == "", short
    assert [v.decode() for v in values] == (
        [f"before-{i}" for i in range(3)] + [f"tx-flip-{i}" for i in range(3)]
    )  # fmt: skip
