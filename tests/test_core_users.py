"""The pure SCRAM user store (linkd/core/users.py): credentials, Kafka's
refusals, journal records, snapshot and restore."""

from __future__ import annotations

import hashlib
import hmac

from linkd.core import journal as jr
from linkd.core.cluster import ClusterState
from linkd.core.effects import Journal
from linkd.core.users import (
    Deletion,
    Refusal,
    ScramMechanism,
    Upsertion,
    UserStore,
    credential_from_password,
    salted_password,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef"


def upsertion(
    name: str, password: str, mechanism: ScramMechanism = SHA256, it: int = 4096
) -> Upsertion:
    return Upsertion(name, int(mechanism), it, SALT, salted_password(mechanism, password, SALT, it))


def test_rfc7677_test_vector() -> None:
    # RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256.
    import base64

    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = credential_from_password(SHA256, "pencil", salt, 4096)
    server_signature_msg = (
        b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)"
        b"hNlF$k0"
    )
    signature = hmac.new(cred.server_key, server_signature_msg, hashlib.sha256).digest()
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_upsert_then_verify_and_credential() -> None:
    store = UserStore()
    results, records = store.alter([], [upsertion("alice", "s3cret")])
    assert results == {"alice": None}
    assert [type(r) for r in records] == [jr.ScramUpsert]
    assert store.names() == ["alice"]
    assert store.verify_password("alice", "s3cret")
    assert not store.verify_password("alice", "wrong")
    assert not store.verify_password("bob", "s3cret")
    cred = store.credential("alice", SHA256)
    assert cred is not None and cred.iterations == 4096 and cred.salt == SALT
    assert store.credential("alice", SHA512) is None


def test_records_hold_no_password() -> None:
    store = UserStore()
    _, records = store.alter([], [upsertion("alice", "hunter2-password")])
    stored = str([jr.encode(r) for r in records]) + str(store.snapshot())
    salted = salted_password(SHA256, "hunter2-password", SALT, 4096)
    assert "hunter2-password" not in stored
    import base64

    assert base64.b64encode(salted).decode() not in stored


def test_kafka_refusals() -> None:
    store = UserStore()
    results, records = store.alter(
        [Deletion("ghost", int(SHA256))],
        [
            upsertion("few", "p", it=4095),
            upsertion("many", "p", it=16385),
            Upsertion("", int(SHA256), 4096, SALT, b"x"),
            Upsertion("badmech", 3, 4096, SALT, b"x"),
            upsertion("twice", "p"),
            upsertion("twice", "p", SHA512),
        ],
    )
    assert records == []
    refusal = {name: (e.refusal if e else None) for name, e in results.items()}
    assert refusal == {
        "ghost": Refusal.RESOURCE_NOT_FOUND,
        "few": Refusal.UNACCEPTABLE_CREDENTIAL,
        "many": Refusal.UNACCEPTABLE_CREDENTIAL,
        "": Refusal.UNACCEPTABLE_CREDENTIAL,
        "badmech": Refusal.UNSUPPORTED_SASL_MECHANISM,
        "twice": Refusal.DUPLICATE_RESOURCE,
    }
    assert store.names() == []


def test_delete_and_describe() -> None:
    store = UserStore()
    store.alter([], [upsertion("alice", "p")])
    store.alter([], [upsertion("alice", "p", SHA512, it=8192)])
    described = store.describe(["alice", "nobody"])
    assert described[0] == ("alice", None, [(SHA256, 4096), (SHA512, 8192)])
    assert described[1][1] is not None and described[1][1].refusal is Refusal.RESOURCE_NOT_FOUND
    dup = store.describe(["alice", "alice"])
    assert len(dup) == 1 and dup[0][1] is not None
    assert dup[0][1].refusal is Refusal.DUPLICATE_RESOURCE
    results, records = store.alter([Deletion("alice", int(SHA256))], [])
    assert results == {"alice": None} and [type(r) for r in records] == [jr.ScramDelete]
    assert store.credential("alice", SHA256) is None
    store.alter([Deletion("alice", int(SHA512))], [])
    assert store.names() == [] and store.describe(None) == []


def test_set_password_is_idempotent() -> None:
    store = UserStore()
    salts = {SHA256: b"a" * 16, SHA512: b"b" * 16}
    records = store.set_password("alice", "pw", salts, 4096)
    assert len(records) == 2
    assert store.set_password("alice", "pw", {SHA256: b"c" * 16, SHA512: b"d" * 16}, 4096) == []
    assert len(store.set_password("alice", "new", salts, 4096)) == 2
    assert store.verify_password("alice", "new") and not store.verify_password("alice", "pw")


def test_journal_replay_and_snapshot_restore_agree() -> None:
    state = ClusterState("A")
    results, effects = state.alter_scram_credentials(
        [], [upsertion("alice", "p"), upsertion("bob", "q", SHA512)]
    )
    assert set(results) == {"alice", "bob"}
    stored = [jr.encode(r) for e in effects if isinstance(e, Journal) for r in e.records]
    replayed = ClusterState("A")
    for s in stored:
        replayed.apply_record(jr.decode(s))
    restored = ClusterState("A")
    restored.restore(state.snapshot())
    for other in (replayed, restored):
        assert other.users.names() == ["alice", "bob"]
        assert other.users.verify_password("alice", "p")
        assert other.users.verify_password("bob", "q")
        assert other.users.credential("bob", SHA512) == state.users.credential("bob", SHA512)


def test_old_snapshot_without_users_restores_empty() -> None:
    snapshot = ClusterState("A").snapshot()
    del snapshot["users"]
    state = ClusterState("A")
    state.restore(snapshot)
    assert state.users.names() == []
