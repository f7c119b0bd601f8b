"""The stale embedding cache on the black-box path (the user's PyGT cell once per snapshot): the state rows
of each snapshot's ``temporal`` / ``spatial`` exchanges and the link ``readout`` go through the decomposed
path's cache (:mod:`pyg_dynscale.distributed.stale`). ``off`` and ``drift:0`` are the exact black-box path
(== one process, float64); a budget or a static factor moves fewer bytes, exactly what the masks say, the
same in every run; ``backward="send"`` sends a gradient row for every planned row; a run resumed from a
checkpoint continues with the same cache. Two spawned 2-rank jobs."""
from __future__ import annotations

import math
import os

import pytest
import torch

from pyg_dynscale.distributed.stale import StaleConfig
from tests.helpers import blackbox_cases as cases

pytestmark = pytest.mark.skipif(not cases.HAVE_PYGT, reason="needs torch-geometric-temporal")

EPOCHS = 4
BPE = 8  # float64
#: (name, cell, K, stale, checkpoint_every); "link": GConvGRU with loss="bce_link" (the readout is cached too)
CONFIGS = [
    ("gru", "GConvGRU", 2, None, None),
    ("gru off", "GConvGRU", 2, "off", None),
    ("gru drift:0", "GConvGRU", 2, "drift:0", None),
    ("gru drift", "GConvGRU", 2, "drift:0.05", None),
    ("gru drift again", "GConvGRU", 2, "drift:0.05", None),
    ("gru static", "GConvGRU", 2, "static:0.5", None),
    ("gru send", "GConvGRU", 2, StaleConfig("static", 0.5, backward="send", scope="global"), None),
    ("gru frozen temporal", "GConvGRU", 2, StaleConfig("static", math.inf, kinds=("temporal",)), None),
    ("lstm", "GConvLSTM", 2, None, 2),
    ("lstm drift:0", "GConvLSTM", 2, "drift:0", 2),
    ("lstm drift", "GConvLSTM", 2, "drift:0.01", 2),
    ("link", "link", 2, None, None),
    ("link drift:0", "link", 2, "drift:0", None),
    ("link drift", "link", 2, "drift:0.01", None),
]


def _model(cell: str, K: int) -> tuple:
    """``(module, head, signal, loss)``, float64, fixed initial parameters."""
    from tests.helpers import distributed_cases as dcases
    from tests.helpers.step_reuse import make_cell

    if cell == "link":
        torch.manual_seed(5)
        from torch_geometric_temporal.nn.recurrent import GConvGRU

        return GConvGRU(dcases.F, cases.H, K).double(), None, dcases.signal(), "bce_link"
    m, head = make_cell(cell, K)
    return m, head, cases.signal("plain"), "mse"


def _trainer(world_size: int, cell: str, K: int, stale, every, seed: int = 0):
    from pyg_dynscale.distributed import DistributedTrainer

    m, head, sig, loss = _model(cell, K)
    part = cases.Partition("random", world_size, torch.randint(
        0, world_size, (sig.num_vertex_time_nodes,), generator=torch.Generator().manual_seed(9 + seed)))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, path="blackbox", checkpoint_every=every,
                            stale=stale, optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    modules = torch.nn.ModuleDict({"model": m, **({"head": head} if head is not None else {})})
    return tr, modules


def _epoch_bytes(tr) -> dict:
    """This rank's bytes of the last epoch per ``(phase, kind, direction)`` (kinds of the plan and the masks)."""
    return {k[1:]: v for k, v in tr.comm.bytes.items() if k[2] != "grad_sync"}


