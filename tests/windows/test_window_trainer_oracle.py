"""WindowTrainer (blocks=1, shuffle=False, SGD) equals the plain PyGT-style window loop
(tests/windows/helpers.pygt_loop) in every batch loss and in the parameters after the
epoch's batches, float64, on a static graph (Chickenpox stand-in) and a changing one
(England COVID, embedded); block order and changing vertex sets against their own loops."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from pyg_dynscale.windows import WindowTrainer
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import RecurrentGCN, StatelessGCN, as64, chickenpox, covid, pygt_loop, window_starts

LAGS, BATCH, LR = 3, 3, 0.05


def _models():
    from torch_geometric_temporal.nn.recurrent import A3TGCN, DCRNN, TGCN, GConvGRU

    return {
        "GConvGRU": (lambda f: GConvGRU(f, 6, 2), True, True),
        "DCRNN": (lambda f: DCRNN(f, 6, 2), True, True),
        "TGCN": (lambda f: TGCN(f, 6), True, True),
        "A3TGCN": (lambda f: A3TGCN(1, 6, f), True, True),
        "RecurrentGCN": (lambda f: RecurrentGCN(f, 6), False, True),
        "StatelessGCN": (lambda f: StatelessGCN(f, 6), False, False),
    }


def _check(name, sig, blocks=1, batches=None, horizon=1):
    make, head, stateful = _models()[name]
    f = 4
    torch.manual_seed(0)
    model = make(f).double()
    hd = torch.nn.Linear(6, 1).double() if head else None
    ref_model, ref_head = copy.deepcopy(model), copy.deepcopy(hd)
    trainer = WindowTrainer(model, sig, lags=LAGS, horizon=horizon, batch_size=BATCH * blocks, stride=1, loss="mse", lr=LR,
                            optimizer="sgd", head=hd, shuffle=False, reuse=True, blocks=blocks)
    mean = trainer.train_epoch()
    ref = pygt_loop(ref_model, ref_head, sig, LAGS, BATCH, LR, stateful=stateful, batches=batches, horizon=horizon)
    assert len(ref) >= 2 and len(trainer.batch_losses) == len(ref)
    for a, b in zip(trainer.batch_losses, ref):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(mean, sum(ref) / len(ref), rel_tol=1e-9)
    for (n, p), q in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12, msg=n)
    if hd is not None:
        for p, q in zip(hd.parameters(), ref_head.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)
    return trainer


@pytest.mark.parametrize("name", ["GConvGRU", "DCRNN", "TGCN", "A3TGCN", "RecurrentGCN", "StatelessGCN"])
def test_static_graph_equals_pygt_loop(name):
    sig = chickenpox(T=13, x_shape=(1, 4) if name == "A3TGCN" else None)
    _check(name, sig)


@pytest.mark.parametrize("name", ["GConvGRU", "DCRNN", "TGCN", "RecurrentGCN"])
def test_changing_graph_equals_pygt_loop(name):
    sig = covid(T=10)
    assert not torch.equal(sig[0].edge_index, sig[1].edge_index)  # the graph changes
    _check(name, sig)


@pytest.mark.parametrize("name,horizon", [("GConvGRU", 2), ("DCRNN", 3), ("RecurrentGCN", 3)])
def test_horizon_uses_batched_dcrnn_alignment(name, horizon):
    """H > 1: the output at window step L-H+k predicts y at snapshot e+k (PyGT's BatchedDCRNN
    examples compare its all-steps output [B, L, N, F] with the next L values)."""
    _check(name, chickenpox(T=15), horizon=horizon)
    _check(name, covid(T=11), horizon=horizon)


def test_blocks_two_follow_the_block_order():
    """blocks=2, batch_size=6: global batch k takes the k-th 3 windows of each block of 4."""
    sig = chickenpox(T=13)
    starts = window_starts(13, LAGS)           # 8 training windows: blocks [0..3], [4..7]
    assert starts == list(range(8))
    expected = [[0, 1, 2, 4, 5, 6], [3, 7]]
    plain = [starts[a:a + 6] for a in range(0, 8, 6)]
    assert expected != plain                   # a trainer walking the windows in order fails below
    trainer = _check("GConvGRU", sig, blocks=2, batches=expected)
    assert [b.tolist() for b in trainer.batches()] == expected


def test_block_batches_order():
    from pyg_dynscale.windows import block_batches

    w = torch.arange(10)
    got = [b.tolist() for b in block_batches(w, 4, 2)]
    # blocks [0..4], [5..9]; 2 windows of each block per batch
    assert got == [[0, 1, 5, 6], [2, 3, 7, 8], [4, 9]]
    assert [b.tolist() for b in block_batches(w, 4, 1)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    got3 = [b.tolist() for b in block_batches(torch.arange(7), 3, 3)]   # array_split sizes 3, 2, 2
    assert got3 == [[0, 3, 5], [1, 4, 6], [2]]


def test_changing_vertex_sets_carry_state_by_vertex():
    """A vertex's state comes from its previous appearance inside the window (zeros at its
    first), as the black-box path hands it on."""
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    raw = make_dynamic_signal(seed=3, T=12, V=10, F=3)
    sig = as64(raw, 12)
    torch.manual_seed(0)
    cell, hd = GConvGRU(3, 5, 2).double(), torch.nn.Linear(5, 1).double()
    rc, rh = copy.deepcopy(cell), copy.deepcopy(hd)
    trainer = WindowTrainer(cell, sig, lags=3, batch_size=2, lr=LR, head=hd, optimizer="sgd")
    trainer.train_epoch()
    opt = torch.optim.SGD(list(rc.parameters()) + list(rh.parameters()), lr=LR)
    starts = list(range(round(10 * 0.7)))
    losses = []
    for a in range(0, len(starts), 2):
        opt.zero_grad()
        per = []
        for s in starts[a:a + 2]:
            H = torch.zeros(10, 5, dtype=torch.float64)
            for t in range(s, s + 3):
                snap = sig[t]
                if snap.num_nodes == 0:
                    continue
                h = rc(snap.x, snap.edge_index, snap.edge_attr, H.index_select(0, snap.n_id))
                H = H.index_copy(0, snap.n_id, h)
            last = sig[s + 2]
            if last.num_nodes:
                per.append(torch.mean((rh(h).squeeze(-1) - last.y) ** 2))
        loss = torch.stack(per).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert len(losses) == len(trainer.batch_losses)
    for x, y in zip(trainer.batch_losses, losses):
        assert math.isclose(x, y, rel_tol=1e-9)
    for p, q in zip(cell.parameters(), rc.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_reuse_flag_and_evaluate():
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    sig = chickenpox(T=16)
    outs = []
    for reuse in (True, False):
        torch.manual_seed(0)
        cell, hd = GConvGRU(4, 6, 2).double(), torch.nn.Linear(6, 1).double()
        tr = WindowTrainer(cell, sig, lags=LAGS, batch_size=4, lr=LR, head=hd, reuse=reuse, optimizer="sgd")
        outs.append((tr.train_epoch(), tr.evaluate("test"), tr.evaluate("val")))
    # equal up to float rounding (reuse sums the basis terms in another order)
    assert math.isclose(outs[0][0], outs[1][0], rel_tol=1e-12)
    for a, b in zip(outs[0][1:], outs[1][1:]):
        assert a.keys() == b.keys() and all(math.isclose(a[k], b[k], rel_tol=1e-12) for k in a)
    ev = outs[0][1]
    assert set(ev) == {"loss", "mse", "mae", "rmse"} and math.isclose(ev["rmse"], math.sqrt(ev["mse"]))
    assert ev["loss"] == ev["mse"] != ev["mae"]                   # loss="mse" (the default): the training loss
    # evaluate against a loop over the test windows
    W = 16 - LAGS + 1
    n_train, n_test = round(W * 0.7), round(W * 0.2)
    test_starts = list(range(W - n_test, W))
    se = ae = 0.0
    with torch.no_grad():
        for s in test_starts:
            h = torch.zeros(20, 6, dtype=torch.float64)
            for t in range(s, s + LAGS):
                snap = sig[t]
                h = cell(snap.x, snap.edge_index, snap.edge_attr, h)
            d = hd(h).squeeze(-1) - snap.y
            se += float((d ** 2).mean())
            ae += float(d.abs().mean())
    assert math.isclose(ev["mse"], se / len(test_starts), rel_tol=1e-9)
    assert math.isclose(ev["mae"], ae / len(test_starts), rel_tol=1e-9)


def test_shuffle_is_a_seeded_permutation_inside_blocks():
    from torch_geometric_temporal.nn.recurrent import TGCN

    sig = chickenpox(T=20)
    tr = WindowTrainer(TGCN(4, 4).double(), sig, lags=LAGS, batch_size=4, blocks=2, shuffle=True, seed=5,
                       head=torch.nn.Linear(4, 1).double(), optimizer="sgd", lr=0.01)
    e0, e1 = tr.batches(0), tr.batches(1)
    train = tr.view.split("train")
    for order in (e0, e1):
        flat = torch.cat(order)
        assert sorted(flat.tolist()) == train.tolist()
        half = (train.numel() + 1) // 2
        for b in order:   # the first half of every batch comes from block 0
            k = b.numel() // 2 if b.numel() > 1 else 0
            assert all(int(w) < half for w in b[:k])
    assert [b.tolist() for b in e0] != [b.tolist() for b in e1]
    assert [b.tolist() for b in e0] == [b.tolist() for b in tr.batches(0)]


def _lstm_or_batched_loop(cell, head, sig, kind):
    """Per-window loop for a two-state cell (GConvLSTM: (h, c)) or a batched cell called on
    a batch of one (TGCN2: x [1, N, F, 1] ... as PyGT's index-batching TGCN example does per step)."""
    starts = window_starts(sig.num_snapshots, LAGS)
    opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=LR)
    losses = []
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        for a in range(0, len(starts), BATCH):
            opt.zero_grad()
            per = []
            for s in starts[a:a + BATCH]:
                h = c = None
                for t in range(s, s + LAGS):
                    snap = sig[t]
                    if kind == "lstm":
                        h, c = cell(snap.x, snap.edge_index, snap.edge_attr, h, c)
                        y = h
                    else:
                        h = cell(snap.x.unsqueeze(0), snap.edge_index, snap.edge_attr,
                                 None if h is None else h.unsqueeze(0))[0]
                        y = h
                per.append(torch.mean((head(y).squeeze(-1) - snap.y) ** 2))
            loss = torch.stack(per).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    finally:
        torch.set_default_dtype(old)
    return losses


