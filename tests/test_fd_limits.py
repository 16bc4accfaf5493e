"""File descriptors stay bounded whatever the number of partitions: a daemon
under `ulimit -n 1024` creates and uses a 10,000-partition topic (the
partition logs share a bounded cache of open files), acknowledged records
written through logs whose files were closed meanwhile survive `kill -9`, and
a topic whose logs cannot be opened leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest

from admin import AdminClient, Consumer, Producer, TopicPartition
from linkd.core.errors import ClusterError, ErrorCode
from linkd.node import ClusterNode
from linkd.storage.handles import HandleCache
from tests.harness import Daemon

WAIT_S = 120.0


def _fds(daemon: Daemon) -> int:
    assert daemon.pid is not None
    return len(os.listdir(f"/proc/{daemon.pid}/fd"))


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict[int, int]:
    acked: dict[int, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        acked[msg.partition()] = acked.get(msg.partition(), 0) + 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    producer.close()
    return acked


def _read(bootstrap: str, topic: str, partitions: list[int], per_partition: int) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    found: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    while len(found) < len(partitions) * per_partition and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            found.add(msg.value())
    consumer.close()
    return found


@pytest.mark.slow
def test_a_10000_partition_topic_is_created_and_used_under_ulimit_1024(tmp_path: Path) -> None:
    nofile = {resource.RLIMIT_NOFILE: (1024, 1024)}
    with Daemon("F", tmp_path / "data", ["--fsync", "never"], rlimits=nofile) as daemon:
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_topic("wide", partitions=10_000)
        assert _fds(daemon) < 1024
        acked = _produce(daemon.bootstrap, "wide", 10_000, 1)
        assert sum(acked.values()) == 10_000
        ends = {p.partition: p.high_watermark for p in admin.describe_topic("wide").partitions}
        assert ends == {p: 1 for p in range(10_000)}
        sample = list(range(0, 10_000, 499))
        assert _read(daemon.bootstrap, "wide", sample, 1) == {f"{p}-0".encode() for p in sample}
        assert _fds(daemon) < 1024
        admin.create_topic("after", partitions=1)  # the daemon still opens what it needs
        admin.close()


@pytest.mark.slow
def test_acknowledged_records_written_through_reopened_files_survive_kill9(
    tmp_path: Path,
) -> None:
    # 300 descriptors leave room for 11 partitions' files: 40 partitions keep
    # closing and opening each other's.
    nofile = {resource.RLIMIT_NOFILE: (300, 300)}
    daemon = Daemon("K", tmp_path / "data", rlimits=nofile)
    with daemon:
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_topic("crowded", partitions=40)
        admin.close()
        acked = _produce(daemon.bootstrap, "crowded", 40, 25)
        assert sum(acked.values()) == 1000
        daemon.kill9()
        daemon.rlimits = {}
        daemon.start()
        daemon.wait_ready()
        found = _read(daemon.bootstrap, "crowded", list(range(40)), 25)
    assert found == {f"{p}-{i}".encode() for p in range(40) for i in range(25)}


def test_a_topic_whose_logs_cannot_be_opened_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = ClusterNode(tmp_path / "data", "N", fsync=False)
    node.open()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(node.start())
    opened: list[int] = []
    real_open = node._open_store

    def failing_open(topic_id: str, partition: int, segment_bytes: int) -> Any:
        if partition == 3:
            raise OSError(24, "Too many open files")
        opened.append(partition)
        return real_open(topic_id, partition, segment_bytes)

    monkeypatch.setattr(node, "_open_store", failing_open)
    with pytest.raises(ClusterError) as refused:
        loop.run_until_complete(node.create_topic("doomed", 5, {}))
    assert refused.value.code is ErrorCode.STORAGE_ERROR
    assert "Too many open files" in refused.value.message
    assert opened == [0, 1, 2]
    assert "doomed" not in node.state.topics and node.stores == {}
    topics_dir = tmp_path / "data" / "topics"
    assert not (topics_dir.exists() and list(topics_dir.iterdir()))
    monkeypatch.setattr(node, "_open_store", real_open)
    loop.run_until_complete(node.create_topic("doomed", 5, {}))  # the name is free again
    loop.run_until_complete(node.stop())
    loop.close()
    again = ClusterNode(tmp_path / "data", "N", fsync=False)
    again.open()
    assert len(again.state.topics["doomed"].partitions) == 5


def test_the_handle_cache_closes_the_least_recently_used_logs_files() -> None:
    closed: list[str] = []

    class Log:
        def __init__(self, name: str) -> None:
            self.name = name

        def release_handles(self) -> None:
            closed.append(self.name)

    cache = HandleCache(2)
    a, b, c = Log("a"), Log("b"), Log("c")
    cache.touch(a)
    cache.touch(b)
    cache.touch(a)  # b is now the least recently used
    cache.touch(c)
    assert closed == ["b"] and len(cache) == 2
    cache.forget(a)
    cache.touch(b)
    assert closed == ["b"] and len(cache) == 2
    with pytest.raises(ValueError):
        HandleCache(1)


def test_a_topic_created_when_no_descriptor_is_left_is_refused_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """Through gRPC: the daemon's descriptor limit is lowered to what it holds
    now, so CreateTopic cannot open its logs: STORAGE_ERROR, the topic is not
    listed, its name is free once descriptors are back, and a restart finds
    nothing of the refused one."""
    data = tmp_path / "data"
    with Daemon("M", data) as daemon:
        assert daemon.pid is not None
        admin = AdminClient({"bootstrap.servers": daemon.bootstrap})
        admin.create_topic("warm", partitions=1)  # the channel is open before the limit
        held = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        soft, hard = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (held + 1, hard))
        try:
            with pytest.raises(Exception, match="STORAGE_ERROR") as refused:
                admin.create_topic("doomed", partitions=20)
            assert "Too many open files" in str(refused.value)
            assert [t.name for t in admin.list_topics()] == ["warm"]
        finally:
            resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (soft, hard))
        admin.create_topic("doomed", partitions=2)
        kept = {t.name: t.topic_id for t in admin.list_topics()}
        admin.close()
        daemon.restart()
    partition_dirs = {p.name.rsplit("-", 1)[0] for p in (data / "topics").iterdir()}
    assert partition_dirs == set(kept.values())
