"""FusedTrainer.evaluate(test, continue_state=True) is PyGT's loop that runs the
training snapshots then the test snapshots carrying each vertex's state
(float64), on the decomposed path (PyGT's TGCN through its adapter) and the
black-box path (GConvGRU, GConvLSTM); a zero state at evaluation fails."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.data.concat import concat_signals
from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError
from pyg_dynscale.runtime import FusedTrainer
from pyg_dynscale.runtime.losses import SnapshotMean
from tests.helpers import blackbox_cases as bc

pytestmark = pytest.mark.skipif(not bc.HAVE_PYGT, reason="needs torch_geometric_temporal")

WIDTHS = {"TGCN": (bc.H,), "GConvGRU": (bc.H,), "GConvLSTM": (bc.H, bc.H)}


@torch.no_grad()
def pygt_loop(name: str, m, head, train, test, h0_table=None) -> tuple[float, torch.Tensor]:
    """Eval mode: the training snapshots, then the test snapshots, the state
    rows of every vertex carried in tables (zeros for a vertex never seen);
    returns the test loss (mean over test snapshots of the MSE) and the test
    predictions in vertex-time node order."""
    tables = [torch.zeros(train.num_vertices, w, dtype=torch.float64) for w in WIDTHS[name]]
    if h0_table is not None:  # a table, or one per state component
        tables = [t.clone() for t in (h0_table if isinstance(h0_table, list) else [h0_table])]
    m.eval()
    losses, preds = [], []
    for k, d in enumerate(list(train) + list(test)):
        y, new = bc.call(name, m, d, [t[d.n_id] for t in tables])
        for t, s in zip(tables, new):
            t[d.n_id] = s
        if k >= train.num_snapshots:
            p = head(y)
            preds.append(p)
            losses.append(((p.squeeze(-1) - d.y) ** 2).mean())
    m.train()
    return float(torch.stack(losses).mean()), torch.cat(preds)


@pytest.mark.parametrize("name", ["TGCN", "GConvGRU", "GConvLSTM"])
def test_continued_evaluation_is_the_pygt_loop(name):
    sig = bc.signal("plain", seed=9)
    train, test = sig.split(0.6)
    m, head = bc.cell(name)
    tr = FusedTrainer(m, train, head=head, loss="mse", lr=0.05)
    assert tr.path == ("decomposed" if name == "TGCN" else "blackbox")
    for _ in range(3):
        tr.train_epoch()
    ref_loss, ref_pred = pygt_loop(name, m, head, train, test)
    got = tr.evaluate(test)["loss"]
    assert got == pytest.approx(ref_loss, abs=1e-9)
    assert torch.allclose(tr.predict(test), ref_pred, atol=1e-9, rtol=0)
    # the mutation: a zero state at the first test snapshot is another number
    zero = tr.evaluate(test, continue_state=False)["loss"]
    assert abs(zero - ref_loss) > 1e-6
    assert zero == pytest.approx(FusedTrainer(m, test, head=head, loss="mse").evaluate()["loss"], abs=1e-12)
    assert tr.evaluate()["loss"] == pytest.approx(FusedTrainer(m, train, head=head, loss="mse").evaluate()["loss"],
                                                 abs=1e-12)
    # the evaluator is kept while the same signal is asked for, and follows the parameters
    assert tr._evaluator(test, True) is tr._evaluator(test, True)
    tr.train_epoch()
    assert tr.evaluate(test)["loss"] == pytest.approx(pygt_loop(name, m, head, train, test)[0], abs=1e-9)


def test_continued_evaluation_carries_h0():
    """The training window's h0 is where the carried states start."""
    sig = bc.signal("plain", seed=9)
    train, test = sig.split(0.6)
    m, head = bc.cell("TGCN")
    seq_vertex = train.supergraph().sequence_vertex
    h0 = torch.randn(seq_vertex.numel(), bc.H, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    tr = FusedTrainer(m, train, head=head, loss="mse", lr=0.05, h0=h0)
    tr.train_epoch()
    table = torch.zeros(sig.num_vertices, bc.H, dtype=torch.float64).index_copy(0, seq_vertex, h0)
    assert tr.evaluate(test)["loss"] == pytest.approx(pygt_loop("TGCN", m, head, train, test, table)[0], abs=1e-9)


def test_window_loss_and_errors():
    sig = bc.signal("plain", seed=9)
    train, test = sig.split(0.6)
    assert concat_signals(train, test).equals(sig)
    # the window's reduction equals the reduction of the window's rows alone
    time = sig.supergraph().time
    vals = torch.rand(time.numel(), dtype=torch.float64)
    a = train.num_snapshots
    cut = int(sig.node_ptr[a])
    for red in ("mean", "sum"):
        whole = SnapshotMean.whole(time, sig.num_snapshots, red).from_snapshot(a)(vals)
        alone = SnapshotMean.whole(time[cut:] - a, test.num_snapshots, red)(vals[cut:])
        assert float(whole) == pytest.approx(float(alone), abs=1e-12)
    m, head = bc.cell("TGCN")
    tr = FusedTrainer(m, train, head=head, loss="mse")
    with pytest.raises(ModelInputError, match="continue_state"):
        tr.evaluate(test, continue_state="yes")
    custom = FusedTrainer(m, train, head=head, loss=lambda t, out: out.sum())
    with pytest.raises(ModelInputError, match="callable"):
        custom.evaluate(test)


@pytest.mark.parametrize("name", ["GConvGRU", "GConvLSTM"])
def test_blackbox_h0_is_the_loop_started_from_it(name):
    """h0 on the black-box path: every vertex's first appearance starts from
    its row (one tensor per state component), in training and in the
    continued evaluation; the training loss equals PyGT's loop started there."""
    sig = bc.signal("plain", seed=9)
    train, test = sig.split(0.6)
    m, head = bc.cell(name)
    seq_vertex = train.supergraph().sequence_vertex
    g = torch.Generator().manual_seed(2)
    h0 = tuple(torch.randn(seq_vertex.numel(), w, generator=g, dtype=torch.float64) for w in WIDTHS[name])
    tr = FusedTrainer(m, train, head=head, loss="mse", lr=0.05, h0=h0 if len(h0) > 1 else h0[0])
    tables = [torch.zeros(sig.num_vertices, w, dtype=torch.float64).index_copy(0, seq_vertex, h) for h, w in
              zip(h0, WIDTHS[name])]
    with torch.no_grad():  # the training window's loss from h0, as PyGT's loop computes it
        losses = []
        for d in train:
            y, new = bc.call(name, m, d, [t[d.n_id] for t in tables])
            for t, s in zip(tables, new):
                t[d.n_id] = s
            losses.append(((head(y).squeeze(-1) - d.y) ** 2).mean())
    assert tr.evaluate()["loss"] == pytest.approx(float(torch.stack(losses).mean()), abs=1e-9)
    assert abs(tr.evaluate()["loss"] - FusedTrainer(m, train, head=head, loss="mse").evaluate()["loss"]) > 1e-6
    tr.train_epoch()
    start = [torch.zeros(sig.num_vertices, w, dtype=torch.float64).index_copy(0, seq_vertex, h) for h, w in
             zip(h0, WIDTHS[name])]
    assert tr.evaluate(test)["loss"] == pytest.approx(pygt_loop(name, m, head, train, test, start)[0], abs=1e-9)
    with pytest.raises(ModelInputError, match="h0"):
        FusedTrainer(m, train, head=head, loss="mse", h0=h0[0][:, :2])


def test_refusals_name_the_fix():
    """DySAT's positions must cover the joined snapshots; a streamed trainer
    does not build the joined evaluation (UnsupportedOptionError naming
    stream)."""
    from pyg_dynscale.nn import DySAT, TGCN

    sig = bc.signal("plain", seed=9)
    train, test = sig.split(0.6)
    torch.manual_seed(0)
    short = DySAT(bc.F, bc.H, train.num_snapshots, structural_heads=2, temporal_heads=2).double()
    tr = FusedTrainer(short, train, head=torch.nn.Linear(bc.H, 1).double(), loss="mse")
    with pytest.raises(ModelInputError, match="num_time_steps >= 5"):
        tr.evaluate(test)
    assert tr.evaluate(test, continue_state=False)["loss"] > 0
    full = DySAT(bc.F, bc.H, sig.num_snapshots, structural_heads=2, temporal_heads=2).double()
    assert FusedTrainer(full, train, loss="mse", head=torch.nn.Linear(bc.H, 1).double()).evaluate(test)["loss"] > 0
    streamed = FusedTrainer(TGCN(bc.F, bc.H).double(), train, loss="mse", stream=True, checkpoint_every=2)
    with pytest.raises(UnsupportedOptionError, match="option 'stream'") as err:
        streamed.evaluate(test)
    assert err.value.option == "stream" and "FusedTrainer(model, later" in err.value.instead
