r"""Partitioning by graph chunks, PGC (DGC §4).

Pipeline (all steps vectorized except the greedy loop over chunks):

1. **Weighted supergraph.** Vertex-time nodes; spatial edges weighted by
   ``pattern.spatial_edge_weight()`` and temporal edges by the bytes per epoch
   that cutting them costs for the model (:func:`.coarsen.temporal_edge_weights`:
   ``pattern.temporal_edge_weight()`` for recurrent blocks; an attention block
   (DySAT) moves every earlier appearance, so the edge leaving position
   :math:`j` of a sequence weighs :math:`j + 1` rows). Label propagation
   treats it as undirected.
2. **Temporal coarsening** (``coarsen="auto"``, :mod:`.coarsen`): when every
   temporal edge is at least as heavy as a spatial edge (the usual case: a
   hidden state row against an input row), each vertex's sequence is cut into
   segments below ``segment_fraction * cap`` and every segment is contracted
   into one node -- heavy-edge coarsening in one vectorized step, doing what
   the first label-propagation rounds would do. Cut weights are preserved
   exactly, so everything below runs on this quotient graph, which has about
   ``N / mean sequence length`` nodes. ``coarsen=False`` runs on the
   vertex-time nodes themselves (DGC's Eq. 1 start).
3. **Chunk generation** (§4.1): size-constrained weighted label propagation
   from unique labels (:mod:`.label_propagation`). The cap is in workload
   units of the additive node cost of the workload model
   (``LinearWorkload()`` -> vertex-time nodes + spatial in-edges); default
   ``total / (num_parts * chunks_per_part)``.
4. **Coarsening.** Label propagation stops (by ``tol`` / ``max_rounds``) with
   many small labels; we contract the chunks into a weighted chunk graph and
   run the same label propagation (same cap) on it, level by level, until the
   number of chunks falls by less than 10%. If more than ``max_chunks``
   remain, chunks smaller than ``cap / 4`` are bundled in node-id order into
   bundles of at most ``cap / 2 + cap / 4 < cap``; this keeps Algorithm 1's
   Python loop short.
5. **Chunk assignment** (§4.2, Algorithm 1, Eq. 3) with predicted chunk
   workloads (:func:`.assign.assign_chunks`; empty ranks handled by an
   :math:`\varepsilon` affinity, see there), then a chunk-level refinement
   (balance, then cut) within ``(1 +/- slack)`` of the mean load.
6. **Uncoarsening refinement** (optional, ``refine_rounds``): label
   propagation with labels = ranks, node weights = additive node costs,
   ``cap`` = the larger of the current max load and ``(1 + slack) * mean``
   and ``floor`` the smaller of the current min load and ``(1 - slack) *
   mean``: boundary nodes move to the rank they share most bytes with while
   no rank leaves the band. Chunks that end up split across ranks are split
   (chunk ids are re-made from the pair ``(chunk, owner)``), so ``owner`` is
   always constant inside a chunk. The coarsest level is not refined when
   coarsening stopped there for lack of merges (``STOP_SHRINK``: nearly the
   chunks, which step 5 refined). With temporal coarsening the finest level
   refined is the segment graph (a segment never straddles ranks).
7. **Multi-start** (``starts``): label propagation only makes local moves
   and does not find a contiguous snapshot range per rank (static graphs over
   many snapshots) or whole sequences per rank, the optimum on some graphs.
   The balanced PSS and PTS partitions are therefore refined the same way
   (step 6, on level-0 nodes split where the start's owner changes,
   :func:`_refined_start`) when their unrefined cut is within
   ``start_margin`` of the LP cut and their unrefined plan bytes within
   :data:`START_BYTES_MARGIN` of LP's. A PSS start whose snapshot ranges
   miss the balance tolerance (but passes the cut test) splits its boundary
   snapshots (:class:`_Start`).
   Among the candidates with :math:`\lambda`
   within ``max_divergence`` (default PGC's band ``max((1 + slack) / (1 -
   slack), lambda_lp)``) the one whose communication plan moves the fewest
   bytes wins (the lowest cut weight when ``pattern`` is a bare weight pair).
   Skipped above :data:`MULTI_START_MAX_ENTRIES`.
"""
from __future__ import annotations

import json

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError
from ..compiled import backend, kernels
from .assign import ChunkGraph, assign_chunks, divergence, rank_loads, refine_chunks
from .fm import fm_key, fm_refine, multilevel_fm
from .coarsen import (min_weight, segment_sequences, supergraph_csr, supergraph_cut, temporal_edge_weights,
                      temporal_weights, unit_cut)
from .label_propagation import CSRGraph, compact_labels, label_propagation
from ..partition import Partition, check_num_parts
from ..pattern import DependencyPattern, edge_weights
# the options' object, its presets and defaults (EFFORT, STARTS, START_MARGIN are read here by their old names)
from .options import EFFORT, START_MARGIN, STARTS, PGCOptions
from ..costs.plan_bytes import plan_bytes
from .rebalance import rebalance_partition
from ..schemes.snapshot_sequence import pss_snapshot_ranks, pts_sequence_ranks
from ..costs.workload import WorkloadModel, resolve_workload

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

