"""The listener's SASL exchanges and security settings, without a daemon:
SCRAM against an independent client computation (RFC 5802), PLAIN, Kafka's
refusals, listener and users-file parsing, the certificate principal, and
the bounded log of refused clients."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from linkd.core.users import ScramMechanism, UserStore
from linkd.kafka.sasl import AuthFailed, Reason, make_exchange
from linkd.kafka.security import (
    AuthFailures,
    SecurityProtocol,
    UsersFileError,
    certificate_principal,
    parse_listeners,
    parse_mechanisms,
    read_users_file,
    tls_failure_reason,
)
from tests.harness import ROOT

SALTS = {ScramMechanism.SCRAM_SHA_256: b"s" * 16, ScramMechanism.SCRAM_SHA_512: b"t" * 16}


@pytest.fixture
def users() -> UserStore:
    store = UserStore()
    store.set_password("alice", "pencil", SALTS, 4096)
    return store


def _client_final(
    mech: str, password: str, first_bare: str, server_first: str
) -> tuple[str, bytes]:
    """An RFC 5802 client's final message and the server signature it expects."""
    h = "sha256" if mech.endswith("256") else "sha512"
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        h, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server_key = hmac.new(salted, b"Server Key", h).digest()
    expected = hmac.new(server_key, auth, h).digest()
    return f"{without_proof},p={base64.b64encode(proof).decode()}", expected


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_an_rfc5802_client(users: UserStore, mech: str) -> None:
    exchange = make_exchange(mech, users, "servernonce")
    first_bare = "n=alice,r=clientnonce"
    step = exchange.step(f"n,,{first_bare}".encode())
    assert step.user is None
    server_first = step.challenge.decode()
    assert server_first.startswith("r=clientnonceservernonce,s=") and server_first.endswith(
        ",i=4096"
    )
    final, expected = _client_final(mech, "pencil", first_bare, server_first)
    done = exchange.step(final.encode())
    assert done.user == "alice"
    assert done.challenge == b"v=" + base64.b64encode(expected)
    with pytest.raises(AuthFailed) as again:
        exchange.step(b"more")
    assert again.value.reason is Reason.ILLEGAL_STATE


