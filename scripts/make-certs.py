#!/usr/bin/env python3
"""Test certificates for the Kafka listener's TLS: `python scripts/make-certs.py DIR`.

Writes PEM files into DIR (created if missing):
  ca.pem                      the test CA (trusted by the daemon and by clients)
  server.pem, server.key      the listener's certificate for 127.0.0.1 and localhost
  alice.pem, alice.key        a client certificate, subject CN=alice,OU=ops
  bob.pem, bob.key            a client certificate, subject CN=bob
  rogue-ca.pem                a CA nobody trusts
  rogue.pem, rogue.key        a client certificate it signed (CN=mallory)
  expired.pem, expired.key    a client certificate of the test CA that has expired
Keys are EC P-256, unencrypted: for tests only.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Key = ec.EllipticCurvePrivateKey
NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME}
    # Issuance order (most general first), so the RFC 2253 form reads CN first.
    order = ["O", "OU", "CN"]
    return x509.Name([x509.NameAttribute(oids[k], parts[k]) for k in order if k in parts])


def _key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _write(out: Path, stem: str, cert: x509.Certificate, key: Key | None) -> None:
    (out / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        (out / f"{stem}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )


def _ca(cn: str) -> tuple[x509.Certificate, Key]:
    key = _key()
    name = _name(CN=cn, O="ccr-sim tests")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - DAY)
        .not_valid_after(NOW + 3650 * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, Key],
    subject: x509.Name,
    *,
    server: bool,
    not_after: datetime.datetime,
) -> tuple[x509.Certificate, Key]:
    ca_cert, ca_key = ca
    key = _key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(min(NOW - DAY, not_after - DAY))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    ca = _ca("ccr-sim test CA")
    rogue_ca = _ca("rogue CA")
    _write(out, "ca", ca[0], None)
    _write(out, "rogue-ca", rogue_ca[0], None)
    later = NOW + 825 * DAY
    leaves = {
        "server": (ca, _name(CN="localhost"), True, later),
        "alice": (ca, _name(CN="alice", OU="ops"), False, later),
        "bob": (ca, _name(CN="bob"), False, later),
        "rogue": (rogue_ca, _name(CN="mallory"), False, later),
        "expired": (ca, _name(CN="old", OU="ops"), False, NOW - 2 * DAY),
    }
    for stem, (issuer, subject, server, not_after) in leaves.items():
        cert, key = _leaf(issuer, subject, server=server, not_after=not_after)
        _write(out, stem, cert, key)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make-certs.py DIR", file=sys.stderr)
        return 2
    make(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
