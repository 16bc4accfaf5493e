"""SCRAM user administration over the Kafka protocol (KIP-554), and the SASL
calls a connection makes when it is not authenticating.

Rules:
- DescribeUserScramCredentials: a null user list describes every user; each
  user asked is answered on its own (RESOURCE_NOT_FOUND for an unknown user,
  DUPLICATE_RESOURCE for a user asked twice), with its (mechanism,
  iterations) pairs, never a salt or key.
- AlterUserScramCredentials: upsertions carry a salt, iterations and the
  salted password as Kafka's AdminClient computes them; the core keeps only
  the stored and server keys (linkd/core/users.py). Each user named is
  answered on its own; the refusals are Kafka's (UNACCEPTABLE_CREDENTIAL,
  UNSUPPORTED_SASL_MECHANISM, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE).
- No ACL is checked here (the authorizer does that, in front of every API).
- SaslHandshake and SaslAuthenticate reach these handlers only on a
  connection that is not authenticating (a PLAINTEXT or SSL listener, or
  after authentication completed): ILLEGAL_SASL_STATE, as Kafka's KafkaApis.
  While a SASL connection authenticates, the listener answers them itself
  (linkd/kafka/server.py, linkd/kafka/sasl.py).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.users import Deletion, Refusal, Upsertion, UserError
from linkd.kafka.context import Context

REFUSAL_CODES = {
    Refusal.RESOURCE_NOT_FOUND: int(K.resource_not_found),
    Refusal.DUPLICATE_RESOURCE: int(K.duplicate_resource),
    Refusal.UNSUPPORTED_SASL_MECHANISM: int(K.unsupported_sasl_mechanism),
    Refusal.UNACCEPTABLE_CREDENTIAL: int(K.unacceptable_credential),
}


def _error(error: UserError | None) -> dict[str, Any]:
    if error is None:
        return {"error_code": 0, "error_message": None}
    return {"error_code": REFUSAL_CODES[error.refusal], "error_message": error.message}


async def describe_user_scram_credentials(ctx: Context, req: Any) -> dict[str, Any]:
    names = None if req.users is None else [u.name for u in req.users]
    described = ctx.node.describe_scram_credentials(names)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "results": [
            {
                "user": name,
                **_error(error),
                "credential_infos": [{"mechanism": int(m), "iterations": it} for m, it in infos],
            }
            for name, error, infos in described
        ],
    }


async def alter_user_scram_credentials(ctx: Context, req: Any) -> dict[str, Any]:
    deletions = [Deletion(d.name, int(d.mechanism)) for d in req.deletions]
    upsertions = [
        Upsertion(
            u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)
        )
        for u in req.upsertions
    ]
    results = await ctx.node.alter_scram_credentials(deletions, upsertions)
    return {
        "throttle_time": 0,
        "results": [{"user": name, **_error(error)} for name, error in results.items()],
    }


async def sasl_handshake(ctx: Context, req: Any) -> dict[str, Any]:
    return {"error_code": int(K.illegal_sasl_state), "mechanisms": []}


async def sasl_authenticate(ctx: Context, req: Any) -> dict[str, Any]:
    return {
        "error_code": int(K.illegal_sasl_state),
        "error_message": "SaslAuthenticate request received while not authenticating",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
