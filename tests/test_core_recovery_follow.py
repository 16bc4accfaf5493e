"""A confirmed `recover`'s last step, follow-remote (linkd/core/procedures.py):
each recovered mapping ends attached with the remote leading, judged as the
link stands when that mapping's turn comes. Driven as a shell drives the
core's procedures, the remote answering from its own state."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from test_core_pending_answers import drive as answer_as_a_shell

from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.effects import journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import Leader
from linkd.core.namespaces import ResourceType
from linkd.core.requests import Request

NOW = 1_000


def drive(
    procedure: Generator[Request, Any, Any], remote: ClusterState | None
) -> tuple[Any, list[str]]:
    """Answers a procedure as a shell does (tests/test_core_pending_answers.py);
    `remote` None: unreachable. Returns its result and its notes."""
    return answer_as_a_shell(procedure, ClusterState("-"), remote)


def clusters(faults: Faults = NO_FAULTS) -> tuple[ClusterState, ClusterState]:
    a, b = ClusterState("A", faults=faults), ClusterState("B", faults=faults)
    for state in (a, b):
        for prefix in ("app-", "ops-"):
            journal(state.namespaces.create(ResourceType.GROUP, prefix, False))
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    a.links.store(config, NOW)
    b.links.accept_mirror(a.links.get("ab"), NOW)
    return a, b


def _recover_while_the_remote_follows_unheard(faults: Faults) -> tuple[
    ClusterState, ClusterState, Any, list[str]
]:
    """A attached `ops-` to follow B while B was unreachable; B then
    recovers `app-` and `ops-` from A. Following `app-` (a handshake) brings
    B A's view, in which B leads `ops-`."""
    a, b = clusters(faults)
    drive(procedures.attach(a, "ab", "group", "ops-", "ops-", "remote", NOW), None)
    assert b.links.get("ab").attached_mappings() == []
    requested: list[tuple[str, str, str | None]] = [
        ("group", "app-", "app-"), ("group", "ops-", "ops-")
    ]
    result, notes = drive(procedures.recover(b, "ab", requested, True, NOW), a)
    return a, b, result, notes


def test_a_mapping_a_handshake_attached_meanwhile_is_detached_before_it_follows() -> None:
    """Operator search, seed 2792 on 2 clusters: the list of mappings to
    detach first was made before the first attach, whose handshake merged
    the remote's view; the second mapping, attached by that merge in the
    other direction, was then attached without a detach and refused
    (INVALID_LINK_CONFIG), leaving it reserved and following nothing."""
    # Fix 39 (below) now refuses this recovery before any change; with it
    # undone, follow-remote's own judgement is what is tested here.
    a, b, _result, notes = _recover_while_the_remote_follows_unheard(Faults.undoing(39))

    assert not any("does not follow" in n for n in notes), notes
    followed = {m.local_prefix: m.leader for m in b.links.get("ab").attached_mappings()}
    assert followed == {"app-": Leader.REMOTE, "ops-": Leader.REMOTE}
    led = {m.local_prefix: m.leader for m in a.links.get("ab").attached_mappings()}
    assert led == {"app-": Leader.LOCAL, "ops-": Leader.LOCAL}
    assert b.plans.get("ab") is None
    ops = b.namespaces.find(ResourceType.GROUP, "ops-")
    assert ops is not None and ops.follower_link == "ab"


def test_with_fix_36_undone__the_merged_mapping_is_refused_and_left_following_nothing() -> None:
    _a, b, _result, notes = _recover_while_the_remote_follows_unheard(Faults.undoing(36, 39))

    assert any("INVALID_LINK_CONFIG" in n and "'ops-'" in n for n in notes), notes
    assert b.plans.get("ab") is not None  # the plan stays: a re-run would finish it


def test_recovering_from_a_namespace_reserved_there_that_follows_nothing_else__is_refused() -> None:
    """Operator search, seed 960 on 2 clusters (fix 39): A reserved `ops-`
    to follow B, which B has not heard of; B recovering `ops-` from A would
    follow a namespace no client writes on A (reserved, following only B),
    and A would lead it reserved: writable on neither. Refused before any
    change, naming what to do."""
    try:
        _recover_while_the_remote_follows_unheard(NO_FAULTS)
    except ClusterError as refused:
        assert refused.code is ErrorCode.RESERVED_NAMESPACE, refused
        assert "group 'ops-' is reserved there" in refused.message, refused.message
        assert "nothing was changed" in refused.message
    else:
        raise AssertionError("recovered from a namespace reserved on the remote")


def test_a_description_says_who_may_write_the_namespace_there() -> None:
    from linkd.core.requests import DescribePartitions, NamespaceStanding

    a, b = clusters()
    drive(procedures.attach(a, "ab", "group", "ops-", "ops-", "remote", NOW), b)
    asked = DescribePartitions("id-1", "", "ops-", True)
    on_a = procedures.describe_partitions(a, asked, NOW)
    # A follows B's ops- over the asking link: reserved, nothing else.
    assert on_a.standing == NamespaceStanding(reserved=True)
    assert on_a.standing.writes_nowhere
    on_b = procedures.describe_partitions(b, asked, NOW)
    assert on_b.standing == NamespaceStanding() and not on_b.standing.writes_nowhere


