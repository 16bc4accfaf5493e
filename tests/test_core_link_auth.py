"""Link sessions (linkd/core/link_auth.py): who may speak for a link."""

from __future__ import annotations

import hashlib

import pytest

from linkd.core import link_auth as auth
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import Faults
from linkd.core.links import LinkTable

KEY = hashlib.sha256(b"the link key").digest()
NOW = 1_000_000


def nonce(n: int) -> bytes:
    return hashlib.sha256(str(n).encode()).digest()


def request(
    sessions: auth.LinkSessions,
    n: int,
    key: bytes = KEY,
    credential: str = "",
    *,
    caller: str = "A",
    creating: bool = False,
    link_id: str = "L1",
) -> tuple[auth.OpenRequest, bytes]:
    """A caller's OpenSession request after a fresh challenge; and its root."""
    sessions.challenge(nonce(n), NOW)
    opening = auth.open_request(
        link_id, "ab", caller, "B", nonce(n), nonce(-n), key, credential, creating
    )
    return opening.request, opening.root


def refusal(exc: pytest.ExceptionInfo[ClusterError]) -> str:
    assert exc.value.code == ErrorCode.LINK_AUTHENTICATION_FAILED
    return exc.value.resource


def opened(sessions: auth.LinkSessions, n: int = 1, **kw: object) -> tuple[auth.Session, bytes]:
    req, root = request(sessions, n)
    got = sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, f"s{n}")
    key = auth.opened_session_key(auth.Opening(req, root), f"s{n}", got.proof)  # caller's check
    assert key == got.session.key
    with pytest.raises(ClusterError):  # a callee without the key is not the remote
        auth.opened_session_key(auth.Opening(req, root), f"s{n}", b"x" * 32)
    return got.session, key


def call(
    sessions: auth.LinkSessions, key: bytes, seq: int, body: bytes = b"x", *,
    session_id: str = "s1", link_id: str = "L1", method: str = "ReplicaPush",
) -> auth.Session:
    digest = auth.request_digest(body)
    mac = auth.call_mac(key, method, seq, digest)
    return sessions.verify(session_id, link_id, method, seq, digest, mac, NOW)


def test_a_caller_holding_the_key_opens_a_session_and_its_calls_verify() -> None:
    sessions = auth.LinkSessions("B")
    session, key = opened(sessions)
    assert session.key == key and session.peer == "A"
    assert call(sessions, key, 0) is session
    assert call(sessions, key, 2) is session  # calls of a session may arrive out of order
    assert call(sessions, key, 1) is session


def test_a_wrong_key_or_credential_is_refused_and_spends_the_challenge() -> None:
    sessions = auth.LinkSessions("B")
    req, _ = request(sessions, 1, key=hashlib.sha256(b"guess").digest())
    with pytest.raises(ClusterError) as bad:
        sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, "s1")
    assert refusal(bad) == "bad proof"
    with pytest.raises(ClusterError) as spent:  # the same challenge again
        sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, "s1")
    assert refusal(spent) == "unknown challenge"
    req, _ = request(sessions, 2, credential="old")
    with pytest.raises(ClusterError) as wrong:
        sessions.open(req, auth.KnownLink("A", KEY), ("new",), NOW, "s2")
    assert refusal(wrong) == "bad proof"
    assert sessions.refusals[auth.Refusal.BAD_PROOF] == 2 and len(sessions) == 0


def test_during_a_rotation_both_credentials_open_sessions() -> None:
    sessions = auth.LinkSessions("B")
    for n, credential in enumerate(("old", "new"), 1):
        req, _ = request(sessions, n, credential=credential)
        sessions.open(req, auth.KnownLink("A", KEY), ("old", "new"), NOW, f"s{n}")
    assert len(sessions) == 2


def test_a_challenge_expires_and_is_never_issued_by_the_caller() -> None:
    sessions = auth.LinkSessions("B")
    req, _ = request(sessions, 1)
    with pytest.raises(ClusterError) as late:
        sessions.open(
            req, auth.KnownLink("A", KEY), ("",), NOW + auth.CHALLENGE_TTL_MS + 1, "s1"
        )
    assert refusal(late) == "unknown challenge"
    forged = auth.OpenRequest("L1", "ab", "A", "B", nonce(99), nonce(-1), b"")
    with pytest.raises(ClusterError) as invented:
        sessions.open(forged, auth.KnownLink("A", KEY), ("",), NOW, "s1")
    assert refusal(invented) == "unknown challenge"


