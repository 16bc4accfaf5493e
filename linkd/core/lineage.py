"""Lineage: where a cluster's copy of a namespace comes from, and the rings of
follow relations it reveals.

Rules (spec section 2, "a namespace follows at most one source"; issue of the
rings of three links):
- The lineage of a namespace on a cluster is the chain of clusters its records
  are copied from, nearest first: for every attached follower mapping that
  overlaps it, the link's remote cluster (with the version of that attach),
  then that remote's own lineage of the namespace as its last configuration
  view said. A cluster where the namespace is written has an empty lineage.
- Every configuration view a side sends (`outgoing`) carries the lineage of
  each namespace it leads on the link; the receiver keeps it with the link's
  runtime (`LinkRuntime.upstream`), not in the journal: the next handshake
  brings it again. So the lineage of a namespace travels down its chain of
  links one handshake per hop.
- An operator's attach that would close a ring of follow relations of any
  length is refused with FOLLOW_CYCLE naming the ring, nothing changed: a
  cluster may not lead a namespace to a cluster in its lineage (checked where
  the attach is made, and by the remote of a proposed attach), nor follow a
  namespace whose source's lineage names it.
- A ring that closes anyway (attaches made apart, while the lineage was still
  on its way) shows up as a follower whose source's lineage names the follower
  itself, or as a mapping a cluster leads to a cluster in its own lineage. Of
  the ring's follow relations the newest attach is detached, with a note, by
  whichever of its two ends sees the ring first (`refuse_unattachable`); the
  others stay. Every cluster in the ring reaches the same verdict from the
  versions the lineage carries.

Pure code.
"""

from __future__ import annotations

from dataclasses import replace

from linkd.core.cluster import ClusterState
from linkd.core.links import LineageHop, LinkConfig, Mapping, MappingKey, Role

# A lineage longer than this is cut (a ring still closing can make one grow
# by a hop per handshake until the ring is refused).
MAX_HOPS = 64


def _overlaps(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def received(state: ClusterState, link_name: str, key: MappingKey) -> tuple[LineageHop, ...]:
    """The remote's lineage of the namespace it leads under this side's
    mapping `key`, as its last view said (empty if it said none)."""
    runtime = state.links.runtime.get(link_name)
    return runtime.upstream.get(key, ()) if runtime is not None else ()


def upstream(
    state: ClusterState,
    resource_type: str,
    prefix: str,
    replaced: tuple[str, MappingKey] | None = None,
) -> tuple[LineageHop, ...]:
    """The lineage of this cluster's namespace `prefix` (module rules):
    nearest first, each cluster once, never this cluster itself.
    `replaced` (link, key): a mapping an attach being judged would replace,
    not counted (a follower whose direction the attach swaps is no longer a
    source once it lands)."""
    hops: list[LineageHop] = []
    seen = {state.cluster_id}
    for name in sorted(state.links.configs):
        config = state.links.configs[name]
        for m in sorted(config.attached_mappings(), key=lambda x: x.key):
            if (
                m.resource_type != resource_type
                or m.local_role is not Role.FOLLOWER
                or not _overlaps(m.local_prefix, prefix)
                or (name, m.key) == replaced
            ):
                continue
            chain = [(config.remote_cluster_id, m.version), *received(state, name, m.key)]
            for cluster, version in chain:
                if cluster == state.cluster_id:
                    break  # a ring: it goes on from here, already known
                if cluster not in seen:
                    seen.add(cluster)
                    hops.append((cluster, version))
    return tuple(hops[:MAX_HOPS])


def outgoing(state: ClusterState, config: LinkConfig) -> LinkConfig:
    """The view of a link to send to its remote: the configuration with the
    lineage of every namespace this side leads on it."""
    lineage = {
        m.key: upstream(state, m.resource_type, m.local_prefix)
        for m in config.attached_mappings()
        if m.local_role is Role.LEADER
    }
    return replace(config, lineage={k: v for k, v in lineage.items() if v})


def render(ring: list[str]) -> str:
    return " -> ".join(repr(c) for c in ring)


def ring_if_led(
    state: ClusterState, remote: str, candidate: Mapping, link: str = ""
) -> list[str] | None:
    """The ring (clusters in the direction records would flow, the first
    repeated last) that leading `candidate` to cluster `remote` would close:
    `remote` is in the namespace's lineage here. None if none. `link`: the
    link `candidate` is attached on; what it replaces there (its own key,
    following `remote`) is not counted."""
    found = led_ring(state, remote, candidate, link)
    return found[0] if found is not None else None


def led_ring(
    state: ClusterState, remote: str, candidate: Mapping, link: str = ""
) -> tuple[list[str], bool] | None:
    """`ring_if_led`, and whether `candidate`'s attach is the newest of the
    ring's follow relations."""
    if state.faults.undid(12):
        return None  # the old rule: only rings of two links were refused
    replaced = (link, candidate.key) if link and not state.faults.undid(35) else None
    hops = upstream(state, candidate.resource_type, candidate.local_prefix, replaced)
    clusters = [c for c, _ in hops]
    if remote not in clusters:
        return None
    i = clusters.index(remote)
    newest = all(candidate.version > v for _, v in hops[: i + 1])
    return [*reversed(clusters[: i + 1]), state.cluster_id, remote], newest


def ring_if_followed(
    state: ClusterState, remote: str, candidate: Mapping, hops: tuple[LineageHop, ...]
) -> tuple[list[str], bool] | None:
    """The ring that following `candidate` from cluster `remote`, whose
    lineage of it is `hops`, closes: (clusters in the direction records would
    flow, whether `candidate`'s attach is the newest of the ring's follow
    relations). None if this cluster is not in `hops`."""
    if state.faults.undid(12):
        return None
    clusters = [c for c, _ in hops]
    if state.cluster_id not in clusters:
        return None
    i = clusters.index(state.cluster_id)
    ring = [*reversed(clusters[: i + 1]), remote, state.cluster_id]
    newest = all(candidate.version > v for _, v in hops[: i + 1])
    return ring, newest
