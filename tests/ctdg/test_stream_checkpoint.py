"""StreamCheckpoint with events per rank (MemoryTrainer(event_placement="per_rank"), 2 gloo ranks, float64,
dropout 0.1): each rank's state holds its own rows and its part of the owners' neighbour index and mailbox
(``copy0/owner<r>/index/...``, no other owner's); a trainer rebuilt with other parameters and another random
stream, loaded with it (in memory, and from a DCP checkpoint through train-events' template, whose index shapes
only the checkpoint knows), evaluates from the end of training (which reads the index as the epoch left it)
and trains its second epoch bit for bit as the uninterrupted trainer (every score and metric; epoch and step
losses, parameters, the whole memory, the scores after it); a state without a rank's index part is refused
with the key it lacks."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn
from tests.helpers.event_streams import evaluation_scores


def _trainer(init_seed, placement="sven"):
    d = synthetic_events(300, 30, msg_dim=3, seed=3, burst_length=20)
    d.msg = d.msg.double()
    torch.manual_seed(init_seed)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    return MemoryTrainer(model, d, batch_size=20, lr=1e-2, parallelism=(2, 1, 1), seed=1, mrr_negatives=5,
                         num_neighbors=4, memory_placement=placement, partition="interval",
                         event_placement="per_rank")


def _second_epoch(tr):
    loss = tr.train_epoch()
    out = {"loss": loss, "batch": tr.batch_losses.tolist(),
           "params": torch.cat([p.detach().reshape(-1) for p in tr.optimizer_params]), "memory": tr.memory_copy()}
    out["metrics"], out["scores"] = evaluation_scores(tr)
    return out


def _ranks(rank, world, directory):
    from pyg_dynscale.commands.events_checkpoint import stream_template
    from pyg_dynscale.errors import ModelInputError
    from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint

    torch.set_num_threads(1)
    run = {"parallelism": [2, 1, 1], "world_size": world}
    tr = _trainer(4)
    tr.train_epoch()
    # evaluation walks on from the end of training: the owners' index as the epoch left it (the next
    # epoch's walk wraps to zero, so evaluation is what reads the checkpointed index); it also re-seeds
    # the generator, as train-events' validation before its checkpoint
    want = {"eval": evaluation_scores(tr)}
    state = copy.deepcopy(tr.state_dict())  # the modules' and optimizer's parts are the live tensors
    path = save_checkpoint(directory, 1, tr.modules, tr.optimizer, run, {}, extra=state["stream"])
    index = {k: tuple(v.shape) for k, v in state["stream"].items() if "/index/" in k}
    want["next"] = _second_epoch(tr)
    tr.close()

    got = {}
    fresh = _trainer(5)  # other parameters, other random stream
    fresh.load_state_dict(state)
    got["memory"] = {"eval": evaluation_scores(fresh), "next": _second_epoch(fresh)}
    fresh.close()

    fresh = _trainer(6)
    stream = stream_template(fresh, path)
    load_checkpoint(path, fresh.modules, fresh.optimizer, run, extra=stream)
    fresh.load_state_dict({"modules": fresh.modules.state_dict(), "optimizer": fresh.optimizer.state_dict(),
                           "stream": stream})
    got["dcp"] = {"eval": evaluation_scores(fresh), "next": _second_epoch(fresh)}

    broken = {**state, "stream": {k: v for k, v in state["stream"].items() if not k.endswith("/index/nbr")}}
    with pytest.raises(ModelInputError, match=f"copy0/owner{rank}/index/nbr"):
        fresh.load_state_dict(broken)
    fresh.close()
    return want, got, index


def _same(a, b, key):
    assert a["loss"] == b["loss"] and a["batch"] == b["batch"], key
    assert torch.equal(a["params"], b["params"]), key
    assert torch.equal(a["memory"][0], b["memory"][0]) and torch.equal(a["memory"][1], b["memory"][1]), key
    assert torch.equal(a["scores"], b["scores"]) and a["metrics"] == b["metrics"], key


def test_two_ranks_per_rank_events_resume_bit_for_bit(tmp_path):
    for r, (want, got, index) in enumerate(spawn(_ranks, 2, str(tmp_path), timeout=240)):
        # this rank's part of the index only, and a part that is not empty after an epoch
        assert index and all(k.startswith(f"copy0/owner{r}/index/") for k in index), index
        assert index[f"copy0/owner{r}/index/pool_id"][0] > 0
        for how in ("memory", "dcp"):
            (metrics, scores), (ref_metrics, ref_scores) = got[how]["eval"], want["eval"]
            assert torch.equal(scores, ref_scores) and metrics == ref_metrics, (r, how)
            _same(want["next"], got[how]["next"], (r, how))
