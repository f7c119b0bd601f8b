r"""``pyg-dynscale partition-events PATH``: partition an event stream's node
memory over trainers (Sven) and report the communication balance.

Loads ``PATH`` as ``train-events`` does (JODIE CSV or temporal edge list),
pre-samples one training epoch of the :math:`(M, 1, 1)` schedule
(:func:`~pyg_dynscale.ctdg.presample.trainer_requests`: ``--batch-size``,
``--num-neighbors``, ``M`` = ``--parts``), partitions the vertices with
``--method`` (:func:`~pyg_dynscale.ctdg.memory_partition.partition_vertices`) and
prints the vertices per part, the communication matrix :math:`C`, the residual
matrix :math:`R` (Sven Eq. 2), the per-rank costs, the balance cost (with
range's and interval's for comparison) and the time taken. ``--out FILE``
saves the ``[N]`` int64 owner tensor with ``torch.save`` (what
``MemoryTrainer(partition=...)`` takes).

With ``--json`` the output is one JSON object on stdout (keys in ``docs/cli.md``).
"""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

from ..errors import CommandError
from .output import print_report

SCHEMA_VERSION = 1
FORMATS = ("auto", "jodie", "edgelist")
METHODS = ("range", "interval", "flexbicut")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "partition-events",
        help="partition an event stream's node memory over trainers (Sven) and report the communication balance",
        description="Pre-sample one epoch of an event stream, partition its vertices over trainers (range, interval "
                    "or Re-FlexBiCut) and report the communication matrix, residual matrix and balance cost.")
    p.add_argument("path", metavar="PATH", help="events: a JODIE CSV or a temporal edge list (as train-events)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="auto (default): jodie for .csv / .csv.gz, else edgelist")
    p.add_argument("--parts", type=int, required=True, metavar="M", help="trainers (= parts, mini-batch parallelism)")
    p.add_argument("--method", choices=METHODS, default="flexbicut",
                   help="range (DGL), interval (Sven HPDC) or flexbicut (Re-FlexBiCut, Sven TPDS; default)")
    p.add_argument("--batch-size", type=int, default=200, metavar="B", help="events per local batch (default: 200)")
    p.add_argument("--num-neighbors", type=int, default=10, metavar="K",
                   help="LastNeighborLoader size of the pre-sampling (default: 10)")
    p.add_argument("--interval", type=int, default=None, metavar="G",
                   help="interval / flexbicut: block size of the interval partition (default: min(8, max(1, N // 8M)))")
    p.add_argument("--slack", type=float, default=None, metavar="S",
                   help="flexbicut: a part owns at most ceil((1 + S) N / M) vertices (default: 0.1)")
    p.add_argument("--val-ratio", type=float, default=0.15, help="validation share of the events (default: 0.15)")
    p.add_argument("--test-ratio", type=float, default=0.15, help="test share of the events (default: 0.15)")
    p.add_argument("--out", default=None, metavar="FILE", help="save the [N] int64 owner tensor (torch.save)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


def _check(args: argparse.Namespace) -> None:
    if os.path.isdir(args.path):
        raise CommandError(f"PATH '{args.path}' is a directory; give an events file.")
    if not os.path.exists(args.path):
        raise CommandError(f"no such file: PATH '{args.path}'.")
    for name in ("parts", "batch_size", "num_neighbors"):
        if getattr(args, name) < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.interval is not None:
        if args.method == "range":
            raise CommandError("--interval applies to --method interval and flexbicut (range's blocks are N / M).")
        if args.interval < 1:
            raise CommandError(f"--interval must be >= 1 (1: modulo), got {args.interval}.")
    if args.slack is not None:
        if args.method != "flexbicut":
            raise CommandError(f"--slack applies to --method flexbicut only, not {args.method}.")
        if not (math.isfinite(args.slack) and args.slack >= 0):
            raise CommandError(f"--slack must be a finite number >= 0, got {args.slack}.")
    if args.out is not None:
        if os.path.isdir(args.out):
            raise CommandError(f"--out: '{args.out}' is a directory; give a file name.")
        folder = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(folder):
            raise CommandError(f"--out: the folder '{folder}' does not exist; create it first.")


def partition_events_report(args: argparse.Namespace) -> dict[str, Any]:
    """Do the work of the subcommand; return the JSON report as a dict."""
    _check(args)  # before torch is imported: a missing file is reported at once
    import torch

    from ..ctdg.events import split_ranges
    from ..ctdg.presample import trainer_requests
    from ..ctdg.memory_partition import (
        balance_cost, communication_matrix, default_interval, partition_vertices, rank_costs, residual_matrix,
    )
    from .train_events import load_events

    t0 = time.perf_counter()
    data = load_events(args)
    n, m = int(data.num_nodes), args.parts
    if m > n:
        raise CommandError(f"--parts is {m} for {n} vertices: some parts would own nothing; use at most {n}.")
    train, _, total = split_ranges(data, args.val_ratio, args.test_ratio)
    t1 = time.perf_counter()
    requests = trainer_requests(data.src, data.dst, n, train, args.batch_size, m, args.num_neighbors)
    t2 = time.perf_counter()
    options: dict[str, Any] = {}
    if args.method != "range" and args.interval is not None:
        options["interval"] = args.interval
    if args.method == "flexbicut" and args.slack is not None:
        options["slack"] = args.slack
    owner = partition_vertices(args.method, n, m, requests, **options)
    t3 = time.perf_counter()
    c = communication_matrix(owner, requests, m)
    r = residual_matrix(c)
    off = ~torch.eye(m, dtype=torch.bool)
    if args.out:
        torch.save(owner, args.out)
    baselines = {"range": balance_cost(partition_vertices("range", n, m), requests, m),
                 "interval": balance_cost(partition_vertices("interval", n, m, interval=args.interval), requests, m)}
    return {
        "schema_version": SCHEMA_VERSION, "path": args.path, "method": args.method, "parts": m,
        "batch_size": args.batch_size, "num_neighbors": args.num_neighbors,
        "interval": None if args.method == "range" else (args.interval or default_interval(n, m)),
        "slack": (0.1 if args.slack is None else args.slack) if args.method == "flexbicut" else None,
        "events": {"train": train, "total": total, "nodes": n},
        "requests": {"pairs": int(requests.size(1)), "rows": int(requests[2].sum())},
        "owner_counts": torch.bincount(owner, minlength=m).tolist(),
        "communication_matrix": c.tolist(), "residual_matrix": r.tolist(),
        "residual_max": float(r[off].max()) if m > 1 else 0.0,
        "residual_mean": float(r[off].mean()) if m > 1 else 0.0,
        "rank_costs": rank_costs(c).tolist(), "balance_cost": float(rank_costs(c).max()),
        "baselines": baselines,
        "seconds": {"load": t1 - t0, "presample": t2 - t1, "partition": t3 - t2},
        "total_seconds": time.perf_counter() - t0, "out": args.out,
    }


def _text(r: dict[str, Any]) -> str:
    lines = [
        f"{r['path']}: {r['method']} into {r['parts']} parts ({r['events']['nodes']:,} vertices, "
        f"{r['events']['train']:,} training events, batch {r['batch_size']}, {r['num_neighbors']} neighbours)",
        f"  vertices per part   {r['owner_counts']}",
        f"  rank costs          {[int(x) for x in r['rank_costs']]}   (rows fetched + served per epoch)",
        f"  balance cost        {r['balance_cost']:,.0f}   (range {r['baselines']['range']:,.0f}, "
        f"interval {r['baselines']['interval']:,.0f})",
        f"  residual max / mean {r['residual_max']:,.0f} / {r['residual_mean']:,.1f}",
        "  communication matrix (rows: trainer, columns: owner)",
        *(f"    {[int(x) for x in row]}" for row in r["communication_matrix"]),
        f"  time                presample {r['seconds']['presample']:.2f}s, partition {r['seconds']['partition']:.2f}s",
    ]
    if r["out"]:
        lines.append(f"  saved to {r['out']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    return print_report(args.json, lambda: partition_events_report(args), _text)
