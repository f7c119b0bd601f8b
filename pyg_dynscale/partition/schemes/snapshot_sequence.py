r"""Snapshot, sequence and hybrid partition schemes (DGC §2.2, SC'21).

* **PSS** (:func:`partition_pss`): each rank gets a contiguous range of
  snapshots. Spatial edges are never cut; temporal edges between ranges are.
* **PTS** (:func:`partition_pts`): each rank gets whole temporal sequences
  (all appearances of a vertex). Temporal edges are never cut; spatial ones are.
* **PSS-TS** (:func:`partition_pss_ts`, the SC'21 paper): structure encoder by
  snapshot (PSS owner), time encoder by sequence (PTS owner); neither kind of
  edge is cut, but each block redistributes the structure output between them.
* **PGC** (chunks, DGC §4): :mod:`pyg_dynscale.partition.pgc.pipeline`.

:func:`pyg_dynscale.partition.partition` (:mod:`.dispatch`) picks one by name.

Balancing uses a cost per vertex-time node :math:`c_v`; by default
:math:`c_v = 1 + \deg_\text{in}(v)` so that a rank's load is its vertex-time
nodes plus the spatial edges it aggregates (:func:`default_node_cost`).
"""
from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError
from ..compiled import backend, kernels
from ..costs.node import resolve_node_cost
from ..pgc.label_propagation import as_numpy
from .vertex_order import cuthill_mckee_order, union_graph
from ..partition import Partition, check_num_parts

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal


#: sequences placed one by one by exact LPT before the vectorized fill
LPT_EXACT_ITEMS = 20000


def _linear_partition(cost: Tensor, R: int) -> Tensor:
    r"""Split ``cost [T]`` into ``R`` contiguous non-empty ranges minimizing the
    largest range sum. Returns ``bounds [R+1]``.

    Bisection on the bottleneck :math:`B`; for a given :math:`B` the greedy
    "extend each range as far as it fits" (``searchsorted`` on prefix sums, a
    loop over ranks) decides feasibility. Ranges left unused are made by
    splitting multi-snapshot ranges, which never raises the maximum.
    """
    T = cost.numel()
    # numpy: the bisection makes ~60 x R scalar searches, each a few times cheaper than a torch op
    pre = np.concatenate([np.zeros(1), np.cumsum(cost.to(torch.float64).numpy())])
    lo, hi = float(cost.max()) if T else 0.0, float(pre[-1])
    bounds = _bottleneck_bounds(pre, int(R), lo, hi)
    while len(bounds) - 1 < R:  # split the heaviest range with >1 snapshot at its best point
        sums = [(float(pre[bounds[i + 1]] - pre[bounds[i]]), i) for i in range(len(bounds) - 1)
                if bounds[i + 1] - bounds[i] > 1]
        _, i = max(sums)
        a, b = bounds[i], bounds[i + 1]
        mid_val = 0.5 * float(pre[a] + pre[b])
        cut = int(np.searchsorted(pre[a + 1:b], mid_val)) + a + 1
        cut = min(max(cut, a + 1), b - 1)
        bounds.insert(i + 1, cut)
    return torch.tensor(bounds, dtype=torch.long)


# no compiled twin: under numba the balanced PSS runs whole in :func:`.compiled.schemes.pss_balanced`
# (whose bisection is :func:`.compiled.schemes.linear_bounds`), so this loop runs only on the torch backend
def _bottleneck_bounds(pre: np.ndarray, R: int, lo: float, hi: float) -> list[int]:
    """:func:`_linear_partition`'s bisection on the bottleneck in ``[lo, hi]``
    over the prefix sums ``pre [T+1]``: the bounds of at most ``R`` ranges."""
    T = pre.shape[0] - 1
    total = float(pre[-1])

    def greedy(B: float) -> Optional[list[int]]:
        bounds, start = [0], 0
        for _ in range(R):
            if start >= T:
                break
            end = int(np.searchsorted(pre, pre[start] + B * (1 + 1e-12), side="right")) - 1
            end = max(end, start + 1)  # a single snapshot always forms a range
            if float(pre[end] - pre[start]) > B * (1 + 1e-12):
                return None
            bounds.append(end)
            start = end
        return bounds if start >= T else None

    best = greedy(hi) or [0, T]
    for _ in range(60):
        if hi - lo <= 1e-9 * max(total, 1.0):
            break
        mid = 0.5 * (lo + hi)
        g = greedy(mid)
        if g is None:
            lo = mid
        else:
            hi, best = mid, g
    return best


