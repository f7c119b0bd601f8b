r"""A CPU stand-in for the NCCL rules the package must follow, for tests without a GPU.

``fake_nccl`` is a ``torch.distributed`` backend (``Backend.register_backend``)
whose collectives run over gloo on CPU tensors, but which the package treats
as NCCL: importing this module adds it to
:data:`pyg_dynscale.distributed.groups.DEVICE_ONLY_BACKENDS` with device type
``"cpu"`` -- its CPU tensors play device tensors -- so a group of this
backend takes the package's NCCL code paths: host values over a gloo twin
(:func:`~pyg_dynscale.distributed.groups.host_group`), helper groups made
collectively, the direct transport. ``spawn(fn, R, backend="fake_nccl")``
runs ``fn`` in a world of this backend (the module ``fn`` lives in must import
this one, so that the spawned rank registers the backend before
``init_process_group``).

**The rules it enforces** (a violation raises :class:`FakeNCCLError`, a
``DistBackendError`` as NCCL's own errors are, on every rank of the group):

1. *No object collective on a device-only group* (``all_gather_object``,
   ``broadcast_object_list``, ``gather_object``, ``scatter_object_list``).
   NCCL would run one on ``torch.cuda.current_device()`` -- ``cuda:0`` on a
   rank that has not bound its GPU -- and read the bytes back; the package's
   rule is to run them over gloo. (A rule of the package more than of NCCL,
   which accepts them on a bound rank; :data:`RULES` ``["objects"]`` turns it
   off for code this test does not own.)
2. *A device bound before the first collective, one per rank.* NCCL makes a
   group's communicator lazily, at its first collective, on the rank's
   current device. Here the first collective of each group on each rank
   publishes the rank's bound device through the group's store and reads
   the others': a rank that never bound one (torch's default current device
   is ``cuda:0``), or two ranks on one device, fail like NCCL's "Duplicate
   GPU detected". A device is bound by ``torch.cuda.set_device`` (replaced
   here by a recorder: no CUDA needed) or by the package's ``bind_device`` of
   a CPU device, which binds "this process's CPU" (a device of its own per
   process: the CPU plays the rank's GPU).
3. *Everything is recorded* per process (:data:`LOG`): the bindings, each
   group's first-collective device check and every collective with its
   group's global ranks, for tests to read.

**Not mimicked**: which device a tensor lives on (all are CPU tensors, so a
host tensor handed to a device-only group is not caught here -- the routing
of host values is checked by reading and by :data:`LOG`); streams and
asynchrony (collectives complete as gloo's do); eager initialization with
``init_process_group(device_id=...)`` and ``ncclCommSplit``; NCCL's ordering
rules across communicators; ``all_gather_into_tensor`` / ``reduce_scatter``
(not provided: they raise).
"""
from __future__ import annotations

import inspect
import json
import os
from datetime import timedelta
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from pyg_dynscale.training import ranks as groups

__all__ = ["NAME", "FakeNCCLError", "FakeNCCL", "RULES", "LOG", "bound_device"]

#: the backend's name (``init_process_group(NAME)``, ``new_group(backend=NAME)``)
NAME = "fake_nccl"
#: rules that can be turned off in a rank (``RULES["objects"] = False``)
RULES = {"objects": True, "devices": True}
#: this process's record: ``("bind", device)``, ``("devices", ranks, {rank: device})``,
#: ``(op, ranks)`` per collective, ``("refused", what, ranks)``
LOG: list[tuple] = []
#: the device this process bound (``None``: never bound; ``torch.cuda.current_device()`` would be 0)
_BOUND: list[Optional[str]] = [None]
_OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
_INSTALLED: list[bool] = []


class FakeNCCLError(dist.DistBackendError):
    """A collective NCCL would refuse (or the package must not issue) on a device-only group."""


def bound_device() -> Optional[str]:
    """The device this process bound last (``None``: none)."""
    return _BOUND[0]


def _record_cuda(device: Any) -> None:
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    _BOUND[0] = str(dev)
    LOG.append(("bind", _BOUND[0]))


def _record_cpu(device: torch.device) -> None:
    _BOUND[0] = f"the CPU of process {os.getpid()}"
    LOG.append(("bind", _BOUND[0]))


