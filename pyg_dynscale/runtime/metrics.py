r"""Task metrics on the temporal test split."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["roc_auc"]


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
