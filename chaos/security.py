"""Security for chaos runs (`ccr-chaos --secure`): every protection on.

A secure run starts each daemon with SASL_SSL on both listeners (test
certificates made by `scripts/make-certs.py`, a SCRAM super user from
`--sasl-users`), `--authorizer acl` with that user as the only super user,
link credentials (`--link-credentials-file`), and links that dial TLS
(`SASL_SSL://` addresses checked with `--link-tls-ca`). Every client of the
run (admin calls, workloads, readers, the Kafka producer) connects as that
user over TLS: `client_config`.

One run at a time per process (the chaos runner's rule): `use` sets the
settings every client and daemon of the run reads; `reset` clears them.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUPER_USER = "chaos"


@dataclass(frozen=True, slots=True)
class ChaosSecurity:
    """What a run's daemons and clients use (PLAINTEXT, nothing: the default)."""

    protocol: str = "PLAINTEXT"  # both listeners' (Kafka's listener names)
    client: dict[str, str] = field(default_factory=dict)  # security.protocol, ssl.*, sasl.*
    daemon_args: tuple[str, ...] = ()
    link_credentials: str = ""

    def listener(self, address: str) -> str:
        return address if self.protocol == "PLAINTEXT" else f"{self.protocol}://{address}"


_current = ChaosSecurity()


def current() -> ChaosSecurity:
    return _current


def use(security: ChaosSecurity) -> None:
    global _current
    _current = security


def reset() -> None:
    use(ChaosSecurity())


def client_config(address: str, **extra: Any) -> dict[str, Any]:
    """A client's settings for a daemon of this run (our client library and
    confluent-kafka read the same keys)."""
    return {"bootstrap.servers": address, **_current.client, **extra}


def prepare(workdir: Path, seed: int) -> ChaosSecurity:
    """Certificates, the super user and the link credentials of a secure run,
    written under `workdir` (readable by their owner only)."""
    certs = workdir / "certs"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make-certs.py"), str(certs)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    password = secrets.token_hex(16)
    users = _private(workdir / "users.txt", f"{SUPER_USER}:{password}\n")
    link_secret = f"chaos-{seed}-{secrets.token_hex(16)}"
    link_file = _private(workdir / "link-credentials", f"{link_secret}\n")
    ca = str(certs / "ca.pem")
    return ChaosSecurity(
        protocol="SASL_SSL",
        client={
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca,
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": SUPER_USER,
            "sasl.password": password,
        },
        daemon_args=(
            "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
            "--link-tls-ca", ca, "--sasl-users", str(users),
            "--authorizer", "acl", "--super-users", f"User:{SUPER_USER}",
            "--link-credentials-file", str(link_file),
        ),
        link_credentials=link_secret,
    )  # fmt: skip


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path