@pytest.mark.parametrize("kind", ["lstm", "tgcn2"])
def test_two_state_and_batched_cells(kind):
    from torch_geometric_temporal.nn.recurrent import TGCN2, GConvLSTM

    sig = covid(T=10)
    torch.manual_seed(0)
    cell = (GConvLSTM(4, 5, 2) if kind == "lstm" else TGCN2(4, 5, 1)).double()
    head = torch.nn.Linear(5, 1).double()
    rc, rh = copy.deepcopy(cell), copy.deepcopy(head)
    tr = WindowTrainer(cell, sig, lags=LAGS, batch_size=BATCH, lr=LR, head=head, optimizer="sgd")
    tr.train_epoch()
    ref = _lstm_or_batched_loop(rc, rh, sig, kind)
    assert len(ref) == len(tr.batch_losses) >= 2
    for a, b in zip(tr.batch_losses, ref):
        assert math.isclose(a, b, rel_tol=1e-9)
    for p, q in zip(cell.parameters(), rc.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_stride_two_and_ce_evaluate():
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    sig = chickenpox(T=20)
    torch.manual_seed(0)
    cell, head = GConvGRU(4, 5, 2).double(), torch.nn.Linear(5, 1).double()
    rc, rh = copy.deepcopy(cell), copy.deepcopy(head)
    tr = WindowTrainer(cell, sig, lags=LAGS, batch_size=BATCH, stride=2, lr=LR, head=head, optimizer="sgd")
    starts = (tr.view.starts[tr.view.split("train")]).tolist()
    W = (20 - LAGS) // 2 + 1
    assert starts == list(range(0, 2 * round(W * 0.7), 2))
    tr.train_epoch()
    ref = pygt_loop(rc, rh, sig, LAGS, BATCH, LR, batches=[starts[a:a + BATCH] for a in range(0, len(starts), BATCH)])
    for a, b in zip(tr.batch_losses, ref):
        assert math.isclose(a, b, rel_tol=1e-9)
    for p, q in zip(cell.parameters(), rc.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_classification_targets():
    from torch_geometric_temporal.nn.recurrent import TGCN

    from pyg_dynscale import DynamicGraphSignal

    base = chickenpox(T=16)
    y = (base.y > base.y.median()).long()
    sig = DynamicGraphSignal.from_tensors(node_ptr=base.node_ptr, edge_index=base.edge_index, edge_ptr=base.edge_ptr,
                                          edge_weight=base.edge_weight, x=base.x, y=y)
    torch.manual_seed(0)
    tr = WindowTrainer(TGCN(4, 5).double(), sig, lags=LAGS, batch_size=4, loss="ce", lr=0.1,
                       head=torch.nn.Linear(5, 2).double(), optimizer="sgd")
    assert math.isfinite(tr.train_epoch())
    ev = tr.evaluate("test")
    assert set(ev) == {"loss", "ce", "accuracy"} and 0.0 <= ev["accuracy"] <= 1.0 and ev["ce"] > 0
    assert ev["loss"] == ev["ce"]
