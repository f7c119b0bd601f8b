"""Accuracy under mini-batch parallelism: test AP against epochs for ``parallelism=(i, 1, 1)``,
i = 1, 2, 4, with and without DistTGL's remedy (``MemoryTrainer(lr_scaling=...)``), in one run.

    python benchmarks/bench_minibatch_accuracy.py [--stream college|mathoverflow|synthetic]
        [--events N] [--epochs E] [--parallelism 1,2,4] [--scalings none,linear,sqrt] [--quick]

Every configuration starts from the same initial weights and seed. ``(i, 1, 1)`` runs as the
one-process emulation, which computes what ``i`` processes compute (tests/ctdg/test_parallel_ranks.py,
float64 to 1e-9), so the table does not need ``i`` cores; the seconds are the emulation's (all ``i``
trainers serially), not a distributed run's. ``i = 1`` is printed once: every ``lr_scaling`` trains it
bit for bit alike (tests/ctdg/test_lr_scaling.py). TGN 100/100/100, local batch 200, 10 neighbours,
``--lr`` 1e-4 (the example's), float32, one thread.

Streams: the shared SNAP CollegeMsg (the first ``--events``; 30,000 by default) and sx-mathoverflow
(the first ``--events``), each with one constant message column (PyG's ``TGNMemory`` needs one), or
a synthetic bipartite stream with 16 message columns (``synthetic_events``; ``--quick`` takes a
tiny one). The last lines give, per configuration, the test AP gap to ``i = 1`` after each epoch.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from pyg_dynscale.ctdg import TGN, MemoryTrainer, load_event_list, synthetic_events  # noqa: E402

FILES = {"college": "snap/CollegeMsg.txt", "mathoverflow": "snap/sx-mathoverflow.txt.gz"}


def stream(name: str, events: int):
    """``(label, TemporalData, num_nodes)``: the first ``events`` events of the stream."""
    if name == "synthetic":
        d = synthetic_events(events, max(events // 20, 50), msg_dim=16, seed=0)
        return f"synthetic ({events:,} events)", d, int(d.num_nodes)
    path = DATASETS / FILES[name]
    d = load_event_list(path)[:events]
    d.msg = torch.ones(d.num_events, 1)
    nodes = int(max(int(d.src.max()), int(d.dst.max()))) + 1  # ids are numbered by first appearance
    return f"{path.name} (first {d.num_events:,} events)", d, nodes


def curve(data, nodes: int, par: tuple, scaling: str, args) -> tuple:
    """Test AP after each epoch, the epoch losses, the rate in effect and the training seconds."""
    torch.manual_seed(0)
    model = TGN(nodes, data.msg.size(-1), args.dim, args.dim, args.dim)
    trainer = MemoryTrainer(model, data, batch_size=args.batch_size, lr=args.lr, num_neighbors=10, seed=0,
                            parallelism=par, lr_scaling=scaling)
    aps, losses, secs = [], [], 0.0
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        losses.append(trainer.train_epoch())
        secs += time.perf_counter() - t0
        aps.append(trainer.evaluate("test")["ap"])
    return aps, losses, trainer.lr, secs


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stream", choices=("college", "mathoverflow", "synthetic"), default="college")
    ap.add_argument("--events", type=int, default=30_000)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--parallelism", default="1,2,4", help="the values of i (comma-separated)")
    ap.add_argument("--scalings", default="none,linear,sqrt", help="lr_scaling values (comma-separated)")
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--dim", type=int, default=100, help="memory, time and embedding width")
    ap.add_argument("--quick", action="store_true", help="a tiny synthetic stream (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.stream, args.events, args.epochs, args.parallelism, args.dim, args.batch_size = \
            "synthetic", 1_500, 2, "1,2", 8, 50
    torch.set_num_threads(1)
    label, data, nodes = stream(args.stream, args.events)
    ii = [int(x) for x in args.parallelism.split(",")]
    scalings = args.scalings.split(",")
    print(f"{label}, {nodes:,} nodes; TGN {args.dim}/{args.dim}/{args.dim}, local batch {args.batch_size}, "
          f"--lr {args.lr:g}, float32, 1 thread, load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = {}
    for i in ii:
        for scaling in (scalings[:1] if i == 1 else scalings):  # i = 1: every scaling is the same run
            rows[(i, scaling)] = curve(data, nodes, (i, 1, 1), scaling, args)
            aps, _, lr, secs = rows[(i, scaling)]
            print(f"  done {i}x1x1 {scaling:<6} lr {lr:.3g}: test AP {' '.join(f'{a:.4f}' for a in aps)} "
                  f"({secs:.0f} s)", flush=True)
    head = f"{'parallelism':<12} {'lr_scaling':<10} {'lr':>8} " + " ".join(f"{f'ep {e + 1}':>7}" for e in
                                                                          range(args.epochs))
    print("\ntest AP after each epoch\n" + head)
    for (i, scaling), (aps, _, lr, _) in rows.items():
        name = "(any)" if i == 1 else scaling
        print(f"{f'{i}x1x1':<12} {name:<10} {lr:>8.2g} " + " ".join(f"{a:>7.4f}" for a in aps))
    one = next((v[0] for (i, _), v in rows.items() if i == 1), None)
    if one is not None:
        print("\ntest AP minus 1x1x1's after each epoch\n" + head)
        for (i, scaling), (aps, _, lr, _) in rows.items():
            if i != 1:
                print(f"{f'{i}x1x1':<12} {scaling:<10} {lr:>8.2g} " + " ".join(f"{a - b:>+7.4f}" for a, b in
                                                                                 zip(aps, one)))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return {f"{i}x1x1 {s}": {"ap": v[0], "loss": v[1], "lr": v[2], "seconds": v[3]} for (i, s), v in rows.items()}


if __name__ == "__main__":
    main()
