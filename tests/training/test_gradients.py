"""pyg_dynscale.training.gradients: the summed DDP hook and its byte count, Pipe-SGD's delayed gradients,
the flat all-reduce, and the module DDP wraps -- in float64, compared exactly with the sums written here."""
from __future__ import annotations

import gc

import pytest
import torch

from pyg_dynscale.training import ByteLedger
from pyg_dynscale.training.gradients import DelayedGradients, ShareModule, all_reduce_flat, wrap_ddp
from pyg_dynscale.training.launch import spawn


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()


def _inputs(rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(5, 3, generator=g, dtype=torch.float64) * (1 + rank)  # ranks differ: a mean != the sum


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return (model(x) ** 2).sum() * 0.5


def _local_grads(model: torch.nn.Module, x: torch.Tensor) -> list:
    model.zero_grad(set_to_none=True)
    _loss(model, x).backward()
    out = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out


class _Owner:
    """Stands for a trainer: it owns the model and computes a rank's loss share."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def share(self, x: torch.Tensor) -> torch.Tensor:
        return _loss(self.model, x)


def _summed_hook(rank: int, world: int) -> dict:
    model = _model()
    owner = _Owner(model)
    ledger = ByteLedger(("gradients",))
    ddp = wrap_ddp(ShareModule(owner.share, model=model), ledger)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    setup = ledger["setup"]
    expected = [sum(gs) for gs in zip(*(_local_grads(_model(), _inputs(r, 0)) for r in range(world)))]
    ledger.mark()
    ddp(_inputs(rank, 0)).backward()
    got = [p.grad.detach().clone() for p in model.parameters()]
    mean = [e / world for e in expected]
    return {"equal": all(torch.equal(g, e) for g, e in zip(got, expected)),
            "is_mean": all(torch.equal(g, m) for g, m in zip(got, mean)),
            "gradients": ledger.since()["gradients"], "param_bytes": param_bytes, "setup": setup}


def _delayed(rank: int, world: int) -> dict:
    model = _model()
    owner = _Owner(model)
    ledger = ByteLedger()
    delayed = DelayedGradients(model.parameters())
    ddp = wrap_ddp(ShareModule(owner.share, model=model), ledger, delayed=delayed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w0 = [p.detach().clone() for p in model.parameters()]
    after = []
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        ddp(_inputs(rank, step)).backward()
        delayed.step(opt)
        after.append([p.detach().clone() for p in model.parameters()])
    delayed.flush(opt)
    after.append([p.detach().clone() for p in model.parameters()])
    # by hand: step 0 changes nothing, so g_0 and g_1 are both taken at w0; step 1 applies g_0, the flush g_1
    ref = _model()
    g = [[sum(gs) for gs in zip(*(_local_grads(ref, _inputs(r, s)) for r in range(world)))] for s in range(2)]
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    want = [[p.detach().clone() for p in ref.parameters()]]
    for s in range(2):
        for p, gs in zip(ref.parameters(), g[s]):
            p.grad = gs.clone()
        ref_opt.step()
        want.append([p.detach().clone() for p in ref.parameters()])
    same = [all(torch.equal(a, b) for a, b in zip(x, y)) for x, y in zip(after, want)]
    return {"same": same, "step0_unchanged": all(torch.equal(a, b) for a, b in zip(after[0], w0)),
            "gradients": ledger["gradients"],
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}


def _flat(rank: int, world: int) -> dict:
    # the same loss through DDP's summed hook and through the flat all-reduce
    model_ddp, model_flat = _model(), _model()
    owner = _Owner(model_ddp)  # alive while DDP runs: the module holds it weakly
    ddp = wrap_ddp(ShareModule(owner.share, model=model_ddp), ByteLedger())
    ddp(_inputs(rank, 3)).backward()
    ledger = ByteLedger()
    _loss(model_flat, _inputs(rank, 3)).backward()
    nbytes = all_reduce_flat(list(model_flat.parameters()), None, ledger)
    equal_ddp = all(torch.equal(a.grad, b.grad) for a, b in zip(model_ddp.parameters(), model_flat.parameters()))
    # a parameter with a gradient on rank 1 only gets rank 1's (rank 0 sends zeros); one without on any rank
    # keeps None
    a = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    b = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    if rank == 1:
        a.grad = torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
    calls = []

    def reduce(x):  # a transport's all_reduce: a new tensor, the input untouched
        calls.append(x.dtype)
        out = x.clone()
        torch.distributed.all_reduce(out)
        return out

    nb = all_reduce_flat([a, b], all_reduce=reduce, all_reduce_host=reduce)
    return {"equal_ddp": equal_ddp, "nbytes": nbytes, "ledger": ledger["gradients"],
            "param_bytes": sum(p.numel() * p.element_size() for p in model_flat.parameters()),
            "n_params": len(list(model_flat.parameters())),
            "a": a.grad.tolist(), "b_none": b.grad is None, "calls": [str(c) for c in calls], "nb": nb}


def test_the_summed_hook_is_the_sum_of_the_ranks_gradients_and_counts_the_bucket_bytes():
    for out in spawn(_summed_hook, 2):
        assert out["equal"] and not out["is_mean"]
        assert out["gradients"] == out["param_bytes"]  # one backward: every gradient byte once
        assert out["setup"] == out["param_bytes"]  # the construction's broadcast


def test_delayed_gradients_apply_the_previous_steps_sum():
    for out in spawn(_delayed, 2):
        assert out["step0_unchanged"]
        assert out["same"] == [True, True, True]  # w0, w0 - lr g0, w0 - lr g0 - lr g1
        assert out["gradients"] == 2 * out["param_bytes"]  # two steps' all-reduces


def test_the_flat_all_reduce_equals_ddps_sum_and_keeps_missing_gradients_none():
    for out in spawn(_flat, 2):
        assert out["equal_ddp"]
        assert out["nbytes"] == out["ledger"] == out["param_bytes"] + 4 * out["n_params"]  # flat + int32 flags
        assert out["a"] == [1.5, -2.0, 0.25] and out["b_none"]
        assert out["calls"] == ["torch.int32", "torch.float64"]  # the flags on the host first, then the values
        assert out["nb"] == 5 * 8 + 2 * 4


def test_delayed_gradients_on_one_process_swap_in_the_previous_gradient():
    p = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))
    q = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))  # never gets a gradient
    opt = torch.optim.SGD([p, q], lr=1.0)
    delayed = DelayedGradients([p, q])
    g = [torch.tensor([1.0, 2.0], dtype=torch.float64), torch.tensor([10.0, 20.0], dtype=torch.float64)]
    seen = []
    for s in range(2):
        p.grad = g[s].clone()
        delayed.step(opt)
        seen.append(p.detach().clone())
    delayed.flush(opt)
    assert torch.equal(seen[0], torch.zeros(2, dtype=torch.float64))  # step 0 applies nothing
    assert torch.equal(seen[1], -g[0])  # step 1 applies g_0
    assert torch.equal(p.detach(), -g[0] - g[1])  # the flush applies g_1
    assert q.grad is None and torch.equal(q.detach(), torch.zeros(1, dtype=torch.float64))
    assert delayed.steps == 0  # the next epoch starts afresh


def test_share_module_registers_in_order_and_holds_its_owner_weakly():
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    owner = _Owner(a)
    share = ShareModule(owner.share, second=b, first=a, absent=None)
    assert [n for n, _ in share.named_children()] == ["second", "first"]
    assert share.absent is None
    x = torch.ones(1, 2)
    assert torch.equal(share(x), _loss(a, x))
    del owner
    gc.collect()
    with pytest.raises(TypeError):  # the weak reference died with its owner: no owner <-> DDP cycle
        share(x)
    plain = ShareModule(lambda x: x.sum(), m=a)  # a plain function is held as it is
    assert plain(torch.ones(3)).item() == 3.0
