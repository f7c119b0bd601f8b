"""CUDA: ``WindowTrainer`` under DDP on 2 ranks sharing the GPU (gloo: NCCL cannot run two ranks on
one GPU; DDP all-reduces the CUDA gradients) == the same 2 ranks on the CPU (float64), for a user's
cell (no PyGT needed) and PyGT's GConvGRU (with its input-projection reuse) where PyGT is installed;
a static graph (Chickenpox) and a changing one (England COVID).

Compared: batch and epoch losses, parameters and the test evaluation to 1e-9 (relative; CUDA's
kernels sum in another order than the CPU's: not bitwise); the same loss floats on both ranks and
identical replicas on each device. Both devices run in the same spawned ranks (:func:`run_cases` is
a function of the device: checked on the CPU against itself where there is no GPU). Host
synchronizations of one CUDA epoch are recorded in the report, not asserted. Skipped without a GPU
(``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import math

import pytest
import torch

from pyg_dynscale.windows import WindowTrainer
from tests.helpers import cuda_cases as cc
from tests.helpers.windows import chickenpox, covid

pytestmark = cc.cuda
HIDDEN = 5
#: (label, cell, data, T, batch_size, optimizer): 2 blocks, one per rank
CASES = [
    ("user cell, Chickenpox, SGD", "user", "chickenpox", 15, 4, "sgd"),
    ("user cell, England COVID, Adam", "user", "covid", 12, 4, "adam"),
    ("GConvGRU, Chickenpox, SGD", "GConvGRU", "chickenpox", 15, 4, "sgd"),
    ("GConvGRU, England COVID, Adam", "GConvGRU", "covid", 12, 4, "adam"),
]


def _cell(kind: str) -> torch.nn.Module:
    if kind == "user":
        from tests.helpers.cells import UserCell

        return UserCell(4, HIDDEN)
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    return GConvGRU(4, HIDDEN, 2)


def run(case: tuple, device: str) -> dict:
    _, kind, data, T, batch_size, optimizer = case
    sig = chickenpox(T=T) if data == "chickenpox" else covid(T=T)
    torch.manual_seed(0)
    cell, head = _cell(kind).double().to(device), torch.nn.Linear(HIDDEN, 1).double().to(device)
    tr = WindowTrainer(cell, sig, lags=3, batch_size=batch_size, lr=0.05, optimizer=optimizer, head=head)
    first = tr.train_epoch()
    last, syncs = cc.count_host_syncs(tr.train_epoch, device)
    return {"losses": [first, last], "batch": list(tr.batch_losses),
            "params": [p.detach().cpu().clone() for p in list(cell.parameters()) + list(head.parameters())],
            "eval": tr.evaluate("test"), "device": str(next(cell.parameters()).device),
            "syncs": None if syncs is None else f"{syncs} in {len(tr.batch_losses)} batches"}


def run_cases(rank: int, world: int, cases: list, devices: tuple) -> list:
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # PyGT's cells build a missing state with the default dtype
    return [{dev: run(c, dev) for dev in devices} for c in cases]


def check(results: list, cases: list, devices: tuple) -> None:
    ref_dev, dev = devices
    for i, case in enumerate(cases):
        r0, r1 = results[0][i], results[1][i]
        for d in devices:  # one global batch, one loss: the same floats on both ranks, identical replicas
            assert r0[d]["losses"] == r1[d]["losses"] and r0[d]["batch"] == r1[d]["batch"], (case[0], d)
            assert all(torch.equal(a, b) for a, b in zip(r0[d]["params"], r1[d]["params"])), (case[0], d)
        got, ref = r0[dev], r0[ref_dev]
        what = f"{case[0]}, {dev} vs {ref_dev}"
        assert got["device"].startswith(torch.device(dev).type), (what, got["device"])
        assert len(got["batch"]) == len(ref["batch"]) >= 2, what
        for a, b in zip(got["losses"] + got["batch"], ref["losses"] + ref["batch"]):
            assert math.isclose(a, b, rel_tol=cc.TOL, abs_tol=1e-12), (what, got["losses"], ref["losses"])
        for a, b in zip(got["params"], ref["params"]):
            torch.testing.assert_close(a, b, rtol=cc.TOL, atol=1e-12, msg=f"{what}: parameters")
        for key, value in ref["eval"].items():
            if isinstance(value, float):
                assert math.isclose(got["eval"][key], value, rel_tol=cc.TOL, abs_tol=1e-12), (what, key)


def run_and_check(cases: list, record_property) -> None:  # noqa: ANN001
    cc.two_ranks_on_both_devices(run_cases, cases, check, lambda c: f"WindowTrainer DDP {c[0]}", record_property)


def test_cuda_window_trainer_two_ranks_equal_cpu(record_property):
    run_and_check([c for c in CASES if c[1] == "user"], record_property)


def test_cuda_pygt_window_trainer_two_ranks_equal_cpu(record_property):
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():  # PyGT's pure-Python wheel is enough (the package shims torch-sparse's annotation)
        pytest.skip("PyGT (torch-geometric-temporal) not installed")
    run_and_check([c for c in CASES if c[1] != "user"], record_property)
