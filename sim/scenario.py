"""Scenarios: declarative TOML files, validated into plain frozen data.

A scenario stacks, FoundationDB style: a topology (who replicates to whom),
network and cluster parameters, workloads (clients), faults (the nemesis) and
operator actions at given virtual times. Every key is checked: an unknown key,
a wrong type or a value out of range raises `ScenarioError` naming the table,
the key and the value.

Tables and keys (units last; every time is virtual milliseconds):
  name, description
  [run]       duration_ms, liveness_ms, tick_interval_ms, client_latency_ms,
              request_timeout_ms, record_bytes, max_events, fetch_max_bytes,
              partition_max_bytes, fetch_max_wait_ms, fetch_sessions,
              status_probe_ms, lag_sample_ms
  [topology]  kind (chain|hub|mesh|ring|diamond|file), clusters (count or names),
              push (true: the source dials each link and pushes),
              mode (ASYNC|SYNC: every link's mode; a SYNC link is switched once it
              is FOLLOWING, as an operator must), file, link_type (link|mirror:
              every edge's type unless the edge sets its own), fetch_bound
              (high-watermark|last-stable-offset: every link's fetch.bound,
              set when the link is created; "": the default),
              failover_truncation (abort|last-stable-offset: every link's
              failover.truncation, likewise), gap_policy (continue|stop:
              every link's gap.policy, likewise), failback_reconciliation
              (history|last-mirrored-offset|last-mirrored-leader-epoch:
              every link's failback.reconciliation, likewise)
  [network]   latency_ms, jitter_ms, loss, bandwidth_bytes_per_ms (every path),
              reset_on_heal
  [cluster]   disk_bytes_per_ms, disk_fractional_ms, replication_limit_bytes_per_s,
              session_timeout_ms, lag_max_ms, lag_max_records,
              replica_lag_time_max_ms, retention_check_interval_ms
  [namespace] topics, partitions, groups (replicate group offsets too),
              retention_ms (the topics' retention.ms on the virtual clock; 0:
              Kafka's default of 7 days),
              cleanup_policy (delete|compact|compact,delete), segment_bytes,
              segment_ms (the topics' segments: retention deletes whole ones)
  [[edges]]   source, target, and any [network] key or mode (ASYNC|SYNC):
              per-edge overrides; type (link: offset-preserving, the default |
              mirror: MirrorMaker 2, sim.mirror_driver) and, for a mirror,
              sync_group_offsets, sync_group_offsets_interval_ms,
              emit_checkpoints_interval_ms, offset_lag_max,
              offset_flush_interval_ms, refresh_topics_interval_ms,
              offset_syncs_topic_location (source|target)
  [connect]   workers (0: each mirror runs as one process; N: a Kafka Connect
              group of N workers, sim.connect_driver), protocol (eager|
              compatible|sessioned: connect.protocol), tasks_max,
              scheduled_rebalance_max_delay_ms, session_timeout_ms, rebalance_ms
  [[workloads]] kind (producer|bulk_producer|consumer|script), name, cluster, topic, ...
              (script: name and sends = [{at_ms, cluster, topic, partition,
              value, txn, abort, open, commit_after_ms}, ...], replayed as
              they are; an open transaction is never ended by its producer,
              and one with commit_after_ms ends that long after its records)
  [[faults]]  at_ms, kind (partition|one_way|bridge|isolate|clog|loss|heal|crash|
              restart|pause|resume|unclean_election|storage_refusal, and for Connect workers
              worker_crash|worker_restart|worker_pause|worker_isolate), and the
              keys of that kind
  [[actions]] at_ms, kind (failover|delete_link|create_link|create_topic|
              set_mode|attach|detach|recover|reverse|set_reserved|manual_reverse|
              relink|alter_link|resume_partition|crash_at),
              and its keys
  [operators] interval_ms, fault_interval_ms, fault_duration_ms, start_ms,
              stop_ms: operator moves and faults drawn from the seed

Run parameters (`PARAMS`, and `edge_<SOURCE>_<TARGET>_<key>` for one edge's
network key) override scenario values by flat name, so a sweep can vary one
knob without writing files. `link_type` and the `link_*` network parameters
set every edge's value, overriding what an edge sets for itself; an
`edge_<SOURCE>_<TARGET>_<key>` parameter then sets that one edge's.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linkd.core.errors import ClusterError
from linkd.core.link_rounds import LONGEST_FETCH_WAIT_MS
from linkd.core.links import (
    FailbackReconciliation,
    FailoverTruncation,
    FetchBound,
    GapPolicy,
    Leader,
    LinkMode,
)
from linkd.core.mirror.connect import ConnectProtocol, ConnectProtocolError
from linkd.core.topic_config import validate_configs
from sim.connect_driver import WORKER_FAULTS, ConnectSettings
from sim.mirror_driver import LINK_TYPES, MirrorOptions
from sim.topology import KINDS, cluster_names
from sim.workloads import ConsumerSpec, ProducerSpec, ScriptSend, ScriptSpec

SCENARIO_DIR = Path(__file__).parent / "scenarios"
MODES = ("ASYNC", "SYNC")


GAP_POLICIES = tuple(p.value for p in GapPolicy)
FETCH_BOUNDS = tuple(b.value for b in FetchBound)
FAILOVER_TRUNCATIONS = tuple(t.value for t in FailoverTruncation)
FAILBACK_RECONCILIATIONS = tuple(r.value for r in FailbackReconciliation)


class ScenarioError(ValueError):
    """A scenario file or parameter is invalid; the message names it."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    duration_ms: int = 60_000
    liveness_ms: int = 60_000
    tick_interval_ms: int = 100
    client_latency_ms: int = 1
    request_timeout_ms: int = 5_000
    record_bytes: int = 1_024
    max_events: int = 5_000_000
    fetch_max_bytes: int = 8 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    fetch_max_wait_ms: int = 500
    # Replica fetches in fetch sessions (linkd/core/fetch_sessions.py); false:
    # every fetch names every partition (to compare the two).
    fetch_sessions: bool = True
    # How often the status checker compares what every link reports with the
    # logs (invariant 9); 0: never.
    status_probe_ms: int = 500
    # How often each link's follower lag is sampled for the
    # follower_lag_records_* metrics (sim.follower_metrics); 0: never.
    lag_sample_ms: int = 0
    # Test only: undo one fix of the operator-stories issue (linkd/core/faults.py,
    # 1-7) for this run, to measure how soon the search finds it; 0: none.
    undo_fix: int = 0


