r"""ReInc's reuse (§3.1) for PyGT's ``GConvGRU``,
``GConvLSTM``, ``GCLSTM``, ``TGCN`` and ``DCRNN`` (:func:`reuse_for` picks
the implementation; ``GConvGRU`` is explained below, the others are alike:
the input aggregation once per snapshot, the hidden one once per step for
all gates).

``GConvGRU`` computes, per step, six Chebyshev convolutions

.. math::
    Z = \sigma(\Theta_{xz} \star X + \Theta_{hz} \star H), \quad
    R = \sigma(\Theta_{xr} \star X + \Theta_{hr} \star H), \quad
    \tilde H = \tanh(\Theta_{xh} \star X + \Theta_{hh} \star (H \odot R)),

each :math:`\Theta \star X = \sum_{k<K} \bar T_k(\hat L) X\, \Theta_k + b`
with its own normalization and Chebyshev basis :math:`T_k(\hat L) X`. The
basis does not depend on parameters, so:

* **across windows and epochs**: the input basis :math:`T_k(\hat L_t) X_t`
  of every snapshot is computed once (``K`` times the feature storage) and
  gathered for each batch step, instead of being recomputed by every window
  that reads snapshot :math:`t` (``lags`` windows) and by each of the three
  input gates;
* **across gates**: the hidden basis :math:`T_k(\hat L) H` is computed once
  per step for :math:`Z` and :math:`R`; the normalization :math:`\hat L` once
  per batch step graph instead of six times.

The projections (parameters) are applied as before, so ``reuse=True``
computes what ``reuse=False`` computes up to float rounding (the sum order of
the basis terms; tested to 1e-9 in float64).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .reinc_reuse import LAYER_REUSE

__all__ = ["ChebReuse", "GConvGRUReuse", "GConvLSTMReuse", "GCLSTMReuse", "TGCNReuse", "DCRNNReuse", "reuse_for"]


def _is_pygt(module: torch.nn.Module, name: str) -> bool:
    return any(c.__name__ == name and (c.__module__ or "").startswith("torch_geometric_temporal")
               for c in type(module).__mro__)


def reuse_for(module: torch.nn.Module) -> Optional[type]:
    """The reuse implementation for ``module`` (``None``: none, the module is called as it is)."""
    if type(module) in LAYER_REUSE:  # ReInc's layers (nn.reinc_models)
        return LAYER_REUSE[type(module)]
    if callable(getattr(module, "reuse_impl", None)):  # a layer that names its own (nn.tgcn.TGCN)
        return module.reuse_impl()
    if _is_pygt(module, "TGCN") and type(module).__name__ == "TGCN" and not module.cached:
        return TGCNReuse
    if _is_pygt(module, "DCRNN") and type(module).__name__ == "DCRNN":
        return DCRNNReuse
    if getattr(module, "normalization", "sym") != "sym":
        return None
    if _is_pygt(module, "GConvGRU"):
        return GConvGRUReuse
    if _is_pygt(module, "GConvLSTM"):
        return GConvLSTMReuse
    if _is_pygt(module, "GCLSTM"):
        return GCLSTMReuse
    return None


def cheb_basis(conv: torch.nn.Module, x: Tensor, edge_index: Tensor, norm: Tensor, K: int) -> list:
    """``[T_0 x, ..., T_{K-1} x]`` exactly as PyG's ``ChebConv.forward`` builds them."""
    out = [x]
    if K > 1:
        tx0, tx1 = x, conv.propagate(edge_index, x=x, norm=norm)
        out.append(tx1)
        for _ in range(2, K):
            tx2 = 2.0 * conv.propagate(edge_index, x=tx1, norm=norm) - tx0
            out.append(tx2)
            tx0, tx1 = tx1, tx2
    return out


def cheb_apply(conv: torch.nn.Module, basis: list) -> Tensor:
    """:math:`\\sum_k \\text{lins}_k(T_k x) + b`, as ``ChebConv.forward``."""
    out = conv.lins[0](basis[0])
    for lin, tx in zip(conv.lins[1:], basis[1:]):
        out = out + lin(tx)
    if conv.bias is not None:
        out = out + conv.bias
    return out


class ChebReuse:
    r"""The reuse shared by PyGT's Chebyshev cells (``normalization="sym"``):
    the input basis of every snapshot, computed once.

    Args:
        cell: the PyGT cell (its own parameters are used).
        x: ``[N_all, F]`` features of every vertex-time node (the storage).
        edge_index: ``[2, E_all]`` edges of all snapshots with global rows
            (the storage's block-diagonal graph).
        edge_weight: ``[E_all]`` or ``None``.
    """

    #: name of a Chebyshev convolution of the input (its propagation builds the basis)
    input_conv = ""
    #: name of a Chebyshev convolution of the hidden state
    hidden_conv = ""

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        conv = getattr(cell, self.input_conv)
        self.K = len(conv.lins)
        ei, norm = self.normalize(edge_index, x.shape[0], edge_weight, x.dtype)
        with torch.no_grad():
            #: ``[N_all, K, F]``: the input basis of every snapshot, computed once
            self.basis = torch.stack(cheb_basis(conv, x, ei, norm, self.K), 1)

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype) -> tuple:
        r"""``(edge_index, norm)`` of :math:`\hat L` (``ChebConv.__norm__``, :math:`\lambda_{max} = 2`)."""
        conv = getattr(self.cell, self.hidden_conv)
        return conv.__norm__(edge_index, n, edge_weight, conv.normalization, None, dtype=dtype, batch=None)

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        """One step on a batch graph: ``basis`` ``[n, K, F]`` (gathered rows of
        :attr:`basis`), ``graph`` = :meth:`normalize` of the batch graph,
        ``states`` the carried ``[n, out]`` tensors; returns ``(y, states)``."""
        raise NotImplementedError


