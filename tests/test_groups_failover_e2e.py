"""Replicated consumer groups through a catch-up and a forced failover, on
real daemons through ccr-admin and confluent-kafka (issue 35, N5).

A leads orders- and the groups app- to B over link ab (A dials and pushes).
B falls behind by a backlog; the group app-1 reads A to its end and
commits; A is killed while B still catches up. Before the fix the group
did not exist on B (its commit lay beyond B's data and was held back for
the whole catch-up), `failover --force` said nothing of it, and a consumer
on B restarted at 0, re-reading what it had processed."""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from harness import run_cli
from test_links_e2e import cli_json, committed, high_watermarks, produce, wait_for
from test_operator_stories_e2e import (
    BOUND_S,
    attach,
    create_topic,
    describe,
    following,
    link_ab,
    namespaces,
    pair,
)

from admin import Producer
from chaos.proxy import FaultProxy

TOPIC = "orders-g"


def commit_on(d: Any, group: str, offsets: dict[int, int]) -> None:
    """The group commits (a standalone commit, as a consumer that assigns
    its partitions does) with confluent-kafka."""
    consumer = KafkaConsumer(
        {"bootstrap.servers": d.kafka, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition(TOPIC, p, o) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


def first_offset_read(d: Any, group: str) -> int:
    """A confluent-kafka member of `group` on d: the offset of the first
    record it reads of partition 0 (where the group resumes)."""
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": d.kafka,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    try:
        deadline = time.monotonic() + BOUND_S * 2
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.partition() == 0:
                offset = msg.offset()
                assert offset is not None
                return offset
        raise AssertionError(f"no record of {TOPIC}-0 read on {d.cluster_id} by {group}")
    finally:
        consumer.close()


def test_a_group_committing_during_a_catch_up__failover_reports_it__b_resumes_there(
    daemon_factory: Any,
) -> None:
    a, b = pair(daemon_factory, "orders-")
    namespaces("group", "app-", on=(a, b))
    host, port = b.bootstrap.rsplit(":", 1)
    proxy = FaultProxy(host, int(port)).start_in_thread()  # A's pushes to B go through it
    try:
        catch_up_and_fail_over(a, b, proxy)
    finally:
        proxy.stop()


def catch_up_and_fail_over(a: Any, b: Any, proxy: FaultProxy) -> None:
    cli_json(a.bootstrap, "create-link", "ab", "--remote", proxy.address)
    attach(a, "ab", "topic", "orders-", "orders-", "local")
    attach(a, "ab", "group", "app-", "app-", "local")
    create_topic(a, TOPIC, 1)
    produce(a.bootstrap, TOPIC, 20, "early")
    wait_for("FOLLOWING on B", following(b), BOUND_S * 2)

    # A backlog of about 20 MB through a link of 2 MB/s, which B only starts
    # copying once the group has committed its end.
    proxy.throttle("a->b", 2_000_000)
    b.pause()
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    for _ in range(300):
        producer.produce(TOPIC, value="x" * 65536, partition=0)
    assert producer.flush(60) == 0
    producer.close()
    end = (high_watermarks(a.bootstrap, TOPIC) or [0])[0]
    commit_on(a, "app-1", {0: end})
    b.resume()

    # Mid catch-up: B knows of records it lacks and already holds the group
    # (before the fix it held nothing of it until the catch-up ended).
    def mid_catch_up() -> bool:
        rows = [p for p in describe(b)["partitions"] if p["role"] == "follower"]
        behind = any(p["source_high_watermark"] > p["log_end_offset"] for p in rows)
        return behind and committed(b.bootstrap, "app-1").get((TOPIC, 0), 0) > 0

    wait_for("B mid catch-up, holding app-1", mid_catch_up, BOUND_S * 2)
    a.pause()
    a.kill9()

    forced = cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    rows = [g for g in forced["groups"] if g["group"] == "app-1"]
    assert len(rows) == 1, forced["groups"]
    (row,) = rows
    b_end = (high_watermarks(b.bootstrap, TOPIC) or [0])[0]
    assert row["topic"] == TOPIC and row["partition"] == 0
    assert row["last_commit_heard"] == end, row
    assert 20 <= row["resume_offset"] <= b_end < end, (row, b_end)
    assert row["behind"] == end - row["resume_offset"], row
    assert committed(b.bootstrap, "app-1") == {(TOPIC, 0): row["resume_offset"]}

    # A consumer of the group on B resumes at the offset the answer gave: a
    # record written there after the failover is the first it reads.
    if row["resume_offset"] == b_end:
        produce(b.bootstrap, TOPIC, 1, "after")
    assert first_offset_read(b, "app-1") == row["resume_offset"]


def test_failover_text_shows_each_replicated_group(daemon_factory: Any) -> None:
    """The CLI's text answer names the group, where it resumes and the last
    commit heard of (here B holds all of it: nothing behind)."""
    a, b = pair(daemon_factory, "orders-")
    namespaces("group", "app-", on=(a, b))
    link_ab(a, b, "orders-")
    attach(a, "ab", "group", "app-", "app-", "local")
    create_topic(a, TOPIC, 1)
    produce(a.bootstrap, TOPIC, 10, "a")
    commit_on(a, "app-1", {0: 7})
    wait_for("B holds app-1 at 7", lambda: committed(b.bootstrap, "app-1") == {(TOPIC, 0): 7})
    done = run_cli("failover", "--link", "ab", "--force", bootstrap=b.bootstrap)
    assert done.returncode == 0, done.stderr
    assert f"group app-1 {TOPIC}-0: resumes at 7; last commit heard 7" in done.stdout, done.stdout


def test_an_attach_the_remote_does_not_confirm_answers_pending__exit_3__then_converges(
    daemon_factory: Any,
) -> None:
    """N6: B stopped (SIGSTOP), so the handshake that proposes the attach
    gets no answer by its deadline: the answer is pending, exit code 3, and
    says what remains; once B runs again the mapping reaches it."""
    a, b = pair(daemon_factory, "orders-")
    namespaces("group", "app-", on=(a, b))
    link_ab(a, b, "orders-")
    b.pause()
    try:
        done = run_cli(
            "attach-namespace", "--link", "ab", "--type", "group", "--local-prefix", "app-",
            "--remote-prefix", "app-", "--leader", "local", "--json", bootstrap=a.bootstrap,
        )  # fmt: skip
    finally:
        b.resume()
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    answer = json.loads(done.stdout)
    assert answer["pending"]["remote_cluster_id"] == "B", answer
    assert "group namespace 'app-' attached" in answer["pending"]["remains"], answer
    assert "pending:" in done.stderr and "not confirmed by B" in done.stderr, done.stderr

    def b_has_it() -> bool:
        return any(
            m["type"] == "group" and m["local_prefix"] == "app-"
            for m in describe(b)["mappings"]
        )

    wait_for("the attach to reach B", b_has_it, BOUND_S * 2)
    # Once both sides have it, the same call answers done.
    again = run_cli(
        "attach-namespace", "--link", "ab", "--type", "group", "--local-prefix", "app-",
        "--remote-prefix", "app-", "--leader", "local", bootstrap=a.bootstrap,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr


def test_delete_link_with_the_remote_down_answers_pending(daemon_factory: Any) -> None:
    a, b = pair(daemon_factory, "orders-")
    link_ab(a, b, "orders-")
    b.terminate()
    done = run_cli("delete-link", "ab", bootstrap=a.bootstrap)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "pending on the remote" in done.stdout and "still holds its half" in done.stderr
