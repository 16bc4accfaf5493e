"""Idempotent and transactional producers over the Kafka protocol.

Rules:
- InitProducerId hands out a producer id (and epoch) from the core; with a
  transactional id it bumps the epoch, fencing older producers, and aborts an
  open transaction first. A transaction timeout <= 0 in a request without a
  transactional id is ignored (idempotent producers send -1).
- AddPartitionsToTxn (v0-v3, the client versions), AddOffsetsToTxn and EndTxn
  call the core's transaction coordinator; a refusal is the answer of every
  partition named. TxnOffsetCommit lives with the group APIs.
- Refusals use the coordinator variant of the error table.
- Authorization (`--authorizer acl`, linkd/kafka/authz.py), Kafka's: every
  call with a transactional id needs WRITE on it; InitProducerId without one
  needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679);
  AddPartitionsToTxn WRITE on each topic (a refused topic answers
  TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED, and none is
  added); AddOffsetsToTxn READ on the group.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.errors import ClusterError
from linkd.kafka import authz
from linkd.kafka.codec import field, ms
from linkd.kafka.context import Context
from linkd.kafka.errors import kafka_code

# The core wants a positive timeout even when it does not use it.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


def _code(exc: ClusterError) -> int:
    return kafka_code(exc, coordinator=True)


async def init_producer_id(ctx: Context, req: Any) -> dict[str, Any]:
    txn_id = req.transactional_id or ""
    timeout_ms = ms(req.transaction_timeout)
    if not txn_id and timeout_ms <= 0:
        timeout_ms = DEFAULT_TRANSACTION_TIMEOUT_MS
    # v3+ carry the caller's producer id and epoch (KIP-360); -1 / -1: none.
    expected = (int(field(req, "producer_id", -1)), int(field(req, "producer_epoch", -1)))
    try:
        _check_init(ctx, txn_id)
        pid, epoch = await ctx.node.init_producer_id(txn_id, timeout_ms, expected)
    except ClusterError as exc:
        code = _code(exc)
        if code == int(K.producer_fenced) and ctx.api_version < 4:
            code = int(K.invalid_producer_epoch)  # older clients do not know it (KIP-588)
        return {
            "throttle_time": 0,
            "error_code": code,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": epoch}


def _check_init(ctx: Context, txn_id: str) -> None:
    if txn_id:
        authz.check(ctx, R.TRANSACTIONAL_ID, txn_id, Op.WRITE)
        return
    if authz.cluster_allowed(ctx, Op.IDEMPOTENT_WRITE, quiet=True):
        return
    if ctx.node.authz.allowed_any(authz.caller(ctx), R.TOPIC, Op.WRITE):
        return
    ctx.node.authz.check_cluster(authz.caller(ctx), Op.IDEMPOTENT_WRITE)


def _topic_refusals(ctx: Context, topics: Any) -> dict[str, int]:
    """Each topic's code when some topic may not be written: its refusal, or
    OPERATION_NOT_ATTEMPTED; empty when every topic may."""
    codes = {t.name: authz.topic_code(ctx, t.name, Op.WRITE) for t in topics}
    if not any(codes.values()):
        return {}
    return {n: c or int(K.operation_not_attempted) for n, c in codes.items()}


async def add_partitions_to_txn(ctx: Context, req: Any) -> dict[str, Any]:
    topics = req.v3_and_below_topics
    partitions = [(t.name, int(p)) for t in topics for p in t.partitions]
    code = 0
    per_topic: dict[str, int] = {}
    try:
        authz.check(ctx, R.TRANSACTIONAL_ID, req.v3_and_below_transactional_id, Op.WRITE)
        per_topic = _topic_refusals(ctx, topics)
        if not per_topic:
            await ctx.node.add_partitions_to_txn(
                req.v3_and_below_transactional_id,
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
                partitions,
            )
    except ClusterError as exc:
        code = _code(exc)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": per_topic.get(t.name, code)}
                    for p in t.partitions
                ],
            }
            for t in topics
        ],
    }


async def add_offsets_to_txn(ctx: Context, req: Any) -> dict[str, Any]:
    try:
        authz.check(ctx, R.TRANSACTIONAL_ID, req.transactional_id, Op.WRITE)
        authz.check(ctx, R.GROUP, req.group_id, Op.READ)
        await ctx.node.add_offsets_to_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, req.group_id
        )
    except ClusterError as exc:
        return {"throttle_time": 0, "error_code": _code(exc)}
    return {"throttle_time": 0, "error_code": 0}


async def end_txn(ctx: Context, req: Any) -> dict[str, Any]:
    try:
        authz.check(ctx, R.TRANSACTIONAL_ID, req.transactional_id, Op.WRITE)
        await ctx.node.end_txn(
            req.transactional_id, req.producer_id, req.producer_epoch, bool(req.committed)
        )
    except ClusterError as exc:
        return {"throttle_time": 0, "error_code": _code(exc)}
    return {"throttle_time": 0, "error_code": 0}