#: ``threads=None``: the compiled kernels and torch run on one thread. numba's
#: parallel kernels spin-wait for their workers, so a parallel partition
#: collapses when another process holds a core (docs/pgc.md, "Threads");
#: ``threads=k`` asks for ``k`` on a machine known to be idle.
DEFAULT_THREADS = 1
TORCH_THREADS = 1
#: ``effort="auto"`` picks "fast" above this many level-0 CSR entries
FAST_ABOVE = 8_000_000
#: coarsening stops at a level whose label propagation merged fewer than
#: this fraction of its nodes; that level is not refined on the way down:
#: it nearly is the chunk graph (docs/pgc.md, "Speed")
STOP_SHRINK = 0.1
#: coarse levels run at least this many rounds before ``gain_tol`` may stop
#: them: their first rounds merge many chunks for little gain
COARSE_MIN_ROUNDS = 6
#: the extra (non-LP) starts are skipped when the level-0 graph has more CSR
#: entries than this: each costs a supergraph pass, which on graphs that big
#: outweighs what it can win (docs/pgc.md, Pipeline step 7)
MULTI_START_MAX_ENTRIES = FAST_ABOVE
#: ... and, with a ``DependencyPattern``, only when its unrefined plan bytes
#: are at most this factor above the LP candidate's: refinement lowers a
#: start's bytes by a bounded factor, so a start far above LP cannot win
#: (measurements in docs/pgc.md, step 7)
START_BYTES_MARGIN = 1.3
#: multilevel FM runs on the chunk graph after Algorithm 1 (step 5b, :mod:`.fm`):
#: the runs differ by seed only and their results spread widely, so several
#: are kept (docs/pgc.md, step 5b)
FM_TRIES = 8
#: the multilevel FM coarsens the chunk graph to about this many nodes per rank
FM_COARSEN_TO = 4
#: the uncoarsening refinement also runs FM passes (:data:`FM_LEVEL_PASSES`, at most
#: :data:`FM_LEVEL_STEPS` steps each) on the levels with at most this many nodes
FM_LEVEL_MAX_NODES = 5_000
FM_LEVEL_PASSES = 4
FM_LEVEL_STEPS = 512


def weighted_supergraph(signal: "DynamicGraphSignal", pattern: Any) -> tuple[Tensor, Tensor, Tensor]:
    r"""Spatial then temporal supergraph edges with their byte weights:
    ``(src [E+M], dst [E+M], weight [E+M] float64)``, each edge once. Temporal
    weights are per edge (:func:`.coarsen.temporal_edge_weights`)."""
    sg = signal.supergraph()
    ws, _ = edge_weights(pattern)
    E = sg.num_spatial_edges
    src = torch.cat([sg.spatial_edge_index[0], sg.temporal_edge_index[0]])
    dst = torch.cat([sg.spatial_edge_index[1], sg.temporal_edge_index[1]])
    w = torch.cat([torch.full((E,), ws, dtype=torch.float64), temporal_edge_weights(sg, pattern)])
    return src, dst, w


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


