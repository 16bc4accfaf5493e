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

from linkd.core.errors import RecordError

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
    """The bytes are not a well-formed record batch v2 (or its CRC is wrong).
    Every failure to read a batch is one of these (or a subclass): the codec
    never lets an IndexError, zlib.error or a decompressor's error out."""


class InvalidRecordError(CorruptBatchError):
    """The batch parses, but its records break a rule Kafka's broker checks
    on produce: the record count against the offset deltas, offset deltas
    0, 1, 2, ... in order, no bytes after the last record, a key on a
    compacted topic (Kafka's INVALID_RECORD). `record_errors` names the
    records at fault when the rule is one record's (Kafka's record errors,
    KIP-467); empty when the batch as a whole is wrong."""

    def __init__(self, message: str, record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class InvalidTimestampError(InvalidRecordError):
    """Records whose timestamps lie outside the range the topic accepts
    (Kafka's INVALID_TIMESTAMP; the records are named in `record_errors`)."""


# Kafka names at most this many record errors in a refusal's message (all
# of them travel in the answer's record errors).
RECORD_ERRORS_IN_MESSAGE = 3


def _record_errors_refusal(
    errors: list[RecordError], timestamps: bool
) -> InvalidRecordError:
    shown = "; ".join(
        f"record {e.batch_index}: {e.message}" for e in errors[:RECORD_ERRORS_IN_MESSAGE]
    )
    more = f" (and {len(errors) - RECORD_ERRORS_IN_MESSAGE} more)" if (
        len(errors) > RECORD_ERRORS_IN_MESSAGE
    ) else ""
    what = "invalid timestamps" if timestamps else "invalid records"
    message = f"{len(errors)} record(s) of the batch refused for {what}: {shown}{more}"
    cls = InvalidTimestampError if timestamps else InvalidRecordError
    return cls(message, tuple(errors))


class DecompressedTooLargeError(CorruptBatchError):
    """A compressed batch's records take more than the allowed bytes once
    decompressed (a decompression bomb, or a batch above max.message.bytes)."""


# The most bytes one batch's records may take once decompressed when it is
# read back (a batch is checked against its topic's max.message.bytes when it
# is written; this bounds what a reader inflates of anything stored before).
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024


# Not frozen: one is built for every batch read or written, and a frozen
# dataclass's __init__ costs several times a plain one's. Nothing assigns to
# a header's fields or hashes one (it is read, compared, and carried in effects).
@dataclass(slots=True)
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


def check_copied_batch(header: BatchHeader) -> None:
    """What a follower checks of a batch copied from its source, beyond the
    size and CRC32C that `check_batch` verified: that the header agrees with
    itself (a known compression codec; no more records than its offset range
    holds). It does not read the records, as Kafka's replica does not
    (LogValidator runs where records are produced): the source walked them
    with `check_records` when its producer wrote them, the link session
    authenticates the source, and the CRC has covered them since. Raises
    CorruptBatchError or InvalidRecordError naming what is wrong."""
    if header.compression > COMPRESSION_ZSTD:
        raise CorruptBatchError(f"record batch compression codec {header.compression} is unknown")
    if header.record_count > header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch claims {header.record_count} records in an offset range of "
            f"{header.last_offset_delta + 1}"
        )


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
    # check_batch refuses a batch past the end: the batches tile the data.
    assert position == end, f"record batches end at byte {position} of {end}"


