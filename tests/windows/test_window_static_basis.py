"""WindowTrainer on a static graph builds the reuse's input basis from its ONE snapshot graph
(pyg_dynscale.nn.reuse.static_basis: the snapshots laid side by side as feature columns): equal in float64 to the
basis on the block-diagonal graph of all snapshots (the path of changing graphs) for every reuse class, also with
the bounded cache (its misses) and incremental=; no input basis is ever computed on more than one graph's edges."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.nn import TGCN as OurTGCN
from pyg_dynscale.nn.reinc_models import CDGCN, GCRNM1, GCRNM2
from pyg_dynscale.nn.reuse import reuse_for, static_basis
from pyg_dynscale.windows import WindowTrainer, series_signal

F, H, T, N = 3, 5, 13, 9


def _signal():
    """A static directed graph (distinct edges, positive weights: DCRNN's reuse applies), float64 series."""
    g = torch.Generator().manual_seed(7)
    pairs = torch.randperm(N * N, generator=g)[:30]
    ei = torch.stack([pairs // N, pairs % N])
    ei = ei[:, ei[0] != ei[1]]
    ew = torch.rand(ei.shape[1], generator=g, dtype=torch.float64) + 0.1
    D = torch.randn(T + 1, N, F, generator=g, dtype=torch.float64)
    return series_signal(D, ei, ew, dtype=torch.float64), ei, ew


def _cell(name):
    import torch_geometric_temporal.nn.recurrent as rec

    torch.manual_seed(0)
    make = {"GConvGRU": lambda: rec.GConvGRU(F, H, 3), "GConvLSTM": lambda: rec.GConvLSTM(F, H, 2),
            "GCLSTM": lambda: rec.GCLSTM(F, H, 2), "PyGT TGCN": lambda: rec.TGCN(F, H),
            "TGCN": lambda: OurTGCN(F, H), "DCRNN": lambda: rec.DCRNN(F, H, 3), "GCRNM1": lambda: GCRNM1(F, H),
            "GCRNM2": lambda: GCRNM2(F, H), "CDGCN": lambda: CDGCN(F, H)}
    return make[name]().double()


MODELS = ["GConvGRU", "GConvLSTM", "GCLSTM", "PyGT TGCN", "TGCN", "DCRNN", "GCRNM1", "GCRNM2", "CDGCN"]


def _block_diagonal_basis(cell, sig):
    """The reference: the basis of the whole storage on the block-diagonal graph of all T snapshots."""
    E = sig.edge_index.shape[1] // T
    off = (torch.arange(T) * N).repeat_interleave(E)
    return reuse_for(cell)(cell, sig.x, sig.edge_index + off, sig.edge_weight).basis


def _spy(monkeypatch, impl):
    """Records the edge count of every input_basis call of ``impl``."""
    seen = []
    orig = impl.input_basis

    def input_basis(self, x, edge_index, edge_weight, *loops):
        seen.append(int(edge_index.shape[1]))
        return orig(self, x, edge_index, edge_weight, *loops)

    monkeypatch.setattr(impl, "input_basis", input_basis)
    return seen


def _train(cell, sig, **kw):
    head = torch.nn.Linear(cell.out_channels, F).double()
    torch.manual_seed(1)
    tr = WindowTrainer(cell, sig, lags=3, batch_size=4, lr=0.05, head=head, **kw, optimizer="sgd")
    losses = [tr.train_epoch() for _ in range(2)]
    return tr, losses, [p.detach().clone() for p in cell.parameters()]


@pytest.mark.parametrize("name", MODELS)
def test_static_basis_equals_block_diagonal(name, monkeypatch):
    sig, ei, ew = _signal()
    E = ei.shape[1]
    ref = _block_diagonal_basis(_cell(name), sig)
    impl = reuse_for(_cell(name))
    seen = _spy(monkeypatch, impl)
    tr, l0, p0 = _train(_cell(name), sig)
    assert tr.store.static and tr.reuse_impl is not None and seen and max(seen) <= E     # one graph, never T x E edges
    assert tr.reuse_impl.basis.shape == ref.shape
    torch.testing.assert_close(tr.reuse_impl.basis, ref, rtol=0, atol=1e-9)

    # bounded cache: its misses compute one snapshot's entry on the one graph; the same training
    seen.clear()
    tb, l1, p1 = _train(_cell(name), sig, cache_bytes=3 * N * ref.shape[1] * F * 8)
    assert tb.cache_stats()["global"]["misses"] > 0 and max(seen) <= E
    for t in range(T):
        torch.testing.assert_close(tb.cache.global_cache.compute(t), ref[t * N:(t + 1) * N], rtol=0, atol=1e-9)
    for a, b in zip(l0, l1):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-13)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("name", ["GConvGRU", "PyGT TGCN", "GCLSTM"])
def test_static_basis_with_incremental(name):
    """A static graph has no edge changes: incremental= gives the same basis and training (the one-graph basis)."""
    sig, _, _ = _signal()
    ref = _block_diagonal_basis(_cell(name), sig)
    off, l0, p0 = _train(_cell(name), sig)
    on, l1, p1 = _train(_cell(name), sig, incremental=True)
    torch.testing.assert_close(on.reuse_impl.basis, ref, rtol=0, atol=1e-9)
    assert on.incremental is not None and on.incremental.last is None       # the one-graph pass ran instead
    for a, b in zip(l0, l1):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-13)
    for a, b in zip(p0, p1):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-13)


def test_static_basis_chunks():
    """Any chunking (one snapshot per chunk, all at once) gives the same basis; GCLSTM's stays a view of x."""
    sig, ei, ew = _signal()
    cell = _cell("DCRNN")
    ref = _block_diagonal_basis(cell, sig)
    obj = reuse_for(cell)(cell, sig.x[:N], ei, ew)
    for chunk in (1, 5 * N * 6 * F * 8, 1 << 30):
        torch.testing.assert_close(static_basis(obj, sig.x, T, ei, ew, chunk_bytes=chunk), ref, rtol=0, atol=1e-9)
    g = _cell("GCLSTM")
    b = static_basis(reuse_for(g)(g, sig.x[:N], ei, ew), sig.x, T, ei, ew)
    assert b.data_ptr() == sig.x.data_ptr() and b.shape == (T * N, 1, F)


def test_one_changed_weight_is_not_static():
    """A weight that differs in the last snapshot only: not static, the block-diagonal basis."""
    sig, ei, ew = _signal()
    sig.edge_weight[-1] += 1.0
    cell = _cell("GConvGRU")
    tr = WindowTrainer(cell, sig, lags=3, batch_size=4, head=torch.nn.Linear(H, F).double(), optimizer="sgd", lr=0.01)
    assert not tr.store.static
    torch.testing.assert_close(tr.reuse_impl.basis, _block_diagonal_basis(cell, sig), rtol=0, atol=1e-9)
