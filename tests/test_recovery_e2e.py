"""Unclean link recovery between real daemons, driven through ccr-admin
(spec section 8; KIP-986 "Unclean Link Recovery" and "Disaster Recovery
(multi-zone Asynchronous)").

Stories: a failover starts a new leader epoch; the old leader, whose clients
wrote on after it, may follow again only through recover (an attach that
would cut acknowledged records its own clients wrote is refused, naming
them, as after a detach and local writes); after A is lost and B promoted,
C (ahead of B) is told exactly what it must cut before following B, and
then follows it to identical logs; recovery refuses partitions with no
shared history and an unreachable remote.
"""

from __future__ import annotations

from typing import Any

from harness import run_cli
from test_links_e2e import (
    LINK_FLAGS,
    cli_json,
    committed,
    consume_n,
    high_watermarks,
    read_all,
    wait_for,
)

from admin import Producer

WAIT_S = 60.0


def produce_batches(bootstrap: str, topic: str, n: int, prefix: str) -> None:
    """n records, one batch each (every offset is a batch boundary)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, key=f"k{i}", value=f"{prefix}-{i}", partition=0)
        assert producer.flush(WAIT_S) == 0
    producer.close()


def attach(d: Any, link: str, kind: str, prefix: str, leader: str) -> None:
    cli_json(
        d.bootstrap,
        "attach-namespace",
        "--link",
        link,
        "--type",
        kind,
        "--local-prefix",
        prefix,
        "--remote-prefix",
        prefix,
        "--leader",
        leader,
    )


def namespaces(*daemons: Any) -> None:
    for d in daemons:
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
        cli_json(d.bootstrap, "create-namespace", "--type", "group", "--prefix", "app-")


def values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [v for _p, _o, _k, v, _t in read_all(bootstrap, topic)]


def test_failover__new_leader_epoch__old_leader_following_again_over_its_own_tail__recovers(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    attach(a, "ab", "topic", "orders-", "local")
    run_cli("create-topic", "orders-e", "--partitions", "1", bootstrap=a.bootstrap)
    produce_batches(a.bootstrap, "orders-e", 8, "a")
    wait_for("B has 8", lambda: high_watermarks(b.bootstrap, "orders-e") == [8])
    wait_for(
        "FOLLOWING", lambda: cli_json(b.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING"
    )
    cli_json(b.bootstrap, "failover", "--link", "ab")

    # B's partition starts epoch 1 where the copied data ends.
    report = cli_json(b.bootstrap, "provenance", "orders-e")
    part = report["partitions"][0]
    assert part["epoch_history"] == [
        {"epoch": 0, "start_offset": 0},
        {"epoch": 1, "start_offset": 8},
    ]
    assert [e["kind"] for e in part["provenance"]] == ["start", "detached"]
    assert part["provenance"][0]["source_cluster_id"] == "A"
    assert part["provenance"][0]["link_name"] == "ab"
    assert part["provenance"][1]["offset"] == 8

    # Both sides write: A its old tail (epoch 0), B its new history (epoch 1).
    produce_batches(a.bootstrap, "orders-e", 4, "a-tail")
    produce_batches(b.bootstrap, "orders-e", 2, "b-new")
    assert cli_json(b.bootstrap, "provenance", "orders-e")["partitions"][0]["leader_epoch"] == 1

    # B's failover reaches A by a handshake after its answer: A's mapping goes.
    wait_for(
        "A to hear of the failover",
        lambda: not any(
            m["local_prefix"] == "orders-"
            for m in cli_json(a.bootstrap, "describe-link", "ab")["mappings"]
        ),
    )
    # A following B again would cut the 4 records A's clients wrote and were
    # acknowledged: the attach refuses, naming them; recover shows and cuts them.
    refused = run_cli(
        "attach-namespace", "--link", "ab", "--type", "topic", "--local-prefix", "orders-",
        "--remote-prefix", "orders-", "--leader", "remote", bootstrap=a.bootstrap,
    )
    assert refused.returncode == 1 and "error: DIVERGED_LOG: " in refused.stderr, refused.stderr
    assert "orders-e-0 offsets [8, 12) (4 records; cut to 8" in refused.stderr, refused.stderr
    assert high_watermarks(a.bootstrap, "orders-e") == [12]
    report = cli_json(a.bootstrap, "recover", "--link", "ab", "--namespace", "orders-")
    assert [(r["truncate_to"], r["local_records_lost"]) for r in report["partitions"]] == [(8, 4)]
    cli_json(a.bootstrap, "recover", "--link", "ab", "--namespace", "orders-", "--confirm")
    wait_for(
        "A follows B's history",
        lambda: (
            high_watermarks(a.bootstrap, "orders-e") == [10]
            and values(a.bootstrap, "orders-e") == values(b.bootstrap, "orders-e")
        ),
    )
    assert values(a.bootstrap, "orders-e") == [f"a-{i}".encode() for i in range(8)] + [
        b"b-new-0",
        b"b-new-1",
    ]


def test_disaster_recovery__c_ahead_of_promoted_b__recover_reports_and_cuts_then_follows_b(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    c = daemon_factory("C", extra_args=LINK_FLAGS)
    namespaces(a, b, c)
    # A leads orders- and app- to B and to C.
    for link, other in (("ab", b), ("ac", c)):
        cli_json(a.bootstrap, "create-link", link, "--remote", other.bootstrap)
        attach(a, link, "topic", "orders-", "local")
        attach(a, link, "group", "app-", "local")
    run_cli("create-topic", "orders-dr", "--partitions", "1", bootstrap=a.bootstrap)
    produce_batches(a.bootstrap, "orders-dr", 10, "a")
    for d in (b, c):
        bootstrap: str = d.bootstrap
        wait_for(
            f"{d.cluster_id} has 10",
            lambda at=bootstrap: high_watermarks(at, "orders-dr") == [10],  # type: ignore[misc]
        )

    # Zone B goes dark for a while: C gets more of A's records than B.
    b.terminate()
    produce_batches(a.bootstrap, "orders-dr", 5, "a-late")
    consume_n(a.bootstrap, "app-1", "orders-dr", 13)
    assert committed(a.bootstrap, "app-1") == {("orders-dr", 0): 13}
    wait_for("C has 15", lambda: high_watermarks(c.bootstrap, "orders-dr") == [15])
    wait_for(
        "C has app-1's offset", lambda: committed(c.bootstrap, "app-1") == {("orders-dr", 0): 13}
    )

    # Zone A is lost; B comes back and is promoted, and writes.
    a.terminate()
    b.start()
    b.wait_ready()
    cli_json(b.bootstrap, "failover", "--link", "ab", "--force")
    produce_batches(b.bootstrap, "orders-dr", 3, "b")
    assert high_watermarks(b.bootstrap, "orders-dr") == [13]

    # C leaves the dead link and links to B (A is gone: each detach is
    # pending on it).
    for kind in ("topic", "group"):
        prefix = "orders-" if kind == "topic" else "app-"
        cli_json(
            c.bootstrap,
            "detach-namespace",
            "--link",
            "ac",
            "--type",
            kind,
            "--local-prefix",
            prefix,
            pending=True,
        )
    cli_json(c.bootstrap, "create-link", "cb", "--remote", b.bootstrap)

    args = ("recover", "--link", "cb", "--namespace", "orders-", "--group-namespace", "app-")
    report = cli_json(c.bootstrap, *args)
    assert report["confirmed"] is False
    assert report["local_cluster_id"] == "C" and report["remote_cluster_id"] == "B"
    assert report["partitions"] == [
        {
            "topic": "orders-dr",
            "remote_topic": "orders-dr",
            "partition": 0,
            "local_log_end_offset": 15,
            "remote_log_end_offset": 13,
            "common_offset": 10,
            "truncate_to": 10,
            "local_records_lost": 5,
            "remote_records_lost": 3,
            "diverged": True,
            "reason": "leader-epoch",
            "related": True,
            "reopened_transactions": [],
        }
    ]
    assert report["groups"] == [
        {
            "group": "app-1",
            "topic": "orders-dr",
            "partition": 0,
            "committed_offset": 13,
            # B never had app-1's offset: once app- follows B, C's offsets are
            # B's, so C's own goes (it would otherwise move back later).
            "new_offset": -1,
            "reason": "leader",
        }
    ]
    assert report["totals"] == {
        "partitions": 1,
        "diverged_partitions": 1,
        "local_records_lost": 5,
        "remote_records_lost": 3,
        "groups_affected": 1,
        "offsets_moved": 1,
    }
    # A report changes nothing.
    assert high_watermarks(c.bootstrap, "orders-dr") == [15]

    done = cli_json(c.bootstrap, *args, "--confirm")
    assert done["confirmed"] is True and done["totals"] == report["totals"]
    assert committed(c.bootstrap, "app-1") == {}
    # The log names each offset moved: the report if the answer is lost.
    assert "(offsets moved: group 'app-1' orders-dr-0 13 -> removed)" in c.stderr_text()
    wait_for(
        "C follows B",
        lambda: (
            high_watermarks(c.bootstrap, "orders-dr") == [13]
            and values(c.bootstrap, "orders-dr") == values(b.bootstrap, "orders-dr")
        ),
    )
    assert values(c.bootstrap, "orders-dr") == [f"a-{i}".encode() for i in range(10)] + [
        f"b-{i}".encode() for i in range(3)
    ]
    link = cli_json(c.bootstrap, "describe-link", "cb")
    assert {(m["type"], m["leader"]) for m in link["mappings"]} == {
        ("topic", "remote"),
        ("group", "remote"),
    }
    # C's provenance tells the story: copied from A, detached, cut, copied from B.
    entries = cli_json(c.bootstrap, "provenance", "orders-dr")["partitions"][0]["provenance"]
    assert [(e["kind"], e["offset"], e["source_cluster_id"]) for e in entries] == [
        ("start", 0, "A"),
        ("detached", 15, ""),
        ("truncated", 10, ""),
        ("start", 10, "B"),
    ]
    assert entries[2]["removed_records"] == 5
    # B's new writes reach C too.
    produce_batches(b.bootstrap, "orders-dr", 2, "b-more")
    wait_for("C has 15 again", lambda: high_watermarks(c.bootstrap, "orders-dr") == [15])


def test_recover__refuses_without_shared_history_and_when_the_remote_is_unreachable(
    daemon_factory: Any,
) -> None:
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    namespaces(a, b)
    cli_json(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    # Two unrelated topics of one name: nothing relates their histories.
    for d in (a, b):
        run_cli("create-topic", "orders-x", "--partitions", "1", bootstrap=d.bootstrap)
        produce_batches(d.bootstrap, "orders-x", 3, d.cluster_id)
    # A (which created the link, so it can dial B) would follow B.
    refused = run_cli("recover", "--link", "ab", "--namespace", "orders-", bootstrap=a.bootstrap)
    assert refused.returncode == 1
    assert "NO_SHARED_HISTORY" in refused.stderr and "topic 'orders-x'" in refused.stderr
    assert "delete" not in refused.stderr  # never proposes deleting a topic that holds data
    assert high_watermarks(a.bootstrap, "orders-x") == [3]  # nothing changed

    # A link without mappings, and no namespace named: nothing to recover.
    refused = run_cli("recover", "--link", "ab", bootstrap=a.bootstrap)
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr

    b.terminate()
    refused = run_cli(
        "recover", "--link", "ab", "--namespace", "orders-", "--confirm", bootstrap=a.bootstrap
    )
    assert refused.returncode == 1 and "LINK_UNREACHABLE" in refused.stderr
    assert high_watermarks(a.bootstrap, "orders-x") == [3]
    ns = cli_json(a.bootstrap, "describe-namespace", "--type", "topic", "--prefix", "orders-")
    assert ns["reserved"] is False  # a refused recovery reserves nothing


def test_reattach_over_the_followers_own_writes__is_refused_naming_them__recover_cuts_them(
    daemon_factory: Any,
) -> None:
    """Issue 29 finding 4: detach, release B's reservation, B's clients write
    5 acknowledged records; re-attaching from A must not cut them silently."""
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    namespaces(a, b)
    # B can call A too (recover runs on B): A's address travels with the link.
    cli_json(
        a.bootstrap, "create-link", "ab", "--remote", b.bootstrap, "--local-bootstrap",
        a.bootstrap,
    )
    attach(a, "ab", "topic", "orders-", "local")
    run_cli("create-topic", "orders-r", "--partitions", "1", bootstrap=a.bootstrap)
    produce_batches(a.bootstrap, "orders-r", 10, "a")
    wait_for("B has 10", lambda: high_watermarks(b.bootstrap, "orders-r") == [10])
    cli_json(
        a.bootstrap, "detach-namespace", "--link", "ab", "--type", "topic",
        "--local-prefix", "orders-",
    )
    # B is still reserved (a follower whose leader detached it) and follows
    # nothing: recovering A from B would make A follow a namespace no client
    # writes anywhere. Refused before any change.
    refused = run_cli(
        "recover", "--link", "ab", "--namespace", "orders-", "--confirm", bootstrap=a.bootstrap
    )
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "RESERVED_NAMESPACE" in refused.stderr and "nothing was changed" in refused.stderr
    assert "set-reserved --reserved false" in refused.stderr, refused.stderr
    ns = cli_json(a.bootstrap, "describe-namespace", "--type", "topic", "--prefix", "orders-")
    assert ns["reserved"] is False and ns["attachments"] == [], ns
    assert high_watermarks(a.bootstrap, "orders-r") == [10]
    cli_json(
        b.bootstrap, "set-reserved", "--type", "topic", "--prefix", "orders-", "--reserved", "false"
    )
    produce_batches(b.bootstrap, "orders-r", 5, "b-own")
    consume_n(b.bootstrap, "app-b", "orders-r", 15)
    assert committed(b.bootstrap, "app-b") == {("orders-r", 0): 15}
    produce_batches(a.bootstrap, "orders-r", 2, "a-late")

    refused = run_cli(
        "attach-namespace", "--link", "ab", "--type", "topic", "--local-prefix", "orders-",
        "--remote-prefix", "orders-", "--leader", "local", bootstrap=a.bootstrap,
    )
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    error = refused.stderr.strip()
    assert error.startswith("error: DIVERGED_LOG: "), error
    assert "orders-r-0 offsets [10, 15) (5 records; cut to 10" in error, error
    assert "app-b orders-r-0 at 15 (cut to 10)" in error, error
    assert "ccr-admin recover --link ab --namespace orders-:orders-" in error, error
    # Nothing changed: B keeps its records and writes on.
    assert values(b.bootstrap, "orders-r")[10:] == [f"b-own-{i}".encode() for i in range(5)]
    produce_batches(b.bootstrap, "orders-r", 1, "b-more")
    assert high_watermarks(b.bootstrap, "orders-r") == [16]

    # The path the refusal points at: recover on B shows the cut, then confirms it.
    args = ("recover", "--link", "ab", "--namespace", "orders-")
    report = cli_json(b.bootstrap, *args)
    assert report["confirmed"] is False
    rows = [(r["topic"], r["truncate_to"], r["local_records_lost"]) for r in report["partitions"]]
    assert rows == [("orders-r", 10, 6)]
    assert high_watermarks(b.bootstrap, "orders-r") == [16]
    confirmed = cli_json(b.bootstrap, *args, "--confirm")
    assert confirmed["confirmed"] is True
    wait_for(
        "B follows A",
        lambda: values(b.bootstrap, "orders-r") == values(a.bootstrap, "orders-r")
        and high_watermarks(b.bootstrap, "orders-r") == [12],
    )
