"""Bytes are counted from the buffers handed to the collectives, not taken
from the plan: a rank that sends more than the plan (here: every row twice,
results unchanged) is measured sending more, so the measured == plan checks
of the other tests fail on such a bug."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from tests.helpers import distributed_cases as cases


def _doubling(comm):  # noqa: ANN001
    """Wrap ``comm.raw_exchange``: each destination's rows go out twice (a
    buggy sender); the receiver keeps the first copy, so values are exact."""
    inner = comm.raw_exchange

    def raw_exchange(send, send_splits, recv_splits, key, direction):  # noqa: ANN001
        parts = torch.split(send, list(send_splits))
        doubled = torch.cat([torch.cat([p, p]) for p in parts]) if parts else send
        out = inner(doubled, [2 * n for n in send_splits], [2 * n for n in recv_splits], key, direction)
        got = torch.split(out, [2 * n for n in recv_splits])
        return torch.cat([g[: n] for g, n in zip(got, recv_splits)]) if got else out

    comm.raw_exchange = raw_exchange


def _worker(rank: int, world_size: int, double: bool) -> dict:
    sig = cases.signal()
    m, head, loss = cases.model("tgcn2")
    part = cases.make_partition(sig, "pgc", world_size, m.dependency_pattern(8))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for("tgcn2"))
    if double:
        _doubling(tr.comm)
    losses = [tr.train_epoch() for _ in range(2)]
    return {"losses": losses, "traffic": tr.traffic()}


def test_a_rank_sending_more_than_the_plan_is_measured_sending_more():
    honest = spawn(_worker, 2, False, timeout=120)[0]
    greedy = spawn(_worker, 2, True, timeout=120)[0]
    assert greedy["losses"] == honest["losses"]  # same values moved: the bug is invisible in the results
    for h, g in zip(honest["traffic"]["exchanges"], greedy["traffic"]["exchanges"]):
        assert h["measured_forward"] == h["predicted_forward"] and h["measured_backward"] == h["predicted_backward"]
        assert g["measured_forward"] == 2 * g["predicted_forward"], g
        assert g["measured_backward"] == 2 * g["predicted_backward"], g
    assert greedy["traffic"]["measured"]["total"] == 2 * honest["traffic"]["measured"]["total"] > 0


def _mismatch_worker(rank: int, world_size: int) -> str:
    from pyg_dynscale.distributed import Communicator

    comm = Communicator()
    try:
        comm.raw_exchange(torch.zeros(3, 2), [1, 1], [1, 1], (0, "x", "spatial"), "fwd")
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def test_a_buffer_that_disagrees_with_its_splits_is_refused():
    assert "send buffer of 3 rows" in spawn(_mismatch_worker, 2, timeout=60)[0]
