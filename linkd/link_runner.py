"""The daemon's pump of a link's driver (linkd/core/link_driver.py).

When a link acts is the core's: its three lanes (control, pull, push) are
generators of requests, and a `LinkRunner` runs each as an asyncio task and
answers what it asks: a call goes to the remote over the link's connection
(`linkd/link_connection.py`: gRPC, in the link's session), several at once
for a lane that sends without waiting; an idle lane waits on an event its
wakes set; a pushing leader's own reads go through the same long poll a
remote's fetch gets (`hold`); effects, notes, sleeps and the rest go to the
procedures' host (`DaemonHost`). The runner
decides nothing: a failure comes back to the lane as its answer, and the
lane backs off, drops its session or deletes the link, as the core says.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from functools import partial

from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core.errors import ClusterError
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    Forget,
    Idle,
    LaneRequest,
    Receive,
    Send,
    ServeFetch,
    Ticket,
    WakeLanes,
)
from linkd.core.link_driver import Lane
from linkd.link_connection import LinkConnection
from linkd.link_sessions import LinkSecurity
from linkd.procedure_shell import DaemonHost

log = logging.getLogger("linkd.replication")

SETTINGS = driver.DriverSettings()


async def hold(
    host: DaemonHost,
    link_id: str,
    parts: Sequence[rounds.PartitionFetch],
    max_wait_ms: int,
    max_bytes: int,
    *,
    from_remote: bool,
    acknowledges: bool = True,
    fetch_session: rounds.FetchSessionRef = rounds.NO_FETCH_SESSION,
) -> rounds.FetchAnswer:
    """Source side: a fetch served from this node's segment files, held for
    data as the core says (`link_driver.hold_fetch`; the host parks it on
    the node's long polls). Raises the core's refusal."""
    node = host.node

    def read(topic_id: str, partition: int, start: int, end: int, budget: int
             ) -> tuple[bytes, int]:  # fmt: skip
        data = node.stores[(topic_id, partition)].read(start, end, budget)
        return data, len(data)

    holding = driver.hold_fetch(
        node.state, link_id, tuple(parts), max_wait_ms, max_bytes, read, SETTINGS,
        from_remote=from_remote, acknowledges=acknowledges, fetch_session=fetch_session,
    )  # fmt: skip
    answer: rounds.FetchAnswer = await host.drive(holding)
    return answer


class LinkRunner:
    """The lanes of one link this side dials, as tasks."""

    def __init__(
        self, host: DaemonHost, security: LinkSecurity, name: str, forget: Callable[[str], None]
    ) -> None:
        self.host, self.security, self.name, self._forget = host, security, name, forget
        node = host.node
        self.driver = driver.LinkDriver(node.state, name, node.topic_id_factory, SETTINGS)
        self._tasks: list[asyncio.Task[None]] = []
        self._wakes = {lane: asyncio.Event() for lane in Lane}
        self._sent: dict[int, asyncio.Task[Answered]] = {}
        self._tickets = 0
        self._stopping = False
        self._connection = LinkConnection(host.node, security, name)

    def wake(self) -> None:
        """The link changed: handshake and discover now."""
        self.driver.wake()
        for event in self._wakes.values():
            event.set()

    def start(self) -> None:
        for lane in Lane:
            task = asyncio.create_task(self._run(lane), name=f"link-{self.name}-{lane}")
            self._tasks.append(task)

    async def stop(self) -> None:
        self._stopping = True
        for task in [*self._tasks, *self._sent.values()]:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        await self._connection.close()

    async def _run(self, lane: Lane) -> None:
        """Pumps the lane until it ends (the link is gone)."""
        while not self._stopping:
            try:
                await self.host.drive(self.driver.lane(lane), partial(self._answer, lane))
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the lane silently
                log.exception("link lane failed", extra={"link": self.name, "lane": str(lane)})
                await asyncio.sleep(driver.BACKOFF_MAX_MS / 1000)

    async def _answer(self, lane: Lane, request: LaneRequest) -> object:
        node = self.host.node
        if isinstance(request, Dial):
            return await self._connection.dial(request.call, request.timeout_ms)
        if isinstance(request, Send):
            self._tickets += 1
            self._sent[self._tickets] = asyncio.create_task(
                self._connection.dial(request.call, request.timeout_ms)
            )
            return Ticket(self._tickets)
        if isinstance(request, Receive):
            return await self._sent.pop(request.ticket.number)
        if isinstance(request, Drop):
            for ticket in request.tickets:
                self._sent.pop(ticket.number).cancel()
            return None
        if isinstance(request, Idle):
            woken = self._wakes[lane]
            if not woken.is_set():
                try:
                    await asyncio.wait_for(woken.wait(), timeout=request.ms / 1000)
                except TimeoutError:
                    pass
            woken.clear()
            return node.clock()
        if isinstance(request, WakeLanes):
            for other, event in self._wakes.items():
                if other is not lane:
                    event.set()
            return None
        if isinstance(request, ServeFetch):
            try:
                return Answered(await hold(
                    self.host, request.link_id, request.parts, request.max_wait_ms,
                    request.max_bytes, from_remote=False, acknowledges=request.acknowledges,
                ))  # fmt: skip
            except ClusterError as exc:
                return Answered(None, exc)
        if isinstance(request, Applied):
            if request.records and request.sent_ms is not None:
                node.metrics.fetch_round(self.name, (node.clock() - request.sent_ms) / 1000)
            return None
        if isinstance(request, Forget):
            self._forget(request.link)
            return None
        return await self.host.answer(request)
