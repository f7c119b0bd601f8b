r"""PyGT's ``A3TGCN`` / ``A3TGCN2`` as *window models* of
:class:`~pyg_dynscale.windows.WindowTrainer`: a window's output is the
module's call on ``X [N, F, L]`` gathered from the storage (the window's
``L = lags`` snapshots are its ``periods``), as PyGT's index-batching example does with
``A3TGCN2`` on ``[B, N, F, L]``.

PyGT's A3TGCN runs its TGCN cell on every period with the *same* initial
state :math:`H` (``None``: zeros) and sums the results with attention
weights:

.. math::
    \hat h_w = \sum_{p<L} \pi_p\, \text{TGCN}(X_{s_w+p}, A, 0), \qquad
    \pi = \text{softmax}(a),

so the per-period output :math:`g_t = \text{TGCN}(X_t, A, 0)` of snapshot
:math:`t` is the same in all :math:`L` windows that contain it. With
``reuse`` (ReInc's reuse, :class:`~pyg_dynscale.nn.reuse.TGCNReuse`): the
GCN normalization and :math:`\hat A X_t` of every snapshot are computed once
per run (:func:`~pyg_dynscale.nn.reuse.static_basis`: the snapshots as
feature columns of the one graph); per batch, :math:`g_t` of each *distinct*
snapshot of the batch's windows (:math:`B + L - 1` for :math:`B`
consecutive windows, instead of :math:`B L`) in one product; per window the
attention-weighted sum gathers its :math:`L` rows. Without ``reuse`` the
module is called as it is, once per batch: ``A3TGCN2`` on ``[B, N, F, L]``,
``A3TGCN`` on the disjoint union of the windows' graphs, ``[B N, F, L]``.
Both compute PyGT's numbers (float rounding: tested to 1e-9 in float64).

A3TGCN takes one graph for all periods: a window model needs a static graph
and a fixed vertex set (else :class:`~pyg_dynscale.errors.ModelInputError`).
A signal whose node features are already ``[n, F, periods]`` per snapshot
keeps the per-snapshot path (the module called on each snapshot as it is).
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError
from ..nn.reuse import TGCNReuse, static_basis
from ..nn.snapshot_model import default_dtype
from .cache import BASIS_CHUNK_BYTES

__all__ = ["is_window_model", "check_window_model_args", "WindowModelRunner"]


def _pygt_class(model: torch.nn.Module) -> str:
    """The class name of a PyGT module (``""`` for any other; a subclass may change ``forward``)."""
    cls = type(model)
    return cls.__name__ if (cls.__module__ or "").startswith("torch_geometric_temporal") else ""


def is_window_model(model: torch.nn.Module, x: Tensor) -> bool:
    """PyGT's ``A3TGCN`` or ``A3TGCN2`` (the classes themselves) on a signal of
    per-snapshot features ``x`` ``[n, F]``."""
    return _pygt_class(model) in ("A3TGCN", "A3TGCN2") and x.dim() == 2


def check_window_model_args(model: torch.nn.Module, lags: int, horizon: int, decoder: Any,
                            node_batch_size: Optional[int], cache_bytes: Optional[int], incremental: Any) -> None:
    """Typed errors for what a window model does not take."""
    name = type(model).__name__
    if int(model.periods) != int(lags):
        raise ModelInputError("lags", f"is {lags} but {name}'s periods is {model.periods}: the window's snapshots "
                              "are its periods.", f"pass lags={model.periods}, or build {name} with periods={lags}.")
    if horizon != 1:
        raise ModelInputError("horizon", f"is {horizon}: {name} gives one output per window.",
                              "use horizon=1 with targets holding the next steps (y [N, H]) and a head of width H.")
    if decoder is not None:
        raise ModelInputError("decoder", f"is given for {name}, a whole-window model.", "pass decoder=None.")
    if node_batch_size is not None:
        raise UnsupportedOptionError("node_batch_size", f"is {node_batch_size!r} with {name}, a whole-window model: "
                                     "it has no node mini-batches.", "node_batch_size=None.")
    if cache_bytes is not None or incremental not in (False, None):
        raise UnsupportedOptionError("cache_bytes" if cache_bytes is not None else "incremental",
                                     f"is given with {name}: its reuse computes every snapshot's input aggregation "
                                     "once per run, without the bounded cache or incremental aggregation (cache_bytes "
                                     f"={cache_bytes!r}, incremental={incremental!r}).",
                                     "cache_bytes=None and incremental=False.")


class WindowModelRunner:
    r"""The outputs of a window model for a batch of windows of a trainer's
    storage (static graph, fixed vertex set).

    Args:
        trainer: the :class:`~pyg_dynscale.windows.WindowTrainer` (its
            storage ``_x`` ``[T N, F]``, ``_ei``, ``_ew``, ``_loc``).
        reuse: compute each distinct snapshot's per-period output once per
            batch (:class:`~pyg_dynscale.nn.reuse.TGCNReuse`; not for a cell
            with ``cached=True``, which is called as it is).

    Attributes:
        computed: per-period outputs :math:`g_t` computed by the last batch
            (:math:`B L` without reuse).
    """

    def __init__(self, trainer: Any, reuse: bool) -> None:
        self.trainer, self.model = trainer, trainer.model
        if not (trainer.store.fixed and trainer.store.static):
            raise ModelInputError("signal", f"changes its graph or vertex set, but {type(self.model).__name__} "
                                  "takes one graph for all periods of a window.",
                                  "use a static graph with a fixed vertex set, or a per-snapshot cell (TGCN).")
        self.batched = _pygt_class(self.model) == "A3TGCN2"
        self.L, self.n = trainer.view.lags, trainer.store.node_ptr[1]
        F = int(trainer.store.x.shape[1])
        if int(self.model.in_channels) != F:
            raise ModelInputError("model", f"{type(self.model).__name__} has in_channels={self.model.in_channels} "
                                  f"but the signal has {F} features.", f"build it with in_channels={F}.")
        #: the one graph (A3TGCN's ``edge_index``, ``edge_weight``; a static signal's one list, never expanded)
        self.ei, self.ew = trainer.store.first_graph()
        self.computed = 0
        #: ``(B, edge_index, edge_weight)`` of the last batch size's disjoint union (``A3TGCN`` without reuse)
        self._union: tuple = (0, None, None)
        cell = self.model._base_tgcn
        self.reuse: Optional[TGCNReuse] = None
        if reuse and not cell.cached:
            T = trainer.store.x.shape[0] // self.n
            with default_dtype(trainer.dtype):  # the snapshots as feature columns of the one graph (chunked)
                self.reuse = TGCNReuse(cell, trainer.store.x[:self.n], self.ei, self.ew)
                self.reuse.basis = static_basis(self.reuse, trainer.store.x, T, self.ei, self.ew,
                                                  chunk_bytes=BASIS_CHUNK_BYTES)  # a small transient (cache.py)
            #: ``[T, N, F]``: :math:`\hat A X_t` of every snapshot
            self.basis = self.reuse.basis.view(T, self.n, F)

    def outputs(self, starts: list) -> Tensor:
        """``[B N, out]``: the model's output for the windows starting at
        ``starts``, rows ordered (window, node)."""
        tr, L, n = self.trainer, self.L, self.n
        idx = torch.tensor(tr.store.positions([s + p for s in starts for p in range(L)])).view(-1, L)  # host
        with default_dtype(tr.dtype):
            out = self._reused(idx) if self.reuse is not None else self._called(idx.to(tr.device))
        return out.reshape(len(starts) * n, -1)

    def _called(self, idx: Tensor) -> Tensor:
        """The module as it is, once per batch: ``A3TGCN2`` on ``[B, N, F, L]``,
        ``A3TGCN`` on ``[B N, F, L]`` over the disjoint union of the ``B``
        windows' graphs (GCN normalizes per node: each window's rows are what
        it computes alone)."""
        tr, n, B = self.trainer, self.n, idx.shape[0]
        feat = tr.store.x.view(-1, n, tr.store.x.shape[1])
        X = feat.index_select(0, idx.flatten()).view(B, self.L, n, -1).permute(0, 2, 3, 1)
        self.computed = idx.numel()
        if self.batched:
            return self.model(X, self.ei, self.ew)
        if self._union[0] != B:
            off = (torch.arange(B, device=self.ei.device) * n).repeat_interleave(self.ei.shape[1])
            self._union = (B, self.ei.repeat(1, B) + off, None if self.ew is None else self.ew.repeat(B))
        return self.model(X.reshape(B * n, *X.shape[2:]), self._union[1], self._union[2])

    def _reused(self, idx: Tensor) -> Tensor:
        r""":math:`g_t` of each distinct snapshot once, then :math:`\sum_p \pi_p g_{s_w+p}` per window
        (``idx``: the windows' snapshots, host data: the distinct ones are found on the host)."""
        uniq, inv = torch.unique(idx, return_inverse=True)
        self.computed = int(uniq.numel())
        dev = self.basis.device
        uniq, inv = uniq.to(dev), inv.to(dev)
        rows = self.basis.index_select(0, uniq).reshape(-1, 1, self.basis.shape[2])
        w = self.reuse.weights()
        proj = self.reuse.project(rows, w)
        zero = proj.new_zeros(proj.shape[0], int(self.model.out_channels))
        g, _ = self.reuse.step_projected(proj, None, (zero,), w)
        g = g.view(-1, self.n, g.shape[1])
        probs = torch.nn.functional.softmax(self.model._attention, dim=0)
        acc = 0
        for p in range(self.L):  # PyGT's order of the sum
            acc = acc + probs[p] * g.index_select(0, inv[:, p])
        return acc
