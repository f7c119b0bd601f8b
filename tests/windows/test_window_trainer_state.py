"""``WindowTrainer.state_dict`` / ``load_state_dict``: a fresh trainer (other initial parameters) that loads a
trainer's state at an epoch boundary continues bit for bit (float64: every batch loss, test metrics,
parameters): a seq2seq model with its own decoder, shuffled windows and teacher forcing (drawn from seed and
epoch), and a head with dropout (drawn from the global random stream, which the state carries)."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.windows import series_static as _series_static


def _trainer(init_seed, kind):
    sig = _series_static()
    torch.manual_seed(init_seed)
    enc = TGCN(1, 5).double()
    if kind == "seq2seq":
        kw = dict(horizon=3, decoder=TGCN(1, 5).double(), teacher_forcing=0.5, head=torch.nn.Linear(5, 1).double())
    else:
        kw = dict(head=torch.nn.Sequential(torch.nn.Dropout(0.3), torch.nn.Linear(5, 1)).double())
    return WindowTrainer(enc, sig, lags=3, batch_size=4, lr=0.05, seed=7, shuffle=True, ratio=(0.6, 0.0, 0.4),
                         **kw, optimizer="sgd")


def _continue(tr):
    losses = []
    for _ in range(2):
        losses.append(tr.train_epoch())
        losses += tr.batch_losses
    return losses, tr.evaluate("test"), [p.detach().clone() for p in tr.modules.parameters()]


@pytest.mark.parametrize("kind", ["seq2seq", "dropout"])
def test_a_fresh_trainer_continues_bit_for_bit(kind):
    tr = _trainer(0, kind)
    tr.train_epoch()
    state = copy.deepcopy(tr.state_dict())
    want = _continue(tr)  # first: the random stream is the process's global one
    resumed = _trainer(5, kind)
    assert resumed.epoch == 0 and not all(torch.equal(a, b) for a, b in zip(resumed.modules.parameters(), want[2]))
    resumed.load_state_dict(state)
    got = _continue(resumed)
    assert got[0] == want[0] and got[1] == want[1]
    assert all(torch.equal(a, b) for a, b in zip(got[2], want[2]))
    assert resumed.epoch == tr.epoch == 3


def test_the_epoch_and_random_state_are_what_makes_it_exact():
    for kind, drop in (("seq2seq", "epoch"), ("dropout", "rng")):
        tr = _trainer(0, kind)
        tr.train_epoch()
        state = copy.deepcopy(tr.state_dict())
        want = _continue(tr)[0]
        if drop == "epoch":
            state["progress"]["rank0/epoch"] = torch.tensor(0)
        else:
            torch.manual_seed(99)
            state["progress"]["rank0/rng"] = torch.get_rng_state()
        resumed = _trainer(0, kind)
        resumed.load_state_dict(state)
        assert _continue(resumed)[0] != want, drop


def test_a_state_without_its_parts_is_refused():
    tr = _trainer(0, "dropout")
    state = tr.state_dict()
    del state["progress"]["rank0/rng"]
    with pytest.raises(ModelInputError, match="rank0/rng"):
        _trainer(0, "dropout").load_state_dict(state)
    with pytest.raises(ModelInputError, match="optimizer"):
        _trainer(0, "dropout").load_state_dict({"modules": {}, "progress": {}})
