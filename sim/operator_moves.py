"""The operator's vocabulary, drawn at random (KIP-986's "Operators" stories).

The simulator's `operator-mix` scenario and `ccr-chaos`'s operator nemesis
draw operator moves from this one vocabulary, interleaved with faults and
workloads, so that both search the moves an operator makes rather than a
few placed by hand. A move is plain data; each shell carries it out its own
way (the simulator through the core's procedures, chaos through
`ccr-admin` against real daemons). A refusal is an expected outcome,
recorded, never a violation: what must hold are the invariants.

Rules of the draw:
- Moves are drawn from what the caller sees now (`View`): the clusters and
  which are up, the links with their mappings, the topics and namespaces of
  each cluster. Most moves name things that exist; some deliberately do not
  fit (a nested, overlapping or colliding prefix, a failover without force, a
  set-mode while behind), because operators make those too.
- A failover is drawn, KILL_SOURCE_SHARE of the time, right after its
  source is killed (`kill_source`: kill -9 under the running load, the
  failover `delay_ms` later, within half a second): what the follower last
  heard is old news by then, and its answer must say so.
- Prefixes come from the caller's families (`View.families`, e.g. "A-"):
  the family itself, a nested prefix inside it ("A-t"), a single topic
  ("A-t0"), and remote names that are the same, renamed ("r-A-") or that
  collide with another mapping's follower names.
- Every choice draws from the `random.Random` passed in, in a fixed order,
  over sorted candidates: one seed, one sequence of moves.

Pure code: no I/O, clocks or global randomness.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from linkd.core.links import Leader, MappingType
from linkd.core.procedures import FAILOVER_STEPS, RECOVER_STEPS, REVERSE_STEPS


class MoveKind(enum.Enum):
    CREATE_LINK = "create_link"
    DELETE_LINK = "delete_link"
    ATTACH = "attach"
    DETACH = "detach"
    SET_RESERVED = "set_reserved"
    # The KIP's steps by hand: reserve the leader namespace, wait until the
    # remote holds it, detach, attach the other way, clear the reservation.
    MANUAL_REVERSE = "manual_reverse"
    REVERSE = "reverse"
    SET_MODE = "set_mode"
    FAILOVER = "failover"
    RECOVER = "recover"
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    ADD_PARTITIONS = "add_partitions"
    RESTART = "restart"
    # On a follower: detach a followed topic namespace, clear its
    # reservation, let clients write there a while (`hold_ms`), then attach
    # it again following (its own writes are then refused a silent cut).
    RELEASE_REATTACH = "release_reattach"
    # Follow relations along a chain of clusters, then the attach that would
    # close it into a ring (any length): drawn as its own kind, carried out
    # as an attach.
    CLOSE_RING = "close_ring"
    # On a cluster that requires link credentials, with a link busy (one with
    # mappings): its credential is replaced, so the remote's sessions, opened
    # with the old one, end at their next call; `hold_ms` later the remotes'
    # operators set the new one on their links (alter-link), which restores
    # them. Drawn only where link credentials are in use (`View.credentials`).
    ROTATE_CREDENTIAL = "rotate_credential"
    # On a follower of a busy link: its storage refuses writes (a file-size
    # limit, a full disk) for `hold_ms`, then takes them again. Drawn only
    # where the caller carries it out as a move (`View.storage_faults`): the
    # simulator's nemesis draws the same fault itself (`storage_refusal`).
    STORAGE_REFUSAL = "storage_refusal"


# How often each kind is drawn, relative to the others.
WEIGHTS: dict[MoveKind, int] = {
    MoveKind.CREATE_LINK: 6,
    MoveKind.DELETE_LINK: 2,
    MoveKind.ATTACH: 12,
    MoveKind.DETACH: 6,
    MoveKind.SET_RESERVED: 4,
    MoveKind.MANUAL_REVERSE: 4,
    MoveKind.REVERSE: 4,
    MoveKind.SET_MODE: 5,
    MoveKind.FAILOVER: 4,
    MoveKind.RECOVER: 4,
    MoveKind.CREATE_TOPIC: 6,
    MoveKind.DELETE_TOPIC: 1,
    MoveKind.ADD_PARTITIONS: 2,
    MoveKind.RESTART: 2,
    MoveKind.RELEASE_REATTACH: 4,
    MoveKind.CLOSE_RING: 5,
    MoveKind.ROTATE_CREDENTIAL: 4,
    MoveKind.STORAGE_REFUSAL: 3,
}

MAX_LINKS_PER_PAIR = 2
# The share of failovers drawn right after their source is killed, and how
# soon after the kill they run at most (ms).
KILL_SOURCE_SHARE = 0.4
KILL_FAILOVER_DELAY_MS_MAX = 500
MAX_PARTITIONS = 4


@dataclass(frozen=True, slots=True)
class MappingView:
    """A mapping as the cluster `LinkView.a` sees it."""

    resource_type: str  # "topic" | "group"
    local_prefix: str
    remote_prefix: str
    leader: str  # "local" | "remote" (from a's side)


@dataclass(frozen=True, slots=True)
class LinkView:
    name: str
    a: str  # the cluster the mappings are described from
    b: str
    mappings: tuple[MappingView, ...] = ()


@dataclass(frozen=True, slots=True)
class View:
    clusters: tuple[str, ...]
    up: frozenset[str]
    links: tuple[LinkView, ...]
    # cluster -> ((topic, partitions), ...)
    topics: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    # cluster -> ((type, prefix, reserved), ...)
    namespaces: dict[str, tuple[tuple[str, str, bool], ...]] = field(default_factory=dict)
    # The prefix families workloads write into, e.g. ("A-",).
    families: tuple[str, ...] = ()
    # The clusters require link credentials (ROTATE_CREDENTIAL can be drawn).
    credentials: bool = False
    # The caller carries out STORAGE_REFUSAL moves (ccr-chaos).
    storage_faults: bool = False


@dataclass(frozen=True, slots=True)
class Move:
    kind: MoveKind
    cluster: str  # where the operator runs it
    link: str = ""
    peer: str = ""  # create_link: the remote cluster
    remote_dials: bool = False  # create_link: the remote side dials (this side behind NAT)
    resource_type: str = "topic"
    local_prefix: str = ""
    remote_prefix: str = ""
    leader: str = ""  # attach: "local" | "remote"
    force: bool = False  # failover
    # failover: kill -9 the source (`peer`) first, under whatever load runs,
    # and fail over this many ms later (a fraction of a second: before any
    # session timeout or silence bound could tell the follower).
    kill_source: bool = False
    delay_ms: int = 0
    mode: str = ""  # set_mode: "ASYNC" | "SYNC"
    reserved: bool = False  # set_reserved
    confirm: bool = False  # recover
    wait: bool = True  # manual_reverse: wait for the remote to catch up first
    topic: str = ""
    partitions: int = 0
    # reverse: a crash armed at this checkpoint of the procedure ("": none),
    # of the remote (crash_peer) or of the cluster running it.
    crash_point: str = ""
    crash_peer: bool = False
    hold_ms: int = 0  # release_reattach: how long clients may write before the attach

    def describe(self) -> str:
        """One line for traces and reports."""
        parts = [self.kind.value, f"on {self.cluster}"]
        if self.link:
            parts.append(f"link {self.link}")
        if self.peer and self.kind not in (MoveKind.FAILOVER, MoveKind.ROTATE_CREDENTIAL):
            parts.append(f"to {self.peer}" + (" (remote dials)" if self.remote_dials else ""))
        if self.kind in (MoveKind.ATTACH, MoveKind.DETACH, MoveKind.SET_RESERVED):
            parts.append(f"{self.resource_type} {self.local_prefix!r}")
        if self.kind is MoveKind.ATTACH:
            parts.append(f"-> {self.remote_prefix!r} leader {self.leader}")
        if self.crash_point:
            parts.append(
                f"crashing {'the remote' if self.crash_peer else 'it'} at {self.crash_point}"
            )
        if self.kind is MoveKind.RELEASE_REATTACH:
            parts.append(
                f"topic {self.local_prefix!r} -> {self.remote_prefix!r} after {self.hold_ms} ms"
            )
        if self.kind is MoveKind.STORAGE_REFUSAL:
            parts.append(f"for {self.hold_ms} ms")
        if self.kind is MoveKind.ROTATE_CREDENTIAL:
            parts.append(f"revoking {self.peer}'s credential, the new one set after "
                         f"{self.hold_ms} ms")  # fmt: skip
        if self.kind is MoveKind.MANUAL_REVERSE:
            parts.append(f"{self.resource_type} {self.local_prefix!r}")
            if not self.wait:
                parts.append("without waiting")
        if self.kind is MoveKind.SET_RESERVED:
            parts.append("on" if self.reserved else "off")
        if self.kind is MoveKind.FAILOVER and self.kill_source:
            parts.append(f"{self.delay_ms} ms after kill -9 of {self.peer}")
        if self.kind is MoveKind.FAILOVER and self.force:
            parts.append("--force")
        if self.kind is MoveKind.SET_MODE:
            parts.append(self.mode)
        if self.kind is MoveKind.RECOVER:
            if self.local_prefix:
                parts.append(f"{self.local_prefix!r}")
            parts.append("--confirm" if self.confirm else "(report)")
        if self.topic:
            parts.append(f"topic {self.topic} partitions {self.partitions}")
        return " ".join(parts)


def draw_move(rng: random.Random, view: View) -> Move | None:
    """One move that fits `view` (None: no cluster is up)."""
    up = sorted(view.up)
    if not up:
        return None
    kinds = sorted(WEIGHTS, key=lambda k: k.value)
    # A kind that cannot apply weighs 0: the draws of runs without it are
    # those they were before it existed.
    weights = [
        0
        if (k is MoveKind.ROTATE_CREDENTIAL and not view.credentials)
        or (k is MoveKind.STORAGE_REFUSAL and not view.storage_faults)
        else WEIGHTS[k]
        for k in kinds
    ]
    kind = rng.choices(kinds, weights=weights)[0]
    move = _DRAW[kind](rng, view, up)
    if move is None:  # nothing fits (no link yet, say): create one instead
        move = _create_link(rng, view, up)
    return move


def draw_moves(rng: random.Random, view: View, count: int) -> list[Move]:
    """`count` moves drawn against one view (callers that cannot refresh the
    view between moves; the moves still name what exists at the start)."""
    out: list[Move] = []
    for _ in range(count):
        move = draw_move(rng, view)
        if move is not None:
            out.append(move)
    return out


# -- prefixes -----------------------------------------------------------------------------


def prefix_candidates(rng: random.Random, view: View, cluster: str) -> str:
    """A local prefix for a namespace on `cluster`: a family, a prefix nested
    in one, or a single topic. The families include the renamed copies this
    cluster holds ("r-A-" topics, from a renaming mapping): leading those back
    over a link that brings "A-" in makes one link carry both directions."""
    names = sorted(t for t, _p in view.topics.get(cluster, ()))
    families = sorted(view.families) or ["t-"]
    families += ["r-" + f for f in families if any(n.startswith("r-" + f) for n in names)]
    family = rng.choice(families)
    topics = sorted(t for t, _p in view.topics.get(cluster, ()) if t.startswith(family))
    roll = rng.random()
    if roll < 0.55:
        return family
    if roll < 0.75:
        return family + "t"  # nested inside the family (overlaps it)
    if topics:
        return rng.choice(topics)  # a single existing topic
    return family + "t0"


def remote_prefix_for(rng: random.Random, view: View, link: LinkView, local: str) -> str:
    """The other side's name: mostly the same, sometimes renamed, sometimes one
    that collides with a follower name another mapping of the link produces."""
    roll = rng.random()
    if roll < 0.7:
        return local
    if roll < 0.85:
        return "r-" + local
    others = sorted(m.remote_prefix for m in link.mappings)
    return rng.choice(others) if others else "r-" + local


# -- one function per kind ---------------------------------------------------------------------


def _pick_link(rng: random.Random, view: View, up: Sequence[str]) -> LinkView | None:
    links = sorted(
        (link for link in view.links if link.a in up or link.b in up), key=lambda x: x.name
    )
    return rng.choice(links) if links else None


def _side(rng: random.Random, link: LinkView, up: Sequence[str]) -> str:
    sides = [c for c in (link.a, link.b) if c in up]
    return rng.choice(sides) if sides else link.a


def _create_link(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    if len(view.clusters) < 2:
        return None
    a = rng.choice(list(up))
    others = sorted(c for c in view.clusters if c != a)
    b = rng.choice(others)
    pair = sum(1 for link in view.links if {link.a, link.b} == {a, b})
    if pair >= MAX_LINKS_PER_PAIR:
        return None
    taken = {link.name for link in view.links}
    name = next(
        f"{a}{b}{i}".lower() for i in range(len(taken) + 1) if f"{a}{b}{i}".lower() not in taken
    )
    return Move(MoveKind.CREATE_LINK, a, link=name, peer=b, remote_dials=rng.random() < 0.25)


def _delete_link(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    return Move(MoveKind.DELETE_LINK, _side(rng, link, up), link=link.name)


def _attach(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    cluster = _side(rng, link, up)
    leader = rng.choice(("local", "remote"))
    leading = cluster if leader == Leader.LOCAL else (link.b if cluster == link.a else link.a)
    resource_type = "group" if rng.random() < 0.15 else "topic"
    local = prefix_candidates(rng, view, leading)
    if leading != cluster:
        # The prefix was drawn on the leading (remote) side: this side's name
        # for it is what the operator types as the local prefix.
        remote = local
        local = remote_prefix_for(rng, view, link, remote)
    else:
        remote = remote_prefix_for(rng, view, link, local)
    return Move(
        MoveKind.ATTACH,
        cluster,
        link=link.name,
        resource_type=resource_type,
        local_prefix=local,
        remote_prefix=remote,
        leader=leader,
    )


def _mapping_on(
    rng: random.Random, link: LinkView, up: Sequence[str]
) -> tuple[str, MappingView] | None:
    """An attached mapping of the link, and a side to act on, in that side's terms."""
    if not link.mappings:
        return None
    m = rng.choice(sorted(link.mappings, key=lambda x: (x.resource_type, x.local_prefix)))
    cluster = _side(rng, link, up)
    if cluster == link.b:
        m = MappingView(
            m.resource_type,
            m.remote_prefix,
            m.local_prefix,
            "remote" if m.leader == Leader.LOCAL else "local",
        )
    return cluster, m


