r"""The models ReInc evaluates (§5, ``notes-002-reinc.md`` §1.2) as
per-snapshot layers with PyGT's calling convention, so that
:class:`~pyg_dynscale.windows.WindowTrainer`, ``FusedTrainer``'s black-box
path and a plain PyGT loop all call them the same way::

    y, h, c = layer(x, edge_index, edge_weight, h, c)      # h, c: None at the first snapshot

``h`` and ``c`` stack the ``num_layers`` layers' states side by side
(``[n, num_layers * H]``, layer 0 first), ``y = h[:, -H:]`` (the top layer).

* :class:`GCRNM1` (Seo et al. 2018, "model 1", *stacked*): per layer a GCN on
  the layer's input, then an LSTM on the GCN output.
* :class:`CDGCN` (Manessi et al. 2020, *stacked* with skip connections, as the
  SC'21 paper, ``notes-000-ibm-scaling.md`` §1.5, describes it): per layer
  :math:`Y = \sigma(\hat A U \,\|\, \hat A U W)`, then an LSTM.
* :class:`GCRNM2` (Seo et al. 2018, "model 2", *integrated*: ReInc's Listing 1
  ``integrate(GraphLSTM, GCN)``): an LSTM whose gates convolve the input and
  the hidden state.
* T-GCN (ReInc's fourth model) is :class:`~pyg_dynscale.nn.TGCN` (or PyGT's).

ReInc's GCN aggregates first and transforms after (Listing 1:
``update = relu(linear(msg_rst))``); PyG's ``GCNConv`` transforms first,
:math:`\hat A (U W) + b = (\hat A U) W + b` up to rounding. Each layer's reuse
implementation is in :mod:`~pyg_dynscale.nn.reinc_reuse` (``LAYER_REUSE``),
which :func:`~pyg_dynscale.nn.reuse.reuse_for` reads.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv

from .graph_norm import gcn_norm as graph_gcn_norm

__all__ = ["GCRNM1", "GCRNM2", "CDGCN", "gcn_graph", "gcn_aggregate"]


def gcn_graph(conv: GCNConv, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
              loops: Optional[Tensor] = None) -> tuple:
    r"""``(edge_index, weight)`` of :math:`\hat A = D^{-1/2}(A + I)D^{-1/2}`
    as ``conv`` normalizes (its ``improved``, ``add_self_loops``, ``flow``); ``loops``: host positions
    of the self-loops of ``edge_index`` if known (nothing read back, :mod:`~pyg_dynscale.nn.graph_norm`)."""
    return graph_gcn_norm(conv, edge_index, n, edge_weight, dtype, loops)


def gcn_aggregate(conv: GCNConv, graph: tuple, u: Tensor) -> Tensor:
    r""":math:`\hat A U` with ``graph`` = :func:`gcn_graph` (``GCNConv``'s own
    propagation: no parameter is used)."""
    ei, w = graph
    return conv.propagate(ei, x=u, edge_weight=w)


def gcn_project(conv: GCNConv, au: Tensor) -> Tensor:
    r""":math:`(\hat A U) W^\top + b`: ``conv``'s transform applied to an aggregated input."""
    out = conv.lin(au)
    return out + conv.bias if conv.bias is not None else out


def _split_states(h: Optional[Tensor], c: Optional[Tensor], x: Tensor, layers: int, H: int) -> tuple:
    n = x.shape[0]
    if h is None:
        h = x.new_zeros(n, layers * H)
    if c is None:
        c = x.new_zeros(n, layers * H)
    return list(h.split(H, 1)), list(c.split(H, 1))


class _ReIncLayer(torch.nn.Module):
    """Shared constructor checks, state handling and ``reset_parameters``."""

    def __init__(self, in_channels: int, out_channels: int, num_layers: int) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels), ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                from ..errors import ModelInputError

                raise ModelInputError(name, f"is {v!r}.", "give a positive int.")
        self.in_channels, self.out_channels, self.num_layers = in_channels, out_channels, num_layers

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def _finish(self, hs: list, cs: list) -> tuple:
        return hs[-1], torch.cat(hs, 1), torch.cat(cs, 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, num_layers={self.num_layers})"


