r"""Ranks, groups and devices, shared by every trainer family: the process
groups a trainer needs besides the user's, created the way torch requires; the
device a rank trains on and binds; the set-up agreement (the same error on
every rank, :func:`agree`); and host reductions (:func:`slowest_rank_seconds`).

**Groups.** ``torch.distributed.new_group`` must be entered by **every rank of
the default group, in the same order**, members or not: groups are named by a
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
backend, purpose)`` and reused: a later call that finds its group made
returns it without any communication (a later-window evaluator on one
subgroup, a second trainer), so only the calls that create groups are world
collectives. Every rank holds the same made groups (each was made on every
rank), so "made before" is the same answer everywhere for the same request.

**Host values.** A device-only backend (:data:`DEVICE_ONLY_BACKENDS`: NCCL)
moves device tensors only; host values (counters, flags, the set-up
agreement's objects) go over a gloo group of the same ranks,
:func:`host_group`. Object collectives (``all_gather_object``) over NCCL would
stage their bytes on ``torch.cuda.current_device()`` and read them back: the
package runs them over :func:`host_group` only.

**Binding.** :func:`bind_device` makes the training GPU this process's current
device before the first NCCL collective: NCCL uses the current device for
the communicators it creates lazily (and the object collectives for their
staging), so an unbound rank ``r > 0`` would act on ``cuda:0`` -- two ranks on
one GPU, which NCCL refuses ("Duplicate GPU detected").

After ``destroy_process_group`` the groups made here die with it; a new
default group (a later ``init_process_group``) starts a new set (the default
group's identity is checked on every call).

**The set-up agreement.** A distributed set-up fails cleanly only if every
rank fails: a rank that raises while the others enter a collective leaves them
waiting until the timeout. :func:`agree` is the one ``all_gather`` of a
trainer's set-up: it carries each rank's local error (then every rank raises:
its own error, or "failed on rank r") and a summary of what the rank was given
(then every rank raises if the summaries differ). The agreement and
:func:`check_one_gpu_per_rank` are object collectives: they run over the
group's host (gloo) twin (:func:`host_group`), never over NCCL -- an object
collective over NCCL stages its bytes on ``torch.cuda.current_device()``
(``cuda:0`` on a rank that has not bound its GPU yet: two ranks on one GPU,
which NCCL refuses with its own error instead of ours) and reads them back.
:func:`bind` makes the training GPU current before the first NCCL collective.
"""
from __future__ import annotations

import os
import socket
from typing import Any, Callable, Optional, Sequence, Union

import torch
import torch.distributed as dist

from ..errors import DynScaleError, ModelInputError

__all__ = ["DEVICE_ONLY_BACKENDS", "DEVICE_BINDERS", "bind_device", "local_cuda_device", "group_backend",
           "backend_names", "moves_host_tensors", "device_backend_type", "group_ranks", "helper_group", "host_group",
           "world_host_group", "reset_helper_groups", "resolve_device", "bind", "agree", "check_one_gpu_per_rank",
           "check_gpu_sharing", "host_all_reduce", "host_all_gather_object", "slowest_rank_seconds"]

#: backends that move tensors of one device type only -> that device type. Such a group gets a gloo twin for
#: host values (:func:`host_group`) and never carries an object collective. A third-party device-only
#: backend adds its name here (the tests' CPU stand-in for NCCL, ``tests/helpers/fake_nccl.py``, adds ``"fake_nccl"``).
DEVICE_ONLY_BACKENDS: dict[str, str] = {"nccl": "cuda"}


def _set_cuda_device(device: torch.device) -> None:
    torch.cuda.set_device(device)  # looked up at the call: tests replace torch.cuda.set_device


#: device type -> the function that makes a device of that type this process's current one (device types
#: without an entry have nothing to bind: the CPU)
DEVICE_BINDERS: dict[str, Callable[[torch.device], None]] = {"cuda": _set_cuda_device}

#: ``(ranks, backend, purpose) -> group``: the groups :func:`helper_group` made in this process
_MADE: dict[tuple, Any] = {}
#: the host (gloo) group of the whole world the requests travel on (empty: not made yet)
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
    """Make ``device`` this process's current device (``torch.cuda.set_device``
    for a CUDA device; a no-op for the CPU). Returns the bound device (the
    ``device_id`` for ``init_process_group``), ``None`` when nothing was bound.
    ``"cuda"`` without an index binds :func:`local_cuda_device`.

    Call it before the first collective of an NCCL group (every trainer and
    command of the package does, before its set-up collectives)."""
    if device is None:
        return None
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = local_cuda_device()
    binder = DEVICE_BINDERS.get(dev.type)
    if binder is None:
        return None
    binder(dev)
    return dev


