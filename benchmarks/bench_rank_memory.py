r"""Per-rank peak host memory and set-up time: whole data vs per-rank parts
(issue 37, benchmarks), at 1, 2 and 4 gloo ranks.

For every case and world size :math:`R`, two jobs of :math:`R` spawned CPU
ranks (:func:`pyg_dynscale.distributed.spawn`, gloo, one thread each) build
the same trainer:

* **whole** -- every rank reads the whole data set from disk (the signal
  file and the partition file; the road series; the event stream) and builds
  its trainer from it, as every trainer did before issue 37;
* **part** -- every rank builds its trainer from its own part: snapshots from
  ``write_shards`` directories (:meth:`DistributedTrainer.from_shards`),
  windows and events from the per-rank loading of their trainers. Where the
  package has no per-rank mode for a family the row says ``not available``
  (nothing is estimated in its place).

**Measured in each rank's own process.** After the imports (and a
``gc.collect`` + ``malloc_trim``) the rank resets its peak-RSS counter to the
current level (``/proc/self/clear_refs``) and takes the baseline of
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` and of ``VmHWM`` (the same
kernel counter, read from ``/proc/self/status``); it then reads its data and
builds the trainer (the **set-up**, timed with ``perf_counter``) and reports
peak minus baseline: the host memory its set-up added at its peak (resident
pages, file-backed pages of memory maps included). The table uses ``VmHWM``:
``ru_maxrss`` also holds the peak a process started through ``exec``
inherits from its parent (a spawned rank starts with at least its parent's
peak); both deltas are in the JSON and agree when the parent is small, as it
is here: it never holds the data (each case is prepared in a process of its
own, which exits). A table row gives the largest rank's figure and the
slowest rank's set-up.

**The goal** (issue 37): per-rank memory
:math:`\le 1.3 \cdot M_\text{whole} / R + \text{halo}`, with
:math:`M_\text{whole}` the whole data set's memory in one process (the
case's 1-rank whole-data peak; where that was not measured, the whole-data
per-rank peak at :math:`R`, and the row says so) and halo = the rows a rank
holds of other ranks' parts, costed at :math:`M_\text{whole} / N` each:
snapshots -- the distinct vertex-time rows of its receive lists (the plan's);
windows -- the lag overlap of its blocks, ``lags + horizon - 1`` snapshots
on each inner border; events -- none (remote memory and neighbour rows are
fetched per batch, not held). ``met`` says whether the part's measured peak
is within it.

**Cases** (``--cases``):

* ``snap`` -- the largest shared SNAP graph, ``sx-mathoverflow`` (daily
  snapshots, in/out-degree features, next-degree targets);
* ``synth-1e6`` / ``synth-1e7`` / ``synth-1e8`` --
  :func:`pyg_dynscale.data.synthetic.generate_dynamic_graph` graphs of
  :math:`10^6` / :math:`10^7` / :math:`10^8` vertex-time nodes (100
  snapshots, every vertex present, :math:`|E| = N`, 2 features, degree
  targets); above :math:`10^7` nodes the graph is generated in chunks of
  :math:`10^7` nodes (10 snapshots each, independent draws over the same
  vertices) written into preallocated tensors, so generation holds the result
  plus one chunk;
* ``road`` -- bench_windows' road graph (325 sensors, 52,116 five-minute
  steps), :class:`~pyg_dynscale.windows.WindowTrainer` with
  ``placement="blocks"``, lags 12, horizon 1, PyGT's ``TGCN`` (hidden 32) +
  a head: whole = ``DynamicGraphSignal.load`` of the signal file, part = the
  file's path (each rank reads its blocks' snapshots from the memory map);
* ``events-1e6`` / ``events-1e7`` -- :func:`pyg_dynscale.ctdg.synthetic_events`,
  :math:`10^6` / :math:`10^7` events over :math:`10^5` nodes,
  :class:`~pyg_dynscale.ctdg.MemoryTrainer` (TGN, dimension 32,
  ``parallelism=(R, 1, 1)``, ``partition="range"``) with
  ``memory_placement="partitioned"`` and ``"sven"``: whole = the stream's
  tensors loaded by every rank, part = ``event_placement="per_rank"`` on an
  event store directory.

Snapshot cases train DGC's T-GCN (2-layer GCNs, hidden 16) + a linear head,
partitioned with ``--scheme`` (default ``pss``: contiguous snapshot ranges;
what a 10^8-node graph can be partitioned with in seconds). The set-up is
what is measured (``--epochs`` adds training epochs to the peak).

**Safety.** A watchdog in the parent kills the processes of a job (by id)
when one passes ``--cap-gib`` of resident memory (default 14) or all
together pass ``--total-cap-gib``; before a job the parent compares what it
needs -- :math:`R` times the case's measured per-rank peak at fewer ranks,
or a smaller case's peak at :math:`R` ranks scaled by the node count (a
*prediction*, only ever used as the reason for not running) -- with the caps
and the memory available, and skips what cannot fit, saying so. Data lives
under ``--workdir`` (default ``/tmp/issue37/bench``) and is deleted after
each case (``--keep`` keeps it).

**Projection** (labelled as such, nothing ran there): per family and mode a
least-squares fit with non-negative coefficients of the measured rows,
:math:`y = a + b N + c N/R + d H` (:math:`N` vertex-time nodes or events,
:math:`R` ranks, :math:`H` the rank's halo rows), for the memory per rank,
the set-up seconds and the plan bytes per rank, evaluated at 4 ranks and
:math:`10^8` and at 64 ranks and :math:`10^9`, with the halo of the
projected partition from its formula (PSS on the synthetic graph: one
snapshot's vertices, :math:`H = N/T`); the fitted model and its worst
relative residual are printed next to the figures.

Usage::

    python benchmarks/bench_rank_memory.py --quick     # about a minute: tiny cases of the three families, 1 and 2 ranks
    python benchmarks/bench_rank_memory.py --json small.json    # SNAP, 10^6 / 10^7 snapshots, road, 10^6 / 10^7 events
    python benchmarks/bench_rank_memory.py --cases synth-1e6,synth-1e7,synth-1e8 --json big.json   # needs ~20 GiB
    python benchmarks/bench_rank_memory.py --from-json small.json,big.json   # one table and projection of both
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import resource
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _shared import DATASETS  # noqa: E402

GIB = 2**30
MIB = 2**20
HIDDEN = 16
GOAL_FACTOR = 1.3
DAY = 86400.0
NA = "not available"
ROAD_LAGS, ROAD_HORIZON = 12, 1


# ====================================================================== measurement in a rank
def _status_kib(field_name: str) -> int:
    """A ``kB`` line of ``/proc/self/status`` (0 where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


class Meter:
    """Peak host memory a block of code adds in this process, in MiB, and its
    wall seconds: ``peak_mib`` is the kernel's peak-RSS counter of this process
    (``VmHWM``, what ``getrusage`` reports as ``ru_maxrss`` for a live process)
    minus its value at entry; ``maxrss_mib`` the same from ``ru_maxrss``, which
    also holds the peak a process started through ``exec`` inherits from its
    parent (equal to ``peak_mib`` unless the parent's peak was larger);
    ``held_mib`` what is still resident at exit. At entry the peak counter is
    reset to the current level (``/proc/self/clear_refs``, as bench_windows'
    ``Peak``; ``ru_maxrss`` follows it), so a larger peak earlier in the
    process does not hide the block's."""

    def __enter__(self) -> "Meter":
        _trim()
        try:  # the peak counter back to the current level: a higher peak before entry would hide this block's
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        self.base_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        self.base_hwm = _status_kib("VmHWM")
        self.base_rss = _status_kib("VmRSS")
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.maxrss_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.base_maxrss) / 1024
        self.hwm_mib = (_status_kib("VmHWM") - self.base_hwm) / 1024
        self.held_mib = (_status_kib("VmRSS") - self.base_rss) / 1024
        self.peak_mib = self.hwm_mib if self.base_hwm else self.maxrss_mib   # no /proc: ru_maxrss


