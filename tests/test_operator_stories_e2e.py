"""Operator stories (KIP-986 "Operators") acted out on real daemons with ccr-admin,
and confluent-kafka where applications take part, asserted against the contract
(spec sections 3, 4, 8 and 10) as operators reported them broken. Waits poll with
bounded deadlines; stories with several observations note each divergence
(`Findings`) and fail once at the end, so that a failure tells the whole story.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import AdminClient as KafkaAdmin
from harness import free_port, run_cli
from test_links_e2e import (
    LINK_FLAGS,
    cli_json,
    high_watermarks,
    produce,
    read_all,
    wait_for,
)

from admin import AdminClient, Producer

BOUND_S = 15.0  # "within a bound": convergence, catch-up, liveness


class Findings:
    """Divergences from the contract seen along a story; fail once at the end."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def check(self, ok: bool, what: str | Callable[[], str]) -> bool:
        """Notes `what` (or what it returns, computed only then) unless ok."""
        if not ok:
            self.items.append(what() if callable(what) else what)
        return ok

    def done(self) -> None:
        assert not self.items, "\n".join(["the story diverged from the contract:", *self.items])


def make_cluster(make: Callable[..., Any], cid: str, flags: list[str] = LINK_FLAGS) -> Any:
    """A daemon that also serves Kafka clients (their address in `.kafka`)."""
    port = free_port()
    d = make(cid, extra_args=[*flags, "--kafka-listen", f"127.0.0.1:{port}"])
    d.kafka = f"127.0.0.1:{port}"
    return d


def pair(make: Callable[..., Any], *prefixes: str) -> tuple[Any, Any]:
    """Clusters A and B, each with the topic namespaces `prefixes`."""
    a, b = make_cluster(make, "A"), make_cluster(make, "B")
    namespaces("topic", *prefixes, on=(a, b))
    return a, b


def namespaces(kind: str, *prefixes: str, on: tuple[Any, ...]) -> None:
    for d in on:
        for prefix in prefixes:
            cli_json(d.bootstrap, "create-namespace", "--type", kind, "--prefix", prefix)


def attach_cmd(link: str, kind: str, local: str, remote: str, leader: str) -> list[str]:
    return ["attach-namespace", "--link", link, "--type", kind, "--local-prefix", local,
            "--remote-prefix", remote, "--leader", leader]  # fmt: skip


def attach(d: Any, link: str, kind: str, local: str, remote: str, leader: str) -> Any:
    return cli_json(d.bootstrap, *attach_cmd(link, kind, local, remote, leader))


def detach(d: Any, link: str, kind: str, local: str, pending: bool = False) -> Any:
    return cli_json(d.bootstrap, "detach-namespace", "--link", link, "--type", kind,
                    "--local-prefix", local, pending=pending)  # fmt: skip


def reserve(d: Any, prefix: str, reserved: bool) -> Any:
    return cli_json(d.bootstrap, "set-reserved", "--type", "topic", "--prefix", prefix,
                    "--reserved", "true" if reserved else "false")  # fmt: skip


def link_ab(a: Any, b: Any, prefix: str) -> None:
    """Link ab, created on A (A dials), with A's topic namespace `prefix` leading."""
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", prefix, prefix, "local")


def describe(d: Any, link: str = "ab") -> dict[str, Any]:
    return dict(cli_json(d.bootstrap, "describe-link", link))


def following(d: Any, link: str = "ab") -> Callable[[], bool]:
    return lambda: describe(d, link)["state"] == "FOLLOWING"


