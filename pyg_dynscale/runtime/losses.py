r"""PyGT's training loss, on one process or split across ranks.

PyGT's loop accumulates, per snapshot :math:`t`, the mean of the per-row loss
over that snapshot's :math:`n_t` rows (nodes, or labelled links) and divides
by the number of snapshots:

.. math::
    L = \frac{1}{T'} \sum_{t : n_t > 0} \frac{1}{n_t} \sum_{k \in t} \ell_k

(:math:`T'`: the snapshots with rows; ``reduction="sum"`` drops
:math:`1/T'`). :class:`SnapshotMean` evaluates it for any subset of the rows
with the *global* :math:`n_t` and :math:`T'`, so the ranks' parts sum to the
single-process loss. The normalizers are fixed by the data, so they are
computed once on the host and moved to the device with the rows' snapshot
index: the hot loop never reads a count back. :func:`row_losses` gives the
per-row terms :math:`\ell_k` of the node losses. Both
:class:`~pyg_dynscale.runtime.FusedTrainer` and
:class:`~pyg_dynscale.distributed.DistributedTrainer` use them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.tensor_maps import TensorMap
from ..errors import ModelInputError

__all__ = ["LOSSES", "SnapshotMean", "Targets", "resolve_targets", "row_losses", "link_row_losses", "check_loss"]

LOSSES = ("mse", "mae", "ce", "bce_link")


def check_loss(loss: object, snapshot_reduction: str, allow_callable: bool = False) -> None:
    """Raise :class:`ModelInputError` for an unknown loss or reduction."""
    if callable(loss):
        if not allow_callable:
            raise ModelInputError("loss", f"is {loss!r}.", f"use one of {LOSSES} (callables are not distributed).")
    elif loss not in LOSSES:
        raise ModelInputError("loss", f"is {loss!r}.",
                              f"use one of {LOSSES}" + (" or a callable." if allow_callable else "."))
    if snapshot_reduction not in ("mean", "sum"):
        raise ModelInputError("snapshot_reduction", f"is {snapshot_reduction!r}.", "use 'mean' or 'sum'.")


def row_losses(kind: str, pred: Tensor, y: Tensor) -> Tensor:
    r"""``[n]`` per-row loss of node predictions ``pred`` against ``y``:
    squared error (``"mse"``), absolute error (``"mae"``), both averaged over
    a row's trailing elements, or cross-entropy (``"ce"``, ``y`` class ids).
    A ``[n, 1]`` prediction of a ``[n]`` target is squeezed (PyGT's
    ``y_hat.squeeze() - y``)."""
    if kind == "ce":
        return F.cross_entropy(pred, y.long(), reduction="none")
    if pred.dim() == 2 and pred.shape[1] == 1 and y.dim() == 1:
        pred = pred.squeeze(1)
    diff = pred - y.to(pred.dtype)
    per = diff * diff if kind == "mse" else diff.abs()
    if per.dim() > 1:
        per = per.reshape(per.shape[0], -1).mean(1)
    return per


def link_row_losses(logits: Tensor, label: Tensor) -> Tensor:
    """``[L]`` binary cross-entropy of link logits against 0/1 labels."""
    return F.binary_cross_entropy_with_logits(logits, label.to(logits.dtype), reduction="none")


class SnapshotMean:
    r"""PyGT's reduction :math:`\frac{1}{T'}\sum_t \frac{1}{n_t}\sum_{k \in t,\ k \text{ here}} v_k`
    of a fixed set of rows, with global normalizers.

    Args:
        seg: ``[n]`` snapshot of each row this process computes.
        counts: ``[T]`` rows per snapshot over *all* processes (``n_t``).
        reduction: ``"mean"`` (divide by :math:`T'`, the snapshots with
            rows) or ``"sum"``.

    Built on the host (it reads the counts once); :meth:`apply_tensors` moves
    it to the device.
    """

    def __init__(self, seg: Tensor, counts: Tensor, reduction: str = "mean", divisor: Optional[int] = None) -> None:
        counts = counts.long()
        self.num_segments = int(counts.numel())
        has = (counts > 0).nonzero().flatten()
        self.seg = seg.long()
        self.has = has
        self.counts = counts.index_select(0, has)
        #: :math:`T'` (``"mean"``) or 1 (``"sum"``), a host number; ``divisor`` overrides
        #: :math:`T'` when ``counts`` covers a window of a longer signal
        self.divisor = (divisor if divisor is not None else max(int(has.numel()), 1)) if reduction == "mean" else 1
        self.reduction = reduction

    def apply_tensors(self, fn: TensorMap) -> "SnapshotMean":
        out = object.__new__(SnapshotMean)
        out.__dict__.update(self.__dict__)
        out.seg, out.has, out.counts = fn(self.seg), fn(self.has), fn(self.counts)
        return out

    def of_rows(self, seg: Tensor) -> "SnapshotMean":
        """The same normalizers for other rows ``seg`` (e.g. a window decoded on the device)."""
        out = object.__new__(SnapshotMean)
        out.__dict__.update(self.__dict__)
        out.seg = seg
        return out

    def from_snapshot(self, first: int) -> "SnapshotMean":
        r"""The reduction over snapshots ``first ..`` only: rows of earlier
        snapshots are dropped and :math:`T'` counts the later snapshots with
        rows -- the loss of the window ``[first, T)`` when the earlier
        snapshots only build the recurrent state (a continued evaluation).
        It reads the snapshot indices: one synchronization on a device copy."""
        out = object.__new__(SnapshotMean)
        out.__dict__.update(self.__dict__)
        keep = (self.has >= first).nonzero().flatten()
        out.has, out.counts = self.has.index_select(0, keep), self.counts.index_select(0, keep)
        out.divisor = max(int(keep.numel()), 1) if self.reduction == "mean" else 1
        return out

    def __call__(self, values: Tensor) -> Tensor:
        sums = values.new_zeros(self.num_segments).index_add_(0, self.seg, values)
        part = (sums.index_select(0, self.has) / self.counts.to(values.dtype)).sum()
        return part if self.divisor == 1 else part / self.divisor

    @classmethod
    def whole(cls, seg: Tensor, num_segments: int, reduction: str = "mean",
              counts: Optional[Tensor] = None) -> "SnapshotMean":
        """The single-process reduction of rows ``seg`` (counts from ``seg``)."""
        if counts is None:
            counts = torch.bincount(seg, minlength=num_segments)
        return cls(seg, counts, reduction)


@dataclass
class Targets:
    """What a loss is computed against, in global vertex-time ids: node
    ``target`` ``[N, ...]``, or labelled pairs ``(label_src, label_dst)``
    ``[L]`` of snapshot ``label_time`` with ``label`` ``[L]``."""

    target: Optional[Tensor] = None
    label_src: Optional[Tensor] = None
    label_dst: Optional[Tensor] = None
    label_time: Optional[Tensor] = None
    label: Optional[Tensor] = None


def resolve_targets(signal: Any, kind: Any, target: str, link_index: str, link_label: str,
                    float_dtype: torch.dtype) -> Targets:
    """The :class:`Targets` of loss ``kind`` from the signal's fields (raises
    :class:`ModelInputError` naming the missing field)."""
    sig = signal
    if kind in ("mse", "mae", "ce"):
        f = sig.fields.get(target)
        if f is None or f.level != "node":
            raise ModelInputError(target, "is not a node-level field of the signal.", f"give the signal node targets '{target}' for loss={kind!r}.")
        return Targets(target=f.values)
    if kind == "bce_link":
        fi, fl = sig.fields.get(link_index), sig.fields.get(link_label)
        if fi is None or fi.level != "ragged" or fl is None:
            raise ModelInputError(
                link_index, "and its labels are needed for loss='bce_link'.",
                f"add per-snapshot extras {link_index}=[2, L_t] (local rows) and {link_label}=[L_t].",
            )
        counts = fi.ptr[1:] - fi.ptr[:-1]
        L = fi.values.shape[1]
        t_of = torch.repeat_interleave(torch.arange(sig.num_snapshots, device=sig.device), counts, output_size=L)
        off = sig.node_ptr[:-1].index_select(0, t_of)
        label = fl.values.reshape(-1).to(float_dtype)
        if label.numel() != L:
            raise ModelInputError(link_label, f"has {label.numel()} entries for {L} label pairs.", "give one label per pair.")
        return Targets(label_src=fi.values[0] + off, label_dst=fi.values[1] + off, label_time=t_of, label=label)
    return Targets()