def tensor_bytes(obj: Any, _seen: Optional[set] = None) -> int:
    """Bytes of the distinct tensor storages reachable from ``obj`` through
    attributes, dataclass fields, lists, tuples and dicts (a plan's size)."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        return sum(tensor_bytes(v, seen) for v in vars(obj).values())
    if hasattr(obj, "__slots__"):
        return sum(tensor_bytes(getattr(obj, s, None), seen) for s in obj.__slots__)
    return 0


def received_rows(plan: Any, rank: int) -> Optional[int]:
    """Distinct vertex-time rows ``rank`` receives from other ranks over all
    exchanges of a plan (a :class:`CommunicationPlan` or a rank's slice of
    it): the rank's halo. ``None`` where the plan does not list them."""
    gids = []
    try:
        for e in plan:
            if not hasattr(e, "recv_list"):
                return None
            g = e.recv_list(rank)[0]
            if g.numel():
                gids.append(g)
    except (TypeError, AttributeError):
        return None
    return int(torch.unique(torch.cat(gids)).numel()) if gids else 0


# ====================================================================== availability of the per-rank modes
def shards_available() -> Optional[str]:
    """``None`` when the shard path exists (``write_shards`` and
    ``DistributedTrainer.from_shards``), else what is missing."""
    import pyg_dynscale.distributed as D

    missing = [n for n, ok in (("pyg_dynscale.distributed.write_shards", hasattr(D, "write_shards")),
                               ("DistributedTrainer.from_shards", hasattr(D.DistributedTrainer, "from_shards")))
               if not ok]
    return None if not missing else ", ".join(missing) + " missing"


def windows_part_available() -> Optional[str]:
    """The per-rank loading of :class:`WindowTrainer` (issue 37 item 4): a
    signal file given as ``data`` with ``placement="blocks"``, each rank reading
    its snapshots from the memory-mapped file (``windows.mapped_signal``)."""
    import importlib.util

    if importlib.util.find_spec("pyg_dynscale.windows.mapped_signal") is None:
        return "pyg_dynscale.windows.mapped_signal missing (WindowTrainer reads no signal file per rank)"
    from pyg_dynscale.windows import mapped_signal

    return None if hasattr(mapped_signal, "is_mapped_source") else "windows.mapped_signal.is_mapped_source missing"


def events_part_available() -> Optional[str]:
    """The per-rank event stream of :class:`MemoryTrainer` (issue 37 item 5):
    ``event_placement="per_rank"`` reading an event store directory."""
    import inspect

    from pyg_dynscale.ctdg import MemoryTrainer
    from pyg_dynscale.data import mapped

    if "event_placement" not in inspect.signature(MemoryTrainer.__init__).parameters:
        return "MemoryTrainer(event_placement=) missing"
    return None if hasattr(mapped, "save_events_store") else "pyg_dynscale.data.mapped.save_events_store missing"


# ====================================================================== snapshot family
def snapshot_model(F: int) -> tuple:
    """DGC's T-GCN (2-layer GCNs) + a linear head, seeded."""
    from pyg_dynscale.nn import TGCN

    torch.manual_seed(0)
    return TGCN(F, HIDDEN, num_layers=2), torch.nn.Linear(HIDDEN, 1)


def synthetic_snapshots(num_nodes: int, snapshots: int = 100, features: int = 2, chunk_nodes: int = 10**7,
                        seed: int = 0) -> Any:
    r"""A synthetic snapshot graph of ``num_nodes`` vertex-time nodes:
    :math:`|V| = N / T` vertices present in all ``snapshots``, :math:`|E| = N`.
    Above ``chunk_nodes`` it is generated chunk by chunk (``T_c`` snapshots of
    the same vertices each, seeds ``seed + k``) into preallocated tensors."""
    from pyg_dynscale.data import DynamicGraphSignal
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    V = num_nodes // snapshots
    chunks = max(1, math.ceil(num_nodes / chunk_nodes))
    while snapshots % chunks:
        chunks += 1
    Tc = snapshots // chunks
    if chunks == 1:
        return generate_dynamic_graph(V, V * snapshots, snapshots, num_features=features, seed=seed)
    N, E = V * snapshots, V * snapshots
    node_id = torch.empty(N, dtype=torch.long)
    edge_index = torch.empty(2, E, dtype=torch.long)
    x = torch.empty(N, features)
    y = torch.empty(N)
    node_ptr, edge_ptr = [torch.zeros(1, dtype=torch.long)], [torch.zeros(1, dtype=torch.long)]
    n0 = e0 = 0
    for k in range(chunks):
        s = generate_dynamic_graph(V, V * Tc, Tc, num_features=features, seed=seed + k)
        n, e = s.num_vertex_time_nodes, s.num_edges
        node_id[n0:n0 + n] = s.node_id
        edge_index[:, e0:e0 + e] = s.edge_index
        x[n0:n0 + n] = s.x
        y[n0:n0 + n] = s.y
        node_ptr.append(s.node_ptr[1:] + n0)
        edge_ptr.append(s.edge_ptr[1:] + e0)
        n0, e0 = n0 + n, e0 + e
        del s
        gc.collect()
    return DynamicGraphSignal.from_tensors(node_ptr=torch.cat(node_ptr), edge_index=edge_index,
                                           edge_ptr=torch.cat(edge_ptr), node_id=node_id, x=x, y=y, num_vertices=V)