def with_base_offset(batch: bytes, base_offset: int) -> bytes:
    """The same batch at another base offset (the CRC does not cover it)."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:]


def with_leader_epoch(batch: bytes, leader_epoch: int) -> bytes:
    """The same batch stamped with a partition leader epoch (not CRC-covered)."""
    return batch[:12] + _EPOCH.pack(leader_epoch) + batch[16:]


def with_offset_and_epoch(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """Both stamps at once, one copy."""
    out = _BASE_OFFSET.pack(base_offset) + batch[8:12] + _EPOCH.pack(leader_epoch) + batch[16:]
    # Stamped in place: the batch keeps its size (and its CRC, which covers neither).
    assert len(out) == len(batch), (base_offset, leader_epoch, len(out), len(batch))
    return out


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
_SMALL = (1 << 14) - 1  # values below this are in _VARINTS


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
    """Appends one length-prefixed record to `out` (`record_bytes`)."""
    out += record_bytes(offset_delta, timestamp_delta, key, value, headers)


def record_bytes(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> bytes:
    """One length-prefixed record (`encode_record` appends it). A producer
    encodes each record when it joins a batch, so a batch is built by joining
    these: the common record (no headers, lengths and deltas below 16383)
    takes one join of table lookups."""
    if (
        not headers
        and value is not None
        and 0 <= timestamp_delta < _SMALL
        and 0 <= offset_delta < _SMALL
        and len(value) < _SMALL
    ):
        td = _VARINTS[timestamp_delta + 1]
        od = _VARINTS[offset_delta + 1]
        vl = _VARINTS[len(value) + 1]
        if key is None:
            # attributes, deltas, key -1 (0x01), value, no headers (0x00)
            size = len(td) + len(od) + len(vl) + len(value) + 3
            if size < _SMALL:
                return b"".join((_VARINTS[size + 1], b"\x00", td, od, b"\x01", vl, value, b"\x00"))
        elif len(key) < _SMALL:
            kl = _VARINTS[len(key) + 1]
            size = len(td) + len(od) + len(kl) + len(key) + len(vl) + len(value) + 2
            if size < _SMALL:
                return b"".join((_VARINTS[size + 1], b"\x00", td, od, kl, key, vl, value, b"\x00"))
    parts: list[bytes] = []
    _encode_record_parts(parts, offset_delta, timestamp_delta, key, value, headers)
    return b"".join(parts)


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
    """Encodes records into one batch v2, compressed with `compression`."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    base_timestamp = records[0].timestamp
    max_timestamp = max(r.timestamp for r in records)
    parts: list[bytes] = []
    for delta, rec in enumerate(records):
        _encode_record_parts(
            parts, delta, rec.timestamp - base_timestamp, rec.key, rec.value, rec.headers
        )
    attributes = compression
    if transactional:
        attributes |= TRANSACTIONAL_FLAG
    if control:
        attributes |= CONTROL_FLAG
    return assemble_batch(
        compress(compression, b"".join(parts)),
        attributes=attributes,
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def compress(codec: int, payload: bytes) -> bytes:
    """Records' bytes compressed as a batch of `codec` holds them (snappy
    raw, as librdkafka writes it; lz4 framed, as Kafka's clients do)."""
    if codec == COMPRESSION_NONE:
        return payload
    if codec == COMPRESSION_GZIP:
        compressor = zlib.compressobj(wbits=31)
        return compressor.compress(payload) + compressor.flush()
    import cramjam

    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(payload))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(payload))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(payload))
    raise ValueError(f"unknown compression codec {codec}")


def recompressed(batch: bytes, codec: int) -> bytes:
    """The (checked) batch with its records compressed with `codec` instead,
    every header field kept (offsets, timestamps, producer id, epoch and
    sequence, transactional flag), as Kafka's broker recompresses a produced
    batch into its topic's compression.type."""
    header, records = decode_records(batch)
    out = bytearray()
    for r in records:
        encode_record(
            out, r.offset - header.base_offset, r.timestamp - header.base_timestamp,
            r.key, r.value, r.headers,
        )
    return assemble_batch(
        compress(codec, bytes(out)),
        attributes=(header.attributes & ~COMPRESSION_MASK) | codec,
        record_count=header.record_count,
        last_offset_delta=header.last_offset_delta,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )


def assemble_batch(
    payload: bytes,
    *,
    attributes: int,
    record_count: int,
    last_offset_delta: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """A batch v2 around `payload` (the records, compressed as `attributes`
    says) with the header fields as given and a correct CRC: what any
    producer, honest or not, can put on the wire."""
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            record_count,
        )
    )
    batch = header + payload
    crc = int(_crc32c.crc32c(memoryview(batch)[_ATTRIBUTES_OFFSET:]))
    struct.pack_into(">I", batch, _CRC_OFFSET, crc)
    # The length the header says is the batch's (any other field may lie:
    # a dishonest producer's batch is built here too).
    assert len(batch) == batch_length + LOG_OVERHEAD, (base_offset, len(batch), batch_length)
    return bytes(batch)


