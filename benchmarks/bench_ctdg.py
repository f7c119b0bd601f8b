"""Event streams, one process: PyG's ``examples/tgn.py`` training loop vs
``pyg_dynscale.ctdg.MemoryTrainer`` (the same modules, data and seed; the
trainer reproduces the example's numbers, tests/ctdg/test_trainer_oracle.py),
training events per second and the validation AP after N epochs.

    python benchmarks/bench_ctdg.py [--epochs 2] [--quick]

Streams: the shared CollegeMsg events (59,835 messages; one constant message
column, since PyG's TGNMemory cannot take zero-width messages) and a synthetic
bipartite stream (``synthetic_events``). Model sizes as the example (100/100/100),
batch 200, float32, CPU.

``--parallel`` (section 2): DistTGL's parallelism on 2 processes (gloo),
1x1x1 (one process) vs 2x1x1 vs 1x2x1 vs 1x1x2 from the same initial weights:
validation AP and MRR after every epoch against epochs and against the
cumulative wall time of training (DistTGL Figs. 9-11, as tables), with the
trained events per second (each memory copy walks the training events and each
negative set trains them: ``j*k`` times the events per epoch). Then an
8-process projection, labelled as such: the measured seconds per step of
one process plus the measured per-step overhead of the 2-process runs scaled
by ``log2(8) / log2(2)`` (the latency steps of a tree all-reduce), steps per
epoch from the schedule.

    python benchmarks/bench_ctdg.py --parallel [--epochs 5] [--quick]
    python benchmarks/bench_ctdg.py --parallel --parallel-synthetic --events 1000000 --nodes 10000 --epochs 2
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch
from torch_geometric.loader import TemporalDataLoader
from torch_geometric.nn.models.tgn import LastNeighborLoader

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from pyg_dynscale.ctdg import TGN, EventSchedule, MemoryTrainer, load_event_list, synthetic_events  # noqa: E402
from pyg_dynscale.training.launch import spawn  # noqa: E402

PARALLELISMS = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2)]


def example_setup(data, model) -> tuple:
    """The example's globals for ``model``: ``(train_data, train loader, LastNeighborLoader, Adam, assoc)``
    (its split, batch 200 with one negative per event, 10 neighbours, lr 1e-4)."""
    train_data, _, _ = data.train_val_test_split(val_ratio=0.15, test_ratio=0.15)
    loader = TemporalDataLoader(train_data, batch_size=200, neg_sampling_ratio=1.0)
    nl = LastNeighborLoader(data.num_nodes, size=10)
    opt = torch.optim.Adam(set(model.memory.parameters()) | set(model.gnn.parameters())
                           | set(model.link_pred.parameters()), lr=1e-4)
    return train_data, loader, nl, opt, torch.empty(data.num_nodes, dtype=torch.long)


def example_epoch(data, train_data, model, loader, neighbor_loader, optimizer, assoc, around=None):
    """One epoch of the example's ``train()`` (its code, its modules); ``around(batch)``, if given, is a
    context manager each batch's body runs in (bench_host_syncs.py counts there)."""
    memory, gnn, link_pred = model.memory, model.gnn, model.link_pred
    criterion = torch.nn.BCEWithLogitsLoss()
    memory.train()
    gnn.train()
    link_pred.train()
    memory.reset_state()
    neighbor_loader.reset_state()
    total_loss = 0
    for batch in loader:
        with around(batch) if around is not None else contextlib.nullcontext():
            optimizer.zero_grad()
            n_id, edge_index, e_id = neighbor_loader(batch.n_id)
            assoc[n_id] = torch.arange(n_id.size(0), device=n_id.device)
            z, last_update = memory(n_id)
            z = gnn(z, last_update, edge_index, data.t[e_id], data.msg[e_id])
            pos_out = link_pred(z[assoc[batch.src]], z[assoc[batch.dst]])
            neg_out = link_pred(z[assoc[batch.src]], z[assoc[batch.neg_dst]])
            loss = criterion(pos_out, torch.ones_like(pos_out))
            loss += criterion(neg_out, torch.zeros_like(neg_out))
            memory.update_state(batch.src, batch.dst, batch.t, batch.msg)
            neighbor_loader.insert(batch.src, batch.dst)
            loss.backward()
            optimizer.step()
            memory.detach()
            total_loss += float(loss.detach()) * batch.num_events
    return total_loss / train_data.num_events