def partition_pgc(
    signal: "DynamicGraphSignal",
    num_parts: int,
    pattern: Any = None,
    options: Optional[PGCOptions] = None,
    **overrides: Any,
) -> "Partition":
    r"""Partition a dynamic graph by graph chunks (DGC §4; pipeline in the
    module docstring).

    The options below are the fields of
    :class:`~pyg_dynscale.partition.pgc.options.PGCOptions`: give
    them as keywords (``partition_pgc(signal, 4, pattern, seed=1)``), as one
    ``options`` object, or both (the keywords override its fields). The
    partition records them in ``meta["pgc_options"]``
    (:meth:`PGCOptions.to_dict <pyg_dynscale.partition.pgc.options.PGCOptions.to_dict>`).

    Args:
        signal (DynamicGraphSignal): the dynamic graph (:math:`N` vertex-time nodes).
        num_parts (int): number of ranks :math:`P`, ``1 <= P <= N``.
        pattern: the model's dependency pattern (edge byte weights), a
            ``(spatial, temporal)`` weight pair, or ``None`` (both 1).
        options (PGCOptions, optional): all options at once (default: the
            defaults below).
        seed (int): makes the result deterministic (halves, tie-breaks).
        cap (float, optional): largest chunk, in units of the workload model's
            additive node cost (vertex-time nodes + spatial in-edges for the
            default model). Default ``total / (P * chunks_per_part)``. An
            explicit cap is honoured: a refined PSS / PTS start whose chunks
            exceed it cannot win the multi-start.
        chunks_per_part (int): sets the default cap.
        effort (str): ``"thorough"``, ``"fast"`` or ``"auto"`` -- fills in
            ``max_rounds``, ``coarse_rounds``, ``max_levels`` and
            ``refine_rounds`` left at ``None`` from :data:`EFFORT`. ``"auto"``
            is ``"fast"`` when the level-0 graph (after temporal coarsening)
            has more than :data:`FAST_ABOVE` CSR entries, else ``"thorough"``
            (docs/pgc.md, "Speed and quality").
        max_rounds (int), tol (float): label-propagation stopping rule on the
            finest level: at most ``max_rounds`` rounds, and stop once an
            (even, odd) pair of rounds moved at most ``tol`` of the nodes
            (``tol=0``, many rounds: a fixed point of Eq. 2).
        gain_tol (float): also stop a level once an (even, odd) pair of
            rounds gained at most this fraction of the level's total edge
            weight: on graphs without community structure label propagation
            keeps moving many nodes for tiny gains (docs/pgc.md, "Speed").
            ``0`` disables it.
        coarse_rounds (int): round limit on the coarse levels.
        max_levels (int): coarse levels at most.
        max_chunks (int): bound on the chunk count handed to Algorithm 1.
        slack (float): allowed load deviation from the mean during assignment
            and refinement.
        refine_rounds (int): rounds of refinement per level (0 disables it).
        refine_tol (float): a level's refinement stops once an (even, odd)
            pair of rounds moved at most this fraction of its nodes.
        coarsen (bool or "auto"): contract temporal-sequence segments first
            (module doc, step 2). ``"auto"``: when every temporal edge weighs
            at least as much as a spatial edge.
        segment_fraction (float): segments cost at most this fraction of the
            cap (plus one node), in ``(0, 1]``.
        workload: ``None``/``"linear"``, ``"vertices"``, a saved
            :class:`~pyg_dynscale.partition.costs.workload.MLPWorkload` path, or a
            :class:`~pyg_dynscale.partition.costs.workload.WorkloadModel`.
        threads (int, optional): threads of the compiled kernels and of
            torch (``torch.set_num_threads``, restored after). Default
            (:data:`DEFAULT_THREADS`): one, which does not collapse when other
            processes share the cores. Results do not depend on the thread count.
        starts (tuple of str): starting assignments to try (multi-start,
            module doc step 7), a subset of ``("lp", "pss", "pts")``
            containing ``"lp"``: ``"lp"`` -- label-propagation chunks + Algorithm 1
            (steps 3-6); ``"pss"`` / ``"pts"`` -- the balanced snapshot-range
            / sequence partition, refined on the rank level. Among the
            candidates whose :math:`\lambda` stays within the tolerance
            (``max_divergence``) the one with the fewest plan bytes wins
            (``meta["candidate_bytes"]``; the lowest cut weight when
            ``pattern`` is not a ``DependencyPattern``).
            ``("lp",)`` is the single-start PGC. Extra starts are skipped when
            the level-0 graph has more than :data:`MULTI_START_MAX_ENTRIES`
            CSR entries (``meta["starts_skipped"]``).
        max_divergence (float, optional): largest :math:`\lambda` a non-LP
            start may have to win. Default ``max((1 + slack) / (1 - slack),
            \lambda_\text{lp})``, PGC's own balance band. A balanced PSS start
            on few snapshots can be less balanced than that (e.g. PedalMe, 4
            ranks: 1.14); ``max_divergence=1.15`` lets it win.
        start_margin (float, optional): a non-LP start is refined only when
            its unrefined cut weight is at most ``start_margin`` times the LP
            candidate's cut and, when ``pattern`` is a ``DependencyPattern``,
            its unrefined plan bytes are at most :data:`START_BYTES_MARGIN`
            times the LP candidate's (module doc, step 7);
            ``meta["candidates_raw"]`` / ``meta["candidates_raw_bytes"]``
            hold the unrefined cuts / bytes. ``None`` refines every start.
        backend (str, optional): label-propagation backend, ``"numba"``,
            ``"torch"`` or ``"auto"`` (:mod:`~pyg_dynscale.partition.compiled.backend`; identical results).
            ``None``: the current one (``"auto"`` unless set by
            :func:`~pyg_dynscale.partition.compiled.backend.use_backend` or ``PYG_DYNSCALE_LP_BACKEND``);
            ``"auto"`` compiles only graphs above
            :data:`~pyg_dynscale.partition.compiled.backend.AUTO_NUMBA_ABOVE` nodes plus edges.
        progress (bool): print per-round progress.
        balance (str): the balance objective. ``"nodes"`` (default): the
            additive node cost of ``workload``; ``"rounds"``: then move
            snapshot blocks off the ranks the round-aware model
            (:class:`~pyg_dynscale.partition.costs.rounds.RoundWorkload`:
            recurrent rounds, scan steps, halo rows) predicts slowest, with
            plan bytes at most 10% above PGC's
            (:func:`~pyg_dynscale.partition.pgc.rebalance.balance_rounds`;
            ``meta["round_balance"]`` holds the predictions before / after).
        round_model (RoundWorkload, optional): the constants of
            ``balance="rounds"`` (default: the fitted defaults).
        fm_tries (int, optional): multilevel FM runs on the chunk graph
            (step 5b); ``0`` disables the FM step (also on the uncoarsening
            levels). ``None``: :data:`FM_TRIES` (8). ``meta["fm_start"]``
            names the winning candidate,
            ``meta["fm_cuts"]`` holds each candidate's chunk cut.

    Returns:
        :class:`~pyg_dynscale.partition.partition.Partition` with
        ``scheme="pgc"``, ``owner [N]``, ``chunk [N]`` and ``meta`` (rounds,
        num_chunks, cap, loads, divergence, timings of each step;
        ``candidates``: cut weight per start (``None`` when a start is
        infeasible), ``candidate_divergence``, ``start``: the winner --
        ``"lp"`` (DGC's own PGC: label-propagation chunks + Algorithm 1) or a
        refined ``"pss"`` / ``"pts"`` start; ``cap``: the cap label
        propagation used, ``max_chunk_cost``: the heaviest chunk returned
        (above ``cap`` when a refined PSS / PTS start won under the default
        cap); with an explicit ``cap`` no start whose chunks exceed it can
        win (``starts_over_cap``); ``coarsened``: whether temporal coarsening
        ran).

    Raises:
        PartitionError: ``num_parts`` out of range, a cap below the largest
            node cost, fewer chunks than ranks, a bad option (named: see
            :class:`~pyg_dynscale.partition.pgc.options.PGCOptions`)
            or a keyword that is not an option.
    """
    N = signal.num_vertex_time_nodes
    P = check_num_parts(int(num_parts) if isinstance(num_parts, np.integer) else num_parts, N)
    opts = PGCOptions.of(options, **overrides)  # validated once, in the dataclass
    if signal.device.type != "cpu":  # the kernels run on the host: partition a host copy, same fingerprint
        signal = signal.to("cpu")
    n_threads = int(opts.threads) if opts.threads is not None else DEFAULT_THREADS
    before = torch.get_num_threads()
    torch.set_num_threads(n_threads or TORCH_THREADS)
    try:
        # resolved once: inside, backend.backend() is a variable read instead of an environment lookup per call
        sg = signal.supergraph()
        size = sg.num_nodes + sg.num_spatial_edges + sg.num_temporal_edges
        chosen = opts.backend if opts.backend is not None else backend.backend_for(size)
        with backend.use_backend(chosen) as used_backend, backend.use_threads(n_threads) as kernel_threads:
            part = _partition_pgc(signal, P, pattern, replace(opts, segment_fraction=float(opts.segment_fraction)))
            if opts.balance == "rounds":
                part = rebalance_partition(signal, part, pattern, opts.round_model)
            part.meta["balance"] = opts.balance
            part.meta["pgc_options"] = opts.to_dict()
            part.meta["threads"] = backend.threads_used(used_backend, kernel_threads)
            part.meta["backend"] = used_backend
            return part
    finally:
        torch.set_num_threads(before)


