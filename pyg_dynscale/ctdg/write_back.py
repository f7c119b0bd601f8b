r"""The write-back of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: the end of a step for one
memory copy, after every read of the step (the write-back barrier).

The writers' root rows (queued by :meth:`WriteBack.queue` when each local batch computed
them) go into the copy in trainer (= chronological) order: to their owners with a
partitioned memory (:class:`~pyg_dynscale.ctdg.partitioned_fetch.PartitionedFetch`),
all-gathered over the copy's ranks under a process group
(:func:`~pyg_dynscale.ctdg.parallel.gather_rows`), or applied here (a later writer wins);
then the copy takes the global batch's messages and neighbours.
"""
from __future__ import annotations

import torch

from ..training.traffic import ByteLedger
from .parallel import gather_rows
from .schedule import LocalBatch
from .step_context import StepContext
from .store import write_rows

__all__ = ["WriteBack"]


class WriteBack:
    r"""Writes the queued root rows of a step into a memory copy.

    Args:
        copies (MemoryCopies): the memory copies (the written one is made live).
        host (HostStream): the stream's index columns.
        writers (int): :math:`i \cdot j`, the ranks of one memory copy.
        local (ByteLedger): counts the rows written (``memory_write``, ``row_bytes`` each).
        collectives (ByteLedger): counts the all-gathered rows (``gather``).
        fetch (PartitionedFetch, optional): a partitioned memory's aggregation.
        exchange (EventExchange, optional): events per rank: the batch goes into the owners' index
            (:meth:`~pyg_dynscale.ctdg.event_exchange.EventExchange.advance`, collectives) instead of
            the whole-stream stores and loader.

    Attributes:
        groups (RankGroups or None): the process groups (set once connected).
        service (MemoryService or None): applies the rows on its thread.
        prefetcher (NeighborPrefetcher or None): mirrors the neighbour loader.
    """

    def __init__(self, copies, host, writers: int, local: ByteLedger, collectives: ByteLedger, row_bytes: int,
                 fetch=None, exchange=None) -> None:
        self.copies, self.host, self.writers = copies, host, writers
        self.local, self.collectives, self.row_bytes, self.fetch = local, collectives, row_bytes, fetch
        self.exchange = exchange
        self.groups = None
        self.service = None
        self.prefetcher = None

    def queue(self, lb: LocalBatch, ctx: StepContext) -> None:
        """Queue local batch ``lb``'s root nodes' updated memory (no gradient, no random draw: the
        same values before or after the GNN layer)."""
        n_id = torch.cat([self.host.src[lb.start:lb.end], self.host.dst[lb.start:lb.end]]).unique()
        with torch.no_grad():
            rows, last = self.copies.state.updated(n_id)
        ctx.pending.setdefault(lb.memory_copy, []).append((n_id, rows, last))
        ctx.spans.setdefault(lb.memory_copy, []).append((lb.start, lb.end))

    def apply(self, copy: int, a: int, b: int, ctx: StepContext) -> None:
        """Memory copy ``copy`` takes global batch ``[a, b)``: its writers' root-node rows in
        trainer order, then the batch's messages and neighbours."""
        if self.fetch is not None:  # the owners apply every trainer's rows, in trainer order
            self.fetch.write_back(copy, ctx)
            mine: list = []
        else:
            mine = ctx.pending.pop(copy, [])
            ctx.spans.pop(copy, None)
            ctx.roots.append(sum(x[0].numel() for x in mine))
            if self.groups is not None:
                mine = self._gather(copy, mine)
        self.copies.activate(copy)
        m = self.copies.state.module
        written = sum(x[0].numel() for x in mine) * self.row_bytes
        if self.service is not None:  # applied by the service thread while the trainer steps the optimizer
            self.service.write(-1, list(mine))
            mine = []
        with torch.no_grad():
            write_rows(m.memory, m.last_update, mine)  # in trainer order: a later writer wins
        self.local.add("memory_write", written)
        if self.exchange is not None:
            self.exchange.advance(a, b)
            return
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        state = self.copies.state
        state.store_s.put(a, b)
        state.store_d.put(a, b)
        self.copies.neighbors.insert(src, dst)
        if self.prefetcher is not None:
            self.prefetcher.insert(src, dst)

    def _gather(self, copy: int, mine: list) -> list:
        """Every rank's writers of copy ``copy``, all-gathered over the copy's group."""
        m = self.copies.state.module
        n_id, rows, last = (torch.cat([x[k] for x in mine]) for k in range(3)) if mine else (None, None, None)
        return gather_rows(self.groups.copies[copy], self.writers, n_id, rows, last, m.memory_dim, self.collectives,
                           m.memory, self.groups.copy_host)
