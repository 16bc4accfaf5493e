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
from linkd.core.cluster import ClusterState, Topic
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
        """Runs the core's clean procedure on one partition, yielding the
        bytes each step moved. The model takes a rewritten segment in the
        same event-loop step as the store swaps it in."""
        store = self.node.stores.get((topic.topic_id, partition))
        if store is None or self.node.state.topics.get(topic.name) is not topic:
            return
        part = topic.partitions[partition]
        plan = cleaner.plan_clean(part, topic.config, store.active_base_offset, self.node.clock())
        if plan is None:
            return
        generation = store.generation
        steps = cleaner.clean_procedure(part, plan, store.cleanable_segments(plan.end))
        step = cleaner.next_step(steps, None)
        while not isinstance(step, cleaner.CleanDone):
            answer: cleaner.CleanedBatches | None = None
            if isinstance(step, cleaner.MapSegment):
                spent = await asyncio.to_thread(_map_segment, store, step)
                if store.generation != generation:
                    return
            else:
                cleaned, spent = await asyncio.to_thread(_rewrite_segment, store, step)
                if self.node.state.topics.get(topic.name) is not topic or part is not (
                    topic.partitions[partition]
                ):
                    return
                if not store.swap_cleaned(step.base, list(cleaned.headers), generation):
                    log.info("clean abandoned: the log changed", extra={"partition": part.name})
                    return
                answer = cleaned
            step = cleaner.next_step(steps, answer)
            yield spent
        log.info(
            "cleaned",
            extra={"partition": part.name, "up_to": step.end,
                   "removed_records": step.removed_records},
        )


def _map_segment(store: PartitionLogStore, step: cleaner.MapSegment) -> int:
    data = store.read_segment(step.base)
    step.add(data)
    return len(data)


def _rewrite_segment(
    store: PartitionLogStore, step: cleaner.RewriteSegment
) -> tuple[cleaner.CleanedBatches, int]:
    data = store.read_segment(step.base)
    cleaned = step.clean(data)
    store.write_cleaned(step.base, cleaned.data)
    return cleaned, len(data) + len(cleaned.data)


class ClusterNodeLike(Protocol):
    """What the cleaner needs of the node (`linkd.node.ClusterNode` has it)."""

    state: ClusterState
    stores: dict[tuple[str, int], PartitionLogStore]
    clock: Callable[[], int]
