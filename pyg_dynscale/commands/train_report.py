"""``pyg-dynscale train``'s text and JSON report (rank 0)."""
from __future__ import annotations

import argparse
from typing import Optional

from .launch import DevicePlan
from .output import report_json


# -------------------------------------------------------------------- output
def print_report(args: argparse.Namespace, r: dict, plan: Optional[DevicePlan] = None) -> None:
    if args.json:
        print(report_json(r), flush=True)
        return
    if r.get("mode") == "windows":
        from .train_windows import print_windows_report

        print_windows_report(r)
        return
    from ..partition.schemes.auto import describe_auto
    from ..partition.metrics import format_bytes

    secs = r["epoch_seconds"]
    steady = secs[1:] or secs
    kinds = ("spatial", "temporal", "redistribution", "readout", "total")
    m, p = r["bytes_measured"], r["bytes_predicted"]
    lines = [
        f"{r['model']} on {r['path']}: {r['world_size']} process(es), {r['scheme']}, {r['dtype']}, "
        f"{r['snapshots']['train']} train / {r['snapshots']['test']} test snapshots",
        *([f"  model             {r['model_class']}({', '.join(f'{k}={v!r}' for k, v in r['model_kwargs'].items())}), "
           f"{r['runtime_path']} path, head: {r['head'] or 'none'}"] if r.get("model_class") else []),
        f"  device            {r['device']} (rank 0), "
        + (plan.describe() if plan is not None else f"exchange: {r['exchange']} over {r['backend']}"),
        f"  final train loss  {r['losses'][-1]:.6f}",
        f"  test {r['test_metric_name'].upper():<12} {r['test_metric']:.6f}   (later {r['snapshots']['test']} snapshots, "
        + ("state continued from the training snapshots)" if r.get("test_state") == "continued" else
           "from a zero state: attention over the test snapshots alone)"),
        f"  epoch time        {sum(steady) / len(steady) * 1e3:.1f} ms (mean after the first; slowest rank)",
        f"  partitioning      {r['partition_seconds']:.3f} s",
        *(["  " + line for line in describe_auto(r).splitlines()] if r.get("auto") else []),
        *([f"  resumed from      epoch {r['resumed_from_epoch']} ({r['resumed_from']}), lr {r['lr']:g}"]
          if r["resumed_from_epoch"] is not None else []),
        *([f"  restarts          {r['restarts']} (torchrun restarted the workers after a failure)"]
          if r.get("restarts") else []),
        "  traffic per epoch, all ranks: measured / predicted by the plan",
    ]
    for k in kinds:
        if k in m:
            flag = "" if m[k][-1] == p[k][-1] else ("   (stale cache)" if r["stale"] != "off" else "   <- differs")
            lines.append(f"    {k:<15} {format_bytes(m[k][-1]):>10} / {format_bytes(p[k][-1]):<10}{flag}")
    lines.append(f"    not planned: gradient all-reduce {format_bytes(m['grad_sync'][-1])}, "
                 f"BatchNorm statistics {format_bytes(m['norm'][-1])}")
    lines.append(f"  loaded once      {format_bytes(r['load_bytes']['measured'])} (plan {format_bytes(r['load_bytes']['predicted'])})")
    if r["stale"] != "off":
        total_m = sum(m["total"])
        total_p = sum(p["total"])
        lines.append(f"  stale cache      {r['stale']}: {100 * (1 - total_m / total_p):.1f}% less traffic than the "
                     f"exact path over the run (masks included)" if total_p else f"  stale cache      {r['stale']}")
    peaks = [b for b in r["cuda_peak_memory_bytes"] if b is not None]
    if peaks:
        lines.append(f"  CUDA peak memory  {format_bytes(max(peaks))} (largest rank; per rank: "
                     f"{', '.join(format_bytes(b) for b in peaks)})")
    if r["checkpoints"]:
        lines.append(f"  last checkpoint  {r['checkpoints'][-1]}")
    print("\n".join(lines), flush=True)
