"""A push on the wire says when its sender read the high watermarks it
carries (`ReplicaPushRequest.source_hw_at_ms`): the follower knows them as of
then. Unset when the sender does not say (an older sender)."""

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
