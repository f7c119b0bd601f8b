r"""Compiled, multi-threaded CSR building (numba): the supergraph's CSR, its
segment quotient and the contracted label graphs.

Every builder places entries row by row in a fixed *entry order* and then
sorts each row by neighbour and merges equal neighbours, summing weights in
entry order -- exactly what the torch reference
(:meth:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph.from_edges`: a
stable sort of the key ``(row, column)``) computes, so both backends give
bit-identical graphs whatever the thread count:

* placement is a counting sort split over ``nb`` contiguous blocks of edges;
  every block counts its entries per row, and row :math:`r` holds block 0's
  entries, then block 1's, ... (stable);
* rows come out sorted from a second counting sort (a transpose,
  :func:`transpose_merge`) or are merged through a mark array and sorted
  (:func:`contract_csr`), and are compacted with a prefix sum.

Imported through :mod:`.kernels`; :mod:`.backend` chooses when they run; only usable
when numba is installed.
"""
from __future__ import annotations

from .jit import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)
_pjit = numba.njit(cache=True, nogil=True, parallel=True)



@_jit
def _mapped(node_map, x):  # pragma: no cover
    return node_map[x] if node_map.shape[0] else x


@_jit
def _offsets(length):  # pragma: no cover
    """Row pointer ``[n + 1]`` of rows with ``length [n]`` entries."""
    ptr = np.zeros(length.shape[0] + 1, np.int64)
    for v in range(length.shape[0]):
        ptr[v + 1] = ptr[v] + length[v]
    return ptr


@_jit
def _block_offsets(counts):  # pragma: no cover
    """Turn ``counts [blocks, rows]`` into the exclusive start of every
    (block, row) inside row-major output (row ``r`` holds block 0's entries,
    then block 1's, ...), in place; returns the row pointer ``[rows + 1]``."""
    nbk, n = counts.shape
    ptr = np.zeros(n + 1, np.int64)
    for r in range(n):
        run = ptr[r]
        for t in range(nbk):
            k = counts[t, r]
            counts[t, r] = run
            run += k
        ptr[r + 1] = run
    return ptr


