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
import warnings
from typing import Any, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from ..errors import DynScaleError

__all__ = ["CheckpointMismatchError", "CheckpointDamagedError", "save_checkpoint", "load_checkpoint",
           "latest_checkpoint", "check_run", "read_record", "verify_checkpoint", "saved_extra", "CHECKPOINT_FORMAT",
           "LATER_FIELDS"]

#: Version of the ``pyg_dynscale.json`` record.
CHECKPOINT_FORMAT = 1
META_FILE = "pyg_dynscale.json"
_NAME = re.compile(r"^epoch-(\d{6,})$")


#: Fields of the run record that checkpoints of this format gained later (the training hyperparameters):
#: a record without one is not refused for it (the caller checks the restored optimizer instead).
LATER_FIELDS = ("lr", "optimizer", "loss", "stale")


class CheckpointMismatchError(DynScaleError):
    """A checkpoint written by another run configuration (model, signal,
    world size, learning rate, ...) than the one resuming from it.

    Attributes:
        path: the checkpoint.
        fields: ``(field, checkpoint's value, this run's value)`` of every
            differing field of the run record.
    """

    def __init__(self, message: str, path: str = "", fields: tuple = ()) -> None:
        super().__init__(message)
        self.path = path
        self.fields = tuple(fields)


class CheckpointDamagedError(DynScaleError):
    """A checkpoint whose files are missing, truncated or unreadable (the
    message names the file and what to do)."""