def mapping_set(entries: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {(m["type"], m["local_prefix"], m["remote_prefix"], m["leader"]) for m in entries}


def swapped(ms: set[tuple[str, str, str, str]]) -> set[tuple[str, str, str, str]]:
    return {(t, r, lo, "remote" if lead == "local" else "local") for t, lo, r, lead in ms}


def topic_parts(d: Any, topic: str) -> list[dict[str, Any]]:
    return list(cli_json(d.bootstrap, "describe-topic", topic)["partitions"])


def create_topic(d: Any, topic: str, partitions: int) -> None:
    done = run_cli("create-topic", topic, "--partitions", str(partitions), bootstrap=d.bootstrap)
    assert done.returncode == 0, done.stderr


def produce_to(d: Any, topic: str, partitions: tuple[int, ...], n: int, prefix: str) -> None:
    producer = Producer({"bootstrap.servers": d.bootstrap, "linger.ms": 2})
    for part in partitions:
        for i in range(n):
            producer.produce(topic, value=f"{prefix}-{part}-{i}", partition=part)
    assert producer.flush(30) == 0
    producer.close()


def same_log(src: Any, dst: Any, topic: str) -> bool:
    hw = high_watermarks(src.bootstrap, topic)
    return (
        hw is not None
        and high_watermarks(dst.bootstrap, topic) == hw
        and read_all(src.bootstrap, topic) == read_all(dst.bootstrap, topic)
    )


def eventually(check: Callable[[], bool], timeout_s: float = BOUND_S) -> bool:
    """Polls check() until true; False after the deadline (the caller says what it saw)."""
    try:
        wait_for("", check, timeout_s)
        return True
    except AssertionError:
        return False


def link_view(d: Any, link: str = "ab") -> str:
    """describe-link in short, for failure messages."""
    info = describe(d, link)
    rows = [(p["topic"], p["partition"], p["role"], p["lag_records"], p["log_end_offset"],
             p["source_high_watermark"]) for p in info["partitions"]]  # fmt: skip
    return (
        f"{d.cluster_id}: {info['state']} mappings={sorted(mapping_set(info['mappings']))} "
        f"refused={info.get('refused_mappings')} rows(topic,p,role,lag,leo,src_hw)={rows}"
    )


def status_lie(src: Any, dst: Any, topic: str) -> str:
    """Invariant 9: dst must not say FOLLOWING with nothing lagging while it
    lacks records of `topic` that src holds. Returns what lies, or ""."""
    info = describe(dst)
    lagging = [p for p in info["partitions"] if p["role"] == "follower" and p["lag_records"]]
    src_hw, dst_hw = high_watermarks(src.bootstrap, topic), high_watermarks(dst.bootstrap, topic)
    if info["state"] == "FOLLOWING" and not lagging and src_hw != dst_hw:
        return (
            f"{dst.cluster_id}'s describe-link says FOLLOWING with no lag while its {topic} "
            f"is at {dst_hw} and {src.cluster_id}'s at {src_hw}"
        )
    return ""


def replicates(findings: Findings, src: Any, dst: Any, topic: str) -> None:
    """Notes when `topic` never reaches dst at src's offsets, and when dst's
    describe-link meanwhile claims FOLLOWING with nothing lagging."""
    if not findings.check(
        eventually(lambda: same_log(src, dst, topic)),
        lambda: (
            f"{topic} never reached {dst.cluster_id} at {src.cluster_id}'s offsets; "
            f"{link_view(dst)}"
        ),
    ):
        lie = status_lie(src, dst, topic)
        findings.check(not lie, lie)


def bidirectional(make: Callable[..., Any]) -> tuple[Any, Any]:
    """Link ab created on A: A leads a- to B, B leads b- to A."""
    a, b = pair(make, "a-", "b-")
    link_ab(a, b, "a-")
    attach(a, "ab", "topic", "b-", "b-", "remote")
    create_topic(a, "a-x", 2)
    produce(a.bootstrap, "a-x", 30, "from-a")
    return a, b


def test_one_link_both_directions__each_direction_replicates(daemon_factory: Any) -> None:
    a, b = bidirectional(daemon_factory)
    create_topic(b, "b-y", 2)
    produce(b.bootstrap, "b-y", 30, "from-b")
    findings = Findings()
    replicates(findings, a, b, "a-x")
    replicates(findings, b, a, "b-y")
    findings.done()


def test_one_link_both_directions__manual_reversal_of_a_namespace__b_writes_reach_a(
    daemon_factory: Any,
) -> None:
    """The KIP's steps by hand on the two-way link: reserve A's leader
    namespace, wait, detach, attach the other way, clear B's reservation."""
    a, b = bidirectional(daemon_factory)
    wait_for("FOLLOWING on A", following(a))
    findings = Findings()
    reserve(a, "a-", True)
    replicates(findings, a, b, "a-x")  # the KIP: wait until B holds A's log end
    detach(a, "ab", "topic", "a-")
    attach(a, "ab", "topic", "a-", "a-", "remote")
    reserve(b, "a-", False)
    produced = run_cli("produce", "a-x", bootstrap=b.bootstrap, input="b-1\nb-2\nb-3\n")
    if findings.check(
        produced.returncode == 0, f"B cannot write a-x after the reversal: {produced.stderr}"
    ):
        findings.check(
            eventually(lambda: same_log(b, a, "a-x")),
            lambda: (
                f"B's records never reached A: A {high_watermarks(a.bootstrap, 'a-x')}, "
                f"B {high_watermarks(b.bootstrap, 'a-x')}; {link_view(a)}"
            ),
        )
    findings.done()


def read_committed_to_hw(d: Any, topic: str, timeout_s: float) -> tuple[list[Any], str]:
    """A confluent-kafka read_committed consumer from the start: the values
    read, and "" once every partition's position reached its HW (else where
    it stopped short)."""
    hws = {p["partition"]: p["high_watermark"] for p in topic_parts(d, topic)}
    consumer = KafkaConsumer({"bootstrap.servers": d.kafka, "group.id": "rc-check",
                              "isolation.level": "read_committed", "log_level": 0})  # fmt: skip
    consumer.assign([KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in hws])
    values: list[Any] = []
    short = "nothing read"
    deadline = time.monotonic() + timeout_s
    while short and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(500, 0.2) if m.error() is None]
        at = consumer.position([KafkaTopicPartition(topic, p) for p in hws])
        short = ", ".join(f"p{tp.partition} at {tp.offset} < HW {hws[tp.partition]}"
                          for tp in at if tp.offset < hws[tp.partition])  # fmt: skip
    consumer.close()
    return values, short


