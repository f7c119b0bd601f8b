"""The one workload divergence (partition.metrics.load_imbalance): its edge
cases, and every place that reports a lambda computing it."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pyg_dynscale.errors import PartitionError
from pyg_dynscale.partition.pgc import assign
from pyg_dynscale.partition.costs.rounds import RoundPrediction
from pyg_dynscale.partition.metrics import load_imbalance


@pytest.mark.parametrize("kind", [torch.tensor, np.asarray, list])
def test_lambda_edge_cases(kind) -> None:  # noqa: ANN001
    assert load_imbalance(kind([2.0, 4.0, 3.0])) == 2.0
    assert load_imbalance(kind([3, 3])) == 1.0  # integer loads too
    assert load_imbalance(kind([5.0])) == 1.0
    # the min is 0: no ratio bounds it (all zeros included: nothing is balanced)
    assert load_imbalance(kind([0.0, 1.0])) == math.inf
    assert load_imbalance(kind([0.0, 0.0])) == math.inf
    for bad in ([], [-1.0, 2.0], [1.0, float("nan")]):
        with pytest.raises(PartitionError, match="loads"):
            load_imbalance(kind(bad))


def test_lambda_is_exact_in_float64() -> None:
    """float32 loads are compared in float64: the ratio of the float64 values, not of float32 ones."""
    loads = torch.tensor([3.0, 7.0], dtype=torch.float32)
    assert load_imbalance(loads) == 7.0 / 3.0
    big = np.array([2**53 + 2.0, 2**53], dtype=np.float64)  # distinct only in float64
    assert load_imbalance(big) == float(big[0]) / float(big[1]) > 1.0


def test_every_lambda_is_this_one() -> None:
    assert assign.divergence is load_imbalance  # PGC's lambda (its band, its candidates' divergence)
    pred = RoundPrediction(torch.tensor([2.0, 0.0]), torch.tensor([[1.0, 0.0]]))  # rank 1: no work
    assert pred.divergence == math.inf
    pred = RoundPrediction(torch.tensor([2.0, 1.0]), torch.tensor([[1.0, 2.0]]))
    assert pred.divergence == load_imbalance(pred.per_rank) == 1.0
