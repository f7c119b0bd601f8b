"""The owned vertices' neighbour index and mailbox (pyg_dynscale/ctdg/owned_index.py): after every batch,
each owner's rows equal PyG's LastNeighborLoader rows and the trainer's MessageStore entries of its
vertices exactly (slot order, the neighbours a vertex with more than `size` events in one batch keeps,
the order of a vertex's entries under the CPU's unstable sort, repeated timestamps, self-loops), and
the event pool serves the times and messages of every event the rows name; resets and compaction keep
them so."""
from __future__ import annotations

import torch
from torch_geometric.nn.models.tgn import LastNeighborLoader

from pyg_dynscale.ctdg.owned_index import OwnedIndex
from pyg_dynscale.ctdg.store import MessageStore


def _stream(n_events=900, n_nodes=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n_nodes, (n_events,), generator=g)
    dst = torch.randint(0, n_nodes, (n_events,), generator=g)  # self-loops included
    t = torch.arange(n_events) // 3  # three events per timestamp: ties
    msg = torch.randn(n_events, 2, generator=g, dtype=torch.float64)
    return src, dst, t, msg


def _replay(owner, world, size, batch, src, dst, t, msg, reset_at=None):
    n = owner.numel()
    loader = LastNeighborLoader(n, size=size)
    stores = [MessageStore(src, n), MessageStore(dst, n)]
    idx = [OwnedIndex(torch.nonzero(owner == r).view(-1), owner, r, size, 2, torch.float64, "cpu")
           for r in range(world)]
    for a in range(0, src.numel(), batch):
        b = min(a + batch, src.numel())
        if a == reset_at:
            loader.reset_state()
            for s in stores:
                s.reset()
            for x in idx:
                x.reset()
        loader.cur_e_id = a  # the trainer's walks insert every event from the last reset: e_id = position
        loader.insert(src[a:b], dst[a:b])
        for s in stores:
            s.put(a, b)
        for r, x in enumerate(idx):
            mine = (owner[src[a:b]] == r) | (owner[dst[a:b]] == r)
            x.insert(a, src[a:b], dst[a:b], t[a:b], msg[a:b][mine])
            own = x.owned
            assert torch.equal(x.e_id, loader.e_id[own]), (a, r)
            valid = x.e_id >= 0
            assert torch.equal(x.nbr[valid], loader.neighbors[own][valid]), (a, r)
            nbr, e_id, tt, m = x.neighbor_rows(own)
            assert torch.equal(tt[valid], t[e_id[valid]]) and torch.equal(m.view(-1, size, 2)[valid], msg[e_id[valid]])
            counts, other, te, me = x.mail_rows(own)
            node_s, ev_s = stores[0].get(own)
            node_d, ev_d = stores[1].get(own)
            ev = torch.cat([ev_s, ev_d])
            assert torch.equal(counts[:, 0], torch.bincount(node_s, minlength=n)[own])
            assert torch.equal(other, torch.cat([dst[ev_s], src[ev_d]])), (a, r)
            assert torch.equal(te, t[ev]) and torch.equal(me, msg[ev]), (a, r)
    return idx


def test_owned_rows_equal_the_whole_stream_loader_and_stores():
    src, dst, t, msg = _stream()
    owner = torch.tensor([0, 1, 2, 0, 1, 2, 2, 2, 0, 1, 0, 1])
    # batch 60 on 12 nodes: many vertices have more than `size` events in a batch (colliding slots)
    _replay(owner, 3, 3, 60, src, dst, t, msg, reset_at=480)


def test_unstable_sort_order_kept():
    # the CPU's sort is not stable on these keys: the entries must follow its permutation, not event order
    src, dst, t, msg = _stream(2000, 5, seed=3)
    key = src[:1000]
    assert not torch.equal(key.sort()[1], key.sort(stable=True)[1])
    _replay(torch.tensor([0, 1, 0, 1, 1]), 2, 4, 1000, src, dst, t, msg)


def test_compaction_keeps_the_rows_and_bounds_the_pool():
    src, dst, t, msg = _stream(6000, 40, seed=1)
    owner = torch.arange(40) % 2
    idx = _replay(owner, 2, 2, 50, src, dst, t, msg)
    for x in idx:  # only the events the rows name stay: not the ~3000 events that touched the vertices
        live = torch.cat([x.e_id[x.e_id >= 0], x.entry_ev]).unique().numel()
        assert x.pool_id.numel() <= 2 * live + 256 < 3000
