"""The virtual network between clusters: latency, jitter, loss, bandwidth and
grudges.

Rules:
- Each direction of each pair of clusters is its own path with its own
  parameters (`PathParams`): a message from `source` to `target` takes
  latency_ms plus a uniform jitter in [0, jitter_ms], is dropped with
  probability `loss`, and occupies the path for size_bytes /
  bandwidth_bytes_per_ms; messages queue behind each other (FIFO), so a large
  replica fetch response delays the small handshake sent after it.
- A grudge is data: the set of directed (source, target) pairs that drop every
  message. `full`, `one_way`, `bridge` and `isolate_one` build grudges;
  `heal` clears them. A clog adds latency to one direction without dropping.
- Draws come from the network's own seeded stream; messages are delivered in
  the order the event queue dictates (time, then scheduling order).

Theory of operation: `deliver_at(source, target, size, now)` decides the fate of
one message at send time: None (dropped: grudge or loss) or the virtual time it
arrives. Senders schedule the arrival themselves.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class PathParams:
    latency_ms: int = 2
    jitter_ms: int = 1
    loss: float = 0.0
    bandwidth_bytes_per_ms: int = 125_000  # 1 Gbit/s

    def __post_init__(self) -> None:
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency_ms and jitter_ms must be >= 0")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError("loss must be within [0, 1]")
        if self.bandwidth_bytes_per_ms <= 0:
            raise ValueError("bandwidth_bytes_per_ms must be > 0")


def full(side_a: Iterable[str], side_b: Iterable[str]) -> set[Pair]:
    """Nobody on one side hears anybody on the other, both ways."""
    a, b = sorted(side_a), sorted(side_b)
    return {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}


def one_way(sources: Iterable[str], targets: Iterable[str]) -> set[Pair]:
    """Messages from `sources` to `targets` are dropped; the reverse flows."""
    return {(s, t) for s in sorted(sources) for t in sorted(targets) if s != t}


def bridge(side_a: Iterable[str], side_b: Iterable[str], bridge_node: str) -> set[Pair]:
    """Two sides cut from each other, except that `bridge_node` hears both."""
    a = [x for x in sorted(side_a) if x != bridge_node]
    b = [x for x in sorted(side_b) if x != bridge_node]
    return full(a, b)


def isolate_one(node: str, everyone: Iterable[str]) -> set[Pair]:
    others = [x for x in sorted(everyone) if x != node]
    return full([node], others)


class Network:
    def __init__(self, rng: random.Random, default: PathParams) -> None:
        self.rng = rng
        self.default = default
        self.paths: dict[Pair, PathParams] = {}
        self.grudge: set[Pair] = set()
        self.clog_ms: dict[Pair, int] = {}
        self.down: set[str] = set()  # crashed clusters: neither send nor receive
        self._free_at_ms: dict[Pair, int] = {}
        self.sent_bytes = 0
        self.dropped = 0

    def set_path(self, source: str, target: str, params: PathParams) -> None:
        self.paths[(source, target)] = params

    def params(self, source: str, target: str) -> PathParams:
        return self.paths.get((source, target), self.default)

    def reachable(self, source: str, target: str) -> bool:
        return (
            (source, target) not in self.grudge
            and source not in self.down
            and target not in self.down
        )

    def heal(self) -> None:
        self.grudge.clear()
        self.clog_ms.clear()

    def deliver_at(self, source: str, target: str, size_bytes: int, now_ms: int) -> int | None:
        """When a message sent now arrives, or None when it is lost."""
        p = self.params(source, target)
        # Draw even for messages that will be dropped, so that a grudge does not
        # shift the jitter of later messages on other paths.
        jitter = self.rng.randint(0, p.jitter_ms) if p.jitter_ms else 0
        lost = p.loss > 0 and self.rng.random() < p.loss
        if lost or not self.reachable(source, target):
            self.dropped += 1
            return None
        pair = (source, target)
        start = max(now_ms, self._free_at_ms.get(pair, 0))
        transfer_ms = -(-max(0, size_bytes) // p.bandwidth_bytes_per_ms)
        self._free_at_ms[pair] = start + transfer_ms
        self.sent_bytes += size_bytes
        return start + transfer_ms + p.latency_ms + jitter + self.clog_ms.get(pair, 0)
