r"""What the steps of one training epoch of :class:`~pyg_dynscale.ctdg.MemoryTrainer` share:
a frozen :class:`StepContext`, made once per step (:meth:`StepContext.next_step`) from the
one before it. Its fields are fixed; the stores they name (negatives, snapshots, queued
rows, ...) fill and drain as the steps run.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

__all__ = ["StepContext"]


@dataclass(frozen=True)
class StepContext:
    r"""One training step's context (the epoch's stores plus the step's own lookups).

    Attributes:
        iteration (int): the step (``-1`` before the first).
        bounds (tuple): ``(lo, hi)``: the training split's destination range, the negatives' range.
        fork (bool): the attention dropout draws from per-trainer seeds
            (``i * j * k > 1`` or the prefetcher), not from the global stream.
        loss_sum (Tensor): ``[]`` float64 on the device: :math:`\sum_t \ell_t |b_t|` so far.
        negatives (dict): ``(memory copy, position) -> [j, B]`` host negatives of a global batch.
        snapshots (dict): ``(memory copy, position) -> snapshot`` before a positive set's write
            (epoch parallelism).
        pending (dict): memory copy -> queued ``(n_id, rows, last)`` root rows of its writers.
        spans (dict): memory copy -> the ``(start, end)`` of each queued writer.
        roots (list): root rows written per write-back (the replicated all-gather's prediction).
        lookups (dict): trainer -> this step's neighbour lookup (a future), prefetched or fetched.
        next_lookups (dict): trainer -> the next step's prefetched lookup.
        aggregate_plans (dict): ``(start, end) -> AggregatePlan`` organised by the prefetch thread.
        posted (dict): memory copy -> ``(job, roots)``: an aggregation running on a thread.
    """

    iteration: int
    bounds: tuple
    fork: bool
    loss_sum: Tensor
    negatives: dict = field(default_factory=dict)
    snapshots: dict = field(default_factory=dict)
    pending: dict = field(default_factory=dict)
    spans: dict = field(default_factory=dict)
    roots: list = field(default_factory=list)
    lookups: dict = field(default_factory=dict)
    next_lookups: dict = field(default_factory=dict)
    aggregate_plans: dict = field(default_factory=dict)
    posted: dict = field(default_factory=dict)

    @classmethod
    def start(cls, bounds: tuple, fork: bool, device: Optional[torch.device]) -> "StepContext":
        """The context before an epoch's first step."""
        return cls(iteration=-1, bounds=bounds, fork=fork,
                   loss_sum=torch.zeros((), dtype=torch.float64, device=device))

    def next_step(self, iteration: int) -> "StepContext":
        """Step ``iteration``'s context: the epoch's stores, the lookups prefetched for it."""
        return dataclasses.replace(self, iteration=iteration, lookups=self.next_lookups, next_lookups={})

    def negatives_of(self, lb) -> Tensor:
        """Local batch ``lb``'s host negatives (its share of its global batch's negative set)."""
        o = lb.start - lb.batch_start
        return self.negatives[(lb.memory_copy, lb.position)][lb.negative_set, o:o + lb.num_events]
