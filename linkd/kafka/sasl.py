"""SASL on the Kafka listener: the server side of PLAIN and SCRAM (RFC 5802,
RFC 7677), as Kafka's PlainSaslServer and ScramSaslServer behave.

Rules:
- An exchange is made for the mechanism a SaslHandshake chose and fed each
  SaslAuthenticate's bytes (`step`); it answers the bytes to send back and,
  once done, the authenticated user. A failure raises `AuthFailed` with the
  reason (for the listener's log and counters), the user it named if any,
  and the message the client gets: Kafka's, which never tells a wrong
  password from an unknown user (SCRAM) and never echoes a secret.
- PLAIN: "authzid NUL authcid NUL password"; an authzid other than the user
  is refused; the password is checked against the user's stored SCRAM
  credentials (`UserStore.verify_password`): no plain password is kept.
- SCRAM: client-first "n,[a=user],n=user,r=nonce" (no channel binding, as
  Kafka), server-first "r=nonce+ours,s=salt,i=iterations", client-final
  "c=biws,r=nonce,p=proof", server-final "v=signature". The server nonce
  comes from the caller (the listener draws it). An unknown user fails at the
  first message, a wrong proof at the final one, both with the same message.
- An exchange holds at most one client-first message (bounded by the
  listener's limit on frames before authentication) and ends after its
  final step: a step after that is ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
from dataclasses import dataclass

from linkd.core.users import ScramMechanism, UserStore, digest, hmac_digest

PLAIN = "PLAIN"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISMS = MECHANISMS
# Kafka's sasl.server.max.receive.size: the largest frame read before a
# connection has authenticated.
MAX_RECEIVE_BEFORE_AUTH = 524_288


class Reason(enum.Enum):
    """Why a client was refused (the listener counts and logs by it)."""

    BAD_CREDENTIALS = "bad_credentials"  # wrong password or unknown user
    MALFORMED = "malformed_sasl_message"
    UNSUPPORTED_MECHANISM = "unsupported_sasl_mechanism"
    ILLEGAL_STATE = "illegal_sasl_state"
    TLS_UNTRUSTED = "tls_untrusted_certificate"
    TLS_EXPIRED = "tls_expired_certificate"
    TLS_NO_CERTIFICATE = "tls_no_client_certificate"
    TLS_HANDSHAKE = "tls_handshake_failed"


class AuthFailed(Exception):
    def __init__(self, reason: Reason, user: str | None, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.user = user
        self.message = message


def invalid_credentials(mechanism: str) -> str:
    """Kafka's message for any SaslException in an exchange."""
    return (
        "Authentication failed during authentication due to invalid credentials with "
        f"SASL mechanism {mechanism}"
    )


@dataclass(frozen=True, slots=True)
class Step:
    challenge: bytes
    user: str | None  # set when the exchange completed


class Exchange:
    mechanism: str

    def step(self, token: bytes) -> Step:
        raise NotImplementedError


class PlainExchange(Exchange):
    mechanism = PLAIN

    def __init__(self, users: UserStore) -> None:
        self._users = users
        self._done = False

    def step(self, token: bytes) -> Step:
        if self._done:
            raise AuthFailed(Reason.ILLEGAL_STATE, None, "SASL/PLAIN exchange is complete")
        self._done = True
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthFailed(Reason.MALFORMED, None, invalid_credentials(PLAIN))
        authzid, user_b, password_b = parts
        try:
            user, password, authz = user_b.decode(), password_b.decode(), authzid.decode()
        except UnicodeDecodeError:
            raise AuthFailed(Reason.MALFORMED, None, invalid_credentials(PLAIN)) from None
        if not user or not password:
            raise AuthFailed(
                Reason.MALFORMED,
                user or None,
                "Authentication failed: username not specified"
                if not user
                else "Authentication failed: password not specified",
            )
        if authz and authz != user:
            raise AuthFailed(
                Reason.BAD_CREDENTIALS,
                user,
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
            )
        if not self._users.verify_password(user, password):
            raise AuthFailed(
                Reason.BAD_CREDENTIALS,
                user,
                "Authentication failed: Invalid username or password",
            )
        return Step(b"", user)


def _attrs(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if sep and len(key) == 1 and key not in out:
            out[key] = value
    return out


def _saslname(name: str) -> str | None:
    """RFC 5802's escaping: "=2C" is ",", "=3D" is "="; any other "=" is invalid."""
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        return None
    return out


class ScramExchange(Exchange):
    def __init__(self, users: UserStore, mechanism: ScramMechanism, server_nonce: str) -> None:
        self.mechanism = mechanism.mechanism_name
        self._scram = mechanism
        self._users = users
        self._server_nonce = server_nonce
        self._state = 0  # 0: want client-first; 1: want client-final; 2: done
        self._user: str | None = None
        self._first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._nonce = ""

    def _fail(self, reason: Reason) -> AuthFailed:
        self._state = 2
        return AuthFailed(reason, self._user, invalid_credentials(self.mechanism))

    def step(self, token: bytes) -> Step:
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise self._fail(Reason.MALFORMED) from None
        if self._state == 0:
            return self._client_first(text)
        if self._state == 1:
            return self._client_final(text)
        raise AuthFailed(Reason.ILLEGAL_STATE, self._user, "SCRAM exchange is complete")

    def _client_first(self, text: str) -> Step:
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if flag != "n" or not sep1 or not sep2 or (authzid and not authzid.startswith("a=")):
            raise self._fail(Reason.MALFORMED)
        attrs = _attrs(bare)
        user = _saslname(attrs.get("n", ""))
        nonce = attrs.get("r", "")
        if not bare.startswith("n=") or not user or not nonce:
            raise self._fail(Reason.MALFORMED)
        self._user = user
        if authzid and _saslname(authzid[2:]) != user:
            raise self._fail(Reason.BAD_CREDENTIALS)
        cred = self._users.credential(user, self._scram)
        if cred is None:
            raise self._fail(Reason.BAD_CREDENTIALS)
        self._gs2 = f"{flag},{authzid},"
        self._first_bare = bare
        self._nonce = nonce + self._server_nonce
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        self._state = 1
        return Step(self._server_first.encode(), None)

    def _client_final(self, text: str) -> Step:
        self._state = 2
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = _attrs(without_proof)
        expected_c = base64.b64encode(self._gs2.encode()).decode()
        if not sep or attrs.get("c") != expected_c or attrs.get("r") != self._nonce:
            raise self._fail(Reason.MALFORMED)
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise self._fail(Reason.MALFORMED) from None
        assert self._user is not None
        cred = self._users.credential(self._user, self._scram)
        if cred is None:  # deleted meanwhile
            raise self._fail(Reason.BAD_CREDENTIALS)
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac_digest(self._scram, cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._fail(Reason.BAD_CREDENTIALS)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(digest(self._scram, client_key), cred.stored_key):
            raise self._fail(Reason.BAD_CREDENTIALS)
        server_signature = hmac_digest(self._scram, cred.server_key, auth_message)
        final = "v=" + base64.b64encode(server_signature).decode()
        return Step(final.encode(), self._user)


def make_exchange(mechanism: str, users: UserStore, server_nonce: str) -> Exchange:
    """The exchange of an enabled mechanism name (the caller checked it)."""
    if mechanism == PLAIN:
        return PlainExchange(users)
    scram = ScramMechanism.from_name(mechanism)
    assert scram is not None, mechanism
    return ScramExchange(users, scram, server_nonce)
