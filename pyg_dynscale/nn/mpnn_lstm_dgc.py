r"""MPNN-LSTM in the form DGC evaluates it (§7.1): the LSTM runs across snapshots."""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.nn import GCNConv

from .decomposed import DecomposedModule, FusedGraph, Halo, check_initial_state
from .mpnn_lstm import mpnn_structure
from .temporal_fusion import MaskedLSTM

__all__ = ["MPNNLSTMDGC"]


class MPNNLSTMDGC(DecomposedModule):
    r"""DGC's MPNN-LSTM: "a 2-layer GCN and a 2-layer LSTM ... the
    concatenation of outputs from each GCN layer as the input to the time
    encoder" (`DGC <https://doi.org/10.1145/3589288>`_, §7.1). Unlike PyGT's
    :class:`~pyg_dynscale.nn.MPNNLSTM`, whose LSTMs run over a window of
    stacked graphs *inside* one snapshot, the LSTM here runs along every
    vertex's temporal sequence, carrying :math:`(h, c)` of each layer from one
    appearance to the next:

    .. math::
        H_1 &= \mathrm{drop}(\mathrm{BN}_t(\mathrm{ReLU}(\mathrm{GCN}_1(X_t)))), \quad
        H_2 = \mathrm{drop}(\mathrm{BN}_t(\mathrm{ReLU}(\mathrm{GCN}_2(H_1)))), \\
        \mathbf{o}^{(1)}_{i,t}, (h^{(1)}, c^{(1)})_{i,t} &= \mathrm{LSTM}_1\big([H_1 \| H_2]_{i,t},
            (h^{(1)}, c^{(1)})_{i,t'}\big), \quad
        \mathbf{o}^{(k)}_{i,t} = \mathrm{LSTM}_k\big(\mathbf{o}^{(k-1)}_{i,t}, \cdot\big), \\
        \mathrm{out}_{i,t} &= [\mathbf{o}^{(1)}_{i,t} \| \cdots \| \mathbf{o}^{(L)}_{i,t}],

    with :math:`t'` the previous appearance of vertex :math:`i` (zeros at the
    first) and batch-norm statistics per snapshot. The structure encoder is
    the GCN/BN part, the time encoder the stacked LSTM; its state is
    :math:`[h^{(1)} \| c^{(1)} \| \cdots \| h^{(L)} \| c^{(L)}]`
    (``2 * hidden * lstm_layers`` wide, the preset
    ``DependencyPattern.preset("mpnnlstm")``).

    Args:
        in_channels (int): input features :math:`F`.
        hidden_size (int): hidden size :math:`H` of the GCNs and LSTMs.
        dropout (float): dropout after each batch norm.
        lstm_layers (int): stacked LSTM layers :math:`L` (DGC: 2).

    Shapes:
        - **forward_fused** input: a :class:`FusedGraph` of :math:`N`
          vertex-time nodes, optional ``h0`` :math:`(S, 2HL)`;
          output :math:`(N, HL)`.
    """

    time_kind = "recurrent"

    def __init__(self, in_channels: int, hidden_size: int, dropout: float = 0.0, lstm_layers: int = 2) -> None:
        super().__init__()
        if lstm_layers < 1:
            raise ValueError(f"lstm_layers must be >= 1, got {lstm_layers}")
        self.in_channels = in_channels
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.lstm_layers = lstm_layers
        self.state_width = 2 * hidden_size * lstm_layers
        # the attribute names of PyGT's MPNNLSTM, so mpnn_structure runs both
        self._convolution_1 = GCNConv(in_channels, hidden_size)
        self._convolution_2 = GCNConv(hidden_size, hidden_size)
        self._batch_norm_1 = torch.nn.BatchNorm1d(hidden_size)
        self._batch_norm_2 = torch.nn.BatchNorm1d(hidden_size)
        self.lstms = torch.nn.ModuleList(
            MaskedLSTM(2 * hidden_size if k == 0 else hidden_size, hidden_size) for k in range(lstm_layers)
        )

    @property
    def out_channels(self) -> int:
        return self.hidden_size * self.lstm_layers

    def reset_parameters(self) -> None:
        for m in (self._convolution_1, self._convolution_2, self._batch_norm_1, self._batch_norm_2, *self.lstms):
            m.reset_parameters()

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        """``[N, 2H]``: :math:`[H_1 \\| H_2]` of all snapshots in one pass."""
        return mpnn_structure(self, graph, graph.x if x is None else x, halo, block, skip=False)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        return self.time_encoder_with_state(z, graph, h0, block)[0]

    def time_encoder_with_state(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None,
                                block: int = 0) -> tuple[Tensor, Tensor]:
        """``(outputs [N, HL], final states [S, 2HL])``: the stacked LSTM along
        every sequence at once (masked temporal fusion)."""
        check_initial_state(h0, graph, self.state_width)
        H = self.hidden_size
        packing = graph.packing
        inp = graph.to_sequences(z)
        outs, states = [], []
        for k, lstm in enumerate(self.lstms):
            hc = None if h0 is None else (h0[:, 2 * H * k:2 * H * k + H], h0[:, 2 * H * k + H:2 * H * (k + 1)])
            inp, (h_n, c_n) = lstm(inp, packing, hc, return_state=True)
            outs.append(inp)
            states += [h_n, c_n]
        return graph.from_sequences(torch.cat(outs, 1)), torch.cat(states, 1)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        from ..partition.pattern import DependencyPattern

        return DependencyPattern.preset("mpnnlstm", self.in_channels, self.hidden_size,
                                        lstm_layers=self.lstm_layers, bytes_per_element=bytes_per_element)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.hidden_size}, lstm_layers={self.lstm_layers})"
