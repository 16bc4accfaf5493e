"""The MirrorMaker 2 engine between linkd daemons, through their Kafka listeners.

Three daemons (A, B, C) serve the module; each test uses its own topics, groups and
flows, so earlier tests only leave what a real deployment would (heartbeats,
internal topics). The engine runs as `ccr-admin mirror` / `python -m mirror`
processes; waits are bounded polls; record values carry their source offset so
loss, duplicates and skips are counted, never guessed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

# confluent-kafka's admin package lists these in no __all__.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from linkd.core.mirror.checkpoint import remote_consumer_offsets
from linkd.core.mirror.model import Checkpoint
from linkd.core.mirror.model import TopicPartition as CoreTopicPartition
from linkd.core.mirror.wire import decode_checkpoint, decode_heartbeat
from tests.harness import ROOT, Daemon, _env, free_port, run_cli

BASE_TS = 1_700_000_000_000
WAIT_S = 30.0
FAST_GROUP = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}


@dataclass
class Cluster:
    alias: str
    daemon: Daemon | None
    bootstrap: str
    admin: AdminClient

    def create_topic(self, name: str, partitions: int = 1) -> None:
        futures = self.admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1,
                      config={"retention.ms": "-1"})])
        futures[name].result(WAIT_S)

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=WAIT_S).topics)

    def produce(self, topic: str, count: int, partitions: int = 1, prefix: str = "",
                base_ts: int = BASE_TS, start: int = 0) -> None:
        """Records `start` .. `start + count - 1` (their number in value and `seq`)."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for i in range(start, start + count):
            producer.produce(topic, key=f"k{i}".encode(), value=f"{prefix}{i}".encode(),
                             partition=i % partitions, timestamp=base_ts + i,
                             headers=[("seq", str(i).encode())])
        assert producer.flush(WAIT_S) == 0

    def consumer(self, group: str, **conf: Any) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "enable.partition.eof": True, **conf})

    def read_all(self, topic: str, partitions: int = 1, *, read_committed: bool = False,
                 start: int = 0) -> list[Any]:
        """Every record of `topic` from `start` to the end of each partition."""
        c = self.consumer("reader", **{"isolation.level": "read_committed" if read_committed
                                       else "read_uncommitted"})
        try:
            c.assign([TopicPartition(topic, p, start) for p in range(partitions)])
            return _read_to_eof(c, partitions)
        finally:
            c.close()

    def commit(self, group: str, topic: str, offset: int, partition: int = 0) -> None:
        c = self.consumer(group)
        try:
            c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
        finally:
            c.close()

    def committed(self, group: str, topic: str, partition: int = 0) -> int:
        c = self.consumer(group)
        try:
            return int(c.committed([TopicPartition(topic, partition)], timeout=WAIT_S)[0].offset)
        finally:
            c.close()


def _read_to_eof(c: Consumer, partitions: int) -> list[Any]:
    out: list[Any] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    while len(at_end) < partitions:
        assert time.monotonic() < deadline, "did not reach the end of the topic in time"
        for m in c.consume(500, 0.2):
            err = m.error()
            if err is not None:
                if err.code() == err._PARTITION_EOF:
                    at_end.add(int(m.partition() or 0))
                continue
            at_end.discard(int(m.partition() or 0))
            out.append(m)
    return out


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Cluster]]:
    root = Path(tmp_path_factory.mktemp("mirror-linkd"))
    made: dict[str, Cluster] = {}
    daemons: list[Daemon] = []
    try:
        for alias in ("A", "B", "C"):
            port = free_port()
            d = Daemon(alias, root / alias / "data",
                       extra_args=["--kafka-listen", f"127.0.0.1:{port}"])
            daemons.append(d)
            d.start()  # all three start at once; readiness is awaited below
            made[alias] = Cluster(alias, d, f"127.0.0.1:{port}",
                                  AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}))
        for d in daemons:
            d.wait_ready()
        yield made
    finally:
        for d in daemons:
            d.terminate()


def write_config(path: Path, clusters: dict[str, Cluster], body: str) -> Path:
    lines = [f"clusters = {', '.join(clusters)}"]
    lines += [f"{a}.bootstrap.servers = {c.bootstrap}" for a, c in clusters.items()]
    # Single-broker clusters: MM2's default replication factors (2 and 3) cannot be met.
    lines += ["replication.factor = 1", "offset-syncs.topic.replication.factor = 1",
              "checkpoints.topic.replication.factor = 1",
              "heartbeats.topic.replication.factor = 1"]
    path.write_text("\n".join(lines) + "\n" + body)
    return path


