"""MemoryTrainer's ``lr_scaling`` (pyg_dynscale/ctdg/lr_scaling.py): the rate the optimizer takes is the
option's (``lr * i``, ``lr * sqrt(i)``, ``lr``), epoch and memory parallelism and ``i = 1`` leave ``lr``
alone bit for bit, and a scaled run is the unscaled run at the scaled rate bit for bit."""
from __future__ import annotations

import inspect
import math

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.lr_scaling import LR_SCALINGS, lr_factor, scaled_lr
from pyg_dynscale.errors import ModelInputError

LR = 3e-3


def _trainer(par=(1, 1, 1), dropout=0.1, **kw):
    d = synthetic_events(300, 30, msg_dim=3, seed=5, burst_length=10)
    d.msg = d.msg.double()
    torch.manual_seed(2)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=dropout).double()
    return model, MemoryTrainer(model, d, batch_size=20, parallelism=par, seed=3, **kw)


def _params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _run(par, epochs=2, **kw):
    model, tr = _trainer(par, **kw)
    losses = [tr.train_epoch() for _ in range(epochs)]
    return tr, losses, _params(model), tr.memory_copy(0)[0]


def test_factor_of_each_value():
    assert lr_factor("linear", (4, 1, 1)) == 4.0 and lr_factor("sqrt", (4, 1, 1)) == 2.0
    assert lr_factor("linear", (3, 2, 2)) == 3.0  # only the mini-batch parallelism scales
    assert lr_factor("sqrt", (3, 1, 1)) == math.sqrt(3)
    assert lr_factor("none", (4, 1, 1)) == 1.0
    for value in LR_SCALINGS:
        assert lr_factor(value, (1, 2, 3)) == 1.0 and scaled_lr(LR, value, (1, 4, 2)) is LR
    for bad in ("Linear", "cube", 2, None):
        with pytest.raises(ModelInputError, match=r"lr_scaling.*use one of \['linear', 'sqrt', 'none'\]"):
            lr_factor(bad, (2, 1, 1))


@pytest.mark.parametrize("value,factor", [("linear", 2.0), ("sqrt", math.sqrt(2)), ("none", 1.0)])
def test_the_optimizer_takes_the_scaled_rate(value, factor):
    _, tr = _trainer((2, 1, 1), lr=LR, lr_scaling=value)
    assert tr.lr == LR * factor
    assert [g["lr"] for g in tr.optimizer.param_groups] == [LR * factor] * len(tr.optimizer.param_groups)


def test_default_is_linear_in_the_api_and_the_cli():
    assert inspect.signature(MemoryTrainer).parameters["lr_scaling"].default == "linear"
    from pyg_dynscale.cli import build_parser

    args = build_parser().parse_args(["train-events", "events.csv"])
    assert args.lr_scaling == "linear"
    action = next(a for a in build_parser()._subparsers._group_actions[0].choices["train-events"]._actions
                  if a.dest == "lr_scaling")
    assert tuple(action.choices) == LR_SCALINGS


def test_a_bad_value_is_refused_before_training():
    with pytest.raises(ModelInputError, match="lr_scaling.*'double'"):
        _trainer((2, 1, 1), lr_scaling="double")


@pytest.mark.parametrize("par", [(1, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_no_minibatch_parallelism_trains_the_same_bits_with_every_value(par):
    ref = _run(par, lr=LR, lr_scaling="none")
    for value in ("linear", "sqrt"):
        tr, losses, params, memory = _run(par, lr=LR, lr_scaling=value)
        assert tr.lr == LR and losses == ref[1]
        assert torch.equal(params, ref[2]) and torch.equal(memory, ref[3])


@pytest.mark.parametrize("value,factor", [("linear", 2.0), ("sqrt", math.sqrt(2))])
def test_a_scaled_run_is_the_unscaled_run_at_the_scaled_rate(value, factor):
    """(2, 1, 1) with the dropout on: the option changes the rate and nothing else (no other draw, no other
    order), and it changes the numbers (an unscaled run at ``lr`` differs)."""
    tr, losses, params, memory = _run((2, 1, 1), lr=LR, lr_scaling=value)
    _, ref_losses, ref_params, ref_memory = _run((2, 1, 1), lr=LR * factor, lr_scaling="none")
    assert losses == ref_losses and torch.equal(params, ref_params) and torch.equal(memory, ref_memory)
    _, _, plain, _ = _run((2, 1, 1), lr=LR, lr_scaling="none")
    assert (plain - params).abs().max() > 1e-6


def _events_csv(path):
    ev = synthetic_events(240, 24, msg_dim=2, seed=1)
    umax = int(ev.src.max())
    path.write_text("".join(f"{s},{t - umax - 1},{ts},0,{m[0]},{m[1]}\n" for s, t, ts, m in
                            zip(ev.src.tolist(), ev.dst.tolist(), ev.t.tolist(), ev.msg.tolist())))
    return str(path)


def _cli(argv, capsys):
    import json

    from pyg_dynscale.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, (json.loads(cap.out) if code == 0 else None), cap.err


def test_train_events_passes_the_option_reports_the_rate_and_resumes_only_with_it(tmp_path, capsys):
    """In this process (the (2, 1, 1) emulation): the report's rate is the scaled one; a checkpoint of a
    scaled run is not resumed unscaled (one line naming --lr-scaling and the checkpoint's value)."""
    csv = _events_csv(tmp_path / "events.csv")
    base = ["train-events", csv, "--parallelism", "2,1,1", "--epochs", "1", "--batch-size", "40", "--lr", "0.001",
            "--memory-dim", "4", "--time-dim", "2", "--embedding-dim", "4", "--json", "--no-progress"]
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt")]
    code, r, err = _cli(base + ckpt, capsys)
    assert code == 0, err
    assert r["lr"] == 0.001 and r["lr_scaling"] == "linear" and r["lr_in_effect"] == 0.002
    code, r, _ = _cli(base + ["--lr-scaling", "sqrt"], capsys)
    assert r["lr_scaling"] == "sqrt" and r["lr_in_effect"] == 0.001 * math.sqrt(2)
    code, _, err = _cli(base + ckpt + ["--resume", "--lr-scaling", "none", "--epochs", "2"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "lr_scaling: checkpoint 'linear', this run 'none' (--lr-scaling)" in err and "--lr-scaling linear" in err
