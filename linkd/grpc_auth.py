"""Authentication on the gRPC listener: TLS, mTLS and a SASL equivalent.

The listener's security protocol is Kafka's listener name, written as a prefix
of `--listen`: `PLAINTEXT://HOST:PORT` (also a bare `HOST:PORT`),
`SSL://HOST:PORT`, `SASL_PLAINTEXT://HOST:PORT`, `SASL_SSL://HOST:PORT`.

- SSL and SASL_SSL serve TLS with `--tls-cert`/`--tls-key`; with
  `--tls-client-ca` a client of an SSL listener must present a certificate that
  CA signed (mTLS), else the TLS handshake fails (SASL_SSL asks for none, as
  Kafka's `ssl.client.auth` applies to SSL listeners).
- On SASL_PLAINTEXT and SASL_SSL every call of the client-facing services
  (`ccr.v1.Cluster`, `ccr.v1.Admin`) must carry the call metadata
  `authorization: Basic base64(USER:PASSWORD)`, checked against the cluster's
  user store (`node.state.users`, `verify_password`). A call without it, with a
  malformed one, or with a wrong password is refused with UNAUTHENTICATED before
  any servicer runs. The `ccr.v1.Replication` service is authenticated by the
  link credentials (`--link-credentials`), not here. The standard health and
  reflection services (linkd/grpc_standard.py) answer without credentials:
  a probe holds none, and they tell only whether the daemon serves and the
  schema published in proto/.

`principal_of(context)` names the caller as Kafka does: `User:<name>` on SASL
listeners, `User:<subject DN>` for an mTLS client certificate on SSL
(`User:CN=alice,OU=ops`), else `User:ANONYMOUS`.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import hashlib
import logging
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import grpc
from grpc import aio

log = logging.getLogger("linkd.grpc_auth")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ANONYMOUS = "User:ANONYMOUS"
AUTHORIZATION_KEY = "authorization"
"""The metadata key of a call's credentials: `Basic base64(USER:PASSWORD)`."""
GUARDED_SERVICES = ("/ccr.v1.Cluster/", "/ccr.v1.Admin/")
"""The services whose calls need credentials on SASL listeners; any other
(Replication, grpc.health.v1.Health, server reflection) passes through."""

# A verified (user, password) pair is trusted again for this long without
# hashing the password anew; a password change or a deleted user takes effect
# within it.
VERIFIED_TTL_S = 10.0
_VERIFIED_MAX = 1024
_LOGGED_MAX = 1024

_PRINCIPAL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ccr_grpc_principal", default=None
)


# ---------------------------------------------------------------------------
# Listener settings
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Listener:
    """The gRPC listener: its security protocol and HOST:PORT."""

    protocol: str
    address: str

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        return f"{self.protocol}://{self.address}"


def parse_listener(text: str) -> Listener:
    """`PROTOCOL://HOST:PORT` or `HOST:PORT` (PLAINTEXT); ValueError names the fault."""
    protocol, sep, address = text.strip().partition("://")
    if not sep:
        protocol, address = "PLAINTEXT", text.strip()
    protocol = protocol.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"unknown security protocol {protocol!r} (known: {', '.join(SECURITY_PROTOCOLS)})"
        )
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return Listener(protocol, address)


def server_credentials(
    cert: Path, key: Path, client_ca: Path | None
) -> grpc.ServerCredentials:
    """TLS credentials of the listener; with `client_ca`, a client certificate
    signed by it is required."""
    root = client_ca.read_bytes() if client_ca is not None else None
    return grpc.ssl_server_credentials(
        [(key.read_bytes(), cert.read_bytes())],
        root_certificates=root,
        require_client_auth=root is not None,
    )


