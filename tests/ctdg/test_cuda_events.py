"""CUDA: ``MemoryTrainer`` on the GPU == on the CPU in float64 (attention dropout 0; the
negatives come from the CPU generator on every device), for one memory copy and for
DistTGL's mini-batch x epoch parallelism emulated in one process. Skipped without a
GPU (``make gpu-check`` runs them where there is one).

The stream has distinct timestamps and no node gets more events in one batch than
``num_neighbors``: otherwise PyG's own modules pick differently on the two devices
(``LastNeighborLoader.insert`` writes a node's surplus events to the same slots, and
on CUDA an arbitrary write wins; ``LastAggregator``'s arg-max breaks timestamp ties
by an arbitrary message) -- see docs/events.md."""
import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from tests import cuda_cases as cc

pytestmark = cc.cuda
#: more than any node's events in one batch of 50 (31 here)
NEIGHBORS = 40


def run(device: str, parallelism=(1, 1, 1), epochs: int = 2) -> dict:
    data = synthetic_events(900, 60, bipartite=True, msg_dim=3, seed=1, burst_length=20)
    data.msg = data.msg.double()
    data.t = torch.arange(data.num_events) * 10  # distinct timestamps, same order
    per_batch = max(int(torch.cat([data.src[a:a + 50], data.dst[a:a + 50]]).bincount().max())
                    for a in range(0, data.num_events, 50))
    assert per_batch <= NEIGHBORS
    torch.manual_seed(3)
    model = TGN(data.num_nodes, 3, memory_dim=16, time_dim=8, embedding_dim=12, dropout=0.0).double().to(device)
    trainer = MemoryTrainer(model, data, batch_size=50, lr=1e-3, num_neighbors=NEIGHBORS, seed=7, parallelism=parallelism)
    losses = [trainer.train_epoch() for _ in range(epochs)]
    batch_losses = trainer.batch_losses.detach().cpu()
    return {"losses": losses, "batch_losses": batch_losses, "val": trainer.evaluate("val"),
            "params": torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()]),
            "memory": model.memory.memory.detach().cpu(), "trainer": trainer}


def assert_same(got: dict, ref: dict) -> None:
    assert got["batch_losses"].numel() == ref["batch_losses"].numel() >= 5
    torch.testing.assert_close(got["batch_losses"], ref["batch_losses"], atol=1e-9, rtol=0)
    for a, b in zip(got["losses"], ref["losses"]):
        assert abs(a - b) < 1e-9, (got["losses"], ref["losses"])
    torch.testing.assert_close(got["params"], ref["params"], atol=1e-9, rtol=0)
    torch.testing.assert_close(got["memory"], ref["memory"], atol=1e-9, rtol=0)
    for key in ("ap", "auc", "mrr"):
        assert abs(got["val"][key] - ref["val"][key]) < 1e-9, (key, got["val"], ref["val"])


@pytest.mark.parametrize("parallelism", [(1, 1, 1), (2, 1, 1), (1, 2, 1)])
def test_cuda_memory_trainer_equals_cpu(parallelism):
    ref = run("cpu", parallelism)
    got = run("cuda", parallelism)
    assert got["trainer"].src.device.type == "cuda" and got["trainer"].memory.memory.device.type == "cuda"
    assert_same(got, ref)