class GCRNM1(_ReIncLayer):
    r"""GCRN model 1 of `"Structured Sequence Modeling with Graph
    Convolutional Recurrent Networks" <https://arxiv.org/abs/1612.07659>`_
    (Seo et al.), the *stacked* DGNN ReInc evaluates with two GNN-RNN pairs:

    .. math::
        Z^l_t &= \mathrm{ReLU}\big(\hat A_t\, U^l_t\, W^l + b^l\big), \qquad
        U^0_t = X_t,\ U^l_t = h^{l-1}_t, \\
        (h^l_t, c^l_t) &= \mathrm{LSTM}^l\big(Z^l_t, (h^l_{t-1}, c^l_{t-1})\big),

    (:math:`\hat A` GCN's normalization, ``GCNConv``; the LSTM is
    ``torch.nn.LSTMCell``). Only layer 0's GNN output is independent of the
    state, so windowed reuse computes it once per snapshot and batch
    (:class:`~pyg_dynscale.nn.reinc_reuse.GCRNM1Reuse`).

    Args:
        in_channels (int): input features :math:`F`.
        out_channels (int): hidden size :math:`H` of every layer.
        num_layers (int): GNN-RNN pairs (ReInc: 2).
        improved, add_self_loops (bool): ``GCNConv``'s options.

    Shapes:
        - input: ``x`` :math:`(n, F)`, ``edge_index`` :math:`(2, E)`,
          ``edge_weight`` :math:`(E)` or ``None``, ``h``, ``c``
          :math:`(n, \text{num\_layers} \cdot H)` or ``None`` (zeros).
        - output: ``(y, h, c)``: ``y`` :math:`(n, H)` (the top layer's
          :math:`h`), ``h``, ``c`` :math:`(n, \text{num\_layers} \cdot H)`.
    """

    def __init__(self, in_channels: int, out_channels: int, num_layers: int = 2, improved: bool = False,
                 add_self_loops: bool = True) -> None:
        super().__init__(in_channels, out_channels, num_layers)
        H = out_channels
        self.convs = torch.nn.ModuleList(
            GCNConv(in_channels if l == 0 else H, H, improved=improved, add_self_loops=add_self_loops)
            for l in range(num_layers))
        self.lstms = torch.nn.ModuleList(torch.nn.LSTMCell(H, H) for _ in range(num_layers))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                h: Optional[Tensor] = None, c: Optional[Tensor] = None) -> tuple:
        hs, cs = _split_states(h, c, x, self.num_layers, self.out_channels)
        u = x
        for l, (conv, lstm) in enumerate(zip(self.convs, self.lstms)):
            z = F.relu(conv(u, edge_index, edge_weight))
            hs[l], cs[l] = lstm(z, (hs[l], cs[l]))
            u = hs[l]
        return self._finish(hs, cs)


class CDGCN(_ReIncLayer):
    r"""CD-GCN, "concatenate dynamic GCN" of `"Dynamic graph convolutional
    networks" <https://arxiv.org/abs/1704.06199>`_ (Manessi et al.), as the
    SC'21 paper (Chakaravarthy et al., §5.1) describes and extends it to
    several layers: the GCN's skip connection concatenates the *aggregated*
    input with its transform, then an LSTM runs on the result:

    .. math::
        Y^l_t &= \mathrm{ReLU}\big(\hat A_t U^l_t \,\big\|\, \hat A_t U^l_t W^l + b^l\big)
        \in \mathbb{R}^{n \times (F_l + H)}, \qquad U^0_t = X_t,\ U^l_t = h^{l-1}_t, \\
        (h^l_t, c^l_t) &= \mathrm{LSTM}^l\big(Y^l_t, (h^l_{t-1}, c^l_{t-1})\big).

    Reading of the sources: SC'21 writes :math:`Y_0 = \tilde A X`,
    :math:`Y_1 = Y_0 W`, :math:`Y = \sigma(Y_0 \circ Y_1)`, so the skip carries
    :math:`\hat A X` (not the raw :math:`X`), and it names no skip around the
    LSTM; it runs two layers (ReInc: two GNN-RNN pairs).

    Args:
        in_channels (int): input features :math:`F`.
        out_channels (int): GCN output width and LSTM hidden size :math:`H`.
        num_layers (int): GNN-RNN pairs (SC'21 and ReInc: 2).
        improved, add_self_loops (bool): ``GCNConv``'s options.

    Shapes: as :class:`GCRNM1`; layer :math:`l`'s LSTM input is
    :math:`F_l + H` wide (:math:`F_0 = F`, :math:`F_l = H`).
    """

    def __init__(self, in_channels: int, out_channels: int, num_layers: int = 2, improved: bool = False,
                 add_self_loops: bool = True) -> None:
        super().__init__(in_channels, out_channels, num_layers)
        H = out_channels
        widths = [in_channels] + [H] * (num_layers - 1)
        self.convs = torch.nn.ModuleList(GCNConv(f, H, improved=improved, add_self_loops=add_self_loops)
                                         for f in widths)
        self.lstms = torch.nn.ModuleList(torch.nn.LSTMCell(f + H, H) for f in widths)

    @staticmethod
    def skip(conv: GCNConv, au: Tensor) -> Tensor:
        r""":math:`\mathrm{ReLU}(\hat A U \,\|\, \hat A U W + b)` from :math:`\hat A U`."""
        return F.relu(torch.cat([au, gcn_project(conv, au)], 1))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                h: Optional[Tensor] = None, c: Optional[Tensor] = None) -> tuple:
        hs, cs = _split_states(h, c, x, self.num_layers, self.out_channels)
        graph = gcn_graph(self.convs[0], edge_index, x.shape[0], edge_weight, x.dtype)
        u = x
        for l, (conv, lstm) in enumerate(zip(self.convs, self.lstms)):
            y = self.skip(conv, gcn_aggregate(conv, graph, u))
            hs[l], cs[l] = lstm(y, (hs[l], cs[l]))
            u = hs[l]
        return self._finish(hs, cs)


