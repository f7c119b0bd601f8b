"""Signals, models and the plain PyGT-style window loop the windowed tests compare with."""
from __future__ import annotations

import functools
import sys
import types
from pathlib import Path

import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.data.loaders import load_england_covid, load_pygt_json
from pyg_dynscale.windows import series_signal
from tests.helpers.datasets import dataset_file


def as64(sig: DynamicGraphSignal, T: int, x_shape=None) -> DynamicGraphSignal:
    """The first ``T`` snapshots of ``sig`` in float64 (``x`` reshaped per row to ``x_shape``)."""
    s = sig[0:T]
    x = s.x.double()
    if x_shape is not None:
        x = x.reshape(x.shape[0], *x_shape)
    return DynamicGraphSignal.from_tensors(
        node_ptr=s.node_ptr, edge_index=s.edge_index, edge_ptr=s.edge_ptr, node_id=s.node_id,
        edge_weight=None if s.edge_weight is None else s.edge_weight.double(), x=x, y=s.y.double(),
        num_vertices=s.num_vertices)


#: the most snapshots a windows test takes of :func:`chickenpox` (``T``), with room for lags and horizon
CHICKENPOX_STEPS = 80


@functools.lru_cache(maxsize=None)
def _chickenpox_file():
    """PyGT's chickenpox.json where ../shared has it, else one laid out like it: the stand-in's real graph and
    first weeks, continued by seeded weekly series up to :data:`CHICKENPOX_STEPS` rows (the stand-in holds 14
    rows, too few for the windows tests, which check code paths, not the data's facts)."""
    import atexit
    import json
    import shutil
    import tempfile

    import numpy as np

    path = dataset_file("pygt/chickenpox.json")
    data = json.loads(path.read_text())
    if len(data["FX"]) >= CHICKENPOX_STEPS:
        return path
    rng = np.random.default_rng(521)
    extra = rng.standard_normal((CHICKENPOX_STEPS - len(data["FX"]), len(data["node_ids"])))
    data["FX"] = data["FX"] + extra.round(6).tolist()
    folder = Path(tempfile.mkdtemp(prefix="pyg_dynscale_chickenpox_"))
    atexit.register(shutil.rmtree, folder, True)
    out = folder / "chickenpox.json"
    out.write_text(json.dumps(data))
    return out


@functools.lru_cache(maxsize=None)
def _chickenpox():
    return load_pygt_json(_chickenpox_file(), "chickenpox", feature_lags=4)


@functools.lru_cache(maxsize=None)
def _covid():
    return load_england_covid(feature_lags=4)


def chickenpox(T: int = 20, x_shape=None) -> DynamicGraphSignal:
    """Static graph (20 nodes), 4 features; ``T`` <= :data:`CHICKENPOX_STEPS` - 4."""
    assert T <= CHICKENPOX_STEPS - 4, f"chickenpox(T={T}): the stand-in's series holds {CHICKENPOX_STEPS - 4}"
    return as64(_chickenpox(), T, x_shape)


def covid(T: int = 14, x_shape=None) -> DynamicGraphSignal:
    """Changing graph (129 nodes, weighted edges that change every day), 4 features."""
    return as64(_covid(), T, x_shape)


class RecurrentGCN(torch.nn.Module):
    """A user's model: GConvGRU + Linear, carrying its state (PyGT's examples/recurrent)."""

    def __init__(self, f: int, hidden: int = 8):
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import GConvGRU

        self.recurrent = GConvGRU(f, hidden, 2)
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_weight, h):
        h = self.recurrent(x, edge_index, edge_weight, h)
        return self.linear(torch.relu(h)), h


class StatelessGCN(torch.nn.Module):
    """PyGT's README model: no carried state (each snapshot alone)."""

    def __init__(self, f: int, hidden: int = 8):
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import GConvGRU

        self.recurrent = GConvGRU(f, hidden, 2)
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_weight):
        return self.linear(torch.relu(self.recurrent(x, edge_index, edge_weight)))


