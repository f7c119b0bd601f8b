r"""Temporal coarsening: contract runs of a vertex's temporal sequence (PGC's fast path).

A vertex-time supergraph has two kinds of edges: spatial edges inside a
snapshot and temporal edges along each vertex's sequence of appearances
(:class:`~pyg_dynscale.data.supergraph.Supergraph`). For recurrent and
attention time encoders a temporal edge usually carries a whole hidden row
(e.g. 256 bytes per epoch for T-GCN with 32 hidden units) while a spatial edge
of the first layer carries an input row (8 bytes for one input feature), so
the temporal edges are the heaviest edges of the graph. Heavy-edge coarsening
-- the first step of METIS, KaHIP and of DGC's own label propagation, whose
first rounds do little else than merge the nodes of each sequence -- then
contracts every sequence. We do it in one vectorized step instead of many
label-propagation rounds:

* every sequence is cut into *segments*: consecutive appearances whose summed
  node cost stays below ``segment_cap`` (segment :math:`k` of a sequence holds
  the appearances whose exclusive prefix cost lies in
  :math:`[k c, (k+1) c)`, so a segment costs less than :math:`c +
  \max_v g_v \le` the chunk cap);
* the *quotient graph* has one node per segment (weight = summed node cost);
  a spatial edge :math:`(u, v)` becomes the edge ``(seg[u], seg[v])`` (edges
  inside a segment disappear, parallel edges are merged by
  :meth:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph.from_edges`), and
  the temporal edge between two consecutive segments of a sequence keeps its
  weight.

Cut weights are preserved exactly: any labelling of segments, expanded to
their vertex-time nodes, cuts exactly the supergraph edges whose quotient
edge it cuts (edges inside a segment are never cut). Label propagation (Eq. 2)
then runs on the quotient graph, which for a graph with :math:`N` vertex-time
nodes and sequences of mean length :math:`\bar\ell` has about :math:`N /
\bar\ell` nodes.

Temporal edge weights (:func:`temporal_edge_weights`): a recurrent block
moves one state row per cut temporal edge. An attention block (DySAT) needs
*every* earlier appearance: cutting a sequence between its positions
:math:`j` and :math:`j + 1` (0-based) moves the :math:`j + 1` earlier rows to
the later owner (the communication plan sends each row once per destination
rank), so that edge weighs :math:`w_\text{rec} + (j + 1)\, w_\text{att}`.
A window block (TM-GCN, band :math:`b`) moves :math:`\min(j + 1, b - 1)`
rows there (``pattern.temporal_edge_weight(j + 1)``).
"""
from __future__ import annotations

import math

from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import torch
from torch import Tensor

from ..compiled import backend, kernels
from .label_propagation import CSRGraph, as_numpy
from ..pattern import edge_weights

if TYPE_CHECKING:  # pragma: no cover
    from ...data.supergraph import Supergraph


def sequence_positions(supergraph: "Supergraph") -> tuple[Tensor, Tensor]:
    r"""``(seq_id [N], pos [N])`` for the entries of ``sequence_order``: the
    sequence index and the 0-based position inside it (time order)."""
    ptr = supergraph.sequence_ptr
    N = supergraph.num_nodes
    lengths = ptr[1:] - ptr[:-1]
    S = lengths.numel()
    seq_id = torch.repeat_interleave(torch.arange(S, device=ptr.device), lengths, output_size=N)
    pos = torch.arange(N, device=ptr.device) - ptr[:-1].index_select(0, seq_id) if N else seq_id
    return seq_id, pos


def attention_split(pattern: Any) -> tuple[float, float]:
    r"""``(w_rec, w_att)`` with ``temporal_edge_weight(k) = w_rec + k * w_att``
    for ``k`` attention rows (``w_att = 0`` for recurrent-only patterns, pairs
    and ``None``)."""
    if pattern is None or isinstance(pattern, (tuple, list)) or not hasattr(pattern, "temporal_edge_weight"):
        return edge_weights(pattern)[1], 0.0
    one, two = float(pattern.temporal_edge_weight(1.0)), float(pattern.temporal_edge_weight(2.0))
    return 2 * one - two, two - one


def temporal_weights(supergraph: "Supergraph", pattern: Any) -> Union[Tensor, float]:
    """:func:`temporal_edge_weights`, or the one number every temporal edge
    weighs when the pattern has no attention block (recurrent patterns,
    weight pairs): :func:`supergraph_csr`, :func:`supergraph_cut` and
    :func:`unit_cut` take either and skip the ``[M]`` array (72 MB at 9M
    temporal edges) and the passes over it."""
    w_rec, w_att = attention_split(pattern)
    return float(w_rec) if w_att == 0.0 else temporal_edge_weights(supergraph, pattern)


