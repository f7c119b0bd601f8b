r"""Non-uniformity statistics of a dynamic graph (DGC §2.2.1)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .signal import DynamicGraphSignal


def coefficient_of_variation(values: Tensor) -> float:
    r"""Population :math:`\sigma / \mu`; 0 for an empty or all-zero input."""
    v = values.to(torch.float64)
    if v.numel() == 0 or float(v.mean()) == 0.0:
        return 0.0
    return float(v.std(unbiased=False) / v.mean())


def empirical_cdf(values: Tensor) -> tuple[Tensor, Tensor]:
    r"""Empirical CDF of ``values`` (any shape, flattened: :math:`n` samples),
    at each distinct value :math:`v_1 < \dots < v_k`:

    .. math::

        F(v_j) = \frac{|\{i : x_i \le v_j\}|}{n},

    so :math:`F(v_k) = 1` exactly.

    Returns:
        ``(values [k], cdf [k])``, both float64; two empty tensors for an
        empty input.
    """
    v = values.to(torch.float64).flatten()
    if v.numel() == 0:
        return v, v
    uniq, counts = torch.unique(v, sorted=True, return_counts=True)
    return uniq, torch.cumsum(counts, 0).to(torch.float64) / v.numel()


def _summary(values: Tensor) -> dict[str, float]:
    v = values.to(torch.float64)
    if v.numel() == 0:
        return {"min": 0.0, "max": 0.0, "mean": 0.0, "std": 0.0, "cv": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    q = torch.quantile(v, torch.tensor([0.5, 0.9, 0.99], dtype=torch.float64))
    return {
        "min": float(v.min()), "max": float(v.max()), "mean": float(v.mean()),
        "std": float(v.std(unbiased=False)), "cv": coefficient_of_variation(v),
        "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
    }


@dataclass(frozen=True)
class SignalStatistics:
    r"""How non-uniform a dynamic graph is.

    * **Spatial non-uniformity**: the number of edges varies between snapshots
      (``edges_per_snapshot``; its coefficient of variation ``cv_edges``).
    * **Temporal non-uniformity**: temporal sequences (a vertex's appearances)
      have different lengths (``sequence_lengths``; ``cv_sequence_lengths``).

    Attributes:
        nodes_per_snapshot (Tensor): ``[T]``.
        edges_per_snapshot (Tensor): ``[T]``.
        sequence_lengths (Tensor): ``[S]`` for each vertex that appears at all.
    """

    nodes_per_snapshot: Tensor
    edges_per_snapshot: Tensor
    sequence_lengths: Tensor
    num_temporal_edges: int

    @classmethod
    def from_signal(cls, signal: "DynamicGraphSignal") -> "SignalStatistics":
        sg = signal.supergraph()
        return cls(
            nodes_per_snapshot=signal.nodes_per_snapshot.cpu(),
            edges_per_snapshot=signal.edges_per_snapshot.cpu(),
            sequence_lengths=sg.sequence_lengths.cpu(),
            num_temporal_edges=sg.num_temporal_edges,
        )

    @property
    def cv_edges(self) -> float:
        return coefficient_of_variation(self.edges_per_snapshot)

    @property
    def cv_nodes(self) -> float:
        return coefficient_of_variation(self.nodes_per_snapshot)

    @property
    def cv_sequence_lengths(self) -> float:
        return coefficient_of_variation(self.sequence_lengths)

    def edges_cdf(self) -> tuple[Tensor, Tensor]:
        """Empirical CDF of the edges per snapshot (:func:`empirical_cdf`):
        ``(edge counts [k], fraction of the T snapshots with at most that many
        edges [k])``, float64."""
        return empirical_cdf(self.edges_per_snapshot)

    def sequence_length_cdf(self) -> tuple[Tensor, Tensor]:
        r"""Empirical CDF of the sequence lengths (DGC §2.2.1, temporal
        non-uniformity; :func:`empirical_cdf`): ``(lengths [k], fraction of the
        S sequences with at most that many appearances [k])``, float64. A
        sequence is a vertex that appears in at least one snapshot (lengths
        :math:`1 \dots T`); a vertex absent from every snapshot has none."""
        return empirical_cdf(self.sequence_lengths)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (used by ``pyg-dynscale inspect --json``)."""
        return {
            "snapshots": int(self.nodes_per_snapshot.numel()),
            "vertex_time_nodes": int(self.nodes_per_snapshot.sum()),
            "spatial_edges": int(self.edges_per_snapshot.sum()),
            "temporal_edges": int(self.num_temporal_edges),
            "sequences": int(self.sequence_lengths.numel()),
            "edges_per_snapshot": _summary(self.edges_per_snapshot),
            "nodes_per_snapshot": _summary(self.nodes_per_snapshot),
            "sequence_length": _summary(self.sequence_lengths),
        }
