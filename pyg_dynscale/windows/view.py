r"""Windows without copies: sliding windows over one
:class:`~pyg_dynscale.data.DynamicGraphSignal`, as index ranges into its
concatenated storage (PyGT's index-batching, for static and changing graphs).

A signal has snapshots :math:`0 \ldots T-1`; snapshot :math:`t` holds
:math:`X_t \in \mathbb{R}^{n_t \times F}`, its edges, and the target
:math:`Y_t` (PyGT's convention: :math:`Y_t` is the value to predict *after*
seeing :math:`X_t`, e.g. Chickenpox's ``y`` of snapshot :math:`t` is the next
week's count). Window :math:`w` with start :math:`s_w = w \cdot \text{stride}`
reads

.. math::
    \underbrace{X_{s_w}, \ldots, X_{e_w}}_{\text{lags}},\quad e_w = s_w + L - 1,
    \qquad \text{targets } Y_{e_w}, \ldots, Y_{e_w + H - 1},

with :math:`L` = ``lags`` and :math:`H` = ``horizon``: its targets are the
signal's ``y`` at the *target snapshots* :math:`e_w \ldots e_w+H-1`. There are
:math:`W = \lfloor (T - L - H + 1) / \text{stride} \rfloor + 1` windows.

**PyGT's convention.** ``IndexDataset`` over a raw series :math:`D_0, \ldots,
D_{T_r-1}` returns inputs :math:`D_{s..s+L-1}` and targets
:math:`D_{s+L..s+L+H-1}`. The signal with :math:`X_t = D_t` and
:math:`Y_t = D_{t+1}` (:func:`series_signal`) has exactly these windows:
:math:`Y_{e_w+k} = D_{s_w+L+k}`, and PyGT's window count
:math:`T_r - 2L + 1` (``H = L``) is :math:`W` above.

**Split by window end (no leakage).** The windows, in start order, are cut
contiguously as PyGT's loaders cut them (``n_train = round(W r_0)``,
``n_test = round(W r_2)``, validation the rest). Then every window of a later
split whose targets would overlap a target of the previous split is dropped
(only when :math:`H > 1` or ``stride`` < 1 would allow it; never with
:math:`H = 1`): **every target of a split precedes every target of the next
split**. Inputs of a later split may read earlier snapshots (that is its past),
never the reverse: a training window reads only snapshots before the first
validation target.

**Standardization** (:class:`Standardizer`) is fitted on the training part
only: the mean and standard deviation of each feature over the vertex-time
rows of the snapshots that training windows read. It is applied once to the
whole feature storage (one tensor the size of ``x``, never a copy per window).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

from ..data.fields import gather_ranges
from ..errors import ModelInputError

__all__ = ["WindowView", "Window", "Standardizer", "SPLITS", "series_signal"]

SPLITS = ("train", "val", "test")


def _positive_int(name: str, value: Any, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelInputError(name, f"is {value!r}.", fix)
    return int(value)


def _check_ratio(ratio: Any) -> tuple:
    try:
        if isinstance(ratio, (str, bytes)):
            raise TypeError
        r = tuple(float(v) for v in ratio)
    except (TypeError, ValueError):
        raise ModelInputError("ratio", f"is {ratio!r}.", "give three fractions (train, val, test), e.g. (0.7, 0.1, 0.2).") from None
    if len(r) != 3 or any(v < 0 for v in r) or abs(sum(r) - 1.0) > 1e-6 or r[0] == 0:
        raise ModelInputError("ratio", f"is {ratio!r}.",
                              "give three non-negative fractions (train, val, test) summing to 1 with train > 0.")
    return r


@dataclass(frozen=True)
class Window:
    """One window: snapshots ``start .. end`` (inclusive) are read, targets
    are the signal's ``y`` at ``end .. end + horizon - 1``."""

    index: int
    start: int
    end: int
    horizon: int

    @property
    def snapshots(self) -> range:
        return range(self.start, self.end + 1)

    @property
    def target_snapshots(self) -> range:
        return range(self.end, self.end + self.horizon)


class Standardizer:
    r"""Per-feature z-score :math:`(x - \mu) / \sigma` with :math:`\mu,
    \sigma` (``[F...]``) computed over the rows of the given snapshots
    (population standard deviation; a zero :math:`\sigma` is replaced by 1)."""

    def __init__(self, mean: Tensor, std: Tensor) -> None:
        self.mean, self.std = mean, std

    @classmethod
    def fit(cls, x: Tensor, node_ptr: Tensor, snapshots: range) -> "Standardizer":
        a, b = int(node_ptr[snapshots.start]), int(node_ptr[snapshots.stop])
        rows = x[a:b]
        if rows.shape[0] == 0:
            raise ModelInputError("standardize", "the training snapshots hold no rows.",
                                  "use standardize=False, or a larger training ratio.")
        mean = rows.mean(0)
        std = rows.std(0, unbiased=False)
        std = torch.where(std > 0, std, torch.ones_like(std))
        return cls(mean, std)

    def __call__(self, x: Tensor) -> Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def inverse(self, x: Tensor) -> Tensor:
        return x * self.std.to(x.dtype) + self.mean.to(x.dtype)


