"""Partitioned node memory (DepComm: memory_placement="partitioned") and Sven's redundancy-free
exchange (memory_placement="sven") on 2 and 3 gloo ranks == the replicated memory (DistTGL / DepCache)
of the same ranks, float64: epoch losses, parameters, the whole memory after 2 epochs, evaluation; TGN's
GRU updater and a JODIE-style RNNCell. Per rank the bytes handed to all_to_all_single equal the bytes the
id lists predict; Sven's dispatch and aggregation bytes are strictly below DepComm's; the redundancy rates
equal a brute-force count over the lists. One spawned job per world size."""
from __future__ import annotations

import math

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn
from tests.helpers.event_streams import evaluation_scores

BATCH = 20


def _data():
    d = synthetic_events(360, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    return d


def _partition(world: int, num_nodes: int):
    if world == 2:
        return "interval"
    return torch.randint(0, world, (num_nodes,), generator=torch.Generator().manual_seed(7))  # irregular parts


def _trainer(placement: str, world: int, updater: str = "gru", partition=None, events: str = "auto"):
    d = _data()
    torch.manual_seed(4)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    if updater == "rnn":  # JODIE's memory updater: an RNNCell with GRUCell's call signature
        model.memory.gru = torch.nn.RNNCell(model.memory.gru.input_size, 6).double()
    extra = {} if placement == "replicated" else {"partition": partition or _partition(world, d.num_nodes)}
    return MemoryTrainer(model, d, batch_size=BATCH, lr=1e-2, parallelism=(world, 1, 1), seed=1, mrr_negatives=5,
                         memory_placement=placement, event_placement=events, **extra)


def _run(placement: str, world: int, updater: str = "gru", partition=None) -> dict:
    tr = _trainer(placement, world, updater, partition)
    lists = []  # the dispatch lists of the training epochs, as fetch() receives them
    if tr.placement is not None:
        fetch = tr.placement.fetch

        def spy(occ):
            if tr.placement.phase == "train":
                lists.append(occ.tolist())
            return fetch(occ)

        tr.placement.fetch = spy
    losses = []
    for _ in range(2):
        lists.clear()
        losses.append(tr.train_epoch())
    traffic = tr.traffic()
    memory = tr.memory_copy()
    params = torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params])
    metrics, scores = evaluation_scores(tr)
    out = {"losses": losses, "batch": tr.batch_losses.tolist(), "params": params, "memory": memory,
           "val": metrics["val"], "test": metrics["test"], "traffic": traffic, "lists": lists,
           "val_start": tr.val_start, "scores": scores}
    out["eval_memory"] = tr.memory_copy()  # after the flush and the validation and test events
    tr.close()
    return out


def _resume(world, directory):
    """A checkpoint of Sven's placement (every owner writes its rows), loaded by a fresh trainer: the next
    epoch, the test metrics and the whole memory as the uninterrupted trainer's."""
    from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint

    run = {"parallelism": [world, 1, 1], "world_size": world}
    # the whole stream: this state_dict template has every shape (events per rank's resume: test_stream_checkpoint)
    tr = _trainer("sven", world, events="whole")
    tr.train_epoch()
    tr.evaluate("val")
    path = save_checkpoint(directory, 1, tr.modules, tr.optimizer, run, {}, extra=tr.state_dict()["stream"])
    # the evaluation first: it starts from the restored end-of-training memory (an epoch resets it)
    want = [tr.evaluate("test"), tr.train_epoch(), tr.memory_copy()]
    tr.close()
    fresh = _trainer("sven", world, events="whole")
    torch.manual_seed(11)  # another random stream: the checkpoint's must come back
    stream = fresh.state_dict()["stream"]
    load_checkpoint(path, fresh.modules, fresh.optimizer, run, extra=stream)
    fresh.load_state_dict({"modules": fresh.modules.state_dict(), "optimizer": fresh.optimizer.state_dict(),
                           "stream": stream})
    got = [fresh.evaluate("test"), fresh.train_epoch(), fresh.memory_copy()]
    fresh.close()
    return want, got


def _ranks(rank, world, directory):
    torch.set_num_threads(1)
    runs = {(p, "gru"): _run(p, world) for p in ("replicated", "partitioned", "sven")}
    if world == 2:
        runs.update({(p, "rnn"): _run(p, world, "rnn") for p in ("replicated", "sven")})
        runs[("sven-flexbicut", "gru")] = _run("sven", world, partition="flexbicut")
        runs["resume"] = _resume(world, directory)
    return runs


