"""`Consumer`: fetches records, alone (assign) or in a consumer group (subscribe).

Shaped like confluent-kafka's Consumer. `poll()` fetches on the caller's
thread (one `Fetch` call covers every assigned partition whose buffer is
empty). Group membership runs on a background thread, as in librdkafka:
JoinGroup / SyncGroup / Heartbeat / LeaveGroup with Kafka's "consumer"
protocol type and ConsumerProtocol metadata (admin.assignors); the leader
assigns with a client-side assignor ("range" by default). Rebalance callbacks
(`on_assign`, `on_revoke`) run inside `poll()` on the caller's thread; when
`on_revoke` is given, the member waits for the caller's poll to run it (so it
can commit) before rejoining, bounded by max.poll.interval.ms. Because the
protocol runs in the background, several consumers polled from one thread can
rebalance with one another.

Config (confluent-kafka names):
    bootstrap.servers, group.id, client.id, group.instance.id
    auto.offset.reset          earliest | latest (default) | error
    enable.auto.commit         default True; auto.commit.interval.ms 5000
    isolation.level            read_uncommitted (default) | read_committed
    session.timeout.ms         default 10000
    heartbeat.interval.ms      default 3000
    max.poll.interval.ms       default 300000 (also the rebalance timeout)
    fetch.max.wait.ms          default 500
    fetch.min.bytes            default 1
    fetch.max.bytes            default 52428800
    max.partition.fetch.bytes  default 1048576
    partition.assignment.strategy  range (default) | roundrobin | "range,roundrobin"
    request.timeout.ms         default 30000
    metadata.max.age.ms        default 30000 (how often subscriptions are checked
                               for new partitions / matching topics)
    on_commit                  callback(err, partitions) for commits (served by poll)
    error_cb                   callback(err) for errors outside a partition
    security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location,
    sasl.mechanism, sasl.username, sasl.password   a secured cluster (admin/security.py)

read_committed: the fetch response lists the transactions aborted within the
returned range; Kafka's rule skips the data batches of a producer id from the
first offset of its aborted transaction until that producer's abort marker.
Control batches (transaction markers) are never returned.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from admin.admin_client import isolation_of
from admin.assignors import (
    CONSUMER_PROTOCOL_TYPE,
    MemberSubscription,
    ProtocolError,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from admin.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Config,
    Connection,
    Message,
    TopicPartition,
    bootstrap_of,
    config_bool,
    config_int,
    config_str,
    normalize_config,
)
from admin.errors import CcrError, from_detail
from admin.security import security_of
from ccr.v1 import cluster_pb2
from linkd.core.records import (
    CONTROL_ABORT,
    HEADER_SIZE,
    CorruptBatchError,
    control_marker_type,
    decode_records,
    parse_header,
)

AssignCallback = Callable[["Consumer", list[TopicPartition]], Any]
CommitCallback = Callable[[CcrError | None, list[TopicPartition]], Any]
Key = tuple[str, int]

_STRATEGY_ALIASES = {
    "range": "range",
    "roundrobin": "roundrobin",
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
}


@dataclass(frozen=True)
class GroupMetadata:
    """What `Producer.send_offsets_to_transaction` needs to know of a consumer."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str = ""


# ---------------------------------------------------------------------------
# Decoding fetched batches (pure)
# ---------------------------------------------------------------------------


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    fetch_offset: int,
    aborted: Iterable[tuple[int, int]] = (),
    read_committed: bool = False,
) -> tuple[list[Message], int]:
    """The records of fetched batches at or after `fetch_offset`, and the next
    offset to fetch.

    `aborted` lists (producer_id, first_offset) of aborted transactions. With
    `read_committed`, Kafka's rule applies: before each batch of a producer, the
    aborted transactions starting at or before the batch's last offset mark
    their producer aborted; a transactional data batch of an aborted producer is
    skipped; that producer's abort marker clears the mark. Control batches are
    never returned. A trailing partial batch is ignored. Raises
    CorruptBatchError on a bad CRC or a malformed batch.
    """
    pending = deque(sorted(aborted, key=lambda a: a[1]))
    aborted_pids: set[int] = set()
    out: list[Message] = []
    next_offset = fetch_offset
    pos = 0
    end = len(data)
    while end - pos >= HEADER_SIZE:
        header = parse_header(data, pos)
        size = header.size_bytes
        if pos + size > end:
            break  # a partial batch at the end of the response
        if read_committed and header.producer_id >= 0:
            while pending and pending[0][1] <= header.last_offset:
                aborted_pids.add(pending.popleft()[0])
            if header.is_control:
                if control_marker_type(data, pos) == CONTROL_ABORT:
                    aborted_pids.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_pids:
                next_offset = max(next_offset, header.next_offset)
                pos += size
                continue
        if header.is_control:
            # Checked for integrity like any batch, but never returned.
            decode_records(data, pos)
            next_offset = max(next_offset, header.next_offset)
            pos += size
            continue
        _, records = decode_records(data, pos)
        ts_type = TIMESTAMP_LOG_APPEND_TIME if header.log_append_time else TIMESTAMP_CREATE_TIME
        epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
        for rec in records:
            if rec.offset < fetch_offset:
                continue
            out.append(
                Message(
                    topic,
                    partition,
                    rec.offset,
                    rec.key,
                    rec.value,
                    list(rec.headers),
                    (ts_type, rec.timestamp),
                    None,
                    epoch,
                )
            )
        next_offset = max(next_offset, header.next_offset)
        pos += size
    return out, next_offset


