r"""Windowed training side by side with PyGT's own index-batching (issue 26,
benchmarks): epoch time and peak memory, in one run, interleaved repeats.

1. **PyGT's index-batching examples vs** :class:`~pyg_dynscale.windows.WindowTrainer`.
   PyGT's side is PyGT's own code: the dataset loaders' ``get_index_dataset``
   (``IndexDataset`` + ``DataLoader``), and the models and loops of
   ``examples/indexBatching/`` (``DCRNN/*_main.py``: ``BatchedDCRNN(F, F, K=3)``
   on ``X [B, L, N, F]``, masked MAE against the next ``L`` steps;
   ``tgcn/*_main.py``: ``TGCN2`` (hidden 32) stepped over the window, ReLU,
   ``Linear(32, F)``, masked MAE; ``A3TGCN/*_main.py``: ``A3TGCN2`` (hidden
   32, ``periods=L``), ReLU, ``Linear(32, L)``, MSE of feature 0 of the next
   ``L`` steps; Adam, ``lr=0.001``, ``shuffle=False``). Ours trains an
   identical copy of the same weights: ``BatchedDCRNN`` through
   ``WindowTrainer(..., horizon=L, loss="mae")`` as it is, and the
   per-snapshot siblings ``DCRNN`` / ``TGCN`` (+ the same ReLU-Linear head)
   with ``reuse=True`` (and ``reuse=False``). The windows are exactly
   ``IndexDataset``'s (``series_signal(D, edges, weights)``). ``A3TGCN``
   (+ the same head) is a window model of ``WindowTrainer``
   (``windows/window_model.py``: called per window on ``X [N, F, L]``,
   ``lags=L=periods``; ``reuse=True``: each distinct snapshot's per-period
   TGCN output once per batch) on a signal over the same ``D``: ``x_t = D_t``,
   ``y_t`` = feature 0 of ``D_{t+1..t+L}`` (a strided view, no copy), the
   example's targets.
   Data: **Chickenpox** (PyGT's loader on the shared JSON, lags 4, as PyGT's
   ``DCRNN/chicken_pox_main.py``) and **road**, a synthetic static road-like
   graph of PeMS-Bay's size (325 sensors, each fed by its 7 nearest
   neighbours with a Gaussian distance kernel, plus self-loops as in PeMS-Bay's
   adjacency: 2,600 edges; 52,116 five-minute steps, speed + time of day,
   deterministic), written as ``pems_adj_mat.npy`` / ``pems_node_values.npy``
   and read by PyGT's ``PemsBayDatasetLoader(index=True).get_index_dataset``
   (lags 12, z-scored as PyGT does).
   Epoch time: median of ``--epochs`` interleaved repeats (each repeat runs
   every row once, so load from other processes hits all rows alike); with
   ``--max-batches k`` a repeat times the first ``k`` batches and the epoch
   is extrapolated (``x n/k``, labelled). Peak memory: the process's peak
   RSS above its level before the measured pass (``/proc/self/clear_refs``
   after ``malloc_trim``; CPU), or ``torch.cuda.max_memory_allocated``
   (CUDA); setup memory and time (data + trainer construction) separately.
   The ratio is PyGT's epoch time / the row's; the issue's goal is >= 3x on
   every row (printed as a target, not checked).
2. **Reuse on vs off**: the per-snapshot rows of section 1 with
   ``reuse=False`` against ``reuse=True``, same run.
3. **Incremental aggregation vs change ratio**, **cache hit rate vs
   bound**, **snapshot blocks vs replicated vs vertex partitions**: each
   runs when its feature exists in the package and otherwise prints one line
   ``not built yet: <what>``.

    python benchmarks/bench_windows.py                  # full (--max-batches 10 on road)
    python benchmarks/bench_windows.py --quick          # smoke test (seconds)
    python benchmarks/bench_windows.py --device cuda --max-batches 0   # full epochs on a GPU

Tables are markdown (``docs/windows.md`` quotes them); ``--json PATH`` writes
every row.
"""
from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import importlib
import inspect
import json
import os
import statistics
import sys
import tempfile
import time
import types
from typing import Callable, Optional

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pyg_dynscale._optional import import_pygt  # noqa: E402
from pyg_dynscale.data.signal import DynamicGraphSignal  # noqa: E402
from pyg_dynscale.windows import WindowTrainer, series_signal  # noqa: E402

from _shared import DATASETS  # noqa: E402

HIDDEN = 32
LR = 1e-3
GOAL = 3.0


# ------------------------------------------------------------------ memory
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


