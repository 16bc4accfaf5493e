"""Checkers of what clusters report against what they hold (spec section 10,
invariants 9 to 12).

A link's state, a partition's lag, an "attached", a failover's abandoned
list are promises to an operator. These checks compare each promise with the
logs and the history:

- "9 status": a follower partition reported FOLLOWING or IN_SYNC with a known
  lag of 0 holds its source's records up to the source high watermark
  observed one round earlier (`StatusWatch`, at every probe): its log end is
  at least the source HW when the partition's previous fetch round began;
  and when its rounds stopped, at least the source HW of a bound ago (a link
  whose data path stopped while its handshakes go on must not say FOLLOWING).
- "10 silent loss": every record acknowledged in an attached namespace
  reaches each follower (as the follower topic, at the same offset), or is
  named in a report: a failover's answer (below the source HW it reported,
  or acknowledged after the time that knowledge dates from), a cut recorded
  in the partition's provenance (recovery, divergence), a gap recorded there
  (the source deleted it before the link copied it: reported loss), the end
  of the link's data there (a detach), the source's own reported truncation,
  or the follower's own retention after it held it (`check_silent_loss`, at
  the end). A follower that skipped records without recording the gap fails.
- "11 hanging transaction": no transaction stays open past its timeout plus a
  bound on any live cluster (`check_hanging_transactions`, at the end); a
  follower whose source is gone for good is excused (nobody can tell it the
  outcome, and its link says DISCONNECTED).
- "12 admin effect": an operator's attach or detach that answered success
  has its effect on both sides once the link converges: each side's mapping
  carries that change's version or a newer one (`check_admin_effects`).

Pure functions of plain data and ClusterStates; the world records the
history, the probes and the reports.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

from linkd.core import link_admin, plans, procedures
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.links import (
    LinkMode,
    LinkState,
    MappingKey,
    MappingType,
    Role,
    Version,
    holds_back,
)
from linkd.core.provenance import ProvenanceItem, ProvenanceKind
from linkd.core.transactions import TxnMetadata, TxnState
from sim.checkers import (
    DETAIL_MAX,
    CompactedKeys,
    CutEvents,
    Deleted,
    FinalLogs,
    Truncations,
    Violation,
    _capped,
    cut_since,
    superseded,
    was_deleted,
)
from sim.history import History, Send

# A claim of lag 0 whose partition finished no fetch round for this long is
# stale: beyond the session timeout plus one call's deadline, a link whose
# data path stopped must not still say FOLLOWING.
STALE_ROUND_SLACK_MS = 10_000
# A failover without force may answer with a round this much older than the
# silence bound (the round in flight when it ran).
FAILOVER_SLACK_MS = 1_000
# A transaction may stay open this long past its timeout (the coordinator's
# tick, the markers' durability) before it hangs.
HANGING_SLACK_MS = 5_000

Key = tuple[str, str, int]  # (cluster, topic, partition)
_HW = operator.attrgetter("high_watermark")
_TIME = operator.itemgetter(0)


@dataclass(slots=True)
class _Rounds:
    """What one follower partition's rows said at the last two rounds."""

    last_ms: int = -1
    previous_ms: int = -1


