"""A bad set-up of MemoryTrainer raises on every rank (2 gloo ranks): an error on one rank is named on the
others, and options that differ between ranks are refused on all of them (training.ranks.agree)."""
from __future__ import annotations

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn


def _outcome(**kw):
    d = synthetic_events(200, 20, msg_dim=3, seed=1)
    torch.manual_seed(0)
    model = TGN(d.num_nodes, 3, memory_dim=4, time_dim=2, embedding_dim=4)
    try:
        MemoryTrainer(model, d, parallelism=(2, 1, 1), **kw).close()
    except Exception as exc:  # noqa: BLE001 - the outcome is compared
        return type(exc).__name__, str(exc)
    return None


def _ranks(rank, world):
    return [_outcome(batch_size=0 if rank == 1 else 20),
            _outcome(batch_size=20 + 5 * rank),
            _outcome(loss="mse" if rank == 1 else "bce"),
            _outcome(batch_size=20)]


def test_bad_set_ups_raise_on_every_rank():
    (zero, differ, loss, fine), (zero1, differ1, loss1, fine1) = spawn(_ranks, 2, timeout=120)
    assert zero1[0] == "ModelInputError" and "batch_size" in zero1[1]
    assert zero[0] == "ModelInputError" and "failed on rank 1" in zero[1] and "batch_size" in zero[1]
    for name, msg in (differ, differ1):
        assert name == "ModelInputError" and "batch_size" in msg and "differs between ranks" in msg
    assert loss1[0] == "UnsupportedOptionError" and "'loss'" in loss1[1]
    assert loss[0] == "ModelInputError" and "rank 1" in loss[1] and "loss" in loss[1]
    assert fine is None and fine1 is None
