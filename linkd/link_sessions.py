"""The shell of link sessions: both ends of `linkd.core.link_auth` over gRPC.

- `LinkSecurity` is one daemon's part: its password encoder (`SecretBox`),
  the link credentials it requires of callers (`--link-credentials-file`,
  re-read when the file changes, or `CCR_LINK_CREDENTIALS`), the sessions it
  serves (`link_auth.LinkSessions`) and the refusals it logged (once per
  caller address and reason, at info level, never with a secret).
- A caller opens a session with `open_session` (Challenge, then
  OpenSession), signs each call with `ClientSession.sign` and checks each
  answer's mac (`call_signed`: the answer's bytes as received, before they
  are decoded); a callee signs each answer it sends with `answer_metadata`
  (trailing metadata, over the bytes sent: `linkd.replication`).
"""

from __future__ import annotations

import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from grpc import aio

from ccr.v1 import replication_pb2, replication_pb2_grpc
from linkd.core import link_auth as auth
from linkd.core.errors import ClusterError
from linkd.core.links import LinkConfig, LinkSecrets, LinkTable
from linkd.link_channels import NO_TLS, LinkTls
from linkd.secret_box import SecretBox, legacy

log = logging.getLogger("linkd.link_sessions")

SESSION_KEY = "ccr-link-session"
SEQ_KEY = "ccr-link-seq"
MAC_KEY = "ccr-link-mac"
# The callee's proof of an answer (`link_auth.answer_mac`, hex), in its
# trailing metadata.
ANSWER_MAC_KEY = "ccr-link-answer-mac"
REPLICATION_SERVICE = "ccr.v1.Replication"
CREDENTIALS_ENV = "CCR_LINK_CREDENTIALS"
MAX_LOGGED_REFUSALS = 1024


@dataclass(frozen=True, slots=True)
class LinkIdentity:
    """What a caller needs to open a session of one link (secrets opened)."""

    link_id: str
    link_name: str
    local_cluster_id: str
    remote_cluster_id: str
    link_key: bytes
    credential: str  # this side's credentials for the remote ("" if none)
    creating: bool = False


def link_key_of(box: SecretBox, sealed_key: str, sealed_credentials: str, what: str) -> bytes:
    """The link's key; for a link created before keys existed, the key both
    sides derive from their shared credentials field."""
    key = box.open_bytes(sealed_key, what)
    return auth.link_key_or_legacy(key, "" if key else box.open(sealed_credentials, what))


def identity_of(box: SecretBox, config: LinkConfig, creating: bool = False) -> LinkIdentity:
    what = f"link {config.name!r}: its stored secrets"
    credentials = config.value("credentials")
    return LinkIdentity(
        config.link_id,
        config.name,
        config.local_cluster_id,
        config.remote_cluster_id,
        link_key_of(box, config.value("link_key"), credentials, what),
        "" if legacy(credentials) else box.open(credentials, what),
        creating,
    )


def identity_of_secrets(box: SecretBox, cluster_id: str, s: LinkSecrets) -> LinkIdentity:
    what = f"link {s.name!r}: its stored secrets"
    return LinkIdentity(
        s.link_id,
        s.name,
        cluster_id,
        s.remote_cluster_id,
        link_key_of(box, s.link_key, s.credentials, what),
        "" if legacy(s.credentials) else box.open(s.credentials, what),
    )


def request_digest(request: Message) -> bytes:
    return auth.request_digest(request.SerializeToString(deterministic=True))


Metadata = tuple[tuple[str, str], ...]
# A Replication method's call on a channel, in bytes both ways (`raw_method`).
RawCall = aio.UnaryUnaryMultiCallable[bytes, bytes]


@dataclass(frozen=True, slots=True)
class SignedCall:
    """One call as signed: what its answer must be bound to."""

    method: str
    seq: int
    metadata: Metadata


@dataclass(slots=True)
class ClientSession:
    """A session this side opened; signs its calls and checks their answers."""

    signer: auth.CallSigner
    address: str
    identity: LinkIdentity

    def metadata(self, method: str, request: Message) -> Metadata:
        return self.metadata_of_body(method, request.SerializeToString(deterministic=True))

    def metadata_of_body(self, method: str, body: bytes) -> Metadata:
        return self.sign(method, body).metadata

    def sign(self, method: str, body: bytes) -> SignedCall:
        """A call whose request is `body`, its deterministic encoding (sent
        as it is: a request is encoded once)."""
        seq, mac = self.signer.sign(method, auth.request_digest(body))
        metadata = ((SESSION_KEY, self.signer.session_id), (SEQ_KEY, str(seq)),
                    (MAC_KEY, mac.hex()))  # fmt: skip
        return SignedCall(method, seq, metadata)

    def check_answer(self, call: SignedCall, answer: bytes, trailing: Any) -> None:
        """Refuses (ClusterError, LINK_AUTHENTICATION_FAILED) the answer to
        `call` unless its trailing metadata proves its bytes as received."""
        what = (
            f"link {self.identity.link_name!r}: cluster {self.identity.remote_cluster_id!r} "
            f"at {self.address}"
        )
        self.signer.check_answer(
            what, call.method, call.seq, auth.request_digest(answer), answer_mac_of(trailing)
        )


