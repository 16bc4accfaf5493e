"""MM2's replication metrics, as a pure accumulator.

Rules (Kafka's MirrorSourceMetrics, MirrorCheckpointMetrics, MirrorSourceTask.poll and
commitRecord, MirrorCheckpointTask.commitRecord):
- Source metrics (group `MirrorSourceConnector`, tags target, topic, partition; the
  topic is the REMOTE topic):
  - record-count: records acknowledged by the target; record-rate: those per second;
  - record-age-ms (-min, -max, -avg): now - record timestamp, when polled from the source;
  - replication-latency-ms (-min, -max, -avg): now - record timestamp, when
    acknowledged by the target;
  - byte-count and byte-rate: sizes of the record values polled.
- Checkpoint metrics (group `MirrorCheckpointConnector`, tags source, target, group,
  topic, partition): checkpoint-latency-ms (-min, -max, -avg): now - checkpoint
  record timestamp when the target acknowledged it.
- The un-suffixed metric holds the last value recorded (Kafka's `Value` stat).

Deviation (documented in docs/mirror-mode.md): Kafka's min/max/avg/rate are windowed
(sampled) stats; here they cover the whole life of the accumulator, and byte-rate
is bytes per second between the first recording and `now_ms` (record-rate likewise,
from the first acknowledgement).

Theory of operation: the shell calls `record_polled`, `record_acknowledged` and
`checkpoint_acknowledged` with `now_ms`; `snapshot(now_ms)` returns metric name ->
value per key, with MM2's names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["CheckpointMetricKey", "MirrorMetrics", "SourceMetricKey", "Stat"]

SOURCE_GROUP = "MirrorSourceConnector"
CHECKPOINT_GROUP = "MirrorCheckpointConnector"
# One accumulator tracks at most this many keys; more means a shell leak.
MAX_METRIC_KEYS = 1_000_000
_EXACT = 2**53  # integers below this add exactly as floats


@dataclass(frozen=True, slots=True, order=True)
class SourceMetricKey:
    target: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, order=True)
class CheckpointMetricKey:
    source: str
    target: str
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Stat:
    """Count, sum, min, max and last value of a series."""

    count: int = 0
    total: float = 0.0
    minimum: float = float("inf")
    maximum: float = float("-inf")
    last: float = float("nan")

    def record(self, value: float) -> Stat:
        return Stat(
            self.count + 1,
            self.total + value,
            min(self.minimum, value),
            max(self.maximum, value),
            value,
        )

    def record_many(self, values: Iterable[float]) -> Stat:
        """The same Stat as `record` called for each value in turn."""
        count, total, lo, hi, last = self.count, self.total, self.minimum, self.maximum, self.last
        for value in values:
            count += 1
            total = total + value
            if value < lo:  # as min(lo, value): the first of equals is kept
                lo = value
            if value > hi:  # as max(hi, value)
                hi = value
            last = value
        return Stat(count, total, lo, hi, last)

    def record_ages(self, now_ms: int, timestamps_ms: Sequence[int]) -> Stat:
        """`record_many(now_ms - ts for ts in timestamps_ms)`, computed with the C
        builtins (sum, min, max) when that gives the same floats: integer values and a
        total that stays an exact integer (below 2**53)."""
        n = len(timestamps_ms)
        if not n:
            return self
        total_ts = sum(timestamps_ms)
        lo, hi = now_ms - max(timestamps_ms), now_ms - min(timestamps_ms)
        # Each running total of the value-by-value sum is at most this: exact below 2**53.
        bound = abs(self.total) + n * max(abs(lo), abs(hi))
        if not (
            isinstance(total_ts, int)
            and isinstance(now_ms, int)
            and self.total.is_integer()
            and bound < _EXACT
        ):
            return self.record_many(now_ms - ts for ts in timestamps_ms)
        return Stat(
            self.count + n,
            self.total + (now_ms * n - total_ts),
            lo if lo < self.minimum else self.minimum,
            hi if hi > self.maximum else self.maximum,
            now_ms - timestamps_ms[-1],
        )

    def report(self, name: str) -> dict[str, float]:
        if self.count == 0:
            # Kafka reports NaN for an empty avg and the stat's initial value for min/max.
            return {
                name: float("nan"),
                f"{name}-min": float("nan"),
                f"{name}-max": float("nan"),
                f"{name}-avg": float("nan"),
            }
        return {
            name: self.last,
            f"{name}-min": self.minimum,
            f"{name}-max": self.maximum,
            f"{name}-avg": self.total / self.count,
        }


@dataclass
class _SourcePartitionMetrics:
    record_count: int = 0
    byte_count: int = 0
    first_bytes_ms: int | None = None
    first_ack_ms: int | None = None
    record_age: Stat = field(default_factory=Stat)
    replication_latency: Stat = field(default_factory=Stat)


class MirrorMetrics:
    def __init__(self) -> None:
        self._source: dict[SourceMetricKey, _SourcePartitionMetrics] = {}
        self._checkpoint: dict[CheckpointMetricKey, Stat] = {}

    def _source_entry(self, key: SourceMetricKey) -> _SourcePartitionMetrics:
        entry = self._source.get(key)
        if entry is None:
            if len(self._source) >= MAX_METRIC_KEYS:
                raise ValueError(f"more than {MAX_METRIC_KEYS} source metric keys")
            entry = self._source[key] = _SourcePartitionMetrics()
        return entry

    def record_polled(
        self, key: SourceMetricKey, now_ms: int, record_timestamp_ms: int, value_bytes: int
    ) -> None:
        """MirrorSourceTask.poll: record-age-ms and bytes."""
        entry = self._source_entry(key)
        entry.record_age = entry.record_age.record(now_ms - record_timestamp_ms)
        entry.byte_count += value_bytes
        if entry.first_bytes_ms is None:
            entry.first_bytes_ms = now_ms

    def record_acknowledged(
        self, key: SourceMetricKey, now_ms: int, record_timestamp_ms: int
    ) -> None:
        """MirrorSourceTask.commitRecord: record-count and replication-latency-ms."""
        entry = self._source_entry(key)
        entry.record_count += 1
        if entry.first_ack_ms is None:
            entry.first_ack_ms = now_ms
        entry.replication_latency = entry.replication_latency.record(now_ms - record_timestamp_ms)

    def records_polled(
        self,
        key: SourceMetricKey,
        now_ms: int,
        record_timestamps_ms: Sequence[int],
        value_bytes: int,
    ) -> None:
        """`record_polled` for several records of one key at once (`value_bytes` is
        their sum): the same metrics as one call per record, in order."""
        if not record_timestamps_ms:
            return
        entry = self._source_entry(key)
        entry.record_age = entry.record_age.record_ages(now_ms, record_timestamps_ms)
        entry.byte_count += value_bytes
        if entry.first_bytes_ms is None:
            entry.first_bytes_ms = now_ms

    def records_acknowledged(
        self, key: SourceMetricKey, now_ms: int, record_timestamps_ms: Sequence[int]
    ) -> None:
        """`record_acknowledged` for several records of one key at once, in order."""
        if not record_timestamps_ms:
            return
        entry = self._source_entry(key)
        entry.record_count += len(record_timestamps_ms)
        if entry.first_ack_ms is None:
            entry.first_ack_ms = now_ms
        entry.replication_latency = entry.replication_latency.record_ages(
            now_ms, record_timestamps_ms
        )

    def checkpoint_acknowledged(
        self, key: CheckpointMetricKey, now_ms: int, checkpoint_timestamp_ms: int
    ) -> None:
        """MirrorCheckpointTask.commitRecord: checkpoint-latency-ms."""
        stat = self._checkpoint.get(key)
        if stat is None and len(self._checkpoint) >= MAX_METRIC_KEYS:
            raise ValueError(f"more than {MAX_METRIC_KEYS} checkpoint metric keys")
        self._checkpoint[key] = (stat or Stat()).record(now_ms - checkpoint_timestamp_ms)

    def snapshot(
        self, now_ms: int
    ) -> dict[SourceMetricKey | CheckpointMetricKey, dict[str, float]]:
        out: dict[SourceMetricKey | CheckpointMetricKey, dict[str, float]] = {}
        for key in sorted(self._source):
            e = self._source[key]
            values: dict[str, float] = {
                "record-count": float(e.record_count),
                "byte-count": float(e.byte_count),
            }
            if e.first_bytes_ms is None:
                values["byte-rate"] = 0.0
            else:
                elapsed_s = max(now_ms - e.first_bytes_ms, 1) / 1000.0
                values["byte-rate"] = e.byte_count / elapsed_s
            if e.first_ack_ms is None:
                values["record-rate"] = 0.0
            else:
                elapsed_s = max(now_ms - e.first_ack_ms, 1) / 1000.0
                values["record-rate"] = e.record_count / elapsed_s
            values.update(e.record_age.report("record-age-ms"))
            values.update(e.replication_latency.report("replication-latency-ms"))
            out[key] = values
        for ckey in sorted(self._checkpoint):
            out[ckey] = self._checkpoint[ckey].report("checkpoint-latency-ms")
        return out
