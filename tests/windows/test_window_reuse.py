"""ReInc's reuse for PyGT's GConvGRU, GConvLSTM, GCLSTM, TGCN and DCRNN (pyg_dynscale.nn.reuse): reuse=True equals
reuse=False in float64 (losses, parameters, evaluation) on a static graph, a changing
graph and changing vertex sets, K = 2 and 3; the input basis is computed once."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.windows import WindowTrainer
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import RecurrentGCN, as64, chickenpox, covid


def _train(sig, K, reuse, horizon=1, cls="GConvGRU"):
    import torch_geometric_temporal.nn.recurrent as rec

    torch.manual_seed(0)
    cell = (rec.TGCN(4, 6) if cls == "TGCN" else getattr(rec, cls)(4, 6, K)).double()
    head = torch.nn.Linear(6, 1).double()
    tr = WindowTrainer(cell, sig, lags=3, horizon=horizon, batch_size=4, lr=0.05, head=head, reuse=reuse,
                       optimizer="sgd")
    losses = [tr.train_epoch() for _ in range(2)] + tr.batch_losses
    return tr, losses, [p.detach().clone() for p in cell.parameters()], tr.evaluate("test")


_DATA = [("static", 2, 1), ("static", 3, 2), ("covid", 2, 1), ("covid", 3, 3), ("vertices", 2, 1)]
# DCRNN: not on the random vertex-set signal, whose repeated edges PyGT's DConv itself cannot run
_CASES = [(d, k, h, c) for c in ("GConvGRU", "GConvLSTM", "GCLSTM", "TGCN", "DCRNN") for d, k, h in _DATA
          if not (c == "DCRNN" and d == "vertices")]


@pytest.mark.parametrize("data,K,horizon,cls", _CASES)
def test_reuse_equals_no_reuse(data, K, horizon, cls):
    sig = {"static": lambda: chickenpox(T=30), "covid": lambda: covid(T=14),
           "vertices": lambda: as64(make_dynamic_signal(seed=3, T=12, V=10, F=4), 12)}[data]()
    off, l0, p0, e0 = _train(sig, K, False, horizon, cls)
    on, l1, p1, e1 = _train(sig, K, True, horizon, cls)
    assert off.reuse_impl is None and on.reuse_impl is not None
    k = {"TGCN": 1, "GCLSTM": 1, "DCRNN": 2 * K}.get(cls, K)
    assert on.reuse_impl.basis.shape == (sig.x.shape[0], k, 4)          # one basis for the whole storage
    for a, b in zip(l0, l1):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-13)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)
    for k in e0:
        assert math.isclose(e0[k], e1[k], rel_tol=1e-9, abs_tol=1e-13)


def test_reuse_applies_only_where_implemented():
    sig = chickenpox(T=14)
    tr = WindowTrainer(RecurrentGCN(4, 6).double(), sig, lags=3, batch_size=2, reuse=True, optimizer="sgd", lr=0.01)
    assert tr.reuse_impl is None                      # a user's module is called as it is


def test_dcrnn_reuse_follows_dconv_on_unsorted_edges_and_steps_aside_on_duplicates():
    import numpy as np
    from torch_geometric_temporal.nn.recurrent import DCRNN

    from pyg_dynscale import DynamicGraphSignal

    rng = np.random.default_rng(0)
    T, N = 10, 8
    ring = np.stack([np.arange(N), (np.arange(N) + 1) % N])

    def edges():
        e = np.unique(np.concatenate([ring, rng.integers(0, N, size=(2, 20))], 1), axis=1)
        e = e[:, e[0] != e[1]]
        return e[:, rng.permutation(e.shape[1])]          # distinct, in no particular order

    eis = [edges() for _ in range(T)]
    sig = DynamicGraphSignal(eis, [rng.random(e.shape[1]) + 0.1 for e in eis],
                             [rng.standard_normal((N, 4)) for _ in range(T)], [rng.standard_normal(N) for _ in range(T)],
                             dtype=torch.float64)
    runs = []
    for reuse in (False, True):
        torch.manual_seed(0)
        cell = DCRNN(4, 5, 3).double()
        tr = WindowTrainer(cell, sig, lags=3, batch_size=3, lr=0.05, head=torch.nn.Linear(5, 1).double(), reuse=reuse,
                           optimizer="sgd")
        runs.append((tr.train_epoch(), [p.detach().clone() for p in cell.parameters()], tr.reuse_impl))
    assert runs[1][2] is not None
    assert math.isclose(runs[0][0], runs[1][0], rel_tol=1e-9)
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)
    dup = [np.concatenate([e, e[:, :1]], 1) for e in eis]   # a repeated edge: DConv's dense adjacency merges it
    sig2 = DynamicGraphSignal(dup, [np.ones(e.shape[1]) for e in dup], [rng.standard_normal((N, 4)) for _ in range(T)],
                              [rng.standard_normal(N) for _ in range(T)], dtype=torch.float64)
    tr = WindowTrainer(DCRNN(4, 5, 3).double(), sig2, lags=3, batch_size=3, head=torch.nn.Linear(5, 1).double(),
                       optimizer="sgd", lr=0.01)
    assert tr.reuse_impl is None                                  # the cell is called as it is