def _lpt_compiled(cost: Tensor, R: int) -> Tensor:
    """:func:`_lpt` of up to ``LPT_EXACT_ITEMS`` items: order and loop in one compiled call."""
    S = cost.numel()
    if S > LPT_EXACT_ITEMS:
        return NotImplemented
    bins = kernels.schemes.lpt_exact(cost.to(torch.float64).numpy(), int(R))
    return torch.from_numpy(bins) if bins.shape[0] == S else NotImplemented


def _descending_order_compiled(cost: Tensor) -> Tensor:
    """:func:`_descending_order` by a stable ascending radix sort of ``-cost``
    (the same order as torch's stable descending sort); not with NaN."""
    cost_np = cost.to(torch.float64).numpy()
    if np.isnan(cost_np).any():
        return NotImplemented
    return torch.from_numpy(kernels.lp.stable_argsort(-cost_np))


@backend.twin(_descending_order_compiled)
def _descending_order(cost: Tensor) -> Tensor:
    """Items by decreasing cost, ties in index order."""
    return torch.argsort(cost, descending=True, stable=True)


def _lpt_greedy_compiled(big: Tensor, R: int) -> tuple[Tensor, list]:
    """:func:`_lpt_greedy`: the same loop compiled (identical bins)."""
    out_np, loads_np = kernels.schemes.lpt_greedy(big.to(torch.float64).numpy(), int(R))
    return torch.from_numpy(out_np), loads_np.tolist()


@backend.twin(_lpt_greedy_compiled)
def _lpt_greedy(big: Tensor, R: int) -> tuple[Tensor, list]:
    """``(bin [k], loads [R])``: the items ``big`` (decreasing cost) placed one
    by one on the least loaded of ``R`` bins (a heap)."""
    heap = [(0.0, r) for r in range(R)]
    loads = [0.0] * R
    out_l = [0] * big.numel()
    for j, c in enumerate(big.tolist()):  # bounded loop: at most LPT_EXACT_ITEMS items
        load, r = heapq.heappop(heap)
        out_l[j] = r
        loads[r] = load + c
        heapq.heappush(heap, (loads[r], r))
    return torch.tensor(out_l, dtype=torch.long), loads


@backend.twin(_lpt_compiled)
def _lpt(cost: Tensor, R: int) -> Tensor:
    r"""Longest-processing-time-first assignment of items to ``R`` bins.

    The largest ``LPT_EXACT_ITEMS`` items are placed one by one on the least
    loaded bin (a heap); the remaining small items are laid end to end along
    the bins' remaining room to the mean load (vectorized: an item goes to the
    bin whose room interval holds its midpoint), so each bin misses the mean by
    at most about one small item.
    """
    S = cost.numel()
    order = _descending_order(cost)
    assign = torch.empty(S, dtype=torch.long)
    k = min(S, LPT_EXACT_ITEMS)
    out, loads = _lpt_greedy(cost[order[:k]], int(R))
    assign[order[:k]] = out
    if k < S:
        small = order[k:]
        c = cost[small].to(torch.float64)
        target = (sum(loads) + float(c.sum())) / R
        room = torch.clamp(target - torch.tensor(loads, dtype=torch.float64), min=0)
        if float(room.sum()) <= 0:
            room = torch.ones(R, dtype=torch.float64)
        room = room * (float(c.sum()) / float(room.sum()))
        edges = torch.cumsum(room, 0)
        mid = torch.cumsum(c, 0) - 0.5 * c
        assign[small] = torch.searchsorted(edges, mid, right=True).clamp(max=R - 1)
    return assign


def _signal_info(signal: "DynamicGraphSignal") -> tuple[int, int]:
    if not hasattr(signal, "node_ptr") or not hasattr(signal, "supergraph"):
        raise PartitionError("signal", f"expected a DynamicGraphSignal, got {type(signal).__name__}.",
                             "Convert with DynamicGraphSignal.from_pygt(...) or a pyg_dynscale loader.")
    return signal.num_vertex_time_nodes, signal.num_snapshots


