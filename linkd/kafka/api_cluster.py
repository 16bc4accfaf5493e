"""Metadata, DescribeCluster and FindCoordinator: the cluster as one broker.

Rules:
- A linkd cluster presents itself as one broker (`Broker`): it leads every
  partition, is the only replica and the only in-sync replica, is the
  controller, and coordinates every group and transactional id.
- Topic ids are the core's (stable for the topic's life, fresh on re-creation),
  so clients that fetch by id (Fetch v13+) keep working.
- Metadata never creates topics (auto.create.topics.enable=false): an unknown
  topic answers UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID when asked by id).
- Authorization (`--authorizer acl`, linkd/kafka/authz.py): Metadata lists
  only the topics the principal may DESCRIBE when asked for every topic, and
  answers TOPIC_AUTHORIZATION_FAILED for a named one it may not (whether or
  not it exists); auto-creation also needs CREATE on the cluster or the
  topic. FindCoordinator needs DESCRIBE on the group or transactional id.
  Authorized operations, when asked for, are the ones the principal has
  (every operation of the type without an authorizer).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import CLUSTER_RESOURCE_NAME
from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.topic_config import valid_topic_name
from linkd.kafka import authz
from linkd.kafka.codec import field
from linkd.kafka.context import Context, error_fields
from linkd.kafka.errors import kafka_code

log = logging.getLogger("linkd.kafka")

_ZERO_UUID = uuid.UUID(int=0)

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


def _topic_entry(ctx: Context, name: str, include_ops: bool) -> dict[str, Any]:
    """A topic the principal may DESCRIBE."""
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
        "topic_authorized_operations": authz.operations_field(ctx, R.TOPIC, name, include_ops),
    }


def _refused_topic(name: str | None, topic_id: uuid.UUID = _ZERO_UUID) -> dict[str, Any]:
    return {
        "error_code": int(K.topic_authorization_failed),
        "name": name,
        "topic_id": topic_id,
        "partitions": [],
    }


async def metadata(ctx: Context, req: Any) -> dict[str, Any]:
    state = ctx.node.state
    include_ops = bool(field(req, "include_topic_authorized_operations", False))
    requested = req.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        names = [
            n for n in sorted(state.topics)
            if authz.allowed(ctx, R.TOPIC, n, Op.DESCRIBE, quiet=True)
        ]
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
            if name is not None and not authz.allowed(ctx, R.TOPIC, name, Op.DESCRIBE):
                topics.append(_refused_topic(None if topic_id and t.name is None else name,
                                             topic_id or _ZERO_UUID))
                continue
            if name is not None and name not in state.topics and _may_auto_create(ctx, req, name):
                if not authz.may_create_topic(ctx, name):
                    topics.append(_refused_topic(name))
                    continue
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
        "cluster_authorized_operations": authz.operations_field(
            ctx, R.CLUSTER, CLUSTER_RESOURCE_NAME, include_cluster_ops
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
        "cluster_authorized_operations": authz.operations_field(
            ctx, R.CLUSTER, CLUSTER_RESOURCE_NAME, include_ops
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
    resource = R.GROUP if key_type == COORDINATOR_GROUP else R.TRANSACTIONAL_ID
    refused = authz.refusal(ctx, resource, key, Op.DESCRIBE)
    if refused is not None:
        return {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            **error_fields(refused),
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
