r"""The link scores of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: PyG's ``examples/tgn.py``
forward (the batch's nodes and their last neighbours embedded from the memory, logits of
positive and negative pairs) and evaluation's reciprocal ranks.

Every index list is made on the host (the batch's nodes, their rows in the embedding,
the neighbour edges); one host-to-device copy per step takes the edges, their times and
event ids to the device (:mod:`~pyg_dynscale.ctdg.host`).
"""
from __future__ import annotations


import torch
from torch import Tensor

from ..training.traffic import ByteLedger
from .host import host_to_device

__all__ = ["LinkScorer"]


class LinkScorer:
    r"""``z = gnn(memory[n_id] (+ static), last_update, edges, t, msg)`` and the link logits.

    Args:
        gnn, link_pred (Module): the embedding module and the link predictor.
        static (StaticMemory, optional): added to the memory (or in its place with
            ``dynamic_memory=False``).
        dynamic_memory (bool): whether the memory feeds the embedding.
        state (MemoryState): the memory and its message stores.
        neighbors (LastNeighborLoader): the neighbour loader (host).
        host (HostStream): the stream's index columns on the host.
        msg (Tensor): ``[E, F]`` the raw messages on the device.
        local (ByteLedger): counts the memory rows read (``memory_read``), ``row_bytes`` each.
        edges (callable, optional): ``() -> (t, msg)``, the times (host) and messages (device) of
            the edges of the last neighbour lookup, indexed by its ``e_id`` (events per rank:
            :meth:`~pyg_dynscale.ctdg.event_exchange.EventExchange.edge_columns`); ``None``: the
            stream's ``t`` and ``msg`` by event id.

    Attributes:
        assoc (Tensor): ``[N]`` host: node -> row of the last embedded batch.
    """

    def __init__(self, gnn, link_pred, static, dynamic_memory: bool, state, neighbors, host, msg: Tensor,
                 local: ByteLedger, row_bytes: int, edges=None) -> None:
        self.gnn, self.link_pred, self.static, self.dynamic_memory = gnn, link_pred, static, dynamic_memory
        self.state, self.neighbors, self.host, self.msg = state, neighbors, host, msg
        self.device = msg.device
        self.local, self.row_bytes = local, row_bytes
        #: ``() -> (t, msg)``: the times and messages the lookup's ``e_id`` index (None: the stream's)
        self.edges = edges
        self.assoc = torch.empty(state.module.num_nodes, dtype=torch.long)

    def embed(self, n_id: Tensor, training: bool, lookup=None) -> Tensor:
        """``z`` of the batch nodes ``n_id`` (host, sorted unique) and their last neighbours;
        ``lookup``: the prefetched ``neighbors(n_id)`` (a future). The lookup, the node rows
        (:attr:`assoc`) and the neighbour edges are host lists; one copy takes the edges, their
        times and event ids to the device."""
        n_id, edge_index, e_id = self.neighbors(n_id) if lookup is None else lookup.result()
        self.assoc[n_id] = torch.arange(n_id.size(0))
        self.local.add("memory_read", n_id.numel() * self.row_bytes)
        z, last_update = self.state.read(n_id, training)
        m = e_id.numel()
        t_col, msg_col = (self.host.t, self.msg) if self.edges is None else self.edges()
        parts = [edge_index.reshape(-1), t_col[e_id], e_id] + ([n_id] if self.static is not None else [])
        at = host_to_device(torch.cat(parts), self.device)
        edges, t_e, e_dev = at[:2 * m].view(2, m), at[2 * m:3 * m], at[3 * m:4 * m]
        if self.static is not None:
            n_dev = at[4 * m:]
            z = z + self.static(n_dev) if self.dynamic_memory else self.static(n_dev)
        return self.gnn(z, last_update, edges, t_e, msg_col[e_dev])

    def scores(self, a: int, b: int, neg: Tensor, training: bool, lookup=None) -> tuple[Tensor, Tensor, Tensor]:
        """The logits of events ``[a, b)`` against their host negatives ``neg``: ``(pos_out [B, 1],
        neg_out [B, 1], z)`` (:attr:`assoc` keeps the rows of ``z``)."""
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        z = self.embed(torch.cat([src, dst, neg]).unique(), training, lookup)
        rows = host_to_device(self.assoc[torch.cat([src, dst, neg])], self.device)
        s, d, n = rows[:b - a], rows[b - a:2 * (b - a)], rows[2 * (b - a):]
        # z[src] gathered twice, as the example does: one shared gather would sum the two
        # gradients before the scatter, which rounds differently (last-bit differences)
        pos_out = self.link_pred(z[s], z[d])
        return pos_out, self.link_pred(z[s], z[n]), z

    def reciprocal_ranks(self, a: int, b: int, neg: Tensor, pos_out: Tensor, z: Tensor,
                         negatives: int) -> Tensor:
        r"""``[B]`` :math:`1/\text{rank}` of each positive among ``negatives`` of the batch's
        negatives (negative :math:`(i + s) \bmod B` for event :math:`i`)."""
        B = b - a
        S = min(negatives, B)
        cand = neg[(torch.arange(B).view(-1, 1) + torch.arange(S)) % B]  # [B, S] on the host
        rows = host_to_device(torch.cat([self.assoc[self.host.src[a:b]], self.assoc[cand.reshape(-1)]]), self.device)
        zs = z[rows[:B]].repeat_interleave(S, dim=0)
        neg_scores = self.link_pred(zs, z[rows[B:]]).view(B, S)
        p = pos_out.view(B, 1)
        rank = 1.0 + (neg_scores > p).sum(1).to(p.dtype) + 0.5 * (neg_scores == p).sum(1).to(p.dtype)
        return 1.0 / rank


def module_parameters(modules) -> list:
    """The distinct parameters of ``modules`` (``None`` entries skipped), in order."""
    params, seen = [], set()
    for mod in modules:
        for p in (mod.parameters() if mod is not None else ()):
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


