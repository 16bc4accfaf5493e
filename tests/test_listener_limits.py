"""What a Kafka client can make the listener hold is bounded: announced but
unsent frames hold little, idle connections (half-sent frames included) are
closed, requests above socket.request.max.bytes close their connection, large
requests wait for request memory while small ones keep being served, and a
client that pipelines fetches without reading the answers does not have them
all built at once."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as K

from linkd.core import records as rb
from tests.harness import Daemon, free_port
from tests.kafka_raw import RawClient

MIB = 1024 * 1024
DEADLINE_S = 30.0


def _rss_kib(daemon: Daemon) -> int:
    assert daemon.pid is not None
    for line in Path(f"/proc/{daemon.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _daemon(tmp_path: Path, *args: str) -> tuple[Daemon, int]:
    port = free_port()
    daemon = Daemon("L", tmp_path / "data", extra_args=["--kafka-listen", f"127.0.0.1:{port}",
                                                         *args])
    return daemon, port


def _metadata_ok(port: int) -> None:
    client = RawClient(port)
    try:
        md = client.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
        assert md.cluster_id == "L"
    finally:
        client.close()


def _closed_by_server(sock: socket.socket) -> bool:
    """Polls (bounded) until the server closes `sock`."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if sock.recv(1) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


@pytest.fixture
def default_daemon(tmp_path: Path) -> Iterator[tuple[Daemon, int]]:
    daemon, port = _daemon(tmp_path)
    with daemon:
        yield daemon, port


def test_connections_announcing_100_mib_frames_hold_little(
    default_daemon: tuple[Daemon, int],
) -> None:
    daemon, port = default_daemon
    _metadata_ok(port)
    before = _rss_kib(daemon)
    socks = []
    for _ in range(8):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(struct.pack(">i", 100 * MIB - 1) + b"\x00\x03\x00\x0c\x00\x00\x00\x01")
        socks.append(sock)
    _metadata_ok(port)  # every frame above was read as far as it went
    grown_kib = _rss_kib(daemon) - before
    for sock in socks:
        sock.close()
    assert grown_kib < 64 * 1024, f"the daemon grew by {grown_kib} KiB"
    _metadata_ok(port)


def test_a_half_sent_frame_and_an_idle_connection_are_closed_after_the_idle_time(
    tmp_path: Path,
) -> None:
    daemon, port = _daemon(tmp_path, "--connections-max-idle-ms", "300")
    with daemon:
        half = socket.create_connection(("127.0.0.1", port))
        half.sendall(struct.pack(">i", 1000) + b"\x00\x03\x00\x0c")
        idle = socket.create_connection(("127.0.0.1", port))
        assert _closed_by_server(half)
        assert _closed_by_server(idle)
        half.close()
        idle.close()
        assert "closing an idle connection" in daemon.stderr_text()
        # A connection that keeps talking stays open past the idle time.
        busy = RawClient(port)
        for _ in range(8):
            busy.call(3, 12, {"topics": None, "include_topic_authorized_operations": False})
            time.sleep(0.1)  # traffic every 100 ms: under the 300 ms idle time
        busy.close()


def test_a_frame_above_socket_request_max_bytes_closes_its_connection(tmp_path: Path) -> None:
    daemon, port = _daemon(tmp_path, "--socket-request-max-bytes", str(MIB),
                           "--queued-max-request-bytes", str(4 * MIB))
    with daemon:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(struct.pack(">i", MIB + 1))
        assert _closed_by_server(sock)
        sock.close()
        assert "socket.request.max.bytes" in daemon.stderr_text()
        _metadata_ok(port)


def test_large_requests_wait_for_request_memory_while_small_ones_are_served(
    tmp_path: Path,
) -> None:
    daemon, port = _daemon(tmp_path, "--socket-request-max-bytes", str(MIB),
                           "--queued-max-request-bytes", str(2 * MIB))
    with daemon:
        # Two connections each hold a nearly complete 1 MiB frame: the budget is taken.
        holders = []
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(struct.pack(">i", MIB) + b"\x00\x03\x00\x0c\x00\x00\x00\x07"
                         + bytes(MIB - 100))
            holders.append(sock)
        # A third sends a whole 1 MiB request: it must wait for memory.
        waiting = RawClient(port)
        body = struct.pack(">hhi", 3, 12, 99) + bytes(MIB - 8)
        waiting.send_raw(struct.pack(">i", len(body)) + body)
        deadline = time.monotonic() + DEADLINE_S
        while "request memory is taken" not in daemon.stderr_text():
            assert time.monotonic() < deadline, "the third request never waited"
            time.sleep(0.05)
        _metadata_ok(port)  # small requests are still served
        holders[0].close()  # memory is freed: the waiting request is read and answered
        frame = waiting.read_frame()
        assert struct.unpack_from(">i", frame)[0] == 99
        waiting.close()
        holders[1].close()


def test_pipelined_fetches_of_a_client_that_does_not_read_are_built_one_at_a_time(
    default_daemon: tuple[Daemon, int],
) -> None:
    daemon, port = default_daemon
    client = RawClient(port)
    created = client.call(19, 7, {"topics": [
        {"name": "big", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "max.message.bytes", "value": str(2 * MIB)}]}]})
    assert created.topics[0].error_code == K.none
    for i in range(4):
        now_ms = int(time.time() * 1000)
        batch = rb.build_batch([rb.RecordSpec(None, bytes([i]) * (MIB // 2), now_ms)] * 2)
        resp = client.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
            {"name": "big", "partition_data": [{"index": 0, "records": batch}]}]})
        assert resp.responses[0].partition_responses[0].error_code == K.none
    md = client.call(3, 12, {"topics": [{"name": "big", "topic_id": None}],
                             "include_topic_authorized_operations": False})
    topic_id = md.topics[0].topic_id
    client.close()

    before = _rss_kib(daemon)
    slow = RawClient(port)
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frames = b""
    for _ in range(60):  # each answer would be about 4 MiB
        _c, frame = slow.frame(1, 13, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 8 * MIB,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 8 * MIB}]}]})
        frames += frame
    slow.send_raw(frames)
    # Whether the daemon builds one answer or sixty, it has done so well
    # within this window; the most it grew is what it held.
    grown_kib = 0
    window = time.monotonic() + 2.0
    while time.monotonic() < window:
        grown_kib = max(grown_kib, _rss_kib(daemon) - before)
        time.sleep(0.05)
    slow.close()
    _metadata_ok(port)
    # 60 answers of 4 MiB would be 240 MiB; one at a time, a few answers' worth.
    assert grown_kib < 48 * 1024, f"the daemon grew by {grown_kib} KiB"
