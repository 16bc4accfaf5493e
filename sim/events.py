"""The virtual clock and the event queue.

Rules:
- Time is an integer count of virtual milliseconds (`now_ms`); it only moves
  when the queue pops an event, never backwards.
- Ties are broken deterministically: events at the same time run in the order
  they were scheduled (a per-queue sequence number), never by hash or identity.
- Every processed event adds one line to the trace; the trace digest is the
  sha256 over those lines, so two runs of one seed must give one digest.
- The number of events per run is bounded (`max_events`): a run that hits the
  bound stops with `EventBudgetExceeded` rather than spinning.

Theory of operation: the world schedules closures with a label; `run_until`
pops them in (time, sequence) order, advances the clock, records the label in
the trace and calls the closure, which may schedule more events.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


class EventBudgetExceeded(RuntimeError):
    """The run processed more events than its bound allows."""


@dataclass(order=True, slots=True)
class _Entry:
    time_ms: int
    seq: int
    label: str = field(compare=False)
    action: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class Timer:
    """A handle to cancel a scheduled event (long-poll deadlines, call timeouts)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry

    def cancel(self) -> None:
        self._entry.cancelled = True


class EventQueue:
    def __init__(self, max_events: int, keep_trace: bool = False) -> None:
        self.now_ms = 0
        self.max_events = max_events
        self.processed = 0
        self._heap: list[_Entry] = []
        self._seq = 0
        self._digest = hashlib.sha256()
        self.keep_trace = keep_trace
        self.trace: list[str] = []

    def at(self, time_ms: int, label: str, action: Callable[[], None]) -> Timer:
        """Schedules `action` at `time_ms` (never in the past)."""
        entry = _Entry(max(time_ms, self.now_ms), self._seq, label, action)
        self._seq += 1
        heapq.heappush(self._heap, entry)
        return Timer(entry)

    def after(self, delay_ms: int, label: str, action: Callable[[], None]) -> Timer:
        return self.at(self.now_ms + max(0, delay_ms), label, action)

    def note(self, line: str) -> None:
        """Adds a line to the trace without an event (what an event decided)."""
        text = f"{self.now_ms} {line}"
        self._digest.update(text.encode())
        self._digest.update(b"\n")
        if self.keep_trace:
            self.trace.append(text)

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        """Processes events up to `end_ms` (inclusive), or until `stop()` holds."""
        while self._heap and self._heap[0].time_ms <= end_ms:
            entry = heapq.heappop(self._heap)
            if entry.cancelled:
                continue
            self.processed += 1
            if self.processed > self.max_events:
                raise EventBudgetExceeded(
                    f"more than {self.max_events} events by t={self.now_ms} ms"
                )
            self.now_ms = entry.time_ms
            self.note(entry.label)
            entry.action()
            if stop is not None and stop():
                return
        self.now_ms = max(self.now_ms, end_ms)

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()
