"""Hypothesis stateful test of the partition log against a simple model.

The model is a plain list of the records a partition holds (offset, producer,
transactional or not, control marker) plus the producers' next sequence
numbers and open transactions. After every step the core's offsets, watermarks,
producer de-duplication and read_committed visibility must agree with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from linkd.core import records as rb
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.partition import PartitionLog

PIDS = (1, 2, 3)


@dataclass
class ModelRecord:
    offset: int
    producer_id: int
    transactional: bool
    control: int | None  # marker type for control records


def _batch(n: int, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    return rb.build_batch(
        [rb.RecordSpec(None, f"v{i}".encode(), 1000 + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


class PartitionMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.log = PartitionLog("t", 0)
        self.model: list[ModelRecord] = []
        self.log_start = 0
        self.hw = 0
        self.epoch = dict.fromkeys(PIDS, 0)
        self.next_seq = dict.fromkeys(PIDS, 0)
        self.last_batch: dict[int, tuple[int, int, int]] = {}  # pid -> (seq, n, base offset)
        self.open_txn: dict[int, int] = {}  # pid -> first offset
        # (marker offset, first offset) of ended transactions: unstable until
        # the marker is below the HW (Kafka's first unstable offset).
        self.ended_txn: list[tuple[int, int]] = []
        self.aborted_records: set[int] = set()

    # -- helpers ---------------------------------------------------------------

    @property
    def leo(self) -> int:
        return self.model[-1].offset + 1 if self.model else self.log_start

    def _append(self, batch: bytes, marker: int | None = None) -> int:
        header = rb.check_single_batch(batch)
        if marker is None:
            plan = self.log.check_append(header, max_message_bytes=1 << 20)
            if plan.duplicate:
                return plan.base_offset
            base = plan.base_offset
        else:
            base = self.log.log_end_offset
        stamped = rb.parse_header(rb.with_base_offset(batch, base))
        self.log.apply_batch(stamped, marker)
        return base

    # -- rules -------------------------------------------------------------------

    @rule(n=st.integers(1, 4))
    def append_plain(self, n: int) -> None:
        base = self._append(_batch(n))
        assert base == self.leo
        self.model += [ModelRecord(base + i, -1, False, None) for i in range(n)]

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3), txn=st.booleans())
    def append_idempotent(self, pid: int, n: int, txn: bool) -> None:
        if txn and pid not in self.open_txn:
            self.open_txn[pid] = self.leo
        elif not txn and pid in self.open_txn:
            txn = True  # a producer inside a transaction writes transactionally
        seq = self.next_seq[pid]
        base = self._append(_batch(n, pid, self.epoch[pid], seq, txn))
        assert base == self.leo
        self.model += [ModelRecord(base + i, pid, txn, None) for i in range(n)]
        self.next_seq[pid] = seq + n
        self.last_batch[pid] = (seq, n, base)

    @precondition(lambda self: bool(self.last_batch))
    @rule(data=st.data())
    def retry_is_a_duplicate(self, data: st.DataObject) -> None:
        pid = data.draw(st.sampled_from(sorted(self.last_batch)))
        seq, n, base = self.last_batch[pid]
        txn = pid in self.open_txn and self.open_txn[pid] <= base
        leo_before = self.log.log_end_offset
        got = self._append(_batch(n, pid, self.epoch[pid], seq, txn))
        assert got == base
        assert self.log.log_end_offset == leo_before

    @rule(pid=st.sampled_from(PIDS), gap=st.integers(1, 5))
    def sequence_gap_is_refused(self, pid: int, gap: int) -> None:
        if self.next_seq[pid] == 0 and pid not in self.log.producers:
            expected = ErrorCode.UNKNOWN_PRODUCER_ID
        else:
            expected = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        header = rb.check_single_batch(_batch(1, pid, self.epoch[pid], self.next_seq[pid] + gap))
        try:
            self.log.check_append(header, max_message_bytes=1 << 20)
        except ClusterError as exc:
            assert exc.code == expected, exc
        else:
            raise AssertionError("a sequence gap was accepted")

    @precondition(lambda self: any(e > 0 for e in self.epoch.values()))
    @rule(pid=st.sampled_from(PIDS))
    def old_epoch_is_fenced(self, pid: int) -> None:
        # The log learns of an epoch from the first batch written with it.
        if pid not in self.log.producers or self.log.producers[pid].producer_epoch == 0:
            return
        seen = self.log.producers[pid].producer_epoch
        header = rb.check_single_batch(_batch(1, pid, seen - 1, 0))
        try:
            self.log.check_append(header, max_message_bytes=1 << 20)
        except ClusterError as exc:
            assert exc.code == ErrorCode.INVALID_PRODUCER_EPOCH
        else:
            raise AssertionError("an older producer epoch was accepted")

    @precondition(lambda self: bool(self.open_txn))
    @rule(data=st.data(), commit=st.booleans())
    def end_transaction(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.open_txn)))
        marker = rb.CONTROL_COMMIT if commit else rb.CONTROL_ABORT
        batch = rb.build_control_batch(
            marker=marker, producer_id=pid, producer_epoch=self.epoch[pid], timestamp=2000
        )
        base = self._append(batch, marker)
        assert base == self.leo
        first = self.open_txn.pop(pid)
        self.ended_txn.append((base, first))
        if not commit:
            self.aborted_records |= {
                r.offset
                for r in self.model
                if r.producer_id == pid
                and r.transactional
                and r.offset >= first
                and r.control is None
            }
        self.model.append(ModelRecord(base, pid, True, marker))

    @precondition(lambda self: all(p not in self.open_txn for p in PIDS))
    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid: int) -> None:
        self.epoch[pid] += 1
        self.next_seq[pid] = 0
        self.last_batch.pop(pid, None)

    @rule(data=st.data())
    def mark_durable(self, data: st.DataObject) -> None:
        # The shell reports durability at batch boundaries (whole batches are written).
        boundaries = [b.next_offset for b in self.log.batches if b.next_offset >= self.hw]
        offset = data.draw(st.sampled_from([self.hw, *boundaries]))
        self.log.mark_durable(offset)
        self.hw = max(self.hw, offset)

    @precondition(lambda self: len(self.log.batches) > 1)
    @rule(data=st.data())
    def retention_advances_start(self, data: st.DataObject) -> None:
        boundaries = [b.base_offset for b in self.log.batches if b.base_offset <= self.hw]
        target = data.draw(st.sampled_from(boundaries))
        self.log.advance_log_start(target)
        self.log_start = max(self.log_start, target)

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def offsets_and_watermarks(self) -> None:
        log = self.log
        assert log.log_end_offset == self.leo
        assert log.high_watermark == min(self.hw, self.leo)
        assert log.log_start_offset == self.log_start
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        unstable = [f for m, f in self.ended_txn if m >= log.high_watermark]
        expected_lso = min([log.high_watermark, *self.open_txn.values(), *unstable])
        assert log.last_stable_offset == expected_lso
        # Batches are contiguous.
        for a, b in zip(log.batches, log.batches[1:], strict=False):
            assert a.next_offset == b.base_offset

    @invariant()
    def read_committed_hides_exactly_the_aborted(self) -> None:
        """Kafka's consumer-side filter over what a read_committed fetch returns
        must give exactly the model's committed records below the LSO."""
        if self.log_start >= self.log.log_end_offset:
            return
        plan = self.log.plan_fetch(self.log_start, read_committed=True)
        aborted_by_pid: dict[int, list[int]] = {}
        for a in sorted(plan.aborted, key=lambda a: a.first_offset):
            aborted_by_pid.setdefault(a.producer_id, []).append(a.first_offset)
        skipping: set[int] = set()
        visible: list[int] = []
        for batch in self.log.batches:
            if batch.base_offset >= plan.upper_offset or batch.last_offset < self.log_start:
                continue
            pid = batch.producer_id
            starts = aborted_by_pid.get(pid, [])
            while starts and starts[0] <= batch.base_offset:
                starts.pop(0)
                skipping.add(pid)
            if batch.is_control:
                if batch.control_type == rb.CONTROL_ABORT:
                    skipping.discard(pid)
                continue
            if batch.is_transactional and pid in skipping:
                continue
            visible += range(max(batch.base_offset, self.log_start), batch.next_offset)
        expected = [
            r.offset
            for r in self.model
            if self.log_start <= r.offset < plan.upper_offset
            and r.control is None
            and r.offset not in self.aborted_records
        ]
        assert visible == expected


TestPartition = PartitionMachine.TestCase
TestPartition.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
