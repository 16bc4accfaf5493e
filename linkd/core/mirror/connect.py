"""Kafka Connect's group of workers: who runs which connector and task.

MirrorMaker 2 runs as Connect connectors (a dedicated MM2 cluster is a group
of Connect workers). This module holds the rules of that deployment, free of
I/O and clocks: how MirrorSourceConnector splits its partitions into tasks,
and how the group's leader assigns connectors and tasks to the workers at each
rebalance, under both protocols Connect has (`connect.protocol`):

- `eager` (Connect before 2.3, `EagerAssignor`): at every rebalance each
  worker stops everything it runs before it joins; the leader deals every
  connector, then every task, round-robin over the members sorted by id
  (the task deal continues where the connector deal stopped). Stop the world.
- `compatible` and `sessioned` (KIP-415, `IncrementalCooperativeAssignor`;
  `sessioned`, the default since 2.4, only adds signed internal requests):
  workers keep running what they own and report it when they join. The
  leader then
  * revokes what is no longer configured, and whatever two workers both claim;
  * finds what is *lost*: assigned at the previous round, now owned by nobody
    (its worker left or died). If no worker left since the previous round it
    is reassigned at once. Otherwise the leader holds it for
    `scheduled.rebalance.max.delay.ms` (default 5 minutes, counted from the
    first round that found it lost), answering each worker with the delay
    remaining; workers that joined empty meanwhile are the candidates (the
    departed one coming back). When a round runs at or after the deadline,
    the lost units go round-robin to the candidates still present, else to
    the least loaded workers;
  * when nothing is held, revokes load from workers above their balanced
    share, so that new (empty) workers receive it: a revoked unit is never
    given to another worker in the same round; its worker rejoins at once and
    the follow-up round assigns it (two rounds, as KIP-415's protocol);
  * assigns new units (and released ones) to the least loaded workers.
  A unit that stays on its worker is never revoked.

`Assignor.rebalance` is one round: the members present (each with what it
owns now) and the time; it answers each member's assignment. The caller (a
shell) carries it out: stops what is revoked, starts what is assigned,
rejoins when told to (`follow_up`), and runs a round again when the delay
ends.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

DEFAULT_MAX_DELAY_MS = 300_000  # scheduled.rebalance.max.delay.ms
DEFAULT_SESSION_TIMEOUT_MS = 10_000  # session.timeout.ms of a Connect worker
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000  # heartbeat.interval.ms


class ConnectProtocolError(ValueError):
    """A Connect setting is invalid; the message names it."""


class ConnectProtocol(enum.Enum):
    """`connect.protocol`: eager, or one of the two cooperative versions."""

    EAGER = "eager"
    COMPATIBLE = "compatible"
    SESSIONED = "sessioned"

    @property
    def cooperative(self) -> bool:
        return self is not ConnectProtocol.EAGER

    @classmethod
    def parse(cls, text: str) -> ConnectProtocol:
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise ConnectProtocolError(
                f"connect.protocol = {text!r} is not one of {known}"
            ) from None


@dataclass(frozen=True, order=True, slots=True)
class Unit:
    """A connector (`task` = -1) or one of its tasks: what the leader assigns."""

    connector: str
    task: int = -1

    @property
    def is_connector(self) -> bool:
        return self.task < 0

    def __str__(self) -> str:
        return self.connector if self.is_connector else f"{self.connector}-{self.task}"


def connector_units(connector: str, tasks: int) -> frozenset[Unit]:
    """A connector and its tasks 0..tasks-1."""
    return frozenset({Unit(connector), *(Unit(connector, i) for i in range(tasks))})


def split_round_robin(items: Iterable[T], tasks_max: int) -> list[list[T]]:
    """MirrorSourceConnector.taskConfigs: min(tasks.max, len(items)) tasks,
    item i going to task i mod that count (items in their listing order)."""
    if tasks_max < 1:
        raise ConnectProtocolError(f"tasks.max = {tasks_max} must be >= 1")
    listed = list(items)
    count = min(tasks_max, len(listed))
    out: list[list[T]] = [[] for _ in range(count)]
    for i, item in enumerate(listed):
        out[i % count].append(item)
    return out


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """What the leader answers one worker: what to stop, what to start, and
    the delay after which a round must run again (0: none)."""

    revoked: frozenset[Unit]
    assigned: frozenset[Unit]
    delay_ms: int = 0

    def apply(self, owned: frozenset[Unit]) -> frozenset[Unit]:
        return (owned - self.revoked) | self.assigned


@dataclass(frozen=True, slots=True)
class Round:
    """One rebalance: every member's answer."""

    generation: int
    leader: str
    members: Mapping[str, MemberAssignment]
    delay_ms: int  # > 0: lost units are held; run a round again then
    follow_up: bool  # some member had units revoked: it rejoins at once
    held: frozenset[Unit]  # lost units held for their worker's return

    def owned_after(self, owned: Mapping[str, frozenset[Unit]]) -> dict[str, frozenset[Unit]]:
        return {m: a.apply(owned.get(m, frozenset())) for m, a in sorted(self.members.items())}


