"""Partitioned node memory: DistTGL's replicated memory (DepCache) vs DepComm
(``memory_placement="partitioned"``) vs Sven (``"sven"``) on 2 processes (gloo,
``parallelism=(2, 1, 1)``): per epoch the bytes each placement hands to the
collectives, summed over ranks (``MemoryTrainer.traffic()``: dispatch rows,
request ids, aggregation rows or the replicated all-gather, count vectors,
gradients), the epoch seconds (slowest rank), the validation AP, and Sven's
redundancy rates eta1 / eta2 (Eq. 1); then eta1 / eta2 against the batch size
(the lists of the (2, 1, 1) schedule, one process).

    python benchmarks/bench_sven.py [--epochs 1] [--quick] [--partition interval]

Streams: the shared CollegeMsg events (one constant message column) and a
synthetic bursty stream (``synthetic_events``, bursts of 20 events between
the same pairs). Model 100/100/100, batch 200, float32, CPU. Measured bytes
equal the predicted ones (the tests check it); the timings depend on the
machine's load.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from pyg_dynscale.ctdg import TGN, MemoryTrainer, load_event_list, synthetic_events  # noqa: E402
from pyg_dynscale.distributed.launch import spawn  # noqa: E402

PLACEMENTS = ("replicated", "partitioned", "sven")
KINDS = ("dispatch", "requests", "aggregation", "counts", "gradients", "total")


def _streams(quick: bool) -> list:
    out = []
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists():
        d = load_event_list(college)
        d.msg = torch.ones(d.num_events, 1)
        out.append(("CollegeMsg" + (" (first 6,000)" if quick else ""), d[:6000] if quick else d))
    n = 6000 if quick else 60_000
    out.append((f"bursty synthetic ({n:,} events)", synthetic_events(n, 1000, msg_dim=16, seed=0, burst_length=20)))
    return out


def _trainer(data, placement, partition, batch_size, par):
    torch.manual_seed(0)
    model = TGN(data.num_nodes, data.msg.size(-1), 100, 100, 100)
    extra = {} if placement == "replicated" else {"partition": partition}
    return MemoryTrainer(model, data, batch_size=batch_size, lr=1e-4, num_neighbors=10, seed=0, parallelism=par,
                         memory_placement=placement, **extra)


def _rank(rank, world, quick, stream, placement, partition, epochs):
    import torch.distributed as dist

    torch.set_num_threads(1)
    _, data = _streams(quick)[stream]
    tr = _trainer(data, placement, partition, 200, (world, 1, 1))
    rows = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        tr.train_epoch()
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        t = tr.traffic()
        sent = torch.tensor([t["measured"].get(k, 0) for k in KINDS], dtype=torch.float64)
        dist.all_reduce(sent)
        same = all(t["measured"][k] == t["predicted"][k] for k in t["measured"])
        rows.append({"seconds": float(took), "bytes": dict(zip(KINDS, sent.long().tolist())), "exact": same,
                     "eta": (t.get("redundancy", {}).get("eta1"), t.get("redundancy", {}).get("eta2"))})
    rows[-1]["ap"] = tr.evaluate("val")["ap"]
    tr.close()
    return rows


def _eta_sweep(data, batch_sizes, partition) -> list:
    """eta1 / eta2 of the (2, 1, 1) lists for each batch size (one process: the emulation walks both trainers)."""
    out = []
    for b in batch_sizes:
        tr = _trainer(data, "sven", partition, b, (2, 1, 1))
        tr.train_epoch()
        red = tr.traffic()["redundancy"]
        out.append((b, red["eta1"], red["eta2"]))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the first 6,000 events of each stream")
    ap.add_argument("--partition", default="interval", choices=("range", "interval", "flexbicut"))
    args = ap.parse_args(argv)
    streams = _streams(args.quick)
    print(f"2 processes (gloo), parallelism (2, 1, 1), partition={args.partition!r}; bytes per epoch summed over "
          "ranks (the last epoch), seconds = slowest rank", flush=True)
    head = (f"{'stream':<30} {'placement':<12} {'s/epoch':>8} " + " ".join(f"{k:>12}" for k in KINDS)
            + f" {'eta1':>6} {'eta2':>6} {'val AP':>7} exact")
    print(head)
    for s, (name, _) in enumerate(streams):
        for placement in PLACEMENTS:
            rows = spawn(_rank, 2, args.quick, s, placement, args.partition, args.epochs, timeout=4 * 3600)[0]
            r = rows[-1]
            e1, e2 = (f"{x:6.3f}" if x is not None else f"{'-':>6}" for x in r["eta"])
            print(f"{name:<30} {placement:<12} {r['seconds']:>8.2f} "
                  + " ".join(f"{r['bytes'][k]:>12,}" for k in KINDS) + f" {e1} {e2} {r['ap']:>7.4f} {r['exact']}",
                  flush=True)
    print("\nredundancy rates of the (2, 1, 1) lists against the batch size (one process)")
    print(f"{'stream':<30} {'batch':>6} {'eta1':>6} {'eta2':>6}")
    sizes = [50, 100, 200, 400] if args.quick else [50, 100, 200, 400, 800, 1600]
    for name, data in streams:
        for b, e1, e2 in _eta_sweep(data, sizes, args.partition):
            print(f"{name:<30} {b:>6} {e1:6.3f} {e2:6.3f}", flush=True)


if __name__ == "__main__":
    main()
