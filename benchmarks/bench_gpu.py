r"""One device, side by side: the fused runtime against PyGT's own loop, the
largest signal in-memory vs streamed training fits, and 2 ranks sharing the
device vs 1 rank.

a. **FusedTrainer vs PyGT's per-snapshot loop** for PyGT's examples --
   T-GCN, GConvGRU (black-box path), MPNN-LSTM, DCRNN (black-box path) and
   A3TGCN -- on Chickenpox (when the shared dataset file is reachable),
   England COVID and a synthetic graph of >= 1M vertex-time nodes. Both start
   from identical parameters (a deep copy of one PyGT model object) on the
   same device; PyGT's loop is ``bench_fused_vs_pygt.pygt_epoch`` (state
   carried, snapshots pre-built on the device). Median epoch time after the
   first, ratio PyGT / ours against the goal (>= 10x), CUDA peak memory of
   each, and the largest difference of their loss trajectories.
b. **In-memory vs streamed** (``FusedTrainer(stream=True)``): one streamed vs
   in-memory run on a medium graph (time ratio, bytes moved / a naive copy,
   equal losses) on every device; on CUDA also the largest synthetic signal
   each mode trains (snapshots doubled until CUDA OOM, within a time budget),
   with its peak memory and bytes moved per epoch.
c. **2 ranks sharing the device vs 1 rank**: pyg_dynscale's T-GCN through
   ``DistributedTrainer`` on England COVID and the synthetic graph. CUDA: both
   ranks on cuda:0 over gloo (the staged exchange, ``backend="auto"``); CPU:
   ``backend="staged"`` and ``"direct"``.

Without CUDA the CPU rows run and the CUDA-only rows are listed as pending;
without PyGT (or torch-scatter / torch-sparse) its rows are SKIPPED with the
reason. Everything, with the environment, goes to ``--out`` (JSON).

    python benchmarks/bench_gpu.py --quick --out gpu.json   # < 60 s on a 2-core CPU
    python benchmarks/bench_gpu.py --out gpu.json           # full (make gpu-check)
"""
from __future__ import annotations

import argparse
import copy
import datetime
import gc
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Optional

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _shared import DATASETS  # noqa: E402
from bench_blackbox import median_tail, sorted_copy  # noqa: E402
from bench_fused_vs_pygt import fixed_vertex_set, pygt_epoch, synthetic  # noqa: E402

from pyg_dynscale import DynamicGraphSignal  # noqa: E402

GOAL = 10.0  # section a: PyGT epoch / fused epoch, per row
#: section b's search on CUDA (seconds): the full run's, and --quick's (make gpu-check --quick: tests and
#: benchmark in under 8 minutes on one GPU)
SEARCH_BUDGET, QUICK_SEARCH_BUDGET = 480.0, 20.0
HIDDEN = 32
MODELS = ("tgcn", "gconvgru", "mpnnlstm", "dcrnn", "a3tgcn")
PYGT_NAMES = {"tgcn": "T-GCN", "gconvgru": "GConvGRU", "mpnnlstm": "MPNN-LSTM", "dcrnn": "DCRNN", "a3tgcn": "A3TGCN"}
DATASETS_A = ("chickenpox", "england_covid", "synthetic")
NO_CUDA = "no CUDA device"
PENDING_LINE = "GPU rows pending: no CUDA device"
Row = dict[str, Any]


# ------------------------------------------------------------------ device helpers
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_device(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def reset_peak(device: torch.device) -> None:
    free_device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_bytes(device: torch.device) -> Optional[int]:
    """``torch.cuda.max_memory_allocated`` since the last :func:`reset_peak` (``None`` on CPU)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def is_oom(exc: BaseException) -> bool:
    # cuBLAS / cuSPARSE report a failed allocation as a plain RuntimeError
    return isinstance(exc, torch.cuda.OutOfMemoryError) or any(
        s in str(exc) for s in ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED"))


def run_epochs(step: Callable[[], float], epochs: int, device: torch.device) -> tuple[list[float], list[float]]:
    """``(seconds, losses)`` of ``epochs`` calls of ``step``, the device synchronized around each."""
    times, losses = [], []
    for _ in range(epochs):
        sync(device)
        t0 = time.perf_counter()
        losses.append(float(step()))
        sync(device)
        times.append(time.perf_counter() - t0)
    return times, losses


def error_text(exc: BaseException) -> str:
    """``"Type: first line of the message"`` (a CUDA OOM message runs over many lines)."""
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg.splitlines()[0][:300] if msg else ''}"


def _version(dist: str) -> Optional[str]:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Where the figures come from: device, driver, CUDA, library versions, date."""
    import torch_geometric

    env: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device), "device_name": None, "driver": None, "nvidia_smi": None,
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "pyg": torch_geometric.__version__,
        "pygt": _version("torch-geometric-temporal"), "torch_scatter": _version("torch-scatter"),
        "torch_sparse": _version("torch-sparse"), "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "quick": bool(args.quick),
        "argv": sys.argv[1:],
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env["device_name"] = p.name
        env["device_memory_bytes"] = int(p.total_memory)
    else:
        try:
            env["device_name"] = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                                       if ln.startswith("model name")), platform.processor() or None)
        except OSError:
            env["device_name"] = platform.processor() or None
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                env["nvidia_smi"] = out.stdout.strip()
                env["driver"] = out.stdout.strip().splitlines()[0].split(",")[1].strip()
        except (OSError, subprocess.SubprocessError) as exc:
            env["nvidia_smi"] = f"failed: {error_text(exc)}"
    return env


