"""The daemon's log cleaner: compacts the partitions of compacted topics in the background.

`linkd/core/cleaner.py` decides what a clean keeps; this shell does the I/O.
One task, one partition at a time. Each pass reads and writes at most a
budget of bytes (`--log-cleaner-io-bytes-per-pass`; a segment larger than the
budget is still handled whole, alone), then sleeps `--log-cleaner-backoff-ms`.
A clean that outlasts a pass continues in the next one. Reading, cleaning and
writing the cleaned copy of a segment run in a worker thread (the segment
never changes meanwhile: it is below the active segment and durable); the
swap and the model's update run on the event loop, together, so no request
sees one without the other. If the log changed shape meanwhile (truncated,
reset, deleted), the swap is refused and the clean abandoned: the next pass
plans anew.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from linkd.core import cleaner
from linkd.core.cleaner import CleanPlan
from linkd.core.cluster import ClusterState, Topic
from linkd.core.partition import PartitionLog
from linkd.storage.segments import PartitionLogStore

log = logging.getLogger("linkd.cleaner")

DEFAULT_BACKOFF_MS = 15_000
DEFAULT_BYTES_PER_PASS = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    backoff_ms: int = DEFAULT_BACKOFF_MS
    bytes_per_pass: int = DEFAULT_BYTES_PER_PASS

    def __post_init__(self) -> None:
        if self.backoff_ms < 1:
            raise ValueError(f"log cleaner backoff must be at least 1 ms, not {self.backoff_ms}")
        if self.bytes_per_pass < 1:
            raise ValueError(
                f"log cleaner bytes per pass must be at least 1, not {self.bytes_per_pass}"
            )


class LogCleaner:
    """Runs cleans of the node's compacted partitions (see the module docstring)."""

    def __init__(self, node: ClusterNodeLike, settings: CleanerSettings) -> None:
        self.node = node
        self.settings = settings
        self._jobs: AsyncIterator[int] | None = None

    async def run(self) -> None:
        while True:
            try:
                await self.one_pass()
            except Exception:  # a failed clean must not stop later ones
                log.exception("log cleaner pass failed")
                self._jobs = None
            await asyncio.sleep(self.settings.backoff_ms / 1000)

    async def one_pass(self) -> int:
        """Works until the budget is spent or nothing is left; returns the bytes moved."""
        spent = 0
        while spent < self.settings.bytes_per_pass:
            if self._jobs is None:
                self._jobs = self._all_cleans()
            try:
                spent += await anext(self._jobs)
            except StopAsyncIteration:
                self._jobs = None
                return spent
        return spent

    async def _all_cleans(self) -> AsyncIterator[int]:
        """One sweep over every compacted partition that needs a clean."""
        for topic in list(self.node.state.topics.values()):
            if not topic.config.compact:
                continue
            for partition in range(len(topic.partitions)):
                async for spent in self._clean(topic, partition):
                    yield spent

    async def _clean(self, topic: Topic, partition: int) -> AsyncIterator[int]:
        store = self.node.stores.get((topic.topic_id, partition))
        if store is None or self.node.state.topics.get(topic.name) is not topic:
            return
        part = topic.partitions[partition]
        now = self.node.clock()
        plan = cleaner.plan_clean(part, topic.config, store.active_base_offset, now)
        if plan is None:
            return
        generation = store.generation
        segments = store.cleanable_segments(plan.end)
        offset_map: dict[bytes, int] = {}
        for base, next_base in segments:
            if next_base <= plan.first_dirty:
                continue
            data = await asyncio.to_thread(_map_segment, store, base, plan, offset_map)
            if store.generation != generation:
                return
            yield data
        removed = tombstones = 0
        for base, next_base in segments:
            cleaned, moved = await asyncio.to_thread(
                _clean_segment, store, base, offset_map, plan, part
            )
            if self.node.state.topics.get(topic.name) is not topic or part is not (
                topic.partitions[partition]
            ):
                return
            if not store.swap_cleaned(base, list(cleaned.headers), generation):
                log.info("clean abandoned: the log changed", extra={"partition": part.name})
                return
            cleaner.apply_cleaned(part, base, next_base, cleaned.headers)
            removed += cleaned.removed_records
            tombstones += cleaned.kept_tombstones
            yield moved
        cleaner.finish_clean(part, plan, removed, tombstones)
        log.info(
            "cleaned",
            extra={"partition": part.name, "up_to": plan.end, "removed_records": removed},
        )


def _map_segment(
    store: PartitionLogStore, base: int, plan: CleanPlan, offset_map: dict[bytes, int]
) -> int:
    data = store.read_segment(base)
    cleaner.add_to_offset_map(data, plan, offset_map)
    return len(data)


def _clean_segment(
    store: PartitionLogStore,
    base: int,
    offset_map: dict[bytes, int],
    plan: CleanPlan,
    part: PartitionLog,
) -> tuple[cleaner.CleanedBatches, int]:
    data = store.read_segment(base)
    cleaned = cleaner.clean_batches(data, offset_map, plan, part.cleaner)
    store.write_cleaned(base, cleaned.data)
    return cleaned, len(data) + len(cleaned.data)


class ClusterNodeLike(Protocol):
    """What the cleaner needs of the node (`linkd.node.ClusterNode` has it)."""

    state: ClusterState
    stores: dict[tuple[str, int], PartitionLogStore]
    clock: Callable[[], int]
