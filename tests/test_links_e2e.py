"""Replication links between real daemons, driven through ccr-admin.

Stories: a namespace attached to an async link replicates every record at the
same offset (spec §10 invariants 1-3); populated topics and later topics and
partitions follow; the follower refuses its own producers; a follower killed
with SIGKILL resumes without gaps or duplicates; the link's state and lag are
visible in describe-link; failover makes the follower writable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import run_cli

from admin import AdminClient, Consumer, Producer, TopicPartition

WAIT_S = 60.0
LINK_FLAGS = ["--link-session-timeout-ms", "3000"]


def cli_json(
    bootstrap: str, *args: str, input: str | None = None, pending: bool = False
) -> Any:
    """A ccr-admin call's JSON answer; `pending`: the call must answer
    pending (exit 3: the remote has not confirmed the change), else done."""
    result = run_cli(*args, "--json", bootstrap=bootstrap, input=input)
    expected = 3 if pending else 0
    assert result.returncode == expected, f"{args}: exit {result.returncode}: {result.stderr}"
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return json.loads(lines[0]) if len(lines) == 1 else [json.loads(x) for x in lines]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def high_watermarks(bootstrap: str, topic: str) -> list[int] | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return [p.high_watermark for p in admin.describe_topic(topic).partitions]
    except Exception:
        return None
    finally:
        admin.close()


def read_all(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = admin.describe_topic(topic).partitions
    admin.close()
    ends = {p.partition: p.high_watermark for p in parts}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    assigned = [TopicPartition(topic, p.partition, p.log_start_offset) for p in parts]
    consumer.assign(assigned)

    def behind() -> bool:
        # By position, not by count: transaction markers take offsets but are
        # never delivered, so counting records would wait out the deadline.
        return any(tp.offset < ends[tp.partition] for tp in consumer.position(assigned))

    out = []
    deadline = time.monotonic() + WAIT_S
    while behind() and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                out.append(
                    (msg.partition(), msg.offset(), msg.key(), msg.value(), msg.timestamp()[1])
                )
    consumer.close()
    return sorted(out)


def produce(bootstrap: str, topic: str, n: int, prefix: str = "v") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(n):
        producer.produce(
            topic, key=f"k{i % 7}", value=f"{prefix}-{i}", headers=[("h", str(i).encode())]
        )
    assert producer.flush(WAIT_S) == 0
    producer.close()


def attach(
    d: Any, kind: str, local: str, remote: str, leader: str, pending: bool = False
) -> None:
    """attach-namespace on link ab, run on daemon d (`pending`: the remote
    is down, so the answer must be pending)."""
    cli_json(
        d.bootstrap,
        "attach-namespace",
        "--link",
        "ab",
        "--type",
        kind,
        "--local-prefix",
        local,
        "--remote-prefix",
        remote,
        "--leader",
        leader,
        pending=pending,
    )


def link_orders(a: Any, b: Any) -> None:
    """Link ab, created on A, with A's topic namespace orders- leading B's."""
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "topic", "orders-", "orders-", "local")


@pytest.fixture
def linked(daemon_factory: Any) -> tuple[Any, Any]:
    """A leads topic namespace orders- to B over link ab."""
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    cli_json(a.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    cli_json(b.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    return a, b


def test_async_link__records_appear_on_the_follower_at_the_same_offsets(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    # A populated topic before the link exists, and one created after attaching.
    run_cli("create-topic", "orders-old", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-old", 120, "old")
    link = cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    assert link["remote_cluster_id"] == "B" and link["mode"] == "ASYNC"
    attach(a, "topic", "orders-", "orders-", "local")
    run_cli("create-topic", "orders-new", "--partitions", "3", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-new", 300, "new")

    for topic in ("orders-old", "orders-new"):
        source = high_watermarks(a.bootstrap, topic)
        wait_for(f"{topic} on B", lambda t=topic, s=source: high_watermarks(b.bootstrap, t) == s)
        assert read_all(a.bootstrap, topic) == read_all(b.bootstrap, topic)

    described = cli_json(b.bootstrap, "describe-link", "ab")
    assert described["local_cluster_id"] == "B" and described["remote_cluster_id"] == "A"
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    follower = [
        p
        for p in cli_json(b.bootstrap, "describe-link", "ab")["partitions"]
        if p["role"] == "follower"
    ]
    assert {(p["topic"], p["partition"]) for p in follower} == {
        ("orders-old", 0),
        ("orders-old", 1),
        ("orders-new", 0),
        ("orders-new", 1),
        ("orders-new", 2),
    }
    assert all(p["lag_records"] == 0 for p in follower)
    # Provenance (spec §8): each follower partition's data came from A over ab.
    assert all(
        p["provenance_entries"] >= 1 and p["provenance_source"] == "A"
        for p in follower
        if p["log_end_offset"] > 0
    )

    # The follower's own clients may not write there (spec §6, last row).
    refused = run_cli("produce", "orders-new", bootstrap=b.bootstrap, input="x\n")
    assert refused.returncode == 1
    assert "FOLLOWER_TOPIC_NOT_WRITABLE" in refused.stderr and "ab" in refused.stderr

    # Partitions added on the source follow.
    run_cli("create-partitions", "orders-new", "--total", "4", bootstrap=a.bootstrap)
    wait_for(
        "4 partitions on B", lambda: len(high_watermarks(b.bootstrap, "orders-new") or []) == 4
    )


def test_follower_killed_mid_stream__resumes_without_gaps_or_duplicates(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    link_orders(a, b)
    run_cli("create-topic", "orders-x", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-x", 200, "first")
    wait_for("some records on B", lambda: sum(high_watermarks(b.bootstrap, "orders-x") or [0]) > 0)
    b.kill9()
    produce(a.bootstrap, "orders-x", 200, "while-down")
    b.start()
    b.wait_ready()
    produce(a.bootstrap, "orders-x", 100, "after")
    source = high_watermarks(a.bootstrap, "orders-x")
    wait_for("B caught up", lambda: high_watermarks(b.bootstrap, "orders-x") == source)
    assert read_all(a.bootstrap, "orders-x") == read_all(b.bootstrap, "orders-x")


def test_failover__refused_while_lagging_unless_forced__then_follower_is_writable(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    # B does not dial A (A created the link): B's attach is pending until A's
    # next handshake brings it there.
    attach(b, "topic", "orders-", "orders-", "remote", pending=True)
    run_cli("create-topic", "orders-f", "--partitions", "1", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-f", 50)
    source = high_watermarks(a.bootstrap, "orders-f")
    wait_for("B caught up", lambda: high_watermarks(b.bootstrap, "orders-f") == source)
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    result = cli_json(b.bootstrap, "failover", "--link", "ab")
    assert result["abandoned"] == []
    produced = run_cli("produce", "orders-f", bootstrap=b.bootstrap, input="mine\n")
    assert produced.returncode == 0, produced.stderr
    assert source is not None
    assert high_watermarks(b.bootstrap, "orders-f") == [source[0] + 1]


def test_link_state__disconnected_when_the_remote_stops__following_after_restart(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    link_orders(a, b)
    wait_for(
        "FOLLOWING on A",
        lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING",
    )
    # SIGTERM while A's link calls reach B: B stops cleanly (the fixtures' own
    # teardown kills with SIGKILL and reads nothing).
    assert b.terminate() == 0, b.stderr_text()[-3000:]
    assert '"msg": "stopped"' in b.stderr_text(), b.stderr_text()[-3000:]
    wait_for(
        "DISCONNECTED on A",
        lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "DISCONNECTED",
    )
    b.start()
    b.wait_ready()
    wait_for(
        "FOLLOWING again",
        lambda: cli_json(a.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING",
    )
    history = [h["state"] for h in cli_json(a.bootstrap, "describe-link", "ab")["history"]]
    assert history[-3:] == ["FOLLOWING", "DISCONNECTED", "FOLLOWING"]


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return {
            (o.topic, o.partition): o.offset
            for o in admin.list_consumer_group_offsets(group)
            if o.offset >= 0
        }
    except Exception:
        return {}
    finally:
        admin.close()


def consume_n(bootstrap: str, group: str, topic: str, n: int) -> list[tuple[int, int]]:
    """Consumes n records with a group member, commits them, leaves."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + WAIT_S
    while len(seen) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append((msg.partition(), msg.offset()))
            consumer.commit(msg)
    consumer.close()
    return seen


