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

from linkd import ack_trace
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
    ReplicaPush,
    Send,
    ServeFetch,
    Ticket,
    WakeLanes,
)
from linkd.core.link_driver import Lane
from linkd.core.requests import Execute, WakeWaiters
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
        if ack_trace.ON:
            names = [t.name for t in node.state.topics.values() if t.topic_id == topic_id]
            ack_trace.records_hop("source.read", names[0] if names else topic_id, partition, data)
        return data, len(data)

    holding = driver.hold_fetch(
        node.state, link_id, tuple(parts), max_wait_ms, max_bytes, read, SETTINGS,
        from_remote=from_remote, acknowledges=acknowledges, fetch_session=fetch_session,
    )  # fmt: skip
    answer: rounds.FetchAnswer = await host.drive(
        holding, partial(_traced_hold, host, parts) if ack_trace.ON else None
    )
    return answer


async def _traced_hold(
    host: DaemonHost, parts: Sequence[rounds.PartitionFetch], request: LaneRequest
) -> object:
    """A held fetch's requests, answered by the host; a fetch that moved high
    watermarks (a SYNC follower's acknowledgement) is a hop of the trace."""
    if isinstance(request, WakeWaiters):
        for part in parts:
            if part.source_topic in host.node.state.topics:
                hw = host.node.state.partition(part.source_topic, part.partition).high_watermark
                ack_trace.hop("source.hw_moved", part.source_topic, part.partition, hw, hw)
    return await host.answer(request)


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
        # The acknowledgement trace's records of the answer being applied.
        self._traced: list[tuple[str, int, bytes]] = []
        self._written = False

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
            if not ack_trace.ON:
                return await self._connection.dial(request.call, request.timeout_ms)
            return await self._traced_dial(request)
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
            self._trace_spans("follower.applied", clear=True)
            return None
        if isinstance(request, Forget):
            self._forget(request.link)
            return None
        answer = await self.host.answer(request)
        if isinstance(request, Execute) and lane is Lane.PULL and self._traced:
            self._trace_spans("follower.written")
        return answer

    # -- the acknowledgement trace (linkd/ack_trace.py) --------------------------------

    async def _traced_dial(self, request: Dial) -> Answered:
        """A call, its hops traced: a pushing leader's push and the
        follower's next request in its answer (which acknowledges), a
        pulling follower's fetch answer."""
        call = request.call
        pushed = call.push.data if isinstance(call, ReplicaPush) else None
        for part in pushed.partitions if pushed is not None else ():
            ack_trace.records_hop("source.push_sent", part.source_topic, part.partition,
                                  part.records)  # fmt: skip
        answered = await self._connection.dial(call, request.timeout_ms)
        if isinstance(answered.answer, rounds.FetchAnswer):
            self._trace_received(answered.answer)
        if pushed is not None and isinstance(answered.answer, rounds.FetchRequest):
            for fetch in answered.answer.partitions:
                ack_trace.hop("source.push_answered", fetch.source_topic, fetch.partition,
                              fetch.fetch_offset, fetch.fetch_offset)  # fmt: skip
        return answered

    def _trace_received(self, answer: rounds.FetchAnswer) -> None:
        self._traced = [
            (p.source_topic, p.partition, p.records) for p in answer.partitions if p.records
        ]
        self._written = False
        for topic, partition, data in self._traced:
            ack_trace.records_hop("follower.received", topic, partition, data)

    def _trace_spans(self, hop: str, *, clear: bool = False) -> None:
        """The records the last answer carried reached `hop` (the first
        append of a round is when they were written)."""
        if hop == "follower.written":
            if self._written:
                return
            self._written = True
        for topic, partition, data in self._traced:
            ack_trace.records_hop(hop, topic, partition, data)
        if clear:
            self._traced = []
