"""What a follower holds against its source, for the design studies
(docs/studies/fetch-bound.md): how far behind the follower stays while
transactions are open, and what a failover leaves of each transaction.

- follower_lag_records_mean / _max: every `[run] lag_sample_ms` (0: not
  sampled), the records each link's follower lacks below its source's high
  watermark, summed over the link's follower partitions (both clusters up);
  the mean and the largest over the samples. The truth of the logs, not what
  the follower last heard.
- failover_aborted_transactions: replicated transactions the failovers
  aborted (the answers' `aborted_transactions`, one per partition).
- consumer_reads_aborted_uncommitted: records read_uncommitted consumers
  read that the cluster they read them on holds in an aborted transaction at
  the end (`aborted_offsets`: its client aborted it, or a failover aborted it
  because its commit marker had not arrived): reads of records no committed
  history holds.
- transactions_partial_after_failover: transactions every send of which was
  acknowledged (committed) of which, at the end, a cluster a failover made
  writable shows read_committed readers some records but not all: the rest
  never arrived, or arrived and were aborted by the failover. A transaction
  the promoted cluster shows none of is not partial (lost whole, the
  failover's lag reports it).
- failover_records_cut: records the failovers cut at their last stable
  offset (failover.truncation last-stable-offset; the answers' `truncated`).
- consumer_reads_cut_by_failover: records consumers had read on a cluster
  that a failover of that cluster then cut (phantom reads: read, then gone).
- failover_acknowledged_cut: non-transactional records another cluster had
  acknowledged (the source) at offsets a failover's cut removed: lost by the
  cut, beyond rpo_records (measured as the failover began).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from linkd.core import histories
from linkd.core import replication as rep
from linkd.core.links import in_prefix
from sim.history import History, Poll, Send

if TYPE_CHECKING:
    from sim.world import Simulation


class LagSampler:
    """Samples every link's follower lag (ground truth) every `every_ms`."""

    def __init__(self, sim: Simulation, every_ms: int) -> None:
        self.sim = sim
        self.every_ms = every_ms
        self.next_ms = 0
        self.samples: list[int] = []

    def __call__(self, now: int) -> None:
        if now < self.next_ms:
            return
        self.next_ms = now + self.every_ms
        for _cid, node, _name, config, remote in self.sim.live_links():
            lag = 0
            followed = False
            for m in rep.follower_mappings(config, "topic"):
                for topic in sorted(node.state.topics):
                    if not in_prefix(topic, m.local_prefix):
                        continue
                    source = rep.map_name(topic, m.local_prefix, m.remote_prefix)
                    if source not in remote.state.topics:
                        continue
                    followed = True
                    for p in range(len(node.state.topics[topic].partitions)):
                        if p >= len(remote.state.topics[source].partitions):
                            continue
                        held = node.state.partition(topic, p).log_end_offset
                        hw = remote.state.partition(source, p).high_watermark
                        lag += max(0, hw - held)
            if followed:
                self.samples.append(lag)

    def finish(self) -> None:
        metrics = self.sim.metrics
        metrics.set(
            "follower_lag_records_mean",
            round(sum(self.samples) / len(self.samples), 3) if self.samples else 0,
        )
        metrics.set("follower_lag_records_max", max(self.samples, default=0))


def reads_aborted_uncommitted(
    history: History,
    final: dict[tuple[str, str, int], dict[int, str]],
    hidden: dict[tuple[str, str, int], set[int]],
) -> int:
    """consumer_reads_aborted_uncommitted, from the polls, the final logs and
    the offsets each final log holds in aborted transactions."""
    aborted: dict[tuple[str, str, int], set[str]] = {
        key: {final[key][o] for o in offsets if o in final.get(key, {})}
        for key, offsets in hidden.items()
    }
    count = 0
    for op in history.polls():
        v = op.value
        if op.type != "ok" or not isinstance(v, Poll) or v.read_committed:
            continue
        for partition, _offset, value in v.records:
            if value in aborted.get((op.cluster, v.topic, partition), ()):
                count += 1
    return count


def failover_aborted(sim: Simulation) -> int:
    return sum(len(result.dangling) for _c, _l, _at, result in sim.failovers)


def failover_cut(sim: Simulation) -> int:
    """failover_records_cut: the records the answers' `truncated` rows removed."""
    return sum(c.removed for _c, _l, _at, result in sim.failovers for c in result.truncated)


# (cluster, topic, partition) -> [(from, to, answered at ms)]: the ranges
# failovers cut, each with when the failover answered (the chaos runner
# builds the same from the answers of real failovers).
CutRanges = dict[tuple[str, str, int], list[tuple[int, int, int]]]


def _cut_ranges(sim: Simulation) -> CutRanges:
    """Every failover cut of the run."""
    cuts: CutRanges = {}
    for cluster, _link, at_ms, result in sim.failovers:
        for c in result.truncated:
            key = (cluster, c.topic, c.partition)
            cuts.setdefault(key, []).append((c.truncate_to, c.truncate_to + c.removed, at_ms))
    return cuts


