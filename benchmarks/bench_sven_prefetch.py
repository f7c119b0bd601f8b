"""Sven's prefetch (§7.2) on 2 gloo processes: seconds per training epoch of
``MemoryTrainer`` with ``memory_placement="partitioned"`` and ``"sven"``,
``prefetch=False`` against ``prefetch=True`` (the next local batch's neighbour
lookup and dispatch / aggregation id lists organised on a thread while this
thread steps the optimizer), on a synthetic event stream; the epoch loss (the
same with and without: dropout off) and the bytes of the last epoch (the same
too). Each configuration trains ``--epochs`` epochs from the same weights; the
time is the slowest rank's mean over the epochs after the first. Prints the
load average: other processes on the machine distort the figures.

    python benchmarks/bench_sven_prefetch.py [--events 20000] [--nodes 2000] [--dim 32]
        [--batch-size 200] [--epochs 3] [--quick]
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events  # noqa: E402
from _shared import spawn_two, steady_seconds, sven_args, timed_epochs  # noqa: E402

CONFIGS = [(p, f) for p in ("partitioned", "sven") for f in (False, True)]  # (memory_placement, prefetch)


def _rank(rank, world, args):
    d = synthetic_events(args.events, args.nodes, msg_dim=16, seed=0)
    out = {}
    for placement, prefetch in CONFIGS:
        torch.manual_seed(0)
        model = TGN(d.num_nodes, 16, memory_dim=args.dim, time_dim=args.dim, embedding_dim=args.dim, dropout=0.0)
        tr = MemoryTrainer(model, d, batch_size=args.batch_size, lr=1e-4, parallelism=(world, 1, 1), seed=1,
                           memory_placement=placement, partition="interval", prefetch=prefetch)
        secs, loss = timed_epochs(tr, args.epochs)
        m = tr.traffic()["rank"]["measured"]  # this rank's
        out[(placement, prefetch)] = {"secs": secs, "loss": loss, "total": m["total"],
                                      "prefetched": tr.prefetched["dispatch"]}
        tr.close()
    return out


def main(argv=None) -> None:
    args = sven_args(__doc__, argv)
    runs = spawn_two(_rank, args)
    print(f"{'placement':>12} {'prefetch':>8} {'s/epoch':>8} {'vs off':>7} {'epoch loss':>10} {'bytes MB':>9} "
          f"{'prefetched':>10}")
    timed = {}
    for key in CONFIGS:
        timed[key] = steady_seconds([r[key] for r in runs], args.epochs)
    for placement, prefetch in CONFIGS:
        r0 = runs[0][(placement, prefetch)]
        ratio = timed[(placement, prefetch)] / timed[(placement, False)]
        print(f"{placement:>12} {str(prefetch):>8} {timed[(placement, prefetch)]:>8.2f} {ratio:>7.2f} "
              f"{r0['loss']:>10.6f} {r0['total'] / 1e6:>9.3f} {r0['prefetched']:>10}")


if __name__ == "__main__":
    main()
