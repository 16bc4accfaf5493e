"""The transcripts' pump of a link's driver (linkd/core/link_driver.py).

The daemon pumps the driver's lanes with gRPC and asyncio, the simulator on
its event queue; here a script does: a call leaves when a lane yields it,
and stays in flight until a step delivers it to the remote (which serves
it with the core's own functions, its effects carried out by the shell
under test), refuses it, or lets its deadline pass. Time moves only with
`advance`; a wait ends when its time comes, a long poll also when a high
watermark it watches moves. Everything a lane does is printed, one line
each, prefixed by the cluster and the lane:

    B pull: ReplicaFetch -> A: orders-1-0@3, deadline 11510
    A holds B's ReplicaFetch for data until 1510
    B pull: ReplicaFetch answered: orders-1-0 1 batch [3, 5) hw 5
    B pull: backs off 200 ms

An idle lane is printed when it starts idling, not at each repeat. The
link's session is opened at once and not printed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from linkd.core import link_driver as driver
from linkd.core import link_rounds as rounds
from linkd.core import procedures
from linkd.core import records as rb
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.link_calls import (
    Answered,
    Applied,
    Dial,
    Drop,
    FetchGroupOffsets,
    Forget,
    Idle,
    LaneRequest,
    LinkCall,
    ListSourceTopics,
    OpenSession,
    Receive,
    ReplicaFetch,
    ReplicaPush,
    Send,
    ServeFetch,
    SessionOpened,
    Ticket,
    WaitForData,
    WakeLanes,
    call_name,
    unanswered,
)
from linkd.core.link_driver import Lane
from linkd.core.links import LinkConfig
from linkd.core.requests import (
    Execute,
    Handshake,
    LinkChanged,
    LinkDeleted,
    Note,
    Now,
    Sleep,
    WakeWaiters,
)

if TYPE_CHECKING:
    from tests.transcript import Shell, Transcript

LINK = "ab"


@dataclass
class Hold:
    """A fetch served on `cluster` (`driver.hold_fetch`), waiting for data."""

    cluster: str
    procedure: Generator[LaneRequest, object, rounds.FetchAnswer]
    done: Callable[[Answered], None]
    until_ms: int = 0
    watched: dict[tuple[str, int], int] = field(default_factory=dict)  # HWs when parked


@dataclass
class Flight:
    """A call in flight: sent, maybe held by the remote, maybe answered."""

    number: int
    lane: Lane
    call: LinkCall
    deadline_ms: int
    shown: int = 0  # its number as printed: the lane's n-th call
    answered: Answered | None = None
    held: Hold | None = None
    delivered: bool = False
    waited: bool = False  # a lane waits for it (Dial, or Receive)


@dataclass
class LaneState:
    procedure: Generator[LaneRequest, object, None]
    until_ms: int | None = None  # idle or backing off until then
    idle: bool = False
    wake: bool = False
    flight: Flight | None = None  # the call it waits for
    serving: Hold | None = None
    ended: bool = False
    last: str = ""


class LanePump:
    """Pumps the driver of link `ab` on one cluster of a transcript."""

    def __init__(self, t: Transcript, cluster: str, settings: driver.DriverSettings) -> None:
        self.t = t
        self.cluster = cluster
        self.remote = "B" if cluster == "A" else "A"
        ids = iter(f"{cluster}-lane-{i}" for i in range(1_000))
        remote_ids = iter(f"{self.remote}-pushed-{i}" for i in range(1_000))
        self.remote_ids: Callable[[], str] = lambda: next(remote_ids)
        self.driver = driver.LinkDriver(self.shell.state, LINK, lambda: next(ids), settings)
        self.lanes = {lane: LaneState(self.driver.lane(lane)) for lane in Lane}
        self.flights: list[Flight] = []
        self.holds: list[Hold] = []
        self.numbers = 0
        self.counts = dict.fromkeys(Lane, 0)
        self.ready: deque[tuple[Lane, object]] = deque()
        self.out: list[str] = []
        for lane in Lane:
            self.ready.append((lane, None))

    @property
    def shell(self) -> Shell:
        return self.t.shell(self.cluster)

    # -- steps of a transcript ----------------------------------------------------------------

    def run(self) -> list[str]:
        """Runs every lane that can go on, until each waits; the lines printed."""
        while True:
            while self.ready:
                lane, answer = self.ready.popleft()
                self._step(lane, answer)
            if not self._data_arrived():
                break
        out, self.out = self.out, []
        return out

    def deliver(self, lane: Lane) -> None:
        flight = self._oldest(lane)
        flight.delivered = True
        try:
            self._serve(flight)
        except ClusterError as exc:
            self._answer(flight, Answered(None, exc))

    def refuse(self, lane: Lane, code: ErrorCode) -> None:
        flight = self._oldest(lane)
        flight.delivered = True
        self._answer(flight, Answered(None, ClusterError(code, "remote", f"refused: {code.name}")))

    def deadline_of(self, lane: Lane) -> int:
        return self._oldest(lane).deadline_ms

    def advance(self, to_ms: int) -> list[str]:
        """Time passes: every wait due by `to_ms` ends, in time order."""
        lines: list[str] = []
        while (due := self._next_due()) is not None and due[0] <= to_ms:
            self.t.now = due[0]
            due[1]()
            lines += [f"{due[0]}: {line}" for line in self.run()]
        self.t.now = to_ms
        return lines

    def wake(self) -> None:
        """The link changed (LinkChanged): the driver's timers, the idle lanes."""
        self.driver.wake()
        for lane in Lane:
            self._wake_lane(lane)

    # -- the lanes ----------------------------------------------------------------------------

    def _say(self, lane: Lane | None, text: str) -> None:
        who = f"{self.cluster} {lane}" if lane is not None else self.cluster
        self.out.append(f"{who}: {text}")
        if lane is not None:
            self.lanes[lane].last = text

    def _step(self, lane: Lane, answer: object) -> None:
        state = self.lanes[lane]
        state.until_ms, state.idle, state.flight, state.serving = None, False, None, None
        while True:
            try:
                request = state.procedure.send(answer)
            except StopIteration:
                state.ended = True
                self._say(lane, "ends")
                return
            answer = self._answer_now(lane, request)
            if answer is _BLOCKED or state.ended:
                return

    def _answer_now(self, lane: Lane, request: LaneRequest) -> object:
        """The answer to `request`, or _BLOCKED when the lane must wait."""
        state, now = self.lanes[lane], self.t.now
        if isinstance(request, Now):
            return now
        if isinstance(request, Execute):
            self.shell.execute(request.effects)
            return now
        if isinstance(request, Note):
            if request.level != "debug":
                self._say(None, f"{request.level}: {request.message}")
            return None
        if isinstance(request, WakeWaiters | Applied | LinkChanged):
            return None
        if isinstance(request, WakeLanes):
            for other in Lane:
                if other is not lane:
                    self._wake_lane(other)
            return None
        if isinstance(request, Sleep):
            state.until_ms = now + request.ms
            self._say(lane, f"backs off {request.ms} ms")
            return _BLOCKED
        if isinstance(request, Idle):
            if state.wake:
                state.wake = False
                return now
            state.until_ms, state.idle = now + request.ms, True
            if not state.last.startswith("idles"):
                self._say(lane, f"idles {request.ms} ms")
            return _BLOCKED
        if isinstance(request, Dial | Send):
            if isinstance(request.call, OpenSession):
                return Answered(SessionOpened())
            flight = self._send(lane, request.call, request.timeout_ms)
            if isinstance(request, Send):
                return Ticket(flight.number)
            flight.waited, state.flight = True, flight
            return _BLOCKED
        if isinstance(request, Receive):
            flight = next(f for f in self.flights if f.number == request.ticket.number)
            if flight.answered is not None:
                self.flights.remove(flight)
                return flight.answered
            self._say(lane, f"waits for{_number(flight)}")
            flight.waited, state.flight = True, flight
            return _BLOCKED
        if isinstance(request, Drop):
            dropped = {t.number for t in request.tickets}
            gone = [f for f in self.flights if f.number in dropped]
            self.flights = [f for f in self.flights if f.number not in dropped]
            self._say(lane, "drops" + ",".join(_number(f) for f in gone))
            return None
        if isinstance(request, ServeFetch):
            return self._serve_here(lane, request)
        if isinstance(request, Forget):
            self._say(lane, "the remote deleted the link")
            self._forget()
            return None
        if isinstance(request, LinkDeleted):
            self._stop()
            return None
        raise AssertionError(f"{lane}: unexpected request {request!r}")

    def _wake_lane(self, lane: Lane) -> None:
        state = self.lanes[lane]
        if state.ended:
            return
        if state.idle:
            self.ready.append((lane, self.t.now))
            state.idle, state.until_ms = False, None
        else:
            state.wake = True

    def _stop(self) -> None:
        """The link is gone here: the driver stops, every lane with it."""
        for lane in Lane:
            state = self.lanes[lane]
            if not state.ended:
                state.procedure.close()
                state.ended, state.until_ms, state.idle = True, None, False
        self.flights.clear()
        self.holds.clear()
        self._say(None, "the link's driver stops")

    def _forget(self) -> None:
        """procedures.forget_deleted on this cluster (it stops the driver)."""
        forget = procedures.forget_deleted(self.shell.state, LINK, self.t.now)
        notes = self.t.drive(self.shell, forget)
        for note in notes:
            self.out.append(f"{self.cluster} {note}")
        self._stop()  # its LinkDeleted: the shell stops the link's driver

    # -- calls ---------------------------------------------------------------------------------

    def _send(self, lane: Lane, call: LinkCall, timeout_ms: int) -> Flight:
        self.numbers += 1
        self.counts[lane] += 1
        flight = Flight(self.numbers, lane, call, self.t.now + timeout_ms, self.counts[lane])
        self.flights.append(flight)
        number = _number(flight)
        self._say(
            lane,
            f"{call_name(call)}{number} -> {self.remote}{_call_text(call)}, "
            f"deadline {flight.deadline_ms}",
        )
        return flight

    def _oldest(self, lane: Lane) -> Flight:
        for flight in self.flights:
            if flight.lane is lane and not flight.delivered:
                return flight
        raise ValueError(f"{self.cluster} {lane} has no call in flight")

    def _answer(self, flight: Flight, answered: Answered) -> None:
        """The answer reached the dialing side (or the call failed)."""
        flight.answered = answered
        if answered.error is not None:
            code = answered.error.code.name
            text = f"{call_name(flight.call)}{_number(flight)}"
            if answered.error.message.endswith("no answer by its deadline"):
                self._say(flight.lane, f"{text}: no answer by {flight.deadline_ms}")
            else:
                self._say(flight.lane, f"{text} refused: {code}")
        else:
            text = f"{call_name(flight.call)}{_number(flight)}"
            self._say(flight.lane, f"{text} answered{_answer_text(answered.answer)}")
        if flight.waited:
            self.flights.remove(flight)
            self.ready.append((flight.lane, answered))

    def _serve(self, flight: Flight) -> None:
        """The remote serves the call with the core's functions."""
        t, now = self.t, self.t.now
        remote = t.shell(self.remote)
        call = flight.call
        if isinstance(call, Handshake):
            served = procedures.serve(remote.state, Handshake(_wire(call.config)), now)
            remote.execute(served.effects)
            assert isinstance(served.answer, LinkConfig)
            self._answer(flight, Answered(_wire(served.answer)))
        elif isinstance(call, ListSourceTopics):
            self._answer(flight, Answered(driver.serve_list_topics(remote.state, call, now)))
        elif isinstance(call, FetchGroupOffsets):
            self._answer(flight, Answered(driver.serve_group_offsets(remote.state, call, now)))
        elif isinstance(call, ReplicaFetch):
            request = call.request
            hold = driver.hold_fetch(
                remote.state, request.link_id, request.partitions, call.max_wait_ms,
                call.max_bytes, t.reader(remote), self.driver.settings, from_remote=True,
            )  # fmt: skip
            self._hold(self.remote, hold, lambda a: self._answer(flight, a), flight)
        elif isinstance(call, ReplicaPush):
            nxt = self._run_push(remote, call.push, self.remote_ids)
            self._answer(flight, Answered(nxt))
        else:
            raise AssertionError(call)

    def _run_push(
        self, remote: Shell, push: rounds.Push, ids: Callable[[], str]
    ) -> rounds.FetchRequest:
        accepted = rounds.accept_push(remote.state, push, self.t.now, ids)
        box: list[rounds.FetchRequest] = []

        def keep() -> Generator[LaneRequest, object, None]:
            box.append((yield from accepted))

        for note in self.t.drive(remote, keep()):
            self.out.append(f"{self.remote} {note}")
        nxt = box[0]
        return rounds.FetchRequest(nxt.link_id, nxt.partitions, {}, nxt.sent_ms)

    def _serve_here(self, lane: Lane, request: ServeFetch) -> object:
        parts = ", ".join(f"{p.source_topic}-{p.partition}@{p.fetch_offset}" for p in request.parts)
        what = "its follower's request" if request.acknowledges else "ahead"
        self._say(lane, f"serves {what} here: {parts}")
        hold = driver.hold_fetch(
            self.shell.state, request.link_id, request.parts, request.max_wait_ms,
            request.max_bytes, self.t.reader(self.shell), self.driver.settings,
            from_remote=False, acknowledges=request.acknowledges,
        )  # fmt: skip
        box: list[Answered] = []
        state = self.lanes[lane]

        def done(answered: Answered) -> None:
            if state.serving is None:
                box.append(answered)  # answered at once
            else:
                self.ready.append((lane, answered))

        running = self._hold(self.cluster, hold, done, None)
        if box:
            return box[0]
        state.serving = running
        self._say(lane, f"holds it for data until {running.until_ms}")
        return _BLOCKED

    # -- long polls -------------------------------------------------------------------------

    def _hold(
        self,
        cluster: str,
        procedure: Generator[LaneRequest, object, rounds.FetchAnswer],
        done: Callable[[Answered], None],
        flight: Flight | None,
    ) -> Hold:
        hold = Hold(cluster, procedure, done)
        if flight is not None:
            flight.held = hold
        self._resume_hold(hold, None)
        if hold in self.holds and flight is not None:
            self.out.append(
                f"{cluster} holds {self.cluster}'s {call_name(flight.call)} for data until "
                f"{hold.until_ms}"
            )
        return hold

    def _resume_hold(self, hold: Hold, answer: object) -> None:
        if hold in self.holds:
            self.holds.remove(hold)
        state = self.t.shell(hold.cluster).state
        while True:
            try:
                request = hold.procedure.send(answer)
            except StopIteration as stop:
                hold.done(Answered(stop.value))
                return
            except ClusterError as exc:
                hold.done(Answered(None, exc))
                return
            if isinstance(request, WaitForData):
                hold.until_ms = request.until_ms
                hold.watched = {
                    (t, p): state.partition(t, p).high_watermark
                    for t, p in request.partitions
                    if t in state.topics
                }
                self.holds.append(hold)
                return
            answer = self.t.now if isinstance(request, Now) else None

    def _data_arrived(self) -> bool:
        """Wakes the long polls whose partitions' high watermarks moved."""
        woken = False
        for hold in list(self.holds):
            state = self.t.shell(hold.cluster).state
            if any(
                t in state.topics and state.partition(t, p).high_watermark != hw
                for (t, p), hw in hold.watched.items()
            ):
                self.out.append(f"{hold.cluster}: a high watermark moved: the long poll wakes")
                self._resume_hold(hold, self.t.now)
                woken = True
        return woken or bool(self.ready)

    def _next_due(self) -> tuple[int, Callable[[], None]] | None:
        """The earliest wait to end: (when, what ends it)."""
        due: list[tuple[int, int, Callable[[], None]]] = []
        for i, lane in enumerate(Lane):
            state = self.lanes[lane]
            if state.until_ms is not None and not state.ended:
                due.append((state.until_ms, i, lambda lane=lane: self._time_up(lane)))
        for hold in self.holds:
            due.append(
                (hold.until_ms, 10, lambda hold=hold: self._resume_hold(hold, hold.until_ms))
            )
        for flight in self.flights:
            if flight.answered is None and flight.held is None:
                due.append(
                    (flight.deadline_ms, 20 + flight.number,
                     lambda flight=flight: self._deadline(flight))
                )  # fmt: skip
        if not due:
            return None
        when, _order, action = min(due, key=lambda d: (d[0], d[1]))
        return when, action

    def _time_up(self, lane: Lane) -> None:
        state = self.lanes[lane]
        state.until_ms, state.idle = None, False
        self.ready.append((lane, self.t.now))

    def _deadline(self, flight: Flight) -> None:
        flight.delivered = True
        error = unanswered(LINK, flight.call, "no answer by its deadline")
        self._answer(flight, Answered(None, error))


