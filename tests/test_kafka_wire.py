"""linkd's Kafka listener at the wire: version negotiation, unsupported and
malformed requests, pipelining order, acks=0, long-poll fetches, error messages,
and the CLI's --kafka-listen handling. Requests are encoded with kio, the same
codec the listener uses, over plain sockets."""

from __future__ import annotations

import io
import random
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as K
from kio.serial import entity_writer
from kio.static.primitive import Records

from ccr.v1 import admin_pb2, admin_pb2_grpc
from linkd.core import records as rb
from linkd.kafka import codec, guard
from linkd.kafka.server import SUPPORTED
from tests.harness import ROOT, Daemon, _env, free_port
from tests.kafka_raw import RawClient


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, int]]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("kafka-wire")) / "data"
    with Daemon("W", data, extra_args=["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
        yield daemon, port


@pytest.fixture(scope="module")
def kafka_port(wire_daemon: tuple[Daemon, int]) -> Iterator[int]:
    _daemon, port = wire_daemon
    client = RawClient(port)
    # The records carry a fixed CreateTime (`_batch`, November 2023): with the
    # default 7-day retention the daemon's retention may delete them as soon as
    # they are written (as Kafka's would), and a fetch of offset 0 would then
    # answer OFFSET_OUT_OF_RANGE, now and then. These topics keep everything.
    keep = [{"name": "retention.ms", "value": "-1"}]
    created = client.call(19, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": keep} for name in ("wire", "wire-wait", "wire-acks0", "wire-offsets")]})
    assert [t.error_code for t in created.topics] == [K.none] * 4
    client.close()
    yield port


@pytest.fixture
def client(kafka_port: int) -> Iterator[RawClient]:
    c = RawClient(kafka_port)
    yield c
    c.close()


def metadata_ok(client: RawClient) -> None:
    """The connection still serves requests."""
    md = client.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
    assert md.cluster_id == "W"


# -- versions ----------------------------------------------------------------------------


def test_api_versions_lists_every_served_api(client: RawClient) -> None:
    resp = client.call(18, 3, {"client_software_name": "raw", "client_software_version": "1"})
    assert resp.error_code == K.none
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert served == {key: (api.min_version, api.max_version) for key, api in SUPPORTED.items()}


def test_api_versions_of_an_unknown_version_answers_v0_with_the_list(client: RawClient) -> None:
    client.correlation += 1
    # ApiVersions v99: header v2 is a guess for the client; the listener reads
    # only the fixed part and answers in v0, as Kafka does.
    payload = struct.pack(">hhi", 18, 99, client.correlation) + b"\xff\xff\x00"
    client.send_raw(struct.pack(">i", len(payload)) + payload)
    resp = client.read(18, 0, client.correlation, header_v0=True)
    assert resp.error_code == K.unsupported_version
    assert {k.api_key for k in resp.api_keys} == set(SUPPORTED)
    metadata_ok(client)


def test_an_unsupported_api_answers_unsupported_version_and_keeps_the_connection(
    client: RawClient,
) -> None:
    # ConsumerGroupHeartbeat (KIP-848): kio knows it, the listener does not serve it.
    resp = client.call(68, 0, {"group_id": "g", "member_id": "m", "member_epoch": 0,
                               "topic_partitions": None})
    assert resp.error_code == K.unsupported_version
    assert "not supported" in (resp.error_message or "")
    # An unsupported version of a served API.
    produce_v12 = client.call(0, 12, {"acks": 1, "timeout": 1000, "topic_data": []})
    assert produce_v12.responses == ()
    metadata_ok(client)


def test_a_request_with_no_known_response_shape_closes_the_connection_after_earlier_answers(
    kafka_port: int,
) -> None:
    """An API key nobody knows (or a version newer than any schema): no body
    the client could decode exists, so the connection closes, as Kafka closes
    it, once the answers to the requests before it are written."""
    client = RawClient(kafka_port)
    correlation, metadata = client.frame(3, 12, {
        "topics": None, "include_topic_authorized_operations": False})
    client.correlation += 1
    payload = struct.pack(">hhi", 999, 0, client.correlation) + b"\x00\x00"
    client.send_raw(metadata + struct.pack(">i", len(payload)) + payload)
    assert client.read(3, 12, correlation).cluster_id == "W"
    with pytest.raises((ConnectionError, OSError)):
        client.read_frame()
    client.close()
    fresh = RawClient(kafka_port)
    metadata_ok(fresh)
    fresh.close()


def test_a_malformed_body_answers_invalid_request(client: RawClient) -> None:
    client.correlation += 1
    # FindCoordinator v3 (flexible): header, then a string length past the end.
    payload = struct.pack(">hhi", 10, 3, client.correlation) + b"\x00\x00\x00" + b"\x7f"
    client.send_raw(struct.pack(">i", len(payload)) + payload)
    resp = client.read(10, 3, client.correlation)
    assert resp.error_code == K.invalid_request
    metadata_ok(client)


def test_a_bad_frame_size_closes_only_that_connection(kafka_port: int) -> None:
    bad = RawClient(kafka_port)
    bad.send_raw(struct.pack(">i", -5))
    with pytest.raises((ConnectionError, OSError)):
        bad.read_frame()
    bad.close()
    good = RawClient(kafka_port)
    metadata_ok(good)
    good.close()


# -- ordering and waiting ----------------------------------------------------------------------


def _fetch_body(topic_id: Any, offset: int, max_wait_ms: int) -> dict[str, Any]:
    return {"max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def _topic_id(client: RawClient, name: str) -> Any:
    md = client.call(3, 12, {"topics": [{"name": name, "topic_id": None}],
                             "include_topic_authorized_operations": False})
    return md.topics[0].topic_id


def _batch(values: list[bytes]) -> bytes:
    return rb.build_batch([rb.RecordSpec(None, v, 1_700_000_000_000) for v in values])


def test_pipelined_requests_are_answered_in_order_and_acks_0_is_silent(
    client: RawClient,
) -> None:
    topic_id = _topic_id(client, "wire-acks0")
    frames = []
    # 1: a fetch that long-polls (no data yet); 2: produce acks=0 (no answer);
    # 3: metadata (answers at once but must wait for 1); 4: produce acks=1.
    c1, f1 = client.frame(1, 16, _fetch_body(topic_id, 0, 800))
    frames.append(f1)
    _c2, f2 = client.frame(0, 9, {"acks": 0, "timeout": 1000, "topic_data": [
        {"name": "wire-acks0", "partition_data": [{"index": 0, "records": _batch([b"zero"])}]}]})
    frames.append(f2)
    c3, f3 = client.frame(3, 12, {"topics": None, "include_topic_authorized_operations": False})
    frames.append(f3)
    c4, f4 = client.frame(0, 9, {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "wire-acks0", "partition_data": [{"index": 0, "records": _batch([b"one"])}]}]})
    frames.append(f4)
    client.send_raw(b"".join(frames))

    fetched = client.read(1, 16, c1)
    part = fetched.responses[0].partitions[0]
    assert part.error_code == K.none
    assert [r.value for _, h in rb.iter_batches(part.records)
            for r in rb.decode_records(part.records, _)[1]][:1] == [b"zero"]
    assert client.read(3, 12, c3).cluster_id == "W"
    produced = client.read(0, 9, c4)
    assert produced.responses[0].partition_responses[0].base_offset == 1


def test_an_acks_0_produce_is_applied_even_if_the_client_leaves_at_once(
    kafka_port: int, client: RawClient
) -> None:
    created = client.call(19, 7, {"topics": [
        {"name": "wire-leave", "num_partitions": 1, "replication_factor": 1,
         "assignments": [], "configs": []}]})
    assert created.topics[0].error_code == K.none
    for i in range(10):
        leaver = RawClient(kafka_port)
        _, versions = leaver.frame(18, 3, {"client_software_name": "x",
                                           "client_software_version": "1"})
        _, produce = leaver.frame(0, 9, {"acks": 0, "timeout": 1000, "topic_data": [
            {"name": "wire-leave",
             "partition_data": [{"index": 0, "records": _batch([f"gone-{i}".encode()])}]}]})
        leaver.send_raw(versions + produce)
        leaver.close()  # before any answer is read
    deadline = time.monotonic() + 10
    while True:
        listed = client.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "wire-leave", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        end = listed.topics[0].partitions[0].offset
        if end == 10 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert end == 10


def test_an_empty_fetch_waits_for_max_wait_ms(client: RawClient) -> None:
    topic_id = _topic_id(client, "wire-wait")
    started = time.monotonic()
    resp = client.call(1, 16, _fetch_body(topic_id, 0, 600))
    waited = time.monotonic() - started
    assert resp.responses[0].partitions[0].records in (b"", None)
    assert 0.5 <= waited < 5.0


def test_fetch_by_an_unknown_topic_id_answers_at_once(client: RawClient) -> None:
    import uuid

    started = time.monotonic()
    resp = client.call(1, 16, _fetch_body(uuid.UUID(int=12345), 0, 5000))
    assert time.monotonic() - started < 2.0
    assert resp.responses[0].partitions[0].error_code == K.unknown_topic_id


# -- refusals carry their reason ------------------------------------------------------------------


def test_produce_refusals_carry_an_explanatory_message(client: RawClient) -> None:
    resp = client.call(0, 9, {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": _batch([b"x"])}]},
        {"name": "wire", "partition_data": [{"index": 0, "records": b"garbage"}]},
    ]})
    unknown = resp.responses[0].partition_responses[0]
    assert unknown.error_code == K.unknown_topic_or_partition
    assert "does not exist" in unknown.error_message
    corrupt = resp.responses[1].partition_responses[0]
    assert corrupt.error_code == K.corrupt_message
    assert corrupt.error_message.startswith("CORRUPT_MESSAGE")


def test_writes_into_a_reserved_namespace_are_authorization_failures(
    wire_daemon: tuple[Daemon, int], client: RawClient
) -> None:
    daemon, _port = wire_daemon
    created = client.call(19, 7, {"topics": [
        {"name": "rsv-orders", "num_partitions": 1, "replication_factor": 1,
         "assignments": [], "configs": []}]})
    assert created.topics[0].error_code == K.none
    channel = grpc.insecure_channel(daemon.bootstrap)
    with channel:
        stub = admin_pb2_grpc.AdminStub(channel)
        for rtype in (admin_pb2.RESOURCE_TYPE_TOPIC, admin_pb2.RESOURCE_TYPE_GROUP):
            stub.CreateNamespace(admin_pb2.CreateNamespaceRequest(
                type=rtype, prefix="rsv-", reserved=True), timeout=10)

    produced = client.call(0, 9, {"acks": -1, "timeout": 1000, "topic_data": [
        {"name": "rsv-orders", "partition_data": [{"index": 0, "records": _batch([b"x"])}]}]})
    refusal = produced.responses[0].partition_responses[0]
    assert refusal.error_code == K.topic_authorization_failed
    assert refusal.error_message.startswith("RESERVED_NAMESPACE: cannot produce to topic")
    create = client.call(19, 7, {"topics": [
        {"name": "rsv-new", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []}]})
    assert create.topics[0].error_code == K.topic_authorization_failed
    assert "reserved" in create.topics[0].error_message
    commit = client.call(8, 9, {"group_id": "rsv-group", "generation_id_or_member_epoch": -1,
                                "member_id": "", "topics": [
                                    {"name": "wire", "partitions": [
                                        {"partition_index": 0, "committed_offset": 0,
                                         "committed_metadata": ""}]}]})
    assert commit.topics[0].partitions[0].error_code == K.group_authorization_failed
    # Reading a reserved namespace stays allowed.
    listed = client.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "rsv-orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    assert listed.topics[0].partitions[0].error_code == K.none


def test_offset_delete_on_an_empty_group_and_on_an_active_one(client: RawClient) -> None:
    commit = client.call(8, 9, {"group_id": "wire-offsets-g", "generation_id_or_member_epoch": -1,
                                "member_id": "", "topics": [
                                    {"name": "wire-offsets", "partitions": [
                                        {"partition_index": 0, "committed_offset": 0,
                                         "committed_metadata": "m"}]}]})
    assert commit.topics[0].partitions[0].error_code == K.none
    deleted = client.call(47, 0, {"group_id": "wire-offsets-g", "topics": [
        {"name": "wire-offsets", "partitions": [{"partition_index": 0}]}]})
    assert deleted.error_code == K.none
    assert deleted.topics[0].partitions[0].error_code == K.none
    fetched = client.call(9, 8, {"groups": [{"group_id": "wire-offsets-g", "topics": None}],
                                 "require_stable": False})
    assert fetched.groups[0].topics == ()

    joined = client.call(11, 5, {"group_id": "wire-active", "session_timeout": 10_000,
                                 "rebalance_timeout": 10_000, "member_id": "",
                                 "protocol_type": "consumer",
                                 "protocols": [{"name": "range", "metadata": b""}]})
    assert joined.error_code == K.none
    refused = client.call(47, 0, {"group_id": "wire-active", "topics": [
        {"name": "wire-offsets", "partitions": [{"partition_index": 0}]}]})
    assert refused.topics[0].partitions[0].error_code == K.group_subscribed_to_topic
    left = client.call(13, 3, {"group_id": "wire-active",
                               "members": [{"member_id": joined.member_id}]})
    assert left.members[0].error_code == K.none


# -- the codec: every served version encodes, garbage never crashes ---------------------


def test_every_served_response_version_encodes_an_error_answer() -> None:
    for key, api in SUPPORTED.items():
        for version in range(api.min_version, api.max_version + 1):
            resp_cls = codec.response_class(key, version)
            assert resp_cls is not None, (api.name, version)
            assert codec.encode_response(1, codec.error_body(resp_cls, 35, "x"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(sorted(SUPPORTED)), body=st.binary(max_size=64))
def test_parse_request_raises_only_decode_error_on_garbage(key: int, body: bytes) -> None:
    api = SUPPORTED[key]
    frame = struct.pack(">hhi", key, api.max_version, 7) + body
    fixed = codec.peek_header(frame)
    assert fixed is not None
    try:
        codec.parse_request(frame, fixed)
    except codec.DecodeError:
        pass


st.register_type_strategy(Records, st.binary(max_size=24).map(Records))


SERVED_VERSIONS = [(key, version) for key, api in sorted(SUPPORTED.items())
                   for version in range(api.min_version, api.max_version + 1)]


@pytest.mark.parametrize(("key", "version"), SERVED_VERSIONS)
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_the_length_guard_accepts_every_valid_request(
    key: int, version: int, data: st.DataObject
) -> None:
    """kio-encoded random requests of every served version pass the guard and
    decode back to themselves."""
    req_cls = codec.request_class(key, version)
    assert req_cls is not None
    body = data.draw(st.from_type(req_cls))
    header_cls = req_cls.__header_schema__
    header = codec.make(header_cls, {"request_api_key": key, "request_api_version": version,
                                     "correlation_id": 1, "client_id": "guard"})
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(req_cls)(buf, body)
    frame = buf.getvalue()
    guard.check_request(frame, req_cls)  # must not raise FrameError
    fixed = codec.peek_header(frame)
    assert fixed is not None
    try:
        decoded = codec.parse_request(frame, fixed).body
    except codec.DecodeError as exc:
        # kio writes some values its own reader refuses (timedeltas beyond
        # its range); that is kio's limit, not the guard's.
        assert "overflow" in str(exc), exc
        return
    assert decoded == body


def test_an_array_length_beyond_the_frame_is_refused_before_decoding() -> None:
    # Metadata v12: header, then topics as a compact array claiming 2**31 entries.
    header = struct.pack(">hhi", 3, 12, 5) + b"\xff\xff\x00"
    frame = header + b"\x80\x80\x80\x80\x08" + b"\x00\x00"
    fixed = codec.peek_header(frame)
    assert fixed is not None
    with pytest.raises(codec.DecodeError, match="does not fit"):
        codec.parse_request(frame, fixed)


LONG_POLLS = frozenset({1, 11, 14})  # Fetch, JoinGroup, SyncGroup may wait by design


def test_garbage_bodies_for_every_api_are_answered_in_order(
    daemon_factory: Any,
) -> None:
    """Random bodies behind valid headers, for every served API at its lowest
    and highest version: each gets an answer with its correlation id (or none,
    for a Produce that decoded as acks=0), and the connection stays usable. A
    Metadata request after each one proves the order and the connection."""
    port = free_port()
    daemon_factory("F", extra_args=["--kafka-listen", f"127.0.0.1:{port}"])
    client = RawClient(port)
    rng = random.Random(986)
    sent = 0
    for key, api in sorted(SUPPORTED.items()):
        if key in LONG_POLLS:
            continue
        for version in sorted({api.min_version, api.max_version}):
            for _ in range(4):
                client.correlation += 1
                garbage_id = client.correlation
                body = rng.randbytes(rng.randrange(0, 48))
                header_cls = codec.request_class(key, version).__header_schema__  # type: ignore[union-attr]
                buf = io.BytesIO()
                entity_writer(header_cls)(buf, codec.make(header_cls, {
                    "request_api_key": key, "request_api_version": version,
                    "correlation_id": garbage_id, "client_id": "fuzz"}))
                frame = buf.getvalue() + body
                ping_id, ping = client.frame(3, 12, {"topics": [],
                                                     "include_topic_authorized_operations": False})
                client.send_raw(struct.pack(">i", len(frame)) + frame + ping)
                first = struct.unpack_from(">i", client.read_frame(), 0)[0]
                if first == garbage_id:
                    first = struct.unpack_from(">i", client.read_frame(), 0)[0]
                else:
                    assert key == 0, f"no answer to api {key} v{version} body {body.hex()}"
                assert first == ping_id, f"api {key} v{version} body {body.hex()}"
                sent += 1
    assert sent > 150
    client.close()


# -- the command line ---------------------------------------------------------------------------


def _linkd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linkd", "--cluster-id", "C", "--listen",
         f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True, text=True, timeout=60, cwd=str(ROOT), env=_env(), check=False)


def test_kafka_listen_port_in_use_is_a_clear_start_up_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _linkd(tmp_path, "--kafka-listen", f"127.0.0.1:{port}")
    assert done.returncode == 3
    assert f"cannot listen for Kafka clients on 127.0.0.1:{port}" in done.stderr


def test_kafka_listen_must_be_host_port(tmp_path: Path) -> None:
    done = _linkd(tmp_path, "--kafka-listen", "nonsense")
    assert done.returncode == 2
    assert "--kafka-listen 'nonsense' is not HOST:PORT" in done.stderr


def test_kafka_listen_from_the_config_file_and_a_clean_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "linkd.toml"
    config.write_text(f'kafka_listen = "127.0.0.1:{port}"\n')
    daemon = Daemon("T", tmp_path / "data", extra_args=["--config", str(config)])
    with daemon:
        client = RawClient(port)
        md = client.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
        assert md.cluster_id == "T"
        assert [(b.host, b.port) for b in md.brokers] == [("127.0.0.1", port)]
        # a fetch is long-polling while the daemon is told to stop
        c, frame = client.frame(1, 16, {**_fetch_body(None, 0, 30_000), "topics": []})
        client.send_raw(frame)
        started = time.monotonic()
        assert daemon.terminate() == 0
        assert time.monotonic() - started < 10
        client.close()
        del c
