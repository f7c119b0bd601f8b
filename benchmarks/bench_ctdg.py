"""Event streams, one process: PyG's ``examples/tgn.py`` training loop vs
``pyg_dynscale.ctdg.MemoryTrainer`` (the same modules, data and seed; the
trainer reproduces the example's numbers, tests/ctdg/test_trainer_oracle.py),
training events per second and the validation AP after N epochs.

    python benchmarks/bench_ctdg.py [--epochs 2] [--quick]

Streams: the shared CollegeMsg events (59,835 messages; one constant message
column, since PyG's TGNMemory cannot take zero-width messages) and a synthetic
bipartite stream (``synthetic_events``). Model sizes as the example (100/100/100),
batch 200, float32, CPU. Not built yet: the 2-process 2x1x1 / 1x2x1 / 1x1x2 rows.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch_geometric.loader import TemporalDataLoader
from torch_geometric.nn.models.tgn import LastNeighborLoader

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks._shared import DATASETS  # noqa: E402
from pyg_dynscale.ctdg import TGN, MemoryTrainer, load_event_list, synthetic_events  # noqa: E402


def example_epoch(data, train_data, model, loader, neighbor_loader, optimizer, assoc):
    """One epoch of the example's ``train()`` (its code, its modules)."""
    memory, gnn, link_pred = model.memory, model.gnn, model.link_pred
    criterion = torch.nn.BCEWithLogitsLoss()
    memory.train()
    gnn.train()
    link_pred.train()
    memory.reset_state()
    neighbor_loader.reset_state()
    total_loss = 0
    for batch in loader:
        optimizer.zero_grad()
        n_id, edge_index, e_id = neighbor_loader(batch.n_id)
        assoc[n_id] = torch.arange(n_id.size(0))
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
        total_loss += float(loss) * batch.num_events
    return total_loss / train_data.num_events


def run(name, data, epochs):
    torch.manual_seed(0)
    model = TGN(data.num_nodes, data.msg.size(-1), 100, 100, 100)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    # the example
    torch.manual_seed(0)
    train_data, _, _ = data.train_val_test_split(val_ratio=0.15, test_ratio=0.15)
    loader = TemporalDataLoader(train_data, batch_size=200, neg_sampling_ratio=1.0)
    nl = LastNeighborLoader(data.num_nodes, size=10)
    opt = torch.optim.Adam(set(model.memory.parameters()) | set(model.gnn.parameters())
                           | set(model.link_pred.parameters()), lr=1e-4)
    assoc = torch.empty(data.num_nodes, dtype=torch.long)
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
    print(f"{name:<12} {train_data.num_events:>8} {n / t_ref:>12.0f} {n / t_mine:>12.0f} {t_ref / t_mine:>7.2f}x"
          f" {ref_loss:>9.4f} {loss:>9.4f} {val['ap']:>7.4f} {val['mrr']:>7.4f}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="small streams (a smoke run)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"one process, CPU, {args.threads} thread(s), {args.epochs} epoch(s); the example's loss and the trainer's "
          "differ only in the random stream (the example here draws no DataLoader seed before the trainer)")
    print(f"{'stream':<12} {'train ev':>8} {'example ev/s':>12} {'trainer ev/s':>12} {'ratio':>8} "
          f"{'ex. loss':>9} {'loss':>9} {'val AP':>7} {'val MRR':>7}")
    streams = []
    college = DATASETS / "snap" / "CollegeMsg.txt"
    if college.exists():
        d = load_event_list(college)
        d.msg = torch.ones(d.num_events, 1)
        streams.append(("CollegeMsg", d[:10000] if args.quick else d))
    streams.append(("synthetic", synthetic_events(5000 if args.quick else 100_000, 2000, msg_dim=16, seed=0)))
    for name, d in streams:
        run(name, d, args.epochs)


if __name__ == "__main__":
    main()
