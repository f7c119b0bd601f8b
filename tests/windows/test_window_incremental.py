"""WindowTrainer(incremental=..., optimizer="sgd", lr=0.01): the reuse's input basis computed by incremental aggregation
(pyg_dynscale.nn.incremental) trains exactly as incremental=False in float64 (losses, parameters, evaluation) on
changing graphs -- slowly changing, England COVID, changing vertex sets -- and the incremental path ran."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.evolving import evolving
from tests.helpers.windows import as64, covid

INF = float("inf")


def _slow(T=16, V=200):
    """Fixed vertex set, 0.5% of the edges and feature rows change per snapshot, edges edited in place (change
    ratio ~0.07 with normalization: below the default threshold)."""
    x, ei, ew, nptr, eptr = evolving(seed=12, T=T, V=V, E=600, F=4, change=0.005, feat_change=0.005, order="inplace")
    y = torch.randn(T * V, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return DynamicGraphSignal.from_tensors(node_ptr=nptr, edge_index=ei, edge_ptr=eptr, node_id=torch.arange(V).repeat(T),
                                           edge_weight=ew, x=x, y=y, num_vertices=V)


def _train(sig, cls, K, incremental):
    import torch_geometric_temporal.nn.recurrent as rec

    torch.manual_seed(0)
    cell = (rec.TGCN(4, 5) if cls == "TGCN" else getattr(rec, cls)(4, 5, K)).double()
    tr = WindowTrainer(cell, sig, lags=3, batch_size=4, lr=0.05, head=torch.nn.Linear(5, 1).double(),
                       incremental=incremental, optimizer="sgd")
    losses = [tr.train_epoch() for _ in range(2)] + tr.batch_losses
    return tr, losses, [p.detach().clone() for p in cell.parameters()], tr.evaluate("test")


@pytest.mark.parametrize("data,cls,K,incremental", [
    ("slow", "GConvGRU", 3, True), ("slow", "TGCN", 1, True), ("covid", "GConvLSTM", 2, INF),
    ("covid", "TGCN", 1, INF), ("vertices", "GConvGRU", 2, INF)])
def test_incremental_equals_off(data, cls, K, incremental):
    sig = {"slow": _slow, "covid": lambda: covid(T=14),
           "vertices": lambda: as64(make_dynamic_signal(seed=3, T=12, V=10, F=4), 12)}[data]()
    off, l0, p0, e0 = _train(sig, cls, K, False)
    on, l1, p1, e1 = _train(sig, cls, K, incremental)
    assert off.incremental is None and on.incremental.last is not None
    modes = [m[0] for m in on.incremental.last.modes]
    assert modes[0] == "scratch" and modes.count("incremental") >= len(modes) - 2   # it ran (default threshold too)
    torch.testing.assert_close(on.reuse_impl.basis, off.reuse_impl.basis, rtol=0, atol=1e-9)
    for a, b in zip(l0, l1):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-13)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)
    for k in e0:
        assert math.isclose(e0[k], e1[k], rel_tol=1e-9, abs_tol=1e-13)


def test_incremental_options():
    from torch_geometric_temporal.nn.recurrent import GConvGRU, GCLSTM

    sig = _slow(T=8)
    with pytest.raises(ModelInputError, match="incremental"):
        WindowTrainer(GConvGRU(4, 5, 2).double(), sig, lags=3, batch_size=2, incremental="yes",
                      optimizer="sgd", lr=0.01)
    with pytest.raises(NotImplementedError, match="cache_bytes"):
        WindowTrainer(GConvGRU(4, 5, 2).double(), sig, lags=3, batch_size=2, incremental=True, cache_bytes=10_000,
                      optimizer="sgd", lr=0.01)
    tr = WindowTrainer(GConvGRU(4, 5, 2).double(), sig, lags=3, batch_size=2, incremental=0.0, optimizer="sgd", lr=0.01)
    assert set(m[0] for m in tr.incremental.last.modes) == {"scratch"}           # threshold 0: recomputation
    tr = WindowTrainer(GCLSTM(4, 5, 2).double(), sig, lags=3, batch_size=2, incremental=True, optimizer="sgd", lr=0.01)
    assert tr.incremental.last is None                                           # no input aggregation to do
