"""Topic configs: the keys a topic accepts, their defaults and how they parse.

Names are Kafka's. Validation happens before anything is stored, and every
refusal names the key and the value. Values are kept as strings (Kafka's
DescribeConfigs shape) and parsed on use through `TopicConfig`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from linkd.core.errors import ClusterError, ErrorCode

MAX_PARTITIONS = 10_000
# compression.type: its values and the batch codec each stands for (None:
# keep the producer's).
COMPRESSION_TYPES: Mapping[str, int | None] = {
    "producer": None,
    "uncompressed": 0,
    "gzip": 1,
    "snappy": 2,
    "lz4": 3,
    "zstd": 4,
}
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class ConfigType(enum.IntEnum):
    """Kafka's config types, with the numbers DescribeConfigs v3+ gives them."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


# Kafka's config types: an INT is 32 bits, a LONG 64, signed.
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_BOUNDS = {ConfigType.INT: (-(2**31), INT_MAX), ConfigType.LONG: (-(2**63), LONG_MAX)}
_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_value(config_type: ConfigType, text: str) -> object:
    """A config's text as Kafka's ConfigDef reads its type (surrounding
    blanks ignored). Raises ValueError naming what is wrong."""
    trimmed = text.strip()
    if config_type in _BOUNDS:
        low, high = _BOUNDS[config_type]
        if not _INTEGER.fullmatch(trimmed) or not low <= int(trimmed) <= high:
            raise ValueError(
                f"Not a number of type {config_type.name} (one lies in {low}..{high})"
            )
        return int(trimmed)
    if config_type is ConfigType.DOUBLE:
        try:
            return float(trimmed)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if config_type is ConfigType.BOOLEAN:
        if trimmed.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return trimmed.lower() == "true"
    if config_type is ConfigType.LIST:
        return [] if not trimmed else [part.strip() for part in trimmed.split(",")]
    return trimmed


Check = Callable[[object], None]


def at_least(low: int) -> Check:
    def check(value: object) -> None:
        assert isinstance(value, int)
        if value < low:
            raise ValueError(f"Value must be at least {low}")

    return check


def between(low: float, high: float) -> Check:
    def check(value: object) -> None:
        assert isinstance(value, int | float)
        if not low <= value <= high:
            raise ValueError(f"Value must be between {low} and {high}")

    return check


def one_of(*choices: str) -> Check:
    def check(value: object) -> None:
        if value not in choices:
            raise ValueError(f"String must be one of: {', '.join(choices)}")

    return check


def each_of(*choices: str) -> Check:
    def check(value: object) -> None:
        assert isinstance(value, list)
        for item in value:
            if item not in choices:
                raise ValueError(f"Invalid value {item}: each must be one of {list(choices)}")

    return check


def _gzip_level(value: object) -> None:
    if value != -1 and not (isinstance(value, int) and 1 <= value <= 9):
        raise ValueError("Value must be between 1 and 9 or equal to -1")


_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled_replicas(value: object) -> None:
    assert isinstance(value, list)
    if "".join(value) == "*" or all(_REPLICA.fullmatch(item) for item in value):
        return
    raise ValueError(
        "must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
    )


def _no_check(value: object) -> None:
    del value