@dataclass(frozen=True, slots=True)
class TopologySpec:
    kind: str = "chain"
    clusters: tuple[str, ...] = ("A", "B")
    mode: str = "ASYNC"
    file: str = ""
    link_type: str = "link"  # every edge's type unless the edge says otherwise
    # Links of the topology are created on the follower with the source
    # dialing it (connection direction remote_dials): the source pushes.
    push: bool = False
    # Every link's fetch.bound ("": left at the default, high-watermark).
    fetch_bound: str = ""
    # Every link's failover.truncation ("": left at the default, abort).
    failover_truncation: str = ""
    # Every link's gap.policy ("": left at the default, continue).
    gap_policy: str = ""
    # Every link's failback.reconciliation ("": left at the default, history).
    failback_reconciliation: str = ""


_MM2 = MirrorOptions()  # MM2's defaults, for edges that run as mirrors


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    latency_ms: int = 2
    jitter_ms: int = 1
    loss: float = 0.0
    bandwidth_bytes_per_ms: int = 125_000
    # A healed grudge resets the link connections it cut (the chaos proxy's
    # rule): their calls in flight end at once and the links dial again.
    reset_on_heal: bool = False


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    disk_bytes_per_ms: int = 500_000
    replication_limit_bytes_per_s: int = 0  # 0: unlimited
    session_timeout_ms: int = 10_000
    lag_max_ms: int = 30_000
    lag_max_records: int = 0
    replica_lag_time_max_ms: int = 30_000  # SYNC: IN_SYNC -> OUT_OF_SYNC after this
    # Kafka's log.retention.check.interval.ms (5 minutes): how often retention
    # deletes the whole segments it is owed.
    retention_check_interval_ms: int = 300_000
    # Link sessions (linkd/core/link_auth.py) on every link call: off by
    # default (older scenarios keep their timing).
    link_sessions: bool = False
    # The link credentials every cluster requires and every link is created
    # with ("": none required); only with link_sessions.
    link_credentials: str = ""
    # The I/O device keeps fractions of a millisecond (sim.resources): an I/O
    # costs its bytes over the bandwidth, not at least 1 ms. Off by default
    # (older scenarios keep their timing).
    disk_fractional_ms: bool = False


@dataclass(frozen=True, slots=True)
class NamespaceSpec:
    topics: int = 1
    partitions: int = 3
    groups: bool = True
    retention_ms: int = 0  # 0: the default (7 days); else retention.ms of every topic
    # The namespace's topics' cleanup.policy (compact: the log cleaner runs,
    # sim/log_cleaner.py), their segments' size in bytes (Kafka's
    # internal.segment.bytes, below segment.bytes' 1 MiB floor) and segment.ms
    # (0: the defaults). Retention and cleaning work on whole segments.
    cleanup_policy: str = "delete"
    segment_bytes: int = 0
    segment_ms: int = 0

    def topic_configs(self) -> dict[str, str]:
        configs = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms:
            configs["retention.ms"] = str(self.retention_ms)
        if self.segment_bytes:
            configs["internal.segment.bytes"] = str(self.segment_bytes)
        if self.segment_ms:
            configs["segment.ms"] = str(self.segment_ms)
        return configs


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    source: str
    target: str
    mode: str = ""
    latency_ms: int | None = None
    jitter_ms: int | None = None
    loss: float | None = None
    bandwidth_bytes_per_ms: int | None = None
    type: str = ""  # link | mirror; "" = [topology] link_type
    # MM2 settings, used when the edge runs as a mirror (sim.mirror_driver):
    sync_group_offsets: bool = _MM2.sync_group_offsets
    sync_group_offsets_interval_ms: int = _MM2.sync_group_offsets_interval_ms
    emit_checkpoints_interval_ms: int = _MM2.emit_checkpoints_interval_ms
    offset_lag_max: int = _MM2.offset_lag_max
    offset_flush_interval_ms: int = _MM2.offset_flush_interval_ms
    refresh_topics_interval_ms: int = _MM2.refresh_topics_interval_ms
    offset_syncs_topic_location: str = _MM2.offset_syncs_topic_location


@dataclass(frozen=True, slots=True)
class FaultSpec:
    at_ms: int
    kind: str
    side_a: tuple[str, ...] = ()
    side_b: tuple[str, ...] = ()
    node: str = ""
    bridge: str = ""
    duration_ms: int = 0
    latency_ms: int = 0
    permanent: bool = False
    topic: str = ""
    partition: int = 0
    records: int = 0
    loss: float = 0.0  # kind loss: the probability that a message is dropped
    worker: str = ""  # worker_*: a Connect worker of every mirror edge (w0, w1, ...)


@dataclass(frozen=True, slots=True)
class ActionSpec:
    at_ms: int
    kind: str
    cluster: str = ""
    link: str = ""
    force: bool = False
    bump_leader_epoch: bool = False
    source: str = ""
    target: str = ""
    prefixes: tuple[tuple[str, str], ...] = ()  # (local on target, remote on source)
    topic: str = ""
    partitions: int = 1
    mode: str = ""
    leader: str = ""  # attach: "local" or "remote" (which side leads the namespace)
    timeout_ms: int = 0  # reverse: how long to wait for the remote (0: 30 s)
    reserved: bool = False  # set_reserved: set (true) or clear (false)
    gap_policy: str = ""  # alter_link: the link's gap.policy (continue | stop)
    fetch_bound: str = ""  # alter_link: the link's fetch.bound (high-watermark | ...)
    failover_truncation: str = ""  # alter_link: the link's failover.truncation
    failback_reconciliation: str = ""  # alter_link: the link's failback.reconciliation
    partition: int = 0  # resume_partition: the partition of `topic`
    # crash_at: the checkpoint of a procedure (e.g. "reverse:detach-mappings#1")
    # at which `cluster` ("": the cluster running it) crashes for `down_ms`.
    point: str = ""
    down_ms: int = 2_000


