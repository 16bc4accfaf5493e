"""The glossary of run metrics: what every metric a run can report means.

Rules:
- One entry per metric name, or per family of names: a pattern holds one
  `<placeholder>` (`availability_<class>`), which stands for one or more of
  `[A-Za-z0-9_]`. An exact entry wins over a pattern; among patterns the one
  with the longer literal text wins (`mirror_duplicates_stored` is its own
  entry, not a `mirror_<counter>`).
- Every metric a shipped scenario can emit has an entry (a test runs every
  shipped scenario and checks); `lookup` of an unknown name returns None and
  `describe` raises naming it, so a new metric without an entry fails loudly.
- `missing` says what "-" means for the metric: the aggregate prints "-" when
  no run of a group reported it, which for most metrics means the thing it
  measures never happened (no failover, no mirror, no client of that class).
- `zero_bound` marks counts of bad events (lost, duplicated or truncated
  records): a sweep whose every seed counts 0 is reported with the bound n
  clean seeds give (below 1 - 0.05^(1/n) at 95%; about 3/n, the rule of
  three, for many seeds).

Theory of operation: `ENTRIES` is the table; `lookup` compiles each pattern
once; `column_legend` explains aggregate columns (`<metric>_<stat>`);
`markdown_table` renders the table for `ccr-sim glossary --markdown` and the
docs (a test keeps docs/simulator.md's copy current).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache


class Unit(enum.Enum):
    RECORDS = "records"
    MS = "ms (virtual)"
    FRACTION = "fraction 0..1"
    COUNT = "count"
    BYTES = "bytes (logical)"
    PARTITIONS = "partitions"
    LINKS = "links"


class Group(enum.Enum):
    """Where a metric is shown in a report (its section), in report order."""

    RPO = "recovery point at failover"
    CONSUMERS = "consumers across failover"
    AVAILABILITY = "availability per client class"
    LATENCY = "produce latency"
    LINKS = "link states and catch-up"
    TRUNCATION = "records cut from logs"
    MIRROR = "MirrorMaker 2 flows"
    OPERATORS = "operator actions and faults"
    RUN = "the run itself"


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # exact, or a pattern with one <placeholder>
    unit: Unit
    group: Group
    meaning: str  # one line: what it tells the reader
    computed: str  # how the simulator computes it
    missing: str  # what "-" (no value) means
    zero_bound: bool = False  # a count of bad events: 0 in n seeds bounds the rate

    @property
    def is_pattern(self) -> bool:
        return "<" in self.name


NO_FAILOVER = "no failover happened in the run (nothing to measure)"
ALWAYS = "never missing: every run reports it"
STATS = {
    "mean": "the mean over the group's runs of",
    "p50": "the median over the group's runs of",
    "p99": "the 99th percentile (linear interpolation) over the group's runs of",
    "min": "the smallest value over the group's runs of",
    "max": "the largest value over the group's runs of",
}

ENTRIES: tuple[Entry, ...] = (
    # ---- recovery point
    Entry(
        "rpo_records", Unit.RECORDS, Group.RPO,
        "acknowledged records the promoted cluster lacked at failover (data lost by it)",
        "at each failover, acknowledged sends on the old source whose record the promoted "
        "side does not hold (a link: at or above its log end, since what it copied above its "
        "own high watermark survives the failover; a mirror: value not in the remote topic); "
        "summed over the run's accepted failovers (a refused one loses nothing). A measure: "
        "whether each such record was named by the failover's answer is judged by invariant "
        "10 (`10 silent loss`)",
        NO_FAILOVER, zero_bound=True,
    ),
    Entry(
        "rpo_ms", Unit.MS, Group.RPO,
        "how much acknowledgement time the lost records span (the RPO as a duration)",
        "per partition: newest acknowledgement on the old source minus the newest "
        "acknowledgement of a record the promoted side holds (or the oldest lost one); "
        "the largest over partitions and failovers",
        NO_FAILOVER,
    ),
    Entry(
        "failover_aborted_transactions", Unit.COUNT, Group.RPO,
        "replicated transactions the failovers aborted (open on the promoted side)",
        "the failovers' answers' aborted_transactions, one per partition, summed",
        NO_FAILOVER,
    ),
    Entry(
        "failover_records_cut", Unit.RECORDS, Group.RPO,
        "records the failovers cut at their partitions' last stable offset "
        "(failover.truncation last-stable-offset): open transactions and every record "
        "after the first of them",
        "the failovers' answers' truncated rows, records removed, summed. Judged through "
        "its parts: a cut the answer does not name, or names wrong, is `10 unreported cut`",
        NO_FAILOVER,
    ),
    Entry(
        "failover_acknowledged_cut", Unit.RECORDS, Group.RPO,
        "non-transactional records the source had acknowledged that a failover's cut "
        "removed: lost by the cut, on top of rpo_records (which is measured as the "
        "failover begins)",
        "acknowledged sends without a transaction, to another cluster before the failover "
        "answered, at offsets of the failing-over cluster's truncated rows "
        "(sim.follower_metrics). Judged through its parts: a record below a cut of the "
        "follower's log is excused by that cut only (`10 silent loss` otherwise), and a "
        "failover's cut must be named by its answer (`10 unreported cut`)",
        NO_FAILOVER,
    ),
    Entry(
        "consumer_reads_cut_by_failover", Unit.RECORDS, Group.RPO,
        "records consumers read on a cluster that a failover of that cluster then cut "
        "(phantom reads: read_uncommitted readers read records that are gone)",
        "poll records ending before the failover answered, at offsets its truncated rows "
        "removed (sim.follower_metrics); a cost the answer names (`10 unreported cut` "
        "judges the cut itself)",
        NO_FAILOVER,
    ),
    Entry(
        "transactions_partial_after_failover", Unit.COUNT, Group.RPO,
        "committed transactions a read_committed reader of a promoted cluster sees only "
        "part of at the end",
        "transactions every send of which was acknowledged, of which the promoted cluster "
        "shows some records below its last stable offset, outside aborted ranges, but not "
        "all (the rest never arrived, or the failover aborted them); one shown not at all "
        "is lost whole (rpo_records) and not counted (sim.follower_metrics). Judged through "
        "its parts: a missing record the answer does not name as abandoned is `10 silent "
        "loss`, an abort it does not list `10 unreported abort`, one left open `11 hanging "
        "transaction`",
        NO_FAILOVER, zero_bound=True,
    ),
    Entry(
        "failover_abandoned_partitions", Unit.PARTITIONS, Group.RPO,
        "partitions the failover's answer reported at risk (a known lag above 0, or a lag "
        "not known); not the loss itself: it is 0 while records were lost when the source "
        "acknowledged them after the promoted side's last fetch round (see rpo_records)",
        "summed over the failovers' answers; the answer judges each partition by the "
        "source's high watermark as of the last fetch round, so records acknowledged after "
        "it are never counted here",
        "no failover answered with abandoned partitions",
    ),
    Entry(
        "failover_groups_behind", Unit.RECORDS, Group.RPO,
        "records replicated groups had processed on the old source that they do not "
        "resume past on the promoted cluster (beyond its data), as the failover reported",
        "summed over the failovers' answers (`groups`: last commit heard minus resume offset)",
        "no failover answered with a group behind its last commit heard of",
    ),
    # ---- consumers
    Entry(
        "consumer_duplicates_across_failover", Unit.RECORDS, Group.CONSUMERS,
        "records a consumer was delivered again after it moved to another cluster "
        "(redelivery, not records stored twice)",
        "per consumer: values read in a later session that it had already read in an "
        "earlier one; a moved consumer restarts from its group's committed offsets as "
        "replicated to the new cluster, so it re-reads what it read after the last "
        "commit that reached there",
        ALWAYS, zero_bound=True,
    ),
    Entry(
        "consumer_skips_across_failover", Unit.RECORDS, Group.CONSUMERS,
        "records stored below a moved consumer's final position that it never read",
        "per consumer that changed session: values in the final log of its last cluster at "
        "offsets up to the highest it read there, that it never saw in any session. Judged "
        "(`skip_across_failover`) less those a read_committed reader cannot read and those at "
        "or above a cut no recovery made (a link's, a deletion's, an unclean election's: "
        "reported, and passed as a Kafka consumer passes a truncation)",
        ALWAYS, zero_bound=True,
    ),
    Entry(
        "consumer_reads_aborted_uncommitted", Unit.RECORDS, Group.CONSUMERS,
        "records read_uncommitted consumers read that end up in an aborted transaction",
        "per poll of a read_uncommitted consumer: records the cluster it read holds, at the "
        "end, inside an aborted transaction (its client aborted it, or a failover aborted "
        "it because its commit marker had not arrived; sim.follower_metrics)",
        ALWAYS,
    ),
    Entry(
        "consumer_reads_truncated", Unit.RECORDS, Group.CONSUMERS,
        "records consumers read that the cluster they read them on later cut: reads no "
        "surviving cluster can repeat",
        "per ok poll: values not in the final log of the cluster and topic it read them on "
        "(cut by a recovery, a divergence or an unclean election)",
        ALWAYS, zero_bound=True,
    ),
    Entry(
        "consumer_longest_gap_ms", Unit.MS, Group.CONSUMERS,
        "the longest time a consumer went without new records (how long a failover or a "
        "re-pointing left readers without data)",
        "per consumer: the largest time between the completions of two successive polls "
        "that returned records; the largest over consumers",
        "never missing: 0 without two polls that returned records",
    ),
    # ---- availability
    Entry(
        "availability_<class>", Unit.FRACTION, Group.AVAILABILITY,
        "share of a client class's operations that succeeded (spec section 6 rows, "
        "e.g. source_producer, target_consumer_commit, target_producer)",
        "ok operations / all operations of clients of that class; target_producer means "
        "writes to a follower topic, which the contract refuses, so 0 is its expected value",
        "no client of that class ran in the run",
    ),
    Entry(
        "ops_<outcome>", Unit.COUNT, Group.AVAILABILITY,
        "client operations by outcome: ok (happened), fail (refused), info (timed out: "
        "indefinite)",
        "counted over the history (sends, polls, commits)",
        "no operation ended that way",
    ),
    # ---- latency
    Entry(
        "produce_latency_p50_ms", Unit.MS, Group.LATENCY,
        "median acknowledged-send latency",
        "nearest-rank percentile of invoke-to-ack of acknowledged record-level sends "
        "(client latency, I/O queueing, durable write, high watermark)",
        "never missing: 0 when no record was acknowledged",
    ),
    Entry(
        "produce_latency_p99_ms", Unit.MS, Group.LATENCY,
        "99th-percentile acknowledged-send latency",
        "nearest-rank percentile of invoke-to-ack of acknowledged record-level sends",
        "never missing: 0 when no record was acknowledged",
    ),
    Entry(
        "produce_latency_max_ms", Unit.MS, Group.LATENCY,
        "slowest acknowledged send",
        "largest invoke-to-ack of acknowledged record-level sends",
        "never missing: 0 when no record was acknowledged",
    ),
    Entry(
        "produce_latency_p50_replicated_ms", Unit.MS, Group.LATENCY,
        "median latency of sends acknowledged while a link carried their namespace to a "
        "follower (what replication, SYNC or ASYNC, costs a producer)",
        "nearest-rank percentile over acknowledged record-level sends whose acknowledgement "
        "found a link carrying the topic to a follower; writes to a promoted cluster with no "
        "follower are left out",
        "never missing: 0 when no such send was acknowledged",
    ),
    Entry(
        "produce_latency_p99_replicated_ms", Unit.MS, Group.LATENCY,
        "99th-percentile latency of sends acknowledged while a link carried their namespace "
        "to a follower",
        "nearest-rank percentile over the same sends as produce_latency_p50_replicated_ms",
        "never missing: 0 when no such send was acknowledged",
    ),
    Entry(
        "produce_latency_p99_catchup_ms", Unit.MS, Group.LATENCY,
        "p99 send latency while links were catching up after a heal",
        "sends invoked between a heal and the links' convergence (the catch-up windows)",
        "never missing: 0 when no send fell in a catch-up window",
    ),
    Entry(
        "produce_latency_p99_steady_ms", Unit.MS, Group.LATENCY,
        "p99 send latency outside catch-up windows",
        "sends invoked outside every catch-up window",
        "never missing: 0 when no record was acknowledged",
    ),
    Entry(
        "bulk_produce_latency_p99_ms", Unit.MS, Group.LATENCY,
        "p99 latency of bulk batches (a batch stands for many records)",
        "nearest-rank percentile of invoke-to-ack of acknowledged bulk batches",
        "no bulk producer in the scenario",
    ),
    # ---- links
    Entry(
        "link_state_ms_<STATE>", Unit.MS, Group.LINKS,
        "time links spent in a state (DISCONNECTED, CATCHING_UP, FOLLOWING, SYNCING, "
        "IN_SYNC, OUT_OF_SYNC), summed over links",
        "sampled at every tick: the time since the last sample is added to each running "
        "link's current state (a link runs while the cluster that dials it is up)",
        "no link was ever sampled in that state",
    ),
    Entry(
        "follower_lag_records_mean", Unit.RECORDS, Group.LINKS,
        "records a link's follower lacked below its source's high watermark, on average",
        "every [run] lag_sample_ms, per link with both clusters up: the source's high "
        "watermark minus the follower's log end, summed over the link's follower partitions "
        "(the logs, not what the follower last heard); the mean over the samples "
        "(sim.follower_metrics)",
        "never sampled (lag_sample_ms 0, the default)",
    ),
    Entry(
        "follower_lag_records_max", Unit.RECORDS, Group.LINKS,
        "the largest such lag sampled",
        "as follower_lag_records_mean; the largest sample",
        "never sampled (lag_sample_ms 0, the default)",
    ),
    Entry(
        "catchup_ms", Unit.MS, Group.LINKS,
        "longest time from a heal to every link FOLLOWING (or IN_SYNC) without lag",
        "per heal (fault healed, cluster restarted, liveness phase): time until the run "
        "converged with no link held back (a partition stopped at a gap, or refused with a "
        "reason the link reports, has not caught up); the largest",
        "no heal converged (no fault healed, or the links never caught up)",
    ),
    Entry(
        "catchups", Unit.COUNT, Group.LINKS,
        "heals after which the links converged",
        "one per converged heal",
        "no heal converged",
    ),
    Entry(
        "fetch_rounds", Unit.COUNT, Group.LINKS,
        "replica fetch rounds made by all links: pulled answers applied, and pushes with "
        "records accepted (each push of a pipeline is a round)",
        "summed over the link drivers, those a crash or a deletion ended included",
        ALWAYS,
    ),
    Entry(
        "links_held_by_refusals", Unit.LINKS, Group.LINKS,
        "links counted as settled while held back only by partitions the source refuses "
        "with a reported reason",
        "counted at the end of the liveness phase",
        ALWAYS,
    ),
    Entry(
        "follow_cycles", Unit.COUNT, Group.LINKS,
        "topics that ended in a replication ring (A follows C follows B follows A)",
        "topics, per cluster, in a follow cycle at the end",
        ALWAYS,
    ),
    # ---- truncation
    Entry(
        "records_truncated_by_recovery", Unit.RECORDS, Group.TRUNCATION,
        "records cut from a follower that diverged from its new leader (link recovery "
        "or divergence resolution)",
        "summed over every cut of a partition in a follower (or reserved) namespace",
        "nothing was cut from a follower", zero_bound=True,
    ),
    Entry(
        "records_truncated_unclean", Unit.RECORDS, Group.TRUNCATION,
        "records cut by emulated unclean leader elections and other leader-side cuts",
        "summed over every cut of a partition outside follower namespaces",
        "nothing was cut from a leader", zero_bound=True,
    ),
    Entry(
        "gap_records", Unit.RECORDS, Group.TRUNCATION,
        "records a follower never copied because its source had deleted them first "
        "(retention outran an outage): reported loss, recorded as gaps",
        "summed over every gap recorded in a follower partition's provenance at the end",
        ALWAYS, zero_bound=True,
    ),
    # ---- mirrors
    Entry(
        "mirror_duplicates_stored", Unit.RECORDS, Group.MIRROR,
        "values a MirrorMaker 2 flow wrote twice into a remote topic (its at-least-once "
        "cost)",
        "per remote partition at the end: records minus distinct values",
        "not a mirror run (every edge is an offset-preserving link)", zero_bound=True,
    ),
    Entry(
        "mirror_<counter>", Unit.COUNT, Group.MIRROR,
        "a MirrorMaker 2 flow counter (records_copied, polls, offset_syncs_written, "
        "checkpoints_emitted, group_offsets_written, produce_failures, ...)",
        "summed over the run's mirror flows",
        "not a mirror run (every edge is an offset-preserving link)",
    ),
    # ---- Connect groups (sim/connect_driver.py)
    Entry(
        "connect_rebalances", Unit.COUNT, Group.MIRROR,
        "rebalance rounds of the Kafka Connect groups that run the mirror edges "
        "(follow-up rounds of a cooperative rebalance count apart)",
        "one per round the group's leader assigned",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_task_pauses", Unit.COUNT, Group.MIRROR,
        "times a MirrorSourceTask stopped copying and was run again (crash, pause, "
        "cut-off or revocation, then resumption)",
        "one per stop followed by a resumption; the first start is not one",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_task_pause_ms_max", Unit.MS, Group.MIRROR,
        "the longest replication pause of a task: from the moment it stopped copying to "
        "the moment a worker ran it again",
        "maximum over every task pause of the run",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_task_pause_ms_p50", Unit.MS, Group.MIRROR,
        "the median replication pause of a task (stop to resumption)",
        "nearest-rank median over every task pause of the run",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_replication_pauses", Unit.COUNT, Group.MIRROR,
        "replication pauses of a flow: intervals in which at least one of its "
        "MirrorSourceTasks was not copying, each from the first task's stop to the "
        "moment every task runs again (an eager rebalance stops every task: one each)",
        "one per such interval that ended after the group's first assignment; one still "
        "going at the end of the run is not counted",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_replication_pause_ms_max", Unit.MS, Group.MIRROR,
        "the longest replication pause of a flow (some task not copying)",
        "maximum over the run's replication pauses",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_replication_pause_ms_p50", Unit.MS, Group.MIRROR,
        "the median replication pause of a flow (some task not copying)",
        "nearest-rank median over the run's replication pauses",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_rebalances_in_pauses", Unit.COUNT, Group.MIRROR,
        "rebalance rounds that happened during replication pauses: divided by "
        "connect_replication_pauses, the rounds one pause took",
        "rounds of the Connect groups counted while a replication pause was going on",
        "not a Connect run ([connect] workers = 0, or no mirror edge)",
    ),
    Entry(
        "connect_recopied_records", Unit.RECORDS, Group.MIRROR,
        "source offsets a task copied again after it moved: the target had acknowledged "
        "them, the source commit had not happened when the task stopped",
        "per partition at each task start: highest acknowledged position minus the "
        "committed one it resumes at (transaction markers in the span count)",
        "not a Connect run ([connect] workers = 0, or no mirror edge)", zero_bound=True,
    ),
    # ---- operators and faults
    Entry(
        "actions_ok", Unit.COUNT, Group.OPERATORS,
        "operator actions the clusters carried out",
        "scenario actions and drawn moves that answered success",
        "no operator action succeeded",
    ),
    Entry(
        "actions_failed", Unit.COUNT, Group.OPERATORS,
        "operator actions a cluster refused (an expected outcome, not a violation)",
        "scenario actions and drawn moves refused by the core",
        "no operator action was refused",
    ),
    Entry(
        "moves_<kind>", Unit.COUNT, Group.OPERATORS,
        "operator moves drawn from the seed, by kind (operator-mix)",
        "one per drawn move of that kind",
        "no move of that kind was drawn (or the scenario draws none)",
    ),
    Entry(
        "recoveries", Unit.COUNT, Group.OPERATORS,
        "confirmed unclean link recoveries that completed",
        "one per `recover` or `relink` that applied its plan",
        "no recovery completed",
    ),
    Entry(
        "recovery_offsets_moved", Unit.COUNT, Group.OPERATORS,
        "committed offsets a relink's confirmed recovery moved (back to the cut, or to the "
        "new leader's)",
        "the recovery plan's group rows, summed over relinks",
        "no relink completed",
    ),
    Entry(
        "recovery_groups_moved", Unit.COUNT, Group.OPERATORS,
        "consumer groups whose committed offsets a relink's recovery moved",
        "distinct groups among the plan's group rows, summed over relinks",
        "no relink completed",
    ),
    Entry(
        "recovery_offsets_moved_records", Unit.RECORDS, Group.OPERATORS,
        "how far back a relink's recovery moved committed offsets, in records",
        "the sum over the plan's group rows of the old offset minus the new one (rows "
        "that remove an offset count 0)",
        "no relink completed",
    ),
    Entry(
        "reversals", Unit.COUNT, Group.OPERATORS,
        "link reversals that completed",
        "one per `reverse` procedure that reached its end",
        "no reversal completed",
    ),
    Entry(
        "reverse_failed", Unit.COUNT, Group.OPERATORS,
        "link reversals stopped by a failing step",
        "one per `reverse` procedure that stopped early",
        "no reversal failed",
    ),
    Entry(
        "mid_procedure_crashes", Unit.COUNT, Group.OPERATORS,
        "crashes that landed at a checkpoint of a procedure (between two of its steps)",
        "one per armed crash (`crash_at`, or a drawn reversal's, failover's or "
        "recovery's) that fired",
        "no crash was armed, or no procedure reached its point",
    ),
    Entry(
        "plans_finished_at_rest", Unit.COUNT, Group.OPERATORS,
        "journalled plans (reverse, failover, recover) the liveness phase ran once more "
        "to finish them",
        "one per re-run of a (cluster, link) holding a plan when the run came to rest, "
        "counted as it starts: a re-run refused (a recover whose attach is refused) leaves "
        "its plan, which runs (and counts) again once another plan was finished since",
        "no procedure was cut short and left unfinished",
    ),
    Entry(
        "faults_drawn", Unit.COUNT, Group.OPERATORS,
        "faults drawn from the seed (split, isolate, pause, crash, one_way, storage_refusal)",
        "one per drawn fault",
        "the scenario draws no faults",
    ),
    # ---- the run
    Entry(
        "events", Unit.COUNT, Group.RUN,
        "events the virtual clock processed",
        "the event queue's count at the end",
        ALWAYS,
    ),
    Entry(
        "virtual_ms", Unit.MS, Group.RUN,
        "virtual time at the end of the run (safety phase plus time to converge)",
        "the event queue's clock at the end",
        ALWAYS,
    ),
    Entry(
        "network_dropped", Unit.COUNT, Group.RUN,
        "messages the simulated network dropped (grudges, loss, crashed ends)",
        "counted by the network",
        ALWAYS,
    ),
    Entry(
        "io_bytes_<class>", Unit.BYTES, Group.RUN,
        "bytes the clusters' I/O devices handled per traffic class (produce, fetch, "
        "replica_read, replica_write, offsets, metadata, cleaner, mirror_*)",
        "summed over the clusters' devices",
        "no traffic of that class",
    ),
)


@dataclass(frozen=True, slots=True)
class _Compiled:
    exact: dict[str, Entry]
    patterns: tuple[tuple[re.Pattern[str], Entry], ...]


@cache
def _compiled() -> _Compiled:
    exact: dict[str, Entry] = {}
    patterns: list[tuple[int, re.Pattern[str], Entry]] = []
    for e in ENTRIES:
        if e.is_pattern:
            prefix, rest = e.name.split("<", 1)
            suffix = rest.split(">", 1)[1]
            regex = re.compile(f"^{re.escape(prefix)}[A-Za-z0-9_]+{re.escape(suffix)}$")
            patterns.append((len(prefix) + len(suffix), regex, e))
        exact[e.name] = e  # a pattern is also found by its own name
    patterns.sort(key=lambda t: -t[0])
    return _Compiled(exact, tuple((p, e) for _, p, e in patterns))


def lookup(metric: str) -> Entry | None:
    """The entry that explains `metric` (exact first, then the most specific pattern)."""
    c = _compiled()
    if metric in c.exact:
        return c.exact[metric]
    for pattern, entry in c.patterns:
        if pattern.match(metric):
            return entry
    return None


def describe(metric: str) -> Entry:
    """`lookup`, but a metric without an entry is an error naming it."""
    entry = lookup(metric)
    if entry is None:
        raise KeyError(f"metric {metric!r} has no glossary entry (add one to sim/glossary.py)")
    return entry


def unknown(metrics: Iterable[str]) -> list[str]:
    """The metric names without an entry, sorted."""
    return sorted({m for m in metrics if lookup(m) is None})


# The client classes of `availability_<class>` (spec section 6 rows; `_commit`:
# the group offset commits of that consumer class).
CLIENT_CLASSES: dict[str, str] = {
    "source_producer": "producers writing to a topic the cluster leads",
    "source_txn_producer": "transactional producers writing to a topic the cluster leads",
    "source_consumer": "consumers reading a topic the cluster leads",
    "target_consumer": "consumers reading a follower topic, with a group not replicated",
    "target_consumer_replicated_group": "consumers reading a follower topic, with a "
    "replicated group",
    "target_producer": "producers writing to a follower topic: refused by contract, so 0 "
    "is the expected value",
    "target_txn_producer": "transactional producers writing to a follower topic: refused "
    "by contract, so 0 is the expected value",
}


def explain(metric: str) -> str:
    """The entry's one-line meaning, made specific for the metric where the family
    knows more (an availability's client class)."""
    e = describe(metric)
    if e.name == "availability_<class>":
        cls = metric.removeprefix("availability_")
        base = cls.removesuffix("_commit")
        what = CLIENT_CLASSES.get(base, "clients of that class")
        if cls.endswith("_commit"):
            return f"share of offset commits that succeeded, {what}"
        return f"share of operations that succeeded, {what}"
    return e.meaning


def split_column(column: str) -> tuple[str, str] | None:
    """An aggregate column `<metric>_<stat>` as (metric, stat), or None."""
    metric, _, stat = column.rpartition("_")
    if stat in STATS and metric and lookup(metric) is not None:
        return metric, stat
    return None


def column_legend(columns: Sequence[str], missing: Iterable[str] = ()) -> list[str]:
    """Lines explaining aggregate columns: per metric column its statistic, meaning
    and unit; then, for the columns in `missing` (those showing "-"), what "-"
    means for each. Columns that are not metric statistics are skipped."""
    shown = [(c, p) for c in columns if (p := split_column(c)) is not None]
    if not shown:
        return []
    width = max(len(c) for c, _ in shown)
    lines = ["columns (a statistic over the runs of each group):"]
    for column, (metric, stat) in shown:
        unit = describe(metric).unit.value
        lines.append(f"  {column:<{width}}  {stat} of {metric} [{unit}]: {explain(metric)}")
    dashed = [(c, p) for c, p in shown if c in set(missing)]
    if dashed:
        lines.append('"-": no run of the group reported the metric, because')
        for column, (metric, _stat) in dashed:
            lines.append(f"  {column:<{width}}  {describe(metric).missing}")
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(entries: Sequence[Entry] = ENTRIES) -> str:
    """The glossary as a Markdown table (docs/simulator.md holds this text)."""
    rows = [
        "| metric | unit | meaning | how it is computed | `-` (missing) means |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        rows.append(
            f"| `{e.name}` | {e.unit.value} | {_md(e.meaning)} | {_md(e.computed)} | "
            f"{_md(e.missing)} |"
        )
    return "\n".join(rows)


def plain_text(entries: Sequence[Entry] = ENTRIES) -> str:
    """The glossary for a terminal: one block per entry."""
    blocks = []
    for e in entries:
        blocks.append(
            f"{e.name}  [{e.unit.value}]\n  {e.meaning}\n  computed: {e.computed}\n"
            f"  -: {e.missing}"
        )
    return "\n\n".join(blocks)
