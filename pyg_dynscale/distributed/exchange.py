r"""Autograd-aware collectives with a sequencing token and byte counters.

Every collective of an epoch goes through one :class:`Communicator`:

* :meth:`Communicator.exchange` -- rows over ``all_to_all_single``; the
  backward sends one gradient row back for every forward row (the sender
  sums gradients of a row it sent to several ranks, through the
  ``index_select`` that gathered its send buffer).
* :meth:`Communicator.all_reduce` -- a sum over ranks whose backward sums the
  gradients (distributed BatchNorm statistics).

**Ordering.** Ranks must issue collectives in the same order, in the forward
*and* the backward pass; a rank with nothing to send still calls every one
(zero splits). In the forward pass the program order fixes it. In the
backward pass autograd runs a node once every consumer of its outputs has
produced a gradient, and independent branches may run in any order. So each
collective takes a 0-dim *token* and returns a new one, which the next
collective consumes, and the loss adds ``0 * token``: collective :math:`k`'s
backward then always runs after collective :math:`k+1`'s, on every rank, and
runs even where its received rows do not reach the loss.

The token is a 0-dim tensor on the training device: it orders the autograd
graph only, costs one tiny kernel per collective and never a host round
trip (on CUDA, NCCL's stream order serializes the collectives themselves).

Bytes are counted per ``(block, phase, kind, direction)`` from the buffer
handed to the collective: its rows per destination rank (the split sizes,
host integers checked against the buffer's shape) times its row size, rows
to the sender itself excluded (they do not cross the network). Nothing is
read back from the device to count them.

The collectives themselves go through a
:class:`~pyg_dynscale.distributed.transport.Transport`: directly (gloo on
CPU, NCCL on CUDA) or staged through host buffers (several ranks sharing a
GPU).
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from torch import Tensor

from .transport import DirectTransport, Transport

__all__ = ["Communicator", "Key"]

#: ``(block, phase, kind)`` of a counted collective
Key = tuple[int, str, str]


class _RowExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, comm: "Communicator", key: Key, send: Tensor, send_splits: list[int],  # type: ignore[override]
                recv_splits: list[int], token: Tensor) -> tuple[Tensor, Tensor]:
        ctx.comm, ctx.key, ctx.send_splits, ctx.recv_splits = comm, key, send_splits, recv_splits
        ctx.send_shape = send.shape
        out = comm.raw_exchange(send, send_splits, recv_splits, key, "fwd")
        return out, token.clone()

    @staticmethod
    def backward(ctx: Any, grad: Optional[Tensor], grad_token: Optional[Tensor]) -> tuple:  # type: ignore[override]
        comm = ctx.comm
        back = comm.raw_exchange(grad.contiguous(), ctx.recv_splits, ctx.send_splits, ctx.key, "bwd")
        return None, None, back.view(ctx.send_shape), None, None, grad_token


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, comm: "Communicator", key: Key, x: Tensor, token: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        ctx.comm, ctx.key = comm, key
        return comm.raw_all_reduce(x, key, "fwd"), token.clone()

    @staticmethod
    def backward(ctx: Any, grad: Optional[Tensor], grad_token: Optional[Tensor]) -> tuple:  # type: ignore[override]
        return None, None, ctx.comm.raw_all_reduce(grad, ctx.key, "bwd"), grad_token


class Communicator:
    r"""Collectives of one rank inside a process group, sequenced by a token
    and counted.

    Args:
        group: the process group (default: the world).
        device: where tokens live (the training device).
        dtype: token dtype.
        transport: how tensors reach the collectives (default: directly).
    """

    def __init__(self, group: Optional[Any] = None, device: Optional[torch.device] = None,
                 dtype: torch.dtype = torch.float32, transport: Optional[Transport] = None) -> None:
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.dtype = dtype
        self.transport = transport if transport is not None else DirectTransport(group, self.device)
        self.token: Optional[Tensor] = None
        #: ``(block, phase, kind, direction) -> bytes`` sent by this rank
        self.bytes: dict[tuple, int] = defaultdict(int)
        #: ``(block, phase, kind, direction) -> rows`` sent by this rank
        self.rows: dict[tuple, int] = defaultdict(int)
        #: number of collectives issued
        self.calls = 0
        #: wall seconds spent inside collectives (including waiting for slower ranks)
        self.seconds = 0.0

    # ------------------------------------------------------------- epochs
    def start(self, requires_grad: bool) -> None:
        """Start a new sequence of collectives (one forward pass)."""
        self.token = torch.zeros((), dtype=self.dtype, device=self.device, requires_grad=requires_grad)

    def seal(self, loss: Tensor) -> Tensor:
        """``loss + 0 * token``: connects every collective of the pass to the
        loss, so that each one's backward runs, in reverse order."""
        if self.token is None or not self.token.requires_grad:
            return loss
        return loss + 0.0 * self.token.to(loss.dtype)

    @contextmanager
    def counters_kept(self) -> Iterator[None]:
        """Run collectives that are not training traffic (an evaluation pass)
        without counting them: the counters are restored afterwards, so
        :meth:`DistributedTrainer.traffic` stays the last epoch's."""
        saved = (dict(self.bytes), dict(self.rows), self.calls, self.seconds)
        try:
            yield
        finally:
            self.bytes.clear()
            self.bytes.update(saved[0])
            self.rows.clear()
            self.rows.update(saved[1])
            self.calls, self.seconds = saved[2], saved[3]

    def reset_counters(self) -> None:
        self.bytes.clear()
        self.rows.clear()
        self.seconds = 0.0
        self.calls = 0

    # ---------------------------------------------------------- collectives
    def exchange(self, key: Key, send: Tensor, send_splits: list[int], recv_splits: list[int]) -> Tensor:
        """Send ``send`` rows (``[sum(send_splits), ...]``, grouped by
        destination rank) and return the received rows
        (``[sum(recv_splits), ...]``, grouped by source rank)."""
        if self.token is None:
            self.start(torch.is_grad_enabled() and send.requires_grad)
        out, self.token = _RowExchange.apply(self, key, send.contiguous(), list(send_splits), list(recv_splits), self.token)
        return out

    def all_reduce(self, key: Key, x: Tensor) -> Tensor:
        """Sum of ``x`` over ranks (backward: sum of the gradients)."""
        if self.token is None:
            self.start(torch.is_grad_enabled() and x.requires_grad)
        out, self.token = _AllReduce.apply(self, key, x, self.token)
        return out

    # ---------------------------------------------------------------- raw
    def raw_exchange(self, send: Tensor, send_splits: list[int], recv_splits: list[int], key: Key, direction: str) -> Tensor:
        row_shape = send.shape[1:]
        width = 1
        for n in row_shape:
            width *= int(n)
        flat = send.reshape(send.shape[0], width)
        if flat.shape[0] != sum(send_splits):
            raise RuntimeError(f"exchange {key}: a send buffer of {flat.shape[0]} rows for splits {send_splits}")
        t0 = time.perf_counter()
        out = self.transport.all_to_all(flat, send_splits, recv_splits)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        self.count(key + (direction,), flat, send_splits)
        return out.view((out.shape[0],) + tuple(row_shape))

    def count(self, key: tuple, buffer: Tensor, send_splits: list[int]) -> None:
        """Count the rows of ``buffer`` (``[sum(send_splits), W]``, grouped by
        destination) that leave this rank."""
        sent = sum(n for r, n in enumerate(send_splits) if r != self.rank)
        row_bytes = (buffer.numel() // max(buffer.shape[0], 1)) * buffer.element_size() if buffer.dim() else 0
        self.rows[key] += sent
        self.bytes[key] += sent * row_bytes

    def raw_all_reduce(self, x: Tensor, key: Key, direction: str, op: Any = dist.ReduceOp.SUM) -> Tensor:
        if self.world_size > 1:
            t0 = time.perf_counter()
            out = self.transport.all_reduce(x.detach(), op=op)
            self.seconds += time.perf_counter() - t0
        else:
            out = x.detach().clone()
        self.calls += 1
        self.bytes[key + (direction,)] += out.numel() * out.element_size() if self.world_size > 1 else 0
        return out
