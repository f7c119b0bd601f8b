r"""Training checkpoints with :mod:`torch.distributed.checkpoint` (DCP).

A checkpoint is a directory ``<dir>/epoch-<NNNNNN>/`` holding DCP's files
(model, head and optimizer state; replicated tensors are written once) and
``pyg_dynscale.json`` (what the run was: model, signal fingerprint, world
size, ... -- and its progress: epochs done, losses so far). It is written
into ``<dir>/.partial-epoch-<NNNNNN>/`` and renamed into place by rank 0
after every rank finished writing, so a directory named ``epoch-*`` is always
complete: a crash mid-write leaves only a ``.partial-*`` directory, which
:func:`latest_checkpoint` ignores and the next save of that epoch replaces.

All ranks call :func:`save_checkpoint` and :func:`load_checkpoint` together
(they are collectives); on several machines ``dir`` must be a filesystem
every rank sees (as for any DCP checkpoint).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ..errors import DynScaleError

__all__ = ["CheckpointMismatchError", "save_checkpoint", "load_checkpoint", "latest_checkpoint", "check_run",
           "CHECKPOINT_FORMAT"]

#: Version of the ``pyg_dynscale.json`` record.
CHECKPOINT_FORMAT = 1
META_FILE = "pyg_dynscale.json"
_NAME = re.compile(r"^epoch-(\d{6,})$")


class CheckpointMismatchError(DynScaleError):
    """A checkpoint written by another run configuration (model, signal,
    world size, ...) than the one resuming from it."""


def _name(epoch: int) -> str:
    return f"epoch-{epoch:06d}"


def latest_checkpoint(directory: str) -> Optional[tuple[int, str]]:
    """``(epoch, path)`` of the newest complete checkpoint in ``directory``,
    or ``None`` if there is none (a missing directory has none)."""
    if not os.path.isdir(directory):
        return None
    best = None
    for entry in os.listdir(directory):
        m = _NAME.match(entry)
        path = os.path.join(directory, entry)
        if m and os.path.isfile(os.path.join(path, META_FILE)) and os.path.isfile(os.path.join(path, ".metadata")):
            epoch = int(m.group(1))
            if best is None or epoch > best[0]:
                best = (epoch, path)
    return best


def save_checkpoint(directory: str, epoch: int, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    run: dict, progress: dict, *, keep: int = 2, group: Optional[Any] = None) -> str:
    r"""Write the checkpoint of ``epoch`` (epochs done) on every rank.

    Args:
        directory: the checkpoint directory (created if missing).
        epoch: number of completed epochs.
        module: every trained module in one container (e.g. a
            :class:`torch.nn.ModuleDict` of model and head): its FQNs name the
            optimizer state.
        optimizer: the optimizer over ``module``'s parameters.
        run: what must match for a resume (JSON values), see
            :func:`load_checkpoint`.
        progress: JSON values restored on resume (losses so far, ...).
        keep: complete checkpoints kept (older ones are deleted; ``>= 1``).

    Returns:
        The checkpoint's path.
    """
    if keep < 1:
        raise ValueError(f"keep is {keep}; keep at least one checkpoint.")
    rank = dist.get_rank(group)
    final = os.path.join(directory, _name(epoch))
    partial = os.path.join(directory, ".partial-" + _name(epoch))
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash while writing this epoch
    dist.barrier(group)
    model_state, optim_state = get_state_dict(module, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=partial, process_group=group)
    if rank == 0:
        record = {"format": CHECKPOINT_FORMAT, "epoch": int(epoch), "run": run, "progress": progress}
        with open(os.path.join(partial, META_FILE), "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        shutil.rmtree(final, ignore_errors=True)
        os.replace(partial, final)  # atomic: the checkpoint appears complete or not at all
        done = sorted((int(m.group(1)), e) for e in os.listdir(directory) if (m := _NAME.match(e)))
        for _, old in done[:-keep]:
            shutil.rmtree(os.path.join(directory, old), ignore_errors=True)
    dist.barrier(group)
    return final


def read_record(path: str) -> dict:
    """The ``pyg_dynscale.json`` record of the checkpoint at ``path``."""
    with open(os.path.join(path, META_FILE)) as f:
        record = json.load(f)
    if record.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(f"{path}: checkpoint format {record.get('format')!r}, this version reads "
                                      f"{CHECKPOINT_FORMAT}. Start without --resume or use a new --checkpoint-dir.")
    return record


def check_run(path: str, run: dict) -> dict:
    """The record of the checkpoint at ``path``, after checking that it was
    written by a run configured as ``run``.

    Raises:
        CheckpointMismatchError: naming every differing field with both values.
    """
    record = read_record(path)
    theirs = record.get("run", {})
    diff = [f"{k}: checkpoint {theirs.get(k)!r}, this run {run.get(k)!r}"
            for k in sorted(set(run) | set(theirs)) if theirs.get(k) != run.get(k)]
    if diff:
        raise CheckpointMismatchError(
            f"the checkpoint {path} was written by another run ({'; '.join(diff)}). "
            "Resume with the same model, data, scheme and number of processes, or use a new --checkpoint-dir.")
    return record


def load_checkpoint(path: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer, run: dict,
                    *, group: Optional[Any] = None) -> dict:
    r"""Restore ``module`` and ``optimizer`` from the checkpoint at ``path``
    (on every rank) and return its record (``epoch``, ``progress``).

    Raises:
        CheckpointMismatchError: the checkpoint's ``run`` differs from this
            run's (each differing field is named with both values).
    """
    record = check_run(path, run)
    model_state, optim_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path, process_group=group)
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return record
