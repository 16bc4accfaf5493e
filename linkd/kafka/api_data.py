"""Produce, Fetch, ListOffsets and DeleteRecords over the Kafka protocol.

Rules:
- Produce stores each partition's record batch as the client sent it
  (compression included); the core stamps the base offset and leader epoch,
  which the batch CRC does not cover. acks=0 gets no response at all (Kafka's
  protocol); acks=1 and acks=all are answered once the batch is durable.
- Ordering: a handler starts one task per partition before its first
  suspension, and request handlers start in arrival order, so the core sees a
  connection's batches in the order the client sent them (idempotent producers
  pipeline up to five requests per partition).
- Fetch long-polls in the node (up to max_wait_ms, at most 30 s) until
  min_bytes are readable. read_committed stops at the last stable offset and
  lists the aborted transactions in range, so clients drop their batches.
  Fetch sessions are not kept: every response carries session id 0 (Kafka's
  "no session"), so clients send full fetch requests. One response holds at
  most FETCH_RESPONSE_MAX_BYTES (the request's max_bytes when smaller), but
  always at least one whole batch.
- Topics are named by id from Fetch v13 on; an unknown id answers
  UNKNOWN_TOPIC_ID for that topic only.
- ListOffsets timestamps: -1 latest (the HW, or the LSO for read_committed),
  -2 earliest, -3 max timestamp, -4 earliest local (= earliest: there is no
  tiered storage); other negative values are refused by the core.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as K

from linkd.core.acls import AclOperation as Op
from linkd.core.acls import ResourceType as R
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError
from linkd.kafka import authz
from linkd.kafka.codec import field, ms
from linkd.kafka.context import Context, error_fields
from linkd.kafka.errors import kafka_code
from linkd.kafka.fetch_sessions import FetchPlan
from linkd.metrics import Listener

READ_COMMITTED = 1
DEFAULT_PARTITION_MAX_BYTES = 1 << 20
# The listener's cap on one Fetch response, as Kafka's broker config
# fetch.max.bytes caps the client's: the request's own limit applies when
# smaller, and the first batch is always returned whole, however large.
# Responses of a few MiB let a client decode one while the next is read; with
# librdkafka this measured 1.3x faster consumption than 12 MiB responses.
FETCH_RESPONSE_MAX_BYTES = 4 << 20

# A fetched partition of a topic the principal may not READ.
DENIED = -1

_SPECS = {-1: "latest", -2: "earliest", -3: "max_timestamp", -4: "earliest"}


async def _produce_one(
    ctx: Context, topic: str, partition: int, records: bytes | None, acks: int, txn_id: str
) -> dict[str, Any]:
    batch = records if records is not None else b""
    try:
        base, duplicate, log_start, append_time = await ctx.node.produce(
            topic, partition, batch, acks, txn_id
        )
        if not duplicate:
            ctx.node.metrics.produced(Listener.KAFKA, batch)
    except ClusterError as exc:
        return {
            "index": partition,
            "base_offset": -1,
            "log_start_offset": -1,
            "log_append_time": -1,
            "record_errors": [
                {"batch_index": e.batch_index, "batch_index_error_message": e.message}
                for e in exc.record_errors
            ],
            **error_fields(exc),
        }
    return {
        "index": partition,
        "error_code": 0,
        "base_offset": base,
        "log_append_time": append_time,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": None,
    }


async def _refused(partition: int, exc: ClusterError) -> dict[str, Any]:
    return {
        "index": partition,
        "base_offset": -1,
        "log_start_offset": -1,
        "log_append_time": -1,
        "record_errors": [],
        **error_fields(exc),
    }


async def produce(ctx: Context, req: Any) -> dict[str, Any] | None:
    with ctx.node.metrics.produce_request(Listener.KAFKA):
        return await _produce(ctx, req)


async def _produce(ctx: Context, req: Any) -> dict[str, Any] | None:
    acks = int(req.acks)
    txn_id = req.transactional_id or ""
    # A transactional producer needs WRITE on its transactional id (else every
    # partition is refused), and each topic WRITE (else its partitions are).
    txn_refusal = authz.refusal(ctx, R.TRANSACTIONAL_ID, txn_id, Op.WRITE) if txn_id else None
    layout: list[tuple[str, list[asyncio.Task[dict[str, Any]]]]] = []
    for t in req.topic_data:
        refused = txn_refusal or authz.refusal(ctx, R.TOPIC, t.name, Op.WRITE)
        tasks = [
            asyncio.create_task(
                _refused(p.index, refused)
                if refused is not None
                else _produce_one(ctx, t.name, p.index, p.records, acks, txn_id)
            )
            for p in t.partition_data
        ]
        layout.append((t.name, tasks))
    responses = []
    for name, tasks in layout:
        responses.append({"name": name, "partition_responses": [await t for t in tasks]})
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time": 0}


def _fenced(state: ClusterState, topic: str, p: Any) -> dict[str, Any] | None:
    """A fetch whose current_leader_epoch (v9+) is not the partition's: the
    reader's metadata is stale (FENCED_LEADER_EPOCH, say, after an unclean
    election), so it refreshes it and validates its position with
    OffsetForLeaderEpoch instead of reading past a cut."""
    if topic not in state.topics or p.partition >= len(state.topics[topic].partitions):
        return None
    log = state.topics[topic].partitions[p.partition]
    code = _leader_epoch_error(int(field(p, "current_leader_epoch", -1)), log.leader_epoch)
    if not code:
        return None
    return {
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _diverging(state: ClusterState, topic: str, p: Any) -> dict[str, Any] | None:
    """The answer for a fetched partition whose reader's last fetched epoch
    ends on this log before its fetch offset, or is not on this log at all
    (KIP-320): the diverging epoch and no records, checked before the fetch
    offset is (as Kafka does). None when the reader's log agrees."""
    if topic not in state.topics or p.partition >= len(state.topics[topic].partitions):
        return None
    log = state.topics[topic].partitions[p.partition]
    found = log.diverging_epoch(int(field(p, "last_fetched_epoch", -1)), int(p.fetch_offset))
    if found is None:
        return None
    epoch, end = found
    return {
        "error_code": 0,
        "high_watermark": log.high_watermark,
        "last_stable_offset": log.last_stable_offset,
        "log_start_offset": log.log_start_offset,
        "diverging_epoch": {"epoch": epoch, "end_offset": end},
        "preferred_read_replica": -1,
        "records": b"",
    }