@_jit
def row_blocks(ptr, nb):  # pragma: no cover
    """``[nb + 1]`` row bounds splitting the rows into ``nb`` blocks of about
    equal entry counts."""
    n = ptr.shape[0] - 1
    m = ptr[n]
    bounds = np.empty(nb + 1, np.int64)
    bounds[0] = 0
    for t in range(1, nb):
        bounds[t] = min(n, max(bounds[t - 1], np.searchsorted(ptr, m * t // nb)))
    bounds[nb] = n
    return bounds


@_pjit
def _transpose(ptr, b, w, nb):  # pragma: no cover
    """The transposed entries of ``(ptr, b, w)``: ``(out [n + 1], b2, w2,
    nbk)`` -- entry ``v -> u`` goes to row ``u``; visiting the rows ``v`` in
    increasing order fills every output row in increasing ``v`` (a counting
    sort, no comparisons). ``nbk`` blocks of input rows run in parallel;
    output row ``u`` holds block 0's entries, then block 1's, ... The
    entries keep the input's (possibly narrow) types."""
    n = ptr.shape[0] - 1
    m = ptr[n]
    nbk = max(1, min(nb, m // 4096 + 1))
    bounds = row_blocks(ptr, nbk)
    counts = np.zeros((nbk, n), np.int64)
    for t in numba.prange(nbk):
        for e in range(ptr[bounds[t]], ptr[bounds[t + 1]]):
            counts[t, b[e]] += 1
    out = _block_offsets(counts)
    b2 = np.empty(m, b.dtype)
    w2 = np.empty(m, w.dtype)
    for t in numba.prange(nbk):
        for v in range(bounds[t], bounds[t + 1]):
            for e in range(ptr[v], ptr[v + 1]):
                u = b[e]
                p = counts[t, u]
                b2[p] = v
                w2[p] = w[e]
                counts[t, u] = p + 1
    return out, b2, w2, nbk


@_pjit
def transpose_merge(ptr, b, w, nb):  # pragma: no cover
    """The transpose of ``(ptr, b, w)`` with rows sorted and equal entries
    merged (:func:`_transpose`, then one count and one write pass): equal
    entries are summed in float64 in the order of the input rows. Returns
    ``(ptr, b int64, w float64)``."""
    n = ptr.shape[0] - 1
    out, b2, w2, nbk = _transpose(ptr, b, w, nb)  # the input's (narrow) types: fewer fresh pages to touch
    # equal neighbours are adjacent now: count each row's distinct ones, then
    # write them merged (float64 sums in order) straight into the output
    # (branch-free: "new neighbour?" is unpredictable on merged-heavy rows)
    length = np.zeros(n, np.int64)
    obounds = row_blocks(out, nbk)
    for t in numba.prange(nbk):
        for u in range(obounds[t], obounds[t + 1]):
            lo = out[u]
            k = 0
            for e in range(lo, out[u + 1]):
                k += (e == lo) | (b2[e] != b2[max(e - 1, lo)])
            length[u] = k
    optr = _offsets(length)
    bo = np.empty(optr[n], np.int64)
    wo = np.zeros(optr[n], np.float64)  # every merged entry is a sum starting at 0
    for t in numba.prange(nbk):
        for u in range(obounds[t], obounds[t + 1]):
            lo = out[u]
            k = optr[u] - 1
            for e in range(lo, out[u + 1]):
                k += (e == lo) | (b2[e] != b2[max(e - 1, lo)])
                bo[k] = b2[e]
                wo[k] += np.float64(w2[e])
    return optr, bo, wo


#: :func:`edges_to_csr` merges equal entries before the transpose when a
#: node map is given (segment quotients: many supergraph edges can land on
#: the same segment pair), the graph has at most this many nodes (one
#: ``[n]`` mark array per thread) and a sample of the rows (every 64th)
#: keeps at most ``PREMERGE_MAX_KEPT`` of its entries
PREMERGE_MAX_NODES = 1 << 21
PREMERGE_MAX_KEPT = 0.7


@_jit
def _distinct_fraction(ptr, b, step):  # pragma: no cover
    """Distinct values / entries over every ``step``-th row (1.0 when empty)."""
    n = ptr.shape[0] - 1
    mark = np.full(n, -1, np.int64)
    total = 0
    distinct = 0
    for v in range(0, n, step):
        for e in range(ptr[v], ptr[v + 1]):
            x = b[e]
            distinct += mark[x] != v  # branch-free (see _merge_entry)
            mark[x] = v
        total += ptr[v + 1] - ptr[v]
    return distinct / total if total else 1.0


@_jit
def _merge_entry(slot, b, w, lo, k, x, wx):  # pragma: no cover
    """Add the entry ``(x, wx)`` to the row being merged into ``b/w[lo:k]``:
    summed into ``x``'s position ``slot[x]`` if that lies in the row (``>=
    lo``), else appended at ``k``. Returns the new end ``k``.

    Branch-free -- both cases write ``w[p] += wx`` at ``p`` = the slot or
    ``k``, so ``w`` must start zeroed -- because "seen before?" is a coin flip
    on a typical row and a mispredicted branch per entry cost 1.5x the whole
    merge. Callers walk their rows in increasing position with one ``slot``
    array (``-1`` at first) per thread, so a slot from an earlier row is
    below ``lo``."""
    s = slot[x]
    new = s < lo
    p = k if new else s
    w[p] += wx
    b[p] = x
    slot[x] = p
    return k + new


@_pjit
def _premerge_rows(ptr, b, w, nb):  # pragma: no cover
    """Merge equal entries inside every row of ``(ptr, b, w)`` without
    sorting: each value keeps its first position and its weights are summed
    in entry order (in float64); returns the new ``(ptr, b, w float64)``
    (rows unsorted, ``b`` of the input's type). A first pass counts each
    row's distinct values, a second writes them through a slot array per
    block of rows (:func:`_merge_entry`)."""
    n = ptr.shape[0] - 1
    nbk = max(1, min(nb, ptr[n] // 4096 + 1))
    bounds = row_blocks(ptr, nbk)
    length = np.zeros(n, np.int64)
    for t in numba.prange(nbk):
        seen = np.full(n, -1, np.int64)
        for v in range(bounds[t], bounds[t + 1]):
            k = 0
            for e in range(ptr[v], ptr[v + 1]):
                k += seen[b[e]] != v  # branch-free (see _merge_entry)
                seen[b[e]] = v
            length[v] = k
    optr = _offsets(length)
    b2 = np.empty(optr[n], b.dtype)
    w2 = np.zeros(optr[n], np.float64)
    for t in numba.prange(nbk):
        mark = np.full(n, -1, np.int64)
        for v in range(bounds[t], bounds[t + 1]):
            k = optr[v]
            for e in range(ptr[v], ptr[v + 1]):
                k = _merge_entry(mark, b2, w2, optr[v], k, b[e], np.float64(w[e]))
    return optr, b2, w2


_ID32 = np.zeros(0, np.int32)
_ID64 = np.zeros(0, np.int64)
_W32 = np.zeros(0, np.float32)
_W64 = np.zeros(0, np.float64)


def placement_types(n: int, constant: float, *weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empty arrays whose dtypes :func:`edges_to_csr` places entries with:
    int32 node ids below 2^31 nodes, float32 weights when ``constant`` and
    every array of ``weights`` survive a float32 round trip (byte weights
    do), else int64 / float64."""
    # compare in float64: numpy would compare a float32 scalar with a Python
    # float in float32 (0.1 would pass)
    narrow = float(np.float32(constant)) == float(constant) and all(
        exact_in_float32(np.ascontiguousarray(w, np.float64)) for w in weights if w.shape[0])
    return (_ID32 if n < 2 ** 31 else _ID64), (_W32 if narrow else _W64)


@_jit
def exact_in_float32(w):  # pragma: no cover
    """Whether every weight survives a round trip through float32."""
    for i in range(w.shape[0]):
        if np.float64(np.float32(w[i])) != w[i]:
            return False
    return True


@_pjit
def edges_to_csr(n, node_map, s1, d1, w1, c1, both1, s2, d2, w2, c2, nb, itype, wtype):  # pragma: no cover
    r"""Undirected CSR on ``n`` nodes from two edge lists, as
    :meth:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph.from_edges` on
    their concatenation:

    * part 1: ``(map(s1[i]), map(d1[i]))`` with weight ``w1[i]`` (or the
      constant ``c1`` when ``w1`` is empty);
    * part 2: ``(map(s2[i]), map(d2[i]))`` with weight ``w2[i]`` (or the
      constant ``c2`` when ``w2`` is empty);

    ``map`` is ``node_map`` (identity when empty); mapped self loops are
    dropped. Entries: forward ``(src, dst)`` of both parts and backward
    ``(dst, src)`` of part 2 and -- only if ``both1`` -- of part 1 (with
    ``both1=False`` part 1 should hold both directions of every edge, and the
    result is the transpose of the placed entries: check it is symmetric).
    Returns ``(ptr [n+1], dst, weight float64)`` with rows sorted and equal
    pairs merged, weights summed in the reference's order (forward entries in
    edge order, then backward ones).

    Two counting sorts, no comparison sort: the entries are placed in the row
    of their *column*, forward entries first, and :func:`transpose_merge`
    turns that into sorted rows: the copies of ``(r, c)`` come from row
    ``c``, forward ones (edges ``r -> c``) before backward ones. The placed
    and transposed entries use the types of the empty arrays ``itype`` /
    ``wtype`` (:func:`placement_types`: int32 ids, float32 weights when they
    are exact), halving the fresh memory these passes touch; sums are taken
    in float64 either way.
    """
    E1 = s1.shape[0]
    E2 = s2.shape[0]
    E = E1 + E2
    nbk = max(1, min(nb, E // 4096 + 1))
    # counts[direction, block, row]: row = the entry's column; forward entries first
    counts = np.zeros((2, nbk, n), np.int64)
    for t in numba.prange(nbk):
        for i in range(E * t // nbk, E * (t + 1) // nbk):
            if i < E1:
                a, c = _mapped(node_map, s1[i]), _mapped(node_map, d1[i])
            else:
                a, c = _mapped(node_map, s2[i - E1]), _mapped(node_map, d2[i - E1])
            if a != c:
                counts[0, t, c] += 1  # forward entry (a, c), filed under its column c
                if i >= E1 or both1:
                    counts[1, t, a] += 1  # backward entry (c, a), filed under its column a
    ptr = np.zeros(n + 1, np.int64)
    for v in range(n):  # exclusive offsets per (direction, block) inside each row
        run = ptr[v]
        for dd in range(2):
            for t in range(nbk):
                k = counts[dd, t, v]
                counts[dd, t, v] = run
                run += k
        ptr[v + 1] = run
    b = np.empty(ptr[n], itype.dtype)
    w = np.empty(ptr[n], wtype.dtype)
    for t in numba.prange(nbk):
        for i in range(E * t // nbk, E * (t + 1) // nbk):
            if i < E1:
                a, c = _mapped(node_map, s1[i]), _mapped(node_map, d1[i])
                x = w1[i] if w1.shape[0] else c1
            else:
                a, c = _mapped(node_map, s2[i - E1]), _mapped(node_map, d2[i - E1])
                x = w2[i - E1] if w2.shape[0] else c2
            if a != c:
                p = counts[0, t, c]
                b[p] = a
                w[p] = x
                counts[0, t, c] = p + 1
                if i >= E1 or both1:
                    p = counts[1, t, a]
                    b[p] = c
                    w[p] = x
                    counts[1, t, a] = p + 1
    if node_map.shape[0] and n <= PREMERGE_MAX_NODES and _distinct_fraction(ptr, b, 64) <= PREMERGE_MAX_KEPT:
        # a row (= column) holds the copies of an entry in the reference's
        # summation order (forward ones in edge order, then backward ones),
        # so merging them here sums the same way and shrinks the transpose
        p2, b2, w2 = _premerge_rows(ptr, b, w, nb)  # float64 sums: new names, new types
        return transpose_merge(p2, b2, w2, nb)
    return transpose_merge(ptr, b, w, nb)


#: Ciura's gap sequence: :func:`_sort_pairs` shell-sorts rows up to
#: ``SHELL_MAX`` entries in place (no allocation, ~k^1.3 compares) and
#: argsorts longer ones
_GAPS = (701, 301, 132, 57, 23, 10, 4, 1)
SHELL_MAX = 2048


@_jit
def _sort_pairs(b, w, lo, hi):  # pragma: no cover
    """Sort ``b[lo:hi]`` (distinct values) carrying ``w``."""
    k = hi - lo
    if k <= SHELL_MAX:
        for gap in _GAPS:
            if gap >= k:
                continue
            for t in range(lo + gap, hi):
                kb, kw = b[t], w[t]
                j = t
                while j - gap >= lo and b[j - gap] > kb:
                    b[j] = b[j - gap]
                    w[j] = w[j - gap]
                    j -= gap
                b[j] = kb
                w[j] = kw
        return
    o = np.argsort(b[lo:hi])
    tb = b[lo:hi].copy()
    tw = w[lo:hi].copy()
    for t in range(k):
        b[lo + t] = tb[o[t]]
        w[lo + t] = tw[o[t]]


@_pjit
def contract_csr(ptr, dst, weight, labels, num_labels, nb, symmetric):  # pragma: no cover
    """CSR of the label-level graph (:meth:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph.contract`):
    entries ``(label[v], label[u])`` of every entry ``v -> u`` with distinct
    labels, in entry order, rows sorted, equal pairs merged.

    Row by row of the *output*: the members of label ``c`` (a counting sort
    of the nodes, ascending) are walked in entry order and their neighbour
    labels merged through a mark array -- so each pair's weights are summed
    in entry order, as the reference's stable sort does. A first pass counts
    every row's distinct labels, so the output is written in place (no
    intermediate array of all the entries). Both passes are branch-free
    (:func:`_merge_entry`: a row's labels are unpredictable, so a branch
    mispredicts). The merged rows
    are then sorted: when the input is ``symmetric`` (both directions of every edge, same
    weight: the library's builders) and the weights are whole numbers (exact
    sums, :func:`_exact_sums`), by transposing the -- then symmetric --
    result (a counting sort, :func:`_transpose`: row ``u`` receives
    ``(u, v)`` from row ``v`` with the same exact sum); else row by row
    (:func:`_sort_pairs`, about 3x the cost of the transpose). ``nb`` blocks of output rows of about equal
    work run in parallel."""
    n = ptr.shape[0] - 1
    C = num_labels
    exact = symmetric and _exact_sums(weight)
    mptr = np.zeros(C + 1, np.int64)
    for v in range(n):
        mptr[labels[v] + 1] += 1
    work = np.zeros(C + 1, np.int64)  # entries to visit per output row, cumulative
    for c in range(C):
        mptr[c + 1] += mptr[c]
    members = np.empty(n, np.int64)
    cursor = mptr[:C].copy()
    for v in range(n):
        c = labels[v]
        members[cursor[c]] = v
        cursor[c] += 1
        work[c + 1] += ptr[v + 1] - ptr[v]
    for c in range(C):
        work[c + 1] += work[c]
    nbk = max(1, min(nb, work[C] // 4096 + 1))
    bounds = row_blocks(work, nbk)
    length = np.empty(C, np.int64)
    for t in numba.prange(nbk):  # pass 1: distinct neighbour labels per row
        mark = np.full(C, -1, np.int64)
        for c in range(bounds[t], bounds[t + 1]):
            k = 0
            mark[c] = c  # the row's own label counts as seen: not an entry
            for i in range(mptr[c], mptr[c + 1]):
                v = members[i]
                for e in range(ptr[v], ptr[v + 1]):
                    lu = labels[dst[e]]
                    k += mark[lu] != c  # branch-free (see _merge_entry)
                    mark[lu] = c
            length[c] = k
    out = _offsets(length)
    m = out[C]
    # one scratch entry per block past the end: entries inside a label (lu
    # == c) are merged there instead of being tested for, keeping pass 2
    # branch-free; the returned arrays are views without them
    b = np.empty(m + nbk, np.int64)
    w = np.zeros(m + nbk, np.float64)
    for t in numba.prange(nbk):  # pass 2: merge in entry order
        slot = np.full(C, -1, np.int64)
        for c in range(bounds[t], bounds[t + 1]):
            base = out[c]
            k = base
            slot[c] = m + t
            for i in range(mptr[c], mptr[c + 1]):
                v = members[i]
                for e in range(ptr[v], ptr[v + 1]):
                    k = _merge_entry(slot, b, w, base, k, labels[dst[e]], weight[e])
            slot[c] = -1
    b = b[:m]
    w = w[:m]
    if exact:  # the transpose of a symmetric CSR is itself with its rows sorted (ptr unchanged)
        _, b2, w2, _ = _transpose(out, b, w, nb)
        return out, b2, w2
    for t in numba.prange(nbk):  # general weights or input: sort each row
        for c in range(bounds[t], bounds[t + 1]):
            _sort_pairs(b, w, out[c], out[c + 1])
    return out, b, w


@_jit
def _exact_sums(w):  # pragma: no cover
    """Whether all weights are whole numbers summing below 2^53: every
    partial sum is then exact, in any order."""
    total = 0.0
    for i in range(w.shape[0]):
        x = np.float64(w[i])
        if x != np.floor(x):
            return False
        total += abs(x)
    return total < 2.0 ** 53


@_pjit
def is_symmetric(ptr, dst, weight, nb):  # pragma: no cover
    """Whether every entry ``(v, u, w)`` has its mirror ``(u, v, w)`` (rows
    sorted by neighbour, no duplicates). Visiting the entries in row order,
    the mirrors met in row ``u`` come in increasing ``v``, so one cursor per
    row checks them in :math:`O(E)`; ``nb`` blocks of rows ``u`` in parallel."""
    n = ptr.shape[0] - 1
    nbk = max(1, min(nb, n // 1024 + 1))
    bad = np.zeros(nbk, np.int64)
    for t in numba.prange(nbk):
        u0, u1 = n * t // nbk, n * (t + 1) // nbk
        cursor = ptr[u0:u1].copy()
        for v in range(n):
            for e in range(ptr[v], ptr[v + 1]):
                u = dst[e]
                if u0 <= u < u1:
                    j = cursor[u - u0]
                    if j >= ptr[u + 1] or dst[j] != v or weight[j] != weight[e]:
                        bad[t] += 1
                    cursor[u - u0] = j + 1
            if bad[t]:
                break
        for u in range(u0, u1):  # every entry of the block's rows was matched
            if cursor[u - u0] != ptr[u + 1]:
                bad[t] += 1
    return bad.sum() == 0


@_pjit
def csr_cut(ptr, dst, weight, labels):  # pragma: no cover
    """Summed weight of the undirected edges whose endpoints have different
    labels (each edge is stored twice: half the entry sum)."""
    n = ptr.shape[0] - 1
    total = 0.0
    for v in numba.prange(n):
        lv = labels[v]
        s = 0.0
        for e in range(ptr[v], ptr[v + 1]):
            # a select, not a branch (cut or not is a coin flip per entry):
            # the load comes first, else the compiler keeps the branch that guards it
            x = np.float64(weight[e])
            s += x if labels[dst[e]] != lv else 0.0
        total += s
    return total / 2.0


@_pjit
def weighted_degree(ptr, weight):  # pragma: no cover
    """``[n]`` summed entry weight of every row (float64)."""
    n = ptr.shape[0] - 1
    out = np.empty(n, np.float64)
    for v in numba.prange(n):
        s = 0.0
        for e in range(ptr[v], ptr[v + 1]):
            s += weight[e]
        out[v] = s
    return out


@_pjit
def _count_cut(labels, src, dst):  # pragma: no cover
    """Edges ``(src, dst)`` whose endpoints have different labels (branch-free, as :func:`csr_cut`)."""
    count = 0
    for i in numba.prange(src.shape[0]):
        count += labels[src[i]] != labels[dst[i]]
    return count


@_pjit
def edge_list_cut(labels, s1, d1, c1, s2, d2, w2, c2):  # pragma: no cover
    """Cut weight of two edge lists under ``labels``: part 1 with the constant
    weight ``c1``, part 2 with weights ``w2`` -- or the constant ``c2`` when
    ``w2`` is empty (the supergraph's spatial and temporal edges)."""
    cut1 = _count_cut(labels, s1, d1)
    if w2.shape[0] == 0:
        return c1 * cut1 + c2 * _count_cut(labels, s2, d2)
    cut2 = 0.0
    for i in numba.prange(s2.shape[0]):
        x = w2[i]  # loaded unconditionally (see csr_cut)
        cut2 += x if labels[s2[i]] != labels[d2[i]] else 0.0
    return c1 * cut1 + cut2


@_pjit
def unit_cut(unit, rank, src, dst, w, c):  # pragma: no cover
    """Cut weight of the edges ``(src, dst)`` when node ``v`` sits on rank
    ``rank[unit[v]]`` (``unit``: a node's snapshot or vertex), with weights
    ``w`` or, when ``w`` is empty, the constant ``c``."""
    if w.shape[0]:
        total = 0.0
        for i in numba.prange(src.shape[0]):  # branch-free, as csr_cut
            x = w[i]
            total += x if rank[unit[src[i]]] != rank[unit[dst[i]]] else 0.0
        return total
    count = 0
    for i in numba.prange(src.shape[0]):
        count += rank[unit[src[i]]] != rank[unit[dst[i]]]
    return c * count


@_jit
def maybe_symmetric(n, src, dst):  # pragma: no cover
    """A fast necessary test for an edge list being symmetric (every ``(u,
    v)`` matched by a ``(v, u)``): per node, out- and in-degree agree and so
    do the wrapped sums of a hash of the out- and in-neighbours. ``False``
    proves asymmetry; ``True`` is confirmed by :func:`is_symmetric` on the
    built graph."""
    bal = np.zeros(n, np.int64)
    acc = np.zeros(n, np.uint64)
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        bal[u] += 1
        bal[v] -= 1
        acc[u] += (np.uint64(v) + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
        acc[v] -= (np.uint64(u) + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(0xBF58476D1CE4E5B9)
    for v in range(n):
        if bal[v] != 0 or acc[v] != 0:
            return False
    return True


@_jit
def segment_ids(order, ptr, node_w, segment_cap):  # pragma: no cover
    r""":func:`~pyg_dynscale.partition.pgc.coarsen.segment_sequences` in one pass: walking the
    sequences (``order`` / ``ptr``), a new segment starts at every sequence
    start and wherever :math:`\lfloor e / \text{cap} \rfloor` changes, with
    :math:`e` the node's exclusive prefix cost inside its sequence, computed
    exactly as the torch steps do (a global running sum minus the node's
    cost, minus that value at the sequence start). Returns ``(seg [N], S)``."""
    N = order.shape[0]
    seg = np.empty(N, np.int64)
    finite = segment_cap != np.inf
    run = 0.0
    count = -1
    for s in range(ptr.shape[0] - 1):
        base = 0.0
        prev = -1
        for i in range(ptr[s], ptr[s + 1]):
            w = node_w[order[i]]
            run += w
            excl = run - w
            if i == ptr[s]:
                base = excl
                count += 1
                prev = np.int64(np.floor((excl - base) / segment_cap)) if finite else 0
            elif finite:
                piece = np.int64(np.floor((excl - base) / segment_cap))
                if piece != prev:
                    count += 1
                prev = piece
            seg[order[i]] = count
    return seg, count + 1
