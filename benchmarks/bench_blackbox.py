r"""The black-box path against PyGT's own loop, the price of generality, and
memory with and without gradient checkpointing -- side by side in one run.

1. **Black-box vs PyGT's loop** (GConvGRU(K=2) and DCRNN(K=2), hidden 32):
   PyGT's canonical loop on one process (snapshots pre-built as PyG ``Data``,
   state carried, one backward per epoch), ``FusedTrainer`` (black-box, one
   process) and ``DistributedTrainer`` (black-box, PTS, 2 and 4 gloo ranks),
   on England COVID, on DGC's synthetic generator (power-law degrees) and on
   a road-grid graph (PyGT's traffic setting; ids row by row, and shuffled
   with plain PTS and PTS with locality), all but England >= 100k
   vertex-time nodes.
   Epoch time is the median over epochs of the slowest rank; bytes per epoch
   are measured (== predicted, asserted).
2. **Decomposed vs black-box** for PyGT's T-GCN on one process: what calling
   the cell per snapshot costs against the fused path.
3. **Memory**: peak tensor memory of one forward + backward (from the
   profiler's allocation events) and the activations saved at the end of the
   forward (each configuration in a fresh process), with and without
   ``checkpoint_every``, on a synthetic graph with 500 snapshots, on both
   paths, one process and 2 ranks.
4. **Sequence length**: time per snapshot of the black-box path and of PyGT's
   loop for 100 to 4000 tiny snapshots (Python overhead per snapshot).
5. **ReInc's reuse** (``FusedTrainer(reuse=...)``, :mod:`pyg_dynscale.runtime.step_reuse`):
   PyGT's own loop vs the black-box path with reuse off (the cell called per
   snapshot) and on, one process, float32, for GConvGRU(K=2),
   GConvLSTM(K=2), DCRNN(K=2), GCLSTM(K=2), TGCN and PyGT's example
   ``RecurrentGCN`` (GConvGRU, ReLU, Linear) on Chickenpox (20
   nodes, 517 snapshots) and a static synthetic graph (2000 nodes, 8000
   edges, 200 snapshots). The three columns' epochs are interleaved so that
   the load of other processes hits them alike; the first epoch losses are
   compared (the same model and data: equal to float32 rounding).

    python benchmarks/bench_blackbox.py            # full (about 6 min on 2 cores)
    python benchmarks/bench_blackbox.py --quick    # smoke test (about 40 s on 2 cores)
    python benchmarks/bench_blackbox.py --sections 5               # the reuse table alone
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Optional

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pyg_dynscale import DynamicGraphSignal  # noqa: E402
from pyg_dynscale._optional import import_pygt  # noqa: E402

HIDDEN = 32
DATASETS = ["england_covid", "synthetic", "road_grid", "road_grid_shuffled"]


# ------------------------------------------------------------------ data
def sorted_copy(sig: DynamicGraphSignal) -> DynamicGraphSignal:
    """The same snapshots with edges symmetric, unique and sorted by
    (target, source) (PyGT's DCRNN needs that to split a snapshot)."""
    eis, ws, xs, ys, ids = [], [], [], [], []
    for d in sig:
        n = d.num_nodes
        a, b = d.edge_index
        w = d.edge_attr if d.edge_attr is not None else torch.ones(a.numel())
        src, dst, ww = torch.cat([a, b]), torch.cat([b, a]), torch.cat([w, w])
        keep = src != dst
        key, inv = torch.unique(dst[keep] * n + src[keep], return_inverse=True)
        wsum = torch.zeros(key.numel(), dtype=ww.dtype).index_add_(0, inv, ww[keep])
        eis.append(torch.stack([key % n, key // n]))
        ws.append(wsum)
        xs.append(d.x)
        ys.append(d.y)
        ids.append(d.n_id)
    return DynamicGraphSignal(eis, ws, xs, ys, node_ids=ids, num_vertices=sig.num_vertices)


def road_grid(rows: int, cols: int, T: int, keep: float = 0.9, seed: int = 0, shuffle: bool = False) -> DynamicGraphSignal:
    """A road-network-like graph (PyGT's traffic setting): a ``rows x cols``
    grid, each street present in a snapshot with probability ``keep``,
    features and targets random. ``shuffle``: vertex ids in random order (as
    sensor ids are), instead of row by row."""
    g = torch.Generator().manual_seed(seed)
    V = rows * cols
    r, c = torch.arange(V) // cols, torch.arange(V) % cols
    right = (c < cols - 1).nonzero().flatten()
    down = (r < rows - 1).nonzero().flatten()
    und = torch.cat([torch.stack([right, right + 1]), torch.stack([down, down + cols])], 1)
    if shuffle:
        und = torch.randperm(V, generator=torch.Generator().manual_seed(seed + 1))[und]
    eis, ws, xs, ys = [], [], [], []
    for _ in range(T):
        e = und[:, torch.rand(und.shape[1], generator=g) < keep]
        eis.append(torch.cat([e, e.flip(0)], 1))
        ws.append(torch.ones(eis[-1].shape[1]))
        xs.append(torch.randn(V, 8, generator=g))
        ys.append(torch.randn(V, generator=g))
    return sorted_copy(DynamicGraphSignal(eis, ws, xs, ys, num_vertices=V))


def dataset(name: str, quick: bool) -> DynamicGraphSignal:
    from pyg_dynscale.data.loaders import load_england_covid
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    if name == "england_covid":  # --quick: its first 12 snapshots
        sig = load_england_covid()
        return sorted_copy(sig[0:12] if quick else sig)
    if name in ("road_grid", "road_grid_shuffled"):  # 100k vertex-time nodes in full
        return road_grid(*((8, 20, 6) if quick else (40, 50, 50)), shuffle=name == "road_grid_shuffled")
    V, T = (200, 6) if quick else (2000, 50)  # 100k vertex-time nodes in full
    return sorted_copy(generate_dynamic_graph(V, 4 * V * T, T, presence=1.0, num_features=8, seed=0))


def cell(name: str, F: int):
    rec = import_pygt("bench_blackbox").nn.recurrent
    torch.manual_seed(0)
    if name == "GConvGRU":
        return rec.GConvGRU(F, HIDDEN, 2)
    if name == "DCRNN":
        return rec.DCRNN(F, HIDDEN, 2)
    return rec.TGCN(F, HIDDEN)


# ------------------------------------------------------------------ PyGT's loop
def pygt_epochs(m, head, sig: DynamicGraphSignal, epochs: int) -> list[float]:
    snaps = list(sig)  # pre-built: the baseline pays no conversion
    opt = torch.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=0.01)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        opt.zero_grad()
        table = torch.zeros(sig.num_vertices, HIDDEN)
        cost = 0
        for t, d in enumerate(snaps):
            h = m(d.x, d.edge_index, d.edge_attr, table.index_select(0, d.n_id))
            table = table.index_copy(0, d.n_id, h)
            cost = cost + torch.mean((head(h).squeeze(1) - d.y) ** 2)
        (cost / (t + 1)).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times


def fused_epochs(m, head, sig, epochs: int, path: str = "blackbox", every=None) -> list[float]:
    from pyg_dynscale.runtime import FusedTrainer

    tr = FusedTrainer(m, sig, head=head, loss="mse", lr=0.01, path=path, checkpoint_every=every)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        tr.train_epoch()
        times.append(time.perf_counter() - t0)
    return times


def _rank(rank: int, world_size: int, configs: list, quick: bool, epochs: int) -> list:
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.partition import DependencyPattern, partition

    out = []
    for data, cname, locality in configs:
        sig = dataset(data, quick)
        m, head = cell(cname, sig.num_node_features), torch.nn.Linear(HIDDEN, 1)
        part = partition(sig, "pts", world_size, DependencyPattern.preset("tgcn", sig.num_node_features, HIDDEN),
                         locality=locality)
        tr = DistributedTrainer(m, sig, part, head=head, loss="mse", lr=0.01, path="blackbox")
        for _ in range(epochs):
            tr.train_epoch()
        t = tr.traffic()
        assert t["measured"]["total"] == t["predicted"]["total"], t
        sizes = tr.plan.local_sizes().sum(0)
        out.append({"data": data, "cell": cname, "epoch": tr.epoch_seconds, "comm": tr.comm_seconds, "bytes": t["measured"]["total"],
                    "grad_sync": t["measured"]["grad_sync"], "local": int(sizes[0]), "owned": int(sizes[1])})
    return out


def median_tail(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) > 1 else times)


# ------------------------------------------------------------------ sections
def pygt_configs() -> list:
    """Section 1's distributed runs: (dataset, cell, locality)."""
    return [(d, c, loc) for d in DATASETS for c in ("GConvGRU", "DCRNN")
            for loc in ((False, True) if d == "road_grid_shuffled" else (False,))]


def section_pygt(quick: bool, epochs: int, two_ranks: Optional[list] = None) -> None:
    """``two_ranks``: the 2-rank results of :func:`pygt_configs`, already run (``--quick``: :func:`quick_ranks`)."""
    from pyg_dynscale.distributed import spawn

    print("\n== 1. black-box vs PyGT's loop (epoch seconds, slowest rank; ratio = PyGT / ours; partition PTS, "
          "'+loc': PTS with locality) ==")
    configs = pygt_configs()
    dist_res = {R: two_ranks if R == 2 and two_ranks is not None else spawn(_rank, R, configs, quick, epochs,
                                                                            timeout=3600)
                for R in ((2,) if quick else (2, 4))}
    print(f"{'dataset':<24}{'cell':<10}{'nodes':>8} {'PyGT loop':>10} {'1 proc':>8} {'ratio':>6}"
          + "".join(f" {f'{R} ranks':>9} {'ratio':>6} {'comm':>5} {'KiB/epoch':>10} {'local/own':>9}" for R in dist_res))
    single: dict = {}
    for i, (data, cname, loc) in enumerate(configs):
        sig = dataset(data, quick)
        F = sig.num_node_features
        if (data, cname) not in single:  # the one-process runs do not depend on the partition
            m, head = cell(cname, F), torch.nn.Linear(HIDDEN, 1)
            base = median_tail(pygt_epochs(m, head, sig, epochs))
            single[data, cname] = (base, median_tail(fused_epochs(cell(cname, F), torch.nn.Linear(HIDDEN, 1), sig,
                                                                  epochs)))
        base, one = single[data, cname]
        name = data + ("+loc" if loc else "")
        row = f"{name:<24}{cname:<10}{sig.num_vertex_time_nodes:>8} {base:>10.3f} {one:>8.3f} {base / one:>6.2f}"
        for R, res in dist_res.items():
            per_rank = [r[i] for r in res]
            ep = statistics.median([max(e) for e in zip(*[r["epoch"][1:] or r["epoch"] for r in per_rank])])
            dup = sum(r["local"] for r in per_rank) / max(sum(r["owned"] for r in per_rank), 1)
            share = statistics.median([c / e for r in per_rank for c, e in zip(r["comm"][1:], r["epoch"][1:])] or [0.0])
            row += f" {ep:>9.3f} {base / ep:>6.2f} {share:>5.0%} {per_rank[0]['bytes'] / 1024:>10.1f} {dup:>9.2f}"
        print(row)
    print(f"(machine: {os.cpu_count()} cores; 4 ranks oversubscribe a 2-core machine; comm: share of a rank's epoch "
          "inside collectives, waiting included; local/own: rows the ranks' calls compute per row they own -- 1.0 "
          "means no halo duplication)")


def section_generality(quick: bool, epochs: int) -> None:
    print("\n== 2. T-GCN: decomposed vs black-box, one process (epoch seconds) ==")
    print(f"{'dataset':<14}{'decomposed':>11} {'black-box':>10} {'black-box / decomposed':>24}")
    for data in ("england_covid", "synthetic"):
        sig = dataset(data, quick)
        F = sig.num_node_features
        dec = median_tail(fused_epochs(cell("TGCN", F), torch.nn.Linear(HIDDEN, 1), sig, epochs, path="decomposed"))
        bb = median_tail(fused_epochs(cell("TGCN", F), torch.nn.Linear(HIDDEN, 1), sig, epochs, path="blackbox"))
        print(f"{data:<14}{dec:>11.3f} {bb:>10.3f} {bb / dec:>24.2f}")


def measure_step(tr, epochs: int) -> dict:
    """Memory of one training step of ``tr`` and its epoch time.

    ``peak_mb``: the largest amount of tensor memory allocated at once
    during one forward + backward, above what was allocated before it (every
    allocation and free of the step, from the profiler's memory events, in
    time order): activations, recomputed windows, received rows and
    gradients. ``saved_mb``: storages saved for the backward at the end of
    the forward outside checkpointed windows (what stays alive between
    forward and backward)."""
    from torch.profiler import ProfilerActivity, profile

    tr.train_epoch()  # first-call allocations out of the way
    tr.optimizer.zero_grad(set_to_none=True)
    storages: dict = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
        return t

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = tr.compute_loss()
        loss.backward()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    tr.optimizer.zero_grad(set_to_none=True)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        tr.train_epoch()
        times.append(time.perf_counter() - t0)
    return {"saved_mb": sum(storages.values()) / 2 ** 20, "peak_mb": peak / 2 ** 20, "epoch": median_tail(times)}


def _memory_signal(cfg: dict) -> DynamicGraphSignal:
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    V, T = cfg["V"], cfg["T"]
    return generate_dynamic_graph(V, 3 * V * T, T, presence=1.0, num_features=8, seed=1)


def _memory_rank(rank: int, world_size: int, cfg: dict) -> dict:
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.partition import partition

    sig = _memory_signal(cfg)
    m, head = cell(cfg["cell"], 8), torch.nn.Linear(HIDDEN, 1)
    tr = DistributedTrainer(m, sig, partition(sig, "pts", world_size), head=head, loss="mse", lr=0.01,
                            path=cfg["path"], checkpoint_every=cfg["every"])
    return measure_step(tr, cfg["epochs"])


def _memory_ranks(rank: int, world_size: int, cfgs: list) -> list:
    return [_memory_rank(rank, world_size, cfg) for cfg in cfgs]


def memory_measure_ranks(cfgs: list) -> list:
    """Configurations of section 3 with the same number of ranks > 1, one spawned job for all (--quick: the
    process start-up, not the measurement, is what a smoke test would pay for); per rank, the largest."""
    from pyg_dynscale.distributed import spawn

    per_rank = spawn(_memory_ranks, cfgs[0]["ranks"], cfgs, timeout=3600)
    return [{k: max(r[i][k] for r in per_rank) for k in per_rank[0][i]} for i in range(len(cfgs))]


def memory_measure(cfg: dict) -> dict:
    """One configuration of section 3 (per rank, the largest)."""
    torch.set_num_threads(1)
    if cfg["ranks"] > 1:
        return memory_measure_ranks([cfg])[0]
    sig = _memory_signal(cfg)
    from pyg_dynscale.runtime import FusedTrainer

    tr = FusedTrainer(cell(cfg["cell"], 8), sig, head=torch.nn.Linear(HIDDEN, 1), loss="mse", lr=0.01,
                      path=cfg["path"], checkpoint_every=cfg["every"])
    return measure_step(tr, cfg["epochs"])


def memory_child(cfg: dict) -> None:
    print(json.dumps(memory_measure(cfg)))


def memory_sizes(quick: bool) -> tuple:
    """Section 3's vertices, snapshots and ``checkpoint_every``."""
    return (40, 24, 6) if quick else (400, 500, 25)


def memory_configs(quick: bool, epochs: int) -> dict:
    """Section 3's configurations by (path, ranks, checkpoint_every)."""
    V, T, every = memory_sizes(quick)
    return {(path, ranks, ev): {"V": V, "T": T, "cell": cname, "path": path, "every": ev, "epochs": epochs,
                                "ranks": ranks}
            for path, cname, ranks in MEMORY_CASES for ev in (None, every)}


MEMORY_CASES = (("blackbox", "GConvGRU", 1), ("decomposed", "TGCN", 1), ("blackbox", "GConvGRU", 2),
                ("decomposed", "TGCN", 2))


def _quick_ranks(rank: int, world_size: int, configs: list, memory: list, quick: bool, epochs: int) -> tuple:
    return _rank(rank, world_size, configs, quick, epochs), _memory_ranks(rank, world_size, memory)


def quick_ranks(secs: set, epochs: int) -> tuple:
    """--quick: the 2-rank work of sections 1 and 3 in ONE spawned job (a smoke run would otherwise pay the
    start-up of two): (section 1's per-rank results or None, section 3's results by configuration)."""
    from pyg_dynscale.distributed import spawn

    configs = pygt_configs() if "1" in secs else []
    mem = {k: c for k, c in memory_configs(True, epochs).items() if c["ranks"] == 2} if "3" in secs else {}
    per_rank = spawn(_quick_ranks, 2, configs, list(mem.values()), True, epochs, timeout=3600)
    two = [r[0] for r in per_rank] if configs else None
    measured = {k: {m: max(r[1][i][m] for r in per_rank) for m in per_rank[0][1][i]} for i, k in enumerate(mem)}
    return two, measured


def section_memory(quick: bool, epochs: int, two_ranks: Optional[dict] = None) -> None:
    """``two_ranks``: the 2-rank configurations' results, already measured (``--quick``: :func:`quick_ranks`)."""
    cfgs = memory_configs(quick, epochs)
    V, T, every = memory_sizes(quick)
    print(f"\n== 3. memory over {T} snapshots x {V} vertices ({T * V} vertex-time nodes; {'fresh process each' if not quick else '--quick: in one process, the 2-rank ones in one spawned job'}): peak "
          "tensor memory of one forward + backward, and activations saved at the end of the forward; per rank, the "
          "largest ==")
    print(f"{'path':<11}{'cell':<10}{'ranks':>6}{'checkpoint_every':>17} {'peak MiB':>9} {'saved MiB':>10} "
          f"{'epoch s':>8}")
    spawned = two_ranks or {}
    if quick and not spawned:  # the 2-rank configurations in one spawned job
        two = [k for k, c in cfgs.items() if c["ranks"] == 2]
        spawned = dict(zip(two, memory_measure_ranks([cfgs[k] for k in two])))
    for path, cname, ranks in MEMORY_CASES:
        rows = []
        for ev in (None, every):
            cfg = cfgs[path, ranks, ev]
            if quick:  # a smoke test: in this process (the full run isolates each measurement)
                r = spawned[path, ranks, ev] if ranks > 1 else memory_measure(cfg)
            else:
                out = subprocess.run([sys.executable, __file__, "--memory-child", json.dumps(cfg)],
                                     capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                if out.returncode != 0:
                    raise RuntimeError(out.stderr[-2000:])
                r = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(f"{path:<11}{cname:<10}{ranks:>6}{str(ev):>17} {r['peak_mb']:>9.1f} {r['saved_mb']:>10.1f} "
                  f"{r['epoch']:>8.3f}")
        print(f"{'':<27}peak off / on {rows[0]['peak_mb'] / max(rows[1]['peak_mb'], 1e-9):.1f}x, saved off / on "
              f"{rows[0]['saved_mb'] / max(rows[1]['saved_mb'], 1e-9):.1f}x, epoch time on / off "
              f"{rows[1]['epoch'] / rows[0]['epoch']:.2f}")


def section_length(quick: bool, epochs: int) -> None:
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    print("\n== 4. sequence length: microseconds per snapshot per epoch (10 vertices per snapshot, GConvGRU) ==")
    print(f"{'snapshots':>9} {'PyGT loop':>10} {'black-box':>10} {'ratio':>6}")
    for T in ((50, 200) if quick else (100, 1000, 4000)):
        sig = generate_dynamic_graph(10, 30 * T, T, presence=1.0, num_features=4, seed=2)
        base = median_tail(pygt_epochs(cell("GConvGRU", 4), torch.nn.Linear(HIDDEN, 1), sig, epochs))
        bb = median_tail(fused_epochs(cell("GConvGRU", 4), torch.nn.Linear(HIDDEN, 1), sig, epochs))
        print(f"{T:>9} {1e6 * base / T:>10.1f} {1e6 * bb / T:>10.1f} {base / bb:>6.2f}")


REUSE_CELLS = ("GConvGRU", "GConvLSTM", "DCRNN", "GCLSTM", "TGCN", "RecurrentGCN")


class RecurrentGCN(torch.nn.Module):
    """PyGT's example model (examples/recurrent/gconvgru_example.py): GConvGRU(K=2), ReLU, Linear."""

    def __init__(self, F: int) -> None:
        super().__init__()
        self.recurrent = import_pygt("bench_blackbox").nn.recurrent.GConvGRU(F, HIDDEN, 2)
        self.linear = torch.nn.Linear(HIDDEN, 1)

    def forward(self, x, edge_index, edge_weight, prev_hidden_state):  # noqa: ANN001
        h = self.recurrent(x, edge_index, edge_weight, prev_hidden_state)
        return self.linear(torch.relu(h)), h


def reuse_dataset(name: str, quick: bool) -> DynamicGraphSignal:
    """Chickenpox (PyGT's loader, lags 4; --quick: 60 snapshots), or a static
    power-law graph (2000 nodes, 8000 edges, T=200; --quick: 200 nodes, T=20)
    with new random features (8) and targets every snapshot."""
    from pyg_dynscale.data.loaders import load_pygt_json
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    from _shared import DATASETS as SHARED

    if name == "chickenpox":
        sig = load_pygt_json(str(SHARED / "pygt" / "chickenpox.json"), "chickenpox", feature_lags=4)
        return sig[0:60] if quick else sig
    V, T = (200, 20) if quick else (2000, 200)
    d0 = sorted_copy(generate_dynamic_graph(V, 4 * V, 1, presence=1.0, num_features=8, seed=0)).snapshot(0)
    g = torch.Generator().manual_seed(1)
    return DynamicGraphSignal([d0.edge_index] * T, [d0.edge_attr] * T, [torch.randn(V, 8, generator=g) for _ in range(T)],
                              [torch.randn(V, generator=g) for _ in range(T)])


def reuse_cell(name: str, F: int):
    rec = import_pygt("bench_blackbox").nn.recurrent
    torch.manual_seed(0)
    if name == "RecurrentGCN":
        return RecurrentGCN(F)
    return rec.TGCN(F, HIDDEN) if name == "TGCN" else getattr(rec, name)(F, HIDDEN, 2)


def pygt_static_epoch(m, head, snaps: list, opt, lstm: bool) -> float:
    """PyGT's example loop on a fixed vertex set: ``h`` (and ``c``) carried, cost averaged, one backward
    (``head=None``: the model returns ``(y, h)``, as PyGT's ``RecurrentGCN``)."""
    opt.zero_grad()
    cost, h, c = 0, None, None
    for t, d in enumerate(snaps):
        if lstm:
            h, c = m(d.x, d.edge_index, d.edge_attr, h, c)
        elif head is None:
            y, h = m(d.x, d.edge_index, d.edge_attr, h)
        else:
            h = m(d.x, d.edge_index, d.edge_attr, h)
        y = head(h) if head is not None else y
        cost = cost + torch.mean((y.squeeze(1) - d.y) ** 2)
    cost = cost / (t + 1)
    cost.backward()
    opt.step()
    return float(cost.detach())


def section_reuse(quick: bool, epochs: int, datasets: tuple = ("chickenpox", "static2000"),
                  cells: tuple = REUSE_CELLS) -> None:
    from pyg_dynscale.runtime import FusedTrainer

    print(f"\n== 5. ReInc's reuse on the black-box path: PyGT's loop vs FusedTrainer(reuse=False / True), one process, "
          f"float32, {torch.get_num_threads()} thread(s); median epoch seconds of {epochs - 1} interleaved epochs ==")
    print(f"{'dataset':<12}{'cell':<13}{'nodes':>6}{'T':>5} {'PyGT loop':>10} {'reuse off':>10} {'reuse on':>9} "
          f"{'PyGT/off':>9} {'PyGT/on':>8} {'first-loss rel diff':>20}")
    for data in datasets:
        sig = reuse_dataset(data, quick)
        snaps = list(sig)
        F = sig.num_node_features
        for cname in cells:
            wrapped = cname == "RecurrentGCN"  # PyGT's example model: its own Linear, no head

            def new_head():
                return None if wrapped else torch.nn.Linear(HIDDEN, 1)

            m, head = reuse_cell(cname, F), new_head()
            opt = torch.optim.Adam(list(m.parameters()) + (list(head.parameters()) if head is not None else []), lr=0.01)
            runs = {"pygt": lambda: pygt_static_epoch(m, head, snaps, opt, cname in ("GConvLSTM", "GCLSTM"))}
            for reuse in (False, True):
                tr = FusedTrainer(reuse_cell(cname, F), sig, head=new_head(), loss="mse", lr=0.01,
                                  path="blackbox", reuse=reuse)
                assert (tr.runner.reuse is not None) == reuse, (data, cname, reuse)
                runs["on" if reuse else "off"] = tr.train_epoch
            times: dict = {k: [] for k in runs}
            first: dict = {}
            for e in range(epochs):
                for k in list(runs)[e % 3:] + list(runs)[:e % 3]:  # rotate the order: no column always runs first
                    t0 = time.perf_counter()
                    loss = runs[k]()
                    times[k].append(time.perf_counter() - t0)
                    first.setdefault(k, loss)
            med = {k: median_tail(v) for k, v in times.items()}
            rel = max(abs(first[k] - first["pygt"]) for k in first) / abs(first["pygt"])
            print(f"{data:<12}{cname:<13}{int(sig.nodes_per_snapshot.max()):>6}{sig.num_snapshots:>5} "
                  f"{med['pygt']:>10.3f} {med['off']:>10.3f} {med['on']:>9.3f} {med['pygt'] / med['off']:>8.2f}x "
                  f"{med['pygt'] / med['on']:>7.2f}x {rel:>20.1e}")
    print("(goal: PyGT/on >= 3x for GConvGRU, GConvLSTM and DCRNN; timings on a shared machine vary with its load)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--sections", default="1,2,3,4,5")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="section 1 datasets")
    ap.add_argument("--reuse-datasets", default="chickenpox,static2000", help="section 5 datasets")
    ap.add_argument("--reuse-cells", default=",".join(REUSE_CELLS), help="section 5 cells")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.memory_child:
        memory_child(json.loads(a.memory_child))
        return
    torch.set_num_threads(1)
    epochs = a.epochs or (2 if a.quick else 4)
    DATASETS[:] = a.datasets.split(",")
    secs = set(a.sections.split(","))
    t0 = time.perf_counter()
    two_pygt, two_memory = quick_ranks(secs, epochs) if a.quick and secs & {"1", "3"} else (None, None)
    if "1" in secs:
        section_pygt(a.quick, epochs, two_pygt)
    if "2" in secs:
        section_generality(a.quick, epochs)
    if "3" in secs:
        section_memory(a.quick, epochs, two_memory)
    if "4" in secs:
        section_length(a.quick, epochs)
    if "5" in secs:
        section_reuse(a.quick, epochs if a.quick else max(epochs, 5), tuple(a.reuse_datasets.split(",")),
                      tuple(a.reuse_cells.split(",")))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
