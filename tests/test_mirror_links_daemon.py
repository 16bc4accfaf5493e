"""Mirror links hosted by the daemon of their target cluster.

Core: the table validates, refuses, and its records round-trip through
`apply_record` and `snapshot`/`restore`. Daemons: A and B with Kafka listeners;
a mirror link created on B from an mm2.properties text A->B copies A's records
to `A.<topic>` on B, is listed with its engine's counters, survives `kill -9` of
B's daemon and keeps copying without loss, and stops copying once deleted.
Refused texts store nothing. Waits are bounded polls; record values carry their
sequence number, so loss is counted, never guessed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from admin.admin_client import AdminClient, MirrorLinkInfo
from admin.errors import CcrError
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.journal import decode, encode
from linkd.core.mirror_links import MAX_TOMBSTONES, MirrorLinkTable
from tests.harness import Daemon, free_port, run_cli

WAIT_S = 60.0
# After a delete, how long records produced on A are given to (wrongly) arrive
# on B. The delete answers stopped=True only once the engine's thread has
# ended, so nothing can arrive by construction; the wait checks it. A running
# engine copies a new record within one step (a 50 ms source poll, then a
# produce acknowledged by a local daemon), far below a second, so 3 s would
# catch a still-running engine while keeping the test short.
ABSENCE_WAIT_S = 3.0


def _props(a: str, b: str, *, topics: str = "orders.*", extra: str = "") -> str:
    return f"""\
