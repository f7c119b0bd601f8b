r"""``scheme="auto"``: the partition with the lowest predicted epoch time for this model and signal.

Which scheme is fastest depends on the model as much as on the graph: PSS
cuts only temporal edges but a recurrent model then runs its ranks one after
another; PTS cuts only spatial edges, which costs nothing for a model whose
first layer sees raw features only; PGC trades both; and on the black-box path
every snapshot is a collective, so a rank that owns whole snapshots (PSS)
leaves the others waiting. :func:`partition_auto` builds each candidate --
PSS, PTS, PTS with locality, PSS-TS (decomposed path only) and PGC -- and
predicts an epoch from the candidate's own communication plan:

.. math::
    t = \underbrace{\textstyle\sum_k \max_r W_{r,k}}_{\text{compute}}
      + \frac{\max_r B_r}{\beta} + C \cdot \ell

* **compute**: the work of each rank in each *dependent step* -- on the
  decomposed path the structure encoder over the rank's nodes and edges
  (weighted by the pattern's row widths), then one step per recurrent round
  (a chain cut into pieces is computed piece after piece,
  :meth:`~pyg_dynscale.partition.CommunicationPlan.temporal_rounds`); on the
  black-box path one step per snapshot, over the rank's *local* subgraph (its
  nodes plus the halo it recomputes) -- and the slowest rank of each step;
  plus the fixed cost of what runs one after another: on the decomposed path
  each dependent step of a recurrent scan (:math:`s` per step, the longest
  piece of each round), on the black-box path each call of the module
  (:math:`c` per call, and :math:`g` per state component gathered and
  scattered when the rank holds part of a snapshot);
* **bytes**: the most any rank sends in an epoch (forward and backward), from
  the plan (:class:`~pyg_dynscale.partition.CommunicationPlan` or
  :class:`~pyg_dynscale.partition.halo_plan.StatePlan`), over bandwidth
  :math:`\beta`;
* **collectives**: the exchanges an epoch issues (forward and backward; on the
  black-box path, per snapshot and state component), at latency :math:`\ell` each.

The counts of the compute term (owned rows, aggregated edges, halo rows per
rank; time-encoder rows and the longest piece per round and rank) are
:func:`~pyg_dynscale.partition.costs.epoch.epoch_counts`, the same the round-aware workload model of
PGC's round balance prices (:mod:`~pyg_dynscale.partition.costs.rounds`, its own fitted constants):
one count, two sets of constants.

The constants (:class:`CostModel`) default to measured values for the device
type (``"cpu"``: loopback gloo on 2-4 processes; ``"cuda"``: NCCL within a
machine) and can be given. The result is the chosen candidate's partition,
its :attr:`~pyg_dynscale.partition.Partition.meta` extended with ``"auto"``:
the choice, the path, the constants and every candidate's predicted costs
(``pyg-dynscale partition`` and ``train`` print them).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch
from torch import Tensor

from ...errors import PartitionError
from ..halo_plan import HaloDepth, StatePlan
from ..partition import Partition
from ..pattern import BlockPattern, DependencyPattern
from ..plan import CommunicationPlan
from ..costs.epoch import epoch_counts
from ..pgc.pipeline import partition_pgc
from .snapshot_sequence import partition_pss, partition_pss_ts, partition_pts

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal

__all__ = ["CostModel", "BlackBoxSpec", "CandidateCost", "partition_auto", "predict_cost", "AUTO_CANDIDATES"]

#: the schemes ``auto`` compares (``pts-loc``: PTS with the Cuthill-McKee locality order)
AUTO_CANDIDATES = ("pss", "pts", "pts-loc", "pss-ts", "pgc")


@dataclass(frozen=True)
class CostModel:
    r"""Constants of the predicted epoch time.

    Attributes:
        unit_s (float): seconds per unit of work (a node or an edge, times one
            element of row width).
        bandwidth (float): bytes per second one rank sends.
        latency_s (float): seconds per collective (including the wait for the
            slowest rank).
        call_s (float): seconds per call of the user's module on the
            black-box path (Python and kernel-launch overhead of one snapshot).
        step_s (float): seconds per dependent step of a recurrent block on
            the decomposed path (one cell call over the step's rows, forward
            and backward), on the critical path: the longest piece of each
            round on its slowest rank.
        route_s (float): seconds per state component a black-box call
            gathers and scatters because the rank holds part of the snapshot
            (a whole snapshot that continues on the same rank passes its state
            unchanged).
    """

    unit_s: float
    bandwidth: float
    latency_s: float
    call_s: float = 0.0
    step_s: float = 0.0
    route_s: float = 0.0

    @classmethod
    def for_device(cls, device: str = "cpu") -> "CostModel":
        """Defaults by device type. ``"cpu"``: fitted by
        ``benchmarks/bench_auto.py --calibrate`` to 2-rank gloo epochs on the
        project's 2-core machines (docs/partitioning.md has the table).
        ``"cuda"``: NCCL within a machine (~30 us a collective, ~50 GB/s),
        ~2 ps per element, ~0.1 ms per call or dependent step (kernel
        launches): estimates, not measured on a GPU yet (docs/gpu.md)."""
        if str(device).startswith("cuda"):
            return cls(unit_s=2e-12, bandwidth=5e10, latency_s=3e-5, call_s=1e-4, step_s=1e-4, route_s=5e-5)
        return cls(unit_s=1.8e-8, bandwidth=3.3e8, latency_s=1.4e-3, call_s=3e-3, step_s=5.4e-4, route_s=6.8e-4)


@dataclass(frozen=True)
class BlackBoxSpec:
    """What ``auto`` needs of a model on the black-box path: its halo depth
    and state widths (from :meth:`~pyg_dynscale.nn.snapshot_model.SnapshotModel.probe`),
    the input width and the element size."""

    depth: HaloDepth
    state_widths: tuple
    in_channels: int
    bytes_per_element: int = 4

    def pattern(self) -> DependencyPattern:
        """A dependency pattern with the same bytes per cut edge, for PGC's
        edge weights: input rows for the feature hops, state rows for the state
        hops, the state handed on along time."""
        W = int(sum(self.state_widths))
        whole = 1  # a depth of None reads the whole snapshot: at least one hop of each
        x_hops = self.depth.x if self.depth.x is not None else whole
        s_hops = max((h if h is not None else whole for h in self.depth.state), default=0) if W else 0
        widths = (max(self.in_channels, 1),) * x_hops + (W,) * s_hops
        return DependencyPattern((BlockPattern(widths, "recurrent" if W else "none", W, max(W, 1)),),
                                 self.bytes_per_element, "blackbox")


@dataclass
class CandidateCost:
    """A candidate's predicted epoch (seconds) and what it is made of."""

    scheme: str
    predicted_s: float
    compute_s: float
    comm_s: float
    latency_s: float
    bytes_max_rank: int
    bytes_total: int
    collectives: int
    steps: int
    partition_s: float
    critical_steps: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _sent_per_rank(exchanges: Sequence[Any], R: int) -> Tensor:
    """``[R]`` bytes each rank sends per epoch (forward and backward, static rows excluded)."""
    out = torch.zeros(R, dtype=torch.float64)
    for e in exchanges:
        if e.static or e.num_rows == 0:
            continue
        c = e.counts().to(torch.float64)
        rows = c.sum(1) - c.diagonal()
        out += 2 * rows * e.width * e.bytes_per_element
    return out