class Peak:
    """Peak memory above the level at entry: RSS (CPU; the kernel's peak-RSS
    counter reset through ``/proc/self/clear_refs``) or the CUDA allocator's
    peak. ``mib`` is ``None`` where neither can be read."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.mib: Optional[float] = None

    def __enter__(self) -> "Peak":
        _trim()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.base = _status_kib("VmRSS")
        except OSError:
            self.base = None
        return self

    def __exit__(self, *exc) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            self.mib = (torch.cuda.max_memory_allocated() - self.base) / 2**20
        elif self.base is not None:
            self.mib = (_status_kib("VmHWM") - self.base) / 1024


# ------------------------------------------------------------------ PyGT's side
def pygt_index_modules():
    """PyGT's ``IndexDataset`` and the two loaders. ``index_dataset.py`` imports
    dask at the top but uses it only with ``lazy=True``: where dask is not
    installed an empty stand-in module lets it import (never used)."""
    import_pygt("bench_windows")
    try:
        import dask  # noqa: F401
        import dask.array  # noqa: F401
    except ImportError:
        stub = types.ModuleType("dask")
        stub.array = types.ModuleType("dask.array")
        sys.modules.setdefault("dask", stub)
        sys.modules.setdefault("dask.array", stub.array)
    from torch_geometric_temporal.dataset import ChickenpoxDatasetLoader, PemsBayDatasetLoader
    from torch_geometric_temporal.signal.index_dataset import IndexDataset

    return IndexDataset, ChickenpoxDatasetLoader, PemsBayDatasetLoader


def masked_mae_loss(y_pred, y_true):
    """PyGT's ``examples/indexBatching/DCRNN/utils.py`` (and ``tgcn/*_main.py``), verbatim."""
    mask = (y_true != 0).float()
    mask /= mask.mean()
    loss = torch.abs(y_pred - y_true)
    loss = loss * mask
    loss[loss != loss] = 0
    return loss.mean()


class BatchedTGCN(torch.nn.Module):
    """``examples/indexBatching/tgcn/pems_bay_main.py``'s model, verbatim."""

    def __init__(self, in_channels, hidden_dim, out_channels):
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import TGCN2

        self.tgnn = TGCN2(in_channels, hidden_dim, 1)
        self.linear = torch.nn.Linear(hidden_dim, out_channels)

    def forward(self, x, edge_index, edge_weight):
        B, N, Fin, T = x.shape
        h = None
        output_sequence = []
        for t in range(T):
            h = self.tgnn(x[..., t], edge_index, edge_weight, h)
            h_t = torch.nn.functional.relu(h)
            out_t = self.linear(h_t).unsqueeze(1)
            output_sequence.append(out_t)
        return torch.cat(output_sequence, dim=1)


class TemporalGNN(torch.nn.Module):
    """``examples/indexBatching/A3TGCN/pems_bay_main.py``'s model, verbatim."""

    def __init__(self, node_features, periods, batch_size):
        super().__init__()
        from torch_geometric_temporal.nn.recurrent import A3TGCN2

        self.tgnn = A3TGCN2(in_channels=node_features, out_channels=HIDDEN, periods=periods, batch_size=batch_size)
        self.linear = torch.nn.Linear(HIDDEN, periods)

    def forward(self, x, edge_index):
        h = self.tgnn(x, edge_index)
        h = torch.nn.functional.relu(h)
        return self.linear(h)


# the three loops of examples/indexBatching (one batch each)
def dcrnn_batch(model, X, y, ei, ew):
    return masked_mae_loss(model(X, ei, ew), y)


def tgcn_batch(model, X, y, ei, ew):
    # the example squeezes y_hat [B, L, N, F]; with F = 1 that would broadcast against y [B, L, N, 1]
    y_hat = model(X.permute(0, 2, 3, 1), ei, ew)
    return masked_mae_loss(y_hat.reshape(y.shape), y)


def a3tgcn_batch(model, X, y, ei, ew):
    y_hat = model(X.permute(0, 2, 3, 1), ei)            # the example passes no edge weights
    return torch.nn.functional.mse_loss(y_hat, y[..., 0].permute(0, 2, 1))


# ------------------------------------------------------------------ data
class Data:
    """One dataset, loaded by PyGT's own loader: its train ``DataLoader``, the
    series ``D [T, N, F]`` it indexes, edges and weights; and our signals over
    the same storage."""

    def __init__(self, name: str, train_dl, edges, weights, lags: int, setup_s: float):
        self.name, self.train_dl, self.lags, self.setup_s = name, train_dl, lags, setup_s
        self.setup_mib: Optional[float] = None          # set by main()
        self.device = torch.device("cpu")               # set by main()
        #: our signals over ``D``: (what, seconds, Peak) of each construction
        self.built: list = []
        self.D = train_dl.dataset.data                  # numpy [T, N, F]: what IndexDataset slices
        self.edges, self.weights = edges, weights
        T, N, F = self.D.shape
        self.T, self.N, self.F = T, N, F
        self._series = self._a3 = None

    def series(self, dtype: torch.dtype) -> DynamicGraphSignal:
        """``series_signal(D, edges, weights)``: windows == ``IndexDataset``'s."""
        if self._series is None:
            self._series = self._built("series_signal", lambda: series_signal(self.D, self.edges, self.weights, dtype=dtype))
        return self._series

    def _built(self, what: str, make: Callable) -> DynamicGraphSignal:
        """``make()``, its time and memory recorded in ``self.built``."""
        with Peak(self.device) as p:
            t0 = time.perf_counter()
            sig = make()
            self.built.append((what, time.perf_counter() - t0, p))
        return sig

    def a3tgcn_series(self, dtype: torch.dtype) -> DynamicGraphSignal:
        r"""The A3TGCN example's data as a series: snapshot :math:`t < T - L`
        holds :math:`x_t = D_t` ``[N, F]`` and :math:`y_t` = feature 0 of
        :math:`D_{t+1..t+L}` as ``[N, L]`` (a strided view of ``D``, no
        copy), so windows of ``lags=L`` are PyGT's ``T - 2L + 1`` windows with
        the example's targets; no edge weights (the example passes none)."""
        if self._a3 is None:
            L, N, F = self.lags, self.N, self.F
            S = self.T - L
            d = torch.as_tensor(self.D).to(dtype).contiguous().reshape(-1)
            x = d[:S * N * F].view(S * N, F)
            y = d.as_strided((S * N, L), (F, N * F), N * F)
            E = int(self.edges.shape[1])
            self._a3 = self._built("A3TGCN's series signal", lambda: DynamicGraphSignal.from_tensors(
                node_ptr=torch.arange(S + 1) * N, edge_ptr=torch.arange(S + 1) * E,
                edge_index=self.edges.repeat(1, S), x=x, y=y))
        return self._a3