def _decompress(codec: int, payload: bytes | memoryview, limit: int) -> bytes | memoryview:
    """The records of a batch, decompressed to at most `limit` bytes (more
    is DecompressedTooLargeError, found without inflating past the limit);
    anything a decompressor refuses is CorruptBatchError."""
    if codec == COMPRESSION_NONE:
        return payload
    if codec == COMPRESSION_GZIP:
        return _gunzip(payload, limit)
    if codec not in (COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD):
        raise CorruptBatchError(f"unknown compression codec {codec}")
    try:
        import cramjam
    except ImportError as exc:
        raise CorruptBatchError(
            f"compression codec {codec} needs the 'cramjam' package to decode"
        ) from exc
    try:
        if codec == COMPRESSION_SNAPPY:
            return _unsnappy(cramjam, bytes(payload), limit)
        module = cramjam.lz4 if codec == COMPRESSION_LZ4 else cramjam.zstd
        return _decompress_bounded(module.decompress_into, bytes(payload), limit)
    except CorruptBatchError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and kin
        raise CorruptBatchError(f"compressed records do not decompress: {exc}") from exc


def _too_large(limit: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"records take more than {limit} bytes decompressed")


def _gunzip(payload: bytes | memoryview, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=47)
    try:
        out = inflater.decompress(bytes(payload), limit + 1)
    except zlib.error as exc:
        raise CorruptBatchError(f"gzip records do not decompress: {exc}") from exc
    if len(out) > limit:
        raise _too_large(limit)
    if not inflater.eof:
        raise CorruptBatchError("gzip records end before their stream does")
    return out


def _unsnappy(cramjam: object, raw: bytes, limit: int) -> bytes:
    # Kafka's Java client writes xerial-framed snappy; librdkafka writes raw.
    snappy = cramjam.snappy  # type: ignore[attr-defined]
    chunks = [raw]
    if raw.startswith(b"\x82SNAPPY\x00"):
        chunks, pos = [], 16
        while pos < len(raw):
            if pos + 4 > len(raw):
                raise CorruptBatchError("xerial snappy chunk length runs past the batch")
            (size,) = struct.unpack_from(">i", raw, pos)
            if size < 0 or pos + 4 + size > len(raw):
                raise CorruptBatchError("xerial snappy chunk runs past the batch")
            chunks.append(raw[pos + 4 : pos + 4 + size])
            pos += 4 + size
    out = bytearray()
    for chunk in chunks:
        if len(out) + int(snappy.decompress_raw_len(chunk)) > limit:
            raise _too_large(limit)
        out += bytes(snappy.decompress_raw(chunk))
    return bytes(out)


def _decompress_bounded(decompress_into: object, raw: bytes, limit: int) -> bytes:
    """Decompresses into buffers that double from a guess up to limit + 1
    bytes: a stream that does not fit in that is too large, and no attempt
    inflates more than the buffer it writes into."""
    size = min(limit + 1, max(64 * 1024, 8 * len(raw)))
    while True:
        out = bytearray(size)
        try:
            n = int(decompress_into(raw, out))  # type: ignore[operator]
        except Exception as exc:
            text = str(exc)
            full = any(m in text for m in ("whole buffer", "smaller than required", "too small"))
            if not full:
                raise CorruptBatchError(f"compressed records do not decompress: {exc}") from exc
            if size > limit:
                raise _too_large(limit) from exc
            size = min(limit + 1, size * 2)
            continue
        if n > limit:
            raise _too_large(limit)
        if n < size:
            return bytes(memoryview(out)[:n])
        if size > limit:
            raise _too_large(limit)
        size = min(limit + 1, size * 2)  # filled exactly: there may be more


