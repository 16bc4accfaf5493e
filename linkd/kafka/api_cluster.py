"""Metadata, DescribeCluster and FindCoordinator: the cluster as one broker.

Rules:
- A linkd cluster presents itself as one broker (`Broker`): it leads every
  partition, is the only replica and the only in-sync replica, is the
  controller, and coordinates every group and transactional id.
- Topic ids are the core's (stable for the topic's life, fresh on re-creation),
  so clients that fetch by id (Fetch v13+) keep working.
- Metadata never creates topics (auto.create.topics.enable=false): an unknown
  topic answers UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID when asked by id).
- Authorized operations, when asked for, are every operation of the resource
  type: ACLs are stored, not enforced (see linkd/core/acls.py).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import AclOperation as Op
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.topic_config import valid_topic_name
from linkd.kafka.codec import field
from linkd.kafka.context import AUTHORIZED_OPERATIONS_OMITTED, Context, operations_bits
from linkd.kafka.errors import kafka_code

log = logging.getLogger("linkd.kafka")

TOPIC_OPERATIONS = operations_bits(
    (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    )
)
CLUSTER_OPERATIONS = operations_bits(
    (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
        Op.CREATE_TOKENS,
        Op.DESCRIBE_TOKENS,
    )
)
GROUP_OPERATIONS = operations_bits((Op.READ, Op.DESCRIBE, Op.DELETE))

_ZERO_UUID = uuid.UUID(int=0)

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


def _topic_entry(ctx: Context, name: str, include_ops: bool) -> dict[str, Any]:
    topic = ctx.node.state.topics[name]
    node_id = ctx.broker.node_id
    return {
        "error_code": 0,
        "name": name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": log.partition,
                "leader_id": node_id,
                "leader_epoch": log.leader_epoch,
                "replica_nodes": [node_id],
                "isr_nodes": [node_id],
                "offline_replicas": [],
            }
            for log in topic.partitions
        ],
        "topic_authorized_operations": (
            TOPIC_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }


async def metadata(ctx: Context, req: Any) -> dict[str, Any]:
    state = ctx.node.state
    include_ops = bool(field(req, "include_topic_authorized_operations", False))
    requested = req.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        names = sorted(state.topics)
        topics = [_topic_entry(ctx, n, include_ops) for n in names]
    else:
        by_id = {t.topic_id: t.name for t in state.topics.values()}
        topics = []
        for t in requested:
            topic_id = field(t, "topic_id")
            name = t.name
            if name is None and topic_id is not None and topic_id != _ZERO_UUID:
                name = by_id.get(str(topic_id))
                if name is None:
                    topics.append(
                        {
                            "error_code": int(K.unknown_topic_id),
                            "name": None,
                            "topic_id": topic_id,
                            "partitions": [],
                        }
                    )
                    continue
            if name is not None and name not in state.topics and _may_auto_create(ctx, req, name):
                refusal = await _auto_create(ctx, name)
                if refusal is not None:
                    topics.append(
                        {"error_code": refusal, "name": name, "topic_id": _ZERO_UUID,
                         "partitions": []}
                    )
                    continue
            if name is not None and name in state.topics:
                topics.append(_topic_entry(ctx, name, include_ops))
            else:
                topics.append(
                    {
                        # A name no topic can have is an error the producer
                        # reports at once; an unknown one it waits out.
                        "error_code": int(
                            K.invalid_topic_exception
                            if name is not None and not valid_topic_name(name)
                            else K.unknown_topic_or_partition
                        ),
                        "name": name,
                        "topic_id": _ZERO_UUID,
                        "partitions": [],
                    }
                )
    include_cluster_ops = bool(field(req, "include_cluster_authorized_operations", False))
    return {
        "throttle_time": 0,
        "brokers": [ctx.broker.as_metadata()],
        "cluster_id": ctx.node.cluster_id,
        "controller_id": ctx.broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS if include_cluster_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
        "error_code": 0,
    }


def _may_auto_create(ctx: Context, req: Any, name: str) -> bool:
    """auto.create.topics.enable is on, the request allows it (Metadata v4+
    says so; before, it always did), and the name is one a topic can have."""
    allowed = ctx.api_version < 4 or bool(field(req, "allow_auto_topic_creation", True))
    return ctx.auto_create_topics and allowed and valid_topic_name(name)


async def _auto_create(ctx: Context, name: str) -> int | None:
    """Creates the topic as CreateTopics would, with num.partitions and the
    default configs; the Kafka error code of a refusal (a name inside a
    namespace this cluster follows, say), or None."""
    try:
        await ctx.node.create_topic(name, ctx.num_partitions, {})
    except ClusterError as exc:
        if exc.code is ErrorCode.TOPIC_ALREADY_EXISTS:
            return None  # another request created it meanwhile
        log.info("kafka: topic not auto-created", extra={"topic": name, "error": exc.message})
        return kafka_code(exc)
    log.info(
        "kafka: topic auto-created",
        extra={"topic": name, "partitions": ctx.num_partitions, "client": ctx.client_id},
    )
    return None


async def describe_cluster(ctx: Context, req: Any) -> dict[str, Any]:
    include_ops = bool(field(req, "include_cluster_authorized_operations", False))
    endpoint_type = int(field(req, "endpoint_type", 1))
    if endpoint_type != 1:  # 1: brokers; 2: controllers (KIP-919)
        return {
            "error_code": int(K.unsupported_endpoint_type),
            "error_message": f"endpoint type {endpoint_type} is not served; use 1 (brokers)",
            "endpoint_type": endpoint_type,
            "cluster_id": ctx.node.cluster_id,
            "brokers": [],
        }
    return {
        "error_code": 0,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": ctx.node.cluster_id,
        "controller_id": ctx.broker.node_id,
        "brokers": [ctx.broker.as_metadata()],
        "cluster_authorized_operations": (
            CLUSTER_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED
        ),
    }


def _coordinator(ctx: Context, key: str, key_type: int) -> dict[str, Any]:
    if key_type not in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": int(K.invalid_request),
            "error_message": f"coordinator key type {key_type} is not served "
            "(0: group, 1: transaction)",
        }
    return {
        "key": key,
        "node_id": ctx.broker.node_id,
        "host": ctx.broker.host,
        "port": ctx.broker.port,
        "error_code": 0,
        "error_message": None,
    }


async def find_coordinator(ctx: Context, req: Any) -> dict[str, Any]:
    key_type = int(field(req, "key_type", COORDINATOR_GROUP))
    keys = field(req, "coordinator_keys")
    if keys is not None and ctx.api_version >= 4:
        return {"coordinators": [_coordinator(ctx, k, key_type) for k in keys]}
    one = _coordinator(ctx, str(field(req, "key", "")), key_type)
    return {
        "error_code": one["error_code"],
        "error_message": one["error_message"],
        "node_id": one["node_id"],
        "host": one["host"],
        "port": one["port"],
    }
