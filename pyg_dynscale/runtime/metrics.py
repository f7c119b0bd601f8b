r"""Task metrics on the temporal test split."""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .losses import row_losses

__all__ = ["average_precision", "roc_auc", "as_snapshot_mean", "node_metrics", "link_metrics"]


def roc_auc(scores: Tensor, labels: Tensor) -> float:
    r"""Area under the ROC curve of ``scores`` for binary ``labels``: the
    probability that a random positive scores above a random negative, ties
    counting one half (Mann-Whitney :math:`U / (n_+ n_-)` with average ranks).

    Args:
        scores: ``[L]`` real scores (logits or probabilities).
        labels: ``[L]`` 0/1 labels.

    Raises:
        ValueError: shapes differ, or one class is absent (AUC undefined).
    """
    s = scores.detach().reshape(-1).to(torch.float64)
    y = labels.detach().reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores {list(s.shape)} and labels {list(y.shape)} differ in shape.")
    pos = y > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUC needs both classes; got {n_pos} positives and {n_neg} negatives.")
    # average ranks of tied scores
    order = torch.argsort(s)
    sorted_s = s[order]
    _, inverse, counts = torch.unique_consecutive(sorted_s, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(torch.float64)
    avg_rank = ends - (counts.to(torch.float64) - 1) / 2  # 1-based average rank of each tie group
    ranks = torch.empty_like(s)
    ranks[order] = avg_rank[inverse]
    u = float(ranks[pos].sum()) - n_pos * (n_pos + 1) / 2
    return u / (n_pos * n_neg)


def average_precision(scores: Tensor, labels: Tensor) -> float:
    r"""Average precision of ``scores`` for binary ``labels``, as scikit-learn's
    ``average_precision_score``: :math:`\mathrm{AP} = \sum_k (R_k - R_{k-1}) P_k`
    over the distinct scores :math:`s_k` taken as thresholds in decreasing
    order (:math:`P_k, R_k`: precision and recall of ``score >= s_k``), i.e.
    the mean over positives of the precision at the positive's score, tied
    scores forming one threshold.

    Args:
        scores: ``[L]`` real scores.
        labels: ``[L]`` 0/1 labels.

    Raises:
        ValueError: shapes differ, or no positive (AP undefined).
    """
    s = scores.detach().reshape(-1).to(torch.float64)
    y = labels.detach().reshape(-1).to(torch.float64)
    if s.shape != y.shape:
        raise ValueError(f"scores {list(s.shape)} and labels {list(y.shape)} differ in shape.")
    n_pos = float(y.sum())
    if n_pos == 0:
        raise ValueError("average precision needs at least one positive.")
    s_sorted, order = torch.sort(s, descending=True)
    tp = torch.cumsum(y[order], 0)
    last = torch.ones_like(s_sorted, dtype=torch.bool)  # last position of each tie group = one threshold
    last[:-1] = s_sorted[1:] != s_sorted[:-1]
    tp = tp[last]
    seen = (torch.nonzero(last).view(-1) + 1).to(torch.float64)
    recall_gain = torch.diff(tp, prepend=tp.new_zeros(1)) / n_pos
    return float((recall_gain * (tp / seen)).sum())


def as_snapshot_mean(value: Tensor, mean: Any) -> Tensor:
    r"""``value``, a reduction by ``mean`` (a
    :class:`~pyg_dynscale.runtime.losses.SnapshotMean`), as the mean over
    snapshots: divided by :math:`T'` when ``mean`` sums over snapshots
    (``snapshot_reduction="sum"``), unchanged otherwise (the same division
    the ``"mean"`` reduction does)."""
    if mean.reduction == "mean":
        return value
    return value / max(int(mean.has.numel()), 1)


def node_metrics(kind: str, pred: Tensor, target: Tensor, mean: Any) -> dict[str, Tensor]:
    r"""The evaluation metrics of node predictions (0-dim tensors, no host
    read): ``"loss"`` (``kind``'s loss with the training reduction) and
    ``kind`` itself; for regression (``"mse"``/``"mae"``) both ``"mse"`` and
    ``"mae"``, each PyGT's per-snapshot mean averaged over snapshots
    (:func:`as_snapshot_mean`).

    Args:
        kind: ``"mse"``, ``"mae"`` or ``"ce"``.
        pred: ``[n, *]`` predictions (after the head).
        target: ``[n, *]`` targets.
        mean: the :class:`~pyg_dynscale.runtime.losses.SnapshotMean` of the rows.
    """
    loss = mean(row_losses(kind, pred, target))
    out = {"loss": loss, kind: loss}
    if kind in ("mse", "mae"):
        out[kind] = as_snapshot_mean(loss, mean)
        other = "mae" if kind == "mse" else "mse"
        out[other] = as_snapshot_mean(mean(row_losses(other, pred, target)), mean)
    return out


def link_metrics(scores: Tensor, labels: Tensor) -> dict[str, float]:
    """``{"auc", "ap"}`` of link ``scores`` (:func:`roc_auc`,
    :func:`average_precision`); a metric undefined for the labels (one class
    absent) is left out."""
    out: dict[str, float] = {}
    for name, fn in (("auc", roc_auc), ("ap", average_precision)):
        try:
            out[name] = fn(scores, labels)
        except ValueError:
            pass
    return out
