"""The one trainer surface, checked the same way on the four trainers (``FusedTrainer``,
``DistributedTrainer`` in a one-process gloo world, ``WindowTrainer``, ``MemoryTrainer``) on tiny float64 data:

* construction: the model and the data positionally (and the partition for ``DistributedTrainer``), every
  other option by keyword with the same names (``loss``, ``optimizer``, ``lr``, ``seed``, ``device``); an option
  that used to be positional still works that way with a :class:`DeprecationWarning` where the trainer took it
  positionally before, and is a :class:`TypeError` where it never did; ``signal=`` is the deprecated spelling
  of ``data=``;
* ``optimizer``: ``"adam"``, ``"sgd"``, an optimizer class and a callable ``params -> Optimizer`` -- the three
  SGD spellings train bit for bit alike, Adam differently;
* ``train_epoch() -> float``; ``evaluate() -> Metrics`` with the shared metric names (the trainers that own a
  split evaluate its test part by default); ``traffic() -> TrafficReport`` with ``int`` totals;
* ``state_dict()`` / ``load_state_dict()``: a trainer rebuilt from the same arguments (other initial weights,
  another global random state) and loaded continues bit for bit;
* ``with Trainer(...) as t:`` closes it; an unsupported combination raises ``UnsupportedOptionError``, a
  ``NotImplementedError``, with no internal references in its message.
"""
from __future__ import annotations

import copy
import inspect
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

from pyg_dynscale.errors import UnsupportedOptionError
from pyg_dynscale.training import METRIC_NAMES, BaseTrainer, Metrics, TrafficReport

#: metric names a trainer may add to the shared ones (documented in docs/api.md)
EXTRA_METRICS = {"rmse", "ce", "accuracy", "bce_link"}
SHARED_KEYWORDS = ("loss", "optimizer", "lr", "seed", "device")


# ----------------------------------------------------------------------------------------------- tiny data
def _snapshots(T: int = 6):
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    return generate_dynamic_graph(12, 48, T, num_features=3, feature_dtype=torch.float64, seed=0)


def _tgcn(init: int):
    from pyg_dynscale.nn import TGCN

    torch.manual_seed(init)
    return TGCN(3, 4).double(), torch.nn.Linear(4, 1).double()


def _dysat(init: int):
    from pyg_dynscale.nn import DySAT

    torch.manual_seed(init)
    return DySAT(3, 4, 6, structural_heads=1, temporal_heads=1).double(), torch.nn.Linear(4, 1).double()


def _windows_signal():
    # every vertex in every snapshot (windows of a fixed vertex set), edges changing
    from pyg_dynscale.data.synthetic import generate_dynamic_graph

    return generate_dynamic_graph(8, 160, 20, num_features=3, feature_dtype=torch.float64, seed=1)


def _gconvgru(init: int):
    from torch_geometric_temporal.nn.recurrent import GConvGRU

    torch.manual_seed(init)
    return GConvGRU(3, 4, 1).double(), torch.nn.Linear(4, 1).double()


def _events():
    from pyg_dynscale.ctdg import synthetic_events

    d = synthetic_events(300, 30, msg_dim=3, seed=7, burst_length=15)
    d.msg = d.msg.double()
    return d


def _tgn(init: int, num_nodes: int = 30):
    from pyg_dynscale.ctdg import TGN

    torch.manual_seed(init)
    return TGN(num_nodes, 3, memory_dim=6, time_dim=4, embedding_dim=6).double()  # dropout 0.1: drawn


# ----------------------------------------------------------------------------------------------- the four cases
def _fused_cls():
    from pyg_dynscale.runtime import FusedTrainer

    return FusedTrainer


def _distributed_cls():
    from pyg_dynscale.distributed import DistributedTrainer

    return DistributedTrainer


def _window_cls():
    from pyg_dynscale.windows import WindowTrainer

    return WindowTrainer


def _memory_cls():
    from pyg_dynscale.ctdg import MemoryTrainer

    return MemoryTrainer


def _part(sig, m):
    from pyg_dynscale.partition import partition

    return partition(sig, "pss", dist.get_world_size(), m.dependency_pattern())


def _fused(modules, positional, data_keyword, options):
    m, head = modules
    options = {"head": head, "loss": "mse", "seed": 0, **options}
    if data_keyword != "data":
        return _fused_cls()(m, **{data_keyword: _snapshots()}, **options)
    return _fused_cls()(m, _snapshots(), *positional, **options)


def _distributed(modules, positional, data_keyword, options):
    m, head = modules
    sig = _snapshots()
    options = {"head": head, "loss": "mse", "seed": 0, **options}
    if data_keyword != "data":
        return _distributed_cls()(m, partition=_part(sig, m), **{data_keyword: sig}, **options)
    return _distributed_cls()(m, sig, _part(sig, m), *positional, **options)


