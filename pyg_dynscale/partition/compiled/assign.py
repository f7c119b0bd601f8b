r"""Compiled chunk assignment (DGC Algorithm 1) and chunk refinement (numba).

The torch / numpy twins are :func:`~pyg_dynscale.partition.pgc.assign.assign_chunks`
and :func:`~pyg_dynscale.partition.pgc.assign.refine_chunks`; :mod:`.backend`
chooses which one runs, and both give the same owners bit for bit.
Imported only when numba imports (:mod:`.kernels`).
"""
from __future__ import annotations

import numpy as np

from .jit import numba

_jit = numba.njit(cache=True, nogil=True)


@_jit
def chunk_affinity(ptr, nbr, w, owner, P):  # pragma: no cover
    """``[C, P]`` bytes between each chunk and each rank's chunks
    (:meth:`.assign.ChunkGraph.affinity`, entry order)."""
    C = ptr.shape[0] - 1
    A = np.zeros((C, P), np.float64)
    for c in range(C):
        for e in range(ptr[c], ptr[c + 1]):
            A[c, owner[nbr[e]]] += w[e]
    return A

@_jit
def _move_chunk(ptr, nbr, w, A, loads, owner, cost, c, m):  # pragma: no cover
    o = owner[c]
    for e in range(ptr[c], ptr[c + 1]):
        A[nbr[e], o] -= w[e]
    for e in range(ptr[c], ptr[c + 1]):
        A[nbr[e], m] += w[e]
    loads[o] -= cost[c]
    loads[m] += cost[c]
    owner[c] = m

@_jit
def _can_gain(A, owner, c, P):  # pragma: no cover
    """Whether chunk ``c`` gains more than 1e-12 by moving to some other rank."""
    ac = A[c, owner[c]]
    for m in range(P):
        if A[c, m] - ac > 1e-12:
            return True
    return False

@_jit
def _reflag(ptr, nbr, A, owner, c, P, movable):  # pragma: no cover
    """Refresh :func:`_can_gain` of chunk ``c`` and its neighbours after ``c`` moved."""
    movable[c] = _can_gain(A, owner, c, P)
    for e in range(ptr[c], ptr[c + 1]):
        movable[nbr[e]] = _can_gain(A, owner, nbr[e], P)

@_jit
def _top_k_all(gain, owner, P, k, top, ntop):  # pragma: no cover
    """For every rank pair ``(r, m)``: ``top[r, m, :ntop[r, m]]`` = the
    chunks on rank ``r`` with the ``k`` largest ``gain[:, m]``, best first,
    ties in chunk order -- ``np.argsort(-g, kind="stable")[:k]`` for all
    pairs in one pass over the chunks (insertion into short sorted lists)
    -- cut before the first chunk that cannot be part of a positive swap:
    ``gain[c, m] + best[m, r] <= 1e-12``, with ``best[m, r]`` the largest
    gain towards ``r`` of a chunk on ``m`` (``h >= 0``, so no partner can
    lift it). The lists are sorted, so only a useless tail is dropped and
    the swaps found are the same; most (chunk, rank) pairs are dropped
    once no single move gains, which spares their insertions."""
    best = np.full((P, P), -np.inf)
    for c in range(owner.shape[0]):
        r = owner[c]
        for m in range(P):
            if gain[c, m] > best[r, m]:
                best[r, m] = gain[c, m]
    ntop[:, :] = 0
    for c in range(owner.shape[0]):
        r = owner[c]
        for m in range(P):
            if m == r:
                continue
            g = gain[c, m]
            if g + best[m, r] <= 1e-12:
                continue
            cnt = ntop[r, m]
            if cnt == k and gain[top[r, m, k - 1], m] >= g:
                continue  # not better than the k-th (ties keep the earlier chunk)
            j = cnt if cnt < k else k - 1
            while j > 0 and gain[top[r, m, j - 1], m] < g:
                top[r, m, j] = top[r, m, j - 1]
                j -= 1
            top[r, m, j] = c
            if cnt < k:
                ntop[r, m] = cnt + 1

@_jit
def _swap_fits(loads, ra, rb, d, lo, hi):  # pragma: no cover
    """Whether ranks ``ra`` / ``rb`` stay in ``[lo, hi]`` when ``ra``
    sheds ``d`` of load to ``rb`` (a swap of chunks costing ``d`` apart)."""
    return lo <= loads[ra] - d <= hi and lo <= loads[rb] + d <= hi

