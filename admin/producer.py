"""`Producer`: batches records per partition and appends them over gRPC.

Shaped like confluent-kafka's Producer. `produce()` appends a record to its
partition's open batch (Kafka record batch v2), encoding it there and then, so
a batch is ready to send as soon as it is sealed: when it reaches `batch.size`
bytes (in produce()) or has waited `linger.ms` (in the background sender
thread). The sender puts a header on each sealed batch and sends it as one
`Produce` call using gRPC's future API, so batches of many partitions are in
flight at once. Delivery reports are queued and served by
`poll()` / `flush()` on the caller's thread, as in confluent-kafka.

Ordering: at most one batch per partition is in flight. Separate gRPC calls
are not ordered with one another (each is its own HTTP/2 stream, served by a
server thread pool), so pipelining batches of one partition could reorder
them; with one in flight, a partition's batches land in produce order, across
retries too. Batches of different partitions go out concurrently. Retries of
a batch reuse its producer id, epoch and sequence numbers, so with idempotence
(the default) a retry of a batch that was in fact written is answered
`duplicate=true` and reported once, at its original offset.

Config (confluent-kafka names):
    bootstrap.servers          HOST:PORT of the cluster
    acks                       0, 1, -1 / "all" (default all)
    linger.ms                  default 5
    batch.size                 bytes per batch, default 262144 (256 KiB): larger
                               than Kafka's 16 KiB because every batch costs one
                               gRPC round trip and one batch is in flight per
                               partition; still well below the default topic
                               max.message.bytes (1 MiB)
    enable.idempotence         default True (unless acks is set to 0 or 1 without
                               naming enable.idempotence, as the Java client does)
    transactional.id           makes the producer transactional
    transaction.timeout.ms     default 60000
    partitioner                murmur2_random (default: Kafka's murmur2 for keys,
                               sticky round robin for null keys), murmur2,
                               consistent_random, consistent, random
    delivery.timeout.ms        default 120000: a record not acknowledged by then
                               fails
    request.timeout.ms         default 30000: the deadline of one call
    retry.backoff.ms           default 100 (doubling up to retry.backoff.max.ms 1000)
    max.in.flight              default 5; accepted for compatibility (per
                               partition one batch is in flight, see above)
    queue.buffering.max.messages  default 100000 (produce raises BufferError beyond)
    queue.buffering.max.kbytes    default 1048576 (1 GiB): the records not yet
                               delivered, by size; produce raises BufferError beyond
                               (the client holds about twice that much: each record
                               and its encoded form, until the record is delivered)
    message.max.bytes          default 1000000: a larger record is refused at once
    on_delivery                default delivery callback
    security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location,
    sasl.mechanism, sasl.username, sasl.password   a secured cluster (admin/security.py)
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from admin.client import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Config,
    Connection,
    HeaderInput,
    HeaderList,
    Message,
    TopicPartition,
    bootstrap_of,
    config_bool,
    config_int,
    config_str,
    normalize_config,
    result_of,
    to_bytes,
    to_headers,
)
from admin.errors import CcrError, is_fatal_producer_code
from admin.security import security_of
from ccr.v1 import cluster_pb2
from linkd.core.records import TRANSACTIONAL_FLAG, assemble_batch, record_bytes

DeliveryCallback = Callable[[CcrError | None, Message], Any]

_M32 = 0xFFFFFFFF
_SEQ_MOD = 1 << 31
_MURMUR_SEED = 0x9747B28C
_MURMUR_M = 0x5BD1E995

# Approximate per-record bytes beyond key/value/headers in a batch v2.
_RECORD_OVERHEAD = 21
# The headers of every record produced without any. An empty tuple, not a
# list per record: it costs no allocation, and a record tuple holding only
# bytes, ints, None and () is untracked by the garbage collector, whose passes
# over hundreds of thousands of buffered records cost about a tenth of
# produce()'s time.
_NO_HEADERS: tuple[()] = ()
_PARTITIONERS = ("murmur2_random", "murmur2", "consistent_random", "consistent", "random")


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (seed 0x9747b28c): the signed 32-bit hash."""
    length = len(data)
    h = (_MURMUR_SEED ^ length) & _M32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _MURMUR_M) & _M32
        k ^= k >> 24
        k = (k * _MURMUR_M) & _M32
        h = (h * _MURMUR_M) & _M32
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _MURMUR_M) & _M32
    h ^= h >> 13
    h = (h * _MURMUR_M) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: n & 0x7fffffff."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's murmur2) picks."""
    return to_positive(murmur2(key)) % num_partitions


def record_size(key: bytes | None, value: bytes | None, headers: HeaderList | tuple[()]) -> int:
    """A record's size as batch.size and message.max.bytes count it (about its
    encoded size in a batch)."""
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, hvalue in headers:
        size += len(name) + (len(hvalue) if hvalue else 0) + 4
    return size


# Produce calls one producer has in flight at once (see `_plan_locked`).
MAX_CALLS_IN_FLIGHT = 512

# One record as produced: (key, value, headers, timestamp, on_delivery). A plain
# tuple, since produce() makes one per record and a tuple costs least.
_Record = tuple[bytes | None, bytes | None, HeaderList | tuple[()], int, DeliveryCallback | None]


