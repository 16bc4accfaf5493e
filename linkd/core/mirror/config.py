"""`mm2.properties` -> structured mirror flows, with MirrorMaker 2's precedence.

Rules (Kafka's MirrorMakerConfig.clusterPairs / clusterProps / workerConfig /
connectorBaseConfig, MirrorSourceConfig, MirrorCheckpointConfig,
MirrorHeartbeatConfig, MirrorClientConfig, ConfigDef parsing):
- `clusters = A, B` lists the aliases (required). Every alias needs
  `<alias>.bootstrap.servers` (or a top-level `bootstrap.servers`).
- A flow `A->B` replicates when `A->B.enabled = true` (default false). A pair
  also exists, without replicating, when heartbeats are enabled for it (the
  default): its heartbeat task writes into B (MirrorMakerConfig.clusterPairs).
- Connector properties (filters, policy, intervals, offset.lag.max, ...):
  `A->B.<key>` beats the top-level `<key>`, which beats MM2's default. A
  cluster-level `A.<key>` does NOT set a connector property (MM2 passes it only
  to clients and workers); it is reported.
- Client properties (bootstrap.servers, security.protocol, ssl.*, sasl.*,
  producer.*, consumer.*, admin.*): `A.<key>` beats the top-level `<key>`.
- Worker properties of the Connect worker writing into cluster B
  (`offset.flush.interval.ms`, default 60 000; `exactly.once.source.support`,
  default disabled): only `B.<key>` counts; a top-level one is ignored by MM2 and
  reported.
- Deprecated names (`topics.blacklist`, `groups.blacklist`,
  `config.properties.blacklist`) still work, the new name wins when both are set
  (ConfigUtils.translateDeprecatedConfigs); their use is reported.
- Values are parsed as Connect's ConfigDef does: booleans "true"/"false" (any
  case), integers in decimal, lists split on commas and trimmed, strings
  trimmed. An invalid value raises MirrorConfigError naming key, line and value.
- Every key this model does not know is REPORTED as a ConfigWarning with its
  line, never silently dropped; so are duplicate keys (the last wins).
- `replication.policy.class` accepts Kafka's DefaultReplicationPolicy and
  IdentityReplicationPolicy (fully qualified); filter classes only Kafka's
  defaults. Anything else is an error: this model cannot load Java classes.

Theory of operation: `parse_mm2_properties(text)` reads the file with
properties.parse_properties, classifies each key (top-level, cluster, flow),
validates every value where it appears, then resolves one MirrorFlow per pair.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from linkd.core.mirror.exactly_once import (
    ExactlyOnceRequirement,
    ExactlyOnceSourceSupport,
    TransactionBoundary,
)
from linkd.core.mirror.filters import (
    CONFIG_PROPERTIES_EXCLUDE_DEFAULT,
    GROUPS_EXCLUDE_DEFAULT,
    GROUPS_INCLUDE_DEFAULT,
    TOPICS_EXCLUDE_DEFAULT,
    TOPICS_INCLUDE_DEFAULT,
    ConfigPropertyFilter,
    GroupFilter,
    PatternList,
    TopicFilter,
    parse_list,
)
from linkd.core.mirror.policy import (
    DEFAULT_POLICY_CLASS,
    IDENTITY_POLICY_CLASS,
    PolicyKind,
    ReplicationPolicy,
)
from linkd.core.mirror.properties import PropertiesSyntaxError, PropertyLine, parse_properties

__all__ = [
    "ClusterConfig",
    "ConfigWarning",
    "MirrorConfigError",
    "MirrorFlow",
    "MirrorMakerConfig",
    "parse_mm2_properties",
]

_T = TypeVar("_T")
FLOW_ARROW = "->"
MAX_CLUSTERS = 64  # n clusters give n*(n-1) pairs; a bound keeps that small


class MirrorConfigError(ValueError):
    """An invalid mm2.properties: names the key, the line and the value."""

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        line: int | None = None,
        value: str | None = None,
    ) -> None:
        where = []
        if key is not None:
            where.append(f"property {key!r}")
        if line is not None:
            where.append(f"line {line}")
        if value is not None:
            where.append(f"value {value!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.key = key
        self.line = line
        self.value = value


@dataclass(frozen=True, slots=True, order=True)
class ConfigWarning:
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.key}: {self.message}"


# -- value kinds ---------------------------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_JAVA_LONG_MAX = (1 << 63) - 1


def _parse_bool(raw: str) -> bool:
    v = raw.strip().lower()
    if v == "true":
        return True
    if v == "false":
        return False
    raise ValueError("expected true or false")


def _int_parser(minimum: int | None, forbidden: tuple[int, ...] = ()) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        v = raw.strip()
        if not _INT_RE.fullmatch(v):
            raise ValueError("expected a whole number")
        n = int(v)
        if not -_JAVA_LONG_MAX - 1 <= n <= _JAVA_LONG_MAX:
            raise ValueError("out of range for a 64-bit integer")
        if minimum is not None and n < minimum:
            raise ValueError(f"must be at least {minimum}")
        if n in forbidden:
            raise ValueError(f"must not be {n}")
        return n

    return parse


def _choice_parser(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip().lower()
        for c in choices:
            if c.lower() == v:
                return c
        raise ValueError(f"expected one of {', '.join(choices)}")

    return parse


def _string(raw: str) -> str:
    return raw.strip()


def _non_empty(raw: str) -> str:
    v = raw.strip()
    if not v:
        raise ValueError("must not be empty")
    return v


def _pattern_list(raw: str) -> PatternList:
    try:
        return PatternList.parse(raw)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from exc


def _class_parser(*classes: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        v = raw.strip()
        if v not in classes:
            raise ValueError(f"supported classes: {', '.join(classes)}")
        return v

    return parse


@dataclass(frozen=True, slots=True)
class _Spec:
    parse: Callable[[str], object]
    default: str | None


_BOOL = _parse_bool
_INTERVAL = _int_parser(1)
_NON_NEGATIVE = _int_parser(0)
_REPLICATION_FACTOR = _int_parser(-1, forbidden=(0,))

_CONNECTOR_SPECS: dict[str, _Spec] = {
    "enabled": _Spec(_BOOL, "false"),
    "topics": _Spec(_pattern_list, TOPICS_INCLUDE_DEFAULT),
    "topics.exclude": _Spec(_pattern_list, TOPICS_EXCLUDE_DEFAULT),
    "topics.blacklist": _Spec(_pattern_list, None),
    "groups": _Spec(_pattern_list, GROUPS_INCLUDE_DEFAULT),
    "groups.exclude": _Spec(_pattern_list, GROUPS_EXCLUDE_DEFAULT),
    "groups.blacklist": _Spec(_pattern_list, None),
    "config.properties.exclude": _Spec(_pattern_list, CONFIG_PROPERTIES_EXCLUDE_DEFAULT),
    "config.properties.blacklist": _Spec(_pattern_list, None),
    "use.defaults.from": _Spec(_choice_parser(("target", "source")), "target"),
    "topic.filter.class": _Spec(
        _class_parser("org.apache.kafka.connect.mirror.DefaultTopicFilter"), None
    ),
    "group.filter.class": _Spec(
        _class_parser("org.apache.kafka.connect.mirror.DefaultGroupFilter"), None
    ),
    "config.property.filter.class": _Spec(
        _class_parser("org.apache.kafka.connect.mirror.DefaultConfigPropertyFilter"), None
    ),
    "replication.policy.class": _Spec(
        _class_parser(DEFAULT_POLICY_CLASS, IDENTITY_POLICY_CLASS), DEFAULT_POLICY_CLASS
    ),
    "replication.policy.separator": _Spec(_non_empty, "."),
    "replication.policy.internal.topic.separator.enabled": _Spec(_BOOL, "true"),
    "default.replication.policy.heartbeats.topic.name": _Spec(_non_empty, "heartbeats"),
    "emit.heartbeats.enabled": _Spec(_BOOL, "true"),
    "emit.heartbeats.interval.seconds": _Spec(_INTERVAL, "1"),
    "emit.checkpoints.enabled": _Spec(_BOOL, "true"),
    "emit.checkpoints.interval.seconds": _Spec(_INTERVAL, "60"),
    "sync.group.offsets.enabled": _Spec(_BOOL, "false"),
    "sync.group.offsets.interval.seconds": _Spec(_INTERVAL, "60"),
    "refresh.topics.enabled": _Spec(_BOOL, "true"),
    "refresh.topics.interval.seconds": _Spec(_INTERVAL, "600"),
    "refresh.groups.enabled": _Spec(_BOOL, "true"),
    "refresh.groups.interval.seconds": _Spec(_INTERVAL, "600"),
    "sync.topic.configs.enabled": _Spec(_BOOL, "true"),
    "sync.topic.configs.interval.seconds": _Spec(_INTERVAL, "600"),
    "sync.topic.acls.enabled": _Spec(_BOOL, "true"),
    "sync.topic.acls.interval.seconds": _Spec(_INTERVAL, "600"),
    "replication.factor": _Spec(_REPLICATION_FACTOR, "2"),
    "offset-syncs.topic.replication.factor": _Spec(_REPLICATION_FACTOR, "3"),
    "checkpoints.topic.replication.factor": _Spec(_REPLICATION_FACTOR, "3"),
    "heartbeats.topic.replication.factor": _Spec(_REPLICATION_FACTOR, "3"),
    "offset-syncs.topic.location": _Spec(_choice_parser(("source", "target")), "source"),
    "emit.offset-syncs.enabled": _Spec(_BOOL, "true"),
    "offset.lag.max": _Spec(_NON_NEGATIVE, "100"),
    "consumer.poll.timeout.ms": _Spec(_NON_NEGATIVE, "1000"),
    "admin.timeout.ms": _Spec(_NON_NEGATIVE, "60000"),
    "exactly.once.support": _Spec(_choice_parser(("requested", "required")), "requested"),
    "transaction.boundary": _Spec(_choice_parser(("poll", "interval")), "poll"),
    "transaction.boundary.interval.ms": _Spec(_NON_NEGATIVE, None),
    "tasks.max": _Spec(_int_parser(1), "1"),
    "add.source.alias.to.metrics": _Spec(_BOOL, "false"),
    "use.incremental.alter.configs": _Spec(
        _choice_parser(("requested", "required", "never")), "requested"
    ),
}
_DEPRECATED = {
    "topics.blacklist": "topics.exclude",
    "groups.blacklist": "groups.exclude",
    "config.properties.blacklist": "config.properties.exclude",
}
_CLIENT_SPECS: dict[str, _Spec] = {
    "bootstrap.servers": _Spec(_non_empty, None),
    "security.protocol": _Spec(
        _choice_parser(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")), "PLAINTEXT"
    ),
}
_CLIENT_PREFIXES = ("ssl.", "sasl.", "producer.", "consumer.", "admin.")
_WORKER_SPECS: dict[str, _Spec] = {
    "offset.flush.interval.ms": _Spec(_int_parser(1), "60000"),
    "exactly.once.source.support": _Spec(
        _choice_parser(("disabled", "preparing", "enabled")), "disabled"
    ),
}
_WORKER_PASS_THROUGH = (
    "group.id",
    "client.id",
    "offset.flush.timeout.ms",
    "scheduled.rebalance.max.delay.ms",
)
_WORKER_PREFIXES = (
    "offset.storage",
    "config.storage",
    "status.storage",
    "key.converter",
    "value.converter",
    "header.converter",
    "task",
    "worker",
)
_TOP_LEVEL_SPECS: dict[str, _Spec] = {
    "clusters": _Spec(_string, None),
    "dedicated.mode.enable.internal.rest": _Spec(_BOOL, "false"),
    "config.providers": _Spec(_string, ""),
}
_FLOW_PASS_THROUGH_PREFIXES = ("producer.", "consumer.", "admin.", "source.", "target.")


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    alias: str
    bootstrap_servers: tuple[str, ...]
    security_protocol: str
    # Every client property for this cluster after precedence (cluster over top-level).
    client_properties: Mapping[str, str]
    # Worker of the Connect herder writing INTO this cluster.
    offset_flush_interval_ms: int
    exactly_once_source_support: ExactlyOnceSourceSupport
    worker_properties: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class MirrorFlow:
    source: str
    target: str
    enabled: bool
    policy: ReplicationPolicy
    topic_filter: TopicFilter
    group_filter: GroupFilter
    config_property_filter: ConfigPropertyFilter
    use_defaults_from_source: bool
    offset_lag_max: int
    offset_flush_interval_ms: int
    emit_offset_syncs_enabled: bool
    offset_syncs_topic_location: str
    emit_heartbeats_enabled: bool
    emit_heartbeats_interval_ms: int
    emit_checkpoints_enabled: bool
    emit_checkpoints_interval_ms: int
    sync_group_offsets_enabled: bool
    sync_group_offsets_interval_ms: int
    refresh_topics_enabled: bool
    refresh_topics_interval_ms: int
    refresh_groups_enabled: bool
    refresh_groups_interval_ms: int
    sync_topic_configs_enabled: bool
    sync_topic_configs_interval_ms: int
    sync_topic_acls_enabled: bool
    sync_topic_acls_interval_ms: int
    replication_factor: int
    offset_syncs_topic_replication_factor: int
    checkpoints_topic_replication_factor: int
    heartbeats_topic_replication_factor: int
    consumer_poll_timeout_ms: int
    admin_timeout_ms: int
    tasks_max: int
    exactly_once_source_support: ExactlyOnceSourceSupport
    exactly_once_support: ExactlyOnceRequirement
    transaction_boundary: TransactionBoundary = TransactionBoundary.POLL
    # Connect's default for `transaction.boundary.interval.ms`: offset.flush.interval.ms.
    transaction_boundary_interval_ms: int = 60_000
    # The connector properties after precedence, as strings (for shells and reports).
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.source}{FLOW_ARROW}{self.target}"

    @property
    def exactly_once(self) -> bool:
        return self.exactly_once_source_support is ExactlyOnceSourceSupport.ENABLED

    def offset_syncs_topic(self) -> str:
        """MirrorSourceConfig.offsetSyncsTopic: on the source, named after the target."""
        other = self.target if self.offset_syncs_topic_location == "source" else self.source
        return self.policy.offset_syncs_topic(other)

    def checkpoints_topic(self) -> str:
        return self.policy.checkpoints_topic(self.source)

    def heartbeats_topic(self) -> str:
        return self.policy.heartbeats_topic()


@dataclass(frozen=True, slots=True)
class MirrorMakerConfig:
    clusters: tuple[ClusterConfig, ...]
    # Every pair MM2 would create, in `clusters` order; `enabled` says which replicate.
    flows: tuple[MirrorFlow, ...]
    warnings: tuple[ConfigWarning, ...]

    def cluster(self, alias: str) -> ClusterConfig:
        for c in self.clusters:
            if c.alias == alias:
                return c
        raise KeyError(alias)

    def flow(self, source: str, target: str) -> MirrorFlow:
        for f in self.flows:
            if f.source == source and f.target == target:
                return f
        raise KeyError(f"{source}{FLOW_ARROW}{target}")

    def enabled_flows(self) -> tuple[MirrorFlow, ...]:
        return tuple(f for f in self.flows if f.enabled)


# -- parsing -------------------------------------------------------------------------------------


def _check(spec: _Spec, prop: PropertyLine) -> object:
    try:
        return spec.parse(prop.value)
    except ValueError as exc:
        raise MirrorConfigError(str(exc), key=prop.key, line=prop.line, value=prop.value) from exc


def _typed(name: str, value: object, kind: type[_T]) -> _T:
    """Narrow a parsed value to the type its spec produces (a failure is a bug here)."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"{name}: spec produced {type(value).__name__}, expected {kind.__name__}")
    return value


