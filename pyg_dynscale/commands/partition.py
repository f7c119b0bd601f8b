r"""``pyg-dynscale partition PATH``: partition a dynamic graph and report its cost.

Loads ``PATH`` with :func:`pyg_dynscale.data.loaders.load`, partitions it with
``--scheme`` into ``--parts`` ranks, builds the
:class:`~pyg_dynscale.partition.CommunicationPlan` for the ``--model``'s
dependency pattern and prints bytes per epoch by kind, cut edges, the load
imbalance :math:`\lambda` and the partitioning time. ``--out FILE`` saves the
partition (:func:`~pyg_dynscale.partition.save_partition`). ``--shards DIR``
writes one shard per rank (:func:`~pyg_dynscale.distributed.write_shards`)
for ``pyg-dynscale train --shards DIR``, cut for the model ``train`` builds
(``--model`` a zoo name or the user's ``PATH.py:Name`` with
``--model-args``, ``--hidden``, ``--dtype``, ``--seed``), so that each
rank's shard fits the model it trains: decomposed-path shards (the model's
dependency pattern) for a decomposed model, black-box shards (each rank's
local subgraphs and its slice of the state plan,
:mod:`~pyg_dynscale.distributed.blackbox_shards`) for a black-box one.

With ``--json`` the output is one JSON object on stdout (keys in
``docs/cli.md``; ``lambda`` is ``null`` when a rank is empty) and no
progress bar is shown.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

from ..errors import CommandError
from .output import print_report

SCHEMA_VERSION = 1
FORMATS = ("auto", "pygt-json", "edgelist")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    from ..names import MODEL_NAMES, SCHEMES, PATTERN_MODELS as MODELS  # torch-free: --help stays fast
    from .train_options import model_type, ModelChoices

    p = subparsers.add_parser(
        "partition",
        help="partition a dynamic graph over ranks and report communication and balance",
        description="Partition a dynamic graph and report bytes per epoch, cut edges and load imbalance.",
    )
    p.add_argument("path", metavar="PATH", help="dataset file (PyGT JSON or a temporal edge list, .gz ok)")
    p.add_argument("--scheme", choices=SCHEMES, default="auto",
                   help="partition scheme; auto (default): the one with the lowest predicted epoch for --model "
                        "among pss, pts (with and without --locality), pss-ts and pgc, reported with the "
                        "candidates' predicted costs")
    p.add_argument("--parts", type=int, required=True, metavar="N", help="number of ranks")
    names = MODELS + tuple(n for n in MODEL_NAMES if n not in MODELS)
    p.add_argument("--model", type=model_type(names), choices=ModelChoices(names), default="tgcn", metavar="MODEL",
                   help=f"dependency pattern preset ({', '.join(MODELS)}; default: tgcn); any other zoo model "
                        f"({', '.join(MODEL_NAMES)}), your own (PATH.py:Name or package.module:Name with --model-args, "
                        "as train takes it), and every model with --shards: the model 'pyg-dynscale train' builds "
                        "and its pattern (black-box models get black-box shards)")
    p.add_argument("--model-args", default=None, metavar="JSON",
                   help="with --model PATH.py:Name or module:Name: the constructor's keyword arguments as a JSON "
                        "object, as train takes them")
    p.add_argument("--hidden", type=int, default=None,
                   help="hidden width of a preset or zoo model (default: 32); your own model takes its widths from "
                        "--model-args")
    p.add_argument("--blocks", type=int, default=1, help="number of DGNN blocks (default: 1)")
    p.add_argument("--gcn-layers", type=int, default=1,
                   help="tgcn: GCN layers per gate (default 1 = PyGT's T-GCN, whose only spatial rows are raw "
                        "features loaded once, so spatial cuts cost nothing per epoch; DGC's T-GCN: 2)")
    p.add_argument("--balanced", action="store_true", help="pss/pts/pss-ts: balance workload instead of counts")
    p.add_argument("--locality", action="store_true",
                   help="pts: ranks get contiguous ranges of a Cuthill-McKee vertex order (neighbours together: small "
                        "halos on the black-box path whatever the vertex ids)")
    p.add_argument("--pgc-starts", choices=("multi", "dgc"), default="multi",
                   help="pgc: 'multi' keeps the cheapest of DGC's start (label propagation + Algorithm 1) and refined "
                        "balanced PSS / PTS starts; 'dgc': DGC's own PGC only (default: multi)")
    p.add_argument("--workload", default=None, metavar="MODEL",
                   help="pgc: node-cost model, 'linear' (default), 'vertices', or a saved MLPWorkload file (DGC's MLP)")
    p.add_argument("--format", choices=FORMATS, default="auto", help="file format (default: auto)")
    p.add_argument("--window", default=None, metavar="SECONDS",
                   help="snapshot length when reading a temporal edge list: seconds, or a duration like 1d, 12h, 30min")
    p.add_argument("--seed", type=int, default=0,
                   help="seed for randomized schemes (pgc); with --shards also of the model's parameters, as train's")
    p.add_argument("--out", default=None, metavar="FILE", help="save the partition to FILE")
    p.add_argument("--shards", default=None, metavar="DIR",
                   help="write one shard per rank into DIR for 'pyg-dynscale train --shards DIR' (each rank then "
                        "reads only its part); the shards are cut for the model the train command builds (--model, "
                        "--model-args, --hidden, --dtype): decomposed-path shards for a decomposed model, black-box "
                        "shards (local subgraphs and the state plan) for a black-box one")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="with --shards: the training dtype (the plan's bytes per element; default: float32)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p


def _check(args: argparse.Namespace) -> None:
    """Reject bad options before any work; ``args.window`` becomes seconds (float)."""
    if not os.path.exists(args.path):
        raise CommandError(f"no such file: '{args.path}'.")
    if os.path.isdir(args.path):
        raise CommandError(f"'{args.path}' is a directory; give a dataset file.")
    if args.parts < 1:
        raise CommandError(f"--parts must be >= 1, got {args.parts}.")
    if (args.hidden is not None and args.hidden < 1) or args.blocks < 1 or args.gcn_layers < 1:
        raise CommandError("--hidden, --blocks and --gcn-layers must be >= 1.")
    _check_model(args)
    if args.window is not None:
        from ..data.loaders import parse_window  # imports torch: after the path's check

        try:  # the same parsing as ``inspect --window`` and the loaders
            args.window = parse_window(args.window)
        except ValueError as exc:
            raise CommandError(f"--window: {exc}") from None
    if args.scheme == "auto" and (args.balanced or args.locality or args.pgc_starts != "multi"
                                  or args.workload is not None):
        raise CommandError("--balanced, --locality, --pgc-starts and --workload choose within one scheme; "
                           "--scheme auto compares the schemes with their defaults (and pts with locality): "
                           "name the scheme, e.g. --scheme pts --locality.")
    if args.scheme == "pgc" and args.balanced:
        raise CommandError("--balanced applies to pss, pts and pss-ts; pgc balances its chunks by itself: drop --balanced.")
    if args.locality and args.scheme != "pts":
        raise CommandError(f"--locality orders the vertices of --scheme pts; it does not apply to --scheme {args.scheme}.")
    if args.scheme != "pgc" and (args.pgc_starts != "multi" or args.workload is not None):
        raise CommandError("--pgc-starts and --workload apply to --scheme pgc only.")
    if args.workload not in (None, "linear", "vertices") and not os.path.isfile(args.workload):
        raise CommandError(f"--workload: '{args.workload}' is neither 'linear', 'vertices' nor a saved MLPWorkload file.")
    if args.shards is not None:
        if os.path.exists(args.shards) and not os.path.isdir(args.shards):
            raise CommandError(f"--shards: '{args.shards}' is a file; give a directory (it is created or replaced).")
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.shards))):
            raise CommandError(f"--shards: the folder '{os.path.dirname(os.path.abspath(args.shards))}' does not "
                               "exist; create it first.")
    if args.out is not None:
        folder = os.path.dirname(os.path.abspath(args.out))
        if os.path.isdir(args.out):
            raise CommandError(f"--out: '{args.out}' is a directory; give a file name.")
        if not os.path.isdir(folder):
            raise CommandError(f"--out: the folder '{folder}' does not exist; create it first.")
    _check_columns(args.path, args.format, "partition")


def _check_columns(path: str, format: str, command: str) -> None:
    """A temporal edge list's 'source target ... time' columns, named for the command line (the loader's
    error would name its ``columns=`` argument); ``inspect`` runs it too."""
    from ..data.loaders import detect_format
    from .train_checks import check_edge_list_columns

    if (detect_format(path) if format == "auto" else format) == "edgelist":
        check_edge_list_columns(path, command)


def _check_model(args: argparse.Namespace) -> None:
    """``--model``, ``--model-args`` and ``--hidden``: a preset pattern
    (:data:`~pyg_dynscale.partition.pattern.MODELS`, without ``--shards``), or
    the model ``train`` builds (a zoo name, or the user's, imported and
    checked here: ``args.user_model``)."""
    from ..partition.pattern import MODELS
    from .user_model import is_model_spec, load_user_model

    args.user_model = None
    user = is_model_spec(args.model)
    if (args.blocks != 1 or args.gcn_layers != 1) and (args.shards is not None or user or args.model not in MODELS):
        raise CommandError(f"--blocks and --gcn-layers describe a preset pattern ({', '.join(MODELS)}, without "
                           f"--shards); --model {args.model}" + (" with --shards" if args.shards else "")
                           + " is the train command's model, whose pattern is its own (--model, --hidden): drop them.")
    if not user:
        if args.model_args is not None:
            raise CommandError(f"--model-args applies to your own model (--model PATH.py:ClassName or "
                               f"package.module:ClassName); --model {args.model} is built from the data and --hidden: "
                               "drop --model-args.")
        args.hidden = 32 if args.hidden is None else args.hidden
        return
    if args.hidden is not None:
        raise CommandError(f"--hidden {args.hidden} sets the width of the zoo's models; --model {args.model} is built "
                           f"from --model-args: give its width there (e.g. --model-args '{{\"hidden\": "
                           f"{args.hidden}}}'), and drop --hidden.")
    args.user_model = load_user_model(args.model, args.model_args)


def partition_report(args: argparse.Namespace, progress: bool = False) -> dict[str, Any]:
    """Do the work of the subcommand; return the JSON report as a dict."""
    _check(args)  # before the imports below load torch: a missing file is reported at once
    from tqdm import tqdm

    from ..data.loaders import load
    from ..errors import SignalValidationError
    from ..partition.io import save_partition
    from ..partition.metrics import evaluate
    from ..partition.pattern import MODELS, DependencyPattern
    from ..partition.plan import CommunicationPlan
    from ..partition.schemes.dispatch import partition

    steps = (["load", "supergraph", "partition", "plan", "metrics"] + (["save"] if args.out else [])
             + (["shards"] if args.shards else []))
    bar = tqdm(total=len(steps), desc="partition", disable=not progress, file=sys.stderr, leave=False, delay=1.0)
    t0 = time.perf_counter()

    def step(name: str) -> None:
        bar.set_postfix_str(name)

    step("load")
    try:
        signal = load(args.path, format=args.format, window=args.window)
    except SignalValidationError as exc:
        if exc.field == "window":  # e.g. a window too small for the file's time span
            raise CommandError(f"--window: {exc}") from None
        raise
    bar.update()
    model, path, shard_bytes = None, None, None
    if args.shards or args.user_model is not None or args.model not in MODELS:
        # the model 'pyg-dynscale train' builds: its path and the pattern it partitions for, at the training dtype
        model, path, pattern, signal = _train_model(args, signal)
    step("supergraph")
    sg = signal.supergraph()
    bar.update()
    if model is None:  # a preset
        pattern = DependencyPattern.preset(args.model, max(int(signal.num_node_features), 1), args.hidden,
                                           num_blocks=args.blocks, gcn_layers=args.gcn_layers)
    step("partition")
    opts: dict[str, Any] = {}
    if args.scheme == "pgc":
        opts.update(progress=progress, workload=args.workload)
        if args.pgc_starts == "dgc":
            opts["starts"] = ("lp",)
    else:
        if args.balanced:
            opts["balanced"] = True
        if args.locality:
            opts["locality"] = True
    if args.scheme == "auto":  # the candidates' own options: PGC's defaults, PTS with and without locality
        opts = {}
    part = partition(signal, args.scheme, args.parts, pattern, seed=args.seed, **opts)
    bar.update()
    step("plan")
    plan = CommunicationPlan.build(sg, part, pattern)
    bar.update()
    step("metrics")
    m = evaluate(signal, pattern, part, plan=plan).to_dict()
    bar.update()
    if args.out:
        step("save")
        save_partition(part, args.out)
        bar.update()
    if args.shards:
        from ..distributed.shards import read_shard, write_shards

        step("shards")
        if path == "blackbox":  # each rank's local subgraphs and its slice of the state plan, for this module
            write_shards(signal, part, model, args.shards, bytes_per_element=pattern.bytes_per_element)
        else:
            write_shards(signal, part, pattern, args.shards)
        # what `train --shards` will predict (and measure): the shards' own plan, read back from rank 0's file (a
        # black-box set's state plan moves other rows than the pattern's plan above)
        shard_bytes = read_shard(args.shards, 0, args.parts).plan.bytes_by_kind()
        bar.update()
    bar.close()
    finite = (lambda x: x if math.isfinite(x) else None)  # noqa: E731  JSON has no inf
    return {
        "schema_version": SCHEMA_VERSION, "path": args.path, "scheme": part.scheme, "parts": args.parts,
        "model": args.model, "model_class": args.user_model.target if args.user_model else None,
        "model_args": args.user_model.args if args.user_model else None, "runtime_path": path,
        "hidden": args.hidden, "blocks": args.blocks, "gcn_layers": args.gcn_layers, "balanced": bool(args.balanced),
        "locality": bool(part.meta.get("locality", args.locality)),
        "seed": args.seed, "pattern": pattern.to_dict(),
        "vertex_time_nodes": sg.num_nodes, "spatial_edges": sg.num_spatial_edges,
        "temporal_edges": sg.num_temporal_edges,
        "bytes_total": m["bytes_total"], "bytes_spatial": m["bytes_spatial"], "bytes_temporal": m["bytes_temporal"],
        "bytes_redistribution": m["bytes_redistribution"], "bytes_forward": m["bytes_forward"],
        "cut_spatial_edges": m["cut_spatial_edges"], "cut_temporal_edges": m["cut_temporal_edges"],
        "lambda": finite(m["lambda"]), "lambda_structure": finite(m["lambda_structure"]),
        "lambda_time": finite(m["lambda_time"]),
        "nodes_per_rank": m["nodes_per_rank"], "edges_per_rank": m["edges_per_rank"],
        "seconds": m["seconds"], "total_seconds": time.perf_counter() - t0, "out": args.out,
        "shards": os.path.abspath(args.shards) if args.shards else None, "shard_bytes_predicted": shard_bytes,
        **_pgc_report(part), "auto": part.meta.get("auto"),
    }


def _train_model(args: argparse.Namespace, signal: Any) -> tuple:
    """``(model, path, pattern, signal)``: the model ``pyg-dynscale train``
    builds for ``signal`` (``--model``, ``--model-args``, ``--hidden``,
    ``--seed``, at ``--dtype``), the runtime path it takes, the dependency
    pattern train partitions for, and ``signal`` (its edges sorted by
    (target, source) for a diffusion convolution, as train sorts them)."""
    import torch

    from ..errors import DynScaleError
    from ..nn.zoo import BLACK_BOX_MODELS, build_model, partition_pattern
    from ..runtime.paths import model_pattern
    from .user_model import build_user_model, needs_sorted_edges, runtime_path

    dtype = getattr(torch, args.dtype)
    bpe = torch.empty((), dtype=dtype).element_size()
    F = max(int(signal.num_node_features), 1)
    user = args.user_model
    if user is None:
        if args.model == "dcrnn":
            signal = signal.sort_edges()
        torch.manual_seed(args.seed)
        model, _, _ = build_model(args.model, F, args.hidden, num_snapshots=signal.num_snapshots,
                                  num_vertices=signal.num_vertices)
        model = model.to(dtype=dtype)
        if args.model in BLACK_BOX_MODELS:  # the white-box preset of the cell, as train partitions for it
            return model, "blackbox", partition_pattern(model, args.model, F, args.hidden, bpe), signal
        return model, "decomposed", model.dependency_pattern(bytes_per_element=bpe), signal
    model, _, _ = build_user_model(user, signal, seed=args.seed, dtype=dtype)
    if needs_sorted_edges(model):
        signal = signal.sort_edges()
    path, _ = runtime_path(model)
    try:
        pattern = model_pattern(model, signal, bytes_per_element=bpe, check=True)[0]
    except DynScaleError as exc:
        raise CommandError(f"--model {args.model}: {exc}") from None
    return model, path, pattern, signal


def _pgc_report(part: Any) -> dict[str, Any]:
    """Which PGC start won and what each candidate cost (``None`` for other schemes)."""
    if part.scheme != "pgc":
        return {"pgc_start": None, "pgc_candidate_bytes": None, "pgc_max_chunk_cost": None, "pgc_coarsened": None}
    meta = part.meta
    return {"pgc_start": meta["start"], "pgc_candidate_bytes": meta["candidate_bytes"] or None,
            "pgc_max_chunk_cost": meta["max_chunk_cost"], "pgc_coarsened": meta["coarsened"]}


def _text(r: dict[str, Any]) -> str:
    from ..partition.schemes.auto import describe_auto
    from ..partition.metrics import format_bytes

    lam = "inf" if r["lambda"] is None else f"{r['lambda']:.3f}"
    lines = [
        f"{r['path']}: {r['scheme']} into {r['parts']} parts for {r['model']} "
        + (f"({r['model_class']}, {r['runtime_path']} path)" if r["model_class"] else
           f"(hidden {r['hidden']}, {r['blocks']} block(s))"),
        f"  vertex-time nodes   {r['vertex_time_nodes']:>14,}",
        f"  spatial edges       {r['spatial_edges']:>14,}   cut: {r['cut_spatial_edges']:,}",
        f"  temporal edges      {r['temporal_edges']:>14,}   cut: {r['cut_temporal_edges']:,}",
        f"  bytes / epoch       {format_bytes(r['bytes_total']):>14}   (forward + backward)",
        f"    spatial           {format_bytes(r['bytes_spatial']):>14}",
        f"    temporal          {format_bytes(r['bytes_temporal']):>14}",
        f"    redistribution    {format_bytes(r['bytes_redistribution']):>14}",
        f"  lambda (max/min)    {lam:>14}",
        f"  nodes per rank      {r['nodes_per_rank']}",
        f"  partitioning time   {r['seconds']:>13.3f}s",
    ]
    if r["auto"]:
        lines += ["  " + line for line in describe_auto(r).splitlines()]
    if r["pgc_start"] is not None:
        names = {"lp": "DGC's label propagation + Algorithm 1", "pss": "refined balanced PSS", "pts": "refined balanced PTS"}
        lines.append(f"  pgc start           {r['pgc_start']:>14}   ({names.get(r['pgc_start'], r['pgc_start'])})")
    if r["out"]:
        lines.append(f"  saved to {r['out']}")
    if r.get("shards"):
        lines.append(f"  shards in {r['shards']} ({r['runtime_path']} path, one directory per rank; pyg-dynscale "
                     f"train --shards), {format_bytes(r['shard_bytes_predicted']['total'])} / epoch by their plan")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    progress = not args.json and sys.stderr.isatty()
    return print_report(args.json, lambda: partition_report(args, progress=progress), _text)
