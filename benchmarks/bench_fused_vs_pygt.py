r"""Epoch time: pyg_dynscale's fused single-device runtime vs PyGT's canonical loop.

PyGT's loop (pygt-notes §6, loops (A)/(C)/(D)): per epoch, hidden state carried
across snapshots (for changing vertex sets: each vertex's state from its
previous appearance), loss = mean over snapshots of the per-snapshot MSE, one
backward and one Adam step. The fused runtime (:class:`FusedTrainer`) trains
an identical copy of the same PyGT model object through its adapter. Both
loss trajectories are printed side by side with their max abs difference,
then the ratio of median epoch times. DySAT (no PyGT version) is compared with
pyg_dynscale's own per-snapshot reference loop.

    python benchmarks/bench_fused_vs_pygt.py            # full
    python benchmarks/bench_fused_vs_pygt.py --quick    # smoke test (seconds)
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from pyg_dynscale import DynamicGraphSignal  # noqa: E402
from pyg_dynscale._optional import import_pygt  # noqa: E402
from pyg_dynscale.nn import DySAT  # noqa: E402
from pyg_dynscale.runtime import FusedTrainer, dysat_per_snapshot, per_snapshot_outputs, tune_cpu_allocator  # noqa: E402

from _shared import DATASETS  # noqa: E402

DATA = str(DATASETS / "pygt")


def load_pygt_json(name: str) -> DynamicGraphSignal:
    """England COVID (embedded copy) / Twitter tennis RG17 (shared JSON), read by
    pyg_dynscale's loaders, which reproduce PyGT's loaders exactly."""
    from pyg_dynscale.data.loaders import load_england_covid, load_pygt_json as load_json

    if name == "england_covid":
        return load_england_covid()
    return load_json(os.path.join(DATA, "twitter_tennis_rg17.json"), "twitter_tennis")


def synthetic(num_nodes: int) -> DynamicGraphSignal:
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    T, p = 30, 0.8
    V = max(10, round(num_nodes / (T * p)))
    return generate_dynamic_graph(V, 5 * num_nodes, T, presence=p, sequence_length_std=0.3, edge_std=0.3,
                                  num_features=8, seed=0)


def fixed_vertex_set(signal: DynamicGraphSignal) -> bool:
    n = signal.nodes_per_snapshot
    if not bool((n == n[0]).all()):
        return False
    ids = signal.node_id.view(signal.num_snapshots, -1)
    return bool((ids == ids[0]).all())


# ------------------------------------------------------------------ loops
def pygt_epoch(step, head, signal, opt, state_width, fixed, snapshots):
    """PyGT's canonical loop: H carried, cost summed, one backward per epoch."""
    opt.zero_grad()
    cost, H, table = 0, None, None
    for t, snap in enumerate(snapshots):
        if state_width and not fixed:  # changing vertex set: state by vertex id
            if table is None:
                table = snap.x.new_zeros(signal.num_vertices, state_width)
            H = table.index_select(0, snap.n_id)
        h = step(snap.x, snap.edge_index, snap.edge_attr, H)
        if state_width:
            if fixed:
                H = h
            else:
                table = table.index_copy(0, snap.n_id, h)
        y_hat = head(h)
        cost = cost + torch.mean((y_hat.squeeze() - snap.y) ** 2)
    cost = cost / (t + 1)
    cost.backward()
    opt.step()
    return float(cost.detach())


