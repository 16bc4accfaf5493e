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
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any


class EventBudgetExceeded(RuntimeError):
    """The run processed more events than its bound allows."""


# A scheduled event on the heap: [time_ms, seq, label, action]. A list, not a
# dataclass: the heap compares entries by (time_ms, seq) in C, and seq is
# unique, so the label and action are never compared. A cancelled entry has
# its action replaced by None and is skipped when popped.
_TIME, _SEQ, _LABEL, _ACTION = 0, 1, 2, 3
_Entry = list[Any]


class Timer:
    """A handle to cancel a scheduled event (long-poll deadlines, call timeouts)."""

    __slots__ = ("_entry",)

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry

    def cancel(self) -> None:
        self._entry[_ACTION] = None


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
        now = self.now_ms
        entry = [time_ms if time_ms > now else now, self._seq, label, action]
        self._seq += 1
        heappush(self._heap, entry)
        return Timer(entry)

    def after(self, delay_ms: int, label: str, action: Callable[[], None]) -> Timer:
        # As at(now + max(0, delay_ms), ...), inline: most events are scheduled here.
        now = self.now_ms
        entry = [now + delay_ms if delay_ms > 0 else now, self._seq, label, action]
        self._seq += 1
        heappush(self._heap, entry)
        return Timer(entry)

    def note(self, line: str) -> None:
        """Adds a line to the trace without an event (what an event decided)."""
        text = f"{self.now_ms} {line}"
        self._digest.update(f"{text}\n".encode())
        if self.keep_trace:
            self.trace.append(text)

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        """Processes events up to `end_ms` (inclusive), or until `stop()` holds."""
        heap = self._heap
        update = self._digest.update
        trace = self.trace
        while heap and heap[0][_TIME] <= end_ms:
            time_ms, _seq, label, action = heappop(heap)
            if action is None:
                continue  # cancelled
            self.processed += 1
            if self.processed > self.max_events:
                raise EventBudgetExceeded(
                    f"more than {self.max_events} events by t={self.now_ms} ms"
                )
            self.now_ms = time_ms
            # As note(label), inline: one trace line per event.
            if self.keep_trace:
                trace.append(f"{time_ms} {label}")
            update(f"{time_ms} {label}\n".encode())
            action()
            if stop is not None and stop():
                return
        self.now_ms = max(self.now_ms, end_ms)

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()