@dataclass(slots=True)
class StatusWatch:
    """Probes every link's rows and remembers each partition's high
    watermarks over time (invariant 9)."""

    session_timeout_ms: int
    # (cluster, topic, partition) -> [(time, HW)] when it changed, oldest first.
    hw_series: dict[Key, list[tuple[int, int]]] = field(default_factory=dict)
    rounds: dict[tuple[str, str, str, int], _Rounds] = field(default_factory=dict)
    # (cluster, topic, partition) -> [(time, offset)] of every cut.
    cuts: dict[Key, list[tuple[int, int]]] = field(default_factory=dict)
    # (cluster, link, local topic) -> when a probe first found a topic its
    # source leads on the link missing on the follower.
    missing: dict[tuple[str, str, str], int] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    # cluster -> topic -> each partition's HW as the last probe recorded it.
    last_hws: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def record_hws(self, cluster_id: str, state: ClusterState, now_ms: int) -> None:
        """Each partition's HW now, added to its series where it changed. A
        topic's HWs are compared with the last probe's a column at a time;
        a partition gone since (its topic deleted, or recreated smaller) is
        at 0 from now: nothing is owed from before."""
        last = self.last_hws.setdefault(cluster_id, {})
        for name, topic in state.topics.items():
            hws = list(map(_HW, topic.partitions))
            before = last.get(name)
            if before == hws:
                continue
            for p, hw in enumerate(hws):
                if before is not None and p < len(before) and before[p] == hw:
                    continue  # (its series ends at it: appended by the last probe)
                series = self.hw_series.setdefault((cluster_id, name, p), [])
                if not series or series[-1][1] != hw:
                    series.append((now_ms, hw))
            if before is not None:
                self._gone(cluster_id, name, range(len(hws), len(before)), now_ms)
            last[name] = hws
        for name in [n for n in last if n not in state.topics]:
            self._gone(cluster_id, name, range(len(last.pop(name))), now_ms)

    def _gone(self, cluster_id: str, topic: str, partitions: range, now_ms: int) -> None:
        for p in partitions:
            series = self.hw_series.get((cluster_id, topic, p))
            if series and series[-1][1] != 0:
                series.append((now_ms, 0))

    def cut(self, key: Key, at_ms: int, offset: int) -> None:
        """The partition was cut to `offset` at `at_ms` (between two probes
        the series would miss it)."""
        self.cuts.setdefault(key, []).append((at_ms, offset))

    def hw_at(self, key: Key, at_ms: int) -> int:
        """The partition's HW as probed at or before `at_ms`, or lower if it
        was cut since (a follower never owes records its source no longer
        has); 0: never probed."""
        series = self.hw_series.get(key, ())
        at = bisect.bisect_right(series, at_ms, key=_TIME)  # the first sample after at_ms
        hw, sampled_ms = (series[at - 1][1], series[at - 1][0]) if at else (0, -1)
        for _, value in itertools.islice(series, at, None):
            hw = min(hw, value)
        # A cut after the probe that gave the value bounds it, also one made
        # between that probe and `at_ms` (the next probe is later still).
        for t, offset in self.cuts.get(key, ()):
            if t > sampled_ms:
                hw = min(hw, offset)
        return hw

    def probe(
        self, states: Mapping[str, ClusterState], up: Mapping[str, bool], now_ms: int
    ) -> None:
        """One probe of every live cluster's links (call after record_hws)."""
        if len(self.violations) > DETAIL_MAX:
            return
        for cid in sorted(states):
            if not up.get(cid):
                continue
            state = states[cid]
            for name in state.links.names():
                self._probe_link(cid, state, name, states, now_ms)

    def _probe_link(
        self,
        cid: str,
        state: ClusterState,
        name: str,
        states: Mapping[str, ClusterState],
        now_ms: int,
    ) -> None:
        # One summary, judged by every check below (what describe-link says now).
        summary = link_admin.link_summary(state, name, now_ms, leader_rows=False)
        self._probe_positions(cid, state, name, summary, now_ms)
        self._probe_missing(cid, state, name, states, now_ms)
        link_state = state.links.state_name(name)
        if state.links.state_of(name) not in (LinkState.FOLLOWING, LinkState.IN_SYNC):
            return
        config = state.links.get(name)
        source = config.remote_cluster_id
        if source not in states:
            return
        rows = {(cid, name, r.topic, r.partition) for r in summary.partitions}
        for key in [k for k in self.rounds if k[:2] == (cid, name) and k not in rows]:
            del self.rounds[key]  # rounds count only while the row is there
        # Per follower topic: its source topic on the link (None: not followed).
        sources: dict[str, str | None] = {}
        for row in summary.partitions:
            if row.role != Role.FOLLOWER:
                continue
            rounds = self.rounds.setdefault((cid, name, row.topic, row.partition), _Rounds())
            if row.source_hw_known_at_ms != rounds.last_ms:
                rounds.previous_ms, rounds.last_ms = rounds.last_ms, row.source_hw_known_at_ms
            if not row.lag_known or row.lag_records != 0:
                continue
            topic = state.topics.get(row.topic)
            log = (
                topic.partitions[row.partition]
                if topic is not None and row.partition < len(topic.partitions)
                else None
            )
            held = log.log_end_offset if log is not None else 0
            if held < row.log_end_offset:
                self.violations.append(
                    Violation(
                        "9 status",
                        f"{cid}: link {name!r} says {link_state} with lag 0 for "
                        f"{row.topic}-{row.partition} at offset {row.log_end_offset} "
                        f"(t={now_ms} ms), but its storage holds {held}: the state comes from "
                        "what a round heard, not what was stored",
                    )
                )
                continue
            if row.topic not in sources:
                mapping = config.mapping_for(row.topic, "follower")
                sources[row.topic] = (
                    None
                    if mapping is None or row.topic not in state.topics
                    else rep.map_name(row.topic, mapping.local_prefix, mapping.remote_prefix)
                )
            source_topic = sources[row.topic]
            if source_topic is None:
                continue
            # What it holds for a consumer: its readable HW, not its log end.
            if log is None:
                log = state.partition(row.topic, row.partition)  # (raises: no such partition)
            readable = log.high_watermark
            stale_ms = now_ms - self.session_timeout_ms - STALE_ROUND_SLACK_MS
            source_key = (source, source_topic, row.partition)
            if row.source_hw_known_at_ms < stale_ms and readable < self.hw_at(
                source_key, stale_ms
            ):
                self.violations.append(
                    Violation(
                        "9 status",
                        f"{_says_lag_0(cid, name, link_state, row)} (t={now_ms} ms), but its "
                        "last fetch round is from "
                        f"t={row.source_hw_known_at_ms} ms and it holds {readable} "
                        f"records while {source}:{source_topic}-{row.partition} has had "
                        f"{self.hw_at(source_key, stale_ms)} since t={stale_ms} ms: the data "
                        "path stopped",
                    )
                )
                continue
            if rounds.previous_ms < 0:
                continue
            owed = self.hw_at(source_key, rounds.previous_ms)
            if readable < owed:
                self.violations.append(
                    Violation(
                        "9 status",
                        f"{_says_lag_0(cid, name, link_state, row)} (t={now_ms} ms), but it "
                        f"holds {readable} records "
                        f"while {source}:{source_topic}-{row.partition} had a high watermark of "
                        f"{owed} one round earlier (t={rounds.previous_ms} ms)",
                    )
                )

    def _probe_missing(
        self,
        cid: str,
        state: ClusterState,
        name: str,
        states: Mapping[str, ClusterState],
        now_ms: int,
    ) -> None:
        """"9 status": a link that follows a namespace holds (or names, as a
        row of describe-link) every topic its source leads in it: one that
        has been missing here longer than a bound (discovery had its rounds)
        while the link says FOLLOWING or IN_SYNC is a link that reports what
        it heard, not what it stored (its storage refused to create it).
        Only a topic the follower could have heard of counts: one missing
        since before the follower's last listing of its source's topics
        began (`LinkRuntime.topics_known_at_ms`)."""
        config = state.links.get(name)
        source_state = states.get(config.remote_cluster_id)
        absent: set[str] = set()
        if source_state is not None:
            source_config = next(
                (c for c in source_state.links.configs.values() if c.link_id == config.link_id),
                None,
            )
            for mapping in rep.follower_mappings(config, "topic"):
                if source_config is None:
                    break
                for topic in sorted(source_state.topics):
                    if not rep.in_prefix(topic, mapping.remote_prefix) or topic.startswith("_"):
                        continue
                    if rep.leader_mapping_for(source_config, topic) is None:
                        continue
                    local = rep.map_name(topic, mapping.remote_prefix, mapping.local_prefix)
                    if local not in state.topics:
                        absent.add(local)
        for key in [k for k in self.missing if k[:2] == (cid, name) and k[2] not in absent]:
            del self.missing[key]
        link_state = state.links.state_name(name)
        following = state.links.state_of(name) in (LinkState.FOLLOWING, LinkState.IN_SYNC)
        named = {r.topic for r in link_admin.refused_rows(state, name)} if absent else set()
        bound_ms = self.session_timeout_ms + STALE_ROUND_SLACK_MS
        # The link hears of a source topic only by listing its source's
        # topics: missing counts from a listing that began once it was
        # missing (a control lane stuck on calls that get no answer lists
        # nothing, and the link's answers name the listing's time).
        listed = state.links.runtime[name].topics_known_at_ms
        for local in sorted(absent):
            since = self.missing.setdefault((cid, name, local), now_ms)
            heard = listed is not None and listed >= since
            if following and heard and local not in named and now_ms - since > bound_ms:
                self.violations.append(
                    Violation(
                        "9 status",
                        f"{cid}: link {name!r} says {link_state} (t={now_ms} ms), but the "
                        f"follower topic {local!r} its source leads on it has been missing here "
                        f"since t={since} ms, and no row names it",
                    )
                )
                self.missing[(cid, name, local)] = now_ms  # once per bound, not per probe

    def _probe_positions(
        self,
        cid: str,
        state: ClusterState,
        name: str,
        summary: link_admin.LinkSummary,
        now_ms: int,
    ) -> None:
        """"position_misreported": a follower row's position is what a
        consumer of that cluster can read of the partition (its HW), and a
        lag of 0 is claimed only when that covers the source HW the row
        gives; records held but not readable are not caught up.
        "unreadable_records": an ASYNC follower partition lets its consumers
        read every durable record below the source HW it was told (a
        transaction's markers held together across partitions aside, and
        records it leads on to a SYNC follower of its own, held for it)."""
        asynchronous = state.links.get(name).mode == LinkMode.ASYNC
        held_together = {k for group in state.marker_groups for k in group}
        floors = state.links.sync_floors()  # (else no partition has a floor)
        details, hidden = [], []
        topics = state.topics
        for row in summary.partitions:
            topic = topics.get(row.topic)
            if row.role != Role.FOLLOWER or topic is None:
                continue
            if row.partition >= len(topic.partitions):
                continue
            log = topic.partitions[row.partition]
            readable = log.high_watermark
            owed = min(log.durable_offset, row.source_high_watermark)
            floor = state.links.sync_floor(row.topic, row.partition) if floors else None
            if floor is not None:
                owed = min(owed, floor)  # it leads them on to a SYNC follower: held for it
            if (
                asynchronous
                and readable < owed
                and (row.topic, row.partition) not in held_together
            ):
                hidden.append(
                    f"{cid}: link {name!r} {row.topic}-{row.partition} (t={now_ms} ms) holds "
                    f"{log.durable_offset} durable records and was told its source's high "
                    f"watermark is {row.source_high_watermark}, but a consumer there reads "
                    f"up to {readable} only"
                )
            where = f"{cid}: link {name!r} row {row.topic}-{row.partition} (t={now_ms} ms)"
            if row.high_watermark != readable:
                details.append(
                    f"{where} reports position {row.high_watermark} (log end "
                    f"{row.log_end_offset}), but a consumer there reads up to {readable}"
                )
            elif row.lag_known and row.lag_records == 0 and readable < row.source_high_watermark:
                details.append(
                    f"{where} reports lag 0 against source HW {row.source_high_watermark}, "
                    f"but a consumer there reads up to {readable} (log end "
                    f"{row.log_end_offset})"
                )
        self.violations += _capped("position_misreported", details)
        self.violations += _capped("unreadable_records", hidden)


