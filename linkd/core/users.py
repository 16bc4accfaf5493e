"""SCRAM users: Kafka's user credentials (KIP-554), stored hashed, pure.

Rules (Kafka's ScramControlManager and ScramFormatter, for one cluster):
- A user has at most one credential per SCRAM mechanism (SCRAM-SHA-256,
  SCRAM-SHA-512; the enum values are Kafka's wire numbers). A credential is
  what RFC 5802 lets a server keep instead of a password: the salt, the
  iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
  ServerKey = HMAC(SaltedPassword, "Server Key"). No password, and no salted
  password, is ever stored.
- An upsertion carries the salted password, as Kafka's AdminClient sends it
  (the client salts and hashes; the password never crosses the wire). It is
  refused (UNACCEPTABLE_CREDENTIAL) for an empty user name, an empty salt or
  salted password, or iterations outside MIN_ITERATIONS..MAX_ITERATIONS;
  an unknown mechanism is UNSUPPORTED_SASL_MECHANISM; a deletion of a
  credential that does not exist is RESOURCE_NOT_FOUND; a user named twice in
  one alteration is DUPLICATE_RESOURCE (every entry of that user is refused).
- Describing an unknown user is RESOURCE_NOT_FOUND; naming a user twice is
  DUPLICATE_RESOURCE.
- Every change returns journal records; `apply_record` replays them and
  `snapshot`/`restore` hold the same state. Salts come from the caller (the
  shell draws them): nothing here is random.

Limits: MAX_USERS users, MAX_NAME_CHARS characters in a name,
MAX_SALT_BYTES bytes of salt (UNACCEPTABLE_CREDENTIAL beyond).

Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
from collections import Counter
from dataclasses import dataclass

from linkd.core import journal as jr

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MAX_USERS = 10_000
MAX_NAME_CHARS = 1024
MAX_SALT_BYTES = 1024


class ScramMechanism(enum.IntEnum):
    """Kafka's ScramMechanism, by its wire number."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL mechanism name (SCRAM-SHA-256)."""
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return {1: "sha256", 2: "sha512"}[self.value]

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        """The mechanism of a SASL mechanism name, or None."""
        for m in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            if m.mechanism_name == name:
                return m
        return None

    @classmethod
    def known(cls, value: int) -> ScramMechanism | None:
        if value in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            return cls(value)
        return None


