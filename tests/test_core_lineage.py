"""Rings of follow relations of any length: refused at the attach when the
lineage is known, and broken by the newest attach when they close apart
(linkd/core/lineage.py)."""

from __future__ import annotations

import pytest

from linkd.core import lineage
from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import LinkConfig

NOW = 1_000_000


def clusters(faults: Faults = NO_FAULTS) -> dict[str, ClusterState]:
    out = {c: ClusterState(c, faults=faults) for c in "ABC"}
    out["A"].namespaces.create(1, "orders-", False)
    return out


def link(cs: dict[str, ClusterState], name: str) -> None:
    """Link `name` ("ab": A creates it, B holds the mirror)."""
    x, y = cs[name[0].upper()], cs[name[1].upper()]
    config = x.links.new_config(name, f"id-{name}", y.cluster_id, "y:1", "", "local_dials", "", NOW)
    x.links.store(config, NOW)
    y.links.accept_mirror(x.links.get(name), NOW)


def attach(cs: dict[str, ClusterState], at: str, name: str, leader: str, now: int) -> None:
    """An operator's attach of `orders-` on cluster `at`, as `procedures.change_mapping`
    runs it: checked here, proposed to the remote, stored, the answer merged."""
    x = cs[at]
    y = cs[x.links.get(name).remote_cluster_id]
    mapping = admin.check_attach(x, name, "topic", "orders-", "orders-", leader)
    stamped = admin.versioned(x, mapping, now)
    candidate = LinkConfig.from_record(x.links.get(name).to_record())
    candidate.mappings[stamped.key] = stamped
    rounds.accept_handshake(y, lineage.outgoing(x, candidate), False, now, (stamped.key,))
    admin.put_mapping(x, name, stamped, now)
    rounds.accept_handshake_answer(x, name, lineage.outgoing(y, y.links.get(name)), now)


def handshake(cs: dict[str, ClusterState], name: str, now: int) -> admin.Accepted:
    """The periodic exchange of views on link `name`; returns what the
    creating side's merge of the answer did."""
    x, y = cs[name[0].upper()], cs[name[1].upper()]
    rounds.accept_handshake(y, lineage.outgoing(x, x.links.get(name)), False, now)
    return rounds.accept_handshake_answer(x, name, lineage.outgoing(y, y.links.get(name)), now)


def chain_a_b_c(cs: dict[str, ClusterState]) -> None:
    for name in ("ab", "bc", "ca"):
        link(cs, name)
    attach(cs, "A", "ab", "local", NOW)
    attach(cs, "B", "bc", "local", NOW + 1)
    handshake(cs, "bc", NOW + 2)


def test_a_chain_carries_its_lineage__nearest_first() -> None:
    cs = clusters()
    chain_a_b_c(cs)

    hops = lineage.upstream(cs["C"], "topic", "orders-")

    assert [c for c, _ in hops] == ["B", "A"]
    assert lineage.upstream(cs["A"], "topic", "orders-") == ()


def test_leading_the_namespace_back_to_its_origin__is_refused_naming_the_ring() -> None:
    cs = clusters()
    chain_a_b_c(cs)

    with pytest.raises(ClusterError) as refused:
        attach(cs, "C", "ca", "local", NOW + 3)

    assert refused.value.code is ErrorCode.FOLLOW_CYCLE
    assert "'A' -> 'B' -> 'C' -> 'A'" in refused.value.message
    assert cs["C"].links.get("ca").attached_mappings() == []
    assert cs["A"].links.get("ca").attached_mappings() == []


def test_following_from_the_end_of_the_chain__is_refused_by_the_remote() -> None:
    cs = clusters()
    chain_a_b_c(cs)

    with pytest.raises(ClusterError) as refused:
        attach(cs, "A", "ca", "remote", NOW + 3)

    assert refused.value.code is ErrorCode.FOLLOW_CYCLE
    assert "on cluster 'C'" in refused.value.message
    assert cs["A"].links.get("ca").attached_mappings() == []


def test_a_ring_closed_before_the_lineage_arrived__loses_its_newest_attach() -> None:
    cs = clusters()
    for name in ("ab", "bc", "ca"):
        link(cs, name)
    cs["C"].namespaces.create(1, "orders-", False)
    attach(cs, "A", "ab", "local", NOW)
    attach(cs, "C", "ca", "local", NOW + 1)  # A follows C: B does not know yet
    attach(cs, "B", "bc", "local", NOW + 2)  # closes A -> B -> C -> A

    handshake(cs, "ab", NOW + 3)  # B learns that A's copy comes from C
    handshake(cs, "bc", NOW + 4)  # C learns that B's comes from A, from C

    assert cs["C"].links.get("bc").attached_mappings() == []
    stored = next(iter(cs["C"].links.get("bc").mappings.values()))
    assert "ring of follow relations" in stored.note
    assert "refused by cluster 'C'" in stored.note
    assert cs["A"].links.get("ab").attached_mappings() != []
    assert cs["A"].links.get("ca").attached_mappings() != []
    handshake(cs, "bc", NOW + 5)
    assert cs["B"].links.get("bc").attached_mappings() == []  # both sides show the refusal


