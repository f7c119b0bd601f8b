"""Graph-difference (GD) transfer vs naive copy (SC'21 §3.2) on the shared datasets.

For every dataset: bytes a naive ``signal.to(device)`` moves vs the GD payload
(whole signal as one block, and blocks of ``--block-size`` snapshots), split
into structure and values, the CPU encode / device decode times and, when CUDA
is available, the host-to-device transfer time of both methods (pinned memory,
``non_blocking``). SC'21 reports up to 4.1x less transfer time.

    .venv/bin/python benchmarks/bench_transfer.py            # all datasets
    .venv/bin/python benchmarks/bench_transfer.py --quick    # England COVID + CollegeMsg
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pyg_dynscale.data.loaders import load_edge_list, load_pygt_json  # noqa: E402
from pyg_dynscale.data.transfer import diff_encode, signal_nbytes, transfer_to_device  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _shared import DATASETS  # noqa: E402

ROOT = str(DATASETS)
PYGT = ["england_covid", "twitter_tennis_rg17", "chickenpox", "pedalme_london"]
SNAP = {
    "CollegeMsg": ("CollegeMsg.txt", (0, 1, 2)),
    "email-Eu": ("email-Eu-core-temporal.txt.gz", (0, 1, 2)),
    "bitcoinotc": ("soc-sign-bitcoinotc.csv.gz", (0, 1, 3)),
    "mathoverflow": ("sx-mathoverflow.txt.gz", (0, 1, 2)),
}


def load(name: str, window: str, vertex_set: str):
    if name in PYGT:
        return load_pygt_json(os.path.join(ROOT, "pygt", name + ".json"))
    fname, cols = SNAP[name]
    return load_edge_list(os.path.join(ROOT, "snap", fname), window=window, columns=cols, target=None,
                          vertex_set=vertex_set)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--datasets", default=",".join(PYGT + list(SNAP)))
    ap.add_argument("--window", default="7d", help="snapshot window of the SNAP edge lists")
    ap.add_argument("--vertex-set", default="cumulative", choices=["cumulative", "window"])
    ap.add_argument("--block-size", type=int, default=16, help="snapshots per block (keyframe each block)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    if args.quick:
        args.datasets, args.reps = "england_covid,CollegeMsg", 1
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    print(f"# graph-difference transfer: window={args.window} vertex_set={args.vertex_set} block={args.block_size} "
          f"device={dev} torch={torch.__version__}")
    hdr = (f"{'dataset':20s} {'T':>5s} {'edges':>9s} {'naive MB':>9s} {'GD MB':>8s} {'ratio':>6s} "
           f"{'struct ratio':>12s} {'GD/b MB':>8s} {'ratio/b':>7s} {'enc ms':>7s} {'dec ms':>7s}")
    if cuda:
        hdr += f" {'naive H2D ms':>12s} {'GD H2D+dec ms':>13s} {'time ratio':>10s}"
    print(hdr)
    for name in args.datasets.split(","):
        sig = load(name, args.window, args.vertex_set)
        naive = signal_nbytes(sig)
        t0 = time.perf_counter()
        diff = diff_encode(sig)
        enc = time.perf_counter() - t0
        diff_b = diff_encode(sig, block_size=args.block_size)
        br = diff.nbytes_breakdown()
        values = br["values"]
        struct_ratio = (naive - values) / max(br["structure"], 1)
        dec = min(transfer_to_device(sig, "cpu")[1]["decode_s"] for _ in range(args.reps))
        row = (f"{name:20s} {sig.num_snapshots:5d} {sig.num_edges:9d} {naive / 1e6:9.2f} {diff.nbytes / 1e6:8.2f} "
               f"{naive / diff.nbytes:6.2f} {struct_ratio:12.2f} {diff_b.nbytes / 1e6:8.2f} {naive / diff_b.nbytes:7.2f} "
               f"{enc * 1e3:7.1f} {dec * 1e3:7.1f}")
        if cuda:
            tn = min(transfer_to_device(sig, "cuda", method="naive")[1]["transfer_s"] for _ in range(args.reps))
            td = min((lambda s: s["transfer_s"] + s["decode_s"])(transfer_to_device(sig, "cuda")[1]) for _ in range(args.reps))
            row += f" {tn * 1e3:12.2f} {td * 1e3:13.2f} {tn / td:10.2f}"
        print(row)
    print("\nratio = naive bytes / GD bytes (whole signal one block); struct ratio: structure bytes only "
          "(values -- weights, features, targets -- are sent as is by both); /b: keyframe every --block-size snapshots.")
    if not cuda:
        print("no CUDA device: transfer times not measured (bytes are exact; decode timed on the CPU).")


if __name__ == "__main__":
    main()
