"""Records are checked before they are stored, as Kafka's broker checks them:
batches that lie about their records, records that do not parse, and
decompression bombs are refused through the Kafka listener and over gRPC,
and leave nothing behind; the record decoder keeps its error contract under
fuzzing; a follower refuses a copied batch whose CRC or header lies, and
stores the records its source checked without walking them again."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kio.schema.errors import ErrorCode as K

from ccr.v1 import cluster_pb2, cluster_pb2_grpc
from linkd.core import records as rb
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.replication import append_replica, create_replica_topic
from tests.harness import Daemon, free_port
from tests.kafka_raw import RawClient

TS = 1_700_000_000_000


def _records(values: list[bytes], deltas: list[int] | None = None) -> bytes:
    """The records' bytes as a batch holds them (uncompressed)."""
    out = bytearray()
    for i, value in enumerate(values):
        rb.encode_record(out, i if deltas is None else deltas[i], 0, None, value)
    return bytes(out)


def _lying(payload: bytes, count: int, last_delta: int, codec: int = rb.COMPRESSION_NONE) -> bytes:
    return rb.assemble_batch(
        payload,
        attributes=codec,
        record_count=count,
        last_offset_delta=last_delta,
        base_timestamp=TS,
        max_timestamp=TS,
    )


def _bomb(codec: int, inflated: int = 48 * 1024 * 1024) -> bytes:
    """One record whose value is `inflated` zero bytes, compressed: a few KB."""
    payload = rb.compress(codec, _records([bytes(inflated)]))
    return _lying(payload, 1, 0, codec)


# Each hostile batch, the Kafka error it earns, and words its message holds.
HOSTILE: dict[str, tuple[bytes, int, str]] = {
    "claims 1 record, holds 3": (
        _lying(_records([b"a", b"b", b"c"]), 1, 0), K.invalid_record, "follow the batch's last"
    ),
    "claims 10 records, holds 1": (
        _lying(_records([b"a"]), 10, 9), K.invalid_record, "claims 10 records but holds 1"
    ),
    "offset deltas out of order": (
        _lying(_records([b"a", b"b", b"c"], [0, 2, 1]), 3, 2), K.invalid_record, "offset delta"
    ),
    "count against the delta range": (
        _lying(_records([b"a", b"b"]), 2, 4), K.invalid_record, "last offset delta 4"
    ),
    "garbage under a valid CRC": (
        _lying(bytes(range(200, 256)) * 3, 3, 2), K.corrupt_message, "CORRUPT_MESSAGE"
    ),
    "gzip that is not gzip": (
        _lying(b"\x1f\x8b not really", 1, 0, rb.COMPRESSION_GZIP), K.corrupt_message, "gzip"
    ),
    "zstd bomb": (_bomb(rb.COMPRESSION_ZSTD), K.message_too_large, "decompressed"),
    "gzip bomb": (_bomb(rb.COMPRESSION_GZIP), K.message_too_large, "decompressed"),
    "lz4 bomb": (_bomb(rb.COMPRESSION_LZ4), K.message_too_large, "decompressed"),
    # snappy inflates at most about 21:1, so its bomb is smaller
    "snappy bomb": (
        _bomb(rb.COMPRESSION_SNAPPY, 16 * 1024 * 1024), K.message_too_large, "decompressed"
    ),
}


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, RawClient]]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("validation")) / "data"
    with Daemon("V", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
        client = RawClient(port)
        created = client.call(19, 7, {"topics": [
            {"name": "checked", "num_partitions": 1, "replication_factor": 1,
             "assignments": [], "configs": []}]})
        assert created.topics[0].error_code == K.none
        yield daemon, client
        client.close()


def _produce(client: RawClient, batch: bytes) -> Any:
    resp = client.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "checked", "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0]


def _pid(daemon: Daemon) -> int:
    assert daemon.pid is not None
    return daemon.pid


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_batch_is_refused_over_the_kafka_listener_and_stores_nothing(
    wire: tuple[Daemon, RawClient], case: str
) -> None:
    daemon, client = wire
    batch, code, words = HOSTILE[case]
    before = _rss_kib(_pid(daemon))
    refused = _produce(client, batch)
    assert (refused.error_code, words in refused.error_message) == (code, True), (
        refused.error_message
    )
    # Bombs are refused without being inflated: the daemon grew by far less
    # than the 48 MiB the record would take.
    assert _rss_kib(_pid(daemon)) - before < 16 * 1024
    # Nothing was stored: the next good record lands where it would have.
    good = _produce(client, rb.build_batch([rb.RecordSpec(None, b"ok", TS)]))
    end = client.call(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "checked", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                             "timestamp": -1}]}]})
    assert good.error_code == K.none
    assert end.topics[0].partitions[0].offset == good.base_offset + 1