def load_chickenpox(batch_size: int, lags: int, weeks: Optional[int]) -> Data:
    """PyGT's ``ChickenpoxDatasetLoader(index=True).get_index_dataset`` on the
    shared JSON (the loader downloads the same file; here it is read from disk)."""
    IndexDataset, Chickenpox, _ = pygt_index_modules()
    t0 = time.perf_counter()
    loader = Chickenpox.__new__(Chickenpox)
    with open(DATASETS / "pygt" / "chickenpox.json") as f:
        loader._dataset = json.load(f)
    if weeks:
        loader._dataset["FX"] = loader._dataset["FX"][:weeks]
    loader.index, loader.IndexDataset = True, IndexDataset
    train_dl, _val, _test, edges, weights = loader.get_index_dataset(lags=lags, batch_size=batch_size)
    return Data("Chickenpox", train_dl, edges, weights, lags, time.perf_counter() - t0)


def road_series(N: int, T: int, k: int = 7, seed: int = 0) -> tuple:
    """A static road-like sensor graph and a traffic-like signal, deterministic.

    Sensors at seeded random points of a 2-D region; each is fed by its ``k``
    nearest sensors with DCRNN's Gaussian kernel weight
    :math:`\\exp(-d^2/\\sigma^2)` (:math:`\\sigma` = the distances' std), plus a
    self-loop of weight 1 (PeMS-Bay's adjacency has them). Speed: a per-sensor
    free-flow level, minus two daily rush-hour dips of per-sensor depth,
    plus noise smoothed over the graph; feature 2: time of day in ``[0, 1)``
    (PyGT's PeMS preprocessing adds it). Returns ``A [N, N]`` (``A[i, j]``:
    edge ``i -> j``) and ``values [T, N, 2]`` float32."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform(0, 10, (N, 2))
    d = np.sqrt(((pos[:, None] - pos[None]) ** 2).sum(-1))
    np.fill_diagonal(d, np.inf)
    nbr = np.argsort(d, axis=0)[:k]                    # the k sources of every target column
    dist = np.take_along_axis(d, nbr, 0)
    sigma = dist.std()
    A = np.zeros((N, N), dtype=np.float32)
    A[nbr, np.arange(N)[None, :]] = np.exp(-(dist / sigma) ** 2)
    np.fill_diagonal(A, 1.0)
    steps_per_day = 288
    tod = (np.arange(T) % steps_per_day) / steps_per_day
    free = rng.uniform(55, 70, N).astype(np.float32)
    depth = rng.uniform(5, 30, N).astype(np.float32)
    rush = np.exp(-((tod - 8 / 24) / 0.04) ** 2) + np.exp(-((tod - 17.5 / 24) / 0.05) ** 2)
    P = A / A.sum(0, keepdims=True)
    noise = rng.standard_normal((T, N)).astype(np.float32) @ P @ P
    speed = free[None] - depth[None] * rush[:, None].astype(np.float32) + 2.0 * noise
    values = np.stack([speed, np.broadcast_to(tod[:, None], (T, N))], -1).astype(np.float32)
    return A, values


def load_road(batch_size: int, lags: int, steps: int, nodes: int) -> Data:
    """PyGT's ``PemsBayDatasetLoader(index=True).get_index_dataset`` reading the
    synthetic road graph from ``pems_adj_mat.npy`` / ``pems_node_values.npy``
    (PeMS-Bay's files and layout: ``[T, N, F]``) in a temporary folder (an
    empty ``PEMS-BAY.zip`` there stops the loader from downloading)."""
    IndexDataset, _, PemsBay = pygt_index_modules()
    A, values = road_series(nodes, steps)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        np.save(os.path.join(tmp, "pems_adj_mat.npy"), A)
        np.save(os.path.join(tmp, "pems_node_values.npy"), values)
        open(os.path.join(tmp, "PEMS-BAY.zip"), "wb").close()
        loader = PemsBay(raw_data_dir=tmp, index=True)
        train_dl, _val, _test, edges, weights, _means, _stds = loader.get_index_dataset(lags=lags, batch_size=batch_size)
    return Data("road", train_dl, edges, weights, lags, time.perf_counter() - t0)


# ------------------------------------------------------------------ rows
class Row:
    """One training loop of section 1; ``run(k)`` trains ``k`` batches (``None``:
    one epoch) and returns their mean loss."""

    kind = "ours"

    def __init__(self, family: str, label: str):
        self.family, self.label = family, label
        self.times: list = []
        self.losses: list = []
        self.peak_mib: Optional[float] = None
        self.setup_s = 0.0
        self.setup_mib: Optional[float] = None
        self.note = ""

    def release(self) -> None:
        for name in ("trainer", "model", "opt"):
            if hasattr(self, name):
                setattr(self, name, None)
        _trim()

    def timed(self, k: Optional[int], sync: Callable) -> None:
        sync()
        t0 = time.perf_counter()
        loss = self.run(k)
        sync()
        self.times.append(time.perf_counter() - t0)
        self.losses.append(loss)


class PygtRow(Row):
    kind = "pygt"

    def __init__(self, family, label, model, data: Data, batch_fn, device, dtype):
        super().__init__(family, label)
        self.model, self.batch_fn, self.device, self.dtype = model, batch_fn, device, dtype
        self.dl = data.train_dl
        self.ei = data.edges.to(device)
        self.ew = data.weights.to(device, dtype)
        self.opt = torch.optim.Adam(model.parameters(), lr=LR)
        self.n_batches = len(self.dl)

    def run(self, k: Optional[int]) -> float:
        self.model.train()
        losses = []
        for i, (X, y) in enumerate(self.dl):
            if k is not None and i >= k:
                break
            X, y = X.to(self.device, self.dtype), y.to(self.device, self.dtype)   # the examples' .to(device).float()
            loss = self.batch_fn(self.model, X, y, self.ei, self.ew)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
        return sum(losses) / len(losses)


class OursRow(Row):
    def __init__(self, family, label, make: Callable, device):
        super().__init__(family, label)
        with Peak(device) as p:
            t0 = time.perf_counter()
            self.trainer: WindowTrainer = make()
            self.setup_s = time.perf_counter() - t0
        self.setup_mib = p.mib
        self.n_batches = len(self.trainer.batches())

    def run(self, k: Optional[int]) -> float:
        tr = self.trainer
        if k is None or k >= self.n_batches:
            return tr.train_epoch()
        # the first k batches of train_epoch(), unchanged (one process)
        tr.model.train()
        if tr.head is not None:
            tr.head.train()
        losses = []
        for wins in tr.batches()[:k]:
            tr.optimizer.zero_grad()
            loss = tr.batch_loss(wins)
            loss.backward()
            tr.optimizer.step()
            losses.append(float(loss.detach()))
        return sum(losses) / len(losses)


def _load_weights(dst: torch.nn.Module, src: torch.nn.Module, prefix: str = "") -> None:
    """``dst`` takes ``src``'s parameters under ``prefix`` (the same names and shapes)."""
    state = {k[len(prefix):]: v.clone() for k, v in src.state_dict().items() if k.startswith(prefix)}
    dst.load_state_dict(state, strict=True)