def decode_records(
    batch: bytes | memoryview,
    position: int = 0,
    max_decompressed: int = MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Decodes every record of the (CRC-checked) batch at `position`,
    inflating at most `max_decompressed` bytes of compressed records."""
    header = check_batch(batch, position)
    data = _records_bytes(batch, position, header, max_decompressed)
    try:
        return header, _decode(data, header)
    except IndexError as exc:
        raise CorruptBatchError("a record runs past the end of the batch") from exc


def _records_bytes(
    batch: bytes | memoryview, position: int, header: BatchHeader, limit: int
) -> bytes:
    payload = memoryview(batch)[position + HEADER_SIZE : position + header.size_bytes]
    raw = _decompress(header.compression, payload, limit)
    return raw if isinstance(raw, bytes) else bytes(raw)


def _decode(data: bytes, header: BatchHeader) -> list[Record]:
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
        elif data[pos + 1] < 0x80:
            v = (b & 0x7F) | (data[pos + 1] << 7)
            length, pos = (v >> 1) ^ -(v & 1), pos + 2
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
            if header_count < 0:
                raise CorruptBatchError(f"record has {header_count} headers")
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
    return records


class CheckedBatch(NamedTuple):
    header: BatchHeader
    # The smallest and largest timestamp of its records (CreateTime batches:
    # each record's own; LogAppendTime: the batch's).
    min_timestamp: int
    max_timestamp: int


def check_records(
    batch: bytes | memoryview,
    position: int = 0,
    *,
    max_decompressed: int,
    produced: bool,
    require_keys: bool = False,
    timestamp_range: tuple[int, int] | None = None,
) -> CheckedBatch:
    """Reads every record of the (CRC-checked) batch at `position` as Kafka's
    broker does before it stores one, without keeping them: lengths and
    varints that stay inside their record, no bytes after the last record,
    and compressed records that fit in `max_decompressed` bytes. A batch a
    producer wrote (`produced`) must also hold `record_count` records with
    offset deltas 0, 1, 2, ... (a batch copied from another log may have gaps,
    as compaction leaves them: its deltas must only rise within the batch's
    range). With `require_keys` (a compacted topic) a record without a key
    is refused, as Kafka's broker refuses it; with `timestamp_range` (first,
    last), a record whose timestamp lies outside it (a record without one,
    -1, is not checked, as Kafka). Raises CorruptBatchError,
    InvalidRecordError or DecompressedTooLargeError naming what is wrong; a
    rule one record breaks is checked on every record and the refusal names
    each record at fault (`record_errors`), InvalidTimestampError when any
    is a timestamp's."""
    header = check_batch(batch, position)
    last = header.last_offset_delta
    count = header.record_count
    if produced and count != last + 1:
        raise InvalidRecordError(f"batch claims {count} records but its offsets span {last + 1}")
    if count > last + 1:
        raise InvalidRecordError(f"batch claims {count} records in an offset range of {last + 1}")
    data = _records_bytes(batch, position, header, max_decompressed)
    errors: list[tuple[RecordError, bool]] = []
    bounds = None
    if timestamp_range is not None and not header.log_append_time:
        bounds = (header.base_timestamp, *timestamp_range)
    try:
        pos, low, high = _walk_records(data, count, last, produced, require_keys, bounds, errors)
    except IndexError as exc:
        raise CorruptBatchError("a record runs past the end of the batch") from exc
    if pos != len(data):
        raise InvalidRecordError(f"{len(data) - pos} bytes follow the batch's last record")
    if errors:
        raise _record_errors_refusal(
            [e for e, _ in errors], any(stamp for _, stamp in errors)
        )
    if header.log_append_time or count == 0:
        return CheckedBatch(header, header.max_timestamp, header.max_timestamp)
    return CheckedBatch(header, header.base_timestamp + low, header.base_timestamp + high)


