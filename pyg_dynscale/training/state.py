r"""What a trainer saves to continue bit for bit, in one place: the
:class:`Checkpointable` protocol every stateful part follows, the random
generators' state (:func:`rng_state` / :func:`set_rng_state`), and the
modules + optimizer pair (:func:`training_state` / :func:`load_training_state`).

**Random generators.** A trainer's draws that are not seeded per epoch
(dropout in the user's model, negatives drawn from torch's global generator)
continue bit for bit only if the generator continues where it was: the CPU
generator, and on a CUDA trainer the CUDA generator **of the trainer's
device** (each device has its own). The package draws nothing from Python's
``random`` or NumPy's global generator (its NumPy draws use
``numpy.random.default_rng(seed)``), so those are not saved.

The states are ``uint8`` tensors under flat keys (``"rng"``, ``"cuda_rng"``,
optionally behind a prefix such as ``"rank3/"``), so a DCP checkpoint stores
each rank's own.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Protocol, Union, runtime_checkable

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["Checkpointable", "rng_state", "set_rng_state", "device_rng_keys", "training_state",
           "load_training_state"]

DeviceLike = Union[str, torch.device, None]


@runtime_checkable
class Checkpointable(Protocol):
    r"""What a trainer and each stateful part of it (a cache, a byte ledger,
    a memory store) implement: :meth:`state_dict` returns everything needed to
    continue, :meth:`load_state_dict` restores it into an object built from the
    same arguments (``torch.nn.Module`` and ``torch.optim.Optimizer`` follow it)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> Any: ...


def _cuda(device: DeviceLike) -> Optional[torch.device]:
    """``device`` as a CUDA device with an index (the current one where it has none), ``None`` for any other."""
    if device is None:
        return None
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def device_rng_keys(device: DeviceLike = None, *, prefix: str = "") -> list:
    """The keys of :func:`rng_state` that only a run on ``device``'s kind of
    device writes (``[prefix + "cuda_rng"]`` on CUDA, ``[]`` on the CPU): a
    checkpoint written on another kind of device lacks them."""
    return [f"{prefix}cuda_rng"] if _cuda(device) is not None else []


def rng_state(device: DeviceLike = None, *, prefix: str = "") -> dict[str, Tensor]:
    r"""The random generators a trainer on ``device`` draws from:
    ``{prefix + "rng": CPU state}`` and, for a CUDA ``device``,
    ``prefix + "cuda_rng"``: that device's generator state (``uint8``
    tensors, on the host)."""
    out = {f"{prefix}rng": torch.get_rng_state()}
    cuda = _cuda(device)
    if cuda is not None:
        out[f"{prefix}cuda_rng"] = torch.cuda.get_rng_state(cuda)
    return out


def set_rng_state(state: Mapping, device: DeviceLike = None, *, prefix: str = "",
                  fallback_seed: Optional[int] = None) -> None:
    r"""Restore :func:`rng_state`'s output for a trainer on ``device``.

    A CUDA trainer whose ``state`` lacks the CUDA key (a checkpoint written on
    the CPU) seeds its device's generator with ``fallback_seed``, or raises
    :class:`~pyg_dynscale.errors.ModelInputError` without one. The snapshot
    trainers' earlier layout (``{"cpu": ..., "cuda": [one per device]}``, or
    nested under ``"rng"``) is read too.
    """
    if "cpu" in state and f"{prefix}rng" not in state:  # the earlier layout: every initialized CUDA device
        torch.set_rng_state(state["cpu"].cpu())
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        return
    key = f"{prefix}rng"
    if isinstance(state.get(key), Mapping):  # the earlier layout nested under "rng"
        set_rng_state(state[key])
        return
    if key not in state:
        raise ModelInputError("state", f"lacks {key!r}.", "give the state the trainer's state_dict() returned.")
    torch.set_rng_state(state[key].cpu())
    cuda = _cuda(device)
    if cuda is None:
        return
    ckey = f"{prefix}cuda_rng"
    if ckey in state:
        torch.cuda.set_rng_state(state[ckey].cpu(), cuda)
    elif fallback_seed is not None:
        torch.cuda.init()  # the device's own generator, now (torch.cuda.manual_seed would seed the current device)
        torch.cuda.default_generators[cuda.index].manual_seed(int(fallback_seed))
    else:
        raise ModelInputError("state", f"lacks {ckey!r} (it was saved by a trainer on another kind of device).",
                              "resume on the device type the state was saved on.")


def _modules_state(modules: Union[torch.nn.Module, Mapping]) -> Any:
    if isinstance(modules, torch.nn.Module):
        return modules.state_dict()
    return {k: (m.state_dict() if m is not None else None) for k, m in modules.items()}


def _load_modules(modules: Union[torch.nn.Module, Mapping], saved: Any) -> None:
    if isinstance(modules, torch.nn.Module):
        modules.load_state_dict(saved)
        return
    for k, m in modules.items():
        if (saved.get(k) is None) != (m is None):
            raise ModelInputError(f"state['modules'][{k!r}]", "does not match the trainer's "
                                  f"({'no ' if m is None else ''}{k} here).",
                                  "load a state saved by a trainer built from the same arguments.")
        if m is not None:
            m.load_state_dict(saved[k])


def training_state(modules: Union[torch.nn.Module, Mapping], optimizer: torch.optim.Optimizer,
                   **parts: Any) -> dict:
    r"""``{"modules", "optimizer", **parts}``: the modules' state (one module,
    e.g. a ``ModuleDict`` whose names give DCP its keys, or ``{name: module or
    None}``), the optimizer's, and the trainer's further parts (progress,
    caches, RNG) as given. References, as torch's own ``state_dict``."""
    return {"modules": _modules_state(modules), "optimizer": optimizer.state_dict(), **parts}


def load_training_state(state: Mapping, modules: Union[torch.nn.Module, Mapping], optimizer: torch.optim.Optimizer,
                        *, owner: str, parts: tuple = ()) -> None:
    r"""Restore :func:`training_state`'s modules and optimizer into a trainer
    built from the same arguments, after checking that ``state`` holds
    ``"modules"``, ``"optimizer"`` and each of ``parts`` (the caller restores
    those); ``owner`` names the trainer in the error."""
    for key in ("modules", "optimizer", *parts):
        if key not in state:
            raise ModelInputError("state", f"lacks {key!r}.", f"give what {owner}.state_dict() returned.")
    _load_modules(modules, state["modules"])
    optimizer.load_state_dict(state["optimizer"])
