"""mm2.properties: Java properties syntax and MM2's precedence (linkd/core/mirror/properties.py,
config.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.mirror.config import MirrorConfigError, parse_mm2_properties
from linkd.core.mirror.exactly_once import ExactlyOnceRequirement, ExactlyOnceSourceSupport
from linkd.core.mirror.policy import PolicyKind
from linkd.core.mirror.properties import PropertyLine, parse_properties

DET = settings(derandomize=True, max_examples=200, deadline=None)


# -- Java properties syntax -------------------------------------------------------------------


def test_separators_comments_and_blank_lines() -> None:
    text = "# comment\n! also\n\n a = 1\nb: 2\nc 3\nd=\ne\n  f  =  x y  \n"
    assert parse_properties(text) == (
        PropertyLine("a", "1", 4),
        PropertyLine("b", "2", 5),
        PropertyLine("c", "3", 6),
        PropertyLine("d", "", 7),
        PropertyLine("e", "", 8),
        PropertyLine("f", "x y  ", 9),
    )


def test_line_continuations_and_escapes() -> None:
    text = (
        "topics = a, \\\n    b, \\\n    c\n"
        "k\\ ey\\=x = v\\tw\\u0041\\q\n"
        "# not \\\ncontinued = yes\n"
    )
    props = parse_properties(text)
    assert props[0] == PropertyLine("topics", "a, b, c", 1)
    assert props[1] == PropertyLine("k ey=x", "v\twAq", 4)
    assert props[2] == PropertyLine("continued", "yes", 6)


def test_an_even_number_of_backslashes_does_not_continue() -> None:
    assert parse_properties("a = x\\\\\nb = y") == (
        PropertyLine("a", "x\\", 1),
        PropertyLine("b", "y", 2),
    )


def test_crlf_and_cr_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3") == (
        PropertyLine("a", "1", 1),
        PropertyLine("b", "2", 2),
        PropertyLine("c", "3", 3),
    )


def test_a_malformed_unicode_escape_is_an_error_with_its_line() -> None:
    with pytest.raises(MirrorConfigError, match="line 2"):
        parse_mm2_properties("clusters = A\nA.bootstrap.servers = \\u00zz\n")


@DET
@given(key=st.text(min_size=1, max_size=12), value=st.text(max_size=12))
def test_escaped_key_and_value_round_trip(key: str, value: str) -> None:
    def escape(s: str, is_key: bool) -> str:
        out = []
        for i, c in enumerate(s):
            if c in "\\=:#! \t\f" and (is_key or c == "\\" or (i == 0 and c in " \t\f")):
                out.append("\\" + c)
            elif c == "\n":
                out.append("\\n")
            elif c == "\r":
                out.append("\\r")
            elif c in "#!" and is_key and i == 0:
                out.append("\\" + c)
            else:
                out.append(c)
        return "".join(out)

    # Only \n and \r end a line in Java: \x0b, \x85, \u2028 and friends stay text.
    line = f"{escape(key, True)}={escape(value, False)}"
    assert parse_properties(line) == (PropertyLine(key, value, 1),)


# -- mm2.properties ---------------------------------------------------------------------------

BASE = """
clusters = A, B
A.bootstrap.servers = a1:9092, a2:9092
B.bootstrap.servers = b1:9092
"""


def test_defaults_of_an_enabled_flow() -> None:
    cfg = parse_mm2_properties(BASE + "A->B.enabled = true\n")
    assert cfg.warnings == ()
    assert [c.bootstrap_servers for c in cfg.clusters] == [("a1:9092", "a2:9092"), ("b1:9092",)]
    f = cfg.flow("A", "B")
    assert f.enabled and f.name == "A->B"
    assert f.policy.kind is PolicyKind.DEFAULT and f.policy.separator == "."
    assert f.offset_lag_max == 100
    assert f.offset_flush_interval_ms == 60_000
    assert f.emit_heartbeats_interval_ms == 1_000
    assert f.emit_checkpoints_interval_ms == 60_000
    assert f.sync_group_offsets_enabled is False
    assert f.sync_group_offsets_interval_ms == 60_000
    assert f.refresh_topics_interval_ms == 600_000
    assert f.replication_factor == 2
    assert f.exactly_once is False
    assert f.exactly_once_support is ExactlyOnceRequirement.REQUESTED
    assert f.topic_filter.should_replicate_topic("orders")
    assert not f.topic_filter.should_replicate_topic("__consumer_offsets")
    assert not f.group_filter.should_replicate_group("console-consumer-1")
    assert f.offset_syncs_topic() == "mm2-offset-syncs.B.internal"
    assert f.checkpoints_topic() == "A.checkpoints.internal"
    assert f.heartbeats_topic() == "heartbeats"
    # B->A exists for heartbeats only (MirrorMakerConfig.clusterPairs).
    assert not cfg.flow("B", "A").enabled
    assert [x.name for x in cfg.enabled_flows()] == ["A->B"]


def test_flow_overrides_beat_top_level_which_beat_defaults() -> None:
    cfg = parse_mm2_properties(
        BASE
        + """
