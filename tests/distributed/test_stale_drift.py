"""The stale cache's ``drift`` policy (an error budget measured per exchange)
and the cache in checkpoints: what ``drift`` sends follows how much the rows
change, ``drift:0`` is the exact path, and a run resumed from a checkpoint
continues with the same cache (float64, spawned gloo ranks)."""
from __future__ import annotations

import math
import os

import pytest
import torch

from pyg_dynscale.distributed import DistributedTrainer, spawn
from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint, saved_extra
from pyg_dynscale.distributed.stale import ADAPTIVE, DRIFT_EPS, DRIFT_KINDS, StaleCache, StaleConfig, drift_mask
from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import adapt
from tests.helpers import distributed_cases as cases


# ------------------------------------------------------------------ the rule
def test_drift_mask_caches_the_least_drifted_rows_within_the_budget() -> None:
    d = torch.tensor([0.3, 0.0, 0.1, 0.2, 5.0, 0.0], dtype=torch.float64)
    sq = torch.full((6,), 1.0, dtype=torch.float64)  # ||X||_F^2 = 3 per segment of 3 rows
    # segment 0 (rows 0-2): budget (0.2)^2 * 3 = 0.12; cached in drift order 0.0, 0.1 (0.01), 0.3 (0.10): all
    # segment 1 (rows 3-5): 0.0, 0.2 (0.04) fit, 5.0 does not
    got = drift_mask(d, sq, [3, 3], 0.2)
    assert got.tolist() == [False, False, False, False, True, False]
    # one segment of 6 rows (budget 0.24): 0.0, 0.0, 0.1, 0.2 (0.05), 0.3 (0.14) fit, 5.0 does not
    assert drift_mask(d, sq, [6], 0.2).tolist() == [False, False, False, False, True, False]
    assert drift_mask(d, sq, [6], 0.1).tolist() == [True, False, False, False, True, False]  # 0.06 allowed
    assert drift_mask(d, sq, [3, 3], 0.0).all()  # eps = 0: every row (the exact path)
    assert drift_mask(d[:0], sq[:0], [0, 0], 0.5).numel() == 0


def test_drift_config_and_the_deprecated_adaptive() -> None:
    cfg = StaleConfig.parse("drift")
    assert (cfg.policy, cfg.c, cfg.kinds) == ("drift", DRIFT_EPS, DRIFT_KINDS)
    assert StaleConfig.parse("drift:0.05").c == 0.05 and cfg.describe().startswith(f"drift:{DRIFT_EPS:g}")
    for bad in ("drift:x", "drift:-1", "drift:inf", "drift:nan"):
        with pytest.raises(ModelInputError, match="drift"):
            StaleConfig.parse(bad)
    with pytest.warns(FutureWarning, match="static:0.9"):
        old = StaleConfig.parse("adaptive")
    assert old.kinds == ADAPTIVE[2] and old.factor(0.3) == 0.9  # what the name ran before: a constant


# ------------------------------------------- it adapts: a scripted exchange
def _scripted(rank: int, world_size: int, spec: str) -> list:
    """Rank 0 sends 40 rows to rank 1 over 12 epochs: the rows change a lot
    (epochs 2-4), then almost not at all (5-8), then a lot again (9-12).
    Returns the rows sent per epoch (on rank 0) and what rank 1 received."""
    from pyg_dynscale.distributed.exchange import Communicator

    comm = Communicator(None, torch.device("cpu"), torch.float64)
    cache = StaleCache(StaleConfig.parse(spec, kinds=("spatial",)))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 3, generator=g, dtype=torch.float64) + 2.0
    n = 40 if rank == 0 else 0
    send_splits = [0, n] if rank == 0 else [0, 0]
    recv_splits = [0, 0] if rank == 0 else [40, 0]
    sent, errors = [], []
    for epoch in range(1, 13):
        step = 1e-4 if 5 <= epoch <= 8 else 0.5  # the embeddings all but stop changing, then move again
        if epoch > 1:
            x = x + step * torch.randn(40, 3, generator=g, dtype=torch.float64)
        cache.start_epoch()
        comm.start(requires_grad=False)
        out = cache.exchange(comm, "slot", (0, "spatial:1", "spatial"), x[:n], send_splits, recv_splits)
        rec = cache.history[-1]["exchanges"]["0:spatial:1"]
        sent.append(rec["fresh"])
        if rank == 1:
            errors.append(float((out - x).norm() / x.norm()))
        cache.end_epoch(1.0)
    return [sent, errors]


def test_drift_sends_fewer_rows_when_the_embeddings_stop_changing() -> None:
    (sent, _), (_, errors) = spawn(_scripted, 2, "drift:0.05")
    assert sent[0] == 40  # the first epoch: everything
    moving, still, again = sent[1:4], sent[4:8], sent[8:]
    assert min(moving) > 0 and min(again) > 0
    assert max(still) < min(moving) and max(still) < min(again), sent  # a static factor of D sends a share always
    assert sum(still) == 0, sent  # rows that barely move stay in the cache
    assert max(errors) <= 0.05 + 1e-12  # the receiver's copy is always within the budget


