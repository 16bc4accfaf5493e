"""Broker and group configs: what a single broker lets AlterConfigs and
IncrementalAlterConfigs change, what DescribeConfigs shows, and what they do.

Rules (Kafka's, for one broker):
- A BROKER resource is this broker ("0", its id: DYNAMIC_BROKER_CONFIG) or
  the cluster-wide default ("": DYNAMIC_DEFAULT_BROKER_CONFIG). A config's
  value is the broker's own, else the cluster default, else the daemon's
  setting (STATIC_BROKER_CONFIG), else Kafka's default (DEFAULT_CONFIG).
- Only the dynamic configs below may be altered; any other is refused
  (INVALID_CONFIG, "Cannot update these configs dynamically"), and each
  value is checked as Kafka checks it. Altered configs are journalled at
  their level, the whole level at once, and replayed after a restart.
- The topic configs' server defaults (ServerTopicConfigSynonyms:
  log.retention.ms, log.segment.bytes, log.cleanup.policy, message.max.bytes,
  ...) are dynamic: altered, they are the default of every topic that does
  not set the topic config, at once. Of several synonyms the most precise
  set one wins (log.retention.ms, then .minutes, then .hours).
- log.cleaner.backoff.ms takes effect on the log cleaner (the daemon reads
  it); the other log cleaner configs are stored and have no effect here.
- A GROUP resource's configs are KIP-848's (consumer.*, share.*), checked
  against the broker's bounds (a heartbeat interval below the session
  timeout): stored, described and journalled; this cluster's groups use the
  classic protocol, whose members choose their own timeouts, so they have no
  effect here.

Pure: values are strings, as DescribeConfigs carries them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.topic_config import (
    CONFIG_KEYS,
    Check,
    ConfigType,
    Effect,
    at_least,
    between,
    effective_configs,
    one_of,
    parse_value,
)


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs sources."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


CLUSTER_DEFAULT = ""  # the BROKER resource name of the cluster-wide default


@dataclass(frozen=True, slots=True)
class BrokerKey:
    """A broker config this cluster has: its type, Kafka's default (None:
    unset), its check, whether AlterConfigs may change it, and the topic
    config it is a server default of (with the factor its unit takes to
    milliseconds or bytes)."""

    name: str
    type: ConfigType
    default: str | None
    check: Check
    doc: str
    dynamic: bool = True
    effect: Effect = Effect.APPLIED
    topic_key: str = ""
    factor: int = 1

    def parse(self, text: str) -> object:
        value = parse_value(self.type, text)
        self.check(value)
        return value


_UNITS = {"minutes": 60_000, "hours": 3_600_000}


def _synonym_keys() -> list[BrokerKey]:
    """Every topic config's server defaults (ServerTopicConfigSynonyms)."""
    out: list[BrokerKey] = []
    kafka_defaults = {
        "log.retention.hours": "168",
        "log.roll.hours": "168",
        "log.roll.jitter.hours": "0",
    }
    unset = {"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
             "log.flush.interval.ms"}
    for topic in CONFIG_KEYS.values():
        for name in topic.broker_synonyms:
            unit = name.rsplit(".", 1)[-1]
            factor = _UNITS.get(unit, 1)
            if name in kafka_defaults:
                default: str | None = kafka_defaults[name]
            elif name in unset:
                default = None
            else:
                default = topic.default
            config_type = ConfigType.INT if factor > 1 else topic.type
            check = topic.check if factor == 1 else at_least(1)
            if name == "log.roll.jitter.hours":
                check = at_least(0)
            dynamic = name != "log.flush.scheduler.interval.ms"
            out.append(
                BrokerKey(
                    name,
                    config_type,
                    default,
                    check,
                    f"The server default of the topic config {topic.name}"
                    + (f" (in {unit})" if factor > 1 else "")
                    + (": no effect here" if topic.effect is Effect.STORED else "")
                    + ".",
                    dynamic=dynamic,
                    effect=topic.effect,
                    topic_key=topic.name,
                    factor=factor,
                )
            )
    return out


_CLEANER_STORED = "stored; no effect here (one cleaner task, bounded by bytes per pass)"