def _decomposed_cost(signal: "DynamicGraphSignal", part: Partition, pattern: DependencyPattern,
                     cost: CostModel) -> tuple:
    """``(compute_s, bytes per rank, collectives, rounds, total bytes, critical steps)`` on the decomposed path."""
    R = part.num_parts
    plan = CommunicationPlan.build(signal, part, pattern)
    # the counts the round-aware model prices too (costs/epoch.py): one count, two sets of constants
    c = epoch_counts(signal, part, pattern)
    # a rank's structure encoder also transforms the halo rows it receives (its structure set is owned + halo)
    spatial = sum(sum(b.spatial_widths) for b in pattern.blocks)
    structure = (c.owned + c.halo + c.edges) * max(spatial, 1)  # [R]
    time_w = sum(b.time_width for b in pattern.blocks)
    n_recurrent = c.recurrent
    rounds = c.num_rounds  # plan.temporal_rounds() with a recurrent block, else 1
    critical = c.critical_steps()
    # a chain in pieces: the pieces at depth k wait for depth k-1 on other ranks
    time_s = float(c.time_rows.max(1).values.sum()) * time_w
    compute = (float(structure.max()) + time_s) * cost.unit_s + n_recurrent * critical * cost.step_s
    collectives = 0
    for e in plan:
        if e.static:
            continue
        collectives += (rounds - 1 if e.kind == "temporal" and pattern.blocks[e.block].time_kind == "recurrent"
                        else 1)
    collectives = 2 * collectives + 1  # forward and backward, and the gradient sum
    total = plan.bytes_by_kind()["total"]
    return compute, _sent_per_rank(list(plan), R), collectives, rounds, total, critical


