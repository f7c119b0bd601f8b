r"""The trainer's side of a partitioned memory (:mod:`~pyg_dynscale.ctdg.memory_placement`):
building the owners' stores from ``memory_placement`` / ``partition``, fetching the rows a
local batch reads from their owners before its compute (the dispatch of :math:`V_o`, the
occurrence list of Sven's Eq. 1), the id lists the prefetch thread organises for it, the
fetch before each evaluation batch, and the aggregation of the written root rows.
"""
from __future__ import annotations

import functools
from typing import Optional

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedOptionError
from ..training.traffic import ByteLedger
from .memory_placement import PLACEMENTS, Channel, PartitionedMemory, resolve_partition
from .microbatch import BackgroundCall
from .schedule import LocalBatch
from .step_context import StepContext

__all__ = ["PartitionedFetch", "build_placement"]


class Ready:
    """A neighbour lookup already done, in the form a prefetched one takes (``.result()``)."""

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


def unorganised(found: tuple) -> tuple:
    """A prefetched lookup without id lists (:meth:`PartitionedFetch.dispatch` organises them)."""
    return found, None, None


def _describe(value: object) -> str:
    """A short text of an argument for a message (a tensor by its shape, not its values)."""
    return f"a tensor of shape {tuple(value.shape)}" if isinstance(value, Tensor) else repr(value)


def build_placement(placement: str, partition, *, memory, parallelism: tuple, rank: int, world_size: int,
                    memory_service: bool, host, val_start: int, batch_size: int, num_neighbors: int,
                    ledger: ByteLedger) -> Optional[PartitionedMemory]:
    """``memory_placement``: ``None`` (replicated) or the owners' store that takes the place of the
    memory module's buffers (emptied here: no full-size copy). No collective."""
    if placement not in PLACEMENTS:
        raise ModelInputError("memory_placement", f"is {placement!r}.", f"use one of {list(PLACEMENTS)}.")
    if placement == "replicated":
        if partition is not None:
            raise ModelInputError("partition", f"is given ({_describe(partition)}) with "
                                  "memory_placement='replicated', which has no owners.",
                                  "drop partition=, or use memory_placement='partitioned' or 'sven'.")
        return None
    if partition is None:
        partition = "range"
    i, j, k = parallelism
    if j > 1 or k > 1:
        raise UnsupportedOptionError("parallelism", f"is {parallelism!r} with memory_placement={placement!r}.",
                                     "a partitioned memory runs mini-batch parallelism (i, 1, 1), one trainer "
                                     "per rank, or use memory_placement='replicated'.")
    if memory_service:
        raise UnsupportedOptionError("memory_service", f"is True with memory_placement={placement!r}.",
                                     "memory_service=False with a partitioned memory, or "
                                     "memory_placement='replicated'.")
    if world_size > 1 and world_size != i:
        raise ModelInputError("parallelism", f"is {parallelism!r} on {world_size} processes.",
                              f"use ({world_size}, 1, 1): one trainer and one owner per rank.")
    m, n = memory, memory.num_nodes
    requests = None
    if isinstance(partition, str) and partition == "flexbicut":
        from .presample import trainer_requests

        requests = trainer_requests(host.src, host.dst, n, val_start, batch_size, world_size, num_neighbors)
    owner = resolve_partition(partition, n, world_size, requests)
    out = PartitionedMemory(owner, rank, world_size, m.memory_dim, m.memory.dtype, m.memory.device,
                            dedup=placement == "sven", ledger=ledger)
    m.memory = m.memory.new_empty((0, m.memory_dim))
    m.last_update = m.last_update.new_empty((0,))
    return out


