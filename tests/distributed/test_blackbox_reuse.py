"""ReInc's reuse on the distributed black-box path: DistributedTrainer with reuse on 2 gloo ranks (each rank's
local subgraphs, halo state rows exchanged as without reuse) equals FusedTrainer without reuse -- losses,
parameters -- for GConvGRU, GConvLSTM, GCLSTM, TGCN and DCRNN, checkpointed windows, a rank that owns
nothing; the cell is not called on a rank that computes and the measured bytes are the plan's (one spawned
job)."""
from __future__ import annotations

import math

import pytest
import torch

from tests.helpers import blackbox_cases as cases
from tests.helpers.step_reuse import make_cell, train

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

#: (cell, K, scheme, checkpoint_every)
CONFIGS = [("GConvGRU", 2, "random", None), ("GConvLSTM", 2, "random", 2), ("GCLSTM", 2, "pss", 1),
           ("TGCN", None, "random", None), ("DCRNN", 2, "random", None),
           ("GConvGRU", 2, "empty_rank", 2)]  # rank 1 owns nothing: its steps and checkpointed windows are empty


def _ranks(rank: int, world_size: int) -> list:
    from pyg_dynscale.distributed import DistributedTrainer

    torch.set_default_dtype(torch.float64)
    sig = cases.signal("plain")
    out = []
    for name, K, scheme, every in CONFIGS:
        m, head = make_cell(name, K)
        tr = DistributedTrainer(m, sig, cases.make_partition(sig, scheme, world_size), head=head, loss="mse",
                                path="blackbox", checkpoint_every=every,
                                optimizer=lambda p: torch.optim.SGD(p, lr=0.05))
        calls = []
        m.register_forward_hook(lambda *a: calls.append(1))
        losses = [tr.train_epoch() for _ in range(3)]
        t = tr.traffic()
        out.append({"losses": losses, "params": [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())],
                    "reuse": tr.engine.runner.reuse is not None, "calls": len(calls),
                    "bytes": (t["measured"]["total"], t["predicted"]["total"])})
    return out


def test_distributed_reuse_equals_one_process_without_reuse():
    from pyg_dynscale.distributed import spawn

    sig = cases.signal("plain")
    refs = [train(*make_cell(name, K), sig, reuse=False) for name, K, _, _ in CONFIGS]
    results = spawn(_ranks, 2, timeout=300)
    moved = 0
    for (name, K, scheme, every), ref, per_rank in zip(CONFIGS, refs, zip(*results)):
        for r, got in enumerate(per_rank):
            where = f"{name} {scheme} ckpt={every} rank {r}"
            assert got["calls"] == 0, where
            assert got["reuse"] or (scheme == "empty_rank" and r == 1), where
            for a, b in zip(got["losses"], ref["losses"]):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {got['losses']} vs {ref['losses']}"
            for i, (a, b) in enumerate(zip(got["params"], ref["params"])):
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=f"{where}: parameter {i}")
            measured, predicted = got["bytes"]
            assert measured == predicted, where
            moved += measured
    assert moved > 0  # halo / temporal state rows did move
