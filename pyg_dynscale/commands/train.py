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
import sys
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

from ..errors import CommandError

SCHEMA_VERSION = 1
FORMATS = ("auto", "pygt-json", "edgelist", "dynscale")
DTYPES = ("float32", "float64", "float16", "bfloat16")
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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="training device (default: cpu)")
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
            canonical_dataset_name(path)
        except SignalValidationError:
            _fail(f"no such file: PATH '{path}' (and not the name of an embedded dataset such as 'england_covid').")
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
    if args.device == "cuda":
        if not torch.cuda.is_available():
            _fail("--device cuda was requested but torch.cuda.is_available() is False (no GPU, or a CPU-only "
                  "torch build). Use --device cpu.")
        _fail("--device cuda: the distributed runtime runs on CPU ranks (gloo) in this release; CUDA ranks "
              "(NCCL, one GPU per rank) are not built yet. Use --device cpu.")
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
    if args.resume and not args.checkpoint_dir:
        _fail("--resume needs --checkpoint-dir DIR.")
    if args.partition is not None and not os.path.isfile(args.partition):
        _fail(f"--partition: no such file '{args.partition}'.")
    for opt, path in (("--save-partition", args.save_partition), ("--checkpoint-dir", args.checkpoint_dir)):
        if path is not None:
            parent = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(parent):
                _fail(f"{opt}: the folder '{parent}' does not exist; create it first.")
    if args.window is not None:
        from ..data.loaders.edgelist import parse_window

        try:
            seconds = parse_window(args.window)
        except Exception as exc:
            _fail(f"--window: {exc}")
        if not (math.isfinite(seconds) and seconds >= 1e-6):
            _fail(f"--window must be a duration of at least a microsecond, got {args.window!r}.")


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
    except DynScaleError as exc:
        _fail(f"--stale {args.stale}: {exc}")


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
    """Start ``--nproc`` workers with torchrun's machinery and wait for them."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    targs = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(args.nproc), "--max-restarts", str(args.max_restarts),
         "--monitor-interval", "0.2", "-m", "pyg_dynscale"] + worker_argv(args._argv))
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    try:
        torchrun(targs)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        cause = _failure_cause(failure)
        print(f"{PROG}: error: rank {rank} failed (exit code {failure.exitcode}): {cause}", file=sys.stderr)
        return 2 if failure.exitcode == 2 else 1
    return 0


def _failure_cause(failure: Any) -> str:
    msg = failure.message
    if isinstance(msg, dict):
        msg = msg.get("message", json.dumps(msg))
    text = str(msg).strip()
    if failure.exitcode < 0:
        import signal as _signal

        try:
            return f"killed by signal {_signal.Signals(-failure.exitcode).name}"
        except ValueError:
            return f"killed by signal {-failure.exitcode}"
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
    store = dist.HashStore()
    try:
        report = train(args, 0, 1, lambda: dist.init_process_group("gloo", store=store, rank=0, world_size=1))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    _print_report(args, report)
    return 0


def _worker(args: argparse.Namespace) -> int:
    """One rank under torchrun: train, and on failure say which rank failed
    and why (publishing the cause for the others) before exiting non-zero."""
    import torch.distributed as dist
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..distributed.failure import install_stop_report, is_transport_error, publish_failure
    from ..errors import DynScaleError

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    args._rank_label = f" (rank {rank})"
    install_stop_report(rank, world, PROG)
    backend_timeout = timedelta(seconds=args.timeout)
    try:
        if args.nproc is not None and args.nproc != world:
            _fail(f"--nproc {args.nproc} differs from torchrun's world size {world}; drop --nproc under torchrun.")
        report = train(args, rank, world, lambda: _init_torchrun_group(rank, world, backend_timeout))
        if rank == 0:
            _print_report(args, report)
        return 0
    except (DynScaleError, OSError, ValueError) as exc:
        if dist.is_initialized() and is_transport_error(exc):
            return _report_runtime_failure(rank, world, exc)
        publish_failure(rank, f"{type(exc).__name__}: {exc}")
        ErrorHandler().record_exception(exc)
        print(f"{PROG}: error (rank {rank}): {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:
        return _report_runtime_failure(rank, world, exc)
    finally:
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()


def _init_torchrun_group(rank: int, world: int, timeout: timedelta) -> None:
    """``init_process_group`` under torchrun, in a store namespace of its own
    per restart attempt: with torchrun's shared agent store (the default) the
    keys of a failed attempt survive, and gloo would connect to the dead
    workers' addresses published there."""
    import torch.distributed as dist

    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group("gloo", timeout=timeout)
        return
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                         timeout=timeout)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"pyg_dynscale/attempt_{attempt}", base)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)


def _report_runtime_failure(rank: int, world: int, exc: BaseException) -> int:
    """A failure during training: name another rank's published failure when
    ``exc`` only says that a peer is gone, else publish and report ours."""
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    from ..distributed.failure import failure_of_others, is_transport_error, publish_failure

    if is_transport_error(exc):
        other = failure_of_others(rank, world)
        if other is not None:
            print(f"{PROG} (rank {rank}): stopping: rank {other[0]} failed: {other[1]}", file=sys.stderr, flush=True)
            return 1
    cause = f"{type(exc).__name__}: {exc}"
    publish_failure(rank, cause)
    ErrorHandler().record_exception(exc)
    traceback.print_exc()
    print(f"{PROG}: error (rank {rank}): {cause}", file=sys.stderr, flush=True)
    return 1


