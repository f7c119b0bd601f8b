r"""Summing gradients over ranks: one implementation of each way the trainer
families do it.

* :func:`sum_hook` -- a ``DistributedDataParallel`` comm hook that
  all-reduces each bucket with a **sum** (every rank's loss is already its
  share of the global loss, so the sum is the gradient of that loss; DDP's
  default hook would average), its bytes counted into a
  :class:`~.traffic.ByteLedger` as ``"gradients"`` at the collective.
* :class:`DelayedGradients` and :func:`delayed_hook` -- Pipe-SGD's pipeline
  of width two: step :math:`s` applies the summed gradient of step
  :math:`s - 1` while step :math:`s`'s all-reduce runs.
* :class:`ShareModule` and :func:`wrap_ddp` -- the modules of a trainer as one
  module whose forward is the rank's share of the step loss, wrapped in
  ``DistributedDataParallel`` with one of the two hooks.
* :func:`all_reduce_flat` -- the gradients of a parameter list as one flat
  all-reduce after the backward (no DDP: a trainer whose forward is itself a
  sequence of collectives), a parameter no rank produced a gradient for
  keeping ``grad=None``.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable, Iterable, Optional, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from .ranks import host_group
from .traffic import ByteLedger

__all__ = ["sum_hook", "DelayedGradients", "delayed_hook", "ShareModule", "wrap_ddp", "all_reduce_flat"]


def sum_hook(ledger, bucket):  # no annotations: DDP accepts only its own types there
    """A ``DistributedDataParallel`` comm hook (``state``: a
    :class:`~.traffic.ByteLedger`): all-reduce (sum) the bucket's gradients
    (each rank's gradient is already its share of the global loss, so the sum
    is the gradient of that loss; DDP's default hook would average) and count
    the bucket's bytes into ``ledger`` as ``"gradients"``.

    Register it with ``ddp.register_comm_hook(ledger, sum_hook)`` (or
    :func:`wrap_ddp`)."""
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
    * On one process (an emulation of several ranks) :meth:`step` swaps each
      parameter's ``.grad`` (the sum of the ranks' shares) with the one kept
      from the step before (a parameter without a gradient then stays
      without one).

    Args:
        params (list): the optimizer's parameters.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
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

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """In place of ``optimizer.step()`` after a step's backward: apply the previous step's gradient."""
        if not self.distributed:
            for p in self.params:
                p.grad, self._previous[id(p)] = self._previous.get(id(p)), p.grad
        if self.steps > 0:
            optimizer.step()
        self.steps += 1

    def flush(self, optimizer: torch.optim.Optimizer) -> None:
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
    r"""A trainer's modules as one module whose forward is the rank's share of
    a step's loss: what ``DistributedDataParallel`` wraps (one forward, one
    backward per step).

    Args:
        share (callable): the trainer's method computing the rank's loss share
            from the forward's arguments; held by a weak reference when it is a
            bound method, so there is no trainer <-> DDP cycle (the DDP reducer
            goes with its trainer, before the process group is destroyed, not
            at a later garbage collection).
        **modules: the modules, registered **in the order given** (DDP's
            parameter order, hence its buckets, follows it); ``None`` entries
            are kept as plain attributes.
    """

    def __init__(self, share: Callable[..., Tensor], **modules: Optional[torch.nn.Module]) -> None:
        super().__init__()
        for name, module in modules.items():
            setattr(self, name, module)
        if hasattr(share, "__self__") and hasattr(share, "__func__"):
            self._share = weakref.WeakMethod(share)
        else:
            self._share = lambda: share

    def forward(self, *args: Any, **kwargs: Any) -> Tensor:
        return self._share()(*args, **kwargs)


def wrap_ddp(module: torch.nn.Module, ledger: ByteLedger, *, delayed: Optional[DelayedGradients] = None,
             setup_params: Optional[Iterable[Tensor]] = None) -> Any:
    r"""``DistributedDataParallel`` around ``module`` (usually a
    :class:`ShareModule`; rank 0's parameters are broadcast, buffers stay
    rank-local) with :func:`sum_hook`, or :func:`delayed_hook` when ``delayed``
    is given; every gradient byte is counted into ``ledger`` as
    ``"gradients"``.

    Args:
        module: what DDP wraps.
        ledger: the trainer's byte ledger.
        delayed: Pipe-SGD's state (it becomes distributed and counts into
            ``ledger``).
        setup_params: the parameters whose bytes the construction's broadcast
            is counted for (``"setup"``; default: ``module``'s parameters).
    """
    from torch.nn.parallel import DistributedDataParallel

    params = list(module.parameters()) if setup_params is None else list(setup_params)
    ledger.add("setup", sum(p.numel() * p.element_size() for p in params))
    with warnings.catch_warnings():  # torch >= 2.12 renames it; False keeps buffers rank-local on every version
        warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
        ddp = DistributedDataParallel(module, broadcast_buffers=False)
    if delayed is None:
        ddp.register_comm_hook(ledger, sum_hook)
    else:
        delayed.ledger, delayed.distributed = ledger, True
        ddp.register_comm_hook(delayed, delayed_hook)
    return ddp


def _all_reduce(group: Optional[Any]) -> Callable[[Tensor], Tensor]:
    def reduce(x: Tensor) -> Tensor:
        out = x.detach().clone().contiguous()
        dist.all_reduce(out, group=group)
        return out
    return reduce


def all_reduce_flat(params: Sequence[torch.nn.Parameter], group: Optional[Any] = None,
                    ledger: Optional[ByteLedger] = None, *, all_reduce: Optional[Callable[[Tensor], Tensor]] = None,
                    all_reduce_host: Optional[Callable[[Tensor], Tensor]] = None, kind: str = "gradients") -> int:
    r"""Sum the gradients of ``params`` over the ranks of ``group`` in one flat
    all-reduce, in place of each ``p.grad``.

    A parameter no rank produced a gradient for keeps ``grad=None`` (as on one
    process); which ones did is a row of ``int32`` flags reduced on the host
    first (never waiting on the device). The flat buffer is
    :math:`\sum_p |p|` elements of the parameters' dtype; a parameter without a
    gradient on this rank contributes zeros.

    Args:
        params: the replicated parameters, in the same order on every rank.
        group: the process group (``None``: the world).
        ledger: counts the bytes handed to the two collectives under ``kind``.
        all_reduce: ``x -> sum over ranks`` (a new tensor on ``x``'s device;
            default ``dist.all_reduce`` over ``group``), e.g. a transport's
            (host-staged for ranks sharing a GPU over gloo).
        all_reduce_host: the same for the host flags (default: over
            :func:`~.ranks.host_group` of ``group``).

    Returns:
        int: the bytes handed to the collectives (flat buffer + flags).
    """
    reduce = all_reduce if all_reduce is not None else _all_reduce(group)
    reduce_host = all_reduce_host if all_reduce_host is not None else _all_reduce(host_group(group))
    ps = list(params)
    # which parameters got a gradient is known on the host: its union over ranks never waits on the device
    flags = torch.tensor([p.grad is not None for p in ps], dtype=torch.int32)
    has = (reduce_host(flags) > 0).tolist()
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps])
    nbytes = flat.numel() * flat.element_size() + flags.numel() * flags.element_size()  # what the collectives get
    flat = reduce(flat)
    if ledger is not None:
        ledger.add(kind, nbytes)
    o = 0
    for p, h in zip(ps, has):
        n = p.numel()
        p.grad = flat[o:o + n].view_as(p).clone() if h else None
        o += n
    return nbytes