def test_a_session_for_a_link_of_another_peer_or_an_unknown_link_is_refused() -> None:
    sessions = auth.LinkSessions("B")
    req, _ = request(sessions, 1, caller="C")
    with pytest.raises(ClusterError) as peer:
        sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, "s1")
    assert refusal(peer) == "wrong peer"
    req, _ = request(sessions, 2)
    with pytest.raises(ClusterError) as unknown:
        sessions.open(req, None, ("",), NOW, "s2")
    assert refusal(unknown) == "unknown link"


def test_a_creating_caller_hands_over_the_new_key_which_only_holders_of_the_credential_read(
) -> None:
    sessions = auth.LinkSessions("B")
    req, _ = request(sessions, 1, credential="s3cret", creating=True)
    got = sessions.open(req, None, ("s3cret",), NOW, "s1")
    assert got.session.new_link_key == KEY
    assert req.wrapped_link_key != KEY  # never sent as it is
    req, _ = request(sessions, 2, credential="s3cret", creating=True)
    with pytest.raises(ClusterError) as wrong:
        sessions.open(req, None, ("other",), NOW, "s2")
    assert refusal(wrong) == "bad proof"
    # A link this side knows keeps its key: a "creating" caller cannot replace it.
    req, _ = request(sessions, 3, key=hashlib.sha256(b"mine").digest(), creating=True)
    with pytest.raises(ClusterError) as replace:
        sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, "s3")
    assert refusal(replace) == "bad proof"


def test_calls_without_a_valid_session_are_refused_by_name() -> None:
    sessions = auth.LinkSessions("B")
    _session, key = opened(sessions)
    cases = {
        "no session": lambda: call(sessions, key, 0, session_id=""),
        "unknown session": lambda: call(sessions, key, 0, session_id="s9"),
        "bad mac": lambda: call(sessions, b"k" * 32, 0),
        "wrong link": lambda: call(sessions, key, 1, link_id="L2"),
    }
    for reason, attempt in cases.items():
        with pytest.raises(ClusterError) as refused:
            attempt()
        assert refusal(refused) == reason
    call(sessions, key, 5)
    with pytest.raises(ClusterError) as replay:
        call(sessions, key, 5)
    assert refusal(replay) == "replayed call"
    # The mac covers the request: the same sequence number with another body fails.
    digest = auth.request_digest(b"forged")
    mac = auth.call_mac(key, "ReplicaPush", 6, auth.request_digest(b"real"))
    with pytest.raises(ClusterError) as body:
        sessions.verify("s1", "L1", "ReplicaPush", 6, digest, mac, NOW)
    assert refusal(body) == "bad mac"


def test_an_idle_session_expires() -> None:
    sessions = auth.LinkSessions("B")
    _session, key = opened(sessions)
    digest = auth.request_digest(b"x")
    mac = auth.call_mac(key, "ReplicaFetch", 0, digest)
    with pytest.raises(ClusterError) as idle:
        sessions.verify(
            "s1", "L1", "ReplicaFetch", 0, digest, mac, NOW + auth.SESSION_IDLE_MS + 1
        )
    assert refusal(idle) == "expired session"


def test_what_is_kept_is_bounded() -> None:
    sessions = auth.LinkSessions("B")
    for n in range(auth.MAX_CHALLENGES + 10):
        sessions.challenge(nonce(n), NOW)
    req, _ = request(sessions, 100_000)
    sessions.open(req, auth.KnownLink("A", KEY), ("",), NOW, "first")
    for n in range(1, auth.MAX_SESSIONS_PER_LINK + 3):
        opened(sessions, n)
    assert len(sessions) == auth.MAX_SESSIONS_PER_LINK
    session, key = opened(sessions, 50)
    for seq in range(auth.SEQ_WINDOW + 5):
        call(sessions, key, seq, session_id="s50")
    assert len(session.seen) <= auth.SEQ_WINDOW and session.floor > 0
    with pytest.raises(ClusterError) as old:
        call(sessions, key, 0, session_id="s50")
    assert refusal(old) == "replayed call"


