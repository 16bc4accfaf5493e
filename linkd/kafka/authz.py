"""Authorization on the Kafka listener: the operations Kafka's broker checks.

The decision is the core's (`linkd/core/authorizer.py`), asked through the
node's gate (`linkd/authz.py`) with the connection's principal and address;
handlers call the helpers below before they touch the cluster, so a refused
request changes nothing.

Two kinds of rules:
- Whole-request rules on the cluster resource (`CLUSTER_OPERATION`, by API
  key): checked by the listener before the handler runs. A refused request is
  answered with CLUSTER_AUTHORIZATION_FAILED in every error code of the
  response (`codec.error_body`), or, for the APIs that answer per item
  (CreateAcls, DeleteAcls, AlterReplicaLogDirs, ElectLeaders, Describe- and
  AlterUserScramCredentials), in every item, as Kafka does.
- Per-resource rules (topics, groups, transactional ids): in the handlers,
  with the answer shape of each API; docs/security.md lists them all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from linkd.authz import Caller
from linkd.core.acls import CLUSTER_RESOURCE_NAME
from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.errors import ClusterError
from linkd.kafka.context import AUTHORIZED_OPERATIONS_OMITTED, Context, operations_bits
from linkd.kafka.errors import kafka_code, kafka_message

# API key -> the operation on the cluster resource the whole request needs.
CLUSTER_OPERATION: Mapping[int, Op] = MappingProxyType(
    {
        29: Op.DESCRIBE,  # DescribeAcls
        30: Op.ALTER,  # CreateAcls
        31: Op.ALTER,  # DeleteAcls
        34: Op.ALTER,  # AlterReplicaLogDirs
        35: Op.DESCRIBE,  # DescribeLogDirs
        43: Op.ALTER,  # ElectLeaders
        45: Op.ALTER,  # AlterPartitionReassignments
        46: Op.DESCRIBE,  # ListPartitionReassignments
        50: Op.DESCRIBE,  # DescribeUserScramCredentials
        51: Op.ALTER,  # AlterUserScramCredentials
        55: Op.DESCRIBE,  # DescribeQuorum
    }
)


def caller(ctx: Context) -> Caller:
    return Caller.of(ctx.principal, ctx.client_host)


def allowed(ctx: Context, resource_type: int, name: str, op: int, *, quiet: bool = False) -> bool:
    return ctx.node.authz.allowed(caller(ctx), resource_type, name, op, quiet=quiet)


def refusal(ctx: Context, resource_type: int, name: str, op: int) -> ClusterError | None:
    return ctx.node.authz.refusal(caller(ctx), resource_type, name, op)


def check(ctx: Context, resource_type: int, name: str, op: int) -> None:
    ctx.node.authz.check(caller(ctx), resource_type, name, op)


def cluster_allowed(ctx: Context, op: int, *, quiet: bool = False) -> bool:
    return allowed(ctx, R.CLUSTER, CLUSTER_RESOURCE_NAME, op, quiet=quiet)


def topic_code(ctx: Context, topic: str, op: int) -> int:
    """0, or TOPIC_AUTHORIZATION_FAILED's number."""
    exc = refusal(ctx, R.TOPIC, topic, op)
    return 0 if exc is None else kafka_code(exc)


def operations_field(ctx: Context, resource_type: int, name: str, include: bool) -> int:
    """An authorized-operations field: the allowed operations' bits, or
    "omitted" when the request did not ask. As Kafka, none (0) unless the
    caller may DESCRIBE the resource (Metadata and DescribeCluster report the
    cluster's operations only to those who may describe it)."""
    if not include:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not allowed(ctx, resource_type, name, Op.DESCRIBE, quiet=True):
        return 0
    return operations_bits(ctx.node.authz.operations(caller(ctx), resource_type, name))


def may_create_topic(ctx: Context, topic: str) -> bool:
    """CREATE on the cluster (not logged when missing, as Kafka) or on the topic."""
    return cluster_allowed(ctx, Op.CREATE, quiet=True) or allowed(ctx, R.TOPIC, topic, Op.CREATE)


# -- whole-request rules --------------------------------------------------------------------


def cluster_refusal(ctx: Context, api_key: int) -> ClusterError | None:
    """The refusal of a request whose API needs an operation on the cluster."""
    op = CLUSTER_OPERATION.get(api_key)
    if op is None:
        return None
    return ctx.node.authz.cluster_refusal(caller(ctx), op)


def _item(exc: ClusterError) -> dict[str, Any]:
    return {"error_code": kafka_code(exc), "error_message": kafka_message(exc)}


def _create_acls(body: Any, exc: ClusterError) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [_item(exc) for _ in body.creations]}


def _delete_acls(body: Any, exc: ClusterError) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "filter_results": [{**_item(exc), "matching_acls": []} for _ in body.filters],
    }


