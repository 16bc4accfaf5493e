"""A caller cancelled while the daemon carries out effects (a link call
whose remote went away) stops waiting, but the effects run whole and their
durability reaches the model: records the model appended become readable
without any later write or a restart (issue 35, N3). A durability wait
pairs each partition with its own result, also when another lost its store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from linkd.core import records as rb
from linkd.node import ClusterNode


def test_effects_whose_caller_was_cancelled_still_become_durable_and_readable(
    tmp_path: Path,
) -> None:
    async def story() -> None:
        node = ClusterNode(tmp_path, "c", fsync=True)
        node.open()
        await node.start()
        try:
            await node.create_topic("t", 2, {})
            topic = node.state.topic("t")
            effects = []
            for p in (0, 1):
                for base in (0, 3):
                    batch = rb.build_batch(
                        [rb.RecordSpec(None, b"v", 1) for _ in range(3)], base_offset=base
                    )
                    effects.append(
                        node.state.append(topic, p, batch, rb.parse_header(batch), 1)
                    )
            caller = asyncio.ensure_future(node.execute(effects))
            await asyncio.sleep(0)  # it writes, then waits for the fsync
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            for _ in range(500):  # bounded: the fsync runs in a worker thread
                if all(node.state.partition("t", p).high_watermark == 6 for p in (0, 1)):
                    break
                await asyncio.sleep(0.01)
            for p in (0, 1):
                log = node.state.partition("t", p)
                assert (log.durable_offset, log.high_watermark) == (6, 6)
                assert node.stores[(topic.topic_id, p)].log_end_offset == 6
        finally:
            await node.stop()

    asyncio.run(story())


def test_durability_awaited_after_a_partition_lost_its_store__goes_to_the_right_partitions(
    tmp_path: Path,
) -> None:
    """A durability wait that runs after one of its partitions lost its store
    (a background wait, its topic deleted meanwhile): the partitions left are
    told their own offsets, not shifted onto the one that went."""

    async def story() -> None:
        node = ClusterNode(tmp_path, "c", fsync=True)
        node.open()
        await node.start()
        try:
            await node.create_topic("x", 1, {})
            await node.create_topic("y", 1, {})
            effects = []
            for name, n in (("x", 2), ("y", 3)):
                batch = rb.build_batch([rb.RecordSpec(None, b"v", 1) for _ in range(n)])
                effects.append(
                    node.state.append(node.state.topic(name), 0, batch, rb.parse_header(batch), 1)
                )
            await node.execute(effects)
            x, y = node.state.topic("x").topic_id, node.state.topic("y").topic_id
            del node.flushers[(x, 0)]  # its store went
            node.flushers[(y, 0)].durable_offset = 0  # an fsync to wait for
            told: list[list[tuple[tuple[str, int], int]]] = []
            made_durable = node._made_durable

            def record(names: dict[str, str], durable: Any) -> None:
                pairs = list(durable)
                told.append(pairs)
                made_durable(names, pairs)

            node._made_durable = record  # type: ignore[method-assign]
            await node._make_durable({(x, 0): 2, (y, 0): 3})
            assert told == [[((y, 0), 3)]]
        finally:
            await node.stop()

    asyncio.run(story())
