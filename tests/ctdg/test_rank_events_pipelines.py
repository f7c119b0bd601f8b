"""Events per rank with the pipelines (MemoryTrainer(event_placement="per_rank") with prefetch=True, with
micro_batches > 1 and with overlap_aggregation=True), and event_placement="auto": on 2 and 3 gloo ranks,
per_rank equals the
whole-stream trainer with the same options bit for bit in float64 (losses, every step's loss, parameters,
the whole memory, evaluation scores and metrics) and each rank's bytes measured at the collectives equal
the predicted ones; "auto" picks per_rank under a process group for a partitioned memory and whole for
flexbicut, and the trainer and its traffic report say which. One spawned job per
world size.

Red if: OwnersLookahead looked up at dispatch instead of after the write-back for an empty local batch
(ranks' collectives cross: a hang, then the spawn's timeout), the micro-batch thread's lookup overwrote the
computing thread's edges/mailbox (EventExchange.adopt removed: other scores), or "auto" resolved to
"whole" (rank_events is None)."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.ctdg.options import check_event_placement
from pyg_dynscale.errors import UnsupportedOptionError
from pyg_dynscale.training.launch import spawn
from tests.helpers.event_streams import evaluation_scores

BATCH = 20


def _data():
    # 323 training events at batch 20: the last global batch leaves a rank's local batch empty
    d = synthetic_events(380, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    return d


def _run(data, world: int, events: str, **options) -> dict:
    torch.manual_seed(4)
    model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    tr = MemoryTrainer(model, data, batch_size=BATCH, lr=1e-2, parallelism=(world, 1, 1), seed=1, mrr_negatives=5,
                       num_neighbors=4, memory_placement="sven", event_placement=events, **options)
    losses = [tr.train_epoch() for _ in range(2)]
    out = {"losses": losses, "batch": tr.batch_losses.tolist(), "traffic": tr.traffic(),
           "params": torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params]), "memory": tr.memory_copy(),
           "placement": tr.event_placement, "held": None if tr.rank_events is None else tr.rank_events.held,
           "prefetched": dict(tr.prefetched)}
    out["metrics"], out["scores"] = evaluation_scores(tr)
    out["eval_memory"] = tr.memory_copy()
    tr.close()
    return out


CASES = {"prefetch": dict(prefetch=True, partition="interval"),
         "micro2": dict(micro_batches=2, partition="interval"),
         "micro4": dict(micro_batches=4, partition="range"),
         "overlap": dict(overlap_aggregation=True, partition="interval"),
         "micro2 overlap": dict(micro_batches=2, overlap_aggregation=True, partition="range")}


def _ranks(rank, world):
    torch.set_num_threads(1)
    data = _data()
    out = {}
    for name, options in CASES.items():
        out[(name, "whole")] = _run(data, world, "whole", **options)
        out[(name, "auto")] = _run(data, world, "auto", **options)  # per_rank: what auto picks here
    out["fallback"] = _run(data, world, "auto", partition="flexbicut")["placement"]
    return out


def _check(world):
    total = _data().num_events
    for r, runs in enumerate(spawn(_ranks, world, timeout=300)):
        assert runs["fallback"] == "whole"
        for name in CASES:
            run, ref = runs[(name, "auto")], runs[(name, "whole")]
            key = (name, r)
            assert run["placement"] == "per_rank" and ref["placement"] == "whole", key
            assert run["held"] < total / world + 2 * BATCH * 3, (key, run["held"])
            assert run["losses"] == ref["losses"] and run["batch"] == ref["batch"], key
            assert torch.equal(run["params"], ref["params"]), key
            for m in ("memory", "eval_memory"):
                assert torch.equal(run[m][0], ref[m][0]) and torch.equal(run[m][1], ref[m][1]), (key, m)
            assert torch.equal(run["scores"], ref["scores"]) and run["metrics"] == ref["metrics"], key
            t = run["traffic"]
            assert t["rank"]["measured"] == t["rank"]["predicted"], (key, t["rank"])
            assert t["event_placement"] == "per_rank" and ref["traffic"]["event_placement"] == "whole", key
            for kind in ("events", "neighbors", "mailbox"):
                assert t["rank"]["measured"][kind] > 0, (key, kind)
            if name == "prefetch":  # the id lists were organised ahead, as with the whole stream
                assert run["prefetched"] == ref["prefetched"] and run["prefetched"]["dispatch"] > 0, key


def test_two_ranks_pipelines_per_rank_equal_whole_stream():
    _check(2)


def test_three_ranks_pipelines_per_rank_equal_whole_stream():
    _check(3)


@pytest.mark.parametrize("memory_placement,options,world,expected", [
    ("sven", {}, 2, "per_rank"), ("partitioned", {"prefetch": True}, 4, "per_rank"),
    ("sven", {"micro_batches": 3}, 2, "per_rank"), ("sven", {}, 1, "whole"), ("replicated", {}, 2, "whole"),
    ("sven", {"overlap_aggregation": True}, 2, "per_rank"), ("sven", {"partition": "flexbicut"}, 2, "whole")])
def test_auto_resolution(memory_placement, options, world, expected):
    kw = {"partition": "interval", **options}
    assert check_event_placement("auto", memory_placement=memory_placement, world_size=world, **kw) == expected


@pytest.mark.parametrize("options,name", [({"memory_placement": "replicated"}, "event_placement"),
                                          ({"partition": "flexbicut"}, "partition")])
def test_explicit_per_rank_keeps_its_refusals(options, name):
    with pytest.raises(UnsupportedOptionError) as err:
        check_event_placement("per_rank", world_size=2, **{"memory_placement": "sven", "partition": "interval",
                                                           **options})
    assert err.value.option == name and "event_placement" in str(err.value)