A->B.enabled = true
B->A.enabled = true
offset.lag.max = 50
A->B.offset.lag.max = 10
topics = orders.*, payments
B->A.topics = audit
replication.policy.separator = _
sync.group.offsets.enabled = true
sync.group.offsets.interval.seconds = 5
emit.checkpoints.interval.seconds = 7
refresh.topics.interval.seconds = 30
replication.factor = 3
"""
    )
    ab, ba = cfg.flow("A", "B"), cfg.flow("B", "A")
    assert (ab.offset_lag_max, ba.offset_lag_max) == (10, 50)
    assert ab.topic_filter.should_replicate_topic("orders-eu")
    assert not ab.topic_filter.should_replicate_topic("audit")
    assert ba.topic_filter.should_replicate_topic("audit")
    assert ab.policy.separator == "_" and ab.policy.format_remote_topic("A", "t") == "A_t"
    assert ab.sync_group_offsets_enabled and ab.sync_group_offsets_interval_ms == 5_000
    assert ab.emit_checkpoints_interval_ms == 7_000
    assert ab.refresh_topics_interval_ms == 30_000
    assert ab.replication_factor == 3
    assert ab.properties["offset.lag.max"] == "10"


def test_cluster_level_keys_feed_clients_and_workers_not_connectors() -> None:
    cfg = parse_mm2_properties(
        BASE
        + """
A->B.enabled = true
security.protocol = SSL
B.security.protocol = SASL_SSL
B.offset.flush.interval.ms = 5000
B.exactly.once.source.support = enabled
A.offset.lag.max = 7
A.producer.acks = all
"""
    )
    assert cfg.cluster("A").security_protocol == "SSL"
    assert cfg.cluster("B").security_protocol == "SASL_SSL"
    assert cfg.cluster("A").client_properties["producer.acks"] == "all"
    f = cfg.flow("A", "B")
    assert f.offset_flush_interval_ms == 5_000
    assert f.exactly_once and f.exactly_once_source_support is ExactlyOnceSourceSupport.ENABLED
    assert f.offset_lag_max == 100  # A.offset.lag.max is not a connector property in MM2
    assert [(w.line, w.key) for w in cfg.warnings] == [(11, "A.offset.lag.max")]


def test_identity_policy_and_exactly_once_requirement() -> None:
    cfg = parse_mm2_properties(
        BASE
        + """
A->B.enabled = true
replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy
A->B.exactly.once.support = REQUIRED
"""
    )
    f = cfg.flow("A", "B")
    assert f.policy.kind is PolicyKind.IDENTITY
    assert f.policy.topic_source("orders") == "A"
    assert f.policy.format_remote_topic("A", "orders") == "orders"
    assert f.exactly_once_support is ExactlyOnceRequirement.REQUIRED


def test_unknown_keys_are_reported_with_line_numbers() -> None:
    cfg = parse_mm2_properties(
        BASE
        + """
