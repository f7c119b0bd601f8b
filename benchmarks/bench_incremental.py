"""Incremental aggregation vs recomputation as the per-snapshot change ratio varies (ReInc §3.2, Fig. 13).

A synthetic sequence (default 20k vertices, 200k edges, T=50, F=32 features, float32): every snapshot replaces a
fraction ``r`` of the edges (half deleted, as many inserted) and changes the features of a fraction ``r`` of the
vertices. For each ``r`` and aggregation (``sum``; ``gcn``: TGCN's input aggregation; ``cheb`` K=2: GConvGRU's
T_1), the time to aggregate all snapshots:

* ``recompute``:   PyG's normalization and one propagation per snapshot (what ``nn/reuse.py`` does without
                   incremental aggregation, there over the block-diagonal graph of all snapshots at once);
* ``scratch``:     ``IncrementalAggregation(threshold=0)``: every snapshot from scratch, with the bookkeeping that
                   incremental aggregation needs (sorting and diffing the snapshots);
* ``incremental``: ``threshold=inf, refresh=None``: every snapshot after the first from the previous one;
* ``auto``:        the default threshold (``DEFAULT_THRESHOLD``) and refresh.

``rho`` is the measured change ratio (``IncrementalAggregation.ratios``: changed edge terms / edges, where a kept
edge whose source row changed counts; with normalization a degree change changes the source row), averaged over
the snapshots. The crossover is where ``incremental`` stops beating ``scratch`` (interpolated in rho): the default
threshold in ``pyg_dynscale/nn/incremental.py`` is set from it.

    OMP_NUM_THREADS=1 python benchmarks/bench_incremental.py            # the table in docs/windows.md
    OMP_NUM_THREADS=1 python benchmarks/bench_incremental.py --quick    # smoke run (small graph)
"""
from __future__ import annotations

import argparse
import math
import time

import torch
from torch import Tensor

from pyg_dynscale.nn.incremental import DEFAULT_THRESHOLD, IncrementalAggregation

RATIOS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5)


def sequence(V: int, E: int, T: int, F: int, r: float, seed: int = 0, dtype=torch.float32,
             shuffle: bool = False) -> tuple:
    """``(x, edge_index, edge_weight, node_ptr, edge_ptr)`` of the synthetic sequence (fixed vertex set); an inserted
    edge takes a deleted one's place in the stored list (``shuffle``: every snapshot's list in a new order)."""
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, V, (E,), generator=g), torch.randint(0, V, (E,), generator=g)
    w = torch.rand(E, generator=g, dtype=dtype) + 0.1
    x = torch.randn(V, F, generator=g, dtype=dtype)
    m, mv = max(1, round(r * E / 2)), max(1, round(r * V))
    xs, eis, ws = [], [], []
    for t in range(T):
        if t:
            pos = torch.randperm(E, generator=g)[:m]     # m deleted, m inserted in their place
            src, dst, w = src.clone(), dst.clone(), w.clone()
            src[pos], dst[pos] = torch.randint(0, V, (m,), generator=g), torch.randint(0, V, (m,), generator=g)
            w[pos] = torch.rand(m, generator=g, dtype=dtype) + 0.1
            x = x.clone()
            x[torch.randperm(V, generator=g)[:mv]] = torch.randn(mv, F, generator=g, dtype=dtype)
        xs.append(x)
        perm = torch.randperm(E, generator=g) if shuffle else torch.arange(E)
        eis.append(torch.stack([src, dst])[:, perm])
        ws.append(w[perm])
    return (torch.cat(xs), torch.cat(eis, 1), torch.cat(ws), torch.arange(T + 1) * V, torch.arange(T + 1) * E)


def recompute(x, ei, ew, nptr, eptr, aggr: str, K: int) -> Tensor:
    """PyG's normalization and propagation, snapshot by snapshot."""
    from torch_geometric.nn import ChebConv
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    out = []
    cheb = ChebConv(1, 1, 2, normalization="sym")
    for t in range(len(nptr) - 1):
        a, b, e0, e1 = int(nptr[t]), int(nptr[t + 1]), int(eptr[t]), int(eptr[t + 1])
        xt, et, wt = x[a:b], ei[:, e0:e1], ew[e0:e1]
        if aggr == "gcn":
            et, wt = gcn_norm(et, wt, b - a, False, True, "source_to_target", x.dtype)
        elif aggr == "cheb":
            et, wt = cheb.__norm__(et, b - a, wt, "sym", None, dtype=x.dtype)
        def prop(y):
            return y.new_zeros(y.shape).index_add_(0, et[1], y.index_select(0, et[0]) * wt[:, None])

        basis = [xt, prop(xt)]
        for _ in range(2, K):
            basis.append(2.0 * prop(basis[-1]) - basis[-2])
        out.append(basis[-1])
    return torch.cat(out)


