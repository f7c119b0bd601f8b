r"""T-GCN (Zhao et al. 2019) as PyGT implements it, decomposed for the fused path."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GCNConv

from ..errors import DecompositionMismatchError
from .decomposed import DecomposedModule, FusedGraph, Halo, check_initial_state, gcn_adjacency, halo_exchange, propagate

__all__ = ["TGCN", "tgcn_structure", "tgcn_input_projection", "tgcn_cell", "tgcn_scan", "tgcn_time", "tgcn_fused"]

GATES = ("z", "r", "h")


# ----------------------------------------------------------------- shared math
# These functions take any object with PyGT's attribute names (conv_z, linear_z,
# ...), so the same code runs pyg_dynscale's TGCN and a user's PyGT TGCN/TGCN2/A3TGCN
# (adapters) while sharing that object's parameter tensors.


def _gcn_flags(module: Any) -> tuple[bool, bool]:
    convs = [getattr(module, f"conv_{g}") for g in GATES]
    flags = {(bool(c.improved), bool(c.add_self_loops), bool(c.normalize)) for c in convs}
    if len(flags) != 1 or not next(iter(flags))[2]:
        raise DecompositionMismatchError(
            f"{type(module).__name__}: the three gate GCNConvs must share improved/add_self_loops and use "
            "normalize=True for the fused path (they are built that way by TGCN's constructor)."
        )
    improved, loops, _ = next(iter(flags))
    return improved, loops


def tgcn_structure(module: Any, graph: FusedGraph, x: Tensor, deep: Optional[Sequence[Sequence[GCNConv]]] = None,
                   halo: Optional[Halo] = None, block: int = 0) -> Tensor:
    r"""Structure encoder of T-GCN: the three gate convolutions of every node.

    .. math::
        \mathbf{c}^{(g)} = \hat{A}\, X W_g + \mathbf{b}_g, \qquad g \in \{z, r, h\},

    computed for all snapshots at once on the block-diagonal graph, with
    :math:`\hat{A}X` propagated once and shared by the three gates. ``x`` may
    carry extra leading feature axes (``[N, P, F]`` for A3TGCN's periods).
    With deeper GCNs (``deep``), layer :math:`k` aggregates
    :math:`\mathrm{ReLU}(\mathbf{c})` of all three gates (``3H`` per row).
    ``halo`` sees ``x`` before layer 0 and the ``3H`` rows before each deeper
    layer (:class:`~pyg_dynscale.nn.decomposed.Halo`).

    Returns:
        ``[N, ..., 3 * out_channels]`` (gates ``z, r, h`` concatenated).
    """
    improved, loops = _gcn_flags(module)
    adj = gcn_adjacency(graph, improved, loops, x.dtype)
    x = halo_exchange(halo, block, 0, x)
    convs = [getattr(module, f"conv_{g}") for g in GATES]
    weight = torch.cat([c.lin.weight for c in convs], 0)  # [3H, F]
    bias = torch.cat([c.bias for c in convs], 0) if convs[0].bias is not None else None
    # propagate the narrower side: A(XW) == (AX)W exactly in exact arithmetic
    if x.shape[-1] <= weight.shape[0]:
        c = F.linear(propagate(x, adj), weight, bias)
    else:
        c = propagate(F.linear(x, weight), adj)
        if bias is not None:
            c = c + bias
    if deep:
        H = weight.shape[0] // 3
        for k, layer in enumerate(zip(*deep)):  # one GCNConv per gate at this depth
            w = torch.stack([conv.lin.weight for conv in layer])  # [3, H, H]
            h = propagate(halo_exchange(halo, block, k + 1, F.relu(c)), adj).unflatten(-1, (3, H))
            c = torch.einsum("...gk,gjk->...gj", h, w)
            if layer[0].bias is not None:
                c = c + torch.stack([conv.bias for conv in layer])
            c = c.flatten(-2)
    return c


def tgcn_input_projection(module: Any, c: Tensor) -> Tensor:
    r"""The input halves of the gate linears, for all nodes at once:
    :math:`\mathbf{u}^{(g)} = \mathbf{c}^{(g)} L_g[:, :H]^\top + \mathbf{b}^{L}_g`
    (one GEMM per gate on a column block of ``c``)."""
    H = c.shape[-1] // 3
    lin = [getattr(module, f"linear_{g}") for g in GATES]
    return torch.cat([F.linear(c[..., i * H:(i + 1) * H], l.weight[:, :H], l.bias) for i, l in enumerate(lin)], -1)


def _recurrent_weights(module: Any) -> tuple[Tensor, Tensor]:
    """``W_zr [2H, H]`` and ``W_h [H, H]``: the state halves of the gate linears."""
    H = module.linear_z.weight.shape[0]
    w_zr = torch.cat([module.linear_z.weight[:, H:], module.linear_r.weight[:, H:]], 0)
    return w_zr, module.linear_h.weight[:, H:]


def tgcn_cell(module: Any) -> Callable[[Tensor, Tensor], Tensor]:
    r"""The recurrent step of T-GCN on precomputed input projections:

    .. math::
        Z &= \sigma(\mathbf{u}^{(z)} + H L_z[:, H:]^\top), \quad
        R = \sigma(\mathbf{u}^{(r)} + H L_r[:, H:]^\top), \\
        \tilde{H} &= \tanh(\mathbf{u}^{(h)} + (H \odot R) L_h[:, H:]^\top), \quad
        H' = Z \odot H + (1 - Z) \odot \tilde{H}.

    The returned cell maps ``(u [R, 3H], h [R, H]) -> h' [R, H]``; ``u`` may
    have a period axis ``[R, P, 3H]`` (then ``h'`` is ``[R, P, H]``).
    """
    H = module.linear_z.weight.shape[0]
    w_zr, w_h = _recurrent_weights(module)

    def cell(u: Tensor, h: Tensor) -> Tensor:
        hz = F.linear(h, w_zr)
        if u.dim() == 3:
            hz = hz.unsqueeze(1)
            h = h.unsqueeze(1)
        zr = torch.sigmoid(u[..., : 2 * H] + hz)
        z, r = zr[..., :H], zr[..., H:]
        h_tilde = torch.tanh(u[..., 2 * H:] + F.linear(h * r, w_h))
        return z * h + (1 - z) * h_tilde

    return cell


def tgcn_scan(
    module: Any, x_tm: Tensor, graph: FusedGraph, h0: Optional[Tensor],
    w_in: Optional[Tensor] = None, b_in: Optional[Tensor] = None,
) -> Tensor:
    r"""The T-GCN recurrence of every sequence at once on input projections
    :math:`u = x W_{in}^\top + b_{in}` (``u = x_tm`` when ``w_in`` is
    ``None``), ``x_tm [N, D]`` in the packing's time-major order
    (:meth:`FusedGraph.to_time_major`), with a hand-written BPTT
    (:class:`~pyg_dynscale.nn._fused_rnn.FusedTGCNScan`): a few GEMMs and
    element-wise kernels per step instead of ~25 autograd nodes. Returns
    ``[N, H]`` in the same time-major order."""
    from ._fused_rnn import FusedTGCNScan
    from .temporal_fusion import reset_schedule

    H = module.linear_z.weight.shape[0]
    if h0 is None:
        h0 = x_tm.new_zeros(graph.num_sequences, H)
    if graph.num_nodes == 0:
        return x_tm.new_zeros(0, H)
    w_zr, w_h = _recurrent_weights(module)
    packing = graph.packing
    return FusedTGCNScan.apply(x_tm.contiguous(), w_in, b_in, h0, w_zr, w_h, packing, reset_schedule(packing))


def tgcn_time(module: Any, c: Tensor, graph: FusedGraph, h0: Optional[Tensor], periods_weight: Optional[Tensor] = None) -> Tensor:
    r"""Time encoder of T-GCN: the gated recurrence along every vertex's
    sequence (masked temporal fusion). With ``periods_weight`` ``[P]`` (A3TGCN)
    the step is :math:`H' = \sum_p a_p\, \mathrm{cell}(\mathbf{u}_p, H)`."""
    from .temporal_fusion import masked_recurrent_scan

    H = module.linear_z.weight.shape[0]
    check_initial_state(h0, graph, H)
    u = tgcn_input_projection(module, c)
    if periods_weight is None:
        return graph.from_time_major(tgcn_scan(module, graph.to_time_major(u), graph, h0))
    if h0 is None:
        h0 = u.new_zeros(graph.num_sequences, H)
    base = tgcn_cell(module)
    P = u.shape[1]
    u_flat = u.reshape(u.shape[0], P * 3 * H)

    def cell(ut: Tensor, h: Tensor) -> Tensor:
        hp = base(ut.view(ut.shape[0], P, 3 * H), h)  # [R, P, H]
        return torch.einsum("rph,p->rh", hp, periods_weight)

    hs = masked_recurrent_scan(cell, graph.to_sequences(u_flat), graph.packing, h0)
    return graph.from_sequences(hs)


def tgcn_fused(module: Any, graph: FusedGraph, x: Tensor, h0: Optional[Tensor], halo: Optional[Halo] = None) -> Tensor:
    r"""The whole one-layer T-GCN over a fused graph (structure encoder, input
    projection and recurrence), with the input projection folded into the
    GCN weights:

    .. math::
        \mathbf{u}^{(g)} = (\hat{A}XW_g^\top + \mathbf{b}_g) L_g[:, :H]^\top + \mathbf{b}^L_g
        = \hat{A}X\,(L_g[:, :H] W_g)^\top + (L_g[:, :H]\mathbf{b}_g + \mathbf{b}^L_g),

    the same function as :func:`tgcn_structure` then :func:`tgcn_time` (up to
    float rounding) with one ``[F, 3H]`` weight instead of two products; the
    narrow ``[N, F]`` side :math:`\hat{A}X` is permuted to the scan's
    time-major order and projected per step inside the scan (:func:`tgcn_scan`).
    ``x`` is ``[N, F]``; returns ``[N, H]`` in node order. ``halo`` sees ``x``
    before its aggregation (the distributed runtime runs the unfolded
    encoders instead, because its recurrence runs in rounds on other node sets).
    """
    H = module.linear_z.weight.shape[0]
    check_initial_state(h0, graph, H)
    improved, loops = _gcn_flags(module)
    adj = gcn_adjacency(graph, improved, loops, x.dtype)
    x = halo_exchange(halo, 0, 0, x)
    ws, bs = [], []
    for g in GATES:
        conv, lin = getattr(module, f"conv_{g}"), getattr(module, f"linear_{g}")
        l_in = lin.weight[:, :H]
        ws.append(l_in @ conv.lin.weight)  # [H, F]
        b = F.linear(conv.bias, l_in) if conv.bias is not None else None
        if lin.bias is not None:
            b = lin.bias if b is None else b + lin.bias
        bs.append(b if b is not None else l_in.new_zeros(H))
    w, b = torch.cat(ws, 0), torch.cat(bs, 0)
    if x.shape[-1] <= w.shape[0]:  # propagate the narrower side (A(XW) == (AX)W exactly)
        # the projection runs inside the scan, per step (no [N, 3H] buffer)
        hs = tgcn_scan(module, graph.to_time_major(propagate(x, adj)), graph, h0, w, b)
    else:
        hs = tgcn_scan(module, graph.to_time_major(propagate(F.linear(x, w), adj)) + b, graph, h0)
    return graph.from_time_major(hs)


# ------------------------------------------------------------------ the layer
class TGCN(DecomposedModule):
    r"""The T-GCN cell of `"T-GCN: A Temporal Graph Convolutional Network for
    Traffic Prediction" <https://arxiv.org/abs/1811.05320>`_, a drop-in for
    :class:`torch_geometric_temporal.nn.recurrent.TGCN` (same constructor,
    parameter names and shapes, so ``load_state_dict`` works both ways, and
    the same outputs):

    .. math::
        Z &= \sigma\big(L_z [\,\mathrm{GCN}_z(X, A) \,\|\, H\,]\big), \quad
        R = \sigma\big(L_r [\,\mathrm{GCN}_r(X, A) \,\|\, H\,]\big), \\
        \tilde{H} &= \tanh\big(L_h [\,\mathrm{GCN}_h(X, A) \,\|\, H \odot R\,]\big), \quad
        H' = Z \odot H + (1 - Z) \odot \tilde{H}.

    The GCNs only see :math:`X`, so the layer decomposes into a structure
    encoder (the three GCNs, per snapshot) and a time encoder (the gated
    recurrence, per vertex sequence): :meth:`forward_fused` runs a whole
    signal at once. ``num_layers > 1`` gives DGC's T-GCN variant with deeper
    GCNs (:math:`\mathrm{GCN}_g` = ``num_layers`` GCNConv layers with ReLU
    in between); the extra layers are ``conv_{z,r,h}_deep``.

    Args:
        in_channels (int): input features :math:`F`.
        out_channels (int): hidden size :math:`H`.
        improved (bool): GCNConv's ``improved`` (self loops of weight 2).
        cached (bool): GCNConv's ``cached``; keep ``False`` for dynamic graphs.
        add_self_loops (bool): GCNConv's ``add_self_loops``.
        num_layers (int): GCN layers per gate (1 = PyGT's T-GCN).

    Shapes:
        - **forward** input: ``X`` :math:`(|V_t|, F)`, ``edge_index``
          :math:`(2, |E_t|)`, ``edge_weight`` :math:`(|E_t|)` optional,
          ``H`` :math:`(|V_t|, H)` optional (zeros).
        - **forward** output: :math:`(|V_t|, H)`.
        - **forward_fused** output: :math:`(N, H)` for all vertex-time nodes.
    """

    time_kind = "recurrent"

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: bool = True,
        num_layers: int = 1,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.improved = improved
        self.cached = cached
        self.add_self_loops = add_self_loops
        self.num_layers = num_layers
        self.state_width = out_channels
        kw = dict(improved=improved, cached=cached, add_self_loops=add_self_loops)
        for g in GATES:
            setattr(self, f"conv_{g}", GCNConv(in_channels, out_channels, **kw))
            setattr(self, f"linear_{g}", torch.nn.Linear(2 * out_channels, out_channels))
            if num_layers > 1:
                setattr(
                    self,
                    f"conv_{g}_deep",
                    torch.nn.ModuleList(GCNConv(out_channels, out_channels, **kw) for _ in range(num_layers - 1)),
                )

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()

    def reuse_impl(self) -> Optional[type]:
        """ReInc's reuse in windowed training (:func:`~pyg_dynscale.nn.reuse.reuse_for`):
        one GCN layer per gate and ``cached=False`` only (``None``: called as it is)."""
        if self.num_layers != 1 or self.cached:
            return None
        from .reinc_reuse import TGCNLocalReuse

        return TGCNLocalReuse

    def _deep(self) -> Optional[list]:
        if self.num_layers == 1:
            return None
        return [getattr(self, f"conv_{g}_deep") for g in GATES]

    def _gcn(self, g: str, X: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
        out = getattr(self, f"conv_{g}")(X, edge_index, edge_weight)
        for conv in getattr(self, f"conv_{g}_deep", []):
            out = conv(F.relu(out), edge_index, edge_weight)
        return out

    def forward(
        self, X: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None, H: Optional[Tensor] = None
    ) -> Tensor:
        """One snapshot, exactly as PyGT's ``TGCN.forward``."""
        if H is None:
            H = torch.zeros(X.shape[0], self.out_channels, device=X.device, dtype=X.dtype)
        Z = torch.sigmoid(self.linear_z(torch.cat([self._gcn("z", X, edge_index, edge_weight), H], 1)))
        R = torch.sigmoid(self.linear_r(torch.cat([self._gcn("r", X, edge_index, edge_weight), H], 1)))
        H_tilde = torch.tanh(self.linear_h(torch.cat([self._gcn("h", X, edge_index, edge_weight), H * R], 1)))
        return Z * H + (1 - Z) * H_tilde

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        """As :meth:`DecomposedModule.forward_fused`; one-layer T-GCN runs
        :func:`tgcn_fused` (input projection folded into the GCN weights)."""
        x = graph.x if x is None else x
        if self.num_layers == 1 and x.dim() == 2:
            return tgcn_fused(self, graph, x, h0)
        return super().forward_fused(graph, h0, x)

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        """``[N, 3H]``: the gate GCNs of all snapshots in one pass."""
        return tgcn_structure(self, graph, graph.x if x is None else x, self._deep(), halo, block)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        """``[N, H]``: the gated recurrence along all vertex sequences at once."""
        return tgcn_time(self, z, graph, h0)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        from ..partition.pattern import BlockPattern, DependencyPattern

        H = self.out_channels
        widths = (self.in_channels,) + (3 * H,) * (self.num_layers - 1)
        return DependencyPattern(
            (BlockPattern(widths, "recurrent", H, 3 * H),), bytes_per_element=bytes_per_element, name="tgcn"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.out_channels}, num_layers={self.num_layers})"
