"""The small MemoryTrainer set-ups that several event-stream test modules build: the host-sync counter's
(tests/ctdg/test_host_syncs.py, test_nccl_rules.py) and the micro-batch runs with their bit-for-bit
comparison (tests/ctdg/test_micro_batches.py, test_overlap_aggregation.py)."""
from __future__ import annotations

import math
import threading

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events


def host_syncs_data():
    d = synthetic_events(240, 25, msg_dim=3, seed=5, burst_length=15)
    d.msg = d.msg.double()
    return d


def host_syncs_trainer(world: int, parallelism=None, placement: str = "replicated", **kw) -> MemoryTrainer:
    d = host_syncs_data()
    torch.manual_seed(2)
    model = TGN(d.num_nodes, 3, memory_dim=5, time_dim=3, embedding_dim=6, dropout=0.1).double()
    if placement != "replicated":
        kw.setdefault("partition", "interval")
    return MemoryTrainer(model, d, batch_size=20, lr=1e-2, seed=3, mrr_negatives=4, memory_placement=placement,
                         parallelism=parallelism or (world, 1, 1), **kw)


def micro_batches_data():
    d = synthetic_events(300, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    return d


def micro_batches_trainer(world, micro, placement="sven", **kw):
    torch.manual_seed(4)
    d = micro_batches_data()
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.0).double()
    if placement != "replicated":  # a replicated memory has no owners
        kw.setdefault("partition", "interval")
    return MemoryTrainer(model, d, batch_size=20, lr=1e-2, parallelism=(world, 1, 1), seed=1, mrr_negatives=0,
                         memory_placement=placement, micro_batches=micro, **kw)


def micro_batches_run(world, micro, watch=False, **kw):
    tr = micro_batches_trainer(world, micro, **kw)
    overlapped = []
    if watch:  # the next micro-batch's fetch waits until the current micro-batch computes
        computing = threading.Event()
        compute = tr._share_compute

        def spy_compute(*a):
            computing.set()
            return compute(*a)

        tr._share_compute = spy_compute
        for view in tr._micro.views:
            def spy_fetch(occ, fetch=view.fetch):
                if threading.current_thread() is not threading.main_thread() and len(overlapped) < 4:
                    overlapped.append(computing.wait(timeout=2.0))
                    computing.clear()
                return fetch(occ)

            view.fetch = spy_fetch
    records, step = [], tr.optimizer.step

    def recorded(*a, **kw):
        out = step(*a, **kw)
        records.append(torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params]))
        return out

    tr.optimizer.step = recorded
    losses, batch = [], []
    for _ in range(2):
        losses.append(tr.train_epoch())
        batch += tr.batch_losses.tolist()
    out = {"losses": losses, "batch": batch, "records": records, "memory": tr.memory_copy(),
           "traffic": tr.traffic(), "n": tr.micro_batches_chosen if tr._micro is not None else None, "overlapped": overlapped}
    tr.close()
    return out


def same_runs(a, b, what):
    for x, y in zip(a["losses"] + a["batch"], b["losses"] + b["batch"]):
        assert math.isclose(x, y, rel_tol=0, abs_tol=1e-9), what
    assert len(a["records"]) == len(b["records"]) > 4
    for x, y in zip(a["records"], b["records"]):
        torch.testing.assert_close(x, y, atol=1e-9, rtol=0)
    torch.testing.assert_close(a["memory"][0], b["memory"][0], atol=1e-9, rtol=0)
    assert torch.equal(a["memory"][1], b["memory"][1]), what