@dataclass(eq=False, slots=True)
class _Batch:
    """Records of one partition that go out as one record batch. produce()
    appends to the partition's open batch and encodes each record as it comes
    (its offset and timestamp deltas are known then), so sending joins the
    encoded records and puts a header on them."""

    topic: str
    partition: int
    base_timestamp: int
    enqueued: float  # when the first record was appended (linger.ms, expiry)
    deadline: float
    records: list[_Record] = field(default_factory=list)
    encoded: list[bytes] = field(default_factory=list)
    callbacks: bool = False  # whether any record has a delivery callback
    size: int = 0  # estimated bytes, as batch.size counts them
    max_timestamp: int = -1
    pid: int = -1
    epoch: int = -1
    base_sequence: int = -1
    data: bytes | None = None
    build_args: tuple[int, int, int, bool] = (-1, -1, -1, False)
    attempts: int = 0
    sending: bool = False
    retry_at: float = 0.0
    last_error: CcrError | None = None
    maybe_written: bool = False

    def append(self, record: _Record, size: int) -> None:
        """Adds one record (the caller holds the producer's lock)."""
        key, value, headers, ts, _ = record
        self.encoded.append(
            record_bytes(len(self.records), ts - self.base_timestamp, key, value, headers)
        )
        self.records.append(record)
        if record[4] is not None:
            self.callbacks = True
        self.size += size
        if ts > self.max_timestamp:
            self.max_timestamp = ts

    def build(self) -> bytes:
        """The batch v2 with the producer id, epoch and sequence of build_args."""
        pid, epoch, sequence, transactional = self.build_args
        n = len(self.records)
        return assemble_batch(
            b"".join(self.encoded),
            attributes=TRANSACTIONAL_FLAG if transactional else 0,
            record_count=n,
            last_offset_delta=n - 1,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
        )


@dataclass(eq=False, slots=True)
class _Partition:
    topic: str
    partition: int
    # The batch produce() appends to, then batches sealed (full, or lingered
    # while one was in flight) that wait their turn, then the one in flight or
    # waiting for a retry: a partition's batches go out in this order.
    open: _Batch | None = None
    sealed: deque[_Batch] = field(default_factory=deque)
    batch: _Batch | None = None
    seq_owner: tuple[int, int] = (-1, -1)
    next_sequence: int = 0


@dataclass(eq=False)
class _Report:
    callback: DeliveryCallback | None
    error: CcrError | None
    message: Message


@dataclass(eq=False)
class _BatchReport:
    """A whole batch acknowledged at base_offset (records in offset order)."""

    topic: str
    partition: int
    records: list[_Record]
    base_offset: int
    append_time: int
    callbacks: bool

    def serve(self) -> None:
        if not self.callbacks:
            return
        for i, (key, value, headers, timestamp, callback) in enumerate(self.records):
            if callback is None:
                continue
            ts = (
                (TIMESTAMP_LOG_APPEND_TIME, self.append_time)
                if self.append_time >= 0
                else (TIMESTAMP_CREATE_TIME, timestamp)
            )
            callback(
                None,
                Message(
                    self.topic,
                    self.partition,
                    self.base_offset + i,
                    key,
                    value,
                    headers or None,
                    ts,
                ),
            )


# Transaction states.
_UNINITIALIZED = "UNINITIALIZED"
_READY = "READY"
_IN_TXN = "IN_TRANSACTION"
_COMMITTING = "COMMITTING"
_ABORTING = "ABORTING"
_FATAL = "FATAL"