class _Blocked:
    pass


_BLOCKED = _Blocked()


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")


def _number(flight: Flight) -> str:
    """Pushes are numbered (several may be in flight), other calls not."""
    return f" #{flight.shown}" if flight.lane is Lane.PUSH else ""


def _wire(config: LinkConfig) -> LinkConfig:
    return LinkConfig.from_record(config.shared().to_record())


def _batches(records: bytes) -> str:
    headers = [h for _pos, h in rb.iter_batches(records)]
    if not headers:
        return "nothing"
    count = f"{len(headers)} batch" + ("es" if len(headers) > 1 else "")
    return f"{count} [{headers[0].base_offset}, {headers[-1].next_offset})"


def _call_text(call: LinkCall) -> str:
    if isinstance(call, ReplicaFetch):
        parts = call.request.partitions
        return ": " + ", ".join(f"{p.source_topic}-{p.partition}@{p.fetch_offset}" for p in parts)
    if isinstance(call, ListSourceTopics | FetchGroupOffsets):
        return f": {call.prefix}"
    if isinstance(call, ReplicaPush):
        push, extras = call.push, []
        text = ""
        if push.data is not None:
            text = ": " + "; ".join(
                f"{p.source_topic}-{p.partition} {_batches(p.records)}"
                for p in push.data.partitions
            )
        if push.namespaces:
            extras.append(_count(len(push.namespaces), "namespace"))
        if push.group_offsets:
            extras.append(_count(len(push.group_offsets), "group offset"))
        return text + (" with " + ", ".join(extras) if extras else "")
    return ""


def _answer_text(answer: object) -> str:
    if isinstance(answer, rounds.FetchAnswer):
        out = []
        for p in answer.partitions:
            where = f"{p.source_topic}-{p.partition}"
            if p.error is not None:
                out.append(f"{where} refused {p.error.code.name}")
            elif p.marks_wanted:
                out.append(f"{where} marks wanted")
            elif p.diverging_end_offset >= 0:
                out.append(f"{where} diverged at {p.diverging_end_offset}")
            else:
                out.append(f"{where} {_batches(p.records)} hw {p.high_watermark}")
        mode = f" ({answer.sync_state})" if answer.sync_state else ""
        return ": " + "; ".join(out) + mode
    if isinstance(answer, rounds.FetchRequest):
        return ": next " + ", ".join(
            f"{p.source_topic}-{p.partition}@{p.fetch_offset}" for p in answer.partitions
        )
    if isinstance(answer, LinkConfig):
        return f": mode {answer.mode}"
    if isinstance(answer, rounds.SourceNamespace):
        return ": " + (", ".join(t.name for t in answer.topics) or "no topics")
    return ""


__all__ = ["Lane", "LanePump"]
