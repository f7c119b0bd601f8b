"""The options of ``pyg-dynscale train`` (its argument parser and choices)."""
from __future__ import annotations

import argparse
from typing import Any


SCHEMA_VERSION = 1
FORMATS = ("auto", "pygt-json", "edgelist", "dynscale")
#: the parameter dtypes ``--dtype`` offers and accepts
DTYPES = ("float32", "float64")
#: dtypes a user may ask for that are refused with the reason (by ``--dtype``'s ``type=``, before argparse's
#: ``choices`` check: ``--help`` lists exactly :data:`DTYPES`)
REFUSED_DTYPES = ("float16", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")
PROG = "pyg-dynscale train"
#: ``--placement``'s choices (``pyg_dynscale.windows.placement.PLACEMENTS``)
WINDOW_PLACEMENTS = ("blocks", "replicated")
#: ``--blocks``' default: a fixed number of window blocks, so the processes (any divisor of it) never change what is
#: trained (WindowTrainer's own default, ``blocks=None``, is the world size)
WINDOW_BLOCKS = 8
#: ``--feature-lags``' default with ``--lags``: one raw step per snapshot, so ``--lags L`` reads L raw steps
WINDOW_FEATURE_LAGS = 1
#: Options of the launcher only: stripped from the command line the workers get.
LAUNCHER_OPTIONS = ("--nproc", "--max-restarts")



def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from .job import add_job_options
    from ..names import INPUT_SIZE_KEYWORDS, MODEL_NAMES, SCHEMES, TARGETS  # torch-free: --help stays fast

    p = subparsers.add_parser(
        "train", help="train a dynamic GNN across processes (torchrun) and report the test metric and traffic",
        description="Distributed full-batch training of a dynamic GNN on a snapshot graph; parts = processes.",
    )
    p.add_argument("path", metavar="PATH", nargs="?", default=None,
                   help="dataset: PyGT JSON, a temporal edge list (.gz ok), a saved signal (.pt), or 'england_covid' "
                        "(embedded, no file); omitted with --shards")
    p.add_argument("--shards", default=None, metavar="DIR",
                   help="train on the shards in DIR (pyg-dynscale partition PATH --parts N --shards DIR) instead of "
                        "PATH: each rank reads only its own part; every snapshot trains (no test split)")
    p.add_argument("--format", choices=FORMATS, default="auto", help="file format (default: auto)")
    p.add_argument("--window", default=None, metavar="DURATION",
                   help="snapshot length for edge lists: seconds or a duration like 1d, 12h, 30min")
    p.add_argument("--target", choices=TARGETS, default="node",
                   help="node: regress y (edge lists: next snapshot's degree), MSE; link: predict next snapshot's "
                        "edges, ROC AUC (default: node)")
    p.add_argument("--model", type=model_type(MODEL_NAMES), choices=ModelChoices(MODEL_NAMES), default="tgcn",
                   metavar="MODEL",
                   help=f"a model of the zoo ({', '.join(MODEL_NAMES)}; default: tgcn), or your own: PATH.py:Name "
                        "(a file, imported by path) or package.module:Name (importable from PYTHONPATH or the current "
                        "directory), Name a torch.nn.Module class or a function returning one. It is built with "
                        "--model-args after torch.manual_seed(--seed); the input size parameters it takes ("
                        f"{', '.join(INPUT_SIZE_KEYWORDS)}) are set to the data's node features unless "
                        "--model-args gives them. Node targets: if its output width differs from the target's, "
                        "ReLU + Linear(width, 1) follows it (as the zoo's)")
    p.add_argument("--model-args", default=None, metavar="JSON",
                   help="with --model PATH.py:Name or module:Name: the constructor's keyword arguments as a JSON "
                        "object, e.g. '{\"hidden\": 16}'")
    p.add_argument("--scheme", choices=SCHEMES, default="auto",
                   help="partition scheme; auto (default): the one with the lowest predicted epoch for this model "
                        "and data among pss, pts (with and without --locality), pss-ts and pgc, reported with the "
                        "candidates' predicted costs")
    p.add_argument("--locality", action="store_true",
                   help="pts: ranks get contiguous ranges of a Cuthill-McKee vertex order (neighbours together: small "
                        "halos on the black-box path whatever the vertex ids)")
    p.add_argument("--lr", type=float, default=None,
                   help="Adam learning rate (default: the trainer's, DistributedTrainer's 0.01; with --lags "
                        "WindowTrainer's 1e-3)")
    p.add_argument("--hidden", type=int, default=None,
                   help="hidden width of a zoo model (default: 32); your own model takes its widths from --model-args")
    p.add_argument("--seed", type=int, default=0, help="seed of the parameters and of PGC (default: 0)")
    p.add_argument("--dtype", type=_dtype, choices=DTYPES, default="float32",
                   help="parameter dtype (default: float32)")
    p.add_argument("--recompute-every", type=int, default=None, metavar="B",
                   help="gradient checkpointing: keep the activations of B snapshots at a time and recompute them in "
                        "the backward (memory of one window instead of all snapshots; about one extra forward)")
    p.add_argument("--fusion", choices=("full", "none"), default="full",
                   help="full: one fused call per rank; none: one call and halo exchange per snapshot")
    p.add_argument("--stale", default="off", metavar="POLICY",
                   help="stale embedding cache (DGC 5.2): off (exact, default), drift or drift:<eps> (the recommended "
                        "one: send the most drifted rows until each receiver's copy is within eps, default 0.2, of the "
                        "current rows in relative norm), static:<c> (theta = c*D), printed (Eq. 6 as printed), intent "
                        "(Eq. 6 sign-corrected), ramp, rise, adaptive (deprecated: static:0.9 over every kind)")
    p.add_argument("--stale-kinds", default=None, metavar="KINDS",
                   help="exchange kinds the cache covers, comma-separated (default: spatial,temporal,redistribution; "
                        "drift and adaptive: also readout)")
    p.add_argument("--stale-kind", action="append", default=[], metavar="KIND=POLICY",
                   help="a policy for one exchange kind, overriding --stale there (repeatable), e.g. temporal=static:0.3")
    p.add_argument("--stale-backward", choices=("skip", "send"), default="skip",
                   help="gradients of cached rows: skip (constants, default) or send (applied to the current rows)")
    p.add_argument("--stale-scope", choices=("local", "global"), default="local",
                   help="D = largest distance per sending rank (local, default) or over all ranks (global)")
    p.add_argument("--train-ratio", type=float, default=None,
                   help="temporal split: first share trains (default: 0.8, DynamicGraphSignal.split's; with --lags "
                        "WindowTrainer's 0.7 of the windows)")
    p.add_argument("--val-ratio", type=float, default=None,
                   help="with --lags: the validation windows' share, after the training windows (default: "
                        "WindowTrainer's 0.1); the rest are the test windows")
    p.add_argument("--partition", default=None, metavar="FILE", help="use this saved partition of the training split")
    p.add_argument("--save-partition", default=None, metavar="FILE", help="save the training split's partition")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="auto: CUDA when available, else cpu (default); cuda: rank i of a machine on "
                        "cuda:(i %% GPUs), NCCL with one GPU per rank, gloo with pinned-host staging when ranks "
                        "outnumber GPUs")
    p.add_argument("--lags", "--windows", dest="windows", type=int, default=None, metavar="L",
                   help="windowed training (PyGT's index-batching, ReInc's placement; WindowTrainer's lags): windows "
                        "of L snapshots predict the next step, batched, one optimizer step per batch; --train-ratio "
                        "and --val-ratio split the windows. --windows L is the same option")
    p.add_argument("--feature-lags", type=int, default=None, metavar="F",
                   help="PyGT JSON data: the raw steps stacked into each snapshot's features (the loaders' "
                        "feature_lags, PyGT's get_dataset(lags)); default: 1 with --lags (a window of L snapshots "
                        "covers F + L - 1 raw steps), else the dataset's PyGT default (4 or 8)")
    p.add_argument("--horizon", type=int, default=None, metavar="H",
                   help="with --lags: predicted steps per window, H <= L (default: 1)")
    p.add_argument("--stride", type=int, default=None, metavar="S",
                   help="with --lags: distance between window starts (default: 1)")
    p.add_argument("--batch-size", type=int, default=None, metavar="B",
                   help="with --lags: windows per global batch, a multiple of --blocks (default: WindowTrainer's 64)")
    p.add_argument("--blocks", type=int, default=None, metavar="P",
                   help=f"with --lags: consecutive window blocks, each giving B/P windows to every batch; what is "
                        f"trained depends on P, not on the processes, which must divide it (default: "
                        f"{WINDOW_BLOCKS}, the same result with --nproc 1, 2, 4, 8)")
    p.add_argument("--placement", choices=WINDOW_PLACEMENTS, default=None,
                   help="with --lags: blocks (default: each process holds the snapshots of its window blocks, no "
                        "feature bytes exchanged) or replicated (the whole signal on every process)")
    add_job_options(p, epochs=50, checkpoint_every=10, checkpoint="model, head, optimizer, partition, stale cache")
    return p