class Producer:
    """Sends records to one cluster; see the module docstring for the config."""

    def __init__(self, config: Config | str | None = None, **kwargs: Any) -> None:
        conf = normalize_config(config, "Producer")
        conf.update(kwargs)
        self._request_timeout_ms = config_int(conf, "request.timeout.ms", 30000, 1)
        self._conn = Connection(
            bootstrap_of(conf), self._request_timeout_ms / 1000.0, security_of(conf)
        )
        self._client_id = config_str(conf, "client.id", "ccr-python-producer")

        acks_raw = str(conf.get("acks", conf.get("request.required.acks", "all"))).strip().lower()
        acks_map = {"all": -1, "-1": -1, "0": 0, "1": 1}
        if acks_raw not in acks_map:
            raise ValueError(f"config acks must be 0, 1, -1 or all, got {acks_raw!r}")
        self._acks = acks_map[acks_raw]
        self._txid = config_str(conf, "transactional.id", "")
        if "enable.idempotence" in conf:
            self._idempotent = config_bool(conf, "enable.idempotence", True)
            if self._idempotent and self._acks != -1:
                raise ValueError("enable.idempotence=true requires acks=all")
        else:
            self._idempotent = self._acks == -1
        if self._txid:
            if not self._idempotent:
                raise ValueError("transactional.id requires enable.idempotence=true and acks=all")
        self._txn_timeout_ms = config_int(conf, "transaction.timeout.ms", 60000, 1)
        self._linger_s = config_int(conf, "linger.ms", 5, 0) / 1000.0
        self._batch_size = config_int(conf, "batch.size", 262144, 1)
        self._delivery_timeout_s = config_int(conf, "delivery.timeout.ms", 120000, 1) / 1000.0
        self._backoff_s = config_int(conf, "retry.backoff.ms", 100, 0) / 1000.0
        self._backoff_max_s = max(
            self._backoff_s, config_int(conf, "retry.backoff.max.ms", 1000, 0) / 1000.0
        )
        max_in_flight = config_int(
            conf,
            "max.in.flight",
            config_int(conf, "max.in.flight.requests.per.connection", 5, 1),
            1,
        )
        self._max_in_flight = max_in_flight
        self._max_messages = config_int(conf, "queue.buffering.max.messages", 100000, 1)
        self._max_buffered_bytes = 1024 * config_int(conf, "queue.buffering.max.kbytes", 1048576, 1)
        self._max_message_bytes = config_int(conf, "message.max.bytes", 1000000, 1)
        self._metadata_max_age_s = config_int(conf, "metadata.max.age.ms", 60000, 0) / 1000.0
        self._partitioner = config_str(conf, "partitioner", "murmur2_random")
        if self._partitioner not in _PARTITIONERS:
            raise ValueError(
                f"config partitioner must be one of {', '.join(_PARTITIONERS)}, "
                f"got {self._partitioner!r}"
            )
        default_cb = conf.get("on_delivery", conf.get("delivery.report.callback"))
        if default_cb is not None and not callable(default_cb):
            raise TypeError("on_delivery must be callable")
        self._default_cb: DeliveryCallback | None = default_cb

        # produce() takes the lock directly (Condition.__enter__ is a Python-level
        # wrapper, measurable at a few hundred thousand records a second).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._reports: deque[_Report | _BatchReport] = deque()
        self._undelivered = 0  # records produced and not yet reported
        self._buffered_bytes = 0  # their sizes (record_size), while not delivered
        self._sending = 0  # Produce calls in flight
        self._flushing = 0
        self._closed = False
        self._stop = False
        self._pid = -1
        self._epoch = -1
        self._pid_ready = not self._idempotent or bool(self._txid)
        self._pid_retry_at = 0.0
        self._pid_failures = 0
        self._metadata: dict[str, tuple[int, float]] = {}
        self._sticky: dict[str, int] = {}
        # Transactions.
        self._txn_state = _UNINITIALIZED if self._txid else _READY
        self._txn_partitions: set[tuple[str, int]] = set()
        self._txn_started = False
        self._txn_error: CcrError | None = None
        self._fatal_error: CcrError | None = None
        self._txn_needs_bump = False
        self._add_retry_at = 0.0
        self._sender = threading.Thread(
            target=self._run, name=f"ccr-producer-{self._conn.target}", daemon=True
        )
        self._sender.start()

    # ------------------------------------------------------------------ public API

    def __len__(self) -> int:
        """Records not yet delivered plus delivery reports not yet served."""
        with self._cond:
            return self._undelivered + self._reported_locked()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: HeaderInput = None,
        partition: int = -1,
        timestamp: int = 0,
        on_delivery: DeliveryCallback | None = None,
        callback: DeliveryCallback | None = None,
    ) -> None:
        """Queues one record. Raises BufferError when the queue is full (serve
        deliveries with poll() and retry), CcrError when the topic is unknown (with
        partition=-1) or the producer / transaction cannot accept records."""
        if self._closed:
            raise CcrError("CLOSED", "the producer is closed")
        if topic.__class__ is not str or not topic:
            if not isinstance(topic, str) or not topic:
                raise TypeError("topic must be a non-empty str")
        # bytes pass through; anything else is converted or refused by to_bytes.
        key_b = key if key is None or key.__class__ is bytes else to_bytes(key, "key")
        value_b = value if value.__class__ is bytes else to_bytes(value, "value")
        size = _RECORD_OVERHEAD + (len(key_b) if key_b else 0) + (len(value_b) if value_b else 0)
        header_list: HeaderList | tuple[()]
        if headers:
            header_list = to_headers(headers)
            size += sum(len(n) + (len(v) if v else 0) + 4 for n, v in header_list)
        else:
            header_list = _NO_HEADERS
        ts = int(timestamp) if timestamp else int(time.time() * 1000)
        if size > self._max_message_bytes:
            raise CcrError(
                "RECORD_TOO_LARGE",
                f"record of about {size} bytes exceeds message.max.bytes {self._max_message_bytes}",
                resource=f"topic {topic}",
            )
        cb = on_delivery or callback or self._default_cb
        record = (key_b, value_b, header_list, ts, cb)
        if partition is None or partition < 0:
            self._check_can_send()
            partition = self._choose_partition(topic, key_b)
        with self._lock:
            if self._fatal_error is not None or self._txid:
                self._check_can_send()
            if self._undelivered >= self._max_messages:
                raise BufferError(
                    f"Local: Queue full ({self._undelivered} records waiting; serve deliveries "
                    "with poll() and retry)"
                )
            if self._buffered_bytes + size > self._max_buffered_bytes and self._undelivered:
                raise BufferError(
                    f"Local: Queue full ({self._buffered_bytes} bytes of records waiting, "
                    f"queue.buffering.max.kbytes is {self._max_buffered_bytes // 1024}; serve "
                    "deliveries with poll() and retry)"
                )
            part = self._parts.get((topic, partition))
            if part is None:
                part = _Partition(topic, partition)
                self._parts[(topic, partition)] = part
            batch = part.open
            if batch is None or batch.size + size > self._batch_size:
                batch = self._open_batch_locked(part, ts)
            # Batch.append, inlined: this runs once per record.
            records = batch.records
            batch.encoded.append(
                record_bytes(len(records), ts - batch.base_timestamp, key_b, value_b, header_list)
            )
            records.append(record)
            if cb is not None:
                batch.callbacks = True
            batch.size += size
            if ts > batch.max_timestamp:
                batch.max_timestamp = ts
            self._undelivered += 1
            self._buffered_bytes += size

    def poll(self, timeout: float | None = None) -> int:
        """Serves queued delivery callbacks; waits up to `timeout` seconds for one
        (None or negative: until one arrives or nothing is pending). Returns the
        number of reports served."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            while not self._reports:
                if self._undelivered == 0 or self._stop:
                    break
                left = 0.2 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.2))
            reports = list(self._reports)
            self._reports.clear()
        served = 0
        for report in reports:
            if isinstance(report, _BatchReport):
                report.serve()
                served += len(report.records)
            else:
                served += 1
                if report.callback is not None:
                    report.callback(report.error, report.message)
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Sends everything now (ignoring linger.ms) and waits for the deliveries,
        serving callbacks. Returns the number of records still pending (0 when
        all were delivered or failed). None waits as long as records can still
        succeed (bounded by delivery.timeout.ms)."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
        try:
            while True:
                self.poll(0)
                with self._cond:
                    pending = self._undelivered + self._reported_locked()
                    if pending == 0:
                        return 0
                    if self._stop:
                        return pending
                    left = 0.2 if deadline is None else deadline - time.monotonic()
                    if left <= 0:
                        return pending
                    if not self._reports:
                        self._cond.wait(min(left, 0.2))
        finally:
            with self._cond:
                self._flushing -= 1

    def purge(self) -> None:
        """Fails every record not yet sent (error PURGED)."""
        with self._cond:
            self._purge_locked(CcrError("PURGED", "record purged before it was sent"))

    def close(self, timeout: float | None = None) -> int:
        """Flushes (up to `timeout`, default delivery.timeout.ms), stops the sender
        thread and closes the channel. Returns the records left undelivered."""
        if self._closed:
            return 0
        remaining = self.flush(self._delivery_timeout_s if timeout is None else timeout)
        with self._cond:
            self._closed = True
            if remaining:
                self._purge_locked(CcrError("CLOSED", "producer closed before the record was sent"))
            self._stop = True
            self._cond.notify_all()
        self._sender.join(timeout=5.0)
        self._conn.close()
        return remaining

    # --- Transactions -------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Registers transactional.id with the cluster (fencing older producers
        with the same id) and gets a producer id and epoch."""
        if not self._txid:
            raise CcrError("INVALID_TXN_STATE", "init_transactions needs transactional.id")
        with self._cond:
            if self._txn_state not in (_UNINITIALIZED, _READY):
                raise CcrError(
                    "INVALID_TXN_STATE",
                    f"init_transactions is not allowed in state {self._txn_state}",
                )
        resp = self._retrying(
            lambda t: self._conn.call(
                self._conn.cluster.InitProducerId,
                cluster_pb2.InitProducerIdRequest(
                    transactional_id=self._txid,
                    transaction_timeout_ms=self._txn_timeout_ms,
                    producer_id=-1,
                    producer_epoch=-1,
                ),
                t,
            ),
            timeout,
        )
        with self._cond:
            self._pid = resp.producer_id
            self._epoch = resp.producer_epoch
            self._pid_ready = True
            self._txn_state = _READY
            self._fatal_error = None

    def begin_transaction(self) -> None:
        if not self._txid:
            raise CcrError("INVALID_TXN_STATE", "begin_transaction needs transactional.id")
        with self._cond:
            self._raise_fatal()
            if self._txn_state != _READY:
                raise CcrError(
                    "INVALID_TXN_STATE",
                    f"begin_transaction is not allowed in state {self._txn_state}"
                    + (
                        " (call init_transactions first)"
                        if self._txn_state == _UNINITIALIZED
                        else ""
                    ),
                )
            self._txn_state = _IN_TXN
            self._txn_partitions = set()
            self._txn_started = False
            self._txn_error = None

    def send_offsets_to_transaction(
        self,
        offsets: Iterable[TopicPartition],
        group_metadata: Any,
        timeout: float | None = None,
    ) -> None:
        """Adds consumer offsets to the transaction: they become the group's
        committed offsets only if the transaction commits. `group_metadata` comes
        from `consumer.consumer_group_metadata()` (or is a group id string)."""
        offsets = list(offsets)
        if isinstance(group_metadata, str):
            group_id, generation, member_id = group_metadata, -1, ""
        else:
            group_id = str(group_metadata.group_id)
            generation = int(getattr(group_metadata, "generation_id", -1))
            member_id = str(getattr(group_metadata, "member_id", ""))
        with self._cond:
            self._check_txn_open("send_offsets_to_transaction")
        for tp in offsets:
            if tp.offset < 0:
                raise ValueError(
                    f"offset of {tp.topic}-{tp.partition} must be >= 0, got {tp.offset}"
                )
        try:
            self._retrying(
                lambda t: self._conn.call(
                    self._conn.cluster.AddOffsetsToTxn,
                    cluster_pb2.AddOffsetsToTxnRequest(
                        transactional_id=self._txid,
                        producer_id=self._pid,
                        producer_epoch=self._epoch,
                        group_id=group_id,
                    ),
                    t,
                ),
                timeout,
            )
            with self._cond:
                self._txn_started = True
            self._retrying(
                lambda t: self._conn.call(
                    self._conn.cluster.TxnOffsetCommit,
                    cluster_pb2.TxnOffsetCommitRequest(
                        transactional_id=self._txid,
                        group_id=group_id,
                        producer_id=self._pid,
                        producer_epoch=self._epoch,
                        generation_id=generation,
                        member_id=member_id,
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
                    ),
                    t,
                ),
                timeout,
            )
        except CcrError as exc:
            raise self._txn_failure(exc) from None

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flushes every record of the transaction, then commits it. Raises
        CcrError with txn_requires_abort=True when a record of the transaction
        failed (call abort_transaction), retriable=True on a timeout (call
        commit_transaction again)."""
        if not self._txid:
            raise CcrError("INVALID_TXN_STATE", "commit_transaction needs transactional.id")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._raise_fatal()
            if self._txn_state not in (_IN_TXN, _COMMITTING):
                raise CcrError(
                    "INVALID_TXN_STATE",
                    f"commit_transaction is not allowed in state {self._txn_state}",
                )
            self._txn_state = _COMMITTING
        remaining = self.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if remaining:
            raise CcrError(
                "TIMED_OUT",
                f"{remaining} records of the transaction are not delivered yet; "
                "call commit_transaction again",
                retriable=True,
            )
        with self._cond:
            self._raise_fatal()
            if self._txn_error is not None:
                raise self._txn_error.with_flags(txn_requires_abort=True)
            started = self._txn_started
        if started:
            left = None if deadline is None else max(0.001, deadline - time.monotonic())
            try:
                self._end_txn(True, left)
            except CcrError as exc:
                if exc.retriable:
                    raise
                raise self._txn_failure(exc) from None
        with self._cond:
            self._txn_state = _READY
            self._txn_partitions = set()
            self._txn_started = False

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drops the records not sent yet (their reports fail with
        TRANSACTION_ABORTED), waits for those in flight, and aborts."""
        if not self._txid:
            raise CcrError("INVALID_TXN_STATE", "abort_transaction needs transactional.id")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._raise_fatal()
            if self._txn_state not in (_IN_TXN, _COMMITTING, _ABORTING):
                raise CcrError(
                    "INVALID_TXN_STATE",
                    f"abort_transaction is not allowed in state {self._txn_state}",
                )
            self._txn_state = _ABORTING
            self._purge_locked(
                CcrError("TRANSACTION_ABORTED", "record purged: the transaction was aborted")
            )
            while self._sending:
                left = 0.2 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise CcrError(
                        "TIMED_OUT",
                        "records of the transaction are still in flight",
                        retriable=True,
                    )
                self._cond.wait(min(left, 0.2))
            started = self._txn_started
            needs_bump = self._txn_needs_bump
        end_left = None if deadline is None else max(0.001, deadline - time.monotonic())
        if started:
            try:
                self._end_txn(False, end_left)
            except CcrError as exc:
                if exc.retriable:
                    raise
                raise self._txn_failure(exc) from None
        if needs_bump:
            # A batch of the aborted transaction may or may not have been written:
            # bump the epoch so sequences restart cleanly.
            resp = self._retrying(
                lambda t: self._conn.call(
                    self._conn.cluster.InitProducerId,
                    cluster_pb2.InitProducerIdRequest(
                        transactional_id=self._txid,
                        transaction_timeout_ms=self._txn_timeout_ms,
                        producer_id=self._pid,
                        producer_epoch=self._epoch,
                    ),
                    t,
                ),
                end_left,
            )
            with self._cond:
                self._pid, self._epoch = resp.producer_id, resp.producer_epoch
                self._txn_needs_bump = False
        with self._cond:
            self._txn_state = _READY
            self._txn_partitions = set()
            self._txn_started = False
            self._txn_error = None

    # ------------------------------------------------------------------ internals

    def _check_can_send(self) -> None:
        if self._fatal_error is not None:
            raise self._fatal_error
        if self._txid:
            if self._txn_state != _IN_TXN:
                raise CcrError(
                    "INVALID_TXN_STATE",
                    f"a transactional producer can only produce inside a transaction "
                    f"(state {self._txn_state}; call begin_transaction)",
                )
            if self._txn_error is not None:
                raise self._txn_error.with_flags(txn_requires_abort=True)

    def _check_txn_open(self, what: str) -> None:
        if not self._txid:
            raise CcrError("INVALID_TXN_STATE", f"{what} needs transactional.id")
        self._raise_fatal()
        if self._txn_state != _IN_TXN:
            raise CcrError("INVALID_TXN_STATE", f"{what} is not allowed in state {self._txn_state}")
        if self._txn_error is not None:
            raise self._txn_error.with_flags(txn_requires_abort=True)

    def _raise_fatal(self) -> None:
        if self._fatal_error is not None:
            raise self._fatal_error

    def _txn_failure(self, exc: CcrError) -> CcrError:
        """Records a failed transactional call: fatal (fenced) or abortable."""
        with self._cond:
            if is_fatal_producer_code(exc.code):
                self._fatal_error = exc.with_flags(fatal=True)
                self._txn_state = _FATAL
                return self._fatal_error
            err = exc.with_flags(txn_requires_abort=True)
            if self._txn_state in (_IN_TXN, _COMMITTING):
                self._txn_error = self._txn_error or err
            return err

    def _end_txn(self, commit: bool, timeout: float | None) -> None:
        self._retrying(
            lambda t: self._conn.call(
                self._conn.cluster.EndTxn,
                cluster_pb2.EndTxnRequest(
                    transactional_id=self._txid,
                    producer_id=self._pid,
                    producer_epoch=self._epoch,
                    commit=commit,
                ),
                t,
            ),
            timeout,
        )

    def _retrying(self, fn: Callable[[float], Any], timeout: float | None) -> Any:
        """Calls fn(per-call timeout) until it succeeds, fails non-retriably or
        `timeout` (default request.timeout.ms... at least one try) runs out."""
        total = self._request_timeout_ms / 1000.0 if timeout is None else timeout
        deadline = time.monotonic() + total
        backoff = self._backoff_s or 0.05
        while True:
            left = deadline - time.monotonic()
            try:
                return fn(max(0.05, min(left, self._request_timeout_ms / 1000.0)))
            except CcrError as exc:
                left = deadline - time.monotonic()
                if not exc.retriable or left <= backoff:
                    raise
            with self._cond:
                self._cond.wait(backoff)
            backoff = min(backoff * 2, self._backoff_max_s or 1.0)

    def _partition_count(self, topic: str) -> int:
        now = time.monotonic()
        cached = self._metadata.get(topic)
        if cached is not None and now - cached[1] < self._metadata_max_age_s:
            return cached[0]
        desc = self._conn.call(
            self._conn.cluster.DescribeTopic, cluster_pb2.DescribeTopicRequest(name=topic)
        )
        count = max(1, desc.partition_count or len(desc.partitions))
        self._metadata[topic] = (count, now)
        return count

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        count = self._partition_count(topic)
        if key is not None and self._partitioner in ("murmur2_random", "murmur2"):
            return murmur2_partition(key, count)
        if self._partitioner == "murmur2":
            return murmur2_partition(b"", count)
        if key is not None and self._partitioner in ("consistent_random", "consistent"):
            return (zlib.crc32(key) & _M32) % count
        if self._partitioner == "consistent":
            return 0
        if self._partitioner == "random":
            return random.randrange(count)
        with self._cond:
            sticky = self._sticky.get(topic)
            if sticky is None or sticky >= count:
                sticky = random.randrange(count)
                self._sticky[topic] = sticky
            return sticky

    def _advance_sticky_locked(self, topic: str, partition: int) -> None:
        if self._sticky.get(topic) == partition:
            cached = self._metadata.get(topic)
            count = cached[0] if cached else 1
            self._sticky[topic] = (partition + 1) % max(1, count)

    def _reported_locked(self) -> int:
        """Records whose delivery report waits for poll()."""
        return sum(len(r.records) if isinstance(r, _BatchReport) else 1 for r in self._reports)

    def _fail_records_locked(
        self, topic: str, partition: int, records: Iterable[_Record], err: CcrError
    ) -> None:
        at_fault = dict(err.record_errors)
        for index, (key, value, headers, timestamp, callback) in enumerate(records):
            msg = Message(
                topic,
                partition,
                OFFSET_INVALID,
                key,
                value,
                headers or None,
                (TIMESTAMP_CREATE_TIME, timestamp),
                record_error(err, index, at_fault),
            )
            self._reports.append(_Report(callback, msg.error(), msg))
            self._undelivered -= 1
        self._cond.notify_all()

    def _release_locked(self, batch: _Batch) -> None:
        """The batch's records leave the buffer (delivered, failed or re-batched)."""
        self._buffered_bytes -= batch.size

    def _fail_batch_locked(self, part: _Partition, batch: _Batch, err: CcrError) -> None:
        if batch.maybe_written:
            # The outcome of an earlier attempt is unknown: the sequence numbers no
            # longer say what the cluster holds.
            if self._txid:
                self._txn_needs_bump = True
            elif self._idempotent:
                self._pid_ready = False
        if self._txid:
            if is_fatal_producer_code(err.code):
                err = err.with_flags(fatal=True)
                self._fatal_error = err
                self._txn_state = _FATAL
            elif self._txn_state in (_IN_TXN, _COMMITTING):
                err = err.with_flags(txn_requires_abort=True)
                self._txn_error = self._txn_error or err
        if err.code in ("UNKNOWN_PARTITION", "UNKNOWN_TOPIC"):
            self._metadata.pop(part.topic, None)
        if part.batch is batch:
            part.batch = None
        self._release_locked(batch)
        self._fail_records_locked(part.topic, part.partition, batch.records, err)

    def _waiting_locked(self, part: _Partition) -> list[_Batch]:
        """The partition's batches not yet handed to a call, in order."""
        waiting = list(part.sealed)
        if part.open is not None:
            waiting.append(part.open)
        return waiting

    def _purge_locked(self, err: CcrError) -> None:
        for part in self._parts.values():
            batch = part.batch
            if batch is not None and not batch.sending:
                self._fail_batch_locked(part, batch, err)
            waiting = self._waiting_locked(part)
            part.sealed.clear()
            part.open = None
            for batch in waiting:
                self._fail_batch_locked(part, batch, err)
        self._cond.notify_all()

    def _expire_locked(self, now: float) -> None:
        for part in self._parts.values():
            batch = part.batch
            if batch is not None and not batch.sending and now >= batch.deadline:
                last = batch.last_error
                detail = f" (last error {last})" if last else ""
                err = CcrError(
                    last.code if last else "TIMED_OUT",
                    f"batch of {len(batch.records)} records to {part.topic}-{part.partition} "
                    f"not delivered within delivery.timeout.ms{detail}",
                    resource=f"{part.topic}-{part.partition}",
                )
                self._fail_batch_locked(part, batch, err)
            # Waiting batches are in append order: expired ones come first.
            while part.sealed and now >= part.sealed[0].deadline:
                self._expire_waiting_locked(part, part.sealed.popleft())
            if not part.sealed and part.open is not None and now >= part.open.deadline:
                batch, part.open = part.open, None
                self._expire_waiting_locked(part, batch)

    def _expire_waiting_locked(self, part: _Partition, batch: _Batch) -> None:
        self._fail_batch_locked(
            part,
            batch,
            CcrError(
                "TIMED_OUT",
                f"record to {part.topic}-{part.partition} not sent within delivery.timeout.ms",
                resource=f"{part.topic}-{part.partition}",
            ),
        )

    def _open_batch_locked(self, part: _Partition, timestamp: int) -> _Batch:
        """Seals the partition's open batch, if any, and opens a new one."""
        if part.open is not None:
            part.sealed.append(part.open)
            self._advance_sticky_locked(part.topic, part.partition)
        now = time.monotonic()
        batch = _Batch(
            part.topic,
            part.partition,
            base_timestamp=timestamp,
            enqueued=now,
            deadline=now + self._delivery_timeout_s,
            max_timestamp=timestamp,
        )
        part.open = batch
        # The sender learns of a new linger deadline, or of a full batch to send.
        self._cond.notify_all()
        return batch

    def _next_batch_locked(self, part: _Partition, now: float, flushing: bool) -> _Batch | None:
        """The partition's next batch to send, sealing the open one when it has
        lingered long enough (or a flush asks for it); None if none is due."""
        if part.sealed:
            part.batch = part.sealed.popleft()
            return part.batch
        batch = part.open
        if batch is None or not (flushing or now - batch.enqueued >= self._linger_s):
            return None
        part.open = None
        part.batch = batch
        self._advance_sticky_locked(part.topic, part.partition)
        return batch

    def _plan_locked(self, now: float) -> tuple[Callable[[], None] | None, list[_Batch], float]:
        """What the sender does next: an action needing a call, batches to send,
        or the time to look again."""
        wake = now + 0.25
        if self._txid and self._txn_state not in (_IN_TXN, _COMMITTING):
            return None, [], wake
        have_work = any(p.open or p.sealed or p.batch for p in self._parts.values())
        if not have_work:
            return None, [], wake
        if not self._pid_ready:
            if self._sending:
                return None, [], wake
            if now >= self._pid_retry_at:
                return self._init_idempotent_pid, [], wake
            return None, [], min(wake, self._pid_retry_at)
        flushing = self._flushing > 0 or self._stop or self._txn_state == _COMMITTING
        ready: list[_Batch] = []
        missing: list[tuple[str, int]] = []
        for part in self._parts.values():
            batch = part.batch
            if batch is None:
                batch = self._next_batch_locked(part, now, flushing)
                if batch is None:
                    if part.open is not None:
                        wake = min(wake, part.open.enqueued + self._linger_s)
                    continue
            if batch.sending:
                continue
            if batch.retry_at > now:
                wake = min(wake, batch.retry_at)
                continue
            wake = min(wake, batch.deadline)
            if self._txid and (part.topic, part.partition) not in self._txn_partitions:
                missing.append((part.topic, part.partition))
                continue
            ready.append(batch)
        if missing:
            if now >= self._add_retry_at:
                return (lambda: self._add_partitions(missing)), [], wake
            wake = min(wake, self._add_retry_at)
        # A Produce call per batch: past a few thousand calls at once the gRPC
        # channel cancels some, so the rest wait for a call to finish (each
        # finished call wakes this loop).
        ready = ready[: max(0, MAX_CALLS_IN_FLIGHT - self._sending)]
        for batch in ready:
            self._prepare_locked(batch)
        return None, ready, wake

    def _prepare_locked(self, batch: _Batch) -> None:
        part = self._parts[(batch.topic, batch.partition)]
        if self._idempotent and (batch.pid, batch.epoch) != (self._pid, self._epoch):
            owner = (self._pid, self._epoch)
            if part.seq_owner != owner:
                part.seq_owner = owner
                part.next_sequence = 0
            batch.pid, batch.epoch = owner
            batch.base_sequence = part.next_sequence
            batch.data = None
        if batch.data is None:
            # Built by _send, outside the lock (a sealed batch's records are fixed).
            batch.build_args = (
                batch.pid if self._idempotent else -1,
                batch.epoch if self._idempotent else -1,
                batch.base_sequence if self._idempotent else -1,
                bool(self._txid),
            )
        batch.sending = True
        batch.attempts += 1
        self._sending += 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stop and not self._sending:
                        return
                    now = time.monotonic()
                    self._expire_locked(now)
                    action, batches, wake = self._plan_locked(now)
                    if action is not None or batches:
                        break
                    if self._stop:
                        return
                    self._cond.wait(max(0.001, min(wake - now, 0.25)))
            if action is not None:
                try:
                    action()
                except Exception as exc:  # never let the sender thread die
                    with self._cond:
                        self._pid_retry_at = time.monotonic() + 1.0
                        self._add_retry_at = time.monotonic() + 1.0
                        self._purge_locked(CcrError("UNKNOWN", f"producer internal error: {exc!r}"))
            for batch in batches:
                self._send(batch)

    def _send(self, batch: _Batch) -> None:
        if batch.data is None:
            batch.data = batch.build()
        req = cluster_pb2.ProduceRequest(
            topic=batch.topic,
            partition=batch.partition,
            batch=batch.data,
            acks=self._acks,
            transactional_id=self._txid,
            timeout_ms=self._request_timeout_ms,
        )
        try:
            fut = self._conn.future(
                self._conn.cluster.Produce, req, self._request_timeout_ms / 1000.0 + 1.0
            )
        except Exception as exc:
            err = exc if isinstance(exc, CcrError) else CcrError("UNKNOWN", repr(exc))
            self._complete(batch, err)
            return

        def done(f: grpc.Future[cluster_pb2.ProduceResponse]) -> None:
            result: cluster_pb2.ProduceResponse | CcrError = result_of(self._conn, f)
            self._complete(batch, result)

        fut.add_done_callback(done)

    def _complete(self, batch: _Batch, result: cluster_pb2.ProduceResponse | CcrError) -> None:
        with self._cond:
            batch.sending = False
            self._sending -= 1
            self._cond.notify_all()
            part = self._parts[(batch.topic, batch.partition)]
            if part.batch is not batch:
                return
            if isinstance(result, CcrError):
                self._on_batch_error(part, batch, result)
                return
            n = len(batch.records)
            if self._idempotent and part.seq_owner == (batch.pid, batch.epoch):
                part.next_sequence = (batch.base_sequence + n) % _SEQ_MOD
            if self._txid and self._txn_state in (_IN_TXN, _COMMITTING):
                self._txn_started = True
            part.batch = None
            self._release_locked(batch)
            # One report for the whole batch: per-record messages are built in
            # poll(), outside the lock, so produce() is not held up here.
            self._reports.append(
                _BatchReport(
                    batch.topic,
                    batch.partition,
                    batch.records,
                    result.base_offset,
                    result.log_append_time_ms,
                    batch.callbacks,
                )
            )
            self._undelivered -= n

    def _on_batch_error(self, part: _Partition, batch: _Batch, err: CcrError) -> None:
        now = time.monotonic()
        batch.last_error = err
        if err.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL"):
            batch.maybe_written = True
        if (
            err.code == "RECORD_TOO_LARGE"
            and len(batch.records) > 1
            and not batch.maybe_written
            and now < batch.deadline
        ):
            # As Kafka's producer: split the batch, so only the large record fails.
            part.batch = None
            self._release_locked(batch)
            part.sealed.extendleft(
                reversed([self._solo_batch_locked(batch, r) for r in batch.records])
            )
            self._cond.notify_all()
            return
        retry = err.retriable
        if (
            err.code == "UNKNOWN_PRODUCER_ID"
            and self._idempotent
            and not self._txid
            and not batch.maybe_written
        ):
            # The cluster lost this producer's state: start over with a new id.
            self._pid_ready = False
            retry = True
        if err.code == "OUT_OF_ORDER_SEQUENCE_NUMBER" and self._idempotent and not self._txid:
            self._pid_ready = False
        if self._stop and self._closed:
            retry = False
        if self._txid and self._txn_state not in (_IN_TXN, _COMMITTING):
            retry = False
        if retry and now < batch.deadline:
            backoff = min(self._backoff_max_s, self._backoff_s * (2 ** min(batch.attempts - 1, 10)))
            batch.retry_at = now + backoff
            return
        self._fail_batch_locked(part, batch, err)

    def _solo_batch_locked(self, batch: _Batch, record: _Record) -> _Batch:
        """A batch of one record of `batch`, with the same deadline."""
        key, value, headers, timestamp, _ = record
        solo = _Batch(
            batch.topic,
            batch.partition,
            base_timestamp=timestamp,
            enqueued=batch.enqueued,
            deadline=batch.deadline,
            max_timestamp=timestamp,
        )
        size = record_size(key, value, headers)
        solo.append(record, size)
        self._buffered_bytes += size
        return solo

    def _init_idempotent_pid(self) -> None:
        try:
            resp = self._conn.call(
                self._conn.cluster.InitProducerId,
                cluster_pb2.InitProducerIdRequest(
                    transactional_id="",
                    transaction_timeout_ms=self._txn_timeout_ms,
                    producer_id=-1,
                    producer_epoch=-1,
                ),
            )
        except CcrError as exc:
            with self._cond:
                self._pid_failures += 1
                now = time.monotonic()
                self._pid_retry_at = now + min(
                    self._backoff_max_s, self._backoff_s * (2 ** min(self._pid_failures, 10))
                )
                if exc.code in ("UNSUPPORTED", "UNIMPLEMENTED"):
                    # A cluster without idempotence: send plain batches.
                    self._idempotent = False
                    self._pid_ready = True
                elif not exc.retriable:
                    self._purge_locked(exc)
                self._cond.notify_all()
            return
        with self._cond:
            self._pid, self._epoch = resp.producer_id, resp.producer_epoch
            self._pid_ready = True
            self._pid_failures = 0
            self._cond.notify_all()

    def _add_partitions(self, tps: list[tuple[str, int]]) -> None:
        try:
            self._conn.call(
                self._conn.cluster.AddPartitionsToTxn,
                cluster_pb2.AddPartitionsToTxnRequest(
                    transactional_id=self._txid,
                    producer_id=self._pid,
                    producer_epoch=self._epoch,
                    partitions=[cluster_pb2.TopicPartition(topic=t, partition=p) for t, p in tps],
                ),
            )
        except CcrError as exc:
            with self._cond:
                if exc.retriable:
                    self._add_retry_at = time.monotonic() + max(self._backoff_s, 0.02)
                else:
                    for t, p in tps:
                        part = self._parts[(t, p)]
                        if part.batch is not None and not part.batch.sending:
                            self._fail_batch_locked(part, part.batch, exc)
                self._cond.notify_all()
            return
        with self._cond:
            self._txn_partitions.update(tps)
            self._txn_started = True
            self._cond.notify_all()


def record_error(err: CcrError, index: int, at_fault: dict[int, str]) -> CcrError:
    """What one record of a refused batch is told (KIP-467, as librdkafka
    tells it): a record the cluster named gets the refusal with its own
    reason; when the cluster named some records, the others get
    INVALID_DIFFERENT_RECORD (refused only for sharing their batch)."""
    if not at_fault:
        return err
    if index in at_fault:
        return CcrError(err.code, at_fault[index], resource=err.resource,
                        record_errors=err.record_errors)
    return CcrError(
        "INVALID_DIFFERENT_RECORD",
        f"refused only because it shared its batch with invalid records ({err.message})",
        resource=err.resource,
        record_errors=err.record_errors,
    )


def describe_delivery(err: CcrError | None, msg: Message) -> dict[str, Any]:
    """A JSON-friendly view of one delivery report."""
    out: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
    }
    if err is not None:
        out["error"] = str(err)
    return out


__all__ = [
    "DeliveryCallback",
    "Producer",
    "describe_delivery",
    "murmur2",
    "murmur2_partition",
    "to_positive",
]
