"""CUDA: ``MemoryTrainer`` on 2 ranks sharing the GPU (gloo: NCCL cannot run two ranks on one GPU)
== the same 2 ranks on the CPU (float64, dropout 0), for every memory placement -- ``replicated``
(DistTGL; with the memory service, with the neighbour prefetcher), ``partitioned`` (DepComm; with
the prefetcher, with the aggregation overlapped) and ``sven`` (with micro-batches, the prefetcher,
the aggregation overlapped) -- through the public API only (the model on ``cuda:0``, the trainer
follows it).

Compared: batch and epoch losses, parameters, the whole memory after training, the validation and
test scores to 1e-9 (CUDA's kernels sum in another order than the CPU's: not bitwise; AP / AUC / MRR
are step functions of the scores, not compared to rounding); the ``last_update`` vector and the
bytes per kind (``traffic()["measured"]``: the id lists' sizes) exactly; the same losses on both
ranks. The stream is the one of tests/ctdg/test_cuda_events.py (distinct timestamps, no node with
more events in a batch than ``num_neighbors``). Both devices run in the same spawned ranks
(:func:`run_configs` is a function of the device: checked on the CPU against itself where there is
no GPU). Host synchronizations of one CUDA epoch are recorded in the report, not asserted. Skipped
without a GPU (``make gpu-check`` runs them where there is one)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn
from tests.helpers import cuda_cases as cc
from tests.helpers.event_streams import evaluation_scores

pytestmark = cc.cuda
BATCH, NEIGHBORS, EPOCHS = 40, 40, 2
#: placement -> [(label, MemoryTrainer options)]
CONFIGS = {
    "replicated": [("replicated", {}), ("replicated, memory service", {"memory_service": True}),
                   ("replicated, prefetch", {"prefetch": True})],
    "partitioned": [("partitioned", {}), ("partitioned, prefetch", {"prefetch": True}),
                    ("partitioned, overlapped aggregation", {"overlap_aggregation": True})],
    "sven": [("sven", {}), ("sven, 3 micro-batches", {"micro_batches": 3}), ("sven, prefetch", {"prefetch": True}),
             ("sven, overlapped aggregation", {"overlap_aggregation": True})],
}


def stream():
    data = synthetic_events(400, 60, bipartite=True, msg_dim=3, seed=1, burst_length=20)
    data.msg = data.msg.double()
    data.t = torch.arange(data.num_events) * 10  # distinct timestamps, same order
    per_batch = max(int(torch.cat([data.src[a:a + BATCH], data.dst[a:a + BATCH]]).bincount().max())
                    for a in range(0, data.num_events, BATCH))
    assert per_batch <= NEIGHBORS
    return data


def run(placement: str, options: dict, device: str, world: int) -> dict:
    """``EPOCHS`` epochs and the evaluation of one configuration on this rank, on ``device``."""
    data = stream()
    torch.manual_seed(3)
    model = TGN(data.num_nodes, 3, memory_dim=8, time_dim=4, embedding_dim=8, dropout=0.0).double().to(device)
    extra = {} if placement == "replicated" else {"partition": "interval"}
    tr = MemoryTrainer(model, data, batch_size=BATCH, lr=1e-2, num_neighbors=NEIGHBORS, seed=7,
                       parallelism=(world, 1, 1), mrr_negatives=5, memory_placement=placement, **extra, **options)
    losses, batch = [], []
    for epoch in range(EPOCHS):
        if epoch == EPOCHS - 1:
            loss, syncs = cc.count_host_syncs(tr.train_epoch, device)
        else:
            loss = tr.train_epoch()
        losses.append(loss)
        batch += tr.batch_losses.detach().cpu().tolist()
    measured = dict(tr.traffic()["measured"])
    memory, last_update = tr.memory_copy()
    metrics, scores = evaluation_scores(tr)
    out = {"losses": losses, "batch": batch, "measured": measured, "device": str(tr.device),
           "params": torch.cat([p.detach().reshape(-1).cpu() for p in tr.optimizer_params]),
           "memory": memory.cpu(), "last_update": last_update.cpu(), "val": metrics["val"], "test": metrics["test"],
           "scores": scores, "syncs": None if syncs is None else f"{syncs} in {len(tr.batch_losses)} steps"}
    tr.close()
    return out


def run_configs(rank: int, world: int, placement: str, devices: tuple) -> list:
    """Every configuration of ``placement`` on every device, in these ranks: ``[{device: result}]``."""
    torch.set_num_threads(1)
    return [{dev: run(placement, options, dev, world) for dev in devices} for _, options in CONFIGS[placement]]


def check(results: list, placement: str, devices: tuple) -> None:
    ref_dev, dev = devices
    for i, (label, _) in enumerate(CONFIGS[placement]):
        for rank, per_rank in enumerate(results):
            got, ref = per_rank[i][dev], per_rank[i][ref_dev]
            what = f"{label}, rank {rank}, {dev} vs {ref_dev}"
            assert len(got["batch"]) == len(ref["batch"]) >= 2 * EPOCHS, what
            for a, b in zip(got["losses"] + got["batch"], ref["losses"] + ref["batch"]):
                assert abs(a - b) <= cc.TOL, (what, got["losses"], ref["losses"])
            torch.testing.assert_close(got["params"], ref["params"], atol=cc.TOL, rtol=0, msg=f"{what}: parameters")
            torch.testing.assert_close(got["memory"], ref["memory"], atol=cc.TOL, rtol=0, msg=f"{what}: memory")
            assert torch.equal(got["last_update"], ref["last_update"]), f"{what}: last_update"
            # the evaluation's scores (AP, AUC and MRR are step functions of them: a near-tie broken by rounding
            # would move them by a pair's weight, so they are not compared at 1e-9)
            torch.testing.assert_close(got["scores"], ref["scores"], atol=cc.TOL, rtol=0, msg=f"{what}: scores")
            assert got["measured"] == ref["measured"], (what, got["measured"], ref["measured"])
            assert got["device"].startswith(torch.device(dev).type), (what, got["device"])
            assert got["losses"] == results[0][i][dev]["losses"], f"{what}: the ranks report other losses"


@pytest.mark.parametrize("placement", list(CONFIGS))
def test_cuda_memory_trainer_two_ranks_equal_cpu(placement, record_property):
    devices = ("cpu", "cuda:0")
    results = spawn(run_configs, 2, placement, devices, backend="gloo", timeout=90)
    for i, (label, _) in enumerate(CONFIGS[placement]):
        syncs = [r[i]["cuda:0"]["syncs"] for r in results]
        record_property(f"host_syncs:MemoryTrainer {label} (one epoch, ranks 0 / 1)", " / ".join(map(str, syncs)))
        print(f"host syncs of one CUDA epoch, MemoryTrainer {label}: {syncs}")
    check(results, placement, devices)