def _says_lag_0(cid: str, name: str, link_state: str, row: link_admin.PartitionLag) -> str:
    return f"{cid}: link {name!r} says {link_state} with lag 0 for {row.topic}-{row.partition}"


def failover_answered_as_of(
    journalled: plans.Plan | None, force: bool, now_ms: int
) -> int | None:
    """When a failover called now reaches the rows its answer gives, for
    `check_unforced_failover`; None when it promises nothing of them.
    `journalled` is the link's plan as the call begins. A call that takes up
    a failover plan past the step that made the namespaces writable answers
    what the first run did (`procedures.failover`): its rows are as of that
    run (no later than the plan began), and promise nothing of the lag if
    that run was forced. Otherwise the rows are this call's, reached now."""
    if (
        journalled is None
        or journalled.procedure != plans.FAILOVER
        or not journalled.done(procedures.FAILOVER_STEPS[1])
    ):
        return None if force else now_ms
    if (journalled.detail or {}).get("force"):
        return None
    return journalled.started_ms


def check_unforced_failover(
    cluster: str, link: str, result: link_admin.Failover, now_ms: int, silence_ms: int,
    as_of_ms: int | None = None,
) -> list[Violation]:
    """Invariant 9 for a failover without force: it promises that nothing
    known is abandoned, so every partition's lag must be known, and known
    from a round no older than the follower's silence bound when the rows
    were reached (`as_of_ms`, now unless the answer is a journalled first
    run's: `failover_answered_as_of`)."""
    judged_ms = now_ms if as_of_ms is None else as_of_ms
    stale = [
        r
        for r in result.partitions
        if not r.lag_known
        or judged_ms - r.source_hw_known_at_ms > silence_ms + FAILOVER_SLACK_MS
    ]
    return [
        Violation(
            "9 status",
            f"{cluster}: failover of link {link!r} without force at t={now_ms} ms answered with "
            f"{r.topic}-{r.partition} lag {r.lag_records} as known at "
            f"t={r.source_hw_known_at_ms} ms"
            + (f" (rows reached at t={judged_ms} ms)" if judged_ms != now_ms else "")
            + ": old news, not the lag now",
        )
        for r in stale[:3]
    ]