def tls_files_problem(cert: Path, key: Path) -> str | None:
    """What is wrong with a listener's certificate and key, naming the option
    and the file (None: they are a PEM certificate chain and the unencrypted
    private key of its first certificate). A key given as the certificate,
    or the other way round, is said to be one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_text, key_text = cert.read_bytes(), key.read_bytes()
    try:
        chain = x509.load_pem_x509_certificates(cert_text)
    except ValueError:
        looks = " (it holds a private key: give that file to --tls-key)" if (
            b"PRIVATE KEY-----" in cert_text
        ) else ""
        return f"--tls-cert {cert}: holds no PEM certificate{looks}"
    try:
        private = serialization.load_pem_private_key(key_text, password=None)
    except (ValueError, TypeError) as exc:
        if b"BEGIN CERTIFICATE" in key_text and b"PRIVATE KEY-----" not in key_text:
            return (
                f"--tls-key {key}: holds a certificate, not a private key "
                "(give that file to --tls-cert)"
            )
        return f"--tls-key {key}: holds no unencrypted PEM private key ({exc})"
    public = chain[0].public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != public:
        return f"--tls-key {key} is not the private key of the certificate in --tls-cert {cert}"
    return None


# ---------------------------------------------------------------------------
# Principals
# ---------------------------------------------------------------------------


def _first(auth: dict[str, list[bytes]], key: str) -> str:
    values = auth.get(key) or []
    return values[0].decode("utf-8", errors="replace") if values else ""


def certificate_principal(context: Any) -> str | None:
    """`User:<subject DN>` of the client certificate of a TLS call, if any."""
    try:
        auth: dict[str, list[bytes]] = dict(context.auth_context())
    except Exception:
        return None
    if _first(auth, "transport_security_type") != "ssl":
        return None
    subject = _first(auth, "x509_subject")
    if not subject and auth.get("x509_pem_cert"):
        subject = _subject_of_pem(auth["x509_pem_cert"][0])
    return f"User:{subject}" if subject else None


def _subject_of_pem(pem: bytes) -> str:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(pem).subject.rfc4514_string()
    except ValueError:
        return ""


def principal_of(context: Any) -> str:
    """The principal of the call whose servicer context this is.

    `User:<name>` once a SASL listener authenticated the call, else the
    subject of the client certificate (`User:CN=alice,OU=ops`), else
    `User:ANONYMOUS`.
    """
    authenticated = _PRINCIPAL.get()
    if authenticated is not None:
        return authenticated
    return certificate_principal(context) or ANONYMOUS


# ---------------------------------------------------------------------------
# SASL over call metadata
# ---------------------------------------------------------------------------


class PasswordVerifier(Protocol):
    """The cluster's user store, as this module uses it."""

    def verify_password(self, name: str, password: str) -> bool: ...


class Refused(Exception):
    """A call refused before its servicer ran; `reason` is the counter's key."""

    def __init__(self, reason: str, user: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.user = user
        self.message = message


def basic_credentials(metadata: Iterable[tuple[str, Any]] | None) -> tuple[str, str]:
    """(user, password) from `authorization: Basic ...`; Refused when absent or malformed."""
    values = [v for k, v in (metadata or ()) if k.lower() == AUTHORIZATION_KEY]
    if not values:
        raise Refused(
            "missing_credentials",
            "",
            "authentication required: this listener uses SASL; send call metadata "
            "'authorization: Basic base64(USER:PASSWORD)' (client config: "
            "security.protocol, sasl.username, sasl.password)",
        )
    value = values[0]
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    scheme, _, token = text.strip().partition(" ")
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        decoded = ""
    user, colon, password = decoded.partition(":")
    if scheme.lower() != "basic" or not colon or not user:
        raise Refused(
            "malformed_credentials",
            "",
            "authentication failed: the authorization metadata is not "
            "'Basic base64(USER:PASSWORD)'",
        )
    return user, password


class RefusalLog:
    """Counts refusals per reason; logs each (peer host, user, reason) once."""

    def __init__(self, max_logged: int = _LOGGED_MAX) -> None:
        self.counts: Counter[str] = Counter()
        self._logged: set[tuple[str, str, str]] = set()
        self._max_logged = max_logged

    def record(self, peer: str, refused: Refused) -> None:
        self.counts[refused.reason] += 1
        key = (_peer_host(peer), refused.user, refused.reason)
        if key in self._logged:
            return
        if len(self._logged) >= self._max_logged:
            self._logged.clear()  # a new burst is logged again, never dropped silently
        self._logged.add(key)
        log.info(
            "gRPC call refused: not authenticated",
            extra={
                "peer": key[0],
                "user": refused.user,
                "reason": refused.reason,
                "refusals_for_reason": self.counts[refused.reason],
            },
        )


def _peer_host(peer: str) -> str:
    """`ipv4:127.0.0.1:5555` -> `ipv4:127.0.0.1` (the port changes per connection)."""
    head, _, tail = peer.rpartition(":")
    return head if tail.isdigit() and head else peer


class PasswordCache:
    """Recently verified (user, password) pairs, bounded and short-lived.

    Keys hold a keyed hash of the password, never the password itself.
    """

    def __init__(self, ttl_s: float = VERIFIED_TTL_S, size: int = _VERIFIED_MAX) -> None:
        self._ttl_s = ttl_s
        self._size = size
        self._salt = secrets.token_bytes(16)
        self._entries: OrderedDict[tuple[str, bytes], float] = OrderedDict()

    def _key(self, user: str, password: str) -> tuple[str, bytes]:
        digest = hashlib.blake2b(password.encode("utf-8"), key=self._salt, digest_size=32)
        return (user, digest.digest())

    def hit(self, user: str, password: str, now: float) -> bool:
        key = self._key(user, password)
        until = self._entries.get(key)
        if until is None or until < now:
            self._entries.pop(key, None)
            return False
        return True

    def add(self, user: str, password: str, now: float) -> None:
        key = self._key(user, password)
        self._entries[key] = now + self._ttl_s
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)