class GConvGRUReuse(ChebReuse):
    r"""PyGT's ``GConvGRU``: the hidden basis of :math:`H` once per step for
    :math:`Z` and :math:`R` (the candidate needs the basis of :math:`H \odot R`)."""

    input_conv, hidden_conv = "conv_x_z", "conv_h_z"

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        c = self.cell
        (H,) = states
        xb = list(basis.unbind(1))
        ei, norm = graph
        hb = cheb_basis(c.conv_h_z, H, ei, norm, self.K)
        Z = torch.sigmoid(cheb_apply(c.conv_x_z, xb) + cheb_apply(c.conv_h_z, hb))
        R = torch.sigmoid(cheb_apply(c.conv_x_r, xb) + cheb_apply(c.conv_h_r, hb))
        hr = cheb_basis(c.conv_h_h, H * R, ei, norm, self.K)
        H_tilde = torch.tanh(cheb_apply(c.conv_x_h, xb) + cheb_apply(c.conv_h_h, hr))
        H = Z * H + (1 - Z) * H_tilde
        return H, (H,)


class GConvLSTMReuse(ChebReuse):
    """PyGT's ``GConvLSTM``: one hidden basis of :math:`H` per step for all
    four gates (eight Chebyshev convolutions become one basis and projections)."""

    input_conv, hidden_conv = "conv_x_i", "conv_h_i"

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        c = self.cell
        H, C = states
        xb = list(basis.unbind(1))
        ei, norm = graph
        hb = cheb_basis(c.conv_h_i, H, ei, norm, self.K)
        I = torch.sigmoid(cheb_apply(c.conv_x_i, xb) + cheb_apply(c.conv_h_i, hb) + c.w_c_i * C + c.b_i)
        F = torch.sigmoid(cheb_apply(c.conv_x_f, xb) + cheb_apply(c.conv_h_f, hb) + c.w_c_f * C + c.b_f)
        T = torch.tanh(cheb_apply(c.conv_x_c, xb) + cheb_apply(c.conv_h_c, hb) + c.b_c)
        C = F * C + I * T
        O = torch.sigmoid(cheb_apply(c.conv_x_o, xb) + cheb_apply(c.conv_h_o, hb) + c.w_c_o * C + c.b_o)
        H = O * torch.tanh(C)
        return H, (H, C)


class GCLSTMReuse(ChebReuse):
    """PyGT's ``GCLSTM``: its input side is a plain projection (no graph
    operation to share; :attr:`basis` is a view of ``x``), its four gates
    convolve :math:`H` with one Chebyshev basis computed once per step."""

    hidden_conv = "conv_i"

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = len(cell.conv_i.lins)
        self.basis = x.unsqueeze(1)

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        c = self.cell
        H, C = states
        X = basis[:, 0]
        ei, norm = graph
        hb = cheb_basis(c.conv_i, H, ei, norm, self.K)
        I = torch.sigmoid(torch.matmul(X, c.W_i) + cheb_apply(c.conv_i, hb) + c.b_i)
        F = torch.sigmoid(torch.matmul(X, c.W_f) + cheb_apply(c.conv_f, hb) + c.b_f)
        T = torch.tanh(torch.matmul(X, c.W_c) + cheb_apply(c.conv_c, hb) + c.b_c)
        C = F * C + I * T
        O = torch.sigmoid(torch.matmul(X, c.W_o) + cheb_apply(c.conv_o, hb) + c.b_o)
        H = O * torch.tanh(C)
        return H, (H, C)


