r"""Chunk workload models (DGC §4.2, §6, §7.4).

A workload model turns a chunk (a set of vertex-time nodes) into a predicted
training time. Two are provided:

* :class:`LinearWorkload` -- the counting baseline
  :math:`g_a = \alpha |V_a| + \beta |E_a|` (vertices and spatial edges of the
  chunk); ``LinearWorkload(1, 0)`` is DGC's vertex-counting baseline. The
  coefficients are defaults or fitted by least squares on profiled timings.
* :class:`MLPWorkload` -- DGC's two learned predictors: one MLP for the
  structure encoder and one for the time encoder, each
  ``in -> 256 -> 256 -> 256 -> 1`` with ReLU, trained with a mean absolute
  percentage error (MAPE) loss and Adam for 100 epochs on timings measured on
  the current device by :func:`profile`. Inputs (DGC §6): chunk information
  (vertices, edges), feature information (input feature dimension) and encoder
  information (hidden dimension, number of GNN layers). For the time encoder the
  "edges" of a chunk are its temporal edges, so ``vertices - edges`` is its
  number of sequence segments.

:math:`g_a = \hat t_{\mathrm{struct}}(a) + \hat t_{\mathrm{time}}(a)`, in seconds.

Every model offers ``node_costs(signal) -> [N]`` (an *additive* per-node cost,
used as the node weight of the label-propagation cap and of the node-level
refinement) and ``chunk_costs(signal, chunk, num_chunks) -> [C]`` (used by
Algorithm 1). For the MLP model the additive node cost is a least-squares
linearisation of the MLPs at the configured dimensions
(:meth:`MLPWorkload.linearized`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..._archive import read_archive
from ...errors import DynScaleError, SignalFormatError

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

FORMAT_VERSION = 1
KINDS = ("structure", "time")


class WorkloadModelError(DynScaleError, ValueError):
    """Raised for invalid workload-model input (empty timing sets, bad shapes)."""


# ------------------------------------------------------------ chunk statistics
def chunk_statistics(signal: "DynamicGraphSignal", chunk: Tensor, num_chunks: Optional[int] = None) -> Tensor:
    r"""Per-chunk counts ``[C, 3]`` (float64): vertex-time nodes :math:`|V_a|`,
    spatial edges whose target lies in the chunk :math:`|E_a|` (the
    aggregations its structure encoder performs), and temporal edges with both
    ends in the chunk :math:`|E^T_a|`.

    Args:
        signal: the dynamic graph. chunk: ``[N]`` chunk id of each vertex-time node.
        num_chunks: :math:`C` (default ``chunk.max() + 1``).
    """
    sg = signal.supergraph()
    chunk = chunk.to(torch.long)
    if chunk.numel() != sg.num_nodes:
        raise WorkloadModelError(f"chunk has {chunk.numel()} entries but the signal has {sg.num_nodes} vertex-time nodes.")
    C = int(chunk.max()) + 1 if num_chunks is None and chunk.numel() else int(num_chunks or 0)
    V = torch.bincount(chunk, minlength=C)
    E = torch.bincount(chunk[sg.spatial_edge_index[1]], minlength=C)
    te = sg.temporal_edge_index
    ca, cb = chunk[te[0]], chunk[te[1]]
    Et = torch.bincount(cb[ca == cb], minlength=C)
    return torch.stack([V, E, Et], dim=1).to(torch.float64)


def in_degree(signal: "DynamicGraphSignal") -> Tensor:
    """``[N]`` spatial in-degree of each vertex-time node."""
    sg = signal.supergraph()
    return torch.bincount(sg.spatial_edge_index[1], minlength=sg.num_nodes).to(torch.float64)


def mape(pred: Tensor, target: Tensor) -> float:
    r"""DGC Eq. 8: :math:`\frac1n\sum_a |\hat y_a - y_a| / y_a`."""
    pred = torch.as_tensor(pred, dtype=torch.float64)
    target = torch.as_tensor(target, dtype=torch.float64)
    return float(((pred - target).abs() / target).mean())


# ------------------------------------------------------------------- baseline
class WorkloadModel:
    """Interface: an additive per-node cost (:meth:`node_costs`, the one
    method every balancer calls, through :func:`resolve_workload`) and a
    per-chunk cost (:meth:`chunk_costs`, PGC's Algorithm 1)."""

    def node_costs(self, signal: "DynamicGraphSignal") -> Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def chunk_costs(self, signal: "DynamicGraphSignal", chunk: Tensor, num_chunks: Optional[int] = None) -> Tensor:
        """``[C]`` default: the segment sum of :meth:`node_costs`."""
        chunk = chunk.to(torch.long)
        C = int(chunk.max()) + 1 if num_chunks is None else int(num_chunks)
        return torch.zeros(C, dtype=torch.float64).index_add_(0, chunk, self.node_costs(signal).to(torch.float64))


@dataclass
class LinearWorkload(WorkloadModel):
    r"""Counting baseline :math:`g_a = \alpha |V_a| + \beta |E_a|`.

    Per node: :math:`\alpha + \beta \cdot \mathrm{indeg}(v)`, so chunk costs are
    exactly the sum of node costs. ``LinearWorkload(1.0, 0.0)`` counts
    vertex-time nodes (DGC §7.4's baseline).

    Args:
        alpha (float): cost per vertex-time node. beta (float): cost per spatial edge.
    """

    alpha: float = 1.0
    beta: float = 1.0

    def node_costs(self, signal: "DynamicGraphSignal") -> Tensor:
        return self.alpha + self.beta * in_degree(signal)

    def predict(self, vertices: Tensor, edges: Tensor) -> Tensor:
        return self.alpha * torch.as_tensor(vertices, dtype=torch.float64) + self.beta * torch.as_tensor(edges, dtype=torch.float64)

    @classmethod
    def fit(cls, vertices: Tensor, edges: Tensor, seconds: Tensor) -> "LinearWorkload":
        r"""Least squares on relative error (rows scaled by :math:`1/t`), so
        small and large chunks count alike; coefficients clamped at 0."""
        V = torch.as_tensor(vertices, dtype=torch.float64)
        E = torch.as_tensor(edges, dtype=torch.float64)
        t = torch.as_tensor(seconds, dtype=torch.float64)
        if t.numel() < 2:
            raise WorkloadModelError("fitting a LinearWorkload needs at least 2 timings.")
        A = torch.stack([V, E], 1) / t[:, None]
        sol = torch.linalg.lstsq(A, torch.ones_like(t)[:, None]).solution.flatten()
        alpha, beta = float(sol[0]), float(sol[1])
        if beta < 0 or alpha < 0:  # refit the single-variable model that stays feasible
            if beta < 0:
                alpha, beta = float((V / t).dot(torch.ones_like(t)) / (V / t).square().sum()), 0.0
            else:
                alpha, beta = 0.0, float((E / t).dot(torch.ones_like(t)) / (E / t).square().sum())
        return cls(alpha, beta)

    @classmethod
    def fit_timings(cls, timings: "TimingSet") -> "LinearWorkload":
        """Fit to the summed structure + time encoder timings of a profile
        (pairs of samples with the same chunk)."""
        s, t = timings.subset("structure"), timings.subset("time")
        n = min(len(s), len(t))
        if n == 0:
            return cls.fit(timings.vertices, timings.edges, timings.seconds)
        return cls.fit(s.vertices[:n], s.edges[:n], s.seconds[:n] + t.seconds[:n])


# --------------------------------------------------------------------- timings
@dataclass
class TimingSet:
    r"""Measured encoder timings.

    Attributes (all ``[S]``): ``kind`` (0 structure, 1 time), ``vertices``,
    ``edges`` (spatial edges for the structure encoder, temporal edges for the
    time encoder), ``feature_dim``, ``hidden``, ``layers``, ``seconds``.
    ``device`` names where they were measured.
    """

    kind: Tensor
    vertices: Tensor
    edges: Tensor
    feature_dim: Tensor
    hidden: Tensor
    layers: Tensor
    seconds: Tensor
    device: str = "cpu"

    def __len__(self) -> int:
        return int(self.seconds.numel())

    def subset(self, kind: str | Tensor) -> "TimingSet":
        if isinstance(kind, str):
            mask = self.kind == KINDS.index(kind)
        else:
            mask = kind
        return TimingSet(*(getattr(self, f)[mask] for f in _TIMING_FIELDS), device=self.device)

    def inputs(self) -> Tensor:
        """``[S, 5]`` raw MLP inputs (vertices, edges, feature dim, hidden, layers)."""
        return torch.stack([self.vertices, self.edges, self.feature_dim, self.hidden, self.layers], 1).to(torch.float64)

    def split(self, holdout: float = 0.2, seed: int = 0) -> tuple["TimingSet", "TimingSet"]:
        """Random (seeded) train / held-out split."""
        n = len(self)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        k = max(1, int(round(n * holdout))) if n > 1 else 0
        test = torch.zeros(n, dtype=torch.bool)
        test[perm[:k]] = True
        return self.subset(~test), self.subset(test)

    @staticmethod
    def cat(sets: Sequence["TimingSet"]) -> "TimingSet":
        return TimingSet(*(torch.cat([getattr(s, f) for s in sets]) for f in _TIMING_FIELDS), device=sets[0].device)


_TIMING_FIELDS = ("kind", "vertices", "edges", "feature_dim", "hidden", "layers", "seconds")


def _time_call(fn, repeats: int) -> float:
    fn()  # warm-up (allocations, kernel selection)
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    # the minimum is the least noisy estimate of a deterministic kernel's time
    # on a shared machine (as timeit recommends)
    return min(ts)


def gcn_stack_step(convs: Sequence[nn.Module], x: Tensor, edge_index: Tensor) -> None:
    """One forward + backward of a GCN stack (ReLU between layers): the
    structure-encoder work that :func:`profile` times on random chunks and the
    workload benchmark times on real ones."""
    h = x
    for k, conv in enumerate(convs):
        h = conv(h, edge_index)
        if k + 1 < len(convs):
            h = torch.relu(h)
    h.sum().backward()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile(
    samples: int = 96,
    *,
    feature_dims: Sequence[int] = (8, 32, 64),
    hidden_dims: Sequence[int] = (16, 32, 64),
    layers: Sequence[int] = (1, 2),
    max_vertices: int = 4096,
    min_vertices: int = 32,
    max_degree: float = 16.0,
    repeats: int = 3,
    device: Optional[torch.device | str] = None,
    seed: int = 0,
    progress: bool = False,
) -> TimingSet:
    r"""Measure structure- and time-encoder training steps on random chunks, on
    the current device (DGC §6).

    For each of ``samples`` random chunks (vertices log-uniform in
    ``[min_vertices, max_vertices]``, mean in-degree log-uniform in
    ``[0.5, max_degree]``, mean sequence length log-uniform in ``[1, 32]``, and
    random feature / hidden / layer dimensions):

    * structure encoder: a stack of ``torch_geometric.nn.GCNConv`` layers
      (``F -> H -> ... -> H``) on a random graph with the chunk's vertices and
      edges, forward + backward;
    * time encoder: ``torch.nn.GRU(H, H)`` over the chunk's vertex-time nodes cut
      into equal sequence segments (``vertices - temporal_edges`` of them),
      forward + backward.

    Each timing is the minimum of ``repeats`` runs after a warm-up. The default
    takes well under a minute on 2 CPU cores.

    Returns:
        :class:`TimingSet` with ``2 * samples`` rows (structure rows first).
    """
    from torch_geometric.nn import GCNConv

    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(seed)

    def loguniform(lo: float, hi: float) -> float:
        return math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * float(torch.rand(1, generator=gen)))

    def choice(seq: Sequence[int]) -> int:
        return int(seq[int(torch.randint(len(seq), (1,), generator=gen))])

    rows: list[tuple[int, int, int, int, int, int, float]] = []
    torch.manual_seed(seed)
    for i in range(samples):
        V = int(round(loguniform(min_vertices, max_vertices)))
        E = int(round(V * loguniform(0.5, max_degree)))
        F, H, K = choice(feature_dims), choice(hidden_dims), choice(layers)
        seq_len = max(1, min(V, int(round(loguniform(1.0, 32.0)))))
        S = max(1, V // seq_len)
        Vt = S * seq_len  # vertex-time nodes actually run by the time encoder
        Et = Vt - S

        x = torch.randn(V, F, generator=gen).to(dev)
        ei = torch.randint(0, V, (2, E), generator=gen).to(dev)
        convs = nn.ModuleList([GCNConv(F if k == 0 else H, H, cached=False) for k in range(K)]).to(dev)

        def struct_step() -> None:
            gcn_stack_step(convs, x, ei)
            _sync(dev)

        gru = nn.GRU(H, H, batch_first=True).to(dev)
        seq = torch.randn(S, seq_len, H, generator=gen).to(dev).requires_grad_(True)

        def time_step() -> None:
            out, _ = gru(seq)
            out.sum().backward()
            _sync(dev)

        ts = _time_call(struct_step, repeats)
        tt = _time_call(time_step, repeats)
        rows.append((0, V, E, F, H, K, ts))
        rows.append((1, Vt, Et, F, H, K, tt))
        if progress:
            print(f"[profile] {i + 1}/{samples} V={V} E={E} F={F} H={H} K={K} L={seq_len}: struct {ts * 1e3:.2f} ms, time {tt * 1e3:.2f} ms")
    rows.sort(key=lambda r: r[0])  # structure rows first, each kind in sample order
    cols = list(zip(*rows)) if rows else [[]] * 7
    as_t = lambda c, dt: torch.tensor(c, dtype=dt)  # noqa: E731
    return TimingSet(
        as_t(cols[0], torch.long), as_t(cols[1], torch.float64), as_t(cols[2], torch.float64),
        as_t(cols[3], torch.float64), as_t(cols[4], torch.float64), as_t(cols[5], torch.float64),
        as_t(cols[6], torch.float64), device=str(dev),
    )


# ------------------------------------------------------------------------ MLPs
def _features(raw: Tensor, kind: str) -> Tensor:
    """Log-scale the raw inputs (sizes span orders of magnitude). The time
    encoder also gets its number of sequence segments ``vertices - edges``
    (derived from its inputs: a GRU's cost follows segments x length)."""
    f = torch.log1p(raw.to(torch.float64).clamp(min=0))
    if kind == "time":
        seg = (raw[:, 0] - raw[:, 1]).to(torch.float64).clamp(min=1.0)
        f = torch.cat([f, torch.log(seg)[:, None]], 1)
    return f


class _Predictor(nn.Module):
    r"""One DGC predictor MLP: ``in -> 256 -> 256 -> 256 -> 1`` with ReLU
    (``in`` = 5 for the structure encoder, 6 for the time encoder).

    Inputs are log-scaled and standardized; the output is a log-time offset, so
    predictions :math:`\exp(\mathrm{out} + \mu_{\log t})` are positive.
    """

    def __init__(self, kind: str = "structure", hidden: int = 256) -> None:
        super().__init__()
        self.kind = kind
        in_dim = 6 if kind == "time" else 5
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 1),
        )
        self.register_buffer("mean", torch.zeros(in_dim))
        self.register_buffer("std", torch.ones(in_dim))
        self.register_buffer("log_t0", torch.zeros(()))

    def forward(self, raw: Tensor) -> Tensor:
        z = (_features(raw, self.kind).to(self.mean.dtype) - self.mean) / self.std
        return torch.exp(self.net(z).squeeze(-1) + self.log_t0)


