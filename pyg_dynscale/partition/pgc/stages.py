r"""The records PGC's steps hand each other (:mod:`.pipeline`): node costs,
the level-0 graph, the chunks and the assignment. Data only; each step's
code is in its stage's module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor

from .label_propagation import CSRGraph


@dataclass
class NodeCosts:
    """Step 1: node costs of the workload model and the chunk cap."""

    model: Any
    node_w: Tensor   # [N] float64
    total: float
    biggest: float
    cap: float


@dataclass
class Level0:
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
class Chunks:
    """Steps 3-4: chunks on the level-0 graph and the coarsening hierarchy."""

    chunk: Tensor
    num_chunks: int
    levels: list
    info: dict


@dataclass
class Assignment:
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
