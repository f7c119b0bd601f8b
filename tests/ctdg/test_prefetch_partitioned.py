"""Sven's prefetch (§7.2) with a partitioned memory (memory_placement="partitioned" / "sven",
prefetch=True): the next step's neighbour lookup and its dispatch / aggregation id lists are organised
on the prefetch thread, only the rows move at the step; the numbers are prefetch=False's bit for bit
(float64, dropout on: i > 1 forks the dropout seeds with and without the prefetcher) on one process and
on 2 gloo ranks, the bytes are prefetch=False's and measured == predicted; every local batch after an
epoch's first used the prefetched lists (counted)."""
from __future__ import annotations

import threading

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn


def _run(world, placement, prefetch, epochs=2):
    d = synthetic_events(300, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    torch.manual_seed(4)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    tr = MemoryTrainer(model, d, batch_size=20, lr=1e-2, parallelism=(2, 1, 1), seed=1, mrr_negatives=0,
                       memory_placement=placement, partition="interval", prefetch=prefetch)
    threads = set()
    if prefetch:  # where the id lists are organised
        organise = tr.placement.organise_fetch

        def spy(occ):
            threads.add(threading.current_thread() is threading.main_thread())
            return organise(occ)

        tr.placement.organise_fetch = spy
    out = {"losses": [], "batch": [], "val": [], "traffic": []}
    for _ in range(epochs):
        out["losses"].append(tr.train_epoch())
        out["batch"].append(tr.batch_losses.clone())
        out["traffic"].append(tr.traffic())
        out["val"].append(tr.evaluate("val"))
    out["params"] = torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])
    out["memory"] = tr.memory_copy()
    # local batches with events after an epoch's first step (which has no step before it)
    out["expect"] = epochs * sum(1 for st in tr.schedule.steps()[1:] for t in tr.trainers if st.local[t].num_events)
    out["prefetched"] = dict(tr.prefetched)
    out["on_main"] = threads
    tr.close()
    return out


def _same(a, b, what):
    assert a["losses"] == b["losses"], what
    assert [(v["ap"], v["auc"]) for v in a["val"]] == [(v["ap"], v["auc"]) for v in b["val"]], what  # mrr: nan
    for x, y in zip(a["batch"], b["batch"]):
        assert torch.equal(x, y), what
    assert torch.equal(a["params"], b["params"]), what
    assert torch.equal(a["memory"][0], b["memory"][0]) and torch.equal(a["memory"][1], b["memory"][1]), what
    for ta, tb in zip(a["traffic"], b["traffic"]):  # the same id lists: the same bytes, rows and occurrences
        assert ta["measured"] == tb["measured"] == tb["predicted"] and ta["local"] == tb["local"], what
        assert {k: v for k, v in ta["redundancy"].items() if "eta" not in k} == \
            {k: v for k, v in tb["redundancy"].items() if "eta" not in k}, what
        for kind in ("dispatch", "aggregation"):
            assert torch.equal(ta["matrix"][kind], tb["matrix"][kind]), what


def _prefetched_everything(got):
    # every local batch with events after an epoch's first step took the thread's lists
    assert got["expect"] > 0
    assert got["prefetched"] == {"dispatch": got["expect"], "aggregation": got["expect"]}, got["prefetched"]


@pytest.mark.parametrize("placement", ["sven", "partitioned"])
def test_one_process_prefetch_equals_no_prefetch(placement):
    ref, got = _run(1, placement, False), _run(1, placement, True)
    _same(got, ref, placement)
    _prefetched_everything(got)
    assert got["on_main"] == {False, True}  # prefetched on the thread; the first step's on the trainer's
    assert ref["prefetched"] == {"dispatch": 0, "aggregation": 0}


def test_prefetch_refuses_micro_batches():
    d = synthetic_events(100, 20, msg_dim=3, seed=1)
    model = TGN(d.num_nodes, 3, memory_dim=4, time_dim=2, embedding_dim=4)
    with pytest.raises(NotImplementedError, match="'prefetch' is True with micro_batches=2"):
        MemoryTrainer(model, d, parallelism=(2, 1, 1), memory_placement="sven", micro_batches=2, prefetch=True)


def _ranks(rank, world):
    torch.set_num_threads(1)
    return {(p, f): _run(world, p, f) for p in ("sven", "partitioned") for f in (False, True)}


def test_two_ranks_prefetch_equals_no_prefetch():
    per_rank = spawn(_ranks, 2, timeout=180)
    for r, runs in enumerate(per_rank):
        for p in ("sven", "partitioned"):
            _same(runs[(p, True)], runs[(p, False)], (p, r))
            _prefetched_everything(runs[(p, True)])
            assert runs[(p, True)]["traffic"][0]["measured"]["dispatch"] > 0
