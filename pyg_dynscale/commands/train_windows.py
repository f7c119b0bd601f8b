"""``pyg-dynscale train PATH --windows L``: the job of one rank of windowed
training (:class:`~pyg_dynscale.windows.WindowTrainer`, PyGT's
index-batching workflow) and its report.

Every rank builds the model from ``--seed`` and wraps model and head in
``DistributedDataParallel``. With several processes, ``--placement blocks``
(the default) and ``PATH`` a signal file (``DynamicGraphSignal.save``) or
store directory (:mod:`pyg_dynscale.data.mapped`), each rank opens it
memory-mapped and reads only the snapshots of its windows
(:mod:`~pyg_dynscale.windows.rank_view`; the report's ``bytes_read``);
otherwise (one process, ``--placement replicated``, another format, or
``--model dcrnn``, whose edges are sorted over the whole signal first) every
rank loads ``PATH`` and the trainer keeps the snapshots its placement gives
it (``blocks``: the windows of its time blocks and its share of the test
windows, the rest dropped). The
windows are split in start order: the first ``--train-ratio`` train, the next
``--val-ratio`` validate, the rest are the test windows.

Options left unset are :class:`~pyg_dynscale.windows.WindowTrainer`'s
defaults (``lr``, ``ratio``, ``batch_size``, ``horizon``, ``stride``, Adam:
:func:`~pyg_dynscale.commands.train_options.resolve_defaults`), but
``--blocks``: a fixed 8 (``WINDOW_BLOCKS``) instead of the trainer's world
size, so ``--nproc 1`` and ``--nproc 2`` train the same batches. A PyGT JSON
file is loaded with ``--feature-lags`` (default 1) raw steps per snapshot: a
window of ``L`` snapshots reads ``F + L - 1`` raw steps (the report's
``raw_steps``).

``--checkpoint-dir DIR`` writes ``train``'s checkpoints (model, head,
decoder, Adam's state, and per rank
the ``progress`` of
:meth:`WindowTrainer.state_dict <pyg_dynscale.windows.WindowTrainer.state_dict>`:
the epoch counter, the random state, the byte counters); ``--resume`` (and
the workers ``--max-restarts`` restarts) continue from the newest one bit for
bit, a checkpoint of another run refused naming the option.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Optional

from .hints import option_for
from .job import Job, fail
from .train_job import check_target, data_format, feature_lags_option, load_signal
from .train_options import PROG, SCHEMA_VERSION, window_ratio

def train_windows(args: argparse.Namespace, rank: int, world: int, init_process_group: Callable[[], None],
                  device: str = "cpu") -> dict:
    """The job of one rank on ``device``: returns the report (the same on
    every rank)."""
    import torch

    from ..errors import DynScaleError
    from ..nn.zoo import build_model
    from ..training.ranks import host_all_gather_object
    from ..windows import WindowTrainer
    from .train_checks import mismatch_message, run_record
    from .user_model import build_user_model, describe_head

    job = Job(args, rank, PROG, time.perf_counter)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    feature_lags = feature_lags_option(args, data_format(args)).get("feature_lags")  # refused here for other data
    source = _per_rank_source(args, world)  # each rank reads its part of a signal file, or None: all of it
    signal = load_signal(args) if source is None else source.signal
    if args.model == "dcrnn":  # as full-batch training: PyGT's DConv on edges sorted by (target, source)
        signal = signal.sort_edges()
    check_target(signal, args)
    fingerprint = signal.fingerprint() if source is None else source.fingerprint()  # nothing read
    job.find_resume(run_record(args, fingerprint, world, None), lambda exc: mismatch_message(exc, args))
    user = args.user_model
    user_kwargs = None
    if user is not None:
        model, head, user_kwargs = build_user_model(user, signal, seed=args.seed, dtype=dtype, target=args.target)
    init_process_group()
    if user is None:
        torch.manual_seed(args.seed)
        model, head, _ = build_model(args.model, signal.num_node_features, args.hidden,
                                     num_snapshots=signal.num_snapshots, num_vertices=signal.num_vertices)
    model = model.to(device=device, dtype=dtype)
    head = head.to(device=device, dtype=dtype) if head is not None else None
    try:  # the API's defaults for what the CLI does not set (train_options.resolve_defaults filled the rest)
        trainer = WindowTrainer(model, signal if source is None else source, lags=args.windows, horizon=args.horizon,
                                batch_size=args.batch_size, stride=args.stride, lr=args.lr, head=head,
                                ratio=window_ratio(args), seed=args.seed, placement=args.placement, blocks=args.blocks)
    except DynScaleError as exc:
        field = getattr(exc, "field", "")
        # the field of a WindowTrainer error -> the option that sets it (hints' table for train)
        fail(f"{option_for('train', field, '--model' if field in ('model', 'head') else '--lags')}: {exc}")
    if trainer.view.split("test").numel() == 0:
        fail(f"--train-ratio {args.train_ratio} and --val-ratio {args.val_ratio} leave no test window "
             f"({trainer.view.num_windows} windows of --lags {args.windows}); use a smaller --train-ratio.")
    num_vt = signal.num_vertex_time_nodes
    bytes_read = host_all_gather_object(None if source is None else source.bytes_read)
    del signal, source  # under --placement blocks the trainer holds its snapshots only
    progress: dict = {"losses": [], "epoch_seconds": [], "batch_losses": []}
    extra = trainer.state_dict()["progress"]  # this rank's keys: DCP fills them in place
    progress, start = job.restore(trainer.modules, trainer.optimizer, progress, extra=extra,
                                  then=lambda: trainer.load_state_dict({**trainer.state_dict(), "progress": extra}))

    def after(loss: float) -> dict:
        progress["batch_losses"] = list(trainer.batch_losses)
        return {}

    job.epochs(trainer, progress, start, desc=f"{user.name if user else args.model} windows x{world}", after=after,
               state=lambda: trainer.state_dict()["progress"])
    test = trainer.evaluate("test")
    val = trainer.evaluate("val") if trainer.view.split("val").numel() else None
    traffic = trainer.traffic()  # a collective
    every = host_all_gather_object(trainer.store.x.shape[0])  # the rows each rank holds
    row_bytes = trainer.store.x[:1].numel() * trainer.store.x.element_size()
    trainer.close()  # DDP's reducer released before the process group is destroyed
    return {
        "schema_version": SCHEMA_VERSION, "mode": "windows", "path": args.path, "model": args.model,
        "model_class": user.target if user else None, "model_args": user.args if user else None,
        "model_kwargs": user_kwargs, "head": describe_head(head), "target": args.target,
        "world_size": world, "dtype": args.dtype, "hidden": args.hidden, "epochs": args.epochs, "seed": args.seed,
        "lr": trainer.lr, "optimizer": type(trainer.optimizer).__name__.lower(), "loss": trainer.loss_kind,
        "windows": {"lags": trainer.view.lags, "horizon": trainer.view.horizon, "stride": trainer.view.stride,
                    "batch_size": trainer.batch_size, "blocks": trainer.blocks, "placement": trainer.placement,
                    **effective_window(trainer.view.lags, trainer.view.horizon, feature_lags),
                    "train": int(trainer.view.split("train").numel()), "val": int(trainer.view.split("val").numel()),
                    "test": int(trainer.view.split("test").numel())},
        "vertex_time_nodes": num_vt, "held_vertex_time_nodes": every,
        "per_rank_read": bytes_read[0] is not None, "bytes_read": bytes_read,
        "held_feature_bytes": [n * row_bytes for n in every],
        "losses": progress["losses"], "batch_losses": progress["batch_losses"],
        "test_metric": test["mse"], "test_metric_name": "mse",
        "test_metrics": dict(test), "val_metrics": None if val is None else dict(val), "epoch_seconds": progress["epoch_seconds"],
        "traffic": dict(traffic["totals"]),  # this rank's running totals by kind and its optimizer steps
        "device": str(trainer.device), **job.fields(),
    }


def effective_window(lags: int, horizon: int, feature_lags: Optional[int]) -> dict:
    """What one input window reads and predicts, in raw time steps: with
    PyGT JSON data, snapshot :math:`i` stacks raw steps :math:`i .. i+F-1`
    (:math:`F` = ``feature_lags``) and its target is raw step :math:`i+F`, so
    a window of :math:`L` snapshots :math:`s .. s+L-1` reads
    :math:`F + L - 1` raw steps and predicts the :math:`H` steps after them.
    Other data: the snapshots as they are (``feature_lags`` ``None``, one
    snapshot a step)."""
    return {"feature_lags": feature_lags, "raw_steps": lags + (feature_lags or 1) - 1}


def _per_rank_source(args: argparse.Namespace, world: int) -> Optional[Any]:
    """The signal file each rank reads its part of (a
    :class:`~pyg_dynscale.windows.mapped_signal.MappedSignal`), or ``None``
    where every rank loads the whole signal: one process, ``--placement
    replicated``, a dataset format other than a signal file or store
    directory, or ``--model dcrnn`` (its edges are sorted over the whole
    signal first)."""
    from ..data.loaders.auto import detect_format
    from ..errors import DynScaleError
    from ..windows.mapped_signal import MappedSignal

    if world < 2 or (args.placement or "blocks") != "blocks" or args.model == "dcrnn":
        return None
    path = args.path
    if not os.path.isdir(path):
        if not os.path.isfile(path):
            return None
        fmt = args.format if args.format != "auto" else detect_format(path)
        if fmt != "dynscale":
            return None
    try:
        return MappedSignal(path)
    except DynScaleError as exc:
        fail(str(exc) if path in str(exc) else f"PATH '{path}': {exc}")
    return None


def print_windows_report(r: dict) -> None:
    """The text report of a ``--windows`` run (rank 0)."""
    from ..partition.metrics import format_bytes

    w, t = r["windows"], r["traffic"]
    secs = r["epoch_seconds"]
    steady = secs[1:] or secs
    held = r["held_feature_bytes"]
    fl = w.get("feature_lags")
    lines = [
        f"{r['model']} on {r['path']}: windows of {w['lags']} (horizon {w['horizon']}, stride {w['stride']}), "
        f"{r['world_size']} process(es), placement {w['placement']}, {r['dtype']}, {w['train']} train / "
        f"{w.get('val', 0)} val / {w['test']} test windows, batch {w['batch_size']} in {w['blocks']} blocks",
        "  each input        " + (f"{w['raw_steps']} raw steps (--feature-lags {fl} + --lags {w['lags']} - 1), "
                                  if fl is not None else f"{w['lags']} snapshots, ")
        + f"predicts the next {w['horizon']} step(s)",
        f"  optimizer         {r['optimizer']}, lr {r['lr']:g} (same result for any --nproc dividing --blocks "
        f"{w['blocks']}; --blocks and --batch-size change it)",
        f"  final train loss  {r['losses'][-1]:.6f}",
        f"  test MSE          {r['test_metrics']['mse']:.6f}   MAE {r['test_metrics']['mae']:.6f}   "
        f"RMSE {r['test_metrics']['rmse']:.6f}",
        *([f"  val MSE           {r['val_metrics']['mse']:.6f}   ({w['val']} windows)"] if r.get("val_metrics") else []),
        f"  epoch time        {sum(steady) / len(steady) * 1e3:.1f} ms (mean after the first; slowest rank)",
        f"  features held     {', '.join(format_bytes(b) for b in held)} (per rank)",
        f"  sent per rank     features {format_bytes(t['features'])}, gradients {format_bytes(t['gradients'])} "
        f"({t['steps']} steps), loss {format_bytes(t['loss'])}, metrics {format_bytes(t['metrics'])}",
    ]
    print("\n".join(lines), flush=True)