def _chain_a_b_c() -> dict[str, ClusterState]:
    """`app-` written on A, copied A -> B -> C (links ab and bc); a link ca
    (C created it) with nothing attached."""
    cs = {c: ClusterState(c) for c in "ABC"}
    for state in cs.values():
        journal(state.namespaces.create(ResourceType.GROUP, "app-", False))
    for name in ("ab", "bc", "ca"):
        x, y = cs[name[0].upper()], cs[name[1].upper()]
        config = x.links.new_config(name, f"id-{name}", y.cluster_id, "y:1", "", "local_dials",
                                    "", NOW)
        x.links.store(config, NOW)
        y.links.accept_mirror(x.links.get(name), NOW)
    drive(procedures.attach(cs["A"], "ab", "group", "app-", "app-", "local", NOW), cs["B"])
    drive(procedures.attach(cs["B"], "bc", "group", "app-", "app-", "local", NOW), cs["C"])
    return cs


def test_recovering_from_a_copy_of_this_clusters_own_copy__is_refused_before_any_change() -> None:
    """Operator search, seed 2556 on 3 clusters: A recovered from C, whose
    copy comes from B, from A. C refused the attach (FOLLOW_CYCLE) after A's
    cut, and A was left reserved, cut, following nothing. C's description
    now carries its lineage of the namespace, and recovery refuses first."""
    cs = _chain_a_b_c()
    a = cs["A"]
    with_cut, _ = drive(procedures.recover(a, "ca", [("group", "app-", None)], False, NOW), cs["C"])
    assert with_cut.remote_cluster_id == "C"  # the report alone changes nothing, refuses nothing

    try:
        drive(procedures.recover(a, "ca", [("group", "app-", None)], True, NOW), cs["C"])
    except ClusterError as refused:
        assert refused.code is ErrorCode.FOLLOW_CYCLE
        assert "'A' -> 'B' -> 'C' -> 'A'" in refused.message
        assert "nothing was changed" in refused.message
    else:
        raise AssertionError("recover from a copy of A's own copy was accepted")
    assert a.plans.get("ca") is None
    ns = a.namespaces.find(ResourceType.GROUP, "app-")
    assert ns is not None and not ns.reserved and ns.follower_link is None
    assert a.links.get("ca").attached_mappings() == []


def test_a_description_names_its_lineage_but_not_its_mapping_on_the_asking_link() -> None:
    from linkd.core.requests import DescribePartitions

    cs = _chain_a_b_c()
    on_c = procedures.describe_partitions(
        cs["C"], DescribePartitions("id-ca", "app-", "app-", True), NOW
    )
    assert [c for c, _ in on_c.lineage] == ["B", "A"]
    # B follows A on ab: asked over ab (whose attach a recovery would swap), it names nobody.
    on_b = procedures.describe_partitions(
        cs["B"], DescribePartitions("id-ab", "app-", "app-", True), NOW
    )
    assert on_b.lineage == ()
    on_b_over_bc = procedures.describe_partitions(
        cs["B"], DescribePartitions("id-bc", "app-", "app-", True), NOW
    )
    assert [c for c, _ in on_b_over_bc.lineage] == ["A"]


def test_a_descriptions_lineage_crosses_the_wire() -> None:
    from linkd import link_codec
    from linkd.core.requests import NamespaceStanding, PartitionsDescription

    sent = PartitionsDescription(
        "C", {}, {}, (("B", (5, 1, "B")), ("A", (3, 0, "A"))), NamespaceStanding(True, False, True)
    )
    assert link_codec.description_of(link_codec.description_pb(sent)) == sent


def _recover_after_an_unheard_remote_detach(faults: Faults) -> tuple[ClusterState, list[str]]:
    """A follows B's `ops-`; B detaches it while A is unreachable; A then
    recovers `app-` and `ops-` from B."""
    a, b = clusters(faults)
    drive(procedures.attach(a, "ab", "group", "ops-", "ops-", "remote", NOW), b)
    drive(procedures.detach(b, "ab", "group", "ops-", NOW + 1), None)
    (still,) = a.links.get("ab").attached_mappings()
    assert still.local_prefix == "ops-"  # A has not heard of the detach
    requested: list[tuple[str, str, str | None]] = [
        ("group", "app-", "app-"), ("group", "ops-", "ops-")
    ]
    _result, notes = drive(procedures.recover(a, "ab", requested, True, NOW + 2), b)
    return a, notes


def test_a_remote_detach_not_heard_of_is_merged_before_recovery_judges_the_link() -> None:
    """Operator search, seeds 1055 on 2 clusters and 225 on 4: recovery
    judged a mapping as following already by this side's view; the first
    attach's handshake then merged the remote's newer detach of it, which
    was left reserved and following nothing (no plan left to finish it)."""
    a, notes = _recover_after_an_unheard_remote_detach(NO_FAULTS)

    assert not any("does not follow" in n for n in notes), notes
    ops = a.namespaces.find(ResourceType.GROUP, "ops-")
    assert ops is not None and ops.follower_link == "ab"
    assert a.plans.get("ab") is None


def test_with_fix_36_undone__the_detach_lands_after_the_check_and_leaves_it_orphaned() -> None:
    a, _notes = _recover_after_an_unheard_remote_detach(Faults.undoing(36))

    ops = a.namespaces.find(ResourceType.GROUP, "ops-")
    assert ops is not None and ops.reserved and ops.follower_link is None
