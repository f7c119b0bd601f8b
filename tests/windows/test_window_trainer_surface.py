"""WindowTrainer on the one trainer surface (pyg_dynscale.training): keyword-only options after the data, the old
positional options and ``signal=`` working with a DeprecationWarning (the same numbers), the optimizer resolved by
build_optimizer (PyGT's index-batching default: Adam, lr=1e-3), ``device``, ``seed``, ``evaluate() -> Metrics`` of
the test split with the training loss, ``traffic()`` a method (the old attribute access deprecated),
``state_dict`` the one state API (progress_state deprecated), ``close`` and ``with``, and
UnsupportedOptionError without internal references. One process, float64."""
from __future__ import annotations

import copy
import inspect

import pytest
import torch

from pyg_dynscale.errors import ModelInputError, UnsupportedOptionError
from pyg_dynscale.nn import TGCN
from pyg_dynscale.training import BaseTrainer, Metrics, TrafficReport
from pyg_dynscale.windows import WindowTrainer
from tests.helpers.signals import make_dynamic_signal
from tests.helpers.windows import chickenpox

KW = dict(lags=3, horizon=1, batch_size=4, stride=1, loss="mae", lr=0.05, optimizer="sgd")


def _model(seed=0):
    torch.manual_seed(seed)
    return TGCN(4, 5).double(), torch.nn.Linear(5, 1).double()


def _run(tr, epochs=2):
    losses = [tr.train_epoch() for _ in range(epochs)]
    return losses + list(tr.batch_losses), dict(tr.evaluate("test")), [p.detach().clone()
                                                                      for p in tr.modules.parameters()]


def _same(a, b):
    assert a[0] == b[0] and a[1] == b[1]
    assert all(torch.equal(p, q) for p, q in zip(a[2], b[2]))


