"""Topic, group and config-property filters, with MM2's defaults.

Rules (Kafka's DefaultTopicFilter, DefaultGroupFilter, DefaultConfigPropertyFilter,
MirrorUtils.compilePatternList):
- A filter value is a comma-separated list of names and/or regular expressions
  (Connect's LIST type: split on commas, each item trimmed). The list compiles to
  one pattern, the items joined with "|"; a name matches when the WHOLE name
  matches (Java's `Matcher.matches`). An empty list matches only "".
- Topics: replicate when the include list matches and the exclude list does not.
  Defaults: include `.*`, exclude `.*[\\-\\.]internal, .*\\.replica, __.*`.
- Groups: same rule. Defaults: include `.*`, exclude
  `console-consumer-.*, connect-.*, __.*`.
- Config properties: replicate a topic config property unless the exclude list
  matches. Defaults: the throttled-replica lists, the timestamp settings,
  unclean leader election and min.insync.replicas, which are cluster-local.
- Patterns use Python's `re`, whose syntax agrees with Java's for the usual
  constructs (classes, quantifiers, groups, escapes); Java-only syntax is refused
  at configuration time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "CONFIG_PROPERTIES_EXCLUDE_DEFAULT",
    "GROUPS_EXCLUDE_DEFAULT",
    "GROUPS_INCLUDE_DEFAULT",
    "TOPICS_EXCLUDE_DEFAULT",
    "TOPICS_INCLUDE_DEFAULT",
    "ConfigPropertyFilter",
    "GroupFilter",
    "PatternList",
    "TopicFilter",
    "parse_list",
]

TOPICS_INCLUDE_DEFAULT = ".*"
TOPICS_EXCLUDE_DEFAULT = r".*[\-\.]internal, .*\.replica, __.*"
GROUPS_INCLUDE_DEFAULT = ".*"
GROUPS_EXCLUDE_DEFAULT = "console-consumer-.*, connect-.*, __.*"
CONFIG_PROPERTIES_EXCLUDE_DEFAULT = (
    r"follower\.replication\.throttled\.replicas, "
    r"leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, "
    r"message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas"
)


def parse_list(value: str) -> tuple[str, ...]:
    """Connect's LIST parsing: "" is the empty list, else split on commas, trimmed."""
    trimmed = value.strip()
    if not trimmed:
        return ()
    return tuple(item.strip() for item in trimmed.split(","))


@dataclass(frozen=True, slots=True)
class PatternList:
    """A compiled list of names/regexes that matches whole names (compilePatternList)."""

    items: tuple[str, ...]
    pattern: re.Pattern[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # re.error names the bad pattern; config.py turns it into a MirrorConfigError.
        object.__setattr__(self, "pattern", re.compile("|".join(self.items)))

    @classmethod
    def parse(cls, value: str) -> PatternList:
        return cls(parse_list(value))

    @classmethod
    def of(cls, items: Sequence[str]) -> PatternList:
        return cls(tuple(items))

    def matches(self, name: str) -> bool:
        return self.pattern.fullmatch(name) is not None


# Compiled defaults, shared: a PatternList is immutable.
_TOPICS_INCLUDE = PatternList.parse(TOPICS_INCLUDE_DEFAULT)
_TOPICS_EXCLUDE = PatternList.parse(TOPICS_EXCLUDE_DEFAULT)
_GROUPS_INCLUDE = PatternList.parse(GROUPS_INCLUDE_DEFAULT)
_GROUPS_EXCLUDE = PatternList.parse(GROUPS_EXCLUDE_DEFAULT)
_CONFIG_PROPERTIES_EXCLUDE = PatternList.parse(CONFIG_PROPERTIES_EXCLUDE_DEFAULT)


@dataclass(frozen=True, slots=True)
class TopicFilter:
    include: PatternList = _TOPICS_INCLUDE
    exclude: PatternList = _TOPICS_EXCLUDE

    def should_replicate_topic(self, topic: str) -> bool:
        return self.include.matches(topic) and not self.exclude.matches(topic)


@dataclass(frozen=True, slots=True)
class GroupFilter:
    include: PatternList = _GROUPS_INCLUDE
    exclude: PatternList = _GROUPS_EXCLUDE

    def should_replicate_group(self, group: str) -> bool:
        return self.include.matches(group) and not self.exclude.matches(group)


@dataclass(frozen=True, slots=True)
class ConfigPropertyFilter:
    exclude: PatternList = _CONFIG_PROPERTIES_EXCLUDE

    def should_replicate_config_property(self, name: str) -> bool:
        return not self.exclude.matches(name)