# ------------------------------------------------------------------ data
CHICKENPOX = DATASETS / "pygt" / "chickenpox.json"


def dataset_missing(name: str) -> Optional[str]:
    """Why ``name`` cannot be loaded here, or ``None`` (only Chickenpox comes from outside the checkout)."""
    if name == "chickenpox" and not CHICKENPOX.is_file():
        return (f"dataset file not reachable: {CHICKENPOX} (the shared datasets stay beside the checkout; "
                "set PYG_DYNSCALE_DATASETS)")
    return None


def load_dataset(name: str, quick: bool, synthetic_nodes: int) -> DynamicGraphSignal:
    from pyg_dynscale.data.loaders import load_england_covid, load_pygt_json

    if name == "england_covid":
        sig = load_england_covid()
        return sig[0:6] if quick else sig
    if name == "chickenpox":
        sig = load_pygt_json(str(CHICKENPOX), "chickenpox")
        return sig[0:20] if quick else sig
    if name == "synthetic":
        return synthetic(synthetic_nodes)
    raise ValueError(f"unknown dataset {name!r}")


def with_periods(sig: DynamicGraphSignal) -> DynamicGraphSignal:
    """The same signal with features ``[n, 1, F]``: A3TGCN reads the F lags as its periods
    (PyGT's A3TGCN example feeds ``x.view(n, 1, lags)``)."""
    from pyg_dynscale.data.fields import SnapshotField

    fields = dict(sig.fields)
    fields["x"] = SnapshotField("node", fields["x"].values.unsqueeze(1))
    return DynamicGraphSignal.from_storage(sig.node_id, sig.node_ptr, sig.edge_index, sig.edge_ptr, sig.edge_weight,
                                           fields, sig.num_vertices)


def pygt_missing() -> Optional[str]:
    """Why PyGT's rows cannot run here, or ``None``. The five PyGT cells measured
    use PyG's own ops only, so torch-scatter is not needed, and where torch-sparse
    is absent pyg_dynscale's import shim stands in for the one type annotation
    PyGT imports from it (the environment record says which); a machine with no
    compiler can run these rows from PyGT's pure-Python wheel."""
    from pyg_dynscale._optional import pygt_available

    if not pygt_available():
        return "torch_geometric_temporal does not import (install it: docs/installation.md)"
    return None


def pygt_model(name: str, sig: DynamicGraphSignal) -> tuple[torch.nn.Module, torch.nn.Module, int, DynamicGraphSignal, str]:
    """``(module, head, state width, signal it trains on, FusedTrainer path)`` for one PyGT example."""
    from torch_geometric_temporal.nn import recurrent as rec

    F, H = sig.num_node_features, HIDDEN
    torch.manual_seed(0)
    if name == "tgcn":
        return rec.TGCN(F, H), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(H, 1)), H, sig, "decomposed"
    if name == "gconvgru":
        return rec.GConvGRU(F, H, 2), torch.nn.Linear(H, 1), H, sig, "blackbox"
    if name == "dcrnn":  # PyGT's DCRNN pairs degree normalizers with edges by position: symmetric, unique, sorted edges
        return rec.DCRNN(F, H, 2), torch.nn.Linear(H, 1), H, sorted_copy(sig), "blackbox"
    if name == "mpnnlstm":
        # window=1; on a changing vertex set num_nodes=1 gives the same result for any snapshot size
        n0 = int(sig.nodes_per_snapshot[0]) if fixed_vertex_set(sig) else 1
        return rec.MPNNLSTM(F, H, n0, 1, 0.0), torch.nn.Linear(2 * H + F, 1), 0, sig, "decomposed"
    if name == "a3tgcn":
        return (rec.A3TGCN(1, H, F), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(H, 1)), H,
                with_periods(sig), "decomposed")
    raise ValueError(f"unknown model {name!r}")


