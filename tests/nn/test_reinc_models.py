"""ReInc's models (pyg_dynscale.nn.reinc_models: GCRN-M1, GCRN-M2, CD-GCN; and pyg_dynscale's TGCN) with their
reuse (nn.reinc_reuse): through WindowTrainer, reuse=True equals reuse=False and a plain per-window loop in
float64 (static and changing graph); under FusedTrainer's black-box path they equal PyGT's per-snapshot loop."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.nn.reinc_models import CDGCN, GCRNM1, GCRNM2
from pyg_dynscale.nn.reinc_reuse import CDGCNReuse, GCRNM1Reuse, GCRNM2Reuse, TGCNLocalReuse
from pyg_dynscale.nn.reuse import reuse_for
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.windows import chickenpox, covid, window_starts

LAGS, BATCH, LR, HID = 3, 3, 0.05, 5
MODELS = {"GCRNM1": lambda: GCRNM1(4, HID), "GCRNM2": lambda: GCRNM2(4, HID), "CDGCN": lambda: CDGCN(4, HID),
          "TGCN": lambda: TGCN(4, HID)}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _call(model, snap, h, c):
    """One snapshot as a PyGT user calls it: ReInc's layers take and return (h, c), TGCN h only."""
    if isinstance(model, TGCN):
        h = model(snap.x, snap.edge_index, snap.edge_attr, h)
        return h, h, None
    return model(snap.x, snap.edge_index, snap.edge_attr, h, c)


def _window_loop(model, head, sig):
    """The plain index-batching loop: per batch, per window, zero state, run the window, predict at its last
    snapshot; mean over nodes, then over windows; backward; SGD step."""
    starts = window_starts(sig.num_snapshots, LAGS)
    opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=LR)
    losses = []
    for a in range(0, len(starts), BATCH):
        opt.zero_grad()
        per = []
        for s in starts[a:a + BATCH]:
            h = c = None
            for t in range(s, s + LAGS):
                y, h, c = _call(model, sig[t], h, c)
            per.append(torch.mean((head(y).squeeze(-1) - sig[s + LAGS - 1].y) ** 2))
        loss = torch.stack(per).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _trained(name, sig, reuse, **kw):
    torch.manual_seed(0)
    m, hd = MODELS[name]().double(), torch.nn.Linear(HID, 1).double()
    ref_m, ref_hd = copy.deepcopy(m), copy.deepcopy(hd)
    tr = WindowTrainer(m, sig, lags=LAGS, batch_size=BATCH, lr=LR, head=hd, reuse=reuse, **kw, optimizer="sgd")
    tr.train_epoch()
    return tr, m, (ref_m, ref_hd)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("data", ["static", "changing"])
