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

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events  # noqa: E402
from pyg_dynscale.distributed.launch import spawn  # noqa: E402

CONFIGS = [(p, f) for p in ("partitioned", "sven") for f in (False, True)]  # (memory_placement, prefetch)


def _rank(rank, world, args):
    d = synthetic_events(args.events, args.nodes, msg_dim=16, seed=0)
    out = {}
    for placement, prefetch in CONFIGS:
        torch.manual_seed(0)
        model = TGN(d.num_nodes, 16, memory_dim=args.dim, time_dim=args.dim, embedding_dim=args.dim, dropout=0.0)
        tr = MemoryTrainer(model, d, batch_size=args.batch_size, lr=1e-4, parallelism=(world, 1, 1), seed=1,
                           memory_placement=placement, partition="interval", prefetch=prefetch)
        secs, loss = [], None
        for _ in range(args.epochs):
            t0 = time.perf_counter()
            loss = tr.train_epoch()
            secs.append(time.perf_counter() - t0)
        m = tr.traffic()["measured"]
        out[(placement, prefetch)] = {"secs": secs, "loss": loss, "total": m["total"],
                                      "prefetched": tr.prefetched["dispatch"]}
        tr.close()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=2_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a tiny stream (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.events, args.nodes, args.dim, args.batch_size, args.epochs = 1_200, 150, 8, 100, 1
    load0 = os.getloadavg()[0]
    runs = spawn(_rank, 2, args, timeout=3600)
    print(f"2 gloo processes, 1 thread each, {os.cpu_count()} cores; load average {load0:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end; {args.events} events, {args.nodes} nodes, dim {args.dim}, "
          f"local batch {args.batch_size}, float32")
    print(f"{'placement':>12} {'prefetch':>8} {'s/epoch':>8} {'vs off':>7} {'epoch loss':>10} {'bytes MB':>9} "
          f"{'prefetched':>10}")
    timed = {}
    for key in CONFIGS:
        per = [r[key] for r in runs]
        later = [max(p["secs"][e] for p in per) for e in range(1, args.epochs)] or [max(p["secs"][0] for p in per)]
        timed[key] = sum(later) / len(later)
    for placement, prefetch in CONFIGS:
        r0 = runs[0][(placement, prefetch)]
        ratio = timed[(placement, prefetch)] / timed[(placement, False)]
        print(f"{placement:>12} {str(prefetch):>8} {timed[(placement, prefetch)]:>8.2f} {ratio:>7.2f} "
              f"{r0['loss']:>10.6f} {r0['total'] / 1e6:>9.3f} {r0['prefetched']:>10}")


if __name__ == "__main__":
    main()
