r"""The operation counts of one epoch's critical path, for every cost model.

Two models price a partition's epoch on the decomposed runtime
(:mod:`pyg_dynscale.distributed.decomposed_engine`): ``scheme="auto"``
(:mod:`~pyg_dynscale.partition.schemes.auto`, constants :class:`~pyg_dynscale.partition.schemes.auto.CostModel` in seconds per element,
per step, per collective) and the round-aware workload model
(:mod:`~pyg_dynscale.partition.costs.rounds`, constants :class:`~pyg_dynscale.partition.costs.rounds.RoundWorkload`
fitted to measured per-rank compute), which PGC's round balance
(:mod:`~pyg_dynscale.partition.pgc.rebalance`) and the workload reports use. They count the same
operations -- here, once -- and differ only in their constants.

For :math:`R` ranks, the structure owner :math:`o` and the time owner
:math:`\tau` of a partition:

* per rank :math:`r`: the owned rows :math:`|V_r| = |\{v : o(v) = r\}|`, the
  spatial edges into them :math:`|E_r|`, and the halo rows :math:`|H_r|`, the
  distinct sources of cut spatial edges into :math:`V_r`: exactly the rows
  :math:`r` receives in each spatial exchange of the
  :class:`~pyg_dynscale.partition.CommunicationPlan` (all spatial layers share
  one row set). A pattern without spatial layers aggregates nothing:
  :math:`|E_r| = |H_r| = 0`;
* per round :math:`k` and rank :math:`r`: the time-encoder rows
  :math:`n_{k,r}` and the longest piece :math:`L_{k,r}`. With a recurrent
  block a sequence whose appearances have different time owners is cut into
  pieces (maximal runs of one owner), and round :math:`k` scans the pieces
  with :math:`k` pieces before them
  (:func:`~pyg_dynscale.partition.plan.segment_depth`); the rounds are
  :meth:`~pyg_dynscale.partition.CommunicationPlan.temporal_rounds` of them
  (``1`` when nothing is cut). Without a recurrent block the time encoder
  (attention, window) has no dependent steps: one round holding every rank's
  time-owned rows, :math:`L = 0`.

The critical path a model prices is
:math:`\max_r s_r + \sum_k \max_r u_{k,r}` (every round ends in an exchange
all ranks wait for), with :math:`s_r` linear in the structure counts and
:math:`u_{k,r}` in the round counts; each model's docs give its constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor

from ..plan import segment_depth
from .workload import WorkloadModelError

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

__all__ = ["EpochCounts", "epoch_counts"]


@dataclass
class EpochCounts:
    r"""Operation counts of a partition's epoch (module doc).

    Attributes:
        owned (Tensor): ``[R]`` float64 owned rows :math:`|V_r|`.
        edges (Tensor): ``[R]`` float64 spatial edges into them :math:`|E_r|`.
        halo (Tensor): ``[R]`` float64 halo rows :math:`|H_r|`.
        time_rows (Tensor): ``[D, R]`` float64 time-encoder rows :math:`n_{k,r}`
            per round and rank (``D = 1`` without a recurrent block).
        longest (Tensor): ``[D, R]`` float64 longest piece :math:`L_{k,r}` (the
            scan steps of round :math:`k` on rank :math:`r`; ``0`` without a
            recurrent block).
        recurrent (int): :math:`b`, the pattern's recurrent blocks (each scans
            the same pieces).
    """

    owned: Tensor
    edges: Tensor
    halo: Tensor
    time_rows: Tensor
    longest: Tensor
    recurrent: int

    @property
    def num_rounds(self) -> int:
        """:math:`D`: scan rounds of a recurrent time encoder (``1`` when no
        sequence is cut or without a recurrent block)."""
        return int(self.time_rows.shape[0])

    def critical_steps(self) -> int:
        r""":math:`\sum_k \max_r L_{k,r}`: the dependent scan steps of one
        recurrent block on the critical path (``0`` without one)."""
        return int(self.longest.max(1).values.sum()) if self.recurrent else 0


def _recurrent_blocks(pattern: Any) -> int:
    blocks = getattr(pattern, "blocks", None)
    if blocks is None:  # a (spatial, temporal) weight pair or None: one recurrent block
        return 1
    return sum(1 for b in blocks if getattr(b, "time_kind", "recurrent") == "recurrent")


def _has_spatial(pattern: Any) -> bool:
    blocks = getattr(pattern, "blocks", None)
    return True if blocks is None else any(len(getattr(b, "spatial_widths", (1,))) > 0 for b in blocks)


def _owners(part: Any) -> tuple[Tensor, Tensor, int]:
    if isinstance(part, Tensor):
        owner = part.to(torch.long)
        return owner, owner, int(owner.max()) + 1 if owner.numel() else 1
    return part.owner.to(torch.long), part.temporal_owner.to(torch.long), int(part.num_parts)


def epoch_counts(signal: "DynamicGraphSignal", part: Any, pattern: Any = None,
                 num_parts: Optional[int] = None) -> EpochCounts:
    r"""The operation counts of ``part``'s epoch (module doc), :math:`O(N + E)`.

    Args:
        signal: the dynamic graph (:math:`N` vertex-time nodes).
        part: a :class:`~pyg_dynscale.partition.partition.Partition` (its
            ``owner`` for the structure encoder, ``temporal_owner`` for the
            time encoder) or an owner tensor ``[N]`` (both owners).
        pattern: the model's :class:`~pyg_dynscale.partition.DependencyPattern`
            (which blocks are recurrent, whether any has spatial layers);
            ``None`` or a weight pair: one recurrent block with spatial layers.
        num_parts: :math:`R` when ``part`` is a tensor (default ``owner.max() + 1``).
    """
    owner, town, R = _owners(part)
    if num_parts is not None:
        R = int(num_parts)
    sg = signal.supergraph()
    if owner.numel() != sg.num_nodes:
        raise WorkloadModelError(f"owner has {owner.numel()} entries but the signal has {sg.num_nodes} vertex-time nodes.")
    src, dst = sg.spatial_edge_index
    owned = torch.bincount(owner, minlength=R).to(torch.float64)
    if _has_spatial(pattern):
        od = owner[dst]
        edges = torch.bincount(od, minlength=R).to(torch.float64)
        cross = owner[src] != od
        # distinct (rank, source) pairs: a halo row is received once per rank, whatever edges read it
        key = torch.unique(od[cross] * sg.num_nodes + src[cross])
        halo = torch.bincount(key // sg.num_nodes, minlength=R).to(torch.float64)
    else:
        edges = halo = torch.zeros(R, dtype=torch.float64)

    b = _recurrent_blocks(pattern)
    so, sp = sg.sequence_order, sg.sequence_ptr
    if b == 0 or so.numel() == 0:  # no dependent steps: one round of the time-owned rows
        rows = torch.bincount(town, minlength=R).to(torch.float64)[None]
        return EpochCounts(owned, edges, halo, rows, torch.zeros_like(rows), b)
    depth = segment_depth(so, sp, town)
    D = int(depth.max()) + 1
    # pieces: maximal runs of one time owner along a sequence (sequence order)
    o = town[so]
    new = torch.zeros(so.numel(), dtype=torch.bool)
    new[sp[:-1]] = True
    new[1:] |= o[1:] != o[:-1]
    pid = torch.cumsum(new.long(), 0) - 1
    plen = torch.bincount(pid).to(torch.float64)
    cell = depth[so][new] * R + o[new]
    rows = torch.zeros(D * R, dtype=torch.float64).index_add_(0, cell, plen).view(D, R)
    longest = torch.zeros(D * R, dtype=torch.float64).scatter_reduce_(0, cell, plen, reduce="amax").view(D, R)
    return EpochCounts(owned, edges, halo, rows, longest, b)
