"""DistTGL's i x j x k parallelism under a gloo process group == its single-process emulation
(float64, dropout on): losses, parameters and every held memory copy after every step, the evaluation's
scores, replicas identical after every step, the same epoch loss and evaluation on every rank; with the
memory service and the neighbour prefetcher too. One spawned job per world size."""
from __future__ import annotations

import math

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn
from tests.helpers.event_streams import evaluation_scores

CASES = {2: [((2, 1, 1), False), ((1, 2, 1), False), ((1, 1, 2), False), ((1, 1, 2), True)], 3: [((3, 1, 1), True)]}


def _run(case, rank=0, world=1):
    par, service = case if world > 1 else (case[0], False)  # the emulation: without service and prefetcher
    d = synthetic_events(500, 40, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    torch.manual_seed(4)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    tr = MemoryTrainer(model, d, batch_size=25, lr=1e-2, parallelism=par, seed=1, mrr_negatives=5,
                       memory_service=service, prefetch=service)
    i, j, k = par
    copies = list(range(k)) if world == 1 else [rank // (i * j)]
    records = []
    step = tr.optimizer.step

    def recorded_step(*a, **kw):
        out = step(*a, **kw)
        if tr.service is not None:  # the step's write-back may still be running on the service thread
            tr.service.drain()
        params = torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])
        records.append((params, {c: tr.memory_copy(c) for c in copies}))
        return out

    tr.optimizer.step = recorded_step
    losses = [tr.train_epoch() for _ in range(2)]
    stats = tr.stats()  # training only (evaluation reads the memory directly)
    metrics, scores = evaluation_scores(tr)
    return {"losses": losses, "batch": tr.batch_losses.tolist(), "records": records, "val": metrics["val"],
            "test": metrics["test"], "stats": stats, "scores": scores}


def _ranks(rank, world):
    torch.set_num_threads(1)
    return [_run(case, rank, world) for case in CASES[world]]


def _check(world):
    single = [_run(case) for case in CASES[world]]
    per_rank = spawn(_ranks, world, timeout=120)
    for c, ((par, service), ref) in enumerate(zip(CASES[world], single)):
        i, j, k = par
        runs = [per_rank[r][c] for r in range(world)]
        for run in runs[1:]:  # the same floats on every rank
            assert run["losses"] == runs[0]["losses"] and run["batch"] == runs[0]["batch"], par
            assert run["val"] == runs[0]["val"] and run["test"] == runs[0]["test"], par
        assert len(runs[0]["records"]) == len(ref["records"]) == 2 * len(ref["batch"]) > 6
        for a, b in zip(runs[0]["losses"] + runs[0]["batch"], ref["losses"] + ref["batch"]):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), par
        # rank 0's evaluation (memory copy 0, whose result every rank reports): its scores to rounding
        # (AP, AUC and MRR are step functions of them: a score that moves by an ulp can tie with another,
        # or stop tying, and move AUC by a pair's weight -- (3, 1, 1) does on this stream)
        torch.testing.assert_close(runs[0]["scores"], ref["scores"], atol=1e-9, rtol=0)
        for s, (p_ref, mem_ref) in enumerate(ref["records"]):
            for r, run in enumerate(runs):
                p, mem = run["records"][s]
                assert torch.equal(p, runs[0]["records"][s][0]), (par, s, r)  # replicas identical
                torch.testing.assert_close(p, p_ref, atol=1e-9, rtol=0)
                (copy, (m, last)), = mem.items()
                assert copy == r // (i * j)
                torch.testing.assert_close(m, mem_ref[copy][0], atol=1e-9, rtol=0)
                assert torch.equal(last, mem_ref[copy][1])
                if i * j > 1:  # the ranks sharing a copy hold identical replicas of it
                    first = runs[copy * i * j]["records"][s][1][copy]
                    assert torch.equal(m, first[0]) and torch.equal(last, first[1])
        st = runs[0]["stats"]
        assert st["gradients"] > 0 and st["memory_read"] > 0 and st["memory_write"] > 0
        assert (st["gather"] > 0) == (i * j > 1), par  # a copy of one rank gathers nothing
        if service:
            assert st["service_write"] == st["memory_write"] > 0 and st["service_read"] == st["memory_read"]


def test_two_ranks_equal_the_emulation_of_each_parallelism():
    _check(2)


def test_three_ranks_minibatch_parallelism_equals_the_emulation():
    _check(3)