def _time(f) -> tuple:
    t0 = time.perf_counter()
    r = f()
    return time.perf_counter() - t0, r


def run(V: int, E: int, T: int, F: int, ratios, aggrs, shuffle: bool = False) -> list:
    rows = []
    for r in ratios:
        data = sequence(V, E, T, F, r, shuffle=shuffle)
        for aggr, K in aggrs:
            t_re, _ = _time(lambda: recompute(*data, aggr, K))
            res = {}
            for mode, kw in (("scratch", dict(threshold=0.0)), ("incremental", dict(threshold=math.inf, refresh=None)),
                             ("auto", {})):
                inc = IncrementalAggregation(aggr, K, **kw)
                res[mode] = _time(lambda: inc(*data))[0]
                if mode == "incremental":
                    rho = sum(rs[-1] for rs in inc.ratios[1:]) / max(len(inc.ratios) - 1, 1)
                    modes = inc.modes
                if mode == "auto":
                    n_inc = sum(m[-1] == "incremental" for m in inc.modes)
            rows.append(dict(r=r, aggr=f"{aggr}" + (f" K={K}" if aggr == "cheb" else ""), rho=rho, recompute=t_re,
                             n_inc=n_inc, forced=sum(m[-1] == "incremental" for m in modes), **res))
    return rows


def crossover(rows: list, aggr: str) -> float:
    """The rho where incremental time == scratch time (log-linear between the neighbouring measurements)."""
    pts = sorted((x["rho"], x["incremental"] / x["scratch"]) for x in rows if x["aggr"] == aggr)
    for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
        if q0 < 1.0 <= q1:
            f = (1.0 - q0) / (q1 - q0)
            return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0)))
    return math.inf if pts and pts[-1][1] < 1.0 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small graph, three ratios (smoke test)")
    ap.add_argument("--vertices", type=int, default=20_000)
    ap.add_argument("--edges", type=int, default=200_000)
    ap.add_argument("--snapshots", type=int, default=50)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--shuffle", action="store_true", help="every snapshot's edge list in a new order (matched by key)")
    ap.add_argument("--ratios", type=float, nargs="*", default=None)
    ap.add_argument("--aggr", nargs="*", default=["sum", "gcn", "cheb"], choices=["sum", "mean", "gcn", "cheb"])
    a = ap.parse_args()
    torch.set_num_threads(1)
    V, E, T, F = (2000, 20_000, 8, 8) if a.quick else (a.vertices, a.edges, a.snapshots, a.features)
    ratios = a.ratios or ((0.001, 0.05, 0.5) if a.quick else RATIOS)
    aggrs = [(x, 2 if x == "cheb" else 1) for x in a.aggr]
    print(f"# incremental aggregation: V={V} E={E} T={T} F={F} float32, 1 thread, edge lists "
          f"{'reordered' if a.shuffle else 'edited in place'}; times in seconds for all snapshots; "
          f"default threshold {DEFAULT_THRESHOLD}")
    rows = run(V, E, T, F, ratios, aggrs, a.shuffle)
    print(f"{'r':>7} {'aggr':>9} {'rho':>7} {'recompute':>10} {'scratch':>8} {'increm.':>8} {'auto':>8} "
          f"{'inc/scr':>8} {'auto inc':>8}")
    for x in rows:
        print(f"{x['r']:>7.3f} {x['aggr']:>9} {x['rho']:>7.3f} {x['recompute']:>10.3f} {x['scratch']:>8.3f} "
              f"{x['incremental']:>8.3f} {x['auto']:>8.3f} {x['incremental'] / x['scratch']:>8.2f} "
              f"{x['n_inc']:>5}/{T}")
    for aggr in dict.fromkeys(x["aggr"] for x in rows):
        print(f"crossover {aggr}: rho = {crossover(rows, aggr):.3f} (incremental slower than scratch above)")


if __name__ == "__main__":
    main()