def mirror_once(config: Path) -> dict[str, Any]:
    """`ccr-admin mirror --once --json`; returns the final `done` event."""
    done = run_cli("mirror", "--config", str(config), "--once", "--json", timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    final = [e for e in events if e["event"] == "done"]
    assert final, done.stdout
    return dict(final[-1])


def seqs(msgs: list[Any]) -> list[int]:
    return [int(m.value()) for m in msgs]


# -- active/active, heartbeats, no loops -------------------------------------------------------


def test_active_active__remote_topics_without_loops_and_heartbeat_chains(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    a, b, c = clusters["A"], clusters["B"], clusters["C"]
    a.create_topic("aa-t", 2)
    b.create_topic("aa-u", 1)
    a.produce("aa-t", 40, partitions=2)
    b.produce("aa-u", 10)
    config = write_config(tmp_path / "mm2.properties", clusters, "\n".join([
        "topics = aa-.*",
        "A->B.enabled = true",
        "B->A.enabled = true",
        "B->C.enabled = true",
        "no.such.setting = 1",
    ]) + "\n")

    text = run_cli("mirror", "--config", str(config), "--once", timeout_s=120)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "line 13: no.such.setting: unknown property" in text.stdout
    assert "flow A->B: replicates" in text.stdout
    assert "flow A->C: heartbeats only" in text.stdout
    # A second run finds everything in place and must not start a loop.
    mirror_once(config)

    # Records are copied with keys, values, headers and timestamps; offsets are new.
    copied = b.read_all("A.aa-t", partitions=2)
    assert sorted(seqs(copied)) == list(range(40))
    for m in copied:
        i = int(m.value())
        assert m.key() == f"k{i}".encode()
        assert m.headers() == [("seq", str(i).encode())]
        assert m.timestamp()[1] == BASE_TS + i
        assert m.partition() == i % 2
    assert sorted(seqs(a.read_all("B.aa-u"))) == list(range(10))

    topics = {alias: cl.topics() for alias, cl in clusters.items()}
    assert {"A.aa-t", "A.heartbeats"} <= topics["B"]
    assert {"B.aa-u", "B.heartbeats"} <= topics["A"]
    # No cycle: a cluster never holds a topic whose chain names itself.
    for alias, names in topics.items():
        loops = sorted(t for t in names if f"{alias}." in t and not t.endswith(".internal")
                       and alias in t.split(".")[:-1])
        assert loops == [], f"cluster {alias} holds looped topics {loops}"
    # Heartbeats chains: A's beats reach C through B.
    assert {"B.heartbeats", "B.A.heartbeats"} <= topics["C"]
    beats = [decode_heartbeat(m.key(), m.value()) for m in c.read_all("B.A.heartbeats")]
    assert beats and {(h.source_cluster_alias, h.target_cluster_alias) for h in beats} <= {
        ("B", "A"), ("C", "A")}


# -- checkpoints and failover (invariant 8) -----------------------------------------------------


def _checkpoints(cluster: Cluster, source: str) -> list[Checkpoint]:
    return [decode_checkpoint(m.key(), m.value())
            for m in cluster.read_all(f"{source}.checkpoints.internal")]


def test_checkpoints__failover_with_translated_offsets_skips_no_record(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    a, b = clusters["A"], clusters["B"]
    a.create_topic("cp-t")
    a.produce("cp-t", 200)
    a.commit("cp-g", "cp-t", 120)  # the group has consumed 120 records on A
    config = write_config(tmp_path / "mm2.properties", clusters, "\n".join([
        "topics = cp-.*",
        "groups = cp-.*",
        "A->B.enabled = true",
        "A->B.sync.group.offsets.enabled = true",
    ]) + "\n")
    done = mirror_once(config)
    assert done["stats"]["A->B"]["checkpoints_emitted"] >= 1

    # The checkpoint names the remote partition and a translation at or before 120.
    cps = remote_consumer_offsets(_checkpoints(b, "A"), "cp-g")
    translated = cps[CoreTopicPartition("A.cp-t", 0)].offset
    assert 0 <= translated <= 120
    # KIP-545 wrote it as the group's offset on B (the group is unknown there).
    assert b.committed("cp-g", "A.cp-t") == translated

    # Failover: the group resumes on B from its synced offset.
    consumer = b.consumer("cp-g")
    try:
        consumer.subscribe(["A.cp-t"])
        resumed = seqs(_read_to_eof(consumer, 1))
    finally:
        consumer.close()
    assert set(range(120, 200)) <= set(resumed), "a record was skipped after failover"
    duplicates = sum(1 for s in resumed if s < 120)
    # Re-delivered records are counted: at most offset.lag.max (100) + 1 with MM2's rule.
    assert duplicates == 120 - translated
    assert duplicates <= 101


# -- KIP-545: never rewind, skip active groups ---------------------------------------------------


def test_group_offset_sync__never_rewinds_and_skips_active_groups(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    a, b = clusters["A"], clusters["B"]
    a.create_topic("np-t")
    a.produce("np-t", 50)
    a.commit("np-g", "np-t", 10)
    a.commit("np-active", "np-t", 30)
    config = write_config(tmp_path / "mm2.properties", clusters, "\n".join([
        "topics = np-.*",
        "groups = np-.*",
        "offset.lag.max = 0",  # every acknowledged record asks for a sync
        "A->B.enabled = true",
        "A->B.sync.group.offsets.enabled = true",
    ]) + "\n")
    # The live member of np-active on B must not be overridden.
    b.create_topic("A.np-t")
    member = b.consumer("np-active", **FAST_GROUP)
    try:
        member.subscribe(["A.np-t"])
        deadline = time.monotonic() + WAIT_S
        while not member.assignment():
            assert time.monotonic() < deadline, "the member was not assigned in time"
            member.poll(0.1)
        first = mirror_once(config)
        translated = remote_consumer_offsets(_checkpoints(b, "A"), "np-g")
        synced = translated[CoreTopicPartition("A.np-t", 0)].offset
        # A translation never passes the source position (how far below it stays depends
        # on which syncs the 64-slot store kept).
        assert 0 <= synced <= 10
        assert b.committed("np-g", "A.np-t") == synced
        assert first["stats"]["A->B"]["skipped_active_groups"] >= 1
        assert b.committed("np-active", "A.np-t") < 0
    finally:
        member.close()

    # On B the group moves ahead of A; A's newer (but smaller) position must not rewind it.
    b.commit("np-g", "A.np-t", 45)
    a.commit("np-g", "np-t", 20)
    second = mirror_once(config)
    assert b.committed("np-g", "A.np-t") == 45
    assert second["stats"]["A->B"]["refused_rewinds"] >= 1
    # Forward moves still go through: the end of the topic translates exactly.
    a.commit("np-g", "np-t", 50)
    mirror_once(config)
    assert b.committed("np-g", "A.np-t") == 50


# -- exactly-once: a killed mirror restarts without loss or duplicates --------------------------


@pytest.mark.parametrize("boundary", ["poll", "interval"])
def test_exactly_once__kill_mid_stream_then_restart__no_loss_no_duplicates(
    clusters: dict[str, Cluster], tmp_path: Path, boundary: str
) -> None:
    a, c = clusters["A"], clusters["C"]
    total, partitions, step = 3000, 3, 50
    topic = f"eos-{boundary}"
    a.create_topic(topic, partitions)
    # A fifth first; the rest arrives while the mirror runs, so that the kill lands
    # mid-stream however fast the copy is.
    produced = total // 5
    a.produce(topic, produced, partitions=partitions)
    config = write_config(tmp_path / "mm2.properties", {"A": a, "C": c}, "\n".join([
        f"topics = {topic}",
        "A->C.enabled = true",
        "C->A.emit.heartbeats.enabled = false",
        "A->C.emit.checkpoints.enabled = false",
        "C.exactly.once.source.support = enabled",
        # Small transactions, so that the kill lands between and inside them
        # (interval: several polls of 20 per transaction).
        "A.consumer.max.poll.records = 20",
        f"A->C.transaction.boundary = {boundary}",
        "A->C.transaction.boundary.interval.ms = 30",
    ]) + "\n")
    log = (tmp_path / "mirror.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "mirror", "--config", str(config)],
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT), env=_env())
    try:
        reader = c.consumer("eos-watch", **{"isolation.level": "read_committed"})
        deadline = time.monotonic() + 60
        seen = 0
        while seen < total // 10:
            assert proc.poll() is None, (tmp_path / "mirror.log").read_text()
            assert time.monotonic() < deadline, "the mirror copied too little in time"
            if f"A.{topic}" in c.topics() and not reader.assignment():
                reader.assign([TopicPartition(f"A.{topic}", p, 0) for p in range(partitions)])
            if produced < total:
                a.produce(topic, step, partitions=partitions, start=produced)
                produced += step
            if reader.assignment():
                seen += sum(1 for m in reader.consume(500, 0.2) if m.error() is None)
            else:
                try:
                    proc.wait(0.2)  # the pause; returns early if the mirror died
                except subprocess.TimeoutExpired:
                    pass
        reader.close()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)
        log.close()
    partial = c.read_all(f"A.{topic}", partitions, read_committed=True)
    assert 0 < len(partial) < total, "the kill did not land mid-stream"
    a.produce(topic, total - produced, partitions=partitions, start=produced)

    mirror_once(config)
    final = c.read_all(f"A.{topic}", partitions, read_committed=True)
    counts = Counter(seqs(final))
    lost = sorted(set(range(total)) - set(counts))
    duplicated = sorted(s for s, n in counts.items() if n > 1)
    assert lost == [] and duplicated == [], f"lost {len(lost)}, duplicated {len(duplicated)}"
    # Each partition holds its records in source order.
    by_partition: dict[int, list[int]] = {}
    for m in final:
        by_partition.setdefault(m.partition(), []).append(int(m.value()))
    for p, values in by_partition.items():
        assert values == sorted(values) and all(v % partitions == p for v in values)


# -- continuous mode: metrics lines, clean stop on SIGTERM --------------------------------------


def test_continuous_mode__prints_mm2_metrics_and_stops_on_sigterm(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    a, b = clusters["A"], clusters["B"]
    a.create_topic("md-t")
    a.produce("md-t", 25)
    config = write_config(tmp_path / "mm2.properties", {"A": a, "B": b}, "\n".join([
        "topics = md-.*",
        "A->B.enabled = true",
    ]) + "\n")
    out_path = tmp_path / "mirror.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mirror", "--config", str(config),
             "--metrics-interval-s", "0.5", "--duration-s", "120"],
            stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT), env=_env())
        try:
            deadline = time.monotonic() + 60
            while "record-count=25" not in out_path.read_text():
                assert proc.poll() is None, out_path.read_text()
                assert time.monotonic() < deadline, out_path.read_text()
                try:
                    proc.wait(0.2)  # the pause; returns early if the mirror died
                except subprocess.TimeoutExpired:
                    pass
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
    text = out_path.read_text()
    assert "metrics A->B MirrorSourceConnector target=B topic=A.md-t partition=0" in text
    for name in ("byte-rate=", "record-age-ms-avg=", "replication-latency-ms-max="):
        assert name in text
    assert "done A->B:" in text
    assert sorted(seqs(b.read_all("A.md-t"))) == list(range(25))