def test_scram_wrong_password_and_unknown_user_get_the_same_message(users: UserStore) -> None:
    exchange = make_exchange("SCRAM-SHA-256", users, "sn")
    server_first = exchange.step(b"n,,n=alice,r=cn").challenge.decode()
    final, _ = _client_final("SCRAM-SHA-256", "wrong", "n=alice,r=cn", server_first)
    with pytest.raises(AuthFailed) as wrong:
        exchange.step(final.encode())
    with pytest.raises(AuthFailed) as unknown:
        make_exchange("SCRAM-SHA-256", users, "sn").step(b"n,,n=mallory,r=cn")
    message = (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    assert wrong.value.message == unknown.value.message == message
    assert (wrong.value.reason, wrong.value.user) == (Reason.BAD_CREDENTIALS, "alice")
    assert (unknown.value.reason, unknown.value.user) == (Reason.BAD_CREDENTIALS, "mallory")


@pytest.mark.parametrize(
    "first", [b"", b"\xff\xfe", b"p=tls-server-end-point,,n=alice,r=x", b"n,,r=x", b"n,,n=alice"]
)
def test_scram_malformed_client_first(users: UserStore, first: bytes) -> None:
    with pytest.raises(AuthFailed) as failed:
        make_exchange("SCRAM-SHA-512", users, "sn").step(first)
    assert failed.value.reason is Reason.MALFORMED


def test_scram_final_with_a_changed_nonce_is_refused(users: UserStore) -> None:
    exchange = make_exchange("SCRAM-SHA-256", users, "sn")
    server_first = exchange.step(b"n,,n=alice,r=cn").challenge.decode()
    final, _ = _client_final("SCRAM-SHA-256", "pencil", "n=alice,r=cn", server_first)
    with pytest.raises(AuthFailed):
        exchange.step(final.replace("r=cnsn", "r=cnXX").encode())


def test_plain(users: UserStore) -> None:
    assert make_exchange("PLAIN", users, "").step(b"\x00alice\x00pencil").user == "alice"
    assert make_exchange("PLAIN", users, "").step(b"alice\x00alice\x00pencil").user == "alice"
    cases = {
        b"\x00alice\x00nope": "Authentication failed: Invalid username or password",
        b"\x00bob\x00pencil": "Authentication failed: Invalid username or password",
        b"bob\x00alice\x00pencil": "Authentication failed: Client requested an authorization "
        "id that is different from username",
    }
    for token, message in cases.items():
        with pytest.raises(AuthFailed) as failed:
            make_exchange("PLAIN", users, "").step(token)
        assert failed.value.message == message
    with pytest.raises(AuthFailed) as malformed:
        make_exchange("PLAIN", users, "").step(b"alice-pencil")
    assert malformed.value.reason is Reason.MALFORMED


def test_parse_listeners() -> None:
    got = parse_listeners("127.0.0.1:9092, SASL_SSL://localhost:9093,ssl://[::1]:9094")
    assert [(a.protocol, a.host, a.port) for a in got] == [
        (SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),
        (SecurityProtocol.SASL_SSL, "localhost", 9093),
        (SecurityProtocol.SSL, "::1", 9094),
    ]
    for bad in ("nonsense", "KERBEROS://h:1", "h:0", "h:1,h:1", "SSL://h"):
        with pytest.raises(ValueError):
            parse_listeners(bad)


def test_parse_mechanisms() -> None:
    assert parse_mechanisms("scram-sha-512, PLAIN") == ("SCRAM-SHA-512", "PLAIN")
    with pytest.raises(ValueError):
        parse_mechanisms("GSSAPI")


def test_users_file(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("# comment\n\nalice:pa:ss word\n  bob:x  \n")
    assert read_users_file(good) == [("alice", "pa:ss word"), ("bob", "x")]
    bad = tmp_path / "bad.txt"
    bad.write_text("alice:ok\nthe-secret-without-colon\n")
    with pytest.raises(UsersFileError) as failed:
        read_users_file(bad)
    assert "line 2" in str(failed.value) and "secret" not in str(failed.value).split(":", 1)[1]
    with pytest.raises(UsersFileError):
        read_users_file(tmp_path / "missing.txt")


def test_certificate_principal_is_kafkas_dn(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-certs.py"), str(tmp_path)],
        check=True,
        timeout=60,
    )
    import ssl

    der = ssl.PEM_cert_to_DER_cert((tmp_path / "alice.pem").read_text())
    assert certificate_principal(der) == "User:CN=alice,OU=ops"


def test_tls_failure_reasons() -> None:
    assert tls_failure_reason(OSError("certificate has expired")) is Reason.TLS_EXPIRED
    assert tls_failure_reason(OSError("[SSL: CERTIFICATE_VERIFY_FAILED] x")) is (
        Reason.TLS_UNTRUSTED
    )
    assert tls_failure_reason(OSError("PEER_DID_NOT_RETURN_A_CERTIFICATE")) is (
        Reason.TLS_NO_CERTIFICATE
    )
    assert tls_failure_reason(TimeoutError()) is Reason.TLS_HANDSHAKE


def test_refusals_are_counted_and_logged_once_within_a_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = AuthFailures(listener="SASL_PLAINTEXT://x:1", max_logged=2)
    with caplog.at_level(logging.INFO, logger="linkd.kafka"):
        for _ in range(3):
            failures.record("/10.0.0.1", "alice", Reason.BAD_CREDENTIALS, "d")
        failures.record("/10.0.0.2", "alice", Reason.BAD_CREDENTIALS, "d")
        failures.record("/10.0.0.3", None, Reason.TLS_UNTRUSTED, "d")
        failures.record("/10.0.0.1", "alice", Reason.BAD_CREDENTIALS, "d")  # forgotten: again
    assert failures.counts == {"bad_credentials": 5, "tls_untrusted_certificate": 1}
    assert len(failures._logged) == 2
    assert len([r for r in caplog.records if r.msg == "kafka: client refused"]) == 4
