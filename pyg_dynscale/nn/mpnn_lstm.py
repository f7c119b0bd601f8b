r"""MPNN-LSTM (Panagopoulos et al. 2021) as PyGT implements it, decomposed."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv

from ..errors import ModelInputError
from .decomposed import DecomposedModule, FusedGraph, Halo, gcn_adjacency, halo_exchange, propagate

__all__ = ["MPNNLSTM", "segment_batch_norm", "mpnn_structure", "mpnn_time", "lstm_first_step", "mpnn_pygt_pattern"]


def mpnn_pygt_pattern(in_channels: int, hidden: int, bytes_per_element: int = 4) -> Any:
    """PyGT MPNN-LSTM's dependency pattern: GCN layers of input widths
    ``(in, hidden)``, no temporal dependency, structure output
    ``[H_1 || H_2 || X]`` (``2*hidden + in``)."""
    from ..partition.pattern import DependencyPattern

    return DependencyPattern.preset("mpnnlstm-pygt", in_channels, hidden, bytes_per_element=bytes_per_element)


def segment_batch_norm(x: Tensor, seg: Tensor, num_segments: int, bn: torch.nn.BatchNorm1d,
                       halo: Optional[Halo] = None, counts: Optional[tuple[Tensor, list]] = None) -> Tensor:
    r"""``bn`` applied to every segment of rows separately, as if it were called
    once per segment in segment order (one PyGT call per snapshot).

    Training mode (or ``track_running_stats=False``): segment :math:`t` is
    normalized with its own biased statistics :math:`\mu_t, \sigma^2_t`, and
    the running statistics are updated ``num_segments`` times in order, in
    closed form :math:`r \leftarrow (1-m)^T r + \sum_t m (1-m)^{T-1-t} s_t`
    (with the unbiased :math:`s_t`), exactly as ``T`` calls would; an empty
    segment updates nothing (a loop cannot call BatchNorm on no rows). Eval mode
    uses the running statistics for all rows at once.

    With a ``halo`` (distributed runtime), the statistics are those of the
    whole snapshot across ranks: sums and counts over the rank's
    ``halo.owned`` rows, summed over ranks with ``halo.all_reduce`` (whose
    backward sums the gradients, so the backward is the global one too).

    ``counts``: ``([T] rows per segment over all ranks, non-empty segments as a
    host list)`` when known in advance (they are fixed by the graph): then the
    counts are neither counted nor reduced, and nothing is read back.
    """
    use_batch = bn.training or bn.running_mean is None
    if not use_batch:
        return F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
    C = x.shape[1]
    rows = halo.owned if halo is not None else None
    reduce = halo.all_reduce if halo is not None else (lambda t: t)
    xs, ss = (x, seg) if rows is None else (x.index_select(0, rows), seg.index_select(0, rows))
    if counts is None:
        c = reduce(torch.bincount(ss, minlength=num_segments).to(x.dtype))
        nonempty = (c > 0).nonzero().flatten().tolist()
    else:
        c, nonempty = counts[0].to(x.dtype), counts[1]
    counts = c.unsqueeze(1)  # [T, 1]
    mean = reduce(x.new_zeros(num_segments, C).index_add_(0, ss, xs)) / counts
    xc = x - mean.index_select(0, seg)
    xcs = xc if rows is None else xc.index_select(0, rows)
    var = reduce(xc.new_zeros(num_segments, C).index_add_(0, ss, xcs * xcs)) / counts
    out = xc * torch.rsqrt(var.index_select(0, seg) + bn.eps)
    if bn.weight is not None:
        out = out * bn.weight + bn.bias
    if bn.training and bn.track_running_stats and bn.running_mean is not None:
        with torch.no_grad():
            unbiased = var * counts / (counts - 1).clamp(min=1)
            mean_d, unb_d = mean.detach(), unbiased.detach()
            for t in nonempty:  # T tiny [C] updates: exact sequential semantics; an empty snapshot is no call
                bn.num_batches_tracked.add_(1)
                m = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
                bn.running_mean.mul_(1 - m).add_(m * mean_d[t].to(bn.running_mean.dtype))
                bn.running_var.mul_(1 - m).add_(m * unb_d[t].to(bn.running_var.dtype))
    return out


def _conv(conv: GCNConv, graph: FusedGraph, x: Tensor, halo: Optional[Halo] = None, block: int = 0,
          layer: int = 0) -> Tensor:
    adj = gcn_adjacency(graph, bool(conv.improved), bool(conv.add_self_loops), x.dtype)
    x = halo_exchange(halo, block, layer, x)
    out = propagate(conv.lin(x), adj) if x.shape[-1] > conv.lin.weight.shape[0] else conv.lin(propagate(x, adj))
    return out + conv.bias if conv.bias is not None else out


def mpnn_structure(module: Any, graph: FusedGraph, x: Tensor, halo: Optional[Halo] = None, block: int = 0,
                   skip: bool = True) -> Tensor:
    r"""Structure encoder of MPNN-LSTM for all snapshots at once:
    :math:`H_1 = \mathrm{drop}(\mathrm{BN}_t(\mathrm{ReLU}(\mathrm{GCN}_1(X))))`,
    :math:`H_2 = \mathrm{drop}(\mathrm{BN}_t(\mathrm{ReLU}(\mathrm{GCN}_2(H_1))))`,
    with batch norm statistics per snapshot (= per PyGT call). Returns
    ``[N, 2*hidden + in]`` = :math:`[H_1 \| H_2 \| X]` (X feeds the skip part),
    or ``[N, 2*hidden]`` with ``skip=False``."""
    T = graph.num_snapshots
    seg = graph.time
    # the rows per snapshot over all ranks are fixed: from the rank's halo hook, or the graph on one process
    counts = graph.segment_counts() if halo is None else getattr(halo, "segment_counts", None)
    h1 = F.relu(_conv(module._convolution_1, graph, x, halo, block, 0))
    h1 = F.dropout(segment_batch_norm(h1, seg, T, module._batch_norm_1, halo, counts), module.dropout, module.training)
    h2 = F.relu(_conv(module._convolution_2, graph, h1, halo, block, 1))
    h2 = F.dropout(segment_batch_norm(h2, seg, T, module._batch_norm_2, halo, counts), module.dropout, module.training)
    return torch.cat([h1, h2, x], 1) if skip else torch.cat([h1, h2], 1)


def _tanh(x: Tensor) -> Tensor:
    # tanh x = 2 sigmoid(2x) - 1 exactly; several times faster than torch.tanh on
    # some CPU builds (a few ulps apart)
    return torch.sigmoid(2 * x).mul(2).sub(1)


def lstm_first_step(lstm: torch.nn.LSTM, x: Tensor) -> Tensor:
    r"""One step of a one-layer :class:`torch.nn.LSTM` from the zero state,
    for all rows ``x [B, D]`` at once, as plain tensor ops:

    .. math::
        [i \| f \| g \| o] = x W_{ih}^\top + b_{ih} + b_{hh}, \quad
        c = \sigma(i) \odot \tanh(g), \quad h = \sigma(o) \odot \tanh(c)

    (:math:`W_{hh} h_0 = 0` and :math:`f \odot c_0 = 0`). Equals ``lstm(x[None])``'s
    output to float rounding, with the same gradients (zero for :math:`W_{hh}`
    and the forget gate), but runs ~10x faster on CPU for large ``B``, where
    the oneDNN LSTM backward is slow. Returns ``h [B, H]``.
    """
    w_hh = lstm.weight_hh_l0
    # W_hh h_0 with h_0 = 0, as torch's LSTM computes it: keeps W_hh in the graph
    # (zero gradient, not None) and propagates a non-finite W_hh like torch does
    b = F.linear(w_hh.new_zeros(w_hh.shape[1]), w_hh)
    if lstm.bias:
        b = b + lstm.bias_ih_l0 + lstm.bias_hh_l0
    i, _, g, o = F.linear(x, lstm.weight_ih_l0, b).chunk(4, 1)
    c = torch.sigmoid(i) * _tanh(g)
    return torch.sigmoid(o) * _tanh(c)


def _plain_lstm(lstm: Any) -> bool:
    return (isinstance(lstm, torch.nn.LSTM) and lstm.num_layers == 1 and not lstm.bidirectional
            and getattr(lstm, "proj_size", 0) == 0 and not lstm.batch_first)


def mpnn_time(module: Any, z: Tensor, node_ptr: Tensor) -> Tensor:
    r"""Time encoder of MPNN-LSTM: two LSTMs over each node's ``window`` stacked
    graphs, for every snapshot at once; output
    :math:`[h^{(1)}_W \| h^{(2)}_W \| S]`, ``[sum_t B_t * num_nodes, 2*hidden + in + window - 1]``."""
    W, Hd, Fin = module.window, module.hidden_size, module.in_channels
    if W == 1:
        seq = z[:, : 2 * Hd].unsqueeze(0)  # [1, N, 2H]: any vertex count per snapshot
        S = z[:, 2 * Hd:]
    else:
        n = module.num_nodes
        counts = node_ptr[1:] - node_ptr[:-1]
        bad = (counts % (W * n)) != 0
        if bool(bad.any()):
            t = int(bad.nonzero()[0])
            raise ModelInputError(
                f"snapshot {t}",
                f"has {int(counts[t])} rows, not a multiple of window*num_nodes = {W * n}.",
                "stack `window` graphs of `num_nodes` vertices per snapshot (PyGT's MPNNLSTM layout).",
            )
        zz = z.view(-1, W, n, z.shape[1]).transpose(1, 2).reshape(-1, W, z.shape[1])  # [B*n, W, D]
        seq = zz[:, :, : 2 * Hd].transpose(0, 1)  # [W, B*n, 2H]
        xs = zz[:, :, 2 * Hd:]
        S = torch.cat([xs[:, 0, :], xs[:, 1:, Fin - 1]], 1)
    if seq.shape[0] == 1 and _plain_lstm(module._recurrent_1) and _plain_lstm(module._recurrent_2):
        h1 = lstm_first_step(module._recurrent_1, seq[0])  # window 1: one step from the zero state
        h2 = lstm_first_step(module._recurrent_2, h1)
        return torch.cat([h1, h2, S], 1)
    out1, (h1, _) = module._recurrent_1(seq)
    _, (h2, _) = module._recurrent_2(out1)
    return torch.cat([h1[0], h2[0], S], 1)


class MPNNLSTM(DecomposedModule):
    r"""MPNN-LSTM of `"Transfer Graph Neural Networks for Pandemic Forecasting"
    <https://arxiv.org/abs/2009.08388>`_, a drop-in for
    :class:`torch_geometric_temporal.nn.recurrent.MPNNLSTM` (same constructor,
    parameter names, input layout, BatchNorm/dropout semantics and output).

    One call sees ``B * window`` stacked graphs of ``num_nodes`` vertices
    (rows ordered ``[B, window, num_nodes]``):

    .. math::
        H_1 &= \mathrm{drop}(\mathrm{BN}(\mathrm{ReLU}(\mathrm{GCN}_1(X)))), \quad
        H_2 = \mathrm{drop}(\mathrm{BN}(\mathrm{ReLU}(\mathrm{GCN}_2(H_1)))), \\
        \mathrm{out}_v &= [\,\mathrm{LSTM}_1([H_1\|H_2]_{v,1..W})_W \,\|\,
        \mathrm{LSTM}_2(\cdot)_W \,\|\, x_{v,1} \,\|\, x_{v,2..W}[F-1]\,].

    Decomposition: the GCN/BN part is the structure encoder (batch-norm
    statistics per snapshot), the LSTMs over the window are the time encoder.
    With ``window == 1`` any number of vertices per snapshot is accepted
    (changing vertex sets); the fused path then runs every snapshot in one pass.
    No state crosses snapshots (``time_kind="none"``): the LSTMs run over the
    window inside one snapshot. DGC's MPNN-LSTM, whose LSTM runs across
    snapshots, is :class:`~pyg_dynscale.nn.MPNNLSTMDGC`.

    Args:
        in_channels (int): input features :math:`F`.
        hidden_size (int): hidden size :math:`H`.
        num_nodes (int): vertices per stacked graph (used when ``window > 1``).
        window (int): stacked past graphs per call.
        dropout (float): dropout after each batch norm.

    Shapes:
        - input: ``X`` :math:`(B \cdot W \cdot n, F)`, ``edge_index``, ``edge_weight``.
        - output: :math:`(B \cdot n, 2H + F + W - 1)`.
    """

    time_kind = "none"

    def __init__(self, in_channels: int, hidden_size: int, num_nodes: int, window: int, dropout: float) -> None:
        super().__init__()
        self.window = window
        self.num_nodes = num_nodes
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.in_channels = in_channels
        self._convolution_1 = GCNConv(in_channels, hidden_size)
        self._convolution_2 = GCNConv(hidden_size, hidden_size)
        self._batch_norm_1 = torch.nn.BatchNorm1d(hidden_size)
        self._batch_norm_2 = torch.nn.BatchNorm1d(hidden_size)
        self._recurrent_1 = torch.nn.LSTM(2 * hidden_size, hidden_size, 1)
        self._recurrent_2 = torch.nn.LSTM(hidden_size, hidden_size, 1)

    @property
    def out_channels(self) -> int:
        return 2 * self.hidden_size + self.in_channels + self.window - 1

    def reset_parameters(self) -> None:
        for m in self.children():
            m.reset_parameters()

    def forward(self, X: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None) -> Tensor:
        """One PyGT call (``B * window`` stacked graphs)."""
        h1 = F.relu(self._convolution_1(X, edge_index, edge_weight))
        h1 = F.dropout(self._batch_norm_1(h1), self.dropout, self.training)
        h2 = F.relu(self._convolution_2(h1, edge_index, edge_weight))
        h2 = F.dropout(self._batch_norm_2(h2), self.dropout, self.training)
        z = torch.cat([h1, h2, X], 1)
        return mpnn_time(self, z, torch.tensor([0, X.shape[0]], device=X.device))

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        return mpnn_structure(self, graph, graph.x if x is None else x, halo, block)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        if h0 is not None:
            raise ModelInputError("h0", "MPNN-LSTM carries no state across snapshots.", "pass h0=None.")
        return mpnn_time(self, z, graph.node_ptr)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        return mpnn_pygt_pattern(self.in_channels, self.hidden_size, bytes_per_element)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.hidden_size}, window={self.window})"