@dataclass(frozen=True, slots=True)
class OperatorsSpec:
    """Operator moves and faults drawn at random (sim.operator_moves), from
    the run's seed: the swarm of the operator-mix scenario. 0 intervals:
    none drawn."""

    interval_ms: int = 0  # mean time between two operator moves
    fault_interval_ms: int = 0  # mean time between two drawn faults
    fault_duration_ms: int = 3_000  # mean length of a drawn fault
    start_ms: int = 1_000
    stop_ms: int = -1  # -1: 2 s before the safety phase ends


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    run: RunSpec = field(default_factory=RunSpec)
    topology: TopologySpec = field(default_factory=TopologySpec)
    network: NetworkSpec = field(default_factory=NetworkSpec)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    namespace: NamespaceSpec = field(default_factory=NamespaceSpec)
    edges: tuple[EdgeSpec, ...] = ()
    producers: tuple[ProducerSpec, ...] = ()
    consumers: tuple[ConsumerSpec, ...] = ()
    faults: tuple[FaultSpec, ...] = ()
    actions: tuple[ActionSpec, ...] = ()
    base_dir: str = ""
    scripts: tuple[ScriptSpec, ...] = ()
    operators: OperatorsSpec = field(default_factory=OperatorsSpec)
    connect: ConnectSettings = field(default_factory=ConnectSettings)


class FaultKind(enum.StrEnum):
    """A fault's kind (`[[faults]] kind`, and what the nemesis draws). A
    StrEnum: equal to its name in a scenario file."""

    SPLIT = "split"
    ONE_WAY = "one_way"
    BRIDGE = "bridge"
    ISOLATE = "isolate"
    CLOG = "clog"
    LOSS = "loss"
    HEAL = "heal"
    CRASH = "crash"
    RESTART = "restart"
    PAUSE = "pause"
    RESUME = "resume"
    UNCLEAN_ELECTION = "unclean_election"
    FORGE = "forge"
    STORAGE_REFUSAL = "storage_refusal"
    WORKER_CRASH = "worker_crash"
    WORKER_RESTART = "worker_restart"
    WORKER_PAUSE = "worker_pause"
    WORKER_ISOLATE = "worker_isolate"


class ActionKind(enum.StrEnum):
    """An operator action's kind (`[[actions]] kind`). A StrEnum: equal to
    its name in a scenario file."""

    SET_MODE = "set_mode"
    FAILOVER = "failover"
    DELETE_LINK = "delete_link"
    CREATE_LINK = "create_link"
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    ATTACH = "attach"
    DETACH = "detach"
    RECOVER = "recover"
    REVERSE = "reverse"
    SET_RESERVED = "set_reserved"
    MANUAL_REVERSE = "manual_reverse"
    RELINK = "relink"
    ALTER_LINK = "alter_link"
    RESUME_PARTITION = "resume_partition"
    CRASH_AT = "crash_at"


FAULT_KINDS: dict[str, tuple[str, ...]] = {
    # kind: keys it uses (besides at_ms and kind)
    "split": ("side_a", "side_b", "duration_ms"),
    "one_way": ("side_a", "side_b", "duration_ms"),
    "bridge": ("side_a", "side_b", "bridge", "duration_ms"),
    "isolate": ("node", "duration_ms"),
    "clog": ("side_a", "side_b", "latency_ms", "duration_ms"),
    "loss": ("side_a", "side_b", "loss", "duration_ms"),
    "heal": (),
    "crash": ("node", "duration_ms", "permanent"),
    "restart": ("node",),
    "pause": ("node", "duration_ms"),
    "resume": ("node",),
    "unclean_election": ("node", "topic", "partition", "records"),
    # An attacker replays the last call each link made to `node`, and sends
    # one without a session: both must be refused (link_sessions runs only).
    "forge": ("node",),
    # The node's storage refuses the appends of fetched records for
    # duration_ms (a full disk, a file-size limit, a read-only data dir).
    "storage_refusal": ("node", "duration_ms"),
    # A Connect worker (sim.connect_driver) of each mirror edge.
    "worker_crash": ("worker", "duration_ms", "permanent"),
    "worker_restart": ("worker",),
    "worker_pause": ("worker", "duration_ms"),
    "worker_isolate": ("worker", "duration_ms"),
}
assert set(WORKER_FAULTS) <= set(FAULT_KINDS)
assert set(FAULT_KINDS) == set(FaultKind)

# Kinds that were renamed, and what to write instead.
RENAMED_KINDS = {
    "partition": "'split' (a network split between two sides; 'partition' is a Kafka "
    "topic's partition)",
}