def test_the_link_s_busy_session_outlives_a_procedure_s_one_shot_sessions() -> None:
    # The dialing side's link runs on one session; each call an operator
    # procedure makes to the remote (a reversal makes many) opens one of its
    # own and makes one call. Those go first when the bound is reached, the
    # oldest first: the link's session was dropped (its next push refused,
    # "no session", reported as an authentication failure) when the oldest
    # session went first.
    sessions = auth.LinkSessions("B")
    _link, key = opened(sessions, 1)
    for seq in range(3):
        call(sessions, key, seq)
    one_shot = {}
    for n in range(2, 2 + auth.MAX_SESSIONS_PER_LINK + 3):
        _one, one_shot[f"s{n}"] = opened(sessions, n)
        call(sessions, one_shot[f"s{n}"], 0, session_id=f"s{n}")
        assert len(sessions) <= auth.MAX_SESSIONS_PER_LINK
    assert call(sessions, key, 3).session_id == "s1"  # the link's session: still open
    newest = list(one_shot)[-(auth.MAX_SESSIONS_PER_LINK - 1) :]
    for sid in newest:
        assert call(sessions, one_shot[sid], 1, session_id=sid).session_id == sid
    for sid in [s for s in one_shot if s not in newest]:
        with pytest.raises(ClusterError) as gone:
            call(sessions, one_shot[sid], 1, session_id=sid)
        assert refusal(gone) == "unknown session"


def test_a_credential_withdrawn__ends_its_sessions_at_their_next_call__busy_or_not() -> None:
    sessions = auth.LinkSessions("B")
    req, root = request(sessions, 1, credential="old")
    got = sessions.open(req, auth.KnownLink("A", KEY), ("old", "new"), NOW, "s1")
    key = auth.opened_session_key(auth.Opening(req, root), "s1", got.proof)
    req2, root2 = request(sessions, 2, credential="new")
    got2 = sessions.open(req2, auth.KnownLink("A", KEY), ("old", "new"), NOW, "s2")
    key2 = auth.opened_session_key(auth.Opening(req2, root2), "s2", got2.proof)
    assert b"old" not in got.session.credential  # a digest, never the secret

    def verify(sid: str, k: bytes, seq: int, accepted: tuple[str, ...]) -> auth.Session:
        digest = auth.request_digest(b"x")
        mac = auth.call_mac(k, "ReplicaPush", seq, digest)
        return sessions.verify(sid, "L1", "ReplicaPush", seq, digest, mac, NOW + seq, accepted)

    for seq in range(3):  # busy: used every call, never idle
        assert verify("s1", key, seq, ("old", "new")) is got.session
    with pytest.raises(ClusterError) as revoked:
        verify("s1", key, 3, ("new",))
    assert refusal(revoked) == "revoked credential"
    assert "old" not in revoked.value.message
    assert sessions.revoked["L1"].sessions == 1 and sessions.revoked["L1"].peer == "A"
    assert sessions.revoked["L1"].describe().startswith("revoked: the sessions of cluster 'A'")
    with pytest.raises(ClusterError) as gone:  # ended for good
        verify("s1", key, 4, ("old", "new"))
    assert refusal(gone) == "unknown session"
    assert verify("s2", key2, 5, ("new",)) is got2.session  # the accepted one goes on
    # A session opened again on an accepted credential clears the record.
    req3, _ = request(sessions, 3, credential="new")
    sessions.open(req3, auth.KnownLink("A", KEY), ("new",), NOW, "s3")
    assert "L1" not in sessions.revoked


