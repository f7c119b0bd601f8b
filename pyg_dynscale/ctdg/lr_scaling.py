r"""The learning rate of :class:`~pyg_dynscale.ctdg.MemoryTrainer` under mini-batch
parallelism (``lr_scaling``): DistTGL's remedy for the accuracy it loses per epoch.

Mini-batch parallelism :math:`(i, 1, 1)` trains a global batch of :math:`i b`
events per optimizer step (``b`` = ``batch_size``) and averages the trainers'
gradients (:mod:`~pyg_dynscale.ctdg.trainer`: trainer :math:`t` weighs its loss by
:math:`|b_t| / |B|`), so an epoch takes :math:`i` times fewer steps of the same
size: at the one-process learning rate it learns less per epoch. DistTGL (§4.0.1:
"the learning rate is linear with the global batch size"; its public code sets
``lr = 1e-4 * WORLD_SIZE``) scales the learning rate with the global batch:

* ``"linear"`` -- :math:`\eta = i \, \eta_0`: the one-process learning rate times
  the steps per epoch it loses (Goyal et al.'s linear scaling rule);
* ``"sqrt"`` -- :math:`\eta = \sqrt{i} \, \eta_0` (the rule that keeps the
  variance of an SGD step; often preferred for Adam);
* ``"none"`` -- :math:`\eta = \eta_0`.

Only :math:`i` scales the rate: epoch and memory parallelism (:math:`j`, :math:`k`)
keep the number of steps per epoch of one process (``P + j - 1`` and ``P``), so
they do not lose steps (DistTGL divides the epochs by :math:`j k` instead and
scales by the world size; here an epoch of :math:`(1, j, k)` trains every event
:math:`j k` times). With :math:`i = 1` every choice gives the learning rate
given, bit for bit.
"""
from __future__ import annotations

import math

from ..errors import ModelInputError

__all__ = ["LR_SCALINGS", "check_lr_scaling", "lr_factor", "scaled_lr"]

#: the ``lr_scaling`` values, the default first
LR_SCALINGS = ("linear", "sqrt", "none")


def check_lr_scaling(value: object) -> str:
    """``value`` if it is one of :data:`LR_SCALINGS`, else a :class:`~pyg_dynscale.errors.ModelInputError`."""
    if not isinstance(value, str) or value not in LR_SCALINGS:
        raise ModelInputError("lr_scaling", f"is {value!r}.", f"use one of {list(LR_SCALINGS)}.")
    return value


def lr_factor(lr_scaling: str, parallelism: tuple) -> float:
    r"""The factor of the learning rate: :math:`i`, :math:`\sqrt{i}` or 1 (``parallelism = (i, j, k)``)."""
    i = int(parallelism[0])
    scaling = check_lr_scaling(lr_scaling)
    if scaling == "none" or i == 1:
        return 1.0
    return float(i) if scaling == "linear" else math.sqrt(i)


def scaled_lr(lr: float, lr_scaling: str, parallelism: tuple) -> float:
    """The learning rate the optimizer takes: ``lr`` itself when the factor is 1 (no rounding)."""
    factor = lr_factor(lr_scaling, parallelism)
    return lr if factor == 1.0 else lr * factor