BROKER_KEYS: Mapping[str, BrokerKey] = {
    key.name: key
    for key in (
        *_synonym_keys(),
        BrokerKey(
            "log.cleaner.backoff.ms", ConfigType.LONG, "15000", at_least(0),
            "How long the log cleaner sleeps between passes (also --log-cleaner-backoff-ms).",
        ),
        BrokerKey(
            "log.cleaner.threads", ConfigType.INT, "1", at_least(0),
            f"Log cleaner threads; {_CLEANER_STORED}.", effect=Effect.STORED,
        ),
        BrokerKey(
            "log.cleaner.io.max.bytes.per.second", ConfigType.DOUBLE, "1.7976931348623157E308",
            between(0, float("inf")),
            f"Log cleaner I/O throttle; {_CLEANER_STORED}.", effect=Effect.STORED,
        ),
        BrokerKey(
            "log.cleaner.dedupe.buffer.size", ConfigType.LONG, "134217728", at_least(0),
            f"Log cleaner offset map memory; {_CLEANER_STORED}.", effect=Effect.STORED,
        ),
        BrokerKey(
            "log.cleaner.io.buffer.size", ConfigType.INT, "524288", at_least(0),
            f"Log cleaner I/O buffers; {_CLEANER_STORED}.", effect=Effect.STORED,
        ),
        BrokerKey(
            "log.cleaner.io.buffer.load.factor", ConfigType.DOUBLE, "0.9", between(0, 1),
            f"Log cleaner offset map load factor; {_CLEANER_STORED}.", effect=Effect.STORED,
        ),
    )
}


def check_broker_name(name: str, broker_id: int) -> None:
    if name not in (CLUSTER_DEFAULT, str(broker_id)):
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"broker {name!r}",
            f"broker {name!r} does not exist; the cluster's only broker is {broker_id} "
            "(or '' for the cluster-wide default)",
        )


def validate_broker_configs(level: str, configs: Mapping[str, str]) -> dict[str, str]:
    """Checks configs for one level as Kafka does; returns them."""
    where = "the cluster-wide broker default" if level == CLUSTER_DEFAULT else f"broker {level}"
    static = sorted(k for k in configs if k not in BROKER_KEYS or not BROKER_KEYS[k].dynamic)
    if static:
        raise ClusterError(
            ErrorCode.INVALID_CONFIG,
            f"{where} config {static[0]!r}",
            f"{where}: Cannot update these configs dynamically: {static} (this cluster's "
            "dynamic broker configs are listed in docs/operations.md)",
        )
    for key in sorted(configs):
        try:
            BROKER_KEYS[key].parse(configs[key])
        except ValueError as exc:
            raise ClusterError(
                ErrorCode.INVALID_CONFIG,
                f"{where} config {key!r}",
                f"{where}: Invalid value {configs[key]} for configuration {key}: {exc}",
            ) from exc
    return dict(configs)


@dataclass(frozen=True, slots=True)
class Described:
    """One config as DescribeConfigs shows it, with its synonyms (name,
    value, source), most precedent first."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    type: ConfigType
    doc: str
    synonyms: tuple[tuple[str, str, ConfigSource], ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


class BrokerConfigs:
    """The broker's dynamic configs at both levels, and the daemon's settings
    (`static`, set by the shell) that stand below them."""

    def __init__(self) -> None:
        self.levels: dict[str, dict[str, str]] = {}
        self.static: dict[str, str] = {}

    def level(self, name: str) -> dict[str, str]:
        return dict(self.levels.get(name, {}))

    def set_level(self, name: str, configs: Mapping[str, str]) -> None:
        if configs:
            self.levels[name] = dict(configs)
        else:
            self.levels.pop(name, None)

    def layers(self, broker: str) -> list[tuple[ConfigSource, Mapping[str, str]]]:
        """Where a value may come from, most precedent first."""
        return [
            (ConfigSource.DYNAMIC_BROKER_CONFIG, self.levels.get(broker, {})),
            (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.levels.get(CLUSTER_DEFAULT, {})),
            (ConfigSource.STATIC_BROKER_CONFIG, self.static),
        ]

    def value(self, name: str, broker: str) -> tuple[str | None, ConfigSource]:
        for source, layer in self.layers(broker):
            if name in layer:
                return layer[name], source
        return BROKER_KEYS[name].default, ConfigSource.DEFAULT_CONFIG

    def describe(self, name: str, broker: str, synonyms: tuple[str, ...] = ()) -> Described:
        key = BROKER_KEYS[name]
        value, source = self.value(name, broker)
        found: list[tuple[str, str, ConfigSource]] = []
        for syn in synonyms or (name,):
            for layer_source, layer in self.layers(broker):
                if syn in layer:
                    found.append((syn, layer[syn], layer_source))
            default = BROKER_KEYS[syn].default
            if default is not None:
                found.append((syn, default, ConfigSource.DEFAULT_CONFIG))
        return Described(name, value, source, not key.dynamic, key.type, key.doc, tuple(found))

    def topic_defaults(self, broker: str) -> dict[str, str]:
        """The server default of every topic config whose broker synonyms are
        set somewhere (the others keep Kafka's default), as Kafka resolves
        it: each synonym's value from the most precedent layer that sets it,
        then the most precise synonym set (ms before minutes before hours)."""
        merged: dict[str, str] = {}
        for _source, layer in reversed(self.layers(broker)):
            merged.update(layer)
        out: dict[str, str] = {}
        for topic in CONFIG_KEYS.values():
            chosen = next((s for s in topic.broker_synonyms if s in merged), None)
            if chosen is not None:
                key = BROKER_KEYS[chosen]
                raw = merged[chosen].strip()
                out[topic.name] = str(int(raw) * key.factor) if key.factor > 1 else raw
        return out

    def cleaner_backoff_ms(self, broker: str) -> int | None:
        """log.cleaner.backoff.ms when set at some level (None: the daemon's own)."""
        value, source = self.value("log.cleaner.backoff.ms", broker)
        if source is ConfigSource.DEFAULT_CONFIG or value is None:
            return None
        return int(value)


# -- list-valued configs: IncrementalAlterConfigs APPEND and SUBTRACT --------------------


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs' operations."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def list_change(
    op: AlterOp, name: str, config_type: ConfigType, current: str | None, default: str | None,
    value: str,
) -> str:
    """The new value of a list config after APPEND or SUBTRACT, as Kafka
    computes it: APPEND adds the values it lacks to its current value (its
    own setting, else Kafka's default); SUBTRACT removes them from its own
    setting (an unset config counts as empty). A config that is not a list
    is refused (INVALID_REQUEST, Kafka's answer)."""
    verb = "append" if op is AlterOp.APPEND else "subtract"
    if config_type is not ConfigType.LIST:
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"config {name!r}",
            f"Config value {verb} is not allowed for config key: {name}",
        )
    given = [v.strip() for v in value.split(",") if v.strip()]
    if op is AlterOp.APPEND:
        base = current if current is not None else (default or "")
        old = [v.strip() for v in base.split(",") if v.strip()]
        return ",".join(dict.fromkeys(old + given))
    old = [v.strip() for v in (current or "").split(",") if v.strip()]
    return ",".join(v for v in old if v not in given)


