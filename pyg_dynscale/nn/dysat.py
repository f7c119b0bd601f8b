r"""DySAT (Sankar et al., WSDM 2020), decomposed for the fused path."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import GATConv

from .decomposed import DecomposedModule, FusedGraph, Halo, halo_exchange
from .temporal_fusion import MaskedTemporalAttention

__all__ = ["DySAT", "DySATBlock"]


class DySATBlock(torch.nn.Module):
    r"""One DySAT block: structural attention on each snapshot, then causal
    temporal self-attention along each vertex's sequence.

    .. math::
        \mathbf{z}_{i,t} &= \mathrm{ELU}\Big(\big\Vert_{k=1}^{K_s} \sum_{j \in
            \mathcal{N}_t(i) \cup \{i\}} \alpha^{k}_{ij,t} W^k \mathbf{x}_{j,t}\Big)
            \quad \text{(GAT on } G_t\text{)} \\
        \mathbf{a}_{i,t} &= \mathrm{MHA}\big(\mathbf{z}_{i,t} + \mathbf{p}_t,\
            \{\mathbf{z}_{i,t'} + \mathbf{p}_{t'} : t' \le t,\ i \in V_{t'}\}\big), \quad
        \mathbf{h}_{i,t} = \mathbf{a}_{i,t} + \mathrm{ReLU}(W_f \mathbf{a}_{i,t} + b_f)
            \,[+\, \mathbf{z}_{i,t}]

    with learned position embeddings :math:`\mathbf{p}_t` of the snapshot index.
    """

    def __init__(self, in_channels: int, hidden_channels: int, structural_heads: int, temporal_heads: int,
                 num_time_steps: int, dropout: float, residual: bool) -> None:
        super().__init__()
        if hidden_channels % structural_heads or hidden_channels % temporal_heads:
            raise ValueError("hidden_channels must be divisible by structural_heads and temporal_heads")
        self.gat = GATConv(in_channels, hidden_channels // structural_heads, heads=structural_heads,
                           concat=True, dropout=dropout)
        self.temporal = MaskedTemporalAttention(hidden_channels, temporal_heads, causal=True,
                                                max_positions=num_time_steps, position_embedding=True)
        self.feedforward = torch.nn.Linear(hidden_channels, hidden_channels)
        self.residual = residual
        self.dropout = dropout

    def reset_parameters(self) -> None:
        self.gat.reset_parameters()
        self.temporal.reset_parameters()
        self.feedforward.reset_parameters()

    def structure(self, x: Tensor, edge_index: Tensor, loops_added: bool = False) -> Tensor:
        """GAT on ``edge_index``; ``loops_added``: it already holds one self
        loop per node and no others (:meth:`FusedGraph.loop_edge_index`), so
        the GAT does not rebuild them (which would read the edges back)."""
        if not loops_added or not self.gat.add_self_loops:
            return F.elu(self.gat(x, edge_index))
        self.gat.add_self_loops = False
        try:
            return F.elu(self.gat(x, edge_index))
        finally:
            self.gat.add_self_loops = True

    def time(self, z: Tensor, packing: Any, positions: Tensor, past: Any = None,
             max_position: Optional[int] = None) -> Tensor:
        a = self.temporal(z, packing, past=past, positions=positions, max_position=max_position)
        h = a + F.relu(self.feedforward(a))
        h = F.dropout(h, self.dropout, self.training)
        return h + z if self.residual else h


class DySAT(DecomposedModule):
    r"""DySAT: `"Dynamic Graph Representation Learning via Self-Attention
    Networks" <https://arxiv.org/abs/1812.09430>`_ (Sankar et al. 2020), with a
    link-prediction head.

    ``num_blocks`` :class:`DySATBlock` s (structural GAT per snapshot, then
    causal temporal attention with position embeddings over each vertex's
    sequence). Vertices may appear and disappear: a vertex attends over the
    snapshots it is present in, with the snapshot index as position. Link
    logits are inner products of the final embeddings,
    :math:`s(u, v, t) = \mathbf{h}_{u,t}^\top \mathbf{h}_{v,t}` (train with
    binary cross-entropy, ``FusedTrainer(..., loss="bce_link")``).

    Args:
        in_channels (int): input features.
        hidden_channels (int): embedding size (divisible by both head counts).
        num_time_steps (int): number of snapshot positions (size of the
            position-embedding table, >= the signal's snapshots).
        structural_heads (int): GAT heads.
        temporal_heads (int): temporal attention heads.
        num_blocks (int): stacked blocks.
        dropout (float): dropout of the GAT attention and the block outputs.
        residual (bool): add the structural embedding to the temporal output.

    Shapes:
        - **forward_fused** input: a :class:`FusedGraph` of :math:`N`
          vertex-time nodes; output :math:`(N, \text{hidden})`.
    """

    time_kind = "attention"

    def __init__(self, in_channels: int, hidden_channels: int, num_time_steps: int, structural_heads: int = 4,
                 temporal_heads: int = 4, num_blocks: int = 1, dropout: float = 0.0, residual: bool = True) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.num_time_steps = num_time_steps
        self.blocks = torch.nn.ModuleList(
            DySATBlock(in_channels if b == 0 else hidden_channels, hidden_channels, structural_heads,
                       temporal_heads, num_time_steps, dropout, residual)
            for b in range(num_blocks)
        )

    def reset_parameters(self) -> None:
        for b in self.blocks:
            b.reset_parameters()

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        """Block ``block``'s structural attention on all snapshots at once."""
        x = halo_exchange(halo, block, 0, graph.x if x is None else x)
        return self.blocks[block].structure(x, graph.loop_edge_index(), loops_added=True)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        """Block ``block``'s temporal attention over all sequences at once."""
        pos = graph.to_sequences(graph.time)
        # positions are snapshot indices, below num_snapshots: the range check needs no read-back
        h = self.blocks[block].time(graph.to_sequences(z), graph.packing, pos, max_position=graph.num_snapshots - 1)
        return graph.from_sequences(h)

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        if h0 is not None:
            raise ValueError("DySAT has no recurrent state; pass h0=None")
        if graph.num_snapshots > self.num_time_steps:
            raise ValueError(f"the signal has {graph.num_snapshots} snapshots but num_time_steps={self.num_time_steps}")
        h = graph.x if x is None else x
        for b in range(len(self.blocks)):
            h = self.time_encoder(self.structure_encoder(graph, h, b), graph, block=b)
        return h

    def forward(self, graph: FusedGraph) -> Tensor:
        return self.forward_fused(graph)

    @staticmethod
    def link_logits(h: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        r""":math:`\mathbf{h}_{src}^\top \mathbf{h}_{dst}` for node-id pairs."""
        return (h.index_select(0, src) * h.index_select(0, dst)).sum(-1)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        from ..partition.pattern import BlockPattern, DependencyPattern

        H = self.hidden_channels
        blocks = tuple(
            BlockPattern((self.in_channels if b == 0 else H,), "attention", H, H) for b in range(len(self.blocks))
        )
        return DependencyPattern(blocks, bytes_per_element=bytes_per_element, name="dysat")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.in_channels}, {self.hidden_channels}, num_blocks={len(self.blocks)})"
