"""Who a gRPC caller is.

`principal_of(context)` is the principal ("Type:name", as Kafka's
KafkaPrincipal prints it) the gRPC services authorize (linkd/authz.py). This
version knows no authentication: every caller is User:ANONYMOUS, as on a
PLAINTEXT Kafka listener. Authentication (TLS client certificates, user and
password in call metadata) replaces the body and keeps the signature.
"""

from __future__ import annotations

from typing import Any

ANONYMOUS = "User:ANONYMOUS"


def principal_of(context: Any) -> str:
    """The authenticated principal of the call `context` belongs to."""
    del context
    return ANONYMOUS