# ------------------------------------------------------------------ a. fused vs PyGT
def pygt_vs_fused_row(name: str, dataset: str, sig: DynamicGraphSignal, device: torch.device, epochs: int) -> Row:
    from pyg_dynscale.runtime import FusedTrainer

    module, head, width, sig, path = pygt_model(name, sig)
    module, head = module.to(device), head.to(device)
    module_f, head_f = copy.deepcopy(module), copy.deepcopy(head)  # both runs start from the same parameters
    fixed = fixed_vertex_set(sig)
    row: Row = {"section": "a", "model": name, "dataset": dataset, "path": path, "snapshots": sig.num_snapshots,
                "nodes": sig.num_vertex_time_nodes, "edges": sig.num_edges, "epochs": epochs}

    # PyGT's loop: prepared Data on the device, as a PyGT user iterates them (the baseline pays no transfer)
    reset_peak(device)
    snaps = [sig.snapshot(t).to(device) for t in range(sig.num_snapshots)]
    opt = torch.optim.Adam(list(module.parameters()) + list(head.parameters()), lr=0.01)
    step = module if width else (lambda x, ei, ew, h: module(x, ei, ew))
    base_t, base_l = run_epochs(lambda: pygt_epoch(step, head, sig, opt, width, fixed, snaps), epochs, device)
    row["pygt_peak_bytes"] = peak_bytes(device)
    snaps = opt = None  # free them before our run (the lambda above is done with them)

    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    trainer = FusedTrainer(module_f, sig, head=head_f, loss="mse", lr=0.01, device=device, path=path)
    sync(device)
    row["fused_setup_s"] = time.perf_counter() - t0
    fused_t, fused_l = run_epochs(trainer.train_epoch, epochs, device)
    row["fused_peak_bytes"] = peak_bytes(device)
    del trainer
    free_device(device)

    row.update(status="ok", pygt_s=median_tail(base_t), fused_s=median_tail(fused_t), pygt_epochs_s=base_t,
               fused_epochs_s=fused_t, pygt_losses=base_l, fused_losses=fused_l,
               max_loss_diff=max(abs(a - b) for a, b in zip(base_l, fused_l)))
    row["ratio"] = row["pygt_s"] / row["fused_s"]
    row["meets_goal"] = row["ratio"] >= GOAL
    return row


def section_a(device: torch.device, args: argparse.Namespace, res: dict[str, Any]) -> None:
    print(f"\n== a. FusedTrainer vs PyGT's per-snapshot loop on {device} (ratio = PyGT epoch / ours; "
          f"goal >= {GOAL:g}x per row) ==", flush=True)
    missing = pygt_missing()
    rows: list[Row] = res["pygt_vs_fused"]
    for ds in DATASETS_A:
        reason = "; ".join(r for r in (missing, dataset_missing(ds)) if r)
        sig = load_dataset(ds, args.quick, args.synthetic_nodes) if not reason else None
        for name in MODELS:
            if reason:
                rows.append({"section": "a", "model": name, "dataset": ds, "status": "skipped", "reason": reason})
                print(f"  {PYGT_NAMES[name]:<10} {ds:<14} SKIPPED: {reason}", flush=True)
                continue
            try:
                row = pygt_vs_fused_row(name, ds, sig, device, args.epochs)
                print(f"  {PYGT_NAMES[name]:<10} {ds:<14} PyGT {row['pygt_s']:.4f} s, ours {row['fused_s']:.4f} s "
                      f"-> {row['ratio']:.2f}x", flush=True)
            except Exception as exc:
                traceback.print_exc()
                row = {"section": "a", "model": name, "dataset": ds, "status": "error", "reason": error_text(exc)}
                print(f"  {PYGT_NAMES[name]:<10} {ds:<14} ERROR: {row['reason']}", flush=True)
            rows.append(row)
            free_device(device)
    if device.type != "cuda":
        res["pending"].append({"section": "a", "what": "FusedTrainer vs PyGT on CUDA (epoch time, peak memory)",
                               "reason": NO_CUDA})


# ------------------------------------------------------------------ b. in-memory vs streamed
def growing_signal(vertices: int, snapshots: int) -> DynamicGraphSignal:
    """``synthetic()``'s generator parameters with the number of snapshots free
    (streaming keeps a window of snapshots resident: the signal grows in time)."""
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    return generate_dynamic_graph(vertices, round(5 * vertices * snapshots * 0.8), snapshots, presence=0.8,
                                  sequence_length_std=0.3, edge_std=0.3, num_features=8, seed=0)