ACTION_KINDS: dict[str, tuple[str, ...]] = {
    # Operator actions (the procedures of linkd/core/procedures.py).
    "set_mode": ("cluster", "link", "mode"),
    "failover": ("cluster", "link", "force", "bump_leader_epoch"),
    "delete_link": ("cluster", "link"),
    "create_link": ("source", "target", "link", "prefixes"),
    "create_topic": ("cluster", "topic", "partitions"),
    "delete_topic": ("cluster", "topic"),
    "attach": ("cluster", "link", "prefixes", "leader"),  # topic namespaces [local, remote]
    "detach": ("cluster", "link", "prefixes"),  # the local prefix of each pair
    "recover": ("cluster", "link", "prefixes"),  # none: every mapping of the link
    "reverse": ("cluster", "link", "timeout_ms"),
    # The topic namespaces named by their local prefix (prefixes [[local, remote]]).
    "set_reserved": ("cluster", "prefixes", "reserved"),
    # KIP-986's reversal by hand, on the leader: reserve, wait for the remote,
    # detach, attach the other way, clear the new leader's reservation.
    "manual_reverse": ("cluster", "link", "prefixes"),
    # Re-point a follower to another source (KIP-986 after a failover): on
    # `cluster`, detach `prefixes` from the old `link`, create a link with no
    # mapping to `source`, then recover it with confirm (topics, and groups
    # when the namespace replicates them).
    "relink": ("cluster", "link", "source", "prefixes"),
    # ccr-admin alter-link --gap-policy and/or --fetch-bound, and
    # resume-partition (a follower partition stopped at a gap goes on from
    # the source's log start).
    "alter_link": (
        "cluster", "link", "gap_policy", "fetch_bound", "failover_truncation",
        "failback_reconciliation",
    ),
    "resume_partition": ("cluster", "link", "topic", "partition"),
    # Arms a crash mid-procedure: the next procedure that reaches checkpoint
    # `point` (linkd/core/requests.py Checkpoint) crashes `cluster` there ("":
    # the cluster running it), which restarts `down_ms` later.
    "crash_at": ("cluster", "point", "down_ms"),
}
assert set(ACTION_KINDS) == set(ActionKind)


# -- validation --------------------------------------------------------------------------


def _check_namespace(namespace: NamespaceSpec) -> None:
    try:
        validate_configs("[namespace]", namespace.topic_configs())
    except ClusterError as exc:
        raise ScenarioError(f"[namespace]: {exc.message}") from exc


def _convert(where: str, key: str, value: Any, default: Any, annotation: str) -> Any:
    bad = ScenarioError(f"{where}: {key} = {value!r} is not {annotation}")
    if "tuple[tuple[str, str]" in annotation:
        if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in value
        ):
            raise ScenarioError(f"{where}: {key} = {value!r} is not a list of [local, remote]")
        return tuple((str(a), str(b)) for a, b in value)
    if "tuple[str" in annotation:
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise ScenarioError(f"{where}: {key} = {value!r} is not a list of names")
        return tuple(value)
    if annotation.startswith("bool"):
        if not isinstance(value, bool):
            raise bad
        return value
    if annotation.startswith("int"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{where}: {key} = {value!r} is not an integer")
        if value < 0 and key not in ("stop_ms",):
            raise ScenarioError(f"{where}: {key} = {value!r} must be >= 0")
        return value
    if annotation.startswith("float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(f"{where}: {key} = {value!r} is not a number")
        if value < 0:
            raise ScenarioError(f"{where}: {key} = {value!r} must be >= 0")
        return float(value)
    if annotation.startswith("str"):
        if not isinstance(value, str):
            raise ScenarioError(f"{where}: {key} = {value!r} is not a string")
        return value
    del default
    raise bad


def _build(cls: Any, where: str, table: Any, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(table, dict):
        raise ScenarioError(f"{where}: expected a table, got {table!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in skip}
    unknown = sorted(k for k in table if k not in fields)
    if unknown:
        raise ScenarioError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(fields))})"
        )
    values = {}
    for key, value in table.items():
        values[key] = _convert(where, key, value, None, str(fields[key].type))
    try:
        return cls(**values)
    except TypeError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc


def parse(data: dict[str, Any], base_dir: str = "") -> Scenario:
    known = {
        "name",
        "description",
        "run",
        "topology",
        "network",
        "cluster",
        "namespace",
        "edges",
        "workloads",
        "faults",
        "actions",
        "operators",
        "connect",
    }
    unknown = sorted(k for k in data if k not in known)
    if unknown:
        raise ScenarioError(
            f"scenario: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ScenarioError("scenario: name must be a non-empty string")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ScenarioError(f"scenario: description = {description!r} is not a string")
    run = _build(RunSpec, "[run]", data.get("run", {}))
    _check_run(run, "[run]")
    topo_raw = dict(data.get("topology", {}))
    clusters = topo_raw.get("clusters", 2)
    if isinstance(clusters, int) and not isinstance(clusters, bool):
        if not 1 <= clusters <= 26:
            raise ScenarioError(f"[topology]: clusters = {clusters} must be within 1..26")
        topo_raw["clusters"] = cluster_names(clusters)
    topology = _build(TopologySpec, "[topology]", topo_raw)
    if topology.kind not in KINDS:
        raise ScenarioError(
            f"[topology]: kind = {topology.kind!r} is not one of {', '.join(KINDS)}"
        )
    if topology.mode not in MODES:
        raise ScenarioError(f"[topology]: mode = {topology.mode!r} is not one of {MODES}")
    _check_policies(
        "[topology]:", topology.fetch_bound, topology.failover_truncation, topology.gap_policy,
        topology.failback_reconciliation,
    )
    for c in topology.clusters:
        if not c or not all(ch.isalnum() or ch in "_" for ch in c):
            raise ScenarioError(f"[topology]: cluster name {c!r} must be letters, digits or _")
    if topology.kind == "file":
        if not topology.file:
            raise ScenarioError("[topology]: kind = 'file' needs file = '<graph file>'")
        path = Path(base_dir) / topology.file if base_dir else Path(topology.file)
        topology = dataclasses.replace(topology, file=str(path))
    network = _build(NetworkSpec, "[network]", data.get("network", {}))
    if network.loss > 1:
        raise ScenarioError(f"[network]: loss = {network.loss} must be within [0, 1]")
    cluster = _build(ClusterSpec, "[cluster]", data.get("cluster", {}))
    namespace = _build(NamespaceSpec, "[namespace]", data.get("namespace", {}))
    _check_namespace(namespace)
    edges = tuple(
        _build(EdgeSpec, f"[[edges]] #{i + 1}", e) for i, e in enumerate(data.get("edges", []))
    )
    producers: list[ProducerSpec] = []
    consumers: list[ConsumerSpec] = []
    scripts: list[ScriptSpec] = []
    for i, w in enumerate(data.get("workloads", [])):
        where = f"[[workloads]] #{i + 1}"
        if not isinstance(w, dict):
            raise ScenarioError(f"{where}: expected a table")
        w = dict(w)
        kind = w.pop("kind", None)
        w.setdefault("name", f"{kind}-{i + 1}")
        if kind == "producer":
            producers.append(_build(ProducerSpec, where, w, skip=("bulk",)))
        elif kind == "bulk_producer":
            w["bulk"] = True
            producers.append(_build(ProducerSpec, where, w))
        elif kind == "consumer":
            consumers.append(_build(ConsumerSpec, where, w))
        elif kind == "script":
            scripts.append(_script(where, w))
        else:
            raise ScenarioError(
                f"{where}: kind = {kind!r} is not one of producer, bulk_producer, consumer, script"
            )
    faults = tuple(_checked_kind(FaultSpec, FAULT_KINDS, "[[faults]]", data.get("faults", [])))
    actions = tuple(_checked_kind(ActionSpec, ACTION_KINDS, "[[actions]]", data.get("actions", [])))
    operators = _build(OperatorsSpec, "[operators]", data.get("operators", {}))
    connect = _build(ConnectSettings, "[connect]", data.get("connect", {}))
    scenario = Scenario(
        name,
        description,
        run,
        topology,
        network,
        cluster,
        namespace,
        edges,
        tuple(producers),
        tuple(consumers),
        faults,
        actions,
        base_dir,
        scripts=tuple(scripts),
        operators=operators,
        connect=connect,
    )
    _check_names(scenario)
    _check_connect(scenario.connect, "[connect]")
    for i, f in enumerate(scenario.faults):
        names = {f"w{n}" for n in range(scenario.connect.workers)}
        if f.kind in WORKER_FAULTS and f.worker not in names:
            raise ScenarioError(
                f"[[faults]] #{i + 1}: worker = {f.worker!r} is not a worker of [connect] "
                f"(workers = {scenario.connect.workers}: w0..w{scenario.connect.workers - 1})"
            )
    _check_link_types(scenario)
    _check_link_sessions(scenario)
    return scenario


def _check_run(run: RunSpec, where: str) -> None:
    if run.fetch_max_wait_ms > LONGEST_FETCH_WAIT_MS:
        raise ScenarioError(
            f"{where}: fetch_max_wait_ms = {run.fetch_max_wait_ms} must be at most "
            f"{LONGEST_FETCH_WAIT_MS}: a source holds a replica fetch no longer than that"
        )


def _check_connect(c: ConnectSettings, where: str) -> None:
    try:
        ConnectProtocol.parse(c.protocol)
    except ConnectProtocolError as exc:
        raise ScenarioError(f"{where}: protocol: {exc}") from exc
    if c.workers > 26:
        raise ScenarioError(f"{where}: workers = {c.workers} must be within 0..26")
    for key in ("tasks_max", "session_timeout_ms", "rebalance_ms"):
        if getattr(c, key) < 1:
            raise ScenarioError(f"{where}: {key} = {getattr(c, key)} must be >= 1")


def _check_link_sessions(scenario: Scenario) -> None:
    """Credentials and the forge fault mean something only with sessions."""
    if scenario.cluster.link_sessions:
        return
    if scenario.cluster.link_credentials:
        raise ScenarioError("[cluster]: link_credentials needs link_sessions = true")
    if any(f.kind == FaultKind.FORGE for f in scenario.faults):
        raise ScenarioError("[[faults]]: kind = 'forge' needs [cluster] link_sessions = true")


def _script(where: str, w: dict[str, Any]) -> ScriptSpec:
    """A `script` workload: name and sends (an array of tables)."""
    unknown = sorted(k for k in w if k not in ("name", "sends"))
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r} (known: name, sends)")
    name = _convert(where, "name", w["name"], None, "str")
    raw = w.get("sends", [])
    if not isinstance(raw, list):
        raise ScenarioError(f"{where}: sends = {raw!r} is not an array of tables")
    sends = tuple(_build(ScriptSend, f"{where} sends #{j + 1}", item) for j, item in enumerate(raw))
    first: dict[str, ScriptSend] = {}
    for j, send in enumerate(sends):
        if not send.txn:
            continue
        head = first.setdefault(send.txn, send)
        if (send.cluster, send.topic) != (head.cluster, head.topic):
            raise ScenarioError(
                f"{where} sends #{j + 1}: transaction {send.txn!r} names "
                f"{send.cluster}/{send.topic}, its first record {head.cluster}/{head.topic}"
            )
    return ScriptSpec(name, sends)


def _check_alter(where: str, a: ActionSpec) -> None:
    """alter_link: gap_policy, fetch_bound, failover_truncation and/or
    failback_reconciliation, each a value the link takes."""
    if not (a.gap_policy or a.fetch_bound or a.failover_truncation or a.failback_reconciliation):
        raise ScenarioError(
            f"{where}: alter_link needs gap_policy, fetch_bound, failover_truncation or "
            "failback_reconciliation"
        )
    _check_policies(
        f"{where}:", a.fetch_bound, a.failover_truncation, a.gap_policy,
        a.failback_reconciliation,
    )


def _check_one_of(what: str, value: str, choices: tuple[str, ...]) -> None:
    """A link policy's value in a scenario: one of `choices`, or "" (unset)."""
    if value and value not in choices:
        raise ScenarioError(f"{what} = {value!r} is not one of {', '.join(choices)}")