def _blackbox_cost(signal: "DynamicGraphSignal", part: Partition, spec: BlackBoxSpec, cost: CostModel) -> tuple:
    """``(compute_s, bytes per rank, collectives, snapshots, total bytes, calls)`` on the black-box path.

    Each rank calls the module once per snapshot it has local nodes in (its
    nodes plus the halo it recomputes); a snapshot whose states cross ranks
    starts with an exchange, where every rank waits for the slowest, so the
    compute time is the sum over the stretches between exchanges of the
    slowest rank's work in the stretch."""
    R = part.num_parts
    T = signal.num_snapshots
    work = torch.zeros(T, R, dtype=torch.float64)
    sync = torch.zeros(T, dtype=torch.bool)
    exchanges: list = []
    W = max(int(sum(spec.state_widths)), 1) + spec.in_channels
    for r in range(R):
        plan = StatePlan(signal, part.owner, R, spec.depth, spec.state_widths, r, spec.bytes_per_element)
        for t, s in enumerate(plan.steps):
            if s.num_local:
                routes = sum(not route.identity for route in s.routes)
                work[t, r] = (s.num_local + s.edge_index.shape[1]) * W * cost.unit_s + cost.call_s + routes * cost.route_s
        if r == 0:  # the exchanges, and the snapshots that start with one, are the same on every rank
            exchanges = list(plan)
            sync = torch.tensor([any(route.active for route in s.routes) for s in plan.steps], dtype=torch.bool)
    compute, acc = 0.0, torch.zeros(R, dtype=torch.float64)
    for t in range(T):
        if bool(sync[t]):
            compute += float(acc.max())
            acc.zero_()
        acc += work[t]
    compute += float(acc.max())
    collectives = 2 * sum(1 for e in exchanges if e.num_rows) + 1
    total = sum(2 * e.row_bytes for e in exchanges)
    return compute, _sent_per_rank(exchanges, R), collectives, T, total, T


def predict_cost(signal: "DynamicGraphSignal", part: Partition, pattern: Optional[DependencyPattern] = None,
                 blackbox: Optional[BlackBoxSpec] = None, cost: Optional[CostModel] = None,
                 name: Optional[str] = None) -> CandidateCost:
    """The predicted epoch of ``part`` for a decomposed model's ``pattern``, or
    a black-box model described by ``blackbox`` (module doc)."""
    cost = cost or CostModel.for_device("cpu")
    if blackbox is not None:
        compute, sent, collectives, steps, total, critical = _blackbox_cost(signal, part, blackbox, cost)
    elif pattern is not None:
        compute, sent, collectives, steps, total, critical = _decomposed_cost(signal, part, pattern, cost)
    else:
        raise PartitionError("pattern", "is None and no black-box spec was given.",
                             "pass the model's dependency pattern (decomposed path) or a BlackBoxSpec.")
    comm = float(sent.max()) / cost.bandwidth if sent.numel() else 0.0
    lat = collectives * cost.latency_s
    return CandidateCost(name or part.scheme, compute + comm + lat, compute, comm, lat, int(sent.max()),
                         int(total), int(collectives), int(steps), float(part.seconds), int(critical))