def _pss_owner(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any) -> tuple[Tensor, dict]:
    """PSS owner ``[N]`` and meta (snapshot ranges)."""
    snap_rank, nonempty, bounds, _ = pss_snapshot_ranks(signal, R, balanced, workload)
    nodes = (signal.node_ptr[1:] - signal.node_ptr[:-1]).cpu()
    owner = torch.repeat_interleave(snap_rank, nodes, output_size=signal.num_vertex_time_nodes)
    ranges = [[int(nonempty[bounds[r]]), int(nonempty[bounds[r + 1] - 1]) + 1] for r in range(R)]
    return owner, {"balanced": bool(balanced), "snapshot_ranges": ranges}


def _too_few_snapshots(nonempty: int, R: int) -> None:
    raise PartitionError("num_parts", f"PSS splits by snapshot but only {nonempty} snapshots are non-empty "
                         f"for {R} parts.", "Use fewer parts, or the 'pts'/'pgc' scheme.")


def _pss_snapshot_ranks_compiled(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any,
                                 cost: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """:func:`pss_snapshot_ranks` (balanced): the same steps in one compiled call."""
    if not balanced:
        return NotImplemented
    N, T = _signal_info(signal)
    check_num_parts(R, N)
    cost = resolve_node_cost(signal, workload) if cost is None else cost
    out = kernels.schemes.pss_balanced(as_numpy(signal.node_ptr.cpu(), torch.long), as_numpy(cost, torch.float64), int(R))
    if R > out[1].shape[0]:
        _too_few_snapshots(out[1].shape[0], R)
    return tuple(torch.from_numpy(x) for x in out)  # type: ignore[return-value]


@backend.twin(_pss_snapshot_ranks_compiled)
def pss_snapshot_ranks(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any,
                       cost: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
    """PSS as ``(snap_rank [T], nonempty, bounds, loads)``: the rank of every
    snapshot (node ``v`` goes to ``snap_rank[time[v]]``), the non-empty
    snapshots, the range bounds over them and, when ``balanced``, every
    rank's summed cost ``[R]`` (``None`` otherwise). ``cost`` (``[N]``
    float64, already validated) replaces ``workload`` for callers that
    resolved it before (PGC's multi-start)."""
    N, T = _signal_info(signal)
    check_num_parts(R, N)
    nodes = (signal.node_ptr[1:] - signal.node_ptr[:-1]).cpu()
    nonempty = (nodes > 0).nonzero().flatten()
    if R > nonempty.numel():
        _too_few_snapshots(nonempty.numel(), R)
    if balanced:
        cost = resolve_node_cost(signal, workload) if cost is None else cost
        snap = torch.repeat_interleave(torch.arange(T), nodes, output_size=N)
        per_snap = torch.zeros(T, dtype=torch.float64).index_add_(0, snap, cost)[nonempty]
        bounds = _linear_partition(per_snap, R)
    else:  # DGC's baseline: equal numbers of (non-empty) snapshots
        bounds = (torch.arange(R + 1) * nonempty.numel()) // R
    # rank of each non-empty snapshot, then empty snapshots join their successor's... rank (they own nothing)
    rank_of = torch.repeat_interleave(torch.arange(R), bounds[1:] - bounds[:-1])
    snap_rank = torch.zeros(T, dtype=torch.long)
    snap_rank[nonempty] = rank_of
    loads = torch.zeros(R, dtype=torch.float64).index_add_(0, rank_of, per_snap) if balanced else None
    return snap_rank, nonempty, bounds, loads


def _sequence_owner_compiled(sg: Any, seq_rank: Tensor, N: int) -> Tensor:
    """:func:`_sequence_owner` in one compiled pass."""
    return torch.from_numpy(kernels.schemes.sequence_owner(
        as_numpy(sg.sequence_order.cpu(), torch.long), as_numpy(sg.sequence_ptr.cpu(), torch.long), as_numpy(seq_rank, torch.long)))


@backend.twin(_sequence_owner_compiled)
def _sequence_owner(sg: Any, seq_rank: Tensor, N: int) -> Tensor:
    """``[N]``: every node of supergraph ``sg`` on the rank of its sequence."""
    owner = torch.empty(N, dtype=torch.long)
    owner[sg.sequence_order.cpu()] = torch.repeat_interleave(seq_rank, sg.sequence_lengths.cpu(), output_size=N)
    return owner


def _sequence_costs_compiled(sg: Any, cost: Tensor, N: int) -> Tensor:
    """:func:`_sequence_costs`: one compiled pass, the same sums."""
    return torch.from_numpy(kernels.schemes.sequence_costs(
        as_numpy(sg.sequence_order.cpu(), torch.long), as_numpy(sg.sequence_ptr.cpu(), torch.long), as_numpy(cost, torch.float64)))


@backend.twin(_sequence_costs_compiled)
def _sequence_costs(sg: Any, cost: Tensor, N: int) -> Tensor:
    """``[S]`` summed node cost ``cost [N]`` of every sequence of ``sg``."""
    S = sg.sequence_ptr.numel() - 1
    seq_id = torch.repeat_interleave(torch.arange(S), sg.sequence_lengths.cpu(), output_size=N)
    return torch.zeros(S, dtype=torch.float64).index_add_(0, seq_id, cost[sg.sequence_order.cpu()])


def _pts_owner(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any,
               locality: bool = False) -> tuple[Tensor, dict]:
    """PTS owner ``[N]``: every node on the rank of its sequence."""
    seq_rank = pts_sequence_ranks(signal, R, balanced, workload, locality=locality)
    sg = signal.supergraph()
    owner = _sequence_owner(sg, seq_rank, signal.num_vertex_time_nodes)
    return owner, {"balanced": bool(balanced), "locality": bool(locality)}


def pts_sequence_ranks(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any,
                       cost: Optional[Tensor] = None, locality: bool = False) -> Tensor:
    """PTS as ``seq_rank [S]``: the rank of every temporal sequence (of
    vertex ``sequence_vertex[s]``); ``cost`` as in :func:`pss_snapshot_ranks`.
    ``locality``: contiguous ranges of a Cuthill-McKee order of the union
    graph (:mod:`.vertex_order`) instead of vertex-id order (unbalanced) or
    LPT (balanced: ranges cut at equal cumulative cost)."""
    N, _ = _signal_info(signal)
    check_num_parts(R, N)
    sg = signal.supergraph()
    S = sg.sequence_ptr.numel() - 1
    if R > S:
        raise PartitionError("num_parts", f"PTS splits by temporal sequence but there are only {S} sequences for {R} parts.",
                             "Use fewer parts, or the 'pss'/'pgc' scheme.")
    if locality:
        return _local_sequence_ranks(signal, R, balanced, workload, cost)
    if not balanced:  # equal numbers of sequences, in vertex-id order
        return (torch.arange(S) * R) // S
    cost = resolve_node_cost(signal, workload) if cost is None else cost
    return _lpt(_sequence_costs(sg, cost, N), R)


def _local_sequence_ranks(signal: "DynamicGraphSignal", R: int, balanced: bool, workload: Any,
                          cost: Optional[Tensor]) -> Tensor:
    """Sequences in Cuthill-McKee order of their vertices, cut into ``R``
    contiguous ranges of equal count (or equal cost when ``balanced``)."""
    sg = signal.supergraph()
    V = sg.num_vertices
    order = cuthill_mckee_order(union_graph(sg.spatial_edge_index.cpu(), sg.vertex.cpu(), V), V)
    position = torch.empty(V, dtype=torch.long)
    position[order] = torch.arange(V)
    seqs = torch.argsort(position[sg.sequence_vertex.cpu()])  # sequences in locality order
    S = seqs.numel()
    seq_rank = torch.empty(S, dtype=torch.long)
    if not balanced:
        seq_rank[seqs] = (torch.arange(S) * R) // S
        return seq_rank
    cost = resolve_node_cost(signal, workload) if cost is None else cost
    seq_id = torch.repeat_interleave(torch.arange(S), sg.sequence_lengths.cpu(), output_size=sg.num_nodes)
    seq_cost = torch.zeros(S, dtype=torch.float64).index_add_(0, seq_id, cost[sg.sequence_order.cpu()].to(torch.float64))
    c = seq_cost[seqs]
    mid = torch.cumsum(c, 0) - c / 2  # each sequence goes to the range holding the middle of its cost
    total = float(c.sum())
    ranks = (mid * R / total).floor().long().clamp_(0, R - 1) if total > 0 else (torch.arange(S) * R) // S
    # every rank gets at least one sequence (R <= S): cummax keeps ranges contiguous
    ranks = torch.maximum(ranks, torch.arange(S) - (S - R)).clamp_(max=R - 1)
    ranks = torch.minimum(ranks, torch.arange(S))
    seq_rank[seqs] = torch.cummax(ranks, 0).values
    return seq_rank


def _finish(scheme: str, signal: "DynamicGraphSignal", R: int, owner: Tensor, t0: float, meta: dict,
            time_owner: Optional[Tensor] = None) -> Partition:
    seconds = time.perf_counter() - t0
    return Partition(scheme, R, owner, time_owner=time_owner, fingerprint=signal.fingerprint(),
                     seconds=seconds, meta=meta)


def _backend(signal: "DynamicGraphSignal") -> Any:
    """The kernels backend for this signal's size (:func:`~pyg_dynscale.partition.compiled.backend.backend_for`)."""
    sg = signal.supergraph()
    return backend.use_backend(backend.backend_for(sg.num_nodes + sg.num_spatial_edges + sg.num_temporal_edges))


def partition_pss(signal: "DynamicGraphSignal", num_parts: int, *, balanced: bool = False,
                  workload: Any = None) -> Partition:
    r"""Partition by snapshot: rank :math:`r` owns snapshots
    :math:`[t_r, t_{r+1})`.

    Args:
        signal: the dynamic graph.
        num_parts: :math:`R`, at most the number of non-empty snapshots.
        balanced: ``False`` -- equal snapshot counts (DGC's PSS baseline);
            ``True`` -- contiguous ranges minimizing the largest range workload.
        workload: ``[N]`` cost per vertex-time node, a workload model
            (``node_costs(signal)``) or anything else
            :func:`~pyg_dynscale.partition.costs.workload.resolve_workload`
            takes; default :func:`default_node_cost`.
    """
    _signal_info(signal)
    t0 = time.perf_counter()
    with _backend(signal):
        owner, meta = _pss_owner(signal, num_parts, balanced, workload)
    return _finish("pss", signal, num_parts, owner, t0, meta)


def partition_pts(signal: "DynamicGraphSignal", num_parts: int, *, balanced: bool = False,
                  workload: Any = None, locality: bool = False) -> Partition:
    r"""Partition by temporal sequence: all appearances of a vertex on one rank.

    Args:
        balanced: ``False`` -- equal numbers of sequences per rank (vertex-id
            order); ``True`` -- LPT on the sequence workload (sum of node costs,
            i.e. appearances plus aggregated edges by default).
        workload: as in :func:`partition_pss`.
        locality: ranks get contiguous ranges of a Cuthill-McKee order of the
            union graph (:mod:`.vertex_order`), so that a rank's vertices are
            neighbours: small halos on the black-box path (docs/blackbox.md)
            whatever the vertex ids; with ``balanced`` the ranges are cut at
            equal cumulative cost.
    """
    _signal_info(signal)
    signal.supergraph()  # build (and cache) outside the timed region
    t0 = time.perf_counter()
    with _backend(signal):
        owner, meta = _pts_owner(signal, num_parts, balanced, workload, locality=bool(locality))
    return _finish("pts", signal, num_parts, owner, t0, meta)


def partition_pss_ts(signal: "DynamicGraphSignal", num_parts: int, *, balanced: bool = False,
                     workload: Any = None) -> Partition:
    r"""The SC'21 hybrid: ``owner`` from :func:`partition_pss` (structure
    encoder), ``time_owner`` from :func:`partition_pts` (time encoder)."""
    _signal_info(signal)
    signal.supergraph()
    t0 = time.perf_counter()
    with _backend(signal):
        owner, m1 = _pss_owner(signal, num_parts, balanced, workload)
        towner, _ = _pts_owner(signal, num_parts, balanced, workload)
    return _finish("pss-ts", signal, num_parts, owner, t0, m1, time_owner=towner)