def fit(sig: DynamicGraphSignal, device: torch.device, stream: bool, every: int, epochs: int,
        catch_oom: bool = False) -> Row:
    """Train pyg_dynscale's T-GCN in memory or streamed for ``epochs`` epochs."""
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.runtime import FusedTrainer

    torch.manual_seed(0)
    model = TGCN(sig.num_node_features, HIDDEN).to(device)
    head = torch.nn.Linear(HIDDEN, 1).to(device)
    row: Row = {"mode": "streamed" if stream else "in-memory", "snapshots": sig.num_snapshots,
                "nodes": sig.num_vertex_time_nodes, "edges": sig.num_edges, "window": every if stream else None}
    trainer = None
    reset_peak(device)
    try:
        t0 = time.perf_counter()
        trainer = FusedTrainer(model, sig, head=head, loss="mse", lr=0.01, device=device,
                               checkpoint_every=every if stream else None, stream=stream)
        sync(device)
        row["setup_s"] = time.perf_counter() - t0
        times, losses = run_epochs(trainer.train_epoch, epochs, device)
        st = trainer.stream_stats
        row.update(status="ok", epoch_s=median_tail(times), epochs_s=times, losses=losses,
                   peak_bytes=peak_bytes(device))
        if st is not None:
            row.update(windows=st.windows, transfers=st.transfers, bytes_moved=st.bytes_moved,
                       bytes_naive=st.bytes_naive, max_resident=st.max_resident)
    except Exception as exc:
        if not (catch_oom and is_oom(exc)):
            raise
        row.update(status="oom", reason=error_text(exc), peak_bytes=peak_bytes(device))
    trainer = model = head = None
    free_device(device)
    return row


def stream_compare(device: torch.device, args: argparse.Namespace) -> Row:
    V, T, B = (500, 24, 4) if args.quick else (5000, 64, 8)
    sig = growing_signal(V, T)
    mem = fit(sig, device, False, B, args.epochs)
    st = fit(sig, device, True, B, args.epochs)
    # float32: the windows sum the same per-snapshot means in another order
    rel = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(mem["losses"], st["losses"]))
    return {"section": "b", "status": "ok", "vertices": V, "snapshots": T, "window": B,
            "nodes": sig.num_vertex_time_nodes, "edges": sig.num_edges, "in_memory": mem, "streamed": st,
            "time_ratio": st["epoch_s"] / mem["epoch_s"], "bytes_moved": st["bytes_moved"],
            "bytes_naive": st["bytes_naive"], "moved_ratio": st["bytes_moved"] / max(st["bytes_naive"], 1),
            "max_rel_loss_diff": rel, "losses_equal": rel <= 1e-5}


def host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 * 2**30


def stream_search(device: torch.device, args: argparse.Namespace) -> dict[str, Any]:
    """Double the snapshots of a synthetic signal until each mode runs out of
    device memory, the time budget is spent, or the next signal would not fit
    the host (the streamed signal, its encoded windows and their pinned copies
    stay in host memory)."""
    from pyg_dynscale.data.transfer import signal_nbytes

    V, B, budget = args.search_vertices, args.search_window, args.search_budget
    alive = {"in-memory": True, "streamed": True}
    ended = {"in-memory": "", "streamed": ""}
    last_s = {"in-memory": 0.0, "streamed": 0.0}
    trials: list[Row] = []
    host, t_start, T = host_memory_bytes(), time.perf_counter(), args.search_start_snapshots
    sig_bytes = 0
    while any(alive.values()):
        left = budget - (time.perf_counter() - t_start)
        for mode in alive:  # a trial at twice the size takes about twice as long: start only those that fit
            if alive[mode] and 2.2 * last_s[mode] > left:
                alive[mode], ended[mode] = False, f"time budget ({budget:.0f} s) reached before {T} snapshots"
            elif alive[mode] and 3 * 2 * sig_bytes > 0.6 * host:  # predicted from the last size, before generating
                alive[mode], ended[mode] = False, f"host memory ({host / 2**30:.0f} GiB) reached before {T} snapshots"
        if not any(alive.values()):
            break
        t0 = time.perf_counter()
        sig = growing_signal(V, T)
        gen_s = time.perf_counter() - t0
        sig_bytes = signal_nbytes(sig)
        for mode in ("in-memory", "streamed"):
            if not alive[mode]:
                continue
            t0 = time.perf_counter()
            row = fit(sig, device, mode == "streamed", B, 2, catch_oom=True)
            last_s[mode] = time.perf_counter() - t0 + gen_s
            row["section"] = "b-search"
            trials.append(row)
            print(f"  {mode:<10} T={T:<6} nodes={row['nodes']:<11} {row['status']}"
                  + (f" epoch {row['epoch_s']:.3f} s, peak {_mib(row['peak_bytes'])} MiB" if row["status"] == "ok"
                     else ""), flush=True)
            if row["status"] == "oom":
                alive[mode], ended[mode] = False, f"CUDA out of memory at {T} snapshots"
        del sig
        free_device(device)
        T *= 2
    largest = {}
    for mode in ("in-memory", "streamed"):
        ok = [r for r in trials if r["mode"] == mode and r["status"] == "ok"]
        largest[mode] = max(ok, key=lambda r: r["nodes"]) if ok else None
    a, b = largest["in-memory"], largest["streamed"]
    return {"section": "b-search", "status": "ok", "vertices": V, "window": B, "budget_s": budget, "trials": trials,
            "largest": largest, "ended": ended,
            "nodes_ratio": (b["nodes"] / a["nodes"]) if a and b else None,
            "seconds": time.perf_counter() - t_start}


