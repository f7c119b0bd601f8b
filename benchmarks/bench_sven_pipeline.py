"""Sven's pipeline on 2 gloo processes: seconds per training epoch of
``MemoryTrainer`` with ``memory_placement="sven"`` and ``micro_batches`` 1, 2,
4, ``"auto"``, and of ``gradient_sync="delayed"`` against ``"sync"`` (also with
the replicated memory), on a synthetic event stream; the epoch loss, the bytes
of the last epoch (dispatch, aggregation, gradients) and the ``n`` that
``"auto"`` chose. Each configuration trains ``--epochs`` epochs from the same
weights; the time is the slowest rank's mean over the epochs after the first
(the first also profiles ``"auto"``). Dropout is off, so every synchronous
configuration trains the same numbers (the losses agree). Prints the load
average: other processes on the machine distort the figures.

    python benchmarks/bench_sven_pipeline.py [--events 20000] [--nodes 2000] [--dim 32]
        [--batch-size 200] [--epochs 3] [--quick]
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events  # noqa: E402
from _shared import spawn_two, steady_seconds, sven_args, timed_epochs  # noqa: E402

CONFIGS = [  # (label, memory_placement, micro_batches, gradient_sync)
    ("replicated sync", "replicated", 1, "sync"),
    ("replicated delayed", "replicated", 1, "delayed"),
    ("sven n=1 sync", "sven", 1, "sync"),
    ("sven n=1 delayed", "sven", 1, "delayed"),
    ("sven n=2", "sven", 2, "sync"),
    ("sven n=4", "sven", 4, "sync"),
    ("sven n=auto", "sven", "auto", "sync"),
]


def _rank(rank, world, args):
    d = synthetic_events(args.events, args.nodes, msg_dim=16, seed=0)
    out = {}
    for label, placement, micro, sync in CONFIGS:
        torch.manual_seed(0)
        model = TGN(d.num_nodes, 16, memory_dim=args.dim, time_dim=args.dim, embedding_dim=args.dim, dropout=0.0)
        extra = {} if placement == "replicated" else {"partition": "interval", "micro_batches": micro}
        tr = MemoryTrainer(model, d, batch_size=args.batch_size, lr=1e-4, parallelism=(world, 1, 1), seed=1,
                           memory_placement=placement, gradient_sync=sync, **extra)
        secs, loss = timed_epochs(tr, args.epochs)
        m = tr.traffic()["rank"]["measured"]  # this rank's
        out[label] = {"secs": secs, "loss": loss, "dispatch": m["dispatch"] + m["requests"],
                      "aggregation": m["aggregation"], "gradients": m["gradients"],
                      "n": tr.micro_batches_chosen if tr._micro is not None else None}
        tr.close()
    return out


def main(argv=None) -> None:
    args = sven_args(__doc__, argv)
    runs = spawn_two(_rank, args)
    print(f"{'configuration':>20} {'s/epoch':>8} {'vs sven n=1':>11} {'epoch loss':>10} {'dispatch MB':>11} "
          f"{'aggr MB':>8} {'grad MB':>8} {'n':>4}")
    timed = {}
    for label, *_ in CONFIGS:
        timed[label] = steady_seconds([r[label] for r in runs], args.epochs)
    for label, *_ in CONFIGS:
        r0 = runs[0][label]
        print(f"{label:>20} {timed[label]:>8.2f} {timed[label] / timed['sven n=1 sync']:>11.2f} {r0['loss']:>10.6f} "
              f"{r0['dispatch'] / 1e6:>11.2f} {r0['aggregation'] / 1e6:>8.2f} {r0['gradients'] / 1e6:>8.2f} "
              f"{'' if r0['n'] is None else r0['n']:>4}")


if __name__ == "__main__":
    main()
