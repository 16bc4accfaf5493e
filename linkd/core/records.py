"""Kafka record batches, format v2 (magic 2): parse, check, build.

Rules this module keeps:
- A batch is the unit of storage, replication and transfer. The cluster reasons
  about its 61-byte header only; the records inside are opaque bytes to it.
- The CRC32C covers the bytes from the attributes field to the end of the
  batch. The base offset and the partition leader epoch sit before it, so the
  cluster may rewrite both without touching the CRC (Kafka does the same).
- Record-level encoding and decoding exist for clients (the Python library
  builds batches and reads them back) and for control markers, which the
  cluster writes itself.

Layout of the header (big-endian):
    base_offset int64 | batch_length int32 | partition_leader_epoch int32 |
    magic int8 | crc uint32 | attributes int16 | last_offset_delta int32 |
    base_timestamp int64 | max_timestamp int64 | producer_id int64 |
    producer_epoch int16 | base_sequence int32 | record_count int32

Pure code: no I/O. crc32c is a computation library.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import crc32c as _crc32c

HEADER_SIZE = 61
# Bytes before batch_length's payload: base_offset (8) + batch_length (4).
LOG_OVERHEAD = 12
MAGIC = 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_OFFSET = 17  # base_offset(8) + batch_length(4) + leader_epoch(4) + magic(1)
_ATTRIBUTES_OFFSET = 21
_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")


class CorruptBatchError(ValueError):
    """The bytes are not a well-formed record batch v2 (or its CRC is wrong)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What the cluster knows of a batch without reading its records."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record (wraps at 2**31 - 1, as Kafka)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(data: bytes | memoryview, position: int = 0) -> BatchHeader:
    """Reads the batch header at `position`. Checks sizes and magic, not the CRC."""
    if len(data) - position < HEADER_SIZE:
        raise CorruptBatchError(
            f"record batch truncated: {len(data) - position} bytes, header needs {HEADER_SIZE}"
        )
    fields = _HEADER.unpack_from(data, position)
    header = BatchHeader(*fields)
    if header.magic != MAGIC:
        raise CorruptBatchError(f"record batch magic is {header.magic}, only magic 2 is supported")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(
            f"record batch length {header.batch_length} is below the header size"
        )
    if header.last_offset_delta < 0:
        raise CorruptBatchError(f"record batch last offset delta {header.last_offset_delta} < 0")
    if header.record_count < 0:
        raise CorruptBatchError(f"record batch record count {header.record_count} < 0")
    return header


def compute_crc(data: bytes | memoryview, position: int, size: int) -> int:
    """CRC32C of a batch's bytes from its attributes field to its end."""
    view = memoryview(data)[position + _ATTRIBUTES_OFFSET : position + size]
    return int(_crc32c.crc32c(view))


def check_batch(data: bytes | memoryview, position: int = 0) -> BatchHeader:
    """Parses the batch at `position` and verifies its size and CRC32C."""
    header = parse_header(data, position)
    if position + header.size_bytes > len(data):
        raise CorruptBatchError(
            f"record batch truncated: length says {header.size_bytes} bytes, "
            f"{len(data) - position} present"
        )
    actual = compute_crc(data, position, header.size_bytes)
    if actual != header.crc:
        raise CorruptBatchError(
            f"record batch CRC32C mismatch: header says {header.crc:#010x}, "
            f"bytes give {actual:#010x}"
        )
    return header


def check_single_batch(data: bytes) -> BatchHeader:
    """Verifies that `data` is exactly one valid batch (what a produce carries)."""
    header = check_batch(data, 0)
    if header.size_bytes != len(data):
        raise CorruptBatchError(
            f"expected exactly one record batch of {header.size_bytes} bytes, got {len(data)} bytes"
        )
    return header


