r"""The decomposition interface of the fast (DGC) path.

A *decomposed* dynamic-GNN layer computes, for every vertex-time node
:math:`(i, t)`,

.. math::
    \mathbf{z}_{i,t} = \mathrm{SE}\big(G_t, X_t\big)_i, \qquad
    \mathbf{h}_{i,t} = \mathrm{TE}\big(\mathbf{z}_{i,t},
        \{\mathbf{h}_{i,t'} \text{ or } \mathbf{z}_{i,t'} : t' < t,\ i \in V_{t'}\}\big),

a *structure encoder* SE that only looks at snapshot :math:`t` (so all
snapshots can be encoded in one pass over the block-diagonal graph
:math:`\mathrm{diag}(G_1, \ldots, G_T)`: DGC's spatial fusion) followed by a
*time encoder* TE along each vertex's temporal sequence (so all sequences can
be encoded at once, concatenated with state resets: DGC's temporal fusion,
§5.1.2). The same two pieces run on one device here
(:class:`~pyg_dynscale.runtime.FusedTrainer`) and on partitions in the
distributed runtime.

:class:`FusedGraph` is the fused input: a whole :class:`DynamicGraphSignal`
(or a window of it) as one graph on vertex-time node ids plus its packed
temporal sequences. :class:`DecomposedModule` is the base class of layers and
adapters that declare such a decomposition.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import Tensor

from ..data.tensor_maps import map_tensors
from ..errors import ModelInputError

__all__ = ["FusedGraph", "DecomposedModule", "Halo", "halo_exchange", "gcn_adjacency", "propagate", "check_initial_state"]


class Halo:
    r"""The hook structure encoders call at every spatial aggregation and
    every node-set reduction; the distributed runtime passes a subclass that
    moves rows between ranks. ``halo=None`` (single process) behaves like
    this base class: nothing moves.

    * :meth:`exchange` is called with the input ``x`` ``[N_local, ...]`` of
      spatial layer ``layer`` of block ``block`` right before it is
      aggregated; it returns ``x`` with the rows of in-neighbours owned by
      other ranks (the *halo*) filled in.
    * :attr:`owned` (``None`` = every row) are the local rows whose statistics
      count in node-set reductions (BatchNorm); :meth:`all_reduce` sums a
      tensor over ranks (differentiably).
    """

    owned: Optional[Tensor] = None
    #: ``([T] rows per segment over all ranks, non-empty segments as a host
    #: list)`` of the graph the encoder runs on, when known in advance (then
    #: node-set reductions read nothing back); ``None``: counted at each call
    segment_counts: Optional[tuple[Tensor, list]] = None

    def exchange(self, block: int, layer: int, x: Tensor) -> Tensor:
        return x

    def all_reduce(self, x: Tensor) -> Tensor:
        return x


def halo_exchange(halo: Optional[Halo], block: int, layer: int, x: Tensor) -> Tensor:
    """``halo.exchange(block, layer, x)``, or ``x`` when there is no halo."""
    return x if halo is None else halo.exchange(block, layer, x)


def _fusion():
    # The masked temporal encoders live in their own module (temporal fusion).
    from . import temporal_fusion

    return temporal_fusion


@dataclass
class FusedGraph:
    r"""All snapshots of a signal as one block-diagonal graph on vertex-time nodes.

    Node ``n`` is vertex-time node ``n`` of the signal (time-major,
    :math:`\mathrm{gid}(i,t) = \mathrm{offset}[t] + \mathrm{row}`), so a
    structure encoder applied to :attr:`x` over :attr:`edge_index` computes
    every snapshot at once and exactly as it would per snapshot.

    The structure is the signal's (or a rank's local)
    :class:`~pyg_dynscale.data.supergraph.Supergraph`, read through the
    properties below rather than copied.

    Attributes:
        x (Tensor): ``[N, ...]`` node features.
        edge_weight (Tensor, optional): ``[E]`` weights of the spatial edges.
        supergraph (Supergraph): the vertex-time nodes, spatial edges and
            sequences; :attr:`edge_index` (``[2, E]`` spatial edges),
            :attr:`node_ptr` (``[T+1]`` snapshot offsets, one PyGT call each),
            :attr:`time`, :attr:`vertex` (``[N]``), :attr:`sequence_order`
            (``[N]`` node ids grouped by vertex, time order inside),
            :attr:`sequence_ptr` (``[S+1]``), :attr:`sequence_vertex` (``[S]``)
            and :attr:`num_vertices` are its fields.
    """

    x: Optional[Tensor]
    edge_weight: Optional[Tensor]
    supergraph: Any
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_signal(cls, signal: Any, x: Optional[Tensor] = None) -> "FusedGraph":
        """Build from a :class:`~pyg_dynscale.data.DynamicGraphSignal` (uses its
        cached :meth:`supergraph`)."""
        return cls(x=signal.x if x is None else x, edge_weight=signal.edge_weight, supergraph=signal.supergraph())

    @property
    def edge_index(self) -> Tensor:
        return self.supergraph.spatial_edge_index

    @property
    def node_ptr(self) -> Tensor:
        return self.supergraph.node_ptr

    @property
    def time(self) -> Tensor:
        return self.supergraph.time

    @property
    def vertex(self) -> Tensor:
        return self.supergraph.vertex

    @property
    def sequence_order(self) -> Tensor:
        return self.supergraph.sequence_order

    @property
    def sequence_ptr(self) -> Tensor:
        return self.supergraph.sequence_ptr

    @property
    def sequence_vertex(self) -> Tensor:
        return self.supergraph.sequence_vertex

    @property
    def num_vertices(self) -> int:
        return self.supergraph.num_vertices

    @property
    def num_nodes(self) -> int:
        return self.time.numel()

    @property
    def num_snapshots(self) -> int:
        return self.node_ptr.numel() - 1

    @property
    def num_sequences(self) -> int:
        return self.sequence_ptr.numel() - 1

    @property
    def device(self) -> torch.device:
        return self.node_ptr.device

    # the graph this one was mapped from (:meth:`apply_tensors`) and the map; not dataclass fields
    _source = None
    _source_map = None

    def apply_tensors(self, fn: Any) -> "FusedGraph":
        """A copy with ``fn`` applied to every tensor, e.g. moved to the
        training device once (:func:`~pyg_dynscale.data.tensor_maps.to_device`).

        What needs host round trips to build -- the sequence packing with its
        step lists and reset schedule, the time-major permutation, the
        sequence positions -- is computed here first and mapped with it; GCN
        normalizations are computed here on demand (a rank's local graph
        slices the global one) and mapped, so the copy's hot loop never reads
        a device tensor back to the host.
        """
        packing = self.packing
        packing.active_list
        _fusion().reset_schedule(packing)
        perm = self._time_major_perm()
        g = FusedGraph(x=None if self.x is None else fn(self.x),
                       edge_weight=None if self.edge_weight is None else fn(self.edge_weight),
                       supergraph=map_tensors(self.supergraph, fn))
        g._cache["packing"] = packing.apply_tensors(fn)
        g._cache["tm_perm"] = None if perm is None else (fn(perm[0]), fn(perm[1]))
        g._cache["seqpos"] = fn(self.sequence_position)
        g._source, g._source_map = self, fn
        return g

    @property
    def packing(self) -> Any:
        """The reusable :func:`~pyg_dynscale.nn.temporal_fusion.pack_sequences`
        of the temporal sequences (computed once)."""
        if "packing" not in self._cache:
            self._cache["packing"] = _fusion().pack_sequences(self.sequence_ptr)
        return self._cache["packing"]

    @property
    def sequence_position(self) -> Tensor:
        """``[N]`` position of each node inside its vertex's sequence (0 = first
        appearance), in node order."""
        if "seqpos" not in self._cache:
            S, N = self.num_sequences, self.num_nodes
            lengths = self.sequence_ptr[1:] - self.sequence_ptr[:-1]
            start = torch.repeat_interleave(self.sequence_ptr[:-1], lengths, output_size=N)
            pos_in_seq_order = torch.arange(N, device=self.device) - start
            pos = torch.empty_like(pos_in_seq_order)
            pos[self.sequence_order] = pos_in_seq_order
            self._cache["seqpos"] = pos
        return self._cache["seqpos"]

    def to_sequences(self, z: Tensor) -> Tensor:
        """Rows of ``z`` (node order) in sequence order."""
        return z.index_select(0, self.sequence_order)

    def from_sequences(self, h: Tensor) -> Tensor:
        """Inverse of :meth:`to_sequences`: sequence order back to node order."""
        out = torch.empty_like(h)
        return out.index_copy(0, self.sequence_order, h)

    def _time_major_perm(self) -> Optional[tuple[Tensor, Tensor]]:
        """``(perm, inv)``: node id of each row of :attr:`packing`'s time-major
        layout and its inverse, composed once (node order -> sequence order ->
        time-major); ``None`` when it is the identity (e.g. a fixed vertex set
        whose snapshots list the vertices in sequence order)."""
        if "tm_perm" not in self._cache:
            perm = self.sequence_order.index_select(0, self.packing.time_major.to(self.sequence_order.device))
            if bool((perm == torch.arange(perm.numel(), device=perm.device)).all()):
                self._cache["tm_perm"] = None
            else:
                inv = torch.empty_like(perm)
                inv[perm] = torch.arange(perm.numel(), device=perm.device)
                self._cache["tm_perm"] = (perm, inv)
        return self._cache["tm_perm"]

    def to_time_major(self, z: Tensor) -> Tensor:
        """Rows of ``z`` (node order) in the time-major order of :attr:`packing`
        (what the fused recurrent scans consume); one permutation, skipped
        when it is the identity."""
        p = self._time_major_perm()
        return z if p is None else _Permute.apply(z, p[0], p[1])

    def from_time_major(self, h: Tensor) -> Tensor:
        """Inverse of :meth:`to_time_major`."""
        p = self._time_major_perm()
        return h if p is None else _Permute.apply(h, p[1], p[0])

    def segment_ids(self) -> Tensor:
        """``[N]`` snapshot of each node (alias of :attr:`time`)."""
        return self.time

    def gcn_norm(self, improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        r"""``(edge_index, edge_weight)`` of :math:`\hat{D}^{-1/2}\hat{A}\hat{D}^{-1/2}`
        sorted by target (PyG's ``gcn_norm`` on this graph). A rank's local
        graph overrides it with the slice of the *global* normalization."""
        if self._source is not None:  # a mapped copy: normalize where the structure was built, then map
            ei, ew = gcn_adjacency(self._source, improved, add_self_loops, dtype)
            return self._source_map(ei), self._source_map(ew)
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        w = self.edge_weight
        if w is not None:
            w = w.to(dtype)
        ei, ew = gcn_norm(self.edge_index, w, self.num_nodes, improved, add_self_loops, "source_to_target", dtype)
        # sort by target once so that index_add_ writes are cache friendly
        perm = torch.argsort(ei[1], stable=True)
        return ei[:, perm].contiguous(), ew[perm].contiguous()

    def loop_edge_index(self) -> Tensor:
        """``[2, E' + N]`` the spatial edges without self loops, then one self
        loop per node (what PyG's ``GATConv`` builds at every call), computed
        once -- on the host for a mapped copy -- so a forward reads nothing back."""
        if "loops" not in self._cache:
            if self._source is not None:
                self._cache["loops"] = self._source_map(self._source.loop_edge_index())
            else:
                from torch_geometric.utils import add_self_loops, remove_self_loops

                ei, _ = remove_self_loops(self.edge_index)
                self._cache["loops"] = add_self_loops(ei, num_nodes=self.num_nodes)[0]
        return self._cache["loops"]

    def segment_counts(self) -> tuple[Tensor, list[int]]:
        """``([T] nodes per snapshot, the non-empty snapshots as a host list)``,
        computed once (on the host for a mapped copy)."""
        if "segcounts" not in self._cache:
            if self._source is not None:
                counts, nonempty = self._source.segment_counts()
                self._cache["segcounts"] = (self._source_map(counts), nonempty)
            else:
                counts = self.node_ptr[1:] - self.node_ptr[:-1]
                self._cache["segcounts"] = (counts, (counts > 0).nonzero().flatten().tolist())
        return self._cache["segcounts"]

    def last_index(self) -> Tensor:
        """``[S]`` node id of the last element of every sequence (sequences
        are non-empty)."""
        return self.sequence_order.index_select(0, self.sequence_ptr[1:] - 1)


class _Permute(torch.autograd.Function):
    """``x[perm]`` for a permutation ``perm`` with inverse ``inv``: the backward
    is a gather ``g[inv]`` instead of ``index_select``'s scatter-add."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, perm: Tensor, inv: Tensor) -> Tensor:  # type: ignore[override]
        ctx.inv = inv
        return x.index_select(0, perm)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple:  # type: ignore[override]
        return g.index_select(0, ctx.inv), None, None


def gcn_adjacency(
    graph: FusedGraph, improved: bool = False, add_self_loops: bool = True, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor]:
    r"""GCN-normalized adjacency :math:`\hat{D}^{-1/2}\hat{A}\hat{D}^{-1/2}` of the
    block-diagonal graph as ``(edge_index, edge_weight)``, computed once per
    ``(improved, add_self_loops, dtype)`` and cached on ``graph``.

    The graph is block-diagonal, so degrees and self loops are those of each
    snapshot: the result equals per-snapshot ``gcn_norm`` concatenated.
    """
    key = ("gcn", improved, add_self_loops, dtype)
    if key not in graph._cache:
        if graph._source is not None:  # a mapped copy: normalized (and its CSR built) where the structure was built
            host = gcn_adjacency(graph._source, improved, add_self_loops, dtype)
            fn = graph._source_map
            adj = _Adjacency(fn(host[0]), fn(host[1]))
            adj._host, adj._map = host, fn
        else:
            ei, ew = graph.gcn_norm(improved, add_self_loops, dtype)
            adj = _Adjacency(ei, ew)
        graph._cache[key] = adj
    return graph._cache[key]


class _SpMM(torch.autograd.Function):
    """``A @ x`` with a CSR ``A``; the backward is ``A^T @ grad`` with a cached
    CSR transpose (much faster on CPU than gather + index_add)."""

    @staticmethod
    def forward(ctx: Any, a: Tensor, at: Tensor, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.at = at
        return torch.sparse.mm(a, x)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple:  # type: ignore[override]
        return None, None, torch.sparse.mm(ctx.at, g.contiguous())


def _map_csr(a: Tensor, fn: Any) -> Tensor:
    return torch.sparse_csr_tensor(fn(a.crow_indices()), fn(a.col_indices()), fn(a.values()), a.shape)


def _csr_pair(adjacency: tuple[Tensor, Tensor], n: int, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    ei, w = adjacency
    key = (dtype, n)
    cache = getattr(adjacency, "_csr", None)
    if not isinstance(adjacency, _Adjacency):
        cache = None
    if cache is not None and key in cache:
        return cache[key]
    host = getattr(adjacency, "_host", None)
    if host is not None:  # build on the host (coalescing reads the indices back) and move once
        ha, hat = _csr_pair(host, n, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            pair = (_map_csr(ha, adjacency._map), _map_csr(hat, adjacency._map))
        adjacency._csr[key] = pair
        return pair
    w = w.to(dtype)
    with warnings.catch_warnings():  # "sparse CSR is beta" / invariant-check notices
        warnings.simplefilter("ignore", UserWarning)
        a = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (n, n), check_invariants=True).coalesce().to_sparse_csr()
        at = torch.sparse_coo_tensor(ei, w, (n, n), check_invariants=True).coalesce().to_sparse_csr()
    if isinstance(adjacency, _Adjacency):
        adjacency._csr[key] = (a, at)
    return a, at


class _Adjacency(tuple):
    """``(edge_index, edge_weight)`` that also caches its CSR forms."""

    def __new__(cls, ei: Tensor, w: Tensor) -> "_Adjacency":
        obj = super().__new__(cls, (ei, w))
        obj._csr = {}
        obj._host, obj._map = None, None  # a mapped copy: its host twin and the map
        return obj


#: devices with sparse CSR x dense products (elsewhere, e.g. MPS, a gather and an index_add)
_CSR_DEVICES = ("cpu", "cuda")


def propagate(x: Tensor, adjacency: tuple[Tensor, Tensor]) -> Tensor:
    r""":math:`\mathbf{x}'_i = \sum_{(j, i) \in E} w_{ji}\,\mathbf{x}_j` (the
    ``add`` aggregation of :class:`~torch_geometric.nn.conv.GCNConv`) for
    ``x`` of shape ``[N, *]``, as a CSR sparse-dense product."""
    shape = x.shape
    x2 = x.flatten(1) if x.dim() > 2 else x
    if x2.dtype not in (torch.float32, torch.float64) or x2.device.type not in _CSR_DEVICES:
        ei, w = adjacency
        msg = x2.index_select(0, ei[0]) * w.to(x2.dtype).unsqueeze(-1)
        return torch.zeros_like(x2).index_add_(0, ei[1], msg).view(shape)
    a, at = _csr_pair(adjacency, shape[0], x2.dtype)
    return _SpMM.apply(a, at, x2.contiguous()).view(shape)


def check_initial_state(h0: Optional[Tensor], graph: FusedGraph, width: int, name: str = "h0") -> None:
    """Raise :class:`ModelInputError` unless ``h0`` is ``None`` or ``[S, width]``
    on the graph's device (one row per temporal sequence)."""
    if h0 is None:
        return
    S = graph.num_sequences
    if not isinstance(h0, Tensor) or h0.dim() != 2 or tuple(h0.shape) != (S, width):
        shape = list(h0.shape) if isinstance(h0, Tensor) else type(h0).__name__
        raise ModelInputError(
            name,
            f"has shape {shape} but the signal has {S} temporal sequences and the state width is {width}.",
            f"pass a [{S}, {width}] tensor (row s = initial state of sequence s, vertex "
            "graph.sequence_vertex[s]) or None for zeros.",
        )
    if h0.device != graph.device:
        raise ModelInputError(
            name, f"is on {h0.device} but the graph is on {graph.device}.", f"move it with {name}.to(device)."
        )


class DecomposedModule(torch.nn.Module):
    r"""Base class of layers with a declared decomposition into a structure
    encoder (per snapshot) and a time encoder (per vertex sequence).

    Subclasses implement :meth:`structure_encoder` and :meth:`time_encoder`;
    :meth:`forward_fused` composes them over a :class:`FusedGraph`.

    Multi-block models (DySAT) run ``structure_encoder(..., block=b)`` then
    ``time_encoder(..., block=b)`` for ``b = 0 .. num_blocks-1``, each block's
    output feeding the next; the distributed runtime does the same, with
    exchanges in between.

    Attributes:
        time_kind (str): ``"recurrent"`` (state of the previous appearance),
            ``"attention"`` (all earlier appearances) or ``"none"`` (no
            dependency across snapshots, e.g. PyGT's MPNN-LSTM whose LSTM runs
            over a window inside one snapshot).
        state_width (int): width of the recurrent state carried along a
            sequence (0 when there is none).
    """

    time_kind: str = "recurrent"
    state_width: int = 0

    @property
    def num_blocks(self) -> int:
        """Number of (structure encoder, time encoder) blocks."""
        return 1

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        """``[N, D]`` per-node structure embeddings of all snapshots at once;
        every spatial aggregation goes through ``halo`` (:class:`Halo`)."""
        raise NotImplementedError

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        """``[N, H]`` outputs from the structure embeddings ``z`` (node order)."""
        raise NotImplementedError

    def time_encoder_with_state(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None,
                                block: int = 0) -> tuple[Tensor, Tensor]:
        """``(outputs [N, H], final state [S, state_width])`` of a recurrent
        time encoder: the state each sequence ends with, which the
        distributed runtime sends on when a sequence continues on another
        rank. The default takes the output at each sequence's last node,
        right for cells whose output is their state (GRU, T-GCN)."""
        out = self.time_encoder(z, graph, h0, block=block)
        return out, out.index_select(0, graph.last_index())

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        r"""Run the layer over every snapshot of ``graph`` at once.

        Args:
            graph: the fused signal.
            h0: ``[S, state_width]`` initial state of each sequence, or ``None``
                (zeros, as PyGT's ``H=None``).
            x: input features (default ``graph.x``), e.g. the previous layer's output.

        Returns:
            ``[N, H]`` outputs in vertex-time node order; row ``n`` equals what
            the per-snapshot loop (state carried from the vertex's previous
            appearance) returns for that node.
        """
        if self.state_width:
            check_initial_state(h0, graph, self.state_width)
        h = x
        for b in range(self.num_blocks):
            z = self.structure_encoder(graph, h, block=b)
            h = self.time_encoder(z, graph, h0 if b == 0 else None, block=b)
        return h

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        """The :class:`~pyg_dynscale.partition.pattern.DependencyPattern` the
        distributed runtime plans communication with."""
        raise NotImplementedError(f"{type(self).__name__} declares no dependency pattern.")
