"""The neighbour prefetcher: the next step's lookups from a mirror loader on a thread give the numbers of
the trainer's own lookups."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events


def _train(par, prefetch, dropout, service=False):
    d = synthetic_events(400, 40, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(4)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=dropout).double()
    tr = MemoryTrainer(model, d, batch_size=25, lr=1e-2, parallelism=par, prefetch=prefetch, memory_service=service)
    out = []
    for _ in range(2):
        out.append((tr.train_epoch(), tr.batch_losses.clone(), tr.evaluate("val")))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lookups = tr.prefetcher.lookups if prefetch else 0
    tr.close()
    return out, params, tr.memory_copy(0), lookups


@pytest.mark.parametrize("par,dropout,service", [((2, 1, 1), 0.1, False), ((1, 1, 1), 0.0, True)])
def test_prefetched_lookups_give_the_same_training(par, dropout, service):
    ref = _train(par, False, dropout)
    got = _train(par, True, dropout, service)
    for (l0, b0, v0), (l1, b1, v1) in zip(ref[0], got[0]):
        assert l0 == l1 and torch.equal(b0, b1) and v0 == v1
    assert torch.equal(ref[1], got[1])
    assert torch.equal(ref[2][0], got[2][0]) and torch.equal(ref[2][1], got[2][1])
    steps = len(ref[0][0][1])
    assert got[3] >= 2 * (steps - 1)  # every local batch after the first of an epoch was prefetched


def test_prefetch_refuses_epoch_parallelism():
    d = synthetic_events(100, 20, msg_dim=3, seed=1)
    model = TGN(d.num_nodes, 3, memory_dim=4, time_dim=2, embedding_dim=4)
    with pytest.raises(NotImplementedError, match="prefetch"):
        MemoryTrainer(model, d, parallelism=(1, 2, 1), prefetch=True)