def test_consumer_offsets_replicate__group_resumes_on_the_follower_after_failover(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
        cli_json(d.bootstrap, "create-namespace", "--type", "group", "--prefix", "app-")
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    for kind, prefix in (("topic", "orders-"), ("group", "app-")):
        cli_json(
            a.bootstrap,
            "attach-namespace",
            "--link",
            "ab",
            "--type",
            kind,
            "--local-prefix",
            prefix,
            "--remote-prefix",
            prefix,
            "--leader",
            "local",
        )
    run_cli("create-topic", "orders-c", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-c", 100)
    first = consume_n(a.bootstrap, "app-1", "orders-c", 60)
    source_offsets = committed(a.bootstrap, "app-1")
    assert sum(source_offsets.values()) == 60
    wait_for("offsets on B", lambda: committed(b.bootstrap, "app-1") == source_offsets)

    # While the link holds the group, its members on B may not commit (spec §6).
    consumer = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "app-1", "enable.auto.commit": False}
    )
    with pytest.raises(Exception) as info:
        consumer.commit(offsets=[TopicPartition("orders-c", 0, 1)], asynchronous=False)
    consumer.close()
    assert "REPLICATED_GROUP_READ_ONLY" in str(info.value)

    source = high_watermarks(a.bootstrap, "orders-c")
    wait_for("B caught up", lambda: high_watermarks(b.bootstrap, "orders-c") == source)
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    cli_json(b.bootstrap, "failover", "--link", "ab")
    second = consume_n(b.bootstrap, "app-1", "orders-c", 40)
    assert sorted(first + second) == sorted(set(first + second)), "duplicates after failover"
    assert len(first + second) == 100, "records skipped after failover"
    internal = cli_json(b.bootstrap, "list-topics", "--include-internal")
    names = {t["name"] for t in internal}
    assert "__consumer_offsets_A" in names