def answer_mac_of(metadata: Any) -> bytes | None:
    """The answer mac in a call's trailing metadata; None when there is none,
    b"" when it does not read (the core refuses either by name)."""
    for key, value in metadata or ():
        if key == ANSWER_MAC_KEY:
            try:
                return bytes.fromhex(value) if isinstance(value, str) else b""
            except ValueError:
                return b""
    return None


def answer_metadata(key: bytes, method: str, seq: int, answer: bytes) -> Metadata:
    """The callee's trailing metadata for `answer`, the bytes it sends to call
    `seq` of `method` in the session of `key`."""
    return ((ANSWER_MAC_KEY, auth.answer_mac(key, method, seq, auth.request_digest(answer)).hex()),)


def raw_method(channel: aio.Channel, method: str) -> RawCall:
    """The channel's call of a Replication `method` sending and receiving
    bytes: the request already encoded, the answer as received (its mac is
    checked over those bytes, then it is decoded)."""
    return channel.unary_unary(
        f"/{REPLICATION_SERVICE}/{method}", request_serializer=None, response_deserializer=None
    )


async def call_signed(
    session: ClientSession,
    call: RawCall,
    method: str,
    body: bytes,
    timeout_s: float,
) -> bytes:
    """One call of `method` (`call`: its `raw_method`) in `session`: `body`
    signed and sent; the answer's bytes, once their mac is checked (a
    refusal raises ClusterError, LINK_AUTHENTICATION_FAILED; a transport
    failure stays a grpc.RpcError)."""
    signed = session.sign(method, body)
    pending = call(body, metadata=signed.metadata, timeout=timeout_s)
    answer = await pending
    assert isinstance(answer, bytes), type(answer)
    session.check_answer(signed, answer, await pending.trailing_metadata())
    return answer


async def open_session(
    stub: replication_pb2_grpc.ReplicationAsyncStub,
    identity: LinkIdentity,
    address: str,
    timeout_s: float,
) -> ClientSession:
    """Challenge, then OpenSession; checks the callee's proof. Raises
    ClusterError (LINK_AUTHENTICATION_FAILED) naming what is wrong; a
    transport failure stays a grpc.RpcError."""
    what = f"link {identity.link_name!r}: session with {address}"
    challenge = await stub.Challenge(replication_pb2.ChallengeRequest(), timeout=timeout_s)
    if challenge.cluster_id != identity.remote_cluster_id:
        raise auth.refused(
            auth.Refusal.WRONG_PEER,
            f"{what}: the cluster there is {challenge.cluster_id!r}, not the link's remote "
            f"{identity.remote_cluster_id!r}",
        )
    credential = identity.credential if challenge.credentials_required else ""
    if challenge.credentials_required and not credential:
        raise auth.refused(
            auth.Refusal.BAD_PROOF,
            f"{what}: cluster {challenge.cluster_id!r} requires link credentials and this "
            f"side has none for the link (ccr-admin alter-link {identity.link_name} "
            "--remote-credentials-file FILE)",
        )
    opening = auth.open_request(
        identity.link_id,
        identity.link_name,
        identity.local_cluster_id,
        identity.remote_cluster_id,
        challenge.nonce,
        secrets.token_bytes(auth.NONCE_BYTES),
        identity.link_key,
        credential,
        identity.creating,
    )
    r = opening.request
    message = replication_pb2.OpenSessionRequest(
        link_id=r.link_id,
        link_name=r.link_name,
        caller_cluster_id=r.caller,
        callee_cluster_id=r.callee,
        server_nonce=r.server_nonce,
        client_nonce=r.client_nonce,
        proof=r.proof,
        wrapped_link_key=r.wrapped_link_key,
    )
    answer = await stub.OpenSession(message, timeout=timeout_s)
    key = auth.opened_session_key(opening, answer.session_id, answer.proof)
    return ClientSession(auth.CallSigner(answer.session_id, key), address, identity)