class PartitionedFetch:
    r"""Dispatch and aggregation of one trainer's partitioned memory.

    Args:
        placement (PartitionedMemory): the owners' store.
        host (HostStream): the stream's index columns (host).
        neighbors (LastNeighborLoader): the neighbour loader (host).
        state (MemoryState): the memory's message stores (the mailbox the dispatch reads).
        exchange (EventExchange, optional): events per rank: the neighbourhoods and stored messages
            come from the owners (:meth:`~pyg_dynscale.ctdg.event_exchange.EventExchange.lookup`).

    Attributes:
        prefetched (dict): local batches whose ``dispatch`` / ``aggregation`` id lists came from
            the prefetch thread.
        channel (Channel or None): ``overlap_aggregation``'s own groups (``None``: inline).
    """

    def __init__(self, placement: PartitionedMemory, host, neighbors, state, exchange=None) -> None:
        self.placement, self.host, self.neighbors, self.state = placement, host, neighbors, state
        #: events per rank: the owners' index (its lookups are collectives), else None
        self.exchange = exchange
        self.prefetched = {"dispatch": 0, "aggregation": 0}
        self.channel: Optional[Channel] = None

    def dispatch(self, lb: LocalBatch, ctx: StepContext) -> None:
        """Fetch the rows local batch ``lb`` reads (its sampled nodes and the other endpoints of
        their stored messages) from their owners; the neighbour lookup is kept in
        ``ctx.lookups`` for the embedding. Every rank calls it every step (an empty batch fetches
        nothing)."""
        if lb.num_events == 0:
            # the owners' lookups are collectives too (done already if the prefetcher looked ahead)
            if self.exchange is not None and ctx.lookups.pop(lb.trainer, None) is None:
                self.exchange.lookup(self.host.src[:0], True)
            self.placement.fetch(self.host.src[:0])
            return
        ready = ctx.lookups.get(lb.trainer)
        if ready is not None:  # the prefetch thread's lookup and id lists: only the rows move now
            found, plan, agg = ready.result()
            if plan is not None:
                self.placement.send_fetch(plan)
                ctx.aggregate_plans[(lb.start, lb.end)] = agg
                ctx.lookups[lb.trainer] = Ready(found)
                self.prefetched["dispatch"] += 1
                return
        ctx.lookups[lb.trainer] = self.fetch_batch(lb.start, lb.end, ctx.negatives_of(lb), True)

    def occurrences(self, a: int, b: int, neg: Tensor, found: tuple, training: bool) -> Tensor:
        """:math:`V_o` of the scoring of events ``[a, b)``: every reference the computation makes
        (roots, neighbour-edge endpoints and, in training, the other endpoint of each stored message
        of the sampled nodes: the mailbox as it is now)."""
        n_id, edge_index, _ = found
        occ = [self.host.src[a:b], self.host.dst[a:b], neg, n_id[edge_index[0]]]
        return torch.cat(occ + ([self.state.others(n_id)] if training else []))

    def organise(self, a: int, b: int, neg: Tensor, found: tuple) -> tuple:
        """On the prefetch thread: local batch ``[a, b)``'s dispatch and aggregation id lists from
        its neighbour lookup ``found``; runs after the write-back before it (the mailbox it reads)."""
        src, dst = self.host.src[a:b], self.host.dst[a:b]
        plan = self.placement.organise_fetch(self.occurrences(a, b, neg, found, True))
        return found, plan, self.placement.organise_aggregate(src, dst, torch.cat([src, dst]).unique())

    def then(self, step_resets: bool, a: int, b: int, neg: Tensor):
        """What the prefetch thread runs after a lookup: the id lists (after a reset the dispatch
        organises for itself, from a fresh mailbox)."""
        return unorganised if step_resets else functools.partial(self.organise, a, b, neg)

    def fetch_batch(self, a: int, b: int, neg: Tensor, training: bool, placement=None) -> Ready:
        """Fetch the rows the scoring of events ``[a, b)`` with negatives ``neg`` reads; returns the
        neighbour lookup. In training the stored messages of the sampled nodes are applied first:
        their other endpoints are read too (the memory update of evaluation fetches for itself,
        :meth:`~pyg_dynscale.ctdg.store.MemoryState.write`). ``placement``: a table view."""
        if self.exchange is not None:
            self.exchange.prepare(a, b, training)
            found = self.exchange.lookup(torch.cat([self.host.src[a:b], self.host.dst[a:b], neg]).unique(), training)
        else:
            found = self.neighbors(torch.cat([self.host.src[a:b], self.host.dst[a:b], neg]).unique())
        occ = self.occurrences(a, b, neg, found, training)
        (self.placement if placement is None else placement).fetch(occ)
        return Ready(found)

    def aggregation(self, copy: int, ctx: StepContext) -> tuple:
        """The aggregation of memory copy ``copy``'s queued rows: the arguments of
        :meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.aggregate` and the root count."""
        mine = ctx.pending.pop(copy, [])
        spans = ctx.spans.pop(copy, [])
        prepared = ctx.aggregate_plans
        plans = [prepared.pop(x) for x in spans] if all(x in prepared for x in spans) else None
        self.prefetched["aggregation"] += len(plans or [])
        batches = [(self.host.src[x:y], self.host.dst[x:y]) + tuple(w) for (x, y), w in zip(spans, mine)]
        return (batches, plans, self.channel), sum(x[0].numel() for x in mine)

    def post(self, copy: int, ctx: StepContext) -> None:
        """``overlap_aggregation``: start the aggregation of this rank's final root rows on a
        thread over the aggregation groups (this rank's dispatch of the step is done: every rank's
        dispatch all-to-all has completed before any rank's aggregation reaches it)."""
        args, roots = self.aggregation(copy, ctx)
        job = BackgroundCall(self.placement.aggregate, *args)
        job.start()
        ctx.posted[copy] = (job, roots)

    def write_back(self, copy: int, ctx: StepContext) -> None:
        """The owners apply every trainer's rows of copy ``copy``, in trainer order (joining an
        overlapped aggregation, its error re-raised)."""
        posted = ctx.posted.pop(copy, None)
        if posted is not None:
            posted[0].result()
            ctx.roots.append(posted[1])
        else:
            args, roots = self.aggregation(copy, ctx)
            ctx.roots.append(roots)
            self.placement.aggregate(*args)