def test_unclean_election_on_the_source__follower_truncates_and_follows_the_new_history(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    link_orders(a, b)
    run_cli("create-topic", "orders-u", "--partitions", "1", bootstrap=a.bootstrap)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 0})
    for i in range(10):  # ten batches of one record: every offset is a batch boundary
        producer.produce("orders-u", value=f"old-{i}")
        assert producer.flush(WAIT_S) == 0
    producer.close()
    wait_for("B has 10", lambda: high_watermarks(b.bootstrap, "orders-u") == [10])
    fault = cli_json(
        a.bootstrap,
        "fault",
        "unclean-election",
        "--topic",
        "orders-u",
        "--partition",
        "0",
        "--truncate-to",
        "6",
    )
    assert fault["removed_records"] == 4 and fault["leader_epoch"] == 1
    produce(a.bootstrap, "orders-u", 3, "new")
    wait_for(
        "B follows the new history",
        lambda: (
            high_watermarks(b.bootstrap, "orders-u") == [9]
            and read_all(a.bootstrap, "orders-u") == read_all(b.bootstrap, "orders-u")
        ),
    )
    values = [v for _p, _o, _k, v, _t in read_all(b.bootstrap, "orders-u")]
    assert values[:6] == [f"old-{i}".encode() for i in range(6)]
    assert values[6:] == [f"new-{i}".encode() for i in range(3)]
    # The follower reports the cut in the partition's provenance history.
    history = cli_json(b.bootstrap, "provenance", "orders-u")["partitions"][0]["provenance"]
    kinds = [(e["kind"], e["offset"]) for e in history]
    assert kinds == [("start", 0), ("truncated", 6), ("start", 6)], history
    assert history[1]["removed_records"] == 4 and history[1]["reason"] == "diverged"
    text = run_cli("provenance", "orders-u", bootstrap=b.bootstrap).stdout
    assert "at 6: truncated after a divergence (4 records removed" in text


