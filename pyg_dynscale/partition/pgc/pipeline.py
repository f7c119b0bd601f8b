r"""Partitioning by graph chunks, PGC (DGC §4).

Pipeline (all steps vectorized except the greedy loop over chunks); this
module runs the steps in order, each step's code lives in its stage's module:

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
   from unique labels (:func:`.chunks.generate_chunks`, :mod:`.label_propagation`). The cap is in workload
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
   (balance, then cut) within ``(1 +/- slack)`` of the mean load, then FM
   (:mod:`.fm`, ``fm_tries``).
6. **Uncoarsening refinement** (optional, ``refine_rounds``,
   :func:`.chunks.refine_levels`): label
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
7. **Multi-start** (``starts``, :mod:`.starts`): label propagation only makes local moves
   and does not find a contiguous snapshot range per rank (static graphs over
   many snapshots) or whole sequences per rank, the optimum on some graphs.
   The balanced PSS and PTS partitions are therefore refined the same way
   (step 6, on level-0 nodes split where the start's owner changes,
   :func:`.starts._refined_start`) when their unrefined cut is within
   ``start_margin`` of the LP cut and their unrefined plan bytes within
   :data:`.starts.START_BYTES_MARGIN` of LP's. A PSS start whose snapshot ranges
   miss the balance tolerance (but passes the cut test) splits its boundary
   snapshots (:class:`.starts._Start`).
   Among the candidates with :math:`\lambda`
   within ``max_divergence`` (default PGC's band ``max((1 + slack) / (1 -
   slack), lambda_lp)``) the one whose communication plan moves the fewest
   bytes wins (the lowest cut weight when ``pattern`` is a bare weight pair).
   Skipped above :data:`.starts.MULTI_START_MAX_ENTRIES`.
8. **Round balance** (``balance="rounds"``, :mod:`.rebalance`): moves work
   off the rank the decomposed runtime waits for in each scan round.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import torch
from torch import Tensor

from ...errors import PartitionError
from ..compiled import backend
from ..costs.workload import WorkloadModel, resolve_workload
from ..partition import Partition, check_num_parts
from ..pattern import edge_weights
from .assign import ChunkGraph, assign_chunks, divergence, rank_loads, refine_chunks
from .chunks import FM_LEVEL_MAX_NODES, generate_chunks, refine_levels
from .coarsen import min_weight, segment_sequences, supergraph_csr, temporal_edge_weights, temporal_weights
from .fm import fm_key, fm_refine, multilevel_fm
from .label_propagation import compact_labels
# the options' object, its presets and defaults (EFFORT, STARTS, START_MARGIN are read here by their old names)
from .options import EFFORT, FAST_ABOVE, START_MARGIN, STARTS, PGCOptions  # noqa: F401
from .rebalance import rebalance_partition
from .stages import Assignment, Chunks, Level0, NodeCosts
from .starts import MULTI_START_MAX_ENTRIES, multi_start

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

#: ``threads=None``: the compiled kernels and torch run on one thread. numba's
#: parallel kernels spin-wait for their workers, so a parallel partition
#: collapses when another process holds a core (docs/pgc.md, "Threads");
#: ``threads=k`` asks for ``k`` on a machine known to be idle.
DEFAULT_THREADS = 1
TORCH_THREADS = 1
#: multilevel FM runs on the chunk graph after Algorithm 1 (step 5b, :mod:`.fm`):
#: the runs differ by seed only and their results spread widely, so several
#: are kept (docs/pgc.md, step 5b)
FM_TRIES = 8
#: the multilevel FM coarsens the chunk graph to about this many nodes per rank
FM_COARSEN_TO = 4


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


def _node_costs(signal: "DynamicGraphSignal", P: int, s: PGCOptions) -> NodeCosts:
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
    return NodeCosts(model, node_w, total, biggest, cap)


def _level0_graph(signal: "DynamicGraphSignal", pattern: Any, costs: NodeCosts, s: PGCOptions) -> Level0:
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
    return Level0(graph, seg, n0, w0, ws, tw, use)


def _generate(lvl: Level0, costs: NodeCosts, P: int, s: PGCOptions) -> Chunks:
    """Steps 3-4: size-constrained label propagation and chunk coarsening."""
    chunk, C, levels, info = generate_chunks(lvl.graph, lvl.node_w, costs.cap, seed=s.seed, max_rounds=s.max_rounds,
                                             coarse_rounds=s.coarse_rounds, tol=s.tol, gain_tol=s.gain_tol,
                                             max_levels=s.max_levels, max_chunks=s.max_chunks, progress=s.progress)
    if C < P:
        raise PartitionError("cap", f"label propagation produced {C} chunks for {P} ranks (cap {costs.cap:g}).",
                             "use a smaller cap or a larger chunks_per_part so that every rank can get a chunk.")
    return Chunks(chunk, C, levels, info)


def _assign(signal: "DynamicGraphSignal", lvl: Level0, costs: NodeCosts, ch: Chunks, P: int, s: PGCOptions,
            timings: dict) -> Assignment:
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
        before_fm, _ = refine_levels(ch.levels, greedy_owner, P, costs.total, s.slack, s.refine_rounds, s.refine_tol,
                               s.gain_tol, s.seed, False)
    timings["fm"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    owner, moved = refine_levels(ch.levels, chunk_owner, P, costs.total, s.slack, s.refine_rounds, s.refine_tol, s.gain_tol,
                           s.seed, s.progress, stats=ch.info, fm_max_nodes=FM_LEVEL_MAX_NODES if s.fm_tries > 0 else 0)
    if any(moved):
        chunk, C = compact_labels(chunk * P + owner)  # split chunks that straddle ranks
    timings["refinement"] = time.perf_counter() - t0
    # cut weight on the level-0 graph: exactly the supergraph's (coarsening keeps cut weights)
    return Assignment(owner, chunk, C, moved, greedy_cut, greedy_div, lvl.graph.cut(owner), additive, before_fm)


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
    choice = multi_start(signal, P, pattern, lvl, costs, asg, s)
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


