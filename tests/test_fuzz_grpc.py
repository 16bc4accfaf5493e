"""Hypothesis fuzzing of the gRPC API against a real daemon.

Requests for every Cluster method are drawn from the protobuf descriptors:
edge-case numbers, names of real and unknown topics, valid record batches,
batches with flipped bytes and random bytes. Whatever comes in, the daemon must
answer with a status carrying a documented ErrorDetail (never INTERNAL, never a
crash), keep serving, and keep the records written before the fuzzing intact
at their offsets, also after a kill -9 and restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as pbd
from google.protobuf.message import Message
from grpc_status import rpc_status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, composite

from ccr.v1 import cluster_pb2, cluster_pb2_grpc, errors_pb2
from linkd.core import records as rb

TOPICS = ["fuzz", "fuzz2", "nope", "", "a" * 300, "bad name", "_internal"]
# "sentinel" is kept out of reach: deleting it or setting retention.ms=1 on it
# would legitimately remove its records.
SENTINEL_VALUES = [f"sentinel-{i}".encode() for i in range(20)]
CALL_TIMEOUT_S = 3.0
# JoinGroup/SyncGroup may wait for a rebalance: bound those by the gRPC deadline.
METHODS = [m.name for m in cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].methods]

INTS = st.sampled_from([-(2**31), -1001, -2, -1, 0, 1, 2, 3, 7, 100, 2**31 - 1])
LONGS = st.sampled_from([-(2**63), -2, -1, 0, 1, 5, 19, 20, 1_000_000, 2**63 - 1])


def _valid_batch(draw: DrawFn) -> bytes:
    n = draw(st.integers(1, 5))
    pid = draw(st.sampled_from([-1, -1, 0, 1000, 1001, 2**40]))
    return rb.build_batch(
        [
            rb.RecordSpec(
                draw(st.none() | st.binary(max_size=8)), draw(st.binary(max_size=64)), 1000
            )
            for _ in range(n)
        ],
        producer_id=pid,
        producer_epoch=draw(st.sampled_from([-1, 0, 1, 32767])) if pid >= 0 else -1,
        base_sequence=draw(st.sampled_from([-1, 0, 1, 2**31 - 1])) if pid >= 0 else -1,
        transactional=draw(st.booleans()) if pid >= 0 else False,
        control=draw(st.booleans()) and pid >= 0,
    )


@composite
def batches(draw: DrawFn) -> bytes:
    kind = draw(st.sampled_from(["valid", "flipped", "truncated", "random", "two"]))
    if kind == "random":
        return draw(st.binary(max_size=200))
    data = _valid_batch(draw)
    if kind == "flipped":
        pos = draw(st.integers(0, len(data) - 1))
        return data[:pos] + bytes([data[pos] ^ (1 << draw(st.integers(0, 7)))]) + data[pos + 1 :]
    if kind == "truncated":
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "two":
        return data + _valid_batch(draw)
    return data


def _field_value(draw: DrawFn, field: pbd.FieldDescriptor, depth: int) -> Any:
    t = field.type
    if t == pbd.FieldDescriptor.TYPE_MESSAGE:
        return draw(messages(field.message_type, depth + 1))
    if t == pbd.FieldDescriptor.TYPE_ENUM:
        return draw(st.sampled_from([v.number for v in field.enum_type.values] + [99]))
    if t == pbd.FieldDescriptor.TYPE_BOOL:
        return draw(st.booleans())
    if t in (pbd.FieldDescriptor.TYPE_INT32, pbd.FieldDescriptor.TYPE_SINT32):
        if field.name in (
            "max_wait_ms",
            "timeout_ms",
            "session_timeout_ms",
            "rebalance_timeout_ms",
        ):
            return draw(st.sampled_from([-1, 0, 10, 1000]))
        return draw(INTS)
    if t in (pbd.FieldDescriptor.TYPE_INT64, pbd.FieldDescriptor.TYPE_SINT64):
        return draw(LONGS)
    if t == pbd.FieldDescriptor.TYPE_BYTES:
        return draw(batches()) if field.name == "batch" else draw(st.binary(max_size=64))
    if t == pbd.FieldDescriptor.TYPE_STRING:
        if field.name in ("topic", "name"):
            return draw(st.sampled_from(TOPICS))
        return draw(st.sampled_from(["", "g", "tx", "member-1", "é", "x" * 5000]))
    raise AssertionError(f"unhandled field type {t} of {field.full_name}")


@composite
def messages(draw: DrawFn, descriptor: pbd.Descriptor, depth: int = 0) -> Message:
    cls = cluster_pb2.__dict__.get(descriptor.name)
    if cls is None:
        cls = errors_pb2.__dict__[descriptor.name]
    msg = cls()
    for field in descriptor.fields:
        if depth > 2 or not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            target = getattr(msg, field.name)
            for _ in range(draw(st.integers(0, 2))):
                key = draw(st.sampled_from(["retention.ms", "max.message.bytes", "nope", ""]))
                target[key] = draw(st.sampled_from(["1", "-1", "x", "100", ""]))
            continue
        if field.is_repeated:
            target = getattr(msg, field.name)
            for _ in range(draw(st.integers(0, 3))):
                value = _field_value(draw, field, depth)
                if field.type == pbd.FieldDescriptor.TYPE_MESSAGE:
                    target.add().CopyFrom(value)
                else:
                    target.append(value)
        elif field.type == pbd.FieldDescriptor.TYPE_MESSAGE:
            getattr(msg, field.name).CopyFrom(_field_value(draw, field, depth))
        else:
            setattr(msg, field.name, _field_value(draw, field, depth))
    return msg


@composite
def calls(draw: DrawFn) -> tuple[str, Message]:
    method = draw(st.sampled_from(METHODS))
    desc = cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].methods_by_name[method]
    return method, draw(messages(desc.input_type))


def _write_sentinel(stub: cluster_pb2_grpc.ClusterStub) -> list[tuple[int, int]]:
    stub.CreateTopic(cluster_pb2.CreateTopicRequest(name="sentinel", partitions=2))
    acked = []
    for i, value in enumerate(SENTINEL_VALUES):
        partition = i % 2
        # Current timestamps: records from 1970 would be (rightly) removed by the
        # default 7-day retention.
        b = rb.build_batch([rb.RecordSpec(None, value, time.time_ns() // 1_000_000)])
        resp = stub.Produce(
            cluster_pb2.ProduceRequest(topic="sentinel", partition=partition, batch=b, acks=-1)
        )
        acked.append((partition, resp.base_offset))
    return acked


def _check_sentinel(stub: cluster_pb2_grpc.ClusterStub, acked: list[tuple[int, int]]) -> None:
    found: dict[tuple[int, int], bytes | None] = {}
    for partition in (0, 1):
        resp = stub.Fetch(
            cluster_pb2.FetchRequest(
                partitions=[
                    cluster_pb2.FetchPartition(
                        topic="sentinel", partition=partition, offset=0, max_bytes=1 << 20
                    )
                ],
                max_wait_ms=0,
            ),
            timeout=CALL_TIMEOUT_S,
        )
        data = resp.partitions[0].records
        for position, _h in rb.iter_batches(data):
            _header, recs = rb.decode_records(data, position)
            for r in recs:
                found[(partition, r.offset)] = r.value
    for (partition, offset), value in zip(acked, SENTINEL_VALUES, strict=True):
        assert found.get((partition, offset)) == value, (partition, offset)


def _assert_documented_refusal(error: grpc.RpcError, method: str) -> None:
    code = error.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return  # a long-poll (JoinGroup, Fetch) still waiting: allowed
    assert code != grpc.StatusCode.INTERNAL, f"{method}: internal error {error.details()}"
    assert code != grpc.StatusCode.UNAVAILABLE, f"{method}: daemon unavailable {error.details()}"
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None and status.details, f"{method}: refusal without details: {error}"
    detail = errors_pb2.ErrorDetail()
    assert status.details[0].Unpack(detail)
    assert detail.code != errors_pb2.ERROR_CODE_UNSPECIFIED
    assert detail.message and detail.resource is not None


@pytest.mark.slow
def test_fuzzed_requests_never_crash_the_daemon_or_corrupt_a_log(daemon: Any) -> None:
    channel = grpc.insecure_channel(daemon.bootstrap)
    stub = cluster_pb2_grpc.ClusterStub(channel)
    stub.CreateTopic(cluster_pb2.CreateTopicRequest(name="fuzz", partitions=2))
    acked = _write_sentinel(stub)
    counts = {"ok": 0, "refused": 0}

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(call=calls())
    def fuzz(call: tuple[str, Message]) -> None:
        method, request = call
        rpc: Callable[..., Any] = getattr(stub, method)
        try:
            rpc(request, timeout=CALL_TIMEOUT_S)
            counts["ok"] += 1
        except grpc.RpcError as error:
            counts["refused"] += 1
            _assert_documented_refusal(error, method)

    fuzz()
    assert counts["ok"] > 0 and counts["refused"] > 0, counts
    assert daemon.running
    _check_sentinel(stub, acked)
    channel.close()

    daemon.kill9()
    daemon.start()
    daemon.wait_ready()
    channel = grpc.insecure_channel(daemon.bootstrap)
    _check_sentinel(cluster_pb2_grpc.ClusterStub(channel), acked)
    channel.close()
