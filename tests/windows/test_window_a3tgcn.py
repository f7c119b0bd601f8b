"""PyGT's A3TGCN / A3TGCN2 as window models of WindowTrainer (windows/window_model.py): with
reuse on and off, every batch loss, the parameters after an epoch and the evaluation equal a
plain PyGT loop that calls the module once per window on X [N, F, L] (float64, 1e-9); with
reuse, each distinct snapshot's per-period TGCN output is computed once per batch (B + L - 1
rows, not B L) and no GCNConv runs; without reuse the module runs once per batch (A3TGCN on the
disjoint union of the windows' graphs); 2 gloo ranks == one process; bad input raises typed
errors."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.windows import WindowTrainer
from pyg_dynscale.windows.view import series_signal
from tests.helpers.windows import chickenpox, covid

LAGS, BATCH, LR, HIDDEN = 4, 5, 0.05, 6


def _a3tgcn(f: int, periods: int = LAGS, batched: bool = False, **kw):
    from torch_geometric_temporal.nn.recurrent import A3TGCN, A3TGCN2

    torch.manual_seed(0)
    m = A3TGCN2(f, HIDDEN, periods, batch_size=BATCH, **kw) if batched else A3TGCN(f, HIDDEN, periods, **kw)
    return m.double()


def _series(T: int = 16, N: int = 7, F: int = 2):
    g = torch.Generator().manual_seed(1)
    D = torch.randn(T, N, F, generator=g, dtype=torch.float64)
    src = torch.arange(N)
    ei = torch.cat([torch.stack([src, (src + 1) % N]), torch.stack([(src + 2) % N, src])], 1)
    w = torch.rand(ei.shape[1], generator=g, dtype=torch.float64) + 0.5
    return series_signal(D, ei, w, dtype=torch.float64)


def _window_x(sig, s: int) -> torch.Tensor:
    """``[N, F, L]``: the window's snapshots stacked on the last axis, as PyGT's IndexDataset gives them."""
    return torch.stack([sig[t].x for t in range(s, s + LAGS)], -1)


def _reference(model, head, sig, batches, batched: bool) -> list:
    """The plain loop: per window, ``h = model(X [N, F, L], edge_index, edge_weight)`` (A3TGCN2:
    on ``X[None]``), ``head(h)`` against ``y`` of the window's last snapshot; mean over nodes,
    then over the batch's windows; SGD."""
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    losses = []
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)   # PyGT's TGCN builds its zero state with the default dtype
    try:
        for wins in batches:
            opt.zero_grad()
            per = []
            for s in wins:
                snap = sig[s + LAGS - 1]
                X = _window_x(sig, s)
                h = model(X[None], snap.edge_index, snap.edge_attr)[0] if batched else \
                    model(X, snap.edge_index, snap.edge_attr)
                per.append(((_pred(head, h, snap.y) - snap.y) ** 2).mean())
            loss = torch.stack(per).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        torch.set_default_dtype(old)
    return losses


def _pred(head, h, y):
    p = head(h)
    return p.squeeze(-1) if y.dim() == 1 else p


