r"""``pyg-dynscale train-events PATH``: a memory-based temporal GNN (PyG's TGN)
trained on an event stream with DistTGL's :math:`i \times j \times k`
parallelism (:class:`~pyg_dynscale.ctdg.MemoryTrainer`).

Started like ``pyg-dynscale train``: ``--nproc N`` starts ``N`` local
processes through torchrun's machinery (``--max-restarts``), ``torchrun
--nproc-per-node N -m pyg_dynscale train-events PATH ...`` runs the same job,
and without either one process runs the schedule of ``--parallelism`` serially
(its emulation: the same numbers as ``i*j*k`` processes). Every rank reads
``PATH`` (JODIE CSV, or a temporal edge list), builds PyG's TGN modules from
``--seed``, and trains; rank 0 shows a progress bar and reports validation
and test AP / AUC / MRR (memory copy 0, DistTGL's evaluation), events per
second and the memory bytes moved (``--json``: one JSON object, keys in
``docs/cli.md``).

``--checkpoint-dir DIR`` writes a checkpoint every ``--checkpoint-every``
epochs and after the last (:mod:`~pyg_dynscale.commands.events_checkpoint`:
modules, optimizer, every memory copy with its message stores and neighbour
loader, the random state); ``--resume`` continues from the newest one, bit for
bit, and refuses one written by another run naming the option; with
``--max-restarts`` torchrun's restarted workers resume that way.

``--memory-placement partitioned|sven`` partitions the node memory by owner
(DepComm / Sven's redundancy-free exchange) with ``--partition``: a method of
:func:`~pyg_dynscale.ctdg.memory_partition.partition_vertices` or an owner tensor
saved by ``pyg-dynscale partition-events --out FILE`` (checked here: integer,
one entry per node, one part per process); ``--gradient-sync delayed`` is
Sven's asynchronous all-reduce (not exact), ``--micro-batches N|auto`` its
micro-batch pipelining. The report adds
:meth:`~pyg_dynscale.ctdg.MemoryTrainer.traffic` summed over the processes.

``--event-placement auto`` (the default) gives each process of a partitioned
memory (``--memory-placement partitioned|sven`` on several processes) only its
events and its owned vertices' neighbour index and mailbox
(``MemoryTrainer(event_placement="per_rank")``: the same numbers), and the
whole stream otherwise (one process, a replicated memory, ``--partition
flexbicut``); ``per_rank`` asks for it explicitly (refused where it does not
run), ``whole`` for the whole stream on every process. With events per rank
``PATH`` may be an event store directory (``pyg_dynscale.ctdg.ingest_jodie_csv``'s
``out``), of which each process reads only its ranges. The report's
``event_placement`` is the placement in effect.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any, Callable

from .job import (Job, add_job_options, check_checkpoint_options, check_launch_options, fail, group_timeout,
                  in_torchrun, start)
from .hints import FIELD_OPTIONS as HINT_OPTIONS
from .output import report_json

PROG = "pyg-dynscale train-events"
FORMATS = ("auto", "jodie", "edgelist")
DTYPES = ("float32", "float64")
DEVICES = ("cpu", "cuda")
STATIC = ("none", "learnable")
#: ``--memory-placement``'s choices (``pyg_dynscale.ctdg.placement.PLACEMENTS``)
PLACEMENTS = ("replicated", "partitioned", "sven")
#: ``--partition``'s methods (anything else names an owner-tensor file)
PARTITION_METHODS = ("range", "interval", "flexbicut")
GRADIENT_SYNC = ("sync", "delayed")
#: ``--event-placement``'s choices (``MemoryTrainer``'s ``event_placement``)
EVENT_PLACEMENTS = ("auto", "whole", "per_rank")
SCHEMA_VERSION = 1

__all__ = ["add_parser", "run", "train_events", "check_args"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train-events", help="train PyG's TGN on an event stream with DistTGL's i x j x k parallelism (torchrun)",
        description="Memory-based temporal GNN (TGN) on an event stream: mini-batch x epoch x memory parallelism.")
    p.add_argument("path", metavar="PATH", help="events: a JODIE CSV (user,item,timestamp,label[,features]) or a "
                                                "temporal edge list (src dst time)")
    p.add_argument("--format", choices=FORMATS, default="auto",
                   help="auto (default): jodie for .csv / .csv.gz, else edgelist")
    p.add_argument("--model", type=_model, default="tgn", help="the model: tgn, PyG's TGN example (the only one)")
    p.add_argument("--parallelism", default="1,1,1", metavar="I,J,K",
                   help="mini-batch, epoch and memory parallelism; i*j*k = processes (default: 1,1,1; without "
                        "--nproc and torchrun, one process emulates it)")
    p.add_argument("--batch-size", type=int, default=200, metavar="B", help="events per local batch (default: 200)")
    p.add_argument("--lr", type=float, default=1e-4, help="Adam learning rate (default: 1e-4, the example's)")
    p.add_argument("--lr-scaling", choices=("linear", "sqrt", "none"), default="linear",
                   help="the rate under --parallelism I,J,K: --lr times I (linear, the default: DistTGL's), times "
                        "sqrt(I), or --lr (none); I = 1: --lr")
    p.add_argument("--seed", type=int, default=0, help="seed of the modules and the negatives (default: 0)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="parameter dtype (default: float32)")
    p.add_argument("--memory-dim", type=int, default=100, help="TGN memory width (default: 100)")
    p.add_argument("--time-dim", type=int, default=100, help="time encoding width (default: 100)")
    p.add_argument("--embedding-dim", type=int, default=100, help="embedding width (default: 100)")
    p.add_argument("--num-neighbors", type=int, default=10, help="LastNeighborLoader size (default: 10)")
    p.add_argument("--static-memory", choices=STATIC, default="none",
                   help="DistTGL's static node memory: none (default) or learnable")
    p.add_argument("--memory-service", action="store_true",
                   help="serve memory reads and writes from a thread in the schedule's order (DistTGL 3.3; j = 1)")
    p.add_argument("--prefetch", action="store_true",
                   help="look up the next step's neighbours on a thread while the current step finishes (j = 1)")
    p.add_argument("--memory-placement", choices=PLACEMENTS, default="replicated",
                   help="replicated (default: a whole memory copy per process, DistTGL), partitioned (each process "
                        "owns the rows of its vertices, DepComm) or sven (owners + each distinct vertex once per "
                        "exchange); the partitioned ones need --parallelism N,1,1")
    p.add_argument("--partition", default=None, metavar="range|interval|flexbicut|FILE",
                   help="with --memory-placement partitioned/sven: the owner of every vertex, a method (default: "
                        "range) or an owner tensor saved by `pyg-dynscale partition-events --out FILE`")
    p.add_argument("--gradient-sync", choices=GRADIENT_SYNC, default="sync",
                   help="sync (default) or delayed: Sven's asynchronous all-reduce, each step applies the previous "
                        "step's gradient (not exact)")
    p.add_argument("--micro-batches", default="1", metavar="N|auto",
                   help="with --memory-placement sven: split each local batch into N micro-batches whose dispatch "
                        "overlaps the previous one's compute, or auto (Sven's adaptive n; default: 1)")
    p.add_argument("--event-placement", choices=EVENT_PLACEMENTS, default="auto",
                   help="auto (default: per_rank with --memory-placement partitioned|sven on several processes, "
                        "except --partition flexbicut; else whole), whole (every process holds the whole stream) or "
                        "per_rank (each process holds its events and its vertices' neighbours and messages)")
    p.add_argument("--val-ratio", type=float, default=0.15, help="validation share of the events (default: 0.15)")
    p.add_argument("--test-ratio", type=float, default=0.15, help="test share of the events (default: 0.15)")
    p.add_argument("--device", choices=DEVICES, default="cpu",
                   help="cpu (gloo, default) or cuda (rank r on cuda:(LOCAL_RANK %% GPUs), NCCL; untested here)")
    add_job_options(p, epochs=5, checkpoint_every=1,
                    checkpoint="modules, optimizer, memory copies, message stores, neighbours")
    return p


def _model(value: str) -> str:
    if value != "tgn":
        raise argparse.ArgumentTypeError(f"{value!r}: only 'tgn' (PyG's TGN example) is built")
    return value


def parse_parallelism(text: str) -> tuple[int, int, int]:
    parts = str(text).replace("x", ",").split(",")
    try:
        i, j, k = (int(x) for x in parts)
    except ValueError:
        fail(f"--parallelism must be I,J,K (three integers >= 1), got {text!r}.")
    if min(i, j, k) < 1:
        fail(f"--parallelism must be I,J,K (three integers >= 1), got {text!r}.")
    return i, j, k


def parse_micro_batches(text: str):
    """``--micro-batches``: an integer >= 1 or ``"auto"``."""
    if str(text) == "auto":
        return "auto"
    try:
        n = int(str(text))
    except ValueError:
        n = 0
    if n < 1:
        fail(f"--micro-batches must be an integer >= 1 or auto, got {text!r}.")
    return n


def _expected_world(args: argparse.Namespace) -> int:
    """The processes the job will have: ``--nproc``, torchrun's world size, or 1."""
    if args.nproc is not None:
        return args.nproc
    return int(os.environ.get("WORLD_SIZE", "1")) if in_torchrun() else 1