def iter_batches(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yields (position, header) of every whole batch in `data`, CRC-checked."""
    position = 0
    end = len(data)
    while position < end:
        header = check_batch(data, position)
        yield position, header
        position += header.size_bytes


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The same batch at another base offset (the CRC does not cover it)."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:]


def with_leader_epoch(batch: bytes, leader_epoch: int) -> bytes:
    """The same batch stamped with a partition leader epoch (not CRC-covered)."""
    return batch[:12] + _EPOCH.pack(leader_epoch) + batch[16:]


def with_offset_and_epoch(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """Both stamps at once, one copy."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:12] + _EPOCH.pack(leader_epoch) + batch[16:]


# ---------------------------------------------------------------------------
# Records (client side, and the control markers the cluster writes)
# ---------------------------------------------------------------------------

Header = tuple[str, bytes | None]


class Record(NamedTuple):
    """One decoded record, with its absolute offset and timestamp. (A named
    tuple: consumers create one per record, and it is several times cheaper
    than a frozen dataclass.)"""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def _zigzag_varint(value: int, out: bytearray) -> None:
    v = (value << 1) ^ (value >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(data):
            raise CorruptBatchError("record truncated inside a varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptBatchError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _encode_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        _zigzag_varint(-1, out)
    else:
        _zigzag_varint(len(value), out)
        out += value


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    _zigzag_varint(value, out)
    return bytes(out)


# Encoded zigzag varints for -1 .. 16382, the lengths and deltas of nearly
# every record: encoding a record is then mostly list appends.
_VARINTS = tuple(_varint_bytes(v) for v in range(-1, 1 << 14))


def _v(value: int) -> bytes:
    if -1 <= value < (1 << 14) - 1:
        return _VARINTS[value + 1]
    return _varint_bytes(value)


def _encode_record_parts(
    parts: list[bytes],
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    fields = [b"\x00", _v(timestamp_delta), _v(offset_delta)]
    if key is None:
        fields.append(_VARINTS[0])
    else:
        fields += (_v(len(key)), key)
    if value is None:
        fields.append(_VARINTS[0])
    else:
        fields += (_v(len(value)), value)
    fields.append(_v(len(headers)))
    for name, hvalue in headers:
        encoded = name.encode()
        fields += (_v(len(encoded)), encoded)
        if hvalue is None:
            fields.append(_VARINTS[0])
        else:
            fields += (_v(len(hvalue)), hvalue)
    parts.append(_v(sum(map(len, fields))))
    parts += fields


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> None:
    """Appends one length-prefixed record to `out`."""
    parts: list[bytes] = []
    _encode_record_parts(parts, offset_delta, timestamp_delta, key, value, headers)
    out += b"".join(parts)


@dataclass(frozen=True, slots=True)
class RecordSpec:
    """A record to put in a new batch."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[Header, ...] = ()


class RecordLike(Protocol):
    """Anything with a record's fields (RecordSpec, or a client's own type)."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> Sequence[Header]: ...


def build_batch(
    records: Sequence[RecordLike],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: int = COMPRESSION_NONE,
) -> bytes:
    """Encodes records into one batch v2 (uncompressed or gzip)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0].timestamp
    max_timestamp = max(r.timestamp for r in records)
    parts: list[bytes] = []
    for delta, rec in enumerate(records):
        _encode_record_parts(
            parts, delta, rec.timestamp - base_timestamp, rec.key, rec.value, rec.headers
        )
    payload: bytes = b"".join(parts)
    if compression == COMPRESSION_GZIP:
        compressor = zlib.compressobj(wbits=31)
        payload = compressor.compress(payload) + compressor.flush()
    elif compression != COMPRESSION_NONE:
        raise ValueError(f"compression codec {compression} is not supported for building batches")
    attributes = compression
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            len(records) - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + payload
    crc = int(_crc32c.crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", batch, _CRC_OFFSET, crc)
    return bytes(batch)


def _decompress(codec: int, payload: bytes | memoryview) -> bytes | memoryview:
    if codec == COMPRESSION_NONE:
        return payload
    if codec == COMPRESSION_GZIP:
        return zlib.decompress(bytes(payload), wbits=47)
    try:
        if codec == COMPRESSION_SNAPPY:
            import cramjam

            # Kafka's Java client writes xerial-framed snappy; librdkafka writes raw.
            raw = bytes(payload)
            if raw.startswith(b"\x82SNAPPY\x00"):
                out = bytearray()
                pos = 16
                while pos < len(raw):
                    (size,) = struct.unpack_from(">i", raw, pos)
                    pos += 4
                    out += bytes(cramjam.snappy.decompress_raw(raw[pos : pos + size]))
                    pos += size
                return bytes(out)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            import cramjam

            return bytes(cramjam.lz4.decompress(bytes(payload)))
        if codec == COMPRESSION_ZSTD:
            import cramjam

            return bytes(cramjam.zstd.decompress(bytes(payload)))
    except ImportError as exc:
        raise CorruptBatchError(
            f"compression codec {codec} needs the 'cramjam' package to decode"
        ) from exc
    raise CorruptBatchError(f"unknown compression codec {codec}")


def decode_records(
    batch: bytes | memoryview, position: int = 0
) -> tuple[BatchHeader, list[Record]]:
    """Decodes every record of the (CRC-checked) batch at `position`."""
    header = check_batch(batch, position)
    start = position + HEADER_SIZE
    end = position + header.size_bytes
    raw = _decompress(header.compression, memoryview(batch)[start:end])
    data = raw if isinstance(raw, bytes) else bytes(raw)
    size = len(data)
    records: list[Record] = []
    append = records.append
    read_varint = _read_varint
    base_offset = header.base_offset
    base_ts = header.max_timestamp if header.log_append_time else header.base_timestamp
    ts_from_record = not header.log_append_time
    pos = 0
    # Single-byte varints (values -64..63) are decoded inline: they are almost
    # every length and delta in practice, and this loop runs once per record.
    for _ in range(header.record_count):
        if pos >= size:
            raise CorruptBatchError("record count runs past the end of the batch")
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = read_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptBatchError("record length runs past the end of the batch")
        pos += 1  # record attributes
        b = data[pos]
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = read_varint(data, pos)
        b = data[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = read_varint(data, pos)
        key: bytes | None
        b = data[pos]
        if b == 1:  # zigzag(-1): a null key
            key, pos = None, pos + 1
        else:
            key, pos = _read_nullable(data, pos)
        value: bytes | None
        b = data[pos]
        if b < 0x80 and not b & 1:
            n = b >> 1
            value, pos = data[pos + 1 : pos + 1 + n], pos + 1 + n
        else:
            value, pos = _read_nullable(data, pos)
        b = data[pos]
        headers: tuple[Header, ...] = ()
        if b == 0:
            pos += 1
        else:
            header_count, pos = read_varint(data, pos)
            items: list[Header] = []
            for _h in range(header_count):
                name, pos = _read_nullable(data, pos)
                hvalue, pos = _read_nullable(data, pos)
                items.append(((name or b"").decode(errors="replace"), hvalue))
            headers = tuple(items)
        if pos != record_end:
            raise CorruptBatchError("record length does not match its fields")
        timestamp = base_ts + ts_delta if ts_from_record else base_ts
        append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    return header, records


def _read_nullable(data: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(data, pos)
    if length < 0:
        return None, pos
    if pos + length > len(data):
        raise CorruptBatchError("record field runs past the end of the batch")
    return bytes(data[pos : pos + length]), pos + length


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


def build_control_batch(
    *,
    marker: int,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker (commit or abort): one control record."""
    return build_batch(
        [
            RecordSpec(
                key=_CONTROL_KEY.pack(0, marker),
                value=_CONTROL_VALUE.pack(0, coordinator_epoch),
                timestamp=timestamp,
            )
        ],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def control_marker_type(batch: bytes | memoryview, position: int = 0) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT for a control batch."""
    header, records = decode_records(batch, position)
    if not header.is_control or not records or records[0].key is None:
        raise CorruptBatchError("not a control batch")
    _version, marker = _CONTROL_KEY.unpack(records[0].key[:4])
    if marker not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptBatchError(f"unknown control marker type {marker}")
    return int(marker)


def with_log_append_time(batch: bytes, timestamp: int) -> bytes:
    """Stamps a batch with the broker's time (LogAppendTime): sets the timestamp
    type bit and max_timestamp, which the CRC covers, so the CRC is recomputed."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, _ATTRIBUTES_OFFSET)
    struct.pack_into(">h", out, _ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", out, 35, timestamp)  # max_timestamp follows base_timestamp
    crc = int(_crc32c.crc32c(memoryview(out)[_ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", out, _CRC_OFFSET, crc)
    return bytes(out)
