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

The model options are ``train PATH``'s (``--model`` a zoo name or the
user's ``PATH.py:Name`` / ``package.module:Name`` with ``--model-args``,
``--hidden``, ``--dtype``, ``--seed``) and must be those ``pyg-dynscale
partition ... --shards DIR`` was given: the shard set records the path it
was cut for (decomposed or black-box), and the dependency pattern or the
black-box module's signature (class, halo depth, state widths, element
size); another model is refused before any process starts, in one line
naming the model options. A user's model is built as ``train PATH`` builds
it, on a two-snapshot stand-in of the data's shape (its input size, output
and target widths decide the head as on the data).

What a rank holding its part cannot run is refused before any process
starts, in one line naming the option: ``--windows``, ``--partition``,
``--save-partition``, ``--recompute-every``, ``--fusion none``,
``--stale``, ``--target link``, ``--train-ratio``, and ``--scheme``,
``--locality``, ``--format``, ``--window`` (given to ``partition ...
--shards`` instead); so are a missing rank directory, a world
size (``--nproc``) other than the shard count, and a damaged shard set.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Optional

from .job import Job, check_launch_options, fail
from .train_options import PROG, SCHEMA_VERSION, resolve_defaults

__all__ = ["check_shard_args", "train_from_shards", "print_shards_report", "build_shard_model"]

#: what each runtime path and its shards are called in messages
_PATH_WORDS = {"decomposed": "decomposed", "blackbox": "black-box"}
_SHARD_WORDS = {"decomposed": "decomposed-path", "blackbox": "black-box"}