def snap_signal() -> Any:
    from pyg_dynscale.data import loaders

    return loaders.load_edge_list(DATASETS / "snap" / "sx-mathoverflow.txt.gz", window=DAY, target="degree",
                                  vertex_set="window", degree_transform="log1p")


def prepare_snapshots(case: "Case", workdir: str, scheme: str) -> dict:
    """Write ``signal.pt``; returns its sizes and timings (in a process of its own)."""
    t0 = time.perf_counter()
    sig = case.make()
    info: dict = {"make_s": time.perf_counter() - t0, "N": sig.num_vertex_time_nodes, "T": sig.num_snapshots,
                  "E": sig.num_edges, "V": sig.num_vertices, "F": sig.num_node_features}
    t0 = time.perf_counter()
    sig.save(os.path.join(workdir, "signal.pt"))
    info["save_s"] = time.perf_counter() - t0
    info["signal_bytes"] = os.path.getsize(os.path.join(workdir, "signal.pt"))
    return info


def prepare_snapshot_parts(case: "Case", workdir: str, scheme: str, R: int, shards: bool) -> dict:
    """Write ``partition-R.pt`` and, with ``shards``, ``shards-R/``
    (:func:`~pyg_dynscale.distributed.write_shards`) from ``signal.pt`` (in a
    process of its own: its peak is the shard writer's)."""
    from pyg_dynscale.data import DynamicGraphSignal
    from pyg_dynscale.partition import partition, save_partition

    sig = DynamicGraphSignal.load(os.path.join(workdir, "signal.pt"))
    model, _ = snapshot_model(sig.num_node_features)
    pattern = model.dependency_pattern(bytes_per_element=4)
    t0 = time.perf_counter()
    part = partition(sig, scheme, R, pattern, seed=0)
    info: dict = {"partition_s": time.perf_counter() - t0}
    save_partition(part, os.path.join(workdir, f"partition-{R}.pt"))
    if shards:
        from pyg_dynscale.distributed import write_shards

        d = os.path.join(workdir, f"shards-{R}")
        t0 = time.perf_counter()
        write_shards(sig, part, pattern, d)
        info.update(shards_write_s=time.perf_counter() - t0, shards_bytes=_dir_bytes(d))
    return info


def _dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def snapshot_whole(job: dict, rank: int, world: int) -> Any:
    from pyg_dynscale.data import DynamicGraphSignal
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.partition import load_partition

    sig = DynamicGraphSignal.load(os.path.join(job["workdir"], "signal.pt"))
    part = load_partition(os.path.join(job["workdir"], f"partition-{world}.pt"), sig)
    model, head = snapshot_model(sig.num_node_features)
    return DistributedTrainer(model, sig, part, head=head, loss="mse", lr=0.01)


def snapshot_part(job: dict, rank: int, world: int) -> Any:
    from pyg_dynscale.distributed import DistributedTrainer

    model, head = snapshot_model(job["F"])
    return DistributedTrainer.from_shards(model, os.path.join(job["workdir"], f"shards-{world}"), head=head,
                                          loss="mse", lr=0.01)


def snapshot_facts(tr: Any, rank: int, world: int, job: dict) -> dict:
    plan = getattr(tr, "plan", None)
    return {"plan_bytes": tensor_bytes(plan) if plan is not None else None,
            "halo_rows": received_rows(plan, rank) if plan is not None else None}


# ====================================================================== windows family (road)
def prepare_road(case: "Case", workdir: str, scheme: str) -> dict:
    """The road series (bench_windows' :func:`bench_windows.road_series`) as
    the signal file ``signal.pt`` of :func:`~pyg_dynscale.windows.series_signal`
    (a static graph: one edge list)."""
    import numpy as np

    from bench_windows import road_series

    from pyg_dynscale.windows import series_signal

    t0 = time.perf_counter()
    A, values = road_series(case.size["nodes"], case.size["steps"])
    src, dst = np.nonzero(A)
    sig = series_signal(torch.from_numpy(values), torch.from_numpy(np.stack([src, dst])).long(),
                        torch.from_numpy(A[src, dst]))
    path = os.path.join(workdir, "signal.pt")
    sig.save(path)
    return {"make_s": time.perf_counter() - t0, "N": sig.num_vertex_time_nodes, "T": sig.num_snapshots,
            "E": int(src.shape[0]), "F": sig.num_node_features, "signal_bytes": os.path.getsize(path)}


def _road_model() -> tuple:
    from pyg_dynscale._optional import import_pygt

    TGCN = import_pygt("bench_rank_memory").nn.recurrent.TGCN
    torch.manual_seed(0)
    return TGCN(2, 32), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(32, 2))


def _window_trainer(data: Any) -> Any:
    from pyg_dynscale.windows import WindowTrainer

    model, head = _road_model()
    return WindowTrainer(model, data, lags=ROAD_LAGS, horizon=ROAD_HORIZON, batch_size=64, loss="mae", lr=1e-3,
                         head=head, placement="blocks")


def road_whole(job: dict, rank: int, world: int) -> Any:
    """Every rank loads the whole signal file, then keeps its blocks."""
    from pyg_dynscale.data import DynamicGraphSignal

    return _window_trainer(DynamicGraphSignal.load(os.path.join(job["workdir"], "signal.pt")))


