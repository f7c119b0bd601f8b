r"""Evaluation of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: PyG's ``examples/tgn.py``
``test()`` on the validation or test events.

``torch.manual_seed(eval_seed)`` (the example's 12345), batches of ``batch_size``, one
uniform negative per event; AP and AUC are computed per batch on the sigmoid scores and
averaged over batches (the example's ``average_precision_score`` / ``roc_auc_score``, here
:func:`~pyg_dynscale.runtime.metrics.average_precision` /
:func:`~pyg_dynscale.runtime.metrics.roc_auc`); ``loss`` is the training loss on the split,
:math:`\sum_b (\mathrm{BCE}(\text{pos}_b, 1) + \mathrm{BCE}(\text{neg}_b, 0)) |b| / E_{split}`.
**MRR** (not in the example): each positive :math:`(u, v)` is ranked against
``mrr_negatives`` negatives of its own batch (DistTGL's 49; negative :math:`(i + s) \bmod B`
for event :math:`i`, :math:`s = 0 .. S-1`, no extra random draws), rank
:math:`= 1 + \#\{\text{neg} > \text{pos}\} + \tfrac12 \#\{\text{neg} = \text{pos}\}`, MRR the
mean of :math:`1/\text{rank}` over all events of the split.

``"val"`` starts from the memory at the end of the last training epoch and ``"test"`` from
the memory after the validation events, as the example's ``test(val_loader);
test(test_loader)``; called in another order, the end-of-training state is restored and the
validation events replayed (no scoring), so that the result does not depend on the order of
the calls.
"""
from __future__ import annotations

import math

import torch

from ..errors import ModelInputError
from ..runtime.metrics import average_precision, roc_auc
from .memory_copies import MemoryCopies
from .scoring import LinkScorer

__all__ = ["SplitEvaluator", "uniform_negatives"]


def uniform_negatives(lo: int, hi: int, size: int) -> torch.Tensor:
    """``size`` destinations uniform in ``[lo, hi]``, drawn from the CPU generator (the same
    numbers on every device, so a CUDA run can be checked against a CPU one); they stay on the
    host, where the index lists are made."""
    return torch.randint(lo, hi + 1, (size,), dtype=torch.long)


class SplitEvaluator:
    r"""Walk the validation and test events from the end of training, scoring them.

    Args:
        copies (MemoryCopies): the memory copies (the live one walks on).
        scorer (LinkScorer): the link scores.
        fetch (PartitionedFetch, optional): a partitioned memory's fetch before each batch.
        schedule (EventSchedule): its evaluation batches.
        host (HostStream): the stream's index columns.
        splits (tuple): ``(val_start, test_start, num_events)``.
        eval_seed (int): the seed of every evaluation pass.
        mrr_negatives (int): negatives per positive in the MRR (0: ``nan``).
        criterion: the training loss (BCE on logits).
    """

    def __init__(self, copies: MemoryCopies, scorer: LinkScorer, fetch, schedule, host, splits: tuple,
                 eval_seed: int, mrr_negatives: int, criterion) -> None:
        self.copies, self.scorer, self.fetch, self.schedule, self.host = copies, scorer, fetch, schedule, host
        self.val_start, self.test_start, self.num_events = splits
        self.eval_seed, self.mrr_negatives, self.criterion = eval_seed, mrr_negatives, criterion

    def evaluate(self, split: str) -> dict:
        """``{"loss", "ap", "auc", "mrr"}`` of ``"val"`` or ``"test"`` on this process."""
        if split not in ("val", "test"):
            raise ModelInputError("split", f"is {split!r}.", "use 'val' or 'test'.")
        a, b = (self.val_start, self.test_start) if split == "val" else (self.test_start, self.num_events)
        if a == b:
            raise ModelInputError(split, "has no events.", "use a larger val_ratio / test_ratio.")
        copies = self.copies
        if copies.train_end is None:
            # no epoch trained yet: the memory walks the training events without learning
            copies.reset()
            copies.training = False  # nothing stored yet: no flush
            self._walk(0, self.val_start, score=False)
            copies.train_end, copies.position = copies.snapshot(), "train"
        want = "train" if split == "val" else "val"
        if copies.position != want:
            copies.restore(copies.train_end)
            if split == "test":
                self._walk(self.val_start, self.test_start, score=False)
        out = self._walk(a, b, score=True)
        copies.position = split
        return out

    @torch.no_grad()
    def _walk(self, a: int, b: int, score: bool) -> dict:
        placement = None if self.fetch is None else self.fetch.placement
        if placement is not None:  # its exchanges count apart from the training epoch's
            placement.phase = "eval"
            try:
                return self._walk_batches(a, b, score)
            finally:
                placement.phase = "train"
        return self._walk_batches(a, b, score)

    def _walk_batches(self, a: int, b: int, score: bool) -> dict:
        self.copies.set_training(False)
        torch.manual_seed(self.eval_seed)
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self.host.destination_bounds(a, b)
        aps, aucs, rr_sum, n = [], [], 0.0, 0
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.scorer.device)
        for x, y in self.schedule.eval_batches(a, b):
            if score:
                neg = uniform_negatives(lo, hi, y - x)
                # partitioned: every rank walks every batch, fetching what it does not own
                lookup = self.fetch.fetch_batch(x, y, neg, False) if self.fetch is not None else None
                pos_out, neg_out, z = self.scorer.scores(x, y, neg, False, lookup)
                loss = self.criterion(pos_out, torch.ones_like(pos_out)) + \
                    self.criterion(neg_out, torch.zeros_like(neg_out))
                loss_sum += loss.to(torch.float64) * (y - x)
                y_pred = torch.cat([pos_out, neg_out], dim=0).sigmoid().view(-1)
                y_true = torch.cat([torch.ones(pos_out.size(0)), torch.zeros(neg_out.size(0))]).to(y_pred.device)
                aps.append(average_precision(y_pred, y_true))
                aucs.append(roc_auc(y_pred, y_true))
                if self.mrr_negatives:
                    rr_sum += float(self.scorer.reciprocal_ranks(x, y, neg, pos_out, z, self.mrr_negatives).sum())
                n += y - x
            self.copies.advance(x, y, False)
        return {"loss": float(loss_sum / n) if n else math.nan,
                "ap": sum(aps) / len(aps) if aps else math.nan, "auc": sum(aucs) / len(aucs) if aucs else math.nan,
                "mrr": rr_sum / n if n and self.mrr_negatives else math.nan}
