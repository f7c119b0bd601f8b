r"""A non-finite training loss stops the run: every trainer's ``train_epoch()``
hands the batch losses it read back to :func:`check_batch_losses`, which raises
:class:`~pyg_dynscale.errors.NonFiniteLossError` naming the epoch and the first
batch whose loss is NaN or infinite (and, under a process group, the ranks whose
share was), with the fix.

**What it costs.** Nothing per batch: a trainer keeps its batch losses on the
device and reads them back once, at the epoch's end, summed over the ranks by
the one all-reduce it already issues (the CLI's progress and the epoch's mean
need them anyway); the check scans those floats on the host. Since every rank
reads the same sums, every rank finds the same first batch and raises together:
no rank waits in a collective for one that stopped. Only the error path talks
to the other ranks (one host all-reduce of ``world`` flags, to name the ranks).
The price of reading once per epoch: the batches after the first non-finite one
of that epoch still run (on the non-finite parameters) before the epoch's check
stops the run; no later epoch starts and no checkpoint holds them.

**Why a loss becomes non-finite.** Mostly the updates diverge (a learning rate
too large for the data): lower ``lr``. A model that divides by degrees can make
it infinite from the first batch: PyGT's ``DCRNN`` (its ``DConv``) normalizes
the reverse diffusion by the in-degree of each edge's source vertex, infinite
for a vertex with out-edges and no in-edges. :func:`in_degree_cause` finds such
a vertex (only when the check fails) so the error says which and what to do.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import NonFiniteLossError

__all__ = ["first_nonfinite", "in_degree_cause", "signal_graphs", "check_batch_losses"]


def first_nonfinite(values: Sequence[float]) -> Optional[int]:
    """The index of the first NaN or infinite value of ``values``, ``None`` if all are finite."""
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
    return None


def _divides_by_in_degree(model: Any) -> bool:
    """Whether ``model`` holds PyGT's diffusion convolution (``DCRNN``'s and ``BatchedDCRNN``'s ``DConv``)."""
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    return any(type(m).__name__ in ("DConv", "BatchedDConv")
               and type(m).__module__.startswith("torch_geometric_temporal") for m in modules)


def _no_in_edge(edge_index: Tensor, edge_weight: Optional[Tensor]) -> Tensor:
    """The sources of ``edge_index`` whose in-degree (the sum of ``edge_weight`` into them) is 0."""
    row, col = edge_index[0].long().cpu(), edge_index[1].long().cpu()
    if row.numel() == 0:
        return row
    n = int(torch.maximum(row.max(), col.max())) + 1
    w = torch.ones(col.numel(), dtype=torch.float64) if edge_weight is None else edge_weight.detach().cpu().double()
    deg_in = torch.zeros(n, dtype=torch.float64).index_add_(0, col, w)
    return row[deg_in.index_select(0, row) == 0].unique()


def signal_graphs(signal: Any) -> Iterable[tuple]:
    """:func:`in_degree_cause`'s graphs of a :class:`~pyg_dynscale.data.DynamicGraphSignal`: each snapshot's
    edges (rows of the snapshot) with the vertex id of each row (``None``: the rows are the vertices)."""
    ids = None if signal.local_ids else signal.node_id
    ptr = signal.node_ptr.tolist()
    for t in range(signal.num_snapshots):
        yield (t, *signal.snapshot_edges(t), None if ids is None else ids[ptr[t]:ptr[t + 1]])


def in_degree_cause(model: Any, graphs: Iterable[tuple]) -> Optional[str]:
    r"""Why ``model`` makes the loss infinite on ``graphs`` (``(snapshot,
    edge_index, edge_weight or None[, vertex id of each row])`` tuples; the
    rows are the vertices without the ids), or ``None``: a model holding
    PyGT's ``DConv`` (``DCRNN``) divides by the in-degree of each edge's source
    vertex, infinite where that vertex has out-edges and no in-edges (with
    weights: no positive in-weight). Says the first such snapshot and vertex
    and how many snapshots have one. Called in the error path only."""
    if not _divides_by_in_degree(model):
        return None
    first, count = None, 0
    for t, edge_index, edge_weight, *ids in graphs:
        bad = _no_in_edge(edge_index, edge_weight)
        if bad.numel():
            count += 1
            if first is None:
                row = int(bad[0])
                first = (t, int(ids[0][row]) if ids and ids[0] is not None else row, int(bad.numel()))
    if first is None:
        return None
    t, v, n = first
    more = f" (and {n - 1} more there)" if n > 1 else ""
    return (f"PyGT's DCRNN divides by the in-degree of each edge's source vertex: vertex {v}{more} has out-edges "
            f"and no in-edges in snapshot {t} ({count} of the snapshots have such a vertex).")


def _nonfinite_ranks(local: Optional[float], group: Optional[Any]) -> tuple:
    """The ranks of ``group`` whose ``local`` share is non-finite (every rank calls it: the error path's one
    collective, a host all-reduce of one flag per rank); ``()`` without a process group."""
    import torch.distributed as dist

    from .ranks import host_all_reduce

    if local is None or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) < 2:
        return ()
    flags = torch.zeros(dist.get_world_size(group), dtype=torch.float64)
    flags[dist.get_rank(group)] = float(not math.isfinite(local))
    return tuple(int(r) for r in host_all_reduce(flags, "sum", group).nonzero().flatten().tolist())


def check_batch_losses(losses: Sequence[float], *, epoch: int, optimizer: Any = None,
                       local: Optional[Sequence[Any]] = None, group: Optional[Any] = None, model: Any = None,
                       graphs: Any = None) -> None:
    r"""Raise :class:`~pyg_dynscale.errors.NonFiniteLossError` if one of an
    epoch's batch losses is NaN or infinite, naming the first.

    Args:
        losses: the epoch's batch losses in step order, as the trainer read
            them (under a process group: summed over the ranks, the same on
            every rank -- every rank must call this with them).
        epoch: the epoch, counted from 0 (the trainer's counter before it
            advances); the error counts from 1.
        optimizer: the trainer's optimizer: the fix names its learning rate.
        local: under a process group, this rank's share of each batch loss
            (floats or ``[]``/``[1]`` tensors), to name the ranks whose share
            was non-finite (a collective of ``group``, in the error path
            only); ``None`` for a trainer of one process.
        group: the process group the losses were summed over (default: the
            default group).
        model: the model; with ``graphs`` (a callable returning
            :func:`in_degree_cause`'s tuples, e.g. :func:`signal_graphs`) the
            error names a vertex that makes a degree-normalized model
            infinite.
    """
    bad = first_nonfinite(losses)
    if bad is None:
        return
    mine = None if local is None else float(torch.as_tensor(local[bad]).reshape(-1)[0])
    ranks = _nonfinite_ranks(mine, group)
    cause = in_degree_cause(model, graphs()) if model is not None and graphs is not None else None
    if cause is not None:
        raise NonFiniteLossError(losses[bad], epoch + 1, bad + 1, len(losses), ranks=ranks, reason="in_degree",
                                 cause=cause, fix="give each such vertex an in-edge (a self-loop, e.g. "
                                 "torch_geometric.utils.add_self_loops, or the reverse edges: to_undirected) "
                                 "or use another model.")
    lr = optimizer.param_groups[0].get("lr") if optimizer is not None and optimizer.param_groups else None
    now = f" (it is {lr:g})" if isinstance(lr, (int, float)) else ""
    raise NonFiniteLossError(losses[bad], epoch + 1, bad + 1, len(losses), ranks=ranks,
                             fix=f"lower lr{now}, or train in float64.")
