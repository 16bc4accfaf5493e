"""A disk that refuses writes, then takes them again: the daemon answers
KAFKA_STORAGE_ERROR, its model never gets ahead of what is stored, and it
resumes by itself once writes succeed, with every acknowledged record kept
and none stored twice.

The disk is made to refuse writes by lowering the daemon's RLIMIT_FSIZE
(the largest file it may write) to the size its segment file has: each write
past it fails with EFBIG, as a full disk fails with ENOSPC, and raising the
limit again is space coming back. No privileges or special filesystems are
needed. The segment is first made larger than the daemon's log file, which
the limit binds too."""

from __future__ import annotations

import resource
import subprocess
import time
import zlib
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import Daemon, free_port

DEADLINE_S = 60.0


def _short(value: bytes | None) -> str:
    """A value as a failure message shows it: its text part, its length and
    its CRC (the tests' values are a label followed by thousands of zero
    bytes, which a plain diff of the lists prints in full)."""
    if value is None:
        return "None"
    return f"{value.rstrip(bytes(1))[:24]!r}+{len(value)}B/crc{zlib.crc32(value):08x}"


def _shorts(values: list[bytes]) -> list[str]:
    return [_short(v) for v in values]


def _log_tail(daemon: Daemon, lines: int = 40) -> str:
    return "\n".join(daemon.stderr_text().splitlines()[-lines:])


def _segment(data_dir: Path) -> Path:
    logs = sorted((data_dir / "topics").glob("*-0/*.log"))
    assert len(logs) == 1, logs
    return logs[0]


def _read(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The first `count` values of the topic's partition 0, read from its start."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen.append(msg.value())
    consumer.close()
    return seen


class Retrying:
    """One topic, one retrying producer and what it was told. The producer is
    idempotent: librdkafka keeps a retried batch in its place only then (a
    plain producer may send later records ahead of a retried batch even with
    one request in flight), and the daemon must keep its sequence numbers
    right across a refused write: a retried batch it did not store is not a
    duplicate."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        self.topic = topic
        self.delivered: list[tuple[int, bytes]] = []
        self.errors: list[ck.KafkaError] = []
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                     "linger.ms": 0, "retry.backoff.ms": 50,
                                     "delivery.timeout.ms": 120_000,
                                     "enable.idempotence": True,
                                     "max.in.flight.requests.per.connection": 1})

    def _report(self, err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            self.delivered.append((msg.offset(), msg.value()))
        else:
            self.errors.append(err)

    def send(self, value: bytes) -> None:
        self.producer.produce(self.topic, value, partition=0, on_delivery=self._report)

    def wait_for_refusal(self, daemon: Daemon) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while "the disk refused a write" not in daemon.stderr_text():
            self.producer.poll(0.1)
            assert time.monotonic() < deadline, "no write was refused"


def test_a_disk_that_refuses_writes_then_takes_them_again(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "data"
    with Daemon("D", data, ["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
        assert daemon.pid is not None
        bootstrap = f"127.0.0.1:{port}"
        writer = Retrying(bootstrap, "full")
        delivered, errors, producer = writer.delivered, writer.errors, writer.producer
        for i in range(20):
            writer.send(f"before-{i}-".encode() + bytes(8000))
        assert producer.flush(30) == 0 and len(delivered) == 20

        # The disk fills: no file may grow past what the segment holds now.
        _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE,
                         (_segment(data).stat().st_size, hard))
        for i in range(10):
            writer.send(f"during-{i}".encode())
        writer.wait_for_refusal(daemon)
        assert len(delivered) == 20  # nothing was acknowledged while the disk was full

        # Space comes back: the producer's retries go through, without a restart.
        resource.prlimit(daemon.pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert producer.flush(DEADLINE_S) == 0
        assert not errors, errors
        assert daemon.running and daemon.starts == 1

    values = [v for _o, v in sorted(delivered)]
    assert [o for o, _v in sorted(delivered)] == list(range(30)), _log_tail(daemon)
    assert _shorts(values) == _shorts(
        [f"before-{i}-".encode() + bytes(8000) for i in range(20)]
        + [f"during-{i}".encode() for i in range(10)]), _log_tail(daemon)
    # What is stored is exactly that, also after a restart.
    with Daemon("D", data, ["--kafka-listen", f"127.0.0.1:{port}"]) as again:
        seen = _read(bootstrap, "full", 30)
    assert _shorts(seen) == _shorts(values), _log_tail(again)


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, check=False)
    return done.returncode == 0


def test_a_real_full_disk_then_space_freed(tmp_path: Path) -> None:
    """The same on a filesystem that really runs out of space (ENOSPC): a
    small tmpfs holds the data directory, a filler file takes the rest."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "16m"):
        pytest.skip("needs permission to mount a tmpfs (root, or CAP_SYS_ADMIN)")
    try:
        port = free_port()
        with Daemon("E", disk, ["--kafka-listen", f"127.0.0.1:{port}"]) as daemon:
            writer = Retrying(f"127.0.0.1:{port}", "enospc")
            delivered, errors, producer = writer.delivered, writer.errors, writer.producer
            writer.send(b"first")
            assert producer.flush(30) == 0
            filler = disk / "filler"
            with filler.open("wb") as out:  # take every byte left
                try:
                    while True:
                        out.write(bytes(64 * 1024))
                        out.flush()
                except OSError:
                    pass
            values = [f"v{i}-".encode() + bytes(16 * 1024) for i in range(10)]
            for value in values:
                writer.send(value)
            writer.wait_for_refusal(daemon)
            filler.unlink()  # space comes back
            assert producer.flush(DEADLINE_S) == 0
            assert not errors, errors
            assert daemon.running and daemon.starts == 1
            # What is stored is what was acknowledged: no retried batch was
            # taken for a duplicate of one the disk refused.
            stored = _read(f"127.0.0.1:{port}", "enospc", 11)
        got = [v for _o, v in sorted(delivered)]
        assert [o for o, _v in sorted(delivered)] == list(range(11)), _log_tail(daemon)
        assert _shorts(got) == _shorts([b"first", *values]), _log_tail(daemon)
        assert _shorts(stored) == _shorts(got), _log_tail(daemon)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
