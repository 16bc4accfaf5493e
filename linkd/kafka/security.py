"""Who a Kafka listener lets in: its security protocol, TLS, and the record
of refused clients.

Rules (Kafka's listeners, `listeners=PROTOCOL://HOST:PORT,...`):
- PLAINTEXT: no authentication, every client is User:ANONYMOUS (the default,
  and what a bare HOST:PORT means).
- SSL: TLS; with a client CA (`--tls-client-ca`, Kafka's
  `ssl.client.auth=required`) a client must present a certificate it signed,
  and its principal is `User:` + the certificate subject's distinguished name
  as Kafka's default principal builder prints it (RFC 2253: most specific
  first, `CN=alice,OU=ops`); without one, User:ANONYMOUS.
- SASL_PLAINTEXT, SASL_SSL: SaslHandshake and SaslAuthenticate (see
  `linkd/kafka/sasl.py`) before anything but ApiVersions; then `User:<name>`.
- A refused client (bad credentials, an untrusted, expired or missing
  certificate, a broken handshake) is counted per reason (`counts`) and
  logged at info once per (client address, user, reason), without any
  secret; the set of what was logged is bounded (MAX_LOGGED, oldest first
  out).
"""

from __future__ import annotations

import enum
import logging
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509

from linkd.core.users import MAX_NAME_CHARS
from linkd.kafka.sasl import DEFAULT_MECHANISMS, MECHANISMS, Reason

log = logging.getLogger("linkd.kafka")

MAX_LOGGED = 4096
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerAddress:
    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        plain = self.protocol is SecurityProtocol.PLAINTEXT
        return f"{self.host}:{self.port}" + ("" if plain else f" ({self.protocol.value})")


def parse_listeners(text: str) -> list[ListenerAddress]:
    """`PROTOCOL://HOST:PORT[,...]` (a bare HOST:PORT is PLAINTEXT);
    ValueError naming the bad entry."""
    out: list[ListenerAddress] = []
    for entry in (e.strip() for e in text.split(",")):
        proto_name, sep, address = entry.partition("://")
        if not sep:
            proto_name, address = "PLAINTEXT", entry
        try:
            protocol = SecurityProtocol(proto_name.upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ValueError(
                f"--kafka-listen {entry!r}: unknown security protocol (known: {known})"
            ) from None
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--kafka-listen {entry!r} is not HOST:PORT (or PROTOCOL://HOST:PORT)")
        out.append(ListenerAddress(protocol, host.strip("[]"), int(port)))
    if len({(a.host, a.port) for a in out}) != len(out):
        raise ValueError(f"--kafka-listen {text!r}: two listeners on the same address")
    return out


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None

    def server_context(self, *, client_auth: bool) -> ssl.SSLContext:
        """OSError / ssl.SSLError if a file cannot be read or does not match."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert), str(self.key))
        if client_auth and self.client_ca is not None:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cafile=str(self.client_ca))
        return ctx


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What one listener requires of its clients."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    client_auth: bool = False  # a client certificate is required (and names the principal)
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS

    @classmethod
    def of(
        cls,
        protocol: SecurityProtocol,
        tls: TlsFiles | None,
        mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS,
    ) -> ListenerSecurity:
        context = None
        client_auth = False
        if protocol.tls:
            if tls is None:
                raise ValueError(f"a {protocol.value} listener needs --tls-cert and --tls-key")
            client_auth = protocol is SecurityProtocol.SSL and tls.client_ca is not None
            context = tls.server_context(client_auth=client_auth)
        return cls(protocol, context, client_auth, mechanisms)


def certificate_principal(der: bytes) -> str:
    """Kafka's default SSL principal: User: + the subject DN (RFC 2253)."""
    cert = x509.load_der_x509_certificate(der)
    return "User:" + cert.subject.rfc4514_string()


def tls_failure_reason(exc: BaseException) -> Reason:
    """Which refusal a failed TLS handshake was, from OpenSSL's words."""
    text = f"{getattr(exc, 'reason', '')} {getattr(exc, 'verify_message', '')} {exc}".lower()
    if "expired" in text:
        return Reason.TLS_EXPIRED
    if "did_not_return_a_certificate" in text or "certificate required" in text:
        return Reason.TLS_NO_CERTIFICATE
    if "verify_failed" in text or "unknown ca" in text or "unable to get" in text:
        return Reason.TLS_UNTRUSTED
    return Reason.TLS_HANDSHAKE


@dataclass
class AuthFailures:
    """Refused clients: a count per reason, and one info line per (client
    address, user, reason)."""

    listener: str = ""
    max_logged: int = MAX_LOGGED
    counts: dict[str, int] = field(default_factory=dict)
    _logged: OrderedDict[tuple[str, str, str], None] = field(default_factory=OrderedDict)

    def record(self, client: str, user: str | None, reason: Reason, detail: str) -> None:
        self.counts[reason.value] = self.counts.get(reason.value, 0) + 1
        key = (client, user or "", reason.value)
        if key in self._logged:
            return
        if len(self._logged) >= self.max_logged:
            self._logged.popitem(last=False)
        self._logged[key] = None
        log.info(
            "kafka: client refused",
            extra={
                "listener": self.listener,
                "client": client,
                "principal": f"User:{user}" if user else "",
                "reason": reason.value,
                "detail": detail,
                "refused_for_reason": self.counts[reason.value],
            },
        )


class UsersFileError(ValueError):
    """A --sasl-users file that cannot be used; the message names the line
    and never holds a password."""


def read_users_file(path: Path) -> list[tuple[str, str]]:
    """`name:password` per line; blank lines and `#` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsersFileError(f"cannot read {path}: {exc}") from None
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, password = line.partition(":")
        name = name.strip()
        where = f"{path}, line {number}"
        if not sep or not name or not password:
            raise UsersFileError(f"{where}: expected name:password (both non-empty)")
        if len(name) > MAX_NAME_CHARS or any(c in name for c in ",= \t"):
            raise UsersFileError(
                f"{where}: user name must be 1 to {MAX_NAME_CHARS} characters, "
                "without ',', '=' or spaces"
            )
        if name in users:
            raise UsersFileError(f"{where}: user {name!r} is listed twice")
        users[name] = password
    return list(users.items())


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """A comma-separated list of SASL mechanisms; ValueError for an unknown one."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown or not names:
        raise ValueError(
            f"unknown SASL mechanism(s) {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(MECHANISMS)})"
        )
    return names
