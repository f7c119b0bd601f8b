r"""Partitioning by graph chunks, PGC (DGC §4).

Pipeline (all steps vectorized except the greedy loop over chunks):

1. **Weighted supergraph.** Vertex-time nodes; spatial edges weighted by
   ``pattern.spatial_edge_weight()`` and temporal edges by
   ``pattern.temporal_edge_weight()`` -- the bytes per epoch that cutting one
   such edge costs for the model (e.g. T-GCN aggregates spatial neighbours in
   two GCN layers but temporal ones once). Label propagation treats it as
   undirected.
2. **Chunk generation** (§4.1): size-constrained weighted label propagation
   from the unique labels of Eq. 1 (:mod:`.label_propagation`). The cap is in
   workload units of the additive node cost of the workload model
   (``LinearWorkload()`` -> vertex-time nodes + spatial in-edges); default
   ``total / (num_parts * chunks_per_part)``.
3. **Coarsening.** Label propagation stops at a fixed point that still holds
   many small labels; we contract the chunks into a weighted chunk graph and
   run the same label propagation (same cap) on it, level by level, until the
   number of chunks falls by less than 10% (graph coarsening, §4's motivation).
   If more than ``max_chunks`` remain, chunks smaller than ``cap / 4`` are
   bundled in gid order (gids are time-major: neighbours in time and in a
   snapshot) into bundles of at most ``cap / 2 + cap / 4 < cap``; this keeps
   Algorithm 1's Python loop short.
4. **Chunk assignment** (§4.2, Algorithm 1, Eq. 3) with predicted chunk
   workloads (:func:`.assign.assign_chunks`; empty ranks handled by an
   :math:`\varepsilon` affinity, see there), then a chunk-level refinement
   (balance, then cut) within ``(1 +/- slack)`` of the mean load.
5. **Node-level refinement** (optional, ``refine_rounds``): label propagation
   with labels = ranks, node weights = additive node costs, ``cap`` = the
   larger of the current max load and ``(1 + slack) * mean`` and ``floor``
   the smaller of the current min load and ``(1 - slack) * mean``: boundary
   nodes move to the rank they share most bytes with while no rank leaves the
   band. Chunks that end up split across ranks are split (chunk ids are
   re-made from the pair ``(chunk, owner)``), so ``owner`` is always constant
   inside a chunk.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import Tensor

from ..errors import PartitionError
from .assign import ChunkGraph, assign_chunks, divergence, rank_loads, refine_chunks
from .label_propagation import CSRGraph, compact_labels, label_propagation
from .workload import WorkloadModel, resolve_workload

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal
    from .partition import Partition


#: partition_pgc runs single-threaded by default below this many vertex-time
#: nodes -- i.e. always: its tensor operations gain little from threads and
#: stall badly when other processes share the cores (docs/pgc.md, "Limits")
SINGLE_THREAD_BELOW = 1 << 62
TIE_MOVES = True  # label propagation moves on ties towards higher-priority labels (see label_propagation)


def edge_weights(pattern: Any) -> tuple[float, float]:
    r"""``(spatial, temporal)`` bytes that cutting one edge of each kind costs.

    ``pattern`` is a :class:`~pyg_dynscale.partition.pattern.DependencyPattern`
    (anything with ``spatial_edge_weight()`` and ``temporal_edge_weight()``), a
    ``(spatial, temporal)`` pair, or ``None`` (both 1).
    """
    if pattern is None:
        return 1.0, 1.0
    if isinstance(pattern, (tuple, list)) and len(pattern) == 2:
        ws, wt = float(pattern[0]), float(pattern[1])
    elif hasattr(pattern, "spatial_edge_weight") and hasattr(pattern, "temporal_edge_weight"):
        ws, wt = float(pattern.spatial_edge_weight()), float(pattern.temporal_edge_weight())
    else:
        raise PartitionError("pattern", f"must be a DependencyPattern, a (spatial, temporal) pair or None, not {type(pattern).__name__}.",
                             "build one with DependencyPattern.preset(model, in_channels, hidden).")
    for name, v in (("spatial", ws), ("temporal", wt)):
        if not math.isfinite(v) or v < 0:
            raise PartitionError("pattern", f"{name} edge weight is {v}.", "edge weights must be finite and >= 0.")
    return ws, wt


def weighted_supergraph(signal: "DynamicGraphSignal", pattern: Any) -> tuple[Tensor, Tensor, Tensor]:
    r"""Spatial then temporal supergraph edges with their byte weights:
    ``(src [E+M], dst [E+M], weight [E+M] float64)``, each edge once."""
    sg = signal.supergraph()
    ws, wt = edge_weights(pattern)
    E, M = sg.num_spatial_edges, sg.num_temporal_edges
    src = torch.cat([sg.spatial_edge_index[0], sg.temporal_edge_index[0]])
    dst = torch.cat([sg.spatial_edge_index[1], sg.temporal_edge_index[1]])
    w = torch.cat([torch.full((E,), ws, dtype=torch.float64), torch.full((M,), wt, dtype=torch.float64)])
    return src, dst, w


def _bundle_small(chunk: Tensor, C: int, node_w: Tensor, cap: float, max_chunks: int) -> tuple[Tensor, int]:
    """Map ``[C] -> [C']`` merging chunks lighter than cap/4 (in order of their
    smallest gid) into bundles of about cap/2, when there are more than
    ``max_chunks`` chunks; the identity otherwise."""
    if C <= max_chunks:
        return torch.arange(C), C
    n = chunk.numel()
    cw = torch.zeros(C, dtype=torch.float64).index_add_(0, chunk, node_w)
    first = torch.full((C,), n, dtype=torch.long).scatter_reduce(0, chunk, torch.arange(n), reduce="amin")
    small = cw < cap / 4
    ids = small.nonzero().flatten()
    ids = ids[torch.sort(first[ids], stable=True).indices]
    target = max(cap / 2, float(cw[ids].sum()) / max(1, max_chunks - int((~small).sum())))
    target = min(target, cap * 0.75)
    # bundle k holds the small chunks whose exclusive prefix weight lies in [k t, (k+1) t)
    excl = torch.cumsum(cw[ids], 0) - cw[ids]
    bundle = torch.floor(excl / target).to(torch.long)
    newid = torch.arange(C)
    newid[ids] = C + bundle  # bundles get fresh ids, compacted below
    return compact_labels(newid)


@dataclass
class Level:
    r"""One level of the chunk hierarchy.

    Attributes:
        graph (CSRGraph): the level's weighted graph (level 0: the supergraph).
        node_w (Tensor): ``[n]`` node weights (summed node costs).
        up (Tensor): ``[n]`` id of each node on the next level (the last
            level maps to the final chunk ids).
    """

    graph: CSRGraph
    node_w: Tensor
    up: Tensor


def generate_chunks(
    graph: CSRGraph,
    node_w: Tensor,
    cap: float,
    *,
    seed: int = 0,
    max_rounds: int = 30,
    coarse_rounds: int = 15,
    tol: float = 1e-3,
    max_levels: int = 6,
    max_chunks: int = 4096,
    progress: bool = False,
) -> tuple[Tensor, int, list[Level], dict]:
    r"""Multi-level size-constrained label propagation (steps 2-3 of the
    module doc).

    Returns:
        ``(chunk [n], C, levels, info)``: the chunk of every node of ``graph``,
        the chunk count, the hierarchy (for the uncoarsening refinement) and
        per-level statistics.
    """
    t0 = time.perf_counter()
    res = label_propagation(graph, node_weight=node_w, cap=cap, seed=seed, max_rounds=max_rounds, tol=tol,
                            progress=progress, tie_moves=TIE_MOVES)
    up, C = compact_labels(res.labels)
    levels = [Level(graph, node_w, up)]
    chunk = up
    info = {"rounds": res.rounds, "converged": res.converged, "level_chunks": [C], "level_rounds": [res.rounds],
            "level_seconds": [time.perf_counter() - t0]}
    for level in range(1, max_levels + 1):
        t0 = time.perf_counter()
        prev = levels[-1]
        g = prev.graph.contract(prev.up, C)
        cw = torch.zeros(C, dtype=torch.float64).index_add_(0, prev.up, prev.node_w)
        if g.dst.numel() == 0:
            levels.append(Level(g, cw, torch.arange(C)))
            break
        r = label_propagation(g, node_weight=cw, cap=cap, seed=seed + 7919 * level, tie_moves=TIE_MOVES,
                              max_rounds=min(max_rounds, coarse_rounds), tol=tol, progress=progress)
        up, C2 = compact_labels(r.labels)
        levels.append(Level(g, cw, up))
        info["level_chunks"].append(C2)
        info["level_rounds"].append(r.rounds)
        info["level_seconds"].append(time.perf_counter() - t0)
        chunk = up[chunk]
        shrink = (C - C2) / max(C, 1)
        C = C2
        if shrink < 0.1:
            break
    bundle, C = _bundle_small(chunk, C, node_w, cap, max_chunks)
    levels[-1].up = bundle[levels[-1].up]
    info["chunks_after_bundling"] = C
    return bundle[chunk], C, levels, info


def partition_pgc(
    signal: "DynamicGraphSignal",
    num_parts: int,
    pattern: Any = None,
    *,
    seed: int = 0,
    cap: Optional[float] = None,
    chunks_per_part: int = 16,
    max_rounds: int = 30,
    coarse_rounds: int = 15,
    tol: float = 1e-3,
    max_chunks: int = 4096,
    slack: float = 0.03,
    refine_rounds: int = 30,
    workload: Optional[WorkloadModel | str] = None,
    threads: Optional[int] = None,
    progress: bool = False,
) -> "Partition":
    r"""Partition a dynamic graph by graph chunks (DGC §4; pipeline in the
    module docstring).

    Args:
        signal (DynamicGraphSignal): the dynamic graph (:math:`N` vertex-time nodes).
        num_parts (int): number of ranks :math:`P`, ``1 <= P <= N``.
        pattern: the model's dependency pattern (edge byte weights), a
            ``(spatial, temporal)`` weight pair, or ``None`` (both 1).
        seed (int): makes the result deterministic (halves, tie-breaks).
        cap (float, optional): largest chunk, in units of the workload model's
            additive node cost (vertex-time nodes + spatial in-edges for the
            default model). Default ``total / (P * chunks_per_part)``.
        chunks_per_part (int): sets the default cap.
        max_rounds (int), tol (float): label-propagation stopping rule.
        coarse_rounds (int): round limit on the coarse levels.
        max_chunks (int): bound on the chunk count handed to Algorithm 1.
        slack (float): allowed load deviation from the mean during assignment
            and refinement.
        refine_rounds (int): rounds of node-level refinement (0 disables it).
        workload: ``None``/``"linear"``, ``"vertices"``, a saved
            :class:`~pyg_dynscale.partition.workload.MLPWorkload` path, or a
            :class:`~pyg_dynscale.partition.workload.WorkloadModel`.
        threads (int, optional): ``torch.set_num_threads`` while partitioning
            (restored after). Default 1 (``SINGLE_THREAD_BELOW``): the many
            medium-size tensor operations gain little from threads and stall
            badly when other processes share the cores (measured 11 s with 1
            thread vs 59 s with 2 on 1M nodes on a shared 2-core machine).
        progress (bool): print per-round progress.

    Returns:
        :class:`~pyg_dynscale.partition.partition.Partition` with
        ``scheme="pgc"``, ``owner [N]``, ``chunk [N]`` and ``meta`` (rounds,
        num_chunks, cap, loads, divergence, timings of each step).

    Raises:
        PartitionError: ``num_parts`` out of range, a cap below the largest
            node cost, or fewer chunks than ranks.
    """
    from .partition import check_num_parts

    N = signal.num_vertex_time_nodes
    P = check_num_parts(int(num_parts) if isinstance(num_parts, np.integer) else num_parts, N)
    n_threads = threads if threads is not None else (1 if N < SINGLE_THREAD_BELOW else torch.get_num_threads())
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n_threads)))
    try:
        return _partition_pgc(signal, P, pattern, seed=seed, cap=cap, chunks_per_part=chunks_per_part,
                              max_rounds=max_rounds, coarse_rounds=coarse_rounds, tol=tol, max_chunks=max_chunks,
                              slack=slack, refine_rounds=refine_rounds, workload=workload, progress=progress)
    finally:
        torch.set_num_threads(before)


def _partition_pgc(signal: "DynamicGraphSignal", P: int, pattern: Any, *, seed: int, cap: Optional[float],
                   chunks_per_part: int, max_rounds: int, coarse_rounds: int, tol: float, max_chunks: int,
                   slack: float, refine_rounds: int, workload: Any, progress: bool) -> "Partition":
    from .partition import Partition

    t_start = time.perf_counter()
    N = signal.num_vertex_time_nodes
    model = resolve_workload(workload)
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    src, dst, w = weighted_supergraph(signal, pattern)
    graph = CSRGraph.from_edges(N, src, dst, w)
    del src, dst, w
    node_w = model.node_costs(signal).to(torch.float64)
    if bool((node_w < 0).any()) or not bool(torch.isfinite(node_w).all()):
        raise PartitionError("workload", "node costs must be finite and >= 0.", "check the workload model.")
    total = float(node_w.sum())
    biggest = float(node_w.max())
    if cap is None:
        cap_v = max(total / (P * max(1, chunks_per_part)), biggest)
    else:
        cap_v = float(cap)
        if not math.isfinite(cap_v) or cap_v < biggest:
            raise PartitionError(
                "cap", f"is {cap_v:g} but the heaviest vertex-time node alone costs {biggest:g} (an indivisible unit).",
                f"use cap >= {biggest:g}, or leave cap=None for total / (num_parts * chunks_per_part).",
            )
    timings["setup"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    chunk, C, levels, info = generate_chunks(graph, node_w, cap_v, seed=seed, max_rounds=max_rounds, coarse_rounds=coarse_rounds, tol=tol,
                                             max_chunks=max_chunks, progress=progress)
    timings["chunk_generation"] = time.perf_counter() - t0
    if C < P:
        raise PartitionError("cap", f"label propagation produced {C} chunks for {P} ranks (cap {cap_v:g}).",
                             "use a smaller cap or a larger chunks_per_part so that every rank can get a chunk.")

    t0 = time.perf_counter()
    cost = model.chunk_costs(signal, chunk, C).to(torch.float64).numpy()
    top = levels[-1].graph.contract(levels[-1].up, C)
    cg = ChunkGraph(C, top.ptr.numpy(), top.dst.numpy(), top.weight.to(torch.float64).numpy())
    chunk_owner = assign_chunks(cg, cost, P, slack=slack)
    greedy_cut = cg.cut(chunk_owner)
    greedy_div = divergence(rank_loads(chunk_owner, cost, P))
    chunk_owner = refine_chunks(cg, cost, chunk_owner, P, slack=slack)
    timings["assignment"] = time.perf_counter() - t0

    # uncoarsening: project the owner down the hierarchy, refining on each level
    t0 = time.perf_counter()
    own = torch.from_numpy(chunk_owner)
    moved_per_level = []
    mean = total / P
    for depth, lvl in enumerate(reversed(levels)):
        own = own[lvl.up]
        if refine_rounds > 0 and P > 1 and lvl.graph.dst.numel():
            loads = torch.zeros(P, dtype=torch.float64).index_add_(0, own, lvl.node_w)
            r = label_propagation(lvl.graph, node_weight=lvl.node_w, init=own, num_labels=P,
                                  cap=max(float(loads.max()), (1 + slack) * mean),
                                  floor=min(float(loads.min()), (1 - slack) * mean),
                                  seed=seed + 104729 + depth, max_rounds=refine_rounds, tol=0.0,
                                  boundary_only=True, progress=progress)
            moved_per_level.append(int((r.labels != own).sum()))
            own = r.labels
    owner = own
    if any(moved_per_level):
        chunk, C = compact_labels(chunk * P + owner)  # split chunks that straddle ranks
    timings["refinement"] = time.perf_counter() - t0

    cost_final = model.chunk_costs(signal, chunk, C).to(torch.float64)
    chunk_owner_t = torch.zeros(C, dtype=torch.long).scatter_(0, chunk, owner)
    loads = torch.zeros(P, dtype=torch.float64).index_add_(0, chunk_owner_t, cost_final)
    srcs = graph.sources()
    cut = float(graph.weight[owner[srcs] != owner[graph.dst]].double().sum()) / 2.0
    del srcs
    meta = {
        **info,
        "refine_moved": moved_per_level,
        "num_levels": len(levels),
        "num_chunks": C,
        "cap": cap_v,
        "edge_weights": edge_weights(pattern),
        "workload": type(model).__name__,
        "loads": loads.tolist(),
        "divergence": divergence(loads.numpy()),
        "greedy_divergence": greedy_div,
        "greedy_cut": greedy_cut,
        "cut_weight": cut,
        "seed": seed,
        "timings": timings,
    }
    return Partition(
        scheme="pgc",
        num_parts=P,
        owner=owner.to(torch.long),
        chunk=chunk.to(torch.long),
        fingerprint=signal.fingerprint(),
        seconds=time.perf_counter() - t_start,
        meta=meta,
    )
