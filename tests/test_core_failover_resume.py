"""A failover cut short by a crash, taken up again by a re-run (its durable
plan, linkd/core/plans.py), after the remote's change reached this side
meanwhile: B follows orders- and app- on link ab, its failover journals its
plan (both namespaces) and B crashes; A's detach of orders- then converges
to B, which leaves B's orders- detached and still reserved (a follower
detached stays reserved). Before the fix the re-run promoted only what
still followed the link: orders-, which the plan named, stayed reserved
and following nothing, writable nowhere (the operator search's seeds 1088
on 2 clusters and 3134 on 4)."""

from __future__ import annotations

from dataclasses import replace

from test_core_group_failover import drive, setup
from test_core_link_rounds import NOW, Disk

from linkd.core import link_admin as admin
from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import MappingType
from linkd.core.namespaces import ResourceType
from linkd.core.plans import FAILOVER
from linkd.core.requests import Checkpoint, Execute, Now


def crash_after_the_plan(state: ClusterState, disk: Disk) -> None:
    """The failover's first run, up to its first checkpoint (its plan
    journalled, nothing changed): the cluster crashes there."""
    procedure = procedures.failover(state, "ab", True, NOW)
    reply: object = None
    while True:
        request = procedure.send(reply)
        if isinstance(request, Checkpoint):
            procedure.close()
            return
        if isinstance(request, Execute):
            disk.carry_out(state, list(request.effects))
        reply = NOW if isinstance(request, Now | Execute) else None


def remote_detaches_orders(a: ClusterState, b: ClusterState) -> None:
    """A detaches orders- from ab; the link's next handshake brings it to B."""
    mapping = a.links.get("ab").attached_at(MappingType.TOPIC, "orders-")
    assert mapping is not None
    admin.put_mapping(a, "ab", admin.versioned(a, replace(mapping, attached=False), NOW + 1),
                      NOW + 1)
    b.links.accept_mirror(a.links.get("ab"), NOW + 1)
    admin.reconcile_attachments(b, "ab", NOW + 1)


def resumed(faults: Faults) -> tuple[ClusterState, admin.Failover]:
    a, b, _disk_a, disk_b = setup(faults)
    crash_after_the_plan(b, disk_b)
    plan = b.plans.get("ab")
    assert plan is not None and plan.procedure == FAILOVER
    assert {(n.resource_type, n.local_prefix) for n in plan.namespaces} == {
        ("topic", "orders-"), ("group", "app-")
    }
    remote_detaches_orders(a, b)
    orders = b.namespaces.get(ResourceType.TOPIC, "orders-")
    assert orders.reserved and orders.follower_link is None
    result = drive(procedures.failover(b, "ab", True, NOW + 2), b, disk_b)
    assert b.plans.get("ab") is None  # the plan ended
    return b, result


def test_a_resumed_failover_makes_writable_what_its_plan_named_and_the_remote_detached() -> None:
    b, result = resumed(NO_FAULTS)
    assert result.resumed_from == procedures.FAILOVER_STEPS[1]
    for kind, prefix in ((ResourceType.TOPIC, "orders-"), (ResourceType.GROUP, "app-")):
        ns = b.namespaces.get(kind, prefix)
        assert not ns.reserved and ns.follower_link is None, ns
    # The answer names it with the rest: nothing the plan promised is dropped.
    assert sorted(result.namespaces) == [("group", "app-"), ("topic", "orders-")]


def test_a_namespace_the_plan_named_that_follows_again_or_is_writable_is_left_alone() -> None:
    _a, b, _disk_a, _disk_b = setup(NO_FAULTS)
    # app- follows the link still (the failover promotes it as a follower);
    # orders- is not reserved; billing- does not exist here.
    b.namespaces.get(ResourceType.TOPIC, "orders-").reserved = False
    planned = [("topic", "orders-"), ("group", "app-"), ("topic", "billing-")]
    assert admin.left_reserved(b, planned) == []


def test_undone__the_namespace_the_remote_detached_stays_reserved_and_unnamed() -> None:
    b, result = resumed(Faults.undoing(37))
    orders = b.namespaces.get(ResourceType.TOPIC, "orders-")
    assert orders.reserved and orders.follower_link is None
    assert ("topic", "orders-") not in result.namespaces


def test_a_resumed_failover_still_names_what_its_first_check_gave_up() -> None:
    """Operator search, seeds 2830 on 2 clusters and 720 on 3 (fix 40): the
    forced failover's first run crashed after its check, whose answer (every
    partition's lag unknown) was lost; orders- was detached meanwhile, so
    the re-run promoted it with no rows of its own, and the records its
    source acknowledged that this side never held were named nowhere."""
    _b, result = resumed(NO_FAULTS)
    rows = {(r.topic, r.partition): r for r in result.abandoned}
    assert ("orders-1", 0) in rows and not rows[("orders-1", 0)].lag_known
    assert rows[("orders-1", 0)].lag_records == -1

    _b, undone = resumed(Faults.undoing(40))
    assert ("orders-1", 0) not in {(r.topic, r.partition) for r in undone.abandoned}
