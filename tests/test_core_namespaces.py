"""Namespaces (spec section 2): the pure table, and the cluster refusing client
writes into reserved namespaces (spec section 6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from linkd.core import records as rb
from linkd.core.cluster import ClusterState, Journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.journal import NsDetach, NsReserved, encode
from linkd.core.namespaces import (
    FOLLOWER,
    LEADER,
    Namespace,
    NamespaceTable,
    ResourceType,
)

NOW = 1_700_000_000_000
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
PRINCIPAL = ResourceType.PRINCIPAL


def refusal(call: Callable[[], object]) -> ClusterError:
    with pytest.raises(ClusterError) as info:
        call()
    return info.value


def batch(n: int = 1) -> bytes:
    return rb.build_batch([rb.RecordSpec(None, b"x", NOW + i) for i in range(n)])


def prefixes(namespaces: list[Namespace]) -> list[str]:
    return [ns.prefix for ns in namespaces]


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


def test_create__returns_a_record__and_refuses_duplicates_naming_the_namespace() -> None:
    table = NamespaceTable()
    records = table.create(TOPIC, "orders-", reserved=False)
    assert [encode(r) for r in records] == [
        {"type": "ns_create", "resource_type": "topic", "prefix": "orders-", "reserved": False}
    ]
    ns = table.get(TOPIC, "orders-")
    assert (ns.type, ns.prefix, ns.reserved, ns.attachments) == (TOPIC, "orders-", False, [])
    err = refusal(lambda: table.create(TOPIC, "orders-", reserved=True))
    assert err.code == ErrorCode.NAMESPACE_EXISTS
    assert err.resource == "topic namespace 'orders-'"
    assert "topic namespace 'orders-' already exists" in err.message
    # The same prefix of another type is another namespace.
    table.create(GROUP, "orders-", reserved=True)
    assert table.get(GROUP, "orders-").reserved and not table.get(TOPIC, "orders-").reserved


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [
        (TOPIC, "bad prefix"),
        (TOPIC, "orders/"),
        (TOPIC, "ördérs"),
        (TOPIC, "x" * 250),
        (GROUP, "has space"),
        (GROUP, "tab\t"),
        (GROUP, "nl\n"),
        (PRINCIPAL, "User:a b"),
        (GROUP, "g" * 256),
    ],
)
def test_create__refuses_invalid_prefixes(kind: ResourceType, prefix: str) -> None:
    table = NamespaceTable()
    err = refusal(lambda: table.create(kind, prefix))
    assert err.code == ErrorCode.INVALID_NAMESPACE
    assert f"{kind.label} namespace" in err.message
    assert len(table) == 0


def test_create__accepts_legal_prefixes_and_refuses_an_unspecified_type() -> None:
    table = NamespaceTable()
    for kind, prefix in [
        (TOPIC, ""),
        (TOPIC, "a.B_c-9"),
        (TOPIC, "x" * 249),
        (GROUP, "grüppe:/*"),
        (PRINCIPAL, "User:svc-"),
    ]:
        table.create(kind, prefix)
    assert len(table) == 5
    assert refusal(lambda: table.create(0, "x")).code == ErrorCode.INVALID_NAMESPACE
    assert refusal(lambda: table.create(7, "x")).code == ErrorCode.INVALID_NAMESPACE
    assert ResourceType.parse("Group") is GROUP
    assert refusal(lambda: ResourceType.parse("cluster")).code == ErrorCode.INVALID_NAMESPACE


def test_get_and_list__sorted_by_type_then_prefix() -> None:
    table = NamespaceTable()
    for kind, prefix in [(GROUP, "b"), (TOPIC, "z"), (TOPIC, ""), (GROUP, "a"), (PRINCIPAL, "p")]:
        table.create(kind, prefix)
    assert [(ns.type, ns.prefix) for ns in table.list()] == [
        (TOPIC, ""),
        (TOPIC, "z"),
        (GROUP, "a"),
        (GROUP, "b"),
        (PRINCIPAL, "p"),
    ]
    assert prefixes(table.list(GROUP)) == ["a", "b"]
    assert len(table.list(ResourceType.UNSPECIFIED)) == 5
    err = refusal(lambda: table.get(TOPIC, "nope"))
    assert err.code == ErrorCode.UNKNOWN_NAMESPACE and "topic namespace 'nope'" in err.message


def test_contains__the_empty_prefix_excludes_internal_names() -> None:
    everything = Namespace(TOPIC, "")
    underscored = Namespace(TOPIC, "_")
    assert NamespaceTable.contains(everything, "orders")
    assert not NamespaceTable.contains(everything, "__consumer_offsets")
    assert not NamespaceTable.contains(everything, "_schemas")
    assert NamespaceTable.contains(underscored, "_schemas")
    assert NamespaceTable.contains(Namespace(TOPIC, "orders-"), "orders-eu")
    assert not NamespaceTable.contains(Namespace(TOPIC, "orders-"), "orders")


def test_overlaps__one_prefix_is_a_prefix_of_the_other__same_type_only() -> None:
    a, ab, b = Namespace(TOPIC, "a"), Namespace(TOPIC, "ab"), Namespace(TOPIC, "b")
    assert NamespaceTable.overlaps(a, ab) and NamespaceTable.overlaps(ab, a)
    assert NamespaceTable.overlaps(a, a)
    assert not NamespaceTable.overlaps(a, b) and not NamespaceTable.overlaps(ab, b)
    assert NamespaceTable.overlaps(Namespace(TOPIC, ""), b)
    assert not NamespaceTable.overlaps(Namespace(GROUP, "a"), a)


def test_matching__most_specific_first__and_reserved_by() -> None:
    table = NamespaceTable()
    table.create(TOPIC, "")
    table.create(TOPIC, "orders-", reserved=True)
    table.create(TOPIC, "orders-eu-")
    table.create(TOPIC, "other")
    table.create(GROUP, "orders-", reserved=True)
    assert prefixes(table.matching(TOPIC, "orders-eu-1")) == ["orders-eu-", "orders-", ""]
    assert prefixes(table.matching(TOPIC, "orders-us")) == ["orders-", ""]
    assert prefixes(table.matching(TOPIC, "_internal")) == []
    assert prefixes(table.matching(TOPIC, "ord")) == [""]
    by = table.reserved_by(TOPIC, "orders-eu-1")
    assert by is not None and by.prefix == "orders-"
    assert table.reserved_by(TOPIC, "other-1") is None
    # Deleting an entry re-indexes the lookup.
    table.delete(TOPIC, "orders-")
    assert prefixes(table.matching(TOPIC, "orders-eu-1")) == ["orders-eu-", ""]
    assert table.reserved_by(TOPIC, "orders-eu-1") is None


def test_set_reserved__records_only_changes() -> None:
    table = NamespaceTable()
    table.create(TOPIC, "t")
    assert table.set_reserved(TOPIC, "t", False) == []
    assert table.set_reserved(TOPIC, "t", True) == [NsReserved("topic", "t", True)]
    assert table.get(TOPIC, "t").reserved
    assert refusal(lambda: table.set_reserved(TOPIC, "x", True)).code == (
        ErrorCode.UNKNOWN_NAMESPACE
    )


def test_attach_follower__sets_reserved__and_a_namespace_follows_at_most_one_link() -> None:
    table = NamespaceTable()
    table.create(TOPIC, "orders-")
    records = table.attach(TOPIC, "orders-", "ab", FOLLOWER)
    assert [r.TYPE for r in records] == ["ns_attach"]
    ns = table.get(TOPIC, "orders-")
    assert ns.reserved and ns.follower_link == "ab" and ns.attachment_labels() == ["ab:follower"]
    # The same attachment again changes nothing.
    assert table.attach(TOPIC, "orders-", "ab", FOLLOWER) == []
    err = refusal(lambda: table.attach(TOPIC, "orders-", "cb", FOLLOWER))
    assert err.code == ErrorCode.ALREADY_FOLLOWING
    assert "topic namespace 'orders-'" in err.message and "'ab'" in err.message
    # Following a link keeps the reservation.
    err = refusal(lambda: table.set_reserved(TOPIC, "orders-", False))
    assert err.code == ErrorCode.NAMESPACE_ATTACHED and "'ab'" in err.message


def test_attach_follower__refused_when_an_overlapping_namespace_follows() -> None:
    table = NamespaceTable()
    for prefix in ("orders-", "orders-eu-", "o", "payments-"):
        table.create(TOPIC, prefix)
    table.create(GROUP, "orders-")
    table.attach(TOPIC, "orders-", "ab", FOLLOWER)
    for prefix in ("orders-eu-", "o"):
        with pytest.raises(ClusterError) as info:
            table.attach(TOPIC, prefix, "cb", FOLLOWER)
        err = info.value
        assert err.code == ErrorCode.ALREADY_FOLLOWING
        assert f"topic namespace {prefix!r}" in err.message
        assert "overlapping topic namespace 'orders-'" in err.message
        assert not table.get(TOPIC, prefix).reserved
    # Disjoint prefixes and other types are free to follow.
    table.attach(TOPIC, "payments-", "cb", FOLLOWER)
    table.attach(GROUP, "orders-", "cb", FOLLOWER)
    # Overlapping namespaces may lead.
    table.attach(TOPIC, "orders-eu-", "de", LEADER)
    assert not table.get(TOPIC, "orders-eu-").reserved


def test_attach_leader__to_any_number_of_links__never_reserves() -> None:
    table = NamespaceTable()
    table.create(TOPIC, "orders-")
    for link in ("ab", "ac", "ad"):
        table.attach(TOPIC, "orders-", link, LEADER)
    ns = table.get(TOPIC, "orders-")
    assert ns.attachment_labels() == ["ab:leader", "ac:leader", "ad:leader"]
    assert not ns.reserved
    # It may follow one more link (chained replication), but not one it leads.
    err = refusal(lambda: table.attach(TOPIC, "orders-", "ab", FOLLOWER))
    assert err.code == ErrorCode.INVALID_REQUEST and "already attached" in err.message
    table.attach(TOPIC, "orders-", "zz", FOLLOWER)
    assert table.get(TOPIC, "orders-").reserved
    assert refusal(lambda: table.attach(TOPIC, "orders-", "x", "boss")).code == (
        ErrorCode.INVALID_REQUEST
    )
    assert refusal(lambda: table.attach(TOPIC, "nope", "x", LEADER)).code == (
        ErrorCode.UNKNOWN_NAMESPACE
    )


def test_delete__refused_while_attached__then_allowed_after_detach() -> None:
    table = NamespaceTable()
    table.create(TOPIC, "orders-")
    table.attach(TOPIC, "orders-", "ab", FOLLOWER)
    table.attach(TOPIC, "orders-", "bc", LEADER)
    err = refusal(lambda: table.delete(TOPIC, "orders-"))
    assert err.code == ErrorCode.NAMESPACE_ATTACHED
    assert "topic namespace 'orders-'" in err.message and "'ab'" in err.message
    assert table.detach(TOPIC, "orders-", "ab") == [NsDetach("topic", "orders-", "ab")]
    assert table.detach(TOPIC, "orders-", "ab") == []
    # Detaching keeps the reservation (spec 6: detached *and* un-reserved).
    assert table.get(TOPIC, "orders-").reserved
    assert refusal(lambda: table.delete(TOPIC, "orders-")).code == ErrorCode.NAMESPACE_ATTACHED
    table.detach(TOPIC, "orders-", "bc")
    assert [r.TYPE for r in table.delete(TOPIC, "orders-")] == ["ns_delete"]
    assert table.list() == []
    assert refusal(lambda: table.delete(TOPIC, "orders-")).code == ErrorCode.UNKNOWN_NAMESPACE


def _story(table: NamespaceTable) -> list[dict[str, Any]]:
    journal: list[dict[str, Any]] = []
    journal += table.create(TOPIC, "")
    journal += table.create(TOPIC, "orders-", reserved=True)
    journal += table.create(GROUP, "g-")
    journal += table.create(PRINCIPAL, "User:svc")
    journal += table.attach(TOPIC, "orders-", "ab", LEADER)
    journal += table.attach(GROUP, "g-", "ab", FOLLOWER)
    journal += table.attach(TOPIC, "", "cd", LEADER)
    journal += table.set_reserved(TOPIC, "orders-", False)
    journal += table.detach(TOPIC, "", "cd")
    journal += table.create(TOPIC, "tmp")
    journal += table.delete(TOPIC, "tmp")
    journal += table.create(TOPIC, "tmp2")
    return journal


def test_journal_replay_and_snapshot_restore__rebuild_the_same_table() -> None:
    table = NamespaceTable()
    journal = _story(table)
    replayed = NamespaceTable()
    for record in journal:
        replayed.apply_record(record)
    assert replayed.snapshot() == table.snapshot()
    restored = NamespaceTable()
    restored.create(TOPIC, "stale")  # restore replaces everything
    restored.restore(table.snapshot())
    assert restored.snapshot() == table.snapshot()
    assert prefixes(restored.matching(TOPIC, "orders-1")) == ["orders-", ""]
    assert restored.get(GROUP, "g-").follower_link == "ab"
    # And through the cluster: journal records route by their ns_ prefix, the
    # cluster's snapshot carries the table.
    state = ClusterState("A")
    for record in journal:
        state.apply_record(record)
    assert state.namespaces.snapshot() == table.snapshot()
    again = ClusterState("A")
    again.restore(state.snapshot())
    assert again.namespaces.snapshot() == table.snapshot()


# ---------------------------------------------------------------------------
# The cluster refuses client writes into reserved namespaces
# ---------------------------------------------------------------------------


@pytest.fixture
def state() -> ClusterState:
    s = ClusterState("A")
    s.create_topic("orders-1", 2, {}, "id-orders-1")
    s.create_topic("clicks", 1, {}, "id-clicks")
    s.namespaces.create(TOPIC, "orders-", reserved=True)
    s.namespaces.create(GROUP, "replicated-", reserved=True)
    return s


def _assert_reserved(err: ClusterError, what: str = "topic namespace 'orders-'") -> None:
    assert err.code == ErrorCode.RESERVED_NAMESPACE
    assert what in err.message and err.resource == what


def test_reserved_topic_namespace__refuses_every_client_write__changing_nothing(
    state: ClusterState,
) -> None:
    before = state.snapshot()
    log = state.partition("orders-1", 0)
    _assert_reserved(refusal(lambda: state.produce("orders-1", 0, batch(), "", NOW)))
    _assert_reserved(refusal(lambda: state.create_topic("orders-2", 1, {}, "id-2")))
    _assert_reserved(refusal(lambda: state.check_create_topic("orders-2", 1, {})))
    _assert_reserved(refusal(lambda: state.delete_topic("orders-1")))
    _assert_reserved(refusal(lambda: state.alter_configs("orders-1", {"retention.ms": "1"}, [])))
    _assert_reserved(refusal(lambda: state.create_partitions("orders-1", 3)))
    _assert_reserved(refusal(lambda: state.delete_records("orders-1", 0, -1)))
    pid, epoch, _ = state.init_producer_id("tx", 60_000, NOW)
    _assert_reserved(
        refusal(lambda: state.add_partitions_to_txn("tx", pid, epoch, [("orders-1", 0)], NOW))
    )
    err = refusal(lambda: state.produce("orders-1", 1, batch(), "", NOW))
    assert "cannot produce to topic 'orders-1'" in err.message and "reserved" in err.message
    assert log.log_end_offset == 0 and "orders-2" not in state.topics
    after = state.snapshot()
    after["txn"] = before["txn"]  # only the producer id block moved
    assert after == before
    # Topics outside the namespace are untouched by it.
    assert state.produce("clicks", 0, batch(), "", NOW).base_offset == 0


def test_reserved_group_namespace__refuses_commits(state: ClusterState) -> None:
    err = refusal(lambda: state.check_group_writable("replicated-g"))
    _assert_reserved(err, "group namespace 'replicated-'")
    assert "cannot commit offsets of group 'replicated-g'" in err.message
    _assert_reserved(
        refusal(lambda: state.check_group_writable("replicated-g", "delete")),
        "group namespace 'replicated-'",
    )
    pid, epoch, _ = state.init_producer_id("tx", 60_000, NOW)
    _assert_reserved(
        refusal(lambda: state.add_offsets_to_txn("tx", pid, epoch, "replicated-g", NOW)),
        "group namespace 'replicated-'",
    )
    state.add_offsets_to_txn("tx", pid, epoch, "mine", NOW)
    state.namespaces.create(GROUP, "mi", reserved=True)
    _assert_reserved(
        refusal(
            lambda: state.txn_offset_commit(
                "tx", "mine", pid, epoch, {("clicks", 0): (1, "", -1)}, NOW
            )
        ),
        "group namespace 'mi'",
    )
    assert state.groups.committed("mine", None) == {}
    state.check_group_writable("other")  # outside every namespace: fine


def test_clearing_the_reservation__makes_the_namespace_writable(state: ClusterState) -> None:
    state.namespaces.set_reserved(TOPIC, "orders-", False)
    assert state.produce("orders-1", 0, batch(2), "", NOW).base_offset == 0
    state.create_topic("orders-2", 1, {}, "id-2")
    state.delete_topic("orders-2")
    state.namespaces.set_reserved(GROUP, "replicated-", False)
    state.check_group_writable("replicated-g")


def test_most_specific_reserved_namespace_is_named__the_empty_one_spares_internal_topics(
    state: ClusterState,
) -> None:
    state.namespaces.create(TOPIC, "orders-eu-", reserved=True)
    _assert_reserved(
        refusal(lambda: state.create_topic("orders-eu-1", 1, {}, "x")),
        "topic namespace 'orders-eu-'",
    )
    state.namespaces.create(TOPIC, "", reserved=True)
    _assert_reserved(refusal(lambda: state.create_topic("fresh", 1, {}, "x")), "topic namespace ''")
    state.create_topic("__internal", 1, {}, "id-internal")  # "" excludes names starting "_"
    state.produce("__internal", 0, batch(), "", NOW)


def test_follower_namespaces__give_the_link_errors_naming_link_and_state(
    state: ClusterState,
) -> None:
    state.namespaces.set_reserved(TOPIC, "orders-", False)
    state.namespaces.attach(TOPIC, "orders-", "ab", FOLLOWER)
    state.namespaces.attach(GROUP, "replicated-", "ab", FOLLOWER)
    assert state.namespaces.get(TOPIC, "orders-").reserved
    link_state = state.link_state("ab")
    err = refusal(lambda: state.produce("orders-1", 0, batch(), "", NOW))
    assert err.code == ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE
    assert err.resource == "topic namespace 'orders-'"
    assert "link 'ab'" in err.message and f"state {link_state}" in err.message
    assert "topic namespace 'orders-'" in err.message and "'orders-1'" in err.message
    err = refusal(lambda: state.delete_topic("orders-1"))
    assert err.code == ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE
    # A more specific, merely reserved namespace inside a follower one: the
    # topic still belongs to the link.
    state.namespaces.create(TOPIC, "orders-x", reserved=True)
    err = refusal(lambda: state.create_topic("orders-x1", 1, {}, "x"))
    assert err.code == ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE
    err = refusal(lambda: state.check_group_writable("replicated-g"))
    assert err.code == ErrorCode.REPLICATED_GROUP_READ_ONLY
    assert "link 'ab'" in err.message and f"state {link_state}" in err.message
    assert "group namespace 'replicated-'" in err.message
    # Detached but still reserved: a plain reservation refusal.
    state.namespaces.detach(GROUP, "replicated-", "ab")
    _assert_reserved(
        refusal(lambda: state.check_group_writable("replicated-g")),
        "group namespace 'replicated-'",
    )
    state.namespaces.set_reserved(GROUP, "replicated-", False)
    state.check_group_writable("replicated-g")


def test_link_state__unknown_link() -> None:
    assert ClusterState("A").link_state("nope") == "UNKNOWN"


def test_namespace_resources__topics_and_known_groups(state: ClusterState) -> None:
    state.create_topic("_orders-internal", 1, {}, "id-i")
    state.namespaces.create(TOPIC, "")
    assert state.namespace_resources(TOPIC, "orders-") == ["orders-1"]
    assert state.namespace_resources(TOPIC, "") == ["clicks", "orders-1"]
    state.groups.commit_offsets("replicated-a", -1, "", {("clicks", 0): (1, "", -1)}, NOW)
    state.groups.commit_offsets("else", -1, "", {("clicks", 0): (1, "", -1)}, NOW)
    assert state.namespace_resources(GROUP, "replicated-") == ["replicated-a"]
    assert refusal(lambda: state.namespace_resources(GROUP, "zz")).code == (
        ErrorCode.UNKNOWN_NAMESPACE
    )


def test_journal_effect_shape__namespace_records_replay_through_the_cluster() -> None:
    state = ClusterState("A")
    effects = [Journal(tuple(state.namespaces.create(TOPIC, "t-", reserved=True)))]
    replayed = ClusterState("A")
    for effect in effects:
        for record in effect.records:
            replayed.apply_record(record)
    assert refusal(lambda: replayed.create_topic("t-1", 1, {}, "x")).code == (
        ErrorCode.RESERVED_NAMESPACE
    )
