"""The job of one rank of ``pyg-dynscale train``: load, split, partition,
train, evaluate, and the report."""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any, Callable

from .job import Job, fail
from .train_checks import mismatch_message, read_partition, readable_reason, run_record
from .train_options import PROG, SCHEMA_VERSION


# ------------------------------------------------------------------- the job
def load_signal(args: argparse.Namespace) -> Any:
    from ..data.loaders import load
    from ..errors import DynScaleError, SignalValidationError

    fmt = data_format(args)
    lags = feature_lags_option(args, fmt)
    try:
        if fmt == "edgelist":  # check_args refused an edge list without --window
            return load(args.path, format=fmt, window=args.window,
                        target="link" if args.target == "link" else "degree", degree_transform="log1p")
        return load(args.path, format=fmt, window=args.window, **lags)
    except SignalValidationError as exc:  # the loader names its arguments; say which option or file it was
        fail(_signal_error(exc, args))
    except DynScaleError as exc:
        reason = readable_reason(exc)
        if not reason:  # an archive torch refused to unpickle: never suggest weights_only=False
            fail(f"PATH '{args.path}' is not a readable pyg_dynscale signal file (corrupt, truncated, or not written "
                  "by DynamicGraphSignal.save: it is read without unpickling objects); re-create it with "
                  "DynamicGraphSignal.save(), or pass the original dataset file.")
        fail(str(exc) if args.path in str(exc) else f"PATH '{args.path}': {exc}")


def data_format(args: argparse.Namespace) -> str:
    """``PATH``'s format: ``--format``, else detected (a name that is no file: an embedded PyGT dataset)."""
    from ..data.loaders.auto import detect_format

    if args.format != "auto":
        return args.format
    return detect_format(args.path) if os.path.exists(args.path) else "pygt-json"


def feature_lags_option(args: argparse.Namespace, fmt: str) -> dict:
    """The loader's ``feature_lags`` for ``PATH`` in format ``fmt``:
    ``--feature-lags``, else with ``--lags`` :data:`~pyg_dynscale.commands.train_options.WINDOW_FEATURE_LAGS`
    (a window of ``L`` snapshots then reads ``L`` raw steps), else the
    dataset's PyGT default (``{}``). ``--feature-lags`` for data that is not a
    PyGT JSON file is refused: only PyGT's loaders stack raw steps."""
    from .train_options import WINDOW_FEATURE_LAGS

    value = getattr(args, "feature_lags", None)
    if value is not None and fmt != "pygt-json":
        fail(f"--feature-lags {value}: PATH '{args.path}' is {fmt} data, whose snapshots' features are read as they "
             "are; --feature-lags applies to PyGT JSON datasets only: drop it.")
    if fmt != "pygt-json":
        return {}
    if value is None and getattr(args, "windows", None) is not None:
        value = WINDOW_FEATURE_LAGS
    return {} if value is None else {"feature_lags": value}


def _signal_error(exc: Any, args: argparse.Namespace) -> str:
    """A loader's or a split's :class:`SignalValidationError` as one line that
    names the option (``--window``, ``--train-ratio``) or ``PATH``."""
    field, problem = getattr(exc, "field", ""), getattr(exc, "problem", str(exc))
    if field == "window":
        fix = ("use a smaller --window: the targets need a next snapshot" if "next snapshot" in problem else
               "use a longer --window, e.g. 1h or 1d")
        return f"--window {args.window}: {problem} Fix: {fix}."
    if field == "feature_lags":
        return f"--feature-lags {args.feature_lags}: {problem} Fix: use a smaller --feature-lags."
    if field == "train_ratio":
        return (f"--train-ratio {args.train_ratio}: {problem} Fix: choose a ratio that leaves at least one snapshot "
                "for training and one for the test.")
    return f"PATH '{args.path}': {exc}"


def check_target(signal: Any, args: argparse.Namespace) -> None:
    if args.target == "link" and "edge_label_index" not in signal.extra_keys:
        fail(f"--target link needs link labels (edge_label_index / edge_label), and '{args.path}' has none; "
              "PyGT datasets are node regression: use --target node, or a temporal edge list for links.")
    if args.target == "node" and signal.y is None:
        fail(f"--target node needs node targets y, and '{args.path}' has none; use --target link.")


