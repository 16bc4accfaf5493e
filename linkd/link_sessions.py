"""The shell of link sessions: both ends of `linkd.core.link_auth` over gRPC.

- `LinkSecurity` is one daemon's part: its password encoder (`SecretBox`),
  the link credentials it requires of callers (`--link-credentials-file`,
  re-read when the file changes, or `CCR_LINK_CREDENTIALS`), the sessions it
  serves (`link_auth.LinkSessions`) and the refusals it logged (once per
  caller address and reason, at info level, never with a secret).
- A caller opens a session with `open_session` (Challenge, then
  OpenSession) and signs each call with `ClientSession.metadata`.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

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
    if key:
        return key
    return auth.legacy_link_key(box.open(sealed_credentials, what))


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


@dataclass(slots=True)
class ClientSession:
    """A session this side opened; signs its calls."""

    session_id: str
    key: bytes
    address: str
    identity: LinkIdentity
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def metadata(self, method: str, request: Message) -> tuple[tuple[str, str], ...]:
        seq = next(self._seq)
        mac = auth.call_mac(self.key, method, seq, request_digest(request))
        return ((SESSION_KEY, self.session_id), (SEQ_KEY, str(seq)), (MAC_KEY, mac.hex()))


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
    request = auth.OpenRequest(
        identity.link_id,
        identity.link_name,
        identity.local_cluster_id,
        identity.remote_cluster_id,
        challenge.nonce,
        secrets.token_bytes(auth.NONCE_BYTES),
        b"",
    )
    root = auth.session_root(identity.link_key, credential)
    message = replication_pb2.OpenSessionRequest(
        link_id=request.link_id,
        link_name=request.link_name,
        caller_cluster_id=request.caller,
        callee_cluster_id=request.callee,
        server_nonce=request.server_nonce,
        client_nonce=request.client_nonce,
        proof=auth.open_proof(root, request),
        wrapped_link_key=(
            auth.wrap_link_key(identity.link_key, credential, request)
            if identity.creating
            else b""
        ),
    )
    answer = await stub.OpenSession(message, timeout=timeout_s)
    expected = auth.accept_proof(root, request, answer.session_id)
    if not hmac.compare_digest(expected, answer.proof):
        raise auth.refused(
            auth.Refusal.BAD_PROOF,
            f"{what}: the cluster there could not prove it holds the link's key "
            "(it is not this link's remote)",
        )
    return ClientSession(
        answer.session_id, auth.session_key(root, request, answer.session_id), address, identity
    )


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
        if self.path is not None:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp:
                self._values = read_credentials(self.path)
                self._stamp = stamp
        return self._values or ("",)

    @property
    def required(self) -> bool:
        return self.accepted() != ("",)


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
