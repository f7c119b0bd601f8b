r"""Sven's pre-sampling (TPDS §4): what each trainer asks of each vertex's
node memory over one epoch, the input of the communication-balanced
partitions of :mod:`pyg_dynscale.ctdg.memory_partition`.

:func:`trainer_requests` walks the training events as the
:math:`(M, 1, 1)` schedule of :class:`~pyg_dynscale.ctdg.schedule.EventSchedule`
does (trainer :math:`t` takes the :math:`t`-th chronological local batch of
each global batch) with PyG's ``LastNeighborLoader`` and the message store of
:class:`~pyg_dynscale.ctdg.store.MessageStore`, both taking the global batch
after every step as the trainer's write-back does. Per step, trainer
:math:`t`'s local batch :math:`[a, b)` needs the distinct vertices

.. math::

    U_t = n\_id \cup \{\text{other endpoint of } e : e \text{ a stored message of a node of } n\_id\},

:math:`n\_id` = the roots :math:`\mathrm{src}[a{:}b] \cup \mathrm{dst}[a{:}b]`
and their last ``num_neighbors`` neighbours (the sampled graph); a node's
stored messages are the events of the last global batch in which it was a
source (other endpoint: the destination) and of the last one in which it was
a destination (other endpoint: the source) -- the rows
``MemoryState.updated(n_id)`` reads. Each vertex counts once per step:
:math:`\omega(t, v)` = the number of steps with :math:`v \in U_t`.

No model is run, and the negative destinations that the trainer adds to the
roots are left out: they are uniform random draws, a different set every
epoch, so they spread over all owners whatever the partition.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn.models.tgn import LastNeighborLoader

from ..errors import ModelInputError
from .schedule import EventSchedule
from .store import MessageStore

__all__ = ["trainer_requests"]


def _count(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ModelInputError(name, f"is {value!r}.", f"use an integer >= {low}.")
    return value


def trainer_requests(src: Tensor, dst: Tensor, num_nodes: int, num_train_events: int, batch_size: int,
                     num_trainers: int, num_neighbors: int) -> Tensor:
    r"""The pre-sampled requests of one training epoch (see the module docstring).

    Args:
        src, dst: ``[E]`` int64 event endpoints (chronological; the training
            events first).
        num_nodes: :math:`N` (ids in ``[0, N)``).
        num_train_events: the first ``num_train_events`` events are walked.
        batch_size: events per local batch.
        num_trainers: :math:`M`, the mini-batch parallelism ``i``.
        num_neighbors: the ``LastNeighborLoader`` size.

    Returns:
        ``[3, R]`` int64 rows ``(trainer, vertex, count)``, one per pair with
        ``count > 0``, sorted by trainer then vertex.

    Raises:
        ModelInputError: naming the bad argument.
    """
    for name, x in (("src", src), ("dst", dst)):
        if not isinstance(x, Tensor) or x.dim() != 1 or x.dtype != torch.int64:
            raise ModelInputError(name, "is not a 1-D int64 tensor.", "give the events' endpoints as [E] int64.")
    if src.numel() != dst.numel():
        raise ModelInputError("dst", f"has {dst.numel()} events, src {src.numel()}.", "give one dst per src.")
    n = _count("num_nodes", num_nodes, 1)
    e = _count("num_train_events", num_train_events, 0)
    if e > src.numel():
        raise ModelInputError("num_train_events", f"is {e} for {src.numel()} events.",
                              f"use at most {src.numel()}.")
    m = _count("num_trainers", num_trainers, 1)
    k = _count("num_neighbors", num_neighbors, 1)
    b = _count("batch_size", batch_size, 1)
    if src.numel() and (min(int(src.min()), int(dst.min())) < 0 or max(int(src.max()), int(dst.max())) >= n):
        raise ModelInputError("src/dst", f"have node ids outside [0, num_nodes = {n}).",
                              "give num_nodes > the largest node id.")
    src, dst = src.cpu(), dst.cpu()
    loader = LastNeighborLoader(n, size=k)
    store_s, store_d = MessageStore(src, n), MessageStore(dst, n)
    counts = torch.zeros(m * n, dtype=torch.long)
    for step in EventSchedule(e, b, (m, 1, 1)).steps():
        for lb in step.local:
            if lb.num_events == 0:
                continue
            roots = torch.cat([src[lb.start:lb.end], dst[lb.start:lb.end]]).unique()
            n_id, _, _ = loader(roots)
            _, ev_s = store_s.get(n_id)
            _, ev_d = store_d.get(n_id)
            need = torch.cat([n_id, dst[ev_s], src[ev_d]]).unique()
            counts.index_add_(0, lb.trainer * n + need, torch.ones_like(need))
        for _, _, _, a, z in step.fresh:  # after every read of the step, as the write-back
            store_s.put(a, z)
            store_d.put(a, z)
            loader.insert(src[a:z], dst[a:z])
    nz = counts.nonzero().view(-1)
    return torch.stack([nz // n, nz % n, counts[nz]])
