"""A ring of follow relations of three links, tried with ccr-admin on three real
daemons (spec section 10, invariant 13): A leads `orders-` to B, B leads it on
to C; C's operator then tries to lead it back to A, and A's to follow it from
C. Both attaches, and A's `recover` from C, are refused with FOLLOW_CYCLE
naming the ring, nothing changes, and A's own clients still write the
namespace (a Kafka producer).

Then the middle of the chain dies, and C's operator points C's copy at A
with `recover`: C's provenance names B, which A never knew, so only the
batches show that both hold A's writes; nothing is cut, and C follows A."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer as KafkaProducer
from harness import run_cli
from test_links_e2e import cli_json, high_watermarks, wait_for
from test_operator_stories_e2e import attach, attach_cmd, detach, make_cluster, namespaces


def _refused(d: Any, *args: str) -> str:
    result = run_cli(*args, bootstrap=d.bootstrap)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    line = result.stderr.strip()
    assert line.startswith("error: FOLLOW_CYCLE: "), line
    return line


def test_a_ring_of_three_links__is_refused__and_the_chain_end_recovers_from_the_origin(
    daemon_factory: Any,
) -> None:
    a, b, c = (make_cluster(daemon_factory, cid) for cid in "ABC")
    namespaces("topic", "orders-", on=(a,))
    # Each link created by the side that can dial the other (ca by A: A's
    # proposals reach C at once).
    for link, x, y in (("ab", a, b), ("bc", b, c), ("ca", a, c)):
        cli_json(x.bootstrap, "create-link", link, "--remote", y.bootstrap)
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    attach(b, "bc", "topic", "orders-", "orders-", "local")  # B's copy, led on to C

    line = _refused(c, *attach_cmd("ca", "topic", "orders-", "orders-", "local"))
    assert "'A' -> 'B' -> 'C' -> 'A'" in line, line
    line = _refused(a, *attach_cmd("ca", "topic", "orders-", "orders-", "remote"))
    assert "on cluster 'C'" in line and "'A' -> 'B' -> 'C' -> 'A'" in line, line
    # Nor may A recover its namespace from C: refused before any cut or
    # reservation (C's description names where its copy comes from).
    line = _refused(a, "recover", "--link", "ca", "--namespace", "orders-", "--confirm")
    assert "'A' -> 'B' -> 'C' -> 'A'" in line and "nothing was changed" in line, line

    for d in (a, c):
        assert cli_json(d.bootstrap, "describe-link", "ca")["mappings"] == []
    described = cli_json(
        a.bootstrap, "describe-namespace", "--type", "topic", "--prefix", "orders-"
    )
    assert described["reserved"] is False, described

    cli_json(a.bootstrap, "create-topic", "orders-eu")
    producer = KafkaProducer({"bootstrap.servers": a.kafka, "acks": "all"})
    delivered: list[Any] = []
    for i in range(5):
        producer.produce(
            "orders-eu", value=f"o{i}".encode(), on_delivery=lambda e, m: delivered.append(e)
        )
    assert producer.flush(30) == 0
    assert delivered == [None] * 5, delivered
    wait_for("C holds A's records", lambda: high_watermarks(c.bootstrap, "orders-eu") == [5])

    # B, the middle of the chain, is lost. C detaches its copy from B (pending:
    # B cannot confirm) and recovers it from A over a link of its own.
    b.kill9()
    detach(c, "bc", "topic", "orders-", pending=True)
    cli_json(c.bootstrap, "create-link", "ca2", "--remote", a.bootstrap)
    report = cli_json(c.bootstrap, "recover", "--link", "ca2", "--namespace", "orders-")
    assert [(r["truncate_to"], r["reason"]) for r in report["partitions"]] == [(5, "log-end")]
    done = cli_json(c.bootstrap, "recover", "--link", "ca2", "--namespace", "orders-", "--confirm")
    assert done["totals"]["local_records_lost"] == 0, done
    for i in range(5, 8):
        producer.produce("orders-eu", value=f"o{i}".encode())
    assert producer.flush(30) == 0
    wait_for("C follows A", lambda: high_watermarks(c.bootstrap, "orders-eu") == [8])
