"""Which partition logs of a cluster moved, for readers that look at many.

A reader that keeps what it last saw of thousands of logs (a fetch
session's source: `fetch_sessions.SourceFetchSession`) need not compare
every one each round: it asks the feed which moved since its last look
(`since`) and compares only those. A log reports to the feed of the cluster
that holds it once a reader watches it (`watch`): every change of its
bounds (start, end, high watermark, durable offset, leader epoch) or of the
batches it holds calls `note`. A log that was never watched reports nothing,
and nothing needs it to: a reader compares a log it has not watched anyway.

Logs that come, go or are replaced (a topic created, deleted or grown, a
partition rebuilt from disk or restarted at a gap) are not in the feed:
they change its `layout`, and a reader that last looked at another layout
looks at every log again. So the feed holds only keys that moved since the
last layout change, one entry each: its size is bounded by the cluster's
partitions.

Pure code: no I/O, clocks or randomness.
"""

from __future__ import annotations

from typing import Protocol

Key = tuple[str, int]  # (topic, partition)


class Watched(Protocol):
    """What of a log the feed needs (`partition.PartitionLog`)."""

    feed: LogFeed | None


class LogFeed:
    """The keys of the logs that moved, each at the sequence number of its
    last move, oldest first."""

    __slots__ = ("layout", "moved", "seq")

    def __init__(self) -> None:
        self.moved: dict[Key, int] = {}
        self.seq = 0
        self.layout = 0

    def watch(self, log: Watched) -> None:
        """From now on `log` reports its moves here."""
        log.feed = self

    def note(self, key: Key) -> None:
        """The log of `key` moved."""
        self.seq += 1
        moved = self.moved
        if key in moved:
            del moved[key]  # (to the end: the newest move)
        moved[key] = self.seq

    def relayout(self) -> None:
        """Logs came, went or were replaced: every reader looks at every log
        again, so no move before now is news to anyone."""
        self.layout += 1
        self.moved.clear()

    def since(self, seq: int) -> list[Key]:
        """The keys that moved after sequence number `seq` (newest first)."""
        out: list[Key] = []
        for key, at in reversed(self.moved.items()):
            if at <= seq:
                break
            out.append(key)
        return out


__all__ = ["Key", "LogFeed"]
