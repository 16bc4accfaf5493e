"""Who may speak for a link: sessions between the two clusters of a link, pure.

Every call one cluster makes to the other about a link (handshakes, replica
fetches and pushes, topic and offset discovery, removal, recovery's partition
histories, promotion) runs in a session that proves the caller holds the
link's key and, when the callee requires them, the callee's link credentials.
Nothing secret ever travels in an answer.

The exchange (the caller calls; the callee answers):

1. Challenge. The callee hands out a fresh nonce (randomness is the
   shell's), says which cluster it is and whether it requires link
   credentials (`linkd --link-credentials-file`).
2. OpenSession. The caller sends the link's id and name, both cluster ids,
   both nonces and `proof = HMAC(K, "open" | ...)` with
   `K = HMAC(link key, credential)`; the credential is "" when the callee
   requires none. A caller creating the link adds the new link key, wrapped
   with a pad only holders of the credential can compute. The callee finds the
   link key (its configuration or its tombstone; the unwrapped key for a link
   it does not know yet), tries each credential it accepts (several during a
   rotation) and checks the proof in constant time. It answers a session id
   and its own proof, which the caller checks: a cluster that does not hold
   the key cannot pose as the remote. Both derive the session key.
3. Every other call carries the session id, a sequence number and
   `mac = HMAC(session key, method | seq | digest of the request)`. The
   callee checks that the session exists and is fresh, that it is bound to
   the link the request names and to the calling cluster, that the sequence
   number was not seen (a bounded window: calls of one session may arrive out
   of order) and the mac.
4. Every answer to such a call carries
   `answer mac = HMAC(session key, "answer" | method | seq | digest of the
   answer)`, made by the callee over the bytes it sends, bound to the
   request's sequence number; the caller checks it over the bytes it
   received before reading them (`check_answer`). The label differs from the
   calls' ("call"), so a request's mac is never an answer's. An answer
   without one (a partner older than answer macs, or one stripped on the
   way) is refused as unsigned, one whose mac does not match as changed:
   both are refusals of the caller's (`ANSWER_REFUSALS`), not of the callee.
   No link call streams: each answer is one message, signed once.

A credential this side stops accepting (removed from its credentials file)
ends the sessions opened with it at their next call, however busy
(`verify` with the credentials accepted now), and the link is recorded as
`revoked` until a session opens again.

Bounds: MAX_CHALLENGES pending challenges (oldest dropped), each valid
CHALLENGE_TTL_MS and once; MAX_SESSIONS_PER_LINK sessions per link (beyond
them, the sessions that served at most one call go first, oldest first: an
operator procedure opens one for each call it makes to the remote, and a
reversal makes many; then the least recently used, so the link's own busy
session is never pushed out by a procedure's); a session unused for
SESSION_IDLE_MS expires; SEQ_WINDOW sequence numbers remembered per
session.

Every refusal raises ClusterError(LINK_AUTHENTICATION_FAILED) with a message
that names what was wrong (never a secret) and the reason as its resource. A
callee counts its refusals of calls by reason (`LinkSessions.refusals`); a
caller's refusal of an answer is its call's failure, counted and kept as the
link's last error as any failed call is (`LinkTable.on_contact_lost`).

Pure code: no I/O, clocks or randomness (nonces and session ids are given).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults

KEY_BYTES = 32
NONCE_BYTES = 32
MAX_CHALLENGES = 1024
CHALLENGE_TTL_MS = 30_000
MAX_SESSIONS_PER_LINK = 4
SESSION_IDLE_MS = 120_000
SEQ_WINDOW = 4096
VERSION = b"ccr-link-v1"


class Refusal(enum.StrEnum):
    """Why a link call was refused (the counters' keys)."""

    NO_SESSION = "no session"  # a call without session metadata
    UNKNOWN_CHALLENGE = "unknown challenge"
    UNKNOWN_LINK = "unknown link"
    BAD_PROOF = "bad proof"
    UNKNOWN_SESSION = "unknown session"
    EXPIRED_SESSION = "expired session"
    WRONG_LINK = "wrong link"
    WRONG_PEER = "wrong peer"
    REPLAYED = "replayed call"
    BAD_MAC = "bad mac"
    # The session was opened with a credential this side no longer accepts.
    REVOKED_CREDENTIAL = "revoked credential"
    # The caller's refusals of an answer (`check_answer`): it carries no
    # answer mac, or one that does not match the bytes received.
    UNSIGNED_ANSWER = "unsigned answer"
    BAD_ANSWER_MAC = "bad answer mac"


# The refusals a caller makes of its partner's answers (the others are a
# callee's refusals of a call).
ANSWER_REFUSALS = frozenset({Refusal.UNSIGNED_ANSWER, Refusal.BAD_ANSWER_MAC})


def refusal_of(resource: str) -> Refusal | None:
    """The refusal a link call's ClusterError names in its resource, if any."""
    try:
        return Refusal(resource)
    except ValueError:
        return None


def _hmac(key: bytes, *parts: bytes | str) -> bytes:
    mac = hmac.new(key, VERSION, hashlib.sha256)
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        mac.update(len(data).to_bytes(4, "big"))
        mac.update(data)
    return mac.digest()


def legacy_link_key(credentials: str) -> bytes:
    """The key of a link created before link keys existed: both sides hold
    the same shared credentials field (often "": such a link is only as
    protected as it was; re-create it for a key of its own)."""
    return _hmac(b"legacy", credentials)


@dataclass(frozen=True, slots=True)
class KnownLink:
    """A link as the callee holds it (its key opened by the shell)."""

    remote_cluster_id: str
    link_key: bytes


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """What a caller sends to open a session (step 2)."""

    link_id: str
    link_name: str
    caller: str  # the calling cluster's id
    callee: str  # the called cluster's id
    server_nonce: bytes
    client_nonce: bytes
    proof: bytes
    wrapped_link_key: bytes = b""  # only when the caller creates the link

    def transcript(self) -> tuple[bytes | str, ...]:
        return (
            self.link_id,
            self.link_name,
            self.caller,
            self.callee,
            self.server_nonce,
            self.client_nonce,
        )


def session_root(link_key: bytes, credential: str) -> bytes:
    """K: what both sides hold, the link key and the callee's credential."""
    return _hmac(link_key, "root", credential)


def open_proof(root: bytes, request: OpenRequest) -> bytes:
    return _hmac(root, "open", *request.transcript())


def accept_proof(root: bytes, request: OpenRequest, session_id: str) -> bytes:
    return _hmac(root, "accept", *request.transcript(), session_id)


def session_key(root: bytes, request: OpenRequest, session_id: str) -> bytes:
    return _hmac(root, "session", *request.transcript(), session_id)


def _pad(credential: str, request: OpenRequest) -> bytes:
    return _hmac(credential.encode(), "wrap", *request.transcript())


def wrap_link_key(link_key: bytes, credential: str, request: OpenRequest) -> bytes:
    """The new link key as a creating caller sends it (XOR with a pad derived
    from the credential and both nonces; unwrapping is the same XOR)."""
    assert len(link_key) == KEY_BYTES
    return bytes(a ^ b for a, b in zip(link_key, _pad(credential, request), strict=True))


def call_mac(key: bytes, method: str, seq: int, digest: bytes) -> bytes:
    return _hmac(key, "call", method, str(seq), digest)


def request_digest(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()


def answer_mac(key: bytes, method: str, seq: int, digest: bytes) -> bytes:
    """The callee's proof of its answer to call `seq` of `method`, over the
    `digest` of the answer's bytes (`request_digest` of them): labelled
    "answer", so no request's `call_mac` is ever one."""
    return _hmac(key, "answer", method, str(seq), digest)


def check_answer(
    key: bytes, what: str, method: str, seq: int, digest: bytes, mac: bytes | None
) -> None:
    """Refuses an answer to call `seq` of `method` whose bytes hash to
    `digest` unless `mac` proves it (`answer_mac`); `mac` None: the answer
    carried none. `what` names the link and its partner in the refusal."""
    if mac is None:
        raise refused(
            Refusal.UNSIGNED_ANSWER,
            f"{what}: {method}: the partner does not sign its answers (a daemon older than "
            "answer macs, or the answer's mac was stripped on the way): its answer is refused, "
            "since anyone on the path could have written it; upgrade the partner",
        )
    if not hmac.compare_digest(answer_mac(key, method, seq, digest), mac):
        raise refused(
            Refusal.BAD_ANSWER_MAC,
            f"{what}: {method}: the answer's proof does not match the bytes received (changed "
            "on the way, or not from the session's partner): its answer is refused",
        )


def link_key_or_legacy(link_key: bytes, credentials: str) -> bytes:
    """A link's key, or for a link created before keys existed the legacy one."""
    return link_key if link_key else legacy_link_key(credentials)


# -- the caller's side, which both shells drive ---------------------------------------


@dataclass(frozen=True, slots=True)
class Opening:
    """A caller's OpenSession request and the root it proves (step 2)."""

    request: OpenRequest
    root: bytes


def open_request(
    link_id: str,
    link_name: str,
    caller: str,
    callee: str,
    server_nonce: bytes,
    client_nonce: bytes,
    link_key: bytes,
    credential: str,
    creating: bool,
) -> Opening:
    """The caller's proof (and, creating the link, its wrapped key)."""
    unsigned = OpenRequest(link_id, link_name, caller, callee, server_nonce, client_nonce, b"")
    root = session_root(link_key, credential)
    wrapped = wrap_link_key(link_key, credential, unsigned) if creating else b""
    signed = OpenRequest(
        link_id, link_name, caller, callee, server_nonce, client_nonce,
        open_proof(root, unsigned), wrapped,
    )  # fmt: skip
    return Opening(signed, root)


def opened_session_key(opening: Opening, session_id: str, callee_proof: bytes) -> bytes:
    """The session key, once the callee proved it holds the link too; a
    callee that cannot is refused (it is not the link's remote)."""
    expected = accept_proof(opening.root, opening.request, session_id)
    if not hmac.compare_digest(expected, callee_proof):
        raise refused(
            Refusal.BAD_PROOF,
            f"link {opening.request.link_name!r}: cluster {opening.request.callee!r} could "
            "not prove it holds the link's key (it is not this link's remote)",
        )
    return session_key(opening.root, opening.request, session_id)


@dataclass(slots=True)
class CallSigner:
    """Signs the calls of one open session: a new sequence number each."""

    session_id: str
    key: bytes
    seq: int = 0

    def sign(self, method: str, digest: bytes) -> tuple[int, bytes]:
        seq, self.seq = self.seq, self.seq + 1
        return seq, call_mac(self.key, method, seq, digest)

    def check_answer(
        self, what: str, method: str, seq: int, digest: bytes, mac: bytes | None
    ) -> None:
        """Refuses the answer to this session's call `seq` unless `mac`
        proves it (`check_answer`)."""
        check_answer(self.key, what, method, seq, digest, mac)


def credential_digest(credential: str) -> bytes:
    """What a session keeps of the credential it was opened with: enough to
    tell whether that credential is still accepted, never the secret."""
    return hashlib.sha256(VERSION + b"|credential|" + credential.encode()).digest()


@dataclass(frozen=True, slots=True)
class Revoked:
    """A link whose sessions ended because the credential they were opened
    with was withdrawn (`LinkSessions.verify`), until a session opens again."""

    link_name: str
    peer: str  # the cluster whose sessions ended
    at_ms: int
    sessions: int  # how many ended

    def describe(self) -> str:
        return (
            f"revoked: the sessions of cluster {self.peer!r} on link {self.link_name!r} were "
            f"opened with a link credential this cluster no longer accepts (removed from its "
            f"credentials); {self.sessions} ended at {self.at_ms} ms, at their next call, and "
            f"its new sessions are refused until it proves an accepted one (its operator: "
            f"alter-link {self.link_name} --remote-credentials-file)"
        )


def refused(reason: Refusal, message: str) -> ClusterError:
    return ClusterError(ErrorCode.LINK_AUTHENTICATION_FAILED, reason.value, message)


@dataclass(slots=True)
class Session:
    """An open session, on the callee."""

    session_id: str
    link_id: str
    link_name: str
    peer: str  # the calling cluster's id
    key: bytes
    last_used_ms: int
    # The link key a creating caller sent, for the handshake that creates the
    # link here (b"" for a link this side already knew).
    new_link_key: bytes = b""
    # `credential_digest` of the credential it was opened with.
    credential: bytes = b""
    seen: set[int] = field(default_factory=set)
    floor: int = 0  # every sequence number below is refused
    calls: int = 0  # calls served

    @property
    def eviction_rank(self) -> tuple[bool, int]:
        """Sessions are dropped lowest rank first: one-shot before busy,
        then the least recently used."""
        return (self.calls > 1, self.last_used_ms)

    def take(self, seq: int) -> bool:
        """Marks `seq` used; False if it was used or fell out of the window."""
        if seq < self.floor or seq in self.seen:
            return False
        self.seen.add(seq)
        if len(self.seen) > SEQ_WINDOW:
            low = min(self.seen)
            self.seen.discard(low)
            self.floor = low + 1
        return True


@dataclass(frozen=True, slots=True)
class Opened:
    session: Session
    proof: bytes  # the callee's proof, for the caller


class LinkSessions:
    """The callee's side: pending challenges and open sessions, bounded."""

    def __init__(self, cluster_id: str, faults: Faults = NO_FAULTS) -> None:
        self.cluster_id = cluster_id
        self.faults = faults  # the cluster's (test only: linkd/core/faults.py)
        self._challenges: OrderedDict[bytes, int] = OrderedDict()  # nonce -> issued at
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.refusals: Counter[Refusal] = Counter()
        # Link id -> its sessions ended by a withdrawn credential, until one
        # opens again (describe-link shows it).
        self.revoked: dict[str, Revoked] = {}

    def _refuse(self, reason: Refusal, message: str) -> ClusterError:
        self.refusals[reason] += 1
        return refused(reason, f"cluster {self.cluster_id!r} refuses the link call: {message}")

    def challenge(self, nonce: bytes, now_ms: int) -> None:
        assert len(nonce) == NONCE_BYTES
        self._challenges[nonce] = now_ms
        while len(self._challenges) > MAX_CHALLENGES:
            self._challenges.popitem(last=False)

    def _take_challenge(self, nonce: bytes, now_ms: int) -> None:
        issued = self._challenges.pop(nonce, None)
        if issued is None or now_ms - issued > CHALLENGE_TTL_MS:
            raise self._refuse(
                Refusal.UNKNOWN_CHALLENGE,
                "the session names no challenge this cluster issued (or an expired or used one)",
            )

    def open(
        self,
        request: OpenRequest,
        known: KnownLink | None,
        credentials: tuple[str, ...],
        now_ms: int,
        session_id: str,
    ) -> Opened:
        """Checks a caller's proof. `known`: the link as this side holds it
        (None: unknown here, so only a creating caller, with a wrapped key,
        may open). `credentials`: those this side accepts ("" alone when it
        requires none). Raises ClusterError, nothing changed but the challenge
        spent."""
        self._take_challenge(request.server_nonce, now_ms)
        if request.callee != self.cluster_id:
            raise self._refuse(
                Refusal.WRONG_PEER,
                f"the caller addressed cluster {request.callee!r}",
            )
        if known is not None and known.remote_cluster_id != request.caller:
            raise self._refuse(
                Refusal.WRONG_PEER,
                f"link {request.link_name!r} joins this cluster to "
                f"{known.remote_cluster_id!r}, not to {request.caller!r}",
            )
        link_key = known.link_key if known is not None else None
        for credential in credentials:
            key = link_key
            new_key = b""
            if key is None:
                if len(request.wrapped_link_key) != KEY_BYTES:
                    raise self._refuse(
                        Refusal.UNKNOWN_LINK,
                        f"link {request.link_name!r} (id {request.link_id}) is not known here",
                    )
                key = new_key = wrap_link_key(request.wrapped_link_key, credential, request)
            root = session_root(key, credential)
            if hmac.compare_digest(open_proof(root, request), request.proof):
                session = Session(
                    session_id,
                    request.link_id,
                    request.link_name,
                    request.caller,
                    session_key(root, request, session_id),
                    now_ms,
                    new_key,
                    credential_digest(credential),
                )
                self._add(session)
                self.revoked.pop(request.link_id, None)
                return Opened(session, accept_proof(root, request, session_id))
        raise self._refuse(
            Refusal.BAD_PROOF,
            f"cluster {request.caller!r} could not prove it holds link {request.link_name!r}'s "
            "key and this cluster's link credentials",
        )

    def _add(self, session: Session) -> None:
        same = [s for s in self._sessions.values() if s.link_id == session.link_id]
        # sorted() is stable: among equals, the one opened first goes first.
        for old in sorted(same, key=lambda s: s.eviction_rank)[
            : max(0, len(same) + 1 - MAX_SESSIONS_PER_LINK)
        ]:
            del self._sessions[old.session_id]
        self._sessions[session.session_id] = session
        assert sum(s.link_id == session.link_id for s in self._sessions.values()) <= (
            MAX_SESSIONS_PER_LINK
        ), "sessions per link stay bounded"

    def proves(self, session_id: str, method: str, seq: int, digest: bytes, mac: bytes) -> bool:
        """Whether `mac` proves a call over a request of `digest` in an open
        session (changes nothing: `verify` decides and records)."""
        session = self._sessions.get(session_id)
        return session is not None and hmac.compare_digest(
            call_mac(session.key, method, seq, digest), mac
        )

    def verify(
        self,
        session_id: str,
        link_id: str,
        method: str,
        seq: int,
        digest: bytes,
        mac: bytes,
        now_ms: int,
        accepted: tuple[str, ...] | None = None,
    ) -> Session:
        """Checks one call's session metadata; returns its session.
        `accepted`: the credentials this side accepts now (None: not
        checked); a session opened with one no longer among them ends here,
        at its call, however busy it is (`revoked` records it)."""
        if not session_id:
            raise self._refuse(Refusal.NO_SESSION, f"{method} carries no link session")
        session = self._sessions.get(session_id)
        if session is None:
            raise self._refuse(
                Refusal.UNKNOWN_SESSION, f"{method}: no session {session_id!r} (open a new one)"
            )
        if now_ms - session.last_used_ms > SESSION_IDLE_MS:
            del self._sessions[session_id]
            raise self._refuse(Refusal.EXPIRED_SESSION, f"{method}: session expired")
        if (
            accepted is not None
            and not self.faults.undid(16)
            and session.credential not in {credential_digest(c) for c in accepted}
        ):
            self.end_revoked(accepted, now_ms)
            raise self._refuse(
                Refusal.REVOKED_CREDENTIAL,
                f"{method}: the session of link {session.link_name!r} was opened with a link "
                "credential this cluster no longer accepts (removed from its credentials); "
                "it is ended: open a new one with an accepted credential",
            )
        if not hmac.compare_digest(call_mac(session.key, method, seq, digest), mac):
            raise self._refuse(Refusal.BAD_MAC, f"{method}: the call's proof does not match")
        if session.link_id != link_id:
            raise self._refuse(
                Refusal.WRONG_LINK,
                f"{method} names link id {link_id} in a session of link {session.link_name!r}",
            )
        if not session.take(seq):
            raise self._refuse(Refusal.REPLAYED, f"{method}: call {seq} was already served")
        session.last_used_ms = max(session.last_used_ms, now_ms)
        session.calls += 1
        return session

    def check_peer(self, session: Session, caller: str, method: str) -> None:
        """A call that names its sender (a handshake's configuration) must
        come from the cluster the session was opened by."""
        if caller != session.peer:
            raise self._refuse(
                Refusal.WRONG_PEER,
                f"{method} claims to come from cluster {caller!r} in a session opened by "
                f"{session.peer!r}",
            )

    def end_revoked(self, accepted: tuple[str, ...], now_ms: int) -> list[Revoked]:
        """Ends every session opened with a credential not in `accepted`,
        recording each link so ended (`revoked`); returns those links."""
        digests = {credential_digest(c) for c in accepted}
        gone = [s for s in self._sessions.values() if s.credential not in digests]
        ended: dict[str, Revoked] = {}
        for s in gone:
            del self._sessions[s.session_id]
            before = ended.get(s.link_id)
            ended[s.link_id] = Revoked(
                s.link_name, s.peer, now_ms, 1 + (before.sessions if before else 0)
            )
        self.revoked.update(ended)
        return list(ended.values())

    def served_on_revoked(self, session: Session, accepted: tuple[str, ...]) -> bool:
        """Whether `session`, whose call was just served, was opened with a
        credential not in `accepted` (never, while revocation holds)."""
        return session.credential not in {credential_digest(c) for c in accepted}

    def answer_key(self, session_id: str) -> bytes | None:
        """The key that signs the answers of `session_id`'s calls (None: no
        such session); the shell reads it before serving a call and signs the
        answer only if the call was verified and served."""
        session = self._sessions.get(session_id)
        return None if session is None else session.key

    def drop_link(self, link_id: str) -> None:
        for sid in [s.session_id for s in self._sessions.values() if s.link_id == link_id]:
            del self._sessions[sid]

    def __len__(self) -> int:
        return len(self._sessions)
