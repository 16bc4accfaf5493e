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

A waiter wakes its task directly: the move resolves the one future the task
awaits (with a timer for its timeout), not an `asyncio.Event` awaited through
`asyncio.wait_for`, which wraps the wait in a task of its own and so takes
two more turns of the event loop to wake the waiting request (a SYNC
acknowledgement wakes two: the follower's held fetch, then the produce).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]  # (topic name, partition)


class Waiter:
    """One parked wait: set once by a move, awaited at most once at a time."""

    __slots__ = ("_future", "_set")

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        _resolve(self._future)


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class LongPolls:
    def __init__(self) -> None:
        self._parked: dict[Waiter, frozenset[PartitionKey] | None] = {}

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, watch: Iterable[PartitionKey] | None = None) -> Waiter:
        waiter = Waiter()
        self._parked[waiter] = None if watch is None else frozenset(watch)
        return waiter

    def unpark(self, waiter: Waiter) -> None:
        self._parked.pop(waiter, None)

    async def wait(self, waiter: Waiter, timeout_s: float) -> None:
        """Until `waiter` is set or `timeout_s` passes."""
        if timeout_s <= 0 or waiter.is_set():
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        waiter._future = future
        timer = loop.call_later(timeout_s, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()
            waiter._future = None

    def notify(self, moved: Iterable[PartitionKey] | None = None) -> None:
        """High watermarks moved on `moved` (None: anywhere, or unknown).
        Wakes every waiter watching one of them, once."""
        keys = None if moved is None else set(moved)
        for event, watch in list(self._parked.items()):
            if keys is None or watch is None or not watch.isdisjoint(keys):
                event.set()
                del self._parked[event]