def _windows(modules, positional, data_keyword, options):
    m, head = modules
    sig = _windows_signal()
    if not positional:
        options = {"lags": 3, "batch_size": 4, **options}
    options = {"head": head, "loss": "mse", "seed": 0, "shuffle": True, **options}
    if data_keyword != "data":
        return _window_cls()(m, **{data_keyword: sig}, **options)
    return _window_cls()(m, sig, *positional, **options)


def _memory(modules, positional, data_keyword, options):
    (m,) = modules
    if not positional:
        options = {"batch_size": 20, "lr": 0.01, **options}
    options = {"seed": 1, **options}
    return _memory_cls()(m, _events(), *positional, **options)


@dataclass
class Case:
    name: str
    cls: Callable[[], type]
    #: ``make(modules, positional, data_keyword, options) -> trainer``
    make: Callable[..., Any]
    #: ``model(init) -> tuple of modules`` (``init``: the seed of the initial weights)
    model: Callable[[int], tuple]
    #: ``evaluate`` of the test split spelled out (trainers that own a split), or None
    evaluate_test: Any = None
    #: positional options the trainer took before this release (a DeprecationWarning), and their keyword form
    old_positionals: tuple = ()
    #: an option combination the trainer does not implement (``model``: another model factory)
    unsupported: dict = None
    #: whether the data keyword used to be ``signal``
    had_signal: bool = True


CASES = {
    "fused": Case("fused", _fused_cls, _fused, _tgcn, unsupported={"model": _dysat, "checkpoint_every": 2}),
    "distributed": Case("distributed", _distributed_cls, _distributed, _tgcn,
                        unsupported={"model": _dysat, "checkpoint_every": 2}),
    "windows": Case("windows", _window_cls, _windows, _gconvgru, evaluate_test=lambda t: t.evaluate(split="test"),
                    old_positionals=((3, 1, 4), {"lags": 3, "horizon": 1, "batch_size": 4}),
                    unsupported={"incremental": True, "cache_bytes": 1 << 20}),
    "events": Case("events", _memory_cls, _memory, lambda init: (_tgn(init),),
                   evaluate_test=lambda t: t.evaluate("test"),
                   old_positionals=((20, 0.01), {"batch_size": 20, "lr": 0.01}),
                   unsupported={"negatives": "historical"}, had_signal=False),
}
NAMES = list(CASES)


def _build(case: Case, init: int = 0, *, positional: tuple = (), data_keyword: str = "data", **options):
    """A trainer of ``case`` on fresh modules (initial weights from ``init``); ``trainer._test_params`` are
    the parameters it was given (trained in place), compared by the tests."""
    modules = options.pop("model", case.model)(init)
    t = case.make(modules, positional, data_keyword, options)
    t._test_params = [p for mod in modules for p in mod.parameters()]
    return t


def _params(t) -> list:
    return [p.detach().clone() for p in t._test_params]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def world(request):
    """A one-process gloo world in this process for ``DistributedTrainer``, destroyed afterwards."""
    created = False
    if request.node.callspec.params.get("name") == "distributed" and not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        created = True
    yield
    if created:
        dist.destroy_process_group()


def _same_metrics(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])), (k, a[k], b[k])


# ----------------------------------------------------------------------------------------------- construction
@pytest.mark.parametrize("name", NAMES)
def test_the_constructor_takes_the_same_keywords(name, world):
    case = CASES[name]
    params = inspect.signature(case.cls().__init__).parameters
    names = list(params)
    assert names[1:3] == ["model", "data"], names[:4]
    if name == "distributed":
        assert names[3] == "partition"
    for kw in SHARED_KEYWORDS:
        assert kw in params and params[kw].kind is inspect.Parameter.KEYWORD_ONLY, kw
    defaults = {kw: params[kw].default for kw in SHARED_KEYWORDS}
    # every shared keyword accepted together, explicitly
    explicit = dict(defaults, optimizer="sgd", lr=0.02, seed=3, device="cpu")
    if name == "events":
        explicit.pop("loss")  # its default, the one loss of link prediction, is what `defaults` holds
        explicit["loss"] = defaults["loss"]
    with _build(case, **explicit) as t:
        assert isinstance(t, BaseTrainer)
        loss = t.train_epoch()
    assert isinstance(loss, float) and math.isfinite(loss)


@pytest.mark.parametrize("name", NAMES)
def test_options_beyond_the_data_are_keywords(name, world):
    """What was positional before warns and works the same; what never was is a TypeError."""
    case = CASES[name]
    if not case.old_positionals:
        with pytest.raises(TypeError):
            _build(case, positional=(torch.nn.Linear(4, 1).double(),))  # the head, positionally
        return
    args, as_keywords = case.old_positionals
    with pytest.warns(DeprecationWarning, match=next(iter(as_keywords))):
        old = _build(case, positional=args)
    with old:  # one trainer after the other: dropout may draw from the global generator
        got = old.train_epoch(), _params(old)
    with _build(case, **as_keywords) as new:
        want = new.train_epoch(), _params(new)
    assert got[0] == want[0]
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1]))


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n].had_signal])
def test_signal_is_the_deprecated_spelling_of_data(name, world):
    case = CASES[name]
    with pytest.warns(DeprecationWarning, match="data="):
        old = _build(case, data_keyword="signal")
    with old:
        got = old.train_epoch()
    with _build(case) as new:
        assert got == new.train_epoch()