def test_a_divergence_cut_that_removes_a_commit_marker_names_the_transaction(
    linked: tuple[Any, Any],
) -> None:
    """B copied a committed transaction; an unclean election on A loses its
    COMMIT marker. B's cut at the divergence removes only the marker, yet the
    transaction's records below it are committed there no more: the cut's
    provenance entry names the transaction, in JSON and in text."""
    a, b = linked
    link_orders(a, b)
    run_cli("create-topic", "orders-t", "--partitions", "1", bootstrap=a.bootstrap)
    producer = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "tx-cut"})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    for i in range(2):
        producer.produce("orders-t", value=f"t-{i}")
    producer.commit_transaction(WAIT_S)
    producer.close()
    wait_for("B has the COMMIT", lambda: high_watermarks(b.bootstrap, "orders-t") == [3])
    elected_ms = int(time.time() * 1000)
    fault = cli_json(
        a.bootstrap, "fault", "unclean-election", "--topic", "orders-t", "--partition", "0",
        "--truncate-to", "2",
    )  # fmt: skip
    assert fault["removed_records"] == 1
    produce(a.bootstrap, "orders-t", 1, "new")

    def cut_entry() -> dict[str, Any] | None:
        report = cli_json(b.bootstrap, "provenance", "orders-t")
        cuts = [e for e in report["partitions"][0]["provenance"] if e["kind"] == "truncated"]
        return cuts[0] if cuts else None

    wait_for("B cut at the divergence", lambda: cut_entry() is not None)
    entry = cut_entry()
    assert entry is not None and entry["offset"] == 2 and entry["removed_records"] == 1
    # When B cut (its wall clock): after the election began; the text says it too.
    assert entry["at_ms"] >= elected_ms, (entry, elected_ms)
    assert [u["first_offset"] for u in entry["uncommitted"]] == [0], entry
    pid = entry["uncommitted"][0]["producer_id"]
    text = run_cli("provenance", "orders-t", bootstrap=b.bootstrap).stdout
    assert f"removed the COMMIT of producer {pid}'s transaction: its records from 0" in text
    assert f"at {entry['at_ms']} ms" in text


def mappings_of(bootstrap: str) -> set[tuple[str, str, str, str]]:
    link = cli_json(bootstrap, "describe-link", "ab")
    return {
        (m["type"], m["local_prefix"], m["remote_prefix"], m["leader"]) for m in link["mappings"]
    }


def mirrored(ms: set[tuple[str, str, str, str]]) -> set[tuple[str, str, str, str]]:
    return {(t, r, lo, "remote" if lead == "local" else "local") for t, lo, r, lead in ms}


def test_config_changes_on_both_sides_during_a_cut__converge_after_healing(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "group", "--prefix", "app-")
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "logs-")
    link_orders(a, b)
    # Cut: B is down while A attaches a group namespace.
    b.terminate()
    attach(a, "group", "app-", "app-", "local", pending=True)
    # Cut the other way: A is down while B attaches a topic namespace it follows.
    a.terminate()
    b.start()
    b.wait_ready()
    attach(b, "topic", "logs-", "logs-", "remote", pending=True)
    assert ("group", "app-", "app-", "remote") not in mappings_of(b.bootstrap)
    # Heal.
    a.start()
    a.wait_ready()
    expected = {
        ("topic", "orders-", "orders-", "local"),
        ("group", "app-", "app-", "local"),
        ("topic", "logs-", "logs-", "local"),
    }
    wait_for("A converged", lambda: mappings_of(a.bootstrap) == expected)
    wait_for("B converged", lambda: mappings_of(b.bootstrap) == mirrored(expected))
    # And the namespace B now follows is reserved there.
    ns = cli_json(b.bootstrap, "describe-namespace", "--type", "group", "--prefix", "app-")
    assert ns["reserved"] is True