def _walk_records(
    data: bytes,
    count: int,
    last: int,
    produced: bool,
    require_keys: bool,
    bounds: tuple[int, int, int] | None,
    errors: list[tuple[RecordError, bool]],
) -> tuple[int, int, int]:
    """`check_records`' walk over the records' bytes: every field of every
    record read, nothing kept. Returns (the position after the last record,
    the smallest and largest timestamp delta); the records that break a
    rule of their own (an offset delta, a missing key, a timestamp outside
    `bounds`: base timestamp, first, last) are added to `errors` (with
    whether it is the timestamp) and the walk goes on. Varints of one or two
    bytes (almost all lengths, deltas and counts) are decoded inline: this
    loop runs once per record of every batch stored."""
    size = len(data)
    read_varint = _read_varint
    skip = _skip_nullable
    pos, previous = 0, -1
    low, high = 1 << 63, -(1 << 63)
    for i in range(count):
        if pos >= size:
            raise InvalidRecordError(f"batch claims {count} records but holds {i}")
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif data[pos + 1] < 0x80:
            v = (b & 0x7F) | (data[pos + 1] << 7)
            length, pos = (v >> 1) ^ -(v & 1), pos + 2
        else:
            length, pos = read_varint(data, pos)
        record_end = pos + length
        if length < 0 or record_end > size:
            raise CorruptBatchError(f"record {i}'s length runs past the end of the batch")
        p = pos + 1  # after the attributes byte
        b = data[p]
        if b < 0x80:
            ts, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            v = (b & 0x7F) | (data[p + 1] << 7)
            ts, p = (v >> 1) ^ -(v & 1), p + 2
        else:
            ts, p = read_varint(data, p)
        if ts < low:
            low = ts
        if ts > high:
            high = ts
        b = data[p]
        if b < 0x80:
            delta, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            v = (b & 0x7F) | (data[p + 1] << 7)
            delta, p = (v >> 1) ^ -(v & 1), p + 2
        else:
            delta, p = read_varint(data, p)
        if delta != i and (produced or delta <= previous or delta > last):
            errors.append(
                (
                    RecordError(
                        i,
                        f"record {i} has offset delta {delta}"
                        + (
                            f", not {i}"
                            if produced
                            else f" after {previous} (batch range 0..{last})"
                        ),
                    ),
                    False,
                )
            )
        previous = delta
        b = data[p]  # the key: null (zigzag -1) or a length of one or two bytes
        if b == 1:
            if require_keys and not (errors and errors[-1][0].batch_index == i):
                errors.append(
                    (RecordError(i, "Compacted topic cannot accept message without key"), False)
                )
            p += 1
        elif b < 0x80 and not b & 1:
            p += 1 + (b >> 1)
        else:
            p = skip(data, p)
        b = data[p]  # the value, the same way
        if b == 1:
            p += 1
        elif b < 0x80 and not b & 1:
            p += 1 + (b >> 1)
        elif not b & 1 and data[p + 1] < 0x80:
            p += 2 + ((b & 0x7F) | (data[p + 1] << 7)) // 2
        else:
            p = skip(data, p)
        b = data[p]
        if b == 0:
            p += 1
        else:
            headers, p = read_varint(data, p)
            if headers < 0:
                raise CorruptBatchError(f"record {i} has {headers} headers")
            for _ in range(headers):
                p = skip(data, skip(data, p))
        if p != record_end:
            raise CorruptBatchError(f"record {i}'s length does not match its fields")
        pos = p
        if bounds is not None and not (errors and errors[-1][0].batch_index == i):
            # One error a record, the first it breaks (Kafka's order: its
            # key, then its timestamp); -1 is a record without a timestamp.
            stamp = bounds[0] + ts
            if stamp != -1 and not bounds[1] <= stamp <= bounds[2]:
                message = (
                    f"Timestamp {stamp} of record {i} is out of range. The timestamp should "
                    f"be within [{bounds[1]}, {bounds[2]}] (the topic's "
                    "message.timestamp.before.max.ms and message.timestamp.after.max.ms "
                    "around the broker's time)"
                )
                errors.append((RecordError(i, message), True))
    return pos, low, high


def _skip_nullable(data: bytes, pos: int) -> int:
    length, pos = _read_varint(data, pos)
    if length < -1 or pos + max(length, 0) > len(data):
        raise CorruptBatchError(f"a record field of length {length} does not fit the batch")
    return pos + max(length, 0)


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
