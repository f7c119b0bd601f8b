r"""Compiled loops of the balanced PSS / PTS schemes (:mod:`.schemes`).

Both are sequential by nature -- a bisection whose every step is a greedy
walk over snapshot ranges, and a longest-processing-time loop that places one
sequence at a time on the least loaded rank -- and cost milliseconds of
Python on datasets with a few thousand sequences, which PGC's multi-start
pays for every graph. The Python versions in :mod:`.schemes` are the
reference (torch backend); these compute the same numbers with the same
float arithmetic and tie-breaks (``tests/partition/schemes/test_snapshot_sequence.py``).
"""
from __future__ import annotations

from .jit import numba
import numpy as np

from .csr import weighted_degree
from .lp import stable_argsort

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _greedy_ranges(pre, R, B, out):  # pragma: no cover
    """The greedy of :func:`.schemes._linear_partition` for bottleneck ``B``:
    fills ``out`` with the range bounds and returns their count, or -1 when
    ``R`` ranges of at most ``B`` do not cover the snapshots."""
    T = pre.shape[0] - 1
    out[0] = 0
    nb = 1
    start = 0
    for _ in range(R):
        if start >= T:
            break
        end = np.searchsorted(pre, pre[start] + B * (1 + 1e-12), side="right") - 1
        end = max(end, start + 1)  # a single snapshot always forms a range
        if pre[end] - pre[start] > B * (1 + 1e-12):
            return -1
        out[nb] = end
        nb += 1
        start = end
    return nb if start >= T else -1


@_jit
def linear_bounds(pre, R, lo, hi):  # pragma: no cover
    """Bisection of :func:`.schemes._linear_partition` on the bottleneck in
    ``[lo, hi]`` over prefix sums ``pre [T+1]``: the bounds of the best
    feasible greedy split (at most ``R`` ranges)."""
    T = pre.shape[0] - 1
    total = pre[T]
    buf = np.empty(R + 1, np.int64)
    nb = _greedy_ranges(pre, R, hi, buf)
    if nb < 0:
        best = np.array([0, T], np.int64)
    else:
        best = buf[:nb].copy()
    for _ in range(60):
        if hi - lo <= 1e-9 * max(total, 1.0):
            break
        mid = 0.5 * (lo + hi)
        nb = _greedy_ranges(pre, R, mid, buf)
        if nb < 0:
            lo = mid
        else:
            hi = mid
            best = buf[:nb].copy()
    return best


@_jit
def lpt_greedy(cost, R):  # pragma: no cover
    """Place items of ``cost`` (in the given order) one by one on the least
    loaded of ``R`` bins (ties: the lower bin, as a heap of ``(load, bin)``).
    Returns ``(bin [k], loads [R])``."""
    loads = np.zeros(R, np.float64)
    out = np.empty(cost.shape[0], np.int64)
    for j in range(cost.shape[0]):
        r = 0
        for q in range(1, R):
            if loads[q] < loads[r]:
                r = q
        out[j] = r
        loads[r] = loads[r] + cost[j]
    return out, loads


@_jit
def sequence_costs(order, seq_ptr, cost):  # pragma: no cover
    """``[S]`` summed cost of every temporal sequence, each summed in
    sequence order (the order of torch's ``index_add_``)."""
    S = seq_ptr.shape[0] - 1
    out = np.zeros(S, np.float64)
    for s in range(S):
        acc = 0.0
        for i in range(seq_ptr[s], seq_ptr[s + 1]):
            acc += cost[order[i]]
        out[s] = acc
    return out


@_jit
def sequence_owner(order, seq_ptr, seq_rank):  # pragma: no cover
    """``[N]`` owner of every vertex-time node: the rank of its sequence."""
    owner = np.empty(order.shape[0], np.int64)
    for s in range(seq_ptr.shape[0] - 1):
        r = seq_rank[s]
        for i in range(seq_ptr[s], seq_ptr[s + 1]):
            owner[order[i]] = r
    return owner


@_jit
def split_ranks(cost, P):  # pragma: no cover
    """``[N]`` rank of every node for the split PSS start of PGC's
    multi-start (:func:`~pyg_dynscale.partition.pgc.starts._split_snapshot_owner`, same arithmetic: a
    sequential running sum, then ``floor(P (c - w / 2) / W)`` clipped to
    ``[0, P - 1]``; equal node counts when the total is not positive)."""
    n = cost.shape[0]
    total = 0.0
    for i in range(n):
        total += cost[i]
    out = np.empty(n, np.int64)
    if not total > 0:  # no costs to balance: equal node counts
        for i in range(n):
            out[i] = (i * P) // n
        return out
    scale = P / total
    run = 0.0
    for i in range(n):
        run += cost[i]
        r = np.floor((run - 0.5 * cost[i]) * scale)
        out[i] = 0 if r < 0 else (P - 1 if r > P - 1 else np.int64(r))
    return out