# -- a failover's groups ------------------------------------------------------------------

# What a follower heard of its source's group commits on one link since its
# process started: (local group, local topic, partition) -> the last offset.
HeardOffsets = Mapping[tuple[str, str, int], int]


def check_failover_groups(
    cluster: str,
    link: str,
    result: link_admin.Failover,
    heard: HeardOffsets,
    state: ClusterState,
    now_ms: int,
) -> list[Violation]:
    """"10 groups": after a failover, a replicated group resumes at the last
    commit the follower heard of, or at the end of the follower's data if
    that is nearer; one that resumes elsewhere (it would re-read records it
    had processed that this cluster holds, or skip some) must be reported by
    the answer's `groups` row: where it resumes and the commit heard of.
    `heard` is what the run saw reach the follower, not what the follower
    says it heard."""
    rows = {(g.group, g.topic, g.partition): g for g in result.groups}
    # Each partition made writable ends at its log end then.
    ends = {(r.topic, r.partition): r.log_end_offset for r in result.partitions}
    prefixes = [p for kind, p in result.namespaces if kind == MappingType.GROUP]
    details: list[str] = []
    for (group, topic, partition), offset in sorted(heard.items()):
        end = ends.get((topic, partition))
        if not any(rep.in_prefix(group, p) for p in prefixes) or end is None:
            continue
        if topic not in state.topics or partition >= len(state.topics[topic].partitions):
            continue
        log = state.topics[topic].partitions[partition]
        c = state.groups.committed(group, [(topic, partition)]).get((topic, partition))
        # A consumer of the group without a commit starts at the log start.
        resume = c.offset if c is not None else log.log_start_offset
        want = min(offset, end)
        if resume == want:
            continue
        row = rows.get((group, topic, partition))
        said = -1 if c is None else c.offset
        if row is not None and row.resume_offset == said and row.heard_offset == offset:
            continue  # reported
        how = (
            f"re-reads {want - resume} records it had processed"
            if resume < want
            else f"skips {resume - want} records"
        )
        details.append(
            f"{cluster}: after the failover of link {link!r} at t={now_ms} ms, group {group!r} "
            f"resumes at {resume} of {topic}-{partition} ({how}: it last committed {offset} as "
            f"this cluster heard, and the data here ends at {end}); the answer "
            + (
                "says nothing of it"
                if row is None
                else f"says it resumes at {row.resume_offset}, heard {row.heard_offset}"
            )
        )
    return _capped("10 groups", details)


# -- invariant 10 -----------------------------------------------------------------------


def log_ends(state: ClusterState, prefixes: list[str]) -> dict[tuple[str, int], int]:
    """The log end of every partition of these topic namespaces, now."""
    return {
        (name, p): log.log_end_offset
        for name in sorted(state.topics)
        if any(rep.in_prefix(name, prefix) for prefix in prefixes)
        for p, log in enumerate(state.topics[name].partitions)
    }


