"""The daemon's shell fires the core's timers at their deadlines
(`ClusterState.next_deadline_ms`), not on a cadence: a static member whose
client closed without leaving is gone exactly one session timeout after its
last heartbeat, so a client that deletes the group then is not refused. The
node runs on an injected clock here; no daemon is started."""

from __future__ import annotations

import asyncio
from pathlib import Path

from linkd.core.groups import JoinRequest
from linkd.node import ClusterNode

SESSION_MS = 6_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


async def _stable_static_group(node: ClusterNode) -> None:
    joined = await node.join_group(JoinRequest(
        group_id="g", member_id="", client_id="c", session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS, protocol_type="consumer",
        protocols=(("range", b""),), group_instance_id="static-1"))
    await node.sync_group("g", joined.generation_id, joined.member_id,
                          {joined.member_id: b""})


def test_a_group_is_deletable_exactly_one_session_timeout_after_its_member_went_quiet(
    tmp_path: Path,
) -> None:
    async def story() -> None:
        clock = Clock()
        node = ClusterNode(tmp_path, "c", fsync=False, clock=clock)
        node.open()
        await node.start()
        try:
            await _stable_static_group(node)
            assert node.state.next_deadline_ms() == clock.now_ms + SESSION_MS
            clock.now_ms += SESSION_MS - 1
            assert node.state.groups.describe_group("g").state == "Stable"
            # The deadline, to the millisecond: the timer due now fires before
            # the request is served, whether or not its task has run yet.
            clock.now_ms += 1
            await node.delete_group("g")
            assert node.state.groups.describe_group("g").state == "Dead"
        finally:
            await node.stop()

    asyncio.run(story())


def test_the_timer_task_wakes_at_the_deadline_without_a_request(tmp_path: Path) -> None:
    async def story() -> None:
        clock = Clock()
        node = ClusterNode(tmp_path, "c", fsync=False, clock=clock)
        node.open()
        await node.start()
        try:
            await _stable_static_group(node)
            clock.now_ms += SESSION_MS
            # The task sleeps until the deadline it computed (the clock here is
            # stepped, so nudge it as a call that moves a deadline does).
            node._timers_moved()
            for _ in range(100):  # bounded: a few event-loop turns suffice
                if node.state.groups.describe_group("g").state == "Empty":
                    break
                await asyncio.sleep(0.01)
            assert node.state.groups.describe_group("g").state == "Empty"
        finally:
            await node.stop()

    asyncio.run(story())