def load_owner_file(path: str, world: int):
    """The ``[N]`` int64 owner tensor of ``--partition FILE`` (``partition-events --out``), checked for
    what needs no data: a 1-D integer tensor whose parts are the processes ``0 .. world-1``."""
    import torch

    fix = f"save one with `pyg-dynscale partition-events PATH --parts {world} --out FILE`"
    if not os.path.isfile(path):
        fail(f"--partition {path!r} is neither a method ({', '.join(PARTITION_METHODS)}) nor a file; give a method "
             f"or an owner tensor: {fix}.")
    try:
        owner = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same refusal
        fail(f"--partition {path}: not a saved tensor ({type(exc).__name__}); {fix}.")
    if not isinstance(owner, torch.Tensor):
        fail(f"--partition {path}: holds a {type(owner).__name__}, not an owner tensor; {fix}.")
    if owner.dtype.is_floating_point or owner.dtype.is_complex or owner.dtype == torch.bool:
        fail(f"--partition {path}: the owner tensor is {str(owner.dtype).replace('torch.', '')}, not an integer "
             f"tensor; {fix}.")
    if owner.dim() != 1 or owner.numel() == 0:
        fail(f"--partition {path}: the owner tensor has shape {list(owner.shape)}, not one owner per node; {fix}.")
    owner = owner.to(torch.long)
    lo, parts = int(owner.min()), int(owner.max()) + 1
    if lo < 0 or parts != world:
        fail(f"--partition {path}: the owner tensor has parts {lo} .. {parts - 1} for {world} process(es) (one "
             f"part per process); {fix}" + (f", or use --nproc {parts}." if lo >= 0 else "."))
    return owner


