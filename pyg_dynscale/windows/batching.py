r"""Which windows form each global batch, and how the windows of one batch
step become one graph.

**Block order.** The training windows :math:`0 \ldots W-1` (start order) are
cut into :math:`P` = ``blocks`` consecutive blocks (``numpy.array_split``
sizes: the first :math:`W \bmod P` blocks get one more). With
:math:`b = \text{batch\_size} / P`, global batch :math:`k` is the
concatenation over blocks :math:`r = 0 \ldots P-1` of block :math:`r`'s
windows :math:`kb \ldots (k+1)b - 1` (fewer, or none, at a block's end).
With :math:`P = 1` this is ``DataLoader(range(W), batch_size,
shuffle=False)``: the windows in order. ``shuffle=True`` permutes the windows
inside each block once per epoch (a generator seeded with ``seed + epoch``, the
same on every rank).

**Disjoint union.** The :math:`B` windows of a batch are independent
sequences, so their snapshots at the same step :math:`j` are stacked as one
block-diagonal graph: window :math:`b`'s rows are offset by the rows of
windows :math:`0 \ldots b-1`, its edges by the same offset. A per-snapshot
module whose rows depend only on their connected component (every PyGT cell:
GCN/Chebyshev/diffusion normalizations are per node) computes on the union
exactly what it computes on each window alone.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

__all__ = ["block_batches", "block_batch_parts"]


def block_batch_parts(windows: Tensor, batch_size: int, blocks: int, shuffle: bool = False,
                      generator: Optional[torch.Generator] = None) -> list:
    """The global batches of one epoch, each as the list of its ``blocks``
    per-block pieces (``[b_k,r]`` window indices; a piece may be empty)."""
    parts = list(torch.tensor_split(windows, blocks))
    if shuffle:
        parts = [p[torch.randperm(p.numel(), generator=generator)] for p in parts]
    per = batch_size // blocks
    longest = max(int(p.numel()) for p in parts)
    return [[p[k * per:(k + 1) * per] for p in parts] for k in range(math.ceil(longest / per))]


def block_batches(windows: Tensor, batch_size: int, blocks: int, shuffle: bool = False,
                  generator: Optional[torch.Generator] = None) -> list:
    """The global batches of one epoch: a list of ``[B_k]`` window-index
    tensors (see the module docstring for the order)."""
    return [torch.cat(chunk) for chunk in block_batch_parts(windows, batch_size, blocks, shuffle, generator)]
