"""Producer ids and the transaction coordinator.

Rules (Kafka's, for one broker that is also its own coordinator):
- InitProducerId hands out producer ids from a durable counter. With a
  transactional id it keeps the id's producer id and bumps its epoch, which
  fences older producers; an open transaction of that id is aborted first.
- A transaction is EMPTY -> ONGOING (first AddPartitions/AddOffsets) ->
  PREPARE_COMMIT / PREPARE_ABORT (EndTxn; journalled before any marker is
  written) -> COMPLETE_COMMIT / COMPLETE_ABORT once every partition holds its
  marker and the group offsets are settled. A prepared transaction found at
  recovery is completed again (markers are only written to partitions where
  the producer still has an open transaction, so repeating is harmless).
- A transaction open longer than its timeout is aborted by `expired` and the
  epoch is bumped, fencing the stuck producer.

Every change returns journal records (`linkd.core.journal`); `apply_record` replays them
at start-up. Pure code: time arrives as `now_ms`.
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass, field

from linkd.core import journal as jr
from linkd.core.errors import ClusterError, ErrorCode

MAX_TRANSACTION_TIMEOUT_MS = 900_000
MAX_EPOCH = 32_767


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: list[tuple[str, int]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    started_ms: int = 0
    last_epoch: int | None = None  # the epoch before the last bump (KIP-360)

    def to_record(self) -> jr.Txn:
        return jr.Txn(
            id=self.transactional_id,
            pid=self.producer_id,
            epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state.value,
            partitions=[[t, p] for t, p in self.partitions],
            groups=list(self.groups),
            started_ms=self.started_ms,
            last_epoch=self.last_epoch,
        )

    def check(self, next_producer_id: int) -> None:
        """The coordinator's view of one transactional id, asserted wherever
        it changes (both shells run it): an allocated producer id, an epoch
        in range, a timeout in range, and partitions or groups only while a
        transaction is open or completing (Empty and Complete* hold none)."""
        where = f"transactional id {self.transactional_id!r}"
        assert 0 <= self.producer_id < next_producer_id, (
            f"{where}: producer id {self.producer_id} not allocated (next {next_producer_id})"
        )
        assert 0 <= self.producer_epoch <= MAX_EPOCH, f"{where}: epoch {self.producer_epoch}"
        assert 0 < self.timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS, (
            f"{where}: timeout {self.timeout_ms} ms"
        )
        if self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            assert not self.partitions and not self.groups, (
                f"{where}: {self.state.value} yet holds {self.partitions} {self.groups}"
            )
        assert len(set(self.partitions)) == len(self.partitions), (
            f"{where}: a partition added twice: {self.partitions}"
        )

    @classmethod
    def from_record(cls, r: jr.Txn) -> TxnMetadata:
        return cls(
            transactional_id=r.id,
            producer_id=r.pid,
            producer_epoch=r.epoch,
            timeout_ms=r.timeout_ms,
            state=TxnState(r.state),
            partitions=[(str(t), int(p)) for t, p in r.partitions],
            groups=list(r.groups),
            started_ms=r.started_ms,
            last_epoch=r.last_epoch,
        )


@dataclass(frozen=True, slots=True)
class TxnCompletion:
    """What ending a transaction requires: markers on these partitions and the
    groups whose staged offsets commit or drop. The shell writes the markers,
    then calls `complete`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    groups: tuple[str, ...]


def producer_id_base(cluster_id: str) -> int:
    """Where a cluster's producer ids start. Replication copies batches with
    their producer ids, so two clusters must not hand out the same ids: each
    cluster draws from its own range of 2**40 ids, chosen by its id's CRC-32
    (15 bits, so ids stay far below 2**63)."""
    return ((zlib.crc32(cluster_id.encode()) & 0x7FFF) << 40) + 1000


