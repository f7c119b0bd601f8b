r"""Sven's adaptive micro-batch pipelining (§7.3) for ``memory_placement="sven"``.

A local batch of events :math:`[a, b)` is split into :math:`n` consecutive
micro-batches. Micro-batch :math:`m + 1`'s dispatch (the all-to-all that
fetches the memory rows it reads from their owners,
:meth:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory.fetch`) runs on a
thread while this thread computes micro-batch :math:`m`'s forward; the two
use two views of the rank's partitioned store (:func:`table_view`: the same
owned rows and counters, each its own fetched table), so a fetch never
replaces the table a computation reads.

**Same numbers as** :math:`n = 1`: every micro-batch reads the memory as it
was before the global batch (the owners' stores change only at the
aggregation, after every read of the step); micro-batch :math:`m` contributes
:math:`\ell_m |m| / |B_g|` to the loss (one backward for the whole local
batch), so the gradient is the local batch's; the root rows the micro-batches
computed are merged into one write per local batch (:func:`merge_rows`), so
the aggregation sends what it sends with :math:`n = 1`. Only the dispatch
moves more (a vertex read by two micro-batches is fetched twice; one counts
exchange per micro-batch). The attention dropout draws per micro-batch, so
with dropout > 0 the numbers are those of another dropout draw.

**Adaptive** :math:`n` (``micro_batches="auto"``): Sven's
:math:`n = \lfloor (A \cdot bs + B) / S \rfloor` with constants measured on
the first steps of training (:class:`MicroBatchPipeline`): those steps run
with :math:`n = 1, 2, 4` in turn and record each dispatch's events, bytes
and seconds; :math:`A, B` are the least-squares line of the dispatched bytes
against the micro-batch's events (the batch's bytes grow as
:math:`A \cdot bs + B`, the redundancy model :math:`\eta = A' + B'/bs` of
Sven's App. D), and :math:`S` the bytes the link moves during the fixed
cost one more micro-batch adds: the dispatch's latency :math:`L`
(:math:`\text{seconds} = \text{bytes} / v + L` fitted) plus the
computation's overhead :math:`K` (compute seconds :math:`= K + w \cdot
\text{events}` fitted), :math:`S = v (L + K)`. So :math:`n` is the number of
micro-batches whose transfers each take about the fixed cost of a
micro-batch, Sven's trade-off between hiding the transfer and
under-using the device (:func:`adaptive_micro_batches`). The ranks take the
largest :math:`n` any of them computes.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from ..errors import ModelInputError
from .host import host_to_device

__all__ = ["BackgroundCall", "MicroBatchPipeline", "PROFILE", "adaptive_micro_batches", "check_micro_batches",
           "fit_line", "merge_rows", "micro_ranges", "table_view"]

#: the micro-batch counts of the profiled steps of ``micro_batches="auto"`` (one step each)
PROFILE = (1, 2, 4)


def check_micro_batches(value: object) -> Union[int, str]:
    """``micro_batches`` as given (an integer >= 1 or ``"auto"``), or a typed error."""
    if value == "auto" and isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelInputError("micro_batches", f"is {value!r}.", "use an integer >= 1 or 'auto'.")
    return value


def micro_ranges(start: int, end: int, n: int) -> list:
    """``n`` consecutive event ranges covering ``[start, end)``, sizes differing by at most one
    (empty ranges when there are fewer events than ``n``)."""
    num = end - start
    cut = [start + (num * m) // n for m in range(n + 1)]
    return list(zip(cut[:-1], cut[1:]))


def fit_line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y`` against ``x`` (slope 0 when every ``x`` is equal)."""
    xs = torch.tensor([float(v) for v in x], dtype=torch.float64)
    ys = torch.tensor([float(v) for v in y], dtype=torch.float64)
    if xs.numel() == 0:
        return 0.0, 0.0
    dx = xs - xs.mean()
    var = float((dx * dx).sum())
    if var == 0.0:
        return 0.0, float(ys.mean())
    slope = float((dx * (ys - ys.mean())).sum()) / var
    return slope, float(ys.mean()) - slope * float(xs.mean())