@dataclass(slots=True)
class Assignor:
    """The leader's assignor and what it remembers between rounds (Connect
    keeps it on the leader; a new leader starts empty, as here after
    `forget()`)."""

    protocol: ConnectProtocol
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS
    generation: int = 0
    previous_assignment: frozenset[Unit] = frozenset()
    previous_members: frozenset[str] = frozenset()
    scheduled_ms: int = 0  # when held units may be reassigned; 0: nothing held
    candidates: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.max_delay_ms < 0:
            raise ConnectProtocolError(
                f"scheduled.rebalance.max.delay.ms = {self.max_delay_ms} must be >= 0"
            )

    def forget(self) -> None:
        """A new leader: no memory of earlier rounds."""
        self.previous_assignment = frozenset()
        self.previous_members = frozenset()
        self.scheduled_ms = 0
        self.candidates = set()

    def rebalance(
        self, owned: Mapping[str, frozenset[Unit]], configured: frozenset[Unit], now_ms: int
    ) -> Round:
        """One round over the members present (`owned`: what each runs now;
        eager members report nothing: they stopped it all before joining)."""
        if not owned:
            raise ConnectProtocolError("a rebalance needs at least one member")
        self.generation += 1
        leader = min(owned)
        if not self.protocol.cooperative:
            return self._eager(owned, configured, leader)
        return self._cooperative(owned, configured, leader, now_ms)

    # -- eager ------------------------------------------------------------------------------

    def _eager(
        self, owned: Mapping[str, frozenset[Unit]], configured: frozenset[Unit], leader: str
    ) -> Round:
        members = sorted(owned)
        deal: dict[str, set[Unit]] = {m: set() for m in members}
        connectors = sorted(u for u in configured if u.is_connector)
        tasks = sorted(u for u in configured if not u.is_connector)
        for i, unit in enumerate([*connectors, *tasks]):
            deal[members[i % len(members)]].add(unit)
        answers = {m: MemberAssignment(frozenset(owned[m]), frozenset(deal[m])) for m in members}
        self.previous_assignment = configured
        self.previous_members = frozenset(members)
        return Round(self.generation, leader, answers, 0, False, frozenset())

    # -- incremental cooperative ------------------------------------------------------------

    def _cooperative(
        self,
        owned: Mapping[str, frozenset[Unit]],
        configured: frozenset[Unit],
        leader: str,
        now_ms: int,
    ) -> Round:
        members = sorted(owned)
        claims: dict[Unit, list[str]] = {}
        for m in members:
            for unit in owned[m]:
                claims.setdefault(unit, []).append(m)
        revoke: dict[str, set[Unit]] = {m: set() for m in members}
        for unit, claimants in sorted(claims.items()):
            if unit not in configured or len(claimants) > 1:
                for m in claimants:
                    revoke[m].add(unit)
        keep = {m: set(owned[m]) - revoke[m] for m in members}
        active = frozenset(claims)
        lost = (self.previous_assignment - active) & configured
        fresh = configured - self.previous_assignment - active
        delay, held, to_assign, direct = self._lost(lost, members, keep, now_ms)
        fresh |= to_assign
        for m, units in direct.items():
            keep[m] |= units
        if delay == 0:
            for m, units in self._balance_revocations(keep, configured).items():
                revoke[m] |= units
                keep[m] -= units
        assign = _least_loaded(fresh - frozenset(u for m in members for u in revoke[m]), keep)
        for m, units in direct.items():
            keep[m] -= units
            assign[m] |= units - revoke[m]
        released = frozenset(u for m in members for u in revoke[m])
        answers = {
            m: MemberAssignment(frozenset(revoke[m]), frozenset(assign.get(m, set())), delay)
            for m in members
        }
        after = frozenset(u for m in members for u in keep[m] | assign.get(m, set()))
        self.previous_assignment = (after | held) - released
        self.previous_members = frozenset(members)
        follow_up = any(revoke[m] for m in members)
        return Round(self.generation, leader, answers, delay, follow_up, held)

    def _lost(
        self,
        lost: frozenset[Unit],
        members: list[str],
        keep: Mapping[str, set[Unit]],
        now_ms: int,
    ) -> tuple[int, frozenset[Unit], frozenset[Unit], dict[str, set[Unit]]]:
        """handleLostAssignments: (delay, units held, units for the least
        loaded, units dealt to the candidates found at the deadline)."""
        if not lost:
            self._reset_delay()
            return 0, frozenset(), frozenset(), {}
        if self.scheduled_ms <= 0 and self.previous_members <= set(members):
            # Nobody left: the previous assignment just did not reach them.
            return 0, frozenset(), lost, {}
        if self.scheduled_ms > 0 and now_ms >= self.scheduled_ms:
            present = sorted(c for c in self.candidates if c in keep)
            self._reset_delay()
            if not present:
                return 0, frozenset(), lost, {}
            direct: dict[str, set[Unit]] = {m: set() for m in present}
            for kind in (True, False):
                units = sorted(u for u in lost if u.is_connector == kind)
                for i, unit in enumerate(units):
                    direct[present[i % len(present)]].add(unit)
            return 0, frozenset(), frozenset(), direct
        self.candidates |= {m for m in members if not keep[m]}
        delay = self.scheduled_ms - now_ms if self.scheduled_ms > now_ms else self.max_delay_ms
        self.scheduled_ms = now_ms + delay
        if delay == 0:  # scheduled.rebalance.max.delay.ms = 0: reassign at once
            self._reset_delay()
            return 0, frozenset(), lost, {}
        return delay, lost, frozenset(), {}

    def _reset_delay(self) -> None:
        self.scheduled_ms = 0
        self.candidates = set()

    @staticmethod
    def _balance_revocations(
        keep: Mapping[str, set[Unit]], configured: frozenset[Unit]
    ) -> dict[str, set[Unit]]:
        """Load-balancing revocations: connectors and tasks apart, the shares
        of all configured units (the most loaded workers take the remainder),
        and each worker above its share gives up its excess (its highest
        units)."""
        out: dict[str, set[Unit]] = {m: set() for m in keep}
        for connectors in (True, False):
            total = sum(1 for u in configured if u.is_connector == connectors)
            loads = {
                m: sorted(u for u in keep[m] if u.is_connector == connectors) for m in sorted(keep)
            }
            floor, extra = divmod(total, len(loads))
            order = sorted(loads, key=lambda m: (-len(loads[m]), m))
            for rank, m in enumerate(order):
                share = floor + (1 if rank < extra else 0)
                if len(loads[m]) > share:
                    out[m] |= set(loads[m][share:])
        return out


def _least_loaded(units: frozenset[Unit], keep: Mapping[str, set[Unit]]) -> dict[str, set[Unit]]:
    """Connectors, then tasks, each to the worker running fewest of its kind
    (ties to the lower id), as Connect's assignConnectors/assignTasks."""
    out: dict[str, set[Unit]] = {m: set() for m in keep}
    for connectors in (True, False):
        load = {m: sum(1 for u in keep[m] if u.is_connector == connectors) for m in sorted(keep)}
        for unit in sorted(u for u in units if u.is_connector == connectors):
            m = min(load, key=lambda w: (load[w], w))
            out[m].add(unit)
            load[m] += 1
    return out
