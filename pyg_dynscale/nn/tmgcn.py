r"""TM-GCN (Malik et al., SDM 2021), as the SC'21 scaling paper trains it,
decomposed for the fused and distributed paths."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv

from ..errors import ModelInputError
from .decomposed import DecomposedModule, FusedGraph, Halo, gcn_adjacency, halo_exchange, propagate

__all__ = ["TMGCN", "m_transform"]


def _check_band(band: Any) -> int:
    if isinstance(band, bool) or not isinstance(band, int) or band < 1:
        raise ModelInputError("band", f"is {band!r}.", "give the M-transform's band width in snapshots, an int >= 1 "
                              "(1: no mixing over time).")
    return band


def _band_masks(graph: FusedGraph, band: int) -> tuple[Tensor, list[Tensor], Tensor]:
    """``(time in sequence order, [per shift j = 1..band-1: rows j apart
    inside one sequence and less than band snapshots apart], 1 / min(t+1, band))``,
    computed once per graph and band."""
    key = ("m_transform", band)
    if key not in graph._cache:
        order, ptr = graph.sequence_order, graph.sequence_ptr
        N = order.numel()
        S = ptr.numel() - 1
        seq = torch.repeat_interleave(torch.arange(S, device=order.device), ptr[1:] - ptr[:-1], output_size=N)
        t = graph.time.index_select(0, order)
        masks = [((seq[j:] == seq[:-j]) & (t[j:] - t[:-j] < band)).unsqueeze(-1) for j in range(1, min(band, N))]
        scale = 1.0 / torch.clamp(t + 1, max=band).to(torch.float64)
        graph._cache[key] = (t, masks, scale.unsqueeze(-1))
    return graph._cache[key]


def m_transform(z: Tensor, graph: FusedGraph, band: int) -> Tensor:
    r"""The banded M-transform along every vertex's sequence at once
    (SC'21 §5.3, :math:`\mathcal{Y} = \mathcal{X} \times_1 M`):

    .. math::
        \mathbf{y}_{i,t} = \sum_{k=\max(0,\,t-b+1)}^{t} M_{tk}\, \mathbf{z}_{i,k}\,
            [i \in V_k], \qquad M_{tk} = \frac{1}{\min(t+1,\, b)}

    (snapshots numbered from 0, so :math:`\min(t+1, b)` is the paper's
    :math:`\min(t, w)`). A vertex absent from snapshot :math:`k` contributes a
    zero row, as in the dense :math:`T \times N \times F` tensor product; the
    output is defined on the vertex-time nodes that exist. ``graph.time`` is
    the snapshot index (a rank's merged graph keeps the global indices).

    Args:
        z (Tensor): ``[N, ...]`` rows of ``graph``'s vertex-time nodes (node order).
        graph (FusedGraph): the nodes, their sequences and snapshot indices.
        band (int): :math:`b \ge 1`.

    Returns:
        ``[N, ...]`` in node order.
    """
    band = _check_band(band)
    if band == 1 or z.shape[0] == 0:
        return z
    t, masks, scale = _band_masks(graph, band)
    zs = graph.to_sequences(z)
    flat = zs.reshape(zs.shape[0], -1)
    acc = flat
    for j, ok in enumerate(masks, start=1):  # the row j positions back, where it lies inside the band
        prev = torch.where(ok, flat[:-j], flat.new_zeros(()))
        acc = acc + torch.cat([flat.new_zeros(j, flat.shape[1]), prev], 0)
    out = (acc * scale.to(flat.dtype)).view(zs.shape)
    return graph.from_sequences(out)


class TMGCN(DecomposedModule):
    r"""TM-GCN: `"Dynamic Graph Convolutional Networks Using the Tensor
    M-Product" <https://arxiv.org/abs/1910.07643>`_ (Malik et al. 2021), the
    GCN over the tensor M-product that the SC'21 scaling paper trains
    (``notes-000-ibm-scaling.md`` §1.5). Every layer mixes each vertex's
    features over the last ``band`` snapshots with the banded lower-triangular
    :math:`M` (:func:`m_transform`), then runs a GCN on every snapshot:

    .. math::
        H^{(l+1)}_t = \sigma_l\big(\hat{A}_t\, (M \times_1 \mathcal{H}^{(l)})_t\, W_l + b_l\big),
        \qquad \mathcal{H}^{(0)} = \mathcal{X},

    :math:`\hat{A}_t = \hat{D}^{-1/2}(A_t + I)\hat{D}^{-1/2}` (PyG's
    ``GCNConv`` normalization of snapshot :math:`t`), :math:`\sigma_l` ReLU
    between layers and none after the last. ``band=1`` is a plain GCN per
    snapshot. :math:`M` has no parameters; the paper's smoothing of the
    adjacency tensor :math:`\mathcal{A} \times_1 M` (a preprocessing of the
    graph, SC'21 §5.4) is not applied here (not built).

    Decomposition (``num_layers + 1`` blocks): block 0 has no structure
    encoder and applies :math:`M` to the input; block :math:`l = 1 ..
    L-1` runs GCN :math:`l-1` (with ReLU) and then the next layer's
    :math:`M`; block :math:`L` runs the last GCN and nothing over time. The
    time encoders are banded windows (``time_kind="window"``): node
    :math:`(i,t)` reads the rows of :math:`(i,t')` for :math:`t-b < t' \le t`
    only, which the distributed runtime exchanges (:meth:`dependency_pattern`).

    Args:
        in_channels (int): input features :math:`F`.
        out_channels (int): output width.
        band (int): :math:`b \ge 1`, snapshots each :math:`M` averages over
            (SC'21's :math:`w`; its value is not reported there).
        num_layers (int): GCN layers :math:`L \ge 1`.
        hidden_channels (int, optional): width of the layers between
            (default ``out_channels``).
        improved (bool): ``GCNConv``'s ``improved`` (self loops of weight 2).
        add_self_loops (bool): ``GCNConv``'s ``add_self_loops``.
        bias (bool): learn :math:`b_l`.

    Shapes:
        - **forward_fused** input: a :class:`FusedGraph` of :math:`N`
          vertex-time nodes with features :math:`(N, F)`; output
          :math:`(N, \text{out\_channels})`.
    """

    time_kind = "window"

    def __init__(self, in_channels: int, out_channels: int, band: int = 3, num_layers: int = 1,
                 hidden_channels: Optional[int] = None, improved: bool = False, add_self_loops: bool = True,
                 bias: bool = True) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("out_channels", out_channels), ("num_layers", num_layers),
                        ("hidden_channels", 1 if hidden_channels is None else hidden_channels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ModelInputError(name, f"is {v!r}.", "give an int >= 1.")
        self.band = _check_band(band)
        self.in_channels, self.out_channels, self.num_layers = in_channels, out_channels, num_layers
        self.hidden_channels = out_channels if hidden_channels is None else hidden_channels
        self.state_width = 0
        widths = [in_channels] + [self.hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(
            GCNConv(widths[l], widths[l + 1], improved=improved, add_self_loops=add_self_loops, bias=bias)
            for l in range(num_layers))

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()

    @property
    def num_blocks(self) -> int:
        return self.num_layers + 1

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        r"""Block 0: the input itself; block :math:`l \ge 1`: GCN :math:`l-1`
        on all snapshots at once (ReLU unless it is the last)."""
        x = graph.x if x is None else x
        if block == 0:
            return x
        conv = self.convs[block - 1]
        adj = gcn_adjacency(graph, conv.improved, conv.add_self_loops, x.dtype)
        x = halo_exchange(halo, block, 0, x)
        w = conv.lin.weight
        # propagate the narrower side: A(XW) == (AX)W exactly in exact arithmetic
        out = F.linear(propagate(x, adj), w) if x.shape[-1] <= w.shape[0] else propagate(F.linear(x, w), adj)
        if conv.bias is not None:
            out = out + conv.bias
        return F.relu(out) if block < self.num_layers else out

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        """Blocks ``0 .. L-1``: the M-transform of the next layer; block ``L``: nothing."""
        return m_transform(z, graph, self.band) if block < self.num_layers else z

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        if h0 is not None:
            raise ModelInputError("h0", "was given, but TM-GCN has no recurrent state.", "pass h0=None.")
        return super().forward_fused(graph, None, x)

    def forward(self, graph: FusedGraph) -> Tensor:
        return self.forward_fused(graph)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        from ..partition.pattern import BlockPattern, DependencyPattern

        widths = [self.in_channels] + [self.hidden_channels] * (self.num_layers - 1) + [self.out_channels]
        blocks = [BlockPattern((), "window", widths[0], widths[0], self.band)]
        blocks += [BlockPattern((widths[l - 1],), "window", widths[l], widths[l], self.band)
                   for l in range(1, self.num_layers)]
        blocks.append(BlockPattern((widths[-2],), "none", 0, widths[-1]))
        return DependencyPattern(tuple(blocks), bytes_per_element=bytes_per_element, name="tmgcn")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.in_channels}, {self.out_channels}, band={self.band}, "
                f"num_layers={self.num_layers})")
