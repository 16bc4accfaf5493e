"""Broker and group configs in the core (linkd/core/broker_config.py): what
may be altered and how it is checked, which level and synonym wins, how
APPEND and SUBTRACT change a list, and that every topic takes a new server
default at once and keeps it across a journal replay."""

from __future__ import annotations

import pytest

from linkd.core import journal as jr
from linkd.core.broker_config import (
    AlterOp,
    BrokerConfigs,
    ConfigSource,
    describe_topic_configs,
    list_change,
    validate_group_configs,
)
from linkd.core.cluster import ClusterState, Journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.topic_config import ConfigType


def _code(call: object) -> ErrorCode:
    with pytest.raises(ClusterError) as info:
        call()  # type: ignore[operator]
    return info.value.code


def test_the_broker_s_own_level_beats_the_cluster_default_and_ms_beat_hours() -> None:
    brokers = BrokerConfigs()
    brokers.static = {"log.retention.hours": "2"}
    assert brokers.topic_defaults("0") == {"retention.ms": "7200000"}
    brokers.set_level("", {"log.retention.minutes": "30"})
    assert brokers.topic_defaults("0") == {"retention.ms": "1800000"}
    brokers.set_level("0", {"log.retention.hours": "1"})
    # Kafka merges the levels name by name, then takes the most precise name.
    assert brokers.topic_defaults("0") == {"retention.ms": "1800000"}
    brokers.set_level("0", {"log.retention.ms": "1000"})
    assert brokers.topic_defaults("0") == {"retention.ms": "1000"}
    [retention] = [d for d in describe_topic_configs({}, brokers, "0") if d.name == "retention.ms"]
    assert (retention.value, retention.source) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert retention.synonyms[0] == ("log.retention.ms", "1000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG) in retention.synonyms


def test_every_topic_takes_a_new_server_default_at_once_and_after_a_replay() -> None:
    state = ClusterState("A")
    state.create_topic("t", 1, {}, "id-t")
    state.create_topic("own", 1, {"segment.ms": "5000"}, "id-own")
    [effect] = state.alter_broker_configs("", {"log.roll.ms": "60000"}, [])
    assert isinstance(effect, Journal)
    assert state.topic("t").config.segment_ms == 60_000
    assert state.topic("t").configs()["segment.ms"] == "60000"
    assert state.topic("own").config.segment_ms == 5_000  # its own setting wins
    replayed = ClusterState("A")
    replayed.apply_record(jr.TopicCreate("t", "id-t", 1, {}))
    for record in effect.records:
        replayed.apply_record(record)
    assert replayed.topic("t").config.segment_ms == 60_000
    restored = ClusterState("A")
    restored.restore(state.snapshot())
    assert restored.topic("t").config.segment_ms == 60_000


def test_only_dynamic_configs_change_and_each_is_checked_as_kafka_checks_it() -> None:
    state = ClusterState("A")
    assert _code(lambda: state.alter_broker_configs("0", {"listeners": "x"}, [])) == (
        ErrorCode.INVALID_CONFIG
    )
    assert _code(lambda: state.alter_broker_configs("0", {"log.segment.bytes": "10"}, [])) == (
        ErrorCode.INVALID_CONFIG
    )
    assert _code(lambda: state.alter_broker_configs("7", {"log.retention.ms": "1"}, [])) == (
        ErrorCode.INVALID_REQUEST
    )
    # A default that an existing topic's settings no longer combine with.
    state.create_topic("c", 1, {"min.compaction.lag.ms": "5000"}, "id-c")
    conflict = {"log.cleaner.max.compaction.lag.ms": "1000"}
    assert _code(lambda: state.alter_broker_configs("", conflict, [])) == ErrorCode.INVALID_CONFIG
    assert state.broker_configs.levels == {}


@pytest.mark.parametrize(("op", "current", "default", "value", "expected"), [
    (AlterOp.APPEND, None, "delete", "compact", "delete,compact"),
    (AlterOp.APPEND, "compact", "delete", "compact,delete", "compact,delete"),
    (AlterOp.SUBTRACT, "delete,compact", "delete", "delete", "compact"),
    (AlterOp.SUBTRACT, None, "delete", "delete", ""),  # Kafka: an unset list is empty
])
def test_append_and_subtract_as_kafka_computes_them(
    op: AlterOp, current: str | None, default: str, value: str, expected: str
) -> None:
    assert list_change(op, "cleanup.policy", ConfigType.LIST, current, default, value) == expected


def test_append_to_a_config_that_is_not_a_list_is_refused() -> None:
    with pytest.raises(ClusterError, match=r"append is not allowed for config key: retention\.ms"):
        list_change(AlterOp.APPEND, "retention.ms", ConfigType.LONG, None, "1", "2")


def test_group_configs_lie_within_the_broker_s_bounds() -> None:
    assert validate_group_configs("g", {"consumer.session.timeout.ms": "60000"})
    for bad in ({"consumer.session.timeout.ms": "44999"},
                {"consumer.heartbeat.interval.ms": "16000"},
                {"share.auto.offset.reset": "middle"},
                {"group.id": "x"}):
        assert _code(lambda bad=bad: validate_group_configs("g", bad)) == ErrorCode.INVALID_CONFIG


def test_a_follower_copies_the_source_s_topic_configs_but_not_its_cluster_local_ones() -> None:
    """Every topic config crosses a link except the ones of one cluster's
    storage and replicas, which the follower keeps as its own."""
    from linkd.core import replication as rep

    follower = ClusterState("B")
    source = {"retention.ms": "60000", "segment.ms": "1000", "cleanup.policy": "compact",
              "segment.bytes": "2097152", "segment.index.bytes": "4096", "flush.ms": "5",
              "min.insync.replicas": "2", "unclean.leader.election.enable": "true"}
    rep.create_replica_topic(follower, "orders-1", 1, source, "fol-id")
    assert follower.topic("orders-1").overrides == {
        "retention.ms": "60000", "segment.ms": "1000", "cleanup.policy": "compact"}
    follower.alter_configs("orders-1", {"flush.ms": "9"}, [])  # its own, kept
    rep.follow_topic_shape(follower, "orders-1", 1, {**source, "retention.ms": "1000"})
    assert follower.topic("orders-1").overrides == {
        "retention.ms": "1000", "segment.ms": "1000", "cleanup.policy": "compact", "flush.ms": "9"}
