"""Replication topologies as directed graphs (networkx), and what they replicate.

Rules:
- An edge source -> target is one link named "source-target", created on the
  target (the follower dials: pull).
- Origins own data: the clusters with no incoming edge, or every cluster when
  each has one (ring, mesh). Origin O leads the namespace prefix "O-" (topics
  "O-t0", ..., groups "O-g...").
- O's namespace flows along the graph breadth first, edges in sorted order.
  The first edge to reach a cluster carries it under the same prefix; a
  namespace can follow one link only (spec section 2), so any further edge
  into that cluster (fan-in: diamond, mesh) maps it under the alias prefix
  "via-<source>-O-", which is not passed on. Edges back into O carry nothing
  of O's.
- Generators are deterministic (no random graphs); a graph file is read by
  networkx by its extension and undirected edges point from the smaller name.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

KINDS = ("chain", "hub", "mesh", "ring", "diamond", "file")


@dataclass(frozen=True, slots=True)
class EdgeMapping:
    resource_type: str  # "topic" | "group"
    local_prefix: str  # on the target (follower)
    remote_prefix: str  # on the source (leader)


def cluster_names(count: int) -> list[str]:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [letters[i] if i < 26 else f"C{i}" for i in range(count)]


def build_graph(kind: str, names: list[str], file: str = "") -> nx.DiGraph:
    g = nx.DiGraph()
    n = len(names)
    if kind == "file":
        return read_graph_file(file)
    g.add_nodes_from(names)
    if kind == "chain":
        g.add_edges_from(itertools.pairwise(names))
    elif kind == "hub":
        g.add_edges_from((names[0], x) for x in names[1:])
    elif kind == "mesh":
        g.add_edges_from((a, b) for a in names for b in names if a != b)
    elif kind == "ring":
        g.add_edges_from((names[i], names[(i + 1) % n]) for i in range(n) if n > 1)
    elif kind == "diamond":
        if n < 4:
            raise ValueError("topology 'diamond' needs at least 4 clusters")
        top, middle, bottom = names[0], names[1:-1], names[-1]
        g.add_edges_from((top, m) for m in middle)
        g.add_edges_from((m, bottom) for m in middle)
    else:
        raise ValueError(f"unknown topology kind {kind!r}; use one of {', '.join(KINDS)}")
    return g


def read_graph_file(path: str) -> nx.DiGraph:
    suffix = Path(path).suffix.lower()
    if suffix == ".graphml":
        raw = nx.read_graphml(path)
    elif suffix == ".gml":
        raw = nx.read_gml(path)
    elif suffix in (".edgelist", ".edges", ".txt"):
        raw = nx.read_edgelist(path, create_using=nx.DiGraph)
    elif suffix == ".adjlist":
        raw = nx.read_adjlist(path, create_using=nx.DiGraph)
    else:
        raise ValueError(
            f"topology file {path!r}: unknown extension {suffix!r} "
            "(use .graphml, .gml, .edgelist or .adjlist)"
        )
    g = nx.DiGraph()
    g.add_nodes_from(sorted(str(x) for x in raw.nodes))
    for u, v in sorted((str(a), str(b)) for a, b in raw.edges()):
        if raw.is_directed():
            g.add_edge(u, v)
        else:
            g.add_edge(min(u, v), max(u, v))
    return g


def origins(g: nx.DiGraph) -> list[str]:
    roots = sorted(str(x) for x in g.nodes if g.in_degree(x) == 0)
    return roots or sorted(str(x) for x in g.nodes)


def prefix_of(origin: str) -> str:
    return f"{origin}-"


def edge_mappings(g: nx.DiGraph, groups: bool = True) -> dict[tuple[str, str], list[EdgeMapping]]:
    """Per edge (source, target): the namespace mappings its link carries."""
    out: dict[tuple[str, str], list[EdgeMapping]] = {
        (str(u), str(v)): [] for u, v in sorted(g.edges())
    }
    kinds = ["topic", "group"] if groups else ["topic"]
    for origin in origins(g):
        prefix = prefix_of(origin)
        reached = {origin}
        frontier = deque([origin])
        steps = 0
        while frontier and steps <= g.number_of_nodes():
            steps += 1
            layer = sorted(frontier)
            frontier.clear()
            for u in layer:
                for v in sorted(str(x) for x in g.successors(u)):
                    if v == origin:
                        continue
                    local = prefix if v not in reached else f"via-{u}-{prefix}"
                    if v not in reached:
                        reached.add(v)
                        frontier.append(v)
                    elif any(m.local_prefix == local for m in out[(u, v)]):
                        continue
                    out[(u, v)] += [EdgeMapping(k, local, prefix) for k in kinds]
    return out
