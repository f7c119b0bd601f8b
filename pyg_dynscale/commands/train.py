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
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Optional

from ..errors import CommandError

SCHEMA_VERSION = 1
FORMATS = ("auto", "pygt-json", "edgelist", "dynscale")
DTYPES = ("float32", "float64", "float16", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")
PROG = "pyg-dynscale train"
#: Options of the launcher only: stripped from the command line the workers get.
_LAUNCHER_OPTIONS = ("--nproc", "--max-restarts")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from ..nn.zoo import MODEL_NAMES, TARGETS
    from ..partition.partition import SCHEMES

    p = subparsers.add_parser(
        "train", help="train a dynamic GNN across processes (torchrun) and report the test metric and traffic",
        description="Distributed full-batch training of a dynamic GNN on a snapshot graph; parts = processes.",
    )
    p.add_argument("path", metavar="PATH",
                   help="dataset: PyGT JSON, a temporal edge list (.gz ok), a saved signal (.pt), or 'england_covid' "
                        "(embedded, no file)")
    p.add_argument("--format", choices=FORMATS, default="auto", help="file format (default: auto)")
    p.add_argument("--window", default=None, metavar="DURATION",
                   help="snapshot length for edge lists: seconds or a duration like 1d, 12h, 30min")
    p.add_argument("--target", choices=TARGETS, default="node",
                   help="node: regress y (edge lists: next snapshot's degree), MSE; link: predict next snapshot's "
                        "edges, ROC AUC (default: node)")
    p.add_argument("--model", choices=MODEL_NAMES, default="tgcn", help="model (default: tgcn)")
    p.add_argument("--scheme", choices=SCHEMES, default="pgc", help="partition scheme (default: pgc)")
    p.add_argument("--locality", action="store_true",
                   help="pts: ranks get contiguous ranges of a Cuthill-McKee vertex order (neighbours together: small "
                        "halos on the black-box path whatever the vertex ids)")
    p.add_argument("--nproc", type=int, default=None, metavar="N",
                   help="start N local processes through torch.distributed.run (omit under torchrun)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="K",
                   help="with --nproc: restart the workers up to K times after a failure (torchrun's policy; "
                        "add --resume to continue from the newest checkpoint)")
    p.add_argument("--epochs", type=int, default=50, help="training epochs in total (default: 50)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default: 0.01)")
    p.add_argument("--hidden", type=int, default=32, help="hidden width (default: 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the parameters and of PGC (default: 0)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="parameter dtype (default: float32)")
    p.add_argument("--recompute-every", type=int, default=None, metavar="B",
                   help="gradient checkpointing: keep the activations of B snapshots at a time and recompute them in "
                        "the backward (memory of one window instead of all snapshots; about one extra forward)")
    p.add_argument("--fusion", choices=("full", "none"), default="full",
                   help="full: one fused call per rank; none: one call and halo exchange per snapshot")
    p.add_argument("--stale", default="off", metavar="POLICY",
                   help="stale embedding cache (DGC 5.2): off (exact, default), static:<c> (theta = c*D), printed "
                        "(Eq. 6 as printed), intent (Eq. 6 sign-corrected), ramp, adaptive (the recommended one)")
    p.add_argument("--stale-kinds", default=None, metavar="KINDS",
                   help="exchange kinds the cache covers, comma-separated (default: spatial,temporal,redistribution; "
                        "adaptive: also readout)")
    p.add_argument("--stale-kind", action="append", default=[], metavar="KIND=POLICY",
                   help="a policy for one exchange kind, overriding --stale there (repeatable), e.g. temporal=static:0.3")
    p.add_argument("--stale-backward", choices=("skip", "send"), default="skip",
                   help="gradients of cached rows: skip (constants, default) or send (applied to the current rows)")
    p.add_argument("--stale-scope", choices=("local", "global"), default="local",
                   help="D = largest distance per sending rank (local, default) or over all ranks (global)")
    p.add_argument("--train-ratio", type=float, default=0.8, help="temporal split: first share trains (default: 0.8)")
    p.add_argument("--partition", default=None, metavar="FILE", help="use this saved partition of the training split")
    p.add_argument("--save-partition", default=None, metavar="FILE", help="save the training split's partition")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR", help="write checkpoints here")
    p.add_argument("--checkpoint-every", type=int, default=10, metavar="K",
                   help="checkpoint every K epochs and after the last (default: 10)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest complete checkpoint in --checkpoint-dir (none: start fresh)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: CUDA when available, else cpu (default); cuda: rank i of a machine on "
                        "cuda:(i %% GPUs), NCCL with one GPU per rank, gloo with pinned-host staging when ranks "
                        "outnumber GPUs")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per process (default: 1; more threads than free cores make small ops spin)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="collective timeout: a rank that stops answering fails the others after this long "
                        "(default: 120)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (rank 0) instead of text")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


# ---------------------------------------------------------------------- checks
def _fail(message: str) -> None:

    raise CommandError(message)


def check_args(args: argparse.Namespace) -> None:
    """Checks that need no data (run by the launcher and by every rank)."""
    import torch

    path = args.path
    if os.path.isdir(path):
        _fail(f"PATH '{path}' is a directory; give a dataset file.")
    if os.path.exists(path) and not os.access(path, os.R_OK):
        _fail(f"cannot read PATH '{path}' (permission denied).")
    if not os.path.exists(path):
        from ..data.loaders.pygt_json import canonical_dataset_name
        from ..errors import SignalValidationError

        try:
            name = canonical_dataset_name(path)
        except SignalValidationError:
            _fail(f"no such file: PATH '{path}' (and not the name of an embedded dataset such as 'england_covid').")
        if name != "england_covid":  # the only embedded one; the others' message would name load()'s cache_dir
            _fail(f"PATH '{path}' names the PyGT dataset '{name}', which is not embedded (only england_covid is) and "
                  f"never downloaded: download {name}.json from PyGT's repository and pass its path.")
    for name in ("epochs", "hidden", "threads", "checkpoint_every"):
        if getattr(args, name) < 1:
            _fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.nproc is not None and args.nproc < 1:
        _fail(f"--nproc must be >= 1, got {args.nproc}.")
    if args.max_restarts < 0:
        _fail(f"--max-restarts must be >= 0, got {args.max_restarts}.")
    if args.max_restarts and args.nproc is None:
        _fail("--max-restarts needs --nproc (under torchrun, pass --max-restarts to torchrun).")
    if not (math.isfinite(args.lr) and args.lr > 0):
        _fail(f"--lr must be a positive number, got {args.lr}.")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        _fail(f"--timeout must be a positive number of seconds, got {args.timeout}.")
    if not 0.0 < args.train_ratio < 1.0:
        _fail(f"--train-ratio must lie in (0, 1), got {args.train_ratio}.")
    if args.dtype in ("float16", "bfloat16"):
        _fail(f"--dtype {args.dtype} is not supported: the layers' sparse aggregation, GCN normalization and "
              "LSTM/GRU kernels on CPU need float32 or float64, and half-precision Adam updates would not match "
              "the single-process result. Use --dtype float32 (default) or float64.")
    # the launcher and every rank refuse a missing GPU before anything starts (the plan itself is per machine)
    plan_devices(args.device, torch.cuda.is_available(), torch.cuda.device_count(), 1)
    args.stale_config = _stale_config(args)
    from ..nn.zoo import BLACK_BOX_MODELS, RECOMPUTABLE_MODELS

    if args.locality and args.scheme != "pts":
        _fail(f"--locality orders the vertices of --scheme pts; it does not apply to --scheme {args.scheme}.")
    if args.recompute_every is not None:
        if args.recompute_every < 1:
            _fail(f"--recompute-every must be >= 1 snapshot, got {args.recompute_every}.")
        if args.model not in RECOMPUTABLE_MODELS:
            _fail(f"--recompute-every with --model {args.model}: windows of snapshots need a recurrent state and no "
                  f"BatchNorm; use one of {', '.join(RECOMPUTABLE_MODELS)}, or drop --recompute-every.")
        if args.fusion != "full":
            _fail("--recompute-every runs each window as one fused call: leave --fusion at full.")

    if args.model in BLACK_BOX_MODELS:
        if args.stale_config.enabled:
            _fail(f"--stale with --model {args.model}: the stale cache works on the decomposed path only, and "
                  f"{args.model} runs on the black-box path. Use --stale off.")
        if args.fusion != "full":
            _fail(f"--fusion {args.fusion} with --model {args.model}: fusion is a decomposed-path option; the "
                  "black-box path calls the cell once per snapshot. Leave --fusion at its default.")
    if args.model == "dysat" and args.hidden % 2:
        _fail(f"--hidden {args.hidden} with --model dysat: its 2 attention heads split the hidden width; use an even "
              f"--hidden such as {args.hidden + 1}.")
    if args.resume and not args.checkpoint_dir:
        _fail("--resume needs --checkpoint-dir DIR.")
    if args.window is not None:
        from ..data.loaders.edgelist import parse_window

        try:
            seconds = parse_window(args.window)
        except Exception as exc:
            _fail(f"--window: {exc}")
        if not (math.isfinite(seconds) and seconds >= 1e-6):
            _fail(f"--window must be a duration of at least a microsecond, got {args.window!r}.")
    # every file the run reads or writes, before anything loads, partitions or trains
    _check_data_file(args)
    _check_output_paths(args)
    _check_partition_file(args)
    if args.resume:
        _check_resume(args)


# ---------------------------------------------------------------- input files
_FORMAT_WORDS = {"pygt-json": "a PyGT JSON dataset", "edgelist": "a temporal edge list",
                 "dynscale": "a saved signal (DynamicGraphSignal.save)", "binary": "binary data"}


def _head(path: str, size: int = 65536) -> bytes:
    """The first ``size`` bytes of ``path``, decompressed when it is gzip."""
    import gzip
    import zlib

    with open(path, "rb") as f:
        raw = f.read(size)
    if raw[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                return f.read(size)
        except (OSError, EOFError, zlib.error):
            _fail(f"PATH '{path}': the gzip stream is corrupt or truncated; re-download or re-compress the file.")
    return raw


def _sniff(head: bytes) -> str:
    """The format ``head`` looks like: ``pygt-json``, ``dynscale`` (a torch.save
    zip archive), ``edgelist`` (text) or ``binary``."""
    if head[:2] == b"PK":
        return "dynscale"
    if head.lstrip()[:1] in (b"{", b"["):
        return "pygt-json"
    return "binary" if b"\0" in head else "edgelist"


def _check_data_file(args: argparse.Namespace) -> None:
    """``--format`` and ``--window`` against what ``PATH`` is, and an edge
    list's columns (the loader's own errors name options the CLI lacks)."""
    from ..data.loaders.auto import detect_format

    path, fmt = args.path, args.format
    if not os.path.exists(path):  # an embedded dataset name (check_args refused anything else)
        if fmt in ("edgelist", "dynscale"):
            _fail(f"--format {fmt}: PATH '{path}' is not a file but the name of an embedded PyGT dataset "
                  f"(pygt-json); drop --format {fmt}, or give the path of {_FORMAT_WORDS[fmt]}.")
        resolved, by_name = "pygt-json", True
    else:
        head = _head(path)
        looks = _sniff(head)
        if fmt != "auto" and looks != fmt:
            _fail(f"--format {fmt}: PATH '{path}' looks like {_FORMAT_WORDS[looks]}, not {_FORMAT_WORDS[fmt]}; "
                  + (f"use --format {looks} (or --format auto)." if looks != "binary" else
                     "check that PATH is the file you mean."))
        resolved = detect_format(path) if fmt == "auto" else fmt
        by_name = fmt == "auto" and resolved != looks
        if resolved == "edgelist":
            _check_edge_list_columns(path, head)
    if resolved == "edgelist" and args.window is None:
        _fail(f"--window is required to bin the edge list '{path}' into snapshots (e.g. --window 1d).")
    if resolved != "edgelist" and args.window is not None:
        how = "is" if fmt == "auto" and not by_name else "is read as"
        _fail(f"--window applies to temporal edge lists, and PATH '{path}' {how} {_FORMAT_WORDS[resolved]}, "
              "already in snapshots; drop --window"
              + (" (or add --format edgelist if it is an edge list)." if os.path.exists(path) else "."))


def _check_edge_list_columns(path: str, head: bytes) -> None:
    import re

    for number, line in enumerate(head.splitlines()[:1000], 1):
        text = line.strip()
        if not text or text[:1] in (b"%", b"#"):
            continue
        cols = len(re.split(rb"[\s,]+", text))
        if cols < 3:
            _fail(f"PATH '{path}': line {number} has {cols} column{'s' if cols != 1 else ''}, and a temporal edge "
                  "list needs 'source target ... time' (the time in the last column); add a time column to the "
                  "file (train reads the first two columns and the last).")
        return


def _readable_reason(exc: BaseException) -> str:
    """``exc``'s message, unless it repeats torch's advice to load with
    ``weights_only=False`` (unpickling an untrusted file runs its code)."""
    text = str(exc)
    unreadable = ("weights_only", "Weights only", "not a readable pyg_dynscale")  # read_archive's refusals
    return "" if any(u in text for u in unreadable) else f" ({text.splitlines()[0] if text else ''})"


def _check_partition_file(args: argparse.Namespace) -> None:
    if args.partition is None:
        return
    if os.path.isdir(args.partition):
        _fail(f"--partition '{args.partition}' is a directory; give a partition file (pyg-dynscale partition PATH "
              "--parts N --out FILE writes one).")
    if not os.path.isfile(args.partition):
        _fail(f"--partition: no such file '{args.partition}'; write one with pyg-dynscale partition PATH --parts N "
              "--out FILE, or drop --partition.")
    _read_partition(args.partition, "--partition", "re-create it with pyg-dynscale partition PATH --parts N --out "
                                                   "FILE, or drop --partition")


def _read_partition(path: str, what: str, fix: str, data: Any = None) -> Any:
    """:func:`load_partition` (made for ``data`` if given), with one-line
    errors naming ``what`` and ``fix``."""
    from ..errors import PartitionFormatError
    from ..partition.io import load_partition

    try:
        return load_partition(path, data)
    except PartitionFormatError as exc:
        reason = _readable_reason(exc)
        _fail(f"{what} '{path}' is not a readable pyg_dynscale partition file"
              + (reason or " (corrupt, truncated, or not written by save_partition: it is read without unpickling "
                           "objects)") + f"; {fix}.")


def _check_output_paths(args: argparse.Namespace) -> None:
    if args.save_partition is not None:
        path = args.save_partition
        if os.path.isdir(path):
            _fail(f"--save-partition '{path}' is a directory; give a file name such as "
                  f"{os.path.join(path, 'partition.pt')}.")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            _fail(f"--save-partition: the folder '{parent}' does not exist; create it first.")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            _fail(f"--save-partition: cannot write '{path}' (permission denied); choose a writable location.")
    if args.checkpoint_dir is not None:
        path = args.checkpoint_dir
        if os.path.exists(path) and not os.path.isdir(path):
            _fail(f"--checkpoint-dir '{path}' is a file, not a directory; give a directory (it is created if "
                  "missing), or move the file away.")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            _fail(f"--checkpoint-dir: the folder '{parent}' does not exist; create it first.")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            _fail(f"--checkpoint-dir: cannot write into '{path}' (permission denied); choose a writable directory.")


def _expected_world(args: argparse.Namespace) -> int:
    if _in_torchrun() and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return args.nproc if args.nproc is not None else 1


def _check_resume(args: argparse.Namespace) -> None:
    """The newest checkpoint, before the data loads: its record and files
    readable, and the fields of the run that need no data (model, width,
    hyperparameters, processes) equal to this run's; :func:`train` checks the
    rest (data fingerprint, scheme) before the processes connect."""
    from ..distributed.checkpoint import (CheckpointDamagedError, CheckpointMismatchError, check_run,
                                          latest_checkpoint, verify_checkpoint)

    found = latest_checkpoint(args.checkpoint_dir)
    if found is None:
        return  # rank 0 says that it starts fresh
    try:
        check_run(found[1], run_record(args, None, _expected_world(args), None), ignore=("signal", "scheme"))
        verify_checkpoint(found[1])
    except CheckpointMismatchError as exc:
        _fail(_mismatch_message(exc, args))
    except CheckpointDamagedError as exc:
        _fail(f"--resume: {exc}")
    saved = os.path.join(args.checkpoint_dir, "partition.pt")
    if args.partition is None and os.path.isfile(saved):
        _read_partition(saved, "--resume: the checkpoints' partition", "delete it (the run partitions again: the "
                        "same partition for the same data and --seed), or use a new --checkpoint-dir")


#: The option behind each field of the run record, for messages.
_RECORD_OPTIONS = {"model": "--model", "hidden": "--hidden", "target": "--target", "dtype": "--dtype",
                   "train_ratio": "--train-ratio", "scheme": "--scheme", "lr": "--lr", "stale": "--stale",
                   "world_size": "--nproc", "signal": "PATH", "loss": "--target"}


def _mismatch_message(exc: Any, args: argparse.Namespace) -> str:
    """One line naming every differing field, its option and the checkpoint's value."""
    if not exc.fields:  # another checkpoint format: its own message says what to do
        return f"--resume: {exc}"
    parts, fixes = [], []
    for key, theirs, ours in exc.fields:
        opt = _RECORD_OPTIONS.get(key)
        parts.append(f"{key}: checkpoint {theirs!r}, this run {ours!r}" + (f" ({opt})" if opt else ""))
        if key in ("model", "hidden", "target", "dtype", "train_ratio", "scheme", "lr"):
            fixes.append(f"{opt} {theirs}")
        elif key == "world_size":
            fixes.append(f"--nproc {theirs}" if args.nproc is not None else f"{theirs} process"
                         + ("es" if theirs != 1 else ""))
        elif key == "signal":
            fixes.append("the same PATH, --format and --window")
        elif key == "stale":
            fixes.append(f"the same --stale settings ({theirs})")
    fix = f"resume with {', '.join(fixes)}" if fixes else "resume with the checkpoint's settings"
    return (f"--resume: the checkpoint {exc.path} was written by another run ({'; '.join(parts)}); {fix}, or use "
            "a new --checkpoint-dir.")


def _stale_config(args: argparse.Namespace) -> Any:
    from ..distributed.stale import StaleConfig
    from ..errors import DynScaleError

    kinds = None if args.stale_kinds is None else tuple(k.strip() for k in str(args.stale_kinds).split(",") if k.strip())
    per_kind = []
    for item in args.stale_kind:
        kind, sep, spec = item.partition("=")
        if not sep:
            _fail(f"--stale-kind {item!r}: write KIND=POLICY, e.g. temporal=static:0.3.")
        per_kind.append((kind.strip(), spec.strip()))
    try:
        return StaleConfig.parse(args.stale, kinds=kinds, backward=args.stale_backward, scope=args.stale_scope,
                                 per_kind=tuple(per_kind))
    except DynScaleError as exc:  # name every stale option given: the error may be in any of them
        given = [f"--stale {args.stale}"] + ([f"--stale-kinds {args.stale_kinds}"] if args.stale_kinds is not None
                                              else []) + [f"--stale-kind {item}" for item in args.stale_kind]
        _fail(f"{' '.join(given)}: {exc}")


# ------------------------------------------------------------------- devices
@dataclass(frozen=True)
class DevicePlan:
    """Where the ranks of one machine train and how their process group moves rows.

    Attributes:
        devices: the device of each local rank (``"cpu"`` or ``"cuda:i"``).
        backend: the process group's backend, ``"gloo"`` or ``"nccl"``.
        staged: whether ranks share a GPU, so rows go through pinned host
            buffers over gloo (the trainer's ``"staged"`` transport).
        gpus: GPUs on the machine (0 on CPU).
    """

    devices: tuple[str, ...]
    backend: str
    staged: bool
    gpus: int = 0

    @property
    def exchange(self) -> str:
        """The trainer's transport: ``"direct"`` or ``"staged"``."""
        return "staged" if self.staged else "direct"

    def device(self, local_rank: int) -> str:
        return self.devices[local_rank % len(self.devices)]

    def describe(self) -> str:
        """``exchange: staged over gloo (3 ranks share 1 GPU)`` and the like."""
        ranks = len(self.devices)
        if self.staged:
            why = f"{ranks} ranks share {self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        elif self.gpus:
            why = "one GPU per rank"
        else:
            why = "CPU ranks"
        return f"exchange: {self.exchange} over {self.backend} ({why})"


def plan_devices(choice: str, cuda_available: bool, device_count: int, local_world_size: int) -> DevicePlan:
    r"""The devices and process-group backend of the ``local_world_size``
    ranks of one machine (pure: the caller passes what torch reports).

    ``cpu`` (or ``auto`` without a GPU): gloo. Otherwise local rank ``i``
    trains on ``cuda:(i % device_count)``: NCCL when every rank has a GPU of
    its own, else gloo with the staged exchange (NCCL refuses two ranks on
    one GPU).

    Raises:
        CommandError: ``choice`` is ``"cuda"`` and there is no usable GPU.
    """
    if choice not in DEVICES:
        raise ValueError(f"device choice {choice!r}: use one of {DEVICES}.")
    if local_world_size < 1:
        raise ValueError(f"local_world_size is {local_world_size}; a machine runs at least one rank.")
    has_gpu = bool(cuda_available) and device_count > 0
    if choice == "cuda" and not has_gpu:
        _fail("--device cuda: torch.cuda.is_available() is False (no GPU, or a CPU-only torch build); use "
              "--device cpu, or --device auto (CUDA when there is a GPU).")
    if choice == "cpu" or not has_gpu:
        return DevicePlan(("cpu",) * local_world_size, "gloo", False)
    devices = tuple(f"cuda:{i % device_count}" for i in range(local_world_size))
    if local_world_size <= device_count:
        return DevicePlan(devices, "nccl", False, device_count)
    return DevicePlan(devices, "gloo", True, device_count)


def _machine_plan(args: argparse.Namespace, local_world_size: int) -> DevicePlan:
    import torch

    return plan_devices(args.device, torch.cuda.is_available(), torch.cuda.device_count(), local_world_size)


def _bind_device(device: str) -> Optional[Any]:
    """Make ``device`` this process's current GPU before the process group
    exists (NCCL and the object collectives use the current device); the
    ``device_id`` for an NCCL group, else ``None``."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    torch.cuda.set_device(dev)
    return dev


# ------------------------------------------------------------------ launching
def _in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MASTER_ADDR" in os.environ)


def worker_argv(argv: list) -> list:
    """``argv`` without the launcher-only options (:data:`_LAUNCHER_OPTIONS`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in _LAUNCHER_OPTIONS:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in _LAUNCHER_OPTIONS):
            continue
        out.append(a)
    return out


def _launch(args: argparse.Namespace) -> int:
    """Start ``--nproc`` workers with torchrun's machinery and wait for them.

    Ends with one line on stderr when the job fails: the failing rank and its
    cause (a rank that stopped answering rather than the peer that timed out
    waiting for it), or the signal that stopped the launcher (exit status
    ``128 + signal``, no traceback)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    from ..distributed.failure import LAUNCHER_PID_ENV

    targs = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(args.nproc), "--max-restarts", str(args.max_restarts),
         "--monitor-interval", "0.2", "-m", "pyg_dynscale"] + worker_argv(args._argv))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    # the workers check that their parent is still this process once their parent-death signal is set
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    _quiet_torchrun_logs()
    try:
        torchrun(targs)
    except ChildFailedError as exc:
        rank, exitcode, cause = _job_failure(exc)
        print(f"{PROG}: error: {cause}" if rank is None else
              f"{PROG}: error: rank {rank} failed (exit code {exitcode}): {cause}", file=sys.stderr)
        return 2 if exitcode == 2 else 1
    except SignalException as exc:  # torchrun's handler raises it in this thread; it has stopped the workers
        name = _signal_name(int(exc.sigval))
        print(f"{PROG}: error: stopped by {name}: the launcher stopped its {args.nproc} worker(s); "
              "with --checkpoint-dir DIR, rerun with --resume to continue from the newest checkpoint.",
              file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


class _DropAgentWarnings:
    """A logging filter: torchrun's agent logs every step of a stop as a
    warning ("Received 15 death signal", "Sending process ... closing signal
    SIGTERM"); the launcher prints the one line that says what happened."""

    def filter(self, record: Any) -> bool:
        import logging

        return not (record.name.startswith("torch.distributed.elastic") and record.levelno < logging.ERROR)


def _quiet_torchrun_logs() -> None:
    import logging

    for name in ("torch", "torch.distributed"):  # the handlers torch attaches (records propagate to them)
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, _DropAgentWarnings) for f in handler.filters):
                handler.addFilter(_DropAgentWarnings())


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _job_failure(exc: Any) -> tuple[Optional[int], int, str]:
    """``(rank, exit code, cause)`` of a failed job: torchrun's first failure,
    unless a rank reported that another one stopped answering (the first
    failure is then the rank that timed out waiting, or the silent rank its
    peer killed; the cause is the silent rank: ``rank`` is ``None`` and
    ``cause`` names it)."""
    import re

    first_rank, first = exc.get_first_failure()
    for rank, failure in sorted(exc.failures.items()):
        m = re.search(r"RankNotAnsweringError: (rank (\d+) stopped answering.*)", _failure_cause(failure))
        if m:
            return None, failure.exitcode, f"{m.group(1)} (noticed by rank {rank})"
    return first_rank, first.exitcode, _failure_cause(first)


def _failure_cause(failure: Any) -> str:
    msg = failure.message
    if isinstance(msg, dict):
        msg = msg.get("message", json.dumps(msg))
    text = str(msg).strip()
    if failure.exitcode < 0:
        return f"killed by signal {_signal_name(-failure.exitcode)}"
    if not text or text.startswith("To enable traceback"):
        return "no error recorded (see the rank's output above)"
    return text.splitlines()[0]


def run(args: argparse.Namespace) -> int:
    check_args(args)
    if _in_torchrun():
        return _worker(args)
    if args.nproc is not None:
        return _launch(args)
    import torch.distributed as dist

    if dist.is_initialized():
        _fail("a torch.distributed process group is already initialized in this process; run "
              "`pyg-dynscale train` in its own process (or under torchrun).")
    plan = _machine_plan(args, 1)
    device = plan.device(0)
    store = dist.HashStore()

    def init() -> None:
        device_id = _bind_device(device)
        dist.init_process_group(plan.backend, store=store, rank=0, world_size=1,
                                **({"device_id": device_id} if plan.backend == "nccl" else {}))

    try:
        report = train(args, 0, 1, init, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    _print_report(args, report, plan)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """One rank under torchrun: train, and on failure say which rank failed
    and why (publishing the cause for the others) before exiting non-zero."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..distributed.failure import install_stop_report, is_transport_error, publish_failure, say
    from ..errors import DynScaleError

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    args._rank_label = f" (rank {rank})"
    install_stop_report(rank, world, PROG)
    backend_timeout = timedelta(seconds=args.timeout)
    args._stop_heartbeat = lambda: None
    try:
        if args.nproc is not None and args.nproc != world:
            _fail(f"--nproc {args.nproc} differs from torchrun's world size {world}; drop --nproc under torchrun.")
        # torchrun sets LOCAL_RANK / LOCAL_WORLD_SIZE; a hand-made environment without them is taken as one
        # machine (overestimating the local ranks only picks the staged exchange, never two ranks per GPU on NCCL)
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        plan = _machine_plan(args, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
        device = plan.device(local_rank)

        def init() -> None:
            from ..distributed.failure import start_heartbeat

            _init_torchrun_group(rank, world, backend_timeout, plan.backend, device)
            # from here on a rank that stops answering can be told from one that is only slow
            args._stop_heartbeat = start_heartbeat(rank)

        report = train(args, rank, world, init, device)
        if rank == 0:
            _print_report(args, report, plan)
        return 0
    except (DynScaleError, OSError, ValueError) as exc:
        if dist.is_initialized() and is_transport_error(exc):
            return _report_runtime_failure(rank, world, exc, args.timeout)
        publish_failure(rank, f"{type(exc).__name__}: {exc}")
        ErrorHandler().record_exception(exc)
        say(f"{PROG}: error (rank {rank}): {exc}")
        return 2
    except Exception as exc:
        return _report_runtime_failure(rank, world, exc, args.timeout)
    finally:
        args._stop_heartbeat()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _init_torchrun_group(rank: int, world: int, timeout: timedelta, backend: str = "gloo",
                         device: str = "cpu") -> None:
    """``init_process_group`` (``backend``, this rank on ``device``) under
    torchrun, in a store namespace of its own per restart attempt: with
    torchrun's shared agent store (the default) the keys of a failed attempt
    survive, and gloo (or NCCL's id exchange) would meet the dead workers'
    entries published there."""
    import torch.distributed as dist

    device_id = _bind_device(device)
    extra = {"device_id": device_id} if backend == "nccl" else {}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout, **extra)
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                         timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"pyg_dynscale/attempt_{attempt}", base)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **extra)


def _report_runtime_failure(rank: int, world: int, exc: BaseException, timeout: Optional[float] = None) -> int:
    """A failure during training: when ``exc`` only says that a peer is gone
    or timed out, name the rank that published a failure, or the rank that
    stopped answering (and end it if it runs here: it cannot act on
    torchrun's ``SIGTERM``); else publish and report ours."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..distributed.failure import (HEARTBEAT_SECONDS, SILENT_BEATS, RankNotAnsweringError, diagnose_peers,
                                       is_transport_error, launcher_gone, local_pid, publish_failure,
                                       report_launcher_gone, say)

    if launcher_gone():  # a peer ended on the parent-death signal first; the store died with the launcher
        report_launcher_gone(PROG, rank)
    if is_transport_error(exc):
        other, silent = diagnose_peers(rank, world)
        if other is not None:
            say(f"{PROG} (rank {rank}): stopping: rank {other[0]} failed: {other[1]}")
            return 1
        if silent:
            waited = f"--timeout {timeout:g} s" if timeout is not None else "the collective timeout"
            detail = (f"no heartbeat for {SILENT_BEATS * HEARTBEAT_SECONDS:g} s after rank {rank} waited {waited} "
                      "for it (stopped, hung, or its machine is gone)")
            here = {r: pid for r in silent if (pid := local_pid(r)) is not None}
            if here:
                detail += f"; ending it with SIGKILL (pid {', '.join(map(str, here.values()))})"
            # published, recorded and printed before the kill: torchrun stops this rank as soon as it sees the
            # silent one die, and the others must read the cause by then
            for r in silent:
                publish_failure(r, str(RankNotAnsweringError(r, detail)))
            err = RankNotAnsweringError(silent[0], detail)
            ErrorHandler().record_exception(err)
            say(f"{PROG} (rank {rank}): stopping: {err}")
            for pid in here.values():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            # no teardown: destroying a process group whose peer is stopped mid-collective can wait on it (and
            # costs ~1 s on a busy machine); the cause is recorded and printed, nothing else is left to flush
            sys.stdout.flush()
            os._exit(1)
    cause = f"{type(exc).__name__}: {exc}"
    publish_failure(rank, cause)
    ErrorHandler().record_exception(exc)
    traceback.print_exc()
    say(f"{PROG}: error (rank {rank}): {cause}")
    return 1


# ------------------------------------------------------------------- the job
def _load_signal(args: argparse.Namespace) -> Any:
    from ..data.loaders import load
    from ..data.loaders.auto import detect_format
    from ..errors import DynScaleError, SignalValidationError

    fmt = args.format
    if fmt == "auto" and os.path.exists(args.path):
        fmt = detect_format(args.path)
    elif fmt == "auto":
        fmt = "pygt-json"  # an embedded dataset name
    try:
        if fmt == "edgelist":  # check_args refused an edge list without --window
            return load(args.path, format=fmt, window=args.window,
                        target="link" if args.target == "link" else "degree", degree_transform="log1p")
        return load(args.path, format=fmt, window=args.window)
    except SignalValidationError as exc:  # the loader names its arguments; say which option or file it was
        _fail(_signal_error(exc, args))
    except DynScaleError as exc:
        reason = _readable_reason(exc)
        if not reason:  # an archive torch refused to unpickle: never suggest weights_only=False
            _fail(f"PATH '{args.path}' is not a readable pyg_dynscale signal file (corrupt, truncated, or not written "
                  "by DynamicGraphSignal.save: it is read without unpickling objects); re-create it with "
                  "DynamicGraphSignal.save(), or pass the original dataset file.")
        _fail(str(exc) if args.path in str(exc) else f"PATH '{args.path}': {exc}")


def _signal_error(exc: Any, args: argparse.Namespace) -> str:
    """A loader's or a split's :class:`SignalValidationError` as one line that
    names the option (``--window``, ``--train-ratio``) or ``PATH``."""
    field, problem = getattr(exc, "field", ""), getattr(exc, "problem", str(exc))
    if field == "window":
        fix = ("use a smaller --window: the targets need a next snapshot" if "next snapshot" in problem else
               "use a longer --window, e.g. 1h or 1d")
        return f"--window {args.window}: {problem} Fix: {fix}."
    if field == "train_ratio":
        return (f"--train-ratio {args.train_ratio}: {problem} Fix: choose a ratio that leaves at least one snapshot "
                "for training and one for the test.")
    return f"PATH '{args.path}': {exc}"


def _check_target(signal: Any, args: argparse.Namespace) -> None:
    if args.target == "link" and "edge_label_index" not in signal.extra_keys:
        _fail(f"--target link needs link labels (edge_label_index / edge_label), and '{args.path}' has none; "
              "PyGT datasets are node regression: use --target node, or a temporal edge list for links.")
    if args.target == "node" and signal.y is None:
        _fail(f"--target node needs node targets y, and '{args.path}' has none; use --target link.")


def _partition(signal: Any, scheme: str, world: int, pattern: Any, args: argparse.Namespace) -> Any:
    from ..partition.algorithms.dispatch import partition

    opts = {"threads": args.threads} if scheme == "pgc" else {}
    if scheme == "pts" and args.locality:
        opts["locality"] = True
    return partition(signal, scheme, world, pattern, seed=args.seed, **opts)


def _loss_name(target: str) -> str:
    return "bce_link" if target == "link" else "mse"  # as nn.zoo.build_model chooses it


def run_record(args: argparse.Namespace, fingerprint: Optional[str], world: int, scheme: Optional[str]) -> dict:
    """What a checkpoint must have been written by to be resumed: the data
    and set-up, and the training hyperparameters. Resuming restores the
    optimizer's state, learning rate included, so a run with another
    ``--lr`` (or loss, optimizer, stale policy) would silently not be the run
    it reports: it is refused, naming the field."""
    return {"model": args.model, "hidden": args.hidden, "target": args.target, "dtype": args.dtype,
            "signal": fingerprint, "world_size": world, "scheme": scheme, "train_ratio": args.train_ratio,
            "lr": args.lr, "optimizer": "adam", "loss": _loss_name(args.target),
            "stale": args.stale_config.describe() if args.stale_config.enabled else "off"}


def train(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None],
          device: str = "cpu") -> dict:
    r"""The job of one rank on ``device`` (``init_process_group`` binds it and
    creates the group): returns the report (the same on every rank but
    ``device``, this rank's)."""
    import torch
    import torch.distributed as dist
    from tqdm.auto import tqdm

    from ..distributed import DistributedTrainer
    from ..distributed.checkpoint import (CheckpointDamagedError, CheckpointMismatchError, check_run,
                                          latest_checkpoint, load_checkpoint, save_checkpoint)
    from ..errors import PartitionError, SignalValidationError
    from ..nn.zoo import build_model, partition_pattern
    from ..partition.io import save_partition
    from ..partition.partition import SCHEMES
    from ..runtime.metrics import roc_auc

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    # ---- data and everything that can be checked before the processes connect
    signal = _load_signal(args)
    if args.model == "dcrnn":  # PyGT's DConv is local (splittable) on edges sorted by (target, source)
        signal = signal.sort_edges()
    _check_target(signal, args)
    try:
        train_sig, test_sig = signal.split(args.train_ratio)
    except SignalValidationError as exc:
        _fail(_signal_error(exc, args))
    for name, s in (("training", train_sig), ("test", test_sig)):
        if world > s.num_vertex_time_nodes:
            _fail(f"--nproc {world} is larger than the {s.num_vertex_time_nodes} vertex-time nodes of the {name} "
                  f"split: use at most {s.num_vertex_time_nodes} processes.")
    part = None
    if args.partition is not None:
        try:
            part = _read_partition(args.partition, "--partition", "re-create it with pyg-dynscale partition PATH "
                                   "--parts N --out FILE, or drop --partition", train_sig)
        except PartitionError as exc:
            _fail(f"--partition {args.partition}: {exc} (partitions are made for the training split of PATH "
                  f"with --train-ratio {args.train_ratio}).")
        if part.num_parts != world:
            _fail(f"--partition {args.partition} has {part.num_parts} parts but {world} processes train; "
                  f"partition into {world} parts or start {part.num_parts} processes.")
    scheme = part.scheme if part is not None else args.scheme
    record = run_record(args, train_sig.fingerprint(), world, scheme)
    resume_from = None
    if args.resume:
        found = latest_checkpoint(args.checkpoint_dir)
        if found is not None:
            try:
                check_run(found[1], record)  # before the processes connect: the same error on every rank
            except CheckpointMismatchError as exc:
                _fail(_mismatch_message(exc, args))
            except CheckpointDamagedError as exc:
                _fail(f"--resume: {exc}")
            resume_from = found
        elif rank == 0:  # said once, where the report is printed
            print(f"{PROG}: --resume: no complete checkpoint in '{args.checkpoint_dir}' yet; starting fresh at epoch "
                  f"1 of {args.epochs}.", file=sys.stderr, flush=True)
    saved_part = os.path.join(args.checkpoint_dir, "partition.pt") if args.checkpoint_dir else None
    if part is None and resume_from is not None and os.path.isfile(saved_part):
        try:  # the exact partition of the interrupted run
            part = _read_partition(saved_part, "--resume: the checkpoints' partition", "delete it, or use a new "
                                   "--checkpoint-dir", train_sig)
        except PartitionError as exc:
            _fail(f"--resume: the checkpoints' partition '{saved_part}' was made for other data ({exc}); resume with "
                  "the same PATH and --train-ratio, or use a new --checkpoint-dir.")
    # ---- processes connect
    init_process_group()
    torch.manual_seed(args.seed)
    model, head, loss = build_model(args.model, signal.num_node_features, args.hidden,
                                    num_snapshots=train_sig.num_snapshots, num_vertices=signal.num_vertices,
                                    target=args.target)
    # built on the host from the seed, then moved: every device starts from the same parameters
    model = model.to(device=device, dtype=dtype)
    head = head.to(device=device, dtype=dtype) if head is not None else None
    pattern = partition_pattern(model, args.model, signal.num_node_features, args.hidden,
                                torch.empty((), dtype=dtype).element_size())
    # Every rank partitions (deterministic for a seed; DistributedTrainer checks that the ranks agree): no
    # rank waits in a collective while another one partitions, which can take longer than --timeout (e.g.
    # the first PGC call on a fresh install compiles its kernels).
    if part is None:
        part = _partition(train_sig, args.scheme, world, pattern, args)
    test_part = _partition(test_sig, part.scheme if part.scheme in SCHEMES else "pss", world, pattern, args)
    if rank == 0:
        if args.save_partition:
            save_partition(part, args.save_partition)
        if saved_part is not None and not os.path.isfile(saved_part):
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            save_partition(part, saved_part)
    # backend "auto": direct over NCCL (one GPU per rank) or gloo (CPU), staged for CUDA ranks over gloo
    trainer = DistributedTrainer(model, train_sig, part, head=head, loss=loss, lr=args.lr, fusion=args.fusion,
                                 stale=args.stale_config, checkpoint_every=args.recompute_every, device=device,
                                 backend="auto")
    modules = torch.nn.ModuleDict({"model": model, **({"head": head} if head is not None else {})})
    progress: dict = {"losses": [], "epoch_seconds": [], "bytes_measured": {}, "bytes_predicted": {},
                      "stale_factor": [], "stale_fresh_fraction": []}
    start = 0
    if resume_from is not None:
        # DCP loads into the state dict's existing tensors, on the model's device: a checkpoint written on
        # another device (CPU <-> CUDA) resumes here too
        try:
            progress = load_checkpoint(resume_from[1], modules, trainer.optimizer, record)["progress"]
        except CheckpointDamagedError as exc:
            _fail(f"--resume: {exc}")
        start = resume_from[0]
        # the optimizer state carries its learning rate: a record written before it held "lr" is checked here
        restored = trainer.optimizer.param_groups[0]["lr"]
        if not math.isclose(restored, args.lr, rel_tol=1e-9):
            _fail(f"--resume: the checkpoint {resume_from[1]} trained with lr {restored!r} (restored with its "
                  f"optimizer state), this run asks for --lr {args.lr!r}; resume with --lr {restored!r}, or use a "
                  "new --checkpoint-dir.")
    checkpoints = []
    bar = tqdm(range(start, args.epochs), initial=start, total=args.epochs, desc=f"{args.model} x{world}",
               unit="epoch", disable=rank != 0 or args.no_progress, file=sys.stderr, mininterval=0.5)
    for epoch in bar:
        loss_value = trainer.train_epoch()
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"the training loss is {loss_value} at epoch {epoch + 1}; lower --lr or use "
                                     "--dtype float64.")
        traffic = trainer.traffic()
        progress["losses"].append(loss_value)
        progress["epoch_seconds"].append(_max_over_ranks(trainer.transport, trainer.epoch_seconds[-1]))
        for key in ("measured", "predicted"):
            for kind, value in traffic[key].items():
                progress[f"bytes_{key}"].setdefault(kind, []).append(int(value))
        if trainer.stale is not None:
            progress["stale_factor"].append(trainer.stale.history[-1]["factor"])
            progress["stale_fresh_fraction"].append(trainer.stale.fresh_fraction(trainer.comm.group))
        bar.set_postfix(loss=f"{loss_value:.4f}", refresh=False)
        done = epoch + 1
        if args.checkpoint_dir and (done % args.checkpoint_every == 0 or done == args.epochs):
            checkpoints.append(save_checkpoint(args.checkpoint_dir, done, modules, trainer.optimizer, record, progress))
    bar.close()
    cuda_peak = _peak_memory_per_rank(trainer.transport, trainer.device, rank, world)
    # ---- test metric on the later snapshots (from a zero state, as FusedTrainer.evaluate)
    evaluator = DistributedTrainer(model, test_sig, test_part, head=head, loss=loss, fusion=args.fusion,
                                   device=device, backend="auto")
    if loss == "bce_link":
        scores, labels = evaluator.link_scores()  # on the device
        everyone: list = [None] * world
        dist.all_gather_object(everyone, (scores.detach().cpu().double().tolist(),
                                          labels.detach().cpu().double().tolist()))
        metric_name = "auc"
        test_metric = roc_auc(torch.tensor(sum((e[0] for e in everyone), [])),
                              torch.tensor(sum((e[1] for e in everyone), [])))
    else:
        metric_name, test_metric = "mse", evaluator.evaluate()
    final = trainer.traffic()
    return {
        "schema_version": SCHEMA_VERSION, "path": args.path, "model": args.model, "target": args.target,
        "scheme": part.scheme, "world_size": world, "dtype": args.dtype, "hidden": args.hidden,
        "epochs": args.epochs, "fusion": args.fusion, "seed": args.seed,
        # what the run used: the optimizer's learning rate after any resume (not just the option), where it
        # resumed from
        "lr": float(trainer.optimizer.param_groups[0]["lr"]), "optimizer": "adam", "loss": loss,
        "resumed_from": resume_from[1] if resume_from else None,
        "locality": bool(part.meta.get("locality", False)), "recompute_every": args.recompute_every, "stale": args.stale_config.describe()
        if args.stale_config.enabled else "off", "stale_factor": progress.get("stale_factor", []),
        "stale_fresh_fraction": progress.get("stale_fresh_fraction", []),
        "snapshots": {"train": train_sig.num_snapshots, "test": test_sig.num_snapshots},
        "vertex_time_nodes": train_sig.num_vertex_time_nodes,
        "losses": progress["losses"], "test_metric": test_metric, "test_metric_name": metric_name,
        "epoch_seconds": progress["epoch_seconds"],
        "bytes_measured": progress["bytes_measured"], "bytes_predicted": progress["bytes_predicted"],
        "load_bytes": final["load"], "partition_seconds": float(part.seconds),
        "partition_meta": {k: v for k, v in part.meta.items() if k in ("winner", "start", "cap", "coarsened")},
        "setup_seconds": trainer.setup_seconds, "resumed_from_epoch": resume_from[0] if resume_from else None,
        "checkpoints": checkpoints, "total_seconds": time.perf_counter() - t_start,
        "device": str(trainer.device), "backend": trainer.transport.backend, "exchange": trainer.transport.name,
        "cuda_peak_memory_bytes": cuda_peak,
    }


def _max_over_ranks(transport: Any, value: float) -> float:
    """The slowest rank's value (an epoch lasts until its last rank is done);
    reduced on the host (an NCCL group moves CUDA tensors only)."""
    import torch
    import torch.distributed as dist

    return float(transport.all_reduce_host(torch.tensor([value], dtype=torch.float64), op=dist.ReduceOp.MAX))


def _peak_memory_per_rank(transport: Any, device: Any, rank: int, world: int) -> list:
    """``torch.cuda.max_memory_allocated`` of every rank's device (``None``
    for CPU ranks), in rank order (a collective)."""
    import torch

    mine = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
    slots = torch.zeros(world, dtype=torch.int64)
    slots[rank] = mine  # every other rank adds 0 here: the sum is each rank's own value
    return [None if v < 0 else int(v) for v in transport.all_reduce_host(slots).tolist()]


# -------------------------------------------------------------------- output
def _print_report(args: argparse.Namespace, r: dict, plan: Optional[DevicePlan] = None) -> None:
    if args.json:
        print(json.dumps(r, allow_nan=False), flush=True)
        return
    from ..partition.metrics import format_bytes

    secs = r["epoch_seconds"]
    steady = secs[1:] or secs
    kinds = ("spatial", "temporal", "redistribution", "readout", "total")
    m, p = r["bytes_measured"], r["bytes_predicted"]
    lines = [
        f"{r['model']} on {r['path']}: {r['world_size']} process(es), {r['scheme']}, {r['dtype']}, "
        f"{r['snapshots']['train']} train / {r['snapshots']['test']} test snapshots",
        f"  device            {r['device']} (rank 0), "
        + (plan.describe() if plan is not None else f"exchange: {r['exchange']} over {r['backend']}"),
        f"  final train loss  {r['losses'][-1]:.6f}",
        f"  test {r['test_metric_name'].upper():<12} {r['test_metric']:.6f}   (later {r['snapshots']['test']} snapshots)",
        f"  epoch time        {sum(steady) / len(steady) * 1e3:.1f} ms (mean after the first; slowest rank)",
        f"  partitioning      {r['partition_seconds']:.3f} s",
        *([f"  resumed from      epoch {r['resumed_from_epoch']} ({r['resumed_from']}), lr {r['lr']:g}"]
          if r["resumed_from_epoch"] is not None else []),
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
