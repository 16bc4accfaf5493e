"""The mirror engine's pure pieces: MM2's record formats, client configurations, the
command's configuration handling (no cluster needed)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linkd.core.mirror import Checkpoint, Heartbeat, OffsetSync, TopicPartition
from linkd.core.mirror.config import parse_mm2_properties
from linkd.core.mirror.exactly_once import SourceOffset
from linkd.core.mirror.wire import (
    MirrorWireError,
    decode_checkpoint,
    decode_heartbeat,
    decode_offset_sync,
    decode_source_offset,
    encode_checkpoint,
    encode_heartbeat,
    encode_offset_sync,
    encode_source_offset,
)
from mirror.admin_ops import ClusterAdmin, CompactionRefused, MirrorClientError
from mirror.cli import main as mirror_main
from mirror.clients import ClientConfigs
from mirror.internal_topics import CompactionNotices, create_internal_topic
from tests.harness import run_cli

names = st.text(min_size=0, max_size=40)
offsets = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
partitions = st.integers(min_value=0, max_value=(1 << 31) - 1)


def test_offset_sync_bytes_are_kafkas_struct_layout() -> None:
    key, value = encode_offset_sync(OffsetSync(TopicPartition("t", 3), 10, 7))
    assert key == b"\x00\x01t" + struct.pack(">i", 3)
    assert value == struct.pack(">qq", 10, 7)


def test_checkpoint_and_heartbeat_values_carry_version_zero() -> None:
    _, value = encode_checkpoint(Checkpoint("g", TopicPartition("A.t", 0), 5, 4, "m"))
    assert value == struct.pack(">hqq", 0, 5, 4) + b"\x00\x01m"
    key, value = encode_heartbeat(Heartbeat("A", "B", 99))
    assert key == b"\x00\x01A\x00\x01B"
    assert value == struct.pack(">hq", 0, 99)


@given(names, partitions, offsets, offsets)
def test_offset_sync_round_trips(topic: str, p: int, u: int, d: int) -> None:
    sync = OffsetSync(TopicPartition(topic, p), u, d)
    assert decode_offset_sync(*encode_offset_sync(sync)) == sync


@given(names, names, partitions, offsets, offsets, names)
def test_checkpoint_round_trips(g: str, t: str, p: int, u: int, d: int, meta: str) -> None:
    cp = Checkpoint(g, TopicPartition(t, p), u, d, meta)
    assert decode_checkpoint(*encode_checkpoint(cp)) == cp


@given(names, names, offsets)
def test_heartbeat_round_trips(s: str, t: str, ts: int) -> None:
    hb = Heartbeat(s, t, ts)
    assert decode_heartbeat(*encode_heartbeat(hb)) == hb


def test_source_offsets_use_connects_json() -> None:
    key, value = encode_source_offset(SourceOffset("A", "t", 2, 41))
    assert key == b'["MirrorSourceConnector",{"cluster":"A","partition":2,"topic":"t"}]'
    assert value == b'{"offset":41}'
    assert decode_source_offset(key, value) == SourceOffset("A", "t", 2, 41)
    assert decode_source_offset(key, None) is None  # tombstone
    assert decode_source_offset(key, value, connector="other") is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00\x05ab", struct.pack(">qq", 1, 2)),  # string longer than the key
        (b"\x00\x01t" + struct.pack(">i", 0), struct.pack(">q", 1)),  # short value
        (b"\x00\x01t" + struct.pack(">i", 0) + b"x", struct.pack(">qq", 1, 2)),  # trailing
        (None, struct.pack(">qq", 1, 2)),
    ],
)
def test_malformed_offset_syncs_are_rejected(key: bytes | None, value: bytes) -> None:
    with pytest.raises(MirrorWireError):
        decode_offset_sync(key, value)


def test_unknown_checkpoint_version_is_rejected() -> None:
    key, value = encode_checkpoint(Checkpoint("g", TopicPartition("t", 0), 1, 1))
    with pytest.raises(MirrorWireError, match="version"):
        decode_checkpoint(key, b"\x00\x01" + value[2:])


def test_client_configs_follow_cluster_precedence_and_kinds() -> None:
    cfg = parse_mm2_properties(
        "clusters = A, B\n"
        "A.bootstrap.servers = a:1\n"
        "B.bootstrap.servers = b:1, b:2\n"
        "A.consumer.max.poll.records = 20\n"
        "A.consumer.fetch.min.bytes = 7\n"
        "A.producer.linger.ms = 50\n"
        "A.producer.acks = 1\n"
        "A->B.enabled = true\n"
    )
    a = ClientConfigs(cfg.cluster("A"))
    assert a.max_poll_records == 20
    consumer = a.consumer("g", read_committed=True)
    assert consumer["bootstrap.servers"] == "a:1"
    assert consumer["fetch.min.bytes"] == "7"
    assert "max.poll.records" not in consumer
    assert consumer["isolation.level"] == "read_committed"
    producer = a.producer("txn")
    assert producer["linger.ms"] == "50"
    # The engine's guarantees rest on acks=all: a user setting cannot weaken it.
    assert producer["acks"] == "all"
    assert producer["transactional.id"] == "txn"
    b = ClientConfigs(cfg.cluster("B"))
    assert b.bootstrap == "b:1,b:2"
    assert "fetch.min.bytes" not in b.consumer("g")
    # Tuning defaults apply unless set: a full prefetch queue does not stall fetches
    # for librdkafka's 1 s.
    assert b.consumer("g")["fetch.queue.backoff.ms"] == 10
    assert b.producer()["linger.ms"] == 5
    # No client waits librdkafka's 50 ms before its first connection to a broker it
    # learned from the bootstrap's metadata.
    for conf in (b.consumer("g"), b.producer(), b.admin()):
        assert conf["reconnect.backoff.ms"] == 10
    c = ClientConfigs(parse_mm2_properties(
        "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
        "A.consumer.fetch.queue.backoff.ms = 500\n"
    ).cluster("A"))
    assert c.consumer("g")["fetch.queue.backoff.ms"] == "500"


def test_invalid_config_exits_2_naming_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "A->B.enabled = maybe\n")
    assert mirror_main(["--config", str(path), "--once"]) == 2


def test_ccr_admin_mirror_reports_a_bad_file_without_connecting(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n"
                    "offset.lag.max = -3\n")
    done = run_cli("mirror", "--config", str(path), "--once")
    assert done.returncode == 2
    assert "offset.lag.max" in done.stderr and "line 4" in done.stderr


def test_ccr_admin_imports_no_kafka_client_until_mirror_runs() -> None:
    import subprocess
    import sys

    code = (
        "import sys, admin.cli\n"
        "admin.cli.build_parser()\n"
        "print('confluent_kafka' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, cwd=str(Path(__file__).resolve().parent.parent))
    assert done.stdout.strip() == "False"


def test_client_configs_pass_cluster_security_through(tmp_path: Path) -> None:
    """A.security.protocol, A.sasl.* and A.ssl.* (over top-level keys) reach every
    client of A, as MM2 passes them; librdkafka accepts every name."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient as KafkaAdmin

    from tests.certs import make_certs

    certs = make_certs(tmp_path / "certs")
    cfg = parse_mm2_properties(
        "clusters = A, B\n"
        "A.bootstrap.servers = 127.0.0.1:1\n"
        "B.bootstrap.servers = 127.0.0.1:2\n"
        f"ssl.ca.location = {certs.ca}\n"
        "A.security.protocol = SASL_SSL\n"
        "A.sasl.mechanism = SCRAM-SHA-256\n"
        "A.sasl.username = mirror\n"
        "A.sasl.password = mirror-secret\n"
        "B.security.protocol = SSL\n"
        f"B.ssl.certificate.location = {certs.client_cert}\n"
        f"B.ssl.key.location = {certs.client_key}\n"
        "A->B.enabled = true\n"
    )
    a, b = ClientConfigs(cfg.cluster("A")), ClientConfigs(cfg.cluster("B"))
    for conf in (a.admin(), a.producer(), a.consumer("g")):
        assert conf["security.protocol"] == "SASL_SSL"
        assert conf["sasl.mechanism"] == "SCRAM-SHA-256"
        assert (conf["sasl.username"], conf["sasl.password"]) == ("mirror", "mirror-secret")
        assert conf["ssl.ca.location"] == str(certs.ca)
    for conf in (b.admin(), b.producer("t"), b.consumer("g")):
        assert conf["security.protocol"] == "SSL"
        assert conf["ssl.ca.location"] == str(certs.ca)
        assert conf["ssl.certificate.location"] == str(certs.client_cert)
        assert not any(k.startswith("sasl.") for k in conf)
    # librdkafka refuses unknown or malformed settings at construction.
    KafkaAdmin(a.admin())
    KafkaProducer(a.producer()).flush(0)
    KafkaConsumer(b.consumer("g")).close()


