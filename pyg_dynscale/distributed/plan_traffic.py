r""":meth:`DistributedTrainer.traffic() <pyg_dynscale.distributed.DistributedTrainer.traffic>`'s
report: the bytes each rank handed to the collectives in the last epoch
(counted by the :class:`~.exchange.Communicator` per ``(block, phase, kind,
direction)`` and, for the gradient all-reduce, by a
:class:`~pyg_dynscale.training.ByteLedger`), summed over ranks in one host
all-reduce, next to the communication plan's prediction.
"""
from __future__ import annotations

from typing import Any

import torch

from ..training import TrafficReport

__all__ = ["PLAN_KINDS", "plan_traffic"]

#: the kinds of exchange the communication plan predicts
PLAN_KINDS = ("spatial", "temporal", "redistribution", "readout")


def _sum(counts: dict, kind: str) -> int:
    return int(sum(v for k, v in counts.items() if k[2] == kind))


def plan_traffic(plan: Any, counts: dict, *, grad_bytes: int, load_bytes: int, calls: int,
                 all_reduce_host: Any) -> TrafficReport:
    r"""The report of one epoch (a collective: every rank calls it).

    Args:
        plan: the :class:`~pyg_dynscale.partition.plan.CommunicationPlan`
            the trainer executes (its non-static exchanges are the epoch's).
        counts (dict): this rank's bytes by ``(block, phase, kind,
            direction)`` (``Communicator.bytes``).
        grad_bytes (int): this rank's bytes of the gradient all-reduce.
        load_bytes (int): this rank's bytes moved once at set-up.
        calls (int): collectives this rank issued.
        all_reduce_host: ``x -> sum over ranks`` of a host tensor.

    Returns:
        TrafficReport: ``measured`` / ``predicted`` by the plan's kinds;
        measured also ``stale_meta`` (in ``total``), ``norm`` and
        ``grad_sync`` (outside it: the plan predicts neither); ``exchanges``
        (per exchange, forward and backward, measured and predicted),
        ``load``, ``temporal_rounds``, ``collectives``.
    """
    rows = [(e.block, e.phase, e.kind) for e in plan if not e.static]
    vals = []
    for key in rows:
        vals += [counts.get(key + ("fwd",), 0), counts.get(key + ("bwd",), 0)]
    extra = [_sum(counts, "norm"), grad_bytes, load_bytes, calls, _sum(counts, "stale_meta")]
    t = all_reduce_host(torch.tensor(vals + extra, dtype=torch.float64)).long().tolist()
    measured = dict.fromkeys(PLAN_KINDS, 0)
    predicted = dict(measured)
    exchanges = []
    for i, key in enumerate(rows):
        e = plan.exchange(key[0], key[1])
        mf, mb = t[2 * i], t[2 * i + 1]
        measured[key[2]] += mf + mb
        predicted[key[2]] += e.forward_bytes + e.backward_bytes
        exchanges.append({"block": key[0], "phase": key[1], "kind": key[2], "measured_forward": mf,
                          "measured_backward": mb, "predicted_forward": e.forward_bytes,
                          "predicted_backward": e.backward_bytes})
    n = len(vals)
    measured["stale_meta"] = t[n + 4]  # the stale cache's masks (and global-D all-reduces); 0 when exact
    total = sum(measured.values())  # the plan's kinds and the stale masks: grad_sync and norm apart
    measured["norm"], measured["grad_sync"] = t[n], t[n + 1]
    return TrafficReport(measured, predicted, measured_total=total, exchanges=exchanges,
                         load={"measured": t[n + 2], "predicted": int(plan.load_bytes())},
                         temporal_rounds=plan.temporal_rounds(), collectives=t[n + 3])
