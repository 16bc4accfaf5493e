"""Admin answers that wait for the other cluster (issue 35, N6): an attach,
detach, set-mode or delete-link answers done only when the remote answered
with the change in hand, else pending with what remains. Driven as a shell
drives the core's procedures, with the remote unreachable (or answering)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from linkd.core import procedures
from linkd.core.cluster import ClusterState
from linkd.core.effects import journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.faults import NO_FAULTS, Faults
from linkd.core.links import LinkConfig
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
    procedure: Generator[Request, Any, Any],
    state: ClusterState,
    remote: ClusterState | None,
) -> tuple[Any, list[str]]:
    """Answers a procedure as a shell does; `remote` None: unreachable (the
    call's deadline passed). Returns its result and the notes."""
    reply: Any = None
    notes: list[str] = []
    try:
        while True:
            request = procedure.send(reply)
            reply = None
            if isinstance(request, Now):
                reply = NOW
            elif isinstance(request, Execute):
                reply = NOW
            elif isinstance(request, Call):
                if remote is None:
                    error = ClusterError(
                        ErrorCode.LINK_UNREACHABLE, "link 'ab'",
                        "link 'ab': handshake: no answer by its deadline (DEADLINE_EXCEEDED)",
                    )  # fmt: skip
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
        journal(state.namespaces.create(ResourceType.GROUP, "app-", False))
    config = a.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    a.links.store(config, NOW)
    b.links.accept_mirror(a.links.get("ab"), NOW)
    return a, b

def test_an_attach_the_remote_did_not_confirm_answers_pending_with_what_remains() -> None:
    a, _b = clusters()
    result, notes = drive(
        procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, None
    )
    assert not result.done
    assert result.pending.remote_cluster_id == "B"
    assert "group namespace 'app-' attached" in result.pending.remains
    assert "DEADLINE_EXCEEDED" in result.pending.reason
    # The change holds here (the handshakes carry it), and no note says "attached" alone.
    assert isinstance(result.config, LinkConfig)
    assert any(m.attached for m in result.config.mappings.values())
    assert any("pending" in n for n in notes)

def test_an_attach_the_remote_answered_is_done_and_the_remote_holds_it() -> None:
    a, b = clusters()
    result, _notes = drive(
        procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, b
    )
    assert result.done and result.pending is None
    (mine,) = [m for m in a.links.get("ab").mappings.values() if m.attached]
    theirs = b.links.get("ab").mappings[mine.mirrored_key]
    assert theirs.attached and theirs.version >= mine.version

def test_an_attach_asked_again_while_pending__stays_pending__until_the_remote_answers() -> None:
    a, b = clusters()
    drive(procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, None)
    (mine,) = [m for m in a.links.get("ab").mappings.values() if m.attached]
    assert mine.mirrored_key not in b.links.get("ab").mappings

    again, notes = drive(
        procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, None
    )
    assert not again.done
    assert "group namespace 'app-' attached" in again.pending.remains
    assert any("pending" in n for n in notes)
    assert mine.mirrored_key not in b.links.get("ab").mappings

    reached, _ = drive(
        procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, b
    )
    assert reached.done
    (same,) = [m for m in a.links.get("ab").mappings.values() if m.attached]
    assert same.version == mine.version  # asked again, not changed again
    theirs = b.links.get("ab").mappings[mine.mirrored_key]
    assert theirs.attached and theirs.version >= mine.version

def test_detach_and_set_mode_and_delete_link_unconfirmed_are_pending() -> None:
    a, b = clusters()
    drive(procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, b)
    detached, _ = drive(procedures.detach(a, "ab", "group", "app-", NOW), a, None)
    assert detached.pending is not None and "detached" in detached.pending.remains
    moded, _ = drive(procedures.set_mode(a, "ab", "SYNC", NOW), a, None)
    assert moded.pending is not None and "mode SYNC" in moded.pending.remains
    deleted, _ = drive(procedures.delete_link(a, "ab", NOW), a, None)
    assert deleted.config is None and deleted.pending is not None
    assert "still holds its half" in deleted.pending.remains

def test_undone__an_unconfirmed_attach_answers_done() -> None:
    a, _b = clusters(Faults.undoing(22))
    result, _notes = drive(
        procedures.attach(a, "ab", "group", "app-", "app-", "local", NOW), a, None
    )
    assert result.done