@_jit
def _best_pair_swap(ra, rb, gain, top, ntop, cost, loads, lo, hi, ptr, snbr, sw_):  # pragma: no cover
    """The best swap between ranks ``ra < rb`` among their top lists:
    ``(gain, a, b)``, the first candidate (list order) of the largest gain
    above 1e-12 -- the argmax of :func:`.assign._pair_swaps` -- or ``a =
    -1``. Both lists are sorted by gain and ``h >= 0``: a candidate whose
    two gains cannot beat the best so far ends the scan."""
    best = 1e-12
    sa = -1
    sb = -1
    na = ntop[ra, rb]
    nb_ = ntop[rb, ra]
    if na == 0 or nb_ == 0:
        return best, sa, sb
    for i in range(na):
        a = top[ra, rb, i]
        if gain[a, rb] + gain[top[rb, ra, 0], ra] <= best:
            break
        for j in range(nb_):
            b = top[rb, ra, j]
            if gain[a, rb] + gain[b, ra] <= best:
                break
            if not _swap_fits(loads, ra, rb, cost[a] - cost[b], lo, hi):
                continue
            val = gain[a, rb] + gain[b, ra] - 2.0 * _pair_bytes(ptr, snbr, sw_, a, b)
            if val > best:
                best = val
                sa = a
                sb = b
    return best, sa, sb

@_jit
def assign_chunks(ptr, nbr, w, cost, order, num_parts, gbar, limit, eps):  # pragma: no cover
    """Algorithm 1 / Eq. 3 (:func:`.assign.assign_chunks`, same arithmetic
    and tie-breaks): chunks in ``order``; returns ``[C]`` ranks."""
    C = cost.shape[0]
    P = num_parts
    loads = np.zeros(P, np.float64)
    A = np.zeros((C, P), np.float64)
    owner = np.full(C, -1, np.int64)
    for i in range(C):
        a = order[i]
        m = -1
        best = -np.inf
        for r in range(P):  # argmax of the score over the ranks the chunk fits on (first max)
            if loads[r] + cost[a] <= limit:
                sc = (gbar - loads[r]) * (A[a, r] + eps)
                if m < 0 or sc > best:
                    best = sc
                    m = r
        if m < 0:  # fits nowhere: least loaded rank (first min)
            m = 0
            for r in range(1, P):
                if loads[r] < loads[m]:
                    m = r
        owner[a] = m
        loads[m] += cost[a]
        for e in range(ptr[a], ptr[a + 1]):
            A[nbr[e], m] += w[e]
    return owner

@_jit
def _rows_by_neighbour(ptr, nbr, w):  # pragma: no cover
    """Copies of ``nbr`` / ``w`` with every row stably sorted by neighbour
    (rows of a contracted CSR already are: then a plain copy)."""
    snbr = nbr.copy()
    sw = w.copy()
    for c in range(ptr.shape[0] - 1):
        lo, hi = ptr[c], ptr[c + 1]
        ordered = True
        for e in range(lo + 1, hi):
            if nbr[e] < nbr[e - 1]:
                ordered = False
                break
        if not ordered:
            o = np.argsort(nbr[lo:hi], kind="mergesort")
            for t in range(hi - lo):
                snbr[lo + t] = nbr[lo + o[t]]
                sw[lo + t] = w[lo + o[t]]
    return snbr, sw