# ------------------------------------------------------------------- the job
def _load_signal(args: argparse.Namespace) -> Any:
    from ..data.loaders import load
    from ..data.loaders.auto import detect_format

    fmt = args.format
    if fmt == "auto" and os.path.exists(args.path):
        fmt = detect_format(args.path)
    elif fmt == "auto":
        fmt = "pygt-json"  # an embedded dataset name
    if fmt == "edgelist":
        if args.window is None:
            _fail(f"--window is required to bin the edge list '{args.path}' into snapshots (e.g. --window 1d).")
        return load(args.path, format=fmt, window=args.window, target="link" if args.target == "link" else "degree",
                    degree_transform="log1p")
    return load(args.path, format=fmt, window=args.window)


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


def run_record(args: argparse.Namespace, fingerprint: str, world: int, scheme: str) -> dict:
    """What a checkpoint must have been written by to be resumed."""
    return {"model": args.model, "hidden": args.hidden, "target": args.target, "dtype": args.dtype,
            "signal": fingerprint, "world_size": world, "scheme": scheme, "train_ratio": args.train_ratio}


def train(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None]) -> dict:
    r"""The job of one rank: returns the report (the same on every rank)."""
    import torch
    import torch.distributed as dist
    from tqdm.auto import tqdm

    from ..distributed import DistributedTrainer
    from ..distributed.checkpoint import (CheckpointMismatchError, check_run, latest_checkpoint, load_checkpoint,
                                          save_checkpoint)
    from ..errors import PartitionError
    from ..nn.zoo import build_model, partition_pattern
    from ..partition.io import load_partition, save_partition
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
    train_sig, test_sig = signal.split(args.train_ratio)
    for name, s in (("training", train_sig), ("test", test_sig)):
        if world > s.num_vertex_time_nodes:
            _fail(f"--nproc {world} is larger than the {s.num_vertex_time_nodes} vertex-time nodes of the {name} "
                  f"split: use at most {s.num_vertex_time_nodes} processes.")
    part = None
    if args.partition is not None:
        try:
            part = load_partition(args.partition, train_sig)
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
                _fail(f"--resume: {exc}")
            resume_from = found
    saved_part = os.path.join(args.checkpoint_dir, "partition.pt") if args.checkpoint_dir else None
    if part is None and resume_from is not None and os.path.isfile(saved_part):
        part = load_partition(saved_part, train_sig)  # the exact partition of the interrupted run
    # ---- processes connect
    init_process_group()
    torch.manual_seed(args.seed)
    model, head, loss = build_model(args.model, signal.num_node_features, args.hidden,
                                    num_snapshots=train_sig.num_snapshots, num_vertices=signal.num_vertices,
                                    target=args.target)
    model = model.to(dtype)
    head = head.to(dtype) if head is not None else None
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
    trainer = DistributedTrainer(model, train_sig, part, head=head, loss=loss, lr=args.lr, fusion=args.fusion,
                                 stale=args.stale_config, checkpoint_every=args.recompute_every)
    modules = torch.nn.ModuleDict({"model": model, **({"head": head} if head is not None else {})})
    progress: dict = {"losses": [], "epoch_seconds": [], "bytes_measured": {}, "bytes_predicted": {},
                      "stale_factor": [], "stale_fresh_fraction": []}
    start = 0
    if resume_from is not None:
        progress = load_checkpoint(resume_from[1], modules, trainer.optimizer, record)["progress"]
        start = resume_from[0]
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
        progress["epoch_seconds"].append(_max_over_ranks(trainer.epoch_seconds[-1]))
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
    # ---- test metric on the later snapshots (from a zero state, as FusedTrainer.evaluate)
    evaluator = DistributedTrainer(model, test_sig, test_part, head=head, loss=loss, fusion=args.fusion)
    if loss == "bce_link":
        scores, labels = evaluator.link_scores()
        everyone: list = [None] * world
        dist.all_gather_object(everyone, (scores.double().tolist(), labels.double().tolist()))
        metric_name = "auc"
        test_metric = roc_auc(torch.tensor(sum((e[0] for e in everyone), [])),
                              torch.tensor(sum((e[1] for e in everyone), [])))
    else:
        metric_name, test_metric = "mse", evaluator.evaluate()
    final = trainer.traffic()
    return {
        "schema_version": SCHEMA_VERSION, "path": args.path, "model": args.model, "target": args.target,
        "scheme": part.scheme, "world_size": world, "dtype": args.dtype, "hidden": args.hidden, "lr": args.lr,
        "epochs": args.epochs, "fusion": args.fusion, "seed": args.seed,
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
    }


def _max_over_ranks(value: float) -> float:
    """The slowest rank's value (an epoch lasts until its last rank is done)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


# -------------------------------------------------------------------- output
def _print_report(args: argparse.Namespace, r: dict) -> None:
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
        f"  final train loss  {r['losses'][-1]:.6f}",
        f"  test {r['test_metric_name'].upper():<12} {r['test_metric']:.6f}   (later {r['snapshots']['test']} snapshots)",
        f"  epoch time        {sum(steady) / len(steady) * 1e3:.1f} ms (mean after the first; slowest rank)",
        f"  partitioning      {r['partition_seconds']:.3f} s",
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
    if r["checkpoints"]:
        lines.append(f"  last checkpoint  {r['checkpoints'][-1]}")
    print("\n".join(lines), flush=True)
