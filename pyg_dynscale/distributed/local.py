r"""One rank's share of a partitioned signal: local graphs and index maps.

Built once per trainer, vectorized, from the global
:class:`~pyg_dynscale.data.Supergraph`, a
:class:`~pyg_dynscale.partition.Partition` (structure owner :math:`o`, time
owner :math:`\tau`) and its :class:`~pyg_dynscale.partition.CommunicationPlan`.
Rank :math:`r` holds

* the **structure set** :math:`S_r = \{v : o(v) = r\} \cup \mathrm{halo}_r`,
  sorted by gid, where :math:`\mathrm{halo}_r` are the rows the plan's spatial
  exchanges bring in; its graph holds every spatial edge whose *target* rank
  :math:`r` owns (so every owned node sees all its in-neighbours), with the GCN
  normalization sliced from the *global* graph (degrees of halo sources are
  global ones);
* the **time set** :math:`Q_r = \{v : \tau(v) = r\}` (:math:`= S_r`'s owned
  rows unless PSS-TS), split into recurrent rounds (pieces of sequences at
  each depth, :func:`~pyg_dynscale.partition.plan.segment_depth`) or merged
  with the attention (or banded window) rows received from other ranks,
  sequences in time order;
* for every exchange, the local rows it sends (``send_idx``, in the order of
  the plan's ``send_list``) and where the received rows go (``recv_idx``).

Local ids are monotone in gid, so neighbour order inside a snapshot and time
order inside a sequence are the global ones.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..data.tensor_maps import TensorMap, map_tensors
from ..data.supergraph import Supergraph
from ..nn.decomposed import FusedGraph

__all__ = ["LocalGraph", "ExchangeMap", "RankLayout", "RankNodes", "GlobalNodes", "RecurrentRound", "AttentionMerge",
           "node_subset_graph"]


def _positions(sorted_gids: Tensor, gids: Tensor) -> Tensor:
    """Positions of ``gids`` (all present) in the sorted ``sorted_gids``."""
    return torch.searchsorted(sorted_gids, gids)


def positions_in(keys: Tensor, query: Tensor) -> Tensor:
    """Positions of ``query`` (all present) in the *unsorted*, duplicate-free ``keys``."""
    if query.numel() == 0:
        return query
    order = torch.argsort(keys)
    return order[torch.searchsorted(keys[order], query)]


def _depth_of(plan: Any, gids: Tensor) -> Tensor:
    """Recurrent round of the nodes ``gids`` of this rank's time set, from a
    whole plan or a rank's slice (both answer ``depth_of``)."""
    fn = getattr(plan, "depth_of", None)
    return fn(gids) if fn is not None else plan.depth[gids]


def halo_keys(owner: Tensor, spatial_edge_index: Tensor, num_nodes: int) -> Tensor:
    r"""``rank * N + gid`` of every halo row: each in-neighbour ``u`` of a node
    owned by another rank, once per receiving rank (the plan's spatial rows)."""
    s, d = spatial_edge_index
    cut = owner[s] != owner[d]
    return torch.unique(owner[d[cut]] * num_nodes + s[cut])


