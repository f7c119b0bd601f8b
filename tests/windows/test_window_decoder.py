"""WindowTrainer's seq2seq mode (pyg_dynscale.windows.decoder): encoder over the window, decoder over the horizon
from the encoder's final state, teacher forcing with seeded draws. Equal to a plain per-window loop in float64
(p = 0, 0.5, 1; horizon past the window; static and changing graphs); reuse=True == reuse=False; under teacher
forcing the decoder reads the encoder's input basis (series signals) or its own basis computed once, and never
aggregates an input itself; bad input."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.nn.snapshot_model import default_dtype
from pyg_dynscale.windows import WindowTrainer
from pyg_dynscale.windows.decoder import teacher_forcing_mask
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import as64, chickenpox, covid
from tests.helpers.windows import series_changing as _series_changing, series_static as _series_static

LAGS, HORIZON, BATCH, LR, SEED = 3, 5, 4, 0.05, 7


class UserCell(torch.nn.Module):
    """A user's cell with PyGT's signature returning ``(y, h)``: GCN, GRU cell, linear read-out."""

    def __init__(self, f: int, hidden: int = 5):
        super().__init__()
        from torch_geometric.nn import GCNConv

        self.conv = GCNConv(f, hidden)
        self.gru = torch.nn.GRUCell(hidden, hidden)
        self.lin = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, edge_weight, h):
        h = self.gru(torch.relu(self.conv(x, edge_index, edge_weight)), h)
        return self.lin(h), h


SIGNALS = {"series": _series_static, "series-covid": _series_changing, "chickenpox": lambda: chickenpox(T=20)}


def _cells(kind: str, F: int, width: int, copy_decoder: bool) -> tuple:
    """``(encoder, decoder or "copy", head)`` in float64, seeded."""
    torch.manual_seed(0)
    if kind == "tgcn":
        enc, dec = TGCN(F, 5), (None if copy_decoder else TGCN(width, 5))
    elif kind == "user":
        enc, dec = UserCell(F), (None if copy_decoder else UserCell(width))
    else:
        rec = pytest.importorskip("torch_geometric_temporal.nn.recurrent")
        enc, dec = getattr(rec, kind)(F, 5, 2), (None if copy_decoder else getattr(rec, kind)(width, 5, 2))
    head = None if kind == "user" else torch.nn.Linear(5, 1)
    dbl = (lambda m: None if m is None else m.double())
    return dbl(enc), ("copy" if dec is None else dbl(dec)), dbl(head)


def _call(m, x, ei, ew, h):
    out = m(x, ei, ew, h)
    return out if isinstance(out, tuple) else (out, out)


def _reference(enc, dec, head, sig, horizon, p, batches_per_epoch: list, lags=LAGS):
    """The plain loop: for each window h = None, the encoder over its lags snapshots, the decoder over the horizon
    (GO, then the ground truth y of the previous target snapshot or the previous prediction, by the same draws);
    mean loss over windows (each the mean over steps and nodes); one SGD step per batch."""
    params = [q for m in (enc, head, dec) if m is not None for q in m.parameters()]   # the trainer's order
    opt = torch.optim.SGD(params, lr=LR)
    n = int(sig.nodes_per_snapshot[0])
    snap = [sig.snapshot(t) for t in range(sig.num_snapshots)]
    losses = []
    for epoch, batches in enumerate(batches_per_epoch):
        for b, starts in enumerate(batches):
            forced = teacher_forcing_mask(SEED, epoch, b, horizon, p)
            opt.zero_grad()
            terms = []
            with default_dtype(torch.float64):
                for s in starts:
                    h = None
                    for t in range(s, s + lags):
                        _, h = _call(enc, snap[t].x, snap[t].edge_index, snap[t].edge_weight, h)
                    u = torch.zeros(n, 1, dtype=torch.float64)
                    per = []
                    for k in range(horizon):
                        t = s + lags - 1 + k
                        y, h = _call(dec, u, snap[t].edge_index, snap[t].edge_weight, h)
                        pred = head(y) if head is not None else y
                        truth = snap[t].y.reshape(n, 1)
                        per.append(((pred - truth) ** 2).mean())
                        u = truth if k + 1 < horizon and bool(forced[k + 1]) else pred
                    terms.append(torch.stack(per).mean())
            loss = torch.stack(terms).mean()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
    return losses, [q.detach().clone() for q in params]


def _trainer(kind, data, p, reuse, horizon=HORIZON, copy_decoder=None, **kw):
    sig = SIGNALS[data]()
    F = int(sig.x.shape[1])
    copy_decoder = (F == 1) if copy_decoder is None else copy_decoder
    enc, dec, head = _cells(kind, F, 1, copy_decoder)
    refs = (copy.deepcopy(enc), copy.deepcopy(enc if dec == "copy" else dec), copy.deepcopy(head))
    tr = WindowTrainer(enc, sig, lags=LAGS, horizon=horizon, batch_size=BATCH, lr=LR, head=head, reuse=reuse,
                       seed=SEED, decoder=dec, teacher_forcing=p, ratio=(0.6, 0.0, 0.4), **kw, optimizer="sgd")
    return tr, sig, refs


def _run(tr, epochs=2):
    batches = [[tr.view.starts.index_select(0, w).tolist() for w in tr.batches(e)] for e in range(epochs)]
    losses = []
    for _ in range(epochs):
        tr.train_epoch()
        losses += tr.batch_losses
    return batches, losses, [q.detach().clone() for q in tr._params]


CASES = ([("tgcn", "series", p) for p in (0.0, 0.5, 1.0)] + [("tgcn", "series-covid", p) for p in (0.5, 1.0)]
         + [("tgcn", "chickenpox", p) for p in (0.0, 1.0)]
         + [("user", "series", 0.5), ("user", "chickenpox", 0.0), ("user", "chickenpox", 1.0)]
         + [(c, d, p) for c in ("GConvGRU", "DCRNN") for d, p in (("series", 0.0), ("series-covid", 0.5),
                                                                  ("chickenpox", 1.0))])


@pytest.mark.parametrize("kind,data,p", CASES)
def test_seq2seq_equals_the_plain_loop(kind, data, p):
    results = []
    for reuse in (False, True):
        tr, sig, (enc, dec, head) = _trainer(kind, data, p, reuse)
        batches, losses, params = _run(tr)
        ref_losses, ref_params = _reference(enc, dec, head, sig, HORIZON, p, batches)
        assert len(losses) == len(ref_losses) > 2
        for a, b in zip(losses, ref_losses):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (reuse, losses, ref_losses)
        for a, b in zip(params, ref_params):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
        results.append((tr, losses, tr.evaluate("test")))
    (off, l0, e0), (on, l1, e1) = results
    assert off._seq2seq.impl is None
    if kind != "user":
        assert on._seq2seq.impl is not None                     # reuse served the decoder's teacher-forced steps
        assert on._seq2seq.shared == (data != "chickenpox")   # y = x shifted: the encoder's basis
    for k in e0:
        assert math.isclose(e0[k], e1[k], rel_tol=1e-9, abs_tol=1e-12)


def test_horizon_within_the_window_and_features_input():
    """A decoder with horizon <= lags, and decoder_input='features' (the next snapshot's features): on a series
    signal the same inputs as 'target', so the same run."""
    runs = []
    for mode in ("target", "features"):
        tr, sig, (enc, dec, head) = _trainer("tgcn", "series", 0.5, True, horizon=2, decoder_input=mode)
        batches, losses, params = _run(tr)
        ref_losses, _ = _reference(enc, dec, head, sig, 2, 0.5, batches)
        assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(losses, ref_losses))
        runs.append(losses)
    assert runs[0] == runs[1]


def _count_input_aggregations(tr) -> list:
    """Forward calls of the decoder's graph convolutions (its own input-side aggregations)."""
    calls = [0]
    for m in tr.decoder.module.modules():
        if "Conv" in type(m).__name__:
            m.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("data", ["series", "chickenpox"])
def test_teacher_forcing_reuses_the_input_aggregations(data):
    """p = 1 with reuse: the decoder never runs a graph convolution of its input (GO: the zero basis; forced steps:
    the encoder's basis on a series signal, else its own basis computed once at construction); the encoder's
    global cache computes nothing more. Free-running with reuse: the reuse's step on the prediction's basis, no
    call of the cell either. Without reuse the decoder convolves."""
    tr, _, _ = _trainer("tgcn", data, 1.0, True)
    calls = _count_input_aggregations(tr)
    before = tr.cache_stats()["global"]["computed"]
    tr.train_epoch()
    assert calls[0] == 0
    assert tr.cache_stats()["global"]["computed"] == before
    assert tr._seq2seq.shared == (data == "series") and (tr._seq2seq._basis is None) == (data == "series")
    if data == "series":
        assert tr.cache_stats()["global"]["unplanned_accesses"] > 0   # the decoder's reads of the encoder's basis
    for p, reuse in ((1.0, False), (0.0, True)):
        tr, _, _ = _trainer("tgcn", data, p, reuse)
        calls = _count_input_aggregations(tr)
        tr.train_epoch()
        assert (calls[0] > 0) == (not reuse)


def test_evaluate_runs_free_and_draws_are_seeded():
    a, _, _ = _trainer("tgcn", "series", 1.0, True)
    b, _, _ = _trainer("tgcn", "series", 0.0, True)
    assert a.evaluate("test") == b.evaluate("test")              # same parameters, no teacher forcing in evaluate
    assert a.decoder.training                                    # restored
    m = [teacher_forcing_mask(0, e, k, 6, 0.5) for e in range(3) for k in range(4)]
    assert all(not bool(x[0]) for x in m)                        # GO step
    assert len({tuple(x.tolist()) for x in m}) > 3
    assert torch.equal(teacher_forcing_mask(0, 1, 2, 6, 0.5), m[4 + 2])
    assert not bool(teacher_forcing_mask(3, 0, 0, 50, 0.0).any())
    assert bool(teacher_forcing_mask(3, 0, 0, 50, 1.0)[1:].all())
    assert not torch.equal(teacher_forcing_mask(1, 0, 0, 50, 0.5), teacher_forcing_mask(2, 0, 0, 50, 0.5))


def test_bad_input():
    sig = _series_static()
    enc = TGCN(1, 5).double()
    with pytest.raises(ModelInputError, match="decoder.*horizon=5 > lags=3"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="decoder.*widths \\[4\\].*\\[5\\]"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder=TGCN(1, 4).double(), optimizer="sgd", lr=0.01)
    for p in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(ModelInputError, match="teacher_forcing"):
            WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="copy", teacher_forcing=p,
                          optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="teacher_forcing.*without a decoder"):
        WindowTrainer(enc, sig, lags=3, horizon=2, batch_size=2, teacher_forcing=0.5, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="decoder_input"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="copy", decoder_input="go",
                      optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="decoder.*'cp'"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="cp", optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="decoder.*encoder module itself"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder=enc, optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="in_channels=1"):      # 'copy' reads 4 features, the target is 1 wide
        WindowTrainer(TGCN(4, 5).double(), chickenpox(T=20), lags=3, horizon=5, batch_size=2, decoder="copy",
                      optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="loss"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="copy", loss="ce", optimizer="sgd", lr=0.01)
    with pytest.raises(ModelInputError, match="head.*Linear\\(<the decoder's output width>, 1\\)"):
        tr = WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="copy",
                           optimizer="sgd", lr=0.01)    # no head: 5-wide rows
        tr.train_epoch()
    with pytest.raises(NotImplementedError, match="node_batch_size"):
        WindowTrainer(enc, sig, lags=3, horizon=5, batch_size=2, decoder="copy", node_batch_size=3,
                      optimizer="sgd", lr=0.01)
    vsig = as64(make_dynamic_signal(seed=3, T=12, V=10, F=1), 12)
    with pytest.raises(NotImplementedError, match="vertex set changes"):
        WindowTrainer(TGCN(1, 5).double(), vsig, lags=3, horizon=1, batch_size=2, decoder="copy",
                      optimizer="sgd", lr=0.01)