def _elect_leaders(body: Any, exc: ClusterError) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": kafka_code(exc),
        "replica_election_results": [
            {
                "topic": t.topic,
                "partition_result": [{"partition_id": int(p), **_item(exc)} for p in t.partitions],
            }
            for t in body.topic_partitions or ()
        ],
    }


def _alter_log_dirs(body: Any, exc: ClusterError) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    for d in body.dirs:
        for t in d.topics:
            results.setdefault(t.name, []).extend(
                {"partition_index": int(p), "error_code": kafka_code(exc)} for p in t.partitions
            )
    return {
        "throttle_time": 0,
        "results": [{"topic_name": n, "partitions": rows} for n, rows in results.items()],
    }


def _alter_scram(body: Any, exc: ClusterError) -> dict[str, Any]:
    users = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    return {"throttle_time": 0, "results": [{"user": u, **_item(exc)} for u in users]}


def _describe_scram(body: Any, exc: ClusterError) -> dict[str, Any]:
    """One refused result per named user; a request naming none (every
    user) gets the top-level error alone. Kafka also sets the top-level
    error beside the named users' results, but librdkafka (confluent-kafka
    2.16.1) frees that answer twice and aborts, as it crashes on an empty
    result list: each named user's own error is what every client reads."""
    users = [u.name for u in body.users or ()]
    if not users:
        return {"throttle_time": 0, **_item(exc), "results": []}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "results": [{"user": u, **_item(exc), "credential_infos": []} for u in users],
    }


# API key -> the refused answer, for the APIs that answer per item.
PER_ITEM_REFUSAL: Mapping[int, Callable[[Any, ClusterError], dict[str, Any]]] = (
    MappingProxyType(
        {
            30: _create_acls,
            31: _delete_acls,
            34: _alter_log_dirs,
            43: _elect_leaders,
            50: _describe_scram,
            51: _alter_scram,
        }
    )
)


# API key -> what the API needs, as docs/security.md states it (a test checks
# that every served API has a rule and that the doc lists the same text).
RULES: Mapping[int, str] = MappingProxyType(
    {
        0: "WRITE on each topic; with a transactional id, WRITE on it first (else every "
        "partition is refused)",
        1: "READ on each topic (TOPIC_AUTHORIZATION_FAILED per partition)",
        2: "DESCRIBE on each topic",
        3: "DESCRIBE on each topic: unlisted topics are filtered, named ones are refused; "
        "auto-creation also needs CREATE on the cluster or the topic",
        8: "READ on the group, READ on each topic (per partition)",
        9: "DESCRIBE on the group, DESCRIBE on each topic (per partition; unlisted topics "
        "are filtered)",
        10: "DESCRIBE on the group or the transactional id",
        11: "READ on the group",
        12: "READ on the group",
        13: "READ on the group",
        14: "READ on the group",
        15: "DESCRIBE on each group",
        16: "DESCRIBE on the cluster lists every group; otherwise only the groups with "
        "DESCRIBE",
        17: "nothing (authentication)",
        18: "nothing",
        19: "CREATE on the cluster or on each topic; DESCRIBE_CONFIGS on the topic to be "
        "shown its configs",
        20: "DELETE on each topic",
        21: "DELETE on each topic",
        22: "WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster "
        "or WRITE on some topic (KIP-679)",
        23: "DESCRIBE on each topic",
        24: "WRITE on the transactional id, WRITE on each topic (a refused topic: "
        "TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED)",
        25: "WRITE on the transactional id, READ on the group",
        26: "WRITE on the transactional id",
        28: "WRITE on the transactional id, READ on the group, READ on each topic",
        29: "DESCRIBE on the cluster",
        30: "ALTER on the cluster",
        31: "ALTER on the cluster",
        32: "DESCRIBE_CONFIGS on each topic, on the cluster (broker resources) or on the "
        "group",
        33: "ALTER_CONFIGS on each topic, on the cluster (broker resources) or on the group",
        34: "ALTER on the cluster (refused: CLUSTER_AUTHORIZATION_FAILED in each partition)",
        35: "DESCRIBE on the cluster",
        36: "nothing (authentication)",
        37: "ALTER on each topic",
        42: "DELETE on each group",
        43: "ALTER on the cluster",
        44: "ALTER_CONFIGS on each topic, on the cluster (broker resources) or on the group",
        45: "ALTER on the cluster",
        46: "DESCRIBE on the cluster",
        47: "DELETE on the group, READ on each topic (per partition)",
        50: "DESCRIBE on the cluster (refused: CLUSTER_AUTHORIZATION_FAILED in each named "
        "user's result, or at the top when none is named)",
        51: "ALTER on the cluster",
        55: "DESCRIBE on the cluster",
        60: "nothing (authorized operations, when asked, are the caller's)",
        75: "DESCRIBE on each topic: unlisted topics are filtered, named ones are refused",
    }
)
