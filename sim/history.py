"""The history: every client operation, as the client saw it.

Rules (Jepsen's):
- Running and judging meet only here: workloads append operations, checkers
  read them (and the final logs), nothing else.
- Each operation ends in one of three ways: `ok` (it happened), `fail` (it
  definitely did not happen: the cluster refused it) or `info` (indefinite: a
  timeout or a crash; it may or may not have happened).
- Values are plain data so a history can be planted in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

OpType = Literal["ok", "fail", "info"]


@dataclass(frozen=True, slots=True)
class Send:
    topic: str
    partition: int
    value: str  # "" for bulk batches, which checkers do not follow record by record
    offset: int = -1  # the acknowledged offset (ok only)
    records: int = 1
    # The transaction the record was written in ("" for none): every record of
    # one transaction carries the same name (invariant 5).
    txn: str = ""
    # The record's key ("" when unknown): on a compacted topic a record a
    # later record of its key superseded may be cleaned away.
    key: str = ""
    # At the cluster's acknowledgement, for every SYNC link that was IN_SYNC on
    # the topic: (follower cluster, follower topic, the follower partition's
    # durable log end offset then). Invariant 4: each end covers the record.
    sync_witnesses: tuple[tuple[str, str, int], ...] = ()
    # At the acknowledgement: (follower cluster, follower topic, link id) of
    # every link that had the record's namespace attached on both sides
    # (invariant 10: each must hold it at the same offset, or a report names it).
    followers: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Poll:
    """What one consumer poll returned: (partition, offset, value) per record,
    in delivery order. `session` changes when the consumer legitimately starts
    over (a failover moves it to another cluster)."""

    topic: str
    records: tuple[tuple[int, int, str], ...]
    session: int = 0
    read_committed: bool = False


@dataclass(frozen=True, slots=True)
class Commit:
    topic: str
    offsets: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Op:
    process: str
    client_class: str  # a spec section 6 row, e.g. "source_producer"
    cluster: str
    type: OpType
    invoke_ms: int
    complete_ms: int
    value: Send | Poll | Commit
    error: str = ""
    # Was the topic in a reserved namespace when the cluster accepted the
    # write? (invariant 3; only meaningful for ok sends)
    reserved: bool = False

    @property
    def latency_ms(self) -> int:
        return self.complete_ms - self.invoke_ms


@dataclass(slots=True)
class History:
    ops: list[Op] = field(default_factory=list)
    # One-shot watchers: (which op, what to do once one is added).
    watchers: list[tuple[Callable[[Op], bool], Callable[[], None]]] = field(
        default_factory=list
    )

    def add(self, op: Op) -> None:
        self.ops.append(op)
        if self.watchers:
            fired = [w for w in self.watchers if w[0](op)]
            for w in fired:
                self.watchers.remove(w)
                w[1]()

    def watch(self, which: Callable[[Op], bool], then: Callable[[], None]) -> None:
        """Calls `then` once, when an op that `which` accepts is added."""
        self.watchers.append((which, then))

    def sends(self) -> list[Op]:
        return [o for o in self.ops if isinstance(o.value, Send)]

    def polls(self) -> list[Op]:
        return [o for o in self.ops if isinstance(o.value, Poll)]