def _expected_bytes(tr, history: dict, backward: str, first: bool) -> dict:
    """What the masks recorded in ``history`` (one epoch's exchanges) say this rank sent forward: its fresh
    rows, one mask bit per planned row (bytes per destination), an 8-byte all-reduce of D per exchange for the
    global scope, no masks in the ``first`` epoch; and, under ``"bwd"``, this rank's share of the backward
    bytes summed over ranks (a receiver sends the gradients of what it received): the gradients of its fresh
    rows (``skip``) or of every planned row (``send``)."""
    out = {}
    for e in tr.plan.exchanges:
        splits = e.send_list(tr.rank)[1]
        planned = sum(n for r, n in enumerate(splits) if r != tr.rank)
        rec = history.get(f"{e.block}:{e.phase}")
        row = e.width * BPE
        if rec is None:  # not covered by the cache: exact
            out[(e.phase, e.kind, "fwd")] = out[(e.phase, e.kind, "bwd")] = planned * row
            continue
        assert rec["planned"] == sum(splits)  # (no rows to the rank itself on these exchanges)
        out[(e.phase, e.kind, "fwd")] = rec["fresh"] * row
        out[(e.phase, e.kind, "bwd")] = (planned if backward == "send" else rec["fresh"]) * row
        meta = sum((n + 7) // 8 for r, n in enumerate(splits) if r != tr.rank)
        if tr.stale.config.scope == "global":
            meta += 8
        out[(e.phase, "stale_meta", "fwd")] = 0 if first else meta
    return {k: v for k, v in out.items() if v}


def _job(rank: int, world_size: int) -> list:
    from pyg_dynscale.nn.snapshot_model import default_dtype

    out = []
    with default_dtype(torch.float64):  # PyGT's DCRNN / GConv build their buffers with the default dtype
        for label, cell, K, stale, every in CONFIGS:
            tr, _ = _trainer(world_size, cell, K, stale, every)
            losses, bytes_ok, backward, moved, readout = [], [], [], [], []
            for epoch in range(EPOCHS):
                losses.append(tr.train_epoch())
                got = {k: v for k, v in _epoch_bytes(tr).items() if v}
                if tr.stale is not None:
                    want = _expected_bytes(tr, tr.stale.history[-1]["exchanges"], tr.stale.config.backward,
                                           epoch == 0)
                    fwd = {k for k in set(got) | set(want) if k[2] == "fwd"}
                    bytes_ok.append(all(got.get(k) == want.get(k) for k in fwd)
                                    or {k: (got.get(k), want.get(k)) for k in fwd if got.get(k) != want.get(k)})
                    backward.append(({k: v for k, v in got.items() if k[2] == "bwd"},
                                     {k: v for k, v in want.items() if k[2] == "bwd"}))
                t = tr.traffic()["measured"]
                moved.append(t["total"])
                readout.append(t["readout"])
            hist = None if tr.stale is None else [{k: (v["fresh"], v["planned"], v["theta"])
                                                   for k, v in h["exchanges"].items()} for h in tr.stale.history]
            out.append({"losses": losses, "params": [p.detach().clone() for p in tr.params], "bytes_ok": bytes_ok,
                        "backward": backward, "moved": moved, "readout": readout, "history": hist,
                        "engine_has_cache": tr.engine.stale is tr.stale})
    return out


def _one_process(cell: str, K: int) -> dict:
    from pyg_dynscale.nn.snapshot_model import default_dtype
    from pyg_dynscale.runtime import FusedTrainer

    with default_dtype(torch.float64):
        m, head, sig, loss = _model(cell, K)
        params = list(m.parameters()) + (list(head.parameters()) if head is not None else [])
        tr = FusedTrainer(m, sig, head=head, loss=loss, path="blackbox", optimizer=torch.optim.SGD, lr=0.1)
        losses = [tr.train_epoch() for _ in range(EPOCHS)]
    return {"losses": losses, "params": [p.detach().clone() for p in params]}


@pytest.fixture(scope="module")
def runs() -> dict:
    from pyg_dynscale.distributed import spawn

    results = spawn(_job, 2, timeout=600)
    return {label: [r[i] for r in results] for i, (label, *_) in enumerate(CONFIGS)}


def _backward_ok(per_rank: list) -> None:
    """Backward bytes per exchange and epoch, summed over ranks, are what the senders' masks say."""
    for e in range(EPOCHS):
        got, want = {}, {}
        for r in per_rank:
            for total, part in zip((got, want), r["backward"][e]):
                for k, v in part.items():
                    total[k] = total.get(k, 0) + v
        assert got == want, (e, {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)})


def _close(a: list, b: list, where: str) -> None:
    for x, y in zip(a, b):
        assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {a} vs {b}"


def test_off_and_drift_zero_are_the_exact_black_box_path(runs) -> None:
    for exact, cell, K in (("gru", "GConvGRU", 2), ("lstm", "GConvLSTM", 2), ("link", "link", 2)):
        ref = _one_process(cell, K)
        for label in (exact, exact + " drift:0") + (("gru off",) if exact == "gru" else ()):
            for r, got in enumerate(runs[label]):
                _close(got["losses"], ref["losses"], f"{label} rank {r} vs one process")
                for i, (a, b) in enumerate(zip(got["params"], ref["params"])):
                    torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=f"{label} rank {r}: parameter {i}")
            # every row is sent: bit for bit the exact distributed run
            assert runs[label][0]["losses"] == runs[exact][0]["losses"], label
        zero = runs[exact + " drift:0"][0]
        assert zero["engine_has_cache"] and all(ok is True for ok in zero["bytes_ok"]), zero["bytes_ok"]
        _backward_ok(runs[exact + " drift:0"])
        assert all(f == p for h in zero["history"] for f, p, _ in h.values())  # nothing was cached
        assert zero["moved"][0] == runs[exact][0]["moved"][0] < zero["moved"][1]  # + the masks after epoch 1


