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
* **Delayed gradients** (``gradient_sync="delayed"``, Sven §7.4):
  :class:`DelayedGradients` and its hook :func:`delayed_hook` apply the
  previous step's summed gradient while this step's all-reduce runs (not
  exact w.r.t. synchronous training).
"""
from __future__ import annotations

import os
import warnings
import weakref
from typing import Optional

import torch
from torch import Tensor

from ..training.traffic import ByteLedger
from .memory_placement import pack_rows, unpack_rows
from .schedule import check_layout

__all__ = ["DelayedGradients", "ShareModule", "delayed_hook", "gather_rows", "local_world_size", "memory_groups",
           "sum_hook", "world", "wrap_ddp"]


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


def sum_hook(ledger, bucket):  # no annotations: DDP accepts only its own types there
    """A ``DistributedDataParallel`` comm hook: all-reduce (sum) the bucket, its bytes counted
    into ``ledger`` (a :class:`~pyg_dynscale.training.ByteLedger`) as ``gradients``."""
    import torch.distributed as dist

    buf = bucket.buffer()
    ledger.add_tensor("gradients", buf)
    fut = dist.all_reduce(buf, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


class DelayedGradients:
    r"""Pipe-SGD's pipeline of width two (Sven §7.4): the optimizer of step
    :math:`s` applies the summed gradient of step :math:`s - 1`,

    .. math::
        \omega_{s+1} = \omega_s - \alpha \, \nabla f(\omega_{s-1}),

    so that under a process group step :math:`s`'s gradient all-reduce runs
    while the optimizer, the write-back and the next step's forward run (one
    step of staleness; **not** the same numbers as synchronous training).
    With Adam, Adam is fed the previous step's summed gradient.

    Per epoch of :math:`S` steps: step 0 applies nothing (no optimizer step:
    Adam's moments and step count stay as they are), step :math:`s \ge 1`
    applies :math:`g_{s-1}`, and :meth:`flush` at the end of the epoch waits
    for the last all-reduce and applies :math:`g_{S-1}` with one more
    optimizer step. Every gradient is applied once, an epoch makes :math:`S`
    optimizer steps as the synchronous one does, and nothing (no gradient, no
    collective in flight) crosses an epoch boundary, so checkpoints are taken
    as before.

    * Under a process group, :func:`delayed_hook` (registered by
      :func:`wrap_ddp`) launches the bucket's all-reduce (sum, as
      :func:`sum_hook`: each share is already weighted) asynchronously and
      hands DDP the bucket's parameters' summed gradients of the previous
      step. They are kept **per parameter**: DDP rebuilds its buckets after
      the first iteration, so bucket indices and contents change.
    * On one process (the emulation) :meth:`step` swaps each parameter's
      ``.grad`` (the sum of the trainers' shares) with the one kept from the
      step before (a parameter without a gradient then stays without one).

    Args:
        params (list): the optimizer's parameters.
    """

    def __init__(self, params) -> None:
        self.params = list(params)
        self.ledger: Optional[ByteLedger] = None  # set by wrap_ddp
        self.distributed = False
        self.steps = 0  # steps of this epoch so far
        self._previous: dict = {}  # id(param) -> the previous step's summed gradient (None: it had none)
        self._in_flight: list = []  # (step, work, reduced flat buffer, the bucket's parameters)

    def _settle(self, before: Optional[int] = None) -> None:
        """Wait for the all-reduces launched before step ``before`` (all: ``None``) and keep their sums."""
        keep = []
        for entry in self._in_flight:
            s, work, flat, params = entry
            if before is not None and s >= before:
                keep.append(entry)
                continue
            work.wait()
            off = 0
            for p in params:
                self._previous[id(p)] = flat[off:off + p.numel()].view_as(p)
                off += p.numel()
        self._in_flight = keep

    def hook(self, bucket):
        """:func:`delayed_hook`'s work: launch this bucket's all-reduce, answer the previous step's sums."""
        import torch.distributed as dist

        self._settle(before=self.steps)  # the previous step's all-reduces: their sums are answered now
        buf = bucket.buffer()
        flat = buf.clone()  # DDP overwrites the bucket with what this hook answers
        self.ledger.add_tensor("gradients", flat)  # the buffer handed to the all-reduce
        work = dist.all_reduce(flat, async_op=True)
        params = bucket.parameters()
        out = torch.zeros_like(buf)  # step 0: nothing to apply (and step() applies nothing)
        off = 0
        for p in params:
            g = self._previous.get(id(p))
            if g is not None:
                out[off:off + p.numel()] = g.reshape(-1)
            off += p.numel()
        self._in_flight.append((self.steps, work, flat, params))
        fut = torch.futures.Future()
        fut.set_result(out)
        return fut

    def step(self, optimizer) -> None:
        """In place of ``optimizer.step()`` after a step's backward: apply the previous step's gradient."""
        if not self.distributed:
            for p in self.params:
                p.grad, self._previous[id(p)] = self._previous.get(id(p)), p.grad
        if self.steps > 0:
            optimizer.step()
        self.steps += 1

    def flush(self, optimizer) -> None:
        """End of the epoch: wait for the last all-reduce, apply the last step's gradient, start afresh."""
        self._settle()
        if self.steps > 0:
            for p in self.params:
                g = self._previous.get(id(p))
                p.grad = None if g is None else g.detach().clone()
            optimizer.step()
        self._previous, self.steps = {}, 0

    def wait(self) -> None:
        """Wait for every all-reduce in flight (no collective left behind, e.g. before the process group goes)."""
        self._settle()


def delayed_hook(state, bucket):  # no annotations: DDP accepts only its own types there
    """A ``DistributedDataParallel`` comm hook (``state``: a :class:`DelayedGradients`): launch the
    bucket's all-reduce (sum) without waiting, count its bytes, answer the previous step's sums."""
    return state.hook(bucket)


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


def wrap_ddp(trainer, ledger: ByteLedger, delayed: Optional[DelayedGradients] = None):
    """``DistributedDataParallel`` around :class:`ShareModule` (rank 0's parameters broadcast), with
    :func:`sum_hook`, or :func:`delayed_hook` when ``delayed`` is given; bytes into ``ledger``."""
    from torch.nn.parallel import DistributedDataParallel

    ledger.add("setup", sum(p.numel() * p.element_size() for p in trainer.optimizer_params if p.requires_grad))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
        # buffers stay rank-local: the memory is the schedule's business, not DDP's
        ddp = DistributedDataParallel(ShareModule(trainer), broadcast_buffers=False)
    if delayed is None:
        ddp.register_comm_hook(ledger, sum_hook)
    else:
        delayed.ledger, delayed.distributed = ledger, True
        ddp.register_comm_hook(delayed, delayed_hook)
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
