r"""``pyg-dynscale train PATH``: distributed full-batch training of a dynamic GNN.

One command, three ways to start it (parts = world size):

* ``pyg-dynscale train PATH --nproc N ...`` starts ``N`` local processes
  itself through :mod:`torch.distributed.run` (torchrun's machinery:
  rendezvous, worker monitoring, ``--max-restarts``);
* ``torchrun --nproc-per-node N -m pyg_dynscale train PATH ...`` (and with
  torchrun's rendezvous flags, on several machines) runs the same job;
* without either, one process trains alone (a world of one rank).

Every rank loads ``PATH``, splits it in time (``--train-ratio``), partitions
the training split with ``--scheme`` (deterministic for a ``--seed``, so all
ranks agree; or loads ``--partition FILE``) and trains its part with
:class:`~pyg_dynscale.distributed.DistributedTrainer`. Rank 0 shows a progress
bar and, at the end, the test metric on the later snapshots (MSE for node
targets, ROC AUC for links), the epoch time and the traffic measured next to
the :class:`~pyg_dynscale.partition.CommunicationPlan`'s prediction. ``--json``
prints one JSON object instead (keys in ``docs/cli.md``).

Devices (``--device``, :func:`plan_devices`): ``auto`` trains on CUDA when
there is a GPU. Each rank takes ``cuda:(LOCAL_RANK % GPUs)``; with at most one
rank per GPU the process group is NCCL (the trainer's direct exchange), with
more ranks than GPUs on a machine it is gloo and the ranks sharing a GPU move
their rows through pinned host buffers (the trainer's staged exchange). CPU
ranks use gloo.

Checkpoints (``--checkpoint-dir``) are written with
:mod:`torch.distributed.checkpoint` every ``--checkpoint-every`` epochs;
``--resume`` continues from the newest complete one and reaches exactly the
parameters of an uninterrupted run.

``--shards DIR`` trains on shards instead of ``PATH`` (no rank loads the
dataset; each reads its own part: :mod:`~pyg_dynscale.commands.train_shards`).

``--lags L`` (or ``--windows L``) trains windows of ``L`` snapshots instead
(PyGT's index-batching, :mod:`~pyg_dynscale.commands.train_windows`), launched
the same way.

Options left unset take the API's defaults (:func:`~pyg_dynscale.commands.train_options.resolve_defaults`):
``DistributedTrainer``'s for full-batch training, ``WindowTrainer``'s with ``--lags``.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from .job import fail, group_timeout, start
from .launch import (DevicePlan, bind_device, init_torchrun_group, launch_workers, machine_plan,  # noqa: F401
                     plan_devices, worker_argv)
from .train_checks import check_args, check_path, run_record  # noqa: F401
from .train_job import train  # noqa: F401
from .train_shards import check_shard_args, print_shards_report, train_from_shards
from .train_windows import train_windows
from .train_options import DEVICES, DTYPES, FORMATS, PROG, SCHEMA_VERSION, add_parser, resolve_defaults  # noqa: F401
from .train_report import print_report  # noqa: F401

__all__ = ["add_parser", "run", "train", "check_args", "run_record", "worker_argv", "plan_devices", "DevicePlan",
           "DEVICES", "DTYPES", "FORMATS", "PROG", "SCHEMA_VERSION", "fail"]


def run(args: argparse.Namespace) -> int:
    if args.shards is None and args.path is not None:
        check_path(args)  # before resolve_defaults imports torch: a missing file is reported at once
    if args.shards is not None:  # both checks fill the unset options with the API's defaults (resolve_defaults)
        check_shard_args(args)
    elif args.path is None:
        fail("the following arguments are required: PATH (or --shards DIR, shards written by pyg-dynscale partition ... --shards DIR)")
    else:
        check_args(args)
    return start(args, PROG, alone=lambda: _alone(args), worker=lambda *ranks: _worker(args, *ranks),
                 launch=launch_workers)


def _job(args: argparse.Namespace) -> Any:
    """The job of one rank: full-batch :func:`train`, or :func:`train_windows` with ``--windows``."""
    if getattr(args, "shards", None) is not None:
        return train_from_shards
    return train_windows if getattr(args, "windows", None) is not None else train


def _print(args: argparse.Namespace, report: dict, plan: Any) -> None:
    if report.get("mode") == "shards" and not args.json:
        print_shards_report(report)
    else:
        print_report(args, report, plan)


def _alone(args: argparse.Namespace) -> None:
    """One process, a world of one rank (its own process group, on the machine's device)."""
    import torch.distributed as dist

    plan = machine_plan(args, 1)
    device = plan.device(0)
    store = dist.HashStore()

    def init() -> None:
        device_id = bind_device(device)
        dist.init_process_group(plan.backend, store=store, rank=0, world_size=1,
                                **({"device_id": device_id} if plan.backend == "nccl" else {}))

    try:
        report = _job(args)(args, 0, 1, init, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    _print(args, report, plan)


def _worker(args: argparse.Namespace, rank: int, world: int, local_rank: int) -> None:
    """One rank under torchrun (:func:`~pyg_dynscale.commands.job.run_worker` reports its failure)."""
    # torchrun sets LOCAL_RANK / LOCAL_WORLD_SIZE; a hand-made environment without them is taken as one
    # machine (overestimating the local ranks only picks the staged exchange, never two ranks per GPU on NCCL)
    plan = machine_plan(args, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    device = plan.device(local_rank)

    def init() -> None:
        from ..training.failure import start_heartbeat

        init_torchrun_group(rank, world, group_timeout(args), plan.backend, device)
        # from here on a rank that stops answering can be told from one that is only slow
        args._stop_heartbeat = start_heartbeat(rank)

    report = _job(args)(args, rank, world, init, device)
    if rank == 0:
        _print(args, report, plan)