def run(name, data, epochs):
    torch.manual_seed(0)
    model = TGN(data.num_nodes, data.msg.size(-1), 100, 100, 100)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    # the example
    torch.manual_seed(0)
    train_data, loader, nl, opt, assoc = example_setup(data, model)
    t0 = time.perf_counter()
    for _ in range(epochs):
        ref_loss = example_epoch(data, train_data, model, loader, nl, opt, assoc)
    t_ref = time.perf_counter() - t0
    # the trainer, from the same initial weights
    model.load_state_dict(state)
    trainer = MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10, seed=0)
    t0 = time.perf_counter()
    for _ in range(epochs):
        loss = trainer.train_epoch()
    t_mine = time.perf_counter() - t0
    val = trainer.evaluate("val")
    n = train_data.num_events * epochs
    print(f"{name:<20} {train_data.num_events:>8} {n / t_ref:>12.0f} {n / t_mine:>12.0f} {t_ref / t_mine:>7.2f}x"
          f" {ref_loss:>9.4f} {loss:>9.4f} {val['ap']:>7.4f} {val['mrr']:>7.4f}", flush=True)


def _stream(quick, events=0, nodes=0):
    """Section 2's stream: CollegeMsg, or (``events > 0``, or no CollegeMsg file) a synthetic one."""
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists() and events <= 0:
        d = load_event_list(college)
        d.msg = torch.ones(d.num_events, 1)
        return "CollegeMsg" + (" (first 6,000)" if quick else ""), (d[:6000] if quick else d)
    n = 6000 if quick else (events if events > 0 else 60_000)
    return f"synthetic ({n:,} events, {nodes or 1000:,} nodes)", synthetic_events(n, nodes or 1000, msg_dim=16, seed=0)


