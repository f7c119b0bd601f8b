"""Train PyGT's T-GCN on England COVID with pyg_dynscale's fused runtime.

The model object is PyGT's own ``TGCN``; ``FusedTrainer`` wraps it (sharing
its parameters), runs all 53 snapshots' GCNs in one pass over the
block-diagonal graph and the GRU-like recurrence over all vertex sequences at
once, and computes exactly the loss of PyGT's loop (H carried across
snapshots, MSE averaged over snapshots, one step per epoch).

    python examples/fused_tgcn.py [--epochs 50]
"""
import argparse

import torch

from pyg_dynscale import temporal_signal_split
from pyg_dynscale._optional import import_pygt
from pyg_dynscale.data.loaders import load_england_covid
from pyg_dynscale.runtime import FusedTrainer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    args = ap.parse_args()
    TGCN = import_pygt().nn.recurrent.TGCN
    torch.manual_seed(0)
    signal = load_england_covid()  # embedded in the package: no download
    train, test = temporal_signal_split(signal, train_ratio=0.8)

    tgcn = TGCN(signal.num_node_features, 32)  # the user's PyGT model object
    head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(32, 1))
    trainer = FusedTrainer(tgcn, train, head=head, loss="mse", lr=0.01)
    for epoch in range(args.epochs):
        loss = trainer.train_epoch()
        if epoch % 10 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch:3d}  train MSE {loss:.4f}")

    # evaluate on the test window, continuing each vertex's state from the train window
    print(f"test MSE {trainer.evaluate(test)["mse"]:.4f}")
    # the trained parameters live in the user's own object:
    print("trained PyGT object:", type(tgcn).__module__ + "." + type(tgcn).__name__)


if __name__ == "__main__":
    main()
