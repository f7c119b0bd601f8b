"""The hot loop on a device: no host tensor, no host synchronization, no
per-epoch host-to-device copy (checked without a GPU on a fake device, see
tests/helpers/fake_device.py).

A trainer is built on the CPU, re-homed onto the fake device with the same
``place`` step that moves it to a GPU at set-up, and runs one training step
(forward, backward through every exchange, gradient all-reduce, optimizer
step). Any index or row left on the host makes an op mix devices and raise;
any value read back to the host raises; any copy of a host tensor during the
step is recorded and fails the test."""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.partition import partition
from tests.helpers import distributed_cases as cases
from tests.helpers.cells import UserCell
from tests.helpers.fake_device import FAKE, FakeDevice, HostCopies, rehome_distributed

#: (label, model case, scheme, trainer options): every engine structure the step indexes with
DECOMPOSED = [
    ("tgcn2 pgc rounds", "tgcn2", "pgc", {}),
    ("tgcn2 pss-ts redistribution", "tgcn2", "pss-ts", {}),
    ("tgcn2 random, h0", "tgcn2_h0", "random", {}),
    ("stacked, unfused snapshots", "stacked", "pss", {"fusion": "none"}),
    ("tgcn2, checkpointed windows", "tgcn2", "random", {"checkpoint_every": 2}),
    ("dysat link readout", "dysat_link", "pgc", {}),
    ("mpnn-lstm batch norm", "mpnn_dgc", "pts", {}),
]


def _step_on_fake_device(tr) -> dict:  # noqa: ANN001
    _, transport = rehome_distributed(tr)
    with HostCopies() as rec:
        loss = tr.train_step()
    return {"loss_fake": isinstance(loss, FakeTensor) and loss.device == FAKE,
            "params_fake": all(isinstance(p, FakeTensor) and p.device == FAKE for p in tr.params),
            "grads": sum(p.grad is not None for p in tr.params), "copies": rec.copies,
            "collectives": len(transport.sent)}


def _placement_worker(rank: int, world_size: int) -> list:
    torch.set_default_dtype(torch.float64)
    sig = cases.signal()
    out = []
    for label, name, scheme, kw in DECOMPOSED:
        m, head, loss = cases.model(name)
        part = cases.make_partition(sig, scheme, world_size, m.dependency_pattern(8))
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, h0=cases.initial_state(name, sig), **kw)
        try:
            out.append((label, _step_on_fake_device(tr), None))
        except Exception as exc:  # reported with its label by the test
            out.append((label, None, f"{type(exc).__name__}: {exc}"))
    torch.manual_seed(0)
    cell = UserCell(cases.F, 4).double()
    part = partition(sig, "pts", world_size)
    tr = DistributedTrainer(cell, sig, part, head=torch.nn.Linear(4, 1).double(), loss="mse", path="blackbox",
                            depth=1, checkpoint_every=2)
    try:
        out.append(("black-box user cell, checkpointed", _step_on_fake_device(tr), None))
    except Exception as exc:
        out.append(("black-box user cell, checkpointed", None, f"{type(exc).__name__}: {exc}"))
    return out


def test_a_training_step_stays_on_the_device_without_host_syncs():
    res = spawn(_placement_worker, 2, timeout=300)
    for rank_out in res:
        for label, got, err in rank_out:
            assert err is None, f"{label}: {err}"
            assert got["loss_fake"] and got["params_fake"], (label, got)
            assert got["grads"] > 0, (label, got)
            assert got["collectives"] > 0, (label, got)  # the exchanges ran on the device tensors
            assert not got["copies"], (label, got["copies"])


def _left_on_host_worker(rank: int, world_size: int) -> str:
    """A layout index left on the host (the mutation the test above must catch)."""
    torch.set_default_dtype(torch.float64)
    sig = cases.signal()
    m, head, loss = cases.model("tgcn2")
    tr = DistributedTrainer(m, sig, partition(sig, "pts", world_size), head=head, loss=loss)
    host_idx = tr.engine.host_layout.S_owned
    rehome_distributed(tr)
    tr.engine.layout.S_owned = host_idx  # as if apply_tensors had forgotten it
    try:
        tr.train_step()
    except Exception as exc:
        return type(exc).__name__
    return "no error"


def test_an_index_left_on_the_host_is_caught():
    assert spawn(_left_on_host_worker, 2, timeout=120) == ["FakeTensorDeviceMismatchError"] * 2


def _host_sync_worker(rank: int, world_size: int) -> str:
    """A value read back per step (the other mutation): ``float(loss)`` inside the step."""
    torch.set_default_dtype(torch.float64)
    sig = cases.signal()
    m, head, loss = cases.model("tgcn1")
    tr = DistributedTrainer(m, sig, partition(sig, "pss", world_size), head=head, loss=loss)
    rehome_distributed(tr)
    inner = tr.compute_loss
    tr.compute_loss = lambda: inner() * (1.0 if float(inner()) > -1 else 0.0)  # type: ignore[method-assign]
    try:
        tr.train_step()
    except Exception as exc:
        return type(exc).__name__
    return "no error"


def test_a_host_synchronization_is_caught():
    assert spawn(_host_sync_worker, 2, timeout=120) == ["DataDependentOutputException"] * 2


@pytest.mark.parametrize("case", ["tgcn2", "stacked_ckpt", "dysat_link", "mpnn_dgc", "blackbox"])
def test_fused_trainer_step_stays_on_the_device(case):
    from pyg_dynscale.runtime import FusedTrainer

    torch.set_default_dtype(torch.float64)
    try:
        sig = cases.signal()
        if case == "blackbox":
            torch.manual_seed(0)
            m, head, loss, kw = UserCell(cases.F, 4).double(), torch.nn.Linear(4, 1).double(), "mse", {
                "path": "blackbox", "depth": 1, "checkpoint_every": 2}
        else:
            m, head, loss = cases.model("stacked" if case == "stacked_ckpt" else case)
            kw = {"checkpoint_every": 2} if case == "stacked_ckpt" else {}
        tr = FusedTrainer(m, sig, head=head, loss=loss, **kw)
        fake = FakeDevice()
        fake.modules(tr.model, head)
        params = list(tr.model.parameters()) + (list(head.parameters()) if head is not None else [])
        opt = torch.optim.SGD(params, lr=0.1)
        tr.place(fake.move)
        with HostCopies() as rec:
            opt.zero_grad()
            loss_t = tr.compute_loss()
            loss_t.backward()
            opt.step()
        assert isinstance(loss_t, FakeTensor) and loss_t.device == FAKE
        grads = [p.grad for p in params if p.grad is not None]
        assert grads and all(isinstance(g, FakeTensor) and g.device == FAKE for g in grads)
        assert not rec.copies, rec.copies
    finally:
        torch.set_default_dtype(torch.float32)
