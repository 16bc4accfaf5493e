"""The gRPC listener secured: TLS, mTLS and SASL over call metadata, on real
daemons, through `ccr-admin --command-config` and the client library."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2

from admin import AdminClient, Consumer, Producer
from admin.errors import CcrError
from admin.security import open_channel, security_of
from ccr.v1 import admin_pb2, admin_pb2_grpc
from tests.certs import CLIENT_DN, Certs, make_certs
from tests.harness import Daemon, run_cli

PASSWORD = "alice-secret-1"
WRONG = "not-the-password-42"
WAIT_S = 30.0


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


def _tls_args(certs: Certs, mtls: bool = False) -> list[str]:
    args = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    return [*args, "--tls-client-ca", str(certs.ca)] if mtls else args


def _properties(path: Path, **props: str) -> Path:
    path.write_text("# client settings\n" + "".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}; stderr: {result.stderr}"
    return result.stdout


def _error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _sasl_daemon(
    make: Callable[..., Daemon], certs: Certs, protocol: str = "SASL_SSL", mtls: bool = False
) -> Daemon:
    client = {"security.protocol": protocol, "sasl.mechanism": "SCRAM-SHA-256",
              "sasl.username": "alice", "sasl.password": PASSWORD}
    if protocol == "SASL_SSL":
        client["ssl.ca.location"] = str(certs.ca)
    users = certs.ca.parent / "users.txt"
    users.write_text(f"alice:{PASSWORD}\nbob:bob-secret\n")
    tls = _tls_args(certs, mtls) if protocol == "SASL_SSL" else []
    return make("S", extra_args=[*tls, "--sasl-users", str(users)],
                listen_protocol=protocol, client_config=client)


def _raw_call(d: Daemon, metadata: list[tuple[str, str]]) -> grpc.RpcError | None:
    """DescribeCluster over TLS with exactly this metadata."""
    security = security_of({"security.protocol": "SSL", "ssl.ca.location": d.client_config[
        "ssl.ca.location"]})
    with open_channel(d.bootstrap, security) as channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        try:
            stub.DescribeCluster(admin_pb2.DescribeClusterRequest(), timeout=WAIT_S,
                                 metadata=metadata)
        except grpc.RpcError as exc:
            return exc
    return None


def _basic(user: str, password: str) -> list[tuple[str, str]]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return [("authorization", f"Basic {token}")]


def _log_lines(d: Daemon, msg: str) -> list[dict[str, Any]]:
    out = []
    for line in d.stderr_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == msg:
            out.append(entry)
    return out


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S}s: {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------------------
# TLS and mTLS
# ---------------------------------------------------------------------------


def test_ccr_admin_over_tls_with_command_config(
    daemon_factory: Callable[..., Daemon], certs: Certs, tmp_path: Path
) -> None:
    d = daemon_factory("T", extra_args=_tls_args(certs), listen_protocol="SSL",
                       client_config={"security.protocol": "SSL",
                                      "ssl.ca.location": str(certs.ca)})
    conf = _properties(tmp_path / "client.properties", **{
        "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)})
    cli = ["--command-config", str(conf)]
    _ok(run_cli(*cli, "create-topic", "orders", "--partitions", "2", bootstrap=d.bootstrap))
    _ok(run_cli(*cli, "produce", "orders", "--key-separator", ":",
                input="k1:v1\nk2:v2\n", bootstrap=d.bootstrap))
    out = _ok(run_cli(*cli, "consume", "orders", "--from-beginning", "--max-messages", "2",
                      "--json", bootstrap=d.bootstrap))
    assert sorted(json.loads(line)["value"] for line in out.splitlines()) == ["v1", "v2"]
    # TLS without a client certificate: the cluster sees no one in particular.
    assert _ok(run_cli(*cli, "whoami", bootstrap=d.bootstrap)).strip() == "User:ANONYMOUS"


def test_plaintext_client_at_a_tls_listener_gets_a_clear_error_at_once(
    daemon_factory: Callable[..., Daemon], certs: Certs
) -> None:
    d = daemon_factory("T", extra_args=_tls_args(certs), listen_protocol="SSL",
                       client_config={"security.protocol": "SSL",
                                      "ssl.ca.location": str(certs.ca)})
    started = time.monotonic()
    line = _error(run_cli("list-topics", bootstrap=d.bootstrap))
    assert "SECURITY_PROTOCOL_MISMATCH" in line and "speaks TLS" in line, line
    # The library too: at once, not retried until a delivery timeout.
    producer = Producer({"bootstrap.servers": d.bootstrap, "delivery.timeout.ms": 120000})
    with pytest.raises(CcrError) as err:
        producer.produce("orders", value=b"x")
    producer.close()
    assert err.value.code == "SECURITY_PROTOCOL_MISMATCH" and not err.value.retriable
    assert time.monotonic() - started < 60


def test_tls_client_at_a_plaintext_listener_gets_a_clear_error(
    daemon_factory: Callable[..., Daemon], certs: Certs, tmp_path: Path
) -> None:
    d = daemon_factory("P")
    conf = _properties(tmp_path / "c.properties", **{
        "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)})
    line = _error(run_cli("--command-config", str(conf), "list-topics", bootstrap=d.bootstrap))
    assert "SECURITY_PROTOCOL_MISMATCH" in line and "does not speak TLS" in line, line


def test_mtls_names_the_certificate_subject_and_refuses_an_untrusted_one(
    daemon_factory: Callable[..., Daemon], certs: Certs, tmp_path: Path
) -> None:
    trusted = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
               "ssl.certificate.location": str(certs.client_cert),
               "ssl.key.location": str(certs.client_key)}
    d = daemon_factory("M", extra_args=_tls_args(certs, mtls=True), listen_protocol="SSL",
                       client_config=trusted)
    conf = _properties(tmp_path / "alice.properties", **trusted)
    who = _ok(run_cli("--command-config", str(conf), "whoami", bootstrap=d.bootstrap))
    assert who.strip() == f"User:{CLIENT_DN}"
    with AdminClient(d.client()) as admin:
        assert admin.whoami() == "User:CN=alice,OU=ops,O=ccr-sim"

    rogue = _properties(tmp_path / "rogue.properties", **{
        **trusted, "ssl.certificate.location": str(certs.untrusted_cert),
        "ssl.key.location": str(certs.untrusted_key)})
    line = _error(run_cli("--command-config", str(rogue), "whoami", bootstrap=d.bootstrap))
    assert "SSL_HANDSHAKE_FAILED" in line and "untrusted.crt" in line, line
    no_cert = _properties(tmp_path / "nocert.properties", **{
        "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)})
    line = _error(run_cli("--command-config", str(no_cert), "whoami", bootstrap=d.bootstrap))
    assert "SSL_HANDSHAKE_FAILED" in line and "no client certificate" in line, line


# ---------------------------------------------------------------------------
# SASL over call metadata
# ---------------------------------------------------------------------------


def test_sasl_ssl_refuses_calls_without_valid_credentials(
    daemon_factory: Callable[..., Daemon], certs: Certs
) -> None:
    d = _sasl_daemon(daemon_factory, certs)
    missing = _raw_call(d, [])
    assert missing is not None and missing.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "authentication required" in (missing.details() or "")
    malformed = _raw_call(d, [("authorization", "Bearer abc")])
    assert malformed is not None and malformed.code() is grpc.StatusCode.UNAUTHENTICATED
    for _ in range(3):
        wrong = _raw_call(d, _basic("alice", WRONG))
        assert wrong is not None and wrong.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "invalid username or password" in (wrong.details() or "")
        assert WRONG not in (wrong.details() or "")
    unknown = _raw_call(d, _basic("nobody", WRONG))
    assert unknown is not None and unknown.code() is grpc.StatusCode.UNAUTHENTICATED
    assert _raw_call(d, _basic("alice", PASSWORD)) is None

    # Each (peer, user, reason) is logged once, with no secret in it.
    def logged() -> list[dict[str, Any]]:
        return _log_lines(d, "gRPC call refused: not authenticated")

    _wait_for(lambda: len(logged()) >= 4, "four refusal log lines")
    reasons = sorted((e["user"], e["reason"]) for e in logged())
    assert reasons == [("", "malformed_credentials"), ("", "missing_credentials"),
                       ("alice", "bad_credentials"), ("nobody", "bad_credentials")]
    assert WRONG not in d.stderr_text() and PASSWORD not in d.stderr_text()
    # Every refusal is counted per reason; the counts are logged at a clean stop.
    assert d.terminate() == 0
    [counts] = _log_lines(d, "gRPC calls refused unauthenticated")
    assert json.loads(counts["by_reason"]) == {
        "bad_credentials": 4, "malformed_credentials": 1, "missing_credentials": 1}


def test_ccr_admin_over_sasl_ssl_names_the_user(
    daemon_factory: Callable[..., Daemon], certs: Certs, tmp_path: Path
) -> None:
    # --tls-client-ca concerns SSL listeners: a SASL_SSL one asks for no certificate.
    d = _sasl_daemon(daemon_factory, certs, mtls=True)
    good = _properties(tmp_path / "alice.properties", **d.client_config)
    assert _ok(run_cli("--command-config", str(good), "whoami",
                       bootstrap=d.bootstrap)).strip() == "User:alice"
    jaas = _properties(tmp_path / "bob.properties", **{
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="bob" password="bob-secret";'})
    assert _ok(run_cli("--command-config", str(jaas), "whoami",
                       bootstrap=d.bootstrap)).strip() == "User:bob"
    bad = _properties(tmp_path / "bad.properties", **{**d.client_config, "sasl.password": WRONG})
    line = _error(run_cli("--command-config", str(bad), "list-topics", bootstrap=d.bootstrap))
    assert line.startswith("error: UNAUTHENTICATED: authentication failed"), line
    assert WRONG not in line


def test_sasl_plaintext_listener(
    daemon_factory: Callable[..., Daemon], certs: Certs
) -> None:
    d = _sasl_daemon(daemon_factory, certs, protocol="SASL_PLAINTEXT")
    with AdminClient(d.client()) as admin:
        assert admin.whoami() == "User:alice"
    with AdminClient(d.client(**{"sasl.password": WRONG})) as admin, \
            pytest.raises(CcrError) as err:
        admin.list_topics()
    assert err.value.code == "UNAUTHENTICATED" and not err.value.retriable
    # The standard services answer without credentials: a probe holds none.
    with grpc.insecure_channel(d.bootstrap) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        for service in ("", "ccr.v1.Cluster", "ccr.v1.Admin", "ccr.v1.Replication"):
            answer = check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT_S)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
        with pytest.raises(grpc.RpcError) as unknown:
            check(health_pb2.HealthCheckRequest(service="ccr.v1.Nothing"), timeout=WAIT_S)
        assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
        for version in ("v1", "v1alpha"):
            assert _reflected_services(channel, version) == [
                "ccr.v1.Admin", "ccr.v1.Cluster", "ccr.v1.Replication",
                "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                "grpc.reflection.v1alpha.ServerReflection"]
        # Stopping: NOT_SERVING first, while the daemon still answers.
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="ccr.v1.Cluster"), timeout=WAIT_S)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        assert d.proc is not None
        d.proc.terminate()
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
    # It stops by itself on that one SIGTERM (a second one, sent while a
    # loaded machine still ran its shutdown, ended it by the signal: -15).
    assert d.proc.wait(timeout=WAIT_S) == 0
    d.terminate()


def _reflected_services(channel: grpc.Channel, version: str) -> list[str]:
    """The services server reflection lists, asked under its v1 or v1alpha name
    (the two protocols have the same messages; grpcio-reflection ships v1alpha's)."""
    method = f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo"
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    [answer] = list(call(iter([request]), timeout=WAIT_S))
    return sorted(s.name for s in answer.list_services_response.service)


def test_producer_and_consumer_over_sasl_ssl(
    daemon_factory: Callable[..., Daemon], certs: Certs
) -> None:
    d = _sasl_daemon(daemon_factory, certs)
    with AdminClient(d.client()) as admin:
        admin.create_topic("orders", 3)
    producer = Producer(d.client(acks="all"))
    reports: list[tuple[CcrError | None, Any]] = []
    for i in range(20):
        producer.produce("orders", key=f"k{i}", value=f"v{i}",
                         on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(WAIT_S) == 0
    producer.close()
    assert len(reports) == 20 and all(e is None for e, _ in reports)

    consumer = Consumer(d.client(**{"group.id": "g", "auto.offset.reset": "earliest"}))
    consumer.subscribe(["orders"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    while len(seen) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None and msg.value() is not None:
            seen.add(msg.value() or b"")
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == {f"v{i}".encode() for i in range(20)}


# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------


def test_command_config_refuses_unknown_keys(tmp_path: Path) -> None:
    conf = _properties(tmp_path / "c.properties", **{
        "security.protocol": "SSL", "ssl.truststore.location": "/x.jks"})
    done = run_cli("--command-config", str(conf), "list-topics", bootstrap="127.0.0.1:1")
    assert done.returncode == 2
    assert "unknown keys ssl.truststore.location" in done.stderr


def test_command_config_needs_the_sasl_user(tmp_path: Path) -> None:
    conf = _properties(tmp_path / "c.properties", **{"security.protocol": "SASL_SSL"})
    done = run_cli("--command-config", str(conf), "list-topics", bootstrap="127.0.0.1:1")
    assert done.returncode == 2
    assert "needs sasl.username and sasl.password" in done.stderr


@pytest.fixture
def linkd_run(tmp_path: Path) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "linkd", "--cluster-id", "A",
                               "--data-dir", str(tmp_path / "d"), *args],
                              capture_output=True, text=True, timeout=60, check=False)

    yield run


def test_tls_listener_needs_certificate_and_key(
    linkd_run: Callable[..., subprocess.CompletedProcess[str]], certs: Certs
) -> None:
    done = linkd_run("--listen", "SSL://127.0.0.1:1")
    assert done.returncode == 2 and "needs --tls-cert and --tls-key" in done.stderr
    done = linkd_run("--listen", "TLS://127.0.0.1:1")
    assert done.returncode == 2 and "unknown security protocol 'TLS'" in done.stderr
    done = linkd_run("--listen", "SSL://127.0.0.1:1", "--tls-cert", str(certs.server_cert),
                     "--tls-key", str(certs.server_cert.parent / "missing.key"))
    assert done.returncode == 2 and "--tls-key" in done.stderr
    # The key given as the certificate (and the other way round, and a key
    # of another certificate): the option and the file are named.
    key, cert = certs.server_key, certs.server_cert
    done = linkd_run("--listen", "SSL://127.0.0.1:1", "--tls-cert", str(key), "--tls-key", str(key))
    assert done.returncode == 2, done.stderr
    assert f"--tls-cert {key}: holds no PEM certificate" in done.stderr
    assert "give that file to --tls-key" in done.stderr
    done = linkd_run("--listen", "SSL://127.0.0.1:1", "--tls-cert", str(cert),
                     "--tls-key", str(cert))
    assert done.returncode == 2 and f"--tls-key {cert}: holds a certificate" in done.stderr
    done = linkd_run("--listen", "127.0.0.1:1", "--kafka-listen", "SSL://127.0.0.1:2",
                     "--tls-cert", str(cert), "--tls-key", str(certs.client_key))
    assert done.returncode == 2, done.stderr
    assert f"--tls-key {certs.client_key} is not the private key" in done.stderr
