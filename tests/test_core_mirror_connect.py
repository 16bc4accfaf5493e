"""Kafka Connect's group assignment (linkd/core/mirror/connect.py): eager and
incremental cooperative (KIP-415) rebalances, and MirrorSourceConnector's task
split. Properties over random membership histories, then worked examples."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core.mirror.connect import (
    Assignor,
    ConnectProtocol,
    ConnectProtocolError,
    Round,
    Unit,
    connector_units,
    split_round_robin,
)

Owned = dict[str, frozenset[Unit]]
MAX_DELAY = 300_000


def settle(
    assignor: Assignor, owned: Owned, configured: frozenset[Unit], now_ms: int
) -> tuple[Owned, int, list[tuple[Owned, Round]]]:
    """Rounds until none is asked for: a follow-up at once, a held delay
    when it ends. Returns what each member owns, the time, and each round
    with what the members owned before it."""
    rounds: list[tuple[Owned, Round]] = []
    for _ in range(20):
        if not assignor.protocol.cooperative:
            owned = {m: frozenset() for m in owned}  # eager: stop everything, then join
        r = assignor.rebalance(owned, configured, now_ms)
        rounds.append((owned, r))
        owned = r.owned_after(owned)
        if r.follow_up:
            continue
        if r.delay_ms:
            now_ms += r.delay_ms
            continue
        return owned, now_ms, rounds
    raise AssertionError("the group did not settle in 20 rounds")


def exactly_once(owned: Owned, configured: frozenset[Unit]) -> None:
    seen: list[Unit] = [u for m in sorted(owned) for u in owned[m]]
    assert sorted(seen) == sorted(configured), (owned, configured)


protocols = st.sampled_from(list(ConnectProtocol))
# A membership history: each step a worker joins (a new one or one that left
# earlier) or leaves (cleanly or dying: the group sees both alike).
steps = st.lists(st.tuples(st.sampled_from(["join", "leave"]), st.integers(0, 5)), max_size=12)


@settings(max_examples=150, deadline=None)
@given(protocols, st.integers(1, 4), st.integers(1, 6), st.integers(1, 4), steps)
def test_every_unit_runs_on_exactly_one_live_worker_once_settled(
    protocol: ConnectProtocol,
    connectors: int,
    tasks: int,
    first_workers: int,
    history: list[tuple[str, int]],
) -> None:
    configured = frozenset().union(*(connector_units(f"c{i}", tasks) for i in range(connectors)))
    assignor = Assignor(protocol, MAX_DELAY)
    owned: Owned = {f"w{i}": frozenset() for i in range(first_workers)}
    now = 0
    owned, now, _ = settle(assignor, owned, configured, now)
    exactly_once(owned, configured)
    for op, n in history:
        worker = f"w{n}"
        if op == "join" and worker not in owned:
            owned[worker] = frozenset()
        elif op == "leave" and worker in owned and len(owned) > 1:
            del owned[worker]
        else:
            continue
        now += 1_000
        owned, now, _ = settle(assignor, owned, configured, now)
        exactly_once(owned, configured)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([ConnectProtocol.COMPATIBLE, ConnectProtocol.SESSIONED]),
    st.integers(1, 3),
    st.integers(1, 8),
    st.integers(1, 4),
    steps,
)
def test_cooperative_never_revokes_a_unit_that_stays(
    protocol: ConnectProtocol,
    connectors: int,
    tasks: int,
    first_workers: int,
    history: list[tuple[str, int]],
) -> None:
    configured = frozenset().union(*(connector_units(f"c{i}", tasks) for i in range(connectors)))
    assignor = Assignor(protocol, MAX_DELAY)
    owned: Owned = {f"w{i}": frozenset() for i in range(first_workers)}
    owned, now, _ = settle(assignor, owned, configured, 0)
    for op, n in history:
        worker = f"w{n}"
        if op == "join" and worker not in owned:
            owned[worker] = frozenset()
        elif op == "leave" and worker in owned and len(owned) > 1:
            del owned[worker]
        else:
            continue
        before = dict(owned)
        owned, now, rounds = settle(assignor, owned, configured, now + 1_000)
        for m in sorted(before):
            stays = before[m] & owned.get(m, frozenset())
            for _owned, r in rounds:
                if m in r.members:
                    assert not (r.members[m].revoked & stays), (m, r)
        for _owned, r in rounds:
            for a in r.members.values():
                assert not (a.revoked & a.assigned)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(2, 8), st.integers(2, 4))
def test_eager_revokes_every_unit_at_every_rebalance(
    connectors: int, tasks: int, workers: int
) -> None:
    configured = frozenset().union(*(connector_units(f"c{i}", tasks) for i in range(connectors)))
    assignor = Assignor(ConnectProtocol.EAGER)
    owned: Owned = {f"w{i}": frozenset() for i in range(workers)}
    owned = assignor.rebalance(owned, configured, 0).owned_after(owned)
    owned["w9"] = frozenset()
    r = assignor.rebalance(owned, configured, 1_000)
    assert {u for a in r.members.values() for u in a.revoked} == configured
    exactly_once(r.owned_after(owned), configured)


def test_eager_deals_connectors_then_tasks_round_robin() -> None:
    # The seed's picture: 3 workers, 1 connector, 5 tasks.
    configured = connector_units("mm2", 5)
    r = Assignor(ConnectProtocol.EAGER).rebalance(
        {"w1": frozenset(), "w2": frozenset(), "w3": frozenset()}, configured, 0
    )
    got = {m: sorted(str(u) for u in a.assigned) for m, a in r.members.items()}
    assert got == {"w1": ["mm2", "mm2-2"], "w2": ["mm2-0", "mm2-3"], "w3": ["mm2-1", "mm2-4"]}
    assert r.leader == "w1" and not r.follow_up and r.delay_ms == 0


def test_cooperative_holds_a_departed_workers_tasks_until_the_delay_ends() -> None:
    configured = connector_units("mm2", 6)
    a = Assignor(ConnectProtocol.SESSIONED, MAX_DELAY)
    owned, _now, _ = settle(
        a, {"w1": frozenset(), "w2": frozenset(), "w3": frozenset()}, configured, 0
    )
    lost = owned.pop("w2")
    r = a.rebalance(owned, configured, 10_000)
    assert r.delay_ms == MAX_DELAY and r.held == lost
    assert all(not x.revoked and not x.assigned for x in r.members.values())
    # w2 restarts 60 s later: it joins empty and waits for the rest of the delay.
    owned = r.owned_after(owned)
    owned["w2"] = frozenset()
    r = a.rebalance(owned, configured, 70_000)
    assert r.delay_ms == MAX_DELAY - 60_000 and r.held == lost
    owned = r.owned_after(owned)
    r = a.rebalance(owned, configured, 10_000 + MAX_DELAY)
    assert r.members["w2"].assigned == lost and r.delay_ms == 0
    assert not r.members["w1"].revoked and not r.members["w3"].revoked


def test_cooperative_reassigns_to_survivors_when_the_worker_never_returns() -> None:
    configured = connector_units("mm2", 4)
    a = Assignor(ConnectProtocol.COMPATIBLE, 5_000)
    owned, _now, _ = settle(a, {"w1": frozenset(), "w2": frozenset()}, configured, 0)
    del owned["w2"]
    owned, now, rounds = settle(a, owned, configured, 1_000)
    assert owned["w1"] == configured and now == 6_000 and len(rounds) == 2


def test_cooperative_join_moves_only_the_excess_in_two_rounds() -> None:
    configured = connector_units("mm2", 4)
    a = Assignor(ConnectProtocol.SESSIONED)
    owned, _now, _ = settle(a, {"w1": frozenset()}, configured, 0)
    owned["w2"] = frozenset()
    r1 = a.rebalance(owned, configured, 1_000)
    revoked = r1.members["w1"].revoked
    assert r1.follow_up and len(revoked) == 2 and not r1.members["w2"].assigned
    owned = r1.owned_after(owned)
    r2 = a.rebalance(owned, configured, 1_000)
    assert r2.members["w2"].assigned == revoked and not r2.follow_up


def test_mirror_source_split_is_round_robin_over_partitions() -> None:
    parts = [f"t0-{p}" for p in range(8)] + ["t1-0", "t1-1", "t2-0", "t2-1"]
    tasks = split_round_robin(parts, 3)
    assert tasks[0] == ["t0-0", "t0-3", "t0-6", "t1-1"]
    assert tasks[2] == ["t0-2", "t0-5", "t1-0", "t2-1"]
    assert split_round_robin(["a", "b"], 5) == [["a"], ["b"]]
    with pytest.raises(ConnectProtocolError, match=r"tasks\.max"):
        split_round_robin(parts, 0)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ConnectProtocolError, match=r"connect\.protocol = 'lazy'"):
        ConnectProtocol.parse("lazy")
    assert ConnectProtocol.parse("sessioned").cooperative
    assert not ConnectProtocol.parse("eager").cooperative
    with pytest.raises(ConnectProtocolError, match=r"scheduled\.rebalance\.max\.delay\.ms"):
        Assignor(ConnectProtocol.SESSIONED, -1)
    with pytest.raises(ConnectProtocolError, match="at least one member"):
        Assignor(ConnectProtocol.EAGER).rebalance({}, frozenset(), 0)
