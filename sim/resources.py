"""The resource model: each cluster's I/O bandwidth, shared by every user.

Rules:
- A cluster has one I/O device of `bytes_per_ms` served first come, first
  served. Client produce writes, client fetch reads, replica appends (writes on
  the follower) and replica fetch reads (reads on the source) all queue on it,
  so catch-up traffic competes with producers, as on a real broker.
- A request of n bytes that arrives at t starts at max(t, device free) and
  finishes n / bytes_per_ms later, rounded up to a whole millisecond; the
  device is then busy until that time. So every I/O costs at least 1 ms: with
  `fractional` the device instead keeps its busy time exactly and only the
  completion is rounded up, so many small I/Os (thousands of partitions'
  batches) cost their bytes, not a millisecond each.
- Bytes are counted per traffic class, so a run can show who used the device.
- The replication rate limit of a source (`RateLimit`) is a token bucket in
  bytes, with one second of burst, that may go into debt. As Kafka's leader
  replication quota (KIP-73) does, a replica fetch served while the source is
  within its quota (tokens left) reads up to the fetch's max bytes and the
  bytes are taken; a fetch served over the quota (in debt) reads nothing and
  waits until the debt is paid. So a throttled link copies in rounds of the
  fetch's max bytes, spaced to keep the average rate; a fetch waits only for
  the debt, never for the tokens of a whole fetch (waiting for a single token
  and reading what had gathered made thousands of tiny rounds).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class IoDevice:
    bytes_per_ms: int
    free_at_ms: int = 0
    bytes_by_class: dict[str, int] = field(default_factory=dict)
    fractional: bool = False  # keep fractions of a millisecond of busy time
    # With `fractional`: when the device is free, in bytes of device time
    # (milliseconds x bytes_per_ms), so the sum stays exact in integers.
    free_at_bytes: int = 0

    def reserve(self, size_bytes: int, now_ms: int, traffic_class: str) -> int:
        """Queues an I/O of `size_bytes`; returns when it completes."""
        size = max(0, size_bytes)
        self.bytes_by_class[traffic_class] = self.bytes_by_class.get(traffic_class, 0) + size_bytes
        if self.fractional:
            start = max(now_ms * self.bytes_per_ms, self.free_at_bytes)
            self.free_at_bytes = start + size
            self.free_at_ms = -(-self.free_at_bytes // self.bytes_per_ms)
            return self.free_at_ms
        start_ms = max(now_ms, self.free_at_ms)
        done = start_ms + -(-size // self.bytes_per_ms)
        self.free_at_ms = done
        return done


@dataclass(slots=True)
class RateLimit:
    """Token bucket: `bytes_per_s` refill, at most one second of burst."""

    bytes_per_s: int
    tokens: float = 0.0
    updated_ms: int = 0

    def available(self, now_ms: int) -> int:
        if self.bytes_per_s <= 0:
            return 1 << 62
        elapsed = max(0, now_ms - self.updated_ms)
        self.tokens = min(float(self.bytes_per_s), self.tokens + elapsed * self.bytes_per_s / 1000)
        self.updated_ms = now_ms
        return int(self.tokens)

    def take(self, size_bytes: int, now_ms: int) -> None:
        if self.bytes_per_s > 0:
            self.available(now_ms)
            self.tokens -= size_bytes

    def wait_ms(self, size_bytes: int, now_ms: int) -> int:
        """How long until `size_bytes` tokens are there."""
        if self.bytes_per_s <= 0:
            return 0
        missing = size_bytes - self.available(now_ms)
        return 0 if missing <= 0 else -(-missing * 1000 // self.bytes_per_s)
