"""The embedding's time encoder (issue 38, item 3): PyG's example and ``TGN`` give the embedding the memory's
``time_enc`` (one module); a TGN assembled module by module (each copied on its own) gives the embedding a
second encoder, which trains apart from the memory's: the batch losses leave the shared model's after the
first batches. ``MemoryTrainer`` says so once (a ``UserWarning`` naming the fix), and the fix -- the
embedding's ``time_enc`` set to ``memory.time_enc`` -- trains the shared model bit for bit."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch_geometric.nn.models.tgn import TimeEncoder

from pyg_dynscale.ctdg import TGN, GraphAttentionEmbedding, LinkPredictor, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.models import time_encoder_warning


def _data():
    d = synthetic_events(300, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    return d


def _model(d):
    torch.manual_seed(4)
    return TGN(d.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8).double()


def _trainer(d, model=None, **modules):
    return MemoryTrainer(model, d, batch_size=30, lr=1e-2, seed=0, mrr_negatives=0, **modules)


def _epoch(tr) -> float:
    """One epoch from the same global random stream (negatives, dropout) whatever ran before."""
    torch.manual_seed(0)
    return tr.train_epoch()


def _quiet(fn):
    """``fn()`` with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


def _copied(d) -> dict:
    """The three modules copied one by one: the embedding's encoder becomes a copy of the memory's."""
    m = _model(d)
    return {"memory": copy.deepcopy(m.memory), "gnn": copy.deepcopy(m.gnn), "link_pred": copy.deepcopy(m.link_pred)}


def test_the_shared_encoder_is_quiet_and_a_copied_one_warns_once_and_diverges():
    d = _data()
    shared = _quiet(lambda: _trainer(d, _model(d)))
    parts = _copied(d)
    assert parts["gnn"].time_enc is not parts["memory"].time_enc  # what copying one by one does
    with pytest.warns(UserWarning) as caught:
        apart = _trainer(d, **parts)
    said = [str(w.message) for w in caught if "time_enc" in str(w.message)]
    assert len(said) == 1 and "\n" not in said[0]
    assert said[0].startswith("gnn.time_enc is a copy of memory.time_enc") and "time_enc=memory.time_enc" in said[0]
    _epoch(shared)
    _epoch(apart)
    gap = (shared.batch_losses - apart.batch_losses).abs()
    assert gap[0] == 0  # the first batch reads equal encoders
    assert gap[1:].max() > 1e-4  # then the two encoders train apart: the silent divergence the warning names


def test_the_fix_the_warning_names_trains_the_shared_model_bit_for_bit():
    d = _data()
    shared = _trainer(d, _model(d))
    parts = _copied(d)
    parts["gnn"].time_enc = parts["memory"].time_enc
    fixed = _quiet(lambda: _trainer(d, **parts))
    for _ in range(2):
        assert _epoch(shared) == _epoch(fixed)
        assert torch.equal(shared.batch_losses, fixed.batch_losses)


def test_an_encoder_of_its_own_is_named_as_such_and_an_embedding_without_one_is_not_judged():
    d = _data()
    m = _model(d)
    torch.manual_seed(9)
    own = GraphAttentionEmbedding(8, 8, 3, TimeEncoder(4).double()).double()
    message = time_encoder_warning(m.memory, own)
    assert message.startswith("gnn.time_enc is a time encoder of its own, not memory.time_enc")
    with pytest.warns(UserWarning, match=r"^gnn\.time_enc is a time encoder of its own"):
        _trainer(d, memory=m.memory, gnn=own, link_pred=m.link_pred)

    class NoTime(torch.nn.Module):  # an embedding that encodes no time: nothing to compare
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8).double()

        def forward(self, x, last_update, edge_index, t, msg):
            return self.lin(x)

    assert time_encoder_warning(m.memory, NoTime()) is None
    assert time_encoder_warning(m.memory, m.gnn) is None
    _quiet(lambda: _trainer(d, memory=m.memory, gnn=NoTime(), link_pred=LinkPredictor(8).double()))
