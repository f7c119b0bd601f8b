"""Events per rank (MemoryTrainer(event_placement="per_rank"), pyg_dynscale/ctdg/event_exchange.py):
on 2 and 3 gloo ranks, each rank holding only its trainer slices, its share of each evaluation batch and
its owned vertices' neighbour index and mailbox, training and evaluation equal the whole-stream trainer
of the same ranks bit for bit (losses, every step's loss, parameters, the whole memory, every score and
metric), for memory_placement="partitioned" and "sven", on a synthetic stream and a JODIE-format file;
per rank the bytes measured at the collectives equal the predicted ones for every kind, the new
neighbour, mailbox and event kinds included. One spawned job per world size."""
from __future__ import annotations

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, load_jodie_csv, synthetic_events
from pyg_dynscale.training.launch import spawn
from tests.helpers.collective_bytes import HandedBytes
from tests.helpers.event_csv import write_events_csv
from tests.helpers.event_streams import evaluation_scores

BATCH = 20
#: the module whose collectives are the exchanges of events per rank
EXCHANGE = "pyg_dynscale.ctdg.event_exchange"


def _synthetic():
    d = synthetic_events(380, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    return d


def _jodie(path):
    d = load_jodie_csv(path)
    d.msg = d.msg.double()
    return d


def _run(data, placement: str, world: int, events: str, partition, neighbors: int = 4) -> dict:
    # the exchanges' own collectives (the set-up's all_reduce of the negatives' bounds is no exchange)
    spy = HandedBytes([EXCHANGE], ("all_to_all_single", "all_gather")) if events == "per_rank" else None
    torch.manual_seed(4)
    model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    tr = MemoryTrainer(model, data, batch_size=BATCH, lr=1e-2, parallelism=(world, 1, 1), seed=1, mrr_negatives=5,
                       num_neighbors=neighbors, memory_placement=placement, partition=partition,
                       event_placement=events)
    losses = [tr.train_epoch() for _ in range(2)]
    out = {"losses": losses, "batch": tr.batch_losses.tolist(), "traffic": tr.traffic(),
           "params": torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params]), "memory": tr.memory_copy()}
    out["metrics"], out["scores"] = evaluation_scores(tr)
    out["eval_memory"] = tr.memory_copy()
    out["stats"] = tr.stats()
    if events == "per_rank":
        out["held"] = tr.rank_events.held
        spy.close()
        out["spied"] = spy.bytes(EXCHANGE)
    tr.close()
    return out


def _ranks(rank, world, csv):
    torch.set_num_threads(1)
    streams = {"synthetic": _synthetic()}
    if csv is not None:
        streams["jodie"] = _jodie(csv)
    parts = {2: "interval", 3: torch.randint(0, 3, (30,), generator=torch.Generator().manual_seed(7))}
    out = {}
    for name, data in streams.items():
        part = parts[world] if name == "synthetic" or world == 2 else "range"
        for placement in ("partitioned", "sven") if name == "synthetic" else ("sven",):
            for events in ("whole", "per_rank"):
                out[(name, placement, events)] = _run(data, placement, world, events, part)
    return out


def _check(world, csv):
    per_rank = spawn(_ranks, world, csv, timeout=240)
    for r, runs in enumerate(per_rank):
        for (name, placement, events), run in runs.items():
            if events == "whole":
                continue
            ref = runs[(name, placement, "whole")]
            key = (name, placement, r)
            assert run["losses"] == ref["losses"] and run["batch"] == ref["batch"], key
            assert torch.equal(run["params"], ref["params"]), key
            for m in ("memory", "eval_memory"):
                assert torch.equal(run[m][0], ref[m][0]) and torch.equal(run[m][1], ref[m][1]), (key, m)
            assert torch.equal(run["scores"], ref["scores"]), key
            assert run["metrics"] == ref["metrics"], key
            # the rank holds about its share of the stream, not the whole of it
            total = _synthetic().num_events if name == "synthetic" else None
            if total is not None:
                assert run["held"] < total / world + 2 * BATCH * 3, (key, run["held"])
            t, tw = run["traffic"], ref["traffic"]
            assert t["rank"]["measured"] == t["rank"]["predicted"], (key, t["rank"])
            for kind in ("events", "neighbors", "mailbox"):
                assert t["rank"]["measured"][kind] > 0, (key, kind)
                assert run["stats"][kind] > t["rank"]["measured"][kind]  # two epochs: more than the last one
            # evaluation reads no stored message of another owner (the memory is read as stored)
            assert run["stats"]["eval_events"] > 0 and run["stats"]["eval_neighbors"] > 0
            assert "eval_mailbox" not in run["stats"]
            # the ledger's bytes are the collectives' own (the report's measured is not the prediction)
            ours = sum(v for k, v in run["stats"].items() if k.split("_", 1)[-1] in ("events", "neighbors", "mailbox"))
            assert ours == run["spied"], (key, ours, run["spied"])
            for kind in ("dispatch", "requests", "aggregation", "counts", "gradients"):  # unchanged exchanges
                assert t["measured"][kind] == tw["measured"][kind], (key, kind)


def test_two_ranks_events_per_rank_equal_whole_stream(tmp_path):
    csv = write_events_csv(tmp_path / "events.csv", 300, 24, msg_dim=2, seed=9, burst_length=10)
    _check(2, csv)


def test_three_ranks_irregular_partition(tmp_path):
    _check(3, None)
