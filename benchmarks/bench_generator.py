"""Benchmark of the synthetic dynamic-graph generator (DGC §7.3.1).

Times :func:`pyg_dynscale.data.synthetic.generate_dynamic_graph` at full scale
(default: 10M vertex-time nodes, 20M edges, including building and validating
the :class:`DynamicGraphSignal`), reports peak RSS and the non-uniformity it
produced, and compares it at a small size, in the same run, with the two
alternatives one would otherwise write:

* ``numpy-loop``: the same model generated snapshot by snapshot with numpy
  (``rng.choice(p=...)`` per snapshot), built with the list constructor;
* ``networkx``: one ``networkx.expected_degree_graph`` (the Chung-Lu model,
  pure Python) per snapshot, built with the list constructor.

Usage::

    python benchmarks/bench_generator.py                 # full scale (~10-30 s)
    python benchmarks/bench_generator.py --quick         # smoke test (seconds)
    python benchmarks/bench_generator.py --json          # one JSON object
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyg_dynscale.data.signal import DynamicGraphSignal  # noqa: E402
from pyg_dynscale.data.synthetic import generate_dynamic_graph  # noqa: E402


def peak_rss_gib() -> float:
    """Peak resident set size of this process so far (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def sizes(vertex_time_nodes: int, presence: float, snapshots: int) -> int:
    """Distinct vertices so that round(V * T * presence) is the requested node count."""
    return max(1, round(vertex_time_nodes / (snapshots * presence)))


# ------------------------------------------------------------ alternatives
def naive_numpy(V: int, E: int, T: int, presence: float, edge_std: float, seq_std: float, gamma: float, F: int, seed: int) -> DynamicGraphSignal:
    """The same model written the straightforward way: a Python loop over
    snapshots with numpy sampling inside each (totals only approximately exact)."""
    rng = np.random.default_rng(seed)
    w = (rng.permutation(V) + 1.0) ** (-1.0 / (gamma - 1.0))
    mu_l = presence * T
    lengths = np.clip(np.rint(rng.normal(mu_l, seq_std * mu_l, V)), 1, T).astype(np.int64)
    starts = rng.integers(0, T, V)
    m = np.clip(rng.normal(E / T, edge_std * E / T, T), 0, None)
    m = np.rint(m / m.sum() * E).astype(np.int64)
    node_ids, edges, feats, targets = [], [], [], []
    for t in range(T):
        ids = np.nonzero((t - starts) % T < lengths)[0]
        n = ids.size
        mt = int(m[t]) if n >= 2 else 0
        pw = w[ids] / w[ids].sum()
        src = rng.choice(n, size=mt, p=pw)
        dst = rng.choice(n, size=mt, p=pw)
        loops = src == dst
        while loops.any():  # rejection sampling of self loops
            dst[loops] = rng.choice(n, size=int(loops.sum()), p=pw)
            loops = src == dst
        node_ids.append(ids)
        edges.append(np.stack([src, dst]))
        feats.append(rng.standard_normal((n, F)).astype(np.float32))
        targets.append((np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)).astype(np.float32))
    return DynamicGraphSignal(edges, None, feats, targets, node_ids=node_ids, num_vertices=V)


