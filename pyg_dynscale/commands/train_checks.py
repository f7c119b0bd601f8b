"""``pyg-dynscale train``'s input checks: every bad option or file is one line
that names it, found before any work."""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any, Optional

from .launch import plan_devices
from .job import check_checkpoint_options, check_launch_options, fail, in_torchrun, resumable_checkpoint
from .train_options import REFUSED_DTYPES, dtype_refusal, resolve_defaults


# ---------------------------------------------------------------------- checks
def check_path(args: argparse.Namespace) -> None:
    """PATH: a readable file or the embedded dataset's name. Runs before
    anything imports torch (``train.run``), so that a missing file is reported
    at once; only a bare name that may be a dataset's loads the loaders."""
    path = args.path
    if os.path.isdir(path):
        fail(f"PATH '{path}' is a directory; give a dataset file.")
    if os.path.exists(path) and not os.access(path, os.R_OK):
        fail(f"cannot read PATH '{path}' (permission denied).")
    if not os.path.exists(path):
        if os.sep in path or (os.altsep and os.altsep in path):  # a folder in it: never a dataset's name
            fail(f"no such file: PATH '{path}' (and not the name of an embedded dataset such as 'england_covid').")
        from ..data.loaders.pygt_json import canonical_dataset_name
        from ..errors import SignalValidationError

        try:
            name = canonical_dataset_name(path)
        except SignalValidationError:
            fail(f"no such file: PATH '{path}' (and not the name of an embedded dataset such as 'england_covid').")
        if name != "england_covid":  # the only embedded one; the others' message would name load()'s cache_dir
            fail(f"PATH '{path}' names the PyGT dataset '{name}', which is not embedded (only england_covid is) and "
                  f"never downloaded: download {name}.json from PyGT's repository and pass its path.")


