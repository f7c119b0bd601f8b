r"""k-way Fiduccia-Mattheyses refinement of a rank assignment (PGC's FM pass).

Label propagation and the greedy chunk refinement (:func:`.assign.refine_chunks`)
apply only moves (and swaps) with a positive byte gain, so they stop in the
first local optimum. On supergraphs made mostly of temporal chains with
sparse, heavier spatial edges (SNAP interaction graphs under DGC's T-GCN:
768 B per cut spatial edge, 256 B per cut temporal edge) that optimum is
far from METIS's (docs/pgc.md, step 5b). FM escapes it: a pass moves
one node at a time, *including moves that lose bytes*, locks every moved
node, and afterwards rolls back to the best prefix of the pass.

A pass, on a graph of :math:`n` nodes with costs :math:`c_v`, ranks
:math:`o(v)`, loads :math:`L_m` and the connection table
:math:`A[v, m] = \sum_{u \in N(v),\, o(u) = m} w_{uv}`:

* the *excess* :math:`X = \sum_m \max(0, L_m - hi) + \max(0, lo - L_m)`
  measures how far the loads are outside the band ``[lo, hi]``;
* every step picks, among unlocked nodes :math:`v` and ranks
  :math:`m \ne o(v)`, the move with the largest gain
  :math:`A[v, m] - A[v, o(v)]` among the *allowed* ones: while :math:`X > 0`
  a move must lower :math:`X` (so an overloaded rank gives its best node
  away), otherwise it may leave every load inside the widened band ``[lo -
  c_max, hi + c_max]`` (so a node larger than the band can move and a
  later step moves another one back: a swap, or a chain of moves, found by
  gains instead of enumerated). Ties: the move that lowers the excess most,
  then the smaller node id, then the smaller rank;
* the state after each step is keyed by :math:`(X, \text{cut})`
  (lexicographic); the pass stops after ``stall`` steps without a new best
  key (or when no move is allowed) and rolls back to the best one.

Passes repeat while one strictly improves the key (at most ``max_passes``).
The result never has a larger key than the input: the cut never grows
unless the input was outside the band, and the loads end inside the band
whenever the input's were. Weights are bytes (whole numbers), so the
running sums are exact and the result is deterministic (no random draws).

Each step scans all unlocked nodes x ranks, :math:`O(n P)`: meant for chunk
graphs (at most ``max_chunks`` = 4096 nodes), where a pass of a few hundred
steps costs milliseconds compiled.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from ..compiled.jit import jit
from .label_propagation import CSRGraph, compact_labels, label_propagation

#: coarsening stops at a level that shrinks by less than this fraction
STOP_SHRINK = 0.1


def _fm_passes(ptr, nbr, w, cost, owner, num_parts, hi, lo, max_passes, stall, max_steps):  # pragma: no cover - compiled
    """The FM passes (module doc) on ``owner`` in place; returns the number
    of passes that improved the key."""
    n = cost.shape[0]
    P = num_parts
    A = np.zeros((n, P))
    tot = np.zeros(n)  # summed edge weight of each node: boundary iff tot > A[v, own]
    loads = np.zeros(P)
    cut2 = 0.0  # twice the cut (each edge seen from both ends)
    cmax = 0.0
    for v in range(n):
        loads[owner[v]] += cost[v]
        if cost[v] > cmax:
            cmax = cost[v]
        for e in range(ptr[v], ptr[v + 1]):
            m = owner[nbr[e]]
            A[v, m] += w[e]
            tot[v] += w[e]
            if m != owner[v]:
                cut2 += w[e]
    cut = cut2 / 2.0
    whi, wlo = hi + cmax, lo - cmax
    locked = np.zeros(n, np.bool_)
    moved = np.empty(n, np.int64)
    came = np.empty(n, np.int64)
    improved = 0
    for _ in range(max_passes):
        locked[:] = False
        x = 0.0
        for m in range(P):
            x += max(0.0, loads[m] - hi) + max(0.0, lo - loads[m])
        best_x, best_cut, best_k = x, cut, 0
        k = 0
        while k < n and k < max_steps and k - best_k <= stall:
            bv, bm = -1, -1
            bg, bd = -np.inf, np.inf
            for v in range(n):
                if locked[v]:
                    continue
                a = owner[v]
                # interior nodes only lose bytes: they move only to repair the balance, out of a rank above the band
                if x == 0.0 or loads[a] <= hi:
                    if not tot[v] > A[v, a]:
                        continue
                if tot[v] - 2.0 * A[v, a] < bg:  # an upper bound of its gains: it cannot win (nor tie)
                    continue
                la = loads[a] - cost[v]
                if la < wlo:
                    continue
                xa_old = max(0.0, loads[a] - hi) + max(0.0, lo - loads[a])
                xa_new = max(0.0, la - hi) + max(0.0, lo - la)
                for m in range(P):
                    if m == a:
                        continue
                    lm = loads[m] + cost[v]
                    if lm > whi:
                        continue
                    d = (xa_new - xa_old + max(0.0, lm - hi) + max(0.0, lo - lm)
                         - max(0.0, loads[m] - hi) - max(0.0, lo - loads[m]))
                    if x > 0.0 and not d < 0.0:
                        continue
                    g = A[v, m] - A[v, a]
                    if g > bg or (g == bg and d < bd):
                        bv, bm, bg, bd = v, m, g, d
            if bv < 0:
                break
            a = owner[bv]
            for e in range(ptr[bv], ptr[bv + 1]):
                A[nbr[e], a] -= w[e]
                A[nbr[e], bm] += w[e]
            loads[a] -= cost[bv]
            loads[bm] += cost[bv]
            owner[bv] = bm
            locked[bv] = True
            moved[k] = bv
            came[k] = a
            k += 1
            cut -= bg
            x = 0.0
            for m in range(P):
                x += max(0.0, loads[m] - hi) + max(0.0, lo - loads[m])
            if x < best_x or (x == best_x and cut < best_cut):
                best_x, best_cut, best_k = x, cut, k
        for j in range(k - 1, best_k - 1, -1):  # roll back to the best prefix
            v, a = moved[j], came[j]
            m = owner[v]
            for e in range(ptr[v], ptr[v + 1]):
                A[nbr[e], m] -= w[e]
                A[nbr[e], a] += w[e]
            loads[m] -= cost[v]
            loads[a] += cost[v]
            owner[v] = a
        cut = best_cut
        if best_k == 0:
            break
        improved += 1
    return improved


_fm_compiled = jit(_fm_passes)  # the same loop in Python without numba


def fm_refine(ptr: np.ndarray, nbr: np.ndarray, w: np.ndarray, cost: np.ndarray, owner: np.ndarray,
              num_parts: int, hi: float, lo: float, *, max_passes: int = 8, stall: int = 64,
              max_steps: Optional[int] = None) -> tuple[np.ndarray, int]:
    r"""k-way FM refinement (module doc) of ``owner`` on an undirected
    weighted graph in CSR form.

    Args:
        ptr (np.ndarray): ``[n+1]`` CSR offsets.
        nbr (np.ndarray): ``[nnz]`` neighbour of each entry (both directions stored).
        w (np.ndarray): ``[nnz]`` bytes of each entry (>= 0).
        cost (np.ndarray): ``[n]`` node costs (>= 0).
        owner (np.ndarray): ``[n]`` ranks in ``[0, num_parts)``.
        num_parts (int): :math:`P`.
        hi (float), lo (float): the load band.
        max_passes (int): at most this many passes (0: the input).
        stall (int): a pass stops after this many steps without a new best.
        max_steps (int, optional): ... or after this many steps (default :math:`n`).

    Returns:
        ``(owner [n], improving passes)``; ``owner`` is a new array.
    """
    out = np.array(owner, dtype=np.int64)  # a copy
    if num_parts < 2 or out.shape[0] == 0 or max_passes <= 0:
        return out, 0
    improved = _fm_compiled(np.ascontiguousarray(ptr, dtype=np.int64), np.ascontiguousarray(nbr, dtype=np.int64),
                            np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(cost, dtype=np.float64),
                            out, int(num_parts), float(hi), float(lo), int(max_passes), int(stall),
                            int(out.shape[0] if max_steps is None else max_steps))
    return out, int(improved)


def fm_key(ptr: np.ndarray, nbr: np.ndarray, w: np.ndarray, cost: np.ndarray, owner: np.ndarray, P: int, hi: float,
         lo: float) -> tuple[float, float]:
    """``(excess, cut)`` of an assignment (module doc)."""
    loads = np.bincount(owner, weights=cost, minlength=P)
    excess = float(np.maximum(loads - hi, 0.0).sum() + np.maximum(lo - loads, 0.0).sum())
    rows = np.repeat(np.arange(owner.shape[0]), np.diff(ptr))
    return excess, float(w[owner[rows] != owner[nbr]].sum() / 2.0)


def multilevel_fm(ptr: np.ndarray, nbr: np.ndarray, w: np.ndarray, cost: np.ndarray, num_parts: int, hi: float,
                  lo: float, initial: "Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]", *,
                  seed: int = 0, coarsen_to: int = 16, random_starts: int = 4, max_passes: int = 8,
                  stall: int = 64, lp_rounds: int = 10) -> tuple[np.ndarray, dict]:
    r"""Multilevel FM on a small graph (a chunk graph): size-constrained
    label propagation coarsens it (cap below) until about ``coarsen_to *
    num_parts`` nodes remain or a level shrinks by less than 10%; the coarsest
    graph is assigned by ``initial`` and by ``random_starts`` seeded random
    assignments, each refined by :func:`fm_refine`, and the one with the
    smallest ``(excess, cut)`` key is projected back level by level, refined
    by :func:`fm_refine` on each.

    Coarse nodes are kept below ``total / (coarsen_to * num_parts) * 1.5``
    (METIS's bound on coarse vertex weights, relative to the coarsening
    target), and never below the heaviest input node. Heavy-edge matching
    instead of label propagation barely coarsens chunk graphs, which are
    star-like (docs/pgc.md, step 5b).

    Args:
        ptr, nbr, w, cost: the graph (CSR, both directions, bytes) and node costs.
        num_parts (int): :math:`P`.
        hi (float), lo (float): the load band.
        initial: ``initial(ptr, nbr, w, cost) -> owner`` on the coarsest graph
            (PGC: Algorithm 1 and the chunk refinement).
        seed (int): label-propagation seeds and random starts.

    Returns:
        ``(owner [n], info)`` with ``info["levels"]`` (node counts, finest
        first) and ``info["start"]`` (``"initial"`` or ``"random<k>"``).
    """

    rng = np.random.default_rng(seed)
    P = int(num_parts)
    cost = np.asarray(cost, dtype=np.float64)
    total = float(cost.sum())
    target = max(coarsen_to * P, P)
    max_weight = max(1.5 * total / target, float(cost.max()) if cost.size else 0.0)
    graphs = [(np.asarray(ptr, np.int64), np.asarray(nbr, np.int64), np.asarray(w, np.float64), cost)]
    maps: list[np.ndarray] = []
    while graphs[-1][3].shape[0] > target:
        gp, gn, gw, gc = graphs[-1]
        n = gc.shape[0]
        g = CSRGraph.from_csr(n, torch.from_numpy(gp), torch.from_numpy(gn), torch.from_numpy(gw))
        res = label_propagation(g, node_weight=torch.from_numpy(gc), cap=max_weight, seed=seed + 31 * len(graphs),
                                max_rounds=lp_rounds, tie_moves=True, priority=g.weighted_degree())
        lab, k = compact_labels(res.labels)
        if k > (1.0 - STOP_SHRINK) * n:
            break
        label = lab.numpy()
        g = g.contract(lab, int(k))
        graphs.append((g.ptr.numpy().astype(np.int64), g.dst.numpy().astype(np.int64),
                       g.weight.numpy().astype(np.float64), np.bincount(label, weights=gc, minlength=int(k))))
        maps.append(label)
    gp, gn, gw, gc = graphs[-1]
    starts = [("initial", np.asarray(initial(gp, gn, gw, gc), dtype=np.int64))]
    starts += [(f"random{i}", rng.integers(0, P, gc.shape[0]).astype(np.int64)) for i in range(random_starts)]
    best, best_key, best_name = None, None, ""
    for name, own in starts:
        own, _ = fm_refine(gp, gn, gw, gc, own, P, hi, lo, max_passes=max_passes, stall=stall)
        key = fm_key(gp, gn, gw, gc, own, P, hi, lo)
        if best_key is None or key < best_key:
            best, best_key, best_name = own, key, name
    own = best
    for level in range(len(maps) - 1, -1, -1):
        own = own[maps[level]]
        gp, gn, gw, gc = graphs[level]
        own, _ = fm_refine(gp, gn, gw, gc, own, P, hi, lo, max_passes=max_passes, stall=stall)
    return own, {"levels": [g[3].shape[0] for g in graphs], "start": best_name}
