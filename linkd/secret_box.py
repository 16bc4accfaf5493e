"""Secrets at rest: link credentials and link keys are stored sealed.

As Kafka's `password.encoder.secret` seals the passwords in its dynamic
configs, a daemon seals every secret it journals (a link's credentials for
its remote, the link's key) with Fernet (AES-128-CBC and HMAC-SHA256, from
the `cryptography` package) under a key derived from the password encoder
secret. That secret comes from `--password-encoder-secret-file FILE` or the
`CCR_PASSWORD_ENCODER_SECRET` environment variable; without either, the
daemon generates one into `<data dir>/password-encoder.secret` (mode 0600) at
first start. A journal or snapshot copied without the secret shows no link
secret; the data directory itself holds the secret unless the operator keeps
it elsewhere (docs/security.md).

Sealed values read `sealed:v1:<token>`; "" stays "" (no secret). A value
without the prefix was written before secrets were sealed and is read as it
is (`open` says so through `legacy`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from linkd.core.errors import ClusterError, ErrorCode

ENV_VAR = "CCR_PASSWORD_ENCODER_SECRET"
SECRET_FILE = "password-encoder.secret"
PREFIX = "sealed:v1:"


class SecretBox:
    """Seals and opens secrets under one password encoder secret."""

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise ValueError("the password encoder secret is empty")
        digest = hashlib.sha256(b"ccr password encoder\0" + secret).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))

    @classmethod
    def for_daemon(cls, data_dir: Path, secret_file: str = "") -> SecretBox:
        """The daemon's box: the secret from `secret_file`, else the
        environment, else the data directory's own (generated once)."""
        if secret_file:
            return cls(Path(secret_file).read_bytes().strip())
        from_env = os.environ.get(ENV_VAR, "")
        if from_env:
            return cls(from_env.encode())
        path = data_dir / SECRET_FILE
        if not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32))
                f.flush()
                os.fsync(f.fileno())
        return cls(path.read_bytes().strip())

    def seal(self, plain: str) -> str:
        if not plain:
            return ""
        return PREFIX + self._fernet.encrypt(plain.encode()).decode()

    def seal_bytes(self, plain: bytes) -> str:
        return self.seal(plain.hex()) if plain else ""

    def open(self, sealed: str, what: str) -> str:
        """The secret; ClusterError naming `what` when it cannot be opened
        (sealed under another password encoder secret)."""
        if not sealed.startswith(PREFIX):
            return sealed
        try:
            return self._fernet.decrypt(sealed[len(PREFIX) :].encode()).decode()
        except InvalidToken as exc:
            raise ClusterError(
                ErrorCode.LINK_AUTHENTICATION_FAILED,
                what,
                f"{what} cannot be opened: it was sealed under another password encoder "
                "secret (--password-encoder-secret-file or CCR_PASSWORD_ENCODER_SECRET changed)",
            ) from exc

    def open_bytes(self, sealed: str, what: str) -> bytes:
        plain = self.open(sealed, what)
        return bytes.fromhex(plain) if plain else b""


def legacy(sealed: str) -> bool:
    """A non-empty value stored before secrets were sealed."""
    return bool(sealed) and not sealed.startswith(PREFIX)
