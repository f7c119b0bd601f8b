"""StepContext: frozen; each step takes the lookups prefetched for it and shares the epoch's stores."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from pyg_dynscale.ctdg.schedule import LocalBatch
from pyg_dynscale.ctdg.step_context import StepContext


def test_the_step_context_is_frozen_and_each_step_takes_the_prefetched_lookups():
    ctx = StepContext.start((0, 9), False, torch.device("cpu"))
    assert ctx.iteration == -1 and ctx.loss_sum.dtype == torch.float64 and float(ctx.loss_sum) == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.iteration = 3
    ctx.next_lookups[0] = "lookup of step 0"
    ctx.negatives[(0, 0)] = torch.arange(8).view(2, 4)
    step = ctx.next_step(0)
    assert step.iteration == 0 and step.lookups == {0: "lookup of step 0"} and step.next_lookups == {}
    assert step.negatives is ctx.negatives and step.loss_sum is ctx.loss_sum  # the epoch's stores are shared
    assert step.next_step(1).lookups == {} and step.lookups == {0: "lookup of step 0"}


def test_a_local_batch_takes_its_share_of_its_negative_set():
    ctx = StepContext.start((0, 9), False, None)
    ctx.negatives[(1, 3)] = torch.arange(12).view(2, 6)  # j = 2 sets of a global batch of 6 events
    lb = LocalBatch(trainer=0, start=12, end=15, memory_copy=1, negative_set=1, writes_memory=False, batch=3,
                    position=3, batch_start=10, batch_end=16)
    assert ctx.negatives_of(lb).tolist() == [8, 9, 10]  # set 1, events 2..4 of the global batch
