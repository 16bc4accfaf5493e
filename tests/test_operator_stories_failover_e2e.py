"""Operator stories of failover and recovery (KIP-986 "Operators"), acted out
on real daemons with ccr-admin and confluent-kafka, asserted against the
contract (spec sections 3, 4, 8 and 10): a lost zone and its return, a
failover while the link is cut, recovery after a failover. The stories of
links, reversals and ACLs are in tests/test_operator_stories_e2e.py, whose
helpers these share; the two modules run on different workers.
"""

from __future__ import annotations

import json
import time
from typing import Any

from harness import run_cli
from test_links_e2e import (
    cli_json,
    committed,
    consume_n,
    high_watermarks,
    produce,
    wait_for,
)
from test_operator_stories_e2e import (
    BOUND_S,
    Findings,
    attach,
    attach_cmd,
    create_topic,
    describe,
    detach,
    eventually,
    following,
    link_ab,
    link_view,
    make_cluster,
    mapping_set,
    namespaces,
    pair,
    produce_to,
    same_log,
    swapped,
    topic_parts,
)
from test_recovery_e2e import produce_batches

from admin import AdminClient, Producer


def test_dr__a_lost__b_promoted__c_follows_b__a_returns__link_ac_converges_and_is_usable(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "o-", "p-")
    c = make_cluster(daemon_factory, "C")
    namespaces("topic", "o-", "p-", on=(c,))
    for link, other in (("ab", b), ("ac", c)):
        cli_json(a.bootstrap, "create-link", link, "--remote", other.bootstrap)
        attach(a, link, "topic", "o-", "o-", "local")
    create_topic(a, "o-t", 1)
    produce_batches(a.bootstrap, "o-t", 10, "a")
    wait_for("B and C have o-t", lambda: same_log(a, b, "o-t") and same_log(a, c, "o-t"))

    a.terminate()  # zone A is lost
    cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    detach(c, "ac", "topic", "o-", pending=True)  # A cannot confirm it
    cli_json(c.bootstrap, "create-link", "cb", "--remote", b.bootstrap)
    attach(c, "cb", "topic", "o-", "o-", "remote")
    produce_batches(b.bootstrap, "o-t", 3, "b")
    wait_for("C follows B", lambda: same_log(b, c, "o-t"))

    a.start()
    a.wait_ready()
    findings = Findings()

    def converged() -> bool:
        on_a, on_c = describe(a, "ac"), describe(c, "ac")
        refused_a = mapping_set(on_a.get("refused_mappings", []))
        return mapping_set(on_a["mappings"]) == swapped(mapping_set(on_c["mappings"])) and (
            refused_a == swapped(mapping_set(on_c.get("refused_mappings", [])))
        )

    findings.check(
        eventually(converged),
        lambda: f"link ac never converged: {link_view(a, 'ac')}; {link_view(c, 'ac')}",
    )
    for d in (a, c):
        info = describe(d, "ac")
        attached = [m for m in info["mappings"] if m["local_prefix"] == "o-"]
        notes = [m.get("note") for m in info.get("refused_mappings", [])]
        findings.check(
            not attached, f"{d.cluster_id} shows o- attached to ac while C follows B: {attached}"
        )
        findings.check(all(notes), f"{d.cluster_id}: a refused mapping without a note: {info}")
    # An admin call on ac works again, and reaches C.
    call = run_cli(*attach_cmd("ac", "topic", "p-", "p-", "local"), bootstrap=a.bootstrap)
    if findings.check(
        call.returncode == 0, f"attach of p- on ac (from A) refused: {call.stderr.strip()}"
    ):
        p_on_c = ("topic", "p-", "p-", "remote")
        findings.check(
            eventually(lambda: p_on_c in mapping_set(describe(c, "ac")["mappings"])),
            lambda: f"A's attach of p- never reached C: {link_view(c, 'ac')}",
        )
    produce_batches(b.bootstrap, "o-t", 2, "b-more")
    findings.check(
        eventually(lambda: same_log(b, c, "o-t")),
        lambda: f"C stopped following B after A returned: {link_view(c, 'cb')}",
    )
    findings.done()