def road_part(job: dict, rank: int, world: int) -> Any:
    """Every rank reads only its blocks' snapshots from the memory-mapped file."""
    return _window_trainer(os.path.join(job["workdir"], "signal.pt"))


def window_facts(tr: Any, rank: int, world: int, job: dict) -> dict:
    """The rank's held feature bytes; its halo: the lag overlap of a block,
    ``lags + horizon - 1`` snapshots of every sensor, on each side it borders."""
    store = getattr(tr, "store", None)
    held = None
    if store is not None and getattr(store, "x", None) is not None:
        held = int(store.x.numel() * store.x.element_size())
    sides = 0 if world == 1 else (1 if rank in (0, world - 1) else 2)
    return {"held_feature_bytes": held, "halo_rows": sides * (ROAD_LAGS + ROAD_HORIZON - 1) * job["nodes"]}


# ====================================================================== events family
EVENT_DIM = 32


def prepare_events(case: "Case", workdir: str, scheme: str) -> dict:
    """The stream as ``events.pt`` (plain tensors: the whole-data path) and as
    an event store directory ``events/`` (:func:`~pyg_dynscale.data.mapped.save_events_store`)."""
    from pyg_dynscale.ctdg import synthetic_events

    t0 = time.perf_counter()
    data = synthetic_events(case.size["events"], case.size["nodes"], seed=0)
    info = {"make_s": time.perf_counter() - t0, "N": int(data.num_events), "T": None, "E": int(data.num_events),
            "F": int(data.msg.size(-1)), "V": int(data.num_nodes)}
    torch.save({"src": data.src, "dst": data.dst, "t": data.t, "msg": data.msg},
               os.path.join(workdir, "events.pt"))
    info["signal_bytes"] = os.path.getsize(os.path.join(workdir, "events.pt"))
    if events_part_available() is None:
        from pyg_dynscale.data.mapped import save_events_store

        save_events_store(data, os.path.join(workdir, "events"))
    return info


def _event_trainer(data: Any, num_nodes: int, msg_dim: int, placement: str, world: int, **kw: Any) -> Any:
    from pyg_dynscale.ctdg import TGN, MemoryTrainer

    torch.manual_seed(0)
    model = TGN(num_nodes, msg_dim, EVENT_DIM, EVENT_DIM, EVENT_DIM)
    return MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10, seed=0, parallelism=(world, 1, 1),
                         memory_placement=placement, partition="range", **kw)


def events_whole(job: dict, rank: int, world: int) -> Any:
    """Every rank loads the whole stream (plain tensors) and builds the trainer."""
    from torch_geometric.data import TemporalData

    d = torch.load(os.path.join(job["workdir"], "events.pt"), weights_only=True)
    return _event_trainer(TemporalData(**d), job["V"], job["F"], job["placement"], world, event_placement="whole")


def events_part(job: dict, rank: int, world: int) -> Any:
    """Every rank reads its own ranges of the event store (``event_placement="per_rank"``)."""
    return _event_trainer(os.path.join(job["workdir"], "events"), job["V"], job["F"], job["placement"], world,
                          event_placement="per_rank")


def event_facts(tr: Any, rank: int, world: int, job: dict) -> dict:
    """No halo held: remote memory and neighbour rows are fetched per batch, not kept."""
    return {"halo_rows": 0, "plan_bytes": None}


# ====================================================================== cases
@dataclass
class Case:
    """One data set: its family, how it is made and prepared on disk, and how a
    rank builds its trainer from the whole data or from its part."""

    name: str
    family: str                    # "snapshots" | "windows" | "events"
    label: str
    make: Callable[[], Any] = None  # type: ignore[assignment]
    size: dict = field(default_factory=dict)
    variant: str = ""               # events: the memory placement

    @property
    def available(self) -> Optional[str]:
        return {"snapshots": shards_available, "windows": windows_part_available,
                "events": events_part_available}[self.family]()


PREPARE = {"snapshots": prepare_snapshots, "windows": prepare_road, "events": prepare_events}
WHOLE = {"snapshots": snapshot_whole, "windows": road_whole, "events": events_whole}
PART = {"snapshots": snapshot_part, "windows": road_part, "events": events_part}
FACTS = {"snapshots": snapshot_facts, "windows": window_facts, "events": event_facts}


def _synth(n: int, features: int = 2) -> Callable[[], Any]:
    return lambda: synthetic_snapshots(n, features=features)


def cases(quick: bool) -> dict:
    """Every case by name (``--quick``: tiny sizes, the same code)."""
    out = {
        "snap": Case("snap", "snapshots", "sx-mathoverflow (daily)", snap_signal),
        "synth-1e6": Case("synth-1e6", "snapshots", "synthetic 10^6", _synth(10**6)),
        "synth-1e7": Case("synth-1e7", "snapshots", "synthetic 10^7", _synth(10**7)),
        "synth-1e8": Case("synth-1e8", "snapshots", "synthetic 10^8", _synth(10**8)),
        "road": Case("road", "windows", "road 52,116 windows", size={"nodes": 325, "steps": 52_116 + 1}),
        "events-1e6": Case("events-1e6", "events", "events 10^6", size={"events": 10**6, "nodes": 100_000}),
        "events-1e7": Case("events-1e7", "events", "events 10^7", size={"events": 10**7, "nodes": 100_000}),
    }
    if quick:
        out = {
            # 32 features: the signal's rows dominate the set-up, as they do at scale
            "synth-quick": Case("synth-quick", "snapshots", "synthetic 4x10^5, F=32", _synth(400_000, 32)),
            "road-quick": Case("road-quick", "windows", "road 2,000 windows", size={"nodes": 40, "steps": 2_001}),
            "events-quick": Case("events-quick", "events", "events 2x10^4", size={"events": 20_000, "nodes": 500}),
        }
    return out


