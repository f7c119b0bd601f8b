r"""Mini-batch preparation one step ahead (DistTGL §3.3's prefetching): the
neighbour lookup of the next step's local batches runs on a thread while the
trainer finishes the current step (write-back, optimizer step).

Which neighbours a batch sees depends only on the events inserted before it,
not on the model, so a second ``LastNeighborLoader`` that takes the same
inserts and resets in the same order (a mirror) gives the lookup of step
:math:`s + 1` as soon as step :math:`s`'s events are inserted. The thread
applies its queue in submission order; every lookup returns what the
trainer's own loader would return at that point (tested: training with the
prefetcher == without, bitwise).

With a partitioned memory (``memory_placement="partitioned"`` or ``"sven"``)
each lookup is followed on the thread by the local batch's id organisation
(the ``then`` of :meth:`NeighborPrefetcher.lookup`, Sven §7.2's prefetch):
its occurrence list :math:`V_o` (which reads the mailbox), the
redundancy-free / per-owner dispatch lists and the aggregation lists
(:meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.organise_fetch`,
:meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.organise_aggregate`).
The rows cannot move early: they are the owners' rows after this step's
aggregation. The trainer queues the lookup after the step's write-back (its
``store.put``), so the mailbox the thread reads is the one the next step
reads; the mailbox changes next at the next write-back, after the next
dispatch has taken the lists.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, Optional

import torch
from torch import Tensor
from torch_geometric.nn.models.tgn import LastNeighborLoader

__all__ = ["NeighborPrefetcher"]


class NeighborPrefetcher:
    """A thread owning a mirror of the trainer's ``LastNeighborLoader``.

    Args:
        num_nodes (int), size (int): as ``LastNeighborLoader``.
        device: where the mirror lives.
    """

    def __init__(self, num_nodes: int, size: int, device=None) -> None:
        self.loader = LastNeighborLoader(num_nodes, size=size, device=device)
        self._queue: queue.Queue = queue.Queue()
        self._error: Optional[BaseException] = None
        self.lookups = 0
        self._thread = threading.Thread(target=self._serve, name="pyg-dynscale-prefetch", daemon=True)
        self._thread.start()

    def load(self, neighbors: Tensor, e_id: Tensor, cur_e_id: int) -> None:
        """Make the mirror equal to a loader state (copies taken now)."""
        self._put(("load", (neighbors.clone(), e_id.clone(), int(cur_e_id)), None))

    def reset(self) -> None:
        self._put(("reset", None, None))

    def insert(self, src: Tensor, dst: Tensor) -> None:
        self._put(("insert", (src, dst), None))

    def lookup(self, n_id: Tensor, then: Optional[Callable] = None) -> Future:
        """The mirror's ``loader(n_id)`` after everything submitted before: a future of
        ``(n_id, edge_index, e_id)``, or of ``then((n_id, edge_index, e_id))`` run on the thread
        too (the partitioned placements' id lists, which need the lookup)."""
        fut: Future = Future()
        self._put(("lookup", (n_id, then), fut))
        return fut

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _put(self, item) -> None:
        if self._error is not None:
            raise RuntimeError("the prefetch thread failed") from self._error
        self._queue.put(item)

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kind, arg, fut = item
            try:
                if kind == "load":
                    nb, e_id, cur = arg
                    self.loader.neighbors.copy_(nb)
                    self.loader.e_id.copy_(e_id)
                    self.loader.cur_e_id = cur
                elif kind == "reset":
                    self.loader.reset_state()
                elif kind == "insert":
                    self.loader.insert(*arg)
                else:
                    n_id, then = arg
                    with torch.no_grad():
                        out = self.loader(n_id)
                        if then is not None:
                            out = then(out)
                    self.lookups += 1
                    fut.set_result(out)
            except BaseException as exc:  # reported to the waiting lookup and to every later call
                self._error = exc
                if fut is not None:
                    fut.set_exception(exc)
                return


class OwnersLookahead:
    r"""``prefetch=True`` with events per rank (``event_placement="per_rank"``): there is no
    whole-stream loader to mirror -- a lookup asks the owners of the batch's vertices for their
    rows (:meth:`~pyg_dynscale.ctdg.event_exchange.EventExchange.lookup`, collectives on the
    host group and the rows' group). The next step's lookup and id lists are made on this
    thread right after the step's write-back (the point the prefetch thread's queue reaches
    them: the owners' index then is the one the next step reads); a thread of its own would run
    these collectives while this thread's (DDP's all-reduce, the next dispatch) run on the same
    groups, and two threads' collectives on one group can cross between ranks. So the numbers
    and the bytes are the prefetcher's (the next step's negatives drawn before the optimizer
    step, the dropout from per-trainer seeds), without its overlap.

    Args:
        exchange (EventExchange): the rank's owners' index and its exchanges.
    """

    def __init__(self, exchange) -> None:
        self.exchange = exchange
        self.lookups = 0

    def load(self, *args) -> None:
        """Nothing to mirror (the owners' index is the loader)."""

    def reset(self) -> None:
        """Nothing to mirror (the memory copy's reset resets the owners' index)."""

    def insert(self, src: Tensor, dst: Tensor) -> None:
        """Nothing to mirror (the write-back inserts into the owners' index)."""

    def lookup(self, n_id: Tensor, then: Optional[Callable] = None):
        """The owners' lookup of ``n_id`` now (a collective: every rank calls it, an empty
        ``n_id`` for an empty local batch), and ``then`` of it; a done future."""
        from .partitioned_fetch import Ready

        with torch.no_grad():
            out = self.exchange.lookup(n_id, True)
            if then is not None:
                out = then(out)
        self.lookups += 1
        return Ready(out)

    def close(self) -> None:
        """No thread to stop."""
