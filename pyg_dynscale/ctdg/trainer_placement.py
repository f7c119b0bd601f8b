r"""The :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer` side of a partitioned memory
(:mod:`~pyg_dynscale.ctdg.placement`): the placement's setup (``memory_placement``,
``partition``), the rows a local batch reads fetched from their owners before its compute
(the dispatch of :math:`V_o`, the occurrence list of Sven's Eq. 1), the id lists the prefetch
thread organises for it, and the fetch before each evaluation batch. The write-back's
aggregation stays in the trainer's ``_write_back`` (one path for every placement).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ModelInputError
from .placement import PLACEMENTS, PartitionedMemory, resolve_partition
from .schedule import LocalBatch

__all__ = ["PlacementHooks"]


class _Ready:
    """A neighbour lookup already done, in the form
    :meth:`~pyg_dynscale.ctdg.trainer.MemoryTrainer._embed` takes a prefetched one."""

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


def _describe(value: object) -> str:
    """A short text of an argument for a message (a tensor by its shape, not its values)."""
    return f"a tensor of shape {tuple(value.shape)}" if isinstance(value, Tensor) else repr(value)


class PlacementHooks:
    """The partitioned-placement methods of :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer`
    (a mixin: they read the trainer's events ``src`` / ``dst``, ``neighbors``, ``state``,
    ``parallelism`` and the step context ``_ctx``)."""

    def _setup_placement(self, placement: str, partition, memory_service: bool, prefetch: bool) -> None:
        """``memory_placement``: the owners' stores in place of the module's buffers (see
        :mod:`~pyg_dynscale.ctdg.placement`)."""
        self.memory_placement = placement
        if placement not in PLACEMENTS:
            raise ModelInputError("memory_placement", f"is {placement!r}.", f"use one of {list(PLACEMENTS)}.")
        if placement == "replicated":
            if partition is not None:
                raise ModelInputError("partition", f"is given ({_describe(partition)}) with "
                                      "memory_placement='replicated', which has no owners.",
                                      "drop partition=, or use memory_placement='partitioned' or 'sven'.")
            return
        if partition is None:
            partition = "range"
        i, j, k = self.parallelism
        for flag, what in ((j > 1 or k > 1, f"parallelism={self.parallelism!r}"),
                           (memory_service, "memory_service=True")):
            if flag:
                raise NotImplementedError(f"memory_placement={placement!r} with {what} is not built: a partitioned "
                                          "memory runs mini-batch parallelism (i, 1, 1), one trainer per rank, "
                                          "without the memory service.")
        if self.world_size > 1 and self.world_size != i:
            raise ModelInputError("parallelism", f"is {self.parallelism!r} on {self.world_size} processes.",
                                  f"use ({self.world_size}, 1, 1): one trainer and one owner per rank.")
        m, n = self.memory, self.memory.num_nodes
        requests = None
        if isinstance(partition, str) and partition == "flexbicut":
            from .presample import trainer_requests

            requests = trainer_requests(self.host.src, self.host.dst, n, self.val_start, self.batch_size,
                                        self.world_size, self.num_neighbors)
        owner = resolve_partition(partition, n, self.world_size, requests)
        self.placement = PartitionedMemory(owner, self.rank, self.world_size, m.memory_dim, m.memory.dtype,
                                           m.memory.device, dedup=placement == "sven")
        self.state.placement = self.placement
        # no full-size copy: the module's buffers give way to the owned rows
        m.memory = m.memory.new_empty((0, m.memory_dim))
        m.last_update = m.last_update.new_empty((0,))

    def _dispatch(self, lb: LocalBatch) -> None:
        """Partitioned memory: fetch the rows local batch ``lb`` reads (its sampled nodes and the
        other endpoints of their stored messages) from their owners; the neighbour lookup is kept
        for :meth:`~pyg_dynscale.ctdg.trainer.MemoryTrainer._embed`. Every rank calls it every step
        (an empty batch fetches nothing)."""
        if lb.num_events == 0:
            self.placement.fetch(self.host.src[:0])
            return
        ready = self._ctx["lookups"].get(lb.trainer)
        if ready is not None:  # the prefetch thread's lookup and id lists: only the rows move now
            found, plan, agg = ready.result()
            if plan is not None:
                self.placement.send_fetch(plan)
                self._ctx["agg_plans"][(lb.start, lb.end)] = agg
                self._ctx["lookups"][lb.trainer] = _Ready(found)
                self.prefetched["dispatch"] += 1
                return
        o = lb.start - lb.batch_start
        neg = self._ctx["negs"][(lb.memory_copy, lb.position)][lb.negative_set, o:o + lb.num_events]
        self._ctx["lookups"][lb.trainer] = self._fetch_batch(lb.start, lb.end, neg, True)

    def _occurrences(self, a: int, b: int, neg: Tensor, found: tuple, training: bool) -> Tensor:
        """:math:`V_o` of the scoring of events ``[a, b)``: every reference the computation makes
        (roots, neighbour-edge endpoints and, in training, the other endpoint of each stored message
        of the sampled nodes: the mailbox as it is now)."""
        n_id, edge_index, _ = found
        occ = [self.host.src[a:b], self.host.dst[a:b], neg, n_id[edge_index[0]]]
        return torch.cat(occ + ([self.state.others(n_id)] if training else []))

    def _organise(self, a: int, b: int, neg: Tensor, found: tuple) -> tuple:
        """On the prefetch thread: local batch ``[a, b)``'s dispatch and aggregation id lists from
        its neighbour lookup ``found``; runs after the write-back before it (the mailbox it reads)."""
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        plan = self.placement.organise_fetch(self._occurrences(a, b, neg, found, True))
        return found, plan, self.placement.organise_aggregate(src, dst, torch.cat([src, dst]).unique())

    def _fetch_batch(self, a: int, b: int, neg: Tensor, training: bool, placement=None) -> "_Ready":
        """Fetch the rows the scoring of events ``[a, b)`` with negatives ``neg`` reads; returns the
        neighbour lookup for :meth:`~pyg_dynscale.ctdg.trainer.MemoryTrainer._embed`. In training the
        stored messages of the sampled nodes are applied first: their other endpoints are read too
        (the memory update of evaluation fetches for itself,
        :meth:`~pyg_dynscale.ctdg.store.MemoryState.write`)."""
        found = self.neighbors(torch.cat([self.host.src[a:b], self.host.dst[a:b], neg]).unique())
        occ = self._occurrences(a, b, neg, found, training)
        (self.placement if placement is None else placement).fetch(occ)  # placement: a table view
        return _Ready(found)
