"""Which partitions keep a link from FOLLOWING, judged on every contact
without scanning every partition each time.

The rule (module `links`, "States of an ASYNC link"): a follower partition
lags when it is more than `lag_max_records` or `lag_max_ms` behind its
source HW; a partition this side leads lags when its follower has more than
`lag_max_records` below the HW to copy and is behind (`leader_behind`:
silent, or not caught up at its last fetch, or not for `lag_max_ms`).

A link's state is judged on every call of the link (each contact, each
round), over every partition of the link: at thousands of partitions the
scan cost more than the rest of a quiet round. A scan that finds nothing
lagging therefore leaves a `LagVerdict` that later judgements start from:

- a follower row, and a led row whose follower is not behind, cannot start
  lagging while the row stays as it is until a time the scan computes
  (`until_ms`, the earliest over those rows); the log's HW does not matter
  to a led row that is not behind;
- a led row whose follower is behind with few records to copy can start
  lagging as its log grows, with no change to the row: it is watched, judged
  again every time;
- a row the table changes (a fetch that moved it, new progress, a new row)
  is marked dirty (`LinkTable._lag_news`) and judged again next time.

The table's repeated quiet fetches and the follower's quiet rounds move a
row only forward in time (a later fetch, a later caught-up time), which
never brings a row's lag nearer: they leave the verdict as it is. A verdict
is dropped, and the next judgement scans, once its `until_ms` is reached,
when the clock reads earlier than any time it has seen, and when the
table's limits or its led logs are not the ones it was reached under.
`LinkTable.check_lag_verdicts` (tests) compares every answer with a scan.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

Key = tuple[str, int, str]  # (local topic, partition, role)


class Role(enum.StrEnum):
    """This side's role in a mapping, and in a link's row of a partition."""

    LEADER = "leader"
    FOLLOWER = "follower"


# What `judged` says of a row besides a time: it lags now, or it is a led
# row whose follower is behind with few records to copy (its lag moves with
# its log: judged again every time).
LAGGING = -1
WATCH = -2
# Not before the end of time: a row that cannot start lagging unchanged.
NEVER = 2**62


class PartitionProgress(Protocol):
    """What the judgement reads of a link's row (`links.PartitionProgress`)."""

    topic: str
    partition: int
    role: str
    log_end_offset: int
    source_high_watermark: int
    caught_up_at_ms: int
    last_fetch_ms: int
    hw_caught_up_ms: int
    caught_up_at_fetch: bool
    fetches: int


class LinkLimits(Protocol):
    """What the judgement reads of a table's limits (`links.LinkLimits`)."""

    @property
    def lag_max_records(self) -> int: ...

    @property
    def lag_max_ms(self) -> int: ...

    @property
    def fetch_silence_ms(self) -> int: ...


Row = TypeVar("Row", bound=PartitionProgress)