def test_options_after_the_data_are_keyword_only():
    params = list(inspect.signature(WindowTrainer).parameters.values())
    assert [p.name for p in params[:2]] == ["model", "data"]
    named = [p for p in params[2:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert named and all(p.kind is p.KEYWORD_ONLY for p in named)
    for name in ("loss", "optimizer", "lr", "seed", "device", "lags", "batch_size", "node_batch_size"):
        assert name in {p.name for p in named}, name
    assert issubclass(WindowTrainer, BaseTrainer)


def test_old_positional_options_and_signal_keyword_warn_and_compute_the_same():
    sig = chickenpox(T=14)
    m, h = _model()
    want = _run(WindowTrainer(m, sig, head=h, **KW))
    m, h = _model()
    with pytest.warns(DeprecationWarning, match="lags, horizon, batch_size, stride, loss, lr, optimizer, head"):
        tr = WindowTrainer(m, sig, 3, 1, 4, 1, "mae", 0.05, "sgd", h)
    _same(_run(tr), want)
    m, h = _model()
    with pytest.warns(DeprecationWarning, match="'signal=' is deprecated; use 'data='"):
        tr = WindowTrainer(m, signal=sig, head=h, **KW)
    _same(_run(tr), want)
    m, h = _model()
    with pytest.raises(TypeError, match="multiple values for argument 'lags'"):
        WindowTrainer(m, sig, 3, lags=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'lagz'"):
        WindowTrainer(m, sig, lagz=3)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="multiple values for argument 'data'"):
        WindowTrainer(m, signal=sig, data=sig, lags=3)


def test_the_default_optimizer_is_pygt_index_batching_adam():
    sig = chickenpox(T=14)
    m, h = _model()
    tr = WindowTrainer(m, sig, lags=3, batch_size=4, head=h)
    assert type(tr.optimizer) is torch.optim.Adam and tr.optimizer.param_groups[0]["lr"] == 1e-3
    default = _run(tr, 1)
    m, h = _model()
    _same(_run(WindowTrainer(m, sig, lags=3, batch_size=4, head=h, optimizer="adam", lr=1e-3), 1), default)
    m, h = _model()
    sgd = _run(WindowTrainer(m, sig, lags=3, batch_size=4, head=h, optimizer="sgd", lr=1e-3), 1)
    assert sgd[0] != default[0]
    # a class, a callable params -> Optimizer (with or without lr): the same SGD steps
    for spec in (torch.optim.SGD, lambda params: torch.optim.SGD(params, lr=1e-3),
                 lambda params, lr: torch.optim.SGD(params, lr=lr)):
        m, h = _model()
        tr = WindowTrainer(m, sig, lags=3, batch_size=4, head=h, optimizer=spec, lr=1e-3)
        assert type(tr.optimizer) is torch.optim.SGD
        _same(_run(tr, 1), sgd)
    with pytest.raises(ModelInputError) as e:
        WindowTrainer(m, sig, lags=3, batch_size=4, head=h, optimizer="lbfgs")
    assert e.value.field == "optimizer"


def test_evaluate_defaults_to_the_test_split_and_reports_the_training_loss():
    sig = chickenpox(T=16)
    for loss in ("mse", "mae"):
        m, h = _model()
        tr = WindowTrainer(m, sig, lags=3, batch_size=4, head=h, loss=loss, optimizer="sgd", lr=0.05)
        tr.train_epoch()
        ev = tr.evaluate()
        assert isinstance(ev, Metrics) and ev == tr.evaluate("test") != tr.evaluate("val")
        assert set(ev) == {"loss", "mse", "mae", "rmse"} and ev["mse"] != ev["mae"]
        assert ev["loss"] == ev[loss]


def test_seed_none_is_seed_zero_and_device_defaults_to_the_models():
    sig = chickenpox(T=16)
    runs = []
    for seed in (None, 0, 3):
        m, h = _model()
        tr = WindowTrainer(m, sig, head=h, shuffle=True, seed=seed, **KW)
        assert tr.device == torch.device("cpu")
        runs.append(_run(tr))
    _same(runs[0], runs[1])
    assert runs[0][0] != runs[2][0]               # the seed draws the shuffle
    m, h = _model()
    tr = WindowTrainer(m, sig, head=h, shuffle=True, device="cpu", **KW)
    assert tr.device == torch.device("cpu") and all(p.device.type == "cpu" for p in tr.modules.parameters())
    _same(_run(tr), runs[0])


def test_traffic_is_a_method_and_the_old_attribute_warns():
    m, h = _model()
    tr = WindowTrainer(m, chickenpox(T=14), head=h, **KW)
    tr.train_epoch()
    report = tr.traffic()
    assert isinstance(report, TrafficReport)
    assert report["measured"]["total"] == report["predicted"]["total"] == 0        # one process: no collective
    assert isinstance(report["measured"]["total"], int) and report["steps"] == len(tr.batch_losses)
    assert set(report["measured"]) == {"features", "gradients", "loss", "metrics", "setup", "total"}
    with pytest.warns(DeprecationWarning, match="trainer.traffic.gradients is deprecated"):
        assert tr.traffic.gradients == 0
    with pytest.warns(DeprecationWarning, match="as_dict"):
        assert tr.traffic.as_dict() == {"features": 0, "gradients": 0, "loss": 0, "metrics": 0, "setup": 0,
                                        "steps": 0}
    with pytest.raises(AttributeError):
        tr.traffic.bogus


def test_the_old_progress_state_warns_and_state_dict_is_the_one_api():
    sig = chickenpox(T=16)
    m, h = _model()
    tr = WindowTrainer(m, sig, head=h, shuffle=True, **KW)
    tr.train_epoch()
    with pytest.warns(DeprecationWarning, match="state_dict"):
        old = tr.progress_state()
    assert old.keys() == tr.state_dict()["progress"].keys()
    state = copy.deepcopy(tr.state_dict())
    want = _run(tr)
    m, h = _model(seed=4)
    resumed = WindowTrainer(m, sig, head=h, shuffle=True, **KW)
    resumed.load_state_dict(state)
    _same(_run(resumed), want)
    m, h = _model(seed=4)
    old_way = WindowTrainer(m, sig, head=h, shuffle=True, **KW)
    old_way.modules.load_state_dict(state["modules"])
    old_way.optimizer.load_state_dict(state["optimizer"])
    with pytest.warns(DeprecationWarning, match="load_state_dict"):
        old_way.load_progress_state(state["progress"])
    _same(_run(old_way), want)


def test_close_and_the_context_manager():
    m, h = _model()
    with WindowTrainer(m, chickenpox(T=14), head=h, **KW) as tr:
        assert not tr.closed
        tr.train_epoch()
    assert tr.closed
    tr.close()                                                                       # idempotent
    with pytest.raises(ModelInputError, match="closed"):
        tr.train_epoch()
    with pytest.raises(ModelInputError, match="closed"):
        tr.evaluate()


def test_unsupported_combinations_raise_one_typed_error_without_internal_references():
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    sig = chickenpox(T=14)
    cases = [
        (lambda: WindowTrainer(TGCN(4, 5), make_dynamic_signal(T=10, F=4), lags=3, horizon=2, batch_size=2),
         "horizon"),
        (lambda: WindowTrainer(TGCN(1, 5).double(), _series(), lags=3, horizon=3, batch_size=2, decoder="copy",
                               node_batch_size=3), "node_batch_size"),
        (lambda: WindowTrainer(GConvGRU(4, 5, 2).double(), sig, lags=3, batch_size=2, incremental=True,
                               cache_bytes=10_000), "incremental"),
    ]
    for make, option in cases:
        with pytest.raises(UnsupportedOptionError) as e:
            make()
        assert isinstance(e.value, NotImplementedError) and e.value.option == option
        msg = str(e.value)
        assert "Use instead:" in msg and "issue" not in msg.lower() and ".py" not in msg


def _series():
    from tests.helpers.windows import series_static as _series_static

    return _series_static()
