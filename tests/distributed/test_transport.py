"""Transports: the staged exchange (device rows through host buffers over
gloo, for several ranks sharing one GPU) computes and counts exactly what
the direct one does; the choice follows the device and the group's backend;
set-ups that cannot work are refused on every rank, never left hanging."""
from __future__ import annotations

import time

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.distributed.transport import DirectTransport, StagedTransport, resolve_transport
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.partition import partition
from tests.helpers import distributed_cases as cases
from tests.helpers.cells import UserCell
from tests.helpers.fake_device import HostCopies

CASES = [("tgcn2", "pgc", {}), ("dysat_link", "pts", {}), ("mpnn_dgc", "pss-ts", {}),
         ("tgcn2", "random", {"checkpoint_every": 2}), ("user_cell", "pts", {}),
         ("tgcn1", "pgc", {"stale": "static:0.5"})]


def _run(name: str, scheme: str, kw: dict, backend: str, world_size: int) -> dict:
    sig = cases.signal()
    if name == "user_cell":
        torch.manual_seed(0)
        m, head, loss = UserCell(cases.F, 4).double(), torch.nn.Linear(4, 1).double(), "mse"
        part = partition(sig, scheme, world_size)
        kw = dict(kw, path="blackbox", depth=1)
    else:
        m, head, loss = cases.model(name)
        part = cases.make_partition(sig, scheme, world_size, m.dependency_pattern(8))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name), backend=backend,
                            **kw)
    losses = [tr.train_epoch() for _ in range(3)]
    t = tr.traffic()
    return {"transport": tr.transport.name, "losses": losses, "params": [p.detach().clone() for p in tr.params],
            "measured": t["measured"], "predicted": t["predicted"], "exchanges": t["exchanges"],
            "pred": tr.predict()}


def _staged_worker(rank: int, world_size: int) -> list:
    torch.set_default_dtype(torch.float64)
    return [(_run(n, s, kw, "direct", world_size), _run(n, s, kw, "staged", world_size)) for n, s, kw in CASES]


@pytest.mark.parametrize("world_size", [2, 3])
def test_staged_exchange_equals_the_direct_one(world_size):
    for rank_out in spawn(_staged_worker, world_size, timeout=300):
        for (name, scheme, kw), (direct, staged) in zip(CASES, rank_out):
            assert (direct["transport"], staged["transport"]) == ("direct", "staged")
            # the staged copies move the same values: bit-identical results
            assert staged["losses"] == direct["losses"], (name, scheme)
            assert all(torch.equal(a, b) for a, b in zip(staged["params"], direct["params"])), (name, scheme)
            assert torch.equal(staged["pred"], direct["pred"]), (name, scheme)
            assert staged["measured"] == direct["measured"], (name, scheme)
            assert staged["exchanges"] == direct["exchanges"], (name, scheme)
            for e in staged["exchanges"] if "stale" not in kw else []:  # the stale cache sends fewer rows
                assert e["measured_forward"] == e["predicted_forward"], (name, e)
                assert e["measured_backward"] == e["predicted_backward"], (name, e)


def _choice_worker(rank: int, world_size: int) -> dict:
    out = {}
    for label, device, choice in [("cpu auto", "cpu", "auto"), ("cpu staged", "cpu", "staged"),
                                  ("cpu direct", "cpu", "direct"), ("cuda over gloo auto", "cuda:0", "auto"),
                                  ("cuda over gloo staged", "cuda:0", "staged"),
                                  ("cuda over gloo direct", "cuda:0", "direct"), ("mps", "mps", "auto"),
                                  ("bogus", "cpu", "nccl-please")]:
        try:
            out[label] = type(resolve_transport(choice, torch.device(device))).__name__
        except ModelInputError as exc:
            out[label] = f"error: {exc.field}: {exc}"
    return out


def test_the_transport_follows_device_and_backend():
    got = spawn(_choice_worker, 1, timeout=60)[0]
    assert got["cpu auto"] == got["cpu direct"] == DirectTransport.__name__
    assert got["cpu staged"] == StagedTransport.__name__
    # a CUDA model over a gloo group: several ranks share a GPU, rows go through the host
    assert got["cuda over gloo auto"] == got["cuda over gloo staged"] == StagedTransport.__name__
    assert got["cuda over gloo direct"].startswith("error: backend") and "staged" in got["cuda over gloo direct"]
    assert got["mps"].startswith("error: device")
    assert got["bogus"].startswith("error: backend")


def test_staged_buffers_on_the_cpu_are_copies():
    """On a CPU "device" the staging path still copies (what CI exercises
    stands for the device -> host -> device round trip)."""
    x = torch.arange(6.0).view(3, 2)
    st = StagedTransport.__new__(StagedTransport)
    st.pin, st.device = False, torch.device("cpu")
    host = st._to_host(x)
    back = st._to_device(host, x)
    assert torch.equal(back, x) and host.data_ptr() != x.data_ptr()


def _mixed_worker(rank: int, world_size: int, what: str) -> tuple:
    torch.set_default_dtype(torch.float64)
    sig = cases.signal()
    m, head, loss = cases.model("tgcn1")
    kw = {}
    if what == "transports":  # rank 1 stages, rank 0 does not: a mixed set-up
        kw = {"backend": "staged" if rank == 1 else "direct"}
    elif what == "one rank on cuda":
        kw = {"device": "cuda:0"} if rank == 1 else {}
    t0 = time.perf_counter()
    try:
        DistributedTrainer(m, sig, partition(sig, "pts", world_size), head=head, loss=loss, **kw)
        return ("ok", "", time.perf_counter() - t0)
    except ModelInputError as exc:
        return (exc.field, str(exc), time.perf_counter() - t0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA (rank 1's cuda:0 must fail)")
def test_mixed_setups_are_refused_on_every_rank():
    res = spawn(_mixed_worker, 2, "transports", timeout=60)
    for field, msg, secs in res:
        assert field == "transport" and "differs between ranks" in msg and secs < 30, (field, msg)
    # an error on one rank only (its device does not exist): the other rank stops too, naming it
    res = spawn(_mixed_worker, 2, "one rank on cuda", timeout=60)
    assert res[1][0] == "device" and "torch.cuda.is_available() is False" in res[1][1]
    assert res[0][0] == "set-up" and "failed on rank 1" in res[0][1] and "cuda" in res[0][1]
    assert all(secs < 30 for _, _, secs in res)


def test_host_copy_recorder_sees_a_copy():
    """The recorder of tests/helpers/fake_device.py can fail: a host tensor copied to the device is recorded."""
    with HostCopies() as rec:
        torch.ones(3).to("meta")
        torch.ones(()).to("meta")  # a scalar: allowed (as a CUDA kernel argument)
    assert len(rec.copies) == 1