A->B.enabled = true
offset.lag.maxx = 3
A->B.sync.group.offset.enabled = true
C->A.enabled = true
Z.bootstrap.servers = z:1
offset.flush.interval.ms = 1000
A->B.topics.blacklist = secret.*
A->B.enabled = false
"""
    )
    by_key = {w.key: w for w in cfg.warnings}
    assert by_key["offset.lag.maxx"].line == 7
    assert "unknown" in by_key["A->B.sync.group.offset.enabled"].message
    assert "not listed" in by_key["C->A.enabled"].message
    assert "unknown" in by_key["Z.bootstrap.servers"].message
    assert "ignores" in by_key["offset.flush.interval.ms"].message
    assert "deprecated" in by_key["A->B.topics.blacklist"].message
    assert "duplicate" in by_key["A->B.enabled"].message and by_key["A->B.enabled"].line == 13
    # The last value wins; the deprecated exclude list is honoured.
    f = cfg.flow("A", "B")
    assert not f.enabled
    assert not f.topic_filter.should_replicate_topic("secret-1")
    assert f.topic_filter.should_replicate_topic(
        "__consumer_offsets"
    )  # the alias replaced the default


def test_new_exclude_name_wins_over_the_deprecated_one() -> None:
    cfg = parse_mm2_properties(BASE + "topics.exclude = a\ntopics.blacklist = b\n")
    f = cfg.flow("A", "B")
    assert not f.topic_filter.should_replicate_topic("a")
    assert f.topic_filter.should_replicate_topic("b")
    assert any("wins" in w.message for w in cfg.warnings)


@pytest.mark.parametrize(
    ("extra", "key", "line"),
    [
        ("A->B.enabled = yes\n", "A->B.enabled", 5),
        ("offset.lag.max = -1\n", "offset.lag.max", 5),
        ("offset.lag.max = 1_000\n", "offset.lag.max", 5),
        ("emit.checkpoints.interval.seconds = 0\n", "emit.checkpoints.interval.seconds", 5),
        ("replication.policy.class = com.example.MyPolicy\n", "replication.policy.class", 5),
        ("replication.policy.separator =   \n", "replication.policy.separator", 5),
        ("topics = (unclosed\n", "topics", 5),
        ("B.exactly.once.source.support = sometimes\n", "B.exactly.once.source.support", 5),
        ("replication.factor = 0\n", "replication.factor", 5),
        ("A.security.protocol = TLS\n", "A.security.protocol", 5),
    ],
)
def test_invalid_values_name_key_line_and_value(extra: str, key: str, line: int) -> None:
    with pytest.raises(MirrorConfigError) as info:
        parse_mm2_properties(BASE + extra)
    err = info.value
    assert (err.key, err.line) == (key, line)
    assert err.value is not None and key in str(err) and f"line {line}" in str(err)


def test_missing_clusters_or_bootstrap_servers_are_errors() -> None:
    with pytest.raises(MirrorConfigError, match="clusters"):
        parse_mm2_properties("A.bootstrap.servers = a:1\n")
    with pytest.raises(MirrorConfigError, match=r"B\.bootstrap\.servers"):
        parse_mm2_properties("clusters = A, B\nA.bootstrap.servers = a:1\n")


def test_heartbeats_disabled_removes_heartbeat_only_pairs() -> None:
    cfg = parse_mm2_properties(BASE + "emit.heartbeats.enabled = false\nA->B.enabled = true\n")
    assert [f.name for f in cfg.flows] == ["A->B"]


def test_three_cluster_active_active_file() -> None:
    text = """
clusters = us, eu, ap
us.bootstrap.servers = us:9092
eu.bootstrap.servers = eu:9092
ap.bootstrap.servers = ap:9092
us->eu.enabled = true
eu->us.enabled = true
us->ap.enabled = true
ap->us.enabled: true
eu->ap.enabled true
"""
    cfg = parse_mm2_properties(text)
    assert sorted(f.name for f in cfg.enabled_flows()) == [
        "ap->us",
        "eu->ap",
        "eu->us",
        "us->ap",
        "us->eu",
    ]
    assert cfg.warnings == ()
