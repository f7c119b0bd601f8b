"""The black-box path: every PyGT recurrent class, called unchanged once per
snapshot, equals PyGT's own loop on one process (FusedTrainer) and across 2
and 3 gloo ranks (DistributedTrainer) under PTS, PGC and a random owner
array, in loss, gradients and parameters (float64); measured bytes equal the
StatePlan's; checkpointed training equals plain training."""
from __future__ import annotations

import pytest
import torch

from tests import blackbox_cases as cases

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

EPOCHS = 2
TOL = 1e-9
SPLIT = [c for c in cases.CELLS if c not in cases.NOT_SPLITTABLE]


def _trained(tr, m, head) -> dict:
    losses, grads = [], None
    for e in range(EPOCHS):
        losses.append(tr.train_epoch())
        if e == 0:
            grads = [p.grad.clone() if p.grad is not None else None for p in list(m.parameters()) + list(head.parameters())]
            traffic = tr.traffic() if hasattr(tr, "traffic") else None
    params = [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]
    return {"losses": losses, "grads": grads, "params": params, "traffic": traffic}


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and float((a - b).abs().max()) <= TOL * (1 + float(b.abs().max()))


def _assert_same(got: dict, ref: dict, where: str) -> None:
    for x, y in zip(got["losses"], ref["losses"]):
        assert abs(x - y) <= TOL * (1 + abs(y)), f"{where}: losses {got['losses']} vs {ref['losses']}"
    for i, (g, r) in enumerate(zip(got["grads"], ref["grads"])):
        assert _close(g, r), f"{where}: gradient {i} differs"
    for i, (p, r) in enumerate(zip(got["params"], ref["params"])):
        assert _close(p, r), f"{where}: parameter {i} differs"


def _fused_run(name: str, checkpoint_every=None) -> dict:
    from pyg_dynscale.runtime import FusedTrainer

    torch.set_default_dtype(torch.float64)
    try:
        m, head = cases.cell(name)
        sig = cases.signal(cases.CELLS[name][0])
        tr = FusedTrainer(m, sig, head=head, loss="mse", path="blackbox", checkpoint_every=checkpoint_every,
                          optimizer=torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.05))
        return _trained(tr, m, head)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.fixture(scope="module")
def references() -> dict:
    return {name: cases.reference_run(name, EPOCHS) for name in cases.CELLS}


@pytest.mark.parametrize("name", list(cases.CELLS))
def test_one_process_equals_pygt_loop(name, references):
    _assert_same(_fused_run(name), references[name], name)


@pytest.mark.parametrize("name", ["GConvGRU_K3", "GConvLSTM", "DyGrEncoder"])
def test_checkpointed_equals_plain(name, references):
    for every in (1, 2):
        _assert_same(_fused_run(name, checkpoint_every=every), references[name], f"{name} checkpoint_every={every}")


def _ranks(rank: int, world_size: int, configs: list) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    out = []
    for name, scheme, every in configs:
        m, head = cases.cell(name)
        sig = cases.signal(cases.CELLS[name][0])
        part = cases.make_partition(sig, scheme, world_size)
        tr = DistributedTrainer(m, sig, part, head=head, loss="mse", path="blackbox", checkpoint_every=every,
                                optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
        res = _trained(tr, m, head)
        res["config"] = (name, scheme, every)
        res["predicted"] = tr.plan.bytes_by_kind()["total"]
        out.append(res)
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_distributed_equals_pygt_loop(world_size, references):
    from pyg_dynscale.distributed import spawn

    schemes = ["pts", "pgc", "random"]
    configs = [(n, s, None) for n in SPLIT for s in schemes]
    configs += [("GConvGRU_K3", "random", 2), ("GConvLSTM", "pss", 1)]
    results = spawn(_ranks, world_size, configs, timeout=300)
    moved = 0
    for per_rank in zip(*results):
        name, scheme, every = per_rank[0]["config"]
        where = f"{name} {scheme} R={world_size} ckpt={every}"
        for r, res in enumerate(per_rank):
            _assert_same(res, references[name], f"{where} rank {r}")
        t = per_rank[0]["traffic"]
        assert t["measured"]["total"] - t["measured"].get("stale_meta", 0) == t["predicted"]["total"], where
        for ex in t["exchanges"]:
            assert (ex["measured_forward"], ex["measured_backward"]) == (ex["predicted_forward"], ex["predicted_backward"]), where
        moved += t["measured"]["total"]
    assert moved > 0  # the configurations do exchange state rows


def test_mpnnlstm_is_refused_on_split_snapshots_and_auto_takes_the_adapter():
    from pyg_dynscale.distributed import spawn
    from pyg_dynscale.distributed.launch import SpawnError

    with pytest.raises(SpawnError, match="BatchNorm"):
        spawn(_ranks, 2, [("MPNNLSTM", "pts", None)], timeout=120)
