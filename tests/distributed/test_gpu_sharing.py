"""Two ranks on one GPU over NCCL get the package's message from every trainer, not NCCL's.

:func:`~pyg_dynscale.distributed.setup_checks.check_gpu_sharing` runs
:func:`~pyg_dynscale.distributed.setup_checks.check_one_gpu_per_rank` (over the gloo host group,
tested with the NCCL stand-in in test_groups_trainer.py) exactly where NCCL would run on the GPU;
``DistributedTrainer``, ``WindowTrainer`` and ``MemoryTrainer`` each call it at set-up with their
device, after binding it and before their first device collective (checked on 2 gloo ranks by
recording the calls: a CPU build cannot put a model on a GPU)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.training import ranks as setup_checks
from pyg_dynscale.training.launch import spawn


@pytest.mark.parametrize("device,backend,checked", [
    ("cuda:0", "nccl", True), ("cuda:1", "cpu:gloo,cuda:nccl", True),  # CUDA tensors over NCCL
    ("cuda:0", "gloo", False),  # ranks sharing a GPU through the staged exchange: allowed
    ("cpu", "gloo", False), ("cpu", "cpu:gloo,cuda:nccl", False),
])
def test_the_check_runs_where_nccl_runs_on_the_gpu(monkeypatch, device: str, backend: str, checked: bool) -> None:
    seen: list = []
    monkeypatch.setattr(setup_checks, "group_backend", lambda group=None: backend)
    monkeypatch.setattr(setup_checks, "check_one_gpu_per_rank", lambda dev, group=None: seen.append(str(dev)))
    setup_checks.check_gpu_sharing(torch.device(device))
    assert seen == ([device] if checked else [])


def _trainers(rank: int, world: int) -> dict:
    import pyg_dynscale.ctdg.trainer as ctdg_trainer
    import pyg_dynscale.distributed.trainer as snapshot_trainer
    import pyg_dynscale.windows.trainer as window_trainer
    from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.partition import partition
    from pyg_dynscale.windows import WindowTrainer
    from tests.helpers import distributed_cases as cases

    torch.set_num_threads(1)
    calls: dict = {}
    for name, module in (("snapshots", snapshot_trainer), ("windows", window_trainer), ("events", ctdg_trainer)):
        real = module.check_gpu_sharing

        def recorded(device, group=None, _name=name, _real=real):  # noqa: ANN001
            calls.setdefault(_name, []).append(str(device))
            return _real(device, group)

        module.check_gpu_sharing = recorded
    sig = cases.signal()
    model, head, loss = cases.model("tgcn1")
    DistributedTrainer(model, sig, partition(sig, "pts", world), head=head, loss=loss)
    torch.manual_seed(0)
    WindowTrainer(TGCN(sig.num_node_features, 4).double(), sig, lags=2, batch_size=2, lr=0.05,
                  head=torch.nn.Linear(4, 1).double()).close()
    data = synthetic_events(60, 8, msg_dim=2, seed=0)
    MemoryTrainer(TGN(data.num_nodes, 2, memory_dim=3, time_dim=2, embedding_dim=3), data, batch_size=10,
                  parallelism=(world, 1, 1)).close()
    return calls


def test_every_trainer_checks_gpu_sharing_at_set_up() -> None:
    for calls in spawn(_trainers, 2, timeout=120):
        assert calls == {"snapshots": ["cpu"], "windows": ["cpu"], "events": ["cpu"]}, calls