def test_a_compressed_batch_of_honest_records_is_stored(wire: tuple[Daemon, RawClient]) -> None:
    _daemon, client = wire
    specs = [rb.RecordSpec(f"k{i}".encode(), b"v" * 500, TS + i) for i in range(40)]
    for codec in (rb.COMPRESSION_GZIP, rb.COMPRESSION_SNAPPY, rb.COMPRESSION_LZ4,
                  rb.COMPRESSION_ZSTD):
        assert _produce(client, rb.build_batch(specs, compression=codec)).error_code == K.none


def test_a_lying_batch_is_refused_over_grpc_with_invalid_record(
    wire: tuple[Daemon, RawClient],
) -> None:
    daemon, _client = wire
    with grpc.insecure_channel(daemon.bootstrap) as channel:
        stub = cluster_pb2_grpc.ClusterStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Produce(cluster_pb2.ProduceRequest(
                topic="checked", partition=0, batch=HOSTILE["claims 1 record, holds 3"][0],
                acks=-1), timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("INVALID_RECORD: ")


@pytest.mark.parametrize(("key", "value"), [
    ("max.message.bytes", "2147483648"), ("segment.bytes", "9999999999"),
    ("min.insync.replicas", "-1")])
def test_an_int_config_beyond_kafka_s_range_is_refused(
    wire: tuple[Daemon, RawClient], key: str, value: str
) -> None:
    _daemon, client = wire
    created = client.call(19, 7, {"topics": [
        {"name": f"big-{key.replace('.', '-')}", "num_partitions": 1, "replication_factor": 1,
         "assignments": [], "configs": [{"name": key, "value": value}]}]})
    assert created.topics[0].error_code == K.invalid_config
    assert "2147483647" in (created.topics[0].error_message or "") or key == "min.insync.replicas"


# -- the decoder's contract, fuzzed in process -------------------------------------------


def _mutants(rng: random.Random, batch: bytes) -> Iterator[bytes]:
    """Hostile variants of a valid batch, each with a valid CRC (else the CRC
    check would refuse them all before any record is read)."""
    header = rb.parse_header(batch)
    payload = bytearray(batch[rb.HEADER_SIZE:])
    kind = rng.randrange(4)
    if kind == 0 and payload:  # flip bytes of the records
        for _ in range(rng.randint(1, 4)):
            payload[rng.randrange(len(payload))] = rng.randrange(256)
    elif kind == 1:  # cut or extend the records
        payload = payload[: rng.randrange(len(payload) + 1)] + bytes(rng.randrange(3))
    elif kind == 2:  # random bytes where the records go
        payload = bytearray(rng.randbytes(rng.randrange(64)))
    count = header.record_count if rng.random() < 0.5 else rng.randint(-2, 40)
    last = header.last_offset_delta if rng.random() < 0.5 else rng.randint(0, 40)
    attributes = header.attributes if kind != 3 else rng.randrange(8)
    yield rb.assemble_batch(bytes(payload), attributes=attributes, record_count=count,
                            last_offset_delta=last, base_timestamp=TS, max_timestamp=TS)


def test_the_record_decoder_raises_only_corrupt_batch_error_on_fuzzed_batches() -> None:
    rng = random.Random(20261126)
    seeds = [
        rb.build_batch([rb.RecordSpec(rng.randbytes(rng.randrange(4)) or None,
                                      rng.randbytes(rng.randrange(60)), TS + i,
                                      (("h", rng.randbytes(3)),) if i % 2 else ())
                        for i in range(rng.randint(1, 6))], compression=codec)
        for codec in range(5) for _ in range(4)
    ]
    outcomes = {"refused": 0, "accepted": 0}
    for _ in range(6000):
        for mutant in _mutants(rng, rng.choice(seeds)):
            for check in (
                lambda b: rb.decode_records(b, max_decompressed=4096),
                lambda b: rb.check_records(b, max_decompressed=4096, produced=True),
                lambda b: rb.check_records(b, max_decompressed=4096, produced=False),
            ):
                try:
                    check(mutant)
                    outcomes["accepted"] += 1
                except rb.CorruptBatchError:
                    outcomes["refused"] += 1
    assert outcomes["refused"] > 1000 and outcomes["accepted"] > 100, outcomes


# -- a follower checks what Kafka's replica checks ------------------------------------------


def _follower() -> ClusterState:
    state = ClusterState("B")
    create_replica_topic(state, "orders", 1, {}, "t-1")
    append_replica(state, "orders", 0, rb.build_batch([rb.RecordSpec(None, b"a", TS)]), 0)
    return state


def _crc_lies(batch: bytes) -> bytes:
    """The batch with one byte of its records flipped, the CRC left as it was."""
    return batch[:-1] + bytes([batch[-1] ^ 0xFF])


def _codec(batch: bytes, codec: int) -> bytes:
    """The batch with another compression codec in its attributes, CRC recomputed
    (a header that lies while its CRC is right)."""
    out = bytearray(batch)
    attributes = int.from_bytes(out[21:23], "big")
    out[21:23] = ((attributes & ~rb.COMPRESSION_MASK) | codec).to_bytes(2, "big")
    out[17:21] = rb.compute_crc(bytes(out), 0, len(out)).to_bytes(4, "big")
    return bytes(out)


FOLLOWER_REFUSES: dict[str, tuple[bytes, ErrorCode, str]] = {
    "CRC that does not match the bytes": (
        _crc_lies(rb.build_batch([rb.RecordSpec(None, b"bcd", TS)])),
        ErrorCode.CORRUPT_MESSAGE,
        "CRC32C mismatch",
    ),
    "more records than its offset range holds": (
        _lying(_records([b"a", b"b", b"c"]), 3, 1), ErrorCode.INVALID_RECORD, "claims 3 records"
    ),
    "an unknown compression codec": (
        _codec(rb.build_batch([rb.RecordSpec(None, b"b", TS)]), 6),
        ErrorCode.CORRUPT_MESSAGE,
        "codec 6",
    ),
}


@pytest.mark.parametrize("case", sorted(FOLLOWER_REFUSES))
def test_a_follower_refuses_a_fetched_batch_whose_crc_or_header_lies(case: str) -> None:
    batch, code, words = FOLLOWER_REFUSES[case]
    state = _follower()
    with pytest.raises(ClusterError) as refused:
        append_replica(state, "orders", 0, rb.with_base_offset(batch, 1), 0)
    assert refused.value.code is code, refused.value
    assert words in str(refused.value)
    assert state.partition("orders", 0).log_end_offset == 1


def test_a_follower_refuses_a_control_batch_that_holds_no_marker() -> None:
    state = _follower()
    not_a_marker = rb.assemble_batch(
        _records([b"x"]),
        attributes=rb.CONTROL_FLAG,
        record_count=1,
        last_offset_delta=0,
        base_timestamp=TS,
        max_timestamp=TS,
    )
    with pytest.raises(ClusterError) as refused:
        append_replica(state, "orders", 0, rb.with_base_offset(not_a_marker, 1), 0)
    assert refused.value.code is ErrorCode.CORRUPT_MESSAGE
    assert state.partition("orders", 0).log_end_offset == 1


def test_a_follower_does_not_walk_the_records_its_source_checked() -> None:
    """The decision of docs/security.md ("What a follower checks"): a batch
    whose CRC and header hold is stored as its source sent it, unread, as
    Kafka's replica stores it; the source refused records that lie when its
    producer sent them (the HOSTILE cases above, over both listeners)."""
    state = _follower()
    batch, _code, _words = HOSTILE["claims 1 record, holds 3"]
    append_replica(state, "orders", 0, rb.with_base_offset(batch, 1), 0)
    assert state.partition("orders", 0).log_end_offset == 2


def test_check_records_reads_what_decode_records_reads() -> None:
    """The checking walk and the decoder agree on every valid batch: the
    walk's fast paths (one- and two-byte varints) take no shortcut."""
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 40)
        base = rng.randint(0, 2**41)
        specs = [
            rb.RecordSpec(
                rng.choice([None, b"", rng.randbytes(rng.randrange(300))]),
                rng.choice([None, b"", rng.randbytes(rng.randrange(9000))]),
                base + rng.randint(-70_000, 70_000),
                tuple((f"h{j}", rng.choice([None, rng.randbytes(rng.randrange(200))]))
                      for j in range(rng.randrange(3))),
            )
            for _ in range(n)
        ]
        batch = rb.build_batch(specs, compression=rng.choice([0, 1]))
        checked = rb.check_records(batch, max_decompressed=1 << 22, produced=True)
        _header, records = rb.decode_records(batch)
        stamps = [r.timestamp for r in records]
        assert (checked.min_timestamp, checked.max_timestamp) == (min(stamps), max(stamps))
        assert [(r.key, r.value) for r in records] == [(s.key, s.value) for s in specs]
