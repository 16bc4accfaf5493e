"""What the daemon's link metrics say, read from the state describe-link reads.

Rules (docs/metrics.md):
- A link's state is `LinkTable`'s, the one describe-link shows.
- A follower partition's lag (records and ms) is what describe-link and
  failover report of it (`link_admin.follower_partitions`: every partition of
  every topic this side follows on the link, those no fetch round has reached
  yet included), and only while it is known: a lag that is not known now (the
  link is disconnected, no fetch round finished lately, no round reached the
  partition yet, the source refused it, its log parted from the source's) has
  no sample, never a stale or made-up one.
- The state is describe-link's (`link_admin.link_summary`).
- A link's largest lag (Cluster Linking's MaxLag) is the largest of its
  follower partitions' lags, in records and in ms, each on its own. It is
  known only on a side that follows topics on the link, and only when every
  follower partition's lag is known (a side that follows an empty namespace
  lags by 0).
- The counters are the link's `LinkCounters`, copied.
- Follower partitions by state (Cluster Linking's mirror partition count
  by state), each partition in one: `stopped` at a gap (gap.policy stop),
  `refused` by the source, `diverged` (its log parted from the source's, the
  cut not found yet), `copying` (its lag known now), else `lag_unknown`.
  Every state has a sample (0 included) on a side that follows topics.
- The lag as the source sees it: on the side that leads, per partition it
  leads, the records below its high watermark its follower has not fetched
  past, and for how long (describe-link's leader rows).
- Errors: the link's failed calls on the side that dials, by error code
  (`LinkRuntime.errors`).
- Storage refusals: the follower partitions whose fetched records this
  cluster's storage refused (a full disk, a file-size limit, a read-only data
  directory) and that no round has stored since, and the partitions of
  follower topics its storage refused to create (counted `refused` by state).
- Gaps (records a follower partition never copied: its source's log start
  had passed them) are counted per partition from its provenance, as
  describe-link lists them: durable, so the counts survive a restart. A
  partition stopped at a gap (gap.policy stop) counts once it is resumed.

Pure code: no I/O, clocks, threads or randomness.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from linkd.core import link_admin
from linkd.core.cluster import ClusterState
from linkd.core.errors import ErrorCode
from linkd.core.links import LinkCounters, LinkState, MappingType, Role

__all__ = [
    "PARTITION_STATES",
    "STATES",
    "GapSample",
    "LinkSample",
    "PartitionLagSample",
    "link_samples",
]

# Every state a link can be in: one gauge series each (1 for the current one).
STATES: tuple[str, ...] = tuple(s.value for s in LinkState)
# Every state a follower partition is counted in.
PARTITION_STATES: tuple[str, ...] = ("copying", "lag_unknown", "refused", "diverged", "stopped")


@dataclass(frozen=True, slots=True)
class PartitionLagSample:
    topic: str
    partition: int
    lag_records: int
    lag_ms: int


@dataclass(frozen=True, slots=True)
class GapSample:
    """The gaps one follower partition recorded on the link."""

    topic: str
    partition: int
    gaps: int
    records: int


@dataclass(frozen=True, slots=True)
class LinkSample:
    """One link as its metrics show it at one instant."""

    name: str
    state: str
    # Follower partitions whose lag is known now, sorted.
    partitions: tuple[PartitionLagSample, ...]
    # (records, ms): the largest lag of a follower partition; None when this
    # side follows no topics on the link, or some follower lag is not known.
    max_lag: tuple[int, int] | None
    counters: LinkCounters
    gaps: tuple[GapSample, ...] = ()
    # Follower partitions per PARTITION_STATES entry (empty: follows no topics).
    partition_states: tuple[tuple[str, int], ...] = ()
    # Partitions this side leads: their follower's lag as seen here.
    leader_partitions: tuple[PartitionLagSample, ...] = ()
    # Failed calls by error code name, sorted.
    errors: tuple[tuple[str, int], ...] = ()
    # Follower partitions whose fetched records this cluster's storage
    # refused, until a round stores them (describe-link: "disk refused writes").
    storage_refused: int = 0


def gap_samples(state: ClusterState, name: str) -> tuple[GapSample, ...]:
    totals: dict[tuple[str, int], tuple[int, int]] = {}
    for row in link_admin.link_gaps(state, name):
        if row.stopped:
            continue
        key = (row.gap.topic, row.gap.partition)
        count, records = totals.get(key, (0, 0))
        totals[key] = (count + 1, records + row.gap.records)
    return tuple(GapSample(t, p, c, r) for (t, p), (c, r) in sorted(totals.items()))


def _follows_topics(state: ClusterState, name: str) -> bool:
    config = state.links.get(name)
    return any(
        m.local_role == Role.FOLLOWER and m.resource_type == MappingType.TOPIC
        for m in config.attached_mappings()
    )


def link_sample(state: ClusterState, name: str, now_ms: int) -> LinkSample:
    summary = link_admin.link_summary(state, name, now_ms)
    rows = link_admin.follower_partitions(state, name, now_ms)
    known = [
        PartitionLagSample(r.topic, r.partition, r.lag_records, r.lag_ms)
        for r in rows
        if r.lag_known and r.lag_records >= 0 and r.lag_ms >= 0
    ]
    max_lag: tuple[int, int] | None = None
    if (
        _follows_topics(state, name)
        and link_admin.lag_known(state, name, now_ms)
        and len(known) == len(rows)
        and not state.links.runtime[name].uncreated
    ):
        max_lag = (
            max((p.lag_records for p in known), default=0),
            max((p.lag_ms for p in known), default=0),
        )
    runtime = state.links.runtime[name]
    counts = dict.fromkeys(PARTITION_STATES, 0)
    for r in rows:
        key = (r.topic, r.partition)
        if key in runtime.gap_stopped:
            counts["stopped"] += 1
        elif key in runtime.refused:
            counts["refused"] += 1
        elif key in runtime.marks_wanted:
            counts["diverged"] += 1
        elif r.lag_known:
            counts["copying"] += 1
        else:
            counts["lag_unknown"] += 1
    # Topics its storage refused to create: their partitions are refused here.
    counts["refused"] += sum(u.partitions for u in runtime.uncreated.values())
    leader = [
        PartitionLagSample(r.topic, r.partition, r.lag_records, r.lag_ms)
        for r in summary.partitions
        if r.role == Role.LEADER
    ]
    return LinkSample(
        name,
        summary.state,
        tuple(sorted(known, key=lambda p: (p.topic, p.partition))),
        max_lag,
        replace(runtime.counters),
        gap_samples(state, name),
        tuple(counts.items()) if _follows_topics(state, name) else (),
        tuple(sorted(leader, key=lambda p: (p.topic, p.partition))),
        tuple(sorted(runtime.errors.items())),
        sum(1 for e in runtime.refused.values() if e.code is ErrorCode.STORAGE_REFUSED)
        + sum(u.partitions for u in runtime.uncreated.values()),
    )


def link_samples(state: ClusterState, now_ms: int) -> list[LinkSample]:
    """Every link with a runtime (every stored link), by name."""
    return [
        link_sample(state, name, now_ms)
        for name in state.links.names()
        if name in state.links.runtime
    ]
