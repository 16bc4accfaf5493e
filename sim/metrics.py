"""Run metrics: a flat name -> number map, plus the definitions.

- produce_latency_{p50,p99,max}_ms: acknowledged record-level sends, invoke to
  ack (client latency + I/O queueing + write).
- produce_latency_p99_catchup_ms / _steady_ms: the same, for sends invoked
  while links were catching up after a heal, and for all others.
- produce_latency_{p50,p99}_replicated_ms: the same, for sends acknowledged
  while a link carried their namespace to a follower (what replication, SYNC
  or ASYNC, costs a producer; writes after a failover to a cluster with no
  follower are left out).
- availability_<class>: ok / all operations per spec section 6 client class.
- rpo_records, rpo_ms: at each failover, acknowledged records on the source
  that the promoted follower lacks, and the span of acknowledgement time they
  cover: per partition, the newest acknowledgement on the source minus the
  newest acknowledgement of a record the follower holds (or, when it holds
  none of them, minus the oldest lost acknowledgement); the largest over the
  partitions (`recovery_point`, for links and mirrors alike).
- consumer_duplicates_across_failover / consumer_skips_across_failover: values a
  consumer saw again after moving clusters; stored values below its final
  position that it never saw.
- link_state_ms_<STATE>: time each link spent in each state (sampled per tick).
- consumer_reads_truncated: records consumers read that the cluster they read
  them on no longer holds at the end (cut after they were read).
- consumer_longest_gap_ms: the longest time a consumer went without new
  records (between two polls that returned some), over all consumers.
- catchup_ms: the longest time from a heal to every link FOLLOWING without lag.
- records_truncated_by_recovery / records_truncated_unclean: records cut from
  followers after divergence, and by emulated unclean leader elections.
"""

from __future__ import annotations

import math

from sim.checkers import unread_across_sessions
from sim.history import History, Poll, Send


def percentile(values: list[int], q: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def recovery_point(acked: list[tuple[tuple[str, int], int, int, bool]]) -> tuple[int, int]:
    """(rpo_records, rpo_ms) of one failover from each acknowledged send on
    the old source: (partition key, acknowledgement ms, records, whether the
    promoted side holds it)."""
    lost = 0
    newest_acked: dict[tuple[str, int], int] = {}
    newest_held: dict[tuple[str, int], int] = {}
    oldest_lost: dict[tuple[str, int], int] = {}
    for key, ack_ms, records, held in acked:
        newest_acked[key] = max(newest_acked.get(key, ack_ms), ack_ms)
        if held:
            newest_held[key] = max(newest_held.get(key, ack_ms), ack_ms)
        else:
            lost += records
            oldest_lost[key] = min(oldest_lost.get(key, ack_ms), ack_ms)
    rpo_ms = 0
    for key in sorted(oldest_lost):
        since = newest_held.get(key, oldest_lost[key])
        rpo_ms = max(rpo_ms, newest_acked[key] - since)
    return lost, rpo_ms


class Metrics:
    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.windows: dict[str, list[tuple[int, int]]] = {}

    def add(self, name: str, amount: float) -> None:
        self.values[name] = self.values.get(name, 0) + amount

    def set(self, name: str, value: float) -> None:
        self.values[name] = value

    def maximum(self, name: str, value: float) -> None:
        self.values[name] = max(self.values.get(name, value), value)

    def window(self, name: str, start_ms: int, end_ms: int) -> None:
        self.windows.setdefault(name, []).append((start_ms, end_ms))

    def flat(self) -> dict[str, float]:
        return dict(sorted(self.values.items()))

    def from_history(
        self, history: History, final: dict[tuple[str, str, int], dict[int, str]]
    ) -> None:
        latencies: list[int] = []
        replicated: list[int] = []
        catchup: list[int] = []
        steady: list[int] = []
        bulk: list[int] = []
        windows = self.windows.get("catchup", [])
        totals: dict[str, list[int]] = {}
        for op in history.ops:
            counts = totals.setdefault(op.client_class, [0, 0])
            counts[1] += 1
            if op.type == "ok":
                counts[0] += 1
            self.add(f"ops_{op.type}", 1)
            v = op.value
            if op.type != "ok" or not isinstance(v, Send):
                continue
            if not v.value:
                bulk.append(op.latency_ms)
                continue
            latencies.append(op.latency_ms)
            if v.followers:
                replicated.append(op.latency_ms)
            if any(a <= op.invoke_ms <= b for a, b in windows):
                catchup.append(op.latency_ms)
            else:
                steady.append(op.latency_ms)
        self.set("produce_latency_p50_ms", percentile(latencies, 50))
        self.set("produce_latency_p99_ms", percentile(latencies, 99))
        self.set("produce_latency_max_ms", max(latencies, default=0))
        self.set("produce_latency_p50_replicated_ms", percentile(replicated, 50))
        self.set("produce_latency_p99_replicated_ms", percentile(replicated, 99))
        self.set("produce_latency_p99_catchup_ms", percentile(catchup, 99))
        self.set("produce_latency_p99_steady_ms", percentile(steady, 99))
        if bulk:
            self.set("bulk_produce_latency_p99_ms", percentile(bulk, 99))
        for cls, (ok, total) in sorted(totals.items()):
            self.set(f"availability_{cls}", round(ok / total, 6) if total else 1.0)
        self._across_failover(history, final)

    def _across_failover(
        self, history: History, final: dict[tuple[str, str, int], dict[int, str]]
    ) -> None:
        unread = unread_across_sessions(history, final)
        self.set("consumer_duplicates_across_failover", unread.duplicates)
        self.set("consumer_skips_across_failover", sum(len(u.offsets) for u in unread.skipped))
        self.set("consumer_reads_truncated", reads_truncated(history, final))
        self.set("consumer_longest_gap_ms", longest_gap(history))


def longest_gap(history: History) -> int:
    """The longest time a consumer went without new records: between the
    completions of two successive polls that returned records, the largest
    over all consumers (0 without two such polls)."""
    last: dict[str, int] = {}
    gap = 0
    for op in sorted(history.polls(), key=lambda o: (o.complete_ms, o.invoke_ms)):
        v = op.value
        if op.type != "ok" or not isinstance(v, Poll) or not v.records:
            continue
        if op.process in last:
            gap = max(gap, op.complete_ms - last[op.process])
        last[op.process] = op.complete_ms
    return gap


def reads_truncated(
    history: History, final: dict[tuple[str, str, int], dict[int, str]]
) -> int:
    """Records a consumer read that the cluster it read them on no longer
    holds at the end (cut by a recovery, a divergence or an unclean election):
    reads no cluster that survives can repeat."""
    held: dict[tuple[str, str, int], set[str]] = {}
    count = 0
    for op in history.polls():
        v = op.value
        if op.type != "ok" or not isinstance(v, Poll):
            continue
        for partition, _offset, value in v.records:
            key = (op.cluster, v.topic, partition)
            if key not in held:
                held[key] = set(final.get(key, {}).values())
            if value not in held[key]:
                count += 1
    return count
