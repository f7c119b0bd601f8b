"""CUDA: DistributedTrainer on the GPU == FusedTrainer on the CPU (float64,
1e-9) -- 1 rank over NCCL, 2 and 3 ranks sharing the GPU through the staged
exchange over gloo -- for T-GCN, DySAT, MPNN-LSTM (DGC), a user's cell and
PyGT's GConvGRU / DCRNN on the black-box path, under PSS, PTS, PGC and
random owners; measured bytes == plan bytes; replicas identical. Skipped
without a GPU (``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from tests.helpers import blackbox_cases as bcases
from tests.helpers import cuda_cases as cc
from tests.helpers import distributed_cases as cases

pytestmark = cc.cuda
SCHEMES = ["pss", "pts", "pgc", "random"]


def _partition(name: str, sig, scheme: str, R: int, model):  # noqa: ANN001
    if name in cc.BLACKBOX or name == "user_cell":
        return bcases.make_partition(sig, "pts" if scheme == "pss" else scheme, R)  # black-box: vertex partitions
    from pyg_dynscale.nn import adapt

    return cases.make_partition(sig, scheme, R, adapt(model, check=False).dependency_pattern(8))


def _worker(rank: int, world_size: int, names: list) -> list:
    torch.set_default_dtype(torch.float64)
    out = []
    for name in names:
        for scheme in SCHEMES:
            m, head, loss, sig, kw = cc.build(name, "cuda:0")
            part = _partition(name, sig, scheme, world_size, m)
            tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cc.optimizer_for(name), **kw)
            losses = [tr.train_epoch() for _ in range(cc.EPOCHS)]
            params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
            t = tr.traffic()
            out.append({"name": name, "scheme": scheme, "losses": losses, "transport": tr.transport.name,
                        "backend": tr.transport.backend, "device": str(tr.device),
                        "params": [p.detach().cpu().clone() for p in params], "pred": tr.predict().cpu(),
                        "bytes_ok": all(e["measured_forward"] == e["predicted_forward"]
                                        and e["measured_backward"] == e["predicted_backward"] for e in t["exchanges"])})
    return out


def _names() -> list:
    from pyg_dynscale._optional import pygt_available

    # without PyGT, listed as skipped by test_pygt_cells_on_cuda below
    return list(cc.DECOMPOSED) + ["user_cell"] + (cc.BLACKBOX if pygt_available() else [])


@pytest.mark.parametrize("world_size,backend", [(1, "nccl"), (2, "gloo"), (3, "gloo")])
def test_cuda_distributed_equals_fused(world_size, backend):
    names = _names()
    res = spawn(_worker, world_size, names, backend=backend, timeout=600)
    refs = {}
    for i, r0 in enumerate(res[0]):
        name = r0["name"]
        if name not in refs:
            torch.set_default_dtype(torch.float64)
            try:
                refs[name] = cc.fused_run(name, "cpu")
            finally:
                torch.set_default_dtype(torch.float32)
        what = f"{name}/{r0['scheme']}/R={world_size}"
        assert r0["device"].startswith("cuda") and r0["backend"] == backend
        assert r0["transport"] == ("direct" if backend == "nccl" else "staged"), what
        assert r0["bytes_ok"], f"{what}: measured bytes differ from the plan"
        cc.assert_close(r0, refs[name], what)
        for rank in range(1, world_size):
            ri = res[rank][i]
            assert ri["losses"] == r0["losses"], f"{what}: ranks report different losses"
            assert all(torch.equal(a, b) for a, b in zip(ri["params"], r0["params"])), f"{what}: replicas differ"


def test_pygt_cells_on_cuda():
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():
        pytest.skip("PyGT not installed: GConvGRU and DCRNN on CUDA are not checked on this machine")
    assert set(cc.BLACKBOX) <= set(_names())


def _two_ranks_one_gpu_over_nccl(rank: int, world_size: int) -> str:
    m, head, loss, sig, kw = cc.build("tgcn1", "cuda:0")
    try:
        DistributedTrainer(m, sig, cases.make_partition(sig, "pts", 2, m.dependency_pattern(8)), head=head, loss=loss)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


@pytest.mark.skipif(torch.cuda.device_count() > 1, reason="needs exactly one GPU")
def test_nccl_refuses_two_ranks_on_one_gpu_with_a_clear_error():
    """Our error, on every rank: set-up binds cuda:0 and runs its object collectives (the agreement, the
    one-GPU-per-rank check) over a gloo twin of the NCCL group, so no NCCL communicator exists yet when the
    check raises (spawn inits NCCL without device_id: no eager communicator either). On the CPU:
    tests/distributed/test_groups_trainer.py under tests/helpers/fake_nccl.py's rules."""
    res = spawn(_two_ranks_one_gpu_over_nccl, 2, backend="nccl", timeout=120)
    for r in res:
        assert r.startswith("ModelInputError") and "NCCL needs one GPU per rank" in r and "ranks [0, 1]" in r, r
