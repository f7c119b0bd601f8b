r"""The options every trainer spells the same way: the optimizer, and the old
spellings that keep working for one release with a :class:`DeprecationWarning`.
"""
from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Iterable, Sequence, Union

import torch

from ..errors import ModelInputError

__all__ = ["OPTIMIZERS", "OptimizerSpec", "build_optimizer", "deprecated_positionals", "renamed_keyword"]

#: the optimizers named by a string
OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}

#: ``"adam"``, ``"sgd"``, a :class:`torch.optim.Optimizer` subclass, or a
#: callable ``params -> Optimizer`` (or ``(params, lr=...) -> Optimizer``)
OptimizerSpec = Union[str, type, Callable[..., torch.optim.Optimizer]]


def _takes_lr(factory: Callable) -> bool:
    """Whether ``factory`` accepts an ``lr`` keyword that is still open (``functools.partial(torch.optim.Adam)``
    does; ``lambda p: ...`` does not, nor ``functools.partial(torch.optim.SGD, lr=0.1)``, whose own rate wins)."""
    if isinstance(factory, functools.partial) and "lr" in factory.keywords:
        return False
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it with lr
        return True
    return any(p.name == "lr" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def build_optimizer(spec: Any, params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    r"""The trainer's optimizer over ``params`` from its ``optimizer=`` option.

    Args:
        spec: ``"adam"`` or ``"sgd"`` (``lr`` given); a
            :class:`torch.optim.Optimizer` subclass (called as ``cls(params, lr=lr)``);
            a callable ``params -> Optimizer`` (called with ``lr=lr`` when it takes
            an ``lr`` keyword); or, deprecated, an already built optimizer
            (returned as it is: it must hold the trainer's parameters).
        params: the parameters to optimize (model and head).
        lr (float): the learning rate.
    """
    params = list(params)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ModelInputError("lr", f"is {lr!r}.", "give a positive learning rate, e.g. lr=0.01.")
    if isinstance(spec, torch.optim.Optimizer):
        warnings.warn("passing a built optimizer is deprecated: pass optimizer=torch.optim.Adam (the class), "
                      "'adam', 'sgd' or a callable params -> Optimizer, and lr=.", DeprecationWarning, stacklevel=3)
        held = {id(p) for g in spec.param_groups for p in g["params"]}
        missing = [p for p in params if p.requires_grad and id(p) not in held]
        if missing:
            raise ModelInputError("optimizer", f"does not hold {len(missing)} of the trainer's parameters.",
                                  "pass optimizer=<class or callable> and let the trainer build it.")
        return spec
    if isinstance(spec, str):
        cls = OPTIMIZERS.get(spec.lower())
        if cls is None:
            raise ModelInputError("optimizer", f"is {spec!r}.", f"use one of {sorted(OPTIMIZERS)}, a "
                                  "torch.optim.Optimizer subclass or a callable params -> Optimizer.")
        return cls(params, lr=lr)
    if isinstance(spec, type) and issubclass(spec, torch.optim.Optimizer):
        return spec(params, lr=lr)
    if callable(spec):
        opt = spec(params, lr=lr) if _takes_lr(spec) else spec(params)
        if not isinstance(opt, torch.optim.Optimizer):
            raise ModelInputError("optimizer", f"returned {type(opt).__name__}, not a torch.optim.Optimizer.",
                                  "give a callable params -> torch.optim.Optimizer.")
        return opt
    raise ModelInputError("optimizer", f"is {spec!r}.", f"use one of {sorted(OPTIMIZERS)}, a torch.optim.Optimizer "
                          "subclass or a callable params -> Optimizer.")


def deprecated_positionals(owner: str, names: Sequence[str], args: tuple, kwargs: dict) -> dict:
    r"""Map options passed positionally (``args``, in the order of ``names``)
    into ``kwargs`` with one :class:`DeprecationWarning`; an option given both
    ways is a :class:`TypeError`, as Python's own."""
    if not args:
        return kwargs
    if len(args) > len(names):
        raise TypeError(f"{owner}() takes at most {len(names)} deprecated positional options after the data, "
                        f"{len(args)} were given")
    given = names[:len(args)]
    for name in given:
        if name in kwargs:
            raise TypeError(f"{owner}() got multiple values for argument '{name}'")
    warnings.warn(f"{owner}: passing {', '.join(given)} positionally is deprecated; pass them by keyword "
                  f"({', '.join(f'{n}=...' for n in given)}).", DeprecationWarning, stacklevel=3)
    return {**kwargs, **dict(zip(given, args))}


def renamed_keyword(owner: str, kwargs: dict, old: str, new: str) -> dict:
    r"""Move ``kwargs[old]`` to ``kwargs[new]`` with a :class:`DeprecationWarning`
    (the old spelling works for one release)."""
    if old not in kwargs:
        return kwargs
    if new in kwargs:
        raise TypeError(f"{owner}() got both '{old}' (deprecated) and '{new}'; pass only {new}=")
    warnings.warn(f"{owner}: '{old}=' is deprecated; use '{new}='.", DeprecationWarning, stacklevel=3)
    out = dict(kwargs)
    out[new] = out.pop(old)
    return out
