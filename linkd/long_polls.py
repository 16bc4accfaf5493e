"""Long polls parked until a high watermark moves, keyed by partition.

Fetches (client and replica), `acks=all` produces and offset commits wait for
high watermarks. Like Kafka's delayed-operation purgatory, a waiter watches
the partitions it reads, and a move on one partition wakes only the waiters
watching it: a busy producer on one topic does not make every parked fetch of
every other topic re-plan itself. A waiter that watches nothing in particular
(None) wakes on any move.

Use: `event = polls.park(watch)` before looking at the state (so a move in
between is not missed), then `await polls.wait(event, timeout_s)`; a `finally`
calls `polls.unpark(event)` on every way out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]  # (topic name, partition)


class LongPolls:
    def __init__(self) -> None:
        self._parked: dict[asyncio.Event, frozenset[PartitionKey] | None] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, watch: Iterable[PartitionKey] | None = None) -> asyncio.Event:
        event = asyncio.Event()
        self._parked[event] = None if watch is None else frozenset(watch)
        return event

    def unpark(self, event: asyncio.Event) -> None:
        self._parked.pop(event, None)

    async def wait(self, event: asyncio.Event, timeout_s: float) -> None:
        """Until `event` is set or `timeout_s` passes."""
        if timeout_s <= 0:
            return
        try:
            await asyncio.wait_for(event.wait(), timeout=timeout_s)
        except TimeoutError:
            pass

    def notify(self, moved: Iterable[PartitionKey] | None = None) -> None:
        """High watermarks moved on `moved` (None: anywhere, or unknown).
        Wakes every waiter watching one of them, once."""
        keys = None if moved is None else set(moved)
        for event, watch in list(self._parked.items()):
            if keys is None or watch is None or not watch.isdisjoint(keys):
                event.set()
                del self._parked[event]
