"""A bounds check of a request frame, walked from kio's schema before kio decodes it.

Why: kio's native reader reserves memory for an array from the length the
client sent, before reading any element; a length of 2**31 asks the allocator
for hundreds of gigabytes, and a failed allocation in native code aborts the
whole process. A broker must never trust a length, so this module walks the
frame the way the reader will (fields in declaration order, compact or legacy
encodings for flexible or older versions, tagged fields by their sizes) and
refuses the frame first, as Kafka's own generated readers do:

Rules:
- An array's element count may not exceed the bytes left in its enclosing
  frame (or tagged field): every element takes at least one byte. ("Tried to
  allocate a collection of size N, but there are only M bytes remaining" in
  Kafka.)
- A string or bytes length may not run past the end.
- At most MAX_ELEMENTS array elements per request, so a crafted frame cannot
  make the walk itself slow.
- The request header's client id is a legacy nullable string in every header
  version (Kafka's special case), as kio reads it.

Nothing is decoded into objects here and record batches are skipped by their
length, so the walk is cheap next to the decode it protects.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from dataclasses import dataclass
from typing import Any

MAX_ELEMENTS = 1_000_000

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Field shapes.
_FIXED, _STRING, _BYTES, _ENTITY, _ARRAY = range(5)


class FrameError(ValueError):
    """The frame's lengths do not fit the frame."""


@dataclass(frozen=True, slots=True)
class _Shape:
    kind: int
    size: int = 0  # _FIXED: bytes
    entity: type[Any] | None = None  # _ENTITY, or an _ARRAY of entities
    item: _Shape | None = None  # _ARRAY: the element's shape
    nullable_entity: bool = False
    legacy_string: bool = False  # the request header's client id


@dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    fields: tuple[_Shape, ...]
    tags: dict[int, _Shape]


_PLANS: dict[type[Any], _Plan] = {}


def _is_entity(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and hasattr(tp, "__type__")


def _scalar(kafka_type: str) -> _Shape:
    if kafka_type in _FIXED_SIZES:
        return _Shape(_FIXED, size=_FIXED_SIZES[kafka_type])
    if kafka_type == "string":
        return _Shape(_STRING)
    if kafka_type in ("bytes", "records"):
        return _Shape(_BYTES)
    raise TypeError(f"no length rule for kafka type {kafka_type!r}")


def _plan(cls: type[Any]) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    hints = typing.get_type_hints(cls)
    fields: list[_Shape] = []
    tags: dict[int, _Shape] = {}
    header = cls.__name__ == "RequestHeader"
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        optional = False
        if typing.get_origin(hint) in (typing.Union, type(int | None)):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            hint = args[0]
        is_array = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if is_array else hint
        if _is_entity(inner):
            element = _Shape(_ENTITY, entity=inner, nullable_entity=optional and not is_array)
        else:
            element = _scalar(str(f.metadata.get("kafka_type")))
            if header and f.name == "client_id":
                element = _Shape(_STRING, legacy_string=True)
        shape = _Shape(_ARRAY, item=element) if is_array else element
        if "tag" in f.metadata:
            tags[int(f.metadata["tag"])] = shape
        else:
            fields.append(shape)
    plan = _PLANS[cls] = _Plan(bool(cls.__flexible__), tuple(fields), tags)
    return plan


class _Walk:
    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.elements = 0

    def uvarint(self, pos: int, end: int) -> tuple[int, int]:
        value = 0
        for shift in range(0, 35, 7):
            if pos >= end:
                raise FrameError("a varint runs past the end")
            b = self.data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos
        raise FrameError("a varint is longer than 5 bytes")

    def int16(self, pos: int, end: int) -> tuple[int, int]:
        if pos + 2 > end:
            raise FrameError("an int16 runs past the end")
        return int(_I16.unpack_from(self.data, pos)[0]), pos + 2

    def int32(self, pos: int, end: int) -> tuple[int, int]:
        if pos + 4 > end:
            raise FrameError("an int32 runs past the end")
        return int(_I32.unpack_from(self.data, pos)[0]), pos + 4

    def skip(self, pos: int, n: int, end: int, what: str) -> int:
        if n < 0 or pos + n > end:
            raise FrameError(f"{what} of {n} bytes runs past the end ({end - pos} left)")
        return pos + n

    def entity(self, cls: type[Any], pos: int, end: int) -> int:
        plan = _plan(cls)
        for shape in plan.fields:
            pos = self.value(shape, plan.flexible, pos, end)
        if plan.flexible:
            count, pos = self.uvarint(pos, end)
            for _ in range(count):
                tag, pos = self.uvarint(pos, end)
                size, pos = self.uvarint(pos, end)
                tag_end = self.skip(pos, size, end, f"tagged field {tag}")
                tagged = plan.tags.get(tag)
                if tagged is not None:
                    self.value(tagged, True, pos, tag_end)
                pos = tag_end
        return pos

    def value(self, shape: _Shape, flexible: bool, pos: int, end: int) -> int:
        kind = shape.kind
        if kind == _FIXED:
            return self.skip(pos, shape.size, end, "a fixed-size field")
        if kind == _STRING:
            if flexible and not shape.legacy_string:
                n, pos = self.uvarint(pos, end)
                return self.skip(pos, n - 1, end, "a string") if n else pos
            n, pos = self.int16(pos, end)
            return pos if n == -1 else self.skip(pos, n, end, "a string")
        if kind == _BYTES:
            if flexible:
                n, pos = self.uvarint(pos, end)
                return self.skip(pos, n - 1, end, "a byte string") if n else pos
            n, pos = self.int32(pos, end)
            return pos if n == -1 else self.skip(pos, n, end, "a byte string")
        if kind == _ENTITY:
            assert shape.entity is not None
            if shape.nullable_entity:
                if pos >= end:
                    raise FrameError("a struct marker runs past the end")
                marker = self.data[pos]
                pos += 1
                if marker == 0xFF:
                    return pos
            return self.entity(shape.entity, pos, end)
        assert shape.item is not None
        if flexible:
            n, pos = self.uvarint(pos, end)
            count = n - 1
        else:
            count, pos = self.int32(pos, end)
        if count < 0:
            return pos  # null (or a negative length, which the decoder refuses)
        if count > end - pos:
            raise FrameError(
                f"an array of {count} elements does not fit the {end - pos} bytes left"
            )
        self.elements += count
        if self.elements > MAX_ELEMENTS:
            raise FrameError(f"more than {MAX_ELEMENTS} array elements in one request")
        for _ in range(count):
            pos = self.value(shape.item, flexible, pos, end)
        return pos


def prepare(request_cls: type[Any]) -> None:
    """Builds the plans of a request class and every class nested in it."""
    seen: set[type[Any]] = set()
    todo = [request_cls, request_cls.__header_schema__]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        plan = _plan(cls)
        for shape in (*plan.fields, *plan.tags.values()):
            inner = shape.item if shape.kind == _ARRAY else shape
            if inner is not None and inner.entity is not None:
                todo.append(inner.entity)


def check_request(frame: bytes | bytearray, request_cls: type[Any]) -> None:
    """Raises FrameError unless every length in the frame fits the frame."""
    walk = _Walk(frame)
    pos = walk.entity(request_cls.__header_schema__, 0, len(frame))
    walk.entity(request_cls, pos, len(frame))
