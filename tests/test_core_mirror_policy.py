"""Replication policies, filters, cycles and reachability (linkd/core/mirror/policy.py, filters.py,
heartbeat.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.mirror.filters import (
    ConfigPropertyFilter,
    GroupFilter,
    PatternList,
    TopicFilter,
    parse_list,
)
from linkd.core.mirror.heartbeat import (
    HeartbeatSchedule,
    checkpoint_topics,
    heartbeat_topics,
    remote_topics,
    replication_hops,
    upstream_clusters,
)
from linkd.core.mirror.model import Heartbeat
from linkd.core.mirror.policy import PolicyKind, ReplicationPolicy
from linkd.core.mirror.topic_sync import should_replicate_topic

DET = settings(derandomize=True, max_examples=300, deadline=None)
DEFAULT = ReplicationPolicy()
IDENTITY = ReplicationPolicy(kind=PolicyKind.IDENTITY, source_cluster_alias="A")

alias = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
topic_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=20)
separator = st.sampled_from([".", "_", "__", "-", "::"])


# -- naming -----------------------------------------------------------------------------------


def test_default_policy_names_remote_topics_with_the_source_alias() -> None:
    assert DEFAULT.format_remote_topic("us-west", "clicks") == "us-west.clicks"
    assert DEFAULT.topic_source("us-west.clicks") == "us-west"
    assert DEFAULT.upstream_topic("us-west.clicks") == "clicks"
    assert DEFAULT.topic_source("clicks") is None
    assert DEFAULT.upstream_topic("clicks") is None
    assert DEFAULT.original_topic("B.A.clicks") == "clicks"
    assert DEFAULT.upstream_topic("B.A.clicks") == "A.clicks"


def test_default_policy_follows_javas_split_for_trailing_and_leading_separators() -> None:
    # "A." and "A.." split into ["A"] in Java: not remote topics.
    assert DEFAULT.topic_source("A.") is None
    assert DEFAULT.topic_source("A..") is None
    # ".t" splits into ["", "t"]: the empty source.
    assert DEFAULT.topic_source(".t") == ""
    assert DEFAULT.topic_source("A..t") == "A"
    assert DEFAULT.upstream_topic("A..t") == ".t"


def test_custom_separator_names_topics_and_internal_topics() -> None:
    p = ReplicationPolicy(separator="_")
    assert p.format_remote_topic("A", "t.x") == "A_t.x"
    assert p.topic_source("A_t.x") == "A"
    assert p.checkpoints_topic("A") == "A_checkpoints_internal"
    assert p.offset_syncs_topic("B") == "mm2-offset-syncs_B_internal"
    legacy = ReplicationPolicy(separator="_", internal_topic_separator_enabled=False)
    assert legacy.checkpoints_topic("A") == "A.checkpoints.internal"
    assert legacy.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"


def test_mm2_topic_names_with_the_default_separator() -> None:
    assert DEFAULT.heartbeats_topic() == "heartbeats"
    assert DEFAULT.checkpoints_topic("A") == "A.checkpoints.internal"
    assert DEFAULT.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert DEFAULT.is_checkpoints_topic("A.checkpoints.internal")
    assert DEFAULT.is_heartbeats_topic("heartbeats")
    assert DEFAULT.is_heartbeats_topic("B.A.heartbeats")
    assert not DEFAULT.is_heartbeats_topic("B.A.heartbeats2")


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        ".hidden",
        "connect-offsets-internal",
        "mm2-offset-syncs.B.internal",
        "A.checkpoints.internal",
        "x.internal",
    ],
)
def test_internal_topics_are_recognised(topic: str) -> None:
    assert DEFAULT.is_internal_topic(topic)


@pytest.mark.parametrize("topic", ["clicks", "A.clicks", "internal", "internals", "_one"])
def test_ordinary_topics_are_not_internal(topic: str) -> None:
    assert not DEFAULT.is_internal_topic(topic)


def test_identity_policy_keeps_names_but_not_for_heartbeats() -> None:
    assert IDENTITY.format_remote_topic("A", "clicks") == "clicks"
    assert IDENTITY.topic_source("clicks") == "A"
    assert IDENTITY.upstream_topic("clicks") == "clicks"
    assert IDENTITY.original_topic("clicks") == "clicks"
    assert IDENTITY.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert IDENTITY.topic_source("B.A.heartbeats") == "B"
    assert IDENTITY.original_topic("B.A.heartbeats") == "heartbeats"


def test_an_empty_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="separator"):
        ReplicationPolicy(separator="")


@DET
@given(source=alias, topic=topic_name, sep=separator)
def test_naming_round_trips(source: str, topic: str, sep: str) -> None:
    p = ReplicationPolicy(separator=sep)
    remote = p.format_remote_topic(source, topic)
    if remote.find(sep) != len(source):
        # An alias that overlaps the separator ("_" with "__") is ambiguous in Kafka too.
        return
    if topic.replace(sep, "") == "":
        return  # Java's split drops trailing empties: "A." + "." is not a remote topic
    assert p.topic_source(remote) == source
    assert p.upstream_topic(remote) == topic


@DET
@given(hops=st.lists(alias, min_size=1, max_size=6), topic=topic_name)
def test_original_topic_strips_every_hop(hops: list[str], topic: str) -> None:
    if "." in topic:
        return
    name = topic
    for a in hops:
        name = DEFAULT.format_remote_topic(a, name)
    assert DEFAULT.original_topic(name) == topic
    # MirrorClient.allSources stops at the first repeated alias (its cycle guard).
    expected: list[str] = []
    for a in reversed(hops):
        if a in expected:
            break
        expected.append(a)
    assert DEFAULT.all_sources(name) == tuple(expected)


# -- cycles -----------------------------------------------------------------------------------


def test_a_topic_from_the_target_is_a_cycle() -> None:
    assert DEFAULT.is_cycle("B.clicks", "B")
    assert DEFAULT.is_cycle("A.B.clicks", "B")
    assert not DEFAULT.is_cycle("A.clicks", "B")
    assert not DEFAULT.is_cycle("clicks", "B")


def test_active_active_never_loops() -> None:
    # A->B and B->A: B's copy of A's topic must not go back to A.
    f = TopicFilter()
    on_b = DEFAULT.format_remote_topic("A", "clicks")
    assert should_replicate_topic("clicks", policy=DEFAULT, topic_filter=f, target_alias="B")
    assert not should_replicate_topic(on_b, policy=DEFAULT, topic_filter=f, target_alias="A")


@DET
@given(
    clusters=st.lists(alias, min_size=2, max_size=5, unique=True),
    edges=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=12),
    rounds=st.integers(1, 6),
)
def test_any_topology_replicates_each_topic_to_each_cluster_at_most_through_new_hops(
    clusters: list[str], edges: list[tuple[int, int]], rounds: int
) -> None:
    """Flood topics along arbitrary flows; no cluster ever appears twice in a name's chain."""
    n = len(clusters)
    flows = sorted({(clusters[a % n], clusters[b % n]) for a, b in edges if a % n != b % n})
    topics: dict[str, set[str]] = {c: {"t", "heartbeats"} for c in clusters}
    f = TopicFilter()
    for _ in range(rounds):
        for source, target in flows:
            for t in sorted(topics[source]):
                if should_replicate_topic(t, policy=DEFAULT, topic_filter=f, target_alias=target):
                    topics[target].add(DEFAULT.format_remote_topic(source, t))
    for cluster, names in topics.items():
        for name in names:
            chain = DEFAULT.all_sources(name)
            assert cluster not in chain
            assert len(chain) == len(set(chain))
            assert len(chain) <= n - 1


