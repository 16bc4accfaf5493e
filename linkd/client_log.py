"""librdkafka's log messages of a hosted mirror link, through the daemon's logger.

A mirror link's engine runs confluent-kafka clients. Left alone, librdkafka
writes its messages to stderr as raw lines: they break the daemon's log of
one JSON object a line, and a source that stops makes every client repeat
"Connect to ... failed" several times a second (about 460 lines in 10 s).
`ClientLog` is what the clients' `logger` option is given instead:

- Each message becomes one record of the logger it wraps (so one JSON line),
  at the level confluent-kafka maps librdkafka's to, with librdkafka's
  facility and client name as fields and the mirror link's fields added.
- At most `limit` messages pass per `window_s` (per mirror link: one
  `ClientLog` is shared by all of a link's clients). The rest are counted,
  never dropped silently: when the window ends, one warning says how many
  were suppressed and repeats the last of them. The window is closed by the
  next message, by `tick()` (a thread of the mirror link calls it every
  second, also while the engine waits in a client call) or by
  `flush()` (the engine stopping).

Thread-safe: librdkafka's messages are served on whichever thread polls a
client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LIMIT", "WINDOW_S", "ClientLog"]

LIMIT = 10
WINDOW_S = 10.0


class ClientLog:
    """The object confluent-kafka's `logger` option calls: `log(level, fmt, *args)`."""

    def __init__(
        self,
        logger: logging.Logger,
        fields: Mapping[str, Any],
        *,
        limit: int = LIMIT,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._fields = dict(fields)
        self._limit = limit
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._window_start: float | None = None
        self._passed = 0
        self._suppressed = 0
        self._last_suppressed = ""
        self.total_suppressed = 0

    def log(self, level: int, fmt: str, *args: Any) -> None:
        fields, text = self._parse(fmt, args)
        with self._lock:
            summary = self._roll(self._clock())
            if self._passed < self._limit:
                self._passed += 1
                passed = True
            else:
                self._suppressed += 1
                self.total_suppressed += 1
                self._last_suppressed = text
                passed = False
        self._emit(summary)
        if passed:
            self._logger.log(level, "librdkafka: %s", text, extra={**self._fields, **fields})

    def tick(self) -> None:
        """Closes the window if it has ended (its summary logged)."""
        with self._lock:
            summary = self._roll(self._clock())
        self._emit(summary)

    def flush(self) -> None:
        """Closes the window now: what was suppressed in it is said."""
        with self._lock:
            summary = self._summary()
            self._window_start = None
            self._passed = 0
        self._emit(summary)

    def _roll(self, now: float) -> dict[str, Any] | None:
        if self._window_start is not None and now - self._window_start < self._window_s:
            return None
        summary = self._summary() if self._window_start is not None else None
        self._window_start = now
        self._passed = 0
        return summary

    def _summary(self) -> dict[str, Any] | None:
        if not self._suppressed:
            return None
        summary = {"suppressed": self._suppressed, "window_s": self._window_s,
                   "last": self._last_suppressed}
        self._suppressed = 0
        self._last_suppressed = ""
        return summary

    def _emit(self, summary: dict[str, Any] | None) -> None:
        if summary is not None:
            self._logger.warning(
                "librdkafka: %d more messages suppressed (at most %d per %g s)",
                summary["suppressed"], self._limit, self._window_s,
                extra={**self._fields, **summary},
            )

    @staticmethod
    def _parse(fmt: str, args: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
        """confluent-kafka calls log(level, "%s [%s] %s", facility, client, message)."""
        if fmt == "%s [%s] %s" and len(args) == 3:
            facility, client, message = (str(a) for a in args)
            return {"rdkafka_facility": facility, "rdkafka_client": client}, message
        try:
            return {}, fmt % args if args else fmt
        except (TypeError, ValueError):
            return {}, " ".join([fmt, *map(str, args)])
