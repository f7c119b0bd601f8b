"""Train DGC's T-GCN on England COVID across processes with DistributedTrainer.

Partitions the embedded England COVID signal with PGC into one part per
process, trains with halo exchanges between the processes, and prints the
loss, the test MSE on the last 20% of snapshots and the traffic measured
against the communication plan's prediction. The same script runs under
torchrun (one process per rank) or, without torchrun, spawns ``--nproc``
local gloo processes itself:

    python examples/distributed_tgcn.py --nproc 2 [--epochs 50]
    torchrun --nproc-per-node 2 examples/distributed_tgcn.py
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from pyg_dynscale.data.loaders import load_england_covid
from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.nn import TGCN
from pyg_dynscale.partition import partition


def train(rank: int, world_size: int, epochs: int) -> dict:
    torch.manual_seed(0)
    signal = load_england_covid()  # embedded in the package: no download
    train_sig, test_sig = signal.split(0.8)
    model = TGCN(signal.num_node_features, 32, num_layers=2)  # DGC's T-GCN: 2-layer GCNs
    head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(32, 1))
    part = partition(train_sig, "pgc", world_size, model.dependency_pattern(), seed=0)
    trainer = DistributedTrainer(model, train_sig, part, head=head, loss="mse", lr=0.01)
    for epoch in range(epochs):
        loss = trainer.train_epoch()
        if rank == 0 and (epoch % 10 == 0 or epoch == epochs - 1):
            print(f"epoch {epoch:3d}  train MSE {loss:.4f}", flush=True)
    traffic = trainer.traffic()
    # test: the trained model on the test window, each vertex's state continued from the training window
    test_part = partition(test_sig, "pgc", world_size, model.dependency_pattern(), seed=0)
    test_mse = trainer.evaluate(test_sig, test_part)["mse"]
    return {"loss": loss, "test_mse": test_mse, "traffic": traffic, "epoch_s": sum(trainer.epoch_seconds) / epochs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2, help="processes to spawn when not started by torchrun")
    ap.add_argument("--epochs", type=int, default=50)
    args = ap.parse_args()
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
        out = train(dist.get_rank(), dist.get_world_size(), args.epochs)
        report = dist.get_rank() == 0
        dist.destroy_process_group()
    else:
        out = spawn(train, args.nproc, args.epochs)[0]
        report = True
    if report:
        t = out["traffic"]
        print(f"test MSE {out['test_mse']:.4f}  mean epoch {out['epoch_s'] * 1e3:.1f} ms")
        print("bytes per epoch by kind, measured / plan: " + ", ".join(
            f"{k} {t['measured'][k]}/{t['predicted'][k]}" for k in ("spatial", "temporal", "redistribution", "total")))
        print(f"halo features loaded once: {t['load']['measured']} bytes (plan {t['load']['predicted']})")


if __name__ == "__main__":
    main()