def api_default(owner: Any, name: str) -> Any:
    """The default of keyword ``name`` of ``owner`` (a trainer class or a
    function): the CLI reads the API's defaults instead of repeating them."""
    import inspect

    return inspect.signature(owner).parameters[name].default


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options left at ``None`` with the API's defaults for the
    mode: full-batch training takes :class:`~pyg_dynscale.distributed.DistributedTrainer`'s
    ``lr`` and :meth:`DynamicGraphSignal.split <pyg_dynscale.data.DynamicGraphSignal.split>`'s
    ``train_ratio``; ``--lags`` takes :class:`~pyg_dynscale.windows.WindowTrainer`'s
    ``lr``, ``ratio``, ``batch_size``, ``horizon``, ``stride`` and
    ``placement`` (``"blocks"`` under a process group), plus the CLI's own
    :data:`WINDOW_BLOCKS` (``--feature-lags``' default depends on the data's
    format: ``train_job.feature_lags_option``). Options of
    windowed training stay ``None`` without ``--lags`` (the checks refuse them
    there). Idempotent: the launcher and every rank run it."""
    if getattr(args, "windows", None) is None:
        if getattr(args, "lr", None) is None:
            from ..distributed import DistributedTrainer

            args.lr = api_default(DistributedTrainer, "lr")
        if getattr(args, "train_ratio", None) is None:
            from ..data import DynamicGraphSignal

            args.train_ratio = api_default(DynamicGraphSignal.split, "train_ratio")
        return args
    from ..windows import WindowTrainer
    from ..windows.block_placement import check_placement

    ratio = api_default(WindowTrainer, "ratio")
    fill = {"lr": api_default(WindowTrainer, "lr"), "train_ratio": ratio[0], "val_ratio": ratio[1],
            "batch_size": api_default(WindowTrainer, "batch_size"), "horizon": api_default(WindowTrainer, "horizon"),
            "stride": api_default(WindowTrainer, "stride"),
            "placement": check_placement(api_default(WindowTrainer, "placement")), "blocks": WINDOW_BLOCKS}
    for name, value in fill.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args


def window_ratio(args: argparse.Namespace) -> tuple:
    """``WindowTrainer``'s ``ratio`` from ``--train-ratio`` and ``--val-ratio``: the test windows are the rest."""
    return (args.train_ratio, args.val_ratio, 1.0 - args.train_ratio - args.val_ratio)


def dtype_refusal(dtype: str) -> str:
    """Why ``--dtype DTYPE`` (one of :data:`REFUSED_DTYPES`) is refused."""
    return (f"{dtype} is not supported: the layers' sparse aggregation, GCN normalization and LSTM/GRU kernels on "
            "CPU need float32 or float64, and half-precision Adam updates would not match the single-process "
            "result. Use --dtype float32 (default) or float64.")


def _dtype(value: str) -> str:
    """``--dtype``'s ``type=``: a refused dtype is one line saying why (any other value goes on to ``choices``)."""
    if value in REFUSED_DTYPES:
        raise argparse.ArgumentTypeError(dtype_refusal(value))
    return value


class ModelChoices(tuple):
    """``--model``'s choices: the zoo's names (what ``--help`` and error messages list), and any ``SOURCE:Name``."""

    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and ":" in value) or tuple.__contains__(self, value)


def model_type(names: tuple) -> Any:
    """``--model``'s ``type=``: a zoo name, or ``SOURCE:Name`` (checked and imported by ``check_args``)."""

    def model(value: str) -> str:
        if ":" in value or value in names:
            return value
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join(repr(n) for n in names)}, or give your own model as "
            "PATH.py:ClassName or package.module:ClassName)")

    return model