def _check_policies(
    where: str,
    fetch_bound: str,
    failover_truncation: str,
    gap_policy: str,
    failback_reconciliation: str = "",
) -> None:
    """The link policies a topology, a parameter or an alter_link sets."""
    _check_one_of(f"{where} fetch_bound", fetch_bound, FETCH_BOUNDS)
    _check_one_of(f"{where} failover_truncation", failover_truncation, FAILOVER_TRUNCATIONS)
    _check_one_of(f"{where} gap_policy", gap_policy, GAP_POLICIES)
    _check_one_of(
        f"{where} failback_reconciliation", failback_reconciliation, FAILBACK_RECONCILIATIONS
    )


def _checked_kind(cls: Any, kinds: dict[str, tuple[str, ...]], where: str, items: Any) -> list[Any]:
    out = []
    if not isinstance(items, list):
        raise ScenarioError(f"{where}: expected an array of tables")
    for i, item in enumerate(items):
        here = f"{where} #{i + 1}"
        if not isinstance(item, dict):
            raise ScenarioError(f"{here}: expected a table")
        kind = item.get("kind")
        if kind in RENAMED_KINDS and kind not in kinds:
            raise ScenarioError(f"{here}: kind = {kind!r} is now {RENAMED_KINDS[kind]}")
        if kind not in kinds:
            raise ScenarioError(f"{here}: kind = {kind!r} is not one of {', '.join(kinds)}")
        if "at_ms" not in item:
            raise ScenarioError(f"{here}: at_ms is required")
        allowed = {"at_ms", "kind", *kinds[kind]}
        extra = sorted(k for k in item if k not in allowed)
        if extra:
            raise ScenarioError(
                f"{here}: key {extra[0]!r} does not apply to kind {kind!r} "
                f"(it takes: {', '.join(sorted(allowed))})"
            )
        out.append(_build(cls, here, item))
    return out


def _check_link_types(s: Scenario) -> None:
    """Link types and the MM2 settings of edges that run as mirrors."""
    if s.topology.link_type not in LINK_TYPES:
        types = ", ".join(LINK_TYPES)
        raise ScenarioError(
            f"[topology]: link_type = {s.topology.link_type!r} is not one of {types}"
        )
    for i, e in enumerate(s.edges):
        where = f"[[edges]] #{i + 1} ({e.source}->{e.target})"
        if e.type not in ("", *LINK_TYPES):
            raise ScenarioError(f"{where}: type = {e.type!r} is not one of {', '.join(LINK_TYPES)}")
        for key in (
            "sync_group_offsets_interval_ms",
            "emit_checkpoints_interval_ms",
            "offset_flush_interval_ms",
            "refresh_topics_interval_ms",
        ):
            if getattr(e, key) < 1:
                raise ScenarioError(f"{where}: {key} = {getattr(e, key)} must be >= 1")
        if e.offset_syncs_topic_location not in ("source", "target"):
            raise ScenarioError(
                f"{where}: offset_syncs_topic_location = {e.offset_syncs_topic_location!r} "
                "is not one of source, target"
            )
        mode = e.mode or s.topology.mode
        if (e.type or s.topology.link_type) == "mirror" and mode == LinkMode.SYNC:
            raise ScenarioError(
                f"{where}: a mirror (MirrorMaker 2) has no SYNC mode; use mode = 'ASYNC' or "
                "type = 'link'"
            )
    if s.topology.link_type == "mirror" and s.topology.mode == LinkMode.SYNC:
        raise ScenarioError(
            "[topology]: link_type = 'mirror' with mode = 'SYNC': a mirror (MirrorMaker 2) "
            "has no SYNC mode"
        )


def _check_names(s: Scenario) -> None:
    clusters = set(s.topology.clusters)
    if s.topology.kind == "file":
        return  # cluster names come from the graph file

    def known(where: str, key: str, name: str) -> None:
        if name and name not in clusters:
            raise ScenarioError(
                f"{where}: {key} = {name!r} is not a cluster of the topology "
                f"({', '.join(sorted(clusters))})"
            )

    for i, e in enumerate(s.edges):
        known(f"[[edges]] #{i + 1}", "source", e.source)
        known(f"[[edges]] #{i + 1}", "target", e.target)
        if e.mode not in ("", *MODES):
            raise ScenarioError(f"[[edges]] #{i + 1}: mode = {e.mode!r} is not one of {MODES}")
    for i, a in enumerate(s.actions):
        if a.kind == ActionKind.SET_MODE and a.mode not in MODES:
            raise ScenarioError(f"[[actions]] #{i + 1}: mode = {a.mode!r} is not one of {MODES}")
        if a.kind == ActionKind.ATTACH and a.leader not in (Leader.LOCAL, Leader.REMOTE):
            raise ScenarioError(
                f"[[actions]] #{i + 1}: leader = {a.leader!r} is not one of local, remote"
            )
        if a.kind in (ActionKind.ATTACH, ActionKind.DETACH, ActionKind.RELINK) and not a.prefixes:
            raise ScenarioError(f"[[actions]] #{i + 1}: {a.kind} needs prefixes")
        if a.kind == ActionKind.ALTER_LINK:
            _check_alter(f"[[actions]] #{i + 1}", a)
        if a.kind == ActionKind.RESUME_PARTITION and not a.topic:
            raise ScenarioError(f"[[actions]] #{i + 1}: resume_partition needs topic")
    for i, f in enumerate(s.faults):
        if f.kind == FaultKind.LOSS and f.loss > 1:
            raise ScenarioError(f"[[faults]] #{i + 1}: loss = {f.loss} must be within [0, 1]")
    for script in s.scripts:
        for send in script.sends:
            known(f"workload {script.name!r}", "cluster", send.cluster)
    workloads: list[tuple[str, str, str]] = [
        (w.name, w.cluster, w.failover_to) for w in s.producers
    ] + [(w.name, w.cluster, w.failover_to) for w in s.consumers]
    for wname, wcluster, wfailover in workloads:
        known(f"workload {wname!r}", "cluster", wcluster)
        known(f"workload {wname!r}", "failover_to", wfailover)
    for i, f in enumerate(s.faults):
        for n in [f.node, f.bridge, *f.side_a, *f.side_b]:
            known(f"[[faults]] #{i + 1}", "node", n)
    for i, a in enumerate(s.actions):
        for key, n in (("cluster", a.cluster), ("source", a.source), ("target", a.target)):
            known(f"[[actions]] #{i + 1}", key, n)