def window_starts(T: int, lags: int, ratio=(0.7, 0.1, 0.2), horizon: int = 1) -> list:
    """PyGT's training windows (start indices) for stride 1."""
    W = T - lags - horizon + 2
    return list(range(round(W * ratio[0])))


def pygt_loop(model, head, signal, lags, batch_size, lr, stateful=True, batches=None, horizon=1):
    """The plain loop a PyGT index-batching user writes (shuffle=False, SGD): for each batch,
    for each window, h = None, run the model over the window's snapshots, predict at the last
    one; mean loss over windows (each the mean over nodes); backward; step. Returns the batch losses.
    ``horizon`` H > 1: PyGT BatchedDCRNN's alignment, the output at window step L-H+k is compared
    with y of snapshot e+k (mean over k and nodes)."""
    starts = window_starts(signal.num_snapshots, lags, horizon=horizon)
    if batches is None:
        batches = [starts[a:a + batch_size] for a in range(0, len(starts), batch_size)]
    params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)   # PyGT cells build a missing state with the default dtype
    try:
        _run(batches, model, head, signal, lags, stateful, opt, losses, horizon)
    finally:
        torch.set_default_dtype(old)
    return losses


def _run(batches, model, head, signal, lags, stateful, opt, losses, horizon=1):
    for wins in batches:
        opt.zero_grad()
        per_window = []
        for s in wins:
            h = None
            step_losses = []
            for t in range(s, s + lags):
                snap = signal[t]
                if stateful:
                    out = model(snap.x, snap.edge_index, snap.edge_attr, h)
                    if isinstance(out, tuple):
                        y, h = out
                    else:
                        y = h = out
                else:
                    y = model(snap.x, snap.edge_index, snap.edge_attr)
                k = t - (s + lags - horizon)
                if k >= 0:
                    pred = head(y) if head is not None else y
                    target = signal[s + lags - 1 + k].y
                    step_losses.append(torch.mean((pred.squeeze(-1) - target) ** 2))
            per_window.append(torch.stack(step_losses).mean())
        loss = torch.stack(per_window).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))


def pygt_index_dataset(monkeypatch):
    """PyGT's IndexDataset; its module imports dask at the top (unused without lazy=True)."""
    if "dask" not in sys.modules:
        dask = types.ModuleType("dask")
        dask.array = types.ModuleType("dask.array")
        monkeypatch.setitem(sys.modules, "dask", dask)
        monkeypatch.setitem(sys.modules, "dask.array", dask.array)
    from torch_geometric_temporal.signal.index_dataset import IndexDataset

    return IndexDataset


def series_static(T: int = 20, N: int = 6) -> DynamicGraphSignal:
    """PyGT's index-batching data on a ring (one feature): Y_t = X_{t+1}."""
    ring = torch.arange(N)
    ei = torch.cat([torch.stack([ring, (ring + 1) % N]), torch.stack([(ring + 1) % N, ring])], 1)
    ew = torch.rand(ei.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    data = torch.randn(T + 1, N, 1, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    return series_signal(data, ei, ew, dtype=torch.float64)


def series_changing(T: int = 18) -> DynamicGraphSignal:
    """England COVID's counts as a one-feature series on its changing daily graphs: Y_t = X_{t+1}."""
    c = covid(T=T + 1)
    n = int(c.nodes_per_snapshot[0])
    y = c.y.view(T + 1, n)
    a, b = int(c.edge_ptr[1]), int(c.edge_ptr[T + 1])
    return DynamicGraphSignal.from_tensors(
        node_ptr=torch.arange(T + 1) * n, edge_index=c.edge_index[:, a:b], edge_ptr=c.edge_ptr[1:] - a,
        edge_weight=c.edge_weight[a:b], x=y[:T].reshape(-1, 1), y=y[1:].reshape(-1), num_vertices=n)
