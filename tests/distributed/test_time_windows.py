"""Gradient checkpointing on DistributedTrainer's decomposed path (windows of
snapshots, distributed.time_windows): the same losses, gradients, parameters
and predictions as FusedTrainer without checkpointing (float64), measured
bytes == the whole plan's prediction (the recomputation sends nothing), on
2 and 3 spawned gloo ranks; what cannot run in windows is refused."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases

EPOCHS = 2
MODELS = ["tgcn1", "tgcn2", "stacked_h0"] + (["pygt_tgcn"] if cases.HAVE_PYGT else [])
SCHEMES = ["pss", "pts", "pss-ts", "pgc", "random", "empty_rank"]


def _named(m, head):
    items = list(m.named_parameters())
    if head is not None:
        items += [("head." + n, p) for n, p in head.named_parameters()]
    return items


def _train(tr, m, head) -> dict:
    losses, grads = [], None
    for e in range(EPOCHS):
        losses.append(tr.train_epoch())
        if e == 0:
            grads = {n: p.grad.clone() for n, p in _named(m, head) if p.grad is not None}
    return {"losses": losses, "grads": grads, "params": {n: p.detach().clone() for n, p in _named(m, head)},
            "pred": tr.predict()}


def _run(rank: int, world_size: int, configs: list) -> list:
    sig = cases.signal()
    out = []
    for name, scheme, part, every, extra in configs:
        m, head, loss = cases.model(name)
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                                h0=cases.initial_state(name, sig), checkpoint_every=every, **extra)
        res = _train(tr, m, head)
        res["windows"] = len(tr.windows)
        tr.train_epoch()
        res["traffic"] = tr.traffic()
        out.append(res)
    return out


REFS: dict = {}


def _reference(name: str) -> dict:
    if name not in REFS:
        sig = cases.signal()
        m, head, loss = cases.model(name)
        tr = FusedTrainer(m, sig, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                          h0=cases.initial_state(name, sig))
        REFS[name] = _train(tr, m, head)
    return REFS[name]


def _close(a, b, what):
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= 1e-9 * (1 + float(b.abs().max() if b.numel() else 0)), f"{what}: max |diff| {err:.3g}"


def _configs(R: int) -> list:
    from pyg_dynscale.nn import adapt

    sig = cases.signal()
    out = []
    for name in MODELS:
        m, _, _ = cases.model(name)
        pattern = adapt(m, check=False).dependency_pattern(bytes_per_element=8)
        for i, scheme in enumerate(SCHEMES):
            every = (1, 2, 4)[i % 3]
            out.append((name, scheme, cases.make_partition(sig, scheme, R, pattern), every, {}))
    m, _, _ = cases.model("stacked_h0")
    pattern = m.dependency_pattern(bytes_per_element=8)
    # the raw-feature halo exchanged every epoch, inside the windows
    out.append(("stacked_h0", "random", cases.make_partition(sig, "random", R, pattern), 2, {"input_halo": "exchange"}))
    return out


@pytest.mark.parametrize("R", [2, 3])
def test_checkpointed_distributed_equals_single_process(R):
    configs = _configs(R)
    results = spawn(_run, R, configs, timeout=240)
    for i, (name, scheme, _, every, extra) in enumerate(configs):
        tag = f"{name}/{scheme}/R={R}/every={every}/{extra}"
        ref = _reference(name)
        r0 = results[0][i]
        assert r0["windows"] == -(-cases.T // every) - (1 if every == 1 else 0), tag  # t=3 is empty: no window
        for rank in range(R):
            assert results[rank][i]["losses"] == r0["losses"], tag
        for a, b in zip(r0["losses"], ref["losses"]):
            assert abs(a - b) <= 1e-10 * (1 + abs(b)), (tag, r0["losses"], ref["losses"])
        assert r0["grads"].keys() == ref["grads"].keys(), tag
        for n in ref["grads"]:
            _close(r0["grads"][n], ref["grads"][n], f"{tag} grad {n}")
        for n in ref["params"]:
            _close(r0["params"][n], ref["params"][n], f"{tag} param {n}")
        _close(r0["pred"], ref["pred"], f"{tag} predict")
        t = r0["traffic"]
        for e in t["exchanges"]:  # the windows' exchanges and carries add up to the whole plan, both directions
            assert e["measured_forward"] == e["predicted_forward"], (tag, e)
            assert e["measured_backward"] == e["predicted_backward"], (tag, e)
        assert t["load"]["measured"] == t["load"]["predicted"], (tag, t["load"])
        if scheme == "random":  # a random owner array cuts temporal edges between windows too
            assert t["measured"]["temporal"] > 0, tag


def _refusals(rank: int, world_size: int) -> list:
    from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError

    sig = cases.signal()
    out = []
    for name, kwargs, exc in [("dysat_mse", {}, UnsupportedOptionError), ("mpnn_dgc", {}, UnsupportedOptionError),
                              ("tgcn1", {"fusion": "none"}, ModelInputError), ("tgcn1", {"checkpoint_every": 0},
                                                                              ModelInputError)]:
        m, head, loss = cases.model(name)
        part = cases.make_partition(sig, "random", world_size, None)
        kw = {"checkpoint_every": 2, **kwargs}
        try:
            DistributedTrainer(m, sig, part, head=head, loss=loss, **kw)
            out.append((name, "no error"))
        except exc as e:
            out.append((name, str(e)))
    return out


def test_windows_it_cannot_run_are_refused():
    res = spawn(_refusals, 2)[0]
    assert "attention" in res[0][1]
    assert "BatchNorm" in res[1][1]
    assert "fusion" in res[2][1] and "one fused call" in res[2][1]
    assert "checkpoint_every" in res[3][1]
