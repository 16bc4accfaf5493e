"""The hang checker (invariant 11, `sim.status_checks.check_hanging_transactions`)
knows a follower's copy by every name up its chain of links."""

from __future__ import annotations

from linkd.core import link_admin as admin
from linkd.core.cluster import ClusterState
from linkd.core.links import Leader, Mapping, MappingType
from sim.status_checks import _names_upstream

NOW = 1_000


def _follows(state: ClusterState, link: str, remote: str, local_prefix: str, remote_prefix: str,
             ) -> None:
    config = state.links.new_config(link, f"id-{link}", remote, f"{remote}:1", "",
                                    "local_dials", "", NOW)
    state.links.store(config, NOW)
    mapping = Mapping(
        MappingType.TOPIC, local_prefix, remote_prefix, Leader.REMOTE, True, (0, 0, "")
    )
    admin.put_mapping(state, link, admin.versioned(state, mapping, NOW), NOW)


def test_a_chain_that_keeps_one_name_over_two_hops__is_followed_to_its_origin() -> None:
    """C's r-A-t1 copies B's r-A-t1, which copies A's A-t1: the coordinator
    running the transaction (A's) knows it as A-t1 (seed 1112 on 3 clusters
    of the operator sweep: the walk stopped at the name it had seen)."""
    a, b, c = ClusterState("A"), ClusterState("B"), ClusterState("C")
    _follows(b, "ba", "A", "r-A-t1", "A-t1")
    _follows(c, "cb", "B", "r-A-t1", "r-A-t1")
    states = {"A": a, "B": b, "C": c}

    assert _names_upstream(states, "C", "r-A-t1") == {"r-A-t1", "A-t1"}
    assert _names_upstream(states, "B", "r-A-t1") == {"r-A-t1", "A-t1"}
    assert _names_upstream(states, "A", "A-t1") == {"A-t1"}


def test_a_ring__ends_the_walk() -> None:
    a, b = ClusterState("A"), ClusterState("B")
    _follows(a, "ab", "B", "x-", "y-")
    _follows(b, "ba", "A", "y-", "x-")
    assert _names_upstream({"A": a, "B": b}, "A", "x-1") == {"x-1", "y-1"}
