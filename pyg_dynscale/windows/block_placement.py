r"""Where the snapshots of windowed training live under a process group
(the *block* placement of windows over ranks, and its replicated
alternative), and what crosses the group (ReInc §3.4).

**Placements.** The training windows are cut into ``blocks`` consecutive
blocks (:mod:`~pyg_dynscale.windows.batching`); rank :math:`r` of :math:`R`
computes blocks :math:`rP/R \ldots (r+1)P/R - 1` of every global batch, and
the windows of each evaluation split are cut into :math:`R` consecutive
parts, part :math:`r` on rank :math:`r`.

* ``"blocks"`` (ReInc's overlapped snapshot placement, Fig. 4c): rank
  :math:`r` holds only the snapshots its windows read,

  .. math::
      \mathcal{S}_r = \bigcup_{w \in \mathcal{W}_r} \{s_w, \ldots, e_w + H - 1\},

  its training blocks' snapshot range with the ``lags - 1`` boundary
  snapshots before its first window's target (the overlap), and the ranges
  of its share of the validation and test windows. Features, edges and
  targets of every other snapshot are dropped (a copy of the rank's rows,
  not a view that would keep the whole storage alive). Every window is
  computed where its snapshots are, so no feature row ever crosses the group.
* ``"replicated"`` (PyGT's Dask + DDP placement): every rank holds the whole
  signal; the window indices are split exactly as above.

Both compute the same numbers. The only collective of a training step is
the gradient all-reduce of ``DistributedDataParallel`` (a comm hook that sums
the ranks' shares, :func:`~pyg_dynscale.training.gradients.sum_hook`, and
counts the bytes); the batch losses (8 bytes per step) stay on the device and
are summed over the ranks by one all-reduce at the epoch's end;
``evaluate()`` all-reduces its sums (a few floats). ``WindowTrainer.traffic()``
reports the bytes.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["PLACEMENTS", "check_placement", "eval_share", "held_snapshots"]

PLACEMENTS = ("blocks", "replicated")


def check_placement(placement: Optional[str]) -> str:
    """``placement`` (``None``: ``"blocks"``) checked against :data:`PLACEMENTS`."""
    if placement is None:
        return "blocks"
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ModelInputError("placement", f"is {placement!r}.",
                              f"use one of {PLACEMENTS} (blocks: each rank holds its snapshot block; replicated: the "
                              "whole signal on every rank).")
    return placement


def eval_share(windows: Tensor, world: int, rank: int) -> Tensor:
    """Rank ``rank``'s consecutive part of the evaluation windows ``windows``
    (``numpy.array_split`` sizes, as the training blocks)."""
    return torch.tensor_split(windows, world)[rank]


def held_snapshots(starts: Tensor, windows: list, lags: int, horizon: int) -> Tensor:
    r"""``[S_r]`` sorted global indices of the snapshots windows ``windows``
    (a list of window-index tensors) read: :math:`s_w \ldots e_w + H - 1`
    for every window (inputs and targets)."""
    wins = torch.cat([w.reshape(-1) for w in windows]) if windows else torch.zeros(0, dtype=torch.long)
    if wins.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    span = lags + horizon - 1
    s = starts.index_select(0, wins)
    return torch.unique((s[:, None] + torch.arange(span)).reshape(-1))