def _brute_eta(lists) -> tuple[int, int]:
    """(occurrences, duplicated occurrences) of a set of id lists, one Python set per list."""
    n = sum(len(x) for x in lists)
    return n, sum(len(x) - len(set(x)) for x in lists)


def _check(world, directory):
    per_rank = spawn(_ranks, world, str(directory), timeout=180)
    d = _data()
    for r, runs in enumerate(per_rank):
        if "resume" in runs:
            want, got = runs.pop("resume")
            assert got[:2] == want[:2], r
            assert torch.equal(got[2][0], want[2][0]) and torch.equal(got[2][1], want[2][1]), r
        for (placement, updater), run in runs.items():
            ref = runs[("replicated", updater)]
            # training computes every row from the same rows in the same batches: bit for bit (a vertex two
            # trainers write gets two rows that differ in the last bits: the later trainer's must win)
            assert run["losses"] == ref["losses"] and run["batch"] == ref["batch"], (placement, updater, r)
            assert torch.equal(run["params"], ref["params"]), (placement, updater, r)
            assert torch.equal(run["memory"][0], ref["memory"][0]), (placement, updater, r)
            for key in ("memory", "eval_memory"):
                torch.testing.assert_close(run[key][0], ref[key][0], atol=1e-9, rtol=0)
                assert torch.equal(run[key][1], ref[key][1]), (placement, updater, r, key)
            torch.testing.assert_close(run["scores"], ref["scores"], atol=1e-9, rtol=0)
            # the owners' flush batches the GRU over their own rows: scores equal to rounding, so a rank
            # statistic may flip where the replicated scores tie exactly (nodes no event touched)
            for split in ("val", "test"):
                for key in ("ap", "auc", "mrr"):
                    assert math.isclose(run[split][key], ref[split][key], abs_tol=2e-2), (placement, split, key)
                    if placement == "sven" and updater == "gru":  # the same owners and batches of rows: same floats
                        assert run[split][key] == runs[("partitioned", "gru")][split][key]
            t = run["traffic"]
            assert t["measured"] == t["predicted"], (placement, updater, r, t)  # every kind, this rank
            assert t["measured"]["gradients"] > 0
            if placement == "replicated":
                assert t["measured"]["gather"] > 0 and t["measured"]["dispatch"] == 0
            else:
                assert t["measured"]["dispatch"] > 0 and t["measured"]["aggregation"] > 0
                assert t["measured"]["gather"] == 0
        sven, comm = runs[("sven", "gru")]["traffic"], runs[("partitioned", "gru")]["traffic"]
        for kind in ("dispatch", "requests", "aggregation"):  # the deduplication's saving, on every rank
            assert sven["measured"][kind] < comm["measured"][kind], (kind, r)
    # redundancy rates (summed over ranks) == a brute-force count over the lists of the last epoch
    for placement in ("sven", "partitioned"):
        red = per_rank[0][(placement, "gru")]["traffic"]["redundancy"]
        n1, dup1 = _brute_eta([x for runs in per_rank for x in runs[(placement, "gru")]["lists"]])
        assert (red["dispatch_occurrences"], red["dispatch_occurrences"] - red["dispatch_distinct"]) == (n1, dup1)
        assert math.isclose(red["eta1"], dup1 / n1, abs_tol=1e-12) and 0.5 < red["eta1"] < 1
        agg = []  # the aggregation lists: every local batch's event endpoints
        val_start, gb = per_rank[0][(placement, "gru")]["val_start"], world * BATCH
        for a in range(0, val_start, gb):
            for q in range(world):
                x, y = min(a + q * BATCH, val_start), min(a + (q + 1) * BATCH, a + gb, val_start)
                if y > x:
                    agg.append(d.src[x:y].tolist() + d.dst[x:y].tolist())
        n2, dup2 = _brute_eta(agg)
        n, u = red["aggregation_occurrences"], red["aggregation_distinct"]
        assert (n, n - u) == (n2, dup2)
        assert math.isclose(red["eta2"], dup2 / n2, abs_tol=1e-12) and red["eta2"] > 0


def test_two_ranks_partitioned_and_sven_equal_replicated_and_resume(tmp_path):
    _check(2, tmp_path)


def test_three_ranks_irregular_partition_equals_replicated(tmp_path):
    _check(3, tmp_path)