def section_b(device: torch.device, args: argparse.Namespace, res: dict[str, Any]) -> None:
    print(f"\n== b. in-memory vs streamed FusedTrainer (stream=True) on {device} ==", flush=True)
    try:
        res["streaming"]["compare"] = row = stream_compare(device, args)
        print(f"  medium graph ({row['nodes']} vertex-time nodes, window {row['window']}): streamed / in-memory "
              f"epoch {row['time_ratio']:.2f}, moved / naive bytes {row['moved_ratio']:.3f}, losses equal: "
              f"{row['losses_equal']}", flush=True)
    except Exception as exc:
        traceback.print_exc()
        res["streaming"]["compare"] = {"section": "b", "status": "error", "reason": error_text(exc)}
    if device.type != "cuda":
        res["streaming"]["search"] = {"section": "b-search", "status": "pending", "reason": NO_CUDA}
        res["pending"].append({"section": "b", "what": "largest signal trained on one GPU: in-memory vs streamed "
                               "(search until CUDA OOM)", "reason": NO_CUDA})
        print(f"  {PENDING_LINE} (largest signal per mode: search until CUDA OOM)", flush=True)
        return
    print(f"  search: {args.search_vertices} vertices, snapshots doubled from {args.search_start_snapshots}, window "
          f"{args.search_window}, budget {args.search_budget:.0f} s", flush=True)
    try:
        res["streaming"]["search"] = stream_search(device, args)
    except Exception as exc:
        traceback.print_exc()
        res["streaming"]["search"] = {"section": "b-search", "status": "error", "reason": error_text(exc)}


# ------------------------------------------------------------------ c. 2 ranks sharing the device vs 1
def _dist_rank(rank: int, world_size: int, configs: list[tuple[str, str]], device: str, quick: bool,
               synthetic_nodes: int, epochs: int, scheme: str) -> list[Row]:
    """Every configuration on this rank (module level: the spawned ranks import it)."""
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.nn import TGCN
    from pyg_dynscale.partition import partition

    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    out = []
    for dataset, backend in configs:
        sig = load_dataset(dataset, quick, synthetic_nodes)
        torch.manual_seed(0)
        model, head = TGCN(sig.num_node_features, HIDDEN).to(dev), torch.nn.Linear(HIDDEN, 1).to(dev)
        part = partition(sig, scheme, world_size, model.dependency_pattern())
        reset_peak(dev)
        tr = DistributedTrainer(model, sig, part, head=head, loss="mse", lr=0.01, backend=backend)
        losses = [tr.train_epoch() for _ in range(epochs)]  # the loss read back waits for the device
        out.append({"epochs_s": list(tr.epoch_seconds), "losses": losses, "transport": tr.transport.name,
                    "peak_bytes": peak_bytes(dev)})
        del tr, model, head
        free_device(dev)
    return out


def _one_rank(fn: Callable[..., Any], *args: Any) -> list[Any]:
    """``fn(0, 1, *args)`` in a 1-rank gloo group of this process, with one thread as
    each spawned rank has (starting a process would only add seconds to the run)."""
    import torch.distributed as dist

    from pyg_dynscale.distributed import free_port

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        return [fn(0, 1, *args)]
    finally:
        dist.destroy_process_group()
        torch.set_num_threads(threads)