def test_source_killed_mid_stream__follower_resumes_without_gaps_or_duplicates(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    link_orders(a, b)
    run_cli("create-topic", "orders-s", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-s", 300, "before")
    a.kill9()
    a.start()
    a.wait_ready()
    produce(a.bootstrap, "orders-s", 100, "after")
    source = high_watermarks(a.bootstrap, "orders-s")
    wait_for("B caught up", lambda: high_watermarks(b.bootstrap, "orders-s") == source)
    assert read_all(a.bootstrap, "orders-s") == read_all(b.bootstrap, "orders-s")


def test_link_to_a_cluster_requiring_credentials__refused_without_them(
    daemon_factory: Any, tmp_path: Path
) -> None:
    secret = tmp_path / "link-credentials"
    secret.write_text("# B's link credentials\ns3cret\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("guess\n")
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, "--link-credentials-file", str(secret)])
    for extra in ([], ["--remote-credentials-file", str(wrong)]):
        refused = run_cli(
            "create-link", "ab", "--remote", b.bootstrap, *extra, bootstrap=a.bootstrap
        )
        assert refused.returncode == 1 and "LINK_AUTHENTICATION_FAILED" in refused.stderr
    listed = run_cli("list-links", "--json", bootstrap=a.bootstrap)
    assert listed.returncode == 0 and "ab" not in listed.stdout  # nothing half-created
    on_b = run_cli("list-links", "--json", bootstrap=b.bootstrap)
    assert on_b.returncode == 0 and "ab" not in on_b.stdout
    # A secret on the command line is refused before anything is sent.
    argv = run_cli("create-link", "ab", "--remote", b.bootstrap, "--credentials", "s3cret",
                   bootstrap=a.bootstrap)
    assert argv.returncode == 2 and "--remote-credentials-file" in argv.stderr
    link = cli_json(
        a.bootstrap, "create-link", "ab", "--remote", b.bootstrap,
        "--remote-credentials-file", str(secret),
    )
    assert link["remote_cluster_id"] == "B"


def test_follower_dials__pull_replication_with_prefix_rewriting(daemon_factory: Any) -> None:
    """B sits behind NAT: A creates the link but B dials (and pulls); A's
    orders- lands in B's backup-orders- at the same offsets."""
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    cli_json(a.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    cli_json(b.bootstrap, "create-namespace", "--type", "topic", "--prefix", "backup-orders-")
    link = cli_json(
        a.bootstrap,
        "create-link",
        "ab",
        "--remote",
        b.bootstrap,
        "--connection",
        "remote",
        "--local-bootstrap",
        a.bootstrap,
    )
    assert link["connection_direction"] == "remote"
    attach(a, "topic", "orders-", "backup-orders-", "local")
    run_cli("create-topic", "orders-p", "--partitions", "2", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-p", 150)
    source = high_watermarks(a.bootstrap, "orders-p")
    wait_for(
        "backup-orders-p on B", lambda: high_watermarks(b.bootstrap, "backup-orders-p") == source
    )
    assert read_all(a.bootstrap, "orders-p") == read_all(b.bootstrap, "backup-orders-p")
    assert cli_json(b.bootstrap, "describe-link", "ab")["connection_direction"] == "local"


def test_an_attached_empty_namespace__the_link_is_following(linked: tuple[Any, Any]) -> None:
    """Nothing to copy is nothing lagging: FOLLOWING, not CATCHING_UP for ever
    (found by the simulator's add-empty-namespace scenario)."""
    a, b = linked
    link_orders(a, b)
    wait_for(
        "FOLLOWING on B",
        lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING",
    )
    run_cli("create-topic", "orders-late", "--partitions", "1", bootstrap=a.bootstrap)
    produce(a.bootstrap, "orders-late", 5)
    wait_for("orders-late on B", lambda: high_watermarks(b.bootstrap, "orders-late") == [5])


def test_describe_link_wait_for__returns_in_the_state__times_out_naming_the_state_it_is_in(
    linked: tuple[Any, Any],
) -> None:
    a, b = linked
    link_orders(a, b)
    following = run_cli("describe-link", "ab", "--wait-for", "FOLLOWING", "--json",
                        bootstrap=b.bootstrap)  # fmt: skip
    assert following.returncode == 0, following.stderr
    assert json.loads(following.stdout)["state"] == "FOLLOWING"
    never = run_cli("describe-link", "ab", "--wait-for", "IN_SYNC", "--wait", "0.5",
                    bootstrap=b.bootstrap)  # fmt: skip
    assert never.returncode == 1
    assert never.stderr.strip() == (
        "error: TIMED_OUT: link ab is FOLLOWING after 0.5 s, not IN_SYNC"
    ), never.stderr