# -- loading and parameters ----------------------------------------------------------------


def shipped() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml"))}


def load(name_or_path: str) -> Scenario:
    """A shipped scenario by name, or a TOML file by path."""
    path = shipped().get(name_or_path)
    if path is None:
        path = Path(name_or_path)
        if not path.is_file():
            raise ScenarioError(
                f"no scenario {name_or_path!r}: not a shipped name "
                f"({', '.join(shipped())}) nor a file"
            )
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path.name}: {exc}") from exc
    return parse(data, str(path.parent))


# name -> (table, key): what `apply_params` may override.
PARAMS: dict[str, tuple[str, str]] = {
    "mode": ("topology", "mode"),
    "fetch_bound": ("topology", "fetch_bound"),
    "failover_truncation": ("topology", "failover_truncation"),
    "gap_policy": ("topology", "gap_policy"),
    "failback_reconciliation": ("topology", "failback_reconciliation"),
    "topology": ("topology", "kind"),
    "clusters": ("topology", "clusters"),
    "duration_ms": ("run", "duration_ms"),
    "liveness_ms": ("run", "liveness_ms"),
    "tick_interval_ms": ("run", "tick_interval_ms"),
    "fetch_max_wait_ms": ("run", "fetch_max_wait_ms"),
    "fetch_sessions": ("run", "fetch_sessions"),
    "record_bytes": ("run", "record_bytes"),
    "undo_fix": ("run", "undo_fix"),
    "link_latency_ms": ("network", "latency_ms"),
    "link_jitter_ms": ("network", "jitter_ms"),
    "link_loss": ("network", "loss"),
    "link_bandwidth_bytes_per_ms": ("network", "bandwidth_bytes_per_ms"),
    "disk_bytes_per_ms": ("cluster", "disk_bytes_per_ms"),
    "disk_fractional_ms": ("cluster", "disk_fractional_ms"),
    "replication_limit_bytes_per_s": ("cluster", "replication_limit_bytes_per_s"),
    "session_timeout_ms": ("cluster", "session_timeout_ms"),
    "lag_max_ms": ("cluster", "lag_max_ms"),
    # Link sessions, and the link credential every cluster requires (the
    # operator search then also rotates credentials on busy links).
    "link_sessions": ("cluster", "link_sessions"),
    "link_credentials": ("cluster", "link_credentials"),
    "topics": ("namespace", "topics"),
    "partitions": ("namespace", "partitions"),
    "retention_ms": ("namespace", "retention_ms"),
    "segment_ms": ("namespace", "segment_ms"),
    "retention_check_interval_ms": ("cluster", "retention_check_interval_ms"),
    # Every fault's duration (an outage's length, for a sweep).
    "outage_ms": ("faults", "duration_ms"),
    # The records every unclean_election fault takes back (its depth).
    "unclean_records": ("faults", "records"),
    "cleanup_policy": ("namespace", "cleanup_policy"),
    "producer_rate_per_s": ("workloads", "rate_per_s"),
    "transactional_fraction": ("workloads", "transactional_fraction"),
    "txn_open_ms": ("workloads", "txn_open_ms"),
    # link | mirror, for every edge (overrides each edge's own type).
    "link_type": ("topology", "link_type"),
    # Kafka Connect deployment of mirror edges ([connect]).
    "connect_workers": ("connect", "workers"),
    "connect_protocol": ("connect", "protocol"),
    "tasks_max": ("connect", "tasks_max"),
    "scheduled_rebalance_max_delay_ms": ("connect", "scheduled_rebalance_max_delay_ms"),
    # MM2 settings of every [[edges]] entry (used where the edge runs as a mirror).
    "offset_lag_max": ("edges", "offset_lag_max"),
    "emit_checkpoints_interval_ms": ("edges", "emit_checkpoints_interval_ms"),
    "sync_group_offsets_interval_ms": ("edges", "sync_group_offsets_interval_ms"),
    # Every consumer workload.
    "consumer_poll_interval_ms": ("consumers", "poll_interval_ms"),
    "consumer_lag_records": ("consumers", "lag_records"),
    # The time of every `relink` action (when a follower is re-pointed).
    "relink_at_ms": ("actions", "relink"),
}
# The parameters that set a path's network for every link, edges' own values included.
EDGE_NETWORK_PARAMS = frozenset(
    {"link_latency_ms", "link_jitter_ms", "link_loss", "link_bandwidth_bytes_per_ms"}
)

# Per-edge network parameters: edge_<SOURCE>_<TARGET>_<key> sets `key` of the
# [[edges]] entry from SOURCE to TARGET (which must exist), e.g.
# edge_A_B_latency_ms = 150. Cluster names here are letters and digits.
EDGE_PARAM = re.compile(
    r"^edge_([A-Za-z0-9]+)_([A-Za-z0-9]+)_(latency_ms|jitter_ms|loss|bandwidth_bytes_per_ms)$"
)


def known_param(name: str) -> bool:
    """A name `apply_params` accepts: one of PARAMS, or a per-edge parameter."""
    return name in PARAMS or EDGE_PARAM.match(name) is not None


def _apply_edge_param(s: Scenario, name: str, value: Any) -> Scenario:
    """edge_<SOURCE>_<TARGET>_<key>: that edge's network key."""
    match = EDGE_PARAM.match(name)
    assert match is not None
    source, target, key = match.groups()
    if not any((e.source, e.target) == (source, target) for e in s.edges):
        listed = ", ".join(f"{e.source}->{e.target}" for e in s.edges) or "none"
        raise ScenarioError(
            f"parameter {name}: the scenario has no [[edges]] entry {source}->{target} "
            f"(its edges: {listed})"
        )
    annotation = "float" if key == "loss" else "int"
    converted = _convert(f"parameter {name}", key, value, None, annotation)
    if key == "loss" and converted > 1:
        raise ScenarioError(f"parameter {name} = {value!r} must be within [0, 1]")
    return dataclasses.replace(
        s,
        edges=tuple(
            dataclasses.replace(e, **{key: converted})
            if (e.source, e.target) == (source, target)
            else e
            for e in s.edges
        ),
    )


