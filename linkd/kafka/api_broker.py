"""The admin APIs about brokers, replicas and the metadata quorum, answered
as a single-broker Kafka cluster answers them.

A linkd cluster is one broker holding one replica of every partition, with
its metadata in one journal. Newer admin clients ask for these APIs and fail
on UNSUPPORTED_VERSION, so each is answered with what a one-broker Kafka
would say, from the cluster's real state:
- DescribeTopicPartitions (KIP-966): the partitions of the asked topics (all,
  when none is named), in name order, paginated by a cursor and a partition
  limit; the broker leads and is the only in-sync replica of each.
- DescribeLogDirs: one log directory, the data directory, with each
  partition's size and the disk's total and usable bytes.
- DescribeQuorum: `__cluster_metadata` partition 0 with one voter, this
  broker, leading it; its high watermark is the metadata journal's last
  record.
- ElectLeaders: every partition already has its one replica as leader:
  ELECTION_NOT_NEEDED (for all partitions, Kafka lists only those it
  elected: none).
- AlterPartitionReassignments: the only replica set there can be is this
  broker alone, accepted with nothing to do; any other is
  INVALID_REPLICA_ASSIGNMENT; a cancellation finds NO_REASSIGNMENT_IN_PROGRESS.
- ListPartitionReassignments: none is ever in progress.
- AlterReplicaLogDirs: the broker has one log directory, the data directory
  (as DescribeLogDirs names it): moving a partition there is done already
  (NONE); any other directory is LOG_DIR_NOT_FOUND; an unknown topic or
  partition UNKNOWN_TOPIC_OR_PARTITION, as a one-broker Kafka answers.

Authorization (`--authorizer acl`): DescribeTopicPartitions needs DESCRIBE on
each topic (a named one answers TOPIC_AUTHORIZATION_FAILED, a listing leaves
it out); the others need DESCRIBE (DescribeLogDirs, DescribeQuorum,
ListPartitionReassignments) or ALTER (ElectLeaders,
AlterPartitionReassignments, AlterReplicaLogDirs) on the cluster, checked by
the listener (linkd/kafka/authz.py).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.errors import ClusterError
from linkd.kafka import authz
from linkd.kafka.context import AUTHORIZED_OPERATIONS_OMITTED, Context
from linkd.kafka.errors import kafka_code

METADATA_TOPIC = "__cluster_metadata"
DEFAULT_PARTITION_LIMIT = 2000
_ZERO_UUID = uuid.UUID(int=0)


async def describe_topic_partitions(ctx: Context, req: Any) -> dict[str, Any]:
    state = ctx.node.state
    node_id = ctx.broker.node_id
    names = (
        sorted({t.name for t in req.topics})
        if req.topics
        else [
            n for n in sorted(state.topics)
            if authz.allowed(ctx, R.TOPIC, n, Op.DESCRIBE, quiet=True)
        ]
    )
    limit = int(req.response_partition_limit) or DEFAULT_PARTITION_LIMIT
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    topics: list[dict[str, Any]] = []
    left = limit
    next_cursor: dict[str, Any] | None = None
    for name in names:
        topic = state.topics.get(name)
        if req.topics and not authz.allowed(ctx, R.TOPIC, name, Op.DESCRIBE):
            topics.append({"error_code": int(K.topic_authorization_failed), "name": name,
                           "topic_id": _ZERO_UUID, "is_internal": False, "partitions": [],
                           "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        if topic is None:
            topics.append({"error_code": int(K.unknown_topic_or_partition), "name": name,
                           "topic_id": _ZERO_UUID, "is_internal": False, "partitions": [],
                           "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        logs = topic.partitions[first:]
        if left <= 0 or len(logs) > left:
            taken = logs[: max(left, 0)]
            if len(taken) < len(logs):
                next_cursor = {"topic_name": name, "partition_index": first + len(taken)}
            logs = taken
        left -= len(logs)
        topics.append({
            "error_code": 0,
            "name": name,
            "topic_id": uuid.UUID(topic.topic_id),
            "is_internal": topic.internal,
            "partitions": [
                {"error_code": 0, "partition_index": log.partition, "leader_id": node_id,
                 "leader_epoch": log.leader_epoch, "replica_nodes": [node_id],
                 "isr_nodes": [node_id], "eligible_leader_replicas": [],
                 "last_known_elr": [], "offline_replicas": []}
                for log in logs
            ],
            "topic_authorized_operations": authz.operations_field(ctx, R.TOPIC, name, True),
        })
        if next_cursor is not None:
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}


async def describe_log_dirs(ctx: Context, req: Any) -> dict[str, Any]:
    node = ctx.node
    state = node.state
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {t.topic: {int(p) for p in t.partitions} for t in req.topics}
    topics = []
    for name in sorted(state.topics):
        if wanted is not None and name not in wanted:
            continue
        topic = state.topics[name]
        partitions = [
            {"partition_index": log.partition, "partition_size": log.size_bytes,
             "offset_lag": 0, "is_future_key": False}
            for log in topic.partitions
            if wanted is None or log.partition in wanted[name]
        ]
        topics.append({"name": name, "partitions": partitions})
    log_dir = str(node.data_dir_path.resolve())
    disk = os.statvfs(log_dir)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "results": [{
            "error_code": 0,
            "log_dir": log_dir,
            "topics": topics,
            "total_bytes": disk.f_blocks * disk.f_frsize,
            "usable_bytes": disk.f_bavail * disk.f_frsize,
        }],
    }


async def describe_quorum(ctx: Context, req: Any) -> dict[str, Any]:
    node_id = ctx.broker.node_id
    journal = ctx.node.journal
    end = journal.last_seq if journal is not None else 0
    topics = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            index = int(p.partition_index)
            if t.topic_name != METADATA_TOPIC or index != 0:
                partitions.append({
                    "partition_index": index,
                    "error_code": int(K.unknown_topic_or_partition),
                    "error_message": f"the metadata quorum is {METADATA_TOPIC}-0",
                    "leader_id": -1, "leader_epoch": -1, "high_watermark": -1,
                    "current_voters": [], "observers": [],
                })
                continue
            partitions.append({
                "partition_index": 0, "error_code": 0, "error_message": None,
                "leader_id": node_id, "leader_epoch": 1, "high_watermark": end,
                "current_voters": [{
                    "replica_id": node_id, "replica_directory_id": _ZERO_UUID,
                    "log_end_offset": end, "last_fetch_timestamp": -1,
                    "last_caught_up_timestamp": -1,
                }],
                "observers": [],
            })
        topics.append({"topic_name": t.topic_name, "partitions": partitions})
    broker = ctx.broker
    return {
        "error_code": 0,
        "error_message": None,
        "topics": topics,
        "nodes": [{"node_id": node_id, "listeners": [
            {"name": "PLAINTEXT", "host": broker.host, "port": broker.port}]}],
    }


def _partition_error(ctx: Context, topic: str, partition: int) -> int:
    try:
        ctx.node.state.partition(topic, partition)
    except ClusterError as exc:
        return kafka_code(exc)
    return 0


async def elect_leaders(ctx: Context, req: Any) -> dict[str, Any]:
    results = []
    for t in req.topic_partitions or []:
        partition_results = []
        for p in t.partitions:
            code = _partition_error(ctx, t.topic, int(p)) or int(K.election_not_needed)
            partition_results.append({
                "partition_id": int(p), "error_code": code,
                "error_message": "the partition's only replica already leads it"
                if code == int(K.election_not_needed) else None,
            })
        results.append({"topic": t.topic, "partition_result": partition_results})
    return {"throttle_time": 0, "error_code": 0, "replica_election_results": results}


async def alter_partition_reassignments(ctx: Context, req: Any) -> dict[str, Any]:
    node_id = ctx.broker.node_id
    responses = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            index = int(p.partition_index)
            code, message = _partition_error(ctx, t.name, index), None
            if code:
                pass
            elif p.replicas is None:
                code = int(K.no_reassignment_in_progress)
                message = "no reassignment is in progress (a cluster has one replica each)"
            elif list(p.replicas) != [node_id]:
                code = int(K.invalid_replica_assignment)
                message = (f"replicas {list(p.replicas)}: the cluster's only broker is "
                           f"{node_id}, and every partition has that one replica")
            partitions.append({"partition_index": index, "error_code": code,
                               "error_message": message})
        responses.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "allow_replication_factor_change": True, "error_code": 0,
            "error_message": None, "responses": responses}


async def list_partition_reassignments(ctx: Context, req: Any) -> dict[str, Any]:
    del req  # none is ever in progress, whatever is asked
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "topics": []}


async def alter_replica_log_dirs(ctx: Context, req: Any) -> dict[str, Any]:
    home = ctx.node.data_dir_path.resolve()
    results: dict[str, list[dict[str, Any]]] = {}
    for d in req.dirs:
        known = _same_dir(d.path, home)
        for t in d.topics:
            rows = results.setdefault(t.name, [])
            for p in t.partitions:
                code = _partition_error(ctx, t.name, int(p))
                if not code and not known:
                    code = int(K.log_dir_not_found)
                rows.append({"partition_index": int(p), "error_code": code})
    return {
        "throttle_time": 0,
        "results": [{"topic_name": name, "partitions": rows} for name, rows in results.items()],
    }


def _same_dir(path: str, home: Any) -> bool:
    try:
        return bool(os.path.realpath(path) == str(home))
    except (OSError, ValueError):
        return False