def _is_fake(group: Any) -> bool:
    return NAME in groups.backend_names(groups.group_backend(group))


def _guard(name: str) -> Callable:
    original = getattr(dist, name)
    signature = inspect.signature(original)

    def guarded(*args: Any, **kwargs: Any) -> Any:
        group = signature.bind(*args, **kwargs).arguments.get("group")
        if RULES["objects"] and _is_fake(group):
            ranks = groups.group_ranks(group)
            LOG.append(("refused", name, ranks))
            raise FakeNCCLError(f"{name} over the device-only group of ranks {list(ranks)} ({NAME}): NCCL would stage "
                                "the objects on torch.cuda.current_device() and read them back; run object "
                                "collectives over the group's gloo twin (groups.host_group)")
        return original(*args, **kwargs)

    guarded.__wrapped__ = original
    return guarded


def _install() -> None:
    """The per-process replacements, made when this process creates its first
    group of the backend: ``torch.cuda.set_device`` records, binding a CPU
    device records, object collectives on the backend's groups are refused."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    torch.cuda.set_device = _record_cuda
    groups.DEVICE_BINDERS["cpu"] = _record_cpu
    import torch.distributed.distributed_c10d as c10d

    for name in _OBJECT_COLLECTIVES:
        guarded = _guard(name)
        setattr(dist, name, guarded)
        setattr(c10d, name, guarded)


class FakeNCCL(dist.ProcessGroup):
    """One group of the backend: gloo underneath, NCCL's rules on top."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._store = store
        self._inner = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._checked = False

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return NAME

    def _ranks(self) -> tuple[int, ...]:
        return tuple(dist.get_process_group_ranks(self))

    def _collective(self, op: str) -> Any:
        """Check the devices at the group's first collective (its
        communicator's creation), then log ``op``; returns the gloo backend."""
        ranks = self._ranks()
        if not self._checked and RULES["devices"]:
            self._store.set(f"{NAME}/device/{self.rank()}", json.dumps(_BOUND[0]))
            seen = {ranks[r]: json.loads(self._store.get(f"{NAME}/device/{r}")) for r in range(self.size())}
            LOG.append(("devices", ranks, seen))
            unbound = [r for r, d in seen.items() if d is None]
            devices = {r: (d if d is not None else "cuda:0") for r, d in seen.items()}
            for a in sorted(devices):
                for b in sorted(devices):
                    if a < b and devices[a] == devices[b]:
                        why = (f" (rank(s) {unbound} never bound a device before their first collective: torch's "
                               "current device is cuda:0 until torch.cuda.set_device)") if unbound else ""
                        raise FakeNCCLError(f"Duplicate GPU detected : rank {a} and rank {b} both on device "
                                            f"{devices[a]} in the communicator of ranks {list(ranks)}{why}")
            if unbound:
                raise FakeNCCLError(f"rank(s) {unbound} of the communicator of ranks {list(ranks)} never bound a "
                                    "device before its first collective (NCCL would make it on cuda:0)")
        self._checked = True
        LOG.append((op, ranks))
        return self._inner

    # the collectives the package uses, delegated to gloo
    def allreduce(self, tensors: Any, opts: Any) -> Any:
        return self._collective("all_reduce").allreduce(tensors, opts)

    def broadcast(self, tensors: Any, opts: Any) -> Any:
        return self._collective("broadcast").broadcast(tensors, opts)

    def allgather(self, outputs: Any, inputs: Any, opts: Any) -> Any:
        return self._collective("all_gather").allgather(outputs, inputs, opts)

    def alltoall_base(self, output: Any, input: Any, output_splits: Any, input_splits: Any, opts: Any) -> Any:
        return self._collective("all_to_all").alltoall_base(output, input, output_splits, input_splits, opts)

    def barrier(self, opts: Any) -> Any:
        return self._collective("barrier").barrier(opts)


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> FakeNCCL:
    _install()
    return FakeNCCL(store, rank, size, timeout)


if NAME not in dist.Backend.backend_list:
    dist.Backend.register_backend(NAME, _create, devices=["cpu"])
groups.DEVICE_ONLY_BACKENDS[NAME] = "cpu"
