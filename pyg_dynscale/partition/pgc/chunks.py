r"""The chunk hierarchy of PGC (DGC §4.1; docs/pgc.md, steps 3-4 and 6).

:func:`generate_chunks` runs size-constrained label propagation on the
level-0 graph, then coarsens: each level's labels become the next level's
nodes, until a level merges fewer than :data:`STOP_SHRINK` of its nodes; the
last level's nodes are the chunks. After the chunks are assigned to ranks
(:mod:`.assign`, :mod:`.fm`), :func:`refine_levels` projects the owners back
down the hierarchy and refines each level by boundary label propagation
(labels = ranks) and, on small levels, FM passes (step 6).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from .fm import fm_refine
from .label_propagation import CSRGraph, compact_labels, label_propagation

#: coarsening stops at a level whose label propagation merged fewer than
#: this fraction of its nodes; that level is not refined on the way down:
#: it nearly is the chunk graph (docs/pgc.md, "Speed")
STOP_SHRINK = 0.1
#: coarse levels run at least this many rounds before ``gain_tol`` may stop
#: them: their first rounds merge many chunks for little gain
COARSE_MIN_ROUNDS = 6
#: the uncoarsening refinement also runs FM passes (:data:`FM_LEVEL_PASSES`, at most
#: :data:`FM_LEVEL_STEPS` steps each) on the levels with at most this many nodes
FM_LEVEL_MAX_NODES = 5_000
FM_LEVEL_PASSES = 4
FM_LEVEL_STEPS = 512


def _bundle_small(chunk: Tensor, C: int, node_w: Tensor, cap: float, max_chunks: int) -> tuple[Tensor, int]:
    """Map ``[C] -> [C']`` merging chunks lighter than cap/4 (in order of their
    smallest node id) into bundles of about cap/2, when there are more than
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
        graph (CSRGraph): the level's weighted graph (level 0: the supergraph,
            or its segment quotient).
        node_w (Tensor): ``[n]`` node weights (summed node costs).
        up (Tensor): ``[n]`` id of each node on the next level (the last
            level maps to the final chunk ids).
        near_chunks (bool): the coarsest level, whose label propagation
            merged fewer than ``STOP_SHRINK`` of its nodes: they are nearly
            the chunks, which the chunk refinement has just refined, so the
            uncoarsening skips refining this level.
    """

    graph: CSRGraph
    node_w: Tensor
    up: Tensor
    near_chunks: bool = False


def generate_chunks(
    graph: CSRGraph,
    node_w: Tensor,
    cap: float,
    *,
    seed: int = 0,
    max_rounds: int = 30,
    coarse_rounds: int = 15,
    tol: float = 1e-3,
    gain_tol: float = 0.0,
    max_levels: int = 6,
    max_chunks: int = 4096,
    progress: bool = False,
) -> tuple[Tensor, int, list[Level], dict]:
    r"""Multi-level size-constrained label propagation (steps 3-4 of the
    module doc).

    Returns:
        ``(chunk [n], C, levels, info)``: the chunk of every node of ``graph``,
        the chunk count, the hierarchy (for the uncoarsening refinement) and
        per-level statistics.
    """
    t0 = time.perf_counter()
    # ties of Eq. 2 go to the label of larger weighted degree: labels grow around hubs (docs/pgc.md, step 3)
    res = label_propagation(graph, node_weight=node_w, cap=cap, seed=seed, max_rounds=max_rounds, tol=tol,
                            progress=progress, tie_moves=True, gain_tol=gain_tol,
                            priority=graph.weighted_degree())
    up, C = compact_labels(res.labels)
    levels = [Level(graph, node_w, up)]
    chunk = up
    info = {"rounds": res.rounds, "converged": res.converged, "level_chunks": [C], "level_rounds": [res.rounds],
            "level_seconds": [time.perf_counter() - t0], "level_entries": [graph.dst.numel()]}
    for level in range(1, max_levels + 1):
        t0 = time.perf_counter()
        prev = levels[-1]
        g = prev.graph.contract(prev.up, C)
        cw = torch.zeros(C, dtype=torch.float64).index_add_(0, prev.up, prev.node_w)
        if g.dst.numel() == 0:
            levels.append(Level(g, cw, torch.arange(C)))
            break
        r = label_propagation(g, node_weight=cw, cap=cap, seed=seed + 7919 * level, tie_moves=True,
                              max_rounds=coarse_rounds, tol=tol, gain_tol=gain_tol, progress=progress,
                              min_rounds=COARSE_MIN_ROUNDS,
                              priority=g.weighted_degree())
        up, C2 = compact_labels(r.labels)
        levels.append(Level(g, cw, up))
        info["level_chunks"].append(C2)
        info["level_entries"].append(g.dst.numel())
        info["level_rounds"].append(r.rounds)
        info["level_seconds"].append(time.perf_counter() - t0)
        chunk = up[chunk]
        shrink = (C - C2) / max(C, 1)
        C = C2
        if shrink < STOP_SHRINK:
            levels[-1].near_chunks = True
            break
    bundle, bundled = _bundle_small(chunk, C, node_w, cap, max_chunks)
    if bundled < C:  # the chunks are bundles now: the coarsest level is no longer nearly them
        levels[-1].near_chunks = False
    C = bundled
    levels[-1].up = bundle[levels[-1].up]
    info["chunks_after_bundling"] = C
    return bundle[chunk], C, levels, info


def largest_chunk(chunk: Tensor, num_chunks: int, node_w: Tensor) -> float:
    """Cost of the heaviest chunk of a vertex-time-node chunk array."""
    return float(torch.zeros(num_chunks, dtype=torch.float64).index_add_(0, chunk, node_w).max()) if num_chunks else 0.0


def refine_levels(levels: list[Level], chunk_owner: np.ndarray, P: int, total: float, slack: float, rounds: int,
            tol: float, gain_tol: float, seed: int, progress: bool,
            stats: Optional[dict] = None, fm_max_nodes: int = 0) -> tuple[Tensor, list[int]]:
    """Project the chunk owners down the hierarchy, refining on each level
    (step 6): ``(owner of the finest level's nodes, moves per level)``;
    ``stats`` (if given) gets the rounds and seconds per level, coarsest first."""
    own = torch.from_numpy(chunk_owner)
    moved_per_level = []
    mean = total / P
    for depth, lvl in enumerate(reversed(levels)):
        t0 = time.perf_counter()
        own = own[lvl.up]
        if rounds > 0 and P > 1 and lvl.graph.dst.numel() and not lvl.near_chunks:
            loads = torch.zeros(P, dtype=torch.float64).index_add_(0, own, lvl.node_w)
            r = label_propagation(lvl.graph, node_weight=lvl.node_w, init=own, num_labels=P,
                                  cap=max(float(loads.max()), (1 + slack) * mean),
                                  floor=min(float(loads.min()), (1 - slack) * mean),
                                  seed=seed + 104729 + depth, max_rounds=rounds, tol=tol, gain_tol=gain_tol,
                                  boundary_only=True, progress=progress)
            projected = own
            own = r.labels
            if lvl.graph.num_nodes <= fm_max_nodes:  # FM passes escape LP's positive-gain optimum (module doc, step 6)
                g = lvl.graph
                own_np, _ = fm_refine(g.ptr.numpy(), g.dst.numpy(), g.weight.numpy(), lvl.node_w.numpy(), own.numpy(), P,
                                      max(float(loads.max()), (1 + slack) * mean), min(float(loads.min()), (1 - slack) * mean),
                                      max_passes=FM_LEVEL_PASSES, stall=32, max_steps=FM_LEVEL_STEPS)
                own = torch.from_numpy(own_np)
            moved_per_level.append(int((own != projected).sum()))
            if stats is not None:
                stats.setdefault("refine_rounds", []).append(r.rounds)
                stats.setdefault("refine_seconds", []).append(time.perf_counter() - t0)
    return own, moved_per_level
