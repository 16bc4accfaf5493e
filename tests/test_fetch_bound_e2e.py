"""fetch.bound on real daemons, through ccr-admin and confluent-kafka clients.

B follows A's namespace orders- over link ab, created with
`--config fetch.bound=last-stable-offset` (KIP-1279's mirror fetcher). A
transaction stays open on A while plain records follow it: B copies up to
A's last stable offset and no further, and its describe-link row says how
far behind that leaves it. Once the transaction commits, B copies it and
what followed, and a read_committed consumer on B reads them all. Then
alter-link on B sets fetch.bound back to high-watermark (it converges to A),
and a transaction left open on A is copied while open (this project's
default); aborted, B holds its abort marker and read_committed hides it.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer as KafkaProducer
from harness import run_cli
from test_links_e2e import cli_json, wait_for
from test_operator_stories_e2e import (
    attach,
    create_topic,
    describe,
    make_cluster,
    namespaces,
    read_committed_to_hw,
    topic_parts,
)

TOPIC = "orders-f"
BOUND_S = 60.0


def partition0(d: Any) -> dict[str, Any]:
    """The topic's partition 0 ({} while B has not created its copy yet)."""
    found = run_cli("describe-topic", TOPIC, "--json", bootstrap=d.bootstrap)
    if found.returncode != 0:
        assert "UNKNOWN_TOPIC" in found.stderr, found.stderr
        return {}
    return dict(topic_parts(d, TOPIC)[0])


def row(d: Any) -> dict[str, Any]:
    rows = [p for p in describe(d)["partitions"] if p["topic"] == TOPIC]
    return dict(rows[0]) if rows else {}


def plain(a: Any, n: int, tag: str) -> None:
    lines = "".join(f"{tag}-{i}\n" for i in range(n))
    done = run_cli("produce", TOPIC, "--partition", "0", bootstrap=a.bootstrap, input=lines)
    assert done.returncode == 0, done.stderr


def open_transaction(a: Any, tid: str, n: int) -> Any:
    txn = KafkaProducer({"bootstrap.servers": a.kafka, "transactional.id": tid,
                         "transaction.timeout.ms": 600000, "log_level": 0})  # fmt: skip
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(n):
        txn.produce(TOPIC, value=f"{tid}-{i}", partition=0)
    assert txn.flush(30) == 0  # sent, left open
    return txn


def test_fetch_bound__last_stable_offset_holds_an_open_transaction_back__high_watermark_copies_it(
    daemon_factory: Any,
) -> None:
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", on=(a, b))
    created = cli_json(b.bootstrap, "create-link", "ab", "--remote", a.bootstrap,
                       "--config", "fetch.bound=last-stable-offset")  # fmt: skip
    assert created["fetch_bound"] == "last-stable-offset"
    assert describe(a)["fetch_bound"] == "last-stable-offset"  # the handshake carried it
    attach(b, "ab", "topic", "orders-", "orders-", "remote")
    create_topic(a, TOPIC, 1)
    plain(a, 5, "before")
    wait_for("B holds the first records", lambda: partition0(b).get("log_end_offset") == 5, BOUND_S)

    # -- last-stable-offset: the open transaction and what follows stay on A --
    txn = open_transaction(a, "tx-long", 3)
    plain(a, 4, "after")
    a_now = partition0(a)
    assert a_now["last_stable_offset"] == 5 and a_now["high_watermark"] == 12, a_now
    # B has heard of A's high watermark (so it could have copied) and stops at the LSO.
    wait_for("B's row knows A's high watermark",
             lambda: row(b).get("source_high_watermark") == 12, BOUND_S)  # fmt: skip
    assert partition0(b)["log_end_offset"] == 5
    assert row(b)["lag_records"] == 7  # what the bound leaves on A, reported

    txn.commit_transaction(30)
    wait_for("B holds A's log end once committed",
             lambda: partition0(b)["log_end_offset"] == partition0(a)["log_end_offset"],
             BOUND_S)  # fmt: skip
    values, short = read_committed_to_hw(b, TOPIC, 20)
    assert short == "", short
    assert [v.decode() for v in values] == (
        [f"before-{i}" for i in range(5)] + [f"tx-long-{i}" for i in range(3)]
        + [f"after-{i}" for i in range(4)]
    )  # fmt: skip

    # -- back to high-watermark (on B; it converges to A) ---------------------
    altered = cli_json(b.bootstrap, "alter-link", "ab", "--fetch-bound", "high-watermark")
    assert altered["fetch_bound"] == "high-watermark"
    wait_for("A has fetch.bound high-watermark",
             lambda: describe(a)["fetch_bound"] == "high-watermark", BOUND_S)  # fmt: skip
    txn2 = open_transaction(a, "tx-again", 2)
    a_open = partition0(a)
    assert a_open["last_stable_offset"] < a_open["high_watermark"], a_open
    wait_for("B copies the open transaction",
             lambda: partition0(b)["log_end_offset"] == a_open["log_end_offset"], BOUND_S)
    txn2.abort_transaction(30)
    wait_for("B holds the abort marker",
             lambda: partition0(b)["last_stable_offset"] == partition0(a)["log_end_offset"],
             BOUND_S)  # fmt: skip
    values, short = read_committed_to_hw(b, TOPIC, 20)
    assert short == "" and not [v for v in values if v.startswith(b"tx-again")], values

    # A bad value is refused, naming what is allowed; nothing changes.
    refused = run_cli("alter-link", "ab", "--fetch-bound", "lso", bootstrap=b.bootstrap)
    assert refused.returncode != 0 and "high-watermark" in refused.stderr
    bad = run_cli("create-link", "ac", "--remote", a.bootstrap, "--config", "fetch.bounds=x",
                  bootstrap=b.bootstrap)  # fmt: skip
    assert bad.returncode != 0 and "unknown link config 'fetch.bounds'" in bad.stderr, bad.stderr
    assert describe(b)["fetch_bound"] == "high-watermark"