@pytest.mark.parametrize("name", NAMES)
def test_optimizer_by_name_class_or_callable(name, world):
    """``"sgd"``, ``torch.optim.SGD`` and ``params -> SGD(params, lr)`` train bit for bit alike; ``"adam"`` and
    ``torch.optim.Adam`` alike and differently from SGD."""
    case = CASES[name]
    lr = 0.05
    # the snapshot trainers take one step per epoch (the first epoch's loss is the initial weights'); the others
    # several
    epochs = 2 if name in ("fused", "distributed") else 1

    def losses(spec, **kw):
        with _build(case, optimizer=spec, lr=lr, **kw) as t:
            out = [t.train_epoch() for _ in range(epochs)]
            return out, _params(t)

    sgd = losses("sgd")
    for spec in (torch.optim.SGD, lambda params: torch.optim.SGD(params, lr=lr)):
        other = losses(spec)
        assert other[0] == sgd[0]
        assert all(torch.equal(a, b) for a, b in zip(other[1], sgd[1]))
    adam = losses("adam")
    adam_cls = losses(torch.optim.Adam)
    assert adam[0] == adam_cls[0] and all(torch.equal(a, b) for a, b in zip(adam[1], adam_cls[1]))
    assert not all(torch.equal(a, b) for a, b in zip(adam[1], sgd[1]))


# ----------------------------------------------------------------------------------------------- results
@pytest.mark.parametrize("name", NAMES)
def test_train_evaluate_traffic_types(name, world):
    case = CASES[name]
    with _build(case) as t:
        loss = t.train_epoch()
        assert type(loss) is float and math.isfinite(loss)
        metrics = t.evaluate()
        assert isinstance(metrics, Metrics) and isinstance(metrics, dict)
        assert "loss" in metrics, metrics
        assert set(metrics) <= set(METRIC_NAMES) | EXTRA_METRICS, sorted(metrics)
        assert all(type(v) is float for v in metrics.values()), metrics
        report = t.traffic()
        assert isinstance(report, TrafficReport)
        for side in ("measured", "predicted"):
            total = report[side]["total"]
            assert type(total) is int and total >= 0, (side, total)
            assert all(type(v) is int for v in report[side].values()), report[side]


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n].evaluate_test is not None])
def test_evaluate_defaults_to_the_test_split(name, world):
    """Trainers that own a split: ``evaluate()`` is ``evaluate`` of its test part (two equal trainers, one after
    the other, so that one evaluation cannot leave state that the other reads)."""
    case = CASES[name]
    with _build(case) as a:
        a.train_epoch()
        default = a.evaluate()
    with _build(case) as b:
        b.train_epoch()
        _same_metrics(default, case.evaluate_test(b))


@pytest.mark.parametrize("name", NAMES)
def test_a_rebuilt_trainer_continues_bit_for_bit(name, world):
    """Train 1 epoch, save, train 1 more -> A; rebuild from the same arguments (other initial weights, another
    global random state), load, train 1 more -> B; A == B bitwise (loss, parameters, evaluation)."""
    case = CASES[name]
    t = _build(case, init=0)
    first = t.train_epoch()
    state = copy.deepcopy(t.state_dict())
    want = (t.train_epoch(), _params(t), t.evaluate())
    t.close()
    assert want[0] != first  # the second epoch differs from the first: loading nothing could not pass
    torch.manual_seed(12345)
    with _build(case, init=7) as again:
        again.load_state_dict(state)
        got = (again.train_epoch(), _params(again), again.evaluate())
    assert got[0] == want[0]
    assert len(got[1]) == len(want[1]) and all(torch.equal(a, b) for a, b in zip(got[1], want[1]))
    _same_metrics(got[2], want[2])


@pytest.mark.parametrize("name", NAMES)
def test_with_closes_and_close_is_idempotent(name, world):
    case = CASES[name]
    with _build(case) as t:
        assert isinstance(t, case.cls()) and not t.closed
        t.train_epoch()
    assert t.closed
    t.close()  # again: nothing happens
    assert t.closed


@pytest.mark.parametrize("name", NAMES)
def test_unsupported_combinations_raise_one_typed_error(name, world):
    case = CASES[name]
    assert issubclass(UnsupportedOptionError, NotImplementedError)
    options = dict(case.unsupported)
    with pytest.raises(UnsupportedOptionError) as err:
        _build(case, **options).close()
    option = next(k for k in options if k != "model")
    assert err.value.option in options and option in str(err.value)
    assert err.value.instead  # what to use instead
    assert not re.search(r"\bissue \d|#\d|\.py\b", str(err.value)), str(err.value)
