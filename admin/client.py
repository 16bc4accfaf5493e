"""Pieces shared by the admin client, the producer and the consumer.

- `TopicPartition` and `Message`, shaped like confluent-kafka's so code
  written for Kafka reads the same here.
- `Connection`: one gRPC channel to one cluster and the calls over it, every
  call bounded by a deadline and every failure turned into a `CcrError`.
- Config helpers: confluent-kafka style dicts with dotted keys; the security
  keys (`security.protocol`, `ssl.*`, `sasl.*`) are read by `admin.security`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from admin.errors import CcrError, error_from_rpc
from admin.security import ClientSecurity, Diagnosis, open_channel
from ccr.v1 import admin_pb2_grpc, cluster_pb2_grpc

# Logical offsets, as in confluent-kafka.
OFFSET_BEGINNING = -2
OFFSET_END = -1
OFFSET_STORED = -1000
OFFSET_INVALID = -1001

# Timestamp types of Message.timestamp(), as in confluent-kafka.
TIMESTAMP_NOT_AVAILABLE = 0
TIMESTAMP_CREATE_TIME = 1
TIMESTAMP_LOG_APPEND_TIME = 2

DEFAULT_BOOTSTRAP = "127.0.0.1:9701"
# Fetch responses carry up to fetch.max.bytes of batches; leave room.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

Config = Mapping[str, Any]
HeaderInput = Mapping[str, Any] | Sequence[tuple[str, Any]] | None
HeaderList = list[tuple[str, bytes | None]]


class TopicPartition:
    """A topic partition, optionally with an offset (confluent-kafka's shape).

    Two TopicPartitions are equal when topic and partition are; the offset is
    payload.
    """

    __slots__ = ("error", "leader_epoch", "metadata", "offset", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int = -1,
        offset: int = OFFSET_INVALID,
        metadata: str | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.metadata = metadata
        self.leader_epoch = leader_epoch
        self.error: CcrError | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicPartition):
            return NotImplemented
        return (self.topic, self.partition) == (other.topic, other.partition)

    def __lt__(self, other: TopicPartition) -> bool:
        return (self.topic, self.partition) < (other.topic, other.partition)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __repr__(self) -> str:
        return (
            f"TopicPartition{{topic={self.topic},partition={self.partition},"
            f"offset={self.offset},leader_epoch={self.leader_epoch},error={self.error}}}"
        )

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


class Message:
    """One record as the producer reports it or the consumer returns it."""

    __slots__ = (
        "_error",
        "_headers",
        "_key",
        "_leader_epoch",
        "_offset",
        "_partition",
        "_timestamp",
        "_topic",
        "_value",
    )

    def __init__(
        self,
        topic: str | None,
        partition: int | None,
        offset: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: HeaderList | None = None,
        timestamp: tuple[int, int] = (TIMESTAMP_NOT_AVAILABLE, -1),
        error: CcrError | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers or None
        self._timestamp = timestamp
        self._error = error
        self._leader_epoch = leader_epoch

    def topic(self) -> str | None:
        return self._topic

    def partition(self) -> int | None:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> HeaderList | None:
        """A list of (name, value) pairs, or None when the record has none."""
        return list(self._headers) if self._headers else None

    def timestamp(self) -> tuple[int, int]:
        """(timestamp type, milliseconds since the epoch)."""
        return self._timestamp

    def error(self) -> CcrError | None:
        return self._error

    def leader_epoch(self) -> int | None:
        return self._leader_epoch

    def set_key(self, key: bytes | None) -> None:
        self._key = key

    def set_value(self, value: bytes | None) -> None:
        self._value = value

    def set_headers(self, headers: HeaderList | None) -> None:
        self._headers = headers or None

    def __len__(self) -> int:
        return len(self._value) if self._value is not None else 0

    def __repr__(self) -> str:
        return (
            f"Message(topic={self._topic!r}, partition={self._partition}, offset={self._offset}, "
            f"key={self._key!r}, error={self._error})"
        )


# ---------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------


def normalize_config(config: Config | str | None, what: str) -> dict[str, Any]:
    """A config dict from a dict or a plain bootstrap string."""
    if config is None:
        return {"bootstrap.servers": DEFAULT_BOOTSTRAP}
    if isinstance(config, str):
        return {"bootstrap.servers": config}
    if not isinstance(config, Mapping):
        raise TypeError(f"{what} config must be a dict or a 'HOST:PORT' string")
    return dict(config)


def bootstrap_of(config: Mapping[str, Any]) -> str:
    """The single HOST:PORT to talk to (the first of a comma-separated list)."""
    raw = str(config.get("bootstrap.servers", DEFAULT_BOOTSTRAP)).strip()
    first = raw.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    if not first or ":" not in first:
        raise ValueError(f"bootstrap.servers must be HOST:PORT, got {raw!r}")
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bootstrap.servers must be HOST:PORT, got {raw!r}")
    return first


def config_int(
    config: Mapping[str, Any], key: str, default: int, minimum: int | None = None
) -> int:
    value = config.get(key, default)
    try:
        result = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"config {key} must be an integer, got {value!r}") from None
    if minimum is not None and result < minimum:
        raise ValueError(f"config {key} must be at least {minimum}, got {result}")
    return result


def config_bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"config {key} must be true or false, got {value!r}")


def config_str(config: Mapping[str, Any], key: str, default: str) -> str:
    value = config.get(key, default)
    return default if value is None else str(value)


def to_bytes(value: Any, what: str) -> bytes | None:
    """str -> UTF-8, bytes-like -> bytes, None stays None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{what} must be str, bytes or None, not {type(value).__name__}")


def to_headers(headers: HeaderInput) -> HeaderList:
    """Headers from a dict or a list of (name, value) pairs."""
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: HeaderList = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError("headers must be a dict or a list of (name, value) pairs") from None
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        out.append((name, to_bytes(value, f"header {name!r}")))
    return out


# ---------------------------------------------------------------------------
# Connection
# ---------------------------------------------------------------------------

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Connection:
    """One gRPC channel to one cluster, shared by the calls of one client."""

    def __init__(
        self,
        bootstrap: str,
        default_timeout_s: float = 30.0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.target = bootstrap
        self.default_timeout_s = default_timeout_s
        self.security = security or ClientSecurity()
        self._diagnosis = Diagnosis(bootstrap, self.security)
        self._channel = open_channel(
            bootstrap,
            self.security,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.enable_http_proxy", 0),
            ],
        )
        self.cluster = cluster_pb2_grpc.ClusterStub(self._channel)
        self.admin = admin_pb2_grpc.AdminStub(self._channel)
        self._closed = False
        self._lock = threading.Lock()

    def call(
        self,
        rpc: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout_s: float | None = None,
    ) -> Resp:
        """Runs one unary call; a failure raises CcrError."""
        if self._closed:
            raise CcrError("CLOSED", f"the client of {self.target} is closed")
        deadline = self.default_timeout_s if timeout_s is None else max(0.001, timeout_s)
        try:
            response = rpc(request, timeout=deadline)
        except grpc.RpcError as exc:
            raise self.error(exc) from None
        except ValueError as exc:  # grpc raises ValueError on a closed channel
            raise CcrError("CLOSED", f"the client of {self.target} is closed: {exc}") from None
        self.answered()
        return response

    def future(
        self,
        rpc: grpc.UnaryUnaryMultiCallable[Req, Resp],
        request: Req,
        timeout_s: float,
    ) -> grpc.Future[Resp]:
        """Starts one unary call without waiting for it."""
        if self._closed:
            raise CcrError("CLOSED", f"the client of {self.target} is closed")
        return rpc.future(request, timeout=max(0.001, timeout_s))

    def answered(self) -> None:
        """A call succeeded: the security settings work (no more probing)."""
        self._diagnosis.answered = True

    def error(self, exc: BaseException) -> CcrError:
        """The CcrError of a failed call; a security mismatch is named as one."""
        return self._diagnosis.explain(error_from_rpc(exc, self.target))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._channel.close()

    @property
    def closed(self) -> bool:
        return self._closed


def result_of(conn: Connection, fut: grpc.Future[Resp]) -> Resp | CcrError:
    """The result of a finished call future, or the CcrError it failed with."""
    try:
        result = fut.result(timeout=0)
    except grpc.FutureCancelledError:
        return CcrError("CANCELLED", "the call was cancelled", retriable=True)
    except grpc.RpcError as exc:
        return conn.error(exc)
    except Exception as exc:
        return CcrError("UNKNOWN", f"{type(exc).__name__}: {exc}")
    conn.answered()
    return result


Callback = Callable[..., Any]