# ====================================================================== one rank
def _rank(rank: int, world: int, job: dict) -> dict:
    """One rank of one job: baseline after the imports, then the set-up from
    the whole data or from the rank's part, measured in this process."""
    torch.set_num_threads(1)
    import torch.distributed as dist

    # what the set-up imports lazily, imported before the baseline
    import pyg_dynscale.ctdg  # noqa: F401
    import pyg_dynscale.distributed  # noqa: F401
    import pyg_dynscale.windows  # noqa: F401
    from pyg_dynscale.partition import load_partition  # noqa: F401

    if job["family"] == "windows":
        _road_model()
    dist.barrier()
    build = (WHOLE if job["mode"] == "whole" else PART)[job["family"]]
    with Meter() as m:
        tr = build(job, rank, world)
    facts = FACTS[job["family"]](tr, rank, world, job)
    out = {"rank": rank, "peak_mib": m.peak_mib, "maxrss_mib": m.maxrss_mib, "hwm_mib": m.hwm_mib,
           "held_mib": m.held_mib, "setup_s": m.seconds, **facts}
    if job.get("epochs"):
        with Meter() as e:
            for _ in range(job["epochs"]):
                tr.train_epoch()
        out["epoch_peak_mib"] = m.peak_mib + e.peak_mib
        out["epoch_s"] = e.seconds / job["epochs"]
    if hasattr(tr, "close"):
        tr.close()
    return out


# ====================================================================== the parent: jobs under a watchdog
def _children(pid: int) -> list:
    """Every descendant process id of ``pid`` (``/proc/<pid>/task/*/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Watchdog:
    """Kills the parent's child processes (by id) when one passes ``cap``
    bytes of resident memory or all together pass ``total_cap``; records the
    largest figures seen."""

    def __init__(self, cap: float, total_cap: float, period: float = 0.2):
        self.cap, self.total_cap, self.period = cap, total_cap, period
        self.killed: Optional[str] = None
        self.peak_one = self.peak_total = 0
        self._stop = threading.Event()

    def __enter__(self) -> "Watchdog":
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        import signal

        me = os.getpid()
        while not self._stop.wait(self.period):
            kids = _children(me)
            rss = {k: _rss_kib(k) * 1024 for k in kids}
            if not rss:
                continue
            one, total = max(rss.values()), sum(rss.values())
            self.peak_one, self.peak_total = max(self.peak_one, one), max(self.peak_total, total)
            if one > self.cap or total > self.total_cap:
                self.killed = (f"killed by the watchdog: a process held {one / GIB:.1f} GiB "
                               f"(cap {self.cap / GIB:g}), all {total / GIB:.1f} GiB (cap {self.total_cap / GIB:g})")
                for k in kids:
                    try:
                        os.kill(k, signal.SIGKILL)
                    except OSError:
                        pass


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _prepare_entry(step: str, name: str, quick: bool, workdir: str, scheme: str, R: int, shards: bool, q: Any) -> None:
    try:
        case = cases(quick)[name]
        if step == "data":
            q.put(("ok", PREPARE[case.family](case, workdir, scheme)))
        else:
            q.put(("ok", prepare_snapshot_parts(case, workdir, scheme, R, shards)))
    except BaseException as exc:  # noqa: BLE001 -- reported to the parent as the row's reason
        import traceback

        q.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"))


def prepare(case: Case, args: Any, workdir: str, step: str = "data", R: int = 0, shards: bool = False) -> dict:
    """One preparation step in a process of its own (the parent never holds
    the data): ``"data"`` writes the case's data set, ``"parts"`` a snapshot
    case's partition and shards for ``R`` ranks. Adds the step's peak."""
    from pyg_dynscale.training import launch

    ctx = launch.mp.get_context("spawn")   # what spawn() starts its ranks with (the test suite: a fork server)
    q = ctx.Queue()
    p = ctx.Process(target=_prepare_entry, args=(step, case.name, args.quick, workdir, args.scheme, R, shards, q))
    with Watchdog(args.cap_gib * GIB, args.total_cap_gib * GIB) as dog:
        p.start()
        result = None
        while result is None:
            try:
                result = q.get(timeout=1.0)
            except Exception:  # queue.Empty
                if not p.is_alive():
                    break
        p.join()
    if result is None:
        raise RuntimeError(dog.killed or f"the {step} step of {case.name} died (exit code {p.exitcode})")
    if result[0] != "ok":
        raise RuntimeError(result[1])
    result[1]["peak_gib"] = dog.peak_one / GIB
    return result[1]


def run_job(case: Case, mode: str, R: int, info: dict, args: Any, workdir: str) -> dict:
    """``R`` spawned ranks building the case's trainer (``mode`` "whole" | "part");
    the largest rank's peak, the slowest set-up, or why there is none."""
    from pyg_dynscale.distributed import spawn

    job = {"family": case.family, "mode": mode, "workdir": workdir, "F": info.get("F"), "V": info.get("V"),
           "placement": case.variant, "epochs": args.epochs, "nodes": case.size.get("nodes")}
    load0 = os.getloadavg()[0]
    with Watchdog(args.cap_gib * GIB, args.total_cap_gib * GIB) as dog:
        try:
            per_rank = spawn(_rank, R, job, timeout=args.timeout)
        except Exception as exc:  # noqa: BLE001 -- the row says why
            reason = dog.killed or f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
            return {"status": reason}
    return {"status": "measured", "per_rank": per_rank, "mib": max(r["peak_mib"] for r in per_rank),
            "hwm_mib": max(r["hwm_mib"] for r in per_rank), "maxrss_mib": max(r["maxrss_mib"] for r in per_rank),
            "setup_s": max(r["setup_s"] for r in per_rank),
            "halo_rows": max((r.get("halo_rows") or 0) for r in per_rank),
            "plan_bytes": max((r.get("plan_bytes") or 0) for r in per_rank),
            "watchdog_peak_gib": dog.peak_one / GIB, "load": (load0, os.getloadavg()[0])}


class Calibration:
    """Measured peaks of smaller cases of a family, by (family, what, R): what
    a larger case's job would need, *predicted* per node, to skip jobs that
    cannot fit (the prediction is only ever a reason for not running)."""

    def __init__(self) -> None:
        self.points: dict = {}

    def add(self, family: str, what: str, R: int, N: int, mib: float) -> None:
        self.points.setdefault((family, what, R), []).append((N, mib))

    def predict(self, family: str, what: str, R: int, N: int) -> Optional[tuple]:
        """(MiB, N of the point) scaled linearly in N from the largest smaller case."""
        below = [(n, m) for n, m in self.points.get((family, what, R), []) if n < N]
        if not below:
            return None
        n, m = max(below)
        return m * N / n, n