def _partition(signal: Any, scheme: str, world: int, pattern: Any, args: argparse.Namespace,
               locality: bool = False) -> Any:
    from ..partition.schemes.dispatch import partition

    opts = {"threads": args.threads} if scheme == "pgc" else {}
    if scheme == "pts" and (args.locality or locality):
        opts["locality"] = True
    return partition(signal, scheme, world, pattern, seed=args.seed, **opts)


def _partition_auto(model: Any, signal: Any, world: int, args: argparse.Namespace, device: str,
                    bytes_per_element: int) -> Any:
    """``--scheme auto``: the candidate with the lowest predicted epoch on the
    path ``model`` takes (its dependency pattern, or on the black-box path its
    probe), with the cost constants of ``device``'s type."""
    from ..partition.schemes.auto import CostModel
    from ..runtime.paths import partition_for_model

    return partition_for_model(model, signal, world, "auto", seed=args.seed, bytes_per_element=bytes_per_element,
                               cost=CostModel.for_device(str(device)))


def _check_user_path(model: Any, signal: Any, args: argparse.Namespace, bytes_per_element: int) -> Any:
    """The options that depend on the path the user's model takes (``--fusion
    none``: decomposed only; ``--recompute-every``: a
    recurrent decomposition without BatchNorm, or the black-box path); returns
    the dependency pattern its partition is made for
    (:func:`~pyg_dynscale.runtime.paths.model_pattern`, as ``partition_for_model``)."""
    from ..errors import DynScaleError
    from ..runtime.paths import model_pattern
    from ..runtime.time_blocks import check_windowable
    from .user_model import runtime_path  # imports torch: not with the parser (pyg-dynscale --help)

    spec, name = args.model, args.user_model.name
    path, resolved = runtime_path(model)
    if path == "blackbox":
        if args.fusion != "full":
            fail(f"--fusion {args.fusion} with --model {spec}: fusion is a decomposed-path option, and {name} runs on "
                  "the black-box path, which calls it once per snapshot. Leave --fusion at its default.")
    elif args.recompute_every is not None:
        try:
            check_windowable(resolved)
        except NotImplementedError as exc:  # UnsupportedOptionError: its problem in the command's words
            what = f"{exc.option} {exc.problem}" if hasattr(exc, "problem") else str(exc)
            fail(f"--recompute-every with --model {spec}: {what} Drop --recompute-every.")
    try:
        return model_pattern(model, signal, bytes_per_element=bytes_per_element, check=True)[0]
    except DynScaleError as exc:
        fail(f"--model {spec}: {exc}")