class TGCNReuse:
    r"""PyGT's ``TGCN`` (``cached=False``): its three GCN convolutions read only
    :math:`X`, so :math:`\hat A X` of every snapshot is computed once and each
    gate applies its projection, :math:`\text{conv}(X) = (\hat A X) W^\top + b`
    (:math:`= \hat A (X W^\top) + b` up to rounding); no convolution runs
    inside the step."""

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        self.cell = cell
        conv = cell.conv_z
        ei, w = gcn_norm(edge_index, edge_weight, x.shape[0], conv.improved, conv.add_self_loops, conv.flow, x.dtype)
        with torch.no_grad():
            #: ``[N_all, 1, F]``: :math:`\hat A_t X_t` of every snapshot
            self.basis = conv.propagate(ei, x=x, edge_weight=w).unsqueeze(1)

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype) -> None:
        """No graph operation runs inside the step."""
        return None

    @staticmethod
    def _gcn(conv: torch.nn.Module, ax: Tensor) -> Tensor:
        out = conv.lin(ax)
        return out + conv.bias if conv.bias is not None else out

    def step(self, basis: Tensor, graph: None, states: tuple) -> tuple:
        c = self.cell
        (H,) = states
        ax = basis[:, 0]
        Z = torch.sigmoid(c.linear_z(torch.cat([self._gcn(c.conv_z, ax), H], 1)))
        R = torch.sigmoid(c.linear_r(torch.cat([self._gcn(c.conv_r, ax), H], 1)))
        H_tilde = torch.tanh(c.linear_h(torch.cat([self._gcn(c.conv_h, ax), H * R], 1)))
        H = Z * H + (1 - Z) * H_tilde
        return H, (H,)


class DCRNNReuse:
    r"""PyGT's ``DCRNN``: each gate diffuses :math:`[X, H]` forwards
    (:math:`P_o`, out-degree normalized) and backwards (:math:`P_i`) ``K - 1``
    times. Diffusion is linear per column, so the basis of :math:`[X, H]` is
    that of :math:`X` next to that of :math:`H`: the :math:`X` part of every
    snapshot is computed once, the :math:`H` part once per step for the update
    and reset gates, and :math:`P_o, P_i` are built sparsely once per batch
    graph instead of PyGT's dense ``N x N`` adjacency per gate and step.

    It follows ``DConv`` literally, including its pairing of the in-degree
    normalizers (listed in input edge order, indexed by source) with the
    reverse edges in sorted order, and its recurrence
    :math:`T_k = 2 P T_{k-1} - T_0`. It applies only where every snapshot's
    edges are distinct with non-zero weights (elsewhere ``DConv`` itself fails
    or drops edges; the cell is then called as it is)."""

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = int(cell.conv_x_z.weight.shape[1])
        self.F = int(x.shape[1])
        g = self.normalize(edge_index, x.shape[0], edge_weight, x.dtype)
        with torch.no_grad():
            o, i = self._basis(x, g)
            #: ``[N_all, 2K, F]``: forward then backward diffusion basis of every snapshot's ``X``
            self.basis = torch.stack(o + i, 1)

    @staticmethod
    def applies(edge_index: Tensor, n: int, edge_weight: Optional[Tensor]) -> bool:
        """Every edge distinct (per snapshot: rows are global) and every weight non-zero."""
        key = edge_index[0] * n + edge_index[1]
        if int(torch.unique(key).numel()) != int(key.numel()):
            return False
        return edge_weight is None or bool((edge_weight != 0).all())

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype) -> tuple:
        """``(edge_index, norm_out, reverse_edge_index, norm_in)`` as ``DConv`` computes them."""
        row, col = edge_index
        w = edge_weight.to(dtype) if edge_weight is not None else torch.ones(row.numel(), dtype=dtype, device=row.device)
        deg_out = torch.zeros(n, dtype=dtype, device=row.device).index_add_(0, row, w)
        deg_in = torch.zeros(n, dtype=dtype, device=row.device).index_add_(0, col, w)
        norm_out = torch.reciprocal(deg_out)[row]
        norm_in = torch.reciprocal(deg_in)[row]
        perm = torch.argsort(col * n + row)
        rev = torch.stack([col[perm], row[perm]])
        return edge_index, norm_out, rev, norm_in

    def _basis(self, y: Tensor, g: tuple) -> tuple:
        conv = self.cell.conv_x_z
        ei, n_out, rev, n_in = g
        o, i = [y], [y]
        if self.K > 1:
            o.append(conv.propagate(ei, x=y, norm=n_out, size=None))
            i.append(conv.propagate(rev, x=y, norm=n_in, size=None))
        for _ in range(2, self.K):
            o.append(2.0 * conv.propagate(ei, x=o[-1], norm=n_out, size=None) - y)
            i.append(2.0 * conv.propagate(rev, x=i[-1], norm=n_in, size=None) - y)
        return o, i

    def _apply(self, conv: torch.nn.Module, xb: Tensor, hb: tuple) -> Tensor:
        W, F, K = conv.weight, self.F, self.K
        ho, hi = hb
        out = None
        for k in range(K):
            term = (xb[:, k] @ W[0, k, :F] + ho[k] @ W[0, k, F:]) + (xb[:, K + k] @ W[1, k, :F] + hi[k] @ W[1, k, F:])
            out = term if out is None else out + term
        return out + conv.bias if conv.bias is not None else out

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        c = self.cell
        (H,) = states
        hb = self._basis(H, graph)
        Z = torch.sigmoid(self._apply(c.conv_x_z, basis, hb))
        R = torch.sigmoid(self._apply(c.conv_x_r, basis, hb))
        H_tilde = torch.tanh(self._apply(c.conv_x_h, basis, self._basis(H * R, graph)))
        H = Z * H + (1 - Z) * H_tilde
        return H, (H,)