def fits(need_mib: float, R: int, args: Any, what: str) -> Optional[str]:
    """``None`` when ``R`` processes of ``need_mib`` each fit the caps and the
    memory available now; else why the job is not run."""
    need = (need_mib * MIB + 400 * MIB) * R   # + an interpreter with torch per rank
    avail = min(_available_bytes(), args.total_cap_gib * GIB)
    if need_mib * MIB > args.cap_gib * GIB:
        return f"not run: {what} {need_mib / 1024:.1f} GiB per process > the {args.cap_gib:g} GiB cap"
    if need > avail:
        return (f"not run: {R} x {what} {need_mib / 1024:.1f} GiB = {need / GIB:.1f} GiB > "
                f"{avail / GIB:.1f} GiB available")
    return None


def job_fits(calib: Calibration, done: dict, case: Case, mode: str, R: int, N: int, args: Any) -> Optional[str]:
    """Why the job is not run (``None``: run it). What a rank needs: this
    case's measured peak in the same mode at the largest smaller rank count
    (``done``; a rank's share does not grow with more ranks), or else a smaller
    case's peak at ``R`` ranks scaled by the node count."""
    fewer = [r for (m, r) in done if m == mode and r < R]
    if fewer:
        prev = max(fewer)
        return fits(done[mode, prev]["mib"], R, args, f"the measured {prev}-rank peak")
    pred = calib.predict(case.family + case.variant, mode, R, N)
    if pred is not None:
        return fits(pred[0], R, args, f"predicted (N={pred[1]:,} row x {N / pred[1]:g})")
    return None


# ====================================================================== the table
def whole_reference(rows: list, row: dict) -> tuple:
    """(MiB, label) of "whole" in the goal: the whole data set's memory in one
    process -- the 1-rank whole-data peak of the same case -- or, where that
    was not measured, the whole-data per-rank peak at the row's rank count."""
    one = [r["whole"] for r in rows if r["label"] == row["label"] and r["ranks"] == 1
           and r["whole"].get("status") == "measured"]
    if one:
        return one[0]["mib"], "1-rank whole"
    if row["whole"].get("status") == "measured":
        return row["whole"]["mib"], f"whole at {row['ranks']} ranks"
    return None, None


def goal(rows: list, row: dict) -> tuple:
    """(bound MiB, met, reference) of ``part <= 1.3 whole / R + halo``, halo rows
    costed at ``whole / N`` each; ``None`` entries where a side is missing."""
    whole, ref = whole_reference(rows, row)
    part = row["part"]
    if whole is None or part.get("status") != "measured":
        return None, None, ref
    halo_rows = part.get("halo_rows") or row["whole"].get("halo_rows") or 0
    bound = GOAL_FACTOR * whole / row["ranks"] + halo_rows * whole / max(row["N"], 1)
    return bound, part["mib"] <= bound, ref


def _cell(r: dict, key: str, fmt: str) -> str:
    if r.get("status") != "measured":
        return NA if r.get("status", "").startswith(NA) else "-"
    return format(r[key], fmt)


def _halo(row: dict) -> str:
    for side in (row["part"], row["whole"]):
        if side.get("status") == "measured" and side.get("halo_rows") is not None:
            return f"{side['halo_rows']:,}"
    return "-"