def partition_arg(args: argparse.Namespace, num_nodes: int, world: int):
    """``MemoryTrainer``'s ``partition=``: ``None`` (replicated), a method, or the checked owner tensor of
    ``--partition FILE`` (one entry per node of ``PATH``)."""
    if args.memory_placement == "replicated":
        return None
    if args.partition is None or args.partition in PARTITION_METHODS:
        return args.partition or "range"
    owner = load_owner_file(args.partition, world)
    if owner.numel() != num_nodes:
        fail(f"--partition {args.partition}: the owner tensor has {owner.numel()} entries for the {num_nodes} nodes "
             f"of PATH; save it from the same PATH: `pyg-dynscale partition-events PATH --parts {world} --out "
             "FILE`.")
    return owner


def _check_sven_options(args: argparse.Namespace, par: tuple) -> None:
    """``--memory-placement`` / ``--partition`` / ``--gradient-sync`` / ``--micro-batches`` (no data)."""
    i, j, k = par
    placement = args.memory_placement
    if placement == "replicated":
        if args.partition is not None:
            fail(f"--partition {args.partition}: a replicated memory has no owners; drop --partition or use "
                 "--memory-placement partitioned or sven.")
    else:
        if j > 1 or k > 1:
            fail(f"--memory-placement {placement} runs mini-batch parallelism only: use --parallelism "
                 f"{i * j * k},1,1 (one trainer and one owner per process).")
        if args.memory_service:  # --prefetch: MemoryTrainer says whether it is built with a partitioned memory
            fail(f"--memory-placement {placement} does not combine with --memory-service: drop --memory-service.")
        if args.partition is not None and args.partition not in PARTITION_METHODS:
            load_owner_file(args.partition, _expected_world(args))
    micro = parse_micro_batches(args.micro_batches)
    if micro != 1 and placement != "sven":
        fail(f"--micro-batches {micro} pipelines Sven's partitioned dispatch: add --memory-placement sven, or drop "
             "--micro-batches.")
    _check_event_placement(args, micro)