SCRAM_MECHANISMS = (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


class Refusal(enum.Enum):
    """Why a user operation was refused (the shell maps it to Kafka's code)."""

    RESOURCE_NOT_FOUND = "RESOURCE_NOT_FOUND"
    DUPLICATE_RESOURCE = "DUPLICATE_RESOURCE"
    UNSUPPORTED_SASL_MECHANISM = "UNSUPPORTED_SASL_MECHANISM"
    UNACCEPTABLE_CREDENTIAL = "UNACCEPTABLE_CREDENTIAL"


@dataclass(frozen=True, slots=True)
class UserError:
    refusal: Refusal
    message: str


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    name: str
    mechanism: int


# -- SCRAM arithmetic (RFC 5802) -------------------------------------------------


def hmac_digest(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def digest(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC
    (Kafka does not SASLprep, so neither does this)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: ScramMechanism, salt: bytes, iterations: int, salted: bytes
) -> ScramCredential:
    client_key = hmac_digest(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        iterations=iterations,
        stored_key=digest(mechanism, client_key),
        server_key=hmac_digest(mechanism, salted, b"Server Key"),
    )


def credential_from_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salt, iterations, salted)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


# -- the store -------------------------------------------------------------------


def _unacceptable(message: str) -> UserError:
    return UserError(Refusal.UNACCEPTABLE_CREDENTIAL, message)


def check_upsertion(u: Upsertion) -> UserError | None:
    """Kafka's checks of one upsertion, in Kafka's order."""
    if not u.name:
        return _unacceptable("Username must not be empty")
    if len(u.name) > MAX_NAME_CHARS:
        return _unacceptable(f"Username is longer than {MAX_NAME_CHARS} characters")
    if ScramMechanism.known(u.mechanism) is None:
        return UserError(Refusal.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if u.iterations < MIN_ITERATIONS:
        return _unacceptable("Too few iterations")
    if u.iterations > MAX_ITERATIONS:
        return _unacceptable("Too many iterations")
    if not u.salt or len(u.salt) > MAX_SALT_BYTES:
        return _unacceptable(f"Salt must be 1 to {MAX_SALT_BYTES} bytes")
    if not u.salted_password:
        return _unacceptable("Salted password must not be empty")
    return None


UserRecord = jr.ScramUpsert | jr.ScramDelete


class UserStore:
    """The cluster's SCRAM users: {name: {mechanism: credential}}."""

    def __init__(self) -> None:
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    def __len__(self) -> int:
        return len(self._users)

    # -- queries -----------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self._users)

    def credential(self, name: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.get(name, {}).get(mechanism)

    def verify_password(self, name: str, password: str) -> bool:
        """True if any stored SCRAM credential of `name` matches `password`."""
        for mechanism, cred in sorted(self._users.get(name, {}).items()):
            candidate = credential_from_password(mechanism, password, cred.salt, cred.iterations)
            if hmac.compare_digest(candidate.stored_key, cred.stored_key):
                return True
        return False

    def describe(
        self, names: list[str] | None
    ) -> list[tuple[str, UserError | None, list[tuple[ScramMechanism, int]]]]:
        """Per user asked (every user for None): its (mechanism, iterations)
        pairs, or why it cannot be described."""
        if names is None:
            names = self.names()
        seen = Counter(names)
        out: list[tuple[str, UserError | None, list[tuple[ScramMechanism, int]]]] = []
        for name in dict.fromkeys(names):
            if seen[name] > 1:
                message = (
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}"
                )
                out.append((name, UserError(Refusal.DUPLICATE_RESOURCE, message), []))
            elif name not in self._users:
                message = f"Attempt to describe a user credential that does not exist: {name}"
                out.append((name, UserError(Refusal.RESOURCE_NOT_FOUND, message), []))
            else:
                creds = sorted(self._users[name].items())
                out.append((name, None, [(m, c.iterations) for m, c in creds]))
        return out

    # -- changes -------------------------------------------------------------------

    def alter(
        self, deletions: list[Deletion], upsertions: list[Upsertion]
    ) -> tuple[dict[str, UserError | None], list[UserRecord]]:
        """Kafka's AlterUserScramCredentials: per user named, None (every
        change of it applied) or the first refusal (none of its changes
        applied); the records of what changed."""
        results: dict[str, UserError | None] = {}
        counts = Counter([d.name for d in deletions] + [u.name for u in upsertions])
        for name, count in counts.items():
            if count > 1:
                results[name] = UserError(
                    Refusal.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
        records: list[UserRecord] = []
        for d in deletions:
            if d.name not in results:
                results[d.name] = self._delete(d, records)
        for u in upsertions:
            if u.name not in results:
                results[u.name] = self._upsert(u, records)
        return results, records

    def _delete(self, d: Deletion, records: list[UserRecord]) -> UserError | None:
        if not d.name:
            return _unacceptable("Username must not be empty")
        mechanism = ScramMechanism.known(d.mechanism)
        if mechanism is None:
            return UserError(Refusal.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        if self.credential(d.name, mechanism) is None:
            return UserError(
                Refusal.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        record = jr.ScramDelete(d.name, int(mechanism))
        self.apply_record(record)
        records.append(record)
        return None

    def _upsert(self, u: Upsertion, records: list[UserRecord]) -> UserError | None:
        refused = check_upsertion(u)
        if refused is not None:
            return refused
        if u.name not in self._users and len(self._users) >= MAX_USERS:
            return _unacceptable(f"Too many users (limit {MAX_USERS})")
        mechanism = ScramMechanism(u.mechanism)
        cred = credential_from_salted(mechanism, u.salt, u.iterations, u.salted_password)
        record = upsert_record(u.name, mechanism, cred)
        self.apply_record(record)
        records.append(record)
        return None

    def set_password(
        self, name: str, password: str, salts: dict[ScramMechanism, bytes], iterations: int
    ) -> list[UserRecord]:
        """Gives `name` a credential per mechanism in `salts` for `password`
        (the bootstrap of --sasl-users), unless its stored credentials already
        verify it; the records of what changed (none when nothing did)."""
        if self.verify_password(name, password) and all(
            self.credential(name, m) is not None for m in salts
        ):
            return []
        records: list[UserRecord] = []
        for mechanism, salt in sorted(salts.items()):
            upsertion = Upsertion(
                name,
                int(mechanism),
                iterations,
                salt,
                salted_password(mechanism, password, salt, iterations),
            )
            refused = self._upsert(upsertion, records)
            if refused is not None:
                raise ValueError(f"user {name!r}: {refused.message}")
        return records

    # -- durability ------------------------------------------------------------------

    def apply_record(self, record: UserRecord) -> None:
        mechanism = ScramMechanism(record.mechanism)
        if isinstance(record, jr.ScramUpsert):
            cred = ScramCredential(
                _unb64(record.salt),
                record.iterations,
                _unb64(record.stored_key),
                _unb64(record.server_key),
            )
            self._users.setdefault(record.user, {})[mechanism] = cred
            return
        creds = self._users.get(record.user, {})
        creds.pop(mechanism, None)
        if not creds:
            self._users.pop(record.user, None)

    def snapshot(self) -> dict[str, object]:
        return {
            "version": 1,
            "credentials": [
                jr.encode(upsert_record(name, m, c))
                for name, creds in sorted(self._users.items())
                for m, c in sorted(creds.items())
            ],
        }

    @classmethod
    def restore(cls, snapshot: dict[str, object]) -> UserStore:
        store = cls()
        for stored in jr.json_list(snapshot["credentials"]):
            record = jr.decode(jr.json_object(stored))
            assert isinstance(record, jr.ScramUpsert)
            store.apply_record(record)
        return store


def upsert_record(name: str, mechanism: ScramMechanism, cred: ScramCredential) -> jr.ScramUpsert:
    return jr.ScramUpsert(
        user=name,
        mechanism=int(mechanism),
        salt=_b64(cred.salt),
        iterations=cred.iterations,
        stored_key=_b64(cred.stored_key),
        server_key=_b64(cred.server_key),
    )
