"""Reference implementations the package is checked against (not shipped).

``contract`` builds the label-level graph from an edge list with sorts, the
reference of ``CSRGraph.contract``. ``coarsen_temporal`` materializes PGC's temporal coarsening (segments and the
quotient graph's edges) that :func:`pyg_dynscale.partition.pgc.coarsen.supergraph_csr`
builds without materializing, so the tests can inspect the segments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pyg_dynscale.partition.pgc.coarsen import mapped_edges, segment_sequences

Supergraph = Any


@dataclass
class TemporalCoarsening:
    r"""Segments of the temporal sequences and the quotient graph's edges.

    Attributes:
        seg (Tensor): ``[N]`` segment of every vertex-time node (segments are
            numbered in ``sequence_order``: by vertex, then time).
        num_segments (int): :math:`S`.
        node_w (Tensor): ``[S]`` summed node cost of each segment.
        src, dst, weight (Tensor): quotient edges, each undirected edge once
            (parallel edges not yet merged), float64 byte weights.
    """

    seg: Tensor
    num_segments: int
    node_w: Tensor
    src: Tensor
    dst: Tensor
    weight: Tensor


def coarsen_temporal(supergraph: "Supergraph", node_w: Tensor, spatial_weight: float, temporal_weight: Tensor,
                     segment_cap: float) -> TemporalCoarsening:
    r"""Contract sequence segments (module doc).

    Args:
        supergraph (Supergraph): :math:`N` vertex-time nodes.
        node_w (Tensor): ``[N]`` additive node costs.
        spatial_weight (float): bytes per cut spatial edge.
        temporal_weight (Tensor): ``[M]`` bytes per cut temporal edge
            (:func:`temporal_edge_weights`).
        segment_cap (float): segments cost less than ``segment_cap + max(node_w)``.

    Returns:
        :class:`TemporalCoarsening`.
    """
    seg, S = segment_sequences(supergraph, node_w, segment_cap)
    sw = torch.zeros(S, dtype=torch.float64, device=seg.device).index_add_(0, seg, node_w.to(torch.float64))
    return TemporalCoarsening(seg, S, sw, *mapped_edges(supergraph, spatial_weight, temporal_weight, seg))


def contract(
    labels: Tensor, num_labels: int, src: Tensor, dst: Tensor, weight: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""The label-level graph: each undirected pair ``a < b`` of distinct labels
    once, with the summed weight of the edges between them.

    Args:
        labels: ``[n]`` compact labels. src, dst, weight: ``[E]`` edges, each
            undirected edge given once (either direction).

    Returns:
        ``(a [P], b [P], w [P])`` with ``a < b``.
    """
    la, lb = labels[src], labels[dst]
    keep = la != lb
    la, lb, w = la[keep], lb[keep], weight[keep].to(torch.float64)
    lo, hi = torch.minimum(la, lb), torch.maximum(la, lb)
    key, perm = torch.sort(lo * num_labels + hi, stable=True)
    ukey, inv = torch.unique_consecutive(key, return_inverse=True)
    wsum = torch.zeros(ukey.numel(), dtype=torch.float64, device=labels.device).index_add_(0, inv, w[perm])
    return ukey // num_labels, ukey % num_labels, wsum
