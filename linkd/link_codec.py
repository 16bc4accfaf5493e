"""The wire form of what links carry between daemons (ccr.v1.Replication).

Each function turns a core value (linkd/core: link configurations, fetch
answers, namespaces, partition histories, pushes) into its protobuf message,
or back. Nothing here decides anything; `linkd/replication.py` and
`linkd/link_runner.py` (the data path) and `linkd/operations.py` (operator
procedures) send and receive through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from grpc import aio

from ccr.v1 import errors_pb2, replication_pb2
from linkd.core import histories
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import (
    FetchGroupOffsets,
    GroupOffsets,
    LinkAnswer,
    LinkCall,
    ListSourceTopics,
    ReplicaFetch,
    ReplicaPush,
    call_name,
)
from linkd.core.links import Field, Leader, LinkConfig, Mapping, MappingKey, MappingType, Version
from linkd.core.provenance import ProvenanceItem, ProvenanceKind
from linkd.core.requests import Handshake, NamespaceStanding, PartitionsDescription

# -- configuration views -------------------------------------------------------------------------


def _version_pb(v: Version) -> replication_pb2.Version:
    return replication_pb2.Version(physical_ms=v[0], logical=v[1], node=v[2])


def _version(v: replication_pb2.Version) -> Version:
    return (v.physical_ms, v.logical, v.node)


def view_of(config: LinkConfig) -> replication_pb2.LinkConfigView:
    """What crosses to the remote: `LinkConfig.shared` (no secrets, not the
    address this side dials)."""
    config = config.shared()
    return replication_pb2.LinkConfigView(
        name=config.name,
        link_id=config.link_id,
        local_cluster_id=config.local_cluster_id,
        remote_cluster_id=config.remote_cluster_id,
        connection_direction=config.connection_direction,
        fields=[
            replication_pb2.VersionedField(name=k, value=f.value, version=_version_pb(f.version))
            for k, f in sorted(config.fields.items())
        ],
        mappings=[
            replication_pb2.VersionedMapping(
                resource_type=m.resource_type,
                local_prefix=m.local_prefix,
                remote_prefix=m.remote_prefix,
                leader=m.leader,
                attached=m.attached,
                version=_version_pb(m.version),
                note=m.note,
            )
            for _, m in sorted(config.mappings.items())
        ],
        link_epoch=config.link_epoch,
        lineage=[
            replication_pb2.MappingLineage(
                key=replication_pb2.MappingKey(resource_type=t, local_prefix=lp, remote_prefix=rp),
                hops=[
                    replication_pb2.LineageHop(cluster_id=c, version=_version_pb(v))
                    for c, v in hops
                ],
            )
            for (t, lp, rp), hops in sorted(config.lineage.items())
        ],
    )


def config_of(view: replication_pb2.LinkConfigView) -> LinkConfig:
    fields = {f.name: Field(f.value, _version(f.version)) for f in view.fields}
    mappings = {}
    for m in view.mappings:
        try:
            kind, leader = MappingType(m.resource_type), Leader(m.leader)
        except ValueError as exc:
            raise ClusterError(
                ErrorCode.INVALID_LINK_CONFIG,
                f"link {view.name!r}",
                f"link {view.name!r}: the remote sent a mapping this side cannot read: {exc}",
            ) from exc
        mapping = Mapping(
            kind, m.local_prefix, m.remote_prefix, leader, m.attached, _version(m.version), m.note
        )
        mappings[mapping.key] = mapping
    return LinkConfig(
        view.name,
        view.link_id,
        view.local_cluster_id,
        view.remote_cluster_id,
        view.connection_direction,
        fields,
        mappings,
        view.link_epoch,
        {
            (x.key.resource_type, x.key.local_prefix, x.key.remote_prefix): tuple(
                (h.cluster_id, _version(h.version)) for h in x.hops
            )
            for x in view.lineage
        },
    )


def handshake_pb(
    config: LinkConfig, create: bool, proposed: tuple[MappingKey, ...]
) -> replication_pb2.HandshakeRequest:
    return replication_pb2.HandshakeRequest(
        config=view_of(config),
        create=create,
        proposed=[
            replication_pb2.MappingKey(resource_type=t, local_prefix=lp, remote_prefix=rp)
            for t, lp, rp in proposed
        ],
    )


def proposed_of(request: replication_pb2.HandshakeRequest) -> tuple[MappingKey, ...]:
    return tuple((k.resource_type, k.local_prefix, k.remote_prefix) for k in request.proposed)


# -- errors ---------------------------------------------------------------------------------------


def error_pb(exc: ClusterError) -> errors_pb2.ErrorDetail:
    return errors_pb2.ErrorDetail(
        code=errors_pb2.ErrorCode.ValueType(int(exc.code)),
        resource=exc.resource,
        retriable=exc.retriable,
        message=exc.message,
    )


def error_of(detail: errors_pb2.ErrorDetail) -> ClusterError:
    return ClusterError(ErrorCode(detail.code), detail.resource, detail.message)


def rpc_error(exc: grpc.RpcError, what: str) -> ClusterError:
    """A remote refusal keeps its code; a transport failure is LINK_UNREACHABLE."""
    trailing: Any = exc.trailing_metadata() if isinstance(exc, aio.AioRpcError) else None
    for key, value in trailing or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for any_detail in status.details:
                detail = errors_pb2.ErrorDetail()
                if any_detail.Unpack(detail):
                    return ClusterError(
                        ErrorCode(detail.code),
                        detail.resource,
                        f"remote refused {what}: {detail.message}",
                    )
    return ClusterError(
        ErrorCode.LINK_UNREACHABLE,
        what,
        f"{what}: {exc.code().name if hasattr(exc, 'code') else exc}: "
        f"{exc.details() if hasattr(exc, 'details') else ''}",
    )


# -- discovery: namespaces, READ ACLs, group offsets ------------------------------------------


def read_acls_pb(acls: list[msync.ReadAcl]) -> list[replication_pb2.ReadAcl]:
    return [
        replication_pb2.ReadAcl(
            resource_name=a.resource_name,
            prefixed=a.prefixed,
            principal=a.principal,
            host=a.host,
            deny=a.deny,
        )
        for a in acls
    ]


def principal_acls_pb(acls: list[msync.PrincipalAcl]) -> list[replication_pb2.PrincipalAcl]:
    return [
        replication_pb2.PrincipalAcl(
            resource_type=a.resource_type,
            resource_name=a.resource_name,
            prefixed=a.prefixed,
            principal=a.principal,
            host=a.host,
            operation=a.operation,
            deny=a.deny,
        )
        for a in acls
    ]


def namespace_pb(ns: rounds.SourceNamespace) -> replication_pb2.NamespaceTopics:
    out = replication_pb2.NamespaceTopics(prefix=ns.prefix, resource_type=ns.kind)
    for topic in ns.topics:
        out.topics.add(name=topic.name, partitions=topic.partitions, configs=topic.configs)
    out.read_acls.extend(read_acls_pb(list(ns.read_acls)))
    out.principal_acls.extend(principal_acls_pb(list(ns.principal_acls)))
    return out


def namespace_of(
    prefix: str, topics: Any, read_acls: Any, kind: str = "", principal_acls: Any = ()
) -> rounds.SourceNamespace:
    return rounds.SourceNamespace(
        prefix,
        tuple(rounds.SourceTopic(t.name, t.partitions, dict(t.configs)) for t in topics),
        tuple(
            msync.ReadAcl(a.resource_name, a.prefixed, a.principal, a.host, a.deny)
            for a in read_acls
        ),
        kind or "topic",
        tuple(
            msync.PrincipalAcl(
                a.resource_type, a.resource_name, a.prefixed, a.principal, a.host,
                a.operation, a.deny,
            )
            for a in principal_acls
        ),
    )


def group_offsets_pb(offsets: list[msync.GroupOffset]) -> list[replication_pb2.GroupOffset]:
    return [
        replication_pb2.GroupOffset(
            group_id=group_id,
            topic=topic,
            partition=partition,
            offset=offset,
            metadata=metadata,
            leader_epoch=epoch,
        )
        for group_id, topic, partition, offset, metadata, epoch in offsets
    ]


def group_offsets_of(offsets: Any) -> list[msync.GroupOffset]:
    return [
        msync.GroupOffset(o.group_id, o.topic, o.partition, o.offset, o.metadata, o.leader_epoch)
        for o in offsets
    ]


# -- replica fetch ----------------------------------------------------------------------------


def fetch_request_pb(
    request: rounds.FetchRequest, max_wait_ms: int, max_bytes: int
) -> replication_pb2.ReplicaFetchRequest:
    out = replication_pb2.ReplicaFetchRequest(
        link_id=request.link_id,
        max_wait_ms=max_wait_ms,
        max_bytes=max_bytes,
        sent_ms=request.sent_ms or 0,
    )
    ref = request.fetch_session
    if ref.epoch != rounds.SESSIONLESS:
        out.fetch_session_id = ref.session_id
        out.fetch_session_epoch = ref.epoch
        for topic, partition in ref.forgotten:
            out.forgotten.add(topic=topic, partition=partition)
    for p in request.partitions:
        entry = out.partitions.add(
            topic=p.source_topic,
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch,
            max_bytes=p.max_bytes,
        )
        entry.related = p.related
        entry.all_marks = p.all_marks
        entry.held = p.held
        if p.marks_from >= 0:
            entry.marks_from, entry.marks_to = p.marks_from, p.marks_to
        entry.marks.extend(_mark_pb(m) for m in p.marks)
    return out


def _mark_pb(m: histories.BatchMark) -> replication_pb2.BatchMark:
    return replication_pb2.BatchMark(
        base_offset=m.base_offset, last_offset=m.last_offset, crc=m.crc,
        leader_epoch=m.leader_epoch, producer_id=m.producer_id,
        producer_epoch=m.producer_epoch, base_sequence=m.base_sequence,
        max_timestamp=m.max_timestamp,
    )  # fmt: skip


def _mark_of(m: replication_pb2.BatchMark) -> histories.BatchMark:
    return histories.BatchMark(
        m.base_offset, m.last_offset, m.crc, m.leader_epoch, m.producer_id,
        m.producer_epoch, m.base_sequence, m.max_timestamp,
    )  # fmt: skip


def partition_fetches_of(
    request: replication_pb2.ReplicaFetchRequest,
) -> list[rounds.PartitionFetch]:
    return [
        rounds.PartitionFetch(
            p.topic,
            p.partition,
            p.fetch_offset,
            p.last_fetched_epoch,
            p.max_bytes,
            tuple(_mark_of(m) for m in p.marks),
            p.all_marks,
            p.related,
            p.held,
            p.marks_from if p.HasField("marks_from") else -1,
            p.marks_to if p.HasField("marks_to") else -1,
        )
        for p in request.partitions
    ]


def fetch_answer_pb(
    answer: rounds.FetchAnswer, out: replication_pb2.ReplicaFetchResponse | None = None
) -> replication_pb2.ReplicaFetchResponse:
    """The answer as a message; built into `out` when given. The data path
    does not build it (`fetch_answer_bytes`: the records are written beside
    the message's other fields, not copied into it)."""
    if out is None:
        out = replication_pb2.ReplicaFetchResponse()
    _answer_head(answer, out)
    for p in answer.partitions:
        _partition_pb(p, out.partitions.add()).records = p.records
    return out


def _answer_head(
    answer: rounds.FetchAnswer, out: replication_pb2.ReplicaFetchResponse
) -> replication_pb2.ReplicaFetchResponse:
    out.sync_state = answer.sync_state
    out.fetch_session_id = answer.fetch_session_id
    out.fetch_session_refused = answer.fetch_session_refused
    return out


def _partition_pb(
    p: rounds.FetchedPartition, entry: replication_pb2.ReplicaFetchedPartition
) -> replication_pb2.ReplicaFetchedPartition:
    """One partition of an answer, all but its records."""
    entry.topic, entry.partition, entry.diverging_end_offset = p.source_topic, p.partition, -1
    if p.continues_from is not None:
        entry.continues_from = p.continues_from
    entry.held = p.held
    if p.error is not None:
        entry.error.CopyFrom(error_pb(p.error))
        return entry
    entry.log_end_offset = p.log_end_offset
    entry.leader_epoch = p.leader_epoch
    entry.log_start_offset = p.log_start_offset
    entry.high_watermark = p.high_watermark
    entry.diverging_end_offset = p.diverging_end_offset
    if p.diverging_end_offset >= 0:
        entry.diverging_epoch = p.diverging_epoch
    entry.marks_wanted = p.marks_wanted
    if p.marks_from >= 0:
        entry.marks_from, entry.marks_to = p.marks_from, p.marks_to
    entry.log_start_cause = p.log_start_cause
    return entry


def fetch_answer_of(reply: replication_pb2.ReplicaFetchResponse) -> rounds.FetchAnswer:
    return rounds.FetchAnswer(
        [_fetched_of(p) for p in reply.partitions],
        sync_state=reply.sync_state,
        fetch_session_id=reply.fetch_session_id,
        fetch_session_refused=reply.fetch_session_refused,
    )


def fetch_session_of(request: replication_pb2.ReplicaFetchRequest) -> rounds.FetchSessionRef:
    """The request's fetch session (NO_FETCH_SESSION when it names none)."""
    if not request.HasField("fetch_session_epoch"):
        return rounds.NO_FETCH_SESSION
    return rounds.FetchSessionRef(
        request.fetch_session_id,
        request.fetch_session_epoch,
        tuple((f.topic, f.partition) for f in request.forgotten),
    )


def _fetched_of(
    p: replication_pb2.ReplicaFetchedPartition, records: bytes | None = None
) -> rounds.FetchedPartition:
    """`records`: read beside the message (`fetch_answer_of_bytes`), else its field's."""
    if records is None:
        records = p.records  # each read of a bytes field is a fresh copy: read once
    return rounds.FetchedPartition(
        p.topic,
        p.partition,
        high_watermark=p.high_watermark,
        log_start_offset=p.log_start_offset,
        log_end_offset=p.log_end_offset,
        leader_epoch=p.leader_epoch,
        diverging_end_offset=p.diverging_end_offset,
        diverging_epoch=p.diverging_epoch,
        records=records,
        size_bytes=len(records),
        error=error_of(p.error) if p.HasField("error") else None,
        marks_wanted=p.marks_wanted,
        marks_from=p.marks_from if p.HasField("marks_from") else -1,
        marks_to=p.marks_to if p.HasField("marks_to") else -1,
        log_start_cause=p.log_start_cause,
        continues_from=p.continues_from if p.HasField("continues_from") else None,
        held=p.held,
    )


# -- push -------------------------------------------------------------------------------------


def push_pb(push: rounds.Push) -> replication_pb2.ReplicaPushRequest:
    """The push as a message (the data path sends `push_bytes` instead)."""
    out = _push_head(push)
    if push.data is not None:
        fetch_answer_pb(push.data, out.data)
    return out


def _push_head(push: rounds.Push) -> replication_pb2.ReplicaPushRequest:
    """The push without its data."""
    out = replication_pb2.ReplicaPushRequest(link_id=push.link_id)
    out.namespaces.extend(namespace_pb(ns) for ns in push.namespaces)
    out.group_offsets.extend(group_offsets_pb(list(push.group_offsets)))
    out.request_sent_ms = push.request_sent_ms or 0
    if push.source_hw_at_ms is not None:
        out.source_hw_at_ms = push.source_hw_at_ms
    return out


def push_of(
    request: replication_pb2.ReplicaPushRequest, data: rounds.FetchAnswer | None = None
) -> rounds.Push:
    """The push a message says; `data`: its data read beside the message
    (`push_of_bytes`), else the message's own."""
    if data is None and request.HasField("data"):
        data = fetch_answer_of(request.data)
    return rounds.Push(
        request.link_id,
        tuple(
            namespace_of(n.prefix, n.topics, n.read_acls, n.resource_type, n.principal_acls)
            for n in request.namespaces
        ),
        tuple(group_offsets_of(request.group_offsets)),
        data,
        request.request_sent_ms or None,
        request.source_hw_at_ms if request.HasField("source_hw_at_ms") else None,
    )


# -- records as bytes: pushes and fetch answers on the data path ------------------------------
#
# A push or a fetch answer is sent as the protobuf encoding of its message,
# written by hand around the records so that they are never copied into a
# message nor out of one: each partition's metadata is encoded as a small
# message, and its `records` field (8) is written after it as a tag, a
# length and the batches as they are. Any protobuf parser reads the result
# as the same message (fields may come in any order), so a daemon that
# builds the message whole reads and writes the same wire form. The
# receiver walks the fields of the outer messages, takes each partition's
# records as a slice of the bytes received, and decodes the rest (a few
# dozen bytes a partition) with protobuf.

_LEN = 2  # the wire type of a length-delimited field
_PUSH_DATA = replication_pb2.ReplicaPushRequest.DESCRIPTOR.fields_by_name["data"].number
_PARTITIONS = replication_pb2.ReplicaFetchResponse.DESCRIPTOR.fields_by_name["partitions"].number
_RECORDS = replication_pb2.ReplicaFetchedPartition.DESCRIPTOR.fields_by_name["records"].number


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_tag(field: int, length: int) -> bytes:
    """A length-delimited field's tag and length."""
    return _varint(field << 3 | _LEN) + _varint(length)


def _answer_pieces(answer: rounds.FetchAnswer) -> list[bytes]:
    """The encoding of `answer` as ReplicaFetchResponse, in pieces whose
    concatenation is the message: the records are pieces of their own."""
    head = replication_pb2.ReplicaFetchResponse()
    pieces = [_answer_head(answer, head).SerializeToString(deterministic=True)]
    entry = replication_pb2.ReplicaFetchedPartition()
    for p in answer.partitions:
        entry.Clear()
        meta = _partition_pb(p, entry).SerializeToString(deterministic=True)
        records = p.records
        if records:
            tag = _len_tag(_RECORDS, len(records))
            pieces += [_len_tag(_PARTITIONS, len(meta) + len(tag) + len(records)), meta, tag,
                       records]  # fmt: skip
        else:
            pieces += [_len_tag(_PARTITIONS, len(meta)), meta]
    return pieces


def fetch_answer_bytes(answer: rounds.FetchAnswer) -> bytes:
    """`answer` encoded as ReplicaFetchResponse, its records copied once."""
    return b"".join(_answer_pieces(answer))


def push_bytes(push: rounds.Push) -> bytes:
    """`push` encoded as ReplicaPushRequest, its records copied once."""
    head = _push_head(push).SerializeToString(deterministic=True)
    if push.data is None:
        return head
    pieces = _answer_pieces(push.data)
    return b"".join([head, _len_tag(_PUSH_DATA, sum(map(len, pieces))), *pieces])


def _read_varint(view: memoryview, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= end or shift > 63:
            raise DecodeError("truncated or overlong varint")
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(view: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, where its tag starts, where its value starts,
    where it ends) of each field of the message in view[start:end]."""
    at = start
    while at < end:
        tag_at = at
        tag, at = _read_varint(view, at, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, stop = _read_varint(view, at, end)
        elif wire == 1:
            stop = at + 8
        elif wire == _LEN:
            length, at = _read_varint(view, at, end)
            stop = at + length
        elif wire == 5:
            stop = at + 4
        else:
            raise DecodeError(f"field {field}: wire type {wire} is not read here")
        if field == 0 or stop > end:
            raise DecodeError(f"field {field} runs past the end of its message")
        yield field, wire, tag_at, at, stop
        at = stop


def _fetched_of_view(view: memoryview, start: int, end: int) -> rounds.FetchedPartition:
    rest: list[memoryview] = []
    records: memoryview | None = None
    for field, wire, tag_at, at, stop in _fields(view, start, end):
        if field == _RECORDS and wire == _LEN:
            records = view[at:stop]  # the last one counts, as protobuf's
        else:
            rest.append(view[tag_at:stop])
    entry = replication_pb2.ReplicaFetchedPartition.FromString(b"".join(rest))
    # One copy of each partition's records, from the bytes received.
    return _fetched_of(entry, b"" if records is None else bytes(records))


def _answer_of_view(view: memoryview, spans: list[tuple[int, int]]) -> rounds.FetchAnswer:
    """The answer encoded in view[start:end] for each span (a message field
    given more than once is merged, as protobuf does)."""
    rest: list[memoryview] = []
    partitions: list[rounds.FetchedPartition] = []
    for start, end in spans:
        for field, wire, tag_at, at, stop in _fields(view, start, end):
            if field == _PARTITIONS and wire == _LEN:
                partitions.append(_fetched_of_view(view, at, stop))
            else:
                rest.append(view[tag_at:stop])
    head = replication_pb2.ReplicaFetchResponse.FromString(b"".join(rest))
    return rounds.FetchAnswer(
        partitions,
        sync_state=head.sync_state,
        fetch_session_id=head.fetch_session_id,
        fetch_session_refused=head.fetch_session_refused,
    )


def fetch_answer_of_bytes(body: bytes) -> rounds.FetchAnswer:
    """The answer a ReplicaFetchResponse encoding says (however it was
    written), its records sliced from `body`. Raises DecodeError."""
    view = memoryview(body)
    return _answer_of_view(view, [(0, len(view))])


def push_of_bytes(body: bytes) -> tuple[replication_pb2.ReplicaPushRequest, rounds.Push]:
    """The push a ReplicaPushRequest encoding says (however it was written):
    the message without its data, and the push. Raises DecodeError."""
    view = memoryview(body)
    rest: list[memoryview] = []
    data: list[tuple[int, int]] = []
    for field, wire, tag_at, at, stop in _fields(view, 0, len(view)):
        if field == _PUSH_DATA and wire == _LEN:
            data.append((at, stop))
        else:
            rest.append(view[tag_at:stop])
    request = replication_pb2.ReplicaPushRequest.FromString(b"".join(rest))
    return request, push_of(request, _answer_of_view(view, data) if data else None)


def fetch_request_of(
    request: replication_pb2.ReplicaFetchRequest, local_of: dict[tuple[str, int], str]
) -> rounds.FetchRequest:
    return rounds.FetchRequest(
        request.link_id,
        tuple(partition_fetches_of(request)),
        local_of,
        request.sent_ms or None,
        fetch_session_of(request),
    )


# -- partition histories (recovery and reversal) -----------------------------------------------


def side_of(cluster_id: str, p: replication_pb2.PartitionHistory) -> histories.PartitionSide:
    return histories.PartitionSide(
        cluster_id,
        p.log_start_offset,
        p.log_end_offset,
        p.high_watermark,
        tuple((e.epoch, e.start_offset) for e in p.epoch_history),
        tuple(
            ProvenanceItem(
                ProvenanceKind(e.kind),
                e.offset,
                e.source_cluster_id,
                e.link_id,
                e.link_epoch,
                e.removed_records,
                e.reason,
                to_offset=e.to_offset,
                at_ms=e.at_ms,
            )
            for e in p.provenance
        ),
        unreadable=tuple((r.from_offset, r.to_offset) for r in p.unreadable),
        marks=tuple(_mark_of(m) for m in p.marks),
    )


def history_pb(topic: str, partition: int, side: histories.PartitionSide) -> Any:
    return replication_pb2.PartitionHistory(
        topic=topic,
        partition=partition,
        log_start_offset=side.log_start_offset,
        log_end_offset=side.log_end_offset,
        high_watermark=side.high_watermark,
        leader_epoch=side.epoch_history[-1][0] if side.epoch_history else 0,
        epoch_history=[
            replication_pb2.EpochStart(epoch=e, start_offset=s) for e, s in side.epoch_history
        ],
        provenance=[
            replication_pb2.ProvenanceRecord(
                kind=i.kind.value,
                offset=i.offset,
                source_cluster_id=i.source,
                link_id=i.link_id,
                link_epoch=i.link_epoch,
                removed_records=i.removed,
                to_offset=i.to_offset,
                reason=i.reason,
                at_ms=i.at_ms,
            )
            for i in side.provenance
        ],
        unreadable=[
            replication_pb2.OffsetRange(from_offset=low, to_offset=high)
            for low, high in side.unreadable
        ],
        marks=[_mark_pb(m) for m in side.marks],
    )


def description_pb(d: PartitionsDescription) -> replication_pb2.DescribePartitionsResponse:
    out = replication_pb2.DescribePartitionsResponse(cluster_id=d.cluster_id)
    for (topic, p), side in sorted(d.partitions.items()):
        out.partitions.append(history_pb(topic, p, side))
    for (group, topic, p), offset in sorted(d.group_offsets.items()):
        out.group_offsets.add(group_id=group, topic=topic, partition=p, offset=offset)
    for cluster, version in d.lineage:
        hop = replication_pb2.LineageHop(cluster_id=cluster, version=_version_pb(version))
        out.lineage.append(hop)
    out.namespace_reserved = d.standing.reserved
    out.namespace_follows_elsewhere = d.standing.follows_elsewhere
    out.namespace_in_plan = d.standing.in_plan
    return out


def description_of(reply: replication_pb2.DescribePartitionsResponse) -> PartitionsDescription:
    return PartitionsDescription(
        reply.cluster_id,
        {(p.topic, p.partition): side_of(reply.cluster_id, p) for p in reply.partitions},
        {(o.group_id, o.topic, o.partition): o.offset for o in reply.group_offsets},
        tuple((h.cluster_id, _version(h.version)) for h in reply.lineage),
        NamespaceStanding(
            reply.namespace_reserved, reply.namespace_follows_elsewhere, reply.namespace_in_plan
        ),
    )


# -- the link driver's calls (linkd/core/link_calls.py) -----------------------------------------


def call_pb(call: LinkCall) -> tuple[str, Message]:
    """A driver's call as (Replication method, request message); OpenSession
    is two calls of its own (`linkd.link_sessions.open_session`)."""
    if isinstance(call, Handshake):
        return "Handshake", handshake_pb(call.config, call.create, call.proposed)
    if isinstance(call, ListSourceTopics):
        listing = replication_pb2.ListSourceTopicsRequest(link_id=call.link_id, prefix=call.prefix)
        if call.kind == MappingType.PRINCIPAL:
            listing.resource_type = "principal"
        return "ListSourceTopics", listing
    if isinstance(call, FetchGroupOffsets):
        return "FetchGroupOffsets", replication_pb2.FetchGroupOffsetsRequest(
            link_id=call.link_id, prefix=call.prefix
        )
    if isinstance(call, ReplicaFetch):
        return "ReplicaFetch", fetch_request_pb(call.request, call.max_wait_ms, call.max_bytes)
    if isinstance(call, ReplicaPush):
        return "ReplicaPush", push_pb(call.push)
    raise TypeError(f"{call!r} has no single message")


def call_body(call: LinkCall) -> tuple[str, bytes]:
    """A driver's call as (Replication method, its request encoded): a push's
    records are copied once, into the bytes sent (`push_bytes`)."""
    if isinstance(call, ReplicaPush):
        return "ReplicaPush", push_bytes(call.push)
    method, message = call_pb(call)
    return method, message.SerializeToString(deterministic=True)


def answer_decoder(method: str) -> Any:
    """How the data path reads a Replication method's answer: a fetch answer's
    records are sliced from the bytes received (`fetch_answer_of_bytes`)."""
    if method == "ReplicaFetch":
        return fetch_answer_of_bytes
    service = replication_pb2.DESCRIPTOR.services_by_name["Replication"]
    return getattr(replication_pb2, service.methods_by_name[method].output_type.name).FromString


def decoded_answer(method: str, body: bytes, what: str) -> Message | rounds.FetchAnswer:
    """A Replication method's answer read from `body` (`answer_decoder`); one
    that does not decode is LINK_UNREACHABLE, as gRPC says of an answer its
    deserializer refuses."""
    try:
        decoded: Message | rounds.FetchAnswer = answer_decoder(method)(body)
    except DecodeError as exc:
        raise ClusterError(
            ErrorCode.LINK_UNREACHABLE, what, f"{what}: the answer does not decode: {exc}"
        ) from exc
    return decoded


def call_answer_of(call: LinkCall, reply: Message | rounds.FetchAnswer) -> LinkAnswer:
    """The answer a call names, from the method's reply (`answer_decoder`'s)."""
    if isinstance(call, ReplicaFetch) and isinstance(reply, rounds.FetchAnswer):
        return reply
    if isinstance(call, Handshake) and isinstance(reply, replication_pb2.HandshakeResponse):
        return config_of(reply.config)
    if isinstance(call, ListSourceTopics) and isinstance(
        reply, replication_pb2.ListSourceTopicsResponse
    ):
        if call.kind == MappingType.PRINCIPAL:
            return namespace_of(call.prefix, (), (), "principal", reply.principal_acls)
        return namespace_of(call.prefix, reply.topics, reply.read_acls)
    if isinstance(call, FetchGroupOffsets) and isinstance(
        reply, replication_pb2.FetchGroupOffsetsResponse
    ):
        return GroupOffsets(tuple(group_offsets_of(reply.offsets)))
    if isinstance(call, ReplicaFetch) and isinstance(reply, replication_pb2.ReplicaFetchResponse):
        return fetch_answer_of(reply)
    if isinstance(call, ReplicaPush) and isinstance(reply, replication_pb2.ReplicaPushResponse):
        # Its map back to the follower's names stays on the follower.
        return fetch_request_of(reply.next, {})
    raise TypeError(f"{type(reply).__name__} does not answer {call_name(call)}")
