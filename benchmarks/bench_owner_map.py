"""OwnerMap's two kinds (``"dense"``: an ``[N]`` local-id table; ``"hash"``:
sorted keys + ``searchsorted``, Sven's dual hash) on the lookups a mini-batch's
dispatch makes: ``owner_of(ids)`` + ``local_of(ids)`` for a batch of ids, with
interval (contiguous) and random owners. Prints the median microseconds per
batch of each kind and the ratio hash / dense (> 1: dense is faster), the
build time of each map, and the machine's load average (other processes
distort the figures).

    python benchmarks/bench_owner_map.py [--nodes 10000 100000 1000000 10000000]
        [--batch 2000 20000] [--parts 4] [--repeat 200] [--device cpu] [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyg_dynscale.ctdg.owner_map import OwnerMap  # noqa: E402


def owners(kind: str, n: int, parts: int, g: torch.Generator) -> torch.Tensor:
    if kind == "interval":
        return torch.arange(n) * parts // n
    return torch.randint(0, parts, (n,), generator=g)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_lookups(om: OwnerMap, batches: list, device: torch.device) -> float:
    """Median seconds of ``owner_of`` + ``local_of`` over the batches (after 5 warm-up calls)."""
    for ids in batches[:5]:
        om.owner_of(ids), om.local_of(ids)
    out = []
    for ids in batches:
        sync(device)
        t0 = time.perf_counter()
        om.owner_of(ids)
        om.local_of(ids)
        sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 10_000_000])
    ap.add_argument("--batch", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="N = 10k, 2k ids, 20 batches (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.nodes, args.batch, args.repeat = [10_000], [2_000], 20
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, device {device}, {torch.get_num_threads()} intra-op threads, "
          f"load average {os.getloadavg()[0]:.2f} / {os.cpu_count()} cores at start")
    print(f"{'owners':>8} {'N':>10} {'batch':>6} {'dense us':>9} {'hash us':>9} {'hash/dense':>10}"
          f" {'build dense ms':>14} {'build hash ms':>13}")
    ratios = []
    for okind in ("interval", "random"):
        for n in args.nodes:
            owner = owners(okind, n, args.parts, g).to(device)
            maps, build = {}, {}
            for kind in ("dense", "hash"):
                sync(device)
                t0 = time.perf_counter()
                maps[kind] = OwnerMap(owner, args.parts, kind)
                sync(device)
                build[kind] = time.perf_counter() - t0
            for b in args.batch:
                # a mini-batch's distinct vertices: unique ids, sorted (what torch.unique hands the dispatch)
                batches = [torch.randint(0, n, (b,), generator=g).unique().to(device) for _ in range(args.repeat)]
                t = {kind: time_lookups(maps[kind], batches, device) for kind in ("dense", "hash")}
                ratios.append(t["hash"] / t["dense"])
                print(f"{okind:>8} {n:>10} {b:>6} {t['dense'] * 1e6:>9.1f} {t['hash'] * 1e6:>9.1f} "
                      f"{ratios[-1]:>10.2f} {build['dense'] * 1e3:>14.1f} {build['hash'] * 1e3:>13.1f}")
    print(f"hash/dense: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}; "
          f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
