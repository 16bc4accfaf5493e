"""A caller cancelled while the daemon carries out effects (a link call
whose remote went away) stops waiting, but the effects run whole and their
durability reaches the model: records the model appended become readable
without any later write or a restart (issue 35, N3)."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
