"""A cluster's timers, ticked in one order by both shells.

The daemon ticks every TICK_INTERVAL of its event loop (`linkd/node.py`),
the simulator every `[run] tick_interval_ms` of virtual time; both drive
`tick` and deliver what it returns. Pure code: time arrives as `now_ms`.
"""

from __future__ import annotations

from collections.abc import Generator

from linkd.core.cluster import ClusterState
from linkd.core.groups import GroupReply
from linkd.core.requests import Execute, Request, WakeWaiters


def tick(state: ClusterState, now_ms: int) -> Generator[Request, object, list[GroupReply]]:
    """Every timer of a cluster, in this order: transaction timeouts and
    retention (durable before the rest), the groups' join, sync and session
    deadlines (their replies returned, for the members waiting), the
    partitions each SYNC link leads, the links' states, then the high
    watermarks those may move."""
    yield Execute(tuple(state.tick(now_ms)), "retention")
    replies = state.groups.tick(now_ms)
    state.refresh_led_partitions(now_ms)
    state.links.tick(now_ms)
    if state.refresh_high_watermarks():
        yield WakeWaiters()
    return replies