def test_manual_reversal_with_an_open_transaction__reservation_aborts_it__nothing_hangs(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-t", 2)
    produce(a.bootstrap, "orders-t", 10, "committed")
    txn = KafkaProducer({"bootstrap.servers": a.kafka, "transactional.id": "tx-orders",
                         "transaction.timeout.ms": 600000, "log_level": 0})  # fmt: skip
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("orders-t", value=b"in-doubt", partition=0)
    assert txn.flush(30) == 0  # sent, left open
    wait_for("FOLLOWING on A", following(a))
    findings = Findings()

    answer = reserve(a, "orders-", True)
    findings.check(
        "tx-orders" in (answer.get("aborted_transactions") or []),
        f"set-reserved did not report aborting tx-orders: {answer}",
    )
    wait_for("B holds A's log end", lambda: same_log(a, b, "orders-t"))
    detach(a, "ab", "topic", "orders-")
    attach(a, "ab", "topic", "orders-", "orders-", "remote")
    reserve(b, "orders-", False)

    def stuck(d: Any) -> list[tuple[int, int, int]]:
        return [(p["partition"], p["last_stable_offset"], p["high_watermark"])
                for p in topic_parts(d, "orders-t")
                if p["last_stable_offset"] != p["high_watermark"]]  # fmt: skip

    eventually(lambda: not stuck(a) and not stuck(b))
    for d in (a, b):
        left = stuck(d)
        findings.check(not left, f"{d.cluster_id}: LSO below HW (partition, LSO, HW): {left}")
        values, short = read_committed_to_hw(d, "orders-t", 5)
        expected = sorted(f"committed-{i}".encode() for i in range(10))
        findings.check(
            not short and sorted(values) == expected,
            f"{d.cluster_id}: read_committed stopped short ({short}) after {len(values)} records",
        )
    try:  # fenced: the transaction cannot be committed any more
        txn.commit_transaction(5)
        findings.check(False, "the open transaction still committed after the reservation")
    except KafkaException as exc:
        err = exc.args[0]
        fenced = (KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED)
        findings.check(
            err.fatal() or err.code() in fenced,
            f"the producer was not fenced: commit_transaction answered {err} (not fatal)",
        )
    findings.done()


# A's and B's namespaces, A's source topics, the mapping A leads (A's prefix,
# B's prefix), the attach that must be refused (run on A or B), and the names
# the refusal must mention (one of each tuple).
OVERLAPS = {
    "follower-nested-in-follower": (
        ("orders-", "orders-eu-"), ("orders-", "orders-eu-"), ("orders-1",),
        ("orders-", "orders-"), ("B", "orders-eu-", "orders-eu-", "remote"),
        (("orders-",), ("orders-eu-",)),
    ),
    "two-sources-one-follower-name": (
        ("orders", "local-"), ("remote-orders", "remote-"), ("orders", "local-orders"),
        ("orders", "remote-orders"), ("A", "local-", "remote-", "local"),
        (("orders", "remote-orders"), ("local-", "remote-")),
    ),
    "leader-and-nested-follower": (
        ("orders-", "orders-eu-"), ("orders-", "orders-eu-"), ("orders-1",),
        ("orders-", "orders-"), ("A", "orders-eu-", "orders-eu-", "remote"),
        (("orders-",), ("orders-eu-",)),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(OVERLAPS))
def test_overlapping_mappings_on_one_link__refused_naming_both__nothing_changes(
    daemon_factory: Any, case: str
) -> None:
    ns_a, ns_b, topics, existing, (where, local, remote, leader), names = OVERLAPS[case]
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", *ns_a, on=(a,))
    namespaces("topic", *ns_b, on=(b,))
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", *existing, "local")
    for topic in topics:
        create_topic(a, topic, 1)
    source = topics[0]  # replicated by the existing mapping
    follower = existing[1] + source[len(existing[0]) :]
    produce(a.bootstrap, source, 5, "before")
    wait_for("replicated", lambda: high_watermarks(b.bootstrap, follower) == [5])
    before = {d.cluster_id: mapping_set(describe(d)["mappings"]) for d in (a, b)}

    on = a if where == "A" else b
    attempt = attach_cmd("ab", "topic", local, remote, leader)
    result = run_cli(*attempt, bootstrap=on.bootstrap)
    named = [any(re.search(rf"['\"]{re.escape(n)}['\"]", result.stderr) for n in alternatives)
             for alternatives in names]  # fmt: skip
    findings = Findings()
    findings.check(
        result.returncode != 0 and "MAPPINGS_OVERLAP" in result.stderr and all(named),
        f"{' '.join(attempt)} on {where}: exit {result.returncode}, "
        f"{(result.stderr or result.stdout).strip()} (expected MAPPINGS_OVERLAP naming "
        f"one of {names[0]} and one of {names[1]})",
    )
    wait_for("a round of the link", lambda: following(a)() and following(b)())
    produce(a.bootstrap, source, 5, "after")
    findings.check(
        eventually(lambda: high_watermarks(b.bootstrap, follower) == [10], 10),
        lambda: f"the existing mapping stopped replicating: {link_view(b)}",
    )
    for d in (a, b):
        now = mapping_set(describe(d)["mappings"])
        findings.check(
            now == before[d.cluster_id],
            f"{d.cluster_id}'s mappings changed: {sorted(before[d.cluster_id])} -> {sorted(now)}",
        )
    ns = cli_json(on.bootstrap, "describe-namespace", "--type", "topic", "--prefix", local)
    findings.check(not ns["attachments"], f"{where}: {local!r} is attached anyway: {ns}")
    findings.done()


def test_set_mode_sync_while_the_follower_is_behind__refused__leader_shows_catching_up(
    daemon_factory: Any,
) -> None:
    # A long session timeout: the stalled follower stays connected, only behind.
    flags = ["--link-session-timeout-ms", "60000"]
    a, b = make_cluster(daemon_factory, "A", flags), make_cluster(daemon_factory, "B", flags)
    namespaces("topic", "orders-", on=(a, b))
    link_ab(a, b, "orders-")
    create_topic(a, "orders-s", 1)
    produce(a.bootstrap, "orders-s", 10)
    wait_for("B caught up", lambda: same_log(a, b, "orders-s"))
    wait_for("FOLLOWING on both", lambda: following(a)() and following(b)())

    findings = Findings()
    b.pause()
    try:
        produce(a.bootstrap, "orders-s", 5000, "backlog")
        seen: dict[str, Any] = {}

        def leader_sees_lag() -> bool:
            seen.update(describe(a))
            lagging = [p for p in seen["partitions"] if p["lag_records"] > 0]
            return seen["state"] == "CATCHING_UP" and bool(lagging)

        findings.check(
            eventually(leader_sees_lag, 8),
            f"B holds 10 of 5010 records, but A's describe-link shows {seen['state']} with "
            f"rows {seen['partitions']}",
        )
        result = run_cli("set-mode", "--link", "ab", "sync", bootstrap=a.bootstrap)
        findings.check(
            result.returncode != 0 and "LINK_NOT_FOLLOWING" in result.stderr,
            f"set-mode sync on A while B lags by 5000 records: exit {result.returncode}, "
            f"{(result.stderr or result.stdout).strip()}",
        )
    finally:
        b.resume()
    wait_for("B caught up", lambda: same_log(a, b, "orders-s"))
    settled = ("FOLLOWING", "IN_SYNC")  # IN_SYNC: the early set-mode was accepted
    wait_for("settled", lambda: describe(a)["state"] in settled and describe(b)["state"] in settled)
    # Caught up, the same call is accepted.
    assert cli_json(a.bootstrap, "set-mode", "--link", "ab", "sync")["mode"] == "SYNC"
    findings.done()


def test_attach_an_empty_namespace_to_a_following_link__stays_following(
    daemon_factory: Any,
) -> None:
    a, b = make_cluster(daemon_factory, "A"), make_cluster(daemon_factory, "B")
    namespaces("topic", "orders-", "local-", on=(a,))
    namespaces("topic", "orders-", "remote-", on=(b,))
    link_ab(a, b, "orders-")
    create_topic(a, "orders-1", 2)
    produce(a.bootstrap, "orders-1", 20)
    wait_for("B caught up", lambda: same_log(a, b, "orders-1"))
    wait_for("FOLLOWING on B", following(b))
    attach(a, "ab", "topic", "local-", "remote-", "local")
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    states = []
    end = time.monotonic() + 3.0
    while time.monotonic() < end:  # sample B's state every 50 ms for 3 s
        states.append(admin.describe_link("ab").state)
        time.sleep(0.05)
    admin.close()
    assert set(states) == {"FOLLOWING"}, (
        f"B's states after attaching an empty namespace: {sorted(set(states))} "
        f"({states.count('CATCHING_UP')} of {len(states)} samples CATCHING_UP)"
    )


def test_reverse__old_leader_shows_no_stale_leader_rows_for_partitions_it_follows(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-r", 3)
    produce(a.bootstrap, "orders-r", 30)
    wait_for("B caught up", lambda: same_log(a, b, "orders-r"))
    wait_for("FOLLOWING on A", following(a))
    result = cli_json(a.bootstrap, "reverse", "--link", "ab", "--timeout-ms", "30000")
    assert result["ok"] is True, result
    produce(b.bootstrap, "orders-r", 6, "b")
    wait_for("A follows B", lambda: same_log(b, a, "orders-r"))
    parts = {("orders-r", p) for p in range(3)}

    def rows(role: str) -> set[tuple[str, int]]:
        return {(p["topic"], p["partition"]) for p in describe(a)["partitions"]
                if p["role"] == role}  # fmt: skip

    wait_for("A's follower rows", lambda: rows("follower") == parts)
    for _ in range(5):  # over several rounds of the link, no stale leader row
        stale = rows("leader") & parts
        assert not stale, f"A shows role leader for partitions it follows: {sorted(stale)}"
        wait_for("a round", following(a))


def test_deny_read_acl_on_a_source_topic__synced_to_the_follower(daemon_factory: Any) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-acl", 1)
    wait_for("topic on B", lambda: high_watermarks(b.bootstrap, "orders-acl") == [0])

    def binding(who: str, permission: Any) -> Any:
        return AclBinding(ResourceType.TOPIC, "orders-acl", ResourcePatternType.LITERAL, who,
                          "*", AclOperation.READ, permission)  # fmt: skip

    source = KafkaAdmin({"bootstrap.servers": a.kafka, "log_level": 0})
    bindings = [binding("User:alice", AclPermissionType.ALLOW),
                binding("User:mallory", AclPermissionType.DENY)]  # fmt: skip
    for future in source.create_acls(bindings).values():
        future.result(20)
    follower = KafkaAdmin({"bootstrap.servers": b.kafka, "log_level": 0})
    on_topic = AclBindingFilter(ResourceType.TOPIC, "orders-acl", ResourcePatternType.ANY,
                                None, None, AclOperation.ANY,  # type: ignore[arg-type]
                                AclPermissionType.ANY)  # fmt: skip
    seen: set[tuple[str, str, str]] = set()

    def on_b() -> set[tuple[str, str, str]]:
        seen.clear()
        seen.update((x.principal, x.operation.name, x.permission_type.name)
                    for x in follower.describe_acls(on_topic).result(20))  # fmt: skip
        return seen

    wait_for("alice's ALLOW READ on B", lambda: ("User:alice", "READ", "ALLOW") in on_b())
    assert eventually(lambda: ("User:mallory", "READ", "DENY") in on_b(), 10), (
        f"B's ACLs on orders-acl: {sorted(seen)}; mallory's DENY READ was not synced"
    )


def test_source_deletes_a_topic_with_an_open_transaction__the_copy_is_settled__readers_move_on(
    daemon_factory: Any,
) -> None:
    """Found by the operator sweep (21 hanging runs): the follower's copy of a
    deleted topic kept a replicated transaction open for ever. Now the copy is
    orphaned and settled: the transaction is aborted there, the abort marker
    is under the high watermark, read_committed readers reach the end, and
    describe-link says why the partition is not copied."""
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    create_topic(a, "orders-t", 1)
    produce(a.bootstrap, "orders-t", 4, "committed")
    txn = KafkaProducer({"bootstrap.servers": a.kafka, "transactional.id": "tx-gone",
                         "transaction.timeout.ms": 600000, "log_level": 0})  # fmt: skip
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("orders-t", value=b"in-doubt", partition=0)
    assert txn.flush(30) == 0  # sent, left open
    wait_for("B holds A's log end", lambda: same_log(a, b, "orders-t"))
    findings = Findings()

    cli_json(a.bootstrap, "delete-topic", "orders-t")

    def settled() -> bool:
        p = topic_parts(b, "orders-t")[0]
        return bool(p["last_stable_offset"] == p["high_watermark"] == p["log_end_offset"] == 6)

    findings.check(eventually(settled), lambda: f"B: {topic_parts(b, 'orders-t')}")
    values, short = read_committed_to_hw(b, "orders-t", 5)
    findings.check(
        not short and sorted(values) == sorted(f"committed-{i}".encode() for i in range(4)),
        f"B: read_committed read {values} ({short or 'to the HW'})",
    )
    row = next(p for p in describe(b)["partitions"] if p["topic"] == "orders-t")
    findings.check(
        "UNKNOWN_TOPIC" in str(row) and row["lag_records"] == -1,
        f"describe-link on B does not say the source is gone: {row}",
    )
    findings.done()
