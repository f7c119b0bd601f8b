"""FusedTrainer on the one trainer surface, beyond the contract that
tests/training/test_trainer_surface.py checks on every trainer: the metrics'
values (float64, against the loss computed by hand), the deprecated
spellings, ``seed`` and dropout, ``traffic()`` of one process, and the state
round trip bit for bit on both paths (dropout drawn, Adam's moments, a
black-box module's carried tensor)."""
from __future__ import annotations

import copy

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.runtime import FusedTrainer
from pyg_dynscale.runtime.metrics import average_precision, roc_auc
from pyg_dynscale.training import Metrics, TrafficReport
from tests.helpers import distributed_cases as cases
from tests.helpers.cells import CarryingCell


def _tgcn(init: int = 0, dropout: float = 0.0):
    torch.manual_seed(init)
    m = TGCN(cases.F, 4).double()
    head = torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(4, 1)).double()
    return m, head


def _per_snapshot_mean(values: torch.Tensor, time: torch.Tensor, T: int) -> torch.Tensor:
    """PyGT's reduction by hand: the mean of each snapshot's rows, then the mean over snapshots with rows."""
    means = [values[time == t].mean() for t in range(T) if (time == t).any()]
    return torch.stack(means).mean()


@pytest.mark.parametrize("kind", ["mse", "mae"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_regression_metrics_are_the_per_snapshot_means(kind, reduction):
    sig = cases.signal()
    m, head = _tgcn()
    tr = FusedTrainer(m, sig, head=head, loss=kind, snapshot_reduction=reduction)
    tr.train_epoch()
    got = tr.evaluate()
    assert isinstance(got, Metrics) and set(got) == {"loss", "mse", "mae"}
    with torch.no_grad():
        head.eval()
        pred = head(m.forward_fused(tr.graph, None)).squeeze(-1)
    time, T = tr.graph.time, sig.num_snapshots
    err = pred - tr.target
    mse = float(_per_snapshot_mean(err * err, time, T))
    mae = float(_per_snapshot_mean(err.abs(), time, T))
    assert got["mse"] == pytest.approx(mse, abs=1e-12) and got["mae"] == pytest.approx(mae, abs=1e-12)
    assert abs(got["mse"] - got["mae"]) > 1e-6  # two metrics, not one copied
    # "loss" is the training loss with its reduction: the sum over snapshots is T' times the mean
    snapshots_with_rows = int(torch.unique(time).numel())
    scale = snapshots_with_rows if reduction == "sum" else 1
    assert got["loss"] == pytest.approx(scale * got[kind], abs=1e-12)
    with torch.no_grad():
        assert got["loss"] == float(tr.compute_loss())  # eval mode changes nothing here (dropout 0)


def test_link_metrics_are_auc_and_ap_of_the_window_pairs():
    """bce_link: loss, auc and ap of the labelled pairs; a later window's
    evaluation scores that window's pairs only (a zero-state evaluation of the
    window equals a trainer over the window alone)."""
    sig = cases.signal()
    train, test = sig[:4], sig[4:]
    torch.manual_seed(1)
    m = TGCN(cases.F, 4).double()
    tr = FusedTrainer(m, train, loss="bce_link")
    tr.train_epoch()
    got = tr.evaluate()
    assert set(got) == {"loss", "bce_link", "auc", "ap"} and got["bce_link"] == got["loss"]
    with torch.no_grad():
        logits = tr.link_logits(tr.outputs())
    assert got["auc"] == roc_auc(logits, tr.label) and got["ap"] == average_precision(logits, tr.label)
    assert got["loss"] == pytest.approx(float(tr.compute_loss()), abs=1e-12)
    alone = FusedTrainer(m, test, loss="bce_link").evaluate()
    zero = tr.evaluate(test, continue_state=False)
    assert zero.keys() == alone.keys() and all(zero[k] == pytest.approx(alone[k], abs=1e-12) for k in zero)
    ev, first, _ = tr._evaluator(test, True)
    continued = tr.evaluate(test)
    with torch.no_grad():
        all_logits = ev.link_logits(ev.outputs())
    keep = ev.label_time >= first
    assert first > 0 and not bool(keep.all())  # the joined signal has training pairs that must not be scored
    assert continued["auc"] == roc_auc(all_logits[keep], ev.label[keep])
    assert continued["ap"] == average_precision(all_logits[keep], ev.label[keep])


def test_deprecated_spellings_warn_and_work():
    sig = cases.signal()
    train, test = sig[:4], sig[4:]
    m, head = _tgcn()
    with pytest.warns(DeprecationWarning, match="'signal=' is deprecated; use 'data='"):
        old = FusedTrainer(m, signal=train, head=head, loss="mse")
    new = FusedTrainer(m, train, head=head, loss="mse")
    assert old.evaluate() == new.evaluate()
    with pytest.warns(DeprecationWarning, match="data="):
        assert old.evaluate(signal=test) == new.evaluate(test)
    with pytest.warns(DeprecationWarning, match="data="):
        assert torch.equal(old.predict(signal=test), new.predict(test))
    with pytest.raises(TypeError, match="multiple values for argument 'data'"):
        FusedTrainer(m, train, signal=train)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigal'"):
        FusedTrainer(m, train, sigal=train)
    with pytest.raises(TypeError, match="'data'"):
        FusedTrainer(m)
    # a built optimizer still works (deprecated): the same steps as the class spelling
    a_m, a_h = _tgcn(3)
    b_m, b_h = _tgcn(3)
    with pytest.warns(DeprecationWarning, match="built optimizer"):
        a = FusedTrainer(a_m, train, head=a_h, optimizer=torch.optim.SGD(list(a_m.parameters()) +
                                                                         list(a_h.parameters()), lr=0.1))
    b = FusedTrainer(b_m, train, head=b_h, optimizer=torch.optim.SGD, lr=0.1)
    assert [a.train_epoch() for _ in range(2)] == [b.train_epoch() for _ in range(2)]
    with pytest.raises(ModelInputError, match="seed"):
        FusedTrainer(m, train, head=head, seed=1.5)


def test_seed_fixes_the_dropout_draws():
    sig = cases.signal()

    def first_loss(seed, global_seed):
        m, head = _tgcn(0, dropout=0.5)
        torch.manual_seed(global_seed)
        return FusedTrainer(m, sig, head=head, seed=seed).train_epoch()

    assert first_loss(5, 1) == first_loss(5, 2)  # the trainer's seed, whatever the global state was
    assert first_loss(5, 1) != first_loss(6, 1)  # and it is used: another seed draws other masks
    assert first_loss(None, 1) != first_loss(None, 2)  # None: the global generator as it is (as before)


def test_traffic_of_one_process():
    sig = cases.signal()
    m, head = _tgcn()
    with FusedTrainer(m, sig, head=head) as tr:
        tr.train_epoch()
        report = tr.traffic()
    assert isinstance(report, TrafficReport)
    assert report["measured"] == {"total": 0} and report["predicted"] == {"total": 0}
    assert report["host_to_device"] == {"load": 0, "epoch": 0}  # a CPU signal for a CPU model: nothing moved


@pytest.mark.parametrize("case", ["decomposed", "blackbox", "checkpointed"])
def test_a_rebuilt_trainer_continues_bit_for_bit(case):
    """Train 2 epochs, save, train 3 more -> A; rebuild from other initial
    weights under another global random state, load, train 3 -> B: losses,
    parameters, the carried tensor and the evaluation equal bitwise. Dropout
    (p=0.5) and Adam make the generator and the moments matter."""
    sig = cases.signal()

    def build(init):
        if case == "blackbox":
            torch.manual_seed(init)
            m = CarryingCell(cases.F, 4).double()
            head = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(4, 1)).double()
            return FusedTrainer(m, sig, head=head, path="blackbox", depth=0, check=False)
        m, head = _tgcn(init, dropout=0.5)
        return FusedTrainer(m, sig, head=head, checkpoint_every=2 if case == "checkpointed" else None)

    a = build(0)
    assert a.path == ("blackbox" if case == "blackbox" else "decomposed")
    for _ in range(2):
        a.train_epoch()
    state = copy.deepcopy(a.state_dict())
    assert state["epoch"] == 2
    want = [a.train_epoch() for _ in range(3)]
    want_params = [p.detach().clone() for p in a.optimizer.param_groups[0]["params"]]
    torch.manual_seed(999)
    b = build(7)
    b.load_state_dict(state)
    assert b.epoch == 2
    got = [b.train_epoch() for _ in range(3)]
    assert got == want and b.epoch == 5
    assert all(torch.equal(p, q) for p, q in zip(b.optimizer.param_groups[0]["params"], want_params))
    assert b.evaluate() == a.evaluate()
    if case == "blackbox":
        assert torch.equal(b.model.module.carried, a.model.module.carried)
        # the carried tensor is what made the difference: a state without it continues otherwise
        c = build(7)
        c.load_state_dict({**state, "carried": {}})
        assert [c.train_epoch() for _ in range(3)] != want
    # the generator is what dropout draws: a load followed by other draws continues otherwise
    c = build(7)
    c.load_state_dict(state)
    torch.manual_seed(5)
    assert [c.train_epoch() for _ in range(3)] != want