# -- filters ----------------------------------------------------------------------------------


def test_default_topic_filter_excludes_internal_and_replica_topics() -> None:
    f = TopicFilter()
    assert f.should_replicate_topic("clicks")
    for t in ["x.internal", "x-internal", "y.replica", "__consumer_offsets"]:
        assert not f.should_replicate_topic(t), t


def test_default_group_filter_excludes_console_connect_and_internal_groups() -> None:
    f = GroupFilter()
    assert f.should_replicate_group("payments")
    for g in ["console-consumer-123", "connect-mirror", "__x"]:
        assert not f.should_replicate_group(g), g


def test_default_config_filter_excludes_cluster_local_properties() -> None:
    f = ConfigPropertyFilter()
    assert f.should_replicate_config_property("retention.ms")
    assert f.should_replicate_config_property("cleanup.policy")
    for name in [
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "message.timestamp.type",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
    ]:
        assert not f.should_replicate_config_property(name), name


def test_pattern_lists_match_whole_names_only() -> None:
    p = PatternList.parse("orders, pay.*")
    assert p.matches("orders") and p.matches("payments")
    assert not p.matches("orders2") and not p.matches("xpay")
    assert PatternList.parse("").matches("")
    assert not PatternList.parse("").matches("a")
    assert parse_list(" a , b ,") == ("a", "b", "")


