r"""Byte accounting of :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer`: the bytes moved so far
(:meth:`TrafficReport.stats`) and the last training epoch's bytes next to what the id lists
predict (:meth:`TrafficReport.traffic`, with Sven's redundancy ratios :math:`\eta_1`,
:math:`\eta_2` for a partitioned memory).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["TrafficReport"]


class TrafficReport:
    """The traffic methods of :class:`~pyg_dynscale.ctdg.trainer.MemoryTrainer` (a mixin: they
    read the trainer's ``_traffic``, ``_epoch_traffic``, ``placement``, ``service`` and
    ``parallelism``)."""

    def stats(self) -> dict:
        """Bytes this process moved so far (:class:`~pyg_dynscale.ctdg.parallel.Traffic`), the
        memory service's read / write bytes (``service_read`` / ``service_write``) when it runs,
        and with a partitioned placement the bytes it handed to the exchanges (``dispatch``,
        ``requests``, ``aggregation``, ``counts``; evaluation's as ``eval_*``). The last training
        epoch's bytes next to their prediction: :meth:`traffic`."""
        out = self._traffic.as_dict()
        if self.service is not None:
            out.update(service_read=self.service.read_bytes, service_write=self.service.write_bytes)
        if self.placement is not None:  # all epochs, training and evaluation (eval_*) exchanges
            out.update(self.placement.totals)
        return out

    def traffic(self) -> dict:
        r"""Bytes of the last training epoch next to what the id lists predict (a collective
        under a process group: call it on every rank).

        Returns:
            dict: ``measured`` -- bytes this rank handed to the collectives, by kind:
            ``dispatch`` (memory + ``last_update`` rows it served to other ranks' batches),
            ``requests`` (the ids its batches asked of other owners), ``aggregation`` (id + row
            of each written root it sent to its owner), ``counts`` (the ``[M]`` count vectors
            before each exchange), ``gather`` (the replicated write-back's all-gathers, the
            aggregation of ``"replicated"``), ``gradients`` (DDP's all-reduce buffers) and
            ``total``; ``predicted`` -- the same kinds computed from the id lists (the
            ``[M, M]`` matrices of rows each trainer asks of / sends to each owner, gathered
            from every rank), the gradient buffers once per step; ``local`` (partitioned) --
            rows served from the rank's own store, not sent; ``redundancy`` (partitioned) --
            occurrences and distinct vertices of the dispatch and aggregation lists over all
            ranks and Sven's :math:`\eta_1`, :math:`\eta_2` (Eq. 1: duplicated / all occurrences);
            ``matrix`` (partitioned) -- the ``[M, M]`` dispatch and aggregation row counts.
        """
        e = self._epoch_traffic or {"gradients": 0, "gather": 0, "roots": [], "steps": 0}
        grad_bytes = sum(p.numel() * p.element_size() for p in self.optimizer_params if p.requires_grad)
        pred_grad = e["steps"] * grad_bytes if self._ddp is not None else 0
        kinds = ("dispatch", "requests", "aggregation", "counts", "gather")
        if self.placement is None:
            measured = dict.fromkeys(kinds, 0)
            predicted = dict(measured)
            measured["gather"] = measured["aggregation"] = e["gather"]
            predicted["gather"] = predicted["aggregation"] = self._predicted_gather(e["roots"])
            measured["gradients"], predicted["gradients"] = e["gradients"], pred_grad
            for d in (measured, predicted):
                d["total"] = sum(v for k, v in d.items() if k != "gather")
            return {"measured": measured, "predicted": predicted}
        p = self.placement
        plans = {k: self._all_gather_long(p.epoch["plan"][k]) for k in ("dispatch", "aggregation")}
        occ = self._all_gather_long(torch.tensor([p.epoch["occurrences"][k][x] for k in ("dispatch", "aggregation")
                                                  for x in (0, 1)], dtype=torch.long)).sum(0).tolist()
        measured = {**dict.fromkeys(kinds, 0), **p.epoch["sent"], "gradients": e["gradients"]}
        predicted = {**dict.fromkeys(kinds, 0), **p.predicted(plans), "gradients": pred_grad}
        for d in (measured, predicted):
            d["total"] = sum(d.values())
        eta = lambda n, u: (n - u) / n if n else math.nan  # noqa: E731
        return {"measured": measured, "predicted": predicted, "local": dict(p.epoch["local"]),
                "redundancy": {"dispatch_occurrences": occ[0], "dispatch_distinct": occ[1],
                               "aggregation_occurrences": occ[2], "aggregation_distinct": occ[3],
                               "eta1": eta(occ[0], occ[1]), "eta2": eta(occ[2], occ[3])},
                "matrix": plans}

    def _all_gather_long(self, x: Tensor) -> Tensor:
        """``[world, *x.shape]``: every rank's host tensor ``x`` (over the host group: nothing
        waits on the device; ``x`` itself on one process)."""
        if self.world_size == 1:
            return x.unsqueeze(0)
        import torch.distributed as dist

        out = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(out, x.contiguous(), group=self._host_group)
        return torch.stack(out)

    def _predicted_gather(self, roots: list) -> int:
        """The replicated write-back's all-gather bytes from the root counts of every rank of this
        rank's memory copy: per step the largest count (the padded buffer) times id + row + time."""
        i, j, _ = self.parallelism
        if self.world_size == 1 or i * j == 1:
            return 0
        every = self._all_gather_long(torch.tensor(roots, dtype=torch.long).view(-1))
        copy = self.rank // (i * j)
        group = every[copy * i * j:(copy + 1) * i * j]
        width = self.memory.memory_dim * self.memory.memory.element_size() + 16
        return int(group.max(0).values.sum()) * width if group.numel() else 0
