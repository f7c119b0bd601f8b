"""TGN's memory keeps PyG's message stores lazily (pyg_dynscale/ctdg/models.py: LazyStoreMemory,
EmptyEntries): driven by PyG's own calls (update_state, forward in training and evaluation, the flush of
train(False), reset_state) it computes what torch_geometric.nn.TGNMemory computes bit for bit in float64,
while its stores hold only the nodes that received a message (PyG's hold one entry per node: 30 MB at
10^5 nodes). Red if the stores are full dicts again (the entry counts) or a missing node does not read the
empty entry (KeyError)."""
from __future__ import annotations

import copy
import pickle

import torch
from torch_geometric.nn import TGNMemory

from pyg_dynscale.ctdg import TGN, synthetic_events
from pyg_dynscale.ctdg.models import EmptyEntries, LazyStoreMemory


def _pair(num_nodes, msg_dim):
    torch.manual_seed(0)
    lazy = TGN(num_nodes, msg_dim, memory_dim=5, time_dim=3, embedding_dim=4).double().memory
    torch.manual_seed(0)
    pyg = TGN(num_nodes, msg_dim, memory_dim=5, time_dim=3, embedding_dim=4).double().memory
    for mem in (lazy, pyg):  # as PyG's loop does before each epoch (the stores' empty entry in float64)
        mem.reset_state()
    TGNMemory._reset_message_store(pyg)  # PyG's own stores: one entry per node
    return lazy, pyg


def test_lazy_store_computes_what_pyg_computes():
    d = synthetic_events(600, 80, msg_dim=3, seed=2, burst_length=10)
    d.msg = d.msg.double()
    lazy, pyg = _pair(d.num_nodes, 3)
    assert isinstance(lazy, LazyStoreMemory) and isinstance(lazy, TGNMemory)
    assert type(lazy.msg_s_store) is EmptyEntries and len(pyg.msg_s_store) == d.num_nodes
    for mem in (lazy, pyg):
        mem.train()
    for a in range(0, 450, 50):  # training batches: the stored messages update the read memory
        src, dst, t, msg = d.src[a:a + 50], d.dst[a:a + 50], d.t[a:a + 50], d.msg[a:a + 50]
        n_id = torch.cat([src, dst]).unique()
        got, want = lazy(n_id), pyg(n_id)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), a
        for mem in (lazy, pyg):
            mem.update_state(src, dst, t, msg)
    touched = torch.cat([d.src[:450], d.dst[:450]]).unique().numel()
    assert len(lazy.msg_s_store) <= touched < d.num_nodes  # only the nodes that received a message
    for mem in (lazy, pyg):
        mem.train(False)  # PyG's flush: every node's stored messages applied
    assert torch.equal(lazy.memory, pyg.memory) and torch.equal(lazy.last_update, pyg.last_update)
    n_id = torch.arange(d.num_nodes)
    lazy.update_state(d.src[450:], d.dst[450:], d.t[450:], d.msg[450:])
    pyg.update_state(d.src[450:], d.dst[450:], d.t[450:], d.msg[450:])
    assert torch.equal(lazy(n_id)[0], pyg(n_id)[0])
    # a copy keeps the written entries and the empty one (checkpoints, deepcopy of the model)
    for other in (copy.deepcopy(lazy.msg_s_store), pickle.loads(pickle.dumps(lazy.msg_s_store))):
        assert type(other) is EmptyEntries and other.keys() == lazy.msg_s_store.keys()
        assert other[d.num_nodes + 5][3].shape == (0, 3)
    lazy.reset_state()
    assert len(lazy.msg_s_store) == 0 and len(lazy.msg_d_store) == 0