def check_failover_aborts(
    cluster: str,
    link: str,
    result: link_admin.Failover,
    state: ClusterState,
    ends_before: Mapping[tuple[str, int], int],
    now_ms: int,
) -> list[Violation]:
    """Invariant 10 for the transactions a failover aborted: every abort
    marker the failover wrote (a control batch above the partition's log end
    as it began, in a namespace it made writable; nothing else writes there
    in between) must be listed in its answer, by partition and producer:
    an aborted transaction's records vanish from read_committed readers."""
    listed = {(d.topic, d.partition, d.producer_id) for d in result.dangling}
    details = []
    for (topic, p), before in sorted(ends_before.items()):
        t = state.topics.get(topic)
        if t is None or p >= len(t.partitions):
            continue
        for entry in t.partitions[p].batches:
            if entry.base_offset < before or not entry.is_control:
                continue
            if entry.control_type != rb.CONTROL_ABORT:
                continue
            if (topic, p, entry.producer_id) not in listed:
                details.append(
                    f"{cluster}: failover of link {link!r} at t={now_ms} ms wrote an abort "
                    f"marker at {topic}-{p}@{entry.base_offset} (producer {entry.producer_id}) "
                    "that its answer does not list"
                )
    return _capped("10 unreported abort", details)


def check_failover_cuts(
    cluster: str,
    link: str,
    result: link_admin.Failover,
    state: ClusterState,
    ends_before: dict[tuple[str, int], int],
    now_ms: int,
    cut_by_link: frozenset[tuple[str, int]] = frozenset(),
    may_cut: bool = True,
) -> list[Violation]:
    """Invariant 10 for what a failover cut (failover.truncation
    last-stable-offset): every promoted partition whose log ends below where
    it ended as the failover began must be in the answer's `truncated` rows,
    at the offset it now ends at and with the records it lost; and every
    row must be such a cut. Records a read_uncommitted reader may have read
    are gone: only the answer tells the operator. `cut_by_link`: partitions
    the link's own data path cut while the failover ran (a divergence found
    by a round still in flight), which are not the failover's to name.
    `may_cut`: the link's failover.truncation lets the failover cut (under
    `abort` it never does, and a log that shrank meanwhile shrank by
    something else: a fault, judged by its own checks)."""
    if not may_cut and not result.truncated:
        return []
    listed = {(c.topic, c.partition): c for c in result.truncated}
    details = []
    for (topic, p), before in sorted(ends_before.items()):
        t = state.topics.get(topic)
        if t is None or p >= len(t.partitions):
            continue
        end = t.partitions[p].log_end_offset
        row = listed.pop((topic, p), None)
        if row is None and (topic, p) in cut_by_link:
            continue
        if end >= before and (row is None or result.resumed_from):
            continue  # not cut now (a re-run's rows are those of its first run)
        if row is None or (row.truncate_to, row.removed) != (end, before - end):
            details.append(
                f"{cluster}: failover of link {link!r} at t={now_ms} ms cut {topic}-{p} from "
                f"{before} to {end}, but its answer "
                + ("does not name the cut" if row is None else
                   f"says it cut to {row.truncate_to}, removing {row.removed}")
            )  # fmt: skip
    details += [
        f"{cluster}: failover of link {link!r} at t={now_ms} ms names a cut of {c.topic}-"
        f"{c.partition} that it did not make"
        for c in listed.values()
    ]
    return _capped("10 unreported cut", details)


@dataclass(frozen=True, slots=True)
class FailoverRow:
    """One partition a failover made writable, as its answer reported it."""

    log_end_offset: int
    source_high_watermark: int  # the last learned (-1: never)
    known_at_ms: int  # when it was learned
    lag_known: bool
    unknown_since_ms: int = 0  # lag not known: since when (-1: never learned)

    def names(self, offset: int, acked_ms: int, source_live: bool) -> str | None:
        """Whether this row names a record of the source at `offset`,
        acknowledged at `acked_ms`, that the follower lacks, and how: by its
        range (at or above the log end, below the source HW reported), or by
        an "unknown since" window that covers its acknowledgement. A row
        whose lag was known names records acknowledged after the round it
        came from only while its source was live and reachable at the
        failover, or lost in a way the follower could not see yet
        (`source_news_current`): such a record was in flight to the follower
        (the race the rule for a known lag accepts). From a source the
        follower could have known was dead or cut off, "lag 0, known" is old
        news: the record is lost unnamed (docs/operations.md, "Failover")."""
        if offset < self.log_end_offset:
            if not self.lag_known:
                # Its own record at that offset differs: the logs had parted,
                # and a lag not known covers whatever the source held.
                return "abandoned by a failover that said its lag was not known"
            return None  # held at the failover: lost later, not by it
        if offset < self.source_high_watermark:
            return "abandoned by a failover that named its range"
        if not self.lag_known:
            if self.unknown_since_ms < 0 or acked_ms >= self.unknown_since_ms:
                return "abandoned by a failover that said its lag was unknown since before it"
            return None
        if acked_ms >= self.known_at_ms and source_live:
            return "in flight from a live source when the failover took the lag as known"
        return None