@_jit
def _pair_bytes(ptr, snbr, sw, a, b):  # pragma: no cover
    """:math:`h(a, b)`: the weight of the first entry ``b`` in row ``a``
    (rows sorted by neighbour; binary search), 0 if not adjacent -- as the
    ``searchsorted`` of :func:`.assign.refine_chunks`."""
    lo, hi = ptr[a], ptr[a + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        if snbr[mid] < b:
            lo = mid + 1
        else:
            hi = mid
    return sw[lo] if lo < ptr[a + 1] and snbr[lo] == b else 0.0

@_jit
def refine_chunks(ptr, nbr, w, cost, owner, A, loads, num_parts, hi_lim, lo_lim, max_moves, swaps):  # pragma: no cover
    """The balance and cut phases of :func:`.assign.refine_chunks` (same
    arithmetic and tie-breaks); ``owner`` / ``A`` (``[C, P]`` chunk-rank
    bytes) / ``loads`` are updated in place."""
    C = owner.shape[0]
    P = num_parts
    for _ in range(max_moves):  # balance phase
        src = int(np.argmax(loads))
        dst = int(np.argmin(loads))
        if loads[src] <= hi_lim and loads[dst] >= lo_lim and loads[dst] > 0:
            break
        gap = (loads[src] - loads[dst]) / 2.0
        best_g = -np.inf
        c_best = -1
        for c in range(C):
            if owner[c] == src and cost[c] <= gap and cost[c] > 0:
                g = A[c, dst] - A[c, src]
                if c_best < 0 or g > best_g or (g == best_g and cost[c] > cost[c_best]):
                    best_g = g
                    c_best = c
        if c_best < 0:
            break
        _move_chunk(ptr, nbr, w, A, loads, owner, cost, c_best, dst)
    gain = np.empty((C, P), np.float64)
    k_sw = max(1, swaps)
    top = np.empty((P, P, k_sw), np.int64)
    ntop = np.zeros((P, P), np.int64)
    npairs = P * (P - 1) // 2
    cval = np.empty(npairs, np.float64)
    cra = np.empty(npairs, np.int64)
    crb = np.empty(npairs, np.int64)
    ca = np.empty(npairs, np.int64)
    cb = np.empty(npairs, np.int64)
    done = np.zeros(npairs, np.bool_)
    used = np.zeros(P, np.bool_)
    # h(a, b) by binary search in a's sorted row: only the few pairs that
    # survive the gain bounds pay for it (a dense row per candidate paid deg(a))
    snbr, sw_ = _rows_by_neighbour(ptr, nbr, w)
    # only chunks with some positive single-move gain can win the move
    # scan (the winner must gain > 1e-12): flag them, and re-flag a moved
    # chunk and its neighbours -- the only rows of A a move changes
    movable = np.zeros(C, np.bool_)
    for c in range(C):
        movable[c] = _can_gain(A, owner, c, P)
    for _ in range(max_moves):  # cut phase: best single move, else the best swaps of disjoint rank pairs
        hi = max(hi_lim, loads.max())
        lo = min(lo_lim, loads.min())
        best = -np.inf
        flat = -1
        for c in range(C):
            if not movable[c]:
                continue
            oc = owner[c]
            if loads[oc] - cost[c] < lo:
                continue
            ac = A[c, oc]
            for m in range(P):
                if m != oc and loads[m] + cost[c] <= hi:
                    g = A[c, m] - ac
                    if g > best:
                        best = g
                        flat = c * P + m
        if flat >= 0 and best > 1e-12:
            _move_chunk(ptr, nbr, w, A, loads, owner, cost, flat // P, flat % P)
            _reflag(ptr, nbr, A, owner, flat // P, P, movable)
            continue
        for c in range(C):  # every gain, for the swap search
            ac = A[c, owner[c]]
            for m in range(P):
                gain[c, m] = A[c, m] - ac
        if swaps <= 0 or P < 2:
            break
        _top_k_all(gain, owner, P, swaps, top, ntop)
        ns = 0  # the best swap of every rank pair, in pair order
        for ra in range(P):
            for rb in range(ra + 1, P):
                v, a, b = _best_pair_swap(ra, rb, gain, top, ntop, cost, loads, lo, hi, ptr, snbr, sw_)
                if a >= 0:
                    cval[ns] = v
                    cra[ns] = ra
                    crb[ns] = rb
                    ca[ns] = a
                    cb[ns] = b
                    ns += 1
        if ns == 0:
            break
        # apply them largest gain first (ties: pair order), each rank at
        # most once: a swap changes only the gains towards its own two
        # ranks, so swaps of disjoint rank pairs keep their exact gains;
        # each is re-checked against the band of the current loads
        used[:] = False
        done[:ns] = False
        for _ in range(ns):
            q = -1
            for t in range(ns):
                if not done[t] and (q < 0 or cval[t] > cval[q]):
                    q = t
            done[q] = True
            ra = cra[q]
            rb = crb[q]
            if used[ra] or used[rb]:
                continue
            hi = max(hi_lim, loads.max())
            lo = min(lo_lim, loads.min())
            a = ca[q]
            b = cb[q]
            if not _swap_fits(loads, ra, rb, cost[a] - cost[b], lo, hi):
                continue
            _move_chunk(ptr, nbr, w, A, loads, owner, cost, a, rb)
            _move_chunk(ptr, nbr, w, A, loads, owner, cost, b, ra)
            _reflag(ptr, nbr, A, owner, a, P, movable)
            _reflag(ptr, nbr, A, owner, b, P, movable)
            used[ra] = True
            used[rb] = True
