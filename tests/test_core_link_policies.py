"""A link's shared policies (links.POLICIES): gap.policy, fetch.bound,
failover.truncation and failback.reconciliation, set
at create-link (--config NAME=VALUE) or by alter-link, checked before anything
is dialed, converging to the newest on both sides."""

from __future__ import annotations

import pytest
from test_core_link_rounds import NOW, two_clusters

from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import POLICIES, FetchBound, GapPolicy, parse_policies


def test_parse_policies__known_names_become_fields__unknown_names_and_bad_values_refused() -> None:
    fields = parse_policies("ab", {"fetch.bound": "last-stable-offset", "gap.policy": "stop"})
    assert fields == {"fetch_bound": "last-stable-offset", "gap_policy": "stop"}
    assert sorted(POLICIES) == [
        "failback.reconciliation", "failover.truncation", "fetch.bound", "gap.policy"
    ]
    with pytest.raises(ClusterError) as unknown:
        parse_policies("ab", {"fetch.bounds": "high-watermark"})
    assert unknown.value.code is ErrorCode.INVALID_LINK_CONFIG
    known = "(known: failback.reconciliation, failover.truncation, fetch.bound, gap.policy)"
    assert f"unknown link config 'fetch.bounds' {known}" in str(
        unknown.value.message
    )
    with pytest.raises(ClusterError, match=r"fetch\.bound is 'high-watermark' or 'last-stable"):
        parse_policies("ab", {"fetch.bound": "lso"})


def test_create_link__a_bad_policy_is_refused_before_anything_is_dialed() -> None:
    state = ClusterState("A")
    steps = procedures.create_link(
        state, "ab", "id-1", "b:1", "", "local_dials", "", NOW, policies={"fetch.bound": "hw"}
    )
    with pytest.raises(ClusterError) as refused:
        next(steps)
    assert refused.value.code is ErrorCode.INVALID_LINK_CONFIG
    assert state.links.configs == {}


def test_alter_link__a_bad_fetch_bound_is_refused_before_the_check_call() -> None:
    a, _b, _da, _db = two_clusters()
    steps = procedures.alter_link(a, "ab", {"fetch_bound": "newest"}, NOW + 1)
    with pytest.raises(ClusterError, match="not 'newest'"):
        next(steps)
    assert a.links.get("ab").fetch_bound is FetchBound.HIGH_WATERMARK


def test_fetch_bound__is_a_shared_field__that_converges_to_the_newest() -> None:
    a, b, _disk_a, _disk_b = two_clusters()
    assert b.links.get("ab").fetch_bound is FetchBound.HIGH_WATERMARK
    b.links.set_field("ab", "fetch_bound", "last-stable-offset", NOW + 5)
    a.links.accept_mirror(b.links.get("ab"), NOW + 6)
    assert a.links.get("ab").fetch_bound is FetchBound.LAST_STABLE_OFFSET
    assert a.links.get("ab").gap_policy is GapPolicy.CONTINUE  # the other policy untouched
