r"""Chunk assignment (DGC §4.2, Algorithm 1, Eq. 3) and chunk-level refinement.

Chunks are the nodes of a small weighted graph (at most a few thousand nodes):
``h(a, b)`` is the number of bytes that separating chunks ``a`` and ``b`` costs
(the summed weight of the supergraph edges between them) and ``g_a`` the
predicted workload of chunk ``a``. The greedy loop over chunks runs in Python
with numpy vector steps over ranks; every per-edge quantity is precomputed with
array operations.

Algorithm 1 places the chunks in decreasing order of :math:`g_a` on

.. math::
    m^* = \operatorname{argmax}_m \; s_m, \qquad
    s_m = \Big(\bar g - \sum_{a' \in Q_m} g_{a'}\Big) \cdot
          \Big(\sum_{a' \in Q_m} h(a, a') + \varepsilon\Big)

**Empty ranks.** As printed, Eq. 3 gives score 0 to an empty rank (and to any
rank the chunk has no edge to), so the first chunk and every unconnected chunk
would go to rank 0 by ``argmax`` tie-breaking. We add a small
:math:`\varepsilon > 0` to the affinity term (``1e-9`` times the smallest
positive chunk affinity, so it never outweighs a real byte): among ranks the
chunk has no affinity to -- in particular empty ranks -- the one with the most
remaining balance wins, and a chunk connected to a rank with room still prefers
that rank. **Capacity.** Only ranks on which the chunk fits, i.e.
:math:`\mathrm{load}_m + g_a \le (1 + \text{slack})\,\bar g`, compete; if the
chunk fits nowhere it goes to the least loaded rank. Chunk sizes decrease along
the order, so the last small chunks fill the remaining gaps.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compiled import backend, kernels
from ..metrics import load_imbalance as divergence  # noqa: F401 - lambda under DGC's name (PGC, its tests, bench_workload)


def _affinity_compiled(graph: "ChunkGraph", owner: np.ndarray, num_parts: int) -> np.ndarray:
    """:meth:`ChunkGraph.affinity`: the same sums in one compiled pass."""
    return kernels.assign.chunk_affinity(np.ascontiguousarray(graph.ptr, dtype=np.int64),
                                  np.ascontiguousarray(graph.nbr, dtype=np.int64),
                                  np.ascontiguousarray(graph.w, dtype=np.float64),
                                  np.ascontiguousarray(owner, dtype=np.int64), int(num_parts))


@dataclass
class ChunkGraph:
    r"""Undirected weighted chunk graph in CSR form (numpy).

    Attributes:
        num_chunks (int): :math:`C`.
        ptr (np.ndarray): ``[C+1]`` CSR offsets.
        nbr (np.ndarray): ``[2P]`` neighbour chunk of each entry.
        w (np.ndarray): ``[2P]`` bytes between the two chunks.
    """

    num_chunks: int
    ptr: np.ndarray
    nbr: np.ndarray
    w: np.ndarray

    @classmethod
    def from_pairs(cls, num_chunks: int, a: np.ndarray, b: np.ndarray, w: np.ndarray) -> "ChunkGraph":
        """Build from each undirected pair once (``a != b``)."""
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        w = np.asarray(w, dtype=np.float64)
        src = np.concatenate([a, b])
        dst = np.concatenate([b, a])
        ww = np.concatenate([w, w])
        order = np.argsort(src, kind="stable")
        counts = np.bincount(src, minlength=num_chunks)
        ptr = np.zeros(num_chunks + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return cls(num_chunks, ptr, dst[order], ww[order])

    @backend.twin(_affinity_compiled)
    def affinity(self, owner: np.ndarray, num_parts: int) -> np.ndarray:
        """``[C, P]`` bytes between each chunk and the chunks on each rank
        (summed in entry order)."""
        A = np.zeros((self.num_chunks, num_parts), dtype=np.float64)
        rows = np.repeat(np.arange(self.num_chunks), np.diff(self.ptr))
        np.add.at(A, (rows, owner[self.nbr]), self.w)
        return A

    def cut(self, owner: np.ndarray) -> float:
        """Total bytes of the chunk edges whose endpoints sit on different ranks."""
        rows = np.repeat(np.arange(self.num_chunks), np.diff(self.ptr))
        return float(self.w[owner[rows] != owner[self.nbr]].sum() / 2.0)


def assign_chunks(
    graph: ChunkGraph,
    cost: np.ndarray,
    num_parts: int,
    *,
    slack: float = 0.03,
) -> np.ndarray:
    r"""Algorithm 1: greedy chunk-to-rank assignment by Eq. 3 (see module doc).

    Args:
        graph (ChunkGraph): chunk affinities :math:`h`.
        cost (np.ndarray): ``[C]`` predicted chunk workloads :math:`g_a`.
        num_parts (int): number of ranks :math:`|M|`.
        slack (float): a rank may take a chunk while its load stays within
            ``(1 + slack) * mean``.

    Returns:
        ``[C]`` rank of each chunk.
    """
    C = graph.num_chunks
    cost = np.asarray(cost, dtype=np.float64)
    gbar = cost.sum() / num_parts
    eps = 1e-9 * (graph.w[graph.w > 0].min() if (graph.w > 0).any() else 1.0)
    # chunks sorted by workload, heaviest first (ties: lower chunk id first)
    order = np.lexsort((np.arange(C), -cost))
    limit = (1.0 + slack) * gbar
    return _greedy_assign(graph, cost, order, int(num_parts), float(gbar), float(limit), float(eps))


def _greedy_assign_compiled(graph: ChunkGraph, cost: np.ndarray, order: np.ndarray, num_parts: int, gbar: float,
                            limit: float, eps: float) -> np.ndarray:
    """:func:`_greedy_assign`: the same loop compiled (identical result, tests/partition/compiled/test_kernels.py)."""
    return kernels.assign.assign_chunks(np.ascontiguousarray(graph.ptr, dtype=np.int64),
                                 np.ascontiguousarray(graph.nbr, dtype=np.int64),
                                 np.ascontiguousarray(graph.w, dtype=np.float64), cost, order, num_parts,
                                 gbar, limit, eps)


@backend.twin(_greedy_assign_compiled)
def _greedy_assign(graph: ChunkGraph, cost: np.ndarray, order: np.ndarray, num_parts: int, gbar: float,
                   limit: float, eps: float) -> np.ndarray:
    """Algorithm 1's loop over the chunks in ``order`` (:func:`assign_chunks`)."""
    C = graph.num_chunks
    loads = np.zeros(num_parts, dtype=np.float64)
    A = np.zeros((C, num_parts), dtype=np.float64)  # affinity of chunk to ranks so far
    owner = np.full(C, -1, dtype=np.int64)
    for a in order:
        fits = loads + cost[a] <= limit
        if fits.any():
            score = (gbar - loads) * (A[a] + eps)
            score[~fits] = -np.inf
            m = int(np.argmax(score))
        else:
            m = int(np.argmin(loads))
        owner[a] = m
        loads[m] += cost[a]
        lo, hi = graph.ptr[a], graph.ptr[a + 1]
        np.add.at(A[:, m], graph.nbr[lo:hi], graph.w[lo:hi])
    return owner


