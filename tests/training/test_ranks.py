"""pyg_dynscale.training.ranks' host reductions: the slowest rank's epoch time and host sums / gathers, over gloo
on every backend (a world of the CPU stand-in for NCCL included), and without a process group."""
from __future__ import annotations

import torch
import torch.distributed as dist

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.training.launch import spawn
from pyg_dynscale.training.ranks import agree, host_all_gather_object, host_all_reduce, slowest_rank_seconds
from tests.helpers import fake_nccl

SECONDS = (0.25, 1.5, 0.75)  # rank r's epoch time: the slowest is neither rank 0 nor the last


def _reductions(rank: int, world: int) -> dict:
    x = torch.tensor([rank + 1.0, -2.0 * rank], dtype=torch.float64)
    return {"slowest": slowest_rank_seconds(SECONDS[rank]),
            "sum": host_all_reduce(x).tolist(), "max": host_all_reduce(x, "max").tolist(),
            "min": host_all_reduce(x, dist.ReduceOp.MIN).tolist(), "x_kept": x.tolist(),
            "gathered": host_all_gather_object({"rank": rank}),
            "device_collectives": [e for e in fake_nccl.LOG if e[0] not in ("bind",)]}


def test_the_slowest_rank_and_host_reductions_over_gloo():
    for rank, out in enumerate(spawn(_reductions, 3)):
        assert out["slowest"] == 1.5
        assert out["sum"] == [6.0, -6.0] and out["max"] == [3.0, 0.0] and out["min"] == [1.0, -4.0]
        assert out["x_kept"] == [rank + 1.0, -2.0 * rank]  # a new tensor: the input is not reduced in place
        assert out["gathered"] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]


def test_on_a_device_only_backend_host_values_never_touch_the_device_group():
    # no rank binds a device: a collective over the fake NCCL world would fail ("never bound"), so these pass only
    # over the gloo twin
    for out in spawn(_reductions, 3, backend=fake_nccl.NAME, timeout=60):
        assert out["slowest"] == 1.5 and out["sum"] == [6.0, -6.0]
        assert out["gathered"] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
        assert out["device_collectives"] == []


def test_without_a_process_group_nothing_is_reduced():
    assert slowest_rank_seconds(0.125) == 0.125
    x = torch.tensor([1.0, 2.0])
    y = host_all_reduce(x, "max")
    assert y.tolist() == [1.0, 2.0] and y.data_ptr() != x.data_ptr()
    assert host_all_gather_object("a") == ["a"]


def _agreement(rank: int, world: int) -> dict:
    out = {}

    def attempt(name, error, summary):
        try:
            agree(error, summary)
            out[name] = "ok"
        except ModelInputError as exc:
            out[name] = str(exc)

    attempt("errors_only", None, None)
    attempt("same", None, {"data": "abc", "loss": "mse"})
    attempt("differ", None, {"data": "abc", "loss": "mse" if rank == 0 else "l1"})
    attempt("one_failed", ModelInputError("lr", "is -1.", "give a positive lr.") if rank == 1 else None,
            None if rank == 1 else {"data": "abc"})
    return out


def test_the_same_set_up_error_on_every_rank():
    for rank, out in enumerate(spawn(_agreement, 2)):
        assert out["errors_only"] == "ok" and out["same"] == "ok"
        assert "loss" in out["differ"] and "ranks [1] disagree with rank 0" in out["differ"]
        assert "'mse'" in out["differ"] and "'l1'" in out["differ"]
        if rank == 1:  # its own error
            assert out["one_failed"].startswith("field 'lr'") or "is -1." in out["one_failed"]
            assert "failed on rank" not in out["one_failed"]
        else:  # the other rank names it
            assert "failed on rank 1" in out["one_failed"] and "is -1." in out["one_failed"]