def check_shard_args(args: argparse.Namespace) -> None:
    """Checks that need no data (run by the launcher and by every rank):
    the options, the shard set's ``meta.json`` and rank files, and the model
    (``--model``, ``--model-args``, ``--hidden``, ``--dtype``) against the one
    the shards were cut for."""
    from ..distributed.shards import SHARD_FILE, read_meta
    from ..errors import ShardError
    from .train_checks import check_model_options

    d = args.shards
    if args.path is not None:
        fail(f"give PATH or --shards {d}, not both: the shards hold the data (re-write them from PATH with "
             "pyg-dynscale partition PATH --parts N --shards DIR).")
    refused = {"windows": args.windows is not None, "partition": args.partition is not None,
               "save-partition": args.save_partition is not None, "recompute-every": args.recompute_every is not None,
               "fusion": args.fusion != "full", "stale": args.stale != "off", "target": args.target != "node",
               "feature-lags": getattr(args, "feature_lags", None) is not None}
    for name, bad in refused.items():
        if bad:
            fail(f"--{name} with --shards: a rank that holds only its part cannot run it (the shards hold node "
                 f"targets, one partition, fusion='full', exact exchanges). Drop --{name}, or train from PATH.")
    # options that shape the data or its partition: the shards were cut with their own (partition ... --shards)
    cut = {"scheme": (args.scheme != "auto", "--scheme S"), "locality": (args.locality, "--scheme pts --locality"),
           "format": (args.format != "auto", "--format F"), "window": (args.window is not None, "--window W")}
    for name, (bad, given) in cut.items():
        if bad:
            fail(f"--{name} with --shards: the shards hold the data already read and partitioned; drop --{name}, "
                 f"and give it when cutting them: pyg-dynscale partition PATH --parts N {given} --shards {d}.")
    if args.train_ratio is not None:
        fail(f"--train-ratio with --shards: every snapshot of the shards trains (they hold no test split); drop "
             "--train-ratio, or train from PATH.")
    resolve_defaults(args)  # the API's defaults for the options left unset (--lr: DistributedTrainer's)
    for name in ("epochs", "hidden", "threads", "checkpoint_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    check_model_options(args)  # --model (a user's model is imported here), --model-args, --hidden
    try:
        meta = read_meta(d)
    except ShardError as exc:
        fail(f"--shards {d}: {exc}")
    check_launch_options(args)
    world = int(meta["world_size"])
    nproc = getattr(args, "nproc", None)  # the job's processes (None: one, or torchrun's, checked by each rank)
    if nproc is not None and nproc != world:
        fail(f"--shards {d} holds {world} parts but --nproc {nproc} processes would train; use "
             f"--nproc {world}, or write shards for {nproc} parts.")
    # a rank directory lost in a copy stops the job here, before any process starts (its contents are checked
    # by the rank that reads it: checksums, the set it belongs to)
    for r in range(world):
        if not os.path.isfile(os.path.join(d, f"rank-{r}", SHARD_FILE)):
            fail(f"--shards {d}: rank-{r}/{SHARD_FILE} is missing, and the set has {world} parts (rank-0 .. "
                 f"rank-{world - 1}); copy the whole directory, or re-write it with pyg-dynscale partition PATH "
                 f"--parts {world} --shards {d}.")
    model, _, _ = build_shard_model(args, meta, 0)
    check_shard_model(args, meta, model)


def _model_options(args: argparse.Namespace) -> str:
    """The options that define the model, as given (for messages)."""
    user = getattr(args, "user_model", None)
    given = f"--model {args.model}"
    if user is not None and args.model_args is not None:
        given += f" --model-args '{args.model_args}'"
    elif user is None:
        given += f" --hidden {args.hidden or 32}"
    return f"{given} --dtype {args.dtype}"


def shard_model_path(args: argparse.Namespace, model: Any) -> tuple:
    """``(path, resolved)``: the runtime path of ``model`` (zoo: by name;
    a user's model: as ``train`` and ``partition --shards`` decide it)."""
    from ..nn.zoo import BLACK_BOX_MODELS
    from .user_model import runtime_path

    if getattr(args, "user_model", None) is None:
        return ("blackbox" if args.model in BLACK_BOX_MODELS else "decomposed"), model
    return runtime_path(model)


def check_shard_model(args: argparse.Namespace, meta: dict, model: Any) -> None:
    """Refuse, in one line naming the model options, a model that is not the
    one the shard set was cut for: another runtime path, another dependency
    pattern (decomposed shards) or another module signature (black-box
    shards: class, halo depth, state widths, output shape, element size)."""
    import json

    import torch

    from ..distributed.blackbox_shards import module_mismatch
    from ..runtime.paths import resolve_model

    d, given = args.shards, _model_options(args)
    fix = (f"train with the model options given to pyg-dynscale partition ... --shards {d}, or re-write the shards "
           f"with {given.rpartition(' --dtype')[0]} (pyg-dynscale partition PATH --parts {meta['world_size']} "
           f"--shards {d} ...)")
    theirs = meta.get("path", "decomposed")
    mine, resolved = shard_model_path(args, model)
    if mine != theirs:
        fail(f"--shards {d} holds {_SHARD_WORDS[theirs]} shards, and {given} runs on the {_PATH_WORDS[mine]} path; "
             f"{fix}.")
    dtype = getattr(torch, args.dtype)
    bpe = torch.empty((), dtype=dtype).element_size()
    if theirs == "decomposed":
        pattern = json.loads(json.dumps(resolved.dependency_pattern(bytes_per_element=bpe).to_dict()))
        cut = meta["pattern"]
        if pattern != cut:
            diff = ", ".join(f"{k}: shards {cut.get(k)!r}, model {pattern.get(k)!r}"
                             for k in sorted(set(pattern) | set(cut)) if pattern.get(k) != cut.get(k))
            fail(f"--shards {d} was cut for another dependency pattern than {given} gives ({diff}); {fix}.")
        return
    if meta.get("edge_fields"):  # the probe needs a row of each edge field: the rank's reader checks it
        return
    with torch.random.fork_rng(devices=[]):  # a probe draws no parameter: the seeded stream stays the run's
        diff = module_mismatch(resolve_model(model, "blackbox", check=False), meta, dtype)
    if diff is not None:
        fail(f"--shards {d} was cut for another black-box module or dtype than {given} ({diff}); {fix}.")


def _target_width(directory: str, rank: int) -> int:
    """Elements of one target row, read from rank ``rank``'s file (memory-mapped: one tensor's header)."""
    import math

    import torch

    from ..distributed.shards import SHARD_FILE

    try:
        y = torch.load(os.path.join(directory, f"rank-{rank}", SHARD_FILE), map_location="cpu", weights_only=True,
                       mmap=True)["tensors"]["field.y"]
    except Exception:  # the rank's reader names what is wrong with the file
        return 1
    return 1 if y.dim() == 1 else int(math.prod(y.shape[1:]))


def _probe_signal(meta: dict, target_width: int, cap: Optional[int]) -> Any:
    """Two snapshots shaped like the shard set's first two non-empty ones
    (features, weights, target width; a ring of at most ``cap`` nodes each):
    what :func:`~.user_model.build_user_model` reads of the data (input
    sizes, output and target widths) without the whole signal."""
    import torch

    from ..data import DynamicGraphSignal

    counts = [int(c) for c in meta["nodes_per_snapshot"] if int(c) > 0][:2]
    F = int(meta["num_features"])
    eis, ws, xs, ys = [], [], [], []
    for n in counts:
        n = min(n, cap) if cap else n
        src = torch.arange(n)
        dst = (src + 1) % n
        eis.append(torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]))
        ws.append(torch.ones(2 * n))
        xs.append(torch.zeros(n, F))
        ys.append(torch.zeros(n) if target_width == 1 else torch.zeros(n, target_width))
    return DynamicGraphSignal(eis, ws if meta.get("weighted", True) else None, xs, ys)