def _train_batches(trainer) -> list:
    starts = trainer.view.starts.index_select(0, trainer.view.split("train")).tolist()
    return [starts[a:a + BATCH] for a in range(0, len(starts), BATCH)]


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("data,batched", [("chickenpox", False), ("series", False), ("series", True)])
def test_equals_pygt_window_loop(data, batched, reuse):
    sig = chickenpox(T=24) if data == "chickenpox" else _series()
    F = sig.x.shape[1]
    model = _a3tgcn(F, batched=batched)
    torch.manual_seed(1)
    head = torch.nn.Linear(HIDDEN, 1 if sig.y.dim() == 1 else sig.y.shape[1]).double()
    ref_model, ref_head = copy.deepcopy(model), copy.deepcopy(head)
    trainer = WindowTrainer(model, sig, lags=LAGS, batch_size=BATCH, loss="mse", lr=LR, head=head, reuse=reuse,
                            optimizer="sgd")
    assert trainer.window_model and (trainer.window_runner.reuse is not None) == reuse
    batches = _train_batches(trainer)
    mean = trainer.train_epoch()
    ref = _reference(ref_model, ref_head, sig, batches, batched)
    assert len(ref) >= 2 and len(trainer.batch_losses) == len(ref)
    for a, b in zip(trainer.batch_losses, ref):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(mean, sum(ref) / len(ref), rel_tol=1e-9)
    for (n, p), q in zip(list(model.named_parameters()) + list(head.named_parameters()),
                         list(ref_model.parameters()) + list(ref_head.parameters())):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12, msg=n)
    # evaluation: the test windows through the plain call
    got = trainer.evaluate("test")
    wins = trainer.view.starts.index_select(0, trainer.view.split("test")).tolist()
    with torch.no_grad():
        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            errs = []
            for s in wins:
                snap = sig[s + LAGS - 1]
                X = _window_x(sig, s)
                h = ref_model(X[None], snap.edge_index, snap.edge_attr)[0] if batched else \
                    ref_model(X, snap.edge_index, snap.edge_attr)
                errs.append(float(((_pred(ref_head, h, snap.y) - snap.y) ** 2).mean()))
        finally:
            torch.set_default_dtype(old)
    assert math.isclose(got["mse"], sum(errs) / len(errs), rel_tol=1e-9)


