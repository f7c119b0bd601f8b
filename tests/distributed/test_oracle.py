"""The oracle: DistributedTrainer == FusedTrainer (float64), for every model x
scheme x world size, on spawned gloo processes; measured bytes == plan bytes;
parameters bitwise identical across ranks."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.runtime import FusedTrainer
from tests.helpers import distributed_cases as cases

EPOCHS = 3


def _run(rank: int, world_size: int, configs: list) -> list:
    sig = cases.signal()
    out = []
    for name, scheme, part, fusion in configs:
        m, head, loss = cases.model(name)
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name), fusion=fusion,
                                h0=cases.initial_state(name, sig))
        losses, grads, steps = [], None, []
        for e in range(EPOCHS):
            losses.append(tr.train_epoch())
            steps.append(torch.cat([p.detach().reshape(-1) for _, p in _named(m, head)]))
            if e == 0:
                grads = {n: (p.grad.clone() if p.grad is not None else None) for n, p in _named(m, head)}
                traffic = tr.traffic()
        params = {n: p.detach().clone() for n, p in _named(m, head)}
        buffers = {n: b.clone() for n, b in m.named_buffers()}
        out.append({"name": name, "scheme": scheme, "fusion": fusion, "losses": losses, "grads": grads,
                    "params": params, "steps": steps, "buffers": buffers, "pred": tr.predict(), "eval": tr.evaluate()["loss"],
                    "traffic": traffic})
    return out


def _named(m, head):
    items = list(m.named_parameters())
    if head is not None:
        items += [("head." + n, p) for n, p in head.named_parameters()]
    return items


def _reference(name: str) -> dict:
    sig = cases.signal()
    m, head, loss = cases.model(name)
    tr = FusedTrainer(m, sig, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                      h0=cases.initial_state(name, sig))
    losses, grads = [], None
    for e in range(EPOCHS):
        losses.append(tr.train_epoch())
        if e == 0:
            grads = {n: (p.grad.clone() if p.grad is not None else None) for n, p in _named(m, head)}
    return {"losses": losses, "grads": grads, "params": {n: p.detach().clone() for n, p in _named(m, head)},
            "buffers": {n: b.clone() for n, b in m.named_buffers()}, "pred": tr.predict(), "eval": tr.evaluate()["loss"]}


def _configs(R: int) -> list:
    sig = cases.signal()
    out = []
    for name in cases.MODELS:
        m, _, _ = cases.model(name)
        from pyg_dynscale.nn import adapt
        pattern = adapt(m, check=False).dependency_pattern(bytes_per_element=8)
        for scheme in cases.SCHEMES:
            if R == 1 and scheme in ("empty_rank",):
                continue
            out.append((name, scheme, cases.make_partition(sig, scheme, R, pattern), "full"))
    # unfused execution (one structure call per snapshot) and a memory budget (snapshot ranges)
    for name in ("tgcn2", "mpnn", "dysat_mse", "tmgcn"):
        m, _, _ = cases.model(name)
        pattern = m.dependency_pattern(bytes_per_element=8)
        for fusion in ("none", 3000.0):
            out.append((name, "pgc", cases.make_partition(sig, "pgc", R, pattern), fusion))
    return out


REFS: dict = {}


def _ref(name):
    if name not in REFS:
        REFS[name] = _reference(name)
    return REFS[name]


def _close(a, b, tol, what):
    if a is None or b is None:
        assert a is None and b is None, what
        return
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= tol, f"{what}: max |diff| {err:.3g} > {tol}"


@pytest.mark.parametrize("R", [1, 2, 3, 4])
def test_distributed_equals_single_process(R):
    configs = _configs(R)
    results = spawn(_run, R, configs, timeout=240)
    assert len(results[0]) == len(configs)
    for i, cfg in enumerate(configs):
        name, scheme, part, fusion = cfg
        ref = _ref(name)
        tag = f"{name}/{scheme}/R={R}/{fusion}"
        r0 = results[0][i]
        for rank in range(R):
            ri = results[rank][i]
            assert ri["losses"] == r0["losses"], f"{tag}: ranks report different losses"
            for e, (a, b) in enumerate(zip(ri["steps"], r0["steps"])):  # identical replicas after every step (bitwise)
                assert torch.equal(a, b), f"{tag}: rank {rank} parameters differ after step {e + 1}"
        assert max(abs(a - b) for a, b in zip(r0["losses"], ref["losses"])) <= 1e-10, (tag, r0["losses"], ref["losses"])
        for n in ref["grads"]:
            _close(r0["grads"][n], ref["grads"][n], 1e-9, f"{tag} grad {n}")
        for n in ref["params"]:
            _close(r0["params"][n], ref["params"][n], 1e-9, f"{tag} param {n}")
        for n in ref["buffers"]:
            _close(r0["buffers"][n].double(), ref["buffers"][n].double(), 1e-9, f"{tag} buffer {n}")
        _close(r0["pred"], ref["pred"], 1e-9, f"{tag} predict")
        assert abs(r0["eval"] - ref["eval"]) <= 1e-10, tag
        t = r0["traffic"]
        for e in t["exchanges"]:  # every exchange, both directions, as the plan predicts
            assert e["measured_forward"] == e["predicted_forward"], (tag, e)
            assert e["measured_backward"] == e["predicted_backward"], (tag, e)
        assert t["load"]["measured"] == t["load"]["predicted"], (tag, t["load"])
        if R > 1 and scheme == "random":  # a random owner array cuts spatial and temporal edges here
            assert t["measured"]["total"] > 0, tag
            # TM-GCN's block 0 has no spatial layer: its raw rows move in the window exchange, none is loaded once
            assert (t["load"]["measured"] > 0) == (name != "tmgcn"), tag
