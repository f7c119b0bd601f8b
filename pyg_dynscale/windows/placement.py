r"""Where the snapshots of windowed training live under a process group, and
what crosses the group (ReInc §3.4).

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
the ranks' shares, :func:`sum_hook`, and counts the bytes); the batch losses
(8 bytes per step) stay on the device and are summed over the ranks by one
all-reduce at the epoch's end; ``evaluate()`` all-reduces its sums (a few
floats). :class:`Traffic` holds the counts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["PLACEMENTS", "Traffic", "check_placement", "eval_share", "held_snapshots", "sum_hook"]

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


@dataclass
class Traffic:
    """Bytes this rank handed to collectives, by kind (each all-reduce's
    buffer counted once per rank; a ring all-reduce sends about
    :math:`2(R-1)/R` times that per rank).

    Attributes:
        features: feature rows sent (windowed training sends none: every
            window is computed where its snapshots are).
        gradients: ``DistributedDataParallel``'s gradient all-reduces
            (the parameter bytes once per optimizer step).
        loss: the batch losses' all-reduce (8 bytes per step, one all-reduce
            per epoch; node batches add 8 bytes per (node batch, global batch)
            pair for their counts, one all-reduce per epoch over gloo).
        metrics: ``evaluate()``'s sums.
        setup: ``DistributedDataParallel``'s broadcast of rank 0's
            parameters at construction.
        steps: optimizer steps taken under the group.
    """

    features: int = 0
    gradients: int = 0
    loss: int = 0
    metrics: int = 0
    setup: int = 0
    steps: int = 0

    def as_dict(self) -> dict:
        return {"features": self.features, "gradients": self.gradients, "loss": self.loss, "metrics": self.metrics,
                "setup": self.setup, "steps": self.steps}


def sum_hook(traffic, bucket):  # no annotations: DDP accepts only its own types there, and this module's are strings
    """A ``DistributedDataParallel`` comm hook: all-reduce (sum) the bucket's
    gradients (each rank's gradient is already its share of the global batch
    loss, so the sum is the gradient of that loss; DDP's default hook
    would average) and count the bytes in ``traffic`` (a :class:`Traffic`)."""
    import torch.distributed as dist

    buf = bucket.buffer()
    traffic.gradients += buf.numel() * buf.element_size()
    fut = dist.all_reduce(buf, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])
