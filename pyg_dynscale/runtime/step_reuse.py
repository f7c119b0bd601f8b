r"""ReInc's reuse on the black-box step loop (:class:`StepReuse`).

A :class:`~pyg_dynscale.runtime.snapshot_runner.SnapshotRunner` calls the
user's module once per step on fixed inputs: step :math:`i`'s local
``x_i``, ``edge_index_i`` and ``edge_weight_i`` (the whole snapshot on one
process, the rank's local subgraph on several) do not change during a run.
Where :func:`~pyg_dynscale.nn.reuse.reuse_for` knows the module (PyGT's
``GConvGRU``, ``GConvLSTM``, ``GCLSTM``, ``TGCN``, ``DCRNN``), the runner
instead computes, with :mod:`~pyg_dynscale.nn.reuse`:

* **once per run** (construction): the parameter-free input basis of every
  step's rows on the step's graph (``[sum_i n_i, K', F]``, e.g.
  :math:`T_k(\hat L_i) X_i`), and each step's normalized graph;
* **once per forward** (the parameters change between epochs): the cell's
  weights stacked per gate, and the input side of every gate for the rows of
  all steps -- or of one checkpointed block, recomputed with it -- as **one**
  matrix product ``[sum_i n_i, K' F] @ [K' F, G out]``;
* **per step** only the state-dependent part: one hidden basis shared by the
  gates (two for GRU cells: :math:`H` and :math:`H \odot R`).

This is what calling the module computes (up to the order of float sums;
``tests/runtime/test_step_reuse.py`` asserts it to 1e-9 in float64). The
step loop reads no value back to the host: split sizes are Python ints fixed
at construction.

**A module around one such cell** (PyGT's example ``RecurrentGCN``: the
cell, then per-node layers): the module is called as it is, and while step
:math:`i` runs, the cell's ``forward`` is replaced by the reused step --
for a call that receives step :math:`i`'s own ``x``, ``edge_index`` and
``edge_weight`` tensors (the same objects, unmodified) and its state
tensors. Any other call (features transformed first, ``lambda_max`` given,
a missing state) runs the cell's own ``forward``.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from torch import Tensor

from ..data.tensor_maps import TensorMap, map_tensors
from ..nn.reuse import DCRNNReuse, reuse_for
from ..nn.snapshot_model import SnapshotModel

__all__ = ["StepReuse"]


def _batched(impl: Optional[type]) -> Optional[type]:
    """``impl`` if it batches the input projections (``step_projected``), else ``None``."""
    return impl if impl is not None and hasattr(impl, "step_projected") else None


class StepReuse:
    r"""The reused input side of one runner's steps.

    Args:
        impl: the :mod:`~pyg_dynscale.nn.reuse` class of the module.
        cell: the module (its parameters are read at every :meth:`weights`).
        inputs: per step ``(x_i [n_i, F], edge_index_i [2, E_i], edge_weight_i [E_i] or None)``
            on the host, in step order.
        dtype: the floating dtype of the run.
    """

    def __init__(self, impl: type, cell: torch.nn.Module, inputs: list, dtype: torch.dtype) -> None:
        #: rows per step, and where each step's rows start in :attr:`basis` (Python ints: no host sync)
        self.sizes = [int(x.shape[0]) for x, _, _ in inputs]
        self.starts = [0]
        for n in self.sizes:
            self.starts.append(self.starts[-1] + n)
        first = next(i for i, n in enumerate(self.sizes) if n)
        #: the :mod:`~pyg_dynscale.nn.reuse` object (built on one step; its ``basis`` is not used here)
        self.impl = impl(cell, inputs[first][0].to(dtype), inputs[first][1], inputs[first][2])
        # each step's basis on its own graph (normalizers that depend on the whole graph, e.g. ChebConv's
        # lambda_max = 2 max L, are the step's, as in the cell's call)
        basis = [self.impl.input_basis(x.to(dtype), e, w) if n else None for (x, e, w), n in zip(inputs, self.sizes)]
        basis = [b if b is not None else basis[first].new_zeros((0,) + tuple(basis[first].shape[1:])) for b in basis]
        graphs = [self.impl.operators(self.impl.normalize(e, n, w, dtype), n, fast=True) if n else None
                  for (_, e, w), n in zip(inputs, self.sizes)]
        self._host = (torch.cat(basis, 0), graphs)
        self.place(lambda t: t)
        #: the cell inside the module whose ``forward`` a step replaces (``None``: the module is the cell)
        self.inner: Optional[torch.nn.Module] = None
        #: cell calls answered by the reuse (a Python counter)
        self.hits = 0
        #: ``_version`` of each step's ``x`` when placed (:meth:`track`): an in-place change disables the reuse
        self.versions: list = []
        self._signature: Optional[inspect.Signature] = None

    @classmethod
    def build(cls, model: SnapshotModel, inputs: list, dtype: torch.dtype, edge_fields: tuple) -> Optional["StepReuse"]:
        """A :class:`StepReuse` for ``model`` over the steps' ``(x, edge_index,
        edge_weight)``, or ``None`` where the module is called as it is: no
        reuse implementation with batched input projections
        (``step_projected``), edge fields, an evolving module, a call
        convention other than the class's preset (e.g. ``num_states``
        overridden), or DCRNN on a step with repeated or zero-weight edges
        (:meth:`~pyg_dynscale.nn.reuse.DCRNNReuse.applies`)."""
        spec = model.spec
        if not inputs or edge_fields or spec.evolving:
            return None
        impl, inner = _batched(reuse_for(model.module)), None
        if impl is not None:
            if spec.returns != "state" or spec.num_states != impl.num_states:
                return None
        else:  # a module around exactly one cell that has a reuse
            cells = [m for m in model.module.modules() if m is not model.module and _batched(reuse_for(m)) is not None]
            if len(cells) != 1:
                return None
            inner = cells[0]
            impl = _batched(reuse_for(inner))
        if any(x.dim() != 2 for x, _, _ in inputs) or not any(x.shape[0] for x, _, _ in inputs):
            return None
        if impl is DCRNNReuse and not all(DCRNNReuse.applies(e, int(x.shape[0]), w) for x, e, w in inputs):
            return None
        out = cls(impl, inner if inner is not None else model.module, inputs, dtype)
        out.inner = inner
        return out

    def place(self, fn: TensorMap) -> None:
        """The basis and the step graphs mapped with ``fn`` (moved to the device once)."""
        #: ``[sum_i n_i, K', F]`` input basis of every step's rows (no grad)
        self.basis: Tensor
        #: per step, the normalized graph (``None`` for empty steps and TGCN)
        self.graphs: list
        self.basis, self.graphs = map_tensors(self._host, fn)

    def weights(self) -> tuple:
        """The cell's parameters stacked per gate: once per forward."""
        return self.impl.weights()

    def project(self, a: int, b: int, w: tuple) -> tuple:
        """The input side of every gate for steps ``a..b-1``: one matrix
        product, split per step (``[n_i, G out]`` each)."""
        rows = self.basis[self.starts[a]:self.starts[b]]
        return self.impl.project(rows, w).split(self.sizes[a:b], 0)

    def step(self, i: int, proj: Tensor, states: tuple, w: tuple) -> tuple[Tensor, tuple]:
        """Step ``i``'s state-dependent part from its rows of :meth:`project`."""
        self.hits += 1
        return self.impl.step_projected(proj, self.graphs[i], states, w)

    def track(self, xs: list) -> None:
        """Record the ``_version`` of every step's placed ``x``."""
        self.versions = [x._version for x in xs]

    @contextmanager
    def inside(self, i: int, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], proj: Tensor,
               w: tuple) -> Iterator[None]:
        """While step ``i`` calls the module: the inner cell's ``forward``
        answers a call on this step's own inputs with :meth:`step`."""
        cell = self.inner
        own = cell.forward
        if self._signature is None:
            self._signature = inspect.signature(own)
        sig = self._signature
        params = list(sig.parameters)
        names = [p for p in params if p in ("H", "C")]
        n_states = self.impl.num_states
        ver = self.versions[i] if i < len(self.versions) else None

        def forward(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not kwargs and len(args) <= len(params):  # positional: no binding needed
                a = dict(zip(params, args))
            else:
                try:
                    a = sig.bind(*args, **kwargs).arguments
                except TypeError:
                    return own(*args, **kwargs)
            X = a.get("X")
            states = [a.get(n) for n in names]
            if (X is x and a.get("edge_index") is edge_index and a.get("edge_weight") is edge_weight
                    and X._version == ver and a.get("lambda_max") is None and len(states) == n_states
                    and all(isinstance(h, Tensor) for h in states)):
                _, new = self.step(i, proj, tuple(states), w)
                return new[0] if n_states == 1 else tuple(new)
            return own(*args, **kwargs)

        had = "forward" in vars(cell)
        cell.forward = forward
        try:
            yield
        finally:
            if had:
                cell.forward = own
            else:
                del cell.forward
