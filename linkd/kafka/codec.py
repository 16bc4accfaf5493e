"""Kafka wire framing and the `kio` glue: parse requests, build and encode responses.

Rules:
- A frame is a big-endian int32 size followed by that many bytes. A request
  starts with api key (int16), api version (int16) and correlation id (int32);
  the rest of its header (client id, tagged fields) and the body are decoded by
  kio's classes for that key and version. Nothing here is hand-written schema.
- A response is the correlation id (response header v0) or the correlation id
  and empty tagged fields (v1, flexible versions), then the body. ApiVersions
  always answers with header v0, as Kafka does.
- Handlers describe a response as plain data: nested dicts, lists, ints,
  strings and bytes, with the field names of the newest version. `make` fits
  that data onto the class of the version the client asked for: fields the
  version lacks are dropped, fields the data lacks take the schema's default or
  a zero value. One handler thereby serves every version of its API.
- Error codes in that data are plain ints (Kafka's numbers); times are
  milliseconds; topic ids are UUID strings or `uuid.UUID`.

Theory of operation: `peek_header` reads the fixed 8 bytes (enough to answer
even a request kio cannot decode), `parse_request` decodes header and body, and
`encode_response` frames a kio response entity. Entity plans (which field is a
nested entity, which needs conversion) are computed once per class and cached.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import struct
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KafkaErrorCode
from kio.serial import entity_reader, entity_writer

from linkd.kafka import guard

# Frames larger than this are refused (the connection is closed: a frame of
# unknown size cannot be skipped safely). Kafka's socket.request.max.bytes is
# 100 MiB by default.
MAX_FRAME_BYTES = 100 * 1024 * 1024
# A request header is at least api key, version and correlation id.
FIXED_HEADER_BYTES = 8
# Byte strings at least this long are written to the socket by reference.
LARGE_CHUNK_BYTES = 32 * 1024

_FIXED = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")

_UUID_ZERO = uuid.UUID(int=0)
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


class DecodeError(ValueError):
    """The request's header or body does not decode with its schema."""


@dataclass(frozen=True, slots=True)
class FixedHeader:
    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any  # the kio request entity of this key and version


def peek_header(frame: bytes | bytearray) -> FixedHeader | None:
    """Api key, version and correlation id, or None if the frame is too short."""
    if len(frame) < FIXED_HEADER_BYTES:
        return None
    key, version, correlation = _FIXED.unpack_from(frame, 0)
    return FixedHeader(key, version, correlation)


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any] | None:
    """kio's request class for this key and version, or None if kio has none."""
    try:
        return load_request_schema(api_key, api_version)
    except Exception:
        return None


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any] | None:
    try:
        return load_response_schema(api_key, api_version)
    except Exception:
        return None


_READERS: dict[type[Any], Callable[[bytes | memoryview, int], tuple[Any, int]]] = {}


def _reader(cls: type[Any]) -> Callable[[bytes | memoryview, int], tuple[Any, int]]:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


def parse_request(frame: bytes | bytearray, fixed: FixedHeader) -> Request:
    """Decodes header and body. Raises DecodeError (the caller knows the
    correlation id from `fixed` and can still answer)."""
    cls = request_class(fixed.api_key, fixed.api_version)
    if cls is None:
        raise DecodeError(f"no schema for api key {fixed.api_key} version {fixed.api_version}")
    try:
        # Lengths first: kio's native reader trusts array lengths (see guard.py).
        guard.check_request(frame, cls)
        # kio reads read-only buffers only: a view, not a copy, of a received frame.
        data = memoryview(frame).toreadonly() if isinstance(frame, bytearray) else frame
        header, offset = _reader(cls.__header_schema__)(data, 0)
        body, _size = _reader(cls)(data, offset)
    except Exception as exc:  # kio raises several types on malformed input
        raise DecodeError(
            f"api key {fixed.api_key} v{fixed.api_version}: cannot decode request: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return Request(
        fixed.api_key, fixed.api_version, fixed.correlation_id, header.client_id or "", body
    )


class _Chunks:
    """A kio output that keeps large byte strings (record batches) by reference
    instead of copying them, so a Fetch response's records reach the socket
    without passing through an intermediate buffer."""

    def __init__(self) -> None:
        self.chunks: list[bytes | bytearray] = []
        self.size = 0
        self._small = bytearray()

    def write(self, data: bytes) -> int:
        n = len(data)
        self.size += n
        if n >= LARGE_CHUNK_BYTES:
            if self._small:
                self.chunks.append(self._small)
                self._small = bytearray()
            self.chunks.append(data)
        else:
            self._small += data
        return n

    def finish(self) -> list[bytes | bytearray]:
        if self._small:
            self.chunks.append(self._small)
            self._small = bytearray()
        return self.chunks


def encode_response_chunks(
    correlation_id: int, body: Any, *, header_v0: bool = False
) -> list[bytes | bytearray]:
    """One framed response (size, header, body) as chunks to write in order."""
    out = _Chunks()
    out.write(b"\x00" * 8)  # size and correlation id, patched below
    if type(body).__flexible__ and not header_v0:
        out.write(b"\x00")  # no tagged fields in the response header
    entity_writer(type(body))(out, body)  # type: ignore[arg-type]
    chunks = out.finish()
    first = chunks[0]
    assert isinstance(first, bytearray)  # the 8-byte prefix is always small
    _SIZE_AND_CORRELATION.pack_into(first, 0, out.size - 4, correlation_id)
    return chunks