def _apply_to_items(s: Scenario, name: str, table: str, key: str, value: Any) -> Scenario:
    """A parameter that sets one key of every [[edges]] entry, every consumer,
    or the time of every action of one kind; refused when there is none."""
    if table == "edges":
        items: tuple[Any, ...] = s.edges
        field_name, what = key, "[[edges]] entries"
    elif table == "consumers":
        items, field_name, what = s.consumers, key, "consumer workloads"
    else:
        items = tuple(a for a in s.actions if a.kind == key)
        field_name, what = "at_ms", f"{key!r} actions"
    if not items:
        raise ScenarioError(f"parameter {name}: the scenario has no {what} to apply it to")
    annotation = str(next(f.type for f in dataclasses.fields(items[0]) if f.name == field_name))
    converted = _convert(f"parameter {name}", field_name, value, None, annotation)

    def changed(item: Any) -> Any:
        return dataclasses.replace(item, **{field_name: converted})

    if table == "edges":
        return dataclasses.replace(s, edges=tuple(changed(e) for e in s.edges))
    if table == "consumers":
        return dataclasses.replace(s, consumers=tuple(changed(c) for c in s.consumers))
    return dataclasses.replace(
        s, actions=tuple(changed(a) if a.kind == key else a for a in s.actions)
    )


def apply_params(s: Scenario, params: dict[str, Any] | None) -> Scenario:
    """Overrides scenario values by flat name (see PARAMS); unknown names raise."""
    if not params:
        return s
    unknown = sorted(k for k in params if not known_param(k))
    if unknown:
        raise ScenarioError(
            f"unknown parameter(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(PARAMS))}, and edge_<SOURCE>_<TARGET>_<key> "
            "(key: latency_ms, jitter_ms, loss, bandwidth_bytes_per_ms)"
        )
    data: dict[str, Any] = {}
    for name in sorted(params):
        value = params[name]
        if name not in PARAMS:
            continue  # one edge's: after the link_* parameters (below)
        table, key = PARAMS[name]
        if table in ("edges", "consumers", "actions"):
            s = _apply_to_items(s, name, table, key, value)
            continue
        if name == "clusters":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 26:
                raise ScenarioError(f"parameter clusters = {value!r} must be an integer in 1..26")
            value = cluster_names(value)
        if name == "unclean_records":
            if not any(f.kind == FaultKind.UNCLEAN_ELECTION for f in s.faults):
                raise ScenarioError(
                    f"parameter {name}: the scenario has no unclean_election faults to apply it to"
                )
            records = _convert(f"parameter {name}", key, value, None, "int")
            s = dataclasses.replace(
                s,
                faults=tuple(
                    dataclasses.replace(f, records=records)
                    if f.kind == FaultKind.UNCLEAN_ELECTION
                    else f
                    for f in s.faults
                ),
            )
            continue
        if table == "faults":
            ms = _convert(f"parameter {name}", key, value, None, "int")
            s = dataclasses.replace(
                s, faults=tuple(dataclasses.replace(f, duration_ms=ms) for f in s.faults)
            )
            continue
        if table == "workloads":
            s = dataclasses.replace(
                s,
                producers=tuple(
                    dataclasses.replace(
                        p,
                        **{
                            key: _convert(
                                f"parameter {name}", key, value, None,
                                "int" if key == "txn_open_ms" else "float",
                            )
                        },
                    )
                    if not p.bulk
                    else p
                    for p in s.producers
                ),
            )
            continue
        data.setdefault(table, {})[key] = value
    for table, changes in sorted(data.items()):
        current = getattr(s, table)
        merged = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
        merged.update(changes)
        if table == "topology":
            merged["clusters"] = list(merged["clusters"])
        cls = type(current)
        new = _build(cls, f"parameters ({table})", merged)
        if table == "topology":
            if new.kind not in KINDS:
                raise ScenarioError(f"parameter topology = {new.kind!r} is not one of {KINDS}")
            if new.mode not in MODES:
                raise ScenarioError(f"parameter mode = {new.mode!r} is not one of {MODES}")
            if new.link_type not in LINK_TYPES:
                raise ScenarioError(
                    f"parameter link_type = {new.link_type!r} is not one of {', '.join(LINK_TYPES)}"
                )
            _check_policies(
                "parameter", new.fetch_bound, new.failover_truncation, new.gap_policy,
                new.failback_reconciliation,
            )
        if table == "connect":
            _check_connect(new, f"parameters ({table})")
        if table == "run":
            _check_run(new, f"parameters ({table})")
        if table == "namespace":
            _check_namespace(new)
        s = dataclasses.replace(s, **{table: new})
    if "link_type" in params:
        s = dataclasses.replace(s, edges=tuple(dataclasses.replace(e, type="") for e in s.edges))
    # A `link_*` network parameter is every link's value: an edge's own value
    # gives way to it (otherwise a sweep over link_latency_ms would vary nothing
    # on a scenario whose edges set their latency, and say nothing of it).
    per_edge: dict[str, Any] = {
        PARAMS[name][1]: None for name in params if name in EDGE_NETWORK_PARAMS
    }
    if per_edge:
        s = dataclasses.replace(
            s, edges=tuple(dataclasses.replace(e, **per_edge) for e in s.edges)
        )
    # One edge's own value, named by its ends, over any link_* parameter.
    for name in sorted(params):
        if name not in PARAMS:
            s = _apply_edge_param(s, name, params[name])
    _check_link_types(s)
    return s