class GCRNM2(_ReIncLayer):
    r"""GCRN model 2 of Seo et al., the *integrated* DGNN ReInc evaluates
    (Listing 1, ``integrate(GraphLSTM, GCN)``): every gate of an LSTM applies
    a GCN to the layer's input and one to the hidden state (two GNN
    operations per gate, ReInc §2):

    .. math::
        [I; F; \tilde C; O] &= \hat A_t U^l_t W^l_x + b^l + \hat A_t h^l_{t-1} W^l_h, \qquad
        U^0_t = X_t,\ U^l_t = h^{l-1}_t, \\
        c^l_t &= \sigma(F) \odot c^l_{t-1} + \sigma(I) \odot \tanh(\tilde C), \quad
        h^l_t = \sigma(O) \odot \tanh(c^l_t).

    The four gates' GCNs of one side are one ``GCNConv`` of width
    :math:`4H` (``conv_x[l]``, ``conv_h[l]``; gate :math:`g` is the column
    block :math:`gH \ldots (g+1)H`, PyTorch's ``i, f, g, o`` order): the same
    functions as four separate GCNs. No peephole terms (Seo et al.'s
    variant has them; ReInc's listing does not say). ``conv_h`` has no bias
    (``conv_x``'s is the gate bias).

    Args:
        in_channels (int): input features :math:`F`.
        out_channels (int): hidden size :math:`H` of every layer.
        num_layers (int): stacked GraphLSTM layers (ReInc: 2 in the encoder).
        improved, add_self_loops (bool): ``GCNConv``'s options.

    Shapes: as :class:`GCRNM1`.
    """

    def __init__(self, in_channels: int, out_channels: int, num_layers: int = 2, improved: bool = False,
                 add_self_loops: bool = True) -> None:
        super().__init__(in_channels, out_channels, num_layers)
        H = out_channels
        kw = dict(improved=improved, add_self_loops=add_self_loops)
        self.conv_x = torch.nn.ModuleList(GCNConv(in_channels if l == 0 else H, 4 * H, **kw)
                                          for l in range(num_layers))
        self.conv_h = torch.nn.ModuleList(GCNConv(H, 4 * H, bias=False, **kw) for _ in range(num_layers))

    @staticmethod
    def lstm(gates: Tensor, c: Tensor) -> tuple:
        """The LSTM update from the ``[n, 4H]`` gate pre-activations (``i, f, g, o``)."""
        i, f, g, o = gates.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                h: Optional[Tensor] = None, c: Optional[Tensor] = None) -> tuple:
        hs, cs = _split_states(h, c, x, self.num_layers, self.out_channels)
        u = x
        for l in range(self.num_layers):
            gates = self.conv_x[l](u, edge_index, edge_weight) + self.conv_h[l](hs[l], edge_index, edge_weight)
            hs[l], cs[l] = self.lstm(gates, cs[l])
            u = hs[l]
        return self._finish(hs, cs)