def test_windows_reuse_equals_no_reuse_and_the_plain_loop(name, data):
    sig = chickenpox(T=14) if data == "static" else covid(T=11)
    off, m0, (ref_m, ref_hd) = _trained(name, sig, False)
    on, m1, _ = _trained(name, sig, True)
    assert off.reuse_impl is None and on.reuse_impl is not None
    ref = _window_loop(ref_m, ref_hd, sig)
    assert len(ref) >= 2 and len(on.batch_losses) == len(ref)
    for a, b, r in zip(off.batch_losses, on.batch_losses, ref):
        assert math.isclose(a, r, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(b, r, rel_tol=1e-9, abs_tol=1e-12)
    for p, q, r in zip(m0.parameters(), m1.parameters(), ref_m.parameters()):
        torch.testing.assert_close(p, r, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(q, r, rtol=1e-9, atol=1e-12)
    e0, e1 = off.evaluate("test"), on.evaluate("test")
    for k in e0:
        assert math.isclose(e0[k], e1[k], rel_tol=1e-9, abs_tol=1e-13)
    local = on.cache_stats()["local"]
    assert local["hits"] > 0 and local["hits"] + local["misses"] == local["accesses"]


def test_reuse_for_picks_the_layer_s_own():
    assert reuse_for(GCRNM1(3, 4)) is GCRNM1Reuse
    assert reuse_for(GCRNM2(3, 4)) is GCRNM2Reuse
    assert reuse_for(CDGCN(3, 4)) is CDGCNReuse
    assert reuse_for(TGCN(3, 4)) is TGCNLocalReuse
    assert reuse_for(TGCN(3, 4, num_layers=2)) is None and reuse_for(TGCN(3, 4, cached=True)) is None


@pytest.mark.parametrize("cls", [GCRNM1, GCRNM2, CDGCN])
def test_layer_shapes_and_one_layer(cls):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    for L in (1, 2, 3):
        m = cls(3, 4, num_layers=L).double()
        y, h, c = m(x, ei)
        assert y.shape == (6, 4) and h.shape == (6, 4 * L) and c.shape == (6, 4 * L)
        torch.testing.assert_close(y, h[:, -4:])
        y2, h2, c2 = m(x, ei, None, h, c)            # the state is carried: a second step differs
        assert not torch.allclose(y2, y)
    with pytest.raises(ModelInputError, match="num_layers"):
        cls(3, 4, num_layers=0)


def test_cdgcn_skip_concatenates_the_aggregated_input():
    """SC'21's CD-GCN: layer 0's LSTM reads ReLU([A X, A X W + b]) (F + H wide), A X = GCN's normalized
    aggregation without parameters."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    m = CDGCN(3, 4, num_layers=1).double()
    assert m.lstms[0].input_size == 3 + 4
    x = torch.randn(5, 3, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    e, w = gcn_norm(ei, None, 5, add_self_loops=True, dtype=x.dtype)
    ax = torch.zeros_like(x).index_add_(0, e[1], x[e[0]] * w[:, None])
    z = torch.relu(torch.cat([ax, ax @ m.convs[0].lin.weight.t() + m.convs[0].bias], 1))
    h, c = m.lstms[0](z, (x.new_zeros(5, 4), x.new_zeros(5, 4)))
    y, _, c1 = m(x, ei)
    torch.testing.assert_close(y, h, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(c1, c, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["GCRNM1", "GCRNM2", "CDGCN"])
def test_fused_blackbox_equals_the_per_snapshot_loop(name):
    """FusedTrainer's black-box path (the module called once per snapshot, states (h, c) handed on by vertex,
    changing vertex sets) equals PyGT's loop: the same losses and parameters after 2 epochs."""
    from pyg_dynscale.runtime import FusedTrainer
    from tests.helpers import blackbox_cases as cases

    sig = cases.signal("plain")
    runs = []
    for mode in ("fused", "loop"):
        torch.manual_seed(3)
        m = {"GCRNM1": GCRNM1, "GCRNM2": GCRNM2, "CDGCN": CDGCN}[name](cases.F, cases.H).double()
        head = torch.nn.Linear(cases.H, 1).double()
        opt = torch.optim.SGD(list(m.parameters()) + list(head.parameters()), lr=0.05)
        losses = []
        if mode == "fused":
            tr = FusedTrainer(m, sig, head=head, loss="mse", path="blackbox", optimizer=opt)
            losses = [tr.train_epoch() for _ in range(2)]
        else:
            for _ in range(2):
                opt.zero_grad()
                hs = torch.zeros(sig.num_vertices, 2 * cases.H, dtype=torch.float64)
                cs = torch.zeros_like(hs)
                per = []
                for t in range(sig.num_snapshots):
                    d = sig.snapshot(t)
                    y, h, c = m(d.x, d.edge_index, d.edge_attr, hs.index_select(0, d.n_id), cs.index_select(0, d.n_id))
                    hs, cs = hs.index_copy(0, d.n_id, h), cs.index_copy(0, d.n_id, c)
                    per.append(((head(y).squeeze(1) - d.y) ** 2).mean())
                loss = torch.stack(per).mean()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
        runs.append((losses, [p.detach().clone() for p in list(m.parameters()) + list(head.parameters())]))
    for a, b in zip(runs[0][0], runs[1][0]):
        assert math.isclose(a, b, rel_tol=1e-9)
    for p, q in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)