def _check_event_placement(args: argparse.Namespace, micro) -> None:
    """``--event-placement per_rank`` and the options it runs with (``MemoryTrainer``'s rules, named by option)."""
    if getattr(args, "event_placement", "auto") != "per_rank":  # auto resolves to what the options allow
        return
    if args.memory_placement == "replicated":
        fail("--event-placement per_rank keeps each vertex's neighbours and messages at the owner of its memory row: "
             "add --memory-placement partitioned or sven, or use --event-placement whole (or auto).")
    if args.partition == "flexbicut":
        fail("--partition flexbicut does not combine with --event-placement per_rank (its pre-sampling walks the "
             "whole stream on every process: save its owners with `pyg-dynscale partition-events PATH --parts N "
             "--out FILE` and give --partition FILE): drop --partition, or use --event-placement whole (or auto).")


def _check_combinations(args: argparse.Namespace, par: tuple) -> None:
    """The option combinations MemoryTrainer builds (its own check, ``ctdg.options.check_combinations``), run
    here before PATH is read and any process starts, instead of when the trainer is built."""
    from ..ctdg.options import check_combinations
    from ..errors import DynScaleError

    try:
        check_combinations(par, _expected_world(args), memory_placement=args.memory_placement,
                           micro_batches=parse_micro_batches(args.micro_batches), prefetch=args.prefetch,
                           memory_service=args.memory_service, overlap_aggregation=False)
    except DynScaleError as exc:
        fail(f"not built for these options: {exc}")


