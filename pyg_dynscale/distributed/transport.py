r"""How one rank's tensors reach the process group's collectives: directly, or staged through the host.

The runtime computes on the model's device; the collectives run on the
process group's backend. Two transports bridge them:

* :class:`DirectTransport` -- the tensors go to the collective as they are:
  CPU tensors over gloo, or CUDA tensors over NCCL with one GPU per rank
  (``cuda:LOCAL_RANK``). Nothing waits on the host: NCCL's collectives are
  ordered on the device's stream.
* :class:`StagedTransport` -- the device rows are copied into page-locked host
  buffers (non-blocking), moved over gloo on the host, and copied back
  (non-blocking). This is the exchange for several ranks sharing one GPU (a
  1-GPU workstation, tests, small jobs): NCCL refuses two ranks on one
  device. It moves the same rows, so results and byte counts are those of
  the direct transport; each collective waits once for its device-to-host
  copy.

:func:`resolve_transport` picks one from the device, the group's backend and
the user's ``backend=`` choice, and refuses set-ups that cannot work (a CUDA
model with ``backend="direct"`` over gloo, a CPU model over NCCL, another
device type).

Host values (report counters, the has-a-gradient flags of the gradient
all-reduce) are reduced on the host over a
gloo group -- the group itself, or, when the group's backend moves device
tensors only (NCCL), its gloo twin from :func:`~.groups.host_group`, made
collectively on every rank of the world at set-up and shared by every
trainer on the same ranks (:meth:`Transport.prepare`) -- so reading them never
waits on the device. Which backends are device-only is
:data:`~.groups.DEVICE_ONLY_BACKENDS`.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import ModelInputError
from ..training.ranks import device_backend_type, group_backend, host_group, moves_host_tensors

__all__ = ["Transport", "DirectTransport", "StagedTransport", "resolve_transport", "TRANSPORTS", "group_backend"]

#: the values of ``DistributedTrainer(backend=...)``
TRANSPORTS = ("auto", "direct", "staged")


def _moves_device(backend: str, device_type: str) -> bool:
    """Whether ``backend`` runs collectives on tensors of ``device_type``
    directly: host tensors over gloo, CUDA tensors over NCCL (a device-only
    backend moves its own device type: :data:`~.groups.DEVICE_ONLY_BACKENDS`)."""
    return (device_type == "cpu" and moves_host_tensors(backend)) or device_backend_type(backend) == device_type


class Transport:
    r"""Collectives of one rank over ``group`` for tensors on ``device``.

    Args:
        group: the process group (``None``: the world).
        device: the training device the tensors live on.
    """

    #: ``"direct"`` or ``"staged"``
    name = ""

    def __init__(self, group: Optional[Any], device: torch.device) -> None:
        self.group = group
        self.device = torch.device(device)
        self.backend = group_backend(group)
        #: the group host values go over (``None``: the default group, or not made yet for a device-only backend)
        self.host_group: Optional[Any] = group if moves_host_tensors(self.backend) else None

    def prepare(self) -> None:
        """Set the gloo group for host values when the group's backend moves
        device tensors only: :func:`~.groups.host_group`, a collective over the
        world the first time (every rank of the world calls it at the same
        point of set-up); later trainers on the same ranks reuse that group
        without communicating."""
        if self.host_group is None and not moves_host_tensors(self.backend):
            self.host_group = host_group(self.group)

    def all_reduce_host(self, x: Tensor, op: Any = dist.ReduceOp.SUM) -> Tensor:
        """The reduction over ranks of the host tensor ``x`` (a new tensor)."""
        self.prepare()
        out = x.detach().clone().contiguous()
        dist.all_reduce(out, op=op, group=self.host_group)
        return out

    def all_to_all(self, send: Tensor, send_splits: list[int], recv_splits: list[int]) -> Tensor:
        r"""``[sum(send_splits), W]`` rows grouped by destination rank ->
        ``[sum(recv_splits), W]`` rows grouped by source rank (on the device)."""
        raise NotImplementedError

    def all_reduce(self, x: Tensor, op: Any = dist.ReduceOp.SUM) -> Tensor:
        """The reduction of ``x`` over ranks, on ``x``'s device (``x`` is not
        modified); a host tensor of a CUDA run goes through :meth:`all_reduce_host`."""
        raise NotImplementedError

    def broadcast_(self, x: Tensor, src: int = 0) -> None:
        """Overwrite ``x`` (in place) with that of rank ``src`` *of the group*."""
        raise NotImplementedError

    def _src(self, group: Optional[Any], src: int) -> int:
        """The global rank of the group's rank ``src`` (``dist.broadcast`` takes
        global ranks: rank 0 of a subgroup of ranks ``[2, 3]`` is rank 2)."""
        return src if group is None else dist.get_global_rank(group, src)

    def describe(self) -> str:
        return f"{self.name} ({self.backend}, {self.device})"


class DirectTransport(Transport):
    """Tensors go to the collective on the device they live on (gloo: CPU,
    NCCL: CUDA)."""

    name = "direct"

    def all_to_all(self, send: Tensor, send_splits: list[int], recv_splits: list[int]) -> Tensor:
        out = send.new_empty((sum(recv_splits),) + tuple(send.shape[1:]))
        dist.all_to_all_single(out, send, recv_splits, send_splits, group=self.group)
        return out

    def all_reduce(self, x: Tensor, op: Any = dist.ReduceOp.SUM) -> Tensor:
        if x.device.type == "cpu" and self.device.type != "cpu":
            return self.all_reduce_host(x, op)
        out = x.detach().clone().contiguous()
        dist.all_reduce(out, op=op, group=self.group)
        return out

    def broadcast_(self, x: Tensor, src: int = 0) -> None:
        if x.device.type == "cpu" and self.device.type != "cpu":
            dist.broadcast(x, self._src(self.host_group, src), group=self.host_group)
        else:
            dist.broadcast(x, self._src(self.group, src), group=self.group)


class StagedTransport(Transport):
    """Device rows staged in page-locked host buffers and moved over gloo.

    On a CPU device the staging buffers are ordinary host tensors (pinning
    needs CUDA), so CI runs the same code path with host-to-host copies."""

    name = "staged"

    def __init__(self, group: Optional[Any], device: torch.device) -> None:
        super().__init__(group, device)
        self.pin = self.device.type == "cuda" and torch.cuda.is_available()

    def _to_host(self, x: Tensor) -> Tensor:
        host = torch.empty(x.shape, dtype=x.dtype, pin_memory=self.pin)
        host.copy_(x.detach(), non_blocking=self.pin)
        if self.pin:
            # gloo reads the buffer from the host: wait for this copy (and only for the work queued before it)
            torch.cuda.current_stream(x.device).synchronize()
        return host

    def _to_device(self, host: Tensor, like: Tensor) -> Tensor:
        # the caching host allocator keeps a pinned buffer alive until its non-blocking copy has run
        return host.to(like.device, non_blocking=self.pin)

    def all_to_all(self, send: Tensor, send_splits: list[int], recv_splits: list[int]) -> Tensor:
        host_send = self._to_host(send.contiguous())
        host_recv = torch.empty((sum(recv_splits),) + tuple(send.shape[1:]), dtype=send.dtype, pin_memory=self.pin)
        dist.all_to_all_single(host_recv, host_send, recv_splits, send_splits, group=self.group)
        return self._to_device(host_recv, send)

    def all_reduce(self, x: Tensor, op: Any = dist.ReduceOp.SUM) -> Tensor:
        if x.device.type == "cpu":
            return self.all_reduce_host(x, op)
        host = self._to_host(x.contiguous())
        dist.all_reduce(host, op=op, group=self.group)
        return self._to_device(host, x)

    def broadcast_(self, x: Tensor, src: int = 0) -> None:
        if x.device.type == "cpu":
            dist.broadcast(x, self._src(self.group, src), group=self.group)
            return
        host = self._to_host(x.contiguous())
        dist.broadcast(host, self._src(self.group, src), group=self.group)
        x.copy_(host)


def resolve_transport(choice: str, device: torch.device, group: Optional[Any] = None) -> Transport:
    r"""The transport for tensors on ``device`` over ``group``.

    ``choice``: ``"auto"`` -- direct when the backend moves tensors of the
    device (gloo: CPU, NCCL: CUDA), staged for a CUDA device over gloo
    (several ranks sharing a GPU); ``"direct"``; ``"staged"`` (needs a gloo
    group).

    Raises:
        ModelInputError: the choice is unknown, or the device and the backend
            cannot work together; the message names the fix.
    """
    if choice not in TRANSPORTS:
        raise ModelInputError("backend", f"is {choice!r}.", f"use one of {TRANSPORTS}.")
    device = torch.device(device)
    backend = group_backend(group)
    if device.type not in ("cpu", "cuda"):
        raise ModelInputError("device", f"is {device}; the distributed runtime trains on CPU or CUDA ranks.",
                              "move the model to 'cpu' or 'cuda:LOCAL_RANK'.")
    if choice == "staged":
        if not moves_host_tensors(backend):
            raise ModelInputError("backend", f"is 'staged' but the process group uses {backend}; the staged exchange "
                                  "moves host buffers over gloo.", "init the process group with backend='gloo'.")
        return StagedTransport(group, device)
    if _moves_device(backend, device.type):
        return DirectTransport(group, device)
    if device.type == "cpu":
        raise ModelInputError("device", f"is cpu but the process group uses {backend}, which moves "
                              f"{device_backend_type(backend) or 'device'} tensors only.",
                              "init the process group with backend='gloo' for CPU ranks, or move the "
                              "model to 'cuda:LOCAL_RANK'.")
    if choice == "direct":
        raise ModelInputError("backend", f"is 'direct' with a CUDA model but the process group uses {backend}, which "
                              "cannot all_to_all CUDA tensors.", "use backend='staged' (or 'auto', which picks it: "
                              "several ranks sharing a GPU), or init the group with backend='nccl' (one GPU per rank).")
    return StagedTransport(group, device)