def adaptive_micro_batches(events: Sequence[int], nbytes: Sequence[int], seconds: Sequence[float],
                           batch_size: int, max_micro: int = 8, compute: Optional[tuple] = None) -> int:
    r"""Sven's :math:`n = \lfloor (A \cdot bs + B) / S \rfloor` from profiled dispatches.

    Args:
        events, nbytes, seconds: per profiled dispatch, its micro-batch's events, the bytes this
            rank sent for it and its wall time.
        batch_size (int): :math:`bs`, the local batch's events.
        max_micro (int): the largest :math:`n` returned.
        compute: ``(events, seconds)`` of profiled micro-batch computations (``None``: no
            overhead, :math:`K = 0`).

    :math:`A, B`: ``nbytes`` against ``events`` (:func:`fit_line`); :math:`1/v, L`: ``seconds``
    against ``nbytes``; :math:`K`: the intercept of the compute seconds against their events
    (at least 0); :math:`S = v (L + K)`. Returns 1 when nothing crosses the network
    (:math:`A \cdot bs + B \le 0`) or the time does not grow with the bytes (:math:`1/v \le 0`),
    ``max_micro`` when the fixed cost :math:`L + K` is not positive; always within
    ``[1, min(max_micro, bs)]``.
    """
    hi = max(1, min(max_micro, batch_size))
    a, b = fit_line(events, nbytes)
    volume = a * batch_size + b
    inv_speed, latency = fit_line(nbytes, seconds)
    overhead = max(0.0, fit_line(*compute)[1]) if compute else 0.0
    if volume <= 0 or inv_speed <= 0:
        return 1
    if latency + overhead <= 0:
        return hi
    return int(max(1, min(hi, math.floor(volume * inv_speed / (latency + overhead)))))


def table_view(placement):
    """A second view of a :class:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory`: the same owned
    rows, owner map and counters, its own fetched table (``pos``, ``_table``, ``_held``)."""
    view = copy.copy(placement)
    view.pos = torch.full_like(placement.pos, -1)
    view._held = placement._held[:0]
    view._table = placement._table
    return view


def merge_rows(entries: list) -> tuple[Tensor, Tensor, Tensor]:
    """One ``(n_id sorted unique, rows, last)`` from several micro-batches' root rows (``n_id`` on
    the host, rows on the device; a vertex rooted in two micro-batches has the same row in both:
    both read the memory before the batch; the later micro-batch's is taken)."""
    n_id = torch.cat([e[0] for e in entries])
    rows = torch.cat([e[1] for e in entries])
    last = torch.cat([e[2] for e in entries])
    uniq, inv = torch.unique(n_id, return_inverse=True)
    latest = torch.full((uniq.numel(),), -1, dtype=torch.long)
    latest.scatter_reduce_(0, inv, torch.arange(n_id.numel()), reduce="amax", include_self=True)
    at = host_to_device(latest, rows.device)  # a gather of host-known rows: no scatter with repeated indices
    return uniq, rows[at], last[at]


class BackgroundCall(threading.Thread):
    """A call on its own thread, the result or the error kept for :meth:`result`: one micro-batch's
    dispatch, or the trainer's overlapped aggregation (``overlap_aggregation``)."""

    def __init__(self, fn, *args) -> None:
        super().__init__(daemon=True)
        self.fn, self.args, self.value, self.error = fn, args, None, None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as exc:  # re-raised on the trainer's thread
            self.error = exc

    def result(self):
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


