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
gloo group -- the group itself, or one gloo group created once at set-up
when the group's backend is NCCL (:meth:`Transport.prepare`) -- so reading
them never waits on the device.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["Transport", "DirectTransport", "StagedTransport", "resolve_transport", "TRANSPORTS", "group_backend"]

#: the values of ``DistributedTrainer(backend=...)``
TRANSPORTS = ("auto", "direct", "staged")


def group_backend(group: Optional[Any] = None) -> str:
    """The backend name of ``group`` (``"gloo"``, ``"nccl"``, or a
    ``"cpu:gloo,cuda:nccl"``-style mapping), lower case."""
    return str(dist.get_backend(group)).lower()


def _moves_cuda(backend: str) -> bool:
    return "nccl" in backend


def _moves_cpu(backend: str) -> bool:
    return "gloo" in backend or "mpi" in backend


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
        self.host_group: Optional[Any] = group if _moves_cpu(self.backend) else None

    def prepare(self) -> None:
        """Create the gloo group for host values when the group's backend
        moves device tensors only (a collective: every rank of the world
        calls it at the same point of set-up)."""
        if self.host_group is None and not _moves_cpu(self.backend):
            ranks = dist.get_process_group_ranks(self.group) if self.group is not None else None
            self.host_group = dist.new_group(ranks=ranks, backend="gloo")

    def all_reduce_host(self, x: Tensor, op: Any = dist.ReduceOp.SUM) -> Tensor:
        """The reduction over ranks of the host tensor ``x`` (a new tensor)."""
        if self.host_group is None:
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
        """Overwrite ``x`` (in place) with rank ``src``'s."""
        raise NotImplementedError

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
            dist.broadcast(x, src, group=self.host_group)
        else:
            dist.broadcast(x, src, group=self.group)


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
            dist.broadcast(x, src, group=self.group)
            return
        host = self._to_host(x.contiguous())
        dist.broadcast(host, src, group=self.group)
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
        if not _moves_cpu(backend):
            raise ModelInputError("backend", f"is 'staged' but the process group uses {backend}; the staged exchange "
                                  "moves host buffers over gloo.", "init the process group with backend='gloo'.")
        return StagedTransport(group, device)
    if device.type == "cpu":
        if not _moves_cpu(backend):
            raise ModelInputError("device", f"is cpu but the process group uses {backend}, which moves CUDA tensors "
                                  "only.", "init the process group with backend='gloo' for CPU ranks, or move the "
                                  "model to 'cuda:LOCAL_RANK'.")
        return DirectTransport(group, device)
    if _moves_cuda(backend):
        return DirectTransport(group, device)
    if choice == "direct":
        raise ModelInputError("backend", f"is 'direct' with a CUDA model but the process group uses {backend}, which "
                              "cannot all_to_all CUDA tensors.", "use backend='staged' (or 'auto', which picks it: "
                              "several ranks sharing a GPU), or init the group with backend='nccl' (one GPU per rank).")
    return StagedTransport(group, device)
