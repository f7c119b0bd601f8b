r"""Moving host-built structures to the training device, once.

The runtime builds its index structures (layouts, exchange maps, sequence
packings, loss normalizers) on the host, where their data-dependent shapes
are cheap to compute, and moves them to the device *once*. A
:data:`TensorMap` is the function applied to every tensor on the way -- usually
:func:`to_device` -- and :func:`map_tensors` applies it through dataclasses,
lists, tuples and dicts, leaving everything else (ints, lists of split sizes,
strings) as it is.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Union

import torch
from torch import Tensor

__all__ = ["TensorMap", "map_tensors", "to_device"]

#: a function applied to every tensor of a structure (e.g. moving it to a device)
TensorMap = Callable[[Tensor], Tensor]


def to_device(device: Union[str, torch.device]) -> TensorMap:
    """The :data:`TensorMap` moving tensors to ``device`` (non-blocking where
    the source is page-locked; a tensor already there is returned as is)."""
    device = torch.device(device)
    return lambda t: t.to(device, non_blocking=True)


def map_tensors(obj: Any, fn: TensorMap) -> Any:
    """``obj`` with ``fn`` applied to every tensor inside it.

    Dataclass instances are copied with :func:`dataclasses.replace` (fields
    with ``init=False`` are copied as they are); an object with an
    ``apply(fn)`` method (e.g. :class:`~pyg_dynscale.nn.FusedGraph`) maps
    itself; lists, tuples and dicts are rebuilt; anything else is returned
    unchanged.
    """
    if isinstance(obj, Tensor):
        return fn(obj)
    apply = getattr(obj, "apply_tensors", None)
    if apply is not None and not isinstance(obj, type):
        return apply(fn)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: map_tensors(getattr(obj, f.name), fn) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    return obj
