"""A follower's cut that removes a transaction's COMMIT marker names that
transaction: its records below the cut were committed here and are not any
more (the new source's marker decides), so the cut loses them from the
transaction's first offset, not from the cut (`link_rounds.Truncation`)."""

from __future__ import annotations

from linkd.core import link_rounds as rounds
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState
from linkd.core.provenance import ProvenanceItem, ProvenanceKind

NOW = 1_000
PID = 7


def _add(state: ClusterState, batch: bytes, control: int | None = None) -> None:
    topic = state.topics["orders-1"]
    state.append(topic, 0, batch, rb.parse_header(batch), NOW, control_type=control)


def _plain(at: int) -> bytes:
    return rb.build_batch([rb.RecordSpec(None, b"p", NOW)], base_offset=at)


def _follower_log(marker: int = rb.CONTROL_COMMIT) -> ClusterState:
    """orders-1-0: a plain record (0), a transaction of producer 7 (1-2), a
    plain record (3), its COMMIT (4), a plain record (5); all readable."""
    state = ClusterState("B")
    state.create_topic("orders-1", 1, {}, "t-1")
    log = state.topics["orders-1"].partitions[0]
    _add(state, _plain(0))
    txn = rb.build_batch(
        [rb.RecordSpec(None, b"t", NOW)] * 2,
        base_offset=1,
        producer_id=PID,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    _add(state, txn)
    _add(state, _plain(3))
    ended = rb.build_control_batch(
        marker=marker, producer_id=PID, producer_epoch=0, timestamp=NOW, base_offset=4
    )
    _add(state, ended, marker)
    _add(state, _plain(5))
    log.high_watermark = log.durable_offset = log.log_end_offset
    return state


def test_a_cut_below_a_commit_marker_names_the_transaction_it_uncommits() -> None:
    state = _follower_log()
    log = state.topics["orders-1"].partitions[0]
    assert not log.ongoing_txns and log.last_stable_offset == 6  # committed, readable
    cut = rep.cut_replica(state, "orders-1", 0, 4, now_ms=0)
    assert cut.uncommitted == ((PID, 1),)  # open again from offset 1: not readable
    assert log.last_stable_offset == 1
    said = rounds.Truncation("orders-1", 0, 4, cut.uncommitted).describe("cb0")
    assert "truncated to 4" in said and f"producer {PID} from offset 1" in said


def test_a_cut_above_the_marker_or_of_an_abort_names_nothing() -> None:
    aborted = _follower_log(rb.CONTROL_ABORT)
    assert rep.cut_replica(aborted, "orders-1", 0, 4, now_ms=0).uncommitted == ()
    state = _follower_log()
    assert rep.cut_replica(state, "orders-1", 0, 5, now_ms=0).uncommitted == ()
    said = rounds.Truncation("orders-1", 0, 5).describe("cb0")
    assert said == "link 'cb0': orders-1-0 diverged from its source, truncated to 5"


def test_the_cut_records_the_transactions_it_uncommits_in_its_provenance_entry() -> None:
    """describe-link and `ccr-admin provenance` read the cut's entry: it names
    the reopened transaction, and the journal's form keeps it over a restart."""
    state = _follower_log()
    config = state.links.new_config("cb0", "id-9", "C", "c:1", "", "local_dials", "", NOW)
    cut = rep.cut_replica(state, "orders-1", 0, 4, config, now_ms=NOW + 7)
    assert cut.uncommitted == ((PID, 1),)
    entry = state.topics["orders-1"].provenance[0][-1]
    assert entry.kind is ProvenanceKind.TRUNCATED and entry.offset == 4
    assert entry.uncommitted == ((PID, 1),) and entry.removed == 2
    assert entry.at_ms == NOW + 7  # when it was cut: a loss judge excuses only later sends
    stored = entry.to_entry()
    assert stored["uncommitted"] == [[PID, 1]] and stored["at_ms"] == NOW + 7
    assert ProvenanceItem.from_entry(stored) == entry
    replayed = ClusterState("B")
    replayed.create_topic("orders-1", 1, {}, "t-1")
    replayed.apply_record(entry.journal_record("orders-1", 0))
    assert replayed.topics["orders-1"].provenance[0] == [entry]


def test_a_cut_that_uncommits_nothing_stores_the_entry_as_before() -> None:
    state = _follower_log()
    config = state.links.new_config("cb0", "id-9", "C", "c:1", "", "local_dials", "", NOW)
    cut = rep.cut_replica(state, "orders-1", 0, 5, config, now_ms=0)  # (a time not known)
    assert cut.uncommitted == ()
    stored = state.topics["orders-1"].provenance[0][-1].to_entry()
    assert stored == {
        "truncated_to": 5, "link_id": "id-9", "removed": 1, "reason": "diverged",
        "offsets_moved": [],
    }  # fmt: skip
