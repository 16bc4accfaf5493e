"""The consumer groups' offsets, kept apart from their membership (as Kafka
keeps them: a group's committed offsets live in `__consumer_offsets`, its
members only in the coordinator's memory).

`OffsetStore` holds, per group id, the committed offsets and the offsets
staged by open transactions (per producer id). It decides nothing about who
may commit: the coordinator (`linkd.core.groups.GroupCoordinator`) checks the
member and generation, the limits and the group's state, then builds the
journal records; this store applies them (`apply`, also on replay) and
answers what is committed or staged. Its snapshot is the durable part of the
coordinator's (`{"group", "offsets", "pending"}` rows).

Pure code: no I/O; dicts are iterated in insertion order or sorted.
"""

from __future__ import annotations

from dataclasses import dataclass

from linkd.core import journal as jr

Partition = tuple[str, int]
OffsetRecord = (
    jr.GroupDelete | jr.OffsetDelete | jr.TxnOffsetEnd | jr.OffsetCommit | jr.TxnOffsetStage
)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    leader_epoch: int
    commit_timestamp_ms: int


class OffsetStore:
    def __init__(self) -> None:
        self._committed: dict[str, dict[Partition, CommittedOffset]] = {}
        # group -> producer id -> offsets staged by its open transaction
        self._staged: dict[str, dict[int, dict[Partition, CommittedOffset]]] = {}

    # -- queries ---------------------------------------------------------------------------

    def holds(self, group_id: str) -> bool:
        """The group has a committed or a staged offset."""
        return bool(self._committed.get(group_id)) or bool(self._staged.get(group_id))

    def committed(
        self, group_id: str, partitions: list[Partition] | None
    ) -> dict[Partition, CommittedOffset]:
        """Committed offsets (sorted by partition, or in the order asked);
        partitions without one are left out."""
        offsets = self._committed.get(group_id, {})
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    def known_partitions(self, group_id: str) -> set[Partition]:
        """Partitions with a committed or a staged offset."""
        known = set(self._committed.get(group_id, {}))
        for staged in self._staged.get(group_id, {}).values():
            known.update(staged)
        return known

    def staging_producers(self, group_id: str) -> set[int]:
        return set(self._staged.get(group_id, {}))

    def staged_partitions(self, group_id: str) -> set[Partition]:
        return {tp for staged in self._staged.get(group_id, {}).values() for tp in staged}

    def committed_for_topic(self, topic: str) -> list[tuple[str, str, int]]:
        """(group, topic, partition) of every committed offset of the topic, sorted."""
        return [
            (gid, t, p)
            for gid in sorted(self._committed)
            for t, p in sorted(self._committed[gid])
            if t == topic
        ]

    # -- changes ---------------------------------------------------------------------------

    def apply(self, record: OffsetRecord) -> None:
        """Applies a record (no limits are checked: it happened)."""
        gid = record.group
        if isinstance(record, jr.GroupDelete):
            self._committed.pop(gid, None)
            self._staged.pop(gid, None)
        elif isinstance(record, jr.OffsetDelete):
            self._committed.get(gid, {}).pop((record.topic, record.partition), None)
        elif isinstance(record, jr.TxnOffsetEnd):
            staged = self._staged.get(gid, {}).pop(record.producer_id, None)
            if staged is not None and record.commit:
                self._committed.setdefault(gid, {}).update(staged)
        else:
            tp = (record.topic, record.partition)
            value = CommittedOffset(
                record.offset, record.metadata, record.leader_epoch, record.ts
            )
            if isinstance(record, jr.OffsetCommit):
                self._committed.setdefault(gid, {})[tp] = value
            else:
                self._staged.setdefault(gid, {}).setdefault(record.producer_id, {})[tp] = value
        self._forget_if_empty(gid)

    def _forget_if_empty(self, gid: str) -> None:
        if gid in self._committed and not self._committed[gid]:
            del self._committed[gid]
        if gid in self._staged and not self._staged[gid]:
            del self._staged[gid]

    # -- durability ------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, object]]:
        """One row per group holding anything, sorted by group id."""

        def rows(offsets: dict[Partition, CommittedOffset]) -> list[list[object]]:
            return [
                [t, p, o.offset, o.metadata, o.leader_epoch, o.commit_timestamp_ms]
                for (t, p), o in offsets.items()
            ]

        return [
            {
                "group": gid,
                "offsets": rows(self._committed.get(gid, {})),
                "pending": [
                    {"producer_id": pid, "offsets": rows(staged)}
                    for pid, staged in self._staged.get(gid, {}).items()
                ],
            }
            for gid in sorted(set(self._committed) | set(self._staged))
        ]

    def restore_group(self, g: dict[str, object]) -> str:
        """Restores one snapshot row; returns its group id."""
        gid = str(g["group"])
        for row in jr.json_list(g["offsets"]):
            partition, committed = _read_row(row)
            self._committed.setdefault(gid, {})[partition] = committed
        for staged in map(jr.json_object, jr.json_list(g["pending"])):
            producer = jr.json_int(staged["producer_id"])
            target = self._staged.setdefault(gid, {}).setdefault(producer, {})
            for row in jr.json_list(staged["offsets"]):
                partition, committed = _read_row(row)
                target[partition] = committed
        self._forget_if_empty(gid)
        return gid


def _read_row(row: object) -> tuple[Partition, CommittedOffset]:
    """A snapshot row: topic, partition, offset, metadata, epoch, timestamp."""
    t, p, o, m, e, ts = jr.json_list(row)
    n = jr.json_int
    return (str(t), n(p)), CommittedOffset(n(o), str(m), n(e), n(ts))


__all__ = ["CommittedOffset", "OffsetRecord", "OffsetStore", "Partition"]
