#!/usr/bin/env python
r"""PGC at scale: 10 million vertex-time nodes, >= 20 million edges (DGC §4.1, §7.5).

Generates a synthetic dynamic graph (:func:`pyg_dynscale.data.synthetic.generate_dynamic_graph`,
power-law degrees, DGC §7.3.1) and partitions it with
:func:`~pyg_dynscale.partition.pgc.pipeline.partition_pgc`; prints the time of every
step (supergraph, chunk generation per level, assignment, refinement), the
chunk counts, :math:`\lambda`, and the peak resident memory of the process
(``resource.getrusage``). Target: the partitioning itself (supergraph
included) in at most 60 s on a 2-core machine. Measured (quiet machine, one
thread): 0.8 s supergraph + 48.4 s PGC, peak RSS 4.49 GiB (docs/pgc.md).

The dependency pattern is the ``--model`` preset (``in_channels=1``,
``hidden=32``) in DGC's model form (§7.1; ``_shared.dgc_pattern``): T-GCN
with ``gcn_layers=2`` (three 2-layer GCNs, the default), DySAT with
``num_blocks=2``, MPNN-LSTM unchanged. PyGT's one-layer T-GCN exchanges only
raw input features spatially, which the runtime loads once before training,
so its spatial edges would weigh 0. With DGC's T-GCN a spatial edge (768 B)
outweighs a temporal one (256 B), so ``coarsen="auto"`` does not contract
temporal segments; the timings above were measured with the one-layer T-GCN
(temporal coarsening on) before the static input halo.

Usage::

    .venv/bin/python benchmarks/bench_pgc_scale.py --quick          # 200k nodes, seconds
    .venv/bin/python benchmarks/bench_pgc_scale.py                  # 10M nodes, 20M edges
    .venv/bin/python benchmarks/bench_pgc_scale.py --threads 2      # both cores (quiet machine only)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyg_dynscale.data.synthetic import generate_dynamic_graph  # noqa: E402
from pyg_dynscale.partition.pgc.pipeline import partition_pgc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _shared import dgc_pattern  # noqa: E402


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200k vertex-time nodes (smoke test)")
    ap.add_argument("--nodes", type=float, default=10e6, help="vertex-time nodes N (default 1e7)")
    ap.add_argument("--edges", type=float, default=None, help="spatial edges (default 2 N)")
    ap.add_argument("--snapshots", type=int, default=20)
    ap.add_argument("--presence", type=float, default=0.5, help="fraction of vertices present per snapshot")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--model", default="tgcn",
                    help="dependency pattern preset in DGC's model form: tgcn (default) = T-GCN with gcn_layers=2, "
                         "dysat = DySAT with num_blocks=2, mpnnlstm unchanged")
    ap.add_argument("--threads", type=int, default=None, help="threads for partition_pgc (default: its default, one core for the kernels)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    N = int(2e5 if args.quick else args.nodes)
    E = int(args.edges if args.edges is not None else 2 * N)
    T = args.snapshots
    V = max(1, int(round(N / (T * args.presence))))
    t0 = time.perf_counter()
    sig = generate_dynamic_graph(V, E, T, presence=args.presence, num_features=1, target="none", seed=args.seed)
    gen_s = time.perf_counter() - t0
    mem_gen = peak_gib()
    print(f"graph: T={T} vertices={V} N={sig.num_vertex_time_nodes:,} spatial edges={sig.num_edges:,} "
          f"(generated in {gen_s:.1f}s, peak RSS so far {mem_gen:.2f} GiB, threads {torch.get_num_threads()})")
    pat = dgc_pattern(args.model, 1, 32)
    t0 = time.perf_counter()
    sg = sig.supergraph()
    sg_s = time.perf_counter() - t0
    print(f"supergraph: {sg.num_spatial_edges + sg.num_temporal_edges:,} edges "
          f"({sg.num_temporal_edges:,} temporal) in {sg_s:.1f}s")
    t0 = time.perf_counter()
    p = partition_pgc(sig, args.parts, pat, seed=args.seed, progress=args.progress, threads=args.threads)
    pgc_s = time.perf_counter() - t0
    m = p.meta
    print(f"pgc: {pgc_s:.1f}s  (supergraph + pgc = {sg_s + pgc_s:.1f}s; target <= 60s) steps: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in m["timings"].items()))
    print(f"  pattern {args.model} (DGC form): edge weights spatial {m['edge_weights'][0]:g} B, temporal {m['edge_weights'][1]:g} B")
    print(f"  level-0 graph: {m['level0_nodes']:,} nodes (temporal coarsening: {m['coarsened']}), threads {m['threads']}")
    print(f"  levels: chunks {m['level_chunks']} rounds {m['level_rounds']} seconds "
          f"{[round(x, 1) for x in m['level_seconds']]}")
    print(f"  chunks {m['num_chunks']} (cap {m['cap']:.0f}), refinement moves per level {m['refine_moved']}")
    print(f"  lambda {m['divergence']:.3f}  cut bytes-weight {m['cut_weight']:.4g}")
    print(f"  peak RSS {peak_gib():.2f} GiB (process, includes the generated graph)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"N": sig.num_vertex_time_nodes, "E": sig.num_edges, "generate_s": gen_s, "supergraph_s": sg_s,
                       "pgc_s": pgc_s, "peak_rss_gib": peak_gib(), "meta": {k: v for k, v in m.items()}}, f, indent=1,
                      default=str)


if __name__ == "__main__":
    main()