def test_with_the_fix_undone__a_ring_of_three_is_accepted() -> None:
    cs = clusters(Faults.undoing(12))
    chain_a_b_c(cs)
    attach(cs, "C", "ca", "local", NOW + 3)

    assert cs["A"].links.get("ca").attached_mappings() != []


def test_a_ring_closed_apart_after_a_restart__stands_until_the_lineage_went_around() -> None:
    """Operator search, seed 256 on 3 clusters: A attaches to follow C while C
    is down (the newest attach of the ring), and C comes back (the
    lineage it heard is not durable). The ring is found only once the
    lineage went around it, a handshake per hop; until then each side has
    heard a lineage older than what its remote would send now, and the
    simulator judges rings at rest only after that (`Simulation.lineage_unheard`)."""
    cs = clusters()
    for name in ("ab", "bc", "ca"):
        link(cs, name)
    cs["C"].namespaces.create(1, "orders-", False)
    attach(cs, "A", "ab", "local", NOW)
    attach(cs, "B", "bc", "local", NOW + 1)
    a = cs["A"]
    mapping = admin.check_attach(a, "ca", "topic", "orders-", "orders-", "remote")
    admin.put_mapping(a, "ca", admin.versioned(a, mapping, NOW + 2), NOW + 2)  # C unreachable
    handshake(cs, "ab", NOW + 3)  # B hears that A's copy comes from C
    cs["C"].links.runtime["bc"].upstream = {}  # C restarted

    def heard_is_current(here: str, name: str, there: str) -> bool:
        sent = lineage.outgoing(cs[there], cs[there].links.get(name)).mirrored().lineage
        return cs[here].links.runtime[name].upstream == sent

    handshake(cs, "ca", NOW + 4)  # C learns the attach; its lineage names nobody yet
    handshake(cs, "bc", NOW + 5)  # C hears B's copy comes from A, from C: not C's newest

    assert cs["A"].links.get("ca").attached_mappings() != []  # the ring stands
    assert cs["C"].links.get("bc").attached_mappings() != []
    assert not heard_is_current("A", "ca", "C")  # not at rest: A heard C's old lineage

    handshake(cs, "ca", NOW + 6)  # the lineage went around: the newest attach goes

    assert cs["A"].links.get("ca").attached_mappings() == []
    assert cs["C"].links.get("ca").attached_mappings() == []
    handshake(cs, "ca", NOW + 7)
    assert heard_is_current("A", "ca", "C")
    assert "ring of follow relations" in next(iter(cs["A"].links.get("ca").mappings.values())).note
    assert cs["C"].links.get("bc").attached_mappings() != []
    assert cs["A"].links.get("ab").attached_mappings() != []


def _pending_detach_then_follow(faults: Faults) -> dict[str, ClusterState]:
    """A leads `orders-` to B on `ab`; A detaches it while B is unreachable
    (B still follows A), then attaches it to follow B (as a recovery's last
    step does), proposing the swap to B."""
    cs = clusters(faults)
    link(cs, "ab")
    attach(cs, "A", "ab", "local", NOW)
    a = cs["A"]
    detached = admin.check_detach(a, "ab", "topic", "orders-")
    admin.put_mapping(a, "ab", admin.versioned(a, detached, NOW + 1), NOW + 1)
    assert [c for c, _ in lineage.upstream(cs["B"], "topic", "orders-")] == ["A"]
    attach(cs, "A", "ab", "remote", NOW + 2)
    return cs


def test_an_attach_swapping_a_mapping_B_has_not_heard_detached__is_no_ring() -> None:
    """Operator search, seed 960 on 2 clusters: the follower B had not heard
    of its leader A's detach when A's recovery proposed to follow B; B judged
    the ring with its own follower mapping, which the proposal replaces, as a
    source, and refused (FOLLOW_CYCLE) after A's cut. A proposal is judged
    without the mapping it replaces."""
    cs = _pending_detach_then_follow(NO_FAULTS)

    (b_side,) = cs["B"].links.get("ab").attached_mappings()
    assert b_side.leader == "local"
    (a_side,) = cs["A"].links.get("ab").attached_mappings()
    assert a_side.leader == "remote"
    assert lineage.upstream(cs["B"], "topic", "orders-") == ()


def test_with_fix_35_undone__the_replaced_follower_counts_and_the_swap_is_refused() -> None:
    with pytest.raises(ClusterError) as refused:
        _pending_detach_then_follow(Faults.undoing(35))

    assert refused.value.code is ErrorCode.FOLLOW_CYCLE
    assert "on cluster 'B'" in refused.value.message
