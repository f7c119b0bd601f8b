"""gradient_sync="delayed" (Sven §7.4, Pipe-SGD of width two): step s applies step s-1's summed gradient.

The one-process emulation equals a reference of the update rule written here (a sync trainer whose
optimizer keeps the previous gradient and feeds it to a fresh Adam), it is not the synchronous run, and
2 gloo ranks (DDP with the delayed comm hook) equal the emulation in float64: losses of every step,
parameters after every optimizer step, memory.
"""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.gradients import DelayedGradients
from pyg_dynscale.training.launch import spawn
from pyg_dynscale.errors import ModelInputError

EPOCHS = 2


class ReferenceDelayedAdam:
    r"""The update rule by hand: :math:`\omega_{s+1} = \omega_s - \mathrm{Adam}(g_{s-1})`; step 0
    applies nothing, the end of an epoch applies the last gradient (:meth:`end_epoch`)."""

    def __init__(self, params, lr):
        self.params = list(params)
        self.adam = torch.optim.Adam(self.params, lr=lr)
        self.previous = None

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        current = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        if self.previous is not None:
            for p, g in zip(self.params, self.previous):
                p.grad = g
            self.adam.step()
        self.previous = current

    def end_epoch(self):
        for p, g in zip(self.params, self.previous):
            p.grad = g
        self.adam.step()
        self.previous = None


def _data():
    d = synthetic_events(300, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    return d


def _trainer(par, sync, reference=False, **kw):
    torch.manual_seed(4)
    model = TGN(30, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    tr = MemoryTrainer(model, _data(), batch_size=25, lr=1e-2, parallelism=par, seed=1, mrr_negatives=0,
                       gradient_sync=sync, **kw)
    if reference:
        tr.optimizer = ReferenceDelayedAdam(tr.optimizer_params, lr=tr.lr)  # the rate in effect (lr_scaling)
    return tr


def _params(tr):
    return torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])