def build_shard_model(args: argparse.Namespace, meta: dict, rank: int) -> tuple:
    r"""``(model, head, loss)`` as ``pyg-dynscale train PATH`` builds them
    (seeded with ``--seed``, at ``--dtype``, on the host), from the shard
    set's ``meta.json`` instead of the data: a zoo model from its sizes; a
    user's model (``--model PATH.py:Name``) with
    :func:`~.user_model.build_user_model` on a two-snapshot stand-in of the
    data's shape (the input size, and its output width against the target
    width of rank ``rank``'s file, decide the head exactly as on the data)."""
    import torch

    from ..errors import CommandError, DynScaleError
    from ..nn.zoo import build_model
    from .user_model import build_user_model

    dtype = getattr(torch, args.dtype)
    user = getattr(args, "user_model", None)
    if user is None:
        torch.manual_seed(args.seed)
        try:
            model, head, loss = build_model(args.model, meta["num_features"], args.hidden or 32,
                                            num_snapshots=meta["num_snapshots"], num_vertices=meta["num_vertices"],
                                            target="node")
        except (ValueError, DynScaleError) as exc:  # e.g. dysat's odd --hidden, PyGT missing for its cells
            fail(f"--model {args.model} --hidden {args.hidden or 32}: {exc}")
        return model.to(dtype=dtype), (head.to(dtype=dtype) if head is not None else None), loss
    width = _target_width(args.shards, rank)
    try:  # a ring of 16 nodes per snapshot; a model with a fixed node count needs the first snapshots' own counts
        model, head, _ = build_user_model(user, _probe_signal(meta, width, 16), seed=args.seed, dtype=dtype)
    except CommandError:
        model, head, _ = build_user_model(user, _probe_signal(meta, width, None), seed=args.seed, dtype=dtype)
    return model, head, "mse"


def train_from_shards(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None],
                      device: str = "cpu") -> dict:
    r"""The job of one rank on ``device``: read ``meta.json``, build the
    model (:func:`build_shard_model`: the zoo's, or the user's
    ``--model PATH.py:Name``), :meth:`DistributedTrainer.from_shards` (the
    decomposed or the black-box path, as the shards were cut), train
    ``--epochs``; returns the report (the same on every rank but ``device``)."""
    import torch

    from ..distributed import DistributedTrainer
    from ..distributed.shards import read_meta
    from ..errors import ShardError
    from .train_checks import mismatch_message
    from .user_model import describe_head

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
    user = getattr(args, "user_model", None)
    record = {"shards": meta["set"], "world": world, "model": args.model, "hidden": args.hidden, "dtype": args.dtype,
              "seed": args.seed}
    if user is not None:
        record.update(model_class=user.target, model_args=user.args)
    job.find_resume(record, lambda exc: mismatch_message(exc, args))  # names --model, --model-args, --hidden, ...
    # built before the processes connect (what goes wrong is one line, the same on every rank), seeded
    model, head, loss = build_shard_model(args, meta, rank)
    init_process_group()
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

    job.epochs(trainer, progress, start, desc=f"{user.name if user else args.model} x{world} (shards)", after=after)
    final = trainer.traffic()
    return {
        "schema_version": SCHEMA_VERSION, "mode": "shards", "shards": os.path.abspath(args.shards),
        "model": args.model, "model_class": user.target if user else None,
        "model_args": user.args if user else None, "head": describe_head(head),
        "runtime_path": trainer.path, "scheme": meta["scheme"], "world_size": world,
        "dtype": args.dtype, "hidden": (args.hidden or 32) if user is None else None, "epochs": args.epochs,
        "seed": args.seed,
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