class CredentialsSource:
    """The link credentials this cluster requires of callers: the lines of
    `--link-credentials-file` (several during a rotation; re-read when the
    file changes) or `CCR_LINK_CREDENTIALS`; none configured: any caller
    holding a link's key may speak for it ("" only)."""

    def __init__(self, path: str = "") -> None:
        self.path = Path(path) if path else None
        self._stamp: tuple[int, int] | None = None
        self._values: tuple[str, ...] = ()
        if self.path is None:
            env = os.environ.get(CREDENTIALS_ENV, "")
            self._values = (env,) if env else ()
        else:
            self.accepted()  # a missing or empty file fails at start

    def accepted(self) -> tuple[str, ...]:
        """The credentials to accept now. A file that can no longer be read
        (removed, emptied) refuses every session by name: it never falls back
        to accepting anyone."""
        if self.path is not None:
            try:
                stat = self.path.stat()
                stamp = (stat.st_mtime_ns, stat.st_size)
                if stamp != self._stamp:
                    self._values = read_credentials(self.path)
                    self._stamp = stamp
            except (OSError, ValueError) as exc:
                self._stamp = None
                raise auth.refused(
                    auth.Refusal.BAD_PROOF,
                    f"this cluster cannot read its --link-credentials-file: {exc}",
                ) from exc
        return self._values or ("",)

    @property
    def required(self) -> bool:
        return self.path is not None or self._values != ()


def read_credentials(path: Path) -> tuple[str, ...]:
    """One secret per line (blank lines and # comments skipped)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    values = tuple(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))
    if not values:
        raise ValueError(f"{path} holds no credentials")
    return values


class LinkSecurity:
    """One daemon's link security: its sealing box, the credentials it
    requires and the sessions it serves."""

    def __init__(
        self,
        box: SecretBox,
        credentials: CredentialsSource,
        cluster_id: str,
        tls: LinkTls = NO_TLS,
    ) -> None:
        self.box = box
        self.credentials = credentials
        self.tls = tls  # what this side's link channels trust and present
        # Under `--authorizer acl` a cluster accepts no link session without
        # link credentials: anyone could otherwise create links to it.
        self.credentials_mandatory = False
        self.sessions = auth.LinkSessions(cluster_id)
        self.cluster_id = cluster_id
        self._logged: set[tuple[str, str]] = set()

    @property
    def required(self) -> bool:
        return self.credentials_mandatory or self.credentials.required

    def accepted(self) -> tuple[str, ...]:
        """The credentials a session must prove ("" alone: none); refuses
        every session when they are mandatory and none are configured."""
        values = self.credentials.accepted()
        if values == ("",) and self.credentials_mandatory:
            self.sessions.refusals[auth.Refusal.BAD_PROOF] += 1
            raise auth.refused(
                auth.Refusal.BAD_PROOF,
                f"cluster {self.cluster_id!r} runs an authorizer (--authorizer acl) and so "
                "accepts link sessions only with link credentials, and none are configured "
                "(--link-credentials-file or CCR_LINK_CREDENTIALS)",
            )
        return values

    def known_link(self, links: LinkTable, link_id: str) -> auth.KnownLink | None:
        found = links.secrets(link_id)
        if found is None:
            return None
        what = f"link {found.name!r}: its stored secrets"
        key = link_key_of(self.box, found.link_key, found.credentials, what)
        return auth.KnownLink(found.remote_cluster_id, key)

    def identity(self, links: LinkTable, link_id: str) -> LinkIdentity | None:
        found = links.secrets(link_id)
        return None if found is None else identity_of_secrets(self.box, self.cluster_id, found)

    def refused(self, exc: ClusterError, peer: str) -> None:
        """Logs a refusal once per caller address and reason."""
        key = (peer, exc.resource)
        if key in self._logged:
            return
        if len(self._logged) >= MAX_LOGGED_REFUSALS:
            self._logged.clear()
        self._logged.add(key)
        log.info("link call refused", extra={"peer": peer, "reason": exc.resource,
                                             "error": exc.message})


def call_metadata(context: Any) -> dict[str, str]:
    return {k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)}


def session_fields(context: Any) -> tuple[str, int, bytes]:
    """(session id, seq, mac) of a call; ("", -1, b"") parts when missing or
    unreadable (the core refuses them by name)."""
    md = call_metadata(context)
    try:
        seq = int(md.get(SEQ_KEY, "-1"))
        mac = bytes.fromhex(md.get(MAC_KEY, ""))
    except ValueError:
        return md.get(SESSION_KEY, ""), -1, b""
    return md.get(SESSION_KEY, ""), seq, mac


def is_auth_failure(exc: grpc.RpcError) -> bool:
    code = exc.code() if hasattr(exc, "code") else None
    return bool(code == grpc.StatusCode.UNAUTHENTICATED)