def warm_up(versions: list[tuple[int, int]]) -> None:
    """Imports and prepares the classes, readers, writers and plans of these
    (api key, version) pairs, so that no client request pays for it. Safe to
    run in a worker thread (imports take the import lock; caches are filled
    with equal values by whichever thread gets there)."""
    for key, version in versions:
        req_cls = request_class(key, version)
        resp_cls = response_class(key, version)
        if req_cls is None or resp_cls is None:
            continue
        _reader(req_cls.__header_schema__)
        _reader(req_cls)
        guard.prepare(req_cls)
        entity_writer(resp_cls)
        _plan(resp_cls)


def encode_response(correlation_id: int, body: Any, *, header_v0: bool = False) -> bytes:
    """One framed response: size, header, body."""
    return b"".join(encode_response_chunks(correlation_id, body, header_v0=header_v0))


def frame_size(prefix: bytes) -> int:
    (size,) = _SIZE.unpack(prefix)
    return int(size)


# -- building responses from plain data ------------------------------------------------

_PRIMITIVE, _PRIMITIVE_TUPLE, _ENTITY, _ENTITY_TUPLE = range(4)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: int
    optional: bool
    entity: type[Any] | None
    convert: Callable[[Any], Any] | None
    zero: Callable[[], Any]


def _is_entity(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and hasattr(tp, "__type__")


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0], True
    return hint, False


def _error_code(value: Any) -> KafkaErrorCode:
    if isinstance(value, KafkaErrorCode):
        return value
    return KafkaErrorCode(int(value))


def _timedelta(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _datetime(value: Any) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    if int(value) < 0:
        return None
    return datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)


def _uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    return uuid.UUID(str(value))


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "error_code": _error_code,
    "timedelta_i32": _timedelta,
    "timedelta_i64": _timedelta,
    "datetime_i64": _datetime,
    "uuid": _uuid,
}

_ZEROS: dict[str, Callable[[], Any]] = {
    "string": str,
    "bytes": bytes,
    "records": bytes,
    "bool": bool,
    "uuid": lambda: _UUID_ZERO,
    "error_code": lambda: KafkaErrorCode.none,
    "timedelta_i32": datetime.timedelta,
    "timedelta_i64": datetime.timedelta,
    "datetime_i64": lambda: _EPOCH,
    "float64": float,
}


def _constant(value: Any) -> Any:
    return value


_PLANS: dict[type[Any], tuple[_Field, ...]] = {}


def _plan(cls: type[Any]) -> tuple[_Field, ...]:
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _build_plan(cls)
    return plan


def _build_plan(cls: type[Any]) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    plan: list[_Field] = []
    for f in dataclasses.fields(cls):
        hint, optional = _strip_optional(hints[f.name])
        kafka_type = f.metadata.get("kafka_type")
        is_tuple = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if is_tuple else hint
        if _is_entity(inner):
            kind = _ENTITY_TUPLE if is_tuple else _ENTITY
            entity: type[Any] | None = inner
            convert = None
        else:
            kind = _PRIMITIVE_TUPLE if is_tuple else _PRIMITIVE
            entity = None
            convert = _CONVERTERS.get(str(kafka_type))
        if f.default is not dataclasses.MISSING:
            zero: Callable[[], Any] = functools.partial(_constant, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            zero = f.default_factory
        elif optional:
            zero = functools.partial(_constant, None)
        elif is_tuple:
            zero = tuple
        elif entity is not None:
            zero = functools.partial(make, entity, {})
        else:
            zero = _ZEROS.get(str(kafka_type), int)
        plan.append(_Field(f.name, kind, optional, entity, convert, zero))
    return tuple(plan)


def make(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """An instance of kio entity `cls` from plain data (see the module rules)."""
    kwargs: dict[str, Any] = {}
    for f in _plan(cls):
        if f.name not in data:
            kwargs[f.name] = f.zero()
            continue
        value = data[f.name]
        if value is None:
            kwargs[f.name] = None if f.optional else f.zero()
            continue
        if f.kind == _PRIMITIVE:
            kwargs[f.name] = f.convert(value) if f.convert is not None else value
        elif f.kind == _PRIMITIVE_TUPLE:
            conv = f.convert
            kwargs[f.name] = tuple(conv(v) for v in value) if conv else tuple(value)
        elif f.kind == _ENTITY:
            assert f.entity is not None
            kwargs[f.name] = value if _is_entity(type(value)) else make(f.entity, value)
        else:
            assert f.entity is not None
            entity = f.entity
            kwargs[f.name] = tuple(make(entity, v) for v in value)
    return cls(**kwargs)


def error_body(cls: type[Any], code: int, message: str | None = None) -> Any:
    """A response of class `cls` with every top-level error code set to `code`
    (and the error message, where the version has one), other fields empty."""
    data: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        if kafka_type == "error_code":
            data[f.name] = code
        elif f.name == "error_message" and message is not None:
            data[f.name] = message
    return make(cls, data)


def ms(value: Any) -> int:
    """Milliseconds of a kio timedelta field (or an int)."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def field(body: Any, name: str, default: Any = None) -> Any:
    """A request field that older versions lack: `default` there."""
    return getattr(body, name, default)
