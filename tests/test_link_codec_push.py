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
    for back in (
        codec.fetch_answer_of(codec.fetch_answer_pb(answer)),
        codec.fetch_answer_of_bytes(codec.fetch_answer_bytes(answer)),
    ):
        assert (back.fetch_session_id, back.fetch_session_refused) == (4, "not known here")


# -- records as bytes (`push_bytes`, `fetch_answer_bytes` and their readers) --------------------


def _answer() -> rounds.FetchAnswer:
    from linkd.core.errors import ClusterError, ErrorCode

    return rounds.FetchAnswer(
        [
            rounds.FetchedPartition(
                "orders-1", 0, high_watermark=7, log_end_offset=9, leader_epoch=2,
                records=bytes(range(256)) * 40, size_bytes=10_240, marks_from=3, marks_to=5,
                continues_from=4, held=True, log_start_cause="retention",
            ),
            rounds.FetchedPartition("orders-1", 1, high_watermark=3),  # no records
            rounds.FetchedPartition(
                "orders-2", 0, error=ClusterError(ErrorCode.UNKNOWN_TOPIC, "orders-2", "gone")
            ),
            rounds.FetchedPartition("orders-3", 2, records=b"\x00" * 200, size_bytes=200,
                                    diverging_end_offset=12, diverging_epoch=1),
        ],
        sync_state="FOLLOWING",
        fetch_session_id=4,
        fetch_session_refused="",
    )


def test_a_push_written_around_its_records_is_the_message_any_parser_reads() -> None:
    from ccr.v1 import replication_pb2

    push = rounds.Push("id-1", data=_answer(), request_sent_ms=5, source_hw_at_ms=6)
    body = codec.push_bytes(push)
    # An older receiver parses it as the message it always got.
    assert replication_pb2.ReplicaPushRequest.FromString(body) == codec.push_pb(push)
    request, back = codec.push_of_bytes(body)
    # As the message says it (what the wire does not carry is as it always was).
    assert repr(back) == repr(codec.push_of(codec.push_pb(push)))
    assert not request.HasField("data") and request.link_id == "id-1"
    # And an older sender's message (one encoding, records inside) reads the same.
    assert repr(codec.push_of_bytes(codec.push_pb(push).SerializeToString())[1]) == repr(back)
    # No data: none read back; data with no partitions: data read back.
    for bare in (rounds.Push("id-1"), rounds.Push("id-1", data=rounds.FetchAnswer([]))):
        assert codec.push_of_bytes(codec.push_bytes(bare))[1] == bare


def test_a_fetch_answer_written_around_its_records_round_trips() -> None:
    from ccr.v1 import replication_pb2

    answer = _answer()
    body = codec.fetch_answer_bytes(answer)
    assert replication_pb2.ReplicaFetchResponse.FromString(body) == codec.fetch_answer_pb(answer)
    back = codec.fetch_answer_of_bytes(body)
    assert repr(back) == repr(codec.fetch_answer_of(codec.fetch_answer_pb(answer)))
    old = codec.fetch_answer_pb(answer).SerializeToString()
    assert repr(codec.fetch_answer_of_bytes(old)) == repr(back)
    # A field given twice counts as protobuf counts it: the last records win.
    again = body + codec.fetch_answer_bytes(rounds.FetchAnswer([], sync_state="CATCHING_UP"))
    assert codec.fetch_answer_of_bytes(again).sync_state == "CATCHING_UP"
    assert repr(codec.fetch_answer_of_bytes(again).partitions) == repr(back.partitions)


def test_a_truncated_or_malformed_body_does_not_decode() -> None:
    import pytest
    from google.protobuf.message import DecodeError

    body = codec.push_bytes(rounds.Push("id-1", data=_answer()))
    for bad in (body[:-1], body[: len(body) // 2], body + b"\x80", body + b"\x0b"):
        with pytest.raises(DecodeError):
            codec.push_of_bytes(bad)