# ---------------------------------------------------------------------------
# Consumer
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Part:
    topic: str
    partition: int
    fetch_offset: int | None = None  # next offset to fetch; None: to be resolved
    want: int = OFFSET_STORED  # how to resolve: OFFSET_STORED / BEGINNING / END
    buffer: deque[Message] = field(default_factory=deque)
    paused: bool = False
    backoff_until: float = 0.0
    last_error: str = ""
    version: int = 0

    @property
    def key(self) -> Key:
        return (self.topic, self.partition)

    def position(self) -> int | None:
        if self.buffer:
            offset = self.buffer[0].offset()
            return offset
        return self.fetch_offset


@dataclass
class _Event:
    kind: str  # "revoke", "assign", "error", "commit"
    partitions: list[TopicPartition] = field(default_factory=list)
    error: CcrError | None = None
    generation: int = -1
    done: threading.Event = field(default_factory=threading.Event)


class Consumer:
    """Reads records from one cluster; see the module docstring for the config."""

    def __init__(self, config: Config | str | None = None, **kwargs: Any) -> None:
        conf = normalize_config(config, "Consumer")
        conf.update(kwargs)
        self._request_timeout_s = config_int(conf, "request.timeout.ms", 30000, 1) / 1000.0
        self._conn = Connection(bootstrap_of(conf), self._request_timeout_s, security_of(conf))
        self._group_id = config_str(conf, "group.id", "")
        self._client_id = config_str(conf, "client.id", "ccr-python-consumer")
        self._instance_id = config_str(conf, "group.instance.id", "")
        reset = config_str(conf, "auto.offset.reset", "latest").strip().lower()
        reset_map = {
            "earliest": OFFSET_BEGINNING,
            "smallest": OFFSET_BEGINNING,
            "beginning": OFFSET_BEGINNING,
            "latest": OFFSET_END,
            "largest": OFFSET_END,
            "end": OFFSET_END,
            "error": OFFSET_INVALID,
        }
        if reset not in reset_map:
            raise ValueError(
                f"config auto.offset.reset must be earliest, latest or error: {reset!r}"
            )
        self._reset = reset_map[reset]
        self._auto_commit = config_bool(conf, "enable.auto.commit", True)
        self._auto_commit_s = config_int(conf, "auto.commit.interval.ms", 5000, 1) / 1000.0
        self._isolation = isolation_of(config_str(conf, "isolation.level", "read_uncommitted"))
        self._read_committed = self._isolation == cluster_pb2.ISOLATION_LEVEL_READ_COMMITTED
        self._session_ms = config_int(conf, "session.timeout.ms", 10000, 1)
        self._heartbeat_s = config_int(conf, "heartbeat.interval.ms", 3000, 1) / 1000.0
        self._max_poll_ms = config_int(conf, "max.poll.interval.ms", 300000, 1)
        self._fetch_wait_ms = config_int(conf, "fetch.max.wait.ms", 500, 0)
        self._fetch_min_bytes = config_int(conf, "fetch.min.bytes", 1, 0)
        self._fetch_max_bytes = config_int(conf, "fetch.max.bytes", 52428800, 1)
        self._partition_max_bytes = config_int(conf, "max.partition.fetch.bytes", 1048576, 1)
        self._metadata_age_s = config_int(conf, "metadata.max.age.ms", 30000, 100) / 1000.0
        self._backoff_s = config_int(conf, "retry.backoff.ms", 100, 0) / 1000.0
        strategies = []
        for name in str(conf.get("partition.assignment.strategy", "range")).split(","):
            norm = _STRATEGY_ALIASES.get(name.strip().lower())
            if norm is None:
                raise ValueError(
                    f"config partition.assignment.strategy: unknown assignor {name.strip()!r} "
                    "(known: range, roundrobin)"
                )
            if norm not in strategies:
                strategies.append(norm)
        self._strategies = strategies
        on_commit = conf.get("on_commit")
        error_cb = conf.get("error_cb")
        if on_commit is not None and not callable(on_commit):
            raise TypeError("on_commit must be callable")
        if error_cb is not None and not callable(error_cb):
            raise TypeError("error_cb must be callable")
        self._on_commit: CommitCallback | None = on_commit
        self._error_cb: Callable[[CcrError], Any] | None = error_cb

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._parts: dict[Key, _Part] = {}
        self._ready: deque[Key] = deque()
        self._events: deque[_Event] = deque()
        self._errors: deque[Message] = deque()
        self._closed = False
        self._last_committed: dict[Key, int] = {}
        # Group membership.
        self._subscription: list[str] | None = None
        self._on_assign: AssignCallback | None = None
        self._on_revoke: AssignCallback | None = None
        self._member_id = ""
        self._generation = -1
        self._protocol = ""
        self._joined = False
        self._rejoin = False
        self._poll_expired = False
        self._last_poll = time.monotonic()
        self._in_rebalance_cb = False
        self._topics_seen: dict[str, int] = {}  # partition counts used in the last assignment
        self._resolved_topics: list[str] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._inflight_call: grpc.Future[Any] | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ helpers

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")

    def _need_group(self, what: str) -> None:
        if not self._group_id:
            raise CcrError("INVALID_GROUP_ID", f"{what} needs group.id in the consumer config")

    def _start_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"ccr-consumer-{self._group_id or 'nogroup'}", daemon=True
        )
        self._thread.start()

    def _stop_thread(self) -> None:
        self._stop.set()
        self._wake.set()
        fut = self._inflight_call
        if fut is not None:
            fut.cancel()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._request_timeout_s + 5.0)
        self._thread = None

    def _error_event(self, err: CcrError) -> None:
        with self._cond:
            self._events.append(_Event("error", error=err))
            self._cond.notify_all()

    # ------------------------------------------------------------------ subscribe / assign

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: AssignCallback | None = None,
        on_revoke: AssignCallback | None = None,
        on_lost: AssignCallback | None = None,
    ) -> None:
        """Joins group.id subscribed to `topics` (names, or regexes starting with
        "^"). The assignment arrives through poll()."""
        self._check_open()
        self._need_group("subscribe")
        if isinstance(topics, str):
            raise TypeError("subscribe takes a list of topic names")
        topics = list(topics)
        if not topics:
            raise ValueError("subscribe needs at least one topic")
        for t in topics:
            if t.startswith("^"):
                re.compile(t)
        with self._cond:
            manual = self._subscription is None and bool(self._parts)
            self._subscription = topics
            self._on_assign = on_assign
            self._on_revoke = on_revoke or on_lost
            self._rejoin = True
            if manual:
                self._clear_assignment_locked()
        self._last_poll = time.monotonic()
        self._start_thread()
        self._wake.set()

    def unsubscribe(self) -> None:
        """Leaves the group (revoking the assignment, committing first when
        auto-commit is on)."""
        self._check_open()
        if self._subscription is None:
            with self._cond:
                self._clear_assignment_locked()
            return
        self._stop_thread()
        self._revoke_now(call_callback=True)
        self._leave_group()
        with self._cond:
            self._subscription = None
            self._events.clear()

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Sets the assignment: exactly these partitions, at their offsets
        (OFFSET_INVALID/STORED: the committed offset, else auto.offset.reset)."""
        self._check_open()
        with self._cond:
            self._clear_assignment_locked()
            for tp in partitions:
                self._add_part_locked(tp)
            self._cond.notify_all()
        if self._group_id and self._auto_commit:
            self._start_thread()

    def incremental_assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._check_open()
        with self._cond:
            for tp in partitions:
                if (tp.topic, tp.partition) in self._parts:
                    raise CcrError(
                        "INVALID_STATE", f"{tp.topic}-{tp.partition} is already assigned"
                    )
            for tp in partitions:
                self._add_part_locked(tp)
        if self._group_id and self._auto_commit:
            self._start_thread()

    def incremental_unassign(self, partitions: Sequence[TopicPartition]) -> None:
        self._check_open()
        with self._cond:
            for tp in partitions:
                part = self._parts.pop((tp.topic, tp.partition), None)
                if part is not None:
                    self._drop_ready_locked(part.key)

    def unassign(self) -> None:
        self._check_open()
        with self._cond:
            self._clear_assignment_locked()

    def assignment(self) -> list[TopicPartition]:
        self._check_open()
        with self._lock:
            return sorted(TopicPartition(t, p) for t, p in self._parts)

    def _add_part_locked(self, tp: TopicPartition) -> None:
        if tp.partition < 0:
            raise ValueError(f"assign needs explicit partitions, got {tp.topic}-{tp.partition}")
        part = _Part(tp.topic, tp.partition)
        if tp.offset >= 0:
            part.fetch_offset = tp.offset
        elif tp.offset in (OFFSET_BEGINNING, OFFSET_END):
            part.want = tp.offset
        else:
            part.want = OFFSET_STORED
        self._parts[part.key] = part

    def _clear_assignment_locked(self) -> None:
        self._parts.clear()
        self._ready.clear()

    def _drop_ready_locked(self, key: Key) -> None:
        try:
            self._ready.remove(key)
        except ValueError:
            pass

    # ------------------------------------------------------------------ positions

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """The offset of the next record poll() returns for each partition
        (OFFSET_INVALID when not known yet)."""
        self._check_open()
        out = []
        with self._lock:
            for tp in partitions:
                part = self._parts.get((tp.topic, tp.partition))
                pos = part.position() if part is not None else None
                out.append(
                    TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if pos is None else pos)
                )
        return out

    def seek(self, partition: TopicPartition) -> None:
        """Moves an assigned partition to `partition.offset` (an offset,
        OFFSET_BEGINNING or OFFSET_END)."""
        self._check_open()
        with self._cond:
            part = self._parts.get((partition.topic, partition.partition))
            if part is None:
                raise CcrError(
                    "INVALID_STATE",
                    f"cannot seek {partition.topic}-{partition.partition}: it is not assigned",
                )
            part.version += 1
            part.buffer.clear()
            self._drop_ready_locked(part.key)
            part.backoff_until = 0.0
            if partition.offset >= 0:
                part.fetch_offset = partition.offset
            elif partition.offset in (OFFSET_BEGINNING, OFFSET_END):
                part.fetch_offset = None
                part.want = partition.offset
            else:
                raise ValueError(f"cannot seek to logical offset {partition.offset}")

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                part = self._parts.get((tp.topic, tp.partition))
                if part is not None:
                    part.paused = True

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                part = self._parts.get((tp.topic, tp.partition))
                if part is not None:
                    part.paused = False

    def committed(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """The group's committed offsets (OFFSET_INVALID where none)."""
        self._check_open()
        self._need_group("committed")
        resp = self._conn.call(
            self._conn.cluster.FetchCommittedOffsets,
            cluster_pb2.FetchCommittedOffsetsRequest(
                group_id=self._group_id,
                partitions=[
                    cluster_pb2.TopicPartition(topic=tp.topic, partition=tp.partition)
                    for tp in partitions
                ],
            ),
            timeout,
        )
        found = {(o.topic, o.partition): o for o in resp.offsets}
        out = []
        for tp in partitions:
            o = found.get((tp.topic, tp.partition))
            if o is None or o.offset < 0:
                out.append(TopicPartition(tp.topic, tp.partition, OFFSET_INVALID))
            else:
                out.append(
                    TopicPartition(
                        tp.topic,
                        tp.partition,
                        o.offset,
                        o.metadata or None,
                        o.leader_epoch if o.leader_epoch >= 0 else None,
                    )
                )
        return out

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        """(low, high) offsets of a partition; high is the LSO with read_committed."""
        self._check_open()
        low = self._list_offset(
            partition.topic, partition.partition, cluster_pb2.OFFSET_SPEC_EARLIEST, 0, timeout
        )
        high = self._list_offset(
            partition.topic, partition.partition, cluster_pb2.OFFSET_SPEC_LATEST, 0, timeout
        )
        return low, high

    def offsets_for_times(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """For each partition (offset = a timestamp in ms): the first offset whose
        timestamp is at or after it, OFFSET_END (-1) when there is none."""
        self._check_open()
        out = []
        for tp in partitions:
            off = self._list_offset(
                tp.topic, tp.partition, cluster_pb2.OFFSET_SPEC_TIMESTAMP, tp.offset, timeout
            )
            out.append(TopicPartition(tp.topic, tp.partition, off if off >= 0 else OFFSET_END))
        return out

    def _list_offset(
        self,
        topic: str,
        partition: int,
        spec: cluster_pb2.OffsetSpec.ValueType,
        timestamp: int,
        timeout: float | None,
    ) -> int:
        resp = self._conn.call(
            self._conn.cluster.ListOffsets,
            cluster_pb2.ListOffsetsRequest(
                topic=topic,
                partition=partition,
                spec=spec,
                timestamp=timestamp,
                isolation_level=self._isolation,
            ),
            timeout,
        )
        return int(resp.offset)

    def consumer_group_metadata(self) -> GroupMetadata:
        self._check_open()
        with self._lock:
            return GroupMetadata(
                self._group_id, self._generation, self._member_id, self._instance_id
            )

    def memberid(self) -> str | None:
        with self._lock:
            return self._member_id or None

    # ------------------------------------------------------------------ commits

    def _current_offsets_locked(self) -> list[TopicPartition]:
        out = []
        for part in self._parts.values():
            pos = part.position()
            if pos is not None and pos >= 0:
                out.append(TopicPartition(part.topic, part.partition, pos))
        return out

    def _commit_ids_locked(self) -> tuple[int, str]:
        if self._subscription is not None and self._member_id:
            return self._generation, self._member_id
        return -1, ""

    def _commit_request(
        self, offsets: Sequence[TopicPartition]
    ) -> cluster_pb2.CommitOffsetsRequest:
        with self._lock:
            generation, member = self._commit_ids_locked()
        return cluster_pb2.CommitOffsetsRequest(
            group_id=self._group_id,
            generation_id=generation,
            member_id=member,
            offsets=[
                cluster_pb2.OffsetAndMetadata(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=tp.offset,
                    metadata=tp.metadata or "",
                    leader_epoch=-1 if tp.leader_epoch is None else tp.leader_epoch,
                )
                for tp in offsets
            ],
        )

    def commit(
        self,
        message: Message | None = None,
        offsets: Sequence[TopicPartition] | None = None,
        asynchronous: bool = False,
    ) -> list[TopicPartition] | None:
        """Commits `message`'s offset + 1, or `offsets` (next offsets to read), or
        the current position of every assigned partition. Synchronous by default:
        returns the committed partitions or raises CcrError. With
        asynchronous=True returns None; the result goes to on_commit via poll()."""
        self._check_open()
        self._need_group("commit")
        if message is not None and offsets is not None:
            raise ValueError("commit takes message or offsets, not both")
        if message is not None:
            if message.error() is not None or message.offset() is None:
                raise ValueError("cannot commit an error message")
            to_commit = [
                TopicPartition(
                    str(message.topic()),
                    int(message.partition() or 0),
                    int(message.offset() or 0) + 1,
                    leader_epoch=message.leader_epoch(),
                )
            ]
        elif offsets is not None:
            to_commit = list(offsets)
            for tp in to_commit:
                if tp.offset < 0:
                    raise ValueError(
                        f"commit offset of {tp.topic}-{tp.partition} must be >= 0, got {tp.offset}"
                    )
        else:
            with self._lock:
                to_commit = self._current_offsets_locked()
            if not to_commit:
                if asynchronous:
                    return None
                raise CcrError("NO_OFFSET", "no offsets to commit (nothing consumed yet)")
        req = self._commit_request(to_commit)
        if asynchronous:
            fut = self._conn.future(self._conn.cluster.CommitOffsets, req, self._request_timeout_s)

            def done(f: grpc.Future[cluster_pb2.CommitOffsetsResponse]) -> None:
                err: CcrError | None = None
                try:
                    f.result(timeout=0)
                except grpc.RpcError as exc:
                    err = self._conn.error(exc)
                except Exception as exc:
                    err = CcrError("UNKNOWN", repr(exc))
                if err is None:
                    self._note_committed(to_commit)
                if self._on_commit is not None:
                    with self._cond:
                        self._events.append(_Event("commit", to_commit, err))
                        self._cond.notify_all()

            fut.add_done_callback(done)
            return None
        self._conn.call(self._conn.cluster.CommitOffsets, req)
        self._note_committed(to_commit)
        return to_commit

    def _note_committed(self, offsets: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in offsets:
                self._last_committed[(tp.topic, tp.partition)] = tp.offset

    def _auto_commit_now(self) -> None:
        """Commits changed positions (auto-commit); failures go to error_cb."""
        if not (self._group_id and self._auto_commit):
            return
        with self._lock:
            offsets = [
                tp
                for tp in self._current_offsets_locked()
                if self._last_committed.get((tp.topic, tp.partition)) != tp.offset
            ]
        if not offsets:
            return
        try:
            self._conn.call(self._conn.cluster.CommitOffsets, self._commit_request(offsets))
        except CcrError as exc:
            if self._on_commit is not None:
                with self._cond:
                    self._events.append(_Event("commit", offsets, exc))
            return
        self._note_committed(offsets)
        if self._on_commit is not None:
            with self._cond:
                self._events.append(_Event("commit", offsets, None))

    # ------------------------------------------------------------------ poll

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record (or an error Message), or None after `timeout`
        seconds (None or negative: wait until one arrives)."""
        msgs = self._consume(1, timeout)
        return msgs[0] if msgs else None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to `num_messages` records; returns when that many are ready or
        `timeout` seconds passed (None or negative: no time limit)."""
        if num_messages < 1:
            raise ValueError("num_messages must be at least 1")
        return self._consume(num_messages, timeout)

    def _consume(self, count: int, timeout: float | None) -> list[Message]:
        self._check_open()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        out: list[Message] = []
        attempted = False
        while True:
            self._touch_poll()
            self._serve_events()
            self._check_open()
            with self._lock:
                while len(out) < count:
                    msg = self._next_buffered_locked()
                    if msg is None:
                        break
                    out.append(msg)
            if len(out) >= count:
                return out
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0 and attempted:
                return out
            attempted = True
            self._resolve_positions()
            wait_ms = self._fetch_wait_ms
            if left is not None:
                wait_ms = max(0, min(wait_ms, int(left * 1000)))
            if not self._fetch(wait_ms) and (left is None or left > 0):
                with self._cond:
                    if not self._events and not self._errors:
                        self._cond.wait(0.1 if left is None else min(0.1, left))

    def _touch_poll(self) -> None:
        self._last_poll = time.monotonic()
        if self._poll_expired:
            self._poll_expired = False
            self._wake.set()

    def _next_buffered_locked(self) -> Message | None:
        if self._errors:
            return self._errors.popleft()
        for key in list(self._ready):
            part = self._parts.get(key)
            if part is None or not part.buffer:
                self._drop_ready_locked(key)
                continue
            if part.paused:
                continue
            msg = part.buffer.popleft()
            if not part.buffer:
                self._drop_ready_locked(key)
            return msg
        return None

    def _serve_events(self) -> None:
        while True:
            with self._cond:
                if not self._events:
                    return
                event = self._events.popleft()
            try:
                if event.kind == "revoke":
                    self._process_revoke(event.partitions)
                elif event.kind == "assign":
                    self._process_assign(event)
                elif event.kind == "commit":
                    if self._on_commit is not None:
                        self._on_commit(event.error, event.partitions)
                elif event.kind == "error" and event.error is not None:
                    if self._error_cb is not None:
                        self._error_cb(event.error)
                    else:
                        with self._lock:
                            self._errors.append(
                                Message(None, None, None, None, None, error=event.error)
                            )
            finally:
                event.done.set()

    def _process_revoke(self, partitions: list[TopicPartition]) -> None:
        """Runs on the caller's thread: commit (auto), on_revoke, clear."""
        self._auto_commit_now()
        callback = self._on_revoke
        if callback is not None:
            self._in_rebalance_cb = True
            try:
                callback(self, partitions)
            finally:
                self._in_rebalance_cb = False
        with self._cond:
            self._clear_assignment_locked()

    def _process_assign(self, event: _Event) -> None:
        with self._cond:
            if event.generation != self._generation:
                return  # superseded by a later rebalance
            self._clear_assignment_locked()
            for tp in event.partitions:
                self._add_part_locked(TopicPartition(tp.topic, tp.partition))
        callback = self._on_assign
        if callback is not None:
            self._in_rebalance_cb = True
            try:
                callback(self, [TopicPartition(tp.topic, tp.partition) for tp in event.partitions])
            finally:
                self._in_rebalance_cb = False

    # ------------------------------------------------------------------ fetching

    def _resolve_positions(self) -> None:
        """Finds the start offset of partitions that have none."""
        now = time.monotonic()
        with self._lock:
            todo = [
                (p.key, p.version, p.want)
                for p in self._parts.values()
                if p.fetch_offset is None and p.backoff_until <= now
            ]
        if not todo:
            return
        stored = [k for k, _, want in todo if want in (OFFSET_STORED, OFFSET_INVALID)]
        committed: dict[Key, int] = {}
        if stored and self._group_id:
            try:
                resp = self._conn.call(
                    self._conn.cluster.FetchCommittedOffsets,
                    cluster_pb2.FetchCommittedOffsetsRequest(
                        group_id=self._group_id,
                        partitions=[
                            cluster_pb2.TopicPartition(topic=t, partition=p) for t, p in stored
                        ],
                    ),
                )
            except CcrError as exc:
                if exc.code != "GROUP_ID_NOT_FOUND":
                    self._backoff_parts([k for k, _, _ in todo], exc)
                    return
                resp = cluster_pb2.FetchCommittedOffsetsResponse()
            committed = {(o.topic, o.partition): o.offset for o in resp.offsets if o.offset >= 0}
        resolved: dict[Key, int] = {}
        lookups: list[tuple[Key, int]] = []
        for key, _, want in todo:
            if key in committed:
                resolved[key] = committed[key]
                continue
            spec = want if want in (OFFSET_BEGINNING, OFFSET_END) else self._reset
            if spec == OFFSET_INVALID:
                err = CcrError(
                    "AUTO_OFFSET_RESET",
                    f"no committed offset for {key[0]}-{key[1]} and auto.offset.reset=error",
                    resource=f"{key[0]}-{key[1]}",
                )
                self._backoff_parts([key], err, seconds=5.0)
                continue
            lookups.append((key, spec))
        futures = []
        earliest, latest = cluster_pb2.OFFSET_SPEC_EARLIEST, cluster_pb2.OFFSET_SPEC_LATEST
        for key, spec in lookups:
            req = cluster_pb2.ListOffsetsRequest(
                topic=key[0],
                partition=key[1],
                spec=earliest if spec == OFFSET_BEGINNING else latest,
                isolation_level=self._isolation,
            )
            try:
                futures.append(
                    (
                        key,
                        self._conn.future(
                            self._conn.cluster.ListOffsets, req, self._request_timeout_s
                        ),
                    )
                )
            except CcrError as exc:
                self._backoff_parts([key], exc)
        for key, fut in futures:
            try:
                resolved[key] = int(fut.result(timeout=self._request_timeout_s + 1.0).offset)
            except grpc.RpcError as exc:
                self._backoff_parts([key], self._conn.error(exc))
            except grpc.FutureTimeoutError:
                fut.cancel()
                self._backoff_parts(
                    [key], CcrError("TIMED_OUT", "ListOffsets took too long", retriable=True)
                )
        versions = {k: v for k, v, _ in todo}
        with self._lock:
            for key, offset in resolved.items():
                part = self._parts.get(key)
                if part is not None and part.version == versions[key] and part.fetch_offset is None:
                    part.fetch_offset = offset
                    part.last_error = ""

    def _backoff_parts(self, keys: Iterable[Key], err: CcrError, seconds: float = 0.5) -> None:
        """Delays work on partitions after an error; reports each new error once."""
        until = time.monotonic() + max(seconds, self._backoff_s)
        with self._cond:
            for key in keys:
                part = self._parts.get(key)
                if part is None:
                    continue
                part.backoff_until = until
                if err.retriable and err.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_READY"):
                    if self._error_cb is not None and part.last_error != err.code:
                        self._events.append(_Event("error", error=err))
                    part.last_error = err.code
                    continue
                if part.last_error != err.code:
                    part.last_error = err.code
                    self._errors.append(Message(key[0], key[1], None, None, None, error=err))
            self._cond.notify_all()

    def _fetch(self, wait_ms: int) -> bool:
        """One Fetch call for every partition ready to fetch. True if it ran."""
        now = time.monotonic()
        with self._lock:
            targets = [
                (p.key, p.version, p.fetch_offset)
                for p in self._parts.values()
                if p.fetch_offset is not None
                and not p.buffer
                and not p.paused
                and p.backoff_until <= now
            ]
        if not targets:
            return False
        req = cluster_pb2.FetchRequest(
            partitions=[
                cluster_pb2.FetchPartition(
                    topic=t, partition=p, offset=offset or 0, max_bytes=self._partition_max_bytes
                )
                for (t, p), _, offset in targets
            ],
            max_wait_ms=max(0, wait_ms),
            min_bytes=self._fetch_min_bytes,
            max_bytes=self._fetch_max_bytes,
            isolation_level=self._isolation,
            group_id=self._group_id,
        )
        try:
            resp = self._conn.call(
                self._conn.cluster.Fetch, req, self._request_timeout_s + wait_ms / 1000.0
            )
        except CcrError as exc:
            self._backoff_parts([k for k, _, _ in targets], exc)
            return True
        snapshot = {k: (v, o) for k, v, o in targets}
        for fp in resp.partitions:
            key = (fp.topic, fp.partition)
            if key not in snapshot:
                continue
            version, offset = snapshot[key]
            if fp.HasField("error") and fp.error.code != 0:
                err = from_detail(fp.error)
                if err.code == "OFFSET_OUT_OF_RANGE":
                    with self._lock:
                        part = self._parts.get(key)
                        if part is not None and part.version == version:
                            part.fetch_offset = None
                            part.want = (
                                self._reset if self._reset != OFFSET_INVALID else OFFSET_STORED
                            )
                            part.version += 1
                    if self._reset == OFFSET_INVALID:
                        self._backoff_parts([key], err, seconds=5.0)
                    continue
                self._backoff_parts([key], err)
                continue
            try:
                msgs, next_offset = decode_fetched(
                    fp.topic,
                    fp.partition,
                    fp.records,
                    offset or 0,
                    [(a.producer_id, a.first_offset) for a in fp.aborted_transactions],
                    self._read_committed,
                )
            except CorruptBatchError as exc:
                self._backoff_parts(
                    [key],
                    CcrError("CORRUPT_MESSAGE", f"{fp.topic}-{fp.partition}: {exc}"),
                    seconds=1.0,
                )
                continue
            with self._cond:
                part = self._parts.get(key)
                if part is None or part.version != version or part.fetch_offset != offset:
                    continue
                part.fetch_offset = next_offset
                part.last_error = ""
                if msgs:
                    part.buffer.extend(msgs)
                    if key not in self._ready:
                        self._ready.append(key)
        return True

    # ------------------------------------------------------------------ close

    def close(self) -> None:
        """Commits (auto-commit), revokes, leaves the group, stops the background
        thread and closes the channel. Bounded; a second call does nothing."""
        if self._closed:
            return
        try:
            if self._subscription is not None:
                self._stop_thread()
                try:
                    self._revoke_now(call_callback=True)
                finally:
                    self._leave_group()
            else:
                self._stop_thread()
                try:
                    self._auto_commit_now()
                except CcrError:
                    pass
        finally:
            self._closed = True
            self._conn.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _revoke_now(self, call_callback: bool) -> None:
        with self._lock:
            partitions = sorted(TopicPartition(t, p) for t, p in self._parts)
        try:
            self._auto_commit_now()
        except CcrError:
            pass
        if call_callback and partitions and self._on_revoke is not None and self._joined:
            self._on_revoke(self, partitions)
        with self._cond:
            self._clear_assignment_locked()
            self._joined = False

    def _leave_group(self) -> None:
        with self._lock:
            member = self._member_id
            self._member_id = ""
            self._generation = -1
        if not member:
            return
        try:
            self._conn.call(
                self._conn.cluster.LeaveGroup,
                cluster_pb2.LeaveGroupRequest(group_id=self._group_id, member_id=member),
                min(self._request_timeout_s, 5.0),
            )
        except CcrError:
            pass

    # ------------------------------------------------------------------ background thread

    def _run(self) -> None:
        next_heartbeat = time.monotonic() + self._heartbeat_s
        next_commit = time.monotonic() + self._auto_commit_s
        next_metadata = time.monotonic() + self._metadata_age_s
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                subscribed = self._subscription is not None
                if subscribed and not self._poll_expired:
                    if now - self._last_poll > self._max_poll_ms / 1000.0 and self._joined:
                        # The application stopped polling: leave, rejoin on its next poll.
                        self._poll_expired = True
                        self._error_event(
                            CcrError(
                                "MAX_POLL_EXCEEDED",
                                "poll() not called within max.poll.interval.ms; left the group",
                            )
                        )
                        self._revoke_lost()
                        self._leave_group()
                        continue
                    if not self._joined or self._rejoin:
                        self._rebalance()
                        next_heartbeat = time.monotonic() + self._heartbeat_s
                        next_metadata = time.monotonic() + self._metadata_age_s
                        continue
                    if now >= next_heartbeat:
                        self._heartbeat()
                        next_heartbeat = time.monotonic() + self._heartbeat_s
                    if now >= next_metadata:
                        self._check_metadata()
                        next_metadata = time.monotonic() + self._metadata_age_s
                if now >= next_commit:
                    self._auto_commit_now()
                    next_commit = time.monotonic() + self._auto_commit_s
                wake_at = min(next_heartbeat if subscribed else next_commit, next_commit)
                self._wake.wait(max(0.005, min(wake_at - time.monotonic(), 0.5)))
                self._wake.clear()
            except Exception as exc:  # keep the member alive; report
                err = exc if isinstance(exc, CcrError) else CcrError("UNKNOWN", repr(exc))
                self._error_event(err)
                self._stop.wait(1.0)

    def _revoke_lost(self) -> None:
        with self._lock:
            partitions = sorted(TopicPartition(t, p) for t, p in self._parts)
            self._joined = False
        if partitions:
            with self._cond:
                self._events.append(_Event("revoke", partitions))
                self._cond.notify_all()

    def _call_bounded(self, rpc: Any, request: Any, timeout_s: float) -> Any:
        """A call the stop event can interrupt. Returns the response or a CcrError."""
        try:
            fut = self._conn.future(rpc, request, timeout_s)
        except CcrError as exc:
            return exc
        self._inflight_call = fut
        try:
            while True:
                if self._stop.is_set():
                    fut.cancel()
                    return CcrError("CLOSED", "the consumer is closing")
                try:
                    return fut.result(timeout=0.1)
                except grpc.FutureTimeoutError:
                    continue
                except grpc.FutureCancelledError:
                    return CcrError("CANCELLED", "call cancelled", retriable=True)
                except grpc.RpcError as exc:
                    return self._conn.error(exc)
        finally:
            self._inflight_call = None

    def _heartbeat(self) -> None:
        with self._lock:
            req = cluster_pb2.HeartbeatRequest(
                group_id=self._group_id, generation_id=self._generation, member_id=self._member_id
            )
        result = self._call_bounded(
            self._conn.cluster.Heartbeat,
            req,
            min(self._request_timeout_s, self._session_ms / 1000.0),
        )
        if isinstance(result, CcrError):
            self._on_group_error(result)

    def _on_group_error(self, err: CcrError) -> None:
        with self._lock:
            if err.code == "REBALANCE_IN_PROGRESS":
                self._rejoin = True
            elif err.code == "UNKNOWN_MEMBER_ID":
                self._member_id = ""
                self._generation = -1
                self._rejoin = True
            elif err.code == "ILLEGAL_GENERATION":
                self._rejoin = True
            elif err.code in ("CLOSED", "CANCELLED"):
                return
        if not err.retriable and err.code not in (
            "REBALANCE_IN_PROGRESS",
            "UNKNOWN_MEMBER_ID",
            "ILLEGAL_GENERATION",
        ):
            self._error_event(err)

    def _subscribed_topics(self) -> list[str]:
        subscription = list(self._subscription or [])
        if not any(t.startswith("^") for t in subscription):
            return sorted(set(subscription))
        names = [t for t in subscription if not t.startswith("^")]
        patterns = [re.compile(t) for t in subscription if t.startswith("^")]
        try:
            resp = self._conn.call(
                self._conn.cluster.ListTopics, cluster_pb2.ListTopicsRequest(include_internal=False)
            )
            existing = [t.name for t in resp.topics]
        except CcrError:
            existing = list(self._resolved_topics)
        for name in existing:
            if any(p.match(name) for p in patterns):
                names.append(name)
        return sorted(set(names))

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for topic in sorted(set(topics)):
            try:
                desc = self._conn.call(
                    self._conn.cluster.DescribeTopic, cluster_pb2.DescribeTopicRequest(name=topic)
                )
            except CcrError:
                continue
            counts[topic] = desc.partition_count or len(desc.partitions)
        return counts

    def _check_metadata(self) -> None:
        """Rejoins when the subscribed topics changed (new regex matches, or, on
        the leader, new partitions), as Kafka's consumers do."""
        topics = self._subscribed_topics()
        changed = topics != self._resolved_topics
        if not changed and self._topics_seen:
            counts = self._partition_counts(self._topics_seen)
            changed = any(counts.get(t, 0) != n for t, n in self._topics_seen.items())
        if changed:
            with self._lock:
                self._rejoin = True

    def _wait_revoked(self, partitions: list[TopicPartition]) -> None:
        """Hands the revocation to the caller's poll (so on_revoke can commit) and
        waits for it, heartbeating, bounded by max.poll.interval.ms."""
        event = _Event("revoke", partitions)
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()
        deadline = time.monotonic() + self._max_poll_ms / 1000.0
        next_heartbeat = time.monotonic() + self._heartbeat_s
        while not event.done.wait(0.05):
            if self._stop.is_set():
                return
            now = time.monotonic()
            if now >= deadline:
                with self._cond:
                    try:
                        self._events.remove(event)
                    except ValueError:
                        pass
                    self._clear_assignment_locked()
                return
            if now >= next_heartbeat and self._member_id:
                self._heartbeat()
                next_heartbeat = time.monotonic() + self._heartbeat_s

    def _rebalance(self) -> None:
        """Revoke, JoinGroup, (assign if leader), SyncGroup."""
        with self._lock:
            had = sorted(TopicPartition(t, p) for t, p in self._parts) if self._joined else []
            self._joined = False
            # An assignment the application has not picked up yet is stale now.
            for stale in [e for e in self._events if e.kind == "assign"]:
                self._events.remove(stale)
                stale.done.set()
        if had:
            if self._on_revoke is not None:
                self._wait_revoked(had)
            else:
                self._auto_commit_now()
                with self._cond:
                    self._clear_assignment_locked()
        backoff = max(self._backoff_s, 0.05)
        while not self._stop.is_set():
            topics = self._subscribed_topics()
            self._resolved_topics = topics
            metadata = encode_subscription(topics)
            with self._lock:
                self._rejoin = False
                req = cluster_pb2.JoinGroupRequest(
                    group_id=self._group_id,
                    member_id=self._member_id,
                    client_id=self._client_id,
                    session_timeout_ms=self._session_ms,
                    rebalance_timeout_ms=self._max_poll_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=[
                        cluster_pb2.GroupProtocol(name=name, metadata=metadata)
                        for name in self._strategies
                    ],
                    group_instance_id=self._instance_id,
                )
            join = self._call_bounded(
                self._conn.cluster.JoinGroup,
                req,
                (self._max_poll_ms + self._session_ms) / 1000.0 + self._request_timeout_s,
            )
            if isinstance(join, CcrError):
                if join.code in ("CLOSED",):
                    return
                if join.code == "UNKNOWN_MEMBER_ID":
                    with self._lock:
                        self._member_id = ""
                        self._generation = -1
                    continue
                if not join.retriable and join.code != "REBALANCE_IN_PROGRESS":
                    self._error_event(join)
                    self._stop.wait(max(1.0, backoff))
                else:
                    self._stop.wait(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            with self._lock:
                self._member_id = join.member_id
                self._generation = join.generation_id
                self._protocol = join.protocol_name
            assignments: list[cluster_pb2.SyncGroupAssignment] = []
            if join.leader_id == join.member_id:
                assignments = self._leader_assign(join)
            sync = self._call_bounded(
                self._conn.cluster.SyncGroup,
                cluster_pb2.SyncGroupRequest(
                    group_id=self._group_id,
                    generation_id=join.generation_id,
                    member_id=join.member_id,
                    assignments=assignments,
                ),
                self._max_poll_ms / 1000.0 + self._request_timeout_s,
            )
            if isinstance(sync, CcrError):
                if sync.code == "CLOSED":
                    return
                if sync.code == "UNKNOWN_MEMBER_ID":
                    with self._lock:
                        self._member_id = ""
                        self._generation = -1
                elif sync.code not in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION"):
                    if not sync.retriable:
                        self._error_event(sync)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 1.0)
                continue
            try:
                assignment = decode_assignment(sync.assignment)
                tps = [TopicPartition(t, p) for t, p in assignment.topic_partitions()]
            except ProtocolError as exc:
                self._error_event(
                    CcrError("INVALID_ASSIGNMENT", f"cannot decode assignment: {exc}")
                )
                tps = []
            with self._cond:
                if self._rejoin:
                    continue  # a heartbeat during the sync saw a new rebalance
                self._joined = True
                self._events.append(_Event("assign", tps, generation=join.generation_id))
                self._cond.notify_all()
            return

    def _leader_assign(
        self, join: cluster_pb2.JoinGroupResponse
    ) -> list[cluster_pb2.SyncGroupAssignment]:
        members: list[MemberSubscription] = []
        for m in join.members:
            try:
                sub = decode_subscription(m.metadata)
            except ProtocolError as exc:
                self._error_event(CcrError("INVALID_SUBSCRIPTION", f"member {m.member_id}: {exc}"))
                continue
            members.append(MemberSubscription(m.member_id, sub, m.group_instance_id))
        all_topics = {t for m in members for t in m.subscription.topics}
        counts = self._partition_counts(all_topics)
        self._topics_seen = dict(counts)
        for t in all_topics:
            self._topics_seen.setdefault(t, 0)
        strategy = join.protocol_name if join.protocol_name in _STRATEGY_ALIASES else "range"
        plan = assign(_STRATEGY_ALIASES[strategy], members, counts)
        return [
            cluster_pb2.SyncGroupAssignment(
                member_id=member_id, assignment=encode_assignment(parts)
            )
            for member_id, parts in sorted(plan.items())
        ]


__all__ = ["Consumer", "GroupMetadata", "decode_fetched"]
