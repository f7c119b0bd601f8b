r"""The supergraph view of a dynamic graph on vertex-time nodes (docs/design.md, "Vertex-time nodes")."""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch import Tensor


if TYPE_CHECKING:  # pragma: no cover
    from .signal import DynamicGraphSignal


@dataclass(frozen=True)
class Supergraph:
    r"""The whole dynamic graph as one static graph on vertex-time nodes.

    Node :math:`(i, t)` has id :math:`\mathrm{gid}(i,t) = \mathrm{offset}[t] +
    \mathrm{local\_index}_t(i)` (DGC Eq. 1), so ids are time-major. Two kinds of
    edges connect them:

    * spatial edges :math:`(j, t) \to (i, t)`: the edges of snapshot :math:`t`;
    * temporal edges :math:`(i, t') \to (i, t)` between *consecutive*
      appearances :math:`t' < t` of vertex :math:`i` (DGC's virtual temporal
      edges; a vertex absent in between links its last and next appearance).

    Everything is built with sorts and segment operations; no Python loop runs
    over nodes or edges.

    Attributes:
        node_ptr (Tensor): ``[T+1]`` ``offset[t]``.
        vertex (Tensor): ``[N]`` global vertex id of each vertex-time node.
        time (Tensor): ``[N]`` snapshot index of each vertex-time node.
        spatial_edge_index (Tensor): ``[2, E]`` (source gid, target gid).
        temporal_edge_index (Tensor): ``[2, M]`` (earlier gid, later gid).
        sequence_order (Tensor): ``[N]`` gids grouped by vertex, in time order
            inside each vertex: the temporal sequences back to back.
        sequence_ptr (Tensor): ``[S+1]`` offsets of the ``S`` non-empty sequences
            in ``sequence_order``.
        sequence_vertex (Tensor): ``[S]`` the vertex of each sequence.
        num_vertices (int): size of the global vertex id space.
    """

    node_ptr: Tensor
    vertex: Tensor
    time: Tensor
    spatial_edge_index: Tensor
    temporal_edge_index: Tensor
    sequence_order: Tensor
    sequence_ptr: Tensor
    sequence_vertex: Tensor
    num_vertices: int
    #: weak reference to the signal it was built from (for :meth:`fingerprint`)
    source: Optional[Any] = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        # the weak reference to the source signal does not pickle; a copy elsewhere has no source (fingerprint "")
        state = dict(self.__dict__)
        state["source"] = None
        return state

    def fingerprint(self) -> str:
        """The fingerprint of the signal this supergraph was built from
        (:meth:`DynamicGraphSignal.fingerprint`), so that partitions and plans
        refuse another graph's supergraph of the same size; ``""`` when the
        supergraph was built by hand or its signal is gone."""
        signal = self.source() if self.source is not None else None
        return signal.fingerprint() if signal is not None else ""

    @classmethod
    def from_signal(cls, signal: "DynamicGraphSignal") -> "Supergraph":
        r"""The supergraph of ``signal``. Its spatial edges are per vertex-time
        node by nature (:math:`[2, \sum_t |E_t|]`), also for a static graph,
        whose one edge list is shifted by each snapshot's offset into that
        tensor directly (the signal's concatenated :attr:`edge_index` is not
        built, so no second copy is kept)."""
        node_ptr = signal.node_ptr
        T = signal.num_snapshots
        N = signal.num_vertex_time_nodes
        E = signal.num_edges
        dev = node_ptr.device
        node_counts = node_ptr[1:] - node_ptr[:-1]
        time = torch.repeat_interleave(torch.arange(T, device=dev), node_counts, output_size=N)
        if signal.is_static:
            # a static graph: its one [2, E] list shifted to every snapshot's rows, written straight into the one
            # [2, T E] tensor the supergraph needs (the signal's own expansion is neither built nor kept)
            ei = signal.static_edge_index
            spatial = (ei.unsqueeze(1) + node_ptr[:-1].view(1, T, 1)).reshape(2, E)
        else:
            offset_per_edge = torch.repeat_interleave(node_ptr[:-1], signal.edges_per_snapshot, output_size=E)
            spatial = signal.edge_index + offset_per_edge.unsqueeze(0)
        # gids are time-major, so a stable sort by vertex keeps time order inside
        # each vertex's sequence.
        vertex = signal.node_id
        order = torch.sort(vertex, stable=True).indices
        sv = vertex[order]
        same = sv[1:] == sv[:-1]
        temporal = torch.stack([order[:-1][same], order[1:][same]])
        starts = torch.cat([torch.ones(min(N, 1), dtype=torch.bool, device=dev), ~same])
        seq_start = starts.nonzero().flatten()
        seq_ptr = torch.cat([seq_start, torch.tensor([N], device=dev)])
        return cls(
            node_ptr=node_ptr,
            vertex=vertex,
            time=time,
            spatial_edge_index=spatial,
            temporal_edge_index=temporal,
            sequence_order=order,
            sequence_ptr=seq_ptr,
            sequence_vertex=sv[seq_start],
            num_vertices=signal.num_vertices,
            source=weakref.ref(signal),
        )

    @property
    def num_nodes(self) -> int:
        """Number of vertex-time nodes."""
        return self.vertex.numel()

    @property
    def num_snapshots(self) -> int:
        return self.node_ptr.numel() - 1

    @property
    def num_spatial_edges(self) -> int:
        return self.spatial_edge_index.shape[1]

    @property
    def num_temporal_edges(self) -> int:
        return self.temporal_edge_index.shape[1]

    @property
    def sequence_lengths(self) -> Tensor:
        """``[S]`` number of appearances of each vertex that appears at all."""
        return self.sequence_ptr[1:] - self.sequence_ptr[:-1]

    def gid(self, vertex: Tensor, time: Tensor) -> Tensor:
        """Vertex-time ids of ``(vertex, time)`` pairs; ``-1`` where the vertex
        is absent from that snapshot."""
        vertex = torch.as_tensor(vertex, dtype=torch.long, device=self.vertex.device)
        time = torch.as_tensor(time, dtype=torch.long, device=self.vertex.device)
        T = max(self.num_snapshots, 1)
        keys = self.vertex[self.sequence_order] * T + self.time[self.sequence_order]
        query = vertex * T + time
        pos = torch.searchsorted(keys, query).clamp(max=max(keys.numel() - 1, 0))
        if keys.numel() == 0:
            return torch.full_like(query, -1)
        hit = keys[pos] == query
        return torch.where(hit, self.sequence_order[pos], torch.full_like(query, -1))

    def edge_index(self) -> Tensor:
        """``[2, E + M]`` spatial edges followed by temporal edges."""
        return torch.cat([self.spatial_edge_index, self.temporal_edge_index], dim=1)
