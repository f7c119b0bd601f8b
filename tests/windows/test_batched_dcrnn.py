"""PyGT's BatchedDCRNN through WindowTrainer equals PyGT's own index-batching loop
(IndexDataset + DataLoader(shuffle=False) + model(X, edges, weights) over [B, L, N, F],
loss against the next L values) on the same windows, float64."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.windows import WindowTrainer, series_signal
from tests.helpers.windows import covid
from tests.helpers.windows import pygt_index_dataset as _pygt_index_dataset


@pytest.mark.parametrize("loss", ["mae", "mse"])
def test_batched_dcrnn_equals_pygt_index_batching(monkeypatch, loss):
    from torch.utils.data import DataLoader
    from torch_geometric_temporal.nn.recurrent import BatchedDCRNN

    IndexDataset = _pygt_index_dataset(monkeypatch)
    rng = np.random.default_rng(0)
    Tr, N, F, L = 30, 6, 2, 3
    data = rng.standard_normal((Tr, N, F))
    ring = torch.arange(N)
    edges = torch.cat([torch.stack([ring, (ring + 1) % N]), torch.stack([(ring + 1) % N, ring])], 1)
    weights = torch.rand(edges.shape[1], dtype=torch.float64)
    torch.manual_seed(0)
    model = BatchedDCRNN(F, F, K=2).double()
    ref = copy.deepcopy(model)

    tr = WindowTrainer(model, series_signal(data, edges, weights, dtype=torch.float64), lags=L, horizon=L,
                       batch_size=4, loss=loss, lr=0.05, optimizer="sgd")
    tr.train_epoch()

    # PyGT's loader: x_i = arange(T - (2 lags - 1)), train = round(0.7 n) first windows
    x_i = np.arange(Tr - (2 * L - 1))
    train = IndexDataset(x_i[:round(x_i.shape[0] * 0.7)], data, L)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    losses = []
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)   # BatchedDCRNN builds its zero state with the default dtype
    try:
        for X, y in DataLoader(train, batch_size=4, shuffle=False):
            out = ref(X, edges, weights)                    # [B, L, N, F]
            d = out - y
            lo = (d.abs() if loss == "mae" else d * d).mean()
            opt.zero_grad()
            lo.backward()
            opt.step()
            losses.append(float(lo.detach()))
    finally:
        torch.set_default_dtype(old)
    assert len(losses) == len(tr.batch_losses) >= 3
    for a, b in zip(tr.batch_losses, losses):
        assert math.isclose(a, b, rel_tol=1e-9)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_batched_dcrnn_refuses_a_changing_graph():
    from torch_geometric_temporal.nn.recurrent import BatchedDCRNN

    with pytest.raises(ModelInputError) as e:
        WindowTrainer(BatchedDCRNN(4, 1, K=2).double(), covid(T=10), lags=3, batch_size=2, optimizer="sgd", lr=0.01)
    assert e.value.field == "model"