# -------------------------------------- drift:0 is exact; drift:eps moves less
def _train(rank: int, world_size: int, name: str, stale, epochs: int) -> dict:
    sig = cases.signal()
    m, head, loss = cases.model(name)
    part = cases.make_partition(sig, "random", world_size, adapt(m).dependency_pattern(8))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name), stale=stale)
    losses, moved, readout = [], 0, 0
    for _ in range(epochs):
        losses.append(tr.train_epoch())
        t = tr.traffic()["measured"]
        moved, readout = moved + t["total"], readout + t["readout"]
    return {"losses": losses, "params": [p.detach().clone() for p in tr.params], "bytes": moved, "readout": readout}


def _exactness(rank: int, world_size: int) -> list:
    return [_train(rank, world_size, name, stale, 4) for name in ("tgcn2", "mpnn_dgc", "dysat_link")
            for stale in (None, "drift:0", "drift:0.5")]


def test_drift_zero_is_the_exact_path_and_a_budget_moves_less() -> None:
    runs = spawn(_exactness, 3, timeout=300)[0]
    for i, name in enumerate(("tgcn2", "mpnn_dgc", "dysat_link")):
        exact, zero, half = runs[3 * i:3 * i + 3]
        assert zero["losses"] == exact["losses"], name  # every row sent: bit for bit
        for a, b in zip(exact["params"], zero["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-9)
        assert half["bytes"] < exact["bytes"], name
        if name == "dysat_link":  # the link readout (labelled pairs' far endpoints) is cached too
            assert 0 < half["readout"] < exact["readout"], (half["readout"], exact["readout"])
        assert half["losses"] != exact["losses"], name  # stale rows change the result


# ------------------------------------------------- resumed == uninterrupted
def _resume(rank: int, world_size: int, directory: str, name: str) -> dict:
    spec, epochs, cut = "drift:0.3", 6, 3

    def make():
        sig = cases.signal()
        m, head, loss = cases.model(name)
        part = cases.make_partition(sig, "random", world_size, adapt(m).dependency_pattern(8))
        tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name),
                                stale=spec)
        modules = torch.nn.ModuleDict({"model": m, **({"head": head} if head is not None else {})})
        return tr, modules

    whole, _ = make()
    straight = [whole.train_epoch() for _ in range(epochs)]
    fresh = [h["exchanges"] for h in whole.stale.history]
    first, modules = make()
    for _ in range(cut):
        first.train_epoch()
    prefix = f"rank{rank}/stale/"
    run = {"model": name}
    save_checkpoint(directory, cut, modules, first.optimizer, run, {},
                    extra={prefix + k: v for k, v in first.stale.state_dict().items()})
    out = {}
    for restore in (True, False):
        second, modules = make()
        path = os.path.join(directory, f"epoch-{cut:06d}")
        extra = saved_extra(path, prefix)
        load_checkpoint(path, modules, second.optimizer, run, extra=extra)
        if restore:
            second.stale.load_state_dict({k[len(prefix):]: v for k, v in extra.items()})
        out[restore] = {"losses": [second.train_epoch() for _ in range(epochs - cut)],
                        "params": [p.detach().clone() for p in second.params],
                        "fresh": [h["exchanges"] for h in second.stale.history], "epoch": second.stale.epoch}
    return {"straight": straight, "params": [p.detach().clone() for p in whole.params], "fresh": fresh,
            "resumed": out[True], "cold": out[False]}


@pytest.mark.parametrize("name", ["tgcn2", "mpnn_dgc"])
def test_a_resumed_run_continues_with_the_same_cache(tmp_path, name) -> None:
    runs = spawn(_resume, 2, str(tmp_path), name, timeout=300)
    for r in runs:
        resumed, cold = r["resumed"], r["cold"]
        torch.testing.assert_close(torch.tensor(resumed["losses"]), torch.tensor(r["straight"][3:]), rtol=0, atol=1e-9)
        for a, b in zip(r["params"], resumed["params"]):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-9)
        # the same rows were sent after the resume, and the epoch count went on
        assert [{k: v["fresh"] for k, v in e.items()} for e in resumed["fresh"]] == \
            [{k: v["fresh"] for k, v in e.items()} for e in r["fresh"][3:]]
        assert resumed["epoch"] == 6 and cold["epoch"] == 3  # the restored cache counts on
        # without the cache the first resumed epoch sends everything and the run differs
        assert any(not math.isclose(a, b, rel_tol=0, abs_tol=1e-9) for a, b in zip(cold["losses"], r["straight"][3:]))