def test_with_the_revocation_undone__a_busy_session_keeps_working__served_on_revoked() -> None:
    """Fix 16 undone: the old path, where a withdrawn credential ended a
    session only once it went idle; `served_on_revoked` tells the simulator
    that a call was served so (its checker's violation)."""
    sessions = auth.LinkSessions("B", Faults.undoing(16))
    req, root = request(sessions, 1, credential="old")
    got = sessions.open(req, auth.KnownLink("A", KEY), ("old",), NOW, "s1")
    key = auth.opened_session_key(auth.Opening(req, root), "s1", got.proof)
    digest = auth.request_digest(b"x")
    mac = auth.call_mac(key, "ReplicaPush", 0, digest)
    served = sessions.verify("s1", "L1", "ReplicaPush", 0, digest, mac, NOW, ("new",))
    assert served is got.session and sessions.revoked == {}
    assert sessions.served_on_revoked(served, ("new",))
    assert not sessions.served_on_revoked(served, ("old", "new"))


def test_the_link_table_tells_a_revocation_once__and_a_new_session_clears_it() -> None:
    links = LinkTable("B")
    config = links.new_config("ab", "L1", "A", "a:1", "", "local_dials", "", NOW)
    links.store(config, NOW)
    ended = {"L1": auth.Revoked("ab", "A", NOW, 2)}

    told = links.credential_revoked(ended)
    again = links.credential_revoked(ended)

    assert [r.link_name for r in told] == ["ab"] and again == []
    assert links.runtime["ab"].credential_problem.startswith("revoked: the sessions of cluster")
    links.session_opened("L1")
    assert links.runtime["ab"].credential_problem == ""


def test_an_answer_is_accepted_signed_by_its_session__method_and_seq__anything_else_not() -> None:
    sessions = auth.LinkSessions("B")
    session, key = opened(sessions)
    signer = auth.CallSigner("s1", key)
    body = b"the request"
    seq, request_mac = signer.sign("ReplicaFetch", auth.request_digest(body))
    call(sessions, key, seq, body, method="ReplicaFetch")  # the callee serves it
    answer = b"records and high watermarks"
    digest = auth.request_digest(answer)
    # The callee signs with the key of the session it served the call in.
    assert sessions.answer_key("s1") == session.key
    assert sessions.answer_key("s9") is None
    mac = auth.answer_mac(session.key, "ReplicaFetch", seq, digest)
    signer.check_answer("link 'ab' on b:1", "ReplicaFetch", seq, digest, mac)

    def refused(
        mac: bytes | None, *, method: str = "ReplicaFetch", seq: int = seq,
        digest: bytes = digest,
    ) -> ClusterError:
        with pytest.raises(ClusterError) as exc:
            signer.check_answer("link 'ab' on b:1", method, seq, digest, mac)
        assert exc.value.code == ErrorCode.LINK_AUTHENTICATION_FAILED
        assert "link 'ab' on b:1" in exc.value.message and method in exc.value.message
        return exc.value

    other_key = hashlib.sha256(b"another session").digest()
    wrong = [
        refused(mac, seq=seq + 1),  # the answer to another call
        refused(mac, method="ReplicaPush"),  # to another method
        refused(auth.answer_mac(other_key, "ReplicaFetch", seq, digest)),  # another session's
        refused(mac, digest=auth.request_digest(answer + b"!")),  # other bytes
        refused(mac, digest=auth.request_digest(answer[:-1])),
        refused(request_mac),  # the request's own mac, replayed as the answer's
        # Its call's mac over the answer's bytes: the label tells them apart.
        refused(auth.call_mac(key, "ReplicaFetch", seq, digest)),
        refused(b""),
        refused(mac[:-1]),
    ]
    assert {e.resource for e in wrong} == {auth.Refusal.BAD_ANSWER_MAC}
    assert all("does not match" in e.message for e in wrong)
    unsigned = refused(None)
    assert unsigned.resource == auth.Refusal.UNSIGNED_ANSWER
    assert "does not sign its answers" in unsigned.message
    assert auth.refusal_of(unsigned.resource) in auth.ANSWER_REFUSALS
    assert auth.refusal_of("bad mac") not in auth.ANSWER_REFUSALS
    # The pure function says the same as the signer.
    auth.check_answer(key, "link 'ab'", "ReplicaFetch", seq, digest, mac)
    assert auth.answer_mac(key, "ReplicaFetch", seq, digest) != auth.call_mac(
        key, "ReplicaFetch", seq, digest
    )
