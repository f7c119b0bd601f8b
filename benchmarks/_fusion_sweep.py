r"""``bench_distributed.py --budget-sweep``: budgeted spatial fusion of partial
snapshots (DGC §5.1.1, Fig. 15a) over a sweep of memory budgets.

Per dataset: T-GCN with 2-layer GCNs, PGC chunks from label propagation
(``starts=("lp",)``: DGC's chunks; the default multi-start may pick a refined
snapshot/sequence start with one chunk per rank, which leaves nothing to
fuse), 2 gloo ranks. Budgets are fractions of the largest rank's activation
bytes with every chunk fused (``fusion="full"``). At each budget the same
layer-by-layer runtime runs three groupings:

* ``per-chunk``: every chunk piece alone (DGC's "default scheme", no fusion);
* ``time-order``: whole snapshots in time order, an over-budget snapshot split
  in chunk order (what the snapshot-range budget does, kept within budget);
* ``shared-halo``: DGC's greedy, the pairs sharing the most halo rows first.

Reported: groups, halo rows loaded per spatial layer (summed over ranks),
load seconds per epoch (gathering each group's rows, slowest rank), epoch
seconds (slowest rank), and ratios. Caveat: "load" here is a host-memory
gather of rows already on the device (the CPU); DGC's load is a
host-to-GPU copy, so the row counts carry over and the seconds do not.
"""
from __future__ import annotations

import time
from typing import Any

import torch

POLICIES = ("per-chunk", "time-order", "shared-halo")


def _rank_cost(sig: Any, part: Any, pattern: Any, bpe: int) -> float:
    from pyg_dynscale.distributed.fusion_groups import activation_row_width
    from pyg_dynscale.distributed.local import halo_keys

    sg = sig.supergraph()
    R = part.num_parts
    own = part.owner
    halo = halo_keys(own, sg.spatial_edge_index, sg.num_nodes) // sg.num_nodes
    rows = torch.bincount(own, minlength=R) + torch.bincount(halo, minlength=R)
    edges = torch.bincount(own[sg.spatial_edge_index[1]], minlength=R)
    return float(((rows * activation_row_width(pattern) + 2 * edges) * bpe).max())


def _worker(rank: int, world_size: int, job: dict) -> list:
    from bench_distributed import make_model

    from pyg_dynscale.distributed import DistributedTrainer

    sig, part = job["signal"], job["partition"]
    out = []
    for budget, policy in job["configs"]:
        m, head, loss = make_model("tgcn", sig.num_node_features, sig.num_snapshots, job["hidden"])
        kw = {"fusion": "full"} if policy == "full" else {"fusion": budget, "fusion_groups": policy}
        t0 = time.perf_counter()
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, lr=0.01, **kw)
        setup = time.perf_counter() - t0
        for _ in range(job["warmup"]):
            tr.train_epoch()
        tr.epoch_seconds.clear()
        load0 = tr.engine.fusion_loads()["load_seconds"] if policy != "full" else 0.0
        for _ in range(job["epochs"]):
            tr.train_epoch()
        info = tr.engine.fusion_loads() if policy != "full" else {"groups": 1, "halo_rows": None}
        out.append({"budget": budget, "policy": policy, "epoch": sum(tr.epoch_seconds) / len(tr.epoch_seconds),
                    "load": (info.get("load_seconds", 0.0) - load0) / job["epochs"], "groups": info["groups"],
                    "halo_rows": info["halo_rows"], "setup": setup})
    return out


def budget_sweep(args: Any) -> list:
    from bench_distributed import load, make_model

    from pyg_dynscale.distributed import spawn
    from pyg_dynscale.partition import partition

    fractions = [float(f) for f in args.fractions.split(",")]
    rows = []
    for name in args.sweep_datasets.split(","):
        sig = load(name, "tgcn", args.quick)
        m, _, _ = make_model("tgcn", sig.num_node_features, sig.num_snapshots, args.hidden)
        pattern = m.dependency_pattern()
        R = int(args.ranks.split(",")[0])
        part = partition(sig, "pgc", R, pattern, seed=0, starts=("lp",))
        full_cost = _rank_cost(sig, part, pattern, 4)
        configs = [(None, "full")] + [(f * full_cost, p) for f in fractions for p in POLICIES]
        res = spawn(_worker, R, {"signal": sig, "partition": part, "configs": configs, "hidden": args.hidden,
                                 "epochs": args.epochs, "warmup": args.warmup}, timeout=3600)
        chunks = int(part.chunk.max()) + 1
        print(f"\n== {name}: T={sig.num_snapshots}, {sig.num_vertex_time_nodes} vertex-time nodes, PGC "
              f"{chunks} chunks, {R} ranks; budgets x {full_cost / 2**20:.2f} MiB (a rank, all chunks fused)")
        full_epoch = max(res[k][0]["epoch"] for k in range(R))
        print(f"   fusion='full': epoch {full_epoch * 1e3:.1f} ms")
        print(f"   {'budget':>7} {'policy':>12} {'groups':>7} {'halo rows':>9} {'vs per-chunk':>12} "
              f"{'vs time-order':>13} {'load ms':>8} {'load x':>7} {'epoch ms':>9}")
        for i, (budget, policy) in enumerate(configs):
            if policy == "full":
                continue
            per_rank = [res[k][i] for k in range(R)]
            halo = sum(r["halo_rows"] for r in per_rank)
            row = {"dataset": name, "fraction": budget / full_cost, "policy": policy,
                   "groups": sum(r["groups"] for r in per_rank), "halo_rows": halo,
                   "load": max(r["load"] for r in per_rank), "epoch": max(r["epoch"] for r in per_rank),
                   "full_epoch": full_epoch}
            rows.append(row)
        for f in fractions:
            by = {r["policy"]: r for r in rows if r["dataset"] == name and abs(r["fraction"] - f) < 1e-12}
            base, order = by["per-chunk"], by["time-order"]
            for p in POLICIES:
                r = by[p]
                vs_chunk = f"{100 * (r['halo_rows'] / base['halo_rows'] - 1):+.1f}%" if base["halo_rows"] else "-"
                vs_order = f"{100 * (r['halo_rows'] / order['halo_rows'] - 1):+.1f}%" if order["halo_rows"] else "-"
                load_x = f"{base['load'] / r['load']:.2f}x" if r["load"] > 0 else "-"
                print(f"   {f:>7.4f} {p:>12} {r['groups']:>7} {r['halo_rows']:>9} {vs_chunk:>12} {vs_order:>13} "
                      f"{r['load'] * 1e3:>8.2f} {load_x:>7} {r['epoch'] * 1e3:>9.1f}")
    return rows