class Effect(enum.Enum):
    """What a topic config does on this cluster."""

    APPLIED = "applied"  # the cluster behaves by it
    STORED = "stored"  # accepted, stored, described and copied; no effect on one broker


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One topic config, as Kafka's LogConfig defines it: its type, default
    (None: Kafka has none; the key is shown only when set), validator,
    whether it takes effect here, and the broker configs that set its
    default for every topic (ServerTopicConfigSynonyms, the first the one
    DescribeConfigs names as the default's source)."""

    name: str
    type: ConfigType
    default: str | None
    check: Check
    doc: str
    effect: Effect = Effect.APPLIED
    broker_synonyms: tuple[str, ...] = ()

    def parse(self, text: str) -> object:
        value = parse_value(self.type, text)
        self.check(value)
        return value


# No effect here: the one-line reason an operator reads beside each.
_ONE_BROKER = "no effect here: a cluster has one broker holding one replica of each partition"
_NO_TIERED = "no effect here: the cluster has no tiered storage"

# Every topic config Kafka 4.x defines (LogConfig), in name order.
CONFIG_KEYS: Mapping[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            "cleanup.policy", ConfigType.LIST, "delete", each_of("compact", "delete"),
            "delete: time and size retention by whole segments; compact: the log cleaner "
            "keeps the latest record of each key (offsets keep their gaps); compact,delete: "
            "both; empty: neither (records are kept).",
            broker_synonyms=("log.cleanup.policy",),
        ),
        ConfigKey(
            "compression.gzip.level", ConfigType.INT, "-1", _gzip_level,
            "The gzip level of batches this cluster compresses; stored, no effect here "
            "(recompression uses the codec's default level).",
            Effect.STORED, ("compression.gzip.level",),
        ),
        ConfigKey(
            "compression.lz4.level", ConfigType.INT, "9", between(1, 17),
            "The lz4 level of batches this cluster compresses; stored, no effect here "
            "(recompression uses the codec's default level).",
            Effect.STORED, ("compression.lz4.level",),
        ),
        ConfigKey(
            "compression.type", ConfigType.STRING, "producer", one_of(*COMPRESSION_TYPES),
            "producer: batches are stored as produced; uncompressed, gzip, snappy, lz4 or "
            "zstd: a produced batch in another codec is recompressed into this one (a "
            "replicated batch is always stored as its source holds it).",
            broker_synonyms=("compression.type",),
        ),
        ConfigKey(
            "compression.zstd.level", ConfigType.INT, "3", between(-131072, 22),
            "The zstd level of batches this cluster compresses; stored, no effect here "
            "(recompression uses the codec's default level).",
            Effect.STORED, ("compression.zstd.level",),
        ),
        ConfigKey(
            "delete.retention.ms", ConfigType.LONG, "86400000", at_least(0),
            "Compacted topics: how long a tombstone (null value) stays readable after the "
            "cleaner first passed over it.",
            broker_synonyms=("log.cleaner.delete.retention.ms",),
        ),
        ConfigKey(
            "file.delete.delay.ms", ConfigType.LONG, "60000", at_least(0),
            "How long Kafka keeps a deleted segment's file; stored, no effect here (a "
            "segment retention or a clean removes goes at once).",
            Effect.STORED, ("log.segment.delete.delay.ms",),
        ),
        ConfigKey(
            "flush.messages", ConfigType.LONG, str(LONG_MAX), at_least(1),
            "Records between forced fsyncs; stored, no effect here (every acknowledged "
            "write is fsynced first, under --fsync always).",
            Effect.STORED, ("log.flush.interval.messages",),
        ),
        ConfigKey(
            "flush.ms", ConfigType.LONG, str(LONG_MAX), at_least(0),
            "Time between forced fsyncs; stored, no effect here (every acknowledged write "
            "is fsynced first, under --fsync always).",
            Effect.STORED, ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        ),
        ConfigKey(
            "follower.replication.throttled.replicas", ConfigType.LIST, "",
            _throttled_replicas,
            f"Replicas whose replication is throttled on the follower side; {_ONE_BROKER}.",
            Effect.STORED,
        ),
        ConfigKey(
            "index.interval.bytes", ConfigType.INT, "4096", at_least(0),
            "Bytes between offset index entries; stored, no effect here (segments are "
            "indexed every 4096 bytes).",
            Effect.STORED, ("log.index.interval.bytes",),
        ),
        ConfigKey(
            "internal.segment.bytes", ConfigType.INT, None, _no_check,
            "Kafka's internal override of segment.bytes, below its 1 MiB floor (for tests): "
            "when set, segments roll at this size.",
        ),
        ConfigKey(
            "leader.replication.throttled.replicas", ConfigType.LIST, "",
            _throttled_replicas,
            f"Replicas whose replication is throttled on the leader side; {_ONE_BROKER}.",
            Effect.STORED,
        ),
        ConfigKey(
            "local.retention.bytes", ConfigType.LONG, "-2", at_least(-2),
            f"Tiered storage: the bytes kept on local disk; {_NO_TIERED}.",
            Effect.STORED, ("log.local.retention.bytes",),
        ),
        ConfigKey(
            "local.retention.ms", ConfigType.LONG, "-2", at_least(-2),
            f"Tiered storage: how long records stay on local disk; {_NO_TIERED}.",
            Effect.STORED, ("log.local.retention.ms",),
        ),
        ConfigKey(
            "max.compaction.lag.ms", ConfigType.LONG, str(LONG_MAX), at_least(1),
            "Compacted topics: the longest a record stays uncompacted: a partition whose "
            "oldest uncleaned record is older is cleaned whatever its dirty ratio, and its "
            "active segment rolls by then.",
            broker_synonyms=("log.cleaner.max.compaction.lag.ms",),
        ),
        ConfigKey(
            "max.message.bytes", ConfigType.INT, "1048588", at_least(0),
            "Largest record batch a producer may write.",
            broker_synonyms=("message.max.bytes",),
        ),
        ConfigKey(
            "message.timestamp.after.max.ms", ConfigType.LONG, "3600000", at_least(0),
            "CreateTime: a record whose timestamp is further than this after the broker's "
            "time is refused (INVALID_TIMESTAMP; Kafka 4's default, one hour).",
            broker_synonyms=("log.message.timestamp.after.max.ms",),
        ),
        ConfigKey(
            "message.timestamp.before.max.ms", ConfigType.LONG, str(LONG_MAX), at_least(0),
            "CreateTime: a record whose timestamp is further than this before the broker's "
            "time is refused (INVALID_TIMESTAMP).",
            broker_synonyms=("log.message.timestamp.before.max.ms",),
        ),
        ConfigKey(
            "message.timestamp.type", ConfigType.STRING, "CreateTime",
            one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
            broker_synonyms=("log.message.timestamp.type",),
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", between(0, 1),
            "Compacted topics: the cleaner starts when the bytes not cleaned yet are at least "
            "this share of the cleanable log.",
            broker_synonyms=("log.cleaner.min.cleanable.ratio",),
        ),
        ConfigKey(
            "min.compaction.lag.ms", ConfigType.LONG, "0", at_least(0),
            "Compacted topics: records younger than this are never cleaned.",
            broker_synonyms=("log.cleaner.min.compaction.lag.ms",),
        ),
        ConfigKey(
            "min.insync.replicas", ConfigType.INT, "1", at_least(1),
            f"In-sync replicas an acks=all write needs; {_ONE_BROKER}.",
            Effect.STORED, ("min.insync.replicas",),
        ),
        ConfigKey(
            "preallocate", ConfigType.BOOLEAN, "false", _no_check,
            "Preallocate segment files; stored, no effect here.",
            Effect.STORED, ("log.preallocate",),
        ),
        ConfigKey(
            "remote.log.copy.disable", ConfigType.BOOLEAN, "false", _no_check,
            f"Tiered storage: stop copying segments to remote storage; {_NO_TIERED}.",
            Effect.STORED,
        ),
        ConfigKey(
            "remote.log.delete.on.disable", ConfigType.BOOLEAN, "false", _no_check,
            f"Tiered storage: delete remote segments when it is turned off; {_NO_TIERED}.",
            Effect.STORED,
        ),
        ConfigKey(
            "remote.storage.enable", ConfigType.BOOLEAN, "false", _no_check,
            "Tiered storage for the topic; no effect here: the cluster has no tiered "
            "storage, and true is refused, as by a Kafka broker with it off.",
            Effect.STORED,
        ),
        ConfigKey(
            "retention.bytes", ConfigType.LONG, "-1", _no_check,
            "Delete the oldest segments while the partition is larger (negative: no limit).",
            broker_synonyms=("log.retention.bytes",),
        ),
        ConfigKey(
            "retention.ms", ConfigType.LONG, "604800000", at_least(-1),
            "Delete segments whose newest record is older than this (-1: forever); checked "
            "every log.retention.check.interval.ms.",
            broker_synonyms=("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        ),
        ConfigKey(
            "segment.bytes", ConfigType.INT, "1073741824", at_least(1024 * 1024),
            "Size at which a new segment starts (retention and cleaning work on whole "
            "segments).",
            broker_synonyms=("log.segment.bytes",),
        ),
        ConfigKey(
            "segment.index.bytes", ConfigType.INT, "10485760", at_least(4),
            "Largest offset index of a segment; stored, no effect here (indexes are sparse "
            "and never fill before a segment's size does).",
            Effect.STORED, ("log.index.size.max.bytes",),
        ),
        ConfigKey(
            "segment.jitter.ms", ConfigType.LONG, "0", at_least(0),
            "Up to this much is taken off segment.ms for each segment (drawn from the "
            "partition and the segment's base offset), so segments do not all roll at once.",
            broker_synonyms=("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ),
        ConfigKey(
            "segment.ms", ConfigType.LONG, "604800000", at_least(1),
            "A segment rolls once its records span this long (the next batch's timestamp "
            "against its first batch's), so retention can delete it.",
            broker_synonyms=("log.roll.ms", "log.roll.hours"),
        ),
        ConfigKey(
            "unclean.leader.election.enable", ConfigType.BOOLEAN, "false", _no_check,
            f"Elect an out-of-sync replica as leader; {_ONE_BROKER}.",
            Effect.STORED, ("unclean.leader.election.enable",),
        ),
    )
}

# Configs that belong to one cluster and are never copied to a replica: how
# its logs are laid out and flushed, its replicas and storage tiers.
CLUSTER_LOCAL_KEYS = frozenset(
    {
        "min.insync.replicas",
        "segment.bytes",
        "internal.segment.bytes",
        "segment.index.bytes",
        "index.interval.bytes",
        "preallocate",
        "flush.messages",
        "flush.ms",
        "file.delete.delay.ms",
        "unclean.leader.election.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "remote.storage.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "local.retention.ms",
        "local.retention.bytes",
    }
)


def validate_topic_name(name: str) -> None:
    if not name:
        raise ClusterError(ErrorCode.INVALID_TOPIC_NAME, "topic ''", "topic name is empty")
    if name in (".", ".."):
        raise ClusterError(
            ErrorCode.INVALID_TOPIC_NAME, f"topic {name!r}", f"topic name {name!r} is not allowed"
        )
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ClusterError(
            ErrorCode.INVALID_TOPIC_NAME,
            f"topic {name[:40]!r}...",
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}",
        )
    bad = sorted({c for c in name if c not in _LEGAL_NAME_CHARS})
    if bad:
        raise ClusterError(
            ErrorCode.INVALID_TOPIC_NAME,
            f"topic {name!r}",
            f"topic name {name!r} has illegal characters {''.join(bad)!r}; "
            "allowed: letters, digits, '.', '_' and '-'",
        )


# Kafka's internal topics: its group coordinator's offsets, its transaction
# coordinator's log, the metadata log. Here groups and transactions live in
# the metadata journal; a client topic by one of these names would be taken
# by Kafka tools for the real thing, so creating one is refused as Kafka
# refuses creating an internal topic.
KAFKA_INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__cluster_metadata", "__share_group_state"}
)


def check_creatable_topic_name(name: str) -> None:
    """A name a client may create a topic by: legal, and not one of Kafka's
    internal topics (INVALID_REQUEST, Kafka's answer)."""
    validate_topic_name(name)
    if name in KAFKA_INTERNAL_TOPICS:
        raise ClusterError(
            ErrorCode.INVALID_REQUEST,
            f"topic {name!r}",
            f"Creation of internal topic {name} is prohibited.",
        )


def valid_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except ClusterError:
        return False
    return True


def validate_partition_count(name: str, count: int) -> None:
    if count < 1 or count > MAX_PARTITIONS:
        raise ClusterError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {name!r}",
            f"topic {name!r}: partition count {count} is outside 1..{MAX_PARTITIONS}",
        )