clusters = A, B
A.bootstrap.servers = {a}
B.bootstrap.servers = {b}
A->B.enabled = true
topics = {topics}
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
refresh.topics.interval.seconds = 1
sync.topic.acls.enabled = false
{extra}"""


# -- core ------------------------------------------------------------------------------


def test_table_create_validates_and_hosts_only_flows_into_the_alias() -> None:
    table = MirrorLinkTable()
    text = _props("a:1", "b:1", extra="B->A.enabled = true\nA->B.topcis = x\n")
    hosted, records = table.create("B", "mm2", "B", text, 1000)
    assert [f.name for f in hosted.flows] == ["A->B"]
    assert hosted.not_hosted == ("B->A",)
    assert any("topcis" in w for w in hosted.warnings)
    assert [encode(r) for r in records] == [
        {"type": "mirror_link_create", "name": "mm2", "alias": "B", "properties": text,
         "created_ms": 1000}
    ]
    assert table.get("mm2").created_ms == 1000


@pytest.mark.parametrize(
    ("name", "alias", "text", "code", "words"),
    [
        ("m", "B", "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
         "A->B.enabled = maybe\n", ErrorCode.INVALID_LINK_CONFIG, ["A->B.enabled", "maybe"]),
        ("m", "C", _props("a:1", "b:1"), ErrorCode.INVALID_LINK_CONFIG,
         ["'C'", "not one of the file's clusters", "A, B"]),
        ("m", "A", _props("a:1", "b:1"), ErrorCode.INVALID_LINK_CONFIG,
         ["no enabled flow", "targets 'A'", "A->B"]),
        ("m", "B", "   \n", ErrorCode.INVALID_LINK_CONFIG, ["empty"]),
        ("bad name!", "B", _props("a:1", "b:1"), ErrorCode.INVALID_REQUEST, ["bad name!"]),
    ],
)
def test_table_refuses_and_stores_nothing(
    name: str, alias: str, text: str, code: ErrorCode, words: list[str]
) -> None:
    table = MirrorLinkTable()
    with pytest.raises(ClusterError) as err:
        table.create("B", name, alias, text, 1)
    assert err.value.code == code
    for w in words:
        assert w in err.value.message
    assert table.links == {}


def test_table_refuses_a_taken_name_and_unknown_deletes() -> None:
    table = MirrorLinkTable()
    table.create("B", "m", "B", _props("a:1", "b:1"), 1)
    with pytest.raises(ClusterError) as err:
        table.create("B", "m", "B", _props("a:1", "b:1"), 2)
    assert err.value.code == ErrorCode.LINK_EXISTS
    with pytest.raises(ClusterError) as err:
        table.delete("nope", 3)
    assert err.value.code == ErrorCode.UNKNOWN_LINK


def test_records_round_trip_through_journal_and_snapshot() -> None:
    live = ClusterState("B")
    journal: list[dict[str, Any]] = []
    for i, name in enumerate(["m1", "m2", "m3"]):
        journal += live.mirror_links.create("B", name, "B", _props("a:1", f"b:{i}"), 10 + i)[1]
    journal += live.mirror_links.delete("m2", 50)
    # name reuse after a delete replaces the tombstone
    journal += live.mirror_links.create("B", "m2", "B", _props("a:1", "b:9"), 60)[1]
    journal += live.mirror_links.delete("m3", 70)

    replayed = ClusterState("B")
    stored = json.loads(json.dumps([encode(r) for r in journal]))  # what the journal file holds
    for record in stored:
        replayed.apply_record(decode(record))
    restored = ClusterState("B")
    restored.restore(json.loads(json.dumps(live.snapshot())))
    for state in (replayed, restored):
        assert state.mirror_links.links == live.mirror_links.links
        assert state.mirror_links.names() == ["m1", "m2"]
        assert state.mirror_links.get("m2").created_ms == 60
        assert state.mirror_links.links["m3"].deleted_ms == 70
    # a snapshot written before mirror links existed restores an empty table
    old = live.snapshot()
    del old["mirror_links"]
    empty = ClusterState("B")
    empty.restore(old)
    assert empty.mirror_links.links == {}


def test_tombstones_are_bounded() -> None:
    table = MirrorLinkTable()
    for i in range(MAX_TOMBSTONES + 5):
        table.create("B", f"m{i}", "B", _props("a:1", "b:1"), i)
        table.delete(f"m{i}", 1000 + i)
    assert len(table.links) == MAX_TOMBSTONES
    assert "m0" not in table.links and f"m{MAX_TOMBSTONES + 4}" in table.links


# -- daemons ---------------------------------------------------------------------------


def _wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)  # the poll interval of a bounded wait
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


class Pair:
    def __init__(self, root: Path) -> None:
        self.kafka = {alias: f"127.0.0.1:{free_port()}" for alias in ("A", "B")}
        self.daemons = {
            alias: Daemon(alias, root / alias / "data",
                          extra_args=["--kafka-listen", self.kafka[alias]])
            for alias in ("A", "B")
        }

    def admin(self, alias: str) -> AdminClient:
        return AdminClient(self.daemons[alias].bootstrap)

    def produce(self, topic: str, start: int, count: int) -> None:
        producer = Producer({"bootstrap.servers": self.kafka["A"], "linger.ms": 5})
        for i in range(start, start + count):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0)
        assert producer.flush(WAIT_S) == 0

    def read_b(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """Every record of `topic` on B, (key, value), or [] while it does not exist."""
        c = Consumer({"bootstrap.servers": self.kafka["B"], "group.id": "reader",
                      "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            meta = c.list_topics(timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                return []
            c.assign([TopicPartition(topic, 0, 0)])
            out: list[tuple[bytes | None, bytes | None]] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                msgs = c.consume(500, 0.2)
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == err._PARTITION_EOF:
                            return out
                        continue
                    out.append((m.key(), m.value()))
            return out
        finally:
            c.close()

    def values_on_b(self, topic: str) -> list[str]:
        return [(v or b"").decode() for _k, v in self.read_b(topic)]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    p = Pair(tmp_path)
    try:
        for d in p.daemons.values():
            d.start()
        for d in p.daemons.values():
            d.wait_ready()
        yield p
    finally:
        for d in p.daemons.values():
            try:
                d.terminate()
            except Exception:
                d.kill9()


def _link(admin: AdminClient, name: str) -> MirrorLinkInfo | None:
    return next((x for x in admin.list_mirror_links() if x.name == name), None)


def _copied(admin: AdminClient, name: str) -> int:
    link = _link(admin, name)
    if link is None:
        return 0
    return sum(int(f["stats"].get("records_copied", 0)) for f in link.flows)


def test_mirror_link_copies_survives_kill9_and_stops_on_delete(pair: Pair) -> None:
    a, b = pair.admin("A"), pair.admin("B")
    a.create_topic("orders", partitions=1)
    pair.produce("orders", 0, 50)

    props = _props(pair.kafka["A"], pair.kafka["B"])
    created = b.create_mirror_link("ab", props, alias="B")
    assert created.alias == "B" and created.created_at_ms > 0
    assert [f["flow"] for f in created.flows] == ["A->B"] and created.flows[0]["replicates"]

    # records produced on A appear on B's A.orders, keys and values intact
    _wait_for("50 records on B", lambda: len(pair.read_b("A.orders")) >= 50)
    records = pair.read_b("A.orders")
    assert records[:50] == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]

    # listed with the engine's counters
    link = _wait_for("copy counters", lambda: _copied(b, "ab") >= 50 and _link(b, "ab"))
    assert link.running and link.deleted_at_ms == 0
    assert link.flows[0]["stats"]["records_copied"] >= 50

    # kill -9 of B's daemon while A keeps producing; after the restart the
    # link is still there and copies on: nothing is lost (duplicates allowed:
    # at-least-once resumes from the source group's last commit)
    pair.produce("orders", 50, 50)
    pair.daemons["B"].restart(kill=True)
    b = pair.admin("B")
    after = _link(b, "ab")
    assert after is not None and after.created_at_ms == created.created_at_ms
    assert after.properties == props
    pair.produce("orders", 100, 50)
    want = {f"v{i}" for i in range(150)}
    _wait_for("all 150 records on B after kill -9",
              lambda: want <= set(pair.values_on_b("A.orders")))
    _wait_for("the restarted engine running", lambda: (_link(b, "ab") or after).running)

    # delete: the engine stops; records produced afterwards do not arrive
    assert b.delete_mirror_link("ab") is True
    assert _link(b, "ab") is None
    gone = [x for x in b.list_mirror_links(include_deleted=True) if x.name == "ab"]
    assert gone and gone[0].deleted_at_ms > 0
    before = len(pair.read_b("A.orders"))
    pair.produce("orders", 150, 20)
    deadline = time.monotonic() + ABSENCE_WAIT_S
    while time.monotonic() < deadline:
        assert len(pair.read_b("A.orders")) == before, "records arrived after the delete"
        time.sleep(0.2)  # the poll interval of the bounded absence check

    # and a deleted link stays deleted across a restart
    pair.daemons["B"].restart(kill=True)
    assert _link(pair.admin("B"), "ab") is None


def test_refused_mirror_links_store_nothing(pair: Pair) -> None:
    b = pair.admin("B")
    props = _props(pair.kafka["A"], pair.kafka["B"])
    cases = [
        (props.replace("A->B.enabled = true", "A->B.enabled = sometimes"), "B",
         ["INVALID_LINK_CONFIG", "A->B.enabled", "sometimes"]),
        (props, "A", ["INVALID_LINK_CONFIG", "no enabled flow", "targets 'A'"]),
        (props, "Z", ["INVALID_LINK_CONFIG", "'Z'", "not one of the file's clusters"]),
    ]
    for text, alias, words in cases:
        with pytest.raises(CcrError) as err:
            b.create_mirror_link("bad", text, alias=alias)
        message = f"{err.value.code}: {err.value.message}"
        for w in words:
            assert w in message, message
    # the daemon's cluster id is the default alias: A's daemon hosts no flow into B
    with pytest.raises(CcrError) as err:
        pair.admin("A").create_mirror_link("bad", props)
    assert "targets 'A'" in err.value.message
    assert pair.admin("A").list_mirror_links(include_deleted=True) == []
    assert b.list_mirror_links(include_deleted=True) == []
    pair.daemons["B"].restart(kill=True)
    assert pair.admin("B").list_mirror_links(include_deleted=True) == []


def test_cli_create_list_delete(pair: Pair, tmp_path: Path) -> None:
    boot = pair.daemons["B"].bootstrap
    cfg = tmp_path / "mm2.properties"
    cfg.write_text(_props(pair.kafka["A"], pair.kafka["B"], extra="B->A.enabled = true\n"))

    done = run_cli("mirror", "--config", str(cfg), "--create-link", "--as", "B", bootstrap=boot)
    assert done.returncode == 0, done.stderr
    assert "created mirror link mm2" in done.stdout
    assert "hosted here: A->B" in done.stdout and "not hosted here: B->A" in done.stdout

    done = run_cli("create-mirror-link", "--config", str(cfg), "--name", "mm2", bootstrap=boot)
    assert done.returncode == 1 and "LINK_EXISTS" in done.stderr

    done = run_cli("list-mirror-links", "--json", bootstrap=boot)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [x["name"] for x in listed] == ["mm2"]
    assert listed[0]["alias"] == "B" and listed[0]["not_hosted"] == ["B->A"]

    done = run_cli("list-mirror-links", bootstrap=boot)
    assert done.returncode == 0 and "mm2" in done.stdout and "A->B" in done.stdout

    # usage errors: exit 2, naming what was wrong
    done = run_cli("create-mirror-link", "--config", str(tmp_path / "nope"), bootstrap=boot)
    assert done.returncode == 2 and "cannot read --config" in done.stderr
    done = run_cli("mirror", "--config", str(cfg), "--as", "B", bootstrap=boot)
    assert done.returncode == 2 and "--create-link" in done.stderr

    done = run_cli("delete-mirror-link", "mm2", bootstrap=boot)
    assert done.returncode == 0 and "deleted mirror link mm2" in done.stdout
    done = run_cli("delete-mirror-link", "mm2", bootstrap=boot)
    assert done.returncode == 1 and "UNKNOWN_LINK" in done.stderr
