r"""Bytes of windowed training handed to collectives: counted where each
collective is issued (a :class:`~pyg_dynscale.training.ByteLedger`), next
to what the window arithmetic predicts, as the
:class:`~pyg_dynscale.training.TrafficReport` of
``WindowTrainer.traffic()``.

Kinds (bytes of the buffers a rank hands to the collectives):

* ``features``: feature rows; windowed training sends none (every window is
  computed where its snapshots are, :mod:`~pyg_dynscale.windows.block_placement`).
* ``gradients``: ``DistributedDataParallel``'s gradient buckets, counted by
  its comm hook (:func:`~pyg_dynscale.training.gradients.sum_hook`), once
  per optimizer step.
* ``loss``: the epoch's step losses (8 bytes per step, one all-reduce at the
  epoch's end); with node mini-batches also the windows-with-targets counts
  (8 bytes per (node batch, global batch) pair).
* ``metrics``: ``evaluate()``'s sums; ``setup``: the broadcast of rank 0's
  parameters at construction (both outside the training epoch).

**Predicted** (per epoch, all ranks): every rank takes every optimizer step
of the epoch's plan (a rank without windows in a global batch backpropagates
a zero share), so with :math:`K` planned steps, :math:`P` bytes of trained
parameters and :math:`R` ranks: ``gradients`` :math:`= R K P` (DDP's buckets
hold each trained parameter's gradient once), ``loss`` :math:`= 8 R K` (plus
:math:`8 R` per node-batch pair), ``features`` :math:`= 0` -- the figure of
:func:`~pyg_dynscale.windows.placement_costs.placement_bytes` for the
``blocks`` and ``replicated`` placements, counted as buffer bytes handed to
the collective (a ring all-reduce puts about :math:`2(R-1)/R` of them on the
wire per rank).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

import torch

from ..training import ByteLedger, TrafficReport

__all__ = ["KINDS", "WindowBytes", "TrafficAccessor"]

#: the kinds of :class:`WindowBytes`, in the order of its state tensor
KINDS = ("features", "gradients", "loss", "metrics", "setup")
#: the attributes of the old ``trainer.traffic`` object (``windows.placement.Traffic``)
_OLD_FIELDS = KINDS + ("steps",)


class WindowBytes:
    r"""This rank's bytes by kind (module docstring), the last training
    epoch's and the running totals, and the optimizer steps taken under the
    group.

    Attributes:
        ledger (ByteLedger): the running totals, written where each collective is issued.
        steps (int): optimizer steps taken under a process group since construction.
    """

    def __init__(self) -> None:
        self.ledger = ByteLedger(KINDS)
        self.steps = 0
        #: the last training epoch: measured bytes by kind, and its plan (``steps``, ``pairs``)
        self._epoch: dict = {"measured": dict.fromkeys(KINDS, 0), "steps": 0, "pairs": 0}

    def begin_epoch(self) -> None:
        """A training epoch starts: its bytes are counted from here."""
        self.ledger.mark()

    def end_epoch(self, steps: int, pairs: int = 0) -> None:
        """The epoch ended after ``steps`` planned optimizer steps (and ``pairs`` node-batch pairs counted)."""
        self._epoch = {"measured": self.ledger.since(), "steps": int(steps), "pairs": int(pairs)}

    def report(self, param_bytes: int, world: int, all_reduce: Optional[Callable] = None) -> TrafficReport:
        r"""The last epoch's :class:`~pyg_dynscale.training.TrafficReport`, all
        ranks: ``all_reduce`` sums a host ``[kinds]`` int64 tensor over the
        ranks (``None``: one process)."""
        mine = torch.tensor([self._epoch["measured"].get(k, 0) for k in KINDS], dtype=torch.long)
        if all_reduce is not None:
            all_reduce(mine)
        measured = dict(zip(KINDS, (int(v) for v in mine.tolist())))
        K, R = self._epoch["steps"], (world if world > 1 else 0)
        predicted = {"features": 0, "gradients": R * K * int(param_bytes),
                     "loss": 8 * R * (K + self._epoch["pairs"]), "metrics": 0, "setup": 0}
        return TrafficReport(measured, predicted, steps=K, ranks=world, totals=self.counts())

    def counts(self) -> dict:
        """This rank's running totals by kind, with ``steps`` (what ``trainer.traffic`` held before 0.2)."""
        return {**{k: self.ledger[k] for k in KINDS}, "steps": self.steps}

    def state(self) -> torch.Tensor:
        """``[features, gradients, loss, metrics, setup, steps]`` int64 (a checkpoint's ``rank<r>/traffic``)."""
        c = self.counts()
        return torch.tensor([c[k] for k in _OLD_FIELDS], dtype=torch.long)

    def load_state(self, values: torch.Tensor) -> None:
        vals = [int(v) for v in values]
        totals = dict(zip(KINDS, vals[:len(KINDS)]))
        self.ledger.load_state_dict({"bytes": totals, "mark": dict(totals)})
        self.steps = vals[len(KINDS)]


class TrafficAccessor:
    r"""``trainer.traffic``: call it for the
    :class:`~pyg_dynscale.training.TrafficReport` (``trainer.traffic()``);
    reading the old attributes (``trainer.traffic.gradients``, ``.steps``,
    ``.as_dict()``, this rank's running totals) works for one release with a
    :class:`DeprecationWarning`."""

    __slots__ = ("_report", "_counts")

    def __init__(self, report: Callable[[], TrafficReport], counts: Callable[[], dict]) -> None:
        self._report, self._counts = report, counts

    def __call__(self) -> TrafficReport:
        return self._report()

    def __getattr__(self, name: str) -> Any:
        if name in _OLD_FIELDS or name == "as_dict":
            warnings.warn(f"trainer.traffic.{name} is deprecated: trainer.traffic() returns a TrafficReport "
                          f"(report['measured'][kind], report['totals'] for this rank's running totals).",
                          DeprecationWarning, stacklevel=2)
            counts = self._counts()
            return (lambda: dict(counts)) if name == "as_dict" else counts[name]
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<WindowTrainer.traffic: call it for the last epoch's TrafficReport; totals {self._counts()}>"

