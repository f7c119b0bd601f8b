r"""Byte accounting of :class:`~pyg_dynscale.ctdg.MemoryTrainer`: the bytes handed to each
collective, counted where it is issued (a :class:`~pyg_dynscale.training.ByteLedger`:
DDP's gradient buckets, the replicated write-back's all-gathers, a partitioned memory's
``all_to_all_single`` buffers), the memory rows read and written on the rank itself, and
the last training epoch's report next to what the id lists predict
(:meth:`EventTraffic.report`, with Sven's redundancy ratios :math:`\eta_1`, :math:`\eta_2`
for a partitioned memory).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from ..training.traffic import ByteLedger, TrafficReport

__all__ = ["EventTraffic"]

#: the kinds of :meth:`EventTraffic.report` besides ``gradients``
KINDS = ("dispatch", "requests", "aggregation", "counts", "gather")
#: the running counters a checkpoint keeps, in its order
SAVED = ("memory_read", "memory_write", "gather", "gradients", "setup")


def all_gather_long(x: Tensor, world_size: int, group) -> Tensor:
    """``[world, *x.shape]``: every rank's host tensor ``x`` (over the host group ``group``:
    nothing waits on the device; ``x`` itself on one process)."""
    if world_size == 1:
        return x.unsqueeze(0)
    import torch.distributed as dist

    out = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(out, x.contiguous(), group=group)
    return torch.stack(out)


class EventTraffic:
    r"""The bytes one rank moves, by kind.

    Attributes:
        collectives (ByteLedger): bytes handed to collectives, written where each is issued:
            ``gradients`` (DDP's all-reduce buckets), ``setup`` (DDP's broadcast of rank 0's
            parameters), ``gather`` (the replicated write-back's all-gathered ids and rows), a
            partitioned memory's ``dispatch``, ``requests``, ``aggregation``, ``counts`` (and
            evaluation's as ``eval_<kind>``).
        local (ByteLedger): memory rows (+ ``last_update``) the rank read for its local batches
            (``memory_read``) and wrote into its copy (``memory_write``): no collective.
        last (dict or None): the last training epoch: its bytes by kind, the root rows of each
            write-back, its steps.
    """

    def __init__(self) -> None:
        self.collectives = ByteLedger(("gather", "gradients", "setup"))
        self.local = ByteLedger(("memory_read", "memory_write"))
        self.last: Optional[dict] = None

    def begin_epoch(self) -> None:
        self.collectives.mark()

    def end_epoch(self, roots: list, steps: int) -> None:
        self.last = {"bytes": self.collectives.since(), "roots": list(roots), "steps": steps}

    def saved(self) -> Tensor:
        """The running counters of :data:`SAVED` as an ``int64`` tensor (a checkpoint's)."""
        every = {**self.local.totals(), **self.collectives.totals()}
        return torch.tensor([every.get(k, 0) for k in SAVED], dtype=torch.long)

    def load(self, saved: Tensor) -> None:
        """The inverse of :meth:`saved`."""
        values = dict(zip(SAVED, (int(v) for v in saved)))
        for ledger in (self.local, self.collectives):
            state = ledger.state_dict()
            for k in list(state["bytes"]):
                if k in values:
                    state["bytes"][k] = state["mark"][k] = values[k]
            ledger.load_state_dict(state)

    def stats(self, service=None, placement=None) -> dict:
        """Bytes this process moved so far: :data:`SAVED`, the memory service's read / write bytes
        (``service_read`` / ``service_write``) when it runs, and with a partitioned placement the
        bytes it handed to the exchanges (``dispatch``, ``requests``, ``aggregation``, ``counts``;
        with events per rank ``events``, ``neighbors``, ``mailbox``; evaluation's as ``eval_*``)."""
        every = {**self.local.totals(), **self.collectives.totals()}
        out = {k: every.get(k, 0) for k in SAVED}
        if service is not None:
            out.update(service_read=service.read_bytes, service_write=service.write_bytes)
        if placement is not None:
            out.update(placement.counters.totals())
            from .event_exchange import EXCHANGE_KINDS  # events per rank's exchanges, when they ran

            out.update({k: v for k, v in every.items() if k.split("_", 1)[-1] in EXCHANGE_KINDS})
        return out

    def report(self, *, placement, gradient_bytes: int, distributed: bool, parallelism: tuple, rank: int,
               world_size: int, group, row_width: int, exchange=None, event_placement: str = "whole") -> TrafficReport:
        r"""The last training epoch's bytes over every rank, measured at the collectives and
        predicted from the id lists (a collective under a process group: call it on every rank).

        Args:
            placement: the partitioned memory, or ``None`` (replicated).
            gradient_bytes (int): bytes of the trained parameters (one all-reduce per step predicted).
            distributed (bool): whether DDP sums the gradients.
            parallelism, rank, world_size: the layout; group: the host group of the gathers.
            row_width (int): bytes of one all-gathered write-back row (id + memory + ``last_update``).
            exchange: events per rank's :class:`~pyg_dynscale.ctdg.event_exchange.EventExchange`
                (``events``, ``neighbors``, ``mailbox`` measured and predicted), or ``None``.
            event_placement (str): the placement in effect, reported as ``"event_placement"``.
        """
        e = self.last or {"bytes": {}, "roots": [], "steps": 0}
        got = e["bytes"]
        measured = {k: int(got.get(k, 0)) for k in KINDS}
        measured["gradients"] = int(got.get("gradients", 0))
        predicted = dict.fromkeys(KINDS, 0)
        predicted["gradients"] = e["steps"] * gradient_bytes if distributed else 0
        extra: dict = {}
        if placement is None:
            measured["aggregation"] = measured["gather"]  # the replicated write-back's exchange
            predicted["gather"] = predicted["aggregation"] = self._predicted_gather(
                e["roots"], parallelism, rank, world_size, group, row_width)
            skip = ("gather",)  # counted once, as aggregation
            local = None
        else:
            p = placement
            plans = {k: all_gather_long(p.epoch["plan"][k], world_size, group) for k in ("dispatch", "aggregation")}
            occ = all_gather_long(torch.tensor([p.epoch["occurrences"][k][x] for k in ("dispatch", "aggregation")
                                                for x in (0, 1)], dtype=torch.long), world_size, group).sum(0).tolist()
            predicted.update(p.predicted(plans))
            skip = ()
            local = dict(p.epoch["local"])
            eta = lambda n, u: (n - u) / n if n else math.nan  # noqa: E731
            if exchange is not None:
                from .event_exchange import EXCHANGE_KINDS

                gathered = {k: all_gather_long(exchange.epoch[k], world_size, group) for k in ("neighbors", "mailbox")}
                for k in EXCHANGE_KINDS:
                    measured[k] = int(got.get(k, 0))
                predicted.update(exchange.predicted(gathered))
            extra = {"redundancy": {"dispatch_occurrences": occ[0], "dispatch_distinct": occ[1],
                                    "aggregation_occurrences": occ[2], "aggregation_distinct": occ[3],
                                    "eta1": eta(occ[0], occ[1]), "eta2": eta(occ[2], occ[3])},
                     "matrix": plans}
        for d in (measured, predicted):
            d["total"] = sum(v for k, v in d.items() if k not in skip)
        mine = {"measured": measured, "predicted": predicted, **({"local": local} if local is not None else {})}
        summed = self._sum_over_ranks(mine, world_size, group)
        if local is not None:
            extra["local"] = summed["local"]
        extra["event_placement"] = event_placement
        return TrafficReport(summed["measured"], summed["predicted"], measured_total=summed["measured"]["total"],
                             predicted_total=summed["predicted"]["total"], rank=mine, **extra)

    @staticmethod
    def _sum_over_ranks(parts: dict, world_size: int, group) -> dict:
        """``{name: {kind: int}}`` summed over the ranks (one all-reduce of one host vector)."""
        keys = [(name, k) for name, d in parts.items() for k in d]
        if world_size == 1:
            return {name: dict(d) for name, d in parts.items()}
        import torch.distributed as dist

        vec = torch.tensor([parts[name][k] for name, k in keys], dtype=torch.long)
        dist.all_reduce(vec, group=group)
        out: dict = {name: {} for name in parts}
        for (name, k), v in zip(keys, vec.tolist()):
            out[name][k] = int(v)
        return out

    @staticmethod
    def _predicted_gather(roots: list, parallelism: tuple, rank: int, world_size: int, group,
                          row_width: int) -> int:
        """The replicated write-back's all-gather bytes from the root counts of every rank of this
        rank's memory copy: per step the largest count (the padded buffer) times id + row + time."""
        i, j, _ = parallelism
        if world_size == 1 or i * j == 1:
            return 0
        every = all_gather_long(torch.tensor(roots, dtype=torch.long).view(-1), world_size, group)
        copy = rank // (i * j)
        members = every[copy * i * j:(copy + 1) * i * j]
        return int(members.max(0).values.sum()) * row_width if members.numel() else 0