@dataclass(frozen=True, slots=True)
class Alteration:
    """One entry of an IncrementalAlterConfigs (or, as SET and DELETE, of an
    AlterConfigs) request."""

    op: AlterOp
    name: str
    value: str | None


def resolve_alterations(
    resource: str,
    current: Mapping[str, str],
    alterations: list[Alteration],
    key_of: Callable[[str], tuple[ConfigType, str | None] | None],
) -> tuple[dict[str, str], list[str]]:
    """What a request's alterations set and delete, given the resource's
    current settings: a key named twice is refused (INVALID_REQUEST, as
    Kafka), SET of a null value deletes, APPEND and SUBTRACT become the SET of
    the list they make (`list_change`; `key_of` gives a config's type and
    Kafka default, None for a name the resource does not have)."""
    seen: set[str] = set()
    set_: dict[str, str] = {}
    delete: list[str] = []
    for alt in alterations:
        if alt.name in seen:
            raise ClusterError(
                ErrorCode.INVALID_REQUEST,
                resource,
                f"{resource}: config {alt.name!r} appears twice",
            )
        seen.add(alt.name)
        if alt.op is AlterOp.DELETE or (alt.op is AlterOp.SET and alt.value is None):
            delete.append(alt.name)
        elif alt.op is AlterOp.SET:
            assert alt.value is not None
            set_[alt.name] = alt.value
        else:
            known = key_of(alt.name)
            if known is None:
                raise ClusterError(
                    ErrorCode.INVALID_CONFIG,
                    f"{resource} config {alt.name!r}",
                    f"{resource}: unknown config {alt.name!r}",
                )
            config_type, default = known
            set_[alt.name] = list_change(
                alt.op, alt.name, config_type, current.get(alt.name), default, alt.value or ""
            )
    return set_, delete


# -- group configs (KIP-848) -------------------------------------------------------------

_CLASSIC = (
    "no effect here: this cluster's groups use the classic protocol, whose members give "
    "their own timeouts"
)


@dataclass(frozen=True, slots=True)
class GroupKey:
    name: str
    type: ConfigType
    default: str
    low: int | None  # the broker's bounds (Kafka's group.*.min/max configs)
    high: int | None
    broker_name: str  # the broker config that sets its default
    doc: str
    choices: tuple[str, ...] = ()