def _ranked(placement, blocks=2):
    tr, _, _ = _trainer("tgcn", "series", 0.5, True, placement=placement, blocks=blocks)
    losses = [tr.train_epoch() for _ in range(2)]
    return losses, [q.detach().clone() for q in tr._params], tr.evaluate("test"), tr._seq2seq.shared


def _rank_job(rank, world):
    torch.set_num_threads(1)
    return [_ranked(pl) for pl in ("blocks", "replicated")]


def test_two_ranks_equal_one_process():
    """Under 2 gloo ranks (both placements) the decoder's parameters are synchronized by the same DDP module and the
    teacher-forcing draws agree: == one process with the same blocks, replicas identical, the basis still shared."""
    from pyg_dynscale.training.launch import spawn

    torch.set_num_threads(1)
    ref = _ranked(None)
    per_rank = spawn(_rank_job, 2, timeout=120)
    for run in range(2):
        r0, r1 = per_rank[0][run], per_rank[1][run]
        assert r0[0] == r1[0] and r0[2] == r1[2] and r0[3] and r1[3]
        for a, b, c in zip(r0[1], r1[1], ref[1]):
            assert torch.equal(a, b)
            torch.testing.assert_close(a, c, rtol=1e-9, atol=1e-12)
        assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(r0[0], ref[0]))
        assert all(math.isclose(r0[2][k], ref[2][k], rel_tol=1e-9) for k in ref[2])