def test_the_readme_example_file__runs_as_shipped_with_its_typo_reported(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    """examples/mm2.properties, with only its bootstrap addresses pointed at
    this test's daemons: it mirrors orders topics both ways and reports the
    misspelt key with its line."""
    shipped = (ROOT / "examples" / "mm2.properties").read_text()
    text = shipped.replace("127.0.0.1:19892", clusters["A"].bootstrap).replace(
        "127.0.0.1:19893", clusters["B"].bootstrap
    )
    assert text != shipped
    config = tmp_path / "mm2.properties"
    config.write_text(text)
    clusters["A"].create_topic("orders-readme", 2)
    clusters["A"].produce("orders-readme", 20, partitions=2)
    result = run_cli("mirror", "--config", str(config), "--once", timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    typo_line = next(i for i, line in enumerate(shipped.splitlines(), 1) if "topcis" in line)
    assert f"line {typo_line}: A->B.topcis" in result.stdout + result.stderr
    assert "A.orders-readme" in clusters["B"].topics()
    assert len(clusters["B"].read_all("A.orders-readme", 2)) == 20


def test_internal_topics_on_linkd_are_compacted_and_nothing_is_said_about_compaction(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    """linkd compacts: MM2's internal topics are made with cleanup.policy=compact
    and no notice about compaction is printed (a cluster that refuses it is
    tested in test_mirror_units.py). C is the source of two flows here, so two
    of its offset-syncs topics are made in one run."""
    c = clusters["C"]
    c.create_topic("cn-t", 1)
    c.produce("cn-t", 5)
    config = write_config(tmp_path / "mm2.properties", clusters, "\n".join([
        "topics = cn-.*",
        "C->A.enabled = true",
        "C->B.enabled = true",
    ]) + "\n")
    result = run_cli("mirror", "--config", str(config), "--once", timeout_s=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "create topic" not in out and "INVALID_CONFIG" not in out, out
    assert "does not support compacted topics" not in out, out
    assert {"mm2-offset-syncs.A.internal", "mm2-offset-syncs.B.internal"} <= c.topics()
    described = run_cli("describe-topic", "mm2-offset-syncs.A.internal", "--json",
                        bootstrap=c.daemon.bootstrap if c.daemon else "")
    assert json.loads(described.stdout)["configs"]["cleanup.policy"] == "compact"
    assert len(clusters["A"].read_all("C.cn-t")) == 5


# -- ACL sync ------------------------------------------------------------------------------------


def _acls(cluster: Cluster, topic: str) -> set[tuple[str, str, str, str]]:
    """(principal, operation, permission, pattern) of every ACL on `topic`."""
    # None principal and host: any (the stubs type them as str).
    flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY,
                           None, None,  # type: ignore[arg-type]
                           AclOperation.ANY, AclPermissionType.ANY)
    found = cluster.admin.describe_acls(flt, request_timeout=WAIT_S).result(WAIT_S)
    return {(b.principal, b.operation.name, b.permission_type.name, b.resource_pattern_type.name)
            for b in found}


def test_acl_sync__literal_topic_acls_renamed_write_dropped_all_narrowed_add_only(
    clusters: dict[str, Cluster], tmp_path: Path
) -> None:
    a, b = clusters["A"], clusters["B"]
    a.create_topic("acl-t")

    def binding(principal: str, op: AclOperation, perm: AclPermissionType,
                pattern: ResourcePatternType = ResourcePatternType.LITERAL,
                name: str = "acl-t") -> AclBinding:
        return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, perm)

    alice = binding("User:alice", AclOperation.READ, AclPermissionType.ALLOW)
    given = [
        alice,
        binding("User:bob", AclOperation.WRITE, AclPermissionType.ALLOW),  # stays behind
        binding("User:carol", AclOperation.ALL, AclPermissionType.ALLOW),  # becomes READ
        binding("User:dan", AclOperation.WRITE, AclPermissionType.DENY),  # a DENY is kept
        binding("User:erin", AclOperation.READ, AclPermissionType.ALLOW,
                ResourcePatternType.PREFIXED, "acl-"),  # only literal ACLs are synced
    ]
    for future in a.admin.create_acls(given, request_timeout=WAIT_S).values():
        future.result(WAIT_S)
    config = write_config(tmp_path / "mm2.properties", clusters, "\n".join([
        "topics = acl-.*",
        "A->B.enabled = true",
        "sync.topic.acls.enabled = true",
    ]) + "\n")
    done = mirror_once(config)
    assert done["stats"]["A->B"]["acls_created"] == 3
    expected = {
        ("User:alice", "READ", "ALLOW", "LITERAL"),
        ("User:carol", "READ", "ALLOW", "LITERAL"),
        ("User:dan", "WRITE", "DENY", "LITERAL"),
    }
    assert _acls(b, "A.acl-t") == expected
    assert _acls(b, "acl-t") == set()  # nothing under the source's own name

    # Add-only: an ACL deleted on the source stays on the target.
    gone = AclBindingFilter(ResourceType.TOPIC, "acl-t", ResourcePatternType.LITERAL,
                            "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for future in a.admin.delete_acls([gone], request_timeout=WAIT_S).values():
        future.result(WAIT_S)
    assert ("User:alice", "READ", "ALLOW", "LITERAL") not in _acls(a, "acl-t")
    done = mirror_once(config)
    assert done["stats"]["A->B"]["acls_created"] == 0
    assert _acls(b, "A.acl-t") == expected