def naive_networkx(V: int, E: int, T: int, presence: float, edge_std: float, seq_std: float, gamma: float, F: int, seed: int) -> DynamicGraphSignal:
    """One ``networkx.expected_degree_graph`` (Chung-Lu, pure Python) per snapshot."""
    import networkx as nx

    rng = np.random.default_rng(seed)
    w = (rng.permutation(V) + 1.0) ** (-1.0 / (gamma - 1.0))
    mu_l = presence * T
    lengths = np.clip(np.rint(rng.normal(mu_l, seq_std * mu_l, V)), 1, T).astype(np.int64)
    starts = rng.integers(0, T, V)
    m = np.clip(rng.normal(E / T, edge_std * E / T, T), 0, None)
    m = m / m.sum() * E
    node_ids, edges, feats, targets = [], [], [], []
    for t in range(T):
        ids = np.nonzero((t - starts) % T < lengths)[0]
        n = ids.size
        expected = (w[ids] / w[ids].sum() * 2.0 * m[t]).tolist()  # sum of expected degrees = 2 m_t
        g = nx.expected_degree_graph(expected, seed=int(rng.integers(2**31)), selfloops=False)
        ei = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T
        node_ids.append(ids)
        edges.append(ei)
        feats.append(rng.standard_normal((n, F)).astype(np.float32))
        targets.append(np.array([d for _, d in g.degree()], dtype=np.float32))
    return DynamicGraphSignal(edges, None, feats, targets, node_ids=node_ids, num_vertices=V)