def _refusal(topic: str, key: str, message: str) -> ClusterError:
    return ClusterError(
        ErrorCode.INVALID_CONFIG, f"topic {topic!r} config {key!r}", f"topic {topic!r}: {message}"
    )


def validate_configs(
    topic: str, configs: Mapping[str, str], defaults: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Checks every key and value as Kafka's LogConfig does (the type, the
    range or the valid values), then the combination they make with the
    cluster's topic defaults (`defaults`, by topic key): Kafka's
    min.compaction.lag.ms <= max.compaction.lag.ms, and no tiered storage.
    Returns the given configs (not the defaults)."""
    checked: dict[str, str] = {}
    for key in sorted(configs):
        value = configs[key]
        spec = CONFIG_KEYS.get(key)
        if spec is None:
            raise _refusal(
                topic,
                key,
                f"Unknown topic config name: {key} (docs/operations.md lists the topic configs)",
            )
        try:
            spec.parse(value)
        except ValueError as exc:
            raise _refusal(
                topic, key, f"Invalid value {value} for configuration {key}: {exc}"
            ) from exc
        checked[key] = value
    effective = TopicConfig.from_overrides(checked, defaults)
    if effective.min_compaction_lag_ms > effective.max_compaction_lag_ms:
        raise _refusal(
            topic,
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms "
            f"({effective.min_compaction_lag_ms}) > max.compaction.lag.ms "
            f"({effective.max_compaction_lag_ms})",
        )
    if effective.remote_storage:
        raise _refusal(
            topic,
            "remote.storage.enable",
            "Tiered Storage functionality is disabled in the broker. Topic cannot be "
            "configured with remote log storage.",
        )
    return checked


def effective_configs(
    overrides: Mapping[str, str], defaults: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every config's value for a topic with these overrides: its override,
    else the cluster's default (`defaults`, set by broker configs), else
    Kafka's. A key with no default (internal.segment.bytes) only when set."""
    out = {
        name: (defaults or {}).get(name, key.default)
        for name, key in CONFIG_KEYS.items()
        if key.default is not None or name in (defaults or {})
    }
    out.update(overrides)
    return {k: v for k, v in sorted(out.items()) if v is not None}