def min_weight(weight: Union[Tensor, float]) -> float:
    """Smallest of per-edge weights (``inf`` for none), or the constant."""
    if isinstance(weight, Tensor):
        return float(weight.min()) if weight.numel() else math.inf
    return float(weight)


def as_weight_tensor(weight: Union[Tensor, float], num_edges: int, device: Any = None) -> Tensor:
    """``[num_edges]`` float64 weights from per-edge weights or a constant."""
    if isinstance(weight, Tensor):
        return weight.to(torch.float64)
    return torch.full((num_edges,), float(weight), dtype=torch.float64, device=device)


def _kernel_weights(weight: Union[Tensor, float]) -> tuple[np.ndarray, float]:
    """``(w, c)`` as the compiled kernels take edge weights: per-edge float64
    weights and ``c = 0``, or an empty ``w`` and the constant ``c``."""

    if isinstance(weight, Tensor):
        return as_numpy(weight, torch.float64), 0.0
    return np.zeros(0, np.float64), float(weight)


def temporal_edge_weights(supergraph: "Supergraph", pattern: Any) -> Tensor:
    r"""``[M]`` bytes per epoch that cutting each temporal edge costs, in the
    order of ``supergraph.temporal_edge_index``: :math:`w_\text{rec} + (j+1)\,
    w_\text{att}` for the edge leaving position :math:`j` of its sequence
    (module doc). Constant for recurrent patterns."""
    w_rec, w_att = attention_split(pattern)
    M = supergraph.num_temporal_edges
    dev = supergraph.vertex.device
    if w_att == 0.0:
        return torch.full((M,), w_rec, dtype=torch.float64, device=dev)
    _, pos = sequence_positions(supergraph)
    ptr = supergraph.sequence_ptr
    # temporal edges leave every position except the last of each sequence, in order
    not_last = torch.ones(supergraph.num_nodes, dtype=torch.bool, device=dev)
    not_last[ptr[1:] - 1] = False
    rows = pos[not_last] + 1
    if any(getattr(b, "time_kind", None) == "window" for b in getattr(pattern, "blocks", ())):
        # a window block's rows stop growing at its band: the pattern's weight of every row count present
        table = torch.tensor([0.0] + [float(pattern.temporal_edge_weight(float(k)))
                                      for k in range(1, int(rows.max()) + 1 if rows.numel() else 1)],
                             dtype=torch.float64, device=dev)
        return table.index_select(0, rows)
    return w_rec + rows.to(torch.float64) * w_att


def _segment_sequences_compiled(supergraph: "Supergraph", node_w: Tensor, segment_cap: float) -> tuple[Tensor, int]:
    """:func:`segment_sequences` in one compiled pass (the same segments); host tensors only."""
    order, ptr = supergraph.sequence_order, supergraph.sequence_ptr
    if order.device.type != "cpu" or order.numel() == 0:
        return NotImplemented
    seg_np, S = kernels.csr.segment_ids(as_numpy(order, torch.long), as_numpy(ptr, torch.long),
                                                as_numpy(node_w, torch.float64), float(segment_cap))
    return torch.from_numpy(seg_np), int(S)


@backend.twin(_segment_sequences_compiled)
def segment_sequences(supergraph: "Supergraph", node_w: Tensor, segment_cap: float) -> tuple[Tensor, int]:
    r"""``(seg [N], S)``: cut every sequence into runs of summed node cost
    below ``segment_cap`` (module doc); ``segment_cap = inf`` keeps every
    sequence whole."""

    order, ptr = supergraph.sequence_order, supergraph.sequence_ptr
    N = order.numel()
    dev = order.device
    if N == 0:
        return torch.zeros(0, dtype=torch.long, device=dev), 0
    starts = torch.zeros(N, dtype=torch.bool, device=dev)
    starts[ptr[:-1]] = True
    if segment_cap != float("inf"):
        seq_id, _ = sequence_positions(supergraph)
        w = node_w.to(torch.float64).index_select(0, order)
        excl = torch.cumsum(w, 0) - w
        excl = excl - excl.index_select(0, ptr[:-1]).index_select(0, seq_id)  # prefix cost inside the sequence
        piece = torch.floor(excl / segment_cap).to(torch.long)
        starts[1:] |= piece[1:] != piece[:-1]
    seg_sorted = torch.cumsum(starts, 0) - 1
    seg = torch.empty(N, dtype=torch.long, device=dev)
    seg[order] = seg_sorted
    return seg, int(seg_sorted[-1]) + 1


