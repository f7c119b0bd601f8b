r"""The neighbour index and the mailbox of the vertices one rank owns (events per rank,
``MemoryTrainer(event_placement="per_rank")``).

With the whole stream on every rank, each rank keeps PyG's ``LastNeighborLoader`` (the
last ``size`` neighbours of every vertex, with their event ids) and the trainer's message
index (:class:`~pyg_dynscale.ctdg.store.MessageStore`: the events of the last batch in
which each vertex was a source / a destination) for **every** vertex. Here rank :math:`r`
keeps both for the vertices it owns only (:math:`\lambda_1(v) = r`, the owners of the
partitioned memory), plus the time and the raw message of every event they refer to
(the *event pool*): :math:`O(n_r \cdot \text{size})` slots and the events incident to
its vertices, never the whole stream.

**Exactly PyG's and the message store's rows.** A batch's insert is computed from the
batch's whole index columns ``src``, ``dst`` (every rank has them at the write-back,
:mod:`~pyg_dynscale.ctdg.event_exchange`), with the very calls the replicated path makes
-- ``src.sort()`` / ``dst.sort()`` of :meth:`MessageStore.put`, and
``LastNeighborLoader.insert``'s ``cat([dst, src]).sort()``, its dense slots and its
``topk`` -- and only the rows of owned vertices are kept. CPU ``sort`` is not stable, so
the order of a vertex's entries depends on the whole batch's keys: taking the same
keys gives the same permutation, hence bitwise the rows the replicated index holds for
these vertices (``topk`` is row-wise).

Event ids are global (the stream's positions: the replicated loader's ``cur_e_id``
counts inserted events from the last reset, which is the event's position in every walk
the trainer makes).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["OwnedIndex", "mail_lists"]


def mail_lists(lo: Tensor, hi: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    r"""``(which, position)`` of the entries of ``rows``: row ``rows[i]``'s entries are
    positions ``lo[rows[i]] .. hi[rows[i]] - 1`` of an entry array; ``which`` [n] is ``i``
    for each (grouped by ``rows`` order, each row's entries in stored order: what
    :meth:`MessageStore.get` returns)."""
    a = lo[rows]
    cnt = hi[rows] - a
    which = torch.repeat_interleave(torch.arange(rows.numel()), cnt)
    first = torch.repeat_interleave(a - (cnt.cumsum(0) - cnt), cnt)
    return which, torch.arange(which.numel()) + first


class OwnedIndex:
    r"""Neighbour slots, mailbox and event pool of the vertices one rank owns.

    Args:
        owned (Tensor): ``[n]`` the owned vertices, sorted (host); row :math:`i` is ``owned[i]``.
        owner (Tensor): ``[N]`` owner of every vertex (host).
        rank (int): this rank.
        size (int): neighbours kept per vertex (``num_neighbors``).
        msg_dim (int): raw message width :math:`F`; dtype, device: of the messages.

    Attributes:
        nbr, e_id: ``[n, size]`` host: PyG's ``neighbors`` / ``e_id`` rows of the owned vertices.
        lo, hi: ``[2, n]`` host: the owned vertices' mailbox entries (0: as source, 1: as destination).
        entry_ev, entry_other: ``[P]`` host: each entry's event and the other endpoint.
        pool_id (Tensor): ``[Q]`` host, increasing: the events the rows refer to;
            ``pool_t`` ``[Q]`` host, ``pool_msg`` ``[Q, F]`` on the device: their times and messages.
    """

    def __init__(self, owned: Tensor, owner: Tensor, rank: int, size: int, msg_dim: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.owned, self.owner, self.rank, self.size = owned, owner, rank, size
        self.local = torch.full((owner.numel(),), -1, dtype=torch.long)  # global -> owned row (host)
        self.local[owned] = torch.arange(owned.numel())
        self.msg_dim, self.dtype, self.device = msg_dim, dtype, torch.device(device)
        n = owned.numel()
        self.nbr = torch.zeros(n, size, dtype=torch.long)
        self.e_id = torch.full((n, size), -1, dtype=torch.long)
        self.lo = torch.zeros(2, n, dtype=torch.long)
        self.hi = torch.zeros(2, n, dtype=torch.long)
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """``LastNeighborLoader.reset_state`` and the stores' reset for the owned vertices."""
        self.e_id.fill_(-1)
        self.nbr.zero_()
        self.reset_mailbox()
        self.pool_id = torch.zeros(0, dtype=torch.long)
        self.pool_t = torch.zeros(0, dtype=torch.long)
        self.pool_msg = torch.zeros(0, self.msg_dim, dtype=self.dtype, device=self.device)

    def reset_mailbox(self) -> None:
        """The message stores emptied (the flush of ``TGNMemory.train(False)``)."""
        self.lo.zero_()
        self.hi.zero_()
        self.entry_ev = torch.zeros(0, dtype=torch.long)
        self.entry_other = torch.zeros(0, dtype=torch.long)

    KEYS = ("nbr", "e_id", "lo", "hi", "entry_ev", "entry_other", "pool_id", "pool_t", "pool_msg")

    def state(self) -> dict:
        """A copy of everything (a memory copy's snapshot)."""
        return {k: getattr(self, k).clone() for k in self.KEYS}

    def load(self, state: dict) -> None:
        """The inverse of :meth:`state` (each tensor onto the device its key lives on: a checkpoint's
        may come back on the host)."""
        for k, v in state.items():
            setattr(self, k, v.to(getattr(self, k).device).clone())

    def nbytes(self) -> int:
        """Bytes this index holds (host and device)."""
        return sum(getattr(self, k).numel() * getattr(self, k).element_size() for k in self.KEYS)

    # ------------------------------------------------------------------ insert
    def insert(self, a: int, src: Tensor, dst: Tensor, t: Tensor, msg: Tensor) -> None:
        r"""Events ``[a, a + B)`` (the whole batch's ``src``, ``dst``, ``t`` [B], host): the mailbox
        (``MessageStore.put`` of both directions) and the neighbour slots
        (``LastNeighborLoader.insert``) of the owned vertices; ``msg`` ``[m, F]`` (device): the
        messages of the events incident to an owned vertex, in event order."""
        b = src.numel()
        if b == 0:
            return
        mine = (self.owner[src] == self.rank) | (self.owner[dst] == self.rank)
        ids = torch.nonzero(mine).view(-1) + a
        self.pool_id = torch.cat([self.pool_id, ids])
        self.pool_t = torch.cat([self.pool_t, t[mine]])
        self.pool_msg = torch.cat([self.pool_msg, msg.to(self.dtype)])
        for side, (key, other) in enumerate(((src, dst), (dst, src))):
            nodes, perm = key.sort()  # MessageStore.put's call on the same keys: its permutation
            uniq, counts = nodes.unique_consecutive(return_counts=True)
            keep = self.owner[uniq] == self.rank
            if not bool(keep.any()):
                continue
            take = torch.repeat_interleave(keep, counts)  # entries of owned vertices, in sorted order
            base = self.entry_ev.numel()
            self.entry_ev = torch.cat([self.entry_ev, perm[take] + a])
            self.entry_other = torch.cat([self.entry_other, other[perm[take]]])
            cnt = counts[keep]
            rows = self.local[uniq[keep]]
            self.hi[side, rows] = base + cnt.cumsum(0)
            self.lo[side, rows] = self.hi[side, rows] - cnt
        self._insert_neighbors(a, src, dst)
        self._compact()

    def _insert_neighbors(self, a: int, src: Tensor, dst: Tensor) -> None:
        """``LastNeighborLoader.insert`` on the whole batch, the owned rows kept."""
        size = self.size
        neighbors = torch.cat([src, dst], dim=0)
        nodes = torch.cat([dst, src], dim=0)
        e_id = torch.arange(a, a + src.size(0)).repeat(2)
        nodes, perm = nodes.sort()
        neighbors, e_id = neighbors[perm], e_id[perm]
        n_id = nodes.unique()
        assoc = torch.empty(self.owner.numel(), dtype=torch.long)
        assoc[n_id] = torch.arange(n_id.numel())
        dense_id = torch.arange(nodes.size(0)) % size
        dense_id += assoc[nodes].mul_(size)
        dense_e_id = e_id.new_full((n_id.numel() * size,), -1)
        dense_e_id[dense_id] = e_id
        dense_e_id = dense_e_id.view(-1, size)
        dense_neighbors = e_id.new_empty(n_id.numel() * size)
        dense_neighbors[dense_id] = neighbors
        dense_neighbors = dense_neighbors.view(-1, size)
        keep = self.owner[n_id] == self.rank  # topk is row-wise: the owned rows alone are PyG's rows
        rows = self.local[n_id[keep]]
        e_all = torch.cat([self.e_id[rows, :size], dense_e_id[keep]], dim=-1)
        nb_all = torch.cat([self.nbr[rows, :size], dense_neighbors[keep]], dim=-1)
        top, order = e_all.topk(size, dim=-1)
        self.e_id[rows] = top
        self.nbr[rows] = torch.gather(nb_all, 1, order)

    def _compact(self) -> None:
        """Drop the entries and the pool events no row refers to any more (amortised: when the
        arrays are twice what the rows use)."""
        live_entries = int((self.hi - self.lo).sum())
        if self.entry_ev.numel() > 2 * live_entries + 256:
            sides = []
            for side in (0, 1):
                which, pos = mail_lists(self.lo[side], self.hi[side], torch.arange(self.owned.numel()))
                cnt = self.hi[side] - self.lo[side]
                sides.append((pos, cnt))
            pos = torch.cat([sides[0][0], sides[1][0]])
            cnt = torch.cat([sides[0][1], sides[1][1]])
            start = cnt.cumsum(0) - cnt
            n = self.owned.numel()
            self.lo = start.view(2, n).clone()
            self.hi = (start + cnt).view(2, n).clone()
            self.entry_ev, self.entry_other = self.entry_ev[pos], self.entry_other[pos]
        used = torch.cat([self.e_id[self.e_id >= 0], self.entry_ev]).unique()
        if self.pool_id.numel() > 2 * used.numel() + 256:
            keep = torch.searchsorted(self.pool_id, used)
            self.pool_id, self.pool_t = self.pool_id[keep], self.pool_t[keep]
            self.pool_msg = self.pool_msg[keep.to(self.device)]

    # ------------------------------------------------------------------ reads
    def pool_rows(self, ev: Tensor) -> Tensor:
        """The pool row of each event of ``ev`` (host; every one is in the pool)."""
        return torch.searchsorted(self.pool_id, ev)

    def neighbor_rows(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(neighbors [k, size], e_id [k, size], t [k, size], msg [k * size, F])`` of the owned
        ``ids``: PyG's rows, the slots' event times (0 where empty) and messages (zeros where empty)."""
        rows = self.local[ids]
        nbr, e_id = self.nbr[rows], self.e_id[rows]
        valid = e_id >= 0
        at = torch.where(valid, self.pool_rows(e_id.clamp(min=0)), torch.zeros_like(e_id))
        pool_msg = torch.cat([self.pool_msg, self.pool_msg.new_zeros(1, self.msg_dim)])
        at_msg = torch.where(valid, at, torch.full_like(at, self.pool_id.numel()))
        t = torch.where(valid, self.pool_t[at] if self.pool_t.numel() else torch.zeros_like(at), torch.zeros_like(at))
        return nbr, e_id, t, pool_msg[at_msg.view(-1).to(self.device)]

    def mail_rows(self, ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        r"""The mailbox of the owned ``ids``: ``counts [k, 2]`` (entries as source, as
        destination) and the entries ``(other, t, msg)``: all source entries of ``ids`` (grouped
        by ``ids`` order, each vertex's in stored order), then all destination entries."""
        rows = self.local[ids]
        counts = torch.stack([self.hi[0, rows] - self.lo[0, rows], self.hi[1, rows] - self.lo[1, rows]], dim=1)
        pos = torch.cat([mail_lists(self.lo[s], self.hi[s], rows)[1] for s in (0, 1)])
        ev = self.entry_ev[pos]
        at = self.pool_rows(ev)
        return counts, self.entry_other[pos], self.pool_t[at], self.pool_msg[at.to(self.device)]

    def num_entries(self, ids: Tensor) -> int:
        """Mailbox entries of the owned ``ids`` (both directions)."""
        rows = self.local[ids]
        return int((self.hi[:, rows] - self.lo[:, rows]).sum())
