r"""What a snapshot trainer saves to continue bit for bit, as functions of
explicit arguments (used by :class:`~pyg_dynscale.runtime.FusedTrainer` and
:class:`~pyg_dynscale.distributed.DistributedTrainer`):

* the modules' and the optimizer's ``state_dict``;
* the epochs trained;
* the random generators' states (CPU, and the trainer's CUDA device: what
  dropout in the model or head draws next; :mod:`pyg_dynscale.training.state`);
* the **carried** tensors of a black-box module: plain tensor attributes a
  module keeps from one call to the next (PyGT's EvolveGCN keeps its evolved
  weight), which are neither parameters nor buffers, so ``state_dict`` misses
  them.

A trainer's own caches (the stale embedding cache) add their state under
their own key.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from ..training.state import load_training_state, rng_state, set_rng_state, training_state

__all__ = ["carried_tensors", "load_carried_tensors", "seed_generators", "trainer_state", "load_trainer_state"]


def seed_generators(seed: Optional[int]) -> None:
    """Seed the global generators (CPU and CUDA) with ``seed``; ``None`` leaves them as they are."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ModelInputError("seed", f"is {seed!r}.", "give an int, or None to leave the generators as they are.")
    torch.manual_seed(seed)


def carried_tensors(module: Optional[torch.nn.Module]) -> dict[str, Tensor]:
    """``{"<submodule path>.<attribute>": tensor}`` of the plain tensor
    attributes of ``module`` and its submodules (not parameters, not
    buffers), detached copies."""
    out: dict[str, Tensor] = {}
    if module is None:
        return out
    for prefix, sub in module.named_modules():
        for name, v in vars(sub).items():
            if isinstance(v, Tensor) and not isinstance(v, torch.nn.Parameter):
                out[f"{prefix}.{name}" if prefix else name] = v.detach().clone()
    return out


def load_carried_tensors(module: Optional[torch.nn.Module], state: dict[str, Tensor]) -> None:
    """Set the attributes :func:`carried_tensors` saved (copies, on each
    current attribute's device when it has one)."""
    if module is None:
        return
    subs = dict(module.named_modules())
    for key, v in state.items():
        path, _, name = key.rpartition(".")
        sub = subs.get(path)
        if sub is None:
            raise ModelInputError("state['carried']", f"names submodule {path!r}, which the model does not have.",
                                  "load a state saved by a trainer built from the same arguments.")
        old = vars(sub).get(name)
        setattr(sub, name, v.clone().to(old.device) if isinstance(old, Tensor) else v.clone())


def trainer_state(modules: dict[str, Optional[torch.nn.Module]], optimizer: torch.optim.Optimizer, epoch: int,
                  device: Any, carried: Optional[torch.nn.Module] = None) -> dict:
    r"""A snapshot trainer's state: :func:`~pyg_dynscale.training.state.training_state`'s
    ``{"modules": {name: state_dict or None}, "optimizer"}`` with ``"epoch"``,
    the generators of a trainer on ``device``
    (:func:`~pyg_dynscale.training.state.rng_state`: ``"rng"``, and
    ``"cuda_rng"`` on CUDA) and ``"carried"`` (the carried tensors of
    ``carried``, the black-box path's user module)."""
    return training_state(modules, optimizer, epoch=int(epoch), **rng_state(device),
                          carried=carried_tensors(carried))


def load_trainer_state(state: dict, modules: dict[str, Optional[torch.nn.Module]], optimizer: torch.optim.Optimizer,
                       device: Any, carried: Optional[torch.nn.Module] = None, *, owner: str) -> int:
    """Restore :func:`trainer_state`'s output into the same modules and
    optimizer (and the generators of ``device``); returns the epoch."""
    load_training_state(state, modules, optimizer, owner=owner, parts=("epoch", "rng"))
    load_carried_tensors(carried, state.get("carried", {}))
    set_rng_state(state, device)
    return int(state["epoch"])
