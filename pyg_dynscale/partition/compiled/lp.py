r"""Compiled label propagation (numba): one call runs every round (:func:`lp_run`).

The torch twin is :func:`~pyg_dynscale.partition.pgc.label_propagation.label_propagation`;
:mod:`.backend` chooses which one runs. A node's Eq. 2 scores are accumulated
in a scratch array indexed by label (a sparse accumulator, :math:`O(\deg v)`
per node), big rounds are split over threads, and acceptance under the cap
follows the same priorities, half masks (:func:`half_mask`) and tie-breaks as
the torch code, so both give the same labels bit for bit.
Imported only when numba imports (:mod:`.kernels`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from . import csr
from .jit import numba, threads

_jit = numba.njit(cache=True, nogil=True)


class LabelPropagationJob(NamedTuple):
    r"""Everything one compiled label propagation (:func:`lp_run`) reads.

    Graph (CSR, numpy): ``ptr`` ``[n+1]``, ``dst`` ``[nnz]``, ``weight``
    ``[nnz]`` and the node weights ``node_weight`` ``[n]``. Start:
    ``label_pri`` ``[L]`` (random label priorities), ``node_pri`` ``[n]``,
    ``key`` (``[L]`` float64 re-ranking key, or empty), ``init`` (``[n]``
    initial labels, or empty for Eq. 1's unique labels), ``num_labels``.
    Constraints: ``cap`` / ``floor`` (``None``: none) in units of ``scale``
    (:func:`~pyg_dynscale.partition.pgc.label_propagation.budget_scale`). Stopping: ``max_rounds``,
    ``min_rounds``, ``tol`` (moved fraction), ``gain_tol`` relative to
    ``total_weight``. Moves: ``boundary_only`` start, ``tie_moves``, ``seed``
    of the half masks, ``dense`` per-label accumulators, ``threads``.
    """

    ptr: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    node_weight: np.ndarray
    label_pri: np.ndarray
    node_pri: np.ndarray
    key: np.ndarray
    init: np.ndarray
    num_labels: int
    cap: Optional[float]
    floor: Optional[float]
    scale: float
    max_rounds: int
    min_rounds: int
    tol: float
    gain_tol: float
    total_weight: float
    boundary_only: bool
    tie_moves: bool
    seed: int
    dense: bool
    threads: int


def lp_run(job: LabelPropagationJob) -> tuple[np.ndarray, int, bool, list, list]:
    """A whole label propagation in one compiled call. Returns ``(labels
    [n], rounds, converged, moved per round, gain per round)``."""
    moved = np.zeros(max(0, job.max_rounds), np.int64)
    gains = np.zeros(max(0, job.max_rounds), np.float64)
    labels, r, converged = _lp_run(
        job.ptr, job.dst, job.weight, job.label_pri, job.key, job.init, job.boundary_only, job.node_weight,
        job.node_pri, job.num_labels, float("inf") if job.cap is None else float(job.cap), job.cap is not None,
        0.0 if job.floor is None else float(job.floor), job.floor is not None, job.max_rounds, job.tol, job.gain_tol,
        job.total_weight, job.min_rounds, job.tie_moves, job.seed, moved, gains, job.threads, job.scale, job.dense)
    return labels, r, converged, moved[:r].tolist(), gains[:r].tolist()


#: empty arrays for the compiled kernels' optional array arguments
EMPTY_INT = np.zeros(0, np.int64)
EMPTY_FLOAT = np.zeros(0, np.float64)


def csr_from_edges(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, ...]:
    """Undirected CSR from edges given once: entries ``(src, dst)`` then
    ``(dst, src)`` (self loops dropped), rows sorted by neighbour, equal
    pairs merged -- as :meth:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph.from_edges`
    (:func:`.csr.edges_to_csr`, multi-threaded)."""
    return csr.edges_to_csr(int(n), EMPTY_INT, src, dst, weight, 0.0, True, EMPTY_INT, EMPTY_INT, EMPTY_FLOAT,
                                    0.0, threads(), *csr.placement_types(int(n), 0.0, weight))

def contract_csr(ptr: np.ndarray, dst: np.ndarray, weight: np.ndarray, labels: np.ndarray,
                 num_labels: int, symmetric: bool = False) -> tuple[np.ndarray, ...]:
    """CSR of the label-level graph (:func:`.csr.contract_csr`;
    ``symmetric``: the input stores both directions of every edge)."""
    return csr.contract_csr(ptr, dst, weight, labels, int(num_labels), threads(), bool(symmetric))

#: budget units: a label's room is clamped to this many units
BUDGET_LIMIT = float(2 ** 62)

#: the compiled driver splits a round over threads only on graphs with
#: more CSR entries than this (a parallel region costs ~10 us)
PARALLEL_MIN_ENTRIES = 10_000
#: :func:`lp_rounds` keeps a dense ``[n, L]`` label-weight table (``dense``)
#: for at most this many labels (the rank-level refinement), when the
#: table has at most ``DENSE_MAX_FILL`` times as many cells as the graph
#: has CSR entries
DENSE_MAX_LABELS = 64
DENSE_MAX_FILL = 4

@_jit
def round_candidates(ptr, dst, weight, labels, act, nw, size, cap, tie_moves, score, out_node, out_to,
                     out_gain):  # pragma: no cover
    r"""One label-propagation round's choice (steps 2-3 of
    :mod:`~pyg_dynscale.partition.pgc.label_propagation`): for each active node :math:`v` (``act``
    ascending) the allowed label of largest Eq. 2 weight (ties: the larger
    internal label). Writes ``(node, to, gain)`` of the nodes that want to
    move (``gain > 0``, or a tie towards a larger label with
    ``tie_moves``) into ``out_*`` in ``act`` order and returns their count.

    ``score`` (``[>= L]`` float64) is a scratch accumulator indexed by
    label. Each row takes branch-free passes -- zero the scores of its
    labels, add the edge weights (CSR order, as the torch backend), the
    best allowed score, the largest label with it -- instead of a "first
    time seen?" test per entry, which mispredicts on mixed rows. The
    choice is two plain maxima, as the torch backend's two ``amax``
    (:func:`~pyg_dynscale.partition.pgc.label_propagation._choose_float`): one pass comparing
    (score, label) pairs compiles to a compare-and-select chain through
    every entry (docs/pgc.md, "Speed and quality"). A label met twice is evaluated
    twice with the same score (idempotent)."""
    A = act.shape[0]
    tl = np.empty(64, np.int64)
    ts = np.empty(64, np.float64)
    k = 0
    for i in range(A):
        v = act[i]
        lo = ptr[v]
        d = ptr[v + 1] - lo
        if d > tl.shape[0]:
            tl = np.empty(2 * d, np.int64)
            ts = np.empty(2 * d, np.float64)
        cl = labels[v]
        nv = nw[v]
        score[cl] = 0.0  # the current label scores 0 when no neighbour has it
        for j in range(d):
            lab = labels[dst[lo + j]]
            tl[j] = lab
            score[lab] = 0.0
        for j in range(d):
            score[tl[j]] += np.float64(weight[lo + j])
        cur = score[cl]
        best = -np.inf
        for j in range(d):  # the best allowed score (disallowed entries: -inf)
            lab = tl[j]
            sc = score[lab]
            x = sc if (lab != cl) & (size[lab] + nv <= cap) else -np.inf
            ts[j] = x
            best = max(best, x)
        if best == -np.inf:  # no allowed label
            continue
        bl = -1
        for j in range(d):  # ties: the largest label with the best score
            bl = max(bl, tl[j] if ts[j] == best else -1)
        gain = best - cur
        if gain > 0 or (tie_moves and gain == 0 and best > 0 and bl > cl):
            out_node[k] = v
            out_to[k] = bl
            out_gain[k] = gain
            k += 1
    return k

@_jit
def dense_candidates(conn, labels, act, nw, size, cap, tie_moves, out_node, out_to, out_gain):  # pragma: no cover
    r""":func:`round_candidates` from the ``[n, L]`` table ``conn`` of
    every node's summed edge weight per label (kept exact by
    :func:`lp_rounds` when ``dense``): :math:`O(L)` per active node instead
    of :math:`O(\deg v)`. Labels of weight 0 are skipped: in
    :func:`round_candidates` they can be chosen only when no positive
    label fits, and then never move a node, so the moves are the same."""
    L = conn.shape[1]
    k = 0
    for i in range(act.shape[0]):
        v = act[i]
        cl = labels[v]
        nv = nw[v]
        best = 0.0
        for lab in range(L):  # two maxima, as round_candidates: the best positive allowed score
            sc = conn[v, lab]
            best = max(best, sc if (sc > 0.0) & (lab != cl) & (size[lab] + nv <= cap) else 0.0)
        if best == 0.0:
            continue
        bl = -1
        for lab in range(L):  # ... and the largest allowed label with it
            sc = conn[v, lab]
            bl = max(bl, lab if (sc == best) & (lab != cl) & (size[lab] + nv <= cap) else -1)
        gain = best - conn[v, cl]
        if gain > 0 or (tie_moves and gain == 0 and bl > cl):
            out_node[k] = v
            out_to[k] = bl
            out_gain[k] = gain
            k += 1
    return k

@numba.njit(cache=True, nogil=True, parallel=True)
def candidates_parallel(ptr, dst, weight, labels, act, nw, size, cap, tie_moves, score, out_node, out_to,
                        out_gain):  # pragma: no cover
    """:func:`round_candidates` on ``score.shape[0]`` contiguous blocks of
    ``act`` in parallel (one scratch row per block), compacted in ``act``
    order: the same output as one serial call, whatever the thread count.
    Blocks hold about equal numbers of CSR entries (not of nodes): hubs
    would otherwise leave a thread idle."""
    nb = score.shape[0]
    A = act.shape[0]
    cut = np.empty(nb + 1, np.int64)  # block b = act[cut[b]:cut[b + 1]]
    total = 0
    for i in range(A):
        total += ptr[act[i] + 1] - ptr[act[i]]
    cut[0] = 0
    b = 1
    run = 0
    for i in range(A):
        while b < nb and run >= total * b // nb:
            cut[b] = i
            b += 1
        run += ptr[act[i] + 1] - ptr[act[i]]
    while b <= nb:
        cut[b] = A
        b += 1
    counts = np.zeros(nb, np.int64)
    for b in numba.prange(nb):
        lo = cut[b]
        hi = cut[b + 1]
        counts[b] = round_candidates(ptr, dst, weight, labels, act[lo:hi], nw, size, cap, tie_moves, score[b],
                                     out_node[lo:hi], out_to[lo:hi], out_gain[lo:hi])
    k = counts[0]
    for b in range(1, nb):  # blocks move left only: k <= the block's start
        lo = cut[b]
        for j in range(counts[b]):
            out_node[k + j] = out_node[lo + j]
            out_to[k + j] = out_to[lo + j]
            out_gain[k + j] = out_gain[lo + j]
        k += counts[b]
    return k

@_jit
def stable_argsort(keys):  # pragma: no cover
    """``torch.sort(keys, stable=True).indices`` for float64 ``keys``
    without NaN: an LSD radix sort (11-bit digits, 16-bit above 2^17
    keys) of the order-preserving
    integer image of each key (``-0.0`` counts as ``0.0``); digits equal
    for all keys are skipped. :math:`O(n)`, where the priority keys of
    label propagation would need a comparison sort."""
    n = keys.shape[0]
    bits = (keys + 0.0).view(np.int64)  # (+ 0.0: -0.0 -> 0.0)
    u = np.empty(n, np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    for i in range(n):
        b = bits[i]
        u[i] = np.uint64(~b) if b < 0 else np.uint64(b) | sign
    idx = np.arange(n)
    u2 = np.empty(n, np.uint64)  # keys travel with their indices: every pass reads sequentially
    idx2 = np.empty(n, np.int64)
    width = 16 if n > 131072 else 11
    nd = 1 << width
    count = np.empty(nd + 1, np.int64)
    mask = np.uint64(nd - 1)
    for shift in range(0, 64, width):
        sh = np.uint64(shift)
        count[:] = 0
        for i in range(n):
            count[np.int64((u[i] >> sh) & mask) + 1] += 1
        if n == 0 or count[np.int64((u[0] >> sh) & mask) + 1] == n:
            continue  # every key has this digit
        for d in range(nd):
            count[d + 1] += count[d]
        for i in range(n):
            d = np.int64((u[i] >> sh) & mask)
            p = count[d]
            u2[p] = u[i]
            idx2[p] = idx[i]
            count[d] = p + 1
        u, u2 = u2, u
        idx, idx2 = idx2, idx
    return idx

@_jit
def compact(labels, bound):  # pragma: no cover
    r"""``torch.unique(labels, return_inverse=True)`` for labels in
    ``[0, bound)``: ``(inverse [n], count)`` through a presence array
    (:math:`O(n + \text{bound})`, no sort)."""
    slot = np.zeros(bound + 1, np.int64)
    for i in range(labels.shape[0]):
        slot[labels[i] + 1] = 1
    for x in range(bound):  # slot[x + 1] = number of present labels <= x
        slot[x + 1] += slot[x]
    out = np.empty(labels.shape[0], np.int64)
    for i in range(labels.shape[0]):
        out[i] = slot[labels[i]]
    return out, slot[bound]

@_jit
def half_mask(seed, pair, n, out):  # pragma: no cover
    """``out[v] = half_bit(seed, pair, v)`` (see :func:`half_bits`)."""
    s = (seed & 0xFFFFFFFF) * 0x27D4EB2F + pair * 0x165667B1
    for v in range(n):
        x = (v + s) & 0xFFFFFFFF
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
        x ^= x >> 16
        out[v] = (x & 1) == 1

@_jit
def _ranks_before(gain, tiebreak, i, j):  # pragma: no cover
    """Whether mover ``i`` ranks before mover ``j``: larger gain, then smaller tiebreak."""
    return gain[i] > gain[j] or (gain[i] == gain[j] and tiebreak[i] < tiebreak[j])

@_jit
def _sift_down(h, i, m, gain, tiebreak):  # pragma: no cover
    """Restore the heap ``h[:m]`` (root = the best-ranked mover) below slot ``i``."""
    x = h[i]
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and _ranks_before(gain, tiebreak, h[c + 1], h[c]):
            c += 1
        if not _ranks_before(gain, tiebreak, h[c], x):
            break
        h[i] = h[c]
        i = c
    h[i] = x

@_jit
def _accept_heap(h, amount, rq, scale, acc, gain, tiebreak):  # pragma: no cover
    r"""Accept the movers of one bucket (``h``) in rank order while their
    running total stays ``<= rq`` budget units. Amounts are ``>= 0``, so
    the first refusal refuses all the rest: a heap pops only the accepted
    movers (:math:`O(m + a \log m)`, most of a crowded bucket is refused),
    instead of sorting the whole bucket."""
    m = h.shape[0]
    for i in range(m // 2 - 1, -1, -1):
        _sift_down(h, i, m, gain, tiebreak)
    run = 0
    while m > 0:
        run += np.int64(np.ceil(amount[h[0]] * scale))
        if run > rq:
            break
        m -= 1
        h[0] = h[m]
        _sift_down(h, 0, m, gain, tiebreak)
    for u in range(m):
        acc[h[u]] = False

@_jit
def _accept_by_budget(group, amount, room, gain, tiebreak, acc, scale, gcount):  # pragma: no cover
    """As :func:`~pyg_dynscale.partition.pgc.label_propagation._accept_by_budget` (same ranks, same
    integer budget units): ``acc[i] &= accepted`` for the ``k`` movers.
    Running totals are per group and exact, so the groups need no order
    among themselves: the movers are bucketed by group (a counting sort
    over the groups present; ``gcount`` is ``[L]`` scratch, all zero and
    left so) and each bucket is ranked only as far as it is accepted
    (:func:`_accept_heap`)."""
    k = group.shape[0]
    groups = np.empty(k, np.int64)
    ng = 0
    for i in range(k):
        g = group[i]
        if gcount[g] == 0:
            groups[ng] = g
            ng += 1
        gcount[g] += 1
    start = np.empty(ng + 1, np.int64)
    start[0] = 0
    for t in range(ng):  # gcount[g] becomes the bucket's fill cursor
        g = groups[t]
        start[t + 1] = start[t] + gcount[g]
        gcount[g] = start[t]
    idx = np.empty(k, np.int64)
    for i in range(k):
        g = group[i]
        idx[gcount[g]] = i
        gcount[g] += 1
    for t in range(ng):
        g = groups[t]
        gcount[g] = 0
        r = room[g]
        rq = np.int64(min(max(np.floor((r + 1e-9 * max(abs(r), 1.0)) * scale), -BUDGET_LIMIT), BUDGET_LIMIT))
        _accept_heap(idx[start[t]:start[t + 1]], amount, rq, scale, acc, gain, tiebreak)

@_jit
def _enforce_budget(group, m_w, size, bound, upper, incoming, room, gain, node_pri, m_node, acc,
                    scale, gcount):  # pragma: no cover
    """Step 4 of :mod:`~pyg_dynscale.partition.pgc.label_propagation` for one side: the movers
    (``m_w`` into labels ``group``) of every label they would take past
    ``bound`` -- above it when ``upper`` (cap), below it otherwise
    (floor) -- are accepted by budget (:func:`_accept_by_budget`; only
    those movers are ranked, the others are all accepted); ``incoming``
    and ``gcount`` (all zero, left so) and ``room`` are ``[L]`` scratch."""
    k = group.shape[0]
    for i in range(k):
        incoming[group[i]] += m_w[i]
    sub = np.empty(k, np.int64)
    nv = 0
    for i in range(k):
        g = group[i]
        if (size[g] + incoming[g] > bound) if upper else (size[g] - incoming[g] < bound):
            sub[nv] = i
            nv += 1
    for i in range(k):
        incoming[group[i]] = 0.0
    if nv:
        sub = sub[:nv]
        for i in sub:
            room[group[i]] = bound - size[group[i]] if upper else size[group[i]] - bound
        ok = np.ones(nv, np.bool_)
        _accept_by_budget(group[sub], m_w[sub], room, gain[sub], node_pri[m_node[sub]], ok, scale, gcount)
        for t in range(nv):
            if not ok[t]:
                acc[sub[t]] = False

@_jit
def _label_weight_rows(ptr, dst, weight, labels, conn, r0, r1):  # pragma: no cover
    """Rows ``r0:r1`` of the dense table of :func:`lp_rounds`: every
    node's summed entry weight per label (float64, entry order)."""
    for v in range(r0, r1):
        for e in range(ptr[v], ptr[v + 1]):
            conn[v, labels[dst[e]]] += np.float64(weight[e])

@numba.njit(cache=True, nogil=True, parallel=True)
def label_weights_parallel(ptr, dst, weight, labels, conn, nb):  # pragma: no cover
    """:func:`_label_weight_rows` over ``nb`` blocks of rows in parallel:
    each row is summed by one thread in entry order, so the table does not
    depend on the thread count."""
    bounds = csr.row_blocks(ptr, nb)
    for t in numba.prange(nb):
        _label_weight_rows(ptr, dst, weight, labels, conn, bounds[t], bounds[t + 1])

@_jit
def lp_rounds(ptr, dst, weight, labels, nw, node_pri, dirty, num_labels, cap, has_cap, floor, has_floor,
              max_rounds, tol, gain_tol, total_w, min_rounds, tie_moves, seed, moved_hist,
              gain_hist, blocks, scale, dense):  # pragma: no cover
    r"""All rounds of :func:`~pyg_dynscale.partition.pgc.label_propagation.label_propagation` in one
    compiled call (steps 1-5 of its module doc, same stopping rules):
    ``labels`` (priority space) and ``dirty`` are updated in place; the
    moves and summed gains of every round go to ``moved_hist`` /
    ``gain_hist``. ``blocks > 1`` evaluates the active nodes of a round in
    that many parallel blocks (:func:`candidates_parallel`; same result).

    ``dense`` (few labels, integral weights summing below :math:`2^{53}`:
    the caller checks) keeps the ``[n, L]`` table of every node's weight
    per label, built in one pass (rows in parallel on big graphs:
    :func:`label_weights_parallel`) and updated along the rows of the
    nodes that move; a round then costs :math:`O(L)` per active node
    (:func:`dense_candidates`) instead of a pass over its row -- the
    rank-level refinement evaluates the same boundary nodes round after
    round. Every table entry is an integer below :math:`2^{53}`, so the
    scores equal the row sums exactly.
    Returns ``(rounds, converged)``."""
    n = ptr.shape[0] - 1
    L = num_labels
    nb = max(1, blocks)
    conn = np.zeros((n if dense else 0, L if dense else 0), np.float64)
    if dense and nb > 1 and ptr[n] > PARALLEL_MIN_ENTRIES:  # a parallel region costs ~10 us: big graphs only
        label_weights_parallel(ptr, dst, weight, labels, conn, nb)
    elif dense:
        _label_weight_rows(ptr, dst, weight, labels, conn, 0, n)
    old = np.empty(n, np.int64)
    half = np.zeros(n, np.bool_)
    act = np.empty(n, np.int64)
    score = np.empty((nb, L), np.float64)
    size = np.empty(L, np.float64)
    incoming = np.zeros(L, np.float64)
    room = np.empty(L, np.float64)
    gcount = np.zeros(L, np.int64)
    out_node = np.empty(n, np.int64)
    out_to = np.empty(n, np.int64)
    out_gain = np.empty(n, np.float64)
    for r in range(max_rounds):
        any_dirty = False
        for v in range(n):
            if dirty[v]:
                any_dirty = True
                break
        if not any_dirty:
            return r, True
        if r % 2 == 0:
            half_mask(seed, r // 2, n, half)
        else:
            for v in range(n):
                half[v] = not half[v]
        A = 0
        for v in range(n):  # branch-free: about half the dirty nodes are in the half
            act[A] = v
            A += dirty[v] & half[v]
        moved = 0
        gained = 0.0
        if A:
            size[:] = 0.0
            for v in range(n):
                size[labels[v]] += nw[v]
            if dense:
                k = dense_candidates(conn, labels, act[:A], nw, size, cap, tie_moves, out_node, out_to, out_gain)
            elif nb > 1 and ptr[n] > PARALLEL_MIN_ENTRIES and A > 4 * nb:
                k = candidates_parallel(ptr, dst, weight, labels, act[:A], nw, size, cap, tie_moves, score, out_node,
                                        out_to, out_gain)
            else:
                k = round_candidates(ptr, dst, weight, labels, act[:A], nw, size, cap, tie_moves, score[0],
                                     out_node, out_to, out_gain)
            acc = np.ones(k, np.bool_)
            m_node = out_node[:k]
            m_to = out_to[:k]
            gain = out_gain[:k]
            m_w = np.empty(k, np.float64)
            for i in range(k):
                m_w[i] = nw[m_node[i]]
            if has_cap and k:  # arrivals may not lift a label above the cap
                _enforce_budget(m_to, m_w, size, cap, True, incoming, room, gain, node_pri, m_node, acc, scale,
                                gcount)
            if has_floor and k:  # departures may not drop a label below the floor
                m_from = np.empty(k, np.int64)
                for i in range(k):
                    m_from[i] = labels[m_node[i]]
                _enforce_budget(m_from, m_w, size, floor, False, incoming, room, gain, node_pri, m_node, acc,
                                scale, gcount)
            for i in range(A):
                dirty[act[i]] = False
            for i in range(k):
                v = m_node[i]
                if acc[i]:
                    old[i] = labels[v]
                    labels[v] = m_to[i]
                    moved += 1
                    gained += gain[i]
                else:
                    dirty[v] = True
            for i in range(k):
                if acc[i]:
                    v = m_node[i]
                    for e in range(ptr[v], ptr[v + 1]):
                        u = dst[e]
                        dirty[u] = True
                        if dense:
                            conn[u, old[i]] -= np.float64(weight[e])
                            conn[u, m_to[i]] += np.float64(weight[e])
        moved_hist[r] = moved
        gain_hist[r] = gained
        if r % 2 == 1 and r + 1 >= min_rounds and (moved_hist[r] + moved_hist[r - 1] <= tol * n or (
                gain_tol > 0 and gain_hist[r] + gain_hist[r - 1] <= gain_tol * total_w)):
            return r + 1, True
    return max_rounds, False

@_jit
def _lp_run(ptr, dst, weight, label_pri, key, init, boundary_only, nw, node_pri, num_labels, cap, has_cap, floor,
            has_floor, max_rounds, tol, gain_tol, total_w, min_rounds, tie_moves, seed, moved_hist, gain_hist,
            blocks, scale, dense):  # pragma: no cover
    """:func:`lp_run` flattened for the compiler: :func:`priority_space`,
    :func:`initial_dirty`, :func:`lp_rounds` and :func:`from_priority_space`
    in one dispatch (on small graphs a call's set-up costs as much as its
    rounds). Returns ``(labels [n], rounds, converged)``."""
    lp, labels = priority_space(label_pri, key, init)
    dirty = initial_dirty(ptr, dst, labels, boundary_only)
    r, converged = lp_rounds(ptr, dst, weight, labels, nw, node_pri, dirty, num_labels, cap, has_cap, floor,
                             has_floor, max_rounds, tol, gain_tol, total_w, min_rounds, tie_moves, seed,
                             moved_hist, gain_hist, blocks, scale, dense)
    return from_priority_space(lp, labels), r, converged

@_jit
def priority_space(label_pri, key, init):  # pragma: no cover
    r"""Steps of :func:`~pyg_dynscale.partition.pgc.label_propagation.label_propagation` before the
    rounds, in one call: with a ``key`` (``[L]`` float64, or empty) the
    seeded random priorities ``label_pri`` are re-ranked by (key, random)
    -- a stable sort of the labels in random order by their key (the
    radix :func:`stable_argsort`; NaN keys: a stable merge sort, NaN
    last, as torch) -- and the labels of the nodes (``init``, or empty
    for the unique labels of Eq. 1) are mapped to priority space.
    Returns ``(label_pri [L], labels [n])``."""
    L = label_pri.shape[0]
    if key.shape[0]:
        by_rand = np.empty(L, np.int64)  # labels in random-priority order
        for lab in range(L):
            by_rand[label_pri[lab]] = lab
        k = np.empty(L, np.float64)
        nan = False
        for i in range(L):
            k[i] = key[by_rand[i]]
            nan = nan or np.isnan(k[i])
        idx = np.argsort(k, kind="mergesort") if nan else stable_argsort(k)
        label_pri = np.empty(L, np.int64)
        for i in range(L):
            label_pri[by_rand[idx[i]]] = i
    if init.shape[0]:
        labels = np.empty(init.shape[0], np.int64)
        for v in range(init.shape[0]):
            labels[v] = label_pri[init[v]]
    else:
        labels = label_pri.copy()
    return label_pri, labels

@_jit
def from_priority_space(label_pri, labels):  # pragma: no cover
    """Map internal (priority) labels back: ``out[v] = l`` where
    ``label_pri[l] == labels[v]``."""
    inv = np.empty(label_pri.shape[0], np.int64)
    for lab in range(label_pri.shape[0]):
        inv[label_pri[lab]] = lab
    out = np.empty(labels.shape[0], np.int64)
    for v in range(labels.shape[0]):
        out[v] = inv[labels[v]]
    return out

@_jit
def initial_dirty(ptr, dst, labels, boundary_only):  # pragma: no cover
    """``[n]`` nodes evaluated first: those with a neighbour, or (``boundary_only``)
    with a neighbour of another label."""
    if boundary_only:
        return boundary_mask(ptr, dst, labels)
    n = ptr.shape[0] - 1
    out = np.empty(n, np.bool_)
    for v in range(n):
        out[v] = ptr[v + 1] > ptr[v]
    return out

@_jit
def is_integral(w):  # pragma: no cover
    """Whether every weight is a whole number."""
    for i in range(w.shape[0]):
        if np.floor(w[i]) != w[i]:
            return False
    return True

@_jit
def boundary_mask(ptr, dst, labels):  # pragma: no cover
    """``[n]`` whether a node has a neighbour of another label."""
    n = ptr.shape[0] - 1
    out = np.zeros(n, np.bool_)
    for v in range(n):
        lv = labels[v]
        for e in range(ptr[v], ptr[v + 1]):
            if labels[dst[e]] != lv:
                out[v] = True
                break
    return out
