"""A bounded cache of the file descriptors partition logs keep open.

A partition log writes to its active segment and index file. Keeping both
open for every partition makes the number of descriptors grow with the number
of partitions: a 10,000-partition topic needs 20,000, far past a usual
`ulimit -n` of 1024, and once the process runs out, every socket and file it
would open fails too. Instead, a log opens its active files when it needs them
and registers with one `HandleCache` per data directory, which keeps at most
`capacity` logs' files open and closes those of the log used least recently
when another needs room. Closing a file loses nothing: data written but not
yet fsynced is fsynced through a file opened again (fsync works on the file,
not on the descriptor).

Logs are touched and closed on the event loop's thread only; a log guards its
own descriptors against the flush thread with its lock.
"""

from __future__ import annotations

import resource
from collections import OrderedDict
from typing import Protocol

# Descriptors left for everything else: sockets, the metadata journal, reads
# of older segments, fsync duplicates, the gRPC server's own.
RESERVED_DESCRIPTORS = 256
FILES_PER_LOG = 2  # the active segment and its index


class HandleOwner(Protocol):
    def release_handles(self) -> None:
        """Closes the descriptors it holds (it opens them again when needed)."""


class HandleCache:
    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"a handle cache needs room for at least 2 logs, not {capacity}")
        self.capacity = capacity
        self._open: OrderedDict[HandleOwner, None] = OrderedDict()
        self.evictions = 0

    def touch(self, owner: HandleOwner) -> None:
        """`owner` holds (or is about to hold) its descriptors: it is now the
        most recently used, and the least recently used beyond capacity
        close theirs."""
        self._open[owner] = None
        self._open.move_to_end(owner)
        while len(self._open) > self.capacity:
            victim, _ = self._open.popitem(last=False)
            victim.release_handles()
            self.evictions += 1
        assert len(self._open) <= self.capacity

    def forget(self, owner: HandleOwner) -> None:
        """`owner` closed its descriptors itself (closed, or released them)."""
        self._open.pop(owner, None)

    def __len__(self) -> int:
        return len(self._open)


def capacity_for_limit(soft_limit: int | None = None) -> int:
    """How many logs may keep their files open under the process's
    RLIMIT_NOFILE (its soft limit), leaving RESERVED_DESCRIPTORS for the rest."""
    if soft_limit is None:
        soft_limit, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft_limit == resource.RLIM_INFINITY or soft_limit <= 0:
        soft_limit = 1 << 20
    return max(2, (soft_limit - RESERVED_DESCRIPTORS) // FILES_PER_LOG // 2)


__all__ = ["FILES_PER_LOG", "RESERVED_DESCRIPTORS", "HandleCache", "capacity_for_limit"]
