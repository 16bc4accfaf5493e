"""The data directory of one linkd: ownership, locking and layout.

Layout:
    <root>/cluster.properties      cluster.id=<id> and format.version=1, written once
    <root>/lock                    flock'ed while a linkd uses the directory; holds its pid
    <root>/metadata/               the metadata journal (linkd.storage.metadata)
    <root>/topics/<topic_id>-<p>/  one partition's segments (linkd.storage.segments)

Rules this module keeps:
- One live process per data directory: the lock is a non-blocking flock, which
  the kernel releases when the process dies, so a crash never leaves it stale.
- A data directory belongs to one cluster for life: opening it as another
  cluster id is refused rather than mixing two clusters' data.
- Every refusal is a DataDirError whose message names the path and the problem.
- Deleting a topic first renames its partition directories to hidden
  `.deleted-*` names (atomic), then removes them; open removes any leftovers of
  a deletion a crash interrupted, so a half-deleted partition is never read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

from linkd.storage.files import fsync_dir, write_file

FORMAT_VERSION = "1"
PROPERTIES_NAME = "cluster.properties"
LOCK_NAME = "lock"
_DELETED_PREFIX = ".deleted-"


class DataDirError(Exception):
    """The data directory cannot be used; the message names the path and why."""




def _read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    return props


class DataDir:
    """An opened, locked data directory (see the module docstring for the rules)."""

    def __init__(self, root: Path, cluster_id: str, lock_fd: int) -> None:
        self.root = root
        self.cluster_id = cluster_id
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, path: Path, cluster_id: str) -> DataDir:
        if not cluster_id or any(c in cluster_id for c in "\r\n="):
            raise ValueError(f"invalid cluster id {cluster_id!r}")
        if path.exists() and not path.is_dir():
            raise DataDirError(f"data dir {path} is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise DataDirError(f"data dir {path} is not writable: {exc}") from exc
        try:
            cls._lock(path, lock_fd)
            cls._check_owner(path, cluster_id)
            cls._remove_interrupted_deletions(path)
        except BaseException:
            os.close(lock_fd)  # also releases the flock
            raise
        return cls(path, cluster_id, lock_fd)

    @staticmethod
    def _lock(path: Path, lock_fd: int) -> None:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(lock_fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise DataDirError(
                f"data dir {path} is in use by another linkd (pid {holder})"
            ) from None
        except OSError as exc:
            raise DataDirError(f"data dir {path} cannot be locked: {exc}") from exc
        # The pid is for the message above only; the flock is the lock.
        os.ftruncate(lock_fd, 0)
        os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)

    @staticmethod
    def _check_owner(path: Path, cluster_id: str) -> None:
        props_path = path / PROPERTIES_NAME
        try:
            props = _read_properties(props_path)
        except FileNotFoundError:
            DataDir._write_properties(path, cluster_id)
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise DataDirError(f"data dir {path} is not readable: {props_path}: {exc}") from exc
        version = props.get("format.version")
        if version != FORMAT_VERSION:
            raise DataDirError(
                f"data dir {path} has format.version {version!r} in {PROPERTIES_NAME}; "
                f"this linkd supports only {FORMAT_VERSION!r}"
            )
        owner = props.get("cluster.id")
        if owner != cluster_id:
            raise DataDirError(f"data dir {path} belongs to cluster {owner!r}, not {cluster_id!r}")

    @staticmethod
    def _write_properties(path: Path, cluster_id: str) -> None:
        # Written whole or not at all: a temporary file, fsynced, renamed into place.
        text = f"cluster.id={cluster_id}\nformat.version={FORMAT_VERSION}\n"
        tmp = path / (PROPERTIES_NAME + ".tmp")
        try:
            write_file(tmp, text.encode(), fsync=True)
            os.replace(tmp, path / PROPERTIES_NAME)
            fsync_dir(path)
            fsync_dir(path.parent)  # the data dir itself may be new
        except OSError as exc:
            raise DataDirError(f"data dir {path} is not writable: {exc}") from exc

    @staticmethod
    def _remove_interrupted_deletions(path: Path) -> None:
        topics = path / "topics"
        if topics.is_dir():
            for child in topics.iterdir():
                if child.name.startswith(_DELETED_PREFIX):
                    shutil.rmtree(child)

    def partition_dir(self, topic_id: str, partition: int) -> Path:
        self._check_topic_id(topic_id)
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        return self.root / "topics" / f"{topic_id}-{partition}"

    def metadata_dir(self) -> Path:
        return self.root / "metadata"

    def remove_partition_dirs(self, topic_id: str) -> None:
        """Deletes every partition directory of the topic (close its stores first)."""
        self._check_topic_id(topic_id)
        topics = self.root / "topics"
        if not topics.is_dir():
            return
        # rpartition: the partition number is what follows the last '-', so topic
        # "a" never matches the directories of a topic "a-1".
        doomed = [
            child
            for child in topics.iterdir()
            if child.name.rpartition("-")[0] == topic_id and child.name.rpartition("-")[2].isdigit()
        ]
        for child in doomed:
            child.rename(topics / (_DELETED_PREFIX + child.name))
        if doomed:
            fsync_dir(topics)  # from here the topic is gone, even if a crash stops the rmtree
        for child in doomed:
            shutil.rmtree(topics / (_DELETED_PREFIX + child.name))

    @staticmethod
    def _check_topic_id(topic_id: str) -> None:
        # The id becomes a file name: nothing that could leave the topics directory.
        if not topic_id or topic_id.startswith(".") or "/" in topic_id or "\0" in topic_id:
            raise ValueError(f"invalid topic id {topic_id!r} for a directory name")

    def close(self) -> None:
        """Releases the lock. Idempotent."""
        if self._lock_fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