def check_args(args: argparse.Namespace) -> None:
    """Checks that need no data (the launcher and every rank)."""
    check_checkpoint_options(args)
    if os.path.isdir(args.path) and not is_event_store(args.path):
        fail(f"PATH '{args.path}' is a directory but no event store (no meta.json); give an events file or a store "
             "written by pyg_dynscale.ctdg.ingest_jodie_csv.")
    if not os.path.exists(args.path):
        fail(f"no such file: PATH '{args.path}'.")
    import torch  # after the path's check: a missing file is reported before torch loads

    for name in ("epochs", "batch_size", "memory_dim", "time_dim", "embedding_dim", "num_neighbors", "threads"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    check_launch_options(args)
    for name in ("lr", "timeout"):
        if not (math.isfinite(getattr(args, name)) and getattr(args, name) > 0):
            fail(f"--{name} must be a positive number, got {getattr(args, name)}.")
    if not (0 <= args.val_ratio < 1 and 0 <= args.test_ratio < 1 and args.val_ratio + args.test_ratio < 1):
        fail(f"--val-ratio {args.val_ratio} and --test-ratio {args.test_ratio} must be >= 0 with a sum below 1.")
    for name, when in (("val_ratio", "after every epoch"), ("test_ratio", "after the last epoch")):
        if getattr(args, name) == 0:  # refused here, not by the evaluation after training
            split = name.split("_")[0]
            fail(f"--{split}-ratio 0 leaves no {split} events, and train-events scores the {split} events {when}; "
                 f"give --{split}-ratio a share above 0 (default 0.15).")
    par = parse_parallelism(args.parallelism)
    i, j, k = par
    if args.nproc is not None and i * j * k != args.nproc:
        fail(f"--parallelism {args.parallelism}: i*j*k = {i * j * k} trainers for --nproc {args.nproc}; make them "
             f"equal (e.g. --parallelism {args.nproc},1,1 or 1,1,{args.nproc}).")
    if args.memory_service and (j > 1 or (k > 1 and args.nproc is None and not in_torchrun())):
        fail("--memory-service serves one memory copy per process without epoch parallelism: use j = 1, and k > 1 "
             "only with one process per copy (--nproc).")
    if args.prefetch and (j > 1 or (k > 1 and args.nproc is None and not in_torchrun())):
        fail("--prefetch mirrors one memory copy's neighbour loader per process without epoch parallelism: use "
             "j = 1, and k > 1 only with one process per copy (--nproc).")
    _check_sven_options(args, par)
    _check_combinations(args, par)
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device is available; use --device cpu.")


def check_splits(args: argparse.Namespace, data) -> None:
    """The chronological split of ``PATH``'s events (``--val-ratio``, ``--test-ratio``) leaves events in every
    part: checked when the stream is read, before the processes connect and before the first epoch (a
    :class:`StoreStream` is split by ``MemoryTrainer`` when each process reads its ranges)."""
    if isinstance(data, StoreStream):
        return
    from ..ctdg.events import split_ranges

    val_start, test_start, total = split_ranges(data, args.val_ratio, args.test_ratio)
    parts = {"training": (0, val_start), "validation": (val_start, test_start), "test": (test_start, total)}
    for part, (a, b) in parts.items():
        if a == b:
            fix = ("a larger --val-ratio" if part == "validation" else "a larger --test-ratio" if part == "test"
                   else "smaller --val-ratio and --test-ratio")
            fail(f"--val-ratio {args.val_ratio} --test-ratio {args.test_ratio}: the time split of the {total} events of "
                 f"PATH '{args.path}' leaves no {part} events (events of one timestamp stay in one part); use {fix}, "
                 "or a longer stream.")


def is_event_store(path: str) -> bool:
    """Whether ``path`` is a store directory (:mod:`~pyg_dynscale.data.mapped`: it holds ``meta.json``)."""
    from ..data.mapped import META_FILE

    return os.path.isdir(path) and os.path.isfile(os.path.join(path, META_FILE))


class StoreStream:
    """What a process of ``--event-placement per_rank`` knows of an event store ``PATH`` before
    ``MemoryTrainer`` reads its own ranges: the path, the node count (from chunked reads of ``src``
    and ``dst``, not the columns held) and the message width."""

    def __init__(self, path: str) -> None:
        from ..ctdg.rank_events import StoreEvents

        events = StoreEvents(path)
        self.path, self.msg_dim = path, events.msg_dim
        self.num_nodes = events.num_nodes()
        self.num_events = events.num_events


def node_bytes(args: argparse.Namespace) -> int:
    """The bytes TGN keeps per node id at least (its memory row, last-update time and neighbour slots): a JODIE
    file whose largest id would need more than the machine holds is refused at that id's line
    (``partition-events``, without a memory, counts the owner and the last-update time)."""
    if not hasattr(args, "memory_dim"):
        return 16
    width = 8 if args.dtype == "float64" else 4
    return args.memory_dim * width + 8 + 16 * args.num_neighbors


def load_events(args: argparse.Namespace, world: int = 1):
    """The event stream of ``PATH`` (``msg`` with one column of ones when the file has none: TGN needs one).
    An event store directory is opened memory-mapped; with ``--event-placement per_rank`` on several
    processes it is not read here at all (:class:`StoreStream`: each process reads its ranges)."""
    import torch

    from ..ctdg import load_event_list, load_jodie_csv, load_events_store
    from .events_checkpoint import event_placement_in_effect

    if is_event_store(args.path):
        if event_placement_in_effect(args, world) == "per_rank":
            stream = StoreStream(args.path)
            if stream.msg_dim == 0:
                fail(f"PATH '{args.path}': the store's events have no message columns, which TGN needs; with "
                     "--event-placement per_rank give a store with features, or use --event-placement whole "
                     "(a column of ones is added).")
            return stream
        data = load_events_store(args.path)
        if data.msg.size(-1) == 0:
            data.msg = torch.ones(data.num_events, 1)
        return data
    fmt = args.format
    if fmt == "auto":
        name = args.path[:-3] if args.path.endswith(".gz") else args.path
        fmt = "jodie" if name.endswith(".csv") else "edgelist"
    if fmt == "edgelist":  # 'source target ... time': a file of two columns is refused, not read with time = target
        from .train_checks import check_edge_list_columns

        check_edge_list_columns(args.path, PROG.rsplit(" ", 1)[-1] if hasattr(args, "memory_dim") else
                                "partition-events")
    data = load_jodie_csv(args.path, node_bytes=node_bytes(args)) if fmt == "jodie" else load_event_list(args.path)
    if data.msg.size(-1) == 0:
        data.msg = torch.ones(data.num_events, 1)
    return data


def build(args: argparse.Namespace, data, device: str = "cpu", partition=None):
    """TGN from ``--seed`` and its :class:`~pyg_dynscale.ctdg.MemoryTrainer` (what each rank runs; a test
    builds the same in-process). ``partition``: :func:`partition_arg`'s (default: computed here, one
    process)."""
    import torch

    from ..ctdg import TGN, MemoryTrainer

    if partition is None:
        partition = partition_arg(args, int(data.num_nodes), _expected_world(args))
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    store = isinstance(data, StoreStream)  # per rank from a store: each process reads its ranges of the path
    model = TGN(data.num_nodes, data.msg_dim if store else data.msg.size(-1), memory_dim=args.memory_dim,
                time_dim=args.time_dim, embedding_dim=args.embedding_dim).to(device=device, dtype=dtype)
    data = data.path if store else data.to(device)
    return MemoryTrainer(model, data, batch_size=args.batch_size, lr=args.lr, num_neighbors=args.num_neighbors,
                         seed=args.seed, parallelism=parse_parallelism(args.parallelism),
                         static_memory=None if args.static_memory == "none" else args.static_memory,
                         val_ratio=args.val_ratio, test_ratio=args.test_ratio, memory_service=args.memory_service,
                         prefetch=args.prefetch, memory_placement=args.memory_placement, partition=partition,
                         gradient_sync=args.gradient_sync, micro_batches=parse_micro_batches(args.micro_batches),
                         event_placement=getattr(args, "event_placement", "auto"),
                         lr_scaling=getattr(args, "lr_scaling", "linear"))


#: MemoryTrainer's fields -> the option that sets them (its ModelInputError names the field): the one table of
#: :mod:`~pyg_dynscale.commands.hints`, which rewrites every error line in these options
FIELD_OPTIONS = HINT_OPTIONS["train-events"]


def traffic_report(trainer) -> dict:
    """:meth:`~pyg_dynscale.ctdg.MemoryTrainer.traffic` of the last training epoch as a JSON object:
    ``measured``, ``predicted`` (and the partitioned placements' ``local``) summed over the processes,
    ``redundancy`` and ``matrix`` (global); not the per-rank ``rank`` part (a collective: every rank
    calls it)."""
    # the placement in effect is the report's own event_placement
    t = {part: value for part, value in trainer.traffic().items() if part not in ("rank", "event_placement")}
    if "matrix" in t:
        t["matrix"] = {kind: m.tolist() for kind, m in t["matrix"].items()}
    return t


def train_events(args: argparse.Namespace, rank: int, world: int, init: Callable[[], None], device: str) -> dict:
    """The job of one rank: the report (the same on every rank)."""
    import torch

    from ..errors import CommandError, DynScaleError
    from .events_checkpoint import events_mismatch_message, events_record, stream_template

    job = Job(args, rank, PROG, time.perf_counter)
    torch.set_num_threads(args.threads)
    try:
        data = load_events(args, world)
    except CommandError:  # a line of the command's own, which names PATH already
        raise
    except DynScaleError as exc:
        fail(f"PATH '{args.path}': {exc}")
    check_splits(args, data)
    partition = partition_arg(args, int(data.num_nodes), world)  # before the processes connect: every rank fails
    job.find_resume(events_record(args, parse_parallelism(args.parallelism), data, world, partition),
                    lambda exc: events_mismatch_message(exc, args))
    init()
    try:
        trainer = build(args, data, device, partition)
    except NotImplementedError as exc:  # a combination of options MemoryTrainer does not build
        option = getattr(exc, "option", None)  # UnsupportedOptionError's: the value given comes first
        given = f"{option}={getattr(args, option)!r}: " if hasattr(args, str(option)) else ""
        fail(f"not built for these options: {given}{exc}")
    except DynScaleError as exc:
        field = getattr(exc, "field", "")
        fail(f"{FIELD_OPTIONS[field]}: {exc}" if field in FIELD_OPTIONS else str(exc))
    i, j, k = trainer.parallelism
    progress: dict = {"losses": [], "epoch_seconds": [], "val_metrics": []}
    # this rank's keys of the state's "stream": DCP fills them in place
    stream = stream_template(trainer, job.resume_from[1]) if job.resume_from is not None else None
    progress, start = job.restore(trainer.modules, trainer.optimizer, progress, extra=stream,
                                  then=lambda: trainer.load_state_dict({**trainer.state_dict(), "stream": stream}))

    def after(loss: float) -> dict:
        # the validation pass before the checkpoint: it re-seeds the generator the next epoch draws from
        progress["val_metrics"].append(dict(trainer.evaluate("val")))
        return {"val_ap": f"{progress['val_metrics'][-1]['ap']:.4f}"}

    job.epochs(trainer, progress, start, desc=f"tgn {i}x{j}x{k} on {world} process(es)", after=after,
               state=lambda: trainer.state_dict()["stream"])
    losses, seconds, val = progress["losses"], progress["epoch_seconds"], progress["val_metrics"]
    traffic = traffic_report(trainer)  # the last training epoch's
    stats = trainer.stats()  # training only
    test = dict(trainer.evaluate("test"))
    trainer.close()
    steps_events = trainer.val_start * (j * k)  # every memory copy's walk and every negative set sees them
    return {
        "schema_version": SCHEMA_VERSION, "mode": "events", "path": args.path, "model": args.model,
        "world_size": world, "parallelism": [i, j, k], "dtype": args.dtype, "device": device,
        "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed,
        "lr_scaling": args.lr_scaling, "lr_in_effect": trainer.lr,  # the rate the optimizer took
        "static_memory": args.static_memory, "memory_service": bool(args.memory_service),
        "prefetch": bool(args.prefetch), "memory_placement": args.memory_placement,
        "partition": None if args.memory_placement == "replicated" else (args.partition or "range"),
        "owned": None if trainer.placement is None else [trainer.placement.map.num_owned(q) for q in range(world)],
        "gradient_sync": args.gradient_sync, "micro_batches": parse_micro_batches(args.micro_batches),
        "event_placement": trainer.event_placement,  # in effect (auto resolved)
        "micro_batches_chosen": trainer.micro_batches_chosen,
        "events": {"train": trainer.val_start, "val": trainer.test_start - trainer.val_start,
                   "test": trainer.num_events - trainer.test_start, "nodes": int(data.num_nodes)},
        "losses": losses, "val_metrics": val, "test_metrics": test,
        "epoch_seconds": seconds,
        "events_per_second": trainer.val_start / (sum(seconds) / len(seconds)),
        "trained_events_per_second": steps_events / (sum(seconds) / len(seconds)),
        "bytes": stats, "traffic": traffic, **job.fields(),
    }


def print_report(args: argparse.Namespace, r: dict) -> None:
    if args.json:
        print(report_json(r), flush=True)
        return
    from ..partition.metrics import format_bytes

    t, v, b = r["test_metrics"], r["val_metrics"][-1], r["bytes"]
    lines = [
        f"tgn on {r['path']}: {r['world_size']} process(es), parallelism {'x'.join(map(str, r['parallelism']))}, "
        f"{r['dtype']}, {r['events']['train']} train / {r['events']['val']} val / {r['events']['test']} test events",
        f"  final train loss  {r['losses'][-1]:.6f}",
        f"  learning rate     {r['lr_in_effect']:g} (--lr {r['lr']:g}, --lr-scaling {r['lr_scaling']})",
        f"  val               AP {v['ap']:.4f}   AUC {v['auc']:.4f}   MRR {v['mrr']:.4f}",
        f"  test              AP {t['ap']:.4f}   AUC {t['auc']:.4f}   MRR {t['mrr']:.4f}",
        f"  throughput        {r['events_per_second']:.0f} training events/s (slowest rank)",
        f"  memory (rank 0)   read {format_bytes(b['memory_read'])}, written {format_bytes(b['memory_write'])}, "
        f"gathered {format_bytes(b['gather'])}, gradients {format_bytes(b['gradients'])}",
    ]
    if r["memory_placement"] != "replicated":
        m, p, red = r["traffic"]["measured"], r["traffic"]["predicted"], r["traffic"]["redundancy"]
        lines.append(f"  {r['memory_placement']} memory   partition {r['partition']}: dispatch "
                     f"{format_bytes(m['dispatch'])}, aggregation {format_bytes(m['aggregation'])} per epoch (all "
                     f"processes; predicted {format_bytes(p['dispatch'])}, {format_bytes(p['aggregation'])}), "
                     f"eta1 {red['eta1']:.3f}, eta2 {red['eta2']:.3f}")
    print("\n".join(lines), flush=True)


def run(args: argparse.Namespace) -> int:
    from .launch import bind_device, init_torchrun_group, launch_workers

    check_args(args)

    def alone() -> None:
        device = "cuda:0" if args.device == "cuda" else "cpu"
        report = train_events(args, 0, 1, lambda: bind_device(device), device)  # no process group: the GPU bound
        print_report(args, report)

    def worker(rank: int, world: int, local_rank: int) -> None:
        import torch

        device, backend = "cpu", "gloo"
        if args.device == "cuda":
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            if local > torch.cuda.device_count():
                fail(f"--device cuda: {local} processes on this machine for {torch.cuda.device_count()} GPU(s); "
                     "NCCL needs one GPU per process.")
            device, backend = f"cuda:{local_rank % torch.cuda.device_count()}", "nccl"
        report = train_events(args, rank, world, lambda: init_torchrun_group(
            rank, world, group_timeout(args), backend, device), device)
        if rank == 0:
            print_report(args, report)

    return start(args, PROG, alone=alone, worker=worker, launch=launch_workers)
