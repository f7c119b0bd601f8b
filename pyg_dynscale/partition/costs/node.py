r"""Cost of each vertex-time node: what the balancers (PSS / PTS / PSS-TS,
PGC) and the load metrics weigh.

By default :math:`c_v = 1 + \deg_\text{in}(v)`: a rank's load is its
vertex-time nodes plus the spatial edges it aggregates. Kept apart from the
algorithms so that the metrics import without them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...errors import PartitionError

if TYPE_CHECKING:  # pragma: no cover
    from ...data.signal import DynamicGraphSignal


def default_node_cost(signal: "DynamicGraphSignal") -> Tensor:
    r"""``[N]`` float64 cost :math:`c_v = 1 + \deg_\text{in}(v)` of each
    vertex-time node (its own row plus the spatial edges it aggregates)."""
    sg = signal.supergraph()
    return 1.0 + torch.bincount(sg.spatial_edge_index[1], minlength=sg.num_nodes).to(torch.float64)


def resolve_node_cost(signal: "DynamicGraphSignal", workload: Any = None) -> Tensor:
    """``workload`` as a ``[N]`` float64 tensor: ``None`` -> :func:`default_node_cost`;
    a tensor -> checked; an object with ``node_cost(signal)`` -> called."""
    N = signal.num_vertex_time_nodes
    if workload is None:
        return default_node_cost(signal)
    if hasattr(workload, "node_cost") and not isinstance(workload, Tensor):
        workload = workload.node_cost(signal)
    w = torch.as_tensor(workload)
    if w.dim() != 1 or w.numel() != N:
        raise PartitionError("workload", f"must be a [{N}] cost per vertex-time node, got shape {list(w.shape)}.",
                             "Pass one non-negative cost per vertex-time node (gid order).")
    w = w.to(torch.float64).cpu()
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise PartitionError("workload", "costs must be finite and >= 0.")
    return w
