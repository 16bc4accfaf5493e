"""How a client reaches a secured cluster: TLS, client certificates, SASL.

The keys are Kafka client properties, with confluent-kafka's (librdkafka's)
names, in the same config dict as `bootstrap.servers`:

    security.protocol          PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    ssl.ca.location            PEM CA certificates that sign the cluster's
                               certificate (default: the system's roots)
    ssl.certificate.location   PEM client certificate, for mTLS listeners
    ssl.key.location           PEM private key of ssl.certificate.location
    sasl.mechanism             PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512
                               (also spelled sasl.mechanisms)
    sasl.username, sasl.password   the user, on SASL_* listeners

Over gRPC a SASL client sends `authorization: Basic base64(USER:PASSWORD)` in
every call's metadata; the cluster checks it against its user store whatever
the mechanism names, so the password crosses the wire: use SASL_SSL.

`diagnose` turns the connection failures of a security mismatch (a PLAINTEXT
client at a TLS listener, a TLS client at a plaintext one, a client
certificate the listener refuses) into one clear, non-retriable error.
"""

from __future__ import annotations

import base64
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from admin.errors import CcrError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECURITY_KEYS = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
)
MISMATCH = "SECURITY_PROTOCOL_MISMATCH"
SSL_HANDSHAKE_FAILED = "SSL_HANDSHAKE_FAILED"
_PROBE_TIMEOUT_S = 1.0
_PROBE_EVERY_S = 5.0
# Failures that do not show the cluster answered.
_NOT_ANSWERED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "CLOSED", "UNKNOWN"})


@dataclass(frozen=True)
class ClientSecurity:
    """The security settings of one client (PLAINTEXT when built empty)."""

    protocol: str = "PLAINTEXT"
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    username: str = ""
    password: str = ""
    ca_path: str = ""
    cert_path: str = ""
    key_path: str = ""

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata every call carries (the SASL credentials)."""
        if not self.sasl:
            return ()
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return (("authorization", f"Basic {token}"),)

    def __repr__(self) -> str:  # never shows the password or key bytes
        return (
            f"ClientSecurity(protocol={self.protocol!r}, ca={self.ca_path!r}, "
            f"cert={self.cert_path!r}, username={self.username!r})"
        )


def _read(config: Mapping[str, Any], key: str) -> tuple[bytes | None, str]:
    raw = config.get(key)
    if raw is None or str(raw).strip() == "":
        return None, ""
    path = str(raw).strip()
    try:
        return Path(path).read_bytes(), path
    except OSError as exc:
        raise ValueError(f"config {key}: cannot read {path}: {exc.strerror or exc}") from None


def security_of(config: Mapping[str, Any]) -> ClientSecurity:
    """The security settings in a client config dict; ValueError names a bad key."""
    protocol = str(config.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"config security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {config.get('security.protocol')!r}"
        )
    if protocol == "PLAINTEXT":
        return ClientSecurity()
    mechanism = str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "PLAIN")))
    if protocol.startswith("SASL_") and mechanism.strip().upper() not in SASL_MECHANISMS:
        raise ValueError(
            f"config sasl.mechanism must be one of {', '.join(SASL_MECHANISMS)}, "
            f"got {mechanism!r}"
        )
    username = str(config.get("sasl.username") or "")
    password = str(config.get("sasl.password") or "")
    if protocol.startswith("SASL_") and not (username and "sasl.password" in config):
        raise ValueError(f"security.protocol {protocol} needs sasl.username and sasl.password")
    ca, ca_path = _read(config, "ssl.ca.location")
    cert, cert_path = _read(config, "ssl.certificate.location")
    key, key_path = _read(config, "ssl.key.location")
    if (cert is None) != (key is None):
        raise ValueError("config ssl.certificate.location and ssl.key.location go together")
    if protocol in ("SSL", "SASL_SSL"):
        return ClientSecurity(
            protocol, ca, cert, key, username, password, ca_path, cert_path, key_path
        )
    return ClientSecurity(protocol, username=username, password=password)


# ---------------------------------------------------------------------------
# Channels
# ---------------------------------------------------------------------------


if TYPE_CHECKING:  # generic in grpc's stubs only
    _UnaryInterceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
else:
    _UnaryInterceptor = grpc.UnaryUnaryClientInterceptor


class _Metadata(_UnaryInterceptor):
    """Adds the credentials to every unary call."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], client_call_details: Any, request: Any
    ) -> Any:
        extra = (*tuple(client_call_details.metadata or ()), *self._metadata)
        return continuation(_CallDetails(client_call_details, extra), request)