def source_news_current(
    source_up: bool,
    reachable: bool,
    follower_dials: bool,
    last_round_ms: int | None,
    now_ms: int,
    answer_due_ms: int,
) -> bool:
    """Whether a follower failing over could still take its last round as
    the news of its source (a known lag then names what the source
    acknowledged after the round: the race no follower can close): the
    source is up and reachable; or it is lost in a way the follower cannot
    see yet (docs/operations.md, "When a follower partition's lag is
    known"). A silent cut drops calls without failing them, so does a
    paused source (it is `source_up`: stopped, it resets nothing), and a killed
    source that dials the link itself (a pushed link) leaves the follower no
    connection to reset: either is found out only once the request the
    follower sent after its last round is overdue, so the news stays current
    for `answer_due_ms` after that round. A killed source that the follower
    dials resets its calls at once: old news from then on."""
    if source_up and reachable:
        return True
    if not source_up and follower_dials:
        return False
    return last_round_ms is not None and now_ms - last_round_ms <= answer_due_ms


@dataclass(frozen=True, slots=True)
class FailoverReport:
    """What a failover answered, per partition made writable."""

    cluster: str
    link_id: str
    at_ms: int
    partitions: dict[tuple[str, int], FailoverRow]
    topics_known_at_ms: int = 0  # partitions created after this are in no row
    # Follower (local) prefixes of the topic namespaces it made writable.
    prefixes: tuple[str, ...] = ()
    # Its source was up and reachable from the follower at the failover, or
    # lost so recently that the follower could not tell (`source_news_current`).
    source_live: bool = True


def check_silent_loss(
    history: History,
    final: FinalLogs,
    states: Mapping[str, ClusterState],
    up: Mapping[str, bool],
    lost: set[str],
    failovers: list[FailoverReport],
    truncations: Truncations,
    deleted: Deleted | None = None,
    compacted: CompactedKeys | None = None,
    cut_events: CutEvents | None = None,
) -> list[Violation]:
    """Invariant 10 over every acknowledged record with its followers (a
    record a follower's log cleaner removed is not lost: `superseded`). With
    `cut_events`, a cut excuses a record only if it was made after the
    record's send began (`cut_since`)."""
    details: list[str] = []
    for op in history.sends():
        v = op.value
        if op.type != "ok" or not isinstance(v, Send) or not v.value or v.offset < 0:
            continue
        for follower, topic, link_id in v.followers:
            if follower in lost or not up.get(follower) or follower not in states:
                continue
            held = final.get((follower, topic, v.partition), {})
            if held.get(v.offset) == v.value:
                continue
            if v.value in held.values():
                continue  # present at another offset: invariant 1's business
            if was_deleted(deleted, (follower, topic, v.partition), v.offset):
                continue  # the follower held it, then its own retention deleted it
            if superseded(compacted, (follower, topic, v.partition), v.key, v.offset):
                continue  # cleaned away there: a newer record of its key is held
            cuts = Cuts(truncations, cut_events, op.invoke_ms)
            why = _excused(op.cluster, op.complete_ms, v, (follower, topic, link_id), states,
                           failovers, cuts, lost)
            if why is None:
                details.append(
                    f"{v.value} acknowledged by {op.cluster} at {v.topic}-{v.partition}@"
                    f"{v.offset} (t={op.complete_ms} ms) never reached {follower}:{topic}, and "
                    "no report names it"
                )
            if len(details) > DETAIL_MAX:
                break
    return _capped("10 silent loss", details)


def _refused(state: ClusterState, link_id: str, topic: str, partition: int) -> bool:
    """The follower's link reports that the source refuses this partition."""
    for name, config in state.links.configs.items():
        runtime = state.links.runtime.get(name)
        if config.link_id == link_id and runtime is not None:
            refusal = runtime.refused.get((topic, partition))
            return refusal is not None and holds_back(refusal)
    return False


def _named(provenance: Mapping[int, list[ProvenanceItem]], link_id: str) -> bool:
    return any(e.link_id == link_id for entries in provenance.values() for e in entries)


def _follows(state: ClusterState, link_id: str, topic: str, source_topic: str) -> bool:
    """The link still carries `source_topic` into `topic` here. A mapping
    attached later that names `topic` from another source topic (the same
    local prefix, another remote one) does not: the record's topic left the
    link all the same."""
    for config in state.links.configs.values():
        if config.link_id == link_id:
            m = config.mapping_for(topic, "follower")
            return m is not None and (
                rep.map_name(topic, m.local_prefix, m.remote_prefix) == source_topic
            )
    return False


def _reported_cut(entries: list[ProvenanceItem], offset: int) -> str | None:
    """A cut at or below the offset that the follower's provenance reports."""
    for entry in entries:
        if entry.kind is ProvenanceKind.TRUNCATED and entry.offset <= offset:
            return "a reported cut (provenance)"
    return None


def _in_gap(entries: list[ProvenanceItem], link_id: str, offset: int) -> bool:
    """The follower's provenance records a gap of this link over the offset."""
    return any(
        e.kind is ProvenanceKind.GAP and e.link_id == link_id and e.offset <= offset < e.to_offset
        for e in entries
    )


