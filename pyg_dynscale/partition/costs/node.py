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
    """``workload`` as a checked ``[N]`` float64 tensor: ``None`` ->
    :func:`default_node_cost` (equal to ``LinearWorkload(1, 1)``'s, without
    loading the algorithms); anything else -> the ``node_costs`` of
    :func:`~pyg_dynscale.partition.costs.workload.resolve_workload`'s model
    (a tensor, a model, a saved model's path, ``"vertices"``, ...)."""
    N = signal.num_vertex_time_nodes
    if workload is None:
        return default_node_cost(signal)
    # the one resolver; imported here so that the metrics load without the algorithms when no workload is given
    from .workload import resolve_workload

    w = torch.as_tensor(resolve_workload(workload).node_costs(signal))
    if w.dim() != 1 or w.numel() != N:
        raise PartitionError("workload", f"must be a [{N}] cost per vertex-time node, got shape {list(w.shape)}.",
                             "Pass one non-negative cost per vertex-time node (gid order).")
    w = w.to(torch.float64).cpu()
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise PartitionError("workload", "costs must be finite and >= 0.")
    return w
