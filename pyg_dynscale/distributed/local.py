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

__all__ = ["LocalGraph", "ExchangeMap", "RankLayout", "RecurrentRound", "AttentionMerge", "node_subset_graph"]


def _positions(sorted_gids: Tensor, gids: Tensor) -> Tensor:
    """Positions of ``gids`` (all present) in the sorted ``sorted_gids``."""
    return torch.searchsorted(sorted_gids, gids)


def positions_in(keys: Tensor, query: Tensor) -> Tensor:
    """Positions of ``query`` (all present) in the *unsorted*, duplicate-free ``keys``."""
    if query.numel() == 0:
        return query
    order = torch.argsort(keys)
    return order[torch.searchsorted(keys[order], query)]


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
    """A :class:`FusedGraph` over a subset of vertex-time nodes whose GCN
    normalization is the slice of the global graph's (set with
    :meth:`use_global_norm`)."""

    _global: Any = None
    _gids: Optional[Tensor] = None
    _owned_global: Optional[Tensor] = None

    def use_global_norm(self, global_graph: FusedGraph, gids: Tensor, owned_mask_global: Tensor) -> None:
        self._global = global_graph
        self._gids = gids
        self._owned_global = owned_mask_global

    def gcn_norm(self, improved: bool, add_self_loops: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        if self._global is None:
            return super().gcn_norm(improved, add_self_loops, dtype)
        from ..nn.decomposed import gcn_adjacency

        ei, ew = gcn_adjacency(self._global, improved, add_self_loops, dtype)  # cached on the global graph
        keep = self._owned_global[ei[1]]
        ei = _positions(self._gids, ei[:, keep])
        return ei.contiguous(), ew[keep].contiguous()


def node_subset_graph(sg: Any, gids: Tensor, x: Optional[Tensor] = None, *, edges: Optional[tuple] = None,
                      cls: type = FusedGraph) -> FusedGraph:
    """A graph over the (sorted) vertex-time nodes ``gids`` of ``sg``: global
    snapshot indices and vertex ids, sequences by vertex in time order, the
    given ``(edge_index, edge_weight)`` in local ids (default none)."""
    T = sg.num_snapshots
    time = sg.time[gids]
    vertex = sg.vertex[gids]
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

    Args:
        signal: the whole :class:`~pyg_dynscale.data.DynamicGraphSignal`.
        partition: its partition (``num_parts`` = world size).
        plan: the :class:`~pyg_dynscale.partition.CommunicationPlan` of the
            model's pattern on it.
        rank: this rank.
        global_graph: the signal's :class:`FusedGraph` (its GCN normalization
            is computed once and sliced).
    """

    def __init__(self, signal: Any, partition: Any, plan: Any, rank: int, global_graph: FusedGraph) -> None:
        sg = signal.supergraph()
        self.sg = sg
        self.rank = r = rank
        self.plan = plan
        dev = sg.vertex.device
        own = partition.owner.to(dev)
        town = partition.temporal_owner.to(dev)
        self.two_owners = partition.time_owner is not None
        N = sg.num_nodes
        # ---------------- structure side
        owned_g = own == r
        owned = owned_g.nonzero().flatten()
        spatial = [e for e in plan if e.kind == "spatial"]
        halo = spatial[0].recv_list(r)[0] if spatial else owned[:0]
        S = torch.sort(torch.cat([owned, halo])).values
        self.S = S
        self.S_owned = _positions(S, owned)  # local rows of S this rank owns
        s, d = sg.spatial_edge_index
        keep = owned_g[d]
        ei = _positions(S, torch.stack([s[keep], d[keep]]))
        ew = signal.edge_weight[keep] if signal.edge_weight is not None else None
        self.structure = node_subset_graph(sg, S, None, edges=(ei, ew), cls=LocalGraph)
        self.structure.use_global_norm(global_graph, S, owned_g)
        # ---------------- time side
        Q = (town == r).nonzero().flatten()
        self.Q = Q
        if self.two_owners:
            both = (own == r) & (town == r)
            g = both.nonzero().flatten()
            self.local_S_to_Q = (_positions(S, g), _positions(Q, g))  # rows kept across redistribution
        else:
            self.local_S_to_Q = None
        self.time_graph = node_subset_graph(sg, Q)
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
        self._N = N

    # ----------------------------------------------------------- recurrent
    def recurrent_rounds(self, block: int) -> list[RecurrentRound]:
        r"""Per round :math:`k`: the rank's depth-:math:`k` pieces as a
        graph, where their rows sit in :math:`Q_r`, where their initial states
        come from, and the exchange of the states they end with."""
        if block in self._recurrent:
            return self._recurrent[block]
        sg, plan, r = self.sg, self.plan, self.rank
        dev = self.Q.device
        depth = plan.depth.to(dev)
        D = plan.temporal_rounds()
        rounds_ex = plan.rounds(block)
        # previous appearance of every node (-1 at a sequence start)
        prev = torch.full((self._N,), -1, dtype=torch.long, device=dev)
        u, v = sg.temporal_edge_index
        prev[v] = u
        seq_of_vertex = sg.sequence_vertex  # sorted vertex ids of the global sequences
        qdepth = depth[self.Q]
        out: list[RecurrentRound] = []
        prev_recv_gid: Optional[Tensor] = None
        for k in range(D):
            pos = (qdepth == k).nonzero().flatten()  # rows of Q in this round (gid order)
            gids = self.Q[pos]
            g = node_subset_graph(sg, gids)
            first = g.sequence_order.index_select(0, g.sequence_ptr[:-1])  # local node of each piece start
            first_gid = gids[first]
            info = RecurrentRound(q_pos=pos, gids=gids, graph=g)
            if k == 0:
                info.h0_seq = torch.searchsorted(seq_of_vertex, g.sequence_vertex)  # global sequence of each piece
            else:
                # the state each piece starts from, received last round
                info.h0_recv = positions_in(prev_recv_gid, prev[first_gid])
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
        info = AttentionMerge(exchange=m, graph=node_subset_graph(self.sg, M), q_in_m=_positions(M, self.Q))
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
        return self

    def apply_tensors(self, fn: TensorMap) -> "RankLayout":
        """A copy whose index tensors and graphs went through ``fn`` (moved to
        the training device once; :meth:`prepare` first so that every block's
        time structures come along). The global supergraph ``sg`` and the
        plan stay on the host, where set-up code reads them."""
        out = copy.copy(self)
        out.S, out.S_owned, out.Q = fn(self.S), fn(self.S_owned), fn(self.Q)
        out.structure = self.structure.apply_tensors(fn)
        out.time_graph = self.time_graph.apply_tensors(fn)
        out.local_S_to_Q = None if self.local_S_to_Q is None else tuple(fn(t) for t in self.local_S_to_Q)
        out.maps = map_tensors(self.maps, fn)
        out._recurrent = map_tensors(self._recurrent, fn)
        out._attention = map_tensors(self._attention, fn)
        return out