@DET
@given(names=st.lists(topic_name, min_size=1, max_size=5), probe=topic_name)
def test_a_list_of_literal_names_matches_exactly_those_names(names: list[str], probe: str) -> None:
    p = PatternList.of([re.escape(n) for n in names])
    assert p.matches(probe) == (probe in names)


@DET
@given(
    include=st.lists(topic_name, max_size=3),
    exclude=st.lists(topic_name, max_size=3),
    probe=topic_name,
)
def test_exclude_wins_over_include(include: list[str], exclude: list[str], probe: str) -> None:
    f = TopicFilter(
        PatternList.of([re.escape(n) for n in include]),
        PatternList.of([re.escape(n) for n in exclude]),
    )
    assert f.should_replicate_topic(probe) == (probe in include and probe not in exclude)


# -- heartbeats and reachability --------------------------------------------------------------


def test_heartbeat_schedule_emits_once_per_interval_without_bursts() -> None:
    s = HeartbeatSchedule("A", "B", interval_ms=1000)
    s, beat = s.poll(0)
    assert beat == Heartbeat("A", "B", 0)
    s, beat = s.poll(999)
    assert beat is None
    s, beat = s.poll(5000)  # late: one heartbeat, next due an interval later
    assert beat == Heartbeat("A", "B", 5000)
    assert s.next_due_ms == 6000


def test_reachability_from_heartbeat_chains() -> None:
    on_c = [
        "heartbeats",
        "B.heartbeats",
        "B.A.heartbeats",
        "A.heartbeats",
        "B.clicks",
        "B.checkpoints.internal",
        "__consumer_offsets",
        "local",
    ]
    assert heartbeat_topics(on_c, DEFAULT) == (
        "A.heartbeats",
        "B.A.heartbeats",
        "B.heartbeats",
        "heartbeats",
    )
    assert upstream_clusters(on_c, DEFAULT) == ("A", "B")
    assert replication_hops(on_c, DEFAULT, "B") == 1
    assert replication_hops(on_c, DEFAULT, "A") == 1  # direct A.heartbeats beats B.A.heartbeats
    assert replication_hops(on_c, DEFAULT, "Z") == -1
    assert replication_hops(["B.A.heartbeats"], DEFAULT, "A") == 2
    assert checkpoint_topics(on_c, DEFAULT) == ("B.checkpoints.internal",)
    assert remote_topics(on_c, DEFAULT) == (
        "A.heartbeats",
        "B.A.heartbeats",
        "B.clicks",
        "B.heartbeats",
    )
    assert remote_topics(on_c, DEFAULT, source="B") == (
        "B.A.heartbeats",
        "B.clicks",
        "B.heartbeats",
    )


def test_heartbeats_are_replicated_even_when_the_filter_excludes_them() -> None:
    f = TopicFilter(PatternList.parse("orders"), PatternList.parse(""))
    assert should_replicate_topic("heartbeats", policy=DEFAULT, topic_filter=f, target_alias="B")
    assert should_replicate_topic("C.heartbeats", policy=DEFAULT, topic_filter=f, target_alias="B")
    assert not should_replicate_topic(
        "B.heartbeats", policy=DEFAULT, topic_filter=f, target_alias="B"
    )
    assert not should_replicate_topic("clicks", policy=DEFAULT, topic_filter=f, target_alias="B")
