"""DataDir: ownership by one cluster, the process lock, layout and refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from linkd.storage.datadir import DataDir, DataDirError


def test_first_use_writes_properties(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b"
    data_dir = DataDir.open(root, "cluster-A")
    assert (data_dir.root, data_dir.cluster_id) == (root, "cluster-A")
    props = (root / "cluster.properties").read_text().splitlines()
    assert props == ["cluster.id=cluster-A", "format.version=1"]
    assert data_dir.partition_dir("t1", 3) == root / "topics" / "t1-3"
    assert data_dir.metadata_dir() == root / "metadata"
    data_dir.close()
    data_dir.close()  # idempotent
    DataDir.open(root, "cluster-A").close()


def test_refuses_another_cluster(tmp_path: Path) -> None:
    DataDir.open(tmp_path, "B").close()
    with pytest.raises(DataDirError) as info:
        DataDir.open(tmp_path, "A")
    assert str(info.value) == f"data dir {tmp_path} belongs to cluster 'B', not 'A'"
    # The refusal released the lock.
    DataDir.open(tmp_path, "B").close()


def test_refuses_a_directory_in_use(tmp_path: Path) -> None:
    held = DataDir.open(tmp_path, "A")
    # flock is per open file description, so a second open in this process conflicts too.
    with pytest.raises(DataDirError) as info:
        DataDir.open(tmp_path, "A")
    assert str(info.value) == f"data dir {tmp_path} is in use by another linkd (pid {os.getpid()})"
    held.close()
    DataDir.open(tmp_path, "A").close()


def test_refuses_an_unknown_format_version(tmp_path: Path) -> None:
    (tmp_path / "cluster.properties").write_text("cluster.id=A\nformat.version=7\n")
    with pytest.raises(DataDirError, match=r"format\.version '7'") as info:
        DataDir.open(tmp_path, "A")
    assert str(tmp_path) in str(info.value)


def test_refuses_a_path_that_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DataDirError) as info:
        DataDir.open(tmp_path / "file" / "data", "A")
    assert str(info.value).startswith(f"data dir {tmp_path / 'file' / 'data'} is not writable: ")
    with pytest.raises(DataDirError, match="is not a directory") as info:
        DataDir.open(tmp_path / "file", "A")
    assert str(tmp_path / "file") in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_refuses_a_read_only_directory(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(DataDirError, match=f"data dir {root} is not writable: "):
            DataDir.open(root, "A")
    finally:
        root.chmod(0o700)


def test_remove_partition_dirs(tmp_path: Path) -> None:
    data_dir = DataDir.open(tmp_path, "A")
    for name in ("t-0", "t-1", "t-x", "t-1-0", "u-0"):
        path = tmp_path / "topics" / name
        path.mkdir(parents=True)
        (path / "00000000000000000000.log").write_bytes(b"x")
    data_dir.remove_partition_dirs("t")
    left = sorted(p.name for p in (tmp_path / "topics").iterdir())
    assert left == ["t-1-0", "t-x", "u-0"]
    data_dir.remove_partition_dirs("missing")
    with pytest.raises(ValueError):
        data_dir.partition_dir("../evil", 0)
    data_dir.close()


def test_interrupted_topic_deletion_is_finished_at_open(tmp_path: Path) -> None:
    DataDir.open(tmp_path, "A").close()
    leftover = tmp_path / "topics" / ".deleted-t-0"
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    DataDir.open(tmp_path, "A").close()
    assert not leftover.exists()
