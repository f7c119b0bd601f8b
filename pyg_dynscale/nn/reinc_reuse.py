r"""ReInc's reuse (§3.1) for the layers of :mod:`~pyg_dynscale.nn.reinc_models`
and for :class:`~pyg_dynscale.nn.TGCN` (each layer's ``reuse_impl()`` names
its class here; :func:`~pyg_dynscale.nn.reuse.reuse_for` picks it).

Same API as :mod:`~pyg_dynscale.nn.reuse`: ``impl(cell, x_all, edge_index_all,
edge_weight_all)`` computes :attr:`basis` ``[N_all, 1, F]`` =
:math:`\hat A_t X_t` of every snapshot (GCN's normalization, no parameter:
the *global cache*'s entries), ``normalize(edge_index, n, edge_weight, dtype)``
the batch-step graph, ``step(basis_rows, graph, states) -> (y, states)``.

Beyond that API, every class here splits ``step`` into

* ``encode(basis_rows) -> z``: the first layer's input side, which depends on
  the parameters but not on the state (stacked models: the whole layer-0 GNN
  output; GCRN-M2: the input half of the layer-0 gates; T-GCN: its three gate
  GCNs). Within one batch (parameters fixed) the windows that read snapshot
  :math:`t` share one ``z_t``: the *local cache* of
  :class:`~pyg_dynscale.windows.cache.WindowCache`.
* ``step_encoded(z_rows, graph, states)``: the rest; layers above the first
  aggregate their input and their hidden state once per step for all gates.

``step(b, g, s) == step_encoded(encode(b), g, s)``. The results equal the
layer's ``forward`` up to float rounding (:math:`\hat A (U W) = (\hat A U) W`),
tested to 1e-9 in float64.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .reinc_models import CDGCN, GCRNM1, GCRNM2, gcn_project, gcn_aggregate, gcn_graph

__all__ = ["LAYER_REUSE", "GCNInputReuse", "GCRNM1Reuse", "CDGCNReuse", "GCRNM2Reuse", "TGCNLocalReuse"]


class GCNInputReuse:
    r"""Base: the input aggregation :math:`\hat A_t X_t` of every snapshot
    (``basis`` ``[N_all, 1, F]``) with the first GCN's normalization.

    Args:
        cell: the layer (its own parameters are used).
        x: ``[N_all, F]`` features of every vertex-time node.
        edge_index: ``[2, E_all]`` edges with global rows (block-diagonal).
        edge_weight: ``[E_all]`` or ``None``.
    """

    #: carried state components (``h, c``)
    num_states = 2

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        #: ``[N_all, 1, F]``: :math:`\hat A_t X_t` of every snapshot
        self.basis = self.input_basis(x, edge_index, edge_weight)

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None, grad: bool = False) -> Tensor:
        r"""``[n, 1, F]``: :math:`\hat A x` on one graph (the first GCN's normalization; ``loops``: as
        :meth:`normalize`; ``grad``: keep the autograd graph of ``x``, else none)."""
        conv = self.first_conv()
        g = gcn_graph(conv, edge_index, x.shape[0], edge_weight, x.dtype, loops)
        if grad:
            return gcn_aggregate(conv, g, x).unsqueeze(1)
        with torch.no_grad():
            return gcn_aggregate(conv, g, x).unsqueeze(1)

    def first_conv(self) -> torch.nn.Module:
        return self.cell.convs[0]

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> Optional[tuple]:
        r""":math:`\hat A` of the batch graph for the layers above the first (``None``: one layer, no graph op;
        ``loops``: host positions of the self-loops of ``edge_index`` if known: nothing is read back)."""
        if self.cell.num_layers == 1:
            return None
        return gcn_graph(self.first_conv(), edge_index, n, edge_weight, dtype, loops)

    def encode(self, basis: Tensor) -> Tensor:
        raise NotImplementedError

    def step_encoded(self, z: Tensor, graph: Optional[tuple], states: tuple) -> tuple:
        raise NotImplementedError

    def step(self, basis: Tensor, graph: Optional[tuple], states: tuple) -> tuple:
        return self.step_encoded(self.encode(basis), graph, states)

    # the batched-projection API of nn.reuse (``weights``, ``project``, ``step_projected``): ``encode`` is the projection
    def weights(self) -> tuple:
        return ()

    def project(self, basis: Tensor, w: tuple) -> Tensor:
        return self.encode(basis)

    def step_projected(self, proj: Tensor, graph: Optional[tuple], states: tuple, w: tuple) -> tuple:
        return self.step_encoded(proj, graph, states)

    @staticmethod
    def operators(graph: Optional[tuple], n: Optional[int] = None, fast: bool = False) -> Optional[tuple]:
        """The step graph as :meth:`normalize` gives it (these layers aggregate with
        :func:`~pyg_dynscale.nn.reinc_models.gcn_aggregate` on it directly)."""
        return graph


class _StackedLSTMReuse(GCNInputReuse):
    """Stacked GNN-LSTM pairs: ``encode`` is layer 0's GNN, ``gnn(l, ...)`` the others'."""

    def gnn(self, l: int, graph: tuple, u: Tensor) -> Tensor:
        raise NotImplementedError

    def step_encoded(self, z: Tensor, graph: Optional[tuple], states: tuple) -> tuple:
        c = self.cell
        H = c.out_channels
        hs, cs = list(states[0].split(H, 1)), list(states[1].split(H, 1))
        for l, lstm in enumerate(c.lstms):
            inp = z if l == 0 else self.gnn(l, graph, hs[l - 1])
            hs[l], cs[l] = lstm(inp, (hs[l], cs[l]))
        return hs[-1], (torch.cat(hs, 1), torch.cat(cs, 1))


class GCRNM1Reuse(_StackedLSTMReuse):
    r""":class:`~pyg_dynscale.nn.reinc_models.GCRNM1`: ``encode`` =
    :math:`\mathrm{ReLU}((\hat A X) W^0 + b^0)`; the GCNs above run as
    ``GCNConv`` does (transform, aggregate, bias) on the batch graph."""

    def encode(self, basis: Tensor) -> Tensor:
        return torch.relu(gcn_project(self.cell.convs[0], basis[:, 0]))

    def gnn(self, l: int, graph: tuple, u: Tensor) -> Tensor:
        conv = self.cell.convs[l]
        out = gcn_aggregate(conv, graph, conv.lin(u))
        return torch.relu(out + conv.bias if conv.bias is not None else out)


class CDGCNReuse(_StackedLSTMReuse):
    r""":class:`~pyg_dynscale.nn.reinc_models.CDGCN`: ``encode`` =
    :math:`\mathrm{ReLU}(\hat A X \,\|\, (\hat A X) W^0 + b^0)`."""

    def encode(self, basis: Tensor) -> Tensor:
        return CDGCN.skip(self.cell.convs[0], basis[:, 0])

    def gnn(self, l: int, graph: tuple, u: Tensor) -> Tensor:
        conv = self.cell.convs[l]
        return CDGCN.skip(conv, gcn_aggregate(conv, graph, u))


class GCRNM2Reuse(GCNInputReuse):
    r""":class:`~pyg_dynscale.nn.reinc_models.GCRNM2`: ``encode`` = the input
    half of layer 0's four gates, :math:`(\hat A X) W^0_x + b^0`; per step,
    :math:`\hat A h^l_{t-1}` (and above layer 0 :math:`\hat A h^{l-1}_t`) is
    aggregated once, :math:`H` columns wide, and projected for all four gates
    (reuse across gates), instead of aggregating the :math:`4H`-wide
    :math:`h W_h`."""

    def first_conv(self) -> torch.nn.Module:
        return self.cell.conv_x[0]

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> tuple:
        return gcn_graph(self.first_conv(), edge_index, n, edge_weight, dtype, loops)

    def encode(self, basis: Tensor) -> Tensor:
        return gcn_project(self.cell.conv_x[0], basis[:, 0])

    def step_encoded(self, z: Tensor, graph: tuple, states: tuple) -> tuple:
        c = self.cell
        H = c.out_channels
        hs, cs = list(states[0].split(H, 1)), list(states[1].split(H, 1))
        conv = c.conv_x[0]
        for l in range(c.num_layers):
            gx = z if l == 0 else gcn_project(c.conv_x[l], gcn_aggregate(conv, graph, hs[l - 1]))
            gates = gx + c.conv_h[l].lin(gcn_aggregate(conv, graph, hs[l]))
            hs[l], cs[l] = GCRNM2.lstm(gates, cs[l])
        return hs[-1], (torch.cat(hs, 1), torch.cat(cs, 1))


class TGCNLocalReuse(GCNInputReuse):
    r""":class:`~pyg_dynscale.nn.TGCN` (one GCN layer per gate,
    ``cached=False``), as :class:`~pyg_dynscale.nn.reuse.TGCNReuse` does for
    PyGT's: :math:`\hat A X` once per snapshot, and its three gate GCNs
    :math:`(\hat A X) W_g + b_g` as ``encode`` (``[n, 3H]``, state-free), so
    the local cache shares them across the windows of a batch; no graph
    operation runs in the step."""

    num_states = 1

    def first_conv(self) -> torch.nn.Module:
        return self.cell.conv_z

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> None:
        return None

    def encode(self, basis: Tensor) -> Tensor:
        c, ax = self.cell, basis[:, 0]
        return torch.cat([gcn_project(c.conv_z, ax), gcn_project(c.conv_r, ax), gcn_project(c.conv_h, ax)], 1)

    def step_encoded(self, z: Tensor, graph: None, states: tuple) -> tuple:
        c = self.cell
        (H,) = states
        gz, gr, gh = z.chunk(3, 1)
        Z = torch.sigmoid(c.linear_z(torch.cat([gz, H], 1)))
        R = torch.sigmoid(c.linear_r(torch.cat([gr, H], 1)))
        H_tilde = torch.tanh(c.linear_h(torch.cat([gh, H * R], 1)))
        H = Z * H + (1 - Z) * H_tilde
        return H, (H,)


#: the reuse implementation of each layer class of :mod:`~pyg_dynscale.nn.reinc_models`
#: (read by :func:`~pyg_dynscale.nn.reuse.reuse_for`; the layers do not import it, so no circle)
LAYER_REUSE = {GCRNM1: GCRNM1Reuse, CDGCN: CDGCNReuse, GCRNM2: GCRNM2Reuse}