@pytest.mark.parametrize("batched", [False, True])
def test_reuse_computes_each_snapshot_once_per_batch(batched):
    """reuse=True: B + L - 1 per-period outputs per batch of B consecutive windows, in one
    product, no GCNConv call; reuse=False: B L (the module called once per batch, its TGCN
    cell once per period on all B windows)."""
    sig = chickenpox(T=24)
    N, F = int(sig.nodes_per_snapshot[0]), sig.x.shape[1]
    for reuse in (True, False):
        model = _a3tgcn(F, batched=batched)
        trainer = WindowTrainer(model, sig, lags=LAGS, batch_size=BATCH, loss="mse", lr=LR,
                                head=torch.nn.Linear(HIDDEN, 1).double(), reuse=reuse, optimizer="sgd")
        sizes = [len(b) for b in _train_batches(trainer)]
        conv_calls, cell_rows, rows = [], [], []
        model._base_tgcn.conv_z.register_forward_hook(lambda m, i, o: conv_calls.append(1))
        model._base_tgcn.register_forward_hook(lambda m, i, o: cell_rows.append(o.numel() // HIDDEN))
        if reuse:
            impl = trainer.window_runner.reuse
            orig = impl.step_projected

            def counted(proj, graph, states, w):
                rows.append(proj.shape[0])
                return orig(proj, graph, states, w)
            impl.step_projected = counted
        trainer.train_epoch()
        if reuse:
            assert rows == [(b + LAGS - 1) * N for b in sizes]
            assert conv_calls == [] and cell_rows == []
        else:
            assert sum(cell_rows) == sum(b * LAGS * N for b in sizes)
            assert len(conv_calls) == len(sizes) * LAGS   # the module once per batch


def test_shuffled_batches_compute_distinct_snapshots():
    """With shuffle, a batch computes each distinct snapshot of its windows once (and equals reuse=False)."""
    sig = _series(T=30)
    out = {}
    for reuse in (True, False):
        trainer = WindowTrainer(_a3tgcn(2), sig, lags=LAGS, batch_size=BATCH, loss="mse", lr=LR, shuffle=True,
                                head=torch.nn.Linear(HIDDEN, 2).double(), reuse=reuse, optimizer="sgd")
        batches = trainer.batches()
        out[reuse] = trainer.train_epoch(), trainer.window_runner.computed
        last = trainer.view.starts.index_select(0, batches[-1]).tolist()
    assert math.isclose(out[True][0], out[False][0], rel_tol=1e-9)
    assert out[True][1] == len({s + p for s in last for p in range(LAGS)}) and out[False][1] == len(last) * LAGS


def test_bad_input():
    sig = chickenpox(T=24)
    F = sig.x.shape[1]
    kw = dict(batch_size=BATCH, loss="mse", head=torch.nn.Linear(HIDDEN, 1).double())
    with pytest.raises(ModelInputError, match=r"lags.*is 3.*periods is 4"):
        WindowTrainer(_a3tgcn(F), sig, lags=3, **kw, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="horizon"):
        WindowTrainer(_a3tgcn(F), sig, lags=LAGS, horizon=2, **kw, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="decoder"):
        WindowTrainer(_a3tgcn(F), sig, lags=LAGS, decoder="copy", **kw, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="in_channels=3"):
        WindowTrainer(_a3tgcn(3), sig, lags=LAGS, **kw, optimizer="sgd", lr=0.01)
    with pytest.raises(NotImplementedError, match="node_batch_size"):
        WindowTrainer(_a3tgcn(F), sig, lags=LAGS, node_batch_size=4, **kw, optimizer="sgd", lr=0.01)
    with pytest.raises(NotImplementedError, match="cache_bytes"):
        WindowTrainer(_a3tgcn(F), sig, lags=LAGS, cache_bytes=10_000, **kw, optimizer="sgd", lr=0.01)
    cv = covid(T=14)
    with pytest.raises(ModelInputError, match="changes its graph"):
        WindowTrainer(_a3tgcn(cv.x.shape[1]), cv, lags=LAGS, **kw, optimizer="sgd", lr=0.01)


def test_cached_cell_is_called_as_it_is():
    """A cell with cached=True (GCNConv keeps its first normalization) has no reuse: called as it is."""
    sig = chickenpox(T=24)
    trainer = WindowTrainer(_a3tgcn(sig.x.shape[1], cached=True), sig, lags=LAGS, batch_size=BATCH, loss="mse",
                            head=torch.nn.Linear(HIDDEN, 1).double(), reuse=True, optimizer="sgd", lr=0.01)
    assert trainer.window_runner.reuse is None
    trainer.train_epoch()
    assert trainer.window_runner.computed == len(_train_batches(trainer)[-1]) * LAGS


def _ranked(reuse: bool):
    sig = chickenpox(T=24)
    torch.manual_seed(0)
    model, head = _a3tgcn(sig.x.shape[1]), torch.nn.Linear(HIDDEN, 1).double()
    tr = WindowTrainer(model, sig, lags=LAGS, batch_size=4, loss="mse", lr=LR, head=head, reuse=reuse, blocks=2,
                       optimizer="sgd")
    losses = [tr.train_epoch() for _ in range(2)]
    return losses, [p.detach().clone() for p in list(model.parameters()) + list(head.parameters())], tr.evaluate("test")


def _ranks(rank, world):
    torch.set_num_threads(1)
    return [_ranked(r) for r in (True, False)]


def test_two_ranks_equal_one_process():
    """Under 2 gloo ranks (placement="blocks": each rank holds only its windows' snapshots, the
    reuse basis of those) == one process with the same blocks, reuse on and off (float64)."""
    from pyg_dynscale.training.launch import spawn

    torch.set_num_threads(1)
    single = [_ranked(r) for r in (True, False)]
    per_rank = spawn(_ranks, 2, timeout=120)
    for i, ref in enumerate(single):
        r0, r1 = per_rank[0][i], per_rank[1][i]
        assert r0[0] == r1[0]
        for a, b in zip(r0[0], ref[0]):
            assert math.isclose(a, b, rel_tol=1e-9)
        for a, b, c in zip(r0[1], r1[1], ref[1]):
            assert torch.equal(a, b)
            torch.testing.assert_close(a, c, rtol=1e-9, atol=1e-12)
        assert all(math.isclose(r0[2][k], ref[2][k], rel_tol=1e-9) for k in ref[2])