def acknowledged_cut(sim: Simulation) -> int:
    """failover_acknowledged_cut, of the simulated run."""
    return acknowledged_in_cuts(sim.history, _cut_ranges(sim))


def acknowledged_in_cuts(history: History, cuts: CutRanges) -> int:
    """failover_acknowledged_cut: acknowledged non-transactional sends to
    another cluster, before the failover answered, at offsets its cut removed
    from the cluster that failed over (links keep offsets)."""
    by_topic: dict[tuple[str, int], list[tuple[str, int, int, int]]] = {}
    for (cluster, topic, partition), ranges in cuts.items():
        for low, high, at_ms in ranges:
            by_topic.setdefault((topic, partition), []).append((cluster, low, high, at_ms))
    if not by_topic:
        return 0
    count = 0
    for op in history.sends():
        v = op.value
        if op.type != "ok" or not isinstance(v, Send) or v.txn or v.offset < 0:
            continue
        for cluster, low, high, at_ms in by_topic.get((v.topic, v.partition), ()):
            if op.cluster != cluster and low <= v.offset < high and op.complete_ms <= at_ms:
                count += v.records
                break
    return count


def reads_cut_by_failover(sim: Simulation) -> int:
    """consumer_reads_cut_by_failover, of the simulated run."""
    return reads_in_cuts(sim.history, _cut_ranges(sim))


def reads_in_cuts(history: History, cuts: CutRanges) -> int:
    """consumer_reads_cut_by_failover: records read on a cluster, by a poll
    that ended before a failover there answered, at an offset that failover's
    cut removed."""
    if not cuts:
        return 0
    count = 0
    for op in history.polls():
        v = op.value
        if op.type != "ok" or not isinstance(v, Poll):
            continue
        for partition, offset, _value in v.records:
            for low, high, at_ms in cuts.get((op.cluster, v.topic, partition), ()):
                if low <= offset < high and op.complete_ms <= at_ms:
                    count += 1
                    break
    return count


def committed_transactions(history: History) -> dict[str, set[str]]:
    """Transaction -> its values, of those whose every send was acknowledged."""
    members: dict[str, set[str]] = {}
    failed: set[str] = set()
    for o in history.sends():
        v = o.value
        if not isinstance(v, Send) or not v.txn or not v.value:
            continue
        members.setdefault(v.txn, set()).add(v.value)
        if o.type != "ok":
            failed.add(v.txn)
    return {t: vals for t, vals in members.items() if t not in failed}


def aborted_offsets(
    sim: Simulation, final: dict[tuple[str, str, int], dict[int, str]]
) -> dict[tuple[str, str, int], set[int]]:
    """For each final log: the offsets of its records in aborted
    transactions, by the core's own rule for what read_committed readers
    cannot read (`histories.unreadable_ranges`) below the last stable offset
    (above it, a transaction may still be open)."""
    out: dict[tuple[str, str, int], set[int]] = {}
    for (cid, topic, p), values in sorted(final.items()):
        state = sim.clusters[cid].state
        if topic not in state.topics:
            continue
        log = state.partition(topic, p)
        ranges = histories.unreadable_ranges(log)
        lso = log.last_stable_offset
        aborted = {
            o for o in values if o < lso and any(low <= o < high for low, high in ranges)
        }
        if aborted:
            out[(cid, topic, p)] = aborted
    return out


def visible_values(
    sim: Simulation,
    cluster: str,
    final: dict[tuple[str, str, int], dict[int, str]],
    hidden: dict[tuple[str, str, int], set[int]],
) -> set[str]:
    """Values a read_committed reader of `cluster` sees at the end: below the
    last stable offset, not aborted (`aborted_offsets`)."""
    out: set[str] = set()
    for (cid, topic, p), values in final.items():
        if cid != cluster or topic not in sim.clusters[cid].state.topics:
            continue
        lso = sim.clusters[cid].state.partition(topic, p).last_stable_offset
        gone = hidden.get((cid, topic, p), set())
        out |= {v for o, v in values.items() if o < lso and o not in gone}
    return out


def partial_transactions(committed: dict[str, set[str]], visible: set[str]) -> set[str]:
    """The transactions of which `visible` holds some values but not all."""
    return {txn for txn, values in committed.items() if values & visible and values - visible}


def partial_after_failover(
    sim: Simulation,
    final: dict[tuple[str, str, int], dict[int, str]],
    hidden: dict[tuple[str, str, int], set[int]],
) -> int:
    committed = committed_transactions(sim.history)
    promoted = sorted({cluster for cluster, _l, _at, _r in sim.failovers})
    partial: set[str] = set()
    for cluster in promoted:
        if cluster in sim.clusters:
            seen = visible_values(sim, cluster, final, hidden)
            partial |= partial_transactions(committed, seen)
    return len(partial)