def curve(rank, world, par, epochs, quick, batch_size, lr, events=0, nodes=0):
    """One run of ``par`` (on ``world`` processes, or emulated with ``world == 1`` for (1, 1, 1)): per epoch the
    cumulative training seconds (slowest rank), the validation AP and MRR, the loss; the steps per epoch."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    _, data = _stream(quick, events, nodes)
    torch.manual_seed(0)
    model = TGN(data.num_nodes, data.msg.size(-1), 100, 100, 100)
    trainer = MemoryTrainer(model, data, batch_size=batch_size, lr=lr, num_neighbors=10, seed=0, parallelism=par)
    rows, clock = [], 0.0
    for _ in range(epochs):
        t0 = time.perf_counter()
        loss = trainer.train_epoch()
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
        clock += float(took)
        val = trainer.evaluate("val")
        rows.append((clock, val["ap"], val["mrr"], loss))
    return {"rows": rows, "steps": len(trainer.schedule.steps()), "train": trainer.val_start,
            "bytes": trainer.stats()}


def parallel(args):
    events, nodes = (args.events, args.nodes) if args.parallel_synthetic else (0, 0)
    name, data = _stream(args.quick, events, nodes)
    b, lr = args.batch_size, args.lr
    print(f"\n== DistTGL parallelism on 2 processes (gloo, CPU, 1 thread each): {name}, {data.num_events} events, "
          f"local batch {b}, lr {lr}, memory/time/embedding 100 ==")
    runs = {}
    for par in PARALLELISMS:
        world = par[0] * par[1] * par[2]
        if world == 1:
            runs[par] = curve(0, 1, par, args.epochs, args.quick, b, lr, events, nodes)
        else:
            runs[par] = spawn(curve, world, par, args.epochs, args.quick, b, lr, events, nodes, timeout=4 * 3600)[0]
        r = runs[par]
        print(f"  {'x'.join(map(str, par))}: " + ", ".join(f"epoch {e + 1} {c:.1f}s AP {ap:.4f}"
                                                          for e, (c, ap, _, _) in enumerate(r["rows"])), flush=True)
    label = {p: "x".join(map(str, p)) for p in PARALLELISMS}
    print("\nvalidation AP (MRR) after each epoch (memory copy 0)")
    print(f"{'epoch':>5} " + " ".join(f"{label[p]:>17}" for p in PARALLELISMS))
    for e in range(args.epochs):
        print(f"{e + 1:>5} " + " ".join(f"{runs[p]['rows'][e][1]:>8.4f} ({runs[p]['rows'][e][2]:.4f})"
                                        for p in PARALLELISMS))
    print("\nvalidation AP against cumulative training seconds (slowest rank)")
    print(f"{'epoch':>5} " + " ".join(f"{label[p]:>17}" for p in PARALLELISMS))
    for e in range(args.epochs):
        print(f"{e + 1:>5} " + " ".join(f"{runs[p]['rows'][e][0]:>7.1f}s {runs[p]['rows'][e][1]:>8.4f}"
                                        for p in PARALLELISMS))
    print(f"\n{'parallelism':>11} {'steps/epoch':>11} {'s/epoch':>8} {'events/s':>9} {'trained ev/s':>12} "
          f"{'grad MB':>8} {'gather MB':>9}")
    per_step = {}
    for p in PARALLELISMS:
        r = runs[p]
        sec = r["rows"][-1][0] / args.epochs
        per_step[p] = sec / r["steps"]
        j, k = p[1], p[2]
        print(f"{label[p]:>11} {r['steps']:>11} {sec:>8.2f} {r['train'] / sec:>9.0f} {r['train'] * j * k / sec:>12.0f} "
              f"{r['bytes']['gradients'] / 1e6:>8.1f} {r['bytes']['gather'] / 1e6:>9.2f}")
    # the projection: seconds per step = one process's + the 2-process overhead x log2(8) / log2(2)
    base = per_step[(1, 1, 1)]
    train = runs[(1, 1, 1)]["train"]
    print("\nPROJECTION to 8 processes (not measured): seconds per step = 1-process step + 3 x the measured 2-process "
          "overhead per step of the same kind")
    print(f"{'parallelism':>11} {'steps/epoch':>11} {'s/epoch':>8} {'events/s':>9} {'trained ev/s':>12}")
    for p8, p2 in (((8, 1, 1), (2, 1, 1)), ((1, 8, 1), (1, 2, 1)), ((1, 1, 8), (1, 1, 2)), ((2, 1, 4), (1, 1, 2))):
        steps = len(EventSchedule(train, b, p8).steps())
        step = base + 3 * max(0.0, per_step[p2] - base)
        sec = steps * step
        j, k = p8[1], p8[2]
        print(f"{label.get(p8, 'x'.join(map(str, p8))):>11} {steps:>11} {sec:>8.2f} {train / sec:>9.0f} "
              f"{train * j * k / sec:>12.0f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="small streams (a smoke run)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--parallel", action="store_true",
                    help="only section 2: 1x1x1 vs 2x1x1 vs 1x2x1 vs 1x1x2 on 2 processes, and the 8-process projection")
    ap.add_argument("--batch-size", type=int, default=200, help="section 2's local batch (default: 200)")
    ap.add_argument("--lr", type=float, default=1e-4, help="section 2's learning rate (default: 1e-4)")
    ap.add_argument("--parallel-synthetic", action="store_true",
                    help="section 2 on the synthetic stream of --events / --nodes instead of CollegeMsg")
    ap.add_argument("--events", type=int, default=100_000,
                    help="events of section 1's synthetic stream (default: 100,000; the issue's large row: 1000000)")
    ap.add_argument("--nodes", type=int, default=2000, help="nodes of section 1's synthetic stream (default: 2000)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.parallel:
        parallel(args)
        return
    print(f"one process, CPU, {args.threads} thread(s), {args.epochs} epoch(s); the example's loss and the trainer's "
          "differ only in the random stream (the example here draws no DataLoader seed before the trainer)")
    print(f"{'stream':<20} {'train ev':>8} {'example ev/s':>12} {'trainer ev/s':>12} {'ratio':>8} "
          f"{'ex. loss':>9} {'loss':>9} {'val AP':>7} {'val MRR':>7}")
    streams = []
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists():
        d = load_event_list(college)
        d.msg = torch.ones(d.num_events, 1)
        streams.append(("CollegeMsg", d[:10000] if args.quick else d))
    n_events = 5000 if args.quick else args.events
    streams.append((f"synthetic {n_events:,}", synthetic_events(n_events, args.nodes, msg_dim=16, seed=0)))
    for name, d in streams:
        run(name, d, args.epochs)


if __name__ == "__main__":
    main()
