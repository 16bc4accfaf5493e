"""What "one writer at rest" watches (sim/world.py `_watch_moved`, `touched`,
`reversal_rolled_back`): three limits of the check the operator search
found in its fifth run, each a state the contract allows that the check
blamed on a procedure.

- A namespace is judged by the last procedure that set out to move it
  (seeds 3097 on 3 clusters, 2343 on 4): a failover made it writable, then a
  recovery or a reversal of another link took it over (it then followed that
  link, which was deleted, or the reversal's re-run was refused for an
  operator's attach); the failover's watch blamed the failover.
- An attach or a detach changes the mapping on both halves of its link
  (seed 1482 on 4): the remote's operator attached the failed-over
  namespace with its side leading, then detached it; the follower it made
  stays reserved (docs/operations.md), not the failover's doing.
- A reversal that began, or rolled back, while its mapping was still
  converging (seed 1888 on 2): the operator's attach, not yet heard by the
  remote, made the remote follow after the roll-back; what the reversal
  found was a passing state."""

from __future__ import annotations

import dataclasses

from test_sim_mid_procedure import run

from linkd.core import plans
from linkd.core.links import MappingType
from sim import checkers
from sim import operator_moves as moves


def _failover_watch(cluster: str, peer: str, prefix: str, peer_prefix: str
                    ) -> checkers.MovedNamespace:
    return checkers.MovedNamespace(
        "A-B", cluster, peer, "topic", prefix, peer_prefix, plans.FAILOVER
    )


def test_a_later_procedure_on_the_namespace_ends_the_earlier_ones_watch() -> None:
    sim = run("reverse:promote-remote-namespaces", "")
    sim.moved.clear()
    sim.moved[("topic", (("A", "q-"), ("B", "A-")))] = _failover_watch("B", "A", "A-", "q-")
    sim.moved[("topic", (("A", "q-"), ("B", "o-")))] = _failover_watch("B", "A", "o-", "q-")
    sim.clusters["B"].state.plans.put(plans.Plan(
        plans.RECOVER, "A-B", "id", "A", (plans.PlanNamespace("topic", "A-", "r-"),), 0, 0,
    ))
    sim._watch_moved("B", "A-B")
    watched = {(m.procedure, m.prefix) for m in sim.moved.values()}
    # B's 'A-' is the recovery's now; B's 'o-' is still the failover's.
    assert watched == {(plans.RECOVER, "A-"), (plans.FAILOVER, "o-")}, sim.moved


def test_an_attach_takes_the_remotes_namespace_out_of_the_check_too() -> None:
    sim = run("reverse:promote-remote-namespaces", "")
    sim.moved.clear()
    sim.moved[("topic", (("A", "q-"), ("B", "A-")))] = _failover_watch("B", "A", "A-", "q-")
    sim.moved[("topic", (("A", "q-"), ("B", "o-")))] = _failover_watch("B", "A", "o-", "q-")
    # On A: 'z-' mapped to B's 'A-' (B's namespace starts following or leading).
    sim.do_move(moves.Move(moves.MoveKind.ATTACH, "A", "A-B", resource_type="topic",
                           local_prefix="z-", remote_prefix="A-"))
    assert {m.prefix for m in sim.moved.values()} == {"o-"}, sim.moved


def test_a_reversal_rolled_back_while_its_mapping_converged_leaves_the_check() -> None:
    for in_flux in (False, True):
        sim = run("reverse:promote-remote-namespaces", "")
        sim.moved.clear()
        config = sim.clusters["B"].state.links.get("A-B")
        key = next(k for k, m in config.mappings.items() if m.resource_type == MappingType.TOPIC)
        if in_flux:  # B's change, not yet heard by A
            config.mappings[key] = dataclasses.replace(
                config.mappings[key], version=(1 << 60, 0, "B")
            )
        watch = checkers.MovedNamespace("A-B", "B", "A", "topic", key[1], key[2])
        sim.moved[("topic", (("A", key[2]), ("B", key[1])))] = watch
        sim.reversal_rolled_back("B", "A-B")
        if in_flux:
            assert not sim.moved, sim.moved
        else:
            assert [m.rolled_back for m in sim.moved.values()] == [True], sim.moved
