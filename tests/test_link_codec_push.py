"""On the wire: a push says when its sender read the high watermarks it
carries (`ReplicaPushRequest.source_hw_at_ms`): the follower knows them as of
then. Unset when the sender does not say (an older sender). A replica fetch
says its fetch session, and its answer the session's id or why it was
refused; a fetch with no session (an older follower) reads back as none."""

from __future__ import annotations

from linkd import link_codec as codec
from linkd.core import link_rounds as rounds


def test_a_push_carries_when_its_source_read_the_high_watermarks__zero_included() -> None:
    answer = rounds.FetchAnswer([rounds.FetchedPartition("orders-1", 0, high_watermark=7)])
    for at in (0, 1_765_000_000_123):
        push = rounds.Push("id-1", data=answer, request_sent_ms=5, source_hw_at_ms=at)
        wire = codec.push_pb(push)
        assert wire.HasField("source_hw_at_ms")
        back = codec.push_of(wire)
        assert (back.source_hw_at_ms, back.request_sent_ms) == (at, 5)


def test_a_push_that_does_not_say__reads_back_as_not_said() -> None:
    wire = codec.push_pb(rounds.Push("id-1"))
    assert not wire.HasField("source_hw_at_ms")
    assert codec.push_of(wire).source_hw_at_ms is None


def test_a_fetch_says_its_session__and_a_sessionless_one_reads_back_sessionless() -> None:
    part = rounds.PartitionFetch("orders-1", 0, 5, 1)
    for ref in (
        rounds.FetchSessionRef(0, rounds.OPENING),
        rounds.FetchSessionRef(3, 7, (("orders-2", 1), ("orders-3", 0))),
        rounds.NO_FETCH_SESSION,
    ):
        request = rounds.FetchRequest("id-1", (part,), {}, 9, ref)
        wire = codec.fetch_request_pb(request, 500, 1 << 20)
        assert wire.HasField("fetch_session_epoch") == (ref.epoch != rounds.SESSIONLESS)
        assert codec.fetch_request_of(wire, {}).fetch_session == ref
        assert codec.fetch_session_of(wire) == ref


def test_a_fetch_answer_carries_its_session_id_and_a_refusal() -> None:
    answer = rounds.FetchAnswer([], fetch_session_id=4, fetch_session_refused="not known here")
    back = codec.fetch_answer_of(codec.fetch_answer_pb(answer))
    assert (back.fetch_session_id, back.fetch_session_refused) == (4, "not known here")
