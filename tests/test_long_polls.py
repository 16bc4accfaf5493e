"""Long polls wake only for the partitions they watch (linkd/long_polls.py)."""

from __future__ import annotations

import asyncio

from linkd.long_polls import LongPolls


def test_a_move_wakes_only_the_waiters_watching_that_partition() -> None:
    polls = LongPolls()
    a = polls.park([("t", 0)])
    b = polls.park([("t", 1), ("u", 0)])
    anything = polls.park(None)
    polls.notify([("u", 0)])
    assert not a.is_set() and b.is_set() and anything.is_set()
    assert len(polls) == 1  # woken waiters are unparked
    polls.notify([("t", 1)])
    assert not a.is_set()
    polls.notify(None)  # a move somewhere unknown wakes everyone
    assert a.is_set() and len(polls) == 0


def test_wait_returns_on_a_move_or_at_its_timeout_and_unpark_forgets() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        polls = LongPolls()
        moved = polls.park([("t", 0)])
        asyncio.get_running_loop().call_soon(polls.notify, [("t", 0)])
        await polls.wait(moved, 30.0)
        quiet = polls.park([("t", 1)])
        await polls.wait(quiet, 0.01)
        left = len(polls)
        polls.unpark(quiet)
        polls.unpark(quiet)  # twice is harmless
        return moved.is_set(), quiet.is_set(), left - len(polls)

    woken, quiet_woken, forgotten = asyncio.run(scenario())
    assert woken and not quiet_woken and forgotten == 1