def family_rows(family: str, data: Data, args, device, dtype, skip_reuse_off: bool) -> list:
    """The rows of one model family on one dataset: PyGT's example loop first,
    then ours with identical initial weights."""
    from torch_geometric_temporal.nn.recurrent import A3TGCN, DCRNN, TGCN, BatchedDCRNN

    F, L, B = data.F, data.lags, args.batch_size
    torch.manual_seed(0)
    rows: list = []

    def ours(label, model, signal, reuse, **kw):
        def make():
            return WindowTrainer(model, signal, lags=kw.pop("lags", L), horizon=kw.pop("horizon", L), batch_size=B,
                                 loss=kw.pop("loss", "mae"), lr=LR, optimizer="adam", reuse=reuse, **kw)
        return OursRow(family, label, make, device)

    if family == "DCRNN":
        ref = BatchedDCRNN(F, F, K=3).to(device, dtype)
        rows.append(PygtRow(family, "PyGT loop, BatchedDCRNN(K=3)", copy.deepcopy(ref), data, dcrnn_batch, device, dtype))
        rows.append(ours("WindowTrainer, BatchedDCRNN as is", copy.deepcopy(ref), data.series(dtype), True))
        for reuse in (True, False):
            if not reuse and skip_reuse_off:
                continue
            cell = DCRNN(F, F, K=3).to(device, dtype)
            _load_weights(cell, ref)
            rows.append(ours(f"WindowTrainer, DCRNN(K=3), reuse={reuse}", cell, data.series(dtype), reuse))
    elif family == "TGCN":
        ref = BatchedTGCN(F, HIDDEN, F).to(device, dtype)
        rows.append(PygtRow(family, "PyGT loop, TGCN2 + Linear", copy.deepcopy(ref), data, tgcn_batch, device, dtype))
        for reuse in (True, False):
            cell = TGCN(F, HIDDEN).to(device, dtype)
            _load_weights(cell, ref, "tgnn.")
            head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(HIDDEN, F)).to(device, dtype)
            _load_weights(head[1], ref, "linear.")
            rows.append(ours(f"WindowTrainer, TGCN + Linear, reuse={reuse}", cell, data.series(dtype), reuse, head=head))
    elif family == "A3TGCN":
        ref = TemporalGNN(F, L, B).to(device, dtype)
        rows.append(PygtRow(family, "PyGT loop, A3TGCN2 + Linear", copy.deepcopy(ref), data, a3tgcn_batch, device, dtype))
        for reuse in (True, False):
            cell = A3TGCN(F, HIDDEN, L).to(device, dtype)
            _load_weights(cell, ref, "tgnn.")
            head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(HIDDEN, L)).to(device, dtype)
            _load_weights(head[1], ref, "linear.")
            rows.append(ours(f"WindowTrainer, A3TGCN + Linear, reuse={reuse}", cell, data.a3tgcn_series(dtype), reuse,
                             horizon=1, loss="mse", head=head))
    else:
        raise SystemExit(f"unknown model family {family!r} (DCRNN, TGCN, A3TGCN)")
    return rows