def _largest_chunk(chunk: Tensor, num_chunks: int, node_w: Tensor) -> float:
    """Cost of the heaviest chunk of a vertex-time-node chunk array."""
    return float(torch.zeros(num_chunks, dtype=torch.float64).index_add_(0, chunk, node_w).max()) if num_chunks else 0.0


def _refine(levels: list[Level], chunk_owner: np.ndarray, P: int, total: float, slack: float, rounds: int,
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


@dataclass
class _Start:
    r"""A balanced PSS or PTS start of the multi-start (module doc, step 7)
    as ranks of its units: ``rank [T]`` per snapshot (PSS, ``unit`` = each
    node's snapshot) or ``rank [V]`` per vertex (PTS, ``unit`` = each node's
    vertex). Its cut needs only the edges between units -- temporal edges
    for PSS, spatial edges for PTS; the other kind stays inside a unit -- and
    the ``[N]`` owner is built only for a start that is refined.

    ``loads`` (``[P]``, PSS only) gives the start's :math:`\lambda`. A PSS
    start whose whole-snapshot ranges miss the balance tolerance (few
    snapshots per rank) and pass the cut test is *split*
    (:meth:`split_snapshots`): the ranks take contiguous runs of vertex-time
    nodes in gid (time-major) order, so a rank boundary may fall inside a
    snapshot; then ``unit`` is ``None`` and ``rank`` is the ``[N]`` owner."""

    name: str
    unit: Optional[Tensor]
    rank: Tensor
    loads: Optional[Tensor] = None

    @classmethod
    def make(cls, name: str, signal: "DynamicGraphSignal", P: int, node_w: Tensor) -> Optional["_Start"]:
        """``None`` if the start does not exist for this graph (e.g. fewer
        non-empty snapshots than ranks); ``node_w`` is already validated."""
        sg = signal.supergraph()
        try:
            if name == "pss":
                snap_rank, _, _, loads = pss_snapshot_ranks(signal, P, True, None, cost=node_w)
                return cls(name, sg.time, snap_rank, loads)
            seq_rank = pts_sequence_ranks(signal, P, True, None, cost=node_w)
        except PartitionError:
            return None
        vertex_rank = torch.zeros(sg.num_vertices, dtype=torch.long)
        vertex_rank[sg.sequence_vertex] = seq_rank
        return cls(name, sg.vertex, vertex_rank)

    def divergence(self) -> float:
        r""":math:`\lambda` of a PSS start (1 for a PTS start: it is not split)."""
        return 1.0 if self.loads is None else divergence(self.loads.numpy())

    def split_snapshots(self, node_w: Tensor, P: int) -> "_Start":
        """The split PSS start (:func:`_split_snapshot_owner`)."""
        return _Start(self.name, None, _split_snapshot_owner(node_w, P))

    def cut(self, sg: Any, ws: float, tw: Union[Tensor, float]) -> float:
        """Cut weight on the weighted supergraph (as :func:`.coarsen.supergraph_cut` of :meth:`owner`)."""
        if self.unit is None:  # a split start cuts both kinds of edges
            return supergraph_cut(sg, self.rank, ws, tw)
        if self.name == "pss":
            return unit_cut(self.unit, self.rank, sg.temporal_edge_index, tw)
        return unit_cut(self.unit, self.rank, sg.spatial_edge_index, ws)

    def owner(self) -> Tensor:
        """``[N]`` rank of every vertex-time node."""
        return self.rank if self.unit is None else self.rank.index_select(0, self.unit)


def _split_snapshot_owner_compiled(node_w: Tensor, P: int) -> Tensor:
    """:func:`_split_snapshot_owner` in one compiled pass (the same numbers)."""
    return torch.from_numpy(kernels.schemes.split_ranks(node_w.numpy(), int(P)))


@backend.twin(_split_snapshot_owner_compiled)
def _split_snapshot_owner(node_w: Tensor, P: int) -> Tensor:
    r"""The split PSS start (:class:`_Start`): node :math:`v` goes to rank
    :math:`\lfloor P (c_v - w_v / 2) / W \rfloor` with :math:`c_v` the
    running cost in gid (time-major) order and :math:`W` the total, so every
    rank is within one node's cost of the mean."""
    w = node_w.numpy()
    csum = np.cumsum(w)  # sequential, as the compiled running sum
    total = float(csum[-1]) if csum.size else 0.0
    if total <= 0:  # no costs to balance: equal node counts
        return (torch.arange(w.size) * P) // max(1, w.size)
    return torch.from_numpy(np.clip(np.floor((csum - 0.5 * w) * (P / total)), 0, P - 1).astype(np.int64))


class _RefinedStart(NamedTuple):
    """A refined non-LP start: cut weight, load divergence, ``owner [N]``,
    ``chunk [N]`` and the number of chunks."""

    cut: float
    divergence: float
    owner: Tensor
    chunk: Tensor
    num_chunks: int


def _refined_start(start_owner: Tensor, P: int, sg: Any, node_w: Tensor, ws: float, tw: Union[Tensor, float],
                   seg: Optional[Tensor], graph: CSRGraph, slack: float, total: float, rounds: int, tol: float,
                   gain_tol: float, seed: int, progress: bool) -> _RefinedStart:
    r"""Refine one non-LP starting assignment (module doc, step 7).

    The start (``start_owner [N]``, balanced PSS or PTS) is cut into
    *pieces* -- the level-0 nodes (segments) split where the start's owner
    changes, so a piece never straddles ranks and stays contiguous in time --
    and the pieces are refined by the same rank-level label propagation as
    step 6 (boundary nodes, loads kept inside ``[min(floor, (1 - slack)
    mean), max(cap, (1 + slack) mean)]``).

    Returns:
        :class:`_RefinedStart`, with the cut weight on the weighted
        supergraph and ``chunk`` = the pair (start rank, final rank), so
        ``owner`` is constant inside a chunk.
    """
    if seg is None:
        piece, n, g = torch.arange(start_owner.numel()), start_owner.numel(), graph
    else:
        piece, n = compact_labels(seg * P + start_owner)
        # the start never splits a segment (PTS): same graph; else the
        # supergraph's quotient on the pieces (cut weights preserved, as in .coarsen)
        g = graph if n == graph.num_nodes else supergraph_csr(sg, ws, tw, piece, n)
    pw = torch.zeros(n, dtype=torch.float64).index_add_(0, piece, node_w)
    own = torch.zeros(n, dtype=torch.long).scatter_(0, piece, start_owner)
    lvl = Level(g, pw, torch.arange(n))
    own, _ = _refine([lvl], own.numpy(), P, total, slack, rounds, tol, gain_tol, seed, progress)
    cut = g.cut(own)
    loads = torch.zeros(P, dtype=torch.float64).index_add_(0, own, pw)
    owner = own.index_select(0, piece)
    chunk, C = compact_labels(start_owner * P + owner)
    return _RefinedStart(cut, divergence(loads.numpy()), owner, chunk, C)


def _with_effort(s: PGCOptions, entries: int) -> PGCOptions:
    """The options the pipeline runs with: ``effort="auto"`` resolved for a
    level-0 graph of ``entries`` CSR entries, the preset's round budgets
    where none was given, and :data:`FM_TRIES` for ``fm_tries=None``."""
    effort = ("fast" if entries > FAST_ABOVE else "thorough") if s.effort == "auto" else s.effort
    preset = EFFORT[effort]

    def pick(name: str) -> int:
        given = getattr(s, name)
        return preset[name] if given is None else int(given)

    fm_tries = FM_TRIES if s.fm_tries is None else int(s.fm_tries)
    return replace(s, effort=effort, max_rounds=pick("max_rounds"), coarse_rounds=pick("coarse_rounds"),
                   max_levels=pick("max_levels"), refine_rounds=pick("refine_rounds"), fm_tries=fm_tries)


@dataclass
class _Costs:
    """Step 1: node costs of the workload model and the chunk cap."""

    model: Any
    node_w: Tensor   # [N] float64
    total: float
    biggest: float
    cap: float


@dataclass
class _Level0:
    """Step 2: the graph label propagation starts from (the segment quotient
    graph with temporal coarsening, else the supergraph)."""

    graph: CSRGraph
    seg: Optional[Tensor]    # [N] segment of each vertex-time node, or None
    num_nodes: int
    node_w: Tensor           # [n0] float64
    spatial_weight: float
    temporal_weight: Any     # one number, or [M] per temporal edge; None once freed
    coarsened: bool


@dataclass
class _Chunks:
    """Steps 3-4: chunks on the level-0 graph and the coarsening hierarchy."""

    chunk: Tensor
    num_chunks: int
    levels: list
    info: dict


@dataclass
class _Assignment:
    """Steps 5-6: Algorithm 1 on the chunk graph, refined down the hierarchy."""

    owner: Tensor            # [n0]
    chunk: Tensor            # [n0] (chunks split where they straddle ranks)
    num_chunks: int
    moved_per_level: list
    greedy_cut: float
    greedy_divergence: float
    cut: float
    additive: bool           # chunk cost = sum of node costs
    # the level-0 owner the pipeline without the FM step gives (None: the same
    # as ``owner``, or not needed); the multi-start prunes against it
    owner_before_fm: Optional[Tensor] = None


@dataclass
class _StartChoice:
    """Step 7: the candidates of the multi-start and the one that won."""

    winner: str
    best: Optional[_RefinedStart]   # the winning refined start; None: LP won
    candidates: dict
    divergence: dict
    raw_cuts: dict
    raw_bytes: dict
    bytes: dict
    skipped: list
    tolerance: float
    pss_split: bool
    over_cap: list
    lp_cut_before_fm: float = 0.0
    lp_bytes_before_fm: Optional[int] = None


def _node_costs(signal: "DynamicGraphSignal", P: int, s: PGCOptions) -> _Costs:
    model = resolve_workload(s.workload)
    node_w = model.node_costs(signal).to(torch.float64)
    lowest, highest = torch.aminmax(node_w)
    total = float(node_w.sum())
    # a finite sum of costs >= 0 means every cost is finite (NaN fails both tests)
    if not (float(lowest) >= 0.0 and math.isfinite(total)):
        raise PartitionError("workload", "node costs must be finite and >= 0.", "check the workload model.")
    biggest = float(highest)
    if s.cap is None:
        cap = max(total / (P * max(1, s.chunks_per_part)), biggest)
    else:
        cap = float(s.cap)
        if not math.isfinite(cap) or cap < biggest:
            raise PartitionError(
                "cap", f"is {cap:g} but the heaviest vertex-time node alone costs {biggest:g} (an indivisible unit).",
                f"use cap >= {biggest:g}, or leave cap=None for total / (num_parts * chunks_per_part).",
            )
    return _Costs(model, node_w, total, biggest, cap)


def _level0_graph(signal: "DynamicGraphSignal", pattern: Any, costs: _Costs, s: PGCOptions) -> _Level0:
    """Step 2: temporal coarsening (segment quotient graph), or the supergraph itself."""
    sg = signal.supergraph()
    ws, _ = edge_weights(pattern)
    tw = temporal_weights(sg, pattern)  # one number for recurrent patterns: no [M] array
    seg_cap = min(s.segment_fraction * costs.cap, costs.cap - costs.biggest)
    heavy = sg.num_temporal_edges > 0 and min_weight(tw) >= ws
    use = (heavy if s.coarsen == "auto" else bool(s.coarsen)) and seg_cap > 0 and sg.num_temporal_edges > 0
    seg: Optional[Tensor] = None
    if use:
        seg, n0 = segment_sequences(sg, costs.node_w, seg_cap)
        w0 = torch.zeros(n0, dtype=torch.float64).index_add_(0, seg, costs.node_w)
    else:
        n0, w0 = signal.num_vertex_time_nodes, costs.node_w
    graph = supergraph_csr(sg, ws, tw, seg, n0)
    if s.starts == ("lp",) or graph.dst.numel() > MULTI_START_MAX_ENTRIES:
        tw = None  # only the extra starts need it: free it before chunk generation
    return _Level0(graph, seg, n0, w0, ws, tw, use)


def _generate(lvl: _Level0, costs: _Costs, P: int, s: PGCOptions) -> _Chunks:
    """Steps 3-4: size-constrained label propagation and chunk coarsening."""
    chunk, C, levels, info = generate_chunks(lvl.graph, lvl.node_w, costs.cap, seed=s.seed, max_rounds=s.max_rounds,
                                             coarse_rounds=s.coarse_rounds, tol=s.tol, gain_tol=s.gain_tol,
                                             max_levels=s.max_levels, max_chunks=s.max_chunks, progress=s.progress)
    if C < P:
        raise PartitionError("cap", f"label propagation produced {C} chunks for {P} ranks (cap {costs.cap:g}).",
                             "use a smaller cap or a larger chunks_per_part so that every rank can get a chunk.")
    return _Chunks(chunk, C, levels, info)


def _assign(signal: "DynamicGraphSignal", lvl: _Level0, costs: _Costs, ch: _Chunks, P: int, s: PGCOptions,
            timings: dict) -> _Assignment:
    """Step 5: Algorithm 1 and chunk refinement; step 6: uncoarsening refinement."""
    t0 = time.perf_counter()
    C, chunk = ch.num_chunks, ch.chunk
    # the default chunk cost is the segment sum of the node costs: sum on the
    # level-0 graph instead of expanding to all N vertex-time nodes
    additive = type(costs.model).chunk_costs is WorkloadModel.chunk_costs
    if additive:
        cost = torch.zeros(C, dtype=torch.float64).index_add_(0, chunk, lvl.node_w).numpy()
    else:
        cost = costs.model.chunk_costs(signal, chunk if lvl.seg is None else chunk.index_select(0, lvl.seg),
                                       C).to(torch.float64).numpy()
    top = ch.levels[-1].graph.contract(ch.levels[-1].up, C)
    cg = ChunkGraph(C, top.ptr.numpy(), top.dst.numpy(), top.weight.to(torch.float64).numpy())
    chunk_owner = assign_chunks(cg, cost, P, slack=s.slack)
    greedy_cut = cg.cut(chunk_owner)
    greedy_div = divergence(rank_loads(chunk_owner, cost, P))
    chunk_owner = refine_chunks(cg, cost, chunk_owner, P, slack=s.slack)
    timings["assignment"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    greedy_owner = chunk_owner
    chunk_owner, fm_info = _chunk_fm(cg, cost, chunk_owner, P, s)
    ch.info.update(fm_info)
    before_fm = None
    if (not np.array_equal(chunk_owner, greedy_owner) and P > 1 and any(st != "lp" for st in s.starts)
            and lvl.graph.dst.numel() <= MULTI_START_MAX_ENTRIES):
        # the multi-start's margins prune against the LP result without FM
        # (docs/pgc.md, step 7): a lower LP cut must not prune a start that
        # moves fewer plan bytes (email-Eu-core, P = 8)
        before_fm, _ = _refine(ch.levels, greedy_owner, P, costs.total, s.slack, s.refine_rounds, s.refine_tol,
                               s.gain_tol, s.seed, False)
    timings["fm"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    owner, moved = _refine(ch.levels, chunk_owner, P, costs.total, s.slack, s.refine_rounds, s.refine_tol, s.gain_tol,
                           s.seed, s.progress, stats=ch.info, fm_max_nodes=FM_LEVEL_MAX_NODES if s.fm_tries > 0 else 0)
    if any(moved):
        chunk, C = compact_labels(chunk * P + owner)  # split chunks that straddle ranks
    timings["refinement"] = time.perf_counter() - t0
    # cut weight on the level-0 graph: exactly the supergraph's (coarsening keeps cut weights)
    return _Assignment(owner, chunk, C, moved, greedy_cut, greedy_div, lvl.graph.cut(owner), additive, before_fm)


def _chunk_fm(cg: ChunkGraph, cost: np.ndarray, chunk_owner: np.ndarray, P: int,
              s: PGCOptions) -> tuple[np.ndarray, dict]:
    r"""Step 5b, FM refinement of the chunk assignment (:mod:`.fm`): the
    Algorithm 1 assignment refined by FM passes, and ``fm_tries`` multilevel
    FM runs on the chunk graph (label-propagation coarsening with seeds
    ``seed + k``, Algorithm 1 and seeded random starts on the coarsest graph,
    FM on every level); the assignment with the smallest ``(excess over the
    band, cut)`` wins, so the chunk cut never exceeds the input's within the
    band. ``fm_tries=0`` returns the input."""
    if s.fm_tries <= 0 or P < 2 or cg.num_chunks <= P:
        return chunk_owner, {"fm_start": None, "fm_cuts": None}
    gbar = float(cost.sum()) / P
    hi, lo = (1.0 + s.slack) * gbar, (1.0 - s.slack) * gbar

    def initial(ptr: np.ndarray, nbr: np.ndarray, w: np.ndarray, c: np.ndarray) -> np.ndarray:
        g = ChunkGraph(c.shape[0], ptr, nbr, w)
        return refine_chunks(g, c, assign_chunks(g, c, P, slack=s.slack), P, slack=s.slack)

    cands = [("algorithm1", fm_refine(cg.ptr, cg.nbr, cg.w, cost, chunk_owner, P, hi, lo)[0])]
    for k in range(s.fm_tries):
        own, _ = multilevel_fm(cg.ptr, cg.nbr, cg.w, cost, P, hi, lo, initial, seed=s.seed + 7907 * (k + 1),
                               coarsen_to=FM_COARSEN_TO)
        cands.append((f"multilevel{k}", own))
    keys = [fm_key(cg.ptr, cg.nbr, cg.w, cost, own, P, hi, lo) for _, own in cands]
    best = min(range(len(cands)), key=lambda i: (keys[i], i))
    return cands[best][1], {"fm_start": cands[best][0], "fm_cuts": {name: key[1] for (name, _), key in zip(cands, keys)}}


def _multi_start(signal: "DynamicGraphSignal", P: int, pattern: Any, lvl: _Level0, costs: _Costs,
                 asg: _Assignment, s: PGCOptions) -> _StartChoice:
    """Step 7: refine the balanced PSS / PTS partitions and keep the cheapest
    candidate within the balance tolerance."""
    sg = signal.supergraph()
    graph, seg, ws, tw, node_w = lvl.graph, lvl.seg, lvl.spatial_weight, lvl.temporal_weight, costs.node_w
    owner, cut = asg.owner, asg.cut
    lp_loads = torch.zeros(P, dtype=torch.float64).index_add_(0, owner, lvl.node_w)
    lp_div = divergence(lp_loads.numpy())
    candidates: dict[str, Optional[float]] = {"lp": cut}
    cand_div: dict[str, Optional[float]] = {"lp": lp_div}
    cand_raw: dict[str, Optional[float]] = {}
    # margins relative to the LP result without the FM step, where it differs (docs/pgc.md, step 7)
    cut_before_fm = cut if asg.owner_before_fm is None else max(cut, graph.cut(asg.owner_before_fm))
    prune_above = math.inf if s.start_margin is None else float(s.start_margin) * cut_before_fm
    skipped = [st for st in s.starts if st != "lp"] if graph.dst.numel() > MULTI_START_MAX_ENTRIES else []
    tolerance = max((1 + s.slack) / (1 - s.slack), lp_div) if s.max_divergence is None else float(s.max_divergence)
    winner, best = "lp", None
    pss_split = False
    eligible: dict[str, _RefinedStart] = {}  # refined starts within the balance tolerance
    over_cap: list[str] = []  # refined starts whose chunks exceed an explicit cap
    # the plan sends each (row, destination rank) once, so the cut weight
    # over-counts nodes with many edges into one rank: with a pattern the
    # candidates are ranked (and far starts pruned) by the bytes the
    # communication plan actually moves
    by_bytes = isinstance(pattern, DependencyPattern)
    cand_bytes: dict[str, int] = {}
    raw_bytes: dict[str, int] = {}

    def lp_bytes() -> int:
        if "lp" not in cand_bytes:
            cand_bytes["lp"] = plan_bytes(sg, owner if seg is None else owner.index_select(0, seg), P, pattern)
        return cand_bytes["lp"]

    before_fm_bytes: list[int] = []

    def prune_bytes() -> int:
        """LP's plan bytes the bytes margin is relative to (without FM where it differs)."""
        if asg.owner_before_fm is None:
            return lp_bytes()
        if not before_fm_bytes:
            o = asg.owner_before_fm
            before_fm_bytes.append(plan_bytes(sg, o if seg is None else o.index_select(0, seg), P, pattern))
        return max(lp_bytes(), before_fm_bytes[0])

    for st in s.starts:
        if st == "lp" or st in skipped or P == 1:
            continue
        start = _Start.make(st, signal, P, node_w)
        if start is None:  # e.g. fewer non-empty snapshots than ranks
            candidates[st] = cand_div[st] = cand_raw[st] = None
            continue
        candidates[st] = cand_div[st] = None  # until refined
        cand_raw[st] = start.cut(sg, ws, tw)
        if cand_raw[st] > prune_above:  # pruned: its unrefined cut is far above the LP cut
            continue
        if start.divergence() > tolerance * (1 + 1e-12):  # too few snapshots per rank to balance: split
            start = start.split_snapshots(node_w, P)
            pss_split = True
            cand_raw[st] = start.cut(sg, ws, tw)
            if cand_raw[st] > prune_above:
                continue
        start_owner = start.owner()
        if by_bytes and s.start_margin is not None:
            raw_bytes[st] = plan_bytes(sg, start_owner, P, pattern)
            if raw_bytes[st] > START_BYTES_MARGIN * prune_bytes():  # refining cannot close that gap
                continue
        res = _refined_start(start_owner, P, sg, node_w, ws, tw, seg, graph, s.slack, costs.total, s.refine_rounds,
                             s.refine_tol, s.gain_tol, s.seed, s.progress)
        candidates[st], cand_div[st] = res.cut, res.divergence
        if s.cap is not None and _largest_chunk(res.chunk, res.num_chunks, node_w) > costs.cap * (1 + 1e-9):
            over_cap.append(st)  # an explicit cap is honoured: this start's chunks are larger
        elif res.divergence <= tolerance * (1 + 1e-12):
            eligible[st] = res
    lvl.temporal_weight = None  # not needed any more
    if eligible and by_bytes:
        lp_bytes()
        for st, res in eligible.items():
            cand_bytes[st] = plan_bytes(sg, res.owner, P, pattern)
        key = {st: (cand_bytes[st], candidates[st]) for st in cand_bytes}
        winner = min(key, key=lambda st: key[st])
        best = eligible.get(winner)
    else:
        for st, res in eligible.items():
            if res.cut < min(cut, best.cut if best else math.inf) - 1e-9:
                winner, best = st, res
    return _StartChoice(winner, best, candidates, cand_div, cand_raw, raw_bytes, cand_bytes, skipped, tolerance,
                        pss_split, over_cap, cut_before_fm, before_fm_bytes[0] if before_fm_bytes else None)


def _partition_pgc(signal: "DynamicGraphSignal", P: int, pattern: Any, s: PGCOptions) -> "Partition":
    """PGC's pipeline (module doc, steps 1-7) as named steps."""
    t_start = time.perf_counter()
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    costs = _node_costs(signal, P, s)
    timings["setup"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    lvl = _level0_graph(signal, pattern, costs, s)
    timings["graph"] = time.perf_counter() - t0
    s = _with_effort(s, lvl.graph.dst.numel())
    t0 = time.perf_counter()
    ch = _generate(lvl, costs, P, s)
    timings["chunk_generation"] = time.perf_counter() - t0
    asg = _assign(signal, lvl, costs, ch, P, s, timings)
    t0 = time.perf_counter()
    choice = _multi_start(signal, P, pattern, lvl, costs, asg, s)
    timings["multi_start"] = time.perf_counter() - t0

    owner, chunk, C, cut, seg = asg.owner, asg.chunk, asg.num_chunks, asg.cut, lvl.seg
    if choice.best is not None:  # a refined PSS / PTS start wins: its owner is over vertex-time nodes
        cut, owner, chunk, C = choice.best.cut, choice.best.owner, choice.best.chunk, choice.best.num_chunks
        seg = None
        cost_final = torch.zeros(C, dtype=torch.float64).index_add_(0, chunk, costs.node_w) if asg.additive else None
    elif asg.additive:
        cost_final = torch.zeros(C, dtype=torch.float64).index_add_(0, chunk, lvl.node_w)
    if seg is not None:  # expand segments to their vertex-time nodes
        owner, chunk = owner.index_select(0, seg), chunk.index_select(0, seg)
    if not asg.additive:
        cost_final = costs.model.chunk_costs(signal, chunk, C).to(torch.float64)
    chunk_owner = torch.zeros(C, dtype=torch.long).scatter_(0, chunk, owner)
    loads = torch.zeros(P, dtype=torch.float64).index_add_(0, chunk_owner, cost_final)
    meta = {
        **ch.info,
        "refine_moved": asg.moved_per_level,
        "num_levels": len(ch.levels),
        "num_chunks": C,
        "cap": costs.cap,
        "cap_explicit": s.cap is not None,
        "max_chunk_cost": float(cost_final.max()) if C else 0.0,
        "starts_over_cap": choice.over_cap,
        "coarsened": lvl.coarsened,
        "effort": s.effort,
        "level0_nodes": lvl.num_nodes,
        "edge_weights": edge_weights(pattern),
        # the pattern the edge weights came from: the distributed runtime refuses a model that disagrees
        "pattern": json.dumps(pattern.to_dict()) if hasattr(pattern, "to_dict") else "",
        "workload": type(costs.model).__name__,
        "loads": loads.tolist(),
        "divergence": divergence(loads.numpy()),
        "greedy_divergence": asg.greedy_divergence,
        "greedy_cut": asg.greedy_cut,
        "cut_weight": cut,
        "candidates": choice.candidates,
        "candidate_divergence": choice.divergence,
        "candidates_raw": choice.raw_cuts,
        "candidates_raw_bytes": choice.raw_bytes,
        "pss_split": choice.pss_split,
        "candidate_bytes": choice.bytes,
        "start_margin": s.start_margin,
        "lp_cut_before_fm": choice.lp_cut_before_fm,
        "lp_bytes_before_fm": choice.lp_bytes_before_fm,
        "start": choice.winner,
        "start_tolerance": choice.tolerance,
        "starts_skipped": choice.skipped,
        "seed": s.seed,
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


