"""MemoryCopies on its own (the trainer's emulation of memory parallelism k): the live copy swaps with the
held snapshots, an epoch starts every copy from zero once and later comes back to the end of training, a
copy this process does not hold is a typed error."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.errors import ModelInputError


def _trainer():
    d = synthetic_events(200, 20, msg_dim=3, seed=2, burst_length=10)
    d.msg = d.msg.double()
    torch.manual_seed(1)
    model = TGN(d.num_nodes, 3, memory_dim=4, time_dim=2, embedding_dim=4).double()
    return MemoryTrainer(model, d, batch_size=20, lr=0.01, parallelism=(1, 1, 2))


def test_activate_swaps_the_live_copy_with_a_held_one():
    tr = _trainer()
    copies = tr.copies
    assert copies.held == [0, 1] and copies.live == 0 and not copies.started
    copies.begin_epoch()  # every copy from zero
    assert copies.started and copies.copies[0] is None and copies.copies[1] is not None
    zero = copies.snapshot()
    copies.advance(0, 20, False)  # copy 0 takes the first batch (memory updated at once: not training)
    walked = copies.snapshot()
    assert not torch.equal(walked["e_id"], zero["e_id"])
    assert not torch.equal(walked["memory"]["last_update"], zero["memory"]["last_update"])
    copies.activate(1)
    assert copies.live == 1 and copies.copies[1] is None and copies.copies[0] is not None
    assert torch.equal(copies.neighbors.e_id, zero["e_id"])  # copy 1: still zero
    assert torch.equal(tr.memory.last_update, zero["memory"]["last_update"])
    copies.activate(0)
    assert torch.equal(copies.neighbors.e_id, walked["e_id"])
    assert torch.equal(tr.memory.last_update, walked["memory"]["last_update"])
    assert torch.equal(copies.copy(1)[1], zero["memory"]["last_update"])
    with pytest.raises(ModelInputError, match="copy"):
        copies.copy(2)


def test_an_epoch_comes_back_to_the_end_of_training():
    tr = _trainer()
    tr.train_epoch()
    end = tr.copies.train_end
    tr.evaluate("test")  # walks the live copy on
    assert tr.copies.position == "test"
    assert not torch.equal(tr.memory.last_update, end["memory"]["last_update"])
    tr.copies.begin_epoch()
    assert torch.equal(tr.memory.last_update, end["memory"]["last_update"]) and tr.copies.training