def _damaged(path: str, what: str) -> CheckpointDamagedError:
    return CheckpointDamagedError(
        f"the checkpoint {path} is damaged: {what}. Delete that directory to resume from the previous "
        "checkpoint, or start without --resume (or with a new --checkpoint-dir).")


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
                    run: dict, progress: dict, *, keep: int = 2, group: Optional[Any] = None,
                    extra: Optional[dict] = None) -> str:
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
        extra: ``{key: Tensor}`` of state besides module and optimizer (e.g.
            :meth:`MemoryTrainer.stream_state <pyg_dynscale.ctdg.MemoryTrainer.stream_state>`):
            a key held by several ranks is written once (DCP's deduplication: its
            holders must agree), a key held by one rank (``rank<r>/...``) by that
            rank; :func:`load_checkpoint` fills each rank's own keys.

    Returns:
        The checkpoint's path.
    """
    if keep < 1:
        raise ValueError(f"keep is {keep}; keep at least one checkpoint.")
    grouped = dist.is_initialized()  # one process without a group: DCP writes alone
    rank = dist.get_rank(group) if grouped else 0
    final = os.path.join(directory, _name(epoch))
    partial = os.path.join(directory, ".partial-" + _name(epoch))
    if rank == 0:
        os.makedirs(directory, exist_ok=True)
        shutil.rmtree(partial, ignore_errors=True)  # left by a crash while writing this epoch
    if grouped:
        dist.barrier(group)
    model_state, optim_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optim": optim_state}
    if extra:
        state["extra"] = dict(extra)
    with warnings.catch_warnings():  # one process without a group: DCP says it assumes so
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.save(state, checkpoint_id=partial, process_group=group)
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
    if grouped:
        dist.barrier(group)
    return final


def read_record(path: str) -> dict:
    """The ``pyg_dynscale.json`` record of the checkpoint at ``path``.

    Raises:
        CheckpointDamagedError: the record is missing or not valid JSON.
        CheckpointMismatchError: another checkpoint format.
    """
    file = os.path.join(path, META_FILE)
    try:
        with open(file) as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _damaged(path, f"its record {file} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("run", {}), dict):
        raise _damaged(path, f"its record {file} is not a pyg_dynscale checkpoint record")
    if record.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointMismatchError(f"{path}: checkpoint format {record.get('format')!r}, this version reads "
                                      f"{CHECKPOINT_FORMAT}. Start without --resume or use a new --checkpoint-dir.",
                                      path)
    return record


def verify_checkpoint(path: str) -> None:
    """Check, without loading any tensor, that every file DCP's metadata of
    the checkpoint at ``path`` refers to is there and long enough (a missing
    or truncated shard is found before any work starts, not while loading).

    Raises:
        CheckpointDamagedError: naming the first missing or short file.
    """
    try:
        metadata = dcp.FileSystemReader(path).read_metadata()
        ends: dict = {}
        for info in metadata.storage_data.values():
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), int(info.offset) + int(info.length))
    except Exception as exc:  # a truncated or foreign .metadata file
        raise _damaged(path, f"its DCP metadata {os.path.join(path, '.metadata')} cannot be read "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    for name, end in sorted(ends.items()):
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise _damaged(path, f"its shard {file} is missing")
        size = os.path.getsize(file)
        if size < end:
            raise _damaged(path, f"its shard {file} is truncated ({size} bytes, the metadata needs {end})")


def saved_extra(path: str, prefix: str) -> dict:
    """Empty tensors, shaped and typed as saved, for every ``extra`` key of
    the checkpoint at ``path`` that starts with ``prefix`` (e.g. one rank's
    stale cache, ``"rank0/stale/"``, whose shapes only the checkpoint knows):
    pass them as :func:`load_checkpoint`'s ``extra`` to have them filled.

    Raises:
        CheckpointDamagedError: DCP's metadata cannot be read.
    """
    try:
        metadata = dcp.FileSystemReader(path).read_metadata()
    except Exception as exc:
        raise _damaged(path, f"its DCP metadata {os.path.join(path, '.metadata')} cannot be read "
                             f"({type(exc).__name__})") from None
    out = {}
    for fqn, info in metadata.state_dict_metadata.items():
        if fqn.startswith("extra.") and fqn[len("extra."):].startswith(prefix) and hasattr(info, "size"):
            out[fqn[len("extra."):]] = torch.empty(tuple(info.size), dtype=info.properties.dtype)
    return out


def check_run(path: str, run: dict, *, ignore: tuple = ()) -> dict:
    """The record of the checkpoint at ``path``, after checking that it was
    written by a run configured as ``run`` (fields in ``ignore`` and
    :data:`LATER_FIELDS` missing from the checkpoint's record are not
    compared).

    Raises:
        CheckpointMismatchError: naming every differing field with both values.
    """
    record = read_record(path)
    theirs = record.get("run", {})
    fields = tuple((k, theirs.get(k), run.get(k)) for k in sorted(set(run) | set(theirs))
                   if k not in ignore and not (k in LATER_FIELDS and k not in theirs) and theirs.get(k) != run.get(k))
    if fields:
        diff = "; ".join(f"{k}: checkpoint {a!r}, this run {b!r}" for k, a, b in fields)
        raise CheckpointMismatchError(
            f"the checkpoint {path} was written by another run ({diff}). "
            "Resume with the same model, data, scheme, number of processes and hyperparameters, or use a new "
            "--checkpoint-dir.", path, fields)
    return record


def load_checkpoint(path: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer, run: dict,
                    *, group: Optional[Any] = None, extra: Optional[dict] = None) -> dict:
    r"""Restore ``module`` and ``optimizer`` from the checkpoint at ``path``
    (on every rank) and return its record (``epoch``, ``progress``).
    ``extra``: ``{key: Tensor}`` filled in place with the saved ``extra`` of
    :func:`save_checkpoint` (the keys this rank asks for, shapes as saved).

    Raises:
        CheckpointMismatchError: the checkpoint's ``run`` differs from this
            run's (each differing field is named with both values).
        CheckpointDamagedError: its files cannot be read.
    """
    record = check_run(path, run)
    model_state, optim_state = get_state_dict(module, optimizer)
    state = {"model": model_state, "optim": optim_state}
    if extra:
        state["extra"] = extra
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            dcp.load(state, checkpoint_id=path, process_group=group)
    except Exception as exc:  # shards changed or damaged after verify_checkpoint: DCP's own (long) message
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise _damaged(path, f"loading it failed ({type(exc).__name__}: {first[:300]})") from None
    set_state_dict(module, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return record
