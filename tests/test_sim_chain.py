"""The chain question (mirroring a mirror, failing back mirrored data):
producer ids and sequences on the destinations, and idempotent producers
after failover. The check it needs, `sequence_refused`, fires on a planted
history."""

from __future__ import annotations

from sim.checkers import CutEvent, check_sequence_refusals
from sim.history import History, Op, OpType, Send


def _send(process: str, cluster: str, type_: OpType, at: int, value: str, error: str = "") -> Op:
    return Op(process, "producer", cluster, type_, at, at + 1, Send("A-t0", -1, value), error)


def _kinds(history: History, cuts: dict[tuple[str, str, int], list[CutEvent]]) -> list[str]:
    return [v.invariant for v in check_sequence_refusals(history, cuts)]


def test_a_sequence_refusal_no_cut_nor_unknown_send_explains_is_reported() -> None:
    refused = _send("app", "B", "fail", 5000, "app-9", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    history = History([_send("app", "B", "ok", 4000, "app-8"), refused])
    found = check_sequence_refusals(history, {})
    assert [v.invariant for v in found] == ["sequence_refused"]
    assert "'app-9'" in found[0].detail and "on B" in found[0].detail
    # UNKNOWN_PRODUCER_ID is judged alike.
    unknown = _send("app", "B", "fail", 5000, "app-9", "UNKNOWN_PRODUCER_ID")
    assert _kinds(History([unknown]), {}) == ["sequence_refused"]
    # A cut of the topic on that cluster before the producer's first send
    # there removed none of its batches: still reported.
    early = {("B", "A-t0", 1): [CutEvent(3000, 10, False)]}
    assert _kinds(history, early) == ["sequence_refused"]
    # A cut on another cluster or of another topic explains nothing here.
    elsewhere = {("C", "A-t0", 0): [CutEvent(4500, 10, False)]}
    assert _kinds(history, elsewhere) == ["sequence_refused"]


def test_a_cut_or_an_unknown_send_since_the_first_send_explains_a_refusal() -> None:
    refused = _send("app", "B", "fail", 5000, "app-9", "OUT_OF_ORDER_SEQUENCE_NUMBER")
    history = History([_send("app", "B", "ok", 4000, "app-8"), refused])
    # A recovery (or an unclean election) cut the producer's last batches.
    assert _kinds(history, {("B", "A-t0", 2): [CutEvent(4500, 10, False)]}) == []
    # A send whose outcome is unknown: its batch may be lost, and the next
    # one is numbered after it.
    lost = History([_send("app", "B", "info", 4000, "app-8", "timeout"), refused])
    assert _kinds(lost, {}) == []
    # Another producer's unknown send explains nothing.
    other = History([_send("other", "B", "info", 4000, "o-1", "timeout"), refused])
    assert _kinds(other, {}) == ["sequence_refused"]
    # Refusals a coordinator's fence answers too, and other refusals, are not judged.
    fenced = _send("app", "B", "fail", 5000, "app-9", "INVALID_PRODUCER_EPOCH")
    writable = _send("app", "B", "fail", 5000, "app-9", "FOLLOWER_TOPIC_NOT_WRITABLE")
    assert _kinds(History([fenced, writable]), {}) == []