def _detach(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    found = _mapping_on(rng, link, up) if link is not None else None
    if link is None or found is None:
        return None
    cluster, m = found
    return Move(
        MoveKind.DETACH,
        cluster,
        link=link.name,
        resource_type=m.resource_type,
        local_prefix=m.local_prefix,
    )


def _set_reserved(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    cluster = rng.choice(list(up))
    namespaces = sorted(view.namespaces.get(cluster, ()))
    if not namespaces:
        return None
    rtype, prefix, reserved = rng.choice(namespaces)
    flip = rng.random() < 0.8
    return Move(
        MoveKind.SET_RESERVED,
        cluster,
        resource_type=rtype,
        local_prefix=prefix,
        reserved=(not reserved) if flip else reserved,
    )


def _manual_reverse(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    found = _mapping_on(rng, link, up) if link is not None else None
    if link is None or found is None:
        return None
    cluster, m = found
    if m.leader != Leader.LOCAL:
        cluster = link.b if cluster == link.a else link.a
        m = MappingView(m.resource_type, m.remote_prefix, m.local_prefix, "local")
    return Move(
        MoveKind.MANUAL_REVERSE,
        cluster,
        link=link.name,
        resource_type=m.resource_type,
        local_prefix=m.local_prefix,
        remote_prefix=m.remote_prefix,
        wait=rng.random() < 0.85,
    )


def _reverse(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    leads_a = any(m.leader == Leader.LOCAL for m in link.mappings)
    cluster = link.a if leads_a and rng.random() < 0.8 else _side(rng, link, up)
    if rng.random() >= MID_PROCEDURE_CRASH:
        return Move(MoveKind.REVERSE, cluster, link=link.name)
    return Move(
        MoveKind.REVERSE,
        cluster,
        link=link.name,
        crash_point=_crash_point(rng, max(1, len(link.mappings))),
        crash_peer=rng.random() < 0.5,
    )


# How often a drawn reversal is cut short by a crash of either side at one of
# its checkpoints (linkd/core/requests.py Checkpoint).
MID_PROCEDURE_CRASH = 0.5
# How often a drawn failover (not one right after a kill) or confirmed
# recovery is, at one of its checkpoints.
MID_FAILOVER_RECOVER_CRASH = 0.3


def _crash_point(rng: random.Random, namespaces: int) -> str:
    """Any checkpoint, or (half the time) one where mappings have begun to
    change and nothing is writable until the plan is finished."""
    points = reverse_points(namespaces)
    if rng.random() < 0.5:
        return rng.choice(points)
    return rng.choice([p for p in points if "mappings" in p])


def failover_points() -> list[str]:
    """Every checkpoint of a failover."""
    return [f"failover:{step}" for step in FAILOVER_STEPS]


def recover_points(namespaces: int) -> list[str]:
    """Every checkpoint of a confirmed recovery of `namespaces` mappings (one
    after each mapping that follows the remote)."""
    out = []
    for step in RECOVER_STEPS:
        if step == "follow-remote":
            out += [f"recover:{step}#{i}" for i in range(1, namespaces + 1)]
        out.append(f"recover:{step}")
    return out


def reverse_points(namespaces: int) -> list[str]:
    """Every checkpoint of a reversal moving `namespaces` namespaces."""
    out = []
    for step in REVERSE_STEPS:
        if step in ("detach-mappings", "attach-swapped-mappings"):
            out += [f"reverse:{step}#{i}" for i in range(1, namespaces + 1)]
        out.append(f"reverse:{step}")
    return out


def _set_mode(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    mode = "SYNC" if rng.random() < 0.55 else "ASYNC"
    return Move(MoveKind.SET_MODE, _side(rng, link, up), link=link.name, mode=mode)


def _failover(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    follows_a = any(m.leader == Leader.REMOTE for m in link.mappings)
    follows_b = any(m.leader == Leader.LOCAL for m in link.mappings)
    candidates = [c for c, f in ((link.a, follows_a), (link.b, follows_b)) if f and c in up]
    cluster = rng.choice(candidates) if candidates else _side(rng, link, up)
    force = rng.random() < 0.5
    source = link.b if cluster == link.a else link.a
    if candidates and source in up and rng.random() < KILL_SOURCE_SHARE:
        # The source dies under load and the operator fails over at once.
        return Move(
            MoveKind.FAILOVER, cluster, link=link.name, peer=source, force=force,
            kill_source=True, delay_ms=rng.randrange(1, KILL_FAILOVER_DELAY_MS_MAX),
        )  # fmt: skip
    move = Move(MoveKind.FAILOVER, cluster, link=link.name, force=force)
    if rng.random() < MID_FAILOVER_RECOVER_CRASH:
        # Cut short: this side or the source crashes at one of its checkpoints.
        move = replace(
            move, crash_point=rng.choice(failover_points()), crash_peer=rng.random() < 0.5
        )
    return move


def _recover(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    cluster = _side(rng, link, up)
    prefix = ""
    found = _mapping_on(rng, link, up) if rng.random() < 0.5 else None
    if found is not None:
        cluster, m = found
        prefix = m.local_prefix if m.resource_type == MappingType.TOPIC else ""
    move = Move(
        MoveKind.RECOVER,
        cluster,
        link=link.name,
        local_prefix=prefix,
        confirm=rng.random() < 0.8,
    )
    if move.confirm and rng.random() < MID_FAILOVER_RECOVER_CRASH:
        # Cut short: this side or the remote crashes at one of its checkpoints.
        # Half of them after the cut, before every mapping follows: the
        # namespaces are then reserved here and follow nothing until a re-run.
        namespaces = 1 if prefix else max(1, len(link.mappings))
        points = recover_points(namespaces)
        if rng.random() < 0.5:
            points = [p for p in points if "cut" in p or "#" in p]
        move = replace(move, crash_point=rng.choice(points), crash_peer=rng.random() < 0.5)
    return move


def _create_topic(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    cluster = rng.choice(list(up))
    families = sorted(view.families) or ["t-"]
    family = rng.choice(families)
    existing = {t for t, _p in view.topics.get(cluster, ())}
    index = next(i for i in range(len(existing) + 2) if f"{family}n{i}" not in existing)
    return Move(
        MoveKind.CREATE_TOPIC,
        cluster,
        topic=f"{family}n{index}",
        partitions=rng.randint(1, MAX_PARTITIONS - 1),
    )


def _delete_topic(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    cluster = rng.choice(list(up))
    topics = sorted(t for t, _p in view.topics.get(cluster, ()) if not t.startswith("_"))
    if not topics:
        return None
    return Move(MoveKind.DELETE_TOPIC, cluster, topic=rng.choice(topics))


def _add_partitions(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    cluster = rng.choice(list(up))
    topics = sorted(
        (t, p) for t, p in view.topics.get(cluster, ()) if not t.startswith("_") and p < 4
    )
    if not topics:
        return None
    topic, partitions = rng.choice(topics)
    return Move(MoveKind.ADD_PARTITIONS, cluster, topic=topic, partitions=partitions + 1)


def _restart(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    return Move(MoveKind.RESTART, rng.choice(list(up)))


def _release_reattach(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    """A followed topic namespace, on its follower's side (which must be up)."""
    link = _pick_link(rng, view, up)
    if link is None:
        return None
    topics = sorted(
        (m for m in link.mappings if m.resource_type == MappingType.TOPIC),
        key=lambda m: m.local_prefix,
    )
    if not topics:
        return None
    m = rng.choice(topics)
    if m.leader == Leader.REMOTE:
        cluster, local, remote = link.a, m.local_prefix, m.remote_prefix
    else:
        cluster, local, remote = link.b, m.remote_prefix, m.local_prefix
    hold_ms = rng.randrange(800, 3_000)
    if cluster not in up:
        return None
    return Move(
        MoveKind.RELEASE_REATTACH,
        cluster,
        link=link.name,
        local_prefix=local,
        remote_prefix=remote,
        leader="remote",
        hold_ms=hold_ms,
    )


def _rotate_credential(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    """A busy link (one with mappings): one of its sides (up) replaces the
    credential it requires; its remote gets the new one `hold_ms` later."""
    busy = sorted((link for link in view.links if link.mappings), key=lambda x: x.name)
    busy = [link for link in busy if link.a in up or link.b in up]
    if not busy:
        return None
    link = rng.choice(busy)
    cluster = _side(rng, link, up)
    peer = link.b if cluster == link.a else link.a
    return Move(
        MoveKind.ROTATE_CREDENTIAL, cluster, link=link.name, peer=peer,
        hold_ms=rng.randrange(1_000, 6_000),
    )  # fmt: skip


def _storage_refusal(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    """The follower side (up) of a link that follows a topic namespace."""
    busy = sorted(
        (
            link
            for link in view.links
            if any(m.resource_type == MappingType.TOPIC for m in link.mappings)
        ),
        key=lambda x: x.name,
    )
    if not busy:
        return None
    link = rng.choice(busy)
    m = rng.choice(sorted((m for m in link.mappings if m.resource_type == MappingType.TOPIC),
                          key=lambda m: m.local_prefix))  # fmt: skip
    cluster = link.a if m.leader == Leader.REMOTE else link.b
    if cluster not in up:
        return None
    return Move(MoveKind.STORAGE_REFUSAL, cluster, link=link.name,
                hold_ms=rng.randrange(2_000, 5_000))  # fmt: skip


# A follow relation: (leading cluster, its prefix, following cluster, its prefix).
Edge = tuple[str, str, str, str]


def _edges(view: View) -> list[Edge]:
    out: list[Edge] = []
    for link in view.links:
        for m in link.mappings:
            if m.resource_type != MappingType.TOPIC:
                continue
            if m.leader == Leader.LOCAL:
                out.append((link.a, m.local_prefix, link.b, m.remote_prefix))
            else:
                out.append((link.b, m.remote_prefix, link.a, m.local_prefix))
    return sorted(out)


def _chains(edges: list[Edge]) -> list[list[Edge]]:
    """Chains of follow relations, each cluster once (a copy's prefix
    overlaps the prefix its cluster leads on)."""
    chains: list[list[Edge]] = [[e] for e in edges if e[0] != e[2]]
    out: list[list[Edge]] = []
    while chains:
        chain = chains.pop(0)
        out.append(chain)
        seen = {chain[0][0], *(e[2] for e in chain)}
        end = chain[-1]
        for e in edges:
            if (
                e[0] == end[2]
                and e[2] not in seen
                and (e[1].startswith(end[3]) or end[3].startswith(e[1]))
            ):
                chains.append([*chain, e])
    return out


def _attach_between(
    rng: random.Random,
    view: View,
    up: Sequence[str],
    leader: str,
    prefix: str,
    follower: str,
    remote_prefix: str,
) -> Move | None:
    """`leader` leads its `prefix` to `follower`, named `remote_prefix`
    there, over a link of the pair, from either side (None: no such link)."""
    links = sorted(
        (x for x in view.links if {x.a, x.b} == {leader, follower}), key=lambda x: x.name
    )
    if not links:
        return None
    link = rng.choice(links)
    sides = [c for c in (leader, follower) if c in up]
    if not sides:
        return None
    cluster = rng.choice(sides)
    if cluster == leader:
        return Move(
            MoveKind.ATTACH,
            cluster,
            link=link.name,
            local_prefix=prefix,
            remote_prefix=remote_prefix,
            leader="local",
        )
    return Move(
        MoveKind.ATTACH,
        cluster,
        link=link.name,
        local_prefix=remote_prefix,
        remote_prefix=prefix,
        leader="remote",
    )


def _link_pair(view: View, a: str, b: str) -> Move | None:
    pair = sum(1 for link in view.links if {link.a, link.b} == {a, b})
    if pair >= MAX_LINKS_PER_PAIR:
        return None
    taken = {link.name for link in view.links}
    name = next(
        f"{a}{b}{i}".lower() for i in range(len(taken) + 1) if f"{a}{b}{i}".lower() not in taken
    )
    return Move(MoveKind.CREATE_LINK, a, link=name, peer=b)


def _close_ring(rng: random.Random, view: View, up: Sequence[str]) -> Move | None:
    """The last cluster of a chain of two or more follow relations leads its
    copy back to the chain's first cluster (a ring of three or more links);
    without such a chain, one grows: a follower leads its copy on to a
    cluster not yet in the chain."""
    chains = _chains(_edges(view))
    closable = [c for c in chains if len(c) >= 2]
    if closable:
        chain = rng.choice(closable)
        first, last = chain[0], chain[-1]
        move = _attach_between(rng, view, up, last[2], last[3], first[0], first[1])
        if move is not None:
            return move
        if last[2] in up:  # no link between the two yet: one first
            return _link_pair(view, last[2], first[0])
    if chains:
        chain = rng.choice(chains)
        end = chain[-1]
        seen = {chain[0][0], *(e[2] for e in chain)}
        others = sorted(c for c in view.clusters if c not in seen)
        if others:
            return _attach_between(rng, view, up, end[2], end[3], rng.choice(others), end[3])
    return None


_DRAW = {
    MoveKind.CREATE_LINK: _create_link,
    MoveKind.DELETE_LINK: _delete_link,
    MoveKind.ATTACH: _attach,
    MoveKind.DETACH: _detach,
    MoveKind.SET_RESERVED: _set_reserved,
    MoveKind.MANUAL_REVERSE: _manual_reverse,
    MoveKind.REVERSE: _reverse,
    MoveKind.SET_MODE: _set_mode,
    MoveKind.FAILOVER: _failover,
    MoveKind.RECOVER: _recover,
    MoveKind.CREATE_TOPIC: _create_topic,
    MoveKind.DELETE_TOPIC: _delete_topic,
    MoveKind.ADD_PARTITIONS: _add_partitions,
    MoveKind.RESTART: _restart,
    MoveKind.RELEASE_REATTACH: _release_reattach,
    MoveKind.CLOSE_RING: _close_ring,
    MoveKind.ROTATE_CREDENTIAL: _rotate_credential,
    MoveKind.STORAGE_REFUSAL: _storage_refusal,
}

__all__ = ["LinkView", "MappingView", "Move", "MoveKind", "View", "draw_move", "draw_moves"]