Handler = Callable[[Any, Any], Awaitable[Any]]
if TYPE_CHECKING:  # grpc's classes are generic in its stubs only
    MethodHandler = grpc.RpcMethodHandler[Any, Any]
    _Interceptor = aio.ServerInterceptor[Any, Any]
else:
    MethodHandler = grpc.RpcMethodHandler
    _Interceptor = aio.ServerInterceptor


class SaslInterceptor(_Interceptor):
    """Refuses calls to the guarded services without valid credentials
    (UNAUTHENTICATED); an accepted call runs with its principal `User:<name>`."""

    def __init__(self, users: Callable[[], PasswordVerifier | None]) -> None:
        self._users = users
        self.refusals = RefusalLog()
        self._verified = PasswordCache()

    def authenticate(self, metadata: Iterable[tuple[str, Any]] | None) -> str:
        """The principal of a call's metadata; Refused when it is not valid."""
        user, password = basic_credentials(metadata)
        now = time.monotonic()
        if self._verified.hit(user, password, now):
            return f"User:{user}"
        store = self._users()
        if store is None or not store.verify_password(user, password):
            raise Refused(
                "bad_credentials",
                user,
                f"authentication failed: invalid username or password (user {user!r})",
            )
        self._verified.add(user, password, now)
        return f"User:{user}"

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler:
        handler = await continuation(handler_call_details)
        method = str(handler_call_details.method)
        if handler is None or not method.startswith(GUARDED_SERVICES):
            return handler
        inner = handler.unary_unary
        if inner is None:  # every guarded method is unary; refuse anything else
            return _refusing_stream(handler)
        return grpc.unary_unary_rpc_method_handler(
            self._guard(inner),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _guard(self, inner: Handler) -> Handler:
        async def guarded(request: Any, context: Any) -> Any:
            try:
                principal = self.authenticate(context.invocation_metadata())
            except Refused as refused:
                self.refusals.record(str(context.peer()), refused)
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, refused.message)
                raise AssertionError("unreachable: abort raises") from None
            token = _PRINCIPAL.set(principal)
            try:
                return await inner(request, context)
            finally:
                _PRINCIPAL.reset(token)

        return guarded


def _refusing_stream(handler: MethodHandler) -> MethodHandler:
    async def refuse(request: Any, context: Any) -> Any:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED, "streaming calls are not served on SASL listeners"
        )

    return grpc.unary_unary_rpc_method_handler(
        refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
