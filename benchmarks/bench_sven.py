"""Partitioned node memory: DistTGL's replicated memory (DepCache) vs DepComm
(``memory_placement="partitioned"``) vs Sven (``"sven"``), the issue-28
benchmark (Sven TPDS: 5.26x communication efficiency, -59.2% imbalance).

    python benchmarks/bench_sven.py [--ranks 2,4] [--epochs 1] [--events N] [--partition flexbicut]
                                    [--balance-partitions range,interval] [--project 2,4,8,64] [--quick]

Four tables, per stream:

1. **Measured** on 2 and 4 gloo processes (``parallelism=(M, 1, 1)``): per
   epoch the bytes each placement hands to the collectives summed over ranks
   (``MemoryTrainer.traffic()``): N&M = dispatch rows + request ids +
   aggregation rows + count vectors (partitioned placements) or the replicated
   write-back's all-gather (DepCache); gradients (DDP all-reduce) apart; the
   slowest rank's seconds per epoch, the validation AP, eta1 / eta2 (Eq. 1) and
   the communication efficiency = a baseline's N&M bytes / Sven's (Sven's
   definition). An all-gather is counted once per rank as the buffer it hands
   over; on the wire (ring) each rank sends it to M - 1 peers, so the DepCache
   ratio is also printed at (M - 1) x its bytes ("wire"). All-to-all bytes
   exclude the self block: they are wire bytes. With ``--balance-partitions``
   Sven runs again under those partitions and the per-rank N&M bytes sent are
   reported as max / mean (the imbalance seen in the runtime).
2. **Imbalance** of range / interval / Re-FlexBiCut on 2 / 4 / 8 parts
   (``bench_event_partition.table``): balance cost (largest per-rank rows
   fetched + served), residual matrix max / mean off-diagonal (Eq. 2),
   flexbicut's reduction vs range and vs interval, against Sven's -59.2%.
3. eta1 / eta2 against the batch size (Sven Fig. 3), ``(2, 1, 1)`` lists.
4. **Projection** to M trainers: the id lists of the ``(M, 1, 1)`` schedule
   walked in ONE process (``MemoryTrainer`` emulation, memory on one owner,
   its ``fetch`` / ``aggregate`` lists recorded), priced for the M-part
   partition as the ranks would: a dispatch list's rows owned by another
   rank x (d*4 + 8) bytes + 8 per request id, an aggregation list's rows
   owned by another rank x (8 + d*4 + 8), 2 count exchanges per step of
   (M - 1) x 8 bytes per rank; DepCache: per step the largest root count x
   (d*4 + 16) per rank. Gradients: every rank hands the parameter bytes P to
   the all-reduce once per step: M x steps x P. At the measured M the
   projection is checked against the measured bytes (printed). Next to it
   Sven's analytical Eq. 7-9 volumes from the lists' N1, N2, eta1, eta2
   (rows of d_msg + d_mem floats: Sven ships raw N&M; this runtime ships
   memory rows only, messages being computed at read time).

Streams: the shared CollegeMsg events (one constant message column) and a
synthetic stream with bursty HIGH-DEGREE vertices (:func:`hub_stream`: half
the events in bursts of 50 from 8 hub vertices, Zipf among them, over
``synthetic_events``' background). Model 100/100/100, batch 200 per trainer,
10 neighbours, float32, CPU. Bytes are exact (measured == predicted is
checked); the timings depend on the machine's load (printed).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from benchmarks.bench_event_partition import table as balance_table  # noqa: E402
from pyg_dynscale.ctdg import TGN, MemoryTrainer, load_event_list, synthetic_events  # noqa: E402
from pyg_dynscale.ctdg.memory_placement import resolve_partition  # noqa: E402
from pyg_dynscale.training.launch import spawn  # noqa: E402

PLACEMENTS = ("replicated", "partitioned", "sven")
NAMES = {"replicated": "DepCache", "partitioned": "DepComm", "sven": "Sven"}
KINDS = ("dispatch", "requests", "aggregation", "counts", "gradients", "total")
NM = ("dispatch", "requests", "aggregation", "counts")
BATCH, NEIGHBORS, DIM = 200, 10, 100
SVEN_EFFICIENCY, SVEN_IMBALANCE = 5.26, -0.592


def hub_stream(num_events: int, num_nodes: int = 2000, hubs: int = 8, hub_share: float = 0.5,
               burst_length: int = 50, seed: int = 0):
    """``synthetic_events`` (non-bipartite, no bursts of its own) with ``hub_share`` of the events
    rewritten into bursts of ``burst_length`` whose source is one of ``hubs`` hub vertices (Zipf:
    hub h drawn with p ~ 1/(h+1)), so a few high-degree vertices take a large share of the events."""
    d = synthetic_events(num_events, num_nodes, bipartite=False, burst_fraction=0.0, msg_dim=16, seed=seed)
    rng = np.random.default_rng(seed + 1)
    hub_ids = rng.choice(num_nodes, hubs, replace=False)
    p = 1.0 / np.arange(1, hubs + 1)
    src = d.src.numpy().copy()
    slots = num_events // burst_length
    for b in rng.choice(slots, int(round(hub_share * num_events / burst_length)), replace=False):
        src[b * burst_length:(b + 1) * burst_length] = rng.choice(hub_ids, p=p / p.sum())
    same = src == d.dst.numpy()
    src[same] = (src[same] + 1) % num_nodes  # no self-loops
    d.src = torch.from_numpy(src)
    return d


def _streams(quick: bool, events) -> list:
    out = []
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists() and not quick:
        d = load_event_list(college)
        d.msg = torch.ones(d.num_events, 1)
        out.append(("CollegeMsg", d))
    n = 2000 if quick else 60_000
    out.append(("hub synthetic", hub_stream(n, 500 if quick else 2000)))
    if events:
        out = [(f"{name} [:{events}]", d[:events]) if d.num_events > events else (name, d) for name, d in out]
    return out


def hub_share(data, k: int = 8) -> float:
    """Share of the events with an endpoint among the ``k`` highest-degree vertices."""
    deg = torch.bincount(torch.cat([data.src, data.dst]), minlength=int(data.num_nodes))
    top = torch.zeros_like(deg, dtype=torch.bool)
    top[deg.topk(k).indices] = True
    return float((top[data.src] | top[data.dst]).float().mean())


def _trainer(data, placement, partition, batch_size, par):
    torch.manual_seed(0)
    model = TGN(data.num_nodes, data.msg.size(-1), DIM, DIM, DIM)
    extra = {} if placement == "replicated" else {"partition": partition}
    return MemoryTrainer(model, data, batch_size=batch_size, lr=1e-4, num_neighbors=NEIGHBORS, seed=0,
                         parallelism=par, memory_placement=placement, **extra)


def _rank(rank, world, quick, events, stream, placement, partition, epochs):
    import torch.distributed as dist

    torch.set_num_threads(1)
    _, data = _streams(quick, events)[stream]
    tr = _trainer(data, placement, partition, BATCH, (world, 1, 1))
    rows = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        tr.train_epoch()
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        t = tr.traffic()
        mine = torch.tensor([t["rank"]["measured"].get(k, 0) for k in KINDS], dtype=torch.float64)  # this rank's
        every = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        per_rank = torch.stack(every)
        same = all(t["measured"][k] == t["predicted"][k] for k in t["measured"])
        red = t.get("redundancy", {})
        rows.append({"seconds": float(took), "bytes": dict(zip(KINDS, per_rank.sum(0).long().tolist())),
                     "rank_nm": per_rank[:, :len(NM)].sum(1).long().tolist(), "exact": same,
                     "eta": (red.get("eta1"), red.get("eta2"))})
    rows[-1]["ap"] = tr.evaluate("val")["ap"]
    tr.close()
    return rows


def nm_bytes(b: dict) -> int:
    """N&M bytes of a row: everything but the gradients."""
    return sum(b[k] for k in NM)


# ---------------------------------------------------------------------------- projection
def record_lists(data, m: int, batch_size: int = BATCH) -> dict:
    """The id lists of one training epoch of the ``(m, 1, 1)`` schedule, one process: per step and
    trainer the dispatch occurrence list (what ``_fetch_batch`` hands to ``fetch``) and the
    written events (``aggregate``'s ``src``, ``dst``, roots)."""
    n = int(data.num_nodes)
    tr = _trainer(data, "sven", torch.zeros(n, dtype=torch.long), batch_size, (m, 1, 1))
    rec = {"dispatch": [], "aggregation": [], "steps": 0}
    cur = {"t": None}
    dispatch, fetch, aggregate = tr.fetch.dispatch, tr.placement.fetch, tr.placement.aggregate

    def _dispatch(lb, ctx):
        cur["t"] = lb.trainer
        try:
            return dispatch(lb, ctx)
        finally:
            cur["t"] = None

    def _fetch(occ):
        if cur["t"] is not None:
            rec["dispatch"].append((cur["t"], occ.clone()))
        return fetch(occ)

    def _aggregate(batches, *rest, **kw):  # (the prepared plans, if any, pass through)
        rec["steps"] += 1
        for t, (src, dst, n_id, _, _) in enumerate(batches):  # writers in trainer order, one per trainer
            rec["aggregation"].append((rec["steps"] - 1, t, torch.cat([src, dst]), n_id.numel()))
        return aggregate(batches, *rest, **kw)

    tr.fetch.dispatch, tr.placement.fetch, tr.placement.aggregate = _dispatch, _fetch, _aggregate
    tr.train_epoch()
    rec["grad_bytes"] = sum(p.numel() * p.element_size() for p in tr.optimizer_params if p.requires_grad)
    rec["val_start"] = tr.val_start
    tr.close()
    return rec


def owner_for(data, method: str, m: int, val_start: int, batch_size: int = BATCH) -> torch.Tensor:
    """The owner tensor ``MemoryTrainer(partition=method)`` builds on ``m`` ranks."""
    n = int(data.num_nodes)
    req = None
    if method == "flexbicut":
        from pyg_dynscale.ctdg.presample import trainer_requests

        req = trainer_requests(data.src, data.dst, n, val_start, batch_size, m, NEIGHBORS)
    return resolve_partition(method, n, m, req)


def price(rec: dict, owner: torch.Tensor, m: int, d: int = DIM, elt: int = 4) -> dict:
    """Bytes per epoch summed over the ``m`` ranks, per placement, from the recorded lists."""
    row, agg, width = d * elt + 8, d * elt + 16, d * elt + 16
    out = {p: dict.fromkeys(KINDS, 0) for p in PLACEMENTS}
    occ = {"dispatch": [0, 0], "aggregation": [0, 0]}
    for t, ids in rec["dispatch"]:
        u = ids.unique()
        occ["dispatch"][0] += ids.numel()
        occ["dispatch"][1] += u.numel()
        for p, lst in (("partitioned", ids), ("sven", u)):
            k = int((owner[lst] != t).sum())
            out[p]["dispatch"] += k * row
            out[p]["requests"] += k * 8
    roots = torch.zeros(rec["steps"], m, dtype=torch.long)
    for step, t, ends, r in rec["aggregation"]:
        u = ends.unique()
        occ["aggregation"][0] += ends.numel()
        occ["aggregation"][1] += u.numel()
        roots[step, t] = r
        for p, lst in (("partitioned", ends), ("sven", u)):
            out[p]["aggregation"] += int((owner[lst] != t).sum()) * agg
    for p in ("partitioned", "sven"):
        out[p]["counts"] = m * 2 * rec["steps"] * (m - 1) * 8 if m > 1 else 0
    out["replicated"]["aggregation"] = m * int(roots.max(1).values.sum()) * width if m > 1 else 0
    for p in PLACEMENTS:
        out[p]["gradients"] = m * rec["steps"] * rec["grad_bytes"] if m > 1 else 0
        out[p]["total"] = sum(out[p][k] for k in KINDS[:-1])
    eta = {k: (v[0] - v[1]) / v[0] if v[0] else math.nan for k, v in occ.items()}
    return {"bytes": out, "eta1": eta["dispatch"], "eta2": eta["aggregation"],
            "N1": occ["dispatch"][0], "N2": occ["aggregation"][0]}


def analytical(n1: int, n2: int, eta1: float, eta2: float, m: int, d_mem: int, d_edge: int, c0: int = 4) -> dict:
    """Sven Eq. 7-9 (digest section 5): communication volume of DepCache, DepComm, Sven in bytes."""
    d_msg = 2 * d_mem + d_edge
    f = 2 * (m - 1) / m
    agg = n2 * (1 - eta2) * (d_msg + d_mem)
    return {"replicated": agg * 2 * (m - 1) ** 2 / m * c0,
            "partitioned": (n1 * d_mem * f + agg * f) * c0,
            "sven": (n1 * (1 - eta1) * (d_msg + d_mem) * f + agg * f) * c0}


# ---------------------------------------------------------------------------- driver
def _eta_sweep(data, batch_sizes) -> list:
    """eta1 / eta2 of the (2, 1, 1) lists for each batch size (the lists do not depend on the owners)."""
    out = []
    for b in batch_sizes:
        r = price(record_lists(data, 2, b), torch.zeros(int(data.num_nodes), dtype=torch.long), 2)
        out.append((b, r["eta1"], r["eta2"]))
    return out


def _fmt_eta(x) -> str:
    return f"{x:6.3f}" if x is not None and not math.isnan(x) else f"{'-':>6}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4", help="numbers of gloo processes measured (comma-separated)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--events", type=int, default=None, help="cut every stream to its first N events")
    ap.add_argument("--quick", action="store_true", help="the hub stream only, 2,000 events, 2 ranks, M <= 4, no balance reruns")
    ap.add_argument("--partition", default="flexbicut", choices=("range", "interval", "flexbicut"))
    ap.add_argument("--balance-partitions", default="range,interval",
                    help="Sven runs again under these partitions: per-rank N&M bytes max / mean ('' = none)")
    ap.add_argument("--project", default="2,4,8,64", help="projection to these numbers of trainers")
    args = ap.parse_args(argv)
    ranks = [2] if args.quick else [int(x) for x in args.ranks.split(",")]
    project = [2, 4] if args.quick else [int(x) for x in args.project.split(",")]
    others = [] if args.quick else [p for p in args.balance_partitions.split(",") if p and p != args.partition]
    streams = _streams(args.quick, args.events)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (timings are wall time "
          "under that load; bytes are exact)", flush=True)
    for name, d in streams:
        print(f"{name}: {d.num_events:,} events, {int(d.num_nodes):,} nodes, top-8 vertices in "
              f"{100 * hub_share(d):.1f}% of the events")
    measured = {}
    print(f"\n## Measured: gloo processes, parallelism (M, 1, 1), batch {BATCH} per trainer, partition="
          f"{args.partition!r}; bytes per epoch summed over ranks; s/epoch = slowest rank", flush=True)
    print(f"{'stream':<30} {'M':>2} {'placement':<9} {'s/epoch':>8} " + " ".join(f"{k:>12}" for k in NM)
          + f" {'N&M':>12} {'gradients':>12} {'total':>12} {'eta1':>6} {'eta2':>6} {'val AP':>7} exact")
    for s, (name, _) in enumerate(streams):
        for m in ranks:
            for placement in PLACEMENTS:
                r = spawn(_rank, m, args.quick, args.events, s, placement, args.partition, args.epochs,
                          timeout=4 * 3600)[0][-1]
                measured[(s, m, placement)] = r
                b = r["bytes"]
                print(f"{name:<30} {m:>2} {NAMES[placement]:<9} {r['seconds']:>8.2f} "
                      + " ".join(f"{b[k]:>12,}" for k in NM) + f" {nm_bytes(b):>12,} "
                      f"{b['gradients']:>12,} {b['total']:>12,} {_fmt_eta(r['eta'][0])} {_fmt_eta(r['eta'][1])} "
                      f"{r['ap']:>7.4f} {r['exact']}", flush=True)
    print(f"\n## Communication efficiency (N&M bytes of a baseline / Sven's), Sven reports {SVEN_EFFICIENCY}x")
    print(f"{'stream':<30} {'M':>2} {'DepComm/Sven':>13} {'DepCache/Sven':>14} {'(wire)':>8}  "
          f"verdict (>= {SVEN_EFFICIENCY}x?) DepComm / DepCache (wire)")
    for s, (name, _) in enumerate(streams):
        for m in ranks:
            sv = nm_bytes(measured[(s, m, "sven")]["bytes"])
            dc = nm_bytes(measured[(s, m, "partitioned")]["bytes"]) / sv
            ca = nm_bytes(measured[(s, m, "replicated")]["bytes"]) / sv
            ok = ["meets" if x >= SVEN_EFFICIENCY else "below" for x in (dc, ca * (m - 1))]
            print(f"{name:<30} {m:>2} {dc:>12.2f}x {ca:>13.2f}x {ca * (m - 1):>7.2f}x  {ok[0]} / {ok[1]}")
    if others:
        print(f"\n## Runtime balance: Sven's per-rank N&M bytes sent, max / mean (1.00 = even)")
        print(f"{'stream':<30} {'M':>2} " + " ".join(f"{p:>10}" for p in [args.partition] + others))
        for s, (name, _) in enumerate(streams):
            for m in ranks:
                cells = []
                for p in [args.partition] + others:
                    r = measured[(s, m, "sven")] if p == args.partition else spawn(
                        _rank, m, args.quick, args.events, s, "sven", p, 1, timeout=4 * 3600)[0][-1]
                    per = r["rank_nm"]
                    cells.append(f"{max(per) / (sum(per) / len(per)):>10.3f}")
                print(f"{name:<30} {m:>2} " + " ".join(cells), flush=True)

    print(f"\n## Imbalance of the partitions (pre-sampled requests, batch {BATCH}, {NEIGHBORS} neighbours); "
          f"Sven reports {100 * SVEN_IMBALANCE:+.1f}%")
    print("| stream | M | method | balance cost | residual max | residual mean | flexbicut vs range | "
          "flexbicut vs interval | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, d in streams:
        for r in balance_table(d, [2, 4] if args.quick else [2, 4, 8]):
            verdict = ""
            if r["method"] == "flexbicut":
                verdict = "meets" if min(r["vs_range"], r["vs_interval"]) <= SVEN_IMBALANCE else "short of"
                verdict += f" {100 * SVEN_IMBALANCE:+.1f}%"
            print(f"| {name} | {r['parts']} | {r['method']} | {r['balance']:,.0f} | {r['residual_max']:,.0f} | "
                  f"{r['residual_mean']:,.1f} | {100 * r['vs_range']:+.1f}% | {100 * r['vs_interval']:+.1f}% | "
                  f"{verdict} |", flush=True)

    print("\n## eta1 / eta2 against the batch size ((2, 1, 1) lists, one process)")
    print(f"{'stream':<30} {'batch':>6} {'eta1':>6} {'eta2':>6}")
    sizes = [50, 200] if args.quick else [50, 100, 200, 400, 800, 1600]
    for name, d in streams:
        for b, e1, e2 in _eta_sweep(d, sizes):
            print(f"{name:<30} {b:>6} {e1:6.3f} {e2:6.3f}", flush=True)

    print(f"\n## PROJECTION to M trainers (id lists of the (M, 1, 1) schedule walked in one process, priced "
          f"for the {args.partition!r} partition of M parts); gradients = M x steps x parameter bytes")
    print(f"{'stream':<30} {'M':>3} {'placement':<9} {'N&M proj.':>14} {'gradients':>14} {'Eq.7-9':>14} "
          f"{'eff. proj.':>10} {'eta1':>6} {'eta2':>6}  check vs measured")
    for s, (name, d) in enumerate(streams):
        for m in project:
            rec = record_lists(d, m)
            pr = price(rec, owner_for(d, args.partition, m, rec["val_start"]), m)
            eq = analytical(pr["N1"], pr["N2"], pr["eta1"], pr["eta2"], m, DIM, d.msg.size(-1))
            sv = pr["bytes"]["sven"]
            for placement in PLACEMENTS:
                b = pr["bytes"][placement]
                nm = nm_bytes(b)
                eff = "" if placement == "sven" else f"{nm / nm_bytes(sv):>9.2f}x"
                if placement == "replicated":  # and on the wire: the all-gather buffer to M - 1 peers
                    eff += f" (wire {(m - 1) * nm / nm_bytes(sv):.2f}x)"
                check = "(not measured)"
                got = measured.get((s, m, placement))
                if got is not None:
                    diff = {k: got["bytes"][k] - b[k] for k in KINDS if got["bytes"][k] != b[k]}
                    check = "== measured" if not diff else f"differs: {diff}"
                print(f"{name:<30} {m:>3} {NAMES[placement]:<9} {nm:>14,} {b['gradients']:>14,} "
                      f"{eq[placement]:>14,.0f} {eff:>10} {pr['eta1']:6.3f} {pr['eta2']:6.3f}  projection; {check}",
                      flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