def table(rows: list) -> str:
    head = ("| case | family | N | ranks | whole MiB/rank | part MiB/rank | goal bound MiB | met | "
            "whole set-up s | part set-up s | part/whole memory | part/whole set-up | halo rows | note |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        w, p = row["whole"], row["part"]
        bound, met, ref = goal(rows, row)
        both = w.get("status") == p.get("status") == "measured"
        mem_ratio = f"{p['mib'] / w['mib']:.2f}" if both and w["mib"] > 0 else "-"
        set_ratio = f"{p['setup_s'] / w['setup_s']:.2f}" if both and w["setup_s"] > 0 else "-"
        notes = [s for s in (w.get("status"), p.get("status")) if s and s != "measured"]
        if ref and ref != "1-rank whole":
            notes.append(f"bound from the {ref}")
        lines.append(
            f"| {row['label']} | {row['family']} | {row['N']:,} | {row['ranks']} | {_cell(w, 'mib', ',.0f')} | "
            f"{_cell(p, 'mib', ',.0f')} | {'-' if bound is None else format(bound, ',.0f')} | "
            f"{'-' if met is None else ('yes' if met else 'no')} | {_cell(w, 'setup_s', '.2f')} | "
            f"{_cell(p, 'setup_s', '.2f')} | {mem_ratio} | {set_ratio} | "
            f"{_halo(row)} | "
            f"{'; '.join(dict.fromkeys(notes)) or ''} |")
    return "\n".join(lines)


# ====================================================================== projection
def _lstsq(X: list, y: list) -> list:
    """Least squares with non-negative coefficients (memory and time do not
    shrink as data grows): refit without the negative ones until none is left."""
    A = torch.tensor(X, dtype=torch.float64)
    b = torch.tensor(y, dtype=torch.float64).unsqueeze(1)
    scale = A.abs().amax(0).clamp_min(1e-30)   # columns of 1 and of 10^8: equilibrate
    keep = [k for k in range(A.shape[1]) if float(A[:, k].abs().max()) > 0]   # an all-zero column: no coefficient
    coef = torch.zeros(A.shape[1], dtype=torch.float64)
    while keep:
        sub = torch.linalg.lstsq(A[:, keep] / scale[keep], b).solution.flatten() / scale[keep]
        if (sub >= 0).all():
            coef[keep] = sub
            break
        keep = [k for k, c in zip(keep, sub.tolist()) if c >= 0]
    return coef.tolist()


FEATURES = ("1", "N", "N/R", "H")


def _features(N: float, R: int, H: float) -> list:
    return [1.0, float(N), float(N) / R, float(H)]


#: where the projection is evaluated: (N, ranks) -- the 10^8 graph on this machine's 4 ranks, and the issue's target
TARGETS = ((1e8, 4), (1e9, 64))


def _fit_points(rows: list, family: str, mode: str) -> list:
    """The measured (N, R, figures) of a family and mode; for snapshots the
    synthetic graphs' alone when they span two sizes (the projection is of
    that graph), else every snapshot case."""
    pts = [(r["N"], r["ranks"], r[mode], r["case"]) for r in rows
           if r["family"] == family and r[mode].get("status") == "measured"]
    synth = [p for p in pts if str(p[3]).startswith("synth")]
    if family == "snapshots" and len({p[0] for p in synth}) >= 2:
        pts = synth
    return [p[:3] for p in pts]


def projection(rows: list, targets: tuple = TARGETS, snapshots: int = 100) -> list:
    r"""Fit :math:`y = a + b N + c N/R + d H` (non-negative coefficients) per
    family and mode to the measured rows -- ``y``: MiB per rank, set-up seconds,
    plan bytes per rank; :math:`N` nodes (events), :math:`R` ranks, :math:`H`
    the rank's halo rows -- and evaluate it at each ``(N, R)`` of ``targets``.
    The whole-data mode is expected to fit :math:`b`, the per-rank mode
    :math:`c` and :math:`d`; the fit decides. The projected halo is PSS's on
    the synthetic graph (every vertex in every snapshot): one snapshot's
    vertices, :math:`H = N / T` (``snapshots`` = T; the measured synthetic rows
    have exactly that), for every :math:`R > 1`; events hold none."""
    out = []
    for family in ("snapshots", "events"):
        for mode in ("whole", "part"):
            pts = _fit_points(rows, family, mode)
            sizes = {N for N, _, _ in pts}
            if len(pts) < 4 or len(sizes) < 2:
                for N_t, R_t in targets:
                    out.append({"family": family, "mode": mode, "points": len(pts), "N": N_t, "R": R_t,
                                "status": f"{len(pts)} measured points of {len(sizes)} sizes: too few to fit "
                                          "(needs 4 points of 2 sizes)"})
                continue
            fits = {}
            for key in ("mib", "setup_s", "plan_bytes"):
                X = [_features(N, R, m.get("halo_rows") or 0) for N, R, m in pts]
                y = [float(m.get(key) or 0) for _, _, m in pts]
                coef = _lstsq(X, y)
                fitted = [sum(c * v for c, v in zip(coef, x)) for x in X]
                worst = max(abs(f - v) / max(abs(v), 1e-9) for f, v in zip(fitted, y)) if any(y) else 0.0
                fits[key] = (coef, worst)
            for N_t, R_t in targets:
                H = N_t / snapshots if family == "snapshots" and R_t > 1 else 0.0
                at = _features(N_t, R_t, H)
                per = {key: {"coef": coef, "value": sum(c * v for c, v in zip(coef, at)), "max_rel_residual": worst}
                       for key, (coef, worst) in fits.items()}
                out.append({"family": family, "mode": mode, "points": len(pts), "N": N_t, "R": R_t,
                            "halo_rows": H, **per})
    return out


def _model(fit: dict, unit: str) -> str:
    terms = [f"{fit['coef'][0]:.3g}"] + [f"{c * 1e6:.3g}/10^6 x {name}"
                                        for c, name in zip(fit["coef"][1:], FEATURES[1:]) if c > 0]
    return f"{' + '.join(terms)} {unit} (worst residual {fit['max_rel_residual']:.0%})"


def _power(x: float) -> str:
    e = round(math.log10(x))
    return f"10^{e}" if abs(x - 10**e) < 1e-6 * x else f"{x:,.0f}"


def projection_lines(proj: list) -> list:
    lines = ["| family | mode | ranks | N | MiB / rank | set-up s | plan MiB / rank | memory model (fitted) | "
             "set-up model (fitted) |", "|---|---|---|---|---|---|---|---|---|"]
    for p in proj:
        where = f"| {p['family']} | {p['mode']} | {p['R']} (projection) | {_power(p['N'])} |"
        if p.get("status"):
            lines.append(f"{where} - | - | - | {p['status']} | - |")
            continue
        lines.append(f"{where} {p['mib']['value']:,.0f} | {p['setup_s']['value']:,.1f} | "
                     f"{p['plan_bytes']['value'] / MIB:,.0f} | {_model(p['mib'], 'MiB')} | "
                     f"{_model(p['setup_s'], 's')} |")
    return lines


# ====================================================================== main
def _row_line(label: str, R: int, mode: str, r: dict) -> str:
    if r.get("status") != "measured":
        return f"  {label:34s} R={R} {mode:5s} {r.get('status')}"
    plan = "-" if not r.get("plan_bytes") else f"{r['plan_bytes'] / MIB:,.1f} MiB"
    return (f"  {label:34s} R={R} {mode:5s} {r['mib']:9,.0f} MiB/rank (VmHWM {r['hwm_mib']:,.0f}) "
            f"set-up {r['setup_s']:7.2f} s halo {r['halo_rows']:,} plan {plan}")


def run_case(base: Case, variants: list, args: Any, workdir: str, ranks: list, modes: list,
             calib: Calibration) -> list:
    """Every row of one data set: its preparation, then per variant and rank
    count the whole-data and per-rank jobs (each one only if it can fit)."""
    rows: list = []
    t0 = time.perf_counter()
    try:
        info = prepare(base, args, workdir)
    except RuntimeError as exc:
        why = f"preparation failed: {str(exc).splitlines()[0]}"
        print(f"\n{base.label}: {why}", flush=True)
        return [{"case": base.name, "label": c.label, "family": c.family, "N": 0, "ranks": R,
                 "whole": {"status": why}, "part": {"status": why}} for c in variants for R in ranks]
    N = info["N"]
    print(f"\n{base.label}: N={N:,}, T={info.get('T')}, E={info['E']:,}, file {info['signal_bytes'] / MIB:,.0f} MiB; "
          f"made and written in {time.perf_counter() - t0:.1f} s (peak {info['peak_gib']:.1f} GiB)", flush=True)
    for case in variants:
        reason = case.available
        key = case.family + case.variant
        done: dict = {}   # (mode, R) -> this case's measured job
        for R in ranks:
            row: dict = {"case": base.name, "label": case.label, "family": case.family, "N": N, "ranks": R,
                         "info": info}
            todo = []
            for mode in ("whole", "part"):
                if mode not in modes:
                    row[mode] = {"status": "not run (--modes)"}
                elif mode == "part" and reason is not None:
                    row[mode] = {"status": f"{NA}: {reason}"}
                else:
                    skip = job_fits(calib, done, case, mode, R, N, args)
                    if skip is None:
                        todo.append(mode)
                    else:
                        row[mode] = {"status": skip}
            if case.family == "snapshots" and todo:
                shards = "part" in todo
                if shards:
                    pred = calib.predict(key, "shards", R, N)
                    skip = None if pred is None else fits(pred[0], 1, args, f"write_shards predicted "
                                                          f"(N={pred[1]:,} x {N / pred[1]:g})")
                    if skip is not None:
                        row["part"] = {"status": skip}
                        todo.remove("part")
                        shards = False
                try:
                    row["parts"] = prepare(case, args, workdir, "parts", R, shards)
                    if shards:
                        calib.add(key, "shards", R, N, row["parts"]["peak_gib"] * 1024)
                        print(f"  partition + shards for R={R}: write_shards {row['parts']['shards_write_s']:.1f} s, "
                              f"{row['parts']['shards_bytes'] / MIB:,.0f} MiB on disk, peak "
                              f"{row['parts']['peak_gib']:.1f} GiB", flush=True)
                except RuntimeError as exc:
                    for mode in todo:
                        row[mode] = {"status": f"partition/shards for {R} ranks failed: {str(exc).splitlines()[0]}"}
                    todo = []
            for mode in todo:
                row[mode] = run_job(case, mode, R, info, args, workdir)
                if row[mode]["status"] == "measured":
                    calib.add(key, mode, R, N, row[mode]["mib"])
                    done[mode, R] = row[mode]
            for mode in ("whole", "part"):
                print(_row_line(case.label, R, mode, row[mode]), flush=True)
            for f in Path(workdir).glob(f"shards-{R}*"):   # a rank count's shards are not needed again
                shutil.rmtree(f, ignore_errors=True)
            rows.append(row)
    return rows


def parse(argv: Optional[list] = None) -> Any:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 and 2 ranks (smoke test)")
    ap.add_argument("--cases", default=None,
                    help="comma-separated: snap, synth-1e6, synth-1e7, synth-1e8, road, events-1e6, events-1e7 "
                         "(default: all but synth-1e8; --quick: synth-quick, road-quick, events-quick)")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--modes", default="whole,part")
    ap.add_argument("--placements", default="partitioned,sven", help="events: memory placements")
    ap.add_argument("--scheme", default="pss", help="snapshot partition scheme")
    ap.add_argument("--epochs", type=int, default=0, help="training epochs after the set-up (0: set-up only)")
    ap.add_argument("--workdir", default="/tmp/issue37/bench")
    ap.add_argument("--keep", action="store_true", help="keep the prepared files")
    ap.add_argument("--cap-gib", type=float, default=14.0, help="watchdog: one process's resident memory")
    ap.add_argument("--total-cap-gib", type=float, default=20.0, help="watchdog: all of a job's processes")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds a collective may wait")
    ap.add_argument("--json", default="", help="write every row (per rank too) to this file")
    ap.add_argument("--from-json", default="", help="comma-separated JSON files of earlier runs: print their rows "
                    "together (table and projection) instead of measuring")
    args = ap.parse_args(argv)
    if args.quick:
        args.cases = args.cases or "synth-quick,road-quick,events-quick"
        args.ranks = "1,2"
    args.cases = args.cases or "snap,synth-1e6,synth-1e7,road,events-1e6,events-1e7"
    return args


def _checkout() -> str:
    """The commit measured (``+ changes`` when the working tree differs from it)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root,
                              timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "pyg_dynscale"],
                               capture_output=True, text=True, cwd=root, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" + uncommitted changes in pyg_dynscale/" if dirty else "")


def main(argv: Optional[list] = None) -> dict:
    args = parse(argv)
    known = cases(args.quick)
    ranks = [int(r) for r in args.ranks.split(",")]
    modes = args.modes.split(",")
    start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    checkout = _checkout()
    print(f"bench_rank_memory: {start}; checkout {checkout}; torch {torch.__version__}; {os.cpu_count()} cores; "
          f"load average "
          f"{os.getloadavg()[0]:.2f}; gloo ranks of 1 thread; set-up only" +
          (f" + {args.epochs} epochs" if args.epochs else "") + (" (--quick)" if args.quick else ""), flush=True)
    rows: list = []
    calib = Calibration()
    if args.from_json:
        starts = []
        for path in args.from_json.split(","):
            with open(path) as f:
                saved = json.load(f)
            rows += saved["rows"]
            starts.append(saved["start"])
        start = " and ".join(starts)
    for name in ([] if args.from_json else args.cases.split(",")):
        if name not in known:
            raise SystemExit(f"unknown case {name!r} (one of {', '.join(known)})")
        base = known[name]
        variants = ([Case(base.name, base.family, f"{base.label} ({p})", base.make, base.size, p)
                     for p in args.placements.split(",")] if base.family == "events" else [base])
        workdir = os.path.join(args.workdir, name)
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir, exist_ok=True)
        try:
            rows += run_case(base, variants, args, workdir, ranks, modes, calib)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
    loads = [x for r in rows for m in ("whole", "part") for x in r[m].get("load", ())]
    span = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
    print(f"\n## Per-rank peak host memory and set-up time (measured; {start}; 1-minute load average "
          f"{span} over the jobs)\n")
    print(table(rows))
    print(f"\ngoal: part MiB/rank <= {GOAL_FACTOR} x whole / ranks + halo rows x whole / N, whole = the 1-rank "
          "whole-data peak (the whole data set in one process)")
    proj = projection(rows)
    print("\n## PROJECTION (not measured): 4 ranks at 10^8 and 64 ranks at 10^9 vertex-time nodes / events, "
          "from the model fitted to the measured rows\n")
    print("\n".join(projection_lines(proj)))
    result = {"rows": [{k: v for k, v in r.items()} for r in rows], "projection": proj, "args": vars(args),
              "start": start, "checkout": checkout}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return result


if __name__ == "__main__":
    main()
