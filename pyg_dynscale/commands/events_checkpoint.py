r"""Checkpoints of ``pyg-dynscale train-events``: the run record a resume must
match, the line that names a mismatch's options, and what a resume loads
(the epoch loop and the lookup are :mod:`~pyg_dynscale.commands.job`'s).

A checkpoint is the DCP directory of :mod:`~pyg_dynscale.training.checkpoint`
(the same as ``pyg-dynscale train``'s): the trained modules and Adam's state
(replicated: written once), and the ``stream`` part of
:meth:`MemoryTrainer.state_dict <pyg_dynscale.ctdg.MemoryTrainer.state_dict>`
-- every memory copy with its message stores and neighbour loader (keys
``copy<c>/...``: the ranks of one copy write it once, each rank reads its own
copy back, so the same world size resumes it), and per rank the epoch counter,
the random state after the epoch's validation pass and the byte counters
(``rank<r>/...``). It is written after each epoch's validation, so a resumed
run draws and computes what the uninterrupted run does, bit for bit.

A checkpoint resumes on another device too (a CPU run's on CUDA and the
other way round): the loader asks it for the device-dependent keys (the CUDA
generator's state) only where it holds them (:func:`stream_template`).
"""
from __future__ import annotations

import argparse
import hashlib
from typing import Any, Optional


__all__ = ["events_record", "events_mismatch_message", "stream_template", "RECORD_OPTIONS",
           "event_placement_in_effect", "other_command_message", "RECORD_MODES"]

#: field of the run record -> the option that sets it (for messages)
RECORD_OPTIONS = {"model": "--model", "data": "PATH", "parallelism": "--parallelism", "world_size": "--nproc",
                  "dtype": "--dtype", "batch_size": "--batch-size", "lr": "--lr", "seed": "--seed",
                  "memory_dim": "--memory-dim", "time_dim": "--time-dim", "embedding_dim": "--embedding-dim",
                  "num_neighbors": "--num-neighbors", "static_memory": "--static-memory",
                  "val_ratio": "--val-ratio", "test_ratio": "--test-ratio", "prefetch": "--prefetch",
                  "memory_placement": "--memory-placement", "partition": "--partition",
                  "gradient_sync": "--gradient-sync", "micro_batches": "--micro-batches",
                  "event_placement": "--event-placement", "lr_scaling": "--lr-scaling"}
#: fields of the run record written only when they differ from these defaults (older checkpoints lack them)
RECORD_DEFAULTS = {"memory_placement": "replicated", "partition": None, "gradient_sync": "sync", "micro_batches": 1,
                   "event_placement": "whole", "lr_scaling": "none"}


def _fingerprint(data: Any, path: Optional[str] = None) -> str:
    """sha256 of the events (``src``, ``dst``, ``t``, ``msg``): the data a checkpoint was trained on. An
    event store directory ``path``: its ``meta.json``'s own digest, which covers every chunk's SHA-256
    (no process of ``--event-placement per_rank`` reads the whole store)."""
    import os

    from ..data.mapped import META_FILE, MappedStore

    if path is not None and os.path.isfile(os.path.join(path, META_FILE)):
        return "store:" + MappedStore(path, kind="events").meta["meta_sha256"][:32]
    h = hashlib.sha256()
    for name in ("src", "dst", "t", "msg"):
        x = getattr(data, name).detach().cpu().contiguous()
        h.update(f"{name}{tuple(x.shape)}{x.dtype}".encode())
        h.update(x.numpy().tobytes())
    return h.hexdigest()[:32]


def _partition_record(partition: Any) -> Optional[str]:
    """``--partition`` in the record: the method, or ``sha256:<digest>`` of an owner tensor (a file's path
    may change, its owners may not)."""
    if partition is None or isinstance(partition, str):
        return partition
    digest = hashlib.sha256(partition.detach().cpu().long().contiguous().numpy().tobytes()).hexdigest()[:32]
    return f"sha256:{digest}"


def event_placement_in_effect(args: argparse.Namespace, world: int) -> str:
    """``--event-placement`` as ``MemoryTrainer`` resolves it on ``world`` processes (``auto``: ``per_rank`` for a
    partitioned memory under several processes unless ``--partition flexbicut``; one process: ``whole``)."""
    from ..ctdg.options import check_event_placement

    given = getattr(args, "event_placement", "auto")
    if given == "per_rank" and getattr(args, "memory_placement", "replicated") == "replicated":
        return "whole"  # refused by train_events.check_args before any record is written
    placed = check_event_placement(given, memory_placement=getattr(args, "memory_placement", "replicated"),
                                   partition=getattr(args, "partition", None), world_size=world)
    return placed if world > 1 else "whole"


