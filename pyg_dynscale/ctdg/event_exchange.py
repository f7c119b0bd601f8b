r"""The exchanges of events per rank (``MemoryTrainer(event_placement="per_rank")``): a
rank holds its events (:mod:`~pyg_dynscale.ctdg.rank_events`) and the neighbour index and
mailbox of the vertices it owns (:class:`~pyg_dynscale.ctdg.owned_index.OwnedIndex`); what
the replicated path reads from its whole-stream copies comes from the owners instead.

Three exchanges, each counted where its collective is issued (bytes handed over, the
rank's own block excluded; evaluation's as ``eval_<kind>``):

* ``events`` -- a batch ``[a, b)`` reaching every rank (:meth:`EventExchange.keys`): each
  rank's share of ``src``, ``dst``, ``t`` (``24`` bytes per event, padded to the largest
  share: one ``all_gather`` over the host group); at the write-back
  (:meth:`EventExchange.advance`) each holder sends the message of each of its events to
  the owners of its endpoints (one row per distinct other owner, :math:`F s` bytes; the
  receiver knows which from the gathered columns, so no ids travel), and the owners insert
  the batch into their index.
* ``neighbors`` -- before a batch's memory dispatch (:meth:`EventExchange.lookup`), the
  last neighbours of its roots and negatives: the ``[M]`` counts, the ids (``8`` bytes), and
  per id the owner's ``size`` slots (neighbour, event id, time: ``24`` bytes each, over the
  host group) and their messages (:math:`size \cdot F s`, the rows' group). The rank then
  runs ``LastNeighborLoader.__call__`` on the rows: the same ``n_id``, edges and edge
  order, the edges' times and messages from the slots.
* ``mailbox`` -- in training, the stored messages of the sampled nodes (the memory update
  reads them, and the memory dispatch asks for their other endpoints): counts, ids, per id
  its entry counts as source / destination (``16`` bytes), per entry the other endpoint and
  the time (``16`` bytes) and the message (:math:`F s`).

**Predicted** (:meth:`EventExchange.predicted`), per rank, from the schedule and the id
lists: ``events`` = :math:`24 \max_q |s_q|` per batch plus the rows owed to each other owner
(events whose endpoints it owns); ``neighbors`` = counts + ``8`` per id asked + ids asked of
this rank :math:`\times` ``size`` :math:`(24 + F s)` (the ``[M, M]`` request matrix, gathered);
``mailbox`` = counts + ``8`` per id asked + ``16`` per id asked of it + the entries it served
(counted when served: they depend on the owners' mailboxes) :math:`\times (16 + F s)`.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor

from ..training.traffic import ByteLedger
from .host import host_to_device
from .owned_index import OwnedIndex, mail_lists
from .rank_events import EventHolders, RankEvents, RankHost

__all__ = ["EventExchange", "MailView", "EXCHANGE_KINDS"]

#: the kinds of bytes these exchanges count
EXCHANGE_KINDS = ("events", "neighbors", "mailbox")


class MailView:
    r"""The mailbox of a batch's sampled nodes, as fetched: per vertex its entries as source
    and as destination (other endpoint, time, message row).

    Attributes:
        pos (Tensor): ``[N]`` host, the view's row of each vertex (``-1``: not in the view).
    """

    def __init__(self, num_nodes: int, blocks: list, msg_dim: int, dtype, device) -> None:
        # blocks: (ids [k], counts [k, 2], other [n], t [n], msg [n, F]) with each block's entries
        # laid out as all its source entries (grouped by id) then all its destination entries
        ids = torch.cat([b[0] for b in blocks]) if blocks else torch.zeros(0, dtype=torch.long)
        counts = torch.cat([b[1] for b in blocks]) if blocks else torch.zeros(0, 2, dtype=torch.long)
        sides = []
        for side in (0, 1):
            other, t, rows = [], [], []
            for bid, cnt, oth, tt, mm in blocks:
                ns = int(cnt[:, 0].sum())
                sl = slice(0, ns) if side == 0 else slice(ns, oth.numel())
                other.append(oth[sl])
                t.append(tt[sl])
                rows.append(mm[sl])
            sides.append((torch.cat(other) if other else ids[:0], torch.cat(t) if t else ids[:0],
                          torch.cat(rows) if rows else torch.zeros(0, msg_dim, dtype=dtype, device=device)))
        self.other = [sides[0][0], sides[1][0]]
        self.t = [sides[0][1], sides[1][1]]
        self.offset = sides[0][0].numel()  # destination entries' rows follow the source ones in msg
        self.msg = torch.cat([sides[0][2], sides[1][2]])
        cnt = counts
        self.hi = cnt.t().cumsum(1)
        self.lo = self.hi - cnt.t()
        self.pos = torch.full((num_nodes,), -1, dtype=torch.long)
        self.pos[ids] = torch.arange(ids.numel())
        self.ids = ids

    def covers(self, n_id: Tensor) -> bool:
        return bool((self.pos[n_id] >= 0).all())

    def get(self, n_id: Tensor) -> tuple:
        """``(node_s, other_s, ev_s, t_s, node_d, other_d, ev_d, t_d, msg)`` of ``n_id``
        (:meth:`~pyg_dynscale.ctdg.store.MemoryState.messages`'s form; ``ev`` rows of ``msg``)."""
        rows = self.pos[n_id]
        out = []
        for side in (0, 1):
            which, pos = mail_lists(self.lo[side], self.hi[side], rows)
            out += [n_id[which], self.other[side][pos], pos + (self.offset if side else 0), self.t[side][pos]]
        return tuple(out) + (self.msg,)


def own_mail(index: OwnedIndex, n_id: Tensor) -> tuple:
    """:meth:`MailView.get` of owned vertices, from the rank's own index."""
    counts, other, t, msg = index.mail_rows(n_id)
    ns = int(counts[:, 0].sum())
    node_s = torch.repeat_interleave(n_id, counts[:, 0])
    node_d = torch.repeat_interleave(n_id, counts[:, 1])
    ev = torch.arange(other.numel())
    return (node_s, other[:ns], ev[:ns], t[:ns], node_d, other[ns:], ev[ns:], t[ns:], msg)


class EventExchange:
    r"""One rank's side of the event exchanges (see the module).

    Args:
        events (RankEvents): the events this rank holds.
        host (RankHost): its index columns by global range.
        holders (EventHolders): which rank holds each event.
        index (OwnedIndex): the owned vertices' neighbour index and mailbox.
        placement (PartitionedMemory): the owners, the rank, the channel of the exchanges.
        ledger (ByteLedger): where the bytes handed to each collective are counted.

    Attributes:
        edges (tuple): ``(t [m], msg [m, F])`` of the last lookup's edges (rows = its ``e_id``), per thread.
        view (MailView or None): the last training lookup's mailbox (dropped at each insert), per thread.
    """

    def __init__(self, events: RankEvents, host: RankHost, holders: EventHolders, index: OwnedIndex,
                 placement, ledger: ByteLedger) -> None:
        self.events, self.host, self.holders, self.index, self.placement = events, host, holders, index, placement
        self.ledger = ledger
        self.rank, self.world = placement.rank, placement.world_size
        self.owner = placement.owner
        self.size = index.size
        self.msg_dim, self.dtype, self.device = index.msg_dim, index.dtype, index.device
        self.msg_bytes = self.msg_dim * torch.empty((), dtype=self.dtype).element_size()
        self._assoc = torch.empty(self.owner.numel(), dtype=torch.long)
        # the last lookup's edges and mailbox, per thread: a micro-batch's lookup runs on a thread while this
        # thread computes the micro-batch before it from that one's (handed over with carried / adopt)
        self._mine = threading.local()
        self._no_edges = (torch.zeros(0, dtype=torch.long), torch.zeros(0, self.msg_dim, dtype=self.dtype))
        self.begin_epoch()

    @property
    def edges(self) -> tuple:
        return getattr(self._mine, "edges", self._no_edges)

    @edges.setter
    def edges(self, value: tuple) -> None:
        self._mine.edges = value

    @property
    def view(self) -> Optional[MailView]:
        return getattr(self._mine, "view", None)

    @view.setter
    def view(self, value: Optional[MailView]) -> None:
        self._mine.view = value

    def carried(self) -> tuple:
        """This thread's last lookup (:attr:`edges`, :attr:`view`), for :meth:`adopt` on another thread."""
        return self.edges, self.view

    def adopt(self, carried: tuple) -> None:
        """Make a lookup done on another thread (its :meth:`carried`) this thread's last lookup."""
        self.edges, self.view = carried

    # ------------------------------------------------------------------ counters
    def begin_epoch(self) -> None:
        m = self.world
        self.epoch = {"gather": 0, "rows": torch.zeros(m, dtype=torch.long),
                      "neighbors": torch.zeros(m, dtype=torch.long), "mailbox": torch.zeros(m, dtype=torch.long),
                      "served": 0, "calls": {"neighbors": 0, "mailbox": 0}}

    @property
    def training(self) -> bool:
        return self.placement.phase == "train"

    def _count(self, kind: str, nbytes: int) -> None:
        self.ledger.add(kind if self.training else f"eval_{kind}", nbytes)

    # ------------------------------------------------------------------ collectives
    def _host_a2a(self, send: Tensor, sc: list, rc: list, kind: str) -> Tensor:
        import torch.distributed as dist

        width = 1
        for s in send.shape[1:]:
            width *= s
        out = send.new_empty((sum(rc),) + tuple(send.shape[1:]))
        dist.all_to_all_single(out, send.contiguous(), rc, sc, group=self.placement.channel.host)
        self._count(kind, (send.numel() - sc[self.rank] * width) * send.element_size())
        return out

    def _rows_a2a(self, send: Tensor, sc: list, rc: list, kind: str) -> Tensor:
        """Device rows ``[n, F]`` (``F`` may be 0: nothing moves)."""
        if self.msg_dim == 0:
            return send.new_zeros((sum(rc), 0))
        ch = self.placement.channel
        if ch.rows is not None:
            out = ch.rows.all_to_all(send.contiguous(), sc, rc)
        else:
            import torch.distributed as dist

            out = send.new_empty((sum(rc),) + tuple(send.shape[1:]))
            dist.all_to_all_single(out, send.contiguous(), rc, sc)
        self._count(kind, (send.numel() - sc[self.rank] * send.size(1)) * send.element_size())  # the buffer handed over
        return out

    def _counts(self, send: Tensor, kind: str) -> list:
        import torch.distributed as dist

        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.placement.channel.host)
        self._count(kind, (send.numel() - 1) * send.element_size())
        return recv.tolist()

    # ------------------------------------------------------------------ a batch's columns
    def keys(self, a: int, b: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(src, dst, t)`` of ``[a, b)`` on every rank: each holder's share, all-gathered (kept
        as :attr:`RankHost.window` until the next batch)."""
        w = self.host.window
        if w is not None and (w[0], w[1]) == (a, b):
            return w[2]["src"], w[2]["dst"], w[2]["t"]
        shares = self.holders.shares(a, b)
        s, e = shares[self.rank]
        width = max(y - x for x, y in shares)
        mine = torch.zeros(3, width, dtype=torch.long)
        if e > s:
            for k, name in enumerate(("src", "dst", "t")):
                mine[k, :e - s] = self.events.column(name, s, e)
        import torch.distributed as dist

        out = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine, group=self.placement.channel.host)
        self._count("events", mine.numel() * 8)
        if self.training:
            self.epoch["gather"] += 24 * width
        cols = torch.cat([o[:, :y - x] for o, (x, y) in zip(out, shares)], dim=1)
        src, dst, t = cols[0].clone(), cols[1].clone(), cols[2].clone()
        self.host.window = (a, b, {"src": src, "dst": dst, "t": t})
        return src, dst, t

    def prepare(self, a: int, b: int, training: bool) -> None:
        """Before scoring ``[a, b)``: an evaluation batch's columns reach every rank (a training
        local batch is the rank's own)."""
        if not training:
            self.keys(a, b)

    def advance(self, a: int, b: int) -> tuple[Tensor, Tensor]:
        """Insert ``[a, b)`` into the owners' indexes: the columns (gathered), each holder's
        messages to the owners of their endpoints. Returns ``(src, dst)`` of the batch."""
        src, dst, t = self.keys(a, b)
        self.view = None
        shares = self.holders.shares(a, b)
        own_s, own_d = self.owner[src], self.owner[dst]
        s, e = shares[self.rank]
        me = self.rank
        msg = self.events.messages(s, e).to(self.device, self.dtype)
        rows, sc = [], []
        for q in range(self.world):
            sel = (own_s[s - a:e - a] == q) | (own_d[s - a:e - a] == q)
            rows.append(msg[host_to_device(torch.nonzero(sel).view(-1), self.device)])
            sc.append(int(sel.sum()) if q != me else 0)
        if self.training:
            self.epoch["rows"] += torch.tensor(self._owed(own_s[s - a:e - a], own_d[s - a:e - a]))
        rc = []
        for q, (x, y) in enumerate(shares):
            rc.append(0 if q == me else int(((own_s[x - a:y - a] == me) | (own_d[x - a:y - a] == me)).sum()))
        send = torch.cat([r for q, r in enumerate(rows) if q != me]) if self.world > 1 else msg[:0]
        got = self._rows_a2a(send, sc, rc, "events")
        parts, at = [], 0
        for q in range(self.world):  # holders in rank order = event order
            if q == me:
                parts.append(rows[me])
            else:
                parts.append(got[at:at + rc[q]])
                at += rc[q]
        self.index.insert(a, src, dst, t, torch.cat(parts))
        return src, dst

    def _owed(self, own_s: Tensor, own_d: Tensor) -> list:
        """Rows this holder owes each other owner for the events with these endpoint owners
        (the prediction, counted apart from the sends: one per distinct other owner)."""
        me = self.rank
        out = [0] * self.world
        for q in range(self.world):
            if q != me:
                out[q] = int(((own_s == q) | (own_d == q)).sum())
        return out

    # ------------------------------------------------------------------ lookups
    def _by_owner(self, ids: Tensor) -> tuple[Tensor, Tensor, list]:
        """``(local ids, remote ids grouped by owner (stable), per-owner counts)``."""
        own = self.owner[ids]
        mine = own == self.rank
        remote = ids[~mine]
        perm = torch.argsort(own[~mine], stable=True)
        counts = torch.bincount(own[~mine], minlength=self.world)
        return ids[mine], remote[perm], counts

    def lookup(self, ids: Tensor, training: bool) -> tuple[Tensor, Tensor, Tensor]:
        r"""``LastNeighborLoader.__call__(ids)`` (``ids`` sorted unique, host) from the owners'
        rows: ``(n_id, edge_index, e_id)`` with ``e_id`` the rows of :attr:`edges`. In training the
        sampled nodes' mailbox is fetched too (:attr:`view`). A collective: every rank calls it."""
        size = self.size
        local, remote, counts = self._by_owner(ids)
        self.epoch["calls"]["neighbors"] += int(self.training)
        if self.training:
            self.epoch["neighbors"] += counts
        rc = self._counts(counts, "neighbors")
        sc = counts.tolist()
        asked = self._host_a2a(remote, sc, rc, "neighbors")
        nbr, eid, tt, msg = self.index.neighbor_rows(asked)
        got = self._host_a2a(torch.cat([nbr, eid, tt], dim=1), rc, sc, "neighbors")
        got_msg = self._rows_a2a(msg, [c * size for c in rc], [c * size for c in sc], "neighbors")
        l_nbr, l_eid, l_t, l_msg = self.index.neighbor_rows(local)
        order = torch.cat([local, remote])
        rows_nbr = torch.cat([l_nbr, got[:, :size]])
        rows_eid = torch.cat([l_eid, got[:, size:2 * size]])
        rows_t = torch.cat([l_t, got[:, 2 * size:]])
        rows_msg = torch.cat([l_msg, got_msg])
        back = torch.empty_like(order)
        back[torch.searchsorted(ids, order)] = torch.arange(order.numel())  # ids order
        neighbors, e_id, t = rows_nbr[back], rows_eid[back], rows_t[back]
        # LastNeighborLoader.__call__, on the fetched rows
        nodes = ids.view(-1, 1).repeat(1, size)
        mask = e_id >= 0
        neighbors, nodes, t = neighbors[mask], nodes[mask], t[mask]
        slot = (back.view(-1, 1) * size + torch.arange(size)).view(ids.numel(), size)[mask]
        n_id = torch.cat([ids, neighbors]).unique()
        self._assoc[n_id] = torch.arange(n_id.size(0))
        neighbors, nodes = self._assoc[neighbors], self._assoc[nodes]
        self.edges = (t, rows_msg[host_to_device(slot, self.device)])
        if training:
            self.view = self.mailbox(n_id)
        return n_id, torch.stack([neighbors, nodes]), torch.arange(t.numel())

    def mailbox(self, ids: Tensor) -> MailView:
        """The stored messages of ``ids`` (host): the owners' mailbox entries (a collective)."""
        local, remote, counts = self._by_owner(ids)
        self.epoch["calls"]["mailbox"] += int(self.training)
        if self.training:
            self.epoch["mailbox"] += counts
        rc = self._counts(counts, "mailbox")
        sc = counts.tolist()
        asked = self._host_a2a(remote, sc, rc, "mailbox")
        # per asking rank: its ids' counts, then its entries (source entries, then destination entries)
        blocks_out, entry_sc, at = [], [], 0
        for q in range(self.world):
            part = asked[at:at + rc[q]]
            at += rc[q]
            blocks_out.append(self.index.mail_rows(part))
            entry_sc.append(blocks_out[-1][1].numel())
        head = torch.cat([b[0] for b in blocks_out])
        got_head = self._host_a2a(head, rc, sc, "mailbox")
        if self.training:
            self.epoch["served"] += sum(n for q, n in enumerate(entry_sc) if q != self.rank)
        entry_rc, at = [], 0
        for q in range(self.world):
            entry_rc.append(int(got_head[at:at + sc[q]].sum()))
            at += sc[q]
        ents = torch.cat([torch.stack([b[1], b[2]], dim=1) for b in blocks_out])
        got_ents = self._host_a2a(ents, entry_sc, entry_rc, "mailbox")
        got_msg = self._rows_a2a(torch.cat([b[3] for b in blocks_out]), entry_sc, entry_rc, "mailbox")
        blocks = [(local,) + self.index.mail_rows(local)]
        a_id = a_head = a_ent = 0
        for q in range(self.world):
            if q == self.rank:
                continue
            n_ids, n_ent = sc[q], entry_rc[q]
            ent = got_ents[a_ent:a_ent + n_ent]
            blocks.append((remote[a_id:a_id + n_ids], got_head[a_head:a_head + n_ids], ent[:, 0], ent[:, 1],
                           got_msg[a_ent:a_ent + n_ent]))
            a_id += n_ids
            a_head += n_ids
            a_ent += n_ent
        return MailView(self.owner.numel(), blocks, self.msg_dim, self.dtype, self.device)

    def mail(self, n_id: Tensor) -> tuple:
        """The stored messages of ``n_id``: from the last training lookup's view, else (owned
        vertices: the memory update of evaluation and the flush) from the own index."""
        if self.view is not None and self.view.covers(n_id):
            return self.view.get(n_id)
        return own_mail(self.index, n_id)

    def edge_columns(self) -> tuple[Tensor, Tensor]:
        """``(t, msg)`` of the last lookup's edges (the rows its ``e_id`` names)."""
        return self.edges

    # ------------------------------------------------------------------ prediction
    def predicted(self, gathered: dict) -> dict:
        r"""This rank's bytes of the last epoch from the schedule and the id lists;
        ``gathered[kind]``: the ``[M, M]`` matrix of ids rank :math:`q` asked of owner :math:`o`."""
        r, m, size, f = self.rank, self.world, self.size, self.msg_bytes
        off = 1 - torch.eye(m, dtype=torch.long)
        e = self.epoch
        nb, mb = gathered["neighbors"] * off, gathered["mailbox"] * off
        rows = e["rows"].clone()
        rows[r] = 0
        return {"events": e["gather"] + int(rows.sum()) * f,
                "neighbors": e["calls"]["neighbors"] * (m - 1) * 8 + int(nb[r].sum()) * 8
                + int(nb[:, r].sum()) * size * (24 + f),
                "mailbox": e["calls"]["mailbox"] * (m - 1) * 8 + int(mb[r].sum()) * 8 + int(mb[:, r].sum()) * 16
                + e["served"] * (16 + f)}

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        self.index.reset()
        self.view = None

    def agree_bounds(self, splits: list) -> None:
        """The negatives' ``(min, max)`` destination of each split, reduced over the ranks' shares."""
        import torch.distributed as dist

        lo = torch.tensor([self.host.local_bounds(a, b)[0] for a, b in splits], dtype=torch.long)
        hi = torch.tensor([-self.host.local_bounds(a, b)[1] for a, b in splits], dtype=torch.long)
        vec = torch.cat([lo, hi])
        dist.all_reduce(vec, op=dist.ReduceOp.MIN, group=self.placement.channel.host)
        n = len(splits)
        for k, (a, b) in enumerate(splits):
            self.host.bounds[(a, b)] = (int(vec[k]), int(-vec[n + k]))
