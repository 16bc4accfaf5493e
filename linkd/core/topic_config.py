"""Topic configs: the keys a topic accepts, their defaults and how they parse.

Names are Kafka's. Validation happens before anything is stored, and every
refusal names the key and the value. Values are kept as strings (Kafka's
DescribeConfigs shape) and parsed on use through `TopicConfig`.
"""

from __future__ import annotations

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


# Kafka's config types: an INT is 32 bits, a LONG 64, signed.
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


def _parse_long(min_value: int, max_value: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < min_value or value > max_value:
            raise ValueError(f"must be in {min_value}..{max_value}")
        return value

    return parse


def _parse_int(min_value: int) -> Callable[[str], int]:
    return _parse_long(min_value, INT_MAX)


def _parse_ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be a number in 0..1")
    return value


# cleanup.policy is a list in Kafka: "compact,delete" and "delete,compact" are one policy.
CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")


def _parse_policy(text: str) -> frozenset[str]:
    parts = [p.strip() for p in text.split(",")]
    if ",".join(parts) not in CLEANUP_POLICIES:
        raise ValueError(f"must be one of {', '.join(CLEANUP_POLICIES)}")
    return frozenset(parts)


def _parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text

    return parse


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: str
    parse: Callable[[str], object]
    doc: str


# Only keys whose behaviour the cluster implements are accepted: a key that is
# stored but ignored would mislead an operator.
CONFIG_KEYS: Mapping[str, ConfigKey] = {
    key.name: key
    for key in (
        ConfigKey(
            "retention.ms",
            "604800000",
            _parse_long(-1),
            "Delete batches whose newest record is older than this (-1: forever).",
        ),
        ConfigKey(
            "retention.bytes",
            "-1",
            _parse_long(-1),
            "Delete the oldest batches while the partition is larger (-1: no limit).",
        ),
        ConfigKey(
            "max.message.bytes",
            "1048588",
            _parse_int(0),
            "Largest record batch a producer may write.",
        ),
        ConfigKey(
            "segment.bytes", "67108864", _parse_int(14), "Size at which a new segment file starts."
        ),
        ConfigKey(
            "cleanup.policy",
            "delete",
            _parse_policy,
            "delete: time and size retention; compact: the log cleaner keeps the latest record "
            "of each key (offsets keep their gaps); compact,delete: both.",
        ),
        ConfigKey(
            "delete.retention.ms",
            "86400000",
            _parse_long(0),
            "Compacted topics: how long a tombstone (null value) stays readable after the "
            "cleaner first passed over it.",
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            "0.5",
            _parse_ratio,
            "Compacted topics: the cleaner starts when the bytes not cleaned yet are at least "
            "this share of the cleanable log.",
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            "0",
            _parse_long(0),
            "Compacted topics: records younger than this are never cleaned.",
        ),
        ConfigKey(
            "message.timestamp.type",
            "CreateTime",
            _parse_choice("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps batches on append.",
        ),
        ConfigKey(
            "message.timestamp.before.max.ms",
            str(LONG_MAX),
            _parse_long(0),
            "CreateTime: a record whose timestamp is further than this before the broker's "
            "time is refused (INVALID_TIMESTAMP).",
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            str(LONG_MAX),
            _parse_long(0),
            "CreateTime: a record whose timestamp is further than this after the broker's "
            "time is refused (INVALID_TIMESTAMP).",
        ),
        ConfigKey(
            "compression.type",
            "producer",
            _parse_choice(*COMPRESSION_TYPES),
            "producer: batches are stored as produced; uncompressed, gzip, snappy, lz4 or "
            "zstd: a produced batch in another codec is recompressed into this one (a "
            "replicated batch is always stored as its source holds it).",
        ),
        ConfigKey(
            "min.insync.replicas",
            "1",
            _parse_int(1),
            "Accepted for compatibility; a simulated cluster has one replica per partition.",
        ),
    )
}

# Configs that belong to one cluster and are never copied to a replica.
CLUSTER_LOCAL_KEYS = frozenset({"min.insync.replicas", "segment.bytes"})


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


def validate_configs(topic: str, configs: Mapping[str, str]) -> dict[str, str]:
    """Checks every key and value; returns the given configs (not the defaults)."""
    checked: dict[str, str] = {}
    for key in sorted(configs):
        value = configs[key]
        spec = CONFIG_KEYS.get(key)
        if spec is None:
            raise ClusterError(
                ErrorCode.INVALID_CONFIG,
                f"topic {topic!r} config {key!r}",
                f"topic {topic!r}: unknown config {key!r}; known: {', '.join(sorted(CONFIG_KEYS))}",
            )
        try:
            spec.parse(value)
        except ValueError as exc:
            raise ClusterError(
                ErrorCode.INVALID_CONFIG,
                f"topic {topic!r} config {key!r}",
                f"topic {topic!r}: config {key}={value!r} is invalid: {exc}",
            ) from exc
        checked[key] = value
    return checked


def effective_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    out = {name: key.default for name, key in CONFIG_KEYS.items()}
    out.update(overrides)
    return dict(sorted(out.items()))


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

    @classmethod
    def from_overrides(cls, overrides: Mapping[str, str]) -> TopicConfig:
        eff = effective_configs(overrides)
        policy = _parse_policy(eff["cleanup.policy"])
        return cls(
            retention_ms=int(eff["retention.ms"]),
            retention_bytes=int(eff["retention.bytes"]),
            max_message_bytes=int(eff["max.message.bytes"]),
            segment_bytes=int(eff["segment.bytes"]),
            log_append_time=eff["message.timestamp.type"] == "LogAppendTime",
            compression=COMPRESSION_TYPES[eff["compression.type"]],
            timestamp_before_max_ms=int(eff["message.timestamp.before.max.ms"]),
            timestamp_after_max_ms=int(eff["message.timestamp.after.max.ms"]),
            compact="compact" in policy,
            delete="delete" in policy,
            delete_retention_ms=int(eff["delete.retention.ms"]),
            min_cleanable_dirty_ratio=float(eff["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(eff["min.compaction.lag.ms"]),
        )
