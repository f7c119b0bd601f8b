r"""Train a PyTorch Geometric Temporal T-GCN on England COVID through
:class:`pyg_dynscale.data.DynamicGraphSignal` (single process).

This is the project's main job (``make demo``). It is a plain PyGT training
loop: the only pyg_dynscale parts are the data container (the embedded England
COVID dataset, no download) and its temporal split. Each snapshot is a PyG
``Data`` with ``x [|V_t|, lags]``, ``edge_index [2, E_t]``, ``edge_attr [E_t]``
(the edge weight, as PyGT names it), ``y [|V_t|]`` and ``n_id [|V_t|]``.

The recurrent state is kept per *global* vertex (a ``[num_vertices, hidden]``
table indexed with ``n_id``), so the same loop is correct when the vertex set
changes between snapshots; on England COVID it is fixed (129 regions).

Training is full-batch backpropagation through time over the training
snapshots (one optimizer step per epoch), as in PyGT's examples; the test
split continues from the hidden state reached at the end of the training
snapshots (no look-ahead: ``signal.split`` is temporal).

Usage::

    python examples/train_tgcn.py --epochs 100 --hidden 32 --lr 0.01 --seed 0
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm.auto import tqdm

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale._optional import import_pygt


class RecurrentTGCN(torch.nn.Module):
    r"""T-GCN cell (PyGT ``TGCN``) followed by a linear read-out:
    :math:`H_t = \mathrm{TGCN}(X_t, A_t, H_{t-1})`,
    :math:`\hat y_t = W\,\mathrm{ReLU}(H_t) + b`.

    Args:
        in_channels (int): node features per snapshot (the lags).
        hidden (int): T-GCN hidden size.
    """

    def __init__(self, in_channels: int, hidden: int) -> None:
        super().__init__()
        tgcn_cls = import_pygt("examples/train_tgcn.py").nn.recurrent.TGCN
        self.recurrent = tgcn_cls(in_channels, hidden)
        self.linear = torch.nn.Linear(hidden, 1)

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], h: Optional[Tensor]
    ) -> tuple[Tensor, Tensor]:
        h = self.recurrent(x, edge_index, edge_weight, h)  # [|V_t|, hidden]
        return self.linear(F.relu(h)).squeeze(-1), h  # [|V_t|], [|V_t|, hidden]


def run_sequence(
    model: RecurrentTGCN, signal: DynamicGraphSignal, state: Tensor
) -> tuple[Tensor, Tensor]:
    """Run ``model`` over all snapshots of ``signal`` in order.

    Args:
        state: ``[num_vertices, hidden]`` hidden state per global vertex.

    Returns:
        The mean over snapshots of the per-snapshot MSE, and the new state.
    """
    cost = state.new_zeros(())
    for snapshot in signal:
        h_prev = state[snapshot.n_id]  # gather this snapshot's vertices
        y_hat, h = model(snapshot.x, snapshot.edge_index, snapshot.edge_attr, h_prev)
        cost = cost + torch.mean((y_hat - snapshot.y) ** 2)
        state = state.index_copy(0, snapshot.n_id, h)  # out-of-place: keeps autograd intact
    return cost / len(signal), state


def load_signal() -> DynamicGraphSignal:
    """The embedded England COVID dataset (PyGT's ``lags=8`` windows)."""
    from pyg_dynscale.data.loaders import load_england_covid

    return load_england_covid()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=100, help="training epochs (default: 100)")
    p.add_argument("--hidden", type=int, default=32, help="T-GCN hidden size (default: 32)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default: 0.01)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--train-ratio", type=float, default=0.8, help="temporal train split (default: 0.8)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    p.add_argument(
        "--threads", type=int, default=1,
        help="CPU intra-op threads (default: 1; the graphs are small, and more threads on a busy "
        "machine make OpenMP spin: 20 epochs took 66 s with 2 threads vs 6 s with 1 on a loaded 2-core box)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.hidden < 1 or args.threads < 1 or args.lr <= 0:
        p.error("--epochs, --hidden and --threads must be >= 1 and --lr > 0")
    return args


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Train and evaluate; returns the metrics that are printed."""
    args = parse_args(argv)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _train(args)
    finally:
        torch.set_num_threads(previous_threads)


def _train(args: argparse.Namespace) -> dict[str, Any]:
    seed_everything(args.seed)
    device = torch.device(args.device)
    t0 = time.perf_counter()

    signal = load_signal().to(device)
    train, test = signal.split(args.train_ratio)
    model = RecurrentTGCN(signal.num_node_features, args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def zero_state() -> Tensor:
        return torch.zeros(signal.num_vertices, args.hidden, device=device)

    train_losses: list[float] = []
    bar = tqdm(range(args.epochs), desc="T-GCN", unit="epoch", disable=args.no_progress, file=sys.stderr)
    model.train()
    for _ in bar:
        optimizer.zero_grad()
        loss, _ = run_sequence(model, train, zero_state())
        loss.backward()
        optimizer.step()
        train_losses.append(float(loss.detach()))
        bar.set_postfix(train_mse=f"{train_losses[-1]:.4f}")
    bar.close()

    model.eval()
    with torch.no_grad():
        train_mse, state = run_sequence(model, train, zero_state())
        test_mse, _ = run_sequence(model, test, state)
    seconds = time.perf_counter() - t0

    metrics = {
        "dataset": "england_covid",
        "snapshots": signal.num_snapshots,
        "train_snapshots": train.num_snapshots,
        "test_snapshots": test.num_snapshots,
        "epochs": args.epochs,
        "hidden": args.hidden,
        "lr": args.lr,
        "seed": args.seed,
        "train_losses": train_losses,
        "train_mse": float(train_mse),
        "test_mse": float(test_mse),
        "seconds": seconds,
    }
    print(f"test MSE: {metrics['test_mse']:.4f}")
    print(
        f"T-GCN on england_covid: {signal.num_snapshots} snapshots "
        f"({train.num_snapshots} train / {test.num_snapshots} test), {signal.num_vertices} vertices, "
        f"epochs={args.epochs} hidden={args.hidden} lr={args.lr} seed={args.seed} | "
        f"train MSE {metrics['train_mse']:.4f} | test MSE {metrics['test_mse']:.4f} | {seconds:.1f} s"
    )
    return metrics


if __name__ == "__main__":
    main()