def timed(fn: Any, *args: Any, repeats: int = 1, **kwargs: Any) -> tuple[float, Any]:
    """Best wall time of ``repeats`` calls (the machine may be shared) and the last result."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, out


def duplicate_edge_fraction(signal: DynamicGraphSignal) -> float:
    """Share of edges that repeat an earlier (source, target) of the same snapshot."""
    E = signal.num_edges
    if E == 0:
        return 0.0
    gid = signal.edge_index + torch.repeat_interleave(signal.node_ptr[:-1], signal.edges_per_snapshot, output_size=E)
    key = gid[0] * max(signal.num_vertex_time_nodes, 1) + gid[1]
    return 1.0 - torch.unique(key).numel() / E


def describe(signal: DynamicGraphSignal) -> dict[str, Any]:
    st = signal.statistics()
    deg = torch.bincount(signal.node_id, weights=signal.y.double(), minlength=signal.num_vertices) if signal.y is not None else None
    return {
        "vertex_time_nodes": signal.num_vertex_time_nodes,
        "edges": signal.num_edges,
        "vertices": signal.num_vertices,
        "snapshots": signal.num_snapshots,
        "cv_edges": round(st.cv_edges, 4),
        "cv_sequence_lengths": round(st.cv_sequence_lengths, 4),
        "cv_nodes": round(st.cv_nodes, 4),
        "max_over_mean_vertex_degree": None if deg is None else round(float(deg.max() / deg.mean()), 2),
        "duplicate_edge_fraction": round(duplicate_edge_fraction(signal), 5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vertex-time-nodes", type=int, default=10_000_000)
    ap.add_argument("--edges", type=int, default=20_000_000)
    ap.add_argument("--snapshots", type=int, default=100)
    ap.add_argument("--presence", type=float, default=0.5)
    ap.add_argument("--edge-std", type=float, default=0.3)
    ap.add_argument("--sequence-length-std", type=float, default=0.3)
    ap.add_argument("--power-law-exponent", type=float, default=2.5)
    ap.add_argument("--num-features", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline-vertex-time-nodes", type=int, default=200_000, help="size of the comparison with the loops")
    ap.add_argument("--baseline-edges", type=int, default=400_000)
    ap.add_argument("--baseline-snapshots", type=int, default=20)
    ap.add_argument("--no-networkx", action="store_true", help="skip the (slow) networkx comparison")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    args = ap.parse_args()
    if args.quick:
        args.vertex_time_nodes, args.edges, args.snapshots = 200_000, 400_000, 20
        args.baseline_vertex_time_nodes, args.baseline_edges, args.baseline_snapshots = 20_000, 40_000, 10

    model = dict(
        presence=args.presence, edge_std=args.edge_std, sequence_length_std=args.sequence_length_std,
        power_law_exponent=args.power_law_exponent, num_features=args.num_features, seed=args.seed,
    )
    # warm-up: lazy torch init, thread pool and allocator make the first call slower
    generate_dynamic_graph(sizes(args.baseline_vertex_time_nodes, args.presence, args.baseline_snapshots),
                           args.baseline_edges, args.baseline_snapshots, **model)
    # --- full scale first, so the peak RSS is the generator's
    rss0 = peak_rss_gib()
    V = sizes(args.vertex_time_nodes, args.presence, args.snapshots)
    seconds, signal = timed(generate_dynamic_graph, V, args.edges, args.snapshots, **model)
    rss = peak_rss_gib()
    result: dict[str, Any] = {
        "benchmark": "synthetic_generator",
        "threads": torch.get_num_threads(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "seconds": round(seconds, 3),
        "peak_rss_gib": round(rss, 3),
        "rss_before_gib": round(rss0, 3),
        "throughput_nodes_plus_edges_per_s": round((signal.num_vertex_time_nodes + signal.num_edges) / seconds),
        "under_30s": seconds < 30.0,
        "params": {"vertices": V, **{k: v for k, v in model.items()}},
        "stats": describe(signal),
    }
    del signal

    # --- comparison at a small size, same model parameters
    bV = sizes(args.baseline_vertex_time_nodes, args.presence, args.baseline_snapshots)
    bargs = (bV, args.baseline_edges, args.baseline_snapshots)
    loop_args = (*bargs, args.presence, args.edge_std, args.sequence_length_std, args.power_law_exponent, args.num_features, args.seed)
    t_ours, _ = timed(generate_dynamic_graph, *bargs, repeats=3, **model)
    t_numpy, _ = timed(naive_numpy, *loop_args, repeats=3)
    comparison: dict[str, Any] = {
        "vertex_time_nodes": args.baseline_vertex_time_nodes, "edges": args.baseline_edges, "snapshots": args.baseline_snapshots,
        "ours_s": round(t_ours, 4), "numpy_loop_s": round(t_numpy, 4), "numpy_loop_over_ours": round(t_numpy / t_ours, 2),
    }
    if not args.no_networkx:
        t_nx, _ = timed(naive_networkx, *loop_args)  # slow: one run
        comparison.update(networkx_s=round(t_nx, 4), networkx_over_ours=round(t_nx / t_ours, 2))
    result["comparison"] = comparison

    if args.json:
        print(json.dumps(result))
        return
    st = result["stats"]
    print(f"generate_dynamic_graph: {st['vertex_time_nodes']:,} vertex-time nodes, {st['edges']:,} edges, "
          f"{st['snapshots']} snapshots, {V:,} vertices ({result['threads']} threads, load {result['load_average_1m']})")
    print(f"  time              {result['seconds']:.2f} s   ({'under' if result['under_30s'] else 'OVER'} the 30 s goal)")
    print(f"  peak RSS          {result['peak_rss_gib']:.2f} GiB (process, {result['rss_before_gib']:.2f} GiB before)")
    print(f"  throughput        {result['throughput_nodes_plus_edges_per_s'] / 1e6:.2f} M (nodes+edges)/s")
    print(f"  non-uniformity    cv_edges={st['cv_edges']} (edge_std={args.edge_std}), "
          f"cv_sequence_lengths={st['cv_sequence_lengths']} (sequence_length_std={args.sequence_length_std}), "
          f"cv_nodes={st['cv_nodes']}, max/mean vertex degree={st['max_over_mean_vertex_degree']}, "
          f"duplicate edges={100 * st['duplicate_edge_fraction']:.3f}%")
    c = comparison
    print(f"comparison at {c['vertex_time_nodes']:,} nodes / {c['edges']:,} edges / {c['snapshots']} snapshots (best of 3; networkx 1 run):")
    print(f"  ours {c['ours_s']:.3f} s | numpy per-snapshot loop {c['numpy_loop_s']:.3f} s ({c['numpy_loop_over_ours']}x slower)"
          + (f" | networkx expected_degree_graph {c['networkx_s']:.3f} s ({c['networkx_over_ours']}x slower)" if "networkx_s" in c else ""))


if __name__ == "__main__":
    main()
