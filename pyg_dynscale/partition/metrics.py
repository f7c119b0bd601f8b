r"""Quality metrics of a partition and a comparison table across schemes.

For a partition, a dependency pattern and a node cost :math:`c_v` (default
:math:`1 + \deg_\text{in}(v)`, i.e. vertex-time nodes plus aggregated edges):

* bytes per epoch by kind, forward + backward, from the
  :class:`~pyg_dynscale.partition.CommunicationPlan`;
* cut spatial edges (structure owners differ) and cut temporal edges (time
  owners differ);
* :math:`\lambda = \max_r L_r / \min_r L_r` with :math:`L_r = \sum_{o(v)=r} c_v`
  (:func:`load_imbalance`: ``inf`` if a rank has no load). For PSS-TS, the
  structure and time encoders are balanced separately; :math:`\lambda` is the worse of the two;
* per-rank vertex-time nodes and aggregated edges, and partitioning time.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor

from ..errors import PartitionError
from .partition import Partition
from .pattern import DependencyPattern
from .plan import CommunicationPlan
from .costs.node import resolve_node_cost

if TYPE_CHECKING:  # pragma: no cover
    from ..data.signal import DynamicGraphSignal


def load_imbalance(loads: Union[Tensor, np.ndarray, Sequence[float]]) -> float:
    r"""The workload divergence :math:`\lambda = \max_r L_r / \min_r L_r`
    (DGC §2.2.2) of per-rank loads ``[R]``: the one definition every balancer,
    metric and report uses.

    Returns ``inf`` when the least loaded rank has no load (all zeros included:
    :math:`0/0` is no balance either). Raises :class:`~pyg_dynscale.errors.PartitionError`
    for no ranks, a negative load or NaN (a load is a sum of costs :math:`\ge 0`;
    anything else is a caller's bug, not an imbalance).

    Args:
        loads: ``[R]`` tensor, array or sequence (any real dtype; compared in float64).
    """
    t = torch.as_tensor(loads, dtype=torch.float64)
    if t.numel() == 0:
        raise PartitionError("loads", "is empty: lambda needs at least one rank.", "pass one load per rank.")
    lo, hi = (float(v) for v in torch.aminmax(t))
    if math.isnan(lo) or math.isnan(hi) or lo < 0:
        raise PartitionError("loads", f"must be >= 0 and not NaN, got min {lo}, max {hi}.",
                             "pass per-rank sums of non-negative costs.")
    return math.inf if lo == 0 else hi / lo


@dataclass
class PartitionMetrics:
    """Metrics of one partition (see module docstring). ``to_dict`` is JSON-ready."""

    scheme: str
    num_parts: int
    pattern: str
    bytes_total: int
    bytes_spatial: int
    bytes_temporal: int
    bytes_redistribution: int
    bytes_forward: int
    cut_spatial_edges: int
    cut_temporal_edges: int
    lambda_: float
    lambda_structure: float
    lambda_time: float
    nodes_per_rank: list[int]
    edges_per_rank: list[int]
    seconds: float
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lambda"] = d.pop("lambda_")
        return d


def evaluate(signal: "DynamicGraphSignal", pattern: DependencyPattern, partition: Partition,
             workload: Any = None, plan: Optional[CommunicationPlan] = None) -> PartitionMetrics:
    """Metrics of ``partition`` for ``pattern`` on ``signal``.

    Args:
        workload: ``[N]`` cost per vertex-time node (default: ``1 + in-degree``).
        plan: a plan already built for these arguments (saves rebuilding it).
    """
    partition.check_signal(signal)
    sg = signal.supergraph()
    plan = plan or CommunicationPlan.build(sg, partition, pattern)
    b = plan.bytes_by_kind()
    fwd = plan.bytes_by_kind(forward_only=True)
    R = partition.num_parts
    own = partition.owner.to(sg.vertex.device)
    town = partition.temporal_owner.to(sg.vertex.device)
    s, d = sg.spatial_edge_index
    u, v = sg.temporal_edge_index
    cost = resolve_node_cost(signal, workload).to(sg.vertex.device)
    ls = torch.zeros(R, dtype=torch.float64, device=cost.device).index_add_(0, own, cost)
    lt = torch.zeros(R, dtype=torch.float64, device=cost.device).index_add_(0, town, cost)
    lam_s = load_imbalance(ls)
    lam_t = load_imbalance(lt)
    return PartitionMetrics(
        scheme=partition.scheme, num_parts=R, pattern=pattern.name,
        bytes_total=b["total"], bytes_spatial=b["spatial"], bytes_temporal=b["temporal"],
        bytes_redistribution=b["redistribution"], bytes_forward=fwd["total"],
        cut_spatial_edges=int((own[s] != own[d]).sum()), cut_temporal_edges=int((town[u] != town[v]).sum()),
        lambda_=max(lam_s, lam_t), lambda_structure=lam_s, lambda_time=lam_t,
        nodes_per_rank=torch.bincount(own, minlength=R).tolist(),
        edges_per_rank=torch.bincount(own[d], minlength=R).tolist(),
        seconds=float(partition.seconds),
        extra={k: v for k, v in partition.meta.items() if isinstance(v, (int, float, str, bool))},
    )


def compare(signal: "DynamicGraphSignal", pattern: DependencyPattern, partitions: Sequence[Partition],
            workload: Any = None) -> list[dict]:
    """One metrics row (``PartitionMetrics.to_dict()``) per partition, plus
    ``bytes_vs_best`` (total bytes / smallest total bytes in the table)."""
    rows = [evaluate(signal, pattern, p, workload).to_dict() for p in partitions]
    best = min((r["bytes_total"] for r in rows), default=0)
    for r in rows:
        r["bytes_vs_best"] = (r["bytes_total"] / best) if best > 0 else (1.0 if r["bytes_total"] == 0 else math.inf)
    return rows


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


DEFAULT_COLUMNS = ("scheme", "num_parts", "pattern", "bytes_total", "bytes_spatial", "bytes_temporal",
                   "bytes_redistribution", "cut_spatial_edges", "cut_temporal_edges", "lambda", "seconds")


def format_table(rows: Sequence[dict], columns: Sequence[str] = DEFAULT_COLUMNS, human: bool = True) -> str:
    """A fixed-width text table of ``rows`` (dicts); byte columns in KiB/MiB
    when ``human``."""
    cols = [c for c in columns if any(c in r for r in rows)]

    def fmt(c: str, v: Any) -> str:
        if v is None:
            return "-"
        if human and c.startswith("bytes") and "_vs_" not in c and isinstance(v, (int, float)):
            return format_bytes(float(v))
        if isinstance(v, float):
            return "inf" if math.isinf(v) else f"{v:.3f}"
        return str(v)

    cells = [[fmt(c, r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    line = "  ".join(c.rjust(w) for c, w in zip(cols, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(out)