class WindowView:
    r"""Sliding windows over a signal, as index ranges (no copies).

    Args:
        signal: a :class:`~pyg_dynscale.data.DynamicGraphSignal` (or a PyGT
            signal object, converted once).
        lags: snapshots per window, :math:`L \ge 1`.
        horizon: target snapshots per window, :math:`H \ge 1`.
        stride: distance between consecutive window starts.
        ratio: ``(train, val, test)`` fractions of the windows (PyGT's
            loaders' default ``(0.7, 0.1, 0.2)``).
        standardize: fit a :class:`Standardizer` of ``x`` on the training
            snapshots and apply it once to the feature storage.

    Attributes:
        starts: ``[W]`` window starts (the only per-window storage: one integer).
        x: ``[N, F...]`` features of all vertex-time nodes: the signal's own
            tensor, or its standardized copy (one for the whole signal).
        held: after :meth:`hold`, the global indices of the snapshots kept
            (``None``: all).
    """

    def __init__(self, signal: Any, lags: int, horizon: int = 1, stride: int = 1,
                 ratio: Sequence[float] = (0.7, 0.1, 0.2), standardize: bool = False) -> None:
        from ..runtime.paths import as_signal

        self.signal = sig = as_signal(signal)
        self.lags = _positive_int("lags", lags, "give the number of snapshots a window reads, >= 1.")
        self.horizon = _positive_int("horizon", horizon, "give the number of predicted steps, >= 1.")
        self.stride = _positive_int("stride", stride, "give the distance between window starts, >= 1.")
        self.ratio = _check_ratio(ratio)
        if sig.x is None:
            raise ModelInputError("x", "the signal has no node features.", "give the signal features.")
        T = sig.num_snapshots
        span = self.lags + self.horizon - 1
        if T < span:
            raise ModelInputError("lags", f"lags={self.lags} and horizon={self.horizon} need {span} snapshots; the "
                                  f"signal has {T}.", f"use lags + horizon - 1 <= {T}, or a longer signal.")
        self.starts = torch.arange(0, T - span + 1, self.stride, dtype=torch.long)
        W = int(self.starts.numel())
        n_train = round(W * self.ratio[0])
        n_test = round(W * self.ratio[2])
        n_val = W - n_train - n_test
        if n_train < 1:
            raise ModelInputError("ratio", f"leaves no training window ({W} windows, train ratio {self.ratio[0]}).",
                                  "use a larger training ratio or a longer signal.")
        bounds = [(0, n_train), (n_train, n_train + n_val), (n_train + n_val, W)]
        self._split: dict[str, Tensor] = {}
        last_target = -1
        for name, (a, b) in zip(SPLITS, bounds):
            idx = torch.arange(a, b, dtype=torch.long)
            if idx.numel():
                # drop leading windows whose first target is not after the previous split's last target
                first_target = self.starts[idx] + self.lags - 1
                idx = idx[first_target > last_target]
            if idx.numel():
                last_target = int(self.starts[idx[-1]]) + span - 1
            self._split[name] = idx
        self.standardizer: Optional[Standardizer] = None
        self.x: Tensor = sig.x
        #: snapshots in the whole signal; ``held``: the global indices of the snapshots kept (``None``: all)
        self.num_snapshots_total = T
        self.held: Optional[Tensor] = None
        self._local: Optional[Tensor] = None
        if standardize:
            tr = self._split["train"]
            snaps = range(int(self.starts[tr[0]]), int(self.starts[tr[-1]]) + self.lags)
            self.standardizer = Standardizer.fit(sig.x, sig.node_ptr, snaps)
            self.x = self.standardizer(sig.x)

    # ------------------------------------------------------------------ access
    @property
    def num_windows(self) -> int:
        return int(self.starts.numel())

    def __len__(self) -> int:
        return self.num_windows

    def split(self, name: str) -> Tensor:
        """``[W_split]`` indices of the windows of split ``name`` (``"train"``,
        ``"val"``, ``"test"``), in start order."""
        if name not in SPLITS:
            raise ModelInputError("split", f"is {name!r}.", f"use one of {SPLITS}.")
        return self._split[name]

    def window(self, w: int) -> Window:
        s = int(self.starts[w])
        return Window(int(w), s, s + self.lags - 1, self.horizon)

    def __getitem__(self, w: int) -> Window:
        return self.window(w)

    def hold(self, snapshots: Tensor) -> None:
        """Keep only the storage of ``snapshots`` (sorted global indices): the
        signal becomes a copy of those snapshots (features, edges, targets),
        :attr:`x` its rows of the feature storage; window arithmetic, splits
        and the standardizer stay global, and ``x_at`` / ``y_at`` /
        ``edges_at`` / ``rows`` take global snapshot indices (a snapshot not
        held raises). Used by ``WindowTrainer(placement="blocks")``."""
        idx = torch.as_tensor(snapshots, dtype=torch.long).reshape(-1)
        T = self.num_snapshots_total
        local = torch.full((T,), -1, dtype=torch.long)
        local[idx] = torch.arange(idx.numel())
        sig = self.signal
        x = self.x.index_select(0, gather_ranges(sig.node_ptr, idx)[0])
        self.signal = sig.select(idx)
        self.x = x
        self.held, self._local = idx, local

    def local_positions(self) -> Optional[list]:
        """Global snapshot -> position in the held storage (``-1``: not held),
        as a list; ``None`` while every snapshot is held."""
        return None if self._local is None else self._local.tolist()

    def local(self, t: int) -> int:
        """The position of global snapshot ``t`` in the held storage."""
        if self._local is None:
            return int(t)
        i = int(self._local[t]) if 0 <= t < self._local.numel() else -1
        if i < 0:
            raise ModelInputError("snapshot", f"{t} is not held by this rank (placement='blocks').",
                                  "read the snapshots of this rank's windows, or use placement='replicated'.")
        return i

    def rows(self, t: int) -> slice:
        """The vertex-time rows of snapshot ``t`` in the storage."""
        p = self.signal.node_ptr
        t = self.local(t)
        return slice(int(p[t]), int(p[t + 1]))

    def x_at(self, t: int) -> Tensor:
        """``[n_t, F...]`` features of snapshot ``t``: a view into :attr:`x`."""
        return self.x[self.rows(t)]

    def y_at(self, t: int) -> Tensor:
        """``[n_t, ...]`` targets of snapshot ``t``: a view into the signal's ``y``."""
        return self.signal.y[self.rows(t)]

    def edges_at(self, t: int) -> tuple:
        """``(edge_index [2, E_t], edge_weight [E_t] | None)`` of snapshot ``t``:
        views (a static graph's one list, never expanded)."""
        return self.signal.snapshot_edges(self.local(t))

    def __repr__(self) -> str:
        n = {k: int(v.numel()) for k, v in self._split.items()}
        return (f"WindowView(windows={self.num_windows}, lags={self.lags}, horizon={self.horizon}, "
                f"stride={self.stride}, split={n}, standardized={self.standardizer is not None})")