def test_failover_while_disconnected__lag_unknown__refused_unless_forced__abandoned_listed(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-d", 2)
    produce(a.bootstrap, "orders-d", 20, "early")
    wait_for("B caught up", lambda: same_log(a, b, "orders-d"))
    wait_for("FOLLOWING on B", following(b))

    # A backlog of about 26 MB on partition 0 that B only starts copying: A is
    # stopped (then killed) as soon as B knows of records it does not hold.
    b.pause()
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for _ in range(400):
        producer.produce("orders-d", value="x" * 65536, partition=0)
    assert producer.flush(60) == 0
    producer.close()
    acked = high_watermarks(a.bootstrap, "orders-d")
    assert acked is not None
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    known: dict[int, int] = {}  # partition -> a source HW B knew of, above its log end
    b.resume()
    deadline = time.monotonic() + BOUND_S
    while not known and time.monotonic() < deadline:
        rows = [p for p in admin.describe_link("ab").partitions if p["role"] == "follower"]
        known = {p["partition"]: p["source_high_watermark"] for p in rows
                 if p["source_high_watermark"] > p["log_end_offset"]}  # fmt: skip
        time.sleep(0.01)
    a.pause()
    a.kill9()
    admin.close()
    assert known, "B caught up before A could be stopped: no known lag to abandon"

    wait_for("DISCONNECTED on B", lambda: describe(b)["state"] == "DISCONNECTED")
    findings = Findings()
    for p in describe(b)["partitions"]:
        findings.check(
            p["role"] != "follower" or (p.get("lag_known") is False and p["lag_records"] == -1),
            f"DISCONNECTED, yet partition {p['partition']} shows lag_known="
            f"{p.get('lag_known')!r} lag_records={p['lag_records']} (expected false, -1)",
        )
    plain = run_cli("failover", "--link", "ab", bootstrap=b.bootstrap)
    findings.check(
        plain.returncode != 0
        and "LINK_NOT_FOLLOWING" in plain.stderr
        and "DISCONNECTED" in plain.stderr,
        f"failover without --force while DISCONNECTED: exit {plain.returncode}, "
        f"{(plain.stderr or plain.stdout).strip()}",
    )
    if plain.returncode == 0:
        findings.done()  # already failed over: nothing left to force
    forced = cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    leo = {p["partition"]: p["log_end_offset"] for p in topic_parts(b, "orders-d")}
    abandoned = {p["partition"]: p for p in forced["abandoned"] if p["topic"] == "orders-d"}
    for part, hw in known.items():
        row = abandoned.get(part) or {}
        findings.check(
            hw <= row.get("source_high_watermark", -1) <= acked[part],
            f"partition {part}: B knew of source HW {hw} (A acknowledged {acked[part]}) above "
            f"its log end {leo[part]}; abandoned says {row or 'nothing'}",
        )
        findings.check(
            int(row.get("source_hw_known_at_ms") or 0) > 0,
            f"partition {part}: abandoned row without source_hw_known_at_ms: {row}",
        )
    lacks_known = sum(hw - leo[p] for p, hw in known.items())
    total = sum(p["source_high_watermark"] - leo[k] for k, p in abandoned.items())
    findings.check(
        total >= lacks_known, f"abandoned lag {total} < the {lacks_known} records B knew it lacked"
    )
    findings.done()


def test_recover_after_a_routine_failover__empty_partition_shares_offset_0__logs_equal(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-t", 3)
    produce_to(a, "orders-t", (0, 1), 7, "a")  # partition 2 stays empty
    wait_for("B caught up", lambda: same_log(a, b, "orders-t"))
    wait_for("FOLLOWING on B", following(b))
    assert high_watermarks(b.bootstrap, "orders-t") == [7, 7, 0]
    cli_json(b.bootstrap, "failover", "--link", "ab")  # lag 0: no force
    produce_to(b, "orders-t", (0, 1), 1, "b")

    # A follows B now: a report first, then the confirmation.
    args = ("recover", "--link", "ab", "--namespace", "orders-", "--json")
    report_run = run_cli(*args, bootstrap=a.bootstrap)
    assert "delete" not in report_run.stderr.lower(), report_run.stderr
    assert report_run.returncode == 0, f"recover report refused: {report_run.stderr.strip()}"
    rows = {p["partition"]: p for p in json.loads(report_run.stdout)["partitions"]}
    assert [rows[p]["common_offset"] for p in range(3)] == [7, 7, 0], rows
    done = run_cli(*args, "--confirm", bootstrap=a.bootstrap)
    assert "delete" not in done.stderr.lower(), done.stderr
    assert done.returncode == 0, f"recover --confirm refused: {done.stderr.strip()}"
    assert eventually(lambda: same_log(b, a, "orders-t")), (
        f"A's log never equalled B's: A {high_watermarks(a.bootstrap, 'orders-t')}, "
        f"B {high_watermarks(b.bootstrap, 'orders-t')}"
    )


def test_recover_refused_without_shared_history__never_suggests_deleting_a_topic_with_data(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    for d in (a, b):  # two unrelated topics of one name, both holding records
        create_topic(d, "orders-x", 1)
        produce(d.bootstrap, "orders-x", 3, d.cluster_id)
    result = run_cli("recover", "--link", "ab", "--namespace", "orders-", bootstrap=a.bootstrap)
    assert result.returncode == 1 and "NO_SHARED_HISTORY" in result.stderr, result.stderr
    assert "delete" not in result.stderr.lower(), (
        f"the refusal suggests deleting orders-x, which holds 3 records: {result.stderr.strip()}"
    )


def test_recover__recovered_followers_group_offset_not_above_the_new_leaders(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    namespaces("group", "app-", on=(a, b))
    link_ab(a, b, "orders-")
    attach(a, "ab", "group", "app-", "app-", "local")
    create_topic(a, "orders-g", 1)
    produce_batches(a.bootstrap, "orders-g", 20, "a")
    consume_n(a.bootstrap, "app-1", "orders-g", 8)
    wait_for("B has the records", lambda: same_log(a, b, "orders-g"))
    wait_for("B has app-1 at 8", lambda: committed(b.bootstrap, "app-1") == {("orders-g", 0): 8})
    b.terminate()  # zone B dark: A's group goes on to 14
    consume_n(a.bootstrap, "app-1", "orders-g", 6)
    assert committed(a.bootstrap, "app-1") == {("orders-g", 0): 14}
    a.terminate()  # zone A lost; B promoted, its consumers resume at 8 and reach 10
    b.start()
    b.wait_ready()
    cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    consume_n(b.bootstrap, "app-1", "orders-g", 2)
    leader = committed(b.bootstrap, "app-1")
    assert leader == {("orders-g", 0): 10}
    a.start()
    a.wait_ready()
    args = ("recover", "--link", "ab", "--namespace", "orders-", "--group-namespace", "app-")
    report = cli_json(a.bootstrap, *args)
    cli_json(a.bootstrap, *args, "--confirm")
    wait_for("A follows B", lambda: same_log(b, a, "orders-g"))
    assert eventually(
        lambda: all(o <= leader[k] for k, o in committed(a.bootstrap, "app-1").items()), 10
    ), (
        f"after recover, A's app-1 commits {committed(a.bootstrap, 'app-1')} while the new "
        f"leader B's are {committed(b.bootstrap, 'app-1')}; report groups: {report['groups']}"
    )
