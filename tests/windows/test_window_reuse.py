"""ReInc's reuse for PyGT's GConvGRU and GConvLSTM (pyg_dynscale.windows.reuse): reuse=True equals
reuse=False in float64 (losses, parameters, evaluation) on a static graph, a changing
graph and changing vertex sets, K = 2 and 3; the input basis is computed once."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.windows import WindowTrainer
from tests.conftest import make_dynamic_signal
from tests.windows.helpers import RecurrentGCN, as64, chickenpox, covid


def _train(sig, K, reuse, horizon=1, cls="GConvGRU"):
    import torch_geometric_temporal.nn.recurrent as rec

    torch.manual_seed(0)
    cell = (rec.TGCN(4, 6) if cls == "TGCN" else getattr(rec, cls)(4, 6, K)).double()
    head = torch.nn.Linear(6, 1).double()
    tr = WindowTrainer(cell, sig, lags=3, horizon=horizon, batch_size=4, lr=0.05, head=head, reuse=reuse)
    losses = [tr.train_epoch() for _ in range(2)] + tr.batch_losses
    return tr, losses, [p.detach().clone() for p in cell.parameters()], tr.evaluate("test")


@pytest.mark.parametrize("cls", ["GConvGRU", "GConvLSTM", "TGCN"])
@pytest.mark.parametrize("data,K,horizon", [("static", 2, 1), ("static", 3, 2), ("covid", 2, 1), ("covid", 3, 3),
                                            ("vertices", 2, 1)])
def test_reuse_equals_no_reuse(data, K, horizon, cls):
    sig = {"static": lambda: chickenpox(T=30), "covid": lambda: covid(T=14),
           "vertices": lambda: as64(make_dynamic_signal(seed=3, T=12, V=10, F=4), 12)}[data]()
    off, l0, p0, e0 = _train(sig, K, False, horizon, cls)
    on, l1, p1, e1 = _train(sig, K, True, horizon, cls)
    assert off._reuse is None and on._reuse is not None
    k = 1 if cls == "TGCN" else K
    assert on._reuse.basis.shape == (sig.x.shape[0], k, 4)          # one basis for the whole storage
    for a, b in zip(l0, l1):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-13)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)
    for k in e0:
        assert math.isclose(e0[k], e1[k], rel_tol=1e-9, abs_tol=1e-13)


def test_reuse_applies_only_where_implemented():
    sig = chickenpox(T=14)
    tr = WindowTrainer(RecurrentGCN(4, 6).double(), sig, lags=3, batch_size=2, reuse=True)
    assert tr._reuse is None                      # a user's module is called as it is
