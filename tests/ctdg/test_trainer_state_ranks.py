"""``MemoryTrainer`` checkpoints under a gloo process group (2 ranks, memory parallelism (1, 1, 2): each rank holds
its own memory copy, which persists across epochs): written with ``save_checkpoint(extra=state_dict()["stream"])``,
loaded by a fresh trainer on every rank, training goes on bit for bit (float64; losses, batch losses, val / test
metrics, parameters, the held copy); the checkpoint holds both copies, each rank reads back its own."""
from __future__ import annotations

import torch

from pyg_dynscale.ctdg import TGN, MemoryTrainer, synthetic_events
from pyg_dynscale.training.launch import spawn


def _trainer(init_seed):
    d = synthetic_events(300, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    torch.manual_seed(init_seed)
    model = TGN(d.num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6, dropout=0.1).double()
    return MemoryTrainer(model, d, batch_size=20, lr=0.01, parallelism=(1, 1, 2), seed=1, mrr_negatives=5)


def _go_on(tr):
    out = []
    for _ in range(2):
        out.append((tr.train_epoch(), tr.batch_losses.tolist(), tr.evaluate("val")))
    params = [p.detach().clone() for p in tr.optimizer_params]
    return out, tr.evaluate("test"), params, tr.memory_copy(tr.copies.live)


def _ranks(rank, world, directory):
    import torch.distributed.checkpoint as dcp

    from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint

    torch.set_num_threads(1)
    run = {"parallelism": [1, 1, 2], "world_size": world}
    tr = _trainer(4)
    tr.train_epoch()
    tr.evaluate("val")
    path = save_checkpoint(directory, 1, tr.modules, tr.optimizer, run, {}, extra=tr.state_dict()["stream"])
    want = _go_on(tr)
    tr.close()
    fresh = _trainer(5)  # other parameters, other random stream
    stream = fresh.state_dict()["stream"]
    assert sorted(k for k in stream if k.startswith("copy"))[0].startswith(f"copy{rank}/")
    load_checkpoint(path, fresh.modules, fresh.optimizer, run, extra=stream)
    fresh.load_state_dict({"modules": fresh.modules.state_dict(), "optimizer": fresh.optimizer.state_dict(),
                           "stream": stream})
    got = _go_on(fresh)
    keys = set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
    return want, got, sorted({k.split("/")[0] for k in keys if k.startswith("extra.copy")})


def _same(a, b):
    (ea, ta, pa, ma), (eb, tb, pb, mb) = a, b
    assert ea == eb and ta == tb
    assert all(torch.equal(x, y) for x, y in zip(pa, pb))
    assert torch.equal(ma[0], mb[0]) and torch.equal(ma[1], mb[1])


def test_two_ranks_resume_their_memory_copies_bit_for_bit(tmp_path):
    results = spawn(_ranks, 2, str(tmp_path), timeout=120)
    for want, got, copies in results:
        _same(want, got)
        assert copies == ["extra.copy0", "extra.copy1"], copies
    assert results[0][0][0] == results[1][0][0]  # the same losses and metrics on both ranks
    assert not torch.equal(results[0][0][3][0], results[1][0][3][0])  # two different copies