def _run(par, sync, rank=0, world=1, reference=False, **kw):
    """Losses of every step and epoch, parameters after every optimizer step, memory after each epoch."""
    tr = _trainer(par, sync, reference, **kw)
    opt = tr.optimizer.adam if reference else tr.optimizer
    records, step = [], opt.step

    def recorded_step(*a, **kw):
        out = step(*a, **kw)
        records.append(_params(tr))
        return out

    opt.step = recorded_step
    losses, batch, memory = [], [], []
    for _ in range(EPOCHS):
        losses.append(tr.train_epoch())
        if reference:
            tr.optimizer.end_epoch()
        batch += tr.batch_losses.tolist()
        memory.append(tr.memory_copy() if kw else tr.memory_copy(rank // (par[0] * par[1]) if world > 1 else 0))
        if tr._delayed is not None:
            assert tr._delayed._in_flight == [] and tr._delayed.steps == 0  # nothing crosses the epoch
    out = {"losses": losses, "batch": batch, "records": records, "memory": memory, "params": _params(tr),
           "steps": len(tr.schedule.steps()), "stats": tr.stats()}
    tr.close()
    return out


@pytest.mark.parametrize("par", [(1, 1, 1), (2, 1, 1)])
def test_emulation_equals_the_reference_update_rule(par):
    got = _run(par, "delayed")
    ref = _run(par, "sync", reference=True)
    # as many optimizer steps per epoch as steps (step 0 none, one more at the end)
    assert len(got["records"]) == len(ref["records"]) == EPOCHS * got["steps"]
    for a, b in zip(got["losses"] + got["batch"], ref["losses"] + ref["batch"]):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
    for a, b in zip(got["records"], ref["records"]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    for (m, last), (m_ref, last_ref) in zip(got["memory"], ref["memory"]):
        torch.testing.assert_close(m, m_ref, atol=1e-9, rtol=0)
        assert torch.equal(last, last_ref)


def test_delayed_is_not_sync():
    got, sync = _run((2, 1, 1), "delayed"), _run((2, 1, 1), "sync")
    assert got["batch"][0] == sync["batch"][0]  # the same start
    assert max(abs(a - b) for a, b in zip(got["batch"], sync["batch"])) > 1e-4
    assert (got["params"] - sync["params"]).abs().max() > 1e-4


def test_a_parameter_without_gradient_in_some_steps():
    """The emulation swaps .grad per parameter: one without a gradient stays without one a step later."""
    torch.manual_seed(0)
    used, unused = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(2))
    delayed = DelayedGradients([used, unused])
    ref_used, ref_unused = torch.nn.Parameter(used.detach().clone()), torch.nn.Parameter(unused.detach().clone())
    ref = ReferenceDelayedAdam([ref_used, ref_unused], lr=0.1)
    opt = torch.optim.Adam([used, unused], lr=0.1)
    for s in range(5):
        for params, o, stepper in (((used, unused), opt, lambda: delayed.step(opt)),
                                   ((ref_used, ref_unused), ref, ref.step)):
            o.zero_grad()
            loss = (params[0] ** 2).sum() + (params[1].sum() if s in (1, 3) else 0.0)
            loss.backward()
            stepper()
        torch.testing.assert_close(used, ref_used, atol=1e-12, rtol=0)
        torch.testing.assert_close(unused, ref_unused, atol=1e-12, rtol=0)
    delayed.flush(opt)
    ref.end_epoch()
    torch.testing.assert_close(used, ref_used, atol=1e-12, rtol=0)
    torch.testing.assert_close(unused, ref_unused, atol=1e-12, rtol=0)


def test_bad_gradient_sync_is_a_typed_error():
    with pytest.raises(ModelInputError, match="gradient_sync"):
        _trainer((1, 1, 1), "async")


CASES = [(2, 1, 1), (1, 1, 2)]


def _ranks(rank, world):
    torch.set_num_threads(1)
    out = [_run(par, "delayed", rank, world) for par in CASES]
    sync = _run((2, 1, 1), "sync", rank, world)
    # Sven's partitioned memory, its all-to-alls issued while the previous step's all-reduce is in flight
    sven = _run((2, 1, 1), "delayed", rank, world, memory_placement="sven", partition="interval")
    return out, sync["stats"]["gradients"], sven


def test_two_ranks_equal_the_delayed_emulation():
    single = [_run(par, "delayed") for par in CASES]
    per_rank = spawn(_ranks, 2, timeout=120)
    for c, (par, ref) in enumerate(zip(CASES, single)):
        runs = [per_rank[r][0][c] for r in range(2)]
        assert len(runs[0]["records"]) == len(ref["records"]) == EPOCHS * ref["steps"]
        for a, b in zip(runs[0]["losses"] + runs[0]["batch"], ref["losses"] + ref["batch"]):
            assert math.isclose(a, b, rel_tol=0, abs_tol=1e-9), par
        for run in runs:
            for a, b in zip(run["records"], ref["records"]):
                torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
        for r, run in enumerate(runs):
            m, last = run["memory"][-1]
            copy = r // (par[0] * par[1])
            if par[2] == 1 or copy == 0:  # the emulation's memory_copy(0)
                torch.testing.assert_close(m, ref["memory"][-1][0], atol=1e-9, rtol=0)
                assert torch.equal(last, ref["memory"][-1][1])
        # the same all-reduces, counted as sum_hook counts them
        assert runs[0]["stats"]["gradients"] > 0
        if par == (2, 1, 1):
            assert runs[0]["stats"]["gradients"] == per_rank[0][1]
    ref = single[0]  # (2, 1, 1)
    for r in range(2):
        sven = per_rank[r][2]
        for a, b in zip(sven["losses"] + sven["batch"], ref["losses"] + ref["batch"]):
            assert math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
        for a, b in zip(sven["records"], ref["records"]):
            torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
        torch.testing.assert_close(sven["memory"][-1][0], ref["memory"][-1][0], atol=1e-9, rtol=0)