def test_client_configs_turn_a_jaas_config_into_librdkafka_keys() -> None:
    cfg = parse_mm2_properties(
        "clusters = A, B\n"
        "A.bootstrap.servers = a:1\n"
        "B.bootstrap.servers = b:1\n"
        "A.security.protocol = SASL_PLAINTEXT\n"
        "A.sasl.mechanism = PLAIN\n"
        "A.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="mirror" password="pa ss=word";\n'
        "A->B.enabled = true\n"
    )
    conf = ClientConfigs(cfg.cluster("A")).producer()
    assert "sasl.jaas.config" not in conf
    assert (conf["sasl.username"], conf["sasl.password"]) == ("mirror", "pa ss=word")


class _RefusingAdmin(ClusterAdmin):
    """A cluster that refuses MM2's replication factor 3 and compaction, as a
    single linkd does; records every create_topic call."""

    def __init__(self) -> None:
        super().__init__("B", {"bootstrap.servers": "127.0.0.1:1"}, 1000)
        self.calls: list[tuple[str, int, dict[str, str]]] = []

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> bool:
        self.calls.append((name, replication_factor, dict(configs)))
        if replication_factor not in (-1, 1):
            raise MirrorClientError(f"cluster B: create topic {name} failed: INVALID_REPLICATION")
        if configs.get("cleanup.policy") == "compact":
            raise CompactionRefused(f"cluster B: create topic {name}: compaction refused")
        return True


