"""pyg_dynscale.training.options: the one optimizer resolver and the old spellings' deprecation helpers."""
from __future__ import annotations

import functools
import warnings

import pytest
import torch

from pyg_dynscale.errors import ModelInputError
from pyg_dynscale.training.options import OPTIMIZERS, build_optimizer, deprecated_positionals, renamed_keyword


def _params() -> list:
    torch.manual_seed(0)
    return list(torch.nn.Linear(3, 2).parameters())


@pytest.mark.parametrize("spec, cls", [("adam", torch.optim.Adam), ("SGD", torch.optim.SGD),
                                       (torch.optim.RMSprop, torch.optim.RMSprop)])
def test_a_name_or_a_class_builds_that_optimizer_with_lr(spec, cls):
    ps = _params()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the supported spellings do not warn
        opt = build_optimizer(spec, ps, 0.03)
    assert type(opt) is cls and opt.param_groups[0]["lr"] == 0.03
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in ps]
    assert set(OPTIMIZERS) == {"adam", "sgd"}


def test_a_callable_gets_lr_only_when_it_takes_it():
    ps = _params()
    seen = []

    def with_lr(params, lr):
        seen.append(lr)
        return torch.optim.SGD(params, lr=lr * 2)

    assert build_optimizer(with_lr, ps, 0.1).param_groups[0]["lr"] == 0.2 and seen == [0.1]
    fixed = build_optimizer(lambda params: torch.optim.SGD(params, lr=0.5), ps, 0.1)  # its own lr wins
    assert fixed.param_groups[0]["lr"] == 0.5
    partial = build_optimizer(functools.partial(torch.optim.Adam, betas=(0.5, 0.6)), ps, 0.07)
    assert partial.param_groups[0]["lr"] == 0.07 and partial.param_groups[0]["betas"] == (0.5, 0.6)
    own = build_optimizer(functools.partial(torch.optim.SGD, lr=0.3, momentum=0.9), ps, 0.07)  # a bound lr wins
    assert own.param_groups[0]["lr"] == 0.3 and own.param_groups[0]["momentum"] == 0.9
    kw = build_optimizer(lambda params, **kw: torch.optim.SGD(params, **kw), ps, 0.04)  # **kwargs takes lr
    assert kw.param_groups[0]["lr"] == 0.04
    with pytest.raises(ModelInputError, match="returned int"):
        build_optimizer(lambda params: 3, ps, 0.1)


@pytest.mark.parametrize("lr", [0, -0.1, True, "0.1", None, float("nan")])
def test_a_learning_rate_that_is_not_a_positive_number_is_refused(lr):
    with pytest.raises(ModelInputError, match="lr"):
        build_optimizer("adam", _params(), lr)


@pytest.mark.parametrize("spec", ["adamw", 3, None])
def test_an_unknown_optimizer_is_refused_naming_the_choices(spec):
    with pytest.raises(ModelInputError, match="adam"):
        build_optimizer(spec, _params(), 0.1)


def test_a_built_optimizer_is_deprecated_and_must_hold_the_trainers_parameters():
    ps = _params()
    built = torch.optim.SGD(ps, lr=0.3)
    with pytest.warns(DeprecationWarning, match="built optimizer"):
        assert build_optimizer(built, ps, 0.01) is built  # returned as it is: its own lr
    frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)  # not trained: need not be held
    with pytest.warns(DeprecationWarning):
        assert build_optimizer(built, ps + [frozen], 0.01) is built
    other = torch.nn.Parameter(torch.zeros(2))
    with pytest.warns(DeprecationWarning), pytest.raises(ModelInputError, match="does not hold 1"):
        build_optimizer(built, ps + [other], 0.01)


def test_deprecated_positionals_map_to_keywords_with_one_warning():
    assert deprecated_positionals("T", ("loss", "lr"), (), {"lr": 1}) == {"lr": 1}  # nothing positional: silent
    with pytest.warns(DeprecationWarning, match=r"T: passing loss, lr positionally.*loss=\.\.\., lr=\.\.\.") as w:
        out = deprecated_positionals("T", ("loss", "lr", "seed"), ("mse", 0.1), {"seed": 3})
    assert out == {"loss": "mse", "lr": 0.1, "seed": 3} and len(w) == 1
    with pytest.raises(TypeError, match="multiple values for argument 'lr'"):
        deprecated_positionals("T", ("loss", "lr"), ("mse", 0.1), {"lr": 0.2})
    with pytest.raises(TypeError, match="at most 2"):
        deprecated_positionals("T", ("loss", "lr"), ("mse", 0.1, 3), {})


def test_a_renamed_keyword_maps_to_the_new_name_with_a_warning():
    assert renamed_keyword("T", {"data": 1}, "signal", "data") == {"data": 1}
    with pytest.warns(DeprecationWarning, match="'signal=' is deprecated; use 'data='"):
        out = renamed_keyword("T", {"signal": 5, "lr": 2}, "signal", "data")
    assert out == {"data": 5, "lr": 2}
    with pytest.raises(TypeError, match="both 'signal'"):
        renamed_keyword("T", {"signal": 5, "data": 6}, "signal", "data")