@dataclass(frozen=True, slots=True)
class Cuts:
    """The run's reported cuts, as they bear on one send (begun at `since_ms`)."""

    truncations: Truncations
    events: CutEvents | None
    since_ms: int

    def removed(self, key: tuple[str, str, int], offset: int) -> bool:
        return cut_since(key, offset, self.since_ms, self.truncations, self.events)


def _excused(
    source: str,
    acked_ms: int,
    v: Send,
    owed: tuple[str, str, str],
    states: Mapping[str, ClusterState],
    failovers: list[FailoverReport],
    cuts: Cuts,
    lost: set[str],
) -> str | None:
    """Which report names a record a follower lacks, if any. Once the
    follower failed the link over, only that failover's answer can excuse a
    record it lacks (its detach would, else, excuse everything)."""
    follower, topic, link_id = owed
    if cuts.removed((source, v.topic, v.partition), v.offset):
        return "the source cut it (reported)"
    if cuts.removed((follower, topic, v.partition), v.offset):
        # The follower's copy was cut or deleted after it held the record:
        # a divergence, a recovery or an operator's delete-topic, each reported.
        return "the follower cut it (reported)"
    covering = [
        r
        for r in failovers
        if r.cluster == follower
        and r.link_id == link_id
        and r.at_ms >= acked_ms
        and any(rep.in_prefix(topic, p) for p in r.prefixes)
    ]
    if covering:
        for report in covering:
            row = report.partitions.get((topic, v.partition))
            if row is None:
                # A partition the follower had not learned of: the report says
                # from when on the source's topics were known.
                if acked_ms >= report.topics_known_at_ms:
                    return "in a partition created after what the failover said it knew"
                continue
            named = row.names(v.offset, acked_ms, report.source_live)
            if named is not None:
                return named
    state = states[follower]
    t = state.topics.get(topic)
    if t is None:
        # Never created here (an operator's delete is a reported cut, above).
        return _excused_missing(
            state, source, link_id, (v.topic, topic), v.partition, covering, lost
        )
    cut = _reported_cut(t.provenance.get(v.partition, []), v.offset)
    if covering or cut is not None:
        return cut
    if _in_gap(t.provenance.get(v.partition, []), link_id, v.offset):
        return "a gap the follower recorded (the source deleted it before the link copied it)"
    if _refused(state, link_id, topic, v.partition):
        return "the follower's link refuses the partition and says why"
    if not _named(t.provenance, link_id) and not _follows(state, link_id, topic, v.topic):
        # Its topic here never held a copy over this link, which no longer
        # carries it: the namespace left the link before the topic was known.
        return "the follower left the link before it knew the topic"
    if any(
        e.link_id == link_id and e.kind is ProvenanceKind.DETACHED
        for entries in t.provenance.values()
        for e in entries
    ):
        # An operator detached the namespace (or deleted the link) first: the
        # provenance says where the link's data ends.
        return "the follower left the link, and its provenance says where"
    if source in lost:
        return "the source is gone and the follower's link says so"
    return None


def _excused_missing(
    state: ClusterState,
    source: str,
    link_id: str,
    topics: tuple[str, str],
    partition: int,
    covering: list[FailoverReport],
    lost: set[str],
) -> str | None:
    """Which report names a record of a follower topic that was never
    created on the follower: a failover that knew of the topic and did not
    name its partitions names nothing, nor does a link still following it.
    `topics`: (the source topic, its follower topic here)."""
    source_topic, topic = topics
    if covering:
        return None
    if _refused(state, link_id, topic, partition):
        return "the follower's link says why it holds no copy of the partition"
    if not _follows(state, link_id, topic, source_topic):
        return "the follower left the link before it knew the topic"
    if source in lost:
        return "the source is gone and the follower's link says so"
    return None


# -- invariant 11 ------------------------------------------------------------------------


def check_hanging_transactions(
    states: Mapping[str, ClusterState],
    up: Mapping[str, bool],
    lost: set[str],
    now_ms: int,
) -> list[Violation]:
    """Every open transaction in a partition of a live cluster is one a live
    coordinator still runs within its timeout plus HANGING_SLACK_MS."""
    details: list[str] = []
    live = [c for c in sorted(states) if up.get(c) and c not in lost]
    running: dict[int, TxnMetadata] = {
        meta.producer_id: meta
        for c in live
        for meta in states[c].txn.txns.values()
        if meta.state is TxnState.ONGOING
    }
    for cid in live:
        state = states[cid]
        for name in sorted(state.topics):
            if _following_a_lost_source(state, name, lost) or in_follow_cycle(states, cid, name):
                continue
            names = _names_upstream(states, cid, name)
            for p, log in enumerate(state.topics[name].partitions):
                for pid, first in sorted(log.ongoing_txns.items()):
                    meta = running.get(pid)
                    if (
                        meta is not None
                        and any((n, p) in meta.partitions for n in names)
                        and now_ms - meta.started_ms <= meta.timeout_ms + HANGING_SLACK_MS
                    ):
                        continue
                    details.append(
                        f"{cid}: a transaction of producer {pid} is open in {name}-{p} from "
                        f"offset {first} (LSO {log.last_stable_offset}, HW "
                        f"{log.high_watermark}) at t={now_ms} ms, and no coordinator will "
                        "finish it in time"
                    )
    return _capped("11 hanging transaction", details)