def train(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None],
          device: str = "cpu") -> dict:
    r"""The job of one rank on ``device`` (``init_process_group`` binds it and
    creates the group): returns the report (the same on every rank but
    ``device``, this rank's)."""
    import torch
    import torch.distributed as dist

    from ..distributed import DistributedTrainer
    from ..errors import PartitionError, SignalValidationError
    from ..nn.zoo import build_model, partition_pattern
    from ..partition.io import save_partition
    from ..partition.partition import SCHEMES
    from ..runtime.metrics import roc_auc
    from .user_model import build_user_model, describe_head, needs_sorted_edges

    job = Job(args, rank, PROG, time.perf_counter)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    # ---- data and everything that can be checked before the processes connect
    signal = load_signal(args)
    if args.model == "dcrnn":  # PyGT's DConv is local (splittable) on edges sorted by (target, source)
        signal = signal.sort_edges()
    check_target(signal, args)
    user = args.user_model
    if user is not None:  # built before the processes connect: what goes wrong is one line, the same on every rank
        model, head, user_kwargs = build_user_model(user, signal, seed=args.seed, dtype=dtype, target=args.target)
        loss = "bce_link" if args.target == "link" else "mse"  # as the zoo's build_model
        if needs_sorted_edges(model):  # PyGT's DConv is local (splittable) on edges sorted by (target, source)
            signal = signal.sort_edges()
    try:
        train_sig, test_sig = signal.split(args.train_ratio)
    except SignalValidationError as exc:
        fail(_signal_error(exc, args))
    for name, s in (("training", train_sig), ("test", test_sig)):
        if world > s.num_vertex_time_nodes:
            fail(f"--nproc {world} is larger than the {s.num_vertex_time_nodes} vertex-time nodes of the {name} "
                  f"split: use at most {s.num_vertex_time_nodes} processes.")
    part = None
    if args.partition is not None:
        try:
            part = read_partition(args.partition, "--partition", "re-create it with pyg-dynscale partition PATH "
                                   "--parts N --out FILE, or drop --partition", train_sig)
        except PartitionError as exc:
            fail(f"--partition {args.partition}: {exc} (partitions are made for the training split of PATH "
                  f"with --train-ratio {args.train_ratio}).")
        if part.num_parts != world:
            fail(f"--partition {args.partition} has {part.num_parts} parts but {world} processes train; "
                  f"partition into {world} parts or start {part.num_parts} processes.")
    if user is not None:
        user_pattern = _check_user_path(model, train_sig, args, torch.empty((), dtype=dtype).element_size())
    scheme = part.scheme if part is not None else args.scheme
    resume_from = job.find_resume(run_record(args, train_sig.fingerprint(), world, scheme),
                                  lambda exc: mismatch_message(exc, args))
    saved_part = os.path.join(args.checkpoint_dir, "partition.pt") if args.checkpoint_dir else None
    if part is None and resume_from is not None and os.path.isfile(saved_part):
        try:  # the exact partition of the interrupted run
            part = read_partition(saved_part, "--resume: the checkpoints' partition", "delete it, or use a new "
                                   "--checkpoint-dir", train_sig)
        except PartitionError as exc:
            fail(f"--resume: the checkpoints' partition '{saved_part}' was made for other data ({exc}); resume with "
                  "the same PATH and --train-ratio, or use a new --checkpoint-dir.")
    # ---- processes connect
    init_process_group()
    if user is None:
        torch.manual_seed(args.seed)
        model, head, loss = build_model(args.model, signal.num_node_features, args.hidden,
                                        num_snapshots=train_sig.num_snapshots, num_vertices=signal.num_vertices,
                                        target=args.target)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if part is None and args.scheme == "auto":  # on the host, before the move: the black-box probe runs the model
        part = _partition_auto(model.to(dtype=dtype), train_sig, world, args, device, itemsize)
    # built on the host from the seed, then moved: every device starts from the same parameters
    model = model.to(device=device, dtype=dtype)
    head = head.to(device=device, dtype=dtype) if head is not None else None
    pattern = (user_pattern if user is not None else
               partition_pattern(model, args.model, signal.num_node_features, args.hidden, itemsize))
    # Every rank partitions (deterministic for a seed; DistributedTrainer checks that the ranks agree): no
    # rank waits in a collective while another one partitions, which can take longer than --timeout (e.g.
    # the first PGC call on a fresh install compiles its kernels).
    if part is None:
        part = _partition(train_sig, args.scheme, world, pattern, args)
    test_part = _partition(test_sig, part.scheme if part.scheme in SCHEMES else "pss", world, pattern, args,
                           locality=bool(part.meta.get("locality", False)))
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
    stale_prefix = f"rank{rank}/stale/"
    # the stale cache goes on with what it held (a checkpoint written without one leaves it empty)
    stale_state = job.saved(stale_prefix) if trainer.stale is not None else {}

    def restored() -> None:
        if trainer.stale is not None:
            trainer.stale.load_state_dict({k[len(stale_prefix):]: v for k, v in stale_state.items()})
        # the optimizer state carries its learning rate: a record written before it held "lr" is checked here
        lr = trainer.optimizer.param_groups[0]["lr"]
        if not math.isclose(lr, args.lr, rel_tol=1e-9):
            fail(f"--resume: the checkpoint {resume_from[1]} trained with lr {lr!r} (restored with its optimizer "
                 f"state), this run asks for --lr {args.lr!r}; resume with --lr {lr!r}, or use a new "
                 "--checkpoint-dir.")

    progress, start = job.restore(modules, trainer.optimizer, progress, extra=stale_state or None, then=restored)

    def after(loss_value: float) -> dict:
        traffic = trainer.traffic()
        for key in ("measured", "predicted"):
            for kind, value in traffic[key].items():
                progress[f"bytes_{key}"].setdefault(kind, []).append(int(value))
        if trainer.stale is not None:
            progress["stale_factor"].append(trainer.stale.history[-1]["factor"])
            progress["stale_fresh_fraction"].append(trainer.stale.fresh_fraction(trainer.comm.group))
        return {}

    def state() -> Any:
        return None if trainer.stale is None else \
            {f"{stale_prefix}{k}": v for k, v in trainer.stale.state_dict().items()}

    job.epochs(trainer, progress, start, desc=f"{user.name if user else args.model} x{world}", after=after,
               state=state)
    cuda_peak = _peak_memory_per_rank(trainer.transport, trainer.device, rank, world)
    # ---- test metric on the later snapshots, each vertex's state continued from the end of the training
    # snapshots (DistributedTrainer.evaluate(test, partition)); an attention time encoder (DySAT: position
    # embeddings of the training snapshots only) is evaluated on the test snapshots alone, from position 0
    continued = trainer.path == "blackbox" or "attention" not in {b.time_kind for b in trainer.pattern.blocks}
    if loss == "bce_link":
        scores, labels = trainer.link_scores(test_sig, test_part, continue_state=continued)  # on the device
        everyone: list = [None] * world
        dist.all_gather_object(everyone, (scores.detach().cpu().double().tolist(),  # over gloo, never NCCL
                                          labels.detach().cpu().double().tolist()), group=trainer.transport.host_group)
        metric_name = "auc"
        test_metric = roc_auc(torch.tensor(sum((e[0] for e in everyone), [])),
                              torch.tensor(sum((e[1] for e in everyone), [])))
    else:
        # the training loss (MSE) on the test snapshots, global normalizers
        metric_name, test_metric = "mse", trainer.evaluate(test_sig, test_part, continue_state=continued)["loss"]
    final = trainer.traffic()
    return {
        "schema_version": SCHEMA_VERSION, "path": args.path, "model": args.model,
        "model_class": user.target if user else None, "model_args": user.args if user else None,
        "model_kwargs": user_kwargs if user else None, "runtime_path": trainer.path, "head": describe_head(head),
        "target": args.target,
        "scheme": part.scheme, "world_size": world, "dtype": args.dtype, "hidden": args.hidden,
        "epochs": args.epochs, "fusion": args.fusion, "seed": args.seed,
        # what the run used: the optimizer's learning rate after any resume (not just the option), where it
        # resumed from
        "lr": float(trainer.optimizer.param_groups[0]["lr"]), "optimizer": "adam", "loss": loss,
        "locality": bool(part.meta.get("locality", False)), "recompute_every": args.recompute_every, "stale": args.stale_config.describe()
        if args.stale_config.enabled else "off", "stale_factor": progress.get("stale_factor", []),
        "stale_fresh_fraction": progress.get("stale_fresh_fraction", []),
        "snapshots": {"train": train_sig.num_snapshots, "test": test_sig.num_snapshots},
        "vertex_time_nodes": train_sig.num_vertex_time_nodes,
        "losses": progress["losses"], "test_metric": test_metric, "test_metric_name": metric_name,
        "test_state": "continued" if continued else "zero",
        "epoch_seconds": progress["epoch_seconds"],
        "bytes_measured": progress["bytes_measured"], "bytes_predicted": progress["bytes_predicted"],
        "load_bytes": final["load"], "partition_seconds": float(part.seconds),
        "partition_meta": {k: v for k, v in part.meta.items() if k in ("winner", "start", "cap", "coarsened")},
        "auto": part.meta.get("auto"),
        "setup_seconds": trainer.setup_seconds, **job.fields(),
        "device": str(trainer.device), "backend": trainer.transport.backend, "exchange": trainer.transport.name,
        "cuda_peak_memory_bytes": cuda_peak,
    }


def _peak_memory_per_rank(transport: Any, device: Any, rank: int, world: int) -> list:
    """``torch.cuda.max_memory_allocated`` of every rank's device (``None``
    for CPU ranks), in rank order (a collective)."""
    import torch

    mine = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1
    slots = torch.zeros(world, dtype=torch.int64)
    slots[rank] = mine  # every other rank adds 0 here: the sum is each rank's own value
    return [None if v < 0 else int(v) for v in transport.all_reduce_host(slots).tolist()]