def mapped_edges(supergraph: "Supergraph", spatial_weight: float, temporal_weight: Union[Tensor, float],
                 seg: Optional[Tensor] = None) -> tuple[Tensor, Tensor, Tensor]:
    r"""``(src, dst, weight float64)``: the spatial edges (weight
    ``spatial_weight``) then the temporal edges (``temporal_weight``), mapped
    through ``seg`` (identity when ``None``), edges that became self loops
    (inside a segment) dropped; each undirected edge once, parallel edges not
    merged."""
    se, te = supergraph.spatial_edge_index, supergraph.temporal_edge_index
    dev = se.device
    src, dst = torch.cat([se[0], te[0]]), torch.cat([se[1], te[1]])
    w = torch.cat([torch.full((se.shape[1],), float(spatial_weight), dtype=torch.float64, device=dev),
                   as_weight_tensor(temporal_weight, te.shape[1], dev)])
    if seg is not None:
        src, dst = seg.index_select(0, src), seg.index_select(0, dst)
    keep = src != dst
    return src[keep], dst[keep], w[keep]


_SYMMETRY: dict = {}  # (storage, version, shape) of spatial_edge_index -> maybe_symmetric result


def _maybe_symmetric(supergraph: "Supergraph") -> bool:
    """:func:`~pyg_dynscale.partition.compiled.csr.maybe_symmetric` of the spatial edges, cached per
    storage and in-place version of ``spatial_edge_index`` (a few entries)."""
    from ..compiled import csr

    se = supergraph.spatial_edge_index
    key = (se.data_ptr(), se._version, tuple(se.shape), supergraph.num_nodes)
    if key not in _SYMMETRY:
        if len(_SYMMETRY) >= 8:
            _SYMMETRY.pop(next(iter(_SYMMETRY)))
        _SYMMETRY[key] = bool(csr.maybe_symmetric(supergraph.num_nodes, as_numpy(se[0], torch.long), as_numpy(se[1], torch.long)))
    return _SYMMETRY[key]


def _known_integral(graph: "CSRGraph", integral: bool, nonneg: bool) -> "CSRGraph":
    """Mark ``graph`` integral when its weights are sums of whole-number
    weights, sparing :meth:`CSRGraph.integral` a scan; with ``nonneg``
    weights, twice the total bounds any sum of them (``_abs_bound``)."""
    if integral:
        graph._integral = True
    if nonneg:
        graph._abs_bound = 2.0 * graph.total_weight()
    return graph


def _supergraph_csr_compiled(supergraph: "Supergraph", spatial_weight: float, temporal_weight: Union[Tensor, float],
                             seg: Optional[Tensor] = None, num_segments: Optional[int] = None) -> "CSRGraph":
    """:func:`supergraph_csr` by the compiled counting sorts (the same graph); host tensors only."""
    from ..compiled import csr

    se, te = supergraph.spatial_edge_index, supergraph.temporal_edge_index
    if se.device.type != "cpu":
        return NotImplemented
    n = supergraph.num_nodes if seg is None else int(num_segments)
    ws = float(spatial_weight)
    node_map = as_numpy(seg, torch.long) if seg is not None else np.zeros(0, np.int64)
    s1, d1, s2, d2 = (as_numpy(x, torch.long) for x in (se[0], se[1], te[0], te[1]))
    none = np.zeros(0, np.float64)
    # a constant temporal weight travels as c2 (w2 empty); placement_types checks it like an array
    w2, c2 = _kernel_weights(temporal_weight)
    w2_check = w2 if w2.shape[0] else np.array([c2])
    integral = ws == round(ws) and bool(kernels.lp.is_integral(w2_check))
    nonneg = ws >= 0 and min_weight(temporal_weight) >= 0
    if ws > 0 and integral and se.shape[1] > 0 and _maybe_symmetric(supergraph):
        ptr, d, w = csr.edges_to_csr(n, node_map, s1, d1, none, 2.0 * ws, False, s2, d2, w2, c2,
                                             backend.threads(), *csr.placement_types(n, 2.0 * ws, w2_check))
        if csr.is_symmetric(ptr, d, w, backend.threads()):
            return _known_integral(CSRGraph.from_csr(n, torch.from_numpy(ptr), torch.from_numpy(d), torch.from_numpy(w)),
                                   integral, nonneg)
    ptr, d, w = csr.edges_to_csr(n, node_map, s1, d1, none, ws, True, s2, d2, w2, c2, backend.threads(),
                                         *csr.placement_types(n, ws, w2_check))
    return _known_integral(CSRGraph.from_csr(n, torch.from_numpy(ptr), torch.from_numpy(d), torch.from_numpy(w)),
                           integral, nonneg)


