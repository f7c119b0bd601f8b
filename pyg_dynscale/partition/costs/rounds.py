r"""Round-aware workload model: what the distributed runtime pays per rank.

The counting models of :mod:`.workload` give every vertex-time node an
additive cost, so a rank's load is a sum over the nodes it owns. The
decomposed runtime (:mod:`pyg_dynscale.distributed.decomposed_engine`) does
not pay that: a temporal sequence whose appearances have different owners
is cut into *pieces*, and the recurrent time encoder scans them in
*rounds* -- round :math:`k` scans, on every rank at once, the pieces with
:math:`k` pieces before them (:func:`~pyg_dynscale.partition.plan.segment_depth`),
and waits for the states the round :math:`k-1` pieces ended with. A chain
cut into :math:`r` pieces is :math:`r` dependent steps. Inside a round a
rank runs one masked scan over its pieces (:mod:`pyg_dynscale.nn.packing`):
one step per position of its *longest* piece (the batch shrinks as shorter
pieces end), so a round costs its steps as well as its rows.

Per rank :math:`r` and round :math:`k` the model predicts

.. math::
    s_r &= c_\text{row} |V_r| + c_\text{edge} |E_r| + c_\text{halo} |H_r|
    \quad\text{(structure encoder)}\\
    u_{k,r} &= b \,\big(c_\text{time} n_{k,r} + c_\text{step} L_{k,r}
               + c_\text{call} [n_{k,r} > 0]\big)
    \quad\text{(round } k\text{ of the time encoder)}

with :math:`|V_r|` the owned vertex-time nodes, :math:`|E_r|` the spatial
edges into them, :math:`|H_r|` the halo rows (in-neighbours owned
elsewhere), :math:`n_{k,r}` the rows of the depth-:math:`k` pieces whose time
owner is :math:`r`, :math:`L_{k,r}` the longest of them, and :math:`b` the
number of recurrent blocks. The per-rank compute is
:math:`t_r = s_r + \sum_k u_{k,r}` (what ``bench_distributed`` measures as
compute and whose max / min is :math:`\lambda`), and the epoch's critical
path is :math:`\max_r s_r + \sum_k \max_r u_{k,r}` (ranks wait for each other
in every round's exchange).

The constants are per kind of work (structure rows, aggregated edges, halo
rows, recurrent rows, scan steps, round calls). :meth:`RoundWorkload.fit`
fits them by non-negative least squares on relative error from measured
per-rank compute (``benchmarks/bench_distributed.py --fit-rounds``): six
constants that the runtime's cost is linear in, per kind, rather than DGC's
MLPs (§4.2), because the features here are already the runtime's operation
counts and the per-rank profiles are few (tens per model), too few to train
a ``5 -> 256 -> 256 -> 256 -> 1`` network without over-fitting.
:data:`DEFAULT_CONSTANTS` were fitted that way on the 2-core CPU machine of
docs/distributed.md (relative units; only ratios matter to the balancer).

The counts are :func:`~pyg_dynscale.partition.costs.epoch.epoch_counts`, the same that ``scheme="auto"``
prices with its own constants (:class:`~pyg_dynscale.partition.schemes.auto.CostModel`, seconds): one count
of the critical path, two sets of constants. This model prices the rounds of
recurrent scans only (its constants were fitted to T-GCN and MPNN-LSTM): a
pattern without a recurrent block has no round features here, while ``auto``
also charges its attention / window time encoder's rows as one round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch
from torch import Tensor

from ..metrics import load_imbalance
from .epoch import epoch_counts
from .workload import WorkloadModelError

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

__all__ = ["RoundFeatures", "RoundPrediction", "RoundWorkload", "round_features", "predict_round_times",
           "DEFAULT_CONSTANTS"]

#: feature names: structure encoder per rank, then per round and rank
STRUCTURE_FEATURES = ("rows", "edges", "halo")
ROUND_FEATURES = ("time_rows", "steps", "calls")


@dataclass
class RoundFeatures:
    r"""Operation counts of a partition.

    Attributes:
        structure (Tensor): ``[R, 3]`` float64 per rank: owned rows
            :math:`|V_r|`, spatial edges into them :math:`|E_r|`, halo rows :math:`|H_r|`.
        rounds (Tensor): ``[D, R, 3]`` float64 per round and rank: recurrent
            rows :math:`n_{k,r}`, longest piece :math:`L_{k,r}`, a call
            :math:`[n_{k,r} > 0]` (already multiplied by the recurrent blocks).
    """

    structure: Tensor
    rounds: Tensor

    @property
    def num_rounds(self) -> int:
        return int(self.rounds.shape[0])

    def per_rank(self) -> Tensor:
        """``[R, 6]``: structure counts, then the round counts summed over rounds."""
        return torch.cat([self.structure, self.rounds.sum(0)], 1)


@dataclass
class RoundPrediction:
    r"""Predicted times of a partition (units of the model's constants).

    Attributes:
        structure (Tensor): ``[R]`` structure-encoder time :math:`s_r`.
        per_round (Tensor): ``[D, R]`` time-encoder time :math:`u_{k,r}` of each round.
        per_rank (Tensor): ``[R]`` compute :math:`t_r = s_r + \sum_k u_{k,r}`.
        epoch (float): critical path :math:`\max_r s_r + \sum_k \max_r u_{k,r}`.
    """

    structure: Tensor
    per_round: Tensor
    per_rank: Tensor = field(init=False)
    epoch: float = field(init=False)

    def __post_init__(self) -> None:
        self.per_rank = self.structure + self.per_round.sum(0)
        rounds = float(self.per_round.max(1).values.sum()) if self.per_round.numel() else 0.0
        self.epoch = float(self.structure.max()) + rounds

    @property
    def divergence(self) -> float:
        r""":math:`\lambda = \max_r t_r / \min_r t_r` (:func:`~pyg_dynscale.partition.metrics.load_imbalance`)."""
        return load_imbalance(self.per_rank)


def round_features(signal: "DynamicGraphSignal", part: Any, pattern: Any = None,
                   num_parts: Optional[int] = None) -> RoundFeatures:
    r"""The operation counts of :class:`RoundWorkload` for a partition:
    :func:`~pyg_dynscale.partition.costs.epoch.epoch_counts` as ``structure [R, 3]`` and, with a
    recurrent block, ``rounds [D, R, 3]`` (rows, longest piece, a call; times
    the recurrent blocks).

    Args:
        signal: the dynamic graph (:math:`N` vertex-time nodes).
        part: a :class:`~pyg_dynscale.partition.partition.Partition` (its
            ``owner`` for the structure encoder, ``temporal_owner`` for the
            time encoder) or an owner tensor ``[N]``.
        pattern: the model's dependency pattern (which blocks are recurrent,
            whether there are spatial aggregations); ``None``: one recurrent block.
        num_parts: :math:`R` when ``part`` is a tensor (default ``owner.max() + 1``).
    """
    c = epoch_counts(signal, part, pattern, num_parts)
    structure = torch.stack([c.owned, c.edges, c.halo], 1)
    if c.recurrent == 0 or signal.supergraph().num_nodes == 0:  # the rounds of recurrent scans only (module doc)
        return RoundFeatures(structure, torch.zeros(0, structure.shape[0], 3, dtype=torch.float64))
    calls = (c.time_rows > 0).to(torch.float64)
    return RoundFeatures(structure, torch.stack([c.time_rows, c.longest, calls], 2) * c.recurrent)

#: fitted (:meth:`RoundWorkload.fit`) on 96 per-rank compute times of this
#: runtime (T-GCN and MPNN-LSTM-DGC, hidden 16, on CollegeMsg and bitcoin-otc,
#: 4 gloo ranks on the shared 2-core CPU machine, six PSS / PTS / PSS-TS /
#: PGC partitions each); relative units, a round call = 1 (about 1 ms there).
#: Rows and edges came out 0: on graphs of ~23k vertex-time nodes a rank's
#: per-row work is small next to the per-step and per-call overhead of the
#: scans (refit for larger graphs or another device; mean error of the fit
#: 44%, 24-26% per model, on a loaded machine)
DEFAULT_CONSTANTS = {"row": 0.0, "edge": 0.0, "halo": 0.0697, "time": 0.0152, "step": 0.4307, "call": 1.0}


@dataclass
class RoundWorkload:
    r"""Per-kind cost constants of the round-aware model (module doc).

    Args:
        row, edge, halo: structure encoder per owned row, aggregated spatial
            edge and halo row.
        time, step, call: time encoder per recurrent row, scan step (position
            of a round's longest piece) and round call.
        meta: how the constants were obtained (fit residuals, sample counts).

    ``RoundWorkload(step=0, call=0)`` ignores rounds: it is the additive
    counting model (rows + edges + recurrent rows).
    """

    row: float = DEFAULT_CONSTANTS["row"]
    edge: float = DEFAULT_CONSTANTS["edge"]
    halo: float = DEFAULT_CONSTANTS["halo"]
    time: float = DEFAULT_CONSTANTS["time"]
    step: float = DEFAULT_CONSTANTS["step"]
    call: float = DEFAULT_CONSTANTS["call"]
    meta: dict = field(default_factory=dict)

    NAMES = ("row", "edge", "halo", "time", "step", "call")

    def __post_init__(self) -> None:
        for n in self.NAMES:
            v = getattr(self, n)
            if not isinstance(v, (int, float)) or not (v >= 0) or v == float("inf"):
                raise WorkloadModelError(f"RoundWorkload.{n} must be a finite number >= 0, got {v!r}.")

    def constants(self) -> Tensor:
        return torch.tensor([float(getattr(self, n)) for n in self.NAMES], dtype=torch.float64)

    def ignoring_rounds(self) -> "RoundWorkload":
        """The same constants without the round terms (steps and calls): the
        additive model that the old balance objective amounts to."""
        return RoundWorkload(self.row, self.edge, self.halo, self.time, 0.0, 0.0, meta={"rounds": "ignored"})

    def predict_features(self, f: RoundFeatures) -> RoundPrediction:
        c = self.constants()
        s = f.structure @ c[:3]
        u = f.rounds @ c[3:] if f.rounds.numel() else torch.zeros(0, f.structure.shape[0], dtype=torch.float64)
        return RoundPrediction(s, u)

    def predict(self, signal: "DynamicGraphSignal", part: Any, pattern: Any = None,
                num_parts: Optional[int] = None) -> RoundPrediction:
        """Predicted per-rank and per-round times of ``part`` (see :func:`round_features`)."""
        return self.predict_features(round_features(signal, part, pattern, num_parts))

    @classmethod
    def fit(cls, features: Sequence[RoundFeatures], seconds: Sequence[Tensor], *,
            per_rank_overhead: bool = False) -> "RoundWorkload":
        r"""Non-negative least squares on relative error.

        Args:
            features: one :class:`RoundFeatures` per measured partition.
            seconds: ``[R]`` measured compute of each rank of that partition.

        Rows are scaled by :math:`1/t_r`, so small and large ranks count alike;
        a coefficient that comes out negative is fixed at 0 and the rest
        refitted (the active-set rule of Lawson-Hanson, enough for 6 unknowns).
        ``meta`` holds the fit's mean absolute percentage error and sample count.
        """
        if len(features) != len(seconds) or not features:
            raise WorkloadModelError("fit needs one [R] timing tensor per RoundFeatures, at least one.")
        X = torch.cat([f.per_rank() for f in features], 0)
        t = torch.cat([torch.as_tensor(s, dtype=torch.float64).flatten() for s in seconds])
        if X.shape[0] != t.numel():
            raise WorkloadModelError(f"{X.shape[0]} ranks of features but {t.numel()} timings.")
        if bool((t <= 0).any()):
            raise WorkloadModelError("timings must be positive (the fit divides by them).")
        A = X / t[:, None]
        y = torch.ones_like(t)
        active = list(range(A.shape[1]))
        coef = torch.zeros(A.shape[1], dtype=torch.float64)
        for _ in range(A.shape[1]):
            active = [j for j in active if bool(A[:, j].abs().sum() > 0)]
            if not active:
                break
            sol = torch.linalg.lstsq(A[:, active], y[:, None]).solution.flatten()
            if bool((sol >= 0).all()):
                coef.zero_()
                coef[active] = sol
                break
            active = [j for j, v in zip(active, sol.tolist()) if v > 0]
        pred = X @ coef
        err = float(((pred - t).abs() / t).mean())
        scale = float(coef[0]) if float(coef[0]) > 0 else float(coef.max()) or 1.0
        kw = {n: float(v) / scale for n, v in zip(cls.NAMES, coef.tolist())}
        return cls(**kw, meta={"mape": err, "samples": int(t.numel()), "seconds_per_unit": scale})


def predict_round_times(signal: "DynamicGraphSignal", part: Any, pattern: Any = None,
                        model: Optional[RoundWorkload] = None) -> RoundPrediction:
    r"""Predicted per-rank compute (:attr:`RoundPrediction.per_rank`), per-round
    time-encoder times (:attr:`RoundPrediction.per_round`) and the epoch's
    critical path of ``part`` under ``model`` (default :class:`RoundWorkload`)."""
    return (model or RoundWorkload()).predict(signal, part, pattern)