def _longest_alias_prefix(key: str, aliases: tuple[str, ...]) -> str | None:
    best: str | None = None
    for alias in aliases:
        if key.startswith(alias + ".") and (best is None or len(alias) > len(best)):
            best = alias
    return best


def _is_client_key(rest: str) -> bool:
    return rest in _CLIENT_SPECS or rest.startswith(_CLIENT_PREFIXES)


def _is_worker_key(rest: str) -> bool:
    return (
        rest in _WORKER_SPECS or rest in _WORKER_PASS_THROUGH or rest.startswith(_WORKER_PREFIXES)
    )


class _Parser:
    def __init__(self, props: tuple[PropertyLine, ...]) -> None:
        self.warnings: list[ConfigWarning] = []
        self.props: dict[str, PropertyLine] = {}
        for p in props:
            earlier = self.props.get(p.key)
            if earlier is not None:
                self.warn(p, f"duplicate key (line {earlier.line} overridden; the last one wins)")
            self.props[p.key] = p
        self.top: dict[str, PropertyLine] = {}
        self.cluster: dict[str, dict[str, PropertyLine]] = {}
        self.flow: dict[tuple[str, str], dict[str, PropertyLine]] = {}

    def warn(self, prop: PropertyLine, message: str) -> None:
        self.warnings.append(ConfigWarning(prop.line, prop.key, message))

    def aliases(self) -> tuple[str, ...]:
        prop = self.props.get("clusters")
        if prop is None:
            raise MirrorConfigError(
                "missing required property (the list of cluster aliases)", key="clusters"
            )
        aliases: list[str] = []
        for alias in parse_list(prop.value):
            if not alias or FLOW_ARROW in alias or any(c.isspace() for c in alias):
                raise MirrorConfigError(
                    f"invalid cluster alias {alias!r}",
                    key=prop.key,
                    line=prop.line,
                    value=prop.value,
                )
            if alias in aliases:
                self.warn(prop, f"cluster alias {alias!r} listed twice")
                continue
            aliases.append(alias)
        if not aliases:
            raise MirrorConfigError(
                "at least one cluster alias is required",
                key=prop.key,
                line=prop.line,
                value=prop.value,
            )
        if len(aliases) > MAX_CLUSTERS:
            raise MirrorConfigError(
                f"at most {MAX_CLUSTERS} clusters", key=prop.key, line=prop.line, value=prop.value
            )
        return tuple(aliases)

    def classify(self, aliases: tuple[str, ...]) -> None:
        for key in sorted(self.props, key=lambda k: self.props[k].line):
            prop = self.props[key]
            if FLOW_ARROW in key:
                self._classify_flow(prop, aliases)
            elif key in _TOP_LEVEL_SPECS or key.startswith("config.providers."):
                spec = _TOP_LEVEL_SPECS.get(key)
                if spec is not None:
                    _check(spec, prop)
                self.top[key] = prop
            elif key in _CONNECTOR_SPECS or _is_client_key(key):
                self._classify_top(prop)
            elif (alias := _longest_alias_prefix(key, aliases)) is not None:
                self._classify_cluster(prop, alias, key[len(alias) + 1 :])
            else:
                self._classify_top(prop)

    def _classify_top(self, prop: PropertyLine) -> None:
        key = prop.key
        if key in _CONNECTOR_SPECS:
            _check(_CONNECTOR_SPECS[key], prop)
            if key == "enabled":
                self.warn(
                    prop,
                    "a top-level 'enabled' does not enable flows; use <source>-><target>.enabled",
                )
            if key in _DEPRECATED:
                self.warn(prop, f"deprecated; use {_DEPRECATED[key]}")
            self.top[key] = prop
        elif key in _CLIENT_SPECS:
            _check(_CLIENT_SPECS[key], prop)
            self.top[key] = prop
        elif _is_client_key(key):
            self.top[key] = prop
        elif key in _WORKER_SPECS:
            _check(_WORKER_SPECS[key], prop)
            self.warn(
                prop,
                "MM2 ignores this worker property at top level; set <target alias>."
                f"{key} for the cluster the flow writes into",
            )
        elif key in _WORKER_PASS_THROUGH or key.startswith(_WORKER_PREFIXES):
            self.top[key] = prop
        elif key.startswith("replication.policy."):
            self.warn(
                prop,
                "unknown replication policy property (only the Default and Identity "
                "policies are modelled); ignored",
            )
        else:
            self.warn(prop, "unknown property; ignored")

    def _classify_cluster(self, prop: PropertyLine, alias: str, rest: str) -> None:
        if rest in _CLIENT_SPECS:
            _check(_CLIENT_SPECS[rest], prop)
        elif rest in _WORKER_SPECS:
            _check(_WORKER_SPECS[rest], prop)
        elif _is_client_key(rest) or _is_worker_key(rest):
            pass
        elif rest in _CONNECTOR_SPECS:
            _check(_CONNECTOR_SPECS[rest], prop)
            self.warn(
                prop,
                f"MM2 does not apply connector property {rest!r} at cluster level; "
                f"use {alias}->{{target}}.{rest} or a top-level {rest}",
            )
            return
        else:
            self.warn(prop, f"unknown property {rest!r} for cluster {alias!r}; ignored")
            return
        self.cluster.setdefault(alias, {})[rest] = prop

    def _classify_flow(self, prop: PropertyLine, aliases: tuple[str, ...]) -> None:
        source, _, remainder = prop.key.partition(FLOW_ARROW)
        target = _longest_alias_prefix(remainder, aliases)
        if source not in aliases or target is None:
            self.warn(prop, "flow names a cluster not listed in 'clusters'; ignored")
            return
        if source == target:
            self.warn(prop, "a flow from a cluster to itself is never created; ignored")
            return
        rest = remainder[len(target) + 1 :]
        if rest in _CONNECTOR_SPECS:
            _check(_CONNECTOR_SPECS[rest], prop)
            if rest in _DEPRECATED:
                self.warn(prop, f"deprecated; use {source}->{target}.{_DEPRECATED[rest]}")
        elif rest.startswith(_FLOW_PASS_THROUGH_PREFIXES):
            pass
        elif rest in _WORKER_SPECS:
            _check(_WORKER_SPECS[rest], prop)
            self.warn(
                prop, f"MM2 reads worker property {rest!r} per target cluster; use {target}.{rest}"
            )
            return
        else:
            self.warn(prop, f"unknown property {rest!r} for flow {source}->{target}; ignored")
            return
        self.flow.setdefault((source, target), {})[rest] = prop

    # -- resolution -------------------------------------------------------------------------------

    def connector_value(self, source: str, target: str, name: str) -> object:
        flow = self.flow.get((source, target), {})
        # MirrorMakerConfig.clusterPairs reads only `A->B.enabled` to decide replication.
        top = {} if name == "enabled" else self.top

        def merged_has(k: str) -> bool:
            return k in flow or k in top

        chosen = name
        alias = next((old for old, new in _DEPRECATED.items() if new == name), None)
        if not merged_has(name) and alias is not None and merged_has(alias):
            chosen = alias  # translateDeprecatedConfigs: the old name only when the new is absent
        prop = flow.get(chosen) or top.get(chosen)
        spec = _CONNECTOR_SPECS[chosen]
        if prop is None:
            default = _CONNECTOR_SPECS[name].default
            if default is None:
                return None
            return spec.parse(default)
        return _check(spec, prop)

    def connector_raw(self, source: str, target: str) -> dict[str, str]:
        merged = {k: p.value.strip() for k, p in self.top.items() if k in _CONNECTOR_SPECS}
        merged.update({k: p.value.strip() for k, p in self.flow.get((source, target), {}).items()})
        return dict(sorted(merged.items()))

    def cluster_config(self, alias: str) -> ClusterConfig:
        own = self.cluster.get(alias, {})
        client: dict[str, str] = {
            k: p.value.strip() for k, p in self.top.items() if _is_client_key(k)
        }
        client.update({k: p.value.strip() for k, p in own.items() if _is_client_key(k)})
        bootstrap = own.get("bootstrap.servers") or self.top.get("bootstrap.servers")
        if bootstrap is None:
            raise MirrorConfigError(
                f"missing required bootstrap servers of cluster {alias!r}",
                key=f"{alias}.bootstrap.servers",
            )
        servers = parse_list(bootstrap.value)
        if not servers or any(not s for s in servers):
            raise MirrorConfigError(
                "expected a comma-separated list of host:port",
                key=bootstrap.key,
                line=bootstrap.line,
                value=bootstrap.value,
            )
        sp = own.get("security.protocol") or self.top.get("security.protocol")
        security = (
            "PLAINTEXT" if sp is None else str(_check(_CLIENT_SPECS["security.protocol"], sp))
        )
        worker = {k: p.value.strip() for k, p in own.items() if _is_worker_key(k)}
        flush = own.get("offset.flush.interval.ms")
        flush_ms = (
            60_000
            if flush is None
            else int(str(_check(_WORKER_SPECS["offset.flush.interval.ms"], flush)))
        )
        eos = own.get("exactly.once.source.support")
        eos_value = (
            "disabled"
            if eos is None
            else str(_check(_WORKER_SPECS["exactly.once.source.support"], eos))
        )
        return ClusterConfig(
            alias=alias,
            bootstrap_servers=servers,
            security_protocol=security,
            client_properties=dict(sorted(client.items())),
            offset_flush_interval_ms=flush_ms,
            exactly_once_source_support=ExactlyOnceSourceSupport(eos_value),
            worker_properties=dict(sorted(worker.items())),
        )

    def mirror_flow(self, source: str, target: str, target_cluster: ClusterConfig) -> MirrorFlow:
        def v(name: str) -> object:
            return self.connector_value(source, target, name)

        def b(name: str) -> bool:
            return _typed(name, v(name), bool)

        def n(name: str) -> int:
            return _typed(name, v(name), int)

        def s(name: str) -> str:
            return _typed(name, v(name), str)

        def pl(name: str) -> PatternList:
            return _typed(name, v(name), PatternList)

        raw_interval = v("transaction.boundary.interval.ms")
        txn_interval = None if raw_interval is None else _typed(
            "transaction.boundary.interval.ms", raw_interval, int
        )
        policy_class = s("replication.policy.class")
        policy = ReplicationPolicy(
            kind=PolicyKind.IDENTITY
            if policy_class == IDENTITY_POLICY_CLASS
            else PolicyKind.DEFAULT,
            separator=s("replication.policy.separator"),
            internal_topic_separator_enabled=b(
                "replication.policy.internal.topic.separator.enabled"
            ),
            heartbeats_topic_name=s("default.replication.policy.heartbeats.topic.name"),
            source_cluster_alias=source,
        )
        return MirrorFlow(
            source=source,
            target=target,
            enabled=b("enabled"),
            policy=policy,
            topic_filter=TopicFilter(pl("topics"), pl("topics.exclude")),
            group_filter=GroupFilter(pl("groups"), pl("groups.exclude")),
            config_property_filter=ConfigPropertyFilter(pl("config.properties.exclude")),
            use_defaults_from_source=s("use.defaults.from") == "source",
            offset_lag_max=n("offset.lag.max"),
            offset_flush_interval_ms=target_cluster.offset_flush_interval_ms,
            emit_offset_syncs_enabled=b("emit.offset-syncs.enabled"),
            offset_syncs_topic_location=s("offset-syncs.topic.location"),
            emit_heartbeats_enabled=b("emit.heartbeats.enabled"),
            emit_heartbeats_interval_ms=n("emit.heartbeats.interval.seconds") * 1000,
            emit_checkpoints_enabled=b("emit.checkpoints.enabled"),
            emit_checkpoints_interval_ms=n("emit.checkpoints.interval.seconds") * 1000,
            sync_group_offsets_enabled=b("sync.group.offsets.enabled"),
            sync_group_offsets_interval_ms=n("sync.group.offsets.interval.seconds") * 1000,
            refresh_topics_enabled=b("refresh.topics.enabled"),
            refresh_topics_interval_ms=n("refresh.topics.interval.seconds") * 1000,
            refresh_groups_enabled=b("refresh.groups.enabled"),
            refresh_groups_interval_ms=n("refresh.groups.interval.seconds") * 1000,
            sync_topic_configs_enabled=b("sync.topic.configs.enabled"),
            sync_topic_configs_interval_ms=n("sync.topic.configs.interval.seconds") * 1000,
            sync_topic_acls_enabled=b("sync.topic.acls.enabled"),
            sync_topic_acls_interval_ms=n("sync.topic.acls.interval.seconds") * 1000,
            replication_factor=n("replication.factor"),
            offset_syncs_topic_replication_factor=n("offset-syncs.topic.replication.factor"),
            checkpoints_topic_replication_factor=n("checkpoints.topic.replication.factor"),
            heartbeats_topic_replication_factor=n("heartbeats.topic.replication.factor"),
            consumer_poll_timeout_ms=n("consumer.poll.timeout.ms"),
            admin_timeout_ms=n("admin.timeout.ms"),
            tasks_max=n("tasks.max"),
            exactly_once_source_support=target_cluster.exactly_once_source_support,
            exactly_once_support=ExactlyOnceRequirement(s("exactly.once.support")),
            transaction_boundary=TransactionBoundary(s("transaction.boundary")),
            transaction_boundary_interval_ms=(
                target_cluster.offset_flush_interval_ms if txn_interval is None else txn_interval
            ),
            properties=self.connector_raw(source, target),
        )

    def warn_shadowed_deprecations(self) -> None:
        for scope in [self.top, *self.flow.values()]:
            for old, new in _DEPRECATED.items():
                if old in scope and new in scope:
                    self.warn(
                        scope[old], f"ignored: {new} is also set (line {scope[new].line}) and wins"
                    )


def parse_mm2_properties(text: str) -> MirrorMakerConfig:
    """Read an mm2.properties file. Raises MirrorConfigError; reports warnings."""
    try:
        props = parse_properties(text)
    except PropertiesSyntaxError as exc:
        raise MirrorConfigError(str(exc), line=exc.line) from exc
    parser = _Parser(props)
    aliases = parser.aliases()
    parser.classify(aliases)
    parser.warn_shadowed_deprecations()
    clusters = tuple(parser.cluster_config(a) for a in aliases)
    by_alias = {c.alias: c for c in clusters}
    flows: list[MirrorFlow] = []
    for source in aliases:
        for target in aliases:
            if source == target:
                continue
            flow = parser.mirror_flow(source, target, by_alias[target])
            # MirrorMakerConfig.clusterPairs: a herder exists for replication or heartbeats.
            if flow.enabled or flow.emit_heartbeats_enabled:
                flows.append(flow)
    return MirrorMakerConfig(clusters, tuple(flows), tuple(sorted(parser.warnings)))
