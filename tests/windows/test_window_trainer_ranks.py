"""WindowTrainer under a gloo process group: rank r computes its blocks' share of every
global batch, gradients summed by one all-reduce; equal to one process with the same
``blocks`` (float64), the same loss float on every rank, replicas identical. A bad set-up
on one rank, or set-ups that differ, raise on every rank before any other collective."""
from __future__ import annotations

import copy
import math

import torch

from pyg_dynscale.training.launch import spawn
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.windows import chickenpox, covid

CASES = [  # (data, T, blocks, batch_size, optimizer): 9 training windows in blocks 5 + 4 -> rank 1 idle in the last batch
    ("chickenpox", 15, 2, 4, "sgd"),
    ("covid", 12, 4, 4, "adam"),
]


def _run(data, T, blocks, batch_size, optimizer):
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    sig = chickenpox(T=T) if data == "chickenpox" else covid(T=T)
    torch.manual_seed(0)
    cell, head = GConvGRU(4, 5, 2).double(), torch.nn.Linear(5, 1).double()
    tr = WindowTrainer(cell, sig, lags=3, batch_size=batch_size, lr=0.05, optimizer=optimizer, head=head,
                       blocks=blocks)
    losses = [tr.train_epoch() for _ in range(2)]
    return losses, tr.batch_losses, [p.detach().clone() for p in list(cell.parameters()) + list(head.parameters())], \
        tr.evaluate("test")


def _ranks(rank, world, cases):
    torch.set_num_threads(1)
    return [_run(*c) for c in cases]


def test_two_ranks_equal_one_process_with_the_same_blocks():
    torch.set_num_threads(1)
    single = [_run(*c) for c in CASES]
    per_rank = spawn(_ranks, 2, CASES, timeout=120)
    for i, ref in enumerate(single):
        r0, r1 = per_rank[0][i], per_rank[1][i]
        assert r0[0] == r1[0] and r0[1] == r1[1]               # the same floats on every rank
        for a, b in zip(r0[2], r1[2]):
            assert torch.equal(a, b)                           # replicas identical
        for a, b in zip(r0[0] + r0[1], ref[0] + ref[1]):
            assert math.isclose(a, b, rel_tol=1e-9)
        for a, b in zip(r0[2], ref[2]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        assert all(math.isclose(r0[3][k], ref[3][k], rel_tol=1e-9) for k in ref[3])


def _bad_setups(rank, world):
    """Each case's error on this rank: (type, field, message) -- a rank-local failure (rank 1's target field does
    not exist), then set-ups that differ between ranks (batch sizes)."""
    torch.set_num_threads(1)
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    out = []
    for kw in ({"target": "nope" if rank == 1 else "y"}, {"batch_size": 4 if rank == 0 else 8}):
        torch.manual_seed(0)
        try:
            WindowTrainer(GConvGRU(4, 5, 2).double(), chickenpox(T=15), lags=3, head=torch.nn.Linear(5, 1).double(),
                          **{"batch_size": 4, **kw}).close()
            out.append(None)
        except Exception as exc:  # noqa: BLE001 - recorded for the parent
            out.append((type(exc).__name__, getattr(exc, "field", None), str(exc)))
    return out


def test_a_bad_set_up_raises_on_every_rank_before_any_other_collective():
    # without the agreement rank 0 would wait in DDP's broadcast for rank 1 until the timeout
    per_rank = spawn(_bad_setups, 2, timeout=60)
    (local0, differ0), (local1, differ1) = per_rank
    assert local1[:2] == ("ModelInputError", "nope")                       # rank 1: its own error
    assert local0[:2] == ("ModelInputError", "set-up") and "failed on rank 1" in local0[2] and "nope" in local0[2]
    for err in (differ0, differ1):
        assert err[:2] == ("ModelInputError", "batch_size") and "differs between ranks" in err[2]
