r"""The process-group side of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: one
trainer of DistTGL's :math:`i \times j \times k` schedule per process.

* **Gradients**: ``DistributedDataParallel`` around the user's modules
  (:class:`ShareModule`, whose forward is the rank's share of the step loss),
  with :func:`sum_hook`: each share is already weighted as the single-process
  emulation weights it, so the step gradient is the *sum* of the ranks'
  gradients (DDP's default hook would average).
* **Memory write-back**: the :math:`i \cdot j` ranks of one memory copy each
  hold a replica of it; the trainers that write in a step all-gather their
  root nodes' rows (:func:`gather_rows`, inside the copy's process group) and
  every rank of the copy writes them in trainer order (chronological: the
  local batches are chronological). The all-gather is also the barrier before
  write-back: no rank writes before every rank has read.
* **Layout**: :func:`~pyg_dynscale.ctdg.schedule.check_layout` against the
  world size and torchrun's ``LOCAL_WORLD_SIZE``.
"""
from __future__ import annotations

import os
import warnings
import weakref
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .schedule import check_layout

__all__ = ["ShareModule", "Traffic", "gather_rows", "local_world_size", "memory_groups", "sum_hook", "world", "wrap_ddp"]


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group (``(0, 1)`` without one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


def local_world_size(world_size: int) -> int:
    """torchrun's ``LOCAL_WORLD_SIZE`` (processes on this machine); ``world_size`` without it."""
    value = os.environ.get("LOCAL_WORLD_SIZE")
    return int(value) if value else world_size


@dataclass
class Traffic:
    """Bytes this rank moved, by kind.

    Attributes:
        memory_read: memory + ``last_update`` rows read for its local batches.
        memory_write: memory + ``last_update`` rows written into its replica.
        gather: rows this rank contributed to the write-back all-gathers.
        gradients: ``DistributedDataParallel``'s gradient all-reduces (buffer bytes once per step).
        setup: DDP's broadcast of rank 0's parameters.
    """

    memory_read: int = 0
    memory_write: int = 0
    gather: int = 0
    gradients: int = 0
    setup: int = 0

    def as_dict(self) -> dict:
        return {"memory_read": self.memory_read, "memory_write": self.memory_write, "gather": self.gather,
                "gradients": self.gradients, "setup": self.setup}


def sum_hook(traffic, bucket):  # no annotations: DDP accepts only its own types there
    """A ``DistributedDataParallel`` comm hook: all-reduce (sum) the bucket and count its bytes."""
    import torch.distributed as dist

    buf = bucket.buffer()
    traffic.gradients += buf.numel() * buf.element_size()
    fut = dist.all_reduce(buf, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


class ShareModule(torch.nn.Module):
    """The user's modules as one module whose forward is the rank's share of a
    step's loss (``trainer._share``): what ``DistributedDataParallel`` wraps."""

    def __init__(self, trainer) -> None:
        super().__init__()
        self.memory, self.gnn, self.link_pred, self.static = trainer.memory, trainer.gnn, trainer.link_pred, trainer.static
        # weak: no trainer <-> DDP cycle (the reducer goes with its trainer, before the process group)
        self._share = weakref.WeakMethod(trainer._share)

    def forward(self, lb) -> Tensor:
        return self._share()(lb)


def wrap_ddp(trainer, traffic: Traffic):
    """``DistributedDataParallel`` around :class:`ShareModule` (rank 0's parameters broadcast)."""
    from torch.nn.parallel import DistributedDataParallel

    traffic.setup += sum(p.numel() * p.element_size() for p in trainer.optimizer_params if p.requires_grad)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
        # buffers stay rank-local: the memory is the schedule's business, not DDP's
        ddp = DistributedDataParallel(ShareModule(trainer), broadcast_buffers=False)
    ddp.register_comm_hook(traffic, sum_hook)
    return ddp


def memory_groups(parallelism, world_size: int) -> tuple[tuple[int, int, int], list]:
    """Check the layout and build one process group per memory copy (every rank
    calls ``new_group`` for every copy, in the same order). Returns
    ``((i, j, k), groups)``; a copy of one rank gets ``None`` (nothing to gather)."""
    import torch.distributed as dist

    i, j, k = check_layout(parallelism, world_size, local_world_size(world_size))
    size = i * j
    groups = []
    for kk in range(k):
        ranks = list(range(kk * size, (kk + 1) * size))
        g = dist.new_group(ranks) if size > 1 else None
        groups.append(g)
    return (i, j, k), groups


def gather_rows(group, size: int, n_id: Optional[Tensor], rows: Optional[Tensor], last: Optional[Tensor],
                width: int, traffic: Traffic, like: Tensor) -> list:
    """All-gather ``(n_id [m], rows [m, d], last_update [m])`` of the ``size``
    ranks of ``group`` (``None``: this rank writes nothing). Returns the list in
    group-rank order (entries with ``m = 0`` for ranks that write nothing)."""
    import torch.distributed as dist

    dev = like.device
    if n_id is None:
        n_id = torch.zeros(0, dtype=torch.long, device=dev)
        rows = torch.zeros(0, width, dtype=like.dtype, device=dev)
        last = torch.zeros(0, dtype=torch.long, device=dev)
    if group is None:
        return [(n_id, rows, last)]
    count = torch.tensor([n_id.numel()], dtype=torch.long, device=dev)
    counts = [torch.zeros_like(count) for _ in range(size)]
    dist.all_gather(counts, count, group=group)
    m = int(max(int(c) for c in counts))
    mine = n_id.numel()
    packed = torch.zeros(m, width, dtype=like.dtype, device=dev)
    packed[:mine] = rows
    ids = torch.zeros(m, 2, dtype=torch.long, device=dev)  # [n_id, last_update]: integers kept exact
    ids[:mine, 0] = n_id
    ids[:mine, 1] = last.long()
    traffic.gather += packed.numel() * packed.element_size() + ids.numel() * ids.element_size()
    out = [torch.empty_like(packed) for _ in range(size)]
    out_ids = [torch.empty_like(ids) for _ in range(size)]
    dist.all_gather(out, packed, group=group)
    dist.all_gather(out_ids, ids, group=group)
    res = []
    for c, p, q in zip(counts, out, out_ids):
        c = int(c)
        res.append((q[:c, 0], p[:c], q[:c, 1]))
    return res
