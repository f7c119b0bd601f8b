"""``MemoryTrainer.state_dict`` / ``load_state_dict``: a fresh trainer (other seed, other parameters) that loads a
trainer's state at an epoch boundary continues bit for bit (float64; losses, every batch loss, val / test metrics,
parameters, every memory copy): one process with (1, 1, 1) (the global stream's negatives and dropout), (1, 1, 2)
(two persistent memory copies) and (1, 2, 1) (epoch parallelism, per-trainer dropout seeds); and what a state
lacks or holds for another layout is refused."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.errors import ModelInputError


def _trainer(par, seed=1, static=None, threads=False):
    d = synthetic_events(300, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(4 + seed)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6).double()  # dropout 0.1: drawn
    return MemoryTrainer(model, d, batch_size=20, lr=0.01, parallelism=par, seed=seed, static_memory=static,
                         memory_service=threads, prefetch=threads)


def _epoch(tr):
    loss = tr.train_epoch()
    return loss, tr.batch_losses.clone(), tr.evaluate("val")


def _continue(tr):
    out = [_epoch(tr), _epoch(tr)]
    return out, tr.evaluate("test"), [p.detach().clone() for p in tr.optimizer_params], \
        [tr.memory_copy(c) for c in (range(tr.parallelism[2]))]


def _same(a, b):
    (ea, ta, pa, ma), (eb, tb, pb, mb) = a, b
    for (la, ba, va), (lb, bb, vb) in zip(ea, eb):
        assert la == lb and torch.equal(ba, bb) and va == pytest.approx(vb, abs=0, rel=0, nan_ok=True)
    assert ta == pytest.approx(tb, abs=0, rel=0, nan_ok=True)
    assert all(torch.equal(x, y) for x, y in zip(pa, pb))
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(ma, mb))


@pytest.mark.parametrize("par,static,threads", [((1, 1, 1), None, False), ((1, 1, 2), "learnable", False),
                                                ((1, 2, 1), None, False), ((1, 1, 1), None, True)])
def test_a_fresh_trainer_continues_bit_for_bit(par, static, threads):
    """``threads``: the memory service and the neighbour prefetcher (their threads hold nothing across epochs)."""
    tr = _trainer(par, static=static, threads=threads)
    _epoch(tr)
    state = copy.deepcopy(tr.state_dict())  # as torch's: references to the live tensors
    want = _continue(tr)  # first: the random stream is the process's global one
    tr.close()
    resumed = _trainer(par, seed=9, static=static, threads=threads)  # other parameters, other random stream
    resumed.seed = tr.seed  # the seed is the trainer's setting (the CLI checks it), not part of the state
    resumed.load_state_dict(state)
    _same(want, _continue(resumed))
    resumed.close()


def test_the_state_is_what_makes_it_exact():
    """Each part of the saved stream state is needed: without the message stores, the neighbour state or the
    random state, the continuation differs."""
    tr = _trainer((1, 1, 2))
    _epoch(tr)
    state = copy.deepcopy(tr.state_dict())
    want = _continue(tr)[0][0][0]
    for drop in ("store_s/", "neighbors", "rng"):
        other = _trainer((1, 1, 2))
        s = {"modules": state["modules"], "optimizer": state["optimizer"], "stream": dict(state["stream"])}
        for key in [k for k in s["stream"] if drop in k]:
            x = s["stream"][key]
            s["stream"][key] = torch.get_rng_state() if drop == "rng" else torch.zeros_like(x)
        if drop == "rng":
            torch.manual_seed(123)
            s["stream"]["rank0/rng"] = torch.get_rng_state()
        other.load_state_dict(copy.deepcopy(s))
        assert _continue(other)[0][0][0] != want, drop


def test_a_state_of_another_layout_is_refused():
    tr = _trainer((1, 1, 2))
    _epoch(tr)
    state = tr.state_dict()
    with pytest.raises(ModelInputError, match="holds memory copies"):
        _trainer((1, 1, 1)).load_state_dict(state)
    del state["stream"]["rank0/rng"]
    with pytest.raises(ModelInputError, match="rank0/rng"):
        _trainer((1, 1, 2)).load_state_dict(state)


def test_a_state_before_the_first_epoch_starts_from_zero():
    tr = _trainer((1, 1, 2))
    state = copy.deepcopy(tr.state_dict())
    assert not bool(state["stream"]["rank0/started"]) and "copy1/memory" in state["stream"]
    want = _continue(tr)
    resumed = _trainer((1, 1, 2), seed=9)
    resumed.seed = tr.seed
    resumed.load_state_dict(state)
    _same(want, _continue(resumed))


def test_the_memory_saved_is_the_end_of_training_not_the_evaluated_one():
    """The state is taken after the validation pass walked the live copy on: what is saved (and evaluated
    after a resume) is the copy at the end of training."""
    tr = _trainer((1, 1, 1))
    _epoch(tr)
    state = copy.deepcopy(tr.state_dict())
    want = tr.evaluate("test"), tr.evaluate("val")
    resumed = _trainer((1, 1, 1), seed=9)
    resumed.load_state_dict(state)
    got = resumed.evaluate("test"), resumed.evaluate("val")
    assert got == want