@backend.twin(_supergraph_csr_compiled)
def supergraph_csr(supergraph: "Supergraph", spatial_weight: float, temporal_weight: Union[Tensor, float],
                   seg: Optional[Tensor] = None, num_segments: Optional[int] = None) -> "CSRGraph":
    r"""The weighted supergraph -- or, given ``seg``, its segment quotient --
    as an undirected :class:`~pyg_dynscale.partition.pgc.label_propagation.CSRGraph`.

    Equal to :meth:`CSRGraph.from_edges` over the spatial edges (weight
    ``spatial_weight``) followed by the temporal edges (``temporal_weight``),
    mapped through ``seg`` (edges inside a segment dropped, parallel edges
    merged), without materializing those edge
    lists. With the numba backend, integral weights and ``spatial_weight >
    0``, the spatial edges are first taken as a *symmetric* list (both
    directions stored, as loaders store undirected graphs): only their forward
    entries are placed, at twice the weight, which halves the work; the result
    is kept only if it is symmetric -- exactly when the mapped spatial edge
    counts are, i.e. when it equals the general build -- else the general
    build runs.

    Args:
        supergraph (Supergraph): :math:`N` vertex-time nodes.
        spatial_weight (float): bytes per cut spatial edge.
        temporal_weight (Tensor or float): ``[M]`` bytes per cut temporal
            edge, or one number for all (:func:`temporal_weights`).
        seg (Tensor, optional): ``[N]`` segment of every node (:func:`segment_sequences`).
        num_segments (int, optional): :math:`S` (required with ``seg``).
    """

    n = supergraph.num_nodes if seg is None else int(num_segments)
    return CSRGraph.from_edges(n, *mapped_edges(supergraph, float(spatial_weight), temporal_weight, seg))


def _unit_cut_compiled(unit: Tensor, rank: Tensor, edge_index: Tensor, weight: Union[Tensor, float]) -> float:
    """:func:`unit_cut` in one compiled pass; host tensors only."""
    if edge_index.device.type != "cpu":
        return NotImplemented
    return float(kernels.csr.unit_cut(
        as_numpy(unit, torch.long), as_numpy(rank, torch.long), as_numpy(edge_index[0], torch.long), as_numpy(edge_index[1], torch.long),
        *_kernel_weights(weight)))


@backend.twin(_unit_cut_compiled)
def unit_cut(unit: Tensor, rank: Tensor, edge_index: Tensor, weight: Union[Tensor, float]) -> float:
    """Bytes of the edges ``edge_index [2, E]`` cut when node ``v`` sits on
    ``rank[unit[v]]`` (``unit``: each node's snapshot or vertex), at
    ``weight`` (``[E]`` or one number per edge)."""

    node_rank = rank.index_select(0, unit)
    cut = node_rank.index_select(0, edge_index[0]) != node_rank.index_select(0, edge_index[1])
    if not isinstance(weight, Tensor):
        return float(weight) * float(cut.sum())
    return float(weight[cut].to(torch.float64).sum())


def _supergraph_cut_compiled(supergraph: "Supergraph", owner: Tensor, spatial_weight: float,
                             temporal_weight: Union[Tensor, float]) -> float:
    """:func:`supergraph_cut` in one compiled pass; host tensors only."""
    se, te = supergraph.spatial_edge_index, supergraph.temporal_edge_index
    if se.device.type != "cpu":
        return NotImplemented
    return float(kernels.csr.edge_list_cut(
        as_numpy(owner, torch.long), as_numpy(se[0], torch.long), as_numpy(se[1], torch.long), float(spatial_weight),
        as_numpy(te[0], torch.long), as_numpy(te[1], torch.long), *_kernel_weights(temporal_weight)))


@backend.twin(_supergraph_cut_compiled)
def supergraph_cut(supergraph: "Supergraph", owner: Tensor, spatial_weight: float,
                   temporal_weight: Union[Tensor, float]) -> float:
    """Bytes of the supergraph edges cut by ``owner`` (``[N]``): spatial edges
    at ``spatial_weight``, temporal edges at ``temporal_weight`` (``[M]``, or
    one number for all)."""

    se, te = supergraph.spatial_edge_index, supergraph.temporal_edge_index
    cut_s = (owner.index_select(0, se[0]) != owner.index_select(0, se[1])).sum()
    cut_mask = owner.index_select(0, te[0]) != owner.index_select(0, te[1])
    if not isinstance(temporal_weight, Tensor):
        return float(spatial_weight) * float(cut_s) + float(temporal_weight) * float(cut_mask.sum())
    return float(spatial_weight) * float(cut_s) + float(temporal_weight[cut_mask].to(torch.float64).sum())
