"""Test certificates made with `cryptography`: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate the CA signed, and a client
certificate of another, untrusted CA.

    certs = make_certs(tmp_path / "certs")
    certs.ca, certs.server_cert, certs.server_key, certs.client_cert, ...

Every file is PEM. Keys are EC P-256 (fast to make). One module, so it can be
replaced by the project's certificate script later.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLIENT_DN = "CN=alice,OU=ops,O=ccr-sim"
"""The client certificate's subject in RFC 4514 form (Kafka's principal format)."""


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    untrusted_cert: Path
    untrusted_key: Path


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "O": NameOID.ORGANIZATION_NAME}
    # x509 names list the most general part first; RFC 4514 prints them reversed.
    order = [k for k in ("O", "OU", "CN") if k in parts]
    return x509.Name([x509.NameAttribute(oids[k], parts[k]) for k in order])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
             ) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    subject = _name(CN=name, O="ccr-sim")
    cert = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    subject: x509.Name,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    # A server's certificate is a client's too when its daemon dials a link
    # partner's mTLS listener (as a Kafka broker's keystore serves both ways).
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        _builder(subject, ca[0].subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages if server else usages[1:]), critical=False)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca[1], hashes.SHA256()), key


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey | None) -> tuple[Path, Path]:
    cert_path = directory / f"{stem}.crt"
    key_path = directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


def make_certs(directory: Path) -> Certs:
    """Writes the CA, server and client certificates under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("ccr-sim test CA")
    other = _ca("untrusted CA")
    server = _leaf(_name(CN="127.0.0.1", O="ccr-sim"), ca, server=True)
    client = _leaf(_name(CN="alice", OU="ops", O="ccr-sim"), ca, server=False)
    rogue = _leaf(_name(CN="mallory", O="ccr-sim"), other, server=False)
    ca_path, _ = _write(directory, "ca", ca[0], None)
    server_cert, server_key = _write(directory, "server", *server)
    client_cert, client_key = _write(directory, "client", *client)
    untrusted_cert, untrusted_key = _write(directory, "untrusted", *rogue)
    return Certs(ca_path, server_cert, server_key, client_cert, client_key,
                 untrusted_cert, untrusted_key)
