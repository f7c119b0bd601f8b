r"""The process groups a trainer needs besides the user's, created the way torch requires.

``torch.distributed.new_group`` must be entered by **every rank of the
default group, in the same order**, members or not: groups are named by a
per-process counter, so a group created on a subgroup's ranks only takes a
name that the other ranks give to a different group, and the two
rendezvous meet each other's peers (a hang, or rows from the wrong ranks).
A trainer built on a subgroup (``DistributedTrainer(group=subgroup)``)
therefore cannot just call ``new_group(ranks=subgroup_ranks)``.

:func:`helper_group` is the one way the package makes a group: every rank of
the world calls it at the same point (trainer set-up is collective over the
world, as with any ``new_group``), each with its *own* request -- the ranks of
its group, a backend, a purpose; the requests are all-gathered over a host
group of the whole world, and every rank creates every requested group not
made before, in one sorted order. A group is made once per ``(ranks,
backend, purpose)`` and reused (a later-window evaluator or a second trainer
gets the same one).

:func:`bind_device` makes the training GPU this process's current device
before the first NCCL collective: NCCL (and the object collectives, which
stage their bytes on ``torch.cuda.current_device()``) use the current device,
so an unbound rank ``r > 0`` would act on ``cuda:0``.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Union

import torch
import torch.distributed as dist

__all__ = ["bind_device", "local_cuda_device", "group_backend", "moves_host_tensors", "group_ranks", "helper_group",
           "host_group", "world_host_group", "reset_helper_groups"]

#: ``(ranks, backend, purpose) -> group``: the groups :func:`helper_group` made in this process
_MADE: dict[tuple, Any] = {}
#: the host (gloo) group of the whole world the requests travel on (``None``: not made yet)
_WORLD_HOST: list = []
#: the default group the groups above belong to (a new default group, after ``destroy_process_group``
#: and ``init_process_group``, starts a new set)
_DEFAULT: list = []


def _current() -> None:
    """Forget groups of a default group that has been destroyed since they were made."""
    world = dist.group.WORLD
    if not _DEFAULT or _DEFAULT[0] is not world:
        reset_helper_groups()
        _DEFAULT.append(world)


def local_cuda_device() -> torch.device:
    """``cuda:LOCAL_RANK`` (torchrun's variable; ``cuda:0`` without it)."""
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def bind_device(device: Union[str, torch.device, None]) -> Optional[torch.device]:
    """Make ``device`` (a CUDA device) this process's current device; a no-op for
    any other device. Returns the bound device (``None`` when nothing was bound).
    ``"cuda"`` without an index binds :func:`local_cuda_device`."""
    if device is None:
        return None
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    if dev.index is None:
        dev = local_cuda_device()
    torch.cuda.set_device(dev)
    return dev


def group_backend(group: Optional[Any] = None) -> str:
    """The backend name of ``group`` (``"gloo"``, ``"nccl"``, or a
    ``"cpu:gloo,cuda:nccl"``-style mapping), lower case."""
    return str(dist.get_backend(group)).lower()


def moves_host_tensors(backend: str) -> bool:
    """Whether a group of ``backend`` runs collectives on CPU tensors."""
    return "gloo" in backend or "mpi" in backend


def group_ranks(group: Optional[Any] = None) -> tuple[int, ...]:
    """The global ranks of ``group`` (``None``: the world), sorted."""
    if group is None or group is dist.group.WORLD:
        return tuple(range(dist.get_world_size()))
    return tuple(sorted(dist.get_process_group_ranks(group)))


def world_host_group() -> Optional[Any]:
    """A group of the whole world that moves host tensors: the default group
    when its backend does (``None`` stands for it), else a gloo group made once
    (every rank of the world calls this at the same point the first time)."""
    if moves_host_tensors(group_backend(None)):
        return None
    _current()
    if not _WORLD_HOST:
        _WORLD_HOST.append(dist.new_group(backend="gloo"))
    return _WORLD_HOST[0]


def helper_group(group: Optional[Any] = None, backend: Optional[str] = None, purpose: str = "host") -> Optional[Any]:
    r"""A group with the ranks of ``group`` on ``backend`` (default: ``group``'s
    own) for ``purpose``, created collectively and reused.

    A collective over the **world**: every rank of the default group calls it
    at the same point, each with its own ``group`` (ranks of different
    subgroups ask for different groups). One ``all_gather_object`` over
    :func:`world_host_group` collects the requests; then every rank enters
    ``new_group`` for each requested group not made before, in sorted order.

    Args:
        group: the trainer's process group (``None``: the world).
        backend: ``"gloo"`` for host values, ``None`` for ``group``'s backend
            (NCCL on GPUs: device tensors).
        purpose: names the use, so that two uses of the same ranks and backend
            (e.g. host values, and an exchange on a thread of its own) get
            different groups.

    Returns:
        the group (``None`` stands for the default group: a world-sized
        request on the default group's backend with ``purpose="host"``
        needs no new group).
    """
    ranks = group_ranks(group)
    backend = (backend or group_backend(group)).lower()
    world = dist.get_world_size()
    if purpose == "host" and ranks == tuple(range(world)) and backend == group_backend(None):
        return None  # the default group itself
    mine = (ranks, backend, purpose)
    _current()
    if world == 1:
        if mine not in _MADE:
            _MADE[mine] = dist.new_group(ranks=list(ranks), backend=backend)
        return _MADE[mine]
    requests: list = [None] * world
    dist.all_gather_object(requests, mine, group=world_host_group())
    for key in sorted(set(requests)):
        if key not in _MADE:  # every rank made the same ones before: the same keys are missing everywhere
            r, b, _ = key
            _MADE[key] = dist.new_group(ranks=list(r), backend=b)
    return _MADE[mine]


def host_group(group: Optional[Any] = None) -> Optional[Any]:
    """The group host values of ``group`` are reduced over: ``group`` itself when
    its backend moves host tensors, else its gloo twin from :func:`helper_group`
    (a world collective in that case)."""
    if moves_host_tensors(group_backend(group)):
        return group
    return helper_group(group, backend="gloo", purpose="host")


def reset_helper_groups() -> None:
    """Forget the groups made so far (after ``destroy_process_group``: they died with it)."""
    _MADE.clear()
    _WORLD_HOST.clear()
    _DEFAULT.clear()