def _candidate(signal: "DynamicGraphSignal", name: str, R: int, pattern: Optional[DependencyPattern],
               seed: int) -> Partition:
    if name == "pss":
        return partition_pss(signal, R)
    if name == "pts":
        return partition_pts(signal, R)
    if name == "pts-loc":
        return partition_pts(signal, R, locality=True)
    if name == "pss-ts":
        return partition_pss_ts(signal, R)
    if name == "pgc":
        return partition_pgc(signal, R, pattern, seed=seed)
    raise PartitionError("candidates", f"has {name!r}.", f"use names from {AUTO_CANDIDATES}.")


def partition_auto(signal: "DynamicGraphSignal", num_parts: int, pattern: Optional[DependencyPattern] = None, *,
                   blackbox: Optional[BlackBoxSpec] = None, cost: Optional[CostModel] = None, seed: int = 0,
                   candidates: Optional[Sequence[str]] = None) -> Partition:
    r"""The candidate with the lowest predicted epoch time (module doc).

    Args:
        signal: the signal.
        num_parts: :math:`R`.
        pattern: a decomposed model's dependency pattern.
        blackbox: a black-box model's :class:`BlackBoxSpec` (then PSS-TS,
            which needs a structure / time split, is not a candidate, and PGC
            weighs edges with :meth:`BlackBoxSpec.pattern`).
        cost: the constants (default :meth:`CostModel.for_device` ``("cpu")``).
        seed: PGC's seed.
        candidates: the schemes to compare (default :data:`AUTO_CANDIDATES`).

    Returns:
        The chosen partition; ``meta["auto"]`` holds the choice and every
        candidate's :class:`CandidateCost`.
    """
    if pattern is None and blackbox is None:
        raise PartitionError("pattern", "is needed by scheme='auto' (costs come from the model's plan).",
                             "pass model.dependency_pattern(), or a BlackBoxSpec for a black-box model.")
    if num_parts < 1:
        raise PartitionError("num_parts", f"is {num_parts}.", "use at least one part.")
    t0 = time.perf_counter()
    cost = cost or CostModel.for_device("cpu")
    names = list(candidates or AUTO_CANDIDATES)
    if blackbox is not None:
        names = [n for n in names if n != "pss-ts"]
    if num_parts == 1:  # one part: every scheme gives the same (trivial) partition
        names = names[:1]
    pgc_pattern = pattern if pattern is not None else blackbox.pattern()
    rows, parts = [], {}
    for name in names:
        part = _candidate(signal, name, num_parts, pgc_pattern, seed)
        parts[name] = part
        rows.append(predict_cost(signal, part, pattern if blackbox is None else None, blackbox, cost, name))
    best = min(rows, key=lambda c: (c.predicted_s, names.index(c.scheme)))
    chosen = parts[best.scheme]
    meta = dict(chosen.meta)
    meta["auto"] = {"chosen": best.scheme, "path": "blackbox" if blackbox is not None else "decomposed",
                    "cost_model": asdict(cost), "candidates": [c.to_dict() for c in rows],
                    "seconds": time.perf_counter() - t0}
    return dataclasses.replace(chosen, meta=meta, seconds=time.perf_counter() - t0)


def describe_auto(meta: dict) -> str:
    """One line per candidate: predicted epoch and its parts (for reports)."""
    a = meta["auto"]
    lines = [f"auto chose {a['chosen']} ({a['path']} path): predicted epoch = compute + bytes / bandwidth + "
             f"collectives x latency"]
    for c in sorted(a["candidates"], key=lambda c: c["predicted_s"]):
        mark = "*" if c["scheme"] == a["chosen"] else " "
        lines.append(f" {mark} {c['scheme']:8s} {1e3 * c['predicted_s']:9.2f} ms = {1e3 * c['compute_s']:8.2f} + "
                     f"{1e3 * c['comm_s']:7.2f} + {1e3 * c['latency_s']:7.2f}   ({c['bytes_max_rank'] / 1e6:.3f} MB "
                     f"max rank, {c['collectives']} collectives, {c['steps']} rounds/snapshots, "
                     f"{c.get('critical_steps', 0)} dependent steps)")
    return "\n".join(lines)