class MicroBatchPipeline:
    r"""The micro-batch loop of one :class:`~pyg_dynscale.ctdg.MemoryTrainer` with a partitioned
    memory (see the module docstring).

    Args:
        placement: the trainer's :class:`~pyg_dynscale.ctdg.memory_placement.PartitionedMemory`.
        micro_batches: :math:`n` (an integer >= 2) or ``"auto"``.
        max_micro (int): the largest adaptive :math:`n`.

    Attributes:
        n (int or None): the micro-batches per local batch (``"auto"``: ``None`` until chosen).
        samples (list): ``"auto"``'s profiled dispatches ``(events, bytes, seconds)``.
        computes (list): ``"auto"``'s profiled micro-batch computations ``(events, seconds)``.
    """

    def __init__(self, placement, micro_batches: Union[int, str], max_micro: int = 8) -> None:
        self.placement = placement
        self.views = (table_view(placement), table_view(placement))
        self.auto = micro_batches == "auto"
        self.n: Optional[int] = None if self.auto else int(micro_batches)
        self.max_micro = max_micro
        self.samples: list = []
        self.computes: list = []

    def _count(self, iteration: int, batch_size: int, world_size: int, device: torch.device) -> int:
        """This step's :math:`n` (the same on every rank: a function of the iteration, or agreed)."""
        if self.n is not None:
            return self.n
        if iteration < len(PROFILE) or not self.samples:
            return PROFILE[iteration % len(PROFILE)]
        ev, nb, sec = zip(*self.samples)
        compute = tuple(zip(*self.computes)) if self.computes else None
        n = adaptive_micro_batches(ev, nb, sec, batch_size, self.max_micro, compute)
        if world_size > 1:  # every rank decides here (same step): the largest, over the host group
            import torch.distributed as dist

            box = torch.tensor([n], dtype=torch.long)
            dist.all_reduce(box, op=dist.ReduceOp.MAX, group=self.placement.channel.host)
            n = int(box)
        self.n = n
        return n

    def _fetch(self, fetch, view, lb, a: int, b: int, neg: Optional[Tensor]):
        """Dispatch micro-batch ``[a, b)`` into ``view`` (every rank, possibly empty); its neighbour lookup."""
        ledger = view.counters.ledger  # bytes handed to the exchanges, counted at the collectives
        before = ledger["dispatch"] + ledger["requests"]
        t0 = time.perf_counter()
        if a == b:
            if fetch.exchange is not None:  # events per rank: the owners' lookups are collectives too
                fetch.exchange.lookup(fetch.host.src[:0], True)
            view.fetch(fetch.host.src[:0])
            found = None
        else:
            o = lb.batch_start
            found = fetch.fetch_batch(a, b, neg[lb.negative_set, a - o:b - o], True, placement=view)
        if self.n is None and a < b:
            self.samples.append((b - a, ledger["dispatch"] + ledger["requests"] - before, time.perf_counter() - t0))
        # events per rank: the lookup's edges and mailbox, handed to the thread that computes the micro-batch
        return found, (None if fetch.exchange is None else fetch.exchange.carried())

    def share(self, lb, ctx, fetch, compute, state, batch_size: int, world_size: int,
              device: torch.device) -> Tensor:
        r"""Trainer ``lb.trainer``'s share of the step loss, :math:`\sum_m \ell_m |m| / (|B_g| j k)`,
        its micro-batches' dispatches pipelined with their computation; queues one merged write.

        Args:
            lb (LocalBatch): the local batch; ctx (StepContext): the step's context.
            fetch (PartitionedFetch): the trainer's dispatch (its neighbour lookups, the host stream).
            compute (callable): ``(micro-batch, negatives, ctx) -> weighted loss`` (the trainer's).
            state (MemoryState): reads the table of the view being computed.
            batch_size, world_size, device: of the trainer.
        """
        n = self._count(ctx.iteration, batch_size, world_size, device)
        ranges = micro_ranges(lb.start, lb.end, n)
        neg = ctx.negatives[(lb.memory_copy, lb.position)] if lb.num_events else None
        for view in self.views:  # the counters are shared (one object); the groups may be set after the copy
            view.channel = self.placement.channel
        pending = ctx.pending.setdefault(lb.memory_copy, [])
        spans = ctx.spans.setdefault(lb.memory_copy, [])
        first = len(pending)
        losses = []
        found, carried = self._fetch(fetch, self.views[0], lb, *ranges[0], neg)
        try:
            for m, (a, b) in enumerate(ranges):
                nxt = None
                if m + 1 < n:
                    nxt = BackgroundCall(self._fetch, fetch, self.views[(m + 1) % 2], lb, *ranges[m + 1], neg)
                    nxt.start()
                try:
                    if a < b:
                        state.placement = self.views[m % 2]
                        ctx.lookups[lb.trainer] = found
                        if carried is not None:
                            fetch.exchange.adopt(carried)
                        micro = dataclasses.replace(lb, start=a, end=b)
                        o = lb.batch_start
                        t0 = time.perf_counter()
                        losses.append(compute(micro, neg[lb.negative_set, a - o:b - o], ctx))
                        if self.n is None:
                            self.computes.append((b - a, time.perf_counter() - t0))
                finally:
                    if nxt is not None:
                        found, carried = nxt.result()
        finally:
            state.placement = self.placement
        if len(pending) > first:  # one write per local batch, as with n = 1
            merged = merge_rows(pending[first:])
            del pending[first:], spans[first:]
            pending.append(merged)
            spans.append((lb.start, lb.end))
        if not losses:
            return torch.zeros((), dtype=torch.float64, device=device)
        return torch.stack(losses).sum() if len(losses) > 1 else losses[0]