def section_c(device: torch.device, args: argparse.Namespace, res: dict[str, Any]) -> None:
    from pyg_dynscale.distributed import spawn

    cuda = device.type == "cuda"
    dev = str(device)  # every rank on this one device
    backends = ("auto",) if cuda else ("staged", "direct")  # auto: the staged exchange for CUDA over gloo
    configs = [(ds, b) for ds in ("england_covid", "synthetic") for b in backends]
    print(f"\n== c. T-GCN, 2 ranks sharing {dev} vs 1 rank (gloo; partition {args.partition}) ==", flush=True)
    rest = (configs, dev, args.quick, args.dist_synthetic_nodes, args.epochs, args.partition)
    per_world: dict[int, Any] = {}
    for world in (1, 2):
        try:
            per_world[world] = _one_rank(_dist_rank, *rest) if world == 1 else spawn(_dist_rank, 2, *rest, timeout=900)
        except Exception as exc:
            traceback.print_exc()
            per_world[world] = error_text(exc)
    for i, (ds, backend) in enumerate(configs):
        row: Row = {"section": "c", "dataset": ds, "backend": backend, "device": dev}
        bad = [w for w in (1, 2) if isinstance(per_world[w], str)]
        if bad:
            row.update(status="error", reason=f"{bad[0]} rank(s): {per_world[bad[0]]}")
        else:
            one, two = per_world[1][0][i], [r[i] for r in per_world[2]]
            # an epoch lasts as long as its slowest rank
            two_epochs = [max(e) for e in zip(*[r["epochs_s"] for r in two])]
            row.update(status="ok", transport=one["transport"], one_rank_s=median_tail(one["epochs_s"]),
                       two_ranks_s=median_tail(two_epochs), one_rank_peak_bytes=one["peak_bytes"],
                       two_ranks_peak_bytes=None if not cuda else max(r["peak_bytes"] for r in two),
                       max_loss_diff=max(abs(a - b) for a, b in zip(one["losses"], two[0]["losses"])))
            row["speedup"] = row["one_rank_s"] / row["two_ranks_s"]
            print(f"  {ds:<14} {row['transport']:<7} 1 rank {row['one_rank_s']:.4f} s, 2 ranks {row['two_ranks_s']:.4f} s"
                  f" -> {row['speedup']:.2f}x", flush=True)
        res["distributed"].append(row)
    if not cuda:
        res["pending"].append({"section": "c", "what": "2 ranks sharing one GPU (gloo, staged exchange) vs 1 rank",
                               "reason": NO_CUDA})
        print(f"  {PENDING_LINE} (2 ranks sharing one GPU)", flush=True)