def test_internal_topics__no_compaction_and_factor_3__made_with_defaults_said_once() -> None:
    admin = _RefusingAdmin()
    said: list[str] = []
    notices = CompactionNotices(said.append)
    for name in ("B.checkpoints.internal", "heartbeats"):
        assert create_internal_topic(admin, name, 3, notices=notices, report=said.append)
    assert admin.calls[:3] == [
        ("B.checkpoints.internal", 3, {"cleanup.policy": "compact"}),
        ("B.checkpoints.internal", -1, {"cleanup.policy": "compact"}),
        ("B.checkpoints.internal", -1, {}),
    ]
    compaction = [s for s in said if "does not support compacted topics" in s]
    assert len(compaction) == 1 and compaction[0].startswith("cluster B ")
    assert all("compaction refused" not in s for s in said)


class _BrokenAdmin(_RefusingAdmin):
    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> bool:
        self.calls.append((name, replication_factor, dict(configs)))
        raise MirrorClientError(f"cluster B: create topic {name} failed: POLICY_VIOLATION")


def test_internal_topics__any_other_refusal__raised_after_the_default_factor_was_tried() -> None:
    admin = _BrokenAdmin()
    said: list[str] = []
    with pytest.raises(MirrorClientError, match="POLICY_VIOLATION"):
        create_internal_topic(admin, "t", 2, notices=CompactionNotices(said.append),
                              report=said.append)
    assert [factor for _, factor, _ in admin.calls] == [2, -1]
    assert len(said) == 1 and "default replication factor" in said[0]
