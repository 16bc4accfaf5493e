"""A confirmed `recover`'s last step, follow-remote (linkd/core/procedures.py):
each recovered mapping ends attached with the remote leading, judged as the
link stands when that mapping's turn comes. Driven as a shell drives the
core's procedures, the remote answering from its own state."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.effects import journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import Leader
from linkd.core.namespaces import ResourceType
from linkd.core.requests import (
    Call,
    Checkpoint,
    Execute,
    LinkChanged,
    LinkDeleted,
    Note,
    Now,
    Reply,
    Request,
    Tell,
    WakeWaiters,
)

NOW = 1_000


def drive(
    procedure: Generator[Request, Any, Any], remote: ClusterState | None
) -> tuple[Any, list[str]]:
    """Answers a procedure as a shell does; `remote` None: unreachable.
    Returns its result and its notes."""
    reply: Any = None
    notes: list[str] = []
    try:
        while True:
            request = procedure.send(reply)
            reply = None
            if isinstance(request, Now | Execute):
                reply = NOW
            elif isinstance(request, Call):
                if remote is None:
                    error = ClusterError(ErrorCode.LINK_UNREACHABLE, "link 'ab'",
                                         "link 'ab': no answer by its deadline")
                    reply = Reply(None, error, NOW)
                else:
                    served = procedures.serve(remote, request.request, NOW)
                    reply = Reply(served.answer, None, NOW)
            elif isinstance(request, Note):
                notes.append(request.message)
            elif not isinstance(
                request, WakeWaiters | LinkChanged | LinkDeleted | Tell | Checkpoint
            ):
                raise AssertionError(f"unexpected request {request!r}")
    except StopIteration as done:
        return done.value, notes


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
    a, b, _result, notes = _recover_while_the_remote_follows_unheard(NO_FAULTS)

    assert not any("does not follow" in n for n in notes), notes
    followed = {m.local_prefix: m.leader for m in b.links.get("ab").attached_mappings()}
    assert followed == {"app-": Leader.REMOTE, "ops-": Leader.REMOTE}
    led = {m.local_prefix: m.leader for m in a.links.get("ab").attached_mappings()}
    assert led == {"app-": Leader.LOCAL, "ops-": Leader.LOCAL}
    assert b.plans.get("ab") is None
    ops = b.namespaces.find(ResourceType.GROUP, "ops-")
    assert ops is not None and ops.follower_link == "ab"


def test_with_fix_36_undone__the_merged_mapping_is_refused_and_left_following_nothing() -> None:
    _a, b, _result, notes = _recover_while_the_remote_follows_unheard(Faults.undoing(36))

    assert any("INVALID_LINK_CONFIG" in n and "'ops-'" in n for n in notes), notes
    assert b.plans.get("ab") is not None  # the plan stays: a re-run would finish it