def _names_upstream(states: Mapping[str, ClusterState], cluster: str, topic: str) -> set[str]:
    """The topic's name here and at every source up its chain of links (a
    follower may copy under another name: its transactions' coordinator
    knows the source's)."""
    names = {topic}
    # A chain may keep one name over several hops (C's r-A-t1 copies B's
    # r-A-t1, which copies A's A-t1): the walk stops where it has been (a
    # ring), not at a name it has seen.
    seen = {(cluster, topic)}
    at: tuple[str, str] | None = (cluster, topic)
    while at is not None:
        state = states.get(at[0])
        at = _source_of(state, at[1]) if state is not None else None
        if at is None or at in seen:
            break
        seen.add(at)
        names.add(at[1])
    return names


def _source_of(state: ClusterState, topic: str) -> tuple[str, str] | None:
    """(source cluster, source topic) this cluster's topic follows, if any."""
    for config in sorted(state.links.configs.values(), key=lambda c: c.name):
        mapping = config.mapping_for(topic, "follower")
        if mapping is not None:
            source = rep.map_name(topic, mapping.local_prefix, mapping.remote_prefix)
            return config.remote_cluster_id, source
    return None


def in_follow_cycle(states: Mapping[str, ClusterState], cluster: str, topic: str) -> bool:
    """The topic follows a copy of itself through a ring of links (nobody can
    write it, and an open transaction there never ends). The core refuses
    rings of any length (`linkd.core.lineage`); one that is left at the end
    is invariant 13's violation (`check_follow_cycles`), and the hang checker
    leaves its topics out."""
    seen = {(cluster, topic)}
    at = (cluster, topic)
    for _ in range(len(states) + 1):
        state = states.get(at[0])
        nxt = _source_of(state, at[1]) if state is not None else None
        if nxt is None:
            return False
        if nxt in seen:
            return True
        seen.add(nxt)
        at = nxt
    return False


def check_follow_cycles(
    states: Mapping[str, ClusterState], up: Mapping[str, bool]
) -> list[Violation]:
    """Invariant 13: at the end of a run (every partition healed, the
    lineage carried around), no topic of a live cluster follows a copy of
    itself through a ring of links of any length."""
    details: list[str] = []
    for cid in sorted(states):
        if not up.get(cid):
            continue
        for name in sorted(states[cid].topics):
            if in_follow_cycle(states, cid, name):
                details.append(
                    f"{cid}: topic {name!r} follows a copy of itself: {_ring(states, cid, name)}"
                )
    return _capped("13 follow cycle", details)


def _ring(states: Mapping[str, ClusterState], cluster: str, topic: str) -> str:
    at: tuple[str, str] | None = (cluster, topic)
    seen: list[tuple[str, str]] = []
    while at is not None and at not in seen and len(seen) <= len(states):
        seen.append(at)
        state = states.get(at[0])
        at = _source_of(state, at[1]) if state is not None else None
    return " <- ".join(f"{c}:{t}" for c, t in [*seen, *([at] if at is not None else [])])


def _following_a_lost_source(state: ClusterState, topic: str, lost: set[str]) -> bool:
    for config in state.links.configs.values():
        if config.remote_cluster_id in lost and config.mapping_for(topic, "follower"):
            return True
    return False


# -- invariant 12 -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminChange:
    """A mapping change an operator's call answered success for."""

    cluster: str
    link_id: str
    key: MappingKey  # the acting cluster's (type, local prefix, remote prefix)
    version: Version
    attached: bool


def check_admin_effects(
    changes: list[AdminChange], states: Mapping[str, ClusterState], up: Mapping[str, bool]
) -> list[Violation]:
    details: list[str] = []
    for change in changes:
        if not up.get(change.cluster):
            continue
        state = states[change.cluster]
        config = next(
            (c for c in state.links.configs.values() if c.link_id == change.link_id), None
        )
        if config is None:
            continue  # deleted since: delete-link's own business
        mine = config.mappings.get(change.key)
        if mine is None or mine.version < change.version:
            details.append(
                f"{change.cluster}: a change of {change.key[0]} namespace {change.key[1]!r} on "
                f"link {config.name!r} answered success, but the mapping there is "
                f"{mine.to_record() if mine else 'gone'}"
            )
            continue
        remote = states.get(config.remote_cluster_id)
        if remote is None or not up.get(config.remote_cluster_id):
            continue
        theirs_config = remote.links.configs.get(config.name)
        if theirs_config is None or theirs_config.link_id != config.link_id:
            continue
        theirs = theirs_config.mappings.get(mine.mirrored_key)
        if theirs is None or theirs.version < change.version:
            details.append(
                f"{config.remote_cluster_id}: never took the change of {change.key[0]} "
                f"namespace {change.key[1]!r} on link {config.name!r} that "
                f"{change.cluster} answered success for"
            )
    return _capped("12 admin effect", details)


__all__ = [
    "AdminChange",
    "FailoverReport",
    "HeardOffsets",
    "StatusWatch",
    "check_admin_effects",
    "check_failover_groups",
    "check_hanging_transactions",
    "check_silent_loss",
]