def check_args(args: argparse.Namespace) -> None:
    """Checks that need no data (run by the launcher and by every rank)."""
    check_path(args)
    import torch

    resolve_defaults(args)  # the API's defaults for the options left unset (train_options)

    for name in ("epochs", "hidden", "threads", "checkpoint_every", "feature_lags"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    check_launch_options(args)
    if not (math.isfinite(args.lr) and args.lr > 0):
        fail(f"--lr must be a positive number, got {args.lr}.")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        fail(f"--timeout must be a positive number of seconds, got {args.timeout}.")
    if not 0.0 < args.train_ratio < 1.0:
        fail(f"--train-ratio must lie in (0, 1), got {args.train_ratio}.")
    if args.dtype in REFUSED_DTYPES:  # the parser refuses them already; a Namespace made in Python too
        fail(f"--dtype {dtype_refusal(args.dtype)}")
    # the launcher and every rank refuse a missing GPU before anything starts (the plan itself is per machine)
    plan_devices(args.device, torch.cuda.is_available(), torch.cuda.device_count(), 1)
    args.stale_config = _stale_config(args)
    _check_windows(args)
    check_model_options(args)
    from ..nn.zoo import BLACK_BOX_MODELS, RECOMPUTABLE_MODELS

    if args.locality and args.scheme != "pts":
        fail(f"--locality orders the vertices of --scheme pts; it does not apply to --scheme {args.scheme}"
              + (" (auto compares pts with and without locality): add --scheme pts." if args.scheme == "auto" else "."))
    if args.recompute_every is not None:
        if args.recompute_every < 1:
            fail(f"--recompute-every must be >= 1 snapshot, got {args.recompute_every}.")
        if args.user_model is None and args.model not in RECOMPUTABLE_MODELS:
            fail(f"--recompute-every with --model {args.model}: windows of snapshots need a recurrent state and no "
                  f"BatchNorm; use one of {', '.join(RECOMPUTABLE_MODELS)}, or drop --recompute-every.")
        if args.fusion != "full":
            fail("--recompute-every runs each window as one fused call: leave --fusion at full.")

    if args.model in BLACK_BOX_MODELS:
        if args.fusion != "full":
            fail(f"--fusion {args.fusion} with --model {args.model}: fusion is a decomposed-path option; the "
                  "black-box path calls the cell once per snapshot. Leave --fusion at its default.")
    if args.model == "dysat" and args.hidden % 2:
        fail(f"--hidden {args.hidden} with --model dysat: its 2 attention heads split the hidden width; use an even "
              f"--hidden such as {args.hidden + 1}.")
    if args.resume and not args.checkpoint_dir:
        fail("--resume needs --checkpoint-dir DIR.")
    if args.window is not None:
        from ..data.loaders.edgelist import parse_window

        try:
            seconds = parse_window(args.window)
        except Exception as exc:
            fail(f"--window: {exc}")
        if not (math.isfinite(seconds) and seconds >= 1e-6):
            fail(f"--window must be a duration of at least a microsecond, got {args.window!r}.")
    # every file the run reads or writes, before anything loads, partitions or trains
    _check_data_file(args)
    _check_output_paths(args)
    _check_partition_file(args)
    if args.resume:
        _check_resume(args)


#: ``--lags``' own options (their defaults: WindowTrainer's, train_options.resolve_defaults)
WINDOW_OPTIONS = ("horizon", "stride", "batch_size", "blocks", "val_ratio", "placement")
#: options of full-batch training that windowed training has no use for: (attribute, default, why)
_NOT_WINDOWED = (
    ("scheme", "auto", "windows are split by time blocks, not by a partition of the graph"),
    ("locality", False, "windows are split by time blocks, not by a partition of the graph"),
    ("partition", None, "windows are split by time blocks, not by a partition of the graph"),
    ("save_partition", None, "windows are split by time blocks, not by a partition of the graph"),
    ("fusion", "full", "each batch step is one call on the union of its windows' snapshots"),
    ("recompute_every", None, "a window's activations are those of one window"),
    ("stale", "off", "no embedding is exchanged (each window is computed where its snapshots are)"),
    ("stale_kinds", None, "no embedding is exchanged"), ("stale_kind", [], "no embedding is exchanged"),
    ("stale_backward", "skip", "no embedding is exchanged"), ("stale_scope", "local", "no embedding is exchanged"),
    ("target", "node", "windows predict node targets (link prediction over windows is not built)"),
)


def _check_windows(args: argparse.Namespace) -> None:
    """``--windows L`` and its options; the options of full-batch training
    that do not apply to it are refused, naming the option and why."""
    if args.windows is None:
        given = [o for o in WINDOW_OPTIONS if getattr(args, o) is not None]
        if given:
            fail(f"--{given[0].replace('_', '-')} applies to windowed training: add --lags L (the snapshots per "
                  "window), or drop it.")
        return
    for name in ("windows", "horizon", "stride", "batch_size", "blocks"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{'lags' if name == 'windows' else name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    world = _expected_world(args)  # what is trained depends on --blocks; the processes share its blocks
    if args.blocks % world:
        divisors = ", ".join(str(d) for d in range(1, args.blocks + 1) if args.blocks % d == 0)
        fail(f"--blocks {args.blocks} cannot be shared by {world} processes: use --nproc {divisors}, or a --blocks "
             f"that is a multiple of {world} (and divides --batch-size; another --blocks trains other batches).")
    if args.batch_size % args.blocks:
        fail(f"--batch-size {args.batch_size} is not a multiple of --blocks {args.blocks}: every block gives "
             f"batch-size / blocks windows to each batch; use e.g. --batch-size {args.batch_size // args.blocks * args.blocks or args.blocks}.")
    if not (0.0 <= args.val_ratio < 1.0 and args.train_ratio + args.val_ratio < 1.0):
        fail(f"--train-ratio {args.train_ratio} and --val-ratio {args.val_ratio} leave no test windows: their sum "
             "must be below 1.")
    if args.horizon > args.windows:  # WindowTrainer's rule without a decoder (none from the command line)
        fail(f"--horizon {args.horizon} > --lags {args.windows}: a window's own {args.windows} outputs predict its "
             f"targets (PyGT's alignment), so --horizon must be <= --lags; use --horizon {args.windows} or less, "
             f"or --lags {args.horizon} or more.")
    for name, default, why in _NOT_WINDOWED:
        if getattr(args, name) != default:
            opt = "--" + name.replace("_", "-")
            fail(f"{opt} does not apply with --windows: {why}; drop {opt}.")


def check_model_options(args: argparse.Namespace) -> None:
    """``--model`` (a zoo name, or the user's model: imported and checked
    against ``--model-args`` here, before any work), ``--model-args`` and
    ``--hidden``; sets ``args.user_model`` (``None`` for the zoo) and the
    zoo's default ``--hidden``. ``train --shards`` runs it too (the shards
    are trained with the model options ``train PATH`` takes)."""
    from .user_model import is_model_spec, load_user_model

    args.user_model = None
    if not is_model_spec(args.model):
        if args.model_args is not None:
            fail(f"--model-args applies to your own model (--model PATH.py:ClassName or package.module:ClassName); "
                  f"--model {args.model} is built by the zoo from the data and --hidden: drop --model-args.")
        if args.hidden is None:
            args.hidden = 32
        return
    if args.hidden is not None:
        fail(f"--hidden {args.hidden} sets the width of the zoo's models; --model {args.model} is built from "
              f"--model-args: give its width there (e.g. --model-args '{{\"hidden\": {args.hidden}}}'), and drop "
              "--hidden.")
    args.user_model = load_user_model(args.model, args.model_args)


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
            fail(f"PATH '{path}': the gzip stream is corrupt or truncated; re-download or re-compress the file.")
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
            fail(f"--format {fmt}: PATH '{path}' is not a file but the name of an embedded PyGT dataset "
                  f"(pygt-json); drop --format {fmt}, or give the path of {_FORMAT_WORDS[fmt]}.")
        resolved, by_name = "pygt-json", True
    else:
        head = _head(path)
        looks = _sniff(head)
        if fmt != "auto" and looks != fmt:
            fail(f"--format {fmt}: PATH '{path}' looks like {_FORMAT_WORDS[looks]}, not {_FORMAT_WORDS[fmt]}; "
                  + (f"use --format {looks} (or --format auto)." if looks != "binary" else
                     "check that PATH is the file you mean."))
        resolved = detect_format(path) if fmt == "auto" else fmt
        by_name = fmt == "auto" and resolved != looks
        if resolved == "edgelist":
            _check_edge_list_columns(path, head)
    if resolved == "edgelist" and args.window is None:
        fail(f"--window is required to bin the edge list '{path}' into snapshots (e.g. --window 1d).")
    if resolved != "edgelist" and args.window is not None:
        how = "is" if fmt == "auto" and not by_name else "is read as"
        fail(f"--window applies to temporal edge lists, and PATH '{path}' {how} {_FORMAT_WORDS[resolved]}, "
              "already in snapshots; drop --window"
              + (" (or add --format edgelist if it is an edge list)." if os.path.exists(path) else "."))


def check_edge_list_columns(path: str, command: str) -> None:
    """A temporal edge list ``PATH`` has 'source target ... time' columns (read from its first lines, gzip
    or not): one line naming ``command``'s fix, before the loader's errors name its ``columns=`` argument."""
    _check_edge_list_columns(path, _head(path), command)


def _check_edge_list_columns(path: str, head: bytes, command: str = "train") -> None:
    import re

    for number, line in enumerate(head.splitlines()[:1000], 1):
        text = line.strip()
        if not text or text[:1] in (b"%", b"#"):
            continue
        cols = len(re.split(rb"[\s,]+", text))
        if cols < 3:
            fail(f"PATH '{path}': line {number} has {cols} column{'s' if cols != 1 else ''}, and a temporal edge "
                  "list needs 'source target ... time' (the time in the last column); add a time column to the "
                  f"file ({command} reads the first two columns and the last).")
        return


def readable_reason(exc: BaseException) -> str:
    """``exc``'s message, unless it repeats torch's advice to load with
    ``weights_only=False`` (unpickling an untrusted file runs its code)."""
    text = str(exc)
    unreadable = ("weights_only", "Weights only", "not a readable pyg_dynscale")  # read_archive's refusals
    return "" if any(u in text for u in unreadable) else f" ({text.splitlines()[0] if text else ''})"


def _check_partition_file(args: argparse.Namespace) -> None:
    if args.partition is None:
        return
    if os.path.isdir(args.partition):
        fail(f"--partition '{args.partition}' is a directory; give a partition file (pyg-dynscale partition PATH "
              "--parts N --out FILE writes one).")
    if not os.path.isfile(args.partition):
        fail(f"--partition: no such file '{args.partition}'; write one with pyg-dynscale partition PATH --parts N "
              "--out FILE, or drop --partition.")
    read_partition(args.partition, "--partition", "re-create it with pyg-dynscale partition PATH --parts N --out "
                                                   "FILE, or drop --partition")


def read_partition(path: str, what: str, fix: str, data: Any = None) -> Any:
    """:func:`load_partition` (made for ``data`` if given), with one-line
    errors naming ``what`` and ``fix``."""
    from ..errors import PartitionFormatError
    from ..partition.io import load_partition

    try:
        return load_partition(path, data)
    except PartitionFormatError as exc:
        reason = readable_reason(exc)
        fail(f"{what} '{path}' is not a readable pyg_dynscale partition file"
              + (reason or " (corrupt, truncated, or not written by save_partition: it is read without unpickling "
                           "objects)") + f"; {fix}.")


def _check_output_paths(args: argparse.Namespace) -> None:
    if args.save_partition is not None:
        path = args.save_partition
        if os.path.isdir(path):
            fail(f"--save-partition '{path}' is a directory; give a file name such as "
                  f"{os.path.join(path, 'partition.pt')}.")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            fail(f"--save-partition: the folder '{parent}' does not exist; create it first.")
        if not os.access(path if os.path.exists(path) else parent, os.W_OK):
            fail(f"--save-partition: cannot write '{path}' (permission denied); choose a writable location.")
    check_checkpoint_options(args)


def _expected_world(args: argparse.Namespace) -> int:
    if in_torchrun() and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return args.nproc if args.nproc is not None else 1


def _check_resume(args: argparse.Namespace) -> None:
    """The newest checkpoint, before the data loads: its record and files
    readable, and the fields of the run that need no data (model, width,
    hyperparameters, processes) equal to this run's; :func:`train` checks the
    rest (data fingerprint, scheme) before the processes connect."""
    found = resumable_checkpoint(args.checkpoint_dir, run_record(args, None, _expected_world(args), None),
                                 lambda exc: mismatch_message(exc, args), ignore=("signal", "scheme"))
    if found is None:
        return  # rank 0 says that it starts fresh
    saved = os.path.join(args.checkpoint_dir, "partition.pt")
    if args.partition is None and os.path.isfile(saved):
        read_partition(saved, "--resume: the checkpoints' partition", "delete it (the run partitions again: the "
                        "same partition for the same data and --seed), or use a new --checkpoint-dir")


#: The option behind each field of the run record, for messages.
_RECORD_OPTIONS = {"model": "--model", "model_class": "--model", "model_args": "--model-args", "hidden": "--hidden", "target": "--target", "dtype": "--dtype",
                   "train_ratio": "--train-ratio", "scheme": "--scheme", "lr": "--lr", "stale": "--stale",
                   "world_size": "--nproc", "signal": "PATH", "loss": "--target", "mode": "--windows",
                   "windows": "--lags", "horizon": "--horizon", "stride": "--stride", "batch_size": "--batch-size",
                   "placement": "--placement", "blocks": "--blocks", "val_ratio": "--val-ratio",
                   "feature_lags": "--feature-lags"}


def mismatch_message(exc: Any, args: argparse.Namespace) -> str:
    """One line naming every differing field, its option and the checkpoint's value."""
    if not exc.fields:  # another checkpoint format: its own message says what to do
        return f"--resume: {exc}"
    from .events_checkpoint import other_command_message

    other = other_command_message(exc, "windows" if getattr(args, "windows", None) is not None else None)
    if other is not None:  # train-events', or the other mode of train's: not a list of every option
        return other
    parts, fixes = [], []
    for key, theirs, ours in exc.fields:
        opt = _RECORD_OPTIONS.get(key)
        parts.append(f"{key}: checkpoint {theirs!r}, this run {ours!r}" + (f" ({opt})" if opt else ""))
        if key in ("model", "hidden", "target", "dtype", "train_ratio", "scheme", "lr", "windows", "horizon", "stride",
                   "batch_size", "placement", "blocks", "val_ratio", "feature_lags"):
            fixes.append(f"{opt} {theirs}")
        elif key == "model_class" and not any(k == "model" for k, _, _ in exc.fields):
            fixes.append(f"a --model that resolves to {theirs}")
        elif key == "model_args":
            fixes.append("no --model-args" if not theirs else f"--model-args '{json.dumps(theirs)}'")
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
            fail(f"--stale-kind {item!r}: write KIND=POLICY, e.g. temporal=static:0.3.")
        per_kind.append((kind.strip(), spec.strip()))
    try:
        return StaleConfig.parse(args.stale, kinds=kinds, backward=args.stale_backward, scope=args.stale_scope,
                                 per_kind=tuple(per_kind))
    except DynScaleError as exc:  # name every stale option given: the error may be in any of them
        given = [f"--stale {args.stale}"] + ([f"--stale-kinds {args.stale_kinds}"] if args.stale_kinds is not None
                                              else []) + [f"--stale-kind {item}" for item in args.stale_kind]
        fail(f"{' '.join(given)}: {exc}")


def _loss_name(target: str) -> str:
    return "bce_link" if target == "link" else "mse"  # as nn.zoo.build_model chooses it


def run_record(args: argparse.Namespace, fingerprint: Optional[str], world: int, scheme: Optional[str]) -> dict:
    """What a checkpoint must have been written by to be resumed: the data
    and set-up, and the training hyperparameters. Resuming restores the
    optimizer's state, learning rate included, so a run with another
    ``--lr`` (or loss, optimizer, stale policy) would silently not be the run
    it reports: it is refused, naming the field."""
    record = {"model": args.model, "hidden": args.hidden, "target": args.target, "dtype": args.dtype,
              "signal": fingerprint, "world_size": world, "scheme": scheme, "train_ratio": args.train_ratio,
              "lr": args.lr, "optimizer": "adam", "loss": _loss_name(args.target),
              "stale": args.stale_config.describe() if args.stale_config.enabled else "off"}
    user = getattr(args, "user_model", None)
    if user is not None:  # a user's model: the spec as given, what it resolved to, its arguments
        record.update(model_class=user.target, model_args=user.args)
    if getattr(args, "windows", None) is not None:  # windowed training: its windows and batches
        record.update(mode="windows", windows=args.windows, horizon=args.horizon, stride=args.stride,
                      batch_size=args.batch_size, placement=args.placement, blocks=args.blocks,
                      val_ratio=args.val_ratio, feature_lags=args.feature_lags)
    return record