# ------------------------------------------------------------------ tables (console and docs/gpu.md)
def _s(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _mib(b: Optional[int]) -> str:
    return "n/a" if b is None else f"{b / 2**20:.1f}"


def tables(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The results as tables ``{"title", "headers", "rows", "notes"}``: one source for the
    printed table and the markdown report of ``gpu_check.py``."""
    out = []
    rows = []
    for r in res.get("pygt_vs_fused", []):
        name = PYGT_NAMES.get(r["model"], r["model"])
        if r["status"] != "ok":
            rows.append([name, r["dataset"], r.get("path", ""), "", "", "", "", r["status"].upper(), "", "", "", "",
                         r.get("reason", "")])
            continue
        rows.append([name, r["dataset"], r["path"], str(r["nodes"]), str(r["snapshots"]), _s(r["pygt_s"]),
                     _s(r["fused_s"]), f"{r['ratio']:.2f}x", "met" if r["meets_goal"] else "not met",
                     _mib(r["pygt_peak_bytes"]), _mib(r["fused_peak_bytes"]), f"{r['max_loss_diff']:.2g}", ""])
    ok = [r for r in res.get("pygt_vs_fused", []) if r["status"] == "ok"]
    notes = [f"rows meeting the goal: {sum(r['meets_goal'] for r in ok)} of {len(ok)} measured"] if ok else []
    if rows:
        out.append({"title": f"a. FusedTrainer vs PyGT's per-snapshot loop ({res['env']['device']}; median epoch "
                             f"after the first, {res['env'].get('epochs', '?')} epochs)",
                    "headers": ["model", "dataset", "path", "nodes", "T", "PyGT s", "ours s", "PyGT/ours",
                                f"goal >= {GOAL:g}x", "PyGT peak MiB", "ours peak MiB", "max |loss diff|", "note"],
                    "rows": rows, "notes": notes})

    cmp_ = res.get("streaming", {}).get("compare")
    if cmp_:
        if cmp_["status"] == "ok":
            m, s = cmp_["in_memory"], cmp_["streamed"]
            r = [[f"{cmp_['nodes']} nodes, T={cmp_['snapshots']}", str(cmp_["window"]), _s(m["epoch_s"]),
                  _s(s["epoch_s"]), f"{cmp_['time_ratio']:.2f}", f"{cmp_['bytes_moved'] / 2**20:.2f}",
                  f"{cmp_['bytes_naive'] / 2**20:.2f}", f"{cmp_['moved_ratio']:.3f}", _mib(m["peak_bytes"]),
                  _mib(s["peak_bytes"]), f"{'yes' if cmp_['losses_equal'] else 'NO'} ({cmp_['max_rel_loss_diff']:.1g})"]]
        else:
            r = [["ERROR", "", "", "", "", "", "", "", "", "", cmp_.get("reason", "")]]
        out.append({"title": "b. in-memory vs streamed (stream=True), medium graph",
                    "headers": ["graph", "window", "in-memory s", "streamed s", "streamed/in-memory",
                                "moved MiB/epoch", "naive MiB/epoch", "moved/naive", "in-memory peak MiB",
                                "streamed peak MiB", "losses equal (max rel diff)"],
                    "rows": r, "notes": []})
    search = res.get("streaming", {}).get("search")
    if search and search["status"] == "ok":
        r = [[t["mode"], str(t["snapshots"]), str(t["nodes"]), t["status"].upper() if t["status"] != "ok" else "ok",
              _s(t.get("epoch_s")), _mib(t.get("peak_bytes")),
              "" if t.get("bytes_moved") is None else f"{t['bytes_moved'] / 2**20:.1f}"] for t in search["trials"]]
        notes = []
        for mode in ("in-memory", "streamed"):
            big = search["largest"][mode]
            notes.append(f"{mode}: largest trained {big['nodes'] if big else 'none'} vertex-time nodes"
                         f"{(' (T=' + str(big['snapshots']) + ')') if big else ''}; stopped: {search['ended'][mode]}")
        if search.get("nodes_ratio"):
            notes.append(f"streamed / in-memory largest: {search['nodes_ratio']:.1f}x")
        out.append({"title": f"b. largest signal per mode ({search['vertices']} vertices, snapshots doubled, window "
                             f"{search['window']}, budget {search['budget_s']:.0f} s)",
                    "headers": ["mode", "T", "nodes", "result", "epoch s", "peak MiB", "moved MiB/epoch"],
                    "rows": r, "notes": notes})
    elif search:
        out.append({"title": "b. largest signal per mode", "headers": ["status", "reason"],
                    "rows": [[search["status"].upper(), search.get("reason", "")]], "notes": []})

    rows = []
    for r in res.get("distributed", []):
        if r["status"] != "ok":
            rows.append([r["dataset"], r["backend"], r["device"], r["status"].upper(), "", "", "", "", r.get("reason", "")])
            continue
        rows.append([r["dataset"], f"{r['backend']} -> {r['transport']}", r["device"], _s(r["one_rank_s"]),
                     _s(r["two_ranks_s"]), f"{r['speedup']:.2f}x", _mib(r["one_rank_peak_bytes"]),
                     _mib(r["two_ranks_peak_bytes"]), f"{r['max_loss_diff']:.2g}"])
    if rows:
        out.append({"title": "c. T-GCN, 2 ranks sharing the device vs 1 rank (epoch of the slowest rank)",
                    "headers": ["dataset", "backend", "device", "1 rank s", "2 ranks s", "1 rank / 2 ranks",
                                "1 rank peak MiB", "2 ranks peak MiB/rank", "max |loss diff|"],
                    "rows": rows, "notes": []})
    return out


TEXT_COLUMNS = {"model", "dataset", "path", "note", "graph", "mode", "result", "backend", "device", "status", "reason"}


def render_text(tabs: list[dict[str, Any]]) -> str:
    lines = []
    for t in tabs:
        cells = [t["headers"]] + t["rows"]
        width = [max(len(str(c[i])) for c in cells) for i in range(len(t["headers"]))]
        left = [h in TEXT_COLUMNS for h in t["headers"]]
        lines += ["", t["title"]]
        for c in cells:
            lines.append("  " + "  ".join(str(v).ljust(w) if lf else str(v).rjust(w)
                                          for v, w, lf in zip(c, width, left)).rstrip())
        lines += [f"  {n}" for n in t["notes"]]
    return "\n".join(lines)


def render_markdown(tabs: list[dict[str, Any]], level: str = "####") -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    parts = []
    for t in tabs:
        parts += [f"{level} {t['title']}", "", "| " + " | ".join(map(cell, t["headers"])) + " |",
                  "|" + "---|" * len(t["headers"])]
        parts += ["| " + " | ".join(map(cell, r)) + " |" for r in t["rows"]]
        parts += [""] + [f"- {n}" for n in t["notes"]] + ([""] if t["notes"] else [])
    return "\n".join(parts)


def skipped_rows(res: dict[str, Any]) -> list[str]:
    """``"what: why"`` for every row that did not run (skipped, pending or failed)."""
    out = [f"a. {PYGT_NAMES.get(r['model'], r['model'])} on {r['dataset']}: {r['status']}: {r['reason']}"
           for r in res.get("pygt_vs_fused", []) if r["status"] != "ok"]
    out += [f"{p['section']}. {p['what']}: pending: {p['reason']}" for p in res.get("pending", [])]
    for key in ("compare", "search"):
        r = res.get("streaming", {}).get(key)
        if r and r["status"] == "error":
            out.append(f"b. {key}: error: {r['reason']}")
    out += [f"c. {r['dataset']} ({r['backend']}): error: {r['reason']}" for r in res.get("distributed", [])
            if r["status"] != "ok"]
    return out


# ------------------------------------------------------------------ main
def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true", help="small graphs and 2 epochs (< 60 s on a 2-core CPU)")
    ap.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    ap.add_argument("--out", default=None, help="write every figure and the environment to this JSON file")
    ap.add_argument("--sections", default="a,b,c")
    ap.add_argument("--epochs", type=int, default=None, help="epochs per measurement (default 5, --quick 2)")
    ap.add_argument("--synthetic-nodes", type=int, default=None,
                    help="vertex-time nodes of the synthetic graph of a. (default 1M, --quick 3000)")
    ap.add_argument("--dist-synthetic-nodes", type=int, default=None,
                    help="... of c. (default: --synthetic-nodes)")
    ap.add_argument("--partition", default="pts", help="partition scheme of c. (pts, pss, pss-ts, pgc)")
    ap.add_argument("--search-vertices", type=int, default=100_000, help="b. search: vertices of the synthetic graph")
    ap.add_argument("--search-start-snapshots", type=int, default=16)
    ap.add_argument("--search-window", type=int, default=8, help="b.: snapshots per streamed window")
    ap.add_argument("--search-budget", type=float, default=None,
                    help=f"b. search: seconds (default {SEARCH_BUDGET:.0f}, --quick {QUICK_SEARCH_BUDGET:.0f})")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    args = ap.parse_args(argv)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            print(f"--device {args.device}: {NO_CUDA} (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
            return 2
    if device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
    if args.threads:
        torch.set_num_threads(args.threads)
    args.epochs = args.epochs or (2 if args.quick else 5)
    if args.search_budget is None:
        args.search_budget = QUICK_SEARCH_BUDGET if args.quick else SEARCH_BUDGET
    args.synthetic_nodes = args.synthetic_nodes or (3000 if args.quick else 1_000_000)
    args.dist_synthetic_nodes = args.dist_synthetic_nodes or args.synthetic_nodes

    env = environment(device, args)
    env["epochs"] = args.epochs
    res: dict[str, Any] = {"env": env, "goal_ratio": GOAL, "pygt_vs_fused": [], "streaming": {}, "distributed": [],
                           "pending": []}
    print(f"# bench_gpu on {device} ({env['device_name']}), torch {env['torch']} (CUDA {env['torch_cuda']}), "
          f"PyG {env['pyg']}, PyGT {env['pygt']}, driver {env['driver']}, {env['date']}", flush=True)
    t0 = time.perf_counter()
    sections = set(args.sections.split(","))
    res["section_seconds"] = {}
    for key, fn in (("a", section_a), ("b", section_b), ("c", section_c)):
        if key in sections:
            ts = time.perf_counter()
            fn(device, args, res)
            res["section_seconds"][key] = time.perf_counter() - ts
    res["seconds"] = time.perf_counter() - t0
    res["skipped"] = skipped_rows(res)
    tabs = tables(res)
    print(render_text(tabs))
    if res["skipped"]:
        print("\nnot run:")
        print("\n".join(f"  {s}" for s in res["skipped"]))
    if device.type != "cuda":
        print(f"\n{PENDING_LINE}")
    per = ", ".join(f"{k} {v:.1f} s" for k, v in res["section_seconds"].items())
    print(f"\ntotal {res['seconds']:.1f} s ({per})", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str) + "\n")
        print(f"wrote {args.out}")
    errors = [s for s in res["skipped"] if ": error: " in s]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
