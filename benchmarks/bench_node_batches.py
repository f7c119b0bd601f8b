"""Node mini-batches of WindowTrainer (``node_batch_size``, ReInc §3.4.2-3.4.3): what a node batch computes and
holds, against whole snapshots.

1. Rows computed: ``plan_steps`` for one window of a static ``a x a`` grid (a road-like graph of large diameter),
   summed over the ``L`` steps, as a share of ``L N`` (deterministic; the table in docs/windows.md), for three
   per-step depths (TGCN, GConvLSTM(K=2), GConvGRU(K=2)) and node batches of ``M`` vertices in id order (a strip
   of the grid) or drawn at random (``shuffle=True``).
2. Training on the grid (PyGT's ``GConvGRU(K=2)`` + Linear, float64): the bytes autograd saves for the backward
   of one step (the activations; unique storages counted through ``saved_tensors_hooks``) for a whole-snapshot
   step and for each node batch, the epoch time of each, and a check that one node batch covering every vertex
   gives the full run's epoch loss.

    OMP_NUM_THREADS=1 python benchmarks/bench_node_batches.py            # the tables in docs/windows.md
    OMP_NUM_THREADS=1 python benchmarks/bench_node_batches.py --quick    # smoke run (small grid)
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from pyg_dynscale import DynamicGraphSignal
from pyg_dynscale.partition.halo_plan import HaloDepth
from pyg_dynscale.windows import WindowTrainer
from pyg_dynscale.windows.node_batches import plan_steps

DEPTHS = {"TGCN": HaloDepth(1, (0,)), "GConvLSTM(K=2)": HaloDepth(1, (1, 0)), "GConvGRU(K=2)": HaloDepth(2, (2,))}


def grid(a: int) -> torch.Tensor:
    """``[2, E]`` both directions of the ``a x a`` grid, vertex ``i * a + j`` at row ``i``, column ``j``."""
    idx = torch.arange(a * a).view(a, a)
    e = torch.cat([torch.stack([idx[:, :-1].flatten(), idx[:, 1:].flatten()]),
                   torch.stack([idx[:-1].flatten(), idx[1:].flatten()])], 1)
    return torch.cat([e, e.flip(0)], 1)


def rows_table(a: int, lags: tuple, sizes: tuple) -> list:
    """Section 1: ``(model, L, M, order, computed share, exact share)`` rows."""
    n, ei = a * a, grid(a)
    out = []
    for name, depth in DEPTHS.items():
        for L in lags:
            for M, shuffled in sizes:
                order = torch.randperm(n, generator=torch.Generator().manual_seed(0)) if shuffled else torch.arange(n)
                S = order[:M].sort().values
                plans = plan_steps([(ei, n)] * L, [torch.arange(n)] * L, S, depth)
                computed = sum(int(p.nodes.numel()) for p in plans) / (L * n)
                exact = sum(int(p.need.sum()) for p in plans) / (L * n)
                out.append((name, L, M, "shuffled" if shuffled else "id order", computed, exact))
    return out


def grid_signal(a: int, T: int, F: int, seed: int = 0) -> DynamicGraphSignal:
    g = torch.Generator().manual_seed(seed)
    ei = grid(a)
    w = torch.rand(ei.shape[1], generator=g, dtype=torch.float64) + 0.5
    xs = [torch.randn(a * a, F, generator=g, dtype=torch.float64) for _ in range(T)]
    ys = [x.sum(1) * 0.1 + torch.randn(a * a, generator=g, dtype=torch.float64) * 0.1 for x in xs]
    return DynamicGraphSignal([ei] * T, [w] * T, xs, ys)


class SavedBytes:
    """Bytes of the distinct storages autograd saves for backward inside the block."""

    def __init__(self) -> None:
        self.seen: dict = {}

    def __enter__(self) -> "SavedBytes":
        def pack(t: torch.Tensor) -> torch.Tensor:
            s = t.untyped_storage()
            self.seen[s.data_ptr()] = s.nbytes()
            return t

        self._ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.seen.values())


def training(a: int, T: int, lags: int, batch: int, M: int, hidden: int) -> dict:
    """Section 2 on an ``a x a`` grid."""
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    sig = grid_signal(a, T, 4)
    torch.manual_seed(0)
    cell, head = GConvGRU(4, hidden, 2).double(), torch.nn.Linear(hidden, 1).double()
    make = {"full": None, "node batches": M, "one node batch": a * a}
    out = {}
    for name, size in make.items():
        tr = WindowTrainer(copy.deepcopy(cell), sig, lags=lags, batch_size=batch, lr=0.01,
                           head=copy.deepcopy(head), node_batch_size=size)
        wins = tr.batches(0)[0]
        if size is None:
            with SavedBytes() as sb:
                tr.batch_loss(wins)
            saved = [sb.total]
        else:
            saved = []
            for S in tr._node_batches.node_batches():
                with SavedBytes() as sb:
                    tr._node_batches.node_batch_loss(wins, S)
                saved.append(sb.total)
        t0 = time.perf_counter()
        loss = tr.train_epoch()
        out[name] = {"saved_max": max(saved), "saved_mean": sum(saved) / len(saved), "steps": len(tr.batch_losses),
                     "epoch_s": time.perf_counter() - t0, "loss": loss}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small grid (smoke run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        a, lags, sizes = 20, (4, 8), ((40, False), (40, True), (160, False))
        ta, T, L, B, M, hid = 12, 10, 4, 2, 24, 8
    else:
        a, lags, sizes = 100, (4, 8, 12), ((500, False), (500, True), (2000, False))
        ta, T, L, B, M, hid = 60, 40, 8, 8, 600, 32
    print(f"== 1. rows computed per window, summed over its L steps, / (L N): {a} x {a} grid, N = {a * a}")
    print(f"{'model':16s} {'L':>3s} {'M':>5s} {'order':9s} {'computed':>9s} {'exact':>7s}")
    for name, L_, M_, order, comp, exact in rows_table(a, lags, sizes):
        print(f"{name:16s} {L_:3d} {M_:5d} {order:9s} {comp:9.3f} {exact:7.3f}")
    print(f"\n== 2. training GConvGRU(K=2, hidden {hid}) + Linear on a {ta} x {ta} grid (N = {ta * ta}), T = {T}, "
          f"lags {L}, batch {B}, node batches of {M} (id order), float64, 1 thread")
    res = training(ta, T, L, B, M, hid)
    print(f"{'run':15s} {'saved MB/step (max)':>20s} {'(mean)':>8s} {'steps':>6s} {'epoch s':>8s} {'loss':>12s}")
    for name, r in res.items():
        print(f"{name:15s} {r['saved_max'] / 2**20:20.2f} {r['saved_mean'] / 2**20:8.2f} {r['steps']:6d} "
              f"{r['epoch_s']:8.2f} {r['loss']:12.8f}")
    same = abs(res["one node batch"]["loss"] - res["full"]["loss"]) <= 1e-9 * abs(res["full"]["loss"])
    print(f"one node batch == full epoch loss: {same}")
    print(f"activation bytes per step, node batch / full: {res['node batches']['saved_max'] / res['full']['saved_max']:.3f}")


if __name__ == "__main__":
    main()