GROUP_KEYS: Mapping[str, GroupKey] = {
    key.name: key
    for key in (
        GroupKey("consumer.session.timeout.ms", ConfigType.INT, "45000", 45_000, 60_000,
                 "group.consumer.session.timeout.ms",
                 f"Consumer protocol (KIP-848): a member's session timeout; {_CLASSIC}."),
        GroupKey("consumer.heartbeat.interval.ms", ConfigType.INT, "5000", 5_000, 15_000,
                 "group.consumer.heartbeat.interval.ms",
                 f"Consumer protocol (KIP-848): the members' heartbeat interval; {_CLASSIC}."),
        GroupKey("share.session.timeout.ms", ConfigType.INT, "45000", 45_000, 60_000,
                 "group.share.session.timeout.ms",
                 f"Share groups (KIP-932): a member's session timeout; {_CLASSIC}."),
        GroupKey("share.heartbeat.interval.ms", ConfigType.INT, "5000", 5_000, 15_000,
                 "group.share.heartbeat.interval.ms",
                 f"Share groups (KIP-932): the heartbeat interval; {_CLASSIC}."),
        GroupKey("share.record.lock.duration.ms", ConfigType.INT, "30000", 15_000, 60_000,
                 "group.share.record.lock.duration.ms",
                 f"Share groups (KIP-932): how long a record stays acquired; {_CLASSIC}."),
        GroupKey("share.auto.offset.reset", ConfigType.STRING, "latest", None, None,
                 "share.auto.offset.reset",
                 f"Share groups (KIP-932): where a new share group starts; {_CLASSIC}.",
                 ("latest", "earliest")),
    )
}


def validate_group_configs(group: str, configs: Mapping[str, str]) -> dict[str, str]:
    """Kafka's GroupConfig checks on the whole set a group would have."""

    def refuse(key: str, message: str) -> ClusterError:
        return ClusterError(
            ErrorCode.INVALID_CONFIG,
            f"group {group!r} config {key!r}",
            f"group {group!r}: {message}",
        )

    values: dict[str, object] = {}
    for key in sorted(configs):
        spec = GROUP_KEYS.get(key)
        if spec is None:
            raise refuse(key, f"Unknown group config name: {key}")
        try:
            value = parse_value(spec.type, configs[key])
            if spec.choices:
                one_of(*spec.choices)(value)
            if spec.low is not None and spec.high is not None:
                between(spec.low, spec.high)(value)
        except ValueError as exc:
            raise refuse(
                key, f"Invalid value {configs[key]} for configuration {key}: {exc}"
            ) from exc
        values[key] = value
    for prefix in ("consumer", "share"):
        session = values.get(f"{prefix}.session.timeout.ms",
                             int(GROUP_KEYS[f"{prefix}.session.timeout.ms"].default))
        beat = values.get(f"{prefix}.heartbeat.interval.ms",
                          int(GROUP_KEYS[f"{prefix}.heartbeat.interval.ms"].default))
        assert isinstance(session, int) and isinstance(beat, int)
        if beat >= session:
            raise refuse(
                f"{prefix}.heartbeat.interval.ms",
                f"{prefix}.heartbeat.interval.ms must be less than {prefix}.session.timeout.ms",
            )
    return dict(configs)


def describe_topic_configs(
    overrides: Mapping[str, str], brokers: BrokerConfigs, broker: str
) -> list[Described]:
    """A topic's configs as DescribeConfigs shows them: each value, where it
    comes from (the topic's own setting, a broker level's synonym, Kafka's
    default) and every synonym that holds a value, most precedent first."""
    defaults = brokers.topic_defaults(broker)
    out = []
    for name, value in effective_configs(overrides, defaults).items():
        key = CONFIG_KEYS[name]
        synonyms: list[tuple[str, str, ConfigSource]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for syn in key.broker_synonyms:
            described = brokers.describe(syn, broker)
            synonyms += [s for s in described.synonyms if s[0] == syn]
        if not key.broker_synonyms and key.default is not None:
            synonyms.append((name, key.default, ConfigSource.DEFAULT_CONFIG))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(
            Described(name, value, source, False, key.type, key.doc, tuple(synonyms))
        )
    return out


def describe_group_configs(configs: Mapping[str, str]) -> list[Described]:
    out = []
    for key in GROUP_KEYS.values():
        if key.name in configs:
            value, source = configs[key.name], ConfigSource.GROUP_CONFIG
        else:
            value, source = key.default, ConfigSource.DEFAULT_CONFIG
        synonyms = [(key.name, configs[key.name], ConfigSource.GROUP_CONFIG)] if (
            key.name in configs
        ) else []
        synonyms.append((key.broker_name, key.default, ConfigSource.DEFAULT_CONFIG))
        out.append(Described(key.name, value, source, False, key.type, key.doc, tuple(synonyms)))
    return out


__all__ = [
    "BROKER_KEYS",
    "CLUSTER_DEFAULT",
    "GROUP_KEYS",
    "AlterOp",
    "Alteration",
    "BrokerConfigs",
    "BrokerKey",
    "ConfigSource",
    "Described",
    "check_broker_name",
    "describe_group_configs",
    "describe_topic_configs",
    "list_change",
    "resolve_alterations",
    "validate_broker_configs",
    "validate_group_configs",
]