def run_pair(name, model_name, signal, make, epochs):
    """make() -> (module, head, state_width, reference_step_fn)"""
    torch.manual_seed(0)
    module, head = make()
    module_f, head_f = copy.deepcopy(module), copy.deepcopy(head)
    fixed = fixed_vertex_set(signal)
    snapshots = [signal.snapshot(t) for t in range(signal.num_snapshots)]  # PyGT users iterate prepared Data
    if model_name == "dysat":
        opt = torch.optim.Adam(list(module.parameters()) + list(head.parameters()), lr=0.01)

        def base_epoch():
            opt.zero_grad()
            out = head(dysat_per_snapshot(module, signal)).squeeze(-1)
            from pyg_dynscale.runtime import snapshot_mean

            cost = snapshot_mean((out - signal.y) ** 2, signal.supergraph().time, signal.num_snapshots)
            cost.backward()
            opt.step()
            return float(cost.detach())

        base_label = "per-snapshot loop"
    else:
        opt = torch.optim.Adam(list(module.parameters()) + list(head.parameters()), lr=0.01)
        sw = module.out_channels if model_name == "tgcn" else 0
        step = module if model_name == "tgcn" else (lambda x, ei, ew, H: module(x, ei, ew))

        def base_epoch():
            return pygt_epoch(step, head, signal, opt, sw, fixed, snapshots)

        base_label = "PyGT loop"
    t0 = time.perf_counter()
    trainer = FusedTrainer(module_f, signal, head=head_f, loss="mse", lr=0.01)
    setup = time.perf_counter() - t0
    base_t, fused_t, base_l, fused_l = [], [], [], []
    for _ in range(epochs):
        t0 = time.perf_counter(); base_l.append(base_epoch()); base_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); fused_l.append(trainer.train_epoch()); fused_t.append(time.perf_counter() - t0)
    print(f"\n== {model_name} on {name}: T={signal.num_snapshots}, vertex-time nodes={signal.num_vertex_time_nodes}, "
          f"edges={signal.num_edges}, fixed vertex set={fixed}")
    print(f"   {'epoch':>5} {base_label + ' loss':>22} {'fused loss':>14}")
    for e, (a, b) in enumerate(zip(base_l, fused_l)):
        print(f"   {e:>5} {a:>22.8f} {b:>14.8f}")
    diff = max(abs(a - b) for a, b in zip(base_l, fused_l))
    # the first epoch includes one-time work (adjacency normalization, packing): report median of the rest
    mb = statistics.median(base_t[1:] if len(base_t) > 1 else base_t)
    mf = statistics.median(fused_t[1:] if len(fused_t) > 1 else fused_t)
    print(f"   max |loss diff| = {diff:.3g}")
    print(f"   median epoch: {base_label} {mb * 1e3:.1f} ms, fused {mf * 1e3:.1f} ms "
          f"(first fused epoch {fused_t[0] * 1e3:.1f} ms, trainer setup {setup * 1e3:.1f} ms)  -> speedup {mb / mf:.2f}x")
    return {"model": model_name, "dataset": name, "speedup": mb / mf, "max_loss_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and 2 epochs (smoke test)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--models", default="tgcn,mpnnlstm,dysat")
    ap.add_argument("--datasets", default=None, help="default: england_covid,twitter_tennis,synthetic "
                    "(--quick: england_covid,synthetic)")
    ap.add_argument("--synthetic-nodes", type=int, default=120_000, help="vertex-time nodes of the synthetic graph")
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = leave)")
    ap.add_argument("--tune-allocator", action="store_true",
                    help="pyg_dynscale.runtime.tune_cpu_allocator() first (process-wide: applies to both loops)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tuned = tune_cpu_allocator() if args.tune_allocator else False
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, glibc allocator tuned: {tuned}")
    epochs = 2 if args.quick else args.epochs
    pygt = import_pygt("the benchmark")
    rec = pygt.nn.recurrent
    Hd = args.hidden
    results = []
    datasets = args.datasets or ("england_covid,synthetic" if args.quick else "england_covid,twitter_tennis,synthetic")
    for ds in datasets.split(","):
        if ds == "synthetic":
            signal = synthetic(3000 if args.quick else args.synthetic_nodes)
        else:
            signal = load_pygt_json(ds)
            if args.quick:
                signal = signal[0:6]
        F_in = signal.num_node_features
        for model_name in args.models.split(","):
            if model_name == "tgcn":
                make = lambda: (rec.TGCN(F_in, Hd), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(Hd, 1)))
            elif model_name == "mpnnlstm":
                # PyGT's MPNNLSTM views X as [-1, window, num_nodes, F]; with window=1 and a
                # changing vertex set num_nodes=1 gives the same result for any snapshot size
                n0 = int(signal.nodes_per_snapshot[0]) if fixed_vertex_set(signal) else 1
                # dropout 0 so that both runs draw no random masks and the losses can be compared
                make = lambda: (rec.MPNNLSTM(F_in, Hd, n0, 1, 0.0), torch.nn.Linear(2 * Hd + F_in, 1))
            elif model_name == "dysat":
                make = lambda: (DySAT(F_in, Hd, signal.num_snapshots, num_blocks=1), torch.nn.Linear(Hd, 1))
            else:
                raise SystemExit(f"unknown model {model_name}")
            results.append(run_pair(ds, model_name, signal, make, epochs))
    print("\nsummary (speedup = PyGT-loop (or reference-loop) epoch time / fused epoch time):")
    for r in results:
        print(f"  {r['model']:>9} {r['dataset']:>15}: {r['speedup']:6.2f}x   max |loss diff| {r['max_loss_diff']:.2g}")


if __name__ == "__main__":
    main()