def _leader_epoch_error(current: int, leader_epoch: int) -> int:
    """A request's current_leader_epoch against the partition's (-1: not checked)."""
    if current < 0 or current == leader_epoch:
        return 0
    return int(K.unknown_leader_epoch if current > leader_epoch else K.fenced_leader_epoch)


async def offset_for_leader_epoch(ctx: Context, req: Any) -> dict[str, Any]:
    """Where each asked epoch ends on this cluster's log (KIP-320): a consumer
    that read a partition up to some epoch learns whether the log it read
    was cut since, and where to go on from (clients then truncate their
    position to the answer, as they do against a Kafka leader)."""
    state = ctx.node.state
    topics = []
    for t in req.topics:
        partitions = []
        denied = authz.topic_code(ctx, t.topic, Op.DESCRIBE)
        for p in t.partitions:
            entry = {"partition": p.partition, "error_code": denied, "leader_epoch": -1,
                     "end_offset": -1}
            if denied:
                partitions.append(entry)
                continue
            try:
                log = state.partition(t.topic, p.partition)
            except ClusterError as exc:
                entry["error_code"] = kafka_code(exc)
                partitions.append(entry)
                continue
            code = _leader_epoch_error(int(field(p, "current_leader_epoch", -1)), log.leader_epoch)
            if code:
                entry["error_code"] = code
            else:
                entry["leader_epoch"], entry["end_offset"] = log.end_offset_for_epoch(
                    int(p.leader_epoch)
                )
            partitions.append(entry)
        topics.append({"topic": t.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


async def fetch(ctx: Context, req: Any) -> dict[str, Any]:
    with ctx.node.metrics.fetch_request(Listener.KAFKA):
        return await _fetch(ctx, req)


async def _fetch(ctx: Context, req: Any) -> dict[str, Any]:
    node = ctx.node
    by_id = ctx.api_version >= 13
    # Fetch v7+ may carry a session (KIP-227): what to read, and what to answer.
    plan = (
        ctx.fetch_sessions.plan(req, by_id)
        if ctx.api_version >= 7
        else FetchPlan(0, 0, [(t.topic, list(t.partitions)) for t in req.topics], None, False)
    )
    if plan.error:
        return {"throttle_time": 0, "error_code": plan.error, "session_id": 0, "responses": []}
    names = {t.topic_id: t.name for t in node.state.topics.values()} if by_id else {}
    parts: list[tuple[str, int, int, int]] = []
    # Partitions whose reader's view of the log is stale (`_fenced`) or whose
    # log was cut under what it read (`_diverging`) are answered at once, and
    # checked again after a long poll (a cut may happen while it waits).
    asked: list[tuple[str, Any]] = []
    early = False
    # Per requested topic: its key in the response and, per partition, the index
    # of its answer in `parts` (or None: unknown topic id).
    layout: list[tuple[Any, str | None, list[tuple[int, int | None]]]] = []
    denied_any = False
    for topic_key, asked_partitions in plan.topics:
        name = names.get(str(topic_key)) if by_id else topic_key
        entries: list[tuple[int, int | None]] = []
        readable = name is None or authz.allowed(ctx, R.TOPIC, name, Op.READ)
        for p in asked_partitions:
            if name is None:
                entries.append((p.partition, None))
                continue
            if not readable:
                denied_any = True
                entries.append((p.partition, DENIED))
                continue
            max_bytes = int(p.partition_max_bytes) or DEFAULT_PARTITION_MAX_BYTES
            if _fenced(node.state, name, p) or _diverging(node.state, name, p):
                early = True
            asked.append((name, p))
            entries.append((p.partition, len(parts)))
            parts.append((name, p.partition, p.fetch_offset, max_bytes))
        layout.append((topic_key, name, entries))
    read_committed = int(field(req, "isolation_level", 0)) == READ_COMMITTED
    unknown_ids = any(idx is None for _, _, entries in layout for _, idx in entries)
    fetched = []
    if parts or not (unknown_ids or denied_any):
        fetched = await node.fetch(
            parts,
            max_wait_ms=0 if unknown_ids or early else ms(req.max_wait),
            min_bytes=int(req.min_bytes),
            max_bytes=_response_max_bytes(int(field(req, "max_bytes", 0))),
            read_committed=read_committed,
        )
    returned: list[bytes] = []  # the records answered, for the metrics
    responses = []
    for key, _name, entries in layout:
        partitions: list[dict[str, Any]] = []
        for partition, idx in entries:
            if idx is None or idx == DENIED:
                code = K.unknown_topic_id if idx is None else K.topic_authorization_failed
                partitions.append(
                    {
                        "partition_index": partition,
                        "error_code": int(code),
                        "high_watermark": -1,
                        "records": b"",
                    }
                )
                continue
            f = fetched[idx]
            name, asked_partition = asked[idx]
            stale = _fenced(node.state, name, asked_partition) or _diverging(
                node.state, name, asked_partition
            )
            if stale is not None:
                partitions.append({"partition_index": partition, **stale})
                continue
            if f.error is not None:
                partitions.append(
                    {
                        "partition_index": partition,
                        "error_code": kafka_code(f.error, by_id=by_id),
                        "high_watermark": -1,
                        "last_stable_offset": -1,
                        "log_start_offset": -1,
                        "records": b"",
                    }
                )
                continue
            returned.append(f.records)
            partitions.append(
                {
                    "partition_index": partition,
                    "error_code": 0,
                    "high_watermark": f.high_watermark,
                    "last_stable_offset": f.last_stable_offset,
                    "log_start_offset": f.log_start_offset,
                    "aborted_transactions": (
                        [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in f.aborted
                        ]
                        if read_committed
                        else None
                    ),
                    "preferred_read_replica": -1,
                    "records": f.records,
                }
            )
        if plan.session is not None:
            # A session remembers what each answer said; an incremental answer
            # holds only the partitions with something new to say.
            told = [
                a for a in partitions
                if plan.session.worth_answering((key, int(a["partition_index"])), a)
            ]
            if plan.incremental:
                partitions = told
                if not partitions:
                    continue
        entry: dict[str, Any] = {"partitions": partitions}
        if by_id:
            entry["topic_id"] = key if isinstance(key, uuid.UUID) else uuid.UUID(str(key))
        else:
            entry["topic"] = key
        responses.append(entry)
    node.metrics.fetched(Listener.KAFKA, returned)
    return {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": plan.session_id,
        "responses": responses,
    }


def _response_max_bytes(requested: int) -> int:
    return FETCH_RESPONSE_MAX_BYTES if requested <= 0 else min(requested, FETCH_RESPONSE_MAX_BYTES)


async def list_offsets(ctx: Context, req: Any) -> dict[str, Any]:
    read_committed = int(field(req, "isolation_level", 0)) == READ_COMMITTED
    topics = []
    for t in req.topics:
        partitions = []
        denied = authz.topic_code(ctx, t.name, Op.DESCRIBE)
        for p in t.partitions:
            if denied:
                partitions.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": denied,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
                continue
            ts = int(p.timestamp)
            spec = "timestamp" if ts >= 0 else _SPECS.get(ts, f"timestamp {ts}")
            try:
                lookup = await ctx.node.list_offsets(
                    t.name, p.partition_index, spec, ts, read_committed
                )
            except ClusterError as exc:
                partitions.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": kafka_code(exc),
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                )
                continue
            partitions.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": 0,
                    "timestamp": lookup.timestamp,
                    "offset": lookup.offset,
                    "leader_epoch": lookup.leader_epoch,
                }
            )
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


async def delete_records(ctx: Context, req: Any) -> dict[str, Any]:
    topics = []
    for t in req.topics:
        partitions = []
        denied = authz.topic_code(ctx, t.name, Op.DELETE)
        for p in t.partitions:
            if denied:
                partitions.append(
                    {"partition_index": p.partition_index, "low_watermark": -1,
                     "error_code": denied}
                )
                continue
            try:
                low = await ctx.node.delete_records(t.name, p.partition_index, int(p.offset))
            except ClusterError as exc:
                partitions.append(
                    {
                        "partition_index": p.partition_index,
                        "low_watermark": -1,
                        "error_code": kafka_code(exc),
                    }
                )
                continue
            partitions.append(
                {"partition_index": p.partition_index, "low_watermark": low, "error_code": 0}
            )
        topics.append({"name": t.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
