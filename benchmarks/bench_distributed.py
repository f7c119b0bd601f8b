r"""DGC's ablation as configurations of the one distributed runtime (DGC §7.2-7.3).

For every dataset x model x world size, the same :class:`DistributedTrainer`
runs six configurations on spawned gloo processes, side by side in one run:

* ``PyGT-PSS`` / ``PyGT-PTS`` / ``PyGT-PSS-TS``: the equal-count baseline
  schemes (``balanced=False``, DGC's baselines) with ``fusion="none"`` (one
  structure-encoder call and one halo exchange per snapshot and layer, as a
  PyGT loop runs);
* ``PGC``: PGC with ``fusion="none"`` (DGC w/o CF&SG);
* ``PGC+fusion``: PGC with ``fusion="full"`` (DGC w/o SG: all of a rank's
  chunks as one block-diagonal graph);
* ``PGC+fusion+rounds``: the same with PGC's round-aware balance objective
  (``balance="rounds"``, docs/pgc.md); ``--configs PGC+fusion,PGC+fusion+rounds``
  runs just the two side by side, with the round-aware model's predicted
  lambda next to the measured one.

``--profile-rounds`` instead measures the per-rank compute of six fused
partitions per dataset x model and fits the round-aware model's constants.

Models are DGC's forms (§7.1): T-GCN with 2-layer GCNs, DySAT (2 blocks),
and MPNN-LSTM with its LSTM across snapshots (:class:`MPNNLSTMDGC`). Features
are in/out degrees (DGC: "we use the in-degree and out-degree as the vertex
features"); T-GCN and MPNN-LSTM regress the next snapshot's degree, DySAT
predicts links (``bce_link``) on the SNAP graphs and regresses degrees on the
synthetic ones (which have no link labels).

Reported per configuration: mean epoch time (slowest rank), per-rank compute
(epoch time minus time inside collectives) and communication, lambda = max /
min per-rank compute, bytes per epoch measured vs the plan, recurrent rounds,
halo rows (per rank vs per chunk), the set-up time that builds the rank's
local data and loads its feature halo ("load"), and the speed-up of
PGC+fusion over the best baseline. This machine has 2 cores, so 4 ranks share 2 cores: measured epoch
times include that contention.

**Projection to 8 ranks** (labelled as such): for each configuration the
8-part partition's exact plan bytes and per-rank workload (vertex-time nodes
+ aggregated edges), a compute rate per unit of workload measured in the
4-rank (else 2-rank) run, and a network of ``--bandwidth`` bytes/s and
``--latency`` s per collective:
:math:`T_8 = \max_r c\,w_r + \sum_{\text{collectives}} (\ell + \max_r b_r / BW)`.

Usage::

    python benchmarks/bench_distributed.py            # full (several minutes)
    python benchmarks/bench_distributed.py --quick    # one small synthetic graph
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _shared import DATASETS  # noqa: E402

from pyg_dynscale.distributed import DistributedTrainer, spawn  # noqa: E402
from pyg_dynscale.nn import DySAT, MPNNLSTMDGC, TGCN  # noqa: E402
from pyg_dynscale.partition import CommunicationPlan, partition  # noqa: E402
from pyg_dynscale.partition.costs.rounds import predict_round_times  # noqa: E402

DAY = 86400.0
CONFIGS = [("PyGT-PSS", "pss", "none"), ("PyGT-PTS", "pts", "none"), ("PyGT-PSS-TS", "pss-ts", "none"),
           ("PGC", "pgc", "none"), ("PGC+fusion", "pgc", "full"), ("PGC+fusion+rounds", "pgc", "full")]
#: per configuration: partition options (the round-aware balance objective, docs/pgc.md)
OPTIONS = {"PGC+fusion+rounds": {"balance": "rounds"}}
BASELINES = ("PyGT-PSS", "PyGT-PTS", "PyGT-PSS-TS")


def load(name: str, model: str, quick: bool) -> Any:
    from pyg_dynscale.data import loaders, synthetic

    target = "link" if model == "dysat" else "degree"
    if name.startswith("synth"):
        hi = name.endswith("high")
        size = dict(num_vertices=300, num_edges=3000, num_snapshots=10) if quick else \
            dict(num_vertices=3000, num_edges=40000, num_snapshots=30)
        return synthetic.generate_dynamic_graph(**size, edge_std=1.0 if hi else 0.0,
                                                sequence_length_std=1.0 if hi else 0.0, presence=0.5,
                                                num_features=2, seed=0)
    files = {"CollegeMsg": ("snap/CollegeMsg.txt", DAY), "email-Eu": ("snap/email-Eu-core-temporal.txt.gz", 7 * DAY),
             "bitcoinotc": ("snap/soc-sign-bitcoinotc.csv.gz", 7 * DAY)}
    rel, window = files[name]
    return loaders.load_edge_list(os.path.join(str(DATASETS), rel), window=window, target=target,
                                  vertex_set="window", degree_transform="log1p")


def make_model(model: str, F: int, T: int, hidden: int, link: bool = False):
    torch.manual_seed(0)
    if model == "tgcn":
        return TGCN(F, hidden, num_layers=2), torch.nn.Linear(hidden, 1), "mse"
    if model == "dysat":
        m = DySAT(F, hidden, T, structural_heads=2, temporal_heads=2, num_blocks=2)
        return (m, None, "bce_link") if link else (m, torch.nn.Linear(hidden, 1), "mse")
    if model == "mpnnlstm":
        return MPNNLSTMDGC(F, hidden), torch.nn.Linear(2 * hidden, 1), "mse"
    raise KeyError(model)


def _worker(rank: int, world_size: int, job: dict) -> list:
    sig = job["signal"]
    out = []
    for label, part, fusion in job["parts"]:
        m, head, loss = make_model(job["model"], sig.num_node_features, sig.num_snapshots, job["hidden"],
                                   "edge_label_index" in sig.fields)
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, lr=0.01, fusion=fusion)
        for _ in range(job["warmup"]):
            tr.train_epoch()
        tr.epoch_seconds.clear()
        tr.comm_seconds.clear()
        losses = [tr.train_epoch() for _ in range(job["epochs"])]
        traffic = tr.traffic()
        out.append({"label": label, "epoch": tr.epoch_seconds, "comm": tr.comm_seconds, "losses": losses,
                    "traffic": traffic, "halo": tr.halo_rows(), "setup": tr.setup_seconds,
                    "load_seconds": tr.load_seconds, "workload": _workload(sig, part, rank)})
    return out


def _workload(sig: Any, part: Any, rank: int) -> float:
    sg = sig.supergraph()
    own = part.owner
    town = part.temporal_owner
    return float((own == rank).sum() + (own[sg.spatial_edge_index[1]] == rank).sum() + (town == rank).sum())


def _rank_workloads(sig: Any, part: Any) -> torch.Tensor:
    sg = sig.supergraph()
    R = part.num_parts
    own, town = part.owner, part.temporal_owner
    return (torch.bincount(own, minlength=R) + torch.bincount(own[sg.spatial_edge_index[1]], minlength=R)
            + torch.bincount(town, minlength=R)).double()


def _partitions(sig: Any, model: str, R: int, pattern: Any, configs: Any = None) -> list:
    return [(label, partition(sig, scheme, R, pattern, seed=0, **OPTIONS.get(label, {})), fusion)
            for label, scheme, fusion in CONFIGS if configs is None or label in configs]


def projection(sig: Any, model: str, pattern: Any, rate: dict, bw: float, lat: float, R: int = 8) -> dict:
    """Projected epoch seconds at ``R`` ranks per configuration (see module doc)."""
    out = {}
    sg = sig.supergraph()
    for label, scheme, fusion in CONFIGS:
        part = partition(sig, scheme, R, pattern, seed=0, **OPTIONS.get(label, {}))
        plan = CommunicationPlan.build(sig, part, pattern)
        w = _rank_workloads(sig, part)
        comm = 0.0
        T = sg.num_snapshots
        for e in plan:
            if e.static:
                continue
            per_rank = e.counts().sum(1).double() * e.width * e.bytes_per_element
            calls = T if (fusion == "none" and e.kind == "spatial") else \
                (plan.temporal_rounds() if e.kind == "temporal" and pattern.blocks[e.block].time_kind == "recurrent" else 1)
            comm += 2 * (calls * lat + float(per_rank.max()) / bw)  # forward + backward
        out[label] = float(w.max()) * rate[label] + comm
    return out


#: partitions whose per-rank compute --profile-rounds measures (all fused, so the
#: structure encoder runs as the round-aware model assumes)
PROFILE_SCHEMES = [("pgc", {}), ("pss", {"balanced": True}), ("pts", {"balanced": True}), ("pss", {}), ("pts", {}),
                   ("pss-ts", {})]


def profile_rounds(args: Any) -> list:
    """Per-rank compute of six fused partitions per dataset x model, with the
    round-aware model's operation counts, and a per-model and joint
    :meth:`RoundWorkload.fit` (the source of ``DEFAULT_CONSTANTS``)."""
    from pyg_dynscale.partition.costs.rounds import RoundFeatures, RoundWorkload, round_features

    rows = []
    for name in args.datasets.split(","):
        for model in args.models.split(","):
            sig = load(name, model, args.quick)
            m, _, _ = make_model(model, sig.num_node_features, sig.num_snapshots, args.hidden)
            pattern = m.dependency_pattern(bytes_per_element=4)
            for R in [int(r) for r in args.ranks.split(",")]:
                parts = [(f"{sch}{'-balanced' if kw else ''}", partition(sig, sch, R, pattern, seed=0, **kw), "full")
                         for sch, kw in PROFILE_SCHEMES]
                job = {"signal": sig, "model": model, "hidden": args.hidden, "parts": parts,
                       "epochs": args.epochs, "warmup": args.warmup}
                res = spawn(_worker, R, job, timeout=1800)
                for i, (label, part, _) in enumerate(parts):
                    per = [r[i] for r in res]
                    comp = [(sum(r["epoch"]) - sum(r["comm"])) / args.epochs for r in per]
                    f = round_features(sig, part, pattern)
                    rows.append({"dataset": name, "model": model, "ranks": R, "partition": label, "compute_s": comp,
                                 "structure": f.structure.tolist(), "rounds": f.rounds.tolist()})
                    print(f"{name:12s} {model:9s} R={R} {label:14s} compute ms "
                          + "/".join(f"{c * 1e3:.0f}" for c in comp), flush=True)

    def feats(r: dict) -> Any:
        return RoundFeatures(torch.tensor(r["structure"], dtype=torch.float64),
                         torch.tensor(r["rounds"], dtype=torch.float64).view(-1, r["ranks"], 3))

    groups = {m: [r for r in rows if r["model"] == m] for m in sorted({r["model"] for r in rows})}
    groups["joint"] = rows
    for key, sub in groups.items():
        fs, ts = [feats(r) for r in sub], [torch.tensor(r["compute_s"]) for r in sub]
        fit = RoundWorkload.fit(fs, ts)
        flat = RoundWorkload.fit([RoundFeatures(f.structure, f.rounds * torch.tensor([1.0, 0.0, 0.0])) for f in fs], ts)
        print(f"fit {key:9s} " + ", ".join(f"{n}={getattr(fit, n):.4g}" for n in fit.NAMES)
              + f"; MAPE {fit.meta['mape']:.1%} ({fit.meta['samples']} ranks, {fit.meta['seconds_per_unit'] * 1e3:.3g} ms/unit)"
              + f"; rounds ignored: MAPE {flat.meta['mape']:.1%}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small synthetic graph, T-GCN, 2 ranks")
    ap.add_argument("--datasets", default="CollegeMsg,bitcoinotc,email-Eu,synth-low,synth-high")
    ap.add_argument("--models", default="tgcn,dysat,mpnnlstm")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--bandwidth", type=float, default=12e9, help="projection: bytes/s per rank (PCIe 3 x16 ~ 12 GB/s)")
    ap.add_argument("--latency", type=float, default=20e-6, help="projection: seconds per collective")
    ap.add_argument("--json", default="", help="write all rows to this JSON file")
    ap.add_argument("--configs", default="", help="comma-separated subset of the configurations "
                    "(e.g. PGC+fusion,PGC+fusion+rounds: the balance objectives side by side); no projection then")
    ap.add_argument("--budget-sweep", action="store_true",
                    help="budgeted fusion of partial snapshots instead (DGC §5.1.1; benchmarks/_fusion_sweep.py)")
    ap.add_argument("--sweep-datasets", default="CollegeMsg,bitcoinotc,email-Eu")
    ap.add_argument("--fractions", default="0.001,0.004,0.016,0.0625,0.25",
                    help="--budget-sweep: budgets as fractions of a rank's activations with all chunks fused")
    ap.add_argument("--profile-rounds", action="store_true",
                    help="measure per-rank compute of six fused partitions and fit the round-aware model's constants")
    args = ap.parse_args()
    if args.profile_rounds:
        rows = profile_rounds(args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return
    if args.budget_sweep:
        from _fusion_sweep import budget_sweep

        rows = budget_sweep(args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return
    if args.quick:
        args.datasets, args.models, args.ranks, args.epochs = "synth-high", "tgcn", "2", 2
    rows, projections = [], []
    t_all = time.perf_counter()
    for name in args.datasets.split(","):
        for model in args.models.split(","):
            sig = load(name, model, args.quick)
            m, _, _ = make_model(model, sig.num_node_features, sig.num_snapshots, args.hidden)
            pattern = m.dependency_pattern(bytes_per_element=4)
            rate: dict = {}
            for R in [int(r) for r in args.ranks.split(",")]:
                parts = _partitions(sig, model, R, pattern, args.configs.split(",") if args.configs else None)
                job = {"signal": sig, "model": model, "hidden": args.hidden, "parts": parts,
                       "epochs": args.epochs, "warmup": args.warmup}
                res = spawn(_worker, R, job, timeout=1800)
                for i, (label, part, fusion) in enumerate(parts):
                    per = [r[i] for r in res]
                    epoch = [max(r["epoch"][e] for r in per) for e in range(args.epochs)]
                    comm = [sum(r["comm"]) / args.epochs for r in per]
                    compute = [sum(r["epoch"]) / args.epochs - c for r, c in zip(per, comm)]
                    t = per[0]["traffic"]
                    row = {"dataset": name, "model": model, "ranks": R, "config": label,
                           "N": sig.num_vertex_time_nodes, "T": sig.num_snapshots,
                           "epoch_s": sum(epoch) / len(epoch), "compute_s": compute, "comm_s": comm,
                           "lambda": max(compute) / max(min(compute), 1e-9),
                           "bytes_measured": t["measured"]["total"], "bytes_plan": t["predicted"]["total"],
                           "bytes_by_kind": t["measured"], "rounds": t["temporal_rounds"],
                           "collectives": t["collectives"], "halo_fused": per[0]["halo"]["fused"],
                           "halo_per_chunk": per[0]["halo"]["per_chunk"], "load_s": max(r["load_seconds"] for r in per),
                           "partition_s": part.seconds, "final_loss": per[0]["losses"][-1],
                           "lambda_predicted": predict_round_times(sig, part, pattern).divergence}
                    rows.append(row)
                    wsum = sum(r["workload"] for r in per)
                    rate[label] = sum(compute) / max(wsum, 1.0)
                _print_block([r for r in rows if r["dataset"] == name and r["model"] == model and r["ranks"] == R])
            if args.configs:
                continue
            proj = projection(sig, model, pattern, rate, args.bandwidth, args.latency)
            best = min(proj[b] for b in BASELINES)
            projections.append({"dataset": name, "model": model, **proj, "speedup": best / proj["PGC+fusion"]})
            print(f"  PROJECTION (not measured) 8 ranks, {args.bandwidth / 1e9:g} GB/s, {args.latency * 1e6:g} us/collective: "
                  + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in proj.items())
                  + f"; PGC+fusion vs best baseline {best / proj['PGC+fusion']:.2f}x", flush=True)
    print(f"\nSummary (measured, mean epoch of the slowest rank; {time.perf_counter() - t_all:.0f} s in all)")
    if args.configs:
        print(f"{'dataset':12s} {'model':9s} {'R':>2s} " + " ".join(f"{c:>34s}" for c in args.configs.split(",")))
        for key in sorted({(r["dataset"], r["model"], r["ranks"]) for r in rows}):
            rs = {r["config"]: r for r in rows if (r["dataset"], r["model"], r["ranks"]) == key}
            print(f"{key[0]:12s} {key[1]:9s} {key[2]:2d} " + " ".join(
                f"{'lambda %.2f (pred %.2f) %.0f ms %.3f MB' % (rs[c]['lambda'], rs[c]['lambda_predicted'], rs[c]['epoch_s'] * 1e3, rs[c]['bytes_measured'] / 1e6):>34s}"
                for c in args.configs.split(",")))
        rows_out = {"rows": rows, "args": vars(args)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows_out, f, indent=1)
        return
    print(f"{'dataset':12s} {'model':9s} {'R':>2s} {'best baseline':>22s} {'PGC':>9s} {'PGC+fusion':>11s} {'speed-up':>9s}")
    for key in sorted({(r["dataset"], r["model"], r["ranks"]) for r in rows}, key=lambda k: (k[0], k[1], k[2])):
        rs = {r["config"]: r for r in rows if (r["dataset"], r["model"], r["ranks"]) == key}
        b = min(BASELINES, key=lambda x: rs[x]["epoch_s"])
        best = f"{b} {rs[b]['epoch_s'] * 1e3:.0f} ms"
        print(f"{key[0]:12s} {key[1]:9s} {key[2]:2d} {best:>22s} "
              f"{rs['PGC']['epoch_s'] * 1e3:7.0f}ms {rs['PGC+fusion']['epoch_s'] * 1e3:9.0f}ms "
              f"{rs[b]['epoch_s'] / rs['PGC+fusion']['epoch_s']:8.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "projections": projections, "args": vars(args)}, f, indent=1)


def _print_block(rows: list) -> None:
    r0 = rows[0]
    print(f"\n{r0['dataset']} (N={r0['N']}, T={r0['T']}) {r0['model']} R={r0['ranks']}", flush=True)
    print(f"  {'config':17s} {'epoch ms':>9s} {'compute ms (per rank)':>24s} {'comm ms':>16s} {'lambda':>6s} {'pred':>5s} "
          f"{'MB/epoch':>9s} {'= plan':>6s} {'rounds':>6s} {'halo rank/chunk':>16s} {'load ms':>7s} {'loss':>8s}")
    for r in rows:
        comp = "/".join(f"{c * 1e3:.0f}" for c in r["compute_s"])
        comm = "/".join(f"{c * 1e3:.0f}" for c in r["comm_s"])
        halo = f"{r['halo_fused']}/{r['halo_per_chunk'] if r['halo_per_chunk'] is not None else '-'}"
        print(f"  {r['config']:17s} {r['epoch_s'] * 1e3:9.1f} {comp:>24s} {comm:>16s} {r['lambda']:6.2f} {r['lambda_predicted']:5.2f} "
              f"{r['bytes_measured'] / 1e6:9.2f} {str(r['bytes_measured'] == r['bytes_plan']):>6s} {r['rounds']:6d} "
              f"{halo:>16s} {r['load_s'] * 1e3:7.1f} {r['final_loss']:8.4f}", flush=True)


if __name__ == "__main__":
    main()