class TransactionCoordinator:
    def __init__(self, first_producer_id: int = 1000) -> None:
        self.next_producer_id = first_producer_id
        self.txns: dict[str, TxnMetadata] = {}

    # -- producer ids ------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> tuple[int, int, TxnCompletion | None, list[jr.JournalRecord]]:
        """Returns (producer id, epoch, abort to finish first or None, records).

        `expected` is the producer id and epoch the caller holds (KIP-360,
        InitProducerId v3+; None or (-1, -1): none). For a transactional id,
        only the current holder bumps the epoch: a caller with an older epoch
        or another producer id was fenced and stays fenced (PRODUCER_FENCED),
        and the producer that made the last bump, retrying because it never
        saw the answer, gets the current epoch back unchanged. An idempotent
        producer gets a new producer id either way, as in Kafka."""
        if expected == (-1, -1):
            expected = None
        records: list[jr.JournalRecord] = []
        if not transactional_id:
            pid = self.next_producer_id
            self.next_producer_id += 1
            records.append(jr.PidBlock(self.next_producer_id))
            return pid, 0, None, records
        if timeout_ms <= 0 or timeout_ms > MAX_TRANSACTION_TIMEOUT_MS:
            raise ClusterError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transactional id {transactional_id!r}",
                f"transactional id {transactional_id!r}: transaction.timeout.ms={timeout_ms} is "
                f"outside 1..{MAX_TRANSACTION_TIMEOUT_MS}",
            )
        meta = self.txns.get(transactional_id)
        pending: TxnCompletion | None = None
        if meta is None:
            pid = self.next_producer_id
            self.next_producer_id += 1
            records.append(jr.PidBlock(self.next_producer_id))
            meta = TxnMetadata(transactional_id, pid, 0, timeout_ms)
            self.txns[transactional_id] = meta
        else:
            if expected is not None and self._retried_bump(meta, expected):
                return meta.producer_id, meta.producer_epoch, None, records
            # Kafka keeps the epoch a bump started from only for a bump its
            # holder asked for: a new producer's bump (no expected epoch) is
            # retried by no one, and the fenced holder must not pass as its retry.
            bumped_from = meta.producer_epoch if expected is not None else None
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                raise ClusterError(
                    ErrorCode.CONCURRENT_TRANSACTIONS,
                    f"transactional id {transactional_id!r}",
                    f"transactional id {transactional_id!r}: the previous transaction is still "
                    "completing; retry",
                )
            # The bump comes first so that the abort markers carry the new epoch
            # and fence the old producer on every partition, as Kafka does.
            if meta.state == TxnState.ONGOING and meta.producer_epoch < MAX_EPOCH - 1:
                meta.last_epoch = bumped_from
                meta.producer_epoch += 1
                pending = self._prepare(meta, commit=False, records=records)
            elif meta.state == TxnState.ONGOING:
                pending = self._prepare(meta, commit=False, records=records)
            elif meta.producer_epoch >= MAX_EPOCH - 1:
                pid = self.next_producer_id
                self.next_producer_id += 1
                records.append(jr.PidBlock(self.next_producer_id))
                meta.producer_id = pid
                meta.producer_epoch = 0
                meta.last_epoch = None
            else:
                meta.last_epoch = bumped_from
                meta.producer_epoch += 1
            meta.timeout_ms = timeout_ms
        meta.check(self.next_producer_id)
        records.append(meta.to_record())
        return meta.producer_id, meta.producer_epoch, pending, records

    @staticmethod
    def _retried_bump(meta: TxnMetadata, expected: tuple[int, int]) -> bool:
        """KIP-360's check of an InitProducerId that names the caller's
        producer id and epoch: False if it may bump (it holds the current
        epoch), True if it is a retry of the bump it made last (it gets the
        current epoch back), PRODUCER_FENCED otherwise."""
        pid, epoch = expected
        if pid == meta.producer_id and epoch == meta.producer_epoch:
            return False
        if pid == meta.producer_id and epoch == meta.last_epoch:
            return True
        raise ClusterError(
            ErrorCode.PRODUCER_FENCED,
            f"transactional id {meta.transactional_id!r}",
            f"transactional id {meta.transactional_id!r}: producer {pid} epoch {epoch} was "
            f"fenced by producer {meta.producer_id} epoch {meta.producer_epoch}",
        )

    # -- transactions --------------------------------------------------------------

    def _get(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        resource = f"transactional id {transactional_id!r}"
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise ClusterError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                resource,
                f"{resource} is unknown: call InitProducerId first",
            )
        if meta.producer_id != producer_id:
            raise ClusterError(
                ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                resource,
                f"{resource} belongs to producer id {meta.producer_id}, not {producer_id}",
            )
        if producer_epoch != meta.producer_epoch:
            raise ClusterError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                resource,
                f"{resource}: epoch {producer_epoch} is fenced by epoch {meta.producer_epoch}",
            )
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            raise ClusterError(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                resource,
                f"{resource}: the previous transaction is still completing; retry",
            )
        return meta

    def _begin_if_needed(self, meta: TxnMetadata, now_ms: int) -> None:
        if meta.state != TxnState.ONGOING:
            meta.state = TxnState.ONGOING
            meta.partitions = []
            meta.groups = []
            meta.started_ms = now_ms

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        now_ms: int,
    ) -> list[jr.JournalRecord]:
        meta = self._get(transactional_id, producer_id, producer_epoch)
        self._begin_if_needed(meta, now_ms)
        for tp in partitions:
            if tp not in meta.partitions:
                meta.partitions.append(tp)
        meta.check(self.next_producer_id)
        return [meta.to_record()]

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> list[jr.JournalRecord]:
        meta = self._get(transactional_id, producer_id, producer_epoch)
        self._begin_if_needed(meta, now_ms)
        if group_id not in meta.groups:
            meta.groups.append(group_id)
        meta.check(self.next_producer_id)
        return [meta.to_record()]

    def check_offsets_in_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> None:
        meta = self._get(transactional_id, producer_id, producer_epoch)
        if meta.state != TxnState.ONGOING or group_id not in meta.groups:
            raise ClusterError(
                ErrorCode.INVALID_TXN_STATE,
                f"transactional id {transactional_id!r}",
                f"transactional id {transactional_id!r}: group {group_id!r} was not added to the "
                "transaction (AddOffsetsToTxn first)",
            )

    def check_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: tuple[str, int]
    ) -> None:
        """A transactional batch may go only to a partition added to the open
        transaction of its producer."""
        meta = self._get(transactional_id, producer_id, producer_epoch)
        if meta.state != TxnState.ONGOING or tp not in meta.partitions:
            raise ClusterError(
                ErrorCode.INVALID_TXN_STATE,
                f"{tp[0]}-{tp[1]}",
                f"partition {tp[0]}-{tp[1]} was not added to the open transaction of "
                f"transactional id {transactional_id!r} (AddPartitionsToTxn first)",
            )

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[TxnCompletion | None, list[jr.JournalRecord]]:
        meta = self._get(transactional_id, producer_id, producer_epoch)
        records: list[jr.JournalRecord] = []
        if meta.state != TxnState.ONGOING:
            # Kafka answers a repeated EndTxn of the same outcome with success.
            done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            if meta.state in (done, TxnState.EMPTY):
                return None, records
            raise ClusterError(
                ErrorCode.INVALID_TXN_STATE,
                f"transactional id {transactional_id!r}",
                f"transactional id {transactional_id!r}: cannot "
                f"{'commit' if commit else 'abort'} in state {meta.state.value}",
            )
        return self._prepare(meta, commit, records), records

    def _prepare(
        self, meta: TxnMetadata, commit: bool, records: list[jr.JournalRecord]
    ) -> TxnCompletion:
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.check(self.next_producer_id)
        records.append(meta.to_record())
        return TxnCompletion(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            commit,
            tuple(meta.partitions),
            tuple(meta.groups),
        )

    def complete(self, completion: TxnCompletion) -> list[jr.JournalRecord]:
        meta = self.txns[completion.transactional_id]
        meta.state = TxnState.COMPLETE_COMMIT if completion.commit else TxnState.COMPLETE_ABORT
        meta.partitions = []
        meta.groups = []
        meta.check(self.next_producer_id)
        return [meta.to_record()]

    def pending_completions(self) -> list[TxnCompletion]:
        """Prepared transactions whose markers may be missing (after a restart)."""
        out = []
        for meta in self.txns.values():
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                out.append(
                    TxnCompletion(
                        meta.transactional_id,
                        meta.producer_id,
                        meta.producer_epoch,
                        meta.state == TxnState.PREPARE_COMMIT,
                        tuple(meta.partitions),
                        tuple(meta.groups),
                    )
                )
        return out

    def expired(self, now_ms: int) -> tuple[list[TxnCompletion], list[jr.JournalRecord]]:
        """Aborts transactions open beyond their timeout, bumping the epoch so the
        stuck producer is fenced."""
        completions: list[TxnCompletion] = []
        records: list[jr.JournalRecord] = []
        for meta in self.txns.values():
            if meta.state == TxnState.ONGOING and now_ms - meta.started_ms > meta.timeout_ms:
                if meta.producer_epoch < MAX_EPOCH - 1:
                    meta.producer_epoch += 1
                completions.append(self._prepare(meta, commit=False, records=records))
        return completions, records

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            m.started_ms + m.timeout_ms + 1
            for m in self.txns.values()
            if m.state == TxnState.ONGOING
        ]
        return min(deadlines) if deadlines else None

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    # -- durability ------------------------------------------------------------------

    def apply_record(self, record: jr.PidBlock | jr.Txn) -> None:
        if isinstance(record, jr.PidBlock):
            self.next_producer_id = max(self.next_producer_id, record.next)
        else:
            meta = TxnMetadata.from_record(record)
            meta.check(self.next_producer_id)
            self.txns[record.id] = meta

    def snapshot(self) -> dict[str, object]:
        return {
            "next_producer_id": self.next_producer_id,
            "txns": [jr.encode(m.to_record()) for m in self.txns.values()],
        }

    @classmethod
    def restore(cls, snapshot: dict[str, object]) -> TransactionCoordinator:
        coordinator = cls(jr.json_int(snapshot["next_producer_id"]))
        coordinator.next_producer_id = jr.json_int(snapshot["next_producer_id"])
        for r in jr.json_list(snapshot["txns"]):
            meta = TxnMetadata.from_record(_txn(jr.decode(jr.json_object(r))))
            meta.check(coordinator.next_producer_id)
            coordinator.txns[meta.transactional_id] = meta
        return coordinator


def _txn(record: jr.JournalRecord) -> jr.Txn:
    if not isinstance(record, jr.Txn):
        raise jr.JournalRecordError(f"a snapshot's transaction is a {record.TYPE!r} record")
    return record