def group_backend(group: Optional[Any] = None) -> str:
    """The backend name of ``group`` (``"gloo"``, ``"nccl"``, or a
    ``"cpu:gloo,cuda:nccl"``-style mapping), lower case."""
    return str(dist.get_backend(group)).lower()


def backend_names(backend: str) -> tuple[str, ...]:
    """The backends named in ``backend``: ``"nccl"`` -> ``("nccl",)``,
    ``"cpu:gloo,cuda:nccl"`` -> ``("gloo", "nccl")``."""
    return tuple(part.split(":")[-1].strip() for part in str(backend).lower().split(",") if part.strip())


def moves_host_tensors(backend: str) -> bool:
    """Whether a group of ``backend`` runs collectives on host (CPU) tensors:
    every backend but a device-only one (:data:`DEVICE_ONLY_BACKENDS`); a
    mapping such as ``"cpu:gloo,cuda:nccl"`` does (through gloo)."""
    return any(name not in DEVICE_ONLY_BACKENDS for name in backend_names(backend))


def device_backend_type(backend: str) -> Optional[str]:
    """The device type whose tensors a device-only part of ``backend`` moves
    (``"cuda"`` for NCCL), ``None`` when it has no device-only part."""
    for name in backend_names(backend):
        if name in DEVICE_ONLY_BACKENDS:
            return DEVICE_ONLY_BACKENDS[name]
    return None


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

    A call whose group was made before returns it at once, without
    communication. A call that makes one is a collective over the **world**:
    every rank of the default group calls it at the same point, each with its
    own ``group`` (ranks of different subgroups ask for different groups). One
    ``all_gather_object`` over :func:`world_host_group` collects the
    requests; then every rank enters ``new_group`` for each requested group
    not made before, in sorted order. (Every rank holds the same made groups,
    so a request is new on one rank exactly when it is new on all: the ranks
    of a trainer's group agree on whether to communicate; the ranks of
    *different* subgroups must all be at this point when any of them asks for
    a new group, as with any ``new_group``.)

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
        needs no new group; a world-sized gloo request for ``"host"`` is
        :func:`world_host_group`).
    """
    ranks = group_ranks(group)
    backend = (backend or group_backend(group)).lower()
    world = dist.get_world_size()
    everyone = ranks == tuple(range(world))
    if purpose == "host" and everyone and backend == group_backend(None):
        return None  # the default group itself
    if purpose == "host" and everyone and backend == "gloo":
        return world_host_group()
    mine = (ranks, backend, purpose)
    _current()
    if mine in _MADE:
        return _MADE[mine]
    if world == 1:
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
    (a world collective the first time, see there)."""
    if moves_host_tensors(group_backend(group)):
        return group
    return helper_group(group, backend="gloo", purpose="host")


def reset_helper_groups() -> None:
    """Forget the groups made so far (after ``destroy_process_group``: they died with it)."""
    _MADE.clear()
    _WORLD_HOST.clear()
    _DEFAULT.clear()


# ---- the set-up every trainer makes: its device, and the same error on every rank -------------------

def resolve_device(modules: Sequence[Optional[torch.nn.Module]], device: Union[str, torch.device, None],
                   group: Optional[Any] = None) -> tuple[torch.device, torch.dtype]:
    """The training device (default: the parameters') and dtype; the modules
    must already be there, and a CUDA device must exist."""
    params = [p for m in modules if m is not None for p in m.parameters()]
    devs = {p.device for p in params}
    if len(devs) > 1:
        raise ModelInputError("model", f"has parameters on several devices {sorted(map(str, devs))}.",
                              "move the model and the head to one device.")
    dev = torch.device(device) if device is not None else (next(iter(devs)) if devs else torch.device("cpu"))
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelInputError("device", f"is {dev} but torch.cuda.is_available() is False (no GPU, or a "
                                  f"CPU-only torch build); this process group uses {dist.get_backend(group)}.",
                                  "train on the CPU (device='cpu') or on a machine with a GPU.")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    if devs and next(iter(devs)) != dev:
        raise ModelInputError("model", f"is on {next(iter(devs))} but training runs on {dev}.",
                              f"call model.to({str(dev)!r}) (and the head) first.")
    return dev, (params[0].dtype if params else torch.float32)


def bind(device: torch.device) -> None:
    """Make the training device this process's current device
    (:func:`bind_device`: ``torch.cuda.set_device`` for a GPU) before
    any NCCL collective; a device that cannot be bound is a
    :class:`ModelInputError` (raised before the set-up agreement, which
    carries it to the other ranks)."""
    try:
        bind_device(device)
    except (RuntimeError, ValueError, AssertionError) as exc:  # torch's errors for a device it cannot select
        raise ModelInputError("device", f"is {device}, which this process cannot make its current device "
                              f"({type(exc).__name__}: {exc}).",
                              "give each rank an existing GPU, cuda:LOCAL_RANK (see torch.cuda.device_count()).") \
            from exc