def rank_loads(owner: np.ndarray, cost: np.ndarray, num_parts: int) -> np.ndarray:
    """``[P]`` summed chunk cost per rank."""
    return np.bincount(owner, weights=np.asarray(cost, dtype=np.float64), minlength=num_parts)


def refine_chunks(
    graph: ChunkGraph,
    cost: np.ndarray,
    owner: np.ndarray,
    num_parts: int,
    *,
    slack: float = 0.03,
    max_moves: int | None = None,
    swaps: int = 16,
) -> np.ndarray:
    r"""Chunk-level refinement after Algorithm 1.

    1. *Balance*: while some rank is outside ``[(1 - slack) mean, (1 + slack)
       mean]`` (or empty), move from the most to the least loaded rank the chunk
       that fits the gap (``cost <= (max - min) / 2`` so the spread shrinks) and
       loses the fewest bytes.
    2. *Cut*: repeatedly apply the single chunk move with the largest positive
       byte gain :math:`A[c, m] - A[c, \mathrm{own}(c)]` that keeps both ranks
       inside the band; when none exists, *swaps* of two chunks on two ranks
       (the best of every rank pair among the ``swaps`` best candidates per
       rank, see :func:`_pair_swaps`): a chunk larger than the band cannot
       move alone but can trade places with one of similar cost. The swaps
       are applied largest gain first, each rank at most once per round: a
       swap changes only the gains towards its own two ranks, so the gains
       of swaps on other ranks stay exact (each is re-checked against the
       band). Each step strictly lowers the cut. ``swaps=0`` disables swaps.

    Returns:
        ``[C]`` refined owner (a new array).
    """
    owner = np.array(owner, dtype=np.int64)  # a copy
    cost = np.asarray(cost, dtype=np.float64)
    C = graph.num_chunks
    if max_moves is None:
        max_moves = 2 * C + 10
    gbar = cost.sum() / num_parts
    hi_lim, lo_lim = (1.0 + slack) * gbar, (1.0 - slack) * gbar
    A = graph.affinity(owner, num_parts)
    loads = rank_loads(owner, cost, num_parts)
    return _refine(graph, cost, owner, A, loads, int(num_parts), float(hi_lim), float(lo_lim), int(max_moves), int(swaps))


