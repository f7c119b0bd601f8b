r"""The per-window loss of windowed training: each window's term is the mean
of the row losses over its target rows,

.. math::
    \ell_w = \frac{1}{|T_w|} \sum_{r \in T_w} \ell(\hat Y_r, Y_r),

and a batch's loss the mean of :math:`\ell_w` over its windows with target
rows (:class:`~pyg_dynscale.windows.WindowTrainer`); shared by the
whole-snapshot path and node mini-batches
(:mod:`~pyg_dynscale.windows.node_batches`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["window_mean", "check_widths", "aligned"]


def window_mean(per: Tensor, seg: Tensor, counts: Tensor) -> tuple:
    """Per-window mean of row values ``per`` (``seg``: the window of each row,
    on the device; ``counts``: rows per window, a host tensor) over the
    windows with rows, and their mask (host). The windows kept are chosen on
    the host: no boolean mask of a device tensor (whose size the host would
    wait for)."""
    sums = per.new_zeros(counts.numel()).index_add_(0, seg, per)
    has = counts > 0
    if bool(has.all()):
        return sums / counts.to(per.device, per.dtype), has
    keep = has.nonzero().flatten()
    return sums.index_select(0, keep.to(per.device)) / counts[keep].to(per.device, per.dtype), has


def check_widths(pred: Tensor, y: Tensor, loss_kind: str) -> None:
    """A prediction row must have the target's width (``ce``: one score per class)."""
    if loss_kind == "ce":
        ok = pred.dim() == 2 and y.dim() == 1
    else:
        p = pred.shape[1:]
        if len(p) == 1 and p[0] == 1 and y.dim() == 1:
            p = torch.Size([])
        ok = p == y.shape[1:]
    if not ok:
        raise ModelInputError(
            "head", f"the prediction rows have shape {list(pred.shape[1:])} but the target rows "
            f"{list(y.shape[1:])} (loss={loss_kind!r}).",
            "pass head=torch.nn.Linear(<the model's output width>, <the target's width>) (ce: the number of classes).")


def aligned(pred: Tensor, tgt: Tensor, loss_kind: str) -> Tensor:
    """``pred`` with a ``[n, 1]`` regression output squeezed to the ``[n]`` targets' shape."""
    if loss_kind != "ce" and pred.dim() == 2 and pred.shape[1] == 1 and tgt.dim() == 1:
        return pred.squeeze(1)
    return pred
