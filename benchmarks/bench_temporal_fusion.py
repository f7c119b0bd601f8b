"""Masked temporal fusion vs zero padding vs pack_padded_sequence (DGC §5.1.2).

Sequence lengths come from the shared SNAP temporal edge lists: time is binned
into windows and a vertex's sequence is the windows in which it has an edge
(its vertex-time nodes), the skewed length distribution DGC targets. For each
time encoder (GRU, LSTM, causal temporal attention) and each strategy the
script times forward + backward (min over interleaved repetitions) and counts
the padded slots, then prints speedups of the default ``packed_rows`` strategy.

    .venv/bin/python benchmarks/bench_temporal_fusion.py            # full
    .venv/bin/python benchmarks/bench_temporal_fusion.py --quick    # smoke test (< 20 s)
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pyg_dynscale.nn.temporal_fusion import (  # noqa: E402
    ATTENTION_STRATEGIES,
    RECURRENT_STRATEGIES,
    MaskedGRU,
    MaskedLSTM,
    MaskedTemporalAttention,
    pack_sequences,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _shared import DATASETS  # noqa: E402

SNAP = str(DATASETS / "snap")
DATASETS = {
    "CollegeMsg": ("CollegeMsg.txt", (0, 1, 2)),
    "email-Eu": ("email-Eu-core-temporal.txt.gz", (0, 1, 2)),
    "bitcoinotc": ("soc-sign-bitcoinotc.csv.gz", (0, 1, 3)),
    "mathoverflow": ("sx-mathoverflow.txt.gz", (0, 1, 2)),
}


def sequence_lengths(name: str, window_days: float) -> torch.Tensor:
    """Appearances per vertex with ``window_days``-day snapshots (numpy binning)."""
    fname, cols = DATASETS[name]
    path = os.path.join(SNAP, fname)
    opener = gzip.open if fname.endswith(".gz") else open
    with opener(path, "rt") as f:
        a = np.loadtxt(f, delimiter="," if fname.endswith(".csv.gz") else None, usecols=cols)
    src, dst, ts = a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2]
    b = ((ts - ts.min()) // (window_days * 86400)).astype(np.int64)
    T = int(b.max()) + 1
    key = np.unique(np.concatenate([src, dst]) * T + np.concatenate([b, b]))  # distinct (vertex, window)
    _, lens = np.unique(key // T, return_counts=True)
    return torch.as_tensor(lens, dtype=torch.long)


def fwd_bwd(module, x, seq, strategy):
    t0 = time.perf_counter()
    out = module(x, seq, strategy=strategy)
    out.sum().backward()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="CollegeMsg, weekly windows, small sizes, 1 repetition")
    ap.add_argument("--datasets", default="CollegeMsg,email-Eu,bitcoinotc,mathoverflow")
    ap.add_argument("--window-days", type=float, default=7.0)
    ap.add_argument("--models", default="gru,lstm,attention")
    ap.add_argument("--dim", type=int, default=32, help="input = hidden = embedding size")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    ap.add_argument("--mem-gb", type=float, default=3.0, help="skip a strategy whose estimated activations exceed this")
    args = ap.parse_args()
    if args.quick:
        args.datasets, args.window_days, args.dim, args.reps = "CollegeMsg", 7.0, 16, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = args.models.split(",")
    print(f"# masked temporal fusion benchmark: window={args.window_days}d dim={args.dim} reps={args.reps} "
          f"threads={args.threads} torch={torch.__version__}")
    summary = []
    for name in args.datasets.split(","):
        lens = sequence_lengths(name, args.window_days)
        ptr = torch.zeros(lens.numel() + 1, dtype=torch.long)
        torch.cumsum(lens, 0, out=ptr[1:])
        S, M, Lmax = lens.numel(), int(ptr[-1]), int(lens.max())
        t0 = time.perf_counter()
        packing = pack_sequences(ptr)
        build_ms = (time.perf_counter() - t0) * 1e3
        print(f"\n## {name}: S={S} sequences, M={M} vertex-time nodes, longest={Lmax}, mean={M / S:.1f}; "
              f"packed rows R={packing.num_rows} x L={packing.row_len} (FFD in {build_ms:.1f} ms)")
        print(f"{'model':10s} {'strategy':22s} {'slots':>11s} {'padded':>11s} {'fwd+bwd ms':>11s}")
        D = args.dim
        for model in models:
            if model == "gru":
                mod, strategies, width = MaskedGRU(D, D), RECURRENT_STRATEGIES, 12 * D
            elif model == "lstm":
                mod, strategies, width = MaskedLSTM(D, D), RECURRENT_STRATEGIES, 14 * D
            elif model == "attention":
                mod = MaskedTemporalAttention(D, args.heads, max_positions=max(Lmax, 1))
                strategies, width = ATTENTION_STRATEGIES, 0
            else:
                raise SystemExit(f"unknown model {model!r}")
            x = torch.randn(M, D, requires_grad=True)
            slots, est = {}, {}
            for s in strategies:
                if s.startswith("packed_rows"):
                    rows = packing.num_rows * packing.row_len if model == "attention" else M
                    slots[s] = rows
                    est[s] = (packing.num_rows * args.heads * packing.row_len ** 2 * 4 * 6 if model == "attention"
                              else M * width * 4)
                else:
                    slots[s] = S * Lmax
                    est[s] = S * args.heads * Lmax ** 2 * 4 * 6 if model == "attention" else S * Lmax * width * 4
                    if s == "pack_padded":
                        slots[s] = S * Lmax  # the padded input is built; the GRU itself runs on M rows
            run = [s for s in strategies if est[s] <= args.mem_gb * 2**30]
            times = {s: float("inf") for s in run}
            for s in run:  # warm-up (caches, allocator)
                fwd_bwd(mod, x, packing, s)
            for _ in range(args.reps):
                for s in run:  # interleaved: every strategy sees the same machine load
                    mod.zero_grad(set_to_none=True)
                    x.grad = None
                    times[s] = min(times[s], fwd_bwd(mod, x, packing, s))
            for s in strategies:
                if s not in run:
                    print(f"{model:10s} {s:22s} {slots[s]:11d} {slots[s] - M:11d} {'skipped':>11s}  "
                          f"(needs ~{est[s] / 2**30:.1f} GiB > --mem-gb)")
                    continue
                print(f"{model:10s} {s:22s} {slots[s]:11d} {slots[s] - M:11d} {times[s] * 1e3:11.1f}")
            base = times.get("packed_rows", float("nan"))
            for other in ("padding", "pack_padded", "packed_rows_autograd"):
                if other in times:
                    r = times[other] / base
                    print(f"{model:10s} speedup vs {other}: {r:.2f}x")
                    summary.append((name, model, other, r))
    print("\n# summary: speedup of packed_rows (goal: >= 1.5x vs padding, >= 1.0x vs pack_padded)")
    for name, model, other, r in summary:
        print(f"{name:14s} {model:10s} vs {other:22s} {r:6.2f}x")


if __name__ == "__main__":
    main()