def _int(eff: Mapping[str, str], key: str) -> int:
    """A stored value, read by its type only: a value stored under an older
    rule (a segment.bytes below today's floor) still reads as what it was."""
    value = parse_value(CONFIG_KEYS[key].type, eff[key])
    assert isinstance(value, int), (key, value)
    return value


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Parsed view of a topic's effective configs."""

    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    segment_bytes: int
    log_append_time: bool
    compression: int | None  # the codec compression.type asks for; None: the producer's
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    compact: bool = False  # cleanup.policy holds compact
    delete: bool = True  # cleanup.policy holds delete (time and size retention)
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    remote_storage: bool = False

    @classmethod
    def from_overrides(
        cls, overrides: Mapping[str, str], defaults: Mapping[str, str] | None = None
    ) -> TopicConfig:
        eff = effective_configs(overrides, defaults)
        policy = parse_value(ConfigType.LIST, eff["cleanup.policy"])
        assert isinstance(policy, list)
        segment_bytes = _int(eff, "segment.bytes")
        if "internal.segment.bytes" in eff:  # Kafka's own override, below the floor
            segment_bytes = _int(eff, "internal.segment.bytes")
        return cls(
            retention_ms=_int(eff, "retention.ms"),
            retention_bytes=_int(eff, "retention.bytes"),
            max_message_bytes=_int(eff, "max.message.bytes"),
            segment_bytes=segment_bytes,
            log_append_time=eff["message.timestamp.type"].strip() == "LogAppendTime",
            compression=COMPRESSION_TYPES[eff["compression.type"].strip()],
            timestamp_before_max_ms=_int(eff, "message.timestamp.before.max.ms"),
            timestamp_after_max_ms=_int(eff, "message.timestamp.after.max.ms"),
            compact="compact" in policy,
            delete="delete" in policy,
            delete_retention_ms=_int(eff, "delete.retention.ms"),
            min_cleanable_dirty_ratio=float(eff["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=_int(eff, "min.compaction.lag.ms"),
            max_compaction_lag_ms=_int(eff, "max.compaction.lag.ms"),
            segment_ms=_int(eff, "segment.ms"),
            segment_jitter_ms=_int(eff, "segment.jitter.ms"),
            remote_storage=eff["remote.storage.enable"].strip().lower() == "true",
        )