@_jit
def pss_balanced(node_ptr, cost, R):  # pragma: no cover
    """The balanced PSS of :func:`.schemes.pss_snapshot_ranks` in one call:
    per-snapshot costs (the row sums of :func:`.csr.weighted_degree`
    with the snapshots as rows, in gid order), the bisection over the
    non-empty snapshots (:func:`linear_bounds`), the extra splits of
    :func:`.schemes._linear_partition` when fewer than ``R`` ranges came out
    (the heaviest multi-snapshot range, ties: the last, split at the first
    prefix sum reaching its midpoint), and the ranks' summed costs in
    snapshot order. Returns ``(snap_rank [T], nonempty, bounds [R+1], loads
    [R])``; when fewer than ``R`` snapshots are non-empty only ``nonempty``
    is filled (the caller raises)."""
    T = node_ptr.shape[0] - 1
    per = weighted_degree(node_ptr, cost)  # a snapshot's gids are one contiguous row
    count = 0
    for t in range(T):
        count += node_ptr[t + 1] > node_ptr[t]
    nonempty = np.empty(count, np.int64)
    k = 0
    for t in range(T):
        if node_ptr[t + 1] > node_ptr[t]:
            nonempty[k] = t
            k += 1
    empty_i = np.zeros(0, np.int64)
    if R > count:
        return empty_i, nonempty, empty_i, np.zeros(0, np.float64)
    ps = np.empty(count, np.float64)
    for i in range(count):
        ps[i] = per[nonempty[i]]
    pre = np.zeros(count + 1, np.float64)
    run = 0.0
    for i in range(count):  # sequential, as np.cumsum
        run += ps[i]
        pre[i + 1] = run
    lo = ps.max() if count else 0.0
    b = linear_bounds(pre, R, lo, pre[count])
    bounds = np.empty(R + 1, np.int64)
    nb = b.shape[0]
    bounds[:nb] = b
    while nb - 1 < R:  # split the heaviest range with > 1 snapshot at its midpoint
        best = -1.0
        i = -1
        for j in range(nb - 1):
            if bounds[j + 1] - bounds[j] > 1:
                s = pre[bounds[j + 1]] - pre[bounds[j]]
                if i < 0 or s >= best:  # max of (sum, index): ties go to the later range
                    best = s
                    i = j
        a = bounds[i]
        e = bounds[i + 1]
        mid = 0.5 * (pre[a] + pre[e])
        cut = np.searchsorted(pre[a + 1:e], mid) + a + 1
        cut = min(max(cut, a + 1), e - 1)
        for j in range(nb, i + 1, -1):
            bounds[j] = bounds[j - 1]
        bounds[i + 1] = cut
        nb += 1
    snap_rank = np.zeros(T, np.int64)
    loads = np.zeros(R, np.float64)
    for r in range(R):
        for i in range(bounds[r], bounds[r + 1]):
            snap_rank[nonempty[i]] = r
            loads[r] += ps[i]
    return snap_rank, nonempty, bounds, loads


@_jit
def lpt_exact(cost, R):  # pragma: no cover
    """:func:`.schemes._lpt` when every item is placed exactly (at most
    ``LPT_EXACT_ITEMS``) in one call: the order of decreasing cost
    (:func:`.lp.stable_argsort` of ``-cost``, as torch's stable descending
    sort) and the LPT loop (:func:`lpt_greedy`). Returns
    the bin of every item, or an empty array when a cost is NaN (the
    caller's path handles it)."""
    S = cost.shape[0]
    neg = np.empty(S, np.float64)
    for s in range(S):
        if np.isnan(cost[s]):
            return np.zeros(0, np.int64)
        neg[s] = -cost[s]
    idx = stable_argsort(neg)
    sorted_cost = np.empty(S, np.float64)
    for j in range(S):
        sorted_cost[j] = cost[idx[j]]
    bins, _ = lpt_greedy(sorted_cost, R)
    out = np.empty(S, np.int64)
    for j in range(S):
        out[idx[j]] = bins[j]
    return out