def agree(error: Optional[DynScaleError], summary: Optional[dict], group: Optional[Any] = None) -> None:
    """One ``all_gather`` over ``group``'s host group (:func:`host_group`:
    a world collective when it makes the gloo twin of an NCCL group): raise on
    every rank if any rank's set-up failed (``error``: this rank's; then
    ``summary`` is ``None``) or if the ranks' summaries (``{name: comparable
    value}``, or ``None`` to agree on errors only) differ."""
    mine = {"error": None if error is None else f"{type(error).__name__}: {error}", "summary": summary}
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=host_group(group))
    if error is not None:
        raise error
    failed = [(r, e["error"]) for r, e in enumerate(everyone) if e["error"] is not None]
    if failed:
        r, msg = failed[0]
        raise ModelInputError("set-up", f"failed on rank {r}: {msg}", "fix that rank's arguments; every rank stops.")
    for key in summary or {}:
        vals = [e["summary"][key] for e in everyone]
        if len(set(vals)) > 1:
            bad = [r for r, v in enumerate(vals) if v != vals[0]]
            fix = ("put every rank's model on the same kind of device ('cuda:LOCAL_RANK' everywhere, or 'cpu')"
                   if key in ("device_type", "transport") else
                   "pass the same data, model and options (partition, loss, dtype, ...) on every rank.")
            raise ModelInputError(key, f"differs between ranks (ranks {bad} disagree with rank 0: "
                                  f"{vals[bad[0]]!r} vs {vals[0]!r}).", fix)


def check_one_gpu_per_rank(device: torch.device, group: Optional[Any] = None) -> None:
    """NCCL refuses two ranks on one GPU: name the shared GPU on every rank
    (an ``all_gather`` over ``group``'s host group, before any NCCL
    collective: NCCL's own error would come first otherwise)."""
    gpus: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(gpus, f"{socket.gethostname()}:{device}", group=host_group(group))
    if len(set(gpus)) < len(gpus):
        shared = sorted({g for g in gpus if gpus.count(g) > 1})
        raise ModelInputError("device", f"{shared[0]} is used by ranks "
                              f"{[r for r, g in enumerate(gpus) if g == shared[0]]}; NCCL needs one GPU per rank.",
                              "give each rank cuda:LOCAL_RANK, or share the GPU through a gloo group "
                              "(backend='staged', chosen automatically over gloo).")


def check_gpu_sharing(device: torch.device, group: Optional[Any] = None) -> None:
    """:func:`check_one_gpu_per_rank` where it matters: a GPU device on a
    backend that runs its collectives on that GPU (NCCL). Every trainer calls it
    after binding the device and before its first device collective, so two
    ranks on one GPU get this message on every rank, not NCCL's own error from
    inside the first collective. (Over gloo several ranks may share a GPU: the
    staged exchange.)"""
    if device.type != "cpu" and device_backend_type(group_backend(group)) == device.type:
        check_one_gpu_per_rank(device, group)


# ---- host reductions: host values over the host (gloo) group, on every backend -------------------

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def _world_size(group: Optional[Any]) -> int:
    """Ranks of ``group``; 1 without a process group (a plain run: nothing to reduce)."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def host_all_reduce(x: torch.Tensor, op: Union[str, Any] = "sum", group: Optional[Any] = None) -> torch.Tensor:
    r"""The reduction of the host tensor ``x`` over the ranks of ``group``
    (``op``: ``"sum"``, ``"max"``, ``"min"`` or a ``ReduceOp``), a new tensor;
    over :func:`host_group` (gloo on every backend: a host value never goes
    through NCCL). Without a process group (or on one rank) a copy of ``x``."""
    out = x.detach().clone().contiguous()
    if _world_size(group) > 1:
        dist.all_reduce(out, op=_OPS.get(op, op) if isinstance(op, str) else op, group=host_group(group))
    return out


def host_all_gather_object(obj: Any, group: Optional[Any] = None) -> list:
    """Every rank's ``obj`` (picklable), in rank order of ``group``; over
    :func:`host_group` (an object collective never runs over NCCL). ``[obj]``
    without a process group."""
    world = _world_size(group)
    if world == 1:
        return [obj]
    everyone: list = [None] * world
    dist.all_gather_object(everyone, obj, group=host_group(group))
    return everyone


def slowest_rank_seconds(seconds: float, group: Optional[Any] = None) -> float:
    r"""The largest of the ranks' ``seconds`` (a collective of ``group`` when it
    has more than one rank): an epoch lasts until its slowest rank is done, so
    every rank reports this one figure. A host value, reduced in ``float64``
    over :func:`host_group` on every backend (NCCL included)."""
    if _world_size(group) <= 1:
        return float(seconds)
    took = host_all_reduce(torch.tensor([float(seconds)], dtype=torch.float64), "max", group)
    return float(took)