def _refine_compiled(graph: ChunkGraph, cost: np.ndarray, owner: np.ndarray, A: np.ndarray, loads: np.ndarray,
                     num_parts: int, hi_lim: float, lo_lim: float, max_moves: int, swaps: int) -> np.ndarray:
    """:func:`_refine`: the same phases compiled (identical result, tests/partition/compiled/test_kernels.py)."""
    kernels.assign.refine_chunks(np.ascontiguousarray(graph.ptr, dtype=np.int64), np.ascontiguousarray(graph.nbr, dtype=np.int64),
                          np.ascontiguousarray(graph.w, dtype=np.float64), cost, owner, A, loads, num_parts,
                          hi_lim, lo_lim, max_moves, swaps)
    return owner


@backend.twin(_refine_compiled)
def _refine(graph: ChunkGraph, cost: np.ndarray, owner: np.ndarray, A: np.ndarray, loads: np.ndarray,
            num_parts: int, hi_lim: float, lo_lim: float, max_moves: int, swaps: int) -> np.ndarray:
    """:func:`refine_chunks`' balance and cut phases on ``owner``, ``A`` and
    ``loads`` (updated in place); returns ``owner``."""
    C = graph.num_chunks
    idx = np.arange(C)

    def move(c: int, m: int) -> None:
        o = owner[c]
        lo, hi = graph.ptr[c], graph.ptr[c + 1]
        np.add.at(A[:, o], graph.nbr[lo:hi], -graph.w[lo:hi])
        np.add.at(A[:, m], graph.nbr[lo:hi], graph.w[lo:hi])
        loads[o] -= cost[c]
        loads[m] += cost[c]
        owner[c] = m

    for _ in range(max_moves):  # balance phase
        src, dst = int(np.argmax(loads)), int(np.argmin(loads))
        if loads[src] <= hi_lim and loads[dst] >= lo_lim and loads[dst] > 0:
            break
        gap = (loads[src] - loads[dst]) / 2.0
        cand = (owner == src) & (cost <= gap) & (cost > 0)
        if not cand.any():
            break
        gain = np.where(cand, A[:, dst] - A[:, src], -np.inf)
        # prefer the least byte loss; among equal, the chunk closest to the gap
        best = np.flatnonzero(gain == gain.max())
        c = int(best[np.argmax(cost[best])])
        move(c, dst)
    keys = np.repeat(np.arange(C), np.diff(graph.ptr)) * C + graph.nbr
    korder = np.argsort(keys, kind="stable")
    keys, kw = keys[korder], graph.w[korder]

    def h(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Bytes between chunk pairs (0 where not adjacent)."""
        q = a * C + b
        if keys.size == 0:
            return np.zeros(q.shape)
        pos = np.minimum(np.searchsorted(keys, q), keys.size - 1)
        return np.where(keys[pos] == q, kw[pos], 0.0)

    for _ in range(max_moves):  # cut phase: best single move, else best swap
        hi, lo = max(hi_lim, loads.max()), min(lo_lim, loads.min())
        gain = A - A[idx, owner][:, None]
        ok = (loads[None, :] + cost[:, None] <= hi)
        ok &= (loads[owner] - cost >= lo)[:, None]
        ok[idx, owner] = False
        g1 = np.where(ok, gain, -np.inf)
        flat = int(np.argmax(g1))
        if np.isfinite(g1.flat[flat]) and g1.flat[flat] > 1e-12:
            move(flat // num_parts, flat % num_parts)
            continue
        if swaps <= 0 or num_parts < 2:
            break
        cands = _pair_swaps(gain, owner, cost, loads, hi, lo, h, swaps)
        if not cands:
            break
        # largest gain first (stable: pair order on ties), each rank at most once
        used = np.zeros(num_parts, dtype=bool)
        for _, ra, rb, a, b in sorted(cands, key=lambda t: -t[0]):
            if used[ra] or used[rb]:
                continue
            hi, lo = max(hi_lim, loads.max()), min(lo_lim, loads.min())
            d = cost[a] - cost[b]
            if not (lo <= loads[ra] - d <= hi and lo <= loads[rb] + d <= hi):
                continue
            move(a, rb)
            move(b, ra)
            used[ra] = used[rb] = True
    return owner


def _pair_swaps(gain: np.ndarray, owner: np.ndarray, cost: np.ndarray, loads: np.ndarray, hi: float, lo: float,
                h, k: int) -> list[tuple[float, int, int, int, int]]:
    r"""For every rank pair :math:`A < B` the best exchange of a chunk
    :math:`a` on :math:`A` with a chunk :math:`b` on :math:`B`: gain
    :math:`g_{aB} + g_{bA} - 2 h(a, b)` (both single-move gains count the
    edge between them as saved), among the ``k`` chunks of each rank with the
    largest single-move gain towards the other; both ranks must stay within
    ``[lo, hi]``. Returns ``(gain, A, B, a, b)`` for the pairs whose best gain
    exceeds 1e-12, in pair order."""
    P = gain.shape[1]
    out = []
    for ra in range(P):  # loops over rank pairs only (P^2 / 2 small numpy steps)
        on_a = np.flatnonzero(owner == ra)
        if on_a.size == 0:
            continue
        for rb in range(ra + 1, P):
            on_b = np.flatnonzero(owner == rb)
            if on_b.size == 0:
                continue
            ca = on_a[np.argsort(-gain[on_a, rb], kind="stable")[:k]]
            cb = on_b[np.argsort(-gain[on_b, ra], kind="stable")[:k]]
            sw = gain[ca, rb][:, None] + gain[cb, ra][None, :] - 2.0 * h(ca[:, None], cb[None, :])
            d = cost[ca][:, None] - cost[cb][None, :]  # load moving from A to B
            ok = (loads[ra] - d >= lo) & (loads[ra] - d <= hi) & (loads[rb] + d >= lo) & (loads[rb] + d <= hi)
            sw = np.where(ok, sw, -np.inf)
            i = int(np.argmax(sw))
            if sw.flat[i] > 1e-12:
                out.append((float(sw.flat[i]), ra, rb, int(ca[i // cb.size]), int(cb[i % cb.size])))
    return out
