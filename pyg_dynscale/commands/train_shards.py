r"""``pyg-dynscale train --shards DIR``: train on shards, each rank reading only its part.

The shards (``pyg-dynscale partition PATH --parts N --shards DIR``, or
:func:`~pyg_dynscale.distributed.write_shards`) hold a partitioned signal cut
per rank. Here no rank loads a dataset file: each one builds the zoo model
from the shard set's ``meta.json`` (features, snapshots, vertices), then
:meth:`DistributedTrainer.from_shards
<pyg_dynscale.distributed.DistributedTrainer.from_shards>` reads its own
``rank-<r>/`` only. The run trains every snapshot of the shards (they hold
no test split), so the report has the losses and the traffic measured next
to the plan's prediction, and no test metric.

What a rank holding its part cannot run is refused before any process
starts, in one line naming the option: ``--windows``, ``--partition``,
``--save-partition``, ``--recompute-every``, ``--fusion none``,
``--stale``, ``--target link``, ``--model-args`` and the black-box zoo
models; a missing or damaged shard directory is one line too.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable

from .job import Job, check_launch_options, fail
from .train_options import PROG, SCHEMA_VERSION

__all__ = ["check_shard_args", "train_from_shards", "print_shards_report"]


def check_shard_args(args: argparse.Namespace) -> None:
    """Checks that need no data (run by the launcher and by every rank)."""
    from ..distributed.shards import read_meta
    from ..errors import ShardError
    from ..nn.zoo import BLACK_BOX_MODELS

    d = args.shards
    if args.path is not None:
        fail(f"give PATH or --shards {d}, not both: the shards hold the data (re-write them from PATH with "
             "pyg-dynscale partition PATH --parts N --shards DIR).")
    refused = {"windows": args.windows is not None, "partition": args.partition is not None,
               "save-partition": args.save_partition is not None, "recompute-every": args.recompute_every is not None,
               "fusion": args.fusion != "full", "stale": args.stale != "off", "target": args.target != "node",
               "model-args": getattr(args, "model_args", None) is not None}
    for name, bad in refused.items():
        if bad:
            fail(f"--{name} with --shards: a rank that holds only its part cannot run it (the shards hold node "
                 f"targets, one partition, fusion='full', exact exchanges). Drop --{name}, or train from PATH.")
    if getattr(args, "user_model", None) is not None or args.model in BLACK_BOX_MODELS:
        fail(f"--model {args.model} with --shards: it runs on the black-box path, and `partition --shards` writes shards for the decomposed path only (black-box shards: distributed.write_shards(signal, partition, module, DIR) in Python). "
             "Use a decomposed zoo model (tgcn, tgcn-deep, dysat, mpnnlstm, mpnnlstm-dgc, tmgcn), or train from PATH.")
    try:
        meta = read_meta(d)
    except ShardError as exc:
        fail(f"--shards {d}: {exc}")
    for name in ("epochs", "hidden", "threads", "checkpoint_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    check_launch_options(args)
    nproc = getattr(args, "nproc", None)  # the job's processes (None: one, or torchrun's, checked by each rank)
    if nproc is not None and nproc != meta["world_size"]:
        fail(f"--shards {d} holds {meta['world_size']} parts but --nproc {nproc} processes would train; use "
             f"--nproc {meta['world_size']}, or write shards for {nproc} parts.")


def train_from_shards(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None],
                      device: str = "cpu") -> dict:
    r"""The job of one rank on ``device``: read ``meta.json``, build the zoo
    model, :meth:`DistributedTrainer.from_shards`, train ``--epochs``;
    returns the report (the same on every rank but ``device``)."""
    import torch

    from ..distributed import DistributedTrainer
    from ..distributed.shards import read_meta
    from ..errors import ShardError
    from ..nn.zoo import build_model

    job = Job(args, rank, PROG, time.perf_counter)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    try:
        meta = read_meta(args.shards)
    except ShardError as exc:
        fail(f"--shards {args.shards}: {exc}")
    if meta["world_size"] != world:
        fail(f"--shards {args.shards} holds {meta['world_size']} parts but {world} processes train; start "
             f"{meta['world_size']} processes (--nproc {meta['world_size']}), or write shards for {world} parts.")
    job.find_resume({"shards": meta["set"], "world": world, "model": args.model, "hidden": args.hidden,
                     "dtype": args.dtype, "seed": args.seed}, lambda exc: f"--resume: {exc}")
    init_process_group()
    torch.manual_seed(args.seed)
    model, head, loss = build_model(args.model, meta["num_features"], args.hidden or 32,
                                    num_snapshots=meta["num_snapshots"], num_vertices=meta["num_vertices"],
                                    target="node")
    model = model.to(device=device, dtype=dtype)
    head = head.to(device=device, dtype=dtype) if head is not None else None
    t0 = time.perf_counter()
    try:
        trainer = DistributedTrainer.from_shards(model, args.shards, head=head, loss=loss, lr=args.lr,
                                                 device=device, backend="auto")
    except ShardError as exc:  # every rank raises it, naming the rank that failed
        fail(f"--shards {args.shards}: {exc}")
    setup = time.perf_counter() - t0
    modules = torch.nn.ModuleDict({"model": model, **({"head": head} if head is not None else {})})
    progress: dict = {"losses": [], "epoch_seconds": [], "bytes_measured": {}, "bytes_predicted": {}}
    progress, start = job.restore(modules, trainer.optimizer, progress)

    def after(loss_value: float) -> dict:
        traffic = trainer.traffic()
        for key in ("measured", "predicted"):
            for kind, value in traffic[key].items():
                progress[f"bytes_{key}"].setdefault(kind, []).append(int(value))
        return {}

    job.epochs(trainer, progress, start, desc=f"{args.model} x{world} (shards)", after=after)
    final = trainer.traffic()
    return {
        "schema_version": SCHEMA_VERSION, "mode": "shards", "shards": os.path.abspath(args.shards),
        "model": args.model, "runtime_path": trainer.path, "scheme": meta["scheme"], "world_size": world,
        "dtype": args.dtype, "hidden": args.hidden or 32, "epochs": args.epochs, "seed": args.seed,
        "lr": float(trainer.optimizer.param_groups[0]["lr"]), "optimizer": "adam", "loss": loss,
        "snapshots": {"train": meta["num_snapshots"], "test": 0}, "vertex_time_nodes": meta["num_nodes"],
        "losses": progress["losses"], "test_metric": None, "test_metric_name": None,
        "epoch_seconds": progress["epoch_seconds"], "bytes_measured": progress["bytes_measured"],
        "bytes_predicted": progress["bytes_predicted"], "load_bytes": final["load"],
        "shard_bytes_read": trainer.shard.bytes_read, "setup_seconds": setup, **job.fields(),
        "device": str(trainer.device), "backend": trainer.transport.backend, "exchange": trainer.transport.name,
    }


def print_shards_report(r: dict) -> None:
    """Rank 0's text report of a run from shards."""
    from ..partition.metrics import format_bytes

    secs = r["epoch_seconds"]
    steady = secs[1:] or secs
    m, p = r["bytes_measured"], r["bytes_predicted"]
    lines = [f"{r['model']} on shards {r['shards']}: {r['world_size']} process(es), {r['scheme']}, {r['dtype']}, "
             f"{r['snapshots']['train']} snapshots (no test split in shards)",
             f"  final train loss  {r['losses'][-1]:.6f}" if r["losses"] else "  no epoch trained",
             f"  epoch time        {sum(steady) / max(len(steady), 1) * 1e3:.1f} ms (mean after the first; slowest rank)",
             f"  shard read        {format_bytes(r['shard_bytes_read'])} (rank 0's part), set-up {r['setup_seconds']:.2f} s",
             "  traffic per epoch, all ranks: measured / predicted by the plan"]
    for k in ("spatial", "temporal", "redistribution", "readout", "total"):
        if k in m:
            flag = "" if m[k][-1] == p[k][-1] else "   <- differs"
            lines.append(f"    {k:<15} {format_bytes(m[k][-1]):>10} / {format_bytes(p[k][-1]):<10}{flag}")
    print("\n".join(lines), flush=True)