def test_a_budget_moves_fewer_bytes_exactly_what_the_masks_say(runs) -> None:
    for label in ("gru drift", "gru static", "gru send", "gru frozen temporal", "lstm drift", "link drift"):
        exact = runs[label.split()[0]][0]
        for r, got in enumerate(runs[label]):
            assert all(ok is True for ok in got["bytes_ok"]), (label, r, got["bytes_ok"])
        _backward_ok(runs[label])
        got = runs[label][0]
        assert got["moved"][0] == exact["moved"][0], label  # the first epoch sends everything, no masks
        assert all(a < b for a, b in zip(got["moved"][1:], exact["moved"][1:])), (label, got["moved"], exact["moved"])
        assert got["losses"] != exact["losses"], label  # stale rows change the result
        fresh = sum(f for r in runs[label] for h in r["history"][1:] for f, _, _ in h.values())
        planned = sum(p for r in runs[label] for h in r["history"][1:] for _, p, _ in h.values())
        assert fresh < planned, label
        if label != "gru frozen temporal":
            assert fresh > 0, label  # the policy sends some rows: it is not a frozen cache
    link, link_exact = runs["link drift"][0], runs["link"][0]
    assert all(0 < a < b for a, b in zip(link["readout"][1:], link_exact["readout"][1:])), \
        (link["readout"], link_exact["readout"])  # the readout is cached
    frozen = runs["gru frozen temporal"][0]["history"]
    assert all(f == 0 for h in frozen[1:] for k, (f, _, _) in h.items() if k.endswith("temporal"))
    assert not any(k.endswith("spatial") for h in frozen for k in h)  # spatial is not covered: exact


def test_the_cache_is_deterministic_and_the_ranks_agree(runs) -> None:
    a, b = runs["gru drift"], runs["gru drift again"]
    for r in range(2):
        assert a[r]["losses"] == b[r]["losses"] and a[r]["history"] == b[r]["history"]
        for x, y in zip(a[r]["params"], b[r]["params"]):
            assert torch.equal(x, y)
    for label in CONFIGS:
        p0, p1 = (runs[label[0]][r]["params"] for r in range(2))
        assert all(torch.equal(x, y) for x, y in zip(p0, p1)), label[0]  # replicated parameters stay equal
    # global scope: every rank uses the same theta for each exchange
    send = runs["gru send"]
    for e in range(1, EPOCHS):
        thetas = [{k: t for k, (_, _, t) in r["history"][e].items()} for r in send]
        assert thetas[0] == thetas[1] and any(t for t in thetas[0].values())


# ------------------------------------------------- resumed == uninterrupted
def _resume(rank: int, world_size: int, directory: str) -> dict:
    from pyg_dynscale.training.checkpoint import load_checkpoint, save_checkpoint, saved_extra
    from pyg_dynscale.nn.snapshot_model import default_dtype

    spec, epochs, cut, out = "drift:0.05", 5, 2, {}
    with default_dtype(torch.float64):
        for cell, every in (("GConvGRU", None), ("GConvLSTM", 2)):
            whole, _ = _trainer(world_size, cell, 2, spec, every)
            straight = [whole.train_epoch() for _ in range(epochs)]
            first, modules = _trainer(world_size, cell, 2, spec, every)
            for _ in range(cut):
                first.train_epoch()
            prefix, run, where = f"rank{rank}/stale/", {"model": cell}, os.path.join(directory, cell)
            save_checkpoint(where, cut, modules, first.optimizer, run, {},
                            extra={prefix + k: v for k, v in first.stale.state_dict().items()})
            res = {}
            for restore in (True, False):
                second, modules = _trainer(world_size, cell, 2, spec, every)
                path = os.path.join(where, f"epoch-{cut:06d}")
                extra = saved_extra(path, prefix)
                load_checkpoint(path, modules, second.optimizer, run, extra=extra)
                if restore:
                    second.stale.load_state_dict({k[len(prefix):]: v for k, v in extra.items()})
                res[restore] = {"losses": [second.train_epoch() for _ in range(epochs - cut)],
                                "params": [p.detach().clone() for p in second.params],
                                "fresh": [{k: v["fresh"] for k, v in h["exchanges"].items()}
                                          for h in second.stale.history]}
            out[cell] = {"straight": straight, "params": [p.detach().clone() for p in whole.params], "cut": cut,
                         "fresh": [{k: v["fresh"] for k, v in h["exchanges"].items()} for h in whole.stale.history],
                         "resumed": res[True], "cold": res[False]}
    return out


def test_a_resumed_black_box_run_continues_with_the_same_cache(tmp_path) -> None:
    from pyg_dynscale.distributed import spawn

    for r, per_cell in enumerate(spawn(_resume, 2, str(tmp_path), timeout=300)):
        for cell, got in per_cell.items():
            cut, resumed, cold = got["cut"], got["resumed"], got["cold"]
            where = f"{cell} rank {r}"
            torch.testing.assert_close(torch.tensor(resumed["losses"]), torch.tensor(got["straight"][cut:]),
                                       rtol=0, atol=1e-9, msg=where)
            for a, b in zip(got["params"], resumed["params"]):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=where)
            assert resumed["fresh"] == got["fresh"][cut:], where  # the same rows were sent after the resume
            # without the cache the first resumed epoch sends everything and the run differs
            assert cold["fresh"][0] != got["fresh"][cut], where
            assert any(not math.isclose(a, b, rel_tol=0, abs_tol=1e-9)
                       for a, b in zip(cold["losses"], got["straight"][cut:])), where