def timed_batches(data: Data, args) -> Optional[int]:
    """Batches timed per repeat (``None``: the whole epoch): ``--max-batches``,
    by default the whole epoch on Chickenpox and 10 batches on road."""
    k = args.max_batches
    if k is None:
        k = 1 if args.quick else 0 if data.name == "Chickenpox" else 10
    return k or None


def measure(rows: list, k: Optional[int], args, device) -> None:
    """Interleaved repeats (every row once per repeat), then one memory pass per row."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.epochs):
        for r in rows:
            r.timed(k, sync)
    for r in rows:
        with Peak(device) as p:
            r.run(k)
        r.peak_mib = p.mib


# ------------------------------------------------------------------ printing
def _mib(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:,.0f}" if v >= 10 else f"{v:.1f}"


def epoch_seconds(r: Row, k: Optional[int]) -> tuple:
    """(median epoch seconds, extrapolated?)"""
    med = statistics.median(r.times)
    if k is not None and k < r.n_batches:
        return med * r.n_batches / k, True
    return med, False


def section1(datasets: list, args, device, dtype, out: list) -> list:
    print("\n## 1. PyGT's index-batching examples vs WindowTrainer\n")
    all_rows = []
    table = ["| dataset | model | loop | epoch s | PyGT / ours | peak MiB | setup s | setup MiB | first loss |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for data in datasets:
        k = timed_batches(data, args)
        skip_off = data.N * args.batch_size > 4000   # DConv's dense (B N)^2 adjacency per gate and step
        for fam in args.models.split(","):
            if fam == "A3TGCN":
                data._series = None                   # the other families' signal: freed before A3TGCN's is built
                _trim()
            rows = family_rows(fam, data, args, device, dtype, skip_off and fam == "DCRNN")
            if skip_off and fam == "DCRNN":
                n = data.N * args.batch_size
                notes.append(f"{data.name}: DCRNN with reuse=False not run: PyGT's DConv builds a dense "
                             f"(B N)^2 = {n}^2 adjacency per gate and step ({n * n * dtype.itemsize / 2**30:.1f} GiB each).")
            measure(rows, k, args, device)
            for r in rows:                            # keep the numbers, free the models, trainers and their caches
                r.release()
            base, _ = epoch_seconds(rows[0], k)
            for r in rows:
                sec, ext = epoch_seconds(r, k)
                ratio = base / sec
                label = f"{sec:.3f}" + (f" (extrapolated from {k} of {r.n_batches} batches)" if ext else "")
                table.append(f"| {data.name} | {fam} | {r.label} | {label} | {ratio:.2f}x | {_mib(r.peak_mib)} | "
                             f"{r.setup_s if r.kind == 'ours' else data.setup_s:.2f} | "
                             f"{_mib(r.setup_mib if r.kind == 'ours' else data.setup_mib)} | "
                             f"{r.losses[0]:.5f} |")
                if r.note:
                    notes.append(f"{data.name} {fam}: {r.note}.")
                out.append({"section": "pygt_vs_windowtrainer", "dataset": data.name, "family": fam, "loop": r.label,
                            "kind": r.kind, "epoch_s": sec, "extrapolated": ext, "batches_timed": k or r.n_batches,
                            "batches_per_epoch": r.n_batches, "times_s": r.times, "ratio_pygt_over_row": ratio,
                            "peak_mib": r.peak_mib, "setup_s": r.setup_s if r.kind == "ours" else data.setup_s,
                            "setup_mib": r.setup_mib if r.kind == "ours" else data.setup_mib, "losses": r.losses})
            all_rows.append((data, fam, rows, k))
    print("\n".join(table))
    print(f"\ntarget: PyGT / ours >= {GOAL:.0f}x on every row (the issue's goal; printed, not checked).")
    print("first loss: mean batch loss of the first timed repeat (ours starts from PyGT's weights; "
          "equal losses = the same computation).")
    for data in datasets:
        for what, sec, p in data.built:
            print(f"note: {data.name}: our {what} (shared by the WindowTrainer rows, not in their setup columns): "
                  f"{sec:.2f} s, {_mib(p.mib)} MiB")
    print("setup: PyGT rows: the loader's get_index_dataset (once per dataset, data + DataLoader); ours: "
          "WindowTrainer(...) (reuse's per-snapshot input aggregation included).")
    for n in notes:
        print(f"note: {n}")
    return all_rows


def section2(all_rows: list, args, out: list) -> None:
    print("\n## 2. Reuse on vs off (same models, same run)\n")
    table = ["| dataset | model | reuse=False s | reuse=True s | speed-up | first loss off / on |", "|---|---|---|---|---|---|"]
    n = 0
    for data, fam, rows, k in all_rows:
        on = [r for r in rows if r.label.endswith("reuse=True")]
        off = [r for r in rows if r.label.endswith("reuse=False")]
        if not (on and off):
            continue
        a, _ = epoch_seconds(off[0], k)
        b, _ = epoch_seconds(on[0], k)
        table.append(f"| {data.name} | {on[0].label.split(', ')[1]} | {a:.3f} | {b:.3f} | {a / b:.2f}x | "
                     f"{off[0].losses[0]:.6f} / {on[0].losses[0]:.6f} |")
        out.append({"section": "reuse", "dataset": data.name, "family": fam, "off_s": a, "on_s": b, "speedup": a / b})
        n += 1
    print("\n".join(table) if n else "(no family with both rows in this run)")


# ------------------------------------------------------------------ sections built by others
def _has_kw(fn: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def section_incremental(args, out: list) -> None:
    print("\n## 3. Incremental aggregation vs change ratio\n")
    if _module("pyg_dynscale.nn.incremental") is None:
        print("not built yet: incremental aggregation (pyg_dynscale/nn/incremental.py, issue 26 item 4)")
        return
    bench = _module("bench_incremental")
    if bench is None or not hasattr(bench, "run"):
        print("not built yet: incremental aggregation's benchmark function (benchmarks/bench_incremental.py run())")
    else:
        V, E, T, F = (2000, 20_000, 8, 8) if args.quick else (20_000, 200_000, 50, 32)
        ratios = (0.001, 0.05, 0.5) if args.quick else (0.001, 0.01, 0.05, 0.1, 0.2, 0.5)
        aggrs = [("gcn", 1)] if args.quick else [("sum", 1), ("gcn", 1), ("cheb", 2)]
        print(f"benchmarks/bench_incremental.py's run(): the input aggregation of all snapshots of a synthetic "
              f"sequence (V={V}, E={E}, T={T}, F={F}, float32): r of the edges replaced and r of the vertices' "
              "features changed per snapshot; rho = the measured change ratio; seconds for all snapshots.\n")
        rows = bench.run(V, E, T, F, ratios, aggrs)
        table = ["| r | aggregation | rho | recompute s | scratch s | incremental s | auto s | incremental / scratch |",
                 "|---|---|---|---|---|---|---|---|"]
        for x in rows:
            table.append(f"| {x['r']:.3f} | {x['aggr']} | {x['rho']:.3f} | {x['recompute']:.3f} | {x['scratch']:.3f} | "
                         f"{x['incremental']:.3f} | {x['auto']:.3f} | {x['incremental'] / x['scratch']:.2f} |")
            out.append(dict(x, section="incremental"))
        print("\n".join(table))
        if hasattr(bench, "crossover"):
            for aggr in dict.fromkeys(x["aggr"] for x in rows):
                print(f"crossover {aggr}: rho = {bench.crossover(rows, aggr):.3f} (incremental slower than scratch above)")
    if not _has_kw(WindowTrainer.__init__, "incremental"):
        print("\nnot built yet: WindowTrainer(incremental=...) (incremental aggregation in reuse's input basis)")
        return
    from pyg_dynscale.data.loaders import load_england_covid

    TGCN = import_pygt("bench_windows").nn.recurrent.TGCN
    sig = load_england_covid(feature_lags=4)
    if args.quick:
        sig = sig[0:16]
    rows = []
    for inc in (False, True):
        torch.manual_seed(0)
        head = torch.nn.Linear(HIDDEN, 1)
        rows.append(OursRow("TGCN", f"incremental={inc}", lambda: WindowTrainer(
            TGCN(sig.num_node_features, HIDDEN), sig, lags=4, batch_size=args.batch_size, lr=LR, optimizer="adam",
            head=head, incremental=inc), torch.device("cpu")))
    measure(rows, None, args, torch.device("cpu"))
    print("\nEngland COVID (changing graph), TGCN + Linear, reuse=True: the input aggregation is computed in "
          "WindowTrainer's construction (setup), the epoch reads it.\n")
    table = ["| model | option | setup s | epoch s | first loss |", "|---|---|---|---|---|"]
    for r in rows:
        table.append(f"| TGCN + Linear | {r.label} | {r.setup_s:.3f} | {statistics.median(r.times):.3f} | {r.losses[0]:.6f} |")
        out.append({"section": "incremental_trainer", "option": r.label, "setup_s": r.setup_s,
                    "epoch_s": statistics.median(r.times), "losses": r.losses})
    print("\n".join(table))


def section_cache(args, out: list) -> None:
    print("\n## 4. Cache hit rate vs bound\n")
    if _module("pyg_dynscale.windows.cache") is None or not _has_kw(WindowTrainer.__init__, "cache_bytes"):
        print("not built yet: the two-level cache (pyg_dynscale/windows/cache.py, WindowTrainer(cache_bytes=...), "
              "issue 26 item 5)")
        return
    TGCN = import_pygt("bench_windows").nn.recurrent.TGCN
    weeks = 40 if args.quick else None
    B, L = (8 if args.quick else args.batch_size), 4
    D, edges, weights = chickenpox_arrays(weeks)
    sig = series_signal(D, edges, weights)
    T = sig.num_snapshots
    entry = int(D.shape[1]) * 4                      # TGCN's basis row block of one snapshot: N x F float32
    bounds = [None, T * entry, T * entry // 4, (B + L - 1) * entry, L * entry, 0]
    if args.quick:
        bounds = [None, (B + L - 1) * entry, 0]
    rows = []
    for bound in bounds:
        for policy in (("reinc",) if bound is None else ("reinc", "lru")):
            torch.manual_seed(0)
            head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
            kw = {"cache_bytes": bound} if bound is None else {"cache_bytes": bound, "cache_policy": policy}
            r = OursRow("TGCN", "unbounded" if bound is None else f"{bound:,} B ({bound // entry} snapshots), {policy}",
                        lambda: WindowTrainer(TGCN(1, HIDDEN), sig, lags=L, horizon=L, batch_size=B, loss="mae", lr=LR,
                                              optimizer="adam", head=head, **kw), torch.device("cpu"))
            r.bound = bound
            rows.append(r)
    measure(rows, None, args, torch.device("cpu"))
    print(f"Chickenpox (T={T} snapshots, lags {L}, horizon {L}, batch {B}), PyGT's TGCN (hidden 32) + ReLU-Linear, "
          f"reuse=True: the global cache holds A_hat X of each snapshot ({entry} B); a batch reads {B + L - 1} "
          f"snapshots. Hit rate of the global level over {args.epochs + 1} epochs (the memory pass included).\n")
    table = ["| bound | global hit rate | accesses | computed | peak held B | epoch s | first loss |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        st = r.trainer.cache_stats()["global"]
        hr = "n/a" if st["hit_rate"] is None else f"{st['hit_rate']:.3f}"
        table.append(f"| {r.label} | {hr} | {st['accesses']:,} | {st['computed']:,} | {st['peak_bytes']:,} | "
                     f"{statistics.median(r.times):.3f} | {r.losses[0]:.6f} |")
        out.append({"section": "cache", "bound_bytes": r.bound, "label": r.label, "stats": st,
                    "epoch_s": statistics.median(r.times), "losses": r.losses})
    print("\n".join(table))


def chickenpox_arrays(weeks: Optional[int] = None) -> tuple:
    """What PyGT's ``ChickenpoxDatasetLoader.get_index_dataset`` builds from the
    JSON (``D = FX[..., None]``, the edges, unit weights), without PyGT: for
    the spawned ranks of section 5."""
    with open(DATASETS / "pygt" / "chickenpox.json") as f:
        raw = json.load(f)
    D = np.expand_dims(np.array(raw["FX"]), -1)[:weeks]
    edges = torch.tensor(raw["edges"], dtype=torch.int64).T
    return D, edges, torch.ones(edges.shape[1])


def _placement_rank(rank: int, world: int, weeks: Optional[int], batch_size: int, epochs: int) -> dict:
    """One rank of section 5: TGCN + head through ``WindowTrainer`` with each
    placement in turn, ``epochs`` timed epochs after one warm-up epoch."""
    import torch.distributed as dist

    TGCN = import_pygt("bench_windows").nn.recurrent.TGCN
    D, edges, weights = chickenpox_arrays(weeks)
    out = {}
    for placement in ("blocks", "replicated"):
        torch.manual_seed(0)
        head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
        tr = WindowTrainer(TGCN(1, HIDDEN), series_signal(D, edges, weights), lags=4, horizon=4,
                           batch_size=batch_size, loss="mae", lr=LR, optimizer="adam", head=head, placement=placement)
        held = tr.store.x.numel() * tr.store.x.element_size()
        tr.train_epoch()
        before = dict(tr.traffic.as_dict())
        times, loss = [], None
        for _ in range(epochs):
            dist.barrier()
            t0 = time.perf_counter()
            loss = tr.train_epoch()
            times.append(time.perf_counter() - t0)
        after = tr.traffic.as_dict()
        per_epoch = {k: (after[k] - before[k]) / epochs for k in ("features", "gradients", "loss")}
        out[placement] = {"times": times, "held": held, "per_epoch": per_epoch, "loss": loss}
    return out


def section_placement(args, out: list) -> None:
    print("\n## 5. Snapshot blocks vs replicated vs vertex partitions (2 and 4 ranks, 8 projected)\n")
    if not _has_kw(WindowTrainer.__init__, "placement"):
        print("not built yet: WindowTrainer(placement=\"blocks\"|\"replicated\") (issue 26 item 6)")
        return
    from pyg_dynscale.training.launch import spawn

    weeks = 40 if args.quick else None
    B = 8 if args.quick else args.batch_size
    worlds = (2,) if args.quick else (2, 4)
    epochs = 1 if args.quick else max(1, args.epochs)
    print(f"Chickenpox (lags 4, horizon 4, batch {B}), PyGT's TGCN (hidden 32) + ReLU-Linear, MAE, Adam; gloo ranks "
          f"of 1 thread on this machine's {os.cpu_count()} cores. Measured: epoch time (median over {epochs} "
          "epochs of the slowest rank) and the bytes each rank handed to collectives (WindowTrainer.traffic).\n")
    table = ["| ranks | placement | epoch s | feature bytes / epoch / rank | gradient bytes / epoch / rank | "
             "held feature bytes (largest rank) | loss |", "|---|---|---|---|---|---|---|"]
    for R in worlds:
        per_rank = spawn(_placement_rank, R, weeks, B, epochs, timeout=600)
        for placement in ("blocks", "replicated"):
            res = [r[placement] for r in per_rank]
            sec = statistics.median(max(r["times"][e] for r in res) for e in range(epochs))
            pe = res[0]["per_epoch"]
            held = max(r["held"] for r in res)
            table.append(f"| {R} | {placement} | {sec:.3f} | {pe['features']:,.0f} | {pe['gradients']:,.0f} | "
                         f"{held:,} | {res[0]['loss']:.6f} |")
            out.append({"section": "placement_measured", "ranks": R, "placement": placement, "epoch_s": sec,
                        "feature_bytes_per_rank": pe["features"], "gradient_bytes_per_rank": pe["gradients"],
                        "held_feature_bytes": held, "loss": res[0]["loss"]})
    print("\n".join(table))
    costs = _module("pyg_dynscale.windows.placement_costs")
    if costs is None or not hasattr(costs, "placement_bytes"):
        print("\nnot built yet: bytes of vertex partitions (pyg_dynscale.windows.placement_costs.placement_bytes)")
        return
    from _shared import dgc_pattern

    TGCN = import_pygt("bench_windows").nn.recurrent.TGCN

    D, edges, weights = chickenpox_arrays(weeks)
    sig = series_signal(D, edges, weights)
    P = sum(p.numel() * p.element_size() for p in TGCN(1, HIDDEN).parameters()) + (HIDDEN + 1) * 4
    print("\nComputed, not run (pyg_dynscale.windows.placement_costs: window arithmetic; the vertex partitions from "
          "the CommunicationPlan of DGC's T-GCN pattern), per epoch, all ranks; gradient bytes as a ring all-reduce "
          "2(R-1)P per step. 8 ranks: a projection, nothing ran on 8 ranks.\n")
    table = ["| ranks | placement | feature bytes / epoch | gradient bytes / epoch | load bytes (once) | "
             "held feature bytes (largest rank) |", "|---|---|---|---|---|---|"]
    for R in (2, 4, 8):
        for row in costs.placement_bytes(sig, 4, B, R, P, dgc_pattern("tgcn", 1, HIDDEN), horizon=4):
            label = f"{R} (projection)" if R == 8 else str(R)
            table.append(f"| {label} | {row['placement']} | {row['feature_bytes']:,} | {row['gradient_bytes']:,} | "
                         f"{row['load_bytes']:,} | {row['held_feature_bytes']:,} |")
            out.append(dict(row, section="placement_computed", projection=R == 8))
    print("\n".join(table))


# ------------------------------------------------------------------ main
def main(argv: Optional[list] = None) -> list:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 repeat (smoke test)")
    ap.add_argument("--datasets", default="chickenpox,road")
    ap.add_argument("--models", default="DCRNN,TGCN,A3TGCN")
    ap.add_argument("--steps", type=int, default=52_116, help="road: time steps (PeMS-Bay: 52,116)")
    ap.add_argument("--nodes", type=int, default=325, help="road: sensors (PeMS-Bay: 325)")
    ap.add_argument("--epochs", type=int, default=3, help="interleaved repeats (median reported)")
    ap.add_argument("--max-batches", type=int, default=None,
                    help="time the first k batches of an epoch and extrapolate (0: whole epochs; "
                         "default: whole epochs on Chickenpox, 10 on road)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--sections", default="1,2,3,4,5")
    ap.add_argument("--json", default=None, help="write every row to this file")
    args = ap.parse_args(argv)
    gc.freeze()   # the imported modules' objects: Peak's gc.collect() skips them (0.5 s each otherwise)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here")
    dtype = getattr(torch, args.dtype)
    torch.set_default_dtype(dtype)   # PyGT's batched models build their zero states with the default dtype
    weeks = None
    if args.quick:
        args.steps, args.nodes, args.batch_size, args.epochs, weeks = 80, 20, 8, 1, 40
    print(f"torch {torch.__version__}, device {device}, dtype {args.dtype}, threads {torch.get_num_threads()}, "
          f"batch {args.batch_size}, repeats {args.epochs}" + (" (--quick)" if args.quick else ""))
    sections = set(args.sections.split(","))
    out: list = []
    if sections & {"1", "2"}:
        datasets = []
        for name in args.datasets.split(","):
            if name not in ("chickenpox", "road"):
                raise SystemExit(f"unknown dataset {name!r} (chickenpox, road)")
            with Peak(device) as p:
                d = (load_chickenpox(args.batch_size, 4, weeks) if name == "chickenpox"
                     else load_road(args.batch_size, 12, args.steps, args.nodes))
            d.setup_mib, d.device = p.mib, device
            datasets.append(d)
        for d in datasets:
            print(f"{d.name}: D [T={d.T}, N={d.N}, F={d.F}], {int(d.edges.shape[1])} edges, lags {d.lags}, "
                  f"{len(d.train_dl.dataset)} training windows, {len(d.train_dl)} batches per epoch")
        all_rows = section1(datasets, args, device, dtype, out)
        if "2" in sections:
            section2(all_rows, args, out)
    if "3" in sections:
        section_incremental(args, out)
    if "4" in sections:
        section_cache(args, out)
    if "5" in sections:
        section_placement(args, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "dtype": args.dtype, "threads": args.threads, "rows": out}, f, indent=1)
    return out


if __name__ == "__main__":
    main()