def _sequences(vertex: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(order, ptr, vertex of each sequence) of nodes grouped by vertex; nodes
    are in gid (= time-major) order, so a stable sort keeps time order."""
    n = vertex.numel()
    order = torch.sort(vertex, stable=True).indices
    sv = vertex[order]
    start = torch.ones(n, dtype=torch.bool, device=vertex.device)
    if n:
        start[1:] = sv[1:] != sv[:-1]
    first = start.nonzero().flatten()
    ptr = torch.cat([first, torch.tensor([n], device=vertex.device)])
    return order, ptr, sv[first]


class LocalGraph(FusedGraph):
    r"""A :class:`FusedGraph` over a rank's structure set whose GCN
    normalization is the *global* graph's, restricted to the edges into the
    owned rows. Two sources give it:

    * :meth:`use_global_norm` -- the whole signal's graph is at hand: its
      normalization is computed once and sliced;
    * :meth:`use_halo_in_edges` -- a shard (:mod:`.shards`): the in-edges of
      the halo rows (global order) stand in for the rest of the graph. A
      halo row's degree is the sum over its in-edges, which no local edge
      reaches; each in-edge enters the local graph as an edge from one extra
      node (a self loop stays a self loop), so PyG's ``gcn_norm`` over
      :math:`|S_r|+1` nodes computes every degree over the same edges in the
      same order as over the whole graph, and the edges into owned rows get
      the global weights bit for bit.
    """

    _global: Any = None
    _gids: Optional[Tensor] = None
    _owned_global: Optional[Tensor] = None
    _halo_in: Optional[tuple] = None
    _owned_local: Optional[Tensor] = None

    def use_global_norm(self, global_graph: FusedGraph, gids: Tensor, owned_mask_global: Tensor) -> None:
        self._global = global_graph
        self._gids = gids
        self._owned_global = owned_mask_global

    def use_halo_in_edges(self, dst: Tensor, loop: Tensor, weight: Optional[Tensor], owned_local: Tensor) -> None:
        r"""Args:
            dst: ``[K]`` local row (in :math:`S_r`) of each halo in-edge's target.
            loop: ``[K]`` whether the in-edge is a self loop.
            weight: ``[K]`` its weight (``None``: the signal is unweighted).
            owned_local: ``[|S_r|]`` bool, the rows this rank owns."""
        self._halo_in = (dst, loop, weight)
        self._owned_local = owned_local

    def gcn_norm(self, improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        if self._halo_in is not None:
            return self._norm_from_halo_in_edges(improved, add_self_loops, dtype)
        if self._global is None:
            return super().gcn_norm(improved, add_self_loops, dtype)
        from ..nn.decomposed import gcn_adjacency

        ei, ew = gcn_adjacency(self._global, improved, add_self_loops, dtype)  # cached on the global graph
        keep = self._owned_global[ei[1]]
        ei = _positions(self._gids, ei[:, keep])
        return ei.contiguous(), ew[keep].contiguous()

    def _norm_from_halo_in_edges(self, improved: bool, add_self_loops: bool,
                                 dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        n = self.num_nodes
        dst, loop, hw = self._halo_in
        src = torch.where(loop, dst, torch.full_like(dst, n))  # from the extra node n, self loops kept
        # local edges target owned rows, halo in-edges halo rows: each target's edges keep the global order
        ei = torch.cat([self.edge_index, torch.stack([src, dst])], 1)
        w = None if self.edge_weight is None else torch.cat([self.edge_weight.to(dtype), hw.to(dtype)])
        ei, ew = gcn_norm(ei, w, n + 1, improved, add_self_loops, "source_to_target", dtype)
        owned = torch.cat([self._owned_local, self._owned_local.new_zeros(1)])
        keep = owned[ei[1]]
        ei, ew = ei[:, keep], ew[keep]
        perm = torch.argsort(ei[1], stable=True)  # by target, as the global normalization is sorted
        return ei[:, perm].contiguous(), ew[perm].contiguous()

    def apply_tensors(self, fn: TensorMap) -> FusedGraph:
        """The device copy (:meth:`FusedGraph.apply_tensors`), without
        building the sequence packing, the time-major permutation and the
        sequence positions first: structure encoders read edges, weights and
        the GCN normalization, and those three cost about 64 B per row of
        :math:`S_r`. A caller that asks for them gets them built on the host
        and mapped, once (:class:`_MappedLocalGraph`): the same values."""
        g = _MappedLocalGraph(x=None if self.x is None else fn(self.x),
                              edge_weight=None if self.edge_weight is None else fn(self.edge_weight),
                              supergraph=map_tensors(self.supergraph, fn))
        g._source, g._source_map = self, fn
        return g


class _MappedLocalGraph(FusedGraph):
    """A :class:`LocalGraph`'s device copy: the sequence structures it was
    mapped without (:meth:`LocalGraph.apply_tensors`) are built on the host
    graph on first use and mapped, as :meth:`FusedGraph.apply_tensors` would
    have done up front, so the values and the host round trips are the same."""

    @property
    def packing(self) -> Any:
        if "packing" not in self._cache:
            packing = self._source.packing
            packing.active_list  # the host-side step lists and reset schedule come along (as apply_tensors)
            from ..nn.temporal_fusion import reset_schedule

            reset_schedule(packing)
            self._cache["packing"] = packing.apply_tensors(self._source_map)
        return self._cache["packing"]

    @property
    def sequence_position(self) -> Tensor:
        if "seqpos" not in self._cache:
            self._cache["seqpos"] = self._source_map(self._source.sequence_position)
        return self._cache["seqpos"]

    def _time_major_perm(self) -> Optional[tuple[Tensor, Tensor]]:
        if "tm_perm" not in self._cache:
            perm = self._source._time_major_perm()
            self._cache["tm_perm"] = None if perm is None else (self._source_map(perm[0]), self._source_map(perm[1]))
        return self._cache["tm_perm"]


class GlobalNodes:
    """The node columns a :class:`RankLayout` reads, from the whole
    :class:`~pyg_dynscale.data.Supergraph` (the whole-signal path)."""

    def __init__(self, sg: Any) -> None:
        self.sg = sg
        self.num_nodes, self.num_snapshots, self.num_vertices = sg.num_nodes, sg.num_snapshots, sg.num_vertices
        self._prev: Optional[Tensor] = None

    def take(self, name: str, gids: Tensor) -> Tensor:
        sg = self.sg
        if name == "prev":
            if self._prev is None:  # previous appearance of every node (-1 at a sequence start)
                self._prev = torch.full((sg.num_nodes,), -1, dtype=torch.long, device=sg.vertex.device)
                u, v = sg.temporal_edge_index
                self._prev[v] = u
            return self._prev[gids]
        if name == "seq":  # the global sequence of each node's vertex
            return torch.searchsorted(sg.sequence_vertex, sg.vertex[gids])
        return getattr(sg, name)[gids]


@dataclass
class RankNodes:
    r"""The columns of the vertex-time nodes one rank references (its
    structure set, time set and the rows its attention exchanges bring), as
    a shard stores them: what :class:`RankLayout` reads instead of the whole
    supergraph.

    Attributes:
        num_nodes, num_snapshots, num_vertices (int): the whole signal's.
        gids (Tensor): ``[n]`` sorted gids of the referenced nodes.
        time, vertex (Tensor): ``[n]`` their snapshot and vertex.
        prev (Tensor): ``[n]`` gid of the previous appearance of the same
            vertex (``-1`` at a sequence start).
        seq (Tensor): ``[n]`` index of the node's vertex among the whole
            signal's sequences (rows of ``h0``).
    """

    num_nodes: int
    num_snapshots: int
    num_vertices: int
    gids: Tensor
    time: Tensor
    vertex: Tensor
    prev: Tensor
    seq: Tensor

    @classmethod
    def from_global(cls, sg: Any, gids: Tensor) -> "RankNodes":
        """The table of the sorted ``gids`` from the whole supergraph (what a shard writer stores)."""
        src = GlobalNodes(sg)
        return cls(sg.num_nodes, sg.num_snapshots, sg.num_vertices, gids, src.take("time", gids),
                   src.take("vertex", gids), src.take("prev", gids), src.take("seq", gids))

    def take(self, name: str, gids: Tensor) -> Tensor:
        column = getattr(self, name)
        same = (gids.data_ptr() == self.gids.data_ptr() and gids.stride() == self.gids.stride()) or torch.equal(
            gids, self.gids)
        if gids.numel() == self.gids.numel() and same:
            return column  # the whole table (e.g. S_r's graph): the column itself, not a copy
        pos = _positions(self.gids, gids)
        if gids.numel() and not bool((self.gids.index_select(0, pos.clamp(max=max(self.gids.numel() - 1, 0)))
                                      == gids).all()):
            raise KeyError(f"the rank's node table has no row for some of the {gids.numel()} gids asked for")
        return column.index_select(0, pos)


def _take(src: Any, name: str, gids: Tensor) -> Tensor:
    """Column ``name`` (``"time"`` or ``"vertex"``) of the vertex-time nodes
    ``gids``: indexed from a global :class:`~pyg_dynscale.data.Supergraph`,
    or looked up in a rank's node table (:class:`RankNodes`, which holds
    only the nodes the rank references)."""
    take = getattr(src, "take", None)
    return take(name, gids) if take is not None else getattr(src, name)[gids]


def node_subset_graph(sg: Any, gids: Tensor, x: Optional[Tensor] = None, *, edges: Optional[tuple] = None,
                      cls: type = FusedGraph) -> FusedGraph:
    """A graph over the (sorted) vertex-time nodes ``gids`` of ``sg`` (the
    global supergraph or a rank's :class:`RankNodes`): global snapshot
    indices and vertex ids, sequences by vertex in time order, the given
    ``(edge_index, edge_weight)`` in local ids (default none)."""
    T = sg.num_snapshots
    time = _take(sg, "time", gids)
    vertex = _take(sg, "vertex", gids)
    node_ptr = torch.zeros(T + 1, dtype=torch.long, device=gids.device)
    torch.cumsum(torch.bincount(time, minlength=T), 0, out=node_ptr[1:])
    order, ptr, sv = _sequences(vertex)
    ei, ew = edges if edges is not None else (torch.zeros(2, 0, dtype=torch.long, device=gids.device), None)
    # consecutive appearances inside each local sequence
    same = torch.ones(order.numel(), dtype=torch.bool, device=gids.device)
    same[ptr[:-1]] = False
    later = order[same]
    earlier = order[torch.roll(same, -1)] if order.numel() else order
    local = Supergraph(node_ptr=node_ptr, vertex=vertex, time=time, spatial_edge_index=ei,
                       temporal_edge_index=torch.stack([earlier, later]), sequence_order=order, sequence_ptr=ptr,
                       sequence_vertex=sv, num_vertices=sg.num_vertices)
    return cls(x=x, edge_weight=ew, supergraph=local)


class _ByName:
    """Read access by field name (``info["graph"]``), kept for code written
    when these structures were dicts."""

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None


@dataclass
class RecurrentRound(_ByName):
    r"""Round :math:`k` of a recurrent block on one rank: the pieces of
    sequences that have :math:`k` pieces before them on other ranks.

    Attributes:
        q_pos (Tensor): rows of :math:`Q_r` in this round (gid order).
        gids (Tensor): their gids.
        graph (FusedGraph): the pieces as sequences (time order).
        h0_seq (Tensor, optional): round 0: the whole signal's sequence of
            each piece (its initial state row).
        h0_recv (Tensor, optional): rounds :math:`\ge 1`: the row of the
            previous round's received states each piece starts from.
        exchange (ExchangeMap, optional): the states this round's pieces end
            with that continue on other ranks (``None``: the last round).
        inverse (Tensor, optional): round 0 only: position of every row of
            :math:`Q_r` in the rounds' outputs concatenated.
    """

    q_pos: Tensor
    gids: Tensor
    graph: FusedGraph
    h0_seq: Optional[Tensor] = None
    h0_recv: Optional[Tensor] = None
    exchange: Optional["ExchangeMap"] = None
    inverse: Optional[Tensor] = None


@dataclass
class AttentionMerge(_ByName):
    r"""An attention (or window) block on one rank: :math:`M_r = Q_r \cup`
    the rows its exchange brings (every earlier appearance of a local vertex
    owned elsewhere; a window: those inside the band), sequences in time
    order, global snapshot indices as :attr:`FusedGraph.time`.

    Attributes:
        exchange (ExchangeMap): the rows received (written at ``recv_idx`` of :math:`M_r`).
        graph (FusedGraph): :math:`M_r` as sequences.
        q_in_m (Tensor): rows of :math:`Q_r` in :math:`M_r`.
    """

    exchange: "ExchangeMap"
    graph: FusedGraph
    q_in_m: Tensor


@dataclass
class ExchangeMap:
    r"""One exchange as rank :math:`r` executes it.

    Attributes:
        key: ``(block, phase, kind)``.
        width (int): the plan's row width (checked against the rows sent).
        static (bool): moved once before training.
        send_idx (Tensor): local rows to send, grouped by destination.
        send_splits (list[int]): rows per destination rank.
        recv_idx (Tensor): local rows the received rows are written to
            (``all_to_all_single`` order: by source, then gid).
        recv_splits (list[int]): rows per source rank.
        recv_gid (Tensor): gids of the received rows.
    """

    key: tuple
    width: int
    static: bool
    send_idx: Tensor
    send_splits: list
    recv_idx: Tensor
    recv_splits: list
    recv_gid: Tensor
    send_gid: Tensor

    @classmethod
    def build(cls, ex: Any, rank: int, send_space: Optional[Tensor], recv_space: Optional[Tensor]) -> "ExchangeMap":
        """``send_space`` / ``recv_space``: the sorted gids of the local
        tensors rows are gathered from / written to (``None``: positions are
        left as gids, to be mapped by the caller)."""
        sg, ss = ex.send_list(rank)
        rg, rs = ex.recv_list(rank)
        si = _positions(send_space, sg) if send_space is not None else sg
        ri = _positions(recv_space, rg) if recv_space is not None else rg
        return cls((ex.block, ex.phase, ex.kind), ex.width, ex.static, si, ss, ri, rs, rg, sg)


class RankLayout:
    r"""Everything rank ``rank`` needs to execute ``plan``.

    Built from the whole signal (this constructor) or from the rank's shard
    (:meth:`from_nodes`, :mod:`.shards`): both give :meth:`_build` the
    rank's owned rows, time set, the spatial edges into its owned rows and
    a node table, and the index logic is the same.

    Args:
        signal: the whole :class:`~pyg_dynscale.data.DynamicGraphSignal`.
        partition: its partition (``num_parts`` = world size).
        plan: the :class:`~pyg_dynscale.partition.CommunicationPlan` of the
            model's pattern on it, or this rank's
            :class:`~pyg_dynscale.partition.rank_plan.RankPlan` (only the
            rank's own send and receive lists are read).
        rank: this rank.
        global_graph: the signal's :class:`FusedGraph` (its GCN normalization
            is computed once and sliced).
    """

    def __init__(self, signal: Any, partition: Any, plan: Any, rank: int, global_graph: FusedGraph) -> None:
        sg = signal.supergraph()
        dev = sg.vertex.device
        own = partition.owner.to(dev)
        owned_g = own == rank
        s, d = sg.spatial_edge_index
        keep = owned_g[d]
        ew = signal.edge_weight[keep] if signal.edge_weight is not None else None
        self._build(GlobalNodes(sg), plan, rank, owned_g.nonzero().flatten(),
                    (partition.temporal_owner.to(dev) == rank).nonzero().flatten(), partition.time_owner is not None,
                    torch.stack([s[keep], d[keep]]), ew)
        self.structure.use_global_norm(global_graph, self.S, owned_g)
        #: the global supergraph (set-up code of the whole-signal path reads it)
        self.sg = sg

    @classmethod
    def from_nodes(cls, nodes: "RankNodes", plan: Any, rank: int, owned: Tensor, Q: Tensor, two_owners: bool,
                   spatial_edges: Tensor, edge_weight: Optional[Tensor], halo_in: tuple) -> "RankLayout":
        r"""The layout of a rank that holds only its part (a shard).

        Args:
            nodes: the :class:`RankNodes` table of every node it references.
            plan: its :class:`~pyg_dynscale.partition.rank_plan.RankPlan`
                (or the whole plan).
            owned, Q: sorted gids of its owned rows and its time set.
            two_owners: PSS-TS (a time owner apart from the structure owner).
            spatial_edges: ``[2, E_r]`` gids of every spatial edge into an
                owned row, in the global edge order; ``edge_weight`` theirs.
            halo_in: ``(target gid, is a self loop, weight or None)`` of every
                in-edge of the halo rows, in the global edge order
                (:meth:`LocalGraph.use_halo_in_edges`).
        """
        lay = cls.__new__(cls)
        lay._build(nodes, plan, rank, owned, Q, two_owners, spatial_edges, edge_weight)
        dst, loop, w = halo_in
        owned_local = torch.zeros(lay.S.numel(), dtype=torch.bool)
        owned_local[lay.S_owned] = True
        lay.structure.use_halo_in_edges(_positions(lay.S, dst), loop, w, owned_local)
        lay.sg = nodes
        return lay

    def _build(self, nodes: Any, plan: Any, rank: int, owned: Tensor, Q: Tensor, two_owners: bool,
               spatial_edges: Tensor, edge_weight: Optional[Tensor]) -> None:
        """The index logic shared by both constructors (``nodes``: a
        :class:`GlobalNodes` or a :class:`RankNodes`)."""
        self.nodes = nodes
        self.rank = r = rank
        self.plan = plan
        self.two_owners = two_owners
        # ---------------- structure side
        spatial = [e for e in plan if e.kind == "spatial"]
        halo = spatial[0].recv_list(r)[0] if spatial else owned[:0]
        S = torch.sort(torch.cat([owned, halo])).values
        gids = getattr(nodes, "gids", None)
        if gids is not None and gids.numel() == S.numel() and torch.equal(gids, S):
            S = gids  # a shard's node table is S itself (no PSS-TS, no attention rows): one array, not two
        self.S = S
        self.S_owned = _positions(S, owned)  # local rows of S this rank owns
        ei = _positions(S, spatial_edges)
        self.structure = node_subset_graph(nodes, S, None, edges=(ei, edge_weight), cls=LocalGraph)
        # ---------------- time side
        self.Q = Q
        if two_owners:
            g = owned[torch.isin(owned, Q)]  # nodes whose two owners are this rank
            self.local_S_to_Q = (_positions(S, g), _positions(Q, g))  # rows kept across redistribution
        else:
            self.local_S_to_Q = None
        self._time_graph: Optional[FusedGraph] = None  # built on first use (:attr:`time_graph`)
        self._mapped_from: Optional[tuple] = None  # (host layout, fn) of a device copy
        # ---------------- exchange maps (spatial, redistribution, readout: see trainer)
        self.maps: dict = {}
        for e in plan:
            if e.kind == "spatial":
                self.maps[(e.block, e.phase)] = ExchangeMap.build(e, r, S, S)
            elif e.phase == "redistribution":
                self.maps[(e.block, e.phase)] = ExchangeMap.build(e, r, S, Q)
            elif e.phase == "redistribution_back":
                self.maps[(e.block, e.phase)] = ExchangeMap.build(e, r, Q, S)
        self._recurrent: dict = {}
        self._attention: dict = {}

    @property
    def time_graph(self) -> FusedGraph:
        r""":math:`Q_r` as sequences (time order): what the time encoder of a
        block without temporal dependencies (``time_kind="none"``) runs over.
        Built on first use (:meth:`prepare` builds it for such a block), and
        shared with a recurrent round that holds all of :math:`Q_r`:
        recurrent and attention blocks run over their rounds and merges, so
        most layouts never hold it (about 110 B per row of :math:`Q_r`)."""
        if self._time_graph is None:
            if self._mapped_from is not None:  # a device copy: built on the host, then mapped
                host, fn = self._mapped_from
                self._time_graph = host.time_graph.apply_tensors(fn)
            else:
                self._time_graph = node_subset_graph(self.nodes, self.Q)
        return self._time_graph

    # ----------------------------------------------------------- recurrent
    def recurrent_rounds(self, block: int) -> list[RecurrentRound]:
        r"""Per round :math:`k`: the rank's depth-:math:`k` pieces as a
        graph, where their rows sit in :math:`Q_r`, where their initial states
        come from, and the exchange of the states they end with."""
        if block in self._recurrent:
            return self._recurrent[block]
        nodes, plan, r = self.nodes, self.plan, self.rank
        dev = self.Q.device
        D = plan.temporal_rounds()
        rounds_ex = plan.rounds(block)
        qdepth = _depth_of(plan, self.Q).to(dev)
        out: list[RecurrentRound] = []
        prev_recv_gid: Optional[Tensor] = None
        for k in range(D):
            pos = (qdepth == k).nonzero().flatten()  # rows of Q in this round (gid order)
            if pos.numel() == self.Q.numel():  # one round holds all of Q_r: its graph is the time graph
                gids = self.Q
                g = self._time_graph if self._time_graph is not None else node_subset_graph(nodes, gids)
                self._time_graph = g
            else:
                gids = self.Q[pos]
                g = node_subset_graph(nodes, gids)
            first = g.sequence_order.index_select(0, g.sequence_ptr[:-1])  # local node of each piece start
            first_gid = gids[first]
            info = RecurrentRound(q_pos=pos, gids=gids, graph=g)
            if k == 0:
                info.h0_seq = nodes.take("seq", first_gid)  # the whole signal's sequence of each piece
            else:
                # the state each piece starts from, received last round
                info.h0_recv = positions_in(prev_recv_gid, nodes.take("prev", first_gid))
            if k < len(rounds_ex):
                ex = rounds_ex[k]
                m = ExchangeMap.build(ex, r, None, None)
                m.key = (block, "temporal", "temporal")  # rounds count as the plan's one temporal exchange
                ends = gids.index_select(0, g.last_index()) if gids.numel() else gids
                m.send_idx = positions_in(ends, m.send_gid)  # the pieces ending in the sent gids
                info.exchange = m
                prev_recv_gid = m.recv_gid
            else:
                prev_recv_gid = torch.zeros(0, dtype=torch.long, device=dev)
            out.append(info)
        # the rounds' outputs, concatenated, back to Q order (every node of Q is in one round; D >= 1)
        scanned = torch.cat([info.q_pos for info in out])
        inv = torch.empty_like(scanned)
        inv[scanned] = torch.arange(scanned.numel(), device=dev)
        out[0].inverse = inv
        self._recurrent[block] = out
        return out

    # ----------------------------------------------------------- attention
    def attention(self, block: int) -> AttentionMerge:
        r"""The merged node set :math:`M_r = Q_r \cup` received rows of
        ``block``'s attention exchange, its graph (sequences in time order),
        and where local and received rows go in it."""
        if block in self._attention:
            return self._attention[block]
        ex = self.plan.exchange(block, "temporal")
        m = ExchangeMap.build(ex, self.rank, self.Q, None)
        M = torch.sort(torch.cat([self.Q, m.recv_gid])).values
        m.recv_idx = _positions(M, m.recv_gid)
        info = AttentionMerge(exchange=m, graph=node_subset_graph(self.nodes, M), q_in_m=_positions(M, self.Q))
        self._attention[block] = info
        return info

    # ------------------------------------------------------------- device
    def prepare(self, pattern: Any) -> "RankLayout":
        """Build the time structures of every block of ``pattern`` (recurrent
        rounds, attention merges) on the host; returns ``self``."""
        for b, blk in enumerate(pattern.blocks):
            if blk.time_kind == "recurrent":
                self.recurrent_rounds(b)
            elif blk.time_kind in ("attention", "window"):  # a window merges its banded rows the same way
                self.attention(b)
            else:
                self.time_graph
        return self

    def apply_tensors(self, fn: TensorMap) -> "RankLayout":
        """A copy whose index tensors and graphs went through ``fn`` (moved to
        the training device once; :meth:`prepare` first so that every block's
        time structures come along). The global supergraph ``sg`` and the
        plan stay on the host, where set-up code reads them."""
        out = copy.copy(self)
        out.S, out.S_owned, out.Q = fn(self.S), fn(self.S_owned), fn(self.Q)
        out.structure = self.structure.apply_tensors(fn)
        out.local_S_to_Q = None if self.local_S_to_Q is None else tuple(fn(t) for t in self.local_S_to_Q)
        out.maps = map_tensors(self.maps, fn)
        out._recurrent = map_tensors(self._recurrent, fn)
        out._attention = map_tensors(self._attention, fn)
        out._mapped_from = (self, fn)
        out._time_graph = None
        if self._time_graph is not None:  # shared with a round on the host: one device copy too
            same = [d.graph for b in self._recurrent for h, d in zip(self._recurrent[b], out._recurrent[b])
                    if h.graph is self._time_graph]
            out._time_graph = same[0] if same else self._time_graph.apply_tensors(fn)
        return out
