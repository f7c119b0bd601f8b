r"""ReInc's reuse (§3.1) for PyGT's ``GConvGRU`` in windowed training.

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

__all__ = ["GConvGRUReuse", "reuse_for"]


def _is_pygt(module: torch.nn.Module, name: str) -> bool:
    return any(c.__name__ == name and (c.__module__ or "").startswith("torch_geometric_temporal")
               for c in type(module).__mro__)


def reuse_for(module: torch.nn.Module) -> Optional[type]:
    """The reuse implementation for ``module`` (``None``: none, the module is called as it is)."""
    if _is_pygt(module, "GConvGRU") and getattr(module, "normalization", "sym") == "sym":
        return GConvGRUReuse
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


class GConvGRUReuse:
    r"""Reuse for one PyGT ``GConvGRU`` (``normalization="sym"``).

    Args:
        cell: the ``GConvGRU`` (its own parameters are used).
        x: ``[N_all, F]`` features of every vertex-time node (the storage).
        edge_index: ``[2, E_all]`` edges of all snapshots with global rows
            (the storage's block-diagonal graph).
        edge_weight: ``[E_all]`` or ``None``.
    """

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = len(cell.conv_x_z.lins)
        ei, norm = self.normalize(edge_index, x.shape[0], edge_weight, x.dtype)
        with torch.no_grad():
            #: ``[N_all, K, F]``: the input basis of every snapshot, computed once
            self.basis = torch.stack(cheb_basis(cell.conv_x_z, x, ei, norm, self.K), 1)

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype) -> tuple:
        """``(edge_index, norm)`` of :math:`\\hat L` (``ChebConv.__norm__``, :math:`\\lambda_{max} = 2`)."""
        conv = self.cell.conv_h_z
        return conv.__norm__(edge_index, n, edge_weight, conv.normalization, None, dtype=dtype, batch=None)

    def step(self, basis: Tensor, graph: tuple, H: Tensor) -> Tensor:
        """One step on a batch graph: ``basis`` ``[n, K, F]`` (gathered rows of
        :attr:`basis`), ``graph`` = :meth:`normalize` of the batch graph, ``H``
        ``[n, out]``; returns the new ``H``."""
        c = self.cell
        xb = list(basis.unbind(1))
        ei, norm = graph
        hb = cheb_basis(c.conv_h_z, H, ei, norm, self.K)
        Z = torch.sigmoid(cheb_apply(c.conv_x_z, xb) + cheb_apply(c.conv_h_z, hb))
        R = torch.sigmoid(cheb_apply(c.conv_x_r, xb) + cheb_apply(c.conv_h_r, hb))
        hr = cheb_basis(c.conv_h_h, H * R, ei, norm, self.K)
        H_tilde = torch.tanh(cheb_apply(c.conv_x_h, xb) + cheb_apply(c.conv_h_h, hr))
        return Z * H + (1 - Z) * H_tilde
