"""linkd/grpc_auth.py and admin/security.py without a daemon: listener names,
credentials in metadata, the bounded refusal log, the password cache,
principals from a certificate, client settings and properties files."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from admin.security import parse_properties, read_command_config, security_of
from linkd.grpc_auth import (
    ANONYMOUS,
    PasswordCache,
    RefusalLog,
    Refused,
    SaslInterceptor,
    basic_credentials,
    parse_listener,
    principal_of,
)
from tests.certs import CLIENT_DN, make_certs


def _basic(text: str) -> list[tuple[str, str]]:
    return [("authorization", "Basic " + base64.b64encode(text.encode()).decode())]


def test_listener_names_are_kafkas() -> None:
    assert str(parse_listener("127.0.0.1:9701")) == "PLAINTEXT://127.0.0.1:9701"
    ssl = parse_listener("sasl_ssl://127.0.0.1:9701")
    assert (ssl.protocol, ssl.address, ssl.tls, ssl.sasl) == (
        "SASL_SSL", "127.0.0.1:9701", True, True)
    assert not parse_listener("SASL_PLAINTEXT://h:1").tls
    for bad, says in [("TLS://h:1", "unknown security protocol"), ("SSL://h", "HOST:PORT"),
                      ("h:0", "HOST:PORT")]:
        with pytest.raises(ValueError, match=says):
            parse_listener(bad)


def test_basic_credentials() -> None:
    assert basic_credentials(_basic("alice:pa:ss")) == ("alice", "pa:ss")
    assert basic_credentials(_basic("alice:")) == ("alice", "")
    for metadata, reason in [
        ([], "missing_credentials"),
        ([("authorization", "Bearer x")], "malformed_credentials"),
        ([("authorization", "Basic !!!")], "malformed_credentials"),
        (_basic("no-colon"), "malformed_credentials"),
        (_basic(":pw"), "malformed_credentials"),
    ]:
        with pytest.raises(Refused) as err:
            basic_credentials(metadata)
        assert err.value.reason == reason


class _Store:
    def __init__(self) -> None:
        self.checks = 0

    def verify_password(self, name: str, password: str) -> bool:
        self.checks += 1
        return (name, password) == ("alice", "right")


def test_interceptor_checks_the_store_and_caches_a_success() -> None:
    store = _Store()
    sasl = SaslInterceptor(lambda: store)
    assert sasl.authenticate(_basic("alice:right")) == "User:alice"
    assert sasl.authenticate(_basic("alice:right")) == "User:alice"
    assert store.checks == 1
    with pytest.raises(Refused) as err:
        sasl.authenticate(_basic("alice:wrong"))
    assert err.value.reason == "bad_credentials" and "wrong" not in err.value.message
    with pytest.raises(Refused):
        SaslInterceptor(lambda: None).authenticate(_basic("alice:right"))


def test_password_cache_expires_and_is_bounded() -> None:
    cache = PasswordCache(ttl_s=10.0, size=2)
    cache.add("a", "pw", now=0.0)
    assert cache.hit("a", "pw", now=5.0) and not cache.hit("a", "other", now=5.0)
    assert not cache.hit("a", "pw", now=11.0)
    for user in ("a", "b", "c"):
        cache.add(user, "pw", now=0.0)
    assert not cache.hit("a", "pw", now=1.0) and cache.hit("c", "pw", now=1.0)


def test_refusals_are_counted_and_logged_once_each(caplog: pytest.LogCaptureFixture) -> None:
    log = RefusalLog(max_logged=2)
    caplog.set_level(logging.INFO, logger="linkd.grpc_auth")
    bad = Refused("bad_credentials", "alice", "m")
    for port in (1000, 1001, 1002):  # another connection of the same peer
        log.record(f"ipv4:127.0.0.1:{port}", bad)
    log.record("ipv4:127.0.0.2:5", bad)
    log.record("ipv4:127.0.0.2:6", bad)  # logged already
    log.record("ipv4:127.0.0.3:5", bad)  # past the bound: the set starts again, logged
    assert log.counts["bad_credentials"] == 6
    assert [r.__dict__["peer"] for r in caplog.records] == [
        "ipv4:127.0.0.1", "ipv4:127.0.0.2", "ipv4:127.0.0.3"
    ]


class _Context:
    def __init__(self, auth: dict[str, list[bytes]]) -> None:
        self._auth = auth

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth


def test_principal_of_a_certificate(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    assert principal_of(_Context({})) == ANONYMOUS
    tls = {"transport_security_type": [b"ssl"]}
    assert principal_of(_Context(tls)) == ANONYMOUS
    named = {**tls, "x509_subject": [CLIENT_DN.encode()]}
    assert principal_of(_Context(named)) == f"User:{CLIENT_DN}"
    # Without grpc's x509_subject, the subject is read from the certificate.
    pem = {**tls, "x509_pem_cert": [certs.client_cert.read_bytes()]}
    assert principal_of(_Context(pem)) == f"User:{CLIENT_DN}"


def test_client_security_settings(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    assert not security_of({}).tls
    s = security_of({"security.protocol": "sasl_ssl", "ssl.ca.location": str(certs.ca),
                     "sasl.username": "u", "sasl.password": "s3cr3t-pw"})
    assert s.tls and s.sasl and s.ca == certs.ca.read_bytes()
    assert "s3cr3t-pw" not in repr(s)
    for conf, says in [
        ({"security.protocol": "TLS"}, "security.protocol"),
        ({"security.protocol": "SASL_SSL", "sasl.username": "u"}, "sasl.password"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
          "sasl.username": "u", "sasl.password": "p"}, "sasl.mechanism"),
        ({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "none")}, "cannot read"),
        ({"security.protocol": "SSL", "ssl.certificate.location": str(certs.client_cert)},
         "go together"),
    ]:
        with pytest.raises(ValueError, match=says):
            security_of(conf)


def test_properties_files(tmp_path: Path) -> None:
    assert parse_properties("# c\n! c\na=1\nb : 2\nc 3\nd=x\\\n  y\n\n") == {
        "a": "1", "b": "2", "c": "3", "d": "xy"}
    path = tmp_path / "c.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.jaas.config="
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="bob" password="b pw";\n')
    assert read_command_config(path) == {"security.protocol": "SASL_PLAINTEXT",
                                         "sasl.username": "bob", "sasl.password": "b pw",
                                         "sasl.mechanism": "PLAIN"}
    path.write_text("security.protocol=SSL\nbootstrap.servers=x:1\n")
    with pytest.raises(ValueError, match=r"unknown keys bootstrap\.servers"):
        read_command_config(path)