class _CallDetails(grpc.ClientCallDetails):
    """The details of a call, with the credentials added to its metadata."""

    def __init__(self, base: Any, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = getattr(base, "compression", None)


def open_channel(
    target: str, security: ClientSecurity, options: list[tuple[str, Any]] | None = None
) -> grpc.Channel:
    """A channel to `target` speaking the configured protocol."""
    opts = list(options or [])
    if security.tls:
        creds = grpc.ssl_channel_credentials(security.ca, security.key, security.cert)
        channel = grpc.secure_channel(target, creds, options=opts)
    else:
        channel = grpc.insecure_channel(target, options=opts)
    if security.sasl:
        return grpc.intercept_channel(channel, _Metadata(security.metadata()))
    return channel


# ---------------------------------------------------------------------------
# Telling a security mismatch from an unreachable cluster
# ---------------------------------------------------------------------------


def _probe_context(security: ClientSecurity) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    if security.cert_path and security.key_path:
        ctx.load_cert_chain(security.cert_path, security.key_path)
    return ctx


def probe_tls(target: str, security: ClientSecurity) -> str:
    """What a TLS handshake with `target` shows: "tls" (it speaks TLS and
    accepts us), "refused-cert" (it speaks TLS but closes on our certificate or
    its absence), "plain" (it does not speak TLS), or "down" (no connection)."""
    host, _, port = target.rpartition(":")
    try:
        raw = socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S)
    except OSError:
        return "down"
    try:
        with _probe_context(security).wrap_socket(raw, server_hostname=host) as tls:
            tls.settimeout(0.5)
            try:
                # A gRPC server speaks first (HTTP/2 settings); with TLS 1.3 a
                # refused client certificate shows as an alert or a close here.
                first = tls.recv(1)
            except (TimeoutError, BlockingIOError):
                return "tls"
            except (ssl.SSLError, ConnectionError):
                return "refused-cert"
            return "tls" if first else "refused-cert"
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        return "refused-cert" if "CERTIFICATE" in reason.upper() else "plain"
    except TimeoutError:
        # Connected, but no handshake answered in time: a daemon still
        # starting (its port bound before it serves) or a loaded machine, not
        # a plaintext listener, which answers a ClientHello at once.
        return "down"
    except OSError:
        return "plain"  # (closed or reset on our ClientHello)
    finally:
        raw.close()


class Diagnosis:
    """Probes a cluster after an UNAVAILABLE call, at most every few seconds,
    and names a security mismatch when there is one.

    Only until a call succeeds: a mismatch is a setting, there from the first
    call, so a client that has been answered never probes (a probe may block
    its caller for up to a few seconds)."""

    def __init__(self, target: str, security: ClientSecurity) -> None:
        self.target = target
        self.security = security
        self.answered = False
        self._last_at = -_PROBE_EVERY_S
        self._last: CcrError | None = None

    def explain(self, err: CcrError) -> CcrError:
        if err.code not in _NOT_ANSWERED:
            self.answered = True  # the cluster itself refused: the transport works
        if err.code != "UNAVAILABLE" or self.answered:
            return err
        now = time.monotonic()
        if now - self._last_at >= _PROBE_EVERY_S:
            self._last_at = now
            self._last = self._mismatch(err.message)
        return self._last or err

    def _mismatch(self, detail: str) -> CcrError | None:
        proto = self.security.protocol
        if not self.security.tls:
            if probe_tls(self.target, self.security) in ("tls", "refused-cert"):
                return CcrError(
                    MISMATCH,
                    f"the listener at {self.target} speaks TLS but security.protocol is "
                    f"{proto}: set security.protocol to SSL or SASL_SSL",
                    resource=self.target,
                )
            return None
        seen = probe_tls(self.target, self.security)
        if seen == "plain" or "WRONG_VERSION_NUMBER" in detail:
            return CcrError(
                MISMATCH,
                f"the listener at {self.target} does not speak TLS but security.protocol is "
                f"{proto}: set security.protocol to PLAINTEXT or SASL_PLAINTEXT",
                resource=self.target,
            )
        if seen == "refused-cert":
            which = (
                f"the client certificate {self.security.cert_path}"
                if self.security.cert_path
                else "no client certificate (ssl.certificate.location)"
            )
            return CcrError(
                SSL_HANDSHAKE_FAILED,
                f"the listener at {self.target} refused the TLS handshake: it requires a "
                f"client certificate signed by a CA it trusts, and this client sent {which}",
                resource=self.target,
            )
        if "handshake" in detail.lower() or "certificate" in detail.lower():
            return CcrError(
                SSL_HANDSHAKE_FAILED,
                f"TLS handshake with {self.target} failed (is ssl.ca.location the CA that "
                f"signed the cluster's certificate?): {detail}",
                resource=self.target,
            )
        return None


# ---------------------------------------------------------------------------
# ccr-admin --command-config: a Kafka client properties file
# ---------------------------------------------------------------------------

COMMAND_CONFIG_KEYS = (*SECURITY_KEYS, "sasl.jaas.config")
_JAAS_MECHANISMS = {"PlainLoginModule": "PLAIN", "ScramLoginModule": "SCRAM-SHA-512"}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_properties(text: str) -> dict[str, str]:
    """`key=value` / `key: value` lines as Java reads them: `#` and `!`
    comments, a trailing backslash continues a line."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        key, value = (match.group(1), match.group(2)) if match else (logical, "")
        out[key] = value.strip()
        logical = ""
    return out


def _from_jaas(props: dict[str, str]) -> dict[str, str]:
    """sasl.jaas.config (Java clients' form) as sasl.username / sasl.password."""
    jaas = props.pop("sasl.jaas.config", "")
    if not jaas:
        return props
    options = {k: v.replace('\\"', '"') for k, v in _JAAS_OPTION.findall(jaas)}
    if "username" not in options or "password" not in options:
        raise ValueError('sasl.jaas.config needs username="..." and password="..."')
    props.setdefault("sasl.username", options["username"])
    props.setdefault("sasl.password", options["password"])
    for module, mechanism in _JAAS_MECHANISMS.items():
        if module in jaas:
            props.setdefault("sasl.mechanism", mechanism)
    return props


def read_command_config(path: Path) -> dict[str, str]:
    """The client security settings of a Kafka client properties file (the
    `--command-config` of Kafka's CLI tools); ValueError on unknown keys."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--command-config {path}: {exc.strerror or exc}") from None
    props = parse_properties(text)
    unknown = sorted(set(props) - set(COMMAND_CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"--command-config {path}: unknown keys {', '.join(unknown)} "
            f"(known: {', '.join(COMMAND_CONFIG_KEYS)})"
        )
    props = _from_jaas(props)
    try:
        security_of(props)
    except ValueError as exc:
        raise ValueError(f"--command-config {path}: {exc}") from None
    return props
