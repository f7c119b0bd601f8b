r"""What a snapshot trainer saves to continue bit for bit, as functions of
explicit arguments (used by :class:`~pyg_dynscale.runtime.FusedTrainer` and
:class:`~pyg_dynscale.distributed.DistributedTrainer`):

* the modules' and the optimizer's ``state_dict``;
* the epochs trained;
* the random generators' states (CPU and every initialized CUDA device: what
  dropout in the model or head draws next);
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

__all__ = ["rng_state", "set_rng_state", "carried_tensors", "load_carried_tensors", "seed_generators",
           "trainer_state", "load_trainer_state"]


def rng_state() -> dict:
    """The global random generators' states: ``"cpu"`` and, where CUDA is
    initialized, ``"cuda"`` (one state per device)."""
    out: dict = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state`'s output (the CUDA part where CUDA is available)."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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
                  carried: Optional[torch.nn.Module] = None) -> dict:
    r"""A snapshot trainer's state: ``{"modules": {name: state_dict or None},
    "optimizer", "epoch", "rng", "carried"}`` (``carried``: the module whose
    carried tensors are saved, the black-box path's user module)."""
    return {"modules": {k: (m.state_dict() if m is not None else None) for k, m in modules.items()},
            "optimizer": optimizer.state_dict(), "epoch": int(epoch), "rng": rng_state(),
            "carried": carried_tensors(carried)}


def load_trainer_state(state: dict, modules: dict[str, Optional[torch.nn.Module]], optimizer: torch.optim.Optimizer,
                       carried: Optional[torch.nn.Module] = None) -> int:
    """Restore :func:`trainer_state`'s output into the same modules and
    optimizer; returns the epoch."""
    saved = state.get("modules", {})
    for k, m in modules.items():
        if (saved.get(k) is None) != (m is None):
            raise ModelInputError(f"state['modules'][{k!r}]", "does not match the trainer's "
                                  f"({'no ' if m is None else ''}{k} here).",
                                  "load a state saved by a trainer built from the same arguments.")
        if m is not None:
            m.load_state_dict(saved[k])
    optimizer.load_state_dict(state["optimizer"])
    load_carried_tensors(carried, state.get("carried", {}))
    set_rng_state(state["rng"])
    return int(state["epoch"])