def events_record(args: argparse.Namespace, parallelism: tuple, data: Any, world: int,
                  partition: Any = None) -> dict:
    """What a checkpoint must have been written by to be resumed: the data, the
    model and schedule, the hyperparameters (JSON values). ``--memory-service``
    is not in it (the same numbers with and without). The memory placement,
    its ``partition`` (``MemoryTrainer``'s argument: a method or an owner
    tensor), the gradient sync and the micro-batches are in it when they
    differ from :data:`RECORD_DEFAULTS` (so older checkpoints still resume)."""
    micro = str(getattr(args, "micro_batches", "1"))  # checked by train_events.check_args
    extra = {"memory_placement": getattr(args, "memory_placement", "replicated"),
             "partition": _partition_record(partition), "gradient_sync": getattr(args, "gradient_sync", "sync"),
             "micro_batches": micro if micro == "auto" else int(micro),
             "event_placement": event_placement_in_effect(args, world),  # what the trainer holds: auto resolved
             # the rate scales with i only: "none" (older checkpoints') wherever it changes nothing
             "lr_scaling": getattr(args, "lr_scaling", "linear") if parallelism[0] > 1 else "none"}
    return {**{k: v for k, v in extra.items() if v != RECORD_DEFAULTS[k]},
            "mode": "events", "model": args.model, "data": _fingerprint(data, getattr(args, "path", None)),
            "parallelism": list(parallelism), "world_size": world, "dtype": args.dtype,
            "batch_size": args.batch_size, "lr": args.lr, "optimizer": "adam", "seed": args.seed,
            "memory_dim": args.memory_dim, "time_dim": args.time_dim, "embedding_dim": args.embedding_dim,
            "num_neighbors": args.num_neighbors, "static_memory": args.static_memory, "val_ratio": args.val_ratio,
            "test_ratio": args.test_ratio, "prefetch": bool(args.prefetch)}


def _fix(key: str, opt: str, value: Any) -> str:
    """The option as it reproduces the checkpoint's ``value``."""
    if isinstance(value, bool):  # a flag
        return opt if value else f"no {opt}"
    if key == "parallelism" and isinstance(value, list):
        value = ",".join(map(str, value))
    if key == "partition" and str(value).startswith("sha256:"):
        return f"--partition FILE holding the owner tensor the checkpoint was written with ({value})"
    if key == "partition" and value is None:
        return "--memory-placement replicated (no --partition)"
    return f"{opt} {value}"


#: a run record's ``mode`` -> the command that writes such checkpoints (``train``'s full-batch runs have none)
RECORD_MODES = {"events": "pyg-dynscale train-events", "windows": "pyg-dynscale train --lags",
                None: "pyg-dynscale train (full-batch, without --lags)"}


def other_command_message(exc: Any, ours: Optional[str]) -> Optional[str]:
    """The one line for a checkpoint written by another command (its record's ``mode`` is not ``ours``):
    its fields have nothing in common with this run's, so they are not listed (``None``: same command)."""
    theirs = dict((key, value) for key, value, _ in getattr(exc, "fields", ())).get("mode", ours)
    if theirs == ours or theirs not in RECORD_MODES:
        return None
    return (f"--resume: the checkpoint {exc.path} was written by {RECORD_MODES[theirs]}, not by "
            f"{RECORD_MODES[ours]}; resume it with that command, or give this run a new --checkpoint-dir.")


def events_mismatch_message(exc: Any, args: argparse.Namespace) -> str:
    """One line naming every differing field, its option and the checkpoint's value (or, for a checkpoint
    of another command, that command: :func:`other_command_message`)."""
    if not exc.fields:
        return f"--resume: {exc}"
    other = other_command_message(exc, "events")
    if other is not None:
        return other
    parts, fixes = [], []
    for key, theirs, ours in exc.fields:
        if key in RECORD_DEFAULTS:  # written only when not the default
            theirs = RECORD_DEFAULTS[key] if theirs is None else theirs
            ours = RECORD_DEFAULTS[key] if ours is None else ours
        opt = RECORD_OPTIONS.get(key)
        parts.append(f"{key}: checkpoint {theirs!r}, this run {ours!r}" + (f" ({opt})" if opt else ""))
        if key == "data":
            fixes.append("the same PATH and --format")
        elif key == "world_size":
            fixes.append(f"--nproc {theirs}")
        elif opt and opt != "PATH":
            fixes.append(_fix(key, opt, theirs))
    fix = f"resume with {', '.join(fixes)}" if fixes else "resume with the checkpoint's settings"
    return (f"--resume: the checkpoint {exc.path} was written by another run ({'; '.join(parts)}); {fix}, or use "
            "a new --checkpoint-dir.")


def stream_template(trainer: Any, path: str) -> dict:
    """The ``{key: Tensor}`` that :func:`~pyg_dynscale.training.checkpoint.load_checkpoint` fills
    from the checkpoint at ``path`` for the ``stream`` part of ``trainer.load_state_dict``: the keys of
    ``trainer.state_dict()["stream"]``, except its device-dependent ones (``trainer.device_rng_keys()``:
    the CUDA generator's state), which are asked for only where the checkpoint holds them -- DCP
    refuses a key the checkpoint lacks, so a CPU checkpoint would not load on CUDA otherwise.
    The trainer restores what is missing as ``load_state_dict`` states. Under
    ``--event-placement per_rank`` the owners' index keys are shaped as the checkpoint saved them."""
    from ..training.checkpoint import saved_extra

    stream = trainer.state_dict()["stream"]
    for key in trainer.device_rng_keys():
        stream.pop(key, None)
        stream.update({k: v for k, v in saved_extra(path, key).items() if k == key})
    # events per rank: an owner's part of the index (``copy<c>/owner<r>/index/...``) grows and shrinks
    # with the stream, so only the checkpoint knows its shapes
    for prefix in sorted({k[:k.index("/index/") + 7] for k in stream if "/index/" in k}):
        stream.update(saved_extra(path, prefix))
    return stream
