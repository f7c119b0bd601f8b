"""WindowView: windows are index ranges into the one storage (no copies), PyGT's
index-batching windows and split, the split-by-window-end rule, train-only
standardization, and typed errors for bad input."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.windows import WindowTrainer, WindowView, series_signal
from tests.helpers.windows import chickenpox, covid
from tests.helpers.windows import pygt_index_dataset as _pygt_index_dataset


@pytest.mark.parametrize("lags", [1, 3, 4])
def test_series_windows_are_pygt_index_batching(monkeypatch, lags):
    IndexDataset = _pygt_index_dataset(monkeypatch)
    rng = np.random.default_rng(0)
    Tr, N = 31, 5
    data = rng.standard_normal((Tr, N, 2))
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    sig = series_signal(data, ei, torch.ones(5), dtype=torch.float64)
    view = WindowView(sig, lags=lags, horizon=lags)
    # PyGT's loaders: x_i = arange(T - (2 lags - 1)), split by round(n * ratio)
    x_i = np.arange(Tr - (2 * lags - 1))
    n = x_i.shape[0]
    n_train, n_test = round(n * 0.7), round(n * 0.2)
    assert view.num_windows == n
    pygt = {"train": x_i[:n_train], "val": x_i[n_train:n - n_test], "test": x_i[n - n_test:]}
    ds = IndexDataset(x_i, data, lags)
    kept = {k: view.split(k).tolist() for k in ("train", "val", "test")}
    for k, idx in pygt.items():
        # the view keeps PyGT's windows of each split, less the leading ones whose targets overlap the previous split
        assert set(kept[k]) <= set(idx.tolist())
        if lags == 1:
            assert kept[k] == idx.tolist()
    for w in range(view.num_windows):
        X, Y = ds[w]
        win = view[w]
        got_x = torch.stack([view.x_at(t) for t in win.snapshots])
        got_y = torch.stack([view.y_at(t) for t in win.target_snapshots])
        torch.testing.assert_close(got_x, X.to(got_x.dtype), rtol=0, atol=0)
        torch.testing.assert_close(got_y, Y.squeeze(-1).to(got_y.dtype) if Y.shape[-1] == 1 else Y.to(got_y.dtype),
                                   rtol=0, atol=0)


def test_windows_are_views_not_copies():
    sig = covid(T=12)
    view = WindowView(sig, lags=4)
    assert view.x is sig.x
    base = sig.x.untyped_storage().data_ptr()
    for w in range(view.num_windows):
        for t in view[w].snapshots:
            xt = view.x_at(t)
            assert xt.untyped_storage().data_ptr() == base            # a slice of the one storage
            assert xt.data_ptr() == sig.x[sig.node_ptr[t]].data_ptr()
        ei, ew = view.edges_at(view[w].end)
        assert ei.untyped_storage().data_ptr() == sig.edge_index.untyped_storage().data_ptr()
    # per-window storage is one integer: every tensor the view owns besides the signal's
    owned = [v for k, v in vars(view).items() if isinstance(v, torch.Tensor) and v is not sig.x]
    owned += list(view._split.values())
    assert sum(t.numel() * t.element_size() for t in owned) <= 2 * 8 * view.num_windows
    # the trainer keeps the signal's own tensors when dtype and device agree
    from torch_geometric_temporal.nn.recurrent import TGCN

    tr = WindowTrainer(TGCN(4, 3).double(), sig, lags=4, batch_size=2, head=torch.nn.Linear(3, 1).double(),
                       optimizer="sgd", lr=0.01)
    assert tr.store.x.data_ptr() == sig.x.data_ptr() and tr.store.edge_index.data_ptr() == sig.edge_index.data_ptr()


@pytest.mark.parametrize("horizon,stride", [(1, 1), (3, 1), (3, 2), (2, 3)])
def test_split_by_window_end_has_no_leakage(horizon, stride):
    sig = chickenpox(T=60)
    view = WindowView(sig, lags=5, horizon=horizon, stride=stride)
    T, L = 60, 5
    assert view.starts.tolist() == list(range(0, T - L - horizon + 2, stride))
    splits = [view.split(k).tolist() for k in ("train", "val", "test")]
    flat = [w for s in splits for w in s]
    assert flat == sorted(flat) and len(set(flat)) == len(flat)
    if horizon == 1:
        assert flat == list(range(view.num_windows))
    for a, b in zip(splits, splits[1:]):
        if a and b:
            last_target = view[a[-1]].target_snapshots[-1]
            first_target = view[b[0]].target_snapshots[0]
            assert first_target > last_target
            # a training window reads only snapshots before the first target of the next split
            assert view[a[-1]].end < first_target
    assert all(s for s in splits)


def test_standardization_is_fitted_on_training_snapshots_only():
    sig = chickenpox(T=40)
    view = WindowView(sig, lags=4, standardize=True)
    tr = view.split("train")
    a, b = int(view.starts[tr[0]]), int(view.starts[tr[-1]]) + 4
    rows = sig.x[int(sig.node_ptr[a]):int(sig.node_ptr[b])]
    torch.testing.assert_close(view.standardizer.mean, rows.mean(0))
    torch.testing.assert_close(view.standardizer.std, rows.std(0, unbiased=False))
    z = view.x[int(sig.node_ptr[a]):int(sig.node_ptr[b])]
    torch.testing.assert_close(z.mean(0), torch.zeros(4, dtype=z.dtype), atol=1e-12, rtol=0)
    # changing test-only snapshots leaves the statistics unchanged; the signal itself is unchanged
    x2 = sig.x.clone()
    x2[int(sig.node_ptr[b]):] += 100.0
    from pyg_dynscale import DynamicGraphSignal

    sig2 = DynamicGraphSignal.from_tensors(node_ptr=sig.node_ptr, edge_index=sig.edge_index, edge_ptr=sig.edge_ptr,
                                           edge_weight=sig.edge_weight, x=x2, y=sig.y)
    v2 = WindowView(sig2, lags=4, standardize=True)
    torch.testing.assert_close(v2.standardizer.mean, view.standardizer.mean)
    assert view.x.shape == sig.x.shape and view.x is not sig.x        # one tensor for the whole signal
    torch.testing.assert_close(view.standardizer.inverse(view.x), sig.x)


@pytest.mark.parametrize("kwargs,field", [
    ({"lags": 0}, "lags"), ({"lags": 2.5}, "lags"), ({"lags": 3, "horizon": 0}, "horizon"),
    ({"lags": 3, "stride": 0}, "stride"), ({"lags": 30}, "lags"), ({"lags": 8, "horizon": 8}, "lags"),
    ({"lags": 3, "ratio": (0.5, 0.5)}, "ratio"), ({"lags": 3, "ratio": (0.7, 0.2, 0.2)}, "ratio"),
    ({"lags": 3, "ratio": (0.0, 0.5, 0.5)}, "ratio"), ({"lags": 3, "ratio": (1.2, -0.1, -0.1)}, "ratio"),
    ({"lags": 3, "ratio": "abc"}, "ratio"),
])
def test_bad_view_input_names_the_field(kwargs, field):
    with pytest.raises(ModelInputError) as e:
        WindowView(chickenpox(T=14), **kwargs)
    assert e.value.field == field and e.value.fix


def test_bad_trainer_input(monkeypatch):
    from torch_geometric_temporal.nn.recurrent import TGCN

    sig = chickenpox(T=14)
    cell = TGCN(4, 3).double()

    def make(**kw):
        args = dict(lags=3, batch_size=4)
        args.update(kw)
        return WindowTrainer(cell, sig, **args)

    for kw, field in [({"batch_size": 3, "blocks": 2}, "batch_size"), ({"batch_size": 0}, "batch_size"),
                      ({"blocks": 0}, "blocks"), ({"loss": "huber"}, "loss"), ({"loss": "bce_link"}, "loss"),
                      ({"optimizer": "lbfgs"}, "optimizer"), ({"blocks": 20, "batch_size": 20}, "blocks"),
                      ({"reuse": "yes"}, "reuse")]:
        with pytest.raises(ModelInputError) as e:
            make(**kw)
        assert e.value.field == field, kw
    with pytest.raises(ModelInputError, match="node_batch_size"):   # node batches: test_node_batches.py
        make(node_batch_size=0)
    with pytest.raises(ModelInputError, match="decoder.*horizon=4 > lags=3"):   # seq2seq: windows/decoder.py
        make(horizon=4)
    from tests.helpers.signals import make_dynamic_signal

    with pytest.raises(NotImplementedError, match="vertex set changes"):
        WindowTrainer(cell.float(), make_dynamic_signal(T=10, F=4), lags=3, horizon=2, batch_size=2,
                      optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError) as e:
        make().evaluate("holdout")
    assert e.value.field == "split"
    import pyg_dynscale.windows.trainer as tmod

    monkeypatch.setattr(tmod, "_world_size", lambda: 2)
    with pytest.raises(ModelInputError) as e:       # 2 ranks share 3 blocks: refused
        make(blocks=3, batch_size=6)
    assert e.value.field == "blocks"


def test_refused_models_and_pygt_signal_input():
    from torch_geometric_temporal.nn.recurrent import TGCN, EvolveGCNO
    from torch_geometric_temporal.signal import StaticGraphTemporalSignal

    from pyg_dynscale.errors import UnsupportedModelError

    sig = chickenpox(T=14)
    with pytest.raises(UnsupportedModelError, match="evolves"):
        WindowTrainer(EvolveGCNO(4).double(), sig, lags=3, batch_size=2, optimizer="sgd", lr=0.01)
    # a PyGT signal object is accepted as is (converted once)
    rng = np.random.default_rng(0)
    ei = np.array([[0, 1, 2], [1, 2, 0]])
    pygt = StaticGraphTemporalSignal(ei, np.ones(3), [rng.standard_normal((3, 2)) for _ in range(10)],
                                     [rng.standard_normal(3) for _ in range(10)])
    tr = WindowTrainer(TGCN(2, 3), pygt, lags=2, batch_size=2, head=torch.nn.Linear(3, 1), optimizer="sgd", lr=0.01)
    assert tr.view.num_windows == 9 and np.isfinite(tr.train_epoch())


def test_prediction_width_must_match_the_target():
    from torch_geometric_temporal.nn.recurrent import TGCN

    sig = chickenpox(T=14)
    tr = WindowTrainer(TGCN(4, 20).double(), sig, lags=3, batch_size=2,
                       optimizer="sgd", lr=0.01)   # 20 hidden = 20 nodes: would broadcast
    with pytest.raises(ModelInputError) as e:
        tr.train_epoch()
    assert e.value.field == "head" and "Linear" in e.value.fix