class LogBounds(Protocol):
    """What the judgement reads of a led partition's log."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...


# The logs of a topic this cluster leads, by partition (None: the topic is gone).
LedLogs = Callable[[str], Sequence[LogBounds] | None]


def leader_behind(p: PartitionProgress, now_ms: int, limits: LinkLimits) -> bool:
    """A led partition's follower, once it has more than `lag_max_records`
    to copy: silent (no fetch for `fetch_silence_ms`), or not caught up at
    its last fetch, or not for `lag_max_ms`. Never fetched: silent only."""
    silent = now_ms - p.last_fetch_ms > limits.fetch_silence_ms
    if p.fetches == 0:
        return silent  # registered, never fetched
    return (
        not p.caught_up_at_fetch
        or silent
        or now_ms - p.hw_caught_up_ms > limits.lag_max_ms
    )


def _behind_from(p: PartitionProgress, limits: LinkLimits) -> int:
    """The first time at which `leader_behind` holds for a row that is not
    behind now, if the row stays as it is."""
    silent_at = p.last_fetch_ms + limits.fetch_silence_ms + 1
    if p.fetches == 0:
        return silent_at
    return min(silent_at, p.hw_caught_up_ms + limits.lag_max_ms + 1)


def judged(
    partitions: Iterable[Row],
    now_ms: int,
    limits: LinkLimits,
    led_logs: LedLogs | None,
) -> Iterator[tuple[Row, int]]:
    """Each of `partitions` with what it says now: LAGGING, WATCH, or the
    first time it could start lagging if it stays as it is (NEVER: not
    before the end of time). `PartitionProgress.lag_records` and `lag_ms`
    and `LinkTable.leader_lag` are inlined (the same results): this runs
    over every partition of a link whenever a verdict runs out."""
    max_records = limits.lag_max_records
    max_ms = limits.lag_max_ms
    logs_topic: str | None = None
    logs: Sequence[LogBounds] | None = None
    for p in partitions:
        if p.role == Role.FOLLOWER:
            records = p.source_high_watermark - p.log_end_offset
            if records <= 0:  # lag_records() == 0, so lag_ms() == 0
                yield p, (LAGGING if 0 > max_records or 0 > max_ms else NEVER)
                continue
            since = now_ms - p.caught_up_at_ms
            if records > max_records or (since if since > 0 else 0) > max_ms:
                yield p, LAGGING
            else:
                yield p, p.caught_up_at_ms + max_ms + 1
            continue
        if not leader_behind(p, now_ms, limits):
            yield p, _behind_from(p, limits)
            continue
        if led_logs is not None and p.topic != logs_topic:
            logs_topic, logs = p.topic, led_logs(p.topic)
        if logs is None or p.partition >= len(logs):
            lag = 0
        else:
            log = logs[p.partition]
            log_start, end = log.log_start_offset, p.log_end_offset
            lag = log.high_watermark - (end if end > log_start else log_start)
            if lag < 0:
                lag = 0
        yield p, (LAGGING if lag > max_records else WATCH)


@dataclass(slots=True)
class LagVerdict:
    """A scan of a link's rows that found none lagging, kept up since
    (module docstring)."""

    limits: LinkLimits
    led_logs: LedLogs | None
    latest_ms: int  # the latest time a judgement or a change was made at
    until_ms: int = NEVER  # a row not watched nor dirty may lag from then on
    watch: dict[Key, PartitionProgress] = field(default_factory=dict)
    dirty: set[Key] = field(default_factory=set)
    lagging_key: Key | None = None  # the row last found lagging (dirty still)

    def lagging(
        self,
        rows: Mapping[Key, PartitionProgress],
        now_ms: int,
        limits: LinkLimits,
        led_logs: LedLogs | None,
    ) -> bool | None:
        """Whether a row of `rows` lags now, judging only the dirty and the
        watched ones; None: the verdict no longer holds (scan)."""
        if (
            now_ms >= self.until_ms
            or now_ms < self.latest_ms
            or limits is not self.limits
            or led_logs is not self.led_logs
        ):
            return None
        self.latest_ms = now_ms
        # The one found lagging last time first: while a link catches up it
        # usually still lags, and the others stay dirty meanwhile.
        hint = self.lagging_key
        for key in itertools.chain((hint,) if hint in self.dirty else (), list(self.dirty)):
            if key not in self.dirty:
                continue  # (the hint, judged first)
            row = rows.get(key)
            self.watch.pop(key, None)
            if row is not None and not self._fold(key, row, now_ms):
                self.lagging_key = key
                return True  # it stays dirty: judged again next time
            self.dirty.discard(key)
        for key, row in list(self.watch.items()):
            if rows.get(key) is not row:
                del self.watch[key]  # forgotten or replaced (a new row is dirty)
            elif not self._fold(key, row, now_ms):
                return True
        return False

    def _fold(self, key: Key, row: PartitionProgress, now_ms: int) -> bool:
        """Takes in what `row` says now; False when it lags."""
        for _, said in judged((row,), now_ms, self.limits, self.led_logs):
            if said == LAGGING:
                return False
            if said == WATCH:
                self.watch[key] = row
            else:
                self.watch.pop(key, None)
                self.until_ms = min(self.until_ms, said)
        return True


def scan(
    rows: Mapping[Key, Row],
    now_ms: int,
    limits: LinkLimits,
    led_logs: LedLogs | None,
) -> tuple[Row | None, LagVerdict | None]:
    """Every row judged: the first that lags, or (None, the verdict that
    none does, to judge from until it runs out)."""
    verdict = LagVerdict(limits, led_logs, now_ms)
    until = NEVER
    for p, said in judged(rows.values(), now_ms, limits, led_logs):
        if said == LAGGING:
            return p, None
        if said == WATCH:
            verdict.watch[(p.topic, p.partition, p.role)] = p
        elif said < until:
            until = said
    verdict.until_ms = until
    return None, verdict


__all__ = ["LAGGING", "NEVER", "WATCH", "LagVerdict", "Role", "judged", "leader_behind", "scan"]
