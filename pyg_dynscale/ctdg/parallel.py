r"""The process-group side of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: one
trainer of DistTGL's :math:`i \times j \times k` schedule per process.

* **Gradients**: ``DistributedDataParallel`` around the user's modules with
  the summing hook of :mod:`pyg_dynscale.training.gradients` (each share is
  already weighted as the single-process emulation weights it, so the step
  gradient is the *sum* of the ranks' gradients), or its
  :class:`~pyg_dynscale.training.gradients.DelayedGradients`
  (``gradient_sync="delayed"``, Sven §7.4: not exact w.r.t. synchronous
  training).
* **Memory write-back**: the :math:`i \cdot j` ranks of one memory copy each
  hold a replica of it; the trainers that write in a step all-gather their
  root nodes' rows (:func:`gather_rows`, inside the copy's process group) and
  every rank of the copy writes them in trainer order (chronological: the
  local batches are chronological). The all-gather is also the barrier before
  write-back: no rank writes before every rank has read. Its bytes are
  counted into a :class:`~pyg_dynscale.training.ByteLedger` at each
  ``all_gather``.
* **Layout**: :func:`~pyg_dynscale.ctdg.schedule.check_layout` against the
  world size and torchrun's ``LOCAL_WORLD_SIZE``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..distributed.transport import resolve_transport
from ..training.ranks import group_backend, helper_group, host_group, moves_host_tensors
from ..training.traffic import ByteLedger
from .memory_placement import Channel, pack_rows, unpack_rows
from .schedule import check_layout

__all__ = ["RankGroups", "gather_rows", "local_world_size", "memory_groups", "world"]


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
                width: int, ledger: ByteLedger, like: Tensor, host_group=None) -> list:
    """All-gather ``(n_id [m] on the host, rows [m, d], last_update [m] on the device)`` of the
    ``size`` ranks of ``group`` (``None``: this rank writes nothing). Returns the list in
    group-rank order (entries with ``m = 0`` for ranks that write nothing).

    The counts and the ids are host values: they go over ``host_group`` (``group`` itself
    under gloo, its gloo twin under NCCL), so the padded size is known on the host without a
    read-back; the rows and times go over ``group`` as one packed device buffer
    (``d s + 8`` bytes per row, the ids ``8``: the bytes of the former ``[m, d]`` + ``[m, 2]``
    buffers, counted as ``gather``)."""
    import torch.distributed as dist

    dev = like.device
    if n_id is None:
        n_id = torch.zeros(0, dtype=torch.long)
        rows = torch.zeros(0, width, dtype=like.dtype, device=dev)
        last = torch.zeros(0, dtype=torch.long, device=dev)
    if group is None:
        return [(n_id, rows, last)]
    host = group if host_group is None else host_group
    counts = [torch.zeros(1, dtype=torch.long) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([n_id.numel()], dtype=torch.long), group=host)
    counts = [int(c) for c in counts]
    m = max(counts)
    mine = n_id.numel()
    ids = torch.zeros(m, dtype=torch.long)
    ids[:mine] = n_id
    packed = pack_rows(rows, last.long())
    padded = packed.new_zeros(m, packed.size(1))
    padded[:mine] = packed
    out = [torch.empty_like(padded) for _ in range(size)]
    out_ids = [torch.empty_like(ids) for _ in range(size)]
    dist.all_gather(out_ids, ids, group=host)
    ledger.add_tensor("gather", ids)  # what this rank handed to each all_gather
    dist.all_gather(out, padded, group=group)
    ledger.add_tensor("gather", padded)
    res = []
    for c, p, q in zip(counts, out, out_ids):
        r, t = unpack_rows(p[:c], like.dtype, width)
        res.append((q[:c], r, t))
    return res


@dataclass(frozen=True)
class RankGroups:
    """The process groups of one rank of the schedule (made by :meth:`connect`).

    Attributes:
        copies (list): one group per memory copy (``None``: a copy of one rank, nothing to gather).
        host: the group host values go over (a partitioned memory's ids and counts, the traffic
            report, evaluation's result): the default group under gloo, its gloo twin under NCCL.
        copy_host: the host twin of this rank's memory-copy group (its write-back's ids and counts).
        aggregation (Channel or None): ``overlap_aggregation``'s own groups (the rows on the default
            group's backend, the ids on gloo), so that it runs on a thread next to this one's collectives.
    """

    copies: list
    host: Any
    copy_host: Any
    aggregation: Optional[Channel]

    @classmethod
    def connect(cls, parallelism: tuple, rank: int, world_size: int, device, overlap_aggregation: bool) -> "RankGroups":
        """Every rank, in the same order (each group made is a world collective)."""
        i, j, _ = parallelism
        _, copies = memory_groups(parallelism, world_size)
        host = host_group(None)
        copy_group = copies[rank // (i * j)]  # each rank asks for its own copy's twin
        copy_host = None if copy_group is None else host_group(copy_group)
        aggregation = None
        if overlap_aggregation:
            rows = helper_group(None, purpose="aggregation")  # the default group's backend (NCCL on GPUs)
            ids = rows if moves_host_tensors(group_backend(rows)) else helper_group(
                None, backend="gloo", purpose="aggregation")
            aggregation = Channel(ids, resolve_transport("auto", device, rows))
        return cls(copies, host, copy_host, aggregation)
