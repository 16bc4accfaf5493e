"""Authentication on the Kafka listener, on real daemons, with real clients:
SASL (PLAIN, SCRAM-SHA-256/512) over plaintext and TLS, mutual TLS, SCRAM
users managed through Kafka's AdminClient, refusals as Kafka answers them,
and the user store's durability."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kio.schema.errors import ErrorCode as K

from tests.harness import ROOT, Daemon, free_port
from tests.kafka_raw import RawClient

DEADLINE_S = 30.0
USERS = "# bootstrap users\nalice:alice-secret\n\nbob:bob-pw-123\n"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-certs.py"), str(out)],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return out


@dataclass
class Cluster:
    daemon: Daemon
    ports: dict[str, int]
    certs: Path

    def conf(self, protocol: str, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.ports[protocol]}",
            "security.protocol": protocol,
        }
        if "SSL" in protocol:
            out["ssl.ca.location"] = str(self.certs / "ca.pem")
        out.update(extra)
        return out

    def scram(self, protocol: str, mechanism: str, user: str, password: str) -> dict[str, Any]:
        return self.conf(
            protocol,
            **{"sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password},
        )

    def client_cert(self, stem: str) -> dict[str, Any]:
        return self.conf(
            "SSL",
            **{
                "ssl.certificate.location": str(self.certs / f"{stem}.pem"),
                "ssl.key.location": str(self.certs / f"{stem}.key"),
            },
        )


def _start(
    make: Callable[..., Daemon], certs: Path, users_file: Path, data_dir: Path | None = None
) -> Cluster:
    ports = {p: free_port() for p in ("SASL_PLAINTEXT", "SASL_SSL", "SSL", "PLAINTEXT")}
    listen = ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items())
    args = [
        "--kafka-listen",
        listen,
        "--tls-cert",
        str(certs / "server.pem"),
        "--tls-key",
        str(certs / "server.key"),
        "--tls-client-ca",
        str(certs / "ca.pem"),
        "--sasl-users",
        str(users_file),
        "--log-level",
        "debug",
    ]
    return Cluster(make("A", extra_args=args, data_dir=data_dir), ports, certs)


@pytest.fixture
def cluster(daemon_factory: Callable[..., Daemon], certs: Path, tmp_path: Path) -> Cluster:
    users = tmp_path / "users.txt"
    users.write_text(USERS)
    return _start(daemon_factory, certs, users)


def _log_lines(daemon: Daemon) -> list[dict[str, Any]]:
    out = []
    for line in daemon.stderr_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _wait_log(daemon: Daemon, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for entry in _log_lines(daemon):
            if pred(entry):
                return entry
        if daemon.proc is not None and daemon.proc.poll() is not None:
            break
        try:
            if daemon.proc is not None:
                daemon.proc.wait(timeout=0.1)  # the pause; notices a daemon that died
        except subprocess.TimeoutExpired:
            pass
    raise AssertionError(f"no such log line; tail:\n{daemon.stderr_text()[-3000:]}")


def _refusals(daemon: Daemon, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in _log_lines(daemon)
        if e.get("msg") == "kafka: client refused" and e.get("reason") == reason
    ]


def _produce_consume(conf: dict[str, Any], topic: str) -> bytes:
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(DEADLINE_S)
    producer = ck.Producer(conf)
    producer.produce(topic, b"hello " + topic.encode())
    assert producer.flush(DEADLINE_S) == 0
    consumer = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                value = msg.value()
                assert value is not None
                return bytes(value)
        raise AssertionError("nothing consumed")
    finally:
        consumer.close()


def _refused(conf: dict[str, Any]) -> None:
    """A client with this configuration gets no metadata: polled in short
    steps until the client reports why (its error callback), instead of
    waiting out a metadata timeout."""
    errors: list[ck.KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 30
    while True:
        with pytest.raises(ck.KafkaException):
            admin.list_topics(timeout=0.5)
        admin.poll(0.1)  # serves the error callback
        if errors:
            return
        assert time.monotonic() < deadline, "the client reported no refusal"


# -- SASL ----------------------------------------------------------------------------


def test_scram_sha256_over_sasl_ssl_produces_and_consumes(cluster: Cluster) -> None:
    conf = cluster.scram("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-secret")
    assert _produce_consume(conf, "scram-orders") == b"hello scram-orders"
    entry = _wait_log(
        cluster.daemon,
        lambda e: e.get("msg") == "kafka: authenticated" and e.get("principal") == "User:alice",
    )
    assert entry["mechanism"] == "SCRAM-SHA-256"


@pytest.mark.parametrize(
    ("protocol", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")]
)
def test_kafka_python_over_sasl(cluster: Cluster, protocol: str, mechanism: str) -> None:
    common: dict[str, Any] = {
        "bootstrap_servers": f"127.0.0.1:{cluster.ports[protocol]}",
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "bob",
        "sasl_plain_password": "bob-pw-123",
    }
    if protocol == "SASL_SSL":
        common["ssl_cafile"] = str(cluster.certs / "ca.pem")
    topic = f"kp-{mechanism.lower()}"
    admin = AdminClient(cluster.scram(protocol, mechanism, "bob", "bob-pw-123"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(DEADLINE_S)
    producer = KafkaProducer(**common)
    producer.send(topic, b"from kafka-python").get(timeout=DEADLINE_S)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(DEADLINE_S * 1000),
        **common,
    )
    try:
        values = [next(iter(consumer)).value]
    finally:
        consumer.close()
    assert values == [b"from kafka-python"]
    _wait_log(
        cluster.daemon,
        lambda e: e.get("msg") == "kafka: authenticated" and e.get("mechanism") == mechanism,
    )


def test_wrong_password_and_unknown_user_are_refused_logged_once(cluster: Cluster) -> None:
    for _ in range(2):
        _refused(cluster.scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice", "not-her-password"))
        _refused(cluster.scram("SASL_SSL", "PLAIN", "nobody", "whatever-pw"))
    alice = _wait_log(
        cluster.daemon,
        lambda e: e.get("reason") == "bad_credentials" and e.get("principal") == "User:alice",
    )
    assert alice["client"] == "/127.0.0.1" and alice["level"] == "info"
    _wait_log(cluster.daemon, lambda e: e.get("principal") == "User:nobody")
    text = cluster.daemon.stderr_text()
    assert "not-her-password" not in text and "whatever-pw" not in text
    # librdkafka retried several times; each (address, user, reason) is logged once.
    per_user: dict[tuple[str, str], int] = {}
    for e in _refusals(cluster.daemon, "bad_credentials"):
        key = (e["listener"], e["principal"])
        per_user[key] = per_user.get(key, 0) + 1
    assert per_user and all(n == 1 for n in per_user.values()), per_user
    # Every refusal is counted; the counts are logged when the listener stops.
    cluster.daemon.terminate()
    totals = [
        e for e in _log_lines(cluster.daemon) if e.get("msg") == "kafka listener: clients refused"
    ]
    counted = {e["listener"].split(":")[0]: e["bad_credentials"] for e in totals}
    assert counted["SASL_PLAINTEXT"] >= 2 and counted["SASL_SSL"] >= 2, totals


def test_sasl_answers_as_kafka_at_the_wire(cluster: Cluster) -> None:
    port = cluster.ports["SASL_PLAINTEXT"]
    # A request other than ApiVersions/SaslHandshake before authenticating: closed.
    client = RawClient(port)
    try:
        versions = client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        keys = {k.api_key for k in versions.api_keys}
        assert {17, 36, 50, 51} <= keys
        with pytest.raises((ConnectionError, OSError)):
            client.call(
                3,
                12,
                {
                    "topics": [],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
    finally:
        client.close()
    # An unsupported mechanism: UNSUPPORTED_SASL_MECHANISM with the enabled list.
    client = RawClient(port)
    try:
        answer = client.call(17, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == K.unsupported_sasl_mechanism
        assert list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    finally:
        client.close()
    # A handshake, then another request instead of SaslAuthenticate:
    # ILLEGAL_SASL_STATE, then the connection is closed.
    client = RawClient(port)
    try:
        assert client.call(17, 1, {"mechanism": "PLAIN"}).error_code == K.none
        groups = client.call(16, 4, {"states_filter": []})
        assert groups.error_code == K.illegal_sasl_state
        with pytest.raises((ConnectionError, OSError)):
            client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    finally:
        client.close()
    # ApiVersions after the handshake is out of place too (answered in its v0 header).
    client = RawClient(port)
    try:
        assert client.call(17, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == K.none
        late = client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert late.error_code == K.illegal_sasl_state
    finally:
        client.close()
    # A wrong PLAIN password: SASL_AUTHENTICATION_FAILED, Kafka's message.
    client = RawClient(port)
    try:
        assert client.call(17, 1, {"mechanism": "PLAIN"}).error_code == K.none
        answer = client.call(36, 2, {"auth_bytes": b"\x00bob\x00wrong"})
        assert answer.error_code == K.sasl_authentication_failed
        assert answer.error_message == "Authentication failed: Invalid username or password"
    finally:
        client.close()
    # The right one, then requests are served; a second handshake is ILLEGAL_SASL_STATE.
    client = RawClient(port)
    try:
        assert client.call(17, 1, {"mechanism": "PLAIN"}).error_code == K.none
        assert client.call(36, 2, {"auth_bytes": b"\x00bob\x00bob-pw-123"}).error_code == K.none
        assert client.call(17, 1, {"mechanism": "PLAIN"}).error_code == K.illegal_sasl_state
    finally:
        client.close()
    # SaslHandshake v0: the tokens then travel as bare size-prefixed frames.
    client = RawClient(port)
    try:
        assert client.call(17, 0, {"mechanism": "PLAIN"}).error_code == K.none
        token = b"\x00bob\x00bob-pw-123"
        client.send_raw(len(token).to_bytes(4, "big") + token)
        assert client.read_frame() == b""
        meta = client.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
        assert [b.port for b in meta.brokers] == [port]
    finally:
        client.close()
    client = RawClient(port)
    try:
        assert client.call(17, 0, {"mechanism": "PLAIN"}).error_code == K.none
        client.send_raw(b"\x00\x00\x00\x04abcd")
        with pytest.raises((ConnectionError, OSError)):
            client.read_frame()
    finally:
        client.close()
    # On a PLAINTEXT listener nothing is required, and SASL calls are out of place.
    client = RawClient(cluster.ports["PLAINTEXT"])
    try:
        assert client.call(17, 1, {"mechanism": "PLAIN"}).error_code == K.illegal_sasl_state
    finally:
        client.close()


# -- TLS -------------------------------------------------------------------------------


def test_mutual_tls_principal_is_the_certificate_dn(cluster: Cluster) -> None:
    assert _produce_consume(cluster.client_cert("alice"), "mtls-t") == b"hello mtls-t"
    _wait_log(
        cluster.daemon,
        lambda e: (
            e.get("msg") == "kafka: authenticated"
            and e.get("principal") == "User:CN=alice,OU=ops"
            and e.get("mechanism") == "SSL"
        ),
    )


def test_untrusted_expired_and_missing_client_certificates_are_refused(cluster: Cluster) -> None:
    _refused(cluster.client_cert("rogue"))
    _refused(cluster.client_cert("expired"))
    _refused(cluster.conf("SSL"))
    _wait_log(cluster.daemon, lambda e: e.get("reason") == "tls_untrusted_certificate")
    _wait_log(cluster.daemon, lambda e: e.get("reason") == "tls_expired_certificate")
    _wait_log(cluster.daemon, lambda e: e.get("reason") == "tls_no_client_certificate")


def test_sasl_ssl_needs_no_client_certificate(cluster: Cluster) -> None:
    conf = cluster.scram("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-pw-123")
    assert AdminClient(conf).list_topics(timeout=DEADLINE_S).brokers


# -- users through AdminClient ------------------------------------------------------


def test_admin_client_creates_a_scram_user_that_then_logs_in(cluster: Cluster) -> None:
    admin = AdminClient(cluster.scram("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-secret"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-pw", b"some-salt-bytes")]
    )
    futures["carol"].result(DEADLINE_S)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(DEADLINE_S)
    infos = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 8192)]

    carol = cluster.scram("SASL_PLAINTEXT", "SCRAM-SHA-512", "carol", "carol-pw")
    assert _produce_consume(carol, "carol-t") == b"hello carol-t"
    _refused(cluster.scram("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-pw"))

    # Kafka's refusals.
    with pytest.raises(ck.KafkaException) as few:
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
                )
            ]
        )["dave"].result(DEADLINE_S)
    assert few.value.args[0].code() == ck.KafkaError.UNACCEPTABLE_CREDENTIAL
    with pytest.raises(ck.KafkaException) as missing:
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)]
        )["carol"].result(DEADLINE_S)
    assert missing.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(ck.KafkaException) as unknown:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(DEADLINE_S)
    assert unknown.value.args[0].code() == ck.KafkaError.RESOURCE_NOT_FOUND

    admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]
    )["carol"].result(DEADLINE_S)
    _refused(carol)


def test_users_survive_restart_and_kill9_without_rewrites(
    daemon_factory: Callable[..., Daemon], certs: Path, tmp_path: Path
) -> None:
    users = tmp_path / "users.txt"
    users.write_text(USERS)
    cluster = _start(daemon_factory, certs, users)
    admin = AdminClient(cluster.scram("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("erin", info, b"erin-pw")])[
        "erin"
    ].result(DEADLINE_S)
    journal_files = sorted((cluster.daemon.data_dir).rglob("*"))
    stored = b"".join(p.read_bytes() for p in journal_files if p.is_file())
    assert b"erin-pw" not in stored and b"alice-secret" not in stored

    cluster.daemon.kill9()
    cluster.daemon.restart()
    erin = cluster.scram("SASL_PLAINTEXT", "SCRAM-SHA-256", "erin", "erin-pw")
    assert AdminClient(erin).list_topics(timeout=DEADLINE_S).brokers
    cluster.daemon.terminate()
    cluster.daemon.restart()
    alice = cluster.scram("SASL_SSL", "SCRAM-SHA-512", "alice", "alice-secret")
    assert AdminClient(alice).list_topics(timeout=DEADLINE_S).brokers
    starts = [e for e in _log_lines(cluster.daemon) if e.get("msg") == "sasl users"]
    assert [e["changed"] for e in starts] == [2, 0, 0]


# -- start-up errors ------------------------------------------------------------------


def _run_linkd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "linkd",
            "--cluster-id",
            "A",
            "--data-dir",
            str(tmp_path / "data"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("alice:ok\nno-colon-secretvalue\n", 2),
        ("# c\n\n:pw-only-secret\n", 3),
        ("bob:x\nbob:again-secret\n", 2),
    ],
)
def test_a_bad_sasl_users_file_exits_2_naming_the_line(
    tmp_path: Path, content: str, line: int
) -> None:
    users = tmp_path / "users.txt"
    users.write_text(content)
    done = _run_linkd(
        tmp_path,
        "--kafka-listen",
        f"SASL_PLAINTEXT://127.0.0.1:{free_port()}",
        "--sasl-users",
        str(users),
    )
    assert done.returncode == 2, done.stderr
    assert f"line {line}" in done.stderr
    assert "secret" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("--kafka-listen", "SSL://127.0.0.1:9"),  # no certificate
        ("--kafka-listen", "KERBEROS://127.0.0.1:9"),
        ("--kafka-listen", "127.0.0.1:9", "--sasl-enabled-mechanisms", "GSSAPI"),
    ],
)
def test_bad_security_settings_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = _run_linkd(tmp_path, *args)
    assert done.returncode == 2, done.stderr