def train_predictor(
    timings: TimingSet,
    kind: str = "structure",
    *,
    epochs: int = 100,
    lr: float = 1e-3,
    batch_size: int = 32,
    seed: int = 0,
) -> tuple[_Predictor, list[float]]:
    r"""Train one predictor with MAPE loss and Adam (DGC §6).

    Returns:
        ``(model, losses)`` with the mean training MAPE of every epoch.
    """
    if len(timings) == 0:
        raise WorkloadModelError("cannot train a workload predictor on an empty timing set.")
    if bool((timings.seconds <= 0).any()):
        raise WorkloadModelError("timings must be positive (MAPE divides by them).")
    torch.manual_seed(seed)
    model = _Predictor(kind).to(torch.float32)
    X = timings.inputs()
    y = timings.seconds.to(torch.float32)
    feats = _features(X, kind)
    model.mean.copy_(feats.mean(0).float())
    model.std.copy_(feats.std(0, unbiased=False).clamp(min=1e-6).float())
    model.log_t0.copy_(torch.log(timings.seconds).mean().float())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    n = len(timings)
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for s in range(0, n, batch_size):
            idx = perm[s:s + batch_size]
            pred = model(X[idx])
            loss = ((pred - y[idx]).abs() / y[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * idx.numel()
        losses.append(total / n)
    model.eval()
    return model, losses


@dataclass
class MLPWorkload(WorkloadModel):
    r"""DGC's learned workload model: :math:`g_a = \mathrm{MLP}_s(a) + \mathrm{MLP}_t(a)`.

    Args:
        structure, time: trained predictors (see :meth:`train`).
        feature_dim, hidden, layers: dimensions of the model whose workload is
            predicted (``feature_dim=None``: the signal's feature dimension).
        meta: training report (MAPE per kind, sample counts, device).
    """

    structure: _Predictor
    time: _Predictor
    feature_dim: Optional[int] = None
    hidden: int = 32
    layers: int = 2
    meta: dict = field(default_factory=dict)

    @classmethod
    def train(
        cls,
        timings: TimingSet,
        *,
        epochs: int = 100,
        lr: float = 1e-3,
        holdout: float = 0.2,
        seed: int = 0,
        **dims,
    ) -> "MLPWorkload":
        """Train both predictors on ``timings`` (a held-out split reports MAPE
        in ``meta``)."""
        meta: dict = {"device": timings.device, "epochs": epochs}
        models = {}
        for kind in KINDS:
            sub = timings.subset(kind)
            train_set, test_set = sub.split(holdout, seed) if holdout > 0 else (sub, sub.subset(torch.zeros(len(sub), dtype=torch.bool)))
            model, losses = train_predictor(train_set, kind, epochs=epochs, lr=lr, seed=seed)
            models[kind] = model
            meta[f"{kind}_train_mape"] = losses[-1]
            meta[f"{kind}_first_epoch_mape"] = losses[0]
            meta[f"{kind}_samples"] = len(train_set)
            if len(test_set):
                with torch.no_grad():
                    meta[f"{kind}_heldout_mape"] = mape(model(test_set.inputs()), test_set.seconds)
                meta[f"{kind}_heldout"] = len(test_set)
        return cls(models["structure"], models["time"], meta=meta, **dims)

    def _dims(self, signal: Optional["DynamicGraphSignal"]) -> tuple[float, float, float]:
        F = self.feature_dim
        if F is None:
            F = max(1, signal.num_node_features) if signal is not None else 1
        return float(F), float(self.hidden), float(self.layers)

    @torch.no_grad()
    def predict(self, vertices: Tensor, edges: Tensor, temporal_edges: Tensor, dims: tuple[float, float, float]) -> Tensor:
        """``[C]`` predicted seconds for chunks with these counts (0 for empty chunks)."""
        V = torch.as_tensor(vertices, dtype=torch.float64)
        n = V.numel()
        d = torch.tensor(dims, dtype=torch.float64).expand(n, 3)
        xs = torch.cat([torch.stack([V, torch.as_tensor(edges, dtype=torch.float64)], 1), d], 1)
        xt = torch.cat([torch.stack([V, torch.as_tensor(temporal_edges, dtype=torch.float64)], 1), d], 1)
        out = self.structure(xs).double() + self.time(xt).double()
        return torch.where(V > 0, out, torch.zeros_like(out))

    def chunk_costs(self, signal: "DynamicGraphSignal", chunk: Tensor, num_chunks: Optional[int] = None) -> Tensor:
        st = chunk_statistics(signal, chunk, num_chunks)
        return self.predict(st[:, 0], st[:, 1], st[:, 2], self._dims(signal))

    def linearized(self, signal: Optional["DynamicGraphSignal"] = None, max_vertices: int = 4096) -> LinearWorkload:
        r"""Least-squares :class:`LinearWorkload` to the MLPs' predictions on a
        grid of chunk sizes at the configured dimensions (temporal edges assumed
        ``vertices / 2``). Gives the additive node cost."""
        V = torch.logspace(math.log10(32), math.log10(max_vertices), 12, dtype=torch.float64)
        deg = torch.tensor([0.5, 1.0, 2.0, 4.0, 8.0, 16.0], dtype=torch.float64)
        VV = V.repeat_interleave(deg.numel())
        EE = VV * deg.repeat(V.numel())
        t = self.predict(VV, EE, VV / 2, self._dims(signal))
        return LinearWorkload.fit(VV, EE, t)

    def node_costs(self, signal: "DynamicGraphSignal") -> Tensor:
        return self.linearized(signal).node_costs(signal)

    # ------------------------------------------------------------------ io
    def save(self, path: str) -> None:
        """Versioned file; read back with :meth:`load` (``weights_only=True``)."""
        torch.save({
            "format": "pyg_dynscale.MLPWorkload",
            "version": FORMAT_VERSION,
            "structure": self.structure.state_dict(),
            "time": self.time.state_dict(),
            "feature_dim": -1 if self.feature_dim is None else int(self.feature_dim),
            "hidden": int(self.hidden),
            "layers": int(self.layers),
            "meta": {k: (float(v) if isinstance(v, (int, float)) else str(v)) for k, v in self.meta.items()},
        }, path)

    @classmethod
    def load(cls, path: str) -> "MLPWorkload":
        blob = read_archive(path, tag="pyg_dynscale.MLPWorkload", version=FORMAT_VERSION, what="MLPWorkload",
                            error=SignalFormatError, remedy="Re-run profile() and MLPWorkload.train().")
        models = []
        for kind in KINDS:
            m = _Predictor(kind)
            m.load_state_dict(blob[kind])
            m.eval()
            models.append(m)
        F = blob["feature_dim"]
        return cls(models[0], models[1], feature_dim=None if F < 0 else F, hidden=blob["hidden"],
                   layers=blob["layers"], meta=dict(blob["meta"]))


@dataclass
class FixedWorkload(WorkloadModel):
    """Given costs: ``costs [N]`` per vertex-time node (gid order), whatever the signal."""

    costs: Tensor

    def node_costs(self, signal: "DynamicGraphSignal") -> Tensor:
        return self.costs


@dataclass
class _NodeCostObject(WorkloadModel):
    """An object that is not a :class:`WorkloadModel` but has ``node_costs``,
    or ``node_cost`` (what the PSS / PTS balancers accepted before ``node_costs``
    was the one method; docs/partitioning.md still promises it): its per-node
    costs, chunk costs their segment sums."""

    obj: object
    method: str = "node_costs"

    def node_costs(self, signal: "DynamicGraphSignal") -> Tensor:
        return getattr(self.obj, self.method)(signal)


def resolve_workload(workload: object = None) -> WorkloadModel:
    """The one resolver of a ``workload=`` argument (PSS / PTS / PSS-TS
    balancers, PGC, the metrics): ``None`` / ``"linear"``: :class:`LinearWorkload`
    ``(1, 1)``; ``"vertices"``: vertex counting; another string: a saved
    :meth:`MLPWorkload.load` path; a ``[N]`` tensor or array: :class:`FixedWorkload`;
    an object with ``node_costs`` and ``chunk_costs`` (a :class:`WorkloadModel`):
    itself; an object with ``node_costs`` or ``node_cost`` only: wrapped (chunk
    costs are then segment sums)."""
    if workload is None or (isinstance(workload, str) and workload == "linear"):
        return LinearWorkload()
    if isinstance(workload, str):
        return LinearWorkload(1.0, 0.0) if workload == "vertices" else MLPWorkload.load(workload)
    if isinstance(workload, (Tensor, np.ndarray)):
        return FixedWorkload(torch.as_tensor(workload))
    if hasattr(workload, "node_costs") and hasattr(workload, "chunk_costs"):
        return workload  # type: ignore[return-value]
    for method in ("node_costs", "node_cost"):
        if callable(getattr(workload, method, None)):
            return _NodeCostObject(workload, method)
    raise WorkloadModelError(
        f"workload must be None, 'linear', 'vertices', a saved MLPWorkload path, a [N] cost tensor or a "
        f"WorkloadModel, not {type(workload).__name__}."
    )