def series_signal(data: Any, edge_index: Any, edge_weight: Any = None, dtype: torch.dtype = torch.float32) -> Any:
    r"""The signal of PyGT's index-batching data: ``data`` ``[T_r, N, F]``
    (one static graph) becomes :math:`T_r - 1` snapshots with
    :math:`X_t = D_t` and :math:`Y_t = D_{t+1}`, so that a
    :class:`WindowView` with ``lags=L, horizon=H`` has exactly
    ``IndexDataset``'s windows (inputs :math:`D_{s..s+L-1}`, targets
    :math:`D_{s+L..s+L+H-1}`).

    ``edge_index`` ``[2, E]`` (and ``edge_weight`` ``[E]``) is the one graph
    of every snapshot: the signal stores it once
    (:attr:`~pyg_dynscale.data.DynamicGraphSignal.static_edge_index`), so the
    signal holds the features and targets plus :math:`E` edges, not
    :math:`(T_r - 1) E` (PyGT's ``IndexDataset`` keeps one graph too)."""
    from ..data.signal import DynamicGraphSignal

    d = torch.as_tensor(data)
    if d.dim() == 2:
        d = d.unsqueeze(-1)
    if d.dim() != 3 or d.shape[0] < 2:
        raise ModelInputError("data", f"has shape {list(d.shape)}.", "give a [T, N, F] series with T >= 2.")
    T, N = int(d.shape[0]) - 1, int(d.shape[1])
    y = d[1:]
    y = y.squeeze(-1) if y.shape[-1] == 1 else y
    ei = torch.as_tensor(edge_index).long()
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise ModelInputError("edge_index", f"has shape {list(ei.shape)}.", "give the one graph as [2, E].")
    return DynamicGraphSignal.from_tensors(
        node_ptr=torch.arange(T + 1) * N, edge_ptr=None, edge_index=ei,  # edge_ptr=None: one graph, stored once
        edge_weight=None if edge_weight is None else torch.as_tensor(edge_weight).to(dtype),
        x=d[:-1].reshape(T * N, -1).to(dtype), y=y.reshape(T * N, *y.shape[2:]).to(dtype))
