"""File writes the stores share: whole writes despite short ones, a new
file written and fsynced, a directory's entries made durable."""

from __future__ import annotations

import os
from pathlib import Path


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Writes every byte of `data` (os.write may take fewer); raises OSError
    (a full disk) with part of it possibly written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file(path: Path, data: bytes, *, fsync: bool) -> None:
    """Creates or replaces `path` with `data`, fsynced when asked."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Makes the directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
