#!/usr/bin/env python
r"""Compare partition schemes: bytes per epoch and load imbalance (DGC §7.2-7.5).

For every dataset in ``../shared/datasets`` (PyGT JSONs, SNAP temporal edge
lists binned into snapshots) and for synthetic graphs at low/high spatial and
temporal non-uniformity (DGC Fig. 13-14), for the T-GCN, MPNN-LSTM and DySAT
dependency patterns in DGC's model forms (§7.1; ``_shared.dgc_pattern``):
T-GCN with ``gcn_layers=2`` (three 2-layer GCNs), DySAT with ``num_blocks=2``,
MPNN-LSTM's ``"mpnnlstm"`` preset unchanged -- PyGT's one-layer T-GCN and a
one-block DySAT exchange only raw input features spatially, which the
runtime loads once before training, so their spatial edges cost 0 bytes per
epoch -- and 4 and 8 parts, it partitions with

* ``pss`` (equal snapshot counts, DGC's baseline), ``pss-bal`` (balanced ranges),
* ``pts`` (equal sequence counts), ``pts-bal`` (LPT on sequence workload),
* ``pss-ts`` (SC'21 hybrid, balanced),
* ``pgc`` (:func:`pyg_dynscale.partition.pgc.pipeline.partition_pgc`, if importable),

and reports the plan's bytes per epoch (forward + backward) by kind, cut edges,
:math:`\lambda` (max/min load, load = vertex-time nodes + aggregated edges)
and partitioning time, with each row's bytes relative to the best baseline
(``bytes_vs_best_baseline``) and to the best baseline with
:math:`\lambda \le 1.15` (``bytes_vs_best_balanced``). Every (dataset, model, parts) group where PGC's total
bytes exceed the best of PSS/PTS/PSS-TS, or PGC's :math:`\lambda > 1.15`, is
flagged ``!``.

Usage::

    .venv/bin/python benchmarks/bench_schemes.py --quick            # smoke test, seconds
    .venv/bin/python benchmarks/bench_schemes.py --json out.json --csv out.csv
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
import traceback
from typing import Any, Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyg_dynscale.errors import DynScaleError  # noqa: E402
from pyg_dynscale.partition import CommunicationPlan, evaluate, partition  # noqa: E402,F401
from pyg_dynscale.partition.metrics import format_table  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _shared import DATASETS, dgc_pattern  # noqa: E402

DATA = str(DATASETS)
DAY = 86400.0
#: (name, relative path, loader kind, window seconds)
REAL = [
    ("chickenpox", "pygt/chickenpox.json", "pygt", None),
    ("england_covid", "pygt/england_covid.json", "pygt", None),
    ("pedalme", "pygt/pedalme_london.json", "pygt", None),
    ("twitter_tennis", "pygt/twitter_tennis_rg17.json", "pygt", None),
    ("CollegeMsg", "snap/CollegeMsg.txt", "edges", DAY),
    ("email-Eu-core", "snap/email-Eu-core-temporal.txt.gz", "edges", DAY),
    ("mathoverflow", "snap/sx-mathoverflow.txt.gz", "edges", 7 * DAY),
    ("bitcoinotc", "snap/soc-sign-bitcoinotc.csv.gz", "edges", 7 * DAY),
]
#: DGC Fig. 13-14: low/high spatial (edges per snapshot) and temporal (sequence length) spread
SYNTH = [
    ("synth-uniform", 0.0, 0.0),
    ("synth-spatial-hi", 1.0, 0.0),
    ("synth-temporal-hi", 0.0, 1.0),
    ("synth-both-hi", 1.0, 1.0),
]
BASELINES = [("pss", "pss", False), ("pss-bal", "pss", True), ("pts", "pts", False),
             ("pts-bal", "pts", True), ("pss-ts", "pss-ts", True)]
MODELS = ("tgcn", "mpnnlstm", "dysat")
LAMBDA_LIMIT = 1.15


def datasets(quick: bool, only: list[str] | None) -> list[tuple[str, Callable[[], Any]]]:
    from pyg_dynscale.data import loaders, synthetic

    out: list[tuple[str, Callable[[], Any]]] = []
    for name, rel, kind, window in REAL:
        path = os.path.join(DATA, rel)
        if quick and name != "pedalme":
            continue
        if kind == "pygt":
            out.append((name, lambda p=path: loaders.load_pygt_json(p)))
        else:
            out.append((f"{name}@{window / DAY:g}d", lambda p=path, w=window: loaders.load_edge_list(p, window=w)))
    size = dict(num_vertices=400, num_edges=4000, num_snapshots=12) if quick else \
        dict(num_vertices=20000, num_edges=400000, num_snapshots=50)
    for name, es, ss in SYNTH:
        if quick and name != "synth-both-hi":
            continue
        out.append((name, lambda es=es, ss=ss: synthetic.generate_dynamic_graph(
            **size, edge_std=es, sequence_length_std=ss, presence=0.5, num_features=8, seed=0)))
    if only:
        out = [d for d in out if any(o in d[0] for o in only)]
    return out


def row_of(dataset: str, label: str, model: str, m: dict) -> dict:
    return {"dataset": dataset, "model": model, "num_parts": m["num_parts"], "scheme": label,
            **{k: m[k] for k in ("bytes_total", "bytes_spatial", "bytes_temporal", "bytes_redistribution",
                                 "cut_spatial_edges", "cut_temporal_edges", "lambda", "seconds")}}


def run(args: argparse.Namespace) -> list[dict]:
    try:
        from pyg_dynscale.partition.pgc.pipeline import partition_pgc  # noqa: F401
        have_pgc = not args.no_pgc
    except ImportError as exc:
        print(f"NOTE: PGC not available ({exc}); comparing PSS/PTS/PSS-TS only.", file=sys.stderr)
        have_pgc = False
    rows: list[dict] = []
    for dname, make in datasets(args.quick, args.datasets):
        t0 = time.perf_counter()
        try:
            sig = make()
        except Exception as exc:  # a loader not written yet / unreadable file: report, go on
            print(f"SKIP {dname}: cannot load ({type(exc).__name__}: {exc})", file=sys.stderr)
            rows.append({"dataset": dname, "scheme": "-", "error": f"load: {type(exc).__name__}: {exc}"})
            continue
        sg = sig.supergraph()
        print(f"\n== {dname}: T={sig.num_snapshots} N={sg.num_nodes} E={sg.num_spatial_edges} "
              f"M={sg.num_temporal_edges} (loaded in {time.perf_counter() - t0:.2f}s)", file=sys.stderr)
        F = max(int(sig.num_node_features), 1)
        for R in args.parts:
            base = {}
            for label, scheme, bal in BASELINES:
                try:
                    base[label] = partition(sig, scheme, R, balanced=bal)
                except DynScaleError as exc:
                    base[label] = exc
            for model in args.models:
                pat = dgc_pattern(model, F, args.hidden)
                group = []
                for label, p in base.items():
                    if isinstance(p, Exception):
                        group.append({"dataset": dname, "model": model, "num_parts": R, "scheme": label,
                                      "error": str(p)})
                        continue
                    group.append(row_of(dname, label, model, evaluate(sig, pat, p).to_dict()))
                if have_pgc:
                    from pyg_dynscale.partition.pgc.pipeline import partition_pgc
                    # the multi-start, and DGC's own PGC (label propagation + Algorithm 1) beside it
                    for label, starts in (("pgc", None), ("pgc-dgc", ("lp",))):
                        try:
                            opts = {"starts": starts} if starts else {}
                            p = partition_pgc(sig, R, pat, seed=args.seed, max_divergence=args.pgc_max_divergence or None,
                                              **opts)
                            row = row_of(dname, label, model, evaluate(sig, pat, p).to_dict())
                            row["start"] = p.meta["start"]
                            group.append(row)
                        except Exception as exc:
                            traceback.print_exc(file=sys.stderr)
                            group.append({"dataset": dname, "model": model, "num_parts": R, "scheme": label,
                                          "error": f"{type(exc).__name__}: {exc}"})
                ok = [r for r in group if "error" not in r and not r["scheme"].startswith("pgc")]
                best = min((r["bytes_total"] for r in ok), default=None)
                # best among the baselines that are balanced enough (lambda <= LAMBDA_LIMIT)
                best_bal = min((r["bytes_total"] for r in ok if r["lambda"] <= LAMBDA_LIMIT), default=None)
                ratio = (lambda a, b: (a / b if b > 0 else (1.0 if a == 0 else math.inf)) if b is not None else None)
                for r in group:
                    if "error" in r or best is None:
                        continue
                    r["bytes_vs_best_baseline"] = ratio(r["bytes_total"], best)
                    r["bytes_vs_best_balanced"] = ratio(r["bytes_total"], best_bal)
                    if r["scheme"].startswith("pgc"):
                        reasons = []
                        if r["bytes_total"] > best:
                            reasons.append("bytes>best")
                        if r["lambda"] > LAMBDA_LIMIT:
                            reasons.append(f"lambda>{LAMBDA_LIMIT}")
                        r["flag"] = "! " + ",".join(reasons) if reasons else ""
                rows.extend(group)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: PedalMe + one small synthetic graph, 4 parts")
    ap.add_argument("--parts", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS,
                    help="dependency patterns, in DGC's model forms: tgcn = T-GCN with gcn_layers=2, "
                         "dysat = DySAT with num_blocks=2, mpnnlstm = the mpnnlstm preset (default: all three)")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--datasets", nargs="+", default=None, help="only datasets whose name contains one of these")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pgc", action="store_true", help="leave PGC out")
    ap.add_argument("--pgc-max-divergence", type=float, default=1.15,
                    help="largest lambda a PSS/PTS start of PGC's multi-start may have to win: the same "
                         "lambda <= 1.15 bound the goal compares under (default 1.15; 0 = PGC's own band)")
    ap.add_argument("--json", default=None, metavar="FILE", help="write rows as JSON ('-' for stdout)")
    ap.add_argument("--csv", default=None, metavar="FILE", help="write rows as CSV ('-' for stdout)")
    args = ap.parse_args(argv)
    if args.quick:
        args.parts = [p for p in args.parts if p <= 4] or [2]
    t0 = time.perf_counter()
    rows = run(args)
    cols = ("dataset", "model", "num_parts", "scheme", "bytes_total", "bytes_spatial", "bytes_temporal",
            "bytes_redistribution", "lambda", "seconds", "bytes_vs_best_baseline", "bytes_vs_best_balanced", "start",
            "flag", "error")
    text = format_table(rows, cols)
    out = sys.stderr if (args.json == "-" or args.csv == "-") else sys.stdout
    print(text, file=out)
    flagged = [r for r in rows if r.get("flag")]
    won = [r["start"] for r in rows if r.get("scheme") == "pgc" and "start" in r]
    print("PGC multi-start winners: " + ", ".join(f"{st} {won.count(st)}/{len(won)}" for st in sorted(set(won))), file=out)
    dgc = {(r["dataset"], r["model"], r["num_parts"]): r for r in rows if r.get("scheme") == "pgc-dgc" and "error" not in r}
    ratios = [dgc[k]["bytes_total"] / r["bytes_total"] for r in rows if r.get("scheme") == "pgc" and "error" not in r
              for k in [(r["dataset"], r["model"], r["num_parts"])] if k in dgc and r["bytes_total"] > 0]
    if ratios:
        print(f"DGC's own PGC / multi-start bytes: geometric mean {math.prod(ratios) ** (1 / len(ratios)):.2f}x, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rows", file=out)
    print(f"\n{len(rows)} rows, {len(flagged)} flagged PGC rows, {time.perf_counter() - t0:.1f}s total "
          "(bytes: per epoch, forward + backward; lambda: max/min of vertex-time nodes + edges)", file=out)
    if args.json:
        data = json.dumps([{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                           for r in rows], indent=1)
        if args.json == "-":
            print(data)
        else:
            with open(args.json, "w") as fh:
                fh.write(data)
    if args.csv:
        fh = sys.stdout if args.csv == "-" else open(args.csv, "w", newline="")
        w = csv.DictWriter(fh, fieldnames=list(cols) + ["cut_spatial_edges", "cut_temporal_edges"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        if fh is not sys.stdout:
            fh.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
