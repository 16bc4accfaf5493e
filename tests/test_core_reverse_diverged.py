"""A reversal whose remote holds as many records as this side, but whose log
diverged (its own clients wrote while it was detached): before the fix the
wait for the remote passed on the offsets alone, the reversal detached, the
swapped attach was refused (DIVERGED_LOG) and its plan could never be
finished, the namespace writable on neither cluster (the operator search's
seed 927 on 4 clusters). Now the wait checks the swapped attach first and
the reversal is rolled back, nothing moved."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from test_core_attach_cuts import _state_b, side

from linkd.core import link_admin as admin
from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import Leader, Mapping, MappingType, Role
from linkd.core.namespaces import ResourceType
from linkd.core.plans import REVERSE, Plan, PlanNamespace, PlanStep
from linkd.core.procedures import REVERSE_STEPS
from linkd.core.requests import (
    Call,
    Checkpoint,
    DescribePartitions,
    Execute,
    LinkChanged,
    Note,
    Now,
    PartitionsDescription,
    Reply,
    Request,
    WakeWaiters,
)

NOW = 2_000


def leading_b(faults: Faults) -> ClusterState:
    """B leads orders- on link ab (its orders-t: 10 records copied from A,
    then 5 its own clients wrote), and a reversal of it was cut short after
    its reservation: the re-run takes it up at wait-for-remote."""
    b = _state_b(faults)
    mapping = Mapping(MappingType.TOPIC, "orders-", "orders-", Leader.LOCAL, True, (0, 0, ""))
    admin.put_mapping(b, "ab", admin.versioned(b, mapping, NOW), NOW)
    admin.reconcile_attachments(b, "ab", NOW)
    b.namespaces.set_reserved(ResourceType.TOPIC, "orders-", True)
    steps = tuple(PlanStep(s, True, "done", 0) for s in REVERSE_STEPS[:3])
    b.plans.put(Plan(REVERSE, "ab", "link-ab", "A",
                     (PlanNamespace("topic", "orders-", "orders-"),), 30_000, 5, steps))
    return b


def drive(procedure: Generator[Request, Any, Any]) -> Any:
    """A answers descriptions: its orders-t holds 20 records, its own from 10
    on (A's clients wrote there after B's copy was detached); any other call
    finds A unreachable."""
    reply: Any = None
    try:
        while True:
            request = procedure.send(reply)
            reply = None
            if isinstance(request, Now | Execute):
                reply = NOW
            elif isinstance(request, Call) and isinstance(request.request, DescribePartitions):
                answer = PartitionsDescription("A", {("orders-t", 0): side("A", 20)}, {})
                reply = Reply(answer, None, NOW)
            elif isinstance(request, Call):
                reply = Reply(None, ClusterError(ErrorCode.LINK_UNREACHABLE, "link 'ab'",
                                                 "link 'ab': no answer"), NOW)
            elif not isinstance(request, Note | WakeWaiters | LinkChanged | Checkpoint):
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration as done:
        return done.value


def test_a_reversal_onto_a_diverged_remote_is_rolled_back_before_any_mapping_changes() -> None:
    b = leading_b(NO_FAULTS)
    report = drive(procedures.reverse(b, "ab", 0, NOW))
    assert report.rolled_back and not report.pending
    assert report.error is not None and report.error.code is ErrorCode.DIVERGED_LOG
    assert "its log diverged from this side's" in report.error.message
    assert "orders-t-0 offsets [10, 15) (5 records" in report.error.message
    # Nothing moved: B still leads, writable again, and no plan is left.
    mapping = b.links.get("ab").attached_at(MappingType.TOPIC, "orders-")
    assert mapping is not None and mapping.local_role is Role.LEADER
    assert not b.namespaces.get(ResourceType.TOPIC, "orders-").reserved
    assert b.plans.get("ab") is None


def test_undone__the_reversal_passes_the_wait_and_goes_on_to_change_mappings() -> None:
    b = leading_b(Faults.undoing(38))
    report = drive(procedures.reverse(b, "ab", 0, NOW))
    assert not report.rolled_back and report.pending  # past the point of no return
    assert [s.name for s in report.steps][-1] == REVERSE_STEPS[4]
    assert b.plans.get("ab") is not None
