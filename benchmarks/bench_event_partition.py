"""Communication balance of the node-memory partitions of an event stream
(Sven TPDS §5.4): range (DGL), interval (Sven HPDC) and Re-FlexBiCut
(``pyg_dynscale.ctdg.memory_partition``) on the requests of one pre-sampled
training epoch (``pyg_dynscale.ctdg.presample.trainer_requests``, the
``(M, 1, 1)`` schedule, batch 200 per trainer, 10 neighbours).

    python benchmarks/bench_event_partition.py [--quick] [--parts 2 4 8]

Per stream and number of parts ``M``: the balance cost (the largest per-rank
rows fetched + served over the epoch), the residual matrix's largest and mean
off-diagonal entry (Sven Eq. 2), how far the balance cost is above
``balance_lower_bound`` (no partition can go below it), flexbicut's reduction of the balance cost
against range and interval (Sven reports up to -59.2% / -48.5% on REDDIT with
APAN), the parts' sizes and the time of the pre-sampling and of each
partitioner. Streams: the shared CollegeMsg events and two synthetic bursty
streams (``synthetic_events``: half the events in bursts of 50 from one node,
Zipf-like activity), a dense one (200,000 events on 5,000 nodes: every
trainer needs nearly every vertex) and a sparse one (100,000 on 50,000). :func:`table` returns the rows for other benchmarks.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from pyg_dynscale.ctdg import load_event_list, split_ranges, synthetic_events  # noqa: E402
from pyg_dynscale.ctdg.presample import trainer_requests  # noqa: E402
from pyg_dynscale.ctdg.memory_partition import (  # noqa: E402
    METHODS, balance_lower_bound, communication_matrix, partition_vertices, rank_costs, residual_matrix,
)


def streams(quick: bool) -> list:
    """``[(name, TemporalData)]``."""
    out = []
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists():
        d = load_event_list(str(college))
        out.append(("CollegeMsg" + (" (first 6,000)" if quick else ""), d[:6000] if quick else d))
    sizes = [(6000, 500)] if quick else [(200_000, 5000), (100_000, 50_000)]
    for e, n in sizes:
        out.append((f"bursty synthetic ({e:,} events, {n:,} nodes)",
                    synthetic_events(e, n, bipartite=False, burst_fraction=0.5, burst_length=50, seed=0)))
    return out


def table(data, parts, batch_size: int = 200, num_neighbors: int = 10) -> list[dict]:
    """One row per (parts, method) on ``data``'s training events."""
    n = int(data.num_nodes)
    train = split_ranges(data)[0]
    rows = []
    for m in parts:
        t0 = time.perf_counter()
        req = trainer_requests(data.src, data.dst, n, train, batch_size, m, num_neighbors)
        presample = time.perf_counter() - t0
        bound = balance_lower_bound(req, n, m)
        res = {}
        for method in METHODS:
            t0 = time.perf_counter()
            owner = partition_vertices(method, n, m, req)
            seconds = time.perf_counter() - t0
            c = communication_matrix(owner, req, m)
            r = residual_matrix(c)[~torch.eye(m, dtype=torch.bool)]
            res[method] = {"parts": m, "method": method, "balance": float(rank_costs(c).max()),
                           "residual_max": float(r.max()), "residual_mean": float(r.mean()),
                           "sizes": torch.bincount(owner, minlength=m).tolist(), "seconds": seconds,
                           "presample": presample, "requested": int(req[2].sum()), "bound": bound}
        for row in res.values():
            row["vs_range"] = row["balance"] / res["range"]["balance"] - 1.0
            row["vs_interval"] = row["balance"] / res["interval"]["balance"] - 1.0
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small streams, 2 and 4 parts")
    ap.add_argument("--parts", type=int, nargs="+", default=None, help="numbers of parts (default 2 4 8)")
    ap.add_argument("--batch-size", type=int, default=200)
    ap.add_argument("--num-neighbors", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    parts = args.parts or ([2, 4] if args.quick else [2, 4, 8])
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (timings are wall time)")
    for name, data in streams(args.quick):
        print(f"\n{name}: {int(data.num_nodes):,} nodes, batch {args.batch_size} per trainer, "
              f"{args.num_neighbors} neighbours")
        print(f"| M | method | balance cost | vs range | vs interval | above bound | residual max | residual mean | "
              f"largest part | partition s | presample s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in table(data, parts, args.batch_size, args.num_neighbors):
            print(f"| {r['parts']} | {r['method']} | {r['balance']:,.0f} | {100 * r['vs_range']:+.1f}% | "
                  f"{100 * r['vs_interval']:+.1f}% | {100 * (r['balance'] / r['bound'] - 1) if r['bound'] else 0.0:+.1f}% | "
                  f"{r['residual_max']:,.0f} | {r['residual_mean']:,.1f} | "
                  f"{max(r['sizes']):,} | {r['seconds']:.3f} | {r['presample']:.2f} |")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
