r"""A locality-preserving order of the vertices (Cuthill-McKee on the union graph).

PTS gives each rank a contiguous range of sequences (vertices). In vertex-id
order a range is local only when ids happen to follow the geometry (a grid
numbered row by row); with arbitrary ids (sensor ids, user ids) every range
touches the whole graph, and the black-box path's halos -- all nodes within a
few hops of a rank's vertices -- cover every snapshot
(docs/blackbox.md, "Figures"). :func:`cuthill_mckee_order` orders vertices so
that neighbours in the *union graph* (every snapshot's edges, undirected)
get nearby positions: breadth-first levels from a low-degree start per
connected component, each level sorted by the position of its first visited
neighbour, then by degree (Cuthill-McKee). Contiguous ranges of that order
then have short boundaries on mesh-like graphs (road networks, grids).

Everything is vectorized: one pass over the edges per breadth-first level,
all components at once.
"""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cuthill_mckee_order", "union_graph"]


def union_graph(edge_index: Tensor, vertex_of: Tensor, num_vertices: int) -> Tensor:
    """``[2, E']`` undirected, duplicate-free vertex pairs of all snapshots
    (``vertex_of`` maps a gid to its vertex; self-loops dropped)."""
    a, b = vertex_of[edge_index[0]], vertex_of[edge_index[1]]
    keep = a != b
    a, b = a[keep], b[keep]
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    key = torch.unique(lo * num_vertices + hi)
    lo, hi = key // num_vertices, key % num_vertices
    return torch.stack([torch.cat([lo, hi]), torch.cat([hi, lo])])


def _components(edges: Tensor, n: int) -> Tensor:
    """``[n]`` the smallest vertex id of each vertex's connected component
    (min-label propagation with pointer jumping)."""
    label = torch.arange(n)
    if edges.numel() == 0:
        return label
    src, dst = edges
    while True:
        new = label.clone().scatter_reduce_(0, dst, label[src], reduce="amin")
        new = new[new]  # pointer jumping: O(log diameter) rounds on paths
        if torch.equal(new, label):
            return label
        label = new


def cuthill_mckee_order(edges: Tensor, n: int) -> Tensor:
    r"""``[n]`` vertex ids in Cuthill-McKee order of the undirected graph
    ``edges`` (``[2, E]``, both directions present).

    Components are laid out in order of their smallest vertex id; inside one,
    breadth-first levels from its lowest-degree vertex (ties: smallest id),
    each level sorted by (position of the earliest already-placed neighbour,
    degree, id). Isolated vertices keep id order at their component's place.
    """
    deg = torch.bincount(edges[0], minlength=n) if edges.numel() else torch.zeros(n, dtype=torch.long)
    comp = _components(edges, n)
    # start of each component: lowest degree, then smallest id
    key = deg * n + torch.arange(n)
    best = torch.full((n,), n * (n + 1), dtype=torch.long).scatter_reduce_(0, comp, key, reduce="amin")
    starts = (best[comp] == key).nonzero().flatten()
    level = torch.full((n,), -1, dtype=torch.long)
    parent_pos = torch.full((n,), -1, dtype=torch.long)  # position of the earliest placed neighbour
    level[starts] = 0
    pos = torch.full((n,), -1, dtype=torch.long)
    pos[starts] = comp[starts]  # any order-consistent value: one start per component
    frontier = torch.zeros(n, dtype=torch.bool)
    frontier[starts] = True
    k = 0
    big = n * n + n
    while edges.numel() and bool(frontier.any()):
        k += 1
        src, dst = edges
        hit = frontier[src] & (level[dst] < 0)
        if not bool(hit.any()):
            break
        cand = torch.full((n,), big, dtype=torch.long).scatter_reduce_(0, dst[hit], pos[src[hit]], reduce="amin")
        new = cand < big
        level[new] = k
        parent_pos[new] = cand[new]
        # provisional positions for the next level's parents: rank inside (component, level) by (parent, degree, id)
        nodes = new.nonzero().flatten()
        order = torch.argsort((cand[nodes] * (n + 1) + deg[nodes]) * n + nodes)
        pos[nodes[order]] = torch.arange(order.numel()) + k * n  # later levels sort after earlier ones
        frontier = new
    level[level < 0] = 0  # unreachable only if isolated: they are their own start
    return _lexsort([comp, level, parent_pos.clamp(min=0), deg, torch.arange(n)])


def _lexsort(keys: list) -> Tensor:
    """Stable lexicographic argsort by ``[n]`` keys (the first one most significant)."""
    order = torch.arange(keys[0].numel())
    for key in reversed(keys):
        order = order[torch.sort(key[order], stable=True).indices]
    return order
