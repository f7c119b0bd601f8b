"""Per-snapshot attribute storage of :class:`DynamicGraphSignal`.

A field holds one attribute (features, targets, an extra) for all snapshots at
once, concatenated, so that whole-signal operations (slicing, moving to a device,
the supergraph view) are tensor operations rather than Python loops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
from torch import Tensor

FieldLevel = Literal["node", "edge", "graph", "ragged"]
FIELD_LEVELS: tuple[str, ...] = ("node", "edge", "graph", "ragged")


@dataclass
class SnapshotField:
    r"""One attribute of every snapshot.

    * ``level="node"``: one row per vertex-time node; ``values`` is
      :math:`[\sum_t |V_t|, \ldots]`, split by the signal's ``node_ptr``.
    * ``level="edge"``: one row per edge; split by the signal's ``edge_ptr``.
    * ``level="graph"``: one tensor per snapshot of a common shape; ``values`` is
      :math:`[T, \ldots]`.
    * ``level="ragged"``: a per-snapshot tensor with its own length, concatenated
      along ``cat_dim`` and split by ``ptr`` (:math:`[T+1]`), e.g. the
      ``edge_label_index`` of link prediction (``cat_dim=1``).
    """

    level: FieldLevel
    values: Tensor
    ptr: Optional[Tensor] = None
    cat_dim: int = 0

    def to(self, device: torch.device | str) -> "SnapshotField":
        return SnapshotField(
            self.level,
            self.values.to(device),
            None if self.ptr is None else self.ptr.to(device),
            self.cat_dim,
        )


def default_cat_dim(name: str) -> int:
    """PyG's convention: attributes whose name contains ``index`` are ``[2, L]``."""
    return 1 if "index" in name else 0


def ptr_from_counts(counts: Tensor) -> Tensor:
    """``[T] -> [T+1]`` exclusive prefix sum (int64)."""
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=counts.device)
    torch.cumsum(counts.to(torch.long), dim=0, out=ptr[1:])
    return ptr


def gather_ranges(ptr: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    r"""Concatenate the ranges ``ptr[i]:ptr[i+1]`` for ``i`` in ``index``.

    Vectorized (no Python loop over the ranges).

    Returns:
        ``(positions, new_ptr)``: the gathered positions :math:`[\sum |range|]`
        and the prefix sums of the selected range lengths :math:`[|index|+1]`.
    """
    counts = (ptr[1:] - ptr[:-1])[index]
    new_ptr = ptr_from_counts(counts)
    total = int(new_ptr[-1])
    shift = torch.repeat_interleave(ptr[:-1][index] - new_ptr[:-1], counts, output_size=total)
    positions = torch.arange(total, dtype=torch.long, device=ptr.device) + shift
    return positions, new_ptr
